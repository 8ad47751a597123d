/* obs_prog — allocates known amounts from known call sites, then leaves
 * them live at exit, for test_obs.py to find in freeway's reports
 * (docs/observability.md). Run with LD_PRELOAD=libfreeway.so and the
 * report options; writes the run-time addresses of its call sites to the
 * file named by its first argument, as "name address" lines (their sizes
 * come from the symbol table).
 *
 * What it leaves live: 10000 blocks of 100 bytes from site_small, 1000
 * blocks of 300 bytes from site_thread (on a thread that has exited), one
 * block of 300000 bytes and one of 3 MiB from site_big; 10000 further
 * blocks of 100 bytes are freed. Every live block is written whole, so
 * that it is resident. With "heap" as its second argument it also
 * allocates 500 blocks of 64 bytes from site_heap in a user heap
 * (fw_heap_new) and destroys the heap. With "counts" it also allocates
 * N_CROSS blocks of 5000 bytes that another thread frees, and leaves the
 * frees for the allocating thread to take in (it allocates no more of that
 * size). With "stress", four threads allocate and free random sizes, a
 * quarter of them freed by the next thread, before the blocks above. With
 * "idle" it allocates nothing (the baseline of the process's memory). With
 * "pool" it also takes 5000 objects of 200 bytes from an object pool
 * (fw_pool_new, found at run time) and gives 2000 of them back. With
 * "edges", for the heap profiler: 100 blocks of 64 bytes from site_calloc,
 * freed last first (samples that stay on their page, several on one), and
 * 20000 blocks of 1 KiB from site_aligned (aligned_alloc with an alignment
 * of 16) and as many from site_aligned64 (an alignment of 64), 200000 of
 * 96 bytes from site_zeroed (calloc), each freed at once, 300 blocks of 20 to 45 KiB from site_medium
 * (medium blocks), half freed by another thread, then 200 blocks of 1 MiB
 * from site_churn, each freed at once (large blocks, freed by their
 * owner). With "forkheld" it first forks while a
 * thread holds the heap profiler's lock (writing a leak report into a full
 * pipe, inside the profiler's list of sites), and fails unless the child
 * can still take samples that need that lock. With "handoff", 6000 blocks
 * of 9,000 to 19,000 bytes from site_handoff, each freed by another thread
 * at once, and 6000 from site_kept, each freed at once. With "medmix",
 * 4000 blocks of 9 to 45 KiB from site_medmix, all live at once, then
 * freed in a shuffled order, every fifth by another thread. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SMALL 10000
#define N_THREAD 1000

#define N_CROSS 3000
static void *keep[2 * N_SMALL + N_THREAD + 2];
static void *cross[N_CROSS];

static void *free_cross(void *arg) {
  (void)arg;
  for (int i = 0; i < N_CROSS; i++) free(cross[i]);
  return NULL;
}

/* Four threads, each with a ring of blocks of random sizes (16 B to 64 KiB,
 * a few large); every fourth block is handed to the next thread's inbox and
 * freed there. */
#define STRESS_THREADS 4
#define STRESS_OPS 200000
#define INBOX 1024
static void *_Atomic inbox[STRESS_THREADS][INBOX];

static void *stress_main(void *arg) {
  int me = (int)(intptr_t)arg, next = (me + 1) % STRESS_THREADS;
  uint32_t rng = 0x9e3779b9u * (uint32_t)(me + 1);
  void *ring[256] = {0};
  for (int op = 0; op < STRESS_OPS; op++) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    size_t size = (rng & 0xff) == 0 ? 200000 + (rng >> 20) : 16 + (rng >> 8) % ((rng & 1) ? 256 : 65536);
    int slot = (int)((rng >> 3) & 255);
    void *p = ring[slot];
    if (p) {
      if ((rng & 3) == 0) {
        void *old = atomic_exchange(&inbox[next][op % INBOX], p);
        free(old);
      } else {
        free(p);
      }
    }
    ring[slot] = malloc(size);
    if (ring[slot]) memset(ring[slot], me, size < 64 ? size : 64);
    void *in = atomic_exchange(&inbox[me][op % INBOX], NULL);
    free(in);
  }
  for (int i = 0; i < 256; i++) free(ring[i]);
  return NULL;
}

