/* bench_kernels.c — `specd bench --kernels`: the CPU matmul kernels alone, per
 * weight type and SIMD level, against this host's measured rooflines, so a
 * kernel change can be measured without a model. For every (type, level):
 *   M = 1 (decode): every matmul of a 12-layer, dim-768, ff-2048 model (the
 *          widened bench model's shapes; weights far larger than the caches;
 *          --layers N takes fewer, for a quick smoke run: then the weights
 *          may sit in the caches and the figures are not the decode's)
 *          through the CPU backend with its threads, as weight bytes read per
 *          second and as a share of the measured memory read bandwidth;
 *   M = 8, 16, 64 (verification, prefill): the same matmuls as GFLOP/s
 *          (2 M N K per matmul) and as a share of the level's measured FMA
 *          peak (fmapeak.h) with the same threads.
 * The level is forced as SPECD_SIMD does; the integer-dot types (Q8_0, Q4_0,
 * K-quants) do int8 products, so their share of the float FMA peak can pass
 * 100%. Memory bandwidth on shared machines moves from minute to minute:
 * compare variants by running them alternately, several times. */
#include "cli/util.h"
#include "engine/gguf/gguf.h"
#include "kernels/backend.h"
#include "kernels/cpu/fmapeak.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/membw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BK_LAYERS 12 /* the most, and the default */
#define BK_MAT (BK_LAYERS * 7)

static const int bk_shapes[7][2] = {{768, 768}, {768, 768}, {768, 768}, {768, 768}, /* q k v o: N, K */
                                    {2048, 768}, {2048, 768}, {768, 2048}};          /* gate up down */

static void bk_fill(uint8_t *p, size_t n, uint32_t seed) {
    /* bytes that make valid blocks of every type: small fp16 scales, any quants */
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(((i + seed) * 2654435761u) >> 13) & 0x3b;
}

typedef struct {
    uint8_t *host[BK_MAT];
    int n; /* matmuls: 7 per layer */
    size_t bytes; /* weight bytes of one pass */
    double flops1; /* 2 N K summed over the matmuls: flops of one pass per input row */
} bk_model;

static int bk_model_make(bk_model *m, int type, int layers) {
    memset(m, 0, sizeof(*m));
    m->n = layers * 7;
    for (int i = 0; i < m->n; i++) {
        const int *s = bk_shapes[i % 7];
        size_t n = mm_row_bytes(type, s[1]) * (size_t)s[0];
        if (!(m->host[i] = malloc(n))) return -1;
        bk_fill(m->host[i], n, (uint32_t)i);
        m->bytes += n;
        m->flops1 += 2.0 * s[0] * s[1];
    }
    return 0;
}

static void bk_model_free(bk_model *m) {
    for (int i = 0; i < m->n; i++) free(m->host[i]);
}

/* Best of reps: seconds for every matmul of the model at each of the nm row
 * counts Ms, through be (its weight() hook: Q8_0 is repacked). */
static int bk_run(backend *be, const bk_model *md, int type, const int *Ms, int nm, int reps, double *best) {
    const void *w[BK_MAT];
    int wt[BK_MAT], Mmax = 1;
    for (int i = 0; i < nm; i++) Mmax = Ms[i] > Mmax ? Ms[i] : Mmax;
    float *x = malloc(sizeof(float) * 2048 * (size_t)Mmax), *y = malloc(sizeof(float) * 2048 * (size_t)Mmax);
    if (!x || !y) {
        free(x), free(y);
        return -1;
    }
    for (int i = 0; i < 2048 * Mmax; i++) x[i] = 0.01f * (float)(i % 13) - 0.06f;
    for (int i = 0; i < md->n; i++) {
        wt[i] = type;
        w[i] = be->i->weight(be, md->host[i], &wt[i], bk_shapes[i % 7][0], bk_shapes[i % 7][1]);
    }
    be->i->reserve(be, Mmax, 2048, 64);
    for (int mi = 0; mi < nm; mi++) {
        best[mi] = -1;
        for (int r = 0; r < reps; r++) {
            double t0 = now_ms();
            for (int i = 0; i < md->n; i++)
                be->i->matmul(be, y, x, w[i], wt[i], Ms[mi], bk_shapes[i % 7][1], bk_shapes[i % 7][0]);
            double dt = (now_ms() - t0) / 1e3;
            if (best[mi] < 0 || dt < best[mi]) best[mi] = dt;
        }
    }
    for (int i = 0; i < md->n; i++) be->i->weight_release(be, md->host[i], w[i]);
    free(x), free(y);
    return 0;
}

static void bk_usage_to(FILE *f) {
    fprintf(f, "usage: specd bench --kernels [-t THREADS (2)] [-r REPS (5)] [--type T[,T...]] "
                    "[--simd L[,L...]] [--rows M[,M...] (1,8,16,64)] [--layers N (12)]\n"
                    "  types: f32 f16 bf16 q8_0 q4_0 q4_K q5_K q6_K (default all); levels: those this CPU runs\n");
}


