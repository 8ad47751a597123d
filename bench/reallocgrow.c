/* Growing buffers with realloc.
 *
 * Each thread grows B buffers from empty to F bytes by random steps in
 * [step-min, step-max], taking the buffers in turn so that a buffer's
 * neighbours keep changing, and writes every new byte. Then all buffers are
 * freed; this is repeated R rounds.
 *
 *   bench_reallocgrow --threads 2 --buffers 64 --final 64k --rounds 5 [--step-min 1] [--step-max 64]
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w;
  size_t buffers, final_size, step_min, step_max;
  int rounds;
  long long reallocs;
} grow_arg_t;

static void *grow_thread(void *p) {
  grow_arg_t *a = (grow_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, 99 + (uint64_t)a->w.id);
  unsigned char **buf = (unsigned char **)bench_calloc(a->buffers, sizeof *buf);
  size_t *len = (size_t *)bench_calloc(a->buffers, sizeof *len);
  uint64_t sum = 0;
  long long reallocs = 0;
  bench_start_wait();
  for (int r = 0; r < a->rounds; r++) {
    size_t done = 0;
    memset(len, 0, a->buffers * sizeof *len);
    while (done < a->buffers) {
      done = 0;
      for (size_t b = 0; b < a->buffers; b++) {
        if (len[b] >= a->final_size) {
          done++;
          continue;
        }
        size_t step = bench_rng_range(&rng, a->step_min, a->step_max);
        size_t n = len[b] + step;
        if (n > a->final_size) n = a->final_size;
        unsigned char *q = (unsigned char *)realloc(buf[b], n);
        if (!q) bench_die("realloc failed");
        memset(q + len[b], (int)(b & 0xff), n - len[b]);
        buf[b] = q;
        len[b] = n;
        reallocs++;
      }
    }
    for (size_t b = 0; b < a->buffers; b++) {
      sum += buf[b][len[b] / 2];
      free(buf[b]);
      buf[b] = NULL;
    }
  }
  free(buf);
  free(len);
  a->w.checksum = sum;
  a->reallocs = reallocs;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 1);
  size_t buffers = (size_t)bench_arg_count(argc, argv, "buffers", 64);
  size_t final_size = bench_arg_size(argc, argv, "final", 64 * 1024);
  int rounds = (int)bench_arg_count(argc, argv, "rounds", 5);
  size_t step_min = bench_arg_size(argc, argv, "step-min", 1);
  size_t step_max = bench_arg_size(argc, argv, "step-max", 64);
  if (threads < 1 || buffers < 1 || final_size < 1 || rounds < 1 || step_min < 1 || step_max < step_min)
    bench_die("bad arguments");

  grow_arg_t proto = {
      .buffers = buffers, .final_size = final_size, .step_min = step_min, .step_max = step_max, .rounds = rounds};
  void *done = NULL;
  bench_cpu_t d = bench_run_workers(threads, grow_thread, &proto, sizeof proto, &done).cpu;
  grow_arg_t *args = (grow_arg_t *)done;
  long long reallocs = 0;
  for (int i = 0; i < threads; i++) reallocs += args[i].reallocs;
  free(args);

  bench_json_t j;
  bench_json_begin(&j, "reallocgrow");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "buffers", (long long)buffers);
  bench_json_int(&j, "final", (long long)final_size);
  bench_json_int(&j, "rounds", rounds);
  bench_json_int(&j, "reallocs", reallocs);
  bench_json_cpu(&j, d);
  bench_json_end(&j);
  return 0;
}
