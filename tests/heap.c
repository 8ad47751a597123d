/* heap.c — the heap API: fw_heap_new/delete/destroy, allocation from a
 * heap, usable size, contains, stats, visit, collect; many heaps; blocks of
 * a heap freed by other threads; misuse from another thread in cautious
 * mode. */
#include "fwtest.h"

#include <time.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void heap_stats(const fw_heap_t *h, fw_heap_stats_t *s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  CHECK(X.heap_stats(h, s) == 0);
}

/* ---- allocation from a heap, contains, usable size -------------------------- */
static void t_basic(void) {
  fw_heap_t *def = X.heap_get_default();
  CHECK(def != NULL);
  CHECK(X.heap_get_default() == def);
  fw_heap_t *h = X.heap_new(), *g = X.heap_new();
  CHECK(h != NULL && g != NULL && h != g && h != def);
  enum { N = 3000 };
  blk *b = fwt_scratch(N * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 3);
  for (size_t i = 0; i < N; i++) {
    size_t n = i < 8 ? ((size_t)1 << (i + 16)) : fwt_random_size(&r, 1 << 20);
    b[i] = (blk){X.heap_malloc(h, n), n, 0x4ea9};
    CHECKF(b[i].p != NULL, "fw_heap_malloc(%zu)", n);
    CHECK(fwt_aligned(b[i].p, 8));
    size_t u = X.heap_usable_size(h, b[i].p);
    CHECKF(u >= n, "fw_heap_usable_size = %zu for %zu bytes", u, n);
    CHECK(X.usable_size(b[i].p) == u);
    CHECKF(X.heap_usable_size(g, b[i].p) == 0, "block of one heap has a usable size in another");
    CHECK(X.heap_usable_size(def, b[i].p) == 0);
    CHECK(X.heap_contains(h, b[i].p));
    CHECK(!X.heap_contains(g, b[i].p));
    CHECK(!X.heap_contains(def, b[i].p));
    bfill(&b[i]);
  }
  void *d = X.malloc(100);
  CHECK(d != NULL);
  CHECK(X.heap_contains(def, d));
  CHECK(!X.heap_contains(h, d));
  CHECK(X.heap_usable_size(h, d) == 0);
  X.free(d);
  /* Pointers that are not blocks at all. */
  int local;
  CHECK(!X.heap_contains(h, &local));
  CHECK(!X.heap_contains(h, NULL));
  CHECK(X.heap_usable_size(h, NULL) == 0);
  for (size_t i = 0; i < N; i++) bcheck(&b[i]);
  /* A freed block is no longer contained. */
  for (size_t i = 0; i < N; i += 2) {
    void *p = b[i].p;
    X.free(p);
    CHECKF(!X.heap_contains(h, p), "freed block %p still reported live", p);
  }
  for (size_t i = 1; i < N; i += 2) {
    bcheck(&b[i]);
    X.free(b[i].p);
  }
  X.heap_destroy(g);
  X.heap_destroy(h);
  fwt_scratch_free(b, N * sizeof *b);
}

/* ---- calloc, realloc and aligned allocation from a heap --------------------- */
static void t_calloc_realloc(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  size_t sizes[] = {1, 7, 16, 100, 1000, 4096, 10000, 70000, 200000, (size_t)3 << 20,
                    (size_t)9 << 20};
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    size_t n = sizes[i];
    /* Dirty memory, free it, calloc it back. */
    void *v[8];
    for (int k = 0; k < 8; k++) {
      v[k] = X.heap_malloc(h, n);
      CHECK(v[k] != NULL);
      memset(v[k], 0xee, X.heap_usable_size(h, v[k]));
    }
    for (int k = 7; k >= 0; k--) X.free(v[k]);
    for (int k = 0; k < 8; k++) {
      v[k] = X.heap_calloc(h, 1, n);
      CHECKF(v[k] != NULL, "fw_heap_calloc(1, %zu)", n);
      CHECK_ZERO(v[k], n);
      CHECK(X.heap_contains(h, v[k]));
    }
    for (int k = 0; k < 8; k++) X.free(v[k]);
  }
  errno = 0;
  void *p = X.heap_calloc(h, 65537, FWT_WRAP65537);
  CHECKF(p == NULL && errno == ENOMEM, "fw_heap_calloc overflow not caught (%p)", p);
  errno = 0;
  p = X.heap_malloc(h, FWT_HALF_MAX);
  CHECKF(p == NULL && errno == ENOMEM, "fw_heap_malloc(%zu) = %p", (size_t)FWT_HALF_MAX, p);

  /* realloc keeps contents and the heap. */
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    for (size_t j = 0; j < FWT_COUNT(sizes); j++) {
      size_t a = sizes[i], b = sizes[j], keep = a < b ? a : b;
      char *q = X.heap_malloc(h, a);
      CHECK(q != NULL);
      fwt_fill(q, keep, a * 31 + b);
      char *r = X.heap_realloc(h, q, b);
      CHECKF(r != NULL, "fw_heap_realloc(%zu -> %zu)", a, b);
      CHECK_PATTERN(r, keep, a * 31 + b);
      CHECK(X.heap_usable_size(h, r) >= b);
      CHECKF(X.heap_contains(h, r), "fw_heap_realloc(%zu -> %zu) left the heap", a, b);
      X.free(r);
    }
  }
  char *q = X.heap_realloc(h, NULL, 500);
  CHECK(q != NULL && X.heap_contains(h, q));
  fwt_fill(q, 500, 1);
  errno = 0;
  CHECK(X.heap_realloc(h, q, SIZE_MAX - 100) == NULL && errno == ENOMEM);
  CHECK_PATTERN(q, 500, 1);
  X.free(q);

  /* Aligned allocation from a heap. */
  size_t maxa = X.max_alignment();
  for (size_t a = 1; a <= maxa; a *= 2) {
    size_t ns[] = {1, a, a + 1, 2 * a + 3};
    for (size_t k = 0; k < FWT_COUNT(ns); k++) {
      char *r = X.heap_malloc_aligned(h, ns[k], a);
      CHECKF(r != NULL && fwt_aligned(r, a), "fw_heap_malloc_aligned(%zu, %zu) = %p", ns[k], a,
             (void *)r);
      CHECK(X.heap_contains(h, r));
      CHECK(X.heap_usable_size(h, r) >= ns[k]);
      fwt_fill(r, ns[k], a);
      CHECK_PATTERN(r, ns[k], a);
      X.free_aligned(r, a);
    }
  }
  errno = 0;
  CHECK(X.heap_malloc_aligned(h, 64, 48) == NULL && errno == EINVAL);
  X.heap_destroy(h);
}

