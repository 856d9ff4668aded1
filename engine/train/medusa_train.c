/* medusa_train.c — Medusa-1 head training: hidden-state dataset, the
 * hand-written backward pass, AdamW with warmup + cosine, threads, held-out
 * evaluation (see medusa_train.h). */
#include "engine/train/medusa_train.h"
#include "engine/util.h"

#include "kernels/backend.h"
#include "kernels/ggml_type.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the dataset --------------------------------------------------------------- */

medusa_data *medusa_data_create(int dim, int n_heads, int64_t max_positions) {
    medusa_data *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->dim = dim, d->n_heads = n_heads, d->cap = max_positions;
    d->h = malloc(sizeof(float) * (size_t)max_positions * dim);
    d->lab = malloc(sizeof(int32_t) * (size_t)max_positions * n_heads);
    d->next = malloc(sizeof(int32_t) * (size_t)max_positions);
    if (!d->h || !d->lab || !d->next) {
        medusa_data_destroy(d);
        return NULL;
    }
    return d;
}

void medusa_data_destroy(medusa_data *d) {
    if (!d) return;
    free(d->h);
    free(d->lab);
    free(d->next);
    free(d);
}

int64_t medusa_data_add(medusa_data *d, model *m, kv_pool *pool, const int32_t *tokens, int n, int chunk, char *err,
                        size_t errlen) {
    if (chunk > m->mp.max_batch) chunk = m->mp.max_batch;
    if (chunk > m->mp.max_ctx) chunk = m->mp.max_ctx;
    if (chunk < 2) return util_fail(err, errlen, "chunk of %d positions is too short", chunk);
    int K = d->n_heads, D = d->dim;
    float *logits = malloc(sizeof(float) * (size_t)chunk * m->hp.n_vocab);
    int *rows = malloc(sizeof(int) * (size_t)chunk);
    kv_seq *kv = kv_seq_create(pool, chunk);
    if (!logits || !rows || !kv) {
        free(logits);
        free(rows);
        kv_seq_destroy(pool, kv);
        return util_fail(err, errlen, "out of memory: hidden-state pass scratch");
    }
    for (int j = 0; j < chunk; j++) rows[j] = j;
    int64_t added = 0;
    /* the last token has no label for any head: positions [0, n-1) */
    for (int s = 0; s < n - 1 && d->n < d->cap; s += chunk) {
        int c = n - 1 - s < chunk ? n - 1 - s : chunk;
        if (d->cap - d->n < c) c = (int)(d->cap - d->n);
        model_seq ms = {.kv = kv, .n = c, .tokens = tokens + s, .all_logits = true};
        if (model_forward(m, pool, &ms, 1, logits, err, errlen) != 0) {
            added = -1;
            break;
        }
        model_hidden_rows(m, d->h + (size_t)d->n * D, rows, c);
        for (int t = 0; t < c; t++) {
            int64_t i = d->n + t;
            int a = s + t; /* absolute index in the document */
            d->next[i] = tokens[a + 1];
            for (int k = 0; k < K; k++) d->lab[i * K + k] = a + 2 + k < n ? tokens[a + 2 + k] : -1;
        }
        d->n += c;
        added += c;
        kv_seq_truncate(pool, kv, 0);
    }
    free(logits);
    free(rows);
    kv_seq_destroy(pool, kv);
    return added;
}

/* ---- forward and backward of one sample ------------------------------------------- */

/* Per sample: ys (L+1, D), as (L, H), ss (L, H) the SiLU values of FFN
 * layers, z (V), g (D), gs (H) the gradient at an FFN layer's SiLU. */
static size_t per_sample(const medusa_heads *mh) {
    size_t D = (size_t)mh->dim, L = (size_t)mh->n_layers, V = (size_t)mh->n_vocab, H = (size_t)medusa_hidden(mh);
    return (L + 1) * D + L * H + (mh->ffn ? L * H + H : 0) + V + D;
}
static size_t widest(const medusa_heads *mh) {
    size_t D = (size_t)mh->dim, V = (size_t)mh->n_vocab, H = (size_t)medusa_hidden(mh), m = D > H ? D : H;
    return m > V ? m : V;
}

size_t medusa_scratch_floats(const medusa_heads *mh) {
    size_t D = (size_t)mh->dim, H = (size_t)medusa_hidden(mh);
    /* per sample, then the group's matmul input (G, max(D, H)) and output (G, max(D, H, V)),
     * then the heads' inputs x0, the token rows e and the gradient at x0 (G, D) each */
    return MEDUSA_GROUP * per_sample(mh) + MEDUSA_GROUP * ((D > H ? D : H) + widest(mh)) + 3 * MEDUSA_GROUP * D;
}

