/* matmul_q8.c — the integer-dot matmul path for Q8_0, Q4_0, Q4_K, Q5_K and
 * Q6_K weights (see matmul.h), as llama.cpp does it: the activations are
 * quantized once per call to 8 bits per 32 values with a float scale, every
 * 32-block dot product is exact integer arithmetic on 8-bit operands (four
 * times the multiplies per instruction of float FMAs, and no weight is ever
 * widened to float), and only the block's sums are scaled in float.
 *
 * Arithmetic, the same on every path: a 32-block of weight row r gives an
 * exact integer sum s and acc[r] += float(s) * (scale * dx). The K-quants
 * keep two sums, lo over weights 0..15 and hi over 16..31, into acc_lo and
 * acc_hi (Q6_K's halves have their own scales). Q4_K/Q5_K store unsigned q with a
 * per-sub-block min: at each super-block acc_lo[r] gets
 * (t0 + t1) + (t2 + t3) and acc_hi[r] (t4 + t5) + (t6 + t7), with
 * t_j = (-dmin * m_j) * bsum_j and bsum_j = dx_j * sum(qx of sub-block j).
 * The output is acc_lo + acc_hi, so a row's value does not depend on M, the
 * tile or the thread split. The x86 tiles keep the four rows' lo and hi
 * sums in one 8-lane vector (a horizontal-add tree of the four rows' dot
 * products), so the float work per block is one convert, multiply and FMA per
 * input row instead of one per input row and weight row; Q4_0 transposes 8 or
 * 16 rows' blocks instead (q40_rows in matmul_q8_tile.h), the same steps. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

#include "kernels/ggml_type.h"
#include "kernels/half.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MQ_MR 5 /* input rows per tile: γ+1 for γ=4 */
#define MQ_NR 4 /* weight rows per tile */
#ifndef R8_PREFETCH
/* bytes ahead in a Q8_0 x8 stream; against 8192, alternated on the widen
 * model's matmuls: M=5 3.35 vs 3.54 ms median, M=1 2.72 vs 2.78; 16-32 KB
 * were 10-20% slower */
#define R8_PREFETCH 4096
#endif
#ifndef Q40_PF
/* Q4_0 (q40_rows): groups of rows ahead to prefetch. Single thread, 8-row
 * groups at M = 1, alternated: K = 768: no prefetch 4.3-5.5 GB/s, 1 group
 * 12-19, 2 groups 13-26 (best median), 3 and 4 lower; copying each group into
 * L1 first was slower (10-15). K = 2048, 4096, 8192, 14336: 2 groups ahead
 * 22-31 GB/s against 10-21 for each row prefetched 512-2048 bytes ahead, even
 * where 2 groups overflow L1 (the lines stay in L2) */
#define Q40_PF 2
#endif
#ifndef Q6X_M1_YMM
/* Q6_K x8 on AVX-512 at M = 1: the 256-bit tile (two groups, one after the
 * other) rather than qt_q6x_tile2; alternated on the 2-thread kernel bench,
 * 14.9-27.8 GB/s against 11.5-15.2 for the 512-bit tile */
#define Q6X_M1_YMM 1
#endif

int mm_q8_path(int wtype) {
    return wtype == GGML_TYPE_Q8_0 || wtype == SPECD_TYPE_Q8_0_R8 || wtype == SPECD_TYPE_Q4_K_R8 ||
           wtype == SPECD_TYPE_Q5_K_R8 || wtype == SPECD_TYPE_Q6_K_R8 ||
           wtype == GGML_TYPE_Q4_0 || wtype == GGML_TYPE_Q4_K ||
           wtype == GGML_TYPE_Q5_K || wtype == GGML_TYPE_Q6_K;
}

/* Row layout: q (K int8), |q| (K uint8), dx (K/32 float), bsum (K/32 float),
 * xcorr (K/32 int32: -128 times the block's sum of q), then per block the sums of q over
 * its halves as 8 int32 (lo x4, hi x4): the correction for weights stored with
 * an offset (q + o) is o times these. */
size_t mm_qx_row_bytes(int K) { return ((size_t)3 * K + (size_t)3 * K / 8 + 63) / 64 * 64; }

static inline const float *qx_scale(const uint8_t *xr, int K) { return (const float *)(xr + 2 * (size_t)K); }
static inline const float *qx_bsum(const uint8_t *xr, int K) { return qx_scale(xr, K) + K / 32; }
/* -128 times each block's sum of q: the start of a vpdpbusd sum over weights
 * stored + 128 (Q8_0 x8), so that sum comes out as the sum of q * qx */
static inline const int32_t *qx_corr(const uint8_t *xr, int K) { return (const int32_t *)(qx_bsum(xr, K) + K / 32); }
static inline const int32_t *qx_halves(const uint8_t *xr, int K) { return qx_corr(xr, K) + K / 32; }

static void quantize_generic(uint8_t *xq, const float *x, int M, int K) {
    size_t rs = mm_qx_row_bytes(K);
    for (int m = 0; m < M; m++) {
        uint8_t *xr = xq + (size_t)m * rs;
        int8_t *q = (int8_t *)xr;
        uint8_t *a = xr + K;
        float *dx = (float *)(xr + 2 * (size_t)K), *bs = dx + K / 32;
        int32_t *xcorr = (int32_t *)(bs + K / 32), *hv = xcorr + K / 32;
        const float *xm = x + (size_t)m * K;
        for (int b = 0; b < K / 32; b++) {
            const float *v = xm + 32 * b;
            float amax = 0.0f;
            for (int l = 0; l < 32; l++) {
                float t = v[l] < 0 ? -v[l] : v[l];
                amax = t > amax ? t : amax;
            }
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            int sum = 0, half[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                /* round to nearest even through the 1.5*2^23 trick (|t| <= 127.5
                 * here; NaN or inf inputs clamp instead of overflowing) */
                float t = v[l] * id;
                t = t >= -127.0f ? (t <= 127.0f ? t : 127.0f) : -127.0f;
                t = (t + 0x1.8p23f) - 0x1.8p23f;
                int qi = (int)t;
                q[32 * b + l] = (int8_t)qi;
                a[32 * b + l] = (uint8_t)(qi < 0 ? -qi : qi);
                sum += qi;
                half[l >= 16] += qi;
            }
            for (int l = 0; l < 8; l++) hv[8 * b + l] = half[l >= 4];
            xcorr[b] = -128 * sum;
            dx[b] = d;
            bs[b] = d * (float)sum;
        }
    }
}

#if defined(__x86_64__)
/* The same rounding as quantize_generic, 32 values at a time: max(t, -127)
 * returns -127 for NaN as the generic comparison does, and vcvtps2dq rounds to
 * nearest even as the 1.5*2^23 trick does. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void quantize_avx512(uint8_t *xq, const float *x, int M,
                                                                                int K) {
    size_t rs = mm_qx_row_bytes(K);
    for (int m = 0; m < M; m++) {
        uint8_t *xr = xq + (size_t)m * rs;
        float *dx = (float *)(xr + 2 * (size_t)K), *bs = dx + K / 32;
        int32_t *xcorr = (int32_t *)(bs + K / 32), *hv = xcorr + K / 32;
        const float *xm = x + (size_t)m * K;
        for (int b = 0; b < K / 32; b++) {
            __m512 v0 = _mm512_loadu_ps(xm + 32 * b), v1 = _mm512_loadu_ps(xm + 32 * b + 16);
            __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
            a = _mm512_max_ps(_mm512_abs_ps(v1), a);
            float amax = _mm512_reduce_max_ps(a);
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            __m512 vid = _mm512_set1_ps(id), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
            __m512i i0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, vid), lo), hi));
            __m512i i1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, vid), lo), hi));
            __m128i q0 = _mm512_cvtsepi32_epi8(i0), q1 = _mm512_cvtsepi32_epi8(i1);
            _mm_storeu_si128((__m128i *)(xr + 32 * b), q0);
            _mm_storeu_si128((__m128i *)(xr + 32 * b + 16), q1);
            _mm_storeu_si128((__m128i *)(xr + K + 32 * b), _mm_abs_epi8(q0));
            _mm_storeu_si128((__m128i *)(xr + K + 32 * b + 16), _mm_abs_epi8(q1));
            int h0 = _mm512_reduce_add_epi32(i0), h1 = _mm512_reduce_add_epi32(i1);
            _mm256_storeu_si256((__m256i *)(hv + 8 * b), _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1));
            xcorr[b] = -128 * (h0 + h1);
            dx[b] = d;
            bs[b] = d * (float)(h0 + h1);
        }
    }
}

/* The same on AVX2, 8 values a vector: the max of the |x| is exact in any
 * order, x * id is one rounding as in the generic loop, and the int32 -> int8
 * packs cannot saturate (|q| <= 127). */
