/* wintest.c — freeway's tests for Windows builds, run under Wine by ctest
 * (tests/windows/CMakeLists.txt). The Linux suite's harness forks,
 * preloads and reads /proc; these sections test the same ground with the
 * Windows API: the malloc family, heaps, pools, frees from other threads,
 * threads that come and go (the exit hook), purging, and (FWT_STATIC) the
 * C runtime's names replaced by libfreeway.a.
 *
 *   wintest SECTION     exit status 0 on success; failures are printed */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include "freeway.h"

static int fwt_failures;

#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
      fflush(stderr);                                                            \
      fwt_failures++;                                                            \
    }                                                                            \
  } while (0)

/* FWT_STATIC: the standard names, which libfreeway.a replaces */
#ifdef FWT_STATIC
#define T_MALLOC malloc
#define T_FREE free
#define T_CALLOC calloc
#define T_REALLOC realloc
#else
#define T_MALLOC fw_malloc
#define T_FREE fw_free
#define T_CALLOC fw_calloc
#define T_REALLOC fw_realloc
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  uint64_t x = rng_state;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return rng_state = x;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}
static bool verify(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7)) return false;
  return true;
}

typedef struct {
  HANDLE h;
} thr_t;
static thr_t thr_start(DWORD(WINAPI *fn)(void *), void *arg) {
  thr_t t = {CreateThread(NULL, 0, fn, arg, 0, NULL)};
  return t;
}
static void thr_join(thr_t t) {
  WaitForSingleObject(t.h, INFINITE);
  CloseHandle(t.h);
}

static size_t stat_threads(void) {
  fw_stats_t st = {.size = sizeof st};
  return fw_stats_get(&st) == 0 ? st.threads : (size_t)-1;
}

/* ---- the malloc family ---------------------------------------------------- */
static void t_api(void) {
  void *p[512];
  size_t n[512];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 512; i++) {
      n[i] = (size_t)(rng() % (i % 16 == 0 ? (1u << 20) : 2048u));
      p[i] = T_MALLOC(n[i]);
      CHECK(p[i] != NULL);
      CHECK(((uintptr_t)p[i] & 15) == 0 || n[i] < 16);
      CHECK(fw_malloc_usable_size(p[i]) >= n[i]);
      fill(p[i], n[i], (unsigned)i);
    }
    for (int i = 0; i < 512; i += 2) {
      CHECK(verify(p[i], n[i], (unsigned)i));
      size_t m = n[i] / 2 + (size_t)(rng() % 4096);
      unsigned char *q = T_REALLOC(p[i], m);
      CHECK(q != NULL);
      CHECK(verify(q, m < n[i] ? m : n[i], (unsigned)i));
      p[i] = q, n[i] = m;
      fill(q, m, (unsigned)i);
    }
    for (int i = 0; i < 512; i++) {
      CHECK(verify(p[i], n[i], (unsigned)i));
      T_FREE(p[i]);
    }
  }
  for (size_t a = 8; a <= ((size_t)1 << 22); a *= 2) {
    void *q = fw_malloc_aligned(a + 3, a);
    CHECK(q && ((uintptr_t)q & (a - 1)) == 0);
    memset(q, 0x5a, a + 3);
    fw_free(q);
  }
  unsigned char *big = T_MALLOC((size_t)64 << 20);
  CHECK(big != NULL);
  memset(big, 1, (size_t)64 << 20);
  T_FREE(big);
  for (int i = 0; i < 64; i++) {
    size_t m = (size_t)(rng() % (1u << 18)) + 1;
    unsigned char *z = T_CALLOC(m, 1);
    CHECK(z != NULL);
    bool zero = true;
    for (size_t k = 0; k < m; k++) zero &= z[k] == 0;
    CHECK(zero);
    memset(z, 0xff, m);
    T_FREE(z);
  }
  /* through a volatile: the compiler would refuse the constants */
  volatile size_t too_big = (size_t)-1 / 2, half = (size_t)1 << (sizeof(size_t) * 4);
  void *huge = T_MALLOC(too_big);
  CHECK(huge == NULL);
  CHECK(T_CALLOC(half, half) == NULL);
  fw_stats_t st = {.size = sizeof st};
  CHECK(fw_stats_get(&st) == 0);
  CHECK(st.version == FREEWAY_VERSION);
  CHECK(st.bytes_reserved >= st.bytes_committed);
}

