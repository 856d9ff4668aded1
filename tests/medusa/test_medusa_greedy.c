/* test_medusa_greedy.c — Medusa tree speculation (draft_medusa.h) on
 * stories260K with heads trained here for a few hundred steps: greedy output
 * equals plain greedy decoding token for token on 50 prompts, for several
 * tree shapes, one sequence at a time and in batches of 5; the target cache
 * equals a fresh prefill of the tokens; the trained heads' trees get drafts
 * accepted (more than one token per target pass), heads trained with the
 * token input (the default) more than the same heads without it, and the
 * untrained (identity) heads' do much worse; heads whose stored accuracies
 * overpromise are found out by the budget choice (delivered/promised
 * ratio) and step plainly, which the unscaled choice does not. Also: the heads on the backend
 * (medusa_rt_logits) equal the host reference forward. Then the law at
 * T = 1.0 and at T = 0.7 / top-p 0.9: the first token of a sampled Medusa
 * step (deterministic siblings) against the target's distribution by χ²
 * (p >= 0.001), which the no-residual variant of the tree rule fails. */
#include "engine/spec/proposers/draft_medusa.h"
#include "engine/train/medusa_train.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define N_GEN 40

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static int run(spec_pair *sp, draft_medusa *dm, spec_tree_ctx *tc, const tree_shape *sh, int B, spec_stats *tot,
               su_cache_stats *cs) {
    int mism = 0;
    for (int base = 0; base + B <= n_prompts; base += B) {
        int32_t ref[8][N_GEN];
        int nr[8], np[8];
        spec_seq *S[8];
        medusa_seq *M[8];
        char err[512];
        for (int j = 0; j < B; j++) {
            nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
            np[j] = prompts[base + j].n;
            spec_seq_params prm = su_params(0.0f, 1, 0, false);
            S[j] = spec_seq_start(sp, prompts[base + j].ids, np[j], &prm, err, sizeof(err));
            M[j] = medusa_seq_create(dm);
            if (!S[j] || !M[j]) {
                CHECKF(0, "spec_seq_start: %s", err);
                return 1;
            }
            if (j % 2 == 0) medusa_seq_prefilled(dm, M[j], S[j]); /* the others start with a plain step */
        }
        for (;;) {
            spec_seq *live[8];
            medusa_seq *lm[8];
            int mx[8], nl = 0;
            for (int j = 0; j < B; j++) {
                int made = S[j]->n_tokens - np[j];
                if (made >= N_GEN || tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1])) continue;
                mx[nl] = N_GEN - made;
                lm[nl] = M[j];
                live[nl++] = S[j];
            }
            if (!nl) break;
            spec_step_info info[8];
            int rc = draft_medusa_step(dm, tc, live, lm, nl, sh, mx, info, err, sizeof(err));
            CHECKF(rc == 0, "draft_medusa_step: %s", err);
            if (rc) break;
        }
        for (int j = 0; j < B; j++) {
            int n = S[j]->n_tokens - np[j];
            if (n > N_GEN) n = N_GEN;
            bool ok = n == nr[j] && !memcmp(S[j]->tokens + np[j], ref[j], sizeof(int32_t) * (size_t)nr[j]);
            if (!ok && mism < 3) {
                int at = 0;
                while (at < n && at < nr[j] && S[j]->tokens[np[j] + at] == ref[j][at]) at++;
                fprintf(stderr, "prompt %d differs from plain greedy at token %d\n", base + j, at);
            }
            mism += !ok;
            if ((base + j) % 7 == 0)
                su_check_one("target", sp->target, sp->tpool, S[j]->tkv, S[j]->tokens, S[j]->n_tokens, cs);
            spec_stats_add(tot, &S[j]->st);
            spec_seq_free(S[j]);
            medusa_seq_destroy(M[j]);
        }
    }
    return mism;
}

/* χ² of the first token of one sampled Medusa step after a fixed context,
 * over `runs` seeds, against the target's processed distribution; the
 * sequence (and its hidden state) is put back to the context after each step. */
