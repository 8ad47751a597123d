/* rss.c — memory goes back to the OS: after a burst of ~512 MiB in small
 * blocks is freed, RSS (from /proc/self/statm) must fall by most of it:
 *   collect:       with fw_collect(true);
 *   purge_delay0:  without it, run with FREEWAY_PURGE_DELAY=0, after a few
 *                  more malloc/free calls;
 *   thread:        blocks of a thread that has exited, freed by main;
 *   large_reuse:   large blocks freed and allocated again in a window of
 *                  live ones land where pages were touched before (the
 *                  large-block cache), so page faults stay few;
 *   populate:      a size class that fills a page has its next fresh pages
 *                  faulted in whole (FREEWAY_POPULATE), one with a block or
 *                  two in use does not, nor one whose block the heap
 *                  profiler sampled (populate.prof);
 *   realloc_grow:  buffers grown through every size class by realloc reuse
 *                  the pages the classes below left empty, so the memory
 *                  touched stays near the final size;
 *   burst_purged:  with FREEWAY_PURGE_DELAY=1 and no allocation after the
 *                  burst: the pages its frees empty are purged by frees
 *                  (the frees run the purges that have come due);
 *   quiet:         with a purge delay far longer than the test and no more
 *                  calls after the frees: the cap on empty segments a thread
 *                  keeps (FREEWAY_SEGMENT_CACHE) must give the rest back;
 *   quiet_rounds:  the same in a thread with the default cap: it keeps few
 *                  segments warm until it has reused some, then more;
 *                  quiet_rounds_spans: with empty segments of big blocks
 *                  held beside them;
 *   thp_advice:    the mapping blocks lie in carries the transparent huge
 *                  page advice FREEWAY_THP asks for (run with the default 2 and
 *                  with 1);
 *   big_churn:     blocks of 1 to 2 MiB replaced at random reuse each
 *                  other's memory, whatever their sizes;
 *   large_ends:    large blocks replaced at random, first and last bytes
 *                  written, fault in few pages (the cache picks a page
 *                  where an earlier block ended where this one will);
 *   medium_reuse:  the same with medium blocks: free blocks of the class's
 *                  other pages serve before a page carves a new one;
 *   sampled_burst: the same under the heap profiler (libfreeway-prof.so):
 *                  the pages its samples went to go back with the rest;
 *   exit_abandoned, exit_empty: a thread that frees a burst and exits gives
 *                  the memory back as it exits, whether its segments keep a
 *                  few live blocks or none, with a purge delay of a minute. */
#include "fwtest.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* Runs fn(arg) in a thread of its own and waits for it to end. */
static void run_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fn, arg) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static const size_t burst = 512 * MiB;

typedef struct burst_set {
  char **v;
  size_t n, cap, bytes;
} burst_set;

static void make_burst(burst_set *b, uint64_t seed) {
  b->cap = burst / 16;
  b->v = fwt_scratch(b->cap * sizeof *b->v);
  b->n = b->bytes = 0;
  fwt_rng r;
  fwt_rng_init(&r, seed);
  while (b->bytes < burst) {
    size_t n = fwt_range(&r, 16, 1024);
    char *p = A.malloc(n);
    CHECK(p != NULL);
    memset(p, (int)(n & 0xff) | 1, n);
    b->v[b->n++] = p;
    b->bytes += n;
  }
}

static void free_burst(burst_set *b, uint64_t seed) {
  /* In a scattered order, as a real program would. */
  fwt_rng r;
  fwt_rng_init(&r, seed);
  for (size_t i = b->n; i > 1; i--) {
    size_t j = (size_t)(fwt_next(&r) % i);
    char *t = b->v[i - 1];
    b->v[i - 1] = b->v[j];
    b->v[j] = t;
  }
  for (size_t i = 0; i < b->n; i++) {
    char *p = b->v[i];
    CHECKF(p[0] != 0, "block %p lost its contents", (void *)p);
    A.free(p);
  }
  fwt_scratch_free(b->v, b->cap * sizeof *b->v);
}

static void report(const char *what, size_t r0, size_t r1, size_t r2) {
  fwt_log("%s: rss %zu MiB before, %zu MiB with the burst, %zu MiB after freeing", what, r0 / MiB,
          r1 / MiB, r2 / MiB);
  CHECKF(r1 >= r0 + burst * 3 / 4, "%s: RSS rose only from %zu to %zu MiB for a %zu MiB burst", what,
         r0 / MiB, r1 / MiB, burst / MiB);
}

/* Returned "most of it": at least three quarters of the rise. */
static bool dropped(size_t r0, size_t r1, size_t r2) { return r2 <= r0 + (r1 - r0) / 4; }

/* RSS before a burst, with it, and right after it is freed. */
static void burst_rss(uint64_t seed, size_t *r0, size_t *r1, size_t *r2) {
  burst_set b;
  *r0 = fwt_rss();
  make_burst(&b, seed);
  *r1 = fwt_rss();
  free_burst(&b, seed + 1);
  *r2 = fwt_rss();
}

static void t_collect(void) {
  X.collect(true);
  size_t r0 = fwt_rss();
  burst_set b;
  make_burst(&b, 1);
  size_t r1 = fwt_rss();
  free_burst(&b, 2);
  X.collect(true);
  size_t r2 = fwt_rss();
  report("collect", r0, r1, r2);
  CHECKF(dropped(r0, r1, r2), "fw_collect(true) left RSS at %zu MiB (%zu before the burst, %zu with it)",
         r2 / MiB, r0 / MiB, r1 / MiB);
  fw_stats_t s;
  fwt_stats(&s);
  CHECKF(s.bytes_committed <= (r0 + (r1 - r0) / 4) + 64 * MiB,
         "after fw_collect(true) fw_stats says %zu MiB committed", s.bytes_committed / MiB);
}

/* More allocator traffic, of a modest size, without any explicit collect. */
static void nudge(int rounds) {
  for (int i = 0; i < rounds; i++) {
    void *p = A.malloc(64 + (size_t)(i % 50) * 16);
    CHECK(p);
    A.free(p);
    p = A.malloc(100000);
    CHECK(p);
    A.free(p);
  }
}

