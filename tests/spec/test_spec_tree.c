/* test_spec_tree.c — tree verify in the engine (spec_tree.h) at temperature 0
 * must reproduce plain greedy decoding token for token: 50 corpus prompts on
 * the real pair's target (stories260K), trees of several fixed shapes whose
 * nodes hold the plain continuation at a random sibling rank (or not at all)
 * among random tokens, so accepted paths sit at scattered rows and every step
 * compacts the KV cache; then batches of mixed chain / tree / plain sequences
 * in one target pass. A wrong position (row index instead of depth), a
 * missing ancestor in the mask or a compaction that misses a row changes the
 * target's argmax and the output. After each run the cache must equal a fresh
 * prefill of the accepted tokens (K/V and next-step logits). */
#include "engine/spec/spec_tree.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#define N_PROMPTS 50
#define N_GEN 40

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

typedef struct {
    const char *name;
    int depth, width, budget;
} shape;

/* A tree of the shape at the sequence's context: node tokens are random, but
 * with probability 0.75 one child of each on-path node holds the plain
 * continuation ref[made + depth - 1] at a random sibling rank. */
static void make_tree(spec_tree *t, const shape *sh, const int32_t *ref, int nr, int made, int V, uint64_t *rs) {
    t->n_nodes = 0;
    t->q = NULL;
    int frontier[DRAFTER_MAX_NODES + 1], on_path[DRAFTER_MAX_NODES + 1], nf = 1;
    frontier[0] = -1;
    on_path[0] = 1;
    for (int d = 1; d <= sh->depth && t->n_nodes < sh->budget; d++) {
        int next[DRAFTER_MAX_NODES], next_on[DRAFTER_MAX_NODES], nn = 0;
        for (int f = 0; f < nf && t->n_nodes < sh->budget; f++) {
            int good = on_path[f] && t_unif(rs) < 0.75 ? (int)(t_splitmix(rs) % (uint64_t)sh->width) : -1;
            for (int c = 0; c < sh->width && t->n_nodes < sh->budget; c++) {
                int32_t tok = (int32_t)(t_splitmix(rs) % (uint64_t)V);
                bool g = c == good && made + d - 1 < nr;
                if (g) tok = ref[made + d - 1];
                t->nodes[t->n_nodes] = (drafter_node){tok, (int16_t)frontier[f], true};
                next[nn] = t->n_nodes++;
                next_on[nn++] = g;
            }
        }
        memcpy(frontier, next, sizeof(int) * (size_t)nn);
        memcpy(on_path, next_on, sizeof(int) * (size_t)nn);
        nf = nn;
    }
}

static void check_cache(spec_seq *s, su_cache_stats *cs) {
    spec_pair *sp = s->sp;
    su_check_one("target", sp->target, sp->tpool, s->tkv, s->tokens, s->n_tokens, cs);
}

static const shape shapes[] = {
    {"chain 5", 5, 1, 5},
    {"2 wide x 2 deep", 2, 2, 6},
    {"3 wide x 3 deep, 16", 3, 3, 16},
    {"2 wide x 4 deep, 8", 4, 2, 8},
    {"4 wide x 1 deep", 1, 4, 4},
};
#define N_SHAPES (int)(sizeof(shapes) / sizeof(shapes[0]))

static void greedy_alone(spec_pair *sp, spec_tree_ctx *tc) {
    uint64_t rs = 17;
    int32_t ref[N_GEN];
    su_cache_stats cs = {0};
    for (int k = 0; k < N_SHAPES; k++) {
        int runs = 0, mism = 0;
        spec_stats tot = {0};
        for (int i = 0; i < n_prompts; i++) {
            int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, ref);
            spec_seq_params prm = su_params(0.0f, 1, 0, false);
            char err[512];
            spec_seq *s = spec_seq_start(sp, prompts[i].ids, prompts[i].n, &prm, err, sizeof(err));
            CHECKF(s != NULL, "spec_seq_start: %s", err);
            if (!s) continue;
            int np = prompts[i].n;
            for (;;) {
                int made = s->n_tokens - np;
                if (made >= N_GEN || tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) break;
                spec_tree t;
                make_tree(&t, &shapes[k], ref, nr, made, sp->n_vocab, &rs);
                int mx = N_GEN - made;
                spec_step_info info;
                if (spec_tree_step(tc, &s, 1, &t, &mx, &info, err, sizeof(err)) != 0) {
                    CHECKF(strstr(err, "context full") != NULL, "spec_tree_step: %s", err);
                    break;
                }
            }
            int n = s->n_tokens - np;
            if (n > N_GEN) n = N_GEN;
            bool same = n == nr && !memcmp(s->tokens + np, ref, sizeof(int32_t) * (size_t)nr);
            if (!same && mism++ < 3) {
                int at = 0;
                while (at < n && at < nr && s->tokens[np + at] == ref[at]) at++;
                fprintf(stderr, "%s: prompt %d differs from plain greedy at token %d\n", shapes[k].name, i, at);
            }
            CHECK(same);
            CHECK(s->st.kv_resets == 0);
            if (i % 5 == 0) check_cache(s, &cs);
            spec_stats_add(&tot, &s->st);
            spec_seq_free(s);
            runs++;
        }
        fprintf(stderr, "%-22s %d prompts, %d differ from plain greedy; %llu tree passes, %.2f nodes and %.2f "
                        "accepted per pass, %.2f tokens per target pass\n",
                shapes[k].name, runs, mism, (unsigned long long)tot.verify_steps,
                (double)tot.drafted / (double)(tot.verify_steps ? tot.verify_steps : 1),
                (double)tot.accepted / (double)(tot.verify_steps ? tot.verify_steps : 1),
                spec_stats_tokens_per_pass(&tot));
        CHECK(tot.verify_steps > 0 && tot.accepted > 0);
    }
    fprintf(stderr, "caches vs fresh prefill: %ld K/V checks (worst %.3g), %ld next-step logits checks (worst %.3g)\n",
            cs.kv_checks, cs.worst_kv, cs.checks, cs.worst);
    CHECK(cs.kv_checks > 0);
}