static int stress(void) {
  pthread_t t[STRESS_THREADS];
  for (int i = 0; i < STRESS_THREADS; i++)
    if (pthread_create(&t[i], NULL, stress_main, (void *)(intptr_t)i) != 0) return 1;
  for (int i = 0; i < STRESS_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < STRESS_THREADS; i++)
    for (int j = 0; j < INBOX; j++) free(atomic_exchange(&inbox[i][j], NULL));
  return 0;
}

/* A call site of its own: a function the profile and the leak report name,
 * whose allocation is no tail call (the return address stays in it). */
#define SITE(name, call)                                                      \
  __attribute__((noinline)) void *name(size_t n) {                            \
    void *p = call;                                                           \
    __asm__ volatile("" ::: "memory");                                        \
    return p;                                                                 \
  }
SITE(site_small, malloc(n))
SITE(site_thread, malloc(n))
SITE(site_calloc, calloc(1, n))
SITE(site_churn, malloc(n))
SITE(site_medium, malloc(n))
static void *medium_half[150];
static void *free_medium_half(void *arg) {
  (void)arg;
  for (int i = 0; i < 150; i++) free(medium_half[i]);
  return NULL;
}
SITE(site_aligned, aligned_alloc(16, n))
SITE(site_aligned64, aligned_alloc(64, n))
SITE(site_zeroed, calloc(1, n))

static int profile_edges(void) {
  static void *c[100];
  for (int i = 0; i < 100; i++)
    if (!(c[i] = site_calloc(64))) return 1;
  for (int i = 99; i >= 0; i--) free(c[i]);
  for (int i = 0; i < 20000; i++) {
    void *p = site_aligned(1024);
    if (!p) return 1;
    free(p);
  }
  /* the aligned form of a class's own alignment and calloc's small
   * blocks: hits of their own in the profiling flavour, each counted down
   * there (and a sampled aligned block still aligned) */
  for (int i = 0; i < 20000; i++) {
    void *p = site_aligned64(1024);
    if (!p || ((uintptr_t)p & 63) != 0) return 1;
    free(p);
  }
  for (int i = 0; i < 200000; i++) {
    unsigned char *p = site_zeroed(96);
    if (!p || p[0] || p[95]) return 1;
    p[0] = p[95] = 1;
    free(p);
  }
  /* medium blocks stay on their pages when sampled: half freed here, in
   * an order that is not the allocation's, half by another thread */
  static void *m[300];
  for (int i = 0; i < 300; i++)
    if (!(m[i] = site_medium(20000 + (size_t)(i % 7) * 4096))) return 1;
  for (int i = 0; i < 150; i++) medium_half[i] = m[2 * i + 1];
  pthread_t t;
  if (pthread_create(&t, NULL, free_medium_half, NULL) != 0) return 1;
  for (int i = 0; i < 150; i++) free(m[(2 * i * 7) % 300]);
  if (pthread_join(t, NULL) != 0) return 1;
  for (int i = 0; i < 200; i++) {
    char *p = site_churn(1u << 20);
    if (!p) return 1;
    p[0] = p[(1u << 20) - 1] = (char)i;
    free(p);
  }
  return 0;
}

/* ---- handoff ------------------------------------------------------------------
 * Medium blocks from site_handoff, each freed by another thread
 * as soon as it is made, in lockstep: that thread batches its frees into a
 * page (free.c), and the next block of the same page may be sampled after
 * the batch's entry was made. Between them a block from site_kept, freed
 * by its own thread at once. */
#define N_HANDOFF 6000
static void *_Atomic handoff_slot;
static sem_t handoff_full, handoff_empty;

SITE(site_handoff, malloc(n))

SITE(site_kept, malloc(n))

