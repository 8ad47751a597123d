/* arena.c — address space in FW_SEGMENT_SIZE chunks. An arena is one large
 * mapping (FREEWAY_ARENA_RESERVE MiB at first, doubling every 64 arenas up
 * to 1 GiB) whose chunks' state lives in bitmaps: inuse (claimed), dirty
 * (touched and not yet purged) and marked (for the layer above). Claims and
 * releases are single compare-and-swap or fetch-and operations on one bitmap
 * word, so segments come and go without a lock; only adding an arena takes
 * one. A released chunk stays dirty for FREEWAY_PURGE_DELAY ms (the chunks
 * of a block above 2 MiB for FW_ARENA_LARGE_ROUNDS times that), so a
 * segment freed and needed again soon costs no page faults; the purge pass
 * then returns it to the OS. Claims look for dirty chunks first (a run of
 * them: the best fit among stretches of free dirty chunks). A chunk whose
 * purge fails (locked memory) stays dirty: it is never handed out as zeroed
 * memory.
 *
 * The table of arenas grows in blocks of 256 slots from metadata, with no
 * fixed cap below the address space. An arena unmapped because it was idle
 * (fw_arena_release_unused) leaves its slot for the next arena: the slot's
 * fields change while other threads may be scanning the table, so a claim
 * re-checks the arena's size after its compare-and-swap (which synchronises
 * with the release store that reopened the slot). */
#include "arena.h"
#include "os.h"
#include "meta.h"
#include "options.h"
#include "stats.h"

#define FW_ARENA_WORDS 4
#define FW_ARENA_CHUNKS_MAX (FW_ARENA_WORDS * 64)
#define FW_ARENA_BLOCK 256
#define FW_ARENA_BLOCKS 4096 /* 1M arenas: more than a 57-bit address space holds */

struct fw_arena_s {
  _Atomic(uint8_t *) base;
  _Atomic(uint32_t) chunks;
  _Atomic(bool) released;                /* unmapped; every chunk stays "in use" */
  _Atomic(uint64_t) inuse[FW_ARENA_WORDS];
  _Atomic(uint64_t) dirty[FW_ARENA_WORDS];
  _Atomic(uint64_t) marked[FW_ARENA_WORDS];
  _Atomic(uint64_t) parked[FW_ARENA_WORDS];  /* a marked chunk's holder has work left for it */
  _Atomic(uint64_t) huge[FW_ARENA_WORDS];  /* advised MADV_HUGEPAGE (the rest: NOHUGEPAGE);
                                              changed only by a chunk's holder */
  _Atomic(uint64_t) tail[2 * FW_ARENA_WORDS]; /* halves of huge chunks advised 4 KiB pages
                                                 apart (fw_arena_set_tail), bit 2c + i */
  _Atomic(uint64_t) due[FW_ARENA_CHUNKS_MAX]; /* ms: purge deadline while dirty and free,
                                                 the mark's deadline while marked */
};

static _Atomic(fw_arena_t *) fw_arena_blocks[FW_ARENA_BLOCKS];
static _Atomic(size_t) fw_arena_count;  /* slots ever used */
static _Atomic(size_t) fw_arena_epoch;  /* bumped when an arena is added */
static fw_lock_t fw_arena_grow_lock = FW_LOCK_INIT;
static _Atomic(uint64_t) fw_arena_next_purge;
static _Atomic(size_t) fw_arena_marks;
static _Atomic(size_t) fw_arena_tails;  /* bits set in every arena's tail[] */

static fw_arena_t *fw_arena_at(size_t i) {
  fw_arena_t *block = atomic_load_explicit(&fw_arena_blocks[i / FW_ARENA_BLOCK], memory_order_acquire);
  return &block[i % FW_ARENA_BLOCK];
}

static uint8_t *fw_arena_base(const fw_arena_t *a) {
  return atomic_load_explicit(&((fw_arena_t *)a)->base, memory_order_relaxed);
}
static uint32_t fw_arena_chunks(const fw_arena_t *a) {
  return atomic_load_explicit(&((fw_arena_t *)a)->chunks, memory_order_relaxed);
}

