/* medusa.c — Medusa heads: parameters, the GGUF side file, the forward on the
 * target's backend and on the host (see medusa.h). */
#include "engine/spec/proposers/medusa.h"
#include "engine/util.h"

#include "engine/gguf/gguf.h"
#include "kernels/ggml_type.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parameters ------------------------------------------------------------ */

medusa_heads *medusa_heads_create(int K, int L, int F, int D, int V, bool own_output, bool token_input,
                                  engine_status *st, char *err, size_t errlen) {
    if (K < 1 || K > MEDUSA_MAX_HEADS || L < 1 || L > MEDUSA_MAX_LAYERS || D < 1 || D > 65536 || V < 2 ||
        V > 1 << 22 || F < 0 || F > MEDUSA_MAX_FFN || F % 32) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen,
                     "medusa heads: unsupported shape (heads %d of 1..%d, layers %d of 1..%d, ffn %d (0, or a "
                     "multiple of 32 up to %d), dim %d, vocab %d)",
                     K, MEDUSA_MAX_HEADS, L, MEDUSA_MAX_LAYERS, F, MEDUSA_MAX_FFN, D, V);
        return NULL;
    }
    medusa_heads *mh = calloc(1, sizeof(*mh));
    if (!mh) {
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: medusa heads");
        return NULL;
    }
    mh->n_heads = K, mh->n_layers = L, mh->ffn = F, mh->dim = D, mh->n_vocab = V, mh->own_output = own_output;
    mh->token_input = token_input;
    size_t H = F ? (size_t)F : (size_t)D;
    size_t nw = (size_t)K * L * H * D, nb = (size_t)K * L * H, no = own_output ? (size_t)K * V * D : 0;
    size_t nu = token_input ? (size_t)D * D : 0, nw2 = F ? (size_t)K * L * D * F : 0;
    mh->n_params = nw + nb + no + nu + nw2;
    mh->params = calloc(mh->n_params, sizeof(float));
    if (!mh->params) {
        free(mh);
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: medusa heads: %zu parameters",
                     nw + nb + no + nu + nw2);
        return NULL;
    }
    mh->w = mh->params;
    mh->b = mh->w + nw;
    mh->out = own_output ? mh->b + nb : NULL;
    mh->u = token_input ? mh->b + nb + no : NULL;
    mh->w2 = F ? mh->b + nb + no + nu : NULL;
    mh->wtype = GGML_TYPE_F32;
    engine_status_set(st, ENGINE_OK);
    return mh;
}

/* The matrices' rows in params order: W (K*L*H rows), then output (K*V
 * rows), then U (D rows), each D wide; then W2 (K*L*D rows, F wide). */
static size_t out_row0(const medusa_heads *mh) {
    return (size_t)mh->n_heads * mh->n_layers * medusa_hidden(mh);
}
static size_t u_row0(const medusa_heads *mh) {
    return out_row0(mh) + (mh->own_output ? (size_t)mh->n_heads * mh->n_vocab : 0);
}
static size_t w2_row0(const medusa_heads *mh) { return u_row0(mh) + (mh->token_input ? (size_t)mh->dim : 0); }
static size_t mat_rows(const medusa_heads *mh) {
    return w2_row0(mh) + (mh->ffn ? (size_t)mh->n_heads * mh->n_layers * mh->dim : 0);
}
static int row_width(const medusa_heads *mh, size_t r) { return r < w2_row0(mh) ? mh->dim : mh->ffn; }
static float *mat_row(medusa_heads *mh, size_t r) {
    size_t nwr = out_row0(mh), nur = u_row0(mh), n2r = w2_row0(mh);
    if (r >= n2r) return mh->w2 + (r - n2r) * mh->ffn;
    return r < nwr ? mh->w + r * mh->dim : r < nur ? mh->out + (r - nwr) * mh->dim : mh->u + (r - nur) * mh->dim;
}
/* byte offset of matrix row r in q */
static size_t q_offset(const medusa_heads *mh, size_t r) {
    size_t n2r = w2_row0(mh), rb = ggml_row_size(mh->wtype, (uint64_t)mh->dim);
    if (r < n2r) return r * rb;
    return n2r * rb + (r - n2r) * ggml_row_size(mh->wtype, (uint64_t)mh->ffn);
}