int bench_kernels(int argc, char **argv) {
    int threads = 2, reps = 5, layers = BK_LAYERS;
    int types[8] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                    GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    int nt = 8, Ms[8] = {1, 8, 16, 64}, nm = 4;
    simd_level lv[SIMD_LEVELS_MAX];
    int nl = simd_available(lv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) continue;
        if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) {
            threads = (int)arg_long(argc, argv, &i, 1, 1024);
        } else if (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--reps")) {
            reps = (int)arg_long(argc, argv, &i, 1, 1000);
        } else if (!strcmp(argv[i], "--layers")) {
            layers = (int)arg_long(argc, argv, &i, 1, BK_LAYERS);
        } else if ((!strcmp(argv[i], "--type") || !strcmp(argv[i], "--simd") || !strcmp(argv[i], "--rows")) &&
                   i + 1 < argc) {
            const char *opt = argv[i];
            char buf[256];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            int n = 0;
            simd_level all[SIMD_LEVELS_MAX];
            int na = simd_available(all);
            for (char *tok = strtok(buf, ","); tok && n < 8; tok = strtok(NULL, ",")) {
                if (!strcmp(opt, "--type")) {
                    int t = ggml_type_from_name(tok);
                    if (t < 0 || !mm_row_bytes(t, 768)) {
                        fprintf(stderr, "specd bench --kernels: unknown or unsupported type '%s'\n", tok);
                        return 2;
                    }
                    types[n++] = t;
                } else if (!strcmp(opt, "--rows")) {
                    char *end;
                    long v = strtol(tok, &end, 10);
                    if (*end || v < 1 || v > 4096) {
                        fprintf(stderr, "specd bench --kernels: --rows takes counts in 1..4096, got '%s'\n", tok);
                        return 2;
                    }
                    Ms[n++] = (int)v;
                } else {
                    int found = -1;
                    for (int a = 0; a < na; a++)
                        if (!strcmp(tok, simd_name(all[a]))) found = a;
                    if (found < 0 || n >= SIMD_LEVELS_MAX) {
                        fprintf(stderr, "specd bench --kernels: SIMD level '%s' is not one this CPU runs\n", tok);
                        return 2;
                    }
                    lv[n++] = all[found];
                }
            }
            if (!strcmp(opt, "--type")) nt = n;
            else if (!strcmp(opt, "--rows")) nm = n;
            else nl = n;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            bk_usage_to(stdout);
            return 0;
        } else {
            return cli_unknown_option("bench --kernels", argv[i], bk_usage_to);
        }
    }
    /* the rooflines: memory read bandwidth and each level's FMA peak, same threads */
    membw *probe = membw_create(threads, (size_t)512 << 20);
    double bw = probe ? membw_measure(probe, 8, 1) : 0;
    membw_destroy(probe);
    double peak[SIMD_LEVELS_MAX];
    printf("CPU matmul kernels, %d threads: %d layers of dim 768 / ff 2048 weights (q k v o gate up down), best of %d\n",
           threads, layers, reps);
    printf("measured memory read bandwidth %.1f GB/s; FMA peak (GFLOP/s):", bw);
    for (int l = 0; l < nl; l++) {
        peak[l] = fmapeak_measure(lv[l], threads, 5);
        printf(" %s %.1f", simd_name(lv[l]), peak[l]);
    }
    printf("\nM = 1: GB/s of weights read (%% of bandwidth); M > 1: GFLOP/s (%% of the level's FMA peak)\n\n");
    printf("%-6s %-8s", "type", "level");
    for (int mi = 0; mi < nm; mi++) {
        char h[32];
        snprintf(h, sizeof h, "M=%d", Ms[mi]);
        printf(" %18s", h);
    }
    printf("\n");
    for (int t = 0; t < nt; t++) {
        bk_model md;
        if (bk_model_make(&md, types[t], layers) != 0) {
            bk_model_free(&md);
            fprintf(stderr, "specd bench --kernels: out of memory\n");
            return 1;
        }
        for (int l = 0; l < nl; l++) {
            setenv("SPECD_SIMD", simd_name(lv[l]), 1);
            setenv("SPECD_TP_ADAPT", "0", 0); /* the kernels on every thread asked for, busy host or not */
            backend *be = backend_cpu_create(threads);
            double best[8];
            int rc = bk_run(be, &md, types[t], Ms, nm, reps, best);
            backend_destroy(be);
            if (rc != 0) {
                bk_model_free(&md);
                fprintf(stderr, "specd bench --kernels: out of memory\n");
                return 1;
            }
            printf("%-6s %-8s", ggml_type_name(types[t]), simd_name(lv[l]));
            for (int mi = 0; mi < nm; mi++) {
                char c[40];
                if (Ms[mi] == 1) {
                    double g = md.bytes / best[mi] / 1e9;
                    snprintf(c, sizeof c, "%6.1f GB/s %3.0f%%", g, bw > 0 ? 100 * g / bw : 0);
                } else {
                    double g = md.flops1 * Ms[mi] / best[mi] / 1e9;
                    snprintf(c, sizeof c, "%6.1f GF/s %3.0f%%", g, peak[l] > 0 ? 100 * g / peak[l] : 0);
                }
                printf(" %18s", c);
            }
            printf("\n");
            fflush(stdout);
        }
        bk_model_free(&md);
    }
    unsetenv("SPECD_SIMD");
    return 0;
}
