/* eagle_train.c — EAGLE-3 head training: data, parameters, forward and
 * backward with the training-time test, the training loop, held-out
 * figures, the GGUF side file (see eagle_train.h). */
#include "engine/train/eagle_train.h"
#include "engine/spec/proposers/medusa.h" /* the target's embedding and output matrix as floats */
#include "engine/train/train_distill.h"
#include "engine/train/train_gguf.h"
#include "engine/train/train_loss.h"
#include "engine/util.h"

#include "kernels/check.h"
#include "kernels/clock.h"
#include "kernels/ggml_type.h"
#include "kernels/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ------------------------------------------------------------------------------------------ */

eagle_data *eagle_data_create(int D, int K, int T, int64_t cap) {
    if (D < 1 || K < 1 || T < 3 || cap < 1) return NULL;
    eagle_data *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->D = D, d->K = K, d->T = T, d->cap = cap;
    size_t P = (size_t)cap * (size_t)T;
    d->len = malloc(sizeof(int32_t) * (size_t)cap);
    d->tok = malloc(sizeof(int32_t) * P);
    d->feat = malloc(sizeof(uint16_t) * P * EAGLE_PARTS * (size_t)D);
    d->kid = malloc(sizeof(int32_t) * P * (size_t)K);
    d->kz = malloc(sizeof(float) * P * (size_t)K);
    if (!d->len || !d->tok || !d->feat || !d->kid || !d->kz) {
        eagle_data_destroy(d);
        return NULL;
    }
    return d;
}

void eagle_data_destroy(eagle_data *d) {
    if (!d) return;
    free(d->len), free(d->tok), free(d->feat), free(d->kid), free(d->kz);
    free(d);
}

/* One sequence in, its features F32 (feat) or F16 (feat16). */
static int data_add(eagle_data *d, const int32_t *tok, int n, const float *feat, const uint16_t *feat16,
                    const int32_t *kid, const float *kz) {
    if (d->n >= d->cap) return 0;
    if (n < 2) return 1; /* nothing to learn from; dropped */
    if (n > d->T) n = d->T;
    size_t o = (size_t)d->n * (size_t)d->T, F = EAGLE_PARTS * (size_t)d->D, K = (size_t)d->K;
    d->len[d->n] = n;
    memcpy(d->tok + o, tok, sizeof(int32_t) * (size_t)n);
    /* the last token was never fed: no features, no top-k there */
    if (feat16) memcpy(d->feat + o * F, feat16, sizeof(uint16_t) * (size_t)(n - 1) * F);
    else
        for (size_t i = 0; i < (size_t)(n - 1) * F; i++) d->feat[o * F + i] = f32_to_fp16(feat[i]);
    memset(d->feat + (o + (size_t)n - 1) * F, 0, sizeof(uint16_t) * F);
    memcpy(d->kid + o * K, kid, sizeof(int32_t) * (size_t)(n - 1) * K);
    memcpy(d->kz + o * K, kz, sizeof(float) * (size_t)(n - 1) * K);
    for (size_t k = 0; k < K; k++) d->kid[(o + (size_t)n - 1) * K + k] = -1, d->kz[(o + (size_t)n - 1) * K + k] = 0;
    d->n++;
    return 1;
}

int eagle_data_add(eagle_data *d, const int32_t *tok, int n, const float *feat, const int32_t *kid, const float *kz) {
    return data_add(d, tok, n, feat, NULL, kid, kz);
}

int eagle_data_add_f16(eagle_data *d, const int32_t *tok, int n, const uint16_t *feat) {
    SPECD_CHECK(d->K == 1);
    if (n > d->T) n = d->T;
    if (n < 2) return 1;
    int32_t *kid = malloc(sizeof(int32_t) * (size_t)n); /* the teacher: all mass on the token that followed */
    float *kz = calloc((size_t)n, sizeof(float));
    if (!kid || !kz) {
        free(kid), free(kz);
        return 0;
    }
    for (int p = 0; p + 1 < n; p++) kid[p] = tok[p + 1];
    int rc = data_add(d, tok, n, NULL, feat, kid, kz);
    free(kid), free(kz);
    return rc;
}

int64_t eagle_data_positions(const eagle_data *d, int64_t from, int64_t to) {
    int64_t n = 0;
    for (int64_t i = from; i < to; i++) n += d->len[i] > 2 ? d->len[i] - 2 : 0;
    return n;
}

static int to_eagle(void *ctx, const int32_t *tok, int len, const int32_t *kid, const float *kz, const float *feat) {
    if (!feat) return -1;
    return eagle_data_add(ctx, tok, len, feat, kid, kz);
}

int64_t eagle_distill_add(eagle_data *d, model *m, const int *layers, const tokenizer *tok,
                          const int32_t *const *prompts, const int *n_prompt, const int *warm, int n, int gen,
                          float temp, float warm_temp, int batch, uint64_t *rs, char *err, size_t errlen) {
    if (m->hp.dim != d->D) return util_fail(err, errlen, "data of width %d for a target of %d", d->D, m->hp.dim);
    return train_distill_run(m, tok, prompts, n_prompt, warm, n, gen, temp, warm_temp, batch, rs, d->K, layers,
                             EAGLE_PARTS, to_eagle, d, err, errlen);
}