/* y (G, N) = x (G, D) . W^T for W (N, D) F32: the backend's matmul (each
 * weight row read once for the group); every worker has its own one-thread
 * CPU backend, so the call runs on the worker. */
static void group_matmul(backend *be, float *y, const float *x, const float *W, int G, int D, int N) {
    be->i->matmul(be, y, x, W, GGML_TYPE_F32, G, D, N);
}

/* The CPU kernels' level is AVX-512 (SPECD_SIMD may force another): the
 * backward's AVX-512 build is used then. */
static bool train_avx512(void) {
    static _Atomic int lvl = -1;
    int l = atomic_load_explicit(&lvl, memory_order_relaxed);
    if (l < 0) atomic_store_explicit(&lvl, l = !strcmp(backend_cpu_simd(), "avx512"), memory_order_relaxed);
    return l == 1;
}

static inline float sigm(float a) { return 1.0f / (1.0f + expf(-a)); }

/* Per-sample scratch of a group (per_sample). */
typedef struct {
    float *ys, *as, *ss, *z, *g, *gs;
} gsample;

/* The group's samples in lockstep, loops ordered so that each weight row is
 * read once for all of them (W, the output matrix, and the gradient rows
 * they update): per-sample outer products into a D x D gradient would
 * stream it through memory once per sample. */
