/* heap.c — first-class heaps: the thread's default heap and the ones made
 * with fw_heap_new (heap groups). A heap owns pages; its thread owns the
 * segments they sit in. Heap structs come from type-stable metadata and are
 * recycled, never unmapped (remote frees may still read page->heap).
 * See alloc.c for the whole design. */
#define _GNU_SOURCE
#include "fast.h"
#include <pthread.h>
#include <string.h>

fw_heap_t fw_heap_empty = {.direct = {[0 ... FW_DIRECT_SLOTS - 1] = &fw_page_empty}};

static pthread_mutex_t fw_heap_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static fw_heap_t *fw_heap_pool; /* guarded by fw_heap_pool_lock */

fw_heap_t *fw_heap_alloc_struct(fw_tld_t *tld, bool is_default) {
  pthread_mutex_lock(&fw_heap_pool_lock);
  fw_heap_t *heap = fw_heap_pool;
  if (heap) fw_heap_pool = heap->pool_next;
  pthread_mutex_unlock(&fw_heap_pool_lock);
  if (!heap) {
    heap = fw_meta_alloc(sizeof(fw_heap_t));
    if (!heap) return NULL;
  }
  /* Everything but the delayed list, which may hold late remote frees from
   * the heap's previous life; they are folded in by the next slow path. */
  fw_block_t *delayed = atomic_load(&heap->delayed);
  memset(heap, 0, sizeof *heap);
  atomic_store(&heap->delayed, delayed);
  for (size_t i = 0; i < FW_DIRECT_SLOTS; i++) heap->direct[i] = &fw_page_empty;
  heap->tld = tld;
  heap->thread_id = tld->thread_id;
  heap->is_default = is_default;
  heap->next = tld->heaps;
  if (tld->heaps) tld->heaps->prev = heap;
  tld->heaps = heap;
  fw_stat_add(heaps, 1);
  return heap;
}

void fw_heap_struct_free(fw_heap_t *heap) {
  fw_tld_t *tld = heap->tld;
  if (heap->prev) heap->prev->next = heap->next;
  else tld->heaps = heap->next;
  if (heap->next) heap->next->prev = heap->prev;
  heap->tld = NULL;
  heap->thread_id = 0;
  fw_stat_sub(heaps, 1);
  pthread_mutex_lock(&fw_heap_pool_lock);
  heap->pool_next = fw_heap_pool;
  fw_heap_pool = heap;
  pthread_mutex_unlock(&fw_heap_pool_lock);
}

/* Blocks freed by other threads into this heap's full pages. */
void fw_heap_collect_delayed(fw_heap_t *heap) {
  fw_block_t *b = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
  uintptr_t me = fw_thread_id();
  while (b) {
    fw_block_t *next = b->next;
    fw_page_t *page = fw_ptr_page(b);
    if (atomic_load_explicit(&fw_ptr_segment(b)->thread_id, memory_order_relaxed) == me)
      fw_free_local_slow(page, b);
    else
      fw_free_remote(page, b);
    b = next;
  }
}

void fw_heap_housekeeping(fw_heap_t *heap, bool force) {
  uint64_t now = fw_os_clock_ms();
  fw_tld_t *tld = heap->tld;
  if (heap->lcache_bytes && (force || heap->lcache_due <= now)) fw_heap_lcache_flush(heap, force);
  if (force || (tld->purge_due && tld->purge_due <= now)) fw_segments_purge(tld, now, force);
  fw_arena_purge(now, force);
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
}

/* ---- the large-block cache -------------------------------------------------
 * A large block in a span segment freed by its heap's thread keeps its page
 * for a while, filed by slice count; the next request of the same slice
 * count takes it whole. Placing it anew would put its first and last bytes
 * (often the only pages a big buffer touches at once) on pages never touched
 * before: a page fault each, and RSS creeping up to the span's full size.
 * Pages not reused for one to two purge delays go back to their segment
 * (the idle byte marks those already seen by the previous look). */
