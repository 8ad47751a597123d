/* pool.c — object pools (src/pool.c) against the allocator under them, and
 * their misuse reports. The pools' own behaviour (contents, threads, stats,
 * fork) is tested by tests/cxx/test_pool.c.
 *   slab_memory:  pools of objects large enough for slabs of 128 KiB and
 *                 more commit memory in step with their objects: 84 slabs
 *                 once took a 4 MiB segment each, 240-350 MiB committed
 *                 for 10-85 MiB of objects;
 *   free_null:    freeing NULL does nothing, whatever the thread's cache;
 *   misuse:       each misuse of fw_pool_free (and a damaged free link in
 *                 cautious mode) run in a child process, in the default and
 *                 in cautious mode: the child must abort with the report's
 *                 phrase and the address it freed.
 * The pools are called by their fw_* names: this program is built in the
 * fw_* flavour only. */
#include "fwtest.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)


static fw_pool_stats_t pool_stats(const fw_pool_t *pool) {
  fw_pool_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK(fw_pool_stats(pool, &s) == 0);
  return s;
}

/* ---- slab_memory ------------------------------------------------------------ */
/* Allocates objects of `size` until the pool holds `slabs` slabs, touching
 * every byte, and compares the growth of committed memory and of RSS with
 * the bytes of the objects. */
static void slab_memory_case(size_t size, size_t slabs) {
  size_t cap = slabs * (MiB / size + 1); /* slabs are 1 MiB at most */
  void **v = fwt_scratch(cap * sizeof *v);
  fw_stats_t s0, s1;
  X.collect(true); /* memory freed before would hide some of the growth */
  fwt_stats(&s0);
  size_t r0 = fwt_rss();
  fw_pool_t *pool = fw_pool_new(size, 0, NULL);
  CHECK(pool != NULL);
  size_t n = 0;
  while (pool_stats(pool).slabs < slabs) {
    CHECKF(n < cap, "%zu objects of %zu bytes and the pool still has fewer than %zu slabs", n, size, slabs);
    v[n] = fw_pool_alloc(pool);
    CHECK(v[n] != NULL);
    memset(v[n], (int)(n & 0x7f) | 1, size);
    n++;
  }
  fwt_stats(&s1);
  size_t r1 = fwt_rss();
  fw_pool_stats_t ps = pool_stats(pool);
  size_t bytes = n * ps.object_size;
  size_t committed = s1.bytes_committed > s0.bytes_committed ? s1.bytes_committed - s0.bytes_committed : 0;
  size_t rss = r1 > r0 ? r1 - r0 : 0;
  size_t limit = 3 * bytes + 4 * MiB;
  fwt_log("%zu-byte objects: %zu in %zu slabs of %zu KiB (%zu KiB of objects): committed +%zu KiB, "
          "rss +%zu KiB, %zu segments",
          size, n, ps.slabs, ps.bytes_reserved / ps.slabs >> 10, bytes >> 10, committed >> 10, rss >> 10,
          s1.segments);
  CHECKF(committed < limit, "%zu-byte objects: %zu KiB committed for %zu KiB of objects in %zu slabs", size,
         committed >> 10, bytes >> 10, ps.slabs);
  CHECKF(rss < limit, "%zu-byte objects: RSS grew by %zu KiB for %zu KiB of objects", size, rss >> 10,
         bytes >> 10);
  for (size_t i = 0; i < n; i++) {
    CHECKF(((unsigned char *)v[i])[size - 1] == ((i & 0x7f) | 1), "object %zu (%p) lost its contents", i,
           v[i]);
    fw_pool_free(pool, v[i]);
  }
  fw_pool_destroy(pool);
  fwt_scratch_free(v, cap * sizeof *v);
}

static void t_slab_memory(void) {
  /* 9000 bytes: slabs of 128 KiB; 40000: a few hundred KiB; 200000: 1 MiB. */
  slab_memory_case(9000, 84);
  slab_memory_case(40000, 84);
  slab_memory_case(200000, 84);
  /* Small objects keep 64 KiB slabs and stay as dense. */
  slab_memory_case(1000, 84);
}

/* ---- free_null ---------------------------------------------------------------- */
/* fw_pool_free(pool, NULL) does nothing, whatever state the thread's entry
 * for the pool is in: none yet, fresh, or warm. */
static void t_free_null(void) {
  fw_pool_t *pool = fw_pool_new(40, 0, NULL);
  CHECK(pool != NULL);
  fw_pool_free(pool, NULL);
  void *p[100];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 100; i++) {
      p[i] = fw_pool_alloc(pool);
      CHECK(p[i] != NULL);
      fw_pool_free(pool, NULL);
    }
    CHECK(pool_stats(pool).objects_live == 100);
    for (int i = 0; i < 100; i++) {
      fw_pool_free(pool, p[i]);
      fw_pool_free(pool, NULL);
    }
    CHECK(pool_stats(pool).objects_live == 0);
    for (int i = 0; i < 100; i++) CHECK((p[i] = fw_pool_alloc(pool)) != NULL); /* no NULL went on a list */
    for (int i = 0; i < 100; i++) fw_pool_free(pool, p[i]);
  }
  fw_pool_destroy(pool);
}

