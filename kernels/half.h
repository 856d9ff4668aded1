/* half.h — IEEE half and bfloat16 <-> float conversions (scalar, portable).
 * Round-to-nearest-even on the way down, exact on the way up. */
#ifndef SPECD_HALF_H
#define SPECD_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float half_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return half_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return half_bits_f32(sign | 0x7f800000u | (man << 13));
    return half_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t f32_to_fp16(float f) {
    uint32_t x = half_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* adding 0.5 (a float with exponent such that the half subnormal ulp lines
         * up with the float ulp) does the round-to-nearest-even for us */
        float v = half_bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (half_f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t x = half_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
