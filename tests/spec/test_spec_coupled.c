/* test_spec_coupled.c — coupled verification (issue 21): a seeded sampled
 * request gives the same tokens with speculation on or off, for any γ, the
 * adaptive controller, the draft model or the n-gram drafter, alone or in a
 * batch of 32 — token for token, on 100% of runs. 50 corpus prompts (half
 * made to repeat a span of themselves, so lookups propose) x temperatures
 * {0.5, 0.8, 1.0, 1.3} x top-p {1, 0.9} x γ {1..8, adaptive up to 8} x
 * {draft, ngram}, each against plain Gumbel-max sampling with the same seed.
 * The same runs under rejection verification must differ from plain somewhere
 * (the comparison is not vacuous), and coupled speculation must accept drafts. */
#include "tests/spec/spec_util.h"

#define N_GEN 24
#define N_PROMPTS 50
#define BATCH 32

static su_prompt prompts[N_PROMPTS];
static int n_prompts;

static const float temps[] = {0.5f, 0.8f, 1.0f, 1.3f};
static const float top_ps[] = {1.0f, 0.9f};

static spec_seq_params params(float temp, float top_p, uint64_t seed, int gamma, bool adaptive, spec_method m,
                              bool coupled) {
    spec_seq_params p = su_params(temp, seed, gamma, adaptive);
    p.sc.top_p = top_p;
    p.method = m;
    p.coupled = coupled;
    return p;
}

/* The second half of the prompts repeat their opening, so the lookup drafter
 * has matches to propose from. */
static void make_prompts(const tokenizer *tok) {
    n_prompts = su_prompts(tok, prompts, N_PROMPTS);
    for (int i = n_prompts / 2; i < n_prompts; i++) {
        su_prompt *p = &prompts[i];
        int body = p->n - 1, add = body < SU_MAX_PROMPT - p->n ? body : SU_MAX_PROMPT - p->n;
        memcpy(p->ids + p->n, p->ids + 1, sizeof(int32_t) * (size_t)add);
        p->n += add;
    }
}

typedef struct {
    long runs, differ, rejection_differ;
    spec_stats tot;
} acc;

static void singles(spec_pair *sp, acc *a) {
    int32_t ref[N_GEN], out[N_GEN];
    for (size_t ti = 0; ti < sizeof(temps) / sizeof(temps[0]); ti++)
        for (size_t pi = 0; pi < sizeof(top_ps) / sizeof(top_ps[0]); pi++)
            for (int i = 0; i < n_prompts; i++) {
                uint64_t seed = 1000 + (uint64_t)i * 7 + ti * 131 + pi;
                spec_seq_params pp = params(temps[ti], top_ps[pi], seed, 0, false, SPEC_METHOD_OFF, true);
                int nr = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &pp, ref, NULL, NULL, NULL);
                CHECK(nr > 0);
                for (int method = 0; method < 2; method++)
                    for (int g = 1; g <= 9; g++) {
                        bool adaptive = g == 9;
                        spec_method m = method ? SPEC_METHOD_NGRAM : SPEC_METHOD_DRAFT;
                        spec_seq_params p = params(temps[ti], top_ps[pi], seed, adaptive ? 8 : g, adaptive, m, true);
                        spec_seq *s = NULL;
                        int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &p, out, NULL, NULL, &s);
                        bool same = n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr);
                        if (!same && a->differ++ < 5)
                            fprintf(stderr, "differs: prompt %d T=%.1f top_p=%.1f %s gamma %d%s\n", i, temps[ti],
                                    top_ps[pi], method ? "ngram" : "draft", adaptive ? 8 : g,
                                    adaptive ? " adaptive" : "");
                        CHECK(same);
                        a->runs++;
                        if (s) spec_stats_add(&a->tot, &s->st);
                        spec_seq_free(s);
                    }
                /* rejection verification, same seed: a different (equally
                 * valid) sample path somewhere */
                spec_seq_params pr = params(temps[ti], top_ps[pi], seed, 4, false, SPEC_METHOD_DRAFT, false);
                int n = su_generate(sp, prompts[i].ids, prompts[i].n, N_GEN, &pr, out, NULL, NULL, NULL);
                a->rejection_differ += !(n == nr && !memcmp(out, ref, sizeof(int32_t) * (size_t)nr));
            }
}

/* 32 sequences stepped together (one verify call over all), mixed γ and
 * adaptive, each against its own plain run. */
