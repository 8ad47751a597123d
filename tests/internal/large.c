/* large.c — the large-block cache (large.h) on a heap of its own: a batch
 * of blocks bigger than FREEWAY_LARGE_CACHE, freed and allocated again,
 * is served from the cache whole; a request of a size the cache does not
 * hold, while it keeps more than the option, gives back as much as it
 * asks for (the oldest pages first), not all of it; a cached page where an
 * earlier block ended in the same 4 KiB as the request will is taken
 * before the one freed last. */
#include "itest.h"
#include "heap.h"
#include "large.h"
#include "options.h"
#include "thread.h"
#include "segment.h"

#define MiB ((size_t)1 << 20)

static fw_heap_t *test_heap(void) {
  fw_process_init();
  /* no look at the cache during the test, however slow the machine */
  CHECK(fw_option_set("purge_delay", 600000) == 0);
  CHECK(fw_option_set("large_cache", 16) == 0);
  fw_heap_t *def = fw_heap_get_default();
  CHECK(def != NULL && def->tld != NULL);
  fw_heap_t *heap = fw_heap_struct_new(def->tld, false);
  CHECK(heap != NULL);
  return heap;
}

/* 64 blocks of 1 MiB, 4 times the option: all of them wait in the cache
 * once freed, and the next batch takes every one of them back. */
static void t_large_cache_batch(void) {
  fw_heap_t *heap = test_heap();
  enum { N = 64 };
  void *v[N], *again[N];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      v[i] = fw_heap_large_malloc(heap, MiB, 16);
      CHECK(v[i] != NULL);
      ((char *)v[i])[0] = (char)i;
      ((char *)v[i])[MiB - 1] = (char)i;
    }
    for (int i = 0; i < N; i++) fw_heap_free_local(fw_ptr_page(v[i]), (fw_block_t *)v[i]);
    CHECKF(heap->lcache_bytes == N * MiB, "round %d: %zu MiB cached after freeing %d blocks of 1 MiB", round,
           heap->lcache_bytes / MiB, N);
    for (int i = 0; i < N; i++) {
      again[i] = fw_heap_large_malloc(heap, MiB, 16);
      CHECK(again[i] != NULL);
    }
    CHECKF(heap->lcache_bytes == 0, "round %d: %zu MiB still cached after taking %d blocks again", round,
           heap->lcache_bytes / MiB, N);
    /* the same blocks: every one was a cache hit */
    for (int i = 0; i < N; i++) {
      bool found = false;
      for (int k = 0; k < N && !found; k++) found = again[i] == v[k];
      CHECKF(found, "round %d: block %p did not come from the cache", round, again[i]);
    }
    for (int i = 0; i < N; i++) fw_heap_free_local(fw_ptr_page(again[i]), (fw_block_t *)again[i]);
  }
  fw_large_cache_flush(heap, true);
  CHECK(heap->lcache_bytes == 0);
}

static size_t cached_pages(const fw_heap_t *heap) {
  size_t k = 0;
  for (size_t n = 1; n <= FW_LCACHE_MAX_SLICES; n++)
    for (const fw_page_t *pg = heap->lcache[n]; pg; pg = pg->lnext) k++;
  return k;
}

static bool in_cache(const fw_heap_t *heap, const void *p) {
  for (size_t n = 1; n <= FW_LCACHE_MAX_SLICES; n++)
    for (const fw_page_t *pg = heap->lcache[n]; pg; pg = pg->lnext)
      if (pg->area == (const uint8_t *)p) return true;
  return false;
}

/* A size the cache does not hold, while it keeps more than the option: as
 * much as the request goes back to the segments before it is placed, from
 * the oldest pages, and the rest stays for the sizes that come again. */