int medusa_heads_set_type(medusa_heads *mh, int type, engine_status *st, char *err, size_t errlen) {
    if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_Q8_0)
        return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "medusa heads: type %s is not supported (f32, f16, q8_0)",
                            ggml_type_name(type) ? ggml_type_name(type) : "?");
    free(mh->q);
    mh->q = NULL;
    mh->wtype = type;
    engine_status_set(st, ENGINE_OK);
    if (type == GGML_TYPE_F32) return 0;
    size_t R = mat_rows(mh);
    if (!ggml_row_size(type, (uint64_t)mh->dim) || (type == GGML_TYPE_Q8_0 && mh->dim % 32))
        return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "medusa heads: hidden size %d is not a multiple of "
                            "%s's block", mh->dim, ggml_type_name(type));
    if (!(mh->q = malloc(q_offset(mh, R))))
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: quantized medusa heads");
    for (size_t r = 0; r < R; r++) {
        uint8_t *qr = (uint8_t *)mh->q + q_offset(mh, r);
        int n = row_width(mh, r);
        ggml_quantize_row(qr, type, mat_row(mh, r), (uint64_t)n);
        ggml_dequantize_row(mat_row(mh, r), type, qr, (uint64_t)n);
    }
    return 0;
}

void medusa_heads_destroy(medusa_heads *mh) {
    if (!mh) return;
    free(mh->params);
    free(mh->q);
    free(mh);
}

uint64_t medusa_heads_bytes(const medusa_heads *mh) {
    uint64_t bias = (uint64_t)mh->n_heads * mh->n_layers * medusa_hidden(mh) * sizeof(float);
    return q_offset(mh, mat_rows(mh)) + bias; /* every matrix row in wtype, F32 included */
}

/* host address of matrix row r as stored (q for a quantized type) */
static const void *stored_row(const medusa_heads *mh, size_t r) {
    if (mh->wtype == GGML_TYPE_F32) return mat_row((medusa_heads *)mh, r);
    return (const uint8_t *)mh->q + q_offset(mh, r);
}

/* ---- the side file ----------------------------------------------------------- */

int medusa_heads_save(const medusa_heads *mh, const char *path, char *err, size_t errlen) {
    int K = mh->n_heads, L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = medusa_hidden(mh);
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "medusa");
    gguf_writer_set_str(w, "general.name", "medusa heads");
    gguf_writer_set_u32(w, "medusa.head_count", (uint32_t)K);
    gguf_writer_set_u32(w, "medusa.layer_count", (uint32_t)L);
    gguf_writer_set_u32(w, "medusa.embedding_length", (uint32_t)D);
    gguf_writer_set_u32(w, "medusa.vocab_size", (uint32_t)V);
    gguf_writer_set_bool(w, "medusa.shared_output", !mh->own_output);
    gguf_writer_set_bool(w, "medusa.token_input", mh->token_input);
    gguf_writer_set_u32(w, "medusa.feed_forward_length", (uint32_t)F);
    gguf_writer_set_str(w, "medusa.target_id", mh->target_id);
    gguf_writer_set_str(w, "medusa.target_name", mh->target_name);
    gguf_writer_set_u32(w, "medusa.accuracy_topk", MEDUSA_ACC_K);
    float acc[MEDUSA_MAX_HEADS * MEDUSA_ACC_K];
    for (int k = 0; k < K; k++) memcpy(acc + k * MEDUSA_ACC_K, mh->acc[k], sizeof(mh->acc[k]));
    gguf_writer_set_arr(w, "medusa.accuracy", GGUF_TYPE_FLOAT32, acc, (uint64_t)K * MEDUSA_ACC_K);
    gguf_writer_set_u64(w, "medusa.accuracy_tokens", mh->acc_tokens);
    gguf_writer_set_f32(w, "medusa.train_loss", mh->train_loss);
    gguf_writer_set_f32(w, "medusa.heldout_loss", mh->heldout_loss);
    char name[64];
    for (int k = 0; k < K; k++) {
        for (int l = 0; l < L; l++) {
            uint64_t ne_w[2] = {(uint64_t)D, (uint64_t)H}, ne_b[1] = {(uint64_t)H}, ne_w2[2] = {(uint64_t)F, (uint64_t)D};
            snprintf(name, sizeof(name), "medusa.%d.%d.weight", k, l);
            gguf_writer_add_tensor(w, name, mh->wtype, 2, ne_w, stored_row(mh, ((size_t)k * L + l) * H));
            snprintf(name, sizeof(name), "medusa.%d.%d.bias", k, l);
            gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 1, ne_b, mh->b + ((size_t)k * L + l) * H);
            if (F) {
                snprintf(name, sizeof(name), "medusa.%d.%d.down.weight", k, l);
                gguf_writer_add_tensor(w, name, mh->wtype, 2, ne_w2, stored_row(mh, w2_row0(mh) + ((size_t)k * L + l) * D));
            }
        }
        if (mh->own_output) {
            uint64_t ne_o[2] = {(uint64_t)D, (uint64_t)V};
            snprintf(name, sizeof(name), "medusa.%d.output.weight", k);
            gguf_writer_add_tensor(w, name, mh->wtype, 2, ne_o,
                                   stored_row(mh, out_row0(mh) + (size_t)k * V));
        }
    }
    if (mh->token_input) {
        uint64_t ne_u[2] = {(uint64_t)D, (uint64_t)D};
        gguf_writer_add_tensor(w, "medusa.token_input.weight", mh->wtype, 2, ne_u, stored_row(mh, u_row0(mh)));
    }
    int rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_destroy(w);
    return rc;
}

