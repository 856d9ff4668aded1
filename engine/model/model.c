/* model.c — llama-family (llama, mistral, qwen2, qwen3) model loading (validate metadata and tensor shapes, point
 * into the mmap; for tensor parallelism, slice per shard) and the batched forward pass (see model.h). */
#include "engine/model/model.h"
#include "engine/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MODEL_MAX_CTX_DEFAULT 4096

static bool type_supported(int t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0 ||
           t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

/* Hands a tensor to shard sh's backend (upload on GPU backends) and remembers it for model_free. */
static const void *be_weight(model_shard *sh, const void *host, int *type, uint64_t rows, uint64_t cols, engine_status *st, char *err,
                             size_t n) {
    if (sh->n_wrefs == sh->cap_wrefs) {
        int cap = sh->cap_wrefs ? 2 * sh->cap_wrefs : 64;
        struct model_wref *r = realloc(sh->wrefs, (size_t)cap * sizeof(*r));
        if (!r) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: weight table of %d entries", cap), NULL;
        sh->wrefs = r;
        sh->cap_wrefs = cap;
    }
    const void *w = sh->be->i->weight(sh->be, host, type, (int64_t)rows, (int64_t)cols);
    if (!w) {
        util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: the %s backend cannot hold a %llu x %llu %s tensor", sh->be->i->name,
                  (unsigned long long)rows, (unsigned long long)cols, ggml_type_name(*type));
        return NULL;
    }
    sh->wrefs[sh->n_wrefs++] = (struct model_wref){host, w};
    return w;
}

/* How a tensor is divided over the shards. */
typedef enum {
    SPLIT_NONE, /* replicated */
    SPLIT_ROWS, /* shard r: rows [r*rows/N, (r+1)*rows/N), a pointer into the mapping */
    SPLIT_COLS, /* shard r: columns [r*cols/N, (r+1)*cols/N) of every row, copied into a buffer the shard owns */
} split_kind;

/* A contiguous copy of columns [c0, c0 + cols) of every one of `rows` rows of
 * row_bytes each (the column range is whole blocks: slice_bytes per row starting
 * at byte col_off), kept in sh->slices. */
static const void *col_slice(model_shard *sh, const uint8_t *src, uint64_t rows, size_t row_bytes, size_t col_off,
                             size_t slice_bytes, engine_status *st, char *err, size_t n) {
    if (sh->n_slices == sh->cap_slices) {
        int cap = sh->cap_slices ? 2 * sh->cap_slices : 16;
        void **p = realloc(sh->slices, (size_t)cap * sizeof(*p));
        if (!p) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: weight slice table of %d entries", cap), NULL;
        sh->slices = p;
        sh->cap_slices = cap;
    }
    size_t bytes = (size_t)rows * slice_bytes;
    uint8_t *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!dst) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: a %zu-byte weight slice", bytes), NULL;
    for (uint64_t i = 0; i < rows; i++) memcpy(dst + i * slice_bytes, src + i * row_bytes + col_off, slice_bytes);
    sh->slices[sh->n_slices++] = dst;
    return dst;
}

/* Finds `name`, checks it is a (ne0, ne1) matrix of a supported type and hands
 * shard r's part of it (see split_kind) to that shard's backend. */
