/* test_accept_point.c — the point-mass case of the lossless rule (deterministic
 * proposals: n-gram lookup), checked exactly without sampling: for every
 * dyadic p over V <= 16 tokens and every proposed token d, the engine's
 * decision intervals (accept iff u < p[d]; else accept_sample_without's inverse
 * CDF) are enumerated and the output law must equal p to 1e-9; the broken
 * variant (on rejection resample from p, d kept) is run through the same
 * enumeration and must be caught every time a rejection is possible. Then
 * accept_chain must take exactly the enumerated branches on chains that mix
 * sampled and deterministic drafts, and the greedy rule is accept iff argmax. */
#include "engine/spec/accept.h"
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/sampler/chi2.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define VMAX 16
#define ONE (1 << 24)

/* A dyadic distribution (every probability k·2^-24, summing to exactly 1):
 * kind 0 dense, 1 with zeros, 2 one-hot, 3 near-degenerate. */
static void dyadic(float *out, int V, int kind, uint64_t *rs) {
    int64_t k[VMAX] = {0}, tot = 0;
    if (kind == 2) {
        k[t_splitmix(rs) % (uint64_t)V] = ONE;
    } else if (kind == 3) {
        int top = (int)(t_splitmix(rs) % (uint64_t)V);
        k[top] = ONE - 3;
        k[(top + 1) % V] += 3;
    } else {
        double w[VMAX], s = 0;
        for (int i = 0; i < V; i++) {
            w[i] = t_unif(rs);
            w[i] = w[i] * w[i];
            if (kind == 1 && t_unif(rs) < 0.4) w[i] = 0;
            s += w[i];
        }
        if (s == 0) w[0] = s = 1;
        int big = 0;
        for (int i = 0; i < V; i++) {
            tot += k[i] = (int64_t)floor(w[i] / s * ONE);
            if (k[i] > k[big]) big = i;
        }
        k[big] += ONE - tot;
    }
    for (int i = 0; i < V; i++) out[i] = (float)k[i] / (float)ONE;
}

/* The correction's law as the engine draws it: interval widths of the inverse
 * CDF over p without d (keep_d: with d, the broken variant), normalised; each
 * interval's midpoint must map to its token through the engine's function. */
static void correction_law(double *r, const float *p, int V, int d, bool keep_d) {
    double total = 0;
    for (int i = 0; i < V; i++)
        if (keep_d || i != d) total += p[i];
    if (!(total > 0)) { /* rejection impossible: accept.h draws from p */
        for (int i = 0; i < V; i++) r[i] = p[i];
        return;
    }
    double c = 0;
    for (int t = 0; t < V; t++) {
        r[t] = 0;
        if ((!keep_d && t == d) || !(p[t] > 0)) continue;
        double mid = (c + p[t] / 2) / total;
        int got = keep_d ? sampler_sample(p, V, mid) : accept_sample_without(p, V, d, mid);
        CHECKF(got == t, "V=%d d=%d: u=%.9f draws %d, want %d", V, d, mid, got, t);
        r[t] = p[t] / total;
        c += p[t];
    }
}

static void test_law(void) {
    uint64_t rs = 4242;
    long cases = 0, caught = 0, breakable = 0;
    double worst = 0;
    for (int V = 2; V <= VMAX; V++)
        for (int rep = 0; rep < 150; rep++) {
            float p[VMAX];
            dyadic(p, V, rep % 4, &rs);
            for (int d = 0; d < V; d++) {
                double out[VMAX], r[VMAX], bad[VMAX];
                double a = p[d]; /* P(u < p[d]) for u uniform on [0, 1) */
                correction_law(r, p, V, d, false);
                for (int t = 0; t < V; t++) out[t] = (t == d ? a : 0) + (1 - a) * r[t];
                double e = 0;
                for (int t = 0; t < V; t++) e = fmax(e, fabs(out[t] - (double)p[t]));
                CHECKF(e <= 1e-9, "V=%d d=%d: output law deviates from p by %.3g", V, d, e);
                worst = fmax(worst, e);
                cases++;
                /* the broken rule through the same enumeration */
                correction_law(r, p, V, d, true);
                for (int t = 0; t < V; t++) bad[t] = (t == d ? a : 0) + (1 - a) * r[t];
                double eb = 0;
                for (int t = 0; t < V; t++) eb = fmax(eb, fabs(bad[t] - (double)p[t]));
                if (a > 0 && a < 1) {
                    breakable++;
                    caught += eb > 1e-9;
                }
            }
        }
    CHECKF(breakable > 5000 && caught == breakable, "the broken point-mass rule was caught in %ld of %ld cases",
           caught, breakable);
    fprintf(stderr, "point mass: %ld (p, d) cases, V=2..%d, max |P-p| = %.3g; broken rule (d kept) caught in "
                    "%ld/%ld\n", cases, VMAX, worst, caught, breakable);
}

/* The rule's branches for given random numbers: a deterministic draft is
 * accepted iff u < p[d], else corrected by the inverse CDF of p without d; a
 * sampled one by min(1, p/q) and the residual (sampler_sample_residual). */
