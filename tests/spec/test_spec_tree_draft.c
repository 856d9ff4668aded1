/* test_spec_tree_draft.c — the tree proposers (draft_tree.h) on the real pair
 * (stories260K target, llama2xs-281K draft): greedy tree speculation equals
 * plain greedy decoding on 50 prompts for draft-model trees of several shapes
 * and for n-gram trees, alone and in batches of 6, and in mixed batches (each
 * sequence its own shape — plain, chain or tree — and proposer — draft,
 * n-gram or auto — in one target pass); the draft cache ends at
 * the accepted tokens and the target cache equals a fresh prefill. Then the
 * law at T = 1.0 and at T = 0.7 / top-p 0.9: the first token of a sampled
 * draft-tree step (siblings drawn without replacement) against the target's
 * distribution by χ² (p >= 0.001), which the no-residual variant fails. */
#include "engine/spec/proposers/draft_tree.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define N_GEN 40

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static const tree_shape shapes[] = {
    {6, 6, 1}, /* a chain of 6 */
    {4, 3, 2},
    {8, 4, 2},
    {16, 5, 3},
};
#define N_SHAPES (int)(sizeof(shapes) / sizeof(shapes[0]))

/* Generates with tree steps (draft trees when use_draft, else n-gram trees),
 * B sequences per step; returns outputs differing from plain greedy. */
/* mixed: each sequence of a batch its own shape (a plain step, a chain or a
 * tree) and proposer (draft, n-gram, auto), all in one target pass */
static int run(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc, const tree_shape *sh, bool use_draft, bool mixed,
               int B, spec_stats *tot, su_cache_stats *cs) {
    int mism = 0;
    for (int base = 0; base + B <= n_prompts; base += B) {
        int32_t ref[8][N_GEN];
        int nr[8], np[8];
        spec_seq *S[8];
        char err[512];
        for (int j = 0; j < B; j++) {
            nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
            np[j] = prompts[base + j].n;
            spec_seq_params prm = su_params(0.0f, 1, 0, false);
            S[j] = spec_seq_start(sp, prompts[base + j].ids, np[j], &prm, err, sizeof(err));
            if (!S[j]) {
                CHECKF(0, "spec_seq_start: %s", err);
                return 1;
            }
        }
        for (;;) {
            spec_seq *live[8];
            int mx[8], nl = 0;
            tree_shape shv[8];
            spec_method how[8];
            static const tree_shape plain = {0, 0, 0};
            for (int j = 0; j < B; j++) {
                int made = S[j]->n_tokens - np[j];
                if (made >= N_GEN || tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1])) continue;
                mx[nl] = N_GEN - made;
                shv[nl] = !mixed ? *sh : (base + j + made) % (N_SHAPES + 1) == N_SHAPES ? plain
                                                                                    : shapes[(base + j + made) % (N_SHAPES + 1)];
                how[nl] = !mixed ? (use_draft ? SPEC_METHOD_DRAFT : SPEC_METHOD_NGRAM)
                                 : (spec_method[]){SPEC_METHOD_DRAFT, SPEC_METHOD_NGRAM, SPEC_METHOD_AUTO}[j % 3];
                live[nl++] = S[j];
            }
            if (!nl) break;
            spec_step_info info[8];
            int rc = draft_tree_step(dt, tc, live, nl, shv, how, mx, info, err, sizeof(err));
            CHECKF(rc == 0, "draft_tree_step: %s", err);
            if (rc) break;
            for (int j = 0; j < nl; j++) {
                kv_seq *dkv = su_dkv(live[j]);
                CHECK(dkv->len <= live[j]->n_tokens - 1); /* never ahead of the accepted tokens */
            }
        }
        for (int j = 0; j < B; j++) {
            int n = S[j]->n_tokens - np[j];
            if (n > N_GEN) n = N_GEN;
            bool same = n == nr[j] && !memcmp(S[j]->tokens + np[j], ref[j], sizeof(int32_t) * (size_t)nr[j]);
            if (!same && mism < 3) {
                int at = 0;
                while (at < n && at < nr[j] && S[j]->tokens[np[j] + at] == ref[j][at]) at++;
                fprintf(stderr, "prompt %d differs from plain greedy at token %d\n", base + j, at);
            }
            mism += !same;
            if ((base + j) % 7 == 0) su_check_one("target", sp->target, sp->tpool, S[j]->tkv, S[j]->tokens, S[j]->n_tokens, cs);
            spec_stats_add(tot, &S[j]->st);
            spec_seq_free(S[j]);
        }
    }
    return mism;
}

