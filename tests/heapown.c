/* heapown.c — who a heap belongs to. A heap made with fw_heap_new holds
 * only blocks it allocated itself, never those of exited threads; the
 * owner-only calls are refused from any other thread (and abort in cautious
 * mode) without touching the heap; a heap whose thread has exited is dead,
 * while its blocks stay valid. */
#include "fwtest.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void heap_stats(const fw_heap_t *h, fw_heap_stats_t *s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  CHECK(X.heap_stats(h, s) == 0);
}

static int cmp_cptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
  return x < y ? -1 : x > y;
}

/* Records every block a visit reports. */
typedef struct visit_rec {
  const void **seen;
  size_t count, cap;
} visit_rec;

static bool record_visit(const void *block, size_t usable, void *arg) {
  (void)usable;
  visit_rec *v = arg;
  if (v->count < v->cap) v->seen[v->count] = block;
  v->count++;
  return true;
}

static size_t visit_count(const fw_heap_t *h) {
  visit_rec v = {NULL, 0, 0};
  X.heap_visit(h, record_visit, &v);
  return v.count;
}

/* ---- blocks of an exited thread never join a heap made with fw_heap_new ---- */
static blk *adopt_other;
static size_t adopt_other_n;

static void *adopt_thread(void *arg) {
  (void)arg;
  fwt_rng r;
  fwt_rng_init(&r, 501);
  for (size_t i = 0; i < adopt_other_n; i++) {
    size_t n = fwt_random_size(&r, 1 << 20);
    adopt_other[i] = (blk){A.malloc(n), n, 0x07e1};
    CHECKF(adopt_other[i].p != NULL, "malloc(%zu)", n);
    bfill(&adopt_other[i]);
  }
  /* Holes in its pages, so that an adopter would find room there too. */
  for (size_t i = 3; i < adopt_other_n; i += 4) {
    A.free(adopt_other[i].p);
    adopt_other[i].p = NULL;
  }
  return NULL;
}

typedef struct range {
  uintptr_t lo, hi;
} range;

static int cmp_range(const void *a, const void *b) {
  uintptr_t x = ((const range *)a)->lo, y = ((const range *)b)->lo;
  return x < y ? -1 : x > y;
}

/* The live block of sorted, disjoint rs that [lo, hi) overlaps, or NULL. */
static const range *overlap(const range *rs, size_t n, uintptr_t lo, uintptr_t hi) {
  size_t a = 0, b = n; /* the last range starting below hi is rs[a - 1] */
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (rs[m].lo < hi) a = m + 1;
    else b = m;
  }
  if (a == 0) return NULL;
  return rs[a - 1].hi > lo ? &rs[a - 1] : NULL;
}