static int get_mat(model *m, int r, const gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1, split_kind split,
                   model_mat *out, bool optional, engine_status *st, char *err, size_t n) {
    model_shard *sh = &m->shards[r];
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (optional) {
            out->w = NULL;
            return 0;
        }
        return util_fail(err, n, "missing tensor '%s'", name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return util_fail(err, n, "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                          (unsigned long long)t->ne[3], (unsigned long long)ne0, (unsigned long long)ne1);
    if (!type_supported(t->type))
        return util_fail(err, n, "tensor '%s' has type %s, which specd cannot compute with yet (supported: F32, F16, "
                          "BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)", name, ggml_type_name(t->type));
    size_t row_bytes = ggml_row_size(t->type, ne0);
    if (row_bytes == 0)
        return util_fail(err, n, "tensor '%s': %s rows of %llu are not whole blocks", name, ggml_type_name(t->type),
                          (unsigned long long)ne0);
    int N = m->n_shards;
    const void *host = t->data;
    uint64_t rows = ne1, cols = ne0;
    if (N > 1 && split == SPLIT_ROWS) {
        rows = ne1 / (uint64_t)N;
        host = (const uint8_t *)t->data + (size_t)r * rows * row_bytes;
    } else if (N > 1 && split == SPLIT_COLS) {
        cols = ne0 / (uint64_t)N;
        size_t slice_bytes = ggml_row_size(t->type, cols);
        if (slice_bytes == 0)
            return util_fail(err, n, "tensor parallelism over %d shards: tensor '%s' (%s, %llu columns) would be "
                              "cut into column slices of %llu, not whole %s blocks of %u; pick a shard count that "
                              "leaves whole blocks", N, name, ggml_type_name(t->type), (unsigned long long)ne0,
                              (unsigned long long)cols, ggml_type_name(t->type), ggml_blck_size(t->type));
        host = col_slice(sh, t->data, rows, row_bytes, (size_t)r * slice_bytes, slice_bytes, st, err, n);
        if (!host) return -1;
    }
    out->type = out->file_type = t->type;
    out->w = be_weight(sh, host, &out->type, rows, cols, st, err, n);
    return out->w ? 0 : -1;
}

/* Column part `part` of `parts` equal parts of the (ne0, ne1) matrix `name`,
 * as a (ne0 / parts, ne1) matrix of its own (eagle3: the halves of the
 * attention's 2D-wide input, the thirds of fc). Unsharded models only. */
static int get_mat_part(model *m, const gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1, int part, int parts,
                        model_mat *out, engine_status *st, char *err, size_t n) {
    model_shard *sh = &m->shards[0];
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return util_fail(err, n, "missing tensor '%s'", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return util_fail(err, n, "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                          (unsigned long long)t->ne[3], (unsigned long long)ne0, (unsigned long long)ne1);
    if (!type_supported(t->type))
        return util_fail(err, n, "tensor '%s' has type %s, which specd cannot compute with yet", name,
                          ggml_type_name(t->type));
    uint64_t cols = ne0 / (uint64_t)parts;
    size_t row_bytes = ggml_row_size(t->type, ne0), slice_bytes = ggml_row_size(t->type, cols);
    if (row_bytes == 0 || slice_bytes == 0)
        return util_fail(err, n, "tensor '%s': its %d column parts of %llu are not whole %s blocks", name, parts,
                          (unsigned long long)cols, ggml_type_name(t->type));
    const void *host = col_slice(sh, t->data, ne1, row_bytes, (size_t)part * slice_bytes, slice_bytes, st, err, n);
    if (!host) return -1;
    out->type = out->file_type = t->type;
    out->w = be_weight(sh, host, &out->type, ne1, cols, st, err, n);
    return out->w ? 0 : -1;
}

/* An F32 vector, whole (SPLIT_NONE) or shard r's slice [r*ne0/N, (r+1)*ne0/N) (SPLIT_ROWS). */
static int get_vec(model *m, int r, const gguf_file *f, const char *name, uint64_t ne0, split_kind split,
                   const float **out, engine_status *st, char *err, size_t n) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return util_fail(err, n, "missing tensor '%s'", name);
    if (t->ne[0] != ne0 || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return util_fail(err, n, "tensor '%s' has %llu x %llu elements, expected a vector of %llu", name,
                          (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)ne0);
    if (t->type != GGML_TYPE_F32)
        return util_fail(err, n, "tensor '%s' must be F32, is %s", name, ggml_type_name(t->type));
    if ((uintptr_t)t->data % sizeof(float))
        return util_fail(err, n, "tensor '%s' is not 4-byte aligned in the file", name);
    const float *host = t->data;
    if (m->n_shards > 1 && split == SPLIT_ROWS) {
        ne0 /= (uint64_t)m->n_shards;
        host += (size_t)r * ne0;
    }
    int type = GGML_TYPE_F32;
    *out = be_weight(&m->shards[r], host, &type, 1, ne0, st, err, n);
    return *out ? 0 : -1;
}

/* An optional (or, with required, mandatory) F32 bias vector, shard r's rows; *out = NULL when absent. */
static int get_bias(model *m, int r, const gguf_file *f, const char *name, uint64_t ne0, const float **out,
                    bool required, engine_status *st, char *err, size_t n) {
    *out = NULL;
    if (!required && !gguf_find_tensor(f, name)) return 0;
    return get_vec(m, r, f, name, ne0, SPLIT_ROWS, out, st, err, n);
}

/* x (M, N) += b (N) on every row (through the backend's add, one row at a time). */
static void add_bias(const backend_i *op, backend *be, float *x, const float *b, int M, int N) {
    if (!b) return;
    for (int r = 0; r < M; r++) op->add(be, x + (size_t)r * N, b, 1, N);
}

static bool arch_u32(const gguf_file *f, const char *arch, const char *key, uint32_t *out) {
    char k[160];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return gguf_get_u32(f, k, out);
}

static bool arch_f32(const gguf_file *f, const char *arch, const char *key, float *out) {
    char k[160];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    return gguf_get_f32(f, k, out);
}

/* eagle3: its own output vocabulary (the draft's), one decoder layer; what a
 * llama.cpp-converted head leaves out (token_embd, output) from the lender,
 * what specd cannot compute refused (model.h). */
static int eagle3_hparams(model *m, const gguf_tensor *te, char *err, size_t n) {
    const gguf_file *f = m->gguf;
    model_hparams *hp = &m->hp;
    const gguf_tensor *to = gguf_find_tensor(f, "output.weight");
    if ((!te || !to) && !m->lender)
        return util_fail(err, n, "this eagle3 head has no '%s' of its own (llama.cpp's converter leaves it out when "
                          "the head shares its target's): it loads only beside its target", te ? "output.weight"
                                                                                               : "token_embd.weight");
    if ((!te || !to) && m->lender->hp.dim != hp->dim)
        return util_fail(err, n, "this eagle3 head (hidden size %d) would use its target's %s, but the target's "
                          "hidden size is %d", hp->dim, te ? "output head" : "token embedding", m->lender->hp.dim);
    if (!te) hp->n_vocab_in = m->lender->hp.n_vocab_in;
    if (to) {
        if (to->ne[1] == 0 || to->ne[1] > (1u << 24)) return util_fail(err, n, "implausible draft vocabulary size");
        hp->n_vocab = (int)to->ne[1];
    } else {
        hp->n_vocab = m->lender->hp.n_vocab;
    }
    if (hp->n_layer != 1) return util_fail(err, n, "an eagle3 head has one decoder layer, not %d", hp->n_layer);
    bool nbr = false;
    if (gguf_get_bool(f, "eagle3.norm_before_residual", &nbr) && nbr)
        return util_fail(err, n, "this eagle3 head sets eagle3.norm_before_residual (its residual starts from the "
                          "normed feature), which specd does not compute");
    if (gguf_find_tensor(f, "fc_norm.weight"))
        return util_fail(err, n, "this eagle3 head normalises each target layer before fc (fc_norm.weight), which "
                          "specd does not compute");
    uint32_t th;
    if (gguf_get_u32(f, "eagle3.target_hidden_size", &th) && (int)th != hp->dim)
        return util_fail(err, n, "this eagle3 head reads target features of width %u, not its own hidden size %d "
                          "(specd's heads need the two equal)", th, hp->dim);
    return 0;
}

/* Reads hyperparameters and checks they are mutually consistent. */
static int load_hparams(model *m, char *err, size_t n) {
    const gguf_file *f = m->gguf;
    model_hparams *hp = &m->hp;
    if (!gguf_get_cstr(f, "general.architecture", m->arch, sizeof(m->arch)))
        return util_fail(err, n, "metadata has no general.architecture");
    if (strcmp(m->arch, "llama") != 0 && strcmp(m->arch, "mistral") != 0 && strcmp(m->arch, "qwen2") != 0 &&
        strcmp(m->arch, "qwen3") != 0 && strcmp(m->arch, "eagle3") != 0)
        return util_fail(err, n, "architecture '%s' is not supported yet (supported: llama, mistral, qwen2, qwen3; "
                          "eagle3 draft heads)", m->arch);
    hp->eagle3 = !strcmp(m->arch, "eagle3");
    if (!gguf_get_cstr(f, "general.name", m->name, sizeof(m->name))) snprintf(m->name, sizeof(m->name), "%s", "unnamed");
    const char *a = m->arch;
    uint32_t v;
    struct { const char *key; int *dst; } req[] = {
        {"embedding_length", &hp->dim},        {"block_count", &hp->n_layer},
        {"feed_forward_length", &hp->ff},      {"attention.head_count", &hp->n_head},
    };
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        if (!arch_u32(f, a, req[i].key, &v) || v == 0 || v > (1u << 20))
            return util_fail(err, n, "metadata %s.%s is missing or out of range", a, req[i].key);
        *req[i].dst = (int)v;
    }
    hp->n_kv_head = arch_u32(f, a, "attention.head_count_kv", &v) ? (int)v : hp->n_head;
    if (hp->n_kv_head <= 0 || hp->n_head % hp->n_kv_head)
        return util_fail(err, n, "%d heads are not a multiple of %d kv heads", hp->n_head, hp->n_kv_head);
    hp->head_dim = arch_u32(f, a, "attention.key_length", &v) ? (int)v : hp->dim / hp->n_head;
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2)
        return util_fail(err, n, "head dimension %d is not supported", hp->head_dim);
    if (arch_u32(f, a, "attention.value_length", &v) && (int)v != hp->head_dim)
        return util_fail(err, n, "value_length %u differs from key_length %d (not supported)", v, hp->head_dim);
    hp->n_rot = arch_u32(f, a, "rope.dimension_count", &v) ? (int)v : hp->head_dim;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return util_fail(err, n, "rope dimension count %d is invalid for head dim %d", hp->n_rot, hp->head_dim);
    hp->n_ctx_train = arch_u32(f, a, "context_length", &v) ? (int)v : 2048;
    if (!arch_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->eps)) hp->eps = 1e-5f;
    if (!arch_f32(f, a, "rope.freq_base", &hp->rope_base)) hp->rope_base = 10000.0f;
    if (!(hp->eps > 0) || !(hp->rope_base > 0)) return util_fail(err, n, "rms epsilon or rope base is not positive");
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te && !hp->eagle3) return util_fail(err, n, "missing tensor 'token_embd.weight'");
    if (te) {
        if (te->ne[1] == 0 || te->ne[1] > (1u << 24)) return util_fail(err, n, "implausible vocabulary size");
        hp->n_vocab = hp->n_vocab_in = (int)te->ne[1];
    }
    if (hp->eagle3 && eagle3_hparams(m, te, err, n)) return -1;
    /* qwen2 and qwen3 rotate NeoX-style (pairs i, i + n_rot/2); llama and mistral adjacent pairs */
    bool qwen = !strcmp(a, "qwen2") || !strcmp(a, "qwen3");
    hp->rope_neox = qwen;
    hp->qk_norm = !strcmp(a, "qwen3");
    hp->sliding_window = 0;
    if (!qwen && arch_u32(f, a, "attention.sliding_window", &v)) {
        if (v > (1u << 30)) return util_fail(err, n, "metadata %s.attention.sliding_window %u is out of range", a, v);
        hp->sliding_window = (int)v;
    }
    return 0;
}

