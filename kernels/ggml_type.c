/* ggml_type.c — the type tables (names, block sizes, bytes per block) and the
 * scalar reference quantizer/dequantizer of the types specd computes with.
 * Not a kernel: the matmuls read the blocks in place (kernels/cpu/matmul*.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasecmp when built outside meson (fuzzer) */
#endif
#include "kernels/ggml_type.h"

#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "kernels/half.h"

/* ---- type facts ------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t blck;
    uint32_t size;
} type_info;

static const type_info k_types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},
    [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292},
    [GGML_TYPE_I8] = {"i8", 1, 1},
    [GGML_TYPE_I16] = {"i16", 1, 2},
    [GGML_TYPE_I32] = {"i32", 1, 4},
    [GGML_TYPE_I64] = {"i64", 1, 8},
    [GGML_TYPE_F64] = {"f64", 1, 8},
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
};

const char *ggml_type_name(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT) return NULL;
    return k_types[type].name;
}

int ggml_type_from_name(const char *name)
{
    if (!name) return -1;
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (k_types[t].name && strcasecmp(k_types[t].name, name) == 0) return t;
    return -1;
}

uint32_t ggml_blck_size(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT) return 0;
    return k_types[type].blck;
}

uint32_t ggml_type_size(int type)
{
    if (type < 0 || type >= GGML_TYPE_COUNT) return 0;
    return k_types[type].size;
}

uint64_t ggml_row_size(int type, uint64_t ne0)
{
    uint32_t bs = ggml_blck_size(type), ts = ggml_type_size(type);
    if (!bs || !ts || ne0 % bs) return 0;
    uint64_t blocks = ne0 / bs;
    if (blocks > UINT64_MAX / ts) return 0;
    return blocks * ts;
}

bool ggml_type_convertible(int type)
{
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 ||
           type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_K ||
           type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K;
}

/* ---- quantize ----------------------------------------------------------- */

/* Round half away from zero without the libm call; |v| must be < 2^31. */
static inline int round_int(float v)
{
    int t = (int)v;
    float frac = v - (float)t;
    return t + (frac >= 0.5f) - (frac <= -0.5f);
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline void put_f16(uint8_t *p, float f)
{
    uint16_t h = f32_to_fp16(f);
    memcpy(p, &h, 2);
}

static inline float get_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_to_f32(h);
}

/* Q8_0 (34 bytes / 32): d = max|w| / 127 (f16), q = round(w / d) with the f32 d. */
static void q8_0_block(uint8_t *blk, const float *x)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* not fmaxf: that is a libm call here */
    }
    float dd = amax / 127.0f;
    float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    put_f16(blk, dd);
    /* |x * id| <= 127.5, so round_int's truncation and difference are exact */
    for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)round_int(x[i] * id);
}

/* Q4_0 (18 bytes / 32): the value of largest magnitude maps to q = 0 (-8),
 * d = that value / -8 (f16); q = clamp(round(w / d) + 8, 0, 15) using the
 * stored d. Byte l holds weight l in the low nibble and l+16 in the high one. */
static void q4_0_block(uint8_t *blk, const float *x)
{
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), vmax = x[i];
    put_f16(blk, vmax / -8.0f);
    float d = get_f16(blk), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < 16; l++) {
        int lo = clampi(round_int(x[l] * id) + 8, 0, 15);
        int hi = clampi(round_int(x[l + 16] * id) + 8, 0, 15);
        blk[2 + l] = (uint8_t)(lo | (hi << 4));
    }
}

/* Q4_K (144 bytes / 256) and Q5_K (176): per sub-block of 32, min/max fit
 * w ~ s_j * q - m_j with m_j = -min(0, min w) and s_j = (max w + m_j) / qmax;
 * then d = max s_j / 63 and dmin = max m_j / 63 (f16), sc_j = round(s_j / d),
 * mn_j = round(m_j / dmin) (6 bits), and q = round((w + dmin*mn_j) / (d*sc_j))
 * clamped to [0, qmax] with the stored, rounded scales. Packing: sc/mn of
 * sub-blocks 0-3 in the low 6 bits of bytes 0-3 / 4-7; those of 4-7 split into
 * a low nibble (bytes 8-11, sc low, mn high) and 2 high bits (top of bytes 0-3
 * for sc, 4-7 for mn). */
