/* test_mkmodel_unit.c — cli/mkmodel.h checked directly: conversions, random
 * models of every type (shapes, metadata, tokenizer, determinism, validation),
 * widening (zero structure, norm scaling, and logits equal to the source's via a
 * small f32 reference forward pass written here), and re-typing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "cli/mkmodel.h"
#include "tests/testutil.h"

static char g_dir[256];

/* A path in the test's temporary folder; valid until 8 more calls (copy to keep). */
static const char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static gguf_file *open_or_die(const char *path)
{
    char err[512];
    gguf_file *f = gguf_open(path, NULL, err, sizeof err);
    if (!f) { fprintf(stderr, "gguf_open(%s): %s\n", path, err); exit(1); }
    return f;
}

/* Tensor NAME as f32 (any supported type); ne0, ne1 (may be NULL) get its shape. */
static float *load(const gguf_file *f, const char *name, uint64_t *ne0, uint64_t *ne1)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) { fprintf(stderr, "missing tensor %s\n", name); exit(1); }
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *x = malloc(t->ne[0] * rows * sizeof(float));
    uint64_t rb = ggml_row_size(t->type, t->ne[0]);
    for (uint64_t r = 0; r < rows; r++)
        if (!mkmodel_row_to_f32(x + r * t->ne[0], t->type, (const uint8_t *)t->data + r * rb, t->ne[0])) {
            fprintf(stderr, "cannot convert %s\n", name);
            exit(1);
        }
    if (ne0) *ne0 = t->ne[0];
    if (ne1) *ne1 = rows;
    return x;
}

static uint32_t getu(const gguf_file *f, const char *key)
{
    uint32_t v = 0;
    if (!gguf_get_u32(f, key, &v)) fprintf(stderr, "missing key %s\n", key);
    return v;
}

static bool files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* ---- a small f32 reference llama forward (contract semantics) ------------- */

typedef struct {
    const gguf_file *f;
    int D, L, H, KV, hd, n_rot, FF, V;
    float eps, base;
} ref_model;

static void ref_init(ref_model *m, const gguf_file *f)
{
    m->f = f;
    m->D = (int)getu(f, "llama.embedding_length");
    m->L = (int)getu(f, "llama.block_count");
    m->H = (int)getu(f, "llama.attention.head_count");
    m->KV = (int)getu(f, "llama.attention.head_count_kv");
    m->FF = (int)getu(f, "llama.feed_forward_length");
    uint32_t v;
    m->hd = gguf_get_u32(f, "llama.attention.key_length", &v) ? (int)v : m->D / m->H;
    m->n_rot = gguf_get_u32(f, "llama.rope.dimension_count", &v) ? (int)v : m->hd;
    gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &m->eps);
    if (!gguf_get_f32(f, "llama.rope.freq_base", &m->base)) m->base = 10000.0f;
    m->V = (int)gguf_find_tensor(f, "token_embd.weight")->ne[1];
}

static void matvec(float *y, const float *W, const float *x, int K, int N)
{
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)W[(size_t)n * K + k] * x[k];
        y[n] = (float)s;
    }
}

static void rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

static void rope(float *x, int n_heads, int hd, int n_rot, float base, int pos, const float *factors)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < n_rot / 2; i++) {
            double fr = pow(base, -2.0 * i / n_rot) / (factors ? factors[i] : 1.0);
            double a = pos * fr, c = cos(a), s = sin(a);
            float *p = x + h * hd + 2 * i;
            float x0 = p[0], x1 = p[1];
            p[0] = (float)(x0 * c - x1 * s);
            p[1] = (float)(x0 * s + x1 * c);
        }
}

