/* matmul.c — CPU small-M GEMM over float weights (F32/F16/BF16; see
 * matmul.h), the row dequantizers and the dispatch to the integer-dot path of
 * matmul_q8.c for the quantized types. A register tile of MR input rows x NR
 * weight rows accumulates dot products over K; the weight tile is loaded (and
 * widened) once per k-step and used by all MR rows. Three code paths chosen at
 * run time: AVX-512 intrinsics, AVX2+FMA+F16C intrinsics and generic portable
 * C. */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/vmath.h"

#include "kernels/ggml_type.h"
#include "kernels/half.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define MM_X86 1
#endif

#ifndef MM_PREFETCH
#define MM_PREFETCH 2048 /* bytes ahead in a weight row stream */
#endif
#ifndef MM_PREFETCH_HINT
/* into L2, not L1: a T0 prefetch holds one of the core's few L1 miss buffers
 * until its line arrives, so the FMA-bound tile stalled on them (M=5 F16
 * measured 6.8-7.1 ms with T0 against 4.9-5.6 ms with T1 for the 12-layer
 * widen model's matmuls, 2 threads; M=1 without prefetch, 4.4-5.5 ms) */
#define MM_PREFETCH_HINT _MM_HINT_T1
#endif
#define MR_MAX 5 /* 5 = γ+1 for γ=4: the verification shape fits one tile */
#define NR 4

size_t mm_row_bytes(int wtype, int K) {
    switch (wtype) {
    case GGML_TYPE_F32: return (size_t)K * 4;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16: return (size_t)K * 2;
    case GGML_TYPE_Q8_0:
    case SPECD_TYPE_Q8_0_R8: /* per row, on average: the same bytes, regrouped */
        return K % 32 ? 0 : (size_t)(K / 32) * sizeof(blk_q8_0);
    case GGML_TYPE_Q4_0: return K % 32 ? 0 : (size_t)(K / 32) * sizeof(blk_q4_0);
    case GGML_TYPE_Q4_K:
    case SPECD_TYPE_Q4_K_R8: /* per row, on average (the repacked form adds 32 bytes per 8 super-blocks) */
        return K % 256 ? 0 : (size_t)(K / 256) * sizeof(blk_q4_k);
    case GGML_TYPE_Q5_K:
    case SPECD_TYPE_Q5_K_R8: /* per row, on average */
        return K % 256 ? 0 : (size_t)(K / 256) * sizeof(blk_q5_k);
    case GGML_TYPE_Q6_K:
    case SPECD_TYPE_Q6_K_R8: /* the same bytes, regrouped */
        return K % 256 ? 0 : (size_t)(K / 256) * sizeof(blk_q6_k);
    default: return 0;
    }
}

void mm_dequant_row(float *out, const uint8_t *row, int wtype, int K) {
    /* the model loader only admits the types the reference converts */
    if (!ggml_dequantize_row(out, wtype, row, (uint64_t)K)) abort();
}

/* ---- portable C path --------------------------------------------------
 * Written so that gcc vectorizes the inner loops: a k-step of 32 weights is
 * first widened to floats in a small array, then FMA'd into 16-lane arrays. */

#define GEN_ALWAYS static inline __attribute__((always_inline))

/* a * b + c, fused where the target has a fused multiply-add (aarch64) and
 * left as two roundings where it has none (x86-64 baseline): written out so
 * -ffp-contract=fast cannot fuse some instantiations of a tile and not others
 * (on aarch64 a row's F16 result depended on the tile height) */
#if defined(__FP_FAST_FMAF)
#define GEN_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define GEN_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* Branch-free half -> float for finite values (weights are never inf/nan):
 * shift the exponent+mantissa into place and let a multiply by 2^112 rebias
 * it; subnormals come out right because the product is exact. */
GEN_ALWAYS float gen_h2f(uint16_t h) {
    uint32_t bits = (uint32_t)(h & 0x7fff) << 13;
    float f = half_bits_f32(bits) * 0x1p112f;
    return half_bits_f32(half_f32_bits(f) | ((uint32_t)(h & 0x8000) << 16));
}

