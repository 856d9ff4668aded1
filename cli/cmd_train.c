/* cmd_train.c — `specd train`: a llama model trained from scratch (or on
 * from a GGUF) on text with cross-entropy, through engine/train: the corpus
 * tokenized with a tokenizer taken from an existing GGUF (its metadata copied
 * byte for byte into the output), windows of --ctx tokens, AdamW with
 * warm-up + cosine, data-parallel workers, checkpoints and --resume, a
 * progress line with loss, tokens/s, share of the matmul peak and ETA, and
 * the held-out perplexity before and after; and `specd train-tokenizer`
 * (or train --vocab N): a byte-level BPE vocabulary trained on the corpus
 * (engine/train/train_bpe.h) as a tokenizer-only GGUF. */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/train_bpe.h"
#include "engine/train/train_ckpt.h"
#include "engine/train/train_gguf.h"
#include "engine/train/train_loop.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd train -o MODEL.gguf --corpus FILE [--corpus FILE ...] (--tokenizer SRC.gguf | --vocab N) [options]\n"
            "       specd train-tokenizer -o TOK.gguf --corpus FILE [--corpus FILE ...] --vocab N\n"
            "  --tokenizer SRC    take the vocabulary (all tokenizer.* metadata) from this GGUF\n"
            "  --vocab N          train a byte-level BPE vocabulary of N tokens on the corpus first (written\n"
            "                     beside the model as MODEL.gguf.tokenizer.gguf)\n"
            "  --init M.gguf      start from this llama model's weights (F32/F16) instead of random ones\n"
            "  --dim D (256)  --layers L (4)  --heads H (D/64)  --kv-heads K (H)  --ff F (8D/3)  --tied\n"
            "  --ctx T            positions per training window (128)\n"
            "  --steps N          optimizer steps (default: --epochs passes)  --epochs E (1)\n"
            "  --batch B (16)  --lr LR (0.001)  --warmup N (5%% of the steps)  --wd W (0.1)  --clip C (1.0)\n"
            "  --holdout F        share of the windows held out for perplexity (0.02)\n"
            "  --type f32|f16     matrices in the output (f32)\n"
            "  --ckpt FILE [--ckpt-every N] [--resume] [--stop-after N]\n"
            "  -t THREADS         data-parallel workers (1)   --seed S (1)   --quiet\n");
}

typedef struct {
    bool quiet, tty;
    double peak;
} prog_ctx;

static void progress(void *ctx, const train_progress *p) {
    prog_ctx *c = ctx;
    if (c->quiet) return;
    int eta = (int)(p->eta_s + 0.5);
    fprintf(stderr, "%sstep %lld/%lld loss %.4f lr %.2e |g| %.2f %.0f tok/s %.2f GFLOP/s (%.0f%% of matmul peak) ETA %dm%02ds%s",
            c->tty ? "\r" : "", (long long)p->step, (long long)p->steps, p->loss, p->lr, p->gnorm, p->tok_per_s,
            p->flop_per_s / 1e9, c->peak > 0 ? 100 * p->flop_per_s / c->peak : 0.0, eta / 60, eta % 60,
            c->tty ? "   " : "\n");
    fflush(stderr);
}

/* Reads the corpora into texts/lens (caller frees each and the arrays). */
static int read_corpora(const char *const *corpora, int n, char **texts, size_t *lens) {
    for (int c = 0; c < n; c++)
        if (!(texts[c] = read_file(corpora[c], &lens[c]))) {
            fprintf(stderr, "specd train: cannot read corpus %s\n", corpora[c]);
            for (int j = 0; j < c; j++) free(texts[j]);
            return -1;
        }
    return 0;
}

