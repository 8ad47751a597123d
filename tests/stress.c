/* stress.c — many threads allocating, reallocating and freeing random sizes
 * (small to several MiB), every block stamped with a pattern derived from
 * its address and size and checked before it is freed. Some blocks are
 * handed to other threads through a shared exchange and freed there. */
#include "fwtest.h"

#include <pthread.h>
#include <unistd.h>

enum { SLOTS = 2048, XCHG = 2 * SLOTS };

typedef struct slot {
  char *p;
  size_t n;
  size_t align; /* 0: from malloc/calloc/realloc */
} slot;

typedef struct config {
  const char *name;
  int threads;
  size_t iterations; /* per thread */
  size_t min_size, max_size;
  size_t slots; /* live blocks per thread, at most SLOTS */
  unsigned pct_exchange, pct_aligned, pct_realloc, pct_calloc;
} config;

static _Atomic(uintptr_t) xchg[XCHG];
static const config *cfg;

static size_t pick_size(fwt_rng *r) {
  if (cfg->max_size <= 4096) return fwt_range(r, cfg->min_size, cfg->max_size);
  if (cfg->min_size > 4096) {
    /* Log-uniform between the bounds. */
    size_t lo = cfg->min_size, hi = cfg->max_size;
    while (lo * 2 <= hi && fwt_next(r) % 2) lo *= 2;
    return fwt_range(r, lo, lo * 2 <= hi ? lo * 2 : hi);
  }
  size_t n = fwt_random_size(r, cfg->max_size);
  return n < cfg->min_size ? cfg->min_size : n;
}

static uint64_t sseed(const slot *s) { return fwt_seed(s->p, s->n, s->align + 1); }

/* Exchanged blocks carry their size in the first word. */
static void stamp_x(char *p, size_t n) {
  memcpy(p, &n, sizeof n);
  fwt_fill(p + 8, n - 8, fwt_seed(p, n, 0x77));
}
static size_t check_x(const char *p) {
  size_t n;
  memcpy(&n, p, sizeof n);
  CHECKF(n >= 16 && n <= cfg->max_size + 16, "exchanged block %p has a corrupt size word %zu",
         (const void *)p, n);
  CHECK_PATTERN(p + 8, n - 8, fwt_seed(p, n, 0x77));
  return n;
}

static void slot_alloc(slot *s, fwt_rng *r) {
  size_t n = pick_size(r);
  unsigned k = (unsigned)(fwt_next(r) % 100);
  s->align = 0;
  if (k < cfg->pct_aligned) {
    size_t a = (size_t)1 << fwt_range(r, 4, 16);
    s->align = a;
    s->p = (k % 2) ? X.malloc_aligned(n, a) : A.aligned_alloc(a, n);
    CHECKF(s->p != NULL && fwt_aligned(s->p, a), "aligned allocation (%zu, %zu) = %p", n, a,
           (void *)s->p);
  } else if (k < cfg->pct_aligned + cfg->pct_calloc) {
    s->p = A.calloc(1, n);
    CHECKF(s->p != NULL, "calloc(1, %zu)", n);
    CHECK_ZERO(s->p, n);
  } else {
    s->p = A.malloc(n);
    CHECKF(s->p != NULL, "malloc(%zu)", n);
  }
  s->n = n;
  CHECK(A.usable_size(s->p) >= n);
  fwt_fill(s->p, n, sseed(s));
}

static void slot_release(slot *s, fwt_rng *r) {
  CHECK_PATTERN(s->p, s->n, sseed(s));
  unsigned k = (unsigned)(fwt_next(r) % 100);
  if (s->align) {
    if (k % 2) X.free_aligned(s->p, s->align);
    else A.free(s->p);
  } else if (k < cfg->pct_realloc) {
    size_t n = pick_size(r), keep = n < s->n ? n : s->n;
    uint64_t old = sseed(s);
    char *q = A.realloc(s->p, n);
    CHECKF(q != NULL, "realloc(%zu -> %zu)", s->n, n);
    CHECK_PATTERN(q, keep, old);
    s->p = q;
    s->n = n;
    fwt_fill(q, n, sseed(s));
    return;
  } else if (k < cfg->pct_realloc + 15) {
    X.free_sized(s->p, s->n);
  } else {
    A.free(s->p);
  }
  s->p = NULL;
}

