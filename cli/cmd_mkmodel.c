/* cmd_mkmodel.c — `specd mkmodel`: random llama models, --widen of a real model,
 * --quantize to another weight type. Parsing and printing only; see cli/mkmodel.h. */
#include <stdio.h>
#include <string.h>

#include "cli/cmd.h"
#include "cli/util.h"
#include "cli/mkmodel.h"

static void mkmodel_usage(FILE *f)
{
    fputs("usage:\n"
          "  specd mkmodel -o OUT.gguf [--layers N] [--dim N] [--heads N] [--kv-heads N] [--head-dim N]\n"
          "                [--ff N] [--vocab N] [--ctx N] [--type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k] [--seed S]\n"
          "                [--tokenizer SRC.gguf] [--rope-base F] [--eps F] [--tied]\n"
          "                [--rope-scaling llama3] [--name NAME] [--arch llama|qwen2|qwen3|mistral|eagle3]\n"
          "                [--chat-template FILE]   (a Jinja template, written as tokenizer.chat_template)\n"
          "                [--sliding-window W]\n"
          "      a llama model with RANDOM weights (for speed tests and plumbing, not for text);\n"
          "      --arch qwen2: QKV biases, NeoX RoPE, rope base 1e6; --arch qwen3: per-head q/k\n"
          "      RMSNorm, no biases, NeoX RoPE, rope base 1e6; --arch mistral: llama with a\n"
          "      sliding attention window (default 8); --arch eagle3: an EAGLE-3 draft head of one\n"
          "      layer for a target of hidden size --dim and --vocab tokens (model.h's layout)\n"
          "  specd mkmodel -o OUT.gguf --widen SRC.gguf [--dim N] [--heads N] [--kv-heads N]\n"
          "                [--head-dim N] [--ff N] [--layers N] [--type T] [--seed S]\n"
          "      a bigger model computing the same function as SRC (same logits up to rounding)\n"
          "  specd mkmodel -o OUT.gguf --quantize TYPE SRC.gguf\n"
          "      SRC with every matrix converted to TYPE (norms stay f32)\n", f);
}

static int parse_type(const char *s)
{
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"};
    static const int types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (int i = 0; i < 8; i++)
        if (strcasecmp(s, names[i]) == 0) return types[i];
    return -1;
}

static void upper(char *dst, const char *src, size_t n)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < n; i++) dst[i] = (src[i] >= 'a' && src[i] <= 'z') ? src[i] - 32 : src[i];
    dst[i] = 0;
}

