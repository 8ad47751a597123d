/* big.c — blocks above 2 MiB (each in a segment of its own):
 *   reuse_faults:  a window of 5-25 MiB blocks replaced over and over, with
 *                  a pause longer than the purge delay after each one: the
 *                  pages written stay in place for the next blocks, so page
 *                  faults after the warm-up are few;
 *   burst_rss:     after a burst of such blocks is freed, RSS falls back
 *                  near where it was once the (lengthened) purge delay has
 *                  passed and the allocator is called again;
 *   thread_exit:   the same for a thread that churns big blocks and exits,
 *                  some of them freed by main after it has gone: no segment
 *                  is left, and RSS falls without the thread;
 *   calloc_reuse:  calloc on memory a freed block left dirty reads as zero;
 *   realloc_place: realloc grows a big block into the free chunks after it
 *                  and shrinks it by giving its tail back, without moving it;
 *   aligned:       aligned big blocks placed over freed ones keep their
 *                  alignment and contents. */
#include "fwtest.h"

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static long minor_faults(void) {
  struct rusage ru;
  CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
  return ru.ru_minflt;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Writes one byte in every page, as a program filling a buffer does; the
 * first and last bytes carry the slot's mark. */
static void touch(char *p, size_t n, char mark) {
  size_t page = fwt_page_size();
  for (size_t off = 0; off < n; off += page) p[off] = mark;
  p[n - 1] = mark;
}

static void check_marks(const char *p, size_t n, char mark) {
  CHECKF(p[0] == mark && p[n - 1] == mark, "big block %p (%zu bytes) lost its marks", (const void *)p, n);
}

/* A window of live big blocks, one replaced at random per step. */
typedef struct window {
  char *v[4];
  size_t n[4];
  size_t k;
  fwt_rng r;
} window;

static void window_init(window *w, size_t k, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->k = k;
  fwt_rng_init(&w->r, seed);
}

/* One step; returns the pages it wrote. */
static size_t window_step(window *w, size_t lo, size_t hi) {
  size_t j = (size_t)(fwt_next(&w->r) % w->k);
  char mark = (char)(j + 1);
  if (w->v[j]) {
    check_marks(w->v[j], w->n[j], mark);
    A.free(w->v[j]);
  }
  size_t n = fwt_range(&w->r, lo, hi);
  char *p = A.malloc(n);
  CHECKF(p != NULL, "malloc(%zu) failed", n);
  touch(p, n, mark);
  w->v[j] = p;
  w->n[j] = n;
  return (n + fwt_page_size() - 1) / fwt_page_size();
}

static void window_free(window *w) {
  for (size_t j = 0; j < w->k; j++) {
    if (!w->v[j]) continue;
    check_marks(w->v[j], w->n[j], (char)(j + 1));
    A.free(w->v[j]);
    w->v[j] = NULL;
  }
}

/* ---- reuse_faults --------------------------------------------------------- */
static void t_reuse_faults(void) {
  /* The pause after each block stands for the work a program does on it.
   * It is longer than the purge delay: memory given back for good at the
   * delay is gone by the time the next block wants it, and every page of
   * that block is a fault. The chunks of a freed big block stay warm for a
   * multiple of the delay, which the pause is well below. */
  enum { WARM = 30, OPS = 90, PAUSE_MS = 30 };
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 20) == 0);
  long faults = 0;
  size_t pages = 0;
  for (int attempt = 0; attempt < 3; attempt++) {
    window w;
    window_init(&w, 3, 7 + (uint64_t)attempt);
    X.collect(true);
    for (int i = 0; i < WARM; i++) {
      window_step(&w, 5 * MiB, 25 * MiB);
      sleep_ms(PAUSE_MS);
    }
    long f0 = minor_faults();
    pages = 0;
    for (int i = 0; i < OPS; i++) {
      pages += window_step(&w, 5 * MiB, 25 * MiB);
      sleep_ms(PAUSE_MS);
    }
    faults = minor_faults() - f0;
    window_free(&w);
    fwt_log("reuse_faults: %d blocks of 5-25 MiB after %d to warm up, %d ms apart: %ld minor faults for %zu pages "
            "written",
            OPS, WARM, PAUSE_MS, faults, pages);
    /* A machine too busy to run the thread for several purge delays at a
     * time can make any allocator that purges lose some: measure again. */
    if ((size_t)faults * 8 < pages) break;
  }
  CHECK(X.option_set("purge_delay", delay) == 0);
  CHECKF((size_t)faults * 8 < pages, "%ld page faults for %zu pages written: freed big blocks were not reused warm",
         faults, pages);
}

/* ---- RSS after a burst ------------------------------------------------------- */
/* Small calls that run the allocator's housekeeping, as a program that goes
 * on after the burst would make. */
static void nudge(void) {
  for (int i = 0; i < 200; i++) {
    void *p = A.malloc(64 + (size_t)(i % 50) * 16);
    CHECK(p);
    A.free(p);
    p = A.malloc(100000);
    CHECK(p);
    A.free(p);
  }
}

