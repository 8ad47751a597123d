/* churn.c — 100,000 short-lived threads, created and joined in batches.
 * Each allocates and frees a few blocks and leaves two behind in a shared
 * table, freed later by a thread of another batch after their creator has
 * exited. Committed memory, segments and RSS must stay bounded: measured
 * after a tenth of the threads and at the end. */
#include "fwtest.h"

#include <pthread.h>
#include <unistd.h>

enum { BATCH = 32, HANDOFF = 4096 };

static _Atomic(uintptr_t) handoff[HANDOFF];
static atomic_ulong handed, freed_remote;

static void stamp(char *p, size_t n) {
  memcpy(p, &n, sizeof n);
  fwt_fill(p + 8, n - 8, fwt_seed(p, n, 0xc4));
}
static size_t check(const char *p) {
  size_t n;
  memcpy(&n, p, sizeof n);
  CHECKF(n >= 16 && n <= 70000, "block %p: corrupt size word %zu", (const void *)p, n);
  CHECK_PATTERN(p + 8, n - 8, fwt_seed(p, n, 0xc4));
  return n;
}

static void *churner(void *arg) {
  size_t id = (size_t)(uintptr_t)arg;
  fwt_rng r;
  fwt_rng_init(&r, id);
  char *mine[6];
  for (int i = 0; i < 6; i++) {
    size_t n = i == 5 && id % 8 == 0 ? 65536 : fwt_range(&r, 16, 4096);
    mine[i] = (i % 2) ? A.malloc(n) : A.calloc(1, n);
    CHECKF(mine[i] != NULL, "thread %zu: allocating %zu bytes", id, n);
    stamp(mine[i], n);
  }
  for (int i = 0; i < 4; i++) {
    check(mine[i]);
    A.free(mine[i]);
  }
  /* Leave the last two for a thread of a later batch. */
  for (int i = 4; i < 6; i++) {
    check(mine[i]);
    uintptr_t old = atomic_exchange(&handoff[(id * 2 + (size_t)i) % HANDOFF], (uintptr_t)mine[i]);
    atomic_fetch_add(&handed, 1);
    if (old) {
      check((char *)old);
      A.free((void *)old);
      atomic_fetch_add(&freed_remote, 1);
    }
  }
  return NULL;
}

typedef struct mark {
  size_t threads;
  fw_stats_t s;
  size_t rss;
} mark;

static void take(mark *m, size_t threads) {
  m->threads = threads;
  fwt_stats(&m->s);
  m->rss = fwt_rss();
  fwt_log("after %7zu threads: committed %5zu MiB, reserved %6zu MiB, segments %4zu (abandoned %zu), "
          "threads now %zu, total %zu, rss %zu MiB",
          threads, m->s.bytes_committed >> 20, m->s.bytes_reserved >> 20, m->s.segments,
          m->s.segments_abandoned, m->s.threads, m->s.threads_total, m->rss >> 20);
}

static void t_churn(void) {
  size_t total = fwt_scaled(100000);
  total = (total + BATCH - 1) / BATCH * BATCH;
  size_t tenth = (total / 10 + BATCH - 1) / BATCH * BATCH;
  pthread_attr_t attr;
  CHECK(pthread_attr_init(&attr) == 0);
  CHECK(pthread_attr_setstacksize(&attr, 256 * 1024) == 0);
  fw_stats_t s0;
  fwt_stats(&s0);
  mark m1 = {0}, m2 = {0};
  size_t started = 0;
  while (started < total) {
    pthread_t t[BATCH];
    for (int i = 0; i < BATCH; i++) {
      int rc = pthread_create(&t[i], &attr, churner, (void *)(uintptr_t)(started + (size_t)i));
      CHECKF(rc == 0, "pthread_create failed (%d) after %zu threads", rc, started);
    }
    for (int i = 0; i < BATCH; i++) CHECK(pthread_join(t[i], NULL) == 0);
    started += BATCH;
    if (started == tenth) take(&m1, started);
  }
  take(&m2, started);
  pthread_attr_destroy(&attr);
  CHECK(atomic_load(&handed) == 2 * total);
  CHECKF(atomic_load(&freed_remote) + HANDOFF >= 2 * total,
         "only %lu blocks were freed by a later thread", atomic_load(&freed_remote));
  CHECKF(m2.s.threads_total >= s0.threads_total + total, "threads_total %zu -> %zu after %zu threads",
         s0.threads_total, m2.s.threads_total, total);
  CHECKF(m2.s.threads <= s0.threads + 1, "%zu threads still counted with a heap after all were joined (%zu before)",
         m2.s.threads, s0.threads);
  /* Bounded: the last nine tenths of the threads may not add more than a
   * quarter plus a fixed 32 MiB. Segments get more slack (32): the blocks
   * waiting in the handoff table sit in more or fewer abandoned segments
   * depending on which threads exited when, which under a sanitizer and a
   * loaded machine moved the count between 16 and 117 at the first mark.
   * A leak per thread would still show as growth with nine times as many. */
  size_t slack = (size_t)32 << 20;
  CHECKF(m2.s.bytes_committed <= m1.s.bytes_committed + m1.s.bytes_committed / 4 + slack,
         "committed memory grows with the number of threads: %zu MiB after %zu, %zu MiB after %zu",
         m1.s.bytes_committed >> 20, m1.threads, m2.s.bytes_committed >> 20, m2.threads);
  CHECKF(m2.s.segments <= m1.s.segments + m1.s.segments / 4 + 32,
         "segments grow with the number of threads: %zu after %zu, %zu after %zu", m1.s.segments,
         m1.threads, m2.s.segments, m2.threads);
  CHECKF(m2.s.bytes_reserved <= m1.s.bytes_reserved + m1.s.bytes_reserved / 4 + 4 * slack,
         "reserved address space grows: %zu MiB after %zu threads, %zu MiB after %zu",
         m1.s.bytes_reserved >> 20, m1.threads, m2.s.bytes_reserved >> 20, m2.threads);
  /* Under a sanitizer RSS also holds the sanitizer's own records of every
   * thread that ever ran (shadow memory, thread contexts), which grow with
   * the thread count whatever the allocator does: there the allocator's own
   * figures above are the measure. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CHURN_SANITIZED 1
#endif
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(CHURN_SANITIZED)
  CHECKF(m2.rss <= m1.rss + m1.rss / 4 + slack, "RSS grows: %zu MiB after %zu threads, %zu MiB after %zu",
         m1.rss >> 20, m1.threads, m2.rss >> 20, m2.threads);
#endif
  /* Drain the table from main: every block left there is still intact. */
  for (size_t i = 0; i < HANDOFF; i++) {
    uintptr_t p = atomic_exchange(&handoff[i], 0);
    if (p) {
      check((char *)p);
      A.free((void *)p);
    }
  }
  X.collect(true);
  mark m3;
  take(&m3, started);
  CHECKF(m3.s.segments_abandoned <= m2.s.segments_abandoned, "abandoned segments rose from %zu to %zu after draining",
         m2.s.segments_abandoned, m3.s.segments_abandoned);
}

static const fwt_section sections[] = {
  {"churn", t_churn},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
