/* train_prompts.c — corpus and target-written prompts for the distilling
 * trainers (see train_prompts.h). */
#include "cli/train_prompts.h"
#include "cli/util.h"
#include "engine/util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits text into lines of at least 8 bytes. */
static int next_line(const char **p, const char *end, const char **ds, size_t *dl) {
    while (*p < end) {
        const char *s = *p, *e = s;
        while (e < end && *e != '\n') e++;
        *p = e < end ? e + 1 : end;
        while (s < e && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        if (e - s >= 8) {
            *ds = s, *dl = (size_t)(e - s);
            return 1;
        }
    }
    return 0;
}

/* appends a copy of toks[0, n) with warm-up warm; -1 when out of memory */
static int add(train_prompts *tp, const int32_t *toks, int n, int warm) {
    if (tp->n == tp->cap) {
        int nc = tp->cap ? 2 * tp->cap : 1024;
        int32_t **a = realloc(tp->p, sizeof(*tp->p) * (size_t)nc);
        if (a) tp->p = a;
        int *b = a ? realloc(tp->len, sizeof(int) * (size_t)nc) : NULL;
        if (b) tp->len = b;
        int *w = b ? realloc(tp->warm, sizeof(int) * (size_t)nc) : NULL;
        if (!w) return -1;
        tp->warm = w, tp->cap = nc;
    }
    if (!(tp->p[tp->n] = malloc(sizeof(int32_t) * (size_t)n))) return -1;
    memcpy(tp->p[tp->n], toks, sizeof(int32_t) * (size_t)n);
    tp->len[tp->n] = n, tp->warm[tp->n++] = warm;
    return 0;
}

/* the next sentence start in [s, e) after s: past ". ", "! ", "? " (and
 * closing quotes); e when none */
static const char *next_sentence(const char *s, const char *e) {
    for (const char *p = s; p + 1 < e; p++)
        if ((*p == '.' || *p == '!' || *p == '?') && p[1] == ' ') {
            p += 2;
            while (p < e && *p == ' ') p++;
            return p;
        }
    return e;
}

int train_prompts_build(train_prompts *tp, const tokenizer *tok, const char *const *corpora, int n_corpora, int max,
                        int plen, bool sentences, int tprompts, uint64_t *rs, char *err, size_t errlen) {
    int32_t *toks = malloc(sizeof(int32_t) * 4096);
    if (!toks) return util_fail(err, errlen, "out of memory for the prompts");
    int from_corpus = 0;
    for (int c = 0; c < n_corpora && from_corpus < max; c++) {
        size_t len;
        char *text = read_file(corpora[c], &len);
        if (!text) {
            free(toks);
            return util_fail(err, errlen, "cannot read corpus %s", corpora[c]);
        }
        const char *p = text, *ds;
        size_t dl;
        while (from_corpus < max && next_line(&p, text + len, &ds, &dl)) {
            for (const char *q = ds, *e = ds + dl; q < e && from_corpus < max; q = sentences ? next_sentence(q, e) : e) {
                size_t ql = (size_t)(e - q) < 4096 ? (size_t)(e - q) : 4096;
                int n = tok_encode(tok, q, ql, true, false, toks, 4096);
                if (n < 0) n = 4096;
                if (n < 4) continue;
                /* prompt lengths vary from 4 tokens to plen */
                int want = 4 + (int)(util_splitmix64(rs) % (uint64_t)(plen > 4 ? plen - 3 : 1));
                if (want > n) want = n;
                if (add(tp, toks, want, 0) != 0) {
                    free(text), free(toks);
                    return util_fail(err, errlen, "out of memory for the prompts");
                }
                from_corpus++;
            }
        }
        free(text);
    }
    free(toks);
    if (tprompts > 0) {
        int32_t bos = tok_bos(tok);
        if (bos < 0) return util_fail(err, errlen, "prompts written by the target need a vocabulary with a BOS token");
        for (int i = 0; i < tprompts; i++)
            if (add(tp, &bos, 1, plen - 1) != 0) return util_fail(err, errlen, "out of memory for the prompts");
    }
    for (int i = tp->n - 1; i > 0; i--) { /* a seeded order: the held-out share comes from everywhere */
        int j = (int)(util_splitmix64(rs) % (uint64_t)(i + 1));
        int32_t *p = tp->p[i];
        int l = tp->len[i], w = tp->warm[i];
        tp->p[i] = tp->p[j], tp->len[i] = tp->len[j], tp->warm[i] = tp->warm[j];
        tp->p[j] = p, tp->len[j] = l, tp->warm[j] = w;
    }
    return 0;
}

void train_prompts_free(train_prompts *tp) {
    for (int i = 0; i < tp->n; i++) free(tp->p[i]);
    free(tp->p), free(tp->len), free(tp->warm);
    memset(tp, 0, sizeof(*tp));
}

int train_data_arg(const char *cmd, int argc, char **argv, int *i, train_data_args *a) {
    const char *o = argv[*i];
    if (!strcmp(o, "--corpus")) {
        if (a->n_corpora == 16) {
            fprintf(stderr, "specd %s: at most 16 --corpus files\n", cmd);
            return -1;
        }
        a->corpora[a->n_corpora++] = arg_str(argc, argv, i);
    } else if (!strcmp(o, "--prompts")) a->max_prompts = (int)arg_long(argc, argv, i, 0, 100000000);
    else if (!strcmp(o, "--target-prompts")) a->tprompts = (int)arg_long(argc, argv, i, 0, 100000000);
    else if (!strcmp(o, "--prompt-len")) a->plen = (int)arg_long(argc, argv, i, 2, 4096);
    else if (!strcmp(o, "--prompt-temp")) a->prompt_temp = (float)arg_double(argc, argv, i, 0, 4);
    else if (!strcmp(o, "--gen-len")) a->gen = (int)arg_long(argc, argv, i, 1, 4096);
    else if (!strcmp(o, "--gen-temp")) {
        const char *v = arg_str(argc, argv, i), *q = v;
        a->n_gen_temps = 0;
        for (;;) {
            char *end;
            double t = strtod(q, &end);
            if (end == q || t < 0 || t > 4 || a->n_gen_temps == 8 || (*end && *end != ',')) {
                fprintf(stderr, "specd %s: --gen-temp %s: give up to 8 temperatures in [0, 4], comma-separated\n", cmd,
                        v);
                return -1;
            }
            a->gen_temps[a->n_gen_temps++] = (float)t;
            if (!*end) break;
            q = end + 1;
        }
        a->gen_temp = a->gen_temps[0];
        if (a->n_gen_temps == 1) a->n_gen_temps = 0;
    }
    else if (!strcmp(o, "--gen-batch")) a->gbatch = (int)arg_long(argc, argv, i, 1, 4096);
    else if (!strcmp(o, "--topk")) a->topk = (int)arg_long(argc, argv, i, 1, 1024);
    else return 0;
    return 1;
}

float train_gen_temp(const train_data_args *a, int chunk) {
    return a->n_gen_temps > 0 ? a->gen_temps[chunk % a->n_gen_temps] : a->gen_temp;
}

model *train_target_load(const char *cmd, const char *path, int threads, const train_data_args *da, backend **be,
                         tokenizer **tok) {
    char err[1024];
    *be = backend_cpu_create(threads);
    model_params mp = {.max_batch = da->gbatch > 512 ? da->gbatch : 512, .max_ctx = da->plen + da->gen + 8};
    engine_status est;
    model *m = model_load(path, *be, &mp, &est, err, sizeof err);
    if (!m) {
        cli_load_failed(cmd, est, err, "lower --gen-batch, or use a smaller model");
        backend_destroy(*be);
        return NULL;
    }
    if (!(*tok = tok_create(m->gguf, err, sizeof err))) {
        fprintf(stderr, "specd %s: %s: %s\n", cmd, path, err);
        model_free(m);
        backend_destroy(*be);
        return NULL;
    }
    return m;
}