/* Widens weights [k, k+32) of one row into wv (32). */
GEN_ALWAYS void gen_load32(float *wv, const uint8_t *row, int wtype, int k) {
    if (wtype == GGML_TYPE_F32) {
        memcpy(wv, row + (size_t)k * 4, 128);
    } else if (wtype == GGML_TYPE_F16) {
        uint16_t h[32];
        memcpy(h, row + (size_t)k * 2, 64);
        for (int l = 0; l < 32; l++) wv[l] = gen_h2f(h[l]);
    } else if (wtype == GGML_TYPE_BF16) {
        uint16_t h[32];
        memcpy(h, row + (size_t)k * 2, 64);
        for (int l = 0; l < 32; l++) wv[l] = half_bits_f32((uint32_t)h[l] << 16);
    }
}

GEN_ALWAYS float gen_load1(const uint8_t *row, int wtype, int k) {
    uint16_t h;
    switch (wtype) {
    case GGML_TYPE_F32: { float f; memcpy(&f, row + (size_t)k * 4, 4); return f; }
    case GGML_TYPE_F16: memcpy(&h, row + (size_t)k * 2, 2); return gen_h2f(h);
    case GGML_TYPE_BF16: memcpy(&h, row + (size_t)k * 2, 2); return bf16_to_f32(h);
    default: return 0.0f; /* quantized rows are whole blocks: no tail */
    }
}

GEN_ALWAYS void gen_tile(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x, int K,
                         const uint8_t *w, size_t rb) {
    float acc[MR_MAX][NR][16];
    memset(acc, 0, sizeof(acc));
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        float wv[NR][32];
        for (int r = 0; r < nr; r++) gen_load32(wv[r], w + r * rb, wtype, k);
        for (int m = 0; m < mr; m++) {
            const float *xm = x + (size_t)m * K + k;
            for (int r = 0; r < nr; r++)
                for (int l = 0; l < 16; l++)
                    acc[m][r][l] = GEN_FMA(wv[r][l + 16], xm[l + 16], GEN_FMA(wv[r][l], xm[l], acc[m][r][l]));
        }
    }
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nr; r++) {
            float s = 0.0f;
            for (int l = 0; l < 16; l++) s += acc[m][r][l];
            for (int kk = k; kk < K; kk++) s = GEN_FMA(gen_load1(w + r * rb, wtype, kk), x[(size_t)m * K + kk], s);
            y[(size_t)m * ldy + (size_t)r * ys] = s;
        }
}

/* Instantiates the tile for every (mr, nr) with constants (quant.h). */
#define GEN_DISPATCH(FN, TILE)                                                             \
    GEN_ALWAYS void FN(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x, int K, \
                       const uint8_t *w, size_t rb) {                                      \
        MM_TILE_DISPATCH(TILE, y, ldy, ys, x, K, w, rb)                                    \
    }

#define GEN_TYPED(FN, TILE)                                                                \
    GEN_ALWAYS void FN(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x, int K, \
                       const uint8_t *w, size_t rb) {                                      \
        switch (wtype) {                                                                   \
        case GGML_TYPE_F32: TILE(GGML_TYPE_F32, mr, nr, y, ldy, ys, x, K, w, rb); break;       \
        case GGML_TYPE_F16: TILE(GGML_TYPE_F16, mr, nr, y, ldy, ys, x, K, w, rb); break;       \
        default: TILE(GGML_TYPE_BF16, mr, nr, y, ldy, ys, x, K, w, rb); break;                 \
        }                                                                                  \
    }

GEN_DISPATCH(gen_tile_mn, gen_tile)
GEN_TYPED(gen_tile_any, gen_tile_mn)

