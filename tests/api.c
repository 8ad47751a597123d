/* api.c — edge cases of the malloc family: sizes from 0 to SIZE_MAX, every
 * alignment, bad alignments, realloc between size classes, usable sizes,
 * calloc zeroing and overflow, sized and aligned frees, valloc/pvalloc.
 *
 * Run as `api SECTION` (or `api all`, `api list`). */
#include "fwtest.h"

#include <pthread.h>
#include <unistd.h>

/* Kept in volatiles so that the compiler neither folds them nor warns about
 * requests larger than the address space: the allocator has to see them. */
static volatile size_t v_size_max = SIZE_MAX;
static volatile size_t v_zero = 0;

static size_t size_max(void) { return v_size_max; }

static void shuffle(void **v, size_t n, fwt_rng *r) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(fwt_next(r) % i);
    void *t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

/* Big blocks are checked at both ends only, to keep the run short. */
#define BIG_FILL ((size_t)64 << 20)
static void fill_block(void *p, size_t n, uint64_t seed) {
  if (n <= BIG_FILL) {
    fwt_fill(p, n, seed);
  } else {
    fwt_fill(p, 1 << 20, seed);
    fwt_fill((char *)p + n - (1 << 20), 1 << 20, seed ^ 1);
  }
}
static void check_block(const void *p, size_t n, uint64_t seed) {
  if (n <= BIG_FILL) {
    CHECK_PATTERN(p, n, seed);
  } else {
    CHECK_PATTERN(p, 1 << 20, seed);
    CHECK_PATTERN((const char *)p + n - (1 << 20), 1 << 20, seed ^ 1);
  }
}

/* ---- zero-sized requests ---------------------------------------------------- */
static void t_zero(void) {
  enum { N = 1000 };
  void *v[N];
  for (size_t i = 0; i < N; i++) {
    v[i] = A.malloc(v_zero);
    CHECKF(v[i] != NULL, "malloc(0) returned NULL (call %zu)", i);
  }
  /* Each malloc(0) is a distinct, freeable block. */
  qsort(v, N, sizeof v[0], cmp_ptr);
  for (size_t i = 1; i < N; i++) CHECKF(v[i] != v[i - 1], "malloc(0) returned %p twice", v[i]);
  for (size_t i = 0; i < N; i++) A.free(v[i]);

  void *a = A.calloc(0, 0), *b = A.calloc(0, 16), *c = A.calloc(16, v_zero);
  CHECK(a != NULL && b != NULL && c != NULL);
  CHECK(a != b && b != c && a != c);
  A.free(a);
  A.free(b);
  A.free(c);

  A.free(NULL);
  CHECK(A.usable_size(NULL) == 0);

  /* posix_memalign(size 0) may give NULL or a unique block; either is freeable. */
  void *p = (void *)&p;
  CHECK(A.posix_memalign(&p, 64, v_zero) == 0);
  CHECK(p != (void *)&p);
  CHECK(p == NULL || fwt_aligned(p, 64));
  A.free(p);
}

/* ---- every size up to 4 KiB ----------------------------------------------------- */
static void t_small_sizes(void) {
  enum { N = 4096 };
  void **v = fwt_scratch(N * sizeof *v);
  fwt_rng r;
  fwt_rng_init(&r, 1);
  for (int round = 0; round < 3; round++) {
    for (size_t n = 1; n <= N; n++) {
      void *p = A.malloc(n);
      CHECKF(p != NULL, "malloc(%zu)", n);
      CHECKF(fwt_aligned(p, n >= 8 ? 8 : fwt_min_align(n)), "malloc(%zu) = %p", n, p);
      size_t u = A.usable_size(p);
      CHECKF(u >= n, "malloc(%zu): usable size %zu", n, u);
      fwt_fill(p, u, fwt_seed(p, u, 7));
      v[n - 1] = p;
    }
    /* All blocks live at once: a block sharing memory with another shows up
     * as a pattern mismatch. */
    for (size_t n = 1; n <= N; n++) {
      size_t u = A.usable_size(v[n - 1]);
      CHECKF(u >= n, "usable size of malloc(%zu) changed to %zu", n, u);
      CHECK_PATTERN(v[n - 1], u, fwt_seed(v[n - 1], u, 7));
    }
    shuffle(v, N, &r);
    for (size_t i = 0; i < N; i++) A.free(v[i]);
  }
  fwt_scratch_free(v, N * sizeof *v);
}

/* C17 7.22.3: the block must be aligned for any object type with a
 * fundamental alignment whose size fits: min(16, largest power of two <= n)
 * on x86-64. */
static void t_small_align(void) {
  char bad[400] = "";
  size_t nbad = 0, nsizes = 0;
  for (size_t n = 1; n <= 4096 + 64; n++) {
    void *p[4];
    bool size_bad = false;
    for (int k = 0; k < 4; k++) {
      p[k] = A.malloc(n);
      CHECK(p[k] != NULL);
      if (!fwt_aligned(p[k], fwt_min_align(n))) {
        nbad++;
        if (!size_bad && nsizes++ < 24) {
          size_t l = strlen(bad);
          snprintf(bad + l, sizeof bad - l, " %zu (%p)", n, p[k]);
        }
        size_bad = true;
      }
    }
    for (int k = 0; k < 4; k++) A.free(p[k]);
  }
  CHECKF(nbad == 0,
         "%zu of the blocks for %zu sizes are less aligned than C17 requires (min(16, size)); sizes:%s%s",
         nbad, nsizes, bad, nsizes > 24 ? " ..." : "");
}

