/* test_engine_tree.c — tree speculation through the engine (issue 17): with
 * speculation.tree auto, and with it fixed, greedy outputs equal plain
 * decoding token for token on 54 prompts submitted all at once, where the
 * requests mix the engine's auto shape, fixed trees of their own bounds, the
 * chain path (tree off) and the n-gram and draft proposers, so chain and tree
 * sequences share steps. The counters show trees were verified (and chosen
 * by the controller in auto); every KV block comes back. Requests that ask
 * for trees the server cannot give (trees off, logprobs, bounds above the
 * server's) are refused with the reason; a grammar-constrained tree request
 * obeys its grammar; a sampled tree request produces its tokens. With
 * Medusa heads loaded, medusa requests beside chain and tree requests equal
 * plain too; medusa without heads, and heads for another target, are
 * refused. */
#include "engine/sched/engine_impl.h" /* the budget controller's test hook (cheap_curve) */
#include "engine/spec/proposers/medusa.h"
#include "tests/engine/engine_util.h"

#include <unistd.h>

/* Under ThreadSanitizer (run_all.sh runs this suite again there) the point is
 * the engine thread against its API: 18 prompts, every mix three times, keep
 * the run near half a minute (54 took 71 s there). */
#if defined(__SANITIZE_THREAD__)
#define N_P 18
#else
#define N_P 54
#endif
#define N_GEN 40

static eu_prompt prompts[N_P];
static eu_out ref[N_P], got[N_P];

/* Test hook: the verify cost curve made flat (a pass of any rows costs as one
 * row), so the shape controller's exploration of trees does not depend on
 * this host's measured curve — on a compute-bound one (a loaded host) trees
 * are not worth trying and "the controller explores trees" failed. Before any
 * request, under the engine's lock (its thread reads the curve under it or
 * while stepping, and nothing steps yet). */
static void cheap_curve(engine *e) {
    eng_lock(e);
    budget_force_curve(&e->bud, e->sp);
    eng_unlock(e);
}

static engine_request base(int i, spec_mode mode) {
    engine_request r = {0};
    r.prompt = prompts[i].ids;
    r.n_prompt = prompts[i].n;
    r.sc = sampler_config_default();
    r.sc.temperature = 0.0f;
    r.max_tokens = N_GEN;
    r.mode = mode;
    return r;
}

/* the request mix: i % 6 picks how request i speculates */
static engine_request mixed(int i) {
    engine_request r = base(i, SPEC_MODE_AUTO);
    switch (i % 6) {
    case 0: break;                                     /* the engine's setting */
    case 1: r.tree = ENGINE_TREE_FIXED, r.tree_budget = 8, r.tree_depth = 4, r.tree_topk = 2; break;
    case 2: r.tree = ENGINE_TREE_OFF; break;           /* the chain path */
    case 3: r.tree = ENGINE_TREE_FIXED, r.method = SPEC_METHOD_NGRAM, r.method_set = true; break;
    case 4: r.tree = ENGINE_TREE_AUTO, r.method = SPEC_METHOD_DRAFT, r.method_set = true; break;
    case 5: r.tree = ENGINE_TREE_FIXED, r.tree_budget = 5, r.tree_depth = 5, r.tree_topk = 1; break; /* a chain of 5 */
    }
    return r;
}

static void run_all(engine *e, eu_out *o, bool mix, spec_mode mode) {
    eu_waiter w;
    eu_waiter_init(&w);
    for (int i = 0; i < N_P; i++) {
        engine_request r = mix ? mixed(i) : base(i, mode);
        eu_out_init(&o[i], eu_submit(e, &r, &w));
        CHECK(o[i].id > 0);
    }
    for (int i = 0; i < N_P; i++) CHECK(eu_drain(e, &o[i], &w, 300000) && o[i].bad_events == 0);
    eu_waiter_destroy(&w);
}

