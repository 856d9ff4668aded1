/* cmd_train_eagle.c — `specd train-eagle`: an EAGLE-3 draft head for a
 * target, trained on the CPU (engine/train/eagle_train.h): prompts from a
 * corpus and/or written by the target → the target's continuations, with its
 * residual stream at three layers and its top-k from the same generating
 * passes → the head trained with the training-time test, AdamW, warm-up and
 * cosine → a GGUF side file that serve/generate/bench/verify load with
 * --eagle. Ctrl-C stops generation or training where it is and still writes
 * a measured head. */
#include "cli/cmd.h"
#include "cli/train_prompts.h"
#include "cli/util.h"
#include "engine/train/eagle_train.h"
#include "engine/util.h"

#include "kernels/ggml_type.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd train-eagle -m TARGET.gguf -o HEAD.gguf [--corpus FILE ...] [options]\n"
            "  an EAGLE-3 draft head (one decoder layer over the target's features) trained on the\n"
            "  target's own continuations of prompts; load it with --eagle HEAD.gguf\n"
            "data:\n"
            "  --corpus FILE      prompts: the starts of its sentences (up to 16 files)\n"
            "  --prompts N        most corpus prompts (4000)\n"
            "  --target-prompts N prompts the target writes itself from BOS (default: 0 with a corpus, else 1000)\n"
            "  --prompt-len N     longest prompt, and a target prompt's length (32)\n"
            "  --prompt-temp T    temperature of target-written prompts (1.0)\n"
            "  --gen-len N        tokens the target continues each prompt by (160)\n"
            "  --gen-temp T[,T..] temperature of the continuations (0: greedy, what greedy verification accepts;\n"
            "                     a list such as 0,0.8 takes turns per chunk of prompts, for sampled traffic too)\n"
            "  --gen-batch B      continuations generated in lockstep (64)\n"
            "  --topk K           the target's top-k kept per position for the KL loss (32)\n"
            "head:\n"
            "  --layers A,B,C     target layers whose inputs are tapped (default 2, L/2, L-3 of L, as the reference)\n"
            "  --ff F             the head's feed-forward width (default: the target's)\n"
            "  --shared-output    use the target's output head, frozen, instead of training its own (the file\n"
            "                     leaves it out and the loader lends the target's: far smaller for a large vocabulary)\n"
            "  --type T           f16 or f32 matrices in the file (default: f16 for a 16-bit target, else f32)\n"
            "training:\n"
            "  --ttt J            training-time-test steps: the head drafts J tokens from its own features (4)\n"
            "  --step-decay W     step j's loss weight W^j (0.8)\n"
            "  --epochs E (1)     --steps N (default: epochs)   --batch B sequences per step (4)\n"
            "  --lr LR (0.001)    --warmup F share of steps (0.05)   --holdout F share of sequences (0.05)\n"
            "  --kl-weight W (1)  --ce-weight W (0.1): KL to the target's top-k, cross-entropy to its token\n"
            "  -t THREADS         threads for the target and the trainer's workers (1)\n"
            "  --seed S (1)       --quiet\n");
}

typedef struct {
    bool quiet, tty;
} prog_ctx;

static void progress(void *ctx, const eagle_progress *p) {
    prog_ctx *c = ctx;
    if (c->quiet) return;
    int w = 24, f = (int)(w * p->step / (p->steps ? p->steps : 1));
    char bar[32];
    for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
    bar[w] = 0;
    fprintf(stderr, "%s[%s] step %lld/%lld loss %.3f acc", c->tty ? "\r" : "", bar, (long long)p->step,
            (long long)p->steps, p->loss);
    for (int j = 0; j < p->J; j++) fprintf(stderr, "%s%.2f", j ? "/" : " ", p->acc[j]);
    int eta = (int)(p->eta_s + 0.5);
    fprintf(stderr, " %.0f positions/s ETA %dm%02ds%s", p->pos_per_s, eta / 60, eta % 60, c->tty ? "   " : "\n");
    fflush(stderr);
}

static void print_eval(const char *what, const eagle_eval *e, int J) {
    printf("%s: top-1 by step", what);
    for (int j = 0; j < J; j++) printf(" %.3f", e->acc[j]);
    printf("; greedy chain of %d accepts %.3f drafts per pass; loss %.4f (%lld positions)\n", J, e->accept_len,
           e->loss, (long long)e->rows);
}