/* ---- the head ---------------------------------------------------------------------------------------- */

enum { T_FC, T_ATTN_NORM, T_HIDDEN_NORM, T_Q, T_K, T_V, T_O, T_FFN_NORM, T_GATE, T_UP, T_DOWN, T_OUT_NORM, T_OUT, T_N };

static void add_tensor(eagle_head *h, const char *name, int rows, int cols, bool matrix) {
    train_tensor *t = &h->t[h->n_tensors++];
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->off = h->n_params, t->rows = rows, t->cols = cols, t->matrix = matrix;
    h->n_params += (size_t)rows * (size_t)cols;
}

void eagle_head_view(const eagle_head *h, float *base, eagle_view *v, bool grad) {
    const train_tensor *t = h->t;
    v->fc = base + t[T_FC].off;
    v->layer = (train_layer_w){.attn_norm = base + t[T_ATTN_NORM].off,
                               .wq = base + t[T_Q].off,
                               .wk = base + t[T_K].off,
                               .wv = base + t[T_V].off,
                               .wo = base + t[T_O].off,
                               .ffn_norm = base + t[T_FFN_NORM].off,
                               .w_gate = base + t[T_GATE].off,
                               .w_up = base + t[T_UP].off,
                               .w_down = base + t[T_DOWN].off,
                               .hidden_norm = base + t[T_HIDDEN_NORM].off};
    v->out_norm = base + t[T_OUT_NORM].off;
    v->output = !h->out_shared ? base + t[T_OUT].off : grad ? NULL : h->out_shared; /* the target's: frozen */
}

static train_layer_shape head_shape(const eagle_head *h, int J) {
    return (train_layer_shape){.D = h->D, .H = h->H, .Hkv = h->Hkv, .E = h->E, .F = h->F, .eps = h->eps,
                               .eagle3 = 1, .steps = J};
}

