/* draft_tree.c — draft-model and n-gram tree proposers (see draft_tree.h). */
#include "engine/spec/proposers/draft_tree.h"
#include "engine/util.h"

#include "engine/spec/proposers/draft_model.h"
#include "engine/grammar/grammar.h"
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TR (DRAFTER_MAX_NODES + 1)
#define TOPK_MAX 8

struct draft_tree {
    spec_pair *sp;
    drafter *d;
    model *m;
    kv_pool *pool;
    int max_seqs;
    float *q;                   /* (max_seqs, DRAFTER_MAX_NODES, V) q rows of the proposed nodes */
    float *fq;                  /* (TR, V) the frontier's distributions of one sequence */
    float *logits;              /* (max_seqs * TR, V) */
    int32_t *tokens, *pos;      /* (max_seqs, TR) */
    uint8_t *mask;              /* (max_seqs, TR, TR) */
    model_seq *ms;              /* (max_seqs) */
};

draft_tree *draft_tree_create(spec_pair *sp) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    if (!d) return NULL;
    draft_tree *dt = calloc(1, sizeof(*dt));
    if (!dt) return NULL;
    size_t S = (size_t)sp->max_seqs, V = (size_t)sp->n_vocab;
    *dt = (draft_tree){.sp = sp, .d = d, .m = draft_model_model(d), .pool = draft_model_pool(d), .max_seqs = sp->max_seqs};
    dt->q = malloc(sizeof(float) * S * DRAFTER_MAX_NODES * V);
    dt->fq = malloc(sizeof(float) * TR * V);
    dt->logits = malloc(sizeof(float) * S * TR * V);
    dt->tokens = malloc(sizeof(int32_t) * S * TR);
    dt->pos = malloc(sizeof(int32_t) * S * TR);
    dt->mask = malloc(S * TR * TR);
    dt->ms = malloc(sizeof(model_seq) * S);
    if (!dt->q || !dt->fq || !dt->logits || !dt->tokens || !dt->pos || !dt->mask || !dt->ms) {
        draft_tree_destroy(dt);
        return NULL;
    }
    draft_model_set_trees(d, dt);
    return dt;
}

void draft_tree_destroy(draft_tree *dt) {
    if (!dt) return;
    draft_model_set_trees(dt->d, NULL);
    free(dt->q);
    free(dt->fq);
    free(dt->logits);
    free(dt->tokens);
    free(dt->pos);
    free(dt->mask);
    free(dt->ms);
    free(dt);
}

/* The k largest entries of q (ids in idx, values in val), k <= TOPK_MAX. */
static int top_k(const float *q, int V, int k, int32_t *idx, float *val) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (!(q[i] > 0)) continue;
        if (n == k && !(q[i] > val[n - 1])) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && q[i] > val[j - 1]) {
            val[j] = val[j - 1], idx[j] = idx[j - 1];
            j--;
        }
        val[j] = q[i], idx[j] = i;
    }
    return n;
}

/* One level for one sequence: children for the frontier nodes (fr[0..nf),
 * -1 = the root) whose distributions are fq rows 0..nf. Budget goes to the
 * candidates (frontier node f, rank j) by score[f] · (j-th largest q_f), a
 * function of the distributions only, keeping one node of room for each
 * level still to come (else a shallow level's unlikely siblings would take
 * the budget and the tree would stop short of its depth: an 8/4/2 tree
 * would be 2 + 4 + 2 nodes deep 3, below a 4-node chain); then the children
 * are the top ranks (greedy) or drawn without replacement (sampled). */