void *fw_arena_chunk_addr(const fw_arena_t *a, uint32_t chunk) {
  return fw_arena_base(a) + (size_t)chunk * FW_SEGMENT_SIZE;
}

void fw_arena_visit(fw_arena_visit_fn *fn, void *arg) {
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = fw_arena_at(i);
    uint8_t *base = fw_arena_base(a);
    if (!base || atomic_load_explicit(&a->released, memory_order_acquire)) continue;
    uint64_t inuse[FW_ARENA_WORDS], dirty[FW_ARENA_WORDS];
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
      inuse[w] = atomic_load_explicit(&a->inuse[w], memory_order_acquire);
      dirty[w] = atomic_load_explicit(&a->dirty[w], memory_order_relaxed);
    }
    fn(base, fw_arena_chunks(a), inuse, dirty, arg);
  }
}

static uint64_t fw_word_valid(uint32_t chunks, size_t w) {
  size_t first = w * 64;
  if (first >= chunks) return 0;
  return fw_mask_low(chunks - first);
}

/* Takes the run of n chunks at bit shift of word w if all of it is free. */
static bool fw_arena_claim_at(fw_arena_t *a, size_t w, unsigned shift, size_t n, uint32_t *chunk, bool *is_zero) {
  uint64_t m = fw_mask_low(n) << shift;
  uint64_t word = atomic_load_explicit(&a->inuse[w], memory_order_relaxed);
  do {
    if (word & m) return false;
  } while (!atomic_compare_exchange_weak_explicit(&a->inuse[w], &word, word | m, memory_order_acq_rel,
                                                  memory_order_relaxed));
  /* the slot may have been reopened with a smaller arena meanwhile */
  if (w * 64 + shift + n > fw_arena_chunks(a)) {
    atomic_fetch_and_explicit(&a->inuse[w], ~m, memory_order_release);
    return false;
  }
  uint64_t was_dirty = atomic_fetch_and_explicit(&a->dirty[w], ~m, memory_order_acq_rel) & m;
  *chunk = (uint32_t)(w * 64 + shift);
  *is_zero = was_dirty == 0;
  /* Clean chunks become committed as they are touched; count them now
   * so that "committed" stays an upper bound. */
  fw_stat_commit((size_t)fw_popcount64(m & ~was_dirty) * FW_SEGMENT_SIZE);
  return true;
}

/* Where in a word of free chunks to put a run of n: a single chunk on any
 * warm one; a longer run where it covers the most warm chunks (the first
 * such place), so that a block fills what a freed one left before it
 * reaches untouched chunks. -1: no room. */
static int fw_arena_place(uint64_t freebits, uint64_t dirty, size_t n) {
  uint64_t warm = freebits & dirty;
  if (n == 1) return freebits ? (int)fw_ctz64(warm ? warm : freebits) : -1;
  uint64_t starts = fw_mask_run_starts(freebits, n);
  if (!starts) return -1;
  int best = (int)fw_ctz64(starts);
  if (!warm) return best;
  uint64_t mask = fw_mask_low(n);
  unsigned most = fw_popcount64(warm & (mask << best));
  for (uint64_t c = starts & (starts - 1); c && most < n; c &= c - 1) {
    unsigned s = fw_ctz64(c), k = fw_popcount64(warm & (mask << s));
    if (k > most) most = k, best = (int)s;
  }
  return best;
}

/* Claims a run of n free chunks inside one bitmap word of a (see
 * fw_arena_place for where). */
static bool fw_arena_claim(fw_arena_t *a, size_t n, uint32_t *chunk, bool *is_zero) {
  if (atomic_load_explicit(&a->released, memory_order_acquire)) return false;
  uint32_t chunks = fw_arena_chunks(a);
  for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
    uint64_t valid = fw_word_valid(chunks, w);
    if (!valid) break;
    /* a failed claim means another thread took some of those chunks: look
     * again at what is left */
    for (;;) {
      uint64_t freebits = ~atomic_load_explicit(&a->inuse[w], memory_order_relaxed) & valid;
      int shift = fw_arena_place(freebits, atomic_load_explicit(&a->dirty[w], memory_order_relaxed), n);
      if (shift < 0) break;
      if (fw_arena_claim_at(a, w, (unsigned)shift, n, chunk, is_zero)) return true;
      if (w * 64 + (size_t)shift + n > fw_arena_chunks(a)) return false;
    }
  }
  return false;
}