/* a normal draw of standard deviation sd (Box-Muller) */
static float gauss(uint64_t *rs, float sd) {
    double u1 = ((double)(util_splitmix64(rs) >> 11) + 0.5) * 0x1p-53, u2 = (double)(util_splitmix64(rs) >> 11) * 0x1p-53;
    return (float)(sd * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

eagle_head *eagle_head_alloc(int V, int D, int H, int Hkv, int E, int F, float eps, float rope_base, bool shared_output,
                             uint64_t seed) {
    if (V < 1 || D < 1 || H < 1 || Hkv < 1 || H % Hkv || E < 2 || E % 2 || E > 256 || F < 1) return NULL;
    eagle_head *h = calloc(1, sizeof(*h));
    if (!h) return NULL;
    h->V = V, h->D = D, h->H = H, h->Hkv = Hkv, h->E = E, h->F = F, h->ctx = 2048, h->eps = eps;
    h->rope_base = rope_base;
    int QD = H * E, KD = Hkv * E;
    add_tensor(h, "fc.weight", D, EAGLE_PARTS * D, true);
    add_tensor(h, "blk.0.attn_norm.weight", 1, D, false);
    add_tensor(h, "blk.0.hidden_norm.weight", 1, D, false);
    add_tensor(h, "blk.0.attn_q.weight", QD, 2 * D, true);
    add_tensor(h, "blk.0.attn_k.weight", KD, 2 * D, true);
    add_tensor(h, "blk.0.attn_v.weight", KD, 2 * D, true);
    add_tensor(h, "blk.0.attn_output.weight", D, QD, true);
    add_tensor(h, "blk.0.ffn_norm.weight", 1, D, false);
    add_tensor(h, "blk.0.ffn_gate.weight", F, D, true);
    add_tensor(h, "blk.0.ffn_up.weight", F, D, true);
    add_tensor(h, "blk.0.ffn_down.weight", D, F, true);
    add_tensor(h, "output_norm.weight", 1, D, false);
    if (!shared_output) add_tensor(h, "output.weight", V, D, true);
    for (int i = 0; i < E / 2; i++) h->inv_freq[i] = (float)pow(rope_base, -2.0 * i / E);
    h->params = malloc(sizeof(float) * h->n_params);
    h->embd = calloc((size_t)V * D, sizeof(float));
    if (shared_output) h->out_shared = malloc(sizeof(float) * (size_t)V * D);
    if (!h->params || !h->embd || (shared_output && !h->out_shared)) {
        eagle_head_destroy(h);
        return NULL;
    }
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull + 0xEA61E3ull;
    for (int t = 0; t < h->n_tensors; t++) {
        train_tensor *tt = &h->t[t];
        float *p = h->params + tt->off, sd = (t == T_O || t == T_DOWN) ? 0.02f / sqrtf(2.0f) : 0.02f;
        size_t n = (size_t)tt->rows * tt->cols;
        for (size_t i = 0; i < n; i++) p[i] = tt->matrix ? gauss(&rs, sd) : 1.0f;
    }
    if (shared_output)
        for (size_t i = 0; i < (size_t)V * D; i++) h->out_shared[i] = gauss(&rs, 0.02f);
    eagle_view v;
    eagle_head_view(h, h->params, &v, false);
    for (int r = 0; r < D; r++) v.fc[(size_t)r * EAGLE_PARTS * D + (size_t)(EAGLE_PARTS - 1) * D + r] += 1.0f;
    return h;
}

eagle_head *eagle_head_create(model *m, const int *layers, int ff, bool shared_output, uint64_t seed, char *err,
                              size_t errlen) {
    const model_hparams *hp = &m->hp;
    if (hp->eagle3 || m->n_shards != 1)
        return util_fail(err, errlen, "an EAGLE head trains on a whole (unsharded) target model"), NULL;
    for (int i = 0; i < EAGLE_PARTS; i++)
        if (layers[i] < 0 || layers[i] >= hp->n_layer)
            return util_fail(err, errlen, "target layer %d out of range (0..%d)", layers[i], hp->n_layer - 1), NULL;
    if (!m->be->host_memory) return util_fail(err, errlen, "training runs on a CPU target"), NULL;
    int D = hp->dim, V = hp->n_vocab;
    eagle_head *h = eagle_head_alloc(V, D, hp->n_head, hp->n_kv_head, hp->head_dim, ff > 0 ? ff : hp->ff, hp->eps,
                                     hp->rope_base, shared_output, seed);
    if (!h) return util_fail(err, errlen, "out of memory, or a target shape a head cannot take (head dim %d)",
                             hp->head_dim), NULL;
    h->ctx = hp->n_ctx_train;
    memcpy(h->layers, layers, sizeof(h->layers));
    float *O = medusa_target_output(m, err, errlen);
    float *Emb = O ? medusa_target_embedding(m, err, errlen) : NULL;
    if (!O || !Emb) {
        free(O);
        eagle_head_destroy(h);
        return NULL;
    }
    eagle_view v;
    eagle_head_view(h, h->params, &v, false);
    memcpy(v.output, O, sizeof(float) * (size_t)V * D); /* its own copy to train, or the target's (shared) */
    memcpy(v.out_norm, m->shards[0].out_norm, sizeof(float) * (size_t)D);
    memcpy(h->embd, Emb, sizeof(float) * (size_t)V * D);
    free(O), free(Emb);
    return h;
}

eagle_head *eagle_head_load(model *m, const char *path, char *err, size_t errlen) {
    engine_status st;
    gguf_file *f = gguf_open(path, &st, err, errlen);
    if (!f) return NULL;
    eagle_head *h = NULL;
    uint32_t D = 0, F = 0, V = 0;
    const gguf_kv *tl = gguf_get_arr(f, "eagle3.target_layers", GGUF_TYPE_UINT32);
    gguf_str arch;
    if (!gguf_get_str(f, "general.architecture", &arch) || !gguf_str_eq(arch, "eagle3") ||
        !gguf_get_u32(f, "eagle3.embedding_length", &D) || !gguf_get_u32(f, "eagle3.feed_forward_length", &F) ||
        !gguf_get_u32(f, "eagle3.vocab_size", &V) || !tl || tl->arr_n != EAGLE_PARTS) {
        util_fail(err, errlen, "%s is not an EAGLE head specd wrote (eagle3 with target_layers)", path);
        goto done;
    }
    if (gguf_find_tensor(f, "d2t") || gguf_find_tensor(f, "d2t.weight") || (int)V != m->hp.n_vocab ||
        (int)D != m->hp.dim) {
        util_fail(err, errlen, "%s: a head of %u tokens and width %u (a reduced draft vocabulary?) cannot be "
                  "fine-tuned for this target (%d tokens, width %d)", path, V, D, m->hp.n_vocab, m->hp.dim);
        goto done;
    }
    int layers[EAGLE_PARTS];
    for (int i = 0; i < EAGLE_PARTS; i++) {
        uint32_t x;
        memcpy(&x, (const uint8_t *)tl->arr_data + 4 * i, 4);
        layers[i] = (int)x;
    }
    bool shared = !gguf_find_tensor(f, "output.weight");
    if (!(h = eagle_head_create(m, layers, (int)F, shared, 1, err, errlen))) goto done;
    for (int t = 0; t < h->n_tensors; t++) {
        const train_tensor *tt = &h->t[t];
        const gguf_tensor *g = gguf_find_tensor(f, tt->name);
        size_t n = (size_t)tt->rows * tt->cols;
        if (!g || g->ne[0] * g->ne[1] * g->ne[2] * g->ne[3] != n || (g->type != GGML_TYPE_F32 && g->type != GGML_TYPE_F16)) {
            util_fail(err, errlen, "%s: tensor %s is missing, of another shape, or not F32/F16", path, tt->name);
            eagle_head_destroy(h);
            h = NULL;
            goto done;
        }
        float *p = h->params + tt->off;
        if (g->type == GGML_TYPE_F32) memcpy(p, g->data, sizeof(float) * n);
        else
            for (size_t i = 0; i < n; i++) {
                uint16_t x;
                memcpy(&x, (const uint8_t *)g->data + 2 * i, 2);
                p[i] = fp16_to_f32(x);
            }
    }
    uint32_t ctx;
    if (gguf_get_u32(f, "eagle3.context_length", &ctx)) h->ctx = (int)ctx;
done:
    gguf_close(f);
    return h;
}

eagle_head *eagle_head_clone(const eagle_head *h) {
    eagle_head *c = malloc(sizeof(*c));
    if (!c) return NULL;
    *c = *h;
    size_t VD = (size_t)h->V * h->D;
    c->params = malloc(sizeof(float) * h->n_params);
    c->embd = malloc(sizeof(float) * VD);
    c->out_shared = h->out_shared ? malloc(sizeof(float) * VD) : NULL;
    if (!c->params || !c->embd || (h->out_shared && !c->out_shared)) {
        eagle_head_destroy(c);
        return NULL;
    }
    memcpy(c->params, h->params, sizeof(float) * h->n_params);
    memcpy(c->embd, h->embd, sizeof(float) * VD);
    if (h->out_shared) memcpy(c->out_shared, h->out_shared, sizeof(float) * VD);
    return c;
}

void eagle_head_destroy(eagle_head *h) {
    if (!h) return;
    free(h->params), free(h->embd), free(h->out_shared);
    free(h);
}

int eagle_head_save(const eagle_head *h, const model *target, const char *path, ggml_type type, const char *desc,
                    char *err, size_t errlen) {
    if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16) return util_fail(err, errlen, "matrices must be F32 or F16");
    const gguf_tensor *te = gguf_find_tensor(target->gguf, "token_embd.weight");
    if (!te) return util_fail(err, errlen, "the target has no token_embd.weight");
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "eagle3");
    gguf_writer_set_str(w, "general.name", "eagle3 head (specd train-eagle)");
    if (desc) gguf_writer_set_str(w, "general.description", desc);
    gguf_writer_set_u32(w, "general.file_type", type == GGML_TYPE_F16 ? 1 : 0);
    train_gguf_copy_tokenizer(w, target->gguf); /* so the loader checks the head against its target */
#define U32(k, v) gguf_writer_set_u32(w, "eagle3." k, (uint32_t)(v))
    U32("context_length", h->ctx);
    U32("embedding_length", h->D);
    U32("block_count", 1);
    U32("feed_forward_length", h->F);
    U32("attention.head_count", h->H);
    U32("attention.head_count_kv", h->Hkv);
    U32("attention.key_length", h->E);
    U32("attention.value_length", h->E);
    U32("rope.dimension_count", h->E);
    U32("vocab_size", h->V);
#undef U32
    gguf_writer_set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", h->eps);
    gguf_writer_set_f32(w, "eagle3.rope.freq_base", h->rope_base);
    uint32_t tl[EAGLE_PARTS];
    for (int i = 0; i < EAGLE_PARTS; i++) tl[i] = (uint32_t)h->layers[i];
    gguf_writer_set_arr(w, "eagle3.target_layers", GGUF_TYPE_UINT32, tl, EAGLE_PARTS);
    int rc = 0;
    if (!gguf_writer_add_tensor(w, "token_embd.weight", te->type, 2, (const uint64_t[]){te->ne[0], te->ne[1]},
                                te->data))
        rc = util_fail(err, errlen, "cannot add token_embd.weight");
    if (!rc) rc = train_gguf_add_tensors(w, h->t, h->n_tensors, h->params, type, err, errlen);
    if (!rc) rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_destroy(w);
    return rc;
}