typedef struct worker {
  pthread_t tid;
  int id;
  unsigned long ops, exchanged;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  slot *slots = fwt_scratch(SLOTS * sizeof *slots);
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)w->id * 7777 + 1);
  for (size_t it = 0; it < cfg->iterations; it++) {
    unsigned k = (unsigned)(fwt_next(&r) % 100);
    if (k < cfg->pct_exchange) {
      size_t n = pick_size(&r);
      if (n < 16) n = 16;
      char *p = A.malloc(n);
      CHECKF(p != NULL, "malloc(%zu)", n);
      stamp_x(p, n);
      uintptr_t old = atomic_exchange(&xchg[fwt_next(&r) % (2 * cfg->slots)], (uintptr_t)p);
      if (old) {
        size_t on = check_x((char *)old);
        if (fwt_next(&r) % 2) X.free_sized((void *)old, on);
        else A.free((void *)old);
        w->exchanged++;
      }
    } else if (k < cfg->pct_exchange + 3) {
      /* A burst of one size: fills and empties whole pages. */
      enum { BURST = 64 };
      char *b[BURST];
      size_t n = pick_size(&r);
      if (n > 65536) n = 65536;
      for (int i = 0; i < BURST; i++) {
        b[i] = A.malloc(n);
        CHECK(b[i] != NULL);
        fwt_fill(b[i], n, fwt_seed(b[i], n, 9));
      }
      for (int i = BURST; i-- > 0;) {
        CHECK_PATTERN(b[i], n, fwt_seed(b[i], n, 9));
        A.free(b[i]);
      }
    } else {
      slot *s = &slots[fwt_next(&r) % cfg->slots];
      if (s->p) slot_release(s, &r);
      else slot_alloc(s, &r);
    }
    w->ops++;
  }
  for (size_t i = 0; i < SLOTS; i++) {
    if (!slots[i].p) continue;
    CHECK_PATTERN(slots[i].p, slots[i].n, sseed(&slots[i]));
    A.free(slots[i].p);
  }
  fwt_scratch_free(slots, SLOTS * sizeof *slots);
  return NULL;
}

static void run(const config *c) {
  cfg = c;
  int nt = c->threads;
  worker *w = fwt_scratch((size_t)nt * sizeof *w);
  fw_stats_t before, after;
  X.collect(true);
  fwt_stats(&before);
  for (int i = 0; i < nt; i++) {
    w[i].id = i;
    CHECK(pthread_create(&w[i].tid, NULL, work, &w[i]) == 0);
  }
  unsigned long ops = 0, exchanged = 0;
  for (int i = 0; i < nt; i++) {
    CHECK(pthread_join(w[i].tid, NULL) == 0);
    ops += w[i].ops;
    exchanged += w[i].exchanged;
  }
  for (size_t i = 0; i < XCHG; i++) {
    uintptr_t p = atomic_exchange(&xchg[i], 0);
    if (p) {
      check_x((char *)p);
      A.free((void *)p);
    }
  }
  X.collect(true);
  fwt_stats(&after);
  fwt_log("%s: %d threads, %lu operations, %lu blocks freed by another thread; committed %zu -> %zu MiB",
          c->name, nt, ops, exchanged, before.bytes_committed >> 20, after.bytes_committed >> 20);
  CHECK(ops == (unsigned long)nt * c->iterations);
  /* Everything was freed: no huge block may still be counted live. */
  CHECKF(after.huge_allocs <= before.huge_allocs, "huge_allocs %zu -> %zu with every block freed",
         before.huge_allocs, after.huge_allocs);
  fwt_scratch_free(w, (size_t)nt * sizeof *w);
}

static void t_mixed(void) {
  static config c = {"mixed", 12, 120000, 1, 4 << 20, 2048, 15, 5, 15, 5};
  c.iterations = fwt_scaled(c.iterations);
  run(&c);
}
static void t_small(void) {
  static config c = {"small", 16, 300000, 1, 256, 2048, 20, 2, 10, 5};
  c.iterations = fwt_scaled(c.iterations);
  run(&c);
}
static void t_large(void) {
  static config c = {"large", 8, 3000, 65536, 8 << 20, 24, 20, 5, 20, 5};
  c.iterations = fwt_scaled(c.iterations);
  run(&c);
}

static const fwt_section sections[] = {
  {"mixed", t_mixed},
  {"small", t_small},
  {"large", t_large},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
