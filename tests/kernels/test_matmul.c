/* test_matmul.c — every CPU matmul path (avx512, avx2, generic) against a
 * double-precision reference over dequantized weights (and, for the integer-dot
 * types, activations rounded as that path rounds them, written out here), for
 * all weight types, M from 1 to 13 (tile edges), K with and without a tail, N
 * not a multiple of the 4-row tile; Q8_0 and the K-quants repacked 8 rows at a
 * time against the file layout; the activation quantizer's bytes on every path; the threaded
 * backend op against the single-thread kernel; and rows of a batch against the
 * same rows alone. */
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/ggml_type.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* The activation rounding of the integer-dot path, written out independently:
 * per 32 values d = amax/127, q = nearest-even(x / d); xr gets d * q. */
static void quantize_ref(float *xr, const float *x, int n) {
    for (int b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(x[32 * b + l]));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        for (int l = 0; l < 32; l++) xr[32 * b + l] = d * nearbyintf(x[32 * b + l] * id);
    }
}

static void run_case(simd_level lvl, int wtype, int M, int K, int N) {
    size_t rb = mm_row_bytes(wtype, K);
    uint8_t *w = malloc(rb * (size_t)N);
    float *wf = malloc(sizeof(float) * (size_t)K), *row = malloc(sizeof(float) * (size_t)K);
    float *x = malloc(sizeof(float) * (size_t)M * K), *y = malloc(sizeof(float) * (size_t)M * N);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wf[k] = frand();
        CHECK(ggml_quantize_row(w + rb * n, wtype, wf, (uint64_t)K));
    }
    for (int i = 0; i < M * K; i++) x[i] = frand();
    uint8_t *xq = NULL;
    if (mm_q8_path(wtype)) {
        xq = malloc(mm_qx_row_bytes(K) * (size_t)M);
        mm_quantize_x(lvl, xq, x, M, K);
    }
    mm_rows(lvl, y, N, x, xq, w, wtype, M, K, 0, N);
    if (xq) /* the reference sees the activations as the kernel does */
        for (int m = 0; m < M; m++) quantize_ref(x + (size_t)m * K, x + (size_t)m * K, K);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        mm_dequant_row(row, w + rb * n, wtype, K);
        for (int m = 0; m < M; m++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                ref += (double)row[k] * x[(size_t)m * K + k];
                mag += fabs((double)row[k] * x[(size_t)m * K + k]);
            }
            double e = fabs(y[(size_t)m * N + n] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    }
    CHECKF(worst < 1e-5, "%s type %s M %d K %d N %d: relative error %g", simd_name(lvl), ggml_type_name(wtype), M,
           K, N, worst);
    free(w), free(wf), free(row), free(x), free(y), free(xq);
}

