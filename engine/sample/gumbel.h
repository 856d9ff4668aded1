/* gumbel.h — Gumbel-max sampling with counter-based noise: the sampler of
 * coupled verification (speculation.verify: coupled).
 *
 * token = argmax over v of (log p(v) + G(seed, position, v)), with G standard
 * Gumbel variables that depend on (seed, position, vocabulary index) only —
 * not on p. Computed as the equivalent exponential race: with R_v uniform on
 * (0, 1) and E_v = -log R_v (standard exponential, G_v = -log E_v), the winner
 * is argmin over p(v) > 0 of E_v / p(v). Exact: P(token = v) = p(v) / sum(p)
 * (Gumbel-max is exact sampling, not an approximation), and the same noise
 * drives every distribution at a position, so a draft q and a target p fed to
 * this function agree whenever the race's winner is the same — which is what
 * makes seeded output independent of γ, drafter, batch and schedule.
 *
 * Noise: R_v from Philox4x32-10 (rng.h) keyed by the seed, counter block
 * (position, RNG_GUMBEL, 16 (v / 64) + v % 16), 32-bit word (v / 16) % 4:
 * R_v = (w + 1/2) 2^-32 (a span of 64 entries is 16 blocks, one vector).
 * Cost: one Philox block per 4 vocabulary entries with p > 0 (16 blocks a step
 * on AVX-512), then a filter that is a necessary condition for beating the
 * current best (1 - R_v < k p(v), since exp(-x) >= 1 - x); only the few
 * survivors of the filter compute a logarithm. */
#ifndef SPECD_GUMBEL_H
#define SPECD_GUMBEL_H

#include <stdint.h>

/* The Gumbel-max token of probs[n_vocab] (non-negative weights, any sum) at
 * (seed, position); -1 when every weight is 0. Deterministic; any thread. */
int gumbel_sample(const float *probs, int n_vocab, uint64_t seed, uint64_t position);

/* The noise itself: R_v for v in [v0, v0 + n) into r[n] (tests). */
void gumbel_uniforms(uint64_t seed, uint64_t position, int v0, int n, double *r);

/* 0 = portable C, 1 = the AVX-512 noise path (when the CPU has it). Tests
 * force each; both give the same bits. */
void gumbel_force_path(int path);

#endif
