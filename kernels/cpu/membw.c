/* membw.c — memory read bandwidth probe (see membw.h). Each thread sums its
 * slice with wide integer adds; the sum is kept so the reads cannot be elided. */
#include <stddef.h>
#include "kernels/cpu/membw.h"
#include "kernels/clock.h"
#include "kernels/cpu/threadpool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *buf;
    size_t n;          /* uint64 words */
    int tasks;
    uint64_t sums[64];
} bw_job;

#if defined(__x86_64__)
#include <immintrin.h>
/* The widest loads the CPU has, so the probe measures the memory, not the core.
 * Each thread reads its slice as 4 concurrent linear streams (as the matmul
 * kernels do): one stream per core leaves DRAM bandwidth unused on some CPUs,
 * which would understate the roofline. */
__attribute__((target("avx512f"))) static uint64_t bw_sum_avx512(const uint64_t *p, size_t n) {
    size_t q = n / 4 / 16 * 16;
    const uint64_t *p0 = p, *p1 = p + q, *p2 = p + 2 * q, *p3 = p + 3 * q;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < q; i += 16) {
        a0 = _mm512_add_epi64(a0, _mm512_add_epi64(_mm512_loadu_si512(p0 + i), _mm512_loadu_si512(p0 + i + 8)));
        a1 = _mm512_add_epi64(a1, _mm512_add_epi64(_mm512_loadu_si512(p1 + i), _mm512_loadu_si512(p1 + i + 8)));
        a2 = _mm512_add_epi64(a2, _mm512_add_epi64(_mm512_loadu_si512(p2 + i), _mm512_loadu_si512(p2 + i + 8)));
        a3 = _mm512_add_epi64(a3, _mm512_add_epi64(_mm512_loadu_si512(p3 + i), _mm512_loadu_si512(p3 + i + 8)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}
#endif

static void bw_task(void *arg, int task, int thread) {
    bw_job *j = arg;
    size_t per = j->n / (size_t)j->tasks;
    const uint64_t *p = j->buf + per * (size_t)task;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        j->sums[task & 63] += bw_sum_avx512(p, per);
        return;
    }
#endif
    uint64_t acc[8] = {0};
    for (size_t i = 0; i + 8 <= per; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += p[i + l];
    uint64_t s = 0;
    for (int l = 0; l < 8; l++) s += acc[l];
    j->sums[task & 63] += s;
}

struct membw {
    uint64_t *buf;
    size_t bytes;
    threadpool *tp;
    bw_job job;
};

membw *membw_create(int n_threads, size_t bytes) {
    membw *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->buf = malloc(bytes);
    if (!b->buf) {
        free(b);
        return NULL;
    }
    /* distinct contents per page: a buffer of identical pages can be merged
     * by the host (KSM and the like) and then read from cache, not DRAM */
    for (size_t i = 0; i < bytes / 8; i++) b->buf[i] = i * 0x9E3779B97F4A7C15ull;
    b->bytes = bytes;
    b->tp = tp_create(n_threads);
    b->job = (bw_job){b->buf, bytes / 8, n_threads, {0}};
    return b;
}

double membw_measure(membw *b, int passes, int best) {
    double top = 0, t_all = 0;
    for (int r = 0; r < passes; r++) {
        double t0 = (clock_now_ms() * 1e-3);
        tp_run(b->tp, b->job.tasks, bw_task, &b->job);
        double dt = (clock_now_ms() * 1e-3) - t0;
        t_all += dt;
        if ((double)b->bytes / dt / 1e9 > top) top = (double)b->bytes / dt / 1e9;
    }
    if (best) return top;
    return t_all > 0 ? (double)b->bytes * passes / t_all / 1e9 : 0;
}

void membw_destroy(membw *b) {
    if (!b) return;
    volatile uint64_t sink = b->job.sums[0];
    (void)sink;
    tp_destroy(b->tp);
    free(b->buf);
    free(b);
}
