/* bench_gumbel.c — µs per gumbel_sample call at V = 32000 and 128256 beside a
 * sampler_probs call on the same logits (what a step pays for coupled
 * verification, per position), portable and AVX-512 noise, T = 0.8 with no
 * truncation (every entry gets noise: the worst case) and with top-p 0.9.
 * Median of 15 rounds, alternated. */
#define _POSIX_C_SOURCE 199309L
#include "engine/sample/gumbel.h"
#include "engine/sample/sampler.h"
#include "tests/sampler/chi2.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    const int sizes[] = {32000, 128256};
    for (int k = 0; k < 2; k++) {
        int n = sizes[k];
        float *logits = malloc(sizeof(float) * (size_t)n), *p = malloc(sizeof(float) * (size_t)n);
        uint64_t s = 3;
        for (int v = 0; v < n; v++) logits[v] = (float)(3 * t_gauss(&s));
        sampler *sm = sampler_create(n);
        for (int tp = 0; tp < 2; tp++) {
            sampler_config cfg = {0.8f, 0, tp ? 0.9f : 1.0f, 0.0f};
            enum { ROUNDS = 15, CALLS = 40 };
            double tprobs[ROUNDS], tg[2][ROUNDS];
            volatile int sink = 0;
            for (int r = 0; r < ROUNDS; r++) {
                double t0 = now_us();
                for (int i = 0; i < CALLS; i++) sampler_probs(sm, &cfg, logits, p);
                tprobs[r] = (now_us() - t0) / CALLS;
                for (int path = 0; path < 2; path++) {
                    gumbel_force_path(path);
                    t0 = now_us();
                    for (int i = 0; i < CALLS; i++) sink += gumbel_sample(p, n, 11, (uint64_t)(r * CALLS + i));
                    tg[path][r] = (now_us() - t0) / CALLS;
                }
            }
            gumbel_force_path(-1);
            qsort(tprobs, ROUNDS, sizeof(double), cmp);
            qsort(tg[0], ROUNDS, sizeof(double), cmp);
            qsort(tg[1], ROUNDS, sizeof(double), cmp);
            printf("V=%d T=0.8 top_p=%.1f: sampler_probs %.1f us, gumbel_sample portable %.1f us [%.1f-%.1f], "
                   "avx512 %.1f us [%.1f-%.1f] (median [min-max] of %d rounds)\n",
                   n, cfg.top_p, tprobs[ROUNDS / 2], tg[0][ROUNDS / 2], tg[0][0], tg[0][ROUNDS - 1], tg[1][ROUNDS / 2],
                   tg[1][0], tg[1][ROUNDS - 1], ROUNDS);
            (void)sink;
        }
        sampler_destroy(sm);
        free(logits);
        free(p);
    }
    return 0;
}
