/* Prints which loaded object provides malloc, free and operator new, so that
 * a run can check that LD_PRELOAD did replace the allocator.
 *
 *   bench_whoami  ->  {"bench":"whoami","malloc":"libc.so.6",...}
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

int main(void) {
  printf("{\"bench\":\"whoami\",\"malloc\":\"%s\",\"free\":\"%s\",\"realloc\":\"%s\",\"operator_new\":\"%s\","
         "\"fw_malloc\":\"%s\"}\n",
         provider("malloc"), provider("free"), provider("realloc"), provider("_Znwm"), provider("fw_malloc"));
  return 0;
}
