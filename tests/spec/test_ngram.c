/* test_ngram.c — prompt-lookup drafting: the index finds exactly the latest
 * longest earlier match a brute-force scan finds (incrementally, and after a
 * reset); a lookup's cost at 4k context (printed figure); and on the real
 * pair, methods ngram and auto give plain greedy's tokens on 60 prompts, half
 * of which repeat a long span of themselves, with n-gram proposals verified
 * and accepted; a failing n-gram drafter drops to plain without an output gap. */
#include "engine/spec/proposers/draft_ngram.h"
#include "tests/sampler/chi2.h"
#include "tests/spec/spec_util.h"

#include <time.h>

/* ---- the index against a brute-force scan ---------------------------------- */

static int brute(const int32_t *t, int n_tokens, int nmin, int nmax, int *match_n) {
    int last = n_tokens - 1;
    for (int n = nmax; n >= nmin; n--) {
        if (n > last) continue;
        for (int e = n_tokens - 2; e >= n - 1; e--) {
            bool eq = true;
            for (int i = 0; i < n && eq; i++) eq = t[e - i] == t[last - i];
            if (eq) {
                *match_n = n;
                return e;
            }
        }
    }
    *match_n = 0;
    return -1;
}

static void test_index(void) {
    uint64_t rs = 17;
    long lookups = 0, found = 0;
    for (int cfg = 0; cfg < 6; cfg++) {
        int nmin = 1 + cfg % 3, nmax = nmin + cfg % 4 + 1, V = cfg < 3 ? 6 : 50, N = 1500;
        if (nmax > NGRAM_MAX_N) nmax = NGRAM_MAX_N;
        drafter *d = draft_ngram_create(V, nmin, nmax);
        CHECK(d != NULL);
        drafter_seq *ds = d->i->seq_create(d, N);
        int32_t *t = malloc(sizeof(int32_t) * N);
        for (int i = 0; i < N; i++) {
            /* random tokens with copied spans (what prompt lookup is for) */
            if (i > 20 && t_unif(&rs) < 0.3) {
                int from = (int)(t_splitmix(&rs) % (uint64_t)(i - 10)), len = 2 + (int)(t_splitmix(&rs) % 12);
                for (int k = 0; k < len && i < N; k++) t[i] = t[from + k], i++;
                i--;
            } else {
                t[i] = (int32_t)(t_splitmix(&rs) % (uint64_t)V);
            }
        }
        for (int n = 1; n <= N; n++) {
            if (n == N / 2) d->i->commit(d, ds, t, 0); /* a reset: the index starts over */
            int mi, mb;
            int e = draft_ngram_lookup(d, ds, t, n, &mi), eb = brute(t, n, nmin, nmax, &mb);
            CHECKF(e == eb && mi == mb, "n-gram %d..%d V=%d at %d tokens: index says e=%d (n=%d), scan says e=%d (n=%d)",
                   nmin, nmax, V, n, e, mi, eb, mb);
            lookups++;
            found += e >= 0;
        }
        /* a proposal is the continuation, deterministic, as a chain */
        drafter_prop p = {.ds = ds, .tokens = t, .n_tokens = N, .budget = 6};
        char err[64];
        CHECK(d->i->propose(d, &p, 1, err, sizeof err) == 0);
        int mb, eb = brute(t, N, nmin, nmax, &mb);
        for (int j = 0; j < p.n_nodes; j++)
            CHECK(p.nodes[j].token == t[eb + 1 + j] && p.nodes[j].parent == j - 1 && p.nodes[j].deterministic);
        CHECK(p.n_nodes == (eb < 0 ? 0 : (N - 1 - eb < 6 ? N - 1 - eb : 6)));
        d->i->seq_destroy(d, ds);
        drafter_destroy(d);
        free(t);
    }
    CHECK(found > lookups / 2);
    fprintf(stderr, "n-gram index: %ld lookups equal the brute-force scan (%ld found a match)\n", lookups, found);
}

