/* Allocate without freeing, in loops (seed 000, "robustness vs memory
 * fragmentation").
 *
 * Each loop: T threads each allocate N blocks of random sizes in [min, max]
 * (first and last byte written) and keep them all; then one block of
 * --probe bytes (8 MiB) is requested and its success recorded; then every
 * block is freed (by the thread that allocated it, or with --free-by main by
 * the main thread). The next loop starts from that state.
 *
 *   bench_frag --threads 2 --ptrs 2M --min 128 --max 256 --loops 20
 *
 * Reports the allocation time per loop (mean, as the seed's "average time",
 * and median), the free time per loop, RSS after allocating and after
 * freeing, how many probes succeeded, and the peak RSS.
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w; /* bad: failed allocations */
  size_t ptrs, min, max;
  uint64_t seed;
  int loops;
  int free_by_main;
  unsigned char **blocks;
} frag_arg_t;

static pthread_barrier_t phase;

static void *frag_thread(void *p) {
  frag_arg_t *a = (frag_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, a->seed + (uint64_t)a->w.id * 104729u);
  for (int loop = 0; loop < a->loops; loop++) {
    pthread_barrier_wait(&phase); /* start allocating */
    for (size_t i = 0; i < a->ptrs; i++) {
      size_t size = bench_rng_range(&rng, a->min, a->max);
      unsigned char *q = (unsigned char *)malloc(size);
      if (q) {
        q[0] = (unsigned char)i;
        q[size - 1] = (unsigned char)loop;
      } else {
        a->w.bad++;
      }
      a->blocks[i] = q;
    }
    pthread_barrier_wait(&phase); /* allocation done */
    pthread_barrier_wait(&phase); /* start freeing */
    if (!a->free_by_main) {
      for (size_t i = 0; i < a->ptrs; i++) {
        if (a->blocks[i]) a->w.checksum += a->blocks[i][0];
        free(a->blocks[i]);
      }
    }
    pthread_barrier_wait(&phase); /* freeing done */
  }
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 2);
  size_t ptrs = (size_t)bench_arg_count(argc, argv, "ptrs", 100000);
  size_t min = bench_arg_size(argc, argv, "min", 128);
  size_t max = bench_arg_size(argc, argv, "max", 256);
  int loops = (int)bench_arg_count(argc, argv, "loops", 3);
  size_t probe = bench_arg_size(argc, argv, "probe", (size_t)8 << 20);
  const char *free_by = bench_arg_str(argc, argv, "free-by", "owner");
  uint64_t seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  if (threads < 1 || loops < 1 || min < 1 || max < min || loops > 1000) bench_die("bad arguments");
  int free_by_main = strcmp(free_by, "main") == 0;

  frag_arg_t proto = {
      .ptrs = ptrs, .min = min, .max = max, .seed = seed, .loops = loops, .free_by_main = free_by_main};
  frag_arg_t *args = (frag_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  double *alloc_ms = (double *)bench_calloc((size_t)loops, sizeof(double));
  double *free_ms = (double *)bench_calloc((size_t)loops, sizeof(double));
  double *sorted = (double *)bench_calloc((size_t)loops, sizeof(double));
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)threads, sizeof *tids);
  for (int i = 0; i < threads; i++) args[i].blocks = (unsigned char **)bench_map(ptrs * sizeof(void *) + 1, 0);
  pthread_barrier_init(&phase, NULL, (unsigned)threads + 1);
  bench_spawn(tids, threads, frag_thread, args, sizeof *args);

  int probes_ok = 0;
  size_t rss_alloc_max = 0, rss_free_last = 0;
  bench_cpu_t total_start = bench_cpu_now();
  for (int loop = 0; loop < loops; loop++) {
    double t0 = bench_now_ms();
    pthread_barrier_wait(&phase);
    pthread_barrier_wait(&phase);
    double t1 = bench_now_ms();
    alloc_ms[loop] = t1 - t0;
    size_t rss = bench_rss_bytes();
    if (rss > rss_alloc_max) rss_alloc_max = rss;
    unsigned char *big = (unsigned char *)malloc(probe);
    if (big) {
      big[0] = 1;
      big[probe - 1] = 2;
      bench_sink += big[0];
      probes_ok++;
      free(big);
    }
    double t2 = bench_now_ms();
    pthread_barrier_wait(&phase);
    if (free_by_main) {
      for (int i = 0; i < threads; i++)
        for (size_t k = 0; k < ptrs; k++) free(args[i].blocks[k]);
    }
    pthread_barrier_wait(&phase);
    free_ms[loop] = bench_now_ms() - t2;
    rss_free_last = bench_rss_bytes();
  }
  bench_cpu_t total = bench_cpu_diff(bench_cpu_now(), total_start);
  bench_join(tids, threads);
  long long failed = bench_workers_fold(args, threads, sizeof *args);
  for (int i = 0; i < threads; i++) munmap(args[i].blocks, ptrs * sizeof(void *) + 1);
  pthread_barrier_destroy(&phase);

  double mean = 0;
  for (int i = 0; i < loops; i++) mean += alloc_ms[i];
  mean /= loops;
  memcpy(sorted, alloc_ms, (size_t)loops * sizeof(double));
  double median = bench_median(sorted, (size_t)loops);

  bench_json_t j;
  bench_json_begin(&j, "frag");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "ptrs", (long long)ptrs);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "loops", loops);
  bench_json_str(&j, "free_by", free_by_main ? "main" : "owner");
  bench_json_num(&j, "loop_ms", mean);
  bench_json_num(&j, "loop_ms_median", median);
  bench_json_array(&j, "alloc_ms", alloc_ms, (size_t)loops > 64 ? 64 : (size_t)loops);
  bench_json_array(&j, "free_ms", free_ms, (size_t)loops > 64 ? 64 : (size_t)loops);
  bench_json_int(&j, "probe_bytes", (long long)probe);
  bench_json_int(&j, "probes_ok", probes_ok);
  bench_json_int(&j, "failed", failed);
  bench_json_num(&j, "rss_alloc_mib", (double)rss_alloc_max / 1048576.0);
  bench_json_num(&j, "rss_free_mib", (double)rss_free_last / 1048576.0);
  bench_json_cpu(&j, total);
  bench_json_end(&j);
  free(args);
  free(alloc_ms);
  free(free_ms);
  free(sorted);
  free(tids);
  return failed ? 1 : 0;
}