/* ---- heap statistics --------------------------------------------------------- */
static void t_stats(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  fw_heap_stats_t s;
  heap_stats(h, &s);
  CHECK(s.size == sizeof s);
  CHECKF(s.blocks_live == 0 && s.bytes_live == 0, "new heap: %zu blocks, %zu bytes live",
         s.blocks_live, s.bytes_live);
  enum { N = 5000 };
  blk *b = fwt_scratch(N * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 8);
  size_t live = 0, peak_seen = 0;
  for (size_t i = 0; i < N; i++) {
    size_t n = i % 1000 == 999 ? ((size_t)1 << 20) * (i / 1000 + 1) : fwt_random_size(&r, 1 << 20);
    b[i] = (blk){X.heap_malloc(h, n), n, 0x4ea9};
    CHECK(b[i].p != NULL);
    live += X.heap_usable_size(h, b[i].p);
    if (i % 500 == 0) {
      heap_stats(h, &s);
      CHECKF(s.blocks_live == i + 1, "blocks_live %zu, want %zu", s.blocks_live, i + 1);
      CHECKF(s.bytes_live == live, "bytes_live %zu, want %zu", s.bytes_live, live);
      CHECKF(s.bytes_peak >= s.bytes_live, "bytes_peak %zu < bytes_live %zu", s.bytes_peak, s.bytes_live);
      peak_seen = s.bytes_live;
    }
  }
  heap_stats(h, &s);
  CHECKF(s.blocks_live == N, "blocks_live %zu, want %d", s.blocks_live, (int)N);
  CHECKF(s.bytes_live == live, "bytes_live %zu, want %zu", s.bytes_live, live);
  CHECK(s.bytes_peak >= live);
  CHECK(s.pages >= 1);
  CHECKF(s.bytes_reserved >= s.bytes_live, "bytes_reserved %zu < bytes_live %zu", s.bytes_reserved,
         s.bytes_live);
  peak_seen = live;
  /* Owner frees: exact at once. */
  for (size_t i = 0; i < N; i += 2) {
    live -= X.heap_usable_size(h, b[i].p);
    X.free(b[i].p);
  }
  heap_stats(h, &s);
  CHECKF(s.blocks_live == N / 2, "after freeing half: blocks_live %zu", s.blocks_live);
  CHECKF(s.bytes_live == live, "after freeing half: bytes_live %zu, want %zu", s.bytes_live, live);
  CHECKF(s.bytes_peak >= peak_seen, "bytes_peak %zu fell below a bytes_live seen (%zu)", s.bytes_peak,
         peak_seen);
  /* The default heap's statistics are separate. */
  fw_heap_stats_t d;
  heap_stats(X.heap_get_default(), &d);
  void *extra = X.malloc(1000);
  fw_heap_stats_t d2;
  heap_stats(X.heap_get_default(), &d2);
  CHECK(d2.blocks_live == d.blocks_live + 1);
  heap_stats(h, &s);
  CHECK(s.blocks_live == N / 2);
  X.free(extra);
  for (size_t i = 1; i < N; i += 2) X.free(b[i].p);
  heap_stats(h, &s);
  CHECK(s.blocks_live == 0 && s.bytes_live == 0);
  X.heap_destroy(h);
  fwt_scratch_free(b, N * sizeof *b);
}

/* ---- walking the blocks of a heap ------------------------------------------- */
typedef struct visit_state {
  const void **seen;
  size_t count, cap, stop_after;
  bool size_ok;
  const fw_heap_t *heap;
} visit_state;

static bool visitor(const void *block, size_t usable, void *arg) {
  visit_state *v = arg;
  if (v->count < v->cap) v->seen[v->count] = block;
  v->count++;
  if (X.heap_usable_size(v->heap, block) != usable) v->size_ok = false;
  return v->stop_after == 0 || v->count < v->stop_after;
}

static int cmp_cptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
  return x < y ? -1 : x > y;
}

static void t_visit(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  enum { N = 4000 };
  const void **mine = fwt_scratch(N * sizeof *mine);
  const void **seen = fwt_scratch(2 * N * sizeof *seen);
  fwt_rng r;
  fwt_rng_init(&r, 4);
  for (size_t i = 0; i < N; i++) {
    mine[i] = X.heap_malloc(h, fwt_random_size(&r, 2 << 20));
    CHECK(mine[i] != NULL);
  }
  visit_state v = {seen, 0, 2 * N, 0, true, h};
  X.heap_visit(h, visitor, &v);
  CHECKF(v.count == N, "visited %zu blocks, the heap has %d", v.count, (int)N);
  CHECK(v.size_ok);
  qsort(mine, N, sizeof *mine, cmp_cptr);
  qsort(seen, N, sizeof *seen, cmp_cptr);
  for (size_t i = 0; i < N; i++) CHECKF(seen[i] == mine[i], "visited %p, not a live block", seen[i]);
  /* Stopping early. */
  visit_state w = {seen, 0, 2 * N, 7, true, h};
  X.heap_visit(h, visitor, &w);
  CHECKF(w.count == 7, "visit went on after the visitor returned false (%zu calls)", w.count);
  /* Freed blocks are not visited. */
  for (size_t i = 0; i < N; i += 3) X.free((void *)mine[i]);
  visit_state u = {seen, 0, 2 * N, 0, true, h};
  X.heap_visit(h, visitor, &u);
  CHECKF(u.count == N - (N + 2) / 3, "visited %zu blocks after frees, want %d", u.count,
         (int)(N - (N + 2) / 3));
  X.heap_destroy(h);
  fwt_scratch_free(mine, N * sizeof *mine);
  fwt_scratch_free(seen, 2 * N * sizeof *seen);
}

/* ---- delete keeps blocks, destroy frees them ---------------------------------- */
static void t_delete(void) {
  enum { N = 3000 };
  blk *b = fwt_scratch(N * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 6);
  for (int round = 0; round < 5; round++) {
    fw_heap_t *h = X.heap_new();
    CHECK(h != NULL);
    for (size_t i = 0; i < N; i++) {
      size_t n = fwt_random_size(&r, 3 << 20);
      b[i] = (blk){X.heap_malloc(h, n), n, 0x4ea9};
      CHECK(b[i].p != NULL);
      bfill(&b[i]);
    }
    X.heap_delete(h);
    fw_heap_t *def = X.heap_get_default();
    for (size_t i = 0; i < N; i++) {
      bcheck(&b[i]);
      CHECK(X.usable_size(b[i].p) >= b[i].n);
      CHECKF(X.heap_contains(def, b[i].p), "after fw_heap_delete block %p is not in the default heap",
             (void *)b[i].p);
    }
    /* A new heap (perhaps at the same address) owns none of them. */
    fw_heap_t *h2 = X.heap_new();
    CHECK(h2 != NULL);
    for (size_t i = 0; i < N; i++) CHECK(!X.heap_contains(h2, b[i].p));
    /* The blocks can be reallocated and freed as usual. */
    for (size_t i = 0; i < N; i++) {
      if (i % 3 == 0) {
        size_t n = fwt_random_size(&r, 1 << 20), keep = n < b[i].n ? n : b[i].n;
        char *q = X.heap_realloc(def, b[i].p, n);
        CHECK(q != NULL);
        CHECK_PATTERN(q, keep, bseed(&b[i]));
        b[i] = (blk){q, n, 0x4ea9};
        bfill(&b[i]);
      }
    }
    for (size_t i = 0; i < N; i++) {
      bcheck(&b[i]);
      X.free(b[i].p);
    }
    X.heap_destroy(h2);
  }
  fwt_scratch_free(b, N * sizeof *b);
}

