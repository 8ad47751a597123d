/* heapstress.c — the heap API under many threads at once, for as long as the
 * environment variable FWT_STRESS_SECONDS says (default 10; set it to a few
 * hundred to soak the allocator by hand).
 *
 * waves: worker threads are created and exit continually. Each makes heaps,
 *   allocates blocks of mixed sizes and kinds from them and from its default
 *   heap, and hands a share of them to other threads through mailboxes (some
 *   mutex-protected, some lock-free), whose receivers check and free (or
 *   reallocate) them. A heap ends with fw_heap_delete (its blocks live on in
 *   the default heap, possibly still held by other threads), with
 *   fw_heap_destroy (only when none of its blocks ever left the thread) or
 *   with its thread (the blocks it handed out are freed after it has gone).
 *   Only owners call the owner-only heap functions. Every block's contents
 *   are checked before it is freed; owners check fw_heap_contains and
 *   fw_heap_stats against what they know they hold.
 * foreign: threads call every owner-only heap function on heaps of other
 *   threads, live ones and ones whose owner has exited; each call must be
 *   refused and change nothing, which the owners check while they keep
 *   working on those heaps.
 */
#include "fwtest.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double stress_seconds(void) {
  const char *s = getenv("FWT_STRESS_SECONDS");
  double v = s ? strtod(s, NULL) : 10.0;
  return v > 0 ? v : 10.0;
}

/* ---- blocks ------------------------------------------------------------------ */
typedef struct sblk {
  char *p;
  size_t n;     /* bytes asked for, all of them patterned */
  size_t align; /* alignment asked for; 0: none */
  size_t slack; /* alignment padding the heap's bytes_live may count besides the usable size */
} sblk;

/* The pattern depends on the address, so a block handed out twice, or two
 * blocks at one address, cannot both pass. */
static uint64_t sseed(const void *p, size_t n) { return fwt_seed(p, n, 0x57e5); }
static void stamp(void *p, size_t n) { fwt_fill(p, n, sseed(p, n)); }
static void verify(const void *p, size_t n) { CHECK_PATTERN(p, n, sseed(p, n)); }

/* 8 B .. 256 KiB, mostly small; a few up to 4 MiB (mappings of their own). */
static size_t block_size(fwt_rng *r) {
  uint64_t x = fwt_next(r) % 1000;
  if (x < 600) return fwt_range(r, 8, 256);
  if (x < 850) return fwt_range(r, 257, 4096);
  if (x < 970) return fwt_range(r, 4097, 65536);
  if (x < 997) return fwt_range(r, 65537, (size_t)256 << 10);
  return fwt_range(r, ((size_t)256 << 10) + 1, (size_t)4 << 20);
}

/* A free of the caller's own block, by one of the free functions that fit
 * how it was allocated. */
static void release(fwt_rng *r, const sblk *b) {
  verify(b->p, b->n);
  uint64_t x = fwt_next(r) % 4;
  if (b->align && x == 0) X.free_aligned_sized(b->p, b->align, b->n);
  else if (!b->align && x == 0) X.free_sized(b->p, b->n);
  else if (x == 1) X.free(b->p);
  else A.free(b->p);
}

static atomic_ulong st_threads, st_heaps_new, st_deleted, st_destroyed, st_abandoned, st_blocks,
    st_sent, st_received, st_remote_realloc, st_stats_checks;

/* ---- mailboxes ----------------------------------------------------------------- */
/* Each worker slot has two mailboxes, read only by the thread that occupies
 * the slot (one at a time: a slot's next thread starts after the previous one
 * was joined) and, at the end, by main. */
enum { SLOTS = 6, BOX_CAP = 256 };

typedef struct locked_box {
  pthread_mutex_t mu;
  size_t head, count;
  sblk items[BOX_CAP];
} locked_box;

/* Lock-free: a sender claims an empty cell by CAS 0 -> BUSY, writes the
 * size, then publishes the pointer with a release store; the single reader
 * takes a published cell and empties it with a release store. */
#define CELL_BUSY ((uintptr_t)1)
typedef struct lf_box {
  _Atomic(uintptr_t) p[BOX_CAP];
  size_t n[BOX_CAP];
} lf_box;

typedef struct mailbox {
  locked_box locked;
  lf_box lf;
} mailbox;
static mailbox *boxes;

static bool locked_put(locked_box *b, char *p, size_t n) {
  bool ok = false;
  pthread_mutex_lock(&b->mu);
  if (b->count < BOX_CAP) {
    b->items[(b->head + b->count++) % BOX_CAP] = (sblk){p, n, 0, 0};
    ok = true;
  }
  pthread_mutex_unlock(&b->mu);
  return ok;
}

