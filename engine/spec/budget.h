/* budget.h — the ONE budget controller (issue 43 item 3): per sequence and
 * step it decides which loaded proposer speculates and how much — a chain of
 * depth γ, a tree of a shape and node budget, or a plain step — and every
 * such decision in the engine is made here. Inputs: the target's measured
 * verify cost curve t(rows) (cost_curve.h; the chain's cost model gamma.h
 * reads it too), each proposer's delivered acceptance (a rolling window per
 * sequence and proposer) and measured cost (the proposer table's cost hook),
 * the tokens per ms each tree shape and each path (the Medusa heads against
 * the chain/tree path) delivered, and the accepted lengths of recent steps.
 * The brief's fallback rule lives here too: a proposer whose acceptance stays
 * below the α threshold steps plainly, and probes again after a number of
 * plain steps.
 *
 * A user's fixed settings are obeyed exactly: a fixed γ (adaptive off) is
 * drafted as given (only the context, the tokens still wanted and the pair's
 * limit cut it; no batch or timing rule), a fixed tree shape is proposed as
 * given every step, and a fixed shape for the heads (speculation.tree:
 * fixed) uses their whole shape. So seeded output at fixed settings does not
 * depend on timing or on the other traffic.
 *
 * What it calls are pure helpers that keep statistics and do arithmetic for
 * it, and nothing else calls them to decide: gamma.h (the chain cost model),
 * cost_curve.h (t(rows)), tree_ctl.h (the shape menu's statistics and its
 * bandit rule), path_ctl.h (the heads-versus-chain statistics and rule).
 *
 * The scheduler's calls, per step (engine thread):
 *     budget_step_begin(b, batch, any sequence on auto with heads)
 *     for each running sequence:  c = budget_pick(b, s, max_new, batch, heads_auto)
 *     ... propose, ONE verify pass, accept ...
 *     for each stepped sequence:  budget_observe(b, s, &c, info, ...)
 *     budget_step_end(b, batch)
 * The speculation step (spec.c) itself calls budget_pick with b NULL for a
 * sequence stepped alone or batched without an engine (chains only), and
 * reports each chain step's outcome to the sequence's state
 * (budget_seq_verified / _plain / _failed).
 *
 * Threading: engine thread only. A budget_seq belongs to the thread that
 * initialised it, and debug builds (no NDEBUG) abort when another thread
 * updates its chain controllers. */
#ifndef SPECD_BUDGET_H
#define SPECD_BUDGET_H

#include "engine/engine.h"
#include "engine/spec/cost_curve.h"
#include "engine/spec/gamma.h"
#include "engine/spec/path_ctl.h"
#include "engine/spec/tree_ctl.h"

#include <stdbool.h>
#include <stdint.h>
#ifndef NDEBUG
#include <pthread.h>
#endif

struct spec_pair;
struct spec_seq;

/* ---- one proposer's chains for one sequence ------------------------------
 * A rolling window of verify steps (accepted drafts, whether the chain ended
 * in a rejection) gives the per-token acceptance α; γ maximises expected
 * tokens per ms by the cost model (gamma_rate_batch). Falls back to plain
 * decoding when α stays below the threshold (gamma_params.fallback_alpha) for
 * fallback_steps steps, and probes again after probe_interval plain steps (a
 * probe that finds α still low falls back at once). */
typedef struct {
    gamma_params prm;
    uint8_t acc[GAMMA_WINDOW_MAX];   /* accepted drafts per step (ring) */
    uint8_t rej[GAMMA_WINDOW_MAX];   /* 1 if the step ended in a rejection */
    int n, head;
    int steps;                       /* verify steps since (re)start of speculation */
    int low_streak;                  /* consecutive steps with α below the threshold */
    int plain_left;                  /* > 0: in fallback, plain steps until the next probe */
    bool probing;                    /* speculating again after a fallback: one low verdict ends it */
    int gamma;                       /* last choice */
    uint64_t fallbacks, probes;
#ifndef NDEBUG
    pthread_t owner;                 /* the thread that initialised it: the only one that may update it */
#endif
} budget_chain;