static int grow(spec_seq *s, spec_tree *t, float *qout, const float *fq, const int *fr, int nf, double *score,
                const tree_shape *sh, int level, size_t V) {
    int32_t idx[TR][TOPK_MAX];
    float val[TR][TOPK_MAX];
    int nt[TR], take[TR] = {0}, at[TR] = {0};
    int k = sh->topk < TOPK_MAX ? sh->topk : TOPK_MAX;
    for (int f = 0; f < nf; f++) nt[f] = top_k(fq + (size_t)f * V, (int)V, k, idx[f], val[f]);
    int room = sh->budget - t->n_nodes, later = sh->depth - level;
    if (later > 0 && room > 1) room = room - later >= 1 ? room - later : 1; /* the levels to come keep a node each */
    for (int picks = 0; picks < room; picks++) {
        int best = -1;
        double bv = 0;
        for (int f = 0; f < nf; f++) {
            double fs = fr[f] < 0 ? 1.0 : score[fr[f]];
            if (at[f] < nt[f] && fs * val[f][at[f]] > bv) bv = fs * val[f][at[f]], best = f;
        }
        if (best < 0) break;
        at[best]++;
        take[best]++;
    }
    bool greedy = s->prm.sc.temperature == 0.0f;
    int N = s->n_tokens, added = 0;
    for (int f = 0; f < nf; f++) {
        const float *qf = fq + (size_t)f * V;
        int32_t drawn[TOPK_MAX];
        for (int j = 0; j < take[f]; j++) {
            int c = t->n_nodes;
            float *qr = qout + (size_t)c * V;
            int32_t tok;
            double pf;
            if (greedy) {
                tok = idx[f][j];
                pf = val[f][j];
            } else {
                double m = 0;
                memcpy(qr, qf, sizeof(float) * V);
                for (int e = 0; e < j; e++) qr[drawn[e]] = 0;
                for (size_t i = 0; i < V; i++) m += qr[i];
                if (!(m > 0)) break;
                for (size_t i = 0; i < V; i++) qr[i] = (float)(qr[i] / m);
                uint64_t p = (uint64_t)(N + level - 1);
                tok = sampler_sample(qr, (int)V, rng_uniform(s->prm.seed, p, RNG_DRAFT, (uint32_t)(1 + c)));
                pf = qf[tok];
            }
            drawn[j] = tok;
            t->nodes[c] = (drafter_node){tok, (int16_t)fr[f], greedy};
            score[c] = (fr[f] < 0 ? 1.0 : score[fr[f]]) * pf;
            t->n_nodes++;
            added++;
        }
    }
    return added;
}

void tree_grow_start(tree_grow *g, spec_tree *t, float *qrows, const spec_seq *s, const tree_shape *sh, int max_ctx) {
    *t = (spec_tree){.n_nodes = 0, .q = s->prm.sc.temperature == 0.0f ? NULL : qrows};
    g->fr[0] = -1;
    /* no tree without a budget or without room for its rows */
    g->nf = sh->budget > 0 && s->n_tokens + sh->budget <= max_ctx;
}

bool tree_grow_wants(const tree_grow *g, const spec_tree *t, const tree_shape *sh, int level) {
    return g->nf > 0 && level <= sh->depth && t->n_nodes < sh->budget;
}

int tree_grow_level(tree_grow *g, spec_tree *t, float *qrows, spec_seq *s, sampler *smp, float *const *lr, float *fq,
                    const tree_shape *sh, int level, int V) {
    /* greedy: rank children by the draft's own softmax (T = 1), not the one-hot */
    sampler_config rank = sampler_config_default();
    rank.temperature = 1.0f;
    const sampler_config *sc = s->prm.sc.temperature == 0.0f ? &rank : &s->prm.sc;
    for (int f = 0; f < g->nf; f++) {
        if (s->prm.grammar) { /* q masked by the state after the node's path, as the verify row will be */
            int b = spec_seq_grammar_budget(s, s->n_tokens + level - 1);
            grammar_mask_logits(s->prm.grammar, g->fr[f] < 0 ? s->gst : g->gst[g->fr[f]], b, lr[f]);
        }
        sampler_probs(smp, sc, lr[f], fq + (size_t)f * (size_t)V);
    }
    int first = t->n_nodes;
    int added = grow(s, t, qrows, fq, g->fr, g->nf, g->score, sh, level, (size_t)V);
    g->nf = 0;
    for (int c = first; c < first + added; c++) {
        g->fr[g->nf++] = c;
        if (s->prm.grammar) {
            int pa = t->nodes[c].parent;
            g->gst[c] = grammar_advance_token(s->prm.grammar, pa < 0 ? s->gst : g->gst[pa], t->nodes[c].token);
        }
    }
    return added;
}