static inline __attribute__((always_inline)) double
group_grad(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *const *h,
           const int32_t *tok, const int32_t *const *lab, int G, const float *hw, float *grad, float *scratch,
           int *correct) {
    int K = mh->n_heads, L = mh->n_layers, D = mh->dim, V = mh->n_vocab, F = mh->ffn, H = medusa_hidden(mh);
    size_t per = per_sample(mh), DH = (size_t)(D > H ? D : H);
    gsample sm[MEDUSA_GROUP];
    if (G > MEDUSA_GROUP) G = MEDUSA_GROUP;
    double loss = 0;
    float *X = scratch + (size_t)MEDUSA_GROUP * per, *Y = X + (size_t)MEDUSA_GROUP * DH;
    float *X0 = Y + (size_t)MEDUSA_GROUP * widest(mh), *Er = X0 + (size_t)MEDUSA_GROUP * D,
          *G0 = Er + (size_t)MEDUSA_GROUP * D;
    /* the heads' input: x0 = h + U e(tok), shared by every head (token input), else h */
    bool ti = mh->token_input && E && tok;
    if (ti) {
        for (int s = 0; s < G; s++) {
            float *e = Er + (size_t)s * D;
            if (tok[s] >= 0 && tok[s] < V) memcpy(e, E + (size_t)tok[s] * D, sizeof(float) * (size_t)D);
            else memset(e, 0, sizeof(float) * (size_t)D);
        }
        group_matmul(be, X0, Er, mh->u, G, D, D);
    }
    for (int s = 0; s < G; s++) {
        float *x0 = X0 + (size_t)s * D;
        for (int j = 0; j < D; j++) x0[j] = (ti ? x0[j] : 0.0f) + h[s][j];
    }
    if (ti && grad) memset(G0, 0, sizeof(float) * (size_t)G * D);
    for (int k = 0; k < K; k++) {
        int act[MEDUSA_GROUP], na = 0;
        for (int s = 0; s < G; s++)
            if (lab[s][k] >= 0 && lab[s][k] < V) {
                float *b0 = scratch + (size_t)na * per;
                gsample *q = &sm[na];
                q->ys = b0, b0 += (size_t)(L + 1) * D;
                q->as = b0, b0 += (size_t)L * H;
                q->ss = F ? b0 : NULL, b0 += F ? (size_t)L * H : 0;
                q->z = b0, b0 += V;
                q->g = b0, b0 += D;
                q->gs = F ? b0 : NULL;
                memcpy(q->ys, X0 + (size_t)s * D, sizeof(float) * (size_t)D);
                act[na++] = s;
            }
        if (!na) continue;
        /* forward through the layers */
        for (int l = 0; l < L; l++) {
            size_t i = (size_t)k * L + l;
            const float *W = mh->w + i * H * D, *b = mh->b + i * H;
            for (int s = 0; s < na; s++) memcpy(X + (size_t)s * D, sm[s].ys + (size_t)l * D, sizeof(float) * (size_t)D);
            group_matmul(be, Y, X, W, na, D, H);
            for (int s = 0; s < na; s++) {
                const float *y = sm[s].ys + (size_t)l * D, *wy = Y + (size_t)s * H;
                float *a = sm[s].as + (size_t)l * H, *yn = sm[s].ys + (size_t)(l + 1) * D;
                float *sv = F ? sm[s].ss + (size_t)l * H : NULL;
                for (int r = 0; r < H; r++) {
                    a[r] = wy[r] + b[r];
                    float si = a[r] * sigm(a[r]);
                    if (F) sv[r] = si;
                    else yn[r] = y[r] + si;
                }
            }
            if (!F) continue;
            /* ys[l+1] = ys[l] + W2 SiLU(a) */
            for (int s = 0; s < na; s++) memcpy(X + (size_t)s * H, sm[s].ss + (size_t)l * H, sizeof(float) * (size_t)H);
            group_matmul(be, Y, X, mh->w2 + i * D * F, na, F, D);
            for (int s = 0; s < na; s++) {
                const float *y = sm[s].ys + (size_t)l * D, *w2s = Y + (size_t)s * D;
                float *yn = sm[s].ys + (size_t)(l + 1) * D;
                for (int j = 0; j < D; j++) yn[j] = y[j] + w2s[j];
            }
        }
        const float *Om = mh->own_output ? mh->out + (size_t)k * V * D : O;
        for (int s = 0; s < na; s++) memcpy(X + (size_t)s * D, sm[s].ys + (size_t)L * D, sizeof(float) * (size_t)D);
        group_matmul(be, Y, X, Om, na, D, V);
        for (int s = 0; s < na; s++) memcpy(sm[s].z, Y + (size_t)s * V, sizeof(float) * (size_t)V);
        /* loss; dz = hw (softmax(z) - e_y) in place */
        for (int s = 0; s < na; s++) {
            float *z = sm[s].z;
            int y = lab[act[s]][k], am = 0;
            float mx = z[0];
            for (int v = 1; v < V; v++)
                if (z[v] > mx) mx = z[v], am = v;
            if (correct && am == y) correct[k]++;
            double se = 0;
            for (int v = 0; v < V; v++) se += exp((double)(z[v] - mx));
            loss += hw[k] * (mx + log(se) - z[y]);
            if (!grad) continue;
            float inv = (float)(1.0 / se), w = hw[k];
            for (int v = 0; v < V; v++) z[v] = w * expf(z[v] - mx) * inv;
            z[y] -= w;
            memset(sm[s].g, 0, sizeof(float) * (size_t)D);
        }
        if (!grad) continue;
        float *gO = mh->own_output ? grad + (mh->out - mh->params) + (size_t)k * V * D : NULL;
        for (int v = 0; v < V; v++) {
            const float *o = Om + (size_t)v * D;
            float *go = gO ? gO + (size_t)v * D : NULL;
            for (int s = 0; s < na; s++) {
                float dz = sm[s].z[v];
                float *g = sm[s].g;
                for (int j = 0; j < D; j++) g[j] += dz * o[j];
                if (go) {
                    const float *y = sm[s].ys + (size_t)L * D;
                    for (int j = 0; j < D; j++) go[j] += dz * y[j];
                }
            }
        }
        /* back through the layers. ResBlock: y' = y + silu(a), a = W y + b, the
         * gradient at the SiLU is g itself; FFN: y' = y + W2 silu(a), it is
         * gs = W2^T g, and dW2 = g silu(a)^T. Then u = (that) . silu'(a), kept
         * in as: dW = u y^T, db = u, g += W^T u. */
        for (int l = L - 1; l >= 0; l--) {
            size_t i = (size_t)k * L + l;
            const float *W = mh->w + i * H * D;
            float *gW = grad + (mh->w - mh->params) + i * H * D, *gb = grad + (mh->b - mh->params) + i * H;
            if (F) {
                const float *W2 = mh->w2 + i * D * F;
                float *gW2 = grad + (mh->w2 - mh->params) + i * D * F;
                for (int s = 0; s < na; s++) memset(sm[s].gs, 0, sizeof(float) * (size_t)F);
                for (int r = 0; r < D; r++) {
                    const float *w2r = W2 + (size_t)r * F;
                    float *gw2 = gW2 + (size_t)r * F;
                    for (int s = 0; s < na; s++) {
                        float gr = sm[s].g[r];
                        const float *sv = sm[s].ss + (size_t)l * F;
                        float *gs = sm[s].gs;
                        for (int j = 0; j < F; j++) gw2[j] += gr * sv[j];
                        for (int j = 0; j < F; j++) gs[j] += gr * w2r[j];
                    }
                }
            }
            for (int s = 0; s < na; s++) {
                float *a = sm[s].as + (size_t)l * H;
                const float *g = F ? sm[s].gs : sm[s].g;
                for (int r = 0; r < H; r++) {
                    float sg = sigm(a[r]);
                    a[r] = g[r] * sg * (1.0f + a[r] * (1.0f - sg));
                    gb[r] += a[r];
                }
            }
            for (int r = 0; r < H; r++) {
                float *gw = gW + (size_t)r * D;
                const float *wr = W + (size_t)r * D;
                for (int s = 0; s < na; s++) {
                    float ur = sm[s].as[(size_t)l * H + r];
                    const float *yl = sm[s].ys + (size_t)l * D;
                    float *g = sm[s].g;
                    for (int j = 0; j < D; j++) gw[j] += ur * yl[j];
                    for (int j = 0; j < D; j++) g[j] += ur * wr[j];
                }
            }
        }
        if (ti) /* g is now the gradient at head k's input x0 */
            for (int s = 0; s < na; s++) {
                float *g0 = G0 + (size_t)act[s] * D;
                const float *g = sm[s].g;
                for (int j = 0; j < D; j++) g0[j] += g[j];
            }
    }
    if (ti && grad) { /* x0 = h + U e: dU = sum over the samples of g0 e^T */
        float *gU = grad + (mh->u - mh->params);
        for (int r = 0; r < D; r++) {
            float *gu = gU + (size_t)r * D;
            for (int s = 0; s < G; s++) {
                float gr = G0[(size_t)s * D + r];
                const float *e = Er + (size_t)s * D;
                for (int j = 0; j < D; j++) gu[j] += gr * e[j];
            }
        }
    }
    return loss;
}

