/* train_ops.c — the decoder ops' forward (through the backend table) and
 * backward (C loops) for training (see train_ops.h). */
#include "engine/train/train_ops.h"

#include "kernels/ggml_type.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

train_fault train_fault_inject = TRAIN_FAULT_NONE;

train_ctx *train_ctx_wrap(backend *be) {
    if (!be || !be->host_memory) return NULL;
    train_ctx *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->be = be;
    return c;
}

train_ctx *train_ctx_create(int n_threads) {
    backend *be = backend_cpu_create(n_threads > 0 ? n_threads : 1);
    train_ctx *c = train_ctx_wrap(be);
    if (!c) {
        backend_destroy(be);
        return NULL;
    }
    c->own_be = 1;
    return c;
}

void train_ctx_destroy(train_ctx *c) {
    if (!c) return;
    free(c->tA), free(c->tB), free(c->tC), free(c->negpos);
    if (c->own_be) backend_destroy(c->be);
    free(c);
}

/* grows *p to n floats; aborts when memory runs out (training scratch is
 * sized by the first step, so this is a start-up failure) */
static float *grow(float **p, size_t *cap, size_t n) {
    if (n > *cap) {
        float *q = realloc(*p, n * sizeof(float));
        if (!q) {
            fprintf(stderr, "%s:%d: out of memory (%zu floats of training scratch)\n", __FILE__, __LINE__, n);
            abort();
        }
        *p = q, *cap = n;
    }
    return *p;
}

/* t (C, R) = transpose of a (R, C), in 32x32 tiles */
static void transpose(float *t, const float *a, int R, int C) {
    for (int r0 = 0; r0 < R; r0 += 32)
        for (int c0 = 0; c0 < C; c0 += 32) {
            int r1 = r0 + 32 < R ? r0 + 32 : R, c1 = c0 + 32 < C ? c0 + 32 : C;
            for (int r = r0; r < r1; r++)
                for (int cc = c0; cc < c1; cc++) t[(size_t)cc * R + r] = a[(size_t)r * C + cc];
        }
}

float top_dot(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

/* y[i] += a * x[i] */
static inline void axpy(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* ---- linear ----------------------------------------------------------------------- */

void top_linear(train_ctx *c, float *y, const float *x, const float *W, int M, int K, int N) {
    c->be->i->matmul(c->be, y, x, W, GGML_TYPE_F32, M, K, N);
    c->flops += 2.0 * M * K * N;
}

void top_linear_bwd(train_ctx *c, float *dx, float *dW, const float *dy, const float *x, const float *W, int M, int K,
                    int N) {
    backend *be = c->be;
    if (dx) { /* dx (M, K) = dy (M, N) . (W^T)^T: W^T (K, N) is the "weight" */
        float *wt = grow(&c->tA, &c->capA, (size_t)K * N);
        transpose(wt, W, N, K);
        be->i->matmul(be, dx, dy, wt, GGML_TYPE_F32, M, N, K);
        c->flops += 2.0 * M * K * N;
    }
    if (dW) { /* dW (N, K) += dy^T (N, M) . (x^T (K, M))^T */
        float *dyt = grow(&c->tA, &c->capA, (size_t)N * M), *xt = grow(&c->tB, &c->capB, (size_t)K * M);
        float *prod = grow(&c->tC, &c->capC, (size_t)N * K);
        transpose(dyt, dy, M, N);
        transpose(xt, x, M, K);
        be->i->matmul(be, prod, dyt, xt, GGML_TYPE_F32, N, M, K);
        be->i->add(be, dW, prod, N, K);
        c->flops += 2.0 * M * K * N;
    }
}

/* ---- RMSNorm ------------------------------------------------------------------------ */

void top_rmsnorm(train_ctx *c, float *y, const float *x, const float *w, int M, int D, float eps) {
    c->be->i->rmsnorm(c->be, y, x, w, M, D, eps);
}

void top_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int D, float eps) {
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * D, *g = dy + (size_t)m * D;
        float *dr = dx + (size_t)m * D;
        double ss = 0, gwx = 0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i], gwx += (double)g[i] * w[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / D + eps));
        /* d/dx_i of x_j r w_j: r w_j delta_ij - x_j w_j r^3 x_i / D */
        float corr = train_fault_inject == TRAIN_FAULT_RMSNORM ? 0.0f : (float)(gwx * r * r * r / D);
        for (int i = 0; i < D; i++) dr[i] += r * g[i] * w[i] - corr * xr[i];
        if (dw)
            for (int i = 0; i < D; i++) dw[i] += g[i] * xr[i] * r;
    }
}

