/* kv.h — paged KV cache: one preallocated block pool per model, per-sequence
 * block tables. Append reserves blocks from a free stack; truncate (rollback)
 * is a length update plus handing whole blocks back — never a memset, never an
 * allocation after create.
 *
 * Tensor parallelism: a sharded pool keeps, for shard r, kv_dim elements per
 * position (its kv heads only) in shard r's backend memory, under ONE set of
 * block tables and ONE free stack shared by all shards: a block number means
 * the same positions on every shard, and rollback stays a pointer update.
 *
 * Prefix reuse (kv_seq_attach, kv_seq_publish): a block is reference counted
 * (ref = sequences holding it). A FULL block whose positions are final can be
 * published into the pool's prefix index under a hash chain over (the pool's
 * model identity, the block's tokens, every block before it); a later sequence
 * that starts with the same tokens attaches the longest run of indexed blocks
 * with a reference instead of computing them. Indexed blocks are read-only: a
 * write into a block that is shared (ref > 1) copies it first (copy on write,
 * in kv_seq_reserve); a write into an indexed block only this sequence holds
 * takes it out of the index. A block no sequence holds stays indexed and
 * "idle" (LRU list) until an allocation finds the free stack empty (or the
 * idle count exceeds max_idle): then the least recently used idle block is
 * evicted. Every block is in exactly one state: free (on the free stack),
 * idle (ref 0, indexed, on the LRU list) or held (ref > 0).
 *
 * Elements: F32, or F16 (kv_pool_create_typed; half the memory, rounded to
 * nearest even by the backend's kv_write). Copies move elements of the
 * pool's size; nothing here converts.
 *
 * Threading: a pool and its sequences belong to the engine thread. */
#ifndef SPECD_KV_H
#define SPECD_KV_H

#include "engine/errkind.h"
#include "kernels/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One shard's storage. */
typedef struct kv_shard {
    void *k, *v;           /* (n_blocks, n_layer, Hkv, B, E) elements of the pool's type, in the memory of `be` */
    backend *be;           /* not owned; NULL: host memory */
} kv_shard;

typedef struct kv_pool {
    int n_layer;
    int kv_dim;            /* Hkv * E of one shard (Hkv/N * E when sharded N ways) */
    int head_dim;          /* E: a block keeps each kv head's B positions together */
    int block_size;        /* B positions per block */
    int n_blocks;
    size_t block_stride;   /* elements per block in one shard: n_layer * B * kv_dim */
    kv_type type;          /* KV_F32 or KV_F16 (half the memory; attention reads it back as float) */
    void *k, *v;           /* shard 0's storage (== shards[0].k, .v) */
    backend *be;           /* shard 0's backend (== shards[0].be) */
    int n_shards;          /* 1 unless made by kv_pool_create_sharded */
    kv_shard *shards;      /* (n_shards) */
    int32_t *free_stack;   /* (n_blocks) */
    int n_free;            /* blocks on the free stack (neither held nor indexed) */
    /* prefix reuse */
    int32_t *ref;          /* (n_blocks) sequences holding each block */
    uint64_t *bhash;       /* (n_blocks) chain hash of an indexed block, 0: not indexed */
    uint64_t *bparent;     /* (n_blocks) the chain hash before it (the model identity for block 0) */
    int32_t *btok;         /* (n_blocks, B) tokens of an indexed block, checked on every match */
    int32_t *hnext;        /* (n_blocks) next block in the same index bucket, -1 */
    int32_t *buckets;      /* (n_buckets) first block of each bucket, -1 */
    int n_buckets;         /* power of two >= n_blocks */
    int32_t *lru_prev, *lru_next; /* (n_blocks) idle blocks, least recently used at lru_head */
    int lru_head, lru_tail;
    int n_idle;            /* idle blocks: indexed, held by nobody, evictable */
    int n_indexed;         /* blocks in the index (idle or held) */
    bool prefix_on;        /* kv_seq_publish indexes blocks (kv_pool_set_prefix) */
    uint64_t ident;        /* model identity: the seed of every hash chain */
    int max_idle;          /* most idle blocks kept (0: as many as the pool has) */
    uint64_t evicted;      /* idle blocks evicted so far */
    uint64_t cow_copies;   /* shared blocks copied before a write */
} kv_pool;

typedef struct kv_seq {
    int32_t *blocks;       /* (cap_blocks) block table */
    int n_blocks;          /* blocks held */
    int cap_blocks;        /* max_len / B rounded up */
    int len;               /* valid cached positions */
    int n_hashed;          /* leading blocks whose chain hash is known (attached or published) */
    uint64_t *chain;       /* (cap_blocks) chain hash after each of those blocks */
} kv_seq;

