/* stats.c — process statistics (fw_stats_get, fw_stats_print), options
 * (fw_option_get/set and FREEWAY_* variables) and the version. */
#include "fwtest.h"

#include <ctype.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sched.h>
#include <stdatomic.h>

/* ---- fw_stats_get -------------------------------------------------------------- */
static pthread_barrier_t hold;
static void *hold_thread(void *arg) {
  void *p = X.malloc(1000);
  CHECK(p != NULL);
  pthread_barrier_wait(&hold); /* all started */
  pthread_barrier_wait(&hold); /* main has looked */
  X.free(p);
  (void)arg;
  return NULL;
}

static void t_stats(void) {
  void *warm = X.malloc(10);
  X.free(warm);
  fw_stats_t s0, s1, s2;
  fwt_stats(&s0);
  CHECK(s0.size == sizeof s0);
  CHECKF(s0.version == FREEWAY_VERSION, "version %zu, header says %d", s0.version, FREEWAY_VERSION);
  CHECKF(s0.bytes_committed <= s0.bytes_reserved, "committed %zu > reserved %zu", s0.bytes_committed,
         s0.bytes_reserved);
  CHECK(s0.threads >= 1);
  CHECK(s0.threads_total >= s0.threads);
  CHECK(s0.heaps >= 1);
  CHECK(s0.segments >= 1);

  /* Big blocks: their memory shows up in reserved and committed, and goes
   * away again once they are freed and collected. */
  enum { H = 4 };
  size_t big = (size_t)64 << 20;
  char *h[H];
  for (int i = 0; i < H; i++) {
    h[i] = X.malloc(big);
    CHECK(h[i] != NULL);
    memset(h[i], 1, big);
  }
  fwt_stats(&s1);
  CHECKF(s1.bytes_committed >= s0.bytes_committed + H * big, "committed %zu -> %zu",
         s0.bytes_committed, s1.bytes_committed);
  CHECK(s1.bytes_committed <= s1.bytes_reserved);
  for (int i = 0; i < H; i++) X.free(h[i]);
  X.collect(true);
  fwt_stats(&s2);
  CHECKF(s2.bytes_committed + H * big / 2 <= s1.bytes_committed,
         "committed %zu MiB after freeing 256 MiB of big blocks (was %zu MiB)",
         s2.bytes_committed >> 20, s1.bytes_committed >> 20);
  CHECKF(s2.bytes_purged >= s1.bytes_purged, "bytes_purged went down: %zu -> %zu", s1.bytes_purged,
         s2.bytes_purged);

  /* Blocks of 1 GiB get mappings of their own ("huge"), counted while live. */
  size_t gib = (size_t)1 << 30;
  char *g[2];
  for (int i = 0; i < 2; i++) {
    g[i] = X.malloc(gib);
    CHECK(g[i] != NULL);
    memset(g[i], 2, 1 << 20);
    memset(g[i] + gib - (1 << 20), 2, 1 << 20);
  }
  fwt_stats(&s1);
  CHECKF(s1.huge_allocs >= s2.huge_allocs + 2, "huge_allocs %zu -> %zu after 2 blocks of 1 GiB",
         s2.huge_allocs, s1.huge_allocs);
  CHECK(s1.bytes_reserved >= s2.bytes_reserved + 2 * gib);
  for (int i = 0; i < 2; i++) X.free(g[i]);
  X.collect(true);
  fwt_stats(&s2);
  CHECKF(s2.huge_allocs == s0.huge_allocs, "huge_allocs %zu after freeing (was %zu)", s2.huge_allocs,
         s0.huge_allocs);
  CHECKF(s2.bytes_reserved + gib <= s1.bytes_reserved, "reserved %zu MiB after freeing 2 GiB (was %zu MiB)",
         s2.bytes_reserved >> 20, s1.bytes_reserved >> 20);

  /* Threads with a heap. */
  enum { T = 4 };
  pthread_t t[T];
  CHECK(pthread_barrier_init(&hold, NULL, T + 1) == 0);
  for (int i = 0; i < T; i++) CHECK(pthread_create(&t[i], NULL, hold_thread, NULL) == 0);
  pthread_barrier_wait(&hold);
  fw_stats_t s3;
  fwt_stats(&s3);
  CHECKF(s3.threads >= s0.threads + T, "threads %zu with %d more threads allocating (was %zu)",
         s3.threads, T, s0.threads);
  CHECKF(s3.threads_total >= s0.threads_total + T, "threads_total %zu -> %zu", s0.threads_total,
         s3.threads_total);
  pthread_barrier_wait(&hold);
  for (int i = 0; i < T; i++) CHECK(pthread_join(t[i], NULL) == 0);
  pthread_barrier_destroy(&hold);
  fw_stats_t s4;
  fwt_stats(&s4);
  CHECKF(s4.threads <= s0.threads, "threads %zu after the threads exited (was %zu)", s4.threads,
         s0.threads);
  CHECK(s4.threads_total >= s3.threads_total);

  /* Heaps. */
  fw_heap_t *hp = X.heap_new();
  fwt_stats(&s3);
  CHECK(s3.heaps == s4.heaps + 1);
  X.heap_destroy(hp);
  fwt_stats(&s3);
  CHECK(s3.heaps == s4.heaps);
}