/* ---- forward and backward ---------------------------------------------------------------------------- */

struct eagle_work {
    int S, T, J;
    train_layer_shape sh;
    train_layer_act act[TRAIN_MAX_STEPS];
    float *x0;                   /* (M, D) fc's output: step 0's feature */
    float *out, *xf, *emb;       /* (J, M, D) each step's output, its normed copy, its embeddings */
    float *logits;               /* (J, M, V) */
    int32_t *pos, *ids;          /* (J, M) RoPE positions, (M) token ids */
    float *dk[TRAIN_MAX_STEPS], *dv[TRAIN_MAX_STEPS]; /* (M, Hkv*E) */
    float *dfeat, *dout, *dxf;   /* (M, D) */
    float *dz;                   /* (V) */
    float *scratch;
    float *buf;
};

eagle_work *eagle_work_create(const eagle_head *h, int S, int T, int J) {
    if (J < 1 || J > TRAIN_MAX_STEPS || S < 1 || T < 1) return NULL;
    eagle_work *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->S = S, w->T = T, w->J = J, w->sh = head_shape(h, J);
    size_t M = (size_t)S * T, D = (size_t)h->D, V = (size_t)h->V, KD = (size_t)h->Hkv * h->E;
    size_t A = train_layer_act_floats(&w->sh, S, T), SC = train_layer_scratch_floats(&w->sh, S, T);
    size_t total = J * A + M * D + 3 * J * M * D + J * M * V + 2 * J * M * KD + 3 * M * D + V + SC;
    w->buf = malloc(sizeof(float) * total);
    w->pos = malloc(sizeof(int32_t) * (size_t)J * M);
    w->ids = malloc(sizeof(int32_t) * M);
    if (!w->buf || !w->pos || !w->ids) {
        eagle_work_destroy(w);
        return NULL;
    }
    float *p = w->buf;
    for (int j = 0; j < J; j++, p += A) train_layer_act_bind(&w->act[j], &w->sh, S, T, p);
    w->x0 = p, p += M * D;
    w->out = p, p += J * M * D;
    w->xf = p, p += J * M * D;
    w->emb = p, p += J * M * D;
    w->logits = p, p += J * M * V;
    for (int j = 0; j < J; j++) w->dk[j] = p, p += M * KD, w->dv[j] = p, p += M * KD;
    w->dfeat = p, p += M * D;
    w->dout = p, p += M * D;
    w->dxf = p, p += M * D;
    w->dz = p, p += V;
    w->scratch = p;
    return w;
}