int cmd_train_eagle(int argc, char **argv) {
    const char *target = NULL, *out = NULL;
    int threads = 1, ff = 0, wtype = -1, layers[EAGLE_PARTS] = {-1, -1, -1};
    bool quiet = false, shared = false;
    train_data_args da = {.max_prompts = 4000, .tprompts = -1, .plen = 32, .gen = 160, .gbatch = 64, .topk = 32,
                          .gen_temp = 0.0f, .prompt_temp = 1.0f};
    eagle_train_opts o;
    eagle_train_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int dr = train_data_arg("train-eagle", argc, argv, &i, &da);
        if (dr < 0) return 2;
        if (dr > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) target = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--layers")) {
            const char *v = arg_str(argc, argv, &i);
            if (sscanf(v, "%d,%d,%d", &layers[0], &layers[1], &layers[2]) != 3) {
                fprintf(stderr, "specd train-eagle: --layers takes three layer numbers A,B,C (got '%s')\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--ff")) ff = (int)arg_long(argc, argv, &i, 1, 1 << 20);
        else if (!strcmp(a, "--shared-output")) shared = true;
        else if (!strcmp(a, "--type")) {
            const char *tn = arg_str(argc, argv, &i);
            wtype = ggml_type_from_name(tn);
            if (wtype != GGML_TYPE_F32 && wtype != GGML_TYPE_F16) {
                fprintf(stderr, "specd train-eagle: --type must be f32 or f16 (got '%s')\n", tn);
                return 2;
            }
        } else if (!strcmp(a, "--ttt")) o.J = (int)arg_long(argc, argv, &i, 1, TRAIN_MAX_STEPS);
        else if (!strcmp(a, "--step-decay")) o.step_decay = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--epochs")) o.epochs = (int)arg_long(argc, argv, &i, 1, 10000);
        else if (!strcmp(a, "--steps")) o.steps = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--batch")) o.batch = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--lr")) o.opt.lr = (float)arg_double(argc, argv, &i, 1e-7, 10);
        else if (!strcmp(a, "--warmup")) o.warmup = (float)arg_double(argc, argv, &i, 0, 0.5);
        else if (!strcmp(a, "--holdout")) o.holdout = (float)arg_double(argc, argv, &i, 0.001, 0.5);
        else if (!strcmp(a, "--kl-weight")) o.kl_w = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--ce-weight")) o.ce_w = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "-t")) threads = (int)arg_long(argc, argv, &i, 1, 256);
        else if (!strcmp(a, "--seed")) o.seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "--quiet")) quiet = true;
        else
            return cli_unknown_option("train-eagle", a, usage);
    }
    if (!target || !out) {
        fprintf(stderr, "specd train-eagle: -m and -o are required\n");
        usage(stderr);
        return 2;
    }
    if (o.kl_w <= 0 && o.ce_w <= 0) {
        fprintf(stderr, "specd train-eagle: --kl-weight and --ce-weight are both 0: nothing to learn\n");
        return 2;
    }
    if (da.tprompts < 0) da.tprompts = da.n_corpora ? 0 : 1000;
    o.threads = threads;
    char err[1024];
    double t_start = now_ms();
    backend *be;
    tokenizer *tok;
    model *m = train_target_load("train-eagle", target, threads, &da, &be, &tok);
    if (!m) return 1;
    int rc = 1, L = m->hp.n_layer;
    eagle_data *d = NULL;
    eagle_head *h = NULL;
    train_prompts tp = {0};
    struct sigaction old = CLI_SIGINT_NONE;
    if (m->hp.eagle3) {
        fprintf(stderr, "specd train-eagle: %s is an EAGLE-3 head, not a target model\n", target);
        goto done;
    }
    if (layers[0] < 0) { /* the reference's choice: the inputs of layers 2, L/2 and L-3 */
        layers[0] = 2 < L ? 2 : L - 1, layers[1] = L / 2, layers[2] = L - 3 > 0 ? L - 3 : 0;
    }
    if (da.topk > m->hp.n_vocab) da.topk = m->hp.n_vocab;
    if (wtype < 0) {
        int ft = m->layers[0].wq.file_type;
        wtype = ft == GGML_TYPE_F32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
    }
    h = eagle_head_create(m, layers, ff, shared, o.seed, err, sizeof err);
    if (!h) {
        fprintf(stderr, "specd train-eagle: %s\n", err);
        goto done;
    }
    {
        double bpp = wtype == GGML_TYPE_F16 ? 2 : 4, bytes = 0;
        for (int i = 0; i < h->n_tensors; i++)
            bytes += (double)h->t[i].rows * h->t[i].cols * (h->t[i].matrix ? bpp : 4);
        double emb = (double)ggml_row_size((ggml_type)m->shards[0].tok_embd.file_type, (uint64_t)h->D) * h->V;
        printf("head: target layers %d,%d,%d of %d; one layer of %d/%d heads of %d, ff %d, %s output head; %.2fM trained "
               "parameters; %.2f MiB %s = %.1f%% of the target's %.2f MiB (%.1f%% with the copy of its embedding the "
               "file carries)\n",
               layers[0], layers[1], layers[2], L, h->H, h->Hkv, h->E, h->F, shared ? "the target's" : "its own",
               h->n_params / 1e6, (bytes + emb) / 1048576.0, ggml_type_name((ggml_type)wtype),
               100 * bytes / (double)m->weight_bytes, m->weight_bytes / 1048576.0,
               100 * (bytes + emb) / (double)m->weight_bytes);
    }
    /* prompts, then the target's continuations with its features and top-k */
    uint64_t rs = o.seed ^ 0xea61e5ull;
    if (train_prompts_build(&tp, tok, da.corpora, da.n_corpora, da.max_prompts, da.plen, true, da.tprompts, &rs, err, sizeof err) != 0) {
        fprintf(stderr, "specd train-eagle: %s\n", err);
        goto done;
    }
    if (tp.n < 4) {
        fprintf(stderr, "specd train-eagle: %d prompts are too few (give --corpus or --target-prompts)\n", tp.n);
        goto done;
    }
    d = eagle_data_create(m->hp.dim, da.topk, da.plen + da.gen, tp.n);
    if (!d) {
        fprintf(stderr, "specd train-eagle: out of memory for %d sequences of features (%.1f GiB; lower --prompts or "
                "--gen-len)\n", tp.n, (double)tp.n * (da.plen + da.gen) * EAGLE_PARTS * m->hp.dim * 2 / 1073741824.0);
        goto done;
    }
    cli_catch_sigint(&old);
    for (int i = 0; i < tp.n && !cli_interrupted; i += 4 * da.gbatch) {
        int g = tp.n - i < 4 * da.gbatch ? tp.n - i : 4 * da.gbatch;
        if (eagle_distill_add(d, m, layers, tok, (const int32_t *const *)tp.p + i, tp.len + i, tp.warm + i, g, da.gen,
                              train_gen_temp(&da, i / (4 * da.gbatch)), da.prompt_temp, da.gbatch, &rs, err,
                              sizeof err) < 0) {
            fprintf(stderr, "specd train-eagle: %s\n", err);
            goto done;
        }
        if (!quiet && isatty(2))
            fprintf(stderr, "\rtarget outputs: %lld of %d sequences (%.0f positions/s)", (long long)d->n, tp.n,
                    eagle_data_positions(d, 0, d->n) / ((now_ms() - t_start) / 1e3));
    }
    double t_gen = (now_ms() - t_start) / 1e3;
    char temps[96] = "";
    for (int k = 0, n = 0; k < (da.n_gen_temps ? da.n_gen_temps : 1) && n < (int)sizeof temps; k++)
        n += snprintf(temps + n, sizeof temps - (size_t)n, "%s%g", k ? "/" : "", train_gen_temp(&da, k));
    fprintf(stderr, "%starget outputs: %lld sequences, %lld positions, at temperature %s%s, in %.1f s\n",
            quiet || !isatty(2) ? "" : "\r", (long long)d->n, (long long)eagle_data_positions(d, 0, d->n), temps,
            da.n_gen_temps ? " by turns" : "", t_gen);
    cli_interrupted = 0; /* a Ctrl-C during generation ends it; training still runs on what there is */

    prog_ctx pc = {quiet, isatty(2) == 1};
    o.progress = progress, o.progress_ctx = &pc;
    o.progress_every = pc.tty ? 2 : 50;
    o.stop = &cli_interrupted;
    eagle_train_result res;
    if (eagle_train(h, d, &o, &res, err, sizeof err) != 0) {
        fprintf(stderr, "%sspecd train-eagle: %s\n", pc.tty && !quiet ? "\n" : "", err);
        goto done;
    }
    if (!quiet && pc.tty) fprintf(stderr, "\n");
    char desc[512];
    snprintf(desc, sizeof desc,
             "EAGLE-3 head trained by specd train-eagle for %s: held-out top-1 by step %.3f/%.3f, greedy chain of %d "
             "accepts %.2f drafts per pass", m->name, res.after.acc[0], o.J > 1 ? res.after.acc[1] : 0.0, o.J,
             res.after.accept_len);
    if (eagle_head_save(h, m, out, (ggml_type)wtype, desc, err, sizeof err) != 0) {
        fprintf(stderr, "specd train-eagle: %s\n", err);
        goto done;
    }
    double total = (now_ms() - t_start) / 1e3;
    printf("%s after %lld steps (%lld train / %lld held-out sequences): target outputs %.1f s, training %.1f s "
           "(%.0f positions/s), total %.1f s\n",
           res.interrupted ? "interrupted" : "done", (long long)res.steps, (long long)res.n_train,
           (long long)res.n_heldout, t_gen, res.seconds, res.seconds > 0 ? res.positions / res.seconds : 0.0, total);
    print_eval("held-out, untrained", &res.before, o.J);
    print_eval("held-out, trained  ", &res.after, o.J);
    printf("unigram baseline (step 0): %.3f\n", res.unigram_acc);
    printf("summary acc0=%.6f acc1=%.6f accept=%.6f unigram=%.6f steps=%lld interrupted=%d\n", res.after.acc[0],
           o.J > 1 ? res.after.acc[1] : 0.0, res.after.accept_len, res.unigram_acc, (long long)res.steps,
           res.interrupted);
    printf("wrote %s\n", out);
    rc = 0;
done:
    cli_restore_sigint(&old);
    train_prompts_free(&tp);
    eagle_data_destroy(d);
    eagle_head_destroy(h);
    tok_destroy(tok);
    model_free(m);
    backend_destroy(be);
    return rc;
}
