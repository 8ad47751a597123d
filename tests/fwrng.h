/* fwrng.h — the tests' random numbers: a 64-bit mixer and a per-thread
 * xorshift64* generator. Header-only, with no other dependency, so that the
 * internal unit tests (tests/internal) use the same one as the API tests. */
#ifndef FWRNG_H
#define FWRNG_H
#include <stddef.h>
#include <stdint.h>

static inline uint64_t fwt_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* ---- random numbers (per thread, xorshift64*) --------------------------- */
typedef struct fwt_rng { uint64_t s; } fwt_rng;
static inline void fwt_rng_init(fwt_rng *r, uint64_t seed) { r->s = fwt_mix(seed + 0x1234567ull) | 1; }
static inline uint64_t fwt_next(fwt_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545f4914f6cdd1dull;
}
/* Uniform in [lo, hi]. */
static inline size_t fwt_range(fwt_rng *r, size_t lo, size_t hi) {
  return lo + (size_t)(fwt_next(r) % (uint64_t)(hi - lo + 1));
}

#endif
