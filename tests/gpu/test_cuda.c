/* test_cuda.c — the CUDA backend against the CPU backend (the reference):
 * every op on fresh random inputs with the outputs poisoned (NaN) before each
 * run, full-model logits for mkmodel models of every weight type and
 * architecture, greedy speculative == plain greedy on the GPU, seeded
 * sampling reproducible on the GPU, and CUDA-graph replay == eager execution.
 * Exits 77 (skipped) when no GPU is present. */
#include "cli/mkmodel.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/spec/spec_util.h"
#include "tests/spec/test_drafter.h"

#include <math.h>
#include <stdint.h>

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
}

static backend *cpu, *gpu;
/* TEST_CUDA_DRY=1: the CPU backend stands in for the GPU (a second CPU backend
 * of another thread count), so the test's own logic can be checked on a host
 * without a GPU before device time is spent; the CUDA-only parts are skipped. */
static bool dry;
static double worst[8]; /* per section, the largest relative error seen */
enum { S_GEMV, S_BLAS, S_ELEM, S_ATTN, S_MODEL32, S_MODEL16 };

/* ||a - b|| / ||b||; NaN anywhere (an unwritten poisoned element) is infinite. */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void *dev_copy(const void *host, size_t bytes) {
    void *d = gpu->i->alloc(gpu, bytes);
    if (!d) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    gpu->i->upload(gpu, d, host, bytes);
    return d;
}

static void poison(void *dev, size_t floats) {
    float *nan = malloc(floats * sizeof(float));
    for (size_t i = 0; i < floats; i++) nan[i] = NAN;
    gpu->i->upload(gpu, dev, nan, floats * sizeof(float));
    free(nan);
}

static float *dev_fetch(const void *dev, size_t floats) {
    float *h = malloc(floats * sizeof(float));
    gpu->i->download(gpu, h, dev, floats * sizeof(float));
    return h;
}

static void note(int sec, double e) {
    if (e > worst[sec] || isnan(e)) worst[sec] = isnan(e) ? INFINITY : e;
}

/* ---- matmul ------------------------------------------------------------- */

static const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};

static void test_matmul(void) {
    static const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 128};
    static const int KN[][2] = {{256, 384}, {1024, 2048}, {4096, 1000}, {96, 40}};
    int runs = 0;
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t s = 0; s < 4; s++) {
            int t = types[ti], K = KN[s][0], N = KN[s][1];
            size_t rb = ggml_row_size(t, K);
            float *wf = malloc(sizeof(float) * (size_t)K * N);
            uint8_t *w = malloc(rb * N);
            fill(wf, (size_t)K * N, 0.1f);
            for (int n = 0; n < N; n++) CHECK(mkmodel_row_from_f32(w + rb * n, t, wf + (size_t)n * K, K));
            int wt = t;
            const void *dw = gpu->i->weight(gpu, w, &wt, N, K);
            CHECK(dw != NULL && (wt == t || dry)); /* the CPU may repack a type as another */
            for (size_t mi = 0; mi < sizeof(Ms) / sizeof(Ms[0]); mi++) {
                int M = Ms[mi];
                float *x = malloc(sizeof(float) * (size_t)M * K), *ref = malloc(sizeof(float) * (size_t)M * N);
                fill(x, (size_t)M * K, 1.0f);
                cpu->i->matmul(cpu, ref, x, w, t, M, K, N);
                float *dx = dev_copy(x, sizeof(float) * (size_t)M * K);
                float *dy = gpu->i->alloc(gpu, sizeof(float) * (size_t)M * N);
                poison(dy, (size_t)M * N);
                gpu->i->begin(gpu, 0);
                gpu->i->matmul(gpu, dy, dx, dw, wt, M, K, N);
                gpu->i->end(gpu);
                float *y = dev_fetch(dy, (size_t)M * N);
                double e = rel_err(y, ref, (size_t)M * N);
                bool gemv = M <= 8;
                /* gemv: exact weights, fp32 math; cuBLAS: 16-bit activations (and bf16-rounded Q8_0 weights).
                 * The CPU reference rounds Q8_0 activations to 8 bits per 32 (its integer-dot path,
                 * about 4e-3 relative on these random rows); the GPU keeps them in float. */
                double tol = t == GGML_TYPE_Q8_0 ? 1e-2 : gemv || t == GGML_TYPE_F32 ? 1e-5 : t == GGML_TYPE_F16 ? 2e-3 : 1e-2;
                note(gemv ? S_GEMV : S_BLAS, e);
                CHECKF(e <= tol, "matmul %s M=%d K=%d N=%d (%s): relative error %.3g > %.1g", ggml_type_name(t), M,
                       K, N, gemv ? "gemv" : "cuBLAS", e, tol);
                runs++;
                free(x), free(ref), free(y);
                gpu->i->release(gpu, dx);
                gpu->i->release(gpu, dy);
            }
            gpu->i->weight_release(gpu, w, dw);
            free(wf), free(w);
        }
    fprintf(stderr, "matmul: %d shapes x types; worst relative error gemv %.2g, cuBLAS %.2g\n", runs, worst[S_GEMV],
            worst[S_BLAS]);
}

