/* Same-size malloc then free, per thread (seed 001, Test 1 and Test 2).
 *
 * Every thread repeats R rounds of: allocate B blocks of S bytes, then free
 * them. With --check 1 (Test 2) each block is filled with a pattern right
 * after it is allocated and the whole content is checked before it is freed.
 * The work per thread is fixed, so the total time grows with the threads;
 * time per thread = total / threads stays flat for an allocator that scales.
 *
 *   bench_samesize --threads 4 --rounds 10k --batch 100 --size 64 [--check 1]
 */
#include "bench_common.h"

typedef struct {
  bench_worker_t w; /* bad: blocks whose content changed */
  long long rounds;
  size_t batch, size;
  int check;
} same_arg_t;

static void *same_thread(void *p) {
  same_arg_t *a = (same_arg_t *)p;
  unsigned char **blocks = (unsigned char **)bench_calloc(a->batch, sizeof *blocks);
  uint64_t sum = 0;
  bench_start_wait();
  for (long long r = 0; r < a->rounds; r++) {
    for (size_t i = 0; i < a->batch; i++) {
      unsigned char *q = (unsigned char *)malloc(a->size);
      if (!q) bench_die("malloc failed");
      if (a->check)
        memset(q, (int)((r + (long long)i + a->w.id) & 0xff), a->size);
      else
        q[0] = (unsigned char)i;
      blocks[i] = q;
    }
    for (size_t i = 0; i < a->batch; i++) {
      unsigned char *q = blocks[i];
      if (a->check) {
        unsigned char want = (unsigned char)((r + (long long)i + a->w.id) & 0xff);
        for (size_t k = 0; k < a->size; k++) {
          if (q[k] != want) {
            a->w.bad++;
            break;
          }
        }
      }
      sum += q[0];
      free(q);
    }
  }
  free(blocks);
  a->w.checksum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 1);
  long long rounds = bench_arg_count(argc, argv, "rounds", 10000);
  size_t batch = (size_t)bench_arg_count(argc, argv, "batch", 100);
  size_t size = bench_arg_size(argc, argv, "size", 64);
  int check = (int)bench_arg_count(argc, argv, "check", 0);
  if (threads < 1 || rounds < 0 || batch < 1 || size < 1) bench_die("team.bad arguments");

  same_arg_t proto = {.rounds = rounds, .batch = batch, .size = size, .check = check};
  bench_team_t team = bench_run_workers(threads, same_thread, &proto, sizeof proto, NULL);

  bench_json_t j;
  bench_json_begin(&j, "samesize");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "rounds", rounds);
  bench_json_int(&j, "batch", (long long)batch);
  bench_json_int(&j, "size", (long long)size);
  bench_json_int(&j, "check", check);
  bench_json_int(&j, "bad", team.bad);
  bench_json_cpu(&j, team.cpu);
  bench_json_num(&j, "ms_per_thread", team.cpu.wall_ms / threads);
  bench_json_end(&j);
  return team.bad ? 1 : 0;
}