void budget_chain_init(budget_chain *g, const gamma_params *p);
/* Replaces the bounds (policy reload, per-request override); keeps history. */
void budget_chain_set_params(budget_chain *g, const gamma_params *p);
/* The γ for the next step of a sequence with ctx cached tokens stepped in a
 * batch of `batch`: 0 = plain decoding (fallback), else within bounds. An
 * adaptive sequence in a batch may also get 0 when plain decoding is faster
 * at that batch size (not counted as a fallback) — by its rolling α, or
 * during warm-up by the prior BUDGET_PRIOR_ALPHA. fallback_alpha 0 (a rule's
 * alpha_threshold 0: "never turn speculation off") disables this, so
 * gamma_min is then a floor. */
#define BUDGET_PRIOR_ALPHA 0.7
int budget_chain_next(budget_chain *g, const gamma_costs *c, int batch, int ctx);
/* budget_chain_next with the warm-up's acceptance given: prior in [0, 1] is
 * what the sequence plans with before it has an α of its own (the engine's
 * pooled α, budget_pool); prior < 0 (a probe) drafts whatever the batch. */
int budget_chain_next_prior(budget_chain *g, const gamma_costs *c, int batch, int ctx, double prior);
/* Records a verify step that drafted gamma tokens and accepted `accepted`. */
void budget_chain_observe(budget_chain *g, int gamma, int accepted);
/* Records a plain step (counts down to the next probe). */
void budget_chain_observe_plain(budget_chain *g);
/* Forces plain decoding for one probe interval (proposer failure). */
void budget_chain_fail(budget_chain *g);
/* Rolling α: accepted / (accepted + rejections) over the window (maximum
 * likelihood for the truncated geometric run); -1 before any data. */
double budget_chain_alpha(const budget_chain *g);

/* ---- a sequence's state -------------------------------------------------- */

/* What budget_pick decided for one sequence and step. */
typedef struct {
    int slot;           /* the proposer (SPEC_DRAFTER_*), -1: a plain step */
    int gamma;          /* a chain: its depth (0 with a tree or a plain step) */
    tree_shape shape;   /* a tree: its bounds (budget 0: no tree) */
    int how;            /* a tree: the method that proposes it (spec_method; SPEC_METHOD_MEDUSA: the heads) */
    int entry;          /* a tree-enabled sequence: its shape menu entry (0: the chain path) */
} budget_choice;

/* Tree speculation of one sequence (engine sequences only): the request's
 * mode (ENGINE_TREE_OFF / AUTO / FIXED), bounds (the fixed shape), and on
 * auto its shape controller, seeded from the engine-wide one at its first
 * step. */
typedef struct {
    int mode;
    tree_shape bounds;
    tree_ctl ctl;
    bool seeded;
} budget_trees;

/* Every decision's memory for one sequence; spec_seq holds it (s->bud). */
typedef struct {
    budget_chain chain[SPEC_PROPOSERS]; /* per proposer slot: its chains' α, fallback and probes */
    bool asked;                         /* speculation was asked for (before the pair took it away) */
    budget_trees trees;
    budget_choice last;                 /* this step's choice (budget_pick), read back by budget_observe */
} budget_seq;

/* Starts a sequence's state for parameters p (spec_seq_create). */
void budget_seq_init(budget_seq *bs, const gamma_params *gp, bool asked);
/* New γ bounds for every proposer's chains (a policy reload). */
void budget_seq_set_params(budget_seq *bs, const gamma_params *gp);
/* The outcome of a chain step on proposer slot: gamma drafted, accepted. */
void budget_seq_verified(budget_seq *bs, int slot, int gamma, int accepted);
/* A step that did not speculate through the chains of the proposers in
 * used[] (a plain step, or another proposer's tree): their fallback clocks
 * run on. */
void budget_seq_plain(budget_seq *bs, const bool used[SPEC_PROPOSERS]);
/* A new proposer in slot (a learned head swapped in): its chains start over,
 * in warm-up, out of any fallback; the counters stay. */
void budget_seq_restart(budget_seq *bs, int slot);
/* A proposer failed to propose: plain steps for one probe interval. */
void budget_seq_failed(budget_seq *bs, int slot);
/* Fallbacks and probes over every proposer's chains. */
uint64_t budget_seq_fallbacks(const budget_seq *bs);
uint64_t budget_seq_probes(const budget_seq *bs);
/* The rolling α of the proposer a method's chains use (method eagle: the
 * head; otherwise the draft model); -1 before any data. */
double budget_seq_alpha(const budget_seq *bs, int method);

/* ---- the engine's controller --------------------------------------------- */

