/* test_train_grad.c — the training library's gradients against central
 * finite differences of an independent float64 implementation: each op alone
 * (RMSNorm, RoPE, causal GQA attention, SwiGLU, linear, embedding,
 * cross-entropy, top-k KL, the training-time test's attention over steps),
 * a whole tiny llama (tied and untied output, CE + KL loss, two sequences)
 * and a whole EAGLE-3 head unrolled over three training-time-test steps
 * (fc, the 2D-wide attention input, every step's loss, the features passed
 * from step to step). Then every broken variant of
 * train_fault_inject must FAIL the same checks: a check that cannot fail
 * proves nothing. */
#include "engine/train/eagle_train.h"
#include "engine/train/train_loss.h"
#include "engine/train/train_model.h"
#include "engine/train/train_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 12345;
static double urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) * 0x1p-53;
}
static float nrand(float s) { return (float)((urand() * 2 - 1) * s); }

/* ---- float64 reference ops ---------------------------------------------------------------- */

static void r_rmsnorm(double *y, const double *x, const double *w, int M, int D, double eps) {
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += x[m * D + i] * x[m * D + i];
        double r = 1 / sqrt(ss / D + eps);
        for (int i = 0; i < D; i++) y[m * D + i] = x[m * D + i] * r * w[i];
    }
}
/* rows m at position pos[m] */
static void r_rope(double *x, const int *pos, int M, int H, int E, double base) {
    for (int m = 0; m < M; m++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < E / 2; i++) {
                double a = pos[m] * pow(base, -2.0 * i / E), c = cos(a), s = sin(a);
                double *v = x + ((size_t)m * H + h) * E + 2 * i, x0 = v[0], x1 = v[1];
                v[0] = x0 * c - x1 * s, v[1] = x0 * s + x1 * c;
            }
}
static void r_attention(double *o, const double *q, const double *k, const double *v, int S, int T, int H, int Hkv,
                        int E) {
    double sc[64];
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / (H / Hkv);
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < E; e++)
                        d += q[((s * T + t) * H + h) * E + e] * k[((s * T + j) * Hkv + kh) * E + e];
                    sc[j] = d / sqrt((double)E);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < E; e++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += sc[j] / sum * v[((s * T + j) * Hkv + kh) * E + e];
                    o[((s * T + t) * H + h) * E + e] = a;
                }
            }
}
/* the training-time test's attention: row t of step j reads step 0's rows
 * 0..t and row t of steps 1..j; k[i], v[i] step i's (M, Hkv*E) */
static void r_attention_steps(double *o, const double *q, const double *const *k, const double *const *v, int j, int S,
                              int T, int H, int Hkv, int E) {
    double sc[64];
    const double *kr[64], *vr[64];
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                int kh = h / (H / Hkv), n = 0;
                for (int c = 0; c <= t; c++) kr[n] = k[0] + ((s * T + c) * Hkv + kh) * E, vr[n++] = v[0] + ((s * T + c) * Hkv + kh) * E;
                for (int i = 1; i <= j; i++) kr[n] = k[i] + ((s * T + t) * Hkv + kh) * E, vr[n++] = v[i] + ((s * T + t) * Hkv + kh) * E;
                double mx = -1e300, sum = 0;
                for (int c = 0; c < n; c++) {
                    double d = 0;
                    for (int e = 0; e < E; e++) d += q[((s * T + t) * H + h) * E + e] * kr[c][e];
                    sc[c] = d / sqrt((double)E);
                    if (sc[c] > mx) mx = sc[c];
                }
                for (int c = 0; c < n; c++) sum += sc[c] = exp(sc[c] - mx);
                for (int e = 0; e < E; e++) {
                    double a = 0;
                    for (int c = 0; c < n; c++) a += sc[c] / sum * vr[c][e];
                    o[((s * T + t) * H + h) * E + e] = a;
                }
            }
}
static void r_linear(double *y, const double *x, const double *W, int M, int K, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double a = 0;
            for (int k = 0; k < K; k++) a += x[m * K + k] * W[n * K + k];
            y[m * N + n] = a;
        }
}
static double r_silu(double g) { return g / (1 + exp(-g)); }
static double r_lse(const double *z, int n) {
    double mx = z[0], s = 0;
    for (int i = 1; i < n; i++) mx = z[i] > mx ? z[i] : mx;
    for (int i = 0; i < n; i++) s += exp(z[i] - mx);
    return mx + log(s);
}
static double r_kl(const double *z, int V, const int32_t *ids, const float *tz, int K) {
    double tzd[64];
    for (int k = 0; k < K; k++) tzd[k] = tz[k];
    double lp = r_lse(tzd, K), lq = r_lse(z, V), kl = 0;
    for (int k = 0; k < K; k++) kl += exp(tzd[k] - lp) * ((tzd[k] - lp) - (z[ids[k]] - lq));
    return kl;
}

