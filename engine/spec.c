/* spec.c — draft/target pairing and the per-sequence speculation step
 * (see spec.h for the cache invariant). */
#include "engine/spec.h"

#include "engine/errkind.h"
#include "engine/rng.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static double spec_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int spec_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- statistics ---------------------------------------------------------- */

double spec_stats_alpha(const spec_stats *s) {
    uint64_t d = s->accepted + s->rejections;
    return d ? (double)s->accepted / (double)d : 0.0;
}

double spec_stats_mean_accepted(const spec_stats *s) {
    return s->verify_steps ? (double)s->accepted / (double)s->verify_steps : 0.0;
}

double spec_stats_tokens_per_pass(const spec_stats *s) {
    uint64_t passes = s->verify_steps + s->plain_steps;
    return passes ? (double)s->tokens / (double)passes : 0.0;
}

void spec_stats_add(spec_stats *a, const spec_stats *s) {
    a->verify_steps += s->verify_steps, a->plain_steps += s->plain_steps, a->drafted += s->drafted;
    a->accepted += s->accepted, a->rejections += s->rejections, a->tokens += s->tokens;
    for (int i = 0; i < GAMMA_MAX; i++) a->pos_reached[i] += s->pos_reached[i], a->pos_accepted[i] += s->pos_accepted[i];
    a->fallbacks += s->fallbacks, a->probes += s->probes, a->draft_failures += s->draft_failures;
    a->kv_resets += s->kv_resets, a->draft_ms += s->draft_ms, a->target_ms += s->target_ms;
}

/* ---- identity ------------------------------------------------------------- */

void spec_model_identity(const model *m, const tokenizer *t, spec_model_id *out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->arch, sizeof(out->arch), "%s", m->arch);
    out->n_layer = m->hp.n_layer, out->dim = m->hp.dim, out->n_head = m->hp.n_head;
    out->n_kv_head = m->hp.n_kv_head, out->ff = m->hp.ff, out->n_vocab = m->hp.n_vocab;
    snprintf(out->weight_type, sizeof(out->weight_type), "%s", ggml_type_name(m->layers[0].wq.file_type));
    /* the header holds every metadata value and tensor name/shape/type/offset;
     * with the file size it identifies the file without reading gigabytes */
    uint64_t h = 1469598103934665603ull;
    const uint8_t *b = m->gguf->base;
    size_t hdr = m->gguf->data_offset < m->gguf->size ? (size_t)m->gguf->data_offset : m->gguf->size;
    for (size_t i = 0; i < hdr; i++) h = (h ^ b[i]) * 1099511628211ull;
    uint64_t sz = m->gguf->size;
    for (int i = 0; i < 8; i++) h = (h ^ ((sz >> (8 * i)) & 0xff)) * 1099511628211ull;
    out->header_hash = h;
    out->tokenizer_hash = tok_hash(t);
    snprintf(out->id, sizeof(out->id), "%s-%016llx", m->arch, (unsigned long long)h);
}

/* ---- the pair ------------------------------------------------------------- */

void spec_pair_free(spec_pair *sp) {
    if (!sp) return;
    kv_pool_destroy(sp->tpool);
    kv_pool_destroy(sp->dpool);
    model_free(sp->target);
    model_free(sp->draft);
    tok_destroy(sp->tok);
    sampler_destroy(sp->smp);
    free(sp->p);
    free(sp->logits);
    free(sp->scratch);
    free(sp->ms);
    free(sp->row_of);
    free(sp->gam);
    free(sp);
}

/* The brief's "draft model OOM": keep serving with plain decoding. why is an
 * err_is_oom error (errkind.h); its prefix would repeat the warning. */
static void draft_dropped(spec_pair *sp, const char *draft_path, const char *why, FILE *log) {
    sp->draft_oom = true;
    if (log)
        fprintf(log, "specd: WARNING: draft %s does not fit in memory (%s); decoding without speculation\n",
                draft_path, why + strlen(SPECD_ERR_OOM));
}

