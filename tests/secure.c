/* The secure level (FREEWAY_SECURE=1, docs/hardening.md): what it does
 * beyond the default mode's checks, seen from a program. Every section
 * runs with FREEWAY_SECURE=1 (tests/CMakeLists.txt) and first checks that
 * the level is on. The misuse it stops is the bad-input suite's (its
 * "secure" mode); here: guard pages, the carving order, delayed reuse, and
 * correct programs that must run as before. */
#include "fwtest.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define SEG ((uintptr_t)4 << 20) /* freeway's segment size: the guard ends each segment */

static void need_secure(void) {
  CHECKF(X.option_get("secure") == 1, "FREEWAY_SECURE=1 is not in effect (option reads %ld)",
         X.option_get("secure"));
}

/* ---- guard pages ---------------------------------------------------------- */
static void write_at(void *arg) {
  volatile char *p = arg;
  *p = 1;
}

/* A block too big for a span has a segment of its own: its usable size
 * ends where the guard page begins. */
static void t_guard_large(void) {
  need_secure();
  size_t n = (size_t)3 << 20;
  char *p = X.malloc(n);
  CHECK(p != NULL);
  size_t usable = X.usable_size(p);
  CHECKF(usable >= n, "usable %zu < %zu", usable, n);
  memset(p, 7, usable);  /* all of the usable size is writable */
  char out[512];
  int st = fwt_child(write_at, p + usable, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS),
         "a write just past the usable size of a 3 MiB block (%p + %zu) did not fault (status %#x)", (void *)p,
         usable, st);
  X.free(p);
}

/* A small block: the last OS page of its segment is a guard. */
static void t_guard_small(void) {
  need_secure();
  void *keep[64];
  for (int i = 0; i < 64; i++) {
    keep[i] = X.malloc(64);
    CHECK(keep[i] != NULL);
  }
  char *end = (char *)(((uintptr_t)keep[0] & ~(SEG - 1)) + SEG);
  char out[512];
  int st = fwt_child(write_at, end - 1, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS),
         "the last byte of the segment of a 64 B block (%p) is writable (status %#x)", (void *)(end - 1), st);
  /* every block of the segment's last page slot ends before its guard:
   * fill the segment and write every byte of every block */
  size_t cap = 80000, n = 0, in_last = 0;
  char **b = fwt_scratch(cap * sizeof *b);
  for (; n < cap; n++) {
    b[n] = X.malloc(4000);
    CHECK(b[n] != NULL);
    memset(b[n], 3, 4000);
    if (((uintptr_t)b[n] & (SEG - 1)) >= SEG - ((size_t)64 << 10)) in_last++;
    if (in_last > 20) break;
  }
  CHECKF(in_last > 0, "no block of 4000 B came from the last 64 KiB of a segment in %zu", n);
  for (size_t i = 0; i < n; i++) X.free(b[i]);
  fwt_scratch_free(b, cap * sizeof *b);
  for (int i = 0; i < 64; i++) X.free(keep[i]);
}

/* ---- the carving order ------------------------------------------------------ */
/* Fresh blocks of one size, one after another: in the default mode each is
 * the next in address order; here the order is drawn at random. */
static void t_carve_order(void) {
  need_secure();
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  enum { N = 2000 };
  uintptr_t a[N];
  size_t descending = 0, gaps = 0;
  for (int i = 0; i < N; i++) {
    void *p = X.heap_malloc(h, 48);
    CHECK(p != NULL);
    a[i] = (uintptr_t)p;
    if (i && a[i] < a[i - 1]) descending++;
    if (i && a[i] != a[i - 1] + 48) gaps++;
  }
  /* a fresh run of 48 B blocks in address order would give N - 1 - (pages
   * carved) steps of exactly 48 bytes; random order gives few */
  CHECKF(gaps > N / 2, "%zu of %d successive fresh blocks were not address neighbours: the order is not random",
         gaps, N - 1);
  CHECKF(descending > N / 10, "only %zu of %d steps went down in address", descending, N - 1);
  /* all distinct */
  for (int i = 0; i < N; i++)
    for (int k = i + 1; k < N; k++) CHECKF(a[i] != a[k], "block %p handed out twice", (void *)a[i]);
  X.heap_destroy(h);
}

/* ---- delayed reuse -------------------------------------------------------- */
static void t_delayed_reuse(void) {
  need_secure();
  void *warm = X.malloc(64);  /* a page of the class exists */
  CHECK(warm != NULL);
  int same = 0;
  for (int i = 0; i < 100; i++) {
    void *p = X.malloc(64);
    CHECK(p != NULL);
    memset(p, 1, 64);
    X.free(p);
    void *q = X.malloc(64);
    CHECK(q != NULL);
    if (q == p) same++;
    X.free(q);
  }
  CHECKF(same < 10, "a freed 64 B block came back from the very next malloc %d times in 100", same);
  X.free(warm);
}

/* The owner's frees wait on later, but a page whose free blocks are all
 * there is still one to take blocks from before the page at hand carves
 * new ones (page.c fw_page_queue_served): its blocks are memory touched
 * already. Blocks of 16 KiB are carved one at a time, in address order,
 * so a page's end shows as a jump between two blocks taken in turn. */
