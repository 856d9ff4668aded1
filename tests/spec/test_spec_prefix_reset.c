/* test_spec_prefix_reset.c — a hard reset (spec_seq_check_kv finding the
 * caches out of step with the tokens) takes the cached full blocks of the
 * accepted tokens back from the prefix index instead of re-prefilling them
 * (issue 20), in both pools in lockstep, and changes no output: after the
 * reset both caches equal a fresh prefill and the generation goes on to the
 * same tokens as an undisturbed run. Covered: the target losing positions and
 * the draft claiming one it cannot have (greedy and seeded, speculative and
 * plain), blocks another live sequence shares (reference 2, no copy), a draft
 * pool that lost its cached blocks (the shorter hit, none, in both pools), the
 * per-sequence opt-out (re-prefill of everything), and the pools' accounting
 * after each case. */
#include "tests/spec/spec_util.h"

#define N_PROMPTS 40
#define GEN 60

static su_prompt prompts[N_PROMPTS];
static int n_prompts;
static su_cache_stats cs;

/* Both pools' accounting with the given live sequences as all the holders. */
static void check_pools(spec_pair *sp, spec_seq **S, int n, const char *what) {
    kv_seq *t[4], *d[4];
    for (int i = 0; i < n; i++) t[i] = S[i]->tkv, d[i] = su_dkv(S[i]);
    char err[256];
    CHECKF(kv_pool_check(sp->tpool, t, n, err, sizeof(err)) == 0, "%s: target pool: %s", what, err);
    CHECKF(kv_pool_check(su_dpool(sp), d, n, err, sizeof(err)) == 0, "%s: draft pool: %s", what, err);
}

/* Steps s to GEN new tokens (or an end of generation), checking the caches. */
static void finish(spec_seq *s) {
    char err[256];
    spec_step_info info;
    while (s->n_tokens - s->n_prompt < GEN && !tok_is_eog(s->sp->tok, s->tokens[s->n_tokens - 1])) {
        int rc = spec_seq_step(s, GEN - (s->n_tokens - s->n_prompt), &info, err, sizeof(err));
        CHECKF(rc == 0, "step: %s", err);
        if (rc) return;
        su_check_caches(s, &cs);
    }
}

static int out_len(const spec_seq *s) {
    int n = s->n_tokens - s->n_prompt;
    return n > GEN ? GEN : n;
}

/* How a case disturbs the caches before the check. */
enum { LOSE_TARGET, DRAFT_AHEAD, DRAFT_EVICTED };

/* One sequence: the undisturbed reference output, then the same request with
 * a corruption after `steps` steps. want_reuse: the positions the reattach
 * must take back (-1: the full blocks both pools hold, computed here). */
