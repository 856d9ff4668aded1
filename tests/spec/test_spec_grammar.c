/* test_spec_grammar.c — constrained generation in lockstep with speculation,
 * on the real pair (stories260K target, llama2xs-281K draft):
 *   - greedy constrained speculative == greedy constrained plain, token for
 *     token, on 50 corpus prompts x 2 grammars (JSON mode, a schema-shaped
 *     grammar) x proposers (draft model γ 4, n-gram);
 *   - every output is complete under its grammar within its token budget;
 *   - after every step the committed grammar state equals replaying the
 *     accepted tokens from the start (rollbacks drop the draft copies);
 *   - at T = 1 the tokens after the first speculative step have the plain
 *     constrained distribution (two-sample χ²), and the broken variant (only
 *     the draft masked: the verified p left unmasked) is caught by the same test;
 *   - the same for tree speculation (every node masked by the state after its
 *     own path): greedy equality with draft-model and n-gram trees on both
 *     grammars, the committed state after every step, and χ² with its broken
 *     variant for draft-model trees of 6 nodes. */
#include "engine/spec/proposers/draft_tree.h"
#include "engine/grammar/grammar.h"
#include "engine/spec/stattest.h"
#include "tests/grammar/grammar_util.h"
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define N_GEN 48

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static int32_t replay(grammar_matcher *m, const int32_t *t, int n) {
    int32_t st = grammar_start(m);
    for (int i = 0; i < n && st >= 0; i++) st = grammar_advance_token(m, st, t[i]);
    return st;
}

static int bad_states;
static void check_state(spec_seq *s, const spec_step_info *info, void *ctx) {
    (void)info;
    grammar_matcher *m = ctx;
    if (s->gst != replay(m, s->tokens + s->n_prompt, s->n_tokens - s->n_prompt)) bad_states++;
}

static spec_seq_params cparams(float temp, uint64_t seed, int gamma, grammar_matcher *m, int method, bool spec) {
    spec_seq_params p = su_params(temp, seed, gamma, false);
    p.grammar = m;
    p.grammar_budget = N_GEN;
    p.method = method;
    p.speculate = spec;
    return p;
}

static void greedy_equal(spec_pair *sp, grammar_matcher *m, const char *label) {
    int32_t ref[N_GEN], out[N_GEN];
    int runs = 0, mism = 0, incomplete = 0;
    spec_stats tot = {0};
    for (int i = 0; i < n_prompts; i++) {
        spec_seq_params pp = cparams(0.0f, 1, 4, m, SPEC_METHOD_DRAFT, false);
        int nr = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &pp, ref, check_state, m, NULL);
        int32_t st = replay(m, ref, nr);
        incomplete += !grammar_accepting(m, st);
        for (int meth = 0; meth < 2; meth++) {
            spec_seq_params prm = cparams(0.0f, 1, 4, m, meth ? SPEC_METHOD_NGRAM : SPEC_METHOD_DRAFT, true);
            spec_seq *s = NULL;
            int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, check_state, m, &s);
            runs++;
            bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
            if (!same && mism++ < 5) {
                int at = 0;
                while (at < n && at < nr && out[at] == ref[at]) at++;
                fprintf(stderr, "%s: prompt %d %s: differs at token %d (%d vs %d; lengths %d vs %d)\n", label, i,
                        meth ? "ngram" : "draft", at, at < n ? out[at] : -1, at < nr ? ref[at] : -1, n, nr);
            }
            if (s) {
                spec_stats_add(&tot, &s->st);
                CHECK(s->st.kv_resets == 0);
            }
            spec_seq_free(s);
        }
    }
    CHECKF(mism == 0, "%s: %d of %d constrained speculative runs differ from constrained plain", label, mism, runs);
    CHECKF(incomplete == 0, "%s: %d outputs incomplete under the grammar", label, incomplete);
    CHECKF(bad_states == 0, "%s: %d steps left a committed grammar state other than the replay", label, bad_states);
    CHECK(tot.verify_steps > 0 && tot.rejections > 0);
    fprintf(stderr, "%-8s greedy: %d runs equal plain (%d differ), %d incomplete; %llu verify steps, alpha %.3f, "
                    "%.2f tokens per target pass\n",
            label, runs, mism, incomplete, (unsigned long long)tot.verify_steps, spec_stats_alpha(&tot),
            spec_stats_tokens_per_pass(&tot));
}

