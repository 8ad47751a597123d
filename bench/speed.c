/* malloc/free speed over a size range (seed 000, "testing memory operations
 * speed").
 *
 * T threads each perform M operations. Each thread keeps a window of W live
 * blocks; an operation picks a random slot of the window, frees the block in
 * it (if any) and puts there a new block of a random size, uniform in
 * [min, max]. The first and last byte of every block are written.
 *
 *   bench_speed --threads 4 --ops 10M --min 256 --max 512 [--live W] [--seed S]
 *
 * W = 0 (the default) sizes the window so that all threads together keep
 * about 256 MiB live at most (between 4 and 1024 blocks per thread).
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w; /* bad: failed allocations */
  long long ops;
  size_t min, max, live;
  uint64_t seed;
} speed_arg_t;

static void *speed_thread(void *p) {
  speed_arg_t *a = (speed_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, a->seed + (uint64_t)a->w.id * 7919u);
  unsigned char **slots = (unsigned char **)bench_calloc(a->live, sizeof *slots);
  uint64_t sum = 0;
  bench_start_wait();
  for (long long i = 0; i < a->ops; i++) {
    size_t j = (size_t)(bench_rng_next(&rng) % a->live);
    if (slots[j]) {
      sum += slots[j][0];
      free(slots[j]);
    }
    size_t size = bench_rng_range(&rng, a->min, a->max);
    unsigned char *q = (unsigned char *)malloc(size);
    if (!q) {
      a->w.bad++;
      slots[j] = NULL;
      continue;
    }
    q[0] = (unsigned char)i;
    q[size - 1] = (unsigned char)j;
    slots[j] = q;
  }
  for (size_t j = 0; j < a->live; j++) free(slots[j]);
  free(slots);
  a->w.checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 4);
  long long ops = bench_arg_count(argc, argv, "ops", 1000000);
  size_t min = bench_arg_size(argc, argv, "min", 256);
  size_t max = bench_arg_size(argc, argv, "max", 512);
  size_t live = bench_arg_size(argc, argv, "live", 0);
  uint64_t seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  if (threads < 1 || ops < 0 || min < 1 || max < min) bench_die("bad arguments");
  if (live == 0) {
    size_t avg = (min + max) / 2;
    live = ((size_t)256 << 20) / ((size_t)threads * avg);
    if (live < 4) live = 4;
    if (live > 1024) live = 1024;
  }

  speed_arg_t proto = {.ops = ops, .min = min, .max = max, .live = live, .seed = seed};
  bench_team_t team = bench_run_workers(threads, speed_thread, &proto, sizeof proto, NULL);

  bench_json_t j;
  bench_json_begin(&j, "speed");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "live", (long long)live);
  bench_json_int(&j, "failed", team.bad);
  bench_json_cpu(&j, team.cpu);
  bench_json_num(&j, "ns_per_op", team.cpu.wall_ms * 1e6 / ((double)ops * threads > 0 ? (double)ops * threads : 1));
  bench_json_end(&j);
  return team.bad ? 1 : 0;
}
