/* limits.c — address space well beyond what a fixed table of arenas covers,
 * ordinary allocation after thousands of failed huge requests, and
 * alignments far above a segment (4 MiB to 1 GiB) through every aligned
 * allocation call, a user heap, and frees from another thread. */
#include "fwtest.h"

#include <pthread.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* ---- more than 4 GiB of arenas of 4 MiB -------------------------------------- */
/* Run with FREEWAY_ARENA_RESERVE=4: every arena is one segment, so 6 GiB
 * needs well over a thousand of them. Only one byte of each block is
 * touched: the memory costs address space, not RSS. */
static void t_arena_many(void) {
  if (sizeof(void *) < 8) {
    fwt_log("arena_many: needs a 64-bit address space; skipped");
    exit(77);
  }
  long reserve = X.option_get("arena_reserve");
  CHECKF(reserve == 4, "FREEWAY_ARENA_RESERVE=4 expected in the environment (arena_reserve is %ld)", reserve);
  size_t count = ((size_t)6 << 30) / MiB;
  unsigned char **v = fwt_scratch(count * sizeof *v);
  for (size_t i = 0; i < count; i++) {
    v[i] = A.malloc(MiB);
    CHECKF(v[i] != NULL, "malloc(1 MiB) number %zu failed, after %zu MiB", i + 1, i);
    v[i][(i * 4096) % MiB] = (unsigned char)(i | 1);
  }
  fwt_log("arena_many: %zu blocks of 1 MiB live; VM %zu MiB, RSS %zu MiB", count, fwt_vm_size() >> 20,
          fwt_rss() >> 20);
  for (size_t i = 0; i < count; i++) {
    CHECKF(v[i][(i * 4096) % MiB] == (unsigned char)(i | 1), "block %zu (%p) lost its byte", i, (void *)v[i]);
    A.free(v[i]);
  }
  fwt_scratch_free(v, count * sizeof *v);
}

/* ---- allocation keeps working after thousands of failed huge requests ------- */
static void t_huge_fail_churn(void) {
  /* PTRDIFF_MAX itself would fit a 32-bit process's address space */
  size_t wide = sizeof(size_t) == 8;
  size_t bad[] = {wide ? (size_t)PTRDIFF_MAX : FWT_IMPOSSIBLE(3), FWT_IMPOSSIBLE(1), FWT_IMPOSSIBLE(2),
                  FWT_IMPOSSIBLE(4), FWT_IMPOSSIBLE(8), wide ? (size_t)PTRDIFF_MAX - 4 * MiB : FWT_IMPOSSIBLE(16)};
  size_t rounds = 3000;
  size_t sizes[] = {MiB, MiB, MiB + 4096, 300000, 70000, 5000, 100, 24};
  for (size_t round = 0; round < rounds; round++) {
    size_t n = bad[round % FWT_COUNT(bad)];
    errno = 0;
    void *p;
    switch (round % 4) {
      case 0: p = A.malloc(n); break;
      case 1: p = A.calloc(1, n); break;
      case 2: p = A.realloc(NULL, n); break;
      default: p = X.malloc_aligned(n, 4096); break;
    }
    int e = errno;
    CHECKF(p == NULL && e == ENOMEM, "round %zu: request of %zu bytes returned %p (errno %d)", round, n, p, e);
    /* A few MiB, all freed again before the next failure. */
    unsigned char *v[FWT_COUNT(sizes)];
    for (size_t k = 0; k < FWT_COUNT(sizes); k++) {
      v[k] = A.malloc(sizes[k]);
      CHECKF(v[k] != NULL, "round %zu: malloc(%zu) failed after %zu failed huge requests", round, sizes[k],
             round + 1);
      v[k][0] = v[k][sizes[k] - 1] = (unsigned char)round;
    }
    for (size_t k = 0; k < FWT_COUNT(sizes); k++) A.free(v[k]);
    /* Nothing left cached either: the arenas are idle when the next huge
     * request fails. */
    X.collect(true);
  }
  size_t count = fwt_scaled(256);
  unsigned char **big = fwt_scratch(count * sizeof *big);
  for (size_t i = 0; i < count; i++) {
    big[i] = A.malloc(MiB);
    CHECKF(big[i] != NULL, "malloc(1 MiB) number %zu failed after %zu failed huge requests", i + 1, rounds);
    big[i][i % MiB] = 1;
  }
  fwt_log("huge_fail_churn: %zu failed huge requests, then %zu MiB in 1 MiB blocks", rounds, count);
  for (size_t i = 0; i < count; i++) A.free(big[i]);
  fwt_scratch_free(big, count * sizeof *big);
}