/* ---- element-wise ops and embedding ------------------------------------- */

static void check_elem(const char *what, const float *dev, const float *ref, size_t n, double tol) {
    float *y = dev_fetch(dev, n);
    double e = rel_err(y, ref, n);
    note(S_ELEM, e);
    CHECKF(e <= tol, "%s: relative error %.3g > %.1g", what, e, tol);
    free(y);
}

static void test_elementwise(void) {
    int M = 7, D = 1536, H = 12, E = 128;
    size_t n = (size_t)M * D;
    float *x = malloc(n * 4), *y = malloc(n * 4), *w = malloc(D * 4), *ref = malloc(n * 4);
    fill(x, n, 3.0f), fill(y, n, 3.0f), fill(w, D, 1.0f);
    float *dx = dev_copy(x, n * 4), *dy = dev_copy(y, n * 4), *dout = gpu->i->alloc(gpu, n * 4);
    int wt = GGML_TYPE_F32;
    const float *dw = gpu->i->weight(gpu, w, &wt, 1, D);

    memcpy(ref, x, n * 4);
    cpu->i->rmsnorm(cpu, ref, x, w, M, D, 1e-5f);
    poison(dout, n);
    gpu->i->rmsnorm(gpu, dout, dx, dw, M, D, 1e-5f);
    check_elem("rmsnorm", dout, ref, n, 1e-6);

    memcpy(ref, x, n * 4);
    cpu->i->add(cpu, ref, y, M, D);
    gpu->i->add(gpu, dx, dy, M, D);
    check_elem("add", dx, ref, n, 1e-7);
    gpu->i->upload(gpu, dx, x, n * 4);

    memcpy(ref, x, n * 4);
    cpu->i->silu_mul(cpu, ref, y, M, D);
    gpu->i->silu_mul(gpu, dx, dy, M, D);
    check_elem("silu_mul", dx, ref, n, 1e-6);
    gpu->i->upload(gpu, dx, x, n * 4);

    /* rope: both pairings, positions up to 4000, partial rotation */
    int32_t pos[7] = {0, 1, 17, 255, 1024, 3999, 2};
    float inv[64];
    for (int i = 0; i < 64; i++) inv[i] = powf(10000.0f, -2.0f * i / 128);
    const float *dinv = gpu->i->weight(gpu, inv, &wt, 1, 64);
    for (int neox = 0; neox < 2; neox++)
        for (int n_rot = 64; n_rot <= 128; n_rot += 64) {
            memcpy(ref, x, n * 4);
            cpu->i->rope(cpu, ref, pos, inv, M, H, E, n_rot, neox);
            gpu->i->upload(gpu, dx, x, n * 4);
            gpu->i->begin(gpu, 0);
            gpu->i->rope(gpu, dx, pos, dinv, M, H, E, n_rot, neox);
            gpu->i->end(gpu);
            check_elem(neox ? "rope (neox)" : "rope", dx, ref, n, 1e-6);
        }

    /* get_rows for every table type */
    int V = 300;
    int32_t ids[7] = {0, 299, 5, 5, 150, 1, 42};
    float *tf = malloc(sizeof(float) * (size_t)V * D);
    fill(tf, (size_t)V * D, 1.0f);
    for (size_t ti = 0; ti < 4; ti++) {
        int t = types[ti];
        size_t rb = ggml_row_size(t, D);
        uint8_t *tab = malloc(rb * V);
        for (int r = 0; r < V; r++) mkmodel_row_from_f32(tab + rb * r, t, tf + (size_t)r * D, D);
        int tt = t;
        const void *dt = gpu->i->weight(gpu, tab, &tt, V, D);
        cpu->i->get_rows(cpu, ref, tab, t, ids, M, D);
        poison(dout, n);
        gpu->i->begin(gpu, 0);
        gpu->i->get_rows(gpu, dout, dt, tt, ids, M, D);
        gpu->i->end(gpu);
        char what[64];
        snprintf(what, sizeof(what), "get_rows %s", ggml_type_name(t));
        check_elem(what, dout, ref, n, 0);
        gpu->i->weight_release(gpu, tab, dt);
        free(tab);
    }
    fprintf(stderr, "element-wise ops, rope, get_rows: worst relative error %.2g\n", worst[S_ELEM]);
    gpu->i->weight_release(gpu, w, dw);
    gpu->i->weight_release(gpu, inv, dinv);
    gpu->i->release(gpu, dx), gpu->i->release(gpu, dy), gpu->i->release(gpu, dout);
    free(x), free(y), free(w), free(ref), free(tf);
}

