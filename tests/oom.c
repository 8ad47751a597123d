/* oom.c — running out of address space under RLIMIT_AS (set in a child
 * process): allocations fail with NULL and errno ENOMEM, never abort; after
 * everything is freed, allocation works again, also for other sizes. */
#include "fwtest.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static volatile size_t v_gib = (size_t)1 << 30;

/* Runs fn in a child whose address space may grow by `headroom` bytes. */
static void limited(const char *what, size_t headroom, void (*fn)(size_t)) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(120);
    /* Warm the allocator up first, so that its start-up is not what runs
     * out. */
    void *w = A.malloc(100);
    CHECK(w != NULL);
    A.free(w);
    size_t vm = fwt_vm_size();
    struct rlimit rl = {vm + headroom, vm + headroom};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    fn(headroom);
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECKF(!(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM), "%s: the child hung", what);
  CHECKF(!WIFSIGNALED(st), "%s: the child was killed by signal %d (%s): an abort or crash when out of memory",
         what, WTERMSIG(st), strsignal(WTERMSIG(st)));
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child exit status %d", what, WEXITSTATUS(st));
}

static void expect_enomem(void *p, int e, const char *what) {
  CHECKF(p == NULL, "%s succeeded (%p) beyond RLIMIT_AS", what, p);
  CHECKF(e == ENOMEM, "%s: errno %d, want ENOMEM", what, e);
}

/* ---- single requests larger than what is left ----------------------------------- */
static void huge_child(size_t headroom) {
  size_t big = headroom + v_gib; /* more than the limit allows */
  errno = 0;
  void *p = A.malloc(big);
  expect_enomem(p, errno, "malloc(headroom + 1 GiB)");
  errno = 0;
  p = A.calloc(1, big);
  expect_enomem(p, errno, "calloc(1, headroom + 1 GiB)");
  errno = 0;
  p = A.aligned_alloc(MiB, big);
  expect_enomem(p, errno, "aligned_alloc(1 MiB, headroom + 1 GiB)");
  errno = 0;
  p = X.malloc_aligned(big, 4096);
  expect_enomem(p, errno, "fw_malloc_aligned(headroom + 1 GiB, 4096)");
  void *out = NULL;
  CHECK(A.posix_memalign(&out, 64, big) == ENOMEM);
  errno = 0;
  p = A.malloc(SIZE_MAX / 2);
  expect_enomem(p, errno, "malloc(SIZE_MAX / 2)");
  /* A failed realloc keeps the block. */
  char *s = A.malloc(1000);
  CHECK(s != NULL);
  fwt_fill(s, 1000, 1);
  errno = 0;
  p = A.realloc(s, big);
  expect_enomem(p, errno, "realloc(p, headroom + 1 GiB)");
  CHECK_PATTERN(s, 1000, 1);
  A.free(s);
  /* Something that fits still works. */
  char *q = A.malloc(64 * MiB);
  CHECKF(q != NULL, "malloc(64 MiB) with %zu MiB of headroom", headroom / MiB);
  memset(q, 7, 64 * MiB);
  A.free(q);
}

static void t_huge(void) { limited("huge", 512 * MiB, huge_child); }

/* ---- exhausting with 1 MiB blocks ------------------------------------------------- */
enum { MAXB = 8192 };
static char *blocks[MAXB];

static void stamp_mib(char *p) {
  fwt_fill(p, 4096, fwt_seed(p, 1, 0));
  fwt_fill(p + MiB - 4096, 4096, fwt_seed(p, 2, 0));
}
static void check_mib(const char *p) {
  CHECK_PATTERN(p, 4096, fwt_seed(p, 1, 0));
  CHECK_PATTERN(p + MiB - 4096, 4096, fwt_seed(p, 2, 0));
}

static size_t fill_mib(const char *what) {
  size_t n = 0;
  for (;;) {
    CHECKF(n < MAXB, "%s: %d MiB allocated and no failure: RLIMIT_AS not honoured?", what, (int)MAXB);
    errno = 0;
    char *p = A.malloc(MiB);
    if (!p) {
      CHECKF(errno == ENOMEM, "%s: malloc(1 MiB) failed after %zu blocks with errno %d", what, n, errno);
      break;
    }
    stamp_mib(p);
    blocks[n++] = p;
  }
  return n;
}
static void free_mib(size_t n) {
  for (size_t i = 0; i < n; i++) {
    check_mib(blocks[i]);
    A.free(blocks[i]);
    blocks[i] = NULL;
  }
}

