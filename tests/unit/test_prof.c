/* test_prof.c - the heap profiler's sampler (exponential intervals: mean, spread, tail;
 * its ln and exp against libm's) and its stack table (deduplication, distinct stacks, many stacks). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

/* 200k draws at mean 2^19: the sample mean is within 1% (6 standard errors is 1.3%),
 * the standard deviation equals the mean (exponential), P(X > mean) = 1/e. */
static void test_sampler_intervals_are_exponential(void) {
  uint64_t rng = 0x1234567;
  const uint64_t mean = (uint64_t)1 << 19;
  const int n = 200000;
  double sum = 0, sq = 0;
  int above = 0;
  for (int i = 0; i < n; i++) {
    double x = (double)prof_exp_draw(&rng, mean);
    CHECK(x >= 1);
    sum += x;
    sq += x * x;
    above += x > (double)mean;
  }
  double m = sum / n, sd = sqrt(sq / n - m * m);
  printf("  mean %.0f (want %llu), sd %.0f, P(X>mean) %.4f (want %.4f)\n", m, (unsigned long long)mean, sd,
         (double)above / n, exp(-1.0));
  CHECK(fabs(m / (double)mean - 1) < 0.01);
  CHECK(fabs(sd / (double)mean - 1) < 0.02);
  CHECK(fabs((double)above / n - exp(-1.0)) < 0.005);
}

/* Different seeds give different sequences; mean 1 (lg_prof_sample:0) samples every byte. */
static void test_sampler_seeds_and_rate_one(void) {
  uint64_t a = 1, b = 2;
  int same = 0;
  for (int i = 0; i < 100; i++) same += prof_exp_draw(&a, 1 << 14) == prof_exp_draw(&b, 1 << 14);
  CHECK(same < 5);
  CHECK_EQ(prof_exp_draw(&a, 1), 1);
}

/* The sampler's own ln and 1 - exp(-x) (libstrata.a needs no libm) agree with libm's to
 * 4 ulps over their domain: uniform draws in (0, 1], block-to-mean ratios 2^-40..2^24. */
static void test_sampler_math_matches_libm(void) {
  double worst_ln = 0, worst_p = 0;
  uint64_t r = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 200000; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    double u = ((double)(r >> 11) + 1.0) / 9007199254740993.0;
    if (i < 64) u = ldexp(1.0, -i); /* exact powers of two, down to 2^-63 */
    if (i == 64) u = 1.0;
    double want = log(u), got = prof_ln(u);
    double err = want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
    if (err > worst_ln) worst_ln = err;
    double x = ldexp(1.0 + (double)(r & 0xffff) / 65536.0, (int)(r >> 58) - 40); /* 2^-40 .. 2^24 */
    double pw = -expm1(-x), pg = prof_one_minus_exp_neg(x);
    double perr = fabs(pg - pw) / pw;
    if (perr > worst_p) worst_p = perr;
  }
  printf("  worst relative error: ln %.2g, 1 - exp(-x) %.2g\n", worst_ln, worst_p);
  CHECK(worst_ln < 4 * 0x1p-52);
  CHECK(worst_p < 4 * 0x1p-52);
  CHECK(prof_one_minus_exp_neg(0.0) == 0.0);
  CHECK(prof_one_minus_exp_neg(1e9) == 1.0);
}

static void test_stack_table_deduplicates(void) {
  uintptr_t f1[3] = {0x1000, 0x2000, 0x3000}, f2[3] = {0x1000, 0x2000, 0x3001}, f3[2] = {0x1000, 0x2000};
  prof_stack_t *a = prof_stack_intern(f1, 3), *b = prof_stack_intern(f1, 3);
  prof_stack_t *c = prof_stack_intern(f2, 3), *d = prof_stack_intern(f3, 2);
  CHECK(a != NULL && a == b);
  CHECK(c != NULL && c != a);
  CHECK(d != NULL && d != a && d != c);
  CHECK_EQ(a->depth, 3);
  CHECK_EQ(d->depth, 2);
  CHECK(memcmp(a->frames, f1, sizeof(f1)) == 0);
}

/* 100k distinct stacks (more than the 64K chain heads): each found again, unchanged. */
static void test_stack_table_many_stacks(void) {
  enum { N = 100000 };
  static prof_stack_t *got[N];
  for (uintptr_t i = 0; i < N; i++) {
    uintptr_t f[4] = {0x400000 + i * 16, 0x500000, 0x600000 + (i % 7), i};
    got[i] = prof_stack_intern(f, 4);
    CHECK(got[i] != NULL);
  }
  int bad = 0;
  for (uintptr_t i = 0; i < N; i++) {
    uintptr_t f[4] = {0x400000 + i * 16, 0x500000, 0x600000 + (i % 7), i};
    bad += prof_stack_intern(f, 4) != got[i] || got[i]->frames[3] != i;
  }
  CHECK_EQ(bad, 0);
}

int main(void) {
  if (strata_init()) return 1;
  RUN(test_sampler_intervals_are_exponential);
  RUN(test_sampler_seeds_and_rate_one);
  RUN(test_sampler_math_matches_libm);
  RUN(test_stack_table_deduplicates);
  RUN(test_stack_table_many_stacks);
  UNIT_EXIT();
}