static bool lf_put(lf_box *b, char *p, size_t n, size_t start) {
  for (size_t k = 0; k < 32; k++) {
    size_t j = (start + k) % BOX_CAP;
    uintptr_t empty = 0;
    if (atomic_compare_exchange_strong_explicit(&b->p[j], &empty, CELL_BUSY, memory_order_acquire,
                                                memory_order_relaxed)) {
      b->n[j] = n;
      atomic_store_explicit(&b->p[j], (uintptr_t)p, memory_order_release);
      return true;
    }
  }
  return false;
}

/* Hands a block to a thread of another slot; false if the mailboxes tried
 * were full (the caller still owns the block). */
static bool pass_on(fwt_rng *r, int from_slot, char *p, size_t n) {
  for (int tries = 0; tries < 4; tries++) {
    int to = (int)fwt_range(r, 0, SLOTS - 2);
    if (to >= from_slot) to++;
    bool ok = fwt_next(r) % 2 ? locked_put(&boxes[to].locked, p, n)
                              : lf_put(&boxes[to].lf, p, n, (size_t)fwt_next(r) % BOX_CAP);
    if (ok) {
      atomic_fetch_add_explicit(&st_sent, 1, memory_order_relaxed);
      return true;
    }
  }
  return false;
}

/* A block from another thread: check it, sometimes reallocate it here, free. */
static void take(fwt_rng *r, char *p, size_t n) {
  verify(p, n);
  if (fwt_next(r) % 8 == 0) {
    size_t m = block_size(r), keep = m < n ? m : n;
    uint64_t seed = sseed(p, n);
    char *q = A.realloc(p, m);
    CHECKF(q != NULL, "realloc of another thread's block (%zu -> %zu bytes)", n, m);
    CHECKF(fwt_verify(q, keep, seed) == SIZE_MAX, "realloc %zu -> %zu lost the contents", n, m);
    stamp(q, m);
    verify(q, m);
    A.free(q);
    atomic_fetch_add_explicit(&st_remote_realloc, 1, memory_order_relaxed);
  } else if (fwt_next(r) % 2) {
    A.free(p);
  } else {
    X.free(p);
  }
  atomic_fetch_add_explicit(&st_received, 1, memory_order_relaxed);
}

static void drain(fwt_rng *r, int slot) {
  locked_box *lb = &boxes[slot].locked;
  sblk got[BOX_CAP];
  size_t count;
  pthread_mutex_lock(&lb->mu);
  count = lb->count;
  for (size_t i = 0; i < count; i++) got[i] = lb->items[(lb->head + i) % BOX_CAP];
  lb->head = lb->count = 0;
  pthread_mutex_unlock(&lb->mu);
  for (size_t i = 0; i < count; i++) take(r, got[i].p, got[i].n);
  lf_box *fb = &boxes[slot].lf;
  for (size_t j = 0; j < BOX_CAP; j++) {
    uintptr_t v = atomic_load_explicit(&fb->p[j], memory_order_acquire);
    if (v == 0 || v == CELL_BUSY) continue;
    size_t n = fb->n[j];
    atomic_store_explicit(&fb->p[j], 0, memory_order_release);
    take(r, (char *)v, n);
  }
}

/* ---- a worker's heaps ------------------------------------------------------------ */
enum { MAX_HEAPS = 3, HEAP_BLOCKS = 384, DEF_BLOCKS = 512 };

typedef struct hrec {
  fw_heap_t *h;
  sblk *b; /* the blocks of h this thread holds */
  size_t count;
  size_t fixed;  /* b[0 .. fixed-1] are left alone by the random operations */
  bool share;    /* may hand blocks out: then it never ends with destroy */
  size_t handed; /* blocks of h handed to other threads */
} hrec;

typedef struct worker {
  int slot;
  fwt_rng r;
  hrec heaps[MAX_HEAPS];
  size_t nheaps;
  sblk *def; /* blocks of the default heap (from malloc, or moved there by delete) */
  size_t ndef;
  sblk *store; /* scratch memory behind the block arrays */
} worker;

static const size_t worker_store = (MAX_HEAPS * HEAP_BLOCKS + DEF_BLOCKS) * sizeof(sblk);

static void heap_new(worker *w) {
  hrec *hr = &w->heaps[w->nheaps];
  hr->h = X.heap_new();
  CHECK(hr->h != NULL);
  CHECK(hr->h != X.heap_get_default());
  for (size_t i = 0; i < w->nheaps; i++) CHECK(w->heaps[i].h != hr->h);
  hr->count = 0;
  hr->fixed = 0;
  hr->handed = 0;
  hr->share = fwt_next(&w->r) % 2;
  w->nheaps++;
  atomic_fetch_add_explicit(&st_heaps_new, 1, memory_order_relaxed);
}