/* A run of n chunks that are all free and warm, anywhere: for n > 1 the
 * shortest stretch of free warm chunks that holds it (best fit), so that a
 * small block does not cut into the stretch a bigger one freed, which the
 * next big request will want whole; a single chunk takes the first warm
 * one. fw_arena_claim looks at one bitmap word after another and would
 * take a cold chunk of an early word while a later one holds a warm one (a
 * segment a thread hands back to be used for one of another kind,
 * segment.c). Not the best fit for a single chunk too: new threads then
 * took warm chunks other than the one the last thread had left
 * (bench_threadwave --threads 4 --waves 5000 --ops 50 --window 20, 13
 * runs: 355 -> 433 ms). */
static bool fw_arena_claim_warm(size_t n, fw_arena_t **arena, uint32_t *chunk, bool *is_zero) {
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  fw_arena_t *best = NULL;
  size_t best_w = 0;
  unsigned best_s = 0, best_len = 65;
  for (size_t i = 0; i < count && best_len > n; i++) {
    fw_arena_t *a = fw_arena_at(i);
    if (atomic_load_explicit(&a->released, memory_order_acquire)) continue;
    uint32_t chunks = fw_arena_chunks(a);
    for (size_t w = 0; w < FW_ARENA_WORDS && best_len > n; w++) {
      uint64_t warm = ~atomic_load_explicit(&a->inuse[w], memory_order_relaxed) &
                      atomic_load_explicit(&a->dirty[w], memory_order_relaxed) & fw_word_valid(chunks, w);
      while (warm) {
        unsigned s = fw_ctz64(warm), len = fw_mask_run_at(warm, s);
        if (n == 1) len = 1;  /* the first warm chunk: take it */
        if (len >= n && len < best_len) best = a, best_w = w, best_s = s, best_len = len;
        warm &= ~(fw_mask_low(len) << s);
      }
    }
  }
  if (!best || !fw_arena_claim_at(best, best_w, best_s, n, chunk, is_zero)) return false;
  *arena = best;
  return true;
}

/* The preferred size of the next arena: the configured reserve, doubled
 * every 64 arenas, so that the table stays short at any heap size. */
static size_t fw_arena_want(size_t count, size_t min_chunks) {
  size_t want = ((size_t)fw_opt(ARENA_RESERVE) << 20) / FW_SEGMENT_SIZE;
  if (want < 1) want = 1;
  size_t shift = count / 64;
  while (shift-- && want < FW_ARENA_CHUNKS_MAX) want *= 2;
  if (want > FW_ARENA_CHUNKS_MAX) want = FW_ARENA_CHUNKS_MAX;
  if (want < min_chunks) want = min_chunks;
  return want;
}

static fw_arena_t *fw_arena_slot(size_t count) {
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = fw_arena_at(i);
    if (atomic_load_explicit(&a->released, memory_order_acquire)) return a;
  }
  if (count >= (size_t)FW_ARENA_BLOCKS * FW_ARENA_BLOCK) return NULL;
  size_t b = count / FW_ARENA_BLOCK;
  if (!atomic_load_explicit(&fw_arena_blocks[b], memory_order_relaxed)) {
    fw_arena_t *block = fw_meta_alloc(sizeof(fw_arena_t) * FW_ARENA_BLOCK);
    if (!block) return NULL;
    atomic_store_explicit(&fw_arena_blocks[b], block, memory_order_release);
  }
  return fw_arena_at(count);
}

