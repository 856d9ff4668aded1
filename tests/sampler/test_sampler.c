/* test_sampler.c — exact behaviour of sampler_probs (temperature, top-k, top-p, min-p,
 * their order, tie rules, special values) against hand-computed supports and an
 * independent double-precision reference; inverse-CDF and residual draws; call-order
 * independence of seeded draws; config validation messages. */
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/testutil.h"
#include "tests/sampler/chi2.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static sampler_config cfg_make(float t, int k, float p, float m) {
    return (sampler_config){ .temperature = t, .top_k = k, .top_p = p, .min_p = m };
}

/* ---- reference: sort everything, in double -------------------------------- */

static const float *g_rank_logits;
static double lval(float x) { return x != x ? -INFINITY : (double)x; }
static int cmp_rank(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    double li = lval(g_rank_logits[i]), lj = lval(g_rank_logits[j]);
    if (li != lj) return li > lj ? -1 : 1;
    return i - j;
}

/* Fills out[V] with the processed distribution per the contract in sampler.h.
 * Returns false when a top-p or min-p boundary lies within 1e-6 (relative) of its
 * threshold, or a weight sits at the exp(-87) flush point, where float rounding in
 * the implementation may legitimately decide the other way. */
static bool ref_probs(const sampler_config *cfg, const float *logits, int V, double *out) {
    memset(out, 0, (size_t)V * sizeof *out);
    if (cfg->temperature == 0.0f) {
        int best = 0;
        for (int i = 1; i < V; i++) if (lval(logits[i]) > lval(logits[best])) best = i;
        out[best] = 1.0;
        return true;
    }
    int *ord = malloc((size_t)V * sizeof *ord);
    double *w = malloc((size_t)V * sizeof *w);
    for (int i = 0; i < V; i++) ord[i] = i;
    g_rank_logits = logits;
    qsort(ord, (size_t)V, sizeof *ord, cmp_rank);
    double m = lval(logits[ord[0]]);
    bool ok = true;
    if (m == -INFINITY) { out[0] = 1.0; goto done; }
    for (int i = 0; i < V; i++) { /* the contract flushes weights below exp(-87) to 0 */
        double l = lval(logits[i]), x = (l - m) / (double)cfg->temperature;
        w[i] = m == INFINITY ? (l == INFINITY) : x < -87.0 ? 0.0 : exp(x);
        if (fabs(x + 87.0) < 1e-4) ok = false;
    }
    int n = V; /* kept = the first n ranks */
    if (cfg->top_k > 0 && cfg->top_k < n) n = cfg->top_k;
    if (cfg->top_p < 1.0f) {
        double z = 0, cum = 0;
        for (int r = 0; r < n; r++) z += w[ord[r]];
        for (int r = 0; r < n; r++) {
            double prev = cum;
            cum += w[ord[r]] / z;
            if (cum >= cfg->top_p) {
                if (fabs(cum - cfg->top_p) < 1e-6 || fabs(prev - cfg->top_p) < 1e-6) ok = false;
                n = r + 1;
                break;
            }
        }
    }
    if (cfg->min_p > 0.0f) {
        int r = 0;
        while (r < n && w[ord[r]] >= cfg->min_p) r++;
        for (int t = 0; t < n; t++)
            if (w[ord[t]] > 0 && fabs(w[ord[t]] - cfg->min_p) < 1e-6 * cfg->min_p) ok = false;
        n = r;
    }
    double z = 0;
    for (int r = 0; r < n; r++) z += w[ord[r]];
    for (int r = 0; r < n; r++) out[ord[r]] = w[ord[r]] / z;
done:
    free(ord);
    free(w);
    return ok;
}

/* ---- helpers --------------------------------------------------------------- */

/* probs from a fresh sampler; checks sum and non-negativity on the way */
static void run_probs(const sampler_config *cfg, const float *logits, int V, float *probs) {
    sampler *s = sampler_create(V);
    sampler_probs(s, cfg, logits, probs);
    sampler_destroy(s);
    double sum = 0;
    bool neg = false;
    for (int i = 0; i < V; i++) { sum += probs[i]; neg |= !(probs[i] >= 0.0f); }
    CHECKF(!neg && fabs(sum - 1.0) < 1e-5, "sum %.9g, negative/NaN %d", sum, (int)neg);
}

/* the support of probs equals exactly the listed ids, and the probabilities are
 * softmax(logits / T) renormalised over them */
