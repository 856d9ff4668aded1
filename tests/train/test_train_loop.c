/* test_train_loop.c — the training loop end to end on a tiny corpus (the
 * shared TinyStories excerpt, stories260K's tokenizer): with a fixed seed a
 * few hundred steps lower the loss by a set margin; a run stopped at a
 * checkpoint and resumed from it repeats the uninterrupted run's losses bit
 * for bit; two data-parallel workers follow one worker's losses; the model
 * written as GGUF loads in specd and its forward pass gives the trainer's
 * logits; a corrupt checkpoint is refused; distillation data keeps the
 * target's own top-k (equal to a fresh pass) and greedy tokens. */
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/train_ckpt.h"
#include "engine/train/train_distill.h"
#include "engine/train/train_gguf.h"
#include "engine/train/train_loop.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 300
#define MARGIN 2.0 /* nats the loss must drop from its start (ln 512 = 6.24) */

static int fails;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); fails++; } } while (0)

static volatile sig_atomic_t stop_now;
static int64_t stop_at;
static void on_progress(void *ctx, const train_progress *p) {
    (void)ctx;
    if (p->step == stop_at) stop_now = 1;
}

static train_cfg tiny(void) {
    return (train_cfg){.V = 512, .D = 48, .L = 2, .H = 4, .Hkv = 2, .E = 12, .F = 96, .ctx = 64, .eps = 1e-5f,
                       .rope_base = 10000.0f, .tied = false};
}

static void opts(train_opts *o, double *losses, int threads) {
    train_opts_init(o);
    o->opt.steps = STEPS, o->opt.warmup = 20, o->opt.lr = 3e-3f;
    o->batch = 8, o->threads = threads, o->seed = 7, o->losses = losses;
}

