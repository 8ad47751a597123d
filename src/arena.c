/* arena.c — address space in FW_SEGMENT_SIZE chunks. An arena is one large
 * mapping (FREEWAY_ARENA_RESERVE MiB, 1 GiB by default) cut into chunks whose
 * state lives in two bitmaps: inuse (claimed by a segment) and dirty (touched
 * and not yet purged). Claims and releases are single compare-and-swap or
 * fetch-and operations on one bitmap word, so segments come and go without a
 * lock; only adding an arena takes one (once per GiB). A released chunk stays
 * dirty for FREEWAY_PURGE_DELAY ms so that a segment freed and needed again
 * soon costs no page faults; the purge pass then returns it to the OS.
 * See alloc.c for the whole design. */
#define _GNU_SOURCE
#include "internal.h"
#include <pthread.h>
#include <string.h>

#define FW_ARENA_WORDS 4
#define FW_ARENA_CHUNKS_MAX (FW_ARENA_WORDS * 64)
#define FW_MAX_ARENAS 1024

struct fw_arena_s {
  uint8_t *base;                         /* written once before count is raised */
  uint32_t chunks;
  _Atomic(bool) released;                /* unmapped; every chunk stays "in use" */
  _Atomic(uint64_t) inuse[FW_ARENA_WORDS];
  _Atomic(uint64_t) dirty[FW_ARENA_WORDS];
  _Atomic(uint64_t) abandoned[FW_ARENA_WORDS];     /* first chunk of an abandoned segment */
  _Atomic(uint64_t) purge_at[FW_ARENA_CHUNKS_MAX]; /* ms; valid while dirty and free */
};

static fw_arena_t fw_arenas[FW_MAX_ARENAS];
static _Atomic(size_t) fw_arena_count;
static pthread_mutex_t fw_arena_grow_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(uint64_t) fw_arena_next_purge;

static uint64_t fw_word_valid(const fw_arena_t *a, size_t w) {
  size_t first = w * 64;
  if (first >= a->chunks) return 0;
  size_t n = a->chunks - first;
  return n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
}

/* Claims a run of n free chunks inside one bitmap word, preferring chunks
 * that are still dirty (warm) when n == 1. */
static bool fw_arena_claim(fw_arena_t *a, size_t n, uint32_t *chunk, bool *is_zero) {
  uint64_t mask = n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
  for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
    uint64_t valid = fw_word_valid(a, w);
    if (!valid) break;
    uint64_t word = atomic_load_explicit(&a->inuse[w], memory_order_relaxed);
    while (true) {
      uint64_t freebits = ~word & valid;
      if (!freebits) break;
      int shift = -1;
      if (n == 1) {
        uint64_t warm = freebits & atomic_load_explicit(&a->dirty[w], memory_order_relaxed);
        shift = __builtin_ctzll(warm ? warm : freebits);
      } else {
        for (int s = 0; s + (int)n <= 64; s++) {
          uint64_t m = mask << s;
          if ((freebits & m) == m) { shift = s; break; }
        }
      }
      if (shift < 0) break;
      uint64_t m = mask << shift;
      if (atomic_compare_exchange_weak_explicit(&a->inuse[w], &word, word | m,
                                                memory_order_acq_rel, memory_order_relaxed)) {
        uint64_t was_dirty = atomic_fetch_and_explicit(&a->dirty[w], ~m, memory_order_acq_rel) & m;
        *chunk = (uint32_t)(w * 64 + (size_t)shift);
        *is_zero = was_dirty == 0;
        /* Clean chunks become committed as they are touched; count them now
         * so that "committed" stays an upper bound. */
        fw_stat_add(committed, (size_t)__builtin_popcountll(m & ~was_dirty) * FW_SEGMENT_SIZE);
        return true;
      }
    }
  }
  return false;
}