/* Copies tensor `name` of exactly shape (ne0, ne1) and type `type` into dst
 * as floats (dequantized; raw bytes also into qdst when not NULL), checking
 * every value is finite. */
static int load_tensor(const gguf_file *f, const char *fname, const char *name, uint64_t ne0, uint64_t ne1, int type,
                       float *dst, void *qdst, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return util_fail(err, errlen, "%s: medusa heads: tensor '%s' is missing", fname, name);
    uint32_t nd = ne1 > 1 ? 2 : 1;
    if ((int)t->type != type || t->n_dims != nd || t->ne[0] != ne0 || t->ne[1] != ne1)
        return util_fail(err, errlen, "%s: medusa heads: tensor '%s' is %s (%llu, %llu), expected %s (%llu, %llu)", fname,
                     name, ggml_type_name(t->type) ? ggml_type_name(t->type) : "?", (unsigned long long)t->ne[0],
                     (unsigned long long)t->ne[1], ggml_type_name(type), (unsigned long long)ne0,
                     (unsigned long long)ne1);
    size_t rb = ggml_row_size(type, ne0);
    for (uint64_t r = 0; r < ne1; r++) {
        const uint8_t *src = (const uint8_t *)t->data + r * rb;
        if (!ggml_dequantize_row(dst + r * ne0, type, src, ne0))
            return util_fail(err, errlen, "%s: medusa heads: tensor '%s' cannot be converted", fname, name);
        if (qdst) memcpy((uint8_t *)qdst + r * rb, src, rb);
    }
    size_t n = (size_t)ne0 * ne1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return util_fail(err, errlen, "%s: medusa heads: tensor '%s' holds a non-finite value at element %zu", fname,
                         name, i);
    return 0;
}

/* A failure is the file's (ENGINE_ERR_INVALID) except the heads' own
 * allocations (ENGINE_ERR_OOM, from medusa_heads_create / _set_type). */
