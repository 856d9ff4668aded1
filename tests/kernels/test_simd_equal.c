/* test_simd_equal.c — every weight type x every SIMD level this CPU runs x
 * every row count (1, 2, 3, 7, 8, 16, 64) x odd widths, against the generic
 * path (as ggml's test-backend-ops compares each backend with the CPU one):
 *   - the kernel (mm_rows) per level against mm_rows(SIMD_GENERIC) on the same
 *     bytes, within a float-summation-order tolerance (|d| <= 1e-5 sum|w x|);
 *   - the integer-dot types give bit-identical results on AVX2 and AVX-512,
 *     as matmul_q8.c promises (same integer sums, same float steps);
 *   - per level, M rows in one call equal M one-row calls bit for bit (a
 *     verification pass sees decoding's logits), including the widths where
 *     a level's row tile (3 on AVX2, 5 on AVX-512) leaves a partial tile;
 *   - Q4_K, Q5_K and Q6_K repacked 8 rows at a time (the x86 and NEON levels' weight()
 *     layouts) give the file layout's values bit for bit at each level, alone
 *     and split;
 *   - per level through the threaded backend (SPECD_SIMD forces the level;
 *     Q8_0, and the K-quants at the SIMD levels, go through the repacking weight()
 *     hook, 16+ rows through the prefill path) against the level's
 *     single-thread kernel, bit for bit.
 * The comparison is checked to have teeth: one flipped weight bit in one row
 * must be reported. Uses the kernels library only, so it also runs in the
 * aarch64 cross build under qemu. */
#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/ggml_type.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct {
    int wtype, M, K, N;
    uint8_t *w;   /* (N, row bytes) */
    float *x;     /* (M, K) */
    uint8_t *xq;  /* (M, qx row bytes) when the type takes the integer-dot path */
    float *mag;   /* (M, N): sum |w x| over dequantized weights, for the tolerance */
} mm_case;

static void case_make(mm_case *c, int wtype, int M, int K, int N) {
    *c = (mm_case){.wtype = wtype, .M = M, .K = K, .N = N};
    size_t rb = mm_row_bytes(wtype, K);
    c->w = malloc(rb * (size_t)N);
    c->x = malloc(sizeof(float) * (size_t)M * K);
    c->mag = malloc(sizeof(float) * (size_t)M * N);
    float *wf = malloc(sizeof(float) * (size_t)K), *row = malloc(sizeof(float) * (size_t)K);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wf[k] = frand();
        if (!ggml_quantize_row(c->w + rb * n, wtype, wf, (uint64_t)K)) abort();
    }
    for (int i = 0; i < M * K; i++) c->x[i] = frand() * (i % 11 ? 1.0f : 8.0f);
    for (int n = 0; n < N; n++) {
        mm_dequant_row(row, c->w + rb * n, wtype, K);
        for (int m = 0; m < M; m++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += fabs((double)row[k] * c->x[(size_t)m * K + k]);
            c->mag[(size_t)m * N + n] = (float)s;
        }
    }
    if (mm_q8_path(wtype)) {
        c->xq = malloc(mm_qx_row_bytes(K) * (size_t)M);
        mm_quantize_x(SIMD_GENERIC, c->xq, c->x, M, K); /* the same bytes on every level (test_matmul) */
    }
    free(wf), free(row);
}

static void case_free(mm_case *c) { free(c->w), free(c->x), free(c->xq), free(c->mag); }

static void case_run(const mm_case *c, simd_level lvl, float *y) {
    mm_rows(lvl, y, c->N, c->x, c->xq, c->w, c->wtype, c->M, c->K, 0, c->N);
}

/* Worst |a - b| / (1e-5 * mag) over the outputs: <= 1 passes. */
static double case_err(const mm_case *c, const float *a, const float *b) {
    double worst = 0;
    for (int i = 0; i < c->M * c->N; i++) {
        double e = fabs((double)a[i] - b[i]) / (1e-5 * c->mag[i] + 1e-30);
        if (!(e <= worst)) worst = e; /* NaN counts as worst */
    }
    return worst;
}

/* The K-quants the SIMD levels repack 8 rows at a time (quant.h): the
 * repacked type (0: none), its bytes, the repack. */
static int kx_type(int t) {
    return t == GGML_TYPE_Q4_K ? SPECD_TYPE_Q4_K_R8 : t == GGML_TYPE_Q5_K ? SPECD_TYPE_Q5_K_R8
         : t == GGML_TYPE_Q6_K ? SPECD_TYPE_Q6_K_R8 : 0;
}
static uint8_t *kx_repack(int t, const uint8_t *w, int N, int K) {
    int q5 = t == GGML_TYPE_Q5_K;
    uint8_t *p = malloc(t == GGML_TYPE_Q6_K ? mm_q6x_bytes(N, K) : mm_rk_bytes(N, K, q5));
    if (t == GGML_TYPE_Q6_K) mm_q6x_repack(p, w, N, K);
    else mm_rk_repack(p, w, N, K, q5);
    return p;
}