static void t_large_cache_miss(void) {
  fw_heap_t *heap = test_heap();
  enum { N = 40 };
  void *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = fw_heap_large_malloc(heap, MiB, 16);
    CHECK(v[i] != NULL);
  }
  for (int i = 0; i < N; i++) fw_heap_free_local(fw_ptr_page(v[i]), (fw_block_t *)v[i]);
  CHECKF(heap->lcache_bytes == N * MiB, "%zu MiB cached, expected %d", heap->lcache_bytes / MiB, N);
  void *p = fw_heap_large_malloc(heap, 1536 * 1024, 16);
  CHECK(p != NULL);
  CHECKF(heap->lcache_bytes == (N - 2) * MiB, "a request of 1.5 MiB of another size left %zu KiB in the cache, not %d MiB",
         heap->lcache_bytes / 1024, N - 2);
  CHECKF(!in_cache(heap, v[0]) && !in_cache(heap, v[1]) && in_cache(heap, v[2]) && in_cache(heap, v[N - 1]),
         "the miss gave back other pages than the two freed first");
  fw_heap_free_local(fw_ptr_page(p), (fw_block_t *)p);
  fw_large_cache_flush(heap, true);
  /* a bin longer than the walk the miss takes: its 64th page goes back,
   * and the ones after it stay listed */
  enum { M = 100 };
  void *w[M];
  for (int i = 0; i < M; i++) {
    w[i] = fw_heap_large_malloc(heap, MiB, 16);
    CHECK(w[i] != NULL);
  }
  for (int i = 0; i < M; i++) fw_heap_free_local(fw_ptr_page(w[i]), (fw_block_t *)w[i]);
  p = fw_heap_large_malloc(heap, 1536 * 1024, 16);
  CHECK(p != NULL);
  CHECKF(heap->lcache_bytes == (M - 2) * MiB && cached_pages(heap) == M - 2,
         "after a miss in a bin of %d pages: %zu KiB cached in %zu pages", M, heap->lcache_bytes / 1024,
         cached_pages(heap));
  CHECK(!in_cache(heap, w[M - 64]) && !in_cache(heap, w[M - 65]) && in_cache(heap, w[0]) && in_cache(heap, w[M - 1]));
  fw_heap_free_local(fw_ptr_page(p), (fw_block_t *)p);
  fw_large_cache_flush(heap, true);
  /* within the option, a miss keeps what is cached */
  void *a = fw_heap_large_malloc(heap, 640 * 1024, 16);
  CHECK(a != NULL);
  fw_heap_free_local(fw_ptr_page(a), (fw_block_t *)a);
  CHECK(heap->lcache_bytes == 640 * 1024);
  void *q = fw_heap_large_malloc(heap, 256 * 1024, 16);
  CHECK(q != NULL);
  CHECK(heap->lcache_bytes == 640 * 1024);
  fw_heap_free_local(fw_ptr_page(q), (fw_block_t *)q);
  fw_large_cache_flush(heap, true);
}

/* Of cached pages of one slice count, the one in which an earlier block
 * ended in the 4 KiB page where the request will, though freed first. */
static void t_large_cache_ends(void) {
  fw_heap_t *heap = test_heap();
  size_t base = 4 * 65536;  /* 5 slices: 256 KiB + 1 to 320 KiB */
  void *a = fw_heap_large_malloc(heap, base + 10000, 16);
  void *b = fw_heap_large_malloc(heap, base + 50000, 16);
  CHECK(a != NULL && b != NULL && fw_ptr_page(a)->slices == 5 && fw_ptr_page(b)->slices == 5);
  fw_heap_free_local(fw_ptr_page(a), (fw_block_t *)a);
  fw_heap_free_local(fw_ptr_page(b), (fw_block_t *)b);  /* b is the last freed */
  void *c = fw_heap_large_malloc(heap, base + 9000, 16);  /* ends in a's last 4 KiB page */
  CHECKF(c == a, "a request ending where block %p ended got %p (the last freed is %p)", a, c, b);
  void *d = fw_heap_large_malloc(heap, base + 30000, 16);  /* ends where neither did: the one left */
  CHECK(d == b);
  fw_heap_free_local(fw_ptr_page(c), (fw_block_t *)c);
  fw_heap_free_local(fw_ptr_page(d), (fw_block_t *)d);
  fw_large_cache_flush(heap, true);
}

static size_t full_pages(const fw_heap_t *heap, const void *p, bool *listed) {
  size_t k = 0;
  for (const fw_page_t *pg = heap->full.first; pg; pg = pg->next, k++)
    if (pg->area == (const uint8_t *)p) *listed = true;
  return k;
}

/* A cached page stays in its heap's full list (large.c), out of the heap's
 * counts; a heap given up frees its cached pages with the full list and
 * hands on its live blocks, none lost, none freed twice. */