/* ---- RoPE ---------------------------------------------------------------------------- */

void top_rope(train_ctx *c, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E) {
    c->be->i->rope(c->be, x, pos, inv_freq, M, H, E, E, 0);
}

void top_rope_bwd(train_ctx *c, float *dx, const int32_t *pos, const float *inv_freq, int M, int H, int E) {
    if (train_fault_inject == TRAIN_FAULT_ROPE) return;
    if ((size_t)M > c->capP) {
        int32_t *p = realloc(c->negpos, sizeof(int32_t) * (size_t)M);
        if (!p) {
            fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
            abort();
        }
        c->negpos = p, c->capP = (size_t)M;
    }
    for (int m = 0; m < M; m++) c->negpos[m] = -pos[m];
    c->be->i->rope(c->be, dx, c->negpos, inv_freq, M, H, E, E, 0);
}

/* ---- SwiGLU -------------------------------------------------------------------------- */

void top_swiglu(train_ctx *c, float *h, const float *g, const float *u, int M, int F) {
    memcpy(h, g, sizeof(float) * (size_t)M * F);
    c->be->i->silu_mul(c->be, h, u, M, F);
}

void top_swiglu_bwd(float *dg, float *du, const float *dh, const float *g, const float *u, int M, int F) {
    size_t n = (size_t)M * F;
    bool bad = train_fault_inject == TRAIN_FAULT_SILU;
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * s;
        float ds = bad ? s : s * (1.0f + g[i] * (1.0f - s));
        du[i] = dh[i] * silu;
        dg[i] = dh[i] * u[i] * ds;
    }
}

/* ---- causal grouped-query attention ------------------------------------------------------ */

/* Row t of step j (sequence s, head h) reads the keys of step 0's rows 0..t
 * and of row t of steps 1..j: key c < T is step 0's row c, key T + i - 1 is
 * step i's row t. P row width T + j. */
static inline int key_step(int c, int T) { return c < T ? 0 : c - T + 1; }
static inline size_t key_off(int c, int T, int t, size_t base, size_t KD, size_t off) {
    return (base + (size_t)(c < T ? c : t)) * KD + off;
}

void top_attention_steps(float *out, float *P, const float *q, const float *const *k, const float *const *v, int j,
                         int S, int T, int H, int Hkv, int E) {
    int QD = H * E, KD = Hkv * E, rep = H / Hkv, W = T + j;
    float sc = 1.0f / sqrtf((float)E);
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++) {
            size_t base = (size_t)s * T, off = (size_t)(h / rep) * E;
            float *Ph = P + ((size_t)s * H + h) * T * W;
            for (int t = 0; t < T; t++) {
                const float *qr = q + (base + t) * QD + (size_t)h * E;
                float *pr = Ph + (size_t)t * W, mx = -INFINITY;
                for (int c = 0; c < W; c++) {
                    if (c > t && c < T) continue;
                    pr[c] = sc * top_dot(qr, k[key_step(c, T)] + key_off(c, T, t, base, KD, off), E);
                    mx = pr[c] > mx ? pr[c] : mx;
                }
                float sum = 0;
                for (int c = 0; c < W; c++) {
                    if (c > t && c < T) {
                        pr[c] = 0;
                        continue;
                    }
                    sum += pr[c] = expf(pr[c] - mx);
                }
                float inv = 1.0f / sum;
                float *o = out + (base + t) * QD + (size_t)h * E;
                memset(o, 0, sizeof(float) * (size_t)E);
                for (int c = 0; c < W; c++) {
                    if (c > t && c < T) continue;
                    pr[c] *= inv;
                    axpy(o, pr[c], v[key_step(c, T)] + key_off(c, T, t, base, KD, off), E);
                }
            }
        }
}

