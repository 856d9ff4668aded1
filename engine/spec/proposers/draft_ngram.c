/* draft_ngram.c — prompt-lookup (n-gram) drafting behind the drafter
 * interface (see draft_ngram.h for the index). */
#include "engine/spec/proposers/draft_ngram.h"

#include "engine/spec/gamma.h"
#include "engine/spec/proposers/draft_tree.h"
#include "kernels/clock.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    drafter base;
    int nmin, nmax;
    gamma_costs c;              /* only draft_ms is used: measured propose time per node */
} ngram;

struct drafter_seq {
    int max_len;
    uint32_t mask;              /* table slots - 1 */
    int32_t *slot;              /* (nmax - nmin + 1, mask + 1) end position + 1 of an n-gram, 0 = empty */
    int next_end;               /* the next end position to index (all ends < next_end are in) */
    /* the last lookup, reused by propose when the tokens have not changed */
    int cached_n_tokens, cached_e, cached_n;
};

/* Hash of the n-grams ending at e, for every n up to nmax at once: h[n-1] is
 * the hash of tokens[e-n+1 .. e]. */
static void ng_hashes(const int32_t *t, int e, int nmax, uint32_t *h) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < nmax && e - i >= 0; i++) {
        x ^= (uint32_t)t[e - i];
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 29;
        h[i] = (uint32_t)(x ^ (x >> 32));
    }
}

static bool ng_same(const int32_t *t, int e1, int e2, int n) {
    for (int i = 0; i < n; i++)
        if (t[e1 - i] != t[e2 - i]) return false;
    return true;
}

static int32_t *ng_table(const ngram *g, drafter_seq *ds, int n) {
    return ds->slot + (size_t)(n - g->nmin) * (ds->mask + 1);
}

/* Indexes end positions up to n_tokens - 2 (the ones whose continuation is
 * known). */
static void ng_sync(const ngram *g, drafter_seq *ds, const int32_t *t, int n_tokens) {
    uint32_t h[NGRAM_MAX_N] = {0};
    for (int e = ds->next_end; e <= n_tokens - 2; e++) {
        ng_hashes(t, e, g->nmax, h);
        for (int n = g->nmin; n <= g->nmax && n <= e + 1; n++) {
            int32_t *tab = ng_table(g, ds, n);
            for (uint32_t k = h[n - 1] & ds->mask;; k = (k + 1) & ds->mask) {
                if (tab[k] == 0 || ng_same(t, tab[k] - 1, e, n)) {
                    tab[k] = e + 1; /* the latest occurrence wins */
                    break;
                }
            }
        }
    }
    if (n_tokens - 1 > ds->next_end) ds->next_end = n_tokens - 1;
}

int draft_ngram_lookup(drafter *d, drafter_seq *ds, const int32_t *t, int n_tokens, int *match_n) {
    const ngram *g = (const ngram *)d;
    *match_n = 0;
    if (n_tokens > ds->max_len) n_tokens = ds->max_len;
    ng_sync(g, ds, t, n_tokens);
    int last = n_tokens - 1;
    uint32_t h[NGRAM_MAX_N] = {0};
    ng_hashes(t, last, g->nmax, h);
    for (int n = g->nmax; n >= g->nmin; n--) {
        if (n > last) continue; /* an earlier match needs n tokens before the last one's start */
        const int32_t *tab = ng_table(g, ds, n);
        for (uint32_t k = h[n - 1] & ds->mask; tab[k] != 0; k = (k + 1) & ds->mask) {
            if (ng_same(t, tab[k] - 1, last, n)) {
                *match_n = n;
                return tab[k] - 1;
            }
        }
    }
    return -1;
}

static void ng_destroy(drafter *d) { free(d); }

static drafter_seq *ng_seq_create(drafter *d, int max_len) {
    const ngram *g = (const ngram *)d;
    drafter_seq *ds = calloc(1, sizeof(*ds));
    if (!ds) return NULL;
    uint32_t cap = 64;
    while (cap < 2u * (uint32_t)max_len) cap <<= 1;
    ds->max_len = max_len;
    ds->mask = cap - 1;
    ds->slot = calloc((size_t)(g->nmax - g->nmin + 1) * cap, sizeof(int32_t));
    ds->cached_n_tokens = -1;
    if (!ds->slot) {
        free(ds);
        return NULL;
    }
    return ds;
}