/* ---- paged attention ---------------------------------------------------- */

/* n_seqs sequences with shuffled block tables, their histories written by
 * kv_write, then one batched attention call; causal, tree masks and windows. */
static void attention_case(kv_type type, int n_seqs, const int *past, const int *nnew, bool tree, int window, int H,
                           int Hkv, int E) {
    int B = 16, n_blocks = 64, kvd = Hkv * E;
    char err[256];
    kv_pool *pc = kv_pool_create_typed(&cpu, 1, type, 1, kvd, E, B, n_blocks, NULL, err, sizeof(err));
    kv_pool *pg = kv_pool_create_typed(&gpu, 1, type, 1, kvd, E, B, n_blocks, NULL, err, sizeof(err));
    CHECK(pc && pg);
    int32_t perm[64];
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)((frand() + 1) * 0.5f * (i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    attn_seq seqs[8], hist[8];
    uint8_t masks[8][256];
    int M = 0, used = 0, HM = 0;
    for (int s = 0; s < n_seqs; s++) {
        int total = past[s] + nnew[s], nb = (total + B - 1) / B;
        int32_t *blocks = perm + used;
        used += nb;
        if (tree) { /* a random tree: each new position's parent is an earlier one (or the root) */
            int parent[16];
            for (int i = 0; i < nnew[s]; i++) {
                parent[i] = i == 0 ? -1 : (int)((frand() + 1) * 0.5f * i) % i;
                for (int j = 0; j < nnew[s]; j++) masks[s][i * nnew[s] + j] = j == i;
                for (int a = parent[i]; a >= 0; a = parent[a]) masks[s][i * nnew[s] + a] = 1;
            }
        }
        seqs[s] = (attn_seq){M, nnew[s], past[s], blocks, tree ? masks[s] : NULL, window};
        hist[s] = (attn_seq){HM, total, 0, blocks, NULL, 0};
        M += nnew[s];
        HM += total;
    }
    float *k = malloc(sizeof(float) * (size_t)HM * kvd), *v = malloc(sizeof(float) * (size_t)HM * kvd);
    float *q = malloc(sizeof(float) * (size_t)M * H * E), *ref = malloc(sizeof(float) * (size_t)M * H * E);
    fill(k, (size_t)HM * kvd, 1.0f), fill(v, (size_t)HM * kvd, 1.0f), fill(q, (size_t)M * H * E, 1.0f);
    kv_layer_view lc = kv_pool_layer(pc, 0), lg = kv_pool_layer(pg, 0);
    cpu->i->kv_write(cpu, &lc, k, v, hist, n_seqs, kvd);
    cpu->i->attention(cpu, ref, q, &lc, seqs, n_seqs, H, Hkv, E);
    float *dk = dev_copy(k, sizeof(float) * (size_t)HM * kvd), *dv = dev_copy(v, sizeof(float) * (size_t)HM * kvd);
    float *dq = dev_copy(q, sizeof(float) * (size_t)M * H * E), *dout = gpu->i->alloc(gpu, sizeof(float) * (size_t)M * H * E);
    poison(dout, (size_t)M * H * E);
    gpu->i->begin(gpu, 0);
    gpu->i->kv_write(gpu, &lg, dk, dv, hist, n_seqs, kvd);
    gpu->i->end(gpu);
    { /* the caches themselves: the same elements (an F16 cache rounds to nearest even on both) */
        size_t bytes = kv_pool_bytes(pc) / 2;
        uint8_t *hk = malloc(bytes), *hv = malloc(bytes);
        gpu->i->download(gpu, hk, pg->k, bytes);
        gpu->i->download(gpu, hv, pg->v, bytes);
        CHECKF(!memcmp(hk, pc->k, bytes) && !memcmp(hv, pc->v, bytes), "kv_write (%s cache) differs from the CPU's",
               kv_type_name(type));
        free(hk), free(hv);
    }
    gpu->i->begin(gpu, 0);
    gpu->i->attention(gpu, dout, dq, &lg, seqs, n_seqs, H, Hkv, E);
    gpu->i->end(gpu);
    float *out = dev_fetch(dout, (size_t)M * H * E);
    double e = rel_err(out, ref, (size_t)M * H * E);
    note(S_ATTN, e);
    CHECKF(e <= 1e-5,
           "attention (%s cache) %d seqs (first: past %d, new %d) %s window %d H %d Hkv %d E %d: relative error %.3g",
           kv_type_name(type), n_seqs, past[0], nnew[0], tree ? "tree" : "causal", window, H, Hkv, E, e);
    free(k), free(v), free(q), free(ref), free(out);
    gpu->i->release(gpu, dk), gpu->i->release(gpu, dv), gpu->i->release(gpu, dq), gpu->i->release(gpu, dout);
    kv_pool_destroy(pc);
    kv_pool_destroy(pg);
}

static void test_attention(void) {
    int p1[] = {0}, n1[] = {9}, p2[] = {100, 7, 300}, n2[] = {1, 5, 2}, p3[] = {37, 250}, n3[] = {5, 8};
    int n = 0;
    for (int tree = 0; tree < 2; tree++)
        for (int w = 0; w <= 40; w += 40) {
            for (int t = KV_F32; t <= KV_F16; t++) {
                attention_case((kv_type)t, 1, p1, n1, tree, w, 8, 2, 64), n++;
                attention_case((kv_type)t, 3, p2, n2, tree, w, 8, 8, 128), n++;
                attention_case((kv_type)t, 2, p3, n3, tree, w, 32, 8, 128), n++;
                attention_case((kv_type)t, 2, p3, n3, tree, w, 4, 1, 256), n++;
            }
        }
    fprintf(stderr, "kv_write + attention: %d cases (causal/tree masks, windows, GQA, head dims 64..256); worst "
                    "relative error %.2g\n", n, worst[S_ATTN]);
}

/* ---- whole models ------------------------------------------------------- */

typedef struct {
    model *m;
    kv_pool *pool;
    kv_seq *a, *b;
} side;

static side side_load(const char *path, backend *be) {
    side s = {0};
    char err[512];
    model_params mp = {.max_batch = 64, .max_ctx = 256};
    s.m = model_load(path, be, &mp, NULL, err, sizeof(err));
    if (!s.m) {
        fprintf(stderr, "model_load %s on %s: %s\n", path, be->i->name, err);
        exit(1);
    }
    s.pool = model_kv_pool(s.m, 16, 40, NULL, err, sizeof(err));
    s.a = kv_seq_create(s.pool, 256);
    s.b = kv_seq_create(s.pool, 256);
    return s;
}

static void side_free(side *s) {
    kv_seq_destroy(s->pool, s->a);
    kv_seq_destroy(s->pool, s->b);
    kv_pool_destroy(s->pool);
    model_free(s->m);
}

/* Runs the same script of forward calls on both backends and compares logits. */
static double model_case(const char *label, const char *path, double tol) {
    side c = side_load(path, cpu), g = side_load(path, gpu);
    int V = c.m->hp.n_vocab;
    float *lc = malloc(sizeof(float) * (size_t)V * 64), *lg = malloc(sizeof(float) * (size_t)V * 64);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    uint8_t tree[25] = {1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    struct { int n_seqs, na, nb; bool all; const uint8_t *mask; } script[] = {
        {1, 20, 0, true, NULL},  /* prefill (cuBLAS) */
        {1, 1, 0, false, NULL},  /* decode (gemv) */
        {1, 1, 0, false, NULL},
        {1, 5, 0, true, tree},   /* tree verify */
        {2, 3, 12, true, NULL},  /* two sequences, ragged */
        {2, 1, 1, false, NULL},  /* batched decode */
        {2, 4, 9, true, NULL},   /* 13 rows: cuBLAS */
    };
    double worst_e = 0;
    char err[512];
    for (size_t st = 0; st < sizeof(script) / sizeof(script[0]); st++) {
        side *sides[2] = {&c, &g};
        float *outs[2] = {lc, lg};
        int rows = 0;
        for (int k = 0; k < 2; k++) {
            side *s = sides[k];
            model_seq ms[2] = {
                {.kv = s->a, .n = script[st].na, .tokens = toks + st, .mask = script[st].mask, .all_logits = script[st].all},
                {.kv = s->b, .n = script[st].nb, .tokens = toks + 30 + st, .all_logits = script[st].all},
            };
            for (size_t i = 0; i < (size_t)V * 64; i++) outs[k][i] = NAN;
            int rc = model_forward(s->m, s->pool, ms, script[st].n_seqs, outs[k], err, sizeof(err));
            CHECKF(rc == 0, "%s step %zu on %s: %s", label, st, s->m->be->i->name, err);
            rows = script[st].all ? script[st].na + (script[st].n_seqs > 1 ? script[st].nb : 0) : script[st].n_seqs;
        }
        double e = rel_err(lg, lc, (size_t)rows * V);
        if (e > worst_e) worst_e = e;
        if (st == 3) { /* roll the tree back on both, as rejection would */
            kv_seq_truncate(c.pool, c.a, c.a->len - 5);
            kv_seq_truncate(g.pool, g.a, g.a->len - 5);
        }
    }
    CHECKF(worst_e <= tol, "%s: GPU logits differ from the CPU's: relative error %.3g > %.1g", label, worst_e, tol);
    fprintf(stderr, "  %-34s worst relative logit error %.2g (tolerance %.0e)\n", label, worst_e, tol);
    free(lc), free(lg);
    side_free(&c), side_free(&g);
    return worst_e;
}

static void test_models(void) {
    static const struct { const char *name, *arch; int type; bool tied; double tol; } cases[] = {
        {"llama F32 (GQA)", "llama", GGML_TYPE_F32, false, 1e-4},
        {"llama F16", "llama", GGML_TYPE_F16, false, 2e-2},
        {"llama BF16 (tied head)", "llama", GGML_TYPE_BF16, true, 2e-2},
        /* the CPU's Q8_0 / Q8_K activation rounding alone moves these random models' logits by 2-3e-2
         * (measured on an H200: Q8_0 0.024, Q4_K 0.021, while F16 and BF16 stay under 7e-3) */
        {"llama Q8_0", "llama", GGML_TYPE_Q8_0, false, 6e-2},
        {"llama Q4_K (F16 on the GPU)", "llama", GGML_TYPE_Q4_K, false, 6e-2},
        {"qwen2 F32 (biases, NeoX RoPE)", "qwen2", GGML_TYPE_F32, false, 1e-4},
        {"qwen3 F32 (per-head q/k RMSNorm)", "qwen3", GGML_TYPE_F32, false, 1e-4},
        {"mistral F32 (window 8)", "mistral", GGML_TYPE_F32, false, 1e-4},
    };
    fprintf(stderr, "whole-model logits, GPU vs CPU (prefill, decode, tree verify + rollback, ragged batches):\n");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[512];
        su_tmp_path(path, sizeof(path), "m.gguf");
        mkmodel_opts o;
        mkmodel_opts_init(&o);
        o.n_layers = 3, o.dim = 256, o.n_heads = 8, o.n_kv_heads = 2, o.ff = 512, o.vocab = 300, o.ctx = 256;
        o.type = cases[i].type, o.tied = cases[i].tied, o.arch = cases[i].arch, o.seed = 100 + i;
        char err[512];
        if (mkmodel_random(path, &o, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "mkmodel: %s\n", err);
            exit(1);
        }
        double e = model_case(cases[i].name, path, cases[i].tol);
        note(cases[i].type == GGML_TYPE_F32 ? S_MODEL32 : S_MODEL16, e);
        unlink(path);
    }
}

/* ---- speculation on the GPU --------------------------------------------- */

static void test_spec(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    spec_pair *sp = su_load(tpath, dpath, gpu, 256);
    spec_pair *spc = su_load(tpath, dpath, cpu, 256);
    su_prompt prompts[20];
    int np = su_prompts(sp->tok, prompts, 20);
    int32_t ref[40], out[40], cref[40];
    int runs = 0, mism = 0, cpu_same = 0;
    spec_stats tot = {0};
    for (int i = 0; i < np; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, 40, ref);
        int nc = su_plain_greedy(spc, prompts[i].ids, prompts[i].n, 40, cref);
        cpu_same += nc == nr && !memcmp(ref, cref, sizeof(int32_t) * (size_t)nr);
        for (int gamma = 1; gamma <= 8; gamma *= 2)
            for (int ad = 0; ad < 2; ad++) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, ad);
                spec_seq *s = NULL;
                int n = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, out, NULL, NULL, &s);
                bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
                mism += !same;
                CHECKF(same, "GPU: prompt %d gamma %d %s: speculative output differs from plain greedy", i, gamma,
                       ad ? "adaptive" : "fixed");
                if (s) spec_stats_add(&tot, &s->st);
                spec_seq_free(s);
                runs++;
            }
    }
    CHECK(tot.verify_steps > 0 && tot.accepted > 0);
    fprintf(stderr, "greedy speculative == plain on the GPU: %d runs, %d differ; alpha %.3f; GPU plain greedy equals "
                    "the CPU's on %d of %d prompts\n", runs, mism, spec_stats_alpha(&tot), cpu_same, np);

    /* a draft that fails mid-run on the GPU (from its 3rd propose call, as an
     * allocation failure or a device error would): the output stays plain
     * greedy's, with no gap or repeated token, and the failures are counted */
    int fsame = 0;
    for (int i = 0; i < 4 && i < np; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, 40, ref);
        drafter *failing = test_drafter_failing(sp->drafters[SPEC_DRAFTER_MODEL], 3);
        CHECK(failing != NULL);
        if (!failing) break;
        drafter *real = spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL, failing);
        spec_seq_params prm = su_params(0.0f, 1, 4, true);
        spec_seq *s = NULL;
        int n = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, out, NULL, NULL, &s);
        bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
        CHECKF(same && s && s->st.draft_failures > 0, "GPU: prompt %d with a failing draft: %s", i,
               same ? "no failure counted" : "output differs from plain greedy");
        fsame += same;
        spec_seq_free(s);
        drafter_destroy(spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL, real));
    }
    fprintf(stderr, "failing draft on the GPU: %d of 4 runs equal plain greedy\n", fsame);

    /* seeded sampling: the same seed gives the same tokens on reruns */
    int repro = 0;
    for (int i = 0; i < 5 && i < np; i++) {
        int32_t a[40], b[40];
        spec_seq_params prm = su_params(0.8f, 777 + i, 4, false);
        int na = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, a, NULL, NULL, NULL);
        int nb = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, b, NULL, NULL, NULL);
        bool same = na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na);
        CHECKF(same, "GPU: seeded sampled run %d is not reproducible", i);
        repro += same;
    }
    fprintf(stderr, "seeded sampling (T=0.8, gamma 4) on the GPU: %d of 5 reruns identical\n", repro);

    /* graph replay == eager: the same greedy and sampled runs with graphs off */
    cuda_info before = {0}, after = {0};
    if (!dry) backend_cuda_info(gpu, &before);
    int gsame = 0, gruns = 0;
    for (int i = 0; i < 5 && i < np; i++)
        for (int temp = 0; temp < 2; temp++) {
            int32_t a[40], b[40];
            spec_seq_params prm = su_params(temp ? 0.8f : 0.0f, 99, 4, false);
            if (!dry) backend_cuda_graphs(gpu, 1);
            int na = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, a, NULL, NULL, NULL);
            if (!dry) backend_cuda_graphs(gpu, 0);
            int nb = su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, b, NULL, NULL, NULL);
            if (!dry) backend_cuda_graphs(gpu, 1);
            bool same = na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na);
            CHECKF(same, "prompt %d %s: graph replay gives other tokens than eager execution", i,
                   temp ? "sampled" : "greedy");
            gsame += same, gruns++;
        }
    if (!dry) backend_cuda_info(gpu, &after);
    CHECKF(dry || after.graph_replays > before.graph_replays, "no step was replayed from a graph");
    fprintf(stderr, "CUDA graphs: %d of %d runs identical to eager; %lld replays, %d graphs held\n", gsame, gruns,
            after.graph_replays, after.graphs);

    /* logits, bit for bit: a decode loop with graphs vs without */
    int V = sp->n_vocab;
    float *la = malloc(sizeof(float) * V * 20), *lb = malloc(sizeof(float) * V * 20);
    for (int pass = 0; pass < 2; pass++) {
        if (!dry) backend_cuda_graphs(gpu, pass == 0);
        kv_seq *kv = kv_seq_create(sp->tpool, 256);
        float *dst = pass ? lb : la;
        char err[256];
        int32_t t = 1;
        for (int step = 0; step < 20; step++) {
            model_seq ms = {.kv = kv, .n = 1, .tokens = &t};
            CHECK(model_forward(sp->target, sp->tpool, &ms, 1, dst + (size_t)step * V, err, sizeof(err)) == 0);
            t = sampler_argmax(dst + (size_t)step * V, V);
        }
        kv_seq_destroy(sp->tpool, kv);
    }
    if (!dry) backend_cuda_graphs(gpu, 1);
    CHECKF(!memcmp(la, lb, sizeof(float) * V * 20), "graph replay logits are not bit-identical to eager ones");
    free(la), free(lb);
    spec_pair_free(sp);
    spec_pair_free(spc);
}