static void t_destroy(void) {
  fw_stats_t s0, s1, s2;
  X.collect(true);
  fwt_stats(&s0);
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  fwt_stats(&s1);
  CHECKF(s1.heaps == s0.heaps + 1, "heaps %zu -> %zu after fw_heap_new", s0.heaps, s1.heaps);
  /* About 256 MiB, touched, in blocks of every kind. */
  size_t total = 0, count = 0;
  fwt_rng r;
  fwt_rng_init(&r, 12);
  void *first = NULL;
  while (total < ((size_t)256 << 20)) {
    size_t n = count % 50 == 49 ? ((size_t)6 << 20) : fwt_random_size(&r, 1 << 20);
    char *p = (count % 7 == 0) ? X.heap_malloc_aligned(h, n, 4096) : X.heap_malloc(h, n);
    CHECK(p != NULL);
    if (!first) first = p;
    memset(p, 0x3c, n);
    total += n;
    count++;
  }
  size_t rss1 = fwt_rss();
  /* And one block big enough for a mapping of its own. */
  size_t hsz = (size_t)512 << 20;
  char *hb = X.heap_malloc(h, hsz);
  CHECK(hb != NULL && X.heap_contains(h, hb));
  memset(hb, 1, 4096);
  memset(hb + hsz - 4096, 1, 4096);
  fwt_stats(&s1);
  CHECKF(s1.huge_allocs >= s0.huge_allocs + 1, "huge_allocs %zu -> %zu after a 512 MiB block",
         s0.huge_allocs, s1.huge_allocs);
  CHECKF(s1.bytes_committed >= s0.bytes_committed + total,
         "bytes_committed %zu -> %zu after allocating %zu bytes", s0.bytes_committed,
         s1.bytes_committed, total);
  X.heap_destroy(h);
  X.collect(true);
  fwt_stats(&s2);
  size_t rss2 = fwt_rss();
  fwt_log("destroy: %zu blocks, %zu MiB; committed %zu -> %zu -> %zu MiB; rss %zu -> %zu MiB", count,
          total >> 20, s0.bytes_committed >> 20, s1.bytes_committed >> 20, s2.bytes_committed >> 20,
          rss1 >> 20, rss2 >> 20);
  CHECKF(s2.heaps == s0.heaps, "heaps %zu after destroy, %zu before new", s2.heaps, s0.heaps);
  CHECKF(s2.huge_allocs == s0.huge_allocs, "huge_allocs %zu after destroying the heap (before: %zu)",
         s2.huge_allocs, s0.huge_allocs);
  CHECKF(s2.bytes_reserved + hsz <= s1.bytes_reserved, "reserved %zu MiB -> %zu MiB: the 512 MiB block was not unmapped",
         s1.bytes_reserved >> 20, s2.bytes_reserved >> 20);
  CHECKF(s2.bytes_committed <= s0.bytes_committed + total / 8,
         "fw_heap_destroy + fw_collect(true) left %zu MiB committed (%zu MiB before)",
         s2.bytes_committed >> 20, s0.bytes_committed >> 20);
  CHECKF(rss2 + total / 2 <= rss1, "RSS %zu MiB -> %zu MiB: destroy did not give the memory back",
         rss1 >> 20, rss2 >> 20);
  fw_heap_t *h3 = X.heap_new();
  CHECK(!X.heap_contains(h3, first));
  X.heap_destroy(h3);
}

/* ---- collect ---------------------------------------------------------------- */
static void t_collect(void) {
  fw_heap_t *h = X.heap_new();
  enum { N = 2000 };
  blk b[N];
  fwt_rng r;
  fwt_rng_init(&r, 13);
  for (size_t i = 0; i < N; i++) {
    b[i].n = fwt_random_size(&r, 256 << 10);
    b[i].p = X.heap_malloc(h, b[i].n);
    CHECK(b[i].p);
    bfill(&b[i]);
  }
  X.heap_collect(h, false);
  for (size_t i = 0; i < N; i++) bcheck(&b[i]);
  for (size_t i = 0; i < N; i += 2) X.free(b[i].p);
  X.heap_collect(h, true);
  for (size_t i = 1; i < N; i += 2) bcheck(&b[i]);
  fw_heap_stats_t s;
  heap_stats(h, &s);
  CHECKF(s.blocks_live == N / 2, "blocks_live %zu after freeing half of %d and fw_heap_collect",
         s.blocks_live, (int)N);
  for (size_t i = 1; i < N; i += 2) X.free(b[i].p);
  X.heap_collect(h, true);
  heap_stats(h, &s);
  CHECKF(s.blocks_live == 0, "blocks_live %zu after freeing all and fw_heap_collect", s.blocks_live);
  /* The heap still works after being emptied. */
  void *p = X.heap_malloc(h, 100);
  CHECK(p && X.heap_contains(h, p));
  X.heap_destroy(h);
}

