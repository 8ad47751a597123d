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
 * Forgetting the samples. A page holding a sampled block carries
 * FW_PF_SAMPLED, which fails the free fast path's one compare: frees from
 * such a page take the slow path, which looks the block up here. The owner
 * clears the flag once no sampled block is left in the page.
 *
 * Storage. All in memory mapped from the OS (the profiler runs inside the
 * allocator): a table of live samples keyed by block address, and a table
 * of call sites with their running totals; both under one lock, taken only
 * when a sample is taken or a sampled block freed, about once per RATE
 * bytes. */
#include "prof.h"
#include "check.h"
#include "page.h"
#include "heap.h"
#include "pprof.h"
#include "options.h"
#include "message.h"
#include "os.h"
#include <string.h>

#define FW_PROF_FRAMES 16

typedef struct {
  uint64_t hash;
  uint32_t npcs;
  uintptr_t pcs[FW_PROF_FRAMES];
  double alloc_objects, alloc_space, inuse_objects, inuse_space;
} fw_site_rec_t;

typedef struct {
  uintptr_t block;  /* 0: empty; 1: deleted */
  uint32_t site;
  double objects, space; /* what the sample stands for */
} fw_sample_rec_t;

bool fw_prof_on;
static double fw_prof_rate;
static fw_lock_t fw_prof_lock = FW_LOCK_INIT;
static fw_site_rec_t *fw_sites;      /* open addressing by stack hash */
static size_t fw_sites_cap, fw_sites_n;
static fw_sample_rec_t *fw_samples;  /* open addressing by block address */
static size_t fw_samples_cap, fw_samples_used, fw_samples_live;
/* FREEWAY_PROFILE_GROWTH: the estimate of the bytes in use, and the level
 * at which the next profile is written */
static double fw_prof_inuse, fw_prof_growth, fw_prof_next_dump;
static unsigned fw_prof_dumps;

void fw_prof_init(void) {
  fw_prof_rate = (double)fw_opt(PROFILE_RATE);
  fw_prof_growth = (double)fw_opt(PROFILE_GROWTH) * 1048576.0;
  fw_prof_next_dump = fw_prof_growth;
  if (fw_opt(PROFILE) && !fw_flavour_profiling)
    fw_message("warning: FREEWAY_PROFILE=1 needs libfreeway-prof.so (the library with the profiler's countdown "
               "in its entry points; `freeway run --profile` loads it): no profile is taken\n");
  fw_prof_on = fw_opt(PROFILE) && fw_flavour_profiling;
}

/* ---- arithmetic without libm ------------------------------------------------ */

/* e^-x for x >= 0: x = k ln 2 + r, e^-r by its series (r < ln 2). */
static double fw_exp_neg(double x) {
  /* 2^-k is made from its exponent bits; beyond 40, 1 - e^-x is 1 in a
   * double anyway */
  if (x > 40) return 0;
  static const double ln2 = 0.6931471805599453;
  int k = (int)(x / ln2);
  double r = x - k * ln2, term = 1, sum = 1;
  static const double inv[14] = {1.0, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 5, 1.0 / 6, 1.0 / 7,
                                 1.0 / 8, 1.0 / 9, 1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14};
  for (int i = 0; i < 14; i++) {
    term *= -r * inv[i];
    sum += term;
  }
  union {
    double d;
    uint64_t b;
  } p2 = {.b = (uint64_t)(1023 - k) << 52};
  return sum * p2.d;
}
/* ln u for u in (0, 1]: the exponent's share, and 2 atanh(z) for the
 * mantissa m in [1, 2), z = (m - 1) / (m + 1) <= 1/3, whose series has
 * converged to 1e-12 after twelve terms. */
static double fw_ln(double u) {
  union {
    double d;
    uint64_t b;
  } v = {u};
  int e = (int)((v.b >> 52) & 0x7ff) - 1023;
  v.b = (v.b & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52);
  static const double inv[12] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                 1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
  double z = (v.d - 1) / (v.d + 1), z2 = z * z, term = z, sum = 0;
  for (int i = 0; i < 12; i++) {
    sum += term * inv[i];
    term *= z2;
  }
  return 2 * sum + e * 0.6931471805599453;
}