static medusa_heads *load_from(gguf_file *f, const char *fname, const char *expect_id, int dim, int n_vocab,
                               engine_status *st, char *err, size_t errlen) {
    engine_status_set(st, ENGINE_ERR_INVALID);
    char arch[32] = "";
    if (!gguf_get_cstr(f, "general.architecture", arch, sizeof(arch)) || strcmp(arch, "medusa") != 0) {
        util_fail(err, errlen, "%s: not a medusa heads file (general.architecture is '%s', expected 'medusa')", fname,
              arch[0] ? arch : "missing");
        return NULL;
    }
    uint32_t K, L, D, V;
    bool shared;
    const char *miss = !gguf_get_u32(f, "medusa.head_count", &K)         ? "medusa.head_count"
                       : !gguf_get_u32(f, "medusa.layer_count", &L)      ? "medusa.layer_count"
                       : !gguf_get_u32(f, "medusa.embedding_length", &D) ? "medusa.embedding_length"
                       : !gguf_get_u32(f, "medusa.vocab_size", &V)       ? "medusa.vocab_size"
                       : !gguf_get_bool(f, "medusa.shared_output", &shared) ? "medusa.shared_output"
                                                                             : NULL;
    if (miss) {
        util_fail(err, errlen, "%s: medusa heads: metadata key %s is missing or of the wrong type", fname, miss);
        return NULL;
    }
    bool token_input = false; /* absent: heads of before the option, y0 = h */
    if (gguf_find(f, "medusa.token_input") && !gguf_get_bool(f, "medusa.token_input", &token_input)) {
        util_fail(err, errlen, "%s: medusa heads: metadata key medusa.token_input is not a bool", fname);
        return NULL;
    }
    uint32_t F = 0; /* absent: ResBlock heads */
    if (gguf_find(f, "medusa.feed_forward_length") && !gguf_get_u32(f, "medusa.feed_forward_length", &F)) {
        util_fail(err, errlen, "%s: medusa heads: metadata key medusa.feed_forward_length is not a u32", fname);
        return NULL;
    }
    char tid[MEDUSA_ID_LEN] = "";
    if (!gguf_get_cstr(f, "medusa.target_id", tid, sizeof(tid)) || !tid[0]) {
        util_fail(err, errlen, "%s: medusa heads: medusa.target_id is missing (the target they were trained for)", fname);
        return NULL;
    }
    char tname[128] = "";
    gguf_get_cstr(f, "medusa.target_name", tname, sizeof(tname));
    if (expect_id && strcmp(expect_id, tid) != 0) {
        util_fail(err, errlen, "%s: these medusa heads were trained for target %s (%s), not for the loaded target %s", fname,
              tid, tname[0] ? tname : "unnamed", expect_id);
        return NULL;
    }
    if ((dim > 0 && (int)D != dim) || (n_vocab > 0 && (int)V != n_vocab)) {
        util_fail(err, errlen, "%s: medusa heads have hidden size %u and vocabulary %u; the target has %d and %d", fname, D,
              V, dim, n_vocab);
        return NULL;
    }
    if (F > MEDUSA_MAX_FFN) {
        util_fail(err, errlen, "%s: medusa heads: FFN width %u is over %d", fname, F, MEDUSA_MAX_FFN);
        return NULL;
    }
    medusa_heads *mh =
        medusa_heads_create((int)K, (int)L, (int)F, (int)D, (int)V, !shared, token_input, st, err, errlen);
    if (!mh) return NULL;
    engine_status_set(st, ENGINE_ERR_INVALID); /* what fails below is the file's */
    snprintf(mh->target_id, sizeof(mh->target_id), "%s", tid);
    snprintf(mh->target_name, sizeof(mh->target_name), "%s", tname);
    const gguf_kv *acc = gguf_find(f, "medusa.accuracy");
    uint32_t acck = 0;
    gguf_get_u32(f, "medusa.accuracy_topk", &acck);
    if (acc) {
        if (acc->type != GGUF_TYPE_ARRAY || acc->arr_type != GGUF_TYPE_FLOAT32 || acck < 1 ||
            acc->arr_n != (uint64_t)K * acck) {
            util_fail(err, errlen, "%s: medusa heads: medusa.accuracy must be %u x medusa.accuracy_topk f32 values", fname,
                  K);
            medusa_heads_destroy(mh);
            return NULL;
        }
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t j = 0; j < MEDUSA_ACC_K; j++) {
                float v = 0;
                uint32_t jj = j < acck ? j : acck - 1; /* fewer stored: the last cumulative value holds */
                memcpy(&v, (const uint8_t *)acc->arr_data + ((size_t)k * acck + jj) * 4, 4);
                if (!(v >= 0 && v <= 1)) {
                    util_fail(err, errlen, "%s: medusa heads: accuracy of head %u top-%u is %g, outside [0, 1]", fname, k + 1,
                          jj + 1, (double)v);
                    medusa_heads_destroy(mh);
                    return NULL;
                }
                mh->acc[k][j] = v;
            }
    }
    gguf_get_u64(f, "medusa.accuracy_tokens", &mh->acc_tokens);
    gguf_get_f32(f, "medusa.train_loss", &mh->train_loss);
    gguf_get_f32(f, "medusa.heldout_loss", &mh->heldout_loss);
    char name[64];
    /* the matrices' type is the first one's; all must share it */
    const gguf_tensor *t0 = gguf_find_tensor(f, "medusa.0.0.weight");
    int wt = t0 ? (int)t0->type : GGML_TYPE_F32;
    if (wt != GGML_TYPE_F32 && wt != GGML_TYPE_F16 && wt != GGML_TYPE_Q8_0) {
        util_fail(err, errlen, "%s: medusa heads: weight type %s is not supported (f32, f16, q8_0)", fname,
              ggml_type_name(wt) ? ggml_type_name(wt) : "unknown");
        goto fail;
    }
    if (wt != GGML_TYPE_F32 && medusa_heads_set_type(mh, wt, st, err, errlen) != 0) goto fail;
    engine_status_set(st, ENGINE_ERR_INVALID); /* again: set_type said ENGINE_OK */
    uint32_t H = (uint32_t)medusa_hidden(mh);
