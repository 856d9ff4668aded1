/* accept.h — the lossless accept/reject rule of speculative decoding, as pure
 * functions over probability vectors (no models, no caches), so it can be
 * checked exactly by enumeration and statistically by sampling.
 *
 * For draft token d with draft probability q[d] and target probability p[d]
 * (both processed by the SAME sampler config): accept with probability
 * min(1, p[d]/q[d]); on rejection sample from normalize(max(0, p - q)); if
 * all γ drafts are accepted, sample a bonus token from the target's (γ+1)-th
 * distribution. The marginal of every output token is exactly p.
 * Greedy (temperature 0): accept iff d == argmax p; the correction is argmax p.
 *
 * Point mass: a deterministic proposal (an n-gram lookup picked d without
 * sampling) has q = the point mass at d, and the same rule becomes: accept d
 * with probability p[d]; on rejection sample from p with d removed,
 * renormalised (max(0, p - e_d) is p without d). Greedy: accept iff d is the
 * argmax. */
#ifndef SPECD_ACCEPT_H
#define SPECD_ACCEPT_H

#include <stdbool.h>
#include <stdint.h>

/* Test-only deliberately wrong variants, to prove the statistical tests can
 * fail. Never set outside tests and `specd verify --broken`. */
typedef enum {
    ACCEPT_CORRECT = 0,
    ACCEPT_BROKEN_RESIDUAL_ABS = 1, /* residual normalize(|p - q|) instead of max(0, p - q); for a point
                                     * mass: resample from p itself, d not removed */
    ACCEPT_BROKEN_POINT_KEEP = 2,   /* point mass only: on rejection resample from p, d not removed */
    ACCEPT_BROKEN_COUPLED = 3,      /* coupled only: also accept a draft the target likes at least as much as
                                     * its own Gumbel-max token (p[d] >= p[g]): biased toward likely tokens */
} accept_variant;

/* Randomness for one step: counter-based, keyed by (seed, absolute position of
 * the token being decided, purpose), so results never depend on scheduling. */
typedef struct {
    uint64_t seed;
    uint64_t pos0;           /* absolute position of the first drafted token */
    accept_variant variant;
} accept_rng;

/* The acceptance probability min(1, p/q); 1 when q == 0 and p > 0 cannot
 * happen for a sampled d (q[d] > 0), but is defined as 1 when p >= q. */
double accept_prob(double p, double q);

/* Writes the residual distribution normalize(max(0, p - q)) into out (V).
 * When its mass is zero (p == q), out = p. Returns the residual mass. */
double accept_residual(float *out, const float *p, const float *q, int V, accept_variant variant);

/* One speculative decision. p: (gamma+1, V) target distributions, q: (gamma, V)
 * draft distributions, draft: (gamma) drafted ids. Writes the accepted drafts
 * followed by one correction or bonus token into out (gamma+1) and returns the
 * number of accepted drafts k (0..gamma); out holds k+1 tokens.
 * scratch: V floats. greedy: temperature 0 (p and q are one-hot). */
int accept_step(int32_t *out, const float *p, const float *q, const int32_t *draft, int gamma, int V, bool greedy,
                const accept_rng *rng, float *scratch);

/* The same where det[j] marks draft j as deterministic (a point mass: q row j
 * is not read); det NULL = every draft was sampled (accept_step). */
int accept_chain(int32_t *out, const float *p, const float *q, const bool *det, const int32_t *draft, int gamma, int V,
                 bool greedy, const accept_rng *rng, float *scratch);

/* Coupled verification (gumbel.h): the target's own Gumbel-max token g_j of
 * each p row j at position pos0 + j under seed; a draft (sampled with the same
 * noise, or deterministic) is accepted iff it equals g_j, the first mismatch
 * emits g_j, and after gamma accepted drafts the bonus is g_gamma. Every
 * emitted token is thus the target's Gumbel-max at its position: the output
 * is plain Gumbel-max sampling's, token for token, whatever was drafted.
 * Returns the accepted count k; out holds k + 1 tokens. */
int accept_coupled(int32_t *out, const float *p, const int32_t *draft, int gamma, int V, uint64_t seed,
                   uint64_t pos0, accept_variant variant);

/* The point-mass correction: a draw with u in [0, 1) from p without token d,
 * renormalised (inverse CDF in index order, as sampler_sample). When p holds
 * no mass outside d (a rejection had probability 0) it draws from p. */
int accept_sample_without(const float *p, int V, int32_t d, double u);

#endif
