/* kv.c — paged KV cache (see kv.h). */
#include "engine/model/kv.h"

#include "engine/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kv_pool *kv_pool_create(int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks, engine_status *st,
                        char *err, size_t errlen) {
    return kv_pool_create_on(NULL, n_layer, kv_dim, head_dim, block_size, n_blocks, st, err, errlen);
}

kv_pool *kv_pool_create_on(backend *be, int n_layer, int kv_dim, int head_dim, int block_size, int n_blocks,
                           engine_status *st, char *err, size_t errlen) {
    return kv_pool_create_sharded(&be, 1, n_layer, kv_dim, head_dim, block_size, n_blocks, st, err, errlen);
}

kv_pool *kv_pool_create_sharded(backend *const *bes, int n_shards, int n_layer, int kv_dim, int head_dim,
                                int block_size, int n_blocks, engine_status *st, char *err, size_t errlen) {
    return kv_pool_create_typed(bes, n_shards, KV_F32, n_layer, kv_dim, head_dim, block_size, n_blocks, st, err,
                                errlen);
}

kv_pool *kv_pool_create_typed(backend *const *bes, int n_shards, kv_type type, int n_layer, int kv_dim, int head_dim,
                              int block_size, int n_blocks, engine_status *st, char *err, size_t errlen) {
    if (n_shards <= 0 || n_layer <= 0 || kv_dim <= 0 || head_dim <= 0 || kv_dim % head_dim || block_size <= 0 ||
        n_blocks <= 0 || (type != KV_F32 && type != KV_F16)) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen,
                     "kv pool: bad shape (shards %d, layers %d, kv_dim %d, head_dim %d, block %d, blocks %d)",
                     n_shards, n_layer, kv_dim, head_dim, block_size, n_blocks);
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
    p->type = type;
    size_t elems = p->block_stride * (size_t)n_blocks, es = kv_type_size(type);
    p->shards = calloc((size_t)n_shards, sizeof(kv_shard));
    if (!p->shards) goto oom;
    p->n_shards = n_shards;
    for (int r = 0; r < n_shards; r++) {
        kv_shard *sh = &p->shards[r];
        backend *be = bes[r];
        sh->be = be;
        where = be ? be->i->name : "host";
        /* calloc: untouched pages stay virtual until first written */
        sh->k = be ? be->i->alloc(be, elems * es) : calloc(elems, es);
        sh->v = be ? be->i->alloc(be, elems * es) : calloc(elems, es);
        if (!sh->k || !sh->v) goto oom;
    }
    p->k = p->shards[0].k;
    p->v = p->shards[0].v;
    p->be = p->shards[0].be;
    p->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    if (!p->free_stack) goto oom;
    for (int i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i; /* pop gives 0, 1, 2, ... */
    p->n_free = n_blocks;
    p->n_buckets = 1;
    while (p->n_buckets < n_blocks) p->n_buckets *= 2;
    p->ref = calloc((size_t)n_blocks, sizeof(int32_t));
    p->bhash = calloc((size_t)n_blocks, sizeof(uint64_t));
    p->bparent = calloc((size_t)n_blocks, sizeof(uint64_t));
    p->btok = malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t));
    p->hnext = malloc((size_t)n_blocks * sizeof(int32_t));
    p->lru_prev = malloc((size_t)n_blocks * sizeof(int32_t));
    p->lru_next = malloc((size_t)n_blocks * sizeof(int32_t));
    p->buckets = malloc((size_t)p->n_buckets * sizeof(int32_t));
    if (!p->ref || !p->bhash || !p->bparent || !p->btok || !p->hnext || !p->lru_prev || !p->lru_next || !p->buckets)
        goto oom;
    for (int i = 0; i < p->n_buckets; i++) p->buckets[i] = -1;
    p->lru_head = p->lru_tail = -1;
    engine_status_set(st, ENGINE_OK);
    return p;
oom:
    util_fail_st(st, ENGINE_ERR_OOM, err, errlen,
                 "out of memory: kv pool of %d blocks of %d positions (%.1f MiB of %s memory%s)", n_blocks, block_size,
                 2.0 * n_layer * block_size * (double)kv_dim * n_blocks * kv_type_size(type) / 1048576.0, where,
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
    free(p->ref), free(p->bhash), free(p->bparent), free(p->btok), free(p->hnext);
    free(p->lru_prev), free(p->lru_next), free(p->buckets);
    free(p);
}

size_t kv_pool_bytes(const kv_pool *p) {
    return 2 * p->block_stride * (size_t)p->n_blocks * kv_type_size(p->type) * (size_t)p->n_shards;
}

kv_layer_view kv_pool_layer(const kv_pool *p, int layer) { return kv_pool_layer_shard(p, 0, layer); }