spec_pair *spec_pair_load(const char *target_path, const char *draft_path, backend *be, const spec_pair_params *pp,
                          FILE *log, char *err, size_t errlen) {
    spec_pair_params prm = pp ? *pp : (spec_pair_params){0};
    if (prm.block_size <= 0) prm.block_size = 16;
    if (prm.draft_mem_warn_pct <= 0) prm.draft_mem_warn_pct = 20.0f;
    char sub[640];
    spec_pair *sp = calloc(1, sizeof(*sp));
    if (!sp) return spec_fail(err, errlen, "out of memory"), NULL;
    model_params mp = {.max_batch = 512, .max_ctx = prm.max_ctx};
    if (prm.tensor_parallel > 1) {
        if (!prm.target_shards || prm.target_shards[0] != be) {
            spec_fail(err, errlen, "tensor parallelism: shard 0 must be the pair's backend");
            goto fail_quiet;
        }
        sp->target = model_load_tp(target_path, prm.target_shards, prm.tensor_parallel, prm.tp_comm, &mp, err, errlen);
    } else {
        sp->target = model_load(target_path, be, &mp, err, errlen);
    }
    if (!sp->target) goto fail_quiet;
    if (!(sp->tok = tok_create(sp->target->gguf, sub, sizeof(sub)))) {
        spec_fail(err, errlen, "%s: %s", target_path, sub);
        goto fail_quiet;
    }
    sp->n_vocab = sp->target->hp.n_vocab;
    if (tok_n_vocab(sp->tok) != sp->n_vocab) {
        spec_fail(err, errlen, "%s: tokenizer has %d tokens but the model's vocabulary is %d", target_path,
                  tok_n_vocab(sp->tok), sp->n_vocab);
        goto fail_quiet;
    }
    int max_ctx = sp->target->mp.max_ctx;
    if (draft_path) {
        mp.max_ctx = max_ctx;
        if (!(sp->draft = model_load(draft_path, be, &mp, err, errlen))) {
            if (!err_is_oom(err)) goto fail_quiet;
            draft_dropped(sp, draft_path, err, log);
            draft_path = NULL;
        }
    }
    if (draft_path) {
        tokenizer *dt = tok_create(sp->draft->gguf, sub, sizeof(sub));
        if (!dt) {
            spec_fail(err, errlen, "draft %s: %s", draft_path, sub);
            goto fail_quiet;
        }
        int diff = tok_compare(sp->tok, dt, sub, sizeof(sub));
        spec_model_identity(sp->draft, dt, &sp->draft_id);
        tok_destroy(dt);
        if (diff != 0) {
            spec_fail(err, errlen, "draft %s refused: its tokenizer differs from the target's (%s); draft and target "
                      "must share one vocabulary", draft_path, sub);
            goto fail_quiet;
        }
        if (sp->draft->hp.n_vocab != sp->n_vocab) {
            spec_fail(err, errlen, "draft %s refused: vocabulary %d vs target %d", draft_path, sp->draft->hp.n_vocab,
                      sp->n_vocab);
            goto fail_quiet;
        }
        if (sp->draft->mp.max_ctx < max_ctx) max_ctx = sp->draft->mp.max_ctx;
    }
    spec_model_identity(sp->target, sp->tok, &sp->target_id);
    /* one full-context sequence, the γ+1 verify overhang, and calibration */
    sp->max_ctx = max_ctx;
    int blocks = prm.kv_blocks > 0 ? prm.kv_blocks : (max_ctx + GAMMA_MAX + 2) / prm.block_size + 4;
    if (!(sp->tpool = model_kv_pool(sp->target, prm.block_size, blocks, err, errlen))) goto fail_quiet;
    if (sp->draft && !(sp->dpool = model_kv_pool(sp->draft, prm.block_size, blocks, err, errlen))) {
        if (!err_is_oom(err)) goto fail_quiet;
        draft_dropped(sp, draft_path, err, log);
        model_free(sp->draft);
        sp->draft = NULL;
        memset(&sp->draft_id, 0, sizeof(sp->draft_id));
    }
    size_t V = (size_t)sp->n_vocab;
    sp->smp = sampler_create(sp->n_vocab);
    sp->max_seqs = prm.max_seqs > 0 ? prm.max_seqs : 32;
    sp->max_gamma = prm.max_gamma > 0 && prm.max_gamma <= GAMMA_MAX ? prm.max_gamma : 8;
    size_t rows = (size_t)sp->max_seqs * (size_t)(sp->max_gamma + 1);
    if (rows < GAMMA_CAL_ROWS) rows = GAMMA_CAL_ROWS; /* calibration's widest call */
    sp->p = malloc(sizeof(float) * V * (size_t)(sp->max_gamma + 1));
    sp->logits = malloc(sizeof(float) * V * rows);
    sp->scratch = malloc(sizeof(float) * V);
    sp->ms = malloc(sizeof(model_seq) * (size_t)sp->max_seqs);
    sp->row_of = malloc(sizeof(int) * (size_t)sp->max_seqs);
    sp->gam = malloc(sizeof(int) * (size_t)sp->max_seqs);
    if (!sp->smp || !sp->p || !sp->logits || !sp->scratch || !sp->ms || !sp->row_of || !sp->gam) {
        spec_fail(err, errlen, "out of memory");
        goto fail_quiet;
    }
    if (sp->draft) {
        double tmem = (double)sp->target->weight_bytes + (double)kv_pool_bytes(sp->tpool);
        double dmem = (double)sp->draft->weight_bytes + (double)kv_pool_bytes(sp->dpool);
        sp->draft_mem_pct = 100.0 * dmem / tmem;
        if (log) {
            fprintf(log, "specd: draft %s: %.1f MB weights + %.1f MB KV = %.1f%% of the target's %.1f MB%s\n",
                    draft_path, sp->draft->weight_bytes / 1e6, kv_pool_bytes(sp->dpool) / 1e6, sp->draft_mem_pct,
                    tmem / 1e6,
                    sp->draft_mem_pct > prm.draft_mem_warn_pct ? " — WARNING: above the limit; speculation pays "
                                                                 "best with a much smaller draft" : "");
        }
    }
    return sp;
fail_quiet:
    spec_pair_free(sp);
    return NULL;
}