/* RoPE frequencies, with Llama-3 style per-frequency factors (rope_freqs.weight
 * or computed from rope.scaling.* metadata) and linear position scaling. */
static int load_rope(model *m, engine_status *st, char *err, size_t n) {
    const gguf_file *f = m->gguf;
    model_hparams *hp = &m->hp;
    int half = hp->n_rot / 2;
    m->inv_freq = malloc((size_t)half * sizeof(float));
    if (!m->inv_freq) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: RoPE frequency table");
    m->rope_pos_scale = 1.0f;
    for (int i = 0; i < half; i++) m->inv_freq[i] = (float)pow(hp->rope_base, -2.0 * i / hp->n_rot);

    char stype[32] = "";
    char key[160];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->arch);
    gguf_get_cstr(f, key, stype, sizeof(stype));
    float factor = 1.0f;
    arch_f32(f, m->arch, "rope.scaling.factor", &factor);

    const gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    if (rf) {
        if (rf->type != GGML_TYPE_F32 || rf->ne[0] != (uint64_t)half || rf->ne[1] != 1)
            return util_fail(err, n, "rope_freqs.weight must be F32 with %d elements", half);
        for (int i = 0; i < half; i++) {
            float fac;
            memcpy(&fac, (const float *)rf->data + i, 4);
            if (!(fac > 0)) return util_fail(err, n, "rope_freqs.weight[%d] is not positive", i);
            m->inv_freq[i] /= fac;
        }
    } else if (!strcmp(stype, "llama3")) {
        float lo = 1.0f, hi = 4.0f;
        uint32_t orig = 8192;
        arch_f32(f, m->arch, "rope.scaling.low_freq_factor", &lo);
        arch_f32(f, m->arch, "rope.scaling.high_freq_factor", &hi);
        arch_u32(f, m->arch, "rope.scaling.original_context_length", &orig);
        if (!(factor > 0) || !(lo > 0) || !(hi > lo) || orig == 0)
            return util_fail(err, n, "llama3 rope scaling parameters are invalid");
        double lo_wavelen = orig / lo, hi_wavelen = orig / hi;
        for (int i = 0; i < half; i++) {
            double fr = m->inv_freq[i], wavelen = 2 * M_PI / fr;
            if (wavelen < hi_wavelen) continue;
            if (wavelen > lo_wavelen) {
                fr /= factor;
            } else {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                fr = (1 - smooth) * fr / factor + smooth * fr;
            }
            m->inv_freq[i] = (float)fr;
        }
    } else if (!strcmp(stype, "linear")) {
        if (!(factor > 0)) return util_fail(err, n, "linear rope scaling factor must be positive");
        m->rope_pos_scale = 1.0f / factor;
        for (int i = 0; i < half; i++) m->inv_freq[i] *= m->rope_pos_scale;
    } else if (stype[0] && strcmp(stype, "none") != 0) {
        return util_fail(err, n, "rope scaling type '%s' is not supported (none, linear, llama3)", stype);
    }
    return 0;
}

