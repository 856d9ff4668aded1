/* train_loop.c — data-parallel training steps, progress, checkpoints and
 * held-out evaluation (see train_loop.h). */
#include "engine/train/train_loop.h"
#include "engine/train/train_ckpt.h"
#include "engine/util.h"

#include "kernels/clock.h"
#include "kernels/ggml_type.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS TRAIN_MAX_WORKERS

int train_state_init(train_state *st, const train_model *m) {
    st->mom = calloc(m->n_params, sizeof(float));
    st->vel = calloc(m->n_params, sizeof(float));
    st->step = 0;
    if (!st->mom || !st->vel) {
        train_state_free(st);
        return -1;
    }
    return 0;
}

void train_state_free(train_state *st) {
    free(st->mom), free(st->vel);
    st->mom = st->vel = NULL;
}

void train_opts_init(train_opts *o) {
    memset(o, 0, sizeof(*o));
    train_optim_init(&o->opt);
    o->batch = 16, o->threads = 1, o->seed = 1, o->ce_w = 1.0f;
}

/* ---- a worker: its share of a batch --------------------------------------------------- */

typedef struct {
    const train_model *m;
    train_ctx *c;
    train_work *w;
    int S, T, K;
    int32_t *tokens, *labels, *topk_id; /* (S*T) (S*T) (S*T, K) this step's rows */
    float *topk_logit, *weight;         /* (S*T, K) (S*T) */
    int n;                              /* examples this step */
    float *grad;                        /* (n_params), NULL: forward only */
    float ce_w, kl_w;
    double loss, ce, kl;
    /* evaluation */
    float temp;
    double hit, acc_t, cnt;
} worker;

static int worker_init(worker *wk, const train_model *m, const train_data *d, int S, bool grad) {
    memset(wk, 0, sizeof(*wk));
    size_t R = (size_t)S * d->T, K = (size_t)d->K;
    wk->m = m, wk->S = S, wk->T = d->T, wk->K = d->K;
    wk->c = train_ctx_create(1);
    wk->w = train_work_create(m, S, d->T);
    wk->tokens = malloc(sizeof(int32_t) * R);
    wk->labels = malloc(sizeof(int32_t) * R);
    wk->weight = malloc(sizeof(float) * R);
    if (K) wk->topk_id = malloc(sizeof(int32_t) * R * K), wk->topk_logit = malloc(sizeof(float) * R * K);
    if (grad) wk->grad = malloc(sizeof(float) * m->n_params);
    if (!wk->c || !wk->w || !wk->tokens || !wk->labels || !wk->weight || (K && (!wk->topk_id || !wk->topk_logit)) ||
        (grad && !wk->grad))
        return -1;
    return 0;
}

static void worker_free(worker *wk) {
    train_ctx_destroy(wk->c);
    train_work_destroy(wk->w);
    free(wk->tokens), free(wk->labels), free(wk->weight), free(wk->topk_id), free(wk->topk_logit), free(wk->grad);
}

/* copies example ex of d into the worker's row slot j */
static void worker_load(worker *wk, const train_data *d, int64_t ex, int j) {
    size_t T = (size_t)d->T, K = (size_t)d->K, src = (size_t)ex * T, dst = (size_t)j * T;
    memcpy(wk->tokens + dst, d->tokens + src, sizeof(int32_t) * T);
    memcpy(wk->labels + dst, d->labels + src, sizeof(int32_t) * T);
    if (K) {
        memcpy(wk->topk_id + dst * K, d->topk_id + src * K, sizeof(int32_t) * T * K);
        memcpy(wk->topk_logit + dst * K, d->topk_logit + src * K, sizeof(float) * T * K);
    }
}

static bool has_target(const worker *wk, size_t r) {
    return wk->labels[r] >= 0 || (wk->K > 0 && wk->topk_id[r * wk->K] >= 0);
}

static train_batch worker_batch(const worker *wk) {
    return (train_batch){wk->n, wk->T, wk->K, wk->tokens, wk->labels, wk->K ? wk->topk_id : NULL,
                         wk->K ? wk->topk_logit : NULL, wk->weight, wk->ce_w, wk->kl_w};
}

static void *worker_step(void *arg) {
    worker *wk = arg;
    memset(wk->grad, 0, sizeof(float) * wk->m->n_params);
    wk->loss = wk->ce = wk->kl = 0;
    if (wk->n == 0) return NULL;
    train_batch b = worker_batch(wk);
    wk->loss = train_forward_backward(wk->c, wk->w, wk->m, &b, wk->grad, &wk->ce, &wk->kl);
    return NULL;
}

