/* Two microbenchmarks in the style of the C library's own malloc benchmarks.
 *
 * --mode simple: for each size of 16, 32, ..., 4096 B and each batch count
 *   N of --blocks (default 25,400,1600), P/N rounds of "allocate N blocks of
 *   that size, then free them in the same order": P malloc+free pairs for
 *   every size and count (--pairs). One fixed size at a time,
 *   so the figure is the allocator's cost for a size class alone, with
 *   batches small enough to stay in a thread cache and large enough not to.
 *   --main 1 runs it on the main thread, otherwise on T worker threads at
 *   once (each its own loop): in some allocators the main thread and other
 *   threads take different paths. Reported: total time, and ns per
 *   malloc+free pair for each size (averaged over counts and threads).
 * --mode thread: each of T threads does K operations on its own window of W
 *   slots: free the block in a random slot and allocate a new one, of a
 *   log-uniform random size in [min, max] (8 B-32 KiB by default: as many
 *   blocks of 8-15 B as of 16-32 KiB). Work per thread is fixed, so past the
 *   core count the time grows with T; reported: time and total throughput.
 *
 *   bench_glibcbench --mode simple [--main 1 | --threads 2] [--pairs 1M] [--blocks 25,400,1600]
 *   bench_glibcbench --mode thread --threads 4 --ops 5M [--window 1024] [--min 8] [--max 32KiB]
 */
#include "bench_common.h"

#define NSIZES 9 /* 16 << 0 .. 16 << 8 */
#define MAXCOUNTS 8

typedef struct {
  bench_worker_t w;
  int simple;
  long long pairs, ops;
  size_t counts[MAXCOUNTS];
  int ncounts;
  size_t window, min, max;
  double size_ms[NSIZES];
} gb_arg_t;

static void simple_loop(gb_arg_t *a) {
  size_t most = 0;
  for (int c = 0; c < a->ncounts; c++)
    if (a->counts[c] > most) most = a->counts[c];
  unsigned char **blocks = (unsigned char **)bench_map(most * sizeof *blocks, 0);
  uint64_t sum = 0;
  for (int s = 0; s < NSIZES; s++) {
    size_t size = (size_t)16 << s;
    double t0 = bench_now_ms();
    for (int c = 0; c < a->ncounts; c++) {
      size_t n = a->counts[c];
      for (long long r = 0; r < a->pairs / (long long)n; r++) {
        for (size_t i = 0; i < n; i++) {
          blocks[i] = (unsigned char *)malloc(size);
          if (!blocks[i]) bench_die("malloc failed");
          blocks[i][0] = (unsigned char)i;
        }
        for (size_t i = 0; i < n; i++) {
          sum += blocks[i][0];
          free(blocks[i]);
        }
      }
    }
    a->size_ms[s] = bench_now_ms() - t0;
  }
  bench_unmap(blocks, most * sizeof *blocks);
  a->w.checksum = sum;
}

static void thread_loop(gb_arg_t *a) {
  unsigned char **slots = (unsigned char **)bench_map(a->window * sizeof *slots, 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, 23 + (uint64_t)a->w.id);
  uint64_t sum = 0;
  for (long long i = 0; i < a->ops; i++) {
    size_t j = (size_t)(bench_rng_next(&rng) % a->window);
    if (slots[j]) sum += slots[j][0];
    free(slots[j]);
    size_t size = bench_rng_logsize(&rng, a->min, a->max);
    slots[j] = (unsigned char *)malloc(size);
    if (!slots[j]) bench_die("malloc failed");
    slots[j][0] = (unsigned char)size;
  }
  for (size_t j = 0; j < a->window; j++) free(slots[j]);
  bench_unmap(slots, a->window * sizeof *slots);
  a->w.checksum = sum;
}

static void *gb_thread(void *p) {
  gb_arg_t *a = (gb_arg_t *)p;
  bench_start_wait();
  if (a->simple)
    simple_loop(a);
  else
    thread_loop(a);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = bench_arg_str(argc, argv, "mode", "simple");
  int simple = strcmp(mode, "simple") == 0;
  if (!simple && strcmp(mode, "thread") != 0) bench_die("--mode simple|thread");
  int on_main = (int)bench_arg_count(argc, argv, "main", 0);
  int threads = on_main ? 1 : (int)bench_arg_count(argc, argv, "threads", 1);
  gb_arg_t proto;
  memset(&proto, 0, sizeof proto);
  proto.simple = simple;
  proto.pairs = bench_arg_count(argc, argv, "pairs", 1000000);
  proto.ops = bench_arg_count(argc, argv, "ops", 1000000);
  proto.window = (size_t)bench_arg_count(argc, argv, "window", 1024);
  proto.min = bench_arg_size(argc, argv, "min", 8);
  proto.max = bench_arg_size(argc, argv, "max", 32 << 10);
  char counts[128];
  snprintf(counts, sizeof counts, "%s", bench_arg_str(argc, argv, "blocks", "25,400,1600"));
  for (char *save = NULL, *tok = strtok_r(counts, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (proto.ncounts == MAXCOUNTS) bench_die("too many --blocks counts");
    proto.counts[proto.ncounts] = (size_t)(bench_parse_number(tok, 0) + 0.5);
    if (proto.counts[proto.ncounts++] < 1) bench_die("bad --blocks");
  }
  if (threads < 1 || proto.pairs < 0 || proto.ops < 0 || proto.window < 1 || proto.min < 1 ||
      proto.max < proto.min || proto.ncounts < 1)
    bench_die("bad arguments");

  bench_cpu_t d;
  gb_arg_t *args = NULL;
  if (on_main) {
    args = (gb_arg_t *)bench_workers_new(1, &proto, sizeof proto);
    bench_cpu_t start = bench_cpu_now();
    if (simple)
      simple_loop(args);
    else
      thread_loop(args);
    d = bench_cpu_diff(bench_cpu_now(), start);
    bench_workers_fold(args, 1, sizeof *args);
  } else {
    bench_team_t t = bench_run_workers(threads, gb_thread, &proto, sizeof proto, (void **)&args);
    d = t.cpu;
  }

  bench_json_t j;
  bench_json_begin(&j, "glibcbench");
  bench_json_str(&j, "mode", simple ? "simple" : "thread");
  bench_json_int(&j, "threads", threads);
  bench_json_bool(&j, "main", on_main);
  bench_json_cpu(&j, d);
  if (simple) {
    long long pairs = 0;
    for (int c = 0; c < proto.ncounts; c++)
      pairs += proto.pairs / (long long)proto.counts[c] * (long long)proto.counts[c];
    bench_json_int(&j, "pairs", proto.pairs);
    for (int s = 0; s < NSIZES; s++) {
      double ms = 0;
      for (int t = 0; t < threads; t++) ms += args[t].size_ms[s];
      char key[32];
      snprintf(key, sizeof key, "ns_%d", 16 << s);
      bench_json_num(&j, key, pairs > 0 ? ms / threads * 1e6 / (double)pairs : 0);
    }
  } else {
    bench_json_int(&j, "ops", proto.ops);
    bench_json_int(&j, "window", (long long)proto.window);
    bench_json_int(&j, "min", (long long)proto.min);
    bench_json_int(&j, "max", (long long)proto.max);
    bench_json_num(&j, "mops_per_s", d.wall_ms > 0 ? (double)proto.ops * threads / d.wall_ms / 1e3 : 0);
  }
  free(args);
  bench_json_end(&j);
  return 0;
}