static bool fw_arena_add(size_t min_chunks) {
  fw_lock_acquire(&fw_arena_grow_lock);
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  bool ok = false;
  fw_arena_t *a = fw_arena_slot(count);
  size_t want = fw_arena_want(count, min_chunks);
  while (a && want >= min_chunks) {
    uint8_t *p = fw_os_map(want * FW_SEGMENT_SIZE, FW_SEGMENT_SIZE, 0);
    if (p) {
      /* whole arena one way: segments that want the other ask per chunk */
      bool huge = fw_opt(THP) == FW_THP_ALWAYS && fw_os_thp(p, want * FW_SEGMENT_SIZE, true);
      if (!huge) fw_os_thp(p, want * FW_SEGMENT_SIZE, false);
      bool reuse = atomic_load_explicit(&a->released, memory_order_relaxed);
      atomic_store_explicit(&a->base, p, memory_order_relaxed);
      atomic_store_explicit(&a->chunks, (uint32_t)want, memory_order_relaxed);
      for (size_t w = 0; reuse && w < 2 * FW_ARENA_WORDS; w++) {  /* a released arena's, gone with it */
        uint64_t t = atomic_load_explicit(&a->tail[w], memory_order_relaxed);
        atomic_fetch_sub_explicit(&fw_arena_tails, fw_popcount64(t), memory_order_relaxed);
      }
      for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
        atomic_store_explicit(&a->dirty[w], 0, memory_order_relaxed);
        atomic_store_explicit(&a->marked[w], 0, memory_order_relaxed);
        atomic_store_explicit(&a->parked[w], 0, memory_order_relaxed);
        atomic_store_explicit(&a->huge[w], huge ? ~(uint64_t)0 : 0, memory_order_relaxed);
        atomic_store_explicit(&a->tail[2 * w], 0, memory_order_relaxed);
        atomic_store_explicit(&a->tail[2 * w + 1], 0, memory_order_relaxed);
      }
      fw_stat_add(reserved, want * FW_SEGMENT_SIZE);
      if (reuse) {
        atomic_store_explicit(&a->released, false, memory_order_release);
        for (size_t w = 0; w < FW_ARENA_WORDS; w++) atomic_store_explicit(&a->inuse[w], 0, memory_order_release);
      } else {
        atomic_store_explicit(&fw_arena_count, count + 1, memory_order_release);
      }
      atomic_fetch_add_explicit(&fw_arena_epoch, 1, memory_order_release);
      ok = true;
      break;
    }
    if (want == min_chunks) break;
    want /= 2;
    if (want < min_chunks) want = min_chunks;
  }
  fw_lock_release(&fw_arena_grow_lock);
  return ok;
}

void *fw_arena_alloc(size_t chunks, fw_arena_t **arena, uint32_t *chunk, bool *is_zero) {
  if (chunks == 0 || chunks > FW_ARENA_MAX_CHUNKS) return NULL;
  if (fw_arena_claim_warm(chunks, arena, chunk, is_zero)) return fw_arena_chunk_addr(*arena, *chunk);
  for (int attempt = 0; attempt < 4; attempt++) {
    size_t epoch = atomic_load_explicit(&fw_arena_epoch, memory_order_acquire);
    size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
    for (size_t i = 0; i < count; i++) {
      fw_arena_t *a = fw_arena_at(i);
      if (fw_arena_chunks(a) < chunks) continue;
      if (fw_arena_claim(a, chunks, chunk, is_zero)) {
        *arena = a;
        return fw_arena_chunk_addr(a, *chunk);
      }
    }
    /* Another thread may have added an arena meanwhile; add one only if not. */
    if (atomic_load_explicit(&fw_arena_epoch, memory_order_acquire) == epoch && !fw_arena_add(chunks)) {
      /* Address space is short: give back what is cached and try once more. */
      if (attempt == 0) {
        fw_arena_purge(0, true);
        continue;
      }
      return NULL;
    }
  }
  return NULL;
}