static void batched(spec_pair *sp, acc *a) {
    static int32_t ref[BATCH][N_GEN];
    int nr[BATCH], max_new[BATCH];
    char err[256];
    for (size_t ti = 0; ti < sizeof(temps) / sizeof(temps[0]); ti++)
        for (int method = 0; method < 2; method++) {
            spec_seq *S[BATCH];
            for (int i = 0; i < BATCH; i++) {
                const su_prompt *pr = &prompts[(i * 3 + (int)ti) % n_prompts];
                uint64_t seed = 77 + (uint64_t)i + ti * 1000;
                float tp = top_ps[i % 2];
                spec_seq_params pp = params(temps[ti], tp, seed, 0, false, SPEC_METHOD_OFF, true);
                nr[i] = su_generate(sp, pr->ids, pr->n, N_GEN, &pp, ref[i], NULL, NULL, NULL);
                int g = 1 + i % 9;
                spec_seq_params p = params(temps[ti], tp, seed, g == 9 ? 8 : g, g == 9,
                                           method ? SPEC_METHOD_NGRAM : SPEC_METHOD_DRAFT, true);
                S[i] = spec_seq_start(sp, pr->ids, pr->n, &p, err, sizeof(err));
                CHECKF(S[i] != NULL, "%s", err);
                if (!S[i]) return;
            }
            spec_step_info info[BATCH];
            for (;;) {
                spec_seq *live[BATCH];
                int n = 0;
                for (int i = 0; i < BATCH; i++) {
                    int made = S[i]->n_tokens - S[i]->n_prompt;
                    if (made >= N_GEN || tok_is_eog(sp->tok, S[i]->tokens[S[i]->n_tokens - 1])) continue;
                    max_new[n] = N_GEN - made;
                    live[n++] = S[i];
                }
                if (!n) break;
                int rc = spec_step_batch(sp, live, n, max_new, info, err, sizeof(err));
                CHECKF(rc == 0, "batched step: %s", err);
                if (rc) break;
            }
            for (int i = 0; i < BATCH; i++) {
                int n = S[i]->n_tokens - S[i]->n_prompt;
                if (n > N_GEN) n = N_GEN;
                bool same = n == nr[i] && !memcmp(S[i]->tokens + S[i]->n_prompt, ref[i], sizeof(int32_t) * (size_t)n);
                if (!same && a->differ++ < 5) {
                    fprintf(stderr, "batch of %d: sequence %d T=%.1f %s differs (%d vs %d tokens):", BATCH, i,
                            temps[ti], method ? "ngram" : "draft", n, nr[i]);
                    for (int k = 0; k < 8 && k < n; k++)
                        fprintf(stderr, " %d/%d", S[i]->tokens[S[i]->n_prompt + k], ref[i][k]);
                    fputc('\n', stderr);
                }
                CHECK(same);
                a->runs++;
                spec_stats_add(&a->tot, &S[i]->st);
                spec_seq_free(S[i]);
            }
        }
}

int main(void) {
    char tpath[512], dpath[512];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    backend *be = backend_cpu_create(1);
    spec_pair *sp = su_load(tpath, dpath, be, 256);
    make_prompts(sp->tok);
    acc a = {0};
    singles(sp, &a);
    long single_runs = a.runs;
    /* room for 32 sequences at once */
    spec_pair_params bp = {.max_ctx = 256, .kv_blocks = (BATCH + 2) * (256 / 16 + 2)};
    char err[512];
    spec_pair *spb = spec_pair_load(tpath, dpath, be, &bp, NULL, NULL, err, sizeof(err));
    CHECKF(spb != NULL, "%s", err);
    if (spb) batched(spb, &a);
    spec_pair_free(spb);
    CHECKF(a.differ == 0, "%ld of %ld coupled runs differ from plain seeded sampling", a.differ, a.runs);
    CHECKF(a.rejection_differ > 0, "rejection verification never differed from plain: the comparison proves nothing");
    CHECKF(a.tot.accepted > 0, "coupled speculation accepted no draft");
    const spec_method_stats *dm = &a.tot.by[SPEC_DRAFTER_MODEL], *ng = &a.tot.by[SPEC_DRAFTER_NGRAM];
    fprintf(stderr,
            "coupled: %ld runs (%ld single, %ld in batches of %d) equal plain seeded sampling; %ld differ. "
            "draft: %llu verify steps, alpha %.3f; ngram: %llu verify steps, alpha %.3f; %.2f tokens/pass. "
            "rejection verification differed from plain on %ld of %d prompt x setting runs\n",
            a.runs, single_runs, a.runs - single_runs, BATCH, a.differ, (unsigned long long)dm->verify_steps,
            dm->drafted ? (double)dm->accepted / (double)dm->drafted : 0.0, (unsigned long long)ng->verify_steps,
            ng->drafted ? (double)ng->accepted / (double)ng->drafted : 0.0, spec_stats_tokens_per_pass(&a.tot),
            a.rejection_differ, n_prompts * 8);
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
