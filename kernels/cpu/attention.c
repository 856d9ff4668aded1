/* attention.c — attention of one head of one sequence over the paged KV cache
 * (see attention.h), for all of the sequence's new rows. Two passes per row:
 * scores q.k for every visible key (then a softmax), then the weighted sum of
 * the values. Compiled once per SIMD path: generic and AVX2 are the portable C
 * below; AVX-512 has its own kernel for head dims up to 256.
 *
 * A kv head's positions of one block are one contiguous (B, E) run (the
 * layout of kv_layer_view), so keys and values stream row after row.
 *
 * A row's arithmetic never depends on how many rows the call has (a row alone
 * in a decode step and the same row in a verification call give the same
 * bits): keys are grouped by their cache position only (aligned to the block),
 * and a short last group gets zero weights. */
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Position of new row i for the sliding window (see attn_seq.window). */
static int ops_attn_pos(const attn_seq *s, int i) {
    if (!s->mask) return s->n_past + i;
    int c = 0;
    for (int j = 0; j < s->n_new; j++) c += s->mask[(size_t)i * s->n_new + j] != 0;
    return s->n_past + (c > 0 ? c - 1 : 0);
}

/* q . k over E features in 16 independent lanes, then one fixed tree: the
 * compiler turns the lane loop into vector FMAs (a single serial chain would
 * cost E times the FMA latency per key), and the sum is the same on every SIMD
 * path that has FMA. */