void eagle_work_destroy(eagle_work *w) {
    if (!w) return;
    free(w->buf), free(w->pos), free(w->ids);
    free(w);
}

void eagle_forward(train_ctx *c, eagle_work *w, const eagle_head *h, const eagle_batch *b, const float **logits) {
    int S = b->S, T = w->T, J = b->J, M = S * T, D = h->D, V = h->V;
    size_t MD = (size_t)M * D;
    eagle_view v;
    eagle_head_view(h, h->params, &v, false);
    top_linear(c, w->x0, b->feat, v.fc, M, EAGLE_PARTS * D, D);
    for (int j = 0; j < J; j++) {
        int32_t *pos = w->pos + (size_t)j * M;
        for (int s = 0; s < S; s++)
            for (int t = 0; t < T; t++) {
                w->ids[s * T + t] = b->tok[(size_t)s * (T + J) + t + j];
                pos[s * T + t] = t + j;
            }
        float *emb = w->emb + j * MD, *out = w->out + j * MD, *xf = w->xf + j * MD;
        top_embed(c, emb, h->embd, w->ids, M, D);
        w->act[j].S = S;
        train_layer_steps st = {j, w->act, w->dk, w->dv};
        train_layer_forward(c, &w->sh, &v.layer, &w->act[j], out, j ? out - MD : w->x0, emb, pos, h->inv_freq, &st);
        top_rmsnorm(c, xf, out, v.out_norm, M, D, h->eps);
        top_linear(c, w->logits + (size_t)j * M * V, xf, v.output, M, D, V);
        if (logits) logits[j] = w->logits + (size_t)j * M * V;
    }
}

/* the row's teacher choice: the top-k's first, else the label; -1 none */
static int32_t want(const eagle_batch *b, int j, int r) {
    if (b->K > 0 && b->kid[j] && b->kid[j][(size_t)r * b->K] >= 0) return b->kid[j][(size_t)r * b->K];
    return b->lab[j] ? b->lab[j][r] : -1;
}

static int argmax(const float *z, int V) {
    int a = 0;
    for (int i = 1; i < V; i++) a = z[i] > z[a] ? i : a;
    return a;
}

double eagle_forward_backward(train_ctx *c, eagle_work *w, const eagle_head *h, const eagle_batch *b, float *grad,
                              int64_t *correct) {
    int S = b->S, T = w->T, J = b->J, M = S * T, D = h->D, V = h->V, KD = h->Hkv * h->E;
    size_t MD = (size_t)M * D;
    eagle_forward(c, w, h, b, NULL);
    double loss = 0;
    for (int j = 0; j < J; j++) {
        float *z = w->logits + (size_t)j * M * V;
        if (correct)
            for (int r = 0; r < M; r++)
                if (b->wt[j][r] > 0) correct[j] += argmax(z + (size_t)r * V, V) == want(b, j, r);
        loss += tl_rows(z, w->dz, M, V, b->lab[j], b->K, b->kid[j], b->kz[j], b->wt[j], b->ce_w, b->kl_w, NULL, NULL);
    }
    eagle_view v, g;
    eagle_head_view(h, h->params, &v, false);
    eagle_head_view(h, grad, &g, true);
    for (int j = 0; j < J; j++) {
        memset(w->dk[j], 0, sizeof(float) * (size_t)M * KD);
        memset(w->dv[j], 0, sizeof(float) * (size_t)M * KD);
    }
    memset(w->dfeat, 0, sizeof(float) * MD); /* d loss / d (step j's output) through step j + 1's input */
    for (int j = J - 1; j >= 0; j--) {
        const float *dz = w->logits + (size_t)j * M * V, *xf = w->xf + j * MD, *out = w->out + j * MD;
        top_linear_bwd(c, w->dxf, g.output, dz, xf, v.output, M, D, V);
        memcpy(w->dout, w->dfeat, sizeof(float) * MD);
        top_rmsnorm_bwd(w->dout, g.out_norm, w->dxf, out, v.out_norm, M, D, h->eps);
        train_layer_steps st = {j, w->act, w->dk, w->dv};
        train_layer_backward(c, &w->sh, &v.layer, &g.layer, w->dfeat, w->dout, &w->act[j], w->pos + (size_t)j * M,
                             h->inv_freq, &st, w->scratch);
    }
    top_linear_bwd(c, NULL, g.fc, w->dfeat, b->feat, v.fc, M, EAGLE_PARTS * D, D);
    return loss;
}

/* ---- workers ------------------------------------------------------------------------------------------- */

