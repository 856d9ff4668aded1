/* fmapeak.c — the FMA peak probe (see fmapeak.h): 12 independent accumulator
 * chains per thread, enough to cover the FMA latency of every core measured
 * (4 cycles, 2 pipes), so the loop runs at the issue rate. */
#include "kernels/cpu/fmapeak.h"
#include "kernels/clock.h"
#include "kernels/cpu/threadpool.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#define PK_CHAINS 12

typedef struct {
    simd_level lvl;
    long iters;
    float sink[64];
} pk_job;

/* flops per iteration of each loop: PK_CHAINS x lanes x 2 */
static int pk_lanes(simd_level l) {
    return l == SIMD_AVX512 ? 16 : l == SIMD_AVX2 ? 8 : 4;
}

static float pk_generic(long iters) {
    float a[PK_CHAINS][4];
    for (int i = 0; i < PK_CHAINS; i++)
        for (int l = 0; l < 4; l++) a[i][l] = (float)(i + l) * 1e-3f;
    volatile float vb = 0.999999f, vc = 1e-7f; /* not constants the compiler could fold */
    float b = vb, c = vc;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PK_CHAINS; i++)
            for (int l = 0; l < 4; l++) a[i][l] = a[i][l] * b + c;
    float s = 0;
    for (int i = 0; i < PK_CHAINS; i++)
        for (int l = 0; l < 4; l++) s += a[i][l];
    return s;
}

#if defined(__x86_64__)
/* The chains are named variables and the barrier holds all 12 in registers
 * ("+v": any of the 32 vector registers): with an array and an "x" barrier on
 * three of them gcc kept the chains on the stack, so every FMA waited on a
 * store and a reload and the probe measured about one 512-bit FMA per cycle
 * on a core that issues two (the M=64 matmul reported 206-220 % of it). */
#define PK_BODY(V, SET1, FMA, ADD, STORE, N)                                          \
    volatile float vb = 0.999999f, vc = 1e-7f;                                         \
    V b = SET1(vb), c = SET1(vc);                                                      \
    V a0 = SET1(0e-3f), a1 = SET1(1e-3f), a2 = SET1(2e-3f), a3 = SET1(3e-3f);          \
    V a4 = SET1(4e-3f), a5 = SET1(5e-3f), a6 = SET1(6e-3f), a7 = SET1(7e-3f);          \
    V a8 = SET1(8e-3f), a9 = SET1(9e-3f), a10 = SET1(10e-3f), a11 = SET1(11e-3f);      \
    for (long it = 0; it < iters; it++) {                                              \
        a0 = FMA(a0, b, c), a1 = FMA(a1, b, c), a2 = FMA(a2, b, c), a3 = FMA(a3, b, c); \
        a4 = FMA(a4, b, c), a5 = FMA(a5, b, c), a6 = FMA(a6, b, c), a7 = FMA(a7, b, c); \
        a8 = FMA(a8, b, c), a9 = FMA(a9, b, c), a10 = FMA(a10, b, c), a11 = FMA(a11, b, c); \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), \
                         "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));   \
    }                                                                                  \
    a0 = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));            \
    a0 = ADD(a0, ADD(ADD(a8, a9), ADD(a10, a11)));                                     \
    float o[N];                                                                        \
    STORE(o, a0);                                                                      \
    return o[0];

__attribute__((target("avx512f"))) static float pk_avx512(long iters) {
    PK_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16)
}
__attribute__((target("avx2,fma"))) static float pk_avx2(long iters) {
    PK_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8)
}
#endif

#if defined(__aarch64__)
static float pk_neon(long iters) {
    float32x4_t a[PK_CHAINS];
    for (int i = 0; i < PK_CHAINS; i++) a[i] = vdupq_n_f32((float)i * 1e-3f);
    volatile float vb = 0.999999f, vc = 1e-7f;
    float32x4_t b = vdupq_n_f32(vb), c = vdupq_n_f32(vc);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PK_CHAINS; i++) a[i] = vfmaq_f32(c, a[i], b);
    for (int i = 1; i < PK_CHAINS; i++) a[0] = vaddq_f32(a[0], a[i]);
    return vgetq_lane_f32(a[0], 0);
}
#endif

static void pk_task(void *arg, int task, int thread) {
    pk_job *j = arg;
    float s;
    switch (j->lvl) {
#if defined(__x86_64__)
    case SIMD_AVX512: s = pk_avx512(j->iters); break;
    case SIMD_AVX2: s = pk_avx2(j->iters); break;
#endif
#if defined(__aarch64__)
    case SIMD_NEON: s = pk_neon(j->iters); break;
#endif
    default: s = pk_generic(j->iters); break;
    }
    j->sink[task & 63] += s;
}

double fmapeak_measure(simd_level lvl, int n_threads, int reps) {
    threadpool *tp = tp_create(n_threads);
    pk_job j = {.lvl = lvl, .iters = 1000};
    double per_iter = (double)PK_CHAINS * pk_lanes(lvl) * 2, best = 0;
    /* size the loop to about 20 ms on one thread */
    for (;;) {
        double t0 = clock_now_ms();
        pk_task(&j, 0, 0);
        double dt = clock_now_ms() - t0;
        if (dt > 5.0 || j.iters > (1L << 40)) {
            j.iters = (long)((double)j.iters * 20.0 / (dt > 0 ? dt : 1e-3)) + 1;
            break;
        }
        j.iters *= 4;
    }
    /* 8 tasks per thread: a worker that wakes late leaves its share to the
     * others instead of a whole task to the caller (one thread doing two
     * tasks would halve the figure) */
    int tasks = 8 * n_threads;
    j.iters = j.iters / 8 + 1;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_now_ms();
        tp_run(tp, tasks, pk_task, &j);
        double dt = (clock_now_ms() - t0) * 1e-3;
        double g = per_iter * (double)j.iters * tasks / dt / 1e9;
        if (g > best) best = g;
    }
    volatile float sink = j.sink[0];
    (void)sink;
    tp_destroy(tp);
    return best;
}