static void qk_block(uint8_t *blk, const float *x, bool five)
{
    int qmax = five ? 31 : 15;
    float s[8], m[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = 0.0f;
        for (int l = 0; l < 32; l++) {
            float v = x[32 * j + l];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        m[j] = -lo;
        s[j] = (hi - lo) / (float)qmax;
        smax = s[j] > smax ? s[j] : smax;
        mmax = m[j] > mmax ? m[j] : mmax;
    }
    put_f16(blk, smax / 63.0f);
    put_f16(blk + 2, mmax / 63.0f);
    float d = get_f16(blk), dmin = get_f16(blk + 2);
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? clampi(round_int(s[j] / d), 0, 63) : 0;
        mn[j] = dmin > 0.0f ? clampi(round_int(m[j] / dmin), 0, 63) : 0;
    }
    uint8_t *scales = blk + 4;
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    uint8_t *qh = five ? blk + 16 : NULL, *qs = five ? blk + 48 : blk + 16;
    memset(qs, 0, 128);
    if (qh) memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
        float ids = ds > 0.0f ? 1.0f / ds : 0.0f;
        for (int l = 0; l < 32; l++) {
            int q = clampi(round_int((x[32 * j + l] + dm) * ids), 0, qmax);
            qs[32 * (j / 2) + l] |= (uint8_t)((q & 0xF) << (4 * (j & 1)));
            if (qh) qh[l] |= (uint8_t)((q >> 4) << j);
        }
    }
}

/* Q6_K (210 bytes / 256): per 16 weights, s_i = (value of largest magnitude)
 * / -32; d = max |s_i| / 127 (f16), scales_i = round(s_i / d) (int8), and
 * q = clamp(round(w / (d*scales_i)) + 32, 0, 63). Layout: ql[128], qh[64],
 * scales[16], d; weight 128h + 32s + l (half h, sub-block s, l < 32) keeps its
 * low 4 bits in nibble s>>1 of ql[64h + 32(s&1) + l] and its high 2 bits in
 * bits 2s..2s+1 of qh[32h + l]. */
static void q6_k_block(uint8_t *blk, const float *x)
{
    float s[16], amax_s = 0.0f;
    for (int i = 0; i < 16; i++) {
        float amax = 0.0f, vmax = 0.0f;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * i + l]) > amax) amax = fabsf(x[16 * i + l]), vmax = x[16 * i + l];
        s[i] = vmax / -32.0f;
        amax_s = fabsf(s[i]) > amax_s ? fabsf(s[i]) : amax_s;
    }
    uint8_t *ql = blk, *qh = blk + 128;
    int8_t *scales = (int8_t *)(blk + 192);
    put_f16(blk + 208, amax_s / 127.0f);
    float d = get_f16(blk + 208);
    memset(blk, 0, 192);
    for (int i = 0; i < 16; i++) {
        int sc = d > 0.0f ? clampi(round_int(s[i] / d), -127, 127) : 0;
        scales[i] = (int8_t)sc;
        float ds = d * (float)sc, ids = ds != 0.0f ? 1.0f / ds : 0.0f;
        for (int l = 0; l < 16; l++) {
            int idx = 16 * i + l, h = idx / 128, sb = (idx % 128) / 32, ll = idx % 32;
            int q = clampi(round_int(x[idx] * ids) + 32, 0, 63);
            ql[64 * h + 32 * (sb & 1) + ll] |= (uint8_t)((q & 0xF) << (4 * (sb >> 1)));
            qh[32 * h + ll] |= (uint8_t)((q >> 4) << (2 * sb));
        }
    }
}

