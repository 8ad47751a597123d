/* Waves of short-lived threads handing blocks to the next wave.
 *
 * W waves; each wave starts T threads and waits for them to end. A thread
 * does K operations on its own window of live blocks: replace a random block
 * with a new one of a mixed size (mostly 16-256 B, sometimes up to 4 KiB,
 * rarely up to 256 KiB). One operation in eight instead swaps a block of its
 * window with a random slot of an array shared by all threads, and frees what
 * it took out: a block another thread allocated, mostly one of an earlier
 * wave, which has exited. When it ends, the thread puts some of its window
 * into the shared array in the same way and frees the rest. So every wave
 * frees blocks of threads that are gone, and leaves blocks for the next.
 *
 * With many waves of a few threads doing little work each (the "many
 * threads" case: tens of thousands of threads) the time is dominated by what
 * a thread's first allocation and its exit cost the allocator.
 *
 *   bench_threadwave --threads 4 --waves 50 --ops 20k [--window 200] [--shared 4096]
 */
#include "bench_common.h"

#include <stdatomic.h>

typedef struct {
  uint32_t size;
  uint32_t check; /* derived from the size: a damaged or reused block shows */
} hdr_t;

static uint32_t check_of(uint32_t size) { return size * 2654435761u ^ 0x5bd1e995u; }

typedef struct {
  bench_worker_t w;
  int wave;
  size_t ops, window, nshared;
  _Atomic(hdr_t *) *shared;
} wave_arg_t;

static size_t mixed_size(bench_rng_t *r) {
  uint64_t x = bench_rng_next(r);
  if ((x & 255) == 0) return bench_rng_range(r, 4097, 256 << 10);
  if ((x & 15) == 0) return bench_rng_range(r, 257, 4096);
  return bench_rng_range(r, 16, 256);
}

static hdr_t *new_block(bench_rng_t *r) {
  size_t size = mixed_size(r);
  hdr_t *h = (hdr_t *)malloc(size);
  if (!h) bench_die("malloc failed");
  h->size = (uint32_t)size;
  h->check = check_of(h->size);
  ((unsigned char *)h)[size - 1] = (unsigned char)size;
  return h;
}

static void drop_block(wave_arg_t *a, hdr_t *h) {
  if (!h) return;
  if (h->check != check_of(h->size) || ((unsigned char *)h)[h->size - 1] != (unsigned char)h->size) a->w.bad++;
  a->w.checksum += h->size;
  free(h);
}

/* Puts h into a random shared slot and frees what was there. */
static void share_block(wave_arg_t *a, bench_rng_t *r, hdr_t *h) {
  size_t k = (size_t)(bench_rng_next(r) % a->nshared);
  drop_block(a, atomic_exchange_explicit(&a->shared[k], h, memory_order_acq_rel));
}

static void *wave_thread(void *p) {
  wave_arg_t *a = (wave_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, (uint64_t)a->wave * 7919u + (uint64_t)a->w.id + 1);
  hdr_t *local[512];
  size_t n = a->window;
  for (size_t i = 0; i < n; i++) local[i] = NULL;
  for (size_t i = 0; i < a->ops; i++) {
    size_t j = (size_t)(bench_rng_next(&rng) % n);
    if ((bench_rng_next(&rng) & 7) == 0 && local[j]) {
      share_block(a, &rng, local[j]);
    } else {
      drop_block(a, local[j]);
    }
    local[j] = new_block(&rng);
  }
  for (size_t i = 0; i < n; i++) {
    if (i % 4 == 0 && local[i])
      share_block(a, &rng, local[i]);
    else
      drop_block(a, local[i]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 4);
  long long waves = bench_arg_count(argc, argv, "waves", 50);
  long long ops = bench_arg_count(argc, argv, "ops", 20000);
  size_t window = (size_t)bench_arg_count(argc, argv, "window", 200);
  size_t nshared = (size_t)bench_arg_count(argc, argv, "shared", 4096);
  if (threads < 1 || waves < 1 || ops < 0 || window < 1 || window > 512 || nshared < 1) bench_die("bad arguments");

  _Atomic(hdr_t *) *shared = (_Atomic(hdr_t *) *)bench_map(nshared * sizeof *shared, 0);
  for (size_t k = 0; k < nshared; k++) atomic_init(&shared[k], NULL);
  wave_arg_t proto = {.ops = (size_t)ops, .window = window, .nshared = nshared, .shared = shared};
  wave_arg_t *args = (wave_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)threads, sizeof *tids);

  bench_cpu_t start = bench_cpu_now();
  for (long long w = 0; w < waves; w++) {
    for (int i = 0; i < threads; i++) args[i].wave = (int)w;
    bench_spawn(tids, threads, wave_thread, args, sizeof *args);
    bench_join(tids, threads);
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  long long bad = bench_workers_fold(args, threads, sizeof *args);
  /* The last wave's blocks, checked like the others. */
  wave_arg_t last = proto;
  for (size_t k = 0; k < nshared; k++) drop_block(&last, atomic_load(&shared[k]));
  bad += last.w.bad;
  bench_sink += last.w.checksum;
  bench_unmap((void *)shared, nshared * sizeof *shared);
  free(args);
  free(tids);

  bench_json_t j;
  bench_json_begin(&j, "threadwave");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "waves", waves);
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "window", (long long)window);
  bench_json_int(&j, "bad", bad);
  bench_json_cpu(&j, d);
  bench_json_num(&j, "threads_per_s", d.wall_ms > 0 ? (double)threads * (double)waves / d.wall_ms * 1e3 : 0);
  bench_json_end(&j);
  return bad ? 1 : 0;
}
