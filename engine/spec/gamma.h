/* gamma.h — the chain cost model: what a chain of depth γ is expected to
 * deliver per millisecond at per-token acceptance α,
 *     E(α, γ) = (1 − α^(γ+1)) / (1 − α)   over   γ·draft_cost + target_cost(γ+1),
 * and the target's cost fitted online from measured verify passes. Pure
 * arithmetic and statistics: the decisions that read it (which proposer, which
 * γ, plain decoding and its fallback rule) are the budget controller's
 * (budget.h). The per-sequence γ controller that lived here is budget_chain.
 * Threading: a gamma_costs is updated by the engine thread only. */
#ifndef SPECD_GAMMA_H
#define SPECD_GAMMA_H

#include "engine/engine.h"
#include "engine/spec/cost_curve.h"

#include <stdbool.h>
#include <stdint.h>

#define GAMMA_WINDOW_MAX 64
#define GAMMA_CURVE_ROWS COST_CURVE_ROWS

/* GAMMA_MAX, gamma_params (request bounds and the controller's settings),
 * gamma_params_default and gamma_params_validate are public: engine.h. */

/* Cost model of one draft/target pair, in milliseconds. A target forward of m
 * new positions over sequences whose caches hold `keys` keys in all (the
 * cache each sequence's pass reads once, gamma_keys) and whose rows attend to
 * `pairs` (row, key) pairs in all (gamma_pairs) costs
 *     target_ms + target_ms_per_pos * min(m-1, 4) + target_ms_per_pos_big * max(m-5, 0)
 *               + target_ms_per_key * keys + target_ms_per_pair * pairs:
 * one position at no context; the weights are read once, so positions 2..5 add
 * little while the pass is memory-bound and positions past 5 (a big batch)
 * more once it is compute-bound; attention reads each sequence's cache once
 * per pass (keys) and does arithmetic for every row against every key it sees
 * (pairs), which is what makes a verify pass at context 500 dearer than at 50.
 * A draft forward of one position costs draft_ms, plus draft_ms_per_row per
 * extra sequence in a batched draft call.
 * Calibrated at load (1, 5 and 21 positions at context 8; 1 and 5 at a long
 * context), then updated online from measured step times: passes of up to 5
 * rows refit target_ms and the two attention slopes (exponentially weighted
 * least squares, held near the calibrated slopes where the contexts seen do
 * not tell them apart), bigger (batched) passes the big-batch slope.
 * The struct, gamma_costs, is public (engine.h: engine_stats hands it out). */

/* Keys one sequence's pass reads: its cache of n and its m new positions. */
double gamma_keys(int m, int n);
/* (row, key) pairs of m new positions after n cached ones (row i sees n + i + 1). */
double gamma_pairs(int m, int n);
/* Predicted target time for a call over m new positions. */
double gamma_target_ms(const gamma_costs *c, int m, double keys, double pairs);
/* Calibration: sets the model from timed calls of one sequence at context
 * GAMMA_CAL_CTX (t1, t5, tw: 1, 5 and GAMMA_CAL_ROWS positions) and at context
 * far (t1f, t5f: 1 and 5 positions; 0 when not measured). */
#define GAMMA_CAL_CTX 8
#define GAMMA_CAL_ROWS 21
void gamma_costs_calibrate(gamma_costs *c, double t1, double t5, double tw, int far, double t1f, double t5f);

/* Installs the measured curve t_rows[1..n] (ms of one pass of r rows at a
 * short context; zeros are interpolated, n <= GAMMA_CURVE_ROWS). From then on
 * every observed pass, batched or not, updates the base (host speed) only;
 * the curve's shape stays what was measured. No-op when t_rows[1] is 0. */
void gamma_costs_set_curve(gamma_costs *c, const double *t_rows, int n);

void gamma_costs_observe_draft(gamma_costs *c, double ms_per_token);
void gamma_costs_observe_target(gamma_costs *c, int positions, double keys, double pairs, double ms);

/* Expected tokens per verify pass for per-token acceptance α and depth γ. */
double gamma_expected_tokens(double alpha, int gamma);
/* Expected tokens per millisecond of speculation at (α, γ) for a sequence with
 * ctx cached tokens; γ = 0 is plain decoding. */
double gamma_rate(const gamma_costs *c, double alpha, int gamma, int ctx);
/* The same for one of `batch` sequences stepped together (each at about ctx
 * tokens): the base cost of a call is shared by the batch, each sequence pays
 * for its own positions and attention. When a big batch makes the target pass
 * compute-bound (large per-position cost), drafting stops paying and the best
 * γ drops, down to 0. */
double gamma_rate_batch(const gamma_costs *c, double alpha, int gamma, int batch, int ctx);

#endif
