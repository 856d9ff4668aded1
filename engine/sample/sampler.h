/* sampler.h — turns logits into the processed probability vector (temperature, top-k,
 * top-p, min-p) and draws tokens from it by inverse CDF; also the residual draw that
 * speculative decoding needs. Randomness is passed in (see rng.h), never kept here. */
#ifndef SPECD_SAMPLER_H
#define SPECD_SAMPLER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* sampler_config (one request's settings: temperature, top-k, top-p, min-p,
 * penalties, logit bias), sampler_bias, SAMPLER_MAX_BIAS,
 * SAMPLER_LAST_N_DEFAULT, sampler_config_default and sampler_config_validate
 * are public and declared in engine.h. */

/* Scratch for one vocabulary size: every buffer sampler_probs needs is allocated
 * here, so no call below allocates. A sampler is used by one thread at a time; keep
 * one per worker thread. Returns NULL on allocation failure or n_vocab < 1. */
typedef struct sampler sampler;
sampler *sampler_create(int n_vocab);
void sampler_destroy(sampler *s); /* NULL is fine */
int sampler_n_vocab(const sampler *s);

/* Processing of logits[n_vocab] into probs[n_vocab] (processed distribution: exact
 * zeros outside the support, sums to 1 up to float rounding). Order, each step on
 * the renormalised output of the previous one:
 *   1. temperature: softmax(logits / T)   (T = 0: one-hot argmax; steps 2-4 skipped)
 *   2. top-k   3. top-p   4. min-p
 * Ranking and ties: tokens are ranked by logit, descending (the order of their
 * probabilities), and equal logits by token id, ascending. top-k keeps exactly the
 * first k ranks (of tokens tied at the boundary, the lowest ids); top-p keeps the
 * shortest ranked prefix whose cumulative mass is >= top_p * (the mass left after
 * top-k) (ties cut by the same order; at least one token); min-p keeps every token
 * whose probability is >= min_p * max (tokens tied at the threshold: all or none).
 * Weights below exp(-87) ≈ 1.6e-38 times the max token's are flushed to 0.
 * Logits: NaN counts as -inf; -inf tokens get probability 0. If some logits are
 * +inf the distribution is uniform over them; if every logit is -inf/NaN the result
 * is one-hot at sampler_argmax(logits) (the first -inf; token 0 if all are NaN).
 * Deterministic: same (cfg, logits) → bitwise-same probs, on any sampler object of
 * the same n_vocab. Cost: O(V) vectorised passes (exp over the vocabulary, or only
 * over the candidates when top-k is on) plus a radix select over 11-bit digits of
 * the logits, restricted by a subsampled threshold when the vocabulary is large;
 * no sort. Measured by tests/sampler/bench_sampler (`meson test --benchmark`).
 * cfg must satisfy sampler_config_validate (aborts otherwise: caller invariant).
 * probs may not alias logits. */
void sampler_probs(sampler *s, const sampler_config *cfg, const float *logits, float *probs);

/* Whether cfg has any history-dependent processing (penalties or a logit bias). */
bool sampler_has_penalties(const sampler_config *cfg);

/* The logit bias and penalties of cfg on logits[n_vocab] in place, for the
 * token that follows the sequence hist[0..n_hist) ++ ext[0..n_ext) (ext: the
 * drafts before this position, so a draft row and the target's row at the
 * same position see the same history). Bias first (ids outside the
 * vocabulary are skipped: the caller validates them), then for every token
 * in the window with count c: the repeat penalty, then
 * logit -= c * frequency + presence. scratch: room for the window (the
 * sequence's length; penalty_last_n when it is positive). -inf stays -inf.
 * Deterministic; allocates nothing; any thread. */
void sampler_penalize(const sampler_config *cfg, const int32_t *hist, int n_hist, const int32_t *ext, int n_ext,
                      int32_t *scratch, float *logits, int n_vocab);

/* Inverse-CDF draw from probs[n_vocab] (non-negative weights; they need not sum to 1:
 * the draw is scaled by their sum) with u in [0, 1): the first token whose cumulative
 * weight exceeds u * sum. Never returns a zero-weight token (not even when rounding
 * leaves u * sum beyond the last cumulative value: then the last non-zero token).
 * Returns -1 only if every weight is zero. Allocates nothing; any thread. */
int sampler_sample(const float *probs, int n_vocab, double u);

/* Draw from normalize(max(0, p - q)) with u in [0, 1) — the correction after a
 * rejected draft token — without materialising the residual. If the residual mass
 * is below 1e-12 (p == q up to rounding: a reject had probability < 1e-12) it draws
 * from p instead. Allocates nothing; any thread. */
int sampler_sample_residual(const float *p, const float *q, int n_vocab, double u);

/* Index of the largest logit; the lowest index among equals; NaN is skipped
 * (0 if all are NaN). */
int sampler_argmax(const float *logits, int n);

/* Convenience for plain decoding: sampler_probs into probs_out (or into the
 * sampler's own buffer when probs_out is NULL; valid until the next call), then
 * sampler_sample with u = rng_uniform(seed, position, RNG_SAMPLE, 0). */
int sampler_sample_logits(sampler *s, const sampler_config *cfg, const float *logits,
                          float *probs_out, uint64_t seed, uint64_t position);

#endif
