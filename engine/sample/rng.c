/* rng.c — Philox4x32-10 counter-based generator keyed by (seed, position, purpose,
 * counter); see rng.h for the contract and the reason for the choice. */
#include "engine/sample/rng.h"


void rng_philox4x32_10(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) { k0 += RNG_PHILOX_W0; k1 += RNG_PHILOX_W1; }
        uint64_t p0 = (uint64_t)RNG_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)RNG_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

uint64_t rng_u64(uint64_t seed, uint64_t position, uint32_t purpose, uint32_t counter) {
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    const uint32_t ctr[4] = { (uint32_t)position, (uint32_t)(position >> 32), purpose, counter };
    uint32_t out[4];
    rng_philox4x32_10(out, ctr, key);
    return (uint64_t)out[0] | ((uint64_t)out[1] << 32);
}

double rng_uniform(uint64_t seed, uint64_t position, uint32_t purpose, uint32_t counter) {
    return (double)(rng_u64(seed, position, purpose, counter) >> 11) * 0x1.0p-53;
}