#define QAT(row) (mh->q ? (uint8_t *)mh->q + q_offset(mh, (row)) : NULL)
    for (uint32_t k = 0; k < K; k++) {
        for (uint32_t l = 0; l < L; l++) {
            size_t i = (size_t)k * L + l, r0 = i * H;
            snprintf(name, sizeof(name), "medusa.%u.%u.weight", k, l);
            if (load_tensor(f, fname, name, D, H, wt, mh->w + r0 * D, QAT(r0), err, errlen)) goto fail;
            snprintf(name, sizeof(name), "medusa.%u.%u.bias", k, l);
            if (load_tensor(f, fname, name, H, 1, GGML_TYPE_F32, mh->b + i * H, NULL, err, errlen)) goto fail;
            snprintf(name, sizeof(name), "medusa.%u.%u.down.weight", k, l);
            if (F && load_tensor(f, fname, name, F, D, wt, mh->w2 + i * D * F, QAT(w2_row0(mh) + i * D), err, errlen))
                goto fail;
        }
        if (!shared) {
            size_t r0 = out_row0(mh) + (size_t)k * V;
            snprintf(name, sizeof(name), "medusa.%u.output.weight", k);
            if (load_tensor(f, fname, name, D, V, wt, mh->out + (size_t)k * V * D, QAT(r0), err, errlen)) goto fail;
        }
    }
    if (token_input && load_tensor(f, fname, "medusa.token_input.weight", D, D, wt, mh->u, QAT(u_row0(mh)), err, errlen))
        goto fail;
#undef QAT
    engine_status_set(st, ENGINE_OK);
    return mh;
fail:
    medusa_heads_destroy(mh);
    return NULL;
}

medusa_heads *medusa_heads_load(const char *path, const char *expect_id, int dim, int n_vocab, engine_status *st,
                                char *err, size_t errlen) {
    gguf_file *f = gguf_open(path, st, err, errlen);
    if (!f) return NULL;
    medusa_heads *mh = load_from(f, path, expect_id, dim, n_vocab, st, err, errlen);
    gguf_close(f);
    return mh;
}

medusa_heads *medusa_heads_load_mem(const void *buf, size_t len, const char *expect_id, int dim, int n_vocab,
                                    engine_status *st, char *err, size_t errlen) {
    gguf_file *f = gguf_open_mem(buf, len, st, err, errlen);
    if (!f) return NULL;
    medusa_heads *mh = load_from(f, "<memory>", expect_id, dim, n_vocab, st, err, errlen);
    gguf_close(f);
    return mh;
}

/* ---- host forward ------------------------------------------------------------- */

static inline float silu(float a) { return a / (1.0f + expf(-a)); }

void medusa_head_input(const medusa_heads *mh, const float *E, int32_t tok, const float *h, float *x) {
    int D = mh->dim;
    memcpy(x, h, sizeof(float) * (size_t)D);
    if (!mh->token_input || tok < 0 || tok >= mh->n_vocab) return;
    const float *e = E + (size_t)tok * D;
    for (int i = 0; i < D; i++) {
        const float *ur = mh->u + (size_t)i * D;
        float a = 0;
        for (int j = 0; j < D; j++) a += ur[j] * e[j];
        x[i] += a;
    }
}

