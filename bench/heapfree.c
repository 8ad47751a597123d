/* Releasing many small blocks: one by one, or all at once by destroying the
 * heap that holds them (seed 000 heap groups: a sub-heap dropped whole).
 *
 *   bench_heapfree --blocks 1M --min 16 --max 128 [--rounds 3]
 *
 * Every allocator: malloc N blocks, then free them one by one ("malloc" and
 * "free" phases). With freeway's heap API present (fw_heap_new,
 * fw_heap_malloc, fw_heap_destroy, found with dlsym at run time; the program
 * is not linked against freeway) also:
 *   heap_free:    blocks from a private heap, freed one by one with free(),
 *                 then the empty heap destroyed;
 *   heap_destroy: blocks from a private heap, released by fw_heap_destroy.
 * Times are the median over the rounds, in ms.
 */
#include "bench_common.h"
#include "freeway.h"

#include <dlfcn.h>

typedef struct {
  __typeof__(&fw_heap_new) heap_new;
  __typeof__(&fw_heap_malloc) heap_malloc;
  __typeof__(&fw_heap_destroy) heap_destroy;
} heap_api_t;

static int heap_api_load(heap_api_t *api) {
  api->heap_new = (__typeof__(&fw_heap_new))dlsym(RTLD_DEFAULT, "fw_heap_new");
  api->heap_malloc = (__typeof__(&fw_heap_malloc))dlsym(RTLD_DEFAULT, "fw_heap_malloc");
  api->heap_destroy = (__typeof__(&fw_heap_destroy))dlsym(RTLD_DEFAULT, "fw_heap_destroy");
  return api->heap_new && api->heap_malloc && api->heap_destroy;
}

/* A new private heap holding the n blocks of sizes[] (first byte written),
 * their addresses in ptr[]; *ms gets the time the blocks took. */
static fw_heap_t *heap_fill(const heap_api_t *api, unsigned char **ptr, const size_t *sizes, size_t n, double *ms) {
  fw_heap_t *h = api->heap_new();
  if (!h) bench_die("fw_heap_new failed");
  double t0 = bench_now_ms();
  for (size_t i = 0; i < n; i++) {
    ptr[i] = (unsigned char *)api->heap_malloc(h, sizes[i]);
    if (!ptr[i]) bench_die("fw_heap_malloc failed");
    ptr[i][0] = (unsigned char)i;
  }
  *ms = bench_now_ms() - t0;
  return h;
}

int main(int argc, char **argv) {
  size_t blocks = (size_t)bench_arg_count(argc, argv, "blocks", 1000000);
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 128);
  int rounds = (int)bench_arg_count(argc, argv, "rounds", 3);
  if (blocks < 1 || min < 1 || max < min || rounds < 1 || rounds > 100) bench_die("bad arguments");

  unsigned char **ptr = (unsigned char **)bench_map(blocks * sizeof *ptr, 0);
  size_t *sizes = (size_t *)bench_map(blocks * sizeof *sizes, 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, 1);
  for (size_t i = 0; i < blocks; i++) sizes[i] = bench_rng_range(&rng, min, max);

  double m_alloc[100], m_free[100], h_alloc[100], h_free[100], d_alloc[100], d_destroy[100];
  heap_api_t api;
  int have_heap = heap_api_load(&api);
  bench_cpu_t start = bench_cpu_now();
  for (int r = 0; r < rounds; r++) {
    double t0 = bench_now_ms();
    for (size_t i = 0; i < blocks; i++) {
      ptr[i] = (unsigned char *)malloc(sizes[i]);
      if (!ptr[i]) bench_die("malloc failed");
      ptr[i][0] = (unsigned char)i;
    }
    double t1 = bench_now_ms();
    for (size_t i = 0; i < blocks; i++) free(ptr[i]);
    double t2 = bench_now_ms();
    m_alloc[r] = t1 - t0;
    m_free[r] = t2 - t1;
    if (!have_heap) continue;

    fw_heap_t *h = heap_fill(&api, ptr, sizes, blocks, &h_alloc[r]);
    t1 = bench_now_ms();
    for (size_t i = 0; i < blocks; i++) free(ptr[i]);
    api.heap_destroy(h);
    h_free[r] = bench_now_ms() - t1;

    h = heap_fill(&api, ptr, sizes, blocks, &d_alloc[r]);
    t1 = bench_now_ms();
    api.heap_destroy(h);
    d_destroy[r] = bench_now_ms() - t1;
  }
  bench_cpu_t d = bench_cpu_diff(bench_cpu_now(), start);

  bench_json_t j;
  bench_json_begin(&j, "heapfree");
  bench_json_int(&j, "blocks", (long long)blocks);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "rounds", rounds);
  bench_json_num(&j, "malloc_ms", bench_median(m_alloc, (size_t)rounds));
  bench_json_num(&j, "free_ms", bench_median(m_free, (size_t)rounds));
  bench_json_bool(&j, "heap_api", have_heap);
  if (have_heap) {
    bench_json_num(&j, "heap_malloc_ms", bench_median(h_alloc, (size_t)rounds));
    bench_json_num(&j, "heap_free_ms", bench_median(h_free, (size_t)rounds));
    bench_json_num(&j, "heap_destroy_malloc_ms", bench_median(d_alloc, (size_t)rounds));
    bench_json_num(&j, "heap_destroy_ms", bench_median(d_destroy, (size_t)rounds));
  } else {
    bench_json_str(&j, "note", "fw_heap_* not found: heap destroy not measured");
  }
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  munmap(ptr, blocks * sizeof *ptr);
  munmap(sizes, blocks * sizeof *sizes);
  return 0;
}