/* logits[T][V] for tokens (one sequence, causal). */
static float *ref_forward(const ref_model *m, const int *tok, int T)
{
    const int D = m->D, hd = m->hd, qd = m->H * hd, kvd = m->KV * hd;
    float *x = calloc((size_t)T * D, sizeof(float)), *h = malloc(D * sizeof(float));
    float *q = malloc(qd * sizeof(float)), *att = malloc(qd * sizeof(float)), *o = malloc(D * sizeof(float));
    float *kc = malloc((size_t)T * kvd * sizeof(float)), *vc = malloc((size_t)T * kvd * sizeof(float));
    float *g = malloc(m->FF * sizeof(float)), *u = malloc(m->FF * sizeof(float));
    float *sc = malloc(T * sizeof(float));
    float *logits = malloc((size_t)T * m->V * sizeof(float));
    float *emb = load(m->f, "token_embd.weight", NULL, NULL);
    float *factors = gguf_find_tensor(m->f, "rope_freqs.weight") ? load(m->f, "rope_freqs.weight", NULL, NULL) : NULL;
    for (int t = 0; t < T; t++) memcpy(x + (size_t)t * D, emb + (size_t)tok[t] * D, D * sizeof(float));
    char n[64];
    for (int l = 0; l < m->L; l++) {
#define LD(s) (snprintf(n, sizeof n, "blk.%d." s, l), load(m->f, n, NULL, NULL))
        float *an = LD("attn_norm.weight"), *wq = LD("attn_q.weight"), *wk = LD("attn_k.weight");
        float *wv = LD("attn_v.weight"), *wo = LD("attn_output.weight"), *fn = LD("ffn_norm.weight");
        float *wg = LD("ffn_gate.weight"), *wu = LD("ffn_up.weight"), *wd = LD("ffn_down.weight");
#undef LD
        for (int t = 0; t < T; t++) {
            float *xt = x + (size_t)t * D;
            rmsnorm(h, xt, an, D, m->eps);
            matvec(q, wq, h, D, qd);
            matvec(kc + (size_t)t * kvd, wk, h, D, kvd);
            matvec(vc + (size_t)t * kvd, wv, h, D, kvd);
            rope(q, m->H, hd, m->n_rot, m->base, t, factors);
            rope(kc + (size_t)t * kvd, m->KV, hd, m->n_rot, m->base, t, factors);
            for (int hh = 0; hh < m->H; hh++) {
                int kh = hh / (m->H / m->KV);
                double mx = -1e30, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)q[hh * hd + i] * kc[(size_t)s * kvd + kh * hd + i];
                    sc[s] = (float)(d / sqrt((double)hd));
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = 0; s <= t; s++) { sc[s] = (float)exp(sc[s] - mx); sum += sc[s]; }
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += sc[s] * vc[(size_t)s * kvd + kh * hd + i];
                    att[hh * hd + i] = (float)(a / sum);
                }
            }
            matvec(o, wo, att, qd, D);
            for (int i = 0; i < D; i++) xt[i] += o[i];
            rmsnorm(h, xt, fn, D, m->eps);
            matvec(g, wg, h, D, m->FF);
            matvec(u, wu, h, D, m->FF);
            for (int i = 0; i < m->FF; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            matvec(o, wd, g, m->FF, D);
            for (int i = 0; i < D; i++) xt[i] += o[i];
        }
        free(an); free(wq); free(wk); free(wv); free(wo); free(fn); free(wg); free(wu); free(wd);
    }
    float *on = load(m->f, "output_norm.weight", NULL, NULL);
    float *wout = gguf_find_tensor(m->f, "output.weight") ? load(m->f, "output.weight", NULL, NULL) : emb;
    for (int t = 0; t < T; t++) {
        rmsnorm(h, x + (size_t)t * D, on, D, m->eps);
        matvec(logits + (size_t)t * m->V, wout, h, D, m->V);
    }
    if (wout != emb) free(wout);
    free(emb); free(factors); free(on); free(x); free(h); free(q); free(att); free(o);
    free(kc); free(vc); free(g); free(u); free(sc);
    return logits;
}

/* max |a-b| / max |a| over the logits of the two models on the same tokens */
static double logits_rel_diff(const char *pa, const char *pb, const int *tok, int T)
{
    gguf_file *fa = open_or_die(pa), *fb = open_or_die(pb);
    ref_model ma, mb;
    ref_init(&ma, fa);
    ref_init(&mb, fb);
    float *la = ref_forward(&ma, tok, T), *lb = ref_forward(&mb, tok, T);
    double md = 0, mx = 0;
    for (size_t i = 0; i < (size_t)T * ma.V; i++) {
        md = fmax(md, fabs((double)la[i] - lb[i]));
        mx = fmax(mx, fabs((double)la[i]));
    }
    free(la);
    free(lb);
    gguf_close(fa);
    gguf_close(fb);
    return mx > 0 ? md / mx : 1.0;
}

/* ---- conversions -------------------------------------------------------- */

static uint16_t h16(int type, float v)
{
    float x[1] = {v};
    uint16_t h;
    mkmodel_row_from_f32(&h, type, x, 1);
    return h;
}

