/* test_spec_eagle.c — an EAGLE-3 head as a proposer (draft_eagle.h) in the
 * pair's eagle slot, on stories260K with a random head (mkmodel --arch
 * eagle3; its drafts are mostly rejected, which exercises every rollback):
 *   - the features: before every step, what the head drafts from is
 *     recomputed from nothing — a fresh target prefill of the accepted
 *     tokens, its taps at the head's three layers, a fresh head forward of the
 *     rows (token i+1, features of i) — and the step's first draft
 *     distribution q must equal it (T = 1, alone and in a batch of 3). A
 *     proposer that paired a token with the wrong position's features, kept
 *     a draft row's features, or lost a committed one fails here;
 *   - lossless: greedy output equals plain decoding on 12 prompts at γ = 1,
 *     3 and 6, alone and batched, with the head's verify steps counted
 *     under its own name and no cache reset;
 *   - a head of another hidden size, or a llama model given as a head, is
 *     refused with its reason;
 *   - trees (EAGLE-2, propose_tree): before every sampled tree step (T = 1,
 *     12/3/2, alone and in a batch of 3) each node's distribution — the q row
 *     of its first child — must equal a recomputation from nothing along its
 *     path (the catch-up rows, then the path's rows one at a time, each
 *     (token, the previous row's own feature)): a tree row with the wrong
 *     parent feature, position or mask fails here; after every proposal the
 *     head's cache is back at its committed rows; a one-child tree proposes
 *     exactly the chain's drafts (T = 0), and an 8/4/2 tree uses its 8
 *     nodes and reaches depth 4; greedy trees (8/4/2, 16/5/3) equal
 *     plain decoding on 12 prompts alone and by 4, counted under the head
 *     as tree steps with no cache reset; and the first token of a sampled
 *     tree step (8 nodes, 4 wide, 2 deep) follows the target's law by χ² at
 *     T = 1.0 and at T = 0.7 / top-p 0.9, which the no-residual variant
 *     fails. */
#include "engine/spec/proposers/draft_eagle.h"
#include "engine/spec/proposers/draft_tree.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#include <math.h>

#define N_GEN 24

