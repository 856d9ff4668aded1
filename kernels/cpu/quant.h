/* quant.h — what the CPU kernels share about the quantized weight types
 * (private to kernels/cpu): views into Q4_K/Q5_K blocks, the repacked Q8_0 x8
 * and K-quant x8 layouts, the tile dispatch. The file layouts themselves live in
 * kernels/ggml_type.h. */
#ifndef SPECD_CPU_QUANT_H
#define SPECD_CPU_QUANT_H

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/simd.h"
#include "kernels/ggml_type.h" /* the block layouts, kq_unpack, SPECD_TYPE_Q8_0_R8 */

/* Where Q4_K/Q5_K super-block i of a row keeps its fields: the two types
 * share d, dmin and scales; Q5_K adds qh (NULL for Q4_K). */
typedef struct {
    uint16_t d, dmin;
    const uint8_t *scales, *qs, *qh;
} kq_view;

static inline kq_view kq_at(const uint8_t *row, int q5, int i) {
    kq_view v;
    if (q5) {
        const blk_q5_k *b = (const blk_q5_k *)row + i;
        memcpy(&v.d, &b->d, 2), memcpy(&v.dmin, &b->dmin, 2);
        v.scales = b->scales, v.qs = b->qs, v.qh = b->qh;
    } else {
        const blk_q4_k *b = (const blk_q4_k *)row + i;
        memcpy(&v.d, &b->d, 2), memcpy(&v.dmin, &b->dmin, 2);
        v.scales = b->scales, v.qs = b->qs, v.qh = NULL;
    }
    return v;
}

/* Q8_0 repacked for the CPU kernels ("Q8_0 x8", made by the backend's weight()
 * hook from a Q8_0 matrix): rows in groups of 8 (the last group padded with
 * zero rows), a group's 32-column blocks one after another, each block 272
 * bytes: the 8 rows' fp16 scales, then 8 runs of 32 bytes, run j holding
 * columns 4j..4j+3 of rows 0..7 (4 bytes per row), each weight stored + 128 as
 * an unsigned byte (q ^ 0x80): vpdpbusd takes the weights as its unsigned
 * operand as they are, and one 32-byte load feeds one vpdpbusd that advances
 * all 8 rows by 4 columns. Type id SPECD_TYPE_Q8_0_R8 (kernels/ggml_type.h),
 * never in a file. */
#define R8_BLOCK_BYTES 272

/* Bytes of the repacked form of an N x K Q8_0 matrix (K a multiple of 32). */
size_t mm_r8_bytes(int N, int K);
/* Repacks N rows of K Q8_0 weights (src, row after row) into dst. */
void mm_r8_repack(uint8_t *dst, const uint8_t *src, int N, int K);
/* The same for groups [g0, g1) of 8 rows only (threads split a matrix). */
void mm_r8_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1);
/* Dequantizes row n of a repacked matrix into out (K). */
void mm_r8_dequant_row(float *out, const uint8_t *w, int n, int K);
/* Rows [n0, n1) of y (n0 a multiple of 8; rows past n1 are not written). */
void mmq_rows_r8(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                 int n1);

/* Q4_K repacked for the SIMD kernels ("Q4_K x8", made by the backend's weight()
 * hook at the AVX2, AVX-512 and NEON levels): rows in groups of 8 (the last group
 * padded with zero rows), a group's 256-column super-blocks one after another,
 * each RK_BLOCK_BYTES bytes:
 *   0    d[8]        the 8 rows' fp16 d
 *   16   ndmin[8]    the 8 rows' fp16 -dmin (negated: exact)
 *   32   sc[8][8]    sub-block j's 6-bit scale of row r at 32 + 8 j + r
 *   96   mn[8][8]    the mins, the same way
 *   160  qs          pair p (sub-blocks 2p, 2p+1) run i (columns 4i..4i+3 of
 *                    both) at 160 + 256 p + 32 i: row r's 4 bytes at 4 r, each
 *                    byte the file's qs[32 p + 4 i + t] (sub-block 2p in the low
 *                    nibble, 2p+1 in the high one)
 * so one 32-byte load and a mask (or a shift) feed one dot product that
 * advances all 8 rows by 4 columns of a sub-block (no horizontal adds), and
 * the scales are read as bytes. Q5_K x8 (SPECD_TYPE_Q5_K_R8) is the same
 * with the file's qh bytes after them, in the same runs:
 *   1184 qh          run i at 1184 + 32 i: row r's qh[4 i + t] at 4 r + t (bit j:
 *                    bit 4 of column 4 i + t of sub-block j)
 * The kernel does the same integer sums and float steps as the file layout's
 * tiles at the same level, so the results are bit-identical. Type ids
 * SPECD_TYPE_Q4_K_R8 and SPECD_TYPE_Q5_K_R8, never in a file. */
