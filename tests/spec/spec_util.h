/* spec_util.h — shared helpers of the speculation tests (header-only): model
 * paths, corpus prompts, an independent plain-greedy reference built on
 * model_forward alone, a generation loop over the spec API, and the cache
 * check that compares a sequence's KV caches with a fresh prefill. */
#ifndef SPECD_TEST_SPEC_UTIL_H
#define SPECD_TEST_SPEC_UTIL_H

#include "engine/spec/proposers/draft_model.h"
#include "engine/spec/proposers/pair_load.h"
#include "cli/mkmodel.h"
#include "engine/spec/spec.h"
#include "tests/spec/test_drafter.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SU_MAX_PROMPT 96
#define SU_MAX_GEN 512

/* A scratch directory for generated models (removed by su_tmp_cleanup). */
static char su_tmpdir[256];
static inline const char *su_tmp_path(char *buf, size_t n, const char *name) {
    if (!su_tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(su_tmpdir, sizeof(su_tmpdir), "%s/specd-spec-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(su_tmpdir)) {
            fprintf(stderr, "cannot create %s\n", su_tmpdir);
            exit(1);
        }
    }
    snprintf(buf, n, "%s/%s", su_tmpdir, name);
    return buf;
}
static inline void su_tmp_cleanup(const char *const *names, int n) {
    char p[512];
    for (int i = 0; i < n; i++) unlink(su_tmp_path(p, sizeof(p), names[i]));
    if (su_tmpdir[0]) rmdir(su_tmpdir);
}