/* ---- purging: memory given back reads as zero when it comes back ------------ */
static void t_purge(void) {
  fw_option_set("purge_delay", 0);
  for (int round = 0; round < 8; round++) {
    enum { N = 64 };
    unsigned char *p[N];
    for (int i = 0; i < N; i++) {
      p[i] = T_MALLOC(256 << 10);
      CHECK(p[i] != NULL);
      memset(p[i], 0xa5, 256 << 10);
    }
    for (int i = 0; i < N; i++) T_FREE(p[i]);
    fw_collect(true);
    for (int i = 0; i < N; i++) {
      p[i] = T_CALLOC(256 << 10, 1);
      CHECK(p[i] != NULL);
      size_t nz = 0;
      for (size_t k = 0; k < (256u << 10); k++) nz += p[i][k] != 0;
      CHECK(nz == 0);
    }
    for (int i = 0; i < N; i++) T_FREE(p[i]);
  }
  fw_stats_t st = {.size = sizeof st};
  CHECK(fw_stats_get(&st) == 0);
  CHECK(st.bytes_purged > 0);
}

/* ---- heaps ------------------------------------------------------------------ */
static void t_heap(void) {
  fw_heap_t *h = fw_heap_new();
  CHECK(h != NULL);
  void *p[1000];
  for (int i = 0; i < 1000; i++) {
    p[i] = fw_heap_malloc(h, (size_t)(i * 13 % 3000) + 1);
    CHECK(p[i] && fw_heap_contains(h, p[i]));
    CHECK(!fw_heap_contains(fw_heap_get_default(), p[i]));
  }
  fw_heap_stats_t hs = {.size = sizeof hs};
  CHECK(fw_heap_stats(h, &hs) == 0);
  CHECK(hs.blocks_live == 1000);
  for (int i = 0; i < 500; i++) fw_free(p[i]);
  CHECK(fw_heap_stats(h, &hs) == 0);
  CHECK(hs.blocks_live == 500);
  void *a = fw_heap_malloc_aligned(h, 100, 4096);
  CHECK(a && ((uintptr_t)a & 4095) == 0);
  fw_heap_destroy(h);
  fw_heap_t *h2 = fw_heap_new();
  void *q = fw_heap_calloc(h2, 100, 100);
  CHECK(q != NULL);
  q = fw_heap_realloc(h2, q, 100000);
  CHECK(q && fw_heap_contains(h2, q));
  fw_free(q);
  fw_heap_delete(h2);
}

/* ---- pools ------------------------------------------------------------------ */
static fw_pool_t *g_pool;
static DWORD WINAPI pool_worker(void *arg) {
  void **objs = arg;
  for (int i = 0; i < 5000; i++) fw_pool_free(g_pool, objs[i]);
  for (int r = 0; r < 20; r++) {
    void *mine[100];
    for (int i = 0; i < 100; i++) mine[i] = fw_pool_alloc(g_pool);
    for (int i = 0; i < 100; i++) fw_pool_free(g_pool, mine[i]);
  }
  return 0;
}

static void t_pool(void) {
  g_pool = fw_pool_new(48, 16, NULL);
  CHECK(g_pool != NULL);
  enum { T = 4, PER = 5000 };
  static void *objs[T][PER];
  for (int t = 0; t < T; t++)
    for (int i = 0; i < PER; i++) {
      objs[t][i] = fw_pool_alloc(g_pool);
      CHECK(objs[t][i] && ((uintptr_t)objs[t][i] & 15) == 0);
      memset(objs[t][i], t, 48);
    }
  fw_pool_stats_t ps = {.size = sizeof ps};
  CHECK(fw_pool_stats(g_pool, &ps) == 0);
  CHECK(ps.objects_live == T * PER);
  thr_t th[T];
  for (int t = 0; t < T; t++) th[t] = thr_start(pool_worker, objs[t]);
  for (int t = 0; t < T; t++) thr_join(th[t]);
  CHECK(fw_pool_stats(g_pool, &ps) == 0);
  CHECK(ps.objects_live == 0);
  fw_pool_destroy(g_pool);
}

/* ---- frees by other threads ----------------------------------------------- */
enum { XN = 20000 };
static void *volatile xslots[XN];
static DWORD WINAPI x_producer(void *arg) {
  (void)arg;
  for (int i = 0; i < XN; i++) {
    size_t n = (size_t)(i * 37 % 5000) + 1;
    unsigned char *p = T_MALLOC(n);
    fill(p, n < 64 ? n : 64, (unsigned)n);
    xslots[i] = p;
  }
  return 0;
}
static DWORD WINAPI x_consumer(void *arg) {
  (void)arg;
  for (int i = 0; i < XN; i++) {
    void *p;
    while ((p = xslots[i]) == NULL) SwitchToThread();
    size_t n = (size_t)(i * 37 % 5000) + 1;
    if (!verify(p, n < 64 ? n : 64, (unsigned)n)) fwt_failures++;
    T_FREE(p);
  }
  return 0;
}

