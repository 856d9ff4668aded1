/* dequant.cu — a split Q8_0 weight (N*K int8, then N*K/32 f16 scales) to bf16,
 * so the prefill/verify GEMMs of Q8_0 models run through cuBLAS. */
#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__global__ void q8_to_bf16_kernel(__nv_bfloat16 *dst, const int8_t *qs, const __half *sc, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(__half2float(sc[i / 32]) * (float)qs[i]);
}

extern "C" void cu_q8_to_bf16(cudaStream_t st, void *dst, const void *w, int N, int K) {
    int64_t n = (int64_t)N * K;
    const int8_t *qs = (const int8_t *)w;
    int64_t blocks = (n + 255) / 256;
    int grid = blocks > 65535 ? 65535 : (int)blocks;
    q8_to_bf16_kernel<<<grid, 256, 0, st>>>((__nv_bfloat16 *)dst, qs, (const __half *)(qs + n), n);
    CU_CHECK_LAUNCH();
}
