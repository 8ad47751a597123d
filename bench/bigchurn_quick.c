/* bigchurn_quick.c — blocks of several MiB allocated, written and freed over
 * and over by one thread (or --threads of them), in a window of --live
 * blocks replaced at random. Reports the time and the minor page faults of
 * the loop: an allocator that gives each freed block back to the OS and
 * faults the next one's pages in again takes one fault per 4 KiB written.
 *
 *   bigchurn_quick [--iters N] [--min SIZE] [--max SIZE] [--live K]
 *                  [--threads T] [--touch pages|all|ends] [--pause-us U]
 *                  [--seed S]
 *
 * --touch: write a byte in every page (default), every byte, or only the
 * first and last. --pause-us: sleep after each block is written, as a
 * program that works on its buffer before the next would (longer than the
 * allocator's purge delay, it shows what that delay costs).
 *
 * Plain malloc/free only: the allocator is chosen with LD_PRELOAD. One JSON
 * object on the last line of stdout. Not part of the suite bench/run.py
 * runs; build it by hand:
 *   cc -O2 -pthread -Ibench bench/bigchurn_quick.c -o bigchurn_quick */
#include "bench_common.h"

typedef struct cfg {
  long iters, live, threads, pause_us;
  size_t min, max;
  int touch; /* 0: first and last byte, 1: a byte per page, 2: every byte */
  uint64_t seed;
} cfg_t;

static cfg_t C;

static void *worker(void *arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  bench_rng_t r;
  bench_rng_seed(&r, C.seed + id);
  char **v = bench_calloc((size_t)C.live, sizeof *v);
  size_t *len = bench_calloc((size_t)C.live, sizeof *len);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (long i = 0; i < C.iters; i++) {
    size_t j = (size_t)(bench_rng_next(&r) % (uint64_t)C.live);
    if (v[j]) {
      if (v[j][0] != (char)j || v[j][len[j] - 1] != (char)j) bench_die("block lost its contents");
      free(v[j]);
    }
    size_t n = bench_rng_range(&r, C.min, C.max);
    char *p = malloc(n);
    if (!p) bench_die("out of memory");
    if (C.touch == 2) memset(p, (int)i, n);
    else if (C.touch == 1)
      for (size_t k = 0; k < n; k += page) p[k] = (char)k;
    p[0] = (char)j;
    p[n - 1] = (char)j;
    v[j] = p;
    len[j] = n;
    if (C.pause_us) usleep((useconds_t)C.pause_us);
  }
  for (long j = 0; j < C.live; j++) free(v[j]);
  free(v);
  free(len);
  return NULL;
}

int main(int argc, char **argv) {
  C.iters = (long)bench_arg_count(argc, argv, "iters", 2000);
  C.min = (size_t)bench_arg_size(argc, argv, "min", 5u << 20);
  C.max = (size_t)bench_arg_size(argc, argv, "max", 25u << 20);
  C.live = (long)bench_arg_count(argc, argv, "live", 1);
  C.threads = (long)bench_arg_count(argc, argv, "threads", 1);
  C.seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  C.pause_us = (long)bench_arg_count(argc, argv, "pause-us", 0);
  const char *touch = bench_arg_str(argc, argv, "touch", "pages");
  C.touch = strcmp(touch, "all") == 0 ? 2 : strcmp(touch, "pages") == 0 ? 1 : 0;
  if (C.live < 1 || C.threads < 1 || C.min < 1 || C.max < C.min) bench_die("bad parameters");

  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  bench_cpu_t t0 = bench_cpu_now();
  pthread_t *t = bench_calloc((size_t)C.threads, sizeof *t);
  for (long i = 0; i < C.threads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) bench_die("pthread_create");
  for (long i = 0; i < C.threads; i++) pthread_join(t[i], NULL);
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), t0);
  getrusage(RUSAGE_SELF, &r1);
  size_t rss_end = bench_rss_bytes();
  usleep(200 * 1000);
  /* one more call after a pause: an allocator with delayed purging runs it */
  free(malloc(100000));
  size_t rss_later = bench_rss_bytes();
  printf("{\"wall_ms\": %.1f, \"user_ms\": %.1f, \"sys_ms\": %.1f, \"minflt\": %ld, \"peak_rss_kb\": %ld, "
         "\"rss_end_kb\": %zu, \"rss_later_kb\": %zu}\n",
         d.wall_ms, d.user_ms, d.sys_ms, r1.ru_minflt - r0.ru_minflt, bench_peak_rss_kb(), rss_end / 1024,
         rss_later / 1024);
  free(t);
  return 0;
}
