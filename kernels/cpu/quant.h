/* quant.h — the GGML block layouts of the quantized weight types the CPU
 * kernels read (private to kernels/cpu: matmul.c dequantizes them, matmul_q8.c
 * takes integer dot products with them). Layouts as GGUF files store them. */
#ifndef SPECD_CPU_QUANT_H
#define SPECD_CPU_QUANT_H

#include <stdint.h>
#include <string.h>

#include "kernels/cpu/simd.h"

/* 32 weights: w = d * q. */
typedef struct {
    uint16_t d;
    int8_t q[32];
} __attribute__((packed)) blk_q8_0;
_Static_assert(sizeof(blk_q8_0) == 34, "Q8_0 block is 34 bytes");

/* 32 weights: w = d * (q - 8); byte l holds weight l (low nibble) and l+16. */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} __attribute__((packed)) blk_q4_0;
_Static_assert(sizeof(blk_q4_0) == 18, "Q4_0 block is 18 bytes");

/* 256 weights in 8 sub-blocks of 32: w = d*sc_j*q - dmin*m_j with 6-bit sc/m
 * packed in scales (see kq_unpack). qs: 4 groups of 32 bytes; group g holds
 * sub-block 2g in the low nibbles and 2g+1 in the high ones. Q5_K adds bit j
 * of qh[l] as bit 4 of weight l of sub-block j. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} __attribute__((packed)) blk_q4_k;
_Static_assert(sizeof(blk_q4_k) == 144, "Q4_K block is 144 bytes");

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} __attribute__((packed)) blk_q5_k;
_Static_assert(sizeof(blk_q5_k) == 176, "Q5_K block is 176 bytes");

/* 256 weights, two halves of 128 (ql + 64h, qh + 32h, scales + 8h). In a half,
 * sub-block s (32 weights) takes ql[(s&1)*32 + l] nibble s>>1 as bits 0-3 and
 * qh[l] bits 2s..2s+1 as bits 4-5; w = d * scales[16-weight group] * (q - 32). */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} __attribute__((packed)) blk_q6_k;
_Static_assert(sizeof(blk_q6_k) == 210, "Q6_K block is 210 bytes");

/* All 8 scales and 8 mins of a Q4_K/Q5_K block at once, as bytes: sub-blocks
 * 0-3 keep their 6 bits in bytes 0-3 (scales) and 4-7 (mins); 4-7 take their
 * low 4 bits from the nibbles of bytes 8-11 and their top 2 bits from the top
 * bits of bytes 0-3 (scales) and 4-7 (mins). Word-wide, a dozen operations. */
static inline void kq_unpack(const uint8_t *scales, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w[3];
    memcpy(w, scales, 12);
    uint32_t s_lo = w[0] & 0x3f3f3f3fu, m_lo = w[1] & 0x3f3f3f3fu;
    uint32_t s_hi = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    memcpy(sc, &s_lo, 4), memcpy(sc + 4, &s_hi, 4);
    memcpy(mn, &m_lo, 4), memcpy(mn + 4, &m_hi, 4);
}

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
 * all 8 rows by 4 columns. Internal type id, never in a file. */
#define SPECD_TYPE_Q8_0_R8 0x1008
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
