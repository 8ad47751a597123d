/* fuzz_api.c — libFuzzer target: random sequences of calls on the whole
 * public API (include/freeway.h) checked against a shadow model.
 *
 * The input is read as a list of operations on a table of slots. Each live
 * slot remembers the block's requested size, how many bytes of it carry a
 * pattern (derived from a seed kept with the slot), the heap or pool it
 * belongs to and the alignment it was asked with. Every operation checks the
 * pattern of the block it touches, and every CHECK_EVERY operations (and
 * after anything that releases memory in bulk) all live blocks are checked,
 * so a block that an allocation overlaps, a free list link written into a
 * live block or a purge of live memory shows up. A new block must not
 * overlap any live one (a sorted table of address ranges).
 *
 * Cross-thread traffic goes through one worker thread, fed one request at a
 * time and waited for, so that a run does the same thing every time.
 *
 * Built twice: fuzz_api (the mode the environment gives) and
 * fuzz_api_cautious (re-executes itself with FREEWAY_CAUTIOUS=1, so that
 * every free is validated; a correct sequence must never make it abort).
 * The calls that cautious mode answers by aborting on purpose (heap calls
 * from the wrong thread) are only made in the default mode.
 *
 * A failed check prints what differs and traps, which libFuzzer reports as
 * a crash and saves the input. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <freeway.h>
/* The size-class table, so that sizes land on and around every boundary
 * as the allocator sees them now, not as it saw them when this was written. */
#include "sizeclass.h"

#define NSLOTS 256
#define NHEAPS 4               /* heaps made by fw_heap_new, ids 1..NHEAPS */
#define NPOOLS 3
#define MAX_OPS 4096           /* per input */
#define CHECK_EVERY 32         /* operations between checks of every block */
#define LIVE_CAP ((size_t)384 << 20) /* requested bytes live at once */
#define FULL_MAX 16384         /* blocks up to this are checked byte for byte */
#define ZERO_FULL_MAX (256u << 10)
#define STRIPES 256            /* sampled stretches in a bigger block */

/* The shadow's own loops (patterns, lookups) would otherwise be traced for
 * coverage at every compare, taking most of the time and steering nothing. */
#define NOCOV __attribute__((no_sanitize("coverage")))

/* Owner ids: 0 the main thread's default heap, 1..NHEAPS its own heaps. */
enum {
  H_DEFAULT = 0,
  H_WORKER = NHEAPS + 1,  /* the worker's default heap */
  H_WORKER_OWN,           /* a heap the worker made with fw_heap_new */
  H_ORPHAN,               /* either of those, after the worker exited */
  H_POOL                  /* a pool object (pool index in the slot) */
};

typedef struct {
  uint8_t *p;
  size_t req;    /* requested size */
  size_t ext;    /* bytes carrying the pattern */
  size_t usable; /* fw_malloc_usable_size when made (0 for pool objects) */
  size_t align;  /* alignment asked for (0: none), for fw_free_aligned* */
  uint32_t seed;
  uint8_t owner;
  int8_t pool;
  bool live;
} slot_t;

typedef struct {
  fw_pool_t *pool;
  size_t object_size;  /* as asked */
  size_t rounded;      /* fw_pool_stats' object_size */
  size_t alignment;    /* effective: at least pointer size */
  bool zero;
} pool_rec_t;

typedef struct {
  uintptr_t lo, hi;
  int slot;
} range_t;

_Static_assert(NSLOTS == 256, "a byte of the input names a slot");
static slot_t slots[NSLOTS];
static range_t ranges[NSLOTS];
static size_t nranges;
static fw_heap_t *heaps[NHEAPS + 1];
static pool_rec_t pools[NPOOLS];
static size_t live_bytes;
static uint32_t seed_counter;
static bool cautious;
static int devnull = -1;
static size_t op_index;

/* The bulk set: up to BALLAST_MAX blocks of one size and one owner, made
 * and freed by one operation each, so that pages fill up (a 256-slot table
 * cannot fill a page of small blocks), go full, take remote frees and empty
 * again. Sorted by address; each block's pattern covers only its ends. */
#define BALLAST_MAX 4096
typedef struct {
  uint8_t *p;
  size_t ext;
} bblk_t;
static bblk_t ballast[BALLAST_MAX];
static void *ballast_tmp[BALLAST_MAX];
static size_t nballast, ballast_req;
static uint32_t ballast_seed;
static uint8_t ballast_owner;
static int ballast_pool = -1;

