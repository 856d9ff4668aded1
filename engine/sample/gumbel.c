/* gumbel.c — Gumbel-max sampling by an exponential race over counter-based
 * noise (see gumbel.h for the contract and why it is exact). */
#include "engine/sample/gumbel.h"

#include "engine/sample/rng.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#define LANES 16              /* Philox blocks computed side by side: one span of 64 vocabulary entries */

/* Entry v of the vocabulary takes word (v / 16) % 4 of block (v / 64) 16 +
 * v % 16: a span of 64 entries is 16 blocks, and word w of block i is entry
 * 16 w + i of the span, so each output word of a vector of 16 blocks covers
 * 16 consecutive entries. */
static inline uint32_t block_of(int v) { return (uint32_t)(v >> 6) * LANES + (uint32_t)(v & 15); }
static inline int word_of(int v) { return (v >> 4) & 3; }

/* One span: out[w][i] = word w of block c + i, for the blocks
 * (pos_lo, pos_hi, RNG_GUMBEL, c + i). */
static void philox_span_c(uint32_t out[4][LANES], uint32_t c, uint32_t pos_lo, uint32_t pos_hi, uint32_t key0,
                          uint32_t key1) {
    for (int i = 0; i < LANES; i++) {
        uint32_t ctr[4] = {pos_lo, pos_hi, RNG_GUMBEL, c + (uint32_t)i}, key[2] = {key0, key1}, o[4];
        rng_philox4x32_10(o, ctr, key);
        for (int w = 0; w < 4; w++) out[w][i] = o[w];
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

/* 32 x 32 -> 64-bit products of 16 lanes: lo and hi words, lane by lane. */
AVX512 static inline void mul_lanes(__m512i a, __m512i m, __m512i *lo, __m512i *hi) {
    __m512i pe = _mm512_mul_epu32(a, m);                        /* even lanes, 64-bit */
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m); /* odd lanes */
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

AVX512 static void philox_span_avx512(uint32_t out[4][LANES], uint32_t c, uint32_t pos_lo, uint32_t pos_hi,
                                      uint32_t key0, uint32_t key1) {
    const __m512i m0 = _mm512_set1_epi32((int)RNG_PHILOX_M0), m1 = _mm512_set1_epi32((int)RNG_PHILOX_M1);
    __m512i c0 = _mm512_set1_epi32((int)pos_lo), c1 = _mm512_set1_epi32((int)pos_hi);
    __m512i c2 = _mm512_set1_epi32(RNG_GUMBEL);
    __m512i c3 = _mm512_add_epi32(_mm512_set1_epi32((int)c),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    uint32_t k0 = key0, k1 = key1;
    for (int r = 0; r < 10; r++) {
        if (r > 0) k0 += RNG_PHILOX_W0, k1 += RNG_PHILOX_W1;
        __m512i lo0, hi0, lo1, hi1;
        mul_lanes(c0, m0, &lo0, &hi0);
        mul_lanes(c2, m1, &lo1, &hi1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    }
    _mm512_storeu_si512(out[0], c0);
    _mm512_storeu_si512(out[1], c1);
    _mm512_storeu_si512(out[2], c2);
    _mm512_storeu_si512(out[3], c3);
}

/* Philox for one span plus the filter of gumbel_sample: bit 16 w + i of the
 * result is set when entry 16 w + i of the span has p > 0 and passes
 * 1 - R < kf p (entries past n masked off). */
AVX512 static uint64_t span_candidates_avx512(uint32_t out[4][LANES], const float *p, int n, float kf, uint32_t c,
                                              uint32_t pos_lo, uint32_t pos_hi, uint32_t key0, uint32_t key1) {
    __mmask16 any = 0;
    for (int w = 0; w < 4 && 16 * w < n; w++) {
        int m = n - 16 * w;
        __mmask16 live = m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1);
        any |= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(live, p + 16 * w), _mm512_setzero_ps(), _CMP_GT_OQ);
    }
    if (!any) return 0; /* truncated away (top-k/top-p/min-p): no noise needed */
    philox_span_avx512(out, c, pos_lo, pos_hi, key0, key1);
    const __m512 scale = _mm512_set1_ps(0x1.0p-32f), half = _mm512_set1_ps(0x1.0p-33f), vk = _mm512_set1_ps(kf);
    const __m512i ones = _mm512_set1_epi32(-1);
    uint64_t bits = 0;
    for (int w = 0; w < 4 && 16 * w < n; w++) {
        int m = n - 16 * w;
        __mmask16 live = m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1);
        __m512 vp = _mm512_maskz_loadu_ps(live, p + 16 * w);
        __m512i word = _mm512_loadu_si512(out[w]);
        __m512 omr = _mm512_fmadd_ps(_mm512_cvtepu32_ps(_mm512_sub_epi32(ones, word)), scale, half);
        __mmask16 pos = _mm512_cmp_ps_mask(vp, _mm512_setzero_ps(), _CMP_GT_OQ);
        __mmask16 cand = _mm512_mask_cmp_ps_mask(pos, omr, _mm512_mul_ps(vk, vp), _CMP_LT_OQ);
        bits |= (uint64_t)cand << (16 * w);
    }
    return bits;
}
#endif

typedef void (*philox_fn)(uint32_t out[4][LANES], uint32_t, uint32_t, uint32_t, uint32_t, uint32_t);
static int forced = -1;

void gumbel_force_path(int path) { forced = path; }

static philox_fn pick(void) {
#if defined(__x86_64__)
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f");
    }
    if (forced < 0 ? have : forced == 1 && have) return philox_span_avx512;
#endif
    return philox_span_c;
}

