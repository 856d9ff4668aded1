/* spec_tree.c — the engine's tree speculation step (see spec_tree.h). */
#include "engine/spec/spec_tree.h"
#include "engine/util.h"

#include "engine/grammar/grammar.h"
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TR (DRAFTER_MAX_NODES + 1) /* verify rows of one tree: the root and its nodes */

struct spec_tree_ctx {
    spec_pair *sp;
    int32_t *tokens, *pos;      /* (max_seqs, TR) verify rows */
    uint8_t *mask;              /* (max_seqs, TR, TR) ancestor masks */
    float *p;                   /* (TR, V) the sequence being accepted */
    double *scratch;            /* (2 V) */
    model_seq *ms;              /* (max_seqs) */
    spec_tree *cut;             /* (max_seqs) the trees as verified */
    int (*qrow)[DRAFTER_MAX_NODES]; /* (max_seqs) the q row of each verified node in its proposed tree */
    int32_t (*gst)[DRAFTER_MAX_NODES]; /* (max_seqs) grammar state after each verified node (constrained) */
    float *qc;                  /* (DRAFTER_MAX_NODES, V) q rows of a cut tree */
    int *hrow;                  /* (max_seqs) the output row behind each sequence's last token */
    tree_variant variant;
};

void spec_tree_set_variant(spec_tree_ctx *tc, tree_variant v) { tc->variant = v; }

spec_tree_ctx *spec_tree_create(spec_pair *sp) {
    spec_tree_ctx *tc = calloc(1, sizeof(*tc));
    if (!tc) return NULL;
    size_t S = (size_t)sp->max_seqs, V = (size_t)sp->n_vocab;
    tc->sp = sp;
    tc->tokens = malloc(sizeof(int32_t) * S * TR);
    tc->pos = malloc(sizeof(int32_t) * S * TR);
    tc->mask = malloc(S * TR * TR);
    tc->p = malloc(sizeof(float) * TR * V);
    tc->scratch = malloc(sizeof(double) * 2 * V);
    tc->ms = malloc(sizeof(model_seq) * S);
    tc->cut = malloc(sizeof(spec_tree) * S);
    tc->qrow = malloc(sizeof(*tc->qrow) * S);
    tc->qc = malloc(sizeof(float) * DRAFTER_MAX_NODES * V);
    tc->gst = malloc(sizeof(*tc->gst) * S);
    tc->hrow = malloc(sizeof(int) * S);
    if (!tc->hrow || !tc->tokens || !tc->pos || !tc->mask || !tc->p || !tc->scratch || !tc->ms ||
        !tc->cut || !tc->qrow || !tc->qc || !tc->gst || spec_pair_reserve_rows(sp, (int)(S * TR)) != 0) {
        spec_tree_destroy(tc);
        return NULL;
    }
    return tc;
}

void spec_tree_destroy(spec_tree_ctx *tc) {
    if (!tc) return;
    free(tc->tokens);
    free(tc->pos);
    free(tc->mask);
    free(tc->p);
    free(tc->scratch);
    free(tc->ms);
    free(tc->cut);
    free(tc->qrow);
    free(tc->qc);
    free(tc->gst);
    free(tc->hrow);
    free(tc);
}

/* Constrained sequences: drops every node the grammar refuses after its
 * ancestors (and the subtree below it), in place, and fills gst with the
 * state after each kept node. Only deterministic nodes can be refused (a
 * sampled one was drawn from the masked q), and the cut depends on the
 * context and the proposal alone, so the acceptance stays lossless (as for
 * the chain's grammar_cut in spec.c). qrow is remapped with the nodes. */