/* Times forward calls of n[j] tokens at context past[j] (>= GAMMA_CAL_CTX) for the k
 * configurations, round-robin so every configuration sees the same moments of
 * a shared host, and keeps each one's fastest call (noise only ever adds time;
 * medians taken seconds apart were off by 5x on a busy machine). CAL_ROUNDS
 * rounds, or CAL_MIN_ROUNDS once the rounds have taken CAL_BUDGET_MS (a big
 * model on a CPU must not spend half a minute here). Each call is rolled back
 * after. Past GAMMA_CAL_CTX the cache is only reserved, not computed (its contents do not
 * change what a pass costs), so a long-context probe is as cheap as a short
 * one. t[j] is 0 for a configuration the pool cannot hold. */
#define CAL_ROUNDS 7
#define CAL_MIN_ROUNDS 3
#define CAL_BUDGET_MS 3000.0
#define CAL_MAX 8
static void time_calls(model *m, kv_pool *pool, const int *n, const int *past, int k, double *t, float *logits) {
    kv_seq *s[CAL_MAX] = {0};
    int32_t toks[GAMMA_CAL_ROWS + GAMMA_CAL_CTX] = {0};
    char err[256];
    for (int j = 0; j < k; j++) {
        t[j] = 0;
        s[j] = kv_seq_create(pool, past[j] + n[j] + 8);
        model_seq ms = {.kv = s[j], .n = GAMMA_CAL_CTX, .tokens = toks};
        if (!s[j] || model_forward(m, pool, &ms, 1, logits, err, sizeof(err)) != 0 ||
            (past[j] > GAMMA_CAL_CTX && kv_seq_reserve(pool, s[j], past[j]) != 0)) {
            kv_seq_destroy(pool, s[j]);
            s[j] = NULL;
            continue;
        }
        if (past[j] > GAMMA_CAL_CTX) s[j]->len = past[j];
    }
    double start = spec_now_ms();
    for (int r = 0; r < CAL_ROUNDS && (r < CAL_MIN_ROUNDS || spec_now_ms() - start < CAL_BUDGET_MS); r++)
        for (int j = 0; j < k; j++) {
            if (!s[j]) continue;
            model_seq ms = {.kv = s[j], .n = n[j], .tokens = toks, .all_logits = true};
            double t0 = spec_now_ms();
            if (model_forward(m, pool, &ms, 1, logits, err, sizeof(err)) != 0) {
                kv_seq_destroy(pool, s[j]);
                s[j] = NULL;
                t[j] = 0;
                continue;
            }
            double dt = spec_now_ms() - t0;
            if (t[j] == 0 || dt < t[j]) t[j] = dt;
            kv_seq_truncate(pool, s[j], past[j]);
        }
    for (int j = 0; j < k; j++) kv_seq_destroy(pool, s[j]);
}