static void ng_seq_destroy(drafter *d, drafter_seq *ds) {
    (void)d;
    if (!ds) return;
    free(ds->slot);
    free(ds);
}

static int ng_available(drafter *d, drafter_seq *ds, const int32_t *t, int n_tokens) {
    int n;
    int e = draft_ngram_lookup(d, ds, t, n_tokens, &n);
    ds->cached_n_tokens = n_tokens, ds->cached_e = e, ds->cached_n = n;
    return e < 0 ? 0 : n_tokens - 1 - e;
}

static int ng_propose(drafter *d, drafter_prop *P, int n, char *err, size_t errlen) {
    (void)err, (void)errlen;
    for (int i = 0; i < n; i++) {
        drafter_prop *p = &P[i];
        drafter_seq *ds = p->ds;
        int e, mn;
        if (ds->cached_n_tokens == p->n_tokens) e = ds->cached_e;
        else e = draft_ngram_lookup(d, ds, p->tokens, p->n_tokens, &mn);
        p->n_nodes = 0;
        if (e < 0) continue;
        for (int j = 0; j < p->budget && e + 1 + j <= p->n_tokens - 1; j++)
            p->nodes[j] = (drafter_node){.token = p->tokens[e + 1 + j], .parent = (int16_t)(j - 1),
                                         .deterministic = true};
        p->n_nodes = p->budget < p->n_tokens - 1 - e ? p->budget : p->n_tokens - 1 - e;
    }
    return 0;
}

/* The index only ever holds accepted tokens; a commit shorter than what it
 * indexed is a reset (the caches were rebuilt) and it starts over. */
static void ng_commit(drafter *d, drafter_seq *ds, const int32_t *tokens, int accepted_len) {
    (void)tokens;
    const ngram *g = (const ngram *)d;
    ds->cached_n_tokens = -1;
    if (accepted_len < ds->next_end) {
        memset(ds->slot, 0, sizeof(int32_t) * (size_t)(g->nmax - g->nmin + 1) * (ds->mask + 1));
        ds->next_end = 0;
    }
}

static void ng_cost(drafter *d, double *node_ms, double *per_row_ms) {
    *node_ms = ((ngram *)d)->c.draft_ms;
    *per_row_ms = 0.0;
}

static void ng_observe(drafter *d, int nodes, int rows, double ms) {
    (void)rows;
    if (nodes > 0) gamma_costs_observe_draft(&((ngram *)d)->c, ms / nodes);
}

/* Tries of every earlier match's continuation (ngram_tree_propose), at the
 * drafter's own lengths. */
static int ng_propose_tree(drafter *d, drafter_tree_prop *props, int n, char *err, size_t errlen) {
    ngram *g = (ngram *)d;
    (void)err, (void)errlen;
    for (int i = 0; i < n; i++) {
        double a = clock_now_ms();
        tree_shape sh = {props[i].budget, props[i].depth, props[i].topk};
        ngram_tree_propose(props[i].s->tokens, props[i].s->n_tokens, g->nmin, g->nmax, &sh, &props[i].tree);
        props[i].draft_ms = clock_now_ms() - a;
    }
    return 0;
}

static const drafter_i draft_ngram_i = {
    .version = DRAFTER_INTERFACE_VERSION,
    .name = "ngram",
    .needs_hidden = false,
    .destroy = ng_destroy,
    .seq_create = ng_seq_create,
    .seq_destroy = ng_seq_destroy,
    .available = ng_available,
    .propose = ng_propose,
    .commit = ng_commit,
    .state_len = NULL,
    .cost = ng_cost,
    .calibrate = NULL,
    .observe = ng_observe,
    .propose_tree = ng_propose_tree,
};

drafter *draft_ngram_create(int n_vocab, int nmin, int nmax) {
    if (nmin <= 0) nmin = nmax > 0 && nmax < 2 ? nmax : 2;
    if (nmax <= 0) nmax = nmin > 5 ? nmin : 5;
    if (nmin < 1 || nmax > NGRAM_MAX_N || nmin > nmax) return NULL;
    ngram *g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->base.i = &draft_ngram_i;
    g->base.n_vocab = n_vocab;
    g->nmin = nmin, g->nmax = nmax;
    g->c.draft_ms = 1e-4; /* a lookup is microseconds; measured from the first proposals on */
    return &g->base;
}
