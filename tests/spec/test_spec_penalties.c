/* test_spec_penalties.c — presence/frequency/repeat penalties and logit_bias
 * under speculation stay lossless (issue 40 item 2). Penalties depend on the
 * history, so verify row j must see the accepted tokens AND drafts [0, j).
 *  - greedy: speculative output equals an independent plain loop
 *    (model_forward, this file's own penalty code, argmax) on the real pair
 *    over 15 prompts x gamma 1..6 x adaptive off/on, for three penalty sets;
 *  - the penalties matter (the output differs from the unpenalised one) and
 *    the broken variant (verify rows blind to the drafts before them) differs
 *    from the reference for some prompt (with a short window: the drafts then
 *    carry much of it): the comparison catches the history bug;
 *  - coupled at T = 0.9: the seeded output equals plain seeded sampling with
 *    the same penalties for gamma 2, 4 and adaptive (exact, token for token);
 *  - sampler_penalize itself against a naive reference on random windows. */
#include "tests/spec/spec_util.h"
#include "engine/sample/rng.h"

#define N_PROMPTS 15
#define N_GEN 48

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

/* The reference processing, written again here (counts by a linear scan). */
static void ref_penalize(const sampler_config *c, const int32_t *seq, int n, float *logits, int V) {
    for (int i = 0; i < c->n_logit_bias; i++) logits[c->logit_bias[i].id] += c->logit_bias[i].bias;
    int w = c->penalty_last_n == 0 ? SAMPLER_LAST_N_DEFAULT : c->penalty_last_n < 0 ? n : c->penalty_last_n;
    if (w > n) w = n;
    float rp = c->repeat_penalty == 0 ? 1 : c->repeat_penalty;
    for (int t = 0; t < V; t++) {
        int cnt = 0;
        for (int i = n - w; i < n; i++) cnt += seq[i] == t;
        if (!cnt || logits[t] == -INFINITY) continue;
        float l = logits[t];
        l = l > 0 ? l / rp : l * rp;
        logits[t] = l - ((float)cnt * c->frequency_penalty + c->presence_penalty);
    }
}

static int ref_greedy(spec_pair *sp, const sampler_config *c, const int32_t *prompt, int n_prompt, int n_gen,
                      int32_t *out) {
    int V = sp->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(n_prompt + n_gen + 1));
    kv_seq *kv = kv_seq_create(sp->tpool, sp->target->mp.max_ctx + 1);
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    CHECK(su_feed(sp->target, sp->tpool, kv, prompt, n_prompt, logits) == 0);
    int n = 0;
    while (n < n_gen) {
        ref_penalize(c, seq, n_prompt + n, logits, V);
        int32_t t = sampler_argmax(logits, V);
        seq[n_prompt + n] = t;
        out[n++] = t;
        if (tok_is_eog(sp->tok, t) || n == n_gen) break;
        char err[256];
        model_seq ms = {.kv = kv, .n = 1, .tokens = &t};
        if (model_forward(sp->target, sp->tpool, &ms, 1, logits, err, sizeof(err)) != 0) break;
    }
    kv_seq_destroy(sp->tpool, kv);
    free(seq);
    free(logits);
    return n;
}

static int broken_total; /* runs where the broken variant differed, over every set */

static const sampler_bias BIAS[] = {{13, -4.0f}, {29, 2.5f}, {400, -100.0f}, {1, -3.0f}};

static void greedy_set(spec_pair *sp, const char *label, sampler_config c) {
    int32_t ref[N_GEN], out[N_GEN], unpen[N_GEN];
    int runs = 0, mism = 0, changed = 0, broken_differs = 0;
    spec_stats tot = {0};
    for (int i = 0; i < n_prompts; i++) {
        int nr = ref_greedy(sp, &c, prompts[i].ids, prompts[i].n, N_GEN, ref);
        int nu = su_plain_greedy(sp, prompts[i].ids, prompts[i].n, N_GEN, unpen);
        changed += nu != nr || memcmp(unpen, ref, sizeof(int32_t) * (size_t)nr) != 0;
        for (int gamma = 0; gamma <= 6; gamma++)
            for (int ad = 0; ad < (gamma ? 2 : 1); ad++) {
                spec_seq_params prm = su_params(0.0f, 1, gamma, ad);
                prm.sc = c;
                spec_seq *s = NULL;
                int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, NULL, NULL, &s);
                runs++;
                bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
                if (!same && mism++ < 3) {
                    int at = 0;
                    while (at < n && at < nr && out[at] == ref[at]) at++;
                    fprintf(stderr, "%s: prompt %d gamma %d%s differs from the reference at token %d\n", label, i, gamma,
                            ad ? " adaptive" : "", at);
                }
                CHECK(same);
                if (s) spec_stats_add(&tot, &s->st);
                spec_seq_free(s);
                if (gamma == 4 && !ad) { /* the broken variant must be caught */
                    prm.penalty_broken = true;
                    int nb = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, out, NULL, NULL, NULL);
                    broken_differs += nb != nr || memcmp(out, ref, sizeof(int32_t) * (size_t)nr) != 0;
                }
            }
    }
    fprintf(stderr, "%-34s %d runs equal the reference (%d differ); penalties changed %d/%d outputs; the broken "
                    "variant differs on %d/%d; alpha %.3f over %llu verify steps\n",
            label, runs - mism, mism, changed, n_prompts, broken_differs, n_prompts, spec_stats_alpha(&tot),
            (unsigned long long)tot.verify_steps);
    CHECKF(changed >= n_prompts / 2, "%s: the penalties changed only %d of %d outputs", label, changed, n_prompts);
    broken_total += broken_differs;
    CHECK(tot.verify_steps > 0 && tot.rejections > 0);
}