OPS_ALWAYS float att_dot(const float *a, const float *b, int E) {
    float acc[16] = {0};
    int e = 0;
    for (; e + 16 <= E; e += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[e + l] * b[e + l];
    for (int l = 0; e + l < E; l++) acc[l] += a[e + l] * b[e + l];
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

/* Keys [0, att_n_keys(s, i)) hold every key new row i may see: without a mask
 * (causal) none past its own position, so a prefill row does not score the
 * later rows' keys. The keys cut off would have weighed exactly 0 (a score of
 * -inf, skipped in the value sum), so a row's bits are the same either way. */
OPS_ALWAYS int att_n_keys(const attn_seq *s, int i) {
    return s->mask ? s->n_past + s->n_new : s->n_past + i + 1;
}

/* The visible keys of new row i: every cached position (inside the window) and
 * the new positions its mask allows (causal without a mask). Returns 0 or 1. */
OPS_ALWAYS int att_visible(const attn_seq *s, int i, int p, int lo) {
    int j = p - s->n_past; /* index among the new positions, or negative */
    if (j >= 0 && (s->mask ? !s->mask[(size_t)i * s->n_new + j] : j > i)) return 0;
    if (lo > 0 && (j < 0 ? p : ops_attn_pos(s, j)) < lo) return 0;
    return 1;
}

/* Where head kvh's run of cache block blk starts, in elements (the layout of
 * kv_layer_view: (Hkv, B, E) per block). */
OPS_ALWAYS size_t att_run_off(const kv_layer_view *kv, int32_t blk, int kvh) {
    return (size_t)blk * kv->block_stride + (size_t)kvh * kv->block_size * kv->head_dim;
}

/* Head kvh's run of the first n positions of cache block blk (K or V at
 * base) as floats: in place in an F32 cache; an F16 cache's halves converted
 * into stage (B * E floats) on path lvl, exactly. */
OPS_ALWAYS const float *att_run(simd_level lvl, const kv_layer_view *kv, const void *base, int32_t blk, int kvh, int n,
                                float *stage) {
    size_t off = att_run_off(kv, blk, kvh);
    if (kv->type != KV_F16) return (const float *)base + off;
    ops_f16_to_f32(lvl, stage, (const uint16_t *)base + off, n * kv->head_dim);
    return stage;
}

OPS_ALWAYS void att_head(simd_level lvl, float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h,
                         int H, int Hkv, int E, float *scores, float *stage) {
    int kvh = h / (H / Hkv);
    float scale = 1.0f / sqrtf((float)E);
    int B = kv->block_size;
    for (int i = 0; i < s->n_new; i++) {
        const float *qi = q + ((size_t)(s->row0 + i) * H + h) * E;
        float *oi = out + ((size_t)(s->row0 + i) * H + h) * E;
        int n_keys = att_n_keys(s, i);
        int lo = 0; /* sliding window: lowest key position this query may see */
        if (s->window > 0) lo = ops_attn_pos(s, i) - s->window + 1;
        int plain = s->window <= 0 || lo <= 0; /* every cached key is visible */
        float mx = -INFINITY;
        for (int p0 = 0; p0 < n_keys; p0 += B) {
            int pe = p0 + B < n_keys ? p0 + B : n_keys;
            const float *kb = att_run(lvl, kv, kv->k, s->blocks[p0 / B], kvh, pe - p0, stage);
            for (int p = p0; p < pe; p++) {
                if (!(plain && p < s->n_past) && !att_visible(s, i, p, lo)) {
                    scores[p] = -INFINITY;
                    continue;
                }
                float d = att_dot(qi, kb + (size_t)(p - p0) * E, E) * scale;
                scores[p] = d;
                if (d > mx) mx = d;
            }
        }
        /* masked keys (-inf) weigh exactly 0; the exp loop vectorizes, the sum
         * stays in key order */
        for (int p = 0; p < n_keys; p++)
            scores[p] = ops_select(scores[p] == -INFINITY, 0.0f, ops_expf(scores[p] - mx));
        float sum = 0.0f;
        for (int p = 0; p < n_keys; p++) sum += scores[p];
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        memset(oi, 0, (size_t)E * sizeof(float));
        for (int p0 = 0; p0 < n_keys; p0 += B) {
            int pe = p0 + B < n_keys ? p0 + B : n_keys;
            const float *vb = att_run(lvl, kv, kv->v, s->blocks[p0 / B], kvh, pe - p0, stage);
            /* four keys per pass over oi: one load and store of the output per
             * four values, not a load-FMA-store chain through memory per key.
             * Groups are aligned to the block and a short last group gets zero
             * weights, so a row sums its keys in the same order whatever n_keys
             * is (a row alone and the same row in a longer batch agree) */
            for (int p = p0; p < pe; p += 4) {
                float wv[4];
                const float *vp[4];
                for (int t = 0; t < 4; t++) {
                    int ok = p + t < pe;
                    wv[t] = ok ? scores[p + t] * inv : 0.0f;
                    vp[t] = vb + (size_t)(p + (ok ? t : 0) - p0) * E;
                }
                if (wv[0] == 0.0f && wv[1] == 0.0f && wv[2] == 0.0f && wv[3] == 0.0f) continue;
                for (int e = 0; e < E; e++)
                    oi[e] += (wv[0] * vp[0][e] + wv[1] * vp[1][e]) + (wv[2] * vp[2][e] + wv[3] * vp[3][e]);
            }
        }
    }
}

static void att_head_generic(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
                             int Hkv, int E, float *scores, float *stage) {
    att_head(SIMD_GENERIC, out, q, kv, s, h, H, Hkv, E, scores, stage);
}


#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void att_head_avx2(float *out, const float *q, const kv_layer_view *kv,
                                                              const attn_seq *s, int h, int H, int Hkv, int E,
                                                              float *scores, float *stage) {
    att_head(SIMD_AVX2, out, q, kv, s, h, H, Hkv, E, scores, stage);
}

/* ---- AVX-512 ------------------------------------------------------------ */

#define A512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,prefer-vector-width=512")))
#define A512_ALWAYS static inline A512 __attribute__((always_inline))

/* ops_expf (vmath.h) on 16 lanes, step for step. */
A512_ALWAYS __m512 v_expf(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* NaN (second operand) stays NaN */
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
    const __m512 shift = _mm512_set1_ps(12582912.0f);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shift);
    __m512 n = _mm512_sub_ps(t, shift);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(shift));
    e = _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* Sums each of a[0..15] into lane t of the result. Every vector goes through
 * the same tree (elements e, e+2 within a 128-bit lane; then the two pairs;
 * then 128-bit lanes 0+1 and 2+3; then the halves), so a key's score does not
 * depend on the slot it had in its group. */
