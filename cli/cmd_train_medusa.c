/* cmd_train_medusa.c — `specd train-medusa`: Medusa-1 heads for a target on
 * the CPU (medusa_train.h): corpus text (or, with --self-distill, the
 * target's own continuations of corpus prompts) → one target pass for the
 * hidden states → heads trained with AdamW → a GGUF side file with the
 * heads' held-out accuracies. Ctrl-C stops after the current step and still
 * writes measured heads. */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/train/medusa_distill.h"
#include "engine/train/medusa_train.h"
#include "engine/spec/proposers/pair_load.h"
#include "engine/spec/spec.h"
#include "engine/util.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd train-medusa -m TARGET.gguf -o HEADS.gguf --corpus FILE [--corpus FILE ...] [options]\n"
            "  --heads K          heads to train (4, at most %d)\n"
            "  --layers L         layers per head (1, at most %d)\n"
            "  --ffn F            FFN layers y += W2 SiLU(W y + b) of F hidden units (a multiple of 32)\n"
            "                     instead of ResBlocks y += SiLU(W y + b) (0, the default: ResBlocks)\n"
            "  --own-output       each head gets its own copy of the output matrix (default: shared)\n"
            "  --token-input      heads also read the token the target predicted, y0 = h + U e(x) (default)\n"
            "  --no-token-input   heads read only the hidden state (Medusa-1 as published)\n"
            "  --type T           storage type of the heads' matrices: f32 (default), f16, q8_0\n"
            "  --self-distill     train on the target's own continuations of corpus prompts\n"
            "  --gen-len N        tokens generated per prompt with --self-distill (192)\n"
            "  --samples N        continuations per document with --self-distill, each from a longer\n"
            "                     prefix of it (1)\n"
            "  --distill-temp T   temperature of the continuations (0: greedy, the default: what greedy\n"
            "                     verification accepts)\n"
            "  --distill-batch B  continuations generated in lockstep (32)\n"
            "  --target-prompts N with --self-distill, also N prompts the target writes itself, sampled\n"
            "                     from BOS (--prompt-len tokens (32) at --prompt-temp (1.0)) in the same\n"
            "                     pass as their continuations: prompts as varied as the target's own\n"
            "                     text, whatever the corpus holds\n"
            "  --tokens N         most training positions (200000; hidden states take N x dim x 4 bytes)\n"
            "  --epochs E         passes over the positions (1)      --steps N   exact step count instead\n"
            "  --lr LR            peak learning rate (0.001)        --batch B   positions per step (64)\n"
            "  --holdout F        held-out share of positions (0.05) --chunk C  target pass length (256)\n"
            "  -t THREADS         threads for the target pass and the trainer (1)\n"
            "  --seed S           shuffle and sampling seed (1)     --quiet     no progress bar\n",
            MEDUSA_MAX_HEADS, MEDUSA_MAX_LAYERS);
}

typedef struct {
    int32_t **p;
    int *len;
    int *warm; /* tokens the target writes before the continuation proper */
    int n, cap;
} prompt_list;

/* Appends a copy of toks[0, n) with warm-up `warm` to pl; -1 when out of
 * memory. */
static int prompt_add(prompt_list *pl, const int32_t *toks, int n, int warm) {
    if (pl->n == pl->cap) {
        int nc = pl->cap ? 2 * pl->cap : 256;
        int32_t **np2 = realloc(pl->p, sizeof(*pl->p) * (size_t)nc);
        if (np2) pl->p = np2;
        int *nl2 = np2 ? realloc(pl->len, sizeof(int) * (size_t)nc) : NULL;
        if (nl2) pl->len = nl2;
        int *nw2 = nl2 ? realloc(pl->warm, sizeof(int) * (size_t)nc) : NULL;
        if (!nw2) return -1;
        pl->warm = nw2, pl->cap = nc;
    }
    if (!(pl->p[pl->n] = malloc(sizeof(int32_t) * (size_t)n))) return -1;
    memcpy(pl->p[pl->n], toks, sizeof(int32_t) * (size_t)n);
    pl->warm[pl->n] = warm;
    pl->len[pl->n++] = n;
    return 0;
}

