/* model.h — a llama-family model (llama, mistral, qwen2) loaded from GGUF (weights used in place from
 * the mmap) and its batched forward pass. Prefill, 1-token decode and the
 * (γ+1)-position verification of speculation are the same call: any number of
 * new positions of any number of sequences, each against its paged KV cache,
 * with an optional ancestor mask per sequence (tree verification).
 *
 * Threading: a model is used by one thread at a time (the engine thread); the
 * backend fans out internally. */
#ifndef SPECD_MODEL_H
#define SPECD_MODEL_H

#include "engine/gguf.h"
#include "engine/kv.h"
#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_vocab;
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
    int rope_neox;      /* 0: adjacent pairs (llama); 1: (i, i+n_rot/2) pairs (qwen2) */
    int sliding_window; /* attention sees only the last W positions (mistral); 0 = unlimited */
} model_hparams;

typedef struct {
    const void *w;      /* backend memory (CPU: the mmap itself) */
    int type;           /* ggml_type (as the backend keeps it) */
} model_mat;

typedef struct {
    const float *attn_norm;   /* (D) */
    model_mat wq;             /* (H*E, D) */
    model_mat wk;             /* (Hkv*E, D) */
    model_mat wv;             /* (Hkv*E, D) */
    model_mat wo;             /* (D, H*E) */
    const float *bq, *bk, *bv; /* (H*E) (Hkv*E) (Hkv*E) biases added after the matmuls, or NULL (qwen2 has them) */
    const float *ffn_norm;    /* (D) */
    model_mat w_gate;         /* (F, D) */
    model_mat w_up;           /* (F, D) */
    model_mat w_down;         /* (D, F) */
} model_layer;

typedef struct {
    int max_batch;      /* most new positions in one forward call (default 512) */
    int max_ctx;        /* longest sequence (default: n_ctx_train, capped at 4096) */
} model_params;

typedef struct model {
    gguf_file *gguf;          /* owned: the weights live in its mapping */
    backend *be;              /* not owned */
    model_hparams hp;
    model_params mp;
    model_mat tok_embd;       /* (V, D) */
    const float *out_norm;    /* (D) */
    model_mat output;         /* (V, D); == tok_embd when tied */
    bool tied;
    model_layer *layers;      /* (n_layer) */
    float *inv_freq;          /* (n_rot/2) RoPE frequencies incl. scaling factors (host) */
    const float *inv_freq_be; /* the same in backend memory */
    float rope_pos_scale;     /* linear RoPE scaling: positions are multiplied by this */
    uint64_t weight_bytes;    /* all tensors */
    uint64_t step_bytes;      /* weight bytes read by one decode step (not the embedding table) */
    uint64_t n_params;
    char arch[32];
    char name[128];
    /* scratch for max_batch rows in backend memory, allocated at load */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2; /* (MB, D) (MB, D) (MB, H*E) (MB, Hkv*E) x2 (MB, H*E) (MB, F) x2 */
    float *logits_be;         /* (MB, V) when backend memory is not host memory, else NULL */
    int32_t *pos, *ids;       /* (MB) host */
    attn_seq *aseq;           /* (MB) host */
    struct model_wref { const void *host, *w; } *wrefs; /* weights handed out by the backend */
    int n_wrefs, cap_wrefs;
} model;

/* Loads PATH. Returns NULL with a clear reason in err (unsupported architecture
 * or tensor type, missing tensor, shape mismatch, ...). The caller owns the
 * model; be must outlive it. mp may be NULL for defaults. */
model *model_load(const char *path, backend *be, const model_params *mp, char *err, size_t errlen);
void model_free(model *m); /* accepts NULL */

/* A KV pool shaped for this model with n_blocks blocks of block_size. */
kv_pool *model_kv_pool(const model *m, int block_size, int n_blocks, char *err, size_t errlen);

/* One sequence's part of a forward call. New tokens go to cache positions
 * kv->len .. kv->len+n-1; after the call kv->len has grown by n (roll back with
 * kv_seq_truncate). pos gives RoPE positions (NULL: the cache positions);
 * mask is (n, n) ancestor mask (NULL: causal). */
typedef struct {
    kv_seq *kv;
    int n;
    const int32_t *tokens;    /* (n) */
    const int32_t *pos;       /* (n) or NULL */
    const uint8_t *mask;      /* (n, n) or NULL */
    bool all_logits;          /* logits for every new row, else only the last */
} model_seq;

/* Runs one forward pass. logits receives, in sequence order, n rows (all_logits)
 * or 1 row per sequence, each n_vocab floats. Returns 0, or -1 with err filled
 * (batch larger than max_batch, context full, KV pool out of blocks, bad token
 * id); on error no sequence's KV length changes. */
int model_forward(model *m, kv_pool *pool, const model_seq *seqs, int n_seqs, float *logits, char *err,
                  size_t errlen);

#endif
