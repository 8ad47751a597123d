/* heap.c — heaps: where a request finds its page, where an emptied page
 * goes, purging on the thread's own slow path, and emptying a heap (delete,
 * destroy, thread exit). Heap structs come from type-stable metadata and are
 * recycled, never unmapped: a remote free may still read page->heap of a
 * heap that has just gone. See alloc.c for the whole design. */
#include "heap.h"
#include "abandon.h"
#include "large.h"
#include "page.h"
#include "segment.h"
#include "arena.h"
#include "meta.h"
#include "options.h"
#include "os.h"
#include "stats.h"
#include <string.h>

fw_heap_t fw_heap_empty = {.direct = {[0 ... FW_DIRECT_SLOTS - 1] = &fw_page_empty},
                            .cdirect = {[0 ... FW_CLASS_COUNT - 1] = &fw_page_empty}};
FW_THREAD_LOCAL fw_heap_t *fw_tls_heap = &fw_heap_empty;

static fw_lock_t fw_heap_pool_lock = FW_LOCK_INIT;
static fw_heap_t *fw_heap_pool; /* guarded by fw_heap_pool_lock */

fw_heap_t *fw_heap_struct_new(fw_tld_t *tld, bool is_default) {
  fw_lock_acquire(&fw_heap_pool_lock);
  fw_heap_t *heap = fw_heap_pool;
  if (heap) fw_heap_pool = heap->pool_next;
  fw_lock_release(&fw_heap_pool_lock);
  if (!heap) {
    heap = fw_meta_alloc(sizeof(fw_heap_t));
    if (!heap) return NULL;
  }
  /* Everything but the owner (stored last, atomically), the delayed
   * list, which may hold late remote frees from the heap's previous life
   * (the next slow path folds them in), and is_default, which other
   * threads' frees may read at any time. */
  memset(&heap->tld, 0, offsetof(fw_heap_t, thread_id) - offsetof(fw_heap_t, tld));
  fw_direct_reset(heap);
  heap->tld = tld;
  __atomic_store_n(&heap->is_default, is_default, __ATOMIC_RELAXED);
  heap->next = tld->heaps;
  if (tld->heaps) tld->heaps->prev = heap;
  tld->heaps = heap;
  atomic_store_explicit(&heap->thread_id, tld->thread_id, memory_order_release);
  fw_stat_add(heaps, 1);
  return heap;
}

void fw_heap_struct_free(fw_heap_t *heap) {
  fw_tld_t *tld = heap->tld;
  if (heap->prev) heap->prev->next = heap->next;
  else tld->heaps = heap->next;
  if (heap->next) heap->next->prev = heap->prev;
  heap->tld = NULL;
  atomic_store_explicit(&heap->thread_id, 0, memory_order_release);
  fw_stat_sub(heaps, 1);
  fw_lock_acquire(&fw_heap_pool_lock);
  heap->pool_next = fw_heap_pool;
  fw_heap_pool = heap;
  fw_lock_release(&fw_heap_pool_lock);
}

fw_block_t *fw_heap_pool_take_delayed(void) {
  fw_block_t *all = NULL;
  fw_lock_acquire(&fw_heap_pool_lock);
  for (fw_heap_t *h = fw_heap_pool; h; h = h->pool_next) {
    if (!atomic_load_explicit(&h->delayed, memory_order_relaxed)) continue;
    fw_block_t *b = atomic_exchange_explicit(&h->delayed, NULL, memory_order_acquire);
    while (b) {
      fw_block_t *next = fw_delayed_next(b);
      fw_delayed_set_next(b, all);
      all = b;
      b = next;
    }
  }
  fw_lock_release(&fw_heap_pool_lock);
  return all;
}

/* ---- finding memory ------------------------------------------------------- */

fw_page_t *fw_heap_page_for(fw_heap_t *heap, size_t cls) {
  fw_page_t *page = fw_page_queue_find(heap, cls);
  return page ? page : fw_heap_page_new(heap, cls);
}

static fw_page_t *fw_heap_retained_find(const fw_heap_t *heap, size_t cls, int kind, bool side);
static void fw_retained_unlink(fw_heap_t *heap, fw_page_t *page);

