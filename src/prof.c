/* prof.c — the heap profiler: about one allocation per FREEWAY_PROFILE_RATE
 * bytes is recorded with its call stack; a profile gives, per call site,
 * the allocated and the in-use objects and bytes those samples stand for
 * (docs/observability.md).
 *
 * Choosing the samples. Each heap counts down the bytes its thread
 * allocates (heap->prof_left); the allocation that takes the count below
 * zero is sampled and a new count drawn, from an exponential distribution
 * of mean RATE. So each byte allocated has the same chance, 1/RATE, of
 * being the one that triggers a sample, whatever the sizes and their order,
 * and an allocation of s bytes is sampled with probability 1 - e^(-s/RATE).
 * A sample then stands for 1 / (1 - e^(-s/RATE)) allocations of its size:
 * the profile's counts are unbiased estimates of the true ones.
 *
 * The countdown costs libfreeway.so nothing: it is compiled only into the
 * entry points of libfreeway-prof.so (FW_PROF_ENTRIES: fast.h, api.c,
 * override.c), the same library otherwise, where it adds one subtract and
 * one branch to each allocation. (Choosing between two copies of malloc at
 * load time with an IFUNC does not work for a preloaded library: the C
 * library, relocated before it, would call the resolver of an object not
 * yet relocated, which the dynamic loader refuses.)
 *
 * What a sample costs. A program that allocates fast takes samples often
 * (every allocation of 1 MiB at the default rate), mostly from the same
 * few call sites, in several threads at once. So:
 *   - the stack comes from a cache of the thread's walks (os.h,
 *     fw_os_backtrace_cached), which knows the stack again by comparing
 *     the words that steered the walk, and keeps the number of its site;
 *   - sites are found without a lock (the table is probed lock-free and
 *     only grown and added to under the lock), and their counts are
 *     atomic adds of integers (objects in 1/65536ths, bytes rounded);
 *   - what a sampled block stands for is kept where its free finds it
 *     without a lookup: a large block's in its page descriptor, a block of
 *     a page of sampled blocks (below) in a record after the page's
 *     blocks, a medium block's in the descriptor of one of its page's
 *     later slices (which otherwise only point back to the page). Only
 *     the samples that stay in a small page (calloc, realloc, the aligned
 *     forms, user heaps) or find their medium slot taken go to a table
 *     keyed by block address, under the lock.
 * A record keeps the site's number, the size asked for and the objects the
 * sample stands for, so that its free takes away exactly what it added.
 *
 * Forgetting the samples. A page holding a sampled block carries
 * FW_PF_SAMPLED, which fails the free fast path's one compare: frees from
 * such a page take the slow path, which looks the block up here. The owner
 * clears the flag once no sampled block is left in the page. */
#include "prof.h"
#include "check.h"
#include "page.h"
#include "heap.h"
#include "pprof.h"
#include "options.h"
#include "message.h"
#include "os.h"
#include "meta.h"
#include <stddef.h>
#include <string.h>

#define FW_PROF_FRAMES FW_BT_FRAMES
/* objects are counted in 1/65536ths: a site's count overflows after 2^47
 * allocations of it */
#define FW_OBJ_SHIFT 16

typedef struct {
  uint64_t hash;
  uint32_t npcs;
  uintptr_t pcs[FW_PROF_FRAMES];
  /* samples are taken in one thread and often freed in another: the two
   * sides' counts on lines of their own (an _Alignas applies to each name
   * of its declaration: one per name put each count on a line of its own,
   * 448 bytes a site on x86-64 where 320 do) */
  _Alignas(64) _Atomic(int64_t) alloc_objects;
  _Atomic(int64_t) alloc_space;
  _Alignas(64) _Atomic(int64_t) freed_objects;
  _Atomic(int64_t) freed_space;
} fw_site_t;
_Static_assert(offsetof(fw_site_t, alloc_space) == offsetof(fw_site_t, alloc_objects) + 8 &&
                   offsetof(fw_site_t, freed_space) == offsetof(fw_site_t, freed_objects) + 8,
               "a side's two counts share a line");

/* Sites never move: a site's number (from 1) names it for good, in the
 * records and in the threads' walk caches. */
#define FW_SITE_CHUNK_SHIFT 7
#define FW_SITE_CHUNK ((uint32_t)1 << FW_SITE_CHUNK_SHIFT)
#define FW_SITE_CHUNKS 8192 /* a million sites */
static fw_site_t *_Atomic fw_site_chunks[FW_SITE_CHUNKS];
static uint32_t fw_sites_n; /* under fw_prof_lock */

/* The index of the sites by stack: open addressing, each slot the stack
 * hash's upper half and the site's number (0: empty), filled once. */
typedef struct fw_site_table_s {
  size_t cap;
  _Atomic(uint64_t) slot[];
} fw_site_table_t;
static _Atomic(fw_site_table_t *) fw_site_table;

/* A sample that stays in an ordinary page: keyed by block address. */
typedef struct {
  uintptr_t block; /* 0: empty; 1: deleted */
  uint32_t site;
  size_t size;
  int64_t objects; /* what it stands for, << FW_OBJ_SHIFT */
} fw_sample_rec_t;

/* The record of a block of a page of sampled blocks, after the blocks. */
typedef struct {
  uint32_t site; /* 0: none (not sampled, or freed) */
  uint32_t size;
  int64_t objects;
} fw_side_t;
_Static_assert(sizeof(fw_side_t) == FW_PROF_SIDE, "side record size");

/* The thread's (tld->prof_cache). What every sample reads first, on the
 * first of its pages: a thread that samples from one call site touches
 * that page and the one of its walk. */
#define FW_MEMO 32
/* A thread's counts of a site: alloc_objects, alloc_space, freed_objects,
 * freed_space (fw_site_t's). Only the thread adds to them, with a load and
 * a store rather than an atomic add (the lock's cost of four of them was
 * about half of what a sample of a 1 MiB block took, more where two threads
 * sampled the same site, whose line then went back and forth); a profile
 * adds up every thread's. The stores are releases so that a profile that
 * reads every thread's frees before any allocation sees each block's
 * allocation if it sees its free (fw_prof_totals). */
typedef struct {
  _Atomic(int64_t) v[4];
} fw_tcount_t;
#define FW_TCOUNT_SHIFT 7
#define FW_TCOUNT_CHUNK ((uint32_t)1 << FW_TCOUNT_SHIFT) /* 4 KiB of counts */
#define FW_TCOUNT_CHUNKS 64 /* the first 8,192 sites; others count in fw_site_t */
typedef struct fw_prof_cache_s {
  struct {
    size_t key; /* size + 1; 0: empty */
    int64_t objects;
  } memo[FW_MEMO];
  fw_bt_cache_t walks;
  fw_tcount_t *_Atomic counts[FW_TCOUNT_CHUNKS];
  struct fw_prof_cache_s *all_next; /* fw_prof_caches: every cache, never freed */
} fw_prof_cache_t;

