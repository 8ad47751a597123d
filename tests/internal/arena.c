/* arena.c — the arena layer (arena.h): claims of 1..64 chunks, the zero
 * promise of fresh and purged chunks, the purge delay, marks, the release
 * of idle arenas, and the halves of chunks advised apart. */
#include "itest.h"
#include "arena.h"
#include "os.h"
#include <pthread.h>

typedef struct claim {
  uint8_t *p;
  fw_arena_t *arena;
  uint32_t chunk;
  size_t n;
  uint64_t tag;
} claim;

static size_t reserved_bytes(void) { return it_stats().bytes_reserved; }

static size_t purged_bytes(void) { return it_stats().bytes_purged; }

static claim take(size_t n, bool *is_zero) {
  claim c = {0};
  c.n = n;
  bool z = false;
  c.p = fw_arena_alloc(n, &c.arena, &c.chunk, &z);
  CHECKF(c.p != NULL, "fw_arena_alloc(%zu)", n);
  CHECKF(((uintptr_t)c.p & FW_SEGMENT_MASK) == 0, "fw_arena_alloc(%zu) = %p", n, (void *)c.p);
  CHECK(c.p == fw_arena_chunk_addr(c.arena, c.chunk));
  CHECK(fw_arena_contains(c.p) && fw_arena_contains(c.p + n * FW_SEGMENT_SIZE - 1));
  if (is_zero) *is_zero = z;
  return c;
}

/* Each chunk of a claim carries its claim's tag in its first and last word,
 * so that two claims handed the same memory would be noticed. */
static void tag_claim(claim *c, uint64_t tag, bool is_zero) {
  c->tag = tag;
  for (size_t i = 0; i < c->n; i++) {
    uint64_t *first = (uint64_t *)(c->p + i * FW_SEGMENT_SIZE);
    uint64_t *last = (uint64_t *)(c->p + (i + 1) * FW_SEGMENT_SIZE) - 1;
    if (is_zero) CHECKF(*first == 0 && *last == 0, "chunk %u+%zu said to be zero is not", c->chunk, i);
    *first = tag;
    *last = ~tag;
  }
}

static void check_tag(const claim *c) {
  for (size_t i = 0; i < c->n; i++) {
    uint64_t *first = (uint64_t *)(c->p + i * FW_SEGMENT_SIZE);
    uint64_t *last = (uint64_t *)(c->p + (i + 1) * FW_SEGMENT_SIZE) - 1;
    CHECKF(*first == c->tag && *last == ~c->tag, "claim %p (%zu chunks): chunk %zu overwritten", (void *)c->p,
           c->n, i);
  }
}

static bool overlap(const claim *a, const claim *b) {
  uint8_t *ae = a->p + a->n * FW_SEGMENT_SIZE, *be = b->p + b->n * FW_SEGMENT_SIZE;
  return a->p < be && b->p < ae;
}

/* Random claims of every size 1..64 with frees in between, a bounded number
 * of chunks live at a time: each claim aligned, inside an arena, and
 * disjoint from every live one. */
static void t_arena_alloc(void) {
  fw_arena_t *a;
  uint32_t ch;
  bool z;
  CHECK(fw_arena_alloc(0, &a, &ch, &z) == NULL);
  CHECK(fw_arena_alloc(FW_ARENA_MAX_CHUNKS + 1, &a, &ch, &z) == NULL);

  /* address space, not memory: two words of 64 chunks on 32-bit builds */
  const size_t budget = sizeof(void *) == 8 ? 256 : 96;
  enum { MAXLIVE = 256 };
  static claim live[MAXLIVE];
  size_t nlive = 0, live_chunks = 0;
  fwt_rng r;
  fwt_rng_init(&r, 1234);
  size_t order[64];
  for (size_t i = 0; i < 64; i++) order[i] = i + 1;
  for (size_t i = 63; i > 0; i--) {
    size_t j = fwt_range(&r, 0, i), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int step = 0; step < 600; step++) {
    /* every size once first, then sizes weighted towards the small ones */
    size_t n = step < 64 ? order[step] : (fwt_next(&r) & 3) ? fwt_range(&r, 1, 8) : fwt_range(&r, 1, 64);
    while (nlive && (live_chunks + n > budget || nlive == MAXLIVE || fwt_range(&r, 0, 2) == 0)) {
      size_t k = fwt_range(&r, 0, nlive - 1);
      check_tag(&live[k]);
      fw_arena_free(live[k].arena, live[k].chunk, live[k].n, fwt_range(&r, 0, 3) == 0);
      live_chunks -= live[k].n;
      live[k] = live[--nlive];
    }
    bool zero;
    claim c = take(n, &zero);
    for (size_t k = 0; k < nlive; k++)
      CHECKF(!overlap(&c, &live[k]), "claim %p (%zu chunks) overlaps live claim %p (%zu chunks)", (void *)c.p,
             n, (void *)live[k].p, live[k].n);
    tag_claim(&c, fwt_next(&r) | 1, zero);
    live[nlive++] = c;
    live_chunks += n;
  }
  for (size_t k = 0; k < nlive; k++) {
    check_tag(&live[k]);
    fw_arena_free(live[k].arena, live[k].chunk, live[k].n, false);
  }
}

