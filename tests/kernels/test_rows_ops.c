/* test_rows_ops.c — the CPU backend's row-wise ops (rmsnorm, rope, add,
 * silu_mul) split their rows over the thread pool when a call has many of
 * them (prefill). A row's result must not depend on that split: 3 threads
 * give the 1-thread backend's bits, for row counts below, at and above the
 * split threshold and not a multiple of the thread count, and the split
 * covers every row (a row left out would keep its input). */
#include "kernels/backend.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 4.0f - 2.0f;
}

enum { H = 12, E = 64, D = H * E, F = 2048 };

/* Runs every op on backend be over M rows of copies of the same inputs; out
 * gets rmsnorm | rope | add | silu_mul results one after another. */
static void run_ops(backend *be, int M, const float *x, const float *y, const float *g, const float *u,
                    const float *w, const int32_t *pos, const float *inv_freq, float *out) {
    size_t nd = (size_t)M * D, nf = (size_t)M * F;
    float *o = out;
    be->i->rmsnorm(be, o, x, w, M, D, 1e-5f);
    o += nd;
    memcpy(o, x, nd * sizeof(float));
    be->i->rope(be, o, pos, inv_freq, M, H, E, E, 0);
    o += nd;
    memcpy(o, x, nd * sizeof(float));
    be->i->add(be, o, y, M, D);
    o += nd;
    memcpy(o, g, nf * sizeof(float));
    be->i->silu_mul(be, o, u, M, F);
}

int main(void) {
    backend *b1 = backend_cpu_create(1), *b3 = backend_cpu_create(3);
    const int Ms[] = {1, 5, 11, 43, 200, 301};
    int Mmax = 301;
    CHECK(b1->i->reserve(b1, Mmax, F, 64) == 0);
    CHECK(b3->i->reserve(b3, Mmax, F, 64) == 0);
    size_t nd = (size_t)Mmax * D, nf = (size_t)Mmax * F;
    float *x = malloc(nd * sizeof(float)), *y = malloc(nd * sizeof(float));
    float *g = malloc(nf * sizeof(float)), *u = malloc(nf * sizeof(float)), *w = malloc(D * sizeof(float));
    float inv_freq[E / 2];
    int32_t *pos = malloc((size_t)Mmax * sizeof(int32_t));
    for (size_t i = 0; i < nd; i++) x[i] = frand(), y[i] = frand();
    for (size_t i = 0; i < nf; i++) g[i] = 4 * frand(), u[i] = frand();
    for (int i = 0; i < D; i++) w[i] = 1.0f + 0.1f * frand();
    for (int i = 0; i < E / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / E);
    for (int m = 0; m < Mmax; m++) pos[m] = 7 + 3 * m;
    size_t out_n = 3 * nd + nf;
    float *o1 = malloc(out_n * sizeof(float)), *o3 = malloc(out_n * sizeof(float));
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        int M = Ms[mi];
        for (size_t i = 0; i < out_n; i++) o1[i] = o3[i] = NAN;
        run_ops(b1, M, x, y, g, u, w, pos, inv_freq, o1);
        run_ops(b3, M, x, y, g, u, w, pos, inv_freq, o3);
        size_t sizes[4] = {(size_t)M * D, (size_t)M * D, (size_t)M * D, (size_t)M * F};
        const char *names[4] = {"rmsnorm", "rope", "add", "silu_mul"};
        size_t off = 0;
        for (int k = 0; k < 4; k++) {
            const float *a = o1 + off, *b = o3 + off;
            CHECKF(memcmp(a, b, sizeof(float) * sizes[k]) == 0,
                   "%s over %d rows: 3 threads differ from 1", names[k], M);
            int untouched = 0;
            for (size_t i = 0; i < sizes[k]; i++) untouched += isnan(b[i]);
            CHECKF(untouched == 0, "%s over %d rows: %d outputs never written", names[k], M, untouched);
            off += k < 3 ? (size_t)M * D : 0;
        }
        /* the rotated rows really moved (rope is not a copy) and the sums add */
        CHECKF(memcmp(o3 + (size_t)M * D, x, sizeof(float) * (size_t)M * D) != 0, "rope over %d rows changed nothing",
               M);
        CHECKF(o3[2 * (size_t)M * D + (size_t)M * D - 1] == x[(size_t)M * D - 1] + y[(size_t)M * D - 1],
               "add over %d rows: last element is not x + y", M);
    }
    free(x), free(y), free(g), free(u), free(w), free(pos), free(o1), free(o3);
    backend_destroy(b1);
    backend_destroy(b3);
    TEST_DONE();
}
