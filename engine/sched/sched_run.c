/* sched_run.c — the model work of one engine iteration, without the lock
 * (sched.c runs the loop around it): one prefill chunk, then one step over
 * the running sequences split by path — Medusa trees, draft/n-gram trees,
 * chains in micro-batches — with the auto method's path choice (path_ctl.h)
 * and each call's time noted for the controllers. Engine thread. */
#include "engine/sched/engine_impl.h"

#include <string.h>

/* Tree speculation, engine thread. Picks each tree-enabled sequence's shape
 * for this step (fixed: its bounds; auto: its controller, seeded from the
 * engine-wide one at its first step) and moves the ones that get a tree out of
 * e->bseq[0, n_run) into e->tseq etc., keeping the rest in order at the front.
 * Returns how many moved. mu is not needed: only the engine thread touches
 * these fields. */
static int pick_trees(engine *e, int n_run, int batch) {
    if (!e->tc) return 0;
    int n_tree = 0, n_chain = 0;
    /* auto requests with the engine's bounds share one decision per step,
     * the engine-wide controller's: a tree for some and chains for others
     * would cost two target passes (each reading the weights) where one
     * does; requests with bounds of their own use their own controller */
    const tree_shape lim = {e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    int shared = tree_ctl_pick(&e->tree_prior, batch);
    for (int i = 0; i < n_run; i++) {
        spec_seq *sq = e->bseq[i];
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == sq) r = e->active[j];
        int ent = 0;
        tree_shape sh = {0, 0, 0};
        if (r->tree_mode != ENGINE_TREE_OFF && r->prm.speculate) {
            if (r->tree_mode == ENGINE_TREE_FIXED) {
                ent = 1, sh = r->tree_sh;
            } else {
                if (!r->tctl_seeded) tree_ctl_seed(&r->tctl, &e->tree_prior), r->tctl_seeded = true;
                ent = !memcmp(&r->tree_sh, &lim, sizeof(lim)) ? shared : tree_ctl_pick(&r->tctl, batch);
                sh = r->tctl.menu[ent];
            }
        }
        r->tree_entry = ent;
        if (sh.budget > 0) {
            e->treq[n_tree] = r;
            e->tseq[n_tree] = sq;
            e->tsh[n_tree] = sh;
            e->thow[n_tree] = r->prm.method;
            e->tmax[n_tree] = r->max_tokens - r->n_out;
            e->tent[n_tree++] = ent;
        } else {
            e->bseq[n_chain++] = sq;
        }
    }
    return n_tree;
}

/* Moves the running Medusa sequences (speculation.method medusa) out of
 * e->bseq[0, n_run) into e->useq etc., keeping the rest in order at the
 * front; returns how many moved. Engine thread. */
static int pick_medusa(engine *e, int n_run) {
    ENG_ON_THREAD(e);
    if (!e->dm) return 0;
    int n_med = 0, n_rest = 0;
    for (int i = 0; i < n_run; i++) {
        spec_seq *sq = e->bseq[i];
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == sq) r = e->active[j];
        if (r->ms && r->prm.speculate && (!r->auto_medusa || e->path_arm == 1)) {
            e->ureq[n_med] = r;
            e->useq[n_med] = sq;
            e->ums[n_med] = r->ms;
            e->umax[n_med++] = r->max_tokens - r->n_out;
        } else {
            e->bseq[n_rest++] = sq;
        }
    }
    return n_med;
}

/* One step call over m sequences took per_seq ms for each: noted for each
 * with the call's size and verify rows (the shape controller's inputs). */
static void note_call(const spec_step_info *info, int m, double per_seq, double *ms, int *batch, int *rows) {
    int R = 0;
    for (int k = 0; k < m; k++) R += info[k].gamma + 1;
    for (int k = 0; k < m; k++) ms[k] = per_seq, batch[k] = m, rows[k] = R;
}

/* Largest chunk of tree sequences one call takes: the draft and target
 * batches hold a tree of at most DRAFTER_MAX_NODES + 1 rows each. */
static int tree_chunk(const engine *e) {
    int cap = e->sp->target->mp.max_batch / (DRAFTER_MAX_NODES + 1);
    if (e->cfg.max_batch > 0 && e->cfg.max_batch < cap) cap = e->cfg.max_batch;
    return cap < 1 ? 1 : cap;
}

/* Medusa trees (e->useq[0, n_med)): one target pass per chunk, hidden states
 * kept for the next proposal. Engine thread, no lock. */
static void run_medusa(engine *e, sched_step *w) {
    int cap = tree_chunk(e);
    double t0 = clock_now_ms();
    for (int c0 = 0; c0 < w->n_med && w->med_rc == 0; c0 += cap, w->n_calls++) {
        int m = w->n_med - c0 < cap ? w->n_med - c0 : cap;
        w->med_rc = draft_medusa_step(e->dm, e->tc, e->useq + c0, e->ums + c0, m, &e->medusa_sh, e->umax + c0,
                                      e->uinfo + c0, w->med_err, sizeof(w->med_err));
    }
    w->med_ms = (clock_now_ms() - t0) / w->n_med;
}

/* Draft-model and n-gram trees (e->tseq[0, n_tree)): one draft_tree_step per
 * chunk, each call's time noted for the shape controller. Engine thread, no lock. */
