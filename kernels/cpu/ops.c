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

void ops_attention_head(float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h, int H,
                        int Hkv, int E, float *scores) {
    int kv_dim = Hkv * E;
    int kvh = h / (H / Hkv);
    float scale = 1.0f / sqrtf((float)E);
    int B = kv->block_size;
    for (int i = 0; i < s->n_new; i++) {
        const float *qi = q + ((size_t)(s->row0 + i) * H + h) * E;
        float *oi = out + ((size_t)(s->row0 + i) * H + h) * E;
        int n_keys = s->n_past + s->n_new;
        int lo = 0; /* sliding window: lowest key position this query may see */
        if (s->window > 0) lo = ops_attn_pos(s, i) - s->window + 1;
        float mx = -INFINITY;
        for (int p = 0; p < n_keys; p++) {
            int j = p - s->n_past; /* index among the new positions, or negative */
            if ((j >= 0 && (s->mask ? !s->mask[(size_t)i * s->n_new + j] : j > i)) ||
                (lo > 0 && (j < 0 ? p : ops_attn_pos(s, j)) < lo)) {
                scores[p] = -INFINITY;
                continue;
            }
            const float *kp = kv->k + (size_t)s->blocks[p / B] * kv->block_stride + (size_t)(p % B) * kv_dim +
                              (size_t)kvh * E;
            float d = 0.0f;
            for (int e = 0; e < E; e++) d += qi[e] * kp[e];
            d *= scale;
            scores[p] = d;
            if (d > mx) mx = d;
        }
        float sum = 0.0f;
        for (int p = 0; p < n_keys; p++) {
            float e = scores[p] == -INFINITY ? 0.0f : expf(scores[p] - mx);
            scores[p] = e;
            sum += e;
        }
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        memset(oi, 0, (size_t)E * sizeof(float));
        for (int p = 0; p < n_keys; p++) {
            if (scores[p] == 0.0f) continue;
            float wgt = scores[p] * inv;
            const float *vp = kv->v + (size_t)s->blocks[p / B] * kv->block_stride + (size_t)(p % B) * kv_dim +
                              (size_t)kvh * E;
            for (int e = 0; e < E; e++) oi[e] += wgt * vp[e];
        }
    }
}