void spec_pair_calibrate(spec_pair *sp) {
    /* 1 and 5 positions: the verify shape of one sequence; 5 and 21: the slope
     * once many rows make the pass compute-bound (batched verification); 1 and
     * 5 positions at a long context: what attention adds per key and row */
    int far = sp->max_ctx - 16 < 520 ? sp->max_ctx - 16 : 520;
    int n[5] = {1, 5, GAMMA_CAL_ROWS, 1, 5}, past[5] = {GAMMA_CAL_CTX, GAMMA_CAL_CTX, GAMMA_CAL_CTX, far, far};
    double t[5];
    time_calls(sp->target, sp->tpool, n, past, far > 64 ? 5 : 3, t, sp->logits);
    if (far <= 64) t[3] = t[4] = 0;
    gamma_costs_calibrate(&sp->costs, t[0], t[1], t[2], far, t[3], t[4]);
    if (sp->draft) {
        int dn[2] = {1, 9}, dp[2] = {GAMMA_CAL_CTX, GAMMA_CAL_CTX};
        double d[2];
        time_calls(sp->draft, sp->dpool, dn, dp, 2, d, sp->logits);
        sp->costs.draft_ms = d[0];
        sp->costs.draft_ms_per_row = d[1] > d[0] ? (d[1] - d[0]) / 8 : 0.0;
    }
}

/* ---- sequences -------------------------------------------------------------- */

void spec_seq_free(spec_seq *s) {
    if (!s) return;
    if (s->tkv) kv_seq_destroy(s->sp->tpool, s->tkv);
    if (s->dkv) kv_seq_destroy(s->sp->dpool, s->dkv);
    free(s->tokens);
    free(s->q);
    free(s);
}

/* Feeds tokens [from, to) to a model in max_batch chunks; the last row's logits
 * land in `logits`. */
static int feed(model *m, kv_pool *pool, kv_seq *kv, const int32_t *tokens, int from, int to, float *logits, char *err,
                size_t errlen) {
    for (int p = from; p < to;) {
        int n = to - p < m->mp.max_batch ? to - p : m->mp.max_batch;
        model_seq ms = {.kv = kv, .n = n, .tokens = tokens + p};
        if (model_forward(m, pool, &ms, 1, logits, err, errlen) != 0) return -1;
        p += n;
    }
    return 0;
}

static bool greedy(const spec_seq *s) { return s->prm.sc.temperature == 0.0f; }

/* Turns logits into the processed distribution and draws a token from it. */
static int32_t draw(spec_seq *s, const float *logits, float *probs, uint64_t pos, uint32_t purpose) {
    sampler_probs(s->sp->smp, &s->prm.sc, logits, probs);
    if (greedy(s)) return sampler_sample(probs, s->sp->n_vocab, 0.0);
    return sampler_sample(probs, s->sp->n_vocab, rng_uniform(s->prm.seed, pos, purpose, 0));
}