void medusa_head_forward(const medusa_heads *mh, const float *O, int k, const float *h, float *z, float *ys,
                         float *as) {
    int L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = medusa_hidden(mh);
    float *y = ys;
    memcpy(y, h, sizeof(float) * (size_t)D);
    for (int l = 0; l < L; l++) {
        size_t i = (size_t)k * L + l;
        const float *W = mh->w + i * H * D, *b = mh->b + i * H;
        float *yn = ys + (size_t)(l + 1) * D;
        if (F) memcpy(yn, y, sizeof(float) * (size_t)D);
        for (int r = 0; r < H; r++) {
            const float *wr = W + (size_t)r * D;
            float a = b[r];
            for (int j = 0; j < D; j++) a += wr[j] * y[j];
            if (as) as[(size_t)l * H + r] = a;
            if (!F) {
                yn[r] = y[r] + silu(a);
                continue;
            }
            float sa = silu(a); /* yn += W2[:, r] SiLU(a) */
            const float *w2 = mh->w2 + i * D * F + r;
            for (int j = 0; j < D; j++) yn[j] += w2[(size_t)j * F] * sa;
        }
        y = yn;
    }
    const float *Om = mh->own_output ? mh->out + (size_t)k * V * D : O;
    for (int v = 0; v < V; v++) {
        const float *o = Om + (size_t)v * D;
        float s = 0;
        for (int j = 0; j < D; j++) s += o[j] * y[j];
        z[v] = s;
    }
}

/* tensor `name` (else `fallback`) of m's file, (V, D), as host floats */
static float *target_matrix(const model *m, const char *name, const char *fallback, const char *what, char *err,
                            size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t && fallback) t = gguf_find_tensor(m->gguf, fallback);
    int D = m->hp.dim, V = m->hp.n_vocab;
    if (!t || t->ne[0] != (uint64_t)D || t->ne[1] != (uint64_t)V) {
        util_fail(err, errlen, "%s: no (%d, %d) %s", m->name, V, D, what);
        return NULL;
    }
    float *O = malloc(sizeof(float) * (size_t)V * D);
    if (!O) {
        util_fail(err, errlen, "out of memory: the target's %s as floats (%d x %d)", what, V, D);
        return NULL;
    }
    size_t rb = ggml_row_size(t->type, (uint64_t)D);
    for (int v = 0; v < V; v++)
        if (!ggml_dequantize_row(O + (size_t)v * D, t->type, (const uint8_t *)t->data + (size_t)v * rb, (uint64_t)D)) {
            free(O);
            util_fail(err, errlen, "the target's %s type %s cannot be converted", what, ggml_type_name(t->type));
            return NULL;
        }
    return O;
}

float *medusa_target_output(const model *m, char *err, size_t errlen) {
    return target_matrix(m, "output.weight", "token_embd.weight", "output matrix", err, errlen);
}

float *medusa_target_embedding(const model *m, char *err, size_t errlen) {
    return target_matrix(m, "token_embd.weight", NULL, "token embedding", err, errlen);
}

/* ---- on the target's backend ------------------------------------------------- */

struct medusa_rt {
    const medusa_heads *mh;
    model *m;
    backend *be;                /* shard 0's, not owned */
    int max_rows;               /* R */
    const void **w;             /* (K*L) backend weights W[k][l] */
    int *wt;                    /* (K*L) their backend types */
    float **b;                  /* (K*L) backend biases (H) */
    const void **w2;            /* (K*L) W2[k][l] of FFN heads, else NULL */
    int *w2t;
    const void **out;           /* (K) own output matrices, or NULL */
    int *out_t;
    const void *u;              /* U with token input, or NULL */
    int u_t;
    int32_t *tok;               /* (R) host: the rows' tokens */
    float *e;                   /* (R, D) their embedding rows, then U e */
    float *h;                   /* (R, D) the hidden rows */
    float *y;                   /* (K*R, D) every head's running state */
    float *t;                   /* (R, max(D, H)) a layer's branch */
    float *t2;                  /* (R, D) an FFN layer's output, NULL for ResBlocks */
    float *ones;                /* (R, max(D, H)) 1.0: silu_mul(t, ones) is SiLU(t) */
    float *logits_be;           /* (K*R, V) when backend memory is not host memory */
};

