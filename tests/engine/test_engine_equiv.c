/* test_engine_equiv.c — batching must not change results: 64 seeded requests
 * (mixed prompt lengths, max tokens, temperatures, filters, γ settings, stop
 * strings) submitted at once, drained by four consumer threads, produce exactly
 * the tokens and text each produces alone through the same API; again on a
 * second engine with other binning (padding cap 1, fewer running, chunked
 * prefill, small rings); greedy ones also equal plain decoding. Sampled
 * requests use a fixed γ (the documented contract: adaptive γ follows measured
 * timings, so only greedy or fixed-γ sampled output is schedule-independent).
 * Also checks the engine's counters after the run. */
#include "tests/engine/engine_util.h"

#include <math.h>

/* Under ThreadSanitizer (run_all.sh runs this suite again there) the point is
 * the consumers and the engine thread against the API: 24 requests, every mix
 * of i % 8 three times (64 took 82 s there). */
#if defined(__SANITIZE_THREAD__)
#define N_REQ 24
#else
#define N_REQ 64
#endif
#define N_CONSUMERS 4

typedef struct {
    eu_prompt prompt;
    float temp;
    int top_k;
    float top_p, min_p;
    spec_mode mode;
    int gamma;
    bool adaptive, adaptive_set;
    int max_tokens;
    uint64_t seed;
    const char *stop;
} req_spec;

static req_spec specs[N_REQ];

static bool is_greedy(const req_spec *s) { return s->temp == 0.0f; }

static void build_specs(const tokenizer *tok) {
    for (int i = 0; i < N_REQ; i++) {
        req_spec *s = &specs[i];
        memset(s, 0, sizeof(*s));
        eu_make_prompt(tok, i, 1 + (i * 37) % 150, &s->prompt);
        s->max_tokens = 4 + (i * 29) % 93;
        s->seed = 1000 + (uint64_t)i;
        s->top_p = 1.0f;
        s->stop = i % 5 == 0 ? "." : NULL;
        switch (i % 8) {
        case 0: break;                                                  /* greedy, engine default (adaptive) */
        case 1: s->gamma = 2 + i % 7; break;                            /* greedy, fixed γ 2..8 */
        case 2: s->mode = SPEC_MODE_OFF; break;                         /* greedy, plain */
        case 3: s->temp = 0.8f, s->gamma = 4; break;                    /* sampled, fixed γ */
        case 4: s->temp = 1.0f, s->top_k = 40, s->gamma = 2 + (i / 8) % 7; break;
        case 5: s->temp = 0.6f, s->top_p = 0.9f, s->mode = SPEC_MODE_OFF; break;
        case 6: s->gamma = 3, s->adaptive = true, s->adaptive_set = true; break; /* greedy, adaptive from 3 */
        case 7: s->temp = 1.2f, s->min_p = 0.05f, s->adaptive = false, s->adaptive_set = true; break; /* default γ, fixed */
        }
    }
}

static engine_request make_request(const req_spec *s, spec_mode mode_override, bool override) {
    engine_request r = {0};
    r.prompt = s->prompt.ids;
    r.n_prompt = s->prompt.n;
    r.sc = sampler_config_default();
    r.sc.temperature = s->temp;
    r.sc.top_k = s->top_k;
    r.sc.top_p = s->top_p;
    r.sc.min_p = s->min_p;
    r.seed = s->seed;
    r.max_tokens = s->max_tokens;
    r.stop[0] = s->stop;
    r.mode = override ? mode_override : s->mode;
    r.gamma = override ? 0 : s->gamma;
    r.adaptive = s->adaptive;
    r.adaptive_set = override ? false : s->adaptive_set;
    return r;
}

/* ---- concurrent phase: four consumer threads ---------------------------------- */

typedef struct {
    engine *e;
    eu_out *outs;
    int k;                     /* this consumer drains requests i with i % N_CONSUMERS == k */
    eu_waiter w;
    bool ok;
} consumer;

static void *consumer_main(void *arg) {
    consumer *c = arg;
    double t0 = eu_now_ms();
    uint64_t seen = 0;
    for (;;) {
        bool all = true;
        for (int i = c->k; i < N_REQ; i += N_CONSUMERS) all &= eu_take(c->e, &c->outs[i]);
        if (all) {
            c->ok = true;
            return NULL;
        }
        if (eu_now_ms() - t0 > 600000) {
            fprintf(stderr, "consumer %d: timed out\n", c->k);
            return NULL;
        }
        eu_wait(&c->w, &seen, 100);
    }
}

