/* ops.c — CPU element-wise kernels (see ops.h). Plain C that the compiler
 * vectorizes; none of these dominate decode time. silu_mul is compiled once
 * per SIMD path (generic, avx2, avx512). */
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vmath.h"
#include "kernels/half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif


/* Sum of squares in double, 8 lanes (the compiler vectorizes the lane loop)
 * then a fixed tree: a row's result does not depend on M. */
OPS_ALWAYS void rmsnorm_rows(float *y, const float *x, const float *w, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * D;
        float *ym = y + (size_t)m * D;
        double acc[8] = {0};
        int i = 0;
        for (; i + 8 <= D; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += (double)xm[i + l] * xm[i + l];
        for (int l = 0; i + l < D; l++) acc[l] += (double)xm[i + l] * xm[i + l];
        double ss = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        float s = (float)(1.0 / sqrt(ss / D + eps));
        for (int k = 0; k < D; k++) ym[k] = xm[k] * s * w[k];
    }
}

static void rmsnorm_generic(float *y, const float *x, const float *w, int M, int D, float eps) {
    rmsnorm_rows(y, x, w, M, D, eps);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void rmsnorm_avx2(float *y, const float *x, const float *w, int M, int D,
                                                             float eps) {
    rmsnorm_rows(y, x, w, M, D, eps);
}

__attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512"))) static void
rmsnorm_avx512(float *y, const float *x, const float *w, int M, int D, float eps) {
    rmsnorm_rows(y, x, w, M, D, eps);
}
#endif

void ops_rmsnorm(simd_level lvl, float *y, const float *x, const float *w, int M, int D, float eps) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512) { rmsnorm_avx512(y, x, w, M, D, eps); return; }
    if (lvl == SIMD_AVX2) { rmsnorm_avx2(y, x, w, M, D, eps); return; }
#endif
    (void)lvl;
    rmsnorm_generic(y, x, w, M, D, eps);
}

void ops_rope_tables(float *cs, float *sn, const int32_t *pos, const float *inv_freq, int M, int half) {
    for (int m = 0; m < M; m++)
        for (int i = 0; i < half; i++) {
            double a = (double)pos[m] * inv_freq[i];
            cs[(size_t)m * half + i] = (float)cos(a);
            sn[(size_t)m * half + i] = (float)sin(a);
        }
}

void ops_rope_apply(float *x, const float *cs, const float *sn, int M, int H, int E, int n_rot, int neox) {
    int half = n_rot / 2;
    for (int m = 0; m < M; m++) {
        const float *c = cs + (size_t)m * half, *s = sn + (size_t)m * half;
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)m * H + h) * E;
            for (int i = 0; i < half; i++) {
                int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                float a = v[i0], b = v[i1];
                v[i0] = a * c[i] - b * s[i];
                v[i1] = a * s[i] + b * c[i];
            }
        }
    }
}

void ops_add(float *x, const float *y, int M, int D) {
    size_t n = (size_t)M * D;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Element-wise, so the vector body and the scalar tail compute the same
 * operations: an element's result does not depend on n or on where it sits.
 * g below -88 counts as -88 (silu there is under 1e-36 in magnitude): with only
 * the exp clamped, g / e^88 would grow with |g| (about -2 at g = -3e38). */
OPS_ALWAYS void silu_mul(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = ops_select(g[i] < -88.0f, -88.0f, g[i]);
        g[i] = x / (1.0f + ops_expf(-x)) * u[i];
    }
}

static void silu_mul_generic(float *g, const float *u, size_t n) { silu_mul(g, u, n); }

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void silu_mul_avx2(float *g, const float *u, size_t n) {
    silu_mul(g, u, n);
}

__attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512"))) static void
silu_mul_avx512(float *g, const float *u, size_t n) {
    silu_mul(g, u, n);
}
#endif

void ops_silu_mul(simd_level lvl, float *g, const float *u, int M, int F) {
    size_t n = (size_t)M * F;
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512) { silu_mul_avx512(g, u, n); return; }
    if (lvl == SIMD_AVX2) { silu_mul_avx2(g, u, n); return; }
#endif
    (void)lvl;
    silu_mul_generic(g, u, n);
}

/* ---- IEEE half <-> float: the scalar rule (half.h) is the reference; F16C
 * converts with the same round-to-nearest-even, so every path gives the same
 * bits for every finite input ---------------------------------------------- */

static void f32_to_f16_generic(uint16_t *d, const float *s, int n) {
    for (int i = 0; i < n; i++) d[i] = f32_to_fp16(s[i]);
}

static void f16_to_f32_generic(float *d, const uint16_t *s, int n) {
    for (int i = 0; i < n; i++) d[i] = fp16_to_f32(s[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(uint16_t *d, const float *s, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_generic(d + i, s + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(float *d, const uint16_t *s, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    f16_to_f32_generic(d + i, s + i, n - i);
}
#endif

#if defined(__aarch64__)
/* Advanced SIMD's conversions round to nearest even (FPCR's default mode,
 * FZ16 off: subnormal halves kept), as the scalar rule does */
static void f32_to_f16_neon(uint16_t *d, const float *s, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(s + i))));
    f32_to_f16_generic(d + i, s + i, n - i);
}

static void f16_to_f32_neon(float *d, const uint16_t *s, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(d + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s + i))));
    f16_to_f32_generic(d + i, s + i, n - i);
}
#endif

void ops_f32_to_f16(simd_level lvl, uint16_t *dst, const float *src, int n) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) { f32_to_f16_f16c(dst, src, n); return; }
#elif defined(__aarch64__)
    if (lvl == SIMD_NEON) { f32_to_f16_neon(dst, src, n); return; }
#endif
    (void)lvl;
    f32_to_f16_generic(dst, src, n);
}

void ops_f16_to_f32(simd_level lvl, float *dst, const uint16_t *src, int n) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) { f16_to_f32_f16c(dst, src, n); return; }
#elif defined(__aarch64__)
    if (lvl == SIMD_NEON) { f16_to_f32_neon(dst, src, n); return; }
#endif
    (void)lvl;
    f16_to_f32_generic(dst, src, n);
}

void ops_kv_write(simd_level lvl, const kv_layer_view *kv, const int32_t *blocks, int start, const float *k,
                  const float *v, int n, int kv_dim) {
    const int B = kv->block_size, E = kv->head_dim;
    for (int i = 0; i < n; i++) {
        int p = start + i;
        size_t at = (size_t)blocks[p / B] * kv->block_stride + (size_t)(p % B) * E;
        for (int h = 0; h < kv_dim / E; h++) { /* head h's run of the block: (B, E) at h * B * E */
            size_t o = at + (size_t)h * B * E;
            const float *kr = k + (size_t)i * kv_dim + (size_t)h * E, *vr = v + (size_t)i * kv_dim + (size_t)h * E;
            if (kv->type == KV_F16) {
                ops_f32_to_f16(lvl, (uint16_t *)kv->k + o, kr, E);
                ops_f32_to_f16(lvl, (uint16_t *)kv->v + o, vr, E);
            } else {
                memcpy((float *)kv->k + o, kr, (size_t)E * 4);
                memcpy((float *)kv->v + o, vr, (size_t)E * 4);
            }
        }
    }
}

