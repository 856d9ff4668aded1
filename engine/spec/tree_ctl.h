/* tree_ctl.h — the statistics and the rule for each step's proposal shape,
 * from measurements, not constants (issue 17), as the budget controller
 * (budget.h) asks them — it alone picks, seeds and feeds these controllers
 * (one per tree-auto sequence and one engine-wide): the chain path (spec.h's step: a chain of the γ its
 * own controller picks, or plain decoding when speculation does not pay) or a
 * tree of a node budget. Inputs are the target's verify cost curve t(rows)
 * (measured once per model and backend: flat while memory-bound, then
 * compute-bound) and, online, per entry the tokens each pass delivered, the
 * rows it verified and the wall time its steps took beyond their share of
 * the verify pass (EWMA). It picks the entry with the most expected tokens
 * per millisecond (a tree must beat the chain path by 5%: measurements are
 * noisy, and a tie costs compute), where a batch of B sequences verified
 * together costs each t(B · rows) / B — so when the verify is compute-bound
 * (large batches, fast backends) trees stop paying and the controller keeps
 * the chain path, which itself falls back to plain decoding. A shared host
 * changes speed within seconds, and entries are observed at different times
 * (the chain path every step, a tree only when re-probed), so what a step
 * cost is split into a host speed common to all entries (`speed`) and each
 * entry's own cost in the curve's units: a slowdown seen by the chain alone
 * does not make stale trees look cheaper. A tree found well below the best
 * (under 0.8 of its rate) is re-probed ever less often (backoff, up to 16x);
 * the chain path never backs off: it is the baseline the trees are judged
 * against, so a chain measured slow in its first steps (a request's start,
 * a busy moment) is re-measured every `reprobe` steps (backing it off kept
 * trees on 96% of an F16 target's steps at 0.94x the chain's speed).
 * A tree found well below the best on `retire` (TREE_CTL_RETIRE, 3)
 * re-probes in a row (observations after its exploration that follow
 * `reprobe` others: at a batch of B the engine-wide controller sees one
 * step's B at once; one not well below the best resets the count) is
 * retired: it is no longer re-probed at the usual intervals (a 4-node tree
 * whose ceiling is above the chain but whose steps measured 0.79x it, probed
 * forever, cost auto ~7% on a Q8_0 target at concurrency 1). Retirement is
 * not forever: what pays changes with the batch and the text, so a retired
 * entry is probed once after reprobe << TREE_CTL_RETIRED_SHIFT (64x) steps
 * unobserved; a probe not well below the best returns it to the usual
 * rotation, one that is keeps it retired for another such wait. The chain
 * path (entry 0) is never retired, and the pick itself still compares every
 * entry's averages.
 * Every entry is tried `explore` times first; tree_ctl_seed starts a
 * sequence's controller from what earlier sequences learned (its retired
 * entries included), so short requests do not pay the exploration;
 * tree_ctl_init forgets all of it.
 *
 * Threading: one controller per sequence, engine thread. */
#ifndef SPECD_TREE_CTL_H
#define SPECD_TREE_CTL_H

#include "engine/engine.h" /* TREE_CTL_ROWS (= COST_CURVE_ROWS: t(rows) is measured up to there) */
#include "engine/spec/cost_curve.h"

#define TREE_CTL_MENU 8
#define TREE_CTL_RETIRE 3         /* consecutive losing re-probes that retire a tree (the default of `retire`) */
#define TREE_CTL_RETIRED_SHIFT 6  /* a retired entry waits reprobe << this (64x) steps for its next probe */

typedef struct {
    int n;                          /* menu entries; entry 0 is the chain path (budget 0) */
    tree_shape menu[TREE_CTL_MENU];
    double tpp[TREE_CTL_MENU];      /* EWMA tokens per target pass */
    double rows[TREE_CTL_MENU];     /* EWMA verify rows per pass (nodes + 1) */
    double extra_ms[TREE_CTL_MENU]; /* EWMA ms of a step beyond its share of the verify pass: proposing,
                                     * sampling, acceptance, compaction, the engine's own work */
    long seen[TREE_CTL_MENU];
    long picks[TREE_CTL_MENU];      /* how often each entry was picked (reports) */
    long age[TREE_CTL_MENU];        /* observations of other entries since this one's last */
    cost_curve curve;               /* t(rows): ms of one verify pass (cost_curve.h) */
    int backoff[TREE_CTL_MENU];     /* an entry well below the best waits reprobe << backoff steps */
    int losses[TREE_CTL_MENU];      /* re-probes in a row well below the best;
                                     * >= retire: retired (waits reprobe << TREE_CTL_RETIRED_SHIFT) */
    double speed;                   /* the host now against when t_rows was measured (EWMA of step
                                     * time over its prediction; 1 = as measured) */
    int explore;                    /* passes each entry gets before the controller exploits */
    int reprobe;                    /* an entry unobserved this many steps is tried again (what pays
                                     * changes with the batch and the text) */
    int retire;                     /* losing re-probes in a row that retire a tree (TREE_CTL_RETIRE) */
} tree_ctl;

/* Builds the menu (the chain path; trees of 4, 8, 16 nodes and the bounds'
 * own shape), every tree bounded by budget_max / depth_max / topk_max
 * (policy and request bounds: tree_budget, tree_depth, tree_topk); t_rows as
 * above (entries r = 1..TREE_CTL_ROWS; missing ones may be 0 and are
 * interpolated). */
void tree_ctl_init(tree_ctl *c, const double *t_rows, int budget_max, int depth_max, int topk_max);

/* Starts c (just initialised) from what prior (an engine-wide controller fed
 * by every sequence) learned for the same shapes: each entry's averages, its
 * backoff and losses (so a tree prior retired stays retired), and its
 * exploration counted as done as far as prior saw it. */
void tree_ctl_seed(tree_ctl *c, const tree_ctl *prior);

/* ms of one verify pass of `rows` rows by the measured curve (linear past
 * TREE_CTL_ROWS), at the speed the curve was measured. */
double tree_ctl_verify_ms(const tree_ctl *c, int rows);

/* Expected tokens per ms of menu entry e for a batch of `batch` sequences. */
double tree_ctl_rate(const tree_ctl *c, int e, int batch);

/* This step's entry (0 = the chain path). */
int tree_ctl_pick(const tree_ctl *c, int batch);

/* After a step with entry e that appended `tokens` in one target pass of
 * `rows` rows for this sequence. The step was one call over `batch`
 * sequences and call_rows verify rows in all, whose wall time divided by
 * batch is step_ms: what t(call_rows) / batch does not explain is the entry's
 * extra cost (so overheads the curve misses — a draft model as large as the
 * target, sampling over a big vocabulary — count against the shapes that
 * cause them). */
void tree_ctl_observe(tree_ctl *c, int e, int tokens, int rows, int batch, int call_rows, double step_ms);

#endif