/* ---- the checker -------------------------------------------------------------------------- */

/* max over i of |a_i - n_i| / (|n_i| + 1e-2 max|n|) */
static double rel_err(const float *a, const double *n, size_t cnt) {
    double mx = 0, e = 0;
    for (size_t i = 0; i < cnt; i++) mx = fabs(n[i]) > mx ? fabs(n[i]) : mx;
    for (size_t i = 0; i < cnt; i++) {
        double r = fabs(a[i] - n[i]) / (fabs(n[i]) + 1e-2 * mx + 1e-12);
        e = r > e ? r : e;
    }
    return e;
}

#define TOL 2e-3
static int failures;
/* a check that should pass (want 1) or fail (want 0) */
static void expect(const char *what, double err, int want_pass) {
    int pass = err < TOL;
    printf("%-44s err %.2e  %s%s\n", what, err, pass ? "pass" : "FAIL", pass == want_pass ? "" : "  <-- unexpected");
    if (pass != want_pass) failures++;
}

/* num (n) = central differences, step 1e-5, of loss(ctx, p) at p (n, restored after) */
static void central_diff(double *num, double *p, size_t n, double (*loss)(const void *ctx, const double *p),
                         const void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double h = 1e-5, keep = p[i];
        p[i] = keep + h;
        double lp = loss(ctx, p);
        p[i] = keep - h;
        double lm = loss(ctx, p);
        p[i] = keep;
        num[i] = (lp - lm) / (2 * h);
    }
}

/* the worst rel_err over a parameter table's tensors (a small tensor's error is not drowned by a big
 * one); a failing tensor is named when no fault is injected */
static double tensor_err(const train_tensor *t, int n, const float *grad, const double *num, const char *what) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        size_t o = t[i].off, cnt = (size_t)t[i].rows * t[i].cols;
        double et = rel_err(grad + o, num + o, cnt);
        if (et >= TOL && train_fault_inject == TRAIN_FAULT_NONE) printf("  %s tensor %s err %.2e\n", what, t[i].name, et);
        e = et > e ? et : e;
    }
    return e;
}

/* ---- per-op checks: loss = sum R * op(x) ------------------------------------------------------- */

enum { OP_RMS, OP_ROPE, OP_ATTN, OP_SWIGLU, OP_LINEAR, OP_EMBED, OP_XENT, OP_KL, OP_STEPS, N_OPS };
static const char *op_name[] = {"rmsnorm", "rope", "attention (GQA, causal)", "swiglu", "linear", "embedding",
                                "cross-entropy", "top-k KL", "attention over 3 steps (GQA)"};
enum { JS_ = 2 }; /* OP_STEPS: step 2 of a training-time test, over q and steps 0..2's k and v */

enum { S_ = 2, T_ = 5, H_ = 4, HKV_ = 2, E_ = 6, D_ = 12, F_ = 10, V_ = 13, K_ = 5 };

