/* draft_eagle.c — an EAGLE-3 head behind the drafter interface (see
 * draft_eagle.h): loading and the checks against the target, the features
 * each step commits, catch-up, batched chain and tree drafting from the
 * head's own features, commit/rollback of its cache. */
#include "engine/spec/proposers/draft_eagle.h"
#include "engine/spec/proposers/draft_tree.h"
#include "engine/util.h"

#include "engine/sample/gumbel.h"
#include "engine/sample/rng.h"
#include "kernels/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EAGLE_LAYERS 3

typedef struct {
    drafter base;
    model *m;                   /* the head (eagle3); tap 0 = its final residual */
    kv_pool *pool;
    sampler *smp;
    int D, V, Vd, max_seqs;
    int layers[EAGLE_LAYERS];   /* the target layers it reads */
    int32_t *d2t;               /* (Vd) target id of each draft id */
    float *logits;              /* (max_seqs, Vd) */
    float *lv;                  /* (V) one row's logits over the target's vocabulary */
    float *h;                   /* (max_seqs, D) each drafting sequence's own feature */
    model_seq *ms;              /* (max_seqs) */
    int *row_of, *last;         /* (max_seqs) the sequence of each call row; its last input row */
    gamma_costs c;              /* draft_ms and draft_ms_per_row */
    double prefill_ms;          /* this proposal's long catch-ups (a prompt's rows, a swapped-in head's):
                                 * a one-time cost per sequence, kept out of the per-node estimate */
    /* trees (ea_propose_tree); TB = min(max_seqs * DRAFTER_MAX_NODES, the head's batch) rows a level call holds */
    int max_ctx, tb;            /* the pair's context; TB */
    float *tq;                  /* (max_seqs, DRAFTER_MAX_NODES, V) q rows of the proposed nodes */
    float *tlv, *tfq;           /* (TR, V) one sequence's frontier logits over the target's vocabulary; its q */
    float *tlg;                 /* (TB, Vd) a level call's logits */
    float *hn;                  /* (max_seqs, TR, D) the head's own feature after the root (row 0) and node c (1 + c) */
    float *tfeat;               /* (TB, D) a level call's input features: each row's parent's */
    int32_t *ttok, *tpos;       /* (TB) a level call's tokens and RoPE positions */
    int *trow;                  /* (TB) output rows to read back */
    uint8_t *tmask;             /* (max_seqs, DRAFTER_MAX_NODES, DRAFTER_MAX_NODES) ancestor masks */
} eagle;

#define TR (DRAFTER_MAX_NODES + 1)

struct drafter_seq {
    kv_seq *kv;                 /* head rows [0, hc) committed, draft rows after them until commit */
    int hc;
    float *pend;                /* (cap, 3D) the target's features of positions [hc, hc + np) */
    int np, cap;
    bool gap;                   /* a position's features never came: nothing to propose until a reset */
};

static void ea_destroy(drafter *d) {
    eagle *e = (eagle *)d;
    kv_pool_destroy(e->pool);
    model_free(e->m);
    sampler_destroy(e->smp);
    free(e->d2t), free(e->logits), free(e->lv), free(e->h), free(e->ms), free(e->row_of), free(e->last);
    free(e->tq), free(e->tlv), free(e->tfq), free(e->tlg), free(e->hn), free(e->tfeat), free(e->ttok), free(e->tpos);
    free(e->trow), free(e->tmask);
    free(e);
}

static drafter_seq *ea_seq_create(drafter *d, int max_len) {
    eagle *e = (eagle *)d;
    drafter_seq *ds = calloc(1, sizeof(*ds));
    if (!ds || !(ds->kv = kv_seq_create(e->pool, max_len))) {
        free(ds);
        return NULL;
    }
    return ds;
}

static void ea_seq_destroy(drafter *d, drafter_seq *ds) {
    if (!ds) return;
    kv_seq_destroy(((eagle *)d)->pool, ds->kv);
    free(ds->pend);
    free(ds);
}

