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
 * that it is resident. With "heap" as its second argument it also
 * allocates 500 blocks of 64 bytes from site_heap in a user heap
 * (fw_heap_new) and destroys the heap. */
#include <dlfcn.h>
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
/* A user heap (freeway's fw_heap_* API, found at run time: the program is
 * not linked to freeway), 500 blocks from site_heap, destroyed whole. */
__attribute__((noinline)) void *site_heap(void *(*heap_malloc)(void *, size_t), void *heap, size_t n) {
  void *p = heap_malloc(heap, n);
  __asm__ volatile("" ::: "memory");
  return p;
}

static int user_heap(void) {
  void *(*heap_new)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "fw_heap_new");
  void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "fw_heap_malloc");
  void (*heap_destroy)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "fw_heap_destroy");
  if (!heap_new || !heap_malloc || !heap_destroy) return 1;
  void *h = heap_new();
  if (!h) return 1;
  for (int i = 0; i < 500; i++)
    if (!site_heap(heap_malloc, h, 64)) return 1;
  heap_destroy(h);
  return 0;
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
  fprintf(f, "site_small %p\nsite_thread %p\nsite_big %p\nsite_heap %p\n", (void *)site_small,
          (void *)site_thread, (void *)site_big, (void *)site_heap);
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
  if (argc > 2 && strcmp(argv[2], "heap") == 0 && user_heap() != 0) return 1;
  return 0;
}