/* ---- ten thousand heaps -------------------------------------------------------- */
static void t_many(void) {
  fw_stats_t base, at1k, end;
  fwt_stats(&base);
  fwt_rng r;
  fwt_rng_init(&r, 21);
  size_t total = fwt_scaled(10000);
  for (size_t i = 0; i < total; i++) {
    fw_heap_t *h = X.heap_new();
    CHECKF(h != NULL, "fw_heap_new failed at heap %zu", i);
    blk b[10];
    for (int k = 0; k < 10; k++) {
      b[k].n = k == 9 ? 65536 + (size_t)i : fwt_random_size(&r, 64 << 10);
      b[k].p = (k % 3 == 0) ? X.heap_calloc(h, 1, b[k].n) : X.heap_malloc(h, b[k].n);
      CHECK(b[k].p);
      bfill(&b[k]);
    }
    for (int k = 0; k < 10; k++) bcheck(&b[k]);
    if (i % 2) {
      X.heap_destroy(h);
    } else {
      X.heap_delete(h);
      for (int k = 0; k < 10; k++) {
        bcheck(&b[k]);
        X.free(b[k].p);
      }
    }
    if (i + 1 == total / 10) fwt_stats(&at1k);
  }
  fwt_stats(&end);
  fwt_log("many: %zu heaps; committed %zu / %zu / %zu MiB, segments %zu / %zu / %zu", total,
          base.bytes_committed >> 20, at1k.bytes_committed >> 20, end.bytes_committed >> 20,
          base.segments, at1k.segments, end.segments);
  CHECKF(end.heaps == base.heaps, "heaps: %zu before, %zu after creating and destroying %zu",
         base.heaps, end.heaps, total);
  CHECKF(end.bytes_committed <= at1k.bytes_committed + at1k.bytes_committed / 4 + ((size_t)32 << 20),
         "committed memory grew from %zu MiB to %zu MiB over %zu heaps", at1k.bytes_committed >> 20,
         end.bytes_committed >> 20, total);
  CHECKF(end.segments <= at1k.segments + at1k.segments / 4 + 8, "segments grew from %zu to %zu",
         at1k.segments, end.segments);

  /* A thousand live at once. */
  enum { L = 1000 };
  fw_heap_t **hs = fwt_scratch(L * sizeof *hs);
  blk *bs = fwt_scratch(L * 5 * sizeof *bs);
  for (size_t i = 0; i < L; i++) {
    hs[i] = X.heap_new();
    CHECK(hs[i] != NULL);
    for (int k = 0; k < 5; k++) {
      blk *b = &bs[i * 5 + (size_t)k];
      b->n = fwt_random_size(&r, 128 << 10);
      b->p = X.heap_malloc(hs[i], b->n);
      CHECK(b->p);
      bfill(b);
    }
  }
  for (size_t i = 0; i < L; i++) {
    for (int k = 0; k < 5; k++) {
      blk *b = &bs[i * 5 + (size_t)k];
      bcheck(b);
      CHECK(X.heap_contains(hs[i], b->p));
      CHECK(!X.heap_contains(hs[(i + 1) % L], b->p));
    }
  }
  for (size_t i = 0; i < L; i++) {
    size_t j = (i * 7919) % L; /* a scattered order */
    X.heap_destroy(hs[j]);
  }
  fwt_stats(&end);
  CHECK(end.heaps == base.heaps);
  fwt_scratch_free(hs, L * sizeof *hs);
  fwt_scratch_free(bs, L * 5 * sizeof *bs);
}

/* ---- blocks freed by other threads, then the heap destroyed or deleted -------- */
enum { RN = 20000, RT = 4 };
typedef struct remote_job {
  blk *b;
  size_t from, to, step;
  pthread_barrier_t *go;
} remote_job;

static void *remote_free(void *arg) {
  remote_job *j = arg;
  if (j->go) pthread_barrier_wait(j->go);
  for (size_t i = j->from; i < j->to; i += j->step) {
    bcheck(&j->b[i]);
    X.free(j->b[i].p);
    j->b[i].p = NULL;
  }
  return NULL;
}

static void t_remote_destroy(void) {
  blk *b = fwt_scratch(RN * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 31);
  for (int round = 0; round < 4; round++) {
    fw_heap_t *h = X.heap_new();
    CHECK(h);
    for (size_t i = 0; i < RN; i++) {
      b[i].n = fwt_random_size(&r, 1 << 20);
      b[i].p = X.heap_malloc(h, b[i].n);
      CHECK(b[i].p);
      bfill(&b[i]);
    }
    /* Threads free the even blocks while the owner allocates more. */
    pthread_t t[RT];
    remote_job jobs[RT];
    for (int k = 0; k < RT; k++) {
      jobs[k] = (remote_job){b, (size_t)k * 2, RN, 2 * RT, NULL};
      CHECK(pthread_create(&t[k], NULL, remote_free, &jobs[k]) == 0);
    }
    blk extra[500];
    for (int k = 0; k < 500; k++) {
      extra[k].n = fwt_random_size(&r, 64 << 10);
      extra[k].p = X.heap_malloc(h, extra[k].n);
      CHECK(extra[k].p);
      bfill(&extra[k]);
    }
    for (int k = 0; k < RT; k++) CHECK(pthread_join(t[k], NULL) == 0);
    for (size_t i = 1; i < RN; i += 2) bcheck(&b[i]);
    for (int k = 0; k < 500; k++) bcheck(&extra[k]);
    X.heap_collect(h, false);
    fw_heap_stats_t s;
    heap_stats(h, &s);
    CHECKF(s.blocks_live == RN / 2 + 500,
           "after remote frees and collect: blocks_live %zu, want %d", s.blocks_live,
           (int)(RN / 2 + 500));
    if (round % 2) {
      X.heap_destroy(h); /* the odd blocks go with it */
    } else {
      /* Free a few more remotely with no collect, then destroy. */
      remote_job j = {b, 1, RN / 2, 2, NULL};
      pthread_t t1;
      CHECK(pthread_create(&t1, NULL, remote_free, &j) == 0);
      CHECK(pthread_join(t1, NULL) == 0);
      X.heap_destroy(h);
    }
    /* The allocator is still sound. */
    for (size_t i = 0; i < 2000; i++) {
      b[i].n = fwt_random_size(&r, 1 << 20);
      b[i].p = X.malloc(b[i].n);
      CHECK(b[i].p);
      bfill(&b[i]);
    }
    for (size_t i = 0; i < 2000; i++) {
      bcheck(&b[i]);
      X.free(b[i].p);
    }
  }
  fwt_scratch_free(b, RN * sizeof *b);
}

static void t_remote_delete(void) {
  blk *b = fwt_scratch(RN * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 41);
  for (int round = 0; round < 4; round++) {
    fw_heap_t *h = X.heap_new();
    CHECK(h);
    for (size_t i = 0; i < RN; i++) {
      b[i].n = fwt_random_size(&r, 1 << 20);
      b[i].p = X.heap_malloc(h, b[i].n);
      CHECK(b[i].p);
      bfill(&b[i]);
    }
    /* The blocks stay valid across fw_heap_delete, so other threads may free
     * them while it runs. */
    pthread_barrier_t go;
    CHECK(pthread_barrier_init(&go, NULL, RT + 1) == 0);
    pthread_t t[RT];
    remote_job jobs[RT];
    for (int k = 0; k < RT; k++) {
      jobs[k] = (remote_job){b, (size_t)k * 2, RN, 2 * RT, &go};
      CHECK(pthread_create(&t[k], NULL, remote_free, &jobs[k]) == 0);
    }
    pthread_barrier_wait(&go);
    X.heap_delete(h);
    for (int k = 0; k < RT; k++) CHECK(pthread_join(t[k], NULL) == 0);
    pthread_barrier_destroy(&go);
    for (size_t i = 1; i < RN; i += 2) {
      bcheck(&b[i]);
      CHECK(X.heap_contains(X.heap_get_default(), b[i].p));
    }
    /* Free the rest from another thread as well. */
    remote_job j = {b, 1, RN, 2, NULL};
    pthread_t t1;
    CHECK(pthread_create(&t1, NULL, remote_free, &j) == 0);
    CHECK(pthread_join(t1, NULL) == 0);
    X.collect(false);
  }
  fwt_scratch_free(b, RN * sizeof *b);
}