__attribute__((target("avx2,fma,f16c"))) static void quantize_avx2(uint8_t *xq, const float *x, int M, int K) {
    size_t rs = mm_qx_row_bytes(K);
    const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int m = 0; m < M; m++) {
        uint8_t *xr = xq + (size_t)m * rs;
        float *dx = (float *)(xr + 2 * (size_t)K), *bs = dx + K / 32;
        int32_t *xcorr = (int32_t *)(bs + K / 32), *hv = xcorr + K / 32;
        const float *xm = x + (size_t)m * K;
        for (int b = 0; b < K / 32; b++) {
            __m256 v[4];
            __m256 av[4];
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(xm + 32 * b + 8 * i);
                av[i] = _mm256_andnot_ps(sign, v[i]);
                av[i] = _mm256_and_ps(av[i], _mm256_cmp_ps(av[i], av[i], _CMP_ORD_Q)); /* NaN -> 0: ignored, as generic */
            }
            __m256 a = _mm256_max_ps(_mm256_max_ps(av[0], av[1]), _mm256_max_ps(av[2], av[3]));
            __m128 a4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            a4 = _mm_max_ps(a4, _mm_movehl_ps(a4, a4));
            a4 = _mm_max_ss(a4, _mm_movehdup_ps(a4));
            float amax = _mm_cvtss_f32(a4);
            float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            __m256 vid = _mm256_set1_ps(id);
            __m256i iv[4];
            for (int i = 0; i < 4; i++)
                iv[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], vid), lo), hi));
            __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
            q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(xr + 32 * b), q);
            _mm256_storeu_si256((__m256i *)(xr + K + 32 * b), _mm256_abs_epi8(q));
            __m256i s01 = _mm256_add_epi32(iv[0], iv[1]), s23 = _mm256_add_epi32(iv[2], iv[3]);
            int32_t t0[8], t1[8];
            _mm256_storeu_si256((__m256i *)t0, s01);
            _mm256_storeu_si256((__m256i *)t1, s23);
            int h0 = 0, h1 = 0;
            for (int l = 0; l < 8; l++) h0 += t0[l], h1 += t1[l];
            _mm256_storeu_si256((__m256i *)(hv + 8 * b), _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1));
            xcorr[b] = -128 * (h0 + h1);
            dx[b] = d;
            bs[b] = d * (float)(h0 + h1);
        }
    }
}
#endif

void mm_quantize_x(simd_level lvl, uint8_t *xq, const float *x, int M, int K) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512) {
        quantize_avx512(xq, x, M, K);
        return;
    }
    if (lvl == SIMD_AVX2) {
        quantize_avx2(xq, x, M, K);
        return;
    }
#endif
    (void)lvl;
    quantize_generic(xq, x, M, K);
}

/* ---- portable C ------------------------------------------------------- */

#define QG static inline __attribute__((always_inline))

/* Block k/32 of one row: its 32 weights as signed integers (0..31 for
 * Q4_K/Q5_K, whose offset is the min) and, for Q8_0/Q4_0, the scales of its
 * two halves (the K-quants' come from qg_ksuper once per super-block). */
QG void qg_block(const uint8_t *row, int wtype, int k, int8_t *wq, float *s_lo, float *s_hi) {
    uint16_t dh;
    if (wtype == GGML_TYPE_Q8_0) {
        const blk_q8_0 *b = (const blk_q8_0 *)row + k / 32;
        memcpy(&dh, &b->d, 2);
        memcpy(wq, b->q, 32);
        *s_lo = *s_hi = fp16_to_f32(dh);
    } else if (wtype == GGML_TYPE_Q4_0) {
        const blk_q4_0 *b = (const blk_q4_0 *)row + k / 32;
        memcpy(&dh, &b->d, 2);
        for (int l = 0; l < 16; l++) {
            wq[l] = (int8_t)((b->qs[l] & 0xF) - 8);
            wq[l + 16] = (int8_t)((b->qs[l] >> 4) - 8);
        }
        *s_lo = *s_hi = fp16_to_f32(dh);
    } else if (wtype == GGML_TYPE_Q6_K) {
        const blk_q6_k *b = (const blk_q6_k *)row + k / 256;
        int j = (k % 256) / 32, h = j / 4, s = j % 4;
        const uint8_t *ql = b->ql + 64 * h + 32 * (s & 1), *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++)
            wq[l] = (int8_t)((((ql[l] >> (4 * (s >> 1))) & 0xF) | (((qh[l] >> (2 * s)) & 3) << 4)) - 32);
    } else {
        int j = (k % 256) / 32;
        kq_view v = kq_at(row, wtype == GGML_TYPE_Q5_K, k / 256);
        for (int l = 0; l < 32; l++) {
            int q = (v.qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
            if (v.qh) q |= ((v.qh[l] >> j) & 1) << 4;
            wq[l] = (int8_t)q;
        }
    }
}

/* The scales of the K-quant super-block at k, read once per super-block:
 * lo[j], hi[j] for the halves of sub-block j (equal except for Q6_K's 16-value
 * groups) and, for Q4_K/Q5_K, mins[j] = -dmin * m_j. */
QG void qg_ksuper(const uint8_t *row, int wtype, int k, float *lo, float *hi, float *mins) {
    if (wtype == GGML_TYPE_Q6_K) {
        const blk_q6_k *b = (const blk_q6_k *)row + k / 256;
        uint16_t dh;
        memcpy(&dh, &b->d, 2);
        float d = fp16_to_f32(dh);
        for (int j = 0; j < 8; j++) lo[j] = d * (float)b->scales[2 * j], hi[j] = d * (float)b->scales[2 * j + 1];
        return;
    }
    kq_view v = kq_at(row, wtype == GGML_TYPE_Q5_K, k / 256);
    uint8_t sc[8], mn[8];
    kq_unpack(v.scales, sc, mn);
    float d = fp16_to_f32(v.d), dmin = fp16_to_f32(v.dmin);
    for (int j = 0; j < 8; j++) {
        lo[j] = hi[j] = d * (float)sc[j];
        mins[j] = -(dmin * (float)mn[j]);
    }
}