/* An eagle3 head's tensors (model.h). */
static int load_eagle3(model *m, engine_status *st, char *err, size_t n) {
    const gguf_file *f = m->gguf;
    const model_hparams *hp = &m->hp;
    model_shard *sh = &m->shards[0];
    uint64_t D = (uint64_t)hp->dim, QD = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t KVD = (uint64_t)hp->n_kv_head * hp->head_dim, F = (uint64_t)hp->ff;
    /* what the file leaves out is the lender's (eagle3_hparams checked it is there), never released here */
    const model_shard *ls = m->lender ? &m->lender->shards[0] : NULL;
    if (!gguf_find_tensor(f, "token_embd.weight")) sh->tok_embd = ls->tok_embd;
    else if (get_mat(m, 0, f, "token_embd.weight", D, (uint64_t)hp->n_vocab_in, SPLIT_NONE, &sh->tok_embd, false, st,
                     err, n))
        return -1;
    if (!gguf_find_tensor(f, "output.weight")) sh->output = ls->output;
    else if (get_mat(m, 0, f, "output.weight", D, (uint64_t)hp->n_vocab, SPLIT_NONE, &sh->output, false, st, err, n))
        return -1;
    if (get_vec(m, 0, f, "output_norm.weight", D, SPLIT_NONE, &sh->out_norm, st, err, n)) return -1;
    /* specd writes the feature's norm as blk.0.hidden_norm, llama.cpp as blk.0.attn_norm_2 */
    const char *hn = gguf_find_tensor(f, "blk.0.hidden_norm.weight") || !gguf_find_tensor(f, "blk.0.attn_norm_2.weight")
                         ? "blk.0.hidden_norm.weight" : "blk.0.attn_norm_2.weight";
    for (int j = 0; j < MODEL_EAGLE3_PARTS; j++)
        if (get_mat_part(m, f, "fc.weight", MODEL_EAGLE3_PARTS * D, D, j, MODEL_EAGLE3_PARTS, &sh->fc[j], st, err, n))
            return -1;
    int type = GGML_TYPE_F32;
    sh->inv_freq_be = be_weight(sh, m->inv_freq, &type, 1, (uint64_t)(hp->n_rot / 2), st, err, n);
    if (!sh->inv_freq_be) return -1;
    if (!(sh->layers = calloc(1, sizeof(model_layer)))) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: layer table");
    model_layer *L = &sh->layers[0];
    if (get_vec(m, 0, f, "blk.0.attn_norm.weight", D, SPLIT_NONE, &L->attn_norm, st, err, n) ||
        get_vec(m, 0, f, hn, D, SPLIT_NONE, &L->hidden_norm, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_q.weight", 2 * D, QD, 0, 2, &L->wq, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_q.weight", 2 * D, QD, 1, 2, &L->wq_h, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_k.weight", 2 * D, KVD, 0, 2, &L->wk, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_k.weight", 2 * D, KVD, 1, 2, &L->wk_h, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_v.weight", 2 * D, KVD, 0, 2, &L->wv, st, err, n) ||
        get_mat_part(m, f, "blk.0.attn_v.weight", 2 * D, KVD, 1, 2, &L->wv_h, st, err, n) ||
        get_mat(m, 0, f, "blk.0.attn_output.weight", QD, D, SPLIT_NONE, &L->wo, false, st, err, n) ||
        get_vec(m, 0, f, "blk.0.ffn_norm.weight", D, SPLIT_NONE, &L->ffn_norm, st, err, n) ||
        get_mat(m, 0, f, "blk.0.ffn_gate.weight", D, F, SPLIT_NONE, &L->w_gate, false, st, err, n) ||
        get_mat(m, 0, f, "blk.0.ffn_up.weight", D, F, SPLIT_NONE, &L->w_up, false, st, err, n) ||
        get_mat(m, 0, f, "blk.0.ffn_down.weight", F, D, SPLIT_NONE, &L->w_down, false, st, err, n))
        return -1;
    return 0;
}

/* Shard r's tensors: its slices of the layers, the replicated rest. */
static int load_shard_tensors(model *m, int r, engine_status *st, char *err, size_t n) {
    const gguf_file *f = m->gguf;
    const model_hparams *hp = &m->hp;
    model_shard *sh = &m->shards[r];
    uint64_t D = (uint64_t)hp->dim, QD = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t KVD = (uint64_t)hp->n_kv_head * hp->head_dim, F = (uint64_t)hp->ff, V = (uint64_t)hp->n_vocab;
    if (hp->eagle3) {
        if (m->n_shards > 1) return util_fail(err, n, "an eagle3 head runs on one shard");
        return load_eagle3(m, st, err, n);
    }
    if (get_mat(m, r, f, "token_embd.weight", D, V, SPLIT_NONE, &sh->tok_embd, false, st, err, n)) return -1;
    if (get_vec(m, r, f, "output_norm.weight", D, SPLIT_NONE, &sh->out_norm, st, err, n)) return -1;
    if (get_mat(m, r, f, "output.weight", D, V, SPLIT_NONE, &sh->output, true, st, err, n)) return -1;
    m->tied = sh->output.w == NULL;
    if (m->tied) sh->output = sh->tok_embd;
    int type = GGML_TYPE_F32;
    sh->inv_freq_be = be_weight(sh, m->inv_freq, &type, 1, (uint64_t)(hp->n_rot / 2), st, err, n);
    if (!sh->inv_freq_be) return -1;
    sh->layers = calloc((size_t)hp->n_layer, sizeof(model_layer));
    if (!sh->layers) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: layer table");
    bool need_bias = !strcmp(m->arch, "qwen2");
    for (int l = 0; l < hp->n_layer; l++) {
        model_layer *L = &sh->layers[l];
        char nm[96];
#define LNAME(s) (snprintf(nm, sizeof(nm), "blk.%d.%s", l, s), nm)
        if (get_vec(m, r, f, LNAME("attn_norm.weight"), D, SPLIT_NONE, &L->attn_norm, st, err, n) ||
            get_mat(m, r, f, LNAME("attn_q.weight"), D, QD, SPLIT_ROWS, &L->wq, false, st, err, n) ||
            get_mat(m, r, f, LNAME("attn_k.weight"), D, KVD, SPLIT_ROWS, &L->wk, false, st, err, n) ||
            get_mat(m, r, f, LNAME("attn_v.weight"), D, KVD, SPLIT_ROWS, &L->wv, false, st, err, n) ||
            get_mat(m, r, f, LNAME("attn_output.weight"), QD, D, SPLIT_COLS, &L->wo, false, st, err, n) ||
            get_vec(m, r, f, LNAME("ffn_norm.weight"), D, SPLIT_NONE, &L->ffn_norm, st, err, n) ||
            get_mat(m, r, f, LNAME("ffn_gate.weight"), D, F, SPLIT_ROWS, &L->w_gate, false, st, err, n) ||
            get_mat(m, r, f, LNAME("ffn_up.weight"), D, F, SPLIT_ROWS, &L->w_up, false, st, err, n) ||
            get_mat(m, r, f, LNAME("ffn_down.weight"), F, D, SPLIT_COLS, &L->w_down, false, st, err, n))
            return -1;
        if (get_bias(m, r, f, LNAME("attn_q.bias"), QD, &L->bq, need_bias, st, err, n) ||
            get_bias(m, r, f, LNAME("attn_k.bias"), KVD, &L->bk, need_bias, st, err, n) ||
            get_bias(m, r, f, LNAME("attn_v.bias"), KVD, &L->bv, need_bias, st, err, n))
            return -1;
        /* qwen3: one (E) weight shared by every head, so each shard holds it whole */
        if (hp->qk_norm &&
            (get_vec(m, r, f, LNAME("attn_q_norm.weight"), (uint64_t)hp->head_dim, SPLIT_NONE, &L->q_norm, st, err, n) ||
             get_vec(m, r, f, LNAME("attn_k_norm.weight"), (uint64_t)hp->head_dim, SPLIT_NONE, &L->k_norm, st, err, n)))
            return -1;
#undef LNAME
    }
    return 0;
}

static int load_tensors(model *m, engine_status *st, char *err, size_t n) {
    for (int r = 0; r < m->n_shards; r++)
        if (load_shard_tensors(m, r, st, err, n)) return -1;
    m->layers = m->shards[0].layers;
    const gguf_file *f = m->gguf;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t elems = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        m->weight_bytes += t->nbytes;
        m->n_params += elems;
        if (!gguf_str_eq(t->name, "token_embd.weight") || m->tied) m->step_bytes += t->nbytes;
    }
    return 0;
}