/* Drops heap i from the list (its handle is no longer used). */
static void heap_forget(worker *w, size_t i) {
  size_t last = --w->nheaps;
  hrec t = w->heaps[i]; /* swapped, so that each record keeps its own array */
  w->heaps[i] = w->heaps[last];
  w->heaps[last] = t;
}

static void check_new_block(worker *w, hrec *hr, const sblk *b) {
  CHECKF(b->p != NULL, "allocating %zu bytes (alignment %zu) from a heap", b->n, b->align);
  if (b->align) CHECKF(fwt_aligned(b->p, b->align), "%p is not aligned to %zu", (void *)b->p, b->align);
  CHECK(X.heap_usable_size(hr->h, b->p) >= b->n);
  CHECK(X.heap_contains(hr->h, b->p));
  CHECK(!X.heap_contains(X.heap_get_default(), b->p));
  for (size_t i = 0; i < w->nheaps; i++)
    if (w->heaps[i].h != hr->h) CHECK(!X.heap_contains(w->heaps[i].h, b->p));
}

static void heap_alloc(worker *w, hrec *hr) {
  fwt_rng *r = &w->r;
  size_t n = block_size(r);
  uint64_t x = fwt_next(r) % 100;
  if (x < 20 && hr->count > hr->fixed) {
    /* realloc: the contents up to the smaller size survive */
    sblk *b = &hr->b[fwt_range(r, hr->fixed, hr->count - 1)];
    size_t keep = n < b->n ? n : b->n;
    uint64_t seed = sseed(b->p, b->n);
    verify(b->p, b->n);
    char *q = X.heap_realloc(hr->h, b->p, n);
    CHECKF(q != NULL, "fw_heap_realloc(%zu -> %zu)", b->n, n);
    CHECKF(fwt_verify(q, keep, seed) == SIZE_MAX, "fw_heap_realloc %zu -> %zu lost the contents", b->n, n);
    *b = (sblk){q, n, 0, q == b->p ? b->slack : 0};
    check_new_block(w, hr, b);
    stamp(b->p, b->n);
    return;
  }
  if (hr->count == HEAP_BLOCKS) {
    release(r, &hr->b[hr->fixed]);
    hr->b[hr->fixed] = hr->b[--hr->count];
  }
  sblk b = {NULL, n, 0, 0};
  if (x < 40) {
    size_t c = fwt_range(r, 1, 4), each = (n + c - 1) / c;
    b.n = c * each;
    b.p = X.heap_calloc(hr->h, c, each);
    check_new_block(w, hr, &b);
    CHECK_ZERO(b.p, b.n);
  } else if (x < 55) {
    b.align = b.slack = (size_t)1 << fwt_range(r, 3, 16);
    b.p = X.heap_malloc_aligned(hr->h, n, b.align);
    check_new_block(w, hr, &b);
  } else {
    b.p = X.heap_malloc(hr->h, n);
    check_new_block(w, hr, &b);
  }
  stamp(b.p, b.n);
  hr->b[hr->count++] = b;
  atomic_fetch_add_explicit(&st_blocks, 1, memory_order_relaxed);
}

/* Blocks of one size, enough to fill a page; in a shared heap most go to
 * other threads at once, whose frees then meet full pages (the owning
 * heap is told of those) while the owner may be deleting the heap or
 * exiting. */
static void heap_burst(worker *w, hrec *hr) {
  size_t n = fwt_range(&w->r, 512, 4096), k = ((size_t)64 << 10) / n + 4, start = hr->count;
  for (size_t i = 0; i < k && hr->count < HEAP_BLOCKS; i++) {
    sblk b = {X.heap_malloc(hr->h, n), n, 0, 0};
    check_new_block(w, hr, &b);
    stamp(b.p, b.n);
    hr->b[hr->count++] = b;
    atomic_fetch_add_explicit(&st_blocks, 1, memory_order_relaxed);
  }
  if (!hr->share) return;
  for (size_t i = hr->count; i-- > start;) {
    if (fwt_next(&w->r) % 4 && pass_on(&w->r, w->slot, hr->b[i].p, hr->b[i].n)) {
      hr->handed++;
      hr->b[i] = hr->b[--hr->count];
    }
  }
}

static void def_add(worker *w, sblk b) {
  if (w->ndef == DEF_BLOCKS) {
    size_t i = fwt_next(&w->r) % w->ndef;
    release(&w->r, &w->def[i]);
    w->def[i] = w->def[--w->ndef];
  }
  w->def[w->ndef++] = b;
}