/* A random llama model (F32) sharing tok_src's tokenizer; aborts the test on failure. */
static inline void su_mkmodel(const char *out, const char *tok_src, uint64_t seed, int layers, int dim, int ff, int ctx) {
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.n_layers = layers, o.dim = dim, o.n_heads = 4, o.n_kv_heads = 2, o.ff = ff, o.ctx = ctx;
    o.seed = seed, o.tokenizer_path = tok_src, o.name = "spec-test";
    char err[512];
    if (mkmodel_random(out, &o, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel_random %s: %s\n", out, err);
        exit(1);
    }
}

static inline spec_pair *su_load(const char *target, const char *draft, backend *be, int max_ctx) {
    spec_pair_params pp = {.max_ctx = max_ctx, .kv_blocks = 3 * ((max_ctx + GAMMA_MAX + 2) / 16 + 2) + 8};
    char err[1024];
    spec_pair *sp = spec_pair_load(target, draft, be, &pp, NULL, NULL, err, sizeof(err));
    if (!sp) {
        fprintf(stderr, "spec_pair_load(%s, %s): %s\n", target, draft ? draft : "-", err);
        exit(1);
    }
    return sp;
}

typedef struct {
    int32_t ids[SU_MAX_PROMPT];
    int n;
} su_prompt;

/* Up to max distinct short prompts (BOS + a few words) cut from the TinyStories
 * corpus at sentence starts, of varying length. Returns how many. */
static inline int su_prompts(const tokenizer *tok, su_prompt *out, int max) {
    char path[512];
    tu_model(path, sizeof(path), "corpora/tinystories_valid_30K.txt");
    FILE *f = fopen(path, "rb");
    if (!f) SKIP("cannot open %s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = 0;
    int n = 0;
    size_t at = 0;
    while (n < max && at < len) {
        /* next sentence start */
        const char *s = strstr(text + at, ". ");
        if (!s) break;
        size_t start = (size_t)(s - text) + 2;
        at = start + 1;
        /* 1..8 words depending on n: short prefixes, varied */
        int words = 1 + (n * 5) % 8;
        size_t e = start;
        for (int w = 0; w < words && e < len; w++) {
            while (e < len && text[e] == ' ') e++;
            while (e < len && text[e] != ' ' && text[e] != '\n') e++;
        }
        if (e <= start) continue;
        int k = tok_encode(tok, text + start, e - start, true, false, out[n].ids, SU_MAX_PROMPT);
        if (k <= 1 || k > SU_MAX_PROMPT) continue;
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = out[i].n == k && !memcmp(out[i].ids, out[n].ids, sizeof(int32_t) * (size_t)k);
        if (dup) continue;
        out[n].n = k;
        n++;
    }
    return n;
}

/* Feeds tokens into kv in chunks; the last row's logits land in logits. 0 or -1. */
static inline int su_feed(model *m, kv_pool *pool, kv_seq *kv, const int32_t *toks, int n, float *logits) {
    char err[512];
    for (int p = 0; p < n;) {
        int c = n - p < m->mp.max_batch ? n - p : m->mp.max_batch;
        model_seq ms = {.kv = kv, .n = c, .tokens = toks + p};
        if (model_forward(m, pool, &ms, 1, logits, err, sizeof(err)) != 0) return -1;
        p += c;
    }
    return 0;
}

/* The reference: plain greedy decoding with model_forward + argmax, one token
 * per call, independent of spec.c. Stops after an end-of-generation token, at
 * n_gen tokens, or when the context is full. Returns the tokens generated. */
static inline int su_plain_greedy(spec_pair *sp, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    float *logits = malloc(sizeof(float) * (size_t)sp->n_vocab);
    kv_seq *kv = kv_seq_create(sp->tpool, sp->target->mp.max_ctx + 1);
    int n = 0;
    if (!logits || !kv || su_feed(sp->target, sp->tpool, kv, prompt, n_prompt, logits) != 0) {
        fprintf(stderr, "plain reference: prefill failed\n");
        exit(1);
    }
    while (n < n_gen) {
        int32_t t = sampler_argmax(logits, sp->n_vocab);
        out[n++] = t;
        if (tok_is_eog(sp->tok, t) || n == n_gen) break;
        char err[256];
        model_seq ms = {.kv = kv, .n = 1, .tokens = &t};
        if (model_forward(sp->target, sp->tpool, &ms, 1, logits, err, sizeof(err)) != 0) break; /* context full */
    }
    kv_seq_destroy(sp->tpool, kv);
    free(logits);
    return n;
}

/* A step observer: called after every successful step (may be NULL). */
typedef void (*su_step_fn)(spec_seq *s, const spec_step_info *info, void *ctx);

/* Generates up to n_gen tokens through the spec API the way `specd generate`
 * does. Output (prompt excluded) goes to out; returns its length, or -1 on a
 * step failure other than a full context. *seq_out (optional) receives the
 * live sequence (caller frees), else it is freed here. */
static inline int su_generate(spec_pair *sp, const int32_t *prompt, int n_prompt, int n_gen, const spec_seq_params *prm,
                       int32_t *out, su_step_fn fn, void *ctx, spec_seq **seq_out) {
    char err[512];
    spec_seq *s = spec_seq_start(sp, prompt, n_prompt, prm, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "spec_seq_start: %s\n", err);
        return -1;
    }
    int rc = 0;
    for (;;) {
        int made = s->n_tokens - n_prompt;
        if (made >= n_gen || tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) break;
        spec_step_info info;
        if (spec_seq_step(s, n_gen - made, &info, err, sizeof(err)) != 0) {
            if (!strstr(err, "context full")) {
                fprintf(stderr, "spec_seq_step: %s\n", err);
                rc = -1;
            }
            break;
        }
        if (fn) fn(s, &info, ctx);
    }
    int made = s->n_tokens - n_prompt;
    if (made > n_gen) made = n_gen;
    memcpy(out, s->tokens + n_prompt, sizeof(int32_t) * (size_t)made);
    if (seq_out) *seq_out = s;
    else spec_seq_free(s);
    return rc ? -1 : made;
}

/* Parameters for greedy or sampled decoding with a fixed γ (gamma > 0),
 * adaptive within [1, gamma] (adaptive), or plain (gamma == 0). */
static inline spec_seq_params su_params(float temp, uint64_t seed, int gamma, bool adaptive) {
    spec_seq_params p = {.sc = sampler_config_default(), .seed = seed, .gp = gamma_params_default(),
                         .speculate = gamma > 0};
    p.sc.temperature = temp;
    if (gamma > 0) {
        p.gp.adaptive = adaptive;
        p.gp.gamma_min = 1;
        p.gp.gamma_max = gamma;
        p.gp.gamma_default = gamma;
    }
    return p;
}

/* Largest |a-b| relative to max |b|. */
static inline double su_rel_diff(const float *a, const float *b, int n, int *identical) {
    double md = 0, mb = 0;
    int same = 1;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) same = 0;
    }
    if (identical) *identical = same;
    return mb > 0 ? md / mb : md;
}

/* KV contents of positions [0, len) of a against b (same pool shape). */
static inline double su_kv_diff(const kv_pool *p, const kv_seq *a, const kv_seq *b, int len) {
    double md = 0, mb = 0;
    int B = p->block_size, D = p->kv_dim, E = p->head_dim;
    for (int pos = 0; pos < len; pos++)
        for (int l = 0; l < p->n_layer; l++)
            for (int h = 0; h < D / E; h++) { /* a layer's block is (Hkv, B, E) */
                size_t in = ((size_t)l * B * D) + ((size_t)h * B + pos % B) * E;
                size_t oa = (size_t)a->blocks[pos / B] * p->block_stride + in;
                size_t ob = (size_t)b->blocks[pos / B] * p->block_stride + in;
                const float *pk = p->k, *pv = p->v; /* an F32 pool */
                for (int i = 0; i < E; i++) {
                    double dk = fabs((double)pk[oa + i] - pk[ob + i]);
                    double dv = fabs((double)pv[oa + i] - pv[ob + i]);
                    if (dk > md) md = dk;
                    if (dv > md) md = dv;
                    if (fabs((double)pk[ob + i]) > mb) mb = fabs((double)pk[ob + i]);
                    if (fabs((double)pv[ob + i]) > mb) mb = fabs((double)pv[ob + i]);
                }
            }
    return mb > 0 ? md / mb : md;
}

