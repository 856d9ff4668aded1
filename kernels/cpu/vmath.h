/* vmath.h — math helpers of the CPU kernels, inlined into each per-SIMD-path
 * copy of a kernel (target attributes): scalar ones written so the compiler
 * vectorizes the loops that call them, and the AVX-512 horizontal sum. */
#ifndef SPECD_CPU_VMATH_H
#define SPECD_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define OPS_ALWAYS static inline __attribute__((always_inline))

/* c ? a : b as a bit select. Two clamps written as ?: become a branch chain
 * that gcc does not if-convert for plain SSE2 ("control flow in loop"), which
 * left the generic path scalar; the mask form vectorizes on every path. */
OPS_ALWAYS float ops_select(int c, float a, float b) {
    uint32_t m = -(uint32_t)c, ab, bb;
    memcpy(&ab, &a, 4);
    memcpy(&bb, &b, 4);
    uint32_t r = (ab & m) | (bb & ~m);
    float f;
    memcpy(&f, &r, 4);
    return f;
}

/* exp(x) in plain, branch-free C that the compiler vectorizes (libm expf is a
 * call per element). x is clamped to [-87, 88], where exp and 2^n stay normal
 * floats: no inf, no subnormal; NaN stays NaN. Within the range the error is
 * under 1.1 ulp (checked on every float in it, with and without FMA).
 * Range reduction x = n ln2 + r, |r| <= ln2/2, with ln2 split in two (Cody-Waite:
 * n * 0.693359375 is exact for |n| < 2^15); Cephes' degree-7 polynomial for e^r;
 * 2^n built in the exponent bits. */
OPS_ALWAYS float ops_expf(float x) {
    x = ops_select(x < -87.0f, -87.0f, x);
    x = ops_select(x > 88.0f, 88.0f, x);
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer, kept in the low mantissa bits */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t tb, sb; /* n from t's bits, not a float->int conversion (undefined for NaN) */
    memcpy(&tb, &t, 4);
    memcpy(&sb, &shift, 4);
    uint32_t eb = (tb - sb + 127u) << 23;
    float scale;
    memcpy(&scale, &eb, 4);
    return p * scale;
}

#if defined(__x86_64__)
/* The sum of a's 16 lanes with one fixed tree (the two 256-bit halves, then
 * the 128-bit halves, then lanes 2 apart, then neighbours), so a value does
 * not depend on the kernel that sums it. */
static inline __attribute__((target("avx512f,avx512vl,avx2"), always_inline)) float v512_hsum(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 f = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    f = _mm_add_ps(f, _mm_permute_ps(f, 0x4E));
    return _mm_cvtss_f32(_mm_add_ps(f, _mm_permute_ps(f, 0xB1)));
}
#endif

#endif