void medusa_rt_destroy(medusa_rt *rt) {
    if (!rt) return;
    const backend_i *op = rt->be->i;
    const medusa_heads *mh = rt->mh;
    int KL = mh->n_heads * mh->n_layers;
    for (int i = 0; i < KL; i++) {
        if (rt->w && rt->w[i]) op->weight_release(rt->be, stored_row(mh, (size_t)i * medusa_hidden(mh)), rt->w[i]);
        if (rt->w2 && rt->w2[i])
            op->weight_release(rt->be, stored_row(mh, w2_row0(mh) + (size_t)i * mh->dim), rt->w2[i]);
        if (rt->b) op->release(rt->be, rt->b[i]);
    }
    for (int k = 0; rt->out && k < mh->n_heads; k++)
        if (rt->out[k]) op->weight_release(rt->be, stored_row(mh, out_row0(mh) + (size_t)k * mh->n_vocab), rt->out[k]);
    if (rt->u) op->weight_release(rt->be, stored_row(mh, u_row0(mh)), rt->u);
    float *bufs[] = {rt->h, rt->y, rt->t, rt->t2, rt->ones, rt->logits_be, rt->e};
    for (int i = 0; i < 7; i++) op->release(rt->be, bufs[i]);
    free(rt->tok);
    free(rt->w);
    free(rt->wt);
    free(rt->w2);
    free(rt->w2t);
    free(rt->b);
    free(rt->out);
    free(rt->out_t);
    free(rt);
}

medusa_rt *medusa_rt_create(const medusa_heads *mh, model *m, int max_rows, engine_status *st, char *err,
                            size_t errlen) {
    int K = mh->n_heads, L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = medusa_hidden(mh);
    int DH = D > H ? D : H;
    if (D != m->hp.dim || V != m->hp.n_vocab) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen,
                     "medusa heads (dim %d, vocab %d) do not fit the target (dim %d, vocab %d)", D, V, m->hp.dim,
                     m->hp.n_vocab);
        return NULL;
    }
    if (max_rows < 1) max_rows = 1;
    medusa_rt *rt = calloc(1, sizeof(*rt));
    if (!rt) goto oom;
    rt->mh = mh, rt->m = m, rt->be = m->shards[0].be, rt->max_rows = max_rows;
    const backend_i *op = rt->be->i;
    rt->w = calloc((size_t)K * L, sizeof(*rt->w));
    rt->wt = calloc((size_t)K * L, sizeof(int));
    rt->b = calloc((size_t)K * L, sizeof(float *));
    rt->out = calloc((size_t)K, sizeof(*rt->out));
    rt->out_t = calloc((size_t)K, sizeof(int));
    if (!rt->w || !rt->wt || !rt->b || !rt->out || !rt->out_t) goto oom;
    if (F && (!(rt->w2 = calloc((size_t)K * L, sizeof(*rt->w2))) || !(rt->w2t = calloc((size_t)K * L, sizeof(int)))))
        goto oom;
    for (int i = 0; i < K * L; i++) {
        rt->wt[i] = mh->wtype;
        rt->w[i] = op->weight(rt->be, stored_row(mh, (size_t)i * H), &rt->wt[i], H, D);
        rt->b[i] = op->alloc(rt->be, sizeof(float) * (size_t)H);
        if (!rt->w[i] || !rt->b[i]) goto oom;
        op->upload(rt->be, rt->b[i], mh->b + (size_t)i * H, sizeof(float) * (size_t)H);
        if (F) {
            rt->w2t[i] = mh->wtype;
            if (!(rt->w2[i] = op->weight(rt->be, stored_row(mh, w2_row0(mh) + (size_t)i * D), &rt->w2t[i], D, F)))
                goto oom;
        }
    }
    for (int k = 0; mh->own_output && k < K; k++) {
        rt->out_t[k] = mh->wtype;
        if (!(rt->out[k] = op->weight(rt->be, stored_row(mh, out_row0(mh) + (size_t)k * V), &rt->out_t[k], V, D)))
            goto oom;
    }
    size_t R = (size_t)max_rows;
    if (mh->token_input) {
        rt->u_t = mh->wtype;
        rt->u = op->weight(rt->be, stored_row(mh, u_row0(mh)), &rt->u_t, D, D);
        rt->e = op->alloc(rt->be, sizeof(float) * R * D);
        rt->tok = malloc(sizeof(int32_t) * R);
        if (!rt->u || !rt->e || !rt->tok) goto oom;
    }
    rt->h = op->alloc(rt->be, sizeof(float) * R * D);
    rt->y = op->alloc(rt->be, sizeof(float) * K * R * D);
    rt->t = op->alloc(rt->be, sizeof(float) * R * DH);
    rt->ones = op->alloc(rt->be, sizeof(float) * R * DH);
    if (!rt->h || !rt->y || !rt->t || !rt->ones) goto oom;
    if (F && !(rt->t2 = op->alloc(rt->be, sizeof(float) * R * D))) goto oom;
    if (!rt->be->host_memory && !(rt->logits_be = op->alloc(rt->be, sizeof(float) * K * R * V))) goto oom;
    float *one = malloc(sizeof(float) * R * DH);
    if (!one) goto oom;
    for (size_t i = 0; i < R * DH; i++) one[i] = 1.0f;
    op->upload(rt->be, rt->ones, one, sizeof(float) * R * DH);
    free(one);
    if (op->reserve(rt->be, K * max_rows, DH, 0) != 0) goto oom;
    engine_status_set(st, ENGINE_OK);
    return rt;