/* ---- cost of a lookup at 4k context (a figure, not an assertion) ----------- */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void bench_lookup(void) {
    enum { N = 4096, REPS = 20000 };
    uint64_t rs = 5;
    int32_t *t = malloc(sizeof(int32_t) * (N + REPS));
    for (int i = 0; i < N + REPS; i++) t[i] = (int32_t)(t_splitmix(&rs) % 32000);
    for (int i = 1000; i < N + REPS; i += 97) /* some repeats, so lookups find matches */
        for (int k = 0; k < 8 && i + k < N + REPS; k++) t[i + k] = t[i - 500 + k];
    drafter *d = draft_ngram_create(32000, 2, 5);
    drafter_seq *ds = d->i->seq_create(d, N + REPS + 1);
    int mn;
    double t0 = now_us();
    draft_ngram_lookup(d, ds, t, N, &mn); /* indexes the 4k context once */
    double index_us = now_us() - t0;
    /* the per-step cost: one more accepted token indexed, then a lookup */
    volatile long sink = 0;
    t0 = now_us();
    for (int r = 0; r < REPS; r++) sink += draft_ngram_lookup(d, ds, t, N + r, &mn);
    double step_us = (now_us() - t0) / REPS;
    /* a lookup alone (nothing new to index) */
    t0 = now_us();
    for (int r = 0; r < REPS; r++) sink += draft_ngram_lookup(d, ds, t, N + REPS - 1, &mn);
    double look_us = (now_us() - t0) / REPS;
    fprintf(stderr, "n-gram lookup at 4k context (n 2..5): %.3f us per lookup, %.3f us per step (index one token + "
                    "lookup); indexing 4096 tokens at once %.0f us\n", look_us, step_us, index_us);
    d->i->seq_destroy(d, ds);
    drafter_destroy(d);
    free(t);
}

/* ---- greedy equality on the real pair ---------------------------------------- */

#define N_SHORT 30
#define N_REPEAT 30
#define N_GEN 48

static su_prompt prompts[N_SHORT + N_REPEAT];
static int n_prompts;

/* Prompts that contain a passage and then begin it again: 24-60 tokens of the
 * corpus, then its first 4-10 tokens once more. */
static int repeat_prompts(const tokenizer *tok, su_prompt *out, int max) {
    char path[512];
    tu_model(path, sizeof(path), "corpora/tinystories_valid_30K.txt");
    FILE *f = fopen(path, "rb");
    if (!f) SKIP("cannot open %s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = 0;
    int n = 0;
    size_t at = 1000;
    while (n < max && at + 400 < len) {
        const char *s = strstr(text + at, ". ");
        if (!s) break;
        size_t start = (size_t)(s - text) + 2;
        at = start + 300;
        int32_t ids[SU_MAX_PROMPT * 4];
        int k = tok_encode(tok, text + start, 300, true, false, ids, SU_MAX_PROMPT * 4);
        int body = 24 + (n * 7) % 37, again = 4 + n % 7;
        if (k < body + 1) continue;
        memcpy(out[n].ids, ids, sizeof(int32_t) * (size_t)body);
        memcpy(out[n].ids + body, ids + 1, sizeof(int32_t) * (size_t)again); /* skip BOS */
        out[n].n = body + again;
        n++;
    }
    return n;
}

static void check_step(spec_seq *s, const spec_step_info *info, void *ctx) {
    (void)info;
    su_check_caches(s, ctx);
}

typedef struct {
    spec_stats tot;
    long runs, differ;
} eq_acc;

static void equality(spec_pair *sp, const char *label, spec_method method, int gamma, bool adaptive, eq_acc *acc,
                     bool check_caches) {
    int32_t ref[N_GEN], out[N_GEN];
    su_cache_stats cs = {0};
    spec_stats tot = {0};
    int differ = 0;
    for (int i = 0; i < n_prompts; i++) {
        int nr = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, ref);
        spec_seq_params prm = su_params(0.0f, 1, gamma, adaptive);
        prm.method = method;
        spec_seq *s = NULL;
        int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out,
                            check_caches ? check_step : NULL, &cs, &s);
        bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
        if (!same && differ++ < 3) fprintf(stderr, "%s: prompt %d differs from plain greedy\n", label, i);
        CHECK(same);
        if (s) {
            CHECK(s->st.kv_resets == 0);
            spec_stats_add(&tot, &s->st);
        }
        spec_seq_free(s);
    }
    const spec_method_stats *ng = &tot.by[SPEC_DRAFTER_NGRAM], *dm = &tot.by[SPEC_DRAFTER_MODEL];
    fprintf(stderr, "%-34s %d prompts, %d differ; passes %llu verify + %llu plain, %.2f tokens/pass; ngram: %llu "
                    "verify, alpha %.3f; draft: %llu verify\n",
            label, n_prompts, differ, (unsigned long long)tot.verify_steps, (unsigned long long)tot.plain_steps,
            spec_stats_tokens_per_pass(&tot), (unsigned long long)ng->verify_steps,
            ng->accepted + ng->rejections ? (double)ng->accepted / (double)(ng->accepted + ng->rejections) : 0.0,
            (unsigned long long)dm->verify_steps);
    if (acc) spec_stats_add(&acc->tot, &tot), acc->runs += n_prompts, acc->differ += differ;
}

