/* stattest.h — the few statistical tests specd needs to check that speculative
 * decoding leaves the output distribution unchanged (`specd verify`): the χ²
 * survival function, a two-sample χ² homogeneity test on token histograms, and
 * the two-sample Kolmogorov–Smirnov statistic with its asymptotic p-value.
 * Not a general statistics library. Pure functions: any thread, no allocation
 * except where a function says so. */
#ifndef SPECD_STATTEST_H
#define SPECD_STATTEST_H

#include <stdint.h>

/* Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a), for a > 0 and
 * x >= 0 (series for x < a + 1, Lentz continued fraction otherwise; relative
 * accuracy ~1e-14 away from underflow). NaN for invalid arguments. */
double stattest_gamma_q(double a, double x);

/* Survival function of the χ² distribution with dof degrees of freedom:
 * P(X >= x) = Q(dof/2, x/2). 1 for x <= 0; NaN when dof < 1. */
double stattest_chi2_sf(double x, int dof);

/* Result of a homogeneity test between two samples over the same categories. */
typedef struct {
    double stat;      /* Pearson χ² of the 2×bins contingency table */
    int dof;          /* bins − 1; 0 when the test is not possible (then p = 1) */
    double p;         /* stattest_chi2_sf(stat, dof) */
    int bins;         /* columns after merging */
    int merged;       /* observed categories folded into the "other" bin */
    uint64_t n1, n2;  /* sample sizes */
} stattest_chi2_result;

/* Two-sample χ² homogeneity test: are the histograms a[n] and b[n] (counts per
 * category, e.g. per token id) draws from one distribution? Expected counts are
 * E_rj = n_r · (a_j + b_j) / (n1 + n2). Categories whose smaller expected count
 * is below min_expected (5 is the usual rule) are merged into one "other" bin;
 * if that bin is itself still below min_expected it is folded into the smallest
 * kept category (repeatedly), so every bin used satisfies the rule. Categories
 * seen in neither sample do not count. With fewer than 2 bins, or an empty
 * sample, the test is not possible: stat 0, dof 0, p 1.
 * scratch: n ints (the kept categories); no allocation. */
void stattest_chi2_homogeneity(const uint64_t *a, const uint64_t *b, int n, double min_expected, int *scratch,
                               stattest_chi2_result *out);

/* Survival function of the Kolmogorov distribution (the limit law of
 * sqrt(n)·D): P(K > z) = 2 Σ_{k>=1} (−1)^(k−1) exp(−2 k² z²); 1 for z <= 0. */
double stattest_kolmogorov_sf(double z);

/* Two-sample KS statistic D = max_x |F_a(x) − F_b(x)| of two samples given as
 * histograms over ordered values 0..n−1 (category index = the value). Writes
 * the asymptotic p-value stattest_kolmogorov_sf(sqrt(n1 n2 / (n1 + n2)) · D)
 * into *p (when p is not NULL; 1 when a sample is empty). With many ties, as
 * for token ids, this p-value is conservative. */
double stattest_ks_2samp_hist(const uint64_t *a, const uint64_t *b, int n, double *p);

#endif