/* the reference op's loss at inputs xin (double) */
static double op_ref(int op, const double *x, const double *R, const int32_t *ids, const float *tz) {
    static double y[4096], y2[4096];
    int M = S_ * T_;
    double L = 0;
    switch (op) {
    case OP_RMS: { /* x: (M, D) then w (D) */
        r_rmsnorm(y, x, x + M * D_, M, D_, 1e-5);
        for (int i = 0; i < M * D_; i++) L += R[i] * y[i];
        break;
    }
    case OP_ROPE: {
        int pos[S_ * T_];
        for (int m = 0; m < M; m++) pos[m] = 3 * (m % T_) + 1;
        memcpy(y, x, sizeof(double) * M * H_ * E_);
        r_rope(y, pos, M, H_, E_, 10000.0);
        for (int i = 0; i < M * H_ * E_; i++) L += R[i] * y[i];
        break;
    }
    case OP_ATTN: { /* q (M, H*E), k (M, Hkv*E), v (M, Hkv*E) */
        r_attention(y, x, x + M * H_ * E_, x + M * (H_ + HKV_) * E_, S_, T_, H_, HKV_, E_);
        for (int i = 0; i < M * H_ * E_; i++) L += R[i] * y[i];
        break;
    }
    case OP_SWIGLU:
        for (int i = 0; i < M * F_; i++) L += R[i] * r_silu(x[i]) * x[M * F_ + i];
        break;
    case OP_LINEAR: /* x (M, D), W (F, D) */
        r_linear(y, x, x + M * D_, M, D_, F_);
        for (int i = 0; i < M * F_; i++) L += R[i] * y[i];
        break;
    case OP_EMBED: /* table (V, D) */
        for (int m = 0; m < M; m++)
            for (int i = 0; i < D_; i++) L += R[m * D_ + i] * x[ids[m] * D_ + i];
        break;
    case OP_XENT: /* z (V): CE to ids[0], weight 0.7 */
        memcpy(y2, x, sizeof(double) * V_);
        L = 0.7 * (r_lse(y2, V_) - y2[ids[0]]);
        break;
    case OP_KL:
        memcpy(y2, x, sizeof(double) * V_);
        L = 0.7 * r_kl(y2, V_, ids, tz, K_);
        break;
    case OP_STEPS: { /* q (M, H*E), then k0..k2, then v0..v2 (M, Hkv*E each) */
        const double *k[JS_ + 1], *v[JS_ + 1];
        for (int i = 0; i <= JS_; i++)
            k[i] = x + M * H_ * E_ + i * M * HKV_ * E_, v[i] = x + M * H_ * E_ + (JS_ + 1 + i) * M * HKV_ * E_;
        r_attention_steps(y, x, k, v, JS_, S_, T_, H_, HKV_, E_);
        for (int i = 0; i < M * H_ * E_; i++) L += R[i] * y[i];
        break;
    }
    }
    return L;
}

static size_t op_inputs(int op) {
    int M = S_ * T_;
    switch (op) {
    case OP_RMS: return M * D_ + D_;
    case OP_ROPE: return M * H_ * E_;
    case OP_ATTN: return M * (H_ + 2 * HKV_) * E_;
    case OP_SWIGLU: return 2 * M * F_;
    case OP_LINEAR: return M * D_ + F_ * D_;
    case OP_EMBED: return V_ * D_;
    case OP_STEPS: return M * H_ * E_ + 2 * (JS_ + 1) * M * HKV_ * E_;
    default: return V_;
    }
}