QG void qg_tile(int wtype, int mr, int nr, float *y, int ldy, int ys, const uint8_t *xq, size_t xs, int K,
                const uint8_t *w, size_t rb) {
    const int is_k = wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K;
    const int one_scale = wtype == GGML_TYPE_Q8_0 || wtype == GGML_TYPE_Q4_0;
    float lo[MQ_MR][MQ_NR], hi[MQ_MR][MQ_NR];
    memset(lo, 0, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    const int is_sb = is_k || wtype == GGML_TYPE_Q6_K;
    float ks_lo[MQ_NR][8], ks_hi[MQ_NR][8], mv[MQ_NR][8]; /* the current super-block's */
    for (int k = 0; k < K; k += 32) {
        int8_t wq[MQ_NR][32];
        float s_lo[MQ_NR], s_hi[MQ_NR];
        for (int r = 0; r < nr; r++) qg_block(w + r * rb, wtype, k, wq[r], &s_lo[r], &s_hi[r]);
        if (is_sb) {
            if (k % 256 == 0)
                for (int r = 0; r < nr; r++) qg_ksuper(w + r * rb, wtype, k, ks_lo[r], ks_hi[r], mv[r]);
            for (int r = 0; r < nr; r++) s_lo[r] = ks_lo[r][(k % 256) / 32], s_hi[r] = ks_hi[r][(k % 256) / 32];
        }
        if (is_k && k % 256 == 0) {
            for (int m = 0; m < mr; m++) {
                const float *bs = qx_bsum(xq + m * xs, K) + k / 32;
                for (int r = 0; r < nr; r++) {
                    float t[8];
                    for (int j = 0; j < 8; j++) t[j] = mv[r][j] * bs[j];
                    lo[m][r] += (t[0] + t[1]) + (t[2] + t[3]);
                    hi[m][r] += (t[4] + t[5]) + (t[6] + t[7]);
                }
            }
        }
        for (int m = 0; m < mr; m++) {
            const uint8_t *xr = xq + m * xs;
            const int8_t *qx = (const int8_t *)xr + k;
            float dx = qx_scale(xr, K)[k / 32];
            for (int r = 0; r < nr; r++) {
                int a = 0, b = 0;
                for (int l = 0; l < 16; l++) a += qx[l] * wq[r][l], b += qx[l + 16] * wq[r][l + 16];
                if (one_scale) { /* one scale per block: the whole block's sum */
                    lo[m][r] += (float)(a + b) * (s_lo[r] * dx);
                } else {
                    lo[m][r] += (float)a * (s_lo[r] * dx);
                    hi[m][r] += (float)b * (s_hi[r] * dx);
                }
            }
        }
    }
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nr; r++) y[(size_t)m * ldy + (size_t)r * ys] = lo[m][r] + hi[m][r];
}

/* ---- Q8_0 x8 (see quant.h) -------------------------------------------- */

size_t mm_r8_bytes(int N, int K) { return (size_t)(N + 7) / 8 * (size_t)(K / 32) * R8_BLOCK_BYTES; }

void mm_r8_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1) {
    size_t rb = (size_t)(K / 32) * sizeof(blk_q8_0), gb = (size_t)(K / 32) * R8_BLOCK_BYTES;
    for (int g = g0; g < g1; g++) {
        uint8_t *gd = dst + (size_t)g * gb;
        int nv = N - 8 * g < 8 ? N - 8 * g : 8; /* rows past N stay zero (scale 0) */
        if (nv < 8) memset(gd, 0, gb);
        for (int b = 0; b < K / 32; b++) { /* one 272-byte block at a time, written whole */
            uint8_t *blk = gd + (size_t)b * R8_BLOCK_BYTES;
            for (int r = 0; r < nv; r++) {
                const blk_q8_0 *q = (const blk_q8_0 *)(src + (size_t)(8 * g + r) * rb) + b;
                uint8_t u[32];
                for (int k = 0; k < 32; k++) u[k] = (uint8_t)q->q[k] ^ 0x80; /* stored + 128 (see quant.h) */
                memcpy(blk + 2 * r, &q->d, 2);
                for (int j = 0; j < 8; j++) memcpy(blk + 16 + 32 * j + 4 * r, u + 4 * j, 4);
            }
        }
    }
}

void mm_r8_repack(uint8_t *dst, const uint8_t *src, int N, int K) { mm_r8_repack_groups(dst, src, N, K, 0, (N + 7) / 8); }

void mm_r8_dequant_row(float *out, const uint8_t *w, int n, int K) {
    const uint8_t *g = w + (size_t)(n / 8) * (size_t)(K / 32) * R8_BLOCK_BYTES;
    int r = n % 8;
    for (int b = 0; b < K / 32; b++) {
        const uint8_t *blk = g + (size_t)b * R8_BLOCK_BYTES;
        uint16_t dh;
        memcpy(&dh, blk + 2 * r, 2);
        float d = fp16_to_f32(dh);
        for (int k = 0; k < 32; k++) out[32 * b + k] = d * (float)(int8_t)(blk[16 + 32 * (k / 4) + 4 * r + k % 4] ^ 0x80);
    }
}

/* mr input rows x one group of 8 weight rows; the same sums and float steps
 * as the Q8_0 tiles above (acc += float(s) * (d * dx) per block). */
QG void qg_r8_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq, size_t xs, int K, const uint8_t *g) {
    float acc[MQ_MR][8];
    memset(acc, 0, sizeof(acc));
    for (int b = 0; b < K / 32; b++) {
        const uint8_t *blk = g + (size_t)b * R8_BLOCK_BYTES;
        float d[8];
        for (int r = 0; r < 8; r++) {
            uint16_t dh;
            memcpy(&dh, blk + 2 * r, 2);
            d[r] = fp16_to_f32(dh);
        }
        for (int m = 0; m < mr; m++) {
            const int8_t *qx = (const int8_t *)(xq + m * xs) + 32 * b;
            float dx = qx_scale(xq + m * xs, K)[b];
            for (int r = 0; r < 8; r++) {
                int sum = 0;
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++) sum += qx[4 * j + t] * (int8_t)(blk[16 + 32 * j + 4 * r + t] ^ 0x80);
                acc[m][r] += (float)sum * (d[r] * dx);
            }
        }
    }
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nv; r++) y[(size_t)m * ldy + r] = acc[m][r];
}

/* Rows [n0, n1) a group of 8 at a time. Groups go in sets of NG from NG equal
 * parts of the range (group i with i + part, i + 2 part, ...), so each thread
 * reads NG linear streams, as MM_ROWS_BODY does (one stream leaves DRAM
 * bandwidth unused). NG = 2: measured, 4 streams read no faster at M = 1 and
 * the accumulators of 4 groups of 5 rows would not fit in registers. Leftover
 * groups go one at a time.
 * TILE(mr, ng, y, ldy, xq, xs, K, g, n_valid, stride) does ng groups that
 * start `stride` groups (and 8 * stride outputs) apart. */
#define R8_TILE_ONE(TILE, NG, m, y_, nv_, g_, stride_)                                             \
    do {                                                                                           \
        int mr = M - (m) < MQ_MR ? M - (m) : MQ_MR;                                                \
        float *ym = (y_) + (size_t)(m) * ldy;                                                      \
        const uint8_t *xm = xq + (m) * xs;                                                         \
        switch (mr) {                                                                              \
        case 1: TILE(1, NG, ym, ldy, xm, xs, K, g_, nv_, stride_); break;                          \
        case 2: TILE(2, NG, ym, ldy, xm, xs, K, g_, nv_, stride_); break;                          \
        case 3: TILE(3, NG, ym, ldy, xm, xs, K, g_, nv_, stride_); break;                          \
        case 4: TILE(4, NG, ym, ldy, xm, xs, K, g_, nv_, stride_); break;                          \
        default: TILE(5, NG, ym, ldy, xm, xs, K, g_, nv_, stride_); break;                         \
        }                                                                                          \
    } while (0)
#define R8_TILE_M(TILE, NG, y_, nv_, g_, stride_)                                                   \
    for (int m = 0; m < M; m += MQ_MR) R8_TILE_ONE(TILE, NG, m, y_, nv_, g_, stride_);
/* Past one tile of input rows (prefill) the sets go in blocks of about
 * R8_WBLOCK bytes (kept in L2) and each tile of rows passes over a whole block
 * (see MM_WBLOCK in matmul.c): the same tiles, in another order. */