static void t_purge_delay0(void) {
  errno = 0;
  long pd = X.option_get("purge_delay");
  CHECKF(!(pd == -1 && errno == EINVAL), "option purge_delay is not implemented");
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && strcmp(e, "0") == 0, "run this section with FREEWAY_PURGE_DELAY=0");
  CHECKF(pd == 0, "FREEWAY_PURGE_DELAY=0 in the environment, but purge_delay is %ld", pd);
  size_t r0, r1, r2;
  burst_rss(3, &r0, &r1, &r2);
  int calls = 0;
  /* "A few more calls": up to 100,000 pairs, checked as they go. */
  while (!dropped(r0, r1, r2) && calls < 100000) {
    nudge(1000);
    calls += 1000;
    usleep(1000);
    r2 = fwt_rss();
  }
  report("purge_delay0", r0, r1, r2);
  fwt_log("purge_delay0: %d malloc/free pairs after the burst", calls);
  CHECKF(dropped(r0, r1, r2),
         "with FREEWAY_PURGE_DELAY=0 RSS stayed at %zu MiB (%zu before the burst, %zu with it) "
         "after %d more malloc/free calls",
         r2 / MiB, r0 / MiB, r1 / MiB, calls);
}

/* A burst freed with no call after it: RSS must have fallen by the time
 * the last free returns; why names the setting under test. */
static void burst_dropped_at_once(uint64_t seed, const char *what, const char *why) {
  size_t r0, r1, r2;
  burst_rss(seed, &r0, &r1, &r2);
  report(what, r0, r1, r2);
  CHECKF(dropped(r0, r1, r2), "%s: RSS stayed at %zu MiB (%zu before the burst, %zu with it) right after the frees: %s",
         what, r2 / MiB, r0 / MiB, r1 / MiB, why);
}

/* A burst freed, then, with no allocation, a few more frees after pauses
 * of two delays: those frees run the purges that have come due. Right
 * after the burst's last free RSS may still hold the pages it emptied in
 * its last delay or two (in a scattered order that is most of them: a page
 * empties with its last block), so the check waits for later frees, not
 * for time alone. */
static void t_burst_purged(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && strcmp(e, "1") == 0, "run this section with FREEWAY_PURGE_DELAY=1");
  /* later frees: rounds of 1 MiB of 1 KiB blocks, each empties 8 pages or
   * more whatever the page size, and so reaches a purge pass */
  enum { rounds = 8, per_round = 1024 };
  void **tail = fwt_scratch(rounds * per_round * sizeof *tail);
  for (size_t i = 0; i < rounds * per_round; i++) {
    tail[i] = A.malloc(1024);
    CHECK(tail[i] != NULL);
    memset(tail[i], 0x5a, 1024);
  }
  size_t r0, r1, r2;
  burst_rss(5, &r0, &r1, &r2);
  report("burst_purged", r0, r1, r2);
  size_t at_once = r2;
  int done = 0;
  while (!dropped(r0, r1, r2) && done < rounds) {
    usleep(2000);
    for (size_t i = 0; i < per_round; i++) A.free(tail[(size_t)done * per_round + i]);
    done++;
    r2 = fwt_rss();
  }
  fwt_log("burst_purged: %zu MiB right after the burst's frees, %zu MiB after %d rounds of later frees", at_once / MiB,
          r2 / MiB, done);
  CHECKF(dropped(r0, r1, r2),
         "burst_purged: RSS stayed at %zu MiB (%zu before the burst, %zu with it) after the burst's frees and %d "
         "rounds of 1 MiB more, 2 ms apart: frees do not run the purges that came due with a 1 ms delay",
         r2 / MiB, r0 / MiB, r1 / MiB, done);
  for (size_t i = (size_t)done * per_round; i < rounds * per_round; i++) A.free(tail[i]);
  fwt_scratch_free(tail, rounds * per_round * sizeof *tail);
}

static void t_quiet(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && atol(e) >= 60000, "run this section with FREEWAY_PURGE_DELAY=60000");
  long cache = X.option_get("segment_cache");
  CHECKF(cache >= 0 && cache <= 4, "segment_cache is %ld: run this section with FREEWAY_SEGMENT_CACHE=2", cache);
  burst_dropped_at_once(7, "quiet", "with a 60 s purge delay, empty segments beyond segment_cache were kept");
}

/* Fills v with blocks of random sizes in [lo, hi], each written whole,
 * until they hold total bytes; returns how many. */
static size_t fill_random(char **v, size_t total, uint64_t seed, size_t lo, size_t hi, int byte) {
  size_t n = 0, bytes = 0;
  fwt_rng r;
  fwt_rng_init(&r, seed);
  while (bytes < total) {
    size_t sz = fwt_range(&r, lo, hi);
    char *p = A.malloc(sz);
    CHECK(p != NULL);
    memset(p, byte, sz);
    v[n++] = p;
    bytes += sz;
  }
  return n;
}

/* A thread frees a burst of 128 MiB of small blocks (32 segments) and stays
 * (no exit, no more calls, a purge delay of a minute): it keeps few of the
 * emptied segments, as it has not yet shown it reuses them; then it does
 * the same again and again, and as it reuses what it kept it keeps more,
 * until a round takes few page faults. What stays after the first round
 * is the free slots of the segments that still hold a page (the heap's
 * current page of each size, the emptied pages it keeps): 32 to 36 MiB
 * here, against all of it (139 MiB) with the cache's cap alone. */
enum { QR_ROUNDS = 7 };
typedef struct {
  int spans;              /* empty segments of big blocks to hold first */
  size_t kept[QR_ROUNDS]; /* RSS after the frees over before the round */
  long faults[QR_ROUNDS];
} quiet_rounds_job;