typedef struct {
    const eagle_head *h;
    const eagle_data *d;
    train_ctx *c;
    eagle_work *w;
    int S, J;                    /* slots, steps */
    float decay;
    eagle_batch b;
    float *feat;                 /* (S*T, 3D) */
    int32_t *tok;                /* (S, T + J) */
    int32_t *lab, *kid;          /* (J, S*T) (J, S*T, K) */
    float *kz, *wt;              /* (J, S*T, K) (J, S*T) */
    int n;                       /* sequences loaded */
    float *grad;                 /* (n_params) or NULL: evaluation */
    double loss;
    int64_t correct[TRAIN_MAX_STEPS], rows[TRAIN_MAX_STEPS];
    /* evaluation */
    double run, run_rows;        /* leading correct steps summed over rows with all J steps */
} worker;

static int worker_init(worker *wk, const eagle_head *h, const eagle_data *d, int S, int J, float decay, bool grad) {
    memset(wk, 0, sizeof(*wk));
    size_t T = (size_t)d->T, R = (size_t)S * T, K = (size_t)d->K, D = (size_t)h->D;
    wk->h = h, wk->d = d, wk->S = S, wk->J = J, wk->decay = decay;
    wk->c = train_ctx_create(1);
    wk->w = eagle_work_create(h, S, (int)T, J);
    wk->feat = malloc(sizeof(float) * R * EAGLE_PARTS * D);
    wk->tok = malloc(sizeof(int32_t) * (size_t)S * (T + (size_t)J));
    wk->lab = malloc(sizeof(int32_t) * (size_t)J * R);
    wk->kid = malloc(sizeof(int32_t) * (size_t)J * R * K);
    wk->kz = malloc(sizeof(float) * (size_t)J * R * K);
    wk->wt = malloc(sizeof(float) * (size_t)J * R);
    if (grad) wk->grad = malloc(sizeof(float) * h->n_params);
    if (!wk->c || !wk->w || !wk->feat || !wk->tok || !wk->lab || !wk->kid || !wk->kz || !wk->wt || (grad && !wk->grad))
        return -1;
    wk->b = (eagle_batch){.S = 0, .T = (int)T, .J = J, .K = (int)K, .feat = wk->feat, .tok = wk->tok};
    for (int j = 0; j < J; j++) {
        wk->b.lab[j] = wk->lab + (size_t)j * R;
        wk->b.kid[j] = wk->kid + (size_t)j * R * K;
        wk->b.kz[j] = wk->kz + (size_t)j * R * K;
        wk->b.wt[j] = wk->wt + (size_t)j * R;
    }
    return 0;
}

static void worker_free(worker *wk) {
    train_ctx_destroy(wk->c);
    eagle_work_destroy(wk->w);
    free(wk->feat), free(wk->tok), free(wk->lab), free(wk->kid), free(wk->kz), free(wk->wt), free(wk->grad);
}

/* sequence ex of d into slot i; returns its weighted rows (before normalization) */
static double worker_load(worker *wk, int64_t ex, int i) {
    const eagle_data *d = wk->d;
    int T = d->T, J = wk->J, K = d->K, len = d->len[ex];
    size_t F = EAGLE_PARTS * (size_t)d->D, R = (size_t)wk->S * T, o = (size_t)ex * T;
    float *feat = wk->feat + (size_t)i * T * F;
    for (int t = 0; t < T; t++)
        for (size_t k = 0; k < F; k++) feat[(size_t)t * F + k] = t < len ? fp16_to_f32(d->feat[(o + t) * F + k]) : 0.0f;
    int32_t *tok = wk->tok + (size_t)i * (T + J);
    for (int u = 0; u < T + J; u++) tok[u] = u + 1 < len ? d->tok[o + u + 1] : 0;
    double wsum = 0;
    for (int j = 0; j < J; j++) {
        float wj = powf(wk->decay, (float)j);
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)i * T + t, rr = (size_t)j * R + r;
            bool valid = t + j + 2 <= len - 1;
            wk->lab[rr] = valid ? d->tok[o + t + j + 2] : -1;
            if (valid) {
                memcpy(wk->kid + rr * K, d->kid + (o + t + j + 1) * K, sizeof(int32_t) * (size_t)K);
                memcpy(wk->kz + rr * K, d->kz + (o + t + j + 1) * K, sizeof(float) * (size_t)K);
            } else {
                wk->kid[rr * K] = -1;
            }
            wk->wt[rr] = valid ? wj : 0.0f;
            wsum += valid && j == 0;
        }
    }
    return wsum;
}

/* every weight times s */
static void worker_scale(worker *wk, float s) {
    size_t R = (size_t)wk->S * wk->d->T;
    for (size_t i = 0; i < (size_t)wk->J * R; i++) wk->wt[i] *= s;
}

static void *worker_step(void *arg) {
    worker *wk = arg;
    memset(wk->grad, 0, sizeof(float) * wk->h->n_params);
    wk->loss = 0;
    if (wk->n == 0) return NULL;
    wk->b.S = wk->n;
    for (int j = 0; j < wk->J; j++)
        for (size_t r = 0; r < (size_t)wk->n * wk->d->T; r++) wk->rows[j] += wk->b.wt[j][r] > 0;
    wk->loss = eagle_forward_backward(wk->c, wk->w, wk->h, &wk->b, wk->grad, wk->correct);
    return NULL;
}