static void def_alloc(worker *w) {
  size_t n = block_size(&w->r);
  sblk b = {NULL, n, 0, 0};
  if (fwt_next(&w->r) % 4 == 0) {
    b.p = A.calloc(1, n);
    CHECKF(b.p != NULL, "calloc(1, %zu)", n);
    CHECK_ZERO(b.p, n);
  } else {
    b.p = A.malloc(n);
    CHECKF(b.p != NULL, "malloc(%zu)", n);
  }
  CHECK(X.heap_contains(X.heap_get_default(), b.p));
  for (size_t i = 0; i < w->nheaps; i++) CHECK(!X.heap_contains(w->heaps[i].h, b.p));
  stamp(b.p, n);
  def_add(w, b);
  atomic_fetch_add_explicit(&st_blocks, 1, memory_order_relaxed);
}

static void owner_free(worker *w, hrec *hr) {
  if (hr->count > hr->fixed && fwt_next(&w->r) % 4) {
    size_t i = fwt_range(&w->r, hr->fixed, hr->count - 1);
    char *p = hr->b[i].p;
    release(&w->r, &hr->b[i]);
    hr->b[i] = hr->b[--hr->count];
    /* Only this thread allocates from hr->h, so the address cannot be
     * live in it again yet. */
    CHECKF(!X.heap_contains(hr->h, p), "freed block %p still reported live", (void *)p);
  } else if (w->ndef) {
    size_t i = fwt_next(&w->r) % w->ndef;
    release(&w->r, &w->def[i]);
    w->def[i] = w->def[--w->ndef];
  }
}

static void hand_out(worker *w, hrec *hr) {
  if (hr->share && hr->count > hr->fixed && fwt_next(&w->r) % 3) {
    size_t i = fwt_range(&w->r, hr->fixed, hr->count - 1);
    if (pass_on(&w->r, w->slot, hr->b[i].p, hr->b[i].n)) {
      hr->handed++;
      hr->b[i] = hr->b[--hr->count];
    }
  } else if (w->ndef) {
    size_t i = fwt_next(&w->r) % w->ndef;
    if (pass_on(&w->r, w->slot, w->def[i].p, w->def[i].n)) w->def[i] = w->def[--w->ndef];
  }
}

static void heap_stats(const fw_heap_t *h, fw_heap_stats_t *s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  CHECK(X.heap_stats(h, s) == 0);
}

/* Every block intact and contained; the statistics agree with what this
 * thread holds (exactly, if no block of the heap ever left the thread). */
static void check_heap(worker *w, hrec *hr) {
  fw_heap_t *def = X.heap_get_default();
  size_t usable = 0, slack = 0;
  for (size_t i = 0; i < hr->count; i++) {
    const sblk *b = &hr->b[i];
    verify(b->p, b->n);
    CHECKF(X.heap_contains(hr->h, b->p), "block %p (%zu bytes) of heap %p is not contained in it",
           (void *)b->p, b->n, (void *)hr->h);
    CHECK(!X.heap_contains(def, b->p));
    for (size_t k = 0; k < w->nheaps; k++)
      if (w->heaps[k].h != hr->h) CHECK(!X.heap_contains(w->heaps[k].h, b->p));
    size_t u = X.heap_usable_size(hr->h, b->p);
    CHECK(u >= b->n);
    usable += u;
    slack += b->slack;
  }
  fw_heap_stats_t s;
  heap_stats(hr->h, &s);
  if (hr->handed == 0) {
    CHECKF(s.blocks_live == hr->count, "heap %p: blocks_live %zu, the owner holds %zu", (void *)hr->h,
           s.blocks_live, hr->count);
    /* An over-aligned block may count in bytes_live with the padding
     * before the returned pointer, which its usable size leaves out. */
    CHECKF(s.bytes_live >= usable && s.bytes_live <= usable + slack,
           "heap %p: bytes_live %zu, the owner's blocks have %zu usable bytes (+ %zu of alignment)",
           (void *)hr->h, s.bytes_live, usable, slack);
  } else {
    /* Blocks handed out may or may not have been freed (and counted) yet. */
    CHECKF(s.blocks_live >= hr->count && s.blocks_live <= hr->count + hr->handed,
           "heap %p: blocks_live %zu, the owner holds %zu and handed out %zu", (void *)hr->h,
           s.blocks_live, hr->count, hr->handed);
  }
  CHECK(s.bytes_reserved >= s.bytes_live);
  atomic_fetch_add_explicit(&st_stats_checks, 1, memory_order_relaxed);
}

static void check_def(worker *w) {
  fw_heap_t *def = X.heap_get_default();
  for (size_t i = 0; i < w->ndef; i++) {
    verify(w->def[i].p, w->def[i].n);
    CHECKF(X.heap_contains(def, w->def[i].p), "block %p is not in the default heap", (void *)w->def[i].p);
  }
}