/* ---- alignments of 4 MiB to 1 GiB -------------------------------------------- */
/* Blocks are written at both ends only (up to END bytes each): that shows
 * they are writable and lets realloc be checked without touching GiBs. */
#define END ((size_t)8192)

static unsigned char end_byte(size_t off, uint64_t seed) {
  return (unsigned char)(fwt_mix(seed + off / 8) >> (8 * (off % 8)));
}
static void fill_ends(unsigned char *p, size_t n, uint64_t seed) {
  size_t h = n < END ? n : END;
  for (size_t i = 0; i < h; i++) p[i] = end_byte(i, seed);
  for (size_t i = n - h; i < n; i++) p[i] = end_byte(i, seed);
}
/* Checks the bytes fill_ends(p, n) wrote that lie below limit. */
static void check_ends(const unsigned char *p, size_t n, size_t limit, uint64_t seed, const char *what) {
  size_t h = n < END ? n : END;
  for (size_t i = 0; i < h && i < limit; i++)
    CHECKF(p[i] == end_byte(i, seed), "%s: block %p of %zu bytes differs at offset %zu", what, (const void *)p, n,
           i);
  for (size_t i = n - h; i < n && i < limit; i++)
    CHECKF(p[i] == end_byte(i, seed), "%s: block %p of %zu bytes differs at offset %zu", what, (const void *)p, n,
           i);
}

enum { VIA_POSIX_MEMALIGN, VIA_ALIGNED_ALLOC, VIA_MEMALIGN, VIA_FW_MALLOC_ALIGNED, VIA_COUNT };
static const char *via_name[VIA_COUNT] = {"posix_memalign", "aligned_alloc", "memalign", "fw_malloc_aligned"};

static void *alloc_via(int via, size_t size, size_t align) {
  errno = 0;
  switch (via) {
    case VIA_POSIX_MEMALIGN: {
      void *out = NULL;
      int rc = A.posix_memalign(&out, align, size);
      if (rc != 0) {
        errno = rc;
        return NULL;
      }
      return out;
    }
    case VIA_ALIGNED_ALLOC: return A.aligned_alloc(align, size);
    case VIA_MEMALIGN: return A.memalign(align, size);
    default: return X.malloc_aligned(size, align);
  }
}

static size_t big_aligns(size_t *out) {
  size_t n = 0;
  out[n++] = 4 * MiB;
  out[n++] = 8 * MiB;
  out[n++] = 64 * MiB;
  if (sizeof(void *) >= 8) out[n++] = (size_t)1 << 30;
  return n;
}
static void sizes_for(size_t a, size_t *out) {
  out[0] = 1;
  out[1] = a - 1;
  out[2] = a;
  out[3] = a + 1;
  out[4] = 3 * a;
}

/* A fresh block: aligned, big enough, writable at both ends. */
static void check_new(unsigned char *p, size_t size, size_t align, const char *what, uint64_t seed) {
  CHECKF(p != NULL, "%s(size %zu, alignment %zu MiB) failed", what, size, align >> 20);
  CHECKF(fwt_aligned(p, align), "%s(size %zu, alignment %zu MiB) = %p, not aligned", what, size, align >> 20,
         (void *)p);
  size_t u = X.usable_size(p);
  CHECKF(u >= size, "%s(size %zu, alignment %zu MiB): usable size %zu", what, size, align >> 20, u);
  fill_ends(p, size, seed);
  check_ends(p, size, size, seed, what);
}