static void ea_observe_features(drafter *d, drafter_seq *ds, const float *feat, int pos0, int n) {
    size_t F = (size_t)EAGLE_LAYERS * (size_t)((eagle *)d)->D;
    if (ds->gap) return;
    if (pos0 > ds->hc + ds->np) { /* a position without features (a re-prefill after a cache reset) */
        ds->gap = true;
        return;
    }
    if (pos0 < ds->hc) { /* already in the cache */
        int skip = ds->hc - pos0;
        if (skip >= n) return;
        feat += (size_t)skip * F, pos0 += skip, n -= skip;
    }
    ds->np = pos0 - ds->hc; /* from pos0 on: these rows replace any older ones */
    if (ds->np + n > ds->cap) {
        int cap = ds->cap ? ds->cap : 64;
        while (cap < ds->np + n) cap *= 2;
        float *p = realloc(ds->pend, sizeof(float) * (size_t)cap * F);
        if (!p) { /* out of memory: give up on this sequence, decode plainly */
            ds->gap = true;
            return;
        }
        ds->pend = p, ds->cap = cap;
    }
    memcpy(ds->pend + (size_t)ds->np * F, feat, sizeof(float) * (size_t)n * F);
    ds->np += n;
}

/* Head row i needs tokens[i + 1]: with accepted_len tokens, rows [0,
 * accepted_len − 1) stay and features of positions up to accepted_len − 2. */
static void ea_commit(drafter *d, drafter_seq *ds, const int32_t *tokens, int accepted_len) {
    (void)tokens;
    eagle *e = (eagle *)d;
    if (accepted_len == 0) {
        ds->hc = ds->np = 0;
        ds->gap = false;
    } else {
        int keep = accepted_len - 1;
        if (ds->hc > keep) ds->hc = keep, ds->np = 0;
        else if (ds->hc + ds->np > keep) ds->np = keep - ds->hc;
    }
    if (ds->kv->len > ds->hc) kv_seq_truncate(e->pool, ds->kv, ds->hc);
}

static int ea_available(drafter *d, drafter_seq *ds, const int32_t *tokens, int n_tokens) {
    (void)d, (void)tokens;
    return !ds->gap && n_tokens >= 2 && ds->hc + ds->np >= n_tokens - 1 ? GAMMA_MAX : 0;
}

static int ea_state_len(drafter *d, drafter_seq *ds) {
    (void)d;
    return ds->kv->len;
}

/* A head row's logits lg (Vd) over the target's vocabulary in lv (V): the
 * draft vocabulary through d2t, every other token impossible. */
static void ea_map(const eagle *e, const float *lg, float *lv) {
    for (int v = 0; v < e->V; v++) lv[v] = -INFINITY;
    for (int i = 0; i < e->Vd; i++) lv[e->d2t[i]] = lg[i];
}

/* The draft's distribution over the target's vocabulary and its draw: the
 * same draw as the target's (one sampler config), keyed by RNG_DRAFT, or the
 * Gumbel-max of q with the target's noise under coupled verification. */
static int32_t ea_draw(eagle *e, const drafter_prop *p, const float *lg, float *q, uint64_t pos, int j) {
    ea_map(e, lg, e->lv);
    if (p->mask) p->mask(p->mask_ctx, j, p->nodes, e->lv);
    sampler_probs(e->smp, p->sc, e->lv, q);
    if (p->sc->temperature == 0.0f) return sampler_sample(q, e->V, 0.0);
    if (p->coupled) return gumbel_sample(q, e->V, p->seed, pos);
    return sampler_sample(q, e->V, rng_uniform(p->seed, pos, RNG_DRAFT, 0));
}

