/* learner.c — the background trainer of learning from traffic (see
 * learner.h): rounds of snapshot → train → held-out comparison → offer. */
#include "engine/train/learner.h"
#include "engine/learn/ring.h"
#include "engine/train/eagle_train.h"
#include "engine/util.h"

#include "kernels/backend.h"
#include "kernels/clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

struct learner {
    learner_config c;
    pthread_t th;
    bool started;
    volatile sig_atomic_t stop;
    eagle_head *live;            /* the live head's parameters (NULL: none, or one it cannot train) */
    eagle_head *trainee;         /* what it trains, round after round (a copy of the live head, or a new one) */
    eagle_optim_state ost;       /* the trainee's AdamW moments and steps, kept from round to round */
    bool live_foreign;           /* a head is live that cannot be fine-tuned: stay idle */
    int version;                 /* files written (head-v<N>.gguf: the highest N in dir at start, then + 1 each) */
    int seen_version;            /* the engine's head version the trainer last knew of (a rollback or another
                                  * offer moves it: the trainer then starts again from what is live) */
    double last_spill;
    engine_learn_stats rep;      /* what it reports (engine_learn_report) */
    /* the round in progress: the duty cycle */
    double share, t_mark, busy_ms, wall0;
    int threads;
};

/* The trainee becomes h (NULL: none), with fresh optimizer state. Returns
 * -1 when out of memory (no trainee then). */
static int trainee_set(learner *l, eagle_head *h) {
    eagle_head_destroy(l->trainee);
    free(l->ost.mom), free(l->ost.vel);
    memset(&l->ost, 0, sizeof(l->ost));
    l->trainee = h;
    if (!h) return 0;
    l->ost.mom = calloc(h->n_params, sizeof(float));
    l->ost.vel = calloc(h->n_params, sizeof(float));
    if (l->ost.mom && l->ost.vel) return 0;
    trainee_set(l, NULL);
    return -1;
}

void learner_config_init(learner_config *c) {
    memset(c, 0, sizeof(*c));
    c->share = 0.1, c->margin = 0.05, c->min_positions = 4096, c->steps = 50;
    c->window = 128, c->J = 3, c->batch = 4, c->holdout = 0.1f, c->seed = 1;
}

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* The settings in force: the policy's hot keys, else the config's. */
static void settings(learner *l, double *share, double *margin, int *min_pos, int *steps) {
    *share = l->c.share, *margin = l->c.margin, *min_pos = l->c.min_positions, *steps = l->c.steps;
    if (!l->c.policy) return;
    const pol_config *pc = pol_store_acquire(l->c.policy);
    *share = pc->speculation.learn_share, *margin = pc->speculation.learn_margin;
    *min_pos = pc->speculation.learn_min_positions, *steps = pc->speculation.learn_steps;
    pol_store_release(l->c.policy, pc);
}

static void report(learner *l, const char *state, bool rejected, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void report(learner *l, const char *state, bool rejected, const char *fmt, ...) {
    snprintf(l->rep.state, sizeof(l->rep.state), "%s", state);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->rep.message, sizeof(l->rep.message), fmt, ap);
    va_end(ap);
    engine_learn_report(l->c.e, &l->rep, rejected);
}

/* After every optimizer step (eagle_train's progress hook): while requests
 * run, sleep so that the busy time stays within the share; with none, train
 * on (the cores are idle); while requests wait for admission, or learning is
 * paused, do not train at all. */
static void yield_step(void *ctx, const eagle_progress *p) {
    (void)p;
    learner *l = ctx;
    double now = clock_now_ms(), busy = now - l->t_mark;
    l->busy_ms += busy;
    double duty = l->share / l->threads;
    backend_cpu_lend(0); /* the decode threads have every core while the trainer sleeps or waits */
    engine_stats es;
    engine_get_stats(l->c.e, &es);
    if (duty < 1 && es.running + es.prefilling > 0) sleep_ms(busy * (1 / duty - 1));
    if (now - l->last_spill > 5000) engine_learn_spill(l->c.e), l->last_spill = now; /* a long round spills too */
    for (int i = 0; !l->stop && i < 1000; i++) { /* at most 10 s per step, then it trains a step again */
        engine_learn_stats ls;
        engine_get_stats(l->c.e, &es);
        engine_get_learn_stats(l->c.e, &ls);
        if (es.waiting == 0 && !ls.paused) break;
        sleep_ms(10);
    }
    backend_cpu_lend(l->threads);
    l->t_mark = clock_now_ms();
}