static void *quiet_rounds_thread(void *arg) {
  quiet_rounds_job *j = arg;
  const size_t total = 128 * MiB;
  char **v = fwt_scratch(total / 16 * sizeof *v);
  /* blocks of 1.5 MiB, two to a segment of big blocks, written whole and
   * freed: those segments stay empty with the thread (above the large-block
   * cache's sizes, they go back to their segment at once) */
  char *big[16];
  for (int i = 0; i < 2 * j->spans; i++) {
    big[i] = A.malloc(3 * MiB / 2);
    CHECK(big[i] != NULL);
    memset(big[i], 0x2a, 3 * MiB / 2);
  }
  for (int i = 0; i < 2 * j->spans; i++) A.free(big[i]);
  for (int round = 0; round < QR_ROUNDS; round++) {
    size_t r0 = fwt_rss();
    struct rusage u0, u1;
    getrusage(RUSAGE_THREAD, &u0);
    size_t n = fill_random(v, total, 21, 16, 1024, 0x3c);
    getrusage(RUSAGE_THREAD, &u1);
    for (size_t i = 0; i < n; i++) A.free(v[i]);
    size_t r1 = fwt_rss();
    j->kept[round] = r1 > r0 ? r1 - r0 : 0;
    j->faults[round] = u1.ru_minflt - u0.ru_minflt;
  }
  fwt_scratch_free(v, total / 16 * sizeof *v);
  return NULL;
}

static void quiet_rounds(int spans) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && atol(e) >= 60000, "run this section with FREEWAY_PURGE_DELAY=60000");
  long cache = X.option_get("segment_cache");
  CHECKF(cache >= 16, "segment_cache is %ld: run this section with the default (32)", cache);
  quiet_rounds_job j = {.spans = spans};
  run_thread(quiet_rounds_thread, &j);
  for (int i = 0; i < QR_ROUNDS; i++)
    fwt_log("quiet_rounds: round %d: %ld page faults, %zu MiB kept after the frees", i, j.faults[i], j.kept[i] / MiB);
  CHECKF(j.kept[0] <= 48 * MiB,
         "a thread that freed 128 MiB of small blocks, reusing nothing yet, kept %zu MiB of it resident",
         j.kept[0] / MiB);
  CHECKF(j.faults[QR_ROUNDS - 1] <= j.faults[0] / 4,
         "round %d took %ld page faults against the first round's %ld: the segments the thread reuses were purged",
         QR_ROUNDS - 1, j.faults[QR_ROUNDS - 1], j.faults[0]);
}

static void t_quiet_rounds(void) { quiet_rounds(0); }

/* The same in a thread that holds empty segments of big blocks too: those
 * are kept by FREEWAY_SEGMENT_CACHE, and must neither count against the
 * few segments of small blocks the thread keeps nor make it keep more. */
static void t_quiet_rounds_spans(void) { quiet_rounds(6); }

/* A thread whose burst the heap profiler samples (run under
 * libfreeway-prof.so with FREEWAY_PROFILE=1 and a short rate) frees it all
 * and stays, with a purge delay of a minute and a cache of 2 empty
 * segments: the pages the samples were moved to (prof.c) empty with the
 * rest and must not hold their segments, whose other free slots would stay
 * committed with them. */
static void *sampled_burst_thread(void *arg) {
  size_t *out = arg;
  const size_t total = 64 * MiB;
  char **v = fwt_scratch(total / 16 * sizeof *v);
  fw_stats_t st;
  fwt_stats(&st);
  size_t s0 = st.segments;
  size_t n = fill_random(v, total, 33, 49, 64, 0x4b);
  fwt_stats(&st);
  size_t s1 = st.segments;
  for (size_t i = 0; i < n; i++) A.free(v[i]);
  fwt_stats(&st);
  out[0] = s0, out[1] = s1, out[2] = st.segments;
  fwt_scratch_free(v, total / 16 * sizeof *v);
  return NULL;
}

static void t_sampled_burst(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && atol(e) >= 60000, "run this section with FREEWAY_PURGE_DELAY=60000");
  CHECKF(X.option_get("segment_cache") == 2, "run this section with FREEWAY_SEGMENT_CACHE=2");
  size_t s[3];
  run_thread(sampled_burst_thread, s);
  fwt_log("sampled_burst: %zu segments before the burst, %zu with it, %zu after its frees", s[0], s[1], s[2]);
  CHECKF(s[1] >= s[0] + 16, "the burst took %zu segments: too few to tell", s[1] - s[0]);
  /* 4 more than before the burst under libfreeway.so, which takes no
   * samples, and under libfreeway-prof.so now; 5 when the emptied page the
   * next sample would have come from stayed */
  CHECKF(s[2] <= s[0] + 4,
         "a sampled thread that freed a burst of 64 MiB and stayed quiet still holds %zu segments (%zu before it): "
         "the emptied pages of its samples hold their segments",
         s[2], s[0]);
}

static long minor_faults(void) {
  struct rusage ru;
  CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
  return ru.ru_minflt;
}

/* One thread's window of live large blocks, replaced at random. */
enum { LR_THREADS = 6, LR_K = 32, LR_OPS = 4000 };
static void *large_reuse_thread(void *arg) {
  char *v[LR_K] = {0};
  fwt_rng r;
  fwt_rng_init(&r, 11 + (uint64_t)(uintptr_t)arg);
  for (int i = 0; i < LR_OPS; i++) {
    size_t j = (size_t)(fwt_next(&r) % LR_K);
    if (v[j]) {
      CHECKF(v[j][0] == (char)j, "block %p lost its first byte", (void *)v[j]);
      A.free(v[j]);
    }
    size_t n = fwt_range(&r, 64 * 1024, 512 * 1024);
    v[j] = A.malloc(n);
    CHECK(v[j] != NULL);
    v[j][0] = (char)j;
    v[j][n - 1] = (char)j;
  }
  for (int j = 0; j < LR_K; j++) A.free(v[j]);
  return NULL;
}

