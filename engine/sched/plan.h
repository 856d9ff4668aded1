/* plan.h — the micro-batch planner of the batch engine: groups a step's
 * sequences by draft length γ into rectangular micro-batches. Pure
 * arithmetic: no models, no allocation (the caller passes arrays sized n), no
 * locks. How much each sequence drafts is the budget controller's (budget.h);
 * the planner only packs what it chose.
 *
 * Padding. A micro-batch ("bin") is drafted and verified in one call per
 * position with the rectangular shape [members × (bin.gamma + 1)]; a member
 * with γ_i < bin.gamma fills only its first γ_i + 1 positions, the rest are
 * padding whose results are discarded. A bin's padding ratio is
 *     Σ_members (bin.gamma + 1) / Σ_members (γ_i + 1)      (≥ 1, 1 = no padding).
 *
 * Threading: plan_bins is reentrant. */
#ifndef SPECD_PLAN_H
#define SPECD_PLAN_H

#include "engine/spec/budget.h" /* GAMMA_MAX, the outlier cap */

#include <stdint.h>

/* One micro-batch: the sequences order[first .. first+n) are drafted and
 * verified together; gamma is the largest γ among them (0: a plain-decoding
 * bin, no draft call, one verify position each). */
typedef struct {
    int gamma;
    int n;
    int first;
} plan_bin;

/* Plans one step over n sequences whose draft lengths are gamma[0..n)
 * (each in 0..GAMMA_MAX; 0 = plain decoding this step).
 *
 * The sequences are sorted by (γ, index) into order[0..n) — a permutation of
 * 0..n−1 — and cut into bins of consecutive entries, never splitting a γ value
 * across bins, such that every bin's padding ratio is ≤ padding_cap
 * (compared exactly as rect ≤ cap × real in double precision). Among such
 * cuts it picks the fewest bins (fewest weight reads), then the fewest
 * rectangular positions; this is an exact search over the ≤ GAMMA_MAX+1
 * distinct γ values, so it never does worse than greedy neighbour merging.
 * γ=0 sequences follow the same rule: they join a γ>0 bin only when that
 * bin's ratio stays within the cap. cap = 1 gives one bin per distinct γ.
 *
 * bins must hold n entries (at most n are used); they come out in ascending γ.
 * *padding_ratio (may be NULL) = Σ_bins rect / Σ_bins real over the whole
 * step (1.0 when n == 0). Returns the number of bins (0 when n == 0).
 * Deterministic: the same input always gives the same bins and order.
 * Aborts (caller invariant) on n < 0, a γ outside 0..GAMMA_MAX, or a cap
 * below 1 or NaN — validate the configuration at start-up. */
int plan_bins(const int *gamma, int n, float padding_cap, plan_bin *bins, int *order, double *padding_ratio);

/* Outlier cap: the budget controller's (budget.h budget_history); the
 * names below are kept for the planner's tests. */
#define PLAN_HISTORY_LEN BUDGET_HISTORY_LEN
#define PLAN_HISTORY_MIN BUDGET_HISTORY_MIN
typedef budget_history plan_history;
static inline void plan_history_add(plan_history *h, int accepted) { budget_history_add(h, accepted); }
static inline int plan_history_p95(const plan_history *h) { return budget_history_p95(h); }
static inline int plan_cap_gamma(int gamma, const plan_history *h) { return budget_history_cap(gamma, h); }

#endif