A512_ALWAYS __m512 v_hsum16(const __m512 *a) {
    __m512 b[8], c[4];
    for (int j = 0; j < 8; j++)
        b[j] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
    for (int j = 0; j < 4; j++) {
        __m512d x = _mm512_castps_pd(b[2 * j]), y = _mm512_castps_pd(b[2 * j + 1]);
        c[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    __m512 f01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
    __m512 f23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(f01, f23, 0x88), _mm512_shuffle_f32x4(f01, f23, 0xDD));
}

/* Vector e (of NE) of an E-element cache row at p as floats: F16 a constant
 * in every instantiation (an F16 cache's halves widen exactly in the load). */
A512_ALWAYS __m512 att_lde(const void *p, int e, int E, const int NE, __mmask16 tail, const int F16) {
    if (F16) {
        const uint16_t *hp = (const uint16_t *)p + 16 * e;
        return _mm512_cvtph_ps(e == NE - 1 && E % 16 ? _mm256_maskz_loadu_epi16(tail, hp)
                                                     : _mm256_loadu_si256((const __m256i *)hp));
    }
    const float *fp = (const float *)p + 16 * e;
    return e == NE - 1 && E % 16 ? _mm512_maskz_loadu_ps(tail, fp) : _mm512_loadu_ps(fp);
}
#define ATT_ES(F16) ((size_t)((F16) ? 2 : 4))
/* Head kvh's run of cache block p0 / B (K or V at base), in bytes. */
#define ATT_RUN(base, kv, s, kvh, p0, F16)                                                                      \
    ((const char *)(base) + att_run_off(kv, (s)->blocks[(p0) / (kv)->block_size], kvh) * ATT_ES(F16))

/* The first row of a head finds the head's keys and values in DRAM (a decode
 * pass streams the whole model's weights between two visits to a layer), one
 * block-sized run at a time from scattered blocks, which the hardware
 * prefetchers do not follow. While it scores block p0, fetch the next
 * block's keys and this block's values into L2; later rows find them there. */
A512_ALWAYS void att_prefetch_run(const void *base, const kv_layer_view *kv, const attn_seq *s, int kvh, int p0,
                                  int pe, const int F16) {
    const char *r = ATT_RUN(base, kv, s, kvh, p0, F16);
    for (size_t o = 0; o < (size_t)(pe - p0) * kv->head_dim * ATT_ES(F16); o += 64) _mm_prefetch(r + o, _MM_HINT_T1);
}
A512_ALWAYS void att_prefetch(const kv_layer_view *kv, const attn_seq *s, int kvh, int p0, int pe, int n_keys,
                              const int F16) {
    const int B = kv->block_size;
    att_prefetch_run(kv->v, kv, s, kvh, p0, pe, F16);
    if (pe < n_keys) att_prefetch_run(kv->k, kv, s, kvh, pe, pe + B < n_keys ? pe + B : n_keys, F16);
}

/* Row i's scores against the nk (<= 16) keys from position g0 (kg: key g0's
 * vector) into out[g0..g0+nk), the keys it may not see -inf; returns them for
 * the running max. att_row512 and att_tile512 share it, so a tile's row has
 * the bits of the row alone. */
A512_ALWAYS __m512 att_scores16(float *out, const __m512 *qv, const char *kg, int nk, const attn_seq *s, int i,
                                int g0, int lo, int plain, int E, const int NE, __mmask16 tail, __m512 scale,
                                __m512 ninf, const int F16) {
    __m512 a[16];
    for (int t = 0; t < 16; t++) {
        const char *kr = kg + (size_t)(nk == 16 || t < nk ? t : 0) * E * ATT_ES(F16);
        a[t] = _mm512_mul_ps(qv[0], att_lde(kr, 0, E, NE, tail, F16));
        for (int e = 1; e < NE; e++) a[t] = _mm512_fmadd_ps(qv[e], att_lde(kr, e, E, NE, tail, F16), a[t]);
    }
    __m512 d = _mm512_mul_ps(v_hsum16(a), scale);
    __mmask16 live = (__mmask16)(nk == 16 ? 0xFFFF : (1u << nk) - 1), vis = live;
    /* the caller's nk stops at row i's last key (att_n_keys): causal rows
     * without a window see every live key, cached or new */
    if (!(plain && (g0 + nk <= s->n_past || !s->mask))) {
        vis = 0;
        for (int t = 0; t < nk; t++)
            if ((plain && g0 + t < s->n_past) || att_visible(s, i, g0 + t, lo)) vis |= (__mmask16)(1u << t);
    }
    d = _mm512_mask_mov_ps(ninf, vis, d);
    _mm512_mask_storeu_ps(out + g0, live, d);
    return d;
}

/* One row i against one head's keys and values: NE = ceil(E / 16) vectors per
 * key, the last one masked to E % 16 lanes when E is not a multiple of 16.
 * NE is a constant in the common instantiations below, so q and the output
 * stay in registers. Scores are computed 16 keys at a time, each key's dot
 * product in 16 lanes, then summed by v_hsum16; the softmax sums per lane (key
 * position mod 16) and then over lanes. */
A512_ALWAYS void att_row512(float *oi, const float *qi, const kv_layer_view *kv, const attn_seq *s, int i, int kvh,
                            int E, const int NE, float *scores, int pf, const int F16) {
    const int B = kv->block_size, n_keys = att_n_keys(s, i);
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)E)), ninf = _mm512_set1_ps(-INFINITY);
    int lo = 0;
    if (s->window > 0) lo = ops_attn_pos(s, i) - s->window + 1;
    int plain = s->window <= 0 || lo <= 0;
    __m512 qv[16];
    const __mmask16 tail = (__mmask16)(E % 16 ? (1u << (E % 16)) - 1 : 0xFFFF);
