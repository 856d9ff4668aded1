/* test_accept_exact.c — the accept/reject rule checked exactly, without sampling:
 * the output distribution of one accept/reject position and of the first two
 * output tokens of whole γ-token steps, computed by enumerating the algorithm's
 * branches with accept_prob and the residual, must equal p to 1e-9; and
 * accept_step must take exactly those branches for given random numbers.
 *
 * Inputs are dyadic (every probability k·2^-24, summing to exactly 1), so the
 * float vectors the engine sees are exactly the distributions enumerated in
 * double: any deviation above rounding (~1e-16) is the rule's, not the data's. */
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

/* ---- dyadic distributions -------------------------------------------------- */

/* Kinds: 0 random dense, 1 random with zeros, 2 near-degenerate (one token
 * holds all but a few 2^-24), 3 one-hot, 4 two tokens. */
static void dyadic(float *out, int V, int kind, uint64_t *rs) {
    int64_t k[VMAX] = {0};
    int64_t tot = 0;
    if (kind == 3) {
        k[t_splitmix(rs) % (uint64_t)V] = ONE;
    } else if (kind == 2) {
        int top = (int)(t_splitmix(rs) % (uint64_t)V);
        int64_t left = 1 + (int64_t)(t_splitmix(rs) % 5); /* 1..5 units of 2^-24 */
        k[top] = ONE - left;
        for (; left > 0; left--) {
            int j = (int)(t_splitmix(rs) % (uint64_t)V);
            if (j == top) j = (j + 1) % V;
            k[j]++;
        }
        if (V == 1) k[0] = ONE;
    } else if (kind == 4) {
        int a = (int)(t_splitmix(rs) % (uint64_t)V), b = (a + 1 + (int)(t_splitmix(rs) % (uint64_t)(V - 1))) % V;
        k[a] = 1 + (int64_t)(t_splitmix(rs) % (ONE - 1));
        k[b] = ONE - k[a];
    } else {
        double w[VMAX], s = 0;
        for (int i = 0; i < V; i++) {
            w[i] = t_unif(rs);
            w[i] = w[i] * w[i] * w[i]; /* skewed */
            if (kind == 1 && t_unif(rs) < 0.4) w[i] = 0;
            s += w[i];
        }
        if (s == 0) w[0] = s = 1;
        for (int i = 0; i < V; i++) tot += k[i] = (int64_t)floor(w[i] / s * ONE);
        int big = 0;
        for (int i = 1; i < V; i++)
            if (k[i] > k[big]) big = i;
        k[big] += ONE - tot;
    }
    tot = 0;
    for (int i = 0; i < V; i++) {
        out[i] = (float)k[i] / (float)ONE; /* exact: k < 2^24 or k = 2^24 */
        tot += k[i];
    }
    if (tot != ONE) {
        fprintf(stderr, "dyadic: bad total\n");
        exit(1);
    }
}

/* A draft distribution q for a given p, in one of several relations:
 * 0 independent, 1 q == p, 2 q has a zero where p has mass, 3 dense q (mass
 * wherever p has zeros), 4 q = p with one unit of 2^-24 moved (near-degenerate). */
static void make_q(const float *p, float *q, int V, int rel, uint64_t *rs) {
    switch (rel) {
    case 0:
        dyadic(q, V, (int)(t_splitmix(rs) % 5), rs);
        break;
    case 1:
        memcpy(q, p, sizeof(float) * (size_t)V);
        break;
    case 2: {
        dyadic(q, V, 0, rs);
        int z = 0;
        for (int i = 0; i < V; i++)
            if (p[i] > 0) { z = i; break; }
        q[(z + 1) % V] += q[z], q[z] = 0; /* exact: multiples of 2^-24 summing to <= 1 */
        break;
    }
    case 3:
        dyadic(q, V, 0, rs);
        break;
    default: {
        memcpy(q, p, sizeof(float) * (size_t)V);
        int a = 0;
        for (int i = 0; i < V; i++)
            if (q[i] > 0) a = i;
        q[a] -= 1.0f / ONE;
        q[(a + 1) % V] += 1.0f / ONE;
        break;
    }
    }
}