static void expect_support(const char *what, const sampler_config *cfg, const float *logits, int V,
                           const int *ids, int n_ids) {
    float *probs = malloc((size_t)V * sizeof *probs);
    run_probs(cfg, logits, V, probs);
    bool *want = calloc((size_t)V, sizeof *want);
    for (int j = 0; j < n_ids; j++) want[ids[j]] = true;
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < n_ids; j++) mx = fmax(mx, logits[ids[j]]);
    for (int j = 0; j < n_ids; j++) z += exp((logits[ids[j]] - mx) / cfg->temperature);
    for (int i = 0; i < V; i++) {
        CHECKF((probs[i] > 0.0f) == want[i], "%s: token %d has prob %g, expected %s", what, i,
               probs[i], want[i] ? "in support" : "zero");
        if (want[i] && isfinite(mx)) {
            double r = exp((logits[i] - mx) / cfg->temperature) / z;
            CHECKF(fabs(probs[i] - r) < 1e-6, "%s: token %d prob %.9g want %.9g", what, i, probs[i], r);
        }
    }
    free(want);
    free(probs);
}
#define SUPPORT(what, cfg, logits, ...) do { const int ids_[] = { __VA_ARGS__ }; \
    expect_support(what, cfg, logits, (int)(sizeof(logits) / sizeof(logits[0])), ids_, \
                   (int)(sizeof ids_ / sizeof ids_[0])); } while (0)

/* ---- processing tests ------------------------------------------------------ */

static void test_temperature(void) {
    const float l[8] = { 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 4.0f, 4.0f, -2.0f };
    const float temps[5] = { 0.1f, 0.3f, 1.0f, 1.7f, 5.0f };
    for (int t = 0; t < 5; t++) {
        sampler_config c = cfg_make(temps[t], 0, 1.0f, 0.0f);
        float p[8];
        run_probs(&c, l, 8, p);
        double z = 0, r[8];
        for (int i = 0; i < 8; i++) z += r[i] = exp((double)l[i] / temps[t]);
        for (int i = 0; i < 8; i++)
            CHECKF(fabs(p[i] - r[i] / z) < 1e-6, "T=%g token %d: %.9g vs softmax %.9g", temps[t], i,
                   p[i], r[i] / z);
    }
    /* relative accuracy of every weight down to the flush point: logits {0, -x} give
     * p1 / p0 = exp(-x) for x over (0, 87) */
    double worst = 0.0, worst_x = 0.0;
    for (int i = 1; i < 20000; i++) {
        float x = (float)(87.0 * i / 20000.0), two[2] = { 0.0f, -x }, p2[2];
        sampler_config c1 = cfg_make(1.0f, 0, 1.0f, 0.0f);
        run_probs(&c1, two, 2, p2);
        double rel = fabs((double)p2[1] / (double)p2[0] / exp(-(double)x) - 1.0);
        if (rel > worst) { worst = rel; worst_x = x; }
    }
    fprintf(stderr, "exp accuracy: worst relative error %.3g at x = -%g\n", worst, worst_x);
    CHECKF(worst < 1e-6, "weight exp(-%g) off by %.3g relative", worst_x, worst);
    /* a tiny temperature is effectively greedy but not NaN (ties at the max split) */
    sampler_config c = cfg_make(1e-30f, 0, 1.0f, 0.0f);
    SUPPORT("T=1e-30", &c, l, 5, 6);
}

static void test_greedy(void) {
    const float l[5] = { 0.0f, 3.0f, 1.0f, 3.0f, 2.0f };
    sampler_config c = cfg_make(0.0f, 2, 0.5f, 0.2f); /* filters ignored when greedy */
    float p[5];
    run_probs(&c, l, 5, p);
    CHECK(p[1] == 1.0f && p[0] == 0.0f && p[2] == 0.0f && p[3] == 0.0f && p[4] == 0.0f);
    CHECK(sampler_argmax(l, 5) == 1);
    const float ln[4] = { NAN, 1.0f, 2.0f, NAN };
    CHECK(sampler_argmax(ln, 4) == 2);
    const float lall[3] = { NAN, NAN, NAN };
    CHECK(sampler_argmax(lall, 3) == 0);
    const float lneg[3] = { -INFINITY, -INFINITY, -5.0f };
    CHECK(sampler_argmax(lneg, 3) == 2);
    for (uint64_t pos = 0; pos < 50; pos++) { /* greedy draws ignore u */
        sampler *s = sampler_create(5);
        CHECK(sampler_sample_logits(s, &c, l, NULL, 9, pos) == 1);
        sampler_destroy(s);
    }
}