/* ---- powers of two +-1 up to 64 MiB ---------------------------------------------- */
static void t_pow2_sizes(void) {
  enum { N = 27 * 3 };
  void *v[N];
  size_t sz[N], m = 0;
  for (int k = 0; k <= 26; k++) {
    for (int d = -1; d <= 1; d++) {
      size_t n = ((size_t)1 << k) + (size_t)(ptrdiff_t)d;
      if (n == 0) continue;
      void *p = A.malloc(n);
      CHECKF(p != NULL, "malloc(%zu)", n);
      CHECKF(fwt_aligned(p, fwt_min_align(n) < 8 ? fwt_min_align(n) : 8), "malloc(%zu) = %p", n, p);
      if (n >= 16) CHECKF(fwt_aligned(p, 16), "malloc(%zu) = %p is not 16-aligned", n, p);
      size_t u = A.usable_size(p);
      CHECKF(u >= n, "malloc(%zu): usable size %zu", n, u);
      fill_block(p, u, fwt_seed(p, u, 3));
      v[m] = p;
      sz[m++] = n;
    }
  }
  for (size_t i = 0; i < m; i++) {
    size_t u = A.usable_size(v[i]);
    CHECK(u >= sz[i]);
    check_block(v[i], u, fwt_seed(v[i], u, 3));
  }
  for (size_t i = 0; i < m; i++) A.free(v[i]);
}

/* ---- impossible sizes ------------------------------------------------------------ */
static void expect_enomem(void *p, const char *call, size_t n) {
  int e = errno;
  CHECKF(p == NULL, "%s(%zu) returned %p", call, n, p);
  errno = e;
  CHECKF(e == ENOMEM, "%s(%zu): errno %d, want ENOMEM", call, n, e);
}

static void t_huge_fail(void) {
  size_t M = size_max();
  size_t bad[] = {M, M - 1, M - 15, M - 4095, M - ((size_t)2 << 20) + 1, M / 2 + 1, FWT_HALF_MAX,
                  FWT_IMPOSSIBLE(2), FWT_IMPOSSIBLE(8)};
  for (size_t i = 0; i < FWT_COUNT(bad); i++) {
    size_t n = bad[i];
    void *p;
    errno = 0;
    expect_enomem(A.malloc(n), "malloc", n);
    errno = 0;
    expect_enomem(A.calloc(1, n), "calloc(1, n)", n);
    errno = 0;
    expect_enomem(A.calloc(n, 1), "calloc(n, 1)", n);
    errno = 0;
    expect_enomem(A.realloc(NULL, n), "realloc(NULL, n)", n);
    errno = 0;
    expect_enomem(A.aligned_alloc(64, n), "aligned_alloc(64, n)", n);
    errno = 0;
    expect_enomem(A.memalign(4096, n), "memalign(4096, n)", n);
    errno = 0;
    expect_enomem(A.valloc(n), "valloc", n);
    errno = 0;
    expect_enomem(A.pvalloc(n), "pvalloc", n);
    errno = 0;
    expect_enomem(X.malloc_aligned(n, 64), "fw_malloc_aligned(n, 64)", n);
    errno = 0;
    expect_enomem(X.malloc_aligned(n, (size_t)1 << 20), "fw_malloc_aligned(n, 1 MiB)", n);
    errno = 0;
    expect_enomem(X.malloc(n), "fw_malloc", n);
    void *out = (void *)&out;
    int rc = A.posix_memalign(&out, 64, n);
    CHECKF(rc == ENOMEM, "posix_memalign(64, %zu) returned %d", n, rc);
    CHECKF(out == (void *)&out || out == NULL, "posix_memalign(64, %zu) failed but set *out to %p",
           n, out);
    /* Still works afterwards. */
    p = A.malloc(100);
    CHECK(p != NULL);
    fwt_fill(p, 100, 5);
    CHECK_PATTERN(p, 100, 5);
    A.free(p);
  }
  /* 32-bit: PTRDIFF_MAX (2 GiB - 1) may fit in the address space in one
   * piece: it is refused with ENOMEM, or the block is all there. */
  if (sizeof(size_t) < 8) {
    size_t n = (size_t)PTRDIFF_MAX;
    errno = 0;
    char *q = A.malloc(n);
    if (q) {
      q[0] = 1;
      q[n - 1] = 2;
      CHECKF(q[0] == 1 && q[n - 1] == 2, "malloc(%zu) = %p: its ends do not hold", n, (void *)q);
      A.free(q);
    } else {
      CHECKF(errno == ENOMEM, "malloc(%zu) failed with errno %d, want ENOMEM", n, errno);
    }
  }
}

/* ---- every alignment ------------------------------------------------------------- */
typedef struct ablock {
  void *p;
  size_t align, size, usable;
  int how;
} ablock;

static const char *how_name[] = {"fw_malloc_aligned", "aligned_alloc", "posix_memalign",
                                 "memalign"};

static void *alloc_aligned(int how, size_t a, size_t n) {
  void *p = NULL;
  switch (how) {
  case 0: return X.malloc_aligned(n, a);
  case 1: return A.aligned_alloc(a, n);
  case 2: {
    int rc = A.posix_memalign(&p, a, n);
    CHECKF(rc == 0, "posix_memalign(%zu, %zu) returned %d", a, n, rc);
    return p;
  }
  default: return A.memalign(a, n);
  }
}

static void t_alignment(void) {
  size_t maxa = X.max_alignment();
  CHECKF(maxa >= ((size_t)1 << 20), "fw_max_alignment() = %zu, below 1 MiB", maxa);
  CHECKF((maxa & (maxa - 1)) == 0, "fw_max_alignment() = %zu is not a power of two", maxa);
  size_t aligns[40], na = 0;
  for (size_t a = 1; a <= ((size_t)1 << 20); a *= 2) aligns[na++] = a;
  if (maxa > ((size_t)1 << 20)) aligns[na++] = maxa;
  enum { MAXB = 9 * 4 };
  ablock *b = fwt_scratch(MAXB * sizeof *b);
  unsigned turn = 0;
  for (size_t ia = 0; ia < na; ia++) {
    size_t a = aligns[ia];
    size_t sizes[] = {1, 8, a - 16, a - 1, a, a + 1, a + 16, 2 * a, 3 * a + 5};
    size_t nb = 0;
    for (size_t is = 0; is < FWT_COUNT(sizes); is++) {
      size_t n = sizes[is];
      if (n == 0 || n > FWT_HIGH(2)) continue; /* a - 16 wrapped for small a */
      for (int how = 0; how < 4; how++) {
        if (how == 2 && a < sizeof(void *)) continue; /* not valid for posix_memalign */
        void *p = alloc_aligned(how, a, n);
        CHECKF(p != NULL, "%s(align %zu, size %zu) returned NULL", how_name[how], a, n);
        CHECKF(fwt_aligned(p, a), "%s(align %zu, size %zu) = %p is misaligned", how_name[how], a,
               n, p);
        size_t u = A.usable_size(p);
        CHECKF(u >= n, "%s(align %zu, size %zu): usable size %zu", how_name[how], a, n, u);
        CHECK(X.usable_size(p) == u);
        fill_block(p, u, fwt_seed(p, u, a));
        b[nb++] = (ablock){p, a, n, u, how};
      }
    }
    for (size_t i = 0; i < nb; i++) {
      CHECK(A.usable_size(b[i].p) == b[i].usable);
      check_block(b[i].p, b[i].usable, fwt_seed(b[i].p, b[i].usable, a));
    }
    /* Free with each of the ways that accept an aligned block. */
    for (size_t i = 0; i < nb; i++, turn++) {
      switch (turn % 5) {
      case 0: A.free(b[i].p); break;
      case 1: X.free_aligned(b[i].p, b[i].align); break;
      case 2: X.free_aligned_sized(b[i].p, b[i].align, b[i].size); break;
      case 3: X.free_aligned_sized(b[i].p, b[i].align, b[i].usable); break;
      default: X.free(b[i].p); break;
      }
    }
  }
  fwt_scratch_free(b, MAXB * sizeof *b);
}