static void mkhead(const char *out, int dim, uint64_t seed) {
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.arch = "eagle3", o.dim = dim, o.n_heads = 8, o.n_kv_heads = 4, o.ff = 172, o.vocab = 512, o.seed = seed;
    char err[512];
    if (mkmodel_random(out, &o, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel eagle3: %s\n", err);
        exit(1);
    }
}

/* An independent recomputation of the head's first draft distribution for
 * the accepted tokens t[0, n): its own target and head instances. */
typedef struct {
    model *tgt, *head;
    kv_pool *tp, *hp;
    int layers[3], D, V;
    float *feat, *tap, *lg, *q;
    sampler *smp;
} recomp;

/* ... and after a path of k drafts (path[0, k)) past them: each a row of its
 * own, (its token, the previous row's final residual), as a chain drafts. */
static void recomp_path(recomp *r, const int32_t *t, int n, const int32_t *path, int k, const sampler_config *sc) {
    char err[512];
    int D = r->D, rows[256];
    for (int i = 0; i < 256; i++) rows[i] = i;
    kv_seq *kv = kv_seq_create(r->tp, 512), *hk = kv_seq_create(r->hp, 512);
    model_seq ms = {.kv = kv, .n = n - 1, .tokens = t};
    CHECKF(model_forward(r->tgt, r->tp, &ms, 1, r->lg, err, sizeof err) == 0, "target: %s", err);
    for (int l = 0; l < 3; l++) {
        CHECK(model_tap_rows(r->tgt, l, r->tap, rows, n - 1) == 0);
        for (int i = 0; i < n - 1; i++) memcpy(r->feat + ((size_t)i * 3 + l) * D, r->tap + (size_t)i * D, sizeof(float) * D);
    }
    model_seq hs = {.kv = hk, .n = n - 1, .tokens = t + 1, .feat = r->feat, .feat_fc = true};
    CHECKF(model_forward(r->head, r->hp, &hs, 1, r->lg, err, sizeof err) == 0, "head: %s", err);
    for (int j = 0; j < k; j++) {
        CHECK(model_tap_rows(r->head, 0, r->tap, j == 0 ? &rows[n - 2] : &rows[0], 1) == 0);
        model_seq one = {.kv = hk, .n = 1, .tokens = &path[j], .feat = r->tap};
        CHECKF(model_forward(r->head, r->hp, &one, 1, r->lg, err, sizeof err) == 0, "head: %s", err);
    }
    sampler_probs(r->smp, sc, r->lg, r->q); /* the random head's vocabulary is the target's (no d2t) */
    kv_seq_destroy(r->tp, kv), kv_seq_destroy(r->hp, hk);
}

static void recomp_q0(recomp *r, const int32_t *t, int n, const sampler_config *sc) { recomp_path(r, t, n, NULL, 0, sc); }

/* ---- trees --------------------------------------------------------------- */

static int eagle_len(spec_pair *sp, spec_seq *s) {
    return drafter_state_len(sp->drafters[SPEC_DRAFTER_EAGLE], s->ds[SPEC_DRAFTER_EAGLE]);
}

/* Sampled tree steps whose every node's distribution is recomputed from
 * nothing along its path; the head's cache at its committed rows after each
 * proposal. */
static void tree_features(spec_pair *sp, spec_tree_ctx *tc, recomp *rc, const su_prompt *prompts, int np) {
    char err[512];
    int compared = 0, deep = 0, deeper = 0, bad = 0, ahead = 0;
    double worst = 0;
    for (int B = 1; B <= 3; B += 2)
        for (int base = 0; base + B <= np && base < 6; base += B) {
            spec_seq *S[3];
            for (int j = 0; j < B; j++) {
                spec_seq_params prm = su_params(1.0f, 11 + base + j, 3, false);
                prm.method = SPEC_METHOD_EAGLE;
                S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                CHECKF(S[j], "start: %s", err);
            }
            for (int step = 0; step < 6; step++) {
                tree_shape sh[3] = {{12, 3, 2}, {12, 3, 2}, {12, 3, 2}}; /* levels of 2, 4 and 6 nodes */
                spec_method how[3] = {SPEC_METHOD_EAGLE, SPEC_METHOD_EAGLE, SPEC_METHOD_EAGLE};
                spec_tree t[3];
                int slot[3], mx[3] = {6, 6, 6};
                double dms[3];
                CHECKF(spec_tree_propose(sp, S, B, sh, how, t, slot, dms, err, sizeof err) == 0, "propose: %s", err);
                for (int j = 0; j < B; j++) {
                    ahead += eagle_len(sp, S[j]) > S[j]->n_tokens - 2; /* the tree's rows were taken back */
                    const drafter_node *nd = t[j].nodes;
                    for (int c = 0; c < t[j].n_nodes; c++) {
                        int pa = nd[c].parent, first = 1;
                        for (int e = 0; e < c; e++) first &= nd[e].parent != pa;
                        if (!first) continue; /* its q row is the parent's with earlier siblings removed */
                        int32_t path[DRAFTER_MAX_NODES];
                        int k = 0;
                        for (int a = pa; a >= 0; a = nd[a].parent) k++;
                        for (int a = pa, at = k - 1; a >= 0; a = nd[a].parent) path[at--] = nd[a].token;
                        recomp_path(rc, S[j]->tokens, S[j]->n_tokens, path, k, &S[j]->prm.sc);
                        double e = 0;
                        for (int v = 0; v < rc->V; v++)
                            e = fmax(e, fabs((double)t[j].q[(size_t)c * (size_t)rc->V + v] - rc->q[v]));
                        worst = fmax(worst, e);
                        bad += e > 1e-5;
                        compared++;
                        deep += k >= 1, deeper += k >= 2;
                    }
                }
                spec_step_info info[3];
                CHECKF(spec_tree_step(tc, S, B, t, mx, info, err, sizeof err) == 0, "tree step: %s", err);
                spec_tree_note(sp, S, B, t, sh, slot, dms, info);
            }
            for (int j = 0; j < B; j++) {
                CHECK(S[j]->st.kv_resets == 0 && S[j]->st.by[SPEC_PROPOSER_EAGLE].verify_steps > 0);
                spec_seq_free(S[j]);
            }
        }
    CHECKF(compared >= 60 && deep >= 40 && deeper >= 20 && bad == 0, "tree node distributions vs a recomputation "
           "along their path: %d of %d differ (%d nodes at depth 1, %d deeper; worst %.2e)", bad, compared, deep, deeper,
           worst);
    CHECKF(ahead == 0, "%d proposals left tree rows in the head's cache", ahead);
    fprintf(stderr, "trees: %d node distributions (%d of nodes at depth >= 1, %d deeper) equal a recomputation "
                    "along their path (worst %.2e)\n", compared, deep, deeper, worst);
}

/* A one-child tree (γ/γ/1) proposes exactly the chain's γ drafts, greedy. */
static void tree_is_chain(spec_pair *sp, spec_tree_ctx *tc, const su_prompt *prompts, int np) {
    char err[512];
    drafter *d = sp->drafters[SPEC_DRAFTER_EAGLE];
    float *q = malloc(sizeof(float) * GAMMA_MAX * (size_t)sp->n_vocab);
    int same = 0, cmp = 0, contained = 0, branched = 0;
    for (int i = 0; i < np && i < 6; i++) {
        spec_seq_params prm = su_params(0.0f, 1, 5, false);
        prm.method = SPEC_METHOD_EAGLE;
        spec_seq *s = spec_seq_start(sp, prompts[i].ids, prompts[i].n, &prm, err, sizeof err);
        for (int step = 0; step < 5; step++) {
            drafter_prop p = {.ds = s->ds[SPEC_DRAFTER_EAGLE], .tokens = s->tokens, .n_tokens = s->n_tokens, .budget = 5,
                              .sc = &s->prm.sc, .seed = s->prm.seed, .q = q};
            CHECKF(d->i->propose(d, &p, 1, err, sizeof err) == 0, "chain: %s", err);
            /* the chain's rows back; tokens[0, n) are accepted (the features of n - 2 stay) */
            d->i->commit(d, p.ds, s->tokens, s->n_tokens);
            /* a branching tree reaches its depth: the budget keeps room for every level (an 8/4/2 tree
             * that spent it on level 1 and 2 siblings would stop at depth 3, short of a 4-node chain) */
            {
                tree_shape sb = {8, 4, 2};
                spec_method hb = SPEC_METHOD_EAGLE;
                spec_tree tb;
                int sl;
                double ms2;
                CHECKF(spec_tree_propose(sp, &s, 1, &sb, &hb, &tb, &sl, &ms2, err, sizeof err) == 0, "tree: %s", err);
                int deepest = 0, dep[DRAFTER_MAX_NODES] = {0};
                for (int c = 0; c < tb.n_nodes; c++) {
                    dep[c] = tb.nodes[c].parent < 0 ? 1 : dep[tb.nodes[c].parent] + 1;
                    deepest = dep[c] > deepest ? dep[c] : deepest;
                }
                contained += deepest == 4 && tb.n_nodes == 8;
                branched++;
            }
            tree_shape sh = {5, 5, 1};
            spec_method how = SPEC_METHOD_EAGLE;
            spec_tree t;
            int slot, mx = 8;
            double dms;
            CHECKF(spec_tree_propose(sp, &s, 1, &sh, &how, &t, &slot, &dms, err, sizeof err) == 0, "tree: %s", err);
            bool eq = t.n_nodes == p.n_nodes;
            for (int j = 0; eq && j < p.n_nodes; j++) eq = t.nodes[j].token == p.nodes[j].token && t.nodes[j].parent == j - 1;
            same += eq && p.n_nodes == 5;
            cmp++;
            spec_step_info info;
            CHECKF(spec_tree_step(tc, &s, 1, &t, &mx, &info, err, sizeof err) == 0, "step: %s", err);
        }
        spec_seq_free(s);
    }
    free(q);
    CHECKF(cmp >= 20 && same == cmp, "one-child trees: %d of %d equal the chain's drafts", same, cmp);
    fprintf(stderr, "one-child trees: %d of %d proposals equal the chain's drafts\n", same, cmp);
    CHECKF(branched >= 20 && contained == branched, "8/4/2 trees: %d of %d have 8 nodes and reach depth 4",
           contained, branched);
    fprintf(stderr, "8/4/2 trees: %d of %d have 8 nodes and reach depth 4\n", contained, branched);
}

/* Greedy tree steps equal plain decoding. */
static void tree_greedy(spec_pair *sp, spec_tree_ctx *tc, const su_prompt *prompts, int np) {
    static const tree_shape shapes[] = {{8, 4, 2}, {16, 5, 3}};
    char err[512];
    int mism = 0, runs = 0, ahead = 0;
    uint64_t steps = 0, branched = 0, nodes = 0, acc = 0;
    for (int k = 0; k < 2; k++)
        for (int B = 1; B <= 4; B += 3)
            for (int base = 0; base + B <= np; base += B) {
                spec_seq *S[4];
                int32_t ref[4][N_GEN + 8];
                int nr[4];
                for (int j = 0; j < B; j++) {
                    nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
                    spec_seq_params prm = su_params(0.0f, 1, 4, false);
                    prm.method = SPEC_METHOD_EAGLE;
                    S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                }
                for (;;) {
                    spec_seq *live[4];
                    int mx[4], nl = 0;
                    tree_shape sh[4];
                    spec_method how[4];
                    for (int j = 0; j < B; j++) {
                        int made = S[j]->n_tokens - S[j]->n_prompt;
                        if (made < N_GEN && !tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1]))
                            mx[nl] = N_GEN - made, sh[nl] = shapes[k], how[nl] = SPEC_METHOD_EAGLE, live[nl++] = S[j];
                    }
                    if (!nl) break;
                    spec_step_info info[4];
                    CHECKF(draft_tree_step(NULL, tc, live, nl, sh, how, mx, info, err, sizeof err) == 0, "step: %s", err);
                    for (int j = 0; j < nl; j++) ahead += eagle_len(sp, live[j]) > live[j]->n_tokens - 1;
                }
                for (int j = 0; j < B; j++) {
                    int n = S[j]->n_tokens - S[j]->n_prompt;
                    mism += n != nr[j] || memcmp(S[j]->tokens + S[j]->n_prompt, ref[j], sizeof(int32_t) * (size_t)n);
                    steps += S[j]->st.by[SPEC_PROPOSER_EAGLE].verify_steps;
                    branched += S[j]->st.tree_steps;
                    nodes += S[j]->st.tree_nodes;
                    acc += S[j]->st.accepted;
                    CHECK(S[j]->st.kv_resets == 0);
                    runs++;
                    spec_seq_free(S[j]);
                }
            }
    CHECKF(mism == 0, "%d of %d greedy tree runs differ from plain decoding", mism, runs);
    CHECKF(steps > 0 && branched > 0, "the head verified no trees (%llu steps, %llu branched)", (unsigned long long)steps,
           (unsigned long long)branched);
    CHECKF(ahead == 0, "%d steps left the head's cache ahead of the accepted tokens", ahead);
    fprintf(stderr, "greedy trees: %d runs (8/4/2, 16/5/3; alone and by 4) equal plain decoding; %llu eagle verify "
                    "steps, %llu branched, %.2f nodes and %.2f accepted per step\n", runs, (unsigned long long)steps,
            (unsigned long long)branched, (double)nodes / (double)(steps ? steps : 1), (double)acc / (double)(steps ? steps : 1));
}

