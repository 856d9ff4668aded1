/* bench_prefix.c — prefix KV reuse figures (issue 20), a benchmark, not a
 * test: C conversations x T turns, each turn resending the history (earlier
 * prompts and answers) plus 40..80 new corpus tokens, 64 generated a turn,
 * one conversation's turn after another; run with the cache off and on in the
 * same process. Prints TTFT p50/p99 per turn and the prompt tokens prefilled.
 * Usage: bench_prefix [target.gguf draft.gguf [conversations turns threads]] */
#include "tests/engine/engine_util.h"

#define MAXC 16
#define MAXT 8

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static void run(const char *tp, const char *dp, int C, int T, int threads, bool on, double ttft[MAXT][MAXC],
                uint64_t *prefilled, uint64_t *prompt_total) {
    engine_config c = engine_config_default();
    c.target_path = tp, c.draft_path = dp, c.threads = threads, c.max_ctx = 1024, c.prefix_cache = on;
    char err[512];
    engine *e = engine_create(&c, NULL, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    static eu_prompt conv[MAXC];
    eu_prompt add;
    for (int k = 0; k < C; k++) eu_make_prompt(engine_tokenizer(e), 30 + 17 * k, 60, &conv[k]);
    eu_waiter w;
    eu_waiter_init(&w);
    *prefilled = *prompt_total = 0;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < C; k++) {
            if (t > 0) { /* the next user message */
                int n = 40 + (k * 7 + t * 13) % 41;
                eu_make_prompt(engine_tokenizer(e), 300 + 29 * k + 5 * t, n + 1, &add);
                memcpy(conv[k].ids + conv[k].n, add.ids + 1, sizeof(int32_t) * (size_t)n);
                conv[k].n += n;
            }
            engine_request r = {0};
            r.prompt = conv[k].ids, r.n_prompt = conv[k].n;
            r.sc = sampler_config_default();
            r.sc.temperature = 0;
            r.max_tokens = 64;
            static eu_out o;
            eu_out_init(&o, eu_submit(e, &r, &w));
            eu_drain(e, &o, &w, 600000);
            ttft[t][k] = o.fin.ttft_ms;
            *prefilled += o.fin.st.prefill_tokens;
            *prompt_total += (uint64_t)conv[k].n;
            /* the answer joins the history */
            int n = o.n_tok < EU_MAX_PROMPT - conv[k].n - 100 ? o.n_tok : 0;
            memcpy(conv[k].ids + conv[k].n, o.toks, sizeof(int32_t) * (size_t)n);
            conv[k].n += n;
        }
    eu_waiter_destroy(&w);
    engine_destroy(e);
}

int main(int argc, char **argv) {
    char t[512], d[512];
    const char *tp = argc > 2 ? argv[1] : tu_model(t, sizeof(t), "stories260K.gguf");
    const char *dp = argc > 2 ? argv[2] : tu_model(d, sizeof(d), "llama2xs-281K.gguf");
    (void)t_checks, (void)t_failures;
    int C = argc > 3 ? atoi(argv[3]) : 8, T = argc > 4 ? atoi(argv[4]) : 6, th = argc > 5 ? atoi(argv[5]) : 2;
    if (C > MAXC) C = MAXC;
    if (T > MAXT) T = MAXT;
    static double tt[2][MAXT][MAXC];
    uint64_t pf[2], pt[2];
    for (int on = 0; on < 2; on++) run(tp, dp, C, T, th, on, tt[on], &pf[on], &pt[on]);
    printf("turn  TTFT p50 off   p50 on   p99 off   p99 on  (ms, %d conversations)\n", C);
    for (int i = 0; i < T; i++)
        printf("%4d  %11.2f %8.2f %9.2f %8.2f\n", i + 1, pct(tt[0][i], C, 0.5), pct(tt[1][i], C, 0.5),
               pct(tt[0][i], C, 0.99), pct(tt[1][i], C, 0.99));
    printf("prompt tokens %llu; prefilled: off %llu, on %llu (%.1fx less); hit rate %.1f%%\n",
           (unsigned long long)pt[1], (unsigned long long)pf[0], (unsigned long long)pf[1],
           pf[1] ? (double)pf[0] / (double)pf[1] : 0.0, 100.0 * (1.0 - (double)pf[1] / (double)pt[1]));
    return 0;
}