static uint64_t fw_prof_rand(fw_heap_t *heap) {
  uint64_t x = heap->rng;
  if (!x) fw_os_random(&x, sizeof x);
  if (!x) x = 0x9e3779b97f4a7c15u;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  heap->rng = x;
  return x;
}

/* Bytes to the next sample: exponential with mean RATE. */
static intptr_t fw_prof_interval(fw_heap_t *heap) {
  double u = ((double)(fw_prof_rand(heap) >> 11) + 1) / 9007199254740993.0; /* (0, 1] */
  double n = -fw_ln(u) * fw_prof_rate;
  if (n > (double)(INTPTR_MAX / 2)) n = (double)(INTPTR_MAX / 2);
  return (intptr_t)n;
}


/* ---- the tables ------------------------------------------------------------------ */

static uint64_t fw_mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdu;
  h ^= h >> 33;
  return h;
}

/* The sites' table at twice its size (or its first size), entries placed
 * again and the samples' site numbers renumbered; false without memory. */
static bool fw_prof_grow_sites(void) {
  size_t cap = fw_sites_cap ? 2 * fw_sites_cap : 1024;
  fw_site_rec_t *t = fw_os_map(cap * sizeof *t, 0, 0);
  if (!t) return false;
  memset(t, 0, cap * sizeof *t);
  for (size_t i = 0; i < fw_sites_cap; i++) {
    if (!fw_sites[i].npcs && !fw_sites[i].hash) continue;
    size_t j = fw_sites[i].hash & (cap - 1);
    while (t[j].npcs || t[j].hash) j = (j + 1) & (cap - 1);
    t[j] = fw_sites[i];
  }
  /* the samples name sites by index: renumber them */
  for (size_t i = 0; i < fw_samples_cap; i++) {
    if (fw_samples[i].block <= 1) continue;
    const fw_site_rec_t *old = &fw_sites[fw_samples[i].site];
    size_t j = old->hash & (cap - 1);
    while (t[j].hash != old->hash || t[j].npcs != old->npcs ||
           memcmp(t[j].pcs, old->pcs, old->npcs * sizeof(uintptr_t)) != 0)
      j = (j + 1) & (cap - 1);
    fw_samples[i].site = (uint32_t)j;
  }
  if (fw_sites) fw_os_unmap(fw_sites, fw_sites_cap * sizeof *fw_sites);
  fw_sites = t;
  fw_sites_cap = cap;
  return true;
}

/* The site of a stack, made if new; SIZE_MAX without memory. A site with
 * no frames has hash 1 so that an empty slot (hash 0, no frames) differs. */
static size_t fw_prof_site(const uintptr_t *pcs, size_t n) {
  if ((fw_sites_n + 1) * 2 > fw_sites_cap && !fw_prof_grow_sites()) return SIZE_MAX;
  uint64_t h = 0x84222325cbf29ce4u;
  for (size_t i = 0; i < n; i++) h = fw_mix(h ^ pcs[i]);
  if (!h) h = 1;
  size_t j = h & (fw_sites_cap - 1);
  for (;; j = (j + 1) & (fw_sites_cap - 1)) {
    fw_site_rec_t *s = &fw_sites[j];
    if (!s->hash) break;
    if (s->hash == h && s->npcs == n && memcmp(s->pcs, pcs, n * sizeof *pcs) == 0) return j;
  }
  fw_site_rec_t *s = &fw_sites[j];
  s->hash = h;
  s->npcs = (uint32_t)n;
  memcpy(s->pcs, pcs, n * sizeof *pcs);
  fw_sites_n++;
  return j;
}

