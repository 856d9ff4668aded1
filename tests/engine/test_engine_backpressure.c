/* test_engine_backpressure.c — a consumer that stops reading does not stall
 * the others: with rings of 4 events, request X (submitted first) is never
 * read while seven others are; they all finish while X sits paused with its
 * ring full; then X is drained and completes with exactly the tokens it
 * produces alone (no event lost to the pause). */
#include "tests/engine/engine_util.h"

#define N_OTHERS 7

static engine_request request(const eu_prompt *p, int i) {
    engine_request r = {0};
    r.prompt = p->ids;
    r.n_prompt = p->n;
    r.sc = sampler_config_default();
    r.sc.temperature = i % 2 ? 0.7f : 0.0f;
    r.seed = 300 + (uint64_t)i;
    r.max_tokens = 60 + 10 * i;
    r.gamma = 2 + i % 4;
    return r;
}

static bool pred_one_left(const engine_stats *st, void *arg) {
    return st->requests_done == (uint64_t)N_OTHERS && st->running == 1;
}

int main(void) {
    engine_config c = engine_config_default();
    c.threads = 2;
    c.ring_events = 4;
    c.max_running = 8;
    engine *e = eu_create(&c, true);
    engine_stats st0, st;
    engine_get_stats(e, &st0);
    eu_prompt px, po[N_OTHERS];
    eu_make_prompt(engine_tokenizer(e), 20, 9, &px);
    for (int i = 0; i < N_OTHERS; i++) eu_make_prompt(engine_tokenizer(e), 21 + i, 4 + 3 * i, &po[i]);

    eu_waiter wx, w;
    eu_waiter_init(&wx);
    eu_waiter_init(&w);
    eu_out x, others[N_OTHERS];
    engine_request r = request(&px, 0);
    r.max_tokens = 150;
    eu_out_init(&x, eu_submit(e, &r, &wx));
    for (int i = 0; i < N_OTHERS; i++) {
        r = request(&po[i], i + 1);
        eu_out_init(&others[i], eu_submit(e, &r, &w));
    }
    /* read the others only */
    uint64_t seen = 0;
    double t0 = eu_now_ms();
    bool all = false;
    while (!all && eu_now_ms() - t0 < 120000) {
        all = true;
        for (int i = 0; i < N_OTHERS; i++) all &= eu_take(e, &others[i]);
        if (!all) eu_wait(&w, &seen, 50);
    }
    CHECKF(all, "the others did not finish while X was not read");
    for (int i = 0; i < N_OTHERS; i++)
        CHECKF(others[i].fin.type == ENGINE_EV_FINISHED && others[i].fin.reason != FINISH_CANCELLED &&
               others[i].bad_events == 0 && others[i].released, "other #%d: type %d reason %s", i,
               others[i].fin.type, engine_finish_name(others[i].fin.reason));
    /* X is still there, paused, not finished */
    CHECKF(eu_wait_stats(e, pred_one_left, NULL, 10000, &st), "done %llu running %d",
           (unsigned long long)st.requests_done, st.running);
    uint64_t tokens_then = st.tokens;
    usleep(50000);
    engine_get_stats(e, &st);
    CHECKF(st.tokens == tokens_then && st.running == 1, "X kept producing with a full ring (%llu -> %llu tokens)",
           (unsigned long long)tokens_then, (unsigned long long)st.tokens);

    /* drain X: it resumes and completes */
    CHECK(eu_drain(e, &x, &wx, 60000));
    CHECKF(x.fin.type == ENGINE_EV_FINISHED && (x.fin.reason == FINISH_LENGTH || x.fin.reason == FINISH_STOP),
           "X: type %d reason %s", x.fin.type, engine_finish_name(x.fin.reason));
    CHECKF(x.bad_events == 0 && x.released && x.n_started == 1 && x.started_first, "X: event order");
    CHECKF(x.fin.completion_tokens == x.n_tok, "X: usage %d, events carried %d", x.fin.completion_tokens, x.n_tok);
    CHECKF(x.n_tokens_ev > c.ring_events, "X produced only %d tokens events: the test did not fill its ring",
           x.n_tokens_ev);

    /* the same request alone, read eagerly */
    eu_out xa;
    r = request(&px, 0);
    r.max_tokens = 150;
    eu_out_init(&xa, eu_submit(e, &r, &wx));
    CHECK(eu_drain(e, &xa, &wx, 60000));
    CHECKF(xa.n_tok == x.n_tok && !memcmp(xa.toks, x.toks, sizeof(int32_t) * (size_t)x.n_tok) &&
           xa.text_len == x.text_len && !memcmp(xa.text, x.text, (size_t)x.text_len),
           "X after the pause (%d tokens) differs from X alone (%d tokens)", x.n_tok, xa.n_tok);
    CHECK(eu_wait_idle(e, 10000));
    engine_get_stats(e, &st);
    CHECKF(st.kv_free_target == st0.kv_free_target && st.kv_free_draft == st0.kv_free_draft, "KV free %d/%d",
           st.kv_free_target, st.kv_free_draft);
    engine_destroy(e);
    eu_waiter_destroy(&wx);
    eu_waiter_destroy(&w);
    TEST_DONE();
}