/* ---- failure ---------------------------------------------------------------- */
__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_api: operation %zu: ", op_index);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  __builtin_trap();
}
#define REQUIRE(cond, ...)        \
  do {                            \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

/* ---- input ---------------------------------------------------------------------- */
static const uint8_t *in_p;
static size_t in_n;

static uint8_t u8(void) {
  if (in_n == 0) return 0;
  in_n--;
  return *in_p++;
}
/* little-endian; the reads are sequenced (the operands of | are not) */
static uint32_t u16(void) {
  uint32_t lo = u8();
  return lo | (uint32_t)u8() << 8;
}
static uint32_t u24(void) {
  uint32_t lo = u16();
  return lo | (uint32_t)u8() << 16;
}

/* Sizes in ranges that take different paths through the allocator; the
 * first byte's low five bits pick the range. Blocks of many MiB are rare:
 * their page faults would take most of the time. */
static size_t draw_size(void) {
  uint8_t k = u8() & 31;
  if (k < 2) return 0;
  if (k < 6) return 1 + (u8() & 63);
  if (k < 12) { /* a size class boundary, within a few bytes */
    size_t c = 1 + u8() % (FW_CLASS_COUNT - 1);
    long s = (long)fw_class_size[c] + (long)(u8() % 9) - 4;
    return s < 0 ? 0 : (size_t)s;
  }
  if (k < 16) return u16() % (FW_SMALL_MAX + 1);
  if (k < 20) return FW_SMALL_MAX + u24() % (2 * FW_MEDIUM_MAX - FW_SMALL_MAX);
  if (k < 24) return FW_MEDIUM_MAX + u24() * 2u % ((8u << 20) - FW_MEDIUM_MAX);
  if (k < 26) { /* runs of 64 KiB slices: spans up to 2 MiB, and segment sizes */
    size_t n = (size_t)(1 + u8() % 80) * 65536;
    return n + (size_t)(u8() % 9) - 4;
  }
  if (k < 28) { /* powers of two, within a few bytes */
    long s = 1L << (u8() % 24);
    s += (long)(u8() % 5) - 2;
    return s < 0 ? 0 : (size_t)s;
  }
  if (k == 28) {
    if ((u8() & 15) == 0) return ((size_t)256 << 20) + (size_t)u16() * 256; /* a mapping of its own */
    return ((size_t)8 << 20) + (size_t)u24() * 3;
  }
  if (k == 29) { /* around multiples of the 4 MiB segment */
    size_t n = (size_t)(1 + u8() % 8) << 22;
    return n + (size_t)u16() * 2 - 65536;
  }
  return u8() % 128 + 1; /* small ones once more: they are most of any real program's */
}

static size_t draw_align(void) {
  uint8_t k = u8();
  unsigned e = (k & 7) == 0 ? 13 + u8() % 14 : (k >> 3) % 13; /* up to 64 MiB, mostly small */
  return (size_t)1 << e;
}

/* ---- patterns -------------------------------------------------------------------- */
static inline uint8_t pat(uint32_t seed, size_t i) {
  return (uint8_t)((uint32_t)i * 0x2Fu + seed + (((uint32_t)(i >> 8)) ^ (seed >> 8)) * 0x95u);
}

/* The stretches of an n-byte block that carry the pattern: all of it up to
 * full_max, else both ends and a short stripe every few pages in between
 * (at most STRIPES, at least one in every 64 KiB of blocks up to 16 MiB, so
 * that a purge of live memory is seen while a huge block stays cheap and
 * its untouched pages stay unmapped). */
typedef struct {
  size_t n, full_max, off, len, step;
  int phase;
} regit_t;

NOCOV static void reg_init(regit_t *it, size_t n, size_t full_max) {
  memset(it, 0, sizeof *it);
  it->n = n;
  it->full_max = full_max;
  size_t step = (n / STRIPES + 4095) & ~(size_t)4095;
  it->step = step < 4096 ? 4096 : step;
}

NOCOV static bool reg_next(regit_t *it) {
  size_t n = it->n;
  if (n <= it->full_max) {
    if (it->phase++ || n == 0) return false;
    it->off = 0;
    it->len = n;
    return true;
  }
  switch (it->phase) {
  case 0:
    it->phase = 1;
    it->off = 0;
    it->len = 1024;
    return true;
  case 1:
    it->phase = 2;
    it->off = 0;
    /* fall through */
  case 2:
    it->off = it->off ? it->off + it->step : it->step;
    if (it->off + 32 <= n - 1024) {
      it->len = 32;
      return true;
    }
    it->phase = 3;
    it->off = n - 1024;
    it->len = 1024;
    return true;
  default: return false;
  }
}

NOCOV static void fill(uint8_t *p, size_t n, uint32_t seed) {
  regit_t it;
  reg_init(&it, n, FULL_MAX);
  while (reg_next(&it))
    for (size_t i = it.off; i < it.off + it.len; i++) p[i] = pat(seed, i);
}

/* Checks the pattern of an ext-byte block laid down with seed, in its first
 * limit bytes only. */
NOCOV static void verify_prefix(const slot_t *s, const uint8_t *p, size_t ext, uint32_t seed, size_t limit,
                          const char *what) {
  regit_t it;
  reg_init(&it, ext, FULL_MAX);
  while (reg_next(&it))
    for (size_t i = it.off; i < it.off + it.len && i < limit; i++)
      if (p[i] != pat(seed, i))
        fail("%s: block %p (slot %d, requested %zu, %zu bytes with the pattern, owner %u) differs at offset "
             "%zu: 0x%02x, expected 0x%02x",
             what, (const void *)p, s ? (int)(s - slots) : -1, s ? s->req : 0, ext, s ? s->owner : 0, i, p[i],
             pat(seed, i));
}

static void verify(const slot_t *s, const char *what) { verify_prefix(s, s->p, s->ext, s->seed, s->ext, what); }

NOCOV static void verify_zero(const uint8_t *p, size_t n, const char *what) {
  regit_t it;
  reg_init(&it, n, ZERO_FULL_MAX);
  while (reg_next(&it))
    for (size_t i = it.off; i < it.off + it.len; i++)
      if (p[i]) fail("%s: block %p (%zu bytes) has 0x%02x at offset %zu", what, (const void *)p, n, p[i], i);
}

/* ---- address ranges ----------------------------------------------------------------- */
NOCOV static size_t range_find(uintptr_t lo) { /* first range with .lo >= lo */
  size_t a = 0, b = nranges;
  while (a < b) {
    size_t m = (a + b) / 2;
    if (ranges[m].lo < lo) a = m + 1;
    else b = m;
  }
  return a;
}

NOCOV static size_t ballast_find(uintptr_t lo) { /* first bulk block at or after lo */
  size_t a = 0, b = nballast;
  while (a < b) {
    size_t m = (a + b) / 2;
    if ((uintptr_t)ballast[m].p < lo) a = m + 1;
    else b = m;
  }
  return a;
}

static uintptr_t ballast_end(size_t i) { return (uintptr_t)ballast[i].p + (ballast[i].ext ? ballast[i].ext : 1); }

/* The bulk block that [lo, hi) overlaps, or -1. */
static long ballast_overlap(uintptr_t lo, uintptr_t hi) {
  size_t i = ballast_find(lo);
  if (i < nballast && (uintptr_t)ballast[i].p < hi) return (long)i;
  if (i > 0 && ballast_end(i - 1) > lo) return (long)i - 1;
  return -1;
}

static void range_add(int slot) {
  const slot_t *s = &slots[slot];
  uintptr_t lo = (uintptr_t)s->p, hi = lo + (s->ext ? s->ext : 1);
  size_t i = range_find(lo);
  if (i < nranges && ranges[i].lo < hi)
    fail("block %p..%#lx (slot %d) overlaps live block %#lx..%#lx (slot %d)", (void *)lo, (unsigned long)hi, slot,
         (unsigned long)ranges[i].lo, (unsigned long)ranges[i].hi, ranges[i].slot);
  if (i > 0 && ranges[i - 1].hi > lo)
    fail("block %p..%#lx (slot %d) overlaps live block %#lx..%#lx (slot %d)", (void *)lo, (unsigned long)hi, slot,
         (unsigned long)ranges[i - 1].lo, (unsigned long)ranges[i - 1].hi, ranges[i - 1].slot);
  long j = ballast_overlap(lo, hi);
  if (j >= 0)
    fail("block %p..%#lx (slot %d) overlaps live bulk block %p (%zu bytes)", (void *)lo, (unsigned long)hi, slot,
         (void *)ballast[j].p, ballast[j].ext);
  memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof *ranges);
  ranges[i] = (range_t){lo, hi, slot};
  nranges++;
}

static void range_del(int slot) {
  size_t i = range_find((uintptr_t)slots[slot].p);
  if (i >= nranges || ranges[i].slot != slot) fail("range table lost slot %d", slot);
  memmove(&ranges[i], &ranges[i + 1], (nranges - i - 1) * sizeof *ranges);
  nranges--;
}

/* ---- the shadow ------------------------------------------------------------------------ */
static uint32_t next_seed(void) {
  uint32_t x = ++seed_counter * 0x9E3779B9u;
  return x ^ (x >> 15);
}

static const char *owner_name(unsigned o) {
  static const char *const names[] = {"default", "heap1", "heap2", "heap3", "heap4", "worker", "worker-heap",
                                      "orphan", "pool"};
  return o < sizeof names / sizeof names[0] ? names[o] : "?";
}

/* Records a new block in slot i (which is free) and lays down its pattern. */
static void adopt(int i, void *p, size_t req, size_t align, unsigned owner, int pool) {
  slot_t *s = &slots[i];
  if (s->live) fail("slot %d reused while live", i);
  if (align && ((uintptr_t)p & (align - 1)))
    fail("block %p (%zu bytes, %s) is not aligned to %zu", p, req, owner_name(owner), align);
  if ((uintptr_t)p & (sizeof(void *) - 1)) fail("block %p (%zu bytes) is not pointer-aligned", p, req);
  s->p = p;
  s->req = req;
  s->align = align;
  s->owner = (uint8_t)owner;
  s->pool = (int8_t)pool;
  s->seed = next_seed();
  if (pool >= 0) {
    s->usable = 0;
    s->ext = cautious ? req : pools[pool].rounded;
  } else {
    s->usable = fw_malloc_usable_size(p);
    if (s->usable < req) fail("usable size %zu of %p is below the %zu bytes requested", s->usable, p, req);
    /* Up to the usable size the bytes are the caller's: fill them all. */
    s->ext = s->usable;
  }
  s->live = true;
  range_add(i);
  fill(s->p, s->ext, s->seed);
  live_bytes += req;
}

/* Forgets slot i (its block was freed, or went with its heap or pool). */
static void drop(int i) {
  slot_t *s = &slots[i];
  range_del(i);
  live_bytes -= s->req;
  s->live = false;
  s->p = NULL;
}

static void check_slot(const slot_t *s, const char *what) {
  verify(s, what);
  if (s->owner != H_POOL) {
    size_t u = fw_malloc_usable_size(s->p);
    if (u != s->usable) fail("%s: usable size of %p changed from %zu to %zu while live", what, (void *)s->p, s->usable, u);
  }
}

static void ballast_check(const bblk_t *b, const char *what);

NOCOV static void check_all(const char *what) {
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live) check_slot(&slots[i], what);
  for (size_t i = 0; i < nballast; i++) ballast_check(&ballast[i], what);
  size_t sum = nballast * ballast_req;
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live) sum += slots[i].req;
  REQUIRE(sum == live_bytes, "live byte count %zu, slots add up to %zu", live_bytes, sum);
}

static bool budget(size_t n) { return n <= LIVE_CAP && live_bytes + n <= LIVE_CAP; }