/* Splits text into documents at newlines and "<|endoftext|>" markers. */
static int next_doc(const char **p, const char *end, const char **ds, size_t *dl) {
    static const char eot[] = "<|endoftext|>";
    while (*p < end) {
        const char *s = *p, *e = s;
        while (e < end && *e != '\n' && !(end - e >= 13 && !memcmp(e, eot, 13))) e++;
        *p = e < end ? (*e == '\n' ? e + 1 : e + 13) : end;
        while (s < e && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        if (e - s >= 8) {
            *ds = s, *dl = (size_t)(e - s);
            return 1;
        }
    }
    return 0;
}

typedef struct {
    bool quiet, tty;
    int K;
} prog_ctx;

static void progress(void *ctx, const medusa_progress *p) {
    prog_ctx *c = ctx;
    if (c->quiet) return;
    int w = 24, f = (int)(w * p->step / (p->steps ? p->steps : 1));
    char bar[32];
    for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
    bar[w] = 0;
    fprintf(stderr, "%s[%s] step %lld/%lld epoch %d loss %.3f acc1", c->tty ? "\r" : "", bar, (long long)p->step,
            (long long)p->steps, p->epoch, p->loss);
    for (int k = 0; k < c->K; k++) fprintf(stderr, "%s%.2f", k ? "/" : " ", p->acc1[k]);
    int eta = (int)(p->eta_s + 0.5);
    fprintf(stderr, " %.0f tok/s ETA %dm%02ds%s", p->samples_per_s, eta / 60, eta % 60, c->tty ? "   " : "\n");
    fflush(stderr);
}

int cmd_train_medusa(int argc, char **argv) {
    const char *target = NULL, *out = NULL, *corpora[16];
    int n_corpora = 0, K = 4, L = 1, F = 0, threads = 1, chunk = 256, gen_len = 192, samples = 1;
    bool own = false, distill = false, quiet = false, tin = true;
    float dtemp = 0.0f;
    prompt_list pl = {0}; /* --self-distill: the prompts, continued after the corpus is read */
    int tprompts = 0, plen = 32;
    float ptemp = 1.0f;
    int dbatch = 32;
    int wtype = GGML_TYPE_F32;
    long max_tokens = 200000;
    medusa_train_opts o;
    medusa_train_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) target = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--corpus")) {
            if (n_corpora == 16) {
                fprintf(stderr, "specd train-medusa: at most 16 --corpus files\n");
                return 2;
            }
            corpora[n_corpora++] = arg_str(argc, argv, &i);
        } else if (!strcmp(a, "--heads")) K = (int)arg_long(argc, argv, &i, 1, MEDUSA_MAX_HEADS);
        else if (!strcmp(a, "--layers")) L = (int)arg_long(argc, argv, &i, 1, MEDUSA_MAX_LAYERS);
        else if (!strcmp(a, "--ffn")) {
            F = (int)arg_long(argc, argv, &i, 0, MEDUSA_MAX_FFN);
            if (F % 32) {
                fprintf(stderr, "specd train-medusa: --ffn must be a multiple of 32 (got %d)\n", F);
                return 2;
            }
        } else if (!strcmp(a, "--own-output")) own = true;
        else if (!strcmp(a, "--token-input")) tin = true;
        else if (!strcmp(a, "--no-token-input")) tin = false;
        else if (!strcmp(a, "--type")) {
            const char *tn = arg_str(argc, argv, &i);
            wtype = ggml_type_from_name(tn);
            if (wtype != GGML_TYPE_F32 && wtype != GGML_TYPE_F16 && wtype != GGML_TYPE_Q8_0) {
                fprintf(stderr, "specd train-medusa: --type must be f32, f16 or q8_0 (got '%s')\n", tn);
                return 2;
            }
        }
        else if (!strcmp(a, "--self-distill")) distill = true;
        else if (!strcmp(a, "--distill-temp")) dtemp = (float)arg_double(argc, argv, &i, 0, 4);
        else if (!strcmp(a, "--distill-batch")) dbatch = (int)arg_long(argc, argv, &i, 1, 256);
        else if (!strcmp(a, "--gen-len")) gen_len = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--samples")) samples = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--target-prompts")) tprompts = (int)arg_long(argc, argv, &i, 0, 10000000);
        else if (!strcmp(a, "--prompt-len")) plen = (int)arg_long(argc, argv, &i, 2, 4096);
        else if (!strcmp(a, "--prompt-temp")) ptemp = (float)arg_double(argc, argv, &i, 0, 4);
        else if (!strcmp(a, "--tokens")) max_tokens = arg_long(argc, argv, &i, 16, 100000000);
        else if (!strcmp(a, "--epochs")) o.epochs = (int)arg_long(argc, argv, &i, 1, 10000);
        else if (!strcmp(a, "--steps")) o.max_steps = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--lr")) o.lr = (float)arg_double(argc, argv, &i, 1e-7, 10);
        else if (!strcmp(a, "--batch")) o.batch = (int)arg_long(argc, argv, &i, 1, 65536);
        else if (!strcmp(a, "--holdout")) o.holdout = (float)arg_double(argc, argv, &i, 0.001, 0.5);
        else if (!strcmp(a, "--chunk")) chunk = (int)arg_long(argc, argv, &i, 8, 4096);
        else if (!strcmp(a, "-t")) threads = (int)arg_long(argc, argv, &i, 1, 256);
        else if (!strcmp(a, "--seed")) o.seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "--quiet")) quiet = true;
        else
            return cli_unknown_option("train-medusa", a, usage);
    }
    if (!target || !out || !n_corpora) {
        fprintf(stderr, "specd train-medusa: -m, -o and at least one --corpus are required\n");
        usage(stderr);
        return 2;
    }
    o.threads = threads;
    char err[1024];
    struct sigaction old = CLI_SIGINT_NONE; /* installed once the model is loaded */
    double t_start = now_ms();
    backend *be = backend_cpu_create(threads);
    spec_pair_params pp = {.max_ctx = chunk + gen_len + 16 > 4096 ? 4096 : chunk + gen_len + 16, .max_seqs = 1};
    engine_status est;
    spec_pair *sp = spec_pair_load(target, NULL, be, &pp, NULL, &est, err, sizeof(err));
    if (!sp) {
        cli_load_failed("train-medusa", est, err, "lower --chunk, or use a smaller model");
        backend_destroy(be);
        return 1;
    }
    model *m = sp->target;
    int D = m->hp.dim, V = m->hp.n_vocab, rc = 1;
    medusa_heads *mh = medusa_heads_create(K, L, F, D, V, own, tin, NULL, err, sizeof(err));
    float *O = mh ? medusa_target_output(m, err, sizeof(err)) : NULL;
    float *E = O && tin ? medusa_target_embedding(m, err, sizeof(err)) : NULL;
    medusa_data *d = medusa_data_create(D, K, max_tokens);
    int cap = pp.max_ctx;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap * 2);
    if (!mh || !O || (tin && !E) || !d || !toks) {
        fprintf(stderr, "specd train-medusa: %s\n",
                mh && O && (!tin || E) ? "out of memory for the hidden states (lower --tokens)" : err);
        goto done;
    }
    snprintf(mh->target_id, sizeof(mh->target_id), "%s", sp->target_id.id);
    snprintf(mh->target_name, sizeof(mh->target_name), "%s", m->name);
    if (own)
        for (int k = 0; k < K; k++) memcpy(mh->out + (size_t)k * V * D, O, sizeof(float) * (size_t)V * D);

    /* Ctrl-C from here on: the pass stops where it is, training stops after
     * its current step, and what there is gets measured and written */
    cli_catch_sigint(&old);
    /* the hidden-state pass */
    uint64_t rs = o.seed ^ 0x5eedull;
    int64_t n_text = 0;
    int n_docs = 0;
    for (int c = 0; c < n_corpora && d->n < d->cap && !cli_interrupted; c++) {
        size_t len;
        char *text = read_file(corpora[c], &len);
        if (!text) {
            fprintf(stderr, "specd train-medusa: cannot read corpus %s\n", corpora[c]);
            goto done;
        }
        const char *p = text, *ds;
        size_t dl;
        while (d->n < d->cap && !cli_interrupted && next_doc(&p, text + len, &ds, &dl)) {
            /* long documents go in pieces of the chunk length */
            int n = tok_encode(sp->tok, ds, dl, true, false, toks, cap * 2);
            if (n < 0) n = cap * 2;
            for (int s = 0; s + 3 < n && d->n < d->cap; s += chunk) {
                const int32_t *seg = toks + s;
                int ns = n - s < chunk + 1 ? n - s : chunk + 1;
                if (!distill) {
                    if (medusa_data_add(d, m, sp->tpool, seg, ns, chunk + 1, err, sizeof(err)) < 0) {
                        fprintf(stderr, "specd train-medusa: %s\n", err);
                        free(text);
                        goto done;
                    }
                    n_text += ns;
                    continue;
                }
                /* the target's own continuations of prefixes of this segment, each a
                 * little longer: greedy continuations of one prefix would be alike */
                for (int r = 0; r < samples; r++) {
                    int np = ns < 4 ? ns : 4 + (int)((int64_t)(ns - 4) * r / samples);
                    if (prompt_add(&pl, seg, np, 0) != 0) {
                        fprintf(stderr, "specd train-medusa: out of memory for the prompts\n");
                        free(text);
                        goto done;
                    }
                }
            }
            n_docs++;
            if (!quiet && n_docs % 64 == 0)
                fprintf(stderr, "\rhidden states: %lld positions from %d documents", (long long)d->n, n_docs);
        }
        free(text);
    }
    /* --target-prompts: prompts the target samples from BOS, written in the
     * same pass as their continuations (a warm-up of --prompt-len - 1 tokens
     * at --prompt-temp), shuffled in with the corpus prompts */
    if (distill && tprompts > 0 && !cli_interrupted) {
        int32_t bos = tok_bos(sp->tok);
        if (bos < 0) {
            fprintf(stderr, "specd train-medusa: --target-prompts needs a vocabulary with a BOS token\n");
            goto done;
        }
        if (plen + gen_len > cap) {
            fprintf(stderr, "specd train-medusa: --prompt-len %d + --gen-len %d exceed the context of %d\n", plen,
                    gen_len, cap);
            goto done;
        }
        for (int i = 0; i < tprompts; i++)
            if (prompt_add(&pl, &bos, 1, plen - 1) != 0) {
                fprintf(stderr, "specd train-medusa: out of memory for the prompts\n");
                goto done;
            }
    }
    /* in a seeded random order: when --tokens runs out first, the continuations
     * still come from the whole text, and the held-out share (the last
     * positions) from many documents rather than the last one's prefixes */
    for (int i = pl.n - 1; i > 0; i--) {
        int j = (int)(util_splitmix64(&rs) % (uint64_t)(i + 1));
        int32_t *tp = pl.p[i];
        int tl = pl.len[i], tw = pl.warm[i];
        pl.p[i] = pl.p[j], pl.len[i] = pl.len[j], pl.warm[i] = pl.warm[j];
        pl.p[j] = tp, pl.len[j] = tl, pl.warm[j] = tw;
    }
    /* the continuations, a few batches at a time so progress shows */
    for (int i = 0; i < pl.n && d->n < d->cap && !cli_interrupted; i += 4 * dbatch) {
        int g = pl.n - i < 4 * dbatch ? pl.n - i : 4 * dbatch;
        int64_t before = d->n;
        if (medusa_distill_add(d, m, sp->tok, (const int32_t *const *)pl.p + i, pl.len + i, pl.warm + i, g, gen_len,
                               dtemp, ptemp, dbatch, &rs, NULL, NULL, err, sizeof(err)) < 0) {
            fprintf(stderr, "specd train-medusa: %s\n", err);
            goto done;
        }
        n_text += d->n - before;
        if (!quiet)
            fprintf(stderr, "\rhidden states: %lld positions from %d of %d continuations (%.0f positions/s)",
                    (long long)d->n, i + g, pl.n, d->n / ((now_ms() - t_start) / 1e3));
    }
    double t_hidden = now_ms() - t_start;
    char tpn[64] = "";
    if (distill && tprompts > 0) snprintf(tpn, sizeof tpn, " and %d prompts written by the target", tprompts);
    fprintf(stderr, "%shidden states: %lld positions from %d documents%s%s in %.1f s\n", quiet ? "" : "\r",
            (long long)d->n, n_docs, tpn, distill ? " (self-distilled continuations)" : "", t_hidden / 1e3);

    prog_ctx pc = {quiet, isatty(2) == 1, K};
    o.progress = progress;
    o.progress_ctx = &pc;
    o.progress_every = pc.tty ? 10 : 200; /* a log gets a line now and then, a terminal a live bar */
    o.stop = &cli_interrupted;
    medusa_train_result res;
    int trc = medusa_train(mh, O, E, d, &o, &res, err, sizeof(err));
    if (!quiet && pc.tty) fprintf(stderr, "\n");
    if (trc != 0) {
        fprintf(stderr, "specd train-medusa: %s\n", err);
        goto done;
    }
    if (wtype != GGML_TYPE_F32) {
        /* the stored heads are the quantized ones: measure those */
        if (medusa_heads_set_type(mh, wtype, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd train-medusa: %s\n", err);
            goto done;
        }
        res.loss1 =
            medusa_evaluate(mh, O, E, d, d->n - res.n_heldout, d->n, o.head_decay, o.threads, res.head_loss1, mh->acc);
        mh->heldout_loss = (float)res.loss1;
    }
    if (medusa_heads_save(mh, out, err, sizeof(err)) != 0) {
        fprintf(stderr, "specd train-medusa: %s\n", err);
        goto done;
    }
    double total_s = (now_ms() - t_start) / 1e3;
    char kind[48];
    if (F) snprintf(kind, sizeof kind, "FFN layer%s of %d", L > 1 ? "s" : "", F);
    else snprintf(kind, sizeof kind, "ResBlock%s", L > 1 ? "s" : "");
    printf("%s: %d heads x %d %s (%s output%s, %s), %.1f KiB = %.2f%% of the target's weight bytes\n", out, K, L,
           kind, own ? "own" : "shared", tin ? ", token input" : "", ggml_type_name(wtype),
           medusa_heads_bytes(mh) / 1024.0, 100.0 * medusa_heads_bytes(mh) / (double)m->weight_bytes);
    printf("%s after %lld steps (%lld train / %lld held-out positions): hidden pass %.1f s, training %.1f s "
           "(%.0f positions/s), total %.1f s\n",
           res.interrupted ? "interrupted" : "done", (long long)res.steps, (long long)res.n_train,
           (long long)res.n_heldout, t_hidden / 1e3, res.seconds,
           res.seconds > 0 ? res.steps * (double)o.batch / res.seconds : 0.0, total_s);
    printf("held-out loss %.4f -> %.4f (train %.4f)\n", res.loss0, res.loss1, res.train_loss);
    for (int k = 0; k < K; k++)
        printf("head %d (+%d): CE %.3f -> %.3f  top-1 %.3f  top-3 %.3f  top-5 %.3f\n", k + 1, k + 2, res.head_loss0[k],
               res.head_loss1[k], mh->acc[k][0], mh->acc[k][2], mh->acc[k][4]);
    printf("unigram baseline (head 1): %.3f\n", res.unigram_acc);
    printf("summary loss0=%.6f loss1=%.6f head1_top1=%.6f unigram=%.6f steps=%lld interrupted=%d\n", res.loss0,
           res.loss1, mh->acc[0][0], res.unigram_acc, (long long)res.steps, res.interrupted);
    rc = 0;
done:
    cli_restore_sigint(&old);
    for (int i = 0; i < pl.n; i++) free(pl.p[i]);
    free(pl.p);
    free(pl.len);
    free(pl.warm);
    free(toks);
    free(O);
    free(E);
    medusa_data_destroy(d);
    medusa_heads_destroy(mh);
    spec_pair_free(sp);
    backend_destroy(be);
    return rc;
}