/* Shard r's scratch in its backend's memory. */
static int alloc_shard_scratch(model *m, int r, engine_status *st, char *err, size_t n) {
    const model_hparams *hp = &m->hp;
    model_shard *sh = &m->shards[r];
    size_t MB = (size_t)m->mp.max_batch;
    size_t QD = (size_t)sh->n_head * hp->head_dim, KVD = (size_t)sh->n_kv_head * hp->head_dim;
    float **bufs[] = {&sh->x, &sh->xb, &sh->q, &sh->k, &sh->v, &sh->att, &sh->hb, &sh->hb2};
    size_t widths[] = {hp->dim, hp->dim, QD, KVD, KVD, QD, sh->ff, sh->ff};
    const backend_i *op = sh->be->i;
    for (size_t i = 0; i < 8; i++) {
        *bufs[i] = op->alloc(sh->be, MB * widths[i] * sizeof(float));
        if (!*bufs[i]) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: %zu-row scratch in %s memory", MB, op->name);
    }
    m->red[r] = sh->xb;
    if (hp->eagle3) {
        float **eb[] = {&sh->eb, &sh->fin, &sh->qh, &sh->kh, &sh->vh};
        size_t ew[] = {hp->dim, (size_t)MODEL_EAGLE3_PARTS * hp->dim, QD, KVD, KVD};
        for (size_t i = 0; i < 5; i++)
            if (!(*eb[i] = op->alloc(sh->be, MB * ew[i] * sizeof(float))))
                return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: %zu-row scratch in %s memory", MB, op->name);
    }
    if (r == 0 && !sh->be->host_memory &&
        !(sh->logits_be = op->alloc(sh->be, MB * (size_t)hp->n_vocab * sizeof(float))))
        return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: %zu rows of logits in %s memory", MB, op->name);
    int max_k = hp->dim > sh->ff ? hp->dim : sh->ff;
    if ((int)QD > max_k) max_k = (int)QD;
    if (op->reserve(sh->be, (int)MB, max_k, m->mp.max_ctx + m->mp.max_batch) != 0)
        return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: the %s backend cannot reserve its scratch", op->name);
    return 0;
}

static int alloc_scratch(model *m, engine_status *st, char *err, size_t n) {
    size_t MB = (size_t)m->mp.max_batch;
    for (int r = 0; r < m->n_shards; r++)
        if (alloc_shard_scratch(m, r, st, err, n)) return -1;
    m->pos = malloc(MB * sizeof(int32_t));
    m->ids = malloc(MB * sizeof(int32_t));
    m->aseq = malloc(MB * sizeof(attn_seq));
    if (!m->pos || !m->ids || !m->aseq) return util_fail_st(st, ENGINE_ERR_OOM, err, n, "out of memory: batch arrays of %zu rows", MB);
    return 0;
}

/* The head and FFN counts must split evenly over the shards. */
static int check_split(const model *m, char *err, size_t n) {
    const model_hparams *hp = &m->hp;
    int N = m->n_shards;
    if (hp->n_head % N || hp->n_kv_head % N)
        return util_fail(err, n, "tensor parallelism over %d shards needs the head counts divisible by %d: the "
                          "model has %d query heads and %d kv heads", N, N, hp->n_head, hp->n_kv_head);
    if (hp->ff % N)
        return util_fail(err, n, "tensor parallelism over %d shards needs the feed-forward width divisible by %d: "
                          "the model has %d", N, N, hp->ff);
    return 0;
}

model *model_load(const char *path, backend *be, const model_params *mp, engine_status *st, char *err,
                  size_t errlen) {
    return model_load_tp(path, &be, 1, NULL, mp, st, err, errlen);
}

static model *load_model(const char *path, backend *const *bes, int n_shards, comm *c, const model *lender,
                         const model_params *mp, engine_status *st, char *err, size_t errlen);

model *model_load_tp(const char *path, backend *const *bes, int n_shards, comm *c, const model_params *mp,
                     engine_status *st, char *err, size_t errlen) {
    return load_model(path, bes, n_shards, c, NULL, mp, st, err, errlen);
}

model *model_load_eagle3(const char *path, const model *target, const model_params *mp, engine_status *st,
                         char *err, size_t errlen) {
    model *m = load_model(path, &target->be, 1, NULL, target, mp, st, err, errlen);
    if (m && !m->hp.eagle3) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "%s is a %s model, not an eagle3 head", path, m->arch);
        model_free(m);
        return NULL;
    }
    return m;
}

static model *load_model(const char *path, backend *const *bes, int n_shards, comm *c, const model *lender,
                         const model_params *mp, engine_status *st, char *err, size_t errlen) {
    if (n_shards < 1 || (n_shards > 1 && (!c || c->n_ranks != n_shards))) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen,
                     "%s: tensor parallelism over %d shards needs a communicator of %d ranks (got %d)", path,
                     n_shards, n_shards, c ? c->n_ranks : 0);
        return NULL;
    }
    for (int r = 0; r < n_shards; r++)
        if (!bes[r]) {
            util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "%s: shard %d has no backend", path, r);
            return NULL;
        }
    model *m = calloc(1, sizeof(*m));
    if (m) {
        m->shards = calloc((size_t)n_shards, sizeof(model_shard));
        m->bes = calloc((size_t)n_shards, sizeof(backend *));
        m->red = calloc((size_t)n_shards, sizeof(float *));
    }
    if (!m || !m->shards || !m->bes || !m->red) {
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "%s: out of memory for the model's tables", path);
        if (m) free(m->shards), free(m->bes), free(m->red), free(m);
        return NULL;
    }
    m->n_shards = n_shards;
    m->lender = lender;
    m->comm = n_shards > 1 ? c : NULL;
    for (int r = 0; r < n_shards; r++) m->shards[r].be = m->bes[r] = bes[r];
    m->be = bes[0];
    char sub[512];
    m->gguf = gguf_open(path, st, sub, sizeof(sub));
    if (!m->gguf) {
        snprintf(err, errlen, "%s", sub); /* it names the file */
        model_free(m);
        return NULL;
    }
    /* the helpers below set kind only when memory runs out */
    engine_status kind = ENGINE_ERR_INVALID;
    if (load_hparams(m, sub, sizeof(sub)) || check_split(m, sub, sizeof(sub))) goto fail;
    for (int r = 0; r < n_shards; r++) {
        m->shards[r].n_head = m->hp.n_head / n_shards;
        m->shards[r].n_kv_head = m->hp.n_kv_head / n_shards;
        m->shards[r].ff = m->hp.ff / n_shards;
    }
    if (load_rope(m, &kind, sub, sizeof(sub)) || load_tensors(m, &kind, sub, sizeof(sub))) goto fail;
    m->mp.max_batch = mp && mp->max_batch > 0 ? mp->max_batch : 512;
    m->mp.kv = mp && mp->kv == KV_F16 ? KV_F16 : KV_F32;
    m->mp.max_ctx = mp && mp->max_ctx > 0 ? mp->max_ctx
                                          : (m->hp.n_ctx_train < MODEL_MAX_CTX_DEFAULT ? m->hp.n_ctx_train
                                                                                       : MODEL_MAX_CTX_DEFAULT);
    if (alloc_scratch(m, &kind, sub, sizeof(sub))) goto fail;
    engine_status_set(st, ENGINE_OK);
    return m;
fail:
    util_fail_st(st, kind, err, errlen, "%s: %s", path, sub);
    model_free(m);
    return NULL;
}