/* ---- bad alignments -------------------------------------------------------------- */
static void t_bad_alignment(void) {
  size_t M = size_max();
  size_t bad[] = {0, 3, 5, 6, 7, 12, 24, 48, 96, 100, 1000, 4097, 3 << 20, (1 << 20) + 8,
                  M, M - 7, FWT_HIGH(1) + 8};
  for (size_t i = 0; i < FWT_COUNT(bad); i++) {
    size_t a = bad[i];
    void *out = (void *)&out;
    int rc = A.posix_memalign(&out, a, 64);
    CHECKF(rc == EINVAL, "posix_memalign(align %zu) returned %d, want EINVAL", a, rc);
    CHECKF(out == (void *)&out, "posix_memalign(align %zu) failed but changed *out to %p", a, out);
    errno = 0;
    void *p = A.aligned_alloc(a, 64);
    int e = errno;
    CHECKF(p == NULL, "aligned_alloc(align %zu) = %p, want NULL", a, p);
    CHECKF(e == EINVAL, "aligned_alloc(align %zu): errno %d, want EINVAL", a, e);
    errno = 0;
    p = X.malloc_aligned(64, a);
    e = errno;
    CHECKF(p == NULL, "fw_malloc_aligned(64, align %zu) = %p, want NULL", a, p);
    CHECKF(e == EINVAL, "fw_malloc_aligned(64, align %zu): errno %d, want EINVAL", a, e);
  }
  /* Powers of two below sizeof(void *) are not valid for posix_memalign. */
  for (size_t a = 1; a < sizeof(void *); a *= 2) {
    void *out = (void *)&out;
    int rc = A.posix_memalign(&out, a, 64);
    CHECKF(rc == EINVAL, "posix_memalign(align %zu) returned %d, want EINVAL", a, rc);
    CHECK(out == (void *)&out);
  }
  /* Powers of two above the supported maximum fail cleanly. */
  size_t maxa = X.max_alignment();
  size_t too_big[] = {maxa * 2, FWT_HIGH(2), FWT_HIGH(1)};
  for (size_t i = 0; i < FWT_COUNT(too_big); i++) {
    size_t a = too_big[i];
    if (a <= maxa) continue;
    void *out = (void *)&out;
    int rc = A.posix_memalign(&out, a, 64);
    if (rc == 0) {
      CHECKF(fwt_aligned(out, a), "posix_memalign(align %zu) = %p", a, out);
      A.free(out);
    } else {
      CHECKF(rc == EINVAL || rc == ENOMEM, "posix_memalign(align %zu) returned %d", a, rc);
      CHECK(out == (void *)&out || out == NULL);
    }
    errno = 0;
    void *p = X.malloc_aligned(64, a);
    int e = errno;
    if (p) {
      CHECKF(fwt_aligned(p, a), "fw_malloc_aligned(64, %zu) = %p", a, p);
      X.free_aligned(p, a);
    } else {
      CHECKF(e == EINVAL || e == ENOMEM, "fw_malloc_aligned(64, %zu): errno %d", a, e);
    }
  }
  /* memalign is lenient in glibc (rounds the alignment up); whatever it
   * does, a block it returns must honour the rounded alignment. */
  size_t odd[] = {3, 24, 100, 1000};
  for (size_t i = 0; i < FWT_COUNT(odd); i++) {
    size_t a = odd[i], r = 1;
    while (r < a) r *= 2;
    errno = 0;
    void *p = A.memalign(a, 200);
    if (p) {
      CHECKF(fwt_aligned(p, r), "memalign(%zu, 200) = %p, not aligned to %zu", a, p, r);
      fwt_fill(p, 200, 9);
      CHECK_PATTERN(p, 200, 9);
      A.free(p);
    } else {
      CHECKF(errno == EINVAL, "memalign(%zu) failed with errno %d", a, errno);
    }
  }
}

/* ---- realloc across size classes ----------------------------------------------- */
static const size_t rsizes[] = {
  1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 200,
  255, 256, 257, 384, 511, 512, 513, 768, 1000, 1024, 1025, 2047, 2048, 2049, 3000, 4095,
  4096, 4097, 6000, 8191, 8192, 8193, 12000, 16384, 16385, 32767, 32768, 32769, 65535,
  65536, 65537, 100000, 131071, 131072, 131073, 262144, 262145, 524288, 524289,
  1048575, 1048576, 1048577, (2 << 20) + 1, (4 << 20) - 1, (4 << 20) + 1, (8 << 20) + 3,
  (16 << 20) + 1, (32 << 20) + 7,
};

/* Writes the part of [from, to) that matters for the test: all of it for
 * moderate sizes, both ends for big ones. */
