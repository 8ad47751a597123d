/* prof.c — the heap profiler's countdown intervals (src/prof.c): drawn
 * from a table of lines instead of a logarithm, they must stay
 * exponential with the mean asked for, as the profiles' weights assume.
 *
 * prof_interval_table: the table's values against the logarithm (libm), at
 * random words and at the ends of every bin, and the exact mean of the
 * table's part (1 - ln 2).
 * prof_interval_draws: 4 million draws of the countdown's own: their mean,
 * variance and the fractions below a few quantiles of the exponential,
 * each within 5 standard deviations of the sampling error (a fixed seed,
 * so the test gives the same answer each run). */
#include "itest.h"
#include "prof.h"
#include <math.h>

#define LN2 0.69314718055994530942

/* What fw_prof_exp_of(x) stands for: G ln 2 - ln(1 - v/2), G the trailing
 * zeros of the low 32 bits, v the high 32 bits as a fraction. */
static double exact_of(uint64_t x) {
  double v = (double)(x >> 32) / 4294967296.0;
  return __builtin_ctz((uint32_t)x) * LN2 - log1p(-v / 2);
}

static void t_table(void) {
  double worst = 0;
  uint64_t worst_x = 0;
  fwt_rng r;
  fwt_rng_init(&r, 42);
  for (unsigned i = 0; i < 2000000; i++) {
    uint64_t x = fwt_next(&r);
    if (!(uint32_t)x) continue;
    double d = fabs(fw_prof_exp_of(x) - exact_of(x));
    if (d > worst) worst = d, worst_x = x;
  }
  /* both ends of every bin (8 bits), and their middles */
  for (uint64_t bin = 0; bin < 256; bin++) {
    uint64_t ends[3] = {bin << 56, bin << 56 | (uint64_t)0xffffff << 32, bin << 56 | (uint64_t)0x800000 << 32};
    for (unsigned e = 0; e < 3; e++) {
      for (unsigned g = 0; g < 32; g++) {
        uint64_t x = ends[e] | (uint64_t)1 << g;
        double d = fabs(fw_prof_exp_of(x) - exact_of(x));
        if (d > worst) worst = d, worst_x = x;
      }
    }
  }
  printf("largest error %.3g at %016llx\n", worst, (unsigned long long)worst_x);
  /* each bin's line is off the curve by at most h^2/12 max |y''| (its
   * slope the chord's, its mean the bin's): (1/256)^2 / 12 = 1.3e-6 */
  CHECKF(worst < 1.5e-6, "the table is off -ln by %g at %016llx", worst, (unsigned long long)worst_x);
  /* the middles' mean is the table's mean over v: E[Y] = 1 - ln 2 for the
   * density 2 e^-y on [0, ln 2) */
  double sum = 0;
  for (uint64_t bin = 0; bin < 256; bin++) sum += fw_prof_exp_of(bin << 56 | (uint64_t)0x800000 << 32 | 1);
  double mean = sum / 256;
  printf("mean of the table's part %.15f (exact %.15f)\n", mean, 1 - LN2);
  CHECKF(fabs(mean - (1 - LN2)) < 1e-12, "the table's mean is %.15f, not 1 - ln 2 = %.15f", mean, 1 - LN2);
}

/* y = x ^ (x << k), and y = x ^ (x >> k), solved for x */
static uint64_t unshift_left(uint64_t y, unsigned k) {
  uint64_t x = y;
  for (unsigned i = 0; i < 64 / k + 1; i++) x = y ^ (x << k);
  return x;
}
static uint64_t unshift_right(uint64_t y, unsigned k) {
  uint64_t x = y;
  for (unsigned i = 0; i < 64 / k + 1; i++) x = y ^ (x >> k);
  return x;
}

static void t_draws(void) {
  enum { N = 4000000 };
  static const double q[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
  enum { NQ = sizeof q / sizeof q[0] };
  size_t below[NQ] = {0};
  double at[NQ];
  for (unsigned k = 0; k < NQ; k++) at[k] = -log1p(-q[k]);
  uint64_t state = 0x2545f4914f6cdd1dull;
  double sum = 0, sum2 = 0, most = 0;
  for (unsigned i = 0; i < N; i++) {
    double x = fw_prof_exp_draw(&state);
    /* the first bin's line starts 1.3e-6 below 0 (its mean is exact) */
    CHECKF(x > -1.5e-6, "a draw of %g", x);
    sum += x;
    sum2 += x * x;
    if (x > most) most = x;
    for (unsigned k = 0; k < NQ; k++) below[k] += x <= at[k];
  }
  double mean = sum / N, var = sum2 / N - mean * mean;
  printf("%d draws: mean %.5f, variance %.5f, largest %.2f\n", N, mean, var, most);
  /* the exponential of mean 1: variance 1, the sample variance's own
   * variance (mu4 - sigma^4) / N = 8 / N */
  CHECKF(fabs(mean - 1) < 5 / sqrt((double)N), "mean %.5f", mean);
  CHECKF(fabs(var - 1) < 5 * sqrt(8.0 / N), "variance %.5f", var);
  for (unsigned k = 0; k < NQ; k++) {
    double f = (double)below[k] / N, sd = sqrt(q[k] * (1 - q[k]) / N);
    printf("  P(X <= %.4f) = %.6f (exact %.4f, sd %.2g)\n", at[k], f, q[k], sd);
    CHECKF(fabs(f - q[k]) < 5 * sd, "P(X <= %g) = %g, not %g", at[k], f, q[k]);
  }
  /* the geometric part past 32 zero bits: 32 ln 2 and the next word's
   * draw. The state whose next word has its low 32 bits 0: xorshift64
   * (13, 7, 17) run backwards from that word. */
  uint64_t want = (uint64_t)0x9e3779b9 << 32, st = want;
  st = unshift_left(st, 17);
  st = unshift_right(st, 7);
  st = unshift_left(st, 13);
  uint64_t next = want;
  next ^= next << 13, next ^= next >> 7, next ^= next << 17;
  uint64_t from = st;
  double x = fw_prof_exp_draw(&st);
  CHECKF(st == next, "the state %016llx did not come to the word %016llx", (unsigned long long)from,
         (unsigned long long)want);
  /* equal but for rounding: the i386 build's x87 sums carry more bits */
  double expect = 32 * LN2 + fw_prof_exp_of(next);
  CHECKF(fabs(x - expect) <= 1e-12 * expect, "a draw after 32 zero bits: %.17g, not 32 ln 2 + %.17g", x,
         fw_prof_exp_of(next));
}

int main(int argc, char **argv) {
  static const it_section s[] = {{"prof_interval_table", t_table}, {"prof_interval_draws", t_draws}};
  return it_main(argc, argv, s, IT_COUNT(s));
}
