/* mkmodel_widen.c — mkmodel_widen: a function-preserving widening of a real
 * llama model (wider residual, more heads and kv heads, wider FFN, more layers). */
#include "cli/mkmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- widening --------------------------------------------------------------
 * Residual dims [D, D') stay exactly zero: the embedding is zero there and
 * every projection that writes the residual (attn_output, ffn_down) has zero
 * rows there. RMSNorm over D' then sees mean' = mean * D/D'; with eps' =
 * eps * D/D' and weights scaled by sqrt(D/D') the normalized values are the
 * source's. New heads, kv heads and ff units read random weights but their
 * output columns are zero; extra layers have zero attn_output and ffn_down. */

typedef struct {
    int D, L, H, KV, N, FF; /* target */
    int r;                  /* N / source head dim */
    int *kv_src;            /* (KV) source kv head held by each new kv head, or -1 */
} widen_plan;

/* Position of source head dim d in the regrouped head: RoPE pair i moves to
 * pair i*r, which has the same frequency base^(-2i/hd) = base^(-2(i r)/N). */
static inline int wmap(int d, int r) { return 2 * ((d / 2) * r) + (d & 1); }

static int widen_layer(emitter *e, const src_model *s, const widen_plan *p, int type, uint64_t seed,
                       int l, float nscale)
{
    char n[64], sn[64];
    const int D = p->D, D0 = s->D, hd = s->hd, N = p->N;
    const float qscale = sqrtf((float)N / (float)hd);
    const bool old = l < s->L;
    int rc = 0;
    float *src = NULL, *x = NULL;
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
#define SNM(suffix) (snprintf(sn, sizeof sn, "blk.%d." suffix, l), sn)

    /* norms */
    const char *norms[2] = {"attn_norm.weight", "ffn_norm.weight"};
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(n, sizeof n, "blk.%d.%s", l, norms[k]);
        x = mk_falloc(D, e->err, e->errlen);
        if (!x) return -1;
        if (old) {
            src = mk_src_load(s, n, D0, 0, e->err, e->errlen);
            if (!src) { free(x); return -1; }
            for (int i = 0; i < D; i++) x[i] = nscale * (i < D0 ? src[i] : 1.0f);
            free(src);
            src = NULL;
        } else {
            for (int i = 0; i < D; i++) x[i] = 1.0f;
        }
        rc = mk_emit(e, n, GGML_TYPE_F32, D, 0, x);
        free(x);
        x = NULL;
    }
    if (rc) return rc;

    /* q, k, v: rows of source heads move to their regrouped positions */
    for (int which = 0; which < 3 && !rc; which++) {
        const char *suf = which == 0 ? "attn_q.weight" : which == 1 ? "attn_k.weight" : "attn_v.weight";
        int nh = which == 0 ? p->H : p->KV, nh0 = which == 0 ? s->H : s->KV;
        snprintf(n, sizeof n, "blk.%d.%s", l, suf);
        uint64_t rows = (uint64_t)nh * N;
        x = mk_falloc((uint64_t)D * rows, e->err, e->errlen);
        if (!x) return -1;
        if (old) {
            src = mk_src_load(s, n, D0, (uint64_t)nh0 * hd, e->err, e->errlen);
            if (!src) { free(x); return -1; }
        }
        uint64_t key = mk_tensor_key(seed, n);
        float std = 1.0f / sqrtf((float)D);
        for (int h = 0; h < nh; h++) {
            int sh = !old ? -1 : which == 0 ? (h < s->H ? h : -1) : p->kv_src[h];
            float *blk = x + (uint64_t)h * N * D;
            if (sh < 0) {
                mk_fill_normal(blk, (uint64_t)N * D, key, (uint64_t)h * N * D, std);
                continue;
            }
            float sc = which == 0 ? qscale : 1.0f;
            for (int d = 0; d < hd; d++) {
                const float *srow = src + ((uint64_t)sh * hd + d) * D0;
                float *drow = blk + (uint64_t)wmap(d, p->r) * D;
                for (int i = 0; i < D0; i++) drow[i] = sc * srow[i];
            }
        }
        rc = mk_emit(e, n, type, D, rows, x);
        free(src);
        free(x);
        src = x = NULL;
    }
    if (rc) return rc;

    /* attn_output [H*N, D]: only residual rows < D0 and source-head columns are non-zero */
    x = mk_falloc((uint64_t)p->H * N * D, e->err, e->errlen);
    if (!x) return -1;
    if (old) {
        src = mk_src_load(s, NM("attn_output.weight"), (uint64_t)s->H * hd, D0, e->err, e->errlen);
        if (!src) { free(x); return -1; }
        uint64_t K = (uint64_t)p->H * N, K0 = (uint64_t)s->H * hd;
        for (int o = 0; o < D0; o++)
            for (int h = 0; h < s->H; h++)
                for (int d = 0; d < hd; d++)
                    x[o * K + (uint64_t)h * N + wmap(d, p->r)] = src[o * K0 + (uint64_t)h * hd + d];
        free(src);
        src = NULL;
    }
    rc = mk_emit(e, NM("attn_output.weight"), type, (uint64_t)p->H * N, D, x);
    free(x);
    x = NULL;
    if (rc) return rc;

    /* ffn_gate, ffn_up [D, FF]: source units copied, new units random */
    for (int which = 0; which < 2 && !rc; which++) {
        const char *suf = which == 0 ? "ffn_gate.weight" : "ffn_up.weight";
        snprintf(n, sizeof n, "blk.%d.%s", l, suf);
        x = mk_falloc((uint64_t)D * p->FF, e->err, e->errlen);
        if (!x) return -1;
        int first_new = 0;
        if (old) {
            src = mk_src_load(s, n, D0, s->FF, e->err, e->errlen);
            if (!src) { free(x); return -1; }
            for (int f = 0; f < s->FF; f++) memcpy(x + (uint64_t)f * D, src + (uint64_t)f * D0, D0 * sizeof(float));
            free(src);
            src = NULL;
            first_new = s->FF;
        }
        uint64_t off = (uint64_t)first_new * D;
        mk_fill_normal(x + off, (uint64_t)D * p->FF - off, mk_tensor_key(seed, n), off, 1.0f / sqrtf((float)D));
        rc = mk_emit(e, n, type, D, p->FF, x);
        free(x);
        x = NULL;
    }
    if (rc) return rc;

    /* ffn_down [FF, D]: residual rows < D0, source-unit columns */
    x = mk_falloc((uint64_t)p->FF * D, e->err, e->errlen);
    if (!x) return -1;
    if (old) {
        src = mk_src_load(s, SNM("ffn_down.weight"), s->FF, D0, e->err, e->errlen);
        if (!src) { free(x); return -1; }
        for (int o = 0; o < D0; o++)
            memcpy(x + (uint64_t)o * p->FF, src + (uint64_t)o * s->FF, s->FF * sizeof(float));
        free(src);
    }
    rc = mk_emit(e, NM("ffn_down.weight"), type, p->FF, D, x);
    free(x);