static bool fw_prof_grow_samples(void) {
  size_t cap = fw_samples_cap ? 2 * fw_samples_cap : 4096;
  /* mostly deleted entries: the same size, cleaned */
  if (fw_samples_cap && fw_samples_live * 4 < fw_samples_cap) cap = fw_samples_cap;
  fw_sample_rec_t *t = fw_os_map(cap * sizeof *t, 0, 0);
  if (!t) return false;
  memset(t, 0, cap * sizeof *t);
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

static void fw_prof_dump_growth(unsigned n) {
  const char *dir = fw_topt(REPORT_DIR);
  if (!dir) return;
  char path[1200];
  fw_snprintf(path, sizeof path, "%s/freeway-%ld-heap-growth-%u.pb", dir, fw_os_pid(), n);
  if (fw_prof_dump(path) != 0) fw_message("warning: cannot write the heap profile %s\n", path);
}

/* ---- taking and forgetting samples ------------------------------------------------ */

static void fw_prof_record(fw_heap_t *heap, void *p, size_t size) {
  if (!p || heap == &fw_heap_empty) return;
  uintptr_t pcs[FW_PROF_FRAMES];
  size_t n = fw_check_stack(pcs, FW_PROF_FRAMES);
  fw_page_t *page = fw_ptr_page(p);
  uintptr_t block = (uintptr_t)fw_page_block_start(page, p);
  /* what the sample stands for: 1 / P(an allocation of this size is sampled) */
  double s = size ? (double)size : 1, prob = 1 - fw_exp_neg(s / fw_prof_rate);
  double objects = prob > 0 ? 1 / prob : 1;
  unsigned dump = 0;
  fw_lock_acquire(&fw_prof_lock);
  size_t site = fw_prof_site(pcs, n);
  if (site != SIZE_MAX && ((fw_samples_used + 1) * 2 <= fw_samples_cap || fw_prof_grow_samples())) {
    fw_site_rec_t *st = &fw_sites[site];
    st->alloc_objects += objects;
    st->alloc_space += objects * s;
    st->inuse_objects += objects;
    st->inuse_space += objects * s;
    size_t j = fw_mix(block) & (fw_samples_cap - 1);
    while (fw_samples[j].block > 1) j = (j + 1) & (fw_samples_cap - 1);
    if (!fw_samples[j].block) fw_samples_used++;
    fw_samples[j] = (fw_sample_rec_t){block, (uint32_t)site, objects, objects * s};
    fw_samples_live++;
    fw_prof_inuse += objects * s;
    if (fw_prof_growth > 0 && fw_prof_inuse >= fw_prof_next_dump) {
      dump = ++fw_prof_dumps;
      fw_prof_next_dump = fw_prof_inuse + fw_prof_growth;
    }
    /* the page's frees now come here: the flag fails the free fast path.
     * The page is the caller's: it was just allocated from */
    atomic_store_explicit(&page->sampled_at, (uint32_t)(block - (uintptr_t)page->area), memory_order_relaxed);
    atomic_fetch_add_explicit(&page->sampled, 1, memory_order_relaxed);
    if (!(fw_page_flags(page) & FW_PF_SAMPLED)) fw_page_flags_set(page, fw_page_flags(page) | FW_PF_SAMPLED);
  }
  fw_lock_release(&fw_prof_lock);
  if (dump) fw_prof_dump_growth(dump);
}

/* A sampled small block is handed out from the heap's page of sampled
 * blocks of its class instead (heap.c, fw_heap_page_samples), and p goes
 * back to its page unseen: only frees of sampled blocks then take the slow
 * path in which the profiler forgets them, not those of every block that
 * shares a page with one. Blocks of a page with a flag already (every page
 * in cautious mode and at the secure level, whose marks a move would have
 * to keep), of another heap, and large ones stay where they are (their
 * page is flagged). */
static void *fw_prof_move(fw_heap_t *heap, void *p) {
  if (!p) return p;
  fw_page_t *page = fw_ptr_page(p);
  if (page->kind == FW_KIND_LARGE || fw_page_flags(page) != 0 ||
      atomic_load_explicit(&page->heap, memory_order_relaxed) != heap)
    return p;
  size_t cls = page->cls;
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
  if (movable) p = fw_prof_move(heap, p);
  fw_prof_record(heap, p, size);
  return p;
}

void fw_prof_sample(fw_heap_t *heap, void *p, size_t size) { (void)fw_prof_take(heap, p, size, false); }

void *fw_prof_sampled(fw_heap_t *heap, void *p, size_t size) { return fw_prof_take(heap, p, size, true); }

void fw_prof_account(void *p, size_t size) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  if (heap == &fw_heap_empty) return;
  if (fw_unlikely((heap->prof_left -= (intptr_t)size) < 0)) fw_prof_sample(heap, p, size);
}

