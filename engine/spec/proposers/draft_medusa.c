/* draft_medusa.c — Medusa trees from head top-k candidates (see draft_medusa.h). */
#include "engine/spec/proposers/draft_medusa.h"
#include "engine/util.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPK_MAX 16

struct medusa_seq {
    float *h;                   /* (D) */
    int at;                     /* the sequence's n_tokens when h was recorded; -1 none */
    int dim;                    /* D */
    /* a shadow chain: the heads' top-1 tokens for positions sh_at .. sh_at +
     * sh_n - 1, proposed at a plain step and never verified, scored against
     * the tokens the sequence then produces (sh_n 0: none pending) */
    int32_t sh_tok[MEDUSA_MAX_HEADS];
    int sh_at, sh_n;
};

struct draft_medusa {
    drafter base;               /* the proposer table (first: a drafter * is a draft_medusa *) */
    spec_pair *sp;
    const medusa_heads *mh;
    medusa_rt *rt;
    int D, V, K;
    float *h;                   /* (max_seqs, D) the rows of this step's proposals */
    int32_t *tok;               /* (max_seqs) their last tokens (the heads' token input) */
    float *hid;                 /* (max_seqs, D) hidden states out of the verify pass */
    float *logits;              /* (K, max_seqs, V) */
    spec_tree *trees;           /* (max_seqs) */
    int *row;                   /* (max_seqs) each sequence's row in h, -1 none */
    spec_seq **S;               /* (max_seqs) a propose_tree call's sequences and states */
    medusa_seq **M;
    /* the shape cache */
    tree_shape shape;
    int n_shape;
    int16_t parent[DRAFTER_MAX_NODES];
    int8_t depth[DRAFTER_MAX_NODES], rank[DRAFTER_MAX_NODES];
    double value[DRAFTER_MAX_NODES]; /* each node's path value (expected acceptance) */
    /* the budget choice (draft_medusa_set_curve) */
    bool has_curve;
    cost_curve curve;                /* t(rows) */
    double speed;                    /* verify time over the curve's prediction (EWMA) */
    double heads_ms;                 /* the heads' ms per proposing row (EWMA; 0 before any) */
    /* accepted path length over the value the shape promised for it (sums
     * with decay): the stored accuracies are top-k matches on greedy text,
     * while a sampled step accepts a deterministic node with probability
     * p(node) and the served text is not the held-out text, so the budget
     * choice scales the values by what the steps delivered */
    double got, promised;
    double chain_value[MEDUSA_MAX_HEADS + 1]; /* chain_value[n]: the promised length of an n-deep top-1 chain */
    long plain_run;                  /* consecutive steps the scaled choice made plain */
    int last_budget;
    /* the proposal between draft_medusa_propose and draft_medusa_finish */
    int nb, nr;                      /* its budget and proposing rows */
    double hm;                       /* the heads' ms */
};

#define BUDGET_EWMA 0.2
#define ACCEPT_DECAY 0.98    /* per proposing row: the acceptance ratio's memory (about 50 rows) */
#define SHADOW_EVERY 2       /* plain steps per shadow chain (a heads' pass, no verify rows) */

static const drafter_i medusa_drafter_i;

void draft_medusa_destroy(draft_medusa *dm) {
    if (!dm) return;
    medusa_rt_destroy(dm->rt);
    free(dm->h);
    free(dm->tok);
    free(dm->hid);
    free(dm->logits);
    free(dm->trees);
    free(dm->row);
    free(dm->S);
    free(dm->M);
    free(dm);
}

