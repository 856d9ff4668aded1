/* train_model.h — a llama model being trained: its shape, its F32
 * parameters in ONE allocation (a table of named tensors pointing into it,
 * the same layout for gradients and optimizer moments), seeded random
 * initialization, and the whole-model forward and backward of a batch of
 * sequences on one train_ctx: token embedding, the decoder layers
 * (train_layer.h), final RMSNorm, tied or untied output, and the loss
 * (cross-entropy to labels and/or KL to a teacher's top-k, train_loss.h).
 * Saving as a llama GGUF that specd and llama.cpp load is train_gguf.h.
 *
 * Threading: a train_model is read by any number of workers at once (each
 * with its own train_work and gradient buffer); only the optimizer writes it. */
#ifndef SPECD_TRAIN_MODEL_H
#define SPECD_TRAIN_MODEL_H

#include "engine/train/train_layer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int V, D, L, H, Hkv, E, F; /* vocabulary, width, layers, heads, kv heads, head dim, feed-forward */
    int ctx;                   /* context length written to the GGUF */
    float eps, rope_base;
    bool tied;                 /* output head = token embedding */
} train_cfg;

#define TRAIN_MAX_TENSORS 1024

typedef struct {
    char name[48];             /* GGUF tensor name */
    size_t off;                /* floats from the start of the parameters */
    int rows, cols;            /* (rows, cols) row-major; norms are (1, D) */
    bool matrix;               /* weight decay applies (matrices and embeddings, not norms) */
} train_tensor;

typedef struct {
    train_cfg c;
    size_t n_params;
    float *params;             /* (n_params) owned */
    int n_tensors;
    train_tensor t[TRAIN_MAX_TENSORS];
    float inv_freq[128];       /* (E/2) RoPE frequencies */
} train_model;

/* Views of one buffer laid out like the parameters (the parameters
 * themselves, or a gradient). */
typedef struct {
    float *tok_embd;           /* (V, D) */
    float *out_norm;           /* (D) */
    float *output;             /* (V, D): tok_embd when tied */
    train_layer_w layer[256];  /* (L) */
} train_view;

/* Checks a shape: returns 0, or -1 with the reason in err. */
int train_cfg_check(const train_cfg *c, char *err, size_t errlen);
/* Parameters of a shape. */
size_t train_cfg_params(const train_cfg *c);

/* A model of shape c with seeded random weights: matrices N(0, 0.02^2), the
 * output projections of each layer (wo, w_down) scaled by 1/sqrt(2L), norms
 * 1. NULL with err on a bad shape or out of memory. */
train_model *train_model_create(const train_cfg *c, uint64_t seed, char *err, size_t errlen);
void train_model_destroy(train_model *m); /* accepts NULL */
/* Views of base (n_params floats laid out as m's parameters). */
void train_model_view(const train_model *m, float *base, train_view *v);
train_layer_shape train_model_layer_shape(const train_model *m);

/* One batch: S sequences of T positions. Row s*T + t feeds tokens[s*T + t]
 * at RoPE position t. A position with weight 0 adds nothing (padding). Its
 * targets: the label (< 0: none) for cross-entropy with weight ce_w, and
 * the teacher's top-k (topk_id, topk_logit: (S*T, K), K 0 = none) for KL
 * with weight kl_w at temperature 1. */
typedef struct {
    int S, T, K;
    const int32_t *tokens;     /* (S*T) */
    const int32_t *labels;     /* (S*T) or NULL */
    const int32_t *topk_id;    /* (S*T, K) or NULL */
    const float *topk_logit;   /* (S*T, K) or NULL */
    const float *weight;       /* (S*T) per-position weight (already divided by the global count) */
    float ce_w, kl_w;
} train_batch;

/* Per-worker activations and scratch for batches of up to S x T rows. */
typedef struct train_work train_work;
train_work *train_work_create(const train_model *m, int S, int T);
void train_work_destroy(train_work *w); /* accepts NULL */

/* Forward of b through m on ctx c; returns the logits (S*T, V), valid until
 * the next call on w. */
const float *train_forward(train_ctx *c, train_work *w, const train_model *m, const train_batch *b);
/* Forward, loss and backward: returns sum over positions of weight *
 * (ce_w CE + kl_w KL) and ADDS its gradient into grad (n_params, laid out
 * like the parameters). ce and kl (may be NULL) receive the weighted sums of
 * each loss alone. */
double train_forward_backward(train_ctx *c, train_work *w, const train_model *m, const train_batch *b, float *grad,
                              double *ce, double *kl);

#endif
