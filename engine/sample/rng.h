/* rng.h — counter-based random numbers for specd: every draw is a pure function of
 * (request seed, absolute position, purpose, counter), never of call order or batching. */
#ifndef SPECD_RNG_H
#define SPECD_RNG_H
#include <stdint.h>

/* Generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11), the counter-based generator of Random123, cuRAND and
 * JAX; it passes TestU01 BigCrush. Key = the 64-bit seed (low word first); the
 * 128-bit counter block = (position low, position high, purpose, counter). Distinct
 * (position, purpose, counter) under one seed therefore always select distinct
 * blocks of a bijection, and a result depends on nothing but its four arguments.
 *
 * Stateless and pure: callable from any thread, no initialisation, no allocation. */

/* Purposes: what a random number is for. Keep these values stable — changing one
 * changes every seeded result. `position` is always the absolute token position the
 * decision is about (the index the produced token will have in the sequence). */
enum rng_purpose {
    RNG_SAMPLE   = 1, /* plain sampling of the token at a position (no speculation) */
    RNG_DRAFT    = 2, /* the drafter's own sampling of its proposal at a position */
    RNG_ACCEPT   = 3, /* accept/reject coin for the draft token at a position */
    RNG_RESIDUAL = 4, /* correction sampling from normalize(max(0, p - q)) after a reject */
    RNG_BONUS    = 5, /* the bonus token after all drafts at a step were accepted */
    RNG_TREE     = 6, /* tree/multi-candidate verification; use `counter` for the sibling */
    RNG_GUMBEL   = 7, /* coupled verification: Gumbel noise of vocabulary entries at a position (counter
                       * and word per gumbel.h; one noise for the draft, the target and plain sampling) */
};

/* Philox4x32-10's round multipliers and Weyl key increments (Salmon et al.
 * 2011; golden ratio, sqrt(3) - 1), for vectorised copies of the generator
 * (gumbel.c) that must give rng_philox4x32_10's bits. */
#define RNG_PHILOX_M0 0xD2511F53u
#define RNG_PHILOX_M1 0xCD9E8D57u
#define RNG_PHILOX_W0 0x9E3779B9u
#define RNG_PHILOX_W1 0xBB67AE85u

/* The 4 raw 32-bit output words of Philox4x32-10 for counter block ctr and key
 * (exposed for the known-answer test). */
void rng_philox4x32_10(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]);

/* 64 random bits for the key (words 0 and 1 of the Philox block, word 0 low). */
uint64_t rng_u64(uint64_t seed, uint64_t position, uint32_t purpose, uint32_t counter);

/* A uniform double in [0, 1) with 53 random bits: (rng_u64 >> 11) * 2^-53.
 * Never returns 1.0; returns 0.0 with probability 2^-53. */
double rng_uniform(uint64_t seed, uint64_t position, uint32_t purpose, uint32_t counter);

#endif