#define LDE(p, e) ((e) == NE - 1 && E % 16 ? _mm512_maskz_loadu_ps(tail, (p) + 16 * (e)) : _mm512_loadu_ps((p) + 16 * (e)))
    for (int e = 0; e < NE; e++) qv[e] = LDE(qi, e);
    __m512 mxv = ninf;
    for (int p0 = 0; p0 < n_keys; p0 += B) {
        const char *kb = ATT_RUN(kv->k, kv, s, kvh, p0, F16);
        int pe = p0 + B < n_keys ? p0 + B : n_keys;
        if (pf) att_prefetch(kv, s, kvh, p0, pe, n_keys, F16);
        for (int g0 = p0; g0 < pe; g0 += 16) {
            int nk = pe - g0 < 16 ? pe - g0 : 16;
            const char *kg = kb + (size_t)(g0 - p0) * E * ATT_ES(F16);
            __m512 d = att_scores16(scores, qv, kg, nk, s, i, g0, lo, plain, E, NE, tail, scale, ninf, F16);
            mxv = _mm512_max_ps(mxv, d);
        }
    }
    float mx = _mm512_reduce_max_ps(mxv);
    /* masked keys (-inf) weigh exactly 0 */
    __m512 sumv = _mm512_setzero_ps(), mxb = _mm512_set1_ps(mx);
    for (int g0 = 0; g0 < n_keys; g0 += 16) {
        __mmask16 live = (__mmask16)(n_keys - g0 >= 16 ? 0xFFFF : (1u << (n_keys - g0)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(live, scores + g0);
        __mmask16 keep = _mm512_mask_cmp_ps_mask(live, x, ninf, _CMP_NEQ_UQ);
        __m512 ex = _mm512_maskz_mov_ps(keep, v_expf(_mm512_sub_ps(x, mxb)));
        _mm512_mask_storeu_ps(scores + g0, live, ex);
        sumv = _mm512_add_ps(sumv, ex);
    }
    float sum = v512_hsum(sumv);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    /* values: one FMA chain per output vector and key parity (two chains hide
     * the FMA latency); keys of weight 0 (masked) are skipped */
    __m512 o0[16], o1[16];
    for (int e = 0; e < NE; e++) o0[e] = o1[e] = _mm512_setzero_ps();
    const __m512 invv = _mm512_set1_ps(inv);
    for (int p0 = 0; p0 < n_keys; p0 += B) {
        const char *vb = ATT_RUN(kv->v, kv, s, kvh, p0, F16);
        int pe = p0 + B < n_keys ? p0 + B : n_keys;
        for (int g0 = p0; g0 < pe; g0 += 16) {
            int nk = pe - g0 < 16 ? pe - g0 : 16;
            __mmask16 live = (__mmask16)(nk == 16 ? 0xFFFF : (1u << nk) - 1);
            float w[16];
            _mm512_storeu_ps(w, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, scores + g0), invv));
            for (int t = 0; t < nk; t += 2) {
                const char *v0 = vb + (size_t)(g0 - p0 + t) * E * ATT_ES(F16);
                if (w[t] != 0.0f) {
                    __m512 wb = _mm512_set1_ps(w[t]);
                    for (int e = 0; e < NE; e++) o0[e] = _mm512_fmadd_ps(wb, att_lde(v0, e, E, NE, tail, F16), o0[e]);
                }
                if (t + 1 < nk && w[t + 1] != 0.0f) {
                    __m512 wb = _mm512_set1_ps(w[t + 1]);
                    const char *v1 = v0 + (size_t)E * ATT_ES(F16);
                    for (int e = 0; e < NE; e++) o1[e] = _mm512_fmadd_ps(wb, att_lde(v1, e, E, NE, tail, F16), o1[e]);
                }
            }
        }
    }
    for (int e = 0; e < NE; e++)
        _mm512_mask_storeu_ps(oi + 16 * e, e == NE - 1 ? tail : (__mmask16)0xFFFF, _mm512_add_ps(o0[e], o1[e]));
