/* train_layer.c — a llama decoder layer's forward with saved activations
 * and its backward, plain or with EAGLE-3's input and training-time-test
 * steps (see train_layer.h). */
#include "engine/train/train_layer.h"

#include <string.h>

/* sizes of one shape: M rows, attention input width, q and kv widths, P row width */
typedef struct {
    size_t M, D, Din, QD, KD, F, W;
} dims;

static dims dims_of(const train_layer_shape *sh, int S, int T) {
    int J = sh->steps > 1 ? sh->steps : 1;
    return (dims){(size_t)S * T, (size_t)sh->D, (size_t)sh->D * (sh->eagle3 ? 2 : 1), (size_t)sh->H * sh->E,
                  (size_t)sh->Hkv * sh->E, (size_t)sh->F, (size_t)T + (size_t)J - 1};
}

size_t train_layer_act_floats(const train_layer_shape *sh, int S, int T) {
    dims d = dims_of(sh, S, T);
    size_t e = sh->eagle3 ? d.M * d.D : 0;
    return d.M * (3 * d.D + d.Din + 2 * d.QD + 2 * d.KD + 3 * d.F) + e + (size_t)S * sh->H * T * d.W;
}

void train_layer_act_bind(train_layer_act *a, const train_layer_shape *sh, int S, int T, float *buf) {
    dims d = dims_of(sh, S, T);
    size_t M = d.M;
    a->S = S, a->T = T;
    a->x = buf, buf += M * d.D;
    a->e = NULL;
    if (sh->eagle3) a->e = buf, buf += M * d.D;
    a->n1 = buf, buf += M * d.Din;
    a->q = buf, buf += M * d.QD;
    a->k = buf, buf += M * d.KD;
    a->v = buf, buf += M * d.KD;
    a->ao = buf, buf += M * d.QD;
    a->y = buf, buf += M * d.D;
    a->n2 = buf, buf += M * d.D;
    a->g = buf, buf += M * d.F;
    a->u = buf, buf += M * d.F;
    a->h = buf, buf += M * d.F;
    a->P = buf;
}

size_t train_layer_scratch_floats(const train_layer_shape *sh, int S, int T) {
    dims d = dims_of(sh, S, T);
    /* dy, dn and a second one (Din); dh, dg, du; dao, dq; dk, dv; eagle3: the two halves of dn and the
     * embedding's dx */
    return d.M * (d.D + 2 * d.Din + 3 * d.F + 2 * d.QD + 2 * d.KD + (sh->eagle3 ? 3 * d.D : 0));
}

/* dst (M, 2D) rows = [a row ; b row] */
static void concat_rows(float *dst, const float *a, const float *b, size_t M, size_t D) {
    for (size_t m = 0; m < M; m++) {
        memcpy(dst + m * 2 * D, a + m * D, sizeof(float) * D);
        memcpy(dst + m * 2 * D + D, b + m * D, sizeof(float) * D);
    }
}

/* a, b (M, D) = the halves of src (M, 2D) rows */
static void split_rows(float *a, float *b, const float *src, size_t M, size_t D) {
    for (size_t m = 0; m < M; m++) {
        memcpy(a + m * D, src + m * 2 * D, sizeof(float) * D);
        memcpy(b + m * D, src + m * 2 * D + D, sizeof(float) * D);
    }
}

void train_layer_forward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, train_layer_act *a,
                         float *out, const float *x, const float *e, const int32_t *pos, const float *inv_freq,
                         const train_layer_steps *st) {
    int M = a->S * a->T, D = sh->D, H = sh->H, Hkv = sh->Hkv, E = sh->E, F = sh->F, Din = sh->eagle3 ? 2 * D : D;
    backend *be = c->be;
    memcpy(a->x, x, sizeof(float) * (size_t)M * D);
    if (sh->eagle3) { /* n1 = [rmsnorm(e) attn_norm ; rmsnorm(x) hidden_norm], q/k/v and y as scratch */
        memcpy(a->e, e, sizeof(float) * (size_t)M * D);
        top_rmsnorm(c, a->y, e, w->attn_norm, M, D, sh->eps);
        top_rmsnorm(c, a->n2, x, w->hidden_norm, M, D, sh->eps);
        concat_rows(a->n1, a->y, a->n2, (size_t)M, (size_t)D);
    } else {
        top_rmsnorm(c, a->n1, x, w->attn_norm, M, D, sh->eps);
    }
    top_linear(c, a->q, a->n1, w->wq, M, Din, H * E);
    top_linear(c, a->k, a->n1, w->wk, M, Din, Hkv * E);
    top_linear(c, a->v, a->n1, w->wv, M, Din, Hkv * E);
    top_rope(c, a->q, pos, inv_freq, M, H, E);
    top_rope(c, a->k, pos, inv_freq, M, Hkv, E);
    if (st) {
        const float *ks[TRAIN_MAX_STEPS], *vs[TRAIN_MAX_STEPS];
        for (int i = 0; i < st->j; i++) ks[i] = st->act[i].k, vs[i] = st->act[i].v;
        ks[st->j] = a->k, vs[st->j] = a->v;
        top_attention_steps(a->ao, a->P, a->q, ks, vs, st->j, a->S, a->T, H, Hkv, E);
    } else {
        top_attention(a->ao, a->P, a->q, a->k, a->v, a->S, a->T, H, Hkv, E);
    }
    top_linear(c, a->y, a->ao, w->wo, M, H * E, D);
    be->i->add(be, a->y, x, M, D);
    top_rmsnorm(c, a->n2, a->y, w->ffn_norm, M, D, sh->eps);
    top_linear(c, a->g, a->n2, w->w_gate, M, D, F);
    top_linear(c, a->u, a->n2, w->w_up, M, D, F);
    top_swiglu(c, a->h, a->g, a->u, M, F);
    top_linear(c, out, a->h, w->w_down, M, F, D);
    be->i->add(be, out, a->y, M, D);
}

