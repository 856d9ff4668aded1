/* test_engine_prefix.c — prefix KV reuse (issue 20) never changes an output:
 * greedy and seeded requests (speculative and plain) whose prompts share
 * prefixes — one ending inside a cached block, one on a block edge (copy on
 * write), one diverging mid-block, a second chat turn that resends the first
 * turn and its answer — produce the same tokens with the cache on as with it
 * off, alone and all at once; the counters show the reuse. Under a tiny pool
 * with cancels, cached blocks are evicted for a request larger than the free
 * stack and every block comes back. A target hit with a draft miss reuses the
 * target's prefix; the draft starts behind and catches up, output unchanged. */
#include "tests/engine/engine_util.h"

#define N_P 10

typedef struct {
    eu_prompt p;
    float temp;
    spec_mode mode;
    int gamma;
    int max_tokens;
    uint64_t seed;
} pspec;

static pspec specs[N_P];

static engine_request make(const pspec *s) {
    engine_request r = {0};
    r.prompt = s->p.ids;
    r.n_prompt = s->p.n;
    r.sc = sampler_config_default();
    r.sc.temperature = s->temp;
    r.seed = s->seed;
    r.max_tokens = s->max_tokens;
    r.mode = s->mode;
    r.gamma = s->gamma; /* sampled requests use a fixed γ: their output is then schedule-independent */
    return r;
}

static void run_alone(engine *e, const pspec *s, eu_out *o) {
    eu_waiter w;
    eu_waiter_init(&w);
    engine_request r = make(s);
    eu_out_init(o, eu_submit(e, &r, &w));
    CHECK(eu_drain(e, o, &w, 120000));
    CHECK(o->bad_events == 0 && o->fin.type == ENGINE_EV_FINISHED);
    eu_waiter_destroy(&w);
}

static void run_all(engine *e, eu_out *o, int n) {
    eu_waiter w;
    eu_waiter_init(&w);
    for (int i = 0; i < n; i++) {
        engine_request r = make(&specs[i]);
        eu_out_init(&o[i], eu_submit(e, &r, &w));
    }
    for (int i = 0; i < n; i++) CHECK(eu_drain(e, &o[i], &w, 300000) && o[i].bad_events == 0);
    eu_waiter_destroy(&w);
}

static bool same(const eu_out *a, const eu_out *b, const char *what, int i) {
    bool ok = a->n_tok == b->n_tok && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n_tok);
    if (!ok) fprintf(stderr, "%s: request %d differs (%d vs %d tokens)\n", what, i, a->n_tok, b->n_tok);
    return ok;
}

/* Every block is free or cached-idle once the engine is idle. */
static void check_pools_back(engine *e, const char *what) {
    CHECK(eu_wait_idle(e, 60000));
    engine_stats st;
    engine_get_stats(e, &st);
    CHECKF(st.kv_free_target == st.kv_total, "%s: target pool %d of %d blocks back", what, st.kv_free_target,
           st.kv_total);
    CHECKF(st.kv_free_draft == st.kv_total, "%s: draft pool %d of %d blocks back", what, st.kv_free_draft,
           st.kv_total);
}

static void build(const tokenizer *tok, const eu_out *turn1) {
    eu_prompt base;
    eu_make_prompt(tok, 7, 200, &base);
    /* prompt, its length, sampling and mode */
    static const struct { int len; float temp; spec_mode mode; int gamma; } shape[N_P] = {
        {100, 0.0f, SPEC_MODE_DRAFT, 0}, /* ends inside a block (100 = 6 x 16 + 4) */
        {96, 0.0f, SPEC_MODE_DRAFT, 0},  /* ends on a block edge: the last block is copied on write */
        {120, 0.0f, SPEC_MODE_OFF, 0},   /* diverges inside block 5 (below) */
        {200, 0.9f, SPEC_MODE_DRAFT, 4}, /* seeded, speculative */
        {150, 0.8f, SPEC_MODE_OFF, 0},   /* seeded, plain */
        {64, 0.0f, SPEC_MODE_DRAFT, 3},  /* shorter than the others: all of it cached */
        {180, 1.0f, SPEC_MODE_AUTO, 2},
        {33, 0.0f, SPEC_MODE_AUTO, 0},
        {0, 0.0f, SPEC_MODE_DRAFT, 0},   /* turn 2: turn 1's prompt + answer + more text */
        {0, 0.7f, SPEC_MODE_DRAFT, 4},
    };
    for (int i = 0; i < N_P; i++) {
        pspec *s = &specs[i];
        memset(s, 0, sizeof(*s));
        s->temp = shape[i].temp, s->mode = shape[i].mode, s->gamma = shape[i].gamma;
        s->max_tokens = 40;
        s->seed = 77 + (uint64_t)i;
        if (shape[i].len) {
            memcpy(s->p.ids, base.ids, sizeof(int32_t) * (size_t)shape[i].len);
            s->p.n = shape[i].len;
        }
    }
    specs[2].p.ids[88] = (specs[2].p.ids[88] + 1) % 200 + 3;
    /* turn 2 of a chat: turn 1 (specs[0]) and what it answered, then new text */
    for (int t = 8; t < N_P; t++) {
        pspec *s = &specs[t];
        int n = specs[0].p.n;
        memcpy(s->p.ids, specs[0].p.ids, sizeof(int32_t) * (size_t)n);
        if (turn1) {
            memcpy(s->p.ids + n, turn1->toks, sizeof(int32_t) * (size_t)turn1->n_tok);
            n += turn1->n_tok;
        }
        for (int k = 0; k < 30; k++) s->p.ids[n++] = base.ids[150 + k];
        s->p.n = n;
    }
}