static void test_top_k(void) {
    /* ranks: 1 (5), 6 (4), {2,3,4} (3, tied), 0 (1), 5 (0), 7 (-1) */
    const float l[8] = { 1.0f, 5.0f, 3.0f, 3.0f, 3.0f, 0.0f, 4.0f, -1.0f };
    sampler_config c = cfg_make(1.0f, 1, 1.0f, 0.0f);
    SUPPORT("top_k=1", &c, l, 1);
    c.top_k = 2; SUPPORT("top_k=2", &c, l, 1, 6);
    c.top_k = 3; SUPPORT("top_k=3 (tie: lowest id)", &c, l, 1, 6, 2);
    c.top_k = 4; SUPPORT("top_k=4 (tie: lowest ids)", &c, l, 1, 6, 2, 3);
    c.top_k = 5; SUPPORT("top_k=5", &c, l, 1, 6, 2, 3, 4);
    c.top_k = 7; SUPPORT("top_k=7", &c, l, 0, 1, 2, 3, 4, 5, 6);
    c.top_k = 8; SUPPORT("top_k=8", &c, l, 0, 1, 2, 3, 4, 5, 6, 7);
    c.top_k = 100; SUPPORT("top_k=100", &c, l, 0, 1, 2, 3, 4, 5, 6, 7);
    c.top_k = 0; SUPPORT("top_k=0 (off)", &c, l, 0, 1, 2, 3, 4, 5, 6, 7);
    c = cfg_make(0.5f, 4, 1.0f, 0.0f); SUPPORT("top_k=4 T=0.5", &c, l, 1, 6, 2, 3);
    /* negative logits and -0/+0 tie: -0 and +0 are equal, so the lower id wins */
    const float z[4] = { -1.0f, 0.0f, -0.0f, -2.0f };
    const float z2[4] = { -1.0f, -0.0f, 0.0f, -2.0f };
    c = cfg_make(1.0f, 1, 1.0f, 0.0f);
    SUPPORT("top_k=1 +0/-0", &c, z, 1);
    SUPPORT("top_k=1 -0/+0", &c, z2, 1);
}