void model_free(model *m) {
    if (!m) return;
    for (int r = 0; r < m->n_shards; r++) {
        model_shard *sh = &m->shards[r];
        const backend_i *op = sh->be->i;
        float *bufs[] = {sh->x, sh->xb, sh->q, sh->k, sh->v, sh->att, sh->hb, sh->hb2, sh->logits_be,
                         sh->eb, sh->fin, sh->qh, sh->kh, sh->vh};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) op->release(sh->be, bufs[i]);
        if (r == 0)
            for (int t = 0; t < m->n_taps; t++) op->release(sh->be, m->tap_be[t]);
        for (int i = 0; i < sh->n_wrefs; i++) op->weight_release(sh->be, sh->wrefs[i].host, sh->wrefs[i].w);
        for (int i = 0; i < sh->n_slices; i++) free(sh->slices[i]);
        free(sh->slices);
        free(sh->wrefs);
        free(sh->layers);
    }
    free(m->shards);
    free(m->bes);
    free(m->red);
    free(m->pos);
    free(m->ids);
    free(m->aseq);
    free(m->inv_freq);
    gguf_close(m->gguf);
    free(m);
}

kv_pool *model_kv_pool(const model *m, int block_size, int n_blocks, engine_status *st, char *err, size_t errlen) {
    return kv_pool_create_typed(m->bes, m->n_shards, m->mp.kv, m->hp.n_layer, m->shards[0].n_kv_head * m->hp.head_dim,
                                m->hp.head_dim, block_size, n_blocks, st, err, errlen);
}

/* Layer taps: the residual stream entering layer l (l = n_layer: the final
 * one) of all M input rows, copied on shard 0 (every shard's x is the same). */
static void tap_copy(model *m, int l, int M) {
    for (int t = 0; t < m->n_taps; t++)
        if (m->tap_layer[t] == l) {
            model_shard *sh = &m->shards[0];
            sh->be->i->copy(sh->be, m->tap_be[t], sh->x, (size_t)M * (size_t)m->hp.dim * sizeof(float));
        }
}

/* eagle3: the embeddings to sh->eb and the residual stream's start to sh->x
 * from the features (fused by fc for feat_fc rows; model.h). */
static void eagle3_input(model *m, model_shard *sh, const model_seq *seqs, int n_seqs, int M) {
    backend *be = sh->be;
    const backend_i *op = be->i;
    size_t D = (size_t)m->hp.dim, MB = (size_t)m->mp.max_batch;
    op->get_rows(be, sh->eb, sh->tok_embd.w, sh->tok_embd.type, m->ids, M, (int)D);
    for (int s = 0, at = 0; s < n_seqs; at += seqs[s].n, s++) {
        const model_seq *sq = &seqs[s];
        float *x = sh->x + (size_t)at * D;
        if (!sq->feat_fc) {
            op->upload(be, x, sq->feat, (size_t)sq->n * D * sizeof(float));
            continue;
        }
        /* x = fc0 h0 + fc1 h1 + fc2 h2: the row's three layers as planes of fin */
        for (int j = 0; j < MODEL_EAGLE3_PARTS; j++) {
            float *plane = sh->fin + ((size_t)j * MB + (size_t)at) * D;
            for (int i = 0; i < sq->n; i++)
                op->upload(be, plane + (size_t)i * D, sq->feat + ((size_t)i * MODEL_EAGLE3_PARTS + (size_t)j) * D,
                           D * sizeof(float));
            float *y = j == 0 ? x : sh->xb + (size_t)at * D;
            op->matmul(be, y, plane, sh->fc[j].w, sh->fc[j].type, sq->n, (int)D, (int)D);
            if (j > 0) op->add(be, x, y, sq->n, (int)D);
        }
    }
}

/* eagle3: q, k, v of [rmsnorm(embedding) attn_norm ; rmsnorm(x) hidden_norm]
 * as the sum of the two halves' products. */
static void eagle3_qkv(model *m, model_shard *sh, const model_layer *L, int M) {
    backend *be = sh->be;
    const backend_i *op = be->i;
    const model_hparams *hp = &m->hp;
    int D = hp->dim, QD = sh->n_head * hp->head_dim, KVD = sh->n_kv_head * hp->head_dim;
    op->rmsnorm(be, sh->eb, sh->eb, L->attn_norm, M, D, hp->eps);
    op->rmsnorm(be, sh->xb, sh->x, L->hidden_norm, M, D, hp->eps);
    int t[3] = {L->wq.type, L->wk.type, L->wv.type}, n[3] = {QD, KVD, KVD};
    float *y[3] = {sh->q, sh->k, sh->v}, *yh[3] = {sh->qh, sh->kh, sh->vh};
    const void *w[3] = {L->wq.w, L->wk.w, L->wv.w}, *wh[3] = {L->wq_h.w, L->wk_h.w, L->wv_h.w};
    int th[3] = {L->wq_h.type, L->wk_h.type, L->wv_h.type};
    op->matmul_n(be, 3, y, sh->eb, w, t, M, D, n);
    op->matmul_n(be, 3, yh, sh->xb, wh, th, M, D, n);
    for (int j = 0; j < 3; j++) op->add(be, y[j], yh[j], M, n[j]);
}

