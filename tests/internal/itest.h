/* itest.h — the support code of the internal unit tests.
 *
 * These programs link the allocator's object files directly (the CMake
 * object library freeway_core), so they reach the hidden fw_* functions of
 * every layer; their own malloc stays the C library's. Each program is a
 * set of named sections, and each section is its own ctest test
 * (internal.<section>), run in a process of its own so that process-wide
 * state (arenas, options) starts fresh. */
#ifndef FW_ITEST_H
#define FW_ITEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "freeway.h"
#include "fwrng.h"


__attribute__((noreturn, format(printf, 4, 5))) static inline void it_fail(const char *file, int line,
                                                                          const char *cond,
                                                                          const char *fmt, ...) {
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, cond);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    fputs("  ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  fflush(stderr);
  abort();
}

#define CHECK(c) \
  do { if (!(c)) it_fail(__FILE__, __LINE__, #c, NULL); } while (0)
#define CHECKF(c, ...) \
  do { if (!(c)) it_fail(__FILE__, __LINE__, #c, __VA_ARGS__); } while (0)

/* An environment that cannot run the case: ctest reports it skipped. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void it_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("SKIP: ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  fflush(stdout);
  exit(77);
}

typedef struct it_section {
  const char *name;
  void (*run)(void);
} it_section;

/* Runs the section named by argv[1], or every one without an argument. */
static inline int it_main(int argc, char **argv, const it_section *s, size_t n) {
  int ran = 0;
  for (size_t i = 0; i < n; i++) {
    if (argc > 1 && strcmp(argv[1], s[i].name) != 0) continue;
    printf("-- %s\n", s[i].name);
    fflush(stdout);
    s[i].run();
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no section named %s\n", argc > 1 ? argv[1] : "(none)");
    return 2;
  }
  printf("ok\n");
  return 0;
}
#define IT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The public counters (fw_stats_get), checked. */
static inline fw_stats_t it_stats(void) {
  fw_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK(fw_stats_get(&s) == 0);
  return s;
}

#endif
