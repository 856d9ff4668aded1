/* draft_model.c — the separate draft model behind the drafter interface (see
 * draft_model.h): loading and pairing checks, catch-up, batched chain
 * drafting with q kept per position, commit/rollback of its cache, and its
 * cost figures. */
#include "engine/spec/proposers/draft_model.h"
#include "engine/spec/proposers/draft_tree.h"
#include "engine/util.h"
#include "kernels/clock.h"

#include "engine/errkind.h"
#include "engine/sample/gumbel.h"
#include "engine/sample/rng.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    drafter base;
    model *m;
    kv_pool *pool;
    sampler *smp;
    int max_seqs;
    float *logits;              /* (max(max_seqs, DM_CAL_ROWS), V) */
    model_seq *ms;              /* (max_seqs) */
    int *row_of;                /* (max_seqs) */
    gamma_costs c;              /* only draft_ms and draft_ms_per_row are used */
    draft_tree *trees;          /* tree scratch (draft_tree_create registers it; NULL: no trees) */
    char *path;                 /* the file (base.source) */
} draft_model;

struct drafter_seq {
    kv_seq *kv;
};

#define DM_CAL_ROWS 16

static void dm_destroy(drafter *d) {
    draft_model *dm = (draft_model *)d;
    kv_pool_destroy(dm->pool);
    model_free(dm->m);
    sampler_destroy(dm->smp);
    free(dm->logits);
    free(dm->ms);
    free(dm->row_of);
    free(dm->path);
    free(dm);
}

static drafter_seq *dm_seq_create(drafter *d, int max_len) {
    draft_model *dm = (draft_model *)d;
    drafter_seq *ds = calloc(1, sizeof(*ds));
    if (!ds) return NULL;
    if (!(ds->kv = kv_seq_create(dm->pool, max_len))) {
        free(ds);
        return NULL;
    }
    return ds;
}

static void dm_seq_destroy(drafter *d, drafter_seq *ds) {
    if (!ds) return;
    kv_seq_destroy(((draft_model *)d)->pool, ds->kv);
    free(ds);
}

/* Turns logits into the processed distribution and draws a token from it: the
 * same draw as the target's (one sampler config), keyed by RNG_DRAFT; under
 * coupled verification the Gumbel-max of q with the target's noise at pos. */
static int32_t dm_draw(draft_model *dm, const drafter_prop *p, float *logits, float *q, uint64_t pos, int j) {
    if (p->mask) p->mask(p->mask_ctx, j, p->nodes, logits); /* constrained: the same mask as the target's */
    sampler_probs(dm->smp, p->sc, logits, q);
    if (p->sc->temperature == 0.0f) return sampler_sample(q, dm->base.n_vocab, 0.0);
    if (p->coupled) return gumbel_sample(q, dm->base.n_vocab, p->seed, pos);
    return sampler_sample(q, dm->base.n_vocab, rng_uniform(p->seed, pos, RNG_DRAFT, 0));
}

/* Catch-up, then one batched call per draft position over the sequences still
 * drafting. On failure every sequence's cache is rolled back to its accepted
 * tokens. */
static int dm_propose(drafter *d, drafter_prop *P, int n, char *err, size_t errlen) {
    draft_model *dm = (draft_model *)d;
    size_t V = (size_t)d->n_vocab;
    if (n > dm->max_seqs) return util_fail(err, errlen, "draft batch of %d sequences (limit %d)", n, dm->max_seqs);
    /* long catch-ups (after plain steps) go alone; the last token joins the batch */
    for (int i = 0; i < n; i++) {
        kv_seq *kv = P[i].ds->kv;
        P[i].n_nodes = 0;
        if (P[i].budget > 0 && kv->len < P[i].n_tokens - 1 &&
            model_feed(dm->m, dm->pool, kv, P[i].tokens, kv->len, P[i].n_tokens - 1, dm->logits, err, errlen) != 0)
            goto fail;
    }
    int gmax = 0;
    for (int i = 0; i < n; i++) gmax = P[i].budget > gmax ? P[i].budget : gmax;
    for (int j = 0; j < gmax; j++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (P[i].budget <= j) continue;
            const int32_t *t = j == 0 ? &P[i].tokens[P[i].n_tokens - 1] : &P[i].nodes[j - 1].token;
            dm->ms[m] = (model_seq){.kv = P[i].ds->kv, .n = 1, .tokens = t};
            dm->row_of[m++] = i;
        }
        if (model_forward(dm->m, dm->pool, dm->ms, m, dm->logits, err, errlen) != 0) goto fail;
        for (int r = 0; r < m; r++) {
            drafter_prop *p = &P[dm->row_of[r]];
            p->nodes[j] = (drafter_node){
                .token = dm_draw(dm, p, dm->logits + (size_t)r * V, p->q + (size_t)j * V, (uint64_t)(p->n_tokens + j), j),
                .parent = (int16_t)(j - 1)};
            p->n_nodes = j + 1;
        }
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) {
        P[i].n_nodes = 0;
        if (P[i].ds->kv->len > P[i].n_tokens - 1) kv_seq_truncate(dm->pool, P[i].ds->kv, P[i].n_tokens - 1);
    }
    return -1;
}

