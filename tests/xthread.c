/* xthread.c — blocks allocated by one thread and freed (or reallocated) by
 * others: producers and consumers, a ring of threads passing blocks on,
 * blocks outliving the thread that allocated them. Every block is checked
 * against its pattern before it is freed. */
#include "fwtest.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

/* Blocks carry a header: size, origin thread, hops so far. The rest is a
 * pattern derived from the address, size and origin. */
typedef struct hdr {
  size_t n;
  uint32_t origin;
  uint32_t hops;
} hdr;

static size_t max_block = (size_t)1 << 20;

static char *make_block(fwt_rng *r, uint32_t origin) {
  size_t n = fwt_random_size(r, max_block);
  if (n < sizeof(hdr)) n = sizeof(hdr);
  char *p = (fwt_next(r) % 16 == 0) ? A.calloc(1, n) : A.malloc(n);
  CHECKF(p != NULL, "allocating %zu bytes", n);
  hdr h = {n, origin, 0};
  memcpy(p, &h, sizeof h);
  fwt_fill(p + sizeof h, n - sizeof h, fwt_seed(p, n, origin));
  return p;
}
static hdr check_block(const char *p) {
  hdr h;
  memcpy(&h, p, sizeof h);
  CHECKF(h.n >= sizeof h && h.n <= max_block, "block %p: corrupt header (size %zu)", (const void *)p, h.n);
  CHECK_PATTERN(p + sizeof h, h.n - sizeof h, fwt_seed(p, h.n, h.origin));
  return h;
}

/* ---- a bounded queue (mutex + condition variables) ------------------------ */
typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  char **items;
  size_t cap, head, count;
  bool closed;
} queue;

static void q_init(queue *q, size_t cap) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  q->items = fwt_scratch(cap * sizeof *q->items);
  q->cap = cap;
  q->head = q->count = 0;
  q->closed = false;
}
static void q_fini(queue *q) {
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
  fwt_scratch_free(q->items, q->cap * sizeof *q->items);
}
static void q_push(queue *q, char *p) {
  pthread_mutex_lock(&q->mu);
  while (q->count == q->cap) pthread_cond_wait(&q->not_full, &q->mu);
  q->items[(q->head + q->count++) % q->cap] = p;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}