/* Tree KV compaction (kv_seq_move, issue 17) on a GPU pool equals the CPU
 * pool's, bit for bit (it is a copy): random accepted paths, K and V. */
static void test_kv_move(void) {
    char err[256];
    enum { L = 2, E = 8, HKV = 2, D = HKV * E, B = 16, NB = 8, LEN = 60 };
    kv_pool *pc = kv_pool_create_on(cpu, L, D, E, B, NB, NULL, err, sizeof(err));
    kv_pool *pg = kv_pool_create_on(gpu, L, D, E, B, NB, NULL, err, sizeof(err));
    CHECK(pc != NULL && pg != NULL);
    if (!pc || !pg) return;
    kv_seq *sc = kv_seq_create(pc, 64), *sg = kv_seq_create(pg, 64);
    CHECK(kv_seq_reserve(pc, sc, LEN) == 0 && kv_seq_reserve(pg, sg, LEN) == 0);
    sc->len = sg->len = LEN;
    size_t n = pc->block_stride * (size_t)NB, bytes = n * sizeof(float);
    float *hk = malloc(bytes), *hv = malloc(bytes), *gk = malloc(bytes), *gv = malloc(bytes);
    int same = 0, moved = 0;
    for (int rep = 0; rep < 40; rep++) {
        fill(hk, n, 1.0f), fill(hv, n, 1.0f);
        cpu->i->upload(cpu, pc->k, hk, bytes), cpu->i->upload(cpu, pc->v, hv, bytes);
        gpu->i->upload(gpu, pg->k, hk, bytes), gpu->i->upload(gpu, pg->v, hv, bytes);
        int dst[16], src[16], m = 0, k = 0, base = rep % 40;
        for (int node = 0; node < 16; node++)
            if (frand() > 0.0f) {
                if (node != k) dst[m] = base + 1 + k, src[m++] = base + 1 + node;
                k++;
            }
        CHECK(kv_seq_move(pc, sc, dst, src, m) == 0 && kv_seq_move(pg, sg, dst, src, m) == 0);
        cpu->i->download(cpu, hk, pc->k, bytes), cpu->i->download(cpu, hv, pc->v, bytes);
        gpu->i->download(gpu, gk, pg->k, bytes), gpu->i->download(gpu, gv, pg->v, bytes);
        bool eq = !memcmp(hk, gk, bytes) && !memcmp(hv, gv, bytes);
        CHECKF(eq, "kv_seq_move rep %d: the GPU pool differs from the CPU pool", rep);
        same += eq;
        moved += m;
    }
    fprintf(stderr, "kv_seq_move: %d of 40 random paths (%d rows) identical on GPU and CPU pools\n", same, moved);
    free(hk), free(hv), free(gk), free(gv);
    kv_seq_destroy(pc, sc), kv_seq_destroy(pg, sg);
    kv_pool_destroy(pc), kv_pool_destroy(pg);
}