/* The row loop shared by every path. Weight rows stream from DRAM, so the
 * order they are read in matters more than anything else at small M: a tile
 * takes its nr rows from nr equal slices of [n0, n1) ("strided" tiles), so
 * each of the nr streams runs linearly through one slice instead of restarting
 * every few kilobytes (4 adjacent short rows read side by side defeat the
 * hardware prefetcher). Every M uses 4 streams: at M = 1, 2 streams per thread
 * read as fast while the host's memory is slow but fell 10-15% short when it
 * was fast (F16: 46-49 against 52-55 GB/s). Rows left over after nr equal
 * slices go one at a time. A row's
 * arithmetic does not depend on which tile it lands in, so results are the same
 * for any split of [0, N) over threads. Half-precision weights are widened in
 * registers at every M: the conversion is 2 instructions per 16 weights
 * against 5 FMAs, cheaper than a pass through memory. */
/* Many input rows (prefill) are compute-bound, and the order of the loops
 * decides where the operands come from: weight-tile-outer read all M rows of
 * x (1.5 MB at 512 x 768 floats) from L3 for every 4 weight rows. So past one
 * tile of rows the weights go in blocks of MM_WBLOCK bytes (kept in L2) and
 * each MR-row tile of x (in L1) passes over a whole block. Each (row, output)
 * is still one tile's full-K dot product: the order changes no bit. */
