/* test_sampler_stats.c — distributional checks with 100k seeded draws (one per
 * position): inverse-CDF sampling, residual sampling, the full sample_logits path,
 * and the speculative accept/reject rule on one position, whose marginal must be p.
 * Each check also runs a deliberately wrong variant that must FAIL, so the tests
 * are shown to have the power to catch a mistake. Critical values: p = 0.001. */
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/testutil.h"
#include "tests/sampler/chi2.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

enum { N_DRAWS = 100000, NC = 30 };
static const uint64_t SEED = 0x5eed5eedull;

/* 30 categories, magnitudes from 0.2 down to 0.001, with zeros in the middle */
static void fixed_dist(float *p) {
    double w[NC], z = 0;
    for (int i = 0; i < NC; i++) {
        w[i] = (i % 7 == 3) ? 0.0 : pow(0.8, i) * (1.0 + 0.5 * (i % 3));
        z += w[i];
    }
    for (int i = 0; i < NC; i++) p[i] = (float)(w[i] / z);
}

static bool chi2_pass(const char *what, const long *counts, const double *expect, int n, bool report) {
    int dof;
    double x2 = chi2_stat(counts, expect, n, N_DRAWS, &dof);
    double crit = chi2_critical_001(dof);
    if (report) fprintf(stderr, "%-44s chi2 %10.1f  dof %2d  crit %.1f  %s\n", what, x2, dof, crit,
                        x2 < crit ? "pass" : "FAIL");
    return dof > 0 && x2 < crit;
}

static void test_sample_chi2(void) {
    float p[NC];
    double e[NC];
    long counts[NC] = { 0 };
    fixed_dist(p);
    for (int i = 0; i < NC; i++) e[i] = p[i];
    for (uint64_t pos = 0; pos < N_DRAWS; pos++)
        counts[sampler_sample(p, NC, rng_uniform(SEED, pos, RNG_SAMPLE, 0))]++;
    CHECK(chi2_pass("sampler_sample vs p", counts, e, NC, true));
    /* power: the same draws against a distribution with two categories nudged by 5% */
    double e2[NC];
    memcpy(e2, e, sizeof e);
    e2[1] *= 1.05; e2[2] *= 0.95;
    CHECK(!chi2_pass("  control: vs p with p1 +5%, p2 -5%", counts, e2, NC, true));
}

static void residual_dist(const float *p, const float *q, double *r) {
    for (int i = 0; i < NC; i++) r[i] = fmax(0.0, (double)p[i] - (double)q[i]);
}

static void make_q(float *q) {
    double w[NC], z = 0;
    for (int i = 0; i < NC; i++) {
        w[i] = (i % 5 == 1) ? 0.0 : pow(0.85, NC - 1 - i) + 0.02;
        z += w[i];
    }
    for (int i = 0; i < NC; i++) q[i] = (float)(w[i] / z);
}

static void test_residual_chi2(void) {
    float p[NC], q[NC];
    double r[NC];
    long counts[NC] = { 0 }, bad[NC] = { 0 };
    fixed_dist(p);
    make_q(q);
    residual_dist(p, q, r);
    for (uint64_t pos = 0; pos < N_DRAWS; pos++) {
        double u = rng_uniform(SEED, pos, RNG_RESIDUAL, 0);
        counts[sampler_sample_residual(p, q, NC, u)]++;
        /* broken variant: weights |p - q| (the residual without the max(0, ·)) */
        float a[NC];
        for (int i = 0; i < NC; i++) a[i] = fabsf(p[i] - q[i]);
        bad[sampler_sample(a, NC, u)]++;
    }
    CHECK(chi2_pass("sampler_sample_residual vs max(0,p-q)", counts, r, NC, true));
    CHECK(!chi2_pass("  control: |p-q| instead of max(0,p-q)", bad, r, NC, true));
}

/* One speculative position: d ~ q, accept with probability min(1, p/q), else draw
 * from the residual. Returns the output token. `broken` draws the correction from p
 * instead of the residual (a classic mistake that biases the output). */