static void one(spec_pair *sp, const su_prompt *pr, spec_seq_params prm, int how, int steps, bool share,
                const char *what) {
    char err[256];
    int32_t ref[GEN];
    spec_seq *r = spec_seq_start(sp, pr->ids, pr->n, &prm, err, sizeof(err));
    CHECKF(r != NULL, "%s: %s", what, err);
    if (!r) return;
    finish(r);
    int nr = out_len(r);
    memcpy(ref, r->tokens + r->n_prompt, sizeof(int32_t) * (size_t)nr);
    spec_seq_free(r);

    spec_seq *S[2];
    int n = 0;
    spec_seq *s = S[n++] = spec_seq_start(sp, pr->ids, pr->n, &prm, err, sizeof(err));
    CHECKF(s != NULL, "%s: %s", what, err);
    if (!s) return;
    spec_step_info info;
    for (int k = 0; k < steps && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1]); k++)
        CHECK(spec_seq_step(s, GEN - (s->n_tokens - s->n_prompt), &info, err, sizeof(err)) == 0);
    CHECK(spec_seq_check_kv(s, err, sizeof(err)) == 0 && s->st.kv_resets == 0);
    /* a second live sequence of the same tokens holds the published blocks too */
    if (share) {
        spec_seq *o = S[n++] = spec_seq_start(sp, s->tokens, s->n_tokens, &prm, err, sizeof(err));
        CHECKF(o != NULL, "%s: %s", what, err);
        if (!o) n--;
    }
    int B = sp->tpool->block_size, want = s->n_tokens - 1;
    kv_seq *dk = su_dkv(s);
    kv_pool *dp = su_dpool(sp);
    bool lockstep = s->prefix && prm.speculate;
    /* the full blocks each pool has indexed for these tokens decide the reuse */
    int kt = kv_prefix_match(sp->tpool, s->tokens, want, want / B, NULL);
    int kd = kv_prefix_match(dp, s->tokens, want, want / B, NULL);
    if (how == DRAFT_EVICTED) {
        /* the draft's cache drops its blocks (allowed: a draft may lag) and
         * its pool evicts every idle one: the draft index has nothing left */
        sp->drafters[SPEC_DRAFTER_MODEL]->i->commit(sp->drafters[SPEC_DRAFTER_MODEL], s->ds[SPEC_DRAFTER_MODEL],
                                                   s->tokens, 0);
        uint64_t id = dp->ident;
        int mi = dp->max_idle;
        kv_pool_set_prefix(dp, false, id, mi);
        kv_pool_set_prefix(dp, true, id, mi);
        kd = kv_prefix_match(dp, s->tokens, want, want / B, NULL);
        CHECKF(share || kd == 0, "%s: the draft index still holds %d blocks", what, kd);
    }
    int expect = !s->prefix ? 0 : kt * B, expect_d = !s->prefix ? 0 : (kd < kt ? kd : kt) * B;
    if (s->prefix) CHECKF(kt == want / B, "%s: target index holds %d of %d full blocks", what, kt, want / B);
    if (how == LOSE_TARGET) s->tkv->len = want - 3;  /* the target lost three positions */
    else if (how == DRAFT_AHEAD) dk->len = want + 1; /* the draft claims a position it cannot have */
    else s->tkv->len = want - 1;
    uint64_t cow0 = sp->tpool->cow_copies;
    int rc = spec_seq_check_kv(s, err, sizeof(err));
    CHECKF(rc == 1 && s->st.kv_resets == 1, "%s: check_kv returned %d (%s), kv_resets %llu", what, rc,
           rc < 0 ? err : "", (unsigned long long)s->st.kv_resets);
    CHECKF((int)s->st.kv_reset_reused == expect, "%s: the reset took back %llu positions, want %d", what,
           (unsigned long long)s->st.kv_reset_reused, expect);
    CHECKF(sp->tpool->cow_copies == cow0, "%s: the reset copied %llu blocks", what,
           (unsigned long long)(sp->tpool->cow_copies - cow0));
    if (share && s->prefix && expect > 0)
        CHECKF(sp->tpool->ref[s->tkv->blocks[0]] == 2, "%s: block 0 held %d times, want 2 (both sequences)", what,
               sp->tpool->ref[s->tkv->blocks[0]]);
    if (lockstep) { /* the draft took back what it has, at most the target's (the catch-up does the rest) */
        int dl = dk->len;
        CHECKF(dl == expect_d, "%s: draft cache holds %d positions after the reset, want %d", what, dl, expect_d);
    }
    check_pools(sp, S, n, what);
    su_check_caches(s, &cs);
    finish(s);
    int ns = out_len(s);
    CHECKF(ns == nr && !memcmp(s->tokens + s->n_prompt, ref, sizeof(int32_t) * (size_t)ns),
           "%s: output after the reset differs from the undisturbed run (%d vs %d tokens)", what, ns, nr);
    CHECK(s->st.kv_resets == 1);
    check_pools(sp, S, n, what);
    fprintf(stderr, "%-44s reset at %3d positions, took back %3d (target index %d, draft %d blocks)\n", what, want,
            (int)s->st.kv_reset_reused, kt, kd);
    for (int i = n - 1; i >= 0; i--) spec_seq_free(S[i]);
    check_pools(sp, NULL, 0, what);
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair_params pp = {.max_ctx = 256, .kv_blocks = 160, .prefix_cache = true};
    char err[1024];
    spec_pair *sp = spec_pair_load(tpath, dpath, be, &pp, NULL, NULL, err, sizeof(err));
    if (!sp) {
        fprintf(stderr, "spec_pair_load: %s\n", err);
        return 1;
    }
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECK(n_prompts == N_PROMPTS);

    for (int i = 0; i < 8; i++) {
        const su_prompt *pr = &prompts[(i * 5) % n_prompts];
        bool sampled = i % 2 == 1;
        spec_seq_params prm = su_params(sampled ? 1.0f : 0.0f, 77 + (uint64_t)i, 4, false);
        char what[64];
        snprintf(what, sizeof(what), "%s, %s, %d steps", i < 4 ? "target lost positions" : "draft ahead",
                 sampled ? "seeded" : "greedy", 3 + 2 * i);
        one(sp, pr, prm, i < 4 ? LOSE_TARGET : DRAFT_AHEAD, 3 + 2 * i, false, what);
    }
    /* plain decoding: the target alone reattaches (no lockstep to keep) */
    one(sp, &prompts[11], su_params(0.0f, 1, 0, false), LOSE_TARGET, 12, false, "plain, target lost positions");
    /* blocks a second live sequence holds: attached with a second reference */
    one(sp, &prompts[13], su_params(0.0f, 1, 4, false), LOSE_TARGET, 10, true, "shared with a live sequence");
    one(sp, &prompts[17], su_params(1.0f, 9, 3, false), DRAFT_AHEAD, 9, true, "shared, seeded, draft ahead");
    /* the draft pool lost its blocks: the target takes its own back, the draft none (it catches up) */
    one(sp, &prompts[19], su_params(0.0f, 1, 4, false), DRAFT_EVICTED, 10, false, "draft pool evicted (lockstep)");
    one(sp, &prompts[23], su_params(1.0f, 5, 2, false), DRAFT_EVICTED, 10, false, "draft pool evicted, seeded");
    /* opted out: nothing taken back, everything re-prefilled */
    spec_seq_params off = su_params(0.0f, 1, 4, false);
    off.no_prefix = true;
    one(sp, &prompts[29], off, LOSE_TARGET, 10, false, "opted out (no_prefix)");

    fprintf(stderr, "after resets: ");
    su_cache_print(&cs);
    fputc('\n', stderr);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
