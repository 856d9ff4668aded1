/* matmul.h — CPU small-M GEMM over F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K
 * weights and the row dequantizers it shares with get_rows. Each weight row is
 * read once for all M input rows: a (γ+1)-row verification costs about one
 * decode step. Quantized weights are decoded 32 at a time inside the tile,
 * never materialised as F32 for a whole matrix.
 * Size letters: M input rows, K input features, N output features. */
#ifndef SPECD_CPU_MATMUL_H
#define SPECD_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/simd.h"

/* Computes rows [n0, n1) of y (M, ldy) = x (M, K) . W^T for one thread.
 * scratch holds at least 4*K floats (thread-private). n0 and n1 are multiples
 * of 4 except n1 == N. */
void mm_rows(simd_level lvl, float *y, int ldy, const float *x, const uint8_t *w, int wtype,
             int M, int K, int n0, int n1, float *scratch);

/* Dequantizes one row of K weights of wtype into out (K). */
void mm_dequant_row(float *out, const uint8_t *row, int wtype, int K);

/* Bytes of one row of K weights of wtype (0 if unsupported / not a block multiple). */
size_t mm_row_bytes(int wtype, int K);

#endif