static void grammar_cut_tree(const spec_seq *s, spec_tree *t, int *qrow, int32_t *gst) {
    grammar_matcher *m = s->prm.grammar;
    int map[DRAFTER_MAX_NODES], depth[DRAFTER_MAX_NODES], n = 0;
    for (int i = 0; i < t->n_nodes; i++) {
        int pa = t->nodes[i].parent;
        map[i] = -1;
        if (pa >= 0 && map[pa] < 0) continue;
        int32_t from = pa < 0 ? s->gst : gst[map[pa]];
        int d = pa < 0 ? 1 : depth[map[pa]] + 1;
        if (!grammar_allows(m, from, spec_seq_grammar_budget(s, s->n_tokens + d - 1), t->nodes[i].token)) continue;
        map[i] = n;
        gst[n] = grammar_advance_token(m, from, t->nodes[i].token);
        depth[n] = d;
        qrow[n] = qrow[i];
        t->nodes[n] = t->nodes[i];
        t->nodes[n].parent = (int16_t)(pa < 0 ? -1 : map[pa]);
        n++;
    }
    t->n_nodes = n;
}

/* The tree cut to nodes of depth <= max_depth (node order and parents kept,
 * indices remapped). q rows are not moved: the map is kept in qrow. */
static void cut_tree(spec_tree *out, int *qrow, const spec_tree *in, int max_depth) {
    int depth[DRAFTER_MAX_NODES], map[DRAFTER_MAX_NODES];
    out->n_nodes = 0;
    out->q = in->q;
    for (int i = 0; i < in->n_nodes; i++) {
        int pa = in->nodes[i].parent;
        depth[i] = pa < 0 ? 1 : depth[pa] + 1;
        map[i] = -1;
        if (depth[i] > max_depth || (pa >= 0 && map[pa] < 0)) continue;
        map[i] = out->n_nodes;
        qrow[out->n_nodes] = i;
        out->nodes[out->n_nodes] = in->nodes[i];
        out->nodes[out->n_nodes].parent = (int16_t)(pa < 0 ? -1 : map[pa]);
        out->n_nodes++;
    }
}

int spec_tree_step(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                   spec_step_info *info, char *err, size_t errlen) {
    return spec_tree_step_h(tc, S, n, trees, max_new, info, NULL, err, errlen);
}

int spec_tree_step_h(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                     spec_step_info *info, float *hidden, char *err, size_t errlen) {
    int rows = spec_tree_prepare(tc, S, n, trees, max_new, info, tc->ms, err, errlen);
    if (rows < 0) return -1;
    double tt;
    if (spec_pair_verify(tc->sp, tc->ms, n, &tt, err, errlen) != 0) return -1;
    spec_tree_finish(tc, S, 0, n, tc->sp->logits, 0, tt, rows, info, hidden);
    return 0;
}

int spec_tree_prepare(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                      spec_step_info *info, model_seq *ms, char *err, size_t errlen) {
    spec_pair *sp = tc->sp;
    size_t V = (size_t)sp->n_vocab;
    if (n < 1 || n > sp->max_seqs) return util_fail(err, errlen, "batch of %d sequences (limit %d)", n, sp->max_seqs);
    int rows = 0;
    for (int i = 0; i < n; i++) {
        spec_seq *s = S[i];
        memset(&info[i], 0, sizeof(info[i]));
        info[i].method = -1;
        if (!s->prefilled) return util_fail(err, errlen, "sequence %d is still prefilling", i);
        if (max_new[i] < 1) return util_fail(err, errlen, "max_new must be >= 1");
        if (spec_seq_check_kv(s, err, errlen) < 0) return -1; /* the cache invariant, as every chain step checks it */
        if (s->n_tokens > sp->max_ctx) return util_fail(err, errlen, "context full (%d tokens)", s->n_tokens);
        if (!tree_validate(trees[i].nodes, trees[i].n_nodes, (int)V, NULL))
            return util_fail(err, errlen, "sequence %d: invalid tree", i);
        cut_tree(&tc->cut[i], tc->qrow[i], &trees[i], max_new[i] - 1);
        if (s->prm.grammar) grammar_cut_tree(s, &tc->cut[i], tc->qrow[i], tc->gst[i]);
        /* the verify rows must fit the context; else a plain step */
        if (s->n_tokens + tc->cut[i].n_nodes > sp->max_ctx) tc->cut[i].n_nodes = 0;
        int32_t *tk = tc->tokens + (size_t)i * TR, *ps = tc->pos + (size_t)i * TR;
        uint8_t *mk = tc->mask + (size_t)i * TR * TR;
        int R = tree_rows(tk, ps, mk, s->tokens[s->n_tokens - 1], s->n_tokens - 1, tc->cut[i].nodes,
                          tc->cut[i].n_nodes, (int)V);
        tc->ms[i] = (model_seq){.kv = s->tkv, .n = R, .tokens = tk, .pos = ps, .mask = mk, .all_logits = true};
        if (ms != tc->ms) ms[i] = tc->ms[i];
        rows += R;
    }
    if (rows > sp->target->mp.max_batch)
        return util_fail(err, errlen, "%d verify rows exceed the target's batch of %d", rows, sp->target->mp.max_batch);
    return rows;
}