bool fw_arena_extend(fw_arena_t *a, uint32_t chunk, size_t chunks, size_t more) {
  size_t w = chunk / 64, s = chunk % 64;
  /* a segment's chunks share one bitmap word */
  if (more == 0 || s + chunks + more > 64 || chunk + chunks + more > fw_arena_chunks(a)) return false;
  uint64_t m = fw_mask_low(more) << (s + chunks);
  uint64_t word = atomic_load_explicit(&a->inuse[w], memory_order_relaxed);
  do {
    if (word & m) return false;
  } while (!atomic_compare_exchange_weak_explicit(&a->inuse[w], &word, word | m, memory_order_acq_rel,
                                                  memory_order_relaxed));
  uint64_t was_dirty = atomic_fetch_and_explicit(&a->dirty[w], ~m, memory_order_acq_rel) & m;
  fw_stat_commit((size_t)fw_popcount64(m & ~was_dirty) * FW_SEGMENT_SIZE);
  return true;
}

#define FW_HALF_CHUNK (FW_SEGMENT_SIZE / 2)

/* The bits of word w of tail[] that stand for halves in [h0, h1). */
static uint64_t fw_tail_mask(size_t w, size_t h0, size_t h1) {
  uint64_t m = w == h0 / 64 ? ~(uint64_t)0 << (h0 % 64) : ~(uint64_t)0;
  return m & fw_mask_low(h1 - w * 64);
}

bool fw_arena_set_huge(fw_arena_t *a, uint32_t chunk, size_t chunks, bool huge) {
  size_t w = chunk / 64;
  uint64_t m = fw_mask_low(chunks) << (chunk % 64);
  uint64_t now = atomic_load_explicit(&a->huge[w], memory_order_relaxed) & m;
  if (now == (huge ? m : 0)) return huge;
  if (!fw_os_thp(fw_arena_chunk_addr(a, chunk), chunks * FW_SEGMENT_SIZE, huge)) return now == m;
  if (huge) atomic_fetch_or_explicit(&a->huge[w], m, memory_order_relaxed);
  else atomic_fetch_and_explicit(&a->huge[w], ~m, memory_order_relaxed);
  /* the whole range has one advice now */
  size_t h0 = 2 * (size_t)chunk, h1 = h0 + 2 * chunks;
  for (size_t w2 = h0 / 64; w2 * 64 < h1; w2++) {
    uint64_t was = atomic_fetch_and_explicit(&a->tail[w2], ~fw_tail_mask(w2, h0, h1), memory_order_relaxed);
    unsigned gone = fw_popcount64(was & fw_tail_mask(w2, h0, h1));
    if (gone) atomic_fetch_sub_explicit(&fw_arena_tails, gone, memory_order_relaxed);
  }
  return huge;
}

/* Each half advised apart is a mapping of its own to the kernel (two more
 * entries in /proc/self/maps while its neighbours keep the huge advice),
 * and a process may have only vm.max_map_count of them (65,530 by
 * default): the process keeps at most FREEWAY_THP_TAILS. 96 blocks of 4 to
 * 12 MiB replaced 4 times: from 38 to 198 mappings with no limit, 74 with
 * 16 (48 before any half was advised apart). */
void fw_arena_set_tail(fw_arena_t *a, uint32_t chunk, size_t chunks, size_t keep, bool others_back) {
  uint8_t *base = fw_arena_chunk_addr(a, chunk);
  size_t h0 = 2 * (size_t)chunk, h1 = h0 + 2 * chunks;
  for (size_t w = h0 / 64; others_back && w * 64 < h1; w++) {
    uint64_t m = fw_tail_mask(w, h0, h1);
    for (uint64_t x = atomic_load_explicit(&a->tail[w], memory_order_relaxed) & m; x; x &= x - 1) {
      size_t h = w * 64 + fw_ctz64(x);
      if (h != keep && fw_os_thp(base + (h - h0) * FW_HALF_CHUNK, FW_HALF_CHUNK, true)) {
        atomic_fetch_and_explicit(&a->tail[w], ~((uint64_t)1 << (h % 64)), memory_order_relaxed);
        atomic_fetch_sub_explicit(&fw_arena_tails, 1, memory_order_relaxed);
      }
    }
  }
  if (keep < h0 || keep >= h1) return;
  uint64_t bit = (uint64_t)1 << (keep % 64);
  if (atomic_load_explicit(&a->tail[keep / 64], memory_order_relaxed) & bit) return;
  /* a claim of the budget first: holders of other chunks may be adding theirs */
  if (atomic_fetch_add_explicit(&fw_arena_tails, 1, memory_order_relaxed) >= (size_t)fw_opt(THP_TAILS) ||
      !fw_os_thp(base + (keep - h0) * FW_HALF_CHUNK, FW_HALF_CHUNK, false)) {
    atomic_fetch_sub_explicit(&fw_arena_tails, 1, memory_order_relaxed);
    return;
  }
  atomic_fetch_or_explicit(&a->tail[keep / 64], bit, memory_order_relaxed);
}