static eu_out ref[N_P], got[N_P], got2[N_P];

static void test_same_outputs(void) {
    engine_config c = engine_config_default();
    c.calibrate = false;
    c.max_ctx = 512;
    c.threads = 2;
    c.prefix_cache = false;
    engine *off = eu_create(&c, true);
    build(engine_tokenizer(off), NULL);
    run_alone(off, &specs[0], &ref[0]);
    build(engine_tokenizer(off), &ref[0]);
    for (int i = 1; i < N_P; i++) run_alone(off, &specs[i], &ref[i]);
    engine_stats st;
    engine_get_stats(off, &st);
    CHECK(!st.prefix_cache && st.st.prefix_reused == 0 && st.prefix_cached[0] == 0);
    engine_destroy(off);

    c.prefix_cache = true;
    engine *on = eu_create(&c, true);
    /* one after another: each finds what the earlier ones left */
    for (int i = 0; i < N_P; i++) run_alone(on, &specs[i], &got[i]);
    bool ok = true;
    for (int i = 0; i < N_P; i++) ok &= same(&ref[i], &got[i], "alone, cache on", i);
    CHECK(ok);
    /* every prompt now starts with cached blocks */
    for (int i = 1; i < N_P; i++)
        CHECKF(got[i].fin.st.prefix_reused > 0, "request %d reused %llu tokens", i,
               (unsigned long long)got[i].fin.st.prefix_reused);
    CHECK(got[1].fin.st.prefix_reused == 95);        /* 96 tokens: all but the last, from a cut block */
    CHECK(got[2].fin.st.prefix_reused == 80);        /* up to the block it diverges in */
    CHECK(got[5].fin.st.prefix_reused == 63);
    CHECKF(got[8].fin.st.prefix_reused >= 128, "turn 2 reused %llu", (unsigned long long)got[8].fin.st.prefix_reused);
    for (int i = 0; i < N_P; i++) {
        const spec_stats *s = &got[i].fin.st;
        CHECK(s->prefill_tokens + s->prefix_reused == (uint64_t)specs[i].p.n && s->kv_resets == 0);
        if (specs[i].mode == SPEC_MODE_DRAFT) CHECK(s->prefix_draft_reused == s->prefix_reused);
    }
    /* all at once: batched, sharing blocks with running requests */
    run_all(on, got2, N_P);
    ok = true;
    for (int i = 0; i < N_P; i++) ok &= same(&ref[i], &got2[i], "all at once, cache on", i);
    CHECK(ok);
    engine_get_stats(on, &st);
    CHECK(st.prefix_cache && st.st.prefix_reused > 0 && st.prefix_cached[0] > 0 && st.prefix_cached[1] > 0);
    CHECK(st.prefix_cow[0] >= 1);
    fprintf(stderr, "cache on: %llu of %llu prompt tokens reused (target), %llu of %llu (draft); %d / %d blocks "
            "cached, %llu copies on write\n", (unsigned long long)st.st.prefix_reused,
            (unsigned long long)st.st.prefix_offered, (unsigned long long)st.st.prefix_draft_reused,
            (unsigned long long)st.st.prefix_draft_offered, st.prefix_cached[0], st.prefix_cached[1],
            (unsigned long long)st.prefix_cow[0]);
    check_pools_back(on, "after the runs");
    /* a per-request opt-out neither reuses nor is reused */
    eu_waiter w;
    eu_waiter_init(&w);
    engine_request r = make(&specs[3]);
    r.no_prefix_cache = true;
    eu_out o;
    eu_out_init(&o, eu_submit(on, &r, &w));
    CHECK(eu_drain(on, &o, &w, 60000));
    CHECK(o.fin.st.prefix_reused == 0 && o.fin.st.prefix_offered == 0 && same(&ref[3], &o, "opt-out", 3));
    eu_waiter_destroy(&w);
    engine_destroy(on);
}

