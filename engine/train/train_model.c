/* train_model.c — parameter layout, initialization and the whole-model
 * forward/backward of a llama being trained (see train_model.h). */
#include "engine/train/train_model.h"
#include "engine/train/train_loss.h"
#include "engine/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int train_cfg_check(const train_cfg *c, char *err, size_t errlen) {
    if (c->V < 2 || c->D < 2 || c->L < 1 || c->H < 1 || c->Hkv < 1 || c->E < 2 || c->F < 1)
        return util_fail(err, errlen, "bad model shape (vocab %d, dim %d, layers %d, heads %d/%d, head dim %d, ff %d)",
                         c->V, c->D, c->L, c->H, c->Hkv, c->E, c->F);
    if (c->L > 256) return util_fail(err, errlen, "at most 256 layers (got %d)", c->L);
    if (c->H % c->Hkv) return util_fail(err, errlen, "heads %d are not a multiple of kv heads %d", c->H, c->Hkv);
    if (c->E % 2 || c->E > 256) return util_fail(err, errlen, "head dim %d must be even and at most 256", c->E);
    if (c->eps <= 0 || c->rope_base <= 1) return util_fail(err, errlen, "bad eps %g or rope base %g", c->eps, c->rope_base);
    return 0;
}

size_t train_cfg_params(const train_cfg *c) {
    size_t V = c->V, D = c->D, QD = (size_t)c->H * c->E, KD = (size_t)c->Hkv * c->E, F = c->F;
    size_t layer = 2 * D + QD * D * 2 + KD * D * 2 + 3 * F * D;
    return V * D * (c->tied ? 1 : 2) + D + (size_t)c->L * layer;
}

