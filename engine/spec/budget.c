/* budget.c — the one budget controller: which proposer and how much, per
 * sequence and step (see budget.h). */
#include "engine/spec/budget.h"
#include "engine/spec/spec.h"

#include "kernels/check.h"

#include <stdlib.h>
#include <string.h>

#define BATCH_MARGIN 0.15

/* "engine thread only": a chain controller's updates come from its owner */
#ifndef NDEBUG
#define CTL_OWNED(g) SPECD_CHECK(pthread_equal((g)->owner, pthread_self()))
#else
#define CTL_OWNED(g) ((void)(g))
#endif

/* ---- one proposer's chains --------------------------------------------------- */

void budget_chain_init(budget_chain *g, const gamma_params *p) {
    memset(g, 0, sizeof(*g));
    g->prm = *p;
    g->gamma = p->gamma_default;
#ifndef NDEBUG
    g->owner = pthread_self();
#endif
}

void budget_chain_set_params(budget_chain *g, const gamma_params *p) {
    CTL_OWNED(g);
    g->prm = *p;
    if (g->gamma > p->gamma_max) g->gamma = p->gamma_max;
    if (g->gamma < p->gamma_min) g->gamma = p->gamma_min;
}

double budget_chain_alpha(const budget_chain *g) {
    int acc = 0, rej = 0;
    for (int i = 0; i < g->n; i++) {
        acc += g->acc[i];
        rej += g->rej[i];
    }
    if (acc + rej == 0) return -1.0;
    return (double)acc / (acc + rej);
}

static void window_reset(budget_chain *g) { g->n = g->head = g->steps = g->low_streak = 0; }

/* Whether plain decoding beats the best γ in [gamma_min, gamma_max] at this
 * batch size and acceptance a; *best gets that γ. */
static bool plain_wins(const budget_chain *g, const gamma_costs *c, double a, int batch, int ctx, int *best) {
    double best_rate = -1;
    *best = g->prm.gamma_min;
    for (int k = g->prm.gamma_min; k <= g->prm.gamma_max; k++) {
        double r = gamma_rate_batch(c, a, k, batch, ctx);
        if (r > best_rate) best_rate = r, *best = k;
    }
    /* in a batch, drafting must promise BATCH_MARGIN more: each sequence
     * plans as if the whole batch drafted like it, and the big-batch slope is
     * learned from noisy passes; a wrong "draft" costs the whole batch's
     * throughput (measured: predicted gains of 6-13% at concurrency 8 were
     * losses of 10%), a wrong "plain" only this sequence's speedup */
    double margin = batch > 1 ? 1.0 + BATCH_MARGIN : 1.0;
    return gamma_rate_batch(c, a, 0, batch, ctx) * margin > best_rate;
}

int budget_chain_next(budget_chain *g, const gamma_costs *c, int batch, int ctx) {
    return budget_chain_next_prior(g, c, batch, ctx, BUDGET_PRIOR_ALPHA);
}

int budget_chain_next_prior(budget_chain *g, const gamma_costs *c, int batch, int ctx, double prior) {
    CTL_OWNED(g);
    if (g->plain_left > 0) return 0;
    bool may_skip = g->prm.adaptive && batch > 1 && g->prm.fallback_alpha > 0;
    int best;
    if (!g->prm.adaptive || g->steps < g->prm.warmup) {
        g->gamma = g->prm.adaptive ? g->prm.gamma_default : g->gamma;
        /* warm-up at a big batch: with no α of its own yet, the sequence asks
         * the cost model at the prior (the engine's pooled α); drafting
         * starts once it pays (or the batch shrinks), and its first verify
         * steps then fill the window. A probe (prior < 0) drafts. */
        if (may_skip && prior >= 0 && plain_wins(g, c, prior, batch, ctx, &best)) return 0;
        return g->gamma;
    }
    double a = budget_chain_alpha(g);
    if (a < 0) return g->gamma;
    bool plain = plain_wins(g, c, a, batch, ctx, &best);
    g->gamma = best;
    /* plain decoding is faster at this batch size: skip drafting this step,
     * but keep the window so speculation returns when the batch shrinks */
    return may_skip && plain ? 0 : best;
}