static void test_top_p(void) {
    /* four equal tokens: each exactly 1/4, so the boundary is exact */
    const float eq[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    sampler_config c = cfg_make(1.0f, 0, 0.25f, 0.0f);
    SUPPORT("top_p=0.25 equal", &c, eq, 0);
    c.top_p = 0.26f; SUPPORT("top_p=0.26 equal", &c, eq, 0, 1);
    c.top_p = 0.5f;  SUPPORT("top_p=0.5 equal (mass exactly reached)", &c, eq, 0, 1);
    c.top_p = 0.75f; SUPPORT("top_p=0.75 equal", &c, eq, 0, 1, 2);
    c.top_p = 0.76f; SUPPORT("top_p=0.76 equal", &c, eq, 0, 1, 2, 3);
    c.top_p = 1.0f;  SUPPORT("top_p=1 (off)", &c, eq, 0, 1, 2, 3);
    /* probabilities 0.4, 0.1, 0.2, 0.2, 0.1: ranks 0, {2,3}, {1,4} */
    const float l[5] = { logf(0.4f), logf(0.1f), logf(0.2f), logf(0.2f), logf(0.1f) };
    c.top_p = 0.3f;  SUPPORT("top_p=0.3", &c, l, 0);
    c.top_p = 0.5f;  SUPPORT("top_p=0.5 (tie: lowest id)", &c, l, 0, 2);
    c.top_p = 0.7f;  SUPPORT("top_p=0.7", &c, l, 0, 2, 3);
    c.top_p = 0.85f; SUPPORT("top_p=0.85 (tie: lowest id)", &c, l, 0, 1, 2, 3);
    c.top_p = 0.95f; SUPPORT("top_p=0.95", &c, l, 0, 1, 2, 3, 4);
    /* temperature comes first: 0.5, 0.3, 0.2 at T=1 / 0.5 / 3 */
    const float t3[3] = { logf(0.5f), logf(0.3f), logf(0.2f) };
    c = cfg_make(1.0f, 0, 0.65f, 0.0f); SUPPORT("T=1 top_p=0.65", &c, t3, 0, 1);
    c.temperature = 0.5f;                SUPPORT("T=0.5 top_p=0.65 (0.658 > 0.65)", &c, t3, 0);
    c = cfg_make(1.0f, 0, 0.75f, 0.0f); SUPPORT("T=1 top_p=0.75", &c, t3, 0, 1);
    c.temperature = 3.0f;                SUPPORT("T=3 top_p=0.75 (0.714 < 0.75)", &c, t3, 0, 1, 2);
}

static void test_min_p(void) {
    const float l[6] = { logf(0.5f), logf(0.2f), logf(0.05f), logf(0.3f), logf(0.025f), logf(0.025f) };
    sampler_config c = cfg_make(1.0f, 0, 1.0f, 0.04f);
    SUPPORT("min_p=0.04 (tie at 0.05: both kept)", &c, l, 0, 1, 2, 3, 4, 5);
    c.min_p = 0.06f; SUPPORT("min_p=0.06", &c, l, 0, 1, 2, 3);
    c.min_p = 0.11f; SUPPORT("min_p=0.11", &c, l, 0, 1, 3);
    c.min_p = 0.5f;  SUPPORT("min_p=0.5", &c, l, 0, 3);
    c.min_p = 0.7f;  SUPPORT("min_p=0.7", &c, l, 0);
    c.temperature = 2.0f; c.min_p = 0.5f; /* sqrt(0.4) = 0.63 >= 0.5 */
    SUPPORT("T=2 min_p=0.5", &c, l, 0, 1, 3);
    const float two[3] = { 1.0f, -3.0f, 1.0f }; /* both maxima sit exactly at the threshold */
    c = cfg_make(1.0f, 0, 1.0f, 0.99f);
    SUPPORT("min_p=0.99 tied maxima", &c, two, 0, 2);
}

static void test_order(void) {
    /* 0.3, 0.25, 0.2, 0.15, 0.1: top-k 3 then top-p 0.6 keeps {0,1} (0.4 + 0.33 of the
     * renormalised three); top-p first would keep {0,1,2} (0.3 + 0.25 < 0.6) */
    const float l[5] = { logf(0.3f), logf(0.25f), logf(0.2f), logf(0.15f), logf(0.1f) };
    sampler_config c = cfg_make(1.0f, 3, 0.6f, 0.0f);
    SUPPORT("top_k=3 then top_p=0.6", &c, l, 0, 1);
    c = cfg_make(1.0f, 0, 0.6f, 0.0f);
    SUPPORT("top_p=0.6 alone", &c, l, 0, 1, 2);
    /* then min-p on what is left: 0.25/0.3 = 0.83 */
    c = cfg_make(1.0f, 3, 0.6f, 0.85f);
    SUPPORT("top_k, top_p, then min_p=0.85", &c, l, 0);
    c = cfg_make(1.0f, 4, 0.9f, 0.6f);
    SUPPORT("top_k=4 top_p=0.9 min_p=0.6", &c, l, 0, 1, 2);
}

static void test_special_values(void) {
    const float a[4] = { -INFINITY, 1.0f, 2.0f, -INFINITY };
    sampler_config c = cfg_make(1.0f, 0, 1.0f, 0.0f);
    SUPPORT("-inf excluded", &c, a, 1, 2);
    c.top_k = 3; SUPPORT("-inf excluded, top_k=3", &c, a, 1, 2);
    c = cfg_make(1.0f, 0, 1.0f, 0.0f);
    const float n[3] = { NAN, 0.0f, 0.0f };
    SUPPORT("NaN as -inf", &c, n, 1, 2);
    c.top_p = 0.5f; SUPPORT("NaN as -inf, top_p", &c, n, 1);
    const float nk[5] = { NAN, 0.0f, 1.0f, -NAN, -1.0f }; /* both NaN signs rank last */
    c = cfg_make(1.0f, 1, 1.0f, 0.0f);
    SUPPORT("NaN as -inf, top_k=1", &c, nk, 2);
    c.top_k = 3; SUPPORT("NaN as -inf, top_k=3", &c, nk, 1, 2, 4);
    c.top_k = 4; SUPPORT("NaN as -inf, top_k=4", &c, nk, 1, 2, 4);
    float p[4];
    const float all[4] = { -INFINITY, NAN, -INFINITY, -INFINITY };
    c = cfg_make(0.8f, 2, 0.9f, 0.1f);
    run_probs(&c, all, 4, p);
    CHECK(p[0] == 1.0f && p[1] == 0.0f && p[2] == 0.0f && p[3] == 0.0f);
    const float inf[4] = { 1.0f, INFINITY, 3.0f, INFINITY };
    c = cfg_make(1.0f, 0, 1.0f, 0.0f);
    run_probs(&c, inf, 4, p);
    CHECK(p[0] == 0.0f && p[1] == 0.5f && p[2] == 0.0f && p[3] == 0.5f);
    c.top_k = 1;
    run_probs(&c, inf, 4, p);
    CHECK(p[1] == 1.0f && p[3] == 0.0f);
    /* V = 1 */
    const float one[1] = { -7.0f };
    c = cfg_make(0.7f, 1, 0.5f, 0.5f);
    run_probs(&c, one, 1, p);
    CHECK(p[0] == 1.0f);
}

/* random logits and configs vs the double reference: exact support, probs to 1e-6 */
static void compare_random(int V, int trials, uint64_t seed, int *skipped) {
    float *l = malloc((size_t)V * sizeof *l), *p = malloc((size_t)V * sizeof *p);
    double *r = malloc((size_t)V * sizeof *r);
    sampler *s = sampler_create(V);
    static const float temps[] = { 0.25f, 0.7f, 1.0f, 1.5f };
    static const float tps[] = { 1.0f, 0.1f, 0.5f, 0.9f, 0.99f };
    static const float mps[] = { 0.0f, 0.01f, 0.05f, 0.3f };
    uint64_t st = seed;
    for (int t = 0; t < trials; t++) {
        int kind = (int)(t_splitmix(&st) % 6);
        double scale = 1.0 + 4.0 * t_unif(&st);
        for (int i = 0; i < V; i++) {
            double g = t_gauss(&st) * scale;
            if (kind == 1) g = round(g * 2.0) / 2.0;                 /* many exact ties */
            if (kind == 2 && t_unif(&st) < 0.3) g = -INFINITY;       /* masked tokens */
            if (kind == 3) g = round(g);                             /* heavy ties */
            /* every 16th token raised / lowered: misleads a 1-in-16 subsample, so the
             * prefilter's estimate is too high / too low and its fallback must hold */
            if (kind == 4) g = (i % 16 == 0) ? 2.0 + 0.1 * g : -1.0 + 0.1 * g;
            if (kind == 5) g = (i % 16 == 0) ? g - 10.0 : g;
            l[i] = (float)g;
        }
        const int ks[] = { 0, 1, 5, 40, V - 1, V, V + 5 };
        sampler_config c = cfg_make(temps[t_splitmix(&st) % 4], ks[t_splitmix(&st) % 7],
                                    tps[t_splitmix(&st) % 5], mps[t_splitmix(&st) % 4]);
        if (c.top_k < 0) c.top_k = 0;
        if (!ref_probs(&c, l, V, r)) { (*skipped)++; continue; }
        sampler_probs(s, &c, l, p);
        int bad_support = 0, bad_prob = 0, first = -1;
        for (int i = 0; i < V; i++) {
            if ((p[i] > 0.0f) != (r[i] > 0.0)) { bad_support++; if (first < 0) first = i; }
            else if (fabs(p[i] - r[i]) > 1e-6 + 1e-5 * r[i]) { bad_prob++; if (first < 0) first = i; }
        }
        CHECKF(bad_support == 0 && bad_prob == 0,
               "V=%d trial %d kind %d (T=%g k=%d p=%g m=%g): %d support / %d prob mismatches, first "
               "token %d: %.9g vs %.9g", V, t, kind, c.temperature, c.top_k, c.top_p, c.min_p,
               bad_support, bad_prob, first, first >= 0 ? p[first] : 0.0, first >= 0 ? r[first] : 0.0);
    }
    sampler_destroy(s);
    free(l); free(p); free(r);
}

static void test_random_vs_reference(void) {
    int skipped = 0, total = 0;
    const int Vs[] = { 1, 2, 7, 100, 1000, 32000 };
    const int trials[] = { 50, 100, 300, 300, 200, 60 };
    for (int i = 0; i < 6; i++) {
        compare_random(Vs[i], trials[i], 1000 + (uint64_t)i, &skipped);
        total += trials[i];
    }
    compare_random(128256, 18, 77, &skipped);
    total += 18;
    fprintf(stderr, "random vs reference: %d cases, %d skipped as within 1e-6 of a boundary\n", total, skipped);
    CHECK(skipped * 50 < total);
}

static void test_large_ties(void) {
    /* 128256 equal logits, top-p 0.5: exactly the lower half of the ids */
    enum { V = 128256 };
    float *l = malloc(V * sizeof *l), *p = malloc(V * sizeof *p);
    for (int i = 0; i < V; i++) l[i] = 0.25f;
    sampler_config c = cfg_make(1.0f, 0, 0.5f, 0.0f);
    run_probs(&c, l, V, p);
    int in = 0, wrong = 0;
    for (int i = 0; i < V; i++) {
        in += p[i] > 0.0f;
        wrong += (p[i] > 0.0f) != (i < V / 2);
    }
    CHECKF(in == V / 2 && wrong == 0, "kept %d, %d misplaced", in, wrong);
    c = cfg_make(1.0f, 1000, 1.0f, 0.0f);
    run_probs(&c, l, V, p);
    in = wrong = 0;
    for (int i = 0; i < V; i++) { in += p[i] > 0.0f; wrong += (p[i] > 0.0f) != (i < 1000); }
    CHECKF(in == 1000 && wrong == 0, "top_k 1000 of ties: kept %d, %d misplaced", in, wrong);
    free(l);
    free(p);
}

static void test_deterministic(void) {
    enum { V = 32000 };
    float *l = malloc(V * sizeof *l), *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    float *o = malloc(V * sizeof *o);
    uint64_t st = 5;
    for (int i = 0; i < V; i++) l[i] = (float)(t_gauss(&st) * 3.0);
    sampler *s1 = sampler_create(V), *s2 = sampler_create(V);
    const sampler_config cs[4] = { cfg_make(0.8f, 0, 0.9f, 0.0f), cfg_make(1.0f, 40, 0.95f, 0.05f),
                                   cfg_make(1.3f, 0, 1.0f, 0.02f), cfg_make(1.0f, 0, 1.0f, 0.0f) };
    for (int k = 0; k < 4; k++) {
        sampler_probs(s1, &cs[k], l, a);
        sampler_probs(s1, &cs[(k + 1) % 4], o, b); /* scribble scratch with other work */
        sampler_probs(s2, &cs[(k + 2) % 4], l, b);
        sampler_probs(s2, &cs[k], l, b);
        CHECKF(memcmp(a, b, V * sizeof *a) == 0, "config %d not bitwise reproducible", k);
        sampler_probs(s1, &cs[k], l, b);
        CHECKF(memcmp(a, b, V * sizeof *a) == 0, "config %d not bitwise reproducible (same object)", k);
    }
    sampler_destroy(s1);
    sampler_destroy(s2);
    free(l); free(a); free(b); free(o);
}

/* ---- drawing --------------------------------------------------------------- */

static void test_sample_exact(void) {
    const float p[6] = { 0.25f, 0.0f, 0.5f, 0.0f, 0.25f, 0.0f };
    CHECK(sampler_sample(p, 6, 0.0) == 0);
    CHECK(sampler_sample(p, 6, 0.2499) == 0);
    CHECK(sampler_sample(p, 6, 0.25) == 2);
    CHECK(sampler_sample(p, 6, 0.7499) == 2);
    CHECK(sampler_sample(p, 6, 0.75) == 4);
    CHECK(sampler_sample(p, 6, 1.0 - 0x1.0p-53) == 4);
    const float w[6] = { 1.0f, 0.0f, 2.0f, 0.0f, 1.0f, 0.0f }; /* unnormalised: same draws */
    CHECK(sampler_sample(w, 6, 0.2499) == 0 && sampler_sample(w, 6, 0.25) == 2);
    CHECK(sampler_sample(w, 6, 0.75) == 4 && sampler_sample(w, 6, 1.0 - 0x1.0p-53) == 4);
    const float z[3] = { 0.0f, 0.0f, 0.0f };
    CHECK(sampler_sample(z, 3, 0.5) == -1);
    const float lead0[4] = { 0.0f, 0.0f, 0.0f, 1.0f };
    CHECK(sampler_sample(lead0, 4, 0.0) == 3);
    /* large V, sparse: first and last tokens, blocks skipped in between */
    enum { V = 128256 };
    float *big = calloc(V, sizeof *big);
    big[5] = 0.5f; big[V - 1] = 0.5f;
    CHECK(sampler_sample(big, V, 0.0) == 5);
    CHECK(sampler_sample(big, V, 0.4999) == 5);
    CHECK(sampler_sample(big, V, 0.5) == V - 1);
    CHECK(sampler_sample(big, V, 1.0 - 0x1.0p-53) == V - 1);
    /* randomized: the draw is the inverse CDF and never a zero-probability token,
     * even when the float probs do not sum to exactly 1 */
    uint64_t st = 11;
    int zero_hits = 0, cdf_bad = 0;
    for (int t = 0; t < 20; t++) {
        int n = 1 + (int)(t_splitmix(&st) % 3000);
        double tot = 0;
        for (int i = 0; i < n; i++) {
            double x = t_unif(&st);
            big[i] = x < 0.7 ? 0.0f : (float)(x * x * 1e-3);
            tot += big[i];
        }
        if (tot == 0) { big[n - 1] = 1e-30f; tot = 1e-30; }
        for (int i = 0; i < n; i++) big[i] = (float)(big[i] / tot); /* sums to 1 ± rounding */
        tot = 0;
        for (int i = 0; i < n; i++) tot += big[i];
        for (int k = 0; k < 2000; k++) {
            double u = k == 0 ? 0.0 : k == 1 ? 1.0 - 0x1.0p-53 : t_unif(&st);
            int tok = sampler_sample(big, n, u);
            if (tok < 0 || tok >= n || big[tok] == 0.0f) { zero_hits++; continue; }
            double before = 0;
            for (int i = 0; i < tok; i++) before += big[i];
            double target = u * tot;
            if (!(before <= target + 1e-12 && (target < before + big[tok] + 1e-12 || k == 1))) cdf_bad++;
        }
        memset(big, 0, (size_t)n * sizeof *big);
    }
    CHECKF(zero_hits == 0, "%d draws returned a zero-probability token", zero_hits);
    CHECKF(cdf_bad == 0, "%d draws are not the inverse CDF", cdf_bad);
    free(big);
}

static void test_residual_exact(void) {
    const float p[4] = { 0.5f, 0.3f, 0.2f, 0.0f };
    const float q[4] = { 0.2f, 0.3f, 0.1f, 0.4f };
    /* residual: 0.3, 0, 0.1, 0 → 0.75, 0, 0.25, 0 */
    CHECK(sampler_sample_residual(p, q, 4, 0.0) == 0);
    CHECK(sampler_sample_residual(p, q, 4, 0.74) == 0);
    CHECK(sampler_sample_residual(p, q, 4, 0.76) == 2);
    CHECK(sampler_sample_residual(p, q, 4, 1.0 - 0x1.0p-53) == 2);
    /* p == q: no residual mass, falls back to sampling p */
    CHECK(sampler_sample_residual(p, p, 4, 0.6) == 1);
    CHECK(sampler_sample_residual(p, p, 4, 0.1) == 0);
    CHECK(sampler_sample_residual(p, p, 4, 0.9) == 2);
    /* q covering p everywhere except one token */
    const float q2[4] = { 0.5f, 0.25f, 0.2f, 0.05f };
    for (int k = 0; k < 10; k++) CHECK(sampler_sample_residual(p, q2, 4, k / 10.0) == 1);
}

static void test_sample_logits(void) {
    enum { V = 1000 };
    float l[V], p[V], p2[V];
    uint64_t st = 3;
    for (int i = 0; i < V; i++) l[i] = (float)(t_gauss(&st) * 2.0);
    sampler *s = sampler_create(V);
    sampler_config c = cfg_make(0.9f, 50, 0.95f, 0.01f);
    int distinct = 0, last = -1;
    for (uint64_t pos = 0; pos < 200; pos++) {
        int tok = sampler_sample_logits(s, &c, l, p, 77, pos);
        sampler_probs(s, &c, l, p2);
        CHECK(memcmp(p, p2, sizeof p) == 0);
        CHECK(tok == sampler_sample(p2, V, rng_uniform(77, pos, RNG_SAMPLE, 0)));
        CHECK(tok == sampler_sample_logits(s, &c, l, NULL, 77, pos));
        CHECK(p[tok] > 0.0f);
        distinct += tok != last;
        last = tok;
    }
    CHECKF(distinct > 50, "draws barely vary across positions (%d changes)", distinct);
    sampler_destroy(s);
}

/* ---- seeded draws do not depend on call order ------------------------------ */

enum { ORD_V = 4096, ORD_POS = 64, ORD_SEEDS = 3 };
static void logits_for(float *l, uint64_t pos) {
    uint64_t st = 1000 + pos;
    for (int i = 0; i < ORD_V; i++) l[i] = (float)(t_gauss(&st) * 2.5);
}

static void test_call_order(void) {
    static const uint64_t seeds[ORD_SEEDS] = { 1, 2, 0xdeadbeefcafeull };
    sampler_config c = cfg_make(1.0f, 0, 0.95f, 0.0f);
    sampler_config other = cfg_make(0.5f, 7, 0.5f, 0.1f);
    float *l = malloc(ORD_V * sizeof *l), *p = malloc(ORD_V * sizeof *p);
    int fwd[ORD_SEEDS][ORD_POS], tok;
    sampler *s = sampler_create(ORD_V), *s2 = sampler_create(ORD_V);
    for (int a = 0; a < ORD_SEEDS; a++)
        for (int pos = 0; pos < ORD_POS; pos++) {
            logits_for(l, (uint64_t)pos);
            fwd[a][pos] = sampler_sample_logits(s, &c, l, p, seeds[a], (uint64_t)pos);
        }
    int bad = 0;
    for (int pos = ORD_POS - 1; pos >= 0; pos--) /* reverse, position-major */
        for (int a = ORD_SEEDS - 1; a >= 0; a--) {
            logits_for(l, (uint64_t)pos);
            tok = sampler_sample_logits(s2, &c, l, NULL, seeds[a], (uint64_t)pos);
            bad += tok != fwd[a][pos];
        }
    CHECKF(bad == 0, "reverse order: %d draws differ", bad);
    /* random permutation interleaved with unrelated draws on the same sampler */
    int perm[ORD_SEEDS * ORD_POS];
    for (int i = 0; i < ORD_SEEDS * ORD_POS; i++) perm[i] = i;
    uint64_t st = 99;
    for (int i = ORD_SEEDS * ORD_POS - 1; i > 0; i--) {
        int j = (int)(t_splitmix(&st) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j]; perm[j] = t;
    }
    bad = 0;
    for (int i = 0; i < ORD_SEEDS * ORD_POS; i++) {
        int a = perm[i] / ORD_POS, pos = perm[i] % ORD_POS;
        logits_for(l, (uint64_t)pos + 500);
        (void)sampler_sample_logits(s, &other, l, p, seeds[a] + 1, (uint64_t)pos);
        logits_for(l, (uint64_t)pos);
        tok = sampler_sample_logits(s, &c, l, p, seeds[a], (uint64_t)pos);
        bad += tok != fwd[a][pos];
    }
    CHECKF(bad == 0, "shuffled order: %d draws differ", bad);
    int same_seed_diff = 0;
    for (int pos = 0; pos < ORD_POS; pos++) same_seed_diff += fwd[0][pos] != fwd[1][pos];
    CHECKF(same_seed_diff > ORD_POS / 2, "different seeds give the same tokens (%d of %d differ)",
           same_seed_diff, ORD_POS);
    sampler_destroy(s);
    sampler_destroy(s2);
    free(l);
    free(p);
}

/* ---- validation ------------------------------------------------------------ */

static void expect_invalid(sampler_config c, const char *field) {
    char err[160] = "untouched";
    CHECKF(!sampler_config_validate(&c, err, sizeof err), "accepted invalid %s", field);
    CHECKF(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
    fprintf(stderr, "  rejected: %s\n", err);
}

static void test_validate(void) {
    char err[160] = "x";
    sampler_config ok[] = { sampler_config_default(), cfg_make(0.0f, 0, 1.0f, 0.0f),
                            cfg_make(0.7f, 40, 0.9f, 0.05f), cfg_make(2.0f, 1, 1e-6f, 0.999f) };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECKF(sampler_config_validate(&ok[i], err, sizeof err), "valid config %zu rejected: %s", i, err);
        CHECK(err[0] == '\0');
    }
    CHECK(sampler_config_validate(&ok[0], NULL, 0));
    CHECK(!sampler_config_validate(NULL, err, sizeof err) && strlen(err) > 0);
    expect_invalid(cfg_make(-0.1f, 0, 1.0f, 0.0f), "temperature");
    expect_invalid(cfg_make(NAN, 0, 1.0f, 0.0f), "temperature");
    expect_invalid(cfg_make(INFINITY, 0, 1.0f, 0.0f), "temperature");
    expect_invalid(cfg_make(1.0f, -1, 1.0f, 0.0f), "top_k");
    expect_invalid(cfg_make(1.0f, 0, 0.0f, 0.0f), "top_p");
    expect_invalid(cfg_make(1.0f, 0, -0.5f, 0.0f), "top_p");
    expect_invalid(cfg_make(1.0f, 0, 1.01f, 0.0f), "top_p");
    expect_invalid(cfg_make(1.0f, 0, NAN, 0.0f), "top_p");
    expect_invalid(cfg_make(1.0f, 0, 1.0f, -0.01f), "min_p");
    expect_invalid(cfg_make(1.0f, 0, 1.0f, 1.0f), "min_p");
    expect_invalid(cfg_make(1.0f, 0, 1.0f, NAN), "min_p");
    sampler_config bad = cfg_make(-1.0f, 0, 1.0f, 0.0f);
    char tiny[8];
    memset(tiny, 'z', sizeof tiny);
    CHECK(!sampler_config_validate(&bad, tiny, sizeof tiny) && tiny[7] == '\0');
    CHECK(!sampler_config_validate(&bad, NULL, 0));
    CHECK(sampler_create(0) == NULL && sampler_create(-5) == NULL);
    sampler_destroy(NULL);
}

int main(void) {
    test_validate();
    test_temperature();
    test_greedy();
    test_top_k();
    test_top_p();
    test_min_p();
    test_order();
    test_special_values();
    test_large_ties();
    test_random_vs_reference();
    test_deterministic();
    test_sample_exact();
    test_residual_exact();
    test_sample_logits();
    test_call_order();
    TEST_DONE();
}