static int oracle(int32_t *out, const float *p, const float *q, const bool *det, const int32_t *draft, int gamma,
                  int V, uint64_t seed, uint64_t pos0, bool *unsure) {
    *unsure = false;
    for (int j = 0; j < gamma; j++) {
        const float *pj = p + j * V;
        int d = draft[j];
        double u = rng_uniform(seed, pos0 + (uint64_t)j, RNG_ACCEPT, 0);
        double a = det[j] ? pj[d] : accept_prob(pj[d], q[j * V + d]);
        if (fabs(u - a) < 1e-9) *unsure = true;
        if (u < a) {
            out[j] = d;
            continue;
        }
        double u2 = rng_uniform(seed, pos0 + (uint64_t)j, RNG_RESIDUAL, 0);
        if (det[j]) {
            double r[VMAX], c = 0;
            correction_law(r, pj, V, d, false);
            out[j] = -1;
            for (int t = 0; t < V; t++) {
                if (r[t] <= 0) continue;
                if (fabs(u2 - c) < 1e-6 || fabs(u2 - c - r[t]) < 1e-6) *unsure = true;
                c += r[t];
                if (u2 < c && out[j] < 0) out[j] = t;
            }
        } else {
            out[j] = sampler_sample_residual(pj, q + j * V, V, u2);
        }
        return j;
    }
    out[gamma] = sampler_sample(p + gamma * V, V, rng_uniform(seed, pos0 + (uint64_t)gamma, RNG_BONUS, 0));
    return gamma;
}

static void test_branches(void) {
    uint64_t rs = 99;
    float scratch[VMAX];
    long compared = 0, skipped = 0, det_rejects = 0, caught = 0, broken_cmp = 0;
    for (int rep = 0; rep < 20000; rep++) {
        int V = 2 + rep % (VMAX - 1), gamma = 1 + rep % 5;
        float p[6 * VMAX], q[5 * VMAX];
        int32_t draft[5], out[6], want[6];
        bool det[5];
        for (int j = 0; j <= gamma; j++) dyadic(p + j * V, V, (rep + j) % 4, &rs);
        for (int j = 0; j < gamma; j++) {
            det[j] = (rep >> j) % 3 != 0;
            dyadic(q + j * V, V, 0, &rs);
            /* deterministic drafts need not have target mass; bias towards p's likely tokens */
            if (det[j]) {
                double u = t_unif(&rs);
                draft[j] = u < 0.6 ? sampler_sample(p + j * V, V, t_unif(&rs)) : (int32_t)(t_splitmix(&rs) % (uint64_t)V);
            } else {
                draft[j] = sampler_sample(q + j * V, V, t_unif(&rs));
            }
        }
        uint64_t seed = 5000 + (uint64_t)rep, pos0 = (uint64_t)(rep % 31);
        bool unsure;
        int kw = oracle(want, p, q, det, draft, gamma, V, seed, pos0, &unsure);
        accept_rng rng = {seed, pos0, ACCEPT_CORRECT};
        int k = accept_chain(out, p, q, det, draft, gamma, V, false, &rng, scratch);
        if (unsure) {
            skipped++;
            continue;
        }
        compared++;
        det_rejects += kw < gamma && det[kw];
        CHECKF(k == kw, "rep=%d: accept_chain accepted %d, the rule says %d", rep, k, kw);
        if (k == kw)
            for (int i = 0; i <= k; i++) CHECKF(out[i] == want[i], "rep=%d: output %d is %d, want %d", rep, i, out[i], want[i]);
        /* the broken variant may hand the rejected draft itself back */
        if (kw < gamma && det[kw]) {
            accept_rng br = {seed, pos0, ACCEPT_BROKEN_POINT_KEEP};
            int kb = accept_chain(out, p, q, det, draft, gamma, V, false, &br, scratch);
            broken_cmp++;
            caught += kb == kw && out[kb] == draft[kb];
        }
    }
    CHECK(compared > 15000 && det_rejects > 3000);
    CHECKF(caught > 0, "the broken variant never returned the rejected draft (%ld rejections)", broken_cmp);
    fprintf(stderr, "accept_chain vs the enumerated branches: %ld chains (%ld point-mass rejections), %ld skipped "
                    "at a rounding boundary; broken variant re-emitted the rejected draft in %ld of %ld\n",
            compared, det_rejects, skipped, caught, broken_cmp);

    /* greedy: accept a deterministic draft iff it is p's argmax */
    for (int rep = 0; rep < 2000; rep++) {
        int V = 2 + rep % (VMAX - 1), gamma = 1 + rep % 6;
        float p[7 * VMAX] = {0};
        int32_t draft[6], out[7], top[7];
        bool det[6] = {true, true, true, true, true, true};
        for (int j = 0; j <= gamma; j++) {
            top[j] = (int32_t)(t_splitmix(&rs) % (uint64_t)V);
            p[j * V + top[j]] = 1;
            if (j < gamma) draft[j] = t_unif(&rs) < 0.7 ? top[j] : (int32_t)(t_splitmix(&rs) % (uint64_t)V);
        }
        int kw = 0;
        while (kw < gamma && draft[kw] == top[kw]) kw++;
        accept_rng rng = {(uint64_t)rep, 0, ACCEPT_CORRECT};
        int k = accept_chain(out, p, NULL, det, draft, gamma, V, true, &rng, scratch);
        CHECKF(k == kw && out[k] == top[k], "greedy rep=%d: accepted %d (want %d), last %d (want %d)", rep, k, kw,
               out[k], top[k]);
    }
}

int main(void) {
    test_law();
    test_branches();
    TEST_DONE();
}