static void *handoff_consumer(void *arg) {
  (void)arg;
  /* a thread with a heap of its own batches its frees (kept from the
   * compiler, which would drop an unused malloc and free) */
  void *own = malloc(64);
  __asm__ volatile("" : : "r"(own) : "memory");
  for (int i = 0; i < N_HANDOFF; i++) {
    while (sem_wait(&handoff_full) != 0) {
    }
    free(atomic_load(&handoff_slot));
    sem_post(&handoff_empty);
  }
  free(own);
  return NULL;
}

static int handoff(void) {
  if (sem_init(&handoff_full, 0, 0) != 0 || sem_init(&handoff_empty, 0, 0) != 0) return 1;
  pthread_t t;
  if (pthread_create(&t, NULL, handoff_consumer, NULL) != 0) return 1;
  for (int i = 0; i < N_HANDOFF; i++) {
    /* six sizes (classes of 3 to 7 blocks a batch) in turns of 100 rounds */
    size_t size = 9000 + (size_t)(i / 100 % 6) * 2000;
    char *p = site_handoff(size), *q = site_kept(size);
    if (!p || !q) return 1;
    p[0] = p[size - 1] = q[0] = 1;
    /* the owner's own free of a block of the page clears its flag once
     * its samples are gone, so that the other thread batches into it
     * again */
    free(q);
    atomic_store(&handoff_slot, p);
    sem_post(&handoff_full);
    while (sem_wait(&handoff_empty) != 0) {
    }
  }
  return pthread_join(t, NULL) != 0;
}

/* ---- medmix -------------------------------------------------------------------
 * Medium pages that hold several samples, some in the profiler's table
 * (their slot taken), and many blocks that are not: the owner's frees of
 * those skip the look-up (free.c, fw_free_beside_sample), and must never
 * skip a sample's. */
#define N_MEDMIX 4000
SITE(site_medmix, malloc(n))
static void *medmix_remote[N_MEDMIX];
static void *medmix_free_remote(void *arg) {
  for (size_t i = 0; i < (size_t)arg; i++) free(medmix_remote[i]);
  return NULL;
}

static int medmix(void) {
  static char *m[N_MEDMIX];
  uint64_t x = 88172645463325252u;
  for (int i = 0; i < N_MEDMIX; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t size = 9 * 1024 + (size_t)(x % (36 * 1024));
    if (!(m[i] = site_medmix(size))) return 1;
    m[i][0] = m[i][size - 1] = 1;
  }
  for (int i = N_MEDMIX - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int j = (int)(x % (uint64_t)(i + 1));
    char *t = m[i];
    m[i] = m[j], m[j] = t;
  }
  size_t remote = 0;
  for (int i = 0; i < N_MEDMIX; i++) {
    if (i % 5 == 0) medmix_remote[remote++] = m[i];
    else free(m[i]);
  }
  pthread_t t;
  if (pthread_create(&t, NULL, medmix_free_remote, (void *)remote) != 0) return 1;
  return pthread_join(t, NULL) != 0;
}

/* ---- forkheld ---------------------------------------------------------------- */

