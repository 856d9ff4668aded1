/* rmsnorm.cu — y = x / sqrt(mean(x^2) + eps) * w, one block per row; the sum
 * of squares is accumulated in double like the CPU reference. */
#include "kernels/cuda/ops.h"

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int D, float eps) {
    const float *xr = x + (size_t)blockIdx.x * D;
    float *yr = y + (size_t)blockIdx.x * D;
    double ss = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) ss += (double)xr[i] * xr[i];
    __shared__ double part[32];
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        double v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    float s = (float)(1.0 / sqrt(part[0] / D + eps));
    for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * s * w[i];
}

extern "C" void cu_rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int M, int D, float eps) {
    if (M <= 0) return;
    /* 4 elements a thread (a 4096-wide row: 1024 threads), so each thread's
     * chain of loads and double adds is short; at least one warp */
    int threads = (D / 4 + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
    rmsnorm_kernel<<<M, threads, 0, st>>>(y, x, w, D, eps);
    CU_CHECK_LAUNCH();
}