/* Generates with tree steps (draft-model trees, or n-gram trees) under the
 * grammar; returns the output length; checks the committed state after every
 * step against the replay. */
static int tree_generate(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc, const su_prompt *p, const tree_shape *sh,
                         spec_method how, const spec_seq_params *prm, int n_gen, int32_t *out, spec_stats *tot) {
    char err[512];
    spec_seq *s = spec_seq_start(sp, p->ids, p->n, prm, err, sizeof(err));
    if (!s) return -1;
    for (;;) {
        int made = s->n_tokens - p->n;
        if (made >= n_gen || tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) break;
        int mx = n_gen - made;
        spec_step_info info;
        if (draft_tree_step(dt, tc, &s, 1, sh, &how, &mx, &info, err, sizeof(err)) != 0) {
            fprintf(stderr, "draft_tree_step: %s\n", err);
            break;
        }
        if (s->gst != replay(prm->grammar, s->tokens + s->n_prompt, s->n_tokens - s->n_prompt)) bad_states++;
    }
    int made = s->n_tokens - p->n;
    if (made > n_gen) made = n_gen;
    memcpy(out, s->tokens + p->n, sizeof(int32_t) * (size_t)made);
    if (tot) spec_stats_add(tot, &s->st);
    spec_seq_free(s);
    return made;
}

/* Trees under a grammar: each node masked by the state after its own path,
 * the committed state advanced by the accepted path only. */
static void greedy_equal_tree(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc, grammar_matcher *m, const char *label) {
    int32_t ref[N_GEN], out[N_GEN];
    int runs = 0, mism = 0;
    spec_stats tot = {0};
    const tree_shape shapes[2] = {{8, 4, 2}, {8, 4, 3}};
    bad_states = 0;
    for (int i = 0; i < n_prompts; i++) {
        spec_seq_params pp = cparams(0.0f, 1, 4, m, SPEC_METHOD_DRAFT, false);
        int nr = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &pp, ref, NULL, NULL, NULL);
        for (int k = 0; k < 2; k++) {
            spec_seq_params prm = cparams(0.0f, 1, 4, m, SPEC_METHOD_DRAFT, true);
            int n = tree_generate(sp, dt, tc, &prompts[i], &shapes[k], k ? SPEC_METHOD_NGRAM : SPEC_METHOD_DRAFT, &prm,
                                  N_GEN, out, &tot);
            runs++;
            bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
            if (!same && mism++ < 5) {
                int at = 0;
                while (at < n && at < nr && out[at] == ref[at]) at++;
                fprintf(stderr, "%s tree: prompt %d %s: differs at token %d\n", label, i, k ? "ngram" : "draft", at);
            }
        }
    }
    CHECKF(mism == 0, "%s: %d of %d constrained tree runs differ from constrained plain", label, mism, runs);
    CHECKF(bad_states == 0, "%s trees: %d steps left a committed grammar state other than the replay", label,
           bad_states);
    CHECK(tot.tree_steps > 0 && tot.tree_nodes > 0);
    fprintf(stderr, "%-8s greedy trees: %d runs equal plain (%d differ); %llu verify steps (%llu branched), %.2f tokens "
                    "per target pass\n",
            label, runs, mism, (unsigned long long)tot.verify_steps, (unsigned long long)tot.tree_steps,
            spec_stats_tokens_per_pass(&tot));
}

/* Histograms of the tokens at output positions 1..3 (decided by the first
 * speculative step) over n seeds. */
static draft_tree *g_dt; /* set: the speculative samples use draft-model trees of 6/3/3 */
static spec_tree_ctx *g_tc;