void budget_chain_observe(budget_chain *g, int gamma, int accepted) {
    CTL_OWNED(g);
    int w = g->prm.window;
    int slot = g->n < w ? g->n++ : g->head;
    if (g->n == w && slot == g->head) g->head = (g->head + 1) % w;
    g->acc[slot] = (uint8_t)accepted;
    g->rej[slot] = accepted < gamma;
    g->steps++;
    double a = budget_chain_alpha(g);
    bool decided = g->steps >= g->prm.warmup && a >= 0;
    if (decided && a < g->prm.fallback_alpha) g->low_streak++;
    else g->low_streak = 0;
    if (decided && a >= g->prm.fallback_alpha) g->probing = false; /* the probe found α recovered */
    if (g->low_streak >= (g->probing ? 1 : g->prm.fallback_steps)) {
        g->plain_left = g->prm.probe_interval;
        g->fallbacks++;
        window_reset(g);
    }
}

void budget_chain_observe_plain(budget_chain *g) {
    CTL_OWNED(g);
    if (g->plain_left > 0 && --g->plain_left == 0) {
        g->probes++;
        g->probing = true;
        window_reset(g);
    }
}

void budget_chain_fail(budget_chain *g) {
    CTL_OWNED(g);
    g->plain_left = g->prm.probe_interval;
    g->fallbacks++;
    window_reset(g);
}

/* ---- a sequence's state ------------------------------------------------------- */

void budget_seq_init(budget_seq *bs, const gamma_params *gp, bool asked) {
    memset(bs, 0, sizeof(*bs));
    for (int i = 0; i < SPEC_PROPOSERS; i++) budget_chain_init(&bs->chain[i], gp);
    bs->asked = asked;
    bs->trees.mode = ENGINE_TREE_OFF;
}

void budget_seq_set_params(budget_seq *bs, const gamma_params *gp) {
    for (int i = 0; i < SPEC_PROPOSERS; i++) budget_chain_set_params(&bs->chain[i], gp);
}

void budget_seq_verified(budget_seq *bs, int slot, int gamma, int accepted) {
    SPECD_CHECK(slot >= 0 && slot < SPEC_PROPOSERS);
    budget_chain_observe(&bs->chain[slot], gamma, accepted);
}

void budget_seq_plain(budget_seq *bs, const bool used[SPEC_PROPOSERS]) {
    for (int i = 0; i < SPEC_PROPOSERS; i++)
        if (used[i]) budget_chain_observe_plain(&bs->chain[i]);
}

void budget_seq_restart(budget_seq *bs, int slot) {
    SPECD_CHECK(slot >= 0 && slot < SPEC_PROPOSERS);
    budget_chain *g = &bs->chain[slot];
    CTL_OWNED(g);
    window_reset(g);
    g->plain_left = 0;
    g->probing = false;
    g->gamma = g->prm.adaptive ? g->prm.gamma_default : g->gamma;
}

void budget_seq_failed(budget_seq *bs, int slot) {
    SPECD_CHECK(slot >= 0 && slot < SPEC_PROPOSERS);
    budget_chain_fail(&bs->chain[slot]);
}

uint64_t budget_seq_fallbacks(const budget_seq *bs) {
    uint64_t n = 0;
    for (int i = 0; i < SPEC_PROPOSERS; i++) n += bs->chain[i].fallbacks;
    return n;
}

uint64_t budget_seq_probes(const budget_seq *bs) {
    uint64_t n = 0;
    for (int i = 0; i < SPEC_PROPOSERS; i++) n += bs->chain[i].probes;
    return n;
}

double budget_seq_alpha(const budget_seq *bs, int method) {
    return budget_chain_alpha(&bs->chain[method == SPEC_METHOD_EAGLE ? SPEC_DRAFTER_EAGLE : SPEC_DRAFTER_MODEL]);
}

/* ---- the outlier cap ----------------------------------------------------------- */

void budget_history_add(budget_history *h, int accepted) {
    SPECD_CHECK(accepted >= 0 && accepted <= GAMMA_MAX);
    SPECD_CHECK(h->head >= 0 && h->head < BUDGET_HISTORY_LEN && h->n >= 0 && h->n <= BUDGET_HISTORY_LEN);
    h->hist[h->head] = (uint8_t)accepted;
    h->head = (h->head + 1) % BUDGET_HISTORY_LEN;
    if (h->n < BUDGET_HISTORY_LEN) h->n++;
}