/* Purges the chunks of run [s, s + n) of word w; false if the OS refused. */
static bool fw_arena_purge_run(fw_arena_t *a, size_t w, size_t s, size_t n) {
  if (!fw_os_purge(fw_arena_chunk_addr(a, (uint32_t)(w * 64 + s)), n * FW_SEGMENT_SIZE)) {
    /* locked memory: it stays dirty, and is not tried again until forced */
    for (size_t i = 0; i < n; i++)
      atomic_store_explicit(&a->due[w * 64 + s + i], UINT64_MAX, memory_order_relaxed);
    return false;
  }
  fw_stat_add(purged, n * FW_SEGMENT_SIZE);
  fw_stat_sub(committed, n * FW_SEGMENT_SIZE);
  return true;
}

static void fw_arena_purge_word(fw_arena_t *a, size_t w, uint64_t now, bool force) {
  uint64_t cand = atomic_load_explicit(&a->dirty[w], memory_order_acquire);
  uint64_t word = atomic_load_explicit(&a->inuse[w], memory_order_relaxed);
  cand &= ~word & fw_word_valid(fw_arena_chunks(a), w);
  if (!force) {
    for (uint64_t c = cand; c; c &= c - 1) {
      unsigned b = fw_ctz64(c);
      if (atomic_load_explicit(&a->due[w * 64 + b], memory_order_relaxed) > now) cand &= ~((uint64_t)1 << b);
    }
  }
  if (!cand) return;
  /* Claim the candidates so that nobody allocates them while we purge. */
  while (true) {
    uint64_t take = cand & ~word;
    if (!take) return;
    if (atomic_compare_exchange_weak_explicit(&a->inuse[w], &word, word | take, memory_order_acq_rel,
                                              memory_order_relaxed)) {
      cand = take;
      break;
    }
  }
  uint64_t purged = 0;
  for (uint64_t c = cand; c;) {
    size_t s = fw_ctz64(c), e = s;
    while (e < 63 && (c & ((uint64_t)1 << (e + 1)))) e++;
    uint64_t run = fw_mask_low(e - s + 1) << s;
    if (fw_arena_purge_run(a, w, s, e - s + 1)) purged |= run;
    c &= ~run;
  }
  atomic_fetch_and_explicit(&a->dirty[w], ~purged, memory_order_acq_rel);
  atomic_fetch_and_explicit(&a->inuse[w], ~cand, memory_order_release);
}

void fw_arena_purge(uint64_t now, bool force) {
  if (!force) {
    uint64_t next = atomic_load_explicit(&fw_arena_next_purge, memory_order_relaxed);
    if (now < next) return;
    /* One thread at a time does the pass; others carry on. */
    if (!atomic_compare_exchange_strong(&fw_arena_next_purge, &next, now + 5)) return;
  }
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = fw_arena_at(i);
    if (atomic_load_explicit(&a->released, memory_order_acquire)) continue;
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) fw_arena_purge_word(a, w, now, force);
  }
}