void train_layer_backward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, const train_layer_w *g,
                          float *dx, const float *dout, const train_layer_act *a, const int32_t *pos,
                          const float *inv_freq, const train_layer_steps *st, float *scratch) {
    int S = a->S, T = a->T, M = S * T, D = sh->D, H = sh->H, Hkv = sh->Hkv, E = sh->E, F = sh->F;
    int Din = sh->eagle3 ? 2 * D : D;
    size_t MD = (size_t)M * D, MF = (size_t)M * F, MQ = (size_t)M * H * E, MK = (size_t)M * Hkv * E;
    backend *be = c->be;
    float *dy = scratch, *dn = dy + MD, *dn2 = dn + (size_t)M * Din, *dh = dn2 + (size_t)M * Din, *dg = dh + MF, *du = dg + MF, *dao = du + MF,
          *dq = dao + MQ, *dk = dq + MQ, *dv = dk + MK, *dne = dv + MK, *dnx = dne + MD, *de = dnx + MD;
    /* feed-forward: out = y + Wd h */
    top_linear_bwd(c, dh, g->w_down, dout, a->h, w->w_down, M, F, D);
    top_swiglu_bwd(dg, du, dh, a->g, a->u, M, F);
    top_linear_bwd(c, dn, g->w_gate, dg, a->n2, w->w_gate, M, D, F);
    top_linear_bwd(c, dy, g->w_up, du, a->n2, w->w_up, M, D, F); /* dy as scratch for the second dn */
    be->i->add(be, dn, dy, M, D);
    memcpy(dy, dout, sizeof(float) * MD);
    top_rmsnorm_bwd(dy, g->ffn_norm, dn, a->y, w->ffn_norm, M, D, sh->eps);
    /* attention: y = x + Wo ao */
    top_linear_bwd(c, dao, g->wo, dy, a->ao, w->wo, M, H * E, D);
    if (st) { /* add into every step's k/v accumulators, then take this step's own */
        const float *ks[TRAIN_MAX_STEPS], *vs[TRAIN_MAX_STEPS];
        for (int i = 0; i <= st->j; i++) ks[i] = st->act[i].k, vs[i] = st->act[i].v;
        top_attention_steps_bwd(dq, st->dk, st->dv, dao, a->P, a->q, ks, vs, st->j, S, T, H, Hkv, E);
        memcpy(dk, st->dk[st->j], sizeof(float) * MK);
        memcpy(dv, st->dv[st->j], sizeof(float) * MK);
    } else {
        top_attention_bwd(dq, dk, dv, dao, a->P, a->q, a->k, a->v, S, T, H, Hkv, E);
    }
    top_rope_bwd(c, dq, pos, inv_freq, M, H, E);
    top_rope_bwd(c, dk, pos, inv_freq, M, Hkv, E);
    /* dn (M, Din) = the sum of the three projections' input gradients */
    top_linear_bwd(c, dn, g->wq, dq, a->n1, w->wq, M, Din, H * E);
    top_linear_bwd(c, dn2, g->wk, dk, a->n1, w->wk, M, Din, Hkv * E);
    be->i->add(be, dn, dn2, M, Din);
    top_linear_bwd(c, dn2, g->wv, dv, a->n1, w->wv, M, Din, Hkv * E);
    be->i->add(be, dn, dn2, M, Din);
    memcpy(dx, dy, sizeof(float) * MD);
    if (sh->eagle3) {
        split_rows(dne, dnx, dn, (size_t)M, (size_t)D);
        memset(de, 0, sizeof(float) * MD);
        top_rmsnorm_bwd(de, g->attn_norm, dne, a->e, w->attn_norm, M, D, sh->eps);
        top_rmsnorm_bwd(dx, g->hidden_norm, dnx, a->x, w->hidden_norm, M, D, sh->eps);
    } else {
        top_rmsnorm_bwd(dx, g->attn_norm, dn, a->x, w->attn_norm, M, D, sh->eps);
    }
}
