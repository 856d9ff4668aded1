/* train_layer.c — a llama decoder layer's forward with saved activations
 * and its backward (see train_layer.h). */
#include "engine/train/train_layer.h"

#include <string.h>

size_t train_layer_act_floats(const train_layer_shape *sh, int S, int T) {
    size_t M = (size_t)S * T, D = sh->D, QD = (size_t)sh->H * sh->E, KD = (size_t)sh->Hkv * sh->E, F = sh->F;
    return M * (4 * D + 2 * QD + 2 * KD + 3 * F) + (size_t)S * sh->H * T * T;
}

void train_layer_act_bind(train_layer_act *a, const train_layer_shape *sh, int S, int T, float *buf) {
    size_t M = (size_t)S * T, D = sh->D, QD = (size_t)sh->H * sh->E, KD = (size_t)sh->Hkv * sh->E, F = sh->F;
    a->S = S, a->T = T;
    a->x = buf, buf += M * D;
    a->n1 = buf, buf += M * D;
    a->q = buf, buf += M * QD;
    a->k = buf, buf += M * KD;
    a->v = buf, buf += M * KD;
    a->ao = buf, buf += M * QD;
    a->y = buf, buf += M * D;
    a->n2 = buf, buf += M * D;
    a->g = buf, buf += M * F;
    a->u = buf, buf += M * F;
    a->h = buf, buf += M * F;
    a->P = buf;
}

size_t train_layer_scratch_floats(const train_layer_shape *sh, int S, int T) {
    size_t M = (size_t)S * T, D = sh->D, QD = (size_t)sh->H * sh->E, KD = (size_t)sh->Hkv * sh->E, F = sh->F;
    /* dy, dn; dh, dg, du; dao, dq; dk, dv */
    return M * (2 * D + 3 * F + 2 * QD + 2 * KD);
}

void train_layer_forward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, train_layer_act *a,
                         float *out, const float *x, const int32_t *pos, const float *inv_freq) {
    int M = a->S * a->T, D = sh->D, H = sh->H, Hkv = sh->Hkv, E = sh->E, F = sh->F;
    backend *be = c->be;
    memcpy(a->x, x, sizeof(float) * (size_t)M * D);
    top_rmsnorm(c, a->n1, x, w->attn_norm, M, D, sh->eps);
    top_linear(c, a->q, a->n1, w->wq, M, D, H * E);
    top_linear(c, a->k, a->n1, w->wk, M, D, Hkv * E);
    top_linear(c, a->v, a->n1, w->wv, M, D, Hkv * E);
    top_rope(c, a->q, pos, inv_freq, M, H, E);
    top_rope(c, a->k, pos, inv_freq, M, Hkv, E);
    top_attention(a->ao, a->P, a->q, a->k, a->v, a->S, a->T, H, Hkv, E);
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
                          const float *inv_freq, float *scratch) {
    int S = a->S, T = a->T, M = S * T, D = sh->D, H = sh->H, Hkv = sh->Hkv, E = sh->E, F = sh->F;
    size_t MD = (size_t)M * D, MF = (size_t)M * F, MQ = (size_t)M * H * E, MK = (size_t)M * Hkv * E;
    backend *be = c->be;
    float *dy = scratch, *dn = dy + MD, *dh = dn + MD, *dg = dh + MF, *du = dg + MF, *dao = du + MF, *dq = dao + MQ,
          *dk = dq + MQ, *dv = dk + MK;
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
    top_attention_bwd(dq, dk, dv, dao, a->P, a->q, a->k, a->v, S, T, H, Hkv, E);
    top_rope_bwd(c, dq, pos, inv_freq, M, H, E);
    top_rope_bwd(c, dk, pos, inv_freq, M, Hkv, E);
    top_linear_bwd(c, dn, g->wq, dq, a->n1, w->wq, M, D, H * E);
    top_linear_bwd(c, dx, g->wk, dk, a->n1, w->wk, M, D, Hkv * E);
    be->i->add(be, dn, dx, M, D);
    top_linear_bwd(c, dx, g->wv, dv, a->n1, w->wv, M, D, Hkv * E);
    be->i->add(be, dn, dx, M, D);
    memcpy(dx, dy, sizeof(float) * MD);
    top_rmsnorm_bwd(dx, g->attn_norm, dn, a->x, w->attn_norm, M, D, sh->eps);
}