int main(void) {
    const char *dir = getenv("SPECD_MODELS");
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir ? dir : "../shared/models");
    gguf_file *gf = gguf_open(path, NULL, err, sizeof err);
    if (!gf) {
        printf("skip: %s\n", err);
        return 77;
    }
    tokenizer *tk = tok_create(gf, err, sizeof err);
    snprintf(path, sizeof path, "%s/corpora/tinystories_valid_30K.txt", dir ? dir : "../shared/models");
    FILE *f = fopen(path, "rb");
    if (!tk || !f) {
        printf("skip: no tokenizer or corpus\n");
        return 77;
    }
    static char text[24000];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    static int32_t toks[16000];
    int nt = tok_encode(tk, text, n, true, false, toks, 16000);
    CHECK(nt > 2000, "corpus tokens %d", nt);
    train_data *d = train_data_create(32, 0, 1000);
    train_data_add_text(d, toks, nt);
    printf("corpus: %d tokens, %lld examples of 32\n", nt, (long long)d->n);

    /* the uninterrupted run */
    train_cfg cfg = tiny();
    train_model *m = train_model_create(&cfg, 1, err, sizeof err);
    train_state st;
    train_state_init(&st, m);
    static double la[STEPS], lb[STEPS], lc[STEPS];
    train_opts o;
    opts(&o, la, 1);
    train_result r;
    CHECK(train_run(m, &st, d, d->n - 8, &o, &r, err, sizeof err) == 0, "%s", err);
    double first = la[0], last = 0;
    for (int i = STEPS - 20; i < STEPS; i++) last += la[i] / 20;
    printf("loss %.3f -> %.3f over %d steps (%.1f s, %.0f positions/s)\n", first, last, STEPS, r.seconds,
           r.positions / r.seconds);
    CHECK(first - last > MARGIN, "loss fell by %.3f, want > %.1f", first - last, MARGIN);
    train_eval ev;
    train_evaluate(m, d, d->n - 8, d->n, 1, 1.0f, &ev);
    printf("held-out CE %.3f, top-1 %.3f over %lld positions\n", ev.ce, ev.acc_greedy, (long long)ev.positions);
    CHECK(ev.ce < first - 1.0, "held-out CE %.3f", ev.ce);

    /* stopped at step 150 (checkpoint written on the stop), then resumed */
    char ck[256];
    snprintf(ck, sizeof ck, "/tmp/specd-train-test-%d.ckpt", (int)getpid());
    train_model *m2 = train_model_create(&cfg, 1, err, sizeof err);
    train_state st2;
    train_state_init(&st2, m2);
    opts(&o, lb, 1);
    o.ckpt_path = ck, o.stop = &stop_now, o.progress = on_progress, o.progress_every = 1;
    stop_at = 150;
    CHECK(train_run(m2, &st2, d, d->n - 8, &o, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.interrupted && st2.step == 150, "stopped at %lld", (long long)st2.step);
    train_model_destroy(m2);
    train_state_free(&st2);
    uint64_t seed = 0;
    CHECK(train_ckpt_load(ck, &m2, &st2, &seed, err, sizeof err) == 0, "%s", err);
    stop_now = 0;
    opts(&o, lb, 1);
    o.seed = seed;
    CHECK(train_run(m2, &st2, d, d->n - 8, &o, &r, err, sizeof err) == 0, "%s", err);
    int same = 0;
    for (int i = 0; i < STEPS; i++) same += la[i] == lb[i];
    printf("resume from step 150: %d of %d losses identical\n", same, STEPS);
    CHECK(same == STEPS, "resumed losses differ");
    CHECK(memcmp(m->params, m2->params, sizeof(float) * m->n_params) == 0, "resumed parameters differ");

    /* a corrupt checkpoint is refused */
    FILE *cf = fopen(ck, "r+b");
    if (cf) {
        fseek(cf, 200, SEEK_SET);
        fputc(0x5a ^ fgetc(cf), cf);
        fclose(cf);
    }
    train_model *m3 = NULL;
    train_state st3;
    CHECK(train_ckpt_load(ck, &m3, &st3, NULL, err, sizeof err) != 0, "corrupt checkpoint accepted");
    printf("corrupt checkpoint: %s\n", err);
    unlink(ck);

    /* two data-parallel workers: the same steps up to float summation order */
    train_model *m4 = train_model_create(&cfg, 1, err, sizeof err);
    train_state st4;
    train_state_init(&st4, m4);
    opts(&o, lc, 2);
    o.stop = &stop_now, o.progress = on_progress, o.progress_every = 1; /* the same schedule, stopped at 30 */
    stop_now = 0, stop_at = 30;
    CHECK(train_run(m4, &st4, d, d->n - 8, &o, &r, err, sizeof err) == 0, "%s", err);
    double dmax = 0;
    for (int i = 0; i < 30; i++) dmax = fabs(lc[i] - la[i]) > dmax ? fabs(lc[i] - la[i]) : dmax;
    printf("2 workers vs 1: max loss difference over 30 steps %.2e\n", dmax);
    CHECK(dmax < 1e-3, "2 workers diverge from 1 (%.3e)", dmax);

    /* the GGUF loads in specd and computes the trainer's logits */
    char gp[256];
    snprintf(gp, sizeof gp, "/tmp/specd-train-test-%d.gguf", (int)getpid());
    CHECK(train_gguf_save(m, gp, gf, GGML_TYPE_F32, "test", NULL, err, sizeof err) == 0, "%s", err);
    backend *be = backend_cpu_create(1);
    model *sm = model_load(gp, be, NULL, NULL, err, sizeof err);
    CHECK(sm != NULL, "%s", err);
    if (sm) {
        gguf_file *g2 = gguf_open(gp, NULL, err, sizeof err);
        tokenizer *tk2 = g2 ? tok_create(g2, err, sizeof err) : NULL;
        CHECK(tk2 && tok_hash(tk2) == tok_hash(tk), "tokenizer hash differs");
        tok_destroy(tk2);
        gguf_close(g2);
        kv_pool *pool = model_kv_pool(sm, 16, 8, NULL, err, sizeof err);
        kv_seq *kv = kv_seq_create(pool, 32);
        static float zl[32 * 512];
        model_seq ms = {.kv = kv, .n = 32, .tokens = d->tokens, .all_logits = true};
        CHECK(model_forward(sm, pool, &ms, 1, zl, err, sizeof err) == 0, "%s", err);
        train_ctx *c = train_ctx_create(1);
        train_work *w = train_work_create(m, 1, 32);
        float wt[32] = {0};
        train_batch b = {1, 32, 0, d->tokens, d->labels, NULL, NULL, wt, 1, 0};
        const float *zt = train_forward(c, w, m, &b);
        double e = 0, mx = 0;
        for (int i = 0; i < 32 * 512; i++) e = fmax(e, fabs(zt[i] - zl[i])), mx = fmax(mx, fabs(zl[i]));
        printf("specd forward vs trainer forward: max |diff| %.2e (max |logit| %.2f)\n", e, mx);
        CHECK(e < 1e-3 * (1 + mx), "logits differ");
        train_work_destroy(w);
        train_ctx_destroy(c);
        kv_seq_destroy(pool, kv);
        kv_pool_destroy(pool);
        model_free(sm);
    }
    /* distillation data: the top-k kept from the generating passes equal a
     * fresh forward pass's over the finished sequence, and at temperature 0
     * each next token is the target's argmax */
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir ? dir : "../shared/models");
    model_params mpp = {.max_batch = 64, .max_ctx = 64};
    model *tm = model_load(path, be, &mpp, NULL, err, sizeof err);
    CHECK(tm != NULL, "%s", err);
    if (tm) {
        train_data *dd = train_data_create(40, 8, 8);
        int32_t p0[] = {1, 403}, p1[] = {1}, p2[] = {1, 403, 407, 261};
        const int32_t *pr[] = {p0, p1, p2};
        int pl[] = {2, 1, 4}, wm[] = {0, 5, 0};
        uint64_t grs = 9;
        int64_t got = train_distill_add(dd, tm, tk, pr, pl, wm, 3, 30, 0.0f, 1.0f, 2, &grs, err, sizeof err);
        CHECK(got == 3, "distill examples %lld: %s", (long long)got, err);
        kv_pool *pool = model_kv_pool(tm, 16, 8, NULL, err, sizeof err);
        kv_seq *kv = kv_seq_create(pool, 64);
        static float zl[64 * 512];
        double worst = 0;
        int argmax_ok = 1, n_pos = 0;
        for (int64_t e = 0; e < dd->n; e++) {
            int nv = 0;
            while (nv < 40 && dd->labels[e * 40 + nv] >= 0) nv++;
            kv_seq_truncate(pool, kv, 0);
            model_seq ms = {.kv = kv, .n = nv, .tokens = dd->tokens + e * 40, .all_logits = true};
            CHECK(model_forward(tm, pool, &ms, 1, zl, err, sizeof err) == 0, "%s", err);
            for (int t = 0; t < nv; t++, n_pos++) {
                int32_t ids[8];
                float vals[8];
                train_topk(ids, vals, zl + (size_t)t * 512, 512, 8);
                const int32_t *kid = dd->topk_id + ((size_t)e * 40 + t) * 8;
                const float *kz = dd->topk_logit + ((size_t)e * 40 + t) * 8;
                for (int k = 0; k < 8; k++) worst = fmax(worst, fabs(kz[k] - vals[k]) + (kid[k] != ids[k]));
                int warm_end = e == 1 ? 6 : pl[e]; /* written prompt tokens are sampled at T = 1 */
                if (t + 1 >= warm_end && dd->labels[e * 40 + t] != ids[0]) argmax_ok = 0;
            }
        }
        printf("distillation data: %d positions, max top-k difference from a fresh pass %.2e\n", n_pos, worst);
        CHECK(worst < 1e-3, "top-k from the generating passes differ from a fresh pass");
        CHECK(argmax_ok, "a temperature-0 continuation token is not the target's argmax");
        kv_seq_destroy(pool, kv);
        kv_pool_destroy(pool);
        train_data_destroy(dd);
        model_free(tm);
    }
    backend_destroy(be);
    unlink(gp);
    train_model_destroy(m), train_model_destroy(m2), train_model_destroy(m4);
    train_state_free(&st), train_state_free(&st2), train_state_free(&st4);
    train_data_destroy(d);
    tok_destroy(tk);
    gguf_close(gf);
    printf("%s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