NOCOV static int pick_live(uint8_t b, bool want_pool) {
  for (int k = 0; k < NSLOTS; k++) {
    int i = (b + k) % NSLOTS;
    if (slots[i].live && (slots[i].owner == H_POOL) == want_pool) return i;
  }
  return -1;
}

NOCOV static int pick_free(uint8_t b) {
  for (int k = 0; k < NSLOTS; k++) {
    int i = (b + k) % NSLOTS;
    if (!slots[i].live) return i;
  }
  return -1;
}

/* A live heap index from a byte (the default heap if b picks none). */
static unsigned pick_heap(uint8_t b) {
  unsigned h = b % (NHEAPS + 1);
  return heaps[h] ? h : H_DEFAULT;
}

static void expect_null(void *p, int err, const char *call) {
  if (p) fail("%s returned %p, expected NULL", call, p);
  if (errno != err) fail("%s: errno %d, expected %d", call, errno, err);
}

/* ---- the worker thread ---------------------------------------------------------------- */
enum {
  W_MALLOC, W_CALLOC, W_ALIGNED, W_OWN_MALLOC, W_OWN_CALLOC, W_FREE, W_FREE_SIZED, W_FREE_ALIGNED_SIZED,
  W_REALLOC, W_POOL_ALLOC, W_POOL_FREE, W_MISUSE, W_COLLECT, W_OWN_DESTROY, W_OWN_COLLECT, W_BULK_ALLOC,
  W_BULK_FREE, W_QUIT
};

typedef struct {
  int op;
  void *p;
  size_t a, b;
  fw_heap_t *heap;
  fw_pool_t *pool;
  void **arr; /* bulk requests: b blocks of a bytes */
  void *ret;
  int err;
} wreq_t;

/* n blocks of size bytes (or objects of pool) into arr; returns how many
 * were made before one failed. */
static size_t bulk_alloc(void **arr, size_t n, size_t size, fw_heap_t *heap, fw_pool_t *pool) {
  for (size_t i = 0; i < n; i++) {
    arr[i] = pool ? fw_pool_alloc(pool) : heap ? fw_heap_malloc(heap, size) : fw_malloc(size);
    if (!arr[i]) return i;
  }
  return n;
}

static void bulk_free(void **arr, size_t n, fw_pool_t *pool) {
  for (size_t i = 0; i < n; i++) {
    if (pool) fw_pool_free(pool, arr[i]);
    else fw_free(arr[i]);
  }
}

static pthread_mutex_t w_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cond = PTHREAD_COND_INITIALIZER;
static wreq_t *w_req;
static bool w_done;
static pthread_t w_thread;

/* Heap calls from a thread that does not own the heap: each is refused
 * with EPERM and leaves the heap and the block as they were. */
static int worker_misuse(fw_heap_t *h, void *p) {
  errno = 0;
  if (fw_heap_malloc(h, 16) || errno != EPERM) return 1;
  errno = 0;
  if (fw_heap_calloc(h, 2, 8) || errno != EPERM) return 2;
  errno = 0;
  if (fw_heap_malloc_aligned(h, 64, 64) || errno != EPERM) return 3;
  errno = 0;
  if (p && (fw_heap_realloc(h, p, 100) || errno != EPERM)) return 4;
  errno = 0;
  if (fw_heap_contains(h, p) || errno != EPERM) return 5;
  fw_heap_stats_t st = {.size = sizeof st};
  errno = 0;
  if (fw_heap_stats(h, &st) != -1 || errno != EPERM) return 6;
  errno = 0;
  fw_heap_collect(h, true);
  if (errno != EPERM) return 7;
  errno = 0;
  fw_heap_destroy(h);
  if (errno != EPERM) return 8;
  errno = 0;
  fw_heap_delete(h);
  if (errno != EPERM) return 9;
  return 0;
}

static void *worker_main(void *arg) {
  (void)arg;
  fw_heap_t *own = NULL;
  for (;;) {
    pthread_mutex_lock(&w_lock);
    while (!w_req) pthread_cond_wait(&w_cond, &w_lock);
    wreq_t *r = w_req;
    pthread_mutex_unlock(&w_lock);
    errno = 0;
    r->ret = NULL;
    switch (r->op) {
    case W_MALLOC: r->ret = fw_malloc(r->a); break;
    case W_CALLOC: r->ret = fw_calloc(1, r->a); break;
    case W_ALIGNED: r->ret = fw_malloc_aligned(r->a, r->b); break;
    case W_OWN_MALLOC:
    case W_OWN_CALLOC:
      if (!own) own = fw_heap_new();
      if (own) r->ret = r->op == W_OWN_MALLOC ? fw_heap_malloc(own, r->a) : fw_heap_calloc(own, r->a, 1);
      break;
    case W_FREE: fw_free(r->p); break;
    case W_FREE_SIZED: fw_free_sized(r->p, r->a); break;
    case W_FREE_ALIGNED_SIZED: fw_free_aligned_sized(r->p, r->b, r->a); break;
    case W_REALLOC: r->ret = fw_realloc(r->p, r->a); break;
    case W_POOL_ALLOC: r->ret = fw_pool_alloc(r->pool); break;
    case W_POOL_FREE: fw_pool_free(r->pool, r->p); break;
    case W_MISUSE: r->a = (size_t)worker_misuse(r->heap, r->p); break;
    case W_COLLECT: fw_collect(r->a != 0); break;
    case W_OWN_DESTROY:
      if (own) fw_heap_destroy(own);
      r->a = own != NULL;
      own = NULL;
      break;
    case W_OWN_COLLECT:
      if (own) fw_heap_collect(own, r->a != 0);
      break;
    case W_BULK_ALLOC: r->b = bulk_alloc(r->arr, r->b, r->a, NULL, r->pool); break;
    case W_BULK_FREE: bulk_free(r->arr, r->b, r->pool); break;
    default: break;
    }
    r->err = errno;
    bool quit = r->op == W_QUIT; /* r belongs to the caller once it is told */
    pthread_mutex_lock(&w_lock);
    w_req = NULL;
    w_done = true;
    pthread_cond_broadcast(&w_cond);
    pthread_mutex_unlock(&w_lock);
    if (quit) return NULL; /* the thread's heap (and own) end here */
  }
}

static void wcall(wreq_t *r) {
  pthread_mutex_lock(&w_lock);
  w_req = r;
  w_done = false;
  pthread_cond_broadcast(&w_cond);
  while (!w_done) pthread_cond_wait(&w_cond, &w_lock);
  pthread_mutex_unlock(&w_lock);
}

static void worker_start(void) {
  if (pthread_create(&w_thread, NULL, worker_main, NULL) != 0) fail("cannot start the worker thread");
}

/* The worker exits (its heaps are abandoned with their live blocks) and a
 * new one takes its place. */
static void worker_restart(void) {
  wreq_t r = {.op = W_QUIT};
  wcall(&r);
  pthread_join(w_thread, NULL);
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && (slots[i].owner == H_WORKER || slots[i].owner == H_WORKER_OWN)) slots[i].owner = H_ORPHAN;
  if (ballast_owner == H_WORKER) ballast_owner = H_ORPHAN;
  worker_start();
}

/* ---- the bulk set ------------------------------------------------------------------------- */
static uint32_t ballast_block_seed(const bblk_t *b) { return ballast_seed ^ (uint32_t)((uintptr_t)b->p >> 3); }

NOCOV static void ballast_fill(const bblk_t *b) {
  uint32_t seed = ballast_block_seed(b);
  size_t n = b->ext, head = n < 48 ? n : 48;
  for (size_t i = 0; i < head; i++) b->p[i] = pat(seed, i);
  for (size_t i = n > 16 ? n - 16 : 0; i < n; i++) b->p[i] = pat(seed, i);
}

NOCOV static void ballast_check(const bblk_t *b, const char *what) {
  uint32_t seed = ballast_block_seed(b);
  size_t n = b->ext, head = n < 48 ? n : 48;
  for (size_t i = 0; i < n; i = i + 1 == head && n > 16 && n - 16 > head ? n - 16 : i + 1)
    if (b->p[i] != pat(seed, i))
      fail("%s: bulk block %p (%zu bytes, owner %s) differs at offset %zu: 0x%02x, expected 0x%02x", what,
           (void *)b->p, b->ext, owner_name(ballast_owner), i, b->p[i], pat(seed, i));
}

