/* The other common ways of asking for a small block, for instruction
 * counting as bench_fastpath counts malloc and free (the same method: two
 * values of N, the difference of the counts over the difference of N).
 *
 *   bench_apipath calloc SIZE N    N times: p = calloc(1, SIZE); free(p)
 *   bench_apipath aligned SIZE N   N times: p = aligned_alloc(64, SIZE rounded up to 64); free(p)
 *   bench_apipath realloc SIZE N   N times: p = malloc(SIZE); p = realloc(p, 2 * SIZE); free(p)
 *
 * A program of its own: in bench_fastpath these loops changed how the
 * compiler laid out the malloc/free loop (one instruction more a pair),
 * whose count is the fast path's yardstick.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s calloc|aligned|realloc SIZE N\n", argv[0]);
    return 2;
  }
  size_t size = (size_t)strtoull(argv[2], NULL, 10);
  long long n = strtoll(argv[3], NULL, 10);
  if (size == 0 || n < 0) return 2;
  if (strcmp(argv[1], "calloc") == 0) {
    for (long long i = 0; i < n; i++) {
      void *p = calloc(1, size);
      sink = p;
      free(p);
    }
  } else if (strcmp(argv[1], "aligned") == 0) {
    size_t rounded = (size + 63) & ~(size_t)63; /* C11 asks for a multiple of the alignment */
    for (long long i = 0; i < n; i++) {
      void *p = aligned_alloc(64, rounded);
      sink = p;
      free(p);
    }
  } else if (strcmp(argv[1], "realloc") == 0) {
    for (long long i = 0; i < n; i++) {
      void *p = malloc(size);
      sink = p;
      void *q = realloc(p, 2 * size);
      if (q) p = q;
      sink = p;
      free(p);
    }
  } else {
    return 2;
  }
  printf("{\"bench\":\"apipath\",\"mode\":\"%s\",\"size\":%zu,\"n\":%lld}\n", argv[1], size, n);
  return 0;
}