static double law(spec_pair *sp, draft_medusa *dm, spec_tree_ctx *tc, sampler_config sc, tree_variant v, int runs,
                  double *crit) {
    char err[512];
    spec_seq_params prm = su_params(0.0f, 1, 0, false);
    spec_seq *s = spec_seq_start(sp, prompts[3].ids, prompts[3].n, &prm, err, sizeof(err));
    medusa_seq *ms = medusa_seq_create(dm), *ms0 = medusa_seq_create(dm);
    CHECK(s && ms && ms0);
    medusa_seq_prefilled(dm, ms0, s);
    int N0 = s->n_tokens, V = sp->n_vocab;
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
        medusa_seq_copy(ms, ms0);
        int mx = 4;
        spec_step_info info;
        CHECK(draft_medusa_step(dm, tc, &s, &ms, 1, &sh, &mx, &info, err, sizeof(err)) == 0);
        nodes += info.gamma;
        cnt[s->tokens[N0]]++;
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
    medusa_seq_destroy(ms), medusa_seq_destroy(ms0);
    spec_seq_free(s);
    return x2;
}

static void sampled(spec_pair *sp, draft_medusa *dm, spec_tree_ctx *tc) {
    sampler_config a = sampler_config_default(), b = sampler_config_default();
    a.temperature = 1.0f;
    b.temperature = 0.7f;
    b.top_p = 0.9f;
    double crit;
    fprintf(stderr, "first-token law of sampled Medusa steps (8 deterministic nodes: 4 wide, 2 deep):\n");
    CHECK(law(sp, dm, tc, a, TREE_CORRECT, 12000, &crit) < crit);
    CHECK(law(sp, dm, tc, b, TREE_CORRECT, 12000, &crit) < crit);
    CHECK(law(sp, dm, tc, a, TREE_BROKEN_NO_RESIDUAL, 12000, &crit) > crit);
}

/* heads trained for `steps` steps on the corpus (0: untrained, the identity),
 * with token input or without, ResBlocks (ffn 0) or FFN layers of ffn units */
static medusa_heads *train(spec_pair *sp, int steps, bool tin, int ffn) {
    char err[512], path[512];
    model *m = sp->target;
    medusa_heads *mh = medusa_heads_create(3, 1, ffn, m->hp.dim, m->hp.n_vocab, false, tin, NULL, err, sizeof(err));
    snprintf(mh->target_id, sizeof(mh->target_id), "%s", sp->target_id.id);
    if (!steps) return mh;
    tu_model(path, sizeof(path), "corpora/tinystories_valid_30K.txt");
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    medusa_data *d = medusa_data_create(m->hp.dim, 3, 20000);
    static int32_t toks[1 << 14];
    int n = tok_encode(sp->tok, text, len, true, false, toks, 1 << 14);
    if (n < 0) n = 1 << 14;
    for (int s = 0; s + 8 < n; s += 120) {
        int c = n - s < 121 ? n - s : 121;
        CHECK(medusa_data_add(d, m, sp->tpool, toks + s, c, 121, err, sizeof(err)) >= 0);
    }
    float *O = medusa_target_output(m, err, sizeof(err)), *E = medusa_target_embedding(m, err, sizeof(err));
    medusa_train_opts o;
    medusa_train_opts_init(&o);
    o.max_steps = steps, o.lr = 0.01f, o.batch = 32, o.holdout = 0.1f;
    medusa_train_result res;
    CHECKF(medusa_train(mh, O, E, d, &o, &res, err, sizeof(err)) == 0, "%s", err);
    fprintf(stderr, "trained %d steps on %lld positions%s%s: held-out loss %.3f -> %.3f, head-1 top-1 %.3f\n", steps,
            (long long)d->n, tin ? " (token input)" : "", ffn ? " (FFN)" : "", res.loss0, res.loss1, mh->acc[0][0]);
    /* the backend forward equals the host one */
    medusa_rt *rt = medusa_rt_create(mh, m, 4, NULL, err, sizeof(err));
    CHECKF(rt, "%s", err);
    if (rt) {
        int V = m->hp.n_vocab, D = m->hp.dim;
        float *lg = malloc(sizeof(float) * 3 * 4 * V), *z = malloc(sizeof(float) * V), *ys = malloc(sizeof(float) * 2 * D),
              *x = malloc(sizeof(float) * D);
        CHECK(medusa_rt_logits(rt, lg, d->h, d->next, 4, 3) == 0);
        double worst = 0;
        for (int k = 0; k < 3; k++)
            for (int r = 0; r < 4; r++) {
                medusa_head_input(mh, E, d->next[r], d->h + (size_t)r * D, x);
                medusa_head_forward(mh, O, k, x, z, ys, NULL);
                for (int v = 0; v < V; v++) worst = fmax(worst, fabs(z[v] - lg[((size_t)k * 4 + r) * V + v]) / (1 + fabs(z[v])));
            }
        fprintf(stderr, "backend heads vs host reference: worst relative difference %.2e\n", worst);
        CHECK(worst < 1e-3);
        free(lg), free(z), free(ys), free(x);
        medusa_rt_destroy(rt);
    }
    free(O);
    free(E);
    medusa_data_destroy(d);
    return mh;
}