/* Trains a BPE vocabulary of n_vocab on the corpora into a tokenizer-only GGUF at path. */
static int write_bpe(const char *path, const char *const *corpora, int n, int n_vocab, bool quiet) {
    char *texts[16];
    size_t lens[16];
    char err[512];
    if (read_corpora(corpora, n, texts, lens)) return -1;
    double t0 = now_ms();
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "general.name", "specd-bpe");
    int V = train_bpe(w, (const char *const *)texts, lens, n, n_vocab, err, sizeof err);
    int rc = V < 0 ? -1 : gguf_writer_write(w, path, err, sizeof err);
    if (rc) fprintf(stderr, "specd train-tokenizer: %s\n", err);
    else if (!quiet) printf("wrote %s: byte-level BPE, %d tokens (%d merges) in %.1f s\n", path, V, V - 257,
                            (now_ms() - t0) / 1e3);
    gguf_writer_destroy(w);
    for (int c = 0; c < n; c++) free(texts[c]);
    return rc;
}

int cmd_train_tokenizer(int argc, char **argv) {
    const char *out = NULL, *corpora[16];
    int n_corpora = 0, vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--corpus")) {
            if (n_corpora == 16) {
                fprintf(stderr, "specd train-tokenizer: at most 16 --corpus files\n");
                return 2;
            }
            corpora[n_corpora++] = arg_str(argc, argv, &i);
        } else if (!strcmp(a, "--vocab")) vocab = (int)arg_long(argc, argv, &i, 258, 1 << 20);
        else
            return cli_unknown_option("train-tokenizer", a, usage);
    }
    if (!out || !n_corpora || !vocab) {
        fprintf(stderr, "specd train-tokenizer: -o, --vocab and at least one --corpus are required\n");
        return 2;
    }
    return write_bpe(out, corpora, n_corpora, vocab, false) ? 1 : 0;
}