fw_page_t *fw_heap_page_samples(fw_heap_t *heap, size_t cls) {
  size_t bs = fw_class_size[cls];
  FW_ASSERT(bs <= FW_SMALL_MAX);  /* medium samples stay on their pages (prof.c) */
  fw_page_t *page = heap->retained ? fw_heap_retained_find(heap, cls, FW_KIND_SMALL, true) : NULL;
  if (page) {
    /* one this heap emptied: its records are clear (every free clears its
     * block's), its free list intact */
    fw_retained_unlink(heap, page);
    fw_page_flags_set(page, FW_PF_SAMPLES);
    fw_page_to_full(heap, page);
    return page;
  }
  page = fw_segment_page_alloc(heap->tld, FW_KIND_SMALL, false);
  if (!page) page = fw_segment_page_alloc(heap->tld, FW_KIND_SMALL, true);
  if (!page) return NULL;
  /* fewer blocks, and after them the profiler's record of each: a free
   * finds its sample there, with no lookup and no lock */
  page->block_size = page->block_size / (bs + FW_PROF_SIDE) * bs;
  fw_page_init(page, heap, cls, bs);
  page->prof_side = 1;
  /* the records of the blocks carved so far (fw_page_extend clears those
   * of the later ones as it carves them) */
  if (!page->is_zero) memset(page->area + (size_t)page->reserved * bs, 0, (size_t)page->capacity * FW_PROF_SIDE);
  fw_page_flags_set(page, fw_page_flags(page) | FW_PF_SAMPLES);
  fw_page_to_full(heap, page);  /* a fresh page: no remote free can be there yet */
  return page;
}

static void fw_heap_retained_drop(fw_heap_t *heap, fw_page_t *page);

#define FW_HEAD_BACK_PAGES 32
fw_page_t *fw_heap_page_new(fw_heap_t *heap, size_t cls) {
  FW_ASSERT(heap != &fw_heap_empty && cls >= 1 && cls < FW_CLASS_COUNT);
  fw_page_t *page;
  fw_tld_t *tld = heap->tld;
  size_t bs = fw_class_size[cls];
  int kind = bs <= FW_SMALL_MAX ? FW_KIND_SMALL : FW_KIND_MEDIUM;
  /* a class whose empty head went for another's page is back (page.c,
   * fw_page_retire_empty_head). What that says lapses after a few dozen
   * new pages: a program that alternates between a few classes sets no
   * page up once their heads stay, while one whose buffers grow through
   * the classes again and again (bench_reallocgrow's rounds) would
   * otherwise keep every class's empty head from its second round on:
   * peak RSS 8.7 -> 16.2 MB, page faults 1,242 -> 2,088 on one thread.
   * A few dozen, or four new pages for each class with a queue if that is
   * more: a program whose few live blocks are spread over many classes
   * (a window of 64 blocks of 8 B to 32 KiB, 73 classes, each mostly
   * holding none or one) empties most heads again and again, each new
   * page took one, whose class then needed a new page in turn, and the
   * marks lapsed every 32 pages, before a class came back: a page set up
   * every seven allocations (bench_glibcbench --mode thread --threads 1
   * --window 64, 5 interleaved runs: 60.7 -> 34.4 ms, tcmalloc 30.7; peak
   * RSS 4.7 -> 3.2 MB). */
  uint64_t bit = (uint64_t)1 << (cls % 64);
  if (heap->head_gone[cls / 64] & bit) heap->head_back[cls / 64] |= bit;
  uint32_t lapse = 4u * (fw_popcount64(heap->queued[0]) + fw_popcount64(heap->queued[1]));
  if (lapse < FW_HEAD_BACK_PAGES) lapse = FW_HEAD_BACK_PAGES;
  if (++heap->pages_new - heap->head_lapsed >= lapse) {
    heap->head_lapsed = heap->pages_new;
    heap->head_gone[0] = heap->head_gone[1] = heap->head_back[0] = heap->head_back[1] = 0;
  }
  if (heap->retained) {
    if ((page = fw_heap_retained_find(heap, cls, kind, false)) != NULL) {
      fw_retained_unlink(heap, page);
      fw_page_queue_push_front(heap, &heap->queues[cls], page);
      return page;
    }
    /* none of this class: one of another class of the same kind gives its
     * slot back, for the new page to reuse memory already touched (as an
     * empty head does, below) rather than fresh memory */
    if ((page = fw_heap_retained_find(heap, 0, kind, false)) != NULL) fw_heap_retained_drop(heap, page);
  }
  fw_page_retire_empty_head(heap, kind, cls);
  page = fw_segment_page_alloc(tld, kind, false);
  /* Adopt what exited threads left before mapping more. Adopted live
   * blocks always go to the thread's default heap; a user heap only takes
   * a fresh slot of the adopted segment. */
  for (int i = 0; !page && i < 16 && fw_opt(RECLAIM) && fw_abandon_reclaim_one(tld->heap_default); i++) {
    /* an adopted page of this class with room beats a fresh slot */
    if (heap == tld->heap_default && (page = fw_page_queue_find(heap, cls)) != NULL) return page;
    page = fw_segment_page_alloc(tld, kind, false);
  }
  if (!page) page = fw_segment_page_alloc(tld, kind, true);
  if (!page) return NULL;
  if (heap->filled[cls / 64] & bit) fw_segment_page_fault_in(page);
  fw_page_init(page, heap, cls, bs);
  fw_page_queue_push_front(heap, &heap->queues[cls], page);
  return page;
}

