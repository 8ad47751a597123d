/* Prints which loaded object provides malloc, free and operator new, so that
 * a run can check that LD_PRELOAD did replace the allocator, and the version
 * that a live mimalloc reports (mi_version(), e.g. 30302 for 3.3.2; 0 when
 * there is none), so that the runner can tell its several mimallocs apart.
 * Under freeway it also reports the cautious mode in effect, twice: as the
 * option says (fw_option_get("cautious"); -1 without freeway) and as
 * behaviour only that mode has (malloc_usable_size of a 10-byte request is
 * 10 in cautious mode, the size class's 16 in the default mode), so that the
 * runner can check that the environment it set reached the library.
 *
 *   bench_whoami  ->  {"bench":"whoami","malloc":"libc.so.6",...,"mi_version":0,"fw_cautious":-1,...}
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *provider(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  if (!f || !dladdr(f, &info) || !info.dli_fname) return "none";
  const char *slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

static int mi_version_of_live_mimalloc(void) {
  int (*version)(void);
  /* POSIX's way to turn dlsym's object pointer into a function pointer. */
  *(void **)&version = dlsym(RTLD_DEFAULT, "mi_version");
  return version ? version() : 0;
}

static long fw_option(const char *name) {
  long (*get)(const char *);
  *(void **)&get = dlsym(RTLD_DEFAULT, "fw_option_get");
  return get ? get(name) : -1;
}

static long usable_size_of_10(void) {
  void *p = malloc(10);
  long n = p ? (long)malloc_usable_size(p) : -1;
  free(p);
  return n;
}

int main(void) {
  printf("{\"bench\":\"whoami\",\"malloc\":\"%s\",\"free\":\"%s\",\"realloc\":\"%s\",\"operator_new\":\"%s\","
         "\"fw_malloc\":\"%s\",\"mi_version\":%d,\"fw_cautious\":%ld,\"fw_secure\":%ld,\"usable_of_10\":%ld}\n",
         provider("malloc"), provider("free"), provider("realloc"), provider("_Znwm"), provider("fw_malloc"),
         mi_version_of_live_mimalloc(), fw_option("cautious"), fw_option("secure"), usable_size_of_10());
  return 0;
}