/* forward only: the held-out counts */
static void *worker_eval(void *arg) {
    worker *wk = arg;
    if (wk->n == 0) return NULL;
    train_batch b = worker_batch(wk);
    const float *z = train_forward(wk->c, wk->w, wk->m, &b);
    int V = wk->m->c.V, K = wk->K;
    float it = 1.0f / wk->temp;
    for (size_t r = 0; r < (size_t)wk->n * wk->T; r++) {
        if (!has_target(wk, r)) continue;
        const float *zr = z + r * V;
        int am = 0;
        for (int v = 1; v < V; v++) am = zr[v] > zr[am] ? v : am;
        float mx = zr[am];
        double s = 0;
        for (int v = 0; v < V; v++) s += exp((double)(zr[v] - mx));
        double lse = mx + log(s);
        bool tk = K > 0 && wk->topk_id[r * K] >= 0;
        int32_t want = tk ? wk->topk_id[r * K] : wk->labels[r];
        wk->hit += am == want;
        wk->cnt += 1;
        if (wk->labels[r] >= 0) wk->ce += lse - zr[wk->labels[r]];
        if (tk) {
            const int32_t *id = wk->topk_id + r * K;
            const float *tz = wk->topk_logit + r * K;
            /* the teacher over its top-k at T = 1 (KL) and at temp (acceptance) */
            double st = 0, s1 = 0, sq = 0;
            for (int k = 0; k < K; k++) s1 += exp((double)(tz[k] - tz[0])), st += exp((double)(tz[k] - tz[0]) * it);
            for (int v = 0; v < V; v++) sq += exp((double)(zr[v] - mx) * it);
            double kl = 0, acc = 0;
            for (int k = 0; k < K; k++) {
                double p1 = exp((double)(tz[k] - tz[0])) / s1, pt = exp((double)(tz[k] - tz[0]) * it) / st;
                double lq = zr[id[k]] - lse, qt = exp((double)(zr[id[k]] - mx) * it) / sq;
                kl += p1 * (log(p1) - lq);
                acc += pt < qt ? pt : qt;
            }
            wk->kl += kl, wk->acc_t += acc;
        }
    }
    return NULL;
}

void train_fan_out(void *ws, size_t size, int n, void *(*fn)(void *)) {
    pthread_t th[TRAIN_MAX_WORKERS];
    bool ok[TRAIN_MAX_WORKERS] = {0};
    char *w = ws;
    for (int t = 1; t < n; t++) ok[t] = pthread_create(&th[t], NULL, fn, w + (size_t)t * size) == 0;
    for (int t = 1; t < n; t++)
        if (!ok[t]) fn(w + (size_t)t * size);
    fn(w);
    for (int t = 1; t < n; t++)
        if (ok[t]) pthread_join(th[t], NULL);
}

static void fan_out(worker *ws, int n, void *(*fn)(void *)) { train_fan_out(ws, sizeof(worker), n, fn); }

/* ---- the training loop ---------------------------------------------------------------- */

void train_epoch_perm(int64_t *perm, int64_t n, uint64_t seed, int64_t e) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)e + 1) * 0xD1B54A32D192ED03ull;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(util_splitmix64(&rs) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
}

