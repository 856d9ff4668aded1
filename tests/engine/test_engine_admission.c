/* test_engine_admission.c — admission by KV reservation with a deliberately
 * tiny pool (12 blocks of 16): requests queue, are admitted strictly in FIFO
 * order (a small request never overtakes a big one ahead of it), all complete
 * with the tokens they produce alone; requests that can never fit (prompt +
 * output larger than the pool, prompt longer than the context) get an `error`
 * event at once, even while other requests wait; KV returns to its initial
 * free count. */
#include "tests/engine/engine_util.h"

#include <stdatomic.h>

#define N_REQ 12

/* Admission order: the engine calls a request's notify for the first time
 * right after pushing its `started` (or `error`) event. */
static atomic_int next_rank;
typedef struct {
    eu_waiter *w;
    atomic_int rank;           /* -1 until the first notify */
} tag;

static void rank_notify(void *user) {
    tag *t = user;
    if (atomic_load(&t->rank) < 0) atomic_store(&t->rank, atomic_fetch_add(&next_rank, 1)); /* engine thread only */
    eu_notify(t->w);
}

static uint64_t submit_tagged(engine *e, engine_request *r, tag *t) { return eu_submit_notify(e, r, rank_notify, t); }

static engine_request request(const eu_prompt *p, int max_tokens, int i) {
    engine_request r = {0};
    r.prompt = p->ids;
    r.n_prompt = p->n;
    r.sc = sampler_config_default();
    r.sc.temperature = i % 3 == 0 ? 0.9f : 0.0f;
    r.seed = 50 + (uint64_t)i;
    r.max_tokens = max_tokens;
    r.gamma = 2 + i % 3;
    return r;
}

static bool pred_blocked(const engine_stats *st, void *arg) {
    return st->running == 2 && st->prefilling == 0 && st->waiting == *(int *)arg;
}

