/* Server-style rolling working set with frees from other threads.
 *
 * The working set is T arrays of S blocks (random sizes in [min, max]),
 * allocated at the start by the main thread. Each round starts T new
 * threads; in round r thread i works on array (i + r) mod T, so every block
 * it frees was allocated by another thread, most of them by a thread that has
 * already exited. An operation replaces a random block of the array: free
 * the old block, allocate a new one, write its first and last byte.
 *
 *   bench_larson --threads 4 --rounds 10 --ops 200k --slots 1000 [--min 16] [--max 1024]
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w;
  int round;
  int threads;
  long long ops;
  size_t slots, min, max;
  unsigned char ***arrays;
} larson_arg_t;

static void *larson_thread(void *p) {
  larson_arg_t *a = (larson_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, (uint64_t)a->round * 1000003u + (uint64_t)a->w.id);
  unsigned char **arr = a->arrays[(a->w.id + a->round) % a->threads];
  uint64_t sum = 0;
  for (long long i = 0; i < a->ops; i++) {
    size_t j = (size_t)(bench_rng_next(&rng) % a->slots);
    sum += arr[j][0];
    free(arr[j]);
    size_t size = bench_rng_range(&rng, a->min, a->max);
    unsigned char *q = (unsigned char *)malloc(size);
    if (!q) bench_die("malloc failed");
    q[0] = (unsigned char)i;
    q[size - 1] = (unsigned char)j;
    arr[j] = q;
  }
  a->w.checksum += sum;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 2);
  int rounds = (int)bench_arg_count(argc, argv, "rounds", 10);
  long long ops = bench_arg_count(argc, argv, "ops", 100000);
  size_t slots = (size_t)bench_arg_count(argc, argv, "slots", 1000);
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 1024);
  if (threads < 1 || rounds < 1 || ops < 0 || slots < 1 || min < 1 || max < min) bench_die("bad arguments");

  bench_rng_t rng;
  bench_rng_seed(&rng, 5);
  unsigned char ***arrays = (unsigned char ***)bench_calloc((size_t)threads, sizeof *arrays);
  larson_arg_t proto = {.threads = threads, .ops = ops, .slots = slots, .min = min, .max = max, .arrays = arrays};
  larson_arg_t *args = (larson_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)threads, sizeof *tids);
  for (int i = 0; i < threads; i++) {
    arrays[i] = (unsigned char **)bench_calloc(slots, sizeof **arrays);
    for (size_t j = 0; j < slots; j++) {
      size_t size = bench_rng_range(&rng, min, max);
      arrays[i][j] = (unsigned char *)malloc(size);
      if (!arrays[i][j]) bench_die("malloc failed");
      arrays[i][j][0] = 0;
    }
  }

  bench_cpu_t start = bench_cpu_now();
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < threads; i++) args[i].round = r;
    bench_spawn(tids, threads, larson_thread, args, sizeof *args);
    bench_join(tids, threads);
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  bench_workers_fold(args, threads, sizeof *args);
  for (int i = 0; i < threads; i++) {
    for (size_t j = 0; j < slots; j++) free(arrays[i][j]);
    free(arrays[i]);
  }
  free(arrays);
  free(args);
  free(tids);

  double total_ops = (double)ops * threads * rounds;
  bench_json_t j;
  bench_json_begin(&j, "larson");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "rounds", rounds);
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "slots", (long long)slots);
  bench_json_cpu(&j, d);
  bench_json_num(&j, "mops_per_s", d.wall_ms > 0 ? total_ops / d.wall_ms / 1e3 : 0);
  bench_json_end(&j);
  return 0;
}