/* Tiny pools (24 blocks of 16): cancels mid-way, and a request whose need
 * exceeds the free stack but not free + cached. */
static void test_pressure(void) {
    engine_config c = engine_config_default();
    c.calibrate = false;
    c.max_ctx = 256;
    c.kv_blocks = 24;
    c.threads = 2;
    engine *e = eu_create(&c, true);
    eu_waiter w;
    eu_waiter_init(&w);
    /* cancels in every state */
    eu_out o[N_P];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 8; i++) {
            engine_request r = make(&specs[i]);
            eu_out_init(&o[i], eu_submit(e, &r, &w));
        }
        for (int i = 0; i < 8; i += 3) engine_cancel(e, o[i].id);
        for (int i = 0; i < 8; i++) {
            CHECK(eu_drain(e, &o[i], &w, 120000));
            if (o[i].fin.reason != FINISH_CANCELLED)
                CHECK(same(&ref[i], &o[i], "tiny pool", i));
        }
    }
    check_pools_back(e, "after cancels");
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK(st.prefix_idle[0] > 0);
    /* now most blocks hold cached prefixes; a long unrelated prompt needs more
     * than the free stack has and is admitted by evicting them */
    pspec big = specs[4];
    eu_make_prompt(engine_tokenizer(e), 40, 200, &big.p);
    big.max_tokens = 20;
    int free_stack = st.kv_total - st.prefix_idle[0];
    int need = (200 + 20 + GAMMA_MAX + 2 + 15) / 16;
    CHECKF(need > free_stack, "need %d, free stack %d", need, free_stack);
    eu_out b;
    engine_request r = make(&big);
    eu_out_init(&b, eu_submit(e, &r, &w));
    CHECK(eu_drain(e, &b, &w, 120000) && b.fin.type == ENGINE_EV_FINISHED && b.fin.reason == FINISH_LENGTH);
    engine_get_stats(e, &st);
    CHECK(st.prefix_evicted[0] > 0);
    check_pools_back(e, "after eviction");
    eu_waiter_destroy(&w);
    engine_destroy(e);
}

/* A prompt cached by a plain request (target pool only) is reused in the
 * target by a draft-model request, whose draft starts behind and catches up
 * (its output unchanged); the next draft-model request finds it in both. */
static void test_lockstep(void) {
    engine_config c = engine_config_default();
    c.calibrate = false;
    c.max_ctx = 512;
    c.threads = 2;
    engine *e = eu_create(&c, true);
    pspec plain = specs[3], spec = specs[3];
    plain.mode = SPEC_MODE_OFF;
    spec.mode = SPEC_MODE_DRAFT;
    eu_out a, b, d;
    run_alone(e, &plain, &a);
    CHECK(a.fin.st.prefix_reused == 0);
    run_alone(e, &spec, &b);
    CHECK(b.fin.st.prefix_reused == 192 && b.fin.st.prefix_draft_reused == 0 && b.fin.st.prefix_draft_offered == 200);
    CHECK(b.fin.st.kv_resets == 0 && same(&ref[3], &b, "draft miss", 3));
    run_alone(e, &spec, &d);
    CHECK(d.fin.st.prefix_reused == 192 && d.fin.st.prefix_draft_reused == 192);
    CHECK(d.fin.st.kv_resets == 0 && same(&ref[3], &d, "both hit", 3));
    /* a plain request reuses the target's blocks whatever the draft holds */
    eu_out f;
    run_alone(e, &plain, &f);
    CHECK(f.fin.st.prefix_reused == 192 && f.fin.st.prefix_draft_offered == 0);
    check_pools_back(e, "lockstep");
    engine_destroy(e);
}

int main(void) {
    test_same_outputs();
    test_pressure();
    test_lockstep();
    TEST_DONE();
}