/* A (p, q) pair: for relation 3, p is given zeros where the dense q has mass. */
static void make_pair(float *p, float *q, int V, int rel, uint64_t *rs) {
    dyadic(p, V, rel == 3 ? 1 : (int)(t_splitmix(rs) % 5), rs);
    if (rel == 3) {
        bool has_zero = false;
        for (int i = 0; i < V; i++) has_zero |= p[i] == 0;
        if (!has_zero) {
            int a = (int)(t_splitmix(rs) % (uint64_t)V);
            p[(a + 1) % V] += p[a], p[a] = 0;
        }
    }
    make_q(p, q, V, rel, rs);
}

/* ---- the enumerated one-position rule -------------------------------------- */

/* Residual normalize(max(0, p - q)) in double (or |p - q| for the broken
 * variant); p itself when its mass is below 1e-12 (as accept.h specifies).
 * Returns the residual mass. */
static double residual_d(double *r, const float *p, const float *q, int V, bool abs_variant) {
    double m = 0;
    for (int i = 0; i < V; i++) {
        double d = (double)p[i] - (double)q[i];
        r[i] = abs_variant ? fabs(d) : (d > 0 ? d : 0);
        m += r[i];
    }
    if (!(m >= 1e-12)) {
        for (int i = 0; i < V; i++) r[i] = p[i];
        return 0;
    }
    for (int i = 0; i < V; i++) r[i] /= m;
    return m;
}

/* out(t) = q(t)·a(t) + (1 − Σ_d q(d)·a(d))·r(t): the law of one position's
 * output token (the accepted draft, or the residual draw after a rejection). */
static void one_position(double *out, const float *p, const float *q, int V, bool abs_variant) {
    double r[VMAX], acc = 0;
    residual_d(r, p, q, V, abs_variant);
    for (int d = 0; d < V; d++) acc += (double)q[d] * accept_prob(p[d], q[d]);
    for (int t = 0; t < V; t++) out[t] = (double)q[t] * accept_prob(p[t], q[t]) + (1.0 - acc) * r[t];
}

static double max_abs_diff(const double *a, const float *p, int V) {
    double m = 0;
    for (int i = 0; i < V; i++)
        if (fabs(a[i] - (double)p[i]) > m) m = fabs(a[i] - (double)p[i]);
    return m;
}

/* Inverse CDF of w (summing to 1 in double) at u; *margin = distance of u to the
 * nearest cumulative boundary (to skip draws that rounding could flip). */
static int inv_cdf(const double *w, int V, double u, double *margin) {
    double c = 0;
    int last = -1;
    *margin = 1;
    for (int i = 0; i < V; i++) {
        if (w[i] <= 0) continue;
        double c2 = c + w[i];
        if (fabs(u - c2) < *margin) *margin = fabs(u - c2);
        if (u < c2) {
            if (c > 0 && fabs(u - c) < *margin) *margin = fabs(u - c);
            return i;
        }
        c = c2, last = i;
    }
    return last;
}

