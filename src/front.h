/* front.h — the malloc/free front end: every variant of the malloc family
 * on a heap that is ready (a thread's heap or a user heap; never
 * fw_heap_empty: the layers above make sure of that), and free of any
 * pointer. Cautious mode's checks are hooks called from here. */
#ifndef FW_FRONT_H
#define FW_FRONT_H
#include "page.h"

/* Everything the fast path below does not do. (size, heap): the order the
 * malloc fast path has them in, so that its miss reaches this with a
 * compare and a jump. */
FW_HIDDEN void *fw_malloc_generic(size_t size, fw_heap_t *heap);
FW_HIDDEN void *fw_heap_malloc_zero(fw_heap_t *heap, size_t size, bool zero);
FW_HIDDEN void *fw_heap_malloc_aligned_ex(fw_heap_t *heap, size_t size, size_t align, bool zero);
FW_HIDDEN void *fw_realloc_ex(fw_heap_t *heap, void *p, size_t size);
/* free of anything but the fast path's case; p may be NULL. */
FW_HIDDEN void fw_free_generic(void *p);
/* A free in cautious mode: how is the form of allocation the call expects
 * (check.h) and whether size and align were given; p may be NULL. */
FW_HIDDEN void fw_free_checked(void *p, unsigned how, size_t size, size_t align);
FW_HIDDEN size_t fw_usable_size(const void *p);
/* Frees a block that was checked already (a late remote free found on a
 * recycled heap struct): routed like any other free. */
FW_HIDDEN void fw_free_unchecked(fw_block_t *b);
FW_HIDDEN void *fw_enomem(void);
/* Stops the process with a report if p is not a live block of page (b: its
 * block start); freed names what a block found free already means. */
FW_HIDDEN void fw_block_check(fw_segment_t *seg, fw_page_t *page, const void *p, const fw_block_t *b,
                              const char *freed);
/* The report of fw_block_check: what happened to p, then abort. */
FW_HIDDEN __attribute__((noreturn)) void fw_block_report(fw_segment_t *seg, const fw_page_t *page, const void *p,
                                                         const char *what);

/* The malloc fast path on a ready heap: pop the free list of the page that
 * direct[size] names. */
FW_INLINE void *fw_heap_malloc_fast(fw_heap_t *heap, size_t size) {
  if (fw_likely(size <= FW_DIRECT_MAX)) {
    fw_block_t *b = fw_page_pop_fast(heap->direct[size]);
    if (fw_likely(b != NULL)) return b;
  }
  return fw_malloc_generic(size, heap);
}

#endif
