/* test_taps.c — layer taps (model.h: model_set_taps / model_tap_rows), the
 * seam for proposers that read the target's features (EAGLE's low, middle
 * and high layers), on stories260K with the CPU backend:
 *   - the tap at n_layer, put through the output norm, is the hidden state
 *     model_hidden_rows gives for every row (the output head's input);
 *   - the tap at layer 0 is the token embedding: the same token at two
 *     positions gives the same row, other tokens other rows;
 *   - a middle layer's rows do not depend on how the tokens were fed: one
 *     prefill, a prefill then one token at a time through the KV cache, and
 *     the sequence placed second in a batch of two give the same rows;
 *   - taps off, a layer out of range, too many taps and rows out of range
 *     are refused;
 *   - feature input rows (model_seq.feat, the seam's other half): a
 *     sequence fed the embedding tap's rows as features gives the logits of
 *     its tokens bit for bit, beside a sequence fed tokens in the same call;
 *     fed another sequence's embeddings under its own tokens, it gives that
 *     sequence's logits (the features are used, not the tokens). */
#include "engine/model/model.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 20
#define SPLIT 12

int main(void) {
    char path[512], err[512];
    backend *be = backend_create(BACKEND_CPU, 0, 2, err, sizeof err);
    CHECKF(be, "backend: %s", err);
    model *m = model_load(tu_model(path, sizeof path, "stories260K.gguf"), be, NULL, NULL, err, sizeof err);
    CHECKF(m, "load: %s", err);
    int D = m->hp.dim, L = m->hp.n_layer, V = m->hp.n_vocab, mid = L / 2;
    kv_pool *pool = model_kv_pool(m, 16, 64, NULL, err, sizeof err);
    CHECKF(pool, "pool: %s", err);
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = 1 + (i * 37) % (V - 1);
    toks[9] = toks[3]; /* one token at two positions */
    int rows[N];
    for (int i = 0; i < N; i++) rows[i] = i;
    float *logits = malloc(sizeof(float) * (size_t)(2 * N) * (size_t)V);
    float *t0 = malloc(sizeof(float) * N * D), *tm = malloc(sizeof(float) * N * D), *tl = malloc(sizeof(float) * N * D);
    float *hid = malloc(sizeof(float) * N * D), *x = malloc(sizeof(float) * N * D), *y = malloc(sizeof(float) * N * D);

    /* refusals first */
    int bad[5] = {0, 1, 2, 3, 4};
    CHECK(model_tap_rows(m, 0, x, rows, 1) == -1); /* no taps set */
    int over = L + 1;
    CHECK(model_set_taps(m, &over, 1) == -1);
    CHECK(model_set_taps(m, bad, 5) == -1);
    int layers[3] = {0, mid, L};
    CHECK(model_set_taps(m, layers, 3) == 0);
    CHECK(model_tap_rows(m, 0, x, rows, 1) == -1); /* nothing forwarded since */

    /* one prefill of all N tokens, every row's logits */
    kv_seq *kv = kv_seq_create(pool, 256);
    model_seq ms = {.kv = kv, .n = N, .tokens = toks, .all_logits = true};
    CHECKF(model_forward(m, pool, &ms, 1, logits, err, sizeof err) == 0, "forward: %s", err);
    CHECK(model_tap_rows(m, 0, t0, rows, N) == 0 && model_tap_rows(m, 1, tm, rows, N) == 0 &&
          model_tap_rows(m, 2, tl, rows, N) == 0 && model_hidden_rows(m, hid, rows, N) == 0);
    int past = N;
    CHECK(model_tap_rows(m, 0, x, &past, 1) == -1 && model_tap_rows(m, 3, x, rows, 1) == -1);

    /* the final tap through the output norm is the output head's input */
    const float *g = m->shards[0].out_norm;
    float worst = 0;
    for (int r = 0; r < N; r++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)tl[r * D + i] * tl[r * D + i];
        float sc = (float)(1.0 / sqrt(ss / D + m->hp.eps));
        for (int i = 0; i < D; i++) y[r * D + i] = tl[r * D + i] * sc * g[i];
        float e = tu_max_rel(y + r * D, hid + r * D, D);
        worst = e > worst ? e : worst;
    }
    CHECKF(worst < 1e-4f, "tap %d normed vs the hidden state: max relative difference %g", L, worst);
    float en = worst;

    /* the embedding tap: per token, not per position */
    CHECK(!memcmp(t0 + 3 * D, t0 + 9 * D, sizeof(float) * D));
    CHECK(memcmp(t0 + 3 * D, t0 + 4 * D, sizeof(float) * D) != 0);
    CHECK(tu_max_rel(t0 + 5 * D, tm + 5 * D, D) > 1e-3f); /* the middle layer is not the embedding */

    /* prefill SPLIT, then one token at a time: the same middle rows */
    kv_seq_truncate(pool, kv, 0);
    ms = (model_seq){.kv = kv, .n = SPLIT, .tokens = toks};
    CHECK(model_forward(m, pool, &ms, 1, logits, err, sizeof err) == 0);
    CHECK(model_tap_rows(m, 1, x, rows, SPLIT) == 0);
    worst = tu_max_rel(x, tm, SPLIT * D);
    for (int p = SPLIT; p < N; p++) {
        ms = (model_seq){.kv = kv, .n = 1, .tokens = toks + p};
        CHECK(model_forward(m, pool, &ms, 1, logits, err, sizeof err) == 0);
        CHECK(model_tap_rows(m, 1, x + p * D, rows, 1) == 0);
        float e = tu_max_rel(x + p * D, tm + p * D, D);
        worst = e > worst ? e : worst;
    }
    CHECKF(worst < 1e-4f, "layer %d tap: prefill vs incremental, max relative difference %g", mid, worst);

    /* second in a batch of two: its rows follow the first sequence's */
    kv_seq *kv2 = kv_seq_create(pool, 256);
    kv_seq_truncate(pool, kv, 0);
    int32_t other[7] = {5, 6, 7, 8, 9, 10, 11};
    model_seq two[2] = {{.kv = kv2, .n = 7, .tokens = other, .all_logits = true}, {.kv = kv, .n = N, .tokens = toks}};
    CHECK(model_forward(m, pool, two, 2, logits, err, sizeof err) == 0);
    int at[N];
    for (int i = 0; i < N; i++) at[i] = 7 + i;
    CHECK(model_tap_rows(m, 1, x, at, N) == 0 && model_tap_rows(m, 0, y, at, N) == 0);
    float eb = tu_max_rel(x, tm, N * D);
    CHECKF(eb < 1e-4f, "layer %d tap in a batch of two: max relative difference %g", mid, eb);
    CHECK(!memcmp(y, t0, sizeof(float) * N * D));

    /* feature rows: the embeddings as features = the tokens, in a batch
     * beside a token-fed sequence; another sequence's embeddings under these
     * tokens give that sequence's logits */
    {
        float *ref = malloc(sizeof(float) * (size_t)(7 + N) * V), *got = malloc(sizeof(float) * (size_t)(7 + N) * V);
        float *emb7 = malloc(sizeof(float) * 7 * D);
        CHECK(model_tap_rows(m, 0, emb7, rows, 7) == 0); /* the batch of two above: `other` first */
        kv_seq_truncate(pool, kv, 0), kv_seq_truncate(pool, kv2, 0);
        two[1].all_logits = true;
        CHECK(model_forward(m, pool, two, 2, ref, err, sizeof err) == 0);
        kv_seq_truncate(pool, kv, 0), kv_seq_truncate(pool, kv2, 0);
        model_seq mix[2] = {{.kv = kv2, .n = 7, .tokens = other, .all_logits = true, .feat = emb7},
                            {.kv = kv, .n = N, .tokens = toks, .all_logits = true}};
        CHECKF(model_forward(m, pool, mix, 2, got, err, sizeof err) == 0, "forward with features: %s", err);
        CHECK(!memcmp(got, ref, sizeof(float) * (size_t)(7 + N) * V));
        /* `other`'s embeddings under the first 7 of toks: other's logits */
        kv_seq_truncate(pool, kv2, 0);
        model_seq swap = {.kv = kv2, .n = 7, .tokens = toks, .all_logits = true, .feat = emb7};
        CHECK(model_forward(m, pool, &swap, 1, got, err, sizeof err) == 0);
        float ef = tu_max_rel(got, ref, 7 * V);
        CHECKF(ef < 1e-5f, "features under other tokens: max relative difference %g from the features' tokens", ef);
        CHECK(memcmp(toks, other, sizeof other) != 0);
        free(ref), free(got), free(emb7);
    }

    /* off */
    CHECK(model_set_taps(m, NULL, 0) == 0);
    CHECK(model_tap_rows(m, 0, x, rows, 1) == -1);
    fprintf(stderr, "taps at layers 0, %d, %d of %d: final tap = hidden state (%.2g), middle tap independent of "
                    "feeding (%.2g) and batching (%.2g)\n", mid, L, L, (double)en, (double)worst, (double)eb);
    kv_seq_destroy(pool, kv);
    kv_seq_destroy(pool, kv2);
    kv_pool_destroy(pool);
    model_free(m);
    backend_destroy(be);
    free(logits), free(t0), free(tm), free(tl), free(hid), free(x), free(y);
    TEST_DONE();
}
