/* gemv.cu — small-M matmul (1..8 rows: decode, the draft's steps and the
 * γ+1-row verification), where cuBLAS is slow. Memory-bound: every weight byte
 * is read once; a 128-thread block owns ROWS output rows and splits K over all
 * its threads in 8-element chunks (16-byte loads for 16-bit weights), keeping
 * the x chunk in registers for all ROWS rows; partial sums are reduced through
 * warp shuffles and shared memory. */
#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define GEMV_THREADS 128

/* 8 weights starting at element k of row n, as floats. */
template <int WT>
__device__ __forceinline__ void load8(float *o, const void *w, int N, int K, int n, int k);

template <> __device__ __forceinline__ void load8<GGML_TYPE_F32>(float *o, const void *w, int N, int K, int n, int k) {
    const float4 *p = (const float4 *)((const float *)w + (size_t)n * K + k);
    float4 a = __ldg(p), b = __ldg(p + 1);
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}

template <> __device__ __forceinline__ void load8<GGML_TYPE_F16>(float *o, const void *w, int N, int K, int n, int k) {
    uint4 u = __ldg((const uint4 *)((const __half *)w + (size_t)n * K + k));
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

template <> __device__ __forceinline__ void load8<GGML_TYPE_BF16>(float *o, const void *w, int N, int K, int n, int k) {
    uint4 u = __ldg((const uint4 *)((const __nv_bfloat16 *)w + (size_t)n * K + k));
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

template <> __device__ __forceinline__ void load8<GGML_TYPE_Q8_0>(float *o, const void *w, int N, int K, int n, int k) {
    const int8_t *qs = (const int8_t *)w;
    const __half *sc = (const __half *)(qs + (size_t)N * K);
    uint2 u = __ldg((const uint2 *)(qs + (size_t)n * K + k));
    float d = __half2float(sc[(size_t)n * (K / 32) + k / 32]);
    const int8_t *q = (const int8_t *)&u;
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = d * (float)q[i];
}

template <int M, int ROWS, int WT>
__global__ void __launch_bounds__(GEMV_THREADS) gemv_kernel(float *__restrict__ y, const float *__restrict__ x,
                                                              const void *__restrict__ w, int K, int N) {
    int n0 = blockIdx.x * ROWS;
    float acc[ROWS][M];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] = 0.0f;

    for (int k = threadIdx.x * 8; k < K; k += GEMV_THREADS * 8) {
        float wv[ROWS][8];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            int n = n0 + r < N ? n0 + r : N - 1; /* tail rows recompute the last row; never stored */
            load8<WT>(wv[r], w, N, K, n, k);
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float4 *xp = (const float4 *)(x + (size_t)m * K + k);
            float4 a = __ldg(xp), b = __ldg(xp + 1);
            float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int i = 0; i < 8; i++) acc[r][m] = fmaf(wv[r][i], xv[i], acc[r][m]);
        }
    }

    __shared__ float part[GEMV_THREADS / 32][ROWS][M];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = acc[r][m];
#pragma unroll
            for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) part[warp][r][m] = v;
        }
    __syncthreads();
    for (int t = threadIdx.x; t < ROWS * M; t += GEMV_THREADS) {
        int r = t / M, m = t % M;
        float v = 0.0f;
#pragma unroll
        for (int wi = 0; wi < GEMV_THREADS / 32; wi++) v += part[wi][r][m];
        if (n0 + r < N) y[(size_t)m * N + n0 + r] = v;
    }
}

template <int M, int ROWS>
static void launch_rows(cudaStream_t st, float *y, const float *x, const void *w, int wtype, int K, int N) {
    dim3 grid((N + ROWS - 1) / ROWS);
    switch (wtype) {
    case GGML_TYPE_F32: gemv_kernel<M, ROWS, GGML_TYPE_F32><<<grid, GEMV_THREADS, 0, st>>>(y, x, w, K, N); break;
    case GGML_TYPE_F16: gemv_kernel<M, ROWS, GGML_TYPE_F16><<<grid, GEMV_THREADS, 0, st>>>(y, x, w, K, N); break;
    case GGML_TYPE_BF16: gemv_kernel<M, ROWS, GGML_TYPE_BF16><<<grid, GEMV_THREADS, 0, st>>>(y, x, w, K, N); break;
    case GGML_TYPE_Q8_0: gemv_kernel<M, ROWS, GGML_TYPE_Q8_0><<<grid, GEMV_THREADS, 0, st>>>(y, x, w, K, N); break;
    default: cu_die(__FILE__, __LINE__, "cu_gemv", "weight type without a kernel");
    }
}

/* ROWS per block: 2 for 1-2 rows of x (more blocks in flight), 4 above (the x
 * chunk, re-read from L1 per block, is shared by more weight rows). */
template <int M>
static void launch_m(cudaStream_t st, float *y, const float *x, const void *w, int wtype, int K, int N) {
    if (M <= 2) launch_rows<M, 2>(st, y, x, w, wtype, K, N);
    else launch_rows<M, 4>(st, y, x, w, wtype, K, N);
}

extern "C" void cu_gemv(cudaStream_t st, float *y, const float *x, const void *w, int wtype, int M, int K, int N) {
    if (K % 8) cu_die(__FILE__, __LINE__, "cu_gemv", "K is not a multiple of 8");
    switch (M) {
    case 1: launch_m<1>(st, y, x, w, wtype, K, N); break;
    case 2: launch_m<2>(st, y, x, w, wtype, K, N); break;
    case 3: launch_m<3>(st, y, x, w, wtype, K, N); break;
    case 4: launch_m<4>(st, y, x, w, wtype, K, N); break;
    case 5: launch_m<5>(st, y, x, w, wtype, K, N); break;
    case 6: launch_m<6>(st, y, x, w, wtype, K, N); break;
    case 7: launch_m<7>(st, y, x, w, wtype, K, N); break;
    case 8: launch_m<8>(st, y, x, w, wtype, K, N); break;
    default: cu_die(__FILE__, __LINE__, "cu_gemv", "M outside 1..8");
    }
    CU_CHECK_LAUNCH();
}
