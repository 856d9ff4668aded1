/* test_engine_starvation.c — paused requests give their slot up (issue #25).
 * Part 1: max_running 2, two long requests that are never read (their rings
 * fill and they pause), then a third that must be admitted, stream and
 * finish while the first two still sit unread; then the two are drained and
 * their streams equal the same requests run alone (no gap, same tokens).
 * Part 2: the per-client bound: with max_running 4 (max_per_client 2) one
 * client's four unread requests hold at most two admissions, the rest wait,
 * and another client's request still runs. */
#include "tests/engine/engine_util.h"

#define LONG_TOKENS 400

static engine_request request(const eu_prompt *p, int i, int max_tokens) {
    engine_request r = {0};
    r.prompt = p->ids;
    r.n_prompt = p->n;
    r.sc = sampler_config_default();
    r.sc.temperature = i % 2 ? 0.8f : 0.0f; /* one greedy, one seeded sampled */
    r.seed = 500 + (uint64_t)i;
    r.max_tokens = max_tokens;
    r.gamma = 4; /* fixed γ: a seeded sampled stream is then the same in any schedule */
    return r;
}

static bool pred_paused(const engine_stats *st, void *arg) { return st->paused == *(int *)arg; }

/* Reads o until its final event (60 s at most) and checks its event contract. */
static void finish_ok(engine *e, eu_out *o, eu_waiter *w, const char *what) {
    CHECKF(eu_drain(e, o, w, 60000), "%s did not finish", what);
    CHECKF(o->fin.type == ENGINE_EV_FINISHED && o->fin.reason != FINISH_CANCELLED && o->bad_events == 0 &&
           o->released && o->n_started == 1 && o->started_first, "%s: type %d reason %s, %d bad events", what,
           o->fin.type, engine_finish_name(o->fin.reason), o->bad_events);
    CHECKF(o->fin.completion_tokens == o->n_tok, "%s: usage %d, events carried %d", what, o->fin.completion_tokens,
           o->n_tok);
}

static void part_slots(void) {
    engine_config c = engine_config_default();
    c.threads = 2;
    c.ring_events = 8;
    c.max_running = 2;
    engine *e = eu_create(&c, true);
    engine_stats st0, st;
    engine_get_stats(e, &st0);
    eu_prompt p[3];
    for (int i = 0; i < 3; i++) eu_make_prompt(engine_tokenizer(e), 40 + i, 6 + 3 * i, &p[i]);

    eu_waiter wa, wc;
    eu_waiter_init(&wa);
    eu_waiter_init(&wc);
    eu_out a[2], v;
    for (int i = 0; i < 2; i++) {
        engine_request r = request(&p[i], i, LONG_TOKENS);
        eu_out_init(&a[i], eu_submit(e, &r, &wa));
    }
    int two = 2;
    CHECKF(eu_wait_stats(e, pred_paused, &two, 30000, &st), "the unread requests did not pause (%d paused, %d "
           "running)", st.paused, st.running);

    /* both slots' holders are paused: a third request runs and finishes */
    engine_request r = request(&p[2], 0, 40);
    double t0 = eu_now_ms();
    eu_out_init(&v, eu_submit(e, &r, &wc));
    finish_ok(e, &v, &wc, "the third request");
    printf("third request beside two paused ones: finished in %.1f ms (%d tokens, queued %.1f ms)\n",
           eu_now_ms() - t0, v.n_tok, v.queue_ms);
    engine_get_stats(e, &st);
    CHECKF(st.paused == 2 && st.requests_done == 1, "paused %d done %llu", st.paused,
           (unsigned long long)st.requests_done);

    /* the paused two resume and complete with their solo tokens */
    for (int i = 0; i < 2; i++) finish_ok(e, &a[i], &wa, "a paused request");
    for (int i = 0; i < 2; i++) {
        CHECKF(a[i].n_tokens_ev > c.ring_events, "request %d produced %d tokens events: its ring never filled", i,
               a[i].n_tokens_ev);
        eu_out solo;
        r = request(&p[i], i, LONG_TOKENS);
        eu_out_init(&solo, eu_submit(e, &r, &wc));
        finish_ok(e, &solo, &wc, "a solo request");
        CHECKF(solo.n_tok == a[i].n_tok && !memcmp(solo.toks, a[i].toks, sizeof(int32_t) * (size_t)solo.n_tok) &&
               solo.text_len == a[i].text_len && !memcmp(solo.text, a[i].text, (size_t)solo.text_len),
               "request %d after its pause (%d tokens) differs from it alone (%d tokens)", i, a[i].n_tok, solo.n_tok);
    }
    CHECK(eu_wait_idle(e, 10000));
    engine_get_stats(e, &st);
    CHECKF(st.kv_free_target == st0.kv_free_target && st.kv_free_draft == st0.kv_free_draft, "KV free %d/%d",
           st.kv_free_target, st.kv_free_draft);
    engine_destroy(e);
    eu_waiter_destroy(&wa);
    eu_waiter_destroy(&wc);
}

