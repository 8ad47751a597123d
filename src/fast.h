/* fast.h — the malloc and free fast paths, inlined into every entry point
 * (api.c, override.c, new_delete.cpp's callees) so that the common case
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

/* The hit halves of the two paths; entry points whose miss does more
 * (operator new and delete: cautious mode's form checks) use them directly.
 * In cautious mode neither can hit: direct[] names fw_page_empty and every
 * page is flagged, so such entry points test the option on the miss only.
 * The TLS pointer is read only once the size is known to fit. */
FW_INLINE void *fw_malloc_try_fast(size_t size) {
  return fw_likely(size <= FW_DIRECT_MAX) ? fw_page_pop_fast(fw_tls_heap->direct[size]) : NULL;
}
FW_INLINE bool fw_free_try_fast(void *p) {
  if (fw_unlikely(p == NULL)) return true;
  fw_page_t *page = fw_ptr_slice(fw_ptr_segment(p), p);
  if (fw_likely(__atomic_load_n(&page->tag, __ATOMIC_RELAXED) == fw_thread_id())) {
    if (fw_unlikely(fw_page_push(page, (fw_block_t *)p))) fw_heap_page_empty(page);
    return true;
  }
  return false;
}

FW_INLINE void *fw_malloc_fast(size_t size) {
  void *b = fw_malloc_try_fast(size);
  if (fw_likely(b != NULL)) return b;
  return fw_malloc_slow(size, fw_tls_heap);
}

FW_INLINE void fw_free_fast(void *p) {
  if (fw_unlikely(!fw_free_try_fast(p))) fw_free_generic(p);
}

/* The thread's heap for an entry point that is not the fast path: NULL sends
 * the call to fw_thread_alloc. */
FW_INLINE fw_heap_t *fw_ready_heap(void) {
  fw_heap_t *heap = fw_tls_heap;
  return fw_likely(heap != &fw_heap_empty) ? heap : NULL;
}

#endif