/* ---- allocating from another thread's heap aborts in cautious mode ------------- */
static fw_heap_t *misuse_heap;
static void *misuse_thread(void *arg) {
  (void)arg;
  void *p = X.heap_malloc(misuse_heap, 64); /* must not return */
  fprintf(stderr, "fw_heap_malloc from a foreign thread returned %p\n", p);
  _exit(4);
}
static void t_misuse_child(void) {
  if (X.option_get("cautious") != 1) _exit(3);
  misuse_heap = X.heap_new();
  void *p = X.heap_malloc(misuse_heap, 64);
  if (!p) _exit(5);
  pthread_t t;
  if (pthread_create(&t, NULL, misuse_thread, NULL) != 0) _exit(6);
  pthread_join(t, NULL);
  _exit(4);
}

static void t_misuse(void) {
  const char *const set[] = {"FREEWAY_CAUTIOUS=1", NULL};
  char out[4096];
  int st = fwt_child_exec("_misuse_child", set, out, sizeof out);
  if (WIFEXITED(st)) {
    int code = WEXITSTATUS(st);
    CHECKF(code != 3, "FREEWAY_CAUTIOUS=1 did not set the cautious option");
    CHECKF(0, "allocating from another thread's heap in cautious mode did not abort (exit %d): %s",
           code, out);
  }
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child ended with status %#x", st);
  CHECKF(out[0] != 0, "cautious mode aborted without reporting the misuse");
  fwt_log("misuse reported as: %.200s", out);
}

/* Pages of classes the program stopped using go back without fw_collect:
 * after one block of each of 16 medium classes is freed, each class keeps
 * its (empty) page; once they have been idle for two purge delays, slow-path
 * calls on the heap give them back. */
static void t_idle(void) {
  fw_heap_t *h = X.heap_new();
  /* all live at once (a class that needs a page takes it from an empty
   * head of another class, so one at a time would leave a single page) */
  char *blocks[16];
  for (size_t k = 0; k < 16; k++) {
    size_t n = 9000 + k * 6000;
    blocks[k] = X.heap_malloc(h, n);
    CHECK(blocks[k] != NULL);
    memset(blocks[k], 1, n);
  }
  for (size_t k = 0; k < 16; k++) X.free(blocks[k]);
  fw_heap_stats_t s;
  heap_stats(h, &s);
  size_t before = s.pages;
  CHECKF(before >= 8, "only %zu pages for 16 medium size classes", before);
  long delay = X.option_get("purge_delay");
  /* The slow path of one class (2 KiB: above the direct table) keeps
   * running; its own page stays in use. */
  for (int round = 0; round < 6; round++) {
    struct timespec ts = {0, (delay > 0 ? delay : 10) * 1000000L};
    nanosleep(&ts, NULL);
    for (int i = 0; i < 200; i++) {
      void *q = X.heap_malloc(h, 2000);
      CHECK(q != NULL);
      X.free(q);
    }
  }
  heap_stats(h, &s);
  fwt_log("idle: %zu pages after freeing one block of 16 medium classes, %zu after they stayed idle", before,
          s.pages);
  CHECKF(s.pages <= 2, "%zu pages still held by idle size classes (%zu before)", s.pages, before);
  X.heap_destroy(h);
}

/* ---- emptied pages kept ----------------------------------------------------------
 * A heap keeps up to FREEWAY_PAGE_RETAIN KiB of pages a batch of frees
 * emptied, free lists intact, for the next batch of the same size class:
 * the batch comes back from the same memory with no page set up again. The
 * checking modes keep none. A free into a kept page is a double free, and
 * is reported as one. */
enum { RETAIN_N = 80, RETAIN_SIZE = 4000 };

static size_t retain_batch(fw_heap_t *h, void **p) {
  for (size_t i = 0; i < RETAIN_N; i++) {
    p[i] = X.heap_malloc(h, RETAIN_SIZE);
    CHECK(p[i] != NULL);
    memset(p[i], 0x5a, RETAIN_SIZE);
  }
  fw_heap_stats_t s;
  heap_stats(h, &s);
  for (size_t i = 0; i < RETAIN_N; i++) X.free(p[i]);
  return s.pages;
}

static void retain_double_free(void *arg) {
  (void)arg;
  fw_heap_t *h = X.heap_new();
  void *p[RETAIN_N];
  retain_batch(h, p);
  X.free(p[0]); /* the first page: kept (the head is the newest page) */
  _exit(0);
}

static void t_retain(void) {
  bool checking = X.option_get("cautious") == 1 || X.option_get("secure") == 1;
  long old = X.option_get("page_retain");
  CHECK(old >= 0);
  fw_heap_t *h = X.heap_new();
  void *p[RETAIN_N], *q[RETAIN_N];
  size_t busy = retain_batch(h, p);
  CHECKF(busy >= 4, "%d blocks of %d B in only %zu pages", RETAIN_N, RETAIN_SIZE, busy);
  fw_heap_stats_t s;
  heap_stats(h, &s);
  CHECKF(s.blocks_live == 0, "%zu blocks live after freeing all", s.blocks_live);
  if (checking || old * 1024 < (long)(busy * 64 * 1024)) {
    CHECKF(s.pages <= 1, "%zu pages held after the batch was freed (cautious or secure mode, or page_retain %ld)",
           s.pages, old);
    X.heap_destroy(h);
    return;
  }
  CHECKF(s.pages == busy, "%zu of the batch's %zu pages held after it was freed: the emptied ones were not kept",
         s.pages, busy);
  /* the next batch comes from the same pages */
  size_t again = retain_batch(h, q);
  CHECKF(again == busy, "the second batch took %zu pages, the first %zu", again, busy);
  size_t reused = 0;
  for (size_t i = 0; i < RETAIN_N; i++)
    for (size_t j = 0; j < RETAIN_N; j++)
      if (q[i] == p[j]) {
        reused++;
        break;
      }
  CHECKF(reused == RETAIN_N, "only %zu of the second batch's %d blocks came from the first batch's pages", reused,
         (int)RETAIN_N);
  /* a batch of another class takes the kept pages' slots, not fresh
   * memory (a buffer grown by realloc moves from class to class) */
  for (size_t i = 0; i < RETAIN_N; i++) {
    q[i] = X.heap_malloc(h, 3000);
    CHECK(q[i] != NULL);
    memset(q[i], 0x3c, 3000);
  }
  heap_stats(h, &s);
  CHECKF(s.pages <= busy + 1, "%zu pages held with a batch of 3000 B live after one of %d B was freed (%zu pages): "
         "the kept pages did not give their slots to the new class", s.pages, RETAIN_SIZE, busy);
  for (size_t i = 0; i < RETAIN_N; i++) X.free(q[i]);
  X.heap_collect(h, true);
  /* the cap: two pages' worth */
  CHECK(X.option_set("page_retain", 128) == 0);
  retain_batch(h, p);
  heap_stats(h, &s);
  CHECKF(s.pages <= 3 && s.bytes_reserved <= 3 * (64 << 10), "%zu pages (%zu bytes) held with page_retain 128 KiB",
         s.pages, s.bytes_reserved);
  /* none */
  CHECK(X.option_set("page_retain", 0) == 0);
  retain_batch(h, p);
  heap_stats(h, &s);
  CHECKF(s.pages <= 1, "%zu pages held with page_retain 0", s.pages);
  CHECK(X.option_set("page_retain", old) == 0);
  /* fw_heap_collect gives the kept pages back */
  retain_batch(h, p);
  heap_stats(h, &s);
  CHECK(s.pages == busy);
  X.heap_collect(h, true);
  heap_stats(h, &s);
  CHECKF(s.pages == 0, "%zu pages held after fw_heap_collect(force)", s.pages);
  X.heap_destroy(h);
  /* a free into a kept page */
  char out[4096];
  int st = fwt_child(retain_double_free, NULL, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "a double free into a kept page: child status %#x (%s)", st,
         out);
  CHECKF(strstr(out, "double free") != NULL, "a double free into a kept page reported as: %.300s", out);
  fwt_log("retain: %zu pages kept and reused; double free into one: %.120s", busy, out);
}