static inline double uniform_of(uint32_t w) { return ((double)w + 0.5) * 0x1.0p-32; }

void gumbel_uniforms(uint64_t seed, uint64_t position, int v0, int n, double *r) {
    for (int v = v0; v < v0 + n; v++) {
        uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), RNG_GUMBEL, block_of(v)};
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
        rng_philox4x32_10(out, ctr, key);
        r[v - v0] = uniform_of(out[word_of(v)]);
    }
}

/* The race key E_v / p_v of one entry, in double. */
static inline double race_key(uint32_t w, float p) { return -log(uniform_of(w)) / (double)p; }

/* The margin-widened bound k (1 + 1e-5) in float: float rounding of 1 - R_v
 * and of the product stays far inside it, so the filter never drops an entry
 * that could win. */
static inline float filter_bound(double k) { return (float)(k * (1 + 1e-5)) + 1e-30f; }

int gumbel_sample(const float *probs, int n_vocab, uint64_t seed, uint64_t position) {
    /* a first contender: the most probable entry (its key is usually small,
     * so the filter passes few others) */
    int best = -1;
    float pmax = 0;
    for (int v = 0; v < n_vocab; v++)
        if (probs[v] > pmax) pmax = probs[v], best = v;
    if (best < 0) return -1;
    double r;
    gumbel_uniforms(seed, position, best, 1, &r);
    double kbest = -log(r) / (double)probs[best];
    float kf = filter_bound(kbest);
    uint32_t pos_lo = (uint32_t)position, pos_hi = (uint32_t)(position >> 32);
    uint32_t key0 = (uint32_t)seed, key1 = (uint32_t)(seed >> 32);
    uint32_t w[4][LANES];
    const int span = 4 * LANES;
#if defined(__x86_64__)
    bool simd = pick() != philox_span_c;
#else
    const bool simd = false;
#endif
    for (int v0 = 0; v0 < n_vocab; v0 += span) {
        int n = n_vocab - v0 < span ? n_vocab - v0 : span;
        uint64_t cand = 0;
#if defined(__x86_64__)
        if (simd) {
            cand = span_candidates_avx512(w, probs + v0, n, kf, block_of(v0), pos_lo, pos_hi, key0, key1);
        } else
#endif
        {
            bool any = false;
            for (int j = 0; j < n && !any; j++) any = probs[v0 + j] > 0;
            if (!any) continue; /* truncated away (top-k/top-p/min-p): no noise needed */
            philox_span_c(w, block_of(v0), pos_lo, pos_hi, key0, key1);
            for (int j = 0; j < n; j++) {
                float p = probs[v0 + j];
                /* 1 - R_v; necessary for E_v / p_v < kbest: 1 - R_v < kbest p_v */
                float one_minus_r = (float)(0xFFFFFFFFu - w[j >> 4][j & 15]) * 0x1.0p-32f + 0x1.0p-33f;
                if (p > 0 && one_minus_r < kf * p) cand |= 1ull << j;
            }
        }
        while (cand) {
            int j = __builtin_ctzll(cand);
            cand &= cand - 1;
            if (v0 + j == best) continue;
            double kv = race_key(w[j >> 4][j & 15], probs[v0 + j]);
            if (kv < kbest || (kv == kbest && v0 + j < best)) {
                kbest = kv;
                best = v0 + j;
                kf = filter_bound(kbest);
            }
        }
    }
    return best;
}