/* Catch-up of m sequences (ds[r], accepted tokens tk[r][0, nt[r])): rows
 * (tokens[i + 1], target features of i) for i from hc to n − 2 in one
 * batched call (long ones alone first, in pieces). The last row stays
 * uncommitted (hc = n − 2, its features kept), so a step that changes
 * nothing still finds a row to start from. Afterwards e->logits row r is
 * sequence r's last row's logits (Vd) and e->h row r its final residual,
 * the feature the drafts after it start from; each kv holds hc + 1 rows.
 * On failure the caller takes the rows back (kv to hc). */
static int ea_catch_up(eagle *e, drafter_seq *const *ds, const int32_t *const *tk, const int *nt, int m, char *err,
                       size_t errlen) {
    size_t D = (size_t)e->D, F = EAGLE_LAYERS * D;
    int MB = e->m->mp.max_batch, rows = 0;
    for (int r = 0; r < m; r++) {
        drafter_seq *s = ds[r];
        int c = nt[r] - 1 - s->hc; /* rows to feed: positions hc .. n-2 */
        /* a long catch-up (a prompt, more rows than a step commits) goes alone in pieces, all but its last
         * row, timed apart: it is the head's prefill, paid once, not a cost of each draft */
        while (c > 1 && (c > MB || rows + c > MB || c > GAMMA_MAX + 2)) {
            int k = c - 1 < MB ? c - 1 : MB;
            double t0 = clock_now_ms();
            model_seq one = {.kv = s->kv, .n = k, .tokens = tk[r] + s->hc + 1, .feat = s->pend, .feat_fc = true};
            if (model_forward(e->m, e->pool, &one, 1, e->logits, err, errlen) != 0) return -1;
            s->hc += k, s->np -= k, c -= k;
            memmove(s->pend, s->pend + (size_t)k * F, sizeof(float) * (size_t)s->np * F);
            e->prefill_ms += clock_now_ms() - t0;
        }
        e->ms[r] = (model_seq){.kv = s->kv, .n = c, .tokens = tk[r] + s->hc + 1, .feat = s->pend, .feat_fc = true};
        rows += c;
        e->last[r] = rows - 1;
    }
    if (model_forward(e->m, e->pool, e->ms, m, e->logits, err, errlen) != 0) return -1;
    for (int r = 0; r < m; r++) {
        drafter_seq *s = ds[r];
        int c = e->ms[r].n;
        /* committed: all but the last row, whose features stay for the next catch-up */
        s->hc += c - 1, s->np -= c - 1;
        memmove(s->pend, s->pend + (size_t)(c - 1) * F, sizeof(float) * (size_t)s->np * F);
    }
    if (model_tap_rows(e->m, 0, e->h, e->last, m) != 0) return util_fail(err, errlen, "eagle head: no final residual");
    return 0;
}

/* The catch-up (ea_catch_up), whose last rows give draft 1; then one call
 * per further draft over the sequences still drafting, each row (its last
 * draft, the head's own feature). On failure every cache is back at its
 * committed rows. */
