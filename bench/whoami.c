/* Prints which loaded object provides malloc, free and operator new, so that
 * a run can check that LD_PRELOAD did replace the allocator, and the version
 * that a live mimalloc reports (mi_version(), e.g. 30302 for 3.3.2; 0 when
 * there is none), so that the runner can tell its several mimallocs apart.
 *
 *   bench_whoami  ->  {"bench":"whoami","malloc":"libc.so.6",...,"mi_version":0}
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
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

int main(void) {
  printf("{\"bench\":\"whoami\",\"malloc\":\"%s\",\"free\":\"%s\",\"realloc\":\"%s\",\"operator_new\":\"%s\","
         "\"fw_malloc\":\"%s\",\"mi_version\":%d}\n",
         provider("malloc"), provider("free"), provider("realloc"), provider("_Znwm"), provider("fw_malloc"),
         mi_version_of_live_mimalloc());
  return 0;
}