static void run_trees(engine *e, sched_step *w) {
    int cap = tree_chunk(e);
    for (int c0 = 0; c0 < w->n_tree && w->tree_rc == 0; c0 += cap, w->n_calls++) {
        int m = w->n_tree - c0 < cap ? w->n_tree - c0 : cap;
        double t0 = clock_now_ms();
        w->tree_rc = draft_tree_step(e->dt, e->tc, e->tseq + c0, m, e->tsh + c0, e->thow + c0, e->tmax + c0,
                                     e->tinfo + c0, w->tree_err, sizeof(w->tree_err));
        note_call(e->tinfo + c0, m, (clock_now_ms() - t0) / m, e->tms + c0, e->tbatch + c0, e->trows + c0);
    }
}

/* Chains (e->bseq[0, n_chain)): plan γ per sequence, bin equal γ into
 * micro-batches, then per bin its draft calls and ONE verify call (per
 * max_batch chunk). Engine thread, no lock. */
static void run_chains(engine *e, sched_step *w) {
    int n_chain = w->n_chain, n_run = w->n_run, n_pre = w->n_pre;
    for (int i = 0; i < n_chain; i++) {
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == e->bseq[i]) r = e->active[j];
        e->bmax[i] = r->max_tokens - r->n_out;
        /* requests still prefilling join the batch in a few steps, and
         * every step spent verifying drafts delays their first token:
         * the controller plans for the batch they will make */
        int g = spec_seq_plan(e->bseq[i], e->bmax[i], n_run + n_pre);
        if (r->adaptive) g = plan_cap_gamma(g, &e->hist);
        e->gam_all[i] = g;
    }
    int nb = plan_bins(e->gam_all, n_chain, e->cfg.padding_cap, e->bins, e->order, &w->pad);
    if (e->cfg.ragged && nb > 1) {
        /* the backend takes ragged batches: every bin shares ONE verify
         * call (weights read once); the bins are what a rectangular
         * backend would launch, and their padding is reported */
        e->bins[0] = (plan_bin){.gamma = e->bins[nb - 1].gamma, .n = n_chain, .first = 0};
        nb = 1;
    }
    w->nb = nb;
    /* each micro-batch: its draft calls and ONE verify call */
    spec_seq **mseq = e->mseq;
    int *mmax = e->mmax, *mg = e->bgam;
    for (int b = 0; b < nb && w->step_rc == 0; b++) {
        int m = e->bins[b].n;
        for (int k = 0; k < m; k++) {
            int i = e->order[e->bins[b].first + k];
            mseq[k] = e->bseq[i];
            mmax[k] = e->bmax[i];
            mg[k] = e->gam_all[i];
        }
        /* engine.max_batch: at most that many sequences per verify call */
        int cap = e->cfg.max_batch > 0 && e->cfg.max_batch < m ? e->cfg.max_batch : m;
        for (int c0 = 0; c0 < m && w->step_rc == 0; c0 += cap, w->n_calls++) {
            int mc = m - c0 < cap ? m - c0 : cap, at = e->bins[b].first + c0;
            double t0 = clock_now_ms();
            w->step_rc = spec_step_batch_planned(e->sp, mseq + c0, mc, mmax + c0, mg + c0, e->binfo + at,
                                                 w->step_err, sizeof(w->step_err));
            note_call(e->binfo + at, mc, (clock_now_ms() - t0) / mc, e->cms + at, e->cbatch + at, e->crows + at);
        }
        for (int k = 0; k < m && w->step_rc == 0; k++)
            if (e->binfo[e->bins[b].first + k].gamma > 0)
                plan_history_add(&e->hist, e->binfo[e->bins[b].first + k].accepted);
    }
}

/* The model work of one iteration, without the lock: one prefill chunk, then
 * one step over the running sequences, split by path — Medusa trees,
 * draft/n-gram trees (tree-enabled sequences whose shape this step is a tree
 * leave the chain path and share one tree verify pass per chunk), chains.
 * Engine thread. */
void sched_run(engine *e, sched_step *w) {
    ENG_ON_THREAD(e);
    req *pre = w->pre;
    int n_run = w->n_run;
    w->pre_rc = pre ? spec_seq_prefill(pre->seq, e->cfg.prefill_chunk, w->err, sizeof(w->err)) : 0;
    if (pre && w->pre_rc == 1 && pre->ms) medusa_seq_prefilled(e->dm, pre->ms, pre->seq); /* before any other pass */
    w->nb = 0, w->pad = 1.0, w->n_calls = 0;
    w->step_rc = w->tree_rc = w->med_rc = 0;
    e->path_arm = -1;
    for (int i = 0; i < e->n_active && n_run; i++)
        if (e->active[i]->auto_medusa && e->active[i]->state == RQ_RUNNING && !e->active[i]->paused) {
            e->path_arm = path_ctl_pick(&e->pathc, n_run + w->n_pre);
            break;
        }
    memset(e->path_tok, 0, sizeof(e->path_tok));
    memset(e->path_ms, 0, sizeof(e->path_ms));
    w->n_med = n_run ? pick_medusa(e, n_run) : 0;
    w->n_tree = n_run - w->n_med ? pick_trees(e, n_run - w->n_med, n_run + w->n_pre) : 0;
    w->n_chain = n_run - w->n_med - w->n_tree;
    if (w->n_med > 0) run_medusa(e, w);
    if (w->n_tree > 0) run_trees(e, w);
    if (w->n_chain > 0) run_chains(e, w);
}