static int ea_propose(drafter *d, drafter_prop *P, int n, char *err, size_t errlen) {
    eagle *e = (eagle *)d;
    size_t V = (size_t)e->V, D = (size_t)e->D;
    if (n > e->max_seqs) return util_fail(err, errlen, "eagle batch of %d sequences (limit %d)", n, e->max_seqs);
    drafter_seq *dsv[64];
    const int32_t *tkv[64];
    int ntv[64], m = 0;
    if (n > 64) return util_fail(err, errlen, "eagle batch of %d sequences (limit 64)", n);
    for (int i = 0; i < n; i++) {
        drafter_prop *p = &P[i];
        p->n_nodes = 0;
        if (p->budget <= 0 || !p->ds || !ea_available(d, p->ds, p->tokens, p->n_tokens)) continue;
        dsv[m] = p->ds, tkv[m] = p->tokens, ntv[m] = p->n_tokens;
        e->row_of[m++] = i;
    }
    if (!m) return 0;
    e->prefill_ms = 0;
    if (ea_catch_up(e, dsv, tkv, ntv, m, err, errlen) != 0) goto fail;
    for (int r = 0; r < m; r++) {
        drafter_prop *p = &P[e->row_of[r]];
        p->nodes[0] = (drafter_node){ea_draw(e, p, e->logits + (size_t)r * (size_t)e->Vd, p->q, (uint64_t)p->n_tokens, 0), -1,
                                     false};
        p->n_nodes = 1;
    }
    /* draft j + 1 from row (draft j, the head's own feature); e->last maps a call row to its r */
    for (int j = 1;; j++) {
        int k = 0;
        for (int r = 0; r < m; r++) {
            drafter_prop *p = &P[e->row_of[r]];
            if (p->budget <= j) continue;
            e->ms[k] = (model_seq){.kv = p->ds->kv, .n = 1, .tokens = &p->nodes[j - 1].token, .feat = e->h + (size_t)r * D};
            e->last[k++] = r;
        }
        if (!k) break;
        if (model_forward(e->m, e->pool, e->ms, k, e->logits, err, errlen) != 0) goto fail;
        for (int q = 0; q < k; q++) {
            int r = e->last[q];
            drafter_prop *p = &P[e->row_of[r]];
            if (model_tap_rows(e->m, 0, e->h + (size_t)r * D, &q, 1) != 0) {
                util_fail(err, errlen, "eagle head: no final residual");
                goto fail;
            }
            p->nodes[j] = (drafter_node){ea_draw(e, p, e->logits + (size_t)q * (size_t)e->Vd, p->q + (size_t)j * V,
                                                 (uint64_t)(p->n_tokens + j), j),
                                         (int16_t)(j - 1), false};
            p->n_nodes = j + 1;
        }
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) {
        P[i].n_nodes = 0;
        if (P[i].ds->kv->len > P[i].ds->hc) kv_seq_truncate(e->pool, P[i].ds->kv, P[i].ds->hc);
    }
    return -1;
}

/* ---- trees (EAGLE-2) ---------------------------------------------------- */

/* One level call over the sequences who[0, k) (their tree rows laid out
 * from row 0 of the ttok/tpos/tfeat scratch in that order, e->ms[0, k)):
 * the forward, then for each sequence its frontier's logits and features
 * (the frontier nodes' rows) and the level's growth (draft_tree.h). */
static int ea_level(eagle *e, drafter_tree_prop *P, tree_grow *g, const int *who, int k, int level, char *err,
                    size_t errlen) {
    size_t V = (size_t)e->V, Vd = (size_t)e->Vd, D = (size_t)e->D;
    if (model_forward(e->m, e->pool, e->ms, k, e->tlg, err, errlen) != 0) return -1;
    int base = 0;
    for (int r = 0; r < k; r++) {
        int i = who[r];
        tree_grow *gi = &g[i];
        float *lr[TR];
        for (int f = 0; f < gi->nf; f++) {
            e->trow[f] = base + gi->fr[f]; /* node c is row c of its sequence's part */
            lr[f] = e->tlv + (size_t)f * V;
            ea_map(e, e->tlg + (size_t)e->trow[f] * Vd, lr[f]);
        }
        float *hs = e->hn + (size_t)i * TR * D;
        for (int f = 0; f < gi->nf; f++)
            if (model_tap_rows(e->m, 0, hs + (size_t)(1 + gi->fr[f]) * D, &e->trow[f], 1) != 0)
                return util_fail(err, errlen, "eagle head: no final residual");
        tree_grow_level(gi, &P[i].tree, e->tq + (size_t)i * DRAFTER_MAX_NODES * V, P[i].s, e->smp, lr, e->tfq,
                        &(tree_shape){P[i].budget, P[i].depth, P[i].topk}, level, e->V);
        base += e->ms[r].n;
    }
    return 0;
}

/* Trees grown level by level as the draft model grows them (draft_tree.h:
 * the budget to the highest path probabilities, children without
 * replacement when sampling), one batched head forward per depth: level 1
 * is the catch-up, whose last row (the root) gives the root's children and
 * the root's feature; each later level re-feeds the whole tree so far under
 * its ancestor mask after the root row (cached rows are visible to every
 * later row, so the previous level's rows are taken back first), node c's
 * row being (its token, its parent's output feature) at RoPE position
 * hc + depth — for a one-child tree exactly the chain's rows. Afterwards,
 * and on failure, every cache is back at its committed rows. */
