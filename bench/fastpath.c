/* The allocator's fast path, for instruction counting.
 *
 *   bench_fastpath pair SIZE N   N times: p = malloc(SIZE); free(p)
 *   bench_fastpath ring SIZE N   a ring of 1000 live blocks: N times free the
 *                                oldest and allocate a new one in its place
 *   bench_fastpath loop SIZE N   the same loop without allocating
 *
 * Meant to be run under an instruction counter with two values of N: the
 * difference divided by the difference of N is the cost of one iteration,
 * start-up cancelled. Pointers are stored to a volatile sink so the compiler
 * cannot drop the calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 1000

static void *volatile sink;

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s pair|ring|loop SIZE N\n", argv[0]);
    return 2;
  }
  size_t size = (size_t)strtoull(argv[2], NULL, 10);
  long long n = strtoll(argv[3], NULL, 10);
  if (size == 0 || n < 0) return 2;
  if (strcmp(argv[1], "pair") == 0) {
    for (long long i = 0; i < n; i++) {
      void *p = malloc(size);
      sink = p;
      free(p);
    }
  } else if (strcmp(argv[1], "ring") == 0) {
    static void *ring[RING];
    for (int i = 0; i < RING; i++) ring[i] = malloc(size);
    int k = 0;
    for (long long i = 0; i < n; i++) {
      free(ring[k]);
      void *p = malloc(size);
      ring[k] = p;
      sink = p;
      if (++k == RING) k = 0;
    }
    for (int i = 0; i < RING; i++) free(ring[i]);
  } else if (strcmp(argv[1], "loop") == 0) {
    for (long long i = 0; i < n; i++) sink = &size;
  } else {
    return 2;
  }
  printf("{\"bench\":\"fastpath\",\"mode\":\"%s\",\"size\":%zu,\"n\":%lld}\n", argv[1], size, n);
  return 0;
}
