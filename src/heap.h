/* heap.h — heaps: the thread's default heap and those made by fw_heap_new.
 * A heap owns pages; its thread owns the segments they sit in. Everything
 * here runs on the heap's own thread; the public API (heap_api.c) checks
 * that before it calls in. */
#ifndef FW_HEAP_H
#define FW_HEAP_H
#include "types.h"
#include "os.h"

/* A heap with no pages and every direct[] slot empty: what a thread's
 * pointer names until its first allocation (and again once it has exited),
 * so that the malloc fast path needs no "initialised" test. */
FW_HIDDEN extern fw_heap_t fw_heap_empty;
/* The calling thread's default heap (fw_heap_empty before its first malloc). */
FW_HIDDEN extern FW_THREAD_LOCAL fw_heap_t *fw_tls_heap;

FW_HIDDEN fw_heap_t *fw_heap_struct_new(fw_tld_t *tld, bool is_default);
FW_HIDDEN void fw_heap_struct_free(fw_heap_t *heap);
/* Blocks that remote frees pushed onto heap structs after they were given
 * up (a race as old as the free): the caller frees them again. */
FW_HIDDEN fw_block_t *fw_heap_pool_take_delayed(void);

/* A page with a free block for class cls: the queue, a fresh slot of the
 * thread's segments, an adopted segment's, or a new segment's. */
FW_HIDDEN fw_page_t *fw_heap_page_for(fw_heap_t *heap, size_t cls);
/* The same when the queue has been searched already (fw_page_queue_find). */
FW_HIDDEN fw_page_t *fw_heap_page_new(fw_heap_t *heap, size_t cls);
/* A fresh page of small class cls for the heap profiler's sampled blocks only
 * (FW_PF_SAMPLES): in the heap's full list, never in a class queue, so that
 * every free from it takes the slow path and none from other pages does.
 * NULL without memory. */
FW_HIDDEN fw_page_t *fw_heap_page_samples(fw_heap_t *heap, size_t cls);
/* A large block: from the cache, a span, or a segment of its own. */
FW_HIDDEN void *fw_heap_large_malloc(fw_heap_t *heap, size_t size, size_t align);
/* The owner frees the block of a large page that carries no state but being
 * in the full list (flags exactly FW_PF_FULL, one block live, no remote free
 * pending): what fw_heap_free_local and the page's retirement do for it,
 * without the small pages' list push, collect and scan. */
FW_HIDDEN void fw_heap_large_free_local(fw_page_t *page);
/* The owner frees a block (not on the fast path). */
FW_HIDDEN void fw_heap_free_local(fw_page_t *page, fw_block_t *b);
/* The free fast path left a page with no live block. */
FW_HIDDEN void fw_heap_page_empty(fw_page_t *page);
FW_HIDDEN void fw_heap_collect_delayed(fw_heap_t *heap);
/* Purging when due (force: now, and the caches too). */
FW_HIDDEN void fw_heap_housekeeping(fw_heap_t *heap, bool force);
FW_HIDDEN void fw_heap_retire_idle(fw_heap_t *heap);
/* Empties a heap: live pages go to target (delete), are detached for their
 * segments to be abandoned (target NULL: thread exit), or are dropped with
 * their blocks (destroy). */
FW_HIDDEN void fw_heap_release(fw_heap_t *heap, fw_heap_t *target, bool destroy);
FW_HIDDEN void fw_heap_collect_internal(fw_heap_t *heap, bool force);
FW_HIDDEN void fw_heap_stats_of(fw_heap_t *heap, fw_heap_stats_t *out);
FW_HIDDEN bool fw_heap_contains_block(const fw_heap_t *heap, const void *p);
FW_HIDDEN void fw_heap_visit_blocks(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg);
FW_HIDDEN void fw_heap_fork_prepare(void);
FW_HIDDEN void fw_heap_fork_parent(void);
FW_HIDDEN void fw_heap_fork_child(void);

#ifdef FW_DEBUG
FW_HIDDEN void fw_heap_validate(const fw_heap_t *heap);
#define FW_VALIDATE_HEAP(h) fw_heap_validate(h)
#else
#define FW_VALIDATE_HEAP(h) ((void)0)
#endif

#endif