static void dm_commit(drafter *d, drafter_seq *ds, const int32_t *tokens, int accepted_len) {
    (void)tokens;
    if (ds->kv->len > accepted_len) kv_seq_truncate(((draft_model *)d)->pool, ds->kv, accepted_len);
}

static int dm_state_len(drafter *d, drafter_seq *ds) {
    (void)d;
    return ds->kv->len;
}

static int dm_prefix_attach(drafter *d, drafter_seq *ds, const int32_t *tokens, int n, int max_len) {
    return kv_seq_attach(((draft_model *)d)->pool, ds->kv, tokens, n, max_len);
}

static void dm_prefix_publish(drafter *d, drafter_seq *ds, const int32_t *tokens, int n) {
    kv_seq_publish(((draft_model *)d)->pool, ds->kv, tokens, n);
}

static void dm_cost(drafter *d, double *node_ms, double *per_row_ms) {
    draft_model *dm = (draft_model *)d;
    *node_ms = dm->c.draft_ms;
    *per_row_ms = dm->c.draft_ms_per_row;
}

static void dm_calibrate(drafter *d) {
    draft_model *dm = (draft_model *)d;
    int dn[2] = {1, 9}, dp[2] = {GAMMA_CAL_CTX, GAMMA_CAL_CTX};
    double t[2];
    model_time_calls(dm->m, dm->pool, GAMMA_CAL_CTX, dn, dp, 2, t, dm->logits);
    dm->c.draft_ms = t[0];
    dm->c.draft_ms_per_row = t[1] > t[0] ? (t[1] - t[0]) / 8 : 0.0;
}

/* The step's draft time over its longest chain: what one draft position of
 * the batch cost. */
static void dm_observe(drafter *d, int nodes, int rows, double ms) {
    (void)rows;
    if (nodes > 0) gamma_costs_observe_draft(&((draft_model *)d)->c, ms / nodes);
}

/* Trees grown level by level, one batched draft forward per depth over all
 * n sequences (draft_tree.h); each sequence's share of the time is its
 * nodes' (the draft rows it needed). Without tree scratch: no trees. */
static int dm_propose_tree(drafter *d, drafter_tree_prop *props, int n, char *err, size_t errlen) {
    draft_model *dm = (draft_model *)d;
    spec_seq *S[64];
    tree_shape sh[64];
    drafter_tree out[64];
    int who[64], m = 0;
    if (n > 64) return util_fail(err, errlen, "tree batch of %d (limit 64)", n);
    for (int i = 0; i < n; i++) {
        props[i].tree = (drafter_tree){0};
        props[i].draft_ms = 0;
        if (!props[i].ds) continue; /* no draft cache: no tree */
        S[m] = props[i].s;
        sh[m] = (tree_shape){props[i].budget, props[i].depth, props[i].topk};
        who[m++] = i;
    }
    if (!dm->trees || !m) return 0;
    double a = clock_now_ms();
    if (draft_tree_propose(dm->trees, S, m, sh, out, err, errlen) != 0) return -1;
    double ms = clock_now_ms() - a;
    int nodes = 0;
    for (int k = 0; k < m; k++) nodes += out[k].n_nodes;
    for (int k = 0; k < m; k++) {
        props[who[k]].tree = out[k];
        props[who[k]].draft_ms = nodes > 0 ? ms * out[k].n_nodes / nodes : ms / m;
    }
    return 0;
}

