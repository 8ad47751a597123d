/* meta.h — type-stable metadata: thread data, heap structs and the arena
 * table are carved from mappings that are never returned, so that a late
 * remote free may still read a recycled heap struct safely. */
#ifndef FW_META_H
#define FW_META_H
#include "base.h"

/* Zeroed memory for metadata (size rounded to 64 bytes); NULL if the OS
 * refuses. Never freed. */
FW_HIDDEN void *fw_meta_alloc(size_t size);
FW_HIDDEN void fw_meta_fork_prepare(void);
FW_HIDDEN void fw_meta_fork_parent(void);
FW_HIDDEN void fw_meta_fork_child(void);

#endif