/* A caller built against an older, smaller fw_stats_t must not get more
 * bytes than it asked for. */
static void t_stats_size(void) {
  size_t sizes[] = {2 * sizeof(size_t), offsetof(fw_stats_t, segments), sizeof(fw_stats_t) - sizeof(size_t)};
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    unsigned char buf[sizeof(fw_stats_t) + 64];
    memset(buf, 0xcd, sizeof buf);
    fw_stats_t *s = (fw_stats_t *)buf;
    s->size = sizes[i];
    int rc = X.stats_get(s);
    for (size_t k = sizes[i]; k < sizeof buf; k++)
      CHECKF(buf[k] == 0xcd, "fw_stats_get with size %zu wrote byte %zu (rc %d)", sizes[i], k, rc);
    if (rc == 0) CHECK(s->version == FREEWAY_VERSION);
  }
  unsigned char hbuf[sizeof(fw_heap_stats_t) + 64];
  memset(hbuf, 0xcd, sizeof hbuf);
  fw_heap_stats_t *hs = (fw_heap_stats_t *)hbuf;
  hs->size = offsetof(fw_heap_stats_t, bytes_peak);
  int rc = X.heap_stats(X.heap_get_default(), hs);
  for (size_t k = offsetof(fw_heap_stats_t, bytes_peak); k < sizeof hbuf; k++)
    CHECKF(hbuf[k] == 0xcd, "fw_heap_stats with a short size wrote byte %zu (rc %d)", k, rc);
}

/* ---- fw_stats_print ----------------------------------------------------------- */
static bool contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return true;
  }
  return false;
}

