/* lifecycle.c — memory that outlives the thread that allocated it:
 *   huge_remote_free: a huge block (its own mapping) of a thread that has
 *                     exited, freed by main, is unmapped at that free;
 *   free_only_thread: a thread that never allocates frees ~100 MiB of small
 *                     blocks left by exited threads (an RCU-style
 *                     reclaimer): RSS falls by most of it without any
 *                     fw_collect and with no thread allocating;
 *   key_dtor_keep,
 *   key_dtor_free:    a pthread key destructor that allocates in the last
 *                     destructor round, in thousands of threads, leaves no
 *                     heap, thread data or segment behind;
 *   option_race:      fw_option_set from one thread while others allocate
 *                     and free is no data race (run under ThreadSanitizer);
 *   free_in_place:    blocks of an exited thread freed by main leave its
 *                     segment abandoned, for a new thread to adopt.
 *
 * Where a measurement must not be disturbed by an allocation (which could
 * run housekeeping or adopt segments and so hide the fault), the process
 * figures are read with open/read instead of stdio, which allocates. */
#include "fwtest.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* ---- process figures without allocating --------------------------------- */
static void raw_statm(size_t *size, size_t *resident) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  CHECK(fd >= 0);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  CHECK(n > 0);
  buf[n] = 0;
  unsigned long long v[2] = {0, 0};
  const char *s = buf;
  for (int i = 0; i < 2; i++) {
    while (*s == ' ') s++;
    CHECK(*s >= '0' && *s <= '9');
    while (*s >= '0' && *s <= '9') v[i] = v[i] * 10 + (unsigned)(*s++ - '0');
  }
  *size = (size_t)v[0] * fwt_page_size();
  *resident = (size_t)v[1] * fwt_page_size();
}
static size_t raw_rss(void) {
  size_t s, r;
  raw_statm(&s, &r);
  return r;
}
static size_t raw_vm(void) {
  size_t s, r;
  raw_statm(&s, &r);
  return s;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- a huge block freed after its thread has gone -------------------------- */
static const size_t huge_size = 300 * MiB;

static void *huge_thread(void *arg) {
  char **out = arg;
  char *p = A.malloc(huge_size);
  if (p) {
    /* a few pages touched, as a real buffer would be */
    for (size_t off = 0; off < huge_size; off += 16 * MiB) p[off] = (char)(off >> 20) | 1;
    p[huge_size - 1] = 0x5a;
  }
  *out = p;
  return NULL;
}

static void t_huge_remote_free(void) {
  char *p = NULL;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, huge_thread, &p) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  if (!p && sizeof(size_t) == 4) {
    fwt_log("no room for a %zu MiB block in this address space", huge_size / MiB);
    exit(77);
  }
  CHECKF(p != NULL, "malloc(%zu MiB) in a thread failed", huge_size / MiB);
  for (size_t off = 0; off < huge_size; off += 16 * MiB)
    CHECK(p[off] == ((char)(off >> 20) | 1));
  CHECK(p[huge_size - 1] == 0x5a);
  /* No allocation between the thread's exit and the free: nothing may
   * have adopted what the thread left. */
  size_t v0 = raw_vm();
  A.free(p);
  size_t v1 = raw_vm();
  fwt_log("huge_remote_free: VM %zu MiB before the free, %zu MiB after it", v0 / MiB, v1 / MiB);
  CHECKF(v1 + 250 * MiB <= v0,
         "freeing a %zu MiB block of an exited thread left the VM size at %zu MiB (%zu before the free): "
         "its mapping was not unmapped",
         huge_size / MiB, v1 / MiB, v0 / MiB);
}

/* ---- a thread that only frees ---------------------------------------------- */
enum { FO_THREADS = 4 };
static const size_t fo_total = 100 * MiB;

typedef struct fo_list {
  char **v;
  size_t n, cap, bytes;
} fo_list;

static fo_list fo_lists[FO_THREADS];
static atomic_int fo_go, fo_done, fo_quit;

static void *fo_alloc_thread(void *arg) {
  fo_list *l = arg;
  size_t want = fo_total / FO_THREADS;
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)(l - fo_lists) + 41);
  while (l->bytes < want) {
    CHECK(l->n < l->cap);
    size_t n = fwt_range(&r, 16, 256);
    char *p = A.malloc(n);
    CHECK(p != NULL);
    memset(p, (int)(n & 0xff) | 1, n);
    l->v[l->n++] = p;
    l->bytes += n;
  }
  return NULL;
}