static int ea_propose_tree(drafter *d, drafter_tree_prop *P, int n, char *err, size_t errlen) {
    eagle *e = (eagle *)d;
    size_t V = (size_t)e->V, D = (size_t)e->D, N = DRAFTER_MAX_NODES;
    if (n > e->max_seqs || n > 64) return util_fail(err, errlen, "eagle tree batch of %d (limit %d)", n,
                                                    e->max_seqs < 64 ? e->max_seqs : 64);
    tree_grow g[64];
    drafter_seq *dsv[64];
    const int32_t *tkv[64];
    int ntv[64], who[64], m = 0, max_depth = 0;
    for (int i = 0; i < n; i++) {
        drafter_tree_prop *p = &P[i];
        p->tree = (drafter_tree){0};
        p->draft_ms = 0;
        g[i].nf = 0;
        if (p->budget == 0 || !p->ds) continue; /* no tree for this one */
        if (p->budget < 0 || p->budget > DRAFTER_MAX_NODES || p->depth < 1 || p->topk < 1)
            return util_fail(err, errlen, "tree shape budget %d depth %d topk %d", p->budget, p->depth, p->topk);
        if (!p->ds || !ea_available(d, p->ds, p->s->tokens, p->s->n_tokens)) continue; /* no state, or features not whole: none */
        tree_grow_start(&g[i], &p->tree, e->tq + (size_t)i * N * V, p->s, &(tree_shape){p->budget, p->depth, p->topk},
                        e->max_ctx);
        if (!g[i].nf) continue;
        dsv[m] = p->ds, tkv[m] = p->s->tokens, ntv[m] = p->s->n_tokens;
        who[m++] = i;
        if (p->depth > max_depth) max_depth = p->depth;
    }
    if (!m) return 0;
    double t0 = clock_now_ms();
    e->prefill_ms = 0;
    if (ea_catch_up(e, dsv, tkv, ntv, m, err, errlen) != 0) goto fail;
    for (int r = 0; r < m; r++) { /* level 1: the root's children */
        int i = who[r];
        float *lr[1] = {e->tlv};
        memcpy(e->hn + (size_t)i * TR * D, e->h + (size_t)r * D, sizeof(float) * D);
        ea_map(e, e->logits + (size_t)r * (size_t)e->Vd, e->tlv);
        tree_grow_level(&g[i], &P[i].tree, e->tq + (size_t)i * N * V, P[i].s, e->smp, lr, e->tfq,
                        &(tree_shape){P[i].budget, P[i].depth, P[i].topk}, 1, e->V);
    }
    for (int level = 2; level <= max_depth; level++) {
        int k = 0, rows = 0, grp[64];
        for (int i = 0; i < n; i++) {
            drafter_tree_prop *p = &P[i];
            if (!tree_grow_wants(&g[i], &p->tree, &(tree_shape){p->budget, p->depth, p->topk}, level)) continue;
            drafter_seq *s = p->ds;
            const drafter_node *nd = p->tree.nodes;
            int R = p->tree.n_nodes, dep[DRAFTER_MAX_NODES];
            if (rows + R > e->tb) { /* the call is full: run it first */
                if (ea_level(e, P, g, grp, k, level, err, errlen) != 0) goto fail;
                k = rows = 0;
            }
            kv_seq_truncate(e->pool, s->kv, s->hc + 1); /* the root row stays */
            uint8_t *mk = e->tmask + (size_t)i * N * N;
            memset(mk, 0, (size_t)R * (size_t)R);
            const float *hs = e->hn + (size_t)i * TR * D;
            for (int c = 0; c < R; c++) {
                dep[c] = nd[c].parent < 0 ? 1 : dep[nd[c].parent] + 1;
                e->ttok[rows + c] = nd[c].token;
                e->tpos[rows + c] = s->hc + dep[c];
                memcpy(e->tfeat + (size_t)(rows + c) * D, hs + (size_t)(1 + nd[c].parent) * D, sizeof(float) * D);
                for (int a = c; a >= 0; a = nd[a].parent) mk[(size_t)c * (size_t)R + (size_t)a] = 1;
            }
            e->ms[k] = (model_seq){.kv = s->kv, .n = R, .tokens = e->ttok + rows, .pos = e->tpos + rows, .mask = mk,
                                   .all_logits = true, .feat = e->tfeat + (size_t)rows * D};
            grp[k++] = i;
            rows += R;
        }
        if (k && ea_level(e, P, g, grp, k, level, err, errlen) != 0) goto fail;
    }
    double ms = clock_now_ms() - t0 - e->prefill_ms; /* the trees' own cost (a prompt's catch-up apart) */
    if (ms < 0) ms = 0;
    int nodes = 0;
    for (int r = 0; r < m; r++) nodes += P[who[r]].tree.n_nodes;
    for (int r = 0; r < m; r++) {
        drafter_tree_prop *p = &P[who[r]];
        if (p->ds->kv->len > p->ds->hc) kv_seq_truncate(e->pool, p->ds->kv, p->ds->hc); /* the tree's rows back */
        p->draft_ms = nodes > 0 ? ms * p->tree.n_nodes / nodes : ms / m;
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) {
        P[i].tree.n_nodes = 0;
        if (P[i].ds && P[i].ds->kv->len > P[i].ds->hc) kv_seq_truncate(e->pool, P[i].ds->kv, P[i].ds->hc);
    }
    return -1;
}