static void exhaust_large_child(size_t headroom) {
  size_t room = headroom / MiB;
  size_t n1 = fill_mib("first fill");
  fwt_log("exhaust_large: %zu blocks of 1 MiB within %zu MiB of headroom", n1, room);
  CHECKF(n1 * 10 >= room * 4, "only %zu blocks of 1 MiB fit in %zu MiB of headroom", n1, room);
  /* Small requests when the space is gone: NULL + ENOMEM or a block, no abort. */
  void *small[1000];
  size_t got = 0;
  for (int i = 0; i < 1000; i++) {
    errno = 0;
    void *p = A.malloc(32);
    if (p) {
      fwt_fill(p, 32, 3);
      small[got++] = p;
    } else {
      CHECKF(errno == ENOMEM, "malloc(32) when out of memory: errno %d", errno);
    }
  }
  for (size_t i = 0; i < got; i++) {
    CHECK_PATTERN(small[i], 32, 3);
    A.free(small[i]);
  }
  free_mib(n1);
  /* Recovery: the same again. */
  size_t n2 = fill_mib("second fill");
  CHECKF(n2 * 10 >= n1 * 9, "after freeing everything only %zu of %zu blocks fit again", n2, n1);
  free_mib(n2);
  /* And one block of a quarter of the headroom. */
  X.collect(true);
  size_t big = headroom / 4;
  char *p = A.malloc(big);
  CHECKF(p != NULL, "after freeing %zu MiB and fw_collect(true), malloc(%zu MiB) fails", n2, big / MiB);
  memset(p, 1, 4096);
  memset(p + big - 4096, 1, 4096);
  A.free(p);
}

static void t_exhaust_large(void) { limited("exhaust_large", 1024 * MiB, exhaust_large_child); }

/* ---- exhausting with small blocks, recovering for big ones ---------------------- */
static void exhaust_small_child(size_t headroom) {
  const size_t sz = 256;
  /* The allocator may hold address space reserved before the limit was
   * set, so the whole limit bounds the count, not just the headroom. */
  struct rlimit rl;
  CHECK(getrlimit(RLIMIT_AS, &rl) == 0);
  size_t cap = (size_t)rl.rlim_cur / sz + 16;
  char **v = fwt_scratch(cap * sizeof *v);
  /* Baseline: how many 1 MiB blocks fit now. */
  size_t m0 = fill_mib("1 MiB blocks before the small ones");
  free_mib(m0);
  X.collect(true);
  size_t n = 0;
  /* The scratch array above counts against the limit too; whatever is
   * left is what the small blocks get. */
  for (;;) {
    CHECKF(n < cap, "%zu small blocks (more than the whole limit) and no failure", n);
    errno = 0;
    char *p = A.malloc(sz);
    if (!p) {
      CHECKF(errno == ENOMEM, "malloc(%zu) failed after %zu blocks with errno %d", sz, n, errno);
      break;
    }
    fwt_fill(p, sz, fwt_seed(p, sz, 0));
    v[n++] = p;
  }
  size_t room = (headroom - cap * sizeof *v) / sz;
  fwt_log("exhaust_small: %zu blocks of %zu bytes (%zu MiB) within the limit", n, sz, n * sz / MiB);
  CHECKF(n * 10 >= room * 4, "only %zu blocks of %zu bytes fit, room for %zu", n, sz, room);
  errno = 0;
  void *q = A.malloc(MiB);
  if (q) A.free(q);
  else CHECKF(errno == ENOMEM, "malloc(1 MiB) when out of memory: errno %d", errno);
  for (size_t i = 0; i < n; i++) {
    CHECK_PATTERN(v[i], sz, fwt_seed(v[i], sz, 0));
    A.free(v[i]);
  }
  X.collect(true);
  /* The memory of the small blocks' pages serves big blocks now. */
  size_t m = fill_mib("1 MiB blocks after freeing the small ones");
  fwt_log("exhaust_small: %zu blocks of 1 MiB fit before, %zu after", m0, m);
  CHECKF(m * 10 >= m0 * 9,
         "after freeing %zu MiB of small blocks only %zu blocks of 1 MiB fit (%zu before)", n * sz / MiB, m, m0);
  free_mib(m);
  fwt_scratch_free(v, cap * sizeof *v);
}

static void t_exhaust_small(void) { limited("exhaust_small", 512 * MiB, exhaust_small_child); }

static const fwt_section sections[] = {
  {"huge", t_huge},
  {"exhaust_large", t_exhaust_large},
  {"exhaust_small", t_exhaust_small},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