int main(void) {
    simd_level best = simd_detect(), lvls[SIMD_LEVELS_MAX];
    int n_lvls = simd_available(lvls);
    const int types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                         GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    const size_t n_types = sizeof types / sizeof types[0];
    int ran = 0;
    for (int li = 0; li < n_lvls; li++) {
        int lvl = lvls[li];
        for (size_t t = 0; t < n_types; t++) {
            const int Ks[] = {32, 64, 96, 172, 40, 17, 256, 768};
            for (size_t ki = 0; ki < 8; ki++) {
                int K = Ks[ki];
                if (mm_row_bytes(types[t], K) == 0) continue; /* not whole blocks of this type */
                for (int M = 1; M <= 13; M += (M < 6 ? 1 : 7)) {
                    run_case((simd_level)lvl, types[t], M, K, 4);
                    run_case((simd_level)lvl, types[t], M, K, 11);
                    ran++;
                }
            }
        }
    }
    fprintf(stderr, "best SIMD path here: %s; %d shapes per path checked\n", simd_name(best), ran);

    /* the quantizers keep uniform(-1, 1) weights within each type's step size:
     * relative RMS error of the round trip */
    const double rms_max[] = {0, 1e-3, 4e-3, 1e-2, 0.12, 0.12, 0.06, 0.03};
    for (size_t t = 1; t < n_types; t++) {
        int K = 1024;
        uint8_t *blk = malloc(mm_row_bytes(types[t], K));
        float *src = malloc(sizeof(float) * K), *back = malloc(sizeof(float) * K);
        for (int k = 0; k < K; k++) src[k] = frand();
        CHECK(ggml_quantize_row(blk, types[t], src, (uint64_t)K));
        CHECK(ggml_dequantize_row(back, types[t], blk, (uint64_t)K));
        double se = 0, ss = 0;
        for (int k = 0; k < K; k++) se += (double)(back[k] - src[k]) * (back[k] - src[k]), ss += (double)src[k] * src[k];
        CHECKF(sqrt(se / ss) < rms_max[t], "%s round trip: relative RMS error %g", ggml_type_name(types[t]),
               sqrt(se / ss));
        fprintf(stderr, "%s round trip relative RMS error %.4f\n", ggml_type_name(types[t]), sqrt(se / ss));
        free(blk), free(src), free(back);
    }

    /* the threaded backend op equals the single-thread kernel bit for bit */
    backend *b1 = backend_cpu_create(1), *b3 = backend_cpu_create(3);
    const int bt[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    for (int ti = 0; ti < 3; ti++) {
        int M = 7, K = 256, N = 300;
        size_t rb = mm_row_bytes(bt[ti], K);
        uint8_t *w = malloc(rb * N);
        float *wf = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * M * K);
        float *y1 = malloc(sizeof(float) * M * N), *y3 = malloc(sizeof(float) * M * N);
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < K; k++) wf[k] = frand();
            ggml_quantize_row(w + rb * n, bt[ti], wf, K);
        }
        for (int i = 0; i < M * K; i++) x[i] = frand();
        b1->i->matmul(b1, y1, x, w, bt[ti], M, K, N);
        b3->i->matmul(b3, y3, x, w, bt[ti], M, K, N);
        CHECKF(memcmp(y1, y3, sizeof(float) * M * N) == 0, "%s: threaded != single", ggml_type_name(bt[ti]));
        free(w), free(wf), free(x), free(y1), free(y3);
    }
    /* matmul_n (q/k/v and gate/up in one op) gives each matrix exactly what its
     * own matmul call gives: mixed weight types (Q8_0 through the backend's
     * repacking weight() hook, F16, Q6_K), different row counts, decode,
     * verification and prefill heights (M >= 16 quantizes x in tasks), and a
     * shape small enough to run without the thread pool */
    {
        const int mt[3] = {GGML_TYPE_Q8_0, GGML_TYPE_F16, GGML_TYPE_Q6_K}, mn[3] = {264, 72, 136};
        const int Ms[] = {1, 5, 20}, Ks[] = {256, 256};
        for (int big = 0; big < 2; big++)
            for (int mi = 0; mi < 3; mi++) {
                int M = big ? Ms[mi] : 1, K = Ks[big], n = big ? 3 : 2;
                int N[3], t[3];
                uint8_t *host[3];
                const void *w[3];
                float *ya[3], *yb[3], *x = malloc(sizeof(float) * (size_t)M * K);
                for (int i = 0; i < M * K; i++) x[i] = frand();
                for (int i = 0; i < n; i++) {
                    N[i] = big ? mn[i] : 8;
                    t[i] = mt[i];
                    size_t rb = mm_row_bytes(t[i], K);
                    host[i] = malloc(rb * (size_t)N[i]);
                    float *wf = malloc(sizeof(float) * (size_t)K);
                    for (int r = 0; r < N[i]; r++) {
                        for (int k = 0; k < K; k++) wf[k] = frand();
                        ggml_quantize_row(host[i] + rb * r, t[i], wf, (uint64_t)K);
                    }
                    free(wf);
                    w[i] = b3->i->weight(b3, host[i], &t[i], N[i], K);
                    ya[i] = malloc(sizeof(float) * (size_t)M * N[i]);
                    yb[i] = malloc(sizeof(float) * (size_t)M * N[i]);
                    b3->i->matmul(b3, ya[i], x, w[i], t[i], M, K, N[i]);
                }
                b3->i->matmul_n(b3, n, yb, x, w, t, M, K, N);
                for (int i = 0; i < n; i++) {
                    CHECKF(memcmp(ya[i], yb[i], sizeof(float) * (size_t)M * N[i]) == 0,
                           "matmul_n matrix %d (%s) M %d N %d differs from its own matmul", i,
                           ggml_type_name(mt[i]), M, N[i]);
                    b3->i->weight_release(b3, host[i], w[i]);
                    free(host[i]), free(ya[i]), free(yb[i]);
                }
                free(x);
                if (!big) break;
            }
    }
    /* more matrices than one op takes (BACKEND_MATMUL_N_MAX) still give each
     * its own call's result */
    {
        enum { NM = BACKEND_MATMUL_N_MAX + 2 };
        int M = 5, K = 64, N[NM], t[NM];
        float *ya[NM], *yb[NM], *x = malloc(sizeof(float) * M * K);
        uint8_t *host[NM];
        const void *w[NM];
        for (int i = 0; i < M * K; i++) x[i] = frand();
        for (int i = 0; i < NM; i++) {
            N[i] = 40 + 8 * i, t[i] = i % 2 ? GGML_TYPE_F16 : GGML_TYPE_Q8_0;
            size_t rb = mm_row_bytes(t[i], K);
            host[i] = malloc(rb * N[i]);
            float wf[64];
            for (int r = 0; r < N[i]; r++) {
                for (int k = 0; k < K; k++) wf[k] = frand();
                ggml_quantize_row(host[i] + rb * r, t[i], wf, K);
            }
            w[i] = b3->i->weight(b3, host[i], &t[i], N[i], K);
            ya[i] = malloc(sizeof(float) * M * N[i]), yb[i] = malloc(sizeof(float) * M * N[i]);
            b3->i->matmul(b3, ya[i], x, w[i], t[i], M, K, N[i]);
        }
        b3->i->matmul_n(b3, NM, yb, x, w, t, M, K, N);
        for (int i = 0; i < NM; i++) {
            CHECKF(!memcmp(ya[i], yb[i], sizeof(float) * M * N[i]), "matmul_n of %d matrices: matrix %d differs", NM, i);
            b3->i->weight_release(b3, host[i], w[i]);
            free(host[i]), free(ya[i]), free(yb[i]);
        }
        free(x);
    }
    /* Q8_0 repacked 8 rows at a time (the CPU backend's weight() layout) gives
     * exactly what the file layout gives, on every path, for N not a multiple
     * of 8 and every tile height; its rows dequantize to the same values */
    for (int li = 0; li < n_lvls; li++) {
        int lvl = lvls[li];
        const int Ns[] = {8, 13, 300, 1001}, Ks[] = {32, 256, 768};
        for (int ni = 0; ni < 4; ni++)
            for (int ki = 0; ki < 3; ki++) {
                int N = Ns[ni], K = Ks[ki], Mmax = 13;
                size_t rb = mm_row_bytes(GGML_TYPE_Q8_0, K);
                uint8_t *w = malloc(rb * N), *r8 = malloc(mm_r8_bytes(N, K));
                float *wf = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * Mmax * K);
                float *ya = malloc(sizeof(float) * Mmax * N), *yb = malloc(sizeof(float) * Mmax * N);
                            uint8_t *xq = malloc(mm_qx_row_bytes(K) * Mmax);
                for (int n = 0; n < N; n++) {
                    for (int k = 0; k < K; k++) wf[k] = frand();
                    ggml_quantize_row(w + rb * n, GGML_TYPE_Q8_0, wf, K);
                }
                mm_r8_repack(r8, w, N, K);
                if (lvl == SIMD_GENERIC) { /* the backend repacks on its threads: the same bytes */
                    int t = GGML_TYPE_Q8_0;
                    const void *bw = b3->i->weight(b3, w, &t, N, K);
                    CHECKF(t == SPECD_TYPE_Q8_0_R8 && !memcmp(bw, r8, mm_r8_bytes(N, K)),
                           "backend weight() repack of %d x %d differs from mm_r8_repack", N, K);
                    b3->i->weight_release(b3, w, bw);
                }
                for (int i = 0; i < Mmax * K; i++) x[i] = frand();
                mm_quantize_x((simd_level)lvl, xq, x, Mmax, K);
                for (int M = 1; M <= Mmax; M += (M < 6 ? 1 : 7)) {
                    mm_rows((simd_level)lvl, ya, N, x, xq, w, GGML_TYPE_Q8_0, M, K, 0, N);
                    memset(yb, 0xff, sizeof(float) * M * N);
                    mmq_rows_r8((simd_level)lvl, yb, N, xq, r8, M, K, 0, N);
                    CHECKF(!memcmp(ya, yb, sizeof(float) * M * N), "%s: q8_0 x8 M %d K %d N %d differs from q8_0",
                           simd_name((simd_level)lvl), M, K, N);
                }
                for (int n = 0; n < N; n += 5) {
                    mm_dequant_row(x, w + rb * n, GGML_TYPE_Q8_0, K); /* x (Mmax x K) is free by now */
                    mm_r8_dequant_row(x + K, r8, n, K);
                    CHECKF(!memcmp(x, x + K, sizeof(float) * K), "q8_0 x8 row %d of %d dequantizes differently", n, N);
                }
                free(w), free(r8), free(wf), free(x), free(ya), free(yb), free(xq);
            }
    }

    /* Q4_K, Q5_K and Q6_K repacked 8 rows at a time (the CPU backend's weight()
     * layouts at the x86 SIMD levels): the backend's threaded repack gives the
     * repack's bytes, their rows dequantize to the file rows' values, and the
     * kernels give the file layout's results bit for bit (N not a multiple of 8) */
    for (int kt = 0; kt < 3; kt++) { /* Q4_K, Q6_K, Q5_K */
        const int ft = (int[]){GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K}[kt];
        const int xt = (int[]){SPECD_TYPE_Q4_K_R8, SPECD_TYPE_Q6_K_R8, SPECD_TYPE_Q5_K_R8}[kt], q5 = kt == 2;
        const int Ns[] = {8, 13, 300}, Ks[] = {256, 768};
        for (int ni = 0; ni < 3; ni++)
            for (int ki = 0; ki < 2; ki++) {
                int N = Ns[ni], K = Ks[ki], Mmax = 6;
                size_t rb = mm_row_bytes(ft, K), xb = kt == 1 ? mm_q6x_bytes(N, K) : mm_rk_bytes(N, K, q5);
                uint8_t *w = malloc(rb * N), *rk = malloc(xb), *xq = malloc(mm_qx_row_bytes(K) * Mmax);
                float *wf = malloc(sizeof(float) * K * 2), *x = malloc(sizeof(float) * Mmax * K);
                float *ya = malloc(sizeof(float) * Mmax * N), *yb = malloc(sizeof(float) * Mmax * N);
                for (int n = 0; n < N; n++) {
                    for (int k = 0; k < K; k++) wf[k] = frand();
                    ggml_quantize_row(w + rb * n, ft, wf, K);
                }
                if (kt == 1) mm_q6x_repack(rk, w, N, K);
                else mm_rk_repack(rk, w, N, K, q5);
                setenv("SPECD_SIMD", "avx2", 1); /* a level that repacks them, where the CPU has one */
                backend *bx = backend_cpu_create(3);
                int t = ft;
                const void *bw = bx->i->weight(bx, w, &t, N, K);
                if (t == xt)
                    CHECKF(!memcmp(bw, rk, xb), "backend weight() repack of %s %d x %d differs", ggml_type_name(ft), N, K);
                else
                    CHECKF(bw == w && strcmp(backend_cpu_simd(), "avx2") && strcmp(backend_cpu_simd(), "avx512"),
                           "%s not repacked at %s", ggml_type_name(ft), backend_cpu_simd());
                bx->i->weight_release(bx, w, bw);
                backend_destroy(bx);
                unsetenv("SPECD_SIMD");
                for (int n = 0; n < N; n += 3) {
                    mm_dequant_row(wf, w + rb * n, ft, K);
                    if (kt == 1) mm_q6x_dequant_row(wf + K, rk, n, K);
                    else mm_rk_dequant_row(wf + K, rk, n, K, q5);
                    CHECKF(!memcmp(wf, wf + K, sizeof(float) * K), "%s x8 row %d of %d dequantizes differently",
                           ggml_type_name(ft), n, N);
                }
                for (int i = 0; i < Mmax * K; i++) x[i] = frand();
                for (int li = 0; li < n_lvls; li++) {
                    simd_level lvl = lvls[li];
                    mm_quantize_x(lvl, xq, x, Mmax, K);
                    for (int M = 1; M <= Mmax; M++) {
                        mm_rows(lvl, ya, N, x, xq, w, ft, M, K, 0, N);
                        memset(yb, 0xff, sizeof(float) * M * N);
                        mm_rows(lvl, yb, N, x, xq, rk, xt, M, K, 0, N);
                        CHECKF(!memcmp(ya, yb, sizeof(float) * M * N), "%s: %s x8 M %d K %d N %d differs from the file layout",
                               simd_name(lvl), ggml_type_name(ft), M, K, N);
                    }
                }
                free(w), free(rk), free(xq), free(wf), free(x), free(ya), free(yb);
            }
    }

    /* activation quantization: the same bytes on every path, including
     * all-zero blocks, NaN and infinities (clamped), and exact halves */
    {
        int K = 256, Mq = 3;
        float *x = malloc(sizeof(float) * Mq * K);
        for (int i = 0; i < Mq * K; i++) x[i] = frand() * (i % 7 ? 1.0f : 30.0f);
        for (int i = 32; i < 64; i++) x[i] = 0.0f;                 /* an all-zero block */
        x[70] = NAN, x[100] = INFINITY, x[101] = -INFINITY;       /* clamped, never UB */
        x[170] = NAN, x[200] = NAN, x[300] = NAN, x[333] = NAN;  /* NaN in every 8-lane slot of a block */
        for (int i = 128; i < 160; i++) x[i] = (float)(i - 144) * 0.5f; /* amax 8: many exact .5 steps */
        size_t rs = mm_qx_row_bytes(K);
        uint8_t *ref = malloc(rs * Mq), *got = malloc(rs * Mq);
        memset(ref, 0, rs * Mq);
        mm_quantize_x(SIMD_GENERIC, ref, x, Mq, K);
        for (int li = 1; li < n_lvls; li++) {
            int lvl = lvls[li];
            memset(got, 0, rs * Mq);
            mm_quantize_x((simd_level)lvl, got, x, Mq, K);
            CHECKF(!memcmp(ref, got, rs * Mq), "%s: quantized activations differ from the portable path",
                   simd_name((simd_level)lvl));
        }
        free(x), free(ref), free(got);
    }

    /* a row's value does not depend on the rows it is batched with: M rows in
     * one call equal M one-row calls bit for bit (speculative verification and
     * plain decoding must see the same logits), on every path and thread count */
    const int rt[] = {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (int ti = 0; ti < 6; ti++)
        for (int mi = 0; mi < 3; mi++) {
            int M = (int[]){5, 17, 40}[mi], K = 512, N = 96;
            size_t rb = mm_row_bytes(rt[ti], K);
            uint8_t *w = malloc(rb * N);
            float *wf = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * M * K);
            float *yb = malloc(sizeof(float) * M * N), *y1 = malloc(sizeof(float) * N);
            for (int n = 0; n < N; n++) {
                for (int k = 0; k < K; k++) wf[k] = frand();
                ggml_quantize_row(w + rb * n, rt[ti], wf, K);
            }
            for (int i = 0; i < M * K; i++) x[i] = frand();
            backend *bs[2] = {b1, b3};
            for (int bi = 0; bi < 2; bi++) {
                int wt = rt[ti]; /* through weight(): Q8_0 comes back repacked */
                const void *bw = bs[bi]->i->weight(bs[bi], w, &wt, N, K);
                CHECK(rt[ti] != GGML_TYPE_Q8_0 || wt == SPECD_TYPE_Q8_0_R8);
                bs[bi]->i->matmul(bs[bi], yb, x, bw, wt, M, K, N);
                int bad = -1;
                for (int m = 0; m < M && bad < 0; m++) {
                    bs[bi]->i->matmul(bs[bi], y1, x + (size_t)m * K, bw, wt, 1, K, N);
                    if (memcmp(y1, yb + (size_t)m * N, sizeof(float) * N) != 0) bad = m;
                }
                CHECKF(bad < 0, "%s, %d threads: row %d of a %d-row call differs from the row alone",
                       ggml_type_name(rt[ti]), bi ? 3 : 1, bad, M);
                bs[bi]->i->weight_release(bs[bi], w, bw);
            }
            free(w), free(wf), free(x), free(yb), free(y1);
        }
    backend_destroy(b1);
    backend_destroy(b3);
    TEST_DONE();
}
