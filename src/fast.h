/* fast.h — the malloc and free fast paths, inlined into every entry point
 * (api.c, override.c, override_cxx.c, new_delete.cpp's callees) so that the common case
 * never calls out of its translation unit. Design: see alloc.c.
 *
 * malloc fast path: size <= FW_DIRECT_MAX, and the page heap->direct[size]
 * names has a free block whose link passes its check (page.h). New threads
 * and cautious mode point direct[] at fw_page_empty, so they take the slow
 * path without a test of their own.
 * free fast path: the block's slice descriptor carries this thread's id in
 * its tag, which fw_page_flags_set() keeps only while the page is owned by
 * the thread and has no flag (not full, not aligned, not a later slice of a
 * multi-slice page, not cautious mode): one compare covers all of it. */
#ifndef FW_FAST_H
#define FW_FAST_H
#include "front.h"
#include "heap.h"
#include "thread.h"
#include "os.h"
#include "prof.h"

/* The hit halves of the two paths; entry points whose miss does more
 * (operator new and delete: cautious mode's form checks) use them directly.
 * In cautious mode neither can hit: direct[] names fw_page_empty and every
 * page is flagged, so such entry points test the option on the miss only.
 * The TLS pointer is read only once the size is known to fit. */
FW_INLINE void *fw_malloc_try_fast(size_t size) {
  return fw_likely(size <= FW_DIRECT_MAX) ? fw_page_pop_fast(FW_TLS(fw_tls_heap)->direct[size]) : NULL;
}
/* Only the counting flavour (libfreeway-prof.so) counts the fast frees on
 * their page: the default's ledger has no alloc and free counts (survey.c). */
#if FW_PROF_ENTRIES
#define fw_page_push_fast fw_page_push
#else
#define fw_page_push_fast fw_page_push_uncounted
#endif
FW_INLINE bool fw_free_try_fast(void *p) {
  if (fw_unlikely(p == NULL)) return true;
  fw_page_t *page = fw_ptr_slice(fw_ptr_segment(p), p);
  if (fw_likely(__atomic_load_n(&page->tag, __ATOMIC_RELAXED) == fw_thread_id())) {
    if (fw_unlikely(fw_page_push_fast(page, (fw_block_t *)p))) fw_heap_page_empty(page);
    return true;
  }
  return false;
}

#if FW_PROF_ENTRIES
/* The profiling flavour (libfreeway-prof.so): every allocation counts
 * down to the heap profiler's next sample (prof.h). */
static FW_NOINLINE FW_COLD void *fw_malloc_slow_counted(size_t size, fw_heap_t *heap) {
  void *b = fw_malloc_slow(size, heap);
  return fw_prof_countdown(FW_TLS(fw_tls_heap), b, size);  /* the heap may be new */
}
/* The hit of the flavour's allocations (malloc's here, operator new's in
 * api.c): a block of the heap's direct table, counted down, returned from
 * the function it is used in. Only tail calls leave it, so that function
 * needs no stack frame: the countdown adds one subtract and one branch.
 * On a miss it falls through to the caller's slow path, which must be a
 * tail call too (and count down itself). */
#define FW_PROF_HIT(heap, size)                                               \
  do {                                                                        \
    if (fw_likely((size) <= FW_DIRECT_MAX)) {                                 \
      fw_block_t *b_ = fw_page_pop_fast((heap)->direct[size]);                \
      if (fw_likely(b_ != NULL)) {                                            \
        if (fw_prof_count_down((heap), (size))) return b_;                     \
        return fw_prof_sampled((heap), b_, (size));                           \
      }                                                                       \
    }                                                                         \
  } while (0)
FW_INLINE void *fw_malloc_fast(size_t size) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  FW_PROF_HIT(heap, size);
  return fw_malloc_slow_counted(size, heap);
}
/* The allocations that do not go through fw_malloc_fast (calloc, realloc,
 * the aligned forms) count down on their way out, inline: a call out to
 * count made fw_heap_malloc keep a stack frame, 32 more instructions per
 * call than the library without the profiler (bench_heapfree under
 * callgrind). The thread's own heap counts; a thread without a heap yet is
 * not sampled. */
FW_INLINE void fw_prof_account_fast(void *p, size_t size) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  if (fw_unlikely(heap == &fw_heap_empty)) return;
  if (!fw_prof_count_down(heap, size)) fw_prof_sample(heap, p, size);
}
#define FW_PROF_ACCOUNT(p, size) fw_prof_account_fast((p), (size))
/* A user heap's calls (heap_api.c) count down on that heap: only its owner
 * thread allocates from it, and each heap's countdown is a Poisson process
 * of the same rate per byte, so their union samples every byte as one
 * countdown would. It saves the thread-heap load and test: bench_heapfree
 * --blocks 100000 --rounds 1 under callgrind, fw_heap_malloc 6.80M
 * instructions counting down on the thread's heap, 6.20M on its own. */
#define FW_PROF_ACCOUNT_HEAP(heap, p, size)                                   \
  do {                                                                        \
    if (!fw_prof_count_down((heap), (size))) fw_prof_sample((heap), (p), (size)); \
  } while (0)
#else
FW_INLINE void *fw_malloc_fast(size_t size) {
  void *b = fw_malloc_try_fast(size);
  if (fw_likely(b != NULL)) return b;
  return fw_malloc_slow(size, FW_TLS(fw_tls_heap));
}
#define FW_PROF_ACCOUNT(p, size) ((void)0)
#define FW_PROF_ACCOUNT_HEAP(heap, p, size) ((void)0)
#endif

/* operator new's and delete's misses (api.c): cautious mode records the
 * form of each new and checks each delete against it. fw_new_miss counts
 * down in the profiling flavour, as the hit does. */
FW_HIDDEN void *fw_new_miss(size_t size, unsigned form);
FW_HIDDEN void fw_delete_slow(void *p, unsigned how, size_t size, size_t alignment);
/* The body of an operator new's C function (api.c, override_cxx.c): the
 * hit, else a tail call of miss(size, form). */
#if FW_PROF_ENTRIES
#define FW_NEW_BODY(size, miss, form)                                              \
  fw_heap_t *heap = FW_TLS(fw_tls_heap);                                           \
  FW_PROF_HIT(heap, size);                                                         \
  return miss(size, form);
#else
#define FW_NEW_BODY(size, miss, form)                                              \
  void *p = fw_malloc_try_fast(size);                                              \
  if (fw_likely(p != NULL)) return p;                                              \
  return miss(size, form);
#endif
/* The body of an operator delete's C function (api.c, override_cxx.c); p
 * is its first parameter, the arguments a form lacks are 0. */
#define FW_DELETE_BODY(how, size, alignment)                                       \
  if (fw_likely(fw_free_try_fast(p))) return;                                      \
  fw_delete_slow(p, how, size, alignment);

FW_INLINE void fw_free_fast(void *p) {
  if (fw_unlikely(!fw_free_try_fast(p))) fw_free_slow(p);
}

/* The thread's heap for an entry point that is not the fast path: NULL sends
 * the call to fw_thread_alloc. */
FW_INLINE fw_heap_t *fw_ready_heap(void) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  return fw_likely(heap != &fw_heap_empty) ? heap : NULL;
}

#endif
