/* obs_prog — allocates known amounts from known call sites, then leaves
 * them live at exit, for test_obs.py to find in freeway's reports
 * (docs/observability.md). Run with LD_PRELOAD=libfreeway.so and the
 * report options; writes the run-time addresses of its call sites to the
 * file named by its first argument, as "name address" lines (their sizes
 * come from the symbol table).
 *
 * What it leaves live: 10000 blocks of 100 bytes from site_small, 1000
 * blocks of 300 bytes from site_thread (on a thread that has exited), one
 * block of 300000 bytes and one of 3 MiB from site_big; 10000 further
 * blocks of 100 bytes are freed. Every live block is written whole, so
 * that it is resident. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SMALL 10000
#define N_THREAD 1000

static void *keep[2 * N_SMALL + N_THREAD + 2];

__attribute__((noinline)) void *site_small(size_t n) {
  void *p = malloc(n);
  __asm__ volatile("" ::: "memory"); /* no tail call: the return address stays in here */
  return p;
}
__attribute__((noinline)) void *site_thread(size_t n) {
  void *p = malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) void *site_big(size_t n) {
  void *p = malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}

static void *thread_main(void *arg) {
  (void)arg;
  for (int i = 0; i < N_THREAD; i++) {
    keep[2 * N_SMALL + i] = site_thread(300);
    memset(keep[2 * N_SMALL + i], 3, 300);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: obs_prog SITES_FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "w");
  if (!f) return 2;
  fprintf(f, "site_small %p\nsite_thread %p\nsite_big %p\n", (void *)site_small, (void *)site_thread,
          (void *)site_big);
  fclose(f);
  for (int i = 0; i < 2 * N_SMALL; i++) {
    keep[i] = site_small(100);
    if (!keep[i]) return 1;
    memset(keep[i], 1, 100);
  }
  for (int i = 0; i < N_SMALL; i++) free(keep[2 * i + 1]);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  keep[2 * N_SMALL + N_THREAD] = site_big(300000);
  keep[2 * N_SMALL + N_THREAD + 1] = site_big(3u << 20);
  memset(keep[2 * N_SMALL + N_THREAD], 4, 300000);
  memset(keep[2 * N_SMALL + N_THREAD + 1], 5, 3u << 20);
  return 0;
}