bool fw_prof_on;
static double fw_prof_rate;
static fw_lock_t fw_prof_lock = FW_LOCK_INIT;
static fw_sample_rec_t *fw_samples; /* open addressing by block address */
static size_t fw_samples_cap, fw_samples_used, fw_samples_live;
/* FREEWAY_PROFILE_GROWTH: the estimate of the bytes in use, and the level
 * at which the next profile is written; kept only with a growth step, as
 * every thread's samples would meet on it */
static int64_t fw_prof_growth;
static _Atomic(int64_t) fw_prof_inuse, fw_prof_next_dump;
static _Atomic(unsigned) fw_prof_dumps;
/* Every thread's cache, for the profiles' sums: a cache stays with its
 * thread data, which outlive their threads (a new thread takes them up),
 * so the counts of exited threads stay where they were. */
static _Atomic(fw_prof_cache_t *) fw_prof_caches;

/* ---- arithmetic without libm ------------------------------------------------ */

/* e^-x for 0 <= x < ln 2, by its series (the tables' entries). */
static double fw_exp_series(double x) {
  double term = 1, sum = 1;
  for (int i = 1; i <= 20; i++) {
    term *= -x / i;
    sum += term;
  }
  return sum;
}
/* ln u for u in [1/2, 1], 2 atanh(z) with z = (u - 1) / (u + 1) (|z| <=
 * 1/3), to the term that no longer counts: the intervals' table takes the
 * logarithm of each of its 256 steps from the one before, ln(w1 / w0) with
 * z near 1/1024, three terms (twenty terms each cost 50,000 instructions at
 * start). */
static double fw_ln_series(double u) {
  double z = (u - 1) / (u + 1), z2 = z * z, term = z, sum = 0;
  for (int i = 0; i < 30; i++) {
    double t = term / (2 * i + 1);
    if (sum + t == sum) break;
    sum += t;
    term *= z2;
  }
  return 2 * sum;
}

#define FW_LN2 0.6931471805599453
/* 2^(-j/64) */
static double fw_exp2_tab[64];

/* The intervals' table (fw_exp_of), in bytes (scaled by the rate): bin i
 * of FW_EXP_N, a line from y to y + dy over the bin, dy by the step of the
 * place in the bin (2^-24) */
#define FW_EXP_BITS 8
#define FW_EXP_N (1u << FW_EXP_BITS)
#define FW_EXP_PLACE (32 - FW_EXP_BITS)
static struct {
  double y, dy;
} fw_exp_tab[FW_EXP_N];
/* k ln 2, the geometric part's share */
static double fw_exp_whole[33];
static double fw_exp_scale;

static void fw_prof_tables(double scale) {
  for (int j = 0; j < 64; j++) fw_exp2_tab[j] = fw_exp_series(j * (FW_LN2 / 64));
  for (int k = 0; k <= 32; k++) fw_exp_whole[k] = k * FW_LN2 * scale;
  /* Y = -ln(1 - v/2) over the bins of v: each bin's line has the slope of
   * the chord and the bin's exact mean, 2N (w1 ln w1 - w0 ln w0) + 1 with
   * w = 1 - v/2 at the bin's ends (the integral of -ln), so that the
   * draws' mean is exact, not the chords' (above it: -ln is convex) */
  double w0 = 1, l0 = 0;
  for (unsigned i = 0; i < FW_EXP_N; i++) {
    double w1 = 1 - (i + 1) / (2.0 * FW_EXP_N), l1 = l0 + fw_ln_series(w1 / w0);
    double mean = 2.0 * FW_EXP_N * (w1 * l1 - w0 * l0) + 1;
    fw_exp_tab[i].dy = (l0 - l1) * scale * (1.0 / (1u << FW_EXP_PLACE));
    fw_exp_tab[i].y = (mean - (l0 - l1) / 2) * scale;
    w0 = w1;
    l0 = l1;
  }
  fw_exp_scale = scale;
}

/* e^-x for x >= 0: x = (64 k + j) ln 2 / 64 + r, with r below ln 2 / 64,
 * where five terms of the series are good to 1e-15. */
static double fw_exp_neg(double x) {
  /* beyond 40, 1 - e^-x is 1 in a double anyway */
  if (x > 40) return 0;
  int i = (int)(x * (64 / FW_LN2));
  double r = x - i * (FW_LN2 / 64);
  double e = 1 - r * (1 - r * (0.5 - r * (1.0 / 6 - r * (1.0 / 24 - r * (1.0 / 120)))));
  union {
    double d;
    uint64_t b;
  } p2 = {.b = (uint64_t)(1023 - (i >> 6)) << 52};
  return p2.d * fw_exp2_tab[i & 63] * e;
}
/* A heap's first interval needs a seed of its own. A system call at each
 * thread's first allocation would cost more than its first sample: the
 * OS's randomness is drawn once (fw_prof_init), and each heap's seed is
 * the next number of a counter through a mixing function (a bijection,
 * so no two heaps of the process start alike). Not at the secure level,
 * whose carving order (page.c) goes on from the same state: there one
 * heap's order must tell nothing of another's. */
static uint64_t fw_prof_seed;
static _Atomic(uint64_t) fw_prof_seeds;