/* realloc to a larger and to a smaller size keeps the contents. Blocks
 * over 256 MiB shrink first: growing them would copy GiBs. */
static unsigned char *check_realloc(unsigned char *p, size_t size, uint64_t seed, const char *what,
                                    void *(*re)(void *, size_t, void *), void *ctx) {
  size_t larger = size + size / 2 + 1;
  size_t smaller = size / 3 + 1;
  if (size > 256 * MiB) {
    unsigned char *q = re(p, 64 * 1024, ctx);
    CHECKF(q != NULL, "%s: realloc from %zu to 64 KiB failed", what, size);
    check_ends(q, size, 64 * 1024, seed, what);
    fill_ends(q, 64 * 1024, seed);
    unsigned char *r = re(q, 3 * MiB, ctx);
    CHECKF(r != NULL, "%s: realloc from 64 KiB to 3 MiB failed", what);
    check_ends(r, 64 * 1024, 64 * 1024, seed, what);
    return r;
  }
  unsigned char *q = re(p, larger, ctx);
  CHECKF(q != NULL, "%s: realloc from %zu to %zu failed", what, size, larger);
  CHECKF(X.usable_size(q) >= larger, "%s: usable size %zu after realloc to %zu", what, X.usable_size(q), larger);
  check_ends(q, size, size, seed, what);
  q[larger - 1] = 0x77;
  unsigned char *r = re(q, smaller, ctx);
  CHECKF(r != NULL, "%s: realloc from %zu to %zu failed", what, larger, smaller);
  check_ends(r, size, smaller, seed, what);
  return r;
}

static void *std_realloc(void *p, size_t n, void *ctx) {
  (void)ctx;
  return A.realloc(p, n);
}

static void t_align_big(void) {
  size_t aligns[4], sizes[5];
  size_t na = big_aligns(aligns);
  for (size_t ai = 0; ai < na; ai++) {
    size_t a = aligns[ai];
    sizes_for(a, sizes);
    for (size_t si = 0; si < 5; si++) {
      for (int via = 0; via < VIA_COUNT; via++) {
        size_t n = sizes[si];
        uint64_t seed = fwt_mix(a + n * 7 + (uint64_t)via);
        unsigned char *p = alloc_via(via, n, a);
        check_new(p, n, a, via_name[via], seed);
        p = check_realloc(p, n, seed, via_name[via], std_realloc, NULL);
        A.free(p);
      }
    }
    fwt_log("align_big: alignment %zu MiB: all calls and sizes ok", a >> 20);
  }
}

/* Size 0 at a big alignment: still a block of its own (it used to start at
 * its segment's end, on the next segment's header, with usable size 0). */
static void t_align_big_size0(void) {
  bool cautious = X.option_get("cautious") == 1;
  size_t aligns[4];
  size_t na = big_aligns(aligns);
  for (size_t ai = 0; ai < na; ai++) {
    size_t a = aligns[ai];
    unsigned char *keep[4];
    for (int k = 0; k < 4; k++) {
      void *p = NULL;
      CHECK(A.posix_memalign(&p, a, 0) == 0 && p != NULL && ((uintptr_t)p & (a - 1)) == 0);
      keep[k] = p;
      /* cautious mode: the usable size is the request, and a byte written
       * there would be an overrun */
      if (cautious) {
        CHECKF(A.usable_size(p) == 0, "cautious mode, size 0: usable size %zu", A.usable_size(p));
        continue;
      }
      CHECKF(A.usable_size(p) >= 1, "posix_memalign(alignment %zu MiB, size 0): usable size %zu", a >> 20,
             A.usable_size(p));
      keep[k][0] = (unsigned char)(0xA0 + k);
    }
    for (int k = 0; k < 4 && !cautious; k++) CHECK(keep[k][0] == (unsigned char)(0xA0 + k));
    for (int k = 0; k < 4; k++) A.free(keep[k]);
  }
}