static void fill_tail(char *p, size_t from, size_t to, uint64_t seed) {
  if (to - from <= ((size_t)1 << 20)) {
    fwt_fill(p + from, to - from, seed);
  } else {
    fwt_fill(p + from, 65536, seed);
    fwt_fill(p + to - 65536, 65536, seed + 1);
  }
}
static void check_tail(const char *p, size_t from, size_t to, uint64_t seed) {
  if (to - from <= ((size_t)1 << 20)) {
    CHECK_PATTERN(p + from, to - from, seed);
  } else {
    CHECK_PATTERN(p + from, 65536, seed);
    CHECK_PATTERN(p + to - 65536, 65536, seed + 1);
  }
}

static void t_realloc(void) {
  size_t ns = FWT_COUNT(rsizes);
  /* Every pair: grow and shrink from each class into each other one, with a
   * live neighbour on each side that must stay untouched. */
  for (size_t i = 0; i < ns; i++) {
    for (size_t j = 0; j < ns; j++) {
      size_t a = rsizes[i], b = rsizes[j], keep = a < b ? a : b;
      size_t gs = a < 4096 ? a : 64;
      char *g1 = A.malloc(gs);
      char *p = A.malloc(a);
      char *g2 = A.malloc(gs);
      CHECK(g1 && p && g2);
      fwt_fill(g1, gs, 11);
      fwt_fill(g2, gs, 12);
      fwt_fill(p, keep, fwt_seed(NULL, a, b));
      char *q = A.realloc(p, b);
      CHECKF(q != NULL, "realloc(%zu -> %zu) returned NULL", a, b);
      CHECKF(fwt_aligned(q, fwt_min_align(b) < 8 ? fwt_min_align(b) : 8), "realloc(%zu -> %zu) = %p",
             a, b, (void *)q);
      size_t u = A.usable_size(q);
      CHECKF(u >= b, "realloc(%zu -> %zu): usable size %zu", a, b, u);
      size_t off = fwt_verify(q, keep, fwt_seed(NULL, a, b));
      CHECKF(off == SIZE_MAX, "realloc(%zu -> %zu) lost the contents at offset %zu", a, b, off);
      fill_tail(q, keep, u, 13);
      CHECK_PATTERN(g1, gs, 11);
      CHECK_PATTERN(g2, gs, 12);
      check_tail(q, keep, u, 13);
      A.free(q);
      A.free(g2);
      A.free(g1);
    }
  }
  /* One block grown through every size, then shrunk back. */
  char *p = NULL;
  size_t have = 0;
  for (int dir = 0; dir < 2; dir++) {
    for (size_t k = 0; k < ns; k++) {
      size_t n = rsizes[dir ? ns - 1 - k : k];
      char *q = A.realloc(p, n);
      CHECKF(q != NULL, "realloc(%zu -> %zu)", have, n);
      size_t keep = have < n ? have : n;
      if (keep) CHECK_PATTERN(q, keep > 4096 ? 4096 : keep, 21);
      fwt_fill(q, n > 4096 ? 4096 : n, 21);
      p = q;
      have = n;
    }
  }
  A.free(p);

  /* realloc(NULL, n) is malloc(n). */
  for (size_t k = 0; k < ns; k++) {
    char *q = A.realloc(NULL, rsizes[k]);
    CHECK(q != NULL);
    CHECK(A.usable_size(q) >= rsizes[k]);
    fill_tail(q, 0, rsizes[k], 5);
    check_tail(q, 0, rsizes[k], 5);
    A.free(q);
  }

  /* realloc(p, 0): glibc frees p and returns NULL; other allocators return a
   * unique minimal block. Either way the result must be freeable and must
   * not alias a live block. */
  for (size_t k = 0; k < ns; k++) {
    char *live = A.malloc(16);
    char *q = A.malloc(rsizes[k]);
    CHECK(live && q);
    fwt_fill(live, 16, 77);
    char *z = A.realloc(q, v_zero);
    CHECK(z != live);
    if (z) {
      fwt_fill(z, A.usable_size(z), 78);
      A.free(z);
    }
    CHECK_PATTERN(live, 16, 77);
    A.free(live);
  }

  /* Blocks from the aligned family may be reallocated (the result keeps the
   * default alignment only). */
  for (size_t a = 16; a <= ((size_t)1 << 20); a *= 4) {
    char *q = A.aligned_alloc(a, a);
    CHECK(q != NULL);
    fwt_fill(q, a, 31);
    char *r = A.realloc(q, 3 * a + 1);
    CHECK(r != NULL);
    CHECK_PATTERN(r, a, 31);
    r = A.realloc(r, a / 2);
    CHECK(r != NULL);
    CHECK_PATTERN(r, a / 2, 31);
    A.free(r);
  }
}

/* ---- realloc in place ------------------------------------------------------------ */
/* A block that holds the new size and would not be more than half empty
 * stays where it is, contents and all: blocks of every kind (several of
 * each size, so that medium blocks lie in every slice of their page, and
 * pages fill up), aligned blocks (which keep their alignment), and blocks
 * of another thread. Pointers that are no block's start: the bad-input
 * suite. */
enum { INPLACE_N = 24 };
typedef struct {
  char *v[INPLACE_N];
  size_t n[INPLACE_N];
} inplace_set;

static void inplace_check(inplace_set *s, uint64_t seed) {
  for (size_t i = 0; i < INPLACE_N; i++) {
    char *p = s->v[i];
    size_t u = A.usable_size(p);
    CHECKF(u >= s->n[i], "usable size %zu of a %zu-byte block", u, s->n[i]);
    char *q = A.realloc(p, u);
    CHECKF(q == p, "realloc(%p, %zu), its usable size, moved it to %p", (void *)p, u, (void *)q);
    CHECK_PATTERN(q, s->n[i], seed + i);
    fwt_fill(q, u, seed + 100 + i);
    q = A.realloc(p, u / 2 + 1);
    CHECKF(q == p, "realloc(%p, %zu) of a block of %zu usable bytes moved it to %p", (void *)p, u / 2 + 1, u,
           (void *)q);
    CHECK_PATTERN(q, u / 2 + 1, seed + 100 + i);
    CHECK(A.usable_size(q) >= u / 2 + 1);
    fwt_fill(q, u / 2 + 1, seed + i);
    s->n[i] = u / 2 + 1;
  }
}