static int spec_position(const float *p, const float *q, int n, uint64_t pos, bool broken) {
    int d = sampler_sample(q, n, rng_uniform(SEED, pos, RNG_DRAFT, 0));
    double a = rng_uniform(SEED, pos, RNG_ACCEPT, 0);
    if (a * q[d] < p[d]) return d; /* a < p/q, with q[d] > 0 */
    double u = rng_uniform(SEED, pos, RNG_RESIDUAL, 0);
    return broken ? sampler_sample(p, n, u) : sampler_sample_residual(p, q, n, u);
}

static void test_speculative_rule(void) {
    /* hand-made p, q (with zeros on both sides) */
    float p[NC], q[NC];
    double e[NC];
    long counts[NC] = { 0 }, bad[NC] = { 0 };
    fixed_dist(p);
    make_q(q);
    for (int i = 0; i < NC; i++) e[i] = p[i];
    for (uint64_t pos = 0; pos < N_DRAWS; pos++) {
        counts[spec_position(p, q, NC, pos, false)]++;
        bad[spec_position(p, q, NC, pos, true)]++;
    }
    CHECK(chi2_pass("speculative rule marginal vs p", counts, e, NC, true));
    CHECK(!chi2_pass("  control: correction drawn from p", bad, e, NC, true));

    /* p and q from sampler_probs with ONE config applied to two logit vectors */
    enum { V = 200 };
    float lp[V], lq[V], pp[V], qq[V];
    double ep[V];
    long c2[V] = { 0 };
    uint64_t st = 17;
    for (int i = 0; i < V; i++) {
        lp[i] = (float)(t_gauss(&st) * 2.0);
        lq[i] = lp[i] + (float)(t_gauss(&st) * 1.0);
    }
    sampler *s = sampler_create(V);
    sampler_config c = { .temperature = 0.8f, .top_k = 60, .top_p = 0.95f, .min_p = 0.01f };
    sampler_probs(s, &c, lp, pp);
    sampler_probs(s, &c, lq, qq);
    int only_p = 0, only_q = 0;
    for (int i = 0; i < V; i++) {
        ep[i] = pp[i];
        only_p += pp[i] > 0 && qq[i] == 0;
        only_q += qq[i] > 0 && pp[i] == 0;
    }
    CHECKF(only_p > 0 && only_q > 0, "supports should differ both ways (%d, %d)", only_p, only_q);
    for (uint64_t pos = 0; pos < N_DRAWS; pos++) c2[spec_position(pp, qq, V, pos, false)]++;
    CHECK(chi2_pass("speculative rule, processed p/q (V=200)", c2, ep, V, true));
    sampler_destroy(s);
}

static void test_sample_logits_chi2(void) {
    enum { V = 500 };
    float l[V], probs[V];
    double e[V];
    long counts[V] = { 0 };
    uint64_t st = 23;
    for (int i = 0; i < V; i++) l[i] = (float)(t_gauss(&st) * 2.0);
    sampler *s = sampler_create(V);
    sampler_config c = { .temperature = 0.7f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f };
    sampler_probs(s, &c, l, probs);
    for (int i = 0; i < V; i++) e[i] = probs[i];
    int outside = 0;
    for (uint64_t pos = 0; pos < N_DRAWS; pos++) {
        int t = sampler_sample_logits(s, &c, l, NULL, SEED, pos);
        outside += probs[t] == 0.0f;
        counts[t]++;
    }
    CHECK(outside == 0);
    CHECK(chi2_pass("sample_logits (T=0.7, top_p=0.9) vs probs", counts, e, V, true));
    /* control: the unfiltered softmax is a different distribution */
    sampler_config plain = { .temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f };
    sampler_probs(s, &plain, l, probs);
    for (int i = 0; i < V; i++) e[i] = probs[i];
    CHECK(!chi2_pass("  control: vs the unfiltered softmax", counts, e, V, true));
    sampler_destroy(s);
}

int main(void) {
    test_sample_chi2();
    test_residual_chi2();
    test_speculative_rule();
    test_sample_logits_chi2();
    TEST_DONE();
}
