/* ops.c — CPU element-wise kernels and paged attention (see ops.h). Plain C
 * that the compiler vectorizes; none of these dominate decode time. silu_mul
 * and attention are compiled once per SIMD path (generic, avx2, avx512). */
#include "kernels/cpu/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Helpers inlined into each per-SIMD-path copy of a kernel (target attributes). */
#define OPS_ALWAYS static inline __attribute__((always_inline))

void ops_rmsnorm(float *y, const float *x, const float *w, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * D;
        float *ym = y + (size_t)m * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++) ss += (double)xm[i] * xm[i];
        float s = (float)(1.0 / sqrt(ss / D + eps));
        for (int i = 0; i < D; i++) ym[i] = xm[i] * s * w[i];
    }
}

void ops_rope(float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E, int n_rot, int neox) {
    int half = n_rot / 2;
    float cs[512], sn[512]; /* n_rot <= 1024 is checked by the model loader */
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < half; i++) {
            double a = (double)pos[m] * inv_freq[i];
            cs[i] = (float)cos(a);
            sn[i] = (float)sin(a);
        }
        for (int h = 0; h < H; h++) {
            float *v = x + ((size_t)m * H + h) * E;
            for (int i = 0; i < half; i++) {
                int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                float a = v[i0], b = v[i1];
                v[i0] = a * cs[i] - b * sn[i];
                v[i1] = a * sn[i] + b * cs[i];
            }
        }
    }
}

void ops_add(float *x, const float *y, int M, int D) {
    size_t n = (size_t)M * D;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

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

static inline float *kv_row(float *base, const kv_layer_view *kv, const int32_t *blocks, int p, int kv_dim) {
    return base + (size_t)blocks[p / kv->block_size] * kv->block_stride + (size_t)(p % kv->block_size) * kv_dim;
}

void ops_kv_write(const kv_layer_view *kv, const int32_t *blocks, int start, const float *k, const float *v,
                  int n, int kv_dim) {
    for (int i = 0; i < n; i++) {
        memcpy(kv_row(kv->k, kv, blocks, start + i, kv_dim), k + (size_t)i * kv_dim, (size_t)kv_dim * 4);
        memcpy(kv_row(kv->v, kv, blocks, start + i, kv_dim), v + (size_t)i * kv_dim, (size_t)kv_dim * 4);
    }
}

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

/* The visible keys of new row i: every cached position (inside the window) and
 * the new positions its mask allows (causal without a mask). Returns 0 or 1. */
OPS_ALWAYS int att_visible(const attn_seq *s, int i, int p, int lo) {
    int j = p - s->n_past; /* index among the new positions, or negative */
    if (j >= 0 && (s->mask ? !s->mask[(size_t)i * s->n_new + j] : j > i)) return 0;
    if (lo > 0 && (j < 0 ? p : ops_attn_pos(s, j)) < lo) return 0;
    return 1;
}

OPS_ALWAYS void att_head(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
                         int Hkv, int E, float *scores) {
    int kv_dim = Hkv * E;
    int kvh = h / (H / Hkv);
    float scale = 1.0f / sqrtf((float)E);
    int B = kv->block_size;
    int n_keys = s->n_past + s->n_new;
    for (int i = 0; i < s->n_new; i++) {
        const float *qi = q + ((size_t)(s->row0 + i) * H + h) * E;
        float *oi = out + ((size_t)(s->row0 + i) * H + h) * E;
        int lo = 0; /* sliding window: lowest key position this query may see */
        if (s->window > 0) lo = ops_attn_pos(s, i) - s->window + 1;
        int plain = s->window <= 0 || lo <= 0; /* every cached key is visible */
        float mx = -INFINITY;
        for (int p0 = 0; p0 < n_keys; p0 += B) {
            const float *kb = kv->k + (size_t)s->blocks[p0 / B] * kv->block_stride + (size_t)kvh * E;
            int pe = p0 + B < n_keys ? p0 + B : n_keys;
            for (int p = p0; p < pe; p++) {
                if (!(plain && p < s->n_past) && !att_visible(s, i, p, lo)) {
                    scores[p] = -INFINITY;
                    continue;
                }
                float d = att_dot(qi, kb + (size_t)(p - p0) * kv_dim, E) * scale;
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
            const float *vb = kv->v + (size_t)s->blocks[p0 / B] * kv->block_stride + (size_t)kvh * E;
            int pe = p0 + B < n_keys ? p0 + B : n_keys;
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
                    vp[t] = vb + (size_t)(p + (ok ? t : 0) - p0) * kv_dim;
                }
                if (wv[0] == 0.0f && wv[1] == 0.0f && wv[2] == 0.0f && wv[3] == 0.0f) continue;
                for (int e = 0; e < E; e++)
                    oi[e] += (wv[0] * vp[0][e] + wv[1] * vp[1][e]) + (wv[2] * vp[2][e] + wv[3] * vp[3][e]);
            }
        }
    }
}

static void att_head_generic(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
                             int Hkv, int E, float *scores) {
    att_head(out, q, kv, s, h, H, Hkv, E, scores);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void att_head_avx2(float *out, const float *q, const kv_layer_view *kv,
                                                              const attn_seq *s, int h, int H, int Hkv, int E,
                                                              float *scores) {
    att_head(out, q, kv, s, h, H, Hkv, E, scores);
}

__attribute__((target("avx512f,avx512vl,avx2,fma,prefer-vector-width=512"))) static void
att_head_avx512(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H, int Hkv, int E,
                float *scores) {
    att_head(out, q, kv, s, h, H, Hkv, E, scores);
}
#endif

void ops_attention_head(simd_level lvl, float *out, const float *q, const kv_layer_view *kv, const attn_seq *s,
                        int h, int H, int Hkv, int E, float *scores) {
#if defined(__x86_64__)
    if (lvl == SIMD_AVX512) { att_head_avx512(out, q, kv, s, h, H, Hkv, E, scores); return; }
    if (lvl == SIMD_AVX2) { att_head_avx2(out, q, kv, s, h, H, Hkv, E, scores); return; }
#endif
    (void)lvl;
    att_head_generic(out, q, kv, s, h, H, Hkv, E, scores);
}