static void *inplace_remote(void *arg) {
  inplace_set *s = arg;
  inplace_check(s, 500);
  for (size_t i = 0; i < INPLACE_N; i++) A.free(s->v[i]);
  return NULL;
}

static void t_realloc_inplace(void) {
  static const size_t sizes[] = {1, 8, 16, 24, 100, 1000, 1024, 1025, 5000, 8192, 8193, 20000,
                                 65536, 100000, 131072, 131073, 200000, (size_t)1 << 20, (3u << 20) + 5};
  static const size_t aligns[] = {0, 32, 64, 4096, 65536};
  for (size_t k = 0; k < FWT_COUNT(sizes); k++) {
    for (size_t a = 0; a < FWT_COUNT(aligns); a++) {
      size_t n = fwt_scaled(sizes[k]);
      if (n == 0) n = 1;
      size_t al = aligns[a];
      inplace_set *s = fwt_scratch(sizeof *s);
      for (size_t i = 0; i < INPLACE_N; i++) {
        s->v[i] = al ? A.aligned_alloc(al, n) : A.malloc(n);
        CHECK(s->v[i] != NULL);
        s->n[i] = n;
        fwt_fill(s->v[i], n, i);
      }
      inplace_check(s, 0);
      for (size_t i = 0; i < INPLACE_N; i++)
        if (al) CHECKF(((uintptr_t)s->v[i] & (al - 1)) == 0, "%p lost its alignment %zu", (void *)s->v[i], al);
      /* again with the contents written by the first pass */
      for (size_t i = 0; i < INPLACE_N; i++) fwt_fill(s->v[i], s->n[i], 500 + i);
      pthread_t t;
      CHECK(pthread_create(&t, NULL, inplace_remote, s) == 0);
      CHECK(pthread_join(t, NULL) == 0);
      fwt_scratch_free(s, sizeof *s);
    }
  }
}

/* ---- failed reallocations leave the block intact --------------------------------- */
static void t_realloc_fail(void) {
  size_t M = size_max();
  size_t sizes[] = {16, 4000, 100000, (size_t)4 << 20};
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    size_t n = sizes[i];
    char *p = A.malloc(n);
    CHECK(p != NULL);
    fwt_fill(p, n, 41);
    size_t huge[] = {M, M - 4095, FWT_HALF_MAX, FWT_IMPOSSIBLE(2)};
    for (size_t k = 0; k < FWT_COUNT(huge); k++) {
      errno = 0;
      expect_enomem(A.realloc(p, huge[k]), "realloc(p, n)", huge[k]);
      CHECK_PATTERN(p, n, 41);
    }
    errno = 0;
    expect_enomem(A.reallocarray(p, M / 2, 3), "reallocarray(p, SIZE_MAX / 2, 3): n", M / 2);
    errno = 0;
    expect_enomem(A.reallocarray(p, 3, FWT_THIRD), "reallocarray(p, 3, SIZE_MAX / 3 + 1): n", 3);
    errno = 0;
    expect_enomem(A.reallocarray(p, 65537, FWT_WRAP65537), "reallocarray(p, 65537, a multiple wrapping to 65536): n", 65537);
    CHECK_PATTERN(p, n, 41);
    /* A good reallocarray keeps the contents. */
    char *q = A.reallocarray(p, 2, n);
    CHECK(q != NULL);
    CHECK(A.usable_size(q) >= 2 * n);
    CHECK_PATTERN(q, n, 41);
    q = A.reallocarray(q, n / 2 ? n / 2 : 1, 1);
    CHECK(q != NULL);
    CHECK_PATTERN(q, n / 2, 41);
    A.free(q);
  }
  errno = 0;
  expect_enomem(A.reallocarray(NULL, FWT_HIGH(FWT_BITS / 2 - 1), FWT_HIGH(FWT_BITS / 2 - 1)), "reallocarray(NULL, 2^(bits/2+1) twice): n", 0);
  char *q = A.reallocarray(NULL, 10, 20);
  CHECK(q != NULL && A.usable_size(q) >= 200);
  fwt_fill(q, 200, 1);
  CHECK_PATTERN(q, 200, 1);
  A.free(q);
}

/* ---- usable size: every usable byte belongs to the block ----------------------- */
static void t_usable(void) {
  size_t sizes[600], n = 0;
  for (size_t s = 1; s <= 1024; s += 3) sizes[n++] = s;
  for (size_t s = 1025; s <= 140000; s = s * 9 / 8 + 1) sizes[n++] = s;
  for (size_t s = 140000; s <= ((size_t)8 << 20); s = s * 3 / 2 + 7) sizes[n++] = s;
  for (size_t i = 0; i < n; i++) {
    size_t s = sizes[i];
    enum { K = 5 };
    char *p[K];
    size_t u[K];
    for (int k = 0; k < K; k++) {
      p[k] = A.malloc(s);
      CHECKF(p[k] != NULL, "malloc(%zu)", s);
      u[k] = A.usable_size(p[k]);
      CHECKF(u[k] >= s, "malloc(%zu): usable size %zu", s, u[k]);
      CHECK(X.usable_size(p[k]) == u[k]);
      fwt_fill(p[k], u[k], fwt_seed(p[k], u[k], 17));
    }
    for (int k = 0; k < K; k++) CHECK_PATTERN(p[k], u[k], fwt_seed(p[k], u[k], 17));
    for (int k = 0; k < K; k++) A.free(p[k]);
  }
  /* Aligned blocks, and calloc. */
  for (size_t a = 32; a <= 65536; a *= 2) {
    for (size_t s = a / 2; s <= 4 * a; s += a / 2 + 1) {
      char *p = A.aligned_alloc(a, s), *q = A.aligned_alloc(a, s);
      CHECK(p && q);
      size_t up = A.usable_size(p), uq = A.usable_size(q);
      CHECK(up >= s && uq >= s);
      fwt_fill(p, up, 1);
      fwt_fill(q, uq, 2);
      CHECK_PATTERN(p, up, 1);
      CHECK_PATTERN(q, uq, 2);
      A.free(p);
      A.free(q);
    }
  }
  for (size_t s = 1; s < 70000; s = s * 2 + 1) {
    char *p = A.calloc(s, 1);
    CHECK(p != NULL);
    size_t u = A.usable_size(p);
    CHECK(u >= s);
    CHECK_ZERO(p, s);
    fwt_fill(p, u, 3);
    CHECK_PATTERN(p, u, 3);
    A.free(p);
  }
}