draft_medusa *draft_medusa_create(spec_pair *sp, const medusa_heads *mh, engine_status *st, char *err,
                                  size_t errlen) {
    if (strcmp(mh->target_id, sp->target_id.id) != 0) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen,
                     "these medusa heads were trained for target %s, not for the loaded target %s", mh->target_id,
                     sp->target_id.id);
        return NULL;
    }
    draft_medusa *dm = calloc(1, sizeof(*dm));
    if (!dm) {
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: medusa proposer");
        return NULL;
    }
    size_t S = (size_t)sp->max_seqs;
    dm->sp = sp, dm->mh = mh, dm->D = mh->dim, dm->V = mh->n_vocab, dm->K = mh->n_heads;
    if (!(dm->rt = medusa_rt_create(mh, sp->target, sp->max_seqs, st, err, errlen))) {
        draft_medusa_destroy(dm);
        return NULL;
    }
    dm->h = malloc(sizeof(float) * S * dm->D);
    dm->tok = malloc(sizeof(int32_t) * S);
    dm->hid = malloc(sizeof(float) * S * dm->D);
    dm->logits = malloc(sizeof(float) * S * dm->K * dm->V);
    dm->trees = malloc(sizeof(spec_tree) * S);
    dm->row = malloc(sizeof(int) * S);
    dm->S = malloc(sizeof(spec_seq *) * S);
    dm->M = malloc(sizeof(medusa_seq *) * S);
    if (!dm->h || !dm->tok || !dm->hid || !dm->logits || !dm->trees || !dm->row || !dm->S || !dm->M) {
        draft_medusa_destroy(dm);
        util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory: medusa proposer scratch");
        return NULL;
    }
    dm->base.i = &medusa_drafter_i;
    dm->base.n_vocab = sp->n_vocab;
    dm->n_shape = -1;
    dm->speed = 1.0;
    engine_status_set(st, ENGINE_OK);
    return dm;
}

void draft_medusa_set_curve(draft_medusa *dm, const double *t_rows) {
    cost_curve_init(&dm->curve, t_rows, COST_CURVE_ROWS);
    dm->has_curve = dm->curve.n > 0;
}

int draft_medusa_last_budget(const draft_medusa *dm) { return dm->last_budget; }

int draft_medusa_pick_budget(const double *value, int n_shape, const cost_curve *curve, double speed, double heads_ms,
                             int n, int nr) {
    return budget_heads_best(value, n_shape, curve, speed, heads_ms, n, nr);
}

double draft_medusa_accept_ratio(const draft_medusa *dm) {
    return dm->promised > 0.5 ? dm->got / dm->promised : 1.0;
}

/* This step's node budget: the budget controller's, from the heads'
 * evidence (budget_heads_nodes). */
static int pick_budget(draft_medusa *dm, int n, int nr) {
    budget_heads h = {.value = dm->value, .n_shape = dm->n_shape, .curve = dm->has_curve ? &dm->curve : NULL,
                      .speed = dm->speed, .heads_ms = dm->heads_ms, .ratio = draft_medusa_accept_ratio(dm),
                      .plain_run = &dm->plain_run};
    return budget_heads_nodes(&h, n, nr);
}

medusa_seq *medusa_seq_create(draft_medusa *dm) {
    medusa_seq *ms = calloc(1, sizeof(*ms));
    if (!ms) return NULL;
    if (!(ms->h = malloc(sizeof(float) * (size_t)dm->D))) {
        free(ms);
        return NULL;
    }
    ms->at = -1;
    ms->dim = dm->D;
    ms->sh_n = 0;
    return ms;
}

void medusa_seq_destroy(medusa_seq *ms) {
    if (!ms) return;
    free(ms->h);
    free(ms);
}

void medusa_seq_copy(medusa_seq *dst, const medusa_seq *src) {
    dst->at = src->at;
    dst->sh_n = 0;
    if (src->at >= 0) memcpy(dst->h, src->h, sizeof(float) * (size_t)src->dim);
}

void medusa_seq_prefilled(draft_medusa *dm, medusa_seq *ms, const spec_seq *s) {
    model *m = dm->sp->target;
    int row = m->n_out_last - 1;
    ms->at = row >= 0 && model_hidden_rows(m, ms->h, &row, 1) == 0 ? s->n_tokens : -1;
}

/* P(head d's label has rank r): from the measured cumulative accuracies; a
 * prior for heads never measured. Floored so every rank stays orderable. */