int draft_tree_propose(draft_tree *dt, spec_seq **S, int n, const tree_shape *sh, spec_tree *out, char *err,
                       size_t errlen) {
    size_t V = (size_t)dt->sp->n_vocab;
    if (n > dt->max_seqs) return util_fail(err, errlen, "tree draft batch of %d (limit %d)", n, dt->max_seqs);
    if (n > 64) return util_fail(err, errlen, "tree draft batch of %d (limit 64)", n);
    int max_depth = 0;
    for (int i = 0; i < n; i++) {
        if (sh[i].budget == 0) continue; /* no tree for this one */
        if (sh[i].budget < 0 || sh[i].budget > DRAFTER_MAX_NODES || sh[i].depth < 1 || sh[i].topk < 1)
            return util_fail(err, errlen, "tree shape budget %d depth %d topk %d", sh[i].budget, sh[i].depth,
                           sh[i].topk);
        if (sh[i].depth > max_depth) max_depth = sh[i].depth;
    }
    if (n * TR > dt->m->mp.max_batch) return util_fail(err, errlen, "tree draft rows exceed the draft's batch");
    tree_grow g[64];
    for (int i = 0; i < n; i++) {
        spec_seq *s = S[i];
        kv_seq *kv = draft_model_kv(s->ds[SPEC_DRAFTER_MODEL]);
        tree_grow_start(&g[i], &out[i], dt->q + (size_t)i * DRAFTER_MAX_NODES * V, s, &sh[i], dt->sp->max_ctx);
        if (kv->len > s->n_tokens - 1) kv_seq_truncate(dt->pool, kv, s->n_tokens - 1);
        if (kv->len < s->n_tokens - 1 &&
            model_feed(dt->m, dt->pool, kv, s->tokens, kv->len, s->n_tokens - 1, dt->logits, err, errlen) != 0)
            goto fail;
    }
    for (int level = 1; level <= max_depth; level++) {
        int m = 0, who[64];
        for (int i = 0; i < n; i++) {
            if (!tree_grow_wants(&g[i], &out[i], &sh[i], level)) continue;
            spec_seq *s = S[i];
            kv_seq *kv = draft_model_kv(s->ds[SPEC_DRAFTER_MODEL]);
            kv_seq_truncate(dt->pool, kv, s->n_tokens - 1);
            int32_t *tk = dt->tokens + (size_t)m * TR, *ps = dt->pos + (size_t)m * TR;
            uint8_t *mk = dt->mask + (size_t)m * TR * TR;
            int R = tree_rows(tk, ps, mk, s->tokens[s->n_tokens - 1], s->n_tokens - 1, out[i].nodes, out[i].n_nodes,
                              (int)V);
            dt->ms[m] = (model_seq){.kv = kv, .n = R, .tokens = tk, .pos = ps, .mask = mk, .all_logits = true};
            who[m++] = i;
        }
        if (!m) break;
        if (model_forward(dt->m, dt->pool, dt->ms, m, dt->logits, err, errlen) != 0) goto fail;
        size_t row = 0;
        for (int r = 0; r < m; r++) {
            int i = who[r];
            float *lg = dt->logits + row * V, *lr[TR];
            row += (size_t)dt->ms[r].n;
            for (int f = 0; f < g[i].nf; f++) lr[f] = lg + (size_t)(1 + g[i].fr[f]) * V; /* row 1 + node: its logits */
            tree_grow_level(&g[i], &out[i], dt->q + (size_t)i * DRAFTER_MAX_NODES * V, S[i], dt->sp->smp, lr, dt->fq,
                            &sh[i], level, (int)V);
        }
    }
    for (int i = 0; i < n; i++) {
        kv_seq *kv = draft_model_kv(S[i]->ds[SPEC_DRAFTER_MODEL]);
        if (kv->len > S[i]->n_tokens - 1) kv_seq_truncate(dt->pool, kv, S[i]->n_tokens - 1);
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) {
        kv_seq *kv = draft_model_kv(S[i]->ds[SPEC_DRAFTER_MODEL]);
        out[i].n_nodes = 0;
        if (kv->len > S[i]->n_tokens - 1) kv_seq_truncate(dt->pool, kv, S[i]->n_tokens - 1);
    }
    return -1;
}

