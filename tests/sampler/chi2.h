/* chi2.h — χ² goodness-of-fit helpers shared by the sampler tests (header-only). */
#ifndef SPECD_TEST_CHI2_H
#define SPECD_TEST_CHI2_H
#include <math.h>
#include <stdint.h>

/* Upper-tail standard normal quantile at 0.001 (Φ^-1(0.999)). */
#define CHI2_Z_0_001 3.090232306167813

/* Critical value of χ² with `dof` degrees of freedom at upper-tail probability
 * 0.001, by the Wilson–Hilferty cube approximation
 *   x ≈ k (1 - 2/(9k) + z sqrt(2/(9k)))^3.
 * Against scipy.stats.chi2.ppf(0.999, k) it is within 0.7% for k >= 9 and errs
 * high (k=9: 28.06 vs 27.88; k=29: 58.41 vs 58.30; k=99: 148.29 vs 148.23). */
static inline double chi2_critical_001(int dof) {
    double k = dof, a = 2.0 / (9.0 * k);
    double t = 1.0 - a + CHI2_Z_0_001 * sqrt(a);
    return k * t * t * t;
}

/* Pearson χ² of counts[n] (N draws in total) against probabilities expect[n]
 * (need not be normalised; they are). Categories whose expected count is below 5
 * are pooled into one bin (dropped if the pool itself stays below 5). A draw in a
 * category of zero expected probability makes the statistic infinite.
 * Returns the statistic and writes the degrees of freedom (bins - 1). */
static inline double chi2_stat(const long *counts, const double *expect, int n, long N, int *dof) {
    double tot = 0.0;
    for (int i = 0; i < n; i++) tot += expect[i];
    double stat = 0.0, pool_e = 0.0;
    long pool_c = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        double e = expect[i] / tot * (double)N;
        if (e == 0.0) {
            if (counts[i] != 0) stat = INFINITY;
            continue;
        }
        if (e < 5.0) { pool_e += e; pool_c += counts[i]; continue; }
        double d = (double)counts[i] - e;
        stat += d * d / e;
        bins++;
    }
    if (pool_e >= 5.0) {
        double d = (double)pool_c - pool_e;
        stat += d * d / pool_e;
        bins++;
    }
    *dof = bins - 1;
    return stat;
}

/* Test-local generator for inputs (not the generator under test). */
static inline uint64_t t_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double t_unif(uint64_t *s) { return (double)(t_splitmix(s) >> 11) * 0x1.0p-53; }
/* approximately normal (Irwin–Hall of 12), enough for test logits */
static inline double t_gauss(uint64_t *s) {
    double a = 0.0;
    for (int i = 0; i < 12; i++) a += t_unif(s);
    return a - 6.0;
}

#endif