#ifndef MM_WBLOCK
#define MM_WBLOCK (192 << 10)
#endif
#define MM_ROWS_BODY(TILE_ANY, MR)                                                          \
    size_t rb = mm_row_bytes(wtype, K);                                                     \
    int q = (n1 - n0) / NR;                                                                 \
    int qb = M <= (MR) ? q : (int)(MM_WBLOCK / (NR * rb));                                  \
    if (qb < 1) qb = 1;                                                                     \
    for (int i0 = 0; i0 < q; i0 += qb) {                                                    \
        int i1 = i0 + qb < q ? i0 + qb : q;                                                 \
        for (int m = 0; m < M; m += (MR)) {                                                 \
            int mr = M - m < (MR) ? M - m : (MR);                                           \
            for (int i = i0; i < i1; i++) {                                                 \
                int n = n0 + i;                                                             \
                TILE_ANY(wtype, mr, NR, y + (size_t)m * ldy + n, ldy, q, x + (size_t)m * K, K, \
                         w + (size_t)n * rb, (size_t)q * rb);                               \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    for (int n = n0 + q * NR; n < n1; n++)                                                  \
        for (int m = 0; m < M; m += (MR)) {                                                 \
            int mr = M - m < (MR) ? M - m : (MR);                                           \
            TILE_ANY(wtype, mr, 1, y + (size_t)m * ldy + n, ldy, 1, x + (size_t)m * K, K,   \
                     w + (size_t)n * rb, rb);                                               \
        }

static void mm_rows_generic(float *y, int ldy, const float *x, const uint8_t *w, int wtype, int M,
                            int K, int n0, int n1) {
    MM_ROWS_BODY(gen_tile_any, MR_MAX)
}

#ifdef MM_X86
/* ---- AVX2 + FMA + F16C path -------------------------------------------
 * 16 ymm registers: a tile of at most 3 input rows x 4 weight rows (12
 * accumulators, 4 widened weight vectors, x as the FMAs' memory operand); the
 * portable tile's 5 x 4 x 16 accumulators spilled, and its scalar half
 * widening ran at portable-C speed (F16 decode 27 tok/s against 150-216 on
 * AVX-512). A dot product has one 8-lane accumulator (lane l takes k = l mod
 * 8, in k order, the tail included) and one fixed horizontal sum, whatever
 * the tile: M rows in one call equal M one-row calls bit for bit. */
#define MR_AVX2 3
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c"), always_inline))

/* 8 weights [k, k+8) of one row widened to float. */
static inline AVX2_TARGET __m256 a2_load8(const uint8_t *row, int wtype, int k) {
    if (wtype == GGML_TYPE_F32) return _mm256_loadu_ps((const float *)row + k);
    __m128i h = _mm_loadu_si128((const __m128i *)(row + (size_t)k * 2));
    if (wtype == GGML_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The K tail (n < 8 values from k): zero-padded copies, then the same widening. */
static inline AVX2_TARGET __m256 a2_load_tail(const uint8_t *row, int wtype, int k, int n) {
    uint8_t buf[32] = {0};
    size_t es = wtype == GGML_TYPE_F32 ? 4 : 2;
    memcpy(buf, row + (size_t)k * es, (size_t)n * es);
    return a2_load8(buf, wtype, 0);
}

/* Horizontal sums of four vectors, one fixed tree each: ((e0+e1)+(e2+e3)) +
 * ((e4+e5)+(e6+e7)); a single sum passes the same vector four times. */
static inline AVX2_TARGET __m128 a2_hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

static inline AVX2_TARGET void a2_tile(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x, int K,
                                       const uint8_t *w, size_t rb) {
    __m256 acc[MR_AVX2][NR];
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nr; r++) acc[m][r] = _mm256_setzero_ps();
    const int wsz = wtype == GGML_TYPE_F32 ? 4 : 2;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[NR];
        if (mr >= 2 && (k & 31) == 0) /* compute-bound tiles: fetch ahead into L2 (see v_tile) */
            for (int r = 0; r < nr; r++)
                for (int l = 0; l < 32 * wsz; l += 64)
                    _mm_prefetch((const char *)(w + r * rb) + (size_t)k * wsz + MM_PREFETCH + l, MM_PREFETCH_HINT);
        for (int r = 0; r < nr; r++) wv[r] = a2_load8(w + r * rb, wtype, k);
        for (int m = 0; m < mr; m++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)m * K + k);
            for (int r = 0; r < nr; r++) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
        }
    }
    if (k < K) { /* float types only: quantized rows are whole blocks */
        int n = K - k;
        __m256i msk = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 wv[NR];
        for (int r = 0; r < nr; r++) wv[r] = a2_load_tail(w + r * rb, wtype, k, n);
        for (int m = 0; m < mr; m++) {
            __m256 xv = _mm256_maskload_ps(x + (size_t)m * K + k, msk);
            for (int r = 0; r < nr; r++) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
        }
    }
    for (int m = 0; m < mr; m++) {
        float o[4];
        float *ym = y + (size_t)m * ldy;
        if (nr == 4) {
            _mm_storeu_ps(o, a2_hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
            for (int r = 0; r < 4; r++) ym[(size_t)r * ys] = o[r];
        } else {
            for (int r = 0; r < nr; r++) {
                _mm_storeu_ps(o, a2_hsum4(acc[m][r], acc[m][r], acc[m][r], acc[m][r]));
                ym[(size_t)r * ys] = o[0];
            }
        }
    }
}

#define A2_TILE_DISPATCH(TILE, ...)                                         \
    if (nr == 4) {                                                          \
        if (mr == 1) TILE(wtype, 1, 4, __VA_ARGS__);                        \
        else if (mr == 2) TILE(wtype, 2, 4, __VA_ARGS__);                   \
        else TILE(wtype, 3, 4, __VA_ARGS__);                                \
    } else {                                                                \
        if (mr == 1) TILE(wtype, 1, 1, __VA_ARGS__);                        \
        else if (mr == 2) TILE(wtype, 2, 1, __VA_ARGS__);                   \
        else TILE(wtype, 3, 1, __VA_ARGS__);                                \
    }
static inline AVX2_TARGET void a2_tile_mn(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x,
                                          int K, const uint8_t *w, size_t rb) {
    A2_TILE_DISPATCH(a2_tile, y, ldy, ys, x, K, w, rb)
}
#undef GEN_ALWAYS
#define GEN_ALWAYS static inline AVX2_TARGET
GEN_TYPED(a2_tile_any, a2_tile_mn)

__attribute__((target("avx2,fma,f16c"))) static void mm_rows_avx2(float *y, int ldy, const float *x,
                                                                  const uint8_t *w, int wtype, int M, int K,
                                                                  int n0, int n1) {
    MM_ROWS_BODY(a2_tile_any, MR_AVX2)
}

/* ---- AVX-512 path ----------------------------------------------------- */

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"), always_inline))

/* Loads weights [k, k+32) of one row as two 16-lane vectors. */
static inline AVX512_TARGET void v_load32(__m512 *a, __m512 *b, const uint8_t *row, int wtype, int k) {
    if (wtype == GGML_TYPE_F32) {
        const float *p = (const float *)row + k;
        *a = _mm512_loadu_ps(p);
        *b = _mm512_loadu_ps(p + 16);
    } else if (wtype == GGML_TYPE_F16) {
        const uint8_t *p = row + (size_t)k * 2;
        *a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        *b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
    } else if (wtype == GGML_TYPE_BF16) {
        const uint8_t *p = row + (size_t)k * 2;
        __m512i ia = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
        __m512i ib = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 32)));
        *a = _mm512_castsi512_ps(_mm512_slli_epi32(ia, 16));
        *b = _mm512_castsi512_ps(_mm512_slli_epi32(ib, 16));
    }
}