static void fw_arena_free_ex(fw_arena_t *a, uint32_t chunk, size_t chunks, bool purge_now, unsigned rounds) {
  long delay = fw_opt(PURGE_DELAY);
  size_t w = chunk / 64, s = chunk % 64;
  uint64_t m = fw_mask_low(chunks) << s;
  bool purged = (delay == 0 || purge_now) && fw_arena_purge_run(a, w, s, chunks);
  if (!purged) {
    uint64_t due = delay < 0 ? UINT64_MAX : fw_os_clock_ms() + (uint64_t)delay * rounds;
    if (delay == 0 || purge_now) due = UINT64_MAX; /* the purge just failed */
    for (size_t i = 0; i < chunks; i++) atomic_store_explicit(&a->due[chunk + i], due, memory_order_relaxed);
    atomic_fetch_or_explicit(&a->dirty[w], m, memory_order_release);
  }
  atomic_fetch_and_explicit(&a->inuse[w], ~m, memory_order_release);
}

void fw_arena_free(fw_arena_t *a, uint32_t chunk, size_t chunks, bool purge_now) {
  fw_arena_free_ex(a, chunk, chunks, purge_now, 1);
}

void fw_arena_free_large(fw_arena_t *a, uint32_t chunk, size_t chunks) {
  fw_arena_free_ex(a, chunk, chunks, false, FW_ARENA_LARGE_ROUNDS);
}

/* ---- marks ----------------------------------------------------------------- */
void fw_arena_mark(fw_arena_t *a, uint32_t chunk, uint64_t due) {
  /* due[] of a chunk in use is free to hold the mark's deadline */
  atomic_store_explicit(&a->due[chunk], due, memory_order_relaxed);
  atomic_fetch_add_explicit(&fw_arena_marks, 1, memory_order_relaxed);
  atomic_fetch_or_explicit(&a->marked[chunk / 64], (uint64_t)1 << (chunk % 64), memory_order_seq_cst);
}

uint64_t fw_arena_due(fw_arena_t *a, uint32_t chunk) {
  return atomic_load_explicit(&a->due[chunk], memory_order_relaxed);
}

static bool fw_arena_take_mark(fw_arena_t *a, uint32_t chunk) {
  uint64_t bit = (uint64_t)1 << (chunk % 64);
  if (!(atomic_fetch_and_explicit(&a->marked[chunk / 64], ~bit, memory_order_seq_cst) & bit)) return false;
  atomic_fetch_sub_explicit(&fw_arena_marks, 1, memory_order_relaxed);
  return true;
}

bool fw_arena_unmark(fw_arena_t *a, uint32_t chunk) {
  /* seq_cst for the park bit's handshake (fw_arena_park); a plain load on x86 */
  if (!(atomic_load_explicit(&a->marked[chunk / 64], memory_order_seq_cst) & ((uint64_t)1 << (chunk % 64))))
    return false;
  return fw_arena_take_mark(a, chunk);
}

/* The park bit and the mark meet as in Dekker's algorithm: a thread that
 * leaves work sets the bit and then tries to take the mark; a holder puts
 * the mark back and then looks at the bit. With every one of these
 * operations sequentially consistent, one of the two sees the other's. */
void fw_arena_park(fw_arena_t *a, uint32_t chunk) {
  atomic_fetch_or_explicit(&a->parked[chunk / 64], (uint64_t)1 << (chunk % 64), memory_order_seq_cst);
}

bool fw_arena_parked(fw_arena_t *a, uint32_t chunk) {
  return (atomic_load_explicit(&a->parked[chunk / 64], memory_order_seq_cst) >> (chunk % 64)) & 1;
}

bool fw_arena_take_parked(fw_arena_t *a, uint32_t chunk) {
  uint64_t bit = (uint64_t)1 << (chunk % 64);
  if (!(atomic_load_explicit(&a->parked[chunk / 64], memory_order_relaxed) & bit)) return false;
  return (atomic_fetch_and_explicit(&a->parked[chunk / 64], ~bit, memory_order_seq_cst) & bit) != 0;
}

size_t fw_arena_marked(void) { return atomic_load_explicit(&fw_arena_marks, memory_order_relaxed); }