static uint64_t fw_prof_seed_next(void) {
  uint64_t z = fw_prof_seed + atomic_fetch_add_explicit(&fw_prof_seeds, 1, memory_order_relaxed) * 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* xorshift64, of a state not 0 (never 0 after) */
FW_INLINE uint64_t fw_xorshift(uint64_t x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

/* Bytes to the next sample: exponential with mean RATE, without a
 * logarithm. An exponential X of mean 1 is G ln 2 + Y, G = floor(X / ln 2)
 * and Y the rest, independent of each other: G is geometric, P(G = k) =
 * 2^-(k+1), the number of trailing zeros of random bits; Y has the density
 * 2 e^-y on [0, ln 2), so Y = -ln(1 - v/2) for v uniform in [0, 1), a
 * smooth function (its second derivative in v is at most 1) that a table
 * of 256 lines gives to within 1.3e-6 of the mean at any v, under a byte
 * at the default rate (each line has the chord's slope and its bin's exact
 * mean, fw_prof_tables, so the draws' mean is exact). tests/internal/
 * prof.c checks the lines against the logarithm, and the draws' mean,
 * variance and quantiles. G takes the low 32 bits of a random word (all 0:
 * 32 more, and the next word), the bin the top 8, the place in the bin the
 * 24 between. The logarithm it replaces cost 67 instructions per sample
 * with its call, this about 40 inline: 408 -> 381 instructions per sample
 * (callgrind, bench_objects --threads 1 --total 12000 --size 1048576 under
 * build/libfreeway-prof.so, FREEWAY_PROFILE=1 minus 0, by the samples). */
FW_INLINE double fw_exp_of(uint64_t x) {
  size_t i = (size_t)(x >> (64 - FW_EXP_BITS));
  double place = (double)(int64_t)((x >> 32) & ((1u << FW_EXP_PLACE) - 1));
  return fw_exp_whole[__builtin_ctz((uint32_t)x)] + fw_exp_tab[i].y + place * fw_exp_tab[i].dy;
}

static FW_NOINLINE double fw_exp_draw_more(uint64_t *state);

FW_INLINE double fw_exp_draw(uint64_t *state) {
  uint64_t x = *state = fw_xorshift(*state);
  if (fw_unlikely((uint32_t)x == 0)) return fw_exp_draw_more(state);
  return fw_exp_of(x);
}

/* 32 zeros: G is at least 32, and the rest as many again as a new draw
 * (P(G = 32 + k | G >= 32) = P(G = k)). Only here can a draw pass
 * 32 ln 2 times the rate (2^35 bytes at most): it stops at INTPTR_MAX / 2. */
static FW_NOINLINE double fw_exp_draw_more(uint64_t *state) {
  double n = fw_exp_whole[32] + fw_exp_draw(state);
  return n < (double)(INTPTR_MAX / 2) ? n : (double)(INTPTR_MAX / 2);
}

/* (for the tests: in means, without the rate, whatever the process's) */
double fw_prof_exp_of(uint64_t x) {
  if (!fw_exp_scale) fw_prof_tables(1);
  return fw_exp_of(x) / fw_exp_scale;
}

double fw_prof_exp_draw(uint64_t *state) {
  if (!fw_exp_scale) fw_prof_tables(1);
  return fw_exp_draw(state) / fw_exp_scale;
}

/* A heap's first random state. */
static FW_NOINLINE uint64_t fw_prof_rng_first(void) {
  uint64_t x = 0;
  if (fw_secure) fw_os_random(&x, sizeof x);
  else x = fw_prof_seed_next();
  return x ? x : 0x9e3779b97f4a7c15u;
}

FW_INLINE intptr_t fw_prof_interval(fw_heap_t *heap) {
  if (fw_unlikely(!heap->rng)) heap->rng = fw_prof_rng_first();
  /* (the first bin's line starts 1.3e-6 below 0: an interval that far
   * below 0 samples the next allocation, as one of 0 would) */
  double n = fw_exp_draw(&heap->rng);
  /* (below 32 ln 2 times the rate, 2^35 bytes, but for fw_exp_draw_more's) */
#if INTPTR_MAX < INT64_MAX
  if (n > (double)(INTPTR_MAX / 2)) n = (double)(INTPTR_MAX / 2);
#endif
  return (intptr_t)n;
}

/* What a sample of size bytes stands for: 1 / P(an allocation of this
 * size is sampled) allocations, in 1/65536ths. */
static int64_t fw_prof_weight(size_t size) {
  double x = (size ? (double)size : 1) / fw_prof_rate, objects;
  if (x < 0.5) {
    /* 1 / (1 - e^-x) = 1/x + 1/2 + x/12 - x^3/720 + x^5/30240 -
     * x^7/1209600 + x^9/47900160 - ... (the Bernoulli numbers): good to
     * 1e-13 here, without the exponential */
    double x2 = x * x;
    objects = 1 / x + 0.5 +
              x * (1.0 / 12 - x2 * (1.0 / 720 - x2 * (1.0 / 30240 - x2 * (1.0 / 1209600 - x2 * (1.0 / 47900160)))));
  } else {
    double prob = 1 - fw_exp_neg(x);
    objects = prob > 0 ? 1 / prob : 1;
  }
  return (int64_t)(objects * (1 << FW_OBJ_SHIFT) + 0.5);
}

/* The same, remembered per size: a program's samples mostly come in a
 * few sizes. */
static int64_t fw_prof_weigh(fw_prof_cache_t *c, size_t size) {
  size_t i = (size_t)(((uint64_t)size * 0x9e3779b97f4a7c15u) >> 59) & (FW_MEMO - 1);
  if (c->memo[i].key != size + 1) {
    c->memo[i].objects = fw_prof_weight(size);
    c->memo[i].key = size + 1;
  }
  return c->memo[i].objects;
}

/* The bytes a sample stands for, objects * size rounded, worked out from
 * what its record keeps so that the sample and its free, in any thread,
 * find the same and the in-use bytes come back to exactly 0. In integers,
 * so that every inlined copy rounds alike (a product of doubles may be
 * contracted differently in each): 12 instructions and a call in doubles,
 * made twice per sample, 7 inline. */
FW_INLINE int64_t fw_prof_space(int64_t objects, size_t size) {
  uint64_t s = size ? size : 1;
#ifdef __SIZEOF_INT128__
  return (int64_t)(((unsigned __int128)(uint64_t)objects * s + (1u << (FW_OBJ_SHIFT - 1))) >> FW_OBJ_SHIFT);
#elif SIZE_MAX <= UINT32_MAX
  /* size_t of 32 bits: the low part's product fits */
  uint64_t o = (uint64_t)objects;
  return (int64_t)((o >> FW_OBJ_SHIFT) * s +
                   (((o & ((1u << FW_OBJ_SHIFT) - 1)) * s + (1u << (FW_OBJ_SHIFT - 1))) >> FW_OBJ_SHIFT));
#else
#error "fw_prof_space needs a 128-bit product or a 32-bit size_t"
#endif
}

static fw_site_table_t *fw_site_table_grow(fw_site_table_t *t);
static fw_site_t *fw_site_chunk(uint32_t k);

void fw_prof_init(void) {
  fw_prof_rate = (double)fw_opt(PROFILE_RATE);
  fw_prof_growth = (int64_t)fw_opt(PROFILE_GROWTH) * 1048576;
  atomic_store_explicit(&fw_prof_next_dump, fw_prof_growth, memory_order_relaxed);
  if (fw_opt(PROFILE) && !fw_flavour_profiling)
    fw_message("warning: FREEWAY_PROFILE=1 needs libfreeway-prof.so (the library with the profiler's countdown "
               "in its entry points; `freeway run --profile` loads it): no profile is taken\n");
  fw_prof_on = fw_opt(PROFILE) && fw_flavour_profiling;
  if (!fw_prof_on) return;
  fw_prof_tables(fw_prof_rate);
  fw_os_random(&fw_prof_seed, sizeof fw_prof_seed);
  /* the index and the first sites' chunk now, not under the lock at the
   * first sample, where the threads that start at once would wait on the
   * system calls, each new stack's thread in turn */
  fw_lock_acquire(&fw_prof_lock);
  if (fw_site_table_grow(NULL)) fw_site_chunk(1);
  fw_lock_release(&fw_prof_lock);
}

/* fork() while another thread holds the lock: the child's copy would stay
 * held (thread.c's fork handlers call these, after the allocator's own
 * locks, as no path takes those while holding this one). */
void fw_prof_fork_prepare(void) { fw_lock_acquire(&fw_prof_lock); }
void fw_prof_fork_parent(void) { fw_lock_release(&fw_prof_lock); }
void fw_prof_fork_child(void) { fw_lock_reset(&fw_prof_lock); }

void fw_prof_cache_reset(void *cache) {
  fw_prof_cache_t *c = cache;
  c->walks.valid = 0;
}

/* The calling thread's cache, made at its first sample; NULL without
 * memory. */
static FW_NOINLINE fw_prof_cache_t *fw_prof_cache_new(fw_tld_t *tld) {
  /* from the allocator's metadata (zeroed, never given back, as the cache
   * stays with the thread data): threads that start at once would each
   * map one, and wait on each other in the OS */
  fw_prof_cache_t *c = fw_meta_alloc(sizeof *c);
  if (!c) return NULL;
  /* a write first: the memo's test would read the fresh page as zeros
   * (the OS's shared zero page, a fault) before writing it (another) */
  c->walks.valid = 0;
  fw_prof_cache_t *head = atomic_load_explicit(&fw_prof_caches, memory_order_relaxed);
  do c->all_next = head;
  while (!atomic_compare_exchange_weak_explicit(&fw_prof_caches, &head, c, memory_order_release,
                                                memory_order_relaxed));
  tld->prof_cache = c;
  return c;
}

FW_INLINE fw_prof_cache_t *fw_prof_cache_of(fw_heap_t *heap) {
  fw_prof_cache_t *c = heap->tld->prof_cache;
  if (fw_likely(c != NULL)) return c;
  return fw_prof_cache_new(heap->tld);
}

/* ---- the sites ------------------------------------------------------------------
 * Tables come from fw_os_map, fresh and reading as zero: they are not
 * cleared, so that only the pages used are ever touched. */

static uint64_t fw_mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdu;
  h ^= h >> 33;
  return h;
}

static fw_site_t *fw_site_at(uint32_t i) {
  fw_site_t *chunk = atomic_load_explicit(&fw_site_chunks[i >> FW_SITE_CHUNK_SHIFT], memory_order_acquire);
  return &chunk[i & (FW_SITE_CHUNK - 1)];
}

/* The site of a stack in table t, or 0. Lock-free: a slot, once filled,
 * names its site for good, and the site was written whole before. */
static uint32_t fw_site_find(const fw_site_table_t *t, const uintptr_t *pcs, uint32_t n, uint64_t h) {
  size_t mask = t->cap - 1;
  for (size_t j = h & mask;; j = (j + 1) & mask) {
    uint64_t v = atomic_load_explicit(&t->slot[j], memory_order_acquire);
    if (!v) return 0;
    if ((v >> 32) != (h >> 32)) continue;
    const fw_site_t *s = fw_site_at((uint32_t)v);
    if (s->hash == h && s->npcs == n && memcmp(s->pcs, pcs, n * sizeof *pcs) == 0) return (uint32_t)v;
  }
}

static void fw_site_place(fw_site_table_t *t, uint64_t h, uint32_t i) {
  size_t mask = t->cap - 1, j = h & mask;
  while (atomic_load_explicit(&t->slot[j], memory_order_relaxed)) j = (j + 1) & mask;
  atomic_store_explicit(&t->slot[j], (h >> 32) << 32 | i, memory_order_release);
}

/* Under the lock: the index at twice its size (or its first). The table
 * it replaces is kept, not unmapped: another thread may be probing it
 * without the lock. They add up to less than the last one. */
static fw_site_table_t *fw_site_table_grow(fw_site_table_t *t) {
  size_t cap = t ? 2 * t->cap : 1024;
  fw_site_table_t *nt = fw_os_map(sizeof *nt + cap * sizeof nt->slot[0], 0, 0);
  if (!nt) return NULL;
  nt->cap = cap;
  for (uint32_t i = 1; i <= fw_sites_n; i++) fw_site_place(nt, fw_site_at(i)->hash, i);
  atomic_store_explicit(&fw_site_table, nt, memory_order_release);
  return nt;
}

/* Under the lock: the chunk of site k, mapped if it is the first one
 * there; NULL without memory. */
static fw_site_t *fw_site_chunk(uint32_t k) {
  fw_site_t *chunk = atomic_load_explicit(&fw_site_chunks[k >> FW_SITE_CHUNK_SHIFT], memory_order_relaxed);
  if (!chunk) {
    chunk = fw_os_map(FW_SITE_CHUNK * sizeof *chunk, 0, 0);
    if (chunk) atomic_store_explicit(&fw_site_chunks[k >> FW_SITE_CHUNK_SHIFT], chunk, memory_order_release);
  }
  return chunk;
}

/* The site of a stack, made if new; 0 without memory. Any hash will do,
 * 0 included: an index slot is marked empty by its site number, 0. */
static uint32_t fw_site_of(const uintptr_t *pcs, size_t n) {
  uint64_t h = 0x84222325cbf29ce4u;
  for (size_t i = 0; i < n; i++) h = fw_mix(h ^ pcs[i]);
  fw_site_table_t *t = atomic_load_explicit(&fw_site_table, memory_order_acquire);
  uint32_t i = t ? fw_site_find(t, pcs, (uint32_t)n, h) : 0;
  if (i) return i;
  fw_lock_acquire(&fw_prof_lock);
  t = atomic_load_explicit(&fw_site_table, memory_order_relaxed);
  i = t ? fw_site_find(t, pcs, (uint32_t)n, h) : 0;
  if (!i && fw_sites_n + 1 < (uint32_t)FW_SITE_CHUNKS * FW_SITE_CHUNK) {
    if (!t || (fw_sites_n + 1) * 2 > t->cap) t = fw_site_table_grow(t);
    uint32_t k = fw_sites_n + 1;
    fw_site_t *chunk = t ? fw_site_chunk(k) : NULL;
    if (chunk) {
      fw_site_t *s = &chunk[k & (FW_SITE_CHUNK - 1)];
      s->hash = h;
      s->npcs = (uint32_t)n;
      memcpy(s->pcs, pcs, n * sizeof *pcs);
      fw_sites_n = k;
      fw_site_place(t, h, k);
      i = k;
    }
  }
  fw_lock_release(&fw_prof_lock);
  return i;
}

/* The site of the caller's stack (the one that allocated), 0 without
 * memory. */
/* The walk without the cache (none, or the quick walk cannot step), out
 * of the sample's way: its array would give every sample a stack frame. */
static FW_NOINLINE uint32_t fw_prof_site_walked(void) {
  uintptr_t pcs[FW_PROF_FRAMES];
  size_t n = fw_check_stack(pcs, FW_PROF_FRAMES);
  return fw_site_of(pcs, n);
}

FW_INLINE uint32_t fw_prof_site_here(fw_prof_cache_t *c) {
  fw_bt_walk_t *w = c ? fw_check_stack_cached(&c->walks) : NULL;
  if (fw_unlikely(!w)) return fw_prof_site_walked();
  if (fw_unlikely(!w->tag)) w->tag = fw_site_of(w->pcs, w->npcs);
  return w->tag;
}

/* ---- the table of samples in ordinary pages ---------------------------------------- */

static bool fw_prof_grow_samples(void) {
  size_t cap = fw_samples_cap ? 2 * fw_samples_cap : 4096;
  /* mostly deleted entries: the same size, cleaned */
  if (fw_samples_cap && fw_samples_live * 4 < fw_samples_cap) cap = fw_samples_cap;
  fw_sample_rec_t *t = fw_os_map(cap * sizeof *t, 0, 0);
  if (!t) return false;
  for (size_t i = 0; i < fw_samples_cap; i++) {
    if (fw_samples[i].block <= 1) continue;
    size_t j = fw_mix(fw_samples[i].block) & (cap - 1);
    while (t[j].block) j = (j + 1) & (cap - 1);
    t[j] = fw_samples[i];
  }
  if (fw_samples) fw_os_unmap(fw_samples, fw_samples_cap * sizeof *fw_samples);
  fw_samples = t;
  fw_samples_cap = cap;
  fw_samples_used = fw_samples_live;
  return true;
}

static bool fw_prof_table_put(uintptr_t block, uint32_t site, size_t size, int64_t objects) {
  bool ok = false;
  fw_lock_acquire(&fw_prof_lock);
  if ((fw_samples_used + 1) * 2 <= fw_samples_cap || fw_prof_grow_samples()) {
    size_t j = fw_mix(block) & (fw_samples_cap - 1);
    while (fw_samples[j].block > 1) j = (j + 1) & (fw_samples_cap - 1);
    if (!fw_samples[j].block) fw_samples_used++;
    fw_samples[j] = (fw_sample_rec_t){block, site, size, objects};
    fw_samples_live++;
    ok = true;
  }
  fw_lock_release(&fw_prof_lock);
  return ok;
}

/* The sample of block, taken out of the table: its site, or 0. */
static uint32_t fw_prof_table_take(uintptr_t block, size_t *size, int64_t *objects) {
  uint32_t site = 0;
  fw_lock_acquire(&fw_prof_lock);
  if (fw_samples_cap) {
    size_t j = fw_mix(block) & (fw_samples_cap - 1);
    for (; fw_samples[j].block; j = (j + 1) & (fw_samples_cap - 1)) {
      if (fw_samples[j].block != block) continue;
      site = fw_samples[j].site;
      *size = fw_samples[j].size;
      *objects = fw_samples[j].objects;
      fw_samples[j].block = 1;
      fw_samples_live--;
      break;
    }
  }
  fw_lock_release(&fw_prof_lock);
  return site;
}

/* ---- the page's count of its sampled blocks (prof.h) ---------------------------- */

/* table: the sample of a medium page went to the table */
static void fw_prof_count(fw_page_t *page, uint32_t off, bool table) {
  uint32_t old = atomic_load_explicit(&page->sampled, memory_order_relaxed), n;
  do {
    n = (old ? (old + 1) | FW_SAMPLED_MANY : 1) + (table ? FW_SAMPLED_TABLE_ONE : 0);
    if (!old) atomic_store_explicit(&page->sampled_at, off, memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(&page->sampled, &old, n, memory_order_relaxed,
                                                  memory_order_relaxed));
}

static void fw_prof_uncount(fw_page_t *page, bool table) {
  uint32_t sub = 1 + (table ? FW_SAMPLED_TABLE_ONE : 0);
  uint32_t n = atomic_fetch_sub_explicit(&page->sampled, sub, memory_order_relaxed) - sub;
  if (n && !(n & FW_SAMPLED_COUNT))
    atomic_compare_exchange_strong_explicit(&page->sampled, &n, 0, memory_order_relaxed, memory_order_relaxed);
}

/* A medium page's records of its sampled blocks, in the descriptors of its
 * later slices: redirects, whose other fields are unused (fw_page_init
 * clears sampled). Block i's record is in the slot i mod the slots there
 * are, and holds it while sampled (its site) is not 0 and sampled_at is
 * its offset; a block whose slot is taken goes to the table. Only the
 * owner fills a slot, and only an empty one; only the free of its block,
 * in any thread, empties it. (fw_prof_slot: prof.h) */

#define FW_SLOT_ANY UINT32_MAX
/* The sample slot r holds, if it is that of the block at offset off (or
 * off is FW_SLOT_ANY): taken out, its site returned (else 0). */
static uint32_t fw_prof_slot_take(fw_page_t *r, uint32_t off, size_t *size, int64_t *objects) {
  uint32_t site = atomic_load_explicit(&r->sampled, memory_order_acquire);
  if (!site || (off != FW_SLOT_ANY && atomic_load_explicit(&r->sampled_at, memory_order_relaxed) != off)) return 0;
  *size = r->prof_size;
  *objects = r->prof_objects;
  atomic_store_explicit(&r->sampled, 0, memory_order_release);
  return site;
}

static fw_side_t *fw_prof_side(const fw_page_t *page, uintptr_t block) {
  size_t i = (block - (uintptr_t)page->area) / page->block_size;
  return (fw_side_t *)(page->area + (size_t)page->reserved * page->block_size) + i;
}

/* ---- taking and forgetting samples ------------------------------------------------ */

static void fw_prof_dump_growth(unsigned n) {
  const char *dir = fw_topt(REPORT_DIR);
  if (!dir) return;
  char path[1200];
  fw_snprintf(path, sizeof path, "%s/freeway-%ld-heap-growth-%u.pb", dir, fw_os_pid(), n);
  if (fw_prof_dump(path) != 0) fw_message("warning: cannot write the heap profile %s\n", path);
}

/* The calling thread's cache if it has one yet: NULL for a thread without
 * a heap, or whose first sample this is. */
FW_INLINE fw_prof_cache_t *fw_prof_cache_here(void) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  return heap != &fw_heap_empty ? heap->tld->prof_cache : NULL;
}

#define FW_SIDE_ALLOC 0
#define FW_SIDE_FREED 2
/* The site's shared counts: for a thread without a heap, a site beyond the
 * thread's chunks, no memory, or under fw_prof_lock (no cache is made
 * there: the metadata's lock is taken before this one around fork). */
static void fw_prof_add_shared(uint32_t site, int side, int64_t objects, int64_t space) {
  fw_site_t *st = fw_site_at(site);
  _Atomic(int64_t) *g = side == FW_SIDE_ALLOC ? &st->alloc_objects : &st->freed_objects;
  atomic_fetch_add_explicit(&g[0], objects, memory_order_relaxed);
  atomic_fetch_add_explicit(&g[1], space, memory_order_relaxed); /* the _space next to it */
}

FW_INLINE void fw_tcount_add(_Atomic(int64_t) *v, int64_t x) {
  atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + x, memory_order_release);
}

