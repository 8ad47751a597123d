/* One thread, a long run over a working set of small objects with mixed
 * lifetimes.
 *
 * A working set of S slots. An operation picks a slot, frees the block in it
 * (checking its marks) and, three times in four, allocates a new one there.
 * Slots are picked with a skew (slot floor(S * u^3), u uniform in [0, 1)),
 * so a block's expected lifetime runs from about S^(1/3) operations (the
 * first slot; 16 for S = 4000) to about 3S (the last): short-lived
 * temporaries and longer-lived data interleave in the heap, as they do in a
 * program's own heap. About 3S/4 blocks are live at any time. Sizes: 63 in
 * 64 log-uniform in [8, 512] B (as many of 8-15 B as of 256-511 B), the
 * rest uniform up to 8 KiB.
 *
 *   bench_alloctest --ops 30M [--slots 4000] [--seed 1]
 */
#include "bench_common.h"

typedef struct {
  unsigned char *p;
  uint32_t size;
} obj_t;

int main(int argc, char **argv) {
  long long ops = bench_arg_count(argc, argv, "ops", 30000000);
  size_t nslots = (size_t)bench_arg_count(argc, argv, "slots", 4000);
  uint64_t seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  if (ops < 0 || nslots < 1) bench_die("bad arguments");

  obj_t *slots = (obj_t *)bench_map(nslots * sizeof *slots, 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, seed);
  long long bad = 0, allocs = 0;
  uint64_t sum = 0;
  size_t live = 0, peak_live = 0;

  bench_cpu_t start = bench_cpu_now();
  for (long long i = 0; i < ops; i++) {
    uint64_t x = bench_rng_next(&rng);
    double u = (double)(x >> 11) * (1.0 / 9007199254740992.0);
    obj_t *s = &slots[(size_t)(u * u * u * (double)nslots)];
    if (s->p) {
      if (s->p[0] != (unsigned char)s->size || s->p[s->size - 1] != (unsigned char)(s->size >> 3)) bad++;
      sum += s->p[s->size / 2];
      free(s->p);
      s->p = NULL;
      live--;
    }
    uint64_t y = bench_rng_next(&rng);
    if ((y & 3) == 0) continue;
    size_t size = (y >> 2) % 64 == 0 ? bench_rng_range(&rng, 513, 8192) : bench_rng_logsize(&rng, 8, 512);
    unsigned char *p = (unsigned char *)malloc(size);
    if (!p) bench_die("malloc failed");
    /* Touch it as a constructor would: header, one middle word, the end. */
    p[0] = (unsigned char)size;
    p[size / 2] = (unsigned char)i;
    p[size - 1] = (unsigned char)(size >> 3);
    s->p = p;
    s->size = (uint32_t)size;
    allocs++;
    if (++live > peak_live) peak_live = live;
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);
  for (size_t k = 0; k < nslots; k++) free(slots[k].p);
  bench_unmap(slots, nslots * sizeof *slots);
  bench_sink += sum;

  bench_json_t j;
  bench_json_begin(&j, "alloctest");
  bench_json_int(&j, "ops", ops);
  bench_json_int(&j, "slots", (long long)nslots);
  bench_json_int(&j, "allocs", allocs);
  bench_json_int(&j, "peak_live", (long long)peak_live);
  bench_json_int(&j, "bad", bad);
  bench_json_cpu(&j, d);
  bench_json_num(&j, "ns_per_op", ops > 0 ? d.wall_ms * 1e6 / (double)ops : 0);
  bench_json_end(&j);
  return bad ? 1 : 0;
}