static void t_adopt(void) {
  adopt_other_n = fwt_scaled(4000);
  adopt_other = fwt_scratch(adopt_other_n * sizeof *adopt_other);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, adopt_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  size_t live = 0;
  for (size_t i = 0; i < adopt_other_n; i++) live += adopt_other[i].p != NULL;
  fw_stats_t st0, st1;
  fwt_stats(&st0);

  /* Enough, in blocks of every kind, that the heap needs segments the
   * thread does not have yet: that is when abandoned ones get taken over. */
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  size_t un = fwt_scaled(6000);
  blk *own = fwt_scratch(un * sizeof *own);
  fwt_rng r;
  fwt_rng_init(&r, 502);
  size_t own_bytes = 0;
  for (size_t i = 0; i < un; i++) {
    size_t n = fwt_random_size(&r, 1 << 20);
    own[i] = (blk){X.heap_malloc(h, n), n, 0x0e1};
    CHECKF(own[i].p != NULL, "fw_heap_malloc(%zu)", n);
    bfill(&own[i]);
    own_bytes += X.heap_usable_size(h, own[i].p);
  }
  fwt_stats(&st1);
  fwt_log("adopt: exited thread left %zu live blocks; abandoned segments %zu before the heap grew, %zu after",
          live, st0.segments_abandoned, st1.segments_abandoned);

  size_t foreign = 0;
  const void *first_foreign = NULL;
  for (size_t i = 0; i < adopt_other_n; i++) {
    if (adopt_other[i].p && X.heap_contains(h, adopt_other[i].p)) {
      if (!foreign) first_foreign = adopt_other[i].p;
      foreign++;
    }
  }
  CHECKF(foreign == 0,
         "%zu of the %zu live blocks of an exited thread (first %p) are in a heap made with fw_heap_new",
         foreign, live, first_foreign);
  for (size_t i = 0; i < un; i++) CHECK(X.heap_contains(h, own[i].p));

  fw_heap_stats_t s;
  heap_stats(h, &s);
  CHECKF(s.blocks_live == un, "fw_heap_stats: blocks_live %zu, the heap allocated %zu", s.blocks_live, un);
  CHECKF(s.bytes_live == own_bytes, "fw_heap_stats: bytes_live %zu, the heap's blocks have %zu", s.bytes_live,
         own_bytes);

  const void **mine = fwt_scratch(un * sizeof *mine);
  const void **seen = fwt_scratch(2 * un * sizeof *seen);
  for (size_t i = 0; i < un; i++) mine[i] = own[i].p;
  visit_rec v = {seen, 0, 2 * un};
  X.heap_visit(h, record_visit, &v);
  CHECKF(v.count == un, "fw_heap_visit reported %zu blocks, the heap allocated %zu", v.count, un);
  qsort(mine, un, sizeof *mine, cmp_cptr);
  qsort(seen, un, sizeof *seen, cmp_cptr);
  for (size_t i = 0; i < un; i++)
    CHECKF(seen[i] == mine[i], "fw_heap_visit reported %p, not a block of the heap", seen[i]);
  fwt_scratch_free(mine, un * sizeof *mine);
  fwt_scratch_free(seen, 2 * un * sizeof *seen);

  /* Destroying the heap must leave the exited thread's blocks alone. */
  X.heap_destroy(h);
  range *rs = fwt_scratch((live ? live : 1) * sizeof *rs);
  size_t nr = 0;
  for (size_t i = 0; i < adopt_other_n; i++) {
    blk *b = &adopt_other[i];
    if (!b->p) continue;
    bcheck(b);
    CHECKF(X.usable_size(b->p) >= b->n, "usable size %zu of a %zu-byte block", X.usable_size(b->p), b->n);
    rs[nr++] = (range){(uintptr_t)b->p, (uintptr_t)b->p + b->n};
  }
  qsort(rs, nr, sizeof *rs, cmp_range);

  /* Memory handed out from now on, by the default heap or a new one, never
   * lies inside those blocks. */
  fw_heap_t *h2 = X.heap_new();
  CHECK(h2 != NULL);
  blk *fresh = fwt_scratch(adopt_other_n * sizeof *fresh);
  for (size_t i = 0; i < adopt_other_n; i++) {
    size_t n = adopt_other[i].n;
    fresh[i] = (blk){i % 2 ? X.heap_malloc(h2, n) : A.malloc(n), n, 0xf5e};
    CHECKF(fresh[i].p != NULL, "allocating %zu bytes after fw_heap_destroy", n);
    uintptr_t lo = (uintptr_t)fresh[i].p, hi = lo + X.usable_size(fresh[i].p);
    const range *o = overlap(rs, nr, lo, hi);
    CHECKF(o == NULL, "new block [%p, +%zu) overlaps the live block %p of the exited thread",
           (void *)fresh[i].p, (size_t)(hi - lo), o ? (void *)o->lo : NULL);
    bfill(&fresh[i]);
  }
  for (size_t i = 0; i < adopt_other_n; i++) {
    if (!adopt_other[i].p) continue;
    bcheck(&adopt_other[i]);
    A.free(adopt_other[i].p);
  }
  for (size_t i = 0; i < adopt_other_n; i++) {
    bcheck(&fresh[i]);
    A.free(fresh[i].p);
  }
  X.heap_destroy(h2);
  fwt_scratch_free(rs, (live ? live : 1) * sizeof *rs);
  fwt_scratch_free(fresh, adopt_other_n * sizeof *fresh);
  fwt_scratch_free(own, un * sizeof *own);
  fwt_scratch_free(adopt_other, adopt_other_n * sizeof *adopt_other);
}