#ifndef R8_WBLOCK
#define R8_WBLOCK (192 << 10)
#endif
#define R8_ROWS_NG(TILE, NG)                                                                       \
    do {                                                                                           \
        int part = ngr / (NG);                                                                     \
        int pb = M <= MQ_MR ? part : (int)(R8_WBLOCK / ((NG) * gb));                               \
        if (pb < 1) pb = 1;                                                                        \
        for (int i0 = 0; i0 < part; i0 += pb) {                                                    \
            int i1 = i0 + pb < part ? i0 + pb : part;                                              \
            for (int m0 = 0; m0 < M; m0 += MQ_MR)                                                  \
                for (int i = i0; i < i1; i++) {                                                    \
                    int na = n0 + 8 * i;                                                           \
                    int nvl = n1 - (na + 8 * part * ((NG) - 1)); /* the last group of the set may be short */ \
                    R8_TILE_ONE(TILE, NG, m0, y + na, nvl < 8 ? nvl : 8, w + (size_t)(na / 8) * gb, part); \
                }                                                                                  \
        }                                                                                          \
        for (int i = part * (NG); i < ngr; i++) {                                                  \
            int na = n0 + 8 * i, nva = n1 - na < 8 ? n1 - na : 8;                                  \
            R8_TILE_M(TILE, 1, y + na, nva, w + (size_t)(na / 8) * gb, 0)                          \
        }                                                                                          \
    } while (0)
#define R8_ROWS_BODY(TILE)                                                                         \
    size_t xs = mm_qx_row_bytes(K), gb = (size_t)(K / 32) * R8_BLOCK_BYTES;                        \
    int ngr = (n1 - n0 + 7) / 8;                                                                   \
    R8_ROWS_NG(TILE, 2);

/* the portable tile takes one group at a time */
#define QG_R8_TILE_NG(mr, ng, y, ldy, xq, xs, K, g, nvl, stride)                                   \
    for (int q_ = 0; q_ < (ng); q_++)                                                              \
        qg_r8_tile(mr, (y) + (size_t)8 * (stride) * q_, ldy, q_ == (ng) - 1 ? (nvl) : 8, xq, xs, K,  \
                   (g) + (size_t)(stride) * q_ * gb)

static void r8_rows_generic(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1) {
    R8_ROWS_BODY(QG_R8_TILE_NG)
}

/* ---- Q4_K x8 and Q5_K x8 (see quant.h) -------------------------------- */

#define RK_BB(q5) ((q5) ? RK5_BLOCK_BYTES : RK_BLOCK_BYTES)

size_t mm_rk_bytes(int N, int K, int q5) { return (size_t)(N + 7) / 8 * (size_t)(K / 256) * RK_BB(q5); }

/* Super-block s of nv (<= 8) rows, row r at src + r rb, into blk (rows past
 * nv zero: d, dmin and mins 0). */
static void rk_pack_sb(uint8_t *blk, const uint8_t *src, size_t rb, int nv, int s, int q5) {
    if (nv < 8) memset(blk, 0, RK_BB(q5));
    for (int r = 0; r < nv; r++) {
        kq_view q = kq_at(src + (size_t)r * rb, q5, s);
        uint16_t dm = q.dmin ^ 0x8000; /* -dmin */
        memcpy(blk + 2 * r, &q.d, 2);
        memcpy(blk + 16 + 2 * r, &dm, 2);
        uint8_t sc[8], mn[8];
        kq_unpack(q.scales, sc, mn);
        for (int j = 0; j < 8; j++) blk[32 + 8 * j + r] = sc[j], blk[96 + 8 * j + r] = mn[j];
        for (int p = 0; p < 4; p++)
            for (int i = 0; i < 8; i++) memcpy(blk + 160 + 256 * p + 32 * i + 4 * r, q.qs + 32 * p + 4 * i, 4);
        if (q5)
            for (int i = 0; i < 8; i++) memcpy(blk + RK_BLOCK_BYTES + 32 * i + 4 * r, q.qh + 4 * i, 4);
    }
}

void mm_rk_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1, int q5) {
    size_t rb = (size_t)(K / 256) * (q5 ? sizeof(blk_q5_k) : sizeof(blk_q4_k)), gb = (size_t)(K / 256) * RK_BB(q5);
    for (int g = g0; g < g1; g++) {
        int nv = N - 8 * g < 8 ? N - 8 * g : 8;
        for (int s = 0; s < K / 256; s++)
            rk_pack_sb(dst + (size_t)g * gb + (size_t)s * RK_BB(q5), src + (size_t)(8 * g) * rb, rb, nv, s, q5);
    }
}

void mm_rk_repack(uint8_t *dst, const uint8_t *src, int N, int K, int q5) {
    mm_rk_repack_groups(dst, src, N, K, 0, (N + 7) / 8, q5);
}

/* weight c of sub-block j of row r in a repacked super-block */
static inline int rk_q(const uint8_t *blk, int r, int j, int c, int q5) {
    int o = 32 * (c / 4) + 4 * r + c % 4, q = (blk[160 + 256 * (j / 2) + o] >> (4 * (j & 1))) & 0xF;
    return q5 ? q | ((blk[RK_BLOCK_BYTES + o] >> j) & 1) << 4 : q;
}

void mm_rk_dequant_row(float *out, const uint8_t *w, int n, int K, int q5) {
    const uint8_t *g = w + (size_t)(n / 8) * (size_t)(K / 256) * RK_BB(q5);
    int r = n % 8;
    for (int s = 0; s < K / 256; s++) {
        const uint8_t *blk = g + (size_t)s * RK_BB(q5);
        uint16_t hd, hm;
        memcpy(&hd, blk + 2 * r, 2);
        memcpy(&hm, blk + 16 + 2 * r, 2);
        float d = fp16_to_f32(hd), dmin = fp16_to_f32(hm ^ 0x8000); /* as ggml_dequantize_row computes it */
        for (int j = 0; j < 8; j++) {
            float ds = d * (float)blk[32 + 8 * j + r], dm = dmin * (float)blk[96 + 8 * j + r];
            for (int c = 0; c < 32; c++) out[256 * s + 32 * j + c] = ds * (float)rk_q(blk, r, j, c, q5) - dm;
        }
    }
}

/* mr input rows x one group of 8 weight rows: the sums and float steps of
 * qg_tile for Q4_K (mins at each super-block, then per sub-block the two
 * halves' sums into lo and hi), so the results are bit-identical to it. */
QG void qg_rk_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq, size_t xs, int K, const uint8_t *g, int q5) {
    float lo[MQ_MR][8], hi[MQ_MR][8];
    memset(lo, 0, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    for (int s = 0; s < K / 256; s++) {
        const uint8_t *blk = g + (size_t)s * RK_BB(q5);
        float ks[8][8], mv[8][8]; /* [row][sub-block] */
        for (int r = 0; r < 8; r++) {
            uint16_t hd, hm;
            memcpy(&hd, blk + 2 * r, 2);
            memcpy(&hm, blk + 16 + 2 * r, 2);
            float d = fp16_to_f32(hd), ndmin = fp16_to_f32(hm);
            for (int j = 0; j < 8; j++) ks[r][j] = d * (float)blk[32 + 8 * j + r], mv[r][j] = ndmin * (float)blk[96 + 8 * j + r];
        }
        for (int m = 0; m < mr; m++) {
            const float *bs = qx_bsum(xq + m * xs, K) + 8 * s;
            for (int r = 0; r < 8; r++) {
                float t[8];
                for (int j = 0; j < 8; j++) t[j] = mv[r][j] * bs[j];
                lo[m][r] += (t[0] + t[1]) + (t[2] + t[3]);
                hi[m][r] += (t[4] + t[5]) + (t[6] + t[7]);
            }
        }
        for (int j = 0; j < 8; j++)
            for (int m = 0; m < mr; m++) {
                const uint8_t *xr = xq + m * xs;
                const int8_t *qx = (const int8_t *)xr + 256 * s + 32 * j;
                float dx = qx_scale(xr, K)[8 * s + j];
                for (int r = 0; r < 8; r++) {
                    int a = 0, b = 0;
                    for (int c = 0; c < 16; c++) a += qx[c] * rk_q(blk, r, j, c, q5), b += qx[c + 16] * rk_q(blk, r, j, c + 16, q5);
                    lo[m][r] += (float)a * (ks[r][j] * dx);
                    hi[m][r] += (float)b * (ks[r][j] * dx);
                }
            }
    }
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nv; r++) y[(size_t)m * ldy + r] = lo[m][r] + hi[m][r];
}