static long large_reuse_faults(void) {
  long f0 = minor_faults();
  pthread_t t[LR_THREADS];
  for (int i = 0; i < LR_THREADS; i++) CHECK(pthread_create(&t[i], NULL, large_reuse_thread, (void *)(uintptr_t)i) == 0);
  for (int i = 0; i < LR_THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  return minor_faults() - f0;
}

static void t_large_reuse(void) {
  /* More threads than cores, so each waits for the CPU longer than the
   * purge delay now and then, as threads of a busy server do. Placed anew
   * each time, a block's first and last bytes land on pages purged since
   * they were last used; reused from the cache, the pages are there. The
   * same run with the cache off is the yardstick. */
  long cache = X.option_get("large_cache");
  CHECKF(cache >= 8, "large_cache is %ld: run this section with its default", cache);
  /* How often a thread waits past the purge delay depends on the load of
   * the machine: a quiet spell can leave the yardstick with few faults.
   * Up to three measurements; a cache that saves nothing fails them all. */
  long with = 0, without = 0;
  for (int attempt = 0; attempt < 3; attempt++) {
    X.collect(true);
    with = large_reuse_faults();
    CHECK(X.option_set("large_cache", 0) == 0);
    X.collect(true);
    without = large_reuse_faults();
    CHECK(X.option_set("large_cache", cache) == 0);
    fwt_log("large_reuse: %d threads x %d replacements in windows of %d live 64-512 KiB blocks: %ld minor faults "
            "with the large-block cache, %ld without",
            LR_THREADS, LR_OPS, LR_K, with, without);
    if (with * 4 < without * 3) break;
  }
  CHECKF(with * 4 < without * 3, "the large-block cache saved too few page faults: %ld with it, %ld without", with,
         without);
}

/* ops replacements at random in a window of k blocks (64 at most) of lo
 * to hi bytes, each written at its first and last bytes only: the minor
 * faults they took. */
static long replace_at_ends(int k, int ops, size_t lo, size_t hi, uint64_t seed) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && atol(e) >= 60000, "run this section with FREEWAY_PURGE_DELAY=60000");
  char *v[64] = {0};
  CHECK(k >= 1 && k <= 64);
  fwt_rng r;
  fwt_rng_init(&r, seed);
  long f0 = minor_faults();
  for (int i = 0; i < ops; i++) {
    size_t j = (size_t)(fwt_next(&r) % (uint64_t)k);
    if (v[j]) {
      CHECKF(v[j][0] == (char)j, "block %p lost its first byte", (void *)v[j]);
      A.free(v[j]);
    }
    size_t n = fwt_range(&r, lo, hi);
    v[j] = A.malloc(n);
    CHECK(v[j] != NULL);
    v[j][0] = (char)j;
    v[j][n - 1] = (char)j;
  }
  long faults = minor_faults() - f0;
  for (int j = 0; j < k; j++) A.free(v[j]);
  return faults;
}

/* One thread replaces large blocks of random sizes in a window, writing
 * the first and last byte of each (bench_speed's pattern: a header and a
 * trailer), with a purge delay longer than the test so that only where
 * blocks are placed decides the faults. A cached page taken again for a
 * size that ends on a page of its last slice where an earlier block ended
 * faults in nothing. Taking the last one freed whatever its history, and
 * emptying the cache at each request it could not serve once it held
 * 16 MiB, cost 7,858 faults here (0.196 a replacement); 2,030 since. */
static void t_large_ends(void) {
  enum { K = 64, OPS = 40000 };
  long faults = replace_at_ends(K, OPS, 140 * 1024, 512 * 1024, 23);
  fwt_log("large_ends: %d replacements in a window of %d blocks of 140-512 KiB: %ld minor faults (%.3f each)", OPS, K,
          faults, (double)faults / OPS);
  CHECKF(faults * 10 < OPS, "%ld page faults for %d replacements of large blocks in a window of %d: more than 0.1 each",
         faults, OPS, K);
}

/* The same with blocks of 1 to 2 MiB, written at their first and last
 * bytes only: once the thread's looks have found its big blocks written in
 * part, their freed pages wait in the cache too (large.h), and a
 * replacement of the same slice count comes back to pages already
 * touched: 2,884 faults for 20,000 replacements, where placing each block
 * anew on a best fit took 6,871 (its last byte on a page never touched
 * before, one replacement in three). */
static void t_large_sparse(void) {
  enum { K = 16, OPS = 20000 };
  long faults = replace_at_ends(K, OPS, MiB + 1, 2 * MiB, 31);
  fwt_log("large_sparse: %d replacements in a window of %d blocks of 1-2 MiB: %ld minor faults (%.3f each)", OPS, K,
          faults, (double)faults / OPS);
  CHECKF(faults * 4 < OPS, "%ld page faults for %d replacements of blocks of 1-2 MiB written at both ends: more than 0.25 each",
         faults, OPS);
}

/* The same with medium blocks (8 to 128 KiB), which share pages of their
 * class: a page that carves a new block for a request faults its pages in,
 * while the blocks freed in the class's other pages, touched already, would
 * have served. In 4 KiB pages (FREEWAY_THP=0), so that the count is exact:
 * 6,159 faults when only adopted pages served before a carve, 5,162 since. */
static void t_medium_reuse(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY"), *thp = getenv("FREEWAY_THP");
  CHECKF(e != NULL && atol(e) >= 60000 && thp != NULL && strcmp(thp, "0") == 0,
         "run this section with FREEWAY_PURGE_DELAY=60000 and FREEWAY_THP=0");
  enum { K = 256, OPS = 60000 };
  char *v[K] = {0};
  fwt_rng r;
  fwt_rng_init(&r, 29);
  long f0 = minor_faults();
  for (int i = 0; i < OPS; i++) {
    size_t j = (size_t)(fwt_next(&r) % K);
    if (v[j]) {
      CHECKF(v[j][0] == (char)j, "block %p lost its first byte", (void *)v[j]);
      A.free(v[j]);
    }
    size_t n = fwt_range(&r, 9 * 1024, 128 * 1024);
    v[j] = A.malloc(n);
    CHECK(v[j] != NULL);
    v[j][0] = (char)j;
    v[j][n - 1] = (char)j;
  }
  long faults = minor_faults() - f0;
  for (int j = 0; j < K; j++) A.free(v[j]);
  fwt_log("medium_reuse: %d replacements in a window of %d blocks of 9-128 KiB: %ld minor faults (%.3f each)", OPS, K,
          faults, (double)faults / OPS);
  CHECKF(faults * 100 < OPS * 9, "%ld page faults for %d replacements of medium blocks in a window of %d: 0.09 each or more",
         faults, OPS, K);
}

