/* False sharing between small blocks of different threads.
 *
 * --mode thrash: every thread repeatedly allocates a small block, writes it
 *   W times and frees it. If the allocator hands neighbouring bytes of one
 *   cache line to different threads, the writes fight over that line.
 * --mode scratch: the main thread allocates one small block per worker and
 *   hands it over; each worker frees the block it was given and then runs the
 *   same loop. An allocator that reuses the freed memory for the worker's
 *   own blocks puts them in lines shared with the other workers.
 *
 *   bench_falseshare --mode thrash --threads 2 --iters 100k --writes 100 [--size 8]
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w;
  long long iters, writes;
  size_t size;
  unsigned char *given;
} fs_arg_t;

static void *fs_thread(void *p) {
  fs_arg_t *a = (fs_arg_t *)p;
  bench_start_wait();
  free(a->given);
  uint64_t sum = 0;
  for (long long i = 0; i < a->iters; i++) {
    volatile unsigned char *q = (volatile unsigned char *)malloc(a->size);
    if (!q) bench_die("malloc failed");
    for (long long w = 0; w < a->writes; w++) q[(size_t)w % a->size] = (unsigned char)(q[(size_t)w % a->size] + 1);
    sum += q[0];
    free((void *)q);
  }
  a->w.checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = bench_arg_str(argc, argv, "mode", "thrash");
  int threads = (int)bench_arg_count(argc, argv, "threads", 2);
  long long iters = bench_arg_count(argc, argv, "iters", 100000);
  long long writes = bench_arg_count(argc, argv, "writes", 100);
  size_t size = bench_arg_size(argc, argv, "size", 8);
  int scratch = strcmp(mode, "scratch") == 0;
  if (!scratch && strcmp(mode, "thrash") != 0) bench_die("--mode thrash|scratch");
  if (threads < 1 || iters < 0 || writes < 0 || size < 1) bench_die("bad arguments");

  fs_arg_t proto = {.iters = iters, .writes = writes, .size = size};
  fs_arg_t *args = (fs_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  for (int i = 0; scratch && i < threads; i++) {
    args[i].given = (unsigned char *)malloc(size);
    if (!args[i].given) bench_die("malloc failed");
    args[i].given[0] = 0;
  }
  bench_cpu_t d = bench_run_threads(threads, fs_thread, args, sizeof *args);
  bench_workers_fold(args, threads, sizeof *args);
  free(args);

  bench_json_t j;
  bench_json_begin(&j, "falseshare");
  bench_json_str(&j, "mode", scratch ? "scratch" : "thrash");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "iters", iters);
  bench_json_int(&j, "writes", writes);
  bench_json_int(&j, "size", (long long)size);
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
