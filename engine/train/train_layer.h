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
 * EAGLE-3's layer (shape eagle3): the attention reads the 2D-wide row
 *   n1 = [rmsnorm(e) * attn_norm ; rmsnorm(x) * hidden_norm]
 * (wq, wk, wv are (N, 2D), the first D columns for the token embedding e),
 * and the residual stream starts from x, the feature; the rest is llama's.
 * Its training-time test runs the layer J times over the same rows (steps),
 * step j's row t drafting position t + j from step j - 1's output and
 * attending to step 0's rows 0..t and its own row t of steps 1..j
 * (train_ops.h top_attention_steps): a train_layer_steps names the steps'
 * activations and their k/v gradient accumulators.
 *
 * Threading: the caller's train_ctx's thread. */
#ifndef SPECD_TRAIN_LAYER_H
#define SPECD_TRAIN_LAYER_H

#include "engine/train/train_ops.h"

#include <stddef.h>
#include <stdint.h>

#define TRAIN_MAX_STEPS 16

/* The layer's shape. */
typedef struct {
    int D, H, Hkv, E, F;
    float eps;
    int eagle3;         /* 1: EAGLE-3's input (above) */
    int steps;          /* J <= TRAIN_MAX_STEPS: training-time-test steps the activations are sized for (0 or 1: none) */
} train_layer_shape;

/* A layer's tensors — its weights, or their gradients (same layout). */
typedef struct {
    float *attn_norm;   /* (D) */
    float *wq;          /* (H*E, Din), Din = D (2D for eagle3) */
    float *wk;          /* (Hkv*E, Din) */
    float *wv;          /* (Hkv*E, Din) */
    float *wo;          /* (D, H*E) */
    float *ffn_norm;    /* (D) */
    float *w_gate;      /* (F, D) */
    float *w_up;        /* (F, D) */
    float *w_down;      /* (D, F) */
    float *hidden_norm; /* (D) eagle3 only */
} train_layer_w;

/* What the forward keeps for the backward (S, T fixed at creation). */
typedef struct {
    int S, T;
    float *x;           /* (M, D) the layer's input (a copy) */
    float *e;           /* (M, D) eagle3: the embedding input (a copy); else NULL */
    float *n1;          /* (M, Din) */
    float *q;           /* (M, H*E) after RoPE */
    float *k, *v;       /* (M, Hkv*E) k after RoPE */
    float *P;           /* (S, H, T, T + J - 1) attention probabilities */
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

/* The training-time test's steps (NULL: a plain causal layer). */
typedef struct {
    int j;                        /* this call's step, 0..J-1 */
    const train_layer_act *act;   /* (J) each step's activations; act[j] is this call's */
    float *const *dk, *const *dv; /* backward: (J) each step's k and v gradient (M, Hkv*E), zeroed by the
                                   * caller before the first backward (step J-1's); step j's backward ADDS
                                   * into steps 0..j and then consumes its own */
} train_layer_steps;

/* out (M, D) = the layer on x (M, D) (and, eagle3, the embeddings e (M, D);
 * else NULL); saves activations into a (a->S, a->T rows). out may not alias
 * x. inv_freq (E/2). st: NULL, or the step this call runs. */
void train_layer_forward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, train_layer_act *a,
                         float *out, const float *x, const float *e, const int32_t *pos, const float *inv_freq,
                         const train_layer_steps *st);
/* dx (M, D) WRITTEN = d loss / d x and the weight gradients ADDED into g (a
 * NULL tensor in g: frozen, not computed) from dout (M, D) = d loss / d out
 * and the forward's activations a (eagle3: the embeddings get no gradient;
 * they are the target's, frozen). scratch: train_layer_scratch_floats. */
void train_layer_backward(train_ctx *c, const train_layer_shape *sh, const train_layer_w *w, const train_layer_w *g,
                          float *dx, const float *dout, const train_layer_act *a, const int32_t *pos,
                          const float *inv_freq, const train_layer_steps *st, float *scratch);

#endif
