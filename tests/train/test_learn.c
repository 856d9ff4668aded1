/* test_learn.c — learning from traffic (issue 37) on the real target
 * (stories260K), without the server around it:
 *   - the ring: never above its cap, oldest dropped first, a sample larger
 *     than the cap refused, a snapshot's samples readable after they are
 *     dropped; the spill file reloads exactly what was written, and a file
 *     of another target is emptied;
 *   - recording: every finished request that did not opt out leaves its
 *     tokens and one feature row per fed position; an opted-out request
 *     (no_learn) never enters the ring; pause keeps requests out;
 *   - the learner: a round from nothing trains a head and swaps it in (the
 *     head version moves); a deliberately worse candidate is refused and
 *     the live head stays;
 *   - outputs: greedy EAGLE requests equal plain decoding with a swap and a
 *     rollback forced in the middle of the request;
 *   - the admin operations: save writes a head that loads, unknown ops and
 *     rollback without a previous head are refused. */
#include "engine/learn/ring.h"
#include "engine/train/eagle_train.h"
#include "engine/train/learner.h"
#include "tests/engine/engine_util.h"
#include "kernels/half.h"

#include <math.h>

#include <sys/stat.h>

/* ---- the ring --------------------------------------------------------------- */

static void fill(int32_t *tok, uint16_t *feat, int n, int width, int seed) {
    for (int i = 0; i < n; i++) tok[i] = seed * 100 + i;
    for (int i = 0; i < (n - 1) * width; i++) feat[i] = (uint16_t)(seed * 7 + i);
}

static void test_ring(const char *dir) {
    enum { N = 10, W = 6 };
    int32_t tok[N];
    uint16_t feat[(N - 1) * W];
    size_t one = sizeof(learn_sample) + sizeof(int32_t) * N + sizeof(uint16_t) * (N - 1) * W;
    char err[256];
    learn_ring *r = learn_ring_create(3 * one, W, NULL, "t", err, sizeof err);
    CHECK(r);
    learn_sample **snap = NULL;
    int ns = -1;
    for (int k = 1; k <= 5; k++) {
        fill(tok, feat, N, W, k);
        CHECK(learn_ring_push(r, tok, N, feat) == 1);
        if (k == 2) ns = learn_ring_snapshot(r, &snap); /* holds samples 1 and 2 across their drop */
        learn_ring_stats st;
        learn_ring_get_stats(r, &st);
        CHECKF(st.bytes <= st.cap, "ring bytes %zu above its cap %zu", st.bytes, st.cap);
    }
    learn_ring_stats st;
    learn_ring_get_stats(r, &st);
    CHECKF(st.samples == 3 && st.dropped == 2 && st.positions == 3 * (N - 1), "samples %d dropped %llu", st.samples,
           (unsigned long long)st.dropped);
    learn_sample **now;
    int nn = learn_ring_snapshot(r, &now);
    CHECKF(nn == 3 && now[0]->id == 3 && now[0]->tok[0] == 300 && now[2]->tok[0] == 500, "oldest first: first id %llu",
           nn > 0 ? (unsigned long long)now[0]->id : 0ull);
    learn_ring_release(now, nn), free(now);
    CHECKF(ns == 2 && snap[0]->tok[0] == 100 && snap[1]->feat[0] == 14, "a snapshot outlives the drop");
    learn_ring_release(snap, ns), free(snap);
    int32_t big[4 * N] = {0};
    uint16_t bigf[(4 * N - 1) * W];
    memset(bigf, 0, sizeof bigf);
    CHECK(learn_ring_push(r, big, 4 * N, bigf) == 0); /* larger than the cap: refused, nothing dropped */
    learn_ring_get_stats(r, &st);
    CHECK(st.refused == 1 && st.samples == 3);
    learn_ring_set_cap(r, one);
    learn_ring_get_stats(r, &st);
    CHECK(st.samples == 1 && st.bytes <= one);
    learn_ring_destroy(r);

    /* spill: written, reloaded exactly; another target's file is emptied */
    char path[512];
    snprintf(path, sizeof path, "%s/ring.db", dir);
    r = learn_ring_create(3 * one, W, path, "target-a", err, sizeof err);
    CHECKF(r, "%s", err);
    for (int k = 1; k <= 4; k++) fill(tok, feat, N, W, k), learn_ring_push(r, tok, N, feat);
    CHECK(learn_ring_spill(r) == 3);
    fill(tok, feat, N, W, 9), learn_ring_push(r, tok, N, feat); /* not spilled: lost with the process */
    learn_ring_destroy(r);
    r = learn_ring_create(3 * one, W, path, "target-a", err, sizeof err);
    learn_ring_get_stats(r, &st);
    nn = learn_ring_snapshot(r, &now);
    fill(tok, feat, N, W, 4);
    CHECKF(st.loaded == 3 && nn == 3 && now[2]->id == 4 && !memcmp(now[2]->tok, tok, sizeof tok) &&
               !memcmp(now[2]->feat, feat, sizeof feat),
           "reloaded %llu samples", (unsigned long long)st.loaded);
    learn_ring_release(now, nn), free(now);
    fill(tok, feat, N, W, 6);
    CHECK(learn_ring_push(r, tok, N, feat) == 1);
    nn = learn_ring_snapshot(r, &now);
    CHECKF(nn == 3 && now[2]->id == 5, "ids go on after a reload (%llu)", nn > 2 ? (unsigned long long)now[2]->id : 0ull);
    learn_ring_release(now, nn), free(now);
    learn_ring_destroy(r);
    r = learn_ring_create(3 * one, W, path, "target-b", err, sizeof err);
    learn_ring_get_stats(r, &st);
    CHECK(r && st.loaded == 0 && st.samples == 0);
    learn_ring_destroy(r);
}