int main(void) {
    simd_level lv[SIMD_LEVELS_MAX];
    int nl = simd_available(lv);
    static const int types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const int Ms[] = {1, 2, 3, 7, 8, 16, 64};
    enum { NT = sizeof types / sizeof types[0], NM = sizeof Ms / sizeof Ms[0] };
    fprintf(stderr, "levels here:");
    for (int l = 0; l < nl; l++) fprintf(stderr, " %s", simd_name(lv[l]));
    fputc('\n', stderr);

    int cases = 0;
    for (int t = 0; t < NT; t++) {
        int blk = (int)ggml_blck_size(types[t]);
        /* odd widths: K with a tail for the float types (not a multiple of 8 or 16),
         * N leaving rows after the 4-row tiles */
        int Ks[3], nk = 0;
        if (blk == 1) Ks[nk++] = 77, Ks[nk++] = 269, Ks[nk++] = 768;
        else if (blk == 32) Ks[nk++] = 32, Ks[nk++] = 96, Ks[nk++] = 768;
        else Ks[nk++] = 256, Ks[nk++] = 768;
        for (int ki = 0; ki < nk; ki++)
            for (int mi = 0; mi < NM; mi++) {
                int K = Ks[ki], M = Ms[mi], N = (ki + mi) % 2 ? 13 : 37;
                if (M == 64 && K > 300) continue; /* keeps the test fast; M 64 runs at the smaller K */
                mm_case c;
                case_make(&c, types[t], M, K, N);
                float *ref = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N),
                      *y1 = malloc(sizeof(float) * N), *yv[SIMD_LEVELS_MAX] = {0};
                case_run(&c, SIMD_GENERIC, ref);
                for (int l = 0; l < nl; l++) {
                    yv[l] = malloc(sizeof(float) * M * N);
                    memset(yv[l], 0xff, sizeof(float) * M * N); /* NaN: an output never written fails */
                    case_run(&c, lv[l], yv[l]);
                    double e = case_err(&c, yv[l], ref);
                    CHECKF(e <= 1.0, "%s %s M %d K %d N %d: %g x the tolerance from generic", simd_name(lv[l]),
                           ggml_type_name(types[t]), M, K, N, e);
                    /* row m alone (M = 1 at x + m K) equals row m of the M-row call */
                    int bad = -1;
                    for (int m = 0; m < M && bad < 0; m++) {
                        mm_rows(lv[l], y1, N, c.x + (size_t)m * K, c.xq ? c.xq + mm_qx_row_bytes(K) * m : NULL,
                                c.w, types[t], 1, K, 0, N);
                        if (memcmp(y1, yv[l] + (size_t)m * N, sizeof(float) * N)) bad = m;
                    }
                    CHECKF(bad < 0, "%s %s M %d K %d N %d: row %d differs from the row alone", simd_name(lv[l]),
                           ggml_type_name(types[t]), M, K, N, bad);
                    /* a split of [0, N) at 8 (n0, n1 multiples of 4) gives the same values */
                    if (N > 8) {
                        memset(y, 0xff, sizeof(float) * M * N);
                        mm_rows(lv[l], y, N, c.x, c.xq, c.w, types[t], M, K, 0, 8);
                        mm_rows(lv[l], y, N, c.x, c.xq, c.w, types[t], M, K, 8, N);
                        CHECKF(!memcmp(y, yv[l], sizeof(float) * M * N), "%s %s M %d K %d N %d: split at 8 differs",
                               simd_name(lv[l]), ggml_type_name(types[t]), M, K, N);
                    }
                }
                /* the K-quants repacked 8 rows at a time (quant.h): bit-identical
                 * to the file layout at each level, and rows alone equal the M-row call */
                if (kx_type(types[t])) {
                    int xt = kx_type(types[t]);
                    uint8_t *rk = kx_repack(types[t], c.w, N, K);
                    for (int l = 0; l < nl; l++) {
                        memset(y, 0xff, sizeof(float) * M * N);
                        mm_rows(lv[l], y, N, c.x, c.xq, rk, xt, M, K, 0, N);
                        CHECKF(!memcmp(y, yv[l], sizeof(float) * M * N), "%s %s x8 M %d K %d N %d differs from the file layout",
                               simd_name(lv[l]), ggml_type_name(types[t]), M, K, N);
                        int bad = -1;
                        for (int m = 0; m < M && bad < 0; m++) {
                            mm_rows(lv[l], y1, N, NULL, c.xq + mm_qx_row_bytes(K) * m, rk, xt, 1, K, 0, N);
                            if (memcmp(y1, yv[l] + (size_t)m * N, sizeof(float) * N)) bad = m;
                        }
                        CHECKF(bad < 0, "%s %s x8 M %d K %d N %d: row %d differs from the row alone", simd_name(lv[l]),
                               ggml_type_name(types[t]), M, K, N, bad);
                        if (N > 8) { /* a split at 8 (whole groups) gives the same values */
                            memset(y, 0xff, sizeof(float) * M * N);
                            mm_rows(lv[l], y, N, c.x, c.xq, rk, xt, M, K, 0, 8);
                            mm_rows(lv[l], y, N, c.x, c.xq, rk, xt, M, K, 8, N);
                            CHECKF(!memcmp(y, yv[l], sizeof(float) * M * N), "%s %s x8 M %d K %d N %d: split at 8 differs",
                                   simd_name(lv[l]), ggml_type_name(types[t]), M, K, N);
                        }
                    }
                    free(rk);
                }
                /* the integer-dot types: AVX2 and AVX-512 agree bit for bit */
                if (mm_q8_path(types[t]))
                    for (int l = 1; l + 1 < nl; l++)
                        if (lv[l] == SIMD_AVX2 && lv[l + 1] == SIMD_AVX512)
                            CHECKF(!memcmp(yv[l], yv[l + 1], sizeof(float) * M * N),
                                   "%s M %d K %d N %d: avx2 and avx512 differ", ggml_type_name(types[t]), M, K, N);
                for (int l = 0; l < nl; l++) free(yv[l]);
                free(ref), free(y), free(y1);
                case_free(&c);
                cases++;
            }
    }
    fprintf(stderr, "%d shapes x %d levels checked against generic\n", cases, nl);

    /* the comparison has teeth: a weight changed in one row of the generic
     * path's input is caught at every level */
    for (int t = 0; t < NT; t++) {
        mm_case c;
        int K = ggml_blck_size(types[t]) == 256 ? 256 : 96, M = 3, N = 13;
        case_make(&c, types[t], M, K, N);
        float *ref = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N);
        case_run(&c, SIMD_GENERIC, ref);
        size_t rb = mm_row_bytes(types[t], K);
        uint8_t *byte = c.w + rb * 5 + rb / 2 + 3; /* a weight byte of row 5 (an f32 exponent byte) */
        *byte ^= 0x21;
        for (int l = 0; l < nl; l++) {
            case_run(&c, lv[l], y);
            CHECKF(case_err(&c, y, ref) > 1.0, "%s %s: a changed weight went unnoticed", simd_name(lv[l]),
                   ggml_type_name(types[t]));
            if (kx_type(types[t])) { /* and in the repacked layout */
                uint8_t *rk = kx_repack(types[t], c.w, N, K);
                mm_rows(lv[l], y, N, c.x, c.xq, rk, kx_type(types[t]), M, K, 0, N);
                CHECKF(case_err(&c, y, ref) > 1.0, "%s %s x8: a changed weight went unnoticed", simd_name(lv[l]),
                       ggml_type_name(types[t]));
                free(rk);
            }
        }
        free(ref), free(y);
        case_free(&c);
    }

    /* the threaded backend at each forced level equals that level's kernel */
    for (int l = 0; l < nl; l++) {
        setenv("SPECD_SIMD", simd_name(lv[l]), 1);
        backend *be = backend_cpu_create(3);
        CHECKF(!strcmp(backend_cpu_simd(), simd_name(lv[l])), "SPECD_SIMD=%s ran %s", simd_name(lv[l]),
               backend_cpu_simd());
        for (int t = 0; t < NT; t++)
            for (int mi = 0; mi < NM; mi++) {
                int M = Ms[mi], K = ggml_blck_size(types[t]) == 256 ? 512 : 160, N = 300;
                mm_case c;
                case_make(&c, types[t], M, K, N);
                float *ref = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N);
                if (types[t] == GGML_TYPE_Q8_0) { /* the backend runs the repacked layout */
                    uint8_t *r8 = malloc(mm_r8_bytes(N, K));
                    mm_r8_repack(r8, c.w, N, K);
                    mmq_rows_r8(lv[l], ref, N, c.xq, r8, M, K, 0, N);
                    free(r8);
                } else if (kx_type(types[t]) && lv[l] != SIMD_GENERIC) {
                    uint8_t *rk = kx_repack(types[t], c.w, N, K); /* the SIMD levels repack the K-quants */
                    mm_rows(lv[l], ref, N, c.x, c.xq, rk, kx_type(types[t]), M, K, 0, N);
                    free(rk);
                } else {
                    case_run(&c, lv[l], ref);
                }
                int wt = types[t];
                const void *bw = be->i->weight(be, c.w, &wt, N, K);
                if (kx_type(types[t]))
                    CHECKF((wt == kx_type(types[t])) == (lv[l] != SIMD_GENERIC),
                           "%s: the backend's weight() gave %s as type %#x", simd_name(lv[l]), ggml_type_name(types[t]), wt);
                be->i->matmul(be, y, c.x, bw, wt, M, K, N);
                CHECKF(!memcmp(y, ref, sizeof(float) * M * N), "%s %s M %d: the 3-thread backend differs from the kernel",
                       simd_name(lv[l]), ggml_type_name(types[t]), M);
                be->i->weight_release(be, c.w, bw);
                free(ref), free(y);
                case_free(&c);
            }
        backend_destroy(be);
    }
    unsetenv("SPECD_SIMD");
    TEST_DONE();
}