static void test_one_position(void) {
    uint64_t rs = 12345;
    double worst = 0, worst_res = 0;
    long cases = 0, broken_detected = 0, broken_cases = 0;
    for (int V = 2; V <= VMAX; V++)
        for (int rel = 0; rel < 5; rel++)
            for (int rep = 0; rep < 200; rep++) {
                float p[VMAX], q[VMAX], rf[VMAX];
                double out[VMAX], r[VMAX];
                make_pair(p, q, V, rel, &rs);
                one_position(out, p, q, V, false);
                double e = max_abs_diff(out, p, V);
                CHECKF(e <= 1e-9, "V=%d rel=%d: one-position output deviates from p by %.3g", V, rel, e);
                if (e > worst) worst = e;
                /* the engine's residual agrees with the double one */
                double m = residual_d(r, p, q, V, false);
                double mf = accept_residual(rf, p, q, V, ACCEPT_CORRECT);
                CHECKF(fabs(m - mf) <= 1e-12, "V=%d rel=%d: residual mass %.17g vs %.17g", V, rel, mf, m);
                for (int i = 0; i < V; i++) {
                    double d = fabs((double)rf[i] - r[i]);
                    CHECKF(d <= 1e-6, "V=%d rel=%d: accept_residual[%d] = %.9g vs %.9g", V, rel, i, (double)rf[i], r[i]);
                    if (d > worst_res) worst_res = d;
                }
                if (rel == 1) CHECK(mf == 0 && !memcmp(rf, p, sizeof(float) * (size_t)V)); /* p == q: out = p */
                /* the same enumeration catches the broken rule whenever q exceeds p somewhere
                 * while a rejection is possible */
                double mabs = 0, mpos = 0;
                for (int i = 0; i < V; i++) {
                    double d = (double)p[i] - (double)q[i];
                    mabs += fabs(d), mpos += d > 0 ? d : 0;
                }
                if (mpos > 1e-3) {
                    broken_cases++;
                    one_position(out, p, q, V, true);
                    broken_detected += max_abs_diff(out, p, V) > 1e-9;
                }
                cases++;
            }
    CHECKF(broken_cases > 1000 && broken_detected == broken_cases,
           "the enumeration must reject the |p-q| residual: caught %ld of %ld", broken_detected, broken_cases);
    fprintf(stderr, "one position: %ld (p,q) pairs, V=2..%d, max |P-p| = %.3g; accept_residual vs double: %.3g; "
                    "broken residual caught in %ld/%ld\n",
            cases, VMAX, worst, worst_res, broken_detected, broken_cases);
}

/* ---- accept_step takes the enumerated branches --------------------------- */

/* For given (p, q, drafts) and seed, what the rule decides at each position,
 * with the random numbers rng.h assigns to (seed, position, purpose): accept iff
 * u < accept_prob; else the residual's inverse CDF at the residual draw; after
 * γ acceptances the bonus from p[γ]. Returns k and writes out; *unsure when a
 * draw lies within rounding of a boundary (the case is then skipped). */
static int oracle_step(int32_t *out, const float *p, const float *q, const int32_t *draft, int gamma, int V,
                       uint64_t seed, uint64_t pos0, bool *unsure) {
    *unsure = false;
    double margin;
    for (int j = 0; j < gamma; j++) {
        const float *pj = p + j * V, *qj = q + j * V;
        int d = draft[j];
        double a = accept_prob(pj[d], qj[d]);
        double u = rng_uniform(seed, pos0 + (uint64_t)j, RNG_ACCEPT, 0);
        if (fabs(u - a) < 1e-9) *unsure = true;
        if (u < a) {
            out[j] = d;
            continue;
        }
        double r[VMAX];
        residual_d(r, pj, qj, V, false);
        out[j] = inv_cdf(r, V, rng_uniform(seed, pos0 + (uint64_t)j, RNG_RESIDUAL, 0), &margin);
        if (margin < 1e-6) *unsure = true;
        return j;
    }
    double b[VMAX];
    for (int i = 0; i < V; i++) b[i] = p[gamma * V + i];
    out[gamma] = inv_cdf(b, V, rng_uniform(seed, pos0 + (uint64_t)gamma, RNG_BONUS, 0), &margin);
    if (margin < 1e-6) *unsure = true;
    return gamma;
}