int cmd_train(int argc, char **argv) {
    const char *out = NULL, *corpora[16], *tokp = NULL, *init = NULL, *ckpt = NULL;
    int n_vocab = 0, n_corpora = 0, threads = 1, ctx = 128, epochs = 1, dim = 256, layers = 4, heads = 0, kvh = 0, ff = 0;
    int wtype = GGML_TYPE_F32;
    bool tied = false, quiet = false, resume = false;
    float holdout = 0.02f;
    long warmup = -1, ckpt_every = 0;
    train_opts o;
    train_opts_init(&o);
    o.opt.steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--corpus")) {
            if (n_corpora == 16) {
                fprintf(stderr, "specd train: at most 16 --corpus files\n");
                return 2;
            }
            corpora[n_corpora++] = arg_str(argc, argv, &i);
        } else if (!strcmp(a, "--tokenizer")) tokp = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--vocab")) n_vocab = (int)arg_long(argc, argv, &i, 258, 1 << 20);
        else if (!strcmp(a, "--init")) init = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--dim")) dim = (int)arg_long(argc, argv, &i, 2, 65536);
        else if (!strcmp(a, "--layers")) layers = (int)arg_long(argc, argv, &i, 1, 256);
        else if (!strcmp(a, "--heads")) heads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--kv-heads")) kvh = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--ff")) ff = (int)arg_long(argc, argv, &i, 1, 1 << 20);
        else if (!strcmp(a, "--tied")) tied = true;
        else if (!strcmp(a, "--ctx")) ctx = (int)arg_long(argc, argv, &i, 2, 4096);
        else if (!strcmp(a, "--steps")) o.opt.steps = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--epochs")) epochs = (int)arg_long(argc, argv, &i, 1, 100000);
        else if (!strcmp(a, "--batch")) o.batch = (int)arg_long(argc, argv, &i, 1, 65536);
        else if (!strcmp(a, "--lr")) o.opt.lr = (float)arg_double(argc, argv, &i, 1e-7, 10);
        else if (!strcmp(a, "--warmup")) warmup = arg_long(argc, argv, &i, 0, 100000000);
        else if (!strcmp(a, "--wd")) o.opt.wd = (float)arg_double(argc, argv, &i, 0, 10);
        else if (!strcmp(a, "--clip")) o.opt.clip = (float)arg_double(argc, argv, &i, 0, 1e6);
        else if (!strcmp(a, "--holdout")) holdout = (float)arg_double(argc, argv, &i, 0.001, 0.5);
        else if (!strcmp(a, "--type")) {
            const char *tn = arg_str(argc, argv, &i);
            wtype = ggml_type_from_name(tn);
            if (wtype != GGML_TYPE_F32 && wtype != GGML_TYPE_F16) {
                fprintf(stderr, "specd train: --type must be f32 or f16 (got '%s')\n", tn);
                return 2;
            }
        } else if (!strcmp(a, "--ckpt")) ckpt = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--ckpt-every")) ckpt_every = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--resume")) resume = true;
        else if (!strcmp(a, "--stop-after")) o.stop_at = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "-t")) threads = (int)arg_long(argc, argv, &i, 1, 64);
        else if (!strcmp(a, "--seed")) o.seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "--quiet")) quiet = true;
        else
            return cli_unknown_option("train", a, usage);
    }
    if (!out || !n_corpora || (!tokp && !n_vocab) || (tokp && n_vocab)) {
        fprintf(stderr, "specd train: -o, one of --tokenizer and --vocab, and at least one --corpus are required\n");
        usage(stderr);
        return 2;
    }
    if (resume && !ckpt) {
        fprintf(stderr, "specd train: --resume needs --ckpt FILE\n");
        return 2;
    }
    char err[1024], tokpath[4096];
    double t0 = now_ms();
    int rc = 1;
    if (n_vocab) {
        snprintf(tokpath, sizeof tokpath, "%s.tokenizer.gguf", out);
        if (write_bpe(tokpath, corpora, n_corpora, n_vocab, quiet)) return 1;
        tokp = tokpath;
    }
    train_model *m = NULL;
    train_state st = {0};
    train_data *d = NULL;
    int32_t *toks = NULL;
    struct sigaction old = CLI_SIGINT_NONE;
    gguf_file *tg = gguf_open(tokp, NULL, err, sizeof err);
    tokenizer *tok = tg ? tok_create(tg, err, sizeof err) : NULL;
    if (!tok) {
        fprintf(stderr, "specd train: %s\n", err);
        goto done;
    }
    int V = tok_n_vocab(tok);
    /* the corpus, tokenized whole (one BOS per file), in windows of ctx + 1 */
    int64_t cap_w = 0, n_tok = 0;
    for (int c = 0; c < n_corpora; c++) {
        size_t len;
        char *text = read_file(corpora[c], &len);
        if (!text) {
            fprintf(stderr, "specd train: cannot read corpus %s\n", corpora[c]);
            goto done;
        }
        int32_t *tk = malloc(sizeof(int32_t) * (len + 2));
        int n = tk ? tok_encode(tok, text, len, true, false, tk, (int)(len + 2)) : -1;
        free(text);
        if (n < 0) {
            free(tk);
            fprintf(stderr, "specd train: cannot tokenize %s\n", corpora[c]);
            goto done;
        }
        int32_t *nt = realloc(toks, sizeof(int32_t) * (size_t)(n_tok + n));
        if (!nt) {
            free(tk);
            goto oom;
        }
        toks = nt;
        memcpy(toks + n_tok, tk, sizeof(int32_t) * (size_t)n);
        free(tk);
        n_tok += n;
    }
    cap_w = n_tok / ctx + 2;
    d = train_data_create(ctx, 0, cap_w);
    if (!d) goto oom;
    train_data_add_text(d, toks, (int)n_tok);
    int64_t n_held = (int64_t)(d->n * (double)holdout + 0.5);
    if (n_held < 1) n_held = 1;
    int64_t n_train = d->n - n_held;
    if (n_train < 1) {
        fprintf(stderr, "specd train: the corpus (%lld tokens) is too short for windows of %d\n", (long long)n_tok, ctx);
        goto done;
    }
    /* the model */
    if (resume) {
        if (train_ckpt_load(ckpt, &m, &st, &o.seed, err, sizeof err) != 0) {
            fprintf(stderr, "specd train: %s\n", err);
            goto done;
        }
    } else {
        if (init) m = train_gguf_load(init, err, sizeof err);
        else {
            train_cfg c = {.V = V, .D = dim, .L = layers, .E = 64, .ctx = ctx, .eps = 1e-5f, .rope_base = 10000.0f,
                           .tied = tied};
            c.H = heads ? heads : (dim / 64 > 0 ? dim / 64 : 1);
            c.E = dim / c.H;
            c.Hkv = kvh ? kvh : c.H;
            c.F = ff ? ff : (dim * 8 / 3 + 31) / 32 * 32;
            m = train_model_create(&c, o.seed, err, sizeof err);
        }
        if (!m || train_state_init(&st, m) != 0) {
            fprintf(stderr, "specd train: %s\n", m ? "out of memory for the optimizer" : err);
            goto done;
        }
    }
    if (m->c.V != V) {
        fprintf(stderr, "specd train: the model's vocabulary is %d, the tokenizer's %d\n", m->c.V, V);
        goto done;
    }
    if (m->c.ctx < ctx) m->c.ctx = ctx;
    printf("model: dim %d, %d layers, %d/%d heads of %d, ff %d, vocab %d, %s output: %.2fM parameters\n", m->c.D,
           m->c.L, m->c.H, m->c.Hkv, m->c.E, m->c.F, V, m->c.tied ? "tied" : "untied", m->n_params / 1e6);
    printf("corpus: %lld tokens, %lld windows of %d (%lld held out)\n", (long long)n_tok, (long long)d->n, ctx,
           (long long)n_held);
    train_eval e0 = {0}, e1;
    if (!resume && train_evaluate(m, d, n_train, d->n, threads, 1.0f, &e0) != 0) goto oom;
    if (o.opt.steps <= 0) o.opt.steps = (n_train * epochs + o.batch - 1) / o.batch;
    o.opt.warmup = warmup >= 0 ? warmup : o.opt.steps / 20;
    o.threads = threads, o.ckpt_path = ckpt, o.ckpt_every = ckpt_every, o.stop = &cli_interrupted;
    o.ce_w = 1.0f, o.kl_w = 0.0f;
    prog_ctx pc = {quiet, isatty(2) == 1, train_matmul_peak(1, 256, 256, 256, 300) * threads};
    o.progress = progress, o.progress_ctx = &pc, o.progress_every = pc.tty ? 5 : 100;
    cli_catch_sigint(&old);
    train_result res;
    if (train_run(m, &st, d, n_train, &o, &res, err, sizeof err) != 0) {
        fprintf(stderr, "%sspecd train: %s\n", pc.tty && !quiet ? "\n" : "", err);
        goto done;
    }
    if (pc.tty && !quiet) fprintf(stderr, "\n");
    if (train_evaluate(m, d, n_train, d->n, threads, 1.0f, &e1) != 0) goto oom;
    if (train_gguf_save(m, out, tg, (ggml_type)wtype, "specd-trained", "trained by specd train", err, sizeof err) != 0) {
        fprintf(stderr, "specd train: %s\n", err);
        goto done;
    }
    double fl = res.seconds > 0 ? res.flops / res.seconds : 0;
    printf("%s after %lld steps in %.1f s (%.0f tokens/s, %.2f GFLOP/s = %.0f%% of the %.2f GFLOP/s matmul peak on %d "
           "thread%s), total %.1f s\n",
           res.interrupted ? "interrupted" : "done", (long long)st.step, res.seconds,
           res.seconds > 0 ? res.positions / res.seconds : 0, fl / 1e9, pc.peak > 0 ? 100 * fl / pc.peak : 0,
           pc.peak / 1e9, threads, threads > 1 ? "s" : "", (now_ms() - t0) / 1e3);
    if (!resume) printf("held-out perplexity %.2f -> %.2f (CE %.4f -> %.4f)\n", exp(e0.ce), exp(e1.ce), e0.ce, e1.ce);
    else printf("held-out perplexity %.2f (CE %.4f)\n", exp(e1.ce), e1.ce);
    printf("wrote %s\n", out);
    printf("summary ce0=%.6f ce=%.6f last_loss=%.6f steps=%lld\n", resume ? -1.0 : e0.ce, e1.ce, res.last_loss,
           (long long)st.step);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "specd train: out of memory\n");
done:
    cli_restore_sigint(&old);
    free(toks);
    train_data_destroy(d);
    train_state_free(&st);
    train_model_destroy(m);
    tok_destroy(tok);
    gguf_close(tg);
    return rc;
}