/* B sequences in one pass each step: sequence j uses shape (j + offset) %
 * (N_SHAPES + 1), the last index meaning a plain step. */
static void greedy_batched(spec_pair *sp, spec_tree_ctx *tc) {
    enum { B = 6 };
    uint64_t rs = 99;
    int mism = 0, batches = 0;
    su_cache_stats cs = {0};
    for (int base = 0; base + B <= n_prompts; base += B) {
        int32_t ref[B][N_GEN];
        int nr[B], np[B];
        spec_seq *S[B];
        char err[512];
        for (int j = 0; j < B; j++) {
            nr[j] = su_plain_greedy(sp, prompts[base + j].ids, prompts[base + j].n, N_GEN, ref[j]);
            np[j] = prompts[base + j].n;
            spec_seq_params prm = su_params(0.0f, 1, 0, false);
            S[j] = spec_seq_start(sp, prompts[base + j].ids, np[j], &prm, err, sizeof(err));
            CHECKF(S[j] != NULL, "spec_seq_start: %s", err);
            if (!S[j]) return;
        }
        for (int step = 0;; step++) {
            spec_seq *live[B];
            spec_tree t[B];
            int mx[B], nl = 0;
            for (int j = 0; j < B; j++) {
                int made = S[j]->n_tokens - np[j];
                if (made >= N_GEN || tok_is_eog(sp->tok, S[j]->tokens[S[j]->n_tokens - 1])) continue;
                int k = (j + step + base) % (N_SHAPES + 1);
                if (k == N_SHAPES) t[nl].n_nodes = 0, t[nl].q = NULL;
                else make_tree(&t[nl], &shapes[k], ref[j], nr[j], made, sp->n_vocab, &rs);
                mx[nl] = N_GEN - made;
                live[nl++] = S[j];
            }
            if (!nl) break;
            spec_step_info info[B];
            int rc = spec_tree_step(tc, live, nl, t, mx, info, err, sizeof(err));
            CHECKF(rc == 0, "spec_tree_step (batch of %d): %s", nl, err);
            if (rc) break;
            batches++;
        }
        for (int j = 0; j < B; j++) {
            int n = S[j]->n_tokens - np[j];
            if (n > N_GEN) n = N_GEN;
            bool same = n == nr[j] && !memcmp(S[j]->tokens + np[j], ref[j], sizeof(int32_t) * (size_t)nr[j]);
            mism += !same;
            CHECKF(same, "batched: prompt %d differs from plain greedy", base + j);
            check_cache(S[j], &cs);
            spec_seq_free(S[j]);
        }
    }
    fprintf(stderr, "batched (6 sequences of mixed chain/tree/plain shapes per pass): %d target passes, %d outputs "
                    "differ; caches: worst K/V %.3g, logits %.3g\n",
            batches, mism, cs.worst_kv, cs.worst);
}

/* Sampled trees run and stay reproducible under a seed (the law itself is
 * tests/spec/test_tree_exact.c's). */
static void sampled(spec_pair *sp, spec_tree_ctx *tc) {
    int32_t a[N_GEN], b[N_GEN];
    for (int i = 0; i < 3; i++) {
        int na = 0, nb = 0;
        for (int rep = 0; rep < 2; rep++) {
            uint64_t rs = 5;
            spec_seq_params prm = su_params(0.8f, 4242, 0, false);
            char err[512];
            spec_seq *s = spec_seq_start(sp, prompts[i].ids, prompts[i].n, &prm, err, sizeof(err));
            CHECK(s != NULL);
            int np = prompts[i].n;
            while (s->n_tokens - np < N_GEN && !tok_is_eog(sp->tok, s->tokens[s->n_tokens - 1])) {
                spec_tree t;
                make_tree(&t, &shapes[2], s->tokens + np, 0, 0, sp->n_vocab, &rs);
                int mx = N_GEN - (s->n_tokens - np);
                spec_step_info info;
                if (spec_tree_step(tc, &s, 1, &t, &mx, &info, err, sizeof(err)) != 0) break;
            }
            int n = s->n_tokens - np < N_GEN ? s->n_tokens - np : N_GEN;
            memcpy(rep ? b : a, s->tokens + np, sizeof(int32_t) * (size_t)n);
            *(rep ? &nb : &na) = n;
            spec_seq_free(s);
        }
        CHECKF(na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na), "prompt %d: seeded tree run not "
               "reproducible", i);
    }
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
    CHECK(tc != NULL);
    greedy_alone(sp, tc);
    greedy_batched(sp, tc);
    sampled(sp, tc);
    spec_tree_destroy(tc);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