static void test_step_branches(void) {
    uint64_t rs = 777;
    long compared = 0, skipped = 0, rejects = 0, bonuses = 0;
    float scratch[VMAX];
    for (int gamma = 1; gamma <= 4; gamma += 2)
        for (int rep = 0; rep < 4000; rep++) {
            int V = 2 + rep % (VMAX - 1);
            float p[(4 + 1) * VMAX], q[4 * VMAX];
            int32_t draft[4], out[5], want[5];
            for (int j = 0; j < gamma; j++) {
                make_pair(p + j * V, q + j * V, V, (rep + j) % 5, &rs);
                /* a draft the drafter could have drawn: q[d] > 0 */
                double w[VMAX], mg;
                for (int i = 0; i < V; i++) w[i] = q[j * V + i];
                draft[j] = inv_cdf(w, V, t_unif(&rs), &mg);
            }
            dyadic(p + gamma * V, V, rep % 5, &rs);
            uint64_t seed = 1000 + (uint64_t)rep, pos0 = 3 + (uint64_t)(rep % 17);
            bool unsure;
            int kw = oracle_step(want, p, q, draft, gamma, V, seed, pos0, &unsure);
            accept_rng rng = {seed, pos0, ACCEPT_CORRECT};
            int k = accept_step(out, p, q, draft, gamma, V, false, &rng, scratch);
            if (unsure) {
                skipped++;
                continue;
            }
            compared++;
            rejects += kw < gamma, bonuses += kw == gamma;
            CHECKF(k == kw, "gamma=%d rep=%d: accept_step accepted %d drafts, the rule says %d", gamma, rep, k, kw);
            if (k == kw)
                for (int i = 0; i <= k; i++)
                    CHECKF(out[i] == want[i], "gamma=%d rep=%d: output %d is %d, the rule says %d", gamma, rep, i,
                           out[i], want[i]);
        }
    CHECK(compared > 7000 && rejects > 1000 && bonuses > 1000);
    fprintf(stderr, "accept_step vs the enumerated branches: %ld steps compared (%ld rejections, %ld bonuses), "
                    "%ld skipped at a rounding boundary\n", compared, rejects, bonuses, skipped);

    /* greedy: p and q one-hot; accept iff the draft is p's argmax; correction
     * and bonus are p's argmax */
    long greedy_cases = 0;
    for (int rep = 0; rep < 2000; rep++) {
        int V = 2 + rep % (VMAX - 1), gamma = 1 + rep % 6;
        float p[7 * VMAX] = {0}, q[6 * VMAX] = {0};
        int32_t draft[6], out[7], top[7];
        for (int j = 0; j <= gamma; j++) {
            top[j] = (int32_t)(t_splitmix(&rs) % (uint64_t)V);
            p[j * V + top[j]] = 1;
            if (j < gamma) {
                draft[j] = t_unif(&rs) < 0.7 ? top[j] : (int32_t)(t_splitmix(&rs) % (uint64_t)V);
                q[j * V + draft[j]] = 1;
            }
        }
        int kw = 0;
        while (kw < gamma && draft[kw] == top[kw]) kw++;
        accept_rng rng = {(uint64_t)rep, 0, ACCEPT_CORRECT};
        int k = accept_step(out, p, q, draft, gamma, V, true, &rng, scratch);
        CHECKF(k == kw, "greedy rep=%d: accepted %d, want %d", rep, k, kw);
        for (int i = 0; i < kw && i <= k; i++) CHECK(out[i] == draft[i]);
        if (k == kw) CHECKF(out[k] == top[k], "greedy rep=%d: correction/bonus %d, want %d", rep, out[k], top[k]);
        greedy_cases++;
    }
    fprintf(stderr, "greedy accept_step: %ld steps as specified\n", greedy_cases);
}

/* ---- whole steps: the first two output tokens ------------------------------- */

/* A toy language model pair: distributions over V tokens conditioned on the
 * context (the accepted tokens so far), as deterministic functions of it. The
 * draft sometimes equals the target, sometimes misses tokens the target has,
 * sometimes puts mass where the target has none. */
typedef struct {
    int V;
    uint64_t salt;
} toy_lm;

static uint64_t ctx_hash(const toy_lm *lm, const int32_t *ctx, int n) {
    uint64_t h = lm->salt ^ 0x9E3779B97F4A7C15ull * (uint64_t)(n + 1);
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(ctx[i] + 1)) * 0x100000001B3ull;
    return h;
}