static void ea_cost(drafter *d, double *node_ms, double *per_row_ms) {
    eagle *e = (eagle *)d;
    *node_ms = e->c.draft_ms;
    *per_row_ms = e->c.draft_ms_per_row;
}

static void ea_observe(drafter *d, int nodes, int rows, double ms) {
    (void)rows;
    eagle *e = (eagle *)d;
    ms -= e->prefill_ms; /* a prompt's catch-up is the head's prefill: it would make every draft look dear */
    e->prefill_ms = 0;
    if (nodes > 0 && ms > 0) gamma_costs_observe_draft(&e->c, ms / nodes);
}

static int ea_feature_layers(drafter *d, int *layers) {
    memcpy(layers, ((eagle *)d)->layers, sizeof(int) * EAGLE_LAYERS);
    return EAGLE_LAYERS;
}

static const drafter_i eagle_i = {
    .version = DRAFTER_INTERFACE_VERSION,
    .name = "eagle",
    .destroy = ea_destroy,
    .seq_create = ea_seq_create,
    .seq_destroy = ea_seq_destroy,
    .available = ea_available,
    .propose = ea_propose,
    .propose_tree = ea_propose_tree,
    .commit = ea_commit,
    .state_len = ea_state_len,
    .cost = ea_cost,
    .observe = ea_observe,
    .feature_layers = ea_feature_layers,
    .observe_features = ea_observe_features,
};

int draft_eagle_layers(const drafter *d, int *layers) {
    if (!d || d->i != &eagle_i) return 0;
    memcpy(layers, ((const eagle *)d)->layers, sizeof(int) * EAGLE_LAYERS);
    return EAGLE_LAYERS;
}

/* The target layers: eagle3.target_layers (specd's) or eagle3.extract_layers
 * (llama.cpp's, i32: its target graph taps the residual entering each listed
 * layer too, so the numbers mean the same), else the reference code's 2, L/2,
 * L - 3. specd's own key is clamped into 0..L as before; llama.cpp's must be
 * three layers of this target. */