void top_attention_steps_bwd(float *dq, float *const *dk, float *const *dv, const float *dout, const float *P,
                             const float *q, const float *const *k, const float *const *v, int j, int S, int T, int H,
                             int Hkv, int E) {
    int QD = H * E, KD = Hkv * E, rep = H / Hkv, W = T + j;
    float sc = 1.0f / sqrtf((float)E);
    memset(dq, 0, sizeof(float) * (size_t)S * T * QD);
    float *dp = malloc(sizeof(float) * (size_t)W);
    if (!dp) {
        fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
        abort();
    }
    bool no_rowsum = train_fault_inject == TRAIN_FAULT_SOFTMAX, own_only = train_fault_inject == TRAIN_FAULT_STEPS;
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++) {
            size_t base = (size_t)s * T;
            size_t off = (size_t)(train_fault_inject == TRAIN_FAULT_GQA ? 0 : h / rep) * E;
            const float *Ph = P + ((size_t)s * H + h) * T * W;
            for (int t = 0; t < T; t++) {
                const float *pr = Ph + (size_t)t * W;
                const float *g = dout + (base + t) * QD + (size_t)h * E;
                const float *qr = q + (base + t) * QD + (size_t)h * E;
                float *dqr = dq + (base + t) * QD + (size_t)h * E;
                float rs = 0;
                for (int c = 0; c < W; c++) {
                    if (c > t && c < T) continue;
                    dp[c] = top_dot(g, v[key_step(c, T)] + key_off(c, T, t, base, KD, off), E);
                    rs += pr[c] * dp[c];
                    if (!(own_only && key_step(c, T) != j))
                        axpy(dv[key_step(c, T)] + key_off(c, T, t, base, KD, off), pr[c], g, E);
                }
                if (no_rowsum) rs = 0;
                for (int c = 0; c < W; c++) {
                    if (c > t && c < T) continue;
                    float ds = pr[c] * (dp[c] - rs) * sc;
                    axpy(dqr, ds, k[key_step(c, T)] + key_off(c, T, t, base, KD, off), E);
                    if (!(own_only && key_step(c, T) != j))
                        axpy(dk[key_step(c, T)] + key_off(c, T, t, base, KD, off), ds, qr, E);
                }
            }
        }
    free(dp);
}

void top_attention(float *out, float *P, const float *q, const float *k, const float *v, int S, int T, int H, int Hkv,
                   int E) {
    top_attention_steps(out, P, q, &k, &v, 0, S, T, H, Hkv, E);
}

void top_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *P, const float *q,
                       const float *k, const float *v, int S, int T, int H, int Hkv, int E) {
    memset(dk, 0, sizeof(float) * (size_t)S * T * Hkv * E);
    memset(dv, 0, sizeof(float) * (size_t)S * T * Hkv * E);
    top_attention_steps_bwd(dq, &dk, &dv, dout, P, q, &k, &v, 0, S, T, H, Hkv, E);
}

/* ---- embedding ------------------------------------------------------------------------------- */

void top_embed(train_ctx *c, float *x, const float *table, const int32_t *ids, int M, int D) {
    c->be->i->get_rows(c->be, x, table, GGML_TYPE_F32, ids, M, D);
}

void top_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int M, int D) {
    for (int m = 0; m < M; m++) axpy(dtable + (size_t)ids[m] * D, 1.0f, dx + (size_t)m * D, D);
}
