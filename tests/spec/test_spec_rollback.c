/* test_spec_rollback.c — dual-KV commit/rollback: after every speculative step
 * both caches must equal a fresh prefill of the accepted tokens (K/V contents of
 * every cached position, and the next-step logits), with the target holding
 * n−1 positions and the draft at most n−1. Covered: rejections at every position
 * 1..γ, all-accepted steps with a bonus, the context limit reached mid-draft, an
 * end-of-generation token inside the accepted run, and spec_seq_check_kv
 * detecting and repairing a desynchronised cache without changing the output. */
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define GMAX 8

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

typedef struct {
    su_cache_stats cs;
    long rejected_at[GMAX + 1]; /* verify steps rejected at position i (1-based) */
    long bonus, steps, stopped_in_run, stopped_other, capped;
    int gamma_req;              /* the fixed γ asked for */
    int limit;                  /* context limit (tokens that can be cached) */
} obs;

static void observe(spec_seq *s, const spec_step_info *info, void *ctx) {
    obs *o = ctx;
    o->steps++;
    if (info->gamma > 0 && !info->stopped) {
        if (info->accepted < info->gamma) o->rejected_at[info->accepted + 1]++;
        else o->bonus += info->bonus;
        CHECK(info->n_new == info->accepted + 1);
    }
    if (info->stopped) {
        /* the output ends at the end-of-generation token, and only there */
        int n = s->n_tokens;
        CHECK(tok_is_eog(s->sp->tok, s->tokens[n - 1]));
        for (int i = n - info->n_new; i < n - 1; i++) CHECK(!tok_is_eog(s->sp->tok, s->tokens[i]));
        if (info->gamma > 0 && info->accepted == info->n_new) o->stopped_in_run++; /* it was an accepted draft */
        else o->stopped_other++;
    }
    int before = s->n_tokens - info->n_new; /* accepted length when the step began */
    if (o->limit && info->gamma > 0 && info->gamma < o->gamma_req && before + o->gamma_req > o->limit) o->capped++;
    su_check_caches(s, &o->cs);
}

static void report(const char *label, const obs *o) {
    fprintf(stderr, "%-34s %ld steps, rejected at positions:", label, o->steps);
    for (int i = 1; i <= GMAX; i++) fprintf(stderr, " %ld", o->rejected_at[i]);
    fprintf(stderr, "; %ld bonus\n  ", o->bonus);
    su_cache_print(&o->cs);
    fputc('\n', stderr);
}

/* Rejections at every position and all-accepted steps, greedy and sampled. */
static void every_position(spec_pair *sp) {
    obs o = {.gamma_req = GMAX};
    int32_t out[64];
    for (int i = 0; i < n_prompts; i++) {
        spec_seq_params prm = su_params(0.0f, 1, GMAX, false);
        CHECK(su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, out, observe, &o, NULL) > 0);
        prm = su_params(1.0f, 100 + (uint64_t)i, 1 + i % GMAX, i % 3 == 0);
        CHECK(su_generate(sp, prompts[i].ids, prompts[i].n, 40, &prm, out, observe, &o, NULL) > 0);
    }
    report("stories+llama2xs (T=0, T=1):", &o);
    for (int i = 1; i <= GMAX; i++) CHECKF(o.rejected_at[i] > 0, "no rejection at position %d was exercised", i);
    CHECK(o.bonus > 0);
}

/* The context fills up while γ = 8 drafts are in flight: γ is cut to what fits,
 * the output equals plain greedy up to the full context, the draft is not
 * blamed, and the caches stay exact. */