/* ---- fw_heap_collect from another thread while the owner works ---------- */
static fw_heap_t *race_heap;
static atomic_int race_done;
static atomic_size_t race_ops; /* the owner's progress */
enum { RACE_STEP = 15 };

/* One call every RACE_STEP operations of the owner, so that the calls are
 * spread over its work rather than over its first moments. */
static void *race_collector(void *arg) {
  size_t calls = *(const size_t *)arg;
  for (size_t i = 0; i < calls; i++) {
    while (atomic_load(&race_ops) < i * RACE_STEP) sched_yield();
    X.heap_collect(race_heap, (i & 1) != 0);
  }
  atomic_store(&race_done, 1);
  return NULL;
}

static void *collect_once(void *heap) {
  X.heap_collect(heap, true);
  return NULL;
}

/* A third of them large: those come and go through the heap's cache of
 * freed spans and its segments' free slots, which a collect flushes and
 * purges. */
static size_t race_size(fwt_rng *r) {
  return fwt_next(r) % 3 == 0 ? fwt_range(r, 64 << 10, 512 << 10) : fwt_random_size(r, 64 << 10);
}

static void t_collect_race(void) {
  race_heap = X.heap_new();
  CHECK(race_heap != NULL);
  enum { S = 600 };
  blk *b = fwt_scratch(S * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 601);
  for (size_t i = 0; i < S; i++) {
    size_t n = race_size(&r);
    b[i] = (blk){X.heap_malloc(race_heap, n), n, 0x2ace};
    CHECK(b[i].p != NULL);
    bfill(&b[i]);
  }
  size_t calls = fwt_scaled(600);
  atomic_store(&race_done, 0);
  atomic_store(&race_ops, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, race_collector, &calls) == 0);
  size_t ops = 0;
  while (!atomic_load(&race_done)) {
    if (ops % 2000 == 1999) {
      /* Free a run and allocate it again: pages empty out and refill, which
       * is what a collect would act on. */
      size_t from = (size_t)fwt_range(&r, 0, S - 100);
      for (size_t i = from; i < from + 100; i++) {
        bcheck(&b[i]);
        X.free(b[i].p);
      }
      for (size_t i = from; i < from + 100; i++) {
        size_t n = race_size(&r);
        b[i] = (blk){X.heap_malloc(race_heap, n), n, 0x2ace};
        CHECKF(b[i].p != NULL, "fw_heap_malloc(%zu)", n);
        bfill(&b[i]);
      }
    } else {
      size_t i = (size_t)fwt_range(&r, 0, S - 1);
      bcheck(&b[i]);
      X.free(b[i].p);
      size_t n = race_size(&r);
      b[i] = (blk){(ops % 5 == 0) ? X.heap_calloc(race_heap, 1, n) : X.heap_malloc(race_heap, n), n, 0x2ace};
      CHECKF(b[i].p != NULL, "fw_heap_malloc(%zu)", n);
      bfill(&b[i]);
    }
    atomic_store(&race_ops, ++ops);
  }
  CHECK(pthread_join(t, NULL) == 0);
  fwt_log("collect_race: %zu owner operations during %zu foreign fw_heap_collect calls", ops, calls);
  for (size_t i = 0; i < S; i++) {
    bcheck(&b[i]);
    CHECKF(X.heap_contains(race_heap, b[i].p), "live block %p no longer in its heap", (void *)b[i].p);
  }
  fw_heap_stats_t s;
  heap_stats(race_heap, &s);
  CHECKF(s.blocks_live == S, "blocks_live %zu, the owner holds %d", s.blocks_live, (int)S);
  CHECKF(visit_count(race_heap) == S, "fw_heap_visit reports %zu blocks, the owner holds %d",
         visit_count(race_heap), (int)S);

  /* Whether or not the calls above overlapped the owner's work (the machine
   * may be busy), one made while the owner waits, with emptied pages to
   * give back, must leave the heap as it is. */
  for (size_t i = 0; i < S; i++) X.free(b[i].p);
  fw_heap_stats_t s0;
  heap_stats(race_heap, &s0);
  CHECK(pthread_create(&t, NULL, collect_once, race_heap) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  heap_stats(race_heap, &s);
  CHECKF(s.pages == s0.pages && s.blocks_live == s0.blocks_live && s.bytes_reserved == s0.bytes_reserved,
         "fw_heap_collect from another thread changed the heap: pages %zu -> %zu, blocks %zu -> %zu, "
         "reserved %zu -> %zu",
         s0.pages, s.pages, s0.blocks_live, s.blocks_live, s0.bytes_reserved, s.bytes_reserved);
  for (size_t i = 0; i < 100; i++) {
    b[i] = (blk){X.heap_malloc(race_heap, 100 * i + 1), 100 * i + 1, 0x2ace};
    CHECK(b[i].p != NULL);
    bfill(&b[i]);
  }
  for (size_t i = 0; i < 100; i++) {
    bcheck(&b[i]);
    X.free(b[i].p);
  }
  X.heap_destroy(race_heap);
  fwt_scratch_free(b, S * sizeof *b);
}

