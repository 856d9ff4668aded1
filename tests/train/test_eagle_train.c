/* test_eagle_train.c — the EAGLE-3 trainer against the head that serves:
 * a head made by the trainer (eagle_train.h) on the stories260K target,
 * with its weights perturbed away from the initialization, is written as
 * an eagle3 GGUF, loaded by model_load as the proposer loads it, and run
 * over the same rows:
 *   - step 0: the rows (token x[i+1], the target's features at i) of the
 *     training forward and of model_forward with feat_fc give the same
 *     logits;
 *   - step 1: a draft row (token x[t+2], the head's own output feature of
 *     row t, position t+1) after the cached rows 0..t gives the training
 *     step 1's logits of row t — the training-time test trains exactly what
 *     the head computes when it drafts its second token;
 *   - the tapped features the trainer keeps are the target's residual
 *     stream at those layers (model_set_taps), so training sees what the
 *     proposer's observe_features sees.
 * And a short training run on the target's continuations beats the
 * unigram baseline by a wide margin on held-out sequences. */
#include "engine/model/model.h"
#include "engine/train/eagle_train.h"
#include "engine/tokenizer/tokenizer.h"

#include "kernels/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks, failures;
static void check(int ok, const char *what, double v) {
    checks++;
    if (!ok) failures++;
    printf("%-64s %.3g %s\n", what, v, ok ? "ok" : "FAIL");
}

static double max_rel(const float *a, const float *b, size_t n) {
    double mx = 0, e = 0;
    for (size_t i = 0; i < n; i++) mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i]) / (mx + 1e-12));
    return e;
}