/* The backward loops are axpy rows the compiler vectorises; built twice, for
 * the baseline ISA and for AVX-512 (16 lanes, FMA), picked at run time by the
 * kernels' level (SPECD_SIMD=generic runs the portable copy). The dot
 * products are the kernels' matmul in both. */
static double group_grad_generic(backend *be, const medusa_heads *mh, const float *O, const float *E,
                                 const float *const *h, const int32_t *tok, const int32_t *const *lab, int G,
                                 const float *hw, float *grad, float *scratch, int *correct) {
    return group_grad(be, mh, O, E, h, tok, lab, G, hw, grad, scratch, correct);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512vl,avx512bw,fma,prefer-vector-width=512"))) static double
group_grad_avx512(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *const *h,
                  const int32_t *tok, const int32_t *const *lab, int G, const float *hw, float *grad, float *scratch,
                  int *correct) {
    return group_grad(be, mh, O, E, h, tok, lab, G, hw, grad, scratch, correct);
}
#endif

double medusa_group_grad(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *const *h,
                         const int32_t *tok, const int32_t *const *lab, int G, const float *hw, float *grad,
                         float *scratch, int *correct) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (train_avx512()) return group_grad_avx512(be, mh, O, E, h, tok, lab, G, hw, grad, scratch, correct);
#endif
    return group_grad_generic(be, mh, O, E, h, tok, lab, G, hw, grad, scratch, correct);
}

double medusa_sample_grad(backend *be, const medusa_heads *mh, const float *O, const float *E, const float *h,
                          int32_t tok, const int32_t *lab, const float *hw, float *grad, float *scratch, int *correct) {
    return medusa_group_grad(be, mh, O, E, &h, &tok, &lab, 1, hw, grad, scratch, correct);
}

/* ---- evaluation ---------------------------------------------------------------------- */

/* Held-out counts of one range: per head, samples, CE sum and top-j hits. */
typedef struct {
    backend *be;                /* a one-thread CPU backend of its own */
    const medusa_heads *mh;
    const float *O, *E;
    const medusa_data *d;
    int64_t from, to;
    double cnt[MEDUSA_MAX_HEADS], ce[MEDUSA_MAX_HEADS], hit[MEDUSA_MAX_HEADS][MEDUSA_ACC_K];
    int failed;
} eval_part;

/* The heads' forward over groups of MEDUSA_GROUP positions on the kernels'
 * matmul (each weight row read once per group), as medusa_head_forward
 * computes it one row at a time. */