/* ---- frees of another thread's blocks, batched ---------------------------------
 * A thread that frees blocks of another thread's default heap holds those of
 * one page and hands them over together (FREEWAY_REMOTE_BATCH, free.c): till
 * then the owner counts them live. They come back when the freeing thread
 * collects, when it holds a batch, and when it exits. Not in the checking
 * modes, and never for a user heap, which may be destroyed while blocks
 * freed into it would wait. */
enum { RB_N = 20, RB_SIZE = 48, RB_MAX = 4000 };

typedef struct {
  void **p;
  size_t n;
  bool collect;     /* collect after the frees (else: exit holding them) */
  bool heapless;    /* frees only: no allocation of its own first */
  bool bytes;       /* the heap's live bytes are measured, not its blocks */
  atomic_int step;  /* the main thread sets 1: free; 3: collect; 5: exit;
                       the thread answers 2: freed; 4: collected */
  pthread_t t;
} rb_job;

static void rb_wait(atomic_int *step, int want) {
  while (atomic_load(step) < want) sched_yield();
}

static void *rb_free(void *arg) {
  rb_job *j = arg;
  if (!j->heapless) X.free(X.malloc(1000)); /* a thread that allocates too has its heap */
  rb_wait(&j->step, 1);
  for (size_t i = 0; i < j->n; i++) X.free(j->p[i]);
  if (!j->collect) return NULL;
  atomic_store(&j->step, 2);
  rb_wait(&j->step, 3);
  X.collect(false);
  atomic_store(&j->step, 4);
  rb_wait(&j->step, 5);
  return NULL;
}

/* RB_N blocks of one page of h (blocks of up to 8 KiB share a 64 KiB-aligned
 * page); the others taken on the way are in *extra, *nextra of them. */
static void rb_batch(fw_heap_t *h, void **p, void **extra, size_t *nextra) {
  size_t n = 0;
  *nextra = 0;
  while (n < RB_N) {
    void *q = X.heap_malloc(h, RB_SIZE);
    CHECK(q != NULL);
    if (n && ((uintptr_t)q >> 16) != ((uintptr_t)p[0] >> 16)) {
      CHECK(*nextra + n <= RB_MAX);
      for (size_t i = 0; i < n; i++) extra[(*nextra)++] = p[i];
      n = 0;
    }
    p[n++] = q;
  }
}

/* h's live blocks, or with j->bytes its live bytes */
static size_t rb_live(const rb_job *j, fw_heap_t *h) {
  X.heap_collect(h, false);
  fw_heap_stats_t s;
  heap_stats(h, &s);
  return j->bytes ? s.bytes_live : s.blocks_live;
}

/* Starts a thread that will free p[0..n) (pthread_create allocates in the
 * calling thread: the measure is taken after it); returns h's live blocks
 * then. */
static size_t rb_start(rb_job *j, fw_heap_t *h, void **p, size_t n, bool collect, bool heapless) {
  j->p = p;
  j->n = n;
  j->collect = collect;
  j->heapless = heapless;
  atomic_store(&j->step, 0);
  CHECK(pthread_create(&j->t, NULL, rb_free, j) == 0);
  return rb_live(j, h);
}

/* Lets the thread free, and returns h's live blocks once it has (and, with
 * collect, before it collects). */
static size_t rb_freed(rb_job *j, fw_heap_t *h) {
  atomic_store(&j->step, 1);
  if (j->collect) rb_wait(&j->step, 2);
  else CHECK(pthread_join(j->t, NULL) == 0);
  return rb_live(j, h);
}

/* The thread collects; h's live blocks then. */
static size_t rb_collected(rb_job *j, fw_heap_t *h) {
  atomic_store(&j->step, 3);
  rb_wait(&j->step, 4);
  size_t n = rb_live(j, h);
  atomic_store(&j->step, 5);
  CHECK(pthread_join(j->t, NULL) == 0);
  return n;
}

/* Whether this mode batches remote frees; if so, at the default batch of
 * 32 (the option's value before is in *old, for the test to put back). */
static bool rb_setup(long *old) {
  *old = X.option_get("remote_batch");
  if (*old > 0) CHECK(X.option_set("remote_batch", 32) == 0);
  return X.option_get("cautious") != 1 && X.option_get("secure") != 1 && *old > 0;
}