__attribute__((noinline)) static void *fork_leaf_a(size_t n) {
  void *p = malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void *fork_leaf_b(size_t n) {
  void *p = malloc(n + 8);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void *fork_leaf_c(size_t n) {
  void *p = malloc(n + 16);
  __asm__ volatile("" ::: "memory");
  return p;
}
/* a stack of depth + 2 frames ending in one of three leaves: as many sites */
__attribute__((noinline)) static void *fork_rec(int depth, int which) {
  void *p = depth ? fork_rec(depth - 1, which)
                  : which == 0 ? fork_leaf_a(40) : which == 1 ? fork_leaf_b(40) : fork_leaf_c(40);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void *fork_child_site(size_t n) {
  void *p = calloc(1, n);  /* a calloc sample stays on its page: the profiler's table, under its lock */
  __asm__ volatile("" ::: "memory");
  return p;
}

static int pipe_w;
static _Atomic long reporter_tid;
static _Atomic int reporter_done;

static void *reporter_main(void *arg) {
  void (*report)(int) = (void (*)(int))arg;
  atomic_store(&reporter_tid, (long)syscall(SYS_gettid));
  report(pipe_w);
  atomic_store(&reporter_done, 1);
  return NULL;
}

static _Atomic int drain_go;

static void *drainer_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[4096];
  struct timespec ts = {0, 1000000L};
  while (!atomic_load(&drain_go)) nanosleep(&ts, NULL);
  ts.tv_nsec = 300 * 1000000L;
  nanosleep(&ts, NULL);  /* the fork is on its way meanwhile */
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) continue;
    if (atomic_load(&reporter_done)) break;
    ts.tv_nsec = 1000000L;
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* The reporter thread blocked in write(): its syscall file starts with the
 * call's number. */
static int blocked_in_write(long tid) {
  char path[64], line[64] = {0};
  snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
  /* open and read, not stdio: while the lock is held, a malloc from a new
   * call site would wait for it */
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  int ok = read(fd, line, sizeof line - 1) > 0 && atol(line) == SYS_write;
  close(fd);
  return ok;
}

static int fork_held(void) {
  void (*report)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "fw_leak_report_print");
  if (!report) return 1;
  /* 39 sites, so that the leak report's list of sampled sites (6 lines a
   * site) is far longer than its 4 KiB buffer: it writes from inside it */
  static void *live[3 * 13];
  for (int d = 0; d < 13; d++)
    for (int w = 0; w < 3; w++)
      if (!(live[3 * d + w] = fork_rec(d, w))) return 1;
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pipe_w = fds[1];
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  char fill[4096];
  memset(fill, 'x', sizeof fill);
  while (write(fds[1], fill, sizeof fill) > 0 || errno == EINTR) {}
  while (write(fds[1], fill, 1) > 0) {}
  fcntl(fds[1], F_SETFL, 0);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  /* both threads made first: the main thread allocates nothing once the
   * reporter holds the lock */
  pthread_t rt, dt;
  if (pthread_create(&dt, NULL, drainer_main, (void *)(intptr_t)fds[0]) != 0) return 1;
  if (pthread_create(&rt, NULL, reporter_main, (void *)report) != 0) return 1;
  struct timespec ts = {0, 1000000L};
  int waited = 0;
  while (!(atomic_load(&reporter_tid) && blocked_in_write(atomic_load(&reporter_tid)))) {
    if (++waited > 10000) return 1; /* 10 s */
    nanosleep(&ts, NULL);
  }
  atomic_store(&drain_go, 1);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    void *p = fork_child_site(100);
    void *q = fork_rec(14, 0); /* a stack not seen before: a new site, under the lock */
    _exit(p && q ? 0 : 3);
  }
  int status = 0;
  for (waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited++) {
    if (waited == 10000) {
      fprintf(stderr, "obs_prog: the child forked while the profiler's lock was held hangs\n");
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 1;
    }
    nanosleep(&ts, NULL);
  }
  pthread_join(rt, NULL);
  pthread_join(dt, NULL);
  close(fds[0]);
  close(fds[1]);
  for (int i = 0; i < 3 * 13; i++) free(live[i]);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* A user heap (freeway's fw_heap_* API, found at run time: the program is
 * not linked to freeway), 500 blocks from site_heap, destroyed whole. */
__attribute__((noinline)) void *site_heap(void *(*heap_malloc)(void *, size_t), void *heap, size_t n) {
  void *p = heap_malloc(heap, n);
  __asm__ volatile("" ::: "memory");
  return p;
}

static int object_pool(void) {
  void *(*pool_new)(size_t, size_t, const void *) =
      (void *(*)(size_t, size_t, const void *))dlsym(RTLD_DEFAULT, "fw_pool_new");
  void *(*pool_alloc)(void *) = (void *(*)(void *))dlsym(RTLD_DEFAULT, "fw_pool_alloc");
  void (*pool_free)(void *, void *) = (void (*)(void *, void *))dlsym(RTLD_DEFAULT, "fw_pool_free");
  if (!pool_new || !pool_alloc || !pool_free) return 1;
  void *pool = pool_new(200, 0, NULL);
  if (!pool) return 1;
  static void *objs[5000];
  for (int i = 0; i < 5000; i++)
    if (!(objs[i] = pool_alloc(pool))) return 1;
  for (int i = 0; i < 2000; i++) pool_free(pool, objs[i]);
  return 0;
}

static int user_heap(void) {
  void *(*heap_new)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "fw_heap_new");
  void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "fw_heap_malloc");
  void (*heap_destroy)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "fw_heap_destroy");
  if (!heap_new || !heap_malloc || !heap_destroy) return 1;
  void *h = heap_new();
  if (!h) return 1;
  for (int i = 0; i < 500; i++)
    if (!site_heap(heap_malloc, h, 64)) return 1;
  heap_destroy(h);
  return 0;
}