static void context_limit(spec_pair *sp, const char *label, float temp) {
    int limit = sp->target->mp.max_ctx;
    if (su_draft(sp)->mp.max_ctx < limit) limit = su_draft(sp)->mp.max_ctx;
    obs o = {.gamma_req = GMAX, .limit = limit};
    int32_t out[SU_MAX_GEN], ref[SU_MAX_GEN];
    long full = 0;
    for (int i = 0; i < 12; i++) {
        spec_seq_params prm = su_params(temp, 7 + (uint64_t)i, GMAX, false);
        spec_seq *s = NULL;
        int n = su_generate(sp, prompts[i].ids, prompts[i].n, SU_MAX_GEN, &prm, out, observe, &o, &s);
        CHECK(n > 0 && s);
        if (!s) continue;
        if (tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
            spec_seq_free(s);
            continue;
        }
        full++;
        /* every position the context allows was used: limit cached + the last token */
        CHECKF(s->n_tokens == limit + 1, "%s prompt %d: stopped at %d tokens, the context allows %d", label, i,
               s->n_tokens, limit + 1);
        CHECKF(s->st.draft_failures == 0, "%s prompt %d: the context limit was counted as %llu draft failure(s)",
               label, i, (unsigned long long)s->st.draft_failures);
        su_check_caches(s, &o.cs); /* after the refused step too */
        if (temp == 0.0f) {
            int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, SU_MAX_GEN, ref);
            CHECKF(n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)n),
                   "%s prompt %d: output at the context limit differs from plain greedy (%d vs %d tokens)", label, i,
                   n, nr);
        }
        spec_seq_free(s);
    }
    report(label, &o);
    CHECK(full > 0);
    CHECKF(o.capped > 0, "%s: no step had its gamma cut by the context", label);
}

/* An end-of-generation token among the accepted drafts: the step's output is cut
 * right after it and both caches are rolled back to exactly that length. */
static void stop_in_run(spec_pair *sp) {
    obs o = {.gamma_req = GMAX};
    int32_t out[200];
    for (int i = 0; i < 400 && o.stopped_in_run < 5; i++) {
        spec_seq_params prm = su_params(1.0f, 9000 + (uint64_t)i, GMAX, false);
        CHECK(su_generate(sp, prompts[i % n_prompts].ids, prompts[i % n_prompts].n, 200, &prm, out, observe, &o,
                          NULL) > 0);
    }
    report("random target as its draft (EOS):", &o);
    fprintf(stderr, "  stops: %ld inside an accepted run, %ld as a correction/bonus/plain token\n", o.stopped_in_run,
            o.stopped_other);
    CHECKF(o.stopped_in_run >= 5, "only %ld end-of-generation tokens inside accepted runs", o.stopped_in_run);
}

/* A desynchronised cache is detected, rebuilt from the tokens, counted, and
 * leaves the output unchanged. */
static void check_kv_repair(spec_pair *sp) {
    su_cache_stats cs = {0};
    int32_t ref[40], out[40];
    for (int which = 0; which < 2; which++) {
        const su_prompt *pr = &prompts[3 + which];
        int nr = su_plain_greedy(sp, pr->ids, pr->n, 40, ref);
        spec_seq_params prm = su_params(0.0f, 1, 4, false);
        char err[256];
        spec_seq *s = spec_seq_start(sp, pr->ids, pr->n, &prm, err, sizeof(err));
        CHECK(s != NULL);
        spec_step_info info;
        for (int k = 0; k < 3; k++) CHECK(spec_seq_step(s, 40 - (s->n_tokens - pr->n), &info, err, sizeof(err)) == 0);
        CHECK(spec_seq_check_kv(s, err, sizeof(err)) == 0 && s->st.kv_resets == 0);
        if (which == 0) s->tkv->len = s->n_tokens - 3;  /* target lost two positions */
        else su_dkv(s)->len = s->n_tokens;               /* draft claims a position it cannot have */
        int rc = spec_seq_check_kv(s, err, sizeof(err));
        CHECKF(rc == 1 && s->st.kv_resets == 1, "%s corruption: check_kv returned %d, kv_resets %llu",
               which ? "draft" : "target", rc, (unsigned long long)s->st.kv_resets);
        su_check_caches(s, &cs);
        while (s->n_tokens - pr->n < 40 && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
            CHECK(spec_seq_step(s, 40 - (s->n_tokens - pr->n), &info, err, sizeof(err)) == 0);
            su_check_caches(s, &cs);
        }
        int n = s->n_tokens - pr->n;
        if (n > 40) n = 40;
        memcpy(out, s->tokens + pr->n, sizeof(int32_t) * (size_t)n);
        CHECKF(n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)n),
               "output after a cache repair differs from plain greedy");
        CHECK(s->st.kv_resets == 1);
        spec_seq_free(s);
    }
    fprintf(stderr, "check_kv: a corrupted target length, then a corrupted draft length, each on a fresh sequence\n  ");
    su_cache_print(&cs);
    fputc('\n', stderr);
}

