/* test_medusa_cuda.c — the Medusa heads on the CUDA backend against the CPU
 * (issue 18): the final-normed hidden states a forward leaves behind
 * (model_hidden_rows) and every head's logits (medusa_rt_logits, shared and
 * own output matrices; the token input U e(x) with the shared one;
 * ResBlocks and FFN layers of 96 units) for random non-zero heads on
 * stories260K. Exits 77
 * (skipped) without a GPU. */
#include "engine/spec/proposers/medusa.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

static uint64_t rs = 99;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(void) {
    if (!backend_cuda_built() || backend_cuda_devices() < 1) SKIP("no CUDA device");
    char path[512], err[1024];
    tu_model(path, sizeof(path), "stories260K.gguf");
    backend *bes[2];
    bes[0] = backend_cpu_create(2);
    bes[1] = backend_cuda_create(0, err, sizeof(err));
    if (!bes[1]) SKIP("CUDA backend: %s", err);
    model *m[2];
    kv_pool *pool[2];
    for (int b = 0; b < 2; b++) {
        m[b] = model_load(path, bes[b], NULL, NULL, err, sizeof(err));
        CHECKF(m[b], "%s", err);
        if (!m[b]) return 1;
        pool[b] = model_kv_pool(m[b], 16, 8, NULL, err, sizeof(err));
    }
    int D = m[0]->hp.dim, V = m[0]->hp.n_vocab, n = 12, K = 3;
    int32_t toks[12] = {1, 403, 407, 261, 378, 275, 260, 1919 % 512, 29, 100, 200, 300};
    float *hid[2], *lg = malloc(sizeof(float) * n * V);
    int rows[12];
    for (int i = 0; i < n; i++) rows[i] = i;
    for (int b = 0; b < 2; b++) {
        kv_seq *kv = kv_seq_create(pool[b], 64);
        model_seq ms = {.kv = kv, .n = n, .tokens = toks, .all_logits = true};
        CHECKF(model_forward(m[b], pool[b], &ms, 1, lg, err, sizeof(err)) == 0, "%s", err);
        hid[b] = malloc(sizeof(float) * n * D);
        CHECK(model_hidden_rows(m[b], hid[b], rows, n) == 0);
        kv_seq_destroy(pool[b], kv);
    }
    double eh = rel_err(hid[1], hid[0], (size_t)n * D);
    fprintf(stderr, "hidden states CUDA vs CPU: rel err %.2e\n", eh);
    CHECK(eh < 1e-3);
    for (int c = 0; c < 4; c++) { /* shared output with token input, own output without; ResBlocks, then FFN */
        int own = c & 1, ffn = c < 2 ? 0 : 96;
        medusa_heads *mh = medusa_heads_create(K, 2, ffn, D, V, own, !own, NULL, err, sizeof(err));
        for (size_t i = 0; i < mh->n_params; i++) mh->params[i] = frand() * 0.2f;
        float *out[2];
        for (int b = 0; b < 2; b++) {
            medusa_rt *rt = medusa_rt_create(mh, m[b], n, NULL, err, sizeof(err));
            CHECKF(rt, "%s", err);
            out[b] = malloc(sizeof(float) * K * n * V);
            CHECK(rt && medusa_rt_logits(rt, out[b], hid[0], toks, n, K) == 0);
            medusa_rt_destroy(rt);
        }
        double e = rel_err(out[1], out[0], (size_t)K * n * V);
        fprintf(stderr, "%s, %s output: head logits CUDA vs CPU rel err %.2e\n", ffn ? "FFN" : "ResBlocks",
                own ? "own" : "shared", e);
        CHECK(e < 2e-3);
        free(out[0]), free(out[1]);
        medusa_heads_destroy(mh);
    }
    for (int b = 0; b < 2; b++) {
        free(hid[b]);
        kv_pool_destroy(pool[b]);
        model_free(m[b]);
        backend_destroy(bes[b]);
    }
    free(lg);
    TEST_DONE();
}
