/* test_accept_stats.c — the full speculative step sampled with the real
 * counter-based generator: 100k seeded runs of γ-token steps (drafts drawn
 * from q with the RNG_DRAFT stream, accept_step deciding) over a toy language
 * model pair; the first output token must follow p1 and the first two tokens
 * p1(t1)·p2(t2|t1) (χ² at p = 0.001). The deliberately broken residual
 * (|p − q| instead of max(0, p − q)) must FAIL both checks. */
#include "engine/spec/accept.h"
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/sampler/chi2.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

#define V 10
#define GAMMA 4 /* the most drafts per step (runs use 4, and 1 so the bonus is the second token) */
#define SAMPLES 100000
#define POS0 7 /* absolute position of the first generated token (a 7-token prompt) */

/* Toy LM pair: softmax of pseudo-random logits, a deterministic function of
 * the context. The draft is a different function (acceptance around one half),
 * so |p − q| and max(0, p − q) differ everywhere. */
static uint64_t ctx_hash(uint64_t salt, const int32_t *ctx, int n) {
    uint64_t h = salt ^ 0x9E3779B97F4A7C15ull * (uint64_t)(n + 1);
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(ctx[i] + 1)) * 0x100000001B3ull;
    return h;
}

static void toy_logits(uint64_t salt, const int32_t *ctx, int n, double *g) {
    uint64_t rs = ctx_hash(salt, ctx, n);
    for (int i = 0; i < V; i++) g[i] = t_gauss(&rs);
}
static void softmax(const double *l, float *out) {
    double w[V], s = 0;
    for (int i = 0; i < V; i++) s += w[i] = exp(l[i]);
    for (int i = 0; i < V; i++) out[i] = (float)(w[i] / s);
}
static void toy_target(const int32_t *ctx, int n, float *p) {
    double g[V];
    toy_logits(0x7A7A, ctx, n, g);
    for (int i = 0; i < V; i++) g[i] *= 1.3;
    softmax(g, p);
}
/* the draft: the target's logits, damped, plus its own noise */
static void toy_draft(const int32_t *ctx, int n, float *q) {
    double g[V], h[V];
    toy_logits(0x7A7A, ctx, n, g);
    toy_logits(0xD0D0, ctx, n, h);
    for (int i = 0; i < V; i++) g[i] = 0.9 * g[i] + 0.8 * h[i];
    softmax(g, q);
}

/* Generates the first two output tokens of one seeded run: steps of GAMMA drafts
 * until two tokens are out, exactly as spec_seq_step drives accept_step. */
static void run_two(int gamma, uint64_t seed, accept_variant var, int32_t out2[2], long *accepted, long *drafted) {
    int32_t ctx[2 + GAMMA + 1];
    int n = 0;
    float p[(GAMMA + 1) * V], q[GAMMA * V], scratch[V];
    int32_t step_ctx[GAMMA + 3], draft[GAMMA], out[GAMMA + 1];
    while (n < 2) {
        uint64_t pos = POS0 + (uint64_t)n;
        memcpy(step_ctx, ctx, sizeof(int32_t) * (size_t)n);
        for (int j = 0; j < gamma; j++) {
            toy_draft(step_ctx, n + j, q + j * V);
            toy_target(step_ctx, n + j, p + j * V);
            draft[j] = sampler_sample(q + j * V, V, rng_uniform(seed, pos + (uint64_t)j, RNG_DRAFT, 0));
            step_ctx[n + j] = draft[j];
        }
        toy_target(step_ctx, n + gamma, p + gamma * V);
        accept_rng rng = {seed, pos, var};
        int k = accept_step(out, p, q, draft, gamma, V, false, &rng, scratch);
        *accepted += k, *drafted += gamma;
        for (int i = 0; i <= k && n < 2 + GAMMA + 1; i++) ctx[n++] = out[i];
    }
    out2[0] = ctx[0], out2[1] = ctx[1];
}

typedef struct {
    double chi1, crit1, chi2, crit2;
    int dof1, dof2;
    double alpha;
} result;

static result sample(int gamma, accept_variant var) {
    static long h1[V], h2[V * V];
    memset(h1, 0, sizeof(h1));
    memset(h2, 0, sizeof(h2));
    long acc = 0, dr = 0;
    for (uint64_t s = 0; s < SAMPLES; s++) {
        int32_t t[2];
        run_two(gamma, 0x5EED0000ull + s, var, t, &acc, &dr);
        h1[t[0]]++;
        h2[t[0] * V + t[1]]++;
    }
    double e1[V], e2[V * V];
    float p1[V], p2[V];
    toy_target(NULL, 0, p1);
    for (int a = 0; a < V; a++) {
        e1[a] = p1[a];
        int32_t c = a;
        toy_target(&c, 1, p2);
        for (int b = 0; b < V; b++) e2[a * V + b] = (double)p1[a] * p2[b];
    }
    result r;
    r.chi1 = chi2_stat(h1, e1, V, SAMPLES, &r.dof1);
    r.crit1 = chi2_critical_001(r.dof1);
    r.chi2 = chi2_stat(h2, e2, V * V, SAMPLES, &r.dof2);
    r.crit2 = chi2_critical_001(r.dof2);
    r.alpha = (double)acc / (double)dr;
    return r;
}

int main(void) {
    for (int gamma = GAMMA; gamma >= 1; gamma -= GAMMA - 1) {
        result ok = sample(gamma, ACCEPT_CORRECT);
        fprintf(stderr, "correct rule: %d samples, gamma %d, V %d, draft tokens accepted %.3f\n"
                        "  first token:      chi2 %.2f (dof %d, critical %.2f at p=0.001)\n"
                        "  first two tokens: chi2 %.2f (dof %d, critical %.2f)\n",
                SAMPLES, gamma, V, ok.alpha, ok.chi1, ok.dof1, ok.crit1, ok.chi2, ok.dof2, ok.crit2);
        CHECK(ok.alpha > 0.2 && ok.alpha < 0.9); /* both branches well exercised */
        CHECK(ok.dof1 == V - 1 && ok.dof2 >= 50);
        CHECKF(ok.chi1 < ok.crit1, "gamma %d: first token does not follow p: chi2 %.2f >= %.2f", gamma, ok.chi1,
               ok.crit1);
        CHECKF(ok.chi2 < ok.crit2, "gamma %d: first two tokens do not follow p1*p2: chi2 %.2f >= %.2f", gamma, ok.chi2,
               ok.crit2);

        result bad = sample(gamma, ACCEPT_BROKEN_RESIDUAL_ABS);
        fprintf(stderr, "broken residual |p-q|, gamma %d:\n  first token:      chi2 %.2f (critical %.2f)\n"
                        "  first two tokens: chi2 %.2f (critical %.2f)\n",
                gamma, bad.chi1, bad.crit1, bad.chi2, bad.crit2);
        CHECKF(bad.chi1 >= bad.crit1, "gamma %d: the broken residual passed the first-token check (chi2 %.2f)", gamma,
               bad.chi1);
        CHECKF(bad.chi2 >= bad.crit2, "gamma %d: the broken residual passed the two-token check (chi2 %.2f)", gamma,
               bad.chi2);
    }
    TEST_DONE();
}
