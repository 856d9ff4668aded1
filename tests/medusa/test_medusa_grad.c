/* test_medusa_grad.c — the trainer's hand-written backward (medusa_sample_grad)
 * against central finite differences of an independent float64 forward, for
 * EVERY trained parameter (W, b of each ResBlock or FFN layer, W2 of FFN
 * layers, each head's own output matrix, the token input's U), with shared
 * and own output matrices, with and without token input, 1 and 2 layers,
 * ResBlocks and FFN layers, and labels missing for some heads.
 * Also: the float forward's loss equals the float64 one, and a gradient
 * perturbed by 30% on a third of its ResBlock entries, of U's, or of an FFN
 * layer's W2, fails the same comparison. */
#include "engine/train/medusa_train.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

static uint64_t rs = 12345;
static backend *tbe; /* the products' backend: one CPU thread, as each trainer worker has */
static double urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) / 9007199254740992.0;
}

/* float64 loss of one sample: the definition, written again */
static double ref_loss(const medusa_heads *mh, const double *p, const double *O, const double *E, int tok,
                       const double *h, const int32_t *lab, const float *hw) {
    int K = mh->n_heads, L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = F ? F : D;
    size_t nw = (size_t)K * L * H * D, nb = (size_t)K * L * H, no = mh->own_output ? (size_t)K * V * D : 0;
    size_t nu = mh->token_input ? (size_t)D * D : 0;
    double y[64], yn[64], z[64], x0[64], loss = 0;
    for (int i = 0; i < D; i++) { /* x0 = h + U e(tok) */
        x0[i] = h[i];
        if (mh->token_input)
            for (int j = 0; j < D; j++) x0[i] += p[nw + nb + no + (size_t)i * D + j] * E[(size_t)tok * D + j];
    }
    for (int k = 0; k < K; k++) {
        if (lab[k] < 0) continue;
        memcpy(y, x0, sizeof(double) * D);
        for (int l = 0; l < L; l++) {
            const double *W = p + ((size_t)k * L + l) * H * D, *b = p + nw + ((size_t)k * L + l) * H;
            const double *W2 = p + nw + nb + no + nu + ((size_t)k * L + l) * D * F; /* (D, F) */
            memcpy(yn, y, sizeof(double) * D);
            for (int i = 0; i < H; i++) {
                double a = b[i];
                for (int j = 0; j < D; j++) a += W[i * D + j] * y[j];
                double sa = a / (1 + exp(-a));
                if (!F) yn[i] += sa;
                else
                    for (int j = 0; j < D; j++) yn[j] += W2[(size_t)j * F + i] * sa;
            }
            memcpy(y, yn, sizeof(double) * D);
        }
        const double *Om = mh->own_output ? p + nw + nb + (size_t)k * V * D : O;
        double mx = -1e300;
        for (int v = 0; v < V; v++) {
            z[v] = 0;
            for (int j = 0; j < D; j++) z[v] += Om[v * D + j] * y[j];
            mx = z[v] > mx ? z[v] : mx;
        }
        double s = 0;
        for (int v = 0; v < V; v++) s += exp(z[v] - mx);
        loss += hw[k] * (mx + log(s) - z[lab[k]]);
    }
    return loss;
}