/* The site's side in chunk, the thread's chunk of it. */
FW_INLINE void fw_tcount_site_add(fw_tcount_t *chunk, uint32_t site, int side, int64_t objects, int64_t space) {
  _Atomic(int64_t) *v = &chunk[site & (FW_TCOUNT_CHUNK - 1)].v[side];
  fw_tcount_add(&v[0], objects);
  fw_tcount_add(&v[1], space);
}

/* fw_prof_add without the thread's chunk of the site at hand: makes the
 * cache (a thread whose first sample-related call is a free) and the
 * chunk. */
static FW_NOINLINE void fw_prof_add_more(fw_prof_cache_t *c, uint32_t site, int side, int64_t objects,
                                         int64_t space) {
  uint32_t k = site >> FW_TCOUNT_SHIFT;
  if (!c) {
    fw_heap_t *heap = FW_TLS(fw_tls_heap);
    if (heap != &fw_heap_empty) c = fw_prof_cache_of(heap);
  }
  if (!c || k >= FW_TCOUNT_CHUNKS) {
    fw_prof_add_shared(site, side, objects, space);
    return;
  }
  fw_tcount_t *chunk = atomic_load_explicit(&c->counts[k], memory_order_relaxed);
  if (!chunk) {
    chunk = fw_meta_alloc(FW_TCOUNT_CHUNK * sizeof *chunk);
    if (!chunk) {
      fw_prof_add_shared(site, side, objects, space);
      return;
    }
    atomic_store_explicit(&c->counts[k], chunk, memory_order_release);
  }
  fw_tcount_site_add(chunk, site, side, objects, space);
}

