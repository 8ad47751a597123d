/* freeway loaded with dlopen (a plugin, a language runtime's FFI) rather
 * than linked or preloaded: its thread-local data is initial-exec TLS,
 * which a library loaded late must find room for in the static TLS surplus
 * glibc keeps; if it grew past that, dlopen would fail with "cannot
 * allocate memory in static TLS block". The library is opened RTLD_LOCAL,
 * so the program's own malloc stays the system's, and the fw_* API is used
 * from several threads, including ones that exit while holding blocks.
 * Loading it must not bring in the C++ runtime: a C program that preloads
 * freeway would map libstdc++ for nothing (operator new's failure path
 * finds the runtime when it needs it, new_delete.cpp). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*fw_malloc_p)(size_t);
static void (*fw_free_p)(void *);
static size_t (*fw_usable_p)(const void *);

static int fail(const char *what, const char *detail) {
  fprintf(stderr, "FAIL dlopen: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

enum { N = 2000, T = 4 };
static void *handoff[T][N];

static void *worker(void *arg) {
  size_t k = (size_t)arg;
  for (size_t i = 0; i < N; i++) {
    size_t n = 1 + (i * 7919 + k * 104729) % 5000;
    unsigned char *p = fw_malloc_p(n);
    if (!p) fail("fw_malloc returned NULL", NULL);
    if (fw_usable_p(p) < n) fail("usable size below the request", NULL);
    memset(p, (int)(k + 1), n);
    handoff[k][i] = p;
  }
  /* free the previous thread's blocks: cross-thread frees into a heap
   * whose thread may already have exited */
  if (k > 0)
    for (size_t i = 0; i < N; i++) {
      fw_free_p(handoff[k - 1][i]);
      handoff[k - 1][i] = NULL;
    }
  return NULL;
}

int main(void) {
  void *h = dlopen(FWT_LIBFREEWAY, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail("dlopen", dlerror());
  fw_malloc_p = (void *(*)(size_t))dlsym(h, "fw_malloc");
  fw_free_p = (void (*)(void *))dlsym(h, "fw_free");
  fw_usable_p = (size_t(*)(const void *))dlsym(h, "fw_malloc_usable_size");
  if (!fw_malloc_p || !fw_free_p || !fw_usable_p) fail("dlsym", dlerror());
  void *p = fw_malloc_p(100);
  if (!p) fail("fw_malloc in the main thread", NULL);
  /* threads one after the other, each freeing its predecessor's blocks */
  for (size_t k = 0; k < T; k++) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)k) != 0) fail("pthread_create", NULL);
    pthread_join(t, NULL);
  }
  for (size_t i = 0; i < N; i++) fw_free_p(handoff[T - 1][i]);
  fw_free_p(p);
  FILE *maps = fopen("/proc/self/maps", "r");
  if (maps) {
    char line[512];
    while (fgets(line, sizeof line, maps))
      if (strstr(line, "libstdc++") || strstr(line, "libc++")) fail("loading freeway mapped a C++ runtime", line);
    fclose(maps);
  }
  /* the program's own malloc is untouched by an RTLD_LOCAL load */
  void *q = malloc(64);
  free(q);
  printf("dlopen: ok\n");
  return 0;
}
