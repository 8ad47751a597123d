/* consumer.c — a program built against an installed freeway, the way its
 * users build theirs (pkg-config or find_package). It checks that it really
 * runs on freeway: the version it reports, malloc served from freeway's
 * default heap, and which file freeway's code was loaded from (printed for
 * package.sh to compare with the installed tree). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <freeway.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s EXPECTED-VERSION\n", argv[0]);
    return 2;
  }
  const char *v = fw_version_string();
  if (!v || strcmp(v, argv[1]) != 0) {
    fprintf(stderr, "fw_version_string() = \"%s\", expected %s\n", v ? v : "(null)", argv[1]);
    return 1;
  }
  /* Kept in a volatile so that the compiler cannot drop the allocation. */
  void *volatile p = malloc(32);
  if (!p) {
    fprintf(stderr, "malloc(32) failed\n");
    return 1;
  }
  memset(p, 0x5a, 32);
  if (!fw_heap_contains(fw_heap_get_default(), p)) {
    fprintf(stderr, "malloc(32) = %p is not a block of freeway's default heap\n", p);
    return 1;
  }
  free(p);
  Dl_info info;
  if (!dladdr((void *)fw_version_string, &info) || !info.dli_fname) {
    fprintf(stderr, "dladdr(fw_version_string) failed\n");
    return 1;
  }
  printf("version: %s\n", v);
  printf("freeway-from: %s\n", info.dli_fname);
  return 0;
}