#define RK_ROWS_BODY(TILE)                                                                         \
    size_t xs = mm_qx_row_bytes(K), gb = (size_t)(K / 256) * RK_BB(q5);                            \
    int ngr = (n1 - n0 + 7) / 8;                                                                   \
    R8_ROWS_NG(TILE, 2);

#define QG_RK_TILE_NG(mr, ng, y, ldy, xq, xs, K, g, nvl, stride)                                   \
    for (int q_ = 0; q_ < (ng); q_++)                                                              \
        qg_rk_tile(mr, (y) + (size_t)8 * (stride) * q_, ldy, q_ == (ng) - 1 ? (nvl) : 8, xq, xs, K,  \
                   (g) + (size_t)(stride) * q_ * gb, q5)

static void rk_rows_generic(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1,
                            int q5) {
    RK_ROWS_BODY(QG_RK_TILE_NG)
}

/* ---- Q6_K x8 (see quant.h) -------------------------------------------- */

size_t mm_q6x_bytes(int N, int K) { return (size_t)(N + 7) / 8 * (size_t)(K / 256) * Q6X_BLOCK_BYTES; }

/* Super-block s of nv (<= 8) rows, row r at src + r rb, into blk (rows past
 * nv zero: d 0). */
static void q6x_pack_sb(uint8_t *blk, const uint8_t *src, size_t rb, int nv, int s) {
    if (nv < 8) memset(blk, 0, Q6X_BLOCK_BYTES);
    for (int r = 0; r < nv; r++) {
        const blk_q6_k *q = (const blk_q6_k *)(src + (size_t)r * rb) + s;
        memcpy(blk + 2 * r, &q->d, 2);
        for (int u = 0; u < 16; u++) blk[16 + 8 * u + r] = (uint8_t)q->scales[u];
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 8; i++) memcpy(blk + 144 + 256 * c + 32 * i + 4 * r, q->ql + 32 * c + 4 * i, 4);
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 8; i++) memcpy(blk + 1168 + 256 * h + 32 * i + 4 * r, q->qh + 32 * h + 4 * i, 4);
    }
}

void mm_q6x_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1) {
    size_t rb = (size_t)(K / 256) * sizeof(blk_q6_k), gb = (size_t)(K / 256) * Q6X_BLOCK_BYTES;
    for (int g = g0; g < g1; g++) {
        int nv = N - 8 * g < 8 ? N - 8 * g : 8;
        for (int s = 0; s < K / 256; s++)
            q6x_pack_sb(dst + (size_t)g * gb + (size_t)s * Q6X_BLOCK_BYTES, src + (size_t)(8 * g) * rb, rb, nv, s);
    }
}

void mm_q6x_repack(uint8_t *dst, const uint8_t *src, int N, int K) { mm_q6x_repack_groups(dst, src, N, K, 0, (N + 7) / 8); }

/* weight c (0..31) of sub-block j of row r, + 32 (0..63) */
static inline int q6x_q(const uint8_t *blk, int r, int j, int c) {
    int h = j / 4, s = j % 4, o = 32 * (c / 4) + 4 * r + c % 4;
    int lo = (blk[144 + 256 * (2 * h + (s & 1)) + o] >> (4 * (s >> 1))) & 0xF;
    return lo | (((blk[1168 + 256 * h + o] >> (2 * s)) & 3) << 4);
}

void mm_q6x_dequant_row(float *out, const uint8_t *w, int n, int K) {
    const uint8_t *g = w + (size_t)(n / 8) * (size_t)(K / 256) * Q6X_BLOCK_BYTES;
    int r = n % 8;
    for (int s = 0; s < K / 256; s++) {
        const uint8_t *blk = g + (size_t)s * Q6X_BLOCK_BYTES;
        uint16_t hd;
        memcpy(&hd, blk + 2 * r, 2);
        float d = fp16_to_f32(hd);
        for (int j = 0; j < 8; j++)
            for (int c = 0; c < 32; c++) /* as ggml_dequantize_row computes it */
                out[256 * s + 32 * j + c] = d * (float)(int8_t)blk[16 + 8 * (2 * j + c / 16) + r] * (float)(q6x_q(blk, r, j, c) - 32);
    }
}

/* mr input rows x one group of 8 weight rows: qg_tile's sums and float
 * steps for Q6_K, so the results are bit-identical to it. */
QG void qg_q6x_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq, size_t xs, int K, const uint8_t *g) {
    float lo[MQ_MR][8], hi[MQ_MR][8];
    memset(lo, 0, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    for (int s = 0; s < K / 256; s++) {
        const uint8_t *blk = g + (size_t)s * Q6X_BLOCK_BYTES;
        float d[8];
        for (int r = 0; r < 8; r++) {
            uint16_t hd;
            memcpy(&hd, blk + 2 * r, 2);
            d[r] = fp16_to_f32(hd);
        }
        for (int j = 0; j < 8; j++)
            for (int m = 0; m < mr; m++) {
                const uint8_t *xr = xq + m * xs;
                const int8_t *qx = (const int8_t *)xr + 256 * s + 32 * j;
                float dx = qx_scale(xr, K)[8 * s + j];
                for (int r = 0; r < 8; r++) {
                    int a = 0, b = 0;
                    for (int c = 0; c < 16; c++)
                        a += qx[c] * (q6x_q(blk, r, j, c) - 32), b += qx[c + 16] * (q6x_q(blk, r, j, c + 16) - 32);
                    float sl = d[r] * (float)(int8_t)blk[16 + 8 * (2 * j) + r], sh = d[r] * (float)(int8_t)blk[16 + 8 * (2 * j + 1) + r];
                    lo[m][r] += (float)a * (sl * dx);
                    hi[m][r] += (float)b * (sh * dx);
                }
            }
    }
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nv; r++) y[(size_t)m * ldy + r] = lo[m][r] + hi[m][r];
}

#define Q6X_ROWS_BODY(TILE)                                                                        \
    size_t xs = mm_qx_row_bytes(K), gb = (size_t)(K / 256) * Q6X_BLOCK_BYTES;                      \
    int ngr = (n1 - n0 + 7) / 8;                                                                   \
    R8_ROWS_NG(TILE, 2);

#define QG_Q6X_TILE_NG(mr, ng, y, ldy, xq, xs, K, g, nvl, stride)                                  \
    for (int q_ = 0; q_ < (ng); q_++)                                                              \
        qg_q6x_tile(mr, (y) + (size_t)8 * (stride) * q_, ldy, q_ == (ng) - 1 ? (nvl) : 8, xq, xs, K, \
                    (g) + (size_t)(stride) * q_ * gb)

static void q6x_rows_generic(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1) {
    Q6X_ROWS_BODY(QG_Q6X_TILE_NG)
}

/* Instantiates a tile for constant (mr, nr) (quant.h) and wtype so loops
 * unroll and the accumulators stay in registers. */
#define MQ_DISPATCH(FN, TILE, ATTR)                                                                \
    static inline ATTR void FN(int wtype, int mr, int nr, float *y, int ldy, int ys, const uint8_t *xq, \
                               size_t xs, int K, const uint8_t *w, size_t rb) {                    \
        MM_TILE_DISPATCH(TILE, y, ldy, ys, xq, xs, K, w, rb)                                       \
    }
