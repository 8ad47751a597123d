/* thread.h — process and thread life cycle: lazy set-up on the first
 * allocation, teardown at thread exit, allocation by a thread that has
 * passed its exit, fork handlers. */
#ifndef FW_THREAD_H
#define FW_THREAD_H
#include "types.h"

FW_HIDDEN void fw_process_init(void);
/* The fast path missed (fast.h): heap is the thread's pointer, possibly
 * fw_heap_empty. */
FW_HIDDEN void *fw_malloc_slow(size_t size, fw_heap_t *heap);
/* The free fast path missed (fast.h); p may be NULL. */
FW_HIDDEN void fw_free_slow(void *p);
/* An allocation with no heap ready: the thread's first, or one made after
 * the thread's exit began (served, then everything abandoned again). */
enum { FW_OP_MALLOC, FW_OP_ZERO, FW_OP_ALIGNED, FW_OP_REALLOC };
FW_HIDDEN void *fw_thread_alloc(int op, void *p, size_t size, size_t align);
/* The thread's default heap, set up if needed; NULL in a thread whose exit
 * has begun, or without memory. */
FW_HIDDEN fw_heap_t *fw_thread_heap(void);
/* Calls fn with every live thread's data, and with some of threads gone
 * (their counts are zero and they have no heap); without a lock, so from
 * any thread and in a signal handler: what fn reads may change meanwhile. */
FW_HIDDEN void fw_thread_visit(void (*fn)(const fw_tld_t *tld, void *arg), void *arg);
/* Frees blocks that remote frees left on recycled heap structs. */
FW_HIDDEN void fw_thread_free_late(void);

#endif