/* Fresh chunks read as zero; a freed chunk stays dirty (warm, preferred by
 * one-chunk claims) for the purge delay; a purge makes it zero again. */
static void t_arena_zero(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_arena_purge(0, true);
  bool zero;
  claim c = take(1, &zero);
  CHECK(zero);
  tag_claim(&c, 0x1111, true);
  memset(c.p + 4096, 0x77, 4096);
  fw_arena_free(c.arena, c.chunk, 1, false);

  claim d = take(1, &zero);
  CHECK(d.p == c.p);  /* the warm chunk is preferred */
  CHECK(!zero);
  check_tag(&c);      /* not purged: the contents are still there */
  fw_arena_free(d.arena, d.chunk, 1, false);

  /* a purge pass before the deadline leaves it dirty, one after purges it */
  uint64_t now = fw_os_clock_ms();
  fw_arena_purge(now, false);
  d = take(1, &zero);
  CHECK(d.p == c.p && !zero);
  fw_arena_free(d.arena, d.chunk, 1, false);
  size_t purged = purged_bytes();
  fw_arena_purge(now + 200000, false);
  CHECK(purged_bytes() == purged + FW_SEGMENT_SIZE);
  d = take(1, &zero);
  CHECK(d.p == c.p && zero);
  tag_claim(&d, 0x2222, true);
  CHECK(d.p[4096] == 0 && d.p[8191] == 0);
  memset(d.p + 4096, 0x77, 4096);
  fw_arena_free(d.arena, d.chunk, 1, false);

  /* a forced purge ignores the deadline */
  fw_arena_purge(0, true);
  d = take(1, &zero);
  CHECK(zero && d.p[4096] == 0);
  tag_claim(&d, 0x3333, true);
  /* purge_now purges at once whatever the delay */
  fw_arena_free(d.arena, d.chunk, 1, true);
  d = take(1, &zero);
  CHECK(d.p == c.p && zero);
  tag_claim(&d, 0x4444, true);
  fw_arena_free(d.arena, d.chunk, 1, false);
  fw_arena_purge(0, true);

  /* runs: a run is zero only if none of its chunks is dirty */
  claim run = take(3, &zero);
  CHECK(zero);
  tag_claim(&run, 0x5555, true);
  fw_arena_free(run.arena, run.chunk, 3, false);
  claim one = take(1, &zero);  /* warm: the first chunk of the run */
  CHECK(one.p == run.p && !zero);
  claim run2 = take(3, &zero); /* two dirty chunks and a clean one after them */
  CHECK(run2.p == run.p + FW_SEGMENT_SIZE && !zero);
  fw_arena_free(one.arena, one.chunk, 1, false);
  fw_arena_free(run2.arena, run2.chunk, 3, false);
  fw_arena_purge(0, true);
  claim run3 = take(4, &zero);
  CHECK(run3.p == run.p && zero);
  tag_claim(&run3, 0x6666, true);
  fw_arena_free(run3.arena, run3.chunk, 4, false);
  fw_arena_purge(0, true);

  /* purge delay 0: freed chunks are purged at once */
  CHECK(fw_option_set("purge_delay", 0) == 0);
  claim e = take(2, &zero);
  tag_claim(&e, 0x7777, zero);
  fw_arena_free(e.arena, e.chunk, 2, false);
  claim f = take(2, &zero);
  CHECK(f.p == e.p && zero);
  tag_claim(&f, 0x8888, true);
  fw_arena_free(f.arena, f.chunk, 2, false);

  /* a one-chunk claim takes a warm chunk before a lower clean one */
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_arena_purge(0, true);
  claim lo = take(1, &zero), hi = take(1, &zero);
  CHECK(lo.arena == hi.arena && hi.chunk > lo.chunk && zero);
  tag_claim(&hi, 0xaaaa, true);
  fw_arena_free(hi.arena, hi.chunk, 1, false);
  fw_arena_free(lo.arena, lo.chunk, 1, true);
  claim warm = take(1, &zero);
  CHECK(warm.p == hi.p && !zero);
  check_tag(&hi);
  claim cold = take(1, &zero);
  CHECK(cold.p == lo.p && zero);
  fw_arena_free(warm.arena, warm.chunk, 1, false);
  fw_arena_free(cold.arena, cold.chunk, 1, false);

  /* ... also when the warm chunk is in a later word of the arena's bitmaps
   * than the clean one (a segment that a thread hands back to be used for
   * one of another kind must be the one the next claim takes) */
  fw_arena_purge(0, true);
  enum { N = 80 };
  claim many[N];
  int lo_i = -1, hi_i = -1;
  for (int i = 0; i < N; i++) {
    many[i] = take(1, &zero);
    if (lo_i < 0 && many[i].chunk % 64 == 0) lo_i = i;
  }
  for (int i = 0; lo_i >= 0 && i < N; i++)
    if (many[i].arena == many[lo_i].arena && many[i].chunk / 64 > many[lo_i].chunk / 64) hi_i = i;
  CHECKF(lo_i >= 0 && hi_i >= 0, "no two one-chunk claims of %d in different words of one arena", N);
  tag_claim(&many[hi_i], 0xbbbb, false);
  fw_arena_free(many[hi_i].arena, many[hi_i].chunk, 1, false);
  fw_arena_free(many[lo_i].arena, many[lo_i].chunk, 1, true);
  warm = take(1, &zero);
  CHECKF(warm.p == many[hi_i].p && !zero, "a one-chunk claim took chunk %u, not the warm chunk %u of a later word",
         warm.chunk, many[hi_i].chunk);
  check_tag(&many[hi_i]);
  many[hi_i] = warm;
  many[lo_i] = take(1, &zero);
  for (int i = 0; i < N; i++) fw_arena_free(many[i].arena, many[i].chunk, 1, false);
  fw_arena_purge(0, true);
}

