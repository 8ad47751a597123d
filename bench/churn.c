/* Memory given back after a burst.
 *
 * T threads allocate TOTAL bytes together in small blocks (random sizes in
 * [min, max], every block written), then free all of them. For the next
 * SETTLE ms every thread keeps using the allocator lightly (a few small
 * malloc/free every POLL ms) while the main thread samples the resident set
 * size from /proc/self/statm. Reports RSS before the burst, at its peak,
 * right after the frees, the lowest seen while settling and at the end.
 *
 *   bench_churn --threads 2 --total 1G [--min 16] [--max 256] [--settle-ms 1000] [--poll-ms 10]
 *
 * The pointer tables are mapped directly from the OS so that only the
 * blocks themselves go through the allocator.
 */
#include "bench_common.h"

#include <stdatomic.h>

typedef struct {
  bench_worker_t w;
  size_t bytes, min, max, count, cap;
  unsigned char **blocks;
  long long poll_us;
} churn_arg_t;

static pthread_barrier_t phase;
static _Atomic int settling;

static void sleep_us(long long us) {
  struct timespec ts;
  ts.tv_sec = (time_t)(us / 1000000);
  ts.tv_nsec = (long)(us % 1000000) * 1000;
  nanosleep(&ts, NULL);
}

static void light_use(uint64_t *sum) {
  void *p[8];
  for (int k = 0; k < 8; k++) {
    p[k] = malloc(64);
    if (p[k]) ((unsigned char *)p[k])[0] = (unsigned char)k;
  }
  for (int k = 0; k < 8; k++) {
    if (p[k]) *sum += ((unsigned char *)p[k])[0];
    free(p[k]);
  }
}

static void *churn_thread(void *p) {
  churn_arg_t *a = (churn_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, 3 + (uint64_t)a->w.id);
  uint64_t sum = 0;
  pthread_barrier_wait(&phase); /* start allocating */
  size_t got = 0;
  while (got < a->bytes && a->count < a->cap) {
    size_t size = bench_rng_range(&rng, a->min, a->max);
    unsigned char *q = (unsigned char *)malloc(size);
    if (!q) bench_die("malloc failed");
    memset(q, (int)(got & 0xff), size);
    a->blocks[a->count++] = q;
    got += size;
  }
  pthread_barrier_wait(&phase); /* allocation done */
  pthread_barrier_wait(&phase); /* start freeing */
  for (size_t i = 0; i < a->count; i++) {
    sum += a->blocks[i][0];
    free(a->blocks[i]);
  }
  pthread_barrier_wait(&phase); /* freeing done */
  while (atomic_load(&settling)) {
    light_use(&sum);
    sleep_us(a->poll_us);
  }
  a->w.checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 2);
  size_t total = bench_arg_size(argc, argv, "total", (size_t)1 << 30);
  size_t min = bench_arg_size(argc, argv, "min", 16);
  size_t max = bench_arg_size(argc, argv, "max", 256);
  long long settle_ms = bench_arg_count(argc, argv, "settle-ms", 1000);
  long long poll_ms = bench_arg_count(argc, argv, "poll-ms", 10);
  if (threads < 1 || min < 1 || max < min || settle_ms < 0 || poll_ms < 1) bench_die("bad arguments");

  size_t bytes = total / (size_t)threads;
  churn_arg_t proto = {.bytes = bytes, .min = min, .max = max, .cap = bytes / min + 1, .poll_us = poll_ms * 1000};
  churn_arg_t *args = (churn_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)threads, sizeof *tids);
  atomic_store(&settling, 1);
  pthread_barrier_init(&phase, NULL, (unsigned)threads + 1);
  for (int i = 0; i < threads; i++)
    args[i].blocks = (unsigned char **)bench_map(proto.cap * sizeof(void *), MAP_NORESERVE);
  bench_spawn(tids, threads, churn_thread, args, sizeof *args);
  /* Page tables of the pointer tables are not the allocator's: RSS figures
   * below exclude them by subtracting what they hold at each point. */
  size_t rss_before = bench_rss_bytes();
  double t0 = bench_now_ms();
  pthread_barrier_wait(&phase);
  pthread_barrier_wait(&phase);
  double t1 = bench_now_ms();
  size_t tables = 0, blocks = 0;
  for (int i = 0; i < threads; i++) {
    tables += (args[i].count * sizeof(void *) + 4095) & ~(size_t)4095;
    blocks += args[i].count;
  }
  size_t rss_peak = bench_rss_bytes() - tables;
  pthread_barrier_wait(&phase);
  pthread_barrier_wait(&phase);
  double t2 = bench_now_ms();
  size_t rss_freed = bench_rss_bytes() - tables;
  size_t rss_min = rss_freed, rss_end = rss_freed;
  double settled_at = 0;
  while (bench_now_ms() - t2 < (double)settle_ms) {
    sleep_us(poll_ms * 1000);
    uint64_t s = 0;
    light_use(&s);
    bench_sink += s;
    rss_end = bench_rss_bytes() - tables;
    if (rss_end < rss_min) {
      rss_min = rss_end;
      settled_at = bench_now_ms() - t2;
    }
  }
  atomic_store(&settling, 0);
  bench_join(tids, threads);
  bench_workers_fold(args, threads, sizeof *args);
  for (int i = 0; i < threads; i++) bench_unmap(args[i].blocks, args[i].cap * sizeof(void *));
  pthread_barrier_destroy(&phase);
  free(args);
  free(tids);

  const double mib = 1048576.0;
  bench_json_t j;
  bench_json_begin(&j, "churn");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "total", (long long)total);
  bench_json_int(&j, "blocks", (long long)blocks);
  bench_json_num(&j, "alloc_ms", t1 - t0);
  bench_json_num(&j, "free_ms", t2 - t1);
  bench_json_num(&j, "wall_ms", t2 - t0);
  bench_json_num(&j, "rss_before_mib", (double)rss_before / mib);
  bench_json_num(&j, "rss_peak_mib", (double)rss_peak / mib);
  bench_json_num(&j, "rss_after_free_mib", (double)rss_freed / mib);
  bench_json_num(&j, "rss_settled_min_mib", (double)rss_min / mib);
  bench_json_num(&j, "rss_end_mib", (double)rss_end / mib);
  bench_json_num(&j, "settled_after_ms", settled_at);
  bench_json_num(&j, "settle_ms", (double)settle_ms);
  bench_json_end(&j);
  return 0;
}