static void t_print(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  void *p = X.malloc(12345);
  X.stats_print(fds[1]);
  X.free(p);
  close(fds[1]);
  static char out[65536];
  size_t got = 0;
  ssize_t k;
  while ((k = read(fds[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)k;
  out[got] = 0;
  close(fds[0]);
  CHECKF(got > 0, "fw_stats_print wrote nothing");
  CHECKF(contains_nocase(out, "purge_delay"), "the report does not list the options:\n%.300s", out);
  CHECKF(contains_nocase(out, "committed"), "the report does not show committed memory:\n%.300s", out);
}

/* The reports walk every segment, also ones whose memory held program data
 * before: a span segment made from chunks a multi-chunk large block filled
 * (its header slot's descriptor is never set up as a page) must be read as
 * reserved, not as a page full of the old data. The walk over such a heap
 * found by the fuzzer read a "heap" pointer out of a large block's bytes. */
static size_t drain(int fd) {
  static char buf[65536];
  size_t got = 0;
  ssize_t k;
  while ((k = read(fd, buf, sizeof buf)) > 0) got += (size_t)k;
  return got;
}

static void report_to_pipe(void (*fn)(int)) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) { /* the writer: a pipe holds only 64 KiB */
    close(fds[0]);
    fn(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  size_t got = drain(fds[0]);
  close(fds[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the report's writer died (status %#x)", st);
  CHECKF(got > 0, "the report is empty");
}

static void t_reports_reused(void) {
  for (int round = 0; round < 4; round++) {
    /* chunks full of bytes that look like pointers, freed */
    size_t big = (size_t)(12 + round) << 20;
    unsigned char *b = X.malloc(big);
    CHECK(b != NULL);
    memset(b, 0xc4 + round, big);
    X.free(b);
    /* span-sized blocks: a span segment, maybe on those chunks */
    void *s[24];
    for (int i = 0; i < 24; i++) {
      s[i] = X.malloc((size_t)(200 + 37 * i) << 10);
      CHECK(s[i] != NULL);
    }
    report_to_pipe(X.stats_print);
    report_to_pipe(X.stats_print_json);
    report_to_pipe(X.heap_map_json);
    report_to_pipe(X.leak_report_json);
    for (int i = 0; i < 24; i++) X.free(s[i]);
  }
}

/* The ledger's unaccounted line, from a report written by a forked child (a
 * snapshot nothing changes while it is written). */
static long long unaccounted_now(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    X.stats_print_json(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  static char buf[1 << 20];
  size_t got = 0;
  ssize_t k;
  while ((k = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)k;
  buf[got] = 0;
  close(fds[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  const char *at = strstr(buf, "\"line\": \"unaccounted\", \"bytes\": ");
  CHECKF(at != NULL, "no unaccounted line in:\n%.400s", buf);
  return strtoll(at + strlen("\"line\": \"unaccounted\", \"bytes\": "), NULL, 10);
}

/* A page in slot 0 of a segment shares the slot with the segment's header,
 * which stays when the slot is purged: the committed count must drop by
 * the page's part only, or the ledger finds the header's 12 KiB more than
 * is committed (and, once the segment is given back, 12 KiB fewer). */
static void *slot0_thread(void *arg) {
  /* three pages of the class in the thread's first segment: the page in
   * slot 0 (blocks within the segment's first 64 KiB) emptied, while a
   * later page heads the class's queue, goes back to its segment */
  void *b[64];
  int freed = 0;
  for (int i = 0; i < 64; i++) CHECK((b[i] = X.malloc(3000)) != NULL);
  for (int i = 0; i < 64; i++)
    if (((uintptr_t)b[i] & ((4u << 20) - 1)) < (64u << 10)) {
      X.free(b[i]);
      b[i] = NULL;
      freed++;
    }
  CHECKF(freed > 0, "no block of the thread's first page in slot 0");
  X.collect(true); /* the free slot purged now */
  *(long long *)arg = unaccounted_now();
  for (int i = 0; i < 64; i++) X.free(b[i]);
  return NULL;
}

static void t_ledger_slot0(void) {
  for (int round = 0; round < 4; round++) {
    long long in_thread = 1;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, slot0_thread, &in_thread) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECKF(in_thread == 0, "round %d: unaccounted %lld bytes with a purged slot 0", round, in_thread);
    X.collect(true);
    long long after = unaccounted_now();
    CHECKF(after == 0, "round %d: unaccounted %lld bytes after the thread's segments went back", round, after);
  }
}

/* The reports walk other threads' pages, remote lists and delayed lists
 * without a lock: while four threads allocate, free and hand blocks to
 * each other (some into full pages, some large), the reports must neither
 * crash nor stop anything, however their figures come out. */
#define RC_THREADS 4
#define RC_SLOTS 512
static void *_Atomic rc_inbox[RC_THREADS][RC_SLOTS];
static atomic_int rc_stop;

static void *rc_thread(void *arg) {
  int me = (int)(intptr_t)arg, next = (me + 1) % RC_THREADS;
  uint32_t rng = 2654435761u * (uint32_t)(me + 1);
  void *ring[128] = {0};
  for (unsigned op = 0; !atomic_load(&rc_stop); op++) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    size_t size = (rng & 0x3ff) == 0 ? 300000 : 16 + (rng >> 8) % ((rng & 2) ? 512 : 9000);
    unsigned slot = (rng >> 4) & 127;
    if (ring[slot]) {
      if (rng & 1) X.free(atomic_exchange(&rc_inbox[next][op % RC_SLOTS], ring[slot]));
      else X.free(ring[slot]);
    }
    ring[slot] = X.malloc(size);
    CHECK(ring[slot] != NULL);
    memset(ring[slot], me, size < 32 ? size : 32);
    X.free(atomic_exchange(&rc_inbox[me][op % RC_SLOTS], NULL));
  }
  for (int i = 0; i < 128; i++) X.free(ring[i]);
  return NULL;
}

static void t_reports_concurrent(void) {
  int fd = open("/dev/null", O_WRONLY);
  CHECK(fd >= 0);
  atomic_store(&rc_stop, 0);
  pthread_t t[RC_THREADS];
  for (int i = 0; i < RC_THREADS; i++) CHECK(pthread_create(&t[i], NULL, rc_thread, (void *)(intptr_t)i) == 0);
  for (int round = 0; round < 300; round++) {
    X.stats_print_json(fd);
    X.stats_print(fd);
    X.heap_map_json(fd);
    X.leak_report_json(fd);
  }
  atomic_store(&rc_stop, 1);
  for (int i = 0; i < RC_THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  for (int i = 0; i < RC_THREADS; i++)
    for (int j = 0; j < RC_SLOTS; j++) X.free(atomic_exchange(&rc_inbox[i][j], NULL));
  close(fd);
  /* at rest the walk explains every byte again */
  CHECKF(unaccounted_now() == 0, "unaccounted bytes after the threads stopped");
}

/* ---- peaks never below the current figures -------------------------------------
 * The report reads the OS's resident peak (VmHWM) and the current RSS at
 * two moments; while another thread faults memory in, each read may find a
 * new high, so the later one could exceed the earlier peak (seen once in a
 * full test run: rss_peak 26,300,416 against rss 26,304,512). A thread that
 * only grows makes every fault a new peak. */
static atomic_int pk_stop, pk_done;

static void *pk_grow(void *arg) {
  (void)arg;
  size_t size = (size_t)512 << 20, page = fwt_page_size();
  char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(m != MAP_FAILED);
  madvise(m, size, MADV_NOHUGEPAGE); /* one 4 KiB page a fault: RSS grows in small steps */
  for (size_t off = 0; off < size && !atomic_load(&pk_stop); off += page) m[off] = 1;
  atomic_store(&pk_done, 1);
  while (!atomic_load(&pk_stop)) sched_yield();
  munmap(m, size);
  return NULL;
}

static void t_peaks(void) {
  char path[] = "/tmp/fw-peaks-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  static char buf[1 << 20];
  atomic_store(&pk_stop, 0);
  atomic_store(&pk_done, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, pk_grow, NULL) == 0);
  int rounds = 0;
  for (; rounds < 2000 && !atomic_load(&pk_done); rounds++) {
    CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
    X.stats_print_json(fd);
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(got > 0);
    buf[got] = 0;
    size_t rss = fwt_json_size(buf, "rss"), rss_peak = fwt_json_size(buf, "rss_peak");
    size_t committed = fwt_json_size(buf, "committed"), committed_peak = fwt_json_size(buf, "committed_peak");
    CHECKF(rss_peak >= rss, "round %d: rss_peak %zu below rss %zu", rounds, rss_peak, rss);
    CHECKF(committed_peak >= committed, "round %d: committed_peak %zu below committed %zu", rounds, committed_peak,
           committed);
  }
  atomic_store(&pk_stop, 1);
  CHECK(pthread_join(t, NULL) == 0);
  close(fd);
  fwt_log("peaks: %d reports while another thread faulted 512 MiB in", rounds);
}

/* ---- options ------------------------------------------------------------------- */
static void t_options(void) {
  errno = 0;
  CHECK(X.option_get("no_such_option") == -1);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(X.option_set("no_such_option", 1) == -1);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(X.option_get("") == -1 && errno == EINVAL);

  errno = 0;
  long pd = X.option_get("purge_delay");
  CHECKF(pd != -1 || errno != EINVAL, "option purge_delay is unknown");
  CHECK(X.option_get("PURGE_DELAY") == pd);
  CHECK(X.option_get("Purge_Delay") == pd);
  /* A live option can be changed and read back. */
  CHECK(X.option_set("purge_delay", 1234) == 0);
  CHECK(X.option_get("purge_delay") == 1234);
  CHECK(X.option_set("PURGE_DELAY", 0) == 0);
  CHECK(X.option_get("purge_delay") == 0);
  /* Out of range: rejected, or clamped into range; never stored as is. */
  int rc = X.option_set("purge_delay", 3600001);
  long v = X.option_get("purge_delay");
  CHECKF(v >= -1 && v <= 3600000, "purge_delay = %ld after setting 3600001 (rc %d)", v, rc);
  rc = X.option_set("purge_delay", -5);
  v = X.option_get("purge_delay");
  CHECKF(v >= -1 && v <= 3600000, "purge_delay = %ld after setting -5 (rc %d)", v, rc);
  CHECK(X.option_set("purge_delay", pd) == 0);
  CHECK(X.option_get("purge_delay") == pd);

  /* Start-up options cannot change while running. */
  long c = X.option_get("cautious");
  CHECK(c == 0 || c == 1);
  rc = X.option_set("cautious", !c);
  CHECKF(rc != 0, "fw_option_set changed the start-up option cautious");
  CHECK(X.option_get("cautious") == c);

  const char *known[] = {"purge_delay", "cautious", "arena_reserve", "thp", "reclaim",
                         "show_stats", "verbose", "leak_report"};
  for (size_t i = 0; i < FWT_COUNT(known); i++) {
    errno = 0;
    long k = X.option_get(known[i]);
    CHECKF(!(k == -1 && errno == EINVAL), "documented option %s is unknown", known[i]);
  }
}

/* Run with FREEWAY_PURGE_DELAY=777 and FREEWAY_RECLAIM=0 in the environment. */
static void t_options_env(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL, "run this section with FREEWAY_PURGE_DELAY set");
  CHECKF(X.option_get("purge_delay") == strtol(e, NULL, 10), "FREEWAY_PURGE_DELAY=%s read as %ld", e,
         X.option_get("purge_delay"));
  e = getenv("FREEWAY_RECLAIM");
  CHECKF(e != NULL, "run this section with FREEWAY_RECLAIM set");
  CHECKF(X.option_get("reclaim") == strtol(e, NULL, 10), "FREEWAY_RECLAIM=%s read as %ld", e,
         X.option_get("reclaim"));
  void *p = X.malloc(100);
  CHECK(p);
  X.free(p);
}

/* ---- version ------------------------------------------------------------------ */
static void t_version(void) {
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", FREEWAY_VERSION_MAJOR, FREEWAY_VERSION_MINOR,
           FREEWAY_VERSION_PATCH);
  const char *v = X.version_string();
  CHECK(v != NULL);
  CHECKF(strstr(v, want) != NULL, "fw_version_string() = \"%s\", header says %s", v, want);
}

static const fwt_section sections[] = {
  {"stats", t_stats},
  {"stats_size", t_stats_size},
  {"print", t_print},
  {"reports_reused", t_reports_reused},
  {"ledger_slot0", t_ledger_slot0},
  {"reports_concurrent", t_reports_concurrent},
  {"peaks", t_peaks},
  {"options", t_options},
  {"_options_env", t_options_env},
  {"version", t_version},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