/* Never calls the allocator but to free: no stdio, bookkeeping in memory
 * mapped by main, waiting with nanosleep. */
static void *fo_free_thread(void *arg) {
  (void)arg;
  while (!atomic_load(&fo_go)) sleep_ms(1);
  for (int t = 0; t < FO_THREADS; t++) {
    fo_list *l = &fo_lists[t];
    for (size_t i = 0; i < l->n; i++) {
      char *p = l->v[i];
      CHECKF(p[0] != 0, "block %p lost its contents", (void *)p);
      A.free(p);
    }
  }
  atomic_store(&fo_done, 1);
  while (!atomic_load(&fo_quit)) sleep_ms(1);
  return NULL;
}

static void t_free_only_thread(void) {
  size_t cap = fo_total / FO_THREADS / 16 + 1;
  for (int t = 0; t < FO_THREADS; t++) {
    fo_lists[t] = (fo_list){fwt_scratch(cap * sizeof(char *)), 0, cap, 0};
  }
  /* The reclaimer exists before the blocks do, as it would in a real
   * program (and so main's own bookkeeping for it is done by now). */
  pthread_t f, a[FO_THREADS];
  CHECK(pthread_create(&f, NULL, fo_free_thread, NULL) == 0);
  size_t r0 = raw_rss();
  for (int t = 0; t < FO_THREADS; t++) CHECK(pthread_create(&a[t], NULL, fo_alloc_thread, &fo_lists[t]) == 0);
  for (int t = 0; t < FO_THREADS; t++) CHECK(pthread_join(a[t], NULL) == 0);
  size_t r1 = raw_rss();
  size_t bytes = 0, blocks = 0;
  for (int t = 0; t < FO_THREADS; t++) {
    bytes += fo_lists[t].bytes;
    blocks += fo_lists[t].n;
  }
  CHECKF(r1 >= r0 + bytes / 2, "RSS rose only from %zu to %zu MiB for %zu MiB of blocks", r0 / MiB, r1 / MiB,
         bytes / MiB);
  /* From here until the last figure is read nothing allocates. */
  atomic_store(&fo_go, 1);
  while (!atomic_load(&fo_done)) sleep_ms(5);
  sleep_ms(200);
  size_t r2 = raw_rss();
  /* "Most of it": at least 70 % of the rise. A slow machine gets a little
   * longer, checked without allocating either. */
  size_t need = r1 - (r1 - r0) * 7 / 10;
  long waited = 200;
  while (r2 > need && waited < 2000) {
    sleep_ms(50);
    waited += 50;
    r2 = raw_rss();
  }
  atomic_store(&fo_quit, 1);
  CHECK(pthread_join(f, NULL) == 0);
  fwt_log("free_only_thread: %zu blocks (%zu MiB) from %d exited threads; RSS %zu MiB before, %zu MiB with "
          "them, %zu MiB %ld ms after a non-allocating thread freed them",
          blocks, bytes / MiB, FO_THREADS, r0 / MiB, r1 / MiB, r2 / MiB, waited);
  CHECKF(r2 <= need,
         "a thread that only frees gave back too little: RSS %zu MiB %ld ms after it freed %zu MiB of "
         "blocks of exited threads (%zu MiB before they were allocated, %zu MiB with them)",
         r2 / MiB, waited, bytes / MiB, r0 / MiB, r1 / MiB);
  for (int t = 0; t < FO_THREADS; t++) fwt_scratch_free(fo_lists[t].v, cap * sizeof(char *));
}

/* ---- allocation in the last round of key destructors ------------------------ */
enum { KD_THREADS = 2000, KD_AT_ONCE = 4, KD_SLACK = 8 };

static pthread_key_t kd_key;
static bool kd_keep;
static void **kd_kept; /* scratch: one slot per thread */
static atomic_size_t kd_next, kd_last_round, kd_failed, kd_started;