/* ---- the engine --------------------------------------------------------------- */

static eu_waiter W;

static void run(engine *e, const eu_prompt *p, spec_method method, bool no_learn, int max_tokens, eu_out *o) {
    engine_request rq = {.prompt = p->ids, .n_prompt = p->n, .sc = sampler_config_default(), .max_tokens = max_tokens,
                         .method = method, .method_set = true, .no_learn = no_learn,
                         .mode = method == SPEC_METHOD_OFF ? SPEC_MODE_OFF : SPEC_MODE_AUTO};
    rq.sc.temperature = 0;
    eu_out_init(o, eu_submit(e, &rq, &W));
    CHECK(eu_drain(e, o, &W, 60000));
}

static engine_learn_stats lstats(engine *e) {
    engine_learn_stats s;
    engine_get_learn_stats(e, &s);
    return s;
}

/* Waits until the engine reports head version v (a swap is applied between steps). */
static bool wait_version(engine *e, int v) {
    for (int i = 0; i < 500; i++) {
        if (lstats(e).head_version >= v) return true;
        /* the engine thread applies a swap at the top of its loop: a request wakes it */
        usleep(10000);
    }
    return false;
}

int main(void) {
    char dir[] = "/tmp/specd-test-learn-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_ring(dir);

    eu_waiter_init(&W);
    engine_config ec = engine_config_default();
    ec.threads = 1, ec.max_running = 4, ec.calibrate = false;
    ec.learn.enabled = true, ec.learn.ring_bytes = 64u << 20;
    engine *e = eu_create(&ec, false);
    const tokenizer *tok = engine_tokenizer(e);
    engine_learn_stats ls = lstats(e);
    CHECK(ls.enabled && !ls.has_head && ls.head_version == 0);

    /* recording: 12 requests, two of them opted out */
    enum { NREQ = 14 };
    static eu_prompt P[NREQ];
    static eu_out O[NREQ];
    int positions = 0;
    for (int i = 0; i < NREQ; i++) {
        eu_make_prompt(tok, 3 * i + 1, 24 + i, &P[i]);
        run(e, &P[i], SPEC_METHOD_AUTO, i == 3 || i == 7, 64, &O[i]);
        if (i != 3 && i != 7) positions += P[i].n + O[i].n_tok - 1;
    }
    ls = lstats(e);
    CHECKF(ls.ring_samples == NREQ - 2 && ls.opted_out == 2 && ls.ring_positions == positions,
           "ring: %d samples, %llu opted out, %lld positions (want %d, 2, %d)", ls.ring_samples,
           (unsigned long long)ls.opted_out, (long long)ls.ring_positions, NREQ - 2, positions);
    learn_sample **S;
    int n = engine_learn_snapshot(e, &S);
    bool tokens_ok = n == NREQ - 2, opted_in = false, feats_ok = true;
    for (int k = 0, i = 0; k < n && i < NREQ; i++) {
        if (i == 3 || i == 7) continue;
        const learn_sample *s = S[k++];
        tokens_ok &= s->n == P[i].n + O[i].n_tok && !memcmp(s->tok, P[i].ids, sizeof(int32_t) * (size_t)P[i].n) &&
                     !memcmp(s->tok + P[i].n, O[i].toks, sizeof(int32_t) * (size_t)O[i].n_tok);
        for (int j = 0; j < (s->n - 1) * s->width; j += 97) feats_ok &= isfinite(fp16_to_f32(s->feat[j]));
        feats_ok &= s->width == 3 * 64;
    }
    for (int k = 0; k < n; k++) /* the opted-out prompts never appear */
        for (int i = 3; i <= 7; i += 4)
            opted_in |= !memcmp(S[k]->tok, P[i].ids, sizeof(int32_t) * (size_t)P[i].n);
    CHECKF(tokens_ok, "each sample is its request's prompt and output");
    CHECKF(feats_ok, "features: 3 x 64 per position, finite");
    CHECKF(!opted_in, "an opted-out request's tokens never enter the ring");
    engine_learn_release(S, n), free(S);

    /* pause keeps requests out; resume lets them in */
    char msg[256];
    CHECK(engine_learn_control(e, "pause", NULL, msg, sizeof msg) == 0);
    eu_out tmp;
    run(e, &P[0], SPEC_METHOD_AUTO, false, 8, &tmp);
    CHECK(lstats(e).ring_samples == NREQ - 2 && lstats(e).paused);
    CHECK(engine_learn_control(e, "resume", NULL, msg, sizeof msg) == 0 && !lstats(e).paused);
    CHECK(engine_learn_control(e, "rollback", NULL, msg, sizeof msg) == -1); /* nothing swapped yet */
    CHECK(engine_learn_control(e, "save", "/tmp/x", msg, sizeof msg) == -1);  /* no head */
    CHECK(engine_learn_control(e, "explode", NULL, msg, sizeof msg) == -1);

    /* an EAGLE request before any head: plain steps (a head may come), the plain output */
    {
        eu_out plain, spec;
        run(e, &P[5], SPEC_METHOD_OFF, true, 48, &plain);
        run(e, &P[5], SPEC_METHOD_EAGLE, true, 48, &spec);
        CHECKF(spec.fin.type == ENGINE_EV_FINISHED && plain.n_tok == spec.n_tok &&
                   !memcmp(plain.toks, spec.toks, sizeof(int32_t) * (size_t)plain.n_tok),
               "method eagle before any head is learned: plain output");
    }

    /* the learner: a round from nothing swaps a head in */
    learner_config lc;
    learner_config_init(&lc);
    lc.e = e, lc.dir = dir, lc.cpus = 1, lc.share = 1, lc.min_positions = 64, lc.steps = 60, lc.window = 48;
    lc.lr = 2e-3f;
    char err[256];
    learner *l = learner_start(&lc, true, err, sizeof err);
    CHECKF(l, "%s", err);
    int rc = learner_round(l, msg, sizeof msg);
    printf("round 1: %s\n", msg);
    CHECKF(rc == 1, "a head trained from nothing is swapped in: %s", msg);
    CHECKF(wait_version(e, 1) && lstats(e).has_head && lstats(e).swaps == 1, "head version 1 live");
    learner_stop(l);
    /* a rollback from the first learned head goes back to no head, and a second one undoes it */
    CHECKF(engine_learn_control(e, "rollback", NULL, msg, sizeof msg) == 0, "%s", msg);
    CHECKF(wait_version(e, 2) && !lstats(e).has_head, "rolled back to no head");
    CHECKF(engine_learn_control(e, "rollback", NULL, msg, sizeof msg) == 0, "%s", msg);
    CHECKF(wait_version(e, 3) && lstats(e).has_head && lstats(e).rollbacks == 2, "the rollback undone");

    /* a deliberately worse candidate is refused */
    lc.worse = true;
    l = learner_start(&lc, true, err, sizeof err);
    rc = learner_round(l, msg, sizeof msg);
    printf("worse: %s\n", msg);
    ls = lstats(e);
    CHECKF(rc == 0 && ls.rejected == 1 && ls.head_version == 3 && ls.cand_accept < ls.live_accept,
           "a worse candidate is refused (cand %.3f live %.3f)", ls.cand_accept, ls.live_accept);
    learner_stop(l);

    /* save writes a head that loads; a head for the ring's layers is accepted again */
    char saved[600];
    snprintf(saved, sizeof saved, "%s/saved.gguf", dir);
    CHECKF(engine_learn_control(e, "save", saved, msg, sizeof msg) == 0, "%s", msg);
    eagle_head *h = eagle_head_load(engine_learn_target(e), saved, err, sizeof err);
    CHECKF(h, "the saved head loads to train on: %s", err);
    eagle_head_destroy(h);

    /* outputs: a swap and a rollback in the middle of greedy EAGLE requests change nothing */
    for (int i = 0; i < 4; i++) {
        eu_out plain, spec;
        run(e, &P[i + 8], SPEC_METHOD_OFF, true, 96, &plain);
        engine_request rq = {.prompt = P[i + 8].ids, .n_prompt = P[i + 8].n, .sc = sampler_config_default(),
                             .max_tokens = 96, .method = SPEC_METHOD_EAGLE, .method_set = true, .no_learn = true};
        rq.sc.temperature = 0;
        eu_out_init(&spec, eu_submit(e, &rq, &W));
        uint64_t seen = 0;
        int v0 = lstats(e).head_version;
        bool swapped = false;
        while (!eu_take(e, &spec)) {
            if (!swapped && spec.n_tok >= 8 * (i + 1)) { /* mid-request: an offer, or a rollback */
                if (i % 2 == 0) CHECKF(engine_learn_offer(e, saved, err, sizeof err) == 0, "%s", err);
                else CHECKF(engine_learn_control(e, "rollback", NULL, msg, sizeof msg) == 0, "%s", msg);
                swapped = true;
            }
            eu_wait(&W, &seen, 50);
        }
        CHECKF(swapped && lstats(e).head_version == v0 + 1, "a swap happened during request %d", i);
        CHECKF(plain.n_tok == spec.n_tok && !memcmp(plain.toks, spec.toks, sizeof(int32_t) * (size_t)plain.n_tok),
               "request %d: greedy EAGLE output across a swap = plain (%d vs %d tokens)", i, spec.n_tok, plain.n_tok);
        CHECK(spec.fin.st.drafted > 0 || i > 0);
    }
    /* seeded coupled verification across a swap: plain seeded sampling's tokens */
    for (int i = 0; i < 2; i++) {
        eu_out plain, spec;
        engine_request rq = {.prompt = P[i + 1].ids, .n_prompt = P[i + 1].n, .sc = sampler_config_default(),
                             .max_tokens = 96, .method = SPEC_METHOD_OFF, .method_set = true, .no_learn = true,
                             .mode = SPEC_MODE_OFF, .seed = 1234 + (uint64_t)i, .seeded = true,
                             .verify = ENGINE_VERIFY_COUPLED};
        rq.sc.temperature = 0.8f;
        eu_out_init(&plain, eu_submit(e, &rq, &W));
        CHECK(eu_drain(e, &plain, &W, 60000));
        rq.method = SPEC_METHOD_EAGLE, rq.mode = SPEC_MODE_AUTO;
        eu_out_init(&spec, eu_submit(e, &rq, &W));
        uint64_t seen = 0;
        bool swapped = false;
        while (!eu_take(e, &spec)) {
            if (!swapped && spec.n_tok >= 12) {
                if (i == 0) CHECKF(engine_learn_offer(e, saved, err, sizeof err) == 0, "%s", err);
                else CHECKF(engine_learn_control(e, "rollback", NULL, msg, sizeof msg) == 0, "%s", msg);
                swapped = true;
            }
            eu_wait(&W, &seen, 50);
        }
        CHECKF(swapped && plain.n_tok == spec.n_tok && !memcmp(plain.toks, spec.toks, sizeof(int32_t) * (size_t)plain.n_tok),
               "seeded coupled request %d across a swap = plain seeded sampling (%d vs %d tokens)", i, spec.n_tok,
               plain.n_tok);
    }
    engine_destroy(e);
    eu_waiter_destroy(&W);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    TEST_DONE();
}