int model_forward(model *m, kv_pool *pool, const model_seq *seqs, int n_seqs, float *logits, char *err,
                  size_t errlen) {
    const model_hparams *hp = &m->hp;
    const int NS = m->n_shards;
    int D = hp->dim, E = hp->head_dim;

    /* validate everything before touching any cache */
    if (pool->n_shards != NS || pool->kv_dim != m->shards[0].n_kv_head * E || pool->n_layer != hp->n_layer)
        return util_fail(err, errlen, "KV pool (%d shards of width %d, %d layers) does not fit this model (%d shards "
                          "of width %d, %d layers)", pool->n_shards, pool->kv_dim, pool->n_layer, NS,
                          m->shards[0].n_kv_head * E, hp->n_layer);
    int M = 0;
    for (int s = 0; s < n_seqs; s++) {
        const model_seq *sq = &seqs[s];
        if (sq->n <= 0) return util_fail(err, errlen, "sequence %d has no new tokens", s);
        if (sq->kv->len + sq->n > m->mp.max_ctx)
            return util_fail(err, errlen, "context full: %d + %d positions exceed the limit of %d", sq->kv->len,
                              sq->n, m->mp.max_ctx);
        for (int i = 0; i < sq->n; i++)
            if (sq->tokens[i] < 0 || sq->tokens[i] >= hp->n_vocab_in)
                return util_fail(err, errlen, "token id %d is outside the vocabulary (0..%d)", sq->tokens[i],
                                  hp->n_vocab_in - 1);
        if (hp->eagle3 && !sq->feat)
            return util_fail(err, errlen, "sequence %d: an eagle3 head needs a feature row for every token", s);
        if (sq->feat_fc && !hp->eagle3)
            return util_fail(err, errlen, "sequence %d: only an eagle3 head fuses target features", s);
        M += sq->n;
    }
    if (M > m->mp.max_batch)
        return util_fail(err, errlen, "batch of %d positions exceeds max_batch %d", M, m->mp.max_batch);
    int need = 0; /* growth plus copies of shared prefix blocks (kv.h) */
    for (int s = 0; s < n_seqs; s++) need += kv_seq_reserve_cost(pool, seqs[s].kv, seqs[s].kv->len + seqs[s].n);
    if (need > kv_pool_available(pool))
        return util_fail(err, errlen, "KV cache full: need %d more blocks, %d free", need, kv_pool_available(pool));
    for (int s = 0; s < n_seqs; s++) {
        if (kv_seq_reserve(pool, seqs[s].kv, seqs[s].kv->len + seqs[s].n) != 0)
            return util_fail(err, errlen, "sequence %d exceeds its KV block table", s);
    }

    /* host arrays first (tokens, positions, one attention slice per sequence):
     * they must not change once the step has begun (see backend.h); all shards
     * share them */
    int row = 0;
    uint64_t key = 1469598103934665603ull; /* FNV-1a over the step's shape */
#define KEY(v) (key = (key ^ (uint64_t)(v)) * 1099511628211ull)
    KEY((uintptr_t)m);
    KEY((uintptr_t)pool);
    for (int t = 0; t < m->n_taps; t++) KEY((uintptr_t)m->tap_be[t]), KEY(m->tap_layer[t]); /* taps are graph ops */
    KEY(n_seqs);
    for (int s = 0; s < n_seqs; s++) {
        const model_seq *sq = &seqs[s];
        memcpy(m->ids + row, sq->tokens, (size_t)sq->n * sizeof(int32_t));
        for (int i = 0; i < sq->n; i++) m->pos[row + i] = sq->pos ? sq->pos[i] : sq->kv->len + i;
        m->aseq[s] = (attn_seq){row, sq->n, sq->kv->len, sq->kv->blocks, sq->mask, hp->sliding_window};
        KEY(sq->n * 4 + (sq->mask != NULL) * 2 + sq->all_logits);
        row += sq->n;
    }
    bool feat = false;
    for (int s = 0; s < n_seqs; s++) feat |= seqs[s].feat != NULL;
    for (int r = 0; r < NS; r++) {
        model_shard *sh = &m->shards[r];
        /* a sharded step is never captured: its all-reduces run between the
         * shards' ops, outside any one backend's graph; nor is one with
         * feature rows (host data that changes every call) */
        int replay = sh->be->i->begin(sh->be, NS > 1 || feat ? 0 : key);
        (void)replay; /* when replaying, the ops below only stage their host arrays */
        if (hp->eagle3) {
            eagle3_input(m, sh, seqs, n_seqs, M);
            continue;
        }
        sh->be->i->get_rows(sh->be, sh->x, sh->tok_embd.w, sh->tok_embd.type, m->ids, M, D);
        for (int s = 0, at = 0; s < n_seqs; at += seqs[s].n, s++)
            if (seqs[s].feat)
                sh->be->i->upload(sh->be, sh->x + (size_t)at * D, seqs[s].feat, (size_t)seqs[s].n * D * sizeof(float));
    }
#undef KEY

    /* each shard computes its heads / FFN slice into a partial (M, D) in its xb;
     * the all-reduce completes the sums, identical on every shard, and every
     * shard adds them to its copy of x */
    for (int l = 0; l < hp->n_layer; l++) {
        tap_copy(m, l, M);
        for (int r = 0; r < NS; r++) {
            model_shard *sh = &m->shards[r];
            backend *be = sh->be;
            const backend_i *op = be->i;
            const model_layer *L = &sh->layers[l];
            int H = sh->n_head, Hkv = sh->n_kv_head, QD = H * E, KVD = Hkv * E;
            kv_layer_view kv = kv_pool_layer_shard(pool, r, l);
            if (hp->eagle3) {
                eagle3_qkv(m, sh, L, M);
            } else {
                op->rmsnorm(be, sh->xb, sh->x, L->attn_norm, M, D, hp->eps);
                float *y[3] = {sh->q, sh->k, sh->v};
                const void *w[3] = {L->wq.w, L->wk.w, L->wv.w};
                int t[3] = {L->wq.type, L->wk.type, L->wv.type}, n[3] = {QD, KVD, KVD};
                op->matmul_n(be, 3, y, sh->xb, w, t, M, D, n);
            }
            add_bias(op, be, sh->q, L->bq, M, QD);
            add_bias(op, be, sh->k, L->bk, M, KVD);
            add_bias(op, be, sh->v, L->bv, M, KVD);
            /* qwen3's per-head norms: (M, H*E) is (M*H, E) rows of one head each */
            if (L->q_norm) op->rmsnorm(be, sh->q, sh->q, L->q_norm, M * H, E, hp->eps);
            if (L->k_norm) op->rmsnorm(be, sh->k, sh->k, L->k_norm, M * Hkv, E, hp->eps);
            op->rope(be, sh->q, m->pos, sh->inv_freq_be, M, H, E, hp->n_rot, hp->rope_neox);
            op->rope(be, sh->k, m->pos, sh->inv_freq_be, M, Hkv, E, hp->n_rot, hp->rope_neox);
            op->kv_write(be, &kv, sh->k, sh->v, m->aseq, n_seqs, KVD);
            op->attention(be, sh->att, sh->q, &kv, m->aseq, n_seqs, H, Hkv, E);
            op->matmul(be, sh->xb, sh->att, L->wo.w, L->wo.type, M, QD, D);
        }
        if (NS > 1) comm_allreduce_sum(m->comm, m->red, (size_t)M * D);
        for (int r = 0; r < NS; r++) {
            model_shard *sh = &m->shards[r];
            backend *be = sh->be;
            const backend_i *op = be->i;
            const model_layer *L = &sh->layers[l];
            int F = sh->ff;
            op->add(be, sh->x, sh->xb, M, D);
            op->rmsnorm(be, sh->xb, sh->x, L->ffn_norm, M, D, hp->eps);
            {
                float *y[2] = {sh->hb, sh->hb2};
                const void *w[2] = {L->w_gate.w, L->w_up.w};
                int t[2] = {L->w_gate.type, L->w_up.type}, n[2] = {F, F};
                op->matmul_n(be, 2, y, sh->xb, w, t, M, D, n);
            }
            op->silu_mul(be, sh->hb, sh->hb2, M, F);
            op->matmul(be, sh->xb, sh->hb, L->w_down.w, L->w_down.type, M, F, D);
        }
        if (NS > 1) comm_allreduce_sum(m->comm, m->red, (size_t)M * D);
        for (int r = 0; r < NS; r++) m->shards[r].be->i->add(m->shards[r].be, m->shards[r].x, m->shards[r].xb, M, D);
    }

    tap_copy(m, hp->n_layer, M);
    /* the output head runs on shard 0 only; only the rows whose logits are
     * wanted go through it */
    model_shard *s0 = &m->shards[0];
    backend *be = s0->be;
    const backend_i *op = be->i;
    int n_out = 0;
    row = 0;
    for (int s = 0; s < n_seqs; s++) {
        int first = seqs[s].all_logits ? 0 : seqs[s].n - 1;
        for (int i = first; i < seqs[s].n; i++, n_out++)
            if (row + i != n_out)
                op->copy(be, s0->x + (size_t)n_out * D, s0->x + (size_t)(row + i) * D, (size_t)D * 4);
        row += seqs[s].n;
    }
    op->rmsnorm(be, s0->x, s0->x, s0->out_norm, n_out, D, hp->eps);
    op->matmul(be, s0->logits_be ? s0->logits_be : logits, s0->x, s0->output.w, s0->output.type, n_out, D,
               hp->n_vocab);
    for (int r = 0; r < NS; r++) m->shards[r].be->i->end(m->shards[r].be);
    if (s0->logits_be) op->download(be, logits, s0->logits_be, (size_t)n_out * hp->n_vocab * sizeof(float));

    for (int s = 0; s < n_seqs; s++) seqs[s].kv->len += seqs[s].n;
    m->n_out_last = n_out;
    m->n_in_last = M;
    return 0;
}