#define RK_BLOCK_BYTES 1184
#define RK5_BLOCK_BYTES 1440

/* Bytes of the repacked form of an N x K Q4_K (q5: Q5_K) matrix (K a multiple of 256). */
size_t mm_rk_bytes(int N, int K, int q5);
/* Repacks groups [g0, g1) of 8 rows of an N x K Q4_K (q5: Q5_K) matrix (src, row after row) into dst. */
void mm_rk_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1, int q5);
void mm_rk_repack(uint8_t *dst, const uint8_t *src, int N, int K, int q5);
/* Dequantizes row n of a repacked matrix into out (K): the values ggml's dequantizer gives. */
void mm_rk_dequant_row(float *out, const uint8_t *w, int n, int K, int q5);
/* Rows [n0, n1) of y (n0 a multiple of 8; rows past n1 are not written). */
void mmq_rows_rk(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                 int n1, int q5);

/* Q6_K repacked the same way ("Q6_K x8", SPECD_TYPE_Q6_K_R8), each group's
 * super-block Q6X_BLOCK_BYTES bytes (as many as the file's 8 blocks):
 *   0     d[8]        the 8 rows' fp16 d
 *   16    sc[16][8]   16-weight group u's int8 scale of row r at 16 + 8 u + r
 *   144   ql          file byte run c (ql[32 c ..], c 0..3) run i at
 *                     144 + 256 c + 32 i: row r's ql[32 c + 4 i + t] at 4 r + t
 *   1168  qh          half h (qh[32 h ..]) run i at 1168 + 256 h + 32 i, the same
 * Sub-block j = 4 h + s (the file's order) takes its low 4 bits from ql byte
 * run c = 2 h + (s & 1) (high nibble when s >= 2) and bits 4-5 from qh half h
 * at bit 2 s. The kernel does the file layout's sums (weights + 32, less 32
 * times the x half sums) and float steps: bit-identical results. */
#define Q6X_BLOCK_BYTES 1680

size_t mm_q6x_bytes(int N, int K);
void mm_q6x_repack_groups(uint8_t *dst, const uint8_t *src, int N, int K, int g0, int g1);
void mm_q6x_repack(uint8_t *dst, const uint8_t *src, int N, int K);
void mm_q6x_dequant_row(float *out, const uint8_t *w, int n, int K);
void mmq_rows_q6x(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K, int n0,
                  int n1);

/* Calls TILE(wtype, mr, nr, ...) with mr (1..5, the row tiles of matmul.c and
 * matmul_q8.c) and nr (4: a tile of 4 strided weight rows; else 1: a leftover
 * row) as constants, so each tile is instantiated with its loops unrolled and
 * its accumulators in registers. Expects wtype, mr and nr in scope; the float
 * and the integer-dot tiles share it (they differ only in the arguments). */
#define MM_TILE_DISPATCH_M(TILE, NRC, ...)            \
    switch (mr) {                                     \
    case 1: TILE(wtype, 1, NRC, __VA_ARGS__); break;  \
    case 2: TILE(wtype, 2, NRC, __VA_ARGS__); break;  \
    case 3: TILE(wtype, 3, NRC, __VA_ARGS__); break;  \
    case 4: TILE(wtype, 4, NRC, __VA_ARGS__); break;  \
    default: TILE(wtype, 5, NRC, __VA_ARGS__); break; \
    }
#define MM_TILE_DISPATCH(TILE, ...)                   \
    if (nr == 4) {                                    \
        MM_TILE_DISPATCH_M(TILE, 4, __VA_ARGS__)      \
    } else {                                          \
        MM_TILE_DISPATCH_M(TILE, 1, __VA_ARGS__)      \
    }

/* matmul_q8.c: rows [n0, n1) of y for the integer-dot types (mm_q8_path),
 * from activations quantized by mm_quantize_x. */
void mmq_rows(simd_level lvl, float *y, int ldy, const uint8_t *xq, const uint8_t *w, int wtype, int M, int K,
              int n0, int n1);

#endif