/* Runs of several chunks (blocks above 2 MiB) go where freed ones left warm
 * chunks: the shortest stretch of free warm chunks that holds them, so that
 * a longer stretch stays whole for a longer run; with no such stretch,
 * where they cover the most warm chunks. The chunks of a freed big block
 * stay warm for FW_ARENA_LARGE_ROUNDS purge delays. */
static void t_arena_warm_runs(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_arena_purge(0, true);
  bool zero;
  /* c | b | a | d | e, consecutive fresh chunks */
  claim c = take(7, &zero), b = take(1, &zero), a = take(3, &zero), d = take(1, &zero), e = take(2, &zero);
  CHECK(c.arena == e.arena && b.p == c.p + 7 * FW_SEGMENT_SIZE && a.p == b.p + FW_SEGMENT_SIZE &&
        d.p == a.p + 3 * FW_SEGMENT_SIZE && e.p == d.p + FW_SEGMENT_SIZE);
  tag_claim(&a, 0x1010, true);
  tag_claim(&c, 0x3030, true);
  fw_arena_free(c.arena, c.chunk, 7, false);
  fw_arena_free(a.arena, a.chunk, 3, false);
  /* seven warm chunks in c, three in a: three fit a exactly (not the
   * first place that holds them) */
  claim x = take(3, &zero);
  CHECK(x.p == a.p && !zero);
  check_tag(&a);
  /* five: only c has them */
  claim y = take(5, &zero);
  CHECK(y.p == c.p && !zero);
  check_tag(&(claim){c.p, c.arena, c.chunk, 5, c.tag});
  fw_arena_free(x.arena, x.chunk, 3, false);
  fw_arena_free(y.arena, y.chunk, 5, false);
  fw_arena_free(b.arena, b.chunk, 1, false);
  fw_arena_free(d.arena, d.chunk, 1, false);
  fw_arena_free(e.arena, e.chunk, 2, false);
  fw_arena_purge(0, true);

  /* lo (clean) | mid (warm) | hi (in use): three chunks go over mid and
   * one chunk of lo, not from lo's start */
  claim lo = take(2, &zero), mid = take(2, &zero), hi = take(1, &zero);
  CHECK(mid.p == lo.p + 2 * FW_SEGMENT_SIZE && hi.p == mid.p + 2 * FW_SEGMENT_SIZE);
  tag_claim(&mid, 0x5050, true);
  fw_arena_free(mid.arena, mid.chunk, 2, false);
  fw_arena_free(lo.arena, lo.chunk, 2, true);
  claim z = take(3, &zero);
  CHECK(z.p == lo.p + FW_SEGMENT_SIZE && !zero);
  check_tag(&mid);
  fw_arena_free(z.arena, z.chunk, 3, false);
  fw_arena_free(hi.arena, hi.chunk, 1, false);
  fw_arena_purge(0, true);

  /* a big block's chunks outlast the purge delay, up to its multiple (the
   * times are far ahead: a pass runs only past the last one's time) */
  const uint64_t delay = 30000;
  CHECK(fw_option_set("purge_delay", (long)delay) == 0);
  claim big = take(2, &zero);
  tag_claim(&big, 0x7070, true);
  uint64_t t0 = fw_os_clock_ms();
  fw_arena_free_large(big.arena, big.chunk, 2);
  size_t purged = purged_bytes();
  fw_arena_purge(t0 + delay * (FW_ARENA_LARGE_ROUNDS - 1), false);
  CHECK(purged_bytes() == purged);
  fw_arena_purge(t0 + delay * FW_ARENA_LARGE_ROUNDS + 1000, false);
  CHECK(purged_bytes() == purged + 2 * FW_SEGMENT_SIZE);
  claim again = take(2, &zero);
  CHECK(again.p == big.p && zero);
  fw_arena_free(again.arena, again.chunk, 2, false);
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_arena_purge(0, true);
}