/* max over parameters of |analytic - numeric| / max(1e-3, |analytic| + |numeric|) */
/* perturb: 0 none, 1 a third of the ResBlock entries, 2 a third of U's, 3 of W2's */
static double check(int K, int L, int F, int D, int V, bool own, bool tin, int perturb, int *n_checked) {
    char err[256];
    medusa_heads *mh = medusa_heads_create(K, L, F, D, V, own, tin, NULL, err, sizeof(err));
    if (!mh) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    size_t P = mh->n_params;
    /* non-zero weights so every path carries gradient (a fresh head is zero) */
    for (size_t i = 0; i < P; i++) mh->params[i] = (float)((urand() - 0.5) * 0.6);
    float *O = malloc(sizeof(float) * V * D), *E = malloc(sizeof(float) * V * D), h[64], hw[8];
    for (int i = 0; i < V * D; i++) O[i] = (float)((urand() - 0.5) * 1.0);
    for (int i = 0; i < V * D; i++) E[i] = (float)((urand() - 0.5) * 1.0);
    int32_t tok = (int32_t)(urand() * V);
    for (int j = 0; j < D; j++) h[j] = (float)((urand() - 0.5) * 2.0);
    int32_t lab[8];
    for (int k = 0; k < K; k++) {
        lab[k] = (int32_t)(urand() * V);
        hw[k] = k ? hw[k - 1] * 0.8f : 1.0f;
    }
    if (K > 2) lab[1] = -1; /* a head without a target gets no gradient */
    float *g = calloc(P, sizeof(float)), *scr = malloc(sizeof(float) * medusa_scratch_floats(mh));
    double fl = medusa_sample_grad(tbe, mh, O, E, h, tok, lab, hw, g, scr, NULL);
    double *p = malloc(sizeof(double) * P), *Od = malloc(sizeof(double) * V * D), *Ed = malloc(sizeof(double) * V * D),
           hd[64];
    for (size_t i = 0; i < P; i++) p[i] = mh->params[i];
    for (int i = 0; i < V * D; i++) Od[i] = O[i], Ed[i] = E[i];
    for (int j = 0; j < D; j++) hd[j] = h[j];
    double l0 = ref_loss(mh, p, Od, Ed, tok, hd, lab, hw);
    CHECKF(fabs(fl - l0) < 1e-4 * (1 + fabs(l0)), "float loss %.8f vs float64 %.8f", fl, l0);
    /* the comparison must have teeth: a gradient 30% off on every third
     * ResBlock (or U) entry, the size of a typical slip (a dropped term of
     * silu', a missed head in U's sum), has to fail the bound */
    if (perturb == 1)
        for (size_t i = 0; i < (size_t)K * L * D * (D + 1); i++) g[i] *= 1.0f + 0.3f * (float)(i % 3 == 0);
    if (perturb == 2 && tin)
        for (size_t i = (size_t)(mh->u - mh->params); i < (size_t)(mh->u - mh->params) + (size_t)D * D; i++)
            g[i] *= 1.0f + 0.3f * (float)(i % 3 == 0);
    if (perturb == 3 && F)
        for (size_t i = (size_t)(mh->w2 - mh->params); i < P; i++) g[i] *= 1.0f + 0.3f * (float)(i % 3 == 0);
    double worst = 0, eps = 1e-5;
    for (size_t i = 0; i < P; i++) {
        double keep = p[i];
        p[i] = keep + eps;
        double lp = ref_loss(mh, p, Od, Ed, tok, hd, lab, hw);
        p[i] = keep - eps;
        double lm = ref_loss(mh, p, Od, Ed, tok, hd, lab, hw);
        p[i] = keep;
        double num = (lp - lm) / (2 * eps), an = g[i];
        double rel = fabs(an - num) / fmax(1e-3, fabs(an) + fabs(num));
        if (rel > worst) worst = rel;
        (*n_checked)++;
    }
    free(O), free(E), free(g), free(scr), free(p), free(Od), free(Ed);
    medusa_heads_destroy(mh);
    return worst;
}