/* Masked load of weights [k, k+n) (n < 16) for the float types' K tail. */
static inline AVX512_TARGET __m512 v_load_tail(const uint8_t *row, int wtype, int k, __mmask16 msk) {
    if (wtype == GGML_TYPE_F32) return _mm512_maskz_loadu_ps(msk, (const float *)row + k);
    __m256i h = _mm256_maskz_loadu_epi16(msk, row + (size_t)k * 2);
    if (wtype == GGML_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Horizontal sums with one fixed tree, (e_i + e_i+8) + (e_i+4 + e_i+12) then
 * (f0 + f2) + (f1 + f3): v_hsum4 sums four vectors at once with shuffles
 * shared between them (about a third of the work of four separate sums), and
 * v512_hsum (vmath.h) gives the bit-identical result for one, so a row's value
 * does not depend on its tile. */
static inline AVX512_TARGET __m128 v_hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    /* 128-bit lane L now holds the 4 partial sums f of input L */
    __m512 f = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    __m512 t = _mm512_add_ps(f, _mm512_permute_ps(f, 0x4E));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), t));
}

/* mr input rows x nr weight rows (row r at w + r*rb, output column r*ys).
 * One accumulator per dot product, whatever mr: a row's arithmetic is the same
 * in every tile shape, so M rows in one call equal M one-row calls bit for bit
 * (verification and decoding see the same logits). */
static inline AVX512_TARGET void v_tile(int wtype, int mr, int nr, float *y, int ldy, int ys, const float *x,
                                        int K, const uint8_t *w, size_t rb) {
    __m512 acc[MR_MAX][NR];
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nr; r++) acc[m][r] = _mm512_setzero_ps();
    int k = 0;
    const int wsz = wtype == GGML_TYPE_F32 ? 4 : 2;
    for (; k + 32 <= K; k += 32) {
        __m512 wa[NR], wb[NR];
        /* each weight row is a linear stream that runs on into the next row of
         * its slice: at 3+ input rows the tile is compute-bound and the hardware
         * prefetcher falls behind, so fetch ahead into L2 and let DRAM latency
         * overlap the FMAs (at M=1 it only costs instructions) */
        if (mr >= 3)
            for (int r = 0; r < nr; r++)
                for (int l = 0; l < 32 * wsz; l += 64)
                    _mm_prefetch((const char *)(w + r * rb) + (size_t)k * wsz + MM_PREFETCH + l, MM_PREFETCH_HINT);
        for (int r = 0; r < nr; r++) v_load32(&wa[r], &wb[r], w + r * rb, wtype, k);
        for (int m = 0; m < mr; m++) {
            __m512 xa = _mm512_loadu_ps(x + (size_t)m * K + k);
            __m512 xb = _mm512_loadu_ps(x + (size_t)m * K + k + 16);
            for (int r = 0; r < nr; r++) {
                acc[m][r] = _mm512_fmadd_ps(wa[r], xa, acc[m][r]);
                acc[m][r] = _mm512_fmadd_ps(wb[r], xb, acc[m][r]);
            }
        }
    }
    for (; k < K; k += 16) { /* float types only: quantized rows are whole blocks */
        int left = K - k;
        __mmask16 msk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 wa[NR];
        for (int r = 0; r < nr; r++) wa[r] = v_load_tail(w + r * rb, wtype, k, msk);
        for (int m = 0; m < mr; m++) {
            __m512 xa = _mm512_maskz_loadu_ps(msk, x + (size_t)m * K + k);
            for (int r = 0; r < nr; r++) acc[m][r] = _mm512_fmadd_ps(wa[r], xa, acc[m][r]);
        }
    }
    for (int m = 0; m < mr; m++) {
        __m512 s[NR];
        for (int r = 0; r < nr; r++) s[r] = acc[m][r];
        float *ym = y + (size_t)m * ldy;
        if (nr == 4) {
            float o[4];
            _mm_storeu_ps(o, v_hsum4(s[0], s[1], s[2], s[3]));
            for (int r = 0; r < 4; r++) ym[(size_t)r * ys] = o[r];
        } else {
            for (int r = 0; r < nr; r++) ym[(size_t)r * ys] = v512_hsum(s[r]);
        }
    }
}

