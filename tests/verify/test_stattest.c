/* test_stattest.c — engine/stattest against reference values computed with
 * scipy 1.10.1 (/usr/bin/python3): chi2.sf, special.gammaincc, kstwobign.sf,
 * chi2_contingency(correction=False) and ks_2samp; plus the merging rule. */
#include "engine/spec/stattest.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static bool rel_close(double got, double want, double rtol) {
    if (want == 0.0) return fabs(got) < 1e-300;
    return fabs(got - want) <= rtol * fabs(want);
}

static void test_chi2_sf(void) {
    /* scipy.stats.chi2.sf(x, k) */
    static const struct { double x; int k; double sf; } v[] = {
        {0.5, 1, 0.47950012218695337},
        {3.84, 1, 0.05004352124870519},
        {10.0, 3, 0.01856613546304325},
        {1.0, 10, 0.9998278843700441},
        {20.0, 10, 0.029252688076961124},
        {150.0, 100, 0.0009039320423540184},
        {80.0, 100, 0.9296649333406051},
        {300.0, 100, 7.4121008573230175e-22},
        {1000.0, 20, 3.9047966391213445e-199},
        {0.01, 2, 0.9950124791926823},
        {1e-06, 1, 0.9992021155721779},
        {2000.0, 500, 5.224452135049434e-178},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        double got = stattest_chi2_sf(v[i].x, v[i].k);
        CHECKF(rel_close(got, v[i].sf, 1e-10), "chi2_sf(%g, %d) = %.17g, scipy %.17g", v[i].x, v[i].k, got, v[i].sf);
    }
    CHECK(stattest_chi2_sf(0.0, 3) == 1.0);
    CHECK(stattest_chi2_sf(-1.0, 3) == 1.0);
    CHECK(isnan(stattest_chi2_sf(1.0, 0)));
    CHECK(stattest_chi2_sf(INFINITY, 4) == 0.0);
    /* scipy.special.gammaincc(a, x) */
    static const struct { double a, x, q; } g[] = {
        {0.5, 0.1, 0.6547208460185768},   {2.5, 7.0, 0.01560941610026691}, {10.0, 3.0, 0.9988975118698845},
        {100.0, 120.0, 0.027863739890520652}, {3.0, 3.0, 0.42319008112684364},
    };
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
        double got = stattest_gamma_q(g[i].a, g[i].x);
        CHECKF(rel_close(got, g[i].q, 1e-10), "gamma_q(%g, %g) = %.17g, scipy %.17g", g[i].a, g[i].x, got, g[i].q);
    }
    CHECK(isnan(stattest_gamma_q(0.0, 1.0)));
    CHECK(isnan(stattest_gamma_q(1.0, -1.0)));
}