/* Growth in place: the chunks right after a claim, when free. */
static void t_arena_extend(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_arena_purge(0, true);
  bool zero;
  claim a = take(2, &zero), b = take(1, &zero);
  CHECK(b.p == a.p + 2 * FW_SEGMENT_SIZE);
  CHECK(!fw_arena_extend(a.arena, a.chunk, 2, 1));  /* b is there */
  CHECK(!fw_arena_extend(a.arena, a.chunk, 2, 0));
  tag_claim(&b, 0x9090, true);
  fw_arena_free(b.arena, b.chunk, 1, false);
  size_t committed = it_stats().bytes_committed;
  CHECK(fw_arena_extend(a.arena, a.chunk, 2, 3));  /* b's warm chunk and two clean ones */
  CHECKF(it_stats().bytes_committed == committed + 2 * FW_SEGMENT_SIZE, "committed grew by %zu bytes",
         it_stats().bytes_committed - committed);
  a.n = 5;
  CHECK(fw_arena_contains(a.p + 5 * FW_SEGMENT_SIZE - 1));
  claim c = take(1, &zero);
  CHECK(!overlap(&a, &c));
  /* a run never crosses a bitmap word */
  CHECK(!fw_arena_extend(a.arena, a.chunk, 5, 64));
  /* a tail given back is free again */
  fw_arena_free(a.arena, a.chunk + 2, 3, false);
  CHECK(fw_arena_extend(a.arena, a.chunk, 2, 3));
  fw_arena_free(a.arena, a.chunk, 5, false);
  fw_arena_free(c.arena, c.chunk, 1, false);
  fw_arena_purge(0, true);
}

/* ---- marks ------------------------------------------------------------------ */
static void *chunk_addr(const claim *c, size_t i) { return c->p + i * FW_SEGMENT_SIZE; }