/* ---- misuse ------------------------------------------------------------------- */
/* The child's cases: each prints the address it is about to misuse as
 * "misuse at <p>" on stderr, then misuses it; none may return. */
typedef struct misuse_case {
  const char *name;
  const char *phrase; /* what the report must say */
  bool cautious_only; /* undefined behaviour left unchecked by the default mode */
  void (*run)(void);
} misuse_case;

static void announce(const void *p) {
  char line[64];
  int n = snprintf(line, sizeof line, "misuse at %p\n", p);
  if (n > 0 && write(2, line, (size_t)n) < 0) _exit(9);
}

/* A pool whose calling thread has a warm cache, so that frees take the
 * fast path. */
static fw_pool_t *warm_pool(size_t size) {
  fw_pool_t *pool = fw_pool_new(size, 0, NULL);
  if (pool == NULL) _exit(2);
  void *p[8];
  for (int i = 0; i < 8; i++)
    if ((p[i] = fw_pool_alloc(pool)) == NULL) _exit(2);
  for (int i = 0; i < 8; i++) fw_pool_free(pool, p[i]);
  return pool;
}

static void m_wrong_pool(void) {
  fw_pool_t *a = warm_pool(48), *b = warm_pool(48);
  void *p = fw_pool_alloc(a);
  announce(p);
  fw_pool_free(b, p);
}

/* Objects large enough for slabs over 64 KiB, into a pool of another size. */
static void m_wrong_pool_large(void) {
  fw_pool_t *a = warm_pool(20000), *b = warm_pool(100);
  void *p[5];
  for (int i = 0; i < 5; i++) p[i] = fw_pool_alloc(a);
  announce(p[4]);
  fw_pool_free(b, p[4]);
}

static fw_pool_t *thread_pool;
static void *thread_free(void *arg) {
  fw_pool_free(thread_pool, arg);
  return NULL;
}

/* Freed by a thread that never used a pool (no cache: the slow path). */
static void m_wrong_pool_thread(void) {
  fw_pool_t *a = warm_pool(64);
  thread_pool = warm_pool(64);
  void *p = fw_pool_alloc(a);
  announce(p);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_free, p) != 0) _exit(2);
  pthread_join(t, NULL);
}

static void m_double_free(void) {
  fw_pool_t *a = warm_pool(32);
  void *p = fw_pool_alloc(a);
  announce(p);
  fw_pool_free(a, p);
  fw_pool_free(a, p);
}

/* Another free in between: only cautious mode keeps track. */
static void m_double_free_later(void) {
  fw_pool_t *a = warm_pool(32);
  void *p = fw_pool_alloc(a), *q = fw_pool_alloc(a);
  announce(p);
  fw_pool_free(a, p);
  fw_pool_free(a, q);
  fw_pool_free(a, p);
}

/* The second free by another thread. */
static void m_double_free_thread(void) {
  thread_pool = warm_pool(32);
  void *p = fw_pool_alloc(thread_pool);
  announce(p);
  fw_pool_free(thread_pool, p);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_free, p) != 0) _exit(2);
  pthread_join(t, NULL);
}

static void m_interior(void) {
  fw_pool_t *a = warm_pool(48);
  char *p = fw_pool_alloc(a);
  announce(p + 16);
  fw_pool_free(a, p + 16);
}

static void m_interior_large(void) {
  fw_pool_t *a = warm_pool(20000);
  char *p = fw_pool_alloc(a);
  announce(p + 16384);
  fw_pool_free(a, p + 16384);
}

static void m_malloc_block(void) {
  fw_pool_t *a = warm_pool(48);
  void *p = X.malloc(48);
  announce(p);
  fw_pool_free(a, p);
}

static void m_stack(void) {
  fw_pool_t *a = warm_pool(48);
  char local[64];
  announce(local);
  fw_pool_free(a, local);
}

static char global_object[64];
static void m_global(void) {
  fw_pool_t *a = warm_pool(48);
  announce(global_object);
  fw_pool_free(a, global_object);
}

/* A pool destroyed after this thread freed into it; a new pool takes its
 * id (and this thread's entry for the id), another one its memory. An
 * object of the latter freed into the former is in the chunk the entry
 * last saw the destroyed pool free. */
static void m_wrong_pool_reused(void) {
  fw_pool_t *a = warm_pool(48);
  void *p = fw_pool_alloc(a), *kept = fw_pool_alloc(a); /* the entry's list is not full */
  fw_pool_free(a, p);
  (void)kept;
  fw_pool_destroy(a);
  fw_pool_t *b = fw_pool_new(48, 0, NULL), *c = fw_pool_new(48, 0, NULL);
  if (b == NULL || c == NULL) _exit(2);
  void *q = NULL;
  for (int i = 0; i < 2000 && (uintptr_t)q >> 16 != (uintptr_t)p >> 16; i++) q = fw_pool_alloc(c);
  announce(q);
  fw_pool_free(b, q);
}