static double rank_prob(const medusa_heads *mh, int d, int r) {
    double p;
    if (mh->acc_tokens == 0 || d >= mh->n_heads) {
        p = 0.6 / (d + 1) / (r + 1);
    } else {
        int j = r < MEDUSA_ACC_K ? r : MEDUSA_ACC_K - 1;
        p = mh->acc[d][j] - (j ? mh->acc[d][j - 1] : 0.0);
        if (r >= MEDUSA_ACC_K) p /= (r - MEDUSA_ACC_K + 2);
    }
    return p > 1e-6 ? p : 1e-6 / (r + 1);
}

typedef struct {
    int16_t parent;
    int8_t depth, rank;
    double v;                   /* the path's value: product of its nodes' rank probabilities */
} cand;

static int shape_order(const medusa_heads *mh, const tree_shape *sh, int16_t *parent, int8_t *depth, int8_t *rank,
                       double *value);

int draft_medusa_shape(const medusa_heads *mh, const tree_shape *sh, int16_t *parent, int8_t *depth, int8_t *rank) {
    double value[DRAFTER_MAX_NODES];
    return shape_order(mh, sh, parent, depth, rank, value);
}

/* best-first: parents before children, each prefix the best tree of its size */
static int shape_order(const medusa_heads *mh, const tree_shape *sh, int16_t *parent, int8_t *depth, int8_t *rank,
                       double *value) {
    int budget = sh->budget < DRAFTER_MAX_NODES ? sh->budget : DRAFTER_MAX_NODES;
    int maxd = sh->depth < mh->n_heads ? sh->depth : mh->n_heads;
    int topk = sh->topk < TOPK_MAX ? sh->topk : TOPK_MAX;
    if (budget < 1 || maxd < 1 || topk < 1) return 0;
    /* frontier of candidates: each picked node offers its next sibling and its first child */
    cand fr[2 * DRAFTER_MAX_NODES + 2];
    int nf = 0, n = 0;
    fr[nf++] = (cand){-1, 1, 0, rank_prob(mh, 0, 0)};
    while (n < budget && nf > 0) {
        int b = 0;
        for (int i = 1; i < nf; i++) b = fr[i].v > fr[b].v ? i : b;
        cand c = fr[b];
        fr[b] = fr[--nf];
        parent[n] = c.parent, depth[n] = c.depth, rank[n] = c.rank, value[n] = c.v;
        int me = n++;
        if (c.rank + 1 < topk)
            fr[nf++] = (cand){c.parent, c.depth, (int8_t)(c.rank + 1),
                                       c.v / rank_prob(mh, c.depth - 1, c.rank) * rank_prob(mh, c.depth - 1, c.rank + 1)};
        if (c.depth < maxd)
            fr[nf++] = (cand){(int16_t)me, (int8_t)(c.depth + 1), 0, c.v * rank_prob(mh, c.depth, 0)};
    }
    return n;
}

/* The top k token ids of z (V), best first; ties: lower id first. */
static void topk_ids(int32_t *out, int k, const float *z, int V) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (n == k && z[v] <= z[out[k - 1]]) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && z[out[j - 1]] < z[v]) out[j] = out[j - 1], j--;
        out[j] = v;
    }
}

/* A plain step's evidence for the budget choice: what the heads would have
 * delivered. A pending shadow chain is scored once the sequence's tokens
 * show its first miss or its whole length: the matched prefix is the path
 * a verify would have accepted (at T = 0 exactly; sampled, a deterministic
 * node matches the sampled token with the probability the tree rule
 * accepts it), against the chain's promised value. Without it the
 * acceptance ratio only learns from steps that verify trees, so once low it
 * stayed low for hundreds of steps on text the heads predict well. */
