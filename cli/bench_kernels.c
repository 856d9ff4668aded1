/* bench_kernels.c — `specd bench --kernels`: the CPU matmul kernels alone, so
 * a kernel change can be measured without a model. Two figures per weight type
 * and input-row count M:
 *   stream: every matmul of a 12-layer, dim-768, ff-2048 model (the bench
 *           model's shapes; weights far larger than the caches) through the
 *           CPU backend with its threads, as weight bytes read per second;
 *   cache:  one 768-column matrix of about 512 KB (stays in L2), one thread,
 *           as weights (rows x columns) per second: the kernel's compute
 *           ceiling, per-call overheads included.
 * Memory bandwidth on shared machines moves from minute to minute: compare
 * variants by running them alternately, several times. */
#include "cli/util.h"
#include "engine/gguf.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BK_LAYERS 12

static const int bk_shapes[7][2] = {{768, 768}, {768, 768}, {768, 768}, {768, 768}, /* q k v o: N, K */
                                    {2048, 768}, {2048, 768}, {768, 2048}};          /* gate up down */

static void bk_fill(uint8_t *p, size_t n, uint32_t seed) {
    /* bytes that make valid blocks of every type: small fp16 scales, any quants */
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(((i + seed) * 2654435761u) >> 13) & 0x3b;
}

/* Best of reps: seconds for every matmul of the model at M rows. */
static double bk_stream(backend *be, int type, int M, int reps, size_t *bytes) {
    const void *w[BK_LAYERS][7];
    int wt[BK_LAYERS][7];
    uint8_t *host[BK_LAYERS][7];
    float *x = malloc(sizeof(float) * 2048 * (size_t)M), *y = malloc(sizeof(float) * 2048 * (size_t)M);
    double best = -1;
    *bytes = 0;
    if (!x || !y) goto out;
    for (int i = 0; i < 2048 * M; i++) x[i] = 0.01f * (float)(i % 13) - 0.06f;
    for (int l = 0; l < BK_LAYERS; l++)
        for (int s = 0; s < 7; s++) {
            size_t n = mm_row_bytes(type, bk_shapes[s][1]) * (size_t)bk_shapes[s][0];
            host[l][s] = malloc(n);
            if (!host[l][s]) goto out;
            bk_fill(host[l][s], n, (uint32_t)(l * 7 + s));
            wt[l][s] = type;
            w[l][s] = be->i->weight(be, host[l][s], &wt[l][s], bk_shapes[s][0], bk_shapes[s][1]);
            *bytes += n;
        }
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        for (int l = 0; l < BK_LAYERS; l++)
            for (int s = 0; s < 7; s++) be->i->matmul(be, y, x, w[l][s], wt[l][s], M, bk_shapes[s][1], bk_shapes[s][0]);
        double dt = (now_ms() - t0) / 1e3;
        if (best < 0 || dt < best) best = dt;
    }
    for (int l = 0; l < BK_LAYERS; l++)
        for (int s = 0; s < 7; s++) {
            be->i->weight_release(be, host[l][s], w[l][s]);
            free(host[l][s]);
        }
out:
    free(x);
    free(y);
    return best;
}

/* Best of reps: weights per second of one in-cache matmul at M rows, one thread. */
static double bk_cache(int type, int M, int reps) {
    const int K = 768;
    int N = (int)(((size_t)512 << 10) / mm_row_bytes(type, K)) / 8 * 8;
    backend *be = backend_cpu_create(1);
    size_t n = mm_row_bytes(type, K) * N;
    uint8_t *host = malloc(n);
    float *x = malloc(sizeof(float) * K * (size_t)M), *y = malloc(sizeof(float) * N * (size_t)M);
    double best = -1;
    if (host && x && y) {
        bk_fill(host, n, 7);
        for (int i = 0; i < K * M; i++) x[i] = 0.01f * (float)(i % 13) - 0.06f;
        int wt = type;
        const void *w = be->i->weight(be, host, &wt, N, K);
        for (int r = 0; r < reps; r++) {
            double t0 = now_ms();
            for (int i = 0; i < 50; i++) be->i->matmul(be, y, x, w, wt, M, K, N);
            double dt = (now_ms() - t0) / 1e3 / 50;
            if (best < 0 || dt < best) best = dt;
        }
        best = (double)N * K / best;
        be->i->weight_release(be, host, w);
    }
    free(host);
    free(x);
    free(y);
    backend_destroy(be);
    return best;
}

int bench_kernels(int argc, char **argv) {
    int threads = 2, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) continue;
        if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--reps")) reps = (int)arg_long(argc, argv, &i, 1, 1000);
        else {
            fprintf(stderr, "usage: specd bench --kernels [-t THREADS (2)] [-r REPS (5)]\n");
            return 2;
        }
    }
    static const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const int Ms[] = {1, 5, 8};
    backend *be = backend_cpu_create(threads);
    /* the CPU's kernels alone, whatever GPU the machine has: the CPU's SIMD is the right figure */
    printf("CPU matmul kernels (CPU SIMD: %s): stream = 12 layers of dim 768 / ff 2048 weights, %d threads; "
           "cache = ~512 KB x 768 columns in L2, 1 thread\n\n", backend_cpu_simd(), threads);
    printf("%-6s %3s %12s %12s %14s\n", "type", "M", "stream ms", "stream GB/s", "cache Gw/s");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            size_t bytes = 0;
            double s = bk_stream(be, types[t], Ms[mi], reps, &bytes);
            double c = bk_cache(types[t], Ms[mi], reps);
            if (s <= 0 || c <= 0) {
                fprintf(stderr, "specd bench --kernels: out of memory\n");
                backend_destroy(be);
                return 1;
            }
            printf("%-6s %3d %12.3f %12.1f %14.2f\n", ggml_type_name(types[t]), Ms[mi], s * 1e3, bytes / s / 1e9,
                   c / 1e9);
        }
    backend_destroy(be);
    return 0;
}
