/* cmd_eval.c — `specd eval`: logits of every position of a token sequence,
 * written as raw float32 (n_tokens, n_vocab). Used by the reference tests to
 * compare the forward pass with an independent implementation, and to check
 * that prefill-then-decode equals one long prefill (--split). */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/model/model.h"

#include <stdlib.h>
#include <string.h>

static void eval_usage(FILE *f) {
    fprintf(f, "usage: specd eval -m MODEL.gguf --tokens \"ID ID ...\" [--split N] [-t THREADS] -o OUT.bin\n"
               "  writes float32 logits (n_tokens, n_vocab); --split N: N tokens in one call, then one per call\n");
}

int cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *tokens_arg = NULL, *out_path = NULL;
    int split = -1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--tokens")) tokens_arg = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--split")) split = (int)arg_long(argc, argv, &i, 1, 1 << 20);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "-o")) out_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            eval_usage(stdout);
            return 0;
        } else
            return cli_unknown_option("eval", a, eval_usage);
    }
    if (!model_path || !tokens_arg || !out_path) {
        fprintf(stderr, "specd eval: -m, --tokens and -o are required\n");
        eval_usage(stderr);
        return 2;
    }
    int cap = 16, n = 0;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap);
    for (const char *p = tokens_arg; toks;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            fprintf(stderr, "specd eval: bad token list near '%s'\n", p);
            free(toks);
            return 2;
        }
        if (n == cap) toks = realloc(toks, sizeof(int32_t) * (size_t)(cap *= 2));
        if (toks) toks[n++] = (int32_t)v;
        p = end;
    }
    if (!toks || n == 0) {
        fprintf(stderr, "specd eval: no tokens\n");
        free(toks);
        return 2;
    }
    char err[768];
    int rc = 1;
    backend *be = backend_cpu_create(threads);
    model_params mp = {.max_batch = n > 512 ? n : 512};
    engine_status est;
    model *m = model_load(model_path, be, &mp, &est, err, sizeof(err));
    kv_pool *pool = NULL;
    kv_seq *seq = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    if (!m) {
        cli_load_failed("eval", est, err, CLI_OOM_HINT_MODEL);
        goto done;
    }
    pool = model_kv_pool(m, 16, (n + 15) / 16 + 1, &est, err, sizeof(err));
    seq = pool ? kv_seq_create(pool, n) : NULL;
    logits = malloc(sizeof(float) * (size_t)n * (size_t)m->hp.n_vocab);
    if (!pool) {
        cli_load_failed("eval", est, err, "a shorter text, or a smaller model");
        goto done;
    }
    if (!seq || !logits) {
        fprintf(stderr, "specd eval: out of memory\n");
        goto done;
    }
    int first = split > 0 && split < n ? split : n;
    model_seq s = {.kv = seq, .n = first, .tokens = toks, .all_logits = true};
    if (model_forward(m, pool, &s, 1, logits, err, sizeof(err)) != 0) goto fail;
    for (int i = first; i < n; i++) {
        s = (model_seq){.kv = seq, .n = 1, .tokens = toks + i, .all_logits = true};
        if (model_forward(m, pool, &s, 1, logits + (size_t)i * m->hp.n_vocab, err, sizeof(err)) != 0) goto fail;
    }
    if (!(f = fopen(out_path, "wb")) ||
        fwrite(logits, sizeof(float) * (size_t)m->hp.n_vocab, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "specd eval: cannot write %s\n", out_path);
        goto done;
    }
    f = NULL;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "specd eval: %s\n", err);
done:
    if (f) fclose(f);
    free(toks);
    free(logits);
    if (pool) kv_seq_destroy(pool, seq);
    kv_pool_destroy(pool);
    model_free(m);
    backend_destroy(be);
    return rc;
}