void spec_tree_finish(spec_tree_ctx *tc, spec_seq **S, int i0, int n, float *logits, int row0, double tt, int rows,
                      spec_step_info *info, float *hidden) {
    spec_pair *sp = tc->sp;
    size_t V = (size_t)sp->n_vocab;
    size_t row = 0;
    for (int i = i0; i < i0 + n; i++) {
        spec_seq *s = S[i];
        const spec_tree *t = &tc->cut[i];
        int N = s->n_tokens, nn = t->n_nodes;
        float *lg = logits + row * V;
        size_t rbase = row;
        row += (size_t)nn + 1;
        if (s->prm.grammar && !s->prm.grammar_broken) { /* each row masked by the state after its node's path,
                                                          * as the draft's q was (grammar_broken: tests only) */
            int dep[TR];
            tree_validate(t->nodes, nn, (int)V, dep);
            grammar_mask_logits(s->prm.grammar, s->gst, spec_seq_grammar_budget(s, N), lg);
            for (int j = 0; j < nn; j++)
                grammar_mask_logits(s->prm.grammar, tc->gst[i][j], spec_seq_grammar_budget(s, N + dep[j]), lg + (size_t)(j + 1) * V);
        }
        for (int r = 0; r <= nn; r++) sampler_probs(sp->smp, &s->prm.sc, lg + (size_t)r * V, tc->p + (size_t)r * V);
        /* q rows in the cut tree's order: point the view at a compact copy
         * only when the cut dropped nodes before a sampled one */
        const float *q = t->q;
        bool ident = true;
        for (int j = 0; j < nn; j++) ident &= tc->qrow[i][j] == j;
        if (q && !ident) {
            for (int j = 0; j < nn; j++) memcpy(tc->qc + (size_t)j * V, q + (size_t)tc->qrow[i][j] * V, sizeof(float) * V);
            q = tc->qc;
        }
        tree_view tv = {nn, t->nodes, tc->p, q, (int)V};
        tree_rng rng = {s->prm.seed, (uint64_t)N, tc->variant};
        int32_t out[TR];
        int16_t path[DRAFTER_MAX_NODES];
        int k = tree_accept(out, path, &tv, s->prm.sc.temperature == 0.0f, &rng, tc->scratch);
        int n_new = k + 1;
        for (int j = 0; j < n_new; j++)
            if (tok_is_eog(sp->tok, out[j])) {
                n_new = j + 1;
                info[i].stopped = true;
                break;
            }
        /* compaction: the path's rows sit at N + path[j]; move them to N + j */
        int src[DRAFTER_MAX_NODES], dst[DRAFTER_MAX_NODES], nm = 0;
        int keep = n_new - 1 < k ? n_new - 1 : k; /* path nodes that stay in the cache (the last token is not cached) */
        for (int j = 0; j < keep; j++)
            if (path[j] != j) src[nm] = N + path[j], dst[nm++] = N + j;
        if (nm && kv_seq_move(sp->tpool, s->tkv, dst, src, nm) != 0) {
            /* cannot happen (the forward made these blocks private): keep only
             * the first token, a target draw whose KV is not needed yet */
            n_new = 1;
            info[i].stopped = tok_is_eog(sp->tok, out[0]);
            s->st.kv_resets++;
        }
        memcpy(s->tokens + N, out, sizeof(int32_t) * (size_t)n_new);
        s->n_tokens = N + n_new;
        if (s->prm.grammar) /* the committed state: advanced by the appended tokens only */
            for (int j = 0; j < n_new; j++) s->gst = grammar_advance_token(s->prm.grammar, s->gst, out[j]);
        kv_seq_truncate(sp->tpool, s->tkv, s->n_tokens - 1);
        for (int d = 0; d < SPEC_DRAFTERS; d++)
            if (s->ds[d]) sp->drafters[d]->i->commit(sp->drafters[d], s->ds[d], s->tokens, s->n_tokens - 1);
        double share = tt * tc->ms[i].n / rows; /* its verify rows' share of the call */
        s->st.target_ms += share;
        s->st.tokens += (uint64_t)n_new;
        bool bonus = false;
        if (nn == 0) {
            s->st.plain_steps++;
        } else {
            /* per depth: the path reached depth j+1 when the path node at depth
             * j (the root for j = 0) has children; accepted when k > j */
            bool kids[TR] = {false};
            for (int j = 0; j < nn; j++) kids[t->nodes[j].parent + 1] = true;
            int reached = 0;
            while (reached <= k && reached < GAMMA_MAX && kids[reached == 0 ? 0 : path[reached - 1] + 1]) reached++;
            bonus = reached == k; /* the last path node is a leaf: every draft on the path accepted */
            s->st.verify_steps++;
            s->st.drafted += (uint64_t)nn;
            s->st.accepted += (uint64_t)k;
            s->st.rejections += !bonus;
            for (int j = 0; j < reached; j++) s->st.pos_reached[j]++;
            for (int j = 0; j < k && j < GAMMA_MAX; j++) s->st.pos_accepted[j]++;
            bool chain = true;
            for (int j = 0; j < nn; j++) chain &= t->nodes[j].parent == j - 1;
            s->st.tree_steps += !chain;
            s->st.tree_nodes += (uint64_t)nn;
        }
        info[i].bonus = bonus && n_new == k + 1;
        /* out[j] came from row 0 (j = 0) or the row of path node j-1 */
        tc->hrow[i] = row0 + (int)rbase + (n_new == 1 ? 0 : 1 + path[n_new - 2]);
        if (sp->n_feat) { /* the rows that fed the committed tokens: the root's, then the path's */
            int fr[DRAFTER_MAX_NODES + 1];
            fr[0] = row0 + (int)rbase;
            for (int j = 1; j < n_new; j++) fr[j] = row0 + (int)rbase + 1 + path[j - 1];
            spec_seq_observe_features(s, fr, n_new, N - 1);
        }
        info[i].n_new = n_new;
        info[i].gamma = nn;
        info[i].nodes = nn;
        int lvl[TR] = {0}, depth = 0; /* a node's level: its parent's + 1 (parents come first) */
        for (int j = 0; j < nn; j++) {
            lvl[j] = t->nodes[j].parent < 0 ? 1 : lvl[t->nodes[j].parent] + 1;
            depth = lvl[j] > depth ? lvl[j] : depth;
        }
        info[i].depth = depth;
        info[i].tree = nn > 0;
        info[i].accepted = k < n_new ? k : n_new;
        info[i].target_ms = share;
    }
    if (hidden) model_hidden_rows(sp->target, hidden, tc->hrow + i0, n);
    for (int i = i0; i < i0 + n; i++) spec_seq_observe_hidden(S[i], tc->hrow[i]);
}