spec_seq *spec_seq_create(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                          size_t errlen) {
    int max_ctx = sp->max_ctx;
    if (n_prompt <= 0) return spec_fail(err, errlen, "empty prompt"), NULL;
    if (n_prompt >= max_ctx)
        return spec_fail(err, errlen, "prompt of %d tokens does not fit the context of %d", n_prompt, max_ctx), NULL;
    if (!sampler_config_validate(&p->sc, err, errlen)) return NULL;
    spec_seq *s = calloc(1, sizeof(*s));
    if (!s) return spec_fail(err, errlen, "out of memory"), NULL;
    s->sp = sp;
    s->prm = *p;
    if (!sp->draft) s->prm.speculate = false;
    if (s->prm.speculate && !gamma_params_validate(&s->prm.gp, err, errlen)) goto fail;
    gamma_ctl_init(&s->ctl, &s->prm.gp);
    s->cap = max_ctx + GAMMA_MAX + 2;
    if (s->prm.speculate && s->prm.gp.gamma_max > sp->max_gamma) {
        spec_fail(err, errlen, "gamma_max %d exceeds the pair's limit of %d", s->prm.gp.gamma_max, sp->max_gamma);
        goto fail;
    }
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap);
    s->q = s->prm.speculate ? malloc(sizeof(float) * (size_t)sp->n_vocab * (size_t)sp->max_gamma) : NULL;
    if (s->prm.speculate && !s->q) {
        spec_fail(err, errlen, "out of memory");
        goto fail;
    }
    s->tkv = kv_seq_create(sp->tpool, max_ctx + GAMMA_MAX + 1);
    s->dkv = sp->draft ? kv_seq_create(sp->dpool, max_ctx + GAMMA_MAX + 1) : NULL;
    if (!s->tokens || !s->tkv || (sp->draft && !s->dkv)) {
        spec_fail(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    s->n_tokens = s->n_prompt = n_prompt;
    return s;
fail:
    spec_seq_free(s);
    return NULL;
}

int spec_seq_prefill(spec_seq *s, int max_tokens, char *err, size_t errlen) {
    spec_pair *sp = s->sp;
    if (s->prefilled) return 1;
    int from = s->tkv->len, to = s->n_prompt;
    if (max_tokens > 0 && to - from > max_tokens) to = from + max_tokens;
    double t0 = spec_now_ms();
    if (feed(sp->target, sp->tpool, s->tkv, s->tokens, from, to, sp->logits, err, errlen) != 0) return -1;
    s->st.target_ms += spec_now_ms() - t0;
    if (to < s->n_prompt) return 0;
    s->tokens[s->n_tokens] = draw(s, sp->logits, sp->p, (uint64_t)s->n_prompt, RNG_SAMPLE);
    s->n_tokens++;
    s->st.tokens++;
    s->prefilled = true;
    return 1;
}

spec_seq *spec_seq_start(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                         size_t errlen) {
    spec_seq *s = spec_seq_create(sp, prompt, n_prompt, p, err, errlen);
    if (s && spec_seq_prefill(s, 0, err, errlen) != 1) {
        spec_seq_free(s);
        return NULL;
    }
    return s;
}


int spec_seq_check_kv(spec_seq *s, char *err, size_t errlen) {
    spec_pair *sp = s->sp;
    int want = s->n_tokens - 1;
    bool ok = s->tkv->len == want && (!s->dkv || s->dkv->len <= want);
    if (ok) return 0;
    /* a desynchronised cache would attend over a stale context: rebuild both */
    s->st.kv_resets++;
    kv_seq_truncate(sp->tpool, s->tkv, 0);
    if (s->dkv) kv_seq_truncate(sp->dpool, s->dkv, 0);
    if (feed(sp->target, sp->tpool, s->tkv, s->tokens, 0, want, sp->logits, err, errlen) != 0) return -1;
    return 1;
}

/* Plans one sequence's γ for this step: the controller's choice capped by the
 * tokens still wanted and the context. */
static int plan_gamma(spec_seq *s, int max_new, int batch) {
    int max_ctx = s->sp->max_ctx; /* the verify call fills positions up to n_tokens + γ */
    int g = s->prm.speculate ? gamma_ctl_next_batch(&s->ctl, &s->sp->costs, batch, s->n_tokens - 1) : 0;
    if (g > max_new - 1) g = max_new - 1;
    if (g > max_ctx - s->n_tokens) g = max_ctx - s->n_tokens;
    if (g > s->sp->max_gamma) g = s->sp->max_gamma;
    return g < 0 ? 0 : g;
}

/* Draft phase for every sequence with γ > 0: catch-up, then one batched call
 * per draft position over the sequences still drafting. Distributions go to
 * each sequence's q, tokens to its draft[]. Returns 0, or -1 on a draft
 * failure (every drafting sequence's draft cache is rolled back). */
static int draft_phase(spec_pair *sp, spec_seq **S, int n, const int *gam, char *err, size_t errlen) {
    size_t V = (size_t)sp->n_vocab;
    model_seq *ms = sp->ms;
    int *row_of = sp->row_of;
    if (sp->fail_draft_after > 0 && ++sp->draft_calls >= sp->fail_draft_after) {
        spec_fail(err, errlen, "injected draft failure");
        goto fail;
    }
    /* long catch-ups (after plain steps) go alone; the last token joins the batch */
    for (int i = 0; i < n; i++)
        if (gam[i] > 0 && S[i]->dkv->len < S[i]->n_tokens - 1 &&
            feed(sp->draft, sp->dpool, S[i]->dkv, S[i]->tokens, S[i]->dkv->len, S[i]->n_tokens - 1, sp->logits, err,
                 errlen) != 0)
            goto fail;
    int gmax = 0;
    for (int i = 0; i < n; i++) gmax = gam[i] > gmax ? gam[i] : gmax;
    for (int j = 0; j < gmax; j++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (gam[i] <= j) continue;
            const int32_t *t = j == 0 ? &S[i]->tokens[S[i]->n_tokens - 1] : &S[i]->draft[j - 1];
            ms[m] = (model_seq){.kv = S[i]->dkv, .n = 1, .tokens = t};
            row_of[m++] = i;
        }
        if (model_forward(sp->draft, sp->dpool, ms, m, sp->logits, err, errlen) != 0) goto fail;
        for (int r = 0; r < m; r++) {
            spec_seq *s = S[row_of[r]];
            s->draft[j] = draw(s, sp->logits + (size_t)r * V, s->q + (size_t)j * V, (uint64_t)(s->n_tokens + j),
                               RNG_DRAFT);
        }
    }
    return 0;
fail:
    for (int i = 0; i < n; i++)
        if (gam[i] > 0 && S[i]->dkv->len > S[i]->n_tokens - 1) kv_seq_truncate(sp->dpool, S[i]->dkv, S[i]->n_tokens - 1);
    return -1;
}

