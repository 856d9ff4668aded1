/* cost_curve.h — the target's verify cost curve t(rows): ms of one forward
 * pass of `rows` rows, measured at a few row counts at start
 * (budget_measure) and read wherever rows are weighed against time — all of
 * it for the budget controller (budget.h): the chain cost model (gamma.h),
 * the tree shapes' statistics (tree_ctl.h) and the heads' node budget. One
 * table, one rule for the rows nobody measured. */
#ifndef SPECD_COST_CURVE_H
#define SPECD_COST_CURVE_H

#include "engine/engine.h" /* cost_curve and COST_CURVE_ROWS (32): public, handed out in engine_stats */

/* From t_rows[1..n] (n <= COST_CURVE_ROWS; a 0 entry was not measured):
 * gaps interpolated linearly, held before the first measured point, past the
 * last one linear along the steeper of the last two measured points and the
 * upper half of the table (never falling: one noisy point must not make rows
 * look free), and
 * the whole made non-decreasing (a pass of more rows never costs less; timing
 * noise can say otherwise). Nothing measured: c->n = 0. */
void cost_curve_init(cost_curve *c, const double *t_rows, int n);

/* ms of a pass of `rows` rows (rows < 1 counts as 1). 0 without a curve. */
double cost_curve_ms(const cost_curve *c, int rows);

/* t(rows) / t(1). 1 without a curve. */
double cost_curve_ratio(const cost_curve *c, int rows);

#endif
