/* mkmodel.c — builds llama GGUF files: seeded random models (with a synthetic
 * SPM vocabulary), function-preserving widenings of real models, re-typed copies.
 * Everything is built as F32 per tensor, then converted and handed to the writer.
 * This file: random models; the rest is beside it (mkmodel_internal.h lists it). */
#include "cli/mkmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random models -------------------------------------------------------- */

void mkmodel_opts_init(mkmodel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->type = -1;
    o->seed = 1;
}

/* Llama-3 frequency factors (the published formula: keep high frequencies,
 * divide low ones by factor, interpolate in between). */
static void llama3_factors(float *out, int n_rot, float base, float factor, float lo, float hi,
                           float orig_ctx)
{
    const double pi = 3.14159265358979323846;
    double lo_wl = orig_ctx / lo, hi_wl = orig_ctx / hi;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = pow(base, -2.0 * i / n_rot);
        double wl = 2 * pi / freq;
        if (wl < hi_wl) out[i] = 1.0f;
        else if (wl > lo_wl) out[i] = factor;
        else {
            double smooth = (orig_ctx / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

/* Emits one random matrix [ne0, ne1] with std 1/sqrt(ne0). */
static int emit_random(emitter *e, uint64_t seed, const char *name, int type, uint64_t ne0, uint64_t ne1)
{
    float *x = mk_falloc(ne0 * ne1, e->err, e->errlen);
    if (!x) return -1;
    mk_fill_normal(x, ne0 * ne1, mk_tensor_key(seed, name), 0, 1.0f / sqrtf((float)ne0));
    int rc = mk_emit(e, name, type, ne0, ne1, x);
    free(x);
    return rc;
}

static int emit_norm(emitter *e, uint64_t seed, const char *name, uint64_t n, float scale)
{
    float *x = mk_falloc(n, e->err, e->errlen);
    if (!x) return -1;
    uint64_t key = mk_tensor_key(seed, name);
    for (uint64_t i = 0; i < n; i++) x[i] = scale * (1.0f + 0.05f * rnd_normal(key, i));
    int rc = mk_emit(e, name, GGML_TYPE_F32, n, 0, x);
    free(x);
    return rc;
}

/* A norm weight of n elements ~ 1 + N(0, 0.29^2): far enough from 1 that a
 * forward pass ignoring it differs visibly. */
static int emit_norm_spread(emitter *e, uint64_t seed, const char *name, uint64_t n)
{
    float *x = mk_falloc(n, e->err, e->errlen);
    if (!x) return -1;
    uint64_t key = mk_tensor_key(seed, name);
    for (uint64_t i = 0; i < n; i++) x[i] = 1.0f + 0.29f * rnd_normal(key, i);
    int rc = mk_emit(e, name, GGML_TYPE_F32, n, 0, x);
    free(x);
    return rc;
}

/* The same keys under another architecture prefix (qwen2.*, qwen3.*). */
static void set_arch_shape(gguf_writer *w, const char *a, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
                           int hd, float eps, float base, int V)
{
    char k[96];
#define AK(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    gguf_writer_set_u32(w, AK("context_length"), (uint32_t)ctx);
    gguf_writer_set_u32(w, AK("embedding_length"), (uint32_t)D);
    gguf_writer_set_u32(w, AK("block_count"), (uint32_t)L);
    gguf_writer_set_u32(w, AK("feed_forward_length"), (uint32_t)FF);
    gguf_writer_set_u32(w, AK("attention.head_count"), (uint32_t)H);
    gguf_writer_set_u32(w, AK("attention.head_count_kv"), (uint32_t)KV);
    gguf_writer_set_u32(w, AK("rope.dimension_count"), (uint32_t)n_rot);
    gguf_writer_set_u32(w, AK("attention.key_length"), (uint32_t)hd);
    gguf_writer_set_u32(w, AK("attention.value_length"), (uint32_t)hd);
    gguf_writer_set_f32(w, AK("attention.layer_norm_rms_epsilon"), eps);
    gguf_writer_set_f32(w, AK("rope.freq_base"), base);
    gguf_writer_set_u32(w, AK("vocab_size"), (uint32_t)V);
#undef AK
}

/* Emits a random bias vector of n elements, std 0.5 (large enough that dropping it shows). */
static int emit_bias(emitter *e, uint64_t seed, const char *name, uint64_t n)
{
    float *x = mk_falloc(n, e->err, e->errlen);
    if (!x) return -1;
    mk_fill_normal(x, n, mk_tensor_key(seed, name), 0, 0.5f);
    int rc = mk_emit(e, name, GGML_TYPE_F32, n, 0, x);
    free(x);
    return rc;
}

/* An EAGLE-3 draft head (engine/model/model.h's eagle3 layout) with random
 * weights: D = --dim (the target's hidden size), V = --vocab embedding rows
 * and output rows, one decoder layer of --heads/--kv-heads/--head-dim/--ff;
 * its norms spread wide so a forward that drops one differs visibly. */
static int mk_eagle3(const char *out_path, const mkmodel_opts *o, mkmodel_info *info, char *err, size_t errlen)
{
    int D = o->dim ? o->dim : 256, H = o->n_heads ? o->n_heads : 8, KV = o->n_kv_heads ? o->n_kv_heads : H;
    int FF = o->ff ? o->ff : (8 * D / 3 + 31) / 32 * 32, V = o->vocab ? o->vocab : 512, ctx = o->ctx ? o->ctx : 2048;
    int type = o->type < 0 ? GGML_TYPE_F32 : o->type;
    float eps = o->eps != 0.0f ? o->eps : 1e-5f, base = o->rope_base != 0.0f ? o->rope_base : 10000.0f;
    if (o->n_layers && o->n_layers != 1) return util_fail(err, errlen, "an eagle3 head has one layer (--layers 1)");
    if (o->tokenizer_path || o->rope_llama3 || o->sliding_window || o->tied || o->chat_template_path)
        return util_fail(err, errlen, "--arch eagle3 takes --dim --heads --kv-heads --head-dim --ff --vocab --ctx "
                         "--type --seed --eps --rope-base --name only");
    if (mk_check_range("--dim", D, 1, MK_MAX_DIM, err, errlen) || mk_check_range("--heads", H, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--kv-heads", KV, 1, MK_MAX_DIM, err, errlen) || mk_check_range("--ff", FF, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--vocab", V, 1, MK_MAX_VOCAB, err, errlen) || mk_check_range("--head-dim", o->head_dim, 0, MK_MAX_DIM, err, errlen))
        return -1;
    if (!type_supported(type)) return util_fail(err, errlen, "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
    if (!o->head_dim && D % H) return util_fail(err, errlen, "--dim %d is not a multiple of --heads %d (or give --head-dim)", D, H);
    int hd = o->head_dim ? o->head_dim : D / H;
    if (hd % 2 || H % KV) return util_fail(err, errlen, "head dim %d must be even and --heads a multiple of --kv-heads", hd);
    int blk = (int)ggml_blck_size(type);
    if (D % blk || FF % blk || (H * hd) % blk)
        return util_fail(err, errlen, "--type %s needs dim, ff and heads*head_dim in multiples of its block of %d "
                         "(fc and the attention's inputs are cut in column parts of whole blocks)", ggml_type_name(type), blk);
    gguf_writer *w = gguf_writer_create();
    emitter e = {w, 0, err, errlen};
    char desc[160];
    gguf_writer_set_str(w, "general.architecture", "eagle3");
    gguf_writer_set_str(w, "general.name", o->name ? o->name : "specd-random-eagle3");
    snprintf(desc, sizeof desc, "RANDOM weights (specd mkmodel, seed %llu): not a trained head", (unsigned long long)o->seed);
    gguf_writer_set_str(w, "general.description", desc);
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    set_arch_shape(w, "eagle3", ctx, D, 1, FF, H, KV, hd, hd, eps, base, V);
    uint64_t s = o->seed;
    int rc = emit_random(&e, s, "token_embd.weight", type, D, V);
    if (!rc) rc = emit_random(&e, s, "fc.weight", type, 3 * (uint64_t)D, D);
    if (!rc) rc = emit_norm_spread(&e, s, "blk.0.attn_norm.weight", D);
    if (!rc) rc = emit_norm_spread(&e, s, "blk.0.hidden_norm.weight", D);
    if (!rc) rc = emit_random(&e, s, "blk.0.attn_q.weight", type, 2 * (uint64_t)D, (uint64_t)H * hd);
    if (!rc) rc = emit_random(&e, s, "blk.0.attn_k.weight", type, 2 * (uint64_t)D, (uint64_t)KV * hd);
    if (!rc) rc = emit_random(&e, s, "blk.0.attn_v.weight", type, 2 * (uint64_t)D, (uint64_t)KV * hd);
    if (!rc) rc = emit_random(&e, s, "blk.0.attn_output.weight", type, (uint64_t)H * hd, D);
    if (!rc) rc = emit_norm_spread(&e, s, "blk.0.ffn_norm.weight", D);
    if (!rc) rc = emit_random(&e, s, "blk.0.ffn_gate.weight", type, D, FF);
    if (!rc) rc = emit_random(&e, s, "blk.0.ffn_up.weight", type, D, FF);
    if (!rc) rc = emit_random(&e, s, "blk.0.ffn_down.weight", type, FF, D);
    if (!rc) rc = emit_norm_spread(&e, s, "output_norm.weight", D);
    if (!rc) rc = emit_random(&e, s, "output.weight", type, D, V);
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    gguf_writer_destroy(w);
    if (rc) return -1;
    if (info) {
        *info = (mkmodel_info){1, D, H, KV, hd, FF, V, ctx, type, false, e.n_params, 0, ""};
        snprintf(info->arch, sizeof info->arch, "eagle3");
        mk_finish_info(info, out_path);
    }
    return 0;
}

int mkmodel_random(const char *out_path, const mkmodel_opts *o, mkmodel_info *info,
                   char *err, size_t errlen)
{
    if (o->arch && !strcmp(o->arch, "eagle3")) return mk_eagle3(out_path, o, info, err, errlen);
    if (err && errlen) err[0] = 0;
    int L = o->n_layers ? o->n_layers : 4;
    int D = o->dim ? o->dim : 256;
    int H = o->n_heads ? o->n_heads : 8;
    int KV = o->n_kv_heads ? o->n_kv_heads : H;
    int FF = o->ff ? o->ff : (8 * D / 3 + 31) / 32 * 32;
    int ctx = o->ctx ? o->ctx : 2048;
    int type = o->type < 0 ? GGML_TYPE_F32 : o->type;
    float eps = o->eps != 0.0f ? o->eps : 1e-5f;
    const char *arch = o->arch ? o->arch : "llama";
    bool qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3"), mistral = !strcmp(arch, "mistral");
    bool qwen = qwen2 || qwen3; /* qwen.* keys, NeoX RoPE, rope base 1e6 */
    if (!qwen && !mistral && strcmp(arch, "llama") != 0)
        return util_fail(err, errlen, "--arch must be llama, qwen2, qwen3 or mistral (got '%s')", arch);
    if (qwen && o->rope_llama3) return util_fail(err, errlen, "--rope-scaling llama3 applies to llama models only");
    if (!mistral && o->sliding_window) return util_fail(err, errlen, "--sliding-window applies to --arch mistral only");
    if (o->sliding_window < 0) return util_fail(err, errlen, "--sliding-window must be positive");
    int window = o->sliding_window ? o->sliding_window : 8;
    float base = o->rope_base != 0.0f ? o->rope_base : o->rope_llama3 ? 500000.0f : qwen ? 1000000.0f : 10000.0f;

    if (mk_check_range("--layers", L, 1, MK_MAX_LAYERS, err, errlen) ||
        mk_check_range("--dim", D, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--heads", H, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--kv-heads", KV, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--ff", FF, 1, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--ctx", ctx, 1, 1 << 24, err, errlen) ||
        mk_check_range("--head-dim", o->head_dim, 0, MK_MAX_DIM, err, errlen) ||
        mk_check_range("--vocab", o->vocab, 0, MK_MAX_VOCAB, err, errlen))
        return -1;
    if (!type_supported(type)) return util_fail(err, errlen, "--type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
    if (!o->head_dim && D % H)
        return util_fail(err, errlen, "--dim %d is not a multiple of --heads %d (or give --head-dim)", D, H);
    int hd = o->head_dim ? o->head_dim : D / H;
    if (hd % 2) return util_fail(err, errlen, "head dim %d must be even (RoPE rotates pairs)", hd);
    if (H % KV) return util_fail(err, errlen, "--heads %d is not a multiple of --kv-heads %d", H, KV);
    if ((uint64_t)H * hd > MK_MAX_DIM) return util_fail(err, errlen, "heads * head dim %d * %d is too large", H, hd);
    if (type == GGML_TYPE_Q8_0 && (D % 32 || FF % 32 || (H * hd) % 32))
        return util_fail(err, errlen, "--type q8_0 needs dim, ff and heads*head_dim to be multiples of 32 "
                    "(dim %d, ff %d, heads*head_dim %d)", D, FF, H * hd);
    if (!(eps > 0.0f) || !isfinite(eps)) return util_fail(err, errlen, "--eps must be a positive number");
    if (!(base > 1.0f) || !isfinite(base)) return util_fail(err, errlen, "--rope-base must be a number > 1");

    gguf_file *tok = NULL;
    int V = o->vocab ? o->vocab : 512;
    if (o->tokenizer_path) {
        char e2[512];
        tok = gguf_open(o->tokenizer_path, NULL, e2, sizeof e2);
        if (!tok) return util_fail(err, errlen, "--tokenizer: %s", e2);
        const gguf_kv *tk = gguf_get_arr(tok, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        if (!tk || tk->arr_n == 0 || tk->arr_n > MK_MAX_VOCAB) {
            gguf_close(tok);
            return util_fail(err, errlen, "--tokenizer %s: no usable tokenizer.ggml.tokens array", o->tokenizer_path);
        }
        if (o->vocab && (uint64_t)o->vocab != tk->arr_n) {
            util_fail(err, errlen, "--vocab %d differs from the %llu tokens of --tokenizer %s",
                 o->vocab, (unsigned long long)tk->arr_n, o->tokenizer_path);
            gguf_close(tok);
            return -1;
        }
        V = (int)tk->arr_n;
    } else if (V < MK_MIN_VOCAB) {
        return util_fail(err, errlen, "--vocab %d is too small: the synthetic tokenizer needs at least %d "
                    "(3 special + 256 byte tokens)", V, MK_MIN_VOCAB);
    }
    int n_rot = hd;
    uint64_t np = mk_count_params(L, D, H, KV, hd, FF, V, o->tied, o->rope_llama3 ? n_rot / 2 : 0);
    if (qwen2) np += (uint64_t)L * (uint64_t)(H + 2 * KV) * hd;
    if (qwen3) np += (uint64_t)L * 2 * (uint64_t)hd;
    if (np > MK_MAX_PARAMS) {
        gguf_close(tok);
        return util_fail(err, errlen, "model of %llu parameters is too large", (unsigned long long)np);
    }

    gguf_writer *w = gguf_writer_create();
    emitter e = {w, 0, err, errlen};
    int rc = 0;
    char desc[160];
    gguf_writer_set_str(w, "general.architecture", qwen ? arch : "llama");
    gguf_writer_set_str(w, "general.name", o->name ? o->name : "specd-random");
    snprintf(desc, sizeof desc, "RANDOM weights (specd mkmodel, seed %llu): not a trained model",
             (unsigned long long)o->seed);
    gguf_writer_set_str(w, "general.description", desc);
    gguf_writer_set_u32(w, "general.file_type", mkmodel_ftype(type));
    if (qwen) {
        set_arch_shape(w, arch, ctx, D, L, FF, H, KV, n_rot, hd, eps, base, V);
    } else {
        mk_set_llama_shape(w, ctx, D, L, FF, H, KV, n_rot, hd, eps, base);
        gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)V);
    }
    if (mistral) gguf_writer_set_u32(w, "llama.attention.sliding_window", (uint32_t)window);
    /* Llama-3 rope scaling is the rope_freqs.weight tensor alone (below), as
     * llama.cpp's converter writes it: llama.cpp aborts on a rope.scaling.type
     * of "llama3" and would apply a rope.scaling.factor as linear scaling. */
    if (tok) rc = mk_copy_kv_prefix(w, tok, "tokenizer.", err, errlen);
    else rc = mk_write_synth_tokenizer(w, (uint32_t)V, err, errlen);
    gguf_close(tok);
    if (!rc && o->chat_template_path) { /* a real template on a test model (after the copy: it wins) */
        FILE *f = fopen(o->chat_template_path, "rb");
        char *t = f ? malloc(1 << 20) : NULL;
        size_t n = t ? fread(t, 1, (1 << 20) - 1, f) : 0;
        if (f) fclose(f);
        if (!t || !n) rc = util_fail(err, errlen, "--chat-template %s: cannot read it (or it is empty)", o->chat_template_path);
        else gguf_writer_set_strn(w, "tokenizer.chat_template", t, n);
        free(t);
    }

    uint64_t s = o->seed;
    if (!rc) rc = emit_random(&e, s, "token_embd.weight", type, D, V);
    if (!rc) rc = emit_norm(&e, s, "output_norm.weight", D, 1.0f);
    if (!rc && !o->tied) rc = emit_random(&e, s, "output.weight", type, D, V);
    if (!rc && o->rope_llama3) {
        float *f = mk_falloc(n_rot / 2, err, errlen);
        if (!f) rc = -1;
        else {
            llama3_factors(f, n_rot, base, 8.0f, 1.0f, 4.0f, 8192.0f);
            rc = mk_emit(&e, "rope_freqs.weight", GGML_TYPE_F32, n_rot / 2, 0, f);
            free(f);
        }
    }
    for (int l = 0; l < L && !rc; l++) {
        char n[64];
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
        rc = emit_norm(&e, s, NM("attn_norm.weight"), D, 1.0f);
        if (!rc) rc = emit_random(&e, s, NM("attn_q.weight"), type, D, (uint64_t)H * hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_k.weight"), type, D, (uint64_t)KV * hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_v.weight"), type, D, (uint64_t)KV * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_q.bias"), (uint64_t)H * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_k.bias"), (uint64_t)KV * hd);
        if (!rc && qwen2) rc = emit_bias(&e, s, NM("attn_v.bias"), (uint64_t)KV * hd);
        /* qwen3: per-head q/k norms, spread wide so that dropping them shows */
        if (!rc && qwen3) rc = emit_norm_spread(&e, s, NM("attn_q_norm.weight"), (uint64_t)hd);
        if (!rc && qwen3) rc = emit_norm_spread(&e, s, NM("attn_k_norm.weight"), (uint64_t)hd);
        if (!rc) rc = emit_random(&e, s, NM("attn_output.weight"), type, (uint64_t)H * hd, D);
        if (!rc) rc = emit_norm(&e, s, NM("ffn_norm.weight"), D, 1.0f);
        if (!rc) rc = emit_random(&e, s, NM("ffn_gate.weight"), type, D, FF);
        if (!rc) rc = emit_random(&e, s, NM("ffn_down.weight"), type, FF, D);
        if (!rc) rc = emit_random(&e, s, NM("ffn_up.weight"), type, D, FF);
#undef NM
    }
    if (!rc) rc = gguf_writer_write(w, out_path, err, errlen);
    gguf_writer_destroy(w);
    if (rc) return -1;
    if (info) {
        *info = (mkmodel_info){L, D, H, KV, hd, FF, V, ctx, type, o->tied, e.n_params, 0, ""};
        snprintf(info->arch, sizeof info->arch, "%s", qwen ? arch : "llama");
        mk_finish_info(info, out_path);
    }
    return 0;
}