/* One thread replaces 1 to 2 MiB blocks at random among three, writing
 * every page: the blocks of other sizes freed meanwhile must be reused, not
 * held apart, so that RSS stays near what is live (at most 6 MiB). Freed
 * blocks that waited for a request of their exact size once added up to
 * the large-block cache's 16 MiB on top. */
/* Three slots of blocks of lo to hi bytes, every page written, one replaced
 * at random OPS times; RSS is looked at every every-th replacement. Returns
 * how far RSS rose above where it was (*r0) at its peak. */
static size_t big_churn_rise(int ops, uint64_t seed, size_t lo, size_t hi, int every, size_t *r0) {
  enum { LIVE = 3 };
  char *v[LIVE] = {0};
  size_t len[LIVE] = {0};
  fwt_rng r;
  fwt_rng_init(&r, seed);
  size_t peak = *r0 = fwt_rss();
  for (int i = 0; i < ops; i++) {
    size_t j = (size_t)(fwt_next(&r) % LIVE);
    if (v[j]) {
      CHECKF(v[j][0] == (char)j && v[j][len[j] - 1] == (char)j, "block %p lost its marks", (void *)v[j]);
      A.free(v[j]);
    }
    len[j] = fwt_range(&r, lo, hi);
    v[j] = A.malloc(len[j]);
    CHECK(v[j] != NULL);
    for (size_t k = 0; k < len[j]; k += 4096) v[j][k] = (char)j;
    v[j][len[j] - 1] = (char)j;
    if (i % every == 0) {
      size_t now = fwt_rss();
      if (now > peak) peak = now;
    }
  }
  for (int j = 0; j < LIVE; j++) A.free(v[j]);
  return peak - *r0;
}

static void t_big_churn(void) {
  enum { OPS = 1500 };
  size_t r0, rise = big_churn_rise(OPS, 5, MiB, 2 * MiB, 10, &r0);
  fwt_log("big_churn: RSS %zu MiB before, peak %zu MiB while 3 blocks of 1-2 MiB were replaced %d times", r0 / MiB,
          (r0 + rise) / MiB, OPS);
  CHECKF(rise <= 20 * MiB, "RSS rose by %zu MiB for at most 6 MiB of live blocks", rise / MiB);
}

/* The same with blocks of 1 MiB to 64 KiB short of 4 MiB: those up to
 * 2 MiB are spans in segments shared with others, the bigger ones have a
 * segment (one chunk) of their own. A segment of the one kind that empties
 * must serve the other, so that RSS stays near what is live (at most 12
 * MiB). A thread that kept its emptied span segment and faulted a new chunk
 * in for its next big block beside it peaked 19 to 20 MiB above where it started
 * (and bench_bigchurn's 1-4 MiB row at 24.5 MB of peak RSS, against 18 for
 * mimalloc 2 and 3), 12 since. */
static void t_big_churn_mixed(void) {
  enum { OPS = 300 };
  size_t r0, rise = big_churn_rise(OPS, 1, MiB, 4 * MiB - 64 * 1024, 1, &r0);
  fwt_log("big_churn_mixed: RSS %zu MiB before, peak %zu MiB while 3 blocks of 1-4 MiB were replaced %d times",
          r0 / MiB, (r0 + rise) / MiB, OPS);
  CHECKF(rise <= 16 * MiB, "RSS rose by %zu MiB for at most 12 MiB of live blocks", rise / MiB);
}

/* Buffers of a power of two of MiB, written through: a block in huge pages
 * ends 12 KiB into a huge page (the segment header comes first), a span of
 * 2 MiB 64 KiB into one, which must not come in whole: 4 blocks of 4 MiB
 * took 24 MiB of RSS and 4 of 8 MiB 40 before, against 16 and 32 for glibc
 * and mimalloc, and 4 of 2 MiB 14 MiB, against 8. Only where the
 * kernel offers transparent huge pages can it tell (4 KiB pages never
 * round up so far); thp.big_lapse failed while the advice was not given
 * back before the chunk returned to the arena. */
static void t_big_pow2(void) {
  for (size_t mib = 2; mib <= 8; mib *= 2) {
    enum { K = 4 };
    char *v[K];
    size_t r0 = fwt_rss();
    for (int i = 0; i < K; i++) {
      v[i] = A.malloc(mib * MiB);
      CHECK(v[i] != NULL);
      memset(v[i], i + 1, mib * MiB);
    }
    size_t rise = fwt_rss() - r0;
    for (int i = 0; i < K; i++) {
      CHECKF(v[i][mib * MiB - 1] == (char)(i + 1), "block %p lost its last byte", (void *)v[i]);
      A.free(v[i]);
    }
    fwt_log("big_pow2: %d blocks of %zu MiB written through: RSS rose by %zu KiB", K, mib, rise / 1024);
    CHECKF(rise <= (K * mib + 1) * MiB, "%d blocks of %zu MiB written through took %zu KiB of RSS", K, mib, rise / 1024);
  }
}

/* Buffers a little above a multiple of 2 MiB, written through: the huge
 * page a block in huge pages ends in keeps 4 KiB pages when the block
 * fills at most 512 KiB of it. 4 blocks of 2 MiB + 256 KiB took 16 MiB of
 * RSS before (4 MiB each), 4 of 6 MiB + 256 KiB 32 MiB; glibc and
 * mimalloc take what the blocks hold. A second round, on the memory the
 * first gave back, must not take more. As big_pow2, it can tell only where
 * the kernel offers transparent huge pages. */
static void t_big_tail(void) {
  for (size_t mib = 2; mib <= 6; mib += 4) {
    enum { K = 4 };
    size_t size = mib * MiB + 256 * 1024;
    if (X.collect) X.collect(true);  /* the first round on fresh memory */
    for (int round = 0; round < 2; round++) {
      char *v[K];
      size_t r0 = fwt_rss();
      for (int i = 0; i < K; i++) {
        v[i] = A.malloc(size);
        CHECK(v[i] != NULL);
        memset(v[i], i + 1, size);
      }
      size_t rise = fwt_rss() - r0;
      for (int i = 0; i < K; i++) {
        CHECKF(v[i][size - 1] == (char)(i + 1), "block %p lost its last byte", (void *)v[i]);
        A.free(v[i]);
      }
      fwt_log("big_tail: %d blocks of %zu KiB written through (round %d): RSS rose by %zu KiB", K, size / 1024,
              round, rise / 1024);
      CHECKF(rise <= K * size + MiB, "%d blocks of %zu KiB written through took %zu KiB of RSS", K, size / 1024,
             rise / 1024);
    }
  }
}