/* the trainer's grouped pass (G samples in lockstep) equals the sum of single samples */
static double group_check(int K, int L, int F, int D, int V, bool own, bool tin, int G) {
    char err[256];
    medusa_heads *mh = medusa_heads_create(K, L, F, D, V, own, tin, NULL, err, sizeof(err));
    size_t P = mh->n_params;
    for (size_t i = 0; i < P; i++) mh->params[i] = (float)((urand() - 0.5) * 0.6);
    float *O = malloc(sizeof(float) * V * D), *E = malloc(sizeof(float) * V * D), *hs = malloc(sizeof(float) * G * D),
          hw[8];
    int32_t *labs = malloc(sizeof(int32_t) * G * K), toks[MEDUSA_GROUP];
    for (int i = 0; i < V * D; i++) O[i] = (float)(urand() - 0.5), E[i] = (float)(urand() - 0.5);
    for (int s = 0; s < G; s++) toks[s] = s == 1 ? -1 : (int32_t)(urand() * V); /* one without a token */
    for (int i = 0; i < G * D; i++) hs[i] = (float)((urand() - 0.5) * 2);
    for (int i = 0; i < G * K; i++) labs[i] = urand() < 0.2 ? -1 : (int32_t)(urand() * V);
    for (int k = 0; k < K; k++) hw[k] = k ? hw[k - 1] * 0.8f : 1.0f;
    float *g1 = calloc(P, sizeof(float)), *g2 = calloc(P, sizeof(float));
    float *scr = malloc(sizeof(float) * medusa_scratch_floats(mh));
    const float *hp[MEDUSA_GROUP];
    const int32_t *lp[MEDUSA_GROUP];
    double l1 = 0;
    int c1[8] = {0}, c2[8] = {0};
    for (int s = 0; s < G; s++) {
        hp[s] = hs + (size_t)s * D, lp[s] = labs + (size_t)s * K;
        l1 += medusa_sample_grad(tbe, mh, O, E, hp[s], toks[s], lp[s], hw, g1, scr, c1);
    }
    double l2 = medusa_group_grad(tbe, mh, O, E, hp, toks, lp, G, hw, g2, scr, c2);
    double worst = fabs(l1 - l2) / (1 + fabs(l1));
    for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs(g1[i] - g2[i]) / (1e-3 + fabs(g1[i])));
    CHECK(!memcmp(c1, c2, sizeof(c1)));
    free(O), free(E), free(hs), free(labs), free(g1), free(g2), free(scr);
    medusa_heads_destroy(mh);
    return worst;
}

int main(void) {
    tbe = backend_cpu_create(1);
    CHECK(tbe != NULL);
    struct { int K, L, F, D, V; bool own, tin; } cases[] = {
        {1, 1, 0, 6, 11, false, false},
        {3, 1, 0, 8, 13, false, false},
        {2, 2, 0, 7, 9, true, false},
        {4, 2, 0, 5, 17, true, false},
        {1, 1, 0, 6, 11, false, true},
        {3, 2, 0, 8, 13, false, true},
        {2, 1, 0, 7, 9, true, true},
        {1, 1, 32, 6, 11, false, false},
        {3, 1, 32, 5, 13, false, true},
        {2, 2, 32, 7, 9, true, true},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int n = 0;
        double w = check(cases[c].K, cases[c].L, cases[c].F, cases[c].D, cases[c].V, cases[c].own, cases[c].tin, 0, &n);
        fprintf(stderr, "K=%d L=%d F=%d D=%d V=%d %s output%s: %d parameters, worst relative error %.2e\n", cases[c].K,
                cases[c].L, cases[c].F, cases[c].D, cases[c].V, cases[c].own ? "own" : "shared",
                cases[c].tin ? ", token input" : "", n, w);
        CHECKF(w < 2e-3, "case %zu: worst relative gradient error %.3e", c, w);
    }
    double gw = fmax(fmax(group_check(3, 2, 0, 9, 14, true, false, MEDUSA_GROUP),
                          group_check(2, 1, 0, 12, 20, false, false, 5)),
                     fmax(group_check(3, 1, 0, 10, 15, false, true, MEDUSA_GROUP),
                          group_check(2, 2, 32, 9, 14, true, true, MEDUSA_GROUP)));
    fprintf(stderr, "grouped pass vs sum of single samples: worst relative difference %.2e\n", gw);
    CHECK(gw < 1e-4);
    /* the comparison has teeth: a gradient off by 30% on a third of the entries fails it */
    for (int pb = 1; pb <= 3; pb++) {
        int n = 0;
        double w = check(2, 2, pb == 3 ? 32 : 0, 6, 9, true, true, pb, &n);
        fprintf(stderr, "perturbed gradient (%s): worst relative error %.2e (must fail the bound)\n",
                pb == 1 ? "ResBlocks" : pb == 2 ? "U" : "FFN W2", w);
        CHECK(w > 2e-2);
    }
    backend_destroy(tbe);
    TEST_DONE();
}