int budget_history_p95(const budget_history *h) {
    if (h->n < BUDGET_HISTORY_MIN) return -1;
    /* The held samples are the n slots ending just before head; when the ring
     * is not full they are slots [0, n), which is the same set. */
    int count[GAMMA_MAX + 1] = {0};
    for (int i = 0; i < h->n; i++) {
        int v = h->hist[(h->head - 1 - i + BUDGET_HISTORY_LEN) % BUDGET_HISTORY_LEN];
        SPECD_CHECK(v <= GAMMA_MAX);
        count[v]++;
    }
    int below = 0;
    for (int v = 0; v <= GAMMA_MAX; v++) {
        below += count[v];
        if ((int64_t)below * 100 >= (int64_t)95 * h->n) return v;
    }
    SPECD_CHECK(0);
    return -1;
}

int budget_history_cap(int gamma, const budget_history *h) {
    if (gamma <= 0) return gamma;
    int p95 = budget_history_p95(h);
    if (p95 < 0) return gamma;
    return gamma < p95 + 1 ? gamma : p95 + 1; /* p95 >= 0, so the result is >= 1 */
}

/* ---- the pooled α --------------------------------------------------------------- */

double budget_pool_alpha(const budget_pool *p) {
    if (p->trials < BUDGET_POOL_MIN || p->idle >= BUDGET_POOL_STALE) return -1.0;
    return p->acc / p->trials;
}

void budget_pool_observe(budget_pool *p, int gamma, int accepted) {
    SPECD_CHECK(gamma > 0 && accepted >= 0 && accepted <= gamma);
    p->acc = p->acc * BUDGET_POOL_DECAY + accepted;
    p->trials = p->trials * BUDGET_POOL_DECAY + accepted + (accepted < gamma);
    p->idle = 0;
}

void budget_pool_reset(budget *b, int slot) {
    SPECD_CHECK(slot >= 0 && slot < SPEC_PROPOSERS);
    memset(&b->pool[slot], 0, sizeof(b->pool[slot]));
}

/* The warm-up prior for a sequence of the engine on proposer slot: the pooled
 * α; when the pool knows nothing, a probe for the first sequence that asks
 * this step (-1), the fixed prior for the others. */
static double warmup_prior(budget *b, int slot) {
    if (!b) return BUDGET_PRIOR_ALPHA;
    budget_pool *p = &b->pool[slot];
    double a = budget_pool_alpha(p);
    if (a >= 0) return a;
    if (p->probe_taken) return BUDGET_PRIOR_ALPHA;
    p->probe_taken = true;
    return -1.0;
}

/* ---- the engine's controller: set-up ------------------------------------------ */

void budget_init(budget *b) {
    memset(b, 0, sizeof(*b));
    b->tree = ENGINE_TREE_OFF;
    b->arm = -1;
    path_ctl_init(&b->path);
}

/* t(rows) of sp's target for rows 1..COST_CURVE_ROWS: a few sampled row
 * counts, the rest left 0 for cost_curve_init to interpolate. */
static void measure_rows(spec_pair *sp, double *t_rows) {
    static const int R[] = {1, 2, 4, 8, 12, 16, 24, 32};
    enum { NR = sizeof(R) / sizeof(R[0]) };
    int n[NR], past[NR];
    double t[NR];
    int ctx = sp->max_ctx - COST_CURVE_ROWS - 1 < GAMMA_CAL_CTX ? sp->max_ctx - COST_CURVE_ROWS - 1 : GAMMA_CAL_CTX;
    if (ctx < 1) ctx = 1;
    /* its own logits: sp->logits may hold fewer rows (max_seqs x (max_gamma + 1)) */
    float *logits = malloc(sizeof(float) * (size_t)COST_CURVE_ROWS * (size_t)sp->n_vocab);
    int cap = logits ? COST_CURVE_ROWS : sp->max_seqs * (sp->max_gamma + 1), k = 0;
    for (int i = 0; i < NR; i++)
        if (R[i] <= cap && R[i] <= sp->target->mp.max_batch) n[k] = R[i], past[k++] = ctx;
    for (int r = 0; r <= COST_CURVE_ROWS; r++) t_rows[r] = 0;
    /* in pairs: every configuration holds its scratch blocks while timed, and
     * a small pool (one short sequence's worth) holds two of them */
    for (int j = 0; j < k; j += 2)
        model_time_calls(sp->target, sp->tpool, ctx, n + j, past + j, k - j < 2 ? k - j : 2, t + j,
                         logits ? logits : sp->logits);
    for (int i = 0; i < k; i++) t_rows[n[i]] = t[i];
    free(logits);
}

