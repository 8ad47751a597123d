/* fork.c — fork while other threads allocate. The child allocates and frees
 * (also from a new thread, also blocks inherited from the parent's threads)
 * and exits 0; a deadlock in the child is caught by an alarm. The parent's
 * threads go on and check their blocks. */
#include "fwtest.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

enum { BG = 4, SHARED = 256 };

static atomic_bool stop;
static _Atomic(uintptr_t) shared[SHARED]; /* blocks published by the background threads */

static void stamp(char *p, size_t n) {
  memcpy(p, &n, sizeof n);
  fwt_fill(p + 8, n - 8, fwt_seed(p, n, 0xf0));
}
static void check(const char *p) {
  size_t n;
  memcpy(&n, p, sizeof n);
  CHECKF(n >= 16 && n <= (8 << 20), "block %p: corrupt size word %zu", (const void *)p, n);
  CHECK_PATTERN(p + 8, n - 8, fwt_seed(p, n, 0xf0));
}

static void *background(void *arg) {
  fwt_rng r;
  fwt_rng_init(&r, (uintptr_t)arg);
  enum { S = 512 };
  char *v[S] = {0};
  while (!atomic_load(&stop)) {
    size_t i = (size_t)(fwt_next(&r) % S);
    if (v[i]) {
      check(v[i]);
      A.free(v[i]);
      v[i] = NULL;
    } else {
      size_t n = fwt_random_size(&r, 4 << 20);
      if (n < 16) n = 16;
      v[i] = (fwt_next(&r) % 8) ? A.malloc(n) : A.aligned_alloc(256, (n + 255) / 256 * 256);
      CHECK(v[i] != NULL);
      stamp(v[i], n);
    }
    if (fwt_next(&r) % 64 == 0) {
      size_t n = fwt_range(&r, 16, 2000);
      char *p = A.malloc(n);
      CHECK(p);
      stamp(p, n);
      uintptr_t old = atomic_exchange(&shared[fwt_next(&r) % SHARED], (uintptr_t)p);
      if (old) {
        check((char *)old);
        A.free((void *)old);
      }
    }
  }
  for (size_t i = 0; i < S; i++)
    if (v[i]) {
      check(v[i]);
      A.free(v[i]);
    }
  return NULL;
}

static void *child_thread(void *arg) {
  fwt_rng r;
  fwt_rng_init(&r, (uintptr_t)arg);
  for (int i = 0; i < 2000; i++) {
    size_t n = fwt_random_size(&r, 1 << 20);
    if (n < 16) n = 16;
    char *p = A.malloc(n);
    CHECK(p);
    stamp(p, n);
    check(p);
    A.free(p);
  }
  return NULL;
}

/* In the child: only this thread exists; the allocator's locks must have
 * been left in a usable state. */
static void child(int round, char **parent_blocks, size_t np) {
  alarm(60);
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)round + 77);
  enum { N = 3000 };
  char **v = fwt_scratch(N * sizeof *v);
  for (size_t i = 0; i < N; i++) {
    size_t n = fwt_random_size(&r, 2 << 20);
    if (n < 16) n = 16;
    v[i] = A.malloc(n);
    CHECK(v[i]);
    stamp(v[i], n);
  }
  for (size_t i = 0; i < N; i += 2) {
    check(v[i]);
    A.free(v[i]);
  }
  /* Blocks the parent's main thread and its background threads allocated. */
  for (size_t i = 0; i < np; i++) {
    check(parent_blocks[i]);
    A.free(parent_blocks[i]);
  }
  for (size_t i = 0; i < SHARED; i += 3) {
    uintptr_t p = atomic_exchange(&shared[i], 0);
    if (p) {
      check((char *)p);
      A.free((void *)p);
    }
  }
  pthread_t t;
  CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)round) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (size_t i = 1; i < N; i += 2) {
    check(v[i]);
    A.free(v[i]);
  }
  /* stdio allocates through whichever malloc the process uses. */
  char buf[64];
  snprintf(buf, sizeof buf, "%d", round);
  FILE *f = fopen("/dev/null", "w");
  CHECK(f != NULL);
  fprintf(f, "child %s\n", buf);
  fclose(f);
  X.collect(true);
  _exit(0);
}

static void t_fork(void) {
  atomic_store(&stop, false);
  pthread_t t[BG];
  for (int i = 0; i < BG; i++) CHECK(pthread_create(&t[i], NULL, background, (void *)(uintptr_t)(i + 1)) == 0);
  fwt_rng r;
  fwt_rng_init(&r, 3);
  size_t rounds = fwt_scaled(20);
  for (size_t round = 0; round < rounds; round++) {
    enum { NP = 100 };
    char *mine[NP];
    for (int i = 0; i < NP; i++) {
      size_t n = fwt_random_size(&r, 2 << 20);
      if (n < 16) n = 16;
      mine[i] = A.malloc(n);
      CHECK(mine[i]);
      stamp(mine[i], n);
    }
    usleep(2000 + (useconds_t)(fwt_next(&r) % 5000)); /* let the threads get busy */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) child((int)round, mine, NP);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      CHECKF(0, "round %zu: the child hung (allocator lock held across fork?)", round);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %zu: child status %#x (%s %d)", round, st,
           WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    /* The parent's copies are untouched by what the child did. */
    for (int i = 0; i < NP; i++) {
      check(mine[i]);
      A.free(mine[i]);
    }
  }
  atomic_store(&stop, true);
  for (int i = 0; i < BG; i++) CHECK(pthread_join(t[i], NULL) == 0);
  for (size_t i = 0; i < SHARED; i++) {
    uintptr_t p = atomic_exchange(&shared[i], 0);
    if (p) {
      check((char *)p);
      A.free((void *)p);
    }
  }
}

/* fork from a thread that is not main, while main allocates. */
static atomic_int forks_done;
static void *forker(void *arg) {
  (void)arg;
  for (int i = 0; i < 10; i++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      alarm(60);
      child_thread((void *)(uintptr_t)i);
      _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child forked from a thread: status %#x", st);
    atomic_fetch_add(&forks_done, 1);
  }
  return NULL;
}
static void t_fork_thread(void) {
  pthread_t t;
  atomic_store(&forks_done, 0);
  CHECK(pthread_create(&t, NULL, forker, NULL) == 0);
  fwt_rng r;
  fwt_rng_init(&r, 9);
  while (atomic_load(&forks_done) < 10) {
    size_t n = fwt_random_size(&r, 1 << 20);
    if (n < 16) n = 16;
    char *p = A.malloc(n);
    CHECK(p);
    stamp(p, n);
    check(p);
    A.free(p);
  }
  CHECK(pthread_join(t, NULL) == 0);
}

static const fwt_section sections[] = {
  {"fork", t_fork},
  {"fork_thread", t_fork_thread},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