static int bblk_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const bblk_t *)a)->p, y = (uintptr_t)((const bblk_t *)b)->p;
  return x < y ? -1 : x > y;
}

/* Frees every step-th bulk block from start on (all of them with step 1),
 * here or on the worker, in address order or the reverse. */
static void ballast_free(size_t step, size_t start, bool remote, bool reverse) {
  fw_pool_t *pool = ballast_owner == H_POOL ? pools[ballast_pool].pool : NULL;
  size_t m = 0, kept = 0;
  for (size_t i = 0; i < nballast; i++) {
    if (i % step == start % step) {
      ballast_check(&ballast[i], "before a bulk free");
      ballast_tmp[m++] = ballast[i].p;
    } else {
      ballast[kept++] = ballast[i];
    }
  }
  if (reverse)
    for (size_t i = 0; i < m / 2; i++) {
      void *t = ballast_tmp[i];
      ballast_tmp[i] = ballast_tmp[m - 1 - i];
      ballast_tmp[m - 1 - i] = t;
    }
  if (remote) {
    wreq_t r = {.op = W_BULK_FREE, .arr = ballast_tmp, .b = m, .pool = pool};
    wcall(&r);
  } else {
    bulk_free(ballast_tmp, m, pool);
  }
  nballast = kept;
  live_bytes -= m * ballast_req;
}

/* Forgets the bulk set (its heap or pool took it along). */
static void ballast_drop(void) {
  live_bytes -= nballast * ballast_req;
  nballast = 0;
}

static void op_ballast_alloc(uint8_t b) {
  if (nballast) ballast_free(1, 0, b & 0x40, b & 0x20);
  unsigned who = b % 8, owner = H_DEFAULT;
  size_t size = draw_size();
  if (size > 16384) size %= 1025;
  size_t n = 1 + u16() % BALLAST_MAX;
  fw_heap_t *heap = NULL;
  fw_pool_t *pool = NULL;
  int k = (b >> 3) % NPOOLS;
  if (who >= 6 && pools[k].pool) {
    pool = pools[k].pool;
    size = pools[k].object_size;
    owner = H_POOL;
  } else if (who == 4) {
    owner = pick_heap(u8());
    heap = heaps[owner];
  } else if (who == 5) {
    owner = H_WORKER;
  }
  size_t room = (LIVE_CAP - live_bytes) / (size ? size : 1);
  if (n > room) n = room;
  if (n == 0) return;
  size_t got;
  errno = 0;
  if (owner == H_WORKER || (pool && (b & 0x80))) {
    wreq_t r = {.op = W_BULK_ALLOC, .arr = ballast_tmp, .a = size, .b = n, .pool = pool};
    wcall(&r);
    got = r.b;
    errno = r.err;
  } else {
    got = bulk_alloc(ballast_tmp, n, size, heap, pool);
  }
  if (got < n) fail("bulk allocation %zu of %zu (%zu bytes, %s) failed (errno %d)", got, n, size, owner_name(owner), errno);
  for (size_t i = 0; i < n; i++) {
    uint8_t *p = ballast_tmp[i];
    size_t ext = pool ? (cautious ? size : pools[k].rounded) : fw_malloc_usable_size(p);
    if (!pool && ext < size) fail("usable size %zu of bulk block %p is below the %zu bytes requested", ext, (void *)p, size);
    if ((uintptr_t)p & (sizeof(void *) - 1)) fail("bulk block %p (%zu bytes) is not pointer-aligned", (void *)p, size);
    if (pool && ((uintptr_t)p & (pools[k].alignment - 1)))
      fail("pool object %p is not aligned to %zu", (void *)p, pools[k].alignment);
    if (pool && pools[k].zero) verify_zero(p, size, "fw_pool_alloc (bulk)");
    ballast[i] = (bblk_t){p, ext};
  }
  qsort(ballast, n, sizeof *ballast, bblk_cmp);
  nballast = n;
  ballast_req = size;
  ballast_owner = (uint8_t)owner;
  ballast_pool = pool ? k : -1;
  ballast_seed = next_seed();
  live_bytes += n * size;
  for (size_t i = 0; i < n; i++) {
    uintptr_t lo = (uintptr_t)ballast[i].p, hi = ballast_end(i);
    if (i > 0 && ballast_end(i - 1) > lo)
      fail("bulk blocks %p and %p (%zu bytes) overlap", (void *)ballast[i - 1].p, (void *)lo, ballast[i - 1].ext);
    size_t j = range_find(lo);
    if ((j < nranges && ranges[j].lo < hi) || (j > 0 && ranges[j - 1].hi > lo))
      fail("bulk block %p (%zu bytes) overlaps the block of a slot", (void *)lo, ballast[i].ext);
    ballast_fill(&ballast[i]);
  }
}

/* ---- frees -------------------------------------------------------------------------------- */
/* A size that fw_free_sized accepts: between the request and the usable size. */
static size_t free_size(const slot_t *s, uint8_t b) {
  size_t span = s->usable - s->req;
  return s->req + (span ? b % (span + 1) : 0);
}

/* how picks the call, sb the size passed to the sized frees. */
static void free_slot(int i, uint8_t how, uint8_t sb, bool remote) {
  slot_t *s = &slots[i];
  check_slot(s, "before free");
  if (s->owner == H_POOL) {
    fw_pool_t *pool = pools[s->pool].pool;
    if (remote) {
      wreq_t r = {.op = W_POOL_FREE, .pool = pool, .p = s->p};
      wcall(&r);
    } else {
      fw_pool_free(pool, s->p);
    }
    drop(i);
    return;
  }
  size_t sz = free_size(s, sb);
  if (remote) {
    wreq_t r = {.op = W_FREE, .p = s->p, .a = sz, .b = s->align};
    if (how & 1) r.op = W_FREE_SIZED;
    if ((how & 2) && s->align) r.op = W_FREE_ALIGNED_SIZED;
    wcall(&r);
    drop(i);
    return;
  }
  switch (how % 6) {
  case 0: fw_free(s->p); break;
  case 1: fw_free_sized(s->p, sz); break;
  case 2:
    if (s->align) fw_free_aligned(s->p, s->align);
    else fw_free(s->p);
    break;
  case 3:
    if (s->align) fw_free_aligned_sized(s->p, s->align, sz);
    else fw_free_sized(s->p, sz);
    break;
  case 4: {
    errno = 0;
    void *q = fw_realloc(s->p, 0);
    if (q) fail("realloc(%p, 0) returned %p, expected NULL (the block freed)", (void *)s->p, q);
    break;
  }
  default: {
    fw_heap_t *h = heaps[(how / 6) % (NHEAPS + 1)];
    if (!h) h = heaps[H_DEFAULT];
    void *q = fw_heap_realloc(h, s->p, 0);
    if (q) fail("fw_heap_realloc(%p, 0) returned %p, expected NULL", (void *)s->p, q);
    break;
  }
  }
  drop(i);
}

static void release_slot(int i) {
  if (slots[i].live) free_slot(i, 0, 0, false);
}

/* ---- reallocation ---------------------------------------------------------------------------- */
/* Checks what a realloc of slot i to n bytes returned (q; the heap the call
 * allocates from when it moves the block is owner_if_moved) and records it. */
static void after_realloc(int i, void *q, size_t n, unsigned owner_if_moved, const char *call) {
  slot_t *s = &slots[i];
  if (!q) {
    if (n == 0) { /* freed */
      drop(i);
      return;
    }
    if (errno != ENOMEM) fail("%s(%p, %zu) failed with errno %d", call, (void *)s->p, n, errno);
    check_slot(s, "after a failed realloc"); /* untouched */
    return;
  }
  slot_t old = *s;
  size_t keep = old.req < n ? old.req : n;
  unsigned owner = q == (void *)old.p ? old.owner : owner_if_moved;
  drop(i);
  verify_prefix(&old, q, old.ext, old.seed, keep, call);
  adopt(i, q, n, 0, owner, -1);
}

/* ---- heaps ----------------------------------------------------------------------------------- */
typedef struct {
  unsigned heap;
  size_t blocks;
  const char *fault;
} visit_ctx_t;