int train_run(train_model *m, train_state *st, const train_data *d, int64_t n_train, const train_opts *o,
              train_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    if (n_train < 1 || n_train > d->n) return util_fail(err, errlen, "%lld training examples", (long long)n_train);
    int B = o->batch > 0 ? o->batch : 1, T = o->threads > 0 ? o->threads : 1;
    if (T > B) T = B;
    if (T > MAX_WORKERS) T = MAX_WORKERS;
    int S = (B + T - 1) / T;
    worker *ws = calloc((size_t)T, sizeof(worker));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n_train);
    int rc = ws && perm ? 0 : -1;
    for (int t = 0; t < T && !rc; t++) rc = worker_init(&ws[t], m, d, S, true);
    if (rc) {
        for (int t = 0; ws && t < T; t++) worker_free(&ws[t]);
        free(ws), free(perm);
        return util_fail(err, errlen, "out of memory: %d workers of %d x %d positions", T, S, d->T);
    }
    int64_t cur_epoch = -1, steps = o->opt.steps, step0 = st->step;
    double t0 = clock_now_ms(), tw = t0, wloss = 0, wpos = 0, wflops = 0;
    int64_t wsteps = 0;
    for (; st->step < steps; ) {
        if ((o->stop && *o->stop) || (o->stop_at > 0 && st->step >= o->stop_at)) {
            res->interrupted = true;
            break;
        }
        int64_t step = st->step;
        /* this step's examples, dealt to the workers in order */
        for (int t = 0; t < T; t++) ws[t].n = 0, ws[t].ce_w = o->ce_w, ws[t].kl_w = o->kl_w;
        for (int j = 0; j < B; j++) {
            int64_t i = step * B + j, e = i / n_train;
            if (e != cur_epoch) train_epoch_perm(perm, n_train, o->seed, cur_epoch = e);
            worker *wk = &ws[j * T / B];
            worker_load(wk, d, perm[i % n_train], wk->n++);
        }
        double cnt = 0;
        for (int t = 0; t < T; t++)
            for (size_t r = 0; r < (size_t)ws[t].n * d->T; r++) cnt += has_target(&ws[t], r);
        float inv = cnt > 0 ? (float)(1.0 / cnt) : 0.0f;
        for (int t = 0; t < T; t++)
            for (size_t r = 0; r < (size_t)ws[t].n * d->T; r++) ws[t].weight[r] = has_target(&ws[t], r) ? inv : 0.0f;
        double f0 = 0;
        for (int t = 0; t < T; t++) f0 += ws[t].c->flops;
        fan_out(ws, T, worker_step);
        double loss = 0, f1 = 0;
        for (int t = 0; t < T; t++) {
            loss += ws[t].loss, f1 += ws[t].c->flops;
            if (t) {
                const float *g = ws[t].grad;
                float *g0 = ws[0].grad;
                for (size_t i = 0; i < m->n_params; i++) g0[i] += g[i];
            }
        }
        double gnorm = train_clip(ws[0].grad, m->n_params, o->opt.clip);
        double lr = train_lr(&o->opt, step);
        train_adamw(m, st->mom, st->vel, ws[0].grad, step, lr, &o->opt);
        st->step++;
        if (o->losses) o->losses[step] = loss;
        res->steps++, res->positions += cnt, res->flops += f1 - f0, res->last_loss = loss;
        wloss += loss, wpos += cnt, wflops += f1 - f0, wsteps++;
        if (o->progress && o->progress_every > 0 && (st->step % o->progress_every == 0 || st->step == steps)) {
            double now = clock_now_ms(), dt = (now - tw) / 1e3 > 1e-9 ? (now - tw) / 1e3 : 1e-9;
            double sps = wsteps / dt;
            train_progress p = {st->step, steps, wloss / wsteps, lr, gnorm, wpos / dt, wflops / dt,
                                sps > 0 ? (steps - st->step) / sps : 0};
            o->progress(o->progress_ctx, &p);
            tw = now, wloss = wpos = wflops = 0, wsteps = 0;
        }
        if (o->ckpt_path && o->ckpt_every > 0 && st->step % o->ckpt_every == 0 && st->step < steps &&
            train_ckpt_save(o->ckpt_path, m, st, o->seed, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (!rc && o->ckpt_path && st->step > step0 && train_ckpt_save(o->ckpt_path, m, st, o->seed, err, errlen) != 0)
        rc = -1;
    res->seconds = (clock_now_ms() - t0) / 1e3;
    for (int t = 0; t < T; t++) worker_free(&ws[t]);
    free(ws), free(perm);
    return rc;
}

int train_evaluate(const train_model *m, const train_data *d, int64_t from, int64_t to, int threads, float temp,
                   train_eval *ev) {
    memset(ev, 0, sizeof(*ev));
    int T = threads > 0 ? threads : 1, S = 8;
    if (T > MAX_WORKERS) T = MAX_WORKERS;
    worker *ws = calloc((size_t)T, sizeof(worker));
    int rc = ws ? 0 : -1;
    for (int t = 0; t < T && !rc; t++) rc = worker_init(&ws[t], m, d, S, false), ws[t].temp = temp > 0 ? temp : 1.0f;
    for (int64_t i = from; i < to && !rc;) {
        for (int t = 0; t < T; t++) {
            ws[t].n = 0;
            for (int j = 0; j < S && i < to; j++, i++) worker_load(&ws[t], d, i, ws[t].n++);
        }
        fan_out(ws, T, worker_eval);
    }
    double hit = 0, acc = 0, cnt = 0, ce = 0, kl = 0;
    for (int t = 0; ws && t < T; t++) {
        hit += ws[t].hit, acc += ws[t].acc_t, cnt += ws[t].cnt, ce += ws[t].ce, kl += ws[t].kl;
        worker_free(&ws[t]);
    }
    free(ws);
    if (rc) return -1;
    ev->positions = (int64_t)cnt;
    if (cnt > 0) ev->acc_greedy = hit / cnt, ev->acc_temp = acc / cnt, ev->ce = ce / cnt, ev->kl = kl / cnt;
    return 0;
}

double train_matmul_peak(int threads, int M, int K, int N, double ms) {
    backend *be = backend_cpu_create(threads > 0 ? threads : 1);
    float *x = malloc(sizeof(float) * (size_t)M * K), *w = malloc(sizeof(float) * (size_t)N * K),
          *y = malloc(sizeof(float) * (size_t)M * N);
    double best = 0;
    if (x && w && y) {
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)(i % 7) * 0.1f;
        for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (float)(i % 5) * 0.1f;
        double start = clock_now_ms();
        for (int r = 0; r < 50 && (r < 3 || clock_now_ms() - start < ms); r++) {
            double a = clock_now_ms();
            be->i->matmul(be, y, x, w, GGML_TYPE_F32, M, K, N);
            double dt = (clock_now_ms() - a) / 1e3;
            double f = 2.0 * M * K * N / (dt > 1e-9 ? dt : 1e-9);
            best = f > best ? f : best;
        }
    }
    free(x), free(w), free(y);
    backend_destroy(be);
    return best;
}