/* The outlier cap of adaptive chains: an engine-wide ring of the accepted
 * draft counts (0..γ) of recent verify steps. Zero-initialise it. */
#define BUDGET_HISTORY_LEN 256
#define BUDGET_HISTORY_MIN 20 /* samples before the p95 is trusted */
typedef struct {
    uint8_t hist[BUDGET_HISTORY_LEN]; /* ring of accepted draft counts */
    int n, head;                      /* samples held (<= LEN); next slot to write */
} budget_history;
/* Records one verify step's accepted draft count (0..GAMMA_MAX, else aborts). */
void budget_history_add(budget_history *h, int accepted);
/* The 95th percentile (nearest rank) of the held samples; -1 with fewer
 * than BUDGET_HISTORY_MIN. */
int budget_history_p95(const budget_history *h);
/* min(gamma, p95 + 1) when the p95 is known, else gamma; γ >= 1 stays >= 1,
 * 0 stays 0. Applied only to adaptive sequences. */
int budget_history_cap(int gamma, const budget_history *h);

/* One proposer's chains, engine-wide: every sequence's verify steps pooled
 * (decayed sums of the geometric run's trials), so a sequence that joins a
 * batch plans its warm-up with what the others measured instead of the fixed
 * prior. Without the pool a sequence in a batch would draft only if the prior
 * promised a gain, never measure α, and stay plain for its whole request
 * (measured: an EAGLE head with α 0.8 never ran at concurrency 2). When the
 * pool knows nothing (fewer than BUDGET_POOL_MIN trials) or has had no step
 * for BUDGET_POOL_STALE engine steps (everyone went plain on it), one warm-up
 * sequence per step probes: it drafts, whatever the batch, and its steps
 * refill the pool. */
#define BUDGET_POOL_MIN 8
#define BUDGET_POOL_DECAY 0.98 /* per observed step: about the last 50 steps */
#define BUDGET_POOL_STALE 256  /* engine steps without an observation */
typedef struct {
    double acc, trials; /* decayed: accepted drafts; accepted + rejections */
    long idle;          /* engine steps since the last observation */
    bool probe_taken;   /* this step's probe was handed out */
} budget_pool;
/* The pool's α, or -1 when it knows nothing (or is stale): probe. */
double budget_pool_alpha(const budget_pool *p);
/* Adds one verify step (gamma drafted, accepted). */
void budget_pool_observe(budget_pool *p, int gamma, int accepted);

typedef struct budget {
    double t_rows[COST_CURVE_ROWS + 1]; /* the measured verify cost curve, rows 1.. (t_rows[1] 0: none) */
    int tree;                           /* the engine's tree mode (ENGINE_TREE_OFF: no trees) */
    tree_shape bounds;                  /* ... and its bounds (auto requests with these share `prior`'s pick) */
    tree_ctl prior;                     /* the engine-wide shape controller: every tree-auto sequence feeds it */
    bool heads;                         /* Medusa heads loaded: their shape, and auto's path choice */
    tree_shape heads_shape;
    path_ctl path;                      /* auto sequences: the heads or the chain/tree path, per step */
    int arm;                            /* this step's arm (-1: no auto sequence with heads runs) */
    int arm_tok[PATH_ARMS];             /* what this step's auto sequences on its arm appended ... */
    double arm_ms[PATH_ARMS];           /* ... and their shares of its time */
    int shared;                         /* this step's entry of `prior` */
    budget_history hist;                /* the adaptive chains' outlier cap */
    budget_pool pool[SPEC_PROPOSERS];   /* each proposer's chains' α over every sequence */
    bool cheap_curve;                   /* tests: a flat cost curve was forced (budget_force_curve) */
} budget;

/* Zeroes b: no curve, no trees, no heads. */
void budget_init(budget *b);
/* Measures sp's target t(rows) (rows 1..COST_CURVE_ROWS at a few sampled row
 * counts on scratch sequences; needs a few free blocks in the target pool)
 * unless a curve is there, and hands it to the chain cost model
 * (sp->costs). */
void budget_measure(budget *b, struct spec_pair *sp);
/* Tree speculation on (mode AUTO or FIXED) with these engine bounds: the
 * engine-wide shape controller starts from the curve (measured now when
 * there is none). */
void budget_set_trees(budget *b, struct spec_pair *sp, int mode, tree_shape bounds);
/* Forgets proposer slot's pooled α (its proposer was replaced: a learned
 * head swapped in or rolled back). */
