/* cmd_distill_draft.c — `specd distill-draft`: a small llama draft for a
 * target, trained by distillation on the target's own outputs (engine/train):
 * prompts from a corpus and/or written by the target, the target's
 * continuations with the top-k of its logits at every position from the same
 * generating passes, a draft with the target's tokenizer metadata copied
 * byte for byte trained on the KL to those top-k distributions, held-out
 * acceptance against the target (greedy and at a temperature) for the draft
 * as initialized and as trained, and the draft as a GGUF that pairs with the
 * target in specd (same tokenizer hash). Ctrl-C stops training after the
 * current step and still measures and writes the draft. */
#include "cli/cmd.h"
#include "cli/train_prompts.h"
#include "cli/util.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/train_ckpt.h"
#include "engine/train/train_distill.h"
#include "engine/train/train_gguf.h"
#include "engine/train/train_loop.h"
#include "engine/util.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: specd distill-draft -m TARGET.gguf -o DRAFT.gguf [--corpus FILE ...] [options]\n"
            "draft shape (default: about --size-ratio of the target's weight bytes, the target's head dim):\n"
            "  --dim D  --layers L  --heads H  --kv-heads K  --head-dim E  --ff F  --tied\n"
            "  --size-ratio R     draft bytes / target bytes for the default shape (0.1)\n"
            "  --type T           f32 or f16 matrices (default: f16 when the target's are half, else f32)\n"
            "data (the target's own outputs):\n"
            "  --corpus FILE      prompts: the starts of its lines (up to 16 files)\n"
            "  --prompts N        most corpus prompts (4000)\n"
            "  --target-prompts N prompts the target writes itself from BOS (default: 0 with a corpus, else 1000)\n"
            "  --prompt-len P     longest prompt in tokens (32)   --gen-len G  tokens generated per prompt (96)\n"
            "  --gen-temp T       temperature of the continuations (0.8)  --prompt-temp T  of written prompts (1.0)\n"
            "  --topk K           the target's top-k kept per position (32)\n"
            "  --gen-batch B      sequences the target continues in lockstep (64)\n"
            "  --holdout F        share of the sequences held out for acceptance (0.05)\n"
            "training:\n"
            "  --steps N          optimizer steps (default: --epochs passes)  --epochs E (4)\n"
            "  --batch B          sequences per step (16)  --lr LR (0.002)  --warmup N steps (5%% of them)\n"
            "  --ce-weight W      weight of cross-entropy to the target's own token beside the KL (0)\n"
            "  --ckpt FILE        write checkpoints there (--ckpt-every N steps, and at the end or on Ctrl-C)\n"
            "  --resume           start from --ckpt's checkpoint (same flags and seed: the same data)\n"
            "  --stop-after N     stop once N steps are taken, as Ctrl-C would (checkpoint, measure, write)\n"
            "  --eval-temp T      the temperature of the sampled acceptance figure (0.8)\n"
            "  --compare D.gguf   also measure another draft (F32/F16 llama, same vocabulary) on the held-out data\n"
            "  -t THREADS         threads for the target and the trainer's data-parallel workers (1)\n"
            "  --seed S (1)       --quiet\n");
}

typedef struct {
    bool quiet, tty;
    double peak;
} prog_ctx;

static void progress(void *ctx, const train_progress *p) {
    prog_ctx *c = ctx;
    if (c->quiet) return;
    int w = 24, f = (int)(w * p->step / (p->steps ? p->steps : 1));
    char bar[32];
    for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
    bar[w] = 0;
    int eta = (int)(p->eta_s + 0.5);
    fprintf(stderr, "%s[%s] step %lld/%lld loss %.4f lr %.2e |g| %.2f %.0f tok/s %.2f GFLOP/s (%.0f%% of matmul peak) ETA %dm%02ds%s",
            c->tty ? "\r" : "", bar, (long long)p->step, (long long)p->steps, p->loss, p->lr, p->gnorm, p->tok_per_s,
            p->flop_per_s / 1e9, c->peak > 0 ? 100 * p->flop_per_s / c->peak : 0.0, eta / 60, eta % 60,
            c->tty ? "   " : "\n");
    fflush(stderr);
}