static bool run_concurrent(engine *e, eu_out *outs) {
    consumer cs[N_CONSUMERS];
    for (int k = 0; k < N_CONSUMERS; k++) {
        cs[k] = (consumer){.e = e, .outs = outs, .k = k};
        eu_waiter_init(&cs[k].w);
    }
    /* submit everything first, then start the readers: the engine runs ahead
     * until each ring's backpressure holds it */
    for (int i = 0; i < N_REQ; i++) {
        engine_request r = make_request(&specs[i], 0, false);
        eu_out_init(&outs[i], eu_submit(e, &r, &cs[i % N_CONSUMERS].w));
    }
    pthread_t th[N_CONSUMERS];
    for (int k = 0; k < N_CONSUMERS; k++) pthread_create(&th[k], NULL, consumer_main, &cs[k]);
    bool ok = true;
    for (int k = 0; k < N_CONSUMERS; k++) {
        pthread_join(th[k], NULL);
        ok &= cs[k].ok;
        eu_waiter_destroy(&cs[k].w);
    }
    return ok;
}

/* ---- checks ----------------------------------------------------------------- */

static void check_out(const char *phase, int i, const eu_out *o) {
    const req_spec *s = &specs[i];
    CHECKF(o->got_final && o->fin.type == ENGINE_EV_FINISHED, "%s #%d: no finished event (type %d: %s)", phase, i,
           o->fin.type, o->fin.message);
    CHECKF(o->bad_events == 0 && o->started_first && o->n_started == 1 && o->released,
           "%s #%d: event order (bad %d, started %d, first %d, released %d)", phase, i, o->bad_events, o->n_started,
           o->started_first, o->released);
    CHECKF(o->prompt_tokens == s->prompt.n, "%s #%d: started reports %d prompt tokens, sent %d", phase, i,
           o->prompt_tokens, s->prompt.n);
    CHECKF(o->fin.reason == FINISH_LENGTH || o->fin.reason == FINISH_STOP, "%s #%d: reason %s", phase, i,
           engine_finish_name(o->fin.reason));
    CHECKF(o->fin.completion_tokens == o->n_tok, "%s #%d: usage says %d tokens, events carried %d", phase, i,
           o->fin.completion_tokens, o->n_tok);
    if (o->fin.reason == FINISH_LENGTH)
        CHECKF(o->n_tok == s->max_tokens, "%s #%d: length finish at %d of %d tokens", phase, i, o->n_tok, s->max_tokens);
    CHECKF(o->n_tok >= 1 && o->n_tok <= s->max_tokens, "%s #%d: %d tokens (max %d)", phase, i, o->n_tok, s->max_tokens);
    CHECKF(o->fin.ttft_ms > 0 && o->fin.tpot_ms >= 0, "%s #%d: ttft %.3f tpot %.3f", phase, i, o->fin.ttft_ms,
           o->fin.tpot_ms);
    CHECKF(o->fin.st.accepted <= o->fin.st.drafted, "%s #%d: accepted %llu > drafted %llu", phase, i,
           (unsigned long long)o->fin.st.accepted, (unsigned long long)o->fin.st.drafted);
    if (s->mode == SPEC_MODE_OFF)
        CHECKF(o->fin.st.drafted == 0, "%s #%d: mode off drafted %llu tokens", phase, i,
               (unsigned long long)o->fin.st.drafted);
}

static bool same(const eu_out *a, const eu_out *b, const char *what, int i) {
    bool eq = a->n_tok == b->n_tok && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n_tok);
    if (!eq) {
        int k = 0;
        while (k < a->n_tok && k < b->n_tok && a->toks[k] == b->toks[k]) k++;
        fprintf(stderr, "#%d (%s): %d vs %d tokens, first difference at %d (temp %.1f γ %d mode %d)\n", i, what,
                a->n_tok, b->n_tok, k, specs[i].temp, specs[i].gamma, specs[i].mode);
    }
    return eq;
}

static bool same_text(const eu_out *a, const eu_out *b) {
    return a->text_len == b->text_len && !memcmp(a->text, b->text, (size_t)a->text_len) && a->fin.reason == b->fin.reason;
}

static eu_out conc_a[N_REQ], conc_b[N_REQ], alone[N_REQ], plain[N_REQ];

