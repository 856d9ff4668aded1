/* gamma.h — per-sequence speculation depth controller and the cost model it
 * uses. Keeps a rolling window of verify steps (accepted drafts, whether the
 * chain ended in a rejection), estimates the per-token acceptance rate α, and
 * picks the γ that maximises expected tokens per second
 *     E(α, γ) = (1 − α^(γ+1)) / (1 − α)   over   γ·draft_cost + target_cost(γ+1).
 * Falls back to plain decoding (γ = 0) when α stays below the policy threshold
 * and probes speculation again after a number of plain steps.
 * Threading: engine thread only — a controller belongs to the thread that
 * initialised it (the engine thread, which creates every sequence), and debug
 * builds (no NDEBUG) abort when another thread updates it. */
#ifndef SPECD_GAMMA_H
#define SPECD_GAMMA_H

#include "engine/engine.h"
#include "engine/spec/cost_curve.h"

#include <stdbool.h>
#include <stdint.h>
#ifndef NDEBUG
#include <pthread.h>
#endif

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
} gamma_ctl;

void gamma_ctl_init(gamma_ctl *g, const gamma_params *p);
/* Replaces the bounds (policy reload, per-request override); keeps history. */
void gamma_ctl_set_params(gamma_ctl *g, const gamma_params *p);
/* The γ for the next step of a sequence with ctx cached tokens: 0 = plain
 * decoding (fallback), else within bounds. */
int gamma_ctl_next(gamma_ctl *g, const gamma_costs *c, int ctx);
/* The same when the sequence is stepped in a batch of `batch` sequences: an
 * adaptive sequence may also get 0 when plain decoding is faster at that batch
 * size (not counted as a fallback) — by its rolling α, or during warm-up by
 * the prior GAMMA_PRIOR_ALPHA. fallback_alpha 0 (a rule's alpha_threshold 0:
 * "never turn speculation off") disables this, so gamma_min is then a floor. */
#define GAMMA_PRIOR_ALPHA 0.7
int gamma_ctl_next_batch(gamma_ctl *g, const gamma_costs *c, int batch, int ctx);
/* Records a verify step that drafted gamma tokens and accepted `accepted`. */
void gamma_ctl_observe(gamma_ctl *g, int gamma, int accepted);
/* Records a plain step (counts down to the next probe). */
void gamma_ctl_observe_plain(gamma_ctl *g);
/* Forces plain decoding for one probe interval (draft failure). */
void gamma_ctl_fail(gamma_ctl *g);
/* Rolling α: accepted / (accepted + rejections) over the window (maximum
 * likelihood for the truncated geometric run); -1 before any data. */
double gamma_ctl_alpha(const gamma_ctl *g);

#endif
