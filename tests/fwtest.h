/* fwtest.h — support code shared by freeway's test programs.
 *
 * Every test program is built in up to three flavours:
 *   - FWT_FW (default): calls the fw_* names directly, linked to a freeway
 *     library (libfreeway.so, or libfreeway-fw.a in sanitizer builds);
 *   - FWT_STD: calls the standard names (malloc, free, ...) and is linked to
 *     plain libc; it is run with LD_PRELOAD=libfreeway.so and refuses to run
 *     when freeway is not the process allocator. The fw_* extensions are
 *     looked up with dlsym();
 *   - FWT_STD + FWT_STATIC: standard names, linked to libfreeway.a.
 *
 * Tests call the allocator only through the tables A (the standard family)
 * and X (freeway's extensions), so the compiler cannot fold or drop calls
 * whose effect is what the test wants to observe.
 */
#ifndef FWTEST_H
#define FWTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "freeway.h"
#include "fwrng.h"

/* ---- the allocator under test ------------------------------------------ */
typedef struct fwt_std_api {
  void *(*malloc)(size_t);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  void (*free)(void *);
  size_t (*usable_size)(const void *);
  void *(*aligned_alloc)(size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*memalign)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
} fwt_std_api;

typedef struct fwt_ext_api {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void (*free_sized)(void *, size_t);
  void (*free_aligned)(void *, size_t);
  void (*free_aligned_sized)(void *, size_t, size_t);
  size_t (*usable_size)(const void *);
  void *(*malloc_aligned)(size_t, size_t);
  size_t (*max_alignment)(void);
  fw_heap_t *(*heap_new)(void);
  void (*heap_delete)(fw_heap_t *);
  void (*heap_destroy)(fw_heap_t *);
  void *(*heap_malloc)(fw_heap_t *, size_t);
  void *(*heap_calloc)(fw_heap_t *, size_t, size_t);
  void *(*heap_realloc)(fw_heap_t *, void *, size_t);
  void *(*heap_malloc_aligned)(fw_heap_t *, size_t, size_t);
  size_t (*heap_usable_size)(const fw_heap_t *, const void *);
  void (*heap_collect)(fw_heap_t *, bool);
  fw_heap_t *(*heap_get_default)(void);
  bool (*heap_contains)(const fw_heap_t *, const void *);
  int (*heap_stats)(const fw_heap_t *, fw_heap_stats_t *);
  void (*heap_visit)(const fw_heap_t *, fw_block_visitor_t *, void *);
  void (*collect)(bool);
  int (*stats_get)(fw_stats_t *);
  void (*stats_print)(int);
  void (*stats_print_json)(int);
  void (*heap_map_json)(int);
  void (*leak_report_json)(int);
  long (*option_get)(const char *);
  int (*option_set)(const char *, long);
  const char *(*version_string)(void);
} fwt_ext_api;

extern fwt_std_api A;
extern fwt_ext_api X;
/* "fw", "preload" or "static": how this program reaches the allocator. */
extern const char *fwt_flavour;

/* ---- sizes that overflow on any word size ------------------------------ */
#define FWT_BITS (sizeof(size_t) * 8)
#define FWT_HIGH(k) ((size_t)1 << (FWT_BITS - (k))) /* 2^(bits - k) */
/* 2^(bits - k) where no address space holds it (64-bit), else just over half */
#define FWT_IMPOSSIBLE(k) (sizeof(size_t) == 8 ? FWT_HIGH(k) : (SIZE_MAX / 2 + 1 + (k) * 4096))
/* SIZE_MAX / 2 (PTRDIFF_MAX) where no address space holds it (64-bit), one
 * more where a process may have that much in one piece (32-bit: 2 GiB - 1
 * is a size an allocator may hand out, as glibc's does; above PTRDIFF_MAX
 * none does). */
#define FWT_HALF_MAX (sizeof(size_t) == 8 ? SIZE_MAX / 2 : SIZE_MAX / 2 + 1)
#define FWT_HALF ((size_t)1 << (FWT_BITS / 2))      /* HALF * (HALF + 1) wraps to HALF */
#define FWT_THIRD (SIZE_MAX / 3 + 1)                /* 3 * THIRD wraps to 2 */
/* 65537 * FWT_WRAP65537 wraps to 65536 */
#define FWT_WRAP65537 ((size_t)(sizeof(size_t) == 8 ? 281470681808896ull : 65536u))

/* ---- checks ------------------------------------------------------------ */
/* Prints the failed condition (with errno) and aborts the process. */
__attribute__((noreturn, format(printf, 4, 5))) void fwt_fail(const char *file, int line,
                                                              const char *cond, const char *fmt, ...);
extern atomic_ulong fwt_checks;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) fwt_fail(__FILE__, __LINE__, #cond, NULL);                \
    atomic_fetch_add_explicit(&fwt_checks, 1, memory_order_relaxed);       \
  } while (0)
#define CHECKF(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) fwt_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);         \
    atomic_fetch_add_explicit(&fwt_checks, 1, memory_order_relaxed);       \
  } while (0)

