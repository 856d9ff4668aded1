/* sched_run.c — the model work of one engine iteration, without the lock
 * (sched.c runs the loop around it): one prefill chunk, then one step over
 * the running sequences. Each sequence takes a path by the SHAPE of its
 * proposal — trees (whatever proposes them: the draft model, the lookup,
 * the Medusa heads, the EAGLE-3 head) or chains (binned by γ; plain steps
 * ride here) — with every sequence's proposer and size chosen by the budget
 * controller (budget.h: the auto method's choice of the heads included);
 * every path proposes first, through the proposers' tables, then ONE target
 * pass verifies all their rows together (split only by engine.max_batch,
 * the target's batch and a rectangular backend), and each path accepts and
 * commits its own sequences from its rows. Each call's time is noted for the
 * controllers.
 * Engine thread. */
#include "engine/sched/engine_impl.h"

#include <string.h>

/* Every running sequence's choice for this step, the budget controller's
 * (budget_pick): a tree (the heads' or a draft/n-gram tree) moves it out of
 * e->bseq[0, n_run) into e->tseq etc., a chain keeps it in order at the
 * front with its γ in e->gam_all and its tokens still wanted in e->bmax.
 * Returns how many took a tree. Sequences still prefilling count in the
 * batch: they join in a few steps, and every step spent verifying drafts
 * delays their first token. mu is not needed: only the engine thread touches
 * these fields. */
static int pick_all(engine *e, int n_run, int batch) {
    int n_tree = 0, n_chain = 0;
    for (int i = 0; i < n_run; i++) {
        spec_seq *sq = e->bseq[i];
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == sq) r = e->active[j];
        int max_new = r->max_tokens - r->n_out;
        budget_choice c = budget_pick(&e->bud, sq, max_new, batch, r->auto_medusa);
        if (c.shape.budget > 0) {
            e->treq[n_tree] = r;
            e->tseq[n_tree] = sq;
            e->tsh[n_tree] = c.shape;
            e->thow[n_tree] = (spec_method)c.how;
            e->tmax[n_tree++] = max_new;
        } else {
            e->bmax[n_chain] = max_new;
            e->gam_all[n_chain] = c.gamma;
            e->bseq[n_chain++] = sq;
        }
    }
    return n_tree;
}

/* Trees (e->tseq[0, n)): each sequence's proposer asked through its table,
 * one batched call per proposer (all draft-model trees share one draft
 * forward per depth), and their verify rows. */
static int propose_trees(engine *e, sched_step *w, model_seq *ms, char *err, size_t errlen) {
    int n = w->n_path[SCHED_PATH_TREE];
    if (spec_tree_propose(e->sp, e->tseq, n, e->tsh, e->thow, e->ttree, e->tslot, e->tdms, err, errlen) != 0)
        return -1;
    return spec_tree_prepare(e->tc, e->tseq, n, e->ttree, e->tmax, e->tinfo, ms, err, errlen) < 0 ? -1 : 0;
}

static void finish_trees(engine *e, int i0, int m, float *lg, int row, double call_ms, int call_rows) {
    spec_tree_finish(e->tc, e->tseq, i0, m, lg, row, call_ms, call_rows, e->tinfo, NULL);
}

/* After the pass: proposers, times and counters per step, and each
 * proposer's own evidence (tree_done). */
static void done_trees(engine *e, sched_step *w) {
    int n = w->n_path[SCHED_PATH_TREE];
    spec_tree_note(e->sp, e->tseq, n, e->ttree, e->tsh, e->tslot, e->tdms, e->tinfo);
    for (int k = 0; k < n; k++) e->vshare[SCHED_PATH_TREE][k] += e->tinfo[k].draft_ms;
}

/* Chains (e->bseq[0, n), their γ chosen by pick_all): binned by equal γ
 * (what a rectangular backend launches; reported), then every chain's draft
 * calls and verify rows, in bin order (e->mseq, e->binfo). */
static int propose_chains(engine *e, sched_step *w, model_seq *ms, char *err, size_t errlen) {
    int n_chain = w->n_path[SCHED_PATH_CHAIN];
    w->nb = plan_bins(e->gam_all, n_chain, e->cfg.padding_cap, e->bins, e->order, &w->pad);
    if (e->cfg.ragged && w->nb > 1) {
        /* the backend takes ragged batches: the bins share the pass (what a
         * rectangular backend would launch stays in the padding report) */
        e->bins[0] = (plan_bin){.gamma = e->bins[w->nb - 1].gamma, .n = n_chain, .first = 0};
        w->nb = 1;
    }
    for (int j = 0; j < n_chain; j++) {
        int i = e->order[j];
        e->mseq[j] = e->bseq[i];
        e->mmax[j] = e->bmax[i];
        e->bgam[j] = e->gam_all[i];
    }
    return spec_chain_prepare(e->sp, e->mseq, n_chain, e->mmax, e->bgam, e->binfo, ms, err, errlen) < 0 ? -1 : 0;
}

static void finish_chains(engine *e, int i0, int m, float *lg, int row, double call_ms, int call_rows) {
    spec_chain_finish(e->sp, e->mseq + i0, m, lg, row, call_ms, call_rows, e->binfo + i0);
}

static void done_chains(engine *e, sched_step *w) {
    for (int j = 0; j < w->n_path[SCHED_PATH_CHAIN]; j++) e->vshare[SCHED_PATH_CHAIN][j] += e->binfo[j].draft_ms;
}

static void abort_chains(engine *e, int i) { spec_chain_abort(e->sp, e->mseq + i, 1); }