/* One round of realloc_grow: 64 buffers grown in turn by 1-64 B steps to
 * FINAL bytes; the minor page faults it took. */
enum { RG_B = 64, RG_FINAL = 64 * 1024 };
static long realloc_grow_round(char **buf, size_t *len, fwt_rng *r) {
  long f0 = minor_faults();
  for (size_t done = 0; done < RG_B;) {
    done = 0;
    for (size_t i = 0; i < RG_B; i++) {
      if (len[i] >= RG_FINAL) {
        done++;
        continue;
      }
      size_t n = len[i] + fwt_range(r, 1, 64);
      if (n > RG_FINAL) n = RG_FINAL;
      char *q = A.realloc(buf[i], n);
      CHECK(q != NULL);
      if (len[i]) CHECKF(q[len[i] - 1] == (char)(len[i] - 1), "realloc to %zu lost byte %zu", n, len[i] - 1);
      for (size_t k = len[i]; k < n; k++) q[k] = (char)k;
      buf[i] = q;
      len[i] = n;
    }
  }
  return minor_faults() - f0;
}

static void t_realloc_grow(void) {
  char *buf[RG_B] = {0};
  size_t len[RG_B] = {0};
  fwt_rng r;
  fwt_rng_init(&r, 21);
  long faults = realloc_grow_round(buf, len, &r);
  long final_pages = (long)RG_B * RG_FINAL / 4096;
  fwt_log("realloc_grow: %d buffers grown to %d KiB by 1-64 B steps: %ld minor faults (%ld pages at the end)", RG_B,
          RG_FINAL / 1024, faults, final_pages);
  /* every byte is written once: the final buffers take final_pages faults;
   * the classes below must add at most as much again */
  CHECKF(faults < 2 * final_pages + 256, "%ld page faults for buffers that end at %ld pages", faults, final_pages);
  /* A second round on the memory of the first: each class's page, emptied
   * as the buffers grew past it, must give its slot to the classes above
   * again (page.c, fw_page_retire_empty_head), not stay for good because
   * the class came back (heap->head_back, which lapses): with it kept,
   * bench_reallocgrow's second round took 850 more faults on one thread. */
  for (size_t i = 0; i < RG_B; i++) A.free(buf[i]), buf[i] = NULL, len[i] = 0;
  long again = realloc_grow_round(buf, len, &r);
  fwt_log("realloc_grow: the second round took %ld minor faults", again);
  CHECKF(again < final_pages / 2, "the second round took %ld page faults (the first %ld)", again, faults);
  for (size_t i = 0; i < RG_B; i++) A.free(buf[i]);
}

/* The OS calls of kind "populate" so far (fw_stats_print_json). */
static long populate_calls(void) {
  static char buf[1 << 16];
  fwt_stats_json(buf, sizeof buf);
  return (long)fwt_json_size(buf, "populate");
}

/* A fresh thread: a block or two of each of 40 sizes (a page each, mostly
 * unwritten) must be faulted in as written, no page in whole; then 1 MiB
 * of 256-byte blocks kept (16 pages of one class) must have the pages
 * after the class's first come in whole, one call each; with the option
 * off, none again. */
static void *populate_thread(void *arg) {
  (void)arg;
  long p0 = populate_calls();
  size_t r0 = fwt_rss();
  void *few[80];
  for (int i = 0; i < 80; i++) {
    few[i] = A.malloc(16 + (size_t)(i / 2) * 48);
    CHECK(few[i] != NULL);
    memset(few[i], 1, 16);
  }
  long p1 = populate_calls();
  size_t r1 = fwt_rss();
  fwt_log("populate: 80 blocks of 40 sizes: %ld populate calls, RSS +%zu KiB", p1 - p0, (r1 - r0) >> 10);
  CHECKF(p1 == p0, "a page with two blocks in use was faulted in whole (%ld calls)", p1 - p0);
  CHECKF(r1 - r0 < 1 * MiB, "80 blocks of 40 sizes took %zu KiB of RSS", (r1 - r0) >> 10);
  enum { N = 4096 };
  static char *keep[2][N];
  for (int i = 0; i < N; i++) {
    keep[0][i] = A.malloc(256);
    CHECK(keep[0][i] != NULL);
    keep[0][i][0] = (char)i;
  }
  long p2 = populate_calls();
  fwt_log("populate: 1 MiB of 256-byte blocks: %ld populate calls", p2 - p1);
  /* under the heap profiler a sampled block goes to a page of samples:
   * fewer pages of the class's own */
  long want = X.option_get("profile") == 1 ? 6 : 12;
  CHECKF(p2 - p1 >= want, "1 MiB of 256-byte blocks (16 pages) faulted %ld pages in whole", p2 - p1);
  CHECK(X.option_set("populate", 0) == 0);
  for (int i = 0; i < N; i++) {
    keep[1][i] = A.malloc(240);
    CHECK(keep[1][i] != NULL);
    keep[1][i][0] = (char)i;
  }
  long p3 = populate_calls();
  CHECK(X.option_set("populate", 1) == 0);
  CHECKF(p3 == p2, "with FREEWAY_POPULATE=0, %ld pages were faulted in whole", p3 - p2);
  for (int i = 0; i < N; i++) {
    CHECK(keep[0][i][0] == (char)i && keep[1][i][0] == (char)i);
    A.free(keep[0][i]);
    A.free(keep[1][i]);
  }
  for (int i = 0; i < 80; i++) A.free(few[i]);
  return NULL;
}

static void t_populate(void) {
  if (X.option_get("populate") != 1) {
    fwt_log("populate: the option is off here; skipped");
    exit(77);
  }
  run_thread(populate_thread, NULL);
}

/* The VmFlags of the mapping holding p (/proc/self/smaps), or "" if none. */
static void vm_flags(const void *p, char *out, size_t cap) {
  out[0] = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return;
  char line[512];
  bool in = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long long lo, hi;
    if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      size_t n = strlen(line + 8);
      if (n >= cap) n = cap - 1;
      memcpy(out, line + 8, n);
      out[n] = 0;
      break;
    }
  }
  fclose(f);
}