/* Counts a sample's objects and space on side (FW_SIDE_ALLOC or
 * FW_SIDE_FREED) of its site, in c, the calling thread's cache (NULL if it
 * has none yet). The common case inline and without a call, so that a
 * free of a sampled large block needs no stack frame. */
FW_INLINE void fw_prof_add(fw_prof_cache_t *c, uint32_t site, int side, int64_t objects, int64_t space) {
  uint32_t k = site >> FW_TCOUNT_SHIFT;
  fw_tcount_t *chunk = fw_likely(c != NULL && k < FW_TCOUNT_CHUNKS)
                           ? atomic_load_explicit(&c->counts[k], memory_order_relaxed)
                           : NULL;
  if (fw_unlikely(chunk == NULL)) {
    fw_prof_add_more(c, site, side, objects, space);
    return;
  }
  fw_tcount_site_add(chunk, site, side, objects, space);
}

/* The bytes a freed sample stood for, taken off the growth profiles'
 * estimate. */
FW_INLINE int64_t fw_prof_freed_space(size_t size, int64_t objects) {
  int64_t space = fw_prof_space(objects, size);
  if (fw_prof_growth) atomic_fetch_sub_explicit(&fw_prof_inuse, space, memory_order_relaxed);
  return space;
}

/* c: as for fw_prof_add; the count last, so that its slow case is a tail
 * call */