static void kd_destructor(void *v) {
  uintptr_t round = (uintptr_t)v;
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    /* ask for another round */
    CHECK(pthread_setspecific(kd_key, (void *)(round + 1)) == 0);
    return;
  }
  /* the last round: the allocator has torn this thread down already */
  atomic_fetch_add(&kd_last_round, 1);
  char *p = A.malloc(48);
  if (!p) {
    atomic_fetch_add(&kd_failed, 1);
    return;
  }
  memset(p, 0x3c, 48);
  if (kd_keep)
    kd_kept[atomic_fetch_add(&kd_next, 1)] = p;
  else
    A.free(p);
}

static void *kd_thread(void *arg) {
  (void)arg;
  /* an ordinary life first: the thread has a heap when it exits */
  size_t me = atomic_fetch_add(&kd_started, 1);
  void *p = A.malloc(100), *q = A.malloc(5000);
  CHECKF(p != NULL && q != NULL,
         "malloc failed in thread %zu: the address space is used up by what earlier threads left", me);
  memset(p, 1, 100);
  memset(q, 2, 5000);
  A.free(p);
  A.free(q);
  CHECK(pthread_setspecific(kd_key, (void *)(uintptr_t)1) == 0);
  return NULL;
}

static void *plain_thread(void *arg) {
  (void)arg;
  void *p = A.malloc(100);
  CHECK(p != NULL);
  A.free(p);
  return NULL;
}

static void run_threads(void *(*fn)(void *), size_t count) {
  for (size_t done = 0; done < count; done += KD_AT_ONCE) {
    pthread_t t[KD_AT_ONCE];
    for (int i = 0; i < KD_AT_ONCE; i++) CHECK(pthread_create(&t[i], NULL, fn, NULL) == 0);
    for (int i = 0; i < KD_AT_ONCE; i++) CHECK(pthread_join(t[i], NULL) == 0);
  }
}

static void key_dtor(bool keep) {
  kd_keep = keep;
  kd_kept = fwt_scratch(KD_THREADS * sizeof *kd_kept);
  atomic_store(&kd_next, 0);
  atomic_store(&kd_last_round, 0);
  atomic_store(&kd_failed, 0);
  atomic_store(&kd_started, 0);
  CHECK(pthread_key_create(&kd_key, kd_destructor) == 0);
  /* settle thread stacks and the like before the baseline */
  run_threads(plain_thread, 2 * KD_AT_ONCE);
  X.collect(true);
  fw_stats_t s0;
  fwt_stats(&s0);
  size_t v0 = fwt_vm_size();

  size_t n = fwt_scaled(KD_THREADS);
  if (n > KD_THREADS) n = KD_THREADS;
  run_threads(kd_thread, n);
  size_t rounds = atomic_load(&kd_last_round);
  CHECKF(rounds >= n, "the last destructor round ran in %zu of %zu threads", rounds, n);
  CHECKF(atomic_load(&kd_failed) == 0, "malloc in the last destructor round failed in %zu of %zu threads",
         atomic_load(&kd_failed), n);

  fw_stats_t s1, s2;
  fwt_stats(&s1);
  if (keep) {
    /* the blocks are the program's; once they are freed nothing of those
     * threads may be left */
    for (size_t i = 0; i < atomic_load(&kd_next); i++) {
      CHECK(((unsigned char *)kd_kept[i])[47] == 0x3c);
      A.free(kd_kept[i]);
    }
  }
  X.collect(true);
  fwt_stats(&s2);
  size_t v1 = fwt_vm_size();
  const char *what = keep ? "keep" : "free";
  fwt_log("key_dtor_%s: %zu threads: heaps %zu -> %zu, threads %zu -> %zu; after fw_collect(true): segments "
          "%zu -> %zu, VM %zu -> %zu MiB",
          what, n, s0.heaps, s1.heaps, s0.threads, s1.threads, s0.segments, s2.segments, v0 / MiB, v1 / MiB);
  CHECKF(s1.heaps <= s0.heaps + KD_SLACK,
         "%zu threads that allocated in their last key destructor round left %zu heaps (%zu before)", n, s1.heaps,
         s0.heaps);
  CHECKF(s1.threads <= s0.threads + KD_SLACK,
         "%zu threads that allocated in their last key destructor round: %zu threads still hold a heap (%zu "
         "before)",
         n, s1.threads, s0.threads);
  CHECKF(s2.segments <= s0.segments + KD_SLACK,
         "%zu threads that allocated in their last key destructor round left %zu segments (%zu before)", n,
         s2.segments, s0.segments);
  CHECKF(v1 < v0 + 256 * MiB,
         "%zu threads that allocated in their last key destructor round grew the VM size from %zu to %zu MiB", n,
         v0 / MiB, v1 / MiB);
  CHECK(pthread_key_delete(kd_key) == 0);
  fwt_scratch_free(kd_kept, KD_THREADS * sizeof *kd_kept);
}