static void shadow_score(draft_medusa *dm, medusa_seq *m, const spec_seq *s) {
    if (m->sh_n <= 0) return;
    int known = s->n_tokens - m->sh_at;
    if (known < 0) { /* the sequence went back: nothing to score */
        m->sh_n = 0;
        return;
    }
    int acc = 0;
    while (acc < known && acc < m->sh_n && s->tokens[m->sh_at + acc] == m->sh_tok[acc]) acc++;
    if (acc == known && acc < m->sh_n) return; /* not decided yet */
    dm->got = dm->got * ACCEPT_DECAY + acc;
    dm->promised = dm->promised * ACCEPT_DECAY + dm->chain_value[m->sh_n];
    m->sh_n = 0;
}

/* Runs the heads for the fresh sequences without a pending shadow chain and
 * records their top-1 chains (a plain step: nothing is verified). */
static void shadow_start(draft_medusa *dm, spec_seq **S, medusa_seq **M, int n, const tree_shape *sh) {
    int nr = 0, maxd = sh->depth < dm->K ? sh->depth : dm->K, D = dm->D, V = dm->V;
    if (maxd < 1) return;
    for (int i = 0; i < n; i++) {
        dm->row[i] = -1;
        if (M[i]->at != S[i]->n_tokens || M[i]->sh_n > 0) continue;
        memcpy(dm->h + (size_t)nr * D, M[i]->h, sizeof(float) * (size_t)D);
        dm->tok[nr] = S[i]->tokens[S[i]->n_tokens - 1];
        dm->row[i] = nr++;
    }
    if (!nr || medusa_rt_logits(dm->rt, dm->logits, dm->h, dm->tok, nr, maxd) != 0) return;
    for (int i = 0; i < n; i++) {
        if (dm->row[i] < 0) continue;
        for (int d = 0; d < maxd; d++) topk_ids(&M[i]->sh_tok[d], 1, dm->logits + ((size_t)d * nr + dm->row[i]) * V, V);
        M[i]->sh_at = S[i]->n_tokens, M[i]->sh_n = maxd;
        dm->row[i] = -1; /* no proposal this step */
    }
}

int draft_medusa_step(draft_medusa *dm, spec_tree_ctx *tc, spec_seq **S, medusa_seq **M, int n, const tree_shape *sh,
                      const int *max_new, spec_step_info *info, char *err, size_t errlen) {
    const spec_tree *trees;
    if (draft_medusa_propose(dm, S, M, n, sh, &trees, err, errlen) != 0) return -1;
    if (spec_tree_step_h(tc, S, n, trees, max_new, info, dm->hid, err, errlen) != 0) return -1;
    draft_medusa_finish(dm, S, M, n, info);
    return 0;
}

float *draft_medusa_hidden(draft_medusa *dm) { return dm->hid; }