int ngram_tree_propose(const int32_t *tokens, int n_tokens, int nmin, int nmax, const tree_shape *sh, spec_tree *out) {
    out->n_nodes = 0;
    out->q = NULL;
    int cnt[DRAFTER_MAX_NODES] = {0};
    for (int len = nmax; len >= nmin && !out->n_nodes; len--) {
        if (len >= n_tokens) continue;
        const int32_t *suf = tokens + n_tokens - len;
        /* most recent matches first: they decide sibling order among equal counts */
        for (int at = n_tokens - len - 1; at >= 0; at--) {
            if (memcmp(tokens + at, suf, sizeof(int32_t) * (size_t)len) != 0) continue;
            int cur = -1;
            for (int d = 1; d <= sh->depth; d++) {
                int p = at + len + d - 1;
                if (p >= n_tokens) break;
                int32_t tok = tokens[p];
                int hit = -1, kids = 0;
                for (int c = 0; c < out->n_nodes; c++)
                    if (out->nodes[c].parent == cur) {
                        kids++;
                        if (out->nodes[c].token == tok) hit = c;
                    }
                if (hit < 0) {
                    if (kids >= sh->topk || out->n_nodes >= sh->budget) break;
                    hit = out->n_nodes++;
                    out->nodes[hit] = (drafter_node){tok, (int16_t)cur, true};
                }
                cnt[hit]++;
                cur = hit;
            }
        }
    }
    /* siblings by count (stable): re-emit the trie breadth-first by parent */
    int n = out->n_nodes, map[DRAFTER_MAX_NODES], order[DRAFTER_MAX_NODES], no = 0;
    drafter_node old[DRAFTER_MAX_NODES];
    memcpy(old, out->nodes, sizeof(drafter_node) * (size_t)n);
    int queue[TR], qh = 0, qt = 0;
    queue[qt++] = -1;
    while (qh < qt) {
        int par = queue[qh++], kids[DRAFTER_MAX_NODES], nk = 0;
        for (int c = 0; c < n; c++)
            if (old[c].parent == par) {
                int j = nk++;
                while (j > 0 && cnt[c] > cnt[kids[j - 1]]) kids[j] = kids[j - 1], j--;
                kids[j] = c;
            }
        for (int j = 0; j < nk; j++) {
            map[kids[j]] = no;
            order[no++] = kids[j];
            queue[qt++] = kids[j];
        }
    }
    for (int j = 0; j < no; j++) {
        out->nodes[j] = old[order[j]];
        out->nodes[j].parent = (int16_t)(old[order[j]].parent < 0 ? -1 : map[old[order[j]].parent]);
    }
    return out->n_nodes;
}

int draft_tree_step(draft_tree *dt, spec_tree_ctx *tc, spec_seq **S, int n, const tree_shape *sh,
                    const spec_method *how, const int *max_new, spec_step_info *info, char *err, size_t errlen) {
    spec_tree t[64];
    int slot[64];
    double draft_ms[64];
    (void)dt; /* registered with the draft model at its creation: the model proposes through its table */
    if (spec_tree_propose(S[0]->sp, S, n, sh, how, t, slot, draft_ms, err, errlen) != 0) return -1;
    int rc = spec_tree_step(tc, S, n, t, max_new, info, err, errlen);
    if (rc == 0) spec_tree_note(S[0]->sp, S, n, t, sh, slot, draft_ms, info);
    return rc;
}
