/* ops.h — the CUDA kernels' launchers, one .cu file per op. Every pointer is
 * device memory; every launcher enqueues on `st` and checks the launch. Shapes
 * and semantics are those of the same-named op in kernels/backend.h. */
#ifndef SPECD_CUDA_OPS_H
#define SPECD_CUDA_OPS_H

#include "kernels/cuda/cuda_util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gemv.cu: y (M, N) = x (M, K) . W^T for 1 <= M <= CU_GEMV_MAX_M, K % 8 == 0,
 * W of GGML_TYPE_F32/F16/BF16/Q8_0 (split). Reads each weight row once for all M. */
#define CU_GEMV_MAX_M 8
void cu_gemv(cudaStream_t st, float *y, const float *x, const void *w, int wtype, int M, int K, int N);

/* convert.cu: dst (n) of GGML_TYPE_F16 or GGML_TYPE_BF16 = src (n) floats. */
void cu_f32_to_half(cudaStream_t st, void *dst, int dtype, const float *src, int64_t n);
/* dequant.cu: dst (N, K) bf16 = split Q8_0 weight (N, K). */
void cu_q8_to_bf16(cudaStream_t st, void *dst, const void *w, int N, int K);

/* getrows.cu: y (M, D) = rows ids (device, M) of table (n_rows, D) of type. */
void cu_get_rows(cudaStream_t st, float *y, const void *table, int type, const int32_t *ids, int M, int D,
                 int n_rows);
/* rmsnorm.cu */
void cu_rmsnorm(cudaStream_t st, float *y, const float *x, const float *w, int M, int D, float eps);
/* rope.cu: pos device (M), inv_freq device (n_rot/2) */
void cu_rope(cudaStream_t st, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E, int n_rot,
             int neox);
/* add.cu: x (M, D) += y; bias form: x (M, D) += b (D) on every row */
void cu_add(cudaStream_t st, float *x, const float *y, int64_t n);
/* silu_mul.cu */
void cu_silu_mul(cudaStream_t st, float *g, const float *u, int64_t n);
/* kv_write.cu: rows of k, v (M, kv_dim) to each sequence's cache positions,
 * as halves when f16
 * (blocks laid out (Hkv, B, E), see kv_layer_view); row_seq (M) maps a batch
 * row to its sequence. */
void cu_kv_write(cudaStream_t st, void *kc, void *vc, int f16, size_t block_stride, int block_size, const float *k,
                 const float *v, const cu_seq *seqs, const int32_t *row_seq, int M, int kv_dim, int E);
/* attention.cu; kc, vc: float, or IEEE half when f16 (kv_layer_view.type) */
void cu_attention(cudaStream_t st, float *out, const float *q, const void *kc, const void *vc, int f16,
                  size_t block_stride, int block_size, const cu_seq *seqs, const int32_t *row_seq, int M, int H,
                  int Hkv, int E);

#ifdef __cplusplus
}
#endif

#endif
