/* kv_write.cu — the new rows' keys and values into their sequences' cache
 * blocks. Positions come from the staged descriptors (not launch arguments),
 * so a captured graph replays correctly at any cache length. */
#include "kernels/cuda/ops.h"

#include <cuda_fp16.h>

/* a float as a cache element: F32 as is, F16 rounded to nearest even (the
 * CPU's rule, half.h) */
__device__ static inline void kv_st(float *p, size_t i, float x) { p[i] = x; }
__device__ static inline void kv_st(__half *p, size_t i, float x) { p[i] = __float2half_rn(x); }

/* block layout (Hkv, B, E): feature d of position p is at head d / E's run */
template <typename T>
__global__ void kv_write_kernel(T *kc, T *vc, size_t block_stride, int block_size, const float *k,
                                const float *v, const cu_seq *seqs, const int32_t *row_seq, int kv_dim, int E) {
    int r = blockIdx.x;
    const cu_seq *s = &seqs[row_seq[r]];
    int p = s->n_past + (r - s->row0);
    size_t off = (size_t)s->blocks[p / block_size] * block_stride + (size_t)(p % block_size) * E;
    for (int d = threadIdx.x; d < kv_dim; d += blockDim.x) {
        size_t at = off + (size_t)(d / E) * block_size * E + d % E;
        kv_st(kc, at, k[(size_t)r * kv_dim + d]);
        kv_st(vc, at, v[(size_t)r * kv_dim + d]);
    }
}

extern "C" void cu_kv_write(cudaStream_t st, void *kc, void *vc, int f16, size_t block_stride, int block_size,
                            const float *k, const float *v, const cu_seq *seqs, const int32_t *row_seq, int M,
                            int kv_dim, int E) {
    if (M <= 0) return;
    if (f16)
        kv_write_kernel<__half><<<M, 256, 0, st>>>((__half *)kc, (__half *)vc, block_stride, block_size, k, v, seqs,
                                                   row_seq, kv_dim, E);
    else
        kv_write_kernel<float><<<M, 256, 0, st>>>((float *)kc, (float *)vc, block_stride, block_size, k, v, seqs,
                                                  row_seq, kv_dim, E);
    CU_CHECK_LAUNCH();
}
