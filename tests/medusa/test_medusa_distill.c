/* test_medusa_distill.c — self-distillation data (medusa_distill.h) on
 * stories260K: greedy continuations of 12 corpus prompts generated in lockstep
 * batches of 1, 5 and 12 are the same tokens as plain greedy decoding one
 * sequence at a time (su_plain_greedy, independent of the distiller), with
 * the same hidden states for every batch size; each kept hidden state and its
 * labels equal what the separate hidden-state pass (medusa_data_add, one
 * chunk per sequence) gives for those tokens — a row one position off fails
 * every position; a full dataset stops the distiller at its capacity; a
 * prompt that does not fit the context is refused with a message; at T > 0
 * the continuations differ from the greedy ones and between seeds; without
 * a dataset (generation only, for out) the sequences are
 * the same as with one, at T = 0 and at T = 1 with the same seed; a warm-up
 * (--target-prompts' prompts, written in the same pass) is the T = 1 draws of
 * a generation-only run with that seed, then plain greedy decoding of the
 * prefix, and counts against the context. */
#include "engine/train/medusa_distill.h"
#include "tests/spec/spec_util.h"

#include <math.h>

#define NP 12
#define GEN 48

static su_prompt prompts[NP];

/* runs the distiller over all prompts; data and tokens into *d / out */
static int64_t distill_w(spec_pair *sp, medusa_data *d, int batch, int gen, float temp, const int *warm,
                         float warm_temp, uint64_t seed, int32_t *out, int *len) {
    const int32_t *pp[NP];
    int pn[NP];
    for (int i = 0; i < NP; i++) pp[i] = prompts[i].ids, pn[i] = prompts[i].n;
    char err[512];
    int64_t r = medusa_distill_add(d, sp->target, sp->tok, pp, pn, warm, NP, gen, temp, warm_temp, batch, &seed, out,
                                   len, err, sizeof(err));
    CHECKF(r >= 0, "medusa_distill_add: %s", err);
    return r;
}

static int64_t distill(spec_pair *sp, medusa_data *d, int batch, float temp, uint64_t seed, int32_t *out, int *len) {
    return distill_w(sp, d, batch, GEN, temp, NULL, 0.0f, seed, out, len);
}

