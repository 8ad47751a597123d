/* Object pools: fixed-size objects carved from slabs and recycled through
 * per-thread caches and a few locked shards. The user's guide is docs/pools.md.
 *
 * Layout of a pool
 * ----------------
 * Memory comes in slabs obtained from the allocator itself with
 * fw_malloc_aligned(slab_size, 64 KiB): whole 64 KiB chunks with room for at
 * least 8 objects, from 64 KiB to 1 MiB. No more alignment than 64 KiB is
 * asked for, so that slabs share the allocator's medium pages and spans: a
 * slab of 128 KiB or more aligned to its own size would get a 4 MiB segment
 * of its own. Objects are carved from the current slab by bumping a pointer,
 * a batch at a time, and are never returned to a slab individually: a free
 * object lives on a free list whose link is the object's first word.
 * fw_pool_destroy releases every slab at once (each slab has a descriptor on
 * the pool's list, allocated apart from it).
 *
 * The slab map
 * ------------
 * The pool an address belongs to is found in a process-wide table indexed by
 * 64 KiB chunk: a chunk is either wholly one slab's or no slab's, and its
 * entry holds the slab's pool (64-byte aligned) with the chunk's index in the
 * slab in the low bits, or 0. Two levels, a leaf per 4 GiB of address space;
 * a leaf is mapped when the first slab lands in its range and stays. A top
 * slot without a leaf points at a shared leaf of zeros, so a lookup is two
 * loads and never faults, whatever the pointer.
 *
 * Misuse
 * ------
 * Every fw_pool_free checks that its pointer is in one of the pool's slabs:
 * in the chunk the thread's entry last found to be the pool's (see
 * fw_pool_free), or else in the map. A chunk of another pool's slab is
 * reported as an object freed into the wrong pool, a chunk of no slab as a
 * pointer freeway did not hand out, and an object freed twice in a row by
 * one thread (it is then the head of the thread's list) as a double free.
 * In cautious mode every free takes the slow path, and each slab ends with a
 * bitmap of its live objects: a free must be at an object boundary (else it
 * is inside a block) whose bit is set (else a double free). An allocation
 * sets the bit and checks the link it leaves at the head of the list, so a
 * freed object whose link was overwritten is reported before anyone
 * follows the link.
 *
 * The three tiers, fastest first
 * ------------------------------
 * 1. Thread cache. Each thread has an array of pool_cache_t indexed by pool
 *    id (ids are recycled; the 64-bit generation stored in the entry tells a
 *    live pool from a destroyed one that had the same id). An entry holds a
 *    current list of at most `batch` objects plus one spare batch, so it keeps
 *    about cache_limit objects. Alloc pops and free pushes the current list:
 *    no atomics, no locks.
 * 2. Shards. When the current list runs dry (or overflows while a spare is
 *    already held), the thread exchanges a whole batch with a shard: a small
 *    spin-locked stack of batch descriptors {head, count}. Pushing or popping
 *    a batch is O(1) under the lock; the lock is taken once per `batch`
 *    objects. A thread's home shard is fixed at its first pool use
 *    (round-robin), and a thread that finds its home shard empty looks at the
 *    others before growing the pool, so memory freed by one thread is reused
 *    by another.
 * 3. Slabs. Only when every shard is empty is a batch carved from the
 *    current slab, or a new slab obtained (under the pool's grow lock).
 *
 * Statistics
 * ----------
 * The fast paths keep no counters beyond the length of the current list.
 * Between two folds, a thread's allocations minus its frees equal a base
 * (set at the fold) minus the objects it now caches, and their highest value
 * follows from the shortest the current list has been (one compare in
 * alloc). A fold, at every batch exchange and at thread exit, adds the
 * interval's net count to the pool's atomic `live` and raises `peak` to
 * live_before + the interval's highest. fw_pool_stats adds the current
 * interval of every thread. So objects_live is exact whenever no thread is
 * inside a pool call; objects_peak is exact when one thread at a time uses
 * the pool, and otherwise an estimate at batch granularity (never below any
 * objects_live that fw_pool_stats reported).
 *
 * Thread exit and destruction
 * ---------------------------
 * A thread-exit hook (os.h) flushes the exiting thread's entries back into
 * their pools' shards, checking under the registry lock that each pool is
 * still the one the entry was made for. fw_pool_destroy unregisters the pool
 * under the same lock before releasing its memory, so an exiting thread never
 * touches a destroyed pool, and clears the chunk of every thread's entry for
 * it; objects still cached by other threads are simply forgotten (their
 * entries fail the generation check).
 *
 * Locks, outermost first: pool_reg_lock, a pool's grow_lock, a shard's lock.
 * None of them is held while calling into the allocator, so the allocator's
 * own fork handlers and locks never nest inside ours.
 */
#include "freeway.h"
#include "os.h"
#include "stats.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define POOL_LINE 64
#define POOL_CHUNK_SHIFT 16 /* slabs are made of 64 KiB chunks, 64 KiB aligned */
#define POOL_CHUNK ((size_t)1 << POOL_CHUNK_SHIFT)
#define POOL_SLAB_MIN POOL_CHUNK
#define POOL_SLAB_MAX ((size_t)1 << 20)
#define POOL_SLAB_TARGET 8 /* objects a slab should hold at least */
#define POOL_MAX_OBJECT ((size_t)256 << 10)
#define POOL_MAX_ALIGN POOL_CHUNK
#define POOL_MAX_SHARDS 256u
#define POOL_MAX_CACHE 65536u
#define POOL_CACHE_BYTES ((size_t)256 << 10) /* default cache budget per thread and pool */
#define POOL_CACHE_DEFAULT_MAX 128u
#define POOL_CACHE_DEFAULT_MIN 4u
#define POOL_SHARD_INITIAL 16 /* batch descriptors a shard starts with */

#define pool_likely(x) __builtin_expect(!!(x), 1)
#define pool_unlikely(x) __builtin_expect(!!(x), 0)
#define POOL_COLD __attribute__((noinline, cold))

#define load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

/* ---- Spin lock --------------------------------------------------------- */
/* Critical sections are a few stores, so spin briefly and then yield: with
 * more threads than CPUs the holder may have been preempted. */