static void sample_hist(spec_pair *sp, grammar_matcher *m, bool spec, bool broken, int n, uint64_t *h, int V) {
    int32_t out[4];
    const tree_shape sh = {6, 3, 3};
    for (int k = 0; k < n; k++) {
        spec_seq_params prm = cparams(1.0f, 1000 + (uint64_t)k * 7919, 3, m, SPEC_METHOD_DRAFT, spec);
        prm.grammar_broken = broken;
        int got = spec && g_dt ? tree_generate(sp, g_dt, g_tc, &prompts[k % 4], &sh, SPEC_METHOD_DRAFT, &prm, 4, out, NULL)
                               : su_generate(sp, prompts[k % 4].ids, prompts[k % 4].n, 4, &prm, out, NULL, NULL, NULL);
        for (int j = 1; j < 4; j++) h[(size_t)(j - 1) * (size_t)V + (size_t)(j < got ? out[j] : V - 1)]++;
    }
}

static void distribution(spec_pair *sp, grammar_matcher *m) {
    int V = sp->n_vocab, N = 3000;
    uint64_t *a = calloc((size_t)V * 3, sizeof(uint64_t)), *b = calloc((size_t)V * 3, sizeof(uint64_t)),
             *c = calloc((size_t)V * 3, sizeof(uint64_t));
    int *scratch = malloc(sizeof(int) * (size_t)V);
    sample_hist(sp, m, false, false, N, a, V);
    sample_hist(sp, m, true, false, N, b, V);
    sample_hist(sp, m, true, true, N, c, V);
    double pmin_ok = 1, pmin_broken = 1;
    for (int j = 0; j < 3; j++) {
        stattest_chi2_result r1, r2;
        stattest_chi2_homogeneity(a + (size_t)j * V, b + (size_t)j * V, V, 5, scratch, &r1);
        stattest_chi2_homogeneity(a + (size_t)j * V, c + (size_t)j * V, V, 5, scratch, &r2);
        fprintf(stderr, "T=1 position %d%s: plain vs speculative chi2 %.1f dof %d p %.4f; vs broken (p unmasked) "
                        "chi2 %.1f dof %d p %.2g\n", j + 1, g_dt ? " (trees)" : "", r1.stat, r1.dof, r1.p, r2.stat, r2.dof,
                r2.p);
        if (r1.p < pmin_ok) pmin_ok = r1.p;
        if (r2.p < pmin_broken) pmin_broken = r2.p;
    }
    /* three tests: Bonferroni at 0.001 overall for the correct rule */
    CHECKF(pmin_ok > 0.001 / 3, "constrained speculation changed the distribution (p %.2g)", pmin_ok);
    CHECKF(pmin_broken < 1e-6, "the broken variant was not caught (p %.2g)", pmin_broken);
    free(a), free(b), free(c), free(scratch);
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    spec_pair_calibrate(sp);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    grammar_vocab *v = grammar_vocab_create(sp->tok);
    char err[256];
    grammar *gj = grammar_parse(grammar_json_gbnf(), strlen(grammar_json_gbnf()), err, sizeof err);
    grammar *gs = grammar_parse(GU_SCHEMA, strlen(GU_SCHEMA), err, sizeof err);
    CHECK(v && gj && gs);
    grammar_matcher *mj = grammar_matcher_create(gj, v), *ms = grammar_matcher_create(gs, v);
    greedy_equal(sp, mj, "json");
    greedy_equal(sp, ms, "schema");
    distribution(sp, mj);
    draft_tree *dt = draft_tree_create(sp);
    spec_tree_ctx *tc = spec_tree_create(sp);
    CHECK(dt && tc);
    greedy_equal_tree(sp, dt, tc, mj, "json");
    greedy_equal_tree(sp, dt, tc, ms, "schema");
    g_dt = dt, g_tc = tc;
    distribution(sp, mj);
    draft_tree_destroy(dt);
    spec_tree_destroy(tc);
    grammar_matcher_destroy(mj), grammar_matcher_destroy(ms);
    grammar_destroy(gj), grammar_destroy(gs);
    grammar_vocab_destroy(v);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