/* Creates a pool of n_blocks blocks. Returns NULL with err filled and the
 * kind in *st (errkind.h; st may be NULL): a bad shape (ENGINE_ERR_INVALID),
 * or the memory cannot be had (ENGINE_ERR_OOM); ENGINE_OK on success. Caller
 * owns it; kv_pool_destroy frees. */
kv_pool *kv_pool_create(int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks, engine_status *st,
                        char *err, size_t errlen);
/* The same with the storage in backend memory (be must outlive the pool). */
kv_pool *kv_pool_create_on(backend *be, int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks,
                           engine_status *st, char *err, size_t errlen);
/* A pool of n_shards shards: shard r's storage (kv_dim elements per position,
 * one shard's width) comes from bes[r], which must outlive the pool. */
kv_pool *kv_pool_create_sharded(backend *const *bes, int n_shards, int n_layer, int kv_dim, int head_dim,
                                int block_size, int n_blocks, engine_status *st, char *err, size_t errlen);
/* The same with elements of `type` (kv_pool_create_sharded and the others
 * make KV_F32 pools). */
kv_pool *kv_pool_create_typed(backend *const *bes, int n_shards, kv_type type, int n_layer, int kv_dim, int head_dim,
                              int block_size, int n_blocks, engine_status *st, char *err, size_t errlen);
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

/* Makes sure positions [0, len) have blocks that this sequence may write from
 * s->len on: new blocks come from the free stack, else by evicting the least
 * recently used idle block; a held block at or past s->len that is shared is
 * copied first (copy on write) and one that is indexed leaves the index.
 * Returns 0, or -1 when the pool is out of blocks or len exceeds the table
 * (nothing changes then). */
int kv_seq_reserve(kv_pool *p, kv_seq *s, int len);
/* Blocks kv_seq_reserve(p, s, len) would take from the pool (growth plus
 * copies on write). */
int kv_seq_reserve_cost(const kv_pool *p, const kv_seq *s, int len);
/* Blocks an allocation can have: free plus idle (evictable). */
int kv_pool_available(const kv_pool *p);
/* Rolls the valid length back to len (<= s->len) and returns whole blocks past
 * it to the pool. A pointer update only. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int len);
/* Blocks needed to hold len positions. */
int kv_blocks_for(const kv_pool *p, int len);

/* Tree compaction: copies cached position src[j] to dst[j] for j = 0..n-1 in
 * order (every shard, layer, K and V; E-float segments through the backend's
 * copy op), so the accepted path of a verified tree becomes contiguous before
 * the truncate. Requires dst[j] < src[j] < s->len, dst and src increasing,
 * and every destination block private to s (ref 1, not indexed: the verify
 * forward's kv_seq_reserve made the blocks it wrote so — copy on write is
 * never bypassed). Returns 0, or -1 (nothing moved) when that fails. */
int kv_seq_move(kv_pool *p, kv_seq *s, const int *dst, const int *src, int n);

/* ---- prefix reuse ---- */

/* Turns the prefix index on (ident: the model's identity, e.g. its GGUF
 * header hash; max_idle: most idle cached blocks kept, 0 = no limit) or off
 * (every idle block is evicted at once; attach then finds nothing). */
void kv_pool_set_prefix(kv_pool *p, bool on, uint64_t ident, int max_idle);
/* How many leading full blocks of tokens[0, n) the index holds (at most
 * max_blocks); *in_use (may be NULL) gets how many of those are held by some
 * sequence now (the others are idle). Read-only. */
int kv_prefix_match(const kv_pool *p, const int32_t *tokens, int n, int max_blocks, int *in_use);
/* Attaches to an empty sequence (no blocks) the longest indexed run of full
 * blocks of tokens[0, n), with one reference each, and sets its length to
 * that run's positions capped at max_len (a block past the cap is not taken;
 * one cut by it is, and is copied on its first write). Returns the length. */
int kv_seq_attach(kv_pool *p, kv_seq *s, const int32_t *tokens, int n, int max_len);
/* Indexes the sequence's full blocks of tokens[0, n) that lie below s->len
 * (their positions are final) and that the index lacks; tokens are the
 * sequence's tokens from position 0. No-op while the index is off. Cost:
 * hashing the new blocks only. */
void kv_seq_publish(kv_pool *p, kv_seq *s, const int32_t *tokens, int n);
/* Held blocks of s at or past s->len that are shared: the copies a write at
 * s->len would make (admission's slack). */
int kv_seq_cow_pending(const kv_pool *p, const kv_seq *s);
/* Checks the pool's accounting (every block free, idle or held exactly once;
 * refs equal the holders among seqs[0, n) when all holders are given (n >= 0);
 * the index and LRU list consistent). Returns 0, or -1 with err. For tests. */
int kv_pool_check(const kv_pool *p, kv_seq *const *seqs, int n, char *err, size_t errlen);

#endif