int main(void) {
    char err[512];
    dry = getenv("TEST_CUDA_DRY") && !strcmp(getenv("TEST_CUDA_DRY"), "1");
    if (dry) {
        gpu = backend_cpu_create(1);
        fprintf(stderr, "TEST_CUDA_DRY: a 1-thread CPU backend stands in for the GPU\n");
    } else {
        int n = backend_cuda_devices();
        if (!backend_cuda_built()) SKIP("specd was built without CUDA");
        if (n == 0) SKIP("no CUDA GPU");
        gpu = backend_cuda_create(0, err, sizeof(err));
        if (!gpu) {
            fprintf(stderr, "backend_cuda_create: %s\n", err);
            return 1;
        }
    }
    cpu = backend_cpu_create(4);
    cuda_info ci = {.name = "CPU stand-in"};
    if (!dry) backend_cuda_info(gpu, &ci);
    fprintf(stderr, "GPU: %s, %d SMs, %.1f GiB\n", ci.name, ci.sm_count, ci.mem_gib);
    gpu->i->reserve(gpu, 128, 4096, 1024);
    test_matmul();
    test_elementwise();
    test_attention();
    test_kv_move();
    test_models();
    test_spec();
    su_tmp_cleanup(NULL, 0);
    backend_destroy(gpu);
    backend_destroy(cpu);
    fprintf(stderr, "SUMMARY gemv %.2g | cublas %.2g | elementwise %.2g | attention %.2g | model-f32 %.2g | "
                    "model-16bit/quant %.2g\n", worst[S_GEMV], worst[S_BLAS], worst[S_ELEM], worst[S_ATTN],
            worst[S_MODEL32], worst[S_MODEL16]);
    TEST_DONE();
}