int main(void) {
    char tpath[512];
    snprintf(tpath, sizeof tpath, "%s/stories260K.gguf", getenv("SPECD_MODELS") ? getenv("SPECD_MODELS") : "../shared/models");
    char err[512];
    backend *be = backend_cpu_create(1);
    model_params mp = {.max_batch = 256, .max_ctx = 256};
    engine_status st;
    model *m = model_load(tpath, be, &mp, &st, err, sizeof err);
    if (!m) {
        fprintf(stderr, "cannot load %s: %s\n", tpath, err);
        return 1;
    }
    tokenizer *tok = tok_create(m->gguf, err, sizeof err);
    int layers[3] = {1, 2, 4}, D = m->hp.dim, V = m->hp.n_vocab;
    eagle_head *h = eagle_head_create(m, layers, 0, false, 7, err, sizeof err);
    if (!h || !tok) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* weights well away from the initialization (the layer's output must matter) */
    uint64_t rs = 99;
    for (size_t i = 0; i < h->n_params; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        h->params[i] += (float)(((double)(rs >> 11) * 0x1p-53 * 2 - 1) * 0.15);
    }

    /* a few target continuations with features */
    const char *texts[] = {"Once upon a time, there was a little dog", "Tom and Sue went to the park", "The sun was hot",
                           "One day, a girl named Lily found a", "Ben liked to play with his red ball", "Mom said"};
    enum { NP = 6, GEN = 40 };
    int32_t pbuf[NP][64], *pp[NP];
    int plen[NP];
    for (int i = 0; i < NP; i++) {
        plen[i] = tok_encode(tok, texts[i], strlen(texts[i]), true, false, pbuf[i], 64);
        pp[i] = pbuf[i];
    }
    eagle_data *d = eagle_data_create(D, 8, 64 + GEN, 64);
    uint64_t grs = 1;
    int64_t added = eagle_distill_add(d, m, layers, tok, (const int32_t *const *)pp, plen, NULL, NP, GEN, 0.0f, 1.0f, 4,
                                      &grs, err, sizeof err);
    check(added == NP, "continuations kept with features", (double)added);

    /* the kept features are the target's residual stream at those layers */
    {
        int n = d->len[0];
        kv_pool *pool = model_kv_pool(m, 16, 32, &st, err, sizeof err);
        kv_seq *kv = kv_seq_create(pool, 256);
        float *lg = malloc(sizeof(float) * (size_t)n * V), *tap = malloc(sizeof(float) * (size_t)n * D);
        model_set_taps(m, layers, 3);
        model_seq one = {.kv = kv, .n = n, .tokens = d->tok, .all_logits = true};
        int rc = model_forward(m, pool, &one, 1, lg, err, sizeof err);
        double e = rc ? 1 : 0;
        int rows[256];
        for (int r = 0; r < n; r++) rows[r] = r;
        for (int t = 0; t < 3 && !rc; t++) {
            model_tap_rows(m, t, tap, rows, n);
            for (int r = 0; r + 1 < n; r++) /* the last token was never fed */
                for (int k = 0; k < D; k++) {
                    float kept = fp16_to_f32(d->feat[((size_t)r * 3 + t) * D + k]);
                    e = fmax(e, fabs(kept - tap[(size_t)r * D + k]) / (fabs(tap[(size_t)r * D + k]) + 1e-2));
                }
        }
        model_set_taps(m, NULL, 0);
        check(e < 2e-3, "kept features = the target's taps (F16 rounding)", e);
        free(lg), free(tap);
        kv_seq_destroy(pool, kv);
        kv_pool_destroy(pool);
    }

    /* the training forward over sequence 0: J = 2 steps */
    int n = d->len[0], T = d->T, J = 2;
    float *feat = calloc((size_t)T * 3 * D, sizeof(float));
    int32_t *tokin = calloc((size_t)T + J, sizeof(int32_t));
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 3 * D; k++) feat[(size_t)r * 3 * D + k] = fp16_to_f32(d->feat[(size_t)r * 3 * D + k]);
    for (int u = 0; u + 1 < n; u++) tokin[u] = d->tok[u + 1];
    eagle_batch b = {.S = 1, .T = T, .J = J, .K = 0, .feat = feat, .tok = tokin};
    eagle_work *w = eagle_work_create(h, 1, T, J);
    train_ctx *c = train_ctx_create(1);
    const float *z[2];
    eagle_forward(c, w, h, &b, z);

    /* the same head as a file, loaded as the proposer loads it */
    char hp[] = "/tmp/specd-eagle-train-XXXXXX";
    int fd = mkstemp(hp);
    close(fd);
    int sv = eagle_head_save(h, m, hp, GGML_TYPE_F32, "test", err, sizeof err);
    check(sv == 0, "head written", sv);
    model_params hmp = {.max_batch = 256, .max_ctx = 256};
    model *hm = model_load(hp, be, &hmp, &st, err, sizeof err);
    check(hm != NULL && hm->hp.eagle3, "head loads as an eagle3 model", hm != NULL);
    if (!hm) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    kv_pool *hpool = model_kv_pool(hm, 16, 32, &st, err, sizeof err);
    kv_seq *hkv = kv_seq_create(hpool, 256);
    int rows0 = n - 1; /* rows 0..n-2: token x[i+1] exists */
    float *lg = malloc(sizeof(float) * (size_t)rows0 * V);
    model_seq s0 = {.kv = hkv, .n = rows0, .tokens = d->tok + 1, .feat = feat, .feat_fc = true, .all_logits = true};
    int frc = model_forward(hm, hpool, &s0, 1, lg, err, sizeof err);
    check(frc == 0, "head forward over the target's features", frc);
    double e0 = max_rel(lg, z[0], (size_t)rows0 * V);
    check(e0 < 1e-4, "step 0: training logits = the served head's", e0);

    /* step 1 of row t: cache rows 0..t, then (x[t+2], the head's own output of row t) at t+1 */
    double e1 = 0;
    int one_tap = 1;
    model_set_taps(hm, &one_tap, 1);
    for (int t = 3; t < rows0 - 2 && t < 12; t += 4) {
        kv_seq_truncate(hpool, hkv, 0);
        model_seq a = {.kv = hkv, .n = t + 1, .tokens = d->tok + 1, .feat = feat, .feat_fc = true, .all_logits = true};
        float own[512], lg1[512];
        model_forward(hm, hpool, &a, 1, lg, err, sizeof err);
        int last = t;
        model_tap_rows(hm, 0, own, &last, 1);
        model_seq s1 = {.kv = hkv, .n = 1, .tokens = d->tok + t + 2, .feat = own};
        model_forward(hm, hpool, &s1, 1, lg1, err, sizeof err);
        e1 = fmax(e1, max_rel(lg1, z[1] + (size_t)t * V, (size_t)V));
    }
    check(e1 < 1e-4, "step 1: training logits = the head drafting its 2nd token", e1);
    unlink(hp);

    /* a head that shares the target's output head: written without it, loaded beside its target */
    {
        eagle_head *hs = eagle_head_create(m, layers, 0, true, 7, err, sizeof err);
        check(hs != NULL && hs->n_tensors == h->n_tensors - 1, "a shared-output head has no output tensor of its own",
              hs ? hs->n_tensors : -1);
        memcpy(hs->params, h->params, sizeof(float) * hs->n_params); /* the same weights but the output */
        const float *zs[2];
        eagle_forward(c, w, hs, &b, zs);
        char sp[] = "/tmp/specd-eagle-shared-XXXXXX";
        int sfd = mkstemp(sp);
        close(sfd);
        int ss = eagle_head_save(hs, m, sp, GGML_TYPE_F32, "test", err, sizeof err);
        model *alone = model_load(sp, be, &hmp, &st, err, sizeof err);
        check(ss == 0 && alone == NULL, "written without output.weight (refused without its target)", ss);
        model_free(alone);
        model *sm = model_load_eagle3(sp, m, &hmp, &st, err, sizeof err);
        check(sm != NULL, "loads beside its target", sm != NULL);
        if (sm) {
            kv_pool *sp2 = model_kv_pool(sm, 16, 32, &st, err, sizeof err);
            kv_seq *skv = kv_seq_create(sp2, 256);
            model_seq q0 = {.kv = skv, .n = rows0, .tokens = d->tok + 1, .feat = feat, .feat_fc = true, .all_logits = true};
            int qrc = model_forward(sm, sp2, &q0, 1, lg, err, sizeof err);
            double es = qrc ? 1 : max_rel(lg, zs[0], (size_t)rows0 * V);
            check(es < 1e-4, "step 0 with the target's output head: training = served", es);
            kv_seq_destroy(sp2, skv);
            kv_pool_destroy(sp2);
            model_free(sm);
        }
        unlink(sp);
        eagle_head_destroy(hs);
    }

    /* a short run: held-out top-1 of the first draft far above the unigram baseline */
    eagle_data *dd = eagle_data_create(D, 16, 100, 400);
    int32_t bos = tok_bos(tok);
    enum { NT = 240 };
    int32_t *bp[NT];
    int bl[NT], bw[NT];
    for (int i = 0; i < NT; i++) bp[i] = &bos, bl[i] = 1, bw[i] = 31;
    grs = 5;
    eagle_distill_add(dd, m, layers, tok, (const int32_t *const *)bp, bl, bw, NT, 64, 0.0f, 1.0f, 64, &grs, err,
                      sizeof err);
    eagle_head *h2 = eagle_head_create(m, layers, 0, false, 3, err, sizeof err);
    eagle_train_opts o;
    eagle_train_opts_init(&o);
    o.J = 3, o.epochs = 3, o.batch = 4, o.threads = 2, o.holdout = 0.1f, o.opt.lr = 3e-3f;
    eagle_train_result res;
    int trc = eagle_train(h2, dd, &o, &res, err, sizeof err);
    check(trc == 0, "training runs", trc);
    printf("  held-out top-1 by step %.3f/%.3f/%.3f (untrained %.3f), greedy accepted %.3f, unigram %.3f, %lld steps\n",
           res.after.acc[0], res.after.acc[1], res.after.acc[2], res.before.acc[0], res.after.accept_len,
           res.unigram_acc, (long long)res.steps);
    check(res.after.acc[0] > 3 * res.unigram_acc && res.after.acc[0] > 0.3, "trained step-0 top-1 > 3x unigram and > 0.3",
          res.after.acc[0]);
    check(res.after.acc[1] > 2 * res.unigram_acc, "trained step-1 top-1 > 2x unigram", res.after.acc[1]);
    check(res.after.loss < res.before.loss, "held-out loss falls", res.after.loss - res.before.loss);

    eagle_head_destroy(h2);
    eagle_data_destroy(dd);
    free(lg), free(feat), free(tokin);
    kv_seq_destroy(hpool, hkv);
    kv_pool_destroy(hpool);
    model_free(hm);
    eagle_work_destroy(w);
    train_ctx_destroy(c);
    eagle_data_destroy(d);
    eagle_head_destroy(h);
    tok_destroy(tok);
    model_free(m);
    backend_destroy(be);
    printf("%d checks, %d failed\n", checks, failures);
    return failures || checks == 0 ? 1 : 0;
}
