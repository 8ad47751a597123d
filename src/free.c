/* free.c — local and remote frees, and usable sizes. The fast path is in
 * fast.h; this file holds what it hands over. See alloc.c for the design. */
#include "fast.h"

void fw_page_retire_empty(fw_page_t *page) {
  fw_page_retire(atomic_load_explicit(&page->heap, memory_order_relaxed), page);
}

/* A free by the owning thread that the fast path could not finish. */
void fw_free_local_slow(fw_page_t *page, fw_block_t *b) {
  if (fw_unlikely(page->flags & FW_PF_CHECKED)) fw_check_free(page, b);
  fw_free_local_unchecked(page, b);
}

/* For blocks the allocator itself takes back before handing them out. */
void fw_free_local_unchecked(fw_page_t *page, fw_block_t *b) {
  fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
  b->next = page->free;
  page->free = b;
  if (--page->used == 0) {
    fw_page_retire(heap, page);
    return;
  }
  if (page->flags & FW_PF_FULL) fw_page_unfull(heap, page);
}

/* A free by another thread: one compare-and-swap, on the page's list or, if
 * the page is full, on its heap's delayed list. */
void fw_free_remote(fw_page_t *page, fw_block_t *b) {
  if (fw_unlikely(fw_page_flags(page) & FW_PF_CHECKED)) fw_check_free(page, b);
  uintptr_t x = atomic_load_explicit(&page->xfree, memory_order_relaxed);
  while (true) {
    if (x & FW_XFREE_DELAYED) {
      fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_acquire);
      if (heap) {
        fw_block_t *head = atomic_load_explicit(&heap->delayed, memory_order_relaxed);
        do {
          b->next = head;
        } while (!atomic_compare_exchange_weak_explicit(&heap->delayed, &head, b, memory_order_release,
                                                        memory_order_relaxed));
        return;
      }
    }
    b->next = (fw_block_t *)(x & ~FW_XFREE_DELAYED);
    if (atomic_compare_exchange_weak_explicit(&page->xfree, &x, (uintptr_t)b | (x & FW_XFREE_DELAYED),
                                              memory_order_release, memory_order_relaxed))
      return;
  }
}

void fw_free_generic(void *p) {
  if (!p) return;
  /* A later slice of this thread's medium page: the descriptor there only
   * points back to the page, whose own tag says who owns it. */
  fw_page_t *slice = fw_ptr_slice(fw_ptr_segment(p), p);
  if (fw_page_flags(slice) == FW_PF_REDIRECT) {
    fw_page_t *page = slice - slice->slice_offset;
    if (__atomic_load_n(&page->tag, __ATOMIC_RELAXED) == fw_thread_id() && page->kind == FW_KIND_MEDIUM) {
      fw_block_t *b = (fw_block_t *)p;
      b->next = page->free;
      page->free = b;
      if (fw_unlikely(--page->used == 0)) fw_page_retire_empty(page);
      return;
    }
  }
  if (fw_unlikely(fw_opt(CAUTIOUS)) && !fw_check_pointer(p))
    fw_check_fail("free of a pointer that freeway did not hand out", p, 0);
  fw_segment_t *seg = fw_ptr_segment(p);
  fw_page_t *page = fw_ptr_page(p);
  fw_block_t *b = (fw_block_t *)p;
  if ((fw_page_flags(page) & FW_PF_ALIGNED) || page->kind == FW_KIND_LARGE) b = fw_page_block_start(page, p);
  uintptr_t owner = atomic_load_explicit(&seg->thread_id, memory_order_acquire);
  if (owner == fw_thread_id() || (owner == 0 && fw_segment_reclaim_on_free(seg)))
    fw_free_local_slow(page, b);
  else
    fw_free_remote(page, b);
}

size_t fw_usable_size(const void *p) {
  if (!p) return 0;
  if (fw_unlikely(fw_opt(CAUTIOUS))) {
    return fw_check_usable(p);
  }
  return fw_page_usable(fw_ptr_page(p), p);
}

void fw_free(void *p) { fw_free_fast(p); }
void fw_free_direct(void *p) { fw_free_fast(p); }  /* for operator delete: not interposable */

/* The size is a hint only: the block's page knows its size class. */
void fw_free_sized(void *p, size_t size) {
  (void)size;
  fw_free_fast(p);
}

void fw_free_aligned(void *p, size_t alignment) {
  (void)alignment;
  fw_free_fast(p);
}

void fw_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  (void)size;
  fw_free_fast(p);
}

size_t fw_malloc_usable_size(const void *p) { return fw_usable_size(p); }
