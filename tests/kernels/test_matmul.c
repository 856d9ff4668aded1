/* test_matmul.c — every CPU matmul path (avx512, avx2, generic) against a
 * double-precision reference over dequantized weights, for all weight types,
 * M from 1 to 13 (tile edges and the large-M dequantize-once path), K with and
 * without a tail, N not a multiple of the 4-row tile; and the threaded backend
 * op against the single-thread kernel. */
#include "engine/gguf.h"
#include "engine/mkmodel.h"
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void run_case(simd_level lvl, int wtype, int M, int K, int N) {
    size_t rb = mm_row_bytes(wtype, K);
    uint8_t *w = malloc(rb * (size_t)N);
    float *wf = malloc(sizeof(float) * (size_t)K), *row = malloc(sizeof(float) * (size_t)K);
    float *x = malloc(sizeof(float) * (size_t)M * K), *y = malloc(sizeof(float) * (size_t)M * N);
    float *scratch = malloc(sizeof(float) * 4 * (size_t)K);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wf[k] = frand();
        CHECK(mkmodel_row_from_f32(w + rb * n, wtype, wf, (uint64_t)K));
    }
    for (int i = 0; i < M * K; i++) x[i] = frand();
    mm_rows(lvl, y, N, x, w, wtype, M, K, 0, N, scratch);
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
    free(w), free(wf), free(row), free(x), free(y), free(scratch);
}

int main(void) {
    simd_level best = simd_detect();
    const int types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                         GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    const size_t n_types = sizeof types / sizeof types[0];
    int ran = 0;
    for (int lvl = SIMD_GENERIC; lvl <= (int)best; lvl++) {
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
        CHECK(mkmodel_row_from_f32(blk, types[t], src, (uint64_t)K));
        CHECK(mkmodel_row_to_f32(back, types[t], blk, (uint64_t)K));
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
            mkmodel_row_from_f32(w + rb * n, bt[ti], wf, K);
        }
        for (int i = 0; i < M * K; i++) x[i] = frand();
        b1->i->matmul(b1, y1, x, w, bt[ti], M, K, N);
        b3->i->matmul(b3, y3, x, w, bt[ti], M, K, N);
        CHECKF(memcmp(y1, y3, sizeof(float) * M * N) == 0, "%s: threaded != single", ggml_type_name(bt[ti]));
        free(w), free(wf), free(x), free(y1), free(y3);
    }
    backend_destroy(b1);
    backend_destroy(b3);
    TEST_DONE();
}