int draft_medusa_propose(draft_medusa *dm, spec_seq **S, medusa_seq **M, int n, const tree_shape *sh,
                         const spec_tree **trees, char *err, size_t errlen) {
    spec_pair *sp = dm->sp;
    if (n < 1 || n > sp->max_seqs) return util_fail(err, errlen, "batch of %d sequences (limit %d)", n, sp->max_seqs);
    if (dm->n_shape < 0 || memcmp(&dm->shape, sh, sizeof(*sh)) != 0) {
        dm->shape = *sh;
        dm->n_shape = shape_order(dm->mh, sh, dm->parent, dm->depth, dm->rank, dm->value);
        double v = 1;
        dm->chain_value[0] = 0;
        for (int d = 0; d < dm->K; d++) v *= rank_prob(dm->mh, d, 0), dm->chain_value[d + 1] = dm->chain_value[d] + v;
    }
    for (int i = 0; i < n; i++) shadow_score(dm, M[i], S[i]);
    double t0 = clock_now_ms();
    int nr = 0, topk = sh->topk < TOPK_MAX ? sh->topk : TOPK_MAX, D = dm->D, V = dm->V, K = dm->K;
    for (int i = 0; i < n; i++)
        nr += dm->n_shape > 0 && M[i]->at == S[i]->n_tokens;
    int nb = pick_budget(dm, n, nr);
    nr = 0;
    for (int i = 0; i < n; i++) {
        dm->row[i] = -1;
        dm->trees[i].n_nodes = 0;
        dm->trees[i].q = NULL;
        if (nb > 0 && M[i]->at == S[i]->n_tokens) {
            memcpy(dm->h + (size_t)nr * D, M[i]->h, sizeof(float) * (size_t)D);
            dm->tok[nr] = S[i]->tokens[S[i]->n_tokens - 1]; /* what the target sampled from h: the root */
            dm->row[i] = nr++;
        }
    }
    dm->last_budget = nr ? nb : 0;
    if (nb == 0 && dm->has_curve && dm->plain_run % SHADOW_EVERY == 0) shadow_start(dm, S, M, n, sh);
    double hm = 0;
    if (nr > 0) {
        int maxd = 0;
        for (int j = 0; j < nb; j++) maxd = dm->depth[j] > maxd ? dm->depth[j] : maxd;
        if (medusa_rt_logits(dm->rt, dm->logits, dm->h, dm->tok, nr, maxd) != 0)
            return util_fail(err, errlen, "medusa heads: a row's token is out of the vocabulary");
        for (int i = 0; i < n; i++) {
            if (dm->row[i] < 0) continue;
            int32_t top[MEDUSA_MAX_HEADS][TOPK_MAX];
            for (int d = 0; d < maxd && d < K; d++)
                topk_ids(top[d], topk, dm->logits + ((size_t)d * nr + dm->row[i]) * V, V);
            spec_tree *t = &dm->trees[i];
            for (int j = 0; j < nb; j++)
                t->nodes[j] = (drafter_node){top[dm->depth[j] - 1][dm->rank[j]], dm->parent[j], true};
            t->n_nodes = nb;
        }
        hm = clock_now_ms() - t0;
        dm->heads_ms = dm->heads_ms > 0 ? dm->heads_ms + BUDGET_EWMA * (hm / nr - dm->heads_ms) : hm / nr;
    }
    dm->nb = nb, dm->nr = nr, dm->hm = hm;
    *trees = dm->trees;
    return 0;
}

/* The budget's evidence from a verified step of the last proposal's n
 * sequences: the host's speed against the curve, and what the trees
 * delivered against what their values promised. */
static void note_step(draft_medusa *dm, int n, const spec_step_info *info) {
    int nb = dm->nb, nr = dm->nr;
    if (dm->has_curve && info[0].target_ms > 0) { /* the host's speed against the curve */
        int rows = 0;
        for (int i = 0; i < n; i++) rows += dm->trees[i].n_nodes + 1;
        double r = info[0].target_ms / cost_curve_ms(&dm->curve, rows);
        r = r < 0.05 ? 0.05 : r > 50 ? 50 : r;
        dm->speed += BUDGET_EWMA * (r - dm->speed);
    }
    if (nr > 0) { /* what the trees delivered against what their values promised */
        double promised = 0;
        for (int j = 0; j < nb; j++) promised += dm->value[j];
        for (int i = 0; i < n; i++) {
            if (dm->row[i] < 0) continue;
            dm->got = dm->got * ACCEPT_DECAY + info[i].accepted;
            dm->promised = dm->promised * ACCEPT_DECAY + promised;
        }
    }
}

void draft_medusa_finish(draft_medusa *dm, spec_seq **S, medusa_seq **M, int n, spec_step_info *info) {
    int D = dm->D, nr = dm->nr;
    double hm = dm->hm;
    for (int i = 0; i < n; i++) { /* reports name the heads as the proposer of their verify steps */
        info[i].method = info[i].gamma > 0 ? SPEC_PROPOSER_MEDUSA : -1;
        if (info[i].gamma > 0) spec_method_stats_note(&S[i]->st.by[SPEC_PROPOSER_MEDUSA], &info[i]);
    }
    note_step(dm, n, info);
    for (int i = 0; i < n; i++) {
        memcpy(M[i]->h, dm->hid + (size_t)i * D, sizeof(float) * (size_t)D);
        M[i]->at = S[i]->n_tokens;
        info[i].draft_ms = nr && dm->row[i] >= 0 ? hm / nr : 0; /* one row each: the heads' pass shared by rows */
        S[i]->st.draft_ms += info[i].draft_ms;
    }
}

