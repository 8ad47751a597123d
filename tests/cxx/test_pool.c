/* Object pools (src/pool.c) through the public API: arguments, contents,
 * alignment, zeroing, statistics, many threads with cross-thread frees,
 * thread exit, destruction with objects cached in live threads, fork. */
#define _GNU_SOURCE
#include "freeway.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, __func__, \
              #cond);                                                                 \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

static fw_pool_stats_t stats_of(const fw_pool_t *pool) {
  fw_pool_stats_t s;
  memset(&s, 0xff, sizeof s);
  s.size = sizeof s;
  CHECK(fw_pool_stats(pool, &s) == 0);
  return s;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

/* Every pointer distinct and at least size bytes from the next one. */
static void check_disjoint(void **ptrs, size_t n, size_t size) {
  void **sorted = malloc(n * sizeof *sorted);
  CHECK(sorted != NULL);
  memcpy(sorted, ptrs, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_ptr);
  for (size_t i = 1; i < n; i++)
    CHECK((uintptr_t)sorted[i] - (uintptr_t)sorted[i - 1] >= size);
  free(sorted);
}

static void fill(void *p, size_t size, uint64_t tag) {
  unsigned char *b = p;
  for (size_t i = 0; i < size; i++)
    b[i] = (unsigned char)(tag * 131 + i * 7 + 1);
}

static int filled(const void *p, size_t size, uint64_t tag) {
  const unsigned char *b = p;
  for (size_t i = 0; i < size; i++)
    if (b[i] != (unsigned char)(tag * 131 + i * 7 + 1))
      return 0;
  return 1;
}

static void test_bad_arguments(void) {
  fw_pool_options_t opt;
  errno = 0;
  CHECK(fw_pool_new(0, 0, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new(SIZE_MAX, 0, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new(SIZE_MAX / 2, 8, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new((size_t)1 << 30, 8, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new(64, 3, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new(64, 24, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(fw_pool_new(64, (size_t)1 << 30, NULL) == NULL && errno == EINVAL);

  memset(&opt, 0, sizeof opt); /* size left 0 */
  errno = 0;
  CHECK(fw_pool_new(64, 0, &opt) == NULL && errno == EINVAL);
  opt.size = sizeof opt;
  opt.shards = 1u << 20;
  errno = 0;
  CHECK(fw_pool_new(64, 0, &opt) == NULL && errno == EINVAL);
  opt.shards = 0;
  opt.cache_limit = 1u << 30;
  errno = 0;
  CHECK(fw_pool_new(64, 0, &opt) == NULL && errno == EINVAL);

  fw_pool_stats_t s;
  s.size = sizeof s;
  errno = 0;
  CHECK(fw_pool_stats(NULL, &s) == -1 && errno == EINVAL);

  fw_pool_t *pool = fw_pool_new(1, 1, NULL);
  CHECK(pool != NULL);
  fw_pool_free(pool, NULL); /* a no-op */
  errno = 0;
  CHECK(fw_pool_stats(pool, NULL) == -1 && errno == EINVAL);
  s.size = 0;
  errno = 0;
  CHECK(fw_pool_stats(pool, &s) == -1 && errno == EINVAL);
  s = stats_of(pool);
  CHECK(s.objects_live == 0 && s.objects_peak == 0);
  CHECK(s.object_size >= 1);
  fw_pool_destroy(pool);
  fw_pool_destroy(NULL); /* a no-op */

  /* A caller with an older, shorter stats struct gets only its prefix. */
  pool = fw_pool_new(16, 0, NULL);
  CHECK(pool != NULL);
  void *p = fw_pool_alloc(pool);
  CHECK(p != NULL);
  size_t words[4] = {offsetof(fw_pool_stats_t, objects_live) + sizeof(size_t), 111, 222, 333};
  CHECK(fw_pool_stats(pool, (fw_pool_stats_t *)words) == 0);
  CHECK(words[0] == offsetof(fw_pool_stats_t, objects_live) + sizeof(size_t));
  CHECK(words[1] == 16 && words[2] == 1 && words[3] == 333);
  fw_pool_free(pool, p);
  fw_pool_destroy(pool);
}

static void test_contents_and_stats(void) {
  enum { N = 20000 };
  fw_pool_t *pool = fw_pool_new(48, 0, NULL);
  CHECK(pool != NULL);
  fw_pool_stats_t s = stats_of(pool);
  CHECK(s.object_size >= 48 && s.object_size % 8 == 0);
  CHECK(s.objects_live == 0 && s.slabs == 0 && s.bytes_reserved == 0);

  void **ptrs = malloc(N * sizeof *ptrs);
  CHECK(ptrs != NULL);
  for (size_t i = 0; i < N; i++) {
    ptrs[i] = fw_pool_alloc(pool);
    CHECK(ptrs[i] != NULL);
    CHECK((uintptr_t)ptrs[i] % 16 == 0);
    fill(ptrs[i], 48, i);
  }
  check_disjoint(ptrs, N, 48);
  for (size_t i = 0; i < N; i++)
    CHECK(filled(ptrs[i], 48, i));
  s = stats_of(pool);
  CHECK(s.objects_live == N);
  CHECK(s.objects_peak == N);
  CHECK(s.slabs > 0);
  CHECK(s.bytes_reserved >= s.slabs * s.object_size);
  CHECK(s.bytes_reserved >= (size_t)N * s.object_size);

  /* Free the odd ones, reallocate them, and nothing else may change. */
  for (size_t i = 1; i < N; i += 2)
    fw_pool_free(pool, ptrs[i]);
  s = stats_of(pool);
  CHECK(s.objects_live == N / 2 && s.objects_peak == N);
  size_t slabs = s.slabs;
  for (size_t i = 1; i < N; i += 2) {
    ptrs[i] = fw_pool_alloc(pool);
    CHECK(ptrs[i] != NULL);
    fill(ptrs[i], 48, i + N);
  }
  check_disjoint(ptrs, N, 48);
  for (size_t i = 0; i < N; i++)
    CHECK(filled(ptrs[i], 48, i % 2 ? i + N : i));
  s = stats_of(pool);
  CHECK(s.objects_live == N && s.objects_peak == N);
  CHECK(s.slabs == slabs); /* freed objects were reused */

  /* Peak is exact for one thread: push it a little higher, then drop. */
  void *extra[10];
  for (int i = 0; i < 10; i++)
    CHECK((extra[i] = fw_pool_alloc(pool)) != NULL);
  for (int i = 0; i < 10; i++)
    fw_pool_free(pool, extra[i]);
  for (size_t i = 0; i < N; i++)
    fw_pool_free(pool, ptrs[i]);
  s = stats_of(pool);
  CHECK(s.objects_live == 0);
  CHECK(s.objects_peak == N + 10);

  /* Allocation order after frees is LIFO within a thread: the last freed
   * object comes back first. */
  void *a = fw_pool_alloc(pool), *b = fw_pool_alloc(pool);
  fw_pool_free(pool, a);
  fw_pool_free(pool, b);
  CHECK(fw_pool_alloc(pool) == b);
  CHECK(fw_pool_alloc(pool) == a);
  fw_pool_free(pool, a);
  fw_pool_free(pool, b);
  free(ptrs);
  fw_pool_destroy(pool);
}

static void test_alignment(void) {
  enum { N = 300 };
  void *ptrs[N];
  for (size_t align = 1; align <= 4096; align *= 2) {
    size_t sizes[] = {1, align > 1 ? align - 1 : 1, align, align + 1, align * 3 / 2 + 1, 100};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t size = sizes[k];
      fw_pool_t *pool = fw_pool_new(size, align, NULL);
      CHECK(pool != NULL);
      fw_pool_stats_t s = stats_of(pool);
      CHECK(s.object_size >= size && s.object_size % align == 0);
      for (size_t i = 0; i < N; i++) {
        ptrs[i] = fw_pool_alloc(pool);
        CHECK(ptrs[i] != NULL);
        CHECK((uintptr_t)ptrs[i] % align == 0);
        fill(ptrs[i], size, i + align);
      }
      check_disjoint(ptrs, N, size);
      for (size_t i = 0; i < N; i++) {
        CHECK(filled(ptrs[i], size, i + align));
        fw_pool_free(pool, ptrs[i]);
      }
      CHECK(stats_of(pool).objects_live == 0);
      fw_pool_destroy(pool);
    }
  }
  /* The largest accepted objects and alignments. */
  fw_pool_t *pool = fw_pool_new((size_t)256 << 10, (size_t)64 << 10, NULL);
  CHECK(pool != NULL);
  for (int i = 0; i < 8; i++) {
    ptrs[i] = fw_pool_alloc(pool);
    CHECK(ptrs[i] != NULL && (uintptr_t)ptrs[i] % ((size_t)64 << 10) == 0);
    memset(ptrs[i], i, (size_t)256 << 10);
  }
  check_disjoint(ptrs, 8, (size_t)256 << 10);
  for (int i = 0; i < 8; i++)
    fw_pool_free(pool, ptrs[i]);
  fw_pool_destroy(pool);
}

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0)
      return 0;
  return 1;
}

static void *zero_worker(void *arg) {
  fw_pool_t *pool = arg;
  for (int round = 0; round < 50; round++) {
    void *ptrs[100];
    for (int i = 0; i < 100; i++) {
      ptrs[i] = fw_pool_alloc(pool);
      CHECK(ptrs[i] != NULL && all_zero(ptrs[i], 200));
      memset(ptrs[i], 0xAB, 200);
    }
    for (int i = 0; i < 100; i++)
      fw_pool_free(pool, ptrs[i]);
  }
  return NULL;
}

static void test_zero(void) {
  fw_pool_options_t opt = {sizeof opt, 0, 0, true};
  fw_pool_t *pool = fw_pool_new(200, 0, &opt);
  CHECK(pool != NULL);
  zero_worker(pool);
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    CHECK(pthread_create(&th[i], NULL, zero_worker, pool) == 0);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  /* Objects dirtied and freed by the threads come back zeroed here. */
  zero_worker(pool);
  CHECK(stats_of(pool).objects_live == 0);
  fw_pool_destroy(pool);

  /* Without the option, a recycled object keeps what was written to it
   * (the first word holds the free-list link). */
  pool = fw_pool_new(64, 0, NULL);
  CHECK(pool != NULL);
  unsigned char *p = fw_pool_alloc(pool);
  memset(p, 0xCD, 64);
  fw_pool_free(pool, p);
  CHECK(fw_pool_alloc(pool) == p);
  CHECK(p[63] == 0xCD);
  fw_pool_free(pool, p);
  fw_pool_destroy(pool);
}

/* ---- many threads, objects freed by other threads than their allocator ---- */
#define XT_THREADS 8
#define XT_OBJECTS 60000
#define XT_QUEUE 4096

typedef struct {
  pthread_mutex_t lock;
  void *items[XT_QUEUE];
  size_t head, count;
  int closed;
} queue_t;

typedef struct {
  uint64_t owner, seq, check;
  char payload[40];
} xobj_t;

static fw_pool_t *xt_pool;
static queue_t xt_queues[XT_THREADS];

static int queue_put(queue_t *q, void *p) {
  pthread_mutex_lock(&q->lock);
  int ok = q->count < XT_QUEUE;
  if (ok) {
    q->items[(q->head + q->count) % XT_QUEUE] = p;
    q->count++;
  }
  pthread_mutex_unlock(&q->lock);
  return ok;
}

static size_t queue_take(queue_t *q, void **out, size_t max) {
  pthread_mutex_lock(&q->lock);
  size_t n = 0;
  while (n < max && q->count > 0) {
    out[n++] = q->items[q->head];
    q->head = (q->head + 1) % XT_QUEUE;
    q->count--;
  }
  pthread_mutex_unlock(&q->lock);
  return n;
}

static void xobj_verify_free(void *p) {
  xobj_t *o = p;
  CHECK(o->owner < XT_THREADS);
  CHECK(o->check == ((o->owner * 1000003u) ^ o->seq));
  CHECK(filled(o->payload, sizeof o->payload, o->seq));
  fw_pool_free(xt_pool, o);
}

static void *xt_worker(void *arg) {
  uint64_t self = (uint64_t)(uintptr_t)arg;
  queue_t *next = &xt_queues[(self + 1) % XT_THREADS];
  queue_t *mine = &xt_queues[self];
  void *got[64];
  void *local[32];
  size_t nlocal = 0;
  for (uint64_t seq = 0; seq < XT_OBJECTS; seq++) {
    xobj_t *o = fw_pool_alloc(xt_pool);
    CHECK(o != NULL);
    o->owner = self;
    o->seq = seq;
    o->check = (self * 1000003u) ^ seq;
    fill(o->payload, sizeof o->payload, seq);
    if (seq % 3 == 0) { /* some objects are freed by their own thread */
      local[nlocal++] = o;
      if (nlocal == 32) {
        for (size_t i = 0; i < nlocal; i++)
          xobj_verify_free(local[i]);
        nlocal = 0;
      }
    } else {
      if (!queue_put(next, o)) { /* the consumer is slow or finished */
        size_t n = queue_take(mine, got, 64);
        for (size_t i = 0; i < n; i++)
          xobj_verify_free(got[i]);
        if (!queue_put(next, o))
          xobj_verify_free(o);
      }
    }
    if (seq % 16 == 0) {
      size_t n = queue_take(mine, got, 64);
      for (size_t i = 0; i < n; i++)
        xobj_verify_free(got[i]);
    }
  }
  for (size_t i = 0; i < nlocal; i++)
    xobj_verify_free(local[i]);
  return NULL;
}

static void test_cross_thread(void) {
  xt_pool = fw_pool_new(sizeof(xobj_t), 0, NULL);
  CHECK(xt_pool != NULL);
  for (int i = 0; i < XT_THREADS; i++) {
    pthread_mutex_init(&xt_queues[i].lock, NULL);
    xt_queues[i].head = xt_queues[i].count = 0;
  }
  pthread_t th[XT_THREADS];
  for (uintptr_t i = 0; i < XT_THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, xt_worker, (void *)i) == 0);
  for (int i = 0; i < XT_THREADS; i++)
    pthread_join(th[i], NULL);
  /* Whatever is still queued is freed here, by yet another thread. */
  size_t left = 0;
  for (int i = 0; i < XT_THREADS; i++) {
    void *got[64];
    size_t n;
    while ((n = queue_take(&xt_queues[i], got, 64)) > 0) {
      left += n;
      for (size_t k = 0; k < n; k++)
        xobj_verify_free(got[k]);
    }
  }
  fw_pool_stats_t s = stats_of(xt_pool);
  CHECK(s.objects_live == 0);
  CHECK(s.objects_peak >= left);
  CHECK(s.objects_peak <= (size_t)XT_THREADS * XT_OBJECTS);
  /* Memory is recycled across threads rather than grown per object. */
  CHECK(s.bytes_reserved < (size_t)XT_THREADS * XT_OBJECTS * sizeof(xobj_t) / 4);
  fw_pool_destroy(xt_pool);
}

/* ---- exact statistics with quiescent threads, and thread exit ----------- */
typedef struct {
  fw_pool_t *pool;
  pthread_barrier_t *barrier;
  size_t allocate, keep;
  void **kept;
} hold_arg_t;

static void *hold_worker(void *arg) {
  hold_arg_t *a = arg;
  void **ptrs = malloc(a->allocate * sizeof *ptrs);
  CHECK(ptrs != NULL);
  for (size_t i = 0; i < a->allocate; i++)
    CHECK((ptrs[i] = fw_pool_alloc(a->pool)) != NULL);
  pthread_barrier_wait(a->barrier); /* every thread holds all of its objects */
  pthread_barrier_wait(a->barrier); /* main has looked */
  for (size_t i = a->keep; i < a->allocate; i++)
    fw_pool_free(a->pool, ptrs[i]);
  if (a->keep > 0)
    memcpy(a->kept, ptrs, a->keep * sizeof *ptrs);
  free(ptrs);
  pthread_barrier_wait(a->barrier); /* main reads stats while we hold */
  pthread_barrier_wait(a->barrier);
  return NULL;
}

static void test_stats_threads_and_exit(void) {
  enum { T = 4, ALLOC = 3000 };
  fw_pool_options_t opt = {sizeof opt, 2, 1000, false};
  fw_pool_t *pool = fw_pool_new(64, 0, &opt);
  CHECK(pool != NULL);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, T + 1);
  hold_arg_t args[T];
  pthread_t th[T];
  size_t kept_total = 0;
  for (int i = 0; i < T; i++) {
    args[i].pool = pool;
    args[i].barrier = &barrier;
    args[i].allocate = ALLOC;
    args[i].keep = (size_t)(i + 1) * 100;
    args[i].kept = malloc(args[i].keep * sizeof(void *));
    kept_total += args[i].keep;
    CHECK(pthread_create(&th[i], NULL, hold_worker, &args[i]) == 0);
  }
  pthread_barrier_wait(&barrier);
  CHECK(stats_of(pool).objects_live == (size_t)T * ALLOC);
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  /* Every thread is parked with objects in its cache: the count is exact. */
  fw_pool_stats_t s = stats_of(pool);
  CHECK(s.objects_live == kept_total);
  CHECK(s.objects_peak >= kept_total);
  pthread_barrier_wait(&barrier);
  for (int i = 0; i < T; i++)
    pthread_join(th[i], NULL);
  /* The threads are gone; their counts were folded into the pool's. */
  s = stats_of(pool);
  CHECK(s.objects_live == kept_total);
  for (int i = 0; i < T; i++) {
    for (size_t k = 0; k < args[i].keep; k++)
      fw_pool_free(pool, args[i].kept[k]);
    free(args[i].kept);
  }
  s = stats_of(pool);
  CHECK(s.objects_live == 0);
  pthread_barrier_destroy(&barrier);
  fw_pool_destroy(pool);
}

/* How many objects a slab of such a pool holds: allocate from a fresh pool
 * until it takes its second slab. */
static size_t objects_per_slab(size_t size, const fw_pool_options_t *opt) {
  fw_pool_t *pool = fw_pool_new(size, 0, opt);
  CHECK(pool != NULL);
  size_t n = 0;
  while (stats_of(pool).slabs < 2) {
    CHECK(fw_pool_alloc(pool) != NULL);
    n++;
  }
  fw_pool_destroy(pool);
  return n - 1;
}

/* Threads hold 3000 objects each at once, free them all (filling their
 * caches) and exit. Every object of every slab must then be obtainable by the
 * main thread before the pool grows: none may stay in a dead thread's cache. */
static void test_thread_exit_flush(void) {
  enum { T = 4, ALLOC = 3000 };
  fw_pool_options_t opt = {sizeof opt, 4, 1000, false};
  size_t per_slab = objects_per_slab(64, &opt);
  CHECK(per_slab >= 100);
  fw_pool_t *pool = fw_pool_new(64, 0, &opt);
  CHECK(pool != NULL);
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, T + 1);
  hold_arg_t args[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    args[i].pool = pool;
    args[i].barrier = &barrier;
    args[i].allocate = ALLOC;
    args[i].keep = 0;
    args[i].kept = NULL;
    CHECK(pthread_create(&th[i], NULL, hold_worker, &args[i]) == 0);
  }
  for (int k = 0; k < 4; k++)
    pthread_barrier_wait(&barrier);
  for (int i = 0; i < T; i++)
    pthread_join(th[i], NULL);
  fw_pool_stats_t s = stats_of(pool);
  CHECK(s.objects_live == 0);
  size_t slabs = s.slabs;
  CHECK(slabs * per_slab >= (size_t)T * ALLOC);
  size_t total = slabs * per_slab;
  void **ptrs = malloc((total + 1) * sizeof *ptrs);
  CHECK(ptrs != NULL);
  for (size_t i = 0; i < total; i++)
    CHECK((ptrs[i] = fw_pool_alloc(pool)) != NULL);
  s = stats_of(pool);
  CHECK(s.objects_live == total);
  CHECK(s.slabs == slabs);
  check_disjoint(ptrs, total, 64);
  CHECK((ptrs[total] = fw_pool_alloc(pool)) != NULL);
  CHECK(stats_of(pool).slabs == slabs + 1);
  for (size_t i = 0; i <= total; i++)
    fw_pool_free(pool, ptrs[i]);
  free(ptrs);
  pthread_barrier_destroy(&barrier);
  fw_pool_destroy(pool);
}

/* ---- destroy while other threads still cache objects of the pool -------- */
#define DT_THREADS 4
#define DT_OBJECTS 500
static fw_pool_t *dt_old, *dt_new;
static pthread_barrier_t dt_barrier;
static void *dt_ptrs[DT_THREADS][DT_OBJECTS];

static void *dt_worker(void *arg) {
  uintptr_t self = (uintptr_t)arg;
  void *tmp[200];
  for (int i = 0; i < 200; i++)
    CHECK((tmp[i] = fw_pool_alloc(dt_old)) != NULL);
  for (int i = 0; i < 200; i++)
    fw_pool_free(dt_old, tmp[i]); /* now cached by this thread */
  pthread_barrier_wait(&dt_barrier); /* 1: main destroys dt_old, creates dt_new */
  pthread_barrier_wait(&dt_barrier); /* 2 */
  if (self % 2 == 0) { /* half the threads use the new pool, half never do */
    for (int i = 0; i < DT_OBJECTS; i++) {
      CHECK((dt_ptrs[self][i] = fw_pool_alloc(dt_new)) != NULL);
      fill(dt_ptrs[self][i], 96, self * DT_OBJECTS + (size_t)i);
    }
  }
  pthread_barrier_wait(&dt_barrier); /* 3: main checks */
  pthread_barrier_wait(&dt_barrier); /* 4 */
  if (self % 2 == 0)
    for (int i = 0; i < DT_OBJECTS; i++) {
      CHECK(filled(dt_ptrs[self][i], 96, self * DT_OBJECTS + (size_t)i));
      fw_pool_free(dt_new, dt_ptrs[self][i]);
    }
  return NULL; /* exit: caches of dt_old must be ignored, dt_new's flushed */
}

static void test_destroy_with_cached_objects(void) {
  dt_old = fw_pool_new(96, 0, NULL);
  CHECK(dt_old != NULL);
  pthread_barrier_init(&dt_barrier, NULL, DT_THREADS + 1);
  pthread_t th[DT_THREADS];
  for (uintptr_t i = 0; i < DT_THREADS; i++)
    CHECK(pthread_create(&th[i], NULL, dt_worker, (void *)i) == 0);
  pthread_barrier_wait(&dt_barrier); /* 1 */
  fw_pool_destroy(dt_old);
  dt_new = fw_pool_new(96, 0, NULL); /* most likely reuses the id */
  CHECK(dt_new != NULL);
  fw_pool_stats_t s = stats_of(dt_new);
  CHECK(s.objects_live == 0 && s.slabs == 0);
  pthread_barrier_wait(&dt_barrier); /* 2 */
  pthread_barrier_wait(&dt_barrier); /* 3 */
  size_t users = (DT_THREADS + 1) / 2;
  s = stats_of(dt_new);
  CHECK(s.objects_live == users * DT_OBJECTS);
  void *all[DT_THREADS * DT_OBJECTS];
  size_t n = 0;
  for (int t = 0; t < DT_THREADS; t += 2)
    for (int i = 0; i < DT_OBJECTS; i++)
      all[n++] = dt_ptrs[t][i];
  check_disjoint(all, n, 96);
  pthread_barrier_wait(&dt_barrier); /* 4 */
  for (int i = 0; i < DT_THREADS; i++)
    pthread_join(th[i], NULL);
  s = stats_of(dt_new);
  CHECK(s.objects_live == 0);
  /* Everything handed out now is a genuine, disjoint object of dt_new. */
  enum { M = 3000 };
  void **ptrs = malloc(M * sizeof *ptrs);
  CHECK(ptrs != NULL);
  for (size_t i = 0; i < M; i++) {
    CHECK((ptrs[i] = fw_pool_alloc(dt_new)) != NULL);
    fill(ptrs[i], 96, i);
  }
  check_disjoint(ptrs, M, 96);
  for (size_t i = 0; i < M; i++) {
    CHECK(filled(ptrs[i], 96, i));
    fw_pool_free(dt_new, ptrs[i]);
  }
  free(ptrs);
  pthread_barrier_destroy(&dt_barrier);
  fw_pool_destroy(dt_new);
}

/* Many pools at once, ids recycled, each thread touching all of them. */
static fw_pool_t *mp_pools[40];
static void *mp_worker(void *arg) {
  (void)arg;
  for (int round = 0; round < 20; round++)
    for (int k = 0; k < 40; k++) {
      size_t size = 8 + (size_t)k * 8;
      void *p[10];
      for (int i = 0; i < 10; i++) {
        CHECK((p[i] = fw_pool_alloc(mp_pools[k])) != NULL);
        fill(p[i], size, (size_t)k * 10 + (size_t)i);
      }
      for (int i = 0; i < 10; i++) {
        CHECK(filled(p[i], size, (size_t)k * 10 + (size_t)i));
        fw_pool_free(mp_pools[k], p[i]);
      }
    }
  return NULL;
}

static void test_many_pools(void) {
  for (int cycle = 0; cycle < 3; cycle++) {
    for (int k = 0; k < 40; k++)
      CHECK((mp_pools[k] = fw_pool_new(8 + (size_t)k * 8, 0, NULL)) != NULL);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
      CHECK(pthread_create(&th[i], NULL, mp_worker, NULL) == 0);
    mp_worker(NULL);
    for (int i = 0; i < 3; i++)
      pthread_join(th[i], NULL);
    for (int k = 0; k < 40; k++) {
      CHECK(stats_of(mp_pools[k]).objects_live == 0);
      if (k % 3 == cycle % 3) /* destroy some in the middle, in varying order */
        fw_pool_destroy(mp_pools[k]);
    }
    for (int k = 0; k < 40; k++)
      if (k % 3 != cycle % 3)
        fw_pool_destroy(mp_pools[k]);
  }
}

/* Pool calls from another thread-specific-data destructor, which may run
 * before or after the pool's own exit flush (the order is unspecified). */
static fw_pool_t *td_pool;
static pthread_key_t td_key;
static void *td_kept[8];

static pthread_barrier_t td_barrier;

/* The threads' destructors run together (glibc runs them in key order, so
 * after the pool's flush: every call takes the shards directly), and take
 * batches from and give them back to the same shards over and over: in
 * cautious mode, a batch handed back before its head was checked once let
 * another thread's allocation make that check fail. */
static void td_destructor(void *arg) {
  uintptr_t self = (uintptr_t)arg - 1;
  void *p[50];
  pthread_barrier_wait(&td_barrier);
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < 50; i++) {
      CHECK((p[i] = fw_pool_alloc(td_pool)) != NULL);
      fill(p[i], 40, self * 50 + (size_t)i);
    }
    for (int i = 0; i < 50; i++) {
      CHECK(filled(p[i], 40, self * 50 + (size_t)i));
      if (i > 0 || round < 39)
        fw_pool_free(td_pool, p[i]);
    }
  }
  td_kept[self] = p[0]; /* one object per thread stays live */
}