static void t_arena_marks(void) {
  /* singles in the first word of the first arena, and a run of 64 that
   * fills a later word, so that the cursor crosses words */
  claim s[6];
  for (int i = 0; i < 6; i++) s[i] = take(1, NULL);
  claim big = take(64, NULL);
  CHECK(big.arena == s[0].arena && big.chunk % 64 == 0 && big.chunk > s[5].chunk);
  for (int i = 1; i < 6; i++) CHECK(s[i].arena == s[0].arena && s[i].chunk > s[i - 1].chunk);
  fw_arena_t *a = s[0].arena;

  CHECK(fw_arena_marked() == 0);
  CHECK(fw_arena_unmark_any() == NULL);
  size_t cursor = 0;
  CHECK(fw_arena_unmark_due(UINT64_MAX, true, &cursor) == NULL);

  /* taken exactly once */
  fw_arena_mark(a, s[0].chunk, 0);
  CHECK(fw_arena_marked() == 1);
  CHECK(!fw_arena_unmark(a, s[1].chunk));
  CHECK(fw_arena_unmark(a, s[0].chunk));
  CHECK(!fw_arena_unmark(a, s[0].chunk));
  CHECK(fw_arena_marked() == 0);

  /* deadlines: s0 none, s1 100, s2 200, s3 150, big+5 120, big+63 300 */
  fw_arena_mark(a, s[0].chunk, 0);
  fw_arena_mark(a, s[1].chunk, 100);
  fw_arena_mark(a, s[2].chunk, 200);
  fw_arena_mark(a, s[3].chunk, 150);
  fw_arena_mark(a, big.chunk + 5, 120);
  fw_arena_mark(a, big.chunk + 63, 300);
  CHECK(fw_arena_marked() == 6);

  cursor = 0;
  CHECK(fw_arena_unmark_due(99, false, &cursor) == NULL);
  CHECK(fw_arena_marked() == 6);
  /* at 130: s1 and big+5, in chunk order, each once */
  cursor = 0;
  CHECK(fw_arena_unmark_due(130, false, &cursor) == chunk_addr(&s[1], 0));
  /* marked again behind the cursor: not visited again in this pass */
  fw_arena_mark(a, s[1].chunk, 100);
  CHECK(fw_arena_unmark_due(130, false, &cursor) == chunk_addr(&big, 5));
  CHECK(fw_arena_unmark_due(130, false, &cursor) == NULL);
  CHECK(fw_arena_unmark_due(130, false, &cursor) == NULL);
  CHECK(fw_arena_marked() == 5);
  /* a new pass finds it */
  cursor = 0;
  CHECK(fw_arena_unmark_due(130, false, &cursor) == chunk_addr(&s[1], 0));
  CHECK(fw_arena_unmark_due(130, false, &cursor) == NULL);
  CHECK(fw_arena_marked() == 4);
  /* force: every mark with a deadline, whatever the time; not s0 */
  cursor = 0;
  CHECK(fw_arena_unmark_due(0, true, &cursor) == chunk_addr(&s[2], 0));
  CHECK(fw_arena_unmark_due(0, true, &cursor) == chunk_addr(&s[3], 0));
  CHECK(fw_arena_unmark_due(0, true, &cursor) == chunk_addr(&big, 63));
  CHECK(fw_arena_unmark_due(0, true, &cursor) == NULL);
  CHECK(fw_arena_marked() == 1);
  CHECK(!fw_arena_unmark(a, s[2].chunk));
  /* any: the one left, then none */
  CHECK(fw_arena_unmark_any() == chunk_addr(&s[0], 0));
  CHECK(fw_arena_unmark_any() == NULL);
  CHECK(fw_arena_marked() == 0);
  cursor = 0;
  fw_arena_mark(a, s[4].chunk, 0);
  CHECK(fw_arena_unmark_due(UINT64_MAX, true, &cursor) == NULL);
  CHECK(fw_arena_unmark(a, s[4].chunk));

  for (int i = 0; i < 6; i++) fw_arena_free(s[i].arena, s[i].chunk, 1, false);
  fw_arena_free(big.arena, big.chunk, 64, false);
}

/* Two threads take the same marks: each is taken exactly once. */
static claim race_claims[70];
static _Atomic size_t race_taken;
static _Atomic int race_go;