static void *eval_work(void *arg) {
    eval_part *ep = arg;
    const medusa_heads *mh = ep->mh;
    const medusa_data *d = ep->d;
    int K = mh->n_heads < d->n_heads ? mh->n_heads : d->n_heads, L = mh->n_layers, D = mh->dim, V = mh->n_vocab;
    int F = mh->ffn, H = medusa_hidden(mh), G = MEDUSA_GROUP;
    float *buf = malloc(sizeof(float) * (size_t)G * (4 * (size_t)D + (size_t)H + (size_t)V));
    backend *be = ep->be;
    if (!buf || !be) {
        free(buf);
        ep->failed = 1;
        return NULL;
    }
    float *X0 = buf, *Er = X0 + (size_t)G * D, *Y = Er + (size_t)G * D, *T2 = Y + (size_t)G * D,
          *A = T2 + (size_t)G * D, *Z = A + (size_t)G * H;
    bool ti = mh->token_input && ep->E;
    for (int64_t i0 = ep->from; i0 < ep->to; i0 += G) {
        int g = ep->to - i0 < G ? (int)(ep->to - i0) : G;
        if (ti) {
            for (int s = 0; s < g; s++) {
                int32_t t = d->next[i0 + s];
                if (t >= 0 && t < V) memcpy(Er + (size_t)s * D, ep->E + (size_t)t * D, sizeof(float) * (size_t)D);
                else memset(Er + (size_t)s * D, 0, sizeof(float) * (size_t)D);
            }
            group_matmul(be, X0, Er, mh->u, g, D, D);
        }
        for (int s = 0; s < g; s++)
            for (int j = 0; j < D; j++) X0[(size_t)s * D + j] = (ti ? X0[(size_t)s * D + j] : 0.0f) + d->h[(size_t)(i0 + s) * D + j];
        for (int k = 0; k < K; k++) {
            memcpy(Y, X0, sizeof(float) * (size_t)g * D);
            for (int l = 0; l < L; l++) {
                size_t i = (size_t)k * L + l;
                const float *b = mh->b + i * H;
                group_matmul(be, A, Y, mh->w + i * H * D, g, D, H);
                for (int s = 0; s < g; s++)
                    for (int r = 0; r < H; r++) {
                        float a = A[(size_t)s * H + r] + b[r];
                        A[(size_t)s * H + r] = a * sigm(a);
                    }
                const float *br = A;
                if (F) group_matmul(be, T2, A, mh->w2 + i * D * F, g, F, D), br = T2;
                for (size_t j = 0; j < (size_t)g * D; j++) Y[j] += br[j];
            }
            group_matmul(be, Z, Y, mh->own_output ? mh->out + (size_t)k * V * D : ep->O, g, D, V);
            for (int s = 0; s < g; s++) {
                int y = d->lab[(i0 + s) * d->n_heads + k];
                if (y < 0) continue;
                const float *z = Z + (size_t)s * V;
                float mx = z[0];
                for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
                double se = 0;
                int rank = 0; /* tokens scoring above the label (ties: lower ids first) */
                for (int v = 0; v < V; v++) {
                    se += exp((double)(z[v] - mx));
                    rank += z[v] > z[y] || (z[v] == z[y] && v < y);
                }
                ep->ce[k] += mx + log(se) - z[y];
                ep->cnt[k]++;
                for (int j = rank; j < MEDUSA_ACC_K; j++) ep->hit[k][j]++;
            }
        }
    }
    free(buf);
    return NULL;
}