static void *td_worker(void *arg) {
  void *p = fw_pool_alloc(td_pool); /* the pool's exit handler is registered */
  CHECK(p != NULL);
  fw_pool_free(td_pool, p);
  CHECK(pthread_setspecific(td_key, arg) == 0);
  return NULL;
}

static void test_use_in_thread_destructor(void) {
  td_pool = fw_pool_new(40, 0, NULL);
  CHECK(td_pool != NULL);
  CHECK(pthread_key_create(&td_key, td_destructor) == 0);
  CHECK(pthread_barrier_init(&td_barrier, NULL, 8) == 0);
  pthread_t th[8];
  for (uintptr_t i = 0; i < 8; i++)
    CHECK(pthread_create(&th[i], NULL, td_worker, (void *)(i + 1)) == 0);
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  CHECK(stats_of(td_pool).objects_live == 8);
  check_disjoint(td_kept, 8, 40);
  for (int i = 0; i < 8; i++)
    fw_pool_free(td_pool, td_kept[i]);
  CHECK(stats_of(td_pool).objects_live == 0);
  pthread_key_delete(td_key);
  pthread_barrier_destroy(&td_barrier);
  fw_pool_destroy(td_pool);
}

/* ---- fork while other threads use the pool ------------------------------ */
static fw_pool_t *fk_pool;
static volatile int fk_stop;
static void *fk_worker(void *arg) {
  (void)arg;
  while (!fk_stop) {
    void *p[100];
    for (int i = 0; i < 100; i++)
      CHECK((p[i] = fw_pool_alloc(fk_pool)) != NULL);
    for (int i = 0; i < 100; i++)
      fw_pool_free(fk_pool, p[i]);
  }
  return NULL;
}