#define MQ_TYPED(FN, TILE, ATTR)                                                                   \
    static inline ATTR void FN(int wtype, int mr, int nr, float *y, int ldy, int ys, const uint8_t *xq, \
                               size_t xs, int K, const uint8_t *w, size_t rb) {                    \
        switch (wtype) {                                                                           \
        case GGML_TYPE_Q4_0: TILE(GGML_TYPE_Q4_0, mr, nr, y, ldy, ys, xq, xs, K, w, rb); break;    \
        case GGML_TYPE_Q4_K: TILE(GGML_TYPE_Q4_K, mr, nr, y, ldy, ys, xq, xs, K, w, rb); break;    \
        case GGML_TYPE_Q5_K: TILE(GGML_TYPE_Q5_K, mr, nr, y, ldy, ys, xq, xs, K, w, rb); break;    \
        case GGML_TYPE_Q6_K: TILE(GGML_TYPE_Q6_K, mr, nr, y, ldy, ys, xq, xs, K, w, rb); break;    \
        default: TILE(GGML_TYPE_Q8_0, mr, nr, y, ldy, ys, xq, xs, K, w, rb); break;                \
        }                                                                                          \
    }

/* Rows [n0, n1) in strided streams, as MM_ROWS_BODY in matmul.c: 4 linear
 * streams at every M (the tile sums 4 rows' dot products in one vector);
 * leftover rows go one at a time. */
#define MQ_ROWS_BODY(TILE_ANY)                                                                     \
    size_t rb = mm_row_bytes(wtype, K), xs = mm_qx_row_bytes(K);                                   \
    int nrs = MQ_NR;                                                                  \
    int q = (n1 - n0) / nrs;                                                                       \
    for (int i = 0; i < q; i++) {                                                                  \
        int n = n0 + i;                                                                            \
        for (int m = 0; m < M; m += MQ_MR) {                                                       \
            int mr = M - m < MQ_MR ? M - m : MQ_MR;                                                \
            TILE_ANY(wtype, mr, nrs, y + (size_t)m * ldy + n, ldy, q, xq + (size_t)m * xs, xs, K,  \
                     w + (size_t)n * rb, (size_t)q * rb);                                          \
        }                                                                                          \
    }                                                                                              \
    for (int n = n0 + q * nrs; n < n1; n++)                                                        \
        for (int m = 0; m < M; m += MQ_MR) {                                                       \
            int mr = M - m < MQ_MR ? M - m : MQ_MR;                                                \
            TILE_ANY(wtype, mr, 1, y + (size_t)m * ldy + n, ldy, 1, xq + (size_t)m * xs, xs, K,    \
                     w + (size_t)n * rb, rb);                                                      \
        }

#define QG_ATTR __attribute__((always_inline))
MQ_DISPATCH(qg_tile_mn, qg_tile, QG_ATTR)
MQ_TYPED(qg_tile_any, qg_tile_mn, QG_ATTR)

static void mmq_rows_generic(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int wtype, int M, int K,
                             int n0, int n1) {
    MQ_ROWS_BODY(qg_tile_any)
}

#if defined(__x86_64__)
#define QT_SUFFIX avx2
#define QT_TARGET __attribute__((target("avx2,fma,f16c"), always_inline))
#define QT_NOINLINE_TARGET __attribute__((target("avx2,fma,f16c")))
#define QT_VNNI 0
#include "kernels/cpu/matmul_q8_tile.h"
#undef QT_SUFFIX
#undef QT_TARGET
#undef QT_NOINLINE_TARGET
#undef QT_VNNI

#define QT_SUFFIX vnni
#define QT_TARGET __attribute__((target("avx512vnni,avx512vl,avx512bw,avx512f,avx2,fma,f16c"), always_inline))
#define QT_NOINLINE_TARGET __attribute__((target("avx512vnni,avx512vl,avx512bw,avx512f,avx2,fma,f16c")))
#define QT_VNNI 1
#include "kernels/cpu/matmul_q8_tile.h"
#undef QT_SUFFIX
#undef QT_TARGET
#undef QT_NOINLINE_TARGET
#undef QT_VNNI
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
/* mr input rows x one Q8_0 x8 group on base ARMv8-A NEON (no dot-product
 * extension needed): per run j, the 8 rows' 4 bytes times the row's 4 x bytes
 * broadcast, as int16 products (smull/smlal: two runs' products summed, at
 * most 2 * 128 * 127, no overflow) accumulated pairwise into int32 (sadalp);
 * a pairwise add gives each row's exact block sum, then the float step of
 * qg_r8_tile (acc += float(s) * (d * dx)). */
static inline __attribute__((always_inline)) void nq_r8_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq,
                                                             size_t xs, int K, const uint8_t *g) {
    float32x4_t acc[MQ_MR][2];
    for (int m = 0; m < mr; m++) acc[m][0] = acc[m][1] = vdupq_n_f32(0.0f);
    const uint8x16_t flip = vdupq_n_u8(0x80);
    for (int b = 0; b < K / 32; b++) {
        const uint8_t *blk = g + (size_t)b * R8_BLOCK_BYTES;
        float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)blk));
        float32x4_t d0 = vcvt_f32_f16(vget_low_f16(dh)), d1 = vcvt_high_f32_f16(dh);
        int32x4_t s[MQ_MR][4];
        for (int m = 0; m < mr; m++)
            for (int q = 0; q < 4; q++) s[m][q] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j += 2) {
            int8x16_t w0a = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk + 16 + 32 * j), flip));
            int8x16_t w0b = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk + 16 + 32 * j + 16), flip));
            int8x16_t w1a = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk + 16 + 32 * (j + 1)), flip));
            int8x16_t w1b = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk + 16 + 32 * (j + 1) + 16), flip));
            for (int m = 0; m < mr; m++) {
                int32_t q0, q1;
                memcpy(&q0, xq + m * xs + 32 * b + 4 * j, 4);
                memcpy(&q1, xq + m * xs + 32 * b + 4 * j + 4, 4);
                int8x16_t x0 = vreinterpretq_s8_s32(vdupq_n_s32(q0)), x1 = vreinterpretq_s8_s32(vdupq_n_s32(q1));
                int16x8_t p01 = vmlal_s8(vmull_s8(vget_low_s8(w0a), vget_low_s8(x0)), vget_low_s8(w1a), vget_low_s8(x1));
                int16x8_t p23 = vmlal_high_s8(vmull_high_s8(w0a, x0), w1a, x1);
                int16x8_t p45 = vmlal_s8(vmull_s8(vget_low_s8(w0b), vget_low_s8(x0)), vget_low_s8(w1b), vget_low_s8(x1));
                int16x8_t p67 = vmlal_high_s8(vmull_high_s8(w0b, x0), w1b, x1);
                s[m][0] = vpadalq_s16(s[m][0], p01);
                s[m][1] = vpadalq_s16(s[m][1], p23);
                s[m][2] = vpadalq_s16(s[m][2], p45);
                s[m][3] = vpadalq_s16(s[m][3], p67);
            }
        }
        for (int m = 0; m < mr; m++) {
            float dx = qx_scale(xq + m * xs, K)[b];
            int32x4_t r03 = vpaddq_s32(s[m][0], s[m][1]), r47 = vpaddq_s32(s[m][2], s[m][3]);
            acc[m][0] = vfmaq_f32(acc[m][0], vcvtq_f32_s32(r03), vmulq_n_f32(d0, dx));
            acc[m][1] = vfmaq_f32(acc[m][1], vcvtq_f32_s32(r47), vmulq_n_f32(d1, dx));
        }
    }
    for (int m = 0; m < mr; m++) {
        float o[8];
        vst1q_f32(o, acc[m][0]);
        vst1q_f32(o + 4, acc[m][1]);
        for (int r = 0; r < nv; r++) y[(size_t)m * ldy + r] = o[r];
    }
}

#define NQ_R8_TILE_NG(mr, ng, y, ldy, xq, xs, K, g, nvl, stride)                                   \
    for (int q_ = 0; q_ < (ng); q_++)                                                              \
        nq_r8_tile(mr, (y) + (size_t)8 * (stride) * q_, ldy, q_ == (ng) - 1 ? (nvl) : 8, xq, xs, K,  \
                   (g) + (size_t)(stride) * q_ * gb)

