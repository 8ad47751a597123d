/* large.c — large blocks (above 128 KiB): each is one LARGE page, in a span
 * segment (up to 2 MiB) or in a segment of its own, held in its heap's full
 * list so that a remote free reaches the heap. Freed span pages wait in the
 * heap's cache below; freed segments of their own wait in the thread's
 * (segment.c). See alloc.c for the design. */
#include "large.h"
#include "segment.h"
#include "page.h"
#include "options.h"
#include "os.h"
#include <string.h>

void *fw_large_take(fw_heap_t *heap, fw_page_t *page, size_t size) {
  fw_page_queue_push(heap, &heap->full, page);
  page->ends |= fw_large_end(size);
  page->cls = FW_CLASS_LARGE;
  page->used = 1;
  fw_count_add(&heap->tld->counts.large_allocs, 1);
  page->capacity = page->reserved = 1;
  atomic_store_explicit(&page->heap, heap, memory_order_relaxed);
  atomic_store_explicit(&page->xfree, FW_XFREE_DELAYED, memory_order_relaxed);
  fw_page_flags_set(page, page->flags | FW_PF_FULL);
  return page->area;
}

/* ---- the large-block cache -------------------------------------------------
 * A large block in a span segment freed by its heap's thread keeps its page
 * for a while, filed by slice count (a list through page->lnext); the next
 * request of the same slice count takes it whole. Placing it anew would put
 * its first and last bytes (often the only pages a big buffer touches at
 * once) on pages never touched before: a page fault each, and RSS creeping
 * up to the span's full size. Pages not reused for one to two purge delays
 * go back to their segment (the idle byte marks those already seen by the
 * previous look). A cached page stays in its heap's full list, so that a
 * heap given up frees it with the rest, and a hit and a put skip the list's
 * unlink and link (and the writes to the neighbours' descriptors): a page
 * leaves the list only when it leaves the cache for its segment
 * (fw_large_cache_drop). */

/* Blocks up to 1 MiB (FW_LCACHE_DENSE_SLICES, large.h), and up to 2 MiB
 * for a thread whose big blocks are written in part only. Of a program that
 * writes its blocks of 1 to 4 MiB through, an exact slice count comes back
 * too seldom to pay for the resident memory the cache holds: bench_bigchurn
 * at 1 to 4 MiB had the same page faults with the cache as without, and 43
 * MiB of peak RSS against 24 MiB (a block freed to its segment is reused,
 * still dirty, by the best fit of the next request of any size near it).
 * A program that writes a big block's first and last bytes (a header and a
 * trailer) or touches it here and there is the other way round: a cached
 * page costs it the few pages it touched, and a block placed anew on a
 * best fit puts its last byte on a page never touched (bench_speed 16
 * threads, 256 B-2 MiB: nine faults in ten at the blocks' last bytes).
 * The looks of segment.c (fw_segment_big_look, one mincore call now and
 * then at the free of a block above 1 MiB) tell the two apart
 * (fw_segment_big_sparse), and a thread found to write in part keeps its
 * pages of 1 to 2 MiB too, with FW_LCACHE_SPARSE_CAP times the option's
 * bytes: bench_speed 16 threads, 256 B-2 MiB, medians of 7 interleaved
 * runs, 32,300 page faults -> 20,100, peak RSS 87 -> 38 MB, 56 -> 36 ms
 * (either change alone: 31,100 faults with blocks to 2 MiB and the option's
 * cap, 30,100 with four times the cap and blocks to 1 MiB). */

/* How much the cache may hold (fw_large_cache_cap, large.h):
 * FREEWAY_LARGE_CACHE, or more while the heap hands out more than that in
 * such blocks between two looks (one purge delay): a program that allocates
 * a batch of 64 buffers of 1 MiB and frees it, over and over
 * (bench_objects), would otherwise send 48 of every 64 frees back to their
 * segment and take them from it again, at four times the instructions of a
 * cache hit. What the cache holds beyond the option was in use a purge delay
 * ago, so the peak RSS does not grow; and a request the cache cannot serve,
 * while it holds more than the option, first gives back as much as it asks
 * for (fw_large_cache_miss), so that one size does not sit on memory another
 * needs. Not all of it: a program that cycles through many sizes misses one
 * bin now and then while the others serve it, and emptying the whole cache
 * at each miss sent every page back to be placed anew, on pages never
 * touched (bench_speed 14 threads, 256 B-512 KiB: 42,800 page faults and 118
 * MiB of peak RSS, against 23,000 and 59 MiB with this and the choice of
 * page below; medians of 7). The pages given back are the oldest of the
 * largest slice counts: they make the longest free runs. */

/* A page out of its bin (unlinked by the caller) back to its segment. */
static void fw_large_cache_drop(fw_heap_t *heap, fw_page_t *page) {
  page->lnext = NULL;
  heap->lcache_bytes -= (size_t)page->slices * FW_SLICE_SIZE;
  fw_page_queue_remove(heap, &heap->full, page);
  fw_segment_page_free(heap->tld, page);
}