void budget_measure(budget *b, spec_pair *sp) {
    measure_rows(sp, b->t_rows);
    gamma_costs_set_curve(&sp->costs, b->t_rows, COST_CURVE_ROWS);
}

void budget_set_trees(budget *b, spec_pair *sp, int mode, tree_shape bounds) {
    b->tree = mode;
    b->bounds = bounds;
    if (mode == ENGINE_TREE_OFF) return;
    /* the shape controller needs the curve even when calibration is off; the
     * proposers' costs are learned online */
    if (!(b->t_rows[1] > 0)) measure_rows(sp, b->t_rows);
    tree_ctl_init(&b->prior, b->t_rows, bounds.budget, bounds.depth, bounds.topk);
    b->prior.reprobe = 512; /* it sees every sequence's steps: a batch of B ages it B per step */
}

void budget_set_heads(budget *b, tree_shape shape) {
    b->heads = true;
    b->heads_shape = shape;
}

void budget_force_curve(budget *b, spec_pair *sp) {
    for (int r = 1; r <= COST_CURVE_ROWS; r++) b->t_rows[r] = 1.0;
    gamma_costs_set_curve(&sp->costs, b->t_rows, COST_CURVE_ROWS);
    b->cheap_curve = true;
    if (b->tree != ENGINE_TREE_OFF) {
        tree_ctl_init(&b->prior, b->t_rows, b->bounds.budget, b->bounds.depth, b->bounds.topk);
        b->prior.reprobe = 512;
    }
}

void budget_seq_set_trees(const budget *b, budget_seq *bs, int mode, tree_shape bounds) {
    bs->trees.mode = mode;
    bs->trees.bounds = bounds;
    bs->trees.seeded = false;
    if (mode == ENGINE_TREE_AUTO) tree_ctl_init(&bs->trees.ctl, b->t_rows, bounds.budget, bounds.depth, bounds.topk);
}

/* ---- per step ------------------------------------------------------------------ */

void budget_step_begin(budget *b, int batch, bool heads_auto) {
    b->arm = heads_auto && b->heads ? path_ctl_pick(&b->path, batch) : -1;
    memset(b->arm_tok, 0, sizeof(b->arm_tok));
    memset(b->arm_ms, 0, sizeof(b->arm_ms));
    b->shared = b->tree != ENGINE_TREE_OFF ? tree_ctl_pick(&b->prior, batch) : 0;
    for (int i = 0; i < SPEC_PROPOSERS; i++) {
        b->pool[i].probe_taken = false;
        if (b->pool[i].idle < BUDGET_POOL_STALE) b->pool[i].idle++;
    }
}

int budget_chain_cap(const spec_seq *s, int g, int max_new) {
    int max_ctx = s->sp->max_ctx; /* the verify call fills positions up to n_tokens + γ */
    if (g > max_new - 1) g = max_new - 1;
    if (g > max_ctx - s->n_tokens) g = max_ctx - s->n_tokens;
    if (g > s->sp->max_gamma) g = s->sp->max_gamma;
    return g < 0 ? 0 : g;
}

/* The chain cost model with proposer slot's measured cost (its table's cost hook). */
static gamma_costs costs_for(const spec_pair *sp, int slot) {
    gamma_costs c = sp->costs;
    drafter *d = sp->drafters[slot];
    if (d) d->i->cost(d, &c.draft_ms, &c.draft_ms_per_row);
    return c;
}

/* A chain step: which proposer (s->slot, -1 plain) and its γ from that
 * proposer's controller and costs. The lookup first (when the method allows
 * it and it has a match: it costs nothing), else the draft model; the
 * EAGLE head's chains for method eagle. */
/* The chain proposers in the order that wins ties: the lookup (nearly free),
 * the EAGLE head, the draft model. */
static const int chain_order[] = {SPEC_DRAFTER_NGRAM, SPEC_DRAFTER_EAGLE, SPEC_DRAFTER_MODEL};