#undef GEN_ALWAYS
#define GEN_ALWAYS static inline AVX512_TARGET
GEN_DISPATCH(v_tile_mn, v_tile)
GEN_TYPED(v_tile_any, v_tile_mn)

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void
mm_rows_avx512(float *y, int ldy, const float *x, const uint8_t *w, int wtype, int M, int K, int n0, int n1) {
    MM_ROWS_BODY(v_tile_any, MR_MAX)
}
#endif /* MM_X86 */

#if defined(__aarch64__)
#include <arm_neon.h>
/* ---- NEON path (aarch64) ----------------------------------------------
 * 32 q registers: a tile of at most 4 input rows x 4 weight rows (16
 * accumulators, 8 widened weight vectors per 8-column step, 2 x vectors).
 * A dot product has one 4-lane accumulator (lane l takes k = l mod 4, in k
 * order, the tail through a zero-padded copy) and one fixed pairwise
 * horizontal sum, whatever the tile: M rows equal M one-row calls. F16 is
 * widened with fcvtl (base ARMv8-A), BF16 by a shift. */
#define MR_NEON 4

static inline __attribute__((always_inline)) void nz_load8(float32x4_t *a, float32x4_t *b, const uint8_t *row,
                                                           int wtype, int k) {
    if (wtype == GGML_TYPE_F32) {
        *a = vld1q_f32((const float *)row + k);
        *b = vld1q_f32((const float *)row + k + 4);
    } else if (wtype == GGML_TYPE_F16) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(row + (size_t)k * 2)));
        *a = vcvt_f32_f16(vget_low_f16(h));
        *b = vcvt_high_f32_f16(h);
    } else {
        uint16x8_t h = vld1q_u16((const uint16_t *)(row + (size_t)k * 2));
        *a = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        *b = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
}

static inline __attribute__((always_inline)) void nz_tile(int wtype, int mr, int nr, float *y, int ldy, int ys,
                                                          const float *x, int K, const uint8_t *w, size_t rb) {
    float32x4_t acc[MR_NEON][NR];
    for (int m = 0; m < mr; m++)
        for (int r = 0; r < nr; r++) acc[m][r] = vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        float32x4_t wa[NR], wb[NR];
        for (int r = 0; r < nr; r++) nz_load8(&wa[r], &wb[r], w + r * rb, wtype, k);
        for (int m = 0; m < mr; m++) {
            float32x4_t xa = vld1q_f32(x + (size_t)m * K + k), xb = vld1q_f32(x + (size_t)m * K + k + 4);
            for (int r = 0; r < nr; r++) acc[m][r] = vfmaq_f32(vfmaq_f32(acc[m][r], wa[r], xa), wb[r], xb);
        }
    }
    if (k < K) { /* float types only: quantized rows are whole blocks */
        int n = K - k;
        size_t es = wtype == GGML_TYPE_F32 ? 4 : 2;
        float32x4_t wa[NR], wb[NR];
        for (int r = 0; r < nr; r++) {
            uint8_t buf[32] = {0};
            memcpy(buf, w + r * rb + (size_t)k * es, (size_t)n * es);
            nz_load8(&wa[r], &wb[r], buf, wtype, 0);
        }
        for (int m = 0; m < mr; m++) {
            float xt[8] = {0};
            memcpy(xt, x + (size_t)m * K + k, sizeof(float) * (size_t)n);
            float32x4_t xa = vld1q_f32(xt), xb = vld1q_f32(xt + 4);
            for (int r = 0; r < nr; r++) acc[m][r] = vfmaq_f32(vfmaq_f32(acc[m][r], wa[r], xa), wb[r], xb);
        }
    }
    for (int m = 0; m < mr; m++) {
        float *ym = y + (size_t)m * ldy;
        if (nr == 4) {
            float32x4_t s4 = vpaddq_f32(vpaddq_f32(acc[m][0], acc[m][1]), vpaddq_f32(acc[m][2], acc[m][3]));
            float o[4];
            vst1q_f32(o, s4);
            for (int r = 0; r < 4; r++) ym[(size_t)r * ys] = o[r];
        } else {
            for (int r = 0; r < nr; r++) {
                float32x4_t p = vpaddq_f32(acc[m][r], acc[m][r]);
                ym[(size_t)r * ys] = vgetq_lane_f32(vpaddq_f32(p, p), 0);
            }
        }
    }
}

