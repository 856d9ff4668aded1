/* add.cu — x += y, element-wise. */
#include "kernels/cuda/ops.h"

__global__ void add_kernel(float *x, const float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

extern "C" void cu_add(cudaStream_t st, float *x, const float *y, int64_t n) {
    if (n <= 0) return;
    int64_t blocks = (n + 255) / 256;
    add_kernel<<<blocks > 4096 ? 4096 : (int)blocks, 256, 0, st>>>(x, y, n);
    CU_CHECK_LAUNCH();
}