static void greedy(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc) {
    su_cache_stats cs = {0};
    for (int k = 0; k <= N_SHAPES + 1; k++)
        for (int B = 1; B <= 6; B += 5) {
            bool draft = k < N_SHAPES, mixed = k == N_SHAPES + 1;
            if (mixed && B == 1) continue;
            const tree_shape *sh = draft ? &shapes[k] : &(tree_shape){8, 4, 3};
            spec_stats tot = {0};
            int mism = run(sp, dt, tc, sh, draft, mixed, B, &tot, &cs);
            CHECKF(mism == 0, "%s budget %d depth %d topk %d batch %d: %d outputs differ from plain greedy",
                   mixed ? "mixed" : draft ? "draft" : "ngram", sh->budget, sh->depth, sh->topk, B, mism);
            double vs = (double)(tot.verify_steps ? tot.verify_steps : 1);
            fprintf(stderr, "%-5s budget %2d depth %d topk %d batch %d: %d differ; %llu tree + %llu plain passes, "
                            "%.2f nodes/pass, accepted path %.2f, %.2f tokens per target pass\n",
                    mixed ? "mixed" : draft ? "draft" : "ngram", sh->budget, sh->depth, sh->topk, B, mism,
                    (unsigned long long)tot.verify_steps, (unsigned long long)tot.plain_steps,
                    (double)tot.drafted / vs, (double)tot.accepted / vs, spec_stats_tokens_per_pass(&tot));
            fprintf(stderr, "      acceptance by depth:");
            for (int j = 0; j < sh->depth && tot.pos_reached[j]; j++)
                fprintf(stderr, " %d: %.2f", j + 1, (double)tot.pos_accepted[j] / (double)tot.pos_reached[j]);
            fprintf(stderr, "\n");
            CHECK(tot.verify_steps > 0);
        }
    fprintf(stderr, "target caches vs fresh prefill: %ld K/V checks (worst %.3g), %ld logits checks (worst %.3g)\n",
            cs.kv_checks, cs.worst_kv, cs.checks, cs.worst);
}

/* χ² of the first token of one sampled draft-tree step after a fixed
 * context, over `runs` seeds, against the target's processed distribution.
 * The sequence is rolled back to the context after every step. */
static double law(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc, sampler_config sc, tree_variant v, int runs,
                  double *crit) {
    char err[512];
    spec_seq_params prm = su_params(0.0f, 1, 0, false);
    spec_seq *s = spec_seq_start(sp, prompts[3].ids, prompts[3].n, &prm, err, sizeof(err));
    CHECK(s != NULL);
    int N0 = s->n_tokens, V = sp->n_vocab;
    /* the expected law: the target after the context, processed by sc */
    float *lg = malloc(sizeof(float) * (size_t)V), *p = malloc(sizeof(float) * (size_t)V);
    kv_seq *f = kv_seq_create(sp->tpool, N0 + 1);
    CHECK(su_feed(sp->target, sp->tpool, f, s->tokens, N0, lg) == 0);
    kv_seq_destroy(sp->tpool, f);
    sampler_probs(sp->smp, &sc, lg, p);
    long *cnt = calloc((size_t)V, sizeof(long));
    double *ex = malloc(sizeof(double) * (size_t)V);
    for (int t = 0; t < V; t++) ex[t] = p[t];
    s->prm.sc = sc;
    spec_tree_set_variant(tc, v);
    tree_shape sh = {8, 2, 4};
    long nodes = 0;
    for (int r = 0; r < runs; r++) {
        s->prm.seed = 1000 + (uint64_t)r;
        int mx = 4;
        spec_step_info info;
        CHECK(draft_tree_step(dt, tc, &s, 1, &sh, NULL, &mx, &info, err, sizeof(err)) == 0);
        nodes += info.gamma;
        cnt[s->tokens[N0]]++;
        /* back to the context */
        s->n_tokens = N0;
        kv_seq_truncate(sp->tpool, s->tkv, N0 - 1);
        for (int d = 0; d < SPEC_DRAFTERS; d++)
            if (s->ds[d]) sp->drafters[d]->i->commit(sp->drafters[d], s->ds[d], s->tokens, N0 - 1);
    }
    spec_tree_set_variant(tc, TREE_CORRECT);
    int dof;
    double x2 = chi2_stat(cnt, ex, V, runs, &dof);
    *crit = chi2_critical_001(dof);
    fprintf(stderr, "  T=%.1f top-p %.1f %s: chi2 %.1f (dof %d, critical %.1f at p=0.001), %.1f nodes per tree\n",
            sc.temperature, sc.top_p, v == TREE_CORRECT ? "correct" : "no-residual variant", x2, dof, *crit,
            (double)nodes / runs);
    free(lg), free(p), free(cnt), free(ex);
    spec_seq_free(s);
    return x2;
}

static void sampled(spec_pair *sp, draft_tree *dt, spec_tree_ctx *tc) {
    sampler_config a = sampler_config_default(), b = sampler_config_default();
    a.temperature = 1.0f;
    b.temperature = 0.7f;
    b.top_p = 0.9f;
    double crit;
    fprintf(stderr, "first-token law of sampled draft-tree steps (8 nodes: 4 wide, 2 deep, without replacement):\n");
    CHECK(law(sp, dt, tc, a, TREE_CORRECT, 20000, &crit) < crit);
    CHECK(law(sp, dt, tc, b, TREE_CORRECT, 20000, &crit) < crit);
    CHECK(law(sp, dt, tc, a, TREE_BROKEN_NO_RESIDUAL, 20000, &crit) > crit);
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    CHECK(be != NULL);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECKF(n_prompts == N_PROMPTS, "only %d prompts from the corpus", n_prompts);
    spec_tree_ctx *tc = spec_tree_create(sp);
    draft_tree *dt = draft_tree_create(sp);
    CHECK(tc && dt);
    greedy(sp, dt, tc);
    sampled(sp, dt, tc);
    draft_tree_destroy(dt);
    spec_tree_destroy(tc);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