/* the library's gradient of the same loss w.r.t. the inputs into g */
static void op_lib(train_ctx *c, int op, const float *x, const float *R, const int32_t *ids, const float *tz, float *g) {
    int M = S_ * T_;
    static float y[4096], t1[4096], t2[4096], t3[4096], P[4096];
    size_t n = op_inputs(op);
    memset(g, 0, sizeof(float) * n);
    switch (op) {
    case OP_RMS:
        top_rmsnorm_bwd(g, g + M * D_, R, x, x + M * D_, M, D_, 1e-5f);
        break;
    case OP_ROPE: {
        int32_t pos[S_ * T_];
        float inv[E_ / 2];
        for (int m = 0; m < M; m++) pos[m] = 3 * (m % T_) + 1;
        for (int i = 0; i < E_ / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / E_);
        memcpy(g, R, sizeof(float) * n);
        top_rope_bwd(c, g, pos, inv, M, H_, E_);
        break;
    }
    case OP_ATTN: {
        const float *q = x, *k = x + M * H_ * E_, *v = x + M * (H_ + HKV_) * E_;
        top_attention(y, P, q, k, v, S_, T_, H_, HKV_, E_);
        top_attention_bwd(g, g + M * H_ * E_, g + M * (H_ + HKV_) * E_, R, P, q, k, v, S_, T_, H_, HKV_, E_);
        break;
    }
    case OP_SWIGLU:
        top_swiglu_bwd(g, g + M * F_, R, x, x + M * F_, M, F_);
        break;
    case OP_LINEAR:
        top_linear_bwd(c, g, g + M * D_, R, x, x + M * D_, M, D_, F_);
        break;
    case OP_EMBED:
        top_embed_bwd(g, R, ids, M, D_);
        break;
    case OP_XENT:
        tl_xent(g, x, V_, ids[0], 0.7f);
        break;
    case OP_KL:
        tl_kl_topk(g, x, V_, ids, tz, K_, 1.0f, 0.7f);
        break;
    case OP_STEPS: {
        const float *k[JS_ + 1], *v[JS_ + 1];
        float *dk[JS_ + 1], *dv[JS_ + 1];
        for (int i = 0; i <= JS_; i++) {
            size_t ko = M * H_ * E_ + i * M * HKV_ * E_, vo = M * H_ * E_ + (JS_ + 1 + i) * M * HKV_ * E_;
            k[i] = x + ko, v[i] = x + vo, dk[i] = g + ko, dv[i] = g + vo;
        }
        static float Ps[S_ * H_ * T_ * (T_ + JS_)];
        top_attention_steps(y, Ps, x, k, v, JS_, S_, T_, H_, HKV_, E_);
        top_attention_steps_bwd(g, dk, dv, R, Ps, x, k, v, JS_, S_, T_, H_, HKV_, E_);
        break;
    }
    }
    (void)t1, (void)t2, (void)t3;
}

static double op_check(train_ctx *c, int op) {
    size_t n = op_inputs(op);
    float *x = malloc(sizeof(float) * n), *R = malloc(sizeof(float) * 4096), *g = malloc(sizeof(float) * n);
    double *xd = malloc(sizeof(double) * n), *Rd = malloc(sizeof(double) * 4096), *num = malloc(sizeof(double) * n);
    int32_t ids[S_ * T_];
    float tz[K_];
    rs = 777 + op;
    for (size_t i = 0; i < n; i++) x[i] = nrand(1.5f);
    if (op == OP_RMS)
        for (int i = 0; i < D_; i++) x[S_ * T_ * D_ + i] = 1 + nrand(0.5f);
    for (int i = 0; i < 4096; i++) R[i] = nrand(1.0f), Rd[i] = R[i];
    for (int m = 0; m < S_ * T_; m++) ids[m] = (int32_t)(urand() * V_) % V_;
    for (int k = 0; k < K_; k++) ids[k] = (k * 5 + 2) % V_, tz[k] = 2.0f - 0.4f * k + nrand(0.1f); /* distinct */
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    op_lib(c, op, x, R, ids, tz, g);
    for (size_t i = 0; i < n; i++) {
        double h = 1e-5, keep = xd[i];
        xd[i] = keep + h;
        double lp = op_ref(op, xd, Rd, ids, tz);
        xd[i] = keep - h;
        double lm = op_ref(op, xd, Rd, ids, tz);
        xd[i] = keep;
        num[i] = (lp - lm) / (2 * h);
    }
    double e = rel_err(g, num, n);
    free(x), free(R), free(g), free(xd), free(Rd), free(num);
    return e;
}