int main(void) {
    char tpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, NULL, be, 256);
    CHECK(su_prompts(sp->tok, prompts, NP) == NP);
    model *m = sp->target;
    int D = m->hp.dim, K = 3, ctx = m->mp.max_ctx;
    int32_t *out[3];
    int len[3][NP];
    medusa_data *dd[3];
    static const int batches[3] = {1, 5, 12};
    for (int b = 0; b < 3; b++) {
        out[b] = calloc((size_t)NP * ctx, sizeof(int32_t));
        dd[b] = medusa_data_create(D, K, 100000);
        int64_t r = distill(sp, dd[b], batches[b], 0.0f, 1, out[b], len[b]);
        CHECKF(r == dd[b]->n, "batch %d: %lld added, data holds %lld", batches[b], (long long)r, (long long)dd[b]->n);
    }
    /* the tokens: plain greedy, for every batch size */
    int mism = 0;
    int64_t expect = 0;
    for (int i = 0; i < NP; i++) {
        int32_t ref[GEN];
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, GEN, ref);
        expect += prompts[i].n + nr - 1;
        for (int b = 0; b < 3; b++) {
            bool same = len[b][i] == prompts[i].n + nr &&
                        !memcmp(out[b] + (size_t)i * ctx + prompts[i].n, ref, sizeof(int32_t) * (size_t)nr) &&
                        !memcmp(out[b] + (size_t)i * ctx, prompts[i].ids, sizeof(int32_t) * (size_t)prompts[i].n);
            mism += !same;
        }
    }
    CHECKF(mism == 0, "%d of %d continuations differ from plain greedy decoding", mism, 3 * NP);
    CHECKF(dd[0]->n == expect, "%lld positions kept, %lld expected (every position with a next token)",
           (long long)dd[0]->n, (long long)expect);
    /* the hidden states do not depend on the batch (sequences finish in another
     * order with another batch, so compare sequence by sequence) */
    /* the reference pass over the batch-1 tokens, in the same (prompt) order */
    medusa_data *ref = medusa_data_create(D, K, 100000);
    char err[512];
    for (int i = 0; i < NP; i++)
        CHECK(medusa_data_add(ref, m, sp->tpool, out[0] + (size_t)i * ctx, len[0][i], len[0][i], err, sizeof(err)) >= 0);
    CHECK(ref->n == dd[0]->n);
    /* the distiller appends sequences as they finish: find each one's offset */
    double worst = 0;
    int lab_bad = 0, shifted_ok = 0;
    for (int b = 0; b < 3; b++) {
        int64_t at = 0;
        for (int64_t q = 0; q < dd[b]->n && at < dd[b]->n;) {
            /* sequence starting at q in dd[b]: match it to its reference by next-token labels */
            int64_t r0 = 0;
            int found = -1;
            for (int i = 0; i < NP && found < 0; i++) {
                int n = len[0][i] - 1;
                if (q + n <= dd[b]->n && !memcmp(dd[b]->next + q, ref->next + r0, sizeof(int32_t) * (size_t)n) &&
                    !memcmp(dd[b]->lab + q * K, ref->lab + r0 * K, sizeof(int32_t) * (size_t)n * K))
                    found = i;
                else
                    r0 += n;
            }
            if (found < 0) {
                lab_bad++;
                break;
            }
            int n = len[0][found] - 1;
            for (int64_t t = 0; t < n; t++) {
                const float *a = dd[b]->h + (size_t)(q + t) * D, *e = ref->h + (size_t)(r0 + t) * D;
                for (int k = 0; k < D; k++) {
                    double df = fabs(a[k] - e[k]) / (1e-3 + fabs(e[k]));
                    worst = df > worst ? df : worst;
                }
                /* a one-row shift of the reference is what an off-by-one would give */
                if (t + 1 < n) {
                    const float *s1 = ref->h + (size_t)(r0 + t + 1) * D;
                    double d1 = 0;
                    for (int k = 0; k < D; k++) d1 += fabs(a[k] - s1[k]);
                    shifted_ok += d1 < 1e-3;
                }
            }
            q += n;
            at = q;
        }
    }
    CHECKF(lab_bad == 0, "%d sequences' labels not found in the reference pass", lab_bad);
    CHECKF(worst < 1e-3, "hidden states differ from the hidden-state pass: worst relative difference %.3g", worst);
    CHECKF(shifted_ok == 0, "%d positions also match the next row (the check cannot tell a shift)", shifted_ok);
    fprintf(stderr, "greedy: %lld positions, hidden states within %.2g of the separate pass\n", (long long)dd[0]->n,
            worst);

    /* a full dataset stops the distiller at its capacity */
    medusa_data *small = medusa_data_create(D, K, 100);
    CHECK(distill(sp, small, 4, 0.0f, 1, NULL, NULL) == 100 && small->n == 100);
    medusa_data_destroy(small);

    /* a prompt that does not fit */
    {
        medusa_data *d = medusa_data_create(D, K, 1000);
        const int32_t *pp[1] = {prompts[0].ids};
        int pn[1] = {ctx - GEN + 1};
        uint64_t s = 1;
        int64_t r = medusa_distill_add(d, m, sp->tok, pp, pn, NULL, 1, GEN, 0.0f, 0.0f, 1, &s, NULL, NULL, err,
                                       sizeof(err));
        CHECKF(r == -1 && strstr(err, "do not fit"), "oversized prompt: %lld, '%s'", (long long)r, err);
        /* a warm-up counts against the context too */
        int w[1] = {8};
        pn[0] = ctx - GEN - 8 + 1;
        r = medusa_distill_add(d, m, sp->tok, pp, pn, w, 1, GEN, 0.0f, 1.0f, 1, &s, NULL, NULL, err, sizeof(err));
        CHECKF(r == -1 && strstr(err, "do not fit"), "oversized prompt + warm-up: %lld, '%s'", (long long)r, err);
        pn[0]--;
        r = medusa_distill_add(d, m, sp->tok, pp, pn, w, 1, GEN, 0.0f, 1.0f, 1, &s, NULL, NULL, err, sizeof(err));
        CHECKF(r > 0, "a prompt + warm-up that fits exactly: %lld, '%s'", (long long)r, err);
        medusa_data_destroy(d);
    }

    /* sampled continuations: not the greedy ones, and seeded */
    int32_t *o1 = calloc((size_t)NP * ctx, sizeof(int32_t)), *o2 = calloc((size_t)NP * ctx, sizeof(int32_t));
    int l1[NP], l2[NP];
    medusa_data *d1 = medusa_data_create(D, K, 100000), *d2 = medusa_data_create(D, K, 100000);
    distill(sp, d1, 4, 1.0f, 7, o1, l1);
    distill(sp, d2, 4, 1.0f, 8, o2, l2);
    int diff_greedy = 0, diff_seed = 0;
    for (int i = 0; i < NP; i++) {
        diff_greedy += l1[i] != len[0][i] || memcmp(o1 + (size_t)i * ctx, out[0] + (size_t)i * ctx, sizeof(int32_t) * (size_t)l1[i]);
        diff_seed += l1[i] != l2[i] || memcmp(o1 + (size_t)i * ctx, o2 + (size_t)i * ctx, sizeof(int32_t) * (size_t)l1[i]);
    }
    CHECKF(diff_greedy >= NP / 2, "only %d of %d T=1 continuations differ from greedy", diff_greedy, NP);
    CHECKF(diff_seed >= NP / 2, "only %d of %d continuations differ between seeds", diff_seed, NP);
    /* generation only (no dataset): the same sequences, greedy and sampled */
    int32_t *o3 = calloc((size_t)NP * ctx, sizeof(int32_t));
    int l3[NP], gen_bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ref_o = pass ? o1 : out[2];
        const int *ref_l = pass ? l1 : len[2];
        CHECK(distill(sp, NULL, pass ? 4 : 12, pass ? 1.0f : 0.0f, pass ? 7 : 1, o3, l3) == 0);
        for (int i = 0; i < NP; i++)
            gen_bad += l3[i] != ref_l[i] || memcmp(o3 + (size_t)i * ctx, ref_o + (size_t)i * ctx, sizeof(int32_t) * (size_t)l3[i]);
    }
    CHECKF(gen_bad == 0, "%d generation-only sequences differ from the same run with a dataset", gen_bad);

    /* a warm-up (--target-prompts in one pass): the first W tokens are the
     * draws a T = 1 generation-only run of W tokens makes with the same seed
     * (all sequences in one lockstep batch, so the draws come in the same
     * order), and the rest is plain greedy decoding of that prefix */
    {
        enum { W = 6 };
        int wa[NP], lw[NP], lp[NP], pre_bad = 0, cont_bad = 0, sampled = 0, full = 0;
        for (int i = 0; i < NP; i++) wa[i] = W;
        int32_t *ow = calloc((size_t)NP * ctx, sizeof(int32_t)), *op = calloc((size_t)NP * ctx, sizeof(int32_t));
        medusa_data *dw = medusa_data_create(D, K, 100000);
        int64_t r = distill_w(sp, dw, NP, GEN, 0.0f, wa, 1.0f, 7, ow, lw);
        CHECK(distill_w(sp, NULL, NP, W, 1.0f, NULL, 0.0f, 7, op, lp) == 0);
        int64_t expect_w = 0;
        for (int i = 0; i < NP; i++) {
            const int32_t *a = ow + (size_t)i * ctx, *b = op + (size_t)i * ctx;
            int n = prompts[i].n, hot = n + W;
            expect_w += lw[i] - 1;
            int cmp = lw[i] < hot ? lw[i] : hot; /* a warm-up may end at an end-of-text token */
            pre_bad += lp[i] != cmp || memcmp(a, b, sizeof(int32_t) * (size_t)cmp);
            sampled += memcmp(a + n, out[0] + (size_t)i * ctx + n, sizeof(int32_t) * (size_t)(cmp - n)) != 0;
            if (lw[i] <= hot) continue;
            full++;
            int32_t gref[GEN];
            int nr = su_plain_greedy(sp, a, hot, GEN, gref);
            cont_bad += lw[i] != hot + nr || memcmp(a + hot, gref, sizeof(int32_t) * (size_t)nr);
        }
        CHECKF(pre_bad == 0, "%d warm-ups differ from the T=1 generation-only draws with the same seed", pre_bad);
        CHECKF(full >= NP / 2 && cont_bad == 0, "%d of %d continuations after a warm-up are not greedy", cont_bad, full);
        CHECKF(sampled >= NP / 2, "only %d of %d warm-ups differ from the greedy continuation", sampled, NP);
        CHECKF(r == dw->n && dw->n == expect_w, "warm-up: %lld positions kept, %lld expected", (long long)dw->n,
               (long long)expect_w);
        fprintf(stderr, "warm-up: %d of %d prefixes sampled, %d greedy continuations of them\n", sampled, NP, full);
        medusa_data_destroy(dw);
        free(ow);
        free(op);
    }
    free(o3);
    medusa_data_destroy(d1);
    medusa_data_destroy(d2);
    free(o1);
    free(o2);

    medusa_data_destroy(ref);
    for (int b = 0; b < 3; b++) {
        medusa_data_destroy(dd[b]);
        free(out[b]);
    }
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