static void test_kolmogorov(void) {
    /* scipy.stats.kstwobign.sf(z); both sides of the series switch at 1.18 */
    static const struct { double z, sf; } v[] = {
        {0.1, 1.0}, {0.3, 0.9999906941986655}, {0.5, 0.9639452436648751}, {0.8, 0.5441424115741981},
        {1.0, 0.26999967167735456}, {1.17, 0.12939004218561884}, {1.19, 0.11774229287977166},
        {1.36, 0.049485876755377876}, {1.63, 0.009846364888486529}, {2.0, 0.0006709252557796953},
        {3.0, 3.045995948942526e-08},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        double got = stattest_kolmogorov_sf(v[i].z);
        CHECKF(fabs(got - v[i].sf) <= 1e-12 + 1e-9 * v[i].sf, "kolmogorov_sf(%g) = %.17g, scipy %.17g", v[i].z, got,
               v[i].sf);
    }
    CHECK(stattest_kolmogorov_sf(0.0) == 1.0);
    /* ks_2samp(a, b).statistic and kstwobign.sf(sqrt(en) D) for
     * a = [0]*5+[1]*10+[2]*20+[3]*7+[7]*3, b = [0]*2+[1]*14+[2]*15+[3]*12+[5]*4+[7]*1 */
    uint64_t a[8] = {5, 10, 20, 7, 0, 0, 0, 3}, b[8] = {2, 14, 15, 12, 0, 4, 0, 1};
    double p;
    double D = stattest_ks_2samp_hist(a, b, 8, &p);
    CHECKF(fabs(D - 0.13194444444444442) < 1e-12, "KS D %.17g", D);
    CHECKF(fabs(p - 0.8135181252415895) < 1e-9, "KS p %.17g", p);
    CHECK(fabs(stattest_ks_2samp_hist(b, a, 8, NULL) - D) < 1e-15); /* symmetric */
    /* identical shapes, different sizes: D = 0, p = 1 */
    uint64_t c[8] = {10, 20, 40, 14, 0, 0, 0, 6};
    CHECK(stattest_ks_2samp_hist(a, c, 8, &p) == 0.0 && p == 1.0);
    /* disjoint supports: D = 1 */
    uint64_t lo[4] = {50, 50, 0, 0}, hi[4] = {0, 0, 50, 50};
    D = stattest_ks_2samp_hist(lo, hi, 4, &p);
    CHECK(D == 1.0 && p < 1e-10);
    uint64_t empty[4] = {0};
    D = stattest_ks_2samp_hist(lo, empty, 4, &p);
    CHECK(D == 0.0 && p == 1.0);
}

static void homog(const uint64_t *a, const uint64_t *b, int n, stattest_chi2_result *r) {
    int scratch[64];
    stattest_chi2_homogeneity(a, b, n, 5.0, scratch, r);
}

static void test_homogeneity(void) {
    stattest_chi2_result r;
    /* no merging: chi2_contingency([[100,200,300,400],[110,190,320,380]]) */
    uint64_t a1[4] = {100, 200, 300, 400}, b1[4] = {110, 190, 320, 380};
    homog(a1, b1, 4, &r);
    CHECKF(fabs(r.stat - 1.890582535743826) < 1e-9 && r.dof == 3 && r.bins == 4 && r.merged == 0,
           "stat %.17g dof %d bins %d merged %d", r.stat, r.dof, r.bins, r.merged);
    CHECKF(fabs(r.p - 0.5954242256689977) < 1e-9, "p %.17g", r.p);
    CHECK(r.n1 == 1000 && r.n2 == 1000);

    /* merging: columns with totals 3, 5, 5, 3 have smaller expected < 5 → one "other" bin of
     * (6, 10) whose expected 7.98 passes; the empty category is ignored.
     * chi2_contingency([[500,300,6],[480,320,10]]) */
    uint64_t a2[7] = {500, 300, 2, 1, 3, 0, 0}, b2[7] = {480, 320, 1, 4, 2, 3, 0};
    homog(a2, b2, 7, &r);
    CHECKF(fabs(r.stat - 2.0434360853567055) < 1e-9 && r.dof == 2 && r.bins == 3 && r.merged == 4,
           "stat %.17g dof %d bins %d merged %d", r.stat, r.dof, r.bins, r.merged);
    CHECKF(fabs(r.p - 0.35997595455037484) < 1e-9, "p %.17g", r.p);

    /* an "other" bin still too small absorbs the smallest kept category:
     * (1, 0) and (0, 2) pool to 3 (expected 1.5), then fold in (50, 60).
     * chi2_contingency([[1000,51],[1000,62]]) */
    uint64_t a3[4] = {1000, 50, 1, 0}, b3[4] = {1000, 60, 0, 2};
    homog(a3, b3, 4, &r);
    CHECKF(fabs(r.stat - 1.013559375948109) < 1e-9 && r.dof == 1 && r.bins == 2 && r.merged == 3,
           "stat %.17g dof %d bins %d merged %d", r.stat, r.dof, r.bins, r.merged);
    CHECKF(fabs(r.p - 0.3140516301822063) < 1e-9, "p %.17g", r.p);

    /* very different histograms: chi2_contingency([[300,200,100],[100,200,300]]) = 200, p 3.72e-44 */
    uint64_t a4[3] = {300, 200, 100}, b4[3] = {100, 200, 300};
    homog(a4, b4, 3, &r);
    CHECKF(fabs(r.stat - 200.0) < 1e-9 && r.dof == 2, "stat %.17g", r.stat);
    CHECKF(rel_close(r.p, 3.7200759760208177e-44, 1e-8), "p %.17g", r.p);

    /* identical histograms, and identical shapes at different sample sizes: statistic 0, p 1 */
    homog(a1, a1, 4, &r);
    CHECK(r.stat == 0.0 && r.p == 1.0 && r.dof == 3);
    uint64_t a1x2[4] = {200, 400, 600, 800};
    homog(a1, a1x2, 4, &r);
    CHECKF(fabs(r.stat) < 1e-12 && fabs(r.p - 1.0) < 1e-12, "stat %g p %g", r.stat, r.p);

    /* not testable: one category only, one empty sample, everything rare */
    uint64_t one_a[3] = {0, 700, 0}, one_b[3] = {0, 900, 0}, none[3] = {0, 0, 0};
    homog(one_a, one_b, 3, &r);
    CHECK(r.dof == 0 && r.p == 1.0 && r.stat == 0.0 && r.bins == 1);
    homog(one_a, none, 3, &r);
    CHECK(r.dof == 0 && r.p == 1.0 && r.n2 == 0);
    uint64_t rare_a[4] = {1, 1, 1, 0}, rare_b[4] = {0, 1, 1, 1};
    homog(rare_a, rare_b, 4, &r);
    CHECK(r.dof == 0 && r.p == 1.0 && r.bins == 1 && r.merged == 4);

    /* a category that only one sample has, with enough mass, is kept and dominates */
    uint64_t only_a[3] = {500, 500, 60}, only_b[3] = {500, 500, 0};
    homog(only_a, only_b, 3, &r);
    CHECKF(r.dof == 2 && r.merged == 0 && r.p < 1e-12, "dof %d merged %d p %g", r.dof, r.merged, r.p);
}