static bool visit_block(const void *block, size_t size, void *arg) {
  visit_ctx_t *c = arg;
  /* cautious mode reports the requested size, 0 for malloc(0): the block
   * still starts at its address */
  uintptr_t end = (uintptr_t)block + (size ? size : 1);
  size_t j = range_find((uintptr_t)block);
  unsigned owner;
  if (j < nranges && ranges[j].lo < end) {
    owner = slots[ranges[j].slot].owner;
  } else {
    j = ballast_find((uintptr_t)block);
    if (j >= nballast || (uintptr_t)ballast[j].p >= end) {
      c->fault = "a block that is not live";
      return false;
    }
    owner = ballast_owner;
  }
  if (owner != c->heap) {
    c->fault = "a block of another heap";
    return false;
  }
  c->blocks++;
  return true;
}

/* After a collect, a heap of the main thread must account exactly for the
 * blocks the shadow gives it. */
static void check_heap(unsigned h) {
  fw_heap_t *heap = heaps[h];
  size_t n = 0, bytes = 0;
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && slots[i].owner == h) {
      n++;
      bytes += slots[i].usable;
      if (!fw_heap_contains(heap, slots[i].p)) fail("heap %u does not contain its block %p", h, (void *)slots[i].p);
      if (fw_heap_usable_size(heap, slots[i].p) != slots[i].usable)
        fail("fw_heap_usable_size(heap %u, %p) = %zu, usable size %zu", h, (void *)slots[i].p,
             fw_heap_usable_size(heap, slots[i].p), slots[i].usable);
    } else if (slots[i].live && h != H_DEFAULT && slots[i].owner != H_POOL) {
      if (fw_heap_contains(heap, slots[i].p))
        fail("heap %u contains %p, a block of %s", h, (void *)slots[i].p, owner_name(slots[i].owner));
      if (fw_heap_usable_size(heap, slots[i].p))
        fail("fw_heap_usable_size(heap %u, %p) is not 0 for a block of %s", h, (void *)slots[i].p,
             owner_name(slots[i].owner));
    }
  /* of the bulk set, a sample: fw_heap_contains walks its page's free list */
  for (size_t i = 0; i < nballast; i += nballast / 8 + 1) {
    const uint8_t *p = ballast[i].p;
    if (ballast_owner == h) {
      if (!fw_heap_contains(heap, p)) fail("heap %u does not contain its bulk block %p", h, (const void *)p);
      if (fw_heap_usable_size(heap, p) != ballast[i].ext)
        fail("fw_heap_usable_size(heap %u, bulk block %p) = %zu, usable size %zu", h, (const void *)p,
             fw_heap_usable_size(heap, p), ballast[i].ext);
    } else if (h != H_DEFAULT && ballast_owner != H_POOL && fw_heap_contains(heap, p)) {
      fail("heap %u contains %p, a bulk block of %s", h, (const void *)p, owner_name(ballast_owner));
    }
  }
  if (ballast_owner == h) {
    n += nballast;
    for (size_t i = 0; i < nballast; i++) bytes += ballast[i].ext;
  }
  if (h == H_DEFAULT) return; /* it also holds pool slabs, and what it adopted */
  fw_heap_stats_t st = {.size = sizeof st};
  REQUIRE(fw_heap_stats(heap, &st) == 0, "fw_heap_stats(heap %u) failed", h);
  REQUIRE(st.blocks_live == n, "heap %u: fw_heap_stats counts %zu live blocks, the shadow %zu", h, st.blocks_live, n);
  REQUIRE(st.bytes_live >= bytes, "heap %u: %zu live bytes, its blocks' usable sizes add up to %zu", h, st.bytes_live,
          bytes);
  REQUIRE(st.bytes_peak >= st.bytes_live, "heap %u: peak %zu below live %zu", h, st.bytes_peak, st.bytes_live);
  REQUIRE(st.bytes_reserved >= st.bytes_live, "heap %u: reserved %zu below live %zu", h, st.bytes_reserved,
          st.bytes_live);
  visit_ctx_t c = {h, 0, NULL};
  fw_heap_visit(heap, visit_block, &c);
  if (c.fault) fail("fw_heap_visit(heap %u) reported %s", h, c.fault);
  REQUIRE(c.blocks == n, "fw_heap_visit(heap %u) reported %zu blocks, the shadow has %zu", h, c.blocks, n);
}

static void heap_gone(unsigned h, bool destroyed) {
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && slots[i].owner == h) {
      if (destroyed) drop(i);
      else slots[i].owner = H_DEFAULT; /* fw_heap_delete hands them to the default heap */
    }
  if (ballast_owner == h) {
    if (destroyed) ballast_drop();
    else ballast_owner = H_DEFAULT;
  }
  heaps[h] = NULL;
}

/* ---- pools ---------------------------------------------------------------------------------- */
static void pool_check_stats(int k) {
  fw_pool_stats_t st = {.size = sizeof st};
  REQUIRE(fw_pool_stats(pools[k].pool, &st) == 0, "fw_pool_stats failed");
  size_t n = 0;
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && slots[i].owner == H_POOL && slots[i].pool == k) n++;
  if (ballast_owner == H_POOL && ballast_pool == k) n += nballast;
  REQUIRE(st.objects_live == n, "pool %d: fw_pool_stats counts %zu live objects, the shadow %zu", k, st.objects_live, n);
  REQUIRE(st.objects_peak >= n, "pool %d: peak %zu below live %zu", k, st.objects_peak, n);
  REQUIRE(st.object_size == pools[k].rounded, "pool %d: object size changed", k);
  REQUIRE(st.bytes_reserved >= n * st.object_size, "pool %d: %zu bytes reserved for %zu objects of %zu", k,
          st.bytes_reserved, n, st.object_size);
}

static void pool_gone(int k) {
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && slots[i].owner == H_POOL && slots[i].pool == k) drop(i);
  if (ballast_owner == H_POOL && ballast_pool == k) ballast_drop();
  pools[k].pool = NULL;
}

static void pool_object(int i, int k, void *p, const char *call) {
  if (!p) fail("%s on pool %d failed (errno %d)", call, k, errno);
  if (pools[k].zero) verify_zero(p, pools[k].object_size, call);
  adopt(i, p, pools[k].object_size, pools[k].alignment, H_POOL, k);
}

/* ---- options --------------------------------------------------------------------------------- */
static const struct {
  const char *name;
  long values[4];
} live_options[] = {
  {"purge_delay", {0, 1, -1, 10}},
  {"segment_cache", {0, 1, 4, 32}},
  {"large_cache", {0, 1, 2, 16}},
  {"reclaim", {0, 1, 1, 0}},
};
#define NOPTIONS (sizeof live_options / sizeof live_options[0])
static long option_start[NOPTIONS]; /* restored after each input */

/* ---- operations ------------------------------------------------------------------------------ */
enum {
  OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOCARRAY, OP_ALIGNED, OP_FREE, OP_USABLE,
  OP_HEAP_NEW, OP_HEAP_MALLOC, OP_HEAP_REALLOC, OP_HEAP_DESTROY, OP_HEAP_DELETE, OP_HEAP_COLLECT,
  OP_POOL_NEW, OP_POOL_ALLOC, OP_POOL_FREE, OP_POOL_DESTROY, OP_POOL_STATS,
  OP_COLLECT, OP_STATS, OP_OPTION, OP_REFUSED,
  OP_W_MALLOC, OP_W_FREE, OP_W_REALLOC, OP_W_POOL_ALLOC, OP_W_MISUSE, OP_W_COLLECT, OP_W_OWN, OP_W_RESTART,
  OP_BURST_ALLOC, OP_BURST_FREE, OP_BULK_ALLOC, OP_BULK_FREE,
  OP_COUNT
};