#undef LDE
}

/* Rows i0 .. i0+ATT_TR-1 together (a prefill): att_row512's arithmetic for
 * each row, step for step, but a group of 16 keys (and later of 16 values) is
 * loaded once from L2 for all the tile's rows and then found in L1. One row at
 * a time streamed every earlier key and value from L2 per row (512 bytes a
 * key at E = 64): about 22 cycles per row and key at a 1,158-token prompt.
 * sc[r]: row r's scores (n_keys of its last row). */
#define ATT_TR 4
#define ATT_TILE_KEYS 4096 /* keys a tile's rows keep on the stack */
A512_ALWAYS void att_tile512(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int i0, int h,
                             int H, int kvh, int E, const int NE, float *const *sc, const int F16) {
    const int B = kv->block_size;
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)E)), ninf = _mm512_set1_ps(-INFINITY);
    const __mmask16 tail = (__mmask16)(E % 16 ? (1u << (E % 16)) - 1 : 0xFFFF);
#define LDE(p, e) ((e) == NE - 1 && E % 16 ? _mm512_maskz_loadu_ps(tail, (p) + 16 * (e)) : _mm512_loadu_ps((p) + 16 * (e)))
    int nk_r[ATT_TR], lo_r[ATT_TR], plain_r[ATT_TR], nmax = 0;
    __m512 mxv[ATT_TR];
    float inv_r[ATT_TR];
    for (int r = 0; r < ATT_TR; r++) {
        nk_r[r] = att_n_keys(s, i0 + r);
        if (nk_r[r] > nmax) nmax = nk_r[r];
        lo_r[r] = s->window > 0 ? ops_attn_pos(s, i0 + r) - s->window + 1 : 0;
        plain_r[r] = s->window <= 0 || lo_r[r] <= 0;
        mxv[r] = ninf;
    }
    for (int p0 = 0; p0 < nmax; p0 += B) {
        const char *kb = ATT_RUN(kv->k, kv, s, kvh, p0, F16);
        if (i0 == 0) att_prefetch(kv, s, kvh, p0, p0 + B < nmax ? p0 + B : nmax, nmax, F16);
        for (int g0 = p0; g0 < p0 + B && g0 < nmax; g0 += 16) {
            const char *kg = kb + (size_t)(g0 - p0) * E * ATT_ES(F16);
            for (int r = 0; r < ATT_TR; r++) {
                if (g0 >= nk_r[r]) continue;
                int i = i0 + r, lo = lo_r[r], plain = plain_r[r];
                int pe = p0 + B < nk_r[r] ? p0 + B : nk_r[r];
                int nk = pe - g0 < 16 ? pe - g0 : 16;
                const float *qi = q + ((size_t)(s->row0 + i) * H + h) * E;
                __m512 qv[16];
                for (int e = 0; e < NE; e++) qv[e] = LDE(qi, e);
                __m512 d = att_scores16(sc[r], qv, kg, nk, s, i, g0, lo, plain, E, NE, tail, scale, ninf, F16);
                mxv[r] = _mm512_max_ps(mxv[r], d);
            }
        }
    }
    for (int r = 0; r < ATT_TR; r++) {
        float *scores = sc[r];
        int n_keys = nk_r[r];
        float mx = _mm512_reduce_max_ps(mxv[r]);
        __m512 sumv = _mm512_setzero_ps(), mxb = _mm512_set1_ps(mx);
        for (int g0 = 0; g0 < n_keys; g0 += 16) {
            __mmask16 live = (__mmask16)(n_keys - g0 >= 16 ? 0xFFFF : (1u << (n_keys - g0)) - 1);
            __m512 x = _mm512_maskz_loadu_ps(live, scores + g0);
            __mmask16 keep = _mm512_mask_cmp_ps_mask(live, x, ninf, _CMP_NEQ_UQ);
            __m512 ex = _mm512_maskz_mov_ps(keep, v_expf(_mm512_sub_ps(x, mxb)));
            _mm512_mask_storeu_ps(scores + g0, live, ex);
            sumv = _mm512_add_ps(sumv, ex);
        }
        float sum = v512_hsum(sumv);
        inv_r[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
    __m512 acc0[ATT_TR][16], acc1[ATT_TR][16];
    for (int r = 0; r < ATT_TR; r++)
        for (int e = 0; e < NE; e++) acc0[r][e] = acc1[r][e] = _mm512_setzero_ps();
    for (int p0 = 0; p0 < nmax; p0 += B) {
        const char *vb = ATT_RUN(kv->v, kv, s, kvh, p0, F16);
        for (int g0 = p0; g0 < p0 + B && g0 < nmax; g0 += 16) {
            for (int r = 0; r < ATT_TR; r++) {
                if (g0 >= nk_r[r]) continue;
                int pe = p0 + B < nk_r[r] ? p0 + B : nk_r[r];
                int nk = pe - g0 < 16 ? pe - g0 : 16;
                __mmask16 live = (__mmask16)(nk == 16 ? 0xFFFF : (1u << nk) - 1);
                float w[16];
                _mm512_storeu_ps(w, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, sc[r] + g0), _mm512_set1_ps(inv_r[r])));
                __m512 o0[16], o1[16];
                for (int e = 0; e < NE; e++) o0[e] = acc0[r][e], o1[e] = acc1[r][e];
                for (int t = 0; t < nk; t += 2) {
                    const char *v0 = vb + (size_t)(g0 - p0 + t) * E * ATT_ES(F16);
                    if (w[t] != 0.0f) {
                        __m512 wb = _mm512_set1_ps(w[t]);
                        for (int e = 0; e < NE; e++) o0[e] = _mm512_fmadd_ps(wb, att_lde(v0, e, E, NE, tail, F16), o0[e]);
                    }
                    if (t + 1 < nk && w[t + 1] != 0.0f) {
                        __m512 wb = _mm512_set1_ps(w[t + 1]);
                        const char *v1 = v0 + (size_t)E * ATT_ES(F16);
                        for (int e = 0; e < NE; e++) o1[e] = _mm512_fmadd_ps(wb, att_lde(v1, e, E, NE, tail, F16), o1[e]);
                    }
                }
                for (int e = 0; e < NE; e++) acc0[r][e] = o0[e], acc1[r][e] = o1[e];
            }
        }
    }
    for (int r = 0; r < ATT_TR; r++) {
        float *oi = out + ((size_t)(s->row0 + i0 + r) * H + h) * E;
        for (int e = 0; e < NE; e++)
            _mm512_mask_storeu_ps(oi + 16 * e, e == NE - 1 ? tail : (__mmask16)0xFFFF,
                                  _mm512_add_ps(acc0[r][e], acc1[r][e]));
    }
