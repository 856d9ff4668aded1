/* kv.c — paged KV cache (see kv.h). */
#include "engine/kv.h"

#include "engine/errkind.h"

#include <stdio.h>
#include <stdlib.h>

kv_pool *kv_pool_create(int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks, char *err,
                        size_t errlen) {
    return kv_pool_create_on(NULL, n_layer, kv_dim, head_dim, block_size, n_blocks, err, errlen);
}

kv_pool *kv_pool_create_on(backend *be, int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks,
                           char *err, size_t errlen) {
    return kv_pool_create_sharded(&be, 1, n_layer, kv_dim, head_dim, block_size, n_blocks, err, errlen);
}

kv_pool *kv_pool_create_sharded(backend *const *bes, int n_shards, int n_layer, int kv_dim, int head_dim,
                                int block_size, int n_blocks, char *err, size_t errlen) {
    if (n_shards <= 0 || n_layer <= 0 || kv_dim <= 0 || head_dim <= 0 || kv_dim % head_dim || block_size <= 0 ||
        n_blocks <= 0) {
        snprintf(err, errlen,
                 "kv pool: bad shape (shards %d, layers %d, kv_dim %d, head_dim %d, block %d, blocks %d)", n_shards,
                 n_layer, kv_dim, head_dim, block_size, n_blocks);
        return NULL;
    }
    const char *where = "host";
    kv_pool *p = calloc(1, sizeof(*p));
    if (!p) goto oom;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->block_stride = (size_t)n_layer * block_size * kv_dim;
    size_t floats = p->block_stride * (size_t)n_blocks;
    p->shards = calloc((size_t)n_shards, sizeof(kv_shard));
    if (!p->shards) goto oom;
    p->n_shards = n_shards;
    for (int r = 0; r < n_shards; r++) {
        kv_shard *sh = &p->shards[r];
        backend *be = bes[r];
        sh->be = be;
        where = be ? be->i->name : "host";
        /* calloc: untouched pages stay virtual until first written */
        sh->k = be ? be->i->alloc(be, floats * sizeof(float)) : calloc(floats, sizeof(float));
        sh->v = be ? be->i->alloc(be, floats * sizeof(float)) : calloc(floats, sizeof(float));
        if (!sh->k || !sh->v) goto oom;
    }
    p->k = p->shards[0].k;
    p->v = p->shards[0].v;
    p->be = p->shards[0].be;
    p->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!p->free_stack) goto oom;
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i; /* pop gives 0, 1, 2, ... */
    p->n_free = n_blocks;
    return p;
oom:
    snprintf(err, errlen, SPECD_ERR_OOM "kv pool of %d blocks of %d positions (%.1f MiB of %s memory%s)", n_blocks,
             block_size, 2.0 * n_layer * block_size * (double)kv_dim * n_blocks * 4 / 1048576.0, where,
             n_shards > 1 ? " per shard" : "");
    kv_pool_destroy(p);
    return NULL;
}

void kv_pool_destroy(kv_pool *p) {
    if (!p) return;
    for (int r = 0; r < p->n_shards; r++) {
        kv_shard *sh = &p->shards[r];
        if (sh->be) {
            sh->be->i->release(sh->be, sh->k);
            sh->be->i->release(sh->be, sh->v);
        } else {
            free(sh->k);
            free(sh->v);
        }
    }
    free(p->shards);
    free(p->free_stack);
    free(p);
}

size_t kv_pool_bytes(const kv_pool *p) {
    return 2 * p->block_stride * (size_t)p->n_blocks * sizeof(float) * (size_t)p->n_shards;
}

kv_layer_view kv_pool_layer(const kv_pool *p, int layer) { return kv_pool_layer_shard(p, 0, layer); }

kv_layer_view kv_pool_layer_shard(const kv_pool *p, int shard, int layer) {
    size_t off = (size_t)layer * p->block_size * p->kv_dim;
    const kv_shard *sh = &p->shards[shard];
    return (kv_layer_view){sh->k + off, sh->v + off, p->block_stride, p->block_size, p->head_dim};
}

int kv_blocks_for(const kv_pool *p, int len) { return (len + p->block_size - 1) / p->block_size; }

kv_seq *kv_seq_create(const kv_pool *p, int max_len) {
    kv_seq *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cap_blocks = kv_blocks_for(p, max_len > 0 ? max_len : 1);
    s->blocks = malloc((size_t)s->cap_blocks * sizeof(int32_t));
    if (!s->blocks) {
        free(s);
        return NULL;
    }
    return s;
}

void kv_seq_destroy(kv_pool *p, kv_seq *s) {
    if (!s) return;
    kv_seq_truncate(p, s, 0);
    free(s->blocks);
    free(s);
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int len) {
    int need = kv_blocks_for(p, len);
    if (need <= s->n_blocks) return 0;
    if (need > s->cap_blocks || need - s->n_blocks > p->n_free) return -1;
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = p->free_stack[--p->n_free];
    return 0;
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int len) {
    if (len < 0) len = 0;
    if (len < s->len) s->len = len;
    int keep = kv_blocks_for(p, s->len);
    while (s->n_blocks > keep) p->free_stack[p->n_free++] = s->blocks[--s->n_blocks];
}