/* fw_heap_delete: the blocks this thread holds live on, in its default heap. */
static void end_delete(worker *w, size_t i) {
  hrec *hr = &w->heaps[i];
  X.heap_delete(hr->h);
  fw_heap_t *def = X.heap_get_default();
  for (size_t k = 0; k < hr->count; k++) {
    sblk b = hr->b[k];
    verify(b.p, b.n);
    CHECKF(X.heap_contains(def, b.p), "after fw_heap_delete block %p is not in the default heap", (void *)b.p);
    CHECK(X.usable_size(b.p) >= b.n);
    def_add(w, b);
  }
  heap_forget(w, i);
  atomic_fetch_add_explicit(&st_deleted, 1, memory_order_relaxed);
}

/* fw_heap_destroy: only for a heap none of whose blocks left the thread. */
static void end_destroy(worker *w, size_t i) {
  hrec *hr = &w->heaps[i];
  CHECK(hr->handed == 0);
  for (size_t k = 0; k < hr->count; k++) verify(hr->b[k].p, hr->b[k].n);
  X.heap_destroy(hr->h);
  heap_forget(w, i);
  atomic_fetch_add_explicit(&st_destroyed, 1, memory_order_relaxed);
}

/* The thread is about to exit still owning the heap: its blocks go to other
 * threads, which free them after the owner is gone. */
static void end_abandon(worker *w, size_t i) {
  hrec *hr = &w->heaps[i];
  for (size_t k = 0; k < hr->count; k++) {
    sblk b = hr->b[k];
    verify(b.p, b.n);
    if (!pass_on(&w->r, w->slot, b.p, b.n)) release(&w->r, &b);
  }
  hr->count = 0;
  heap_forget(w, i);
  atomic_fetch_add_explicit(&st_abandoned, 1, memory_order_relaxed);
}

static void round_run(worker *w, bool last) {
  fwt_rng *r = &w->r;
  drain(r, w->slot);
  size_t want = fwt_range(r, 1, MAX_HEAPS);
  while (w->nheaps < want) heap_new(w);
  size_t ops = fwt_range(r, 100, 400);
  for (size_t i = 0; i < ops; i++) {
    if (i % 64 == 63) drain(r, w->slot);
    hrec *hr = &w->heaps[fwt_next(r) % w->nheaps];
    uint64_t x = fwt_next(r) % 100;
    if (x < 47) heap_alloc(w, hr);
    else if (x < 50) heap_burst(w, hr);
    else if (x < 62) def_alloc(w);
    else if (x < 80) owner_free(w, hr);
    else if (x < 93) hand_out(w, hr);
    else if (x < 96) check_heap(w, hr);
    else if (x < 98) check_def(w);
    else X.heap_collect(hr->h, fwt_next(r) % 2);
  }
  for (size_t i = 0; i < w->nheaps; i++) {
    check_heap(w, &w->heaps[i]);
    X.heap_collect(w->heaps[i].h, fwt_next(r) % 2);
    check_heap(w, &w->heaps[i]);
  }
  check_def(w);
  /* End some heaps; the others carry over to the next round. */
  for (size_t i = w->nheaps; i-- > 0;) {
    uint64_t x = fwt_next(r) % 100;
    if (!last && x < 35) continue;
    if (w->heaps[i].handed == 0 && x % 2) end_destroy(w, i);
    else end_delete(w, i);
  }
  while (w->ndef > DEF_BLOCKS / 2) {
    size_t i = fwt_next(r) % w->ndef;
    release(r, &w->def[i]);
    w->def[i] = w->def[--w->ndef];
  }
}

/* ---- waves of workers -------------------------------------------------------------- */
typedef struct slot_state {
  pthread_t t;
  uint64_t id;
} slot_state;
static slot_state slots[SLOTS + 8];

/* Finished slots, for main to join and refill. */
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int done_list[SLOTS + 8];
static int done_count;

static void slot_done(int slot) {
  pthread_mutex_lock(&done_mu);
  done_list[done_count++] = slot;
  pthread_cond_signal(&done_cv);
  pthread_mutex_unlock(&done_mu);
}
static int wait_done(void) {
  pthread_mutex_lock(&done_mu);
  while (done_count == 0) pthread_cond_wait(&done_cv, &done_mu);
  int slot = done_list[--done_count];
  pthread_mutex_unlock(&done_mu);
  return slot;
}

/* A worker's state, its block store carved into one range per heap slot
 * and one for the default heap. */
static void worker_init(worker *w, int slot, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->slot = slot;
  fwt_rng_init(&w->r, seed);
  w->store = fwt_scratch(worker_store);
  for (size_t i = 0; i < MAX_HEAPS; i++) w->heaps[i].b = w->store + i * HEAP_BLOCKS;
  w->def = w->store + MAX_HEAPS * HEAP_BLOCKS;
}