/* ---- the whole model ------------------------------------------------------------------------------ */

/* The float64 model's loss on the batch, parameters p laid out like m's. */
static double model_ref(const train_model *m, const double *p, const train_batch *b) {
    const train_cfg *c = &m->c;
    int S = b->S, T = b->T, M = S * T, D = c->D, H = c->H, Hkv = c->Hkv, E = c->E, F = c->F, V = c->V;
    int QD = H * E, KD = Hkv * E;
    static double x[4096], n1[4096], q[4096], k[4096], v[4096], ao[4096], t[4096], g[4096], u[4096], z[8192];
    int pos[256];
    for (int r = 0; r < M; r++) pos[r] = r % T;
    int ti = 0;
    const double *emb = p + m->t[ti++].off;
    for (int r = 0; r < M; r++)
        for (int i = 0; i < D; i++) x[r * D + i] = emb[b->tokens[r] * D + i];
    for (int l = 0; l < c->L; l++) {
        const double *an = p + m->t[ti++].off, *wq = p + m->t[ti++].off, *wk = p + m->t[ti++].off,
                     *wv = p + m->t[ti++].off, *wo = p + m->t[ti++].off, *fn = p + m->t[ti++].off,
                     *wg = p + m->t[ti++].off, *wu = p + m->t[ti++].off, *wd = p + m->t[ti++].off;
        r_rmsnorm(n1, x, an, M, D, c->eps);
        r_linear(q, n1, wq, M, D, QD);
        r_linear(k, n1, wk, M, D, KD);
        r_linear(v, n1, wv, M, D, KD);
        r_rope(q, pos, M, H, E, c->rope_base);
        r_rope(k, pos, M, Hkv, E, c->rope_base);
        r_attention(ao, q, k, v, S, T, H, Hkv, E);
        r_linear(t, ao, wo, M, QD, D);
        for (int i = 0; i < M * D; i++) x[i] += t[i];
        r_rmsnorm(n1, x, fn, M, D, c->eps);
        r_linear(g, n1, wg, M, D, F);
        r_linear(u, n1, wu, M, D, F);
        for (int i = 0; i < M * F; i++) g[i] = r_silu(g[i]) * u[i];
        r_linear(t, g, wd, M, F, D);
        for (int i = 0; i < M * D; i++) x[i] += t[i];
    }
    const double *on = p + m->t[ti++].off, *out = c->tied ? emb : p + m->t[ti].off;
    r_rmsnorm(n1, x, on, M, D, c->eps);
    r_linear(z, n1, out, M, D, V);
    double L = 0;
    for (int r = 0; r < M; r++) {
        if (b->weight[r] == 0) continue;
        if (b->labels[r] >= 0) L += b->weight[r] * b->ce_w * (r_lse(z + r * V, V) - z[r * V + b->labels[r]]);
        if (b->K) L += b->weight[r] * b->kl_w * r_kl(z + r * V, V, b->topk_id + r * b->K, b->topk_logit + r * b->K, b->K);
    }
    return L;
}

struct model_case {
    const train_model *m;
    const train_batch *b;
};
static double model_loss(const void *ctx, const double *p) {
    const struct model_case *mc = ctx;
    return model_ref(mc->m, p, mc->b);
}

