/* model.h — a llama-family model (llama, mistral, qwen2, qwen3) loaded from GGUF (weights used in place from
 * the mmap) and its batched forward pass. Prefill, 1-token decode and the
 * (γ+1)-position verification of speculation are the same call: any number of
 * new positions of any number of sequences, each against its paged KV cache,
 * with an optional ancestor mask per sequence (tree verification).
 *
 * Tensor parallelism (Megatron style): model_load_tp splits the model over N
 * backends. Shard r holds query heads [r*H/N, (r+1)*H/N), kv heads
 * [r*Hkv/N, (r+1)*Hkv/N) and FFN slice [r*F/N, (r+1)*F/N): the rows of
 * wq/wk/wv/bq/bk/bv/w_gate/w_up for them and the COLUMNS of wo/w_down, so each
 * shard's output projections give a partial (M, D) sum that a comm all-reduce
 * completes. Embedding, norms and output head are replicated; x is replicated
 * (every shard holds the same bits). One thread drives all shards in turn.
 *
 * Threading: a model is used by one thread at a time (the engine thread); the
 * backends fan out internally. */
#ifndef SPECD_MODEL_H
#define SPECD_MODEL_H

#include "engine/gguf/gguf.h"
#include "engine/model/kv.h"
#include "kernels/backend.h"
#include "kernels/comm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_vocab;        /* rows of the output head (its logits) */
    int n_vocab_in;     /* rows of the token embedding (the ids a forward accepts); n_vocab but for eagle3 */
    int n_ctx_train;
    int dim;            /* D */
    int n_layer;
    int n_head;         /* H */
    int n_kv_head;      /* Hkv */
    int head_dim;       /* E */
    int ff;             /* F */
    int n_rot;          /* rotated dims per head */
    float eps;
    float rope_base;
    int rope_neox;      /* 0: adjacent pairs (llama); 1: (i, i+n_rot/2) pairs (qwen2, qwen3) */
    int qk_norm;        /* 1: per-head RMSNorm of q and k before RoPE (qwen3) */
    int sliding_window; /* attention sees only the last W positions (mistral); 0 = unlimited */
    int eagle3;         /* 1: an EAGLE-3 draft head (below) */
} model_hparams;

/* EAGLE-3 draft heads (arch "eagle3", issue 36): one llama decoder layer that
 * reads, beside each token's embedding, a feature row of the target: every
 * row of a forward carries model_seq.feat, either the target's residual
 * stream at three of its layers (feat_fc: (n, 3D), fused by fc.weight, a
 * bias-free 3D -> D map) or the head's own earlier output (the final
 * residual, tap n_layer = 1: (n, D)). The layer's attention takes
 * [rmsnorm(embedding) * attn_norm ; rmsnorm(feature) * hidden_norm] (2D wide:
 * attn_q/k/v are (N, 2D), the first D columns for the embedding) and its
 * residual stream starts from the feature; the FFN, the output norm and the
 * output head (n_vocab rows, the draft vocabulary) are llama's. File layout:
 * eagle3.* keys as llama.*, block_count 1; token_embd.weight (D, V_in),
 * fc.weight (3D, D), blk.0.{attn_norm, hidden_norm, attn_q, attn_k, attn_v,
 * attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight,
 * output_norm.weight, output.weight (D, n_vocab). One shard only.
 *
 * llama.cpp's layout (its converter, conversion/llama.py, and loader,
 * src/models/eagle3.cpp) loads too: the hidden norm named
 * blk.0.attn_norm_2.weight, eagle3.extract_layers (see draft_eagle.h), d2t
 * as I64, and token_embd.weight and/or output.weight left out when the head
 * shares its target's: such a head loads only through model_load_eagle3,
 * which lends it the target's. Refused with the reason: a head that needs
 * eagle3.norm_before_residual (the residual starting from the normed feature)
 * or per-layer feature norms (fc_norm.weight). */
#define MODEL_EAGLE3_PARTS 3

typedef struct {
    const void *w;      /* backend memory (CPU: the mmap itself, or a repacked copy) */
    int type;           /* the type as the backend keeps it (may be a backend-internal id) */
    int file_type;      /* ggml_type in the GGUF file, for display */
} model_mat;

typedef struct {
    const float *attn_norm;   /* (D) */
    model_mat wq;             /* (H*E, D) */
    model_mat wk;             /* (Hkv*E, D) */
    model_mat wv;             /* (Hkv*E, D) */
    model_mat wo;             /* (D, H*E) */
    const float *bq, *bk, *bv; /* (H*E) (Hkv*E) (Hkv*E) biases added after the matmuls, or NULL (qwen2 has them) */
    const float *q_norm, *k_norm; /* (E) (E) per-head RMSNorm weights of q and k (qwen3), or NULL */
    const float *ffn_norm;    /* (D) */
    model_mat w_gate;         /* (F, D) */
    model_mat w_up;           /* (F, D) */
    model_mat w_down;         /* (D, F) */
    /* eagle3: the feature half of the attention's input (wq/wk/wv above take
     * the embedding half) and its norm */
    model_mat wq_h, wk_h, wv_h;
    const float *hidden_norm; /* (D) */
} model_layer;