int main(void) {
    engine_config ca = engine_config_default();
    ca.threads = 2;
    ca.gamma.gamma_min = 1;
    engine *ea = eu_create(&ca, true);
    build_specs(engine_tokenizer(ea));
    engine_stats st0;
    engine_get_stats(ea, &st0);

    /* 1. everything at once on engine A: 32 running, 32 queued, four readers */
    double t0 = eu_now_ms();
    CHECK(run_concurrent(ea, conc_a));
    double t_conc = eu_now_ms() - t0;
    CHECK(eu_wait_idle(ea, 10000));
    engine_stats st;
    engine_get_stats(ea, &st);
    uint64_t sum_tok = 0;
    for (int i = 0; i < N_REQ; i++) {
        check_out("batched", i, &conc_a[i]);
        sum_tok += (uint64_t)conc_a[i].n_tok;
    }
    CHECKF(st.requests_done == N_REQ, "requests_done %llu", (unsigned long long)st.requests_done);
    CHECKF(st.tokens == sum_tok, "engine counted %llu tokens, events carried %llu", (unsigned long long)st.tokens,
           (unsigned long long)sum_tok);
    CHECK(st.steps > 0);
    CHECKF(st.mean_microbatches >= 1.0, "mean micro-batches per step %.3f", st.mean_microbatches);
    CHECKF(st.padding_ratio >= 1.0 && st.padding_ratio <= ca.padding_cap + 1e-9, "padding ratio %.4f (cap %.2f)",
           st.padding_ratio, ca.padding_cap);
    CHECKF(st.st.drafted > 0 && st.st.accepted > 0 && st.st.accepted <= st.st.drafted && st.st.verify_steps > 0,
           "speculation totals: drafted %llu accepted %llu verify steps %llu", (unsigned long long)st.st.drafted,
           (unsigned long long)st.st.accepted, (unsigned long long)st.st.verify_steps);
    CHECKF(st.kv_free_target == st0.kv_free_target && st.kv_free_draft == st0.kv_free_draft,
           "KV free blocks %d/%d after the run, %d/%d before", st.kv_free_target, st.kv_free_draft,
           st0.kv_free_target, st0.kv_free_draft);
    fprintf(stderr, "batched: %llu tokens in %.0f ms, %llu steps, %.2f micro-batches/step, padding %.3f, α %.3f\n",
            (unsigned long long)sum_tok, t_conc, (unsigned long long)st.steps, st.mean_microbatches,
            st.padding_ratio, spec_stats_alpha(&st.st));

    /* 2. each alone through the same engine, one at a time; greedy ones also
     * as plain decoding */
    eu_waiter w;
    eu_waiter_init(&w);
    for (int i = 0; i < N_REQ; i++) {
        engine_request r = make_request(&specs[i], 0, false);
        eu_out_init(&alone[i], eu_submit(ea, &r, &w));
        CHECK(eu_drain(ea, &alone[i], &w, 60000));
        check_out("alone", i, &alone[i]);
        if (is_greedy(&specs[i])) {
            r = make_request(&specs[i], SPEC_MODE_OFF, true);
            eu_out_init(&plain[i], eu_submit(ea, &r, &w));
            CHECK(eu_drain(ea, &plain[i], &w, 60000));
        }
    }
    engine_get_stats(ea, &st);
    CHECK(st.kv_free_target == st0.kv_free_target && st.kv_free_draft == st0.kv_free_draft);
    engine_destroy(ea);

    /* 3. engine B: no padding allowed (one bin per γ), 12 running at a time,
     * prompts prefilled 7 tokens per iteration, rings of 6 events */
    engine_config cb = ca;
    cb.padding_cap = 1.0f;
    cb.max_running = 12;
    cb.prefill_chunk = 7;
    cb.ring_events = 6;
    engine *eb = eu_create(&cb, true);
    CHECK(run_concurrent(eb, conc_b));
    CHECK(eu_wait_idle(eb, 10000));
    engine_get_stats(eb, &st);
    CHECKF(fabs(st.padding_ratio - 1.0) < 1e-9, "padding ratio %.4f with cap 1", st.padding_ratio);
    CHECK(st.mean_microbatches >= 1.0);
    for (int i = 0; i < N_REQ; i++) check_out("binned", i, &conc_b[i]);
    engine_destroy(eb);

    int n_greedy = 0, n_sampled = 0, bad_a = 0, bad_b = 0, bad_plain = 0, bad_text = 0;
    for (int i = 0; i < N_REQ; i++) {
        bad_a += !same(&conc_a[i], &alone[i], "batched vs alone", i);
        bad_b += !same(&conc_b[i], &alone[i], "binned vs alone", i);
        bad_text += !same_text(&conc_a[i], &alone[i]) + !same_text(&conc_b[i], &alone[i]);
        if (is_greedy(&specs[i])) {
            n_greedy++;
            bad_plain += !same(&alone[i], &plain[i], "alone vs plain", i);
        } else {
            n_sampled++;
        }
    }
    fprintf(stderr, "%d greedy + %d sampled requests: %d batched, %d binned, %d plain mismatches, %d text mismatches\n",
            n_greedy, n_sampled, bad_a, bad_b, bad_plain, bad_text);
    CHECK(bad_a == 0);
    CHECK(bad_b == 0);
    CHECK(bad_plain == 0);
    CHECK(bad_text == 0);
    eu_waiter_destroy(&w);
    TEST_DONE();
}
