/* matmul.h — CPU small-M GEMM over F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K
 * weights and the row dequantizers it shares with get_rows. Each weight row is
 * read once for all M input rows: a (γ+1)-row verification costs about one
 * decode step. Quantized weights are never widened to float: they take integer
 * dot products with 8-bit activations (matmul_q8.c). A row's result does not
 * depend on M, the tile or the thread split.
 * Size letters: M input rows, K input features, N output features. */
#ifndef SPECD_CPU_MATMUL_H
#define SPECD_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/simd.h"

/* Computes rows [n0, n1) of y (M, ldy) = x (M, K) . W^T for one thread.
 * n0 and n1 are multiples of 4 except n1 == N (of 8 for Q8_0 and the K-quants
 * repacked by the CPU backend's weight(), SPECD_TYPE_*_R8 in quant.h). For the integer-dot types (mm_q8_path) the kernel reads
 * xq, the rows of x quantized by mm_quantize_x, and not x. */
void mm_rows(simd_level lvl, float *y, int ldy, const float *x, const uint8_t *xq, const uint8_t *w, int wtype,
             int M, int K, int n0, int n1);

/* The integer-dot path (matmul_q8.c), used for Q8_0, Q4_0, Q4_K, Q5_K and
 * Q6_K weights at every M: each row of x is quantized per 32 values to int8
 * (scale amax/127, round to nearest even) and a block's dot product is exact
 * integer arithmetic, scaled once per block, as llama.cpp does. The result
 * differs from float math by the activation rounding (about 1e-3 relative);
 * it is the same for any M, tile or thread split. */
int mm_q8_path(int wtype);
/* Bytes of one quantized row of K values (K a multiple of 32), 64-aligned. */
size_t mm_qx_row_bytes(int K);
/* Quantizes M rows of x (M, K) into xq (M rows of mm_qx_row_bytes(K)); the
 * same bytes on every SIMD path. */
void mm_quantize_x(simd_level lvl, uint8_t *xq, const float *x, int M, int K);

/* Dequantizes one row of K weights of wtype into out (K). */
void mm_dequant_row(float *out, const uint8_t *row, int wtype, int K);

/* Bytes of one row of K weights of wtype (0 if unsupported / not a block multiple). */
size_t mm_row_bytes(int wtype, int K);

#endif