static int ea_target_layers(eagle *e, int L, const char *path, engine_status *st, char *err, size_t errlen) {
    const gguf_file *f = e->m->gguf;
    const gguf_kv *tl = gguf_get_arr(f, "eagle3.target_layers", GGUF_TYPE_UINT32);
    bool lcpp = false;
    if (!tl && gguf_find(f, "eagle3.extract_layers")) {
        lcpp = true;
        tl = gguf_get_arr(f, "eagle3.extract_layers", GGUF_TYPE_INT32);
        if (!tl) tl = gguf_get_arr(f, "eagle3.extract_layers", GGUF_TYPE_UINT32);
        if (!tl || tl->arr_n != EAGLE_LAYERS)
            return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s: eagle3.extract_layers must be %d "
                                "integers (specd's heads fuse three target layers)", path, EAGLE_LAYERS), -1;
    }
    int def[EAGLE_LAYERS] = {2, L / 2, L - 3};
    for (int j = 0; j < EAGLE_LAYERS; j++) {
        int32_t v = def[j];
        if (tl && tl->arr_n == EAGLE_LAYERS) memcpy(&v, (const uint8_t *)tl->arr_data + 4 * (size_t)j, 4); /* unaligned */
        if (lcpp && (v < 0 || v > L))
            return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s refused: it reads target layer %d "
                                "(eagle3.extract_layers); the loaded target has %d layers", path, (int)v, L), -1;
        e->layers[j] = v < 0 ? 0 : v > L ? L : (int)v;
    }
    return 0;
}

/* d2t, the target id of each draft id: specd's "d2t" (I32) and llama.cpp's
 * (I64) hold the ids themselves; "d2t.weight" (as some llama.cpp forks write
 * it, the checkpoint's table kept raw) holds offsets, id = draft id + d2t.
 * Absent: the identity, when the vocabularies are the same. */
static int ea_d2t(eagle *e, const char *path, engine_status *st, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(e->m->gguf, "d2t");
    bool offsets = !t && (t = gguf_find_tensor(e->m->gguf, "d2t.weight")) != NULL;
    if (!(e->d2t = malloc(sizeof(int32_t) * (size_t)e->Vd)))
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: eagle proposer scratch"), -1;
    if (!t) {
        if (e->Vd != e->V)
            return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s: a draft vocabulary of %d < %d "
                                "needs d2t", path, e->Vd, e->V), -1;
        for (int i = 0; i < e->Vd; i++) e->d2t[i] = i;
        return 0;
    }
    if ((t->type != GGML_TYPE_I32 && t->type != GGML_TYPE_I64) || t->ne[0] != (uint64_t)e->Vd || t->ne[1] != 1)
        return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s: d2t must be %d int32 or int64", path,
                            e->Vd), -1;
    uint8_t *seen = calloc((size_t)e->V, 1);
    if (!seen) return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: eagle proposer scratch"), -1;
    for (int i = 0; i < e->Vd; i++) {
        int64_t v;
        if (t->type == GGML_TYPE_I64) {
            memcpy(&v, (const uint8_t *)t->data + 8 * (size_t)i, 8);
        } else {
            int32_t v32;
            memcpy(&v32, (const uint8_t *)t->data + 4 * (size_t)i, 4);
            v = v32;
        }
        if (offsets) v += i;
        if (v < 0 || v >= e->V || seen[v]) {
            free(seen);
            return util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s: d2t[%d] %s", path, i,
                                v < 0 || v >= e->V ? "is outside the vocabulary" : "repeats a target id"), -1;
        }
        seen[v] = 1;
        e->d2t[i] = (int32_t)v;
    }
    free(seen);
    return 0;
}