static void *worker_eval(void *arg) {
    worker *wk = arg;
    if (wk->n == 0) return NULL;
    wk->b.S = wk->n;
    const float *z[TRAIN_MAX_STEPS];
    eagle_forward(wk->c, wk->w, wk->h, &wk->b, z);
    int V = wk->h->V, J = wk->J, T = wk->d->T;
    for (int r = 0; r < wk->n * T; r++) {
        bool all = true, lead = true;
        int run = 0;
        for (int j = 0; j < J; j++) {
            if (wk->b.wt[j][r] <= 0) {
                all = false;
                continue;
            }
            bool ok = argmax(z[j] + (size_t)r * V, V) == want(&wk->b, j, r);
            wk->correct[j] += ok, wk->rows[j]++;
            lead = lead && ok;
            run += lead;
        }
        if (all) wk->run += run, wk->run_rows += 1;
    }
    /* the loss (consumes the logits) */
    for (int j = 0; j < J; j++)
        wk->loss += tl_rows((float *)z[j], wk->w->dz, wk->n * T, V, wk->b.lab[j], wk->b.K, wk->b.kid[j], wk->b.kz[j],
                            wk->b.wt[j], 0.0f, 1.0f, NULL, NULL);
    return NULL;
}

/* ---- training -------------------------------------------------------------------------------------------- */

void eagle_train_opts_init(eagle_train_opts *o) {
    memset(o, 0, sizeof(*o));
    train_optim_init(&o->opt);
    o->opt.lr = 1e-3f, o->opt.wd = 0.01f;
    o->J = 4, o->step_decay = 0.8f, o->batch = 4, o->epochs = 1, o->warmup = 0.05f;
    o->ce_w = 0.1f, o->kl_w = 1.0f, o->holdout = 0.05f, o->threads = 1, o->seed = 1;
}

int eagle_evaluate(const eagle_head *h, const eagle_data *d, int64_t from, int64_t to, int J, float step_decay,
                   int threads, eagle_eval *ev) {
    memset(ev, 0, sizeof(*ev));
    int W = threads > 0 ? threads : 1, S = 4;
    if (W > TRAIN_MAX_WORKERS) W = TRAIN_MAX_WORKERS;
    worker *ws = calloc((size_t)W, sizeof(worker));
    int rc = ws ? 0 : -1;
    for (int t = 0; t < W && !rc; t++) rc = worker_init(&ws[t], h, d, S, J, step_decay, false);
    double rows0 = 0;
    for (int64_t i = from; i < to && !rc;) {
        for (int t = 0; t < W; t++) {
            ws[t].n = 0;
            for (int k = 0; k < S && i < to; k++, i++) rows0 += worker_load(&ws[t], i, ws[t].n++);
        }
        train_fan_out(ws, sizeof(worker), W, worker_eval);
    }
    int64_t cor[TRAIN_MAX_STEPS] = {0}, rows[TRAIN_MAX_STEPS] = {0};
    double run = 0, run_rows = 0, loss = 0;
    for (int t = 0; ws && t < W; t++) {
        for (int j = 0; j < J; j++) cor[j] += ws[t].correct[j], rows[j] += ws[t].rows[j];
        run += ws[t].run, run_rows += ws[t].run_rows, loss += ws[t].loss;
        worker_free(&ws[t]);
    }
    free(ws);
    if (rc) return -1;
    for (int j = 0; j < J; j++) ev->acc[j] = rows[j] ? (double)cor[j] / (double)rows[j] : 0;
    ev->accept_len = run_rows > 0 ? run / run_rows : 0;
    ev->loss = rows0 > 0 ? loss / rows0 : 0;
    ev->rows = (int64_t)rows0;
    return 0;
}

/* held-out share of step-0 teacher choices equal to the most frequent one in training */
static double unigram(const eagle_data *d, int64_t n_train, int V) {
    int64_t *cnt = calloc((size_t)V + 1, sizeof(int64_t));
    if (!cnt) return 0;
    for (int64_t i = 0; i < n_train; i++)
        for (int t = 1; t + 1 < d->len[i]; t++) cnt[d->kid[((size_t)i * d->T + t) * d->K]]++;
    int best = 0;
    for (int v = 1; v < V; v++) best = cnt[v] > cnt[best] ? v : best;
    double hit = 0, all = 0;
    for (int64_t i = n_train; i < d->n; i++)
        for (int t = 1; t + 1 < d->len[i]; t++) hit += d->kid[((size_t)i * d->T + t) * d->K] == best, all++;
    free(cnt);
    return all > 0 ? hit / all : 0;
}