FW_INLINE void fw_prof_forget(fw_prof_cache_t *c, uint32_t site, size_t size, int64_t objects) {
  fw_prof_add(c, site, FW_SIDE_FREED, objects, fw_prof_freed_space(size, objects));
}

/* Under fw_prof_lock. */
static void fw_prof_forget_shared(uint32_t site, size_t size, int64_t objects) {
  fw_prof_add_shared(site, FW_SIDE_FREED, objects, fw_prof_freed_space(size, objects));
}

/* A large block's sample, kept in its page descriptor: forgotten if it
 * has one. */
FW_INLINE void fw_prof_forget_large(fw_prof_cache_t *c, fw_page_t *page) {
  if (!atomic_load_explicit(&page->sampled, memory_order_relaxed)) return;
  atomic_store_explicit(&page->sampled, 0, memory_order_relaxed);
  fw_prof_forget(c, atomic_load_explicit(&page->sampled_at, memory_order_relaxed), page->prof_size, page->prof_objects);
}

/* The sample a block of a page of sampled blocks keeps in its record:
 * forgotten if it has one. */
static void fw_prof_forget_side(fw_prof_cache_t *c, fw_page_t *page, fw_side_t *r) {
  if (!r->site) return;
  uint32_t site = r->site;
  r->site = 0;
  fw_prof_forget(c, site, r->size, r->objects);
  fw_prof_uncount(page, false);
}

/* The record of a sample in a small or medium page (a large one's is its
 * page descriptor's): false if it could not be kept. */
static FW_NOINLINE bool fw_prof_record_block(fw_page_t *page, void *p, uint32_t site, size_t size,
                                             int64_t objects) {
  uintptr_t block = (uintptr_t)fw_page_block_start(page, p);
  uint32_t off = (uint32_t)(block - (uintptr_t)page->area);
  fw_page_t *r = fw_prof_slot(page, off);
  bool table = false;
  if (page->prof_side) {
    *fw_prof_side(page, block) = (fw_side_t){site, (uint32_t)size, objects};
  } else if (r && !atomic_load_explicit(&r->sampled, memory_order_relaxed)) {
    r->prof_size = size;
    r->prof_objects = objects;
    atomic_store_explicit(&r->sampled_at, off, memory_order_relaxed);
    atomic_store_explicit(&r->sampled, site, memory_order_release);
  } else if (fw_prof_table_put(block, site, size, objects)) {
    table = r != NULL;
  } else {
    return false;
  }
  fw_prof_count(page, off, table);
  return true;
}

static FW_NOINLINE void fw_prof_grown(int64_t space) {
  int64_t now = atomic_fetch_add_explicit(&fw_prof_inuse, space, memory_order_relaxed) + space;
  int64_t next = atomic_load_explicit(&fw_prof_next_dump, memory_order_relaxed);
  if (now >= next && atomic_compare_exchange_strong_explicit(&fw_prof_next_dump, &next, now + fw_prof_growth,
                                                             memory_order_relaxed, memory_order_relaxed))
    fw_prof_dump_growth(atomic_fetch_add_explicit(&fw_prof_dumps, 1, memory_order_relaxed) + 1);
}

/* What only a sample does is out of line (the cache's making, the walk
 * without it, a new site, a block's record, the growth profiles), so that
 * a sample of a large block from a stack seen before, the most frequent
 * kind, keeps few registers and no stack array. */