void budget_pool_reset(budget *b, int slot);
/* Medusa heads loaded with this shape (their per-step node budget is
 * budget_heads_nodes, from the heads' own evidence). */
void budget_set_heads(budget *b, tree_shape shape);
/* Tests only: replaces the measured curve by t(rows) = 1 ms for every rows
 * (a verify pass of any size costs as one row: trees always look cheap), for
 * the engine-wide shape controller and the chain cost model. */
void budget_force_curve(budget *b, struct spec_pair *sp);
/* A sequence's tree mode and bounds (the request's, resolved); AUTO starts
 * its shape controller from the curve. */
void budget_seq_set_trees(const budget *b, budget_seq *bs, int mode, tree_shape bounds);

/* Per step, before the picks: the path arm for auto sequences with heads
 * (heads_auto: at least one runs) and the engine-wide shape pick, for a
 * batch of `batch` sequences. */
void budget_step_begin(budget *b, int batch, bool heads_auto);

/* THE decision for one sequence this step, in a batch of `batch` sequences
 * (sequences still prefilling count: they join in a few steps) with
 * max_new tokens still wanted (>= 1). heads_auto: the sequence is on the
 * auto method and holds the heads' state (the step's arm decides). b NULL:
 * no engine — chains only, no outlier cap. Sets s->slot to the chain's
 * proposer (-1: plain) when the choice is a chain or a plain step. */
budget_choice budget_pick(budget *b, struct spec_seq *s, int max_new, int batch, bool heads_auto);

/* A chain's γ cut to what the step can hold: the tokens still wanted less
 * one, the context left, the pair's limit; never below 0. */
int budget_chain_cap(const struct spec_seq *s, int gamma, int max_new);

/* What the sequence's step delivered under this step's choice (its
 * budget_pick; info: spec_step_info of its path; path 0 chain, 1 a
 * draft/n-gram tree, 2 the heads' tree), its share of the
 * step's time ms and its call's sequences and verify rows. Feeds the shape
 * controllers (tree-auto sequences; n_new tokens appended, nodes verified), the path controller (auto sequences
 * with heads on this step's arm), the outlier cap (chains that drafted) and
 * the chains' fallback clock of a sequence the heads stepped. */
void budget_observe(budget *b, struct spec_seq *s, int path, int n_new, int nodes, int accepted, double ms, int batch,
                    int rows, bool heads_auto);

/* After the step's observations: the path controller learns this step's
 * arm. Returns the arm (-1: none this step). */
int budget_step_end(budget *b, int batch);

/* The γ a request starts from when its content type has been getting
 * acceptance alpha (the policy's prior): the best within gp's bounds for
 * a sequence alone at context ctx. */
int budget_prior_gamma(const gamma_costs *c, double alpha, const gamma_params *gp, int ctx);

/* ---- the heads' node budget ---------------------------------------------- */

/* The node budget b in 0..n_shape with the most expected tokens per ms,
 * (1 + Σ value[0..b)) / (speed · t(rows of the call) / n + heads_ms · nr / n),
 * for a call of n sequences of which nr can propose (the others decode
 * plainly either way); 0 is plain decoding. value[j]: node j's path value
 * (its expected acceptance), best-first. */
int budget_heads_best(const double *value, int n_shape, const cost_curve *curve, double speed, double heads_ms, int n,
                      int nr);

/* The heads' evidence for one step's budget. */
typedef struct {
    const double *value;   /* (n_shape) stored path values, best-first */
    int n_shape;
    const cost_curve *curve; /* NULL or empty: no curve, the whole shape is used (a fixed shape) */
    double speed;          /* verify time over the curve's prediction */
    double heads_ms;       /* the heads' ms per proposing row */
    double ratio;          /* delivered over promised acceptance */
    long *plain_run;       /* the heads' count of steps made plain for low acceptance */
} budget_heads;

/* This step's node budget for the heads: the whole shape without a curve or
 * without proposing rows; else budget_heads_best on the values scaled by the
 * delivered ratio (clamped to [0.02, 3]); when that is plain for
 * BUDGET_HEADS_PROBE steps in a row, one step takes the unscaled choice (a
 * ratio measured on other text can recover). */
#define BUDGET_HEADS_PROBE 32
int budget_heads_nodes(const budget_heads *h, int n, int nr);

#endif