drafter *draft_eagle_load(spec_pair *sp, const char *path, int blocks, engine_status *st, char *err, size_t errlen) {
    eagle *e = calloc(1, sizeof(*e));
    if (!e) return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: eagle proposer"), NULL;
    e->base.i = &eagle_i;
    e->base.n_vocab = e->V = sp->n_vocab;
    e->max_seqs = sp->max_seqs;
    char sub[512];
    model_params mp = {.max_batch = 512, .max_ctx = sp->max_ctx + GAMMA_MAX + 2, .kv = sp->target->mp.kv};
    const model_hparams *th = &sp->target->hp;
    if (!(e->m = model_load_eagle3(path, sp->target, &mp, st, err, errlen))) goto fail_quiet;
    const model_hparams *hp = &e->m->hp;
    e->D = hp->dim, e->Vd = hp->n_vocab;
    if (!hp->eagle3) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "%s is a %s model, not an eagle3 head", path, e->m->arch);
        goto fail_quiet;
    }
    if (hp->dim != th->dim || hp->n_vocab_in != sp->n_vocab) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s is for a target of hidden size %d and %d "
                     "tokens; the loaded target has %d and %d", path, hp->dim, hp->n_vocab_in, th->dim, sp->n_vocab);
        goto fail_quiet;
    }
    if (gguf_get_arr(e->m->gguf, "tokenizer.ggml.tokens", GGUF_TYPE_STRING)) { /* a converted head carries it */
        tokenizer *ht = tok_create(e->m->gguf, sub, sizeof(sub));
        int diff = ht ? tok_compare(sp->tok, ht, sub, sizeof(sub)) : -1;
        tok_destroy(ht);
        if (diff != 0) {
            util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "eagle head %s refused: its tokenizer differs from the "
                         "target's (%s)", path, sub);
            goto fail_quiet;
        }
    }
    if (ea_target_layers(e, th->n_layer, path, st, err, errlen) || ea_d2t(e, path, st, err, errlen)) goto fail_quiet;
    int one = hp->n_layer;
    if (model_set_taps(e->m, &one, 1) != 0) goto oom;
    if (blocks <= 0) blocks = sp->max_seqs * ((mp.max_ctx + 15) / 16 + 1);
    if (!(e->pool = model_kv_pool(e->m, 16, blocks, st, err, errlen))) goto fail_quiet;
    size_t S = (size_t)sp->max_seqs;
    e->smp = sampler_create(e->V);
    e->logits = malloc(sizeof(float) * S * (size_t)e->Vd);
    e->lv = malloc(sizeof(float) * (size_t)e->V);
    e->h = malloc(sizeof(float) * S * (size_t)e->D);
    e->ms = malloc(sizeof(model_seq) * S);
    e->row_of = malloc(sizeof(int) * S);
    e->last = malloc(sizeof(int) * S);
    if (!e->smp || !e->logits || !e->lv || !e->h || !e->ms || !e->row_of || !e->last) goto oom;
    size_t N = DRAFTER_MAX_NODES, V = (size_t)e->V, TB = S * N < (size_t)mp.max_batch ? S * N : (size_t)mp.max_batch;
    e->max_ctx = sp->max_ctx, e->tb = (int)TB;
    e->tq = malloc(sizeof(float) * S * N * V);
    e->tlv = malloc(sizeof(float) * TR * V);
    e->tfq = malloc(sizeof(float) * TR * V);
    e->tlg = malloc(sizeof(float) * TB * (size_t)e->Vd);
    e->hn = malloc(sizeof(float) * S * TR * (size_t)e->D);
    e->tfeat = malloc(sizeof(float) * TB * (size_t)e->D);
    e->ttok = malloc(sizeof(int32_t) * TB);
    e->tpos = malloc(sizeof(int32_t) * TB);
    e->trow = malloc(sizeof(int) * TR);
    e->tmask = malloc(S * N * N);
    if (!e->tq || !e->tlv || !e->tfq || !e->tlg || !e->hn || !e->tfeat || !e->ttok || !e->tpos || !e->trow || !e->tmask)
        goto oom;
    e->c.draft_ms = 0.05, e->c.draft_ms_per_row = 0.01; /* refined by observe() from the first proposals */
    engine_status_set(st, ENGINE_OK);
    return &e->base;
oom:
    util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: eagle proposer scratch");
fail_quiet:
    ea_destroy(&e->base);
    return NULL;
}
