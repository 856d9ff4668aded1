/* getrows.cu — embedding lookup: y (M, D) = dequantized rows ids[m] of a table. */
#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__global__ void get_rows_kernel(float *y, const void *table, int type, const int32_t *ids, int D, int n_rows) {
    int m = blockIdx.x;
    int64_t r = ids[m];
    float *out = y + (size_t)m * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v;
        switch (type) {
        case GGML_TYPE_F32: v = ((const float *)table)[r * D + d]; break;
        case GGML_TYPE_F16: v = __half2float(((const __half *)table)[r * D + d]); break;
        case GGML_TYPE_BF16: v = __bfloat162float(((const __nv_bfloat16 *)table)[r * D + d]); break;
        default: { /* GGML_TYPE_Q8_0 split over the whole (n_rows, D) table */
            const int8_t *qs = (const int8_t *)table;
            const __half *sc = (const __half *)(qs + (size_t)n_rows * D);
            v = __half2float(sc[(r * D + d) / 32]) * (float)qs[r * D + d];
        }
        }
        out[d] = v;
    }
}

extern "C" void cu_get_rows(cudaStream_t st, float *y, const void *table, int type, const int32_t *ids, int M, int D,
                            int n_rows) {
    if (M <= 0) return;
    get_rows_kernel<<<M, 256, 0, st>>>(y, table, type, ids, D, n_rows);
    CU_CHECK_LAUNCH();
}