static fw_page_t *fw_heap_large_page(fw_heap_t *heap, size_t size, size_t align) {
  fw_tld_t *tld = heap->tld;
  if (align > FW_SLICE_SIZE || size > FW_SPAN_MAX_SLICES * FW_SLICE_SIZE)
    return fw_segment_large_alloc(tld, size, align);
  size_t n = (size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE;
  fw_page_t *page = fw_segment_span_alloc(tld, n, false);
  if (!page && fw_opt(RECLAIM) && fw_abandon_reclaim_one(tld->heap_default))
    page = fw_segment_span_alloc(tld, n, false);
  if (!page) page = fw_segment_span_alloc(tld, n, true);
  return page;
}

void *fw_heap_large_malloc(fw_heap_t *heap, size_t size, size_t align) {
  FW_ASSERT(heap != &fw_heap_empty);
  size_t slices = (size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE;
  if (align <= FW_SLICE_SIZE) {
    void *p = heap->lcache_bytes ? fw_large_cache_alloc(heap, size) : NULL;
    if (p) return p;
    fw_large_cache_miss(heap, size);
  }
  if (slices <= FW_SPAN_MAX_SLICES) heap->lcache_recent += slices * FW_SLICE_SIZE;
  if (size > FW_BIG_MIN) fw_segment_big_early(heap->tld);
  fw_page_t *page = fw_heap_large_page(heap, size, align);
  if (!page) {
    fw_heap_housekeeping(heap, true);
    page = fw_heap_large_page(heap, size, align);
    if (!page) return NULL;
  }
  if (size > FW_BIG_MIN) fw_segment_big_placed(heap->tld, page);
  page->ends = 0;  /* fresh slices: no size ended in them yet */
  return fw_large_take(heap, page, size);
}

/* ---- giving memory back ------------------------------------------------------ */

/* A small or medium page with no live block goes back to its segment. */
static void fw_heap_page_give_back(fw_heap_t *heap, fw_page_t *page) {
  fw_page_collect(page);
  fw_page_check_empty(page);
  fw_segment_page_free(heap->tld, page);
}

/* ---- emptied pages kept ---------------------------------------------------------
 * A program that allocates a batch of blocks and frees it again (a
 * request's scratch, a container rebuilt, a batch count above what the
 * head page holds) empties the same pages round after round. Giving each
 * back costs its segment's span bookkeeping and the empty-page scan, and
 * the next round's page costs its set-up and the carving of its blocks (a
 * write to each) again. So a heap keeps up to FREEWAY_PAGE_RETAIN KiB of
 * emptied pages, out of the class queues and with their free lists intact,
 * and fw_heap_page_new takes one of the class it needs before it asks the
 * segment for a slot. A kept page carries FW_PF_RETAINED: with no block
 * live, any free into it is a double free, and the flag sends every free
 * to the checked path, which says so. A page emptied when the cap is
 * reached goes back at once, while its blocks are still in the cache for
 * the empty-page scan (a burst of frees would otherwise scan pages it
 * emptied a megabyte earlier); one that two idle scans find still kept
 * goes back too (fw_heap_retire_idle), as does every one when the heap is
 * collected, released or short of memory. A kept page that is taken again
 * needs no scan: it stays a page of its class, so a block that a double
 * free left live in it is never carved over, and the block that is on its
 * list twice is stopped by the pops. A page of the heap profiler's sampled
 * blocks is kept too, and taken again only as one (fw_heap_page_samples).
 * Pages of the checking modes and with interior blocks are not kept. */

static size_t fw_page_bytes(const fw_page_t *page) { return (size_t)page->slices * FW_SLICE_SIZE; }

static void fw_retained_unlink(fw_heap_t *heap, fw_page_t *page) {
  if (page->prev) page->prev->next = page->next; else heap->retained = page->next;
  if (page->next) page->next->prev = page->prev;
  page->next = page->prev = NULL;
  heap->retained_bytes -= fw_page_bytes(page);
  fw_page_flags_set(page, 0);
}

static bool fw_heap_retain(fw_heap_t *heap, fw_page_t *page) {
  size_t bytes = fw_page_bytes(page), cap = (size_t)fw_opt(PAGE_RETAIN) << 10;
  if (page->kind == FW_KIND_LARGE || fw_page_flags(page) != 0 || fw_secure ||
      heap->retained_bytes + bytes > cap)
    return false;
  page->prev = NULL;
  page->next = heap->retained;
  if (heap->retained) heap->retained->prev = page;
  heap->retained = page;
  heap->retained_bytes += bytes;
  page->idle = 0;
  fw_page_flags_set(page, FW_PF_RETAINED);
  return true;
}

/* The newest kept page of class cls (a page of sampled blocks if side), or
 * with cls 0 of any class of kind. */
static fw_page_t *fw_heap_retained_find(const fw_heap_t *heap, size_t cls, int kind, bool side) {
  for (fw_page_t *pg = heap->retained; pg; pg = pg->next)
    if (cls ? pg->cls == cls && pg->prof_side == side : pg->kind == kind) return pg;
  return NULL;
}

/* A kept page back to its segment. */
static void fw_heap_retained_drop(fw_heap_t *heap, fw_page_t *page) {
  fw_retained_unlink(heap, page);
  fw_heap_page_give_back(heap, page);
}

/* Every kept page back to its segment. */
static void fw_heap_retained_flush(fw_heap_t *heap) {
  while (heap->retained) fw_heap_retained_drop(heap, heap->retained);
}

/* Memory freed in a burst is purged while the burst is still being freed
 * (once its delay is up), not only when the thread allocates again; every
 * eighth page given up is often enough, and spares a thread that frees big
 * blocks one by one a clock read per free. */
static inline void fw_heap_retired(fw_heap_t *heap) {
  if ((++heap->retire_count & 7) == 0) fw_heap_housekeeping(heap, false);
}

/* The page has no live block left (and is not a queue head): keep it or
 * give it back. */
static void fw_heap_page_retire(fw_heap_t *heap, fw_page_t *page) {
  FW_ASSERT(page->used == 0);
  if ((page->flags & FW_PF_SAMPLES) && heap->samples[page->cls] == page) heap->samples[page->cls] = NULL;
  if (page->kind == FW_KIND_LARGE && (page->flags & FW_PF_FULL)) {
    /* the checking modes' frees come this way, not through
     * fw_heap_large_free_local: they look too. A cached page stays in the
     * full list (large.c). */
    if (page->block_size > FW_BIG_MIN) fw_segment_big_look(heap->tld, page);
    fw_page_collect(page);
    if (!fw_large_cache_put(heap, page)) {
      fw_page_queue_remove(heap, &heap->full, page);
      fw_segment_page_free(heap->tld, page);
    }
    fw_heap_retired(heap);
    return;
  }
  if (page->flags & FW_PF_FULL) {
    /* its delayed bit stays: with no live block, no free can reach the page
     * (but a double free), and whoever sets the page up again rewrites it */
    fw_page_queue_remove(heap, &heap->full, page);
    if (fw_page_flags(page) == (FW_PF_FULL | FW_PF_SAMPLES)) {
      /* a page of sampled blocks is kept as any other, for the heap's next
       * samples of its class (fw_heap_page_samples): a program that
       * samples a block and soon frees it set a page up per sample
       * (bench_objects 1 KiB under callgrind: 344 instructions to set it
       * up, 365 to give it back) */
      fw_page_clear_delayed(page);
      fw_page_flags_set(page, 0);
    }
  } else {
    fw_page_queue_remove(heap, &heap->queues[page->cls], page);
  }
  if (fw_heap_retain(heap, page)) {
    /* counted below all the same: the purge check runs every eighth page
     * emptied, kept or not */
  } else if (page->kind == FW_KIND_LARGE) {
    fw_page_collect(page);  /* an adopted one in a class queue (fw_page_to_full) */
    fw_segment_page_free(heap->tld, page);
  } else {
    fw_heap_page_give_back(heap, page);
  }
  fw_heap_retired(heap);
}

/* What fw_heap_page_retire does with such a page, without its tests for
 * other pages: the caller saw FULL alone among its flags (no samples, and
 * a large page is never kept on the retained list) and no remote free
 * pending, so a big buffer freed by its thread goes to the heap's cache in
 * a few dozen instructions (bench_objects at 1 MiB frees one per object). */
void fw_heap_large_free_local(fw_page_t *page) {
  FW_ASSERT(page->kind == FW_KIND_LARGE && page->used == 1 && fw_page_flags(page) == FW_PF_FULL);
  fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
  page->used = 0;
  page->frees++;
  if (page->block_size > FW_BIG_MIN) fw_segment_big_look(heap->tld, page);
  if (fw_large_cache_put(heap, page)) {
    /* the page stays as touched as it was: nothing for a purge to do yet,
     * and every 64th is often enough for the cache's own deadline (at every
     * eighth, the clock read and the looks were 12 instructions a block in
     * bench_objects at 1 MiB under callgrind) */
    if ((++heap->retire_count & 63) == 0) fw_heap_housekeeping(heap, false);
    return;
  }
  fw_page_queue_remove(heap, &heap->full, page);
  fw_page_collect(page);
  fw_segment_page_free(heap->tld, page);
  fw_heap_retired(heap);
}

void fw_heap_page_empty(fw_page_t *page) {
  fw_heap_page_retire(atomic_load_explicit(&page->heap, memory_order_relaxed), page);
}

void fw_heap_free_local(fw_page_t *page, fw_block_t *b) {
  fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
  /* the secure level's delayed reuse: the block waits on page->later */
  bool empty = fw_secure && page->kind != FW_KIND_LARGE ? fw_page_push_later(page, b) : fw_page_push(page, b);
  if (fw_unlikely(page->flags & FW_PF_SAMPLES)) {
    /* It stays in the full list until it empties, then goes to the kept
     * pages, with their cap and idle scans: kept empty as the heap's page
     * of samples for good, it held its segment, and the segment's other
     * free slots, once the thread had freed a burst and gone quiet
     * (bench_churn 2T: 47 to 58 MiB at the end against 34 without
     * sampling). */
    if (fw_page_rearm(page)) fw_heap_page_retire(heap, page);
    return;
  }
  if (empty) {
    fw_heap_page_retire(heap, page);
    return;
  }
  if (page->flags & FW_PF_FULL) fw_page_unfull(heap, page);
}

/* Blocks freed by other threads into this heap's full pages (checked by
 * their freers already in cautious mode). */
void fw_heap_collect_delayed(fw_heap_t *heap) {
  fw_block_t *b = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
  uintptr_t me = fw_thread_id();
  uint64_t n = 0;
  while (b) {
    fw_block_t *next = fw_delayed_next(b);
    fw_page_t *page = fw_ptr_page(b);
    if (atomic_load_explicit(&fw_ptr_segment(b)->thread_id, memory_order_relaxed) == me) {
      fw_heap_free_local(page, b);
      n++;
    } else {
      fw_page_free_remote(page, b);  /* a block of the heap's previous life */
    }
    b = next;
  }
  if (n) fw_count_add(&heap->tld->counts.remote_frees, n);
}

void fw_heap_housekeeping(fw_heap_t *heap, bool force) {
  uint64_t now = fw_os_clock_ms();
  fw_tld_t *tld = heap->tld;
  if (force) fw_heap_retained_flush(heap);
  if (heap->lcache_bytes) {
    /* the large-block cache's look, a purge delay after the housekeeping
     * that first found it holding pages (large.h, fw_large_cache_put) */
    long delay = fw_opt(PURGE_DELAY);
    if (force) fw_large_cache_flush(heap, true);
    else if (heap->lcache_due == 0 && delay > 0) heap->lcache_due = now + (uint64_t)delay;
    else if (heap->lcache_due <= now) fw_large_cache_flush(heap, false);
  }
  if (force || (tld->purge_due && tld->purge_due <= now)) fw_segments_purge(tld, now, force);
  fw_arena_purge(now, force);
  fw_abandon_purge(now, force);
}

/* The head page of a class queue never empties on the free fast path (it
 * carries one extra count), which keeps a malloc/free loop fast; but a
 * class the program has stopped using would hold its page forever. Once
 * per purge delay (checked on the slow path) the heads are looked at: one
 * found empty twice in a row goes back to its segment. A loop that keeps
 * the page busy costs nothing, as it never reaches the slow path. */
void fw_heap_retire_idle(fw_heap_t *heap) {
  long delay = fw_opt(PURGE_DELAY);
  if (delay < 0) return;
  uint64_t now = fw_os_clock_ms();
  if (now < heap->idle_scan_due) return;
  heap->idle_scan_due = now + (uint64_t)(delay ? delay : 1);
  for (size_t c = 1; c <= FW_CLASS_COUNT; c++) {
    fw_page_t *pg = heap->queues[c].first;
    if (!pg) continue;
    if (pg->used != 1 || (atomic_load_explicit(&pg->xfree, memory_order_relaxed) & ~FW_XFREE_DELAYED)) {
      pg->idle = 0;
      continue;
    }
    if (!pg->idle) {
      pg->idle = 1;
      continue;
    }
    fw_page_queue_remove(heap, &heap->queues[c], pg);  /* also drops the head's extra count */
    fw_segment_page_free(heap->tld, pg);
  }
  for (fw_page_t *pg = heap->retained, *next; pg; pg = next) {
    next = pg->next;
    if (!pg->idle) {
      pg->idle = 1;
      continue;
    }
    fw_heap_retained_drop(heap, pg);
  }
}

void fw_heap_release(fw_heap_t *heap, fw_heap_t *target, bool destroy) {
  FW_VALIDATE_HEAP(heap);
  /* 1. stop routing remote frees here */
  for (fw_page_t *pg = heap->full.first; pg; pg = pg->next)
    fw_page_clear_delayed(pg);
  /* 2. fold in what was routed here already */
  if (!destroy) {
    fw_heap_collect_delayed(heap);
  } else {
    fw_block_t *b = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
    while (b) {
      fw_block_t *next = fw_delayed_next(b);
      fw_page_t *page = fw_ptr_page(b);
      if (atomic_load_explicit(&page->heap, memory_order_relaxed) != heap) fw_page_free_remote(page, b);
      b = next;
    }
  }
  /* 3. every page: drop it or hand it on (the kept ones have no block) */
  fw_heap_retained_flush(heap);
  /* Each queue is emptied at once: removing its pages one by one would
   * rewrite the class's direct[] slots for every new head (up to 128 of
   * them a class), in every exiting thread, for a table reset below. */
  for (size_t c = 0; c <= FW_CLASS_COUNT + 1; c++) {
    fw_page_queue_t *q = c == FW_CLASS_COUNT + 1 ? &heap->full : &heap->queues[c];
    for (fw_page_t *pg = fw_page_queue_take_all(heap, q), *next; pg; pg = next) {
      next = pg->next;
      pg->next = pg->prev = NULL;
      /* a page of sampled blocks handed on is an ordinary one: the
       * profiler's flag for its blocks stays */
      fw_page_flags_set(pg, pg->flags & ~(FW_PF_FULL | FW_PF_SAMPLES));
      if (destroy) {
        fw_segment_page_free(heap->tld, pg);
        continue;
      }
      fw_page_collect(pg);
      if (pg->used == 0) {
        fw_segment_page_free(heap->tld, pg);
      } else if (target) {
        fw_page_adopt(target, pg);
      } else {
        atomic_store_explicit(&pg->heap, NULL, memory_order_release);
      }
    }
  }
  /* 4. the large-block cache's pages were in the full list, and went with
   * it (those the delayed frees of step 2 retired too) */
  fw_large_cache_forget(heap);
  fw_direct_reset(heap);
  memset(heap->samples, 0, sizeof heap->samples);
}

void fw_heap_collect_internal(fw_heap_t *heap, bool force) {
  fw_heap_collect_delayed(heap);
  fw_heap_retained_flush(heap);
  fw_large_cache_flush(heap, true);
  for (size_t c = 1; c <= FW_CLASS_COUNT; c++) {
    fw_page_queue_t *q = &heap->queues[c];
    fw_page_t *pg = q->first;
    while (pg) {
      fw_page_t *next = pg->next;
      fw_page_collect(pg);
      bool head = pg == q->first;
      if (pg->used == (head ? 1u : 0u) && (!head || force)) {
        fw_page_queue_remove(heap, q, pg);  /* for the head, also drops its extra count */
        fw_segment_page_free(heap->tld, pg);
      }
      pg = next;
    }
  }
  fw_heap_housekeeping(heap, force);
  FW_VALIDATE_HEAP(heap);
}

/* ---- looking at a heap -------------------------------------------------------- */

/* Cached large pages (in the full list with no block) are the cache's,
 * not the heap's: left out. */
static void fw_heap_walk(const fw_heap_t *heap, void (*fn)(const fw_page_t *, void *), void *arg) {
  for (size_t c = 0; c <= FW_CLASS_COUNT + 1; c++) {
    const fw_page_queue_t *q = c == FW_CLASS_COUNT + 1 ? &heap->full : &heap->queues[c];
    for (const fw_page_t *pg = q->first; pg; pg = pg->next)
      if (pg->kind != FW_KIND_LARGE || pg->used) fn(pg, arg);
  }
  for (const fw_page_t *pg = heap->retained; pg; pg = pg->next) fn(pg, arg);
}

/* Blocks freed but not yet folded into their page's local list count as
 * free in every query: those other threads (or, at the secure level, the
 * owner) pushed onto the page's remote list, and the first free into a full
 * page, on the heap's delayed list. Only the owner empties either list, and
 * the queries are the owner's, so the lists below their heads hold still. */
static const fw_block_t *fw_xfree_first(const fw_page_t *pg) {
  const fw_block_t *b = FW_XFREE_LIST(atomic_load_explicit(&((fw_page_t *)pg)->xfree, memory_order_acquire));
  return b ? b : FW_LIST_END;
}

static size_t fw_xfree_count(const fw_page_t *pg) {
  size_t n = 0;
  for (const fw_block_t *b = fw_xfree_first(pg); b != FW_LIST_END && n <= pg->capacity; b = fw_block_next(b)) n++;
  return n;
}

static const fw_block_t *fw_delayed_first(const fw_heap_t *heap) {
  return atomic_load_explicit(&((fw_heap_t *)heap)->delayed, memory_order_acquire);
}

/* blk is on the page's remote list or the heap's delayed list. */
static bool fw_freed_remotely(const fw_heap_t *heap, const fw_page_t *pg, const fw_block_t *blk) {
  for (const fw_block_t *b = fw_xfree_first(pg); b != FW_LIST_END; b = fw_block_next(b))
    if (b == blk) return true;
  for (const fw_block_t *b = fw_delayed_first(heap); b; b = fw_delayed_next(b))
    if (b == blk) return true;
  return false;
}

typedef struct { fw_heap_stats_t *s; const fw_heap_t *heap; } fw_stats_ctx_t;

static void fw_stats_page(const fw_page_t *pg, void *arg) {
  fw_stats_ctx_t *ctx = arg;
  fw_heap_stats_t *s = ctx->s;
  size_t live = fw_page_live(pg), x = fw_xfree_count(pg);
  for (const fw_block_t *b = fw_delayed_first(ctx->heap); b; b = fw_delayed_next(b))
    if (fw_ptr_page(b) == pg) x++;
  live = x < live ? live - x : 0;
  s->blocks_live += live;
  s->bytes_live += live * pg->block_size;
  s->pages++;
  fw_segment_t *seg = fw_page_segment(pg);
  s->bytes_reserved += seg->kind == FW_KIND_LARGE ? seg->size : (size_t)pg->slices * FW_SLICE_SIZE;
}

void fw_heap_stats_of(fw_heap_t *heap, fw_heap_stats_t *s) {
  fw_stats_ctx_t ctx = {s, heap};
  fw_heap_walk(heap, fw_stats_page, &ctx);
  if (s->bytes_live > heap->peak_bytes) heap->peak_bytes = s->bytes_live;
  s->bytes_peak = heap->peak_bytes;
}

/* Marks the blocks of a page that are free (local, remote or delayed list). */
static void fw_page_free_map(const fw_heap_t *heap, const fw_page_t *pg, uint8_t *map, size_t n) {
  memset(map, 0, (n + 7) / 8);
  const fw_block_t *lists[3] = {pg->free, fw_xfree_first(pg), pg->later};
  for (int l = 0; l < 3; l++)
    for (const fw_block_t *b = lists[l]; b != FW_LIST_END; b = fw_block_next(b)) {
      size_t i = (size_t)((const uint8_t *)b - pg->area) / pg->block_size;
      if (i < n) map[i / 8] |= (uint8_t)(1u << (i % 8));
    }
  for (const fw_block_t *b = fw_delayed_first(heap); b; b = fw_delayed_next(b)) {
    if (fw_ptr_page(b) != pg) continue;
    size_t i = (size_t)((const uint8_t *)b - pg->area) / pg->block_size;
    if (i < n) map[i / 8] |= (uint8_t)(1u << (i % 8));
  }
}

bool fw_heap_contains_block(const fw_heap_t *heap, const void *p) {
  const fw_page_t *pg =
      fw_page_of_pointer(p, atomic_load_explicit(&((fw_heap_t *)heap)->thread_id, memory_order_relaxed));
  if (!pg || atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed) != heap) return false;
  if (pg->kind == FW_KIND_LARGE) return pg->used > 0 && !fw_freed_remotely(heap, pg, (const fw_block_t *)pg->area);
  size_t i = (size_t)((const uint8_t *)p - pg->area) / pg->block_size;
  if (i >= pg->capacity) return false;
  const fw_block_t *blk = (const fw_block_t *)(pg->area + i * pg->block_size);
  const fw_block_t *lists[2] = {pg->free, pg->later};
  for (int l = 0; l < 2; l++)
    for (const fw_block_t *b = lists[l]; b != FW_LIST_END; b = fw_block_next(b))
      if (b == blk) return false;
  return !fw_freed_remotely(heap, pg, blk);
}

typedef struct { fw_block_visitor_t *visit; void *arg; bool stop; const fw_heap_t *heap; } fw_visit_ctx_t;

static void fw_visit_page(const fw_page_t *pg, void *arg) {
  fw_visit_ctx_t *ctx = arg;
  if (ctx->stop) return;
  if (pg->kind == FW_KIND_LARGE) {
    if (pg->used && !fw_freed_remotely(ctx->heap, pg, (const fw_block_t *)pg->area) &&
        !ctx->visit(pg->area, pg->block_size, ctx->arg))
      ctx->stop = true;
    return;
  }
  uint8_t map[FW_SLICE_SIZE / 8 / 8 + 1];
  size_t n = pg->capacity;
  if (n > sizeof map * 8) n = sizeof map * 8;
  fw_page_free_map(ctx->heap, pg, map, n);
  for (size_t i = 0; i < n && !ctx->stop; i++)
    if (!(map[i / 8] & (1u << (i % 8))))
      if (!ctx->visit(pg->area + i * pg->block_size, pg->block_size, ctx->arg)) ctx->stop = true;
}

void fw_heap_visit_blocks(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg) {
  fw_visit_ctx_t ctx = {visit, arg, false, heap};
  fw_heap_walk(heap, fw_visit_page, &ctx);
}

#ifdef FW_DEBUG
void fw_heap_validate(const fw_heap_t *heap) {
  FW_ASSERT(atomic_load_explicit(&((fw_heap_t *)heap)->thread_id, memory_order_relaxed) == fw_thread_id());
  for (size_t c = 1; c <= FW_CLASS_COUNT; c++) {
    fw_page_queue_validate(heap, &heap->queues[c]);
    for (const fw_page_t *pg = heap->queues[c].first; pg; pg = pg->next) fw_page_validate(pg);
  }
  fw_page_queue_validate(heap, &heap->full);
  for (const fw_page_t *pg = heap->full.first; pg; pg = pg->next) fw_page_validate(pg);
}
#endif

void fw_heap_fork_prepare(void) { fw_lock_acquire(&fw_heap_pool_lock); }
void fw_heap_fork_parent(void) { fw_lock_release(&fw_heap_pool_lock); }
void fw_heap_fork_child(void) { fw_lock_reset(&fw_heap_pool_lock); }