/* χ² of the first token of one sampled eagle-tree step after a fixed
 * context, over `runs` seeds, against the target's processed distribution
 * (as test_spec_tree_draft's law for draft trees). The sequence is rolled
 * back to the context after every step. */
static double tree_law(spec_pair *sp, spec_tree_ctx *tc, const su_prompt *pr, sampler_config sc, tree_variant v, int runs,
                       double *crit, double *per_tree) {
    char err[512];
    spec_seq_params prm = su_params(0.0f, 1, 4, false);
    prm.method = SPEC_METHOD_EAGLE;
    spec_seq *s = spec_seq_start(sp, pr->ids, pr->n, &prm, err, sizeof(err));
    CHECK(s != NULL);
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
    spec_method how = SPEC_METHOD_EAGLE;
    long nodes = 0;
    for (int r = 0; r < runs; r++) {
        s->prm.seed = 1000 + (uint64_t)r;
        int mx = 4;
        spec_step_info info;
        CHECK(draft_tree_step(NULL, tc, &s, 1, &sh, &how, &mx, &info, err, sizeof(err)) == 0);
        nodes += info.gamma;
        cnt[s->tokens[N0]]++;
        /* back to the context: tokens[0, N0) are its accepted tokens (the
         * head keeps the target's features of positions up to N0 - 2) */
        s->n_tokens = N0;
        kv_seq_truncate(sp->tpool, s->tkv, N0 - 1);
        for (int d = 0; d < SPEC_DRAFTERS; d++)
            if (s->ds[d]) sp->drafters[d]->i->commit(sp->drafters[d], s->ds[d], s->tokens, N0);
    }
    spec_tree_set_variant(tc, TREE_CORRECT);
    int dof;
    double x2 = chi2_stat(cnt, ex, V, runs, &dof);
    *crit = chi2_critical_001(dof);
    *per_tree = (double)nodes / runs;
    fprintf(stderr, "  T=%.1f top-p %.1f %s: chi2 %.1f (dof %d, critical %.1f at p=0.001), %.1f nodes per tree\n",
            sc.temperature, sc.top_p, v == TREE_CORRECT ? "correct" : "no-residual variant", x2, dof, *crit, *per_tree);
    free(lg), free(p), free(cnt), free(ex);
    spec_seq_free(s);
    return x2;
}