static void *race_thread(void *arg) {
  size_t me = (size_t)(uintptr_t)arg, n = 0;
  while (!atomic_load(&race_go)) {
  }
  for (size_t i = 0; i < 70; i++) {
    size_t k = me ? 69 - i : i;
    if (fw_arena_unmark(race_claims[k].arena, race_claims[k].chunk)) n++;
    if (i % 7 == 0 && fw_arena_unmark_any()) n++;
    if (i % 5 == 0) {
      size_t cursor = 0;
      if (fw_arena_unmark_due(0, true, &cursor)) n++;
    }
  }
  atomic_fetch_add(&race_taken, n);
  return NULL;
}

static void t_arena_marks_race(void) {
  for (int round = 0; round < 50; round++) {
    for (size_t i = 0; i < 70; i++) {
      if (round == 0) race_claims[i] = take(1, NULL);
      fw_arena_mark(race_claims[i].arena, race_claims[i].chunk, 1 + i);
    }
    atomic_store(&race_taken, 0);
    atomic_store(&race_go, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, race_thread, (void *)(uintptr_t)i) == 0);
    atomic_store(&race_go, 1);
    for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECKF(atomic_load(&race_taken) == 70, "round %d: %zu marks taken of 70", round, atomic_load(&race_taken));
    CHECK(fw_arena_marked() == 0 && fw_arena_unmark_any() == NULL);
  }
  for (size_t i = 0; i < 70; i++) fw_arena_free(race_claims[i].arena, race_claims[i].chunk, 1, false);
}

/* An arena with no chunk in use is unmapped, and its table slot serves the
 * next arena; one with a chunk in use stays. */
static void t_arena_release(void) {
  fw_arena_purge(0, true);
  fw_arena_release_unused();
  /* the first arena (and the metadata holding the arena table) */
  claim w = take(1, NULL);
  fw_arena_t *a1 = w.arena;
  fw_arena_free(w.arena, w.chunk, 1, false);
  const size_t a1_bytes = fw_arena_release_unused();
  CHECK(a1_bytes >= FW_SEGMENT_SIZE && a1_bytes % FW_SEGMENT_SIZE == 0);
  CHECK(!fw_arena_contains(w.p) && !fw_os_is_mapped(w.p));
  const size_t base = reserved_bytes();
  const size_t a1_chunks = a1_bytes / FW_SEGMENT_SIZE;

  /* the next arena takes the released slot */
  bool zero;
  claim first = take(1, &zero);
  CHECK(first.arena == a1 && zero);
  CHECK(reserved_bytes() == base + a1_bytes);

  /* fill it, so that the next claim needs a second arena */
  enum { MAXC = 260 };  /* an arena has at most 256 chunks */
  static claim c[MAXC];
  size_t nc = 0;
  while (nc < MAXC) {
    c[nc] = take(1, NULL);
    if (c[nc].arena != a1) break;
    nc++;
  }
  CHECK(nc == a1_chunks - 1);
  claim other = c[nc];
  fw_arena_t *a2 = other.arena;
  CHECK(a2 != a1);
  const size_t a2_bytes = reserved_bytes() - base - a1_bytes;
  CHECK(a2_bytes >= FW_SEGMENT_SIZE && a2_bytes % FW_SEGMENT_SIZE == 0);

  /* nothing idle yet */
  CHECK(fw_arena_release_unused() == 0);
  CHECK(reserved_bytes() == base + a1_bytes + a2_bytes);

  /* the first arena goes idle (a chunk of it dirty): it is released, the
   * second (in use) is not */
  for (size_t i = 0; i < nc; i++) fw_arena_free(c[i].arena, c[i].chunk, c[i].n, false);
  memset(first.p, 0x33, 64);
  fw_arena_free(first.arena, first.chunk, 1, false);
  CHECK(fw_arena_release_unused() == a1_bytes);
  CHECK(reserved_bytes() == base + a2_bytes);
  CHECK(!fw_arena_contains(first.p) && !fw_os_is_mapped(first.p));
  CHECK(fw_arena_contains(other.p));
  CHECK(fw_arena_release_unused() == 0);

  /* a released slot takes no claim: the second arena serves it */
  claim again = take(1, NULL);
  CHECK(again.arena == a2);
  fw_arena_free(again.arena, again.chunk, 1, false);
  fw_arena_free(other.arena, other.chunk, other.n, false);
  CHECK(fw_arena_release_unused() == a2_bytes);
  CHECK(reserved_bytes() == base);
  CHECK(!fw_arena_contains(other.p));

  /* both slots are free: the first one is reused, with fresh memory */
  claim fresh = take(1, &zero);
  CHECK(fresh.arena == a1 && zero);
  tag_claim(&fresh, 0x9999, true);
  claim fresh2 = take(2, &zero);
  CHECK(fresh2.arena == a1 && zero && !overlap(&fresh, &fresh2));
  fw_arena_free(fresh.arena, fresh.chunk, 1, false);
  fw_arena_free(fresh2.arena, fresh2.chunk, 2, false);
  size_t released = fw_arena_release_unused();
  CHECK(released == a1_bytes);
}