FW_INLINE void fw_prof_record(fw_heap_t *heap, fw_page_t *page, void *p, size_t size) {
  fw_prof_cache_t *c = fw_prof_cache_of(heap);
  uint32_t site = fw_prof_site_here(c);
  if (!site) return;
  int64_t objects = c ? fw_prof_weigh(c, size) : fw_prof_weight(size);
  /* the page is the caller's: it was just allocated from */
  if (page->kind == FW_KIND_LARGE) {
    page->prof_size = size;
    page->prof_objects = objects;
    atomic_store_explicit(&page->sampled_at, site, memory_order_relaxed);
    atomic_store_explicit(&page->sampled, 1, memory_order_relaxed);
  } else if (!fw_prof_record_block(page, p, site, size, objects)) {
    return;
  }
  /* the page's frees now come here: the flag fails the free fast path */
  if (!(fw_page_flags(page) & FW_PF_SAMPLED)) fw_page_flags_set(page, fw_page_flags(page) | FW_PF_SAMPLED);
  int64_t space = fw_prof_space(objects, size);
  fw_prof_add(c, site, FW_SIDE_ALLOC, objects, space);
  if (fw_prof_growth) fw_prof_grown(space);
}

/* A sampled small block is handed out from the heap's page of sampled
 * blocks of its class instead (heap.c, fw_heap_page_samples), and p goes
 * back to its page unseen: only frees of sampled blocks then take the slow
 * path in which the profiler forgets them, not those of every block that
 * shares a page with one. Blocks of a page with a flag already (every page
 * in cautious mode and at the secure level, whose marks a move would have
 * to keep), of another heap, medium and large ones stay where they are
 * (their page is flagged). A medium page holds 4 to 64 blocks, so few
 * frees take the slow path for its sample; moved, bench_speed 12T's
 * sampled blocks of 8 to 128 KiB went to pages of their own that held a
 * few each, each page set up in memory not touched before: 63,900 page
 * faults against 44,300 with the profiler off, 44,900 left in place
 * (medians of 9 runs). */
_Static_assert((FW_SMALL_MAX & (FW_SMALL_MAX - 1)) == 0, "a small block's power of two is a small size");
static FW_NOINLINE void *fw_prof_move_to(fw_heap_t *heap, fw_page_t *page, void *p) {
  /* the sampled small blocks of the classes up to a power of two share
   * the page of that one's: a heap that samples many sizes sets up a few
   * such pages, not one per class (a sampled block may be up to twice the
   * size its class would give: it is one in many). */
  size_t bs = page->block_size, up = (size_t)1 << (64 - __builtin_clzll((uint64_t)bs - 1));
  size_t cls = page->cls;
  if (fw_class_size[fw_size_class(up)] == up) cls = fw_size_class(up);  /* up <= FW_SMALL_MAX: a small page's */
  fw_page_t *sp = heap->samples[cls];
  fw_block_t *b = sp ? fw_page_take(sp) : NULL;
  if (!b) {
    /* the page used up stays in the full list until its blocks are freed */
    sp = fw_heap_page_samples(heap, cls);
    if (!sp) return p;
    heap->samples[cls] = sp;
    b = fw_page_take(sp);
    if (!b) return p;
  }
  if (fw_page_push_uncounted(page, (fw_block_t *)p)) fw_heap_page_empty(page);
  return b;
}

/* p's block, or the one it is traded for; *page its page, updated. */
FW_INLINE void *fw_prof_move(fw_heap_t *heap, fw_page_t **page, void *p) {
  fw_page_t *pg = *page;
  if (pg->kind != FW_KIND_SMALL || fw_page_flags(pg) != 0 ||
      atomic_load_explicit(&pg->heap, memory_order_relaxed) != heap)
    return p;
  p = fw_prof_move_to(heap, pg, p);
  *page = fw_ptr_page(p);
  return p;
}

static void *fw_prof_take(fw_heap_t *heap, void *p, size_t size, bool movable) {
  if (heap == &fw_heap_empty || !fw_prof_on) {
    heap->prof_left = INTPTR_MAX; /* a thread with no heap yet, or profiling off */
    return p;
  }
  /* a heap starts with a count of 0: at its first allocation the first
   * interval is drawn, and that allocation counted against it as any other */
  if (heap->rng == 0) {
    heap->prof_left = fw_prof_interval(heap) - (intptr_t)size;
    if (heap->prof_left >= 0) return p;
  }
  heap->prof_left = fw_prof_interval(heap);
  if (!p) return p;
  fw_page_t *page = fw_ptr_page(p);
  if (movable) p = fw_prof_move(heap, &page, p);
  fw_prof_record(heap, page, p, size);
  return p;
}

void fw_prof_sample(fw_heap_t *heap, void *p, size_t size) { (void)fw_prof_take(heap, p, size, false); }

void *fw_prof_sampled(fw_heap_t *heap, void *p, size_t size) { return fw_prof_take(heap, p, size, true); }

void *fw_prof_sampled_here(fw_heap_t *heap, void *p, size_t size) { return fw_prof_take(heap, p, size, false); }

/* Only the owner changes the page's flags. */
FW_INLINE void fw_prof_unflag(fw_page_t *page) {
  if (atomic_load_explicit(&page->sampled, memory_order_relaxed) == 0 &&
      atomic_load_explicit(&fw_page_segment(page)->thread_id, memory_order_relaxed) == fw_thread_id())
    fw_page_flags_set(page, fw_page_flags(page) & ~FW_PF_SAMPLED);
}

/* fw_prof_free of a small or medium page's block: out of the large
 * block's way, whose free then keeps no registers of its own. */
static FW_NOINLINE void fw_prof_free_block(fw_page_t *page, const void *b) {
  if (page->prof_side) {
    fw_prof_forget_side(fw_prof_cache_here(), page, fw_prof_side(page, (uintptr_t)b));
  } else {
    /* the other frees from a page that holds a sample need not look it
     * up (prof.h) */
    uint32_t off = (uint32_t)((uintptr_t)b - (uintptr_t)page->area);
    if (fw_prof_not_sample(page, off)) return;
    uint32_t n = atomic_load_explicit(&page->sampled, memory_order_relaxed);
    size_t size = 0;
    int64_t objects = 0;
    fw_page_t *r = fw_prof_slot(page, off);
    uint32_t site = n && r ? fw_prof_slot_take(r, off, &size, &objects) : 0;
    bool table = false;
    if (!site && n && (page->kind != FW_KIND_MEDIUM || (n & FW_SAMPLED_TABLES))) {
      site = fw_prof_table_take((uintptr_t)b, &size, &objects);
      table = r != NULL;  /* a medium page's, counted as in the table */
    }
    if (site) {
      fw_prof_forget(fw_prof_cache_here(), site, size, objects);
      fw_prof_uncount(page, table);
    }
  }
  fw_prof_unflag(page);
}

void fw_prof_free(fw_page_t *page, const void *b) {
  if (page->kind != FW_KIND_LARGE) {
    fw_prof_free_block(page, b);
    return;
  }
  /* one block: the record is the page's, and none is left after it
   * (fw_prof_unflag without the count), so the flag goes first and the
   * forget, last, may end in a tail call */
  if (atomic_load_explicit(&fw_page_segment(page)->thread_id, memory_order_relaxed) == fw_thread_id())
    fw_page_flags_set(page, fw_page_flags(page) & ~FW_PF_SAMPLED);
  fw_prof_forget_large(fw_prof_cache_here(), page);
}