static void part_fair_share(void) {
    engine_config c = engine_config_default();
    c.threads = 2;
    c.ring_events = 8;
    c.max_running = 4; /* max_per_client 2 */
    engine *e = eu_create(&c, true);
    eu_prompt p;
    eu_make_prompt(engine_tokenizer(e), 50, 8, &p);
    eu_waiter wa, wb;
    eu_waiter_init(&wa);
    eu_waiter_init(&wb);
    eu_out a[4], b[2];
    for (int i = 0; i < 4; i++) {
        engine_request r = request(&p, i, LONG_TOKENS);
        r.seed = 500 + (uint64_t)(i % 2); /* requests 2 and 3 are twins of 0 and 1 */
        r.client = 7;
        eu_out_init(&a[i], eu_submit(e, &r, &wa));
    }
    int two = 2;
    engine_stats st;
    CHECKF(eu_wait_stats(e, pred_paused, &two, 30000, &st), "client 7's requests did not pause (%d paused)",
           st.paused);
    usleep(100000);
    engine_get_stats(e, &st);
    CHECKF(st.running + st.prefilling == 2 && st.waiting == 2, "client 7 holds %d admitted requests (bound 2), "
           "%d wait", st.running + st.prefilling, st.waiting);
    /* another client, and one without a client, still run */
    for (int i = 0; i < 2; i++) {
        engine_request r = request(&p, i, 30);
        r.client = i == 0 ? 8 : 0;
        eu_out_init(&b[i], eu_submit(e, &r, &wb));
    }
    for (int i = 0; i < 2; i++) finish_ok(e, &b[i], &wb, "another client's request");
    engine_get_stats(e, &st);
    CHECKF(st.waiting == 2, "client 7's queued requests were admitted beyond its share (%d wait)", st.waiting);
    /* reading client 7 lets its queued requests in, one share at a time */
    uint64_t seen = 0;
    double t0 = eu_now_ms();
    bool all = false;
    while (!all && eu_now_ms() - t0 < 120000) {
        all = true;
        for (int i = 0; i < 4; i++) all &= eu_take(e, &a[i]);
        if (!all) eu_wait(&wa, &seen, 50);
    }
    CHECK(all);
    for (int i = 0; i < 4; i++) finish_ok(e, &a[i], &wa, "client 7's request");
    for (int i = 0; i < 4; i++)
        CHECKF(a[i].n_tok == a[i % 2].n_tok && !memcmp(a[i].toks, a[i % 2].toks, sizeof(int32_t) * (size_t)a[i].n_tok),
               "client 7's request %d differs from its twin %d", i, i % 2);
    CHECK(eu_wait_idle(e, 10000));
    engine_destroy(e);
    eu_waiter_destroy(&wa);
    eu_waiter_destroy(&wb);
}

int main(void) {
    part_slots();
    part_fair_share();
    TEST_DONE();
}
