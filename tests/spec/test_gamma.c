/* test_gamma.c — the speculation cost model (gamma.h) and the chain γ
 * controller (budget.h budget_chain):
 * calibration recovers a known model exactly; the online fit follows a host
 * that turned slower (attention dearer than calibrated) to within 2% over the
 * contexts it saw, with noisy timings leaving every term non-negative and the
 * base positive; the best γ falls as the context grows when attention is dear,
 * a compute-bound batch turns drafting off, and in a batch a predicted gain
 * inside the safety margin does not start drafting; with a measured step
 * curve (flat to 8 rows, then dear) the batch decision holds still under a
 * stream of plain 8-row passes, where the two-slope model learns that rows are
 * free and starts drafting at batch 8. Pure arithmetic, no model. */
#include "engine/spec/budget.h" /* the chain controller (budget_chain) */
#include "engine/spec/gamma.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdint.h>

typedef struct {
    double base, pos, big, key, pair;
} truth;

static double true_ms(const truth *t, int m, double keys, double pairs) {
    int small = m - 1 < 4 ? m - 1 : 4, big = m > 5 ? m - 5 : 0;
    return t->base + t->pos * small + t->big * big + t->key * keys + t->pair * pairs;
}

static double true_call(const truth *t, int m, int n) { return true_ms(t, m, gamma_keys(m, n), gamma_pairs(m, n)); }

