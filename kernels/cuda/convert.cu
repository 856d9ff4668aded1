/* convert.cu — float activations to the 16-bit type of a weight, so cuBLAS
 * multiplies bf16 x bf16 (or f16 x f16) with fp32 accumulation. */
#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ T to_half(float f);
template <> __device__ __forceinline__ __half to_half<__half>(float f) { return __float2half_rn(f); }
template <> __device__ __forceinline__ __nv_bfloat16 to_half<__nv_bfloat16>(float f) { return __float2bfloat16_rn(f); }

template <typename T> __global__ void convert_kernel(T *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = to_half<T>(src[i]);
}

extern "C" void cu_f32_to_half(cudaStream_t st, void *dst, int dtype, const float *src, int64_t n) {
    int64_t blocks = (n + 255) / 256;
    int grid = blocks > 65535 ? 65535 : (int)blocks;
    if (dtype == GGML_TYPE_F16) convert_kernel<__half><<<grid, 256, 0, st>>>((__half *)dst, src, n);
    else convert_kernel<__nv_bfloat16><<<grid, 256, 0, st>>>((__nv_bfloat16 *)dst, src, n);
    CU_CHECK_LAUNCH();
}