static void t_thp_advice(void) {
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) != 0) {
    fwt_log("thp_advice: the kernel has no transparent huge pages: skipped");
    exit(77);
  }
  long thp = X.option_get("thp");
  CHECK(thp >= 0 && thp <= 2);
  /* 2 (the default) advises huge pages only for a thread's third and later
   * segments of small blocks (tests/thp.c): these first blocks' are not */
  bool huge = thp == 1;
  char *p = A.malloc(100);
  char *q = A.malloc(100000);
  CHECK(p && q);
  for (int k = 0; k < 2; k++) {
    char flags[256];
    vm_flags(k ? q : p, flags, sizeof flags);
    if (!flags[0]) {
      fwt_log("thp_advice: no VmFlags in /proc/self/smaps: skipped");
      exit(77);
    }
    fwt_log("thp_advice: FREEWAY_THP=%ld, VmFlags:%s", thp, flags);
    /* hg: MADV_HUGEPAGE, nh: MADV_NOHUGEPAGE */
    CHECKF(strstr(flags, huge ? " hg" : " nh") != NULL, "FREEWAY_THP=%ld, but the mapping's flags are%s", thp,
           flags);
    CHECKF(strstr(flags, huge ? " nh" : " hg") == NULL, "FREEWAY_THP=%ld, but the mapping's flags are%s", thp,
           flags);
  }
  A.free(q);
  A.free(p);
}

static burst_set thread_set;
static void *burst_thread(void *arg) {
  (void)arg;
  make_burst(&thread_set, 5);
  return NULL;
}

static void t_thread(void) {
  X.collect(true);
  size_t r0 = fwt_rss();
  run_thread(burst_thread, NULL);
  size_t r1 = fwt_rss();
  free_burst(&thread_set, 6); /* the owner has exited */
  X.collect(true);
  size_t r2 = fwt_rss();
  report("thread", r0, r1, r2);
  CHECKF(dropped(r0, r1, r2),
         "blocks of an exited thread, freed by main + fw_collect(true): RSS %zu MiB (%zu before, %zu with them)",
         r2 / MiB, r0 / MiB, r1 / MiB);
}

/* A thread's free memory goes back when it exits, not a purge delay later
 * (the delay is set to a minute here, so that nothing else can return it):
 * the thread makes a burst and frees it, keeping (exit_abandoned) about one
 * block in each 4 MiB it allocated, so that its segments are left with
 * live blocks for another thread to adopt, or (exit_empty) none. Only a
 * little of each segment may stay warm for whoever takes it over next: at
 * most half the burst may still be resident right after the join (an
 * eighth, if no block was kept). */
#define EXIT_KEPT_MAX (512 / 4 + 1) /* the burst, in 4 MiB steps */
typedef struct exit_job {
  bool keep;
  size_t r1;
  char *kept[EXIT_KEPT_MAX];
  size_t nkept;
} exit_job;

static void *exit_thread(void *arg) {
  exit_job *j = arg;
  burst_set b;
  make_burst(&b, 13);
  j->r1 = fwt_rss();
  j->nkept = 0;
  size_t bytes = 0, mark = 0;
  for (size_t i = 0; i < b.n && j->keep; i++) {
    if (bytes >= mark && j->nkept < EXIT_KEPT_MAX) {
      mark += 4 * MiB;
      j->kept[j->nkept++] = b.v[i];
      b.v[i] = NULL;
    }
    bytes += A.usable_size(b.v[i] ? b.v[i] : j->kept[j->nkept - 1]);
  }
  /* the rest in a scattered order */
  fwt_rng r;
  fwt_rng_init(&r, 14);
  for (size_t i = b.n; i > 1; i--) {
    size_t k = (size_t)(fwt_next(&r) % i);
    char *t = b.v[i - 1];
    b.v[i - 1] = b.v[k];
    b.v[k] = t;
  }
  for (size_t i = 0; i < b.n; i++)
    if (b.v[i]) A.free(b.v[i]);
  fwt_scratch_free(b.v, b.cap * sizeof *b.v);
  return NULL;
}

static void exit_case(bool keep) {
  const char *what = keep ? "exit_abandoned" : "exit_empty";
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 60000) == 0);
  X.collect(true);
  size_t r0 = fwt_rss();
  static exit_job j;
  j.keep = keep;
  run_thread(exit_thread, &j);
  size_t r2 = fwt_rss();
  fw_stats_t s;
  fwt_stats(&s);
  fwt_log("%s: rss %zu MiB before, %zu MiB with the burst, %zu MiB after the thread freed it%s and exited; "
          "%zu segments abandoned",
          what, r0 / MiB, j.r1 / MiB, r2 / MiB, keep ? " but a block per 4 MiB" : "", s.segments_abandoned);
  CHECKF(j.r1 >= r0 + burst * 3 / 4, "%s: RSS rose only from %zu to %zu MiB for a %zu MiB burst", what, r0 / MiB,
         j.r1 / MiB, burst / MiB);
  if (keep) CHECKF(s.segments_abandoned >= j.nkept / 4, "%s: %zu blocks kept, only %zu segments abandoned", what,
                   j.nkept, s.segments_abandoned);
  /* Empty segments give back all but a little each; a thread keeps up to
   * FREEWAY_SEGMENT_CACHE of them, which used to wait for the delay. */
  CHECKF(r2 <= r0 + (j.r1 - r0) / (keep ? 2 : 8),
         "%s: RSS still %zu MiB right after the thread exited (%zu before its burst, %zu with it): its free memory "
         "waits for the purge delay",
         what, r2 / MiB, r0 / MiB, j.r1 / MiB);
  for (size_t i = 0; i < j.nkept; i++) {
    CHECK(j.kept[i][0] != 0);
    A.free(j.kept[i]);
  }
  CHECK(X.option_set("purge_delay", delay) == 0);
  X.collect(true);
}

static void t_exit_abandoned(void) { exit_case(true); }
static void t_exit_empty(void) { exit_case(false); }

