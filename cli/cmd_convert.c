/* cmd_convert.c — `specd convert-eagle3`: a published EAGLE-3 draft head
 * (Hugging Face config.json + safetensors, as SafeAILab's EAGLE code and the
 * RedHat/NVIDIA speculators publish them for llama-family targets) into
 * specd's GGUF side file (engine/model/model.h, arch eagle3), checked against
 * the target GGUF it is for:
 *
 *   specd convert-eagle3 --config config.json --weights model.safetensors
 *                        --target TARGET.gguf -o HEAD.gguf
 *
 * Names read (prefix "midlayer." as SafeAILab writes it, or "layers.0."):
 * fc.weight, {p}input_layernorm, {p}hidden_norm, {p}self_attn.{q,k,v,o}_proj,
 * {p}post_attention_layernorm, {p}mlp.{gate,up,down}_proj, norm.weight,
 * lm_head.weight, d2t (draft id -> target id offsets, when the draft
 * vocabulary is smaller), embed_tokens.weight (optional: else the target's
 * token_embd.weight is copied, as the published heads share the target's).
 * The target's tokenizer.* metadata is copied too, so a loader can check a
 * head against its target's vocabulary as it checks a draft model's.
 * A Linear weight [out, in] is GGUF ne [in, out]: the same bytes. F32, F16
 * and BF16 tensors are kept in their type. Refused, with the reason: a head
 * whose hidden size, vocabulary or layer count does not fit the target, a
 * missing or misshapen tensor, a corrupt safetensors header. */
#include "cli/cmd.h"
#include "engine/gguf/gguf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *buf;               /* the whole file */
    size_t size, data_off;      /* data starts after the 8-byte length and the JSON header */
    json_t *hdr;
} safet;

static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int st_open(safet *s, const char *path, char *err, size_t n) {
    memset(s, 0, sizeof(*s));
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, n, "%s: cannot open it", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz < 8 || !(s->buf = malloc((size_t)sz)) || fread(s->buf, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        return fail(err, n, "%s: cannot read it (or it is shorter than a safetensors header)", path);
    }
    fclose(f);
    s->size = (size_t)sz;
    uint64_t hl;
    memcpy(&hl, s->buf, 8);
    if (hl == 0 || hl > s->size - 8) return fail(err, n, "%s: corrupt safetensors header (length %llu)", path, (unsigned long long)hl);
    json_error_t je;
    s->hdr = json_loadb((const char *)s->buf + 8, (size_t)hl, 0, &je);
    if (!json_is_object(s->hdr)) return fail(err, n, "%s: corrupt safetensors header: %s", path, je.text);
    s->data_off = 8 + (size_t)hl;
    return 0;
}

/* Tensor `name`: its dtype, shape (ne[0] the fastest: safetensors' last
 * dimension first) and bytes; NULL when absent (err set when present but
 * unusable). */
static const uint8_t *st_get(const safet *s, const char *name, char *dtype, uint64_t ne[2], int *nd, char *err, size_t n) {
    json_t *t = json_object_get(s->hdr, name);
    err[0] = 0;
    if (!t) return NULL;
    json_t *dt = json_object_get(t, "dtype"), *sh = json_object_get(t, "shape"), *off = json_object_get(t, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || json_array_size(sh) > 2 || !json_is_array(off) || json_array_size(off) != 2) {
        fail(err, n, "tensor '%s': malformed header entry", name);
        return NULL;
    }
    snprintf(dtype, 8, "%s", json_string_value(dt));
    *nd = (int)json_array_size(sh);
    ne[0] = ne[1] = 1;
    for (int i = 0; i < *nd; i++) ne[*nd - 1 - i] = (uint64_t)json_integer_value(json_array_get(sh, (size_t)i));
    uint64_t a = (uint64_t)json_integer_value(json_array_get(off, 0)), b = (uint64_t)json_integer_value(json_array_get(off, 1));
    int es = !strcmp(dtype, "F32") || !strcmp(dtype, "I32") ? 4 : !strcmp(dtype, "F16") || !strcmp(dtype, "BF16") ? 2
             : !strcmp(dtype, "I64") ? 8 : !strcmp(dtype, "BOOL") ? 1 : 0;
    if (!es) {
        fail(err, n, "tensor '%s': dtype %s is not supported (F32, F16, BF16; I64/I32 for d2t)", name, dtype);
        return NULL;
    }
    if (b < a || s->data_off + b > s->size || b - a != ne[0] * ne[1] * (uint64_t)es) {
        fail(err, n, "tensor '%s': its data offsets [%llu, %llu) do not fit its shape or the file", name,
             (unsigned long long)a, (unsigned long long)b);
        return NULL;
    }
    return s->buf + s->data_off + a;
}

