/* Producer/consumer pipeline: blocks allocated on one thread, freed on
 * another.
 *
 * P producer/consumer pairs. Each producer allocates N messages of random
 * sizes in [min, max], writes a header and the first bytes, and passes them
 * through a bounded single-producer single-consumer ring to its consumer,
 * which checks the header and frees the message. A full or empty ring makes
 * the waiting side spin briefly, then yield the CPU.
 *
 *   bench_prodcons --pairs 2 --msgs 1M [--min 16] [--max 4096] [--queue 1024]
 */
#include "bench_common.h"

#include <stdatomic.h>

typedef struct {
  uint64_t seq;
  uint64_t size;
} msg_t;

typedef struct {
  _Alignas(64) _Atomic size_t head; /* next slot the consumer reads */
  _Alignas(64) _Atomic size_t tail; /* next slot the producer writes */
  _Alignas(64) msg_t **slots;
  size_t cap;
  long long msgs;
  size_t min, max;
  int id;
  long long bad;
  uint64_t checksum;
} ring_t;

/* Waiting side: spin briefly, then give the CPU away. */
static void backoff(unsigned *spins) {
  if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  *spins = 0;
  sched_yield();
}

static void *producer(void *p) {
  ring_t *r = (ring_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, 11 + (uint64_t)r->id);
  bench_start_wait();
  for (long long i = 0; i < r->msgs; i++) {
    size_t size = bench_rng_range(&rng, r->min, r->max);
    msg_t *m = (msg_t *)malloc(size);
    if (!m) bench_die("malloc failed");
    m->seq = (uint64_t)i;
    m->size = size;
    size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    unsigned spins = 0;
    while (t - atomic_load_explicit(&r->head, memory_order_acquire) >= r->cap) backoff(&spins);
    r->slots[t % r->cap] = m;
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
  }
  return NULL;
}

static void *consumer(void *p) {
  ring_t *r = (ring_t *)p;
  uint64_t sum = 0;
  bench_start_wait();
  for (long long i = 0; i < r->msgs; i++) {
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    unsigned spins = 0;
    while (atomic_load_explicit(&r->tail, memory_order_acquire) == h) backoff(&spins);
    msg_t *m = r->slots[h % r->cap];
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    if (m->seq != (uint64_t)i || m->size < r->min || m->size > r->max) r->bad++;
    sum += m->size;
    free(m);
  }
  r->checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int pairs = (int)bench_arg_count(argc, argv, "pairs", 1);
  long long msgs = bench_arg_count(argc, argv, "msgs", 1000000);
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 4096);
  size_t cap = (size_t)bench_arg_count(argc, argv, "queue", 1024);
  if (pairs < 1 || msgs < 0 || cap < 1 || min < sizeof(msg_t) || max < min) bench_die("bad arguments");

  ring_t *rings = (ring_t *)aligned_alloc(64, sizeof(ring_t) * (size_t)pairs);
  pthread_t *tids = (pthread_t *)calloc((size_t)pairs * 2, sizeof *tids);
  if (!rings || !tids) bench_die("out of memory");
  memset(rings, 0, sizeof(ring_t) * (size_t)pairs);
  pthread_barrier_init(&bench_start_barrier, NULL, (unsigned)pairs * 2 + 1);
  for (int i = 0; i < pairs; i++) {
    ring_t *r = &rings[i];
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    r->slots = (msg_t **)calloc(cap, sizeof *r->slots);
    if (!r->slots) bench_die("out of memory");
    r->cap = cap;
    r->msgs = msgs;
    r->min = min;
    r->max = max;
    r->id = i;
    if (pthread_create(&tids[2 * i], NULL, producer, r) != 0 ||
        pthread_create(&tids[2 * i + 1], NULL, consumer, r) != 0)
      bench_die("pthread_create failed");
  }
  bench_cpu_t start = bench_cpu_now();
  pthread_barrier_wait(&bench_start_barrier);
  for (int i = 0; i < 2 * pairs; i++) pthread_join(tids[i], NULL);
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  pthread_barrier_destroy(&bench_start_barrier);
  long long bad = 0;
  for (int i = 0; i < pairs; i++) {
    bad += rings[i].bad;
    bench_sink += rings[i].checksum;
    free(rings[i].slots);
  }
  free(rings);
  free(tids);

  bench_json_t j;
  bench_json_begin(&j, "prodcons");
  bench_json_int(&j, "pairs", pairs);
  bench_json_int(&j, "threads", pairs * 2);
  bench_json_int(&j, "msgs", msgs);
  bench_json_int(&j, "queue", (long long)cap);
  bench_json_int(&j, "bad", bad);
  bench_json_cpu(&j, d);
  bench_json_num(&j, "mmsgs_per_s", d.wall_ms > 0 ? (double)msgs * pairs / d.wall_ms / 1e3 : 0);
  bench_json_end(&j);
  return bad ? 1 : 0;
}