static void r8_rows_neon(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1) {
    R8_ROWS_BODY(NQ_R8_TILE_NG)
}

/* ---- Q4_K, Q5_K, Q6_K x8 on NEON ----
 * One super-block of one group of 8 rows for mr input rows, as qg_rk_tile and
 * qg_q6x_tile compute it: per half sub-block the exact integer sum (int8
 * products, the 4 runs' products summed in int16: |.| <= 4 * 31 * 127 for
 * Q4_K/Q5_K, 4 * 32 * 127 for Q6_K's q - 32, then pairwise into int32), then
 * acc = fma(float(sum), scale * dx, acc); Q4_K/Q5_K's mins as qg_rk_tile adds
 * them. The file layouts go through the same code a super-block at a time
 * (repacked into a stack block), so both layouts give the same bits. */
#define NQ_BARRIER(v) __asm__("" : "+w"(v)) /* a rounded product: no fused multiply-add (-ffp-contract) */

static inline __attribute__((always_inline)) float32x4_t nq_u8x4(const uint8_t *p, int half) {
    uint16x8_t v = vmovl_u8(vld1_u8(p));
    return vcvtq_f32_u32(half ? vmovl_high_u16(v) : vmovl_u16(vget_low_u16(v)));
}

/* the int32 sums of the 8 rows over 4 runs: w[i] the 32 weight bytes of run i
 * (rows 0-3, 4-7), x the 16 activation bytes (4 per run) */
static inline __attribute__((always_inline)) void nq_dot4(int32x4_t *r03, int32x4_t *r47, const int8x16_t w[4][2],
                                                          const int8_t *x) {
    int8x8_t xv[4];
    for (int i = 0; i < 4; i++) {
        int32_t q4;
        memcpy(&q4, x + 4 * i, 4);
        xv[i] = vreinterpret_s8_s32(vdup_n_s32(q4));
    }
    int16x8_t p[4];
    for (int k = 0; k < 4; k++) { /* rows 2k, 2k+1 */
        int8x8_t w0 = k & 1 ? vget_high_s8(w[0][k >> 1]) : vget_low_s8(w[0][k >> 1]);
        p[k] = vmull_s8(w0, xv[0]);
        for (int i = 1; i < 4; i++)
            p[k] = vmlal_s8(p[k], k & 1 ? vget_high_s8(w[i][k >> 1]) : vget_low_s8(w[i][k >> 1]), xv[i]);
    }
    *r03 = vpaddq_s32(vpaddlq_s16(p[0]), vpaddlq_s16(p[1]));
    *r47 = vpaddq_s32(vpaddlq_s16(p[2]), vpaddlq_s16(p[3]));
}

static inline __attribute__((always_inline)) void nq_rk_sb(int mr, float32x4_t lo[][2], float32x4_t hi[][2],
                                                           const uint8_t *blk, const uint8_t *xq, size_t xs, int K,
                                                           int sb, int q5) {
    float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)blk));
    float16x8_t nh = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(blk + 16)));
    float32x4_t d[2] = {vcvt_f32_f16(vget_low_f16(dh)), vcvt_high_f32_f16(dh)};
    float32x4_t nd[2] = {vcvt_f32_f16(vget_low_f16(nh)), vcvt_high_f32_f16(nh)};
    for (int m = 0; m < mr; m++) {
        const float *bs = qx_bsum(xq + m * xs, K) + 8 * sb;
        for (int c = 0; c < 2; c++) {
            float32x4_t t[8];
            for (int j = 0; j < 8; j++) {
                t[j] = vmulq_f32(nd[c], nq_u8x4(blk + 96 + 8 * j, c));
                NQ_BARRIER(t[j]);
                t[j] = vmulq_n_f32(t[j], bs[j]);
                NQ_BARRIER(t[j]);
            }
            lo[m][c] = vaddq_f32(lo[m][c], vaddq_f32(vaddq_f32(t[0], t[1]), vaddq_f32(t[2], t[3])));
            hi[m][c] = vaddq_f32(hi[m][c], vaddq_f32(vaddq_f32(t[4], t[5]), vaddq_f32(t[6], t[7])));
        }
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    for (int j = 0; j < 8; j++) {
        float32x4_t S[2];
        for (int c = 0; c < 2; c++) {
            S[c] = vmulq_f32(d[c], nq_u8x4(blk + 32 + 8 * j, c));
            NQ_BARRIER(S[c]);
        }
        for (int h = 0; h < 2; h++) {
            int8x16_t w[4][2];
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < 2; c++) {
                    size_t o = 32 * (4 * h + i) + 16 * c;
                    uint8x16_t v = vld1q_u8(blk + 160 + 256 * (j / 2) + o);
                    v = j & 1 ? vshrq_n_u8(v, 4) : vandq_u8(v, m4);
                    if (q5) /* bit j of the qh byte as bit 4 */
                        v = vorrq_u8(v, vandq_u8(vshlq_u8(vld1q_u8(blk + RK_BLOCK_BYTES + o), vdupq_n_s8((int8_t)(4 - j))), b4));
                    w[i][c] = vreinterpretq_s8_u8(v);
                }
            for (int m = 0; m < mr; m++) {
                const uint8_t *xr = xq + m * xs;
                int32x4_t r[2];
                nq_dot4(&r[0], &r[1], (const int8x16_t(*)[2])w, (const int8_t *)xr + 256 * sb + 32 * j + 16 * h);
                float dx = qx_scale(xr, K)[8 * sb + j];
                for (int c = 0; c < 2; c++) {
                    float32x4_t sd = vmulq_n_f32(S[c], dx);
                    NQ_BARRIER(sd);
                    if (h) hi[m][c] = vfmaq_f32(hi[m][c], vcvtq_f32_s32(r[c]), sd);
                    else lo[m][c] = vfmaq_f32(lo[m][c], vcvtq_f32_s32(r[c]), sd);
                }
            }
        }
    }
}

static inline __attribute__((always_inline)) void nq_q6x_sb(int mr, float32x4_t lo[][2], float32x4_t hi[][2],
                                                            const uint8_t *blk, const uint8_t *xq, size_t xs, int K,
                                                            int sb) {
    float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)blk));
    float32x4_t d[2] = {vcvt_f32_f16(vget_low_f16(dh)), vcvt_high_f32_f16(dh)};
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t o32 = vdupq_n_s8(32);
    for (int j = 0; j < 8; j++) {
        int h = j / 4, s = j % 4;
        for (int hh = 0; hh < 2; hh++) {
            int u = 2 * j + hh;
            int16x8_t sc = vmovl_s8(vld1_s8((const int8_t *)blk + 16 + 8 * u));
            float32x4_t S[2] = {vmulq_f32(d[0], vcvtq_f32_s32(vmovl_s16(vget_low_s16(sc)))),
                                vmulq_f32(d[1], vcvtq_f32_s32(vmovl_high_s16(sc)))};
            NQ_BARRIER(S[0]);
            NQ_BARRIER(S[1]);
            int8x16_t w[4][2];
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < 2; c++) {
                    size_t o = 32 * (4 * hh + i) + 16 * c;
                    uint8x16_t l = vld1q_u8(blk + 144 + 256 * (2 * h + (s & 1)) + o);
                    uint8x16_t q = vld1q_u8(blk + 1168 + 256 * h + o);
                    l = s >> 1 ? vshrq_n_u8(l, 4) : vandq_u8(l, m4);
                    q = vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(4 - 2 * s))), m30);
                    w[i][c] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l, q)), o32);
                }
            for (int m = 0; m < mr; m++) {
                const uint8_t *xr = xq + m * xs;
                int32x4_t r[2];
                nq_dot4(&r[0], &r[1], (const int8x16_t(*)[2])w, (const int8_t *)xr + 256 * sb + 32 * j + 16 * hh);
                float dx = qx_scale(xr, K)[8 * sb + j];
                for (int c = 0; c < 2; c++) {
                    float32x4_t sd = vmulq_n_f32(S[c], dx);
                    NQ_BARRIER(sd);
                    if (hh) hi[m][c] = vfmaq_f32(hi[m][c], vcvtq_f32_s32(r[c]), sd);
                    else lo[m][c] = vfmaq_f32(lo[m][c], vcvtq_f32_s32(r[c]), sd);
                }
            }
        }
    }
}