void *fw_arena_unmark_any(void) {
  if (fw_arena_marked() == 0) return NULL;
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = fw_arena_at(i);
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
      for (uint64_t bits = atomic_load_explicit(&a->marked[w], memory_order_relaxed); bits; bits &= bits - 1) {
        uint32_t chunk = (uint32_t)(w * 64 + fw_ctz64(bits));
        if (fw_arena_take_mark(a, chunk)) return fw_arena_chunk_addr(a, chunk);
      }
    }
  }
  return NULL;
}

void *fw_arena_unmark_due(uint64_t now, bool force, size_t *cursor) {
  if (fw_arena_marked() == 0) return NULL;
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t pos = *cursor; pos < count * FW_ARENA_CHUNKS_MAX; pos++) {
    fw_arena_t *a = fw_arena_at(pos / FW_ARENA_CHUNKS_MAX);
    uint32_t chunk = (uint32_t)(pos % FW_ARENA_CHUNKS_MAX);
    uint64_t word = atomic_load_explicit(&a->marked[chunk / 64], memory_order_relaxed) >> (chunk % 64);
    if (!word) {
      pos = pos - chunk % 64 + 63; /* nothing more in this word */
      continue;
    }
    if (!(word & 1)) continue;
    uint64_t due = atomic_load_explicit(&a->due[chunk], memory_order_relaxed);
    if (due == 0 || (!force && due > now) || !fw_arena_take_mark(a, chunk)) continue;
    *cursor = pos + 1;
    return fw_arena_chunk_addr(a, chunk);
  }
  *cursor = count * FW_ARENA_CHUNKS_MAX;
  return NULL;
}

/* Each word of an arena is claimed whole; if any is in use, the claims are
 * undone. A fully claimed arena is unmapped and its slot marked released,
 * which keeps every claim failing until fw_arena_add reopens the slot. */
size_t fw_arena_release_unused(void) {
  size_t released = 0;
  fw_lock_acquire(&fw_arena_grow_lock);
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = fw_arena_at(i);
    if (atomic_load_explicit(&a->released, memory_order_relaxed)) continue;
    size_t w = 0;
    for (; w < FW_ARENA_WORDS; w++) {
      uint64_t zero = 0;
      if (!atomic_compare_exchange_strong_explicit(&a->inuse[w], &zero, ~(uint64_t)0, memory_order_acq_rel,
                                                   memory_order_relaxed))
        break;
    }
    if (w < FW_ARENA_WORDS) {
      while (w-- > 0) atomic_store_explicit(&a->inuse[w], 0, memory_order_release);
      continue;
    }
    uint32_t chunks = fw_arena_chunks(a);
    size_t dirty = 0;
    for (w = 0; w < FW_ARENA_WORDS; w++)
      dirty += fw_popcount64(atomic_exchange_explicit(&a->dirty[w], 0, memory_order_acq_rel) &
                             fw_word_valid(chunks, w));
    atomic_store_explicit(&a->released, true, memory_order_release);
    size_t bytes = (size_t)chunks * FW_SEGMENT_SIZE;
    fw_stat_sub(committed, dirty * FW_SEGMENT_SIZE);
    fw_stat_sub(reserved, bytes);
    fw_os_unmap(fw_arena_base(a), bytes);
    released += bytes;
  }
  fw_lock_release(&fw_arena_grow_lock);
  return released;
}

bool fw_arena_contains(const void *p) {
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    const fw_arena_t *a = fw_arena_at(i);
    if (atomic_load_explicit(&((fw_arena_t *)a)->released, memory_order_acquire)) continue;
    const uint8_t *base = fw_arena_base(a);
    if ((const uint8_t *)p >= base && (const uint8_t *)p < base + (size_t)fw_arena_chunks(a) * FW_SEGMENT_SIZE)
      return true;
  }
  return false;
}

void fw_arena_fork_prepare(void) { fw_lock_acquire(&fw_arena_grow_lock); }
void fw_arena_fork_parent(void) { fw_lock_release(&fw_arena_grow_lock); }
void fw_arena_fork_child(void) { fw_lock_reset(&fw_arena_grow_lock); }