kv_layer_view kv_pool_layer_shard(const kv_pool *p, int shard, int layer) {
    size_t off = (size_t)layer * p->block_size * p->kv_dim * kv_type_size(p->type);
    const kv_shard *sh = &p->shards[shard];
    return (kv_layer_view){(uint8_t *)sh->k + off, (uint8_t *)sh->v + off, p->block_stride, p->block_size,
                           p->head_dim, p->type};
}

int kv_blocks_for(const kv_pool *p, int len) { return (len + p->block_size - 1) / p->block_size; }

kv_seq *kv_seq_create(const kv_pool *p, int max_len) {
    kv_seq *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cap_blocks = kv_blocks_for(p, max_len > 0 ? max_len : 1);
    s->blocks = malloc((size_t)s->cap_blocks * sizeof(int32_t));
    s->chain = malloc((size_t)s->cap_blocks * sizeof(uint64_t));
    if (!s->blocks || !s->chain) {
        free(s->blocks);
        free(s->chain);
        free(s);
        return NULL;
    }
    return s;
}

void kv_seq_destroy(kv_pool *p, kv_seq *s) {
    if (!s) return;
    kv_seq_truncate(p, s, 0);
    free(s->blocks);
    free(s->chain);
    free(s);
}

/* ---- the index and the idle list ---------------------------------------------- */

static void lru_unlink(kv_pool *p, int b) {
    int pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx;
    else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr;
    else p->lru_tail = pr;
    p->n_idle--;
}

static void lru_append(kv_pool *p, int b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_idle++;
}

static void index_remove(kv_pool *p, int b) {
    int32_t *pp = &p->buckets[p->bhash[b] & (uint64_t)(p->n_buckets - 1)];
    while (*pp != b) pp = &p->hnext[*pp];
    *pp = p->hnext[b];
    p->bhash[b] = 0;
    p->n_indexed--;
}

/* Evicts the least recently used idle block onto the free stack. */
static void evict_one(kv_pool *p) {
    int b = p->lru_head;
    lru_unlink(p, b);
    index_remove(p, b);
    p->free_stack[p->n_free++] = b;
    p->evicted++;
}

/* A block for a writer: the free stack first, then the oldest idle block.
 * The caller checked kv_pool_available. */
static int32_t take_block(kv_pool *p) {
    if (p->n_free == 0) evict_one(p);
    int32_t b = p->free_stack[--p->n_free];
    p->ref[b] = 1;
    return b;
}

/* One holder less: an unheld block goes idle when indexed, else free. */
static void drop_ref(kv_pool *p, int32_t b) {
    if (--p->ref[b] > 0) return;
    if (p->bhash[b] && !p->prefix_on) index_remove(p, b);
    if (p->bhash[b]) {
        lru_append(p, b);
        if (p->max_idle > 0 && p->n_idle > p->max_idle) evict_one(p);
    } else {
        p->free_stack[p->n_free++] = b;
    }
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27, x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The chain hash of a block of tokens after `parent` (never 0). */
static uint64_t block_hash(uint64_t parent, const int32_t *t, int B) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < B; i++) h = mix64(h ^ ((uint64_t)(uint32_t)t[i] + 0x632be59bd9b4e019ull * (uint64_t)(i + 1)));
    return h ? h : 1;
}

/* The indexed block with this chain (hash, parent) and tokens, or -1. */
static int find_block(const kv_pool *p, uint64_t h, uint64_t parent, const int32_t *t) {
    size_t B = (size_t)p->block_size;
    for (int b = p->buckets[h & (uint64_t)(p->n_buckets - 1)]; b >= 0; b = p->hnext[b])
        if (p->bhash[b] == h && p->bparent[b] == parent && !memcmp(p->btok + (size_t)b * B, t, B * sizeof(int32_t)))
            return b;
    return -1;
}

/* ---- sequences ---------------------------------------------------------------- */

/* Whether a write into held block j of s must first copy it (shared) or take
 * it out of the index (indexed, held by s alone). */
static bool block_shared(const kv_pool *p, const kv_seq *s, int j) { return p->ref[s->blocks[j]] > 1; }

int kv_seq_cow_pending(const kv_pool *p, const kv_seq *s) {
    int n = 0;
    for (int j = s->len / p->block_size; j < s->n_blocks; j++) n += block_shared(p, s, j);
    return n;
}

int kv_seq_reserve_cost(const kv_pool *p, const kv_seq *s, int len) {
    int need = kv_blocks_for(p, len) - s->n_blocks;
    return (need > 0 ? need : 0) + kv_seq_cow_pending(p, s);
}

int kv_pool_available(const kv_pool *p) { return p->n_free + p->n_idle; }