/* Accept/reject and commit for one sequence after the verify call; logits are
 * its gamma+1 rows. */
static void accept_commit(spec_seq *s, int gamma, const float *logits, spec_step_info *info) {
    spec_pair *sp = s->sp;
    size_t V = (size_t)sp->n_vocab;
    int N = s->n_tokens;
    int32_t out[GAMMA_MAX + 1];
    int k, n_new;
    if (gamma == 0) {
        out[0] = draw(s, logits, sp->p, (uint64_t)N, RNG_SAMPLE);
        k = 0;
        n_new = 1;
        s->st.plain_steps++;
        if (s->prm.speculate) gamma_ctl_observe_plain(&s->ctl);
    } else {
        for (int j = 0; j <= gamma; j++) sampler_probs(sp->smp, &s->prm.sc, logits + (size_t)j * V, sp->p + (size_t)j * V);
        accept_rng rng = {s->prm.seed, (uint64_t)N, sp->variant};
        k = accept_step(out, sp->p, s->q, s->draft, gamma, (int)V, greedy(s), &rng, sp->scratch);
        n_new = k + 1;
        s->st.verify_steps++;
        s->st.drafted += (uint64_t)gamma;
        s->st.accepted += (uint64_t)k;
        s->st.rejections += k < gamma;
        for (int j = 0; j < gamma; j++) s->st.pos_reached[j]++;
        for (int j = 0; j < k; j++) s->st.pos_accepted[j]++;
        gamma_ctl_observe(&s->ctl, gamma, k);
    }
    for (int i = 0; i < n_new; i++)
        if (tok_is_eog(sp->tok, out[i])) {
            n_new = i + 1;
            info->stopped = true;
            break;
        }
    /* commit the accepted prefix in both caches together: length updates only */
    memcpy(s->tokens + N, out, sizeof(int32_t) * (size_t)n_new);
    s->n_tokens = N + n_new;
    kv_seq_truncate(sp->tpool, s->tkv, s->n_tokens - 1);
    if (s->dkv) {
        int dvalid = gamma > 0 ? N + (k < gamma - 1 ? k : gamma - 1) : s->dkv->len;
        if (dvalid > s->n_tokens - 1) dvalid = s->n_tokens - 1;
        kv_seq_truncate(sp->dpool, s->dkv, dvalid);
    }
    s->st.tokens += (uint64_t)n_new;
    s->st.fallbacks = s->ctl.fallbacks;
    s->st.probes = s->ctl.probes;
    info->n_new = n_new;
    info->gamma = gamma;
    info->accepted = k < n_new ? k : n_new;
    info->bonus = gamma > 0 && k == gamma && n_new == gamma + 1;
}

int spec_seq_plan(spec_seq *s, int max_new, int batch) { return plan_gamma(s, max_new < 1 ? 1 : max_new, batch); }

static int step_batch(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *planned,
                      spec_step_info *info, char *err, size_t errlen);

int spec_step_batch(spec_pair *sp, spec_seq **S, int n, const int *max_new, spec_step_info *info, char *err,
                    size_t errlen) {
    return step_batch(sp, S, n, max_new, NULL, info, err, errlen);
}

