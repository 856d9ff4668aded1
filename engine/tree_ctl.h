/* tree_ctl.h — chooses each step's proposal shape from measurements, not
 * constants (issue 17): no speculation, a chain, or a tree of a node budget.
 * Inputs are the target's verify cost curve t(rows) (measured once per model
 * and backend: flat while memory-bound, then compute-bound) and, online, the
 * tokens per pass each shape delivered (EWMA) and its proposal time. It picks
 * the shape with the most expected tokens per millisecond, where a batch of
 * B sequences verified together costs each t(B · rows) / B — so when the
 * verify is compute-bound (large batches, fast backends) wide trees and then
 * chains stop paying and the controller falls back to a chain or to plain
 * decoding by itself. Every shape is tried `explore` times first.
 *
 * Threading: one controller per sequence, engine thread. */
#ifndef SPECD_TREE_CTL_H
#define SPECD_TREE_CTL_H

#include "engine/draft_tree.h"

#define TREE_CTL_MENU 8
#define TREE_CTL_ROWS 32            /* t(rows) is measured up to here, extrapolated linearly beyond */

typedef struct {
    int n;                          /* menu entries; entry 0 is plain decoding (budget 0) */
    tree_shape menu[TREE_CTL_MENU];
    double tpp[TREE_CTL_MENU];      /* EWMA tokens per target pass */
    double draft_ms[TREE_CTL_MENU]; /* EWMA ms to propose */
    long seen[TREE_CTL_MENU];
    double t_rows[TREE_CTL_ROWS + 1]; /* [r]: ms of one verify pass of r rows (r >= 1) */
    int explore;                    /* passes each entry gets before the controller exploits */
} tree_ctl;

/* Builds the menu (plain; chains of 2, 4, 6; trees of 4, 8, 16 nodes),
 * every entry bounded by budget_max / depth_max / topk_max (policy and
 * request bounds: tree_budget, tree_depth, tree_topk); t_rows as above
 * (entries r = 1..TREE_CTL_ROWS; missing ones may be 0 and are interpolated). */
void tree_ctl_init(tree_ctl *c, const double *t_rows, int budget_max, int depth_max, int topk_max);

/* Expected tokens per ms of menu entry e for a batch of `batch` sequences. */
double tree_ctl_rate(const tree_ctl *c, int e, int batch);

/* This step's entry (0 = plain). */
int tree_ctl_pick(const tree_ctl *c, int batch);

/* After a step with entry e that appended `tokens` in one target pass and
 * spent draft_ms proposing. */
void tree_ctl_observe(tree_ctl *c, int e, int tokens, double draft_ms);

#endif