static void t_key_dtor_keep(void) { key_dtor(true); }
static void t_key_dtor_free(void) { key_dtor(false); }

/* ---- options changed while others allocate ---------------------------------- */
enum { OR_WORKERS = 2, OR_SLOTS = 64 };
static atomic_int or_stop;

static void *or_worker(void *arg) {
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)(uintptr_t)arg);
  char *v[OR_SLOTS] = {0};
  size_t len[OR_SLOTS] = {0};
  size_t ops = fwt_scaled(40000);
  for (size_t op = 0; op < ops; op++) {
    size_t j = (size_t)(fwt_next(&r) % OR_SLOTS);
    if (v[j]) {
      CHECK_PATTERN(v[j], len[j], fwt_seed(v[j], len[j], 7));
      A.free(v[j]);
      v[j] = NULL;
      continue;
    }
    /* past the fast path: medium pages, spans and whole segments come and
     * go, so the purge delay and the segment cache are read all the time */
    size_t n = fwt_next(&r) % 4 ? fwt_range(&r, 1025, 128 * 1024) : fwt_range(&r, 128 * 1024, 3 << 20);
    v[j] = A.malloc(n);
    CHECK(v[j] != NULL);
    len[j] = n < 4096 ? n : 4096;
    fwt_fill(v[j], len[j], fwt_seed(v[j], len[j], 7));
  }
  for (int j = 0; j < OR_SLOTS; j++)
    if (v[j]) {
      CHECK_PATTERN(v[j], len[j], fwt_seed(v[j], len[j], 7));
      A.free(v[j]);
    }
  return NULL;
}

static void *or_setter(void *arg) {
  (void)arg;
  static const long delays[] = {0, 1, 10, -1, 1000, 5};
  static const long caches[] = {0, 2, 32, 1, 8};
  for (unsigned i = 0; !atomic_load(&or_stop); i++) {
    CHECK(X.option_set("purge_delay", delays[i % FWT_COUNT(delays)]) == 0);
    CHECK(X.option_set("segment_cache", caches[i % FWT_COUNT(caches)]) == 0);
    if (i % 64 == 63) sched_yield();
  }
  return NULL;
}

static void t_option_race(void) {
  long pd = X.option_get("purge_delay"), sc = X.option_get("segment_cache");
  CHECK(pd != -1 || errno != EINVAL);
  CHECK(sc >= 0);
  atomic_store(&or_stop, 0);
  pthread_t s, w[OR_WORKERS];
  CHECK(pthread_create(&s, NULL, or_setter, NULL) == 0);
  for (int i = 0; i < OR_WORKERS; i++) CHECK(pthread_create(&w[i], NULL, or_worker, (void *)(uintptr_t)(i + 1)) == 0);
  for (int i = 0; i < OR_WORKERS; i++) CHECK(pthread_join(w[i], NULL) == 0);
  atomic_store(&or_stop, 1);
  CHECK(pthread_join(s, NULL) == 0);
  CHECK(X.option_set("purge_delay", pd) == 0);
  CHECK(X.option_set("segment_cache", sc) == 0);
  CHECK(X.option_get("purge_delay") == pd);
  CHECK(X.option_get("segment_cache") == sc);
  X.collect(true);
}


/* ---- large blocks freed remotely just before their thread exits -------------
 * The blocks' pages are full, so the frees wait on the owner's delayed list;
 * the owner folds them in at exit, which retires each page. A page retired
 * into the large-block cache after the cache was flushed would stay there,
 * its segment abandoned with nothing live in it for ever. */
#define LX_BLOCKS 24
static void *lx_blocks[LX_BLOCKS];
static atomic_int lx_stage;

static void *lx_owner(void *arg) {
  (void)arg;
  for (int i = 0; i < LX_BLOCKS; i++) {
    lx_blocks[i] = A.malloc((size_t)(192 + 64 * (i % 4)) << 10);
    CHECK(lx_blocks[i] != NULL);
    memset(lx_blocks[i], 0x5a, 4096);
  }
  atomic_store(&lx_stage, 1);
  while (atomic_load(&lx_stage) != 2) sched_yield();
  return NULL; /* exits without another allocation */
}