/* The paths as one table, in SCHED_PATH_* order: propose (every sequence's
 * verify rows into ms; -1 with err fails the path's sequences), finish
 * (accept and commit sequences [i0, i0+m) from their rows of a call),
 * done (after the pass, when the path's step succeeded), abort (a
 * sequence whose call failed; NULL: nothing to undo). */
static const struct sched_path_i {
    int (*propose)(engine *e, sched_step *w, model_seq *ms, char *err, size_t errlen);
    void (*finish)(engine *e, int i0, int m, float *lg, int row, double call_ms, int call_rows);
    void (*done)(engine *e, sched_step *w);
    void (*abort)(engine *e, int i);
} paths[SCHED_PATHS] = {
    [SCHED_PATH_TREE] = {propose_trees, finish_trees, done_trees, NULL},
    [SCHED_PATH_CHAIN] = {propose_chains, finish_chains, done_chains, abort_chains},
};

/* Whether unit u must open a new target call: a rectangular backend
 * (engine.ragged false) takes one path, one chain bin, per call. */
static bool call_boundary(const engine *e, const sched_step *w, int u) {
    if (e->cfg.ragged || u == 0) return false;
    if (e->vunit[u].path != e->vunit[u - 1].path) return true;
    if (e->vunit[u].path != SCHED_PATH_CHAIN) return false;
    for (int b = 0; b < w->nb; b++)
        if (e->bins[b].first == e->vunit[u].i) return true;
    return false;
}

/* Proposals first, then every stepped sequence's verify rows through as few
 * target calls as the limits allow — ONE when they fit (engine.max_batch
 * sequences, the target's max_batch rows, the pair's verify scratch) —
 * whatever proposed them; each call's rows go back to their paths. */
static void run_pass(engine *e, sched_step *w) {
    spec_pair *sp = e->sp;
    size_t V = (size_t)sp->n_vocab;
    int nu = 0, at = 0;
    for (int p = 0; p < SCHED_PATHS; p++) {
        int n = w->n_path[p];
        w->path_rc[p] = n ? paths[p].propose(e, w, e->vms + at, w->path_err[p], sizeof(w->path_err[p])) : 0;
        if (w->path_rc[p] == 0) /* the path's rows join the pass, compacted in path order */
            for (int i = 0; i < n; i++) {
                e->vms[nu] = e->vms[at + i];
                e->vunit[nu++] = (__typeof__(*e->vunit)){p, i};
            }
        at = nu;
    }
    int cap_rows = sp->target->mp.max_batch < sp->logit_rows ? sp->target->mp.max_batch : sp->logit_rows;
    int cap_seqs = e->cfg.max_batch > 0 ? e->cfg.max_batch : nu;
    for (int u = 0; u < nu;) {
        int k = 0, rows = 0;
        while (u + k < nu && k < cap_seqs && rows + e->vms[u + k].n <= cap_rows && !(k > 0 && call_boundary(e, w, u + k)))
            rows += e->vms[u + k].n, k++;
        double tt;
        char err[512];
        w->n_calls++;
        if (spec_pair_verify(sp, e->vms + u, k, &tt, err, sizeof(err)) != 0) {
            /* every sequence not stepped yet fails with its path */
            for (int v = u; v < nu; v++) {
                int p = e->vunit[v].path;
                if (w->path_rc[p] == 0) w->path_rc[p] = -1, snprintf(w->path_err[p], sizeof(w->path_err[p]), "%s", err);
                if (paths[p].abort) paths[p].abort(e, e->vunit[v].i);
            }
            return;
        }
        /* each run of one path's units at once */
        int row = 0;
        for (int v = u; v < u + k;) {
            int p = e->vunit[v].path, m = 1, prow = e->vms[v].n;
            while (v + m < u + k && e->vunit[v + m].path == p) prow += e->vms[v + m].n, m++;
            paths[p].finish(e, e->vunit[v].i, m, sp->logits + (size_t)row * V, row, tt, rows);
            for (int j = e->vunit[v].i; j < e->vunit[v].i + m; j++)
                e->vshare[p][j] = tt / k, e->vbatch[p][j] = k, e->vrows[p][j] = rows;
            w->mixed |= p != e->vunit[u].path;
            row += prow;
            v += m;
        }
        u += k;
    }
    for (int p = 0; p < SCHED_PATHS; p++)
        if (w->n_path[p] && w->path_rc[p] == 0) paths[p].done(e, w);
}

/* The model work of one iteration, without the lock: one prefill chunk, then
 * one step over the running sequences, split by the shape of their
 * proposals — trees (the heads' sequences and tree-enabled ones whose shape
 * this step is a tree), chains — and verified in ONE target pass
 * (run_pass). Engine thread. */
void sched_run(engine *e, sched_step *w) {
    ENG_ON_THREAD(e);
    req *pre = w->pre;
    int n_run = w->n_run;
    /* a finished prefill hands its hidden state to the heads (spec_seq_observe_hidden) */
    w->pre_rc = pre ? spec_seq_prefill(pre->seq, e->cfg.prefill_chunk, w->err, sizeof(w->err)) : 0;
    w->nb = 0, w->pad = 1.0, w->n_calls = 0, w->mixed = false;
    bool heads_auto = false; /* an auto sequence with heads runs: the step's path choice */
    for (int i = 0; i < e->n_active && n_run; i++)
        heads_auto |= e->active[i]->auto_medusa && e->active[i]->state == RQ_RUNNING && !e->active[i]->paused;
    budget_step_begin(&e->bud, n_run + w->n_pre, heads_auto);
    int n_tree = n_run ? pick_all(e, n_run, n_run + w->n_pre) : 0;
    w->n_path[SCHED_PATH_TREE] = n_tree;
    w->n_path[SCHED_PATH_CHAIN] = n_run - n_tree;
    if (n_run) run_pass(e, w);
}