#undef LDE
}

A512_ALWAYS void att_rows512(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
                             int Hkv, int E, float *scores, const int F16) {
    int kvh = h / (H / Hkv), NE = (E + 15) / 16;
    int i = 0;
    if (s->n_new >= 2 * ATT_TR && s->n_past + s->n_new <= ATT_TILE_KEYS && (NE == 4 || NE == 8)) {
        float sc_more[ATT_TR - 1][ATT_TILE_KEYS];
        float *sc[ATT_TR] = {scores};
        for (int r = 1; r < ATT_TR; r++) sc[r] = sc_more[r - 1];
        for (; i + ATT_TR <= s->n_new; i += ATT_TR) {
            /* E a constant where it fills its vectors: plain loads, no masks */
            if (E == 64) att_tile512(out, q, kv, s, i, h, H, kvh, 64, 4, sc, F16);
            else if (E == 128) att_tile512(out, q, kv, s, i, h, H, kvh, 128, 8, sc, F16);
            else if (NE == 4) att_tile512(out, q, kv, s, i, h, H, kvh, E, 4, sc, F16);
            else att_tile512(out, q, kv, s, i, h, H, kvh, E, 8, sc, F16);
        }
    }
    for (; i < s->n_new; i++) {
        const float *qi = q + ((size_t)(s->row0 + i) * H + h) * E;
        float *oi = out + ((size_t)(s->row0 + i) * H + h) * E;
        switch (NE) { /* constant NE for the common head dims (64, 128) and the small ones */
        case 1: att_row512(oi, qi, kv, s, i, kvh, E, 1, scores, i == 0, F16); break;
        case 2: att_row512(oi, qi, kv, s, i, kvh, E, 2, scores, i == 0, F16); break;
        case 4:
            if (E == 64) att_row512(oi, qi, kv, s, i, kvh, 64, 4, scores, i == 0, F16);
            else att_row512(oi, qi, kv, s, i, kvh, E, 4, scores, i == 0, F16);
            break;
        case 8:
            if (E == 128) att_row512(oi, qi, kv, s, i, kvh, 128, 8, scores, i == 0, F16);
            else att_row512(oi, qi, kv, s, i, kvh, E, 8, scores, i == 0, F16);
            break;
        default: att_row512(oi, qi, kv, s, i, kvh, E, NE, scores, i == 0, F16); break;
        }
    }
}

