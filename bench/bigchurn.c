/* Big blocks allocated and freed over and over by one thread.
 *
 * LIVE slots; an operation picks a random slot, frees the block in it (after
 * checking the marks its allocation left) and allocates a new block of a
 * random size in [min, max], writing one byte in every page of it, as a
 * program that fills a buffer does. Each allocation therefore costs whatever
 * the allocator makes the kernel do for memory: a fresh mapping faults every
 * page in again, a block reused from memory the process kept costs nothing.
 * The minor page faults of the timed loop are reported beside the time.
 *
 *   bench_bigchurn --ops 200 --min 5MiB --max 25MiB [--live 3] [--seed 1]
 */
#include "bench_common.h"

typedef struct {
  unsigned char *p;
  size_t size;
  unsigned char mark;
} big_t;

#define PAGE 4096

int main(int argc, char **argv) {
  long long ops = bench_arg_count(argc, argv, "ops", 200);
  size_t min = bench_arg_size(argc, argv, "min", 5u << 20);
  size_t max = bench_arg_size(argc, argv, "max", 25u << 20);
  size_t live = (size_t)bench_arg_count(argc, argv, "live", 3);
  uint64_t seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  if (ops < 0 || live < 1 || min < 1 || max < min) bench_die("bad arguments");

  big_t *slots = (big_t *)bench_map(live * sizeof *slots, 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, seed);
  long long bad = 0;
  uint64_t sum = 0;
  double touched = 0;

  bench_cpu_t start = bench_cpu_now();
  for (long long i = 0; i < ops; i++) {
    big_t *s = &slots[bench_rng_next(&rng) % live];
    if (s->p) {
      if (s->p[0] != s->mark || s->p[s->size - 1] != s->mark) bad++;
      sum += s->p[s->size / 2];
      free(s->p);
    }
    s->size = bench_rng_range(&rng, min, max);
    s->mark = (unsigned char)(i | 1);
    s->p = (unsigned char *)malloc(s->size);
    if (!s->p) bench_die("malloc(%zu) failed", s->size);
    for (size_t off = 0; off < s->size; off += PAGE) s->p[off] = s->mark;
    s->p[s->size - 1] = s->mark;
    touched += (double)s->size;
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  for (size_t k = 0; k < live; k++) free(slots[k].p);
  bench_unmap(slots, live * sizeof *slots);
  bench_sink += sum;

  bench_json_t j;
  bench_json_begin(&j, "bigchurn");
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "live", (long long)live);
  bench_json_int(&j, "bad", bad);
  bench_json_cpu(&j, d);
  /* A fresh mapping faults each of its pages once: this ratio is near 1
   * when every block comes from new memory and near 0 when blocks are reused. */
  bench_json_num(&j, "faults_per_page", touched > 0 ? (double)d.minflt / (touched / PAGE) : 0);
  bench_json_num(&j, "ops_per_s", d.wall_ms > 0 ? (double)ops / d.wall_ms * 1e3 : 0);
  bench_json_end(&j);
  return bad ? 1 : 0;
}