bool fw_heap_lcache_put(fw_heap_t *heap, fw_page_t *page) {
  size_t n = page->slices, bytes = n * FW_SLICE_SIZE;
  long delay = fw_opt(PURGE_DELAY);
  if (n > FW_SPAN_MAX_SLICES || delay == 0 || (page->flags & (FW_PF_CHECKED | FW_PF_ALIGNED)) ||
      fw_page_segment(page)->kind != FW_KIND_SPAN ||
      heap->lcache_bytes + bytes > ((size_t)fw_opt(LARGE_CACHE) << 20))
    return false;
  page->idle = 0;
  page->used = 0;
  page->prev = NULL;
  page->next = heap->lcache[n];
  heap->lcache[n] = page;
  if (!heap->lcache_bytes && delay > 0) heap->lcache_due = fw_os_clock_ms() + (uint64_t)delay;
  heap->lcache_bytes += bytes;
  return true;
}

fw_page_t *fw_heap_lcache_get(fw_heap_t *heap, size_t slices) {
  if (slices > FW_SPAN_MAX_SLICES) return NULL;
  fw_page_t *page = heap->lcache[slices];
  if (!page) return NULL;
  heap->lcache[slices] = page->next;
  heap->lcache_bytes -= slices * FW_SLICE_SIZE;
  page->next = NULL;
  return page;
}

/* all: every cached page; else those already marked by the previous look */
void fw_heap_lcache_flush(fw_heap_t *heap, bool all) {
  for (size_t n = 1; n <= FW_SPAN_MAX_SLICES && heap->lcache_bytes; n++) {
    fw_page_t **link = &heap->lcache[n];
    while (*link) {
      fw_page_t *page = *link;
      if (!all && !page->idle) {
        page->idle = 1;
        link = &page->next;
        continue;
      }
      *link = page->next;
      page->next = NULL;
      heap->lcache_bytes -= n * FW_SLICE_SIZE;
      fw_segment_page_free(heap->tld, page);
    }
  }
  long delay = fw_opt(PURGE_DELAY);
  if (heap->lcache_bytes && delay > 0) heap->lcache_due = fw_os_clock_ms() + (uint64_t)delay;
}

/* A large block that would grow in place into slices held by cached pages:
 * those give way (they were only waiting for reuse). True if the slices up
 * to size are free now. */
bool fw_heap_lcache_clear_after(fw_page_t *page, size_t size) {
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
    while (*link && *link != pg) link = &(*link)->next;
    if (!*link) return false;  /* not a cached page after all */
    *link = pg->next;
    pg->next = NULL;
    heap->lcache_bytes -= n * FW_SLICE_SIZE;
    fw_segment_page_free(heap->tld, pg);
    k += n;
  }
  return true;
}

/* Empties a heap. Pages with live blocks go to target (fw_heap_delete), or
 * are detached for their segments to be abandoned (target NULL, thread
 * exit), or are dropped with their blocks (destroy). */
