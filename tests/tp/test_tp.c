/* test_tp.c — tensor parallelism on CPU: a model split over N separate CPU
 * backends (shards computed one after another, partial sums added by the local
 * all-reduce) must give the unsharded model's logits to 1e-5 for N = 2 and 4,
 * through a batched prefill, a masked (tree) verify, a rollback and re-forward,
 * and a last-row-only decode; N = 1 through model_load_tp must be bit-identical
 * to model_load; shapes that cannot be split must fail with the numbers. */
#include "cli/mkmodel.h"
#include "engine/model/model.h"
#include "kernels/comm.h"
#include "kernels/cpu/matmul.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXN 4
#define N_PRE 7
#define N_VER 3
#define ROWS (2 * N_PRE + 2 * N_VER + 2 * N_VER + 2) /* logits rows the scenario produces */

/* The same steps on any model; out receives ROWS rows of n_vocab logits. */
static int scenario(model *m, float *out, size_t *pool_bytes) {
    char err[512];
    int V = m->hp.n_vocab;
    kv_pool *pool = model_kv_pool(m, 4, 32, NULL, err, sizeof err); /* small blocks: sequences straddle them */
    CHECKF(pool != NULL, "pool: %s", err);
    if (!pool) return -1;
    *pool_bytes = kv_pool_bytes(pool);
    kv_seq *kv[2] = {kv_seq_create(pool, 64), kv_seq_create(pool, 64)};
    int32_t pre[2][N_PRE], ver[2][N_VER], pos[N_VER], again[2][N_VER], dec[2];
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < N_PRE; i++) pre[s][i] = (int32_t)((i * 37 + 11 + s * 101) % V);
        for (int i = 0; i < N_VER; i++) ver[s][i] = (int32_t)((i * 53 + 5 + s * 17) % V);
        for (int i = 0; i < N_VER; i++) again[s][i] = (int32_t)((i * 29 + 3 + s * 7) % V);
        dec[s] = (int32_t)((61 + s * 19) % V);
    }
    /* seq 0 verifies a tree (node 0 with children 1 and 2), seq 1 a causal chain */
    static const uint8_t tree[N_VER * N_VER] = {1, 0, 0, 1, 1, 0, 1, 0, 1};
    for (int i = 0; i < N_VER; i++) pos[i] = N_PRE + (i ? 1 : 0);
    int rc = 0;
    float *o = out;
    model_seq sq[2];
    for (int s = 0; s < 2; s++) sq[s] = (model_seq){kv[s], N_PRE, pre[s], NULL, NULL, true};
    rc |= model_forward(m, pool, sq, 2, o, err, sizeof err);
    o += (size_t)2 * N_PRE * V;
    sq[0] = (model_seq){kv[0], N_VER, ver[0], pos, tree, true};
    sq[1] = (model_seq){kv[1], N_VER, ver[1], NULL, NULL, true};
    rc |= model_forward(m, pool, sq, 2, o, err, sizeof err);
    o += (size_t)2 * N_VER * V;
    /* rollback: seq 0 keeps node 0, seq 1 drops all three */
    kv_seq_truncate(pool, kv[0], N_PRE + 1);
    kv_seq_truncate(pool, kv[1], N_PRE);
    for (int s = 0; s < 2; s++) sq[s] = (model_seq){kv[s], N_VER, again[s], NULL, NULL, true};
    rc |= model_forward(m, pool, sq, 2, o, err, sizeof err);
    o += (size_t)2 * N_VER * V;
    for (int s = 0; s < 2; s++) sq[s] = (model_seq){kv[s], 1, &dec[s], NULL, NULL, false};
    rc |= model_forward(m, pool, sq, 2, o, err, sizeof err);
    CHECKF(rc == 0, "forward: %s", err);
    for (int s = 0; s < 2; s++) kv_seq_destroy(pool, kv[s]);
    CHECK(pool->n_free == pool->n_blocks);
    kv_pool_destroy(pool);
    return rc;
}

typedef struct {
    const char *label;
    const char *arch;   /* NULL: llama */
    int type;
    int window;
} tp_case;

