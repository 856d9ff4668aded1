/* train_ops.h — forward and backward of the ops a llama decoder is made of,
 * for training: the forward of each op goes through the backend table
 * (kernels/backend.h: matmul, get_rows, rmsnorm, rope, silu_mul, add) where the
 * table has it; the backward passes and the ops the table lacks (causal
 * attention that keeps its probabilities, the gradient scatter of the
 * embedding) are C loops here. Every backward is checked against central
 * finite differences of an independent float64 implementation
 * (tests/train/test_train_grad.c).
 *
 * Size letters: M rows (S sequences of T positions, row = s*T + t), K input
 * features, N output features, D width, H heads, Hkv kv heads, E head dim,
 * F feed-forward width, V vocabulary. Outputs first. A backward's gradient
 * outputs are ADDED to (+=) unless the comment says "written".
 *
 * Not here: mixed precision, quantized weights (training is F32 throughout),
 * backends whose memory is not host memory (train_ctx_create refuses them).
 *
 * Threading: a train_ctx belongs to one thread (it owns one backend, which
 * is used by one thread at a time); data-parallel training gives each worker
 * its own. */
#ifndef SPECD_TRAIN_OPS_H
#define SPECD_TRAIN_OPS_H

#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

typedef struct train_ctx {
    backend *be;             /* owned when own_be */
    int own_be;
    float *tA, *tB, *tC;     /* scratch: transposes and the dW product, grown as needed */
    size_t capA, capB, capC;
    int32_t *negpos;         /* (capP) -pos for the RoPE backward */
    size_t capP;
    double flops;            /* matmul FLOPs issued through this ctx (forward + backward) */
} train_ctx;

/* A context on a new CPU backend of n_threads (1 for a data-parallel worker).
 * NULL when out of memory. */
train_ctx *train_ctx_create(int n_threads);
/* A context over an existing host-memory backend (not owned); NULL when the
 * backend's memory is not host memory. */
train_ctx *train_ctx_wrap(backend *be);
void train_ctx_destroy(train_ctx *c); /* accepts NULL */

/* Broken variants for the gradient checks' negative tests: a nonzero value
 * makes that backward wrong in the named way, so the check must fail. Tests
 * only; 0 in production. Not thread-safe (set it before the workers run). */
typedef enum {
    TRAIN_FAULT_NONE = 0,
    TRAIN_FAULT_ROPE,        /* the RoPE backward is skipped (gradient taken as if no rotation) */
    TRAIN_FAULT_RMSNORM,     /* the RMSNorm backward drops the mean-square term */
    TRAIN_FAULT_SOFTMAX,     /* the attention backward drops the softmax's row-sum term */
    TRAIN_FAULT_SILU,        /* the SwiGLU backward uses sigmoid(g) for silu'(g) */
    TRAIN_FAULT_GQA,         /* the attention backward sends every head's dk/dv to kv head 0 */
    TRAIN_FAULT_STEPS,       /* the training-time test's attention backward drops the gradient of the keys and
                              * values of the other steps (as if each step saw only its own) */
} train_fault;
extern train_fault train_fault_inject;

/* y (M, N) = x (M, K) . W^T, W (N, K) (backend matmul). */
void top_linear(train_ctx *c, float *y, const float *x, const float *W, int M, int K, int N);
/* dx (M, K) WRITTEN = dy (M, N) . W (may be NULL: not needed);
 * dW (N, K) += dy^T . x (may be NULL: frozen). Both through the backend
 * matmul on transposed operands. */
void top_linear_bwd(train_ctx *c, float *dx, float *dW, const float *dy, const float *x, const float *W, int M, int K,
                    int N);

/* y (M, D) = x / sqrt(mean(x^2) + eps) * w (backend rmsnorm). */
void top_rmsnorm(train_ctx *c, float *y, const float *x, const float *w, int M, int D, float eps);
/* dx (M, D) +=, dw (D) += (may be NULL) from dy and the forward's x, w. */
void top_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int D, float eps);

/* In place on x (M, H*E): llama RoPE of all E dims, adjacent pairs, angle
 * pos[m] * inv_freq[i] (backend rope). */
void top_rope(train_ctx *c, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E);
/* In place on dx (M, H*E): the backward is the rotation by -angle. */
void top_rope_bwd(train_ctx *c, float *dx, const int32_t *pos, const float *inv_freq, int M, int H, int E);

/* h (M, F) = silu(g) * u (backend silu_mul on a copy of g). */
void top_swiglu(train_ctx *c, float *h, const float *g, const float *u, int M, int F);
/* dg, du (M, F) WRITTEN from dh and the forward's g, u. */
void top_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, int M, int F);

/* Causal grouped-query attention of S sequences of T rows: out (M, H*E) =
 * softmax(q k^T / sqrt(E), causal) v per sequence and head, head h reading kv
 * head h / (H / Hkv); q (M, H*E), k v (M, Hkv*E). P (S, H, T, T) receives the
 * probabilities (row t: columns 0..t; the rest zero) for the backward. */
void top_attention(float *out, float *P, const float *q, const float *k, const float *v, int S, int T, int H, int Hkv,
                   int E);
/* dq (M, H*E), dk dv (M, Hkv*E) WRITTEN from dout (M, H*E) and the forward's P, q, k, v. */
void top_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *P, const float *q,
                       const float *k, const float *v, int S, int T, int H, int Hkv, int E);

/* EAGLE's training-time test (train_layer.h): the attention of step j of a
 * layer run over the same S x T rows several times. Row t of step j reads
 * step 0's rows 0..t of its sequence (causal) and row t of steps 1..j (the
 * head's own drafts at the positions after t); k[i], v[i] (M, Hkv*E) are
 * step i's (i = 0..j). P (S, H, T, T + j): columns 0..T-1 step 0's rows, T +
 * i - 1 step i's. Step 0 is top_attention. */
void top_attention_steps(float *out, float *P, const float *q, const float *const *k, const float *const *v, int j,
                         int S, int T, int H, int Hkv, int E);
/* dq (M, H*E) WRITTEN; dk[i], dv[i] (i = 0..j) ADDED, from dout and the
 * forward's P, q, k, v. */
void top_attention_steps_bwd(float *dq, float *const *dk, float *const *dv, const float *dout, const float *P,
                             const float *q, const float *const *k, const float *const *v, int j, int S, int T, int H,
                             int Hkv, int E);

/* x (M, D) = rows ids (M) of table (V, D) (backend get_rows). */
void top_embed(train_ctx *c, float *x, const float *table, const int32_t *ids, int M, int D);
/* dtable (V, D) += scatter of dx rows by ids. */
void top_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int M, int D);

/* dot product of n floats with 8 partial sums (vectorizes) */
float top_dot(const float *a, const float *b, int n);

#endif
