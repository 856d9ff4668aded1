/* test_spec_greedy.c — at temperature 0 speculative decoding must reproduce plain
 * greedy decoding token for token: 50 corpus prompts × γ 1..8 × adaptive off/on,
 * on the real pair (stories260K target, llama2xs-281K draft) and on generated
 * pairs (a random target with a random draft, the target drafting for itself,
 * and a widened stories260K drafted by the original). The reference is an
 * independent model_forward + argmax loop. Also: a seeded sampled run is
 * reproducible and depends on its seed. */
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define N_GEN 40

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

/* Greedy equality over every prompt, γ and mode for one pair; returns runs
 * compared. min_alpha: the acceptance the pair must reach (a draft that is the
 * target, or computes its function, must be accepted: a stale draft cache
 * would not show in the output but would show here). */
static int greedy_pair(const char *label, spec_pair *sp, double min_alpha) {
    spec_pair_calibrate(sp);
    int32_t ref[N_GEN], out[N_GEN];
    int runs = 0, mism = 0;
    spec_stats tot = {0};
    for (int i = 0; i < n_prompts; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, ref);
        for (int gamma = 1; gamma <= 8; gamma++)
            for (int ad = 0; ad < 2; ad++) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, ad);
                spec_seq *s = NULL;
                int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, NULL, NULL, &s);
                runs++;
                bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
                if (!same && mism++ < 5) {
                    int at = 0;
                    while (at < n && at < nr && out[at] == ref[at]) at++;
                    fprintf(stderr, "%s: prompt %d gamma %d %s: speculative output differs from plain greedy at "
                                    "token %d (%d vs %d; lengths %d vs %d)\n",
                            label, i, gamma, ad ? "adaptive" : "fixed", at, at < n ? out[at] : -1,
                            at < nr ? ref[at] : -1, n, nr);
                }
                CHECK(same);
                if (s) {
                    CHECK(s->st.kv_resets == 0 && s->st.draft_failures == 0);
                    spec_stats_add(&tot, &s->st);
                }
                spec_seq_free(s);
            }
    }
    fprintf(stderr, "%-28s %d runs, %d differ from plain greedy; %llu verify + %llu plain passes, alpha %.3f, "
                    "%.2f tokens per target pass, %llu fallbacks\n",
            label, runs, mism, (unsigned long long)tot.verify_steps, (unsigned long long)tot.plain_steps,
            spec_stats_alpha(&tot), spec_stats_tokens_per_pass(&tot), (unsigned long long)tot.fallbacks);
    CHECKF(tot.verify_steps > 0, "%s: speculation never ran", label);
    CHECKF(spec_stats_alpha(&tot) >= min_alpha, "%s: acceptance %.3f, expected at least %.2f", label,
           spec_stats_alpha(&tot), min_alpha);
    return runs;
}

/* Same seed, same tokens; another seed, other tokens (for some prompt). */
static void sampled_reproducible(spec_pair *sp) {
    int32_t a[N_GEN], b[N_GEN], c[N_GEN];
    int differs = 0;
    spec_stats st = {0};
    for (int i = 0; i < 5; i++) {
        spec_seq_params prm = su_params(0.8f, 4242, 4, false);
        spec_seq *s = NULL;
        int na = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, a, NULL, NULL, &s);
        spec_stats_add(&st, &s->st);
        spec_seq_free(s);
        int nb = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, b, NULL, NULL, NULL);
        CHECKF(na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na),
               "prompt %d: a seeded sampled run is not reproducible", i);
        prm.seed = 4243;
        int nc = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, c, NULL, NULL, NULL);
        differs += nc != na || memcmp(a, c, sizeof(int32_t) * (size_t)na) != 0;
    }
    CHECKF(differs > 0, "the seed does not change the sampled output");
    CHECK(st.verify_steps > 0 && st.rejections > 0);
    fprintf(stderr, "sampled (T=0.8, gamma 4): reproducible over 5 prompts; another seed changed %d of 5\n", differs);
}

int main(void) {
    char tpath[512], dpath[512], rt[512], rd[512], wt[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    CHECK(be != NULL);

    spec_pair *sp = su_load(tpath, dpath, be, 256);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECKF(n_prompts == N_PROMPTS, "only %d prompts from the corpus", n_prompts);
    int runs = greedy_pair("stories260K+llama2xs-281K", sp, 0.5);
    sampled_reproducible(sp);
    spec_pair_free(sp);

    /* generated pairs sharing stories260K's tokenizer, so the same prompts apply */
    su_tmp_path(rt, sizeof(rt), "rand-target.gguf");
    su_tmp_path(rd, sizeof(rd), "rand-draft.gguf");
    su_tmp_path(wt, sizeof(wt), "widened-target.gguf");
    su_mkmodel(rt, tpath, 11, 3, 64, 160, 256);
    su_mkmodel(rd, rt, 12, 2, 32, 96, 256); /* its tokenizer copied from the target file */
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.dim = 128, o.ff = 256, o.ctx = 256;
    char err[512];
    if (mkmodel_widen(wt, tpath, &o, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel_widen: %s\n", err);
        return 1;
    }
    sp = su_load(rt, rd, be, 256);
    runs += greedy_pair("random+random", sp, 0.0);
    spec_pair_free(sp);
    sp = su_load(rt, rt, be, 256);
    runs += greedy_pair("random target as its draft", sp, 0.99);
    spec_pair_free(sp);
    sp = su_load(wt, tpath, be, 256);
    runs += greedy_pair("widened stories+stories", sp, 0.95);
    spec_pair_free(sp);
    fprintf(stderr, "%d speculative runs compared with plain greedy\n", runs);

    const char *names[] = {"rand-target.gguf", "rand-draft.gguf", "widened-target.gguf"};
    su_tmp_cleanup(names, 3);
    backend_destroy(be);
    TEST_DONE();
}
