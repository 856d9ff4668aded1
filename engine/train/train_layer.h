/* train_layer.h — one llama decoder layer for training: a forward that
 * saves what its backward needs, and the backward from those activations.
 * The one implementation of the layer's gradient: the whole-model trainer
 * (train_model.h) runs it per layer, and a head trainer that stacks decoder
 * layers on a target's features (EAGLE) is meant to call the same pair.
 *
 *   y = x + Wo attn(rope(Wq n1), rope(Wk n1), Wv n1),  n1 = rmsnorm(x) * attn_norm
 *   out = y + Wd (silu(Wg n2) * Wu n2),                n2 = rmsnorm(y) * ffn_norm
 *
 * Rows are S sequences of T positions (row = s*T + t, causal within a
 * sequence); pos (M) gives each row's RoPE position. Sizes as train_ops.h.
 *
 * Threading: the caller's train_ctx's thread. */
#ifndef SPECD_TRAIN_LAYER_H
#define SPECD_TRAIN_LAYER_H

#include "engine/train/train_ops.h"

#include <stddef.h>
#include <stdint.h>

/* The layer's shape. */
typedef struct {
    int D, H, Hkv, E, F;
    float eps;
} train_layer_shape;

/* A layer's tensors — its weights, or their gradients (same layout). */
typedef struct {
    float *attn_norm;   /* (D) */
    float *wq;          /* (H*E, D) */
    float *wk;          /* (Hkv*E, D) */
    float *wv;          /* (Hkv*E, D) */
    float *wo;          /* (D, H*E) */
    float *ffn_norm;    /* (D) */
    float *w_gate;      /* (F, D) */
    float *w_up;        /* (F, D) */
    float *w_down;      /* (D, F) */
} train_layer_w;

/* What the forward keeps for the backward (S, T fixed at creation). */
typedef struct {
    int S, T;
    float *x;           /* (M, D) the layer's input (a copy) */
    float *n1;          /* (M, D) */
    float *q;           /* (M, H*E) after RoPE */
    float *k, *v;       /* (M, Hkv*E) k after RoPE */
    float *P;           /* (S, H, T, T) attention probabilities */
    float *ao;          /* (M, H*E) attention output */
    float *y;           /* (M, D) after the attention residual */
    float *n2;          /* (M, D) */
    float *g, *u, *h;   /* (M, F) gate and up pre-activations, silu(g) * u */
} train_layer_act;

/* Floats one layer's activations take for S x T rows. */
size_t train_layer_act_floats(const train_layer_shape *sh, int S, int T);
/* Points a's fields into buf (train_layer_act_floats floats). */
void train_layer_act_bind(train_layer_act *a, const train_layer_shape *sh, int S, int T, float *buf);
/* Floats of scratch the backward needs for S x T rows. */
size_t train_layer_scratch_floats(const train_layer_shape *sh, int S, int T);

/* out (M, D) = the layer on x (M, D); saves activations into a (a->S, a->T
 * rows). out may not alias x. inv_freq (E/2). */
void train_layer_forward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, train_layer_act *a,
                         float *out, const float *x, const int32_t *pos, const float *inv_freq);
/* dx (M, D) WRITTEN = d loss / d x and the weight gradients ADDED into g (a
 * NULL tensor in g: frozen, not computed) from dout (M, D) = d loss / d out
 * and the forward's activations a. scratch: train_layer_scratch_floats. */
void train_layer_backward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, const train_layer_w *g,
                          float *dx, const float *dout, const train_layer_act *a, const int32_t *pos,
                          const float *inv_freq, float *scratch);

#endif