typedef struct {
    int max_batch;      /* most new positions in one forward call (default 512) */
    int max_ctx;        /* longest sequence (default: n_ctx_train, capped at 4096) */
    kv_type kv;         /* element type of model_kv_pool's caches (KV_F32 when zeroed) */
} model_params;

/* One tensor-parallel shard (the whole model when unsharded): its backend, its
 * slices of the weights, its scratch. Sizes: H' = H/N, Hkv' = Hkv/N, F' = F/N. */
typedef struct model_shard {
    backend *be;              /* not owned */
    int n_head;               /* H' */
    int n_kv_head;            /* Hkv' */
    int ff;                   /* F' */
    model_layer *layers;      /* (n_layer): wq (H'*E, D), wk wv (Hkv'*E, D), wo (D, H'*E), biases (H'*E)
                               * (Hkv'*E), w_gate w_up (F', D), w_down (D, F') */
    model_mat tok_embd;       /* (V, D) replicated */
    const float *out_norm;    /* (D) replicated */
    model_mat output;         /* (V, D) replicated (used on shard 0 only) */
    const float *inv_freq_be; /* (n_rot/2) in this backend's memory */
    /* scratch for max_batch rows in backend memory, allocated at load */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2; /* (MB, D) (MB, D) (MB, H'*E) (MB, Hkv'*E) x2 (MB, H'*E) (MB, F') x2 */
    float *logits_be;         /* (MB, V) on shard 0 when backend memory is not host memory, else NULL */
    model_mat fc[MODEL_EAGLE3_PARTS]; /* eagle3: fc.weight's column thirds (D, D) each */
    float *eb, *fin, *qh, *kh, *vh; /* eagle3 scratch: (MB, D) embeddings, (3, MB, D) target features,
                                     * (MB, H*E) (MB, Hkv*E) x2 the feature half's q, k, v */
    struct model_wref { const void *host, *w; } *wrefs; /* weights handed out by the backend */
    int n_wrefs, cap_wrefs;
    void **slices;            /* (n_slices) owned host buffers of column slices (wo, w_down), alive until model_free
                               * because a host-memory backend computes from them in place */
    int n_slices, cap_slices;
} model_shard;

#define MODEL_MAX_TAPS 4

typedef struct model {
    gguf_file *gguf;          /* owned: the weights live in its mapping */
    backend *be;              /* shard 0's backend (not owned) */
    model_hparams hp;         /* the whole model's */
    model_params mp;
    bool tied;                /* output head == token embedding */
    model_layer *layers;      /* shard 0's layers (== shards[0].layers; the whole model's when unsharded) */
    int n_shards;             /* N; 1 for model_load */
    model_shard *shards;      /* (n_shards) */
    backend **bes;            /* (n_shards) the shards' backends */
    comm *comm;               /* not owned; NULL when n_shards == 1 */
    float **red;              /* (n_shards) each shard's xb: the all-reduce's buffers */
    float *inv_freq;          /* (n_rot/2) RoPE frequencies incl. scaling factors (host) */
    float rope_pos_scale;     /* linear RoPE scaling: positions are multiplied by this */
    uint64_t weight_bytes;    /* all tensors (of the whole model) */
    uint64_t step_bytes;      /* weight bytes read by one decode step (not the embedding table) */
    uint64_t n_params;
    char arch[32];
    char name[128];
    int32_t *pos, *ids;       /* (MB) host, shared by all shards */
    attn_seq *aseq;           /* (MB) host, shared by all shards */
    int n_out_last;           /* rows of the last successful forward's output (its logits rows) */
    /* layer taps (model_set_taps): the residual stream at chosen layers */
    int n_taps;
    int tap_layer[MODEL_MAX_TAPS];
    float *tap_be[MODEL_MAX_TAPS]; /* (MB, D) each, on shard 0's backend */
    int n_in_last;            /* input rows of the last successful forward (the taps' rows) */
    const struct model *lender; /* eagle3: the target whose token embedding / output head the head
                                 * uses where its file has none (model_load_eagle3); not owned */
} model;

/* Loads PATH. Returns NULL with a clear reason in err (unsupported architecture
 * or tensor type, missing tensor, shape mismatch, ...) and its kind in *st
 * (errkind.h; st may be NULL): ENGINE_ERR_OOM exactly when the reason is a
 * memory shortage (host or backend memory for weights, scratch or tables),
 * else ENGINE_ERR_INVALID; ENGINE_OK on success. The caller owns the model;
 * be must outlive it. mp may be NULL for defaults. */
model *model_load(const char *path, backend *be, const model_params *mp, engine_status *st, char *err,
                  size_t errlen);
/* Loads PATH split over n_shards backends (bes[r] computes shard r; each must
 * outlive the model), with c (n_ranks == n_shards; not owned, must outlive the
 * model; may be NULL when n_shards == 1) summing the shards' partial outputs.
 * Needs H, Hkv and F divisible by n_shards, and the column slices of wo and
 * w_down to be whole quantization blocks of their type; otherwise NULL with the
 * numbers in err. n_shards == 1 is exactly model_load (same bits, same speed). */
