/* ops.c — CPU element-wise kernels and paged attention (see ops.h). Plain C
 * that the compiler vectorizes; none of these dominate decode time. */
#include "kernels/cpu/ops.h"

#include <math.h>
#include <string.h>

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

void ops_silu_mul(float *g, const float *u, int M, int F) {
    size_t n = (size_t)M * F;
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
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

#define ATT_ALWAYS static inline __attribute__((always_inline))

/* q . k over E features in 16 independent lanes, then one fixed tree: the
 * compiler turns the lane loop into vector FMAs (a single serial chain would
 * cost E times the FMA latency per key), and the sum is the same on every SIMD
 * path that has FMA. */
ATT_ALWAYS float att_dot(const float *a, const float *b, int E) {
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
ATT_ALWAYS int att_visible(const attn_seq *s, int i, int p, int lo) {
    int j = p - s->n_past; /* index among the new positions, or negative */
    if (j >= 0 && (s->mask ? !s->mask[(size_t)i * s->n_new + j] : j > i)) return 0;
    if (lo > 0 && (j < 0 ? p : ops_attn_pos(s, j)) < lo) return 0;
    return 1;
}

ATT_ALWAYS void att_head(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
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
        float sum = 0.0f;
        for (int p = 0; p < n_keys; p++) {
            float e = scores[p] == -INFINITY ? 0.0f : expf(scores[p] - mx);
            scores[p] = e;
            sum += e;
        }
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        memset(oi, 0, (size_t)E * sizeof(float));
        for (int p0 = 0; p0 < n_keys; p0 += B) {
            const float *vb = kv->v + (size_t)s->blocks[p0 / B] * kv->block_stride + (size_t)kvh * E;
            int pe = p0 + B < n_keys ? p0 + B : n_keys;
            int p = p0;
            /* four keys per pass over oi: one load and store of the output per
             * four values, not a load-FMA-store chain through memory per key */
            for (; p + 4 <= pe; p += 4) {
                float w0 = scores[p] * inv, w1 = scores[p + 1] * inv, w2 = scores[p + 2] * inv,
                      w3 = scores[p + 3] * inv;
                if (w0 == 0.0f && w1 == 0.0f && w2 == 0.0f && w3 == 0.0f) continue;
                const float *v0 = vb + (size_t)(p - p0) * kv_dim, *v1 = v0 + kv_dim, *v2 = v1 + kv_dim,
                            *v3 = v2 + kv_dim;
                for (int e = 0; e < E; e++) oi[e] += (w0 * v0[e] + w1 * v1[e]) + (w2 * v2[e] + w3 * v3[e]);
            }
            for (; p < pe; p++) {
                if (scores[p] == 0.0f) continue;
                float wgt = scores[p] * inv;
                const float *vp = vb + (size_t)(p - p0) * kv_dim;
                for (int e = 0; e < E; e++) oi[e] += wgt * vp[e];
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