int model_set_taps(model *m, const int *layers, int n) {
    if (n < 0 || n > MODEL_MAX_TAPS) return -1;
    for (int t = 0; t < n; t++)
        if (layers[t] < 0 || layers[t] > m->hp.n_layer) return -1;
    backend *be = m->shards[0].be;
    size_t bytes = (size_t)m->mp.max_batch * (size_t)m->hp.dim * sizeof(float);
    float *buf[MODEL_MAX_TAPS] = {NULL};
    for (int t = 0; t < n; t++)
        if (!(buf[t] = t < m->n_taps ? m->tap_be[t] : be->i->alloc(be, bytes))) {
            for (int u = m->n_taps; u < t; u++) be->i->release(be, buf[u]);
            return -1;
        }
    for (int t = n; t < m->n_taps; t++) be->i->release(be, m->tap_be[t]);
    for (int t = 0; t < n; t++) m->tap_be[t] = buf[t], m->tap_layer[t] = layers[t];
    m->n_taps = n;
    m->n_in_last = 0; /* nothing tapped yet */
    return 0;
}

int model_tap_rows(model *m, int tap, float *dst, const int *rows, int n) {
    size_t D = (size_t)m->hp.dim;
    backend *be = m->shards[0].be;
    if (tap < 0 || tap >= m->n_taps) return -1;
    for (int j = 0; j < n; j++)
        if (rows[j] < 0 || rows[j] >= m->n_in_last) return -1;
    for (int j = 0; j < n; j++) { /* consecutive rows go in one download */
        int k = 1;
        while (j + k < n && rows[j + k] == rows[j] + k) k++;
        be->i->download(be, dst + (size_t)j * D, m->tap_be[tap] + (size_t)rows[j] * D, D * k * sizeof(float));
        j += k - 1;
    }
    return 0;
}

/* The output head normed s0->x in place and nothing writes it until the next
 * forward: the hidden states are still there. */
const float *model_hidden_be(const model *m, int row) {
    if (row < 0 || row >= m->n_out_last) return NULL;
    return m->shards[0].x + (size_t)row * m->hp.dim;
}

int model_hidden_rows(model *m, float *dst, const int *rows, int n) {
    size_t D = (size_t)m->hp.dim;
    backend *be = m->shards[0].be;
    for (int j = 0; j < n; j++)
        if (rows[j] < 0 || rows[j] >= m->n_out_last) return -1;
    for (int j = 0; j < n; j++) {
        /* consecutive rows go in one download */
        int k = 1;
        while (j + k < n && rows[j + k] == rows[j] + k) k++;
        be->i->download(be, dst + (size_t)j * D, model_hidden_be(m, rows[j]), D * k * sizeof(float));
        j += k - 1;
    }
    return 0;
}

/* ---- helpers for callers that feed and time whole calls ---------------------- */

int model_feed(model *m, kv_pool *pool, kv_seq *kv, const int32_t *tokens, int from, int to, float *logits,
               char *err, size_t errlen) {
    for (int p = from; p < to;) {
        int n = to - p < m->mp.max_batch ? to - p : m->mp.max_batch;
        model_seq ms = {.kv = kv, .n = n, .tokens = tokens + p};
        if (model_forward(m, pool, &ms, 1, logits, err, errlen) != 0) return -1;
        p += n;
    }
    return 0;
}

/* CAL_ROUNDS rounds, or CAL_MIN_ROUNDS once the rounds have taken CAL_BUDGET_MS
 * (a big model on a CPU must not spend half a minute here); medians taken
 * seconds apart were off by 5x on a busy machine, hence the fastest call. */
#define CAL_ROUNDS 7
#define CAL_MIN_ROUNDS 3
#define CAL_BUDGET_MS 3000.0
#define CAL_MAX 8
#define CAL_TOKENS 64
void model_time_calls(model *m, kv_pool *pool, int ctx0, const int *n, const int *past, int k, double *t,
                      float *logits) {
    kv_seq *s[CAL_MAX] = {0};
    int32_t toks[CAL_TOKENS] = {0};
    char err[256];
    if (k > CAL_MAX) k = CAL_MAX;
    for (int j = 0; j < k; j++) {
        t[j] = 0;
        if (n[j] > CAL_TOKENS || ctx0 > CAL_TOKENS) continue;
        s[j] = kv_seq_create(pool, past[j] + n[j] + 8);
        model_seq ms = {.kv = s[j], .n = ctx0, .tokens = toks};
        if (!s[j] || model_forward(m, pool, &ms, 1, logits, err, sizeof(err)) != 0 ||
            (past[j] > ctx0 && kv_seq_reserve(pool, s[j], past[j]) != 0)) {
            kv_seq_destroy(pool, s[j]);
            s[j] = NULL;
            continue;
        }
        if (past[j] > ctx0) s[j]->len = past[j];
    }
    double start = clock_now_ms();
    for (int r = 0; r < CAL_ROUNDS && (r < CAL_MIN_ROUNDS || clock_now_ms() - start < CAL_BUDGET_MS); r++)
        for (int j = 0; j < k; j++) {
            if (!s[j]) continue;
            model_seq ms = {.kv = s[j], .n = n[j], .tokens = toks, .all_logits = true};
            double t0 = clock_now_ms();
            if (model_forward(m, pool, &ms, 1, logits, err, sizeof(err)) != 0) {
                kv_seq_destroy(pool, s[j]);
                s[j] = NULL;
                t[j] = 0;
                continue;
            }
            double dt = clock_now_ms() - t0;
            if (t[j] == 0 || dt < t[j]) t[j] = dt;
            kv_seq_truncate(pool, s[j], past[j]);
        }
    for (int j = 0; j < k; j++) kv_seq_destroy(pool, s[j]);
}