static bool fw_arena_add(size_t min_chunks) {
  pthread_mutex_lock(&fw_arena_grow_lock);
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  bool ok = false;
  if (count < FW_MAX_ARENAS) {
    size_t want = ((size_t)fw_opt(ARENA_RESERVE) << 20) / FW_SEGMENT_SIZE;
    if (want > FW_ARENA_CHUNKS_MAX) want = FW_ARENA_CHUNKS_MAX;
    if (want < min_chunks) want = min_chunks;
    while (want >= min_chunks) {
      void *p = fw_os_map(want * FW_SEGMENT_SIZE, FW_SEGMENT_SIZE);
      if (p) {
        if (!fw_opt(THP)) fw_os_thp_disable(p, want * FW_SEGMENT_SIZE);
        fw_arena_t *a = &fw_arenas[count];
        a->base = p;
        a->chunks = (uint32_t)want;
        fw_stat_add(reserved, want * FW_SEGMENT_SIZE);
        atomic_store_explicit(&fw_arena_count, count + 1, memory_order_release);
        ok = true;
        break;
      }
      if (want == min_chunks) break;
      want /= 2;
      if (want < min_chunks) want = min_chunks;
    }
  } 
  pthread_mutex_unlock(&fw_arena_grow_lock);
  return ok;
}

void *fw_arena_alloc(size_t chunks, fw_arena_t **arena, uint32_t *chunk, bool *is_zero) {
  if (chunks == 0 || chunks > FW_ARENA_MAX_CHUNKS) return NULL;
  for (int attempt = 0; attempt < 3; attempt++) {
    size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
    for (size_t i = 0; i < count; i++) {
      fw_arena_t *a = &fw_arenas[i];
      if (a->chunks < chunks) continue;
      if (fw_arena_claim(a, chunks, chunk, is_zero)) {
        *arena = a;
        return a->base + (size_t)*chunk * FW_SEGMENT_SIZE;
      }
    }
    /* Another thread may have added an arena meanwhile; add one only if not. */
    if (atomic_load_explicit(&fw_arena_count, memory_order_acquire) == count && !fw_arena_add(chunks)) {
      /* Address space is short: give back what is cached and try once more. */
      if (attempt == 0) { fw_arena_purge(0, true); continue; }
      return NULL;
    }
  }
  return NULL;
}

static void fw_arena_purge_word(fw_arena_t *a, size_t w, uint64_t now, bool force) {
  uint64_t cand = atomic_load_explicit(&a->dirty[w], memory_order_acquire);
  uint64_t word = atomic_load_explicit(&a->inuse[w], memory_order_relaxed);
  cand &= ~word & fw_word_valid(a, w);
  if (!force) {
    for (uint64_t c = cand; c; c &= c - 1) {
      int b = __builtin_ctzll(c);
      if (atomic_load_explicit(&a->purge_at[w * 64 + (size_t)b], memory_order_relaxed) > now)
        cand &= ~((uint64_t)1 << b);
    }
  }
  if (!cand) return;
  /* Claim the candidates so that nobody allocates them while we purge. */
  while (true) {
    uint64_t take = cand & ~word;
    if (!take) return;
    if (atomic_compare_exchange_weak_explicit(&a->inuse[w], &word, word | take,
                                              memory_order_acq_rel, memory_order_relaxed)) {
      cand = take;
      break;
    }
  }
  uint64_t c = cand;
  while (c) {
    int s = __builtin_ctzll(c);
    int e = s;
    while (e < 63 && (c & ((uint64_t)1 << (e + 1)))) e++;
    size_t run = (size_t)(e - s + 1);
    fw_os_purge(a->base + (w * 64 + (size_t)s) * FW_SEGMENT_SIZE, run * FW_SEGMENT_SIZE);
    fw_stat_add(purged, run * FW_SEGMENT_SIZE);
    fw_stat_sub(committed, run * FW_SEGMENT_SIZE);
    c &= (e == 63) ? 0 : ~(((uint64_t)2 << e) - 1);
  }
  atomic_fetch_and_explicit(&a->dirty[w], ~cand, memory_order_acq_rel);
  atomic_fetch_and_explicit(&a->inuse[w], ~cand, memory_order_release);
}