/* ---- calloc zeroes, also memory that was dirty before --------------------------- */
static void t_calloc(void) {
  size_t sizes[1200], n = 0;
  for (size_t s = 1; s <= 512; s++) sizes[n++] = s;
  for (size_t s = 513; s <= 4096; s += 7) sizes[n++] = s;
  size_t big[] = {8192, 8193, 65536, 100000, 131073, 1 << 20, (4 << 20) + 1, 8 << 20, 32 << 20};
  for (size_t i = 0; i < FWT_COUNT(big); i++) sizes[n++] = big[i];
  enum { B = 16 };
  for (size_t i = 0; i < n; i++) {
    size_t s = sizes[i], cnt = s >= (1 << 20) ? 3 : B;
    void *v[B];
    /* Dirty memory of this size class, free it, then calloc it back. */
    for (size_t k = 0; k < cnt; k++) {
      v[k] = A.malloc(s);
      CHECK(v[k] != NULL);
      memset(v[k], 0xa5, A.usable_size(v[k]));
    }
    for (size_t k = cnt; k-- > 0;) A.free(v[k]);
    for (int round = 0; round < 2; round++) {
      for (size_t k = 0; k < cnt; k++) {
        switch ((k + (size_t)round) % 3) {
        case 0: v[k] = A.calloc(1, s); break;
        case 1: v[k] = A.calloc(s, 1); break;
        default: v[k] = (s % 4 == 0) ? A.calloc(s / 4, 4) : A.calloc(1, s); break;
        }
        CHECKF(v[k] != NULL, "calloc of %zu bytes", s);
        CHECK_ZERO(v[k], s);
        memset(v[k], 0x5a, A.usable_size(v[k])); /* dirty again for the next round */
      }
      for (size_t k = 0; k < cnt; k++) A.free(v[k]);
    }
  }
  /* A block shrunk in place and freed must still come back zeroed. */
  for (size_t s = 64; s <= 65536; s *= 4) {
    char *p = A.malloc(s);
    CHECK(p);
    memset(p, 0xff, s);
    p = A.realloc(p, s / 2);
    CHECK(p);
    A.free(p);
    char *z = A.calloc(1, s / 2);
    CHECK(z);
    CHECK_ZERO(z, s / 2);
    A.free(z);
  }
}

/* calloc does not clear a block of 1 to 128 KiB above its page's mark of
 * blocks handed out before (page->fresh) when the page is fresh from the
 * OS: every way malloc hands such a block out must move the mark. A page
 * of 1152-byte blocks is carved three at a time (a 4 KiB page's worth):
 * the first block of a size no call before has used comes from the page's
 * set-up, the second from the fast way (heap->cdirect) before the carve's
 * end; written, freed and calloc'd back, it must read as zero. Apart from
 * t_calloc, whose blocks come mostly from recycled slots, where calloc
 * clears every block anyway. */
static void t_calloc_fresh(void) {
  static const size_t sizes[] = {1100, 1200};
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    size_t s = sizes[i];
    char *first = A.malloc(s), *second = A.malloc(s);
    CHECK(first != NULL && second != NULL);
    memset(first, 0xa5, s);
    memset(second, 0xa5, s);
    A.free(second);
    char *z = A.calloc(1, s);
    CHECKF(z != NULL, "calloc of %zu bytes", s);
    CHECK_ZERO(z, s);
    A.free(z);
    A.free(first);
  }
}

static void t_calloc_overflow(void) {
  size_t M = size_max();
  struct { size_t n, s; } bad[] = {
    {M / 2 + 1, 2}, {2, M / 2 + 1}, {M, M}, {M / 16 + 1, 16},
    {65537, FWT_WRAP65537},        /* product wraps to 65536 */
    {3, FWT_THIRD},         /* product wraps to 2 */
    {FWT_HALF, FWT_HALF + 1}, /* wraps to HALF */
    {FWT_HIGH(24), (size_t)1 << 30},
  };
  for (size_t i = 0; i < FWT_COUNT(bad); i++) {
    errno = 0;
    void *p = A.calloc(bad[i].n, bad[i].s);
    int e = errno;
    CHECKF(p == NULL, "calloc(%zu, %zu) = %p: the overflow was not caught", bad[i].n, bad[i].s, p);
    CHECKF(e == ENOMEM, "calloc(%zu, %zu): errno %d, want ENOMEM", bad[i].n, bad[i].s, e);
    errno = 0;
    p = A.reallocarray(NULL, bad[i].n, bad[i].s);
    e = errno;
    CHECKF(p == NULL, "reallocarray(NULL, %zu, %zu) = %p", bad[i].n, bad[i].s, p);
    CHECKF(e == ENOMEM, "reallocarray(NULL, %zu, %zu): errno %d", bad[i].n, bad[i].s, e);
  }
}