/* An object of a destroyed pool: its memory is no pool's any more. */
static void m_destroyed(void) {
  fw_pool_t *a = warm_pool(48), *b = warm_pool(48);
  void *p = fw_pool_alloc(a);
  fw_pool_destroy(a);
  announce(p);
  fw_pool_free(b, p);
}

/* A freed object's link overwritten (use after free): the object is
 * handed out again, and the pointer its link now holds must not be. */
static void m_freed_write(void) {
  fw_pool_t *a = warm_pool(48);
  void **p = fw_pool_alloc(a);
  static char elsewhere[64];
  announce(p);
  fw_pool_free(a, p);
  *p = elsewhere;
  if (fw_pool_alloc(a) != p) _exit(2);
  void *q = fw_pool_alloc(a);
  fprintf(stderr, "handed out %p\n", q);
}

static const misuse_case misuse_cases[] = {
  {"wrong_pool", "object freed into the wrong pool", false, m_wrong_pool},
  {"wrong_pool_large", "object freed into the wrong pool", false, m_wrong_pool_large},
  {"wrong_pool_thread", "object freed into the wrong pool", false, m_wrong_pool_thread},
  {"wrong_pool_reused", "object freed into the wrong pool", false, m_wrong_pool_reused},
  {"double_free", "double free", false, m_double_free},
  {"double_free_later", "double free", true, m_double_free_later},
  {"double_free_thread", "double free", true, m_double_free_thread},
  {"interior", "free of a pointer inside a block", true, m_interior},
  {"interior_large", "free of a pointer inside a block", true, m_interior_large},
  {"malloc_block", "free of a pointer freeway did not hand out", false, m_malloc_block},
  {"stack", "free of a pointer freeway did not hand out", false, m_stack},
  {"global", "free of a pointer freeway did not hand out", false, m_global},
  {"destroyed", "free of a pointer freeway did not hand out", false, m_destroyed},
  {"freed_write", "write to a freed block", true, m_freed_write},
};

static void t_misuse_child(void) {
  const char *name = getenv("FWT_POOL_MISUSE");
  long want = getenv("FWT_POOL_CAUTIOUS") ? atol(getenv("FWT_POOL_CAUTIOUS")) : -1;
  if (name == NULL || X.option_get("cautious") != want) _exit(3);
  for (size_t i = 0; i < FWT_COUNT(misuse_cases); i++)
    if (strcmp(misuse_cases[i].name, name) == 0) {
      misuse_cases[i].run();
      _exit(4); /* the misuse went unnoticed */
    }
  _exit(5);
}

/* Runs one case in a child (this program again, with the case and the mode
 * in its environment) and returns what it wrote to stderr. */
static void run_misuse(const misuse_case *mc, bool cautious) {
  char var[128];
  snprintf(var, sizeof var, "FWT_POOL_MISUSE=%s", mc->name);
  const char *const set[] = {cautious ? "FREEWAY_CAUTIOUS=1" : "FREEWAY_CAUTIOUS=0",
                             cautious ? "FWT_POOL_CAUTIOUS=1" : "FWT_POOL_CAUTIOUS=0", var, NULL};
  char out[4096];
  int st = fwt_child_exec("_misuse_child", set, out, sizeof out);
  const char *mode = cautious ? "cautious mode" : "default mode";
  if (WIFEXITED(st)) {
    int code = WEXITSTATUS(st);
    CHECKF(code != 3, "%s: the child did not run in %s", mc->name, mode);
    CHECKF(0, "%s, %s: the misuse was not stopped (exit %d): %s", mc->name, mode, code, out);
  }
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s, %s: the child ended with status %#x: %s", mc->name,
         mode, st, out);
  char addr[64];
  CHECKF(sscanf(out, "misuse at %63s", addr) == 1, "%s, %s: no address announced: %s", mc->name, mode, out);
  const char *report = strstr(out, "freeway: ");
  CHECKF(report != NULL, "%s, %s: aborted without a report: %s", mc->name, mode, out);
  CHECKF(strstr(report, mc->phrase) != NULL, "%s, %s: the report does not say \"%s\": %s", mc->name, mode,
         mc->phrase, report);
  char where[96];
  snprintf(where, sizeof where, "address %s", addr);
  CHECKF(strstr(report, where) != NULL, "%s, %s: the report does not give \"%s\": %s", mc->name, mode, where,
         report);
  CHECKF(strstr(report, "aborting") != NULL, "%s, %s: the report does not end in aborting: %s", mc->name, mode,
         report);
  fwt_log("%s, %s: %.*s", mc->name, mode, (int)strcspn(report, "\n"), report);
}

static void t_misuse(void) {
  for (size_t i = 0; i < FWT_COUNT(misuse_cases); i++) {
    if (!misuse_cases[i].cautious_only) run_misuse(&misuse_cases[i], false);
    run_misuse(&misuse_cases[i], true);
  }
}

static const fwt_section sections[] = {
  {"slab_memory", t_slab_memory},
  {"free_null", t_free_null},
  {"misuse", t_misuse},
  {"_misuse_child", t_misuse_child},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