/* Under a sanitizer RSS also holds its shadow of every page the blocks
 * touched, which a purge of the blocks does not give back: there the
 * allocator's own figure (committed bytes) is the measure. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BIG_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BIG_SANITIZED 1
#endif

static size_t committed(void) {
  fw_stats_t s;
  fwt_stats(&s);
  return s.bytes_committed;
}

/* Waits (calling the allocator now and then) for up to ten seconds until
 * RSS is at most rss_limit (not under a sanitizer) and committed bytes at
 * most committed_limit. */
static void wait_below(size_t rss_limit, size_t committed_limit) {
  for (int i = 0; i < 200; i++) {
#ifndef BIG_SANITIZED
    if (fwt_rss() <= rss_limit && committed() <= committed_limit) return;
#else
    (void)rss_limit;
    if (committed() <= committed_limit) return;
#endif
    sleep_ms(50);
    nudge();
  }
}

static void t_burst_rss(void) {
  enum { N = 24 };
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 10) == 0);
  X.collect(true);
  size_t r0 = fwt_rss();
  fw_stats_t s0, s1;
  fwt_stats(&s0);
  char *v[N];
  size_t n[N], total = 0;
  fwt_rng r;
  fwt_rng_init(&r, 3);
  for (int i = 0; i < N; i++) {
    n[i] = fwt_range(&r, 5 * MiB, 25 * MiB);
    v[i] = A.malloc(n[i]);
    CHECK(v[i] != NULL);
    touch(v[i], n[i], (char)(i | 1));
    total += n[i];
  }
  size_t r1 = fwt_rss();
  CHECKF(r1 >= r0 + total * 3 / 4, "RSS rose from %zu to %zu MiB for %zu MiB written", r0 / MiB, r1 / MiB,
         total / MiB);
  for (int i = 0; i < N; i++) {
    check_marks(v[i], n[i], (char)(i | 1));
    A.free(v[i]);
  }
  size_t r2 = fwt_rss();
  wait_below(r0 + (r1 - r0) / 4, s0.bytes_committed + (r1 - r0) / 4);
  size_t r3 = fwt_rss();
  /* wait_below's nudges may leave an empty segment of their medium blocks
   * in the thread's cache: that one is not the burst's */
  X.collect(true);
  fwt_stats(&s1);
  fwt_log("burst_rss: %d blocks, %zu MiB: RSS %zu MiB before, %zu with them, %zu right after the frees, %zu later; "
          "%zu MiB committed (%zu before)",
          N, total / MiB, r0 / MiB, r1 / MiB, r2 / MiB, r3 / MiB, s1.bytes_committed / MiB, s0.bytes_committed / MiB);
  CHECK(X.option_set("purge_delay", delay) == 0);
  CHECKF(r3 <= r0 + (r1 - r0) / 4, "RSS stayed at %zu MiB (%zu before the burst, %zu with it)", r3 / MiB,
         r0 / MiB, r1 / MiB);
  CHECKF(s1.bytes_committed <= s0.bytes_committed + (r1 - r0) / 4, "%zu MiB still committed (%zu before)",
         s1.bytes_committed / MiB, s0.bytes_committed / MiB);
  CHECKF(s1.segments <= s0.segments, "%zu segments, %zu before the burst", s1.segments, s0.segments);
}

/* ---- a thread that churns big blocks and exits --------------------------------- */
static char *te_left[2];
static size_t te_left_n[2];

static void *te_thread(void *arg) {
  (void)arg;
  window w;
  window_init(&w, 3, 17);
  for (int i = 0; i < 40; i++) window_step(&w, 5 * MiB, 25 * MiB);
  /* two blocks outlive the thread; main frees them */
  for (int j = 0; j < 2; j++) {
    te_left[j] = w.v[j];
    te_left_n[j] = w.n[j];
    w.v[j] = NULL;
  }
  window_free(&w);
  return NULL;
}