static void tree_sampled(spec_pair *sp, spec_tree_ctx *tc, const su_prompt *pr) {
    sampler_config a = sampler_config_default(), b = sampler_config_default();
    a.temperature = 1.0f;
    b.temperature = 0.7f;
    b.top_p = 0.9f;
    double crit, per;
    fprintf(stderr, "first-token law of sampled eagle-tree steps (8 nodes: 4 wide, 2 deep, without replacement):\n");
    CHECK(tree_law(sp, tc, pr, a, TREE_CORRECT, 20000, &crit, &per) < crit && per > 6.0);
    CHECK(tree_law(sp, tc, pr, b, TREE_CORRECT, 20000, &crit, &per) < crit && per > 2.0);
    CHECK(tree_law(sp, tc, pr, a, TREE_BROKEN_NO_RESIDUAL, 20000, &crit, &per) > crit);
}

int main(void) {
    char tpath[512], hpath[512], bad[512], err[1024];
    tu_model(tpath, sizeof tpath, "stories260K.gguf");
    su_tmp_path(hpath, sizeof hpath, "eagle-head.gguf");
    su_tmp_path(bad, sizeof bad, "eagle-head32.gguf");
    mkhead(hpath, 64, 3);
    mkhead(bad, 32, 3);
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, NULL, be, 256);
    engine_status st;

    /* refusals */
    CHECK(!draft_eagle_load(sp, bad, 0, &st, err, sizeof err) && st == ENGINE_ERR_INVALID && strstr(err, "hidden size"));
    CHECK(!draft_eagle_load(sp, tpath, 0, &st, err, sizeof err) && strstr(err, "not an eagle3 head"));
    drafter *d = draft_eagle_load(sp, hpath, 0, &st, err, sizeof err);
    CHECKF(d, "load: %s", err);
    if (!d) TEST_DONE();
    CHECK(spec_pair_set_drafter(sp, SPEC_DRAFTER_EAGLE, d) == NULL);

    su_prompt prompts[12];
    int np = su_prompts(sp->tok, prompts, 12);

    /* the features, recomputed from nothing before every step */
    recomp rc = {.D = sp->target->hp.dim, .V = sp->n_vocab};
    CHECK(draft_eagle_layers(d, rc.layers) == 3);
    rc.tgt = model_load(tpath, be, NULL, NULL, err, sizeof err);
    rc.head = model_load(hpath, be, NULL, NULL, err, sizeof err);
    CHECK(rc.tgt && rc.head && model_set_taps(rc.tgt, rc.layers, 3) == 0);
    rc.tp = model_kv_pool(rc.tgt, 16, 64, NULL, err, sizeof err);
    rc.hp = model_kv_pool(rc.head, 16, 64, NULL, err, sizeof err);
    rc.feat = malloc(sizeof(float) * 256 * 3 * rc.D), rc.tap = malloc(sizeof(float) * 256 * rc.D);
    rc.lg = malloc(sizeof(float) * 256 * rc.V), rc.q = malloc(sizeof(float) * rc.V);
    rc.smp = sampler_create(rc.V);
    int head_out = rc.head->hp.n_layer; /* its final residual: the feature the next draft row reads */
    CHECK(model_set_taps(rc.head, &head_out, 1) == 0);
    int compared = 0, q_bad = 0, accepted = 0;
    double worst = 0;
    for (int B = 1; B <= 3; B += 2)
        for (int base = 0; base + B <= np && base < 6; base += B) {
            spec_seq *S[3];
            float *q0[3];
            for (int j = 0; j < B; j++) {
                spec_seq_params prm = su_params(1.0f, 7 + base + j, 3, false);
                prm.method = SPEC_METHOD_EAGLE;
                S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                CHECKF(S[j], "start: %s", err);
                q0[j] = malloc(sizeof(float) * rc.V);
            }
            for (int step = 0; step < 10; step++) {
                for (int j = 0; j < B; j++) {
                    recomp_q0(&rc, S[j]->tokens, S[j]->n_tokens, &S[j]->prm.sc);
                    memcpy(q0[j], rc.q, sizeof(float) * rc.V);
                }
                int mx[3] = {4, 4, 4};
                spec_step_info info[3];
                CHECKF(spec_step_batch(sp, S, B, mx, info, err, sizeof err) == 0, "step: %s", err);
                for (int j = 0; j < B; j++) {
                    if (info[j].method != SPEC_DRAFTER_EAGLE || info[j].gamma == 0) continue;
                    double e = 0;
                    for (int v = 0; v < rc.V; v++) e = fmax(e, fabs((double)S[j]->q[v] - q0[j][v]));
                    worst = fmax(worst, e);
                    q_bad += e > 1e-5;
                    compared++;
                    accepted += info[j].accepted;
                }
            }
            for (int j = 0; j < B; j++) {
                CHECK(S[j]->st.kv_resets == 0);
                spec_seq_free(S[j]);
                free(q0[j]);
            }
        }
    CHECKF(compared >= 30 && q_bad == 0, "first draft distribution vs a recomputation from nothing: %d of %d differ "
           "(worst %.2e)", q_bad, compared, worst);
    fprintf(stderr, "features: %d steps' first drafts equal a recomputation from nothing (worst %.2e); %d drafts "
                    "accepted\n", compared, worst, accepted);

    /* lossless: greedy = plain */
    int mism = 0, runs = 0;
    uint64_t steps = 0;
    for (int g = 1; g <= 6; g = g == 1 ? 3 : 6 + (g == 6)) {
        for (int B = 1; B <= 4; B += 3)
            for (int base = 0; base + B <= np; base += B) {
                spec_seq *S[4];
                int32_t ref[4][N_GEN + 8];
                int nr[4];
                for (int j = 0; j < B; j++) {
                    nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
                    spec_seq_params prm = su_params(0.0f, 1, g, false);
                    prm.method = SPEC_METHOD_EAGLE;
                    S[j] = spec_seq_start(sp, prompts[base + j].ids, prompts[base + j].n, &prm, err, sizeof err);
                }
                for (;;) {
                    spec_seq *live[4];
                    int mx[4], nl = 0;
                    for (int j = 0; j < B; j++) {
                        int made = S[j]->n_tokens - S[j]->n_prompt;
                        if (made < N_GEN && !tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1]))
                            mx[nl] = N_GEN - made, live[nl++] = S[j];
                    }
                    if (!nl) break;
                    spec_step_info info[4];
                    CHECKF(spec_step_batch(sp, live, nl, mx, info, err, sizeof err) == 0, "step: %s", err);
                }
                for (int j = 0; j < B; j++) {
                    int n = S[j]->n_tokens - S[j]->n_prompt;
                    mism += n != nr[j] || memcmp(S[j]->tokens + S[j]->n_prompt, ref[j], sizeof(int32_t) * (size_t)n);
                    steps += S[j]->st.by[SPEC_PROPOSER_EAGLE].verify_steps;
                    CHECK(S[j]->st.kv_resets == 0);
                    runs++;
                    spec_seq_free(S[j]);
                }
            }
        if (g == 6) break;
    }
    CHECKF(mism == 0, "%d of %d greedy runs differ from plain decoding", mism, runs);
    CHECKF(steps > 0, "the head verified no drafts");
    fprintf(stderr, "greedy: %d runs (gamma 1, 3, 6; alone and by 4) equal plain decoding; %llu eagle verify steps\n",
            runs, (unsigned long long)steps);

    /* trees */
    spec_tree_ctx *tc = spec_tree_create(sp);
    CHECK(tc != NULL);
    tree_features(sp, tc, &rc, prompts, np);
    tree_is_chain(sp, tc, prompts, np);
    tree_greedy(sp, tc, prompts, np);
    tree_sampled(sp, tc, &prompts[3]);
    spec_tree_destroy(tc);

    sampler_destroy(rc.smp);
    free(rc.feat), free(rc.tap), free(rc.lg), free(rc.q);
    kv_pool_destroy(rc.tp), kv_pool_destroy(rc.hp);
    model_free(rc.tgt), model_free(rc.head);
    spec_pair_free(sp);
    backend_destroy(be);
    unlink(hpath), unlink(bad);
    TEST_DONE();
}