static void fw_heap_release(fw_heap_t *heap, fw_heap_t *target, bool destroy) {
  fw_heap_lcache_flush(heap, true);
  /* 1. stop routing remote frees here */
  for (fw_page_t *pg = heap->full.first; pg; pg = pg->next)
    atomic_fetch_and_explicit(&pg->xfree, ~FW_XFREE_DELAYED, memory_order_acq_rel);
  /* 2. fold in what was routed here already */
  if (!destroy) {
    fw_heap_collect_delayed(heap);
  } else {
    fw_block_t *b = atomic_exchange_explicit(&heap->delayed, NULL, memory_order_acquire);
    while (b) {
      fw_block_t *next = b->next;
      fw_page_t *page = fw_ptr_page(b);
      if (atomic_load_explicit(&page->heap, memory_order_relaxed) != heap) fw_free_remote(page, b);
      b = next;
    }
  }
  /* 3. every page: drop it or hand it on */
  for (size_t c = 0; c <= FW_CLASS_COUNT + 1; c++) {
    fw_page_queue_t *q = c == FW_CLASS_COUNT + 1 ? &heap->full : &heap->queues[c];
    while (q->first) {
      fw_page_t *pg = q->first;
      fw_page_queue_remove(heap, q, pg);
      fw_page_flags_set(pg, pg->flags & ~FW_PF_FULL);
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
  for (size_t i = 0; i < FW_DIRECT_SLOTS; i++) heap->direct[i] = &fw_page_empty;
}

void fw_heap_release_all(fw_heap_t *heap) { fw_heap_release(heap, NULL, false); }

static fw_heap_t *fw_heap_current(void) {
  fw_heap_t *heap = fw_tls_heap;
  if (heap == &fw_heap_empty) heap = fw_thread_init();
  return heap;
}

static void fw_heap_check_owner(const fw_heap_t *heap, const char *what) {
  if (fw_unlikely(fw_opt(CAUTIOUS)) && heap->thread_id != fw_thread_id())
    fw_check_fail(what, heap, 0);
}

/* ---- public API ------------------------------------------------------- */

fw_heap_t *fw_heap_new(void) {
  fw_heap_t *def = fw_heap_current();
  if (!def) return fw_enomem();
  fw_heap_t *heap = fw_heap_alloc_struct(def->tld, false);
  if (!heap) return fw_enomem();
  return heap;
}

fw_heap_t *fw_heap_get_default(void) { return fw_heap_current(); }

void fw_heap_delete(fw_heap_t *heap) {
  if (!heap || heap == &fw_heap_empty) return;
  fw_heap_check_owner(heap, "fw_heap_delete from a thread that does not own the heap");
  if (heap->is_default) return;
  fw_heap_t *def = heap->tld->heap_default;
  fw_heap_release(heap, def, false);
  fw_heap_struct_free(heap);
}

void fw_heap_destroy(fw_heap_t *heap) {
  if (!heap || heap == &fw_heap_empty) return;
  fw_heap_check_owner(heap, "fw_heap_destroy from a thread that does not own the heap");
  if (heap->is_default) {
    fw_message("fw_heap_destroy: the default heap cannot be destroyed; ignored\n");
    return;
  }
  fw_heap_release(heap, NULL, true);
  fw_heap_struct_free(heap);
}

void *fw_heap_malloc(fw_heap_t *heap, size_t size) {
  fw_heap_check_owner(heap, "fw_heap_malloc from a thread that does not own the heap");
  return fw_heap_malloc_fast(heap, size);
}

void *fw_heap_calloc(fw_heap_t *heap, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return fw_enomem();
  fw_heap_check_owner(heap, "fw_heap_calloc from a thread that does not own the heap");
  return fw_heap_malloc_zero(heap, total, true);
}

void *fw_heap_realloc(fw_heap_t *heap, void *p, size_t size) {
  fw_heap_check_owner(heap, "fw_heap_realloc from a thread that does not own the heap");
  return fw_realloc_ex(heap, p, size);
}

void *fw_heap_malloc_aligned(fw_heap_t *heap, size_t size, size_t alignment) {
  fw_heap_check_owner(heap, "fw_heap_malloc_aligned from a thread that does not own the heap");
  return fw_heap_malloc_aligned_ex(heap, size, alignment, false);
}

size_t fw_heap_usable_size(const fw_heap_t *heap, const void *p) {
  if (!p || !heap) return 0;
  if (fw_ptr_page(p)->heap != heap) return 0;
  return fw_usable_size(p);
}

void fw_heap_collect(fw_heap_t *heap, bool force) {
  if (!heap || heap == &fw_heap_empty) return;
  fw_heap_collect_delayed(heap);
  fw_heap_lcache_flush(heap, true);
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
}

void fw_collect(bool force) {
  fw_heap_t *heap = fw_tls_heap;
  if (heap != &fw_heap_empty) {
    /* adopt what exited threads left, so their freed blocks can go back too */
    if (force)
      for (int i = 0; i < 100000 && fw_segment_reclaim_one(heap); i++) {
      }
    for (fw_heap_t *h = heap->tld->heaps; h; h = h->next) fw_heap_collect(h, force);
  } else {
    uint64_t now = fw_os_clock_ms();
    fw_arena_purge(now, force);
  }
}

static void fw_heap_walk(const fw_heap_t *heap, void (*fn)(const fw_page_t *, void *), void *arg) {
  for (size_t c = 0; c <= FW_CLASS_COUNT + 1; c++) {
    const fw_page_queue_t *q = c == FW_CLASS_COUNT + 1 ? &heap->full : &heap->queues[c];
    for (const fw_page_t *pg = q->first; pg; pg = pg->next) fn(pg, arg);
  }
}

static size_t fw_page_live(const fw_page_t *pg) {
  fw_heap_t *heap = atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed);
  bool head = !(pg->flags & FW_PF_FULL) && heap && heap->queues[pg->cls].first == pg;
  return pg->used - (head ? 1u : 0u);
}

static void fw_stats_page(const fw_page_t *pg, void *arg) {
  fw_heap_stats_t *s = arg;
  size_t live = fw_page_live(pg);
  s->blocks_live += live;
  s->bytes_live += live * pg->block_size;
  s->pages++;
  s->bytes_reserved += fw_page_segment(pg)->kind == FW_KIND_LARGE ? fw_page_segment(pg)->size : (size_t)pg->slices * FW_SLICE_SIZE;
}

int fw_heap_stats(const fw_heap_t *heap, fw_heap_stats_t *out) {
  if (!heap || !out || out->size < sizeof(size_t)) { errno = EINVAL; return -1; }
  fw_heap_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (heap != &fw_heap_empty) fw_heap_walk(heap, fw_stats_page, &s);
  fw_heap_t *h = (fw_heap_t *)heap;
  if (s.bytes_live > h->peak_bytes) h->peak_bytes = s.bytes_live;
  s.bytes_peak = h->peak_bytes;
  size_t n = out->size < sizeof s ? out->size : sizeof s;
  memcpy(out, &s, n);
  out->size = n;
  return 0;
}

/* Marks the blocks of a page that are free (local or remote list). */
static void fw_page_free_map(const fw_page_t *pg, uint8_t *map, size_t n) {
  memset(map, 0, (n + 7) / 8);
  uintptr_t x = atomic_load_explicit(&((fw_page_t *)pg)->xfree, memory_order_acquire) & ~FW_XFREE_DELAYED;
  const fw_block_t *lists[2] = {pg->free, (const fw_block_t *)x};
  for (int l = 0; l < 2; l++)
    for (const fw_block_t *b = lists[l]; b; b = b->next) {
      size_t i = (size_t)((const uint8_t *)b - pg->area) / pg->block_size;
      if (i < n) map[i / 8] |= (uint8_t)(1u << (i % 8));
    }
}

bool fw_heap_contains(const fw_heap_t *heap, const void *p) {
  if (!heap || !p || !fw_check_pointer(p)) return false;
  const fw_page_t *pg = fw_ptr_page(p);
  if ((pg->flags & FW_PF_UNUSED) || atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed) != heap)
    return false;
  if (pg->kind == FW_KIND_LARGE) return pg->used > 0;
  size_t i = (size_t)((const uint8_t *)p - pg->area) / pg->block_size;
  if (i >= pg->capacity) return false;
  for (const fw_block_t *b = pg->free; b; b = b->next)
    if ((const uint8_t *)b == pg->area + i * pg->block_size) return false;
  return true;
}