static int cfg_int(json_t *cfg, const char *key, int dflt) {
    json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static double cfg_num(json_t *cfg, const char *key, double dflt) {
    json_t *v = json_object_get(cfg, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static float bf16_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* IEEE half to float, subnormals, infinities and NaN included. */
static float f16_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, b;
    if (e == 0 && m == 0) b = sign;
    else if (e == 0) { /* subnormal: normalize */
        int k = -1;
        do m <<= 1, k++; while (!(m & 1024));
        b = sign | (uint32_t)(112 - k) << 23 | (m & 1023) << 13;
    } else if (e == 31) b = sign | 0x7f800000u | m << 13;
    else b = sign | (e + 112) << 23 | m << 13;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Adds the matrix `src` (expected ne0 x ne1; ne1 0: a vector) under `dst`.
 * heads > 0: the rows are a q or k projection of that many heads in Hugging
 * Face's RoPE convention (rotate-half: dims i and i + hd/2 pair up), and
 * are reordered within each head for specd's adjacent pairs (2i, 2i + 1):
 * new row 2i = row i, new row 2i + 1 = row hd/2 + i. */
static int put(gguf_writer *w, const safet *s, const char *src, const char *dst, uint64_t ne0, uint64_t ne1, int heads,
               char *err, size_t n) {
    char dt[8];
    uint64_t ne[2];
    int nd;
    const uint8_t *p = st_get(s, src, dt, ne, &nd, err, n);
    if (!p) return err[0] ? -1 : fail(err, n, "missing tensor '%s'", src);
    if (ne[0] != ne0 || ne[1] != (ne1 ? ne1 : 1) || nd != (ne1 ? 2 : 1))
        return fail(err, n, "tensor '%s' has shape [%llu, %llu], expected [%llu, %llu] for this target", src,
                    (unsigned long long)ne[1], (unsigned long long)ne[0], (unsigned long long)(ne1 ? ne1 : 1),
                    (unsigned long long)ne0);
    ggml_type t = !strcmp(dt, "F32") ? GGML_TYPE_F32 : !strcmp(dt, "F16") ? GGML_TYPE_F16 : !strcmp(dt, "BF16") ? GGML_TYPE_BF16 : GGML_TYPE_COUNT;
    if (t == GGML_TYPE_COUNT) return fail(err, n, "tensor '%s': dtype %s is not a float type", src, dt);
    if (!ne1 && t != GGML_TYPE_F32) { /* norms: F32 in specd's files */
        float *v = malloc(sizeof(float) * ne0);
        if (!v) return fail(err, n, "out of memory");
        for (uint64_t i = 0; i < ne0; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            v[i] = t == GGML_TYPE_BF16 ? bf16_f32(h) : f16_f32(h);
        }
        uint64_t e1[1] = {ne0};
        return gguf_writer_add_tensor_take(w, dst, GGML_TYPE_F32, 1, e1, v) ? 0 : fail(err, n, "tensor '%s' refused", dst);
    }
    uint64_t e2[2] = {ne0, ne1};
    if (heads > 0 && ne1) {
        uint64_t hd = ne1 / (uint64_t)heads;
        size_t rb = (size_t)ne0 * (t == GGML_TYPE_F32 ? 4 : 2);
        if (hd * (uint64_t)heads != ne1 || hd % 2) return fail(err, n, "tensor '%s': %llu rows are not %d heads of an even size", src, (unsigned long long)ne1, heads);
        uint8_t *q = malloc(rb * ne1);
        if (!q) return fail(err, n, "out of memory");
        for (uint64_t h = 0; h < (uint64_t)heads; h++)
            for (uint64_t i = 0; i < hd / 2; i++) {
                memcpy(q + (h * hd + 2 * i) * rb, p + (h * hd + i) * rb, rb);
                memcpy(q + (h * hd + 2 * i + 1) * rb, p + (h * hd + hd / 2 + i) * rb, rb);
            }
        return gguf_writer_add_tensor_take(w, dst, t, 2, e2, q) ? 0 : fail(err, n, "tensor '%s' refused", dst);
    }
    return gguf_writer_add_tensor(w, dst, t, ne1 ? 2 : 1, e2, p) ? 0 : fail(err, n, "tensor '%s' refused", dst);
}

static int convert(const char *cfg_path, const char *st_path, const char *target_path, const char *out, char *err,
                   size_t n) {
    json_error_t je;
    json_t *cfg = json_load_file(cfg_path, 0, &je);
    if (!json_is_object(cfg)) return fail(err, n, "%s: not a JSON object (%s)", cfg_path, je.text);
    int D = cfg_int(cfg, "hidden_size", 0), H = cfg_int(cfg, "num_attention_heads", 0);
    int KV = cfg_int(cfg, "num_key_value_heads", H), F = cfg_int(cfg, "intermediate_size", 0);
    int L = cfg_int(cfg, "num_hidden_layers", 1), V = cfg_int(cfg, "vocab_size", 0);
    int Vd = cfg_int(cfg, "draft_vocab_size", V), hd = cfg_int(cfg, "head_dim", H ? D / H : 0);
    int ctx = cfg_int(cfg, "max_position_embeddings", 2048);
    double eps = cfg_num(cfg, "rms_norm_eps", 1e-5), theta = cfg_num(cfg, "rope_theta", 10000.0);
    int rc = -1;
    gguf_file *tg = NULL;
    gguf_writer *w = NULL;
    safet s = {0};
    if (D <= 0 || H <= 0 || KV <= 0 || F <= 0 || V <= 0 || Vd <= 0 || Vd > V || hd <= 0 || H % KV) {
        fail(err, n, "%s: hidden_size, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size "
             "(and draft_vocab_size <= vocab_size) must be given and consistent", cfg_path);
        goto out;
    }
    if (L != 1) {
        fail(err, n, "%s: %d decoder layers; specd's eagle3 heads have one (num_hidden_layers 1)", cfg_path, L);
        goto out;
    }
    char sub[512];
    if (!(tg = gguf_open(target_path, NULL, sub, sizeof(sub)))) {
        fail(err, n, "%s", sub);
        goto out;
    }
    const gguf_tensor *te = gguf_find_tensor(tg, "token_embd.weight");
    if (!te) {
        fail(err, n, "%s: the target has no token_embd.weight", target_path);
        goto out;
    }
    if (te->ne[0] != (uint64_t)D || te->ne[1] != (uint64_t)V) {
        fail(err, n, "this head is for a target of hidden size %d and %d tokens; %s has %llu and %llu", D, V,
             target_path, (unsigned long long)te->ne[0], (unsigned long long)te->ne[1]);
        goto out;
    }
    if (st_open(&s, st_path, err, n)) goto out;
    const char *pre = "layers.0.", *key;
    json_t *val;
    json_object_foreach(s.hdr, key, val)
        if (!strncmp(key, "midlayer.", 9)) pre = "midlayer."; /* SafeAILab's name for the one layer */
    w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "eagle3");
    char nm[160];
    gguf_writer_set_str(w, "general.name", "eagle3 head (converted)");
    /* the target's tokenizer (tokenizer.*), so a loader can check the head
     * against its target as a draft model's vocabulary is checked */
    char arch_prefix[48] = "";
    if (gguf_get_cstr(tg, "general.architecture", arch_prefix, sizeof(arch_prefix) - 1)) strcat(arch_prefix, ".");
    const char *skip[] = {"general.", arch_prefix[0] ? arch_prefix : "llama.", "split.", NULL};
    gguf_writer_copy_kv(w, tg, skip);
#define U32(k, v) gguf_writer_set_u32(w, "eagle3." k, (uint32_t)(v))
    U32("context_length", ctx);
    U32("embedding_length", D);
    U32("block_count", 1);
    U32("feed_forward_length", F);
    U32("attention.head_count", H);
    U32("attention.head_count_kv", KV);
    U32("attention.key_length", hd);
    U32("attention.value_length", hd);
    U32("rope.dimension_count", hd);
    U32("vocab_size", Vd);
#undef U32
    gguf_writer_set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", (float)eps);
    gguf_writer_set_f32(w, "eagle3.rope.freq_base", (float)theta);
    /* RoPE scaling as the target's (Llama 3.1 heads carry llama3 scaling) */
    json_t *rs = json_object_get(cfg, "rope_scaling");
    if (json_is_object(rs)) {
        json_t *ty = json_object_get(rs, "rope_type");
        if (!json_is_string(ty)) ty = json_object_get(rs, "type");
        const char *t = json_is_string(ty) ? json_string_value(ty) : "";
        double factor = cfg_num(rs, "factor", 1.0);
        if (!strcmp(t, "llama3")) {
            gguf_writer_set_str(w, "eagle3.rope.scaling.type", "llama3");
            gguf_writer_set_f32(w, "eagle3.rope.scaling.factor", (float)factor);
            gguf_writer_set_f32(w, "eagle3.rope.scaling.low_freq_factor", (float)cfg_num(rs, "low_freq_factor", 1.0));
            gguf_writer_set_f32(w, "eagle3.rope.scaling.high_freq_factor", (float)cfg_num(rs, "high_freq_factor", 4.0));
            gguf_writer_set_u32(w, "eagle3.rope.scaling.original_context_length",
                                (uint32_t)cfg_int(rs, "original_max_position_embeddings", 8192));
        } else if (!strcmp(t, "linear")) {
            gguf_writer_set_str(w, "eagle3.rope.scaling.type", "linear");
            gguf_writer_set_f32(w, "eagle3.rope.scaling.factor", (float)factor);
        } else if (t[0] && strcmp(t, "default") != 0) {
            fail(err, n, "%s: rope_scaling type '%s' is not supported (llama3, linear)", cfg_path, t);
            goto out;
        }
    }
    uint64_t QD = (uint64_t)H * hd, KVD = (uint64_t)KV * hd;
    struct { const char *src; const char *dst; uint64_t ne0, ne1; bool layer; int heads; } map[] = {
        {"fc.weight", "fc.weight", 3 * (uint64_t)D, (uint64_t)D, false, 0},
        {"input_layernorm.weight", "blk.0.attn_norm.weight", (uint64_t)D, 0, true, 0},
        {"hidden_norm.weight", "blk.0.hidden_norm.weight", (uint64_t)D, 0, true, 0},
        {"self_attn.q_proj.weight", "blk.0.attn_q.weight", 2 * (uint64_t)D, QD, true, H},
        {"self_attn.k_proj.weight", "blk.0.attn_k.weight", 2 * (uint64_t)D, KVD, true, KV},
        {"self_attn.v_proj.weight", "blk.0.attn_v.weight", 2 * (uint64_t)D, KVD, true, 0},
        {"self_attn.o_proj.weight", "blk.0.attn_output.weight", QD, (uint64_t)D, true, 0},
        {"post_attention_layernorm.weight", "blk.0.ffn_norm.weight", (uint64_t)D, 0, true, 0},
        {"mlp.gate_proj.weight", "blk.0.ffn_gate.weight", (uint64_t)D, (uint64_t)F, true, 0},
        {"mlp.up_proj.weight", "blk.0.ffn_up.weight", (uint64_t)D, (uint64_t)F, true, 0},
        {"mlp.down_proj.weight", "blk.0.ffn_down.weight", (uint64_t)F, (uint64_t)D, true, 0},
        {"norm.weight", "output_norm.weight", (uint64_t)D, 0, false, 0},
        {"lm_head.weight", "output.weight", (uint64_t)D, (uint64_t)Vd, false, 0},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        snprintf(nm, sizeof nm, "%s%s", map[i].layer ? pre : "", map[i].src);
        if (put(w, &s, nm, map[i].dst, map[i].ne0, map[i].ne1, map[i].heads, err, n)) goto out;
    }
    /* the embedding: the head's own when it has one, else the target's */
    if (json_object_get(s.hdr, "embed_tokens.weight")) {
        if (put(w, &s, "embed_tokens.weight", "token_embd.weight", (uint64_t)D, (uint64_t)V, 0, err, n)) goto out;
    } else if (!gguf_writer_add_tensor(w, "token_embd.weight", te->type, 2, (const uint64_t[]){te->ne[0], te->ne[1]}, te->data)) {
        fail(err, n, "token_embd.weight refused");
        goto out;
    }
    /* d2t: target id = draft id + d2t[draft id] */
    char dt[8];
    uint64_t ne[2];
    int nd;
    const uint8_t *p = st_get(&s, "d2t", dt, ne, &nd, err, n);
    if (err[0]) goto out;
    if (Vd < V && !p) {
        fail(err, n, "a draft vocabulary of %d < %d tokens needs the d2t map", Vd, V);
        goto out;
    }
    if (p) {
        if (nd != 1 || ne[0] != (uint64_t)Vd || (strcmp(dt, "I64") && strcmp(dt, "I32"))) {
            fail(err, n, "d2t must be %d integers", Vd);
            goto out;
        }
        int32_t *map32 = malloc(sizeof(int32_t) * (size_t)Vd);
        if (!map32) {
            fail(err, n, "out of memory");
            goto out;
        }
        for (int i = 0; i < Vd; i++) {
            int64_t off = 0;
            if (!strcmp(dt, "I64")) memcpy(&off, p + 8 * (size_t)i, 8);
            else {
                int32_t o32;
                memcpy(&o32, p + 4 * (size_t)i, 4);
                off = o32;
            }
            if (i + off < 0 || i + off >= V) {
                free(map32);
                fail(err, n, "d2t maps draft token %d outside the target's %d tokens", i, V);
                goto out;
            }
            map32[i] = (int32_t)(i + off); /* specd stores the target ids themselves */
        }
        if (!gguf_writer_add_tensor_take(w, "d2t", GGML_TYPE_I32, 1, (const uint64_t[]){(uint64_t)Vd}, map32)) {
            fail(err, n, "d2t refused");
            goto out;
        }
    }
    rc = gguf_writer_write(w, out, err, n);
out:
    gguf_writer_destroy(w);
    gguf_close(tg);
    json_decref(s.hdr);
    free(s.buf);
    json_decref(cfg);
    return rc;
}

int cmd_convert_eagle3(int argc, char **argv) {
    const char *cfg = NULL, *weights = NULL, *target = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: specd convert-eagle3 --config config.json --weights model.safetensors --target TARGET.gguf "
                   "-o HEAD.gguf\n  a published EAGLE-3 head (Hugging Face layout) as specd's eagle3 GGUF side file\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "specd convert-eagle3: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--config")) cfg = v;
        else if (!strcmp(a, "--weights")) weights = v;
        else if (!strcmp(a, "--target")) target = v;
        else if (!strcmp(a, "-o")) out = v;
        else {
            fprintf(stderr, "specd convert-eagle3: unknown option %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (!cfg || !weights || !target || !out) {
        fprintf(stderr, "specd convert-eagle3: --config, --weights, --target and -o are all needed (see --help)\n");
        return 2;
    }
    char err[1024];
    if (convert(cfg, weights, target, out, err, sizeof err) != 0) {
        fprintf(stderr, "specd convert-eagle3: %s\n", err);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", out);
    return 0;
}