/* The default draft: the target's head dim, half its layers (at least 2),
 * the widest width (a multiple of the head dim) whose weights fit `bytes`. */
static train_cfg default_shape(const model *m, double bytes, int bpp) {
    const model_hparams *h = &m->hp;
    train_cfg c = {.V = h->n_vocab, .E = h->head_dim, .ctx = h->n_ctx_train, .eps = 1e-5f, .rope_base = 10000.0f};
    c.L = h->n_layer / 2 > 2 ? h->n_layer / 2 : 2;
    int rep = h->n_kv_head > 0 ? h->n_head / h->n_kv_head : 1;
    train_cfg best = c;
    for (int D = c.E; D <= h->dim; D += c.E) {
        c.D = D;
        c.H = D / c.E;
        c.Hkv = c.H % rep == 0 ? c.H / rep : c.H;
        c.F = (D * 8 / 3 + 31) / 32 * 32;
        if (best.D == 0 || (double)train_cfg_params(&c) * bpp <= bytes) best = c;
        else break;
    }
    return best;
}

int cmd_distill_draft(int argc, char **argv) {
    const char *target = NULL, *out = NULL, *ckpt = NULL, *compare = NULL;
    int threads = 1, epochs = 4, dim = 0, layers = 0, heads = 0, kvh = 0, hd = 0, ff = 0, wtype = -1;
    bool tied = false, quiet = false, resume = false;
    float holdout = 0.05f, eval_temp = 0.8f, ratio = 0.1f;
    train_data_args da = {.max_prompts = 4000, .tprompts = -1, .plen = 32, .gen = 96, .gbatch = 64, .topk = 32,
                          .gen_temp = 0.8f, .prompt_temp = 1.0f};
    long warmup = -1, ckpt_every = 0;
    train_opts o;
    train_opts_init(&o);
    o.opt.lr = 2e-3f, o.opt.steps = 0, o.ce_w = 0.0f, o.kl_w = 1.0f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int dr = train_data_arg("distill-draft", argc, argv, &i, &da);
        if (dr < 0) return 2;
        if (dr > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) target = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--dim")) dim = (int)arg_long(argc, argv, &i, 2, 65536);
        else if (!strcmp(a, "--layers")) layers = (int)arg_long(argc, argv, &i, 1, 256);
        else if (!strcmp(a, "--heads")) heads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--kv-heads")) kvh = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--head-dim")) hd = (int)arg_long(argc, argv, &i, 2, 256);
        else if (!strcmp(a, "--ff")) ff = (int)arg_long(argc, argv, &i, 1, 1 << 20);
        else if (!strcmp(a, "--tied")) tied = true;
        else if (!strcmp(a, "--size-ratio")) ratio = (float)arg_double(argc, argv, &i, 1e-6, 1);
        else if (!strcmp(a, "--type")) {
            const char *tn = arg_str(argc, argv, &i);
            wtype = ggml_type_from_name(tn);
            if (wtype != GGML_TYPE_F32 && wtype != GGML_TYPE_F16) {
                fprintf(stderr, "specd distill-draft: --type must be f32 or f16 (got '%s')\n", tn);
                return 2;
            }
        } else if (!strcmp(a, "--holdout")) holdout = (float)arg_double(argc, argv, &i, 0.001, 0.5);
        else if (!strcmp(a, "--steps")) o.opt.steps = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--epochs")) epochs = (int)arg_long(argc, argv, &i, 1, 100000);
        else if (!strcmp(a, "--batch")) o.batch = (int)arg_long(argc, argv, &i, 1, 65536);
        else if (!strcmp(a, "--lr")) o.opt.lr = (float)arg_double(argc, argv, &i, 1e-7, 10);
        else if (!strcmp(a, "--warmup")) warmup = arg_long(argc, argv, &i, 0, 100000000);
        else if (!strcmp(a, "--ce-weight")) o.ce_w = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--ckpt")) ckpt = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--ckpt-every")) ckpt_every = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--resume")) resume = true;
        else if (!strcmp(a, "--compare")) compare = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--stop-after")) o.stop_at = arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--eval-temp")) eval_temp = (float)arg_double(argc, argv, &i, 0.01, 4);
        else if (!strcmp(a, "-t")) threads = (int)arg_long(argc, argv, &i, 1, 64);
        else if (!strcmp(a, "--seed")) o.seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "--quiet")) quiet = true;
        else
            return cli_unknown_option("distill-draft", a, usage);
    }
    if (!target || !out) {
        fprintf(stderr, "specd distill-draft: -m TARGET and -o DRAFT are required\n");
        usage(stderr);
        return 2;
    }
    if (resume && !ckpt) {
        fprintf(stderr, "specd distill-draft: --resume needs --ckpt FILE\n");
        return 2;
    }
    if (da.tprompts < 0) da.tprompts = da.n_corpora ? 0 : 1000;
    char err[1024];
    double t_start = now_ms();
    backend *be;
    tokenizer *tok;
    model *m = train_target_load("distill-draft", target, threads, &da, &be, &tok);
    if (!m) return 1;
    int rc = 1, V = m->hp.n_vocab;
    train_data *d = NULL;
    train_model *dm = NULL;
    train_state st = {0};
    train_prompts tp = {0};
    struct sigaction old = CLI_SIGINT_NONE;
    if (da.topk > V) da.topk = V;
    /* the draft's shape */
    bool half_target = m->layers[0].wq.file_type == GGML_TYPE_F16 || m->layers[0].wq.file_type == GGML_TYPE_BF16;
    if (wtype < 0) wtype = half_target ? GGML_TYPE_F16 : GGML_TYPE_F32;
    train_cfg cfg = default_shape(m, ratio * (double)m->weight_bytes, wtype == GGML_TYPE_F16 ? 2 : 4);
    if (hd) cfg.E = hd;
    if (dim) cfg.D = dim;
    if (heads) cfg.H = heads;
    else if (dim || hd) cfg.H = cfg.D / cfg.E > 0 ? cfg.D / cfg.E : 1;
    if (kvh) cfg.Hkv = kvh;
    else if (heads || dim || hd) cfg.Hkv = cfg.H;
    if (layers) cfg.L = layers;
    if (ff) cfg.F = ff;
    else if (dim) cfg.F = (cfg.D * 8 / 3 + 31) / 32 * 32;
    cfg.tied = tied;
    if (cfg.ctx < da.plen + da.gen) cfg.ctx = da.plen + da.gen;
    if (train_cfg_check(&cfg, err, sizeof err)) {
        fprintf(stderr, "specd distill-draft: %s\n", err);
        goto done;
    }
    /* prompts: corpus lines' starts, then prompts the target writes */
    uint64_t rs = o.seed ^ 0xd157111ull;
    if (train_prompts_build(&tp, tok, da.corpora, da.n_corpora, da.max_prompts, da.plen, false, da.tprompts, &rs, err, sizeof err) != 0) {
        fprintf(stderr, "specd distill-draft: %s\n", err);
        goto done;
    }
    int np = tp.n;
    if (np < 4) {
        fprintf(stderr, "specd distill-draft: %d prompts are too few (give --corpus or --target-prompts)\n", np);
        goto done;
    }
    /* the target's continuations with its top-k at every position */
    d = train_data_create(da.plen + da.gen - 1, da.topk, np);
    if (!d) goto oom;
    cli_catch_sigint(&old);
    for (int i = 0; i < tp.n && !cli_interrupted; i += 4 * da.gbatch) {
        int g = np - i < 4 * da.gbatch ? np - i : 4 * da.gbatch;
        if (train_distill_add(d, m, tok, (const int32_t *const *)tp.p + i, tp.len + i, tp.warm + i, g, da.gen,
                              train_gen_temp(&da, i / (4 * da.gbatch)),
                              da.prompt_temp, da.gbatch, &rs, err, sizeof err) < 0) {
            fprintf(stderr, "specd distill-draft: %s\n", err);
            goto done;
        }
        if (!quiet && isatty(2))
            fprintf(stderr, "\rtarget outputs: %lld of %d sequences (%.0f positions/s)", (long long)d->n, tp.n,
                    train_data_positions(d, 0, d->n) / ((now_ms() - t_start) / 1e3));
    }
    double t_gen = (now_ms() - t_start) / 1e3;
    int64_t n_held = (int64_t)(d->n * (double)holdout + 0.5);
    if (n_held < 1) n_held = 1;
    int64_t n_train = d->n - n_held;
    if (n_train < 1) {
        fprintf(stderr, "specd distill-draft: %lld sequences are too few to train on\n", (long long)d->n);
        goto done;
    }
    int64_t pos_train = train_data_positions(d, 0, n_train);
    fprintf(stderr, "%starget outputs: %lld sequences (%lld training positions, %lld held-out sequences) in %.1f s\n",
            quiet || !isatty(2) ? "" : "\r", (long long)d->n, (long long)pos_train, (long long)n_held, t_gen);

    /* the draft: fresh, or the checkpoint's */
    uint64_t seed = o.seed;
    if (resume) {
        if (train_ckpt_load(ckpt, &dm, &st, &seed, err, sizeof err) != 0) {
            fprintf(stderr, "specd distill-draft: %s\n", err);
            goto done;
        }
        if (dm->c.V != V) {
            fprintf(stderr, "specd distill-draft: checkpoint %s has a vocabulary of %d, the target %d\n", ckpt,
                    dm->c.V, V);
            goto done;
        }
        cfg = dm->c, o.seed = seed;
    } else {
        dm = train_model_create(&cfg, o.seed, err, sizeof err);
        if (!dm || train_state_init(&st, dm) != 0) {
            fprintf(stderr, "specd distill-draft: %s\n", dm ? "out of memory for the optimizer" : err);
            goto done;
        }
    }
    int bpp = wtype == GGML_TYPE_F16 ? 2 : 4;
    double draft_bytes = 0;
    for (int i = 0; i < dm->n_tensors; i++)
        draft_bytes += (double)dm->t[i].rows * dm->t[i].cols * (dm->t[i].matrix ? bpp : 4);
    printf("draft: dim %d, %d layers, %d/%d heads of %d, ff %d, %s output: %.2fM parameters, %.2f MiB %s = %.1f%% of "
           "the target's %.2f MiB\n",
           cfg.D, cfg.L, cfg.H, cfg.Hkv, cfg.E, cfg.F, cfg.tied ? "tied" : "untied", dm->n_params / 1e6,
           draft_bytes / 1048576.0, ggml_type_name(wtype), 100 * draft_bytes / (double)m->weight_bytes,
           m->weight_bytes / 1048576.0);
    train_eval e0g, e1g;
    if (!resume && train_evaluate(dm, d, n_train, d->n, threads, eval_temp, &e0g) != 0) goto oom;

    /* training */
    if (o.opt.steps <= 0) o.opt.steps = (n_train * epochs + o.batch - 1) / o.batch;
    o.opt.warmup = warmup >= 0 ? warmup : o.opt.steps / 20;
    o.threads = threads;
    o.ckpt_path = ckpt, o.ckpt_every = ckpt_every;
    o.stop = &cli_interrupted;
    prog_ctx pc = {quiet, isatty(2) == 1, 0};
    pc.peak = train_matmul_peak(1, 256, 256, 256, 300) * threads;
    o.progress = progress, o.progress_ctx = &pc;
    o.progress_every = pc.tty ? 5 : 100;
    train_result res;
    if (train_run(dm, &st, d, n_train, &o, &res, err, sizeof err) != 0) {
        fprintf(stderr, "%sspecd distill-draft: %s\n", pc.tty && !quiet ? "\n" : "", err);
        goto done;
    }
    if (!quiet && pc.tty) fprintf(stderr, "\n");
    if (train_evaluate(dm, d, n_train, d->n, threads, eval_temp, &e1g) != 0) goto oom;
    char desc[512];
    snprintf(desc, sizeof desc,
             "draft distilled by specd distill-draft from %s: held-out acceptance %.3f greedy, %.3f at T=%.2f", m->name,
             e1g.acc_greedy, e1g.acc_temp, eval_temp);
    char name[160];
    snprintf(name, sizeof name, "%s-draft", m->name[0] ? m->name : "specd");
    if (train_gguf_save(dm, out, m->gguf, (ggml_type)wtype, name, desc, err, sizeof err) != 0) {
        fprintf(stderr, "specd distill-draft: %s\n", err);
        goto done;
    }
    /* the file pairs with the target: the same tokenizer */
    {
        gguf_file *gf = gguf_open(out, NULL, err, sizeof err);
        tokenizer *dt = gf ? tok_create(gf, err, sizeof err) : NULL;
        char diff[256] = "";
        int same = dt && tok_compare(tok, dt, diff, sizeof diff) == 0 && tok_hash(dt) == tok_hash(tok);
        printf("%s: tokenizer hash %016llx %s the target's%s%s\n", out, dt ? (unsigned long long)tok_hash(dt) : 0ull,
               same ? "==" : "!=", same ? "" : ": ", same ? "" : (dt ? diff : err));
        tok_destroy(dt);
        gguf_close(gf);
        if (!same) goto done;
    }
    double total = (now_ms() - t_start) / 1e3;
    double fl_s = res.seconds > 0 ? res.flops / res.seconds : 0;
    printf("%s after %lld steps: target outputs %.1f s, training %.1f s (%.0f positions/s, %.2f GFLOP/s = %.0f%% of "
           "the %.2f GFLOP/s matmul peak on %d thread%s), total %.1f s\n",
           res.interrupted ? "interrupted" : "done", (long long)st.step, t_gen, res.seconds,
           res.seconds > 0 ? res.positions / res.seconds : 0, fl_s / 1e9, pc.peak > 0 ? 100 * fl_s / pc.peak : 0,
           pc.peak / 1e9, threads, threads > 1 ? "s" : "", total);
    if (!resume)
        printf("held-out acceptance, random init: greedy %.3f, T=%.2f %.3f (KL %.3f)\n", e0g.acc_greedy, eval_temp,
               e0g.acc_temp, e0g.kl);
    printf("held-out acceptance, trained:     greedy %.3f, T=%.2f %.3f (KL %.3f, CE %.3f, %lld positions)\n",
           e1g.acc_greedy, eval_temp, e1g.acc_temp, e1g.kl, e1g.ce, (long long)e1g.positions);
    if (compare) {
        train_model *cm = train_gguf_load(compare, err, sizeof err);
        train_eval ce;
        if (!cm || cm->c.V != V) {
            fprintf(stderr, "specd distill-draft: --compare %s: %s\n", compare, cm ? "another vocabulary size" : err);
        } else if (train_evaluate(cm, d, n_train, d->n, threads, eval_temp, &ce) == 0) {
            printf("held-out acceptance, %s: greedy %.3f, T=%.2f %.3f (KL %.3f, CE %.3f)\n", compare, ce.acc_greedy,
                   eval_temp, ce.acc_temp, ce.kl, ce.ce);
            printf("summary_compare acc_greedy=%.6f acc_temp=%.6f kl=%.6f\n", ce.acc_greedy, ce.acc_temp, ce.kl);
        }
        train_model_destroy(cm);
    }
    printf("summary acc0_greedy=%.6f acc0_temp=%.6f acc_greedy=%.6f acc_temp=%.6f kl=%.6f last_loss=%.6f steps=%lld "
           "seconds=%.3f params=%zu bytes=%.0f\n",
           resume ? -1.0 : e0g.acc_greedy, resume ? -1.0 : e0g.acc_temp, e1g.acc_greedy, e1g.acc_temp, e1g.kl,
           res.last_loss, (long long)st.step, total, dm->n_params, draft_bytes);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "specd distill-draft: out of memory\n");
done:
    cli_restore_sigint(&old);
    train_prompts_free(&tp);
    train_state_free(&st);
    train_model_destroy(dm);
    train_data_destroy(d);
    tok_destroy(tok);
    model_free(m);
    backend_destroy(be);
    return rc;
}