/* How often each operation comes up, out of 256 values of its byte. */
static const uint8_t op_weight[OP_COUNT] = {
  [OP_MALLOC] = 28, [OP_CALLOC] = 10, [OP_REALLOC] = 16, [OP_REALLOCARRAY] = 5, [OP_ALIGNED] = 14,
  [OP_FREE] = 28, [OP_USABLE] = 4,
  [OP_HEAP_NEW] = 4, [OP_HEAP_MALLOC] = 16, [OP_HEAP_REALLOC] = 6, [OP_HEAP_DESTROY] = 3, [OP_HEAP_DELETE] = 2,
  [OP_HEAP_COLLECT] = 5,
  [OP_POOL_NEW] = 3, [OP_POOL_ALLOC] = 12, [OP_POOL_FREE] = 8, [OP_POOL_DESTROY] = 2, [OP_POOL_STATS] = 3,
  [OP_COLLECT] = 3, [OP_STATS] = 2, [OP_OPTION] = 4, [OP_REFUSED] = 4,
  [OP_W_MALLOC] = 10, [OP_W_FREE] = 12, [OP_W_REALLOC] = 5, [OP_W_POOL_ALLOC] = 4, [OP_W_MISUSE] = 2,
  [OP_W_COLLECT] = 2, [OP_W_OWN] = 3, [OP_W_RESTART] = 2,
  [OP_BURST_ALLOC] = 6, [OP_BURST_FREE] = 3, [OP_BULK_ALLOC] = 3, [OP_BULK_FREE] = 4,
};
static uint8_t op_table[256];
static const char *const op_names[OP_COUNT] = {
  "malloc", "calloc", "realloc", "reallocarray", "aligned", "free", "usable",
  "heap_new", "heap_malloc", "heap_realloc", "heap_destroy", "heap_delete", "heap_collect",
  "pool_new", "pool_alloc", "pool_free", "pool_destroy", "pool_stats",
  "collect", "stats", "option", "refused",
  "w_malloc", "w_free", "w_realloc", "w_pool_alloc", "w_misuse", "w_collect", "w_own", "w_restart",
  "burst_alloc", "burst_free", "bulk_alloc", "bulk_free",
};
static bool trace; /* FUZZ_API_TRACE=1: one line per operation on stderr */

static void build_op_table(void) {
  unsigned n = 0;
  for (unsigned op = 0; op < OP_COUNT; op++)
    for (unsigned k = 0; k < op_weight[op] && n < 256; k++) op_table[n++] = (uint8_t)op;
  for (unsigned op = 0; n < 256; op = (op + 1) % OP_COUNT) op_table[n++] = (uint8_t)op;
}

/* Makes room in slot i (frees what is there) and returns it. */
static int take_slot(uint8_t b) {
  int i = b % NSLOTS;
  release_slot(i);
  return i;
}

static void op_malloc(int i) {
  size_t n = draw_size();
  if (!budget(n)) return;
  errno = 0;
  void *p = fw_malloc(n);
  if (!p) fail("fw_malloc(%zu) failed (errno %d)", n, errno);
  adopt(i, p, n, 0, H_DEFAULT, -1);
}

static void op_calloc(int i) {
  /* count and size both vary: the product is what must be cleared */
  size_t n = draw_size();
  size_t count = 1 + u8() % 8;
  size_t size = n / count;
  if (!budget(count * size)) return;
  errno = 0;
  uint8_t *p = fw_calloc(count, size);
  if (!p) fail("fw_calloc(%zu, %zu) failed (errno %d)", count, size, errno);
  verify_zero(p, count * size, "fw_calloc");
  adopt(i, p, count * size, 0, H_DEFAULT, -1);
}

static void op_aligned(int i) {
  size_t n = draw_size(), a = draw_align();
  unsigned v = u8() % 6;
  if (!budget(n)) return;
  void *p = NULL;
  size_t want = a, req = n;
  errno = 0;
  switch (v) {
  case 0: p = fw_malloc_aligned(n, a); break;
  case 1: p = fw_aligned_alloc(a, n); break;
  case 2: {
    if (want < sizeof(void *)) want = sizeof(void *);
    int rc = fw_posix_memalign(&p, want, n);
    if (rc) fail("fw_posix_memalign(%zu, %zu) returned %d", want, n, rc);
    break;
  }
  case 3: { /* memalign rounds an alignment that is no power of two up */
    size_t odd = a > 2 ? a - 1 - u8() % (a / 2 - 1) : a; /* a/2+1 .. a-1 */
    p = fw_memalign(odd, n);
    break;
  }
  case 4:
    want = (size_t)sysconf(_SC_PAGESIZE);
    p = fw_valloc(n);
    break;
  default:
    want = (size_t)sysconf(_SC_PAGESIZE);
    req = n ? (n + want - 1) / want * want : want; /* pvalloc gives whole pages */
    if (!budget(req)) return;
    p = fw_pvalloc(n);
    break;
  }
  if (trace) fprintf(stderr, "fuzz_api:   aligned call %u: %zu bytes at %zu: %p\n", v, n, want, p);
  if (!p) fail("aligned allocation %u of %zu bytes at %zu failed (errno %d)", v, n, want, errno);
  adopt(i, p, req, want, H_DEFAULT, -1);
}

static void op_realloc(int i, bool array) {
  slot_t *s = &slots[i];
  check_slot(s, "before realloc");
  size_t n = draw_size();
  if (n > s->req && !budget(n - s->req)) return;
  errno = 0;
  void *q;
  if (array) {
    size_t count = 1 + u8() % 4, size = n / count;
    n = count * size;
    q = fw_reallocarray(s->p, count, size);
  } else {
    q = fw_realloc(s->p, n);
  }
  after_realloc(i, q, n, H_DEFAULT, array ? "fw_reallocarray" : "fw_realloc");
}

static void op_usable(int i) {
  slot_t *s = &slots[i];
  check_slot(s, "usable size");
  /* the bytes past the request are the caller's too: rewrite them all */
  s->seed = next_seed();
  fill(s->p, s->ext, s->seed);
}

static void op_refused(void) {
  int k = u8() % 12;
  void *p = NULL;
  errno = 0;
  switch (k) {
  case 0: expect_null(fw_malloc(SIZE_MAX), ENOMEM, "fw_malloc(SIZE_MAX)"); break;
  case 1: expect_null(fw_malloc((size_t)PTRDIFF_MAX + 1), ENOMEM, "fw_malloc(PTRDIFF_MAX + 1)"); break;
  case 2: expect_null(fw_calloc(SIZE_MAX / 2 + 1, 2), ENOMEM, "fw_calloc overflowing"); break;
  case 3: expect_null(fw_aligned_alloc(3 + 8 * (u8() % 8), 8), EINVAL, "fw_aligned_alloc(not a power of two)"); break;
  case 4: {
    int rc = fw_posix_memalign(&p, (u8() & 1) ? 24 : sizeof(void *) / 2, 8);
    if (rc != EINVAL || p) fail("fw_posix_memalign with a bad alignment returned %d, %p", rc, p);
    break;
  }
  case 5: expect_null(fw_heap_malloc(NULL, 8), EINVAL, "fw_heap_malloc(NULL)"); break;
  case 6: {
    size_t sizes[] = {0, (256u << 10) + 1, 8, 8};
    size_t aligns[] = {8, 8, 3, (size_t)1 << 17};
    unsigned j = u8() % 4;
    expect_null(fw_pool_new(sizes[j], aligns[j], NULL), EINVAL, "fw_pool_new with bad arguments");
    break;
  }
  case 7: expect_null(fw_malloc_aligned(PTRDIFF_MAX, 4096), ENOMEM, "fw_malloc_aligned(PTRDIFF_MAX)"); break;
  case 8: {
    fw_free(NULL);
    fw_free_sized(NULL, 0);
    REQUIRE(fw_malloc_usable_size(NULL) == 0, "fw_malloc_usable_size(NULL) is not 0");
    REQUIRE(fw_heap_usable_size(heaps[H_DEFAULT], NULL) == 0, "fw_heap_usable_size(NULL) is not 0");
    for (int j = 0; j < NPOOLS; j++)
      if (pools[j].pool) fw_pool_free(pools[j].pool, NULL);
    break;
  }
  case 9:
    REQUIRE(fw_option_get("no_such_option") == -1 && errno == EINVAL, "unknown option not refused");
    errno = 0;
    REQUIRE(fw_option_set("cautious", 1) == -1 && errno == EPERM, "start-up option set while running");
    break;
  case 10: { /* a failed reallocation leaves the block as it was */
    int i = pick_live(u8(), false);
    if (i < 0) break;
    errno = 0;
    if (u8() & 1) expect_null(fw_realloc(slots[i].p, SIZE_MAX - (u8() & 7)), ENOMEM, "fw_realloc(SIZE_MAX)");
    else expect_null(fw_reallocarray(slots[i].p, SIZE_MAX / 3, 4), ENOMEM, "fw_reallocarray overflowing");
    check_slot(&slots[i], "after a refused realloc");
    break;
  }
  default:
    fw_heap_destroy(heaps[H_DEFAULT]); /* the default heap stays */
    REQUIRE(errno == EPERM, "fw_heap_destroy(default heap): errno %d", errno);
    break;
  }
}

