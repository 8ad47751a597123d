/* A request/response server's allocation pattern.
 *
 * T worker threads serve a fixed total of N requests between them. Serving a
 * request allocates 4 to 40 blocks of log-uniform random sizes in
 * [min, max] (1 in 128 up to --large instead: a request body), writes the
 * first bytes of each, and decides each block's lifetime:
 *   - 60%: request scope, freed when the response is done, in random order;
 *   - 20%: scratch, freed right after the next allocation;
 *   - 15%: the thread's own cache (a ring of C slots): freed when a later
 *     request of the same thread evicts it;
 *   - 5%: a cache shared by all workers (S slots, swapped in atomically): the
 *     block it evicts, which is freed at once, was most often allocated by
 *     another worker.
 * More threads than cores (as a server with a thread per connection has)
 * makes workers get preempted in the middle of their requests.
 *
 *   bench_rptest --threads 8 --requests 400k [--min 16] [--max 16KiB] [--large 128KiB]
 *                [--cache 256] [--shared 4096]
 */
#include "bench_common.h"

#include <stdatomic.h>

#define MAX_BLOCKS 40

typedef struct {
  uint32_t size;
  uint32_t check;
} hdr_t;

static uint32_t check_of(uint32_t size) { return size * 2654435761u ^ 0x85ebca6bu; }

typedef struct {
  bench_worker_t w;
  int threads;
  long long requests; /* the total over all workers */
  size_t min, max, large, ncache, nshared;
  _Atomic(hdr_t *) *shared;
} rp_arg_t;

static hdr_t *new_block(rp_arg_t *a, bench_rng_t *r) {
  size_t size = (bench_rng_next(r) & 127) == 0 ? bench_rng_range(r, a->max, a->large)
                                                 : bench_rng_logsize(r, a->min, a->max);
  hdr_t *h = (hdr_t *)malloc(size);
  if (!h) bench_die("malloc failed");
  h->size = (uint32_t)size;
  h->check = check_of(h->size);
  size_t body = size < 64 ? size : 64;
  memset((unsigned char *)h + sizeof *h, (int)(size & 0xff), body - sizeof *h);
  ((unsigned char *)h)[size - 1] = (unsigned char)size;
  return h;
}

static void drop_block(rp_arg_t *a, hdr_t *h) {
  if (!h) return;
  if (h->check != check_of(h->size) || ((unsigned char *)h)[h->size - 1] != (unsigned char)h->size) a->w.bad++;
  a->w.checksum += h->size;
  free(h);
}

static void *rp_thread(void *p) {
  rp_arg_t *a = (rp_arg_t *)p;
  long long share = a->requests / a->threads + (a->w.id < a->requests % a->threads ? 1 : 0);
  bench_rng_t rng;
  bench_rng_seed(&rng, 29 + (uint64_t)a->w.id);
  hdr_t **cache = (hdr_t **)bench_map(a->ncache * sizeof *cache, 0);
  size_t cache_next = 0;
  hdr_t *scoped[MAX_BLOCKS];
  bench_start_wait();
  for (long long q = 0; q < share; q++) {
    size_t n = bench_rng_range(&rng, 4, MAX_BLOCKS), nscoped = 0;
    hdr_t *scratch = NULL;
    for (size_t i = 0; i < n; i++) {
      hdr_t *h = new_block(a, &rng);
      drop_block(a, scratch);
      scratch = NULL;
      unsigned kind = (unsigned)(bench_rng_next(&rng) % 100);
      if (kind < 60) {
        scoped[nscoped++] = h;
      } else if (kind < 80) {
        scratch = h;
      } else if (kind < 95) {
        drop_block(a, cache[cache_next]);
        cache[cache_next] = h;
        cache_next = (cache_next + 1) % a->ncache;
      } else {
        size_t k = (size_t)(bench_rng_next(&rng) % a->nshared);
        drop_block(a, atomic_exchange_explicit(&a->shared[k], h, memory_order_acq_rel));
      }
    }
    drop_block(a, scratch);
    /* Response done: the request's blocks go, in no particular order. */
    while (nscoped) {
      size_t k = (size_t)(bench_rng_next(&rng) % nscoped);
      drop_block(a, scoped[k]);
      scoped[k] = scoped[--nscoped];
    }
  }
  for (size_t k = 0; k < a->ncache; k++) drop_block(a, cache[k]);
  bench_unmap(cache, a->ncache * sizeof *cache);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 4);
  long long requests = bench_arg_count(argc, argv, "requests", 400000);
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 16 << 10);
  size_t large = bench_arg_size(argc, argv, "large", 128 << 10);
  size_t ncache = (size_t)bench_arg_count(argc, argv, "cache", 256);
  size_t nshared = (size_t)bench_arg_count(argc, argv, "shared", 4096);
  if (threads < 1 || requests < 0 || min < sizeof(hdr_t) || max < min || large < max || ncache < 1 || nshared < 1)
    bench_die("bad arguments");

  _Atomic(hdr_t *) *shared = (_Atomic(hdr_t *) *)bench_map(nshared * sizeof *shared, 0);
  for (size_t k = 0; k < nshared; k++) atomic_init(&shared[k], NULL);
  rp_arg_t proto = {.threads = threads, .requests = requests, .min = min, .max = max, .large = large,
                    .ncache = ncache, .nshared = nshared, .shared = shared};
  bench_team_t t = bench_run_workers(threads, rp_thread, &proto, sizeof proto, NULL);
  rp_arg_t last = proto;
  for (size_t k = 0; k < nshared; k++) drop_block(&last, atomic_load(&shared[k]));
  bench_unmap((void *)shared, nshared * sizeof *shared);
  long long bad = t.bad + last.w.bad;
  bench_sink += last.w.checksum;

  bench_json_t j;
  bench_json_begin(&j, "rptest");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "requests", requests);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "bad", bad);
  bench_json_cpu(&j, t.cpu);
  bench_json_num(&j, "krequests_per_s", t.cpu.wall_ms > 0 ? (double)requests / t.cpu.wall_ms : 0);
  bench_json_end(&j);
  return bad ? 1 : 0;
}