static int compare(const char *what) {
    int bad = 0;
    for (int i = 0; i < N_P; i++) {
        bool ok = got[i].n_tok == ref[i].n_tok && !memcmp(got[i].toks, ref[i].toks, sizeof(int32_t) * (size_t)ref[i].n_tok);
        if (!ok && bad < 3) {
            int at = 0;
            while (at < got[i].n_tok && at < ref[i].n_tok && got[i].toks[at] == ref[i].toks[at]) at++;
            fprintf(stderr, "%s: request %d (mix %d) differs from plain at token %d\n", what, i, i % 6, at);
        }
        bad += !ok;
    }
    CHECKF(bad == 0, "%s: %d of %d outputs differ from plain greedy", what, bad, N_P);
    return bad;
}

static void pools_back(engine *e, const char *what) {
    CHECK(eu_wait_idle(e, 60000));
    engine_stats st;
    engine_get_stats(e, &st);
    CHECKF(st.kv_free_target == st.kv_total && st.kv_free_draft == st.kv_total, "%s: %d/%d and %d/%d blocks back",
           what, st.kv_free_target, st.kv_total, st.kv_free_draft, st.kv_total);
}

static void refused(engine *e, engine_request *r, const char *want) {
    char err[256] = "";
    uint64_t id = 0;
    engine_status st = engine_submit(e, r, &id, err, sizeof(err));
    CHECKF(st == ENGINE_ERR_INVALID, "refusal kind %s, want invalid", engine_status_name(st));
    CHECKF(id == 0 && strstr(err, want), "expected a refusal with \"%s\", got id %llu \"%s\"", want,
           (unsigned long long)id, err);
}