int spec_step_batch_planned(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *gamma,
                            spec_step_info *info, char *err, size_t errlen) {
    return step_batch(sp, S, n, max_new, gamma, info, err, errlen);
}

static int step_batch(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *planned,
                      spec_step_info *info, char *err, size_t errlen) {
    if (n < 1 || n > sp->max_seqs) return spec_fail(err, errlen, "batch of %d sequences (limit %d)", n, sp->max_seqs);
    for (int i = 0; i < n; i++)
        if (!S[i]->prefilled) return spec_fail(err, errlen, "sequence %d is still prefilling", i);
    int *gam = sp->gam;
    int nd = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        memset(&info[i], 0, sizeof(info[i]));
        if (max_new[i] < 1) return spec_fail(err, errlen, "max_new must be >= 1");
        if (spec_seq_check_kv(S[i], err, errlen) < 0) return -1;
        int max_ctx = sp->max_ctx;
        if (S[i]->n_tokens > max_ctx) return spec_fail(err, errlen, "context full (%d tokens)", S[i]->n_tokens);
        gam[i] = planned ? planned[i] : plan_gamma(S[i], max_new[i], n);
        if (gam[i] > max_new[i] - 1) gam[i] = max_new[i] - 1;
        if (gam[i] > max_ctx - S[i]->n_tokens) gam[i] = max_ctx - S[i]->n_tokens;
        if (gam[i] > sp->max_gamma) gam[i] = sp->max_gamma;
        if (gam[i] < 0 || !S[i]->prm.speculate) gam[i] = 0;
        nd += gam[i] > 0;
    }
    if (nd) {
        double t0 = spec_now_ms();
        char derr[256];
        int rc = draft_phase(sp, S, n, gam, derr, sizeof(derr));
        double dt = spec_now_ms() - t0;
        int drafted = 0;
        for (int i = 0; i < n; i++) drafted = gam[i] > drafted ? gam[i] : drafted;
        for (int i = 0; i < n; i++) {
            if (gam[i] == 0) continue;
            S[i]->st.draft_ms += dt;
            info[i].draft_ms = dt;
            if (rc != 0) { /* no output gap: the step becomes a plain step */
                S[i]->st.draft_failures++;
                gamma_ctl_fail(&S[i]->ctl);
                gam[i] = 0;
            }
        }
        if (rc == 0) gamma_costs_observe_draft(&sp->costs, dt / drafted);
    }

    /* verify: ONE target call over every sequence's last token and drafts */
    model_seq *ms = sp->ms;
    double keys = 0, pairs = 0;
    for (int i = 0; i < n; i++) {
        spec_seq *s = S[i];
        s->vtoks[0] = s->tokens[s->n_tokens - 1];
        memcpy(s->vtoks + 1, s->draft, sizeof(int32_t) * (size_t)gam[i]);
        ms[i] = (model_seq){.kv = s->tkv, .n = gam[i] + 1, .tokens = s->vtoks, .all_logits = true};
        rows += gam[i] + 1;
        keys += gamma_keys(gam[i] + 1, s->n_tokens - 1);
        pairs += gamma_pairs(gam[i] + 1, s->n_tokens - 1);
    }
    double t0 = spec_now_ms();
    if (model_forward(sp->target, sp->tpool, ms, n, sp->logits, err, errlen) != 0) {
        for (int i = 0; i < n; i++)
            if (S[i]->dkv && S[i]->dkv->len > S[i]->n_tokens - 1)
                kv_seq_truncate(sp->dpool, S[i]->dkv, S[i]->n_tokens - 1);
        return -1;
    }
    double tt = spec_now_ms() - t0;
    gamma_costs_observe_target(&sp->costs, rows, keys, pairs, tt);
    size_t row = 0;
    for (int i = 0; i < n; i++) {
        S[i]->st.target_ms += tt;
        info[i].target_ms = tt;
        accept_commit(S[i], gam[i], sp->logits + row * (size_t)sp->n_vocab, &info[i]);
        row += (size_t)gam[i] + 1;
    }
    return 0;
}

int spec_seq_step(spec_seq *s, int max_new, spec_step_info *info, char *err, size_t errlen) {
    return spec_step_batch(s->sp, &s, 1, &max_new, info, err, errlen);
}