/* The ring as training data: each sample cut into windows of up to W tokens
 * (consecutive windows share one token, so every position is a row once). */
static eagle_data *ring_data(learner *l, int D, int W) {
    learn_sample **S = NULL;
    int n = engine_learn_snapshot(l->c.e, &S);
    if (n <= 0) {
        free(S);
        return NULL;
    }
    int64_t nw = 0;
    for (int i = 0; i < n; i++) nw += (S[i]->n - 2) / (W - 1) + 1;
    eagle_data *d = eagle_data_create(D, 1, W, nw);
    for (int i = 0; d && i < n; i++) {
        const learn_sample *s = S[i];
        for (int a = 0; a + 1 < s->n; a += W - 1) {
            int m = s->n - a < W ? s->n - a : W;
            eagle_data_add_f16(d, s->tok + a, m, s->feat + (size_t)a * (size_t)s->width);
        }
    }
    engine_learn_release(S, n);
    free(S);
    return d;
}

/* Writes h as head-v<N>.gguf through a temporary file; path out. */
static int write_head(learner *l, const eagle_head *h, char *path, size_t n, char *err, size_t errlen) {
    char tmp[1200];
    snprintf(path, n, "%s/head-v%d.gguf", l->c.dir, l->version + 1);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    char desc[128];
    snprintf(desc, sizeof(desc), "learned from traffic by specd serve --learn, round %d", l->rep.rounds);
    if (eagle_head_save(h, engine_learn_target(l->c.e), tmp, GGML_TYPE_F16, desc, err, errlen) != 0) {
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return util_fail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    l->version++;
    return 0;
}

int learner_round(learner *l, char *msg, size_t n) {
    engine *e = l->c.e;
    double share, margin;
    int min_pos, steps;
    settings(l, &share, &margin, &min_pos, &steps);
    engine_learn_stats ls;
    engine_get_learn_stats(e, &ls);
    if (!ls.enabled) return snprintf(msg, n, "learning is off"), 0;
    engine_learn_spill(e), l->last_spill = clock_now_ms(); /* whatever happens next, what was served is on disk */
    if (ls.head_version != l->seen_version) { /* a rollback, or a head offered by someone else: start from it */
        char why[128] = "";
        eagle_head_destroy(l->live), trainee_set(l, NULL);
        l->live = NULL;
        l->live_foreign = false;
        if (ls.has_head && !(l->live = eagle_head_load(engine_learn_target(e), ls.head_path, why, sizeof(why)))) {
            l->live_foreign = true;
            report(l, "idle", false, "the live head cannot be fine-tuned, learning is idle: %s", why);
        }
        l->seen_version = ls.head_version;
    }
    if (l->live_foreign) return snprintf(msg, n, "%s", l->rep.message), 0;
    if (ls.paused) {
        report(l, "paused", false, "paused");
        return snprintf(msg, n, "paused"), 0;
    }
    if (ls.ring_positions < min_pos) {
        report(l, "waiting", false, "waiting for traffic: %lld of %d positions in the ring",
               (long long)ls.ring_positions, min_pos);
        return snprintf(msg, n, "%s", l->rep.message), 0;
    }
    struct model *target = engine_learn_target(e);
    int layers[3];
    engine_learn_layers(e, layers);
    char err[256] = "";
    if (!l->trainee) { /* training starts from the live head (or from nothing) and goes on round after round */
        eagle_head *h = l->live ? eagle_head_clone(l->live)
                                : eagle_head_create(target, layers, 0, true, l->c.seed, err, sizeof(err));
        if (h && trainee_set(l, h) != 0) snprintf(err, sizeof(err), "out of memory");
    }
    eagle_head *cand = l->trainee;
    int D = cand ? cand->D : 0;
    eagle_data *d = cand ? ring_data(l, D, l->c.window) : NULL;
    if (!cand || !d || d->n < 4) {
        eagle_data_destroy(d);
        report(l, "waiting", false, "%s", !cand ? err : "too few sequences in the ring to hold some out");
        return snprintf(msg, n, "%s", l->rep.message), cand ? 0 : -1;
    }
    int cpus = l->c.cpus > 0 ? l->c.cpus : (int)sysconf(_SC_NPROCESSORS_ONLN);
    l->threads = (int)lround(share * cpus);
    if (l->threads < 1) l->threads = 1;
    if (l->threads > cpus) l->threads = cpus;
    l->share = share * cpus;
    eagle_train_opts o;
    eagle_train_opts_init(&o);
    /* the newest tenth held out, but no more than LEARNER_EVAL_MAX windows: the held-out figures are
     * measured twice a round (trainee, live head) between the duty cycle's sleeps, so their cost is kept
     * small next to the steps' */
    double hold = l->c.holdout;
    if (hold * (double)d->n > LEARNER_EVAL_MAX) hold = LEARNER_EVAL_MAX / (double)d->n;
    o.J = l->c.J, o.batch = l->c.batch, o.steps = steps, o.holdout = (float)hold, o.threads = l->threads;
    o.state = &l->ost, o.skip_before = true;
    o.seed = l->c.seed + (uint64_t)l->rep.rounds;
    o.opt.lr = l->c.lr > 0 ? l->c.lr : l->live ? 3e-4f : 1e-3f;
    o.progress_every = 1, o.progress = yield_step, o.progress_ctx = l, o.stop = &l->stop;
    report(l, "training", false, "round %d: %lld windows, %lld steps", l->rep.rounds + 1, (long long)d->n,
           (long long)steps);
    eagle_train_result res;
    l->busy_ms = 0, l->t_mark = l->wall0 = clock_now_ms();
    backend_cpu_lend(l->threads); /* while a step computes, the decode pool leaves the trainer its cores */
    int rc = eagle_train(cand, d, &o, &res, err, sizeof(err));
    double wall = clock_now_ms() - l->wall0;
    if (rc == 0 && l->c.worse) { /* tests: a candidate that must lose */
        eagle_view v;
        eagle_head_view(cand, cand->params, &v, false);
        size_t fc = (size_t)cand->D * 3 * (size_t)cand->D;
        for (size_t i = 0; i < fc; i++) v.fc[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        rc = eagle_evaluate(cand, d, res.n_train, d->n, o.J, o.step_decay, o.threads, &res.after);
    }
    l->rep.rounds++;
    l->rep.train_positions += (int64_t)res.positions;
    l->rep.train_pos_per_s = wall > 0 ? res.positions / (wall / 1000) : 0;
    l->rep.train_cpu_share = wall > 0 ? l->busy_ms * l->threads / wall / cpus : 0;
    /* the live head on the same held-out rows (the trainee started from it, or from nothing: 0) */
    eagle_eval live_ev = {0};
    if (rc == 0 && l->live) rc = eagle_evaluate(l->live, d, res.n_train, d->n, o.J, o.step_decay, o.threads, &live_ev);
    double live_acc = l->live ? live_ev.accept_len : 0.0;
    yield_step(l, NULL); /* the scoring since the last step (the trainee's and the live head's) keeps the share too */
    backend_cpu_lend(0);
    wall = clock_now_ms() - l->wall0;
    l->rep.train_pos_per_s = wall > 0 ? res.positions / (wall / 1000) : 0;
    l->rep.train_cpu_share = wall > 0 ? l->busy_ms * l->threads / wall / cpus : 0;
    l->rep.live_accept = live_acc, l->rep.cand_accept = res.after.accept_len, l->rep.eval_rows = res.after.rows;
    eagle_data_destroy(d);
    if (rc != 0 || l->stop) {
        report(l, "idle", false, "round %d %s%s", l->rep.rounds, rc ? "failed: " : "stopped", rc ? err : "");
        return snprintf(msg, n, "%s", l->rep.message), rc ? -1 : 0;
    }
    if (!(res.after.accept_len > live_acc + margin)) { /* it must beat the live head by more than the margin */
        /* not ahead by the margin: not offered; a trainee behind the live head by the margin is dropped (the
         * next round starts again from the live head), else it trains on */
        bool drop = l->live && res.after.accept_len < live_acc - margin;
        if (drop) trainee_set(l, NULL);
        report(l, "idle", true, "round %d: candidate %s: %.3f accepted drafts per pass against the live head's %.3f "
               "on %lld held-out rows (margin %.2f)", l->rep.rounds, drop ? "dropped, behind" : "not ahead, trains on",
               res.after.accept_len, live_acc, (long long)res.after.rows, margin);
        return snprintf(msg, n, "%s", l->rep.message), 0;
    }
    char path[1100];
    eagle_head *copy = eagle_head_clone(cand);
    if (!copy) rc = util_fail(err, sizeof(err), "out of memory");
    if (rc != 0 || write_head(l, cand, path, sizeof(path), err, sizeof(err)) != 0 ||
        engine_learn_offer(e, path, err, sizeof(err)) != 0) {
        eagle_head_destroy(copy);
        report(l, "idle", true, "round %d: candidate dropped: %s", l->rep.rounds, err);
        return snprintf(msg, n, "%s", l->rep.message), -1;
    }
    eagle_head_destroy(l->live);
    l->live = copy; /* the trainee trains on from it */
    for (int i = 0; i < 500; i++) { /* the engine swaps it in at its next step boundary */
        engine_get_learn_stats(e, &ls);
        if (ls.head_version != l->seen_version) break;
        sleep_ms(10);
    }
    l->seen_version = ls.head_version;
    report(l, "idle", false, "round %d: swapped in %s: %.3f accepted drafts per pass against %.3f on %lld held-out "
           "rows", l->rep.rounds, path, res.after.accept_len, live_acc, (long long)res.after.rows);
    return snprintf(msg, n, "%s", l->rep.message), 1;
}

static void *learner_main(void *arg) {
    learner *l = arg;
    /* The server's own priority: at nice 19 it got about 4 % of a core under a steady load of two streams on two
     * cores and finished no round in 13 minutes; its share is kept by the sleeps in yield_step instead. */
    while (!l->stop) {
        char msg[256];
        int rc = learner_round(l, msg, sizeof(msg));
        for (int i = 0; i < (rc == 1 ? 10 : 100) && !l->stop; i++) sleep_ms(10); /* 0.1 s after a swap, else 1 s */
    }
    engine_learn_spill(l->c.e);
    return NULL;
}

learner *learner_start(const learner_config *c, bool manual, char *err, size_t errlen) {
    learner *l = calloc(1, sizeof(*l));
    if (!l) return util_fail(err, errlen, "out of memory"), NULL;
    l->c = *c;
    DIR *dir = opendir(c->dir); /* heads of earlier runs stay: numbering goes on after the highest */
    for (struct dirent *de; dir && (de = readdir(dir));) {
        int v;
        char tail[8];
        if (sscanf(de->d_name, "head-v%d.gguf%7s", &v, tail) == 1 && v > l->version) l->version = v;
    }
    if (dir) closedir(dir);
    engine_learn_stats ls;
    engine_get_learn_stats(c->e, &ls);
    l->seen_version = ls.head_version;
    if (ls.has_head) { /* fine-tune the head the server started with (or a learned one after a restart) */
        char why[128];
        if (!ls.head_path[0] || !(l->live = eagle_head_load(engine_learn_target(c->e), ls.head_path, why, sizeof(why)))) {
            l->live_foreign = true;
            snprintf(l->rep.message, sizeof(l->rep.message), "the live head cannot be fine-tuned, learning is idle: %s",
                     ls.head_path[0] ? why : "its file is unknown");
            snprintf(l->rep.state, sizeof(l->rep.state), "idle");
            engine_learn_report(c->e, &l->rep, false);
        }
    }
    if (manual) return l;
    int rc = pthread_create(&l->th, NULL, learner_main, l);
    if (rc != 0) {
        eagle_head_destroy(l->live);
        free(l);
        return util_fail(err, errlen, "cannot start the learning thread: %s", strerror(rc)), NULL;
    }
    l->started = true;
    return l;
}

void learner_stop(learner *l) {
    if (!l) return;
    l->stop = 1;
    if (l->started) pthread_join(l->th, NULL);
    eagle_head_destroy(l->live);
    trainee_set(l, NULL);
    free(l);
}