static void fw_arena_purge_abandoned(uint64_t now, bool force);

void fw_arena_purge(uint64_t now, bool force) {
  if (!force) {
    uint64_t next = atomic_load_explicit(&fw_arena_next_purge, memory_order_relaxed);
    if (now < next) return;
    /* One thread at a time does the pass; others carry on. */
    if (!atomic_compare_exchange_strong(&fw_arena_next_purge, &next, now + 5)) return;
  }
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++)
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) fw_arena_purge_word(&fw_arenas[i], w, now, force);
  fw_arena_purge_abandoned(now, force);
}

void fw_arena_free(fw_arena_t *a, uint32_t chunk, size_t chunks, bool purge_now) {
  long delay = fw_opt(PURGE_DELAY);
  uint8_t *p = a->base + (size_t)chunk * FW_SEGMENT_SIZE;
  size_t w = chunk / 64, s = chunk % 64;
  uint64_t m = (chunks >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << chunks) - 1)) << s;
  if (delay == 0 || purge_now) {
    fw_os_purge(p, chunks * FW_SEGMENT_SIZE);
    fw_stat_add(purged, chunks * FW_SEGMENT_SIZE);
    fw_stat_sub(committed, chunks * FW_SEGMENT_SIZE);
  } else {
    uint64_t due = delay < 0 ? UINT64_MAX : fw_os_clock_ms() + (uint64_t)delay;
    for (size_t i = 0; i < chunks; i++)
      atomic_store_explicit(&a->purge_at[chunk + i], due, memory_order_relaxed);
    atomic_fetch_or_explicit(&a->dirty[w], m, memory_order_release);
  }
  atomic_fetch_and_explicit(&a->inuse[w], ~m, memory_order_release);
}

/* ---- abandoned segments ----------------------------------------------------
 * A segment whose thread exited while it still held live blocks is marked by
 * one bit at its first chunk. Whoever clears the bit (one atomic operation)
 * owns the segment: a thread that needs a segment scans for any bit, a
 * thread that frees into an abandoned segment clears that segment's bit.
 * No list to link, so no lock and no ABA, and the memory is never unmapped
 * while marked. */
static _Atomic(size_t) fw_abandoned_hint;  /* marked segments, read as a hint */

void fw_arena_mark_abandoned(fw_arena_t *a, uint32_t chunk, uint64_t purge_due) {
  /* purge_at of a chunk in use is free to hold the segment's deadline */
  atomic_store_explicit(&a->purge_at[chunk], purge_due, memory_order_relaxed);
  atomic_fetch_add_explicit(&fw_abandoned_hint, 1, memory_order_relaxed);
  atomic_fetch_or_explicit(&a->abandoned[chunk / 64], (uint64_t)1 << (chunk % 64), memory_order_release);
}

static bool fw_arena_take_bit(fw_arena_t *a, uint32_t chunk) {
  uint64_t bit = (uint64_t)1 << (chunk % 64);
  if (!(atomic_fetch_and_explicit(&a->abandoned[chunk / 64], ~bit, memory_order_acq_rel) & bit)) return false;
  atomic_fetch_sub_explicit(&fw_abandoned_hint, 1, memory_order_relaxed);
  return true;
}

bool fw_arena_reclaim(fw_arena_t *a, uint32_t chunk) {
  if (!(atomic_load_explicit(&a->abandoned[chunk / 64], memory_order_relaxed) & ((uint64_t)1 << (chunk % 64))))
    return false;
  return fw_arena_take_bit(a, chunk);
}

/* An abandoned segment's free pages stay warm for the thread that will
 * adopt it (threads that come and go in waves find them without page
 * faults) until the segment's deadline; then the purge pass takes the
 * segment for a moment, purges them and marks it abandoned again. */