static void test_conversions(void)
{
    CHECK(h16(GGML_TYPE_F16, 1.0f) == 0x3c00);
    CHECK(h16(GGML_TYPE_F16, -2.0f) == 0xc000);
    CHECK(h16(GGML_TYPE_F16, 65504.0f) == 0x7bff);
    CHECK(h16(GGML_TYPE_F16, 1e6f) == 0x7c00);
    CHECK(h16(GGML_TYPE_F16, 1.0f + ldexpf(1, -11)) == 0x3c00);     /* tie -> even */
    CHECK(h16(GGML_TYPE_F16, 1.0f + 3 * ldexpf(1, -11)) == 0x3c02); /* tie -> even (up) */
    CHECK(h16(GGML_TYPE_F16, ldexpf(1, -24)) == 0x0001);            /* smallest subnormal */
    CHECK(h16(GGML_TYPE_BF16, 1.0f) == 0x3f80);
    CHECK(h16(GGML_TYPE_BF16, 1.0f + ldexpf(1, -8)) == 0x3f80);
    CHECK(h16(GGML_TYPE_BF16, 1.0f + 3 * ldexpf(1, -8)) == 0x3f82);
    CHECK(h16(GGML_TYPE_BF16, 1.0f + ldexpf(1, -8) + ldexpf(1, -20)) == 0x3f81);

    float w[32], back[32];
    for (int i = 0; i < 32; i++) w[i] = 0.01f * (float)(i - 16);
    w[0] = 63.5f; /* amax -> d = 0.5 exactly */
    w[1] = 0.25f; /* 0.5 q: rounds away from zero */
    w[2] = -0.25f;
    w[3] = -63.5f;
    uint8_t blk[34];
    CHECK(mkmodel_row_from_f32(blk, GGML_TYPE_Q8_0, w, 32));
    uint16_t d;
    memcpy(&d, blk, 2);
    CHECK(d == 0x3800); /* 0.5 */
    CHECK((int8_t)blk[2] == 127 && (int8_t)blk[3] == 1 && (int8_t)blk[4] == -1 && (int8_t)blk[5] == -127);
    CHECK(mkmodel_row_to_f32(back, GGML_TYPE_Q8_0, blk, 32));
    CHECK(back[0] == 63.5f && back[3] == -63.5f && back[1] == 0.5f);
    float z[32] = {0};
    CHECK(mkmodel_row_from_f32(blk, GGML_TYPE_Q8_0, z, 32));
    bool allz = true;
    for (int i = 0; i < 34; i++) allz &= blk[i] == 0;
    CHECK(allz);
    CHECK(!mkmodel_row_from_f32(blk, GGML_TYPE_Q8_0, w, 31));
    CHECK(!mkmodel_row_from_f32(blk, GGML_TYPE_Q4_1, w, 32));
    CHECK(!mkmodel_row_to_f32(back, GGML_TYPE_Q4_K, blk, 32));
    CHECK(mkmodel_ftype(GGML_TYPE_Q8_0) == 7 && mkmodel_ftype(GGML_TYPE_BF16) == 32 &&
          mkmodel_ftype(GGML_TYPE_F16) == 1 && mkmodel_ftype(GGML_TYPE_F32) == 0);
}

/* ---- random models ------------------------------------------------------ */

static void small_opts(mkmodel_opts *o)
{
    mkmodel_opts_init(o);
    o->n_layers = 2;
    o->dim = 64;
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->ff = 96;
    o->vocab = 300;
    o->seed = 7;
}

static void check_shape(const gguf_file *f, const char *name, int type, uint64_t ne0, uint64_t ne1)
{
    const gguf_tensor *t = gguf_find_tensor(f, name);
    CHECKF(t != NULL, "%s missing", name);
    if (!t) return;
    CHECKF((int)t->type == type, "%s type %d, want %d", name, (int)t->type, type);
    CHECKF(t->n_dims == (ne1 ? 2u : 1u) && t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1),
           "%s shape [%llu, %llu], want [%llu, %llu]", name, (unsigned long long)t->ne[0],
           (unsigned long long)t->ne[1], (unsigned long long)ne0, (unsigned long long)ne1);
}