/* ---- fw_free_sized with any size in [requested, usable] ------------------------ */
static void t_free_sized(void) {
  size_t sizes[400], n = 0;
  for (size_t s = 1; s <= 4096; s += (s < 256 ? 1 : 37)) sizes[n++] = s;
  for (size_t s = 4097; s <= ((size_t)4 << 20); s = s * 3 / 2 + 1) sizes[n++] = s;
  fwt_rng r;
  fwt_rng_init(&r, 99);
  enum { B = 24 };
  for (size_t i = 0; i < n; i++) {
    size_t s = sizes[i];
    size_t cnt = s > 65536 ? 4 : B;
    char *v[B];
    for (int round = 0; round < 3; round++) {
      for (size_t k = 0; k < cnt; k++) {
        v[k] = A.malloc(s);
        CHECK(v[k] != NULL);
        fwt_fill(v[k], s, fwt_seed(v[k], s, 23));
      }
      for (size_t k = 0; k < cnt; k++) CHECK_PATTERN(v[k], s, fwt_seed(v[k], s, 23));
      for (size_t k = 0; k < cnt; k++) {
        size_t u = A.usable_size(v[k]);
        CHECK(u >= s);
        size_t give;
        switch (k % 4) {
        case 0: give = s; break;
        case 1: give = u; break;
        case 2: give = s + (u - s) / 2; break;
        default: give = fwt_range(&r, s, u); break;
        }
        X.free_sized(v[k], give);
      }
    }
  }
  /* After all the sized frees the heap must hand out disjoint blocks. */
  enum { N = 20000 };
  char **w = fwt_scratch(N * sizeof *w);
  size_t *ws = fwt_scratch(N * sizeof *ws);
  for (size_t k = 0; k < N; k++) {
    ws[k] = fwt_range(&r, 1, 3000);
    w[k] = A.malloc(ws[k]);
    CHECK(w[k] != NULL);
    fwt_fill(w[k], ws[k], fwt_seed(w[k], ws[k], 0));
  }
  for (size_t k = 0; k < N; k++) {
    CHECK_PATTERN(w[k], ws[k], fwt_seed(w[k], ws[k], 0));
    X.free_sized(w[k], ws[k]);
  }
  fwt_scratch_free(w, N * sizeof *w);
  fwt_scratch_free(ws, N * sizeof *ws);
}

/* ---- valloc, pvalloc, memalign ---------------------------------------------------- */
static void t_valloc(void) {
  size_t pg = fwt_page_size();
  size_t sizes[] = {1, 100, pg - 1, pg, pg + 1, 3 * pg, 3 * pg + 7, 1 << 20, (1 << 20) + 1,
                    (5 << 20) + 3};
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    size_t n = sizes[i], rounded = (n + pg - 1) / pg * pg;
    char *v = A.valloc(n);
    CHECKF(v != NULL, "valloc(%zu)", n);
    CHECKF(fwt_aligned(v, pg), "valloc(%zu) = %p not page aligned", n, (void *)v);
    CHECK(A.usable_size(v) >= n);
    char *pv = A.pvalloc(n);
    CHECKF(pv != NULL, "pvalloc(%zu)", n);
    CHECKF(fwt_aligned(pv, pg), "pvalloc(%zu) = %p not page aligned", n, (void *)pv);
    size_t u = A.usable_size(pv);
    CHECKF(u >= rounded, "pvalloc(%zu): usable size %zu, below the page-rounded %zu", n, u,
           rounded);
    fwt_fill(v, A.usable_size(v), 51);
    fwt_fill(pv, u, 52);
    CHECK_PATTERN(v, A.usable_size(v), 51);
    CHECK_PATTERN(pv, u, 52);
    A.free(v);
    A.free(pv);
  }
  /* pvalloc(0) is one page in glibc; it must at least be a page-aligned block. */
  char *z = A.pvalloc(v_zero);
  CHECK(z != NULL);
  CHECK(fwt_aligned(z, pg));
  A.free(z);
  for (size_t a = 8; a <= ((size_t)1 << 20); a *= 2) {
    size_t n = a + a / 2;
    char *p = A.memalign(a, n);
    CHECKF(p != NULL && fwt_aligned(p, a), "memalign(%zu, %zu) = %p", a, n, (void *)p);
    CHECK(A.usable_size(p) >= n);
    fwt_fill(p, n, 53);
    CHECK_PATTERN(p, n, 53);
    A.free(p);
  }
}

/* ---- everything still consistent after the above ------------------------------- */
static void t_mixed(void) {
  enum { N = 4096, OPS = 200000 };
  char **v = fwt_scratch(N * sizeof *v);
  size_t *sz = fwt_scratch(N * sizeof *sz);
  fwt_rng r;
  fwt_rng_init(&r, 5);
  for (size_t op = 0; op < fwt_scaled(OPS); op++) {
    size_t i = (size_t)(fwt_next(&r) % N);
    if (v[i]) {
      CHECK_PATTERN(v[i], sz[i], fwt_seed(v[i], sz[i], 1));
      if (fwt_next(&r) % 4 == 0) {
        size_t n = fwt_random_size(&r, 1 << 20);
        char *q = A.realloc(v[i], n);
        CHECK(q != NULL);
        size_t keep = n < sz[i] ? n : sz[i];
        CHECK_PATTERN(q, keep, fwt_seed(v[i], sz[i], 1));
        v[i] = q;
        sz[i] = n;
        fwt_fill(q, n, fwt_seed(q, n, 1));
      } else {
        A.free(v[i]);
        v[i] = NULL;
      }
    } else {
      size_t n = fwt_random_size(&r, 1 << 20);
      v[i] = (fwt_next(&r) % 8 == 0) ? A.calloc(1, n) : A.malloc(n);
      CHECK(v[i] != NULL);
      sz[i] = n;
      fwt_fill(v[i], n, fwt_seed(v[i], n, 1));
    }
  }
  for (size_t i = 0; i < N; i++) {
    if (!v[i]) continue;
    CHECK_PATTERN(v[i], sz[i], fwt_seed(v[i], sz[i], 1));
    A.free(v[i]);
  }
  fwt_scratch_free(v, N * sizeof *v);
  fwt_scratch_free(sz, N * sizeof *sz);
}

/* ---- large blocks (128 KiB .. 2 MiB share segments in spans of slices) ---- */
typedef struct large_set {
  char *p[64];
  size_t n[64];
} large_set;

static void *large_free_half(void *arg) {
  large_set *ls = arg;
  for (int i = 0; i < 64; i += 2) {
    CHECK_PATTERN(ls->p[i], ls->n[i], fwt_seed(ls->p[i], ls->n[i], 0x1a));
    A.free(ls->p[i]);
    ls->p[i] = NULL;
  }
  return NULL;
}

