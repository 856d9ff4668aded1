/* kv.h — paged KV cache: one preallocated block pool per model, per-sequence
 * block tables. Append reserves blocks from a free stack; truncate (rollback)
 * is a length update plus handing whole blocks back — never a memset, never an
 * allocation after create.
 *
 * Tensor parallelism: a sharded pool keeps, for shard r, kv_dim floats per
 * position (its kv heads only) in shard r's backend memory, under ONE set of
 * block tables and ONE free stack shared by all shards: a block number means
 * the same positions on every shard, and rollback stays a pointer update.
 *
 * Threading: a pool and its sequences belong to the engine thread. */
#ifndef SPECD_KV_H
#define SPECD_KV_H

#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

/* One shard's storage. */
typedef struct kv_shard {
    float *k, *v;          /* (n_blocks, n_layer, Hkv, B, E), in the memory of `be` */
    backend *be;           /* not owned; NULL: host memory */
} kv_shard;

typedef struct kv_pool {
    int n_layer;
    int kv_dim;            /* Hkv * E of one shard (Hkv/N * E when sharded N ways) */
    int head_dim;          /* E: a block keeps each kv head's B positions together */
    int block_size;        /* B positions per block */
    int n_blocks;
    size_t block_stride;   /* floats per block in one shard: n_layer * B * kv_dim */
    float *k, *v;          /* shard 0's storage (== shards[0].k, .v) */
    backend *be;           /* shard 0's backend (== shards[0].be) */
    int n_shards;          /* 1 unless made by kv_pool_create_sharded */
    kv_shard *shards;      /* (n_shards) */
    int32_t *free_stack;   /* (n_blocks) */
    int n_free;
} kv_pool;

typedef struct kv_seq {
    int32_t *blocks;       /* (cap_blocks) block table */
    int n_blocks;          /* blocks held */
    int cap_blocks;        /* max_len / B rounded up */
    int len;               /* valid cached positions */
} kv_seq;

/* Creates a pool of n_blocks blocks. Returns NULL with err filled: a bad shape,
 * or the memory cannot be had (then err_is_oom(err), see errkind.h). Caller
 * owns it; kv_pool_destroy frees. */
kv_pool *kv_pool_create(int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks, char *err,
                        size_t errlen);
/* The same with the storage in backend memory (be must outlive the pool). */
kv_pool *kv_pool_create_on(backend *be, int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks,
                           char *err, size_t errlen);
/* A pool of n_shards shards: shard r's storage (kv_dim floats per position,
 * one shard's width) comes from bes[r], which must outlive the pool. */
kv_pool *kv_pool_create_sharded(backend *const *bes, int n_shards, int n_layer, int kv_dim, int head_dim,
                                int block_size, int n_blocks, char *err, size_t errlen);
void kv_pool_destroy(kv_pool *p); /* accepts NULL */
/* K and V storage of all shards together. */
size_t kv_pool_bytes(const kv_pool *p);
/* The view of one layer for the backend's attention and kv_write ops (shard 0). */
kv_layer_view kv_pool_layer(const kv_pool *p, int layer);
/* The same for shard `shard` (0 <= shard < n_shards). */
kv_layer_view kv_pool_layer_shard(const kv_pool *p, int shard, int layer);

/* Sequence tables are sized for max_len positions at creation (the only
 * allocation); they hold no blocks until kv_seq_reserve. */
kv_seq *kv_seq_create(const kv_pool *p, int max_len);
/* Returns the sequence's blocks to the pool and frees the table (accepts NULL). */
void kv_seq_destroy(kv_pool *p, kv_seq *s);

/* Makes sure positions [0, len) have blocks. Returns 0, or -1 when the pool is
 * out of blocks or len exceeds the table (nothing changes then). */
int kv_seq_reserve(kv_pool *p, kv_seq *s, int len);
/* Rolls the valid length back to len (<= s->len) and returns whole blocks past
 * it to the pool. A pointer update only. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int len);
/* Blocks needed to hold len positions. */
int kv_blocks_for(const kv_pool *p, int len);

#endif