static void *worker_main(void *arg) {
  int slot = (int)(uintptr_t)arg;
  worker w;
  worker_init(&w, slot, slots[slot].id * 7919 + 17);
  atomic_fetch_add_explicit(&st_threads, 1, memory_order_relaxed);

  size_t rounds = fwt_range(&w.r, 1, 5);
  for (size_t k = 0; k < rounds; k++) round_run(&w, k + 1 == rounds);
  /* A third of the threads exit owning heaps. */
  if (fwt_next(&w.r) % 3 == 0) {
    heap_new(&w);
    if (fwt_next(&w.r) % 2) heap_new(&w);
    for (size_t k = 0; k < w.nheaps; k++) {
      for (int i = 0; i < 50; i++) heap_alloc(&w, &w.heaps[k]);
      heap_burst(&w, &w.heaps[k]);
    }
    for (size_t i = 0; i < w.nheaps; i++) check_heap(&w, &w.heaps[i]);
    while (w.nheaps) end_abandon(&w, w.nheaps - 1);
  }
  /* The default heap's blocks: some to other threads, the rest freed. */
  for (size_t i = 0; i < w.ndef; i++) {
    sblk b = w.def[i];
    verify(b.p, b.n);
    if (fwt_next(&w.r) % 2 || !pass_on(&w.r, slot, b.p, b.n)) release(&w.r, &b);
  }
  fwt_scratch_free(w.store, worker_store);
  slot_done(slot);
  return NULL;
}

static uint64_t next_id;

static void start_worker(int slot, void *(*fn)(void *)) {
  slots[slot].id = next_id++;
  int rc = pthread_create(&slots[slot].t, NULL, fn, (void *)(uintptr_t)slot);
  CHECKF(rc == 0, "pthread_create: %d", rc);
}

static void t_waves(void) {
  double secs = stress_seconds();
  boxes = fwt_scratch(SLOTS * sizeof *boxes);
  for (int i = 0; i < SLOTS; i++) CHECK(pthread_mutex_init(&boxes[i].locked.mu, NULL) == 0);
  double end = now_s() + secs;
  int running = 0;
  for (int i = 0; i < SLOTS; i++, running++) start_worker(i, worker_main);
  size_t joined = 0;
  while (running) {
    int slot = wait_done();
    CHECK(pthread_join(slots[slot].t, NULL) == 0);
    running--;
    if (++joined % 16 == 0) X.collect(false);
    if (now_s() < end) {
      start_worker(slot, worker_main);
      running++;
    }
  }
  /* Whatever is still in a mailbox is intact and freeable from here. */
  fwt_rng r;
  fwt_rng_init(&r, 99);
  for (int i = 0; i < SLOTS; i++) drain(&r, i);
  unsigned long sent = atomic_load(&st_sent), received = atomic_load(&st_received);
  fwt_log("waves: %lu threads in %.0f s; heaps %lu new, %lu deleted, %lu destroyed, %lu left at thread "
          "exit; %lu blocks; %lu handed over, %lu received (%lu reallocated there); %lu stats checks",
          atomic_load(&st_threads), secs, atomic_load(&st_heaps_new), atomic_load(&st_deleted),
          atomic_load(&st_destroyed), atomic_load(&st_abandoned), atomic_load(&st_blocks), sent, received,
          atomic_load(&st_remote_realloc), atomic_load(&st_stats_checks));
  CHECKF(sent == received, "%lu blocks handed over, %lu received", sent, received);
  CHECK(atomic_load(&st_threads) >= SLOTS);
  CHECK(atomic_load(&st_heaps_new) ==
        atomic_load(&st_deleted) + atomic_load(&st_destroyed) + atomic_load(&st_abandoned));
  for (int i = 0; i < SLOTS; i++) pthread_mutex_destroy(&boxes[i].locked.mu);
  fwt_scratch_free(boxes, SLOTS * sizeof *boxes);
  X.collect(true);
}

/* ---- foreign calls ----------------------------------------------------------------- */
/* Owners publish their heaps, with one live block of each, in a table that
 * probers read. An entry's mutex keeps the handle from being deleted or
 * destroyed by its owner while a prober uses it; an owner that exits leaves
 * its entries (now dead handles) for probers, and whoever replaces such an
 * entry frees its block. */
enum { F_OWNERS = 3, F_PROBERS = 3, F_PUBS = 16 };
typedef struct pub {
  pthread_mutex_t mu;
  fw_heap_t *h; /* NULL: empty */
  char *sample;
  size_t n;
  bool alive; /* the owner has not yet exited */
} pub;
static pub pubs[F_PUBS];
static atomic_bool f_stop;
static atomic_ulong f_probes, f_dead_probes, f_owner_checks;

static void sample_free(pub *e) {
  verify(e->sample, e->n);
  A.free(e->sample);
  e->h = NULL;
  e->sample = NULL;
}

static bool count_visit(const void *block, size_t usable, void *arg) {
  (void)block;
  (void)usable;
  ++*(size_t *)arg;
  return true;
}