/* A thread that exits leaves its empty segments warm whole when they hold
 * little resident memory (abandon.c): big buffers of which it wrote only
 * the first and last bytes, freed before it exits. The next thread to do
 * the same finds their pages in place: it takes a fraction of the first
 * one's page faults (each counted by getrusage for its own thread). */
typedef struct { long faults; } sparse_job;
static void *exit_sparse_thread(void *arg) {
  sparse_job *j = arg;
  enum { N = 40 };
  char *v[N];
  struct rusage u0, u1;
  getrusage(RUSAGE_THREAD, &u0);
  for (int i = 0; i < N; i++) {
    v[i] = A.malloc(MiB);
    CHECK(v[i] != NULL);
    v[i][0] = (char)i;
    v[i][MiB - 1] = (char)i;
  }
  getrusage(RUSAGE_THREAD, &u1);
  for (int i = 0; i < N; i++) A.free(v[i]);
  j->faults = u1.ru_minflt - u0.ru_minflt;
  return NULL;
}

static void t_exit_sparse(void) {
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 60000) == 0);
  X.collect(true);
  sparse_job j[2];
  for (int k = 0; k < 2; k++) run_thread(exit_sparse_thread, &j[k]);
  fwt_log("exit_sparse: 40 blocks of 1 MiB, first and last bytes written: %ld page faults in the first thread, %ld "
          "in the next",
          j[0].faults, j[1].faults);
  CHECKF(j[0].faults >= 40, "the first thread took only %ld page faults for 40 fresh blocks", j[0].faults);
  CHECKF(j[1].faults <= j[0].faults / 4,
         "the next thread took %ld page faults against the first one's %ld: the exited thread's memory was purged",
         j[1].faults, j[0].faults);
  CHECK(X.option_set("purge_delay", delay) == 0);
  X.collect(true);
}

/* The other way: a thread that wrote its big buffers through leaves its
 * empty segments dense, and they are purged as it exits (but for a little
 * of each), the many it holds beyond the few it looks at included
 * (abandon.c, FW_EXIT_LOOKS). 48 MiB written, freed, the thread gone: RSS
 * must not keep most of it. */
static void *exit_dense_thread(void *arg) {
  (void)arg;
  enum { N = 48 };
  char *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = A.malloc(MiB);
    CHECK(v[i] != NULL);
    memset(v[i], i + 1, MiB);
  }
  for (int i = 0; i < N; i++) A.free(v[i]);
  return NULL;
}

static void t_exit_dense(void) {
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 60000) == 0);
  X.collect(true);
  size_t r0 = fwt_rss();
  run_thread(exit_dense_thread, NULL);
  size_t r1 = fwt_rss();
  fwt_log("exit_dense: 48 blocks of 1 MiB written through, freed, thread gone: RSS %zu -> %zu MiB", r0 / MiB,
          r1 / MiB);
  CHECKF(r1 <= r0 + 16 * MiB, "an exited thread's 48 MiB of written, freed big blocks left RSS at %zu MiB from %zu",
         r1 / MiB, r0 / MiB);
  CHECK(X.option_set("purge_delay", delay) == 0);
  X.collect(true);
}

/* calloc on memory fresh from the OS does not write it: 1000 blocks of
 * 64 KiB (62.5 MiB) raise RSS by little more than the one page of each
 * block that holds its free-list link. Blocks that come back dirty are
 * cleared: every byte is checked after a round of writes and frees. */
static void *calloc_fresh_thread(void *arg) {
  (void)arg;
  enum { N = 1000 };
  const size_t sz = 64 * 1024;
  static char *v[N];
  size_t r0 = fwt_rss();
  for (int i = 0; i < N; i++) {
    v[i] = A.calloc(1, sz);
    CHECK(v[i] != NULL);
    CHECKF(v[i][0] == 0 && v[i][sz / 2] == 0 && v[i][sz - 1] == 0, "calloc block %p not zero", (void *)v[i]);
  }
  size_t r1 = fwt_rss();
  fwt_log("calloc_fresh: %d blocks of %zu KiB raised RSS by %zu MiB", N, sz / 1024, (r1 - r0) / MiB);
  CHECKF(r1 - r0 <= 16 * MiB, "calloc of %zu MiB of fresh memory raised RSS by %zu MiB: it was written",
         N * sz / MiB, (r1 - r0) / MiB);
  for (int i = 0; i < N; i += 2) {
    memset(v[i], 0xab, sz);
    A.free(v[i]);
  }
  for (int i = 0; i < N; i += 2) {
    v[i] = A.calloc(sz, 1);
    CHECK(v[i] != NULL);
    for (size_t k = 0; k < sz; k++)
      CHECKF(v[i][k] == 0, "reused calloc block %p: byte %zu is %#x", (void *)v[i], k, (unsigned char)v[i][k]);
  }
  for (int i = 0; i < N; i++) A.free(v[i]);
  return NULL;
}

static void t_calloc_fresh(void) {
  /* a new thread: its heap starts from fresh pages */
  run_thread(calloc_fresh_thread, NULL);
}

static const fwt_section sections[] = {
  {"collect", t_collect},
  {"thread", t_thread},
  {"calloc_fresh", t_calloc_fresh},
  {"_purge_delay0", t_purge_delay0},
  {"_quiet", t_quiet},
  {"_quiet_rounds", t_quiet_rounds},
  {"_quiet_rounds_spans", t_quiet_rounds_spans},
  {"_sampled_burst", t_sampled_burst},
  {"_burst_purged", t_burst_purged},
  {"large_reuse", t_large_reuse},
  {"_large_ends", t_large_ends},
  {"_large_sparse", t_large_sparse},
  {"_medium_reuse", t_medium_reuse},
  {"_realloc_grow", t_realloc_grow},
  {"_populate", t_populate},
  {"big_churn", t_big_churn},
  {"big_churn_mixed", t_big_churn_mixed},
  {"big_pow2", t_big_pow2},
  {"big_tail", t_big_tail},
  {"thp_advice", t_thp_advice},
  {"exit_abandoned", t_exit_abandoned},
  {"exit_empty", t_exit_empty},
  {"exit_sparse", t_exit_sparse},
  {"exit_dense", t_exit_dense},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