void fw_prof_free(fw_page_t *page, const void *b) {
  /* most flagged pages hold one sampled block: the other frees from the
   * page need not look it up */
  uint32_t n = atomic_load_explicit(&page->sampled, memory_order_relaxed);
  if (n == 1 && (uintptr_t)b - (uintptr_t)page->area != atomic_load_explicit(&page->sampled_at, memory_order_relaxed))
    return;
  if (n == 0) goto unflag;
  fw_lock_acquire(&fw_prof_lock);
  if (fw_samples_cap) {
    size_t j = fw_mix((uintptr_t)b) & (fw_samples_cap - 1);
    for (; fw_samples[j].block; j = (j + 1) & (fw_samples_cap - 1)) {
      if (fw_samples[j].block != (uintptr_t)b) continue;
      fw_site_rec_t *st = &fw_sites[fw_samples[j].site];
      st->inuse_objects -= fw_samples[j].objects;
      st->inuse_space -= fw_samples[j].space;
      fw_prof_inuse -= fw_samples[j].space;
      fw_samples[j].block = 1;
      fw_samples_live--;
      atomic_fetch_sub_explicit(&page->sampled, 1, memory_order_relaxed);
      break;
    }
  }
  fw_lock_release(&fw_prof_lock);
unflag:
  /* only the owner changes the page's flags */
  if (atomic_load_explicit(&page->sampled, memory_order_relaxed) == 0 &&
      atomic_load_explicit(&fw_page_segment(page)->thread_id, memory_order_relaxed) == fw_thread_id())
    fw_page_flags_set(page, fw_page_flags(page) & ~FW_PF_SAMPLED);
}

void fw_prof_forget_heap(const fw_heap_t *heap) {
  fw_lock_acquire(&fw_prof_lock);
  for (size_t i = 0; i < fw_samples_cap; i++) {
    fw_sample_rec_t *r = &fw_samples[i];
    if (r->block <= 1) continue;
    fw_page_t *page = fw_ptr_page((void *)r->block);
    if (atomic_load_explicit(&page->heap, memory_order_relaxed) != heap) continue;
    fw_site_rec_t *st = &fw_sites[r->site];
    st->inuse_objects -= r->objects;
    st->inuse_space -= r->space;
    fw_prof_inuse -= r->space;
    r->block = 1;
    fw_samples_live--;
    atomic_fetch_sub_explicit(&page->sampled, 1, memory_order_relaxed);
  }
  fw_lock_release(&fw_prof_lock);
}

void fw_prof_visit_inuse(void (*fn)(const uintptr_t *pcs, size_t npcs, double objects, double bytes, void *arg),
                         void *arg) {
  fw_lock_acquire(&fw_prof_lock);
  for (size_t i = 0; i < fw_sites_cap; i++) {
    const fw_site_rec_t *st = &fw_sites[i];
    if (st->hash && st->inuse_objects >= 0.5) fn(st->pcs, st->npcs, st->inuse_objects, st->inuse_space, arg);
  }
  fw_lock_release(&fw_prof_lock);
}

/* ---- the profile ------------------------------------------------------------------- */

int fw_prof_dump_fd(int fd) {
  static const char *const types[4][2] = {
      {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
  static const char *const period[2] = {"space", "bytes"};
  fw_pprof_t *pp = fw_pprof_new(types, 4, period, (int64_t)fw_prof_rate);
  if (!pp) return -1;
  fw_lock_acquire(&fw_prof_lock);
  for (size_t i = 0; i < fw_sites_cap; i++) {
    const fw_site_rec_t *st = &fw_sites[i];
    if (!st->hash) continue;
    int64_t v[4] = {(int64_t)(st->alloc_objects + 0.5), (int64_t)(st->alloc_space + 0.5),
                    (int64_t)(st->inuse_objects + 0.5), (int64_t)(st->inuse_space + 0.5)};
    fw_pprof_add(pp, st->pcs, st->npcs, v);
  }
  fw_lock_release(&fw_prof_lock);
  bool ok = fw_pprof_write(pp, fd);
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