static void t_remote_batch(void) {
  long old;
  bool batching = rb_setup(&old);
  fw_heap_t *def = X.heap_get_default();
  CHECK(def != NULL);
  void *p[RB_N], **extra = fwt_scratch(RB_MAX * sizeof *extra);
  size_t nextra;
  rb_job j = {.bytes = false};

  /* held until the freeing thread collects */
  rb_batch(def, p, extra, &nextra);
  size_t before = rb_start(&j, def, p, RB_N, true, false);
  size_t held = rb_freed(&j, def);
  CHECKF(held == (batching ? before : before - RB_N), "%zu blocks live after another thread freed %d of %zu (%s)",
         held, (int)RB_N, before, batching ? "held by it for a batch" : "no batching in this mode");
  size_t after = rb_collected(&j, def);
  CHECKF(after == before - RB_N, "%zu blocks live after the freeing thread collected, want %zu", after,
         before - RB_N);
  for (size_t i = 0; i < nextra; i++) X.free(extra[i]);

  /* handed over when the freeing thread exits */
  rb_batch(def, p, extra, &nextra);
  before = rb_start(&j, def, p, RB_N, false, false);
  after = rb_freed(&j, def);
  CHECKF(after == before - RB_N, "%zu blocks live after the freeing thread exited, want %zu", after, before - RB_N);
  for (size_t i = 0; i < nextra; i++) X.free(extra[i]);

  /* a thread that only frees gets its heap, and holds blocks, once it has
   * freed a few */
  rb_batch(def, p, extra, &nextra);
  before = rb_start(&j, def, p, RB_N, true, true);
  held = rb_freed(&j, def);
  CHECKF(batching ? held > before - RB_N && held < before : held == before - RB_N,
         "a thread that only frees: %zu blocks live after it freed %d of %zu", held, (int)RB_N, before);
  after = rb_collected(&j, def);
  CHECKF(after == before - RB_N, "%zu blocks live after the thread that only frees collected, want %zu", after,
         before - RB_N);
  for (size_t i = 0; i < nextra; i++) X.free(extra[i]);

  /* a batch of 4: 20 blocks go over in five batches, none held */
  if (batching) {
    CHECK(X.option_set("remote_batch", 4) == 0);
    rb_batch(def, p, extra, &nextra);
    before = rb_start(&j, def, p, RB_N, true, false);
    held = rb_freed(&j, def);
    CHECKF(held == before - RB_N, "remote_batch 4: %zu blocks live after another thread freed %d of %zu, want %zu",
           held, (int)RB_N, before, before - RB_N);
    rb_collected(&j, def);
    for (size_t i = 0; i < nextra; i++) X.free(extra[i]);
    CHECK(X.option_set("remote_batch", 32) == 0);
  }

  /* a user heap's blocks go back at once: destroying the heap while the
   * freeing thread lives on loses nothing of it */
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  rb_batch(h, p, extra, &nextra);
  before = rb_start(&j, h, p, RB_N, true, false);
  held = rb_freed(&j, h);
  CHECKF(held == before - RB_N, "user heap: %zu blocks live after another thread freed %d of %zu", held, (int)RB_N,
         before);
  X.heap_destroy(h);
  atomic_store(&j.step, 3);
  rb_wait(&j.step, 4);
  atomic_store(&j.step, 5);
  CHECK(pthread_join(j.t, NULL) == 0);
  /* the memory of the destroyed heap serves again, intact */
  for (size_t i = 0; i < RB_N; i++) {
    p[i] = X.malloc(RB_SIZE);
    CHECK(p[i] != NULL);
    memset(p[i], 0x3c, RB_SIZE);
  }
  for (size_t i = 0; i < RB_N; i++) X.free(p[i]);
  CHECK(X.option_set("remote_batch", old) == 0);
  fwt_scratch_free(extra, RB_MAX * sizeof *extra);
  fwt_log("remote_batch: %s", batching ? "blocks held until collect, exit and batch size" : "no batching in this mode");
}

/* Blocks of many pages (40 size classes) freed by another thread: it holds
 * some of them, each page's in an entry of its own, but never more than
 * 128 KiB in all (free.c FW_RFREE_HELD: blocks held are blocks their owner
 * cannot reuse), and hands all of them over when it collects. */
enum { RBB_SIZES = 40, RBB_EACH = 16, RBB_N = RBB_SIZES * RBB_EACH };

static void t_remote_batch_bound(void) {
  long old;
  bool batching = rb_setup(&old);
  fw_heap_t *def = X.heap_get_default();
  CHECK(def != NULL);
  void **p = fwt_scratch(RBB_N * sizeof *p);
  size_t freed = 0;
  for (size_t k = 0; k < RBB_N; k++) {
    size_t n = 32 + (k % RBB_SIZES) * 100; /* 32 B .. 3.9 KiB */
    p[k] = X.malloc(n);
    CHECK(p[k] != NULL);
    memset(p[k], 0x5a, n);
    freed += X.usable_size(p[k]);
  }
  rb_job j = {.bytes = true};
  size_t before = rb_start(&j, def, p, RBB_N, true, false);
  CHECK(before >= freed);
  size_t held = rb_freed(&j, def) - (before - freed);
  CHECKF(held <= ((size_t)128 << 10), "another thread freed %zu bytes of %d pages' blocks and holds %zu of them",
         freed, RBB_SIZES, held);
  CHECKF(batching ? held > 0 : held == 0, "%zu bytes held (%s)", held, batching ? "batching" : "no batching in this mode");
  size_t after = rb_collected(&j, def);
  CHECKF(after == before - freed, "%zu bytes live after the freeing thread collected, want %zu", after,
         before - freed);
  CHECK(X.option_set("remote_batch", old) == 0);
  fwt_scratch_free(p, RBB_N * sizeof *p);
  fwt_log("remote_batch_bound: %zu of %zu bytes held", held, freed);
}

static void *rb_double_free(void *arg) {
  void *b = arg;
  X.free(X.malloc(1000)); /* a thread with a heap: it holds what it frees */
  X.free(b);
  X.free(b); /* held for a batch: its first word is a list link now */
  return NULL;
}

static void t_remote_batch_double(void *arg) {
  (void)arg;
  void *b = X.malloc(RB_SIZE);
  pthread_t t;
  if (pthread_create(&t, NULL, rb_double_free, b) != 0) _exit(3);
  pthread_join(t, NULL);
  _exit(0);
}

static void t_remote_batch_df(void) {
  char out[4096];
  int st = fwt_child(t_remote_batch_double, NULL, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "a second free by another thread: child status %#x (%s)", st,
         out);
  CHECKF(strstr(out, "double free") != NULL, "a second free by another thread reported as: %.300s", out);
}

/* A page of the heap's own that another thread gave back a good number
 * of blocks (a 4 KiB page's worth or more) serves before the page at hand
 * carves new ones: a producer whose blocks a consumer frees reuses them
 * instead of bringing in new memory (page.c fw_page_queue_find). The owner
 * fills three pages of 256-byte blocks and starts a fourth; another thread
 * frees the first two (but a block of each); the owner's next blocks must
 * come from those two as soon as the fourth's carved blocks run out, not
 * after the fourth is carved whole. 64-bit builds only (the remote lists
 * carry their length there), in the default mode. */
enum { RR_BS = 256, RR_PAGE = 64 << 10, RR_PER = RR_PAGE / RR_BS, RR_MAX = 4 * RR_PER + 8 };

typedef struct {
  void **p;
  size_t n;
} rr_job;