double medusa_evaluate(const medusa_heads *mh, const float *O, const float *E, const medusa_data *d, int64_t from,
                       int64_t to, float head_decay, int threads, double *head_loss, float (*acc)[MEDUSA_ACC_K]) {
    int K = mh->n_heads;
    int T = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    if (to - from < (int64_t)T * MEDUSA_GROUP) T = 1;
    eval_part parts[64];
    pthread_t th[64];
    for (int t = 0; t < T; t++) {
        memset(&parts[t], 0, sizeof(parts[t]));
        parts[t].mh = mh, parts[t].O = O, parts[t].E = E, parts[t].d = d;
        parts[t].be = backend_cpu_create(1);
        parts[t].from = from + (to - from) * t / T, parts[t].to = from + (to - from) * (t + 1) / T;
    }
    for (int t = 1; t < T; t++)
        if (pthread_create(&th[t], NULL, eval_work, &parts[t]) != 0) eval_work(&parts[t]), th[t] = 0;
    eval_work(&parts[0]);
    for (int t = 1; t < T; t++)
        if (th[t]) pthread_join(th[t], NULL);
    double cnt[MEDUSA_MAX_HEADS] = {0}, hit[MEDUSA_MAX_HEADS][MEDUSA_ACC_K] = {{0}}, ce[MEDUSA_MAX_HEADS] = {0};
    for (int t = 0; t < T; t++) backend_destroy(parts[t].be);
    for (int t = 0; t < T; t++) {
        if (parts[t].failed) return NAN;
        for (int k = 0; k < K; k++) {
            cnt[k] += parts[t].cnt[k], ce[k] += parts[t].ce[k];
            for (int j = 0; j < MEDUSA_ACC_K; j++) hit[k][j] += parts[t].hit[k][j];
        }
    }
    double loss = 0, w = 1;
    for (int k = 0; k < K; k++, w *= head_decay) {
        double hl = cnt[k] > 0 ? ce[k] / cnt[k] : 0;
        if (head_loss) head_loss[k] = hl;
        loss += w * hl;
        if (acc)
            for (int j = 0; j < MEDUSA_ACC_K; j++) acc[k][j] = cnt[k] > 0 ? (float)(hit[k][j] / cnt[k]) : 0.0f;
    }
    return loss;
}

/* ---- the training loop ------------------------------------------------------------------ */

void medusa_train_opts_init(medusa_train_opts *o) {
    memset(o, 0, sizeof(*o));
    o->epochs = 1, o->batch = 64, o->lr = 1e-3f, o->weight_decay = 0.01f, o->warmup = 0.05f;
    o->head_decay = 0.8f, o->holdout = 0.05f, o->threads = 1, o->seed = 1;
}

typedef struct {
    backend *be;                /* a one-thread CPU backend of its own (for the whole training) */
    const medusa_heads *mh;
    const float *O, *E;
    const medusa_data *d;
    const int64_t *idx;         /* this step's positions */
    int n;
    const float *hw;
    float *grad;                /* (n_params) this worker's, zeroed by it */
    float *scratch;
    double loss;
    int correct[MEDUSA_MAX_HEADS];
} worker;

static void *work(void *arg) {
    worker *w = arg;
    const medusa_heads *mh = w->mh;
    memset(w->grad, 0, sizeof(float) * mh->n_params);
    memset(w->correct, 0, sizeof(w->correct));
    w->loss = 0;
    const medusa_data *d = w->d;
    for (int j = 0; j < w->n; j += MEDUSA_GROUP) {
        const float *h[MEDUSA_GROUP];
        const int32_t *lab[MEDUSA_GROUP];
        int32_t tok[MEDUSA_GROUP];
        int G = w->n - j < MEDUSA_GROUP ? w->n - j : MEDUSA_GROUP;
        for (int s = 0; s < G; s++) {
            int64_t i = w->idx[j + s];
            h[s] = d->h + (size_t)i * d->dim;
            lab[s] = d->lab + i * d->n_heads;
            tok[s] = d->next[i];
        }
        w->loss += medusa_group_grad(w->be, mh, w->O, w->E, h, tok, lab, G, w->hw, w->grad, w->scratch, w->correct);
    }
    return NULL;
}

/* An FFN layer whose W and W2 are both zero (fresh heads) is a saddle: no
 * gradient reaches either. Such W is drawn N(0, s^2) with s = 1 / rms|x0|
 * over the training positions (pre-activations of unit variance; W2 stays
 * zero, so the head is still the identity). Trained heads are left alone. */
static void init_ffn(medusa_heads *mh, const medusa_data *d, int64_t n_tr, uint64_t seed) {
    int K = mh->n_heads, L = mh->n_layers, D = mh->dim, F = mh->ffn;
    if (!F) return;
    double ss = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n_tr; i += 1 + n_tr / 4096, cnt++)
        for (int j = 0; j < D; j++) ss += (double)d->h[(size_t)i * D + j] * d->h[(size_t)i * D + j];
    float sd = ss > 0 ? (float)(1.0 / sqrt(ss / (double)(cnt ? cnt : 1))) : 1.0f / sqrtf((float)D);
    uint64_t rs = seed ^ 0x6a09e667f3bcc909ULL;
    for (int i = 0; i < K * L; i++) {
        float *W = mh->w + (size_t)i * F * D, *W2 = mh->w2 + (size_t)i * D * F;
        bool zero = true;
        for (size_t j = 0; j < (size_t)F * D && zero; j++) zero = W[j] == 0 && W2[j] == 0;
        if (!zero) continue;
        for (size_t j = 0; j < (size_t)F * D; j += 2) { /* Box-Muller, two at a time */
            double u1 = ((util_splitmix64(&rs) >> 11) + 0.5) * 0x1p-53, u2 = (util_splitmix64(&rs) >> 11) * 0x1p-53;
            double r = sqrt(-2 * log(u1));
            W[j] = sd * (float)(r * cos(2 * M_PI * u2));
            if (j + 1 < (size_t)F * D) W[j + 1] = sd * (float)(r * sin(2 * M_PI * u2));
        }
    }
}