static void t_thread_exit(void) {
  long delay = X.option_get("purge_delay");
  CHECK(X.option_set("purge_delay", 10) == 0);
  X.collect(true);
  nudge(); /* main's own segments for what nudge allocates, before counting */
  size_t r0 = fwt_rss();
  fw_stats_t s0, s1;
  fwt_stats(&s0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, te_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  size_t r1 = fwt_rss();
  for (int j = 0; j < 2; j++) {
    check_marks(te_left[j], te_left_n[j], (char)(j + 1));
    A.free(te_left[j]);
  }
  wait_below(r0 + 16 * MiB, s0.bytes_committed + 16 * MiB);
  size_t r2 = fwt_rss();
  fwt_stats(&s1);
  fwt_log("thread_exit: RSS %zu MiB before the thread, %zu after it, %zu later; committed %zu MiB, %zu before; "
          "segments %zu, %zu before; abandoned %zu, %zu before",
          r0 / MiB, r1 / MiB, r2 / MiB, s1.bytes_committed / MiB, s0.bytes_committed / MiB, s1.segments, s0.segments,
          s1.segments_abandoned, s0.segments_abandoned);
  CHECK(X.option_set("purge_delay", delay) == 0);
  CHECKF(s1.segments <= s0.segments && s1.segments_abandoned <= s0.segments_abandoned,
         "a thread gone with its big blocks freed left segments: %zu (%zu abandoned), %zu (%zu) before",
         s1.segments, s1.segments_abandoned, s0.segments, s0.segments_abandoned);
  CHECKF(s1.bytes_committed <= s0.bytes_committed + 16 * MiB,
         "%zu MiB still committed after a thread's big blocks were freed (%zu before it)", s1.bytes_committed / MiB,
         s0.bytes_committed / MiB);
#ifndef BIG_SANITIZED
  CHECKF(r2 <= r0 + 16 * MiB, "RSS stayed at %zu MiB after a thread's big blocks were freed (%zu before it)",
         r2 / MiB, r0 / MiB);
#endif
}

/* ---- calloc over dirty memory --------------------------------------------------- */
static void t_calloc_reuse(void) {
  fwt_rng r;
  fwt_rng_init(&r, 5);
  for (int i = 0; i < 24; i++) {
    size_t n = fwt_range(&r, 3 * MiB, 25 * MiB);
    char *p = A.malloc(n);
    CHECK(p != NULL);
    memset(p, 0xa5, n);
    A.free(p);
    /* the same size (the same chunks, warm), a smaller and a larger one */
    size_t m = i % 3 == 0 ? n : i % 3 == 1 ? n / 2 + 3 * MiB : n + 4 * MiB;
    char *q = A.calloc(1, m);
    CHECK(q != NULL);
    CHECK_ZERO(q, m);
    memset(q, 0x5a, m);
    A.free(q);
  }
}

/* ---- realloc in place --------------------------------------------------------- */
static void t_realloc_place(void) {
  X.collect(true);
  size_t n = 6 * MiB;
  char *p = A.malloc(n);
  CHECK(p != NULL);
  uint64_t seed = 99;
  fwt_fill(p, n, seed);
  int steps = 0, kept = 0;
  while (n < fwt_scaled(64) * MiB) {
    size_t m = n + 5 * MiB;
    char *q = A.realloc(p, m);
    CHECKF(q != NULL, "realloc to %zu MiB", m / MiB);
    CHECK_PATTERN(q, n, seed);
    kept += q == p;
    steps++;
    p = q;
    n = m;
    seed++;
    fwt_fill(p, n, seed);
  }
  fwt_log("realloc_place: %d of %d growths by 5 MiB up to %zu MiB kept the block in place", kept, steps, n / MiB);
  /* The chunks after the block are free in a process that allocates
   * nothing else meanwhile, but another arena user may sit there now and
   * then: most growths, not all. */
  CHECKF(kept * 2 >= steps, "only %d of %d growths stayed in place", kept, steps);

  /* shrinking below half gives the tail back, in place */
  size_t small = 9 * MiB;
  char *q = A.realloc(p, small);
  CHECK(q == p);
  CHECK_PATTERN(q, small, seed);
  size_t usable = A.usable_size(q);
  CHECKF(usable >= small && usable < small + 4 * MiB, "usable size %zu after a shrink to %zu", usable, small);
  /* ... and the chunks it gave back can be taken again */
  char *g = A.realloc(q, 3 * small);
  CHECK(g != NULL);
  CHECK_PATTERN(g, small, seed);
  A.free(g);
}

/* ---- aligned blocks --------------------------------------------------------------- */
static void t_aligned(void) {
  static const size_t aligns[] = {64 * 1024, 1 * MiB, 2 * MiB, 4 * MiB};
  enum { K = 4 };
  blk live[K] = {{0}};
  fwt_rng r;
  fwt_rng_init(&r, 11);
  for (int i = 0; i < 48; i++) {
    size_t j = (size_t)(fwt_next(&r) % K);
    if (live[j].p) {
      bcheck(&live[j]);
      A.free(live[j].p);
    }
    size_t align = aligns[fwt_next(&r) % 4];
    size_t n = fwt_range(&r, 3 * MiB, 20 * MiB) & ~(align - 1);
    if (n == 0) n = align;
    live[j].p = A.aligned_alloc(align, n);
    CHECKF(live[j].p != NULL && fwt_aligned(live[j].p, align), "aligned_alloc(%zu, %zu) = %p", align, n,
           (void *)live[j].p);
    CHECK(A.usable_size(live[j].p) >= n);
    live[j].n = n;
    live[j].salt = (uint64_t)i;
    bfill(&live[j]);
  }
  for (int j = 0; j < K; j++) {
    bcheck(&live[j]);
    A.free(live[j].p);
  }
}

static const fwt_section sections[] = {
  {"reuse_faults", t_reuse_faults},   {"burst_rss", t_burst_rss}, {"thread_exit", t_thread_exit},
  {"calloc_reuse", t_calloc_reuse},   {"realloc_place", t_realloc_place}, {"aligned", t_aligned},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