static void op_heap_alloc(int i, unsigned h) {
  fw_heap_t *heap = heaps[h];
  size_t n = draw_size();
  unsigned v = u8() % 3;
  size_t a = v == 2 ? draw_align() : 0;
  if (!budget(n)) return;
  errno = 0;
  void *p = v == 0 ? fw_heap_malloc(heap, n) : v == 1 ? fw_heap_calloc(heap, 1, n) : fw_heap_malloc_aligned(heap, n, a);
  if (!p) fail("allocation %u of %zu bytes from heap %u failed (errno %d)", v, n, h, errno);
  if (v == 1) verify_zero(p, n, "fw_heap_calloc");
  adopt(i, p, n, a, h, -1);
  if (fw_heap_usable_size(heap, p) != slots[i].usable) fail("fw_heap_usable_size of a new block of heap %u", h);
}

static void op_pool_new(int k) {
  if (pools[k].pool) {
    pool_check_stats(k);
    fw_pool_destroy(pools[k].pool);
    pool_gone(k);
  }
  uint8_t b = u8();
  size_t size = (b & 3) == 0 ? 1 + u24() % (256u << 10) : (b & 3) == 1 ? 1 + u16() % 4096 : 1 + u8();
  size_t align = (b & 12) == 0 ? (size_t)1 << (u8() % 17) : 0;
  fw_pool_options_t o = {.size = sizeof o};
  o.shards = (b & 16) ? 1u << (u8() % 4) : 0;
  o.cache_limit = (b & 32) ? u8() % 9 : 0; /* tiny caches: batches change hands often */
  o.zero = (b & 64) != 0;
  errno = 0;
  fw_pool_t *pool = fw_pool_new(size, align, (b & 128) ? NULL : &o);
  if (!pool) fail("fw_pool_new(%zu, %zu) failed (errno %d)", size, align, errno);
  fw_pool_stats_t st = {.size = sizeof st};
  REQUIRE(fw_pool_stats(pool, &st) == 0, "fw_pool_stats failed");
  REQUIRE(st.objects_live == 0, "new pool has %zu live objects", st.objects_live);
  size_t eff = align ? align : 0;
  if (!eff) { /* the natural alignment of the size, at most 16 */
    size_t nat = (size + sizeof(void *) - 1) & ~(sizeof(void *) - 1);
    eff = nat & (~nat + 1);
    if (eff > 16) eff = 16;
  }
  if (eff < sizeof(void *)) eff = sizeof(void *);
  REQUIRE(st.object_size >= size && st.object_size % eff == 0, "pool object size %zu for %zu bytes aligned to %zu",
          st.object_size, size, eff);
  pools[k] = (pool_rec_t){pool, size, st.object_size, eff, (b & 128) ? false : o.zero};
}

/* Operations that free whole groups (heaps, pools, a thread) are followed by
 * a check of everything that should have survived. */
