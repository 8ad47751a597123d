/* base.h — the bottom layer: compiler attributes and bit tricks. Pure
 * functions of their arguments: no state, no calls into any other file, so
 * that every layer may use them (see src/LAYERS). */
#ifndef FW_BASE_H
#define FW_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include "freeway.h"

#ifdef _WIN32
/* PE objects have no visibility: a DLL exports only what FW_API marks. */
#define FW_HIDDEN
#else
#define FW_HIDDEN __attribute__((visibility("hidden")))
#endif
#ifdef _WIN32
/* MinGW's own printf family (__USE_MINGW_ANSI_STDIO), which knows %zu */
#define FW_PRINTF(f, a) __attribute__((format(gnu_printf, f, a)))
#else
#define FW_PRINTF(f, a) __attribute__((format(printf, f, a)))
#endif
#define FW_NOINLINE __attribute__((noinline))
#define FW_COLD __attribute__((cold, noinline))
#define FW_INLINE static inline __attribute__((always_inline))
#define fw_likely(x) __builtin_expect(!!(x), 1)
#define fw_unlikely(x) __builtin_expect(!!(x), 0)
/* FW_RESULT_REG(p): p, known non-NULL, is about to be returned. gcc on
 * x86-64 otherwise keeps the popped block in a scratch register and copies
 * it to the return register at the end: one of the 14 instructions of a
 * malloc hit. Stating where p lives lets it load the block there. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FW_RESULT_REG(p) do { __asm__("" : "+a"(p)); if ((p) == NULL) __builtin_unreachable(); } while (0)
#else
#define FW_RESULT_REG(p) ((void)0)
#endif

/* fw_any_bits(x, m): x & *m != 0, for a mask in memory. gcc on x86-64
 * copies x to a scratch register and ands the mask into it where one test
 * with the memory operand does (clang finds that by itself): the fast
 * pop's link check would be one instruction longer than with a constant. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
FW_INLINE bool fw_any_bits(uintptr_t x, const uintptr_t *m) {
  bool nz;
  __asm__("testq %1, %2" : "=@ccnz"(nz) : "r"(x), "m"(*m));
  return nz;
}
#else
FW_INLINE bool fw_any_bits(uintptr_t x, const uintptr_t *m) { return (x & *m) != 0; }
#endif

FW_INLINE size_t fw_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
FW_INLINE size_t fw_align_down(size_t x, size_t a) { return x & ~(a - 1); }
FW_INLINE bool fw_is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* n low bits set, for 0 <= n <= 64 */
FW_INLINE uint64_t fw_mask_low(size_t n) { return n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1); }
FW_INLINE unsigned fw_popcount64(uint64_t x) { return (unsigned)__builtin_popcountll(x); }
FW_INLINE unsigned fw_ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }

/* The bits of mask that start a run of n >= 1 set bits (0 for n == 0 or
 * n > 64). Each step x &= x >> k keeps the bits that start a run at least
 * k longer, so a run of n costs O(log n) steps instead of a scan over 64
 * positions. */
FW_INLINE uint64_t fw_mask_run_starts(uint64_t mask, size_t n) {
  if (n == 0 || n > 64) return 0;
  uint64_t x = mask;
  size_t have = 1;
  for (; have * 2 <= n && x; have *= 2) x &= x >> have;
  if (have < n) x &= x >> (n - have);
  return x;
}

/* The first bit of a run of n >= 1 set bits in mask, or -1. */
FW_INLINE int fw_mask_find_run(uint64_t mask, size_t n) {
  uint64_t x = fw_mask_run_starts(mask, n);
  return x ? (int)fw_ctz64(x) : -1;
}

/* The length of the run of set bits that starts at bit s of x. */
FW_INLINE unsigned fw_mask_run_at(uint64_t x, unsigned s) {
  uint64_t rest = ~(x >> s);
  return rest ? fw_ctz64(rest) : 64 - s;
}

/* The length of the longest run of set bits in x, in O(log n) steps: double
 * the run length while some run survives, then binary-search the rest. */
FW_INLINE unsigned fw_mask_longest_run(uint64_t x) {
  if (!x) return 0;
  if (x == ~(uint64_t)0) return 64;
  unsigned n = 1;
  for (uint64_t y; n < 64 && (y = x & (x >> n)) != 0; n *= 2) x = y;
  for (unsigned step = n / 2; step; step /= 2) {
    uint64_t y = x & (x >> step);
    if (y) {
      x = y;
      n += step;
    }
  }
  return n;
}

/* The flavour of the library this object is linked into (flavour.c, built
 * once per flavour): whether its entry points carry the heap profiler's
 * countdown (libfreeway-prof.so). */
FW_HIDDEN extern const bool fw_flavour_profiling;

#endif