model *model_load_tp(const char *path, backend *const *bes, int n_shards, comm *c, const model_params *mp,
                     engine_status *st, char *err, size_t errlen);
void model_free(model *m); /* accepts NULL */
/* Loads the eagle3 head at PATH on target's backend, as model_load does, with
 * target lending it its token embedding and/or output head (shard 0's) when
 * the file has none (llama.cpp's converter leaves them out of heads that
 * share the target's); a head with its own uses its own. Refused: a head of
 * another hidden size than the target's when it borrows, a file that is not
 * an eagle3 head. target must outlive the head. */
model *model_load_eagle3(const char *path, const model *target, const model_params *mp, engine_status *st,
                         char *err, size_t errlen);

/* A KV pool shaped for this model with n_blocks blocks of block_size (sharded
 * like the model: shard r's kv heads in backend r's memory). NULL with err and
 * *st filled as kv_pool_create_sharded does (ENGINE_ERR_OOM when it did not fit). */
kv_pool *model_kv_pool(const model *m, int block_size, int n_blocks, engine_status *st, char *err, size_t errlen);

/* One sequence's part of a forward call. New tokens go to cache positions
 * kv->len .. kv->len+n-1; after the call kv->len has grown by n (roll back with
 * kv_seq_truncate). pos gives RoPE positions (NULL: the cache positions);
 * mask is (n, n) ancestor mask (NULL: causal).
 *
 * Feature input rows (the model seam for proposers that read another model's
 * features): feat, when given, is (n, D) host floats that enter the residual
 * stream in place of the token embeddings of these rows (the tokens are still
 * checked against the vocabulary). A call with features is never captured as
 * a backend graph (its host rows change every call). */
typedef struct {
    kv_seq *kv;
    int n;
    const int32_t *tokens;    /* (n) */
    const int32_t *pos;       /* (n) or NULL */
    const uint8_t *mask;      /* (n, n) or NULL */
    bool all_logits;          /* logits for every new row, else only the last */
    const float *feat;        /* (n, D) input features in place of the embeddings, or NULL; eagle3: required */
    bool feat_fc;             /* eagle3: feat is (n, 3D), the target's three layers, fused by fc */
} model_seq;

/* Runs one forward pass. logits receives, in sequence order, n rows (all_logits)
 * or 1 row per sequence, each n_vocab floats. Returns 0, or -1 with err filled
 * (batch larger than max_batch, context full, KV pool out of blocks, bad token
 * id); on error no sequence's KV length changes. */
int model_forward(model *m, kv_pool *pool, const model_seq *seqs, int n_seqs, float *logits, char *err,
                  size_t errlen);

/* Hidden states without an extra pass: the final-normed hidden state (the
 * output head's input) of output rows rows[0..n) of the LAST successful
 * model_forward of m (row j = logits row j of that call), copied into host
 * dst (n, D). Valid until m's next forward. Returns 0, or -1 when a row is not
 * one of that call's output rows. Engine thread (the model's). */
int model_hidden_rows(model *m, float *dst, const int *rows, int n);
/* The same rows left in backend memory: a pointer to output row `row` of the
 * last forward (D floats), or NULL when out of range; valid until the next forward. */
const float *model_hidden_be(const model *m, int row);

/* Layer taps, for proposers that read the target's features (EAGLE's
 * low/middle/high layers): after model_set_taps(m, layers, n), every forward
 * also keeps, for each listed layer l (0..n_layer), the residual stream that
 * enters layer l — l = 0 the token embeddings, l = n_layer the final
 * residual before the output norm — for EVERY input row of the call (not
 * only the logit rows). model_tap_rows copies tap t's input rows rows[0..n)
 * of the LAST successful forward (row j = the j-th new token of the call, in
 * sequence order) into host dst (n, D); valid until the next forward. n = 0
 * turns taps off (no cost when off: one device copy of (M, D) per tap and
 * forward when on). Returns 0, or -1 (a layer out of range, more than
 * MODEL_MAX_TAPS, out of memory; model_tap_rows: a row or tap out of range).
 * Engine thread (the model's). */
int model_set_taps(model *m, const int *layers, int n);
int model_tap_rows(model *m, int tap, float *dst, const int *rows, int n);

/* Feeds tokens [from, to) of one sequence in max_batch chunks; the last row's
 * logits land in `logits` (n_vocab). Returns 0 or -1 with err. */
int model_feed(model *m, kv_pool *pool, kv_seq *kv, const int32_t *tokens, int from, int to, float *logits,
               char *err, size_t errlen);

/* The cost model's timer: times forward calls of n[j] positions (<= 32) after
 * past[j] cached ones (>= ctx0, which is computed once; the rest is only
 * reserved, since cache contents do not change what a pass costs) for the k
 * (<= 8) configurations, round-robin so every configuration sees the same
 * moments of a shared host, and keeps each one's fastest call (noise only ever
 * adds time). Each call is rolled back after. t[j] is 0 for a configuration
 * the pool cannot hold. logits: room for max(n) rows. */
void model_time_calls(model *m, kv_pool *pool, int ctx0, const int *n, const int *past, int k, double *t,
                      float *logits);

#endif