/* ---- freed by another thread --------------------------------------------------- */
typedef struct remote_job {
  unsigned char *p[VIA_COUNT];
  size_t n;
  uint64_t seed[VIA_COUNT];
} remote_job;

static void *remote_free(void *arg) {
  remote_job *j = arg;
  for (int via = 0; via < VIA_COUNT; via++) {
    check_ends(j->p[via], j->n, j->n, j->seed[via], "freed by another thread");
    if (via == VIA_FW_MALLOC_ALIGNED) X.free(j->p[via]);
    else A.free(j->p[via]);
  }
  return NULL;
}

static void t_align_big_remote(void) {
  size_t aligns[4], sizes[5];
  size_t na = big_aligns(aligns);
  for (size_t ai = 0; ai < na; ai++) {
    size_t a = aligns[ai];
    sizes_for(a, sizes);
    for (size_t si = 0; si < 5; si++) {
      /* twice: the second round finds whatever the remote frees left */
      for (int round = 0; round < 2; round++) {
        remote_job j;
        j.n = sizes[si];
        for (int via = 0; via < VIA_COUNT; via++) {
          j.seed[via] = fwt_mix(a ^ j.n ^ ((uint64_t)via << 40) ^ ((uint64_t)round << 50));
          j.p[via] = alloc_via(via, j.n, a);
          check_new(j.p[via], j.n, a, via_name[via], j.seed[via]);
        }
        pthread_t t;
        CHECK(pthread_create(&t, NULL, remote_free, &j) == 0);
        CHECK(pthread_join(t, NULL) == 0);
      }
    }
    fwt_log("align_big_remote: alignment %zu MiB ok", a >> 20);
  }
}

/* ---- from a user heap ---------------------------------------------------------- */
static void *heap_realloc(void *p, size_t n, void *ctx) {
  fw_heap_t *h = ctx;
  void *q = X.heap_realloc(h, p, n);
  CHECKF(q == NULL || X.heap_contains(h, q), "fw_heap_realloc(%zu) moved the block out of its heap", n);
  return q;
}

static void t_align_big_heap(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  size_t aligns[4], sizes[5];
  size_t na = big_aligns(aligns);
  unsigned char *keep = NULL;
  for (size_t ai = 0; ai < na; ai++) {
    size_t a = aligns[ai];
    sizes_for(a, sizes);
    for (size_t si = 0; si < 5; si++) {
      size_t n = sizes[si];
      uint64_t seed = fwt_mix(a * 3 + n);
      errno = 0;
      unsigned char *p = X.heap_malloc_aligned(h, n, a);
      check_new(p, n, a, "fw_heap_malloc_aligned", seed);
      CHECKF(X.heap_contains(h, p), "fw_heap_malloc_aligned(%zu, %zu MiB) = %p, not in the heap", n, a >> 20,
             (void *)p);
      CHECK(X.heap_usable_size(h, p) >= n);
      p = check_realloc(p, n, seed, "fw_heap_malloc_aligned", heap_realloc, h);
      if (ai == 0 && si == 3) keep = p;
      else X.free(p);
    }
  }
  CHECK(keep != NULL && X.heap_contains(h, keep));
  X.heap_destroy(h); /* takes the block still live with it */
}

static const fwt_section sections[] = {
  {"huge_fail_churn", t_huge_fail_churn},
  {"align_big", t_align_big},
  {"align_big_size0", t_align_big_size0},
  {"align_big_remote", t_align_big_remote},
  {"align_big_heap", t_align_big_heap},
  {"_arena_many", t_arena_many},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