static void *lx_freer(void *arg) {
  (void)arg;
  while (atomic_load(&lx_stage) != 1) sched_yield();
  for (int i = 0; i < LX_BLOCKS; i++) A.free(lx_blocks[i]);
  atomic_store(&lx_stage, 2);
  return NULL;
}

static void t_large_cached_at_exit(void) {
  for (int round = 0; round < 8; round++) {
    fw_stats_t s0, s1;
    fwt_stats(&s0);
    atomic_store(&lx_stage, 0);
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, lx_owner, NULL) == 0);
    CHECK(pthread_create(&b, NULL, lx_freer, NULL) == 0);
    CHECK(pthread_join(b, NULL) == 0);
    CHECK(pthread_join(a, NULL) == 0);
    fwt_stats(&s1);
    CHECKF(s1.segments_abandoned <= s0.segments_abandoned,
           "round %d: a thread whose large blocks were all freed left %zu abandoned segments (%zu before)", round,
           s1.segments_abandoned, s0.segments_abandoned);
  }
}

/* ---- blocks freed into an exited thread's segment ----------------------- */
/* Main, which has room of its own, frees the blocks a thread left, all but
 * one: the thread's segment stays abandoned (the frees are done in place,
 * main does not take it over), and a new thread, which needs memory,
 * adopts it: its first block comes from that segment, not from a new one. */
enum { FP_BLOCKS = 4096 };
static char *fp_blocks[FP_BLOCKS];

static void *fp_owner(void *arg) {
  (void)arg;
  for (int i = 0; i < FP_BLOCKS; i++) {
    fp_blocks[i] = A.malloc(64);
    CHECK(fp_blocks[i] != NULL);
    memset(fp_blocks[i], 0x3d, 64);
  }
  return NULL;
}

static void *fp_newcomer(void *arg) {
  char **out = arg;
  *out = A.malloc(64);
  CHECK(*out != NULL);
  return NULL;
}

static void t_free_in_place(void) {
  X.collect(true); /* main adopts whatever earlier threads left */
  void *room = A.malloc(64); /* main holds a segment of small pages */
  CHECK(room != NULL);
  fw_stats_t s0, s1, s2;
  fwt_stats(&s0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fp_owner, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fwt_stats(&s1);
  const uintptr_t seg = (uintptr_t)fp_blocks[0] & ~(uintptr_t)(4 * MiB - 1);
  CHECKF(s1.segments_abandoned > s0.segments_abandoned, "the thread left no abandoned segment (%zu, %zu before)",
         s1.segments_abandoned, s0.segments_abandoned);
  for (int i = 1; i < FP_BLOCKS; i++) {
    CHECK(fp_blocks[i][63] == 0x3d);
    A.free(fp_blocks[i]);
  }
  fwt_stats(&s2);
  CHECKF(s2.segments_abandoned == s1.segments_abandoned,
         "freeing an exited thread's blocks took %zu of its %zu abandoned segments over",
         s1.segments_abandoned - s2.segments_abandoned, s1.segments_abandoned);
  char *p = NULL;
  CHECK(pthread_create(&t, NULL, fp_newcomer, &p) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fwt_log("free_in_place: the thread's segment at %#lx, a new thread's first block at %p; abandoned %zu -> %zu -> %zu",
          (unsigned long)seg, (void *)p, s0.segments_abandoned, s1.segments_abandoned, s2.segments_abandoned);
  CHECKF(((uintptr_t)p & ~(uintptr_t)(4 * MiB - 1)) == seg,
         "a new thread's first block %p is not in the segment %#lx the exited thread left", (void *)p,
         (unsigned long)seg);
  A.free(p);
  A.free(fp_blocks[0]);
  A.free(room);
  X.collect(true);
}

static const fwt_section sections[] = {
  {"huge_remote_free", t_huge_remote_free},
  {"free_only_thread", t_free_only_thread},
  {"key_dtor_keep", t_key_dtor_keep},
  {"key_dtor_free", t_key_dtor_free},
  {"option_race", t_option_race},
  {"large_cached_at_exit", t_large_cached_at_exit},
  {"free_in_place", t_free_in_place},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
