/* large.h — blocks above FW_MEDIUM_MAX (128 KiB): one block per LARGE page,
 * and the heap's cache of freed span pages for reuse. */
#ifndef FW_LARGE_H
#define FW_LARGE_H
#include "types.h"
#include "page.h"
#include "segment.h"
#include "options.h"

/* Makes a LARGE page fresh from the segment layer heap's live block: in
 * the full list, remote frees routed through the heap (a cached page is set
 * up already: fw_large_cache_took). */
FW_HIDDEN void *fw_large_take(fw_heap_t *heap, fw_page_t *page, size_t size);
/* The cache keeps span pages of up to FW_LCACHE_DENSE_SLICES slices (1
 * MiB), and up to FW_LCACHE_MAX_SLICES (2 MiB, every span page) for a
 * thread whose big blocks are written in part only: see large.c. */
#define FW_LCACHE_DENSE_SLICES 16
#define FW_LCACHE_MAX_SLICES FW_SPAN_MAX_SLICES
/* How many times FREEWAY_LARGE_CACHE a thread whose big blocks are written
 * in part only may hold (large.c). */
#define FW_LCACHE_SPARSE_CAP 4
/* page->ends: a bit for each 4 KiB of a large page's last slice */
#define FW_LCACHE_END_SHIFT 12
_Static_assert((FW_SLICE_SIZE >> FW_LCACHE_END_SHIFT) <= 32, "page->ends has a bit for each 4 KiB of a slice");
/* A cached page for a block of size bytes made heap's live block (as
 * fw_large_take), or NULL. */
FW_HIDDEN void *fw_large_cache_alloc(fw_heap_t *heap, size_t size);

/* The 4 KiB page of its last slice that a block of size bytes ends in, as
 * a bit of page->ends. */
FW_INLINE uint32_t fw_large_end(size_t size) {
  return (uint32_t)1 << (((size - 1) & (FW_SLICE_SIZE - 1)) >> FW_LCACHE_END_SHIFT);
}
/* page, which *link names in its bin, as heap's live block of size bytes.
 * It kept its set-up as a large page of the heap, and its place in the full
 * list, while it waited. */
FW_INLINE void *fw_large_cache_took(fw_heap_t *heap, fw_page_t **link, fw_page_t *page, size_t size) {
  size_t bytes = (size_t)page->slices * FW_SLICE_SIZE;
  *link = page->lnext;
  heap->lcache_bytes -= bytes;
  heap->lcache_recent += bytes;
  page->is_zero = 0;
  page->ends |= fw_large_end(size);
  page->used = 1;
  fw_count_add(&heap->tld->counts.large_allocs, 1);
  atomic_store_explicit(&page->xfree, FW_XFREE_DELAYED, memory_order_relaxed);
  fw_page_flags_set(page, page->flags | FW_PF_FULL);
  return page->area;
}
/* The cache's common hit, inlined into malloc's slow path (alloc.c): the
 * bin's first page, when an earlier block ended in the same 4 KiB page as
 * this one will; anything else is fw_large_cache_alloc's. size is above
 * FW_MEDIUM_MAX and within FW_LCACHE_MAX_SLICES slices. */
FW_INLINE void *fw_large_cache_hit(fw_heap_t *heap, size_t size) {
  fw_page_t **link = &heap->lcache[(size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE];
  fw_page_t *page = *link;
  if (fw_likely(page != NULL && (page->ends & fw_large_end(size)))) return fw_large_cache_took(heap, link, page, size);
  return fw_large_cache_alloc(heap, size);
}
/* A request of size bytes the cache had nothing for: if it holds more than
 * FREEWAY_LARGE_CACHE, that much of it goes back to the segments. */
FW_HIDDEN void fw_large_cache_miss(fw_heap_t *heap, size_t size);
/* all: every cached page; else those already seen by the previous look */
FW_HIDDEN void fw_large_cache_flush(fw_heap_t *heap, bool all);
/* FREEWAY_LARGE_CACHE's bytes, FW_LCACHE_SPARSE_CAP times for a thread
 * whose big blocks are written in part only. */
FW_INLINE size_t fw_large_cache_option_cap(const fw_heap_t *heap) {
  size_t cap = (size_t)fw_opt(LARGE_CACHE) << 20;
  return fw_segment_big_sparse(heap->tld) ? cap * FW_LCACHE_SPARSE_CAP : cap;
}
/* What the cache may hold (see large.c): FREEWAY_LARGE_CACHE, or more
 * while the heap hands out more than that in such blocks between two looks. */
FW_INLINE size_t fw_large_cache_cap(const fw_heap_t *heap) {
  size_t cap = fw_large_cache_option_cap(heap);
  return cap && heap->lcache_recent > cap ? heap->lcache_recent : cap;
}
/* A freed span page (used 0, still in its heap's full list) waits in the
 * cache; false if it does not fit there, and the caller gives it back.
 * Inline: bench_objects at 1 MiB frees one per object. */
FW_INLINE bool fw_large_cache_put(fw_heap_t *heap, fw_page_t *page) {
  size_t n = page->slices, bytes = n * FW_SLICE_SIZE;
  long delay = fw_opt(PURGE_DELAY);
  if (n > FW_LCACHE_MAX_SLICES || delay == 0 || (page->flags & (FW_PF_CHECKED | FW_PF_ALIGNED)) ||
      fw_page_segment(page)->kind != FW_KIND_SPAN || heap->lcache_bytes + bytes > fw_large_cache_cap(heap) ||
      (n > FW_LCACHE_DENSE_SLICES && !fw_segment_big_sparse(heap->tld)))
    return false;
  page->idle = 0;
  page->used = 0;
  page->lnext = heap->lcache[n];
  heap->lcache[n] = page;
  /* The cache's first page since it was empty: its next look is set by
   * the next housekeeping (heap.c), which reads the clock anyway. A clock
   * read here came at every free of a program that frees each big block
   * before it takes the next: 34 of the 251 instructions of a
   * malloc(256 KiB) and free pair (callgrind). */
  if (!heap->lcache_bytes) heap->lcache_due = 0;
  heap->lcache_bytes += bytes;
  return true;
}
/* The cache emptied without a look at its pages: for a heap that has given
 * every page of its full list back already, cached ones with the rest. */
FW_HIDDEN void fw_large_cache_forget(fw_heap_t *heap);
/* realloc in place: the block grows into the free slices after it, cached
 * pages there giving way, or (a segment of its own) into the free chunks
 * after it. */
FW_HIDDEN bool fw_large_grow(fw_page_t *page, size_t size);
/* realloc in place: a block in a segment of its own gives back the chunks
 * beyond size; false for any other block, or nothing to give. */
FW_HIDDEN bool fw_large_shrink(fw_page_t *page, size_t size);

#endif