/* Copies block src's storage (every shard, layer, K and V) to dst. */
static void copy_block(kv_pool *p, int32_t dst, int32_t src) {
    size_t bytes = p->block_stride * kv_type_size(p->type), off_d = (size_t)dst * bytes, off_s = (size_t)src * bytes;
    for (int r = 0; r < p->n_shards; r++) {
        kv_shard *sh = &p->shards[r];
        uint8_t *k = sh->k, *v = sh->v;
        if (sh->be) {
            sh->be->i->copy(sh->be, k + off_d, k + off_s, bytes);
            sh->be->i->copy(sh->be, v + off_d, v + off_s, bytes);
        } else {
            memcpy(k + off_d, k + off_s, bytes);
            memcpy(v + off_d, v + off_s, bytes);
        }
    }
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int len) {
    int need = kv_blocks_for(p, len);
    if (need > s->cap_blocks) return -1;
    if (kv_seq_reserve_cost(p, s, len) > kv_pool_available(p)) return -1;
    /* the blocks this call lets the sequence write into become its own */
    for (int j = s->len / p->block_size; j < s->n_blocks; j++) {
        int32_t b = s->blocks[j];
        if (block_shared(p, s, j)) {
            int32_t c = take_block(p);
            copy_block(p, c, b);
            drop_ref(p, b);
            s->blocks[j] = c;
            p->cow_copies++;
        } else if (p->bhash[b]) {
            index_remove(p, b);
        } else {
            continue;
        }
        if (s->n_hashed > j) s->n_hashed = j; /* published again once full */
    }
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = take_block(p);
    return 0;
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int len) {
    if (len < 0) len = 0;
    if (len < s->len) s->len = len;
    int keep = kv_blocks_for(p, s->len);
    while (s->n_blocks > keep) drop_ref(p, s->blocks[--s->n_blocks]);
    if (s->n_hashed > keep) s->n_hashed = keep;
}

/* ---- prefix reuse ------------------------------------------------------------- */

void kv_pool_set_prefix(kv_pool *p, bool on, uint64_t ident, int max_idle) {
    p->prefix_on = on;
    p->ident = ident;
    p->max_idle = max_idle > 0 ? max_idle : 0;
    while (p->n_idle > (on ? p->max_idle > 0 ? p->max_idle : p->n_blocks : 0)) evict_one(p);
}

int kv_prefix_match(const kv_pool *p, const int32_t *tokens, int n, int max_blocks, int *in_use) {
    int B = p->block_size, k = 0, used = 0;
    uint64_t parent = p->ident;
    if (p->n_indexed > 0)
        for (; k < max_blocks && (k + 1) * B <= n; k++) {
            uint64_t h = block_hash(parent, tokens + (size_t)k * B, B);
            int b = find_block(p, h, parent, tokens + (size_t)k * B);
            if (b < 0) break;
            used += p->ref[b] > 0;
            parent = h;
        }
    if (in_use) *in_use = used;
    return k;
}

int kv_seq_attach(kv_pool *p, kv_seq *s, const int32_t *tokens, int n, int max_len) {
    if (s->n_blocks != 0 || max_len <= 0 || !p->prefix_on) return 0;
    int B = p->block_size, limit = kv_blocks_for(p, max_len);
    if (limit > s->cap_blocks) limit = s->cap_blocks;
    uint64_t parent = p->ident;
    while (s->n_blocks < limit && (s->n_blocks + 1) * B <= n) {
        const int32_t *t = tokens + (size_t)s->n_blocks * B;
        uint64_t h = block_hash(parent, t, B);
        int b = find_block(p, h, parent, t);
        if (b < 0) break;
        if (p->ref[b]++ == 0) lru_unlink(p, b);
        s->chain[s->n_blocks] = h;
        s->blocks[s->n_blocks++] = b;
        parent = h;
    }
    s->n_hashed = s->n_blocks;
    s->len = s->n_blocks * B < max_len ? s->n_blocks * B : max_len;
    return s->len;
}

void kv_seq_publish(kv_pool *p, kv_seq *s, const int32_t *tokens, int n) {
    if (!p->prefix_on) return;
    int B = p->block_size;
    int full = (s->len < n ? s->len : n) / B;
    if (full > s->n_blocks) full = s->n_blocks;
    for (int j = s->n_hashed; j < full; j++) {
        uint64_t parent = j ? s->chain[j - 1] : p->ident;
        const int32_t *t = tokens + (size_t)j * B;
        uint64_t h = block_hash(parent, t, B);
        s->chain[j] = h;
        int32_t b = s->blocks[j];
        if (!p->bhash[b] && find_block(p, h, parent, t) < 0) { /* a twin computed elsewhere stays private */
            p->bhash[b] = h;
            p->bparent[b] = parent;
            memcpy(p->btok + (size_t)b * B, t, (size_t)B * sizeof(int32_t));
            int32_t *head = &p->buckets[h & (uint64_t)(p->n_buckets - 1)];
            p->hnext[b] = *head;
            *head = b;
            p->n_indexed++;
        }
    }
    if (full > s->n_hashed) s->n_hashed = full;
}