static void toy_target(const toy_lm *lm, const int32_t *ctx, int n, float *p) {
    uint64_t rs = ctx_hash(lm, ctx, n);
    dyadic(p, lm->V, (int)(t_splitmix(&rs) % 5), &rs);
}

static void toy_draft(const toy_lm *lm, const int32_t *ctx, int n, float *q) {
    float p[VMAX];
    toy_target(lm, ctx, n, p);
    uint64_t rs = ctx_hash(lm, ctx, n) ^ 0xD1B54A32D192ED03ull;
    make_q(p, q, lm->V, (int)(t_splitmix(&rs) % 5), &rs);
}

/* Accumulates into joint[t1*V+t2] the probability of each first-two-token
 * outcome, following the algorithm: within a step, position j drafts from
 * q(·|ctx), accepts with accept_prob, else emits the residual draw and ends the
 * step; after γ acceptances the bonus from p(·|ctx). A step that emits fewer
 * tokens than needed is followed by the next step from the new context. */
static void enum_tokens(const toy_lm *lm, int gamma, int32_t *ctx, int n, int j, double w, double *joint) {
    int V = lm->V;
    if (n == 2) {
        joint[ctx[0] * V + ctx[1]] += w;
        return;
    }
    float p[VMAX], q[VMAX];
    toy_target(lm, ctx, n, p);
    if (j == gamma) { /* bonus */
        for (int t = 0; t < V; t++)
            if (p[t] > 0) {
                ctx[n] = t;
                enum_tokens(lm, gamma, ctx, n + 1, 0, w * p[t], joint);
            }
        return;
    }
    toy_draft(lm, ctx, n, q);
    double acc = 0, r[VMAX];
    for (int d = 0; d < V; d++) {
        if (!(q[d] > 0)) continue; /* never drafted */
        double a = accept_prob(p[d], q[d]);
        acc += q[d] * a;
        if (a > 0) {
            ctx[n] = d;
            enum_tokens(lm, gamma, ctx, n + 1, j + 1, w * q[d] * a, joint);
        }
    }
    residual_d(r, p, q, V, false);
    for (int t = 0; t < V; t++)
        if (r[t] > 0 && 1.0 - acc > 0) {
            ctx[n] = t;
            enum_tokens(lm, gamma, ctx, n + 1, 0, w * (1.0 - acc) * r[t], joint);
        }
}

static void test_two_tokens(void) {
    double worst = 0;
    int cases = 0;
    for (int gamma = 1; gamma <= 4; gamma++)
        for (int V = 2; V <= 12; V += (V < 6 ? 1 : 3))
            for (int rep = 0; rep < 40; rep++) {
                toy_lm lm = {V, 0xC0FFEEull * (uint64_t)(rep + 1) + (uint64_t)V * 131 + (uint64_t)gamma};
                double joint[VMAX * VMAX] = {0};
                int32_t ctx[8];
                enum_tokens(&lm, gamma, ctx, 0, 0, 1.0, joint);
                float p1[VMAX], p2[VMAX];
                toy_target(&lm, ctx, 0, p1);
                double e = 0;
                for (int a = 0; a < V; a++) {
                    ctx[0] = a;
                    toy_target(&lm, ctx, 1, p2);
                    for (int b = 0; b < V; b++) {
                        double d = fabs(joint[a * V + b] - (double)p1[a] * (double)p2[b]);
                        if (d > e) e = d;
                    }
                }
                CHECKF(e <= 1e-9, "gamma=%d V=%d rep=%d: joint of the first two tokens deviates by %.3g", gamma, V,
                       rep, e);
                if (e > worst) worst = e;
                cases++;
            }
    fprintf(stderr, "whole steps (gamma 1..4): %d toy pairs, first-two-token joint max |P - p1·p2| = %.3g\n", cases,
            worst);
}

int main(void) {
    test_one_position();
    test_step_branches();
    test_two_tokens();
    TEST_DONE();
}