/* ---- the heads as a proposer table (drafter.h) ---------------------------- */

static void md_destroy(drafter *d) { draft_medusa_destroy((draft_medusa *)d); }

static drafter_seq *md_seq_create(drafter *d, int max_len) {
    (void)max_len;
    return (drafter_seq *)medusa_seq_create((draft_medusa *)d);
}

static void md_seq_destroy(drafter *d, drafter_seq *ds) {
    (void)d;
    medusa_seq_destroy((medusa_seq *)ds);
}

/* The hidden state is for tokens[0, at) and derives from tokens[0, at − 1):
 * a commit below that takes it back. */
static void md_commit(drafter *d, drafter_seq *ds, const int32_t *tokens, int accepted_len) {
    (void)d, (void)tokens;
    medusa_seq *m = (medusa_seq *)ds;
    if (accepted_len == 0 || m->at > accepted_len + 1) m->at = -1;
}

static void md_cost(drafter *d, double *node_ms, double *per_row_ms) {
    *node_ms = ((draft_medusa *)d)->heads_ms;
    *per_row_ms = 0;
}

/* One shape for the call: the first sequence's bounds (the engine grants
 * every Medusa sequence the heads' shape); each step's budget within it is
 * the heads' own choice from the cost curve (pick_budget). */
static int md_propose_tree(drafter *d, drafter_tree_prop *props, int n, char *err, size_t errlen) {
    draft_medusa *dm = (draft_medusa *)d;
    if (n < 1 || n > dm->sp->max_seqs) return util_fail(err, errlen, "batch of %d sequences (limit %d)", n, dm->sp->max_seqs);
    for (int i = 0; i < n; i++) {
        props[i].tree = (drafter_tree){0};
        props[i].draft_ms = 0;
        if (!props[i].ds) return util_fail(err, errlen, "sequence %d holds no state of the heads", i);
        dm->S[i] = props[i].s, dm->M[i] = (medusa_seq *)props[i].ds;
    }
    tree_shape sh = {props[0].budget, props[0].depth, props[0].topk};
    const spec_tree *trees;
    if (draft_medusa_propose(dm, dm->S, dm->M, n, &sh, &trees, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) {
        props[i].tree = trees[i];
        props[i].draft_ms = dm->nr && dm->row[i] >= 0 ? dm->hm / dm->nr : 0; /* one row each: the heads' pass shared */
    }
    return 0;
}

static void md_tree_done(drafter *d, const drafter_tree_prop *props, int n, const spec_step_info *info) {
    (void)props;
    note_step((draft_medusa *)d, n, info);
}

static void md_observe_hidden(drafter *d, drafter_seq *ds, const float *h, int n_tokens) {
    medusa_seq *m = (medusa_seq *)ds;
    (void)d;
    memcpy(m->h, h, sizeof(float) * (size_t)m->dim);
    m->at = n_tokens;
}

static const drafter_i medusa_drafter_i = {
    .version = DRAFTER_INTERFACE_VERSION,
    .name = "medusa",
    .needs_hidden = true,
    .destroy = md_destroy,
    .seq_create = md_seq_create,
    .seq_destroy = md_seq_destroy,
    .propose = NULL, /* trees only */
    .commit = md_commit,
    .cost = md_cost,
    .propose_tree = md_propose_tree,
    .tree_done = md_tree_done,
    .observe_hidden = md_observe_hidden,
};

drafter *draft_medusa_drafter(draft_medusa *dm) { return dm ? &dm->base : NULL; }
draft_medusa *draft_medusa_of(drafter *d) { return d && d->i == &medusa_drafter_i ? (draft_medusa *)d : NULL; }