static void fw_arena_purge_abandoned(uint64_t now, bool force) {
  if (atomic_load_explicit(&fw_abandoned_hint, memory_order_relaxed) == 0) return;
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = &fw_arenas[i];
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
      for (uint64_t bits = atomic_load_explicit(&a->abandoned[w], memory_order_relaxed); bits; bits &= bits - 1) {
        uint32_t chunk = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
        uint64_t due = atomic_load_explicit(&a->purge_at[chunk], memory_order_relaxed);
        if (due == 0 || (!force && due > now) || !fw_arena_take_bit(a, chunk)) continue;
        fw_segment_purge_abandoned(a->base + (size_t)chunk * FW_SEGMENT_SIZE);
        fw_arena_mark_abandoned(a, chunk, 0);
      }
    }
  }
}

void *fw_arena_reclaim_any(void) {
  if (atomic_load_explicit(&fw_abandoned_hint, memory_order_relaxed) == 0) return NULL;
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = &fw_arenas[i];
    for (size_t w = 0; w < FW_ARENA_WORDS; w++) {
      uint64_t bits = atomic_load_explicit(&a->abandoned[w], memory_order_relaxed);
      while (bits) {
        uint32_t chunk = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
        if (fw_arena_take_bit(a, chunk)) return a->base + (size_t)chunk * FW_SEGMENT_SIZE;
        bits &= bits - 1;
      }
    }
  }
  return NULL;
}

/* Unmaps every arena with no chunk in use, for a request that needs
 * address space of its own (a huge block under RLIMIT_AS). Each word of the
 * arena is claimed whole; the claims are never given back, so the slot stays
 * dead and no other thread can be inside it. Returns the bytes unmapped. */
size_t fw_arena_release_unused(void) {
  size_t released = 0;
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    fw_arena_t *a = &fw_arenas[i];
    if (atomic_load_explicit(&a->released, memory_order_relaxed)) continue;
    size_t w = 0;
    for (; w < FW_ARENA_WORDS; w++) {
      uint64_t zero = 0;
      if (!atomic_compare_exchange_strong_explicit(&a->inuse[w], &zero, ~(uint64_t)0, memory_order_acq_rel,
                                                   memory_order_relaxed))
        break;
    }
    if (w < FW_ARENA_WORDS) {
      /* something is in use: undo the words taken so far */
      while (w-- > 0) atomic_store_explicit(&a->inuse[w], 0, memory_order_release);
      continue;
    }
    size_t dirty = 0;
    for (w = 0; w < FW_ARENA_WORDS; w++)
      dirty += (size_t)__builtin_popcountll(atomic_exchange_explicit(&a->dirty[w], 0, memory_order_acq_rel) &
                                           fw_word_valid(a, w));
    atomic_store_explicit(&a->released, true, memory_order_release);
    size_t bytes = (size_t)a->chunks * FW_SEGMENT_SIZE;
    fw_stat_sub(committed, dirty * FW_SEGMENT_SIZE);
    fw_stat_sub(reserved, bytes);
    fw_os_unmap(a->base, bytes);
    released += bytes;
  }
  return released;
}

bool fw_arena_contains(const void *p) {
  size_t count = atomic_load_explicit(&fw_arena_count, memory_order_acquire);
  for (size_t i = 0; i < count; i++) {
    const fw_arena_t *a = &fw_arenas[i];
    if (atomic_load_explicit(&a->released, memory_order_acquire)) continue;
    if ((const uint8_t *)p >= a->base && (const uint8_t *)p < a->base + (size_t)a->chunks * FW_SEGMENT_SIZE)
      return true;
  }
  return false;
}

void fw_arena_fork_prepare(void) { pthread_mutex_lock(&fw_arena_grow_lock); }
void fw_arena_fork_parent(void) { pthread_mutex_unlock(&fw_arena_grow_lock); }
void fw_arena_fork_child(void) { pthread_mutex_init(&fw_arena_grow_lock, NULL); }