int eagle_train(eagle_head *h, const eagle_data *d, const eagle_train_opts *o, eagle_train_result *res, char *err,
                size_t errlen) {
    memset(res, 0, sizeof(*res));
    if (o->J < 1 || o->J > TRAIN_MAX_STEPS) return util_fail(err, errlen, "%d steps (1..%d)", o->J, TRAIN_MAX_STEPS);
    if (d->D != h->D) return util_fail(err, errlen, "data of width %d for a head of %d", d->D, h->D);
    int64_t n_hold = (int64_t)llround(o->holdout * (double)d->n);
    if (n_hold < 1) n_hold = 1;
    int64_t n_train = d->n - n_hold;
    if (n_train < 1) return util_fail(err, errlen, "%lld sequences: too few to train and hold out", (long long)d->n);
    res->n_train = n_train, res->n_heldout = n_hold;
    int B = o->batch > 0 ? o->batch : 1, W = o->threads > 0 ? o->threads : 1;
    if (W > B) W = B;
    if (W > TRAIN_MAX_WORKERS) W = TRAIN_MAX_WORKERS;
    int S = (B + W - 1) / W;
    int64_t steps = o->steps > 0 ? o->steps : (o->epochs * n_train + B - 1) / B;
    train_optim opt = o->opt;
    opt.steps = steps;
    opt.warmup = (int64_t)(o->warmup * (double)steps);
    if (!o->skip_before && eagle_evaluate(h, d, n_train, d->n, o->J, o->step_decay, o->threads, &res->before) != 0)
        return util_fail(err, errlen, "out of memory: evaluation");
    res->unigram_acc = unigram(d, n_train, h->V);
    worker *ws = calloc((size_t)W, sizeof(worker));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n_train);
    eagle_optim_state *st = o->state;
    float *mom = st ? st->mom : calloc(h->n_params, sizeof(float));
    float *vel = st ? st->vel : calloc(h->n_params, sizeof(float));
    int64_t g0 = st ? st->step : 0;
    int rc = ws && perm && mom && vel ? 0 : -1;
    for (int t = 0; t < W && !rc; t++) rc = worker_init(&ws[t], h, d, S, o->J, o->step_decay, true);
    if (rc) {
        for (int t = 0; ws && t < W; t++) worker_free(&ws[t]);
        free(ws), free(perm);
        if (!st) free(mom), free(vel);
        return util_fail(err, errlen, "out of memory: %d workers of %d x %d rows x %d steps", W, S, d->T, o->J);
    }
    int64_t cur_epoch = -1;
    double t0 = clock_now_ms(), tw = t0, wloss = 0, wpos = 0;
    int64_t wsteps = 0, wcor[TRAIN_MAX_STEPS] = {0}, wrows[TRAIN_MAX_STEPS] = {0};
    for (int64_t step = 0; step < steps; step++) {
        if (o->stop && *o->stop) {
            res->interrupted = true;
            break;
        }
        double cnt = 0;
        for (int t = 0; t < W; t++) ws[t].n = 0, ws[t].b.ce_w = o->ce_w, ws[t].b.kl_w = o->kl_w;
        for (int k = 0; k < B; k++) {
            int64_t i = step * B + k, e = i / n_train;
            if (e != cur_epoch) train_epoch_perm(perm, n_train, o->seed, cur_epoch = e);
            worker *wk = &ws[k * W / B];
            cnt += worker_load(wk, perm[i % n_train], wk->n++);
        }
        float inv = cnt > 0 ? (float)(1.0 / cnt) : 0.0f;
        for (int t = 0; t < W; t++) {
            worker_scale(&ws[t], inv);
            memset(ws[t].correct, 0, sizeof(ws[t].correct));
            memset(ws[t].rows, 0, sizeof(ws[t].rows));
        }
        train_fan_out(ws, sizeof(worker), W, worker_step);
        double loss = 0;
        for (int t = 0; t < W; t++) {
            loss += ws[t].loss;
            for (int j = 0; j < o->J; j++) wcor[j] += ws[t].correct[j], wrows[j] += ws[t].rows[j];
            if (t)
                for (size_t i = 0; i < h->n_params; i++) ws[0].grad[i] += ws[t].grad[i];
        }
        train_clip(ws[0].grad, h->n_params, opt.clip);
        train_adamw_tensors(h->t, h->n_tensors, h->params, mom, vel, ws[0].grad, g0 + step, train_lr(&opt, step),
                            &opt);
        res->steps++, res->positions += cnt;
        wloss += loss, wpos += cnt, wsteps++;
        if (o->progress && o->progress_every > 0 && ((step + 1) % o->progress_every == 0 || step + 1 == steps)) {
            double now = clock_now_ms(), dt = (now - tw) / 1e3 > 1e-9 ? (now - tw) / 1e3 : 1e-9;
            double sps = wsteps / dt;
            eagle_progress p = {.step = step + 1, .steps = steps, .loss = wloss / (double)wsteps, .J = o->J,
                                .pos_per_s = wpos / dt, .eta_s = sps > 0 ? (double)(steps - step - 1) / sps : 0};
            for (int j = 0; j < o->J; j++) p.acc[j] = wrows[j] ? (double)wcor[j] / (double)wrows[j] : 0;
            o->progress(o->progress_ctx, &p);
            tw = now, wloss = wpos = 0, wsteps = 0;
            memset(wcor, 0, sizeof(wcor)), memset(wrows, 0, sizeof(wrows));
        }
    }
    res->seconds = (clock_now_ms() - t0) / 1e3;
    for (int t = 0; t < W; t++) worker_free(&ws[t]);
    free(ws), free(perm);
    if (st) st->step += res->steps;
    else free(mom), free(vel);
    if (eagle_evaluate(h, d, n_train, d->n, o->J, o->step_decay, o->threads, &res->after) != 0)
        return util_fail(err, errlen, "out of memory: evaluation");
    return 0;
}
