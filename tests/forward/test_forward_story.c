/* test_forward_story.c — the llama forward pass in C alone, for builds where
 * the Python reference tests cannot run (the aarch64 cross build under
 * qemu-user, -Dkernels_only=true): stories260K.gguf decodes greedily from BOS
 * on the best SIMD level this CPU runs (NEON on aarch64) and on the portable
 * kernels, one token per forward call, and both must emit exactly the 60
 * tokens of the float64 numpy reference (tests/forward/ref_llama.py; the
 * story "Once upon a time, there was a little girl named Lily..."; on x86
 * test_greedy_story.py checks the same ids against the reference itself).
 * The two levels' logits agree step by step, and a prefill of the whole
 * sequence in one call gives the last row's logits the step-by-step decode
 * gave. Exit 77 when the model is not there ($SPECD_MODELS). */
#include "engine/model/model.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 60

/* The reference's greedy continuation of BOS (1): ref_llama.py LlamaRef.greedy([1], 60). */
static const int32_t want[N_GEN] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
    266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415,
};

typedef struct {
    backend *be;
    model *m;
    kv_pool *pool;
    kv_seq *kv;
    float *logits; /* (N_GEN + 1) rows of n_vocab: the logits after each fed token */
    int32_t toks[N_GEN + 1];
} run;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy decode from BOS at SIMD level `level` (NULL: the best): fills r. */
static void decode(run *r, const char *path, const char *level) {
    char err[256] = "";
    if (level) setenv("SPECD_SIMD", level, 1);
    else unsetenv("SPECD_SIMD");
    r->be = backend_cpu_create(2);
    CHECK(r->be != NULL);
    r->m = model_load(path, r->be, NULL, NULL, err, sizeof err);
    CHECKF(r->m != NULL, "model_load: %s", err);
    if (!r->m) exit(1);
    const int V = r->m->hp.n_vocab;
    r->pool = model_kv_pool(r->m, 16, 8, NULL, err, sizeof err);
    CHECKF(r->pool != NULL, "kv pool: %s", err);
    r->kv = kv_seq_create(r->pool, 128);
    r->logits = malloc(sizeof(float) * (size_t)V * (N_GEN + 1));
    if (!r->pool || !r->kv || !r->logits) exit(1);
    r->toks[0] = 1; /* BOS */
    for (int i = 0; i < N_GEN; i++) {
        int rc = model_feed(r->m, r->pool, r->kv, r->toks, i, i + 1, r->logits + (size_t)i * V, err, sizeof err);
        CHECKF(rc == 0, "model_feed at %d: %s", i, err);
        if (rc) exit(1);
        r->toks[i + 1] = argmax(r->logits + (size_t)i * V, V);
    }
    fprintf(stderr, "%-8s %s: greedy ids", level ? level : "best", backend_cpu_simd());
    for (int i = 0; i < 8; i++) fprintf(stderr, " %d", r->toks[i + 1]);
    fprintf(stderr, " ...\n");
}

static void done(run *r) {
    free(r->logits);
    kv_seq_destroy(r->pool, r->kv);
    kv_pool_destroy(r->pool);
    model_free(r->m);
    backend_destroy(r->be);
}

int main(void) {
    char path[1024];
    tu_model(path, sizeof path, "stories260K.gguf"); /* SKIPs (77) without it */

    run best, gen;
    decode(&best, path, NULL);
    decode(&gen, path, "generic");
    const int V = best.m->hp.n_vocab;
    CHECKF(!memcmp(best.toks + 1, want, sizeof want), "the best level's greedy ids differ from the reference's");
    CHECKF(!memcmp(gen.toks + 1, want, sizeof want), "the portable kernels' greedy ids differ from the reference's");
    for (int i = 0; i < N_GEN; i++)
        if (best.toks[i + 1] != want[i] || gen.toks[i + 1] != want[i]) {
            fprintf(stderr, "first difference at token %d: best %d, generic %d, reference %d\n", i, best.toks[i + 1],
                    gen.toks[i + 1], want[i]);
            break;
        }

    /* the two levels' logits, step by step: float sums in another order */
    double worst = 0;
    for (size_t k = 0; k < (size_t)V * N_GEN; k++) {
        double d = fabs((double)best.logits[k] - gen.logits[k]) / (1.0 + fabs((double)gen.logits[k]));
        worst = d > worst ? d : worst;
    }
    CHECKF(worst < 1e-3, "logits of the best level and the portable kernels differ by %g (relative)", worst);

    /* a prefill of the whole sequence in one call: its last row equals the
     * step-by-step decode's last logits (rows never depend on their batch) */
    char err[256] = "";
    kv_seq *kv2 = kv_seq_create(best.pool, 128);
    float *last = malloc(sizeof(float) * (size_t)V);
    CHECK(kv2 && last);
    kv_seq_destroy(best.pool, best.kv);
    best.kv = kv2;
    CHECKF(model_feed(best.m, best.pool, kv2, best.toks, 0, N_GEN, last, err, sizeof err) == 0, "prefill: %s", err);
    double pw = 0;
    for (int k = 0; k < V; k++) {
        double d = fabs((double)last[k] - best.logits[(size_t)(N_GEN - 1) * V + k]);
        pw = d > pw ? d : pw;
    }
    CHECKF(pw < 1e-4, "prefill's last row differs from the decode's by %g", pw);
    CHECK(argmax(last, V) == want[N_GEN - 1]);
    fprintf(stderr, "levels agree within %.2g (relative), prefill within %.2g of decode\n", worst, pw);
    free(last);
    done(&best);
    done(&gen);
    TEST_DONE();
}