/* Whether the mapping holding p is advised flag ("hg": huge pages, "nh":
 * none), from its VmFlags line in /proc/self/smaps. */
static bool advised(const void *p, const char *flag) {
  FILE *f = fopen("/proc/self/smaps", "r");
  CHECK(f != NULL);
  char line[512];
  bool here = false, found = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      here = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (here && strncmp(line, "VmFlags:", 8) == 0) {
      char want[8];
      snprintf(want, sizeof want, " %s", flag);
      found = strstr(line, want) != NULL;
      break;
    }
  }
  fclose(f);
  return found;
}

/* The halves of huge chunks advised 4 KiB pages apart (fw_arena_set_tail),
 * under FREEWAY_THP_TAILS=1 (set by ctest): the second is refused while
 * the first stands, and taken once the first is gone with its chunk's
 * advice (fw_arena_set_huge), so the process-wide count goes down as well
 * as up; the advice is the kernel's, read back from /proc/self/smaps. */
static void t_arena_tails(void) {
  CHECK(fw_option_get("thp_tails") == 1);
  claim a = take(1, NULL), b = take(1, NULL);
  if (!fw_arena_set_huge(a.arena, a.chunk, 1, true) || !advised(a.p, "hg"))
    it_skip("no MADV_HUGEPAGE here");
  CHECK(fw_arena_set_huge(b.arena, b.chunk, 1, true));
  const size_t half = FW_SEGMENT_SIZE / 2;
  fw_arena_set_tail(a.arena, a.chunk, 1, 2 * (size_t)a.chunk + 1, false);
  CHECKF(advised(a.p + half, "nh") && advised(a.p, "hg"), "chunk %u: upper half not advised apart", a.chunk);
  fw_arena_set_tail(a.arena, a.chunk, 1, 2 * (size_t)a.chunk + 1, false);  /* kept: no second claim */
  fw_arena_set_tail(b.arena, b.chunk, 1, 2 * (size_t)b.chunk + 1, false);
  CHECKF(advised(b.p + half, "hg"), "chunk %u: a second half advised apart under a budget of one", b.chunk);
  CHECK(!fw_arena_set_huge(a.arena, a.chunk, 1, false));
  CHECK(advised(a.p, "nh") && advised(a.p + half, "nh"));
  fw_arena_set_tail(b.arena, b.chunk, 1, 2 * (size_t)b.chunk + 1, false);
  CHECKF(advised(b.p + half, "nh"), "chunk %u: the budget was not given back with chunk %u's advice", b.chunk,
         a.chunk);
  fw_arena_set_tail(b.arena, b.chunk, 1, SIZE_MAX, true);
  CHECKF(advised(b.p + half, "hg"), "chunk %u: the half's huge advice did not come back", b.chunk);
  fw_arena_set_tail(a.arena, a.chunk, 1, SIZE_MAX, true);
  fw_arena_free(a.arena, a.chunk, 1, true);
  fw_arena_free(b.arena, b.chunk, 1, true);
}

int main(int argc, char **argv) {
  static const it_section s[] = {
    {"arena_alloc", t_arena_alloc}, {"arena_zero", t_arena_zero},
    {"arena_warm_runs", t_arena_warm_runs}, {"arena_extend", t_arena_extend},
    {"arena_marks", t_arena_marks}, {"arena_marks_race", t_arena_marks_race},
    {"arena_release", t_arena_release}, {"arena_tails", t_arena_tails},
  };
  return it_main(argc, argv, s, IT_COUNT(s));
}