void fw_prof_forget_heap(const fw_heap_t *heap) {
  fw_lock_acquire(&fw_prof_lock);
  for (size_t i = 0; i < fw_samples_cap; i++) {
    fw_sample_rec_t *r = &fw_samples[i];
    if (r->block <= 1) continue;
    fw_page_t *page = fw_ptr_page((void *)r->block);
    if (atomic_load_explicit(&page->heap, memory_order_relaxed) != heap) continue;
    fw_prof_forget_shared(r->site, r->size, r->objects);
    r->block = 1;
    fw_samples_live--;
    fw_prof_uncount(page, page->kind == FW_KIND_MEDIUM);
  }
  fw_lock_release(&fw_prof_lock);
  /* the samples the heap's pages keep */
  for (size_t c = 0; c <= FW_CLASS_COUNT + 1; c++) {
    const fw_page_queue_t *q = c == FW_CLASS_COUNT + 1 ? &heap->full : &heap->queues[c];
    for (fw_page_t *pg = q->first; pg; pg = pg->next) {
      if (pg->kind == FW_KIND_LARGE) {
        fw_prof_forget_large(NULL, pg);
      } else if (pg->kind == FW_KIND_MEDIUM) {
        for (fw_page_t *r = pg + 1; r < pg + pg->slices; r++) {
          size_t size;
          int64_t objects;
          uint32_t site = fw_prof_slot_take(r, FW_SLOT_ANY, &size, &objects);
          if (!site) continue;
          fw_prof_forget(NULL, site, size, objects);
          fw_prof_uncount(pg, false);
        }
      } else if (pg->prof_side) {
        fw_side_t *r = fw_prof_side(pg, (uintptr_t)pg->area);
        for (uint32_t i = 0; i < pg->capacity; i++) fw_prof_forget_side(NULL, pg, &r[i]);
      }
    }
  }
}

/* Under the lock: every site's four counts (alloc_objects, alloc_space,
 * inuse_objects, inuse_space; objects in 1/65536ths), the shared ones and
 * every thread's added up, as an array of fw_sites_n + 1 lines of four
 * (fw_os_unmap it, (fw_sites_n + 1) * 4 * 8 bytes); NULL without memory.
 * Every free is read before any allocation, so that one seen freed is seen
 * allocated too: in-use figures may run ahead of a free made meanwhile,
 * never behind. */
static size_t fw_prof_totals_bytes(uint32_t n) { return ((size_t)n + 1) * 4 * sizeof(int64_t); }

static int64_t *fw_prof_totals(uint32_t n) {
  int64_t *v = fw_os_map(fw_prof_totals_bytes(n), 0, 0);
  if (!v) return NULL;
  fw_prof_cache_t *all = atomic_load_explicit(&fw_prof_caches, memory_order_acquire);
  for (int side = FW_SIDE_FREED; side >= FW_SIDE_ALLOC; side -= 2) {
    for (uint32_t i = 1; i <= n; i++) {
      const fw_site_t *st = fw_site_at(i);
      const _Atomic(int64_t) *g = side == FW_SIDE_ALLOC ? &st->alloc_objects : &st->freed_objects;
      v[4 * i + side] = atomic_load_explicit(&g[0], memory_order_acquire);
      v[4 * i + side + 1] = atomic_load_explicit(&g[1], memory_order_acquire);
    }
    for (fw_prof_cache_t *c = all; c; c = c->all_next) {
      for (uint32_t k = 0; k < FW_TCOUNT_CHUNKS && (k << FW_TCOUNT_SHIFT) <= n; k++) {
        fw_tcount_t *chunk = atomic_load_explicit(&c->counts[k], memory_order_acquire);
        if (!chunk) continue;
        for (uint32_t j = 0; j < FW_TCOUNT_CHUNK; j++) {
          uint32_t i = (k << FW_TCOUNT_SHIFT) + j;
          if (i == 0 || i > n) continue;
          v[4 * i + side] += atomic_load_explicit(&chunk[j].v[side], memory_order_acquire);
          v[4 * i + side + 1] += atomic_load_explicit(&chunk[j].v[side + 1], memory_order_acquire);
        }
      }
    }
  }
  for (uint32_t i = 1; i <= n; i++) {
    int64_t *x = &v[4 * i];
    x[2] = x[0] - x[2] > 0 ? x[0] - x[2] : 0;
    x[3] = x[1] - x[3] > 0 ? x[1] - x[3] : 0;
  }
  return v;
}

void fw_prof_visit_inuse(void (*fn)(const uintptr_t *pcs, size_t npcs, double objects, double bytes, void *arg),
                         void *arg) {
  fw_lock_acquire(&fw_prof_lock);
  uint32_t n = fw_sites_n;
  int64_t *v = fw_prof_totals(n);
  for (uint32_t i = 1; v && i <= n; i++) {
    const fw_site_t *st = fw_site_at(i);
    double objects = (double)v[4 * i + 2] / (1 << FW_OBJ_SHIFT);
    if (objects >= 0.5) fn(st->pcs, st->npcs, objects, (double)v[4 * i + 3], arg);
  }
  fw_lock_release(&fw_prof_lock);
  if (v) fw_os_unmap(v, fw_prof_totals_bytes(n));
}

/* ---- the profile ------------------------------------------------------------------- */

int fw_prof_dump_fd(int fd) {
  static const char *const types[4][2] = {
      {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
  static const char *const period[2] = {"space", "bytes"};
  fw_pprof_t *pp = fw_pprof_new(types, 4, period, (int64_t)fw_prof_rate);
  if (!pp) return -1;
  fw_lock_acquire(&fw_prof_lock);
  uint32_t n = fw_sites_n;
  int64_t *totals = fw_prof_totals(n);
  for (uint32_t i = 1; totals && i <= n; i++) {
    const fw_site_t *st = fw_site_at(i);
    int64_t *v = &totals[4 * i];
    v[0] = (v[0] + (1 << (FW_OBJ_SHIFT - 1))) >> FW_OBJ_SHIFT;
    v[2] = (v[2] + (1 << (FW_OBJ_SHIFT - 1))) >> FW_OBJ_SHIFT;
    fw_pprof_add(pp, st->pcs, st->npcs, v);
  }
  fw_lock_release(&fw_prof_lock);
  if (totals) fw_os_unmap(totals, fw_prof_totals_bytes(n));
  bool ok = totals && fw_pprof_write(pp, fd);
  fw_pprof_free(pp);
  return ok ? 0 : -1;
}

int fw_prof_dump(const char *path) {
  if (!path) {
    errno = EINVAL;
    return -1;
  }
  int fd = fw_os_create(path);
  if (fd < 0) return -1;
  int r = fw_prof_dump_fd(fd);
  fw_os_close(fd);
  return r;
}
