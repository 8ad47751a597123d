/* owns.h — whether a pointer is freeway's, asked about pointers that may
 * come from another allocator (freeway-redirect.dll routes the C runtime's
 * calls with it). Neither test faults, whatever p is. */
#ifndef FW_OWNS_H
#define FW_OWNS_H
#include "base.h"

/* The memory at p is freeway's (an arena, or a segment mapped on its own):
 * a pointer into it can only have come from freeway, and free and realloc
 * of it are freeway's to judge. A few compares for memory in an arena; a
 * system call for any other. */
FW_HIDDEN bool fw_owns_memory(const void *p);
/* p is a pointer freeway handed out (a block's start, or an interior
 * pointer of an aligned or large block), live or freed. */
FW_HIDDEN bool fw_owns_block(const void *p);

#endif