/* ---- every owner-only call from another thread is refused ---------------- */
enum { FN = 600 };
typedef struct foreign_job {
  fw_heap_t *h;
  blk *b;
  size_t nb;
} foreign_job;

#define CHECK_EPERM(call, what, whose)                                                  \
  do {                                                                                  \
    errno = 0;                                                                          \
    void *r_ = (call);                                                                  \
    int e_ = errno;                                                                     \
    CHECKF(r_ == NULL && e_ == EPERM, "%s on %s returned %p (errno %d)", what, whose, r_, \
           e_);                                                                         \
  } while (0)

/* Every owner-only call on h, made by a thread that does not own it, is
 * refused with the documented result: nothing allocated, nothing changed. b[0..nb)
 * are blocks of h (NULL entries skipped; two of them must be live). */
static void check_refused(fw_heap_t *h, const blk *b, size_t nb, const char *whose) {
  fw_heap_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  errno = 0;
  int rc = X.heap_stats(h, &s);
  int e = errno;
  CHECKF(rc == -1 && e == EPERM, "fw_heap_stats on %s returned %d (errno %d)", whose, rc, e);
  const blk *live[2] = {NULL, NULL};
  for (size_t i = 0; i < nb; i++) {
    if (!b[i].p) continue;
    CHECKF(!X.heap_contains(h, b[i].p), "fw_heap_contains on %s: true for %p", whose, (void *)b[i].p);
    if (!live[0]) live[0] = &b[i];
    else if (!live[1]) live[1] = &b[i];
  }
  CHECK(live[1] != NULL);
  size_t visited = visit_count(h);
  CHECKF(visited == 0, "fw_heap_visit on %s reported %zu blocks", whose, visited);
  CHECK_EPERM(X.heap_malloc(h, 100), "fw_heap_malloc(100)", whose);
  CHECK_EPERM(X.heap_malloc(h, 300000), "fw_heap_malloc(300000)", whose);
  CHECK_EPERM(X.heap_calloc(h, 10, 10), "fw_heap_calloc(10, 10)", whose);
  CHECK_EPERM(X.heap_malloc_aligned(h, 100, 64), "fw_heap_malloc_aligned(100, 64)", whose);
  CHECK_EPERM(X.heap_realloc(h, NULL, 100), "fw_heap_realloc(NULL, 100)", whose);
  CHECK_EPERM(X.heap_realloc(h, live[0]->p, 3 * live[0]->n + 5000), "fw_heap_realloc of a block, larger", whose);
  CHECK_EPERM(X.heap_realloc(h, live[1]->p, 1), "fw_heap_realloc of a block, smaller", whose);
  X.heap_collect(h, false);
  X.heap_collect(h, true);
  X.heap_delete(h);
  X.heap_destroy(h);
}