/* NULL once the queue is closed and empty (block) or just empty (try). */
static char *q_pop(queue *q, bool wait) {
  pthread_mutex_lock(&q->mu);
  while (wait && q->count == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
  char *p = NULL;
  if (q->count) {
    p = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return p;
}
static void q_close(queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* ---- producers and consumers ------------------------------------------------ */
enum { PRODUCERS = 4, CONSUMERS = 4 };
static queue pc_q;
static atomic_ulong pc_consumed;
static size_t pc_per_producer;

static void *producer(void *arg) {
  uint32_t id = (uint32_t)(uintptr_t)arg;
  fwt_rng r;
  fwt_rng_init(&r, id);
  for (size_t i = 0; i < pc_per_producer; i++) q_push(&pc_q, make_block(&r, id));
  return NULL;
}
static void *consumer(void *arg) {
  fwt_rng r;
  fwt_rng_init(&r, (uintptr_t)arg + 100);
  char *p;
  while ((p = q_pop(&pc_q, true)) != NULL) {
    hdr h = check_block(p);
    CHECK(h.origin < PRODUCERS);
    switch (fwt_next(&r) % 3) {
    case 0: A.free(p); break;
    case 1: X.free_sized(p, h.n); break;
    default: {
      /* Reallocate the foreign block here, then free it. */
      size_t n = fwt_random_size(&r, max_block), keep = n < h.n ? n : h.n;
      char *q = A.realloc(p, n);
      CHECK(q != NULL);
      if (keep > sizeof h) {
        uint64_t seed = fwt_seed(p, h.n, h.origin);
        CHECK_PATTERN(q + sizeof h, keep - sizeof h, seed);
      }
      A.free(q);
    }
    }
    atomic_fetch_add(&pc_consumed, 1);
  }
  return NULL;
}

static void t_prodcons(void) {
  pc_per_producer = fwt_scaled(60000);
  q_init(&pc_q, 256);
  atomic_store(&pc_consumed, 0);
  pthread_t p[PRODUCERS], c[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++)
    CHECK(pthread_create(&c[i], NULL, consumer, (void *)(uintptr_t)i) == 0);
  for (int i = 0; i < PRODUCERS; i++)
    CHECK(pthread_create(&p[i], NULL, producer, (void *)(uintptr_t)i) == 0);
  for (int i = 0; i < PRODUCERS; i++) CHECK(pthread_join(p[i], NULL) == 0);
  q_close(&pc_q);
  for (int i = 0; i < CONSUMERS; i++) CHECK(pthread_join(c[i], NULL) == 0);
  CHECKF(atomic_load(&pc_consumed) == PRODUCERS * pc_per_producer, "consumed %lu of %zu",
         atomic_load(&pc_consumed), PRODUCERS * pc_per_producer);
  q_fini(&pc_q);
}

/* ---- a ring of threads --------------------------------------------------------- */
/* Each thread has an unbounded inbox, linked through the blocks themselves
 * (a pointer stored after the header), so passing never blocks. */
enum { RING = 8, HOPS = 5 };
typedef struct inbox {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *head, *tail;
} inbox;
static inbox ring_in[RING];
static atomic_long ring_outstanding; /* blocks made and not yet freed */
static atomic_int ring_producing;    /* threads still making blocks */
static atomic_bool ring_done;
static size_t ring_per_thread;

#define LINK(p) ((char **)((p) + sizeof(hdr)))
static const size_t ring_min = sizeof(hdr) + sizeof(char *);

static void in_push(inbox *q, char *p) {
  *LINK(p) = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->tail) *LINK(q->tail) = p;
  else q->head = p;
  q->tail = p;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}
/* Takes the whole list; waits up to 5 ms when it is empty and wait is set. */
static char *in_take(inbox *q, bool wait) {
  pthread_mutex_lock(&q->mu);
  if (wait && !q->head && !atomic_load(&ring_done)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 5000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
  }
  char *p = q->head;
  q->head = q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  return p;
}

/* The pattern of a ring block starts after the link. */
static uint64_t ring_seed(const char *p, const hdr *h) { return fwt_seed(p, h->n, h->origin); }
static void ring_stamp(char *p, const hdr *h) {
  memcpy(p, h, sizeof *h);
  fwt_fill(p + ring_min, h->n - ring_min, ring_seed(p, h));
}
static hdr ring_check(const char *p) {
  hdr h;
  memcpy(&h, p, sizeof h);
  CHECKF(h.n >= ring_min && h.n <= max_block, "ring block %p: corrupt header (size %zu)", (const void *)p, h.n);
  CHECK_PATTERN(p + ring_min, h.n - ring_min, ring_seed(p, &h));
  return h;
}

static char *ring_make(fwt_rng *r, uint32_t id) {
  size_t n = fwt_random_size(r, max_block);
  if (n < ring_min) n = ring_min;
  char *p = A.malloc(n);
  CHECKF(p != NULL, "malloc(%zu)", n);
  hdr h = {n, id, 0};
  ring_stamp(p, &h);
  return p;
}

static void ring_pass(int id, char *p, fwt_rng *r) {
  hdr h = ring_check(p);
  if (h.hops >= HOPS || fwt_next(r) % 4 == 0) {
    if (fwt_next(r) % 2) X.free_sized(p, h.n);
    else A.free(p);
    if (atomic_fetch_sub(&ring_outstanding, 1) == 1 && atomic_load(&ring_producing) == 0) {
      atomic_store(&ring_done, true);
      for (int i = 0; i < RING; i++) {
        pthread_mutex_lock(&ring_in[i].mu);
        pthread_cond_broadcast(&ring_in[i].cv);
        pthread_mutex_unlock(&ring_in[i].mu);
      }
    }
    return;
  }
  h.hops++;
  if (fwt_next(r) % 3 == 0) {
    /* Move it: reallocate here (a block of another thread), restamp with
     * this thread as origin. */
    size_t n = fwt_random_size(r, max_block);
    if (n < ring_min) n = ring_min;
    char *q = A.realloc(p, n);
    CHECK(q != NULL);
    size_t keep = n < h.n ? n : h.n;
    if (keep > ring_min) CHECK_PATTERN(q + ring_min, keep - ring_min, ring_seed(p, &h));
    p = q;
    h.n = n;
    h.origin = (uint32_t)id;
    ring_stamp(p, &h);
  } else {
    memcpy(p, &h, sizeof h);
  }
  in_push(&ring_in[(id + 1) % RING], p);
}

static void *ring_thread(void *arg) {
  int id = (int)(uintptr_t)arg;
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)id + 1000);
  size_t made = 0;
  while (!atomic_load(&ring_done)) {
    for (int k = 0; k < 8 && made < ring_per_thread && atomic_load(&ring_outstanding) < RING * 64; k++) {
      atomic_fetch_add(&ring_outstanding, 1);
      if (++made == ring_per_thread) atomic_fetch_sub(&ring_producing, 1);
      ring_pass(id, ring_make(&r, (uint32_t)id), &r);
    }
    bool can_make = made < ring_per_thread && atomic_load(&ring_outstanding) < RING * 64;
    char *p = in_take(&ring_in[id], !can_make);
    while (p) {
      char *next = *LINK(p);
      ring_pass(id, p, &r);
      p = next;
    }
  }
  return NULL;
}