void fw_large_cache_miss(fw_heap_t *heap, size_t size) {
  size_t cap = fw_large_cache_option_cap(heap), freed = 0;
  for (size_t n = FW_LCACHE_MAX_SLICES; n >= 1 && freed < size && heap->lcache_bytes > cap; n--) {
    while (heap->lcache[n] && freed < size) {
      /* the oldest of the bin (or the 64th: a bound on the walk): the ones
       * freed last are the likeliest to be asked for again */
      fw_page_t **link = &heap->lcache[n];
      for (unsigned k = 1; (*link)->lnext && k < 64; k++) link = &(*link)->lnext;
      fw_page_t *page = *link;
      *link = page->lnext;
      freed += n * FW_SLICE_SIZE;
      fw_large_cache_drop(heap, page);
    }
  }
}

/* Which cached page of the slice count: one in which an earlier block
 * ended in the same 4 KiB page as this one will, if one of the first few
 * did, else the one freed last. A program that writes a big buffer's first
 * and last bytes at once (a header and a trailer, a length-prefixed
 * message, bench_speed) touches two pages of it, and a page taken again
 * for a size that ends elsewhere in its last slice faults in a new one:
 * up to 16 of them in all, and RSS with them (tests/rss.c, large_ends). A
 * program that writes its buffers through touches the whole last slice
 * after a few rounds, and any choice is as good. */
#define FW_LCACHE_SCAN 8
void *fw_large_cache_alloc(fw_heap_t *heap, size_t size) {
  size_t slices = (size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE;
  if (slices > FW_SPAN_MAX_SLICES) return NULL;
  fw_page_t **link = &heap->lcache[slices];
  fw_page_t *page = *link;
  if (!page) return NULL;
  uint32_t end = fw_large_end(size);
  if (!(page->ends & end)) {
    fw_page_t **l = &page->lnext;
    for (unsigned k = 1; *l && k < FW_LCACHE_SCAN; l = &(*l)->lnext, k++) {
      if ((*l)->ends & end) {
        link = l;
        page = *l;
        break;
      }
    }
  }
  return fw_large_cache_took(heap, link, page, size);
}

/* all: every cached page; else those already marked by the previous look */
void fw_large_cache_flush(fw_heap_t *heap, bool all) {
  for (size_t n = 1; n <= FW_SPAN_MAX_SLICES && heap->lcache_bytes; n++) {
    fw_page_t **link = &heap->lcache[n];
    while (*link) {
      fw_page_t *page = *link;
      if (!all && !page->idle) {
        page->idle = 1;
        link = &page->lnext;
        continue;
      }
      *link = page->lnext;
      fw_large_cache_drop(heap, page);
    }
  }
  if (!all) heap->lcache_recent = 0;
  long delay = fw_opt(PURGE_DELAY);
  if (heap->lcache_bytes && delay > 0) heap->lcache_due = fw_os_clock_ms() + (uint64_t)delay;
}

void fw_large_cache_forget(fw_heap_t *heap) {
  memset(heap->lcache, 0, sizeof heap->lcache);
  heap->lcache_bytes = 0;
}

/* A large block that would grow in place into slices held by cached pages:
 * those give way (they were only waiting for reuse). True if the slices up
 * to size are free now. */
static bool fw_large_cache_clear_after(fw_page_t *page, size_t size) {
  fw_segment_t *seg = fw_page_segment(page);
  size_t start = (size_t)(page - seg->pages);
  size_t want = (size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE;
  if (seg->kind != FW_KIND_SPAN || want > FW_SPAN_MAX_SLICES || start + want > FW_SLICES) return false;
  /* look first, so that nothing is given back for a growth that fails anyway */
  for (size_t k = start + page->slices; k < start + want;) {
    fw_page_t *pg = &seg->pages[k];
    if (pg->flags & FW_PF_UNUSED) { k++; continue; }
    if ((pg->flags & FW_PF_REDIRECT) || pg->kind != FW_KIND_LARGE || pg->used != 0) return false;
    k += pg->slices;
  }
  for (size_t k = start + page->slices; k < start + want;) {
    fw_page_t *pg = &seg->pages[k];
    if (pg->flags & FW_PF_UNUSED) { k++; continue; }
    size_t n = pg->slices;
    fw_heap_t *heap = atomic_load_explicit(&pg->heap, memory_order_relaxed);
    fw_page_t **link = &heap->lcache[n];
    while (*link && *link != pg) link = &(*link)->lnext;
    if (!*link) return false;  /* not a cached page after all */
    *link = pg->lnext;
    fw_large_cache_drop(heap, pg);
    k += n;
  }
  return true;
}

bool fw_large_grow(fw_page_t *page, size_t size) {
  if (fw_page_segment(page)->kind == FW_KIND_LARGE) return fw_segment_large_grow(page, size);
  if (!fw_segment_span_grow(page, size) && !(fw_large_cache_clear_after(page, size) && fw_segment_span_grow(page, size)))
    return false;
  page->ends = fw_large_end(size);  /* a new last slice */
  return true;
}

bool fw_large_shrink(fw_page_t *page, size_t size) {
  return fw_page_segment(page)->kind == FW_KIND_LARGE && fw_segment_large_shrink(page, size);
}