static int pick_chain(budget *b, spec_seq *s, int max_new, int batch) {
    spec_pair *sp = s->sp;
    budget_chain *ch = s->bud.chain;
    s->slot = -1;
    if (!s->prm.speculate) return 0;
    int ctx = s->n_tokens - 1, g[SPEC_PROPOSERS] = {0}, offered = 0;
    gamma_costs c[SPEC_PROPOSERS];
    bool is_auto = s->prm.method == SPEC_METHOD_AUTO;
    for (size_t i = 0; i < sizeof(chain_order) / sizeof(chain_order[0]); i++) {
        int slot = chain_order[i];
        drafter *d = sp->drafters[slot];
        if (!d || !s->ds[slot] || !spec_method_uses(&s->prm, slot)) continue;
        /* past a matching lookup, the others only when auto weighs them all */
        if (slot != SPEC_DRAFTER_NGRAM && g[SPEC_DRAFTER_NGRAM] > 0 && !is_auto) continue;
        int avail = GAMMA_MAX;
        if (slot != SPEC_DRAFTER_MODEL) {
            avail = drafter_available(d, s->ds[slot], s->tokens, s->n_tokens, GAMMA_MAX);
            if (avail <= 0) continue;
        }
        c[slot] = costs_for(sp, slot);
        /* the warm-up prior only matters to an adaptive sequence in a batch:
         * ask for it (and maybe take the step's probe) only then */
        bool warm = ch[slot].prm.adaptive && batch > 1 && ch[slot].steps < ch[slot].prm.warmup;
        double prior = warm ? warmup_prior(b, slot) : BUDGET_PRIOR_ALPHA;
        int gs = budget_chain_next_prior(&ch[slot], &c[slot], batch, ctx, prior);
        if (gs > avail) gs = avail; /* a lookup proposes no more than the earlier text continues */
        g[slot] = budget_chain_cap(s, gs, max_new);
        offered += g[slot] > 0;
    }
    int pick = -1;
    if (offered > 1 && s->prm.gp.adaptive) {
        /* auto with several on offer, adaptive γ: the one the cost model
         * expects more tokens per millisecond from, at each proposer's own
         * rolling α (the prior before it has data); ties to the earlier in
         * chain_order. Timing enters here, so a fixed-γ sequence keeps the
         * rule that depends on its tokens alone (the first in chain_order
         * that proposes): its sampled output stays the same in any batch. */
        double best = -1;
        for (size_t i = 0; i < sizeof(chain_order) / sizeof(chain_order[0]); i++) {
            int slot = chain_order[i];
            if (g[slot] <= 0) continue;
            double a = budget_chain_alpha(&ch[slot]);
            if (a < 0) a = b ? budget_pool_alpha(&b->pool[slot]) : -1;
            double r = gamma_rate_batch(&c[slot], a < 0 ? BUDGET_PRIOR_ALPHA : a, g[slot], batch, ctx);
            if (r > best) best = r, pick = slot;
        }
    } else {
        for (size_t i = 0; i < sizeof(chain_order) / sizeof(chain_order[0]) && pick < 0; i++)
            if (g[chain_order[i]] > 0) pick = chain_order[i];
    }
    if (pick < 0) return 0;
    s->slot = pick;
    return g[pick];
}

/* A tree for this step, when the sequence takes one: the heads' shape (method
 * medusa, or auto on the heads' arm this step), or a tree-enabled
 * sequence's shape (fixed: its bounds; auto: its controller's pick, or the
 * engine-wide controller's for a sequence with the engine's bounds — every
 * sequence's steps feed that one, so it learns fastest). c->entry: the
 * menu entry (0: the chain path). */
static void pick_tree(budget *b, spec_seq *s, int batch, bool heads_auto, budget_choice *c) {
    budget_trees *t = &s->bud.trees;
    if (b->tree == ENGINE_TREE_OFF && !b->heads) return; /* no tree scratch */
    if (s->bud.asked && s->ds[SPEC_DRAFTER_MEDUSA] && (!heads_auto || b->arm == 1)) {
        c->shape = b->heads_shape, c->how = SPEC_METHOD_MEDUSA;
    } else if (b->tree != ENGINE_TREE_OFF && t->mode != ENGINE_TREE_OFF && s->bud.asked) {
        /* its method's tree proposer: the draft model, the lookup, the EAGLE head (spec_tree_propose) */
        if (t->mode == ENGINE_TREE_FIXED) {
            c->entry = 1, c->shape = t->bounds;
        } else {
            if (!t->seeded) tree_ctl_seed(&t->ctl, &b->prior), t->seeded = true;
            c->entry = !memcmp(&t->bounds, &b->bounds, sizeof(b->bounds)) ? b->shared : tree_ctl_pick(&t->ctl, batch);
            c->shape = t->ctl.menu[c->entry];
        }
    }
}

