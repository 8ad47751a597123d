/* Contention-normalised load (seed 002).
 *
 * The work per thread is scaled by the number of threads and of CPUs so that
 * an allocator without contention finishes in the same time at every thread
 * count: with C CPUs and T threads each thread performs
 *     W x min(T, C) / T
 * operations. Any time above the one-thread time is due to contention (or to
 * the allocator's bookkeeping across threads).
 *
 * An operation frees a random block of the thread's window of live blocks
 * and allocates a new one of a random small size in [min, max].
 *
 *   bench_scaled --threads 4 --work 2M [--cpus C] [--live 256] [--min 8] [--max 512]
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w;
  long long ops;
  size_t live, min, max;
} scaled_arg_t;

static void *scaled_thread(void *p) {
  scaled_arg_t *a = (scaled_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, 77 + (uint64_t)a->w.id);
  unsigned char **slots = (unsigned char **)bench_calloc(a->live, sizeof *slots);
  uint64_t sum = 0;
  bench_start_wait();
  for (long long i = 0; i < a->ops; i++) {
    size_t j = (size_t)(bench_rng_next(&rng) % a->live);
    if (slots[j]) sum += slots[j][0];
    free(slots[j]);
    size_t size = bench_rng_range(&rng, a->min, a->max);
    unsigned char *q = (unsigned char *)malloc(size);
    if (!q) bench_die("malloc failed");
    q[0] = (unsigned char)i;
    slots[j] = q;
  }
  for (size_t j = 0; j < a->live; j++) free(slots[j]);
  free(slots);
  a->w.checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 1);
  long long work = bench_arg_count(argc, argv, "work", 1000000);
  int cpus = (int)bench_arg_count(argc, argv, "cpus", bench_ncpus());
  size_t live = (size_t)bench_arg_count(argc, argv, "live", 256);
  size_t min = bench_arg_size(argc, argv, "min", 8);
  size_t max = bench_arg_size(argc, argv, "max", 512);
  if (threads < 1 || cpus < 1 || work < 0 || live < 1 || min < 1 || max < min) bench_die("bad arguments");
  int busy = threads < cpus ? threads : cpus;
  long long per_thread = work * busy / threads;

  scaled_arg_t proto = {.ops = per_thread, .live = live, .min = min, .max = max};
  bench_cpu_t d = bench_run_workers(threads, scaled_thread, &proto, sizeof proto, NULL).cpu;

  bench_json_t j;
  bench_json_begin(&j, "scaled");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "cpus", cpus);
  bench_json_int(&j, "work", work);
  bench_json_int(&j, "ops_per_thread", per_thread);
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
