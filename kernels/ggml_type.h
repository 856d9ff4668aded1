/* ggml_type.h — the tensor element types specd computes on, owned by the low
 * layer: ggml's type ids (as GGUF files number them), their names, block sizes
 * and row bytes, the block layouts of the quantized types, and the reference
 * row quantizer/dequantizer every other part checks itself against.
 *
 * It is not a kernel: the reference pair is plain scalar C, exact and slow
 * enough for tools, tests and embedding-row lookups, never a matmul. Included
 * by engine/gguf/gguf.h, kernels/cpu and kernels/cuda (C and CUDA C++). No state:
 * every function may be called from any thread. */
#ifndef SPECD_GGML_TYPE_H
#define SPECD_GGML_TYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#define GGML_TYPE_STATIC_ASSERT static_assert
#else
#define GGML_TYPE_STATIC_ASSERT _Static_assert
#endif

/* Tensor element types (ggml numbering). Only the ones specd can compute with
 * are accepted by the model loader; the tables know block sizes of more so a
 * reader can name them in errors and validate sizes. */
typedef enum {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_I8 = 24, GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26, GGML_TYPE_I64 = 27, GGML_TYPE_F64 = 28, GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40
} ggml_type;

/* Internal type ids, above the ggml range and never in a file: the layouts a
 * backend's weight() hook repacks a matrix into (see kernels/cpu/quant.h). */
#define SPECD_TYPE_Q8_0_R8 0x1008 /* Q8_0 repacked in groups of 8 rows (CPU) */
#define SPECD_TYPE_Q4_K_R8 0x100C /* Q4_K repacked in groups of 8 rows (CPU, x86 SIMD levels) */
#define SPECD_TYPE_Q5_K_R8 0x100D /* Q5_K repacked in groups of 8 rows (CPU, x86 SIMD levels) */
#define SPECD_TYPE_Q6_K_R8 0x100E /* Q6_K repacked in groups of 8 rows (CPU, x86 SIMD levels) */

/* Type facts. Unknown types give 0 (ggml_type_name: NULL). Names are ggml's
 * ("f32", "bf16", "q8_0", "q4_K"). */
const char *ggml_type_name(int type);
int ggml_type_from_name(const char *name); /* -1 if unknown (case-insensitive: "f16", "Q8_0") */
uint32_t ggml_blck_size(int type);
uint32_t ggml_type_size(int type);          /* bytes per block */
/* Bytes of a row of ne0 elements; 0 if ne0 is not a multiple of the block size. */
uint64_t ggml_row_size(int type, uint64_t ne0);

/* ---- block layouts (as GGUF files store them) ------------------------- */

/* 32 weights: w = d * q. */
typedef struct {
    uint16_t d;
    int8_t q[32];
} __attribute__((packed)) blk_q8_0;
GGML_TYPE_STATIC_ASSERT(sizeof(blk_q8_0) == 34, "Q8_0 block is 34 bytes");

/* 32 weights: w = d * (q - 8); byte l holds weight l (low nibble) and l+16. */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} __attribute__((packed)) blk_q4_0;
GGML_TYPE_STATIC_ASSERT(sizeof(blk_q4_0) == 18, "Q4_0 block is 18 bytes");

/* 256 weights in 8 sub-blocks of 32: w = d*sc_j*q - dmin*m_j with 6-bit sc/m
 * packed in scales (see kq_unpack). qs: 4 groups of 32 bytes; group g holds
 * sub-block 2g in the low nibbles and 2g+1 in the high ones. Q5_K adds bit j
 * of qh[l] as bit 4 of weight l of sub-block j. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} __attribute__((packed)) blk_q4_k;
GGML_TYPE_STATIC_ASSERT(sizeof(blk_q4_k) == 144, "Q4_K block is 144 bytes");

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} __attribute__((packed)) blk_q5_k;
GGML_TYPE_STATIC_ASSERT(sizeof(blk_q5_k) == 176, "Q5_K block is 176 bytes");

/* 256 weights, two halves of 128 (ql + 64h, qh + 32h, scales + 8h). In a half,
 * sub-block s (32 weights) takes ql[(s&1)*32 + l] nibble s>>1 as bits 0-3 and
 * qh[l] bits 2s..2s+1 as bits 4-5; w = d * scales[16-weight group] * (q - 32). */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} __attribute__((packed)) blk_q6_k;
GGML_TYPE_STATIC_ASSERT(sizeof(blk_q6_k) == 210, "Q6_K block is 210 bytes");

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

/* ---- reference conversion --------------------------------------------- */

/* The types the reference pair converts: F32, F16, BF16, Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K (what the CPU backend computes with). */
bool ggml_type_convertible(int type);

/* n floats of src -> one row of type at dst (ggml_row_size(type, n) bytes).
 * f16/bf16 round to nearest even; Q8_0: d = max|w|/127 stored as f16, q =
 * round(w / d) with the f32 d; Q4_0/Q4_K/Q5_K/Q6_K as their comments in
 * ggml_type.c say. Returns false on a type ggml_type_convertible refuses or an
 * n that is not a multiple of the block size (dst untouched). */
bool ggml_quantize_row(void *dst, int type, const float *src, uint64_t n);

/* One row of n weights of type at src -> n floats: exactly the values the CPU
 * kernels compute with. Same refusals as ggml_quantize_row. */
bool ggml_dequantize_row(float *dst, int type, const void *src, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif
