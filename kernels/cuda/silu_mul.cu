/* silu_mul.cu — g = silu(g) * u, the SwiGLU gate. */
#include "kernels/cuda/ops.h"

__global__ void silu_mul_kernel(float *g, const float *u, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = g[i];
        g[i] = a / (1.0f + expf(-a)) * u[i];
    }
}

extern "C" void cu_silu_mul(cudaStream_t st, float *g, const float *u, int64_t n) {
    if (n <= 0) return;
    int64_t blocks = (n + 255) / 256;
    silu_mul_kernel<<<blocks > 4096 ? 4096 : (int)blocks, 256, 0, st>>>(g, u, n);
    CU_CHECK_LAUNCH();
}