int kv_pool_check(const kv_pool *p, kv_seq *const *seqs, int n, char *err, size_t errlen) {
    int N = p->n_blocks, rc = -1;
    int *seen = calloc((size_t)N, sizeof(int)), *holders = calloc((size_t)N, sizeof(int));
    if (!seen || !holders) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < p->n_free; i++) {
        int b = p->free_stack[i];
        if (b < 0 || b >= N || seen[b]++ || p->ref[b] || p->bhash[b]) {
            snprintf(err, errlen, "free stack entry %d (block %d) is held, indexed or listed twice", i, b);
            goto out;
        }
    }
    int idle = 0;
    for (int b = p->lru_head, prev = -1; b >= 0; prev = b, b = p->lru_next[b], idle++) {
        if (idle > N || seen[b]++ || p->ref[b] || !p->bhash[b] || p->lru_prev[b] != prev) {
            snprintf(err, errlen, "idle block %d is held, unindexed, free or badly linked", b);
            goto out;
        }
    }
    if (idle != p->n_idle) {
        snprintf(err, errlen, "idle list has %d blocks, n_idle says %d", idle, p->n_idle);
        goto out;
    }
    int indexed = 0;
    for (int k = 0; k < p->n_buckets; k++)
        for (int b = p->buckets[k]; b >= 0; b = p->hnext[b]) {
            if (!p->bhash[b] || (int)(p->bhash[b] & (uint64_t)(p->n_buckets - 1)) != k || ++indexed > N) {
                snprintf(err, errlen, "index bucket %d holds block %d wrongly", k, b);
                goto out;
            }
        }
    if (indexed != p->n_indexed) {
        snprintf(err, errlen, "index holds %d blocks, n_indexed says %d", indexed, p->n_indexed);
        goto out;
    }
    for (int b = 0; b < N; b++)
        if (!seen[b] && p->ref[b] <= 0) {
            snprintf(err, errlen, "block %d is neither free, idle nor held (ref %d)", b, p->ref[b]);
            goto out;
        }
    if (n >= 0) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < seqs[i]->n_blocks; j++) holders[seqs[i]->blocks[j]]++;
        for (int b = 0; b < N; b++)
            if (holders[b] != p->ref[b]) {
                snprintf(err, errlen, "block %d has ref %d but %d holders", b, p->ref[b], holders[b]);
                goto out;
            }
    }
    rc = 0;
out:
    free(seen);
    free(holders);
    return rc;
}

int kv_seq_move(kv_pool *p, kv_seq *s, const int *dst, const int *src, int n) {
    int B = p->block_size, E = p->head_dim, Hkv = p->kv_dim / p->head_dim;
    for (int j = 0; j < n; j++) {
        if (!(dst[j] >= 0 && dst[j] < src[j] && src[j] < s->len) || (j > 0 && !(dst[j] > dst[j - 1] && src[j] > src[j - 1])))
            return -1;
        int32_t b = s->blocks[dst[j] / B];
        if (p->ref[b] != 1 || p->bhash[b] != 0) return -1;
    }
    size_t es = kv_type_size(p->type), bytes = (size_t)E * es;
    for (int j = 0; j < n; j++) {
        size_t bd = (size_t)s->blocks[dst[j] / B] * p->block_stride, bs = (size_t)s->blocks[src[j] / B] * p->block_stride;
        int od = dst[j] % B, os = src[j] % B;
        for (int r = 0; r < p->n_shards; r++) {
            kv_shard *sh = &p->shards[r];
            uint8_t *k = sh->k, *v = sh->v;
            for (int l = 0; l < p->n_layer; l++)
                for (int h = 0; h < Hkv; h++) { /* a layer's block is (Hkv, B, E) */
                    size_t in = (size_t)l * B * p->kv_dim + (size_t)h * B * E;
                    size_t d = (bd + in + (size_t)od * E) * es, o = (bs + in + (size_t)os * E) * es;
                    if (sh->be) {
                        sh->be->i->copy(sh->be, k + d, k + o, bytes);
                        sh->be->i->copy(sh->be, v + d, v + o, bytes);
                    } else {
                        memcpy(k + d, k + o, bytes);
                        memcpy(v + d, v + o, bytes);
                    }
                }
        }
    }
    return 0;
}