/* The pool and scratch, once the pair is sized (drafter_i reserve). */
static int dm_reserve(drafter *d, int block_size, int blocks, int max_seqs, engine_status *st, char *err,
                      size_t errlen) {
    draft_model *dm = (draft_model *)d;
    if (!(dm->pool = model_kv_pool(dm->m, block_size, blocks, st, err, errlen))) return -1;
    dm->max_seqs = max_seqs;
    size_t rows = (size_t)(max_seqs > DM_CAL_ROWS ? max_seqs : DM_CAL_ROWS);
    dm->smp = sampler_create(d->n_vocab);
    dm->logits = malloc(sizeof(float) * (size_t)d->n_vocab * rows);
    dm->ms = malloc(sizeof(model_seq) * (size_t)max_seqs);
    dm->row_of = malloc(sizeof(int) * (size_t)max_seqs);
    if (!dm->smp || !dm->logits || !dm->ms || !dm->row_of)
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: draft scratch of %zu rows", rows);
    engine_status_set(st, ENGINE_OK);
    return 0;
}

static model *dm_model(drafter *d) { return ((draft_model *)d)->m; }
static kv_pool *dm_kv_pool(drafter *d) { return ((draft_model *)d)->pool; }
static kv_seq *dm_seq_kv(drafter *d, drafter_seq *ds) {
    (void)d;
    return ds ? ds->kv : NULL;
}

static const drafter_i draft_model_i = {
    .version = DRAFTER_INTERFACE_VERSION,
    .name = "draft",
    .needs_hidden = false,
    .destroy = dm_destroy,
    .seq_create = dm_seq_create,
    .seq_destroy = dm_seq_destroy,
    .available = NULL,
    .propose = dm_propose,
    .commit = dm_commit,
    .state_len = dm_state_len,
    .cost = dm_cost,
    .calibrate = dm_calibrate,
    .observe = dm_observe,
    .prefix_attach = dm_prefix_attach,
    .prefix_publish = dm_prefix_publish,
    .propose_tree = dm_propose_tree,
    .model = dm_model,
    .reserve = dm_reserve,
    .kv_pool = dm_kv_pool,
    .seq_kv = dm_seq_kv,
};

drafter *draft_model_load(const char *path, backend *be, int max_ctx, kv_type kv, const tokenizer *target_tok,
                          int n_vocab, engine_status *st, char *err, size_t errlen) {
    char sub[640];
    draft_model *dm = calloc(1, sizeof(*dm));
    if (!dm) return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: draft drafter"), NULL;
    dm->base.i = &draft_model_i;
    dm->base.n_vocab = n_vocab;
    if (!(dm->path = strdup(path))) {
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: draft drafter");
        goto fail;
    }
    dm->base.source = dm->path;
    model_params mp = {.max_batch = 512, .max_ctx = max_ctx, .kv = kv};
    if (!(dm->m = model_load(path, be, &mp, st, err, errlen))) goto fail;
    tokenizer *dt = tok_create(dm->m->gguf, sub, sizeof(sub));
    if (!dt) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "draft %s: %s", path, sub);
        goto fail;
    }
    int diff = tok_compare(target_tok, dt, sub, sizeof(sub));
    tok_destroy(dt);
    if (diff != 0) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "draft %s refused: its tokenizer differs from the "
                     "target's (%s); draft and target must share one vocabulary", path, sub);
        goto fail;
    }
    if (dm->m->hp.n_vocab != n_vocab) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "draft %s refused: vocabulary %d vs target %d", path,
                     dm->m->hp.n_vocab, n_vocab);
        goto fail;
    }
    engine_status_set(st, ENGINE_OK);
    return &dm->base;
fail:
    dm_destroy(&dm->base);
    return NULL;
}

model *draft_model_model(drafter *d) { return d && d->i == &draft_model_i ? ((draft_model *)d)->m : NULL; }
kv_pool *draft_model_pool(drafter *d) { return d && d->i == &draft_model_i ? ((draft_model *)d)->pool : NULL; }
kv_seq *draft_model_kv(drafter_seq *ds) { return ds ? ds->kv : NULL; }

void draft_model_set_trees(drafter *d, draft_tree *dt) {
    if (d && d->i == &draft_model_i) ((draft_model *)d)->trees = dt;
}