static void t_served_later(void) {
  need_secure();
  enum { BS = 16384, MAX = 200 };
  char *b[MAX];
  int n = 0, first_h = -1;
  for (; n < MAX; n++) {
    b[n] = X.malloc(BS);
    CHECK(b[n] != NULL);
    memset(b[n], 3, BS);
    if (n > 0 && b[n] != b[n - 1] + BS) {
      first_h = n;  /* b[n] opened a page: little of it is carved yet */
      n++;
      break;
    }
  }
  CHECKF(first_h > 8, "no page of 16 KiB blocks filled up within %d blocks (the first jump at %d)", MAX,
         first_h);
  /* the page before the jump: all its blocks but one freed (it stays) */
  int k = first_h - 1;
  while (k > 0 && b[k - 1] == b[k] - BS) k--;
  int freed = 0;
  for (int i = k + 1; i < first_h; i++, freed++) X.free(b[i]);
  CHECKF(freed >= 8, "the page before the jump held %d blocks", freed + 1);
  int again = 0, want = freed < 16 ? freed : 16;
  char *c[16];
  for (int j = 0; j < want; j++) {
    c[j] = X.malloc(BS);
    CHECK(c[j] != NULL);
    for (int i = k + 1; i < first_h; i++)
      if (c[j] == b[i]) again++;
  }
  CHECKF(again >= want / 2,
         "%d of %d blocks of 16 KiB came from the %d freed on a page of the same class (its frees waiting on "
         "its later list); the others from memory not touched before",
         again, want, freed);
  for (int j = 0; j < want; j++) X.free(c[j]);
  X.free(b[k]);
  for (int i = first_h; i < n; i++) X.free(b[i]);
}

/* A large block of a thread that has exited, freed by another, over and
 * over: its page (in a segment no thread owns) is no longer in a full
 * list, and the free is not to mistake it for a small block's page (whose
 * blocks carry the free mark: a large block's reused memory would show the
 * mark of its last free, and read as freed twice). */
static void *alloc_large_and_exit(void *arg) {
  char *p = X.malloc(192 * 1024);
  CHECK(p != NULL);
  p[0] = 1;
  p[192 * 1024 - 1] = 2;
  *(char **)arg = p;
  return NULL;
}

static void t_large_abandoned(void) {
  need_secure();
  for (int i = 0; i < 40; i++) {
    char *p = NULL;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_large_and_exit, &p) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(p != NULL && p[0] == 1);
    X.free(p);
  }
}

/* ---- correct programs ------------------------------------------------------- */
typedef struct { void **slots; size_t n; } ring_t;

static void *churn(void *arg) {
  ring_t *r = arg;
  fwt_rng g;
  fwt_rng_init(&g, (uint64_t)(uintptr_t)r);
  for (size_t i = 0; i < fwt_scaled(200000); i++) {
    size_t k = fwt_next(&g) % r->n;
    void *old = __atomic_exchange_n(&r->slots[k], NULL, __ATOMIC_ACQ_REL);
    X.free(old);  /* often another thread's block */
    size_t sz = fwt_random_size(&g, 4096);
    char *p = X.malloc(sz);
    CHECK(p != NULL);
    memset(p, (int)(sz & 0xff), sz);
    old = __atomic_exchange_n(&r->slots[k], p, __ATOMIC_ACQ_REL);
    X.free(old);
  }
  return NULL;
}

/* Threads that free each other's blocks, with calloc and realloc between:
 * the level stops misuse only. */
static void t_correct(void) {
  need_secure();
  ring_t r = {NULL, 512};
  r.slots = A.calloc(r.n, sizeof *r.slots);
  CHECK(r.slots != NULL);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, churn, &r) == 0);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  for (size_t k = 0; k < r.n; k++) X.free(r.slots[k]);
  X.free(r.slots);
  /* calloc is zero however the block was carved and marked */
  for (int round = 0; round < 3; round++) {
    void *b[300];
    for (int i = 0; i < 300; i++) {
      size_t n = (size_t)(i % 40) * 8 + 1;
      unsigned char *p = A.calloc(1, n);
      CHECK(p != NULL);
      for (size_t k = 0; k < n; k++) CHECKF(p[k] == 0, "calloc(1, %zu) byte %zu is %d", n, k, p[k]);
      memset(p, 0xAB, n);
      b[i] = p;
    }
    for (int i = 0; i < 300; i++) X.free(b[i]);
  }
  /* realloc through every small class and back */
  char *p = X.malloc(1);
  CHECK(p != NULL);
  p[0] = 9;
  for (size_t n = 2; n < 70000; n += n / 3 + 1) {
    p = A.realloc(p, n);
    CHECK(p != NULL);
    CHECK(p[0] == 9);
  }
  X.free(p);
  /* blocks of 1..8 bytes still hold what is written to them */
  for (size_t n = 1; n <= 8; n++) {
    unsigned char *q = X.malloc(n);
    CHECK(q != NULL);
    memset(q, 0x5A, n);
    X.free(q);
  }
}

static const fwt_section sections[] = {
  {"guard_large", t_guard_large},
  {"guard_small", t_guard_small},
  {"carve_order", t_carve_order},
  {"delayed_reuse", t_delayed_reuse},
  {"served_later", t_served_later},
  {"large_abandoned", t_large_abandoned},
  {"correct", t_correct},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