oom:
    util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: medusa heads on the %s backend", m->be->i->name);
    medusa_rt_destroy(rt);
    return NULL;
}

int medusa_rt_logits(medusa_rt *rt, float *logits, const float *h, const int32_t *tok, int n, int K) {
    const medusa_heads *mh = rt->mh;
    int L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = medusa_hidden(mh);
    if (n < 1 || n > rt->max_rows || K < 1 || K > mh->n_heads) return -1;
    if (mh->token_input)
        for (int r = 0; r < n; r++) {
            if (!tok || tok[r] < 0 || tok[r] >= V) return -1;
            rt->tok[r] = tok[r];
        }
    backend *be = rt->be;
    const backend_i *op = be->i;
    const model_shard *s0 = &rt->m->shards[0];
    float *lo = rt->logits_be ? rt->logits_be : logits;
    size_t nd = (size_t)n * D;
    op->begin(be, 0);
    op->upload(be, rt->h, h, sizeof(float) * nd);
    if (mh->token_input) { /* h += U e(x), once for every head */
        op->get_rows(be, rt->e, s0->tok_embd.w, s0->tok_embd.type, rt->tok, n, D);
        op->matmul(be, rt->t, rt->e, rt->u, rt->u_t, n, D, D);
        op->add(be, rt->h, rt->t, n, D);
    }
    for (int k = 0; k < K; k++) {
        float *y = rt->y + (size_t)k * nd;
        op->copy(be, y, rt->h, sizeof(float) * nd);
        for (int l = 0; l < L; l++) {
            int i = k * L + l;
            op->matmul(be, rt->t, y, rt->w[i], rt->wt[i], n, D, H);
            for (int r = 0; r < n; r++) op->add(be, rt->t + (size_t)r * H, rt->b[i], 1, H);
            op->silu_mul(be, rt->t, rt->ones, n, H);
            if (F) { /* y += W2 SiLU(W y + b) */
                op->matmul(be, rt->t2, rt->t, rt->w2[i], rt->w2t[i], n, F, D);
                op->add(be, y, rt->t2, n, D);
            } else {
                op->add(be, y, rt->t, n, D);
            }
        }
        if (mh->own_output) op->matmul(be, lo + (size_t)k * n * V, y, rt->out[k], rt->out_t[k], n, D, V);
    }
    /* the shared output matrix read once for all K*n rows */
    if (!mh->own_output) op->matmul(be, lo, rt->y, s0->output.w, s0->output.type, K * n, D, V);
    op->end(be);
    if (rt->logits_be) op->download(be, logits, rt->logits_be, sizeof(float) * (size_t)K * n * V);
    return 0;
}