typedef struct { fw_block_visitor_t *visit; void *arg; bool stop; } fw_visit_ctx_t;

static void fw_visit_page(const fw_page_t *pg, void *arg) {
  fw_visit_ctx_t *ctx = arg;
  if (ctx->stop) return;
  if (pg->kind == FW_KIND_LARGE) {
    if (pg->used && !ctx->visit(pg->area, pg->block_size, ctx->arg)) ctx->stop = true;
    return;
  }
  uint8_t map[FW_SLICE_SIZE / 8 / 8 + 1];
  size_t n = pg->capacity;
  if (n > sizeof map * 8) n = sizeof map * 8;
  fw_page_free_map(pg, map, n);
  for (size_t i = 0; i < n && !ctx->stop; i++)
    if (!(map[i / 8] & (1u << (i % 8))))
      if (!ctx->visit(pg->area + i * pg->block_size, pg->block_size, ctx->arg)) ctx->stop = true;
}

void fw_heap_visit(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg) {
  if (!heap || !visit || heap == &fw_heap_empty) return;
  fw_visit_ctx_t ctx = {visit, arg, false};
  fw_heap_walk(heap, fw_visit_page, &ctx);
}

void fw_heap_fork_prepare(void) { pthread_mutex_lock(&fw_heap_pool_lock); }
void fw_heap_fork_parent(void) { pthread_mutex_unlock(&fw_heap_pool_lock); }
void fw_heap_fork_child(void) { pthread_mutex_init(&fw_heap_pool_lock, NULL); }