static void test_greedy(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    spec_pair_calibrate(sp);
    n_prompts = su_prompts(sp->tok, prompts, N_SHORT);
    n_prompts += repeat_prompts(sp->tok, prompts + n_prompts, N_REPEAT);
    CHECKF(n_prompts >= 50, "%d prompts", n_prompts);

    eq_acc ng = {0}, au = {0};
    equality(sp, "ngram, gamma 4:", SPEC_METHOD_NGRAM, 4, false, &ng, true);
    equality(sp, "ngram, adaptive 1..8:", SPEC_METHOD_NGRAM, 8, true, &ng, false);
    equality(sp, "auto, gamma 4:", SPEC_METHOD_AUTO, 4, false, &au, true);
    equality(sp, "auto, adaptive 1..8:", SPEC_METHOD_AUTO, 8, true, &au, false);
    CHECK(ng.differ == 0 && au.differ == 0);
    /* n-gram proposals ran and were accepted; ngram never used the draft model */
    CHECK(ng.tot.by[SPEC_DRAFTER_NGRAM].verify_steps > 100 && ng.tot.by[SPEC_DRAFTER_NGRAM].accepted > 50);
    CHECK(ng.tot.by[SPEC_DRAFTER_MODEL].verify_steps == 0);
    CHECK(au.tot.by[SPEC_DRAFTER_NGRAM].verify_steps > 0 && au.tot.by[SPEC_DRAFTER_MODEL].verify_steps > 0);

    /* a failing n-gram drafter: plain output, no gap, failures counted */
    drafter *failing = test_drafter_failing(sp->drafters[SPEC_DRAFTER_NGRAM], 2);
    drafter *real = spec_pair_set_drafter(sp, SPEC_DRAFTER_NGRAM, failing);
    eq_acc fl = {0};
    equality(sp, "failing ngram drafter, gamma 4:", SPEC_METHOD_NGRAM, 4, false, &fl, true);
    equality(sp, "failing ngram drafter, auto:", SPEC_METHOD_AUTO, 4, false, &fl, true);
    drafter_destroy(spec_pair_set_drafter(sp, SPEC_DRAFTER_NGRAM, real));
    CHECK(fl.differ == 0 && fl.tot.draft_failures > 0);
    spec_pair_free(sp);

    /* no draft model at all: ngram and auto still speculate by lookup */
    sp = su_load(tpath, NULL, be, 256);
    spec_pair_calibrate(sp);
    eq_acc nd = {0};
    equality(sp, "no draft model, auto, gamma 4:", SPEC_METHOD_AUTO, 4, false, &nd, false);
    CHECK(nd.differ == 0 && nd.tot.by[SPEC_DRAFTER_NGRAM].verify_steps > 0);
    spec_pair_free(sp);
    backend_destroy(be);
}

int main(void) {
    test_index();
    bench_lookup();
    test_greedy();
    TEST_DONE();
}