int cmd_mkmodel(int argc, char **argv)
{
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    const char *out = NULL, *widen = NULL, *qtype = NULL, *qsrc = NULL;
    bool shape_flags = false, random_flags = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { mkmodel_usage(stdout); return 0; }
        else if (!strcmp(a, "-o")) out = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--widen")) widen = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--quantize")) {
            qtype = arg_str(argc, argv, &i);
            qsrc = arg_str(argc, argv, &i);
        }
        else if (!strcmp(a, "--layers")) { o.n_layers = (int)arg_long(argc, argv, &i, 1, 4096); shape_flags = true; }
        else if (!strcmp(a, "--dim")) { o.dim = (int)arg_long(argc, argv, &i, 1, 1 << 20); shape_flags = true; }
        else if (!strcmp(a, "--heads")) { o.n_heads = (int)arg_long(argc, argv, &i, 1, 1 << 20); shape_flags = true; }
        else if (!strcmp(a, "--kv-heads")) { o.n_kv_heads = (int)arg_long(argc, argv, &i, 1, 1 << 20); shape_flags = true; }
        else if (!strcmp(a, "--head-dim")) { o.head_dim = (int)arg_long(argc, argv, &i, 1, 1 << 20); shape_flags = true; }
        else if (!strcmp(a, "--ff")) { o.ff = (int)arg_long(argc, argv, &i, 1, 1 << 20); shape_flags = true; }
        else if (!strcmp(a, "--ctx")) { o.ctx = (int)arg_long(argc, argv, &i, 1, 1 << 24); shape_flags = true; }
        else if (!strcmp(a, "--vocab")) { o.vocab = (int)arg_long(argc, argv, &i, 1, 1 << 20); random_flags = true; }
        else if (!strcmp(a, "--seed")) { o.seed = arg_u64(argc, argv, &i); shape_flags = true; }
        else if (!strcmp(a, "--type")) {
            const char *t = arg_str(argc, argv, &i);
            if ((o.type = parse_type(t)) < 0) {
                fprintf(stderr, "specd mkmodel: --type must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k (got '%s')\n", t);
                return 2;
            }
            shape_flags = true;
        }
        else if (!strcmp(a, "--tokenizer")) { o.tokenizer_path = arg_str(argc, argv, &i); random_flags = true; }
        else if (!strcmp(a, "--chat-template")) { o.chat_template_path = arg_str(argc, argv, &i); random_flags = true; }
        else if (!strcmp(a, "--rope-base")) { o.rope_base = (float)arg_double(argc, argv, &i, 1.0001, 1e12); random_flags = true; }
        else if (!strcmp(a, "--eps")) { o.eps = (float)arg_double(argc, argv, &i, 1e-30, 1.0); random_flags = true; }
        else if (!strcmp(a, "--tied")) { o.tied = true; random_flags = true; }
        else if (!strcmp(a, "--arch")) { o.arch = arg_str(argc, argv, &i); random_flags = true; }
        else if (!strcmp(a, "--sliding-window")) { o.sliding_window = (int)arg_long(argc, argv, &i, 1, 1 << 30); random_flags = true; }
        else if (!strcmp(a, "--rope-scaling")) {
            const char *t = arg_str(argc, argv, &i);
            if (strcmp(t, "llama3") != 0) {
                fprintf(stderr, "specd mkmodel: --rope-scaling supports only 'llama3' (got '%s')\n", t);
                return 2;
            }
            o.rope_llama3 = true;
            random_flags = true;
        }
        else if (!strcmp(a, "--name")) { o.name = arg_str(argc, argv, &i); shape_flags = true; }
        else
            return cli_unknown_option("mkmodel", a, mkmodel_usage);
    }
    if (!out) {
        fprintf(stderr, "specd mkmodel: -o OUT.gguf is required\n");
        mkmodel_usage(stderr);
        return 2;
    }
    if (widen && qsrc) {
        fprintf(stderr, "specd mkmodel: --widen and --quantize cannot be combined\n");
        return 2;
    }
    if (qsrc && (shape_flags || random_flags)) {
        fprintf(stderr, "specd mkmodel: --quantize takes only -o, TYPE and SRC\n");
        return 2;
    }
    if (widen && random_flags) {
        fprintf(stderr, "specd mkmodel: --vocab, --tokenizer, --rope-*, --eps, --tied, --arch do not apply "
                        "to --widen (they come from the source)\n");
        return 2;
    }

    char err[1024];
    mkmodel_info info;
    const char *what;
    char whatbuf[1200];
    int rc;
    if (qsrc) {
        int t = parse_type(qtype);
        if (t < 0) {
            fprintf(stderr, "specd mkmodel: --quantize TYPE must be f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k (got '%s')\n", qtype);
            return 2;
        }
        rc = mkmodel_quantize(out, qsrc, t, &info, err, sizeof err);
        snprintf(whatbuf, sizeof whatbuf, "re-typed copy of %s", qsrc);
        what = whatbuf;
    } else if (widen) {
        rc = mkmodel_widen(out, widen, &o, &info, err, sizeof err);
        snprintf(whatbuf, sizeof whatbuf,
                 "function-preserving widening of %s (same outputs as the source)", widen);
        what = whatbuf;
    } else {
        rc = mkmodel_random(out, &o, &info, err, sizeof err);
        what = "RANDOM weights (not a trained model: output is gibberish)";
    }
    if (rc) {
        fprintf(stderr, "specd mkmodel: %s\n", err);
        return 1;
    }
    char tname[16];
    upper(tname, ggml_type_name(info.type), sizeof tname);
    const char *arch = info.arch[0] ? info.arch : "llama";
    printf("wrote %s: %s, %d layers, dim %d, %d heads (%d kv, head dim %d), ff %d, vocab %d%s, "
           "%.1fM params, %s, %.0f MB \xe2\x80\x94 %s\n",
           out, arch, info.n_layers, info.dim, info.n_heads, info.n_kv_heads, info.head_dim, info.ff, info.vocab,
           info.tied ? " (tied output)" : "", info.n_params / 1e6, tname, info.file_bytes / 1e6, what);
    return 0;
}
