/* Producers allocate, consumers free: blocks handed over in batches.
 *
 * P producer threads allocate a fixed total of N blocks between them, of
 * log-uniform random sizes in [min, max] (many small, some near the top),
 * write a header and the last byte of each, and collect them in batches of B.
 * A full batch (itself a malloc'd block) goes onto one queue shared by all
 * threads; C consumer threads take batches off it, check every block, free
 * the blocks and the batch. Every block is thus freed by a thread other than
 * the one that allocated it, in bulk, while the producer keeps allocating:
 * the allocator's remote-free path and its reclaim of those blocks carry the
 * load. The queue holds at most Q batches, which bounds the live memory.
 *
 *   bench_xmalloc --producers 2 --consumers 2 --blocks 4M [--min 8] [--max 1KiB] [--batch 64] [--queue 64]
 */
#include "bench_common.h"

typedef struct batch {
  struct batch *next;
  size_t n;
  void *blocks[];
} batch_t;

typedef struct {
  uint32_t size;
  uint32_t check;
} hdr_t;

static uint32_t check_of(uint32_t size) { return size * 2246822519u ^ 0x27d4eb2fu; }

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  batch_t *head, *tail;
  size_t len, cap;
  int producers_left;
} queue_t;

typedef struct {
  bench_worker_t w;
  int producers;
  long long blocks; /* the total over all producers */
  size_t min, max, batch;
  queue_t *q;
} xm_arg_t;

static void push(queue_t *q, batch_t *b) {
  pthread_mutex_lock(&q->lock);
  while (q->len >= q->cap) pthread_cond_wait(&q->not_full, &q->lock);
  b->next = NULL;
  if (q->tail)
    q->tail->next = b;
  else
    q->head = b;
  q->tail = b;
  q->len++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->lock);
}

/* The next batch, or NULL once every producer is done and the queue is empty. */
static batch_t *pop(queue_t *q) {
  pthread_mutex_lock(&q->lock);
  while (!q->head && q->producers_left > 0) pthread_cond_wait(&q->not_empty, &q->lock);
  batch_t *b = q->head;
  if (b) {
    q->head = b->next;
    if (!q->head) q->tail = NULL;
    q->len--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->lock);
  return b;
}

static batch_t *new_batch(size_t cap) {
  batch_t *b = (batch_t *)malloc(sizeof(batch_t) + cap * sizeof(void *));
  if (!b) bench_die("malloc failed");
  b->n = 0;
  return b;
}

static void produce(xm_arg_t *a) {
  int id = a->w.id;
  long long share = a->blocks / a->producers + (id < a->blocks % a->producers ? 1 : 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, 17 + (uint64_t)id);
  batch_t *b = new_batch(a->batch);
  for (long long i = 0; i < share; i++) {
    size_t size = bench_rng_logsize(&rng, a->min, a->max);
    hdr_t *h = (hdr_t *)malloc(size);
    if (!h) bench_die("malloc failed");
    h->size = (uint32_t)size;
    h->check = check_of(h->size);
    ((unsigned char *)h)[size - 1] = (unsigned char)size;
    b->blocks[b->n++] = h;
    if (b->n == a->batch) {
      push(a->q, b);
      b = new_batch(a->batch);
    }
  }
  if (b->n)
    push(a->q, b);
  else
    free(b);
  pthread_mutex_lock(&a->q->lock);
  if (--a->q->producers_left == 0) pthread_cond_broadcast(&a->q->not_empty);
  pthread_mutex_unlock(&a->q->lock);
}

static void consume(xm_arg_t *a) {
  batch_t *b;
  while ((b = pop(a->q)) != NULL) {
    for (size_t i = 0; i < b->n; i++) {
      hdr_t *h = (hdr_t *)b->blocks[i];
      if (h->check != check_of(h->size) || ((unsigned char *)h)[h->size - 1] != (unsigned char)h->size) a->w.bad++;
      a->w.checksum += h->size;
      free(h);
    }
    free(b);
  }
}

/* Workers 0..P-1 produce, the others consume. */
static void *xm_thread(void *p) {
  xm_arg_t *a = (xm_arg_t *)p;
  bench_start_wait();
  if (a->w.id < a->producers)
    produce(a);
  else
    consume(a);
  return NULL;
}

int main(int argc, char **argv) {
  int producers = (int)bench_arg_count(argc, argv, "producers", 2);
  int consumers = (int)bench_arg_count(argc, argv, "consumers", 2);
  long long blocks = bench_arg_count(argc, argv, "blocks", 4000000);
  size_t min = bench_arg_size(argc, argv, "min", 8);
  size_t max = bench_arg_size(argc, argv, "max", 1024);
  size_t batch = (size_t)bench_arg_count(argc, argv, "batch", 64);
  size_t cap = (size_t)bench_arg_count(argc, argv, "queue", 64);
  if (producers < 1 || consumers < 1 || blocks < 0 || min < sizeof(hdr_t) || max < min || batch < 1 || cap < 1)
    bench_die("bad arguments");

  queue_t q;
  memset(&q, 0, sizeof q);
  pthread_mutex_init(&q.lock, NULL);
  pthread_cond_init(&q.not_empty, NULL);
  pthread_cond_init(&q.not_full, NULL);
  q.cap = cap;
  q.producers_left = producers;
  xm_arg_t proto = {.producers = producers, .blocks = blocks, .min = min, .max = max, .batch = batch, .q = &q};
  bench_team_t t = bench_run_workers(producers + consumers, xm_thread, &proto, sizeof proto, NULL);
  pthread_mutex_destroy(&q.lock);
  pthread_cond_destroy(&q.not_empty);
  pthread_cond_destroy(&q.not_full);

  bench_json_t j;
  bench_json_begin(&j, "xmalloc");
  bench_json_int(&j, "producers", producers);
  bench_json_int(&j, "consumers", consumers);
  bench_json_int(&j, "threads", producers + consumers);
  bench_json_int(&j, "blocks", blocks);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "batch", (long long)batch);
  bench_json_int(&j, "bad", t.bad);
  bench_json_cpu(&j, t.cpu);
  bench_json_num(&j, "mblocks_per_s", t.cpu.wall_ms > 0 ? (double)blocks / t.cpu.wall_ms / 1e3 : 0);
  bench_json_end(&j);
  return t.bad ? 1 : 0;
}
