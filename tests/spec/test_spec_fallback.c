/* test_spec_fallback.c — speculation that does not pay or does not work falls
 * back to plain decoding without a gap or a repeated token: a draft with
 * unrelated random weights (near-zero acceptance) and a draft that fails
 * (fault injection) must both give exactly the plain greedy output, with the
 * fallback, the probes and the failures counted, and exact caches throughout. */
#include "tests/spec/spec_util.h"

#define N_PROMPTS 4
#define N_GEN 80

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static void check_step(spec_seq *s, const spec_step_info *info, void *ctx) {
    su_check_caches(s, ctx);
    /* accounting: every emitted token is in the sequence exactly once */
    CHECK(s->st.tokens == (uint64_t)(s->n_tokens - s->n_prompt));
    CHECK(info->n_new >= 1 && info->n_new <= info->gamma + 1);
}

static void run_case(spec_pair *sp, const char *label, int gamma, bool adaptive, int fail_after, bool want_probe) {
    int32_t ref[N_GEN], out[N_GEN];
    su_cache_stats cs = {0};
    spec_stats tot = {0};
    for (int i = 0; i < n_prompts; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, ref);
        spec_seq_params prm = su_params(0.0f, 1, gamma, adaptive);
        /* fault injection: a test drafter around the draft model */
        drafter *real = NULL, *failing = NULL;
        if (fail_after) {
            failing = test_drafter_failing(sp->drafters[SPEC_DRAFTER_MODEL], fail_after);
            CHECK(failing != NULL);
            real = spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL, failing);
        }
        spec_seq *s = NULL;
        int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, check_step, &cs, &s);
        if (fail_after) drafter_destroy(spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL, real));
        CHECKF(n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr),
               "%s prompt %d: output differs from plain greedy", label, i);
        if (!s) continue;
        CHECKF(s->st.fallbacks >= 1 && s->st.plain_steps > 0 && s->st.verify_steps > 0,
               "%s prompt %d: %llu fallbacks, %llu plain steps, %llu verify steps", label, i,
               (unsigned long long)s->st.fallbacks, (unsigned long long)s->st.plain_steps,
               (unsigned long long)s->st.verify_steps);
        if (fail_after) CHECK(s->st.draft_failures >= 1);
        else CHECK(s->st.draft_failures == 0);
        if (want_probe) CHECKF(s->st.probes >= 1, "%s prompt %d: speculation was never probed again", label, i);
        spec_stats_add(&tot, &s->st);
        spec_seq_free(s);
    }
    fprintf(stderr, "%-36s %d prompts equal plain greedy; %llu verify + %llu plain steps, alpha %.3f, %llu fallbacks, "
                    "%llu probes, %llu draft failures\n  ",
            label, n_prompts, (unsigned long long)tot.verify_steps, (unsigned long long)tot.plain_steps,
            spec_stats_alpha(&tot), (unsigned long long)tot.fallbacks, (unsigned long long)tot.probes,
            (unsigned long long)tot.draft_failures);
    su_cache_print(&cs);
    fputc('\n', stderr);
}

int main(void) {
    char tpath[512], dpath[512], rd[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);

    /* a draft with unrelated random weights and the target's tokenizer */
    su_tmp_path(rd, sizeof(rd), "unrelated-draft.gguf");
    su_mkmodel(rd, tpath, 31, 2, 64, 160, 256);
    spec_pair *sp = su_load(tpath, rd, be, 256);
    spec_pair_calibrate(sp);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECK(n_prompts == N_PROMPTS);
    run_case(sp, "unrelated draft, gamma 4:", 4, false, 0, true);
    run_case(sp, "unrelated draft, adaptive 1..8:", 8, true, 0, true);
    spec_pair_free(sp);

    /* the real draft, made to fail on its 3rd call */
    sp = su_load(tpath, dpath, be, 256);
    spec_pair_calibrate(sp);
    run_case(sp, "failing draft (3rd call), gamma 4:", 4, false, 3, false);
    run_case(sp, "failing draft (3rd call), adaptive:", 8, true, 3, false);
    spec_pair_free(sp);

    const char *names[] = {"unrelated-draft.gguf"};
    su_tmp_cleanup(names, 1);
    backend_destroy(be);
    TEST_DONE();
}