static void test_random_types(void)
{
    const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
    char err[512];
    for (int ti = 0; ti < 4; ti++) {
        mkmodel_opts o;
        small_opts(&o);
        o.type = types[ti];
        const char *p = tpath("rand.gguf");
        mkmodel_info info;
        int rc = mkmodel_random(p, &o, &info, err, sizeof err);
        CHECKF(rc == 0, "type %d: %s", types[ti], err);
        if (rc) continue;
        gguf_file *f = open_or_die(p);
        char arch[16] = "";
        gguf_get_cstr(f, "general.architecture", arch, sizeof arch);
        CHECK(strcmp(arch, "llama") == 0);
        CHECK(getu(f, "llama.embedding_length") == 64 && getu(f, "llama.block_count") == 2);
        CHECK(getu(f, "llama.feed_forward_length") == 96 && getu(f, "llama.attention.head_count") == 4);
        CHECK(getu(f, "llama.attention.head_count_kv") == 2 && getu(f, "llama.rope.dimension_count") == 16);
        CHECK(getu(f, "llama.attention.key_length") == 16 && getu(f, "general.file_type") == mkmodel_ftype(types[ti]));
        CHECK(getu(f, "tokenizer.ggml.bos_token_id") == 1 && getu(f, "tokenizer.ggml.eos_token_id") == 2);
        CHECK(getu(f, "tokenizer.ggml.unknown_token_id") == 0);
        bool abos = false;
        CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &abos) && abos);
        CHECK(f->n_tensors == 3 + 9 * 2);
        int T = types[ti];
        check_shape(f, "token_embd.weight", T, 64, 300);
        check_shape(f, "output.weight", T, 64, 300);
        check_shape(f, "output_norm.weight", GGML_TYPE_F32, 64, 0);
        for (int l = 0; l < 2; l++) {
            char n[64];
#define N(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
            check_shape(f, N("attn_norm.weight"), GGML_TYPE_F32, 64, 0);
            check_shape(f, N("ffn_norm.weight"), GGML_TYPE_F32, 64, 0);
            check_shape(f, N("attn_q.weight"), T, 64, 64);
            check_shape(f, N("attn_k.weight"), T, 64, 32);
            check_shape(f, N("attn_v.weight"), T, 64, 32);
            check_shape(f, N("attn_output.weight"), T, 64, 64);
            check_shape(f, N("ffn_gate.weight"), T, 64, 96);
            check_shape(f, N("ffn_up.weight"), T, 64, 96);
            check_shape(f, N("ffn_down.weight"), T, 96, 64);
#undef N
        }
        uint64_t nel = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) nel += f->tensors[i].ne[0] * f->tensors[i].ne[1];
        CHECK(info.n_params == nel && info.file_bytes == f->size && info.type == T && !info.tied);
        CHECK(info.dim == 64 && info.n_heads == 4 && info.n_kv_heads == 2 && info.head_dim == 16 && info.vocab == 300);
        /* statistics: matrices ~ N(0, 1/fan_in), norms ~ 1 */
        uint64_t a, b;
        float *wq = load(f, "blk.1.ffn_down.weight", &a, &b);
        double s = 0, ss = 0;
        for (uint64_t i = 0; i < a * b; i++) { s += wq[i]; ss += (double)wq[i] * wq[i]; }
        double mean = s / (a * b), sd = sqrt(ss / (a * b) - mean * mean);
        CHECKF(fabs(sd - 1 / sqrt(96.0)) < 0.15 / sqrt(96.0) && fabs(mean) < 0.01, "std %g mean %g", sd, mean);
        free(wq);
        float *nw = load(f, "blk.0.attn_norm.weight", &a, NULL);
        s = 0;
        for (uint64_t i = 0; i < a; i++) s += nw[i];
        CHECK(fabs(s / a - 1.0) < 0.05);
        free(nw);
        gguf_close(f);
    }

    /* tied + llama3 rope scaling */
    mkmodel_opts o;
    small_opts(&o);
    o.tied = true;
    o.rope_llama3 = true;
    CHECKF(mkmodel_random(tpath("tied.gguf"), &o, NULL, err, sizeof err) == 0, "%s", err);
    gguf_file *f = open_or_die(tpath("tied.gguf"));
    CHECK(gguf_find_tensor(f, "output.weight") == NULL);
    check_shape(f, "rope_freqs.weight", GGML_TYPE_F32, 8, 0);
    /* the tensor alone, as llama.cpp's converter writes Llama-3.x scaling (issue 22
     * item 9: llama.cpp refuses rope.scaling.type "llama3" and would read a
     * rope.scaling.factor as linear scaling) */
    CHECK(gguf_find(f, "llama.rope.scaling.type") == NULL && gguf_find(f, "llama.rope.scaling.factor") == NULL);
    float *fr = load(f, "rope_freqs.weight", NULL, NULL);
    CHECK(fr[0] == 1.0f && fr[7] > 1.0f);
    free(fr);
    gguf_close(f);
}

