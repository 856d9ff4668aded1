/* bench_sampler.c — µs per sampler_probs (+ draw) call at vocabulary sizes 32000 and
 * 128256 for the usual configs. A benchmark: prints figures, asserts nothing timed.
 * Time is this thread's CPU time, so a busy machine inflates it less than wall time.
 * Logits: Gaussian with σ = 3, roughly the spread of a real LM's logits. */
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/sampler/chi2.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

int main(int argc, char **argv) {
    const double budget_us = argc > 1 ? atof(argv[1]) * 1e3 : 200e3; /* per row, ms arg */
    static const int Vs[2] = { 32000, 128256 };
    static const struct { const char *name; sampler_config c; } cfgs[] = {
        { "greedy (T=0)",               { 0.0f, 0, 1.0f, 0.0f } },
        { "T=1, no filter",             { 1.0f, 0, 1.0f, 0.0f } },
        { "T=0.8 top_k=40",             { 0.8f, 40, 1.0f, 0.0f } },
        { "T=0.8 top_p=0.9",            { 0.8f, 0, 0.9f, 0.0f } },
        { "T=0.8 top_p=0.99",           { 0.8f, 0, 0.99f, 0.0f } },
        { "T=0.8 min_p=0.05",           { 0.8f, 0, 1.0f, 0.05f } },
        { "T=0.7 k=40 p=0.9 min_p=0.05", { 0.7f, 40, 0.9f, 0.05f } },
    };
    printf("%-30s %8s %12s %12s\n", "config", "vocab", "probs us", "+sample us");
    for (int v = 0; v < 2; v++) {
        int V = Vs[v];
        float *l = malloc((size_t)V * sizeof *l), *p = malloc((size_t)V * sizeof *p);
        uint64_t st = 42;
        for (int i = 0; i < V; i++) l[i] = (float)(t_gauss(&st) * 3.0);
        sampler *s = sampler_create(V);
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            long sink = 0;
            int iters = 0;
            double t0 = now_us(), t1;
            do { sampler_probs(s, &cfgs[c].c, l, p); iters++; t1 = now_us(); } while (t1 - t0 < budget_us);
            double probs_us = (t1 - t0) / iters;
            iters = 0;
            t0 = now_us();
            do {
                sink += sampler_sample_logits(s, &cfgs[c].c, l, p, 1, (uint64_t)iters);
                iters++;
                t1 = now_us();
            } while (t1 - t0 < budget_us);
            printf("%-30s %8d %12.1f %12.1f\n", cfgs[c].name, V, probs_us, (t1 - t0) / iters);
            if (sink == -1) puts("");
        }
        sampler_destroy(s);
        free(l);
        free(p);
    }
    return 0;
}
