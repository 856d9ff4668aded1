/* medusa.h — Medusa heads (issue 18): K small heads on the target's
 * final-normed hidden state h, head k (1..K) predicting the token k positions
 * after the one the target's own output head predicts. A head is L ResBlocks
 *     y ← y + SiLU(W y + b)      W (D, D), b (D), zero-initialised (identity)
 * followed by an output matrix (V, D): the target's own (shared, the default)
 * or the head's own copy.
 * With token input (token_input) every head starts from
 *     y0 = h + U e(x)            U (D, D) shared by the heads, zero-initialised
 * where x is the token the target's own head produced from h (the root of
 * the next tree: known when the heads run, and exactly what a head for +2
 * lacks) and e(x) its row of the target's token embedding (frozen). Without
 * it y0 = h (Medusa-1 as published). This file holds the heads' parameters, their GGUF
 * side file (general.architecture = "medusa", layout in README.md), and the
 * forward on the target's backend batched over rows; training is
 * medusa_train.h, drafting draft_medusa.h.
 *
 * Not here: the backbone (frozen; model.h), tree shapes (draft_medusa.h).
 *
 * Threading: a medusa_heads is immutable once built or loaded except by the
 * trainer that owns it; a medusa_rt belongs to the target's thread. */
#ifndef SPECD_MEDUSA_H
#define SPECD_MEDUSA_H

#include "engine/model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEDUSA_MAX_HEADS 8
#define MEDUSA_MAX_LAYERS 4
#define MEDUSA_ACC_K 8          /* top-1..top-8 accuracies stored per head */
#define MEDUSA_ID_LEN 64
#define MEDUSA_MAX_FFN 16384

typedef struct {
    int n_heads;                /* K, 1..MEDUSA_MAX_HEADS */
    int n_layers;               /* L layers per head, 1..MEDUSA_MAX_LAYERS */
    int ffn;                    /* F: FFN width (0: ResBlocks, W (D, D)); a multiple of 32 up to MEDUSA_MAX_FFN */
    int dim;                    /* D, the target's hidden size */
    int n_vocab;                /* V */
    bool own_output;            /* each head has its own (V, D) output matrix (else the target's is shared) */
    bool token_input;           /* y0 = h + U e(x) (see above) */
    char target_id[MEDUSA_ID_LEN]; /* spec_model_id.id of the target the heads were trained for */
    char target_name[128];      /* for messages */
    /* measured on held-out text: acc[k][j] = P(the label is among head k's
     * top j+1), cumulative; acc_tokens = held-out samples behind them (0: never measured) */
    float acc[MEDUSA_MAX_HEADS][MEDUSA_ACC_K];
    uint64_t acc_tokens;
    float train_loss, heldout_loss; /* last figures of the training that wrote the file (0: unknown) */
    /* ONE allocation of n_params floats, in this order (the trainer's
     * gradient and moments have the same layout): */
    float *params;              /* owned */
    size_t n_params;
    float *w;                   /* (K, L, H, D) W[k][l] row-major: out row i = sum_j W[i][j] y[j];
                                 * H = F, or D for ResBlocks (medusa_hidden) */
    float *b;                   /* (K, L, H) */
    float *out;                 /* (K, V, D) when own_output, else NULL */
    float *u;                   /* (D, D) U when token_input, else NULL */
    float *w2;                  /* (K, L, D, F) W2[k][l] when ffn, else NULL */
    /* Storage type of W, W2, the own output matrices and U (biases stay F32):
     * F32, F16 or Q8_0. Not F32: q holds them in that type (W rows first,
     * then output rows, then U's, then W2's, in params order) — what the file stores and the backend
     * computes with — and params hold exactly their dequantized values. */
    int wtype;
    void *q;                    /* owned, NULL for F32 */
} medusa_heads;

/* Zero-initialised heads (every head the identity on h); ffn 0 for
 * ResBlocks, else the FFN width F. NULL when a size is out of range (F not a
 * multiple of 32 included: *st = ENGINE_ERR_INVALID) or out of memory
 * (ENGINE_ERR_OOM), reason in err. st may be NULL. */
medusa_heads *medusa_heads_create(int n_heads, int n_layers, int ffn, int dim, int n_vocab, bool own_output,
                                  bool token_input, engine_status *st, char *err, size_t errlen);