static void run_op(void) {
  uint8_t op = op_table[u8()];
  uint8_t b = u8();
  if (trace)
    fprintf(stderr, "fuzz_api: %zu: %s %u (%zu live, %zu bytes)\n", op_index, op_names[op], b, nranges, live_bytes);
  switch (op) {
  case OP_MALLOC: {
    op_malloc(take_slot(b));
    break;
  }
  case OP_CALLOC: op_calloc(take_slot(b)); break;
  case OP_REALLOC:
  case OP_REALLOCARRAY: {
    if (!slots[b].live) { /* realloc(NULL, n) is malloc */
      size_t n = draw_size();
      if (!budget(n)) break;
      errno = 0;
      void *p = op == OP_REALLOC ? fw_realloc(NULL, n) : fw_reallocarray(NULL, 1, n);
      if (!p) fail("realloc(NULL, %zu) failed (errno %d)", n, errno);
      adopt(b, p, n, 0, H_DEFAULT, -1);
      break;
    }
    if (slots[b].owner == H_POOL) break;
    op_realloc(b, op == OP_REALLOCARRAY);
    break;
  }
  case OP_ALIGNED: op_aligned(take_slot(b)); break;
  case OP_FREE:
    if (slots[b].live) {
      uint8_t how = u8();
      free_slot(b, how, u8(), false);
    }
    break;
  case OP_USABLE:
    if (slots[b].live && slots[b].owner != H_POOL) op_usable(b);
    break;
  case OP_HEAP_NEW: {
    unsigned h = 1 + b % NHEAPS;
    if (heaps[h]) break;
    heaps[h] = fw_heap_new();
    if (!heaps[h]) fail("fw_heap_new failed (errno %d)", errno);
    break;
  }
  case OP_HEAP_MALLOC: {
    unsigned h = pick_heap(u8());
    op_heap_alloc(take_slot(b), h);
    break;
  }
  case OP_HEAP_REALLOC: {
    unsigned h = pick_heap(u8());
    if (!slots[b].live || slots[b].owner == H_POOL) break;
    check_slot(&slots[b], "before fw_heap_realloc");
    size_t n = draw_size();
    if (n > slots[b].req && !budget(n - slots[b].req)) break;
    errno = 0;
    after_realloc(b, fw_heap_realloc(heaps[h], slots[b].p, n), n, h, "fw_heap_realloc");
    break;
  }
  case OP_HEAP_DESTROY:
  case OP_HEAP_DELETE: {
    unsigned h = 1 + b % NHEAPS;
    if (!heaps[h]) break;
    fw_heap_collect(heaps[h], false);
    check_heap(h);
    if (op == OP_HEAP_DESTROY) fw_heap_destroy(heaps[h]);
    else fw_heap_delete(heaps[h]);
    heap_gone(h, op == OP_HEAP_DESTROY);
    check_all("after a heap went");
    if (op == OP_HEAP_DELETE) check_heap(H_DEFAULT);
    break;
  }
  case OP_HEAP_COLLECT: {
    unsigned h = pick_heap(b);
    fw_heap_collect(heaps[h], u8() & 1);
    check_heap(h);
    break;
  }
  case OP_POOL_NEW: op_pool_new(b % NPOOLS); break;
  case OP_POOL_ALLOC:
  case OP_W_POOL_ALLOC: {
    int k = u8() % NPOOLS;
    if (!pools[k].pool) break;
    int i = take_slot(b);
    if (!budget(pools[k].object_size)) break;
    if (op == OP_POOL_ALLOC) {
      errno = 0;
      pool_object(i, k, fw_pool_alloc(pools[k].pool), "fw_pool_alloc");
    } else {
      wreq_t r = {.op = W_POOL_ALLOC, .pool = pools[k].pool};
      wcall(&r);
      errno = r.err;
      pool_object(i, k, r.ret, "fw_pool_alloc (worker)");
    }
    break;
  }
  case OP_POOL_FREE: {
    int i = pick_live(b, true);
    if (i >= 0) free_slot(i, 0, 0, false);
    break;
  }
  case OP_POOL_DESTROY: {
    int k = b % NPOOLS;
    if (!pools[k].pool) break;
    pool_check_stats(k);
    fw_pool_destroy(pools[k].pool);
    pool_gone(k);
    check_all("after fw_pool_destroy");
    break;
  }
  case OP_POOL_STATS: {
    int k = b % NPOOLS;
    if (pools[k].pool) pool_check_stats(k);
    break;
  }
  case OP_COLLECT:
    fw_collect(b & 1);
    check_all("after fw_collect");
    break;
  case OP_STATS: {
    fw_stats_t st = {.size = sizeof st};
    REQUIRE(fw_stats_get(&st) == 0, "fw_stats_get failed");
    REQUIRE(st.version == FREEWAY_VERSION, "fw_stats_get: version %zu", st.version);
    REQUIRE(st.bytes_committed <= st.bytes_reserved || st.huge_allocs, "committed %zu above reserved %zu",
            st.bytes_committed, st.bytes_reserved);
    REQUIRE(st.heaps >= 1 && st.threads >= 1, "fw_stats_get: %zu heaps, %zu threads", st.heaps, st.threads);
    if ((b & 7) == 0 && devnull >= 0) fw_stats_print(devnull);
    break;
  }
  case OP_OPTION: {
    unsigned k = b % NOPTIONS;
    long v = live_options[k].values[u8() % 4];
    REQUIRE(fw_option_set(live_options[k].name, v) == 0, "fw_option_set(%s, %ld) failed", live_options[k].name, v);
    REQUIRE(fw_option_get(live_options[k].name) == v, "fw_option_get(%s) is not %ld", live_options[k].name, v);
    break;
  }
  case OP_REFUSED: op_refused(); break;
  case OP_W_MALLOC: {
    int i = take_slot(b);
    uint8_t v = u8();
    size_t n = draw_size();
    wreq_t r = {.op = v % 5 == 0 ? W_CALLOC : v % 5 == 1 ? W_ALIGNED : v % 5 == 2 ? W_OWN_MALLOC
                  : v % 5 == 3 ? W_OWN_CALLOC : W_MALLOC, .a = n};
    if (r.op == W_ALIGNED) r.b = draw_align();
    if (!budget(n)) break;
    wcall(&r);
    if (!r.ret) fail("worker allocation %d of %zu bytes failed (errno %d)", r.op, n, r.err);
    if (r.op == W_CALLOC || r.op == W_OWN_CALLOC) verify_zero(r.ret, n, "fw_calloc (worker)");
    adopt(i, r.ret, n, r.op == W_ALIGNED ? r.b : 0,
          r.op == W_OWN_MALLOC || r.op == W_OWN_CALLOC ? H_WORKER_OWN : H_WORKER, -1);
    break;
  }
  case OP_W_FREE:
    if (slots[b].live) {
      uint8_t how = u8();
      free_slot(b, how, u8(), true);
    }
    break;
  case OP_W_REALLOC: {
    if (!slots[b].live || slots[b].owner == H_POOL) break;
    check_slot(&slots[b], "before realloc (worker)");
    size_t n = draw_size();
    if (n > slots[b].req && !budget(n - slots[b].req)) break;
    wreq_t r = {.op = W_REALLOC, .p = slots[b].p, .a = n};
    wcall(&r);
    errno = r.err;
    after_realloc(b, r.ret, n, H_WORKER, "fw_realloc (worker)");
    break;
  }
  case OP_W_MISUSE: {
    if (cautious) break; /* where it aborts on purpose */
    unsigned h = pick_heap(b);
    int i = pick_live(u8(), false);
    wreq_t r = {.op = W_MISUSE, .heap = heaps[h], .p = i >= 0 ? slots[i].p : NULL};
    wcall(&r);
    if (r.a) fail("heap %u: call %zu from another thread was not refused with EPERM", h, r.a);
    if (i >= 0) check_slot(&slots[i], "after refused heap calls");
    if (h != H_DEFAULT) {
      fw_heap_collect(heaps[h], false);
      check_heap(h);
    }
    break;
  }
  case OP_W_COLLECT: {
    wreq_t r = {.op = W_COLLECT, .a = b & 1};
    wcall(&r);
    check_all("after fw_collect (worker)");
    break;
  }
  case OP_W_OWN: {
    wreq_t r = {.op = (b & 1) ? W_OWN_DESTROY : W_OWN_COLLECT, .a = (b >> 1) & 1};
    wcall(&r);
    if (r.op == W_OWN_DESTROY && r.a) {
      for (int i = 0; i < NSLOTS; i++)
        if (slots[i].live && slots[i].owner == H_WORKER_OWN) drop(i);
      check_all("after the worker's fw_heap_destroy");
    }
    break;
  }
  case OP_W_RESTART:
    worker_restart();
    check_all("after the worker exited");
    break;
  case OP_BURST_ALLOC: { /* many blocks of one size: pages fill up */
    size_t n = draw_size();
    unsigned h = pick_heap(u8());
    int count = 1 + u8() % 64;
    for (int k = 0; k < count; k++) {
      int i = pick_free((uint8_t)(b + k));
      if (i < 0 || !budget(n)) break;
      errno = 0;
      void *p = h == H_DEFAULT ? fw_malloc(n) : fw_heap_malloc(heaps[h], n);
      if (!p) fail("burst: allocation of %zu bytes failed (errno %d)", n, errno);
      adopt(i, p, n, 0, h, -1);
    }
    break;
  }
  case OP_BULK_ALLOC: op_ballast_alloc(b); break;
  case OP_BULK_FREE: { /* every step-th block: pages go partly free */
    uint8_t how = u8();
    if (nballast) ballast_free(1 + b % 8, b >> 3, how & 1, how & 2);
    break;
  }
  default: { /* OP_BURST_FREE: a run of slots, here or on the worker */
    int count = 1 + u8() % 64;
    uint8_t how = u8();
    for (int k = 0; k < count; k++) {
      int i = (how & 0x80) ? (b + k) % NSLOTS : (b - k + NSLOTS) % NSLOTS;
      if (slots[i].live) free_slot(i, how, (uint8_t)(how + k), (how & 0x40) != 0);
    }
    break;
  }
  }
}

/* Everything the input made goes, so that each input starts from an empty
 * shadow (the allocator keeps its caches, as a long-running program would). */
static void cleanup(void) {
  check_all("at the end");
  if (nballast) ballast_free(1, 0, false, false);
  for (unsigned h = 1; h <= NHEAPS; h++)
    if (heaps[h]) {
      fw_heap_collect(heaps[h], false);
      check_heap(h);
    }
  for (int i = 0; i < NSLOTS; i++)
    if (slots[i].live && slots[i].owner != H_POOL) free_slot(i, (uint8_t)i, (uint8_t)i, false);
  for (unsigned h = 1; h <= NHEAPS; h++)
    if (heaps[h]) {
      fw_heap_destroy(heaps[h]);
      heap_gone(h, true);
    }
  for (int k = 0; k < NPOOLS; k++)
    if (pools[k].pool) {
      pool_check_stats(k);
      fw_pool_destroy(pools[k].pool);
      pool_gone(k);
    }
  REQUIRE(nranges == 0 && live_bytes == 0, "shadow not empty after clean-up: %zu ranges, %zu bytes", nranges, live_bytes);
  for (unsigned k = 0; k < NOPTIONS; k++) fw_option_set(live_options[k].name, option_start[k]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
#ifdef FUZZ_CAUTIOUS
  /* Options are read when the library starts, before this runs: start
   * again with cautious mode in the environment. */
  if (fw_option_get("cautious") != 1) {
    setenv("FREEWAY_CAUTIOUS", "1", 1);
    execv("/proc/self/exe", *argv);
    perror("fuzz_api_cautious: execv /proc/self/exe");
    exit(1);
  }
#else
  (void)argv;
#endif
  cautious = fw_option_get("cautious") == 1;
  trace = getenv("FUZZ_API_TRACE") && atoi(getenv("FUZZ_API_TRACE")) > 0;
  devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  build_op_table();
  for (unsigned k = 0; k < NOPTIONS; k++) option_start[k] = fw_option_get(live_options[k].name);
  heaps[H_DEFAULT] = fw_heap_get_default();
  if (!heaps[H_DEFAULT]) {
    void *p = fw_malloc(1); /* the thread's heap is made by its first allocation */
    fw_free(p);
    heaps[H_DEFAULT] = fw_heap_get_default();
  }
  if (!heaps[H_DEFAULT]) fail("no default heap");
  worker_start();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  in_p = data;
  in_n = size;
  for (op_index = 0; in_n > 0 && op_index < MAX_OPS; op_index++) {
    run_op();
    if (op_index % CHECK_EVERY == CHECK_EVERY - 1) check_all("periodic check");
  }
  cleanup();
  return 0;
}