typedef struct pool_lock_s {
  atomic_int held;
} pool_lock_t;

static inline void pool_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static POOL_COLD void pool_lock_slow(pool_lock_t *l) {
  for (unsigned spins = 0;; spins++) {
    if (!load_relaxed(&l->held) && !atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
      return;
    if (spins < 64)
      pool_cpu_relax();
    else
      fw_os_yield();
  }
}

static inline void pool_lock(pool_lock_t *l) {
  if (pool_likely(!atomic_exchange_explicit(&l->held, 1, memory_order_acquire)))
    return;
  pool_lock_slow(l);
}

static inline void pool_unlock(pool_lock_t *l) {
  atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- Types ------------------------------------------------------------- */
typedef struct pool_slab_s {
  struct pool_slab_s *next; /* the pool's slab list, guarded by grow_lock */
  char *base;
} pool_slab_t;

typedef struct pool_batch_s {
  void *head; /* NULL-terminated list linked through each object's first word */
  size_t count;
} pool_batch_t;

typedef struct pool_shard_s {
  _Alignas(POOL_LINE) pool_lock_t lock;
  atomic_size_t nbatches; /* written under lock; read without it as a hint */
  size_t cap;             /* guarded by lock */
  pool_batch_t *batches;  /* guarded by lock; a stack, top at nbatches - 1 */
} pool_shard_t;

struct fw_pool_s {
  /* Read-only after creation; the fast paths read the first line only. */
  uint32_t id;       /* index into every thread's cache array */
  uint32_t shard_mask;
  uint64_t gen;      /* unique for the life of the process, never 0 */
  size_t free_limit; /* batch, or 0 in cautious mode so that every free is checked */
  size_t batch;      /* objects in a full batch: half the cache limit */
  size_t object_size;
  bool hand_out_slow;  /* zero or cautious: allocations go through pool_hand_out_slow */
  bool zero;
  bool cautious;       /* FREEWAY_CAUTIOUS=1 when the pool was made */
  size_t alignment;
  size_t slab_size;
  size_t slab_objects;
  size_t bitmap_offset; /* cautious mode: of the slab's bitmap of live objects */
  size_t cache_limit;

  /* Growth, guarded by grow_lock. */
  _Alignas(POOL_LINE) pool_lock_t grow_lock;
  char *bump;          /* next object to carve from the current slab */
  size_t bump_left;    /* objects left in the current slab */
  pool_slab_t *slabs;
  atomic_size_t nslabs; /* written under grow_lock, read by stats */

  /* Folded statistics, updated once per batch. */
  _Alignas(POOL_LINE) atomic_intptr_t live;
  atomic_size_t peak;

  pool_shard_t shards[]; /* shard_mask + 1 of them */
};

/* A thread's cache for one pool. Only the owner thread writes it; the
 * atomic fields are also read by fw_pool_stats (relaxed loads and stores, so
 * plain moves). Between two folds (see pool_cache_fold), the objects this
 * thread allocated minus those it freed are base - count - spare_count, and
 * their highest value is base - count_min - spare_count. */
typedef struct pool_cache_s {
  void *head;                 /* current list */
  atomic_size_t count;        /* objects on head */
  atomic_size_t count_min;    /* lowest count since the last fold */
  atomic_uint_least64_t gen;  /* pool generation the entry belongs to; 0: unused */
  void *spare;                /* a batch held in reserve */
  atomic_size_t spare_count;  /* objects on spare */
  atomic_size_t base;
  uintptr_t chunk;            /* address >> POOL_CHUNK_SHIFT of a chunk of the pool's
                                 slabs, or UINTPTR_MAX (see fw_pool_free) */
} pool_cache_t;

/* A thread's registration, for fw_pool_stats, fork and thread exit. */
typedef struct pool_thread_s {
  uint32_t cap;          /* copies of pool_tls's, written by the owner under pool_reg_lock */
  pool_cache_t *caches;
  struct pool_thread_s *next, *prev; /* pool_threads list, guarded by pool_reg_lock */
} pool_thread_t;

/* The calling thread's view, read by every fast path. */
typedef struct pool_tls_s {
  uint32_t cap;          /* entries in caches; 0 until the thread first uses a pool */
  uint32_t shard;        /* home shard, before masking */
  pool_cache_t *caches;  /* indexed by pool id */
  pool_thread_t *thread; /* NULL until registered */
  bool dead;             /* past the exit flush: work on the shards directly */
} pool_tls_t;

/* ---- Process-wide state ------------------------------------------------ */
static fw_lock_t pool_reg_lock = FW_LOCK_INIT;
static fw_pool_t **pool_reg;      /* live pools by id; guarded by pool_reg_lock */
static uint32_t pool_reg_cap;     /* guarded by pool_reg_lock */
static uint32_t pool_reg_hint;    /* no free id below it; guarded by pool_reg_lock */
static uint64_t pool_reg_gen;     /* last generation handed out; guarded by pool_reg_lock */
static pool_thread_t *pool_threads; /* threads with a cache array; guarded by pool_reg_lock */
static atomic_uint pool_thread_seq;

static _Atomic(int) pool_once; /* 0 not yet, 1 under way, 2 done */
static fw_os_tkey_t pool_key;
static bool pool_key_ok;

/* A thread that never used a pool has an empty cache array (cap 0), so its
 * first call falls into the slow path by the same compare that catches a pool
 * id beyond the array. */
static FW_THREAD_LOCAL pool_tls_t pool_tls;

/* ---- Small helpers ----------------------------------------------------- */
static inline void **pool_link(void *p) { return (void **)p; }

static inline size_t pool_round_up(size_t n, size_t align) {
  return (n + align - 1) & ~(align - 1);
}

static inline bool pool_is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

static size_t pool_pow2_at_least(size_t n) {
  size_t p = 1;
  while (p < n)
    p <<= 1;
  return p;
}

/* ---- The slab map ------------------------------------------------------ */
#define POOL_LEAF_BITS 16
#define POOL_LEAF_ENTRIES ((size_t)1 << POOL_LEAF_BITS)
#if UINTPTR_MAX > 0xffffffffu
#define POOL_ADDR_BITS 48
#else
#define POOL_ADDR_BITS 32
#endif
#define POOL_TOP_SHIFT (POOL_CHUNK_SHIFT + POOL_LEAF_BITS)
#define POOL_TOP_ENTRIES ((size_t)1 << (POOL_ADDR_BITS - POOL_TOP_SHIFT))

_Static_assert(POOL_SLAB_MAX / POOL_CHUNK <= POOL_LINE, "a chunk's index in its slab fits below the pool's alignment");

/* Never written: every top slot starts out pointing here. */
static _Atomic(uintptr_t) pool_map_zeros[POOL_LEAF_ENTRIES];
/* Each slot holds its leaf's distance from pool_map_zeros in bytes, so that
 * the zero-filled array means "no leaf anywhere" without being written. */
static _Atomic(uintptr_t) pool_map_top[POOL_TOP_ENTRIES];

/* The entry of a's chunk: (uintptr_t)pool | index of the chunk in its slab,
 * or 0 for memory of no slab (and for addresses beyond the map). */
static inline uintptr_t pool_map_get(uintptr_t a) {
  uint64_t top = (uint64_t)a >> POOL_TOP_SHIFT;
  if (top >= POOL_TOP_ENTRIES)
    return 0;
  uintptr_t leaf = (uintptr_t)pool_map_zeros + load_relaxed(&pool_map_top[top]);
  return load_relaxed(&((_Atomic(uintptr_t) *)leaf)[(a >> POOL_CHUNK_SHIFT) & (POOL_LEAF_ENTRIES - 1)]);
}

static inline fw_pool_t *pool_entry_pool(uintptr_t e) {
  return (fw_pool_t *)(e & ~(uintptr_t)(POOL_LINE - 1));
}

/* The leaf holding a's entry, mapped if create; NULL if there is none. */
static _Atomic(uintptr_t) *pool_map_leaf(uintptr_t a, bool create) {
  _Atomic(uintptr_t) *slot = &pool_map_top[(uint64_t)a >> POOL_TOP_SHIFT];
  uintptr_t off = atomic_load_explicit(slot, memory_order_acquire);
  if (off == 0) {
    if (!create)
      return NULL;
    size_t bytes = POOL_LEAF_ENTRIES * sizeof(uintptr_t);
    void *leaf = fw_os_map(bytes, 0, 0);
    if (leaf == NULL)
      return NULL;
    uintptr_t mine = (uintptr_t)leaf - (uintptr_t)pool_map_zeros;
    if (atomic_compare_exchange_strong_explicit(slot, &off, mine, memory_order_acq_rel, memory_order_acquire))
      off = mine;
    else
      fw_os_unmap(leaf, bytes); /* another slab's registration was first */
  }
  return (_Atomic(uintptr_t) *)((uintptr_t)pool_map_zeros + off);
}

/* Maps the leaves a slab's entries will be in. */
static bool pool_map_prepare(const char *base, size_t bytes) {
  uintptr_t a = (uintptr_t)base;
  if ((uint64_t)(a + bytes - 1) >> POOL_TOP_SHIFT >= POOL_TOP_ENTRIES)
    return false;
  for (size_t k = 0; k < bytes >> POOL_CHUNK_SHIFT; k++, a += POOL_CHUNK)
    if (pool_map_leaf(a, true) == NULL)
      return false;
  return true;
}

/* Enters the chunks of a prepared slab as pool's, or (pool NULL) removes them. */
static void pool_map_set(const char *base, size_t bytes, const fw_pool_t *pool) {
  uintptr_t a = (uintptr_t)base;
  for (uintptr_t k = 0; k < bytes >> POOL_CHUNK_SHIFT; k++, a += POOL_CHUNK) {
    _Atomic(uintptr_t) *leaf = pool_map_leaf(a, false);
    if (leaf != NULL)
      store_relaxed(&leaf[(a >> POOL_CHUNK_SHIFT) & (POOL_LEAF_ENTRIES - 1)], pool ? (uintptr_t)pool | k : 0);
  }
}

/* ---- Misuse reports ---------------------------------------------------- */
/* One message, written at once, then abort. owner: the pool the object
 * belongs to, when that is not the pool it was freed into. */
static POOL_COLD __attribute__((noreturn)) void pool_report(const fw_pool_t *pool, const char *what,
                                                            const void *p, const fw_pool_t *owner) {
  char msg[320];
  int n = snprintf(msg, sizeof msg, "freeway: %s%s: address %p, pool %p (%zu-byte objects)",
                   pool->cautious ? "cautious mode: " : "", what, p, (const void *)pool, pool->object_size);
  if (n > 0 && owner != NULL && (size_t)n < sizeof msg)
    n += snprintf(msg + n, sizeof msg - (size_t)n, ", object of pool %p (%zu-byte objects)",
                  (const void *)owner, owner->object_size);
  if (n > 0 && (size_t)n < sizeof msg)
    n += snprintf(msg + n, sizeof msg - (size_t)n, "%s", pool->cautious ? "\nfreeway: aborting\n" : "; aborting\n");
  if (n > 0) {
    fw_os_write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
  }
  fw_os_abort();
}

/* Cautious mode: the slab's bitmap word and bit of the object at p, whose
 * map entry is e (p's pool's); false if p is not the start of an object. */
static bool pool_object_bit(const fw_pool_t *pool, const void *p, uintptr_t e, atomic_uintptr_t **word,
                            uintptr_t *bit) {
  uintptr_t a = (uintptr_t)p;
  char *base = (char *)((a & ~(uintptr_t)(POOL_CHUNK - 1)) - (e & (POOL_LINE - 1)) * POOL_CHUNK);
  size_t off = (size_t)(a - (uintptr_t)base), i = off / pool->object_size;
  if (off % pool->object_size != 0 || i >= pool->slab_objects)
    return false;
  size_t bits = sizeof(uintptr_t) * 8;
  *word = (atomic_uintptr_t *)(base + pool->bitmap_offset) + i / bits;
  *bit = (uintptr_t)1 << (i % bits);
  return true;
}

/* Every free: p must be in a slab of this pool; in cautious mode, also an
 * object that is live (its bit is cleared here). */
static void pool_check_free(const fw_pool_t *pool, const void *p) {
  uintptr_t e = pool_map_get((uintptr_t)p);
  fw_pool_t *owner = pool_entry_pool(e);
  if (pool_unlikely(owner != pool)) {
    if (owner == NULL)
      pool_report(pool, "free of a pointer freeway did not hand out", p, NULL);
    pool_report(pool, "object freed into the wrong pool", p, owner);
  }
  if (!pool->cautious)
    return;
  atomic_uintptr_t *word;
  uintptr_t bit;
  if (!pool_object_bit(pool, p, e, &word, &bit)) {
    size_t off = (size_t)((uintptr_t)p & (POOL_CHUNK - 1)) + (e & (POOL_LINE - 1)) * POOL_CHUNK;
    pool_report(pool,
                off < pool->slab_objects * pool->object_size ? "free of a pointer inside a block"
                                                             : "free of a pointer freeway did not hand out",
                p, NULL);
  }
  if (!(atomic_fetch_and_explicit(word, ~bit, memory_order_relaxed) & bit))
    pool_report(pool, "double free", p, NULL);
}

/* Cautious mode: p, about to be handed out, must be a free object of this
 * pool (it becomes live), and next, the link it leaves at the head of a
 * list, NULL or another free object: else a freed object's link was
 * overwritten, and is caught before anyone follows it. */
static void pool_check_hand_out(const fw_pool_t *pool, void *p, const void *next) {
  atomic_uintptr_t *word;
  uintptr_t bit;
  uintptr_t e = pool_map_get((uintptr_t)p);
  if (pool_entry_pool(e) != pool || !pool_object_bit(pool, p, e, &word, &bit) ||
      (atomic_fetch_or_explicit(word, bit, memory_order_relaxed) & bit))
    pool_report(pool, "write to a freed block (its object handed out twice)", p, NULL);
  if (next == NULL)
    return;
  e = pool_map_get((uintptr_t)next);
  if (pool_entry_pool(e) != pool || !pool_object_bit(pool, next, e, &word, &bit) ||
      (atomic_load_explicit(word, memory_order_relaxed) & bit))
    pool_report(pool, "write to a freed block (its link overwritten)", p, NULL);
}

static void pool_peak_raise(fw_pool_t *pool, intptr_t v) {
  if (v <= 0)
    return;
  size_t cur = load_relaxed(&pool->peak);
  while ((size_t)v > cur &&
         !atomic_compare_exchange_weak_explicit(&pool->peak, &cur, (size_t)v,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Starts a new counting interval after the lists changed other than by an
 * allocation or a free. Owner thread only. */
static void pool_cache_rebase(pool_cache_t *c) {
  size_t count = load_relaxed(&c->count);
  store_relaxed(&c->base, count + load_relaxed(&c->spare_count));
  store_relaxed(&c->count_min, count);
}

/* The process's ledger (survey.c) shows what pools hold: their slabs'
 * bytes, and of those the bytes of live objects, which move with the
 * pools' folded counts (so, like them, at batch granularity). Unsigned
 * wrap-around makes a fall an add. */
static void pool_count_live(const fw_pool_t *pool, intptr_t objects) {
  fw_stat_add(pool_live_bytes, (size_t)objects * pool->object_size);
}

/* Moves a thread's counts of the current interval into the pool's, before
 * its lists change other than by an allocation or a free. Owner thread only. */
static void pool_cache_fold(fw_pool_t *pool, pool_cache_t *c) {
  intptr_t base = (intptr_t)load_relaxed(&c->base);
  intptr_t spare = (intptr_t)load_relaxed(&c->spare_count);
  intptr_t net = base - spare - (intptr_t)load_relaxed(&c->count);
  intptr_t max = base - spare - (intptr_t)load_relaxed(&c->count_min);
  if (net != 0 || max > 0) {
    pool_count_live(pool, net);
    intptr_t before = atomic_fetch_add_explicit(&pool->live, net, memory_order_relaxed);
    pool_peak_raise(pool, before + max);
  }
  pool_cache_rebase(c);
}

/* ---- Shards ------------------------------------------------------------ */
/* Pushes a batch. With may_grow false (thread exit, under pool_reg_lock) the
 * descriptor array is never reallocated: a full array gets the batch spliced
 * onto its top entry instead. */
static void pool_shard_push(pool_shard_t *s, void *head, size_t count, bool may_grow) {
  pool_batch_t *grown = NULL; /* a larger array obtained outside the lock */
  size_t grown_cap = 0;
  for (;;) {
    pool_lock(&s->lock);
    size_t n = load_relaxed(&s->nbatches);
    if (n == s->cap && grown != NULL && grown_cap > s->cap) {
      pool_batch_t *old = s->batches;
      memcpy(grown, old, n * sizeof *grown);
      s->batches = grown;
      s->cap = grown_cap;
      grown = old; /* freed below, outside the lock */
    }
    if (n < s->cap) {
      s->batches[n].head = head;
      s->batches[n].count = count;
      store_relaxed(&s->nbatches, n + 1);
      pool_unlock(&s->lock);
      break;
    }
    if (!may_grow) {
      /* Full and not growable: splice onto the top batch (O(count), rare). */
      void *tail = head;
      while (*pool_link(tail) != NULL)
        tail = *pool_link(tail);
      *pool_link(tail) = s->batches[n - 1].head;
      s->batches[n - 1].head = head;
      s->batches[n - 1].count += count;
      pool_unlock(&s->lock);
      break;
    }
    size_t want = 2 * s->cap;
    pool_unlock(&s->lock);
    fw_free(grown);
    grown = fw_malloc(want * sizeof *grown);
    grown_cap = want;
    if (grown == NULL)
      may_grow = false;
  }
  fw_free(grown);
}

static bool pool_shard_pop(pool_shard_t *s, pool_batch_t *out) {
  if (load_relaxed(&s->nbatches) == 0)
    return false;
  pool_lock(&s->lock);
  size_t n = load_relaxed(&s->nbatches);
  if (n == 0) {
    pool_unlock(&s->lock);
    return false;
  }
  *out = s->batches[n - 1];
  store_relaxed(&s->nbatches, n - 1);
  pool_unlock(&s->lock);
  return true;
}

/* ---- Slabs ------------------------------------------------------------- */
/* A slab and its descriptor, ready to be entered in the slab map. */
static pool_slab_t *pool_slab_new(fw_pool_t *pool) {
  pool_slab_t *slab = fw_malloc(sizeof *slab);
  if (slab == NULL)
    return NULL;
  slab->base = fw_malloc_aligned(pool->slab_size, POOL_CHUNK);
  if (slab->base == NULL) {
    fw_free(slab);
    return NULL;
  }
  if (pool->cautious) /* no object is live yet */
    memset(slab->base + pool->bitmap_offset, 0, pool->slab_size - pool->bitmap_offset);
  if (!pool_map_prepare(slab->base, pool->slab_size)) {
    fw_free_aligned_sized(slab->base, POOL_CHUNK, pool->slab_size);
    fw_free(slab);
    return NULL;
  }
  fw_stat_add(pool_slab_bytes, pool->slab_size);
  return slab;
}

static void pool_slab_delete(fw_pool_t *pool, pool_slab_t *slab, bool entered) {
  fw_stat_sub(pool_slab_bytes, pool->slab_size);
  if (entered)
    pool_map_set(slab->base, pool->slab_size, NULL);
  fw_free_aligned_sized(slab->base, POOL_CHUNK, pool->slab_size);
  fw_free(slab);
}

/* Carves up to `want` objects from the current slab, taking a new slab when
 * it is used up. The slab is obtained outside the grow lock, and entered in
 * the slab map only when it is the pool's: a chunk, once found in the map,
 * stays the pool's until the pool is destroyed (see fw_pool_free). */
static bool pool_carve(fw_pool_t *pool, size_t want, pool_batch_t *out) {
  pool_slab_t *fresh = NULL;
  char *start;
  size_t n;
  pool_lock(&pool->grow_lock);
  while (pool->bump_left == 0) {
    if (fresh != NULL) {
      pool_map_set(fresh->base, pool->slab_size, pool);
      fresh->next = pool->slabs;
      pool->slabs = fresh;
      store_relaxed(&pool->nslabs, load_relaxed(&pool->nslabs) + 1);
      pool->bump = fresh->base;
      pool->bump_left = pool->slab_objects;
      fresh = NULL;
      break;
    }
    pool_unlock(&pool->grow_lock);
    fresh = pool_slab_new(pool);
    if (fresh == NULL)
      return false;
    pool_lock(&pool->grow_lock);
  }
  n = pool->bump_left < want ? pool->bump_left : want;
  start = pool->bump;
  pool->bump += n * pool->object_size;
  pool->bump_left -= n;
  pool_unlock(&pool->grow_lock);
  if (fresh != NULL) /* another thread added a slab while we obtained ours */
    pool_slab_delete(pool, fresh, false);

  size_t size = pool->object_size;
  char *p = start;
  for (size_t i = 1; i < n; i++, p += size)
    *pool_link(p) = p + size;
  *pool_link(p) = NULL;
  out->head = start;
  out->count = n;
  return true;
}

/* A batch for a thread whose home shard is `home`: the home shard, then the
 * other shards, then fresh objects. */
static bool pool_refill(fw_pool_t *pool, uint32_t home, pool_batch_t *out) {
  uint32_t mask = pool->shard_mask;
  for (uint32_t i = 0; i <= mask; i++)
    if (pool_shard_pop(&pool->shards[(home + i) & mask], out))
      return true;
  return pool_carve(pool, pool->batch, out);
}

/* ---- Thread caches ----------------------------------------------------- */
static void pool_thread_exit(void *arg);

static void pool_atfork_prepare(void) {
  fw_lock_acquire(&pool_reg_lock);
  for (uint32_t id = 0; id < pool_reg_cap; id++) {
    fw_pool_t *pool = pool_reg[id];
    if (pool == NULL)
      continue;
    pool_lock(&pool->grow_lock);
    for (uint32_t s = 0; s <= pool->shard_mask; s++)
      pool_lock(&pool->shards[s].lock);
  }
}

static void pool_atfork_release(void) {
  for (uint32_t id = 0; id < pool_reg_cap; id++) {
    fw_pool_t *pool = pool_reg[id];
    if (pool == NULL)
      continue;
    for (uint32_t s = 0; s <= pool->shard_mask; s++)
      pool_unlock(&pool->shards[s].lock);
    pool_unlock(&pool->grow_lock);
  }
  fw_lock_release(&pool_reg_lock);
}

static void pool_init_once(void) {
  pool_key_ok = fw_os_tkey_create(&pool_key, pool_thread_exit);
  fw_os_atfork(pool_atfork_prepare, pool_atfork_release, pool_atfork_release);
}

/* One caller runs pool_init_once; any other waits for it to finish. */
static POOL_COLD void pool_run_once(void) {
  int expected = 0;
  if (atomic_compare_exchange_strong_explicit(&pool_once, &expected, 1, memory_order_acquire,
                                              memory_order_acquire)) {
    pool_init_once();
    atomic_store_explicit(&pool_once, 2, memory_order_release);
    return;
  }
  while (atomic_load_explicit(&pool_once, memory_order_acquire) != 2)
    fw_os_yield();
}

static pool_thread_t *pool_thread_create(void) {
  if (!pool_key_ok)
    return NULL;
  pool_thread_t *t = fw_calloc(1, sizeof *t);
  if (t == NULL)
    return NULL;
  if (!fw_os_tkey_set(pool_key, t)) {
    fw_free(t);
    return NULL;
  }
  fw_lock_acquire(&pool_reg_lock);
  t->next = pool_threads;
  if (pool_threads != NULL)
    pool_threads->prev = t;
  pool_threads = t;
  fw_lock_release(&pool_reg_lock);
  FW_TLS(pool_tls).thread = t;
  FW_TLS(pool_tls).shard = atomic_fetch_add_explicit(&pool_thread_seq, 1, memory_order_relaxed);
  return t;
}

static bool pool_thread_grow(pool_thread_t *t, uint32_t need) {
  uint32_t cap = t->cap ? t->cap : 8;
  while (cap < need)
    cap *= 2;
  pool_cache_t *grown = fw_aligned_alloc(POOL_LINE, cap * sizeof *grown);
  if (grown == NULL)
    return false;
  memset(grown, 0, cap * sizeof *grown);
  for (uint32_t id = 0; id < cap; id++)
    grown[id].chunk = UINTPTR_MAX;
  pool_cache_t *old = t->caches;
  fw_lock_acquire(&pool_reg_lock);
  if (t->cap)
    memcpy(grown, old, t->cap * sizeof *grown);
  t->caches = grown;
  t->cap = cap;
  fw_lock_release(&pool_reg_lock);
  FW_TLS(pool_tls).caches = grown;
  FW_TLS(pool_tls).cap = cap;
  fw_free(old);
  return true;
}

/* The calling thread's entry for pool, made ready; NULL if the thread cannot
 * have one (it is exiting, or out of memory). */
static pool_cache_t *pool_cache_attach(fw_pool_t *pool) {
  if (FW_TLS(pool_tls).dead)
    return NULL;
  pool_thread_t *t = FW_TLS(pool_tls).thread;
  if (t == NULL && (t = pool_thread_create()) == NULL)
    return NULL;
  if (pool->id >= t->cap && !pool_thread_grow(t, pool->id + 1))
    return NULL;
  pool_cache_t *c = &t->caches[pool->id];
  if (load_relaxed(&c->gen) != pool->gen) {
    /* Unused, or left by a destroyed pool: its objects are gone with it. */
    c->head = c->spare = NULL;
    c->chunk = UINTPTR_MAX;
    store_relaxed(&c->count, 0);
    store_relaxed(&c->spare_count, 0);
    pool_cache_rebase(c);
    atomic_store_explicit(&c->gen, pool->gen, memory_order_release);
  }
  return c;
}

/* The calling thread's home shard (unmasked). */
static uint32_t pool_home(void) {
  if (FW_TLS(pool_tls).thread == NULL)
    return (uint32_t)((uintptr_t)&FW_TLS(pool_tls) >> 12);
  return FW_TLS(pool_tls).shard;
}

static void pool_thread_exit(void *arg) {
  pool_thread_t *t = arg;
  uint32_t shard = FW_TLS(pool_tls).shard;
  /* Any later pool call of this thread works on the shards directly. */
  FW_TLS(pool_tls).cap = 0;
  FW_TLS(pool_tls).caches = NULL;
  FW_TLS(pool_tls).thread = NULL;
  FW_TLS(pool_tls).dead = true;
  fw_lock_acquire(&pool_reg_lock);
  for (uint32_t id = 0; id < t->cap; id++) {
    pool_cache_t *c = &t->caches[id];
    uint64_t gen = load_relaxed(&c->gen);
    fw_pool_t *pool = id < pool_reg_cap ? pool_reg[id] : NULL;
    if (gen == 0 || pool == NULL || pool->gen != gen)
      continue;
    pool_cache_fold(pool, c);
    pool_shard_t *home = &pool->shards[shard & pool->shard_mask];
    if (c->head != NULL)
      pool_shard_push(home, c->head, load_relaxed(&c->count), false);
    if (c->spare != NULL)
      pool_shard_push(home, c->spare, load_relaxed(&c->spare_count), false);
    c->head = c->spare = NULL;
    store_relaxed(&c->gen, 0);
  }
  if (t->prev != NULL)
    t->prev->next = t->next;
  else
    pool_threads = t->next;
  if (t->next != NULL)
    t->next->prev = t->prev;
  fw_lock_release(&pool_reg_lock);
  fw_free(t->caches);
  fw_free(t);
}

/* ---- Allocation and free ----------------------------------------------- */
/* Zeroing and cautious mode's checks; next: the link p left at the head of
 * a list (see pool_check_hand_out). */
static __attribute__((noinline)) void *pool_hand_out_slow(const fw_pool_t *pool, void *p, const void *next) {
  if (pool->cautious)
    pool_check_hand_out(pool, p, next);
  if (pool->zero)
    memset(p, 0, pool->object_size);
  return p;
}

static inline void *pool_hand_out(const fw_pool_t *pool, void *p, const void *next) {
  if (pool_unlikely(pool->hand_out_slow))
    return pool_hand_out_slow(pool, p, next);
  return p;
}

/* Pops the head of a non-empty current list. */
static inline void *pool_cache_pop(pool_cache_t *c, void *p) {
  size_t n = load_relaxed(&c->count) - 1;
  c->head = *pool_link(p);
  store_relaxed(&c->count, n);
  if (n < load_relaxed(&c->count_min))
    store_relaxed(&c->count_min, n);
  return p;
}

static inline void pool_cache_push(pool_cache_t *c, void *p, size_t n) {
  *pool_link(p) = c->head;
  c->head = p;
  store_relaxed(&c->count, n + 1);
}

/* No cache (thread exiting or out of memory): one object straight from a shard. */
static void *pool_alloc_direct(fw_pool_t *pool) {
  uint32_t home = pool_home();
  pool_batch_t b;
  if (!pool_refill(pool, home, &b)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = b.head, *next = b.count > 1 ? *pool_link(p) : NULL;
  /* Checked while the rest of the batch is still ours: once back in the
   * shard, another thread may hand out next before cautious mode looks at it. */
  p = pool_hand_out(pool, p, next);
  if (next != NULL)
    pool_shard_push(&pool->shards[home & pool->shard_mask], next, b.count - 1, true);
  pool_count_live(pool, 1);
  intptr_t before = atomic_fetch_add_explicit(&pool->live, 1, memory_order_relaxed);
  pool_peak_raise(pool, before + 1);
  return p;
}

static void pool_free_direct(fw_pool_t *pool, void *p) {
  *pool_link(p) = NULL;
  pool_shard_push(&pool->shards[pool_home() & pool->shard_mask], p, 1, true);
  pool_count_live(pool, -1);
  atomic_fetch_sub_explicit(&pool->live, 1, memory_order_relaxed);
}

/* The current list is empty: take the spare batch, or one from the shards. */
static POOL_COLD void *pool_alloc_slow(fw_pool_t *pool) {
  pool_cache_t *c = pool_cache_attach(pool);
  if (c == NULL)
    return pool_alloc_direct(pool);
  if (c->head == NULL) {
    pool_cache_fold(pool, c);
    if (c->spare != NULL) {
      c->head = c->spare;
      store_relaxed(&c->count, load_relaxed(&c->spare_count));
      c->spare = NULL;
      store_relaxed(&c->spare_count, 0);
    } else {
      pool_batch_t b;
      if (!pool_refill(pool, FW_TLS(pool_tls).shard, &b)) {
        errno = ENOMEM;
        return NULL;
      }
      c->head = b.head;
      store_relaxed(&c->count, b.count);
    }
    pool_cache_rebase(c);
  }
  void *p = pool_cache_pop(c, c->head);
  return pool_hand_out(pool, p, c->head);
}

/* Every free that the fast path did not take: NULL, the checks' failures,
 * a current list that is full (it becomes the spare, and a spare already
 * held goes to the home shard), and in cautious mode every free. */
static POOL_COLD void pool_free_slow(fw_pool_t *pool, void *p) {
  if (p == NULL)
    return;
  pool_check_free(pool, p);
  pool_cache_t *c = pool_cache_attach(pool);
  if (c == NULL) {
    pool_free_direct(pool, p);
    return;
  }
  if (p == c->head || p == c->spare)
    pool_report(pool, "double free", p, NULL);
  if (load_relaxed(&c->count) >= pool->batch) {
    pool_cache_fold(pool, c);
    if (c->spare != NULL)
      pool_shard_push(&pool->shards[FW_TLS(pool_tls).shard & pool->shard_mask], c->spare,
                      load_relaxed(&c->spare_count), true);
    c->spare = c->head;
    store_relaxed(&c->spare_count, load_relaxed(&c->count));
    c->head = NULL;
    store_relaxed(&c->count, 0);
    pool_cache_rebase(c);
  }
  pool_cache_push(c, p, load_relaxed(&c->count));
}

/* A free whose object is in another chunk than the entry's: the entry must
 * be this pool's and the chunk one of its slabs', which the entry then
 * vouches for. */
static void pool_free_chunk(fw_pool_t *pool, void *p, pool_cache_t *c, size_t n) {
  if (pool_likely(load_relaxed(&c->gen) == pool->gen &&
                  pool_entry_pool(pool_map_get((uintptr_t)p)) == pool)) {
    c->chunk = (uintptr_t)p >> POOL_CHUNK_SHIFT;
    pool_cache_push(c, p, n);
    return;
  }
  pool_free_slow(pool, p);
}

/* Fast path preconditions: the thread has an entry for this pool id, the
 * entry belongs to this pool, and the current list is non-empty (alloc) or
 * below a batch (free). The entry's generation says whom it belongs to; a
 * free tests its chunk instead: the chunk of the last object freed through
 * the entry, set only once the generation and the slab map agreed, and
 * taken back from every thread's entry when the pool is destroyed. So an
 * object in that chunk is this pool's, freed into an entry of this pool;
 * the slab map is read only when the chunk changes. A free must also not be
 * of the list's head (freed just before). Everything else is the slow path,
 * NULL included. */
FW_API void *fw_pool_alloc(fw_pool_t *pool) {
  uint32_t id = pool->id;
  if (pool_likely(id < FW_TLS(pool_tls).cap)) {
    pool_cache_t *c = &FW_TLS(pool_tls).caches[id];
    void *p = c->head;
    if (pool_likely(p != NULL && load_relaxed(&c->gen) == pool->gen)) {
      pool_cache_pop(c, p);
      return pool_hand_out(pool, p, c->head);
    }
  }
  return pool_alloc_slow(pool);
}

FW_API void fw_pool_free(fw_pool_t *pool, void *p) {
  uint32_t id = pool->id;
  if (pool_likely(id < FW_TLS(pool_tls).cap)) {
    pool_cache_t *c = &FW_TLS(pool_tls).caches[id];
    size_t n = load_relaxed(&c->count);
    if (pool_likely(n < pool->free_limit && p != c->head)) {
      if (pool_likely((uintptr_t)p >> POOL_CHUNK_SHIFT == c->chunk)) {
        pool_cache_push(c, p, n);
        return;
      }
      pool_free_chunk(pool, p, c, n);
      return;
    }
  }
  pool_free_slow(pool, p);
}

/* ---- Creation and destruction ------------------------------------------ */
static unsigned pool_default_shards(void) {
  unsigned n = fw_os_cpu_count();
  return n > 64 ? 64u : n;
}

/* Registers pool under a free id and a new generation. */
static bool pool_register(fw_pool_t *pool) {
  fw_pool_t **old = NULL;
  fw_lock_acquire(&pool_reg_lock);
  for (;;) {
    uint32_t id = pool_reg_hint;
    while (id < pool_reg_cap && pool_reg[id] != NULL)
      id++;
    if (id < pool_reg_cap) {
      pool_reg[id] = pool;
      pool_reg_hint = id + 1;
      pool->id = id;
      pool->gen = ++pool_reg_gen;
      break;
    }
    uint32_t cap = pool_reg_cap;
    fw_lock_release(&pool_reg_lock);
    fw_free(old);
    uint32_t want = cap ? 2 * cap : 16;
    fw_pool_t **grown = want > cap ? fw_calloc(want, sizeof *grown) : NULL;
    if (grown == NULL)
      return false;
    fw_lock_acquire(&pool_reg_lock);
    if (pool_reg_cap == cap) {
      if (cap)
        memcpy(grown, pool_reg, cap * sizeof *grown);
      old = pool_reg;
      pool_reg = grown;
      pool_reg_cap = want;
    } else {
      old = grown;
    }
  }
  fw_lock_release(&pool_reg_lock);
  fw_free(old);
  return true;
}

FW_API fw_pool_t *fw_pool_new(size_t object_size, size_t alignment, const fw_pool_options_t *options) {
  fw_pool_options_t opt = {sizeof opt, 0, 0, false};
  if (options != NULL) {
    if (options->size < offsetof(fw_pool_options_t, shards) + sizeof opt.shards ||
        options->size > ((size_t)1 << 16)) {
      errno = EINVAL;
      return NULL;
    }
    memcpy(&opt, options, options->size < sizeof opt ? options->size : sizeof opt);
  }
  if (alignment == 0) {
    size_t natural = pool_round_up(object_size, sizeof(void *));
    alignment = natural & (~natural + 1); /* lowest set bit */
    if (alignment > 16)
      alignment = 16;
  }
  if (object_size == 0 || object_size > POOL_MAX_OBJECT || !pool_is_pow2(alignment) ||
      alignment > POOL_MAX_ALIGN || opt.shards > POOL_MAX_SHARDS ||
      opt.cache_limit > POOL_MAX_CACHE) {
    errno = EINVAL;
    return NULL;
  }
  if (alignment < sizeof(void *))
    alignment = sizeof(void *);
  size_t size = pool_round_up(object_size, alignment);

  /* Whole chunks, so that no two slabs share one in the slab map. */
  size_t slab = pool_round_up(POOL_SLAB_TARGET * size, POOL_CHUNK);
  if (slab < POOL_SLAB_MIN)
    slab = POOL_SLAB_MIN;
  if (slab > POOL_SLAB_MAX)
    slab = POOL_SLAB_MAX;
  bool cautious = fw_option_get("cautious") > 0;
  size_t objects = slab / size, bitmap_offset = slab;
  if (cautious) {
    size_t bits = sizeof(uintptr_t) * 8;
    for (;; objects--) {
      bitmap_offset = pool_round_up(objects * size, sizeof(uintptr_t));
      if (bitmap_offset + (objects + bits - 1) / bits * sizeof(uintptr_t) <= slab)
        break;
    }
  }

  size_t limit = opt.cache_limit;
  if (limit == 0) {
    limit = POOL_CACHE_BYTES / size;
    if (limit > POOL_CACHE_DEFAULT_MAX)
      limit = POOL_CACHE_DEFAULT_MAX;
    if (limit < POOL_CACHE_DEFAULT_MIN)
      limit = POOL_CACHE_DEFAULT_MIN;
  }
  if (limit < 2)
    limit = 2;
  limit = pool_round_up(limit, 2);

  unsigned shards = (unsigned)pool_pow2_at_least(opt.shards ? opt.shards : pool_default_shards());
  /* A multiple of POOL_LINE, as aligned_alloc wants: both types are line-aligned. */
  fw_pool_t *pool = fw_aligned_alloc(POOL_LINE, sizeof *pool + shards * sizeof(pool_shard_t));
  if (pool == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  memset(pool, 0, sizeof *pool + shards * sizeof(pool_shard_t));
  pool->shard_mask = shards - 1;
  pool->batch = limit / 2;
  pool->cautious = cautious;
  pool->free_limit = cautious ? 0 : pool->batch;
  pool->object_size = size;
  pool->zero = opt.zero;
  pool->hand_out_slow = cautious || opt.zero;
  pool->alignment = alignment;
  pool->slab_size = slab;
  pool->slab_objects = objects;
  pool->bitmap_offset = bitmap_offset;
  pool->cache_limit = limit;
  for (unsigned i = 0; i < shards; i++) {
    pool_shard_t *s = &pool->shards[i];
    s->batches = fw_malloc(POOL_SHARD_INITIAL * sizeof *s->batches);
    s->cap = POOL_SHARD_INITIAL;
    if (s->batches == NULL)
      goto fail;
  }
  if (pool_unlikely(atomic_load_explicit(&pool_once, memory_order_acquire) != 2))
    pool_run_once();
  if (!pool_register(pool))
    goto fail;
  return pool;

fail:
  for (unsigned i = 0; i < shards; i++)
    fw_free(pool->shards[i].batches);
  fw_free(pool);
  errno = ENOMEM;
  return NULL;
}

FW_API void fw_pool_destroy(fw_pool_t *pool) {
  if (pool == NULL)
    return;
  fw_lock_acquire(&pool_reg_lock);
  pool_reg[pool->id] = NULL;
  if (pool->id < pool_reg_hint)
    pool_reg_hint = pool->id;
  /* The chunks the threads' entries vouch for go with the pool (fw_pool_free). */
  for (pool_thread_t *t = pool_threads; t != NULL; t = t->next)
    if (pool->id < t->cap)
      t->caches[pool->id].chunk = UINTPTR_MAX;
  fw_lock_release(&pool_reg_lock);
  /* its objects go with it, those still folded in as live too */
  pool_count_live(pool, -atomic_load_explicit(&pool->live, memory_order_relaxed));

  pool_slab_t *slab = pool->slabs;
  while (slab != NULL) {
    pool_slab_t *next = slab->next;
    pool_slab_delete(pool, slab, true);
    slab = next;
  }
  for (uint32_t i = 0; i <= pool->shard_mask; i++)
    fw_free(pool->shards[i].batches);
  fw_free(pool);
}

FW_API int fw_pool_stats(const fw_pool_t *cpool, fw_pool_stats_t *out) {
  if (cpool == NULL || out == NULL || out->size < sizeof out->size) {
    errno = EINVAL;
    return -1;
  }
  fw_pool_t *pool = (fw_pool_t *)cpool; /* peak is raised as a side effect */
  fw_lock_acquire(&pool_reg_lock);
  intptr_t live = atomic_load_explicit(&pool->live, memory_order_relaxed);
  intptr_t peak = live;
  for (pool_thread_t *t = pool_threads; t != NULL; t = t->next) {
    if (pool->id >= t->cap)
      continue;
    pool_cache_t *c = &t->caches[pool->id];
    if (atomic_load_explicit(&c->gen, memory_order_acquire) != pool->gen)
      continue;
    intptr_t base = (intptr_t)load_relaxed(&c->base) - (intptr_t)load_relaxed(&c->spare_count);
    live += base - (intptr_t)load_relaxed(&c->count);
    peak += base - (intptr_t)load_relaxed(&c->count_min);
  }
  fw_lock_release(&pool_reg_lock);
  if (live < 0) /* only while other threads are mid-update */
    live = 0;
  pool_peak_raise(pool, peak);
  pool_peak_raise(pool, live);

  fw_pool_stats_t s;
  s.size = out->size;
  s.object_size = pool->object_size;
  s.objects_live = (size_t)live;
  s.objects_peak = load_relaxed(&pool->peak);
  s.slabs = load_relaxed(&pool->nslabs);
  s.bytes_reserved = s.slabs * pool->slab_size;
  memcpy(out, &s, out->size < sizeof s ? out->size : sizeof s);
  return 0;
}