static void run_case(const tp_case *tc, const char *dir) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, tc->label);
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.arch = tc->arch;
    o.type = tc->type;
    o.sliding_window = tc->window;
    o.dim = 256, o.n_layers = 3, o.n_heads = 8, o.n_kv_heads = 4, o.ff = 512, o.vocab = 300, o.ctx = 64;
    o.seed = 7;
    if (mkmodel_random(path, &o, NULL, err, sizeof err) != 0) {
        CHECKF(0, "%s: mkmodel: %s", tc->label, err);
        return;
    }
    backend *be_ref = backend_cpu_create(1);
    model *ref = model_load(path, be_ref, NULL, NULL, err, sizeof err);
    CHECKF(ref != NULL, "%s: load: %s", tc->label, err);
    if (!ref) {
        backend_destroy(be_ref);
        return;
    }
    int V = ref->hp.n_vocab;
    size_t nl = (size_t)ROWS * V;
    float *lref = malloc(nl * sizeof(float)), *ltp = malloc(nl * sizeof(float));
    size_t ref_bytes = 0, tp_bytes = 0;
    scenario(ref, lref, &ref_bytes);
    float mx = 0;
    for (size_t i = 0; i < nl; i++) mx = fmaxf(mx, fabsf(lref[i]));

    for (int N = 1; N <= MAXN; N *= 2) {
        backend *bes[MAXN];
        for (int r = 0; r < N; r++) bes[r] = backend_cpu_create(1);
        comm *c = N > 1 ? comm_local_create(bes, N) : NULL;
        CHECK(N == 1 || c != NULL);
        model *m = model_load_tp(path, bes, N, c, NULL, NULL, err, sizeof err);
        CHECKF(m != NULL, "%s N=%d: load: %s", tc->label, N, err);
        if (m) {
            memset(ltp, 0, nl * sizeof(float));
            scenario(m, ltp, &tp_bytes);
            CHECKF(tp_bytes == ref_bytes, "%s N=%d: KV pool %zu bytes, unsharded %zu", tc->label, N, tp_bytes,
                   ref_bytes);
            float md = 0;
            for (size_t i = 0; i < nl; i++) {
                float d = fabsf(ltp[i] - lref[i]);
                if (!(d <= md)) md = d != d ? INFINITY : d;
            }
            float tol = 1e-5f * fmaxf(1.0f, mx);
            if (N == 1) {
                CHECKF(!memcmp(ltp, lref, nl * sizeof(float)), "%s N=1: model_load_tp differs from model_load "
                       "(max |diff| %g)", tc->label, md);
            } else if (!mm_q8_path(tc->type)) {
                CHECKF(md <= tol, "%s N=%d: max |diff| %g > %g", tc->label, N, md, tol);
            } else {
                /* integer-dot weights round their activations per 32 values: the
                 * shards' partial sums add in another order (~1e-7), which can move
                 * an activation by a whole rounding step, and that difference then
                 * follows the sequence. Such steps stay near 1% of the logits' scale;
                 * a wrong shard (a lost or doubled partial sum) moves them by ~100%. */
                CHECKF(md <= 2e-2f * fmaxf(1.0f, mx), "%s N=%d: max |diff| %g > %g (activation rounding steps)",
                       tc->label, N, md, 2e-2f * fmaxf(1.0f, mx));
            }
            printf("%-14s N=%d  max|diff| %.3e  (max|ref| %.3f, tolerance %.3e)%s\n", tc->label, N, md, mx, tol,
                   N == 1 ? " bit-exact check" : "");
        }
        model_free(m);
        comm_destroy(c);
        for (int r = 0; r < N; r++) backend_destroy(bes[r]);
    }
    free(lref);
    free(ltp);
    model_free(ref);
    backend_destroy(be_ref);
    unlink(path);
}

