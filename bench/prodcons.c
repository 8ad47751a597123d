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
} ring_t;

/* Thread 2i is the producer of ring i, thread 2i + 1 its consumer. */
typedef struct {
  bench_worker_t w; /* the consumer's bad: messages that arrived damaged */
  ring_t *ring;
} side_t;

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

static void produce(side_t *s) {
  ring_t *r = s->ring;
  bench_rng_t rng;
  bench_rng_seed(&rng, 11 + (uint64_t)(s->w.id / 2));
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
}

static void consume(side_t *s) {
  ring_t *r = s->ring;
  uint64_t sum = 0;
  for (long long i = 0; i < r->msgs; i++) {
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    unsigned spins = 0;
    while (atomic_load_explicit(&r->tail, memory_order_acquire) == h) backoff(&spins);
    msg_t *m = r->slots[h % r->cap];
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    if (m->seq != (uint64_t)i || m->size < r->min || m->size > r->max) s->w.bad++;
    sum += m->size;
    free(m);
  }
  s->w.checksum = sum;
}

static void *side_thread(void *p) {
  side_t *s = (side_t *)p;
  bench_start_wait();
  if (s->w.id % 2)
    consume(s);
  else
    produce(s);
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
  if (!rings) bench_die("out of memory");
  memset(rings, 0, sizeof(ring_t) * (size_t)pairs);
  side_t proto = {.ring = NULL};
  side_t *sides = (side_t *)bench_workers_new(pairs * 2, &proto, sizeof proto);
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
    sides[2 * i].ring = sides[2 * i + 1].ring = r;
  }
  bench_cpu_t d = bench_run_threads(pairs * 2, side_thread, sides, sizeof *sides);
  long long bad = bench_workers_fold(sides, pairs * 2, sizeof *sides);
  for (int i = 0; i < pairs; i++) free(rings[i].slots);
  free(rings);
  free(sides);

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