static void t_xthread(void) {
  T_FREE(T_MALLOC(1));  /* the main thread has its heap from here on */
  size_t before = stat_threads();
  for (int round = 0; round < 3; round++) {
    memset((void *)xslots, 0, sizeof xslots);
    thr_t p = thr_start(x_producer, NULL), c = thr_start(x_consumer, NULL);
    thr_join(c);
    /* the producer frees what others returned to its pages */
    thr_join(p);
  }
  fw_collect(true);
  CHECK(stat_threads() == before);
}

/* ---- threads that come and go: each one's heap is released at its exit ------- */
static DWORD WINAPI churn_worker(void *arg) {
  (void)arg;
  void *p[64] = {0};
  for (int i = 0; i < 64; i++) p[i] = T_MALLOC((size_t)(i * 97 % 4000) + 1);
  for (int i = 0; i < 64; i += 2) T_FREE(p[i]);
  /* half of it stays live: the exit abandons it, and the main thread frees it */
  void **keep = T_MALLOC(32 * sizeof(void *));
  for (int i = 0; i < 32; i++) keep[i] = p[2 * i + 1];
  return (DWORD)(uintptr_t)keep == 0;
}

static void *churn_keep[256];
static DWORD WINAPI churn_worker_keep(void *arg) {
  void **out = arg;
  *out = T_MALLOC(1000);
  return churn_worker(NULL);
}

static void t_churn(void) {
  T_FREE(T_MALLOC(1));
  size_t before = stat_threads();
  for (int wave = 0; wave < 32; wave++) {
    thr_t th[8];
    for (int t = 0; t < 8; t++) th[t] = thr_start(churn_worker_keep, &churn_keep[wave * 8 + t]);
    for (int t = 0; t < 8; t++) thr_join(th[t]);
  }
  for (int i = 0; i < 256; i++) {
    CHECK(churn_keep[i] != NULL);
    T_FREE(churn_keep[i]);
  }
  fw_stats_t st = {.size = sizeof st};
  CHECK(fw_stats_get(&st) == 0);
  /* every worker's exit hook ran: no heap left but the main thread's */
  CHECK(st.threads == before);
  CHECK(st.threads_total >= 256);
}

#ifdef FWT_STATIC
/* ---- the C runtime's names, replaced by libfreeway.a ----------------------- */
void fwt_cxx_check(int *failures);
static void t_static(void) {
  void *p = malloc(100);
  if (p) memset(p, 0, 100);
  /* only freeway knows a usable size for its own blocks */
  CHECK(p && fw_malloc_usable_size(p) >= 100);
  CHECK(_msize(p) == fw_malloc_usable_size(p));
  p = realloc(p, 5000);
  CHECK(p && fw_malloc_usable_size(p) >= 5000);
  free(p);
  void *c = calloc(10, 10);
  CHECK(c && fw_malloc_usable_size(c) >= 100);
  c = _recalloc(c, 20, 100);
  CHECK(c && ((unsigned char *)c)[1999] == 0);
  free(c);
  void *a = _aligned_malloc(1000, 256);
  CHECK(a && ((uintptr_t)a & 255) == 0 && fw_malloc_usable_size(a) >= 1000);
  a = _aligned_realloc(a, 100000, 256);
  CHECK(a && ((uintptr_t)a & 255) == 0);
  _aligned_free(a);
  char *s = _strdup("freeway");
  CHECK(s && strcmp(s, "freeway") == 0 && fw_malloc_usable_size(s) >= 8);
  free(s);
  void *e = calloc(1, 10);
  CHECK(_expand(e, 8) == e);
  free(e);
  fwt_cxx_check(&fwt_failures);
}
#endif

typedef struct {
  const char *name;
  void (*fn)(void);
} section_t;
static const section_t sections[] = {
    {"api", t_api},       {"purge", t_purge}, {"heap", t_heap},   {"pool", t_pool},
    {"xthread", t_xthread}, {"churn", t_churn},
#ifdef FWT_STATIC
    {"static", t_static},
#endif
};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SECTION\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
    if (strcmp(argv[1], sections[i].name) != 0) continue;
    sections[i].fn();
    printf("%s: %s\n", argv[1], fwt_failures ? "FAILED" : "ok");
    return fwt_failures ? 1 : 0;
  }
  fprintf(stderr, "%s: no section %s\n", argv[0], argv[1]);
  return 2;
}