/* ---- proposals through the proposer tables ------------------------------- */

#define PROPOSE_MAX 64

/* The proposers a method asks, in the order it asks them (AUTO: the lookup
 * first, it is nearly free, then the EAGLE head when one is loaded, then the
 * draft model); returns how many. */
static int method_slots(spec_method m, int *out) {
    switch (m) {
    case SPEC_METHOD_DRAFT: out[0] = SPEC_DRAFTER_MODEL; return 1;
    case SPEC_METHOD_NGRAM: out[0] = SPEC_DRAFTER_NGRAM; return 1;
    case SPEC_METHOD_AUTO: out[0] = SPEC_DRAFTER_NGRAM, out[1] = SPEC_DRAFTER_EAGLE, out[2] = SPEC_DRAFTER_MODEL; return 3;
    case SPEC_METHOD_MEDUSA: out[0] = SPEC_DRAFTER_MEDUSA; return 1;
    case SPEC_METHOD_EAGLE: out[0] = SPEC_DRAFTER_EAGLE; return 1;
    default: return 0;
    }
}

/* The order proposers are called in, cheapest first; every method's own
 * order above is a subsequence of it, so one call per proposer serves every
 * sequence that reaches it (the draft model's trees of DRAFT sequences and
 * of AUTO sequences the lookup left without a tree share one draft forward
 * per depth). */