/* Tolerances of the cache checks, relative to the largest magnitude. The
 * sequence's cache was filled in other batch shapes (prompt prefill, γ+1
 * verify rows, 1-token steps, catch-ups) than the fresh prefill, and the CPU
 * matmul's summation order may depend on the number of rows, so equality is
 * up to float rounding (observed: K/V ≤ 2e-6, logits ≤ 1.1e-5 through 5
 * layers); a stale, missing or shifted position differs by orders more. */
#define SU_TOL_KV 2e-5
#define SU_TOL_LOGITS 1e-4

typedef struct {
    long checks, identical_logits, kv_checks;
    double worst, worst_kv;  /* largest relative difference of logits, of K/V */
} su_cache_stats;

/* One model's cache against a fresh prefill of tokens[0..n): the cached
 * positions [0, len) must match the fresh cache's, and the next-step logits
 * (after feeding tokens[len..n) into the sequence's own cache, then rolling it
 * back) must match the fresh prefill's last logits — when the context has room. */
static inline void su_check_one(const char *what, model *m, kv_pool *pool, kv_seq *kv, const int32_t *tokens, int n,
                         su_cache_stats *cs) {
    int len = kv->len, V = m->hp.n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    kv_seq *f = kv_seq_create(pool, n + 1);
    CHECK(a && b && f);
    /* contents: a fresh cache of the same positions */
    if (len > 0) {
        CHECKF(su_feed(m, pool, f, tokens, len, b) == 0, "%s: fresh prefill of %d failed", what, len);
        double d = su_kv_diff(pool, kv, f, len);
        CHECKF(d <= SU_TOL_KV, "%s: cached K/V of %d positions differ from a fresh prefill by %.3g (rel)", what, len, d);
        cs->kv_checks++;
        if (d > cs->worst_kv) cs->worst_kv = d;
    }
    /* next-step logits, when the context can take the rest: the sequence's cache
     * and the fresh one are fed the same tokens[len..n) */
    if (n <= m->mp.max_ctx) {
        CHECKF(su_feed(m, pool, kv, tokens + len, n - len, a) == 0, "%s: feeding the sequence's cache failed", what);
        kv_seq_truncate(pool, kv, len);
        CHECKF(su_feed(m, pool, f, tokens + len, n - len, b) == 0, "%s: fresh prefill of %d failed", what, n);
        int same;
        double d = su_rel_diff(a, b, V, &same);
        CHECKF(d <= SU_TOL_LOGITS, "%s: next-step logits differ from a fresh prefill of %d tokens by %.3g (rel)", what, n, d);
        cs->checks++;
        cs->identical_logits += same;
        if (d > cs->worst) cs->worst = d;
    }
    kv_seq_destroy(pool, f);
    free(a);
    free(b);
}

static inline void su_cache_print(const su_cache_stats *cs) {
    fprintf(stderr, "%ld K/V + %ld logits checks against fresh prefills (%ld logits bit-identical), worst rel diff "
                    "K/V %.2g, logits %.2g", cs->kv_checks, cs->checks, cs->identical_logits, cs->worst_kv, cs->worst);
}

/* The draft model's pieces behind the drafter interface (NULL without one). */
static inline drafter *su_draft_drafter(const spec_pair *sp) {
    drafter *d = sp->drafters[SPEC_DRAFTER_MODEL];
    return d && d->i == &test_drafter_i ? ((test_drafter *)d)->inner : d; /* see through fault injection */
}
static inline model *su_draft(const spec_pair *sp) { return draft_model_model(su_draft_drafter(sp)); }
static inline kv_pool *su_dpool(const spec_pair *sp) { return draft_model_pool(su_draft_drafter(sp)); }
static inline kv_seq *su_dkv(const spec_seq *s) { return draft_model_kv(s->ds[SPEC_DRAFTER_MODEL]); }

/* The spec.h cache invariant and contents after a step. */
static inline void su_check_caches(spec_seq *s, su_cache_stats *cs) {
    spec_pair *sp = s->sp;
    int n = s->n_tokens;
    CHECKF(s->tkv->len == n - 1, "target cache holds %d positions, want %d", s->tkv->len, n - 1);
    kv_seq *dkv = su_dkv(s);
    if (dkv) CHECKF(dkv->len <= n - 1, "draft cache holds %d positions, more than %d", dkv->len, n - 1);
    if (s->tkv->len != n - 1) return;
    su_check_one("target", sp->target, sp->tpool, s->tkv, s->tokens, n, cs);
    if (dkv && dkv->len <= n - 1) su_check_one("draft", su_draft(sp), su_dpool(sp), dkv, s->tokens, n, cs);
}

#endif