/* y rows [0, nv) of the mr input rows from lo + hi */
static inline __attribute__((always_inline)) void nq_k_store(int mr, float *y, int ldy, int nv, float32x4_t lo[][2],
                                                             float32x4_t hi[][2]) {
    for (int m = 0; m < mr; m++) {
        float o[8];
        vst1q_f32(o, vaddq_f32(lo[m][0], hi[m][0]));
        vst1q_f32(o + 4, vaddq_f32(lo[m][1], hi[m][1]));
        for (int r = 0; r < nv; r++) y[(size_t)m * ldy + r] = o[r];
    }
}

/* mr input rows x one x8 group (type: 4 Q4_K, 5 Q5_K, 6 Q6_K) */
static inline __attribute__((always_inline)) void nq_kx_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq,
                                                             size_t xs, int K, const uint8_t *g, int kt) {
    float32x4_t lo[MQ_MR][2], hi[MQ_MR][2];
    for (int m = 0; m < mr; m++) lo[m][0] = lo[m][1] = hi[m][0] = hi[m][1] = vdupq_n_f32(0.0f);
    size_t bb = kt == 6 ? Q6X_BLOCK_BYTES : RK_BB(kt == 5);
    for (int sb = 0; sb < K / 256; sb++) {
        if (kt == 6) nq_q6x_sb(mr, lo, hi, g + (size_t)sb * bb, xq, xs, K, sb);
        else nq_rk_sb(mr, lo, hi, g + (size_t)sb * bb, xq, xs, K, sb, kt == 5);
    }
    nq_k_store(mr, y, ldy, nv, lo, hi);
}

#define NQ_KX_TILE_NG(mr, ng, y, ldy, xq, xs, K, g, nvl, stride)                                   \
    for (int q_ = 0; q_ < (ng); q_++)                                                              \
        nq_kx_tile(mr, (y) + (size_t)8 * (stride) * q_, ldy, q_ == (ng) - 1 ? (nvl) : 8, xq, xs, K,  \
                   (g) + (size_t)(stride) * q_ * gb, kt)

static void rk_rows_neon(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1,
                         int q5) {
    const int kt = q5 ? 5 : 4;
    RK_ROWS_BODY(NQ_KX_TILE_NG)
}

static void q6x_rows_neon(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0, int n1) {
    const int kt = 6;
    Q6X_ROWS_BODY(NQ_KX_TILE_NG)
}

/* The file layouts: 8 rows at a time from n0, each super-block repacked into
 * a stack block and run through the x8 code above. */
static void nq_kfile_tile(int mr, float *y, int ldy, int nv, const uint8_t *xq, size_t xs, int K, const uint8_t *w,
                          size_t rb, int kt) {
    _Alignas(64) uint8_t blk[Q6X_BLOCK_BYTES];
    float32x4_t lo[MQ_MR][2], hi[MQ_MR][2];
    for (int m = 0; m < mr; m++) lo[m][0] = lo[m][1] = hi[m][0] = hi[m][1] = vdupq_n_f32(0.0f);
    for (int sb = 0; sb < K / 256; sb++) {
        if (kt == 6) {
            q6x_pack_sb(blk, w, rb, nv, sb);
            nq_q6x_sb(mr, lo, hi, blk, xq, xs, K, sb);
        } else {
            rk_pack_sb(blk, w, rb, nv, sb, kt == 5);
            nq_rk_sb(mr, lo, hi, blk, xq, xs, K, sb, kt == 5);
        }
    }
    nq_k_store(mr, y, ldy, nv, lo, hi);
}

static void nq_kfile_rows(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int wtype, int M, int K, int n0,
                          int n1) {
    int kt = wtype == GGML_TYPE_Q6_K ? 6 : wtype == GGML_TYPE_Q5_K ? 5 : 4;
    size_t rb = mm_row_bytes(wtype, K), xs = mm_qx_row_bytes(K);
    for (int n = n0; n < n1; n += 8) {
        int nv = n1 - n < 8 ? n1 - n : 8;
        for (int m = 0; m < M; m += MQ_MR) {
            int mr = M - m < MQ_MR ? M - m : MQ_MR;
            nq_kfile_tile(mr, y + (size_t)m * ldy + n, ldy, nv, xq + (size_t)m * xs, xs, K, w + (size_t)n * rb, rb, kt);
        }
    }
}
#endif

void mmq_rows_r8(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                 int n1) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512 && __builtin_cpu_supports("avx512vnni")) { r8_rows_vnni(y, ldy, xq, w, M, K, n0, n1); return; }
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) { r8_rows_avx2(y, ldy, xq, w, M, K, n0, n1); return; }
#endif
#if defined(__aarch64__)
    if (lvl == SIMD_NEON) { r8_rows_neon(y, ldy, xq, w, M, K, n0, n1); return; }
#endif
    (void)lvl;
    r8_rows_generic(y, ldy, xq, w, M, K, n0, n1);
}

void mmq_rows_rk(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                 int n1, int q5) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512 && __builtin_cpu_supports("avx512vnni")) {
        if (q5) rk5_rows_vnni(y, ldy, xq, w, M, K, n0, n1);
        else rk_rows_vnni(y, ldy, xq, w, M, K, n0, n1);
        return;
    }
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) {
        if (q5) rk5_rows_avx2(y, ldy, xq, w, M, K, n0, n1);
        else rk_rows_avx2(y, ldy, xq, w, M, K, n0, n1);
        return;
    }
#endif
#if defined(__aarch64__)
    if (lvl == SIMD_NEON) { rk_rows_neon(y, ldy, xq, w, M, K, n0, n1, q5); return; }
#endif
    (void)lvl;
    rk_rows_generic(y, ldy, xq, w, M, K, n0, n1, q5);
}

void mmq_rows_q6x(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                  int n1) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512 && __builtin_cpu_supports("avx512vnni")) { q6x_rows_vnni(y, ldy, xq, w, M, K, n0, n1); return; }
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) { q6x_rows_avx2(y, ldy, xq, w, M, K, n0, n1); return; }
#endif
#if defined(__aarch64__)
    if (lvl == SIMD_NEON) { q6x_rows_neon(y, ldy, xq, w, M, K, n0, n1); return; }
#endif
    (void)lvl;
    q6x_rows_generic(y, ldy, xq, w, M, K, n0, n1);
}

void mmq_rows(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int wtype, int M, int K,
              int n0, int n1) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512 && __builtin_cpu_supports("avx512vnni")) {
        if (wtype == GGML_TYPE_Q4_0) q40_rows_vnni(y, ldy, xq, w, M, K, n0, n1);
        else mmq_rows_vnni(y, ldy, xq, w, wtype, M, K, n0, n1);
        return;
    }
    if (lvl == SIMD_AVX2 || lvl == SIMD_AVX512) {
        if (wtype == GGML_TYPE_Q4_0) q40_rows_avx2(y, ldy, xq, w, M, K, n0, n1);
        else mmq_rows_avx2(y, ldy, xq, w, wtype, M, K, n0, n1);
        return;
    }
#endif
#if defined(__aarch64__)
    if (lvl == SIMD_NEON && (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K || wtype == GGML_TYPE_Q6_K)) {
        nq_kfile_rows(y, ldy, xq, w, wtype, M, K, n0, n1);
        return;
    }
#endif
    (void)lvl;
    mmq_rows_generic(y, ldy, xq, w, wtype, M, K, n0, n1);
}