int main(void) {
    engine_config c = engine_config_default();
    c.threads = 2;
    c.max_running = 32;
    c.calibrate = false;
    c.tree = ENGINE_TREE_AUTO;
    engine *e = eu_create(&c, true);
    cheap_curve(e);
    const tokenizer *tok = engine_tokenizer(e);
    for (int i = 0; i < N_P; i++) eu_make_prompt(tok, 3 * i + 1, 12 + (i * 7) % 60, &prompts[i]);

    /* the reference: plain decoding, every request alone */
    for (int i = 0; i < N_P; i++) {
        eu_waiter w;
        eu_waiter_init(&w);
        engine_request r = base(i, SPEC_MODE_OFF);
        eu_out_init(&ref[i], eu_submit(e, &r, &w));
        CHECK(eu_drain(e, &ref[i], &w, 60000) && ref[i].fin.type == ENGINE_EV_FINISHED);
        eu_waiter_destroy(&w);
    }
    engine_info info;
    engine_get_info(e, &info);
    CHECK(info.tree == ENGINE_TREE_AUTO && info.tree_bounds.budget == 16 && info.tree_t_rows[1] > 0 &&
          info.tree_t_rows[16] > 0);

    /* auto engine, the mix */
    engine_stats s0, s1;
    engine_get_stats(e, &s0);
    run_all(e, got, true, SPEC_MODE_AUTO);
    compare("tree auto, mixed requests");
    engine_get_stats(e, &s1);
    uint64_t trees = s1.tree_decisions[1] - s0.tree_decisions[1], chains = s1.tree_decisions[0] - s0.tree_decisions[0];
    fprintf(stderr, "auto engine: %llu tree steps (%llu by the controller), %llu chain-path steps of tree-enabled "
                    "requests; %llu branched, %llu nodes verified\n",
            (unsigned long long)trees, (unsigned long long)(s1.tree_auto - s0.tree_auto), (unsigned long long)chains,
            (unsigned long long)(s1.st.tree_steps - s0.st.tree_steps),
            (unsigned long long)(s1.st.tree_nodes - s0.st.tree_nodes));
    CHECK(trees > 0 && chains > 0 && s1.st.tree_steps > s0.st.tree_steps);
    CHECK(s1.tree_auto > s0.tree_auto); /* the controller explores trees before it settles (on the cheap curve) */
    pools_back(e, "auto");

    /* what cannot be combined with trees, and bounds above the server's */
    engine_request r = base(0, SPEC_MODE_AUTO);
    r.tree = ENGINE_TREE_AUTO;
    r.logprobs = true;
    refused(e, &r, "logprobs");
    r = base(0, SPEC_MODE_AUTO);
    r.tree = ENGINE_TREE_FIXED;
    r.tree_budget = 17;
    refused(e, &r, "tree_budget 17");
    r = base(0, SPEC_MODE_OFF);
    r.tree = ENGINE_TREE_AUTO;
    refused(e, &r, "speculation is off");
    /* a grammar and a fixed tree: every node masked; the output obeys it */
    r = base(0, SPEC_MODE_AUTO);
    r.tree = ENGINE_TREE_FIXED;
    r.grammar = "root ::= [a-z ]+";
    {
        eu_waiter w;
        eu_waiter_init(&w);
        eu_out o;
        eu_out_init(&o, eu_submit(e, &r, &w));
        CHECK(o.id > 0 && eu_drain(e, &o, &w, 60000) && o.fin.type == ENGINE_EV_FINISHED);
        bool ok = o.text_len > 0;
        for (int k = 0; k < o.text_len; k++) ok &= (o.text[k] >= 'a' && o.text[k] <= 'z') || o.text[k] == ' ';
        CHECKF(ok && o.fin.st.tree_nodes > 0, "grammar + tree: \"%.*s\" (%llu nodes)", o.text_len, o.text,
               (unsigned long long)o.fin.st.tree_nodes);
        eu_waiter_destroy(&w);
    }
    /* a sampled fixed tree: tokens come, within max_tokens */
    r = base(5, SPEC_MODE_AUTO);
    r.tree = ENGINE_TREE_FIXED;
    r.sc.temperature = 0.8f;
    r.seed = 42;
    {
        eu_waiter w;
        eu_waiter_init(&w);
        eu_out o;
        eu_out_init(&o, eu_submit(e, &r, &w));
        CHECK(o.id > 0 && eu_drain(e, &o, &w, 60000) && o.fin.type == ENGINE_EV_FINISHED);
        CHECK(o.n_tok >= 1 && o.n_tok <= N_GEN);
        CHECK(o.fin.st.verify_steps > 0 && o.fin.st.tree_nodes > 0);
        eu_waiter_destroy(&w);
    }
    pools_back(e, "refusals");
    engine_destroy(e);

    /* fixed engine: every request of the mix that does not choose gets 16/5/3 */
    c = engine_config_default();
    c.threads = 2;
    c.calibrate = false;
    c.tree = ENGINE_TREE_FIXED;
    e = eu_create(&c, true);
    run_all(e, got, true, SPEC_MODE_AUTO);
    compare("tree fixed, mixed requests");
    engine_get_stats(e, &s1);
    CHECK(s1.tree_decisions[1] > 0 && s1.tree_auto < s1.tree_decisions[1]); /* only the mix's explicit auto ones */
    pools_back(e, "fixed");
    engine_destroy(e);

    /* Medusa heads (identity heads, untrained: they propose, rarely well):
     * medusa requests beside chain and tree ones, all equal plain */
    {
        char hp[600], err[512];
        snprintf(hp, sizeof hp, "%s/specd-medusa-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        engine_config c2 = engine_config_default();
        c2.threads = 2;
        c2.calibrate = false;
        c2.tree = ENGINE_TREE_AUTO;
        c2.tree_budget = 8, c2.tree_depth = 3, c2.tree_topk = 3;
        engine *e0 = eu_create(&c2, true); /* for the target's identity and sizes */
        engine_stats st0;
        engine_get_stats(e0, &st0);
        engine_info in0;
        engine_get_info(e0, &in0);
        CHECK(!in0.has_medusa);
        r = base(0, SPEC_MODE_AUTO);
        r.method = SPEC_METHOD_MEDUSA, r.method_set = true;
        refused(e0, &r, "models.medusa");
        engine_destroy(e0);
        eu_identity_heads(st0.target_id, true, hp);
        c2.medusa_path = hp;
        e = eu_create(&c2, true);
        engine_get_info(e, &in0);
        CHECK(in0.has_medusa);
        eu_waiter w;
        eu_waiter_init(&w);
        engine_stats sm0;
        engine_get_stats(e, &sm0);
        for (int i = 0; i < N_P; i++) {
            engine_request q = base(i, SPEC_MODE_AUTO);
            if (i % 3 == 0) q.method = SPEC_METHOD_MEDUSA, q.method_set = true;
            else if (i % 3 == 1) q.tree = ENGINE_TREE_AUTO;
            eu_out_init(&got[i], eu_submit(e, &q, &w));
            CHECK(got[i].id > 0);
        }
        for (int i = 0; i < N_P; i++) CHECK(eu_drain(e, &got[i], &w, 300000) && got[i].bad_events == 0);
        eu_waiter_destroy(&w);
        compare("medusa beside chains and trees");
        engine_get_stats(e, &s1);
        /* ONE target pass per step whatever proposed (32 sequences of at
         * most 9 rows fit the target's batch): Medusa, tree and chain rows
         * were verified together */
        CHECKF(s1.verify_calls - sm0.verify_calls == s1.steps - sm0.steps && s1.mixed_steps > sm0.mixed_steps,
               "%llu target calls for %llu steps, %llu of them mixed", (unsigned long long)(s1.verify_calls - sm0.verify_calls),
               (unsigned long long)(s1.steps - sm0.steps), (unsigned long long)(s1.mixed_steps - sm0.mixed_steps));
        fprintf(stderr, "medusa beside chains and trees: %llu steps, %llu target calls, %llu steps mixed paths\n",
                (unsigned long long)(s1.steps - sm0.steps), (unsigned long long)(s1.verify_calls - sm0.verify_calls),
                (unsigned long long)(s1.mixed_steps - sm0.mixed_steps));
        uint64_t med_nodes = 0;
        for (int i = 0; i < N_P; i += 3) med_nodes += got[i].fin.st.tree_nodes;
        CHECKF(med_nodes > 0, "medusa requests verified no tree nodes");
        /* the auto requests (two in three) were moved between Medusa and
         * the chain/tree path by the engine's path controller: both taken */
        CHECKF(s1.path_steps[0] > 0 && s1.path_steps[1] > 0, "auto path steps: chain/tree %llu, medusa %llu",
               (unsigned long long)s1.path_steps[0], (unsigned long long)s1.path_steps[1]);
        /* one auto request at a time (batch 1: the decision is the
         * sequence's own), switching as its controller explores: plain's tokens */
        for (int i = 0; i < 6; i++) {
            eu_waiter_init(&w);
            engine_request q = base(i, SPEC_MODE_AUTO);
            eu_out_init(&got[i], eu_submit(e, &q, &w));
            CHECK(got[i].id > 0 && eu_drain(e, &got[i], &w, 300000) && got[i].bad_events == 0);
            eu_waiter_destroy(&w);
            CHECKF(got[i].n_tok == ref[i].n_tok && !memcmp(got[i].toks, ref[i].toks, sizeof(int32_t) * (size_t)ref[i].n_tok),
                   "auto alone, prompt %d differs from plain", i);
        }
        engine_stats s2;
        engine_get_stats(e, &s2);
        CHECKF(s2.path_steps[1] > s1.path_steps[1] && s2.path_steps[0] > s1.path_steps[0],
               "alone: chain/tree %llu, medusa %llu steps", (unsigned long long)(s2.path_steps[0] - s1.path_steps[0]),
               (unsigned long long)(s2.path_steps[1] - s1.path_steps[1]));
        pools_back(e, "medusa");
        engine_destroy(e);
        unlink(hp);
        /* heads for another target are refused at start, naming both */
        CHECK(eu_identity_heads("llama-0000000000000000", false, hp));
        static char tpath[512];
        c2.target_path = tu_model(tpath, sizeof tpath, "stories260K.gguf");
        c2.draft_path = NULL;
        CHECK(engine_create(&c2, NULL, err, sizeof err) == NULL);
        CHECKF(strstr(err, "llama-0000000000000000"), "foreign heads: %s", err);
        unlink(hp);
    }

    /* trees off: a request asking for one is refused with the key to set */
    c.tree = ENGINE_TREE_OFF;
    e = eu_create(&c, true);
    r = base(0, SPEC_MODE_AUTO);
    r.tree = ENGINE_TREE_AUTO;
    refused(e, &r, "speculation.tree");
    engine_destroy(e);
    TEST_DONE();
}