/* H: a layer's hidden units, F for FFN heads, else D. */
static inline int medusa_hidden(const medusa_heads *mh) { return mh->ffn ? mh->ffn : mh->dim; }
void medusa_heads_destroy(medusa_heads *mh); /* accepts NULL */

/* Re-types W, W2, U and the own output matrices (medusa_heads.wtype): quantizes
 * params into q and replaces params by the dequantized values, so training
 * figures measured afterwards are the stored heads'. F32 drops q. Returns 0,
 * or -1 with err and *st (a type other than F32/F16/Q8_0, D not a multiple of
 * its block: ENGINE_ERR_INVALID; out of memory: ENGINE_ERR_OOM). */
int medusa_heads_set_type(medusa_heads *mh, int type, engine_status *st, char *err, size_t errlen);

/* Writes the side file (atomically: gguf_writer_write). Returns 0 or -1 with err. */
int medusa_heads_save(const medusa_heads *mh, const char *path, char *err, size_t errlen);

/* Reads a side file. expect_id (may be NULL: no check) is the identity of the
 * target the heads are for (spec_model_id.id); heads trained for another
 * target are refused, naming both. dim/n_vocab > 0 are checked against the
 * file too. Truncated or corrupt files, wrong architecture, missing or
 * mis-shaped tensors, non-finite weights: NULL with a one-line reason and
 * *st = ENGINE_ERR_INVALID; a shortage: ENGINE_ERR_OOM (st may be NULL). The
 * caller owns the result (the weights are copied out of the file). */
medusa_heads *medusa_heads_load(const char *path, const char *expect_id, int dim, int n_vocab, engine_status *st,
                                char *err, size_t errlen);
/* The same from a buffer (fuzzing); messages name "<memory>". */
medusa_heads *medusa_heads_load_mem(const void *buf, size_t len, const char *expect_id, int dim, int n_vocab,
                                    engine_status *st, char *err, size_t errlen);

/* Weight bytes of the heads as stored (wtype; biases F32), for the "% of the target" figure. */
uint64_t medusa_heads_bytes(const medusa_heads *mh);

/* ---- on the target's backend ------------------------------------------- */

typedef struct medusa_rt medusa_rt;

/* Binds heads to a loaded target: uploads W, b (own output matrices, U) to
 * the target's backend (shard 0's), sizes scratch for max_rows hidden rows,
 * and uses the target's output matrix when shared and its token embedding
 * for e(x). mh and m must outlive the
 * result. NULL with err and *st (shape mismatch: ENGINE_ERR_INVALID; out of
 * memory: ENGINE_ERR_OOM). */
medusa_rt *medusa_rt_create(const medusa_heads *mh, model *m, int max_rows, engine_status *st, char *err,
                            size_t errlen);
void medusa_rt_destroy(medusa_rt *rt); /* accepts NULL */

/* logits (k_used, n, V) host: head k's logits for hidden row r at
 * logits[(k*n + r)*V], for the first k_used heads (1..K; a shallow tree needs
 * only its depth's). h (n, D) host, n <= max_rows; tok (n) row r's token x
 * (read only with token input). All of it in one backend step; the shared
 * output matrix is read once for the k_used*n rows. Returns 0 or -1 when n,
 * k_used or a token is out of range. */
int medusa_rt_logits(medusa_rt *rt, float *logits, const float *h, const int32_t *tok, int n, int k_used);

/* A head's input on the host: x (D) = h + U E[tok] with token input (E the
 * target's token embedding (V, D) floats; tok < 0: no token, x = h), else h. */
void medusa_head_input(const medusa_heads *mh, const float *E, int32_t tok, const float *h, float *x);

/* The same on the host in float, no backend (the trainer's and the tests'
 * reference): one input row h (D, medusa_head_input's x) through head k into z (V); O is the shared
 * output matrix (V, D) floats (ignored when own_output); ys (L+1, D)
 * receives the layer inputs and the head's final state, as (L, H) the
 * pre-activations when not NULL. */
void medusa_head_forward(const medusa_heads *mh, const float *O, int k, const float *h, float *z, float *ys,
                         float *as);

/* The target's output matrix as (V, D) floats on the host (dequantized from
 * the GGUF file, the token embedding when tied). NULL with err. Caller frees. */
float *medusa_target_output(const model *m, char *err, size_t errlen);
/* The target's token embedding (V, D) as floats on the host, the same way. */
float *medusa_target_embedding(const model *m, char *err, size_t errlen);

#endif