int main(void) {
    engine_config c = engine_config_default();
    c.threads = 2;
    c.kv_blocks = 12;
    c.max_ctx = 256;
    c.max_running = 8;
    c.ring_events = 4;
    engine *e = eu_create(&c, true);
    engine_stats st0, st;
    engine_get_stats(e, &st0);
    CHECKF(st0.kv_total == 12 && st0.kv_free_target == 12 && st0.kv_free_draft == 12, "pool %d, free %d/%d",
           st0.kv_total, st0.kv_free_target, st0.kv_free_draft);
    const tokenizer *tok = engine_tokenizer(e);

    /* blocks reserved per request = ceil((prompt + max_tokens + γmax 8 + 2) / 16):
     * #0 4, #1 7 (11 of 12: #2's 3 must wait), #2 3, #3 8, #4 2 (would fit next
     * to #0 and #1's leftovers only if it jumped the queue), ... */
    static const int plen[N_REQ] = {10, 30, 5, 60, 3, 20, 8, 40, 12, 2, 25, 6};
    static const int maxt[N_REQ] = {40, 60, 20, 50, 10, 30, 60, 20, 35, 15, 40, 25};
    eu_prompt prompts[N_REQ];
    eu_out outs[N_REQ], alone[N_REQ];
    tag tags[N_REQ];
    eu_waiter w;
    eu_waiter_init(&w);
    atomic_init(&next_rank, 0);
    for (int i = 0; i < N_REQ; i++) {
        eu_make_prompt(tok, 10 + i, plen[i], &prompts[i]);
        engine_request r = request(&prompts[i], maxt[i], i);
        tags[i].w = &w;
        atomic_init(&tags[i].rank, -1);
        eu_out_init(&outs[i], submit_tagged(e, &r, &tags[i]));
    }
    /* nobody reads yet: #0 and #1 run until their rings are full, the rest wait */
    int waiting = N_REQ - 2;
    CHECKF(eu_wait_stats(e, pred_blocked, &waiting, 30000, &st), "running %d prefilling %d waiting %d", st.running,
           st.prefilling, st.waiting);

    /* requests that can never fit get their error at once, queue or not */
    eu_prompt big, huge;
    eu_make_prompt(tok, 40, 200, &big);  /* 200 + 10 + 10 > 12 blocks of 16 */
    eu_make_prompt(tok, 41, 300, &huge); /* longer than the context (256) */
    engine_request r = request(&big, 10, 1);
    eu_out ebig, ehuge;
    eu_out_init(&ebig, eu_submit(e, &r, &w));
    r = request(&huge, 10, 1);
    eu_out_init(&ehuge, eu_submit(e, &r, &w));
    uint64_t seen = 0;
    double t0 = eu_now_ms();
    while ((!eu_take(e, &ebig) || !eu_take(e, &ehuge)) && eu_now_ms() - t0 < 5000) eu_wait(&w, &seen, 20);
    CHECKF(ebig.got_final && ehuge.got_final, "never-fitting requests behind a blocked queue got no error within "
           "5 s (pool-sized: %d, context-sized: %d)", ebig.got_final, ehuge.got_final);
    engine_get_stats(e, &st);
    CHECKF(st.running == 2 && st.waiting == N_REQ - 2, "the queue moved: running %d waiting %d", st.running,
           st.waiting);

    /* now read everything */
    t0 = eu_now_ms();
    for (;;) {
        bool all = eu_take(e, &ebig) & eu_take(e, &ehuge);
        for (int i = 0; i < N_REQ; i++) all &= eu_take(e, &outs[i]);
        if (all || eu_now_ms() - t0 > 120000) break;
        eu_wait(&w, &seen, 20);
    }
    for (eu_out *x = &ebig; x; x = x == &ebig ? &ehuge : NULL) {
        CHECKF(x->got_final && x->fin.type == ENGINE_EV_ERROR && x->fin.reason == FINISH_ERROR && x->n_events == 1,
               "never-fit: type %d reason %s, %d events", x->fin.type, engine_finish_name(x->fin.reason), x->n_events);
        CHECKF(x->released && x->bad_events == 0 && x->fin.message[0], "never-fit: released %d, message '%s'",
               x->released, x->fin.message);
        CHECKF(x->fin.status == ENGINE_ERR_CONTEXT_FULL, "never-fit: kind %s", engine_status_name(x->fin.status));
        fprintf(stderr, "error event: %s\n", x->fin.message);
    }
    int prev = -1, n_fifo_bad = 0;
    for (int i = 0; i < N_REQ; i++) {
        eu_out *o = &outs[i];
        CHECKF(o->got_final && o->fin.type == ENGINE_EV_FINISHED &&
               (o->fin.reason == FINISH_LENGTH || o->fin.reason == FINISH_STOP),
               "#%d dropped or failed: type %d reason %s %s", i, o->fin.type, engine_finish_name(o->fin.reason),
               o->fin.message);
        CHECKF(o->n_started == 1 && o->started_first && o->released && o->bad_events == 0, "#%d: event order", i);
        CHECK(o->fin.reason != FINISH_LENGTH || o->n_tok == maxt[i]);
        int rank = atomic_load(&tags[i].rank);
        if (rank <= prev) n_fifo_bad++;
        prev = rank;
        fprintf(stderr, "#%d: admitted %d-th, queued %.1f ms, %d tokens\n", i, rank, o->queue_ms, o->n_tok);
    }
    CHECKF(n_fifo_bad == 0, "admission order is not FIFO (%d inversions)", n_fifo_bad);
    CHECKF(outs[N_REQ - 1].queue_ms > outs[0].queue_ms, "the last request waited %.2f ms, the first %.2f ms",
           outs[N_REQ - 1].queue_ms, outs[0].queue_ms);
    CHECK(eu_wait_idle(e, 10000));
    engine_get_stats(e, &st);
    CHECKF(st.kv_free_target == st0.kv_free_target && st.kv_free_draft == st0.kv_free_draft, "KV free %d/%d after",
           st.kv_free_target, st.kv_free_draft);
    CHECKF(st.requests_done == N_REQ + 2, "requests_done %llu", (unsigned long long)st.requests_done);

    /* nothing was cut short by queueing: each output equals the request alone */
    for (int i = 0; i < N_REQ; i++) {
        r = request(&prompts[i], maxt[i], i);
        eu_out_init(&alone[i], eu_submit(e, &r, &w));
        CHECK(eu_drain(e, &alone[i], &w, 30000));
        CHECKF(alone[i].n_tok == outs[i].n_tok &&
               !memcmp(alone[i].toks, outs[i].toks, sizeof(int32_t) * (size_t)outs[i].n_tok),
               "#%d: queued output differs from the output alone", i);
    }
    engine_destroy(e);
    eu_waiter_destroy(&w);
    TEST_DONE();
}