/* ---- sections ---------------------------------------------------------- */
typedef struct fwt_section {
  const char *name;
  void (*run)(void);
} fwt_section;

/* Sets up A and X for the flavour (FWT_STD: proves freeway is preloaded),
 * then runs the section named by argv[1] ("all" or none: every one). */
int fwt_main(int argc, char **argv, const fwt_section *sections, size_t count);
#define FWT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Prints a progress line (stdout, flushed). */
__attribute__((format(printf, 1, 2))) void fwt_log(const char *fmt, ...);

/* ---- patterns ---------------------------------------------------------- */
/* A seed for a block from its address and size (and an optional salt). */
static inline uint64_t fwt_seed(const void *p, size_t n, uint64_t salt) {
  return fwt_mix((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull ^ (uint64_t)n ^ (salt << 48));
}
/* Fills n bytes with a pattern that depends on seed and on the offset. */
void fwt_fill(void *p, size_t n, uint64_t seed);
/* Returns the offset of the first byte that differs from fwt_fill's
 * pattern, or SIZE_MAX if all n bytes match. */
size_t fwt_verify(const void *p, size_t n, uint64_t seed);
/* Offset of the first non-zero byte, or SIZE_MAX. */
size_t fwt_find_nonzero(const void *p, size_t n);

#define CHECK_PATTERN(p, n, seed)                                                    \
  do {                                                                               \
    size_t fwt_off_ = fwt_verify((p), (n), (seed));                                  \
    CHECKF(fwt_off_ == SIZE_MAX, "block %p (%zu bytes): pattern differs at offset %zu", \
           (const void *)(p), (size_t)(n), fwt_off_);                                \
  } while (0)
/* A block under test: its pattern depends on its address, size and salt,
 * so a block moved or overwritten by another one is caught. */
typedef struct blk {
  char *p;
  size_t n;
  uint64_t salt;
} blk;
static inline uint64_t bseed(const blk *b) { return fwt_seed(b->p, b->n, b->salt); }
static inline void bfill(blk *b) { fwt_fill(b->p, b->n, bseed(b)); }
#define bcheck(b) CHECK_PATTERN((b)->p, (b)->n, bseed(b))

#define CHECK_ZERO(p, n)                                                             \
  do {                                                                               \
    size_t fwt_off_ = fwt_find_nonzero((p), (n));                                    \
    CHECKF(fwt_off_ == SIZE_MAX, "block %p (%zu bytes): non-zero byte at offset %zu", \
           (const void *)(p), (size_t)(n), fwt_off_);                                \
  } while (0)

static inline bool fwt_aligned(const void *p, size_t a) {
  return ((uintptr_t)p & (a - 1)) == 0;
}
/* The alignment C17 requires of malloc(n): that of any object of size <= n
 * with a fundamental alignment, i.e. min(alignof(max_align_t), the largest
 * power of two <= n). */
size_t fwt_min_align(size_t n);

/* A block size: mostly small, sometimes medium, rarely large (<= max_large). */
size_t fwt_random_size(fwt_rng *r, size_t max_large);

/* ---- process facts ------------------------------------------------------- */
size_t fwt_rss(void);       /* resident bytes, from /proc/self/statm */
size_t fwt_vm_size(void);   /* mapped bytes, from /proc/self/statm */
size_t fwt_page_size(void);
/* n scaled by the FWT_SCALE environment variable (percent, default 100),
 * never below 1. Sanitizer builds run the heavy tests scaled down. */
size_t fwt_scaled(size_t n);
/* fw_stats_get through X, with the size field set and the result checked. */
void fwt_stats(fw_stats_t *out);
/* The integer after "key": in a report of fw_stats_print_json's (checked to
 * be there). */
size_t fwt_json_size(const char *report, const char *key);
/* fw_stats_print_json through X into buf (cap bytes, 0-terminated). */
void fwt_stats_json(char *buf, size_t cap);
/* mmap'd scratch memory for bookkeeping arrays, kept apart from the heap
 * under test. */
void *fwt_scratch(size_t bytes);
void fwt_scratch_free(void *p, size_t bytes);

/* ---- child processes ------------------------------------------------------- */
/* Runs fn(arg) in a forked child whose stderr goes into out (at most cap - 1
 * bytes kept, always NUL-terminated; the rest is read and dropped so that a
 * talkative child cannot block) and returns its wait status. The child exits
 * 0 if fn returns, and is killed by SIGALRM after 120 s, so that a hang fails
 * the test rather than stalling it. stdio is flushed before the fork, so that
 * nothing buffered is written twice. */
int fwt_child(void (*fn)(void *), void *arg, char *out, size_t cap);
/* Runs this program again in a child, with section as its argument and the
 * environment of this process changed by set: each "NAME=value" replaces
 * any NAME there. The environment is built in the child, with the child's
 * own allocator. Exits 7 if that fails, 8 if the exec fails. Otherwise as
 * fwt_child. */
int fwt_child_exec(const char *section, const char *const *set, char *out, size_t cap);

#endif