static int best_gamma(const gamma_costs *c, double a, int batch, int ctx) {
    int best = 0;
    double r0 = gamma_rate_batch(c, a, 0, batch, ctx);
    for (int g = 1; g <= 8; g++) {
        double r = gamma_rate_batch(c, a, g, batch, ctx);
        if (r > r0) r0 = r, best = g;
    }
    return best;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* [0, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

int main(void) {
    /* calibration: five timed calls of a known model give it back */
    truth t = {.base = 5.0, .pos = 0.1, .big = 0.45, .key = 0.002, .pair = 0.0006};
    int far = 520;
    gamma_costs c = {0};
    gamma_costs_calibrate(&c, true_call(&t, 1, GAMMA_CAL_CTX), true_call(&t, 5, GAMMA_CAL_CTX), true_call(&t, GAMMA_CAL_ROWS, GAMMA_CAL_CTX), far,
                          true_call(&t, 1, far), true_call(&t, 5, far));
    CHECKF(fabs(c.target_ms - t.base) < 1e-9, "base %g", c.target_ms);
    CHECKF(fabs(c.target_ms_per_pos - t.pos) < 1e-9, "per position %g", c.target_ms_per_pos);
    CHECKF(fabs(c.target_ms_per_pos_big - t.big) < 1e-9, "big-batch slope %g", c.target_ms_per_pos_big);
    CHECKF(fabs(c.target_ms_per_key - t.key) < 1e-12, "per key %g", c.target_ms_per_key);
    CHECKF(fabs(c.target_ms_per_pair - t.pair) < 1e-12, "per pair %g", c.target_ms_per_pair);
    for (int m = 1; m <= 21; m += 4)
        for (int n = 0; n <= 2000; n += 250)
            CHECKF(fabs(gamma_target_ms(&c, m, gamma_keys(m, n), gamma_pairs(m, n)) - true_call(&t, m, n)) < 1e-9,
                   "prediction at m %d n %d", m, n);
    /* without a long-context probe the attention terms are 0, the rest stands */
    gamma_costs c0 = {0};
    gamma_costs_calibrate(&c0, true_call(&t, 1, GAMMA_CAL_CTX), true_call(&t, 5, GAMMA_CAL_CTX), true_call(&t, GAMMA_CAL_ROWS, GAMMA_CAL_CTX), 0, 0, 0);
    CHECK(c0.target_ms_per_key == 0 && c0.target_ms_per_pair == 0 && c0.target_ms > 0 && c0.target_ms_per_pos > 0);

    /* the host turns slower: attention costs twice the calibration, the base
     * 20% more. A γ=4 sequence growing from 30 to 230 tokens (5-row passes
     * only) must be predicted within 2% over that range afterwards */
    truth slow = t;
    slow.base *= 1.2, slow.pair *= 2, slow.key *= 2;
    for (int n = 30; n < 230; n += 3) gamma_costs_observe_target(&c, 5, gamma_keys(5, n), gamma_pairs(5, n), true_call(&slow, 5, n));
    for (int n = 30; n < 230; n += 20) {
        double pred = gamma_target_ms(&c, 5, gamma_keys(5, n), gamma_pairs(5, n)), want = true_call(&slow, 5, n);
        CHECKF(fabs(pred - want) < 0.02 * want, "after the fit, n %d: predicted %.3f ms, true %.3f ms", n, pred, want);
    }
    /* plain passes (1 row) at other contexts tell keys from pairs apart: then
     * 1-row and 5-row calls are both right */
    for (int n = 100; n < 700; n += 7) {
        gamma_costs_observe_target(&c, 1, gamma_keys(1, n), gamma_pairs(1, n), true_call(&slow, 1, n));
        gamma_costs_observe_target(&c, 5, gamma_keys(5, n), gamma_pairs(5, n), true_call(&slow, 5, n));
    }
    for (int m = 1; m <= 5; m += 4)
        for (int n = 100; n < 700; n += 100) {
            double pred = gamma_target_ms(&c, m, gamma_keys(m, n), gamma_pairs(m, n)), want = true_call(&slow, m, n);
            CHECKF(fabs(pred - want) < 0.02 * want, "mixed fit, m %d n %d: predicted %.3f, true %.3f", m, n, pred, want);
        }

    /* noisy timings (+-25%) never drive a term negative or the base to 0 */
    gamma_costs cn = {0};
    gamma_costs_calibrate(&cn, true_call(&t, 1, GAMMA_CAL_CTX), true_call(&t, 5, GAMMA_CAL_CTX), true_call(&t, GAMMA_CAL_ROWS, GAMMA_CAL_CTX), far,
                          true_call(&t, 1, far), true_call(&t, 5, far));
    int sane = 1;
    for (int i = 0; i < 5000; i++) {
        int m = urand() < 0.3 ? 1 : 5, n = (int)(urand() * 600);
        double ms = true_call(&t, m, n) * (0.75 + 0.5 * urand());
        gamma_costs_observe_target(&cn, m, gamma_keys(m, n), gamma_pairs(m, n), ms);
        sane &= cn.target_ms > 0 && cn.target_ms_per_key >= 0 && cn.target_ms_per_pair >= 0 && isfinite(cn.target_ms);
    }
    CHECK(sane);
    double p = gamma_target_ms(&cn, 5, gamma_keys(5, 300), gamma_pairs(5, 300)), w = true_call(&t, 5, 300);
    CHECKF(fabs(p - w) < 0.15 * w, "noisy fit at n 300: predicted %.3f, true %.3f", p, w);

    /* the controller's choice: with dear attention the best γ shrinks as the
     * context grows; a batch whose rows are compute-bound turns drafting off */
    truth dear = {.base = 5.0, .pos = 0.1, .big = 0.45, .key = 0.002, .pair = 0.004};
    gamma_costs cd = {0};
    gamma_costs_calibrate(&cd, true_call(&dear, 1, GAMMA_CAL_CTX), true_call(&dear, 5, GAMMA_CAL_CTX), true_call(&dear, GAMMA_CAL_ROWS, GAMMA_CAL_CTX), far,
                          true_call(&dear, 1, far), true_call(&dear, 5, far));
    cd.draft_ms = 0.2;
    int g_short = best_gamma(&cd, 0.8, 1, 50), g_long = best_gamma(&cd, 0.8, 1, 4000);
    CHECKF(g_short > g_long && g_long >= 1, "best gamma at context 50: %d, at 4000: %d", g_short, g_long);
    cd.target_ms_per_pos_big = 4.0; /* each row past 5 costs most of a decode step */
    CHECKF(best_gamma(&cd, 0.8, 32, 100) == 0, "batch of 32, compute-bound: gamma %d", best_gamma(&cd, 0.8, 32, 100));
    gamma_params gp = gamma_params_default();
    budget_chain g;
    budget_chain_init(&g, &gp);
    for (int i = 0; i < 10; i++) budget_chain_observe(&g, 4, 3);
    CHECKF(budget_chain_next(&g, &cd, 32, 100) == 0, "controller at batch 32 drafts");
    CHECKF(budget_chain_next(&g, &cd, 1, 100) >= 2, "controller alone does not draft");
    /* in a batch, a small predicted gain is not enough to draft (the margin):
     * find a big-batch slope where drafting promises 2-12% at batch 8 */
    gamma_costs cm = cd;
    cm.target_ms_per_pair = cm.target_ms_per_key = 0;
    int found = 0;
    for (double big = 0.01; big < 3 && !found; big += 0.005) {
        cm.target_ms_per_pos_big = big;
        double r0 = gamma_rate_batch(&cm, 0.8, 0, 8, 100), rb = 0;
        for (int k = gp.gamma_min; k <= gp.gamma_max; k++) {
            double r = gamma_rate_batch(&cm, 0.8, k, 8, 100);
            if (r > rb) rb = r;
        }
        if (rb > 1.02 * r0 && rb < 1.12 * r0) found = 1;
    }
    CHECKF(found, "no big-batch slope gives a 2-12%% predicted gain");
    budget_chain gm;
    budget_chain_init(&gm, &gp);
    for (int i = 0; i < 10; i++) budget_chain_observe(&gm, 5, 4); /* 4 accepted, then a rejection: alpha 0.8 */
    CHECKF(fabs(budget_chain_alpha(&gm) - 0.8) < 1e-9, "alpha %g", budget_chain_alpha(&gm));
    CHECKF(budget_chain_next(&gm, &cm, 8, 100) == 0, "batch 8 drafts on a gain inside the margin");
    CHECKF(budget_chain_next(&gm, &cm, 1, 100) >= 2, "alone, the sequence does not draft");
    {
        /* warm-up in a batch: the fixed prior (0.7) keeps a new sequence
         * plain where its proposer's pooled α (0.95) says drafting pays, and
         * with no α of its own it would stay plain for good; the pool's α or
         * a probe (prior < 0) let it draft */
        double r0 = gamma_rate_batch(&cm, 0.95, 0, 8, 100), rb = 0;
        for (int k = gp.gamma_min; k <= gp.gamma_max; k++) {
            double r = gamma_rate_batch(&cm, 0.95, k, 8, 100);
            if (r > rb) rb = r;
        }
        CHECKF(rb > 1.2 * r0, "alpha 0.95 promises only %.3fx at batch 8 (the test lost its teeth)", rb / r0);
        budget_chain wu;
        budget_chain_init(&wu, &gp);
        CHECKF(budget_chain_next(&wu, &cm, 8, 100) == 0, "warm-up at the fixed prior drafts at batch 8");
        CHECKF(budget_chain_next_prior(&wu, &cm, 8, 100, BUDGET_PRIOR_ALPHA) == 0, "prior 0.7 drafts at batch 8");
        CHECKF(budget_chain_next_prior(&wu, &cm, 8, 100, 0.95) > 0, "pooled alpha 0.95 does not draft");
        CHECKF(budget_chain_next_prior(&wu, &cm, 8, 100, -1.0) > 0, "a probe does not draft");
        budget_chain_observe(&wu, 5, 4); /* one step of its own: still warm-up, still the prior's call */
        CHECKF(budget_chain_next_prior(&wu, &cm, 8, 100, 0.95) > 0, "warm-up ignores the pooled alpha");
        budget_pool pl = {0};
        CHECKF(budget_pool_alpha(&pl) < 0, "an empty pool answers %g", budget_pool_alpha(&pl));
        budget_pool_observe(&pl, 5, 4);
        CHECKF(budget_pool_alpha(&pl) < 0, "5 trials are trusted");
        budget_pool_observe(&pl, 5, 4);
        CHECKF(fabs(budget_pool_alpha(&pl) - 0.8) < 1e-9, "pool alpha %g, want 0.8", budget_pool_alpha(&pl));
        for (int i = 0; i < 200; i++) budget_pool_observe(&pl, 4, 4);
        CHECKF(budget_pool_alpha(&pl) > 0.95, "the pool does not decay: %g", budget_pool_alpha(&pl));
        budget b;
        budget_init(&b);
        b.pool[SPEC_PROPOSER_EAGLE] = pl;
        for (int i = 0; i < BUDGET_POOL_STALE - 1; i++) budget_step_begin(&b, 2, false);
        CHECKF(budget_pool_alpha(&b.pool[SPEC_PROPOSER_EAGLE]) > 0.95, "stale too early");
        budget_step_begin(&b, 2, false);
        CHECKF(budget_pool_alpha(&b.pool[SPEC_PROPOSER_EAGLE]) < 0, "a pool with no step in %d steps still answers",
               BUDGET_POOL_STALE);
        budget_pool_observe(&b.pool[SPEC_PROPOSER_EAGLE], 4, 4);
        CHECKF(budget_pool_alpha(&b.pool[SPEC_PROPOSER_EAGLE]) > 0.95, "an observation does not refresh a stale pool");
        budget_pool_reset(&b, SPEC_PROPOSER_EAGLE);
        CHECKF(budget_pool_alpha(&b.pool[SPEC_PROPOSER_EAGLE]) < 0, "a reset pool still answers");
    }

    /* a measured step curve, shaped like the F16 widen target's on this CPU:
     * t(rows)/t(1) = 1.0 up to 8 rows, 1.6 at 12, 2.5 at 16, 3.4 at 24, 4.3 at 32 */
    double steps[GAMMA_CURVE_ROWS + 1] = {0};
    steps[1] = steps[2] = steps[4] = steps[8] = 60.0;
    steps[12] = 96.0, steps[16] = 150.0, steps[24] = 135.0 /* noise: below 16's */, steps[32] = 258.0;
    gamma_costs cc = {0}, cs = {0};
    gamma_costs_calibrate(&cc, 60.0, 60.0, 140.0, 0, 0, 0); /* 1, 5 and 21 rows at short context */
    cs = cc;
    cc.draft_ms = cs.draft_ms = 0.9;
    gamma_costs_set_curve(&cc, steps, GAMMA_CURVE_ROWS);
#define CURVE(m) cost_curve_ratio(&cc.curve, m)
    CHECKF(cc.curve.n == 32 && fabs(CURVE(8) - 1.0) < 1e-12 && fabs(CURVE(16) - 2.5) < 1e-12,
           "curve n %d, [8] %g, [16] %g", cc.curve.n, CURVE(8), CURVE(16));
    CHECKF(fabs(CURVE(14) - 2.05) < 1e-12, "interpolated [14] %g", CURVE(14));
    for (int r = 2; r <= 32; r++) CHECKF(CURVE(r) >= CURVE(r - 1), "curve falls at %d", r);
    CHECKF(fabs(gamma_target_ms(&cc, 16, 0, 0) - 150.0) < 1e-9, "t(16) %g", gamma_target_ms(&cc, 16, 0, 0));
    CHECKF(gamma_target_ms(&cc, 48, 0, 0) > gamma_target_ms(&cc, 32, 0, 0), "no slope past the curve");
    CHECKF(best_gamma(&cc, 0.7, 1, 30) >= 3, "alone on the flat part: gamma %d", best_gamma(&cc, 0.7, 1, 30));
    CHECKF(best_gamma(&cc, 0.7, 2, 30) >= 2, "batch 2 (up to 8 rows flat): gamma %d", best_gamma(&cc, 0.7, 2, 30));
    CHECKF(best_gamma(&cc, 0.7, 8, 30) == 0, "batch 8 on the step: gamma %d", best_gamma(&cc, 0.7, 8, 30));
    /* plain passes of 8 rows at batch 8, as the engine reports them: with the
     * curve the decision stays plain; the two-slope model (cs) learns a free
     * big-batch slope from them and drafts (the flip measured at conc 8) */
    budget_chain gc, gs;
    budget_chain_init(&gc, &gp);
    budget_chain_init(&gs, &gp);
    for (int i = 0; i < 10; i++) budget_chain_observe(&gc, 4, 3), budget_chain_observe(&gs, 4, 3);
    for (int i = 0; i < 50; i++) {
        gamma_costs_observe_target(&cc, 8, 8 * 31.0, 8 * 31.0, 60.0 * (1 + 0.05 * (urand() - 0.5)));
        gamma_costs_observe_target(&cs, 8, 8 * 31.0, 8 * 31.0, 60.0 * (1 + 0.05 * (urand() - 0.5)));
    }
    CHECKF(fabs(cc.target_ms - 60.0) < 3.0, "base after plain passes %g", cc.target_ms);
    CHECKF(budget_chain_next(&gc, &cc, 8, 30) == 0, "curve: batch 8 drafts after plain passes");
    CHECKF(budget_chain_next(&gs, &cs, 8, 30) > 0, "two slopes no longer flip (the test lost its teeth)");
    CHECKF(budget_chain_next(&gc, &cc, 1, 30) >= 2, "curve: alone, the sequence does not draft");
    {
        /* a compute-bound curve whose last point came out cheap (measured on
         * a Q8_0 target: 24 rows 7.95x, 32 rows 8.23x): past the table rows
         * still cost what the upper half says, so at a batch of 32 the chain
         * decodes plainly; along the last two points alone 96 rows looked like
         * 10.5x and it drafted (0.76x plain, measured) */
        double q8[GAMMA_CURVE_ROWS + 1] = {0};
        const int at[] = {1, 2, 4, 8, 12, 16, 24, 32};
        const double x[] = {1.0, 1.13, 1.61, 3.26, 4.16, 5.23, 7.95, 8.23};
        for (int i = 0; i < 8; i++) q8[at[i]] = 4.6 * x[i];
        gamma_costs cq = cc;
        gamma_costs_set_curve(&cq, q8, GAMMA_CURVE_ROWS);
        double r96 = cost_curve_ratio(&cq.curve, 96);
        fprintf(stderr, "noisy-tail curve: 96 rows %.2fx, 32 rows %.2fx\n", r96, cost_curve_ratio(&cq.curve, 32));
        CHECKF(r96 > 2.0 * 8.23, "96 rows %.2fx: rows past the table look nearly free", r96);
        CHECKF(best_gamma(&cq, 0.7, 32, 200) == 0, "batch 32 on a compute-bound curve: gamma %d",
               best_gamma(&cq, 0.7, 32, 200));
        CHECKF(best_gamma(&cq, 0.7, 1, 200) >= 1, "alone: gamma %d", best_gamma(&cq, 0.7, 1, 200));
    }
    /* a slower host: the base follows, the shape stays */
    for (int i = 0; i < 60; i++) gamma_costs_observe_target(&cc, 16, 0, 0, 300.0);
    CHECKF(fabs(cc.target_ms - 120.0) < 6.0 && fabs(CURVE(16) - 2.5) < 1e-12, "slower host: base %g",
           cc.target_ms);
    TEST_DONE();
}