bool ggml_quantize_row(void *dst, int type, const float *src, uint64_t n)
{
    if (!ggml_type_convertible(type) || n % ggml_blck_size(type)) return false;
    uint8_t *d = dst;
    uint64_t nb = n / ggml_blck_size(type), bb = ggml_type_size(type);
    switch (type) {
    case GGML_TYPE_F32: memcpy(d, src, n * 4); break;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) put_f16(d + 2 * i, src[i]);
        break;
    case GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case GGML_TYPE_Q8_0:
        for (uint64_t b = 0; b < nb; b++) q8_0_block(d + bb * b, src + 32 * b);
        break;
    case GGML_TYPE_Q4_0:
        for (uint64_t b = 0; b < nb; b++) q4_0_block(d + bb * b, src + 32 * b);
        break;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        for (uint64_t b = 0; b < nb; b++) qk_block(d + bb * b, src + 256 * b, type == GGML_TYPE_Q5_K);
        break;
    case GGML_TYPE_Q6_K:
        for (uint64_t b = 0; b < nb; b++) q6_k_block(d + bb * b, src + 256 * b);
        break;
    }
    return true;
}

/* ---- dequantize --------------------------------------------------------- */

static void dequant_qk(float *out, const uint8_t *row, bool five, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t hd, hdmin;
        if (five) {
            const blk_q5_k *b = (const blk_q5_k *)row + i;
            memcpy(&hd, &b->d, 2), memcpy(&hdmin, &b->dmin, 2);
            scales = b->scales, qs = b->qs, qh = b->qh;
        } else {
            const blk_q4_k *b = (const blk_q4_k *)row + i;
            memcpy(&hd, &b->d, 2), memcpy(&hdmin, &b->dmin, 2);
            scales = b->scales, qs = b->qs;
        }
        uint8_t sc[8], mn[8];
        kq_unpack(scales, sc, mn);
        float d = fp16_to_f32(hd), dmin = fp16_to_f32(hdmin);
        for (int j = 0; j < 8; j++) {
            float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xF;
                if (qh) q |= ((qh[l] >> j) & 1) << 4;
                out[i * 256 + 32 * j + l] = ds * (float)q - dm;
            }
        }
    }
}

bool ggml_dequantize_row(float *out, int type, const void *src, uint64_t n)
{
    if (!ggml_type_convertible(type) || n % ggml_blck_size(type)) return false;
    const uint8_t *row = src;
    uint64_t nb = n / ggml_blck_size(type);
    switch (type) {
    case GGML_TYPE_F32: memcpy(out, row, n * 4); break;
    case GGML_TYPE_F16:
        for (uint64_t k = 0; k < n; k++) out[k] = get_f16(row + 2 * k);
        break;
    case GGML_TYPE_BF16:
        for (uint64_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, row + 2 * k, 2);
            out[k] = bf16_to_f32(h);
        }
        break;
    case GGML_TYPE_Q8_0: {
        const blk_q8_0 *b = (const blk_q8_0 *)row;
        for (uint64_t i = 0; i < nb; i++) {
            float d = fp16_to_f32(b[i].d);
            for (int j = 0; j < 32; j++) out[i * 32 + j] = d * (float)b[i].q[j];
        }
        break;
    }
    case GGML_TYPE_Q4_0: {
        const blk_q4_0 *b = (const blk_q4_0 *)row;
        for (uint64_t i = 0; i < nb; i++) {
            float d = fp16_to_f32(b[i].d);
            for (int l = 0; l < 16; l++) {
                out[i * 32 + l] = d * (float)((b[i].qs[l] & 0xF) - 8);
                out[i * 32 + l + 16] = d * (float)((b[i].qs[l] >> 4) - 8);
            }
        }
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: dequant_qk(out, row, type == GGML_TYPE_Q5_K, nb); break;
    case GGML_TYPE_Q6_K: {
        const blk_q6_k *b = (const blk_q6_k *)row;
        for (uint64_t i = 0; i < nb; i++) {
            float d = fp16_to_f32(b[i].d);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
                const int8_t *sc = b[i].scales + 8 * h;
                for (int l = 0; l < 32; l++) {
                    float *o = out + i * 256 + 128 * h + l;
                    o[0] = d * (float)sc[l / 16 + 0] * (float)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
                    o[32] = d * (float)sc[l / 16 + 2] * (float)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                    o[64] = d * (float)sc[l / 16 + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                    o[96] = d * (float)sc[l / 16 + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                }
            }
        }
        break;
    }
    }
    return true;
}