/* "heapdel": 500 blocks from site_heap in a user heap that is then
 * deleted (its blocks live on in the thread's heap) and freed one by one
 * afterwards: the samples a user heap took, moved to its pages of sampled
 * blocks, must be forgotten wherever those pages went. */
static int user_heap_deleted(void) {
  void *(*heap_new)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "fw_heap_new");
  void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "fw_heap_malloc");
  void (*heap_delete)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "fw_heap_delete");
  if (!heap_new || !heap_malloc || !heap_delete) return 1;
  void *h = heap_new();
  if (!h) return 1;
  static void *blocks[500];
  for (int i = 0; i < 500; i++)
    if (!(blocks[i] = site_heap(heap_malloc, h, 64))) return 1;
  heap_delete(h);
  for (int i = 0; i < 500; i++) {
    memset(blocks[i], 5, 64);
    free(blocks[i]);
  }
  return 0;
}

SITE(site_big, malloc(n))

static void *thread_main(void *arg) {
  (void)arg;
  for (int i = 0; i < N_THREAD; i++) {
    keep[2 * N_SMALL + i] = site_thread(300);
    memset(keep[2 * N_SMALL + i], 3, 300);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: obs_prog SITES_FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "w");
  if (!f) return 2;
  fprintf(f, "site_small %p\nsite_thread %p\nsite_big %p\nsite_heap %p\n", (void *)site_small,
          (void *)site_thread, (void *)site_big, (void *)site_heap);
  fclose(f);
  const char *mode = argc > 2 ? argv[2] : "";
  if (strcmp(mode, "idle") == 0) return 0;
  if (strcmp(mode, "forkheld") == 0 && fork_held() != 0) return 1;
  if (strcmp(mode, "stress") == 0 && stress() != 0) return 1;
  for (int i = 0; i < 2 * N_SMALL; i++) {
    keep[i] = site_small(100);
    if (!keep[i]) return 1;
    memset(keep[i], 1, 100);
  }
  for (int i = 0; i < N_SMALL; i++) free(keep[2 * i + 1]);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  keep[2 * N_SMALL + N_THREAD] = site_big(300000);
  keep[2 * N_SMALL + N_THREAD + 1] = site_big(3u << 20);
  memset(keep[2 * N_SMALL + N_THREAD], 4, 300000);
  memset(keep[2 * N_SMALL + N_THREAD + 1], 5, 3u << 20);
  if (strcmp(mode, "heap") == 0 && user_heap() != 0) return 1;
  if (strcmp(mode, "heapdel") == 0 && user_heap_deleted() != 0) return 1;
  if (strcmp(mode, "pool") == 0 && object_pool() != 0) return 1;
  if (strcmp(mode, "edges") == 0 && profile_edges() != 0) return 1;
  if (strcmp(mode, "handoff") == 0 && handoff() != 0) return 1;
  if (strcmp(mode, "medmix") == 0 && medmix() != 0) return 1;
  if (strcmp(mode, "counts") == 0) {
    for (int i = 0; i < N_CROSS; i++)
      if (!(cross[i] = malloc(5000))) return 1;
    if (pthread_create(&t, NULL, free_cross, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  }
  return 0;
}