static void t_large(void) {
  fwt_rng r;
  fwt_rng_init(&r, 77);
  for (int round = 0; round < 4; round++) {
    large_set ls;
    for (int i = 0; i < 64; i++) {
      size_t n = fwt_range(&r, 128 * 1024 + 1, 2 * 1024 * 1024);
      /* every other round through calloc: reused slices must read as zero */
      char *p = round % 2 ? A.calloc(1, n) : A.malloc(n);
      CHECKF(p != NULL, "allocating %zu bytes", n);
      CHECKF(fwt_aligned(p, 16), "block %p of %zu bytes is not 16-byte aligned", (void *)p, n);
      CHECKF(A.usable_size(p) >= n, "usable size %zu of a %zu-byte block", A.usable_size(p), n);
      if (round % 2) {
        for (size_t k = 0; k < n; k += 4093)
          CHECKF(p[k] == 0, "calloc(%zu) block %p: byte %zu is %d", n, (void *)p, k, p[k]);
        CHECKF(p[n - 1] == 0, "calloc(%zu) block %p: last byte is %d", n, (void *)p, p[n - 1]);
      }
      fwt_fill(p, n, fwt_seed(p, n, 0x1a));
      ls.p[i] = p;
      ls.n[i] = n;
    }
    /* half of them freed by another thread, the rest here */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, large_free_half, &ls) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    for (int i = 1; i < 64; i += 2) {
      CHECK_PATTERN(ls.p[i], ls.n[i], fwt_seed(ls.p[i], ls.n[i], 0x1a));
      A.free(ls.p[i]);
    }
  }
  /* a large block freed and requested again in the same 64 KiB steps comes
   * back from the heap's cache: through calloc it must still read as zero */
  for (int i = 0; i < 4; i++) {
    size_t n = 1024 * 1024 - (size_t)i * 8192;
    char *a = A.malloc(n);
    CHECK(a != NULL);
    memset(a, 0xab, n);
    A.free(a);
    char *z = A.calloc(1, n - 100);
    CHECK(z != NULL);
    for (size_t k = 0; k < n - 100; k++)
      if (z[k] != 0) CHECKF(0, "calloc(%zu) after a free of %zu bytes: byte %zu is %d", n - 100, n, k, z[k]);
    A.free(z);
  }
  /* realloc growth keeps the contents, in place or not */
  char *p = A.malloc(200 * 1024);
  CHECK(p != NULL);
  fwt_fill(p, 200 * 1024, 5);
  size_t have = 200 * 1024;
  for (size_t want = 300 * 1024; want <= 6 * 1024 * 1024; want += want / 2) {
    char *q = A.realloc(p, want);
    CHECKF(q != NULL, "realloc to %zu bytes", want);
    CHECK_PATTERN(q, 200 * 1024, 5);
    CHECKF(A.usable_size(q) >= want, "usable size %zu after realloc to %zu", A.usable_size(q), want);
    memset(q + have, 0x5c, want - have);
    p = q;
    have = want;
  }
  A.free(p);
  {
    /* a lone large block with free slices behind it grows in place (after
     * a full collect no span segment is left, so it starts a fresh one) */
    X.collect(true);
    fw_heap_t *h = X.heap_new();
    char *a = X.heap_malloc(h, 256 * 1024);
    CHECK(a != NULL);
    memset(a, 7, 256 * 1024);
    char *b = X.heap_realloc(h, a, 1024 * 1024);
    CHECKF(b == a, "realloc of a 256 KiB block to 1 MiB moved it (%p -> %p) although the slices after it are free",
           (void *)a, (void *)b);
    for (size_t k = 0; k < 256 * 1024; k += 4096) CHECK(b[k] == 7);
    memset(b, 8, 1024 * 1024);
    X.heap_destroy(h);
  }
}

/* ---- what a live block's first word may hold ------------------------------------
 * freeway leaves a mark in the first word of every block it hands out and
 * reads that word on slow frees, in-place reallocs and when a page empties
 * (docs/hardening.md). Whatever a correct program writes there (zero, one,
 * pointers, all ones) must never be taken for a freed block. */
static void *first_word_remote(void *arg) {
  void **v = arg;
  for (size_t i = 0; v[i]; i++) A.free(v[i]);
  return NULL;
}

static void t_first_word(void) {
  static const size_t sizes[] = {16, 24, 64, 100, 1000, 1024, 4096, 20000, 65536, 131072};
  enum { N = 600 };
  void **v = fwt_scratch((N + 1) * sizeof *v);
  for (size_t k = 0; k < FWT_COUNT(sizes); k++) {
    size_t n = sizes[k];
    for (int how = 0; how < 2; how++) {
      for (size_t i = 0; i < N; i++) {
        v[i] = A.malloc(n);
        CHECK(v[i] != NULL);
      }
      v[N] = NULL;
      for (size_t i = 0; i < N; i++) {
        uintptr_t w[] = {0, 1, (uintptr_t)v[i], (uintptr_t)v[(i + 1) % N], ~(uintptr_t)0, 8, (uintptr_t)v[i] ^ 8};
        memcpy(v[i], &w[i % FWT_COUNT(w)], sizeof(uintptr_t));
      }
      /* in place: the same size and a little less */
      for (size_t i = 0; i < N; i += 3) {
        void *q = A.realloc(v[i], n - (n >= 32 ? 8 : 0));
        CHECKF(q != NULL, "realloc of a live %zu-byte block returned NULL", n);
        v[i] = q;
      }
      if (how == 0) {
        for (size_t i = 0; i < N; i++) A.free(v[i]); /* pages empty: their blocks are scanned */
      } else {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, first_word_remote, v) == 0);
        CHECK(pthread_join(t, NULL) == 0);
      }
    }
  }
  fwt_scratch_free(v, (N + 1) * sizeof *v);
}

static const fwt_section sections[] = {
  {"zero", t_zero},
  {"small_sizes", t_small_sizes},
  {"small_align", t_small_align},
  {"pow2_sizes", t_pow2_sizes},
  {"huge_fail", t_huge_fail},
  {"alignment", t_alignment},
  {"bad_alignment", t_bad_alignment},
  {"realloc", t_realloc},
  {"realloc_fail", t_realloc_fail},
  {"realloc_inplace", t_realloc_inplace},
  {"usable", t_usable},
  {"calloc", t_calloc},
  {"calloc_fresh", t_calloc_fresh},
  {"calloc_overflow", t_calloc_overflow},
  {"free_sized", t_free_sized},
  {"valloc", t_valloc},
  {"mixed", t_mixed},
  {"large", t_large},
  {"first_word", t_first_word},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