static int cmp_str(const void *a, const void *b)
{
    const gguf_str *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->ptr, y->ptr, (size_t)n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void test_tokenizer(void)
{
    const int sizes[] = {259, 300, 4000, 50000};
    char err[512];
    for (int si = 0; si < 4; si++) {
        mkmodel_opts o;
        small_opts(&o);
        o.n_layers = 1;
        o.vocab = sizes[si];
        CHECKF(mkmodel_random(tpath("tok.gguf"), &o, NULL, err, sizeof err) == 0, "%s", err);
        gguf_file *f = open_or_die(tpath("tok.gguf"));
        const gguf_kv *tk = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        const gguf_kv *sc = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
        const gguf_kv *ty = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
        CHECK(tk && sc && ty);
        if (!tk || !sc || !ty) { gguf_close(f); continue; }
        uint64_t n = tk->arr_n;
        CHECK(n == (uint64_t)sizes[si] && sc->arr_n == n && ty->arr_n == n);
        CHECK(gguf_str_eq(tk->arr_str[0], "<unk>") && gguf_str_eq(tk->arr_str[1], "<s>") &&
              gguf_str_eq(tk->arr_str[2], "</s>") && gguf_str_eq(tk->arr_str[3], "<0x00>") &&
              gguf_str_eq(tk->arr_str[258], "<0xFF>") && gguf_str_eq(tk->arr_str[3 + 'A'], "<0x41>"));
        int32_t t0, t1, t3;
        memcpy(&t0, ty->arr_data, 4);
        memcpy(&t1, (const char *)ty->arr_data + 4, 4);
        memcpy(&t3, (const char *)ty->arr_data + 12, 4);
        CHECK(t0 == 2 && t1 == 3 && t3 == 6);
        /* normal pieces: type 1, strictly decreasing scores */
        bool ok = true;
        float prev = 1.0f;
        for (uint64_t i = 259; i < n; i++) {
            float s;
            int32_t t;
            memcpy(&s, (const char *)sc->arr_data + 4 * i, 4);
            memcpy(&t, (const char *)ty->arr_data + 4 * i, 4);
            ok &= t == 1 && s < prev;
            prev = s;
        }
        CHECK(ok);
        /* all pieces distinct */
        gguf_str *cp = malloc(n * sizeof *cp);
        memcpy(cp, tk->arr_str, n * sizeof *cp);
        qsort(cp, n, sizeof *cp, cmp_str);
        bool distinct = true;
        for (uint64_t i = 1; i < n; i++) distinct &= cmp_str(&cp[i - 1], &cp[i]) != 0;
        CHECK(distinct);
        free(cp);
        if (n >= 4000) {
            /* the BPE merges produced whole common words */
            bool the = false;
            for (uint64_t i = 259; i < n; i++) the |= gguf_str_eq(tk->arr_str[i], "\xe2\x96\x81the");
            CHECK(the);
        }
        gguf_close(f);
    }
}

static void test_determinism(void)
{
    char err[512];
    mkmodel_opts o;
    small_opts(&o);
    o.type = GGML_TYPE_Q8_0;
    CHECK(mkmodel_random(tpath("d1.gguf"), &o, NULL, err, sizeof err) == 0);
    CHECK(mkmodel_random(tpath("d2.gguf"), &o, NULL, err, sizeof err) == 0);
    o.seed = 8;
    CHECK(mkmodel_random(tpath("d3.gguf"), &o, NULL, err, sizeof err) == 0);
    CHECK(files_equal(tpath("d1.gguf"), tpath("d2.gguf")));
    CHECK(!files_equal(tpath("d1.gguf"), tpath("d3.gguf")));
}

static void expect_fail(const char *what, const mkmodel_opts *o, const char *needle)
{
    char err[512] = "";
    const char *p = tpath("bad.gguf");
    unlink(p);
    int rc = mkmodel_random(p, o, NULL, err, sizeof err);
    CHECKF(rc == -1, "%s: accepted", what);
    CHECKF(strstr(err, needle) != NULL, "%s: error '%s' lacks '%s'", what, err, needle);
    CHECKF(!exists(p), "%s: wrote a file anyway", what);
}

static void test_validation(void)
{
    mkmodel_opts o;
    small_opts(&o); o.dim = 100; o.n_heads = 8;
    expect_fail("dim % heads", &o, "multiple of --heads");
    small_opts(&o); o.n_heads = 8; o.n_kv_heads = 3;
    expect_fail("heads % kv", &o, "--kv-heads");
    small_opts(&o); o.head_dim = 7; o.n_kv_heads = 4;
    expect_fail("odd head dim", &o, "even");
    small_opts(&o); o.vocab = 100;
    expect_fail("small vocab", &o, "259");
    small_opts(&o); o.dim = 48; o.type = GGML_TYPE_Q8_0;
    expect_fail("q8_0 dim", &o, "multiples of 32");
    small_opts(&o); o.ff = 100; o.type = GGML_TYPE_Q8_0;
    expect_fail("q8_0 ff", &o, "multiples of 32");
    small_opts(&o); o.type = GGML_TYPE_Q4_1;
    expect_fail("type", &o, "--type");
    small_opts(&o); o.n_layers = -1;
    expect_fail("layers", &o, "--layers");
    small_opts(&o); o.tokenizer_path = "/nonexistent/x.gguf";
    expect_fail("tokenizer path", &o, "--tokenizer");
    small_opts(&o); o.tokenizer_path = tpath("tied.gguf"); o.vocab = 512;
    expect_fail("tokenizer vocab", &o, "differs");
    small_opts(&o); o.eps = -1.0f;
    expect_fail("eps", &o, "--eps");
    /* --head-dim decouples heads from dim */
    char err[512];
    small_opts(&o); o.dim = 96; o.n_heads = 4; o.head_dim = 32; o.type = GGML_TYPE_Q8_0;
    CHECKF(mkmodel_random(tpath("hd.gguf"), &o, NULL, err, sizeof err) == 0, "%s", err);
}

static void test_tokenizer_copy(void)
{
    char err[512];
    mkmodel_opts o;
    small_opts(&o);
    o.vocab = 0;
    o.tokenizer_path = tpath("tied.gguf"); /* a synthetic 300-token vocabulary */
    mkmodel_info info;
    CHECKF(mkmodel_random(tpath("tc.gguf"), &o, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.vocab == 300);
    gguf_file *a = open_or_die(tpath("tied.gguf")), *b = open_or_die(tpath("tc.gguf"));
    const gguf_kv *ta = gguf_get_arr(a, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    const gguf_kv *tb = gguf_get_arr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    CHECK(ta && tb && ta->arr_n == tb->arr_n);
    bool same = ta && tb;
    for (uint64_t i = 0; same && i < ta->arr_n; i++)
        same = ta->arr_str[i].len == tb->arr_str[i].len &&
               memcmp(ta->arr_str[i].ptr, tb->arr_str[i].ptr, (size_t)ta->arr_str[i].len) == 0;
    CHECK(same);
    const gguf_kv *sa = gguf_get_arr(a, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
    const gguf_kv *sb = gguf_get_arr(b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
    CHECK(sa && sb && memcmp(sa->arr_data, sb->arr_data, 4 * 300) == 0);
    bool asp = false;
    CHECK(gguf_get_bool(b, "tokenizer.ggml.add_space_prefix", &asp) && asp);
    CHECK(gguf_find(b, "llama.rope.scaling.type") == NULL); /* only tokenizer.* copied */
    check_shape(b, "token_embd.weight", GGML_TYPE_F32, 64, 300);
    gguf_close(a);
    gguf_close(b);

    const char *models = getenv("SPECD_MODELS");
    char sp[512];
    snprintf(sp, sizeof sp, "%s/stories260K.gguf", models ? models : "../shared/models");
    if (!exists(sp)) return;
    o.tokenizer_path = sp;
    CHECKF(mkmodel_random(tpath("tc2.gguf"), &o, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.vocab == 512);
    b = open_or_die(tpath("tc2.gguf"));
    CHECK(getu(b, "tokenizer.ggml.padding_token_id") == 0xffffffffu);
    tb = gguf_get_arr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    CHECK(tb && tb->arr_n == 512);
    gguf_close(b);
}

/* ---- widening ----------------------------------------------------------- */

static bool all_zero(const float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (x[i] != 0.0f) return false;
    return true;
}

static void test_widen_structure(void)
{
    char err[512];
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.n_layers = 2; o.dim = 64; o.n_heads = 8; o.n_kv_heads = 4; o.ff = 96; o.vocab = 300; o.seed = 3;
    char src[512];
    snprintf(src, sizeof src, "%s", tpath("wsrc.gguf"));
    CHECKF(mkmodel_random(src, &o, NULL, err, sizeof err) == 0, "%s", err);

    /* dim 64 -> 128, head dim 8 -> 16 (8 heads, 4 kv), ff 96 -> 160, 2 -> 4 layers */
    mkmodel_opts wo;
    mkmodel_opts_init(&wo);
    wo.dim = 128; wo.head_dim = 16; wo.ff = 160; wo.n_layers = 4;
    char dst[512];
    snprintf(dst, sizeof dst, "%s", tpath("wide.gguf"));
    mkmodel_info info;
    CHECKF(mkmodel_widen(dst, src, &wo, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.dim == 128 && info.n_heads == 8 && info.n_kv_heads == 4 && info.head_dim == 16 &&
          info.ff == 160 && info.n_layers == 4 && info.vocab == 300 && info.type == GGML_TYPE_F32);
    gguf_file *s = open_or_die(src), *w = open_or_die(dst);
    CHECK(getu(w, "llama.embedding_length") == 128 && getu(w, "llama.attention.key_length") == 16 &&
          getu(w, "llama.rope.dimension_count") == 16 && getu(w, "llama.attention.head_count") == 8 &&
          getu(w, "llama.attention.head_count_kv") == 4);
    float es = 0, ew = 0;
    gguf_get_f32(s, "llama.attention.layer_norm_rms_epsilon", &es);
    gguf_get_f32(w, "llama.attention.layer_norm_rms_epsilon", &ew);
    CHECK(fabsf(ew - es * 0.5f) < 1e-12f);

    float *e0 = load(s, "token_embd.weight", NULL, NULL), *e1 = load(w, "token_embd.weight", NULL, NULL);
    bool ok = true;
    for (int v = 0; v < 300; v++)
        for (int i = 0; i < 128; i++) ok &= e1[v * 128 + i] == (i < 64 ? e0[v * 64 + i] : 0.0f);
    CHECK(ok);
    free(e0); free(e1);

    float *n0 = load(s, "blk.1.ffn_norm.weight", NULL, NULL), *n1 = load(w, "blk.1.ffn_norm.weight", NULL, NULL);
    ok = true;
    for (int i = 0; i < 64; i++) ok &= fabsf(n1[i] - n0[i] * sqrtf(0.5f)) <= 1e-6f * fabsf(n0[i]);
    CHECK(ok);
    free(n0); free(n1);

    /* q rows: source pair i of head h -> pair 2i of the new head, scaled by sqrt(16/8) */
    float *q0 = load(s, "blk.0.attn_q.weight", NULL, NULL), *q1 = load(w, "blk.0.attn_q.weight", NULL, NULL);
    ok = true;
    for (int h = 0; h < 8; h++)
        for (int d = 0; d < 16; d++) {
            const float *row = q1 + (h * 16 + d) * 128;
            bool mapped = (d / 2) % 2 == 0;
            int sd = (d / 2 / 2) * 2 + (d & 1);
            for (int i = 0; i < 128; i++) {
                float want = mapped && i < 64 ? q0[(h * 8 + sd) * 64 + i] * sqrtf(2.0f) : 0.0f;
                ok &= fabsf(row[i] - want) <= 1e-6f;
            }
        }
    CHECK(ok);
    free(q0); free(q1);

    /* attn_output: new residual rows zero, unmapped columns zero */
    uint64_t K, N;
    float *o1 = load(w, "blk.1.attn_output.weight", &K, &N);
    CHECK(K == 128 && N == 128);
    CHECK(all_zero(o1 + 64 * 128, 64 * 128));
    ok = true;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 128; c++)
            if (((c % 16) / 2) % 2) ok &= o1[r * 128 + c] == 0.0f;
    CHECK(ok);
    free(o1);
    /* ffn_down: rows >= 64 zero, columns of new units zero */
    float *d1 = load(w, "blk.0.ffn_down.weight", &K, &N);
    CHECK(K == 160 && N == 128);
    CHECK(all_zero(d1 + 64 * 160, 64 * 160));
    ok = true;
    for (int r = 0; r < 64; r++) ok &= all_zero(d1 + r * 160 + 96, 64);
    CHECK(ok);
    free(d1);
    /* new units have random input weights */
    float *g1 = load(w, "blk.0.ffn_gate.weight", NULL, NULL);
    CHECK(!all_zero(g1 + 96 * 128, 64 * 128));
    free(g1);
    /* extra layers: identity (zero output projections), random inputs */
    for (int l = 2; l < 4; l++) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", l);
        float *x = load(w, n, &K, &N);
        CHECK(all_zero(x, K * N));
        free(x);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        x = load(w, n, &K, &N);
        CHECK(all_zero(x, K * N));
        free(x);
        snprintf(n, sizeof n, "blk.%d.attn_q.weight", l);
        x = load(w, n, &K, &N);
        CHECK(!all_zero(x, K * N));
        free(x);
    }
    gguf_close(s);
    gguf_close(w);

    const int tok[] = {1, 17, 260, 299, 5, 120, 77, 2};
    double rd = logits_rel_diff(src, dst, tok, 8);
    CHECKF(rd <= 1e-4, "widened logits differ: %g", rd);

    /* more heads (head dim kept): new heads' output columns are zero */
    mkmodel_opts_init(&wo);
    wo.dim = 128;
    CHECKF(mkmodel_widen(tpath("wide2.gguf"), src, &wo, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.n_heads == 16 && info.n_kv_heads == 8 && info.head_dim == 8);
    w = open_or_die(tpath("wide2.gguf"));
    o1 = load(w, "blk.0.attn_output.weight", &K, &N);
    CHECK(K == 128 && N == 128);
    ok = true;
    for (int r = 0; r < 128; r++) ok &= all_zero(o1 + r * 128 + 64, 64);
    CHECK(ok);
    free(o1);
    float *q = load(w, "blk.0.attn_q.weight", &K, &N);
    CHECK(!all_zero(q + 64 * 128, 64 * 128)); /* new heads' q rows are random */
    free(q);
    gguf_close(w);
    rd = logits_rel_diff(src, tpath("wide2.gguf"), tok, 8);
    CHECKF(rd <= 1e-4, "widened (more heads) logits differ: %g", rd);

    /* user kv heads: 16 heads over 16 kv heads (each source kv head duplicated) */
    wo.n_kv_heads = 16;
    CHECKF(mkmodel_widen(tpath("wide3.gguf"), src, &wo, &info, err, sizeof err) == 0, "%s", err);
    rd = logits_rel_diff(src, tpath("wide3.gguf"), tok, 8);
    CHECKF(rd <= 1e-4, "widened (16 kv heads) logits differ: %g", rd);

    /* errors */
    struct { int dim, heads, kv, hd, ff, layers, vocab; const char *needle; } bad[] = {
        {32, 0, 0, 0, 0, 0, 0, "cannot shrink"},
        {0, 0, 0, 12, 0, 0, 0, "multiple of the source's head dim"},
        {0, 8, 2, 0, 0, 0, 0, "must divide"},
        {0, 4, 0, 0, 0, 0, 0, "fewer than"},
        {0, 0, 0, 0, 0, 0, 512, "do not apply"},
        {100, 0, 0, 0, 0, 0, 0, "multiples of 32"}, /* with q8_0 below */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mkmodel_opts_init(&wo);
        wo.dim = bad[i].dim; wo.n_heads = bad[i].heads; wo.n_kv_heads = bad[i].kv;
        wo.head_dim = bad[i].hd; wo.ff = bad[i].ff; wo.n_layers = bad[i].layers; wo.vocab = bad[i].vocab;
        if (i == 5) { wo.type = GGML_TYPE_Q8_0; wo.n_heads = 8; }
        err[0] = 0;
        int rc = mkmodel_widen(tpath("bad.gguf"), src, &wo, NULL, err, sizeof err);
        CHECKF(rc == -1 && strstr(err, bad[i].needle), "widen case %zu: rc %d err '%s'", i, rc, err);
    }
    mkmodel_opts_init(&wo);
    CHECK(mkmodel_widen(tpath("bad.gguf"), "/nonexistent.gguf", &wo, NULL, err, sizeof err) == -1 && err[0]);
}

static void test_widen_stories(void)
{
    const char *models = getenv("SPECD_MODELS");
    char sp[512];
    snprintf(sp, sizeof sp, "%s/stories260K.gguf", models ? models : "../shared/models");
    if (!exists(sp)) {
        fprintf(stderr, "note: %s absent, real-model widening not checked\n", sp);
        return;
    }
    char err[512];
    mkmodel_opts wo;
    mkmodel_opts_init(&wo);
    wo.dim = 128; wo.head_dim = 16; wo.ff = 256; wo.n_layers = 6;
    mkmodel_info info;
    CHECKF(mkmodel_widen(tpath("sw.gguf"), sp, &wo, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.n_heads == 8 && info.n_kv_heads == 4 && info.vocab == 512);
    const int tok[] = {1, 403, 407, 261, 378, 11, 50, 300, 2, 100};
    double rd = logits_rel_diff(sp, tpath("sw.gguf"), tok, 10);
    CHECKF(rd <= 1e-4, "stories260K widened logits differ: %g", rd);
    /* q8_0 of the wide model: same argmax on most positions, error bounded */
    CHECKF(mkmodel_quantize(tpath("swq.gguf"), tpath("sw.gguf"), GGML_TYPE_Q8_0, NULL, err, sizeof err) == 0, "%s", err);
    rd = logits_rel_diff(sp, tpath("swq.gguf"), tok, 10);
    CHECKF(rd < 0.05, "q8_0 widened logits differ: %g", rd);
}

/* ---- re-typing ---------------------------------------------------------- */

static void test_quantize(void)
{
    char err[512];
    mkmodel_opts o;
    small_opts(&o);
    char src[512];
    snprintf(src, sizeof src, "%s", tpath("qsrc.gguf"));
    CHECK(mkmodel_random(src, &o, NULL, err, sizeof err) == 0);
    const int types[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_F32};
    const float tol[] = {4.9e-4f, 3.91e-3f, 4.5e-3f, 0.0f}; /* half an ulp; Q8_0: 0.5 q-step + f16 rounding of d */
    for (int ti = 0; ti < 4; ti++) {
        const char *dst = tpath("q.gguf");
        mkmodel_info info;
        CHECKF(mkmodel_quantize(dst, src, types[ti], &info, err, sizeof err) == 0, "%s", err);
        gguf_file *s = open_or_die(src), *d = open_or_die(dst);
        CHECK(d->n_tensors == s->n_tensors && d->n_kv == s->n_kv);
        CHECK(getu(d, "general.file_type") == mkmodel_ftype(types[ti]));
        char nm[64] = "";
        CHECK(gguf_get_cstr(d, "general.name", nm, sizeof nm) && strcmp(nm, "specd-random") == 0);
        CHECK(gguf_get_arr(d, "tokenizer.ggml.tokens", GGUF_TYPE_STRING) != NULL);
        CHECK(info.type == types[ti] && info.dim == 64 && info.vocab == 300 && info.n_params > 0);
        for (uint64_t i = 0; i < s->n_tensors; i++) {
            const gguf_tensor *ts = &s->tensors[i];
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)ts->name.len, ts->name.ptr);
            const gguf_tensor *td = gguf_find_tensor(d, name);
            CHECKF(td != NULL, "%s missing", name);
            if (!td) continue;
            CHECK((int)td->type == (ts->n_dims >= 2 ? types[ti] : GGML_TYPE_F32));
            float *a = load(s, name, NULL, NULL), *b = load(d, name, NULL, NULL);
            uint64_t n = ts->ne[0] * ts->ne[1];
            float md = 0, mx = 0;
            for (uint64_t k = 0; k < n; k++) {
                md = fmaxf(md, fabsf(a[k] - b[k]));
                mx = fmaxf(mx, fabsf(a[k]));
            }
            CHECKF(md <= tol[ti] * mx, "%s: max diff %g (max %g)", name, md, mx);
            free(a);
            free(b);
        }
        gguf_close(s);
        gguf_close(d);
    }
    /* q8_0 needs rows that are multiples of 32 */
    small_opts(&o);
    o.ff = 100;
    CHECK(mkmodel_random(tpath("q100.gguf"), &o, NULL, err, sizeof err) == 0);
    err[0] = 0;
    CHECK(mkmodel_quantize(tpath("bad.gguf"), tpath("q100.gguf"), GGML_TYPE_Q8_0, NULL, err, sizeof err) == -1);
    CHECKF(strstr(err, "ffn_down") != NULL, "%s", err);
    CHECK(mkmodel_quantize(tpath("bad.gguf"), tpath("q100.gguf"), GGML_TYPE_Q4_0, NULL, err, sizeof err) == -1);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/specd_mkmodel_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    test_conversions();
    test_random_types();
    test_tokenizer();
    test_determinism();
    test_validation();
    test_tokenizer_copy();
    test_widen_structure();
    test_widen_stories();
    test_quantize();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_DONE();
}