static void add_tensor(train_model *m, const char *name, int rows, int cols, bool matrix) {
    train_tensor *t = &m->t[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->off = m->n_params, t->rows = rows, t->cols = cols, t->matrix = matrix;
    m->n_params += (size_t)rows * cols;
}

/* N(0, 1) by Box-Muller from a splitmix64 stream */
static double gauss(uint64_t *rs) {
    double u1 = ((util_splitmix64(rs) >> 11) + 0.5) * 0x1p-53, u2 = (util_splitmix64(rs) >> 11) * 0x1p-53;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

train_model *train_model_create(const train_cfg *c, uint64_t seed, char *err, size_t errlen) {
    if (train_cfg_check(c, err, errlen)) return NULL;
    if (4 + 9 * c->L > TRAIN_MAX_TENSORS) {
        util_fail(err, errlen, "too many layers");
        return NULL;
    }
    train_model *m = calloc(1, sizeof(*m));
    if (!m) {
        util_fail(err, errlen, "out of memory");
        return NULL;
    }
    m->c = *c;
    int D = c->D, QD = c->H * c->E, KD = c->Hkv * c->E, F = c->F;
    char n[48];
    add_tensor(m, "token_embd.weight", c->V, D, true);
    for (int l = 0; l < c->L; l++) {
#define T(suffix, r, cl, mx) (snprintf(n, sizeof n, "blk.%d." suffix, l), add_tensor(m, n, r, cl, mx))
        T("attn_norm.weight", 1, D, false);
        T("attn_q.weight", QD, D, true);
        T("attn_k.weight", KD, D, true);
        T("attn_v.weight", KD, D, true);
        T("attn_output.weight", D, QD, true);
        T("ffn_norm.weight", 1, D, false);
        T("ffn_gate.weight", F, D, true);
        T("ffn_up.weight", F, D, true);
        T("ffn_down.weight", D, F, true);
#undef T
    }
    add_tensor(m, "output_norm.weight", 1, D, false);
    if (!c->tied) add_tensor(m, "output.weight", c->V, D, true);
    m->params = malloc(sizeof(float) * m->n_params);
    if (!m->params) {
        util_fail(err, errlen, "out of memory: %zu parameters", m->n_params);
        free(m);
        return NULL;
    }
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull + 0x7261696eull;
    float proj = 0.02f / sqrtf(2.0f * c->L);
    for (int i = 0; i < m->n_tensors; i++) {
        train_tensor *t = &m->t[i];
        float *p = m->params + t->off;
        size_t cnt = (size_t)t->rows * t->cols;
        float sd = strstr(t->name, "attn_output") || strstr(t->name, "ffn_down") ? proj : 0.02f;
        for (size_t j = 0; j < cnt; j++) p[j] = t->matrix ? sd * (float)gauss(&rs) : 1.0f;
    }
    for (int i = 0; i < c->E / 2; i++) m->inv_freq[i] = (float)pow(c->rope_base, -2.0 * i / c->E);
    return m;
}

void train_model_destroy(train_model *m) {
    if (!m) return;
    free(m->params);
    free(m);
}

void train_model_view(const train_model *m, float *base, train_view *v) {
    const train_tensor *t = m->t;
    int i = 0;
    v->tok_embd = base + t[i++].off;
    for (int l = 0; l < m->c.L; l++) {
        train_layer_w *w = &v->layer[l];
        w->attn_norm = base + t[i++].off;
        w->wq = base + t[i++].off;
        w->wk = base + t[i++].off;
        w->wv = base + t[i++].off;
        w->wo = base + t[i++].off;
        w->ffn_norm = base + t[i++].off;
        w->w_gate = base + t[i++].off;
        w->w_up = base + t[i++].off;
        w->w_down = base + t[i++].off;
        w->hidden_norm = NULL;
    }
    v->out_norm = base + t[i++].off;
    v->output = m->c.tied ? v->tok_embd : base + t[i].off;
}

train_layer_shape train_model_layer_shape(const train_model *m) {
    return (train_layer_shape){.D = m->c.D, .H = m->c.H, .Hkv = m->c.Hkv, .E = m->c.E, .F = m->c.F, .eps = m->c.eps};
}

/* ---- the worker's buffers ------------------------------------------------------------- */

struct train_work {
    int S, T;
    float *buf;
    train_layer_act act[256];
    float *xs;                 /* (L+1, M, D) layer inputs and the last layer's output */
    float *xf;                 /* (M, D) after the final norm */
    float *logits;             /* (M, V) and then its gradient */
    float *dx, *dx2;           /* (M, D) */
    float *scratch;            /* the layer backward's */
    float *dz;                 /* (V) one position's loss gradient */
    int32_t *pos;              /* (M) */
};

train_work *train_work_create(const train_model *m, int S, int T) {
    train_work *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    train_layer_shape sh = train_model_layer_shape(m);
    size_t M = (size_t)S * T, D = m->c.D, L = m->c.L, A = train_layer_act_floats(&sh, S, T);
    size_t total = L * A + (L + 1) * M * D + M * D + M * m->c.V + 2 * M * D + train_layer_scratch_floats(&sh, S, T) + m->c.V;
    w->buf = malloc(sizeof(float) * total);
    w->pos = malloc(sizeof(int32_t) * M);
    if (!w->buf || !w->pos) {
        train_work_destroy(w);
        return NULL;
    }
    w->S = S, w->T = T;
    float *p = w->buf;
    for (size_t l = 0; l < L; l++, p += A) train_layer_act_bind(&w->act[l], &sh, S, T, p);
    w->xs = p, p += (L + 1) * M * D;
    w->xf = p, p += M * D;
    w->logits = p, p += M * m->c.V;
    w->dx = p, p += M * D;
    w->dx2 = p, p += M * D;
    w->scratch = p, p += train_layer_scratch_floats(&sh, S, T);
    w->dz = p;
    for (size_t r = 0; r < M; r++) w->pos[r] = (int32_t)(r % (size_t)T);
    return w;
}

void train_work_destroy(train_work *w) {
    if (!w) return;
    free(w->buf);
    free(w->pos);
    free(w);
}

const float *train_forward(train_ctx *c, train_work *w, const train_model *m, const train_batch *b) {
    const train_cfg *cf = &m->c;
    int M = b->S * b->T, D = cf->D;
    if (b->S > w->S || b->T != w->T) {
        fprintf(stderr, "%s:%d: batch %dx%d does not fit work %dx%d\n", __FILE__, __LINE__, b->S, b->T, w->S, w->T);
        abort();
    }
    train_view v;
    train_model_view(m, m->params, &v);
    train_layer_shape sh = train_model_layer_shape(m);
    top_embed(c, w->xs, v.tok_embd, b->tokens, M, D);
    for (int l = 0; l < cf->L; l++) {
        train_layer_act *a = &w->act[l];
        a->S = b->S;
        train_layer_forward(c, &sh, &v.layer[l], a, w->xs + (size_t)(l + 1) * M * D, w->xs + (size_t)l * M * D, NULL,
                            w->pos, m->inv_freq, NULL);
    }
    top_rmsnorm(c, w->xf, w->xs + (size_t)cf->L * M * D, v.out_norm, M, D, cf->eps);
    top_linear(c, w->logits, w->xf, v.output, M, D, cf->V);
    return w->logits;
}

double train_forward_backward(train_ctx *c, train_work *w, const train_model *m, const train_batch *b, float *grad,
                              double *ce, double *kl) {
    const train_cfg *cf = &m->c;
    int M = b->S * b->T, D = cf->D, V = cf->V, L = cf->L;
    train_forward(c, w, m, b);
    double sce = 0, skl = 0;
    double loss = tl_rows(w->logits, w->dz, M, V, b->labels, b->K, b->topk_id, b->topk_logit, b->weight, b->ce_w,
                          b->kl_w, &sce, &skl);
    if (ce) *ce = sce;
    if (kl) *kl = skl;
    train_view v, g;
    train_model_view(m, m->params, &v);
    train_model_view(m, grad, &g);
    train_layer_shape sh = train_model_layer_shape(m);
    /* output head and final norm */
    top_linear_bwd(c, w->dx2, g.output, w->logits, w->xf, v.output, M, D, V);
    memset(w->dx, 0, sizeof(float) * (size_t)M * D);
    top_rmsnorm_bwd(w->dx, g.out_norm, w->dx2, w->xs + (size_t)L * M * D, v.out_norm, M, D, cf->eps);
    for (int l = L - 1; l >= 0; l--) {
        train_layer_backward(c, &sh, &v.layer[l], &g.layer[l], w->dx2, w->dx, &w->act[l], w->pos, m->inv_freq,
                             NULL, w->scratch);
        float *t = w->dx;
        w->dx = w->dx2, w->dx2 = t;
    }
    top_embed_bwd(g.tok_embd, w->dx, b->tokens, M, D);
    return loss;
}