/* Several sequences stepped together (spec_step_batch: batched draft calls, ONE
 * verify call over all of them), each with its own γ: every sequence's output
 * equals its plain greedy output and its caches stay exact after every step. */
#define NB 6
static void batched(spec_pair *sp) {
    su_cache_stats cs = {0};
    spec_seq *S[NB];
    int32_t ref[NB][40];
    int nr[NB], max_new[NB];
    char err[256];
    for (int i = 0; i < NB; i++) {
        const su_prompt *pr = &prompts[10 + i];
        nr[i] = su_plain_greedy(sp, pr->ids, pr->n, 40, ref[i]);
        spec_seq_params prm = su_params(0.0f, 1, 1 + i, i % 2 == 1);
        S[i] = spec_seq_start(sp, pr->ids, pr->n, &prm, err, sizeof(err));
        CHECKF(S[i] != NULL, "%s", err);
        if (!S[i]) return;
    }
    spec_step_info info[NB];
    long steps = 0;
    for (;;) {
        /* the sequences still generating, stepped together */
        spec_seq *live[NB];
        int n = 0;
        for (int i = 0; i < NB; i++) {
            int made = S[i]->n_tokens - S[i]->n_prompt;
            if (made >= 40 || tok_is_eog(sp->tok, S[i]->tokens[S[i]->n_tokens - 1])) continue;
            max_new[n] = 40 - made;
            live[n++] = S[i];
        }
        if (!n) break;
        int rc = spec_step_batch(sp, live, n, max_new, info, err, sizeof(err));
        CHECKF(rc == 0, "batched step: %s", err);
        if (rc) break;
        steps++;
        for (int i = 0; i < n; i++) su_check_caches(live[i], &cs);
    }
    for (int i = 0; i < NB; i++) {
        int n = S[i]->n_tokens - S[i]->n_prompt;
        if (n > 40) n = 40;
        CHECKF(n == nr[i] && !memcmp(S[i]->tokens + S[i]->n_prompt, ref[i], sizeof(int32_t) * (size_t)n),
               "batched sequence %d (gamma %d): output differs from plain greedy", i, 1 + i);
        spec_seq_free(S[i]);
    }
    fprintf(stderr, "batched: %d sequences (gamma 1..%d) in %ld batched steps equal plain greedy\n  ", NB, NB, steps);
    su_cache_print(&cs);
    fputc('\n', stderr);
}

int main(void) {
    char tpath[512], dpath[512], rt[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);

    spec_pair *sp = su_load(tpath, dpath, be, 256);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECK(n_prompts == N_PROMPTS);
    every_position(sp);
    check_kv_repair(sp);
    batched(sp);
    spec_pair_free(sp);

    sp = su_load(tpath, dpath, be, 48);
    context_limit(sp, "stories+llama2xs, context 48:", 0.0f);
    spec_pair_free(sp);

    su_tmp_path(rt, sizeof(rt), "rand-target.gguf");
    su_mkmodel(rt, tpath, 21, 2, 64, 160, 256);
    sp = su_load(rt, rt, be, 40);
    context_limit(sp, "random self-draft, context 40:", 0.0f);
    context_limit(sp, "random self-draft, context 40, T=1:", 1.0f);
    spec_pair_free(sp);
    sp = su_load(rt, rt, be, 256);
    stop_in_run(sp);
    spec_pair_free(sp);

    const char *names[] = {"rand-target.gguf"};
    su_tmp_cleanup(names, 1);
    backend_destroy(be);
    TEST_DONE();
}