static void *foreign_refused(void *arg) {
  foreign_job *j = arg;
  fw_heap_t *h = j->h;
  check_refused(h, j->b, j->nb, "another thread's heap");
  /* fw_heap_usable_size is for any thread. */
  for (size_t i = 0; i < j->nb; i++) CHECK(X.heap_usable_size(h, j->b[i].p) >= j->b[i].n);
  return NULL;
}

/* fw_free and fw_realloc of the heap's blocks are for any thread. */
static void *foreign_allowed(void *arg) {
  foreign_job *j = arg;
  for (size_t i = 0; i < j->nb; i++) {
    if (i % 10 != 4) continue;
    bcheck(&j->b[i]);
    A.free(j->b[i].p);
    j->b[i].p = NULL;
  }
  blk *m = &j->b[5];
  size_t grow = X.usable_size(m->p) * 2 + 4096;
  char *q = A.realloc(m->p, grow);
  CHECKF(q != NULL, "realloc of another thread's heap block to %zu", grow);
  CHECK_PATTERN(q, m->n, bseed(m));
  A.free(q);
  m->p = NULL;
  return NULL;
}

static void t_foreign_calls(void) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  blk *b = fwt_scratch(FN * sizeof *b);
  fwt_rng r;
  fwt_rng_init(&r, 701);
  for (size_t i = 0; i < FN; i++) {
    size_t n = i == 0 ? (size_t)700000 : fwt_random_size(&r, 1 << 20);
    b[i] = (blk){X.heap_malloc(h, n), n, 0xf0e};
    CHECK(b[i].p != NULL);
    bfill(&b[i]);
  }
  /* Free pages and partly used ones: a collect would have work to do. */
  for (size_t i = 100; i < 400; i++) X.free(b[i].p);
  for (size_t i = 37; i < 100; i += 5) X.free(b[i].p);
  size_t nb = 0;
  for (size_t i = 0; i < FN; i++)
    if ((i < 100 && (i < 37 || (i - 37) % 5 != 0)) || i >= 400) b[nb++] = b[i];
  fw_heap_stats_t s0, s1;
  heap_stats(h, &s0);
  CHECK(s0.blocks_live == nb);
  foreign_job j = {h, b, nb};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, foreign_refused, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);

  heap_stats(h, &s1);
  CHECKF(s1.blocks_live == s0.blocks_live && s1.bytes_live == s0.bytes_live && s1.pages == s0.pages &&
             s1.bytes_reserved == s0.bytes_reserved,
         "refused calls changed the heap: blocks %zu -> %zu, bytes %zu -> %zu, pages %zu -> %zu, reserved %zu -> %zu",
         s0.blocks_live, s1.blocks_live, s0.bytes_live, s1.bytes_live, s0.pages, s1.pages, s0.bytes_reserved,
         s1.bytes_reserved);
  for (size_t i = 0; i < nb; i++) {
    bcheck(&b[i]);
    CHECK(X.heap_contains(h, b[i].p));
  }
  CHECK(visit_count(h) == nb);
  void *p = X.heap_malloc(h, 200);
  CHECKF(p != NULL && X.heap_contains(h, p), "the owner cannot allocate from its heap any more");
  X.free(p);

  CHECK(pthread_create(&t, NULL, foreign_allowed, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  X.heap_collect(h, false);
  size_t left = 0;
  for (size_t i = 0; i < nb; i++) left += b[i].p != NULL;
  heap_stats(h, &s1);
  CHECKF(s1.blocks_live == left, "after frees from another thread and a collect: blocks_live %zu, want %zu",
         s1.blocks_live, left);
  for (size_t i = 0; i < nb; i++)
    if (b[i].p) bcheck(&b[i]);
  X.heap_destroy(h);
  fwt_scratch_free(b, FN * sizeof *b);
}

/* ---- the misuse report, and cautious mode, in a child process ------------- */
static fw_heap_t *child_heap;
static void *child_collector(void *arg) {
  (void)arg;
  X.heap_collect(child_heap, false);
  return NULL;
}

/* Run with FREEWAY_CAUTIOUS set by the parent: 0 must carry on, 1 abort. */
static void t_child(void) {
  long cautious = X.option_get("cautious");
  child_heap = X.heap_new();
  if (!child_heap) _exit(5);
  blk b[64];
  for (size_t i = 0; i < 64; i++) {
    b[i] = (blk){X.heap_malloc(child_heap, 24 + i * 100), 24 + i * 100, 0xc1d};
    if (!b[i].p) _exit(5);
    bfill(&b[i]);
  }
  for (size_t i = 0; i < 64; i += 2) X.free(b[i].p);
  fw_heap_stats_t s0, s1;
  heap_stats(child_heap, &s0);
  fprintf(stderr, "fwt-heap: %p\n", (void *)child_heap);
  pthread_t t;
  if (pthread_create(&t, NULL, child_collector, NULL) != 0) _exit(6);
  pthread_join(t, NULL);
  if (cautious) _exit(4);
  heap_stats(child_heap, &s1);
  CHECKF(s1.pages == s0.pages && s1.blocks_live == s0.blocks_live,
         "a refused fw_heap_collect changed the heap: pages %zu -> %zu, blocks %zu -> %zu", s0.pages, s1.pages,
         s0.blocks_live, s1.blocks_live);
  for (size_t i = 1; i < 64; i += 2) bcheck(&b[i]);
  X.heap_destroy(child_heap);
}

/* Runs the child section with FREEWAY_CAUTIOUS=cautious; collects its
 * stderr into out. Returns the wait status. */
static int run_child(const char *cautious, char *out, size_t cap) {
  char var[32];
  snprintf(var, sizeof var, "FREEWAY_CAUTIOUS=%s", cautious);
  const char *const set[] = {var, NULL};
  return fwt_child_exec("_child", set, out, cap);
}

/* The heap address the child printed. */
static uintptr_t child_heap_address(const char *out) {
  const char *h = strstr(out, "fwt-heap: ");
  CHECKF(h != NULL, "the child did not get as far as the misuse; its stderr: %s", out);
  return (uintptr_t)strtoull(h + 10, NULL, 16);
}

/* A line of freeway's (starting with prefix) that names fw_heap_collect and
 * the heap address, anywhere in the text. */
static bool reported(const char *out, const char *prefix, uintptr_t heap) {
  size_t plen = strlen(prefix);
  for (const char *line = out; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    size_t l = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, line, l);
    buf[l] = 0;
    if (strncmp(buf, prefix, plen) == 0 && strstr(buf, "fw_heap_collect")) {
      for (const char *x = strstr(buf, "0x"); x; x = strstr(x + 2, "0x"))
        if ((uintptr_t)strtoull(x, NULL, 16) == heap) return true;
    }
    line += len;
    if (*line) line++;
  }
  return false;
}