static void t_large_cache_listed(void) {
  fw_heap_t *heap = test_heap();
  fw_heap_t *def = fw_heap_get_default();
  enum { N = 8, L = 3 };
  void *v[N], *live[L];
  for (int i = 0; i < N; i++) CHECK((v[i] = fw_heap_large_malloc(heap, MiB, 16)) != NULL);
  for (int i = 0; i < L; i++) CHECK((live[i] = fw_heap_large_malloc(heap, 512 * 1024, 16)) != NULL);
  for (int i = 0; i < N; i++) fw_heap_free_local(fw_ptr_page(v[i]), (fw_block_t *)v[i]);
  CHECKF(heap->lcache_bytes == N * MiB, "%zu KiB cached", heap->lcache_bytes / 1024);
  for (int i = 0; i < N; i++) {
    bool listed = false;
    size_t n = full_pages(heap, v[i], &listed);
    CHECKF(listed && n == N + L, "cached page %d: in the full list %d, which has %zu pages (expected %d)", i, listed,
           n, N + L);
  }
  fw_heap_stats_t st;
  memset(&st, 0, sizeof st);
  fw_heap_stats_of(heap, &st);
  CHECKF(st.blocks_live == L && st.pages == L, "heap counts %zu live blocks in %zu pages, expected %d in %d",
         (size_t)st.blocks_live, (size_t)st.pages, L, L);
  /* a hit takes a page without listing it twice */
  void *again = fw_heap_large_malloc(heap, MiB, 16);
  CHECK(again != NULL);
  bool listed = false;
  CHECK(full_pages(heap, again, &listed) == N + L && listed);
  fw_heap_release(heap, def, false);
  CHECK(heap->lcache_bytes == 0 && heap->full.first == NULL);
  for (int i = 0; i < N; i++) {
    const fw_page_t *pg = fw_ptr_page(v[i]);
    if (v[i] == again) {
      CHECK(pg->used == 1 && atomic_load(&((fw_page_t *)pg)->heap) == def);
    } else {
      CHECKF(pg->flags & FW_PF_UNUSED, "cached page %d not given back to its segment (flags %#x)", i, pg->flags);
    }
  }
  for (int i = 0; i < L; i++) {
    fw_page_t *pg = fw_ptr_page(live[i]);
    CHECKF(pg->used == 1 && atomic_load(&pg->heap) == def, "live block %d: used %u, heap %p (default %p)", i,
           pg->used, (void *)atomic_load(&pg->heap), (void *)def);
    ((char *)live[i])[0] = 1;
    fw_heap_free_local(pg, (fw_block_t *)live[i]);
  }
  fw_heap_free_local(fw_ptr_page(again), (fw_block_t *)again);
  fw_heap_struct_free(heap);
}

/* Blocks of 1 to 2 MiB wait in the cache only for a thread whose big
 * blocks the looks found written in part (segment.h, fw_segment_big_sparse),
 * and such a thread may hold four times the option before a miss gives
 * pages back; one that writes them through places them anew as before. */
static void t_large_cache_sparse(void) {
  fw_heap_t *heap = test_heap();
  fw_tld_t *tld = heap->tld;
  uint8_t whole = tld->big_whole;
  uint16_t every = tld->big_every, wait = tld->big_wait;
  const uint8_t *last = tld->big_last;
  const size_t big = 1536 * 1024;  /* 24 slices */
  /* a look will not come at these frees: the state is the test's */
  tld->big_wait = UINT16_MAX;
  tld->big_every = 1;
  tld->big_last = NULL;
  for (int sparse = 1; sparse >= 0; sparse--) {
    tld->big_whole = sparse ? 0 : 1;
    CHECK(fw_segment_big_sparse(tld) == (sparse == 1));
    void *a = fw_heap_large_malloc(heap, big, 16);
    CHECK(a != NULL && fw_ptr_page(a)->slices == 24);
    fw_heap_free_local(fw_ptr_page(a), (fw_block_t *)a);
    CHECKF(heap->lcache_bytes == (sparse ? big : 0), "%s thread: %zu KiB cached after freeing a block of 1.5 MiB",
           sparse ? "a sparse" : "a dense", heap->lcache_bytes / 1024);
    void *b = fw_heap_large_malloc(heap, big - 1000, 16);
    CHECK(b != NULL);
    if (sparse) CHECKF(b == a, "a sparse thread's request of the same slice count got %p, not the cached %p", b, a);
    CHECK(heap->lcache_bytes == 0);
    fw_heap_free_local(fw_ptr_page(b), (fw_block_t *)b);
    fw_large_cache_flush(heap, true);
    /* 40 MiB cached, above the option (16) and below four times it: a
     * miss keeps them all for a sparse thread, gives two back otherwise */
    enum { N = 40 };
    void *v[N];
    for (int i = 0; i < N; i++) CHECK((v[i] = fw_heap_large_malloc(heap, MiB, 16)) != NULL);
    for (int i = 0; i < N; i++) fw_heap_free_local(fw_ptr_page(v[i]), (fw_block_t *)v[i]);
    heap->lcache_recent = 0;  /* as after the cache's look: the option's cap alone */
    CHECK(heap->lcache_bytes == N * MiB);
    void *p = fw_heap_large_malloc(heap, 640 * 1024, 16);
    CHECK(p != NULL);
    CHECKF(heap->lcache_bytes == (sparse ? N : N - 1) * MiB, "%s thread: a miss left %zu KiB of %d MiB cached",
           sparse ? "a sparse" : "a dense", heap->lcache_bytes / 1024, N);
    fw_heap_free_local(fw_ptr_page(p), (fw_block_t *)p);
    fw_large_cache_flush(heap, true);
  }
  tld->big_whole = whole, tld->big_every = every, tld->big_wait = wait, tld->big_last = last;
  fw_heap_struct_free(heap);
}

int main(int argc, char **argv) {
  static const it_section sections[] = {
    {"large_cache_batch", t_large_cache_batch},
    {"large_cache_miss", t_large_cache_miss},
    {"large_cache_ends", t_large_cache_ends},
    {"large_cache_listed", t_large_cache_listed},
    {"large_cache_sparse", t_large_cache_sparse},
  };
  return it_main(argc, argv, sections, sizeof sections / sizeof sections[0]);
}