#define NZ_TILE_M(NRC, ...)                                        \
    switch (mr) {                                                  \
    case 1: nz_tile(wtype, 1, NRC, __VA_ARGS__); break;            \
    case 2: nz_tile(wtype, 2, NRC, __VA_ARGS__); break;            \
    case 3: nz_tile(wtype, 3, NRC, __VA_ARGS__); break;            \
    default: nz_tile(wtype, 4, NRC, __VA_ARGS__); break;           \
    }
static inline __attribute__((always_inline)) void nz_tile_mn(int wtype, int mr, int nr, float *y, int ldy, int ys,
                                                             const float *x, int K, const uint8_t *w, size_t rb) {
    if (nr == 4) {
        NZ_TILE_M(4, y, ldy, ys, x, K, w, rb)
    } else {
        NZ_TILE_M(1, y, ldy, ys, x, K, w, rb)
    }
}
#undef GEN_ALWAYS
#define GEN_ALWAYS static inline __attribute__((always_inline))
GEN_TYPED(nz_tile_any, nz_tile_mn)

static void mm_rows_neon(float *y, int ldy, const float *x, const uint8_t *w, int wtype, int M, int K, int n0,
                         int n1) {
    MM_ROWS_BODY(nz_tile_any, MR_NEON)
}
#endif /* __aarch64__ */

void mm_rows(simd_level lvl, float *y, int ldy, const float *x, const uint8_t *xq, const uint8_t *w, int wtype,
             int M, int K, int n0, int n1) {
    if (wtype == SPECD_TYPE_Q8_0_R8) {
        mmq_rows_r8(lvl, y, ldy, xq, w, M, K, n0, n1);
        return;
    }
    if (wtype == SPECD_TYPE_Q4_K_R8 || wtype == SPECD_TYPE_Q5_K_R8) {
        mmq_rows_rk(lvl, y, ldy, xq, w, M, K, n0, n1, wtype == SPECD_TYPE_Q5_K_R8);
        return;
    }
    if (wtype == SPECD_TYPE_Q6_K_R8) {
        mmq_rows_q6x(lvl, y, ldy, xq, w, M, K, n0, n1);
        return;
    }
    if (mm_q8_path(wtype)) {
        mmq_rows(lvl, y, ldy, xq, w, wtype, M, K, n0, n1);
        return;
    }
#ifdef MM_X86
    if (lvl == SIMD_AVX512) { mm_rows_avx512(y, ldy, x, w, wtype, M, K, n0, n1); return; }
    if (lvl == SIMD_AVX2) { mm_rows_avx2(y, ldy, x, w, wtype, M, K, n0, n1); return; }
#endif
#if defined(__aarch64__)
    if (lvl == SIMD_NEON) { mm_rows_neon(y, ldy, x, w, wtype, M, K, n0, n1); return; }
#endif
    (void)lvl;
    mm_rows_generic(y, ldy, x, w, wtype, M, K, n0, n1);
}