int medusa_train(medusa_heads *mh, const float *O, const float *E, const medusa_data *d, const medusa_train_opts *o,
                 medusa_train_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    int K = mh->n_heads;
    if (d->n_heads < K || d->dim != mh->dim) return util_fail(err, errlen, "training data do not fit the heads");
    if (mh->token_input && !E) return util_fail(err, errlen, "heads with token input need the target's token embedding");
    int64_t n_held = (int64_t)(d->n * (double)o->holdout);
    if (n_held < 1) n_held = d->n > 1 ? 1 : 0;
    int64_t n_tr = d->n - n_held;
    if (n_tr < 1 || n_held < 1) return util_fail(err, errlen, "%lld positions are too few to train on", (long long)d->n);
    res->n_train = n_tr, res->n_heldout = n_held;
    int B = o->batch > 0 ? o->batch : 64;
    if (B > n_tr) B = (int)n_tr;
    int T = o->threads > 0 ? o->threads : 1;
    if (T > B) T = B;
    int64_t steps_per_epoch = n_tr / B;
    int64_t steps = o->max_steps > 0 ? o->max_steps : steps_per_epoch * (o->epochs > 0 ? o->epochs : 1);
    float hw[MEDUSA_MAX_HEADS];
    for (int k = 0; k < K; k++) hw[k] = k ? hw[k - 1] * o->head_decay : 1.0f;

    size_t P = mh->n_params, S = medusa_scratch_floats(mh);
    float *mom = calloc(P, sizeof(float)), *vel = calloc(P, sizeof(float));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n_tr);
    worker *ws = calloc((size_t)T, sizeof(worker));
    float *grads = malloc(sizeof(float) * P * T), *scr = malloc(sizeof(float) * S * T);
    backend *bes[64] = {NULL}; /* each worker's matmuls: a one-thread CPU backend (the backend table, on the worker) */
    bool bok = true;
    for (int t = 0; t < T && t < 64; t++) bok &= (bes[t] = backend_cpu_create(1)) != NULL;
    if (!mom || !vel || !perm || !ws || !grads || !scr || !bok) {
        free(mom), free(vel), free(perm), free(ws), free(grads), free(scr);
        for (int t = 0; t < 64; t++) backend_destroy(bes[t]);
        return util_fail(err, errlen, "out of memory: trainer state (%zu parameters, %d threads)", P, T);
    }
    /* the held-out unigram baseline: head 1's labels vs the most frequent training label */
    {
        int V = mh->n_vocab;
        int64_t *freq = calloc((size_t)V, sizeof(int64_t));
        if (freq) {
            for (int64_t i = 0; i < n_tr; i++)
                if (d->lab[i * d->n_heads] >= 0) freq[d->lab[i * d->n_heads]]++;
            int best = 0;
            for (int v = 1; v < V; v++) best = freq[v] > freq[best] ? v : best;
            int64_t hit = 0, cnt = 0;
            for (int64_t i = n_tr; i < d->n; i++) {
                int y = d->lab[i * d->n_heads];
                if (y >= 0) cnt++, hit += y == best;
            }
            res->unigram_acc = cnt ? (double)hit / cnt : 0;
            free(freq);
        }
    }
    init_ffn(mh, d, n_tr, o->seed);
    res->loss0 = medusa_evaluate(mh, O, E, d, n_tr, d->n, o->head_decay, T, res->head_loss0, NULL);

    uint64_t rs = o->seed;
    for (int64_t i = 0; i < n_tr; i++) perm[i] = i;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    int64_t warm = (int64_t)(steps * (double)o->warmup);
    if (warm < 1) warm = 1;
    double t0 = (clock_now_ms() * 1e-3), tw = t0, wloss = 0;
    int64_t wcorrect[MEDUSA_MAX_HEADS] = {0}, wsamples = 0, pos = n_tr; /* pos: next index in perm */
    int64_t step = 0;
    for (; step < steps; step++) {
        if (o->stop && *o->stop) {
            res->interrupted = true;
            break;
        }
        if (pos + B > n_tr) { /* a new epoch: reshuffle (Fisher-Yates) */
            for (int64_t i = n_tr - 1; i > 0; i--) {
                int64_t j = (int64_t)(util_splitmix64(&rs) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j], perm[j] = t;
            }
            pos = 0;
        }
        pthread_t th[64];
        int nt = T < 64 ? T : 64;
        for (int t = 0; t < nt; t++) {
            int lo = (int)((int64_t)B * t / nt), hi = (int)((int64_t)B * (t + 1) / nt);
            ws[t] = (worker){bes[t], mh, O, E, d, perm + pos + lo, hi - lo, hw, grads + P * t, scr + S * t, 0, {0}};
        }
        for (int t = 1; t < nt; t++)
            if (pthread_create(&th[t], NULL, work, &ws[t]) != 0) work(&ws[t]), th[t] = 0;
        work(&ws[0]);
        for (int t = 1; t < nt; t++)
            if (th[t]) pthread_join(th[t], NULL);
        pos += B;
        double sl = 0;
        for (int t = 0; t < nt; t++) {
            sl += ws[t].loss;
            for (int k = 0; k < K; k++) wcorrect[k] += ws[t].correct[k];
            if (t) {
                const float *gt = grads + P * t;
                for (size_t i = 0; i < P; i++) grads[i] += gt[i];
            }
        }
        wloss += sl / B;
        wsamples += B;
        /* AdamW, lr: linear warmup then cosine to 0 */
        double lr = step < warm ? o->lr * (double)(step + 1) / warm
                                : o->lr * 0.5 * (1 + cos(M_PI * (double)(step - warm) / (double)(steps - warm + 1)));
        double bc1 = 1 - pow(b1, (double)(step + 1)), bc2 = 1 - pow(b2, (double)(step + 1));
        size_t nb0 = (size_t)(mh->b - mh->params), nb1 = nb0 + (size_t)K * mh->n_layers * medusa_hidden(mh);
        float invB = 1.0f / B;
        for (size_t i = 0; i < P; i++) {
            float g = grads[i] * invB;
            mom[i] = b1 * mom[i] + (1 - b1) * g;
            vel[i] = b2 * vel[i] + (1 - b2) * g * g;
            double upd = (mom[i] / bc1) / (sqrt(vel[i] / bc2) + eps);
            if (i < nb0 || i >= nb1) upd += o->weight_decay * mh->params[i]; /* decay W and output, not biases */
            mh->params[i] -= (float)(lr * upd);
        }
        int64_t done = step + 1;
        if (o->progress && o->progress_every > 0 && (done % o->progress_every == 0 || done == steps)) {
            double now = (clock_now_ms() * 1e-3);
            int64_t wsteps = done % o->progress_every ? done % o->progress_every : o->progress_every;
            medusa_progress p = {.step = done, .steps = steps, .epoch = (int)(done * B / n_tr) + 1};
            p.loss = wloss / wsteps;
            for (int k = 0; k < K; k++) p.acc1[k] = (double)wcorrect[k] / (wsamples ? wsamples : 1);
            p.samples_per_s = wsamples / (now - tw > 1e-9 ? now - tw : 1e-9);
            p.eta_s = (steps - done) * (double)B / (p.samples_per_s > 0 ? p.samples_per_s : 1);
            res->train_loss = p.loss;
            o->progress(o->progress_ctx, &p);
            tw = now, wloss = 0, wsamples = 0;
            memset(wcorrect, 0, sizeof(wcorrect));
        }
    }
    res->steps = step;
    if (wsamples && res->train_loss == 0) res->train_loss = wloss / (double)(wsamples / B);
    res->loss1 = medusa_evaluate(mh, O, E, d, n_tr, d->n, o->head_decay, T, res->head_loss1, mh->acc);
    mh->acc_tokens = (uint64_t)n_held;
    mh->train_loss = (float)res->train_loss;
    mh->heldout_loss = (float)res->loss1;
    res->seconds = (clock_now_ms() * 1e-3) - t0;
    free(mom), free(vel), free(perm), free(ws), free(grads), free(scr);
    for (int t = 0; t < 64; t++) backend_destroy(bes[t]);
    return 0;
}
