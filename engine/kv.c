/* kv.c — paged KV cache (see kv.h). */
#include "engine/kv.h"

#include <stdio.h>
#include <stdlib.h>

kv_pool *kv_pool_create(int n_layer, int kv_dim, int block_size, int n_blocks, char *err, size_t errlen) {
    return kv_pool_create_on(NULL, n_layer, kv_dim, block_size, n_blocks, err, errlen);
}

kv_pool *kv_pool_create_on(backend *be, int n_layer, int kv_dim, int block_size, int n_blocks, char *err,
                           size_t errlen) {
    if (n_layer <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0) {
        snprintf(err, errlen, "kv pool: bad shape (layers %d, kv_dim %d, block %d, blocks %d)", n_layer, kv_dim,
                 block_size, n_blocks);
        return NULL;
    }
    kv_pool *p = calloc(1, sizeof(*p));
    if (!p) goto oom;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->block_stride = (size_t)n_layer * block_size * kv_dim;
    size_t floats = p->block_stride * (size_t)n_blocks;
    /* calloc: untouched pages stay virtual until first written */
    p->be = be;
    p->k = be ? be->i->alloc(be, floats * sizeof(float)) : calloc(floats, sizeof(float));
    p->v = be ? be->i->alloc(be, floats * sizeof(float)) : calloc(floats, sizeof(float));
    p->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!p->k || !p->v || !p->free_stack) goto oom;
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i; /* pop gives 0, 1, 2, ... */
    p->n_free = n_blocks;
    return p;
oom:
    snprintf(err, errlen, "kv pool: cannot allocate %d blocks of %d positions (%.1f MiB of %s memory)", n_blocks,
             block_size,
             2.0 * n_layer * block_size * (double)kv_dim * n_blocks * 4 / 1048576.0, be ? be->i->name : "host");
    kv_pool_destroy(p);
    return NULL;
}

void kv_pool_destroy(kv_pool *p) {
    if (!p) return;
    if (p->be) {
        p->be->i->release(p->be, p->k);
        p->be->i->release(p->be, p->v);
    } else {
        free(p->k);
        free(p->v);
    }
    free(p->free_stack);
    free(p);
}

size_t kv_pool_bytes(const kv_pool *p) { return 2 * p->block_stride * (size_t)p->n_blocks * sizeof(float); }

kv_layer_view kv_pool_layer(const kv_pool *p, int layer) {
    size_t off = (size_t)layer * p->block_size * p->kv_dim;
    return (kv_layer_view){p->k + off, p->v + off, p->block_stride, p->block_size};
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