/* The per-step budget from the verify cost curve. The choice on synthetic
 * numbers: a compute-bound curve (t proportional to rows) decodes plainly, a
 * flat one with cheap heads uses the whole budget and with heads as dear as a
 * pass none, a knee at 4 rows trees of at most 3 nodes alone and plain steps
 * at a batch of 5. Then in real steps on the trained heads: a compute-bound
 * curve drafts nothing and the output stays equal to plain greedy, and a
 * fresh proposer learns the heads' acceptance ratio from plain steps alone. */
static void budgets(spec_pair *sp, const medusa_heads *mh, draft_medusa *dm, spec_tree_ctx *tc, const tree_shape *sh) {
    double t[TREE_CTL_ROWS + 1] = {0}, v[16];
    for (int j = 0; j < 16; j++) v[j] = 0.7 / (1 + j); /* best-first path values */
    cost_curve c;
    for (int r = 1; r <= TREE_CTL_ROWS; r++) t[r] = r;
    cost_curve_init(&c, t, TREE_CTL_ROWS);
    CHECK(draft_medusa_pick_budget(v, 16, &c, 1.0, 0.01, 1, 1) == 0);
    for (int r = 1; r <= TREE_CTL_ROWS; r++) t[r] = 1.0;
    cost_curve_init(&c, t, TREE_CTL_ROWS);
    CHECK(draft_medusa_pick_budget(v, 16, &c, 1.0, 0.01, 1, 1) == 16);
    CHECK(draft_medusa_pick_budget(v, 16, &c, 2.0, 0.01, 1, 1) == 16);  /* a slower host: same choice */
    CHECK(draft_medusa_pick_budget(v, 16, &c, 1.0, 5.0, 1, 1) == 0);    /* heads dearer than what they bring */
    for (int r = 1; r <= TREE_CTL_ROWS; r++) t[r] = r <= 4 ? 1.0 : r;
    cost_curve_init(&c, t, TREE_CTL_ROWS);
    int b1 = draft_medusa_pick_budget(v, 16, &c, 1.0, 0.01, 1, 1);
    CHECKF(b1 >= 1 && b1 <= 3, "knee alone: budget %d", b1);
    CHECK(draft_medusa_pick_budget(v, 16, &c, 1.0, 0.01, 5, 5) == 0);
    CHECK(draft_medusa_pick_budget(v, 16, &c, 1.0, 0.01, 5, 0) == 0);   /* nobody can propose */
    /* real steps */
    for (int r = 1; r <= TREE_CTL_ROWS; r++) t[r] = r;
    draft_medusa_set_curve(dm, t);
    for (int B = 1; B <= 5; B += 4) {
        spec_stats tot = {0};
        su_cache_stats cs = {0};
        CHECK(run(sp, dm, tc, sh, B, &tot, &cs) == 0);
        CHECKF(tot.drafted == 0 && draft_medusa_last_budget(dm) == 0, "compute-bound curve, batch %d: %llu drafts", B,
               (unsigned long long)tot.drafted);
    }
    /* plain steps still measure the heads (shadow chains scored against the
     * tokens that follow): a fresh proposer that never verifies a tree learns
     * its acceptance ratio all the same (it would stay at 1.0 otherwise) */
    char err[512];
    draft_medusa *fresh = draft_medusa_create(sp, mh, NULL, err, sizeof(err));
    CHECKF(fresh, "%s", err);
    if (fresh) {
        draft_medusa_set_curve(fresh, t);
        spec_stats tot = {0};
        su_cache_stats cs = {0};
        CHECK(run(sp, fresh, tc, sh, 1, &tot, &cs) == 0);
        double r = draft_medusa_accept_ratio(fresh);
        fprintf(stderr, "compute-bound curve, fresh proposer: %llu drafts, acceptance ratio %.3f from shadow chains\n",
                (unsigned long long)tot.drafted, r);
        CHECK(tot.drafted == 0);
        CHECKF(r != 1.0 && r > 0.05 && r < 2.0, "acceptance ratio %.3f after plain steps only", r);
        draft_medusa_destroy(fresh);
    }
}

/* Heads whose stored figures overpromise (the untrained identity heads with
 * the prior's values: 0.6 for the first node) on a cheap-rows curve: the
 * first steps draft, the delivered/promised ratio falls, and then nearly
 * every step is plain (the probes aside) while the output stays plain's.
 * Choosing on the stored values alone drafts on every step. */