budget_choice budget_pick(budget *b, spec_seq *s, int max_new, int batch, bool heads_auto) {
    budget_choice c = {.slot = -1, .gamma = 0, .shape = {0, 0, 0}, .how = s->prm.method, .entry = 0};
    if (max_new < 1) max_new = 1;
    if (b) pick_tree(b, s, batch, heads_auto, &c);
    if (c.shape.budget > 0) return s->bud.last = c;
    c.gamma = pick_chain(b, s, max_new, batch);
    /* the outlier cap, adaptive chains only: a fixed γ is the user's */
    if (b && s->bud.chain[SPEC_DRAFTER_MODEL].prm.adaptive) c.gamma = budget_history_cap(c.gamma, &b->hist);
    c.slot = s->slot;
    return s->bud.last = c;
}

void budget_observe(budget *b, spec_seq *s, int path, int n_new, int nodes, int accepted, double ms, int batch,
                    int rows, bool heads_auto) {
    budget_trees *t = &s->bud.trees;
    const budget_choice *c = &s->bud.last;
    if (path != 2 && t->mode == ENGINE_TREE_AUTO && t->seeded) {
        /* what a tree-auto sequence's step delivered, into its controller and
         * the engine-wide one */
        int ent = c->entry;
        t->ctl.picks[ent]++;
        tree_ctl_observe(&t->ctl, ent, n_new, nodes + 1, batch, rows, ms);
        const tree_shape *sh = &t->ctl.menu[ent];
        for (int f = 0; f < b->prior.n; f++)
            if (!memcmp(&b->prior.menu[f], sh, sizeof(*sh))) {
                b->prior.picks[f]++;
                tree_ctl_observe(&b->prior, f, n_new, nodes + 1, batch, rows, ms);
            }
    }
    int arm = path == 2;
    if (heads_auto && b->arm == arm) { /* this step's path evidence */
        b->arm_tok[arm] += n_new;
        b->arm_ms[arm] += ms;
    }
    if (path == 2 && heads_auto) spec_seq_note_other_step(s); /* the chains' fallback clocks run on */
    if (path == 0 && nodes > 0) {
        budget_history_add(&b->hist, accepted);
        if (c->slot >= 0) budget_pool_observe(&b->pool[c->slot], nodes, accepted);
    }
}

int budget_step_end(budget *b, int batch) {
    if (b->arm >= 0) path_ctl_observe(&b->path, b->arm, batch, b->arm_tok[b->arm], b->arm_ms[b->arm]);
    return b->arm;
}

int budget_prior_gamma(const gamma_costs *c, double alpha, const gamma_params *gp, int ctx) {
    double best = -1;
    int g0 = gp->gamma_default;
    for (int g = gp->gamma_min; g <= gp->gamma_max; g++) {
        double rate = gamma_rate(c, alpha, g, ctx);
        if (rate > best) best = rate, g0 = g;
    }
    return g0;
}

/* ---- the heads' node budget -------------------------------------------------- */

int budget_heads_best(const double *value, int n_shape, const cost_curve *curve, double speed, double heads_ms, int n,
                      int nr) {
    if (nr <= 0 || n < nr) return 0;
    int best = 0;
    double e = 0, best_rate = 1.0 / (speed * cost_curve_ms(curve, n) / n);
    for (int b = 1; b <= n_shape; b++) {
        e += value[b - 1];
        double ms = speed * cost_curve_ms(curve, nr * (b + 1) + (n - nr)) / n + heads_ms * nr / n;
        double rate = (1.0 + e) / ms; /* a proposing row's; the others decode plainly either way */
        if (rate > best_rate) best_rate = rate, best = b;
    }
    return best;
}

int budget_heads_nodes(const budget_heads *h, int n, int nr) {
    if (!h->curve || h->curve->n == 0 || nr == 0) return h->n_shape;
    double r = h->ratio, v[DRAFTER_MAX_NODES];
    r = r < 0.02 ? 0.02 : r > 3 ? 3 : r;
    for (int j = 0; j < h->n_shape; j++) v[j] = h->value[j] * r;
    int b = budget_heads_best(v, h->n_shape, h->curve, h->speed, h->heads_ms, n, nr);
    if (b > 0) {
        *h->plain_run = 0;
        return b;
    }
    /* plain for low acceptance: now and then the unscaled choice, so a ratio
     * measured on other text can recover */
    if (++*h->plain_run < BUDGET_HEADS_PROBE) return 0;
    *h->plain_run = 0;
    return budget_heads_best(h->value, h->n_shape, h->curve, h->speed, h->heads_ms, n, nr);
}