/* Every owner-only call on a heap of another thread: refused, nothing changed. */
static void probe(fwt_rng *r, pub *e) {
  fw_heap_t *h = e->h;
  errno = 0;
  void *p = X.heap_malloc(h, 64);
  CHECKF(p == NULL && errno == EPERM, "fw_heap_malloc on another thread's heap: %p, errno %d", p, errno);
  errno = 0;
  p = X.heap_calloc(h, 4, 16);
  CHECKF(p == NULL && errno == EPERM, "fw_heap_calloc on another thread's heap: %p, errno %d", p, errno);
  errno = 0;
  p = X.heap_malloc_aligned(h, 64, 256);
  CHECKF(p == NULL && errno == EPERM, "fw_heap_malloc_aligned on another thread's heap: %p, errno %d", p,
         errno);
  errno = 0;
  p = X.heap_realloc(h, NULL, 64);
  CHECKF(p == NULL && errno == EPERM, "fw_heap_realloc(NULL) on another thread's heap: %p, errno %d", p,
         errno);
  errno = 0;
  p = X.heap_realloc(h, e->sample, e->n + 100);
  CHECKF(p == NULL && errno == EPERM, "fw_heap_realloc of its block on another thread's heap: %p, errno %d",
         p, errno);
  verify(e->sample, e->n);
  fw_heap_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  errno = 0;
  int rc = X.heap_stats(h, &s);
  CHECKF(rc == -1 && errno == EPERM, "fw_heap_stats on another thread's heap: %d, errno %d", rc, errno);
  CHECKF(!X.heap_contains(h, e->sample), "fw_heap_contains on another thread's heap answered true");
  size_t visited = 0;
  X.heap_visit(h, count_visit, &visited);
  CHECKF(visited == 0, "fw_heap_visit on another thread's heap visited %zu blocks", visited);
  if (e->alive) CHECK(X.heap_usable_size(h, e->sample) >= e->n);
  X.heap_collect(h, fwt_next(r) % 2);
  if (fwt_next(r) % 2) X.heap_delete(h);
  else X.heap_destroy(h);
  verify(e->sample, e->n);
  CHECK(X.usable_size(e->sample) >= e->n);
  atomic_fetch_add_explicit(e->alive ? &f_probes : &f_dead_probes, 1, memory_order_relaxed);
}

static void *prober_main(void *arg) {
  int slot = (int)(uintptr_t)arg;
  fwt_rng r;
  fwt_rng_init(&r, slots[slot].id * 31 + 5);
  size_t count = fwt_range(&r, 200, 2000);
  for (size_t i = 0; i < count && !atomic_load(&f_stop); i++) {
    pub *e = &pubs[fwt_next(&r) % F_PUBS];
    pthread_mutex_lock(&e->mu);
    /* A dead heap's memory may now be this thread's default heap, which
     * this thread may use. */
    if (e->h && e->h != X.heap_get_default()) probe(&r, e);
    pthread_mutex_unlock(&e->mu);
    /* Some allocation of its own between probes. */
    void *q = A.malloc(fwt_range(&r, 8, 2048));
    CHECK(q != NULL);
    A.free(q);
  }
  slot_done(slot);
  return NULL;
}

/* Publishes (h, a new block of h) in a free or dead entry; NULL if none. */
static pub *publish(worker *w, hrec *hr, char **sample, size_t *n) {
  *n = fwt_range(&w->r, 16, 4096);
  *sample = X.heap_malloc(hr->h, *n);
  CHECK(*sample != NULL);
  stamp(*sample, *n);
  for (int tries = 0; tries < 8; tries++) {
    pub *e = &pubs[fwt_next(&w->r) % F_PUBS];
    pthread_mutex_lock(&e->mu);
    if (e->h && !e->alive) sample_free(e); /* any thread may free it */
    if (!e->h) {
      e->h = hr->h;
      e->sample = *sample;
      e->n = *n;
      e->alive = true;
      pthread_mutex_unlock(&e->mu);
      return e;
    }
    pthread_mutex_unlock(&e->mu);
  }
  return NULL;
}