static double model_check(train_ctx *c, bool tied) {
    train_cfg cfg = {.V = 11, .D = 8, .L = 2, .H = 4, .Hkv = 2, .E = 4, .F = 12, .ctx = 16, .eps = 1e-5f,
                     .rope_base = 100.0f, .tied = tied};
    char err[256];
    train_model *m = train_model_create(&cfg, 3, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    rs = 99;
    for (size_t i = 0; i < m->n_params; i++) m->params[i] += nrand(0.4f); /* well away from the tiny init */
    enum { S = 2, T = 5, K = 4 };
    int32_t tok[S * T], lab[S * T], kid[S * T * K];
    float kz[S * T * K], wt[S * T];
    for (int r = 0; r < S * T; r++) {
        tok[r] = (int32_t)(urand() * 11) % 11;
        lab[r] = r == 7 ? -1 : (int32_t)(urand() * 11) % 11;
        wt[r] = r == 9 ? 0.0f : 0.1f;
        for (int k = 0; k < K; k++) kid[r * K + k] = (r + 3 * k) % 11, kz[r * K + k] = 1.5f - 0.5f * k + nrand(0.2f);
    }
    train_batch b = {S, T, K, tok, lab, kid, kz, wt, 0.6f, 0.9f};
    train_work *w = train_work_create(m, S, T);
    float *grad = calloc(m->n_params, sizeof(float));
    double *pd = calloc(m->n_params, sizeof(double)), *num = malloc(sizeof(double) * m->n_params);
    if (!w || !grad || !pd || !num) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    double lib = train_forward_backward(c, w, m, &b, grad, NULL, NULL);
    for (size_t i = 0; i < m->n_params; i++) pd[i] = m->params[i];
    double ref = model_ref(m, pd, &b);
    if (fabs(lib - ref) > 1e-4 * (1 + fabs(ref))) {
        printf("loss: library %.8f vs float64 %.8f\n", lib, ref);
        failures++;
    }
    struct model_case mc = {m, &b};
    central_diff(num, pd, m->n_params, model_loss, &mc);
    double e = tensor_err(m->t, m->n_tensors, grad, num, "model");
    train_work_destroy(w);
    free(grad), free(pd), free(num);
    train_model_destroy(m);
    return e;
}

/* ---- a whole EAGLE-3 head over the training-time test ------------------------------------------------- */

enum { EJ = 3, ES = 2, ET = 5, EK = 4 };

/* The float64 head's loss on the batch (parameters p laid out as h's). */
static double eagle_ref(const eagle_head *h, const double *p, const eagle_batch *b) {
    int S = b->S, T = ET, J = b->J, M = S * T, D = h->D, H = h->H, Hkv = h->Hkv, E = h->E, F = h->F, V = h->V;
    int QD = H * E, KD = Hkv * E;
    static double x[512], e[512], n1[1024], ne[512], nx[512], q[1024], ks[EJ][512], vs[EJ][512], ao[1024], y[512],
        g[1024], u[1024], t[512], z[1024];
    const double *fc = p + h->t[0].off, *an = p + h->t[1].off, *hn = p + h->t[2].off, *wq = p + h->t[3].off,
                 *wk = p + h->t[4].off, *wv = p + h->t[5].off, *wo = p + h->t[6].off, *fn = p + h->t[7].off,
                 *wg = p + h->t[8].off, *wu = p + h->t[9].off, *wd = p + h->t[10].off, *on = p + h->t[11].off;
    static double shared[4096];
    const double *out = p + h->t[12 % h->n_tensors].off;
    if (h->out_shared) { /* the target's output head: not a parameter */
        for (int i = 0; i < h->V * h->D; i++) shared[i] = h->out_shared[i];
        out = shared;
    }
    double featd[3 * 512];
    for (int i = 0; i < M * 3 * D; i++) featd[i] = b->feat[i];
    r_linear(x, featd, fc, M, 3 * D, D);
    double L = 0;
    for (int j = 0; j < J; j++) {
        int pos[64];
        for (int s = 0; s < S; s++)
            for (int tt = 0; tt < T; tt++) {
                int32_t id = b->tok[s * (T + J) + tt + j];
                for (int i = 0; i < D; i++) e[(s * T + tt) * D + i] = h->embd[id * D + i];
                pos[s * T + tt] = tt + j;
            }
        r_rmsnorm(ne, e, an, M, D, h->eps);
        r_rmsnorm(nx, x, hn, M, D, h->eps);
        for (int r = 0; r < M; r++)
            for (int i = 0; i < D; i++) n1[r * 2 * D + i] = ne[r * D + i], n1[r * 2 * D + D + i] = nx[r * D + i];
        r_linear(q, n1, wq, M, 2 * D, QD);
        r_linear(ks[j], n1, wk, M, 2 * D, KD);
        r_linear(vs[j], n1, wv, M, 2 * D, KD);
        r_rope(q, pos, M, H, E, h->rope_base);
        r_rope(ks[j], pos, M, Hkv, E, h->rope_base);
        const double *kp[EJ], *vp[EJ];
        for (int i = 0; i <= j; i++) kp[i] = ks[i], vp[i] = vs[i];
        r_attention_steps(ao, q, kp, vp, j, S, T, H, Hkv, E);
        r_linear(t, ao, wo, M, QD, D);
        for (int i = 0; i < M * D; i++) y[i] = x[i] + t[i];
        r_rmsnorm(n1, y, fn, M, D, h->eps);
        r_linear(g, n1, wg, M, D, F);
        r_linear(u, n1, wu, M, D, F);
        for (int i = 0; i < M * F; i++) g[i] = r_silu(g[i]) * u[i];
        r_linear(t, g, wd, M, F, D);
        for (int i = 0; i < M * D; i++) x[i] = y[i] + t[i]; /* the next step's feature */
        r_rmsnorm(n1, x, on, M, D, h->eps);
        r_linear(z, n1, out, M, D, V);
        for (int r = 0; r < M; r++) {
            float wt = b->wt[j][r];
            int32_t lb = b->lab[j][r];
            bool kl = b->kid[j][r * b->K] >= 0, ce = lb >= 0;
            if (wt == 0 || (!kl && !ce)) continue;
            if (kl) L += wt * b->kl_w * r_kl(z + r * V, V, b->kid[j] + r * b->K, b->kz[j] + r * b->K, b->K);
            if (ce) L += wt * b->ce_w * (r_lse(z + r * V, V) - z[r * V + lb]);
        }
    }
    return L;
}

struct eagle_case {
    const eagle_head *h;
    const eagle_batch *b;
};
static double eagle_loss(const void *ctx, const double *p) {
    const struct eagle_case *ec = ctx;
    return eagle_ref(ec->h, p, ec->b);
}

static double eagle_check(train_ctx *c, bool shared_output) {
    enum { V = 11, D = 8 };
    eagle_head *h = eagle_head_alloc(V, D, 4, 2, 4, 12, 1e-5f, 100.0f, shared_output, 5);
    if (!h) {
        fprintf(stderr, "eagle_head_alloc failed\n");
        exit(1);
    }
    rs = 4242;
    for (size_t i = 0; i < h->n_params; i++) h->params[i] += nrand(0.4f);
    for (int i = 0; i < V * D; i++) h->embd[i] = nrand(1.0f);
    enum { M = ES * ET };
    static float feat[M * 3 * D], kz[EJ][M * EK], wt[EJ][M];
    static int32_t tok[ES * (ET + EJ)], lab[EJ][M], kid[EJ][M * EK];
    for (int i = 0; i < M * 3 * D; i++) feat[i] = nrand(1.5f);
    for (int i = 0; i < ES * (ET + EJ); i++) tok[i] = (int32_t)(urand() * V) % V;
    eagle_batch b = {.S = ES, .T = ET, .J = EJ, .K = EK, .feat = feat, .tok = tok, .ce_w = 0.6f, .kl_w = 0.9f};
    for (int j = 0; j < EJ; j++) {
        for (int r = 0; r < M; r++) {
            int tt = r % ET;
            bool valid = tt + j < ET - 1 || r < ET; /* the second sequence is shorter */
            lab[j][r] = valid && (r + j) % 4 != 1 ? (int32_t)(urand() * V) % V : -1;
            kid[j][r * EK] = -1;
            if (valid && (r + j) % 3 != 2)
                for (int k = 0; k < EK; k++) kid[j][r * EK + k] = (r + 3 * k + j) % V, kz[j][r * EK + k] = 1.5f - 0.5f * k + nrand(0.2f);
            wt[j][r] = valid ? 0.1f * (1.0f - 0.2f * j) : 0.0f;
        }
        b.lab[j] = lab[j], b.kid[j] = kid[j], b.kz[j] = kz[j], b.wt[j] = wt[j];
    }
    eagle_work *w = eagle_work_create(h, ES, ET, EJ);
    float *grad = calloc(h->n_params, sizeof(float));
    double *pd = calloc(h->n_params, sizeof(double)), *num = malloc(sizeof(double) * h->n_params);
    if (!w || !grad || !pd || !num) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    double lib = eagle_forward_backward(c, w, h, &b, grad, NULL);
    for (size_t i = 0; i < h->n_params; i++) pd[i] = h->params[i];
    double ref = eagle_ref(h, pd, &b);
    if (fabs(lib - ref) > 1e-4 * (1 + fabs(ref))) {
        printf("eagle loss: library %.8f vs float64 %.8f\n", lib, ref);
        failures++;
    }
    struct eagle_case ec = {h, &b};
    central_diff(num, pd, h->n_params, eagle_loss, &ec);
    double e = tensor_err(h->t, h->n_tensors, grad, num, "eagle");
    eagle_work_destroy(w);
    free(grad), free(pd), free(num);
    eagle_head_destroy(h);
    return e;
}

int main(void) {
    train_ctx *c = train_ctx_create(1);
    char what[96];
    for (int op = 0; op < N_OPS; op++) {
        snprintf(what, sizeof what, "op %s", op_name[op]);
        expect(what, op_check(c, op), 1);
    }
    expect("model, untied output", model_check(c, false), 1);
    expect("model, tied output", model_check(c, true), 1);
    expect("EAGLE-3 head, 3 training-time-test steps", eagle_check(c, false), 1);
    expect("EAGLE-3 head, the target's output head shared", eagle_check(c, true), 1);
    /* broken variants: the op they break and the whole model must fail */
    static const struct {
        train_fault f;
        int op;
        const char *name;
    } br[] = {{TRAIN_FAULT_ROPE, OP_ROPE, "rope backward skipped"},
              {TRAIN_FAULT_RMSNORM, OP_RMS, "rmsnorm mean-square term dropped"},
              {TRAIN_FAULT_SOFTMAX, OP_ATTN, "softmax row-sum term dropped"},
              {TRAIN_FAULT_SILU, OP_SWIGLU, "silu' taken as sigmoid"},
              {TRAIN_FAULT_GQA, OP_ATTN, "GQA grads sent to kv head 0"},
              {TRAIN_FAULT_STEPS, OP_STEPS, "other steps' k/v grads dropped"}};
    for (size_t i = 0; i < sizeof br / sizeof br[0]; i++) {
        train_fault_inject = br[i].f;
        snprintf(what, sizeof what, "BROKEN %s: op", br[i].name);
        expect(what, op_check(c, br[i].op), 0);
        if (br[i].f != TRAIN_FAULT_STEPS) { /* a plain model has no steps: nothing to break there */
            snprintf(what, sizeof what, "BROKEN %s: model", br[i].name);
            expect(what, model_check(c, false), 0);
        }
        snprintf(what, sizeof what, "BROKEN %s: eagle head", br[i].name);
        expect(what, eagle_check(c, false), 0);
        train_fault_inject = TRAIN_FAULT_NONE;
    }
    train_ctx_destroy(c);
    printf("%s (%d unexpected)\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
