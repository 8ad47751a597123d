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
/* fw_prof_sample for a caller that returns p (a tail call): the block
 * stays where it is (calloc's, already cleared). */
FW_HIDDEN void *fw_prof_sampled_here(fw_heap_t *heap, void *p, size_t size);
/* heap is being destroyed with its blocks: their samples are dropped from
 * the in-use figures. */
FW_HIDDEN void fw_prof_forget_heap(const fw_heap_t *heap);
/* b, the start of a block of page (flagged FW_PF_SAMPLED), is being freed:
 * forgets its sample, if it has one. */
FW_HIDDEN void fw_prof_free(fw_page_t *page, const void *b);

/* The countdown's intervals (prof.c), for the tests: an exponential of
 * mean 1 from the random word x (its low 32 bits not all 0), and one
 * drawn from the random state *state (not 0), which it moves on. */
FW_HIDDEN double fw_prof_exp_of(uint64_t x);
FW_HIDDEN double fw_prof_exp_draw(uint64_t *state);

/* Calls fn for every call site with sampled blocks in use: its stack and
 * the estimated live objects and bytes (the leak report's sampled sites). */
FW_HIDDEN void fw_prof_visit_inuse(void (*fn)(const uintptr_t *pcs, size_t npcs, double objects, double bytes,
                                              void *arg),
                                   void *arg);
/* The profile as a pprof message to fd (fw_prof_dump's body); -1 if it
 * could not be written whole. */
FW_HIDDEN int fw_prof_dump_fd(int fd);

/* page->sampled counts the page's sampled blocks; sampled_at is the
 * offset of the one there is while the count is 1, so that the page's
 * other frees need not look theirs up (prof.c and free.c). Once two were
 * there together, which one is left when one goes is not known:
 * FW_SAMPLED_MANY then stays in the count, which is never 1 again, until
 * the last one goes. FW_SAMPLED_TABLES counts, in units of
 * FW_SAMPLED_TABLE_ONE, a medium page's samples that went to the table
 * (their slot was taken): while there are none, a free whose block its
 * slot does not hold need not look in the table. (A flag that stayed
 * until the page's last sample went sent two thirds of bench_speed's
 * frees from such pages to the table's lock, 256 B-32 KiB, one thread,
 * callgrind.) */
#define FW_SAMPLED_MANY 0x80000000u
#define FW_SAMPLED_TABLE_ONE 0x01000000u
#define FW_SAMPLED_TABLES 0x7f000000u
#define FW_SAMPLED_COUNT 0x00ffffffu
_Static_assert(FW_MEDIUM_PAGE_SLICES * FW_SLICE_SIZE / FW_SMALL_MAX <= FW_SAMPLED_TABLES / FW_SAMPLED_TABLE_ONE,
               "a medium page's blocks fit the count of its samples in the table");

/* A medium page's record of the sample of its block at offset off, in the
 * descriptor of one of its later slices (prof.c); NULL for other pages. */
_Static_assert(FW_MEDIUM_PAGE_SLICES > 1, "a medium page has later slices to hold its samples");
FW_INLINE fw_page_t *fw_prof_slot(fw_page_t *page, uint32_t off) {
  if (page->kind != FW_KIND_MEDIUM) return NULL;
  return page + 1 + (off / page->block_size) % (page->slices - 1u);
}

/* For a free of the block at offset off of page (a small or medium page
 * that holds a sample), in any thread: true if that block is known not to
 * be one, so that its free needs no look-up. A page of one sample knows it
 * by its offset; a medium page of several, by the block's slot, unless
 * one of its samples went to the table. (A sample's record and count are
 * written by the owner before the block is handed out, so whichever thread
 * frees it sees them; a slot or count changed meanwhile is another
 * block's.) */
FW_INLINE bool fw_prof_not_sample(fw_page_t *page, uint32_t off) {
  uint32_t n = atomic_load_explicit(&page->sampled, memory_order_relaxed);
  if (n == 1) return off != atomic_load_explicit(&page->sampled_at, memory_order_relaxed);
  if (!n || (n & FW_SAMPLED_TABLES) || page->kind != FW_KIND_MEDIUM) return false;
  const fw_page_t *r = fw_prof_slot(page, off);
  return !atomic_load_explicit(&r->sampled, memory_order_relaxed) ||
         atomic_load_explicit(&r->sampled_at, memory_order_relaxed) != off;
}

/* The countdown itself, in every sampling entry point (fast.h, api.c,
 * heap_api.c): size more bytes allocated from heap, false once they take
 * its count below zero and the allocation is to be sampled. One subtract
 * and one branch. */
FW_INLINE bool fw_prof_count_down(fw_heap_t *heap, size_t size) {
  return fw_likely((heap->prof_left -= (intptr_t)size) >= 0);
}

/* The countdown after a plain allocation. Returns the block to hand out. */
FW_INLINE void *fw_prof_countdown(fw_heap_t *heap, void *p, size_t size) {
  if (fw_prof_count_down(heap, size)) return p;
  return fw_prof_sampled(heap, p, size);
}

#endif
