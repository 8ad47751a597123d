/* bits.c — the bit tricks of base.h against plain loops that are correct by
 * inspection: fw_mask_find_run, fw_mask_run_starts, fw_mask_run_at and
 * fw_mask_longest_run (which the segment layer's span search and best-fit
 * bins and the arena's placement of runs rest on), fw_mask_low,
 * fw_align_up/down and fw_is_pow2. */
#include "itest.h"
#include "base.h"

static uint64_t ref_low(size_t n) { return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1; }

/* The lowest i such that bits i .. i+n-1 of mask are all set, or -1. */
static int ref_find_run(uint64_t mask, size_t n) {
  if (n == 0 || n > 64) return -1;
  for (size_t i = 0; i + n <= 64; i++)
    if (((mask >> i) & ref_low(n)) == ref_low(n)) return (int)i;
  return -1;
}

static unsigned ref_longest_run(uint64_t mask) {
  unsigned best = 0, cur = 0;
  for (unsigned i = 0; i < 64; i++) {
    cur = (mask >> i) & 1 ? cur + 1 : 0;
    if (cur > best) best = cur;
  }
  return best;
}

static void check_mask(uint64_t mask) {
  for (size_t n = 0; n <= 65; n++) {
    int want = ref_find_run(mask, n), got = fw_mask_find_run(mask, n);
    CHECKF(got == want, "fw_mask_find_run(%#018llx, %zu) = %d, expected %d", (unsigned long long)mask, n,
           got, want);
  }
  for (size_t n = 0; n <= 65; n++) {
    uint64_t want_starts = 0;
    for (size_t i = 0; n >= 1 && i + n <= 64; i++)
      if (((mask >> i) & ref_low(n)) == ref_low(n)) want_starts |= (uint64_t)1 << i;
    CHECKF(fw_mask_run_starts(mask, n) == want_starts, "fw_mask_run_starts(%#018llx, %zu) = %#018llx",
           (unsigned long long)mask, n, (unsigned long long)fw_mask_run_starts(mask, n));
  }
  for (unsigned s = 0; s < 64; s++) {
    if (!((mask >> s) & 1)) continue;
    unsigned want_len = 0;
    while (s + want_len < 64 && ((mask >> (s + want_len)) & 1)) want_len++;
    CHECKF(fw_mask_run_at(mask, s) == want_len, "fw_mask_run_at(%#018llx, %u) = %u, expected %u",
           (unsigned long long)mask, s, fw_mask_run_at(mask, s), want_len);
  }
  CHECK(fw_mask_find_run(mask, 1000) == -1);
  CHECK(fw_mask_find_run(mask, SIZE_MAX) == -1);
  unsigned want = ref_longest_run(mask), got = fw_mask_longest_run(mask);
  CHECKF(got == want, "fw_mask_longest_run(%#018llx) = %u, expected %u", (unsigned long long)mask, got, want);
}

/* Edge cases: no bits, all bits, single bits, every single run at every
 * position, two runs (the later one longer, so that a search that stops at
 * the first run fails), periodic patterns, and random masks of every
 * density. */
static void t_mask_runs(void) {
  static const uint64_t fixed[] = {
    0, ~(uint64_t)0, 1, (uint64_t)1 << 63, 0x5555555555555555ull, 0xaaaaaaaaaaaaaaaaull,
    0x3333333333333333ull, 0x0f0f0f0f0f0f0f0full, 0x00ff00ff00ff00ffull, 0x0000ffff0000ffffull,
    0x00000000ffffffffull, 0xffffffff00000000ull, 0x7fffffffffffffffull, 0xfffffffffffffffeull,
    0x8000000000000001ull, 0x7ffffffffffffffeull, 0xfffffffeffffffffull, 0xfffeffffffff7fffull,
  };
  for (size_t i = 0; i < IT_COUNT(fixed); i++) check_mask(fixed[i]);
  for (size_t len = 1; len <= 64; len++)
    for (size_t pos = 0; pos + len <= 64; pos++) {
      uint64_t run = ref_low(len) << pos;
      check_mask(run);
      check_mask(~run);
    }
  for (size_t a = 1; a <= 20; a++)
    for (size_t b = a + 1; a + 1 + b <= 64; b += 3)
      for (size_t gap = 1; a + gap + b <= 64; gap += 5) {
        check_mask(ref_low(a) | (ref_low(b) << (a + gap)));
        check_mask((ref_low(a) << (64 - a)) | (ref_low(b) << (64 - a - gap - b)));
      }
  fwt_rng r;
  fwt_rng_init(&r, 42);
  for (int i = 0; i < 20000; i++) {
    uint64_t m = fwt_next(&r);
    switch (i % 5) {
    case 1: m &= fwt_next(&r); break;                 /* sparse */
    case 2: m |= fwt_next(&r) | fwt_next(&r); break;  /* dense */
    case 3: m |= fwt_next(&r); m |= m >> 1; m |= m << 2; break; /* long runs */
    case 4: m = ~(m & fwt_next(&r) & fwt_next(&r)); break;       /* few holes */
    default: break;
    }
    check_mask(m);
  }
}

static void t_bit_helpers(void) {
  for (size_t n = 0; n <= 64; n++) CHECKF(fw_mask_low(n) == ref_low(n), "fw_mask_low(%zu)", n);

  for (size_t x = 0; x <= 70000; x++) {
    bool want = x != 0 && __builtin_popcountll((unsigned long long)x) == 1;
    CHECKF(fw_is_pow2(x) == want, "fw_is_pow2(%zu)", x);
  }
  for (unsigned k = 0; k < sizeof(size_t) * 8; k++) {
    size_t p = (size_t)1 << k;
    CHECK(fw_is_pow2(p));
    if (k > 1) CHECK(!fw_is_pow2(p + 1) && !fw_is_pow2(p - 1));
    CHECK(!fw_is_pow2(p | 1) || k == 0);
  }
  CHECK(!fw_is_pow2(SIZE_MAX));

  fwt_rng r;
  fwt_rng_init(&r, 7);
  for (unsigned k = 0; k < sizeof(size_t) * 8 - 1; k++) {
    size_t a = (size_t)1 << k;
    size_t xs[16] = {0, 1, a - 1, a, a + 1, 2 * a - 1, 2 * a, 3 * a + 1, SIZE_MAX / 2, SIZE_MAX - a,
                     (size_t)fwt_next(&r), (size_t)fwt_next(&r), (size_t)fwt_next(&r) >> k,
                     (size_t)fwt_next(&r) >> 1, 12345, 4096};
    for (size_t i = 0; i < IT_COUNT(xs); i++) {
      size_t x = xs[i];
      size_t down = x - x % a;
      CHECKF(fw_align_down(x, a) == down, "fw_align_down(%zu, %zu)", x, a);
      if (x <= SIZE_MAX - (a - 1)) {
        size_t up = x % a ? down + a : x;
        CHECKF(fw_align_up(x, a) == up, "fw_align_up(%zu, %zu)", x, a);
      }
    }
  }
  for (int i = 0; i < 1000; i++) {
    uint64_t x = fwt_next(&r) | 1;
    CHECK(fw_ctz64(x << (i % 64)) == (unsigned)(i % 64));
    CHECK(fw_popcount64(x) == (unsigned)__builtin_popcountll((unsigned long long)x));
  }
}

int main(int argc, char **argv) {
  static const it_section s[] = {{"mask_runs", t_mask_runs}, {"bit_helpers", t_bit_helpers}};
  return it_main(argc, argv, s, IT_COUNT(s));
}