#undef NM
#undef SNM
    return rc;
}

/* Embedding-like [D0, V] -> [D', V], zero in the new dims. */
static int widen_vocab_matrix(emitter *e, const src_model *s, const char *name, int D, int type)
{
    float *src = mk_src_load(s, name, s->D, s->V, e->err, e->errlen);
    if (!src) return -1;
    float *x = mk_falloc((uint64_t)D * s->V, e->err, e->errlen);
    if (!x) { free(src); return -1; }
    for (int v = 0; v < s->V; v++) memcpy(x + (uint64_t)v * D, src + (uint64_t)v * s->D, s->D * sizeof(float));
    free(src);
    int rc = mk_emit(e, name, type, D, s->V, x);
    free(x);
    return rc;
}

int mkmodel_widen(const char *out_path, const char *src_path, const mkmodel_opts *o,
                  mkmodel_info *info, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (o->vocab || o->tokenizer_path || o->tied || o->rope_llama3 || o->rope_base != 0.0f || o->eps != 0.0f ||
        o->arch || o->sliding_window)
        return util_fail(err, errlen, "--vocab, --tokenizer, --tied, --rope-*, --eps do not apply to --widen "
                    "(they come from the source model)");
    src_model s;
    widen_plan p = {0};
    gguf_writer *w = NULL;
    int rc = mk_src_open(&s, src_path, err, errlen);
    if (rc) goto out;

    p.D = o->dim ? o->dim : s.D;
    p.L = o->n_layers ? o->n_layers : s.L;
    p.FF = o->ff ? o->ff : s.FF;
    p.N = o->head_dim ? o->head_dim : s.hd;
    int type = o->type < 0 ? s.type : o->type;
    rc = -1;
    const char *smaller = p.D < s.D ? "--dim" : p.L < s.L ? "--layers" : p.FF < s.FF ? "--ff"
                        : p.N < s.hd ? "--head-dim" : NULL;
    if (smaller) {
        util_fail(err, errlen, "%s is smaller than the source's (%d dim, %d layers, %d ff, %d head dim): "
             "widening cannot shrink", smaller, s.D, s.L, s.FF, s.hd);
        goto out;
    }
    if (mk_check_range("--dim", p.D, s.D, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--layers", p.L, s.L, MK_MAX_LAYERS, err, errlen) ||
        mk_check_range("--ff", p.FF, s.FF, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--head-dim", p.N, s.hd, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--heads", o->n_heads, 0, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--kv-heads", o->n_kv_heads, 0, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--ctx", o->ctx, 0, 1 << 24, err, errlen))
        goto out;
    if (p.N % s.hd) {
        util_fail(err, errlen, "--head-dim %d must be a multiple of the source's head dim %d", p.N, s.hd);
        goto out;
    }
    if (p.N != s.hd && s.n_rot != s.hd) {
        util_fail(err, errlen, "--head-dim needs a source whose RoPE covers the whole head (rope dims %d, head dim %d)",
             s.n_rot, s.hd);
        goto out;
    }
    p.r = p.N / s.hd;
    if (o->n_heads) p.H = o->n_heads;
    else p.H = (p.D % p.N == 0 && p.D / p.N >= s.H) ? p.D / p.N : s.H;
    if (p.H < s.H) {
        util_fail(err, errlen, "--heads %d is fewer than the source's %d", p.H, s.H);
        goto out;
    }
    int g = s.H / s.KV;
    if (o->n_kv_heads) p.KV = o->n_kv_heads;
    else if (p.H % g == 0) p.KV = p.H / g;
    else {
        util_fail(err, errlen, "%d heads cannot keep the source's %d heads per kv head: give --kv-heads", p.H, g);
        goto out;
    }
    if (p.H % p.KV) {
        util_fail(err, errlen, "--heads %d is not a multiple of --kv-heads %d", p.H, p.KV);
        goto out;
    }
    /* new head h reads kv head h / (H'/KV'); for source heads that kv head must hold the source's h / g */
    p.kv_src = malloc((size_t)p.KV * sizeof(int));
    if (!p.kv_src) { util_fail(err, errlen, "out of memory"); goto out; }
    for (int k = 0; k < p.KV; k++) p.kv_src[k] = -1;
    int g2 = p.H / p.KV;
    for (int h = 0; h < s.H; h++) {
        int k = h / g2, want = h / g;
        if (p.kv_src[k] >= 0 && p.kv_src[k] != want) {
            util_fail(err, errlen, "--kv-heads %d gives %d heads per kv head, which must divide the source's %d "
                 "(source heads of different kv heads would share one)", p.KV, g2, g);
            goto out;
        }
        p.kv_src[k] = want;
    }
    if (!type_supported(type)) {
        util_fail(err, errlen, "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
        goto out;
    }
    if (type == GGML_TYPE_Q8_0 && (p.D % 32 || p.FF % 32 || (p.H * p.N) % 32)) {
        util_fail(err, errlen, "--type q8_0 needs dim, ff and heads*head_dim to be multiples of 32 "
             "(dim %d, ff %d, heads*head_dim %d)", p.D, p.FF, p.H * p.N);
        goto out;
    }
    if ((uint64_t)p.H * p.N > MK_MAX_DIM) {
        util_fail(err, errlen, "heads * head dim %d * %d is too large", p.H, p.N);
        goto out;
    }
    const gguf_tensor *rf = gguf_find_tensor(s.f, "rope_freqs.weight");
    int n_rot = p.N == s.hd ? s.n_rot : p.N;
    uint64_t np = mk_count_params(p.L, p.D, p.H, p.KV, p.N, p.FF, s.V, s.tied, rf ? n_rot / 2 : 0);
    if (np > MK_MAX_PARAMS) {
        util_fail(err, errlen, "model of %llu parameters is too large", (unsigned long long)np);
        goto out;
    }

    float ratio = (float)s.D / (float)p.D;
    float nscale = sqrtf(ratio);
    int ctx = o->ctx ? o->ctx : s.ctx;
    w = gguf_writer_create();
    static const char *const skip[] = {"llama.", "general.file_type", "general.name", "general.description", NULL};
    gguf_writer_copy_kv(w, s.f, skip);
    gguf_writer_set_str(w, "general.architecture", "llama");
    char nm[128];
    if (o->name) snprintf(nm, sizeof nm, "%s", o->name);
    else if (!gguf_get_cstr(s.f, "general.name", nm, sizeof nm)) snprintf(nm, sizeof nm, "llama");
    gguf_writer_set_str(w, "general.name", nm);
    gguf_writer_set_str(w, "general.description",
                        "function-preserving widening (specd mkmodel --widen): same outputs as the source model");
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    mk_set_llama_shape(w, ctx, p.D, p.L, p.FF, p.H, p.KV, n_rot, p.N, s.eps * ratio, s.base);
    uint32_t vs;
    if (gguf_get_u32(s.f, "llama.vocab_size", &vs)) gguf_writer_set_u32(w, "llama.vocab_size", vs);
    rc = mk_copy_kv_prefix(w, s.f, "llama.rope.scaling.", err, errlen);
    if (rc) goto out;

    emitter e = {w, 0, err, errlen};
    rc = widen_vocab_matrix(&e, &s, "token_embd.weight", p.D, type);
    if (!rc) {
        float *on = mk_src_load(&s, "output_norm.weight", s.D, 0, err, errlen);
        float *x = on ? mk_falloc(p.D, err, errlen) : NULL;
        if (!x) rc = -1;
        else {
            for (int i = 0; i < p.D; i++) x[i] = nscale * (i < s.D ? on[i] : 1.0f);
            rc = mk_emit(&e, "output_norm.weight", GGML_TYPE_F32, p.D, 0, x);
        }
        free(on);
        free(x);
    }
    if (!rc && !s.tied) rc = widen_vocab_matrix(&e, &s, "output.weight", p.D, type);
    if (!rc && rf) {
        float *f = mk_src_load(&s, "rope_freqs.weight", s.n_rot / 2, 0, err, errlen);
        float *x = f ? mk_falloc(n_rot / 2, err, errlen) : NULL;
        if (!x) rc = -1;
        else {
            for (int j = 0; j < n_rot / 2; j++) x[j] = 1.0f;
            for (int i = 0; i < s.n_rot / 2; i++) x[i * p.r] = f[i];
            rc = mk_emit(&e, "rope_freqs.weight", GGML_TYPE_F32, n_rot / 2, 0, x);
        }
        free(f);
        free(x);
    }
    for (int l = 0; l < p.L && !rc; l++) rc = widen_layer(&e, &s, &p, type, o->seed, l, nscale);
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    if (!rc && info) {
        *info = (mkmodel_info){p.L, p.D, p.H, p.KV, p.N, p.FF, s.V, ctx, type, s.tied, e.n_params, 0, "llama"};
        mk_finish_info(info, out_path);
    }
out:
    gguf_writer_destroy(w);
    free(p.kv_src);
    gguf_close(s.f);
    return rc ? -1 : 0;
}