static void test_fork(void) {
  fk_pool = fw_pool_new(32, 0, NULL);
  CHECK(fk_pool != NULL);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&th[i], NULL, fk_worker, NULL) == 0);
  for (int round = 0; round < 20; round++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      alarm(20); /* a deadlock kills the child and fails the test */
      void *p[1000];
      for (int i = 0; i < 1000; i++)
        if ((p[i] = fw_pool_alloc(fk_pool)) == NULL)
          _exit(2);
      for (int i = 0; i < 1000; i++)
        fw_pool_free(fk_pool, p[i]);
      fw_pool_t *other = fw_pool_new(24, 0, NULL);
      if (other == NULL || fw_pool_alloc(other) == NULL)
        _exit(3);
      _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  fk_stop = 1;
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  fw_pool_destroy(fk_pool);
}

/* With FREEWAY_CAUTIOUS=1, misuse of fw_pool_free aborts: run each misuse
 * in a child process and expect SIGABRT. */
static void expect_abort(int misuse) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(20);
    fw_pool_t *pool = fw_pool_new(48, 0, NULL), *other = fw_pool_new(48, 0, NULL);
    if (pool == NULL || other == NULL)
      _exit(2);
    char *p = fw_pool_alloc(pool), *q = fw_pool_alloc(other);
    if (p == NULL || q == NULL)
      _exit(3);
    switch (misuse) {
    case 0: /* twice in a row */
      fw_pool_free(pool, p);
      fw_pool_free(pool, p);
      break;
    case 1: /* to the wrong pool */
      fw_pool_free(pool, q);
      break;
    default: /* not the start of an object */
      fw_pool_free(pool, p + 8);
      break;
    }
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

static void test_cautious_checks(void) {
  if (fw_option_get("cautious") <= 0)
    return;
  for (int misuse = 0; misuse < 3; misuse++)
    expect_abort(misuse);
}

int main(void) {
  test_bad_arguments();
  test_contents_and_stats();
  test_alignment();
  test_zero();
  test_cross_thread();
  test_stats_threads_and_exit();
  test_thread_exit_flush();
  test_destroy_with_cached_objects();
  test_many_pools();
  test_use_in_thread_destructor();
  test_fork();
  test_cautious_checks();
  printf("pool tests passed\n");
  return 0;
}