static A512 void att_rows512_f32(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h,
                                 int H, int Hkv, int E, float *scores) {
    att_rows512(out, q, kv, s, h, H, Hkv, E, scores, 0);
}

static A512 void att_rows512_f16(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h,
                                 int H, int Hkv, int E, float *scores) {
    att_rows512(out, q, kv, s, h, H, Hkv, E, scores, 1);
}

static A512 void att_head_avx512(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h,
                                 int H, int Hkv, int E, float *scores, float *stage) {
    if (E > 256) att_head(SIMD_AVX512, out, q, kv, s, h, H, Hkv, E, scores, stage);
    else if (kv->type == KV_F16) att_rows512_f16(out, q, kv, s, h, H, Hkv, E, scores);
    else att_rows512_f32(out, q, kv, s, h, H, Hkv, E, scores);
}
#endif

void ops_attention_head(simd_level lvl, float *out, const float *q, const kv_layer_view *kv, const attn_seq *s,
                        int h, int H, int Hkv, int E, float *scores, float *stage) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512) { att_head_avx512(out, q, kv, s, h, H, Hkv, E, scores, stage); return; }
    if (lvl == SIMD_AVX2) { att_head_avx2(out, q, kv, s, h, H, Hkv, E, scores, stage); return; }
#elif defined(__aarch64__)
    if (lvl == SIMD_NEON) { att_head(SIMD_NEON, out, q, kv, s, h, H, Hkv, E, scores, stage); return; } /* NEON widening */
#endif
    (void)lvl;
    att_head_generic(out, q, kv, s, h, H, Hkv, E, scores, stage);
}