/* Coupled verification: seeded sampled output == plain seeded sampling. */
static void coupled_set(spec_pair *sp, sampler_config c) {
    int32_t plain[N_GEN], out[N_GEN];
    int runs = 0, equal = 0;
    for (int i = 0; i < 8; i++) {
        spec_seq_params prm = su_params(0.9f, 77 + (uint64_t)i, 0, false);
        prm.sc = c;
        prm.sc.temperature = 0.9f;
        prm.coupled = true;
        int np = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &prm, plain, NULL, NULL, NULL);
        for (int v = 0; v < 3; v++) {
            spec_seq_params q = su_params(0.9f, 77 + (uint64_t)i, v == 2 ? 6 : 2 + 2 * v, v == 2);
            q.sc = prm.sc;
            q.coupled = true;
            int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &q, out, NULL, NULL, NULL);
            runs++;
            equal += n == np && !memcmp(out, plain, sizeof(int32_t) * (size_t)np);
        }
    }
    fprintf(stderr, "coupled T=0.9 with penalties: %d/%d speculative runs equal plain seeded sampling\n", equal, runs);
    CHECKF(equal == runs, "coupled with penalties: %d of %d runs differ from plain sampling", runs - equal, runs);
}

static void unit_penalize(void) {
    const int V = 50;
    float a[50], b[50];
    int32_t hist[80], ext[8], scratch[96];
    uint64_t st = 12345;
    int bad = 0;
    for (int it = 0; it < 2000; it++) {
        sampler_config c = sampler_config_default();
        c.repeat_penalty = 0.5f + (float)(it % 7) * 0.25f;
        c.presence_penalty = (float)((it % 5) - 2) * 0.4f;
        c.frequency_penalty = (float)((it % 3) - 1) * 0.7f;
        int ln[] = {0, -1, 1, 5, 100};
        c.penalty_last_n = ln[it % 5];
        c.logit_bias = BIAS;
        c.n_logit_bias = it % 2 ? 2 : 0;
        int nh = 1 + (int)(rng_u64(st, (uint64_t)it, 1, 0) % 80), ne = (int)(rng_u64(st, (uint64_t)it, 2, 0) % 9);
        for (int i = 0; i < nh; i++) hist[i] = (int32_t)(rng_u64(st, (uint64_t)it, 3, (uint64_t)i) % 12);
        for (int i = 0; i < ne; i++) ext[i] = (int32_t)(rng_u64(st, (uint64_t)it, 4, (uint64_t)i) % 12);
        for (int t = 0; t < V; t++) a[t] = b[t] = (float)((int)(rng_u64(st, (uint64_t)it, 5, (uint64_t)t) % 200) - 100) / 10.0f;
        a[3] = b[3] = -INFINITY;
        sampler_penalize(&c, hist, nh, ext, ne, scratch, a, V);
        int32_t seq[96];
        memcpy(seq, hist, sizeof(int32_t) * (size_t)nh);
        memcpy(seq + nh, ext, sizeof(int32_t) * (size_t)ne);
        ref_penalize(&c, seq, nh + ne, b, V);
        for (int t = 0; t < V; t++) bad += !(a[t] == b[t] || fabsf(a[t] - b[t]) <= 1e-5f * fabsf(b[t]));
    }
    CHECKF(bad == 0, "sampler_penalize differs from the reference in %d entries", bad);
    /* the sign rule by hand: 2 -> 2/2, -2 -> -2*2 */
    sampler_config c = sampler_config_default();
    c.repeat_penalty = 2.0f;
    float l[3] = {2.0f, -2.0f, 5.0f};
    int32_t h[2] = {0, 1};
    sampler_penalize(&c, h, 2, NULL, 0, scratch, l, 3);
    CHECKF(l[0] == 1.0f && l[1] == -4.0f && l[2] == 5.0f, "repeat penalty sign rule: %g %g %g", l[0], l[1], l[2]);
    CHECK(!sampler_has_penalties(&(sampler_config){.temperature = 1, .top_p = 1}));
    sampler_config v = sampler_config_default();
    char err[200];
    v.presence_penalty = 2.5f;
    CHECK(!sampler_config_validate(&v, err, sizeof err) && strstr(err, "presence_penalty"));
}

int main(void) {
    unit_penalize();
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    spec_pair_calibrate(sp);
    n_prompts = su_prompts(sp->tok, prompts, N_PROMPTS);
    CHECKF(n_prompts == N_PROMPTS, "only %d prompts", n_prompts);

    sampler_config c = sampler_config_default();
    c.temperature = 0;
    c.repeat_penalty = 1.3f; /* llama.cpp's repeat_penalty over its default window of 64 */
    greedy_set(sp, "repeat 1.3", c);
    c = sampler_config_default();
    c.temperature = 0;
    c.presence_penalty = 0.8f, c.frequency_penalty = 0.6f, c.penalty_last_n = -1;
    c.logit_bias = BIAS, c.n_logit_bias = 4;
    greedy_set(sp, "presence+frequency+bias, whole", c);
    c = sampler_config_default();
    c.temperature = 0;
    c.repeat_penalty = 1.5f, c.frequency_penalty = 0.4f, c.penalty_last_n = 8;
    greedy_set(sp, "repeat 1.5 + frequency, last 8", c);
    CHECKF(broken_total > 0, "the broken variant (verify rows blind to earlier drafts) was never caught");
    coupled_set(sp, c);

    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