static void t_ring(void) {
  ring_per_thread = fwt_scaled(40000);
  for (int i = 0; i < RING; i++) {
    pthread_mutex_init(&ring_in[i].mu, NULL);
    pthread_cond_init(&ring_in[i].cv, NULL);
    ring_in[i].head = ring_in[i].tail = NULL;
  }
  atomic_store(&ring_outstanding, 0);
  atomic_store(&ring_producing, RING);
  atomic_store(&ring_done, false);
  pthread_t t[RING];
  for (int i = 0; i < RING; i++)
    CHECK(pthread_create(&t[i], NULL, ring_thread, (void *)(uintptr_t)i) == 0);
  for (int i = 0; i < RING; i++) CHECK(pthread_join(t[i], NULL) == 0);
  CHECK(atomic_load(&ring_outstanding) == 0);
  for (int i = 0; i < RING; i++) {
    CHECK(in_take(&ring_in[i], false) == NULL);
    pthread_mutex_destroy(&ring_in[i].mu);
    pthread_cond_destroy(&ring_in[i].cv);
  }
}

/* ---- blocks outliving their thread ----------------------------------------------- */
typedef struct orphan_job {
  char **blocks;
  size_t n;
  uint32_t id;
} orphan_job;

static void *orphan_maker(void *arg) {
  orphan_job *j = arg;
  fwt_rng r;
  fwt_rng_init(&r, j->id + 5000);
  for (size_t i = 0; i < j->n; i++) j->blocks[i] = make_block(&r, j->id);
  /* Free a few of our own so the pages are in mixed states when we exit. */
  for (size_t i = 0; i < j->n; i += 5) {
    check_block(j->blocks[i]);
    A.free(j->blocks[i]);
    j->blocks[i] = NULL;
  }
  return NULL;
}
static void *orphan_freer(void *arg) {
  orphan_job *j = arg;
  for (size_t i = 0; i < j->n; i++) {
    if (!j->blocks[i]) continue;
    check_block(j->blocks[i]);
    A.free(j->blocks[i]);
  }
  return NULL;
}

static void t_orphans(void) {
  enum { N = 8000, MAKERS = 4 };
  size_t rounds = fwt_scaled(8);
  for (size_t round = 0; round < rounds; round++) {
    orphan_job jobs[MAKERS];
    pthread_t t[MAKERS];
    for (int i = 0; i < MAKERS; i++) {
      jobs[i] = (orphan_job){fwt_scratch(N * sizeof(char *)), N, (uint32_t)(round * MAKERS + (size_t)i)};
      CHECK(pthread_create(&t[i], NULL, orphan_maker, &jobs[i]) == 0);
    }
    for (int i = 0; i < MAKERS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    /* The makers have exited. Their blocks are freed by new threads and by
     * main, while main also allocates (and may adopt their pages). */
    pthread_t f[MAKERS - 1];
    for (int i = 0; i < MAKERS - 1; i++) CHECK(pthread_create(&f[i], NULL, orphan_freer, &jobs[i]) == 0);
    fwt_rng r;
    fwt_rng_init(&r, round);
    char *mine[1000];
    for (int k = 0; k < 1000; k++) mine[k] = make_block(&r, 999);
    orphan_freer(&jobs[MAKERS - 1]);
    for (int i = 0; i < MAKERS - 1; i++) CHECK(pthread_join(f[i], NULL) == 0);
    for (int k = 0; k < 1000; k++) {
      check_block(mine[k]);
      A.free(mine[k]);
    }
    for (int i = 0; i < MAKERS; i++) fwt_scratch_free(jobs[i].blocks, N * sizeof(char *));
  }
  X.collect(true);
  fw_stats_t s;
  fwt_stats(&s);
  CHECKF(s.threads <= 2, "%zu threads still have a heap after all workers exited", s.threads);
}

static const fwt_section sections[] = {
  {"prodcons", t_prodcons},
  {"ring", t_ring},
  {"orphans", t_orphans},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