/* Shapes that cannot be split give clear errors naming the numbers. */
static void check_errors(const char *dir) {
    char path[512], err[512];
    backend *bes[3] = {backend_cpu_create(1), backend_cpu_create(1), backend_cpu_create(1)};
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.dim = 256, o.n_layers = 1, o.n_heads = 8, o.n_kv_heads = 4, o.ff = 96, o.vocab = 300, o.ctx = 64;
    o.type = GGML_TYPE_Q8_0;
    snprintf(path, sizeof path, "%s/err.gguf", dir);
    if (mkmodel_random(path, &o, NULL, err, sizeof err) != 0) {
        CHECKF(0, "mkmodel: %s", err);
        return;
    }
    comm *c3 = comm_local_create(bes, 3), *c2 = comm_local_create(bes, 2);
    /* 8 heads over 3 shards */
    model *m = model_load_tp(path, bes, 3, c3, NULL, NULL, err, sizeof err);
    CHECK(m == NULL);
    printf("N=3 on 8 heads: %s\n", err);
    CHECKF(strstr(err, "8 query heads") && strstr(err, "4 kv heads") && strstr(err, "3 shards"), "error: %s", err);
    model_free(m);
    /* ff 96 over 2 shards: w_down slices of 48 columns are not whole Q8_0 blocks of 32 */
    m = model_load_tp(path, bes, 2, c2, NULL, NULL, err, sizeof err);
    CHECK(m == NULL);
    printf("F/N not whole blocks: %s\n", err);
    CHECKF(strstr(err, "ffn_down") && strstr(err, "q8_0") && strstr(err, "slices of 48") && strstr(err, "blocks of 32"), "error: %s",
           err);
    model_free(m);
    /* a communicator of the wrong size */
    m = model_load_tp(path, bes, 2, c3, NULL, NULL, err, sizeof err);
    CHECKF(m == NULL && strstr(err, "communicator of 2 ranks"), "error: %s", err);
    model_free(m);
    /* the same file unsharded loads fine */
    m = model_load_tp(path, bes, 1, NULL, NULL, NULL, err, sizeof err);
    CHECKF(m != NULL, "N=1: %s", err);
    model_free(m);
    comm_destroy(c3);
    comm_destroy(c2);
    for (int r = 0; r < 3; r++) backend_destroy(bes[r]);
    unlink(path);
}

/* The local all-reduce: sums in rank order, identical on every rank. */
static void check_comm(void) {
    backend *bes[4];
    for (int r = 0; r < 4; r++) bes[r] = backend_cpu_create(1);
    comm *c = comm_local_create(bes, 4);
    CHECK(c != NULL && c->n_ranks == 4);
    float b[4][5], *bufs[4];
    for (int r = 0; r < 4; r++) {
        bufs[r] = b[r];
        for (int i = 0; i < 5; i++) b[r][i] = (float)(r + 1) * (i + 1) + (r == 3 ? 1e8f : 0);
    }
    float want[5];
    for (int i = 0; i < 5; i++) want[i] = ((b[0][i] + b[1][i]) + b[2][i]) + b[3][i];
    comm_allreduce_sum(c, bufs, 5);
    for (int r = 0; r < 4; r++) CHECK(!memcmp(b[r], want, sizeof want));
    comm_destroy(c);
    CHECK(comm_local_create(bes, 0) == NULL);
    for (int r = 0; r < 4; r++) backend_destroy(bes[r]);
}

int main(void) {
    char dir[] = "/tmp/specd-tp-XXXXXX";
    if (!mkdtemp(dir)) SKIP("no temp dir");
    check_comm();
    static const tp_case cases[] = {
        {"llama-f32", NULL, GGML_TYPE_F32, 0},
        {"llama-f16", NULL, GGML_TYPE_F16, 0},
        {"llama-q8_0", NULL, GGML_TYPE_Q8_0, 0},
        {"qwen2-f32", "qwen2", GGML_TYPE_F32, 0},
        {"qwen2-q8_0", "qwen2", GGML_TYPE_Q8_0, 0},
        {"mistral-f32", "mistral", GGML_TYPE_F32, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], dir);
    check_errors(dir);
    rmdir(dir);
    TEST_DONE();
}