static void t_foreign_report(void) {
  char out[8192];
  int st = run_child("0", out, sizeof out);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child ended with status %#x; its stderr: %s", st, out);
  uintptr_t heap = child_heap_address(out);
  CHECKF(reported(out, "freeway:", heap),
         "no report of the refused fw_heap_collect on heap %#lx on stderr: %s", (unsigned long)heap, out);
  fwt_log("foreign_report: %.300s", out);
}

static void t_cautious(void) {
  char out[8192];
  int st = run_child("1", out, sizeof out);
  CHECKF(!(WIFEXITED(st) && WEXITSTATUS(st) == 4),
         "fw_heap_collect from a thread that does not own the heap returned in cautious mode; stderr: %s", out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child ended with status %#x; its stderr: %s", st, out);
  uintptr_t heap = child_heap_address(out);
  CHECKF(reported(out, "freeway: cautious mode:", heap),
         "the abort did not report the misuse (fw_heap_collect, heap %#lx): %s", (unsigned long)heap, out);
  fwt_log("cautious: %.300s", out);
}

/* ---- a heap whose thread has exited ----------------------------------------- */
enum { DN = 1500 };
static fw_heap_t *dead_heap;
static blk dead_b[DN];

static void *dead_thread(void *arg) {
  (void)arg;
  dead_heap = X.heap_new();
  CHECK(dead_heap != NULL);
  fwt_rng r;
  fwt_rng_init(&r, 801);
  for (size_t i = 0; i < DN; i++) {
    size_t n = fwt_random_size(&r, 2 << 20);
    char *p = i % 7 == 0   ? X.heap_calloc(dead_heap, 1, n)
              : i % 7 == 1 ? X.heap_malloc_aligned(dead_heap, n, 4096)
                           : X.heap_malloc(dead_heap, n);
    CHECKF(p != NULL, "allocating %zu bytes from a heap", n);
    dead_b[i] = (blk){p, n, 0xdead};
    bfill(&dead_b[i]);
  }
  for (size_t i = 0; i < DN; i += 3) {
    X.free(dead_b[i].p);
    dead_b[i].p = NULL;
  }
  return NULL; /* without fw_heap_delete or fw_heap_destroy */
}

static void *dead_free_thread(void *arg) {
  (void)arg;
  for (size_t i = 0; i < DN; i++) {
    if (i % 2 == 0 || !dead_b[i].p) continue; /* the even ones are the main thread's */
    bcheck(&dead_b[i]);
    A.free(dead_b[i].p);
    dead_b[i].p = NULL;
  }
  return NULL;
}

static void t_dead_heap(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, dead_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fw_heap_t *h = dead_heap;
  size_t live = 0;
  for (size_t i = 0; i < DN; i++) live += dead_b[i].p != NULL;

  check_refused(h, dead_b, DN, "the heap of an exited thread");

  /* The blocks outlive their heap: intact, and freeable from any thread. */
  for (size_t i = 0; i < DN; i++) {
    if (!dead_b[i].p) continue;
    bcheck(&dead_b[i]);
    CHECK(X.usable_size(dead_b[i].p) >= dead_b[i].n);
  }
  CHECK(pthread_create(&t, NULL, dead_free_thread, NULL) == 0);
  for (size_t i = 0; i < DN; i += 2) {
    if (!dead_b[i].p) continue;
    bcheck(&dead_b[i]);
    A.free(dead_b[i].p);
    dead_b[i].p = NULL;
  }
  CHECK(pthread_join(t, NULL) == 0);
  fwt_log("dead_heap: %zu blocks of the exited thread's heap checked and freed", live);
  /* And the allocator carries on. */
  for (int k = 0; k < 1000; k++) {
    size_t n = 16 + (size_t)k * 97;
    char *p = A.malloc(n);
    CHECK(p != NULL);
    memset(p, 0x5a, n);
    A.free(p);
  }
}

static const fwt_section sections[] = {
  {"adopt", t_adopt},
  {"collect_race", t_collect_race},
  {"foreign_calls", t_foreign_calls},
  {"foreign_report", t_foreign_report},
  {"cautious", t_cautious},
  {"dead_heap", t_dead_heap},
  {"_child", t_child},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