static const int call_order[SPEC_DRAFTERS] = {SPEC_DRAFTER_NGRAM, SPEC_DRAFTER_MEDUSA, SPEC_DRAFTER_EAGLE,
                                              SPEC_DRAFTER_MODEL};

int spec_tree_propose(spec_pair *sp, spec_seq **S, int n, const tree_shape *sh, const spec_method *how, spec_tree *t,
                      int *slot, double *draft_ms, char *err, size_t errlen) {
    if (n > PROPOSE_MAX) return util_fail(err, errlen, "tree batch of %d (limit %d)", n, PROPOSE_MAX);
    int order[PROPOSE_MAX][3], n_ord[PROPOSE_MAX];
    bool done[PROPOSE_MAX];
    for (int i = 0; i < n; i++) {
        t[i] = (spec_tree){0};
        slot[i] = -1;
        draft_ms[i] = 0;
        done[i] = false;
        n_ord[i] = sh[i].budget > 0 ? method_slots(how ? how[i] : SPEC_METHOD_DRAFT, order[i]) : 0;
    }
    drafter_tree_prop props[PROPOSE_MAX];
    int who[PROPOSE_MAX];
    for (int c = 0; c < SPEC_DRAFTERS; c++) {
        int d = call_order[c];
        drafter *dr = sp->drafters[d];
        if (!drafter_trees(dr)) continue;
        int m = 0;
        for (int i = 0; i < n; i++) {
            bool mine = false;
            for (int j = 0; j < n_ord[i]; j++) mine |= order[i][j] == d;
            if (done[i] || !mine) continue;
            props[m] = (drafter_tree_prop){.s = S[i], .ds = S[i]->ds[d], .budget = sh[i].budget, .depth = sh[i].depth,
                                           .topk = sh[i].topk};
            who[m++] = i;
        }
        if (!m) continue;
        char derr[256];
        int rc = dr->i->propose_tree(dr, props, m, derr, sizeof(derr));
        for (int k = 0; k < m; k++) {
            int i = who[k];
            if (rc != 0) { /* a plain step for them */
                S[i]->st.draft_failures++;
                done[i] = true;
                continue;
            }
            t[i] = props[k].tree;
            draft_ms[i] += props[k].draft_ms;
            slot[i] = d; /* the proposer whose answer stands (its tree_done sees the step, even a plain one) */
            done[i] = t[i].n_nodes > 0; /* none: the method's next proposer, if any */
        }
    }
    return 0;
}

void spec_tree_note(spec_pair *sp, spec_seq **S, int n, const spec_tree *t, const tree_shape *sh, const int *slot,
                    const double *draft_ms, spec_step_info *info) {
    for (int i = 0; i < n; i++) {
        info[i].method = info[i].gamma > 0 ? slot[i] : -1;
        info[i].draft_ms = draft_ms[i];
        S[i]->st.draft_ms += draft_ms[i];
        if (info[i].method >= 0) spec_method_stats_note(&S[i]->st.by[slot[i]], &info[i]);
    }
    drafter_tree_prop props[PROPOSE_MAX];
    spec_step_info inf[PROPOSE_MAX];
    for (int d = 0; d < SPEC_DRAFTERS; d++) {
        drafter *dr = sp->drafters[d];
        if (!dr || !dr->i->tree_done) continue;
        int m = 0;
        for (int i = 0; i < n && i < PROPOSE_MAX; i++) {
            if (slot[i] != d) continue;
            props[m] = (drafter_tree_prop){.s = S[i], .ds = S[i]->ds[d], .budget = sh[i].budget, .depth = sh[i].depth,
                                           .topk = sh[i].topk, .tree = t[i], .draft_ms = draft_ms[i]};
            inf[m++] = info[i];
        }
        if (m) dr->i->tree_done(dr, props, m, inf);
    }
}
