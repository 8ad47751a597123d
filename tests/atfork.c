/* atfork.c — fork() while another library's pthread_atfork prepare handler
 * allocates. Prepare handlers run in the reverse order of registration; this
 * program registers its handler from a constructor of priority 101, which
 * runs before the allocator's own constructor when both are in the same
 * executable (libfreeway.a, or libfreeway-fw.a in sanitizer builds). So the
 * allocator's prepare handler has run, and taken whatever it takes, when
 * this one calls malloc, fw_heap_new / fw_heap_delete and a large malloc.
 *   prepare_alloc:        the main thread forks;
 *   prepare_alloc_thread: a thread whose first allocation is the one in the
 *                         prepare handler forks (its thread data is built
 *                         right then).
 * A deadlock ends the process through an alarm, reported as such; ctest's
 * timeout is the last resort. */
#include "fwtest.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static atomic_int armed;
static atomic_int prepared;

static void prepare(void) {
  if (!atomic_load(&armed)) return;
  char *p = A.malloc(100);
  CHECK(p != NULL);
  memset(p, 0x11, 100);
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  char *q = X.heap_malloc(h, 3000);
  CHECK(q != NULL);
  memset(q, 0x22, 3000);
  X.heap_delete(h); /* q moves to this thread's default heap */
  char *big = A.malloc(8 * MiB);
  CHECK(big != NULL);
  big[0] = big[8 * MiB - 1] = 0x33;
  CHECK(q[2999] == 0x22 && p[99] == 0x11);
  A.free(big);
  A.free(q);
  A.free(p);
  atomic_fetch_add(&prepared, 1);
}

__attribute__((constructor(101))) static void register_first(void) {
  if (pthread_atfork(prepare, NULL, NULL) != 0) {
    static const char msg[] = "atfork: pthread_atfork failed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] =
      "FAIL atfork: fork() did not return: deadlock in a pthread_atfork prepare handler that allocates "
      "(the allocator's prepare handler ran first and holds its locks)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

static void child(void) {
  alarm(30);
  char *p = A.malloc(200);
  if (!p) _exit(10);
  memset(p, 1, 200);
  fw_heap_t *h = X.heap_new();
  if (!h) _exit(11);
  void *q = X.heap_malloc(h, 5000);
  if (!q) _exit(12);
  X.heap_destroy(h);
  void *big = A.malloc(8 * MiB);
  if (!big) _exit(13);
  A.free(big);
  A.free(p);
  _exit(0);
}

static void fork_rounds(int rounds) {
  for (int i = 0; i < rounds; i++) {
    int before = atomic_load(&prepared);
    atomic_store(&armed, 1);
    alarm(15);
    pid_t pid = fork();
    if (pid == 0) child();
    alarm(0);
    atomic_store(&armed, 0);
    CHECK(pid > 0);
    CHECKF(atomic_load(&prepared) == before + 1, "the prepare handler did not run");
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: child status %#x (%s %d)", i, st,
           WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
}

static void catch_alarm(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
}

static void t_prepare_alloc(void) {
  catch_alarm();
  fork_rounds(5);
}

static void *fork_thread(void *arg) {
  (void)arg;
  /* nothing allocated before: the prepare handler's malloc is the first */
  fork_rounds(1);
  return NULL;
}

static void t_prepare_alloc_thread(void) {
  catch_alarm();
  for (int i = 0; i < 3; i++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fork_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
  }
}

static const fwt_section sections[] = {
  {"prepare_alloc", t_prepare_alloc},
  {"prepare_alloc_thread", t_prepare_alloc_thread},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
