/* fast.h — the malloc and free fast paths, inlined into every entry point
 * (alloc.c, free.c, override.c) so that the common case never calls out of
 * its translation unit. Preconditions and design: see alloc.c.
 *
 * malloc fast path: size <= FW_DIRECT_MAX, and the page heap->direct[size]
 * names has a free block (one slot per byte size: 8 KiB per heap buys two
 * instructions off every small malloc). New threads and cautious mode point direct[] at
 * fw_page_empty, so they take the slow path without a test of their own.
 * free fast path: the block's slice descriptor carries this thread's id in
 * its tag, which fw_page_flags_set() keeps only while the page is owned by
 * the thread and has no flag (not full, not aligned, not a later slice of a
 * multi-slice page, not cautious mode): one compare covers all of it. */
#ifndef FW_FAST_H
#define FW_FAST_H
#include "internal.h"

FW_INLINE void *fw_heap_malloc_fast(fw_heap_t *heap, size_t size) {
  if (fw_likely(size <= FW_DIRECT_MAX)) {
    fw_page_t *page = heap->direct[size];
    fw_block_t *b = page->free;
    if (fw_likely(b != NULL)) {
      page->free = b->next;
      page->used++;
      return b;
    }
  }
  return fw_malloc_generic(heap, size);
}

/* The same, reading the TLS pointer only once the size is known to fit. */
FW_INLINE void *fw_malloc_fast(size_t size) {
  if (fw_likely(size <= FW_DIRECT_MAX)) {
    fw_page_t *page = fw_tls_heap->direct[size];
    fw_block_t *b = page->free;
    if (fw_likely(b != NULL)) {
      page->free = b->next;
      page->used++;
      return b;
    }
  }
  return fw_malloc_slow(size, fw_tls_heap);
}

FW_HIDDEN void fw_page_retire_empty(fw_page_t *page);

FW_INLINE void fw_free_fast(void *p) {
  if (fw_unlikely(p == NULL)) return;
  fw_page_t *page = fw_ptr_slice(fw_ptr_segment(p), p);
  if (fw_likely(__atomic_load_n(&page->tag, __ATOMIC_RELAXED) == fw_thread_id())) {
    fw_block_t *b = (fw_block_t *)p;
    b->next = page->free;
    page->free = b;
    if (fw_unlikely(--page->used == 0)) fw_page_retire_empty(page);
    return;
  }
  fw_free_generic(p);
}

#endif