static void *owner_main(void *arg) {
  int slot = (int)(uintptr_t)arg;
  worker w;
  worker_init(&w, slot, slots[slot].id * 131 + 3);
  /* slot F_OWNERS + F_PROBERS is the final owner, which always leaves its
   * heaps behind. */
  bool final = slot == F_OWNERS + F_PROBERS;
  size_t rounds = final ? 1 : fwt_range(&w.r, 1, 4);
  bool abandon = final || slots[slot].id % 2 == 0;
  for (size_t k = 0; k < rounds; k++) {
    pub *e[2];
    char *sample[2];
    size_t n[2];
    for (int j = 0; j < 2; j++) {
      heap_new(&w);
      w.heaps[j].share = false;
      e[j] = publish(&w, &w.heaps[j], &sample[j], &n[j]);
      /* The published block counts in the heap's statistics, and stays
       * put while probers read it. */
      w.heaps[j].b[w.heaps[j].count++] = (sblk){sample[j], n[j], 0, 0};
      w.heaps[j].fixed = 1;
    }
    size_t ops = final ? 50 : fwt_range(&w.r, 200, 800);
    for (size_t i = 0; i < ops; i++) {
      hrec *hr = &w.heaps[fwt_next(&w.r) % 2];
      uint64_t x = fwt_next(&w.r) % 100;
      if (x < 60) {
        heap_alloc(&w, hr);
      } else if (x < 90) {
        owner_free(&w, hr);
      } else {
        check_heap(&w, hr);
        atomic_fetch_add_explicit(&f_owner_checks, 1, memory_order_relaxed);
      }
    }
    for (int j = 0; j < 2; j++) {
      check_heap(&w, &w.heaps[j]);
      atomic_fetch_add_explicit(&f_owner_checks, 1, memory_order_relaxed);
    }
    if (abandon && k + 1 == rounds) {
      /* Exit owning both heaps, published, with only their samples live. */
      for (int j = 0; j < 2; j++) {
        hrec *hr = &w.heaps[j];
        size_t keep = 0;
        for (size_t m = 0; m < hr->count; m++) {
          if (e[j] && hr->b[m].p == sample[j]) keep++;
          else release(&w.r, &hr->b[m]);
        }
        hr->count = 0;
        if (e[j]) {
          CHECK(keep == 1);
          pthread_mutex_lock(&e[j]->mu);
          e[j]->alive = false;
          pthread_mutex_unlock(&e[j]->mu);
        }
      }
      w.nheaps = 0;
      break;
    }
    for (size_t j = 2; j-- > 0;) {
      if (e[j]) {
        pthread_mutex_lock(&e[j]->mu);
        CHECK(e[j]->h == w.heaps[j].h && e[j]->sample == sample[j]);
        e[j]->h = NULL;
        e[j]->sample = NULL;
        pthread_mutex_unlock(&e[j]->mu);
      }
      if (fwt_next(&w.r) % 2) end_destroy(&w, j);
      else end_delete(&w, j);
    }
    for (size_t i = 0; i < w.ndef; i++) release(&w.r, &w.def[i]);
    w.ndef = 0;
  }
  for (size_t i = 0; i < w.ndef; i++) release(&w.r, &w.def[i]);
  fwt_scratch_free(w.store, worker_store);
  slot_done(slot);
  return NULL;
}

static void t_foreign(void) {
  double secs = stress_seconds() / 2;
  for (int i = 0; i < F_PUBS; i++) {
    CHECK(pthread_mutex_init(&pubs[i].mu, NULL) == 0);
    pubs[i].h = NULL;
  }
  atomic_store(&f_stop, false);
  double end = now_s() + secs;
  int running = 0;
  for (int i = 0; i < F_OWNERS; i++, running++) start_worker(i, owner_main);
  for (int i = F_OWNERS; i < F_OWNERS + F_PROBERS; i++, running++) start_worker(i, prober_main);
  while (running) {
    int slot = wait_done();
    CHECK(pthread_join(slots[slot].t, NULL) == 0);
    running--;
    if (now_s() < end) {
      start_worker(slot, slot < F_OWNERS ? owner_main : prober_main);
      running++;
    } else {
      atomic_store(&f_stop, true);
    }
  }
  /* One more owner that certainly leaves published heaps behind. */
  start_worker(F_OWNERS + F_PROBERS, owner_main);
  CHECK(wait_done() == F_OWNERS + F_PROBERS);
  CHECK(pthread_join(slots[F_OWNERS + F_PROBERS].t, NULL) == 0);
  /* Every owner has exited: each handle left in the table is dead, for main
   * as for anyone. Main never made a heap, so none of them is its own. */
  fwt_rng r;
  fwt_rng_init(&r, 7);
  size_t dead = 0;
  for (int i = 0; i < F_PUBS; i++) {
    pub *e = &pubs[i];
    if (!e->h) continue;
    CHECK(!e->alive);
    CHECK(e->h != X.heap_get_default());
    probe(&r, e);
    sample_free(e);
    dead++;
    pthread_mutex_destroy(&e->mu);
  }
  fwt_log("foreign: %lu probes of live heaps, %lu of dead ones (%zu by main at the end), %lu owner checks",
          atomic_load(&f_probes), atomic_load(&f_dead_probes), dead, atomic_load(&f_owner_checks));
  CHECKF(dead >= 1, "the last owner's heaps were not left in the table");
  CHECK(atomic_load(&f_owner_checks) > 0);
}

static const fwt_section sections[] = {
  {"waves", t_waves},
  {"foreign", t_foreign},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