static void overpromised(spec_pair *sp, const medusa_heads *mh, spec_tree_ctx *tc, const tree_shape *sh) {
    char err[512];
    draft_medusa *dm = draft_medusa_create(sp, mh, NULL, err, sizeof(err));
    CHECKF(dm, "%s", err);
    if (!dm) return;
    double t[TREE_CTL_ROWS + 1] = {0};
    for (int r = 1; r <= TREE_CTL_ROWS; r++) t[r] = 1.0 + 0.1 * (r - 1);
    draft_medusa_set_curve(dm, t);
    spec_stats tot = {0};
    su_cache_stats cs = {0};
    int mism = run(sp, dm, tc, sh, 1, &tot, &cs);
    double ratio = draft_medusa_accept_ratio(dm);
    uint64_t steps = tot.verify_steps + tot.plain_steps;
    fprintf(stderr, "overpromising heads: delivered/promised %.3f, %llu of %llu steps drafted, %d/%d differ\n", ratio,
            (unsigned long long)tot.verify_steps, (unsigned long long)steps, mism, n_prompts);
    CHECK(mism == 0);
    CHECKF(ratio < 0.5, "acceptance ratio %.3f", ratio);
    CHECKF(tot.verify_steps * 4 < steps, "%llu of %llu steps drafted", (unsigned long long)tot.verify_steps,
           (unsigned long long)steps);
    draft_medusa_destroy(dm);
}

int main(void) {
    char tpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, NULL, be, 256);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECK(n_prompts == N_PROMPTS);
    spec_tree_ctx *tc = spec_tree_create(sp);
    static const tree_shape shapes[] = {{3, 3, 1}, {8, 3, 3}, {16, 3, 4}};
    /* variant 3: FFN heads with token input, 2: ResBlocks with token input
     * (the default), 1: trained without, 0: untrained */
    double tpp[4] = {0};
    static const char *vname[] = {"untrained", "trained", "trained (token input)", "trained FFN (token input)"};
    for (int v = 3; v >= 0; v--) {
        int trained = v > 0;
        medusa_heads *mh = train(sp, trained ? 400 : 0, v >= 2, v == 3 ? 256 : 0);
        char err[512];
        draft_medusa *dm = draft_medusa_create(sp, mh, NULL, err, sizeof(err));
        CHECKF(dm, "draft_medusa_create: %s", err);
        if (!dm) break;
        for (int si = 0; si < 3; si++) {
            if (v < 2 && si != 1) continue;
            if (v == 3 && si == 0) continue;
            for (int B = 1; B <= 5; B += 4) {
                spec_stats tot = {0};
                su_cache_stats cs = {0};
                int mism = run(sp, dm, tc, &shapes[si], B, &tot, &cs);
                double t = spec_stats_tokens_per_pass(&tot);
                fprintf(stderr, "%s heads, shape budget %d depth %d topk %d, batch %d: %d/%d differ, %.3f tokens/pass, "
                        "%llu of %llu drafts accepted\n",
                        vname[v], shapes[si].budget,
                        shapes[si].depth, shapes[si].topk, B, mism, n_prompts, t, (unsigned long long)tot.accepted,
                        (unsigned long long)tot.drafted);
                CHECK(mism == 0);
                su_cache_print(&cs);
                fputc('\n', stderr);
                if (si == 1 && B == 1) tpp[v] = t;
            }
        }
        if (v == 2) sampled(sp, dm, tc);
        if (v == 2) budgets(sp, mh, dm, tc, &shapes[2]);
        if (v == 0) overpromised(sp, mh, tc, &shapes[1]);
        draft_medusa_destroy(dm);
        medusa_heads_destroy(mh);
    }
    /* the trained heads' proposals are accepted, more often than the
     * identity's, and more often with the token input than without */
    CHECKF(tpp[1] > 1.15, "trained heads: %.3f tokens per pass", tpp[1]);
    CHECKF(tpp[1] > tpp[0], "trained %.3f vs untrained %.3f tokens per pass", tpp[1], tpp[0]);
    CHECKF(tpp[2] > tpp[1], "token input %.3f vs without %.3f tokens per pass", tpp[2], tpp[1]);
    CHECKF(tpp[3] > tpp[2], "FFN heads %.3f vs ResBlocks %.3f tokens per pass", tpp[3], tpp[2]);
    spec_tree_destroy(tc);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