/* Under the null (both samples from one distribution) the p-value must be
 * roughly uniform: about alpha of the tests reject at alpha. A test-local
 * generator draws from a fixed 20-category distribution with rare tails. */
static uint64_t rs = 0x1234567;
static double unif(void) {
    uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static void test_null_calibration(void) {
    enum { C = 20, TRIALS = 2000, N = 800 };
    double w[C], sum = 0;
    for (int j = 0; j < C; j++) sum += (w[j] = exp(-0.35 * j));
    int rej05 = 0, rej01 = 0;
    for (int t = 0; t < TRIALS; t++) {
        uint64_t a[C] = {0}, b[C] = {0};
        for (int s = 0; s < 2 * N; s++) {
            double u = unif() * sum, c = 0;
            int j = 0;
            for (; j < C - 1; j++)
                if ((c += w[j]) > u) break;
            (s < N ? a : b)[j]++;
        }
        stattest_chi2_result r;
        homog(a, b, C, &r);
        rej05 += r.p < 0.05;
        rej01 += r.p < 0.01;
    }
    /* binomial(2000, 0.05): mean 100, sd 9.7; (2000, 0.01): mean 20, sd 4.4 */
    CHECKF(rej05 > 60 && rej05 < 140, "null rejections at 0.05: %d of %d", rej05, TRIALS);
    CHECKF(rej01 > 5 && rej01 < 40, "null rejections at 0.01: %d of %d", rej01, TRIALS);
    fprintf(stderr, "null calibration: %d/%d rejections at 0.05, %d at 0.01\n", rej05, TRIALS, rej01);
}

int main(void) {
    test_chi2_sf();
    test_kolmogorov();
    test_homogeneity();
    test_null_calibration();
    TEST_DONE();
}