static void *rr_free(void *arg) {
  rr_job *j = arg;
  X.free(X.malloc(1000)); /* a thread with a heap, as a consumer has */
  for (size_t i = 0; i < j->n; i++) X.free(j->p[i]);
  X.collect(false); /* what it held goes over */
  return NULL;
}

typedef struct {
  size_t from_fourth;  /* blocks of the fourth page before the first of another */
  int other_page;      /* which page that first other block was on: 1, 2, or 0 */
  int setup;           /* 0 if the pages came out as the test expects */
} rr_result;

static uintptr_t rr_page(const void *p) { return (uintptr_t)p / RR_PAGE; }

static void *rr_owner(void *arg) {
  rr_result *res = arg;
  void **a = fwt_scratch(RR_MAX * sizeof *a);
  uintptr_t pages[4];
  size_t npages = 0, n = 0, start[4];
  while (npages < 4 && n < RR_MAX) {
    a[n] = X.malloc(RR_BS);
    if (!a[n]) break;
    if (!npages || rr_page(a[n]) != pages[npages - 1]) {
      start[npages] = n;
      pages[npages++] = rr_page(a[n]);
    }
    n++;
  }
  res->setup = npages == 4 ? 0 : 1;
  /* the first two pages' blocks but their first go back from another thread */
  void **back = fwt_scratch(2 * RR_PER * sizeof *back);
  size_t nb = 0;
  for (size_t i = start[0] + 1; i < start[2]; i++)
    if (i != start[1]) back[nb++] = a[i];
  rr_job j = {back, nb};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, rr_free, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  void **more = fwt_scratch(RR_PER * sizeof *more);
  res->from_fourth = 0;
  res->other_page = 0;
  size_t m = 0;
  for (; m < RR_PER; m++) {
    more[m] = X.malloc(RR_BS);
    CHECK(more[m] != NULL);
    uintptr_t pg = rr_page(more[m]);
    if (pg == pages[3]) {
      res->from_fourth++;
      continue;
    }
    res->other_page = pg == pages[0] ? 1 : pg == pages[1] ? 2 : 0;
    m++;
    break;
  }
  for (size_t i = 0; i < m; i++) X.free(more[i]);
  X.free(a[start[0]]);
  X.free(a[start[1]]);
  for (size_t i = start[2]; i < n; i++) X.free(a[i]);
  fwt_scratch_free(more, RR_PER * sizeof *more);
  fwt_scratch_free(back, 2 * RR_PER * sizeof *back);
  fwt_scratch_free(a, RR_MAX * sizeof *a);
  return NULL;
}

static void t_remote_returned(void) {
  if (sizeof(void *) < 8 || X.option_get("cautious") == 1 || X.option_get("secure") == 1) {
    fwt_log("remote_returned: not in this build or mode");
    return;
  }
  rr_result res;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, rr_owner, &res) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECKF(res.setup == 0, "a fresh thread's 256-byte blocks did not fill four pages");
  CHECKF(res.other_page != 0 && res.from_fourth < RR_PER / 2,
         "%zu more blocks came from the page at hand (of %d) before one from a page another thread gave back "
         "blocks to (that one from page %d)",
         res.from_fourth, (int)RR_PER, res.other_page);
  fwt_log("remote_returned: %zu blocks of the fourth page, then page %d's", res.from_fourth, res.other_page);
}

/* ---- queries after frees by other threads ---------------------------------------
 * Blocks another thread freed wait on their page's remote list (or, the first
 * one into a full page, on the heap's delayed list) until the owner next
 * needs them; the owner's queries must count them as free all the same. */
typedef struct { void **p; size_t from, n, step; } qfree_job;

static void *qfree(void *arg) {
  qfree_job *j = arg;
  for (size_t i = j->from; i < j->n; i += j->step) X.free(j->p[i]);
  return NULL;
}

static void t_remote_query(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  /* 3000 blocks of 64 B fill whole pages (full pages route the first remote
   * free to the heap), then mixed sizes */
  enum { N = 4000 };
  void **p = fwt_scratch(N * sizeof *p);
  fwt_rng r;
  fwt_rng_init(&r, 77);
  for (size_t i = 0; i < N; i++) {
    p[i] = X.heap_malloc(h, i < 3000 ? 64 : fwt_random_size(&r, 16 << 10));
    CHECK(p[i] != NULL);
  }
  fw_heap_stats_t s;
  heap_stats(h, &s);
  CHECKF(s.blocks_live == N, "blocks_live %zu, want %d", s.blocks_live, (int)N);
  pthread_t t;
  qfree_job j = {p, 0, N, 2};
  CHECK(pthread_create(&t, NULL, qfree, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (size_t i = 0; i < N; i++)
    CHECKF(X.heap_contains(h, p[i]) == (i % 2 == 1), "block %zu (%p), %s by another thread: heap_contains says %d",
           i, p[i], i % 2 ? "live" : "freed", (int)X.heap_contains(h, p[i]));
  heap_stats(h, &s);
  CHECKF(s.blocks_live == N / 2, "after another thread freed half: blocks_live %zu, want %d", s.blocks_live,
         (int)(N / 2));
  const void **seen = fwt_scratch(N * sizeof *seen);
  visit_state v = {seen, 0, N, 0, true, h};
  X.heap_visit(h, visitor, &v);
  CHECKF(v.count == N / 2, "visited %zu blocks after another thread freed half, want %d", v.count, (int)(N / 2));
  for (size_t i = 0; i < v.count && i < N; i++)
    for (size_t k = 0; k < N; k += 2) CHECKF(seen[i] != p[k], "visited %p, freed by another thread", seen[i]);
  for (size_t i = 1; i < N; i += 2) X.free(p[i]);
  heap_stats(h, &s);
  CHECKF(s.blocks_live == 0, "all freed: blocks_live %zu", s.blocks_live);
  X.heap_destroy(h);
  fwt_scratch_free(seen, N * sizeof *seen);
  fwt_scratch_free(p, N * sizeof *p);
}

static const fwt_section sections[] = {
  {"basic", t_basic},
  {"calloc_realloc", t_calloc_realloc},
  {"stats", t_stats},
  {"visit", t_visit},
  {"remote_query", t_remote_query},
  {"delete", t_delete},
  {"destroy", t_destroy},
  {"collect", t_collect},
  {"idle", t_idle},
  {"retain", t_retain},
  {"remote_batch", t_remote_batch},
  {"remote_batch_df", t_remote_batch_df},
  {"remote_batch_bound", t_remote_batch_bound},
  {"remote_returned", t_remote_returned},
  {"many", t_many},
  {"remote_destroy", t_remote_destroy},
  {"remote_delete", t_remote_delete},
  {"misuse", t_misuse},
  {"_misuse_child", t_misuse_child},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
