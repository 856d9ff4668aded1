/* stattest.c — χ² survival, χ² homogeneity and two-sample KS for `specd verify`
 * (see stattest.h). Formulas: incomplete gamma by series / Lentz continued
 * fraction; Kolmogorov distribution by its two classical series. */
#include "engine/spec/stattest.h"

#include <math.h>

#define ST_EPS 1e-15
#define ST_TINY 1e-300
#define ST_MAX_ITER 10000

/* P(a, x) by its power series; valid (fast) for x < a + 1. */
static double gamma_p_series(double a, double x) {
    double ap = a, sum = 1.0 / a, del = sum;
    for (int i = 0; i < ST_MAX_ITER; i++) {
        ap += 1.0;
        del *= x / ap;
        sum += del;
        if (fabs(del) < fabs(sum) * ST_EPS) break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

/* Q(a, x) by the continued fraction (modified Lentz); valid for x >= a + 1. */
static double gamma_q_cfrac(double a, double x) {
    double b = x + 1.0 - a, c = 1.0 / ST_TINY, d = 1.0 / b, h = d;
    for (int i = 1; i < ST_MAX_ITER; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < ST_TINY) d = ST_TINY;
        c = b + an / c;
        if (fabs(c) < ST_TINY) c = ST_TINY;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < ST_EPS) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double stattest_gamma_q(double a, double x) {
    if (!(a > 0.0) || !(x >= 0.0)) return NAN;
    if (x == 0.0) return 1.0;
    if (isinf(x)) return 0.0;
    if (x < a + 1.0) return 1.0 - gamma_p_series(a, x);
    return gamma_q_cfrac(a, x);
}

double stattest_chi2_sf(double x, int dof) {
    if (dof < 1 || isnan(x)) return NAN;
    if (x <= 0.0) return 1.0;
    return stattest_gamma_q(0.5 * dof, 0.5 * x);
}

void stattest_chi2_homogeneity(const uint64_t *a, const uint64_t *b, int n, double min_expected, int *scratch,
                               stattest_chi2_result *out) {
    uint64_t n1 = 0, n2 = 0;
    for (int j = 0; j < n; j++) n1 += a[j], n2 += b[j];
    *out = (stattest_chi2_result){.stat = 0.0, .dof = 0, .p = 1.0, .bins = 0, .merged = 0, .n1 = n1, .n2 = n2};
    if (n1 == 0 || n2 == 0) return;
    double T = (double)n1 + (double)n2, nmin = (double)(n1 < n2 ? n1 : n2);
    /* the smaller row's expected count decides: nmin · column total / T */
    int k = 0;
    uint64_t oa = 0, ob = 0;
    for (int j = 0; j < n; j++) {
        uint64_t c = a[j] + b[j];
        if (c == 0) continue;
        if (nmin * (double)c / T >= min_expected) {
            scratch[k++] = j;
        } else {
            oa += a[j], ob += b[j];
            out->merged++;
        }
    }
    /* an "other" bin still below the rule absorbs the smallest kept categories */
    while (oa + ob > 0 && nmin * (double)(oa + ob) / T < min_expected && k > 0) {
        int s = 0;
        for (int i = 1; i < k; i++)
            if (a[scratch[i]] + b[scratch[i]] < a[scratch[s]] + b[scratch[s]]) s = i;
        oa += a[scratch[s]], ob += b[scratch[s]];
        out->merged++;
        scratch[s] = scratch[--k];
    }
    out->bins = k + (oa + ob > 0 ? 1 : 0);
    if (out->bins < 2) return;
    double stat = 0.0;
    for (int i = 0; i <= k; i++) {
        uint64_t ca, cb;
        if (i < k) ca = a[scratch[i]], cb = b[scratch[i]];
        else if (oa + ob > 0) ca = oa, cb = ob;
        else break;
        double col = (double)ca + (double)cb;
        double e1 = (double)n1 * col / T, e2 = (double)n2 * col / T;
        double d1 = (double)ca - e1, d2 = (double)cb - e2;
        stat += d1 * d1 / e1 + d2 * d2 / e2;
    }
    out->stat = stat;
    out->dof = out->bins - 1;
    out->p = stattest_chi2_sf(stat, out->dof);
}

double stattest_kolmogorov_sf(double z) {
    if (!(z > 0.0)) return 1.0;
    if (z < 1.18) {
        /* cdf = sqrt(2π)/z Σ_{k>=1} exp(−(2k−1)² π² / (8 z²)): converges fast for small z */
        double w = M_PI * M_PI / (8.0 * z * z), s = 0.0;
        for (int k = 1; k < 100; k++) {
            double t = exp(-(double)((2 * k - 1) * (2 * k - 1)) * w);
            s += t;
            if (t < 1e-17 * s) break;
        }
        double sf = 1.0 - sqrt(2.0 * M_PI) / z * s;
        return sf < 0.0 ? 0.0 : sf;
    }
    double s = 0.0, sign = 1.0;
    for (int k = 1; k < 100; k++) {
        double t = exp(-2.0 * k * k * z * z);
        s += sign * t;
        if (t < 1e-17 * s) break;
        sign = -sign;
    }
    double sf = 2.0 * s;
    return sf < 0.0 ? 0.0 : sf > 1.0 ? 1.0 : sf;
}

double stattest_ks_2samp_hist(const uint64_t *a, const uint64_t *b, int n, double *p) {
    uint64_t n1 = 0, n2 = 0;
    for (int j = 0; j < n; j++) n1 += a[j], n2 += b[j];
    if (n1 == 0 || n2 == 0) {
        if (p) *p = 1.0;
        return 0.0;
    }
    uint64_t ca = 0, cb = 0;
    double D = 0.0;
    for (int j = 0; j < n; j++) {
        ca += a[j], cb += b[j];
        double d = fabs((double)ca / (double)n1 - (double)cb / (double)n2);
        if (d > D) D = d;
    }
    if (p) {
        double en = (double)n1 * (double)n2 / ((double)n1 + (double)n2);
        *p = stattest_kolmogorov_sf(sqrt(en) * D);
    }
    return D;
}
