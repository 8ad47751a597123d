/* prof.h — the heap profiler (FREEWAY_PROFILE, docs/observability.md):
 * sampled allocations with their call stacks, written as pprof profiles. */
#ifndef FW_PROF_H
#define FW_PROF_H
#include "types.h"

/* FREEWAY_PROFILE, set once by fw_prof_init. */
FW_HIDDEN extern bool fw_prof_on;
/* Reads the options; before the first heap is set up. */
FW_HIDDEN void fw_prof_init(void);
/* The profiler's cache of a thread's data (tld->prof_cache) passes to
 * another thread: what it kept of the last one's stacks goes. */
FW_HIDDEN void fw_prof_cache_reset(void *cache);
/* Around fork() (thread.c). */
FW_HIDDEN void fw_prof_fork_prepare(void);
FW_HIDDEN void fw_prof_fork_parent(void);
FW_HIDDEN void fw_prof_fork_child(void);
/* The countdown of heap ran out at the allocation of p (size bytes
 * requested; p may be NULL, heap may be fw_heap_empty): records p with the
 * caller's stack and starts the next countdown. */
FW_HIDDEN void fw_prof_sample(fw_heap_t *heap, void *p, size_t size);
/* The same for a plain allocation (malloc, new), whose block may be traded
 * for one of the heap's page of sampled blocks: returns the block to hand
 * out (a tail call for the entry points). */
FW_HIDDEN void *fw_prof_sampled(fw_heap_t *heap, void *p, size_t size);
/* The countdown for an allocation made outside the sampling entry points
 * (calloc, realloc, aligned forms): called only with profiling on. */
FW_HIDDEN void fw_prof_account(void *p, size_t size);
/* heap is being destroyed with its blocks: their samples are dropped from
 * the in-use figures. */
FW_HIDDEN void fw_prof_forget_heap(const fw_heap_t *heap);
/* b, the start of a block of page (flagged FW_PF_SAMPLED), is being freed:
 * forgets its sample, if it has one. */
FW_HIDDEN void fw_prof_free(fw_page_t *page, const void *b);

/* Calls fn for every call site with sampled blocks in use: its stack and
 * the estimated live objects and bytes (the leak report's sampled sites). */
FW_HIDDEN void fw_prof_visit_inuse(void (*fn)(const uintptr_t *pcs, size_t npcs, double objects, double bytes,
                                              void *arg),
                                   void *arg);
/* The profile as a pprof message to fd (fw_prof_dump's body); -1 if it
 * could not be written whole. */
FW_HIDDEN int fw_prof_dump_fd(int fd);

/* The countdown of the sampling entry points, after a plain allocation:
 * one subtract and a branch not taken. Returns the block to hand out. */
FW_INLINE void *fw_prof_countdown(fw_heap_t *heap, void *p, size_t size) {
  if (fw_unlikely((heap->prof_left -= (intptr_t)size) < 0)) return fw_prof_sampled(heap, p, size);
  return p;
}

#endif
