/* matmul_q8_tile.h — the integer-dot tile of matmul_q8.c for one x86 target,
 * included once per target (dav1d-style templating). The includer defines:
 *   QT_SUFFIX  name suffix of the functions made here (avx2, vnni)
 *   QT_TARGET  the function attribute selecting the instruction set
 *   QT_VNNI    1: vpdpbusd (AVX512-VNNI); 0: vpmaddubsw + vpmaddwd (AVX2)
 * The integer sums are exact on both, and the float work after them is the
 * same instructions, so the two targets agree bit for bit. */

#define QT_CAT2(a, b) a##_##b
#define QT_CAT(a, b) QT_CAT2(a, b)
#define QT_(name) QT_CAT(name, QT_SUFFIX)

/* 8 int32 lanes of u8 a times s8 b; lane l sums bytes 4l..4l+3. The AVX2
 * form adds byte pairs in int16 first: no saturation while a <= 127 (|qx|, or
 * weights of at most 6 bits). */
static inline QT_TARGET __m256i QT_(qt_dot)(__m256i a, __m256i b) {
#if QT_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

static inline QT_TARGET __m256i QT_(qt_srl16)(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

/* The 32 weights of block k/32 of one row as the unsigned operand of the dot
 * product, stored as q + 2^*shift (the kernel subtracts 2^shift times the x
 * half sums; *shift = 0: no offset), and for Q8_0/Q4_0 the scales of the two
 * halves (the K-quants' come from qg_ksuper once per super-block). Q8_0
 * on AVX2 stays signed (*shift = -1): vpmaddubsw would saturate on q + 128, so
 * that path moves the sign onto the weights instead (vpsignb). */
static inline QT_TARGET __m256i QT_(qt_load)(const uint8_t *row, int wtype, int k, float *s_lo, float *s_hi,
                                             int *shift) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    uint16_t dh;
    if (wtype == GGML_TYPE_Q8_0) {
        const blk_q8_0 *b = (const blk_q8_0 *)row + k / 32;
        memcpy(&dh, &b->d, 2);
        *s_lo = *s_hi = _cvtsh_ss(dh);
        __m256i q = _mm256_loadu_si256((const __m256i *)b->q);
#if QT_VNNI
        *shift = 7;
        return _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
#else
        *shift = -1;
        return q;
#endif
    }
    if (wtype == GGML_TYPE_Q4_0) {
        const blk_q4_0 *b = (const blk_q4_0 *)row + k / 32;
        memcpy(&dh, &b->d, 2);
        *s_lo = *s_hi = _cvtsh_ss(dh);
        *shift = 3;
        __m128i v = _mm_loadu_si128((const __m128i *)b->qs);
        __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
        return _mm256_set_m128i(hi, lo);
    }
    if (wtype == GGML_TYPE_Q6_K) { /* scales: qg_ksuper, once per super-block */
        const blk_q6_k *b = (const blk_q6_k *)row + k / 256;
        int j = (k % 256) / 32, h = j / 4, s = j % 4;
        *shift = 5;
        __m256i lo = _mm256_and_si256(QT_(qt_srl16)(_mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (s & 1))),
                                                    4 * (s >> 1)), m4);
        __m256i hi = _mm256_and_si256(QT_(qt_srl16)(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)), 2 * s),
                                      _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    /* Q4_K, Q5_K: sub-block j; scales and mins once per super-block */
    int j = (k % 256) / 32;
    kq_view v = kq_at(row, wtype == GGML_TYPE_Q5_K, k / 256);
    const uint8_t *qs = v.qs, *qh = v.qh;
    *shift = 0;
    __m256i q = _mm256_and_si256(QT_(qt_srl16)(_mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2))), 4 * (j & 1)), m4);
    if (qh) {
        __m256i hb = _mm256_and_si256(QT_(qt_srl16)(_mm256_loadu_si256((const __m256i *)qh), j), _mm256_set1_epi8(1));
        q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
    }
    return q;
}

static inline QT_TARGET void QT_(qt_tile)(int wtype, int mr, int nr, float *y, int ldy, int ys, const uint8_t *xq,
                                          size_t xs, int K, const uint8_t *w, size_t rb) {
    const int is_k = wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K;
    const int one_scale = wtype == GGML_TYPE_Q8_0 || wtype == GGML_TYPE_Q4_0;
    const __m256i zi = _mm256_setzero_si256();
    const __m256 zf = _mm256_setzero_ps();
    /* lane r: row r's lo half, lane 4 + r: its hi half */
    __m256 acc[MQ_MR];
    for (int m = 0; m < mr; m++) acc[m] = zf;
    const int is_sb = is_k || wtype == GGML_TYPE_Q6_K;
    float kst[8][8] = {{0}}; /* K-quants: the scale vector of each sub-block of the super-block */
    __m256 mv[MQ_NR];        /* Q4_K/Q5_K: the super-block's -dmin * m_j */
    for (int k = 0; k < K; k += 32) {
        __m256i wq[MQ_NR];
        float s_lo[MQ_NR] = {0}, s_hi[MQ_NR] = {0};
        int shift = 0;
        for (int r = 0; r < nr; r++) wq[r] = QT_(qt_load)(w + r * rb, wtype, k, &s_lo[r], &s_hi[r], &shift);
        if (is_sb && k % 256 == 0)
            for (int r = 0; r < nr; r++) {
                float lo[8], hi[8], mins[8];
                qg_ksuper(w + r * rb, wtype, k, lo, hi, mins);
                for (int j = 0; j < 8; j++) kst[j][r] = lo[j], kst[j][4 + r] = hi[j];
                if (is_k) mv[r] = _mm256_loadu_ps(mins);
            }
        __m256 S = is_sb ? _mm256_loadu_ps(kst[(k % 256) / 32])
                         : _mm256_setr_ps(s_lo[0], s_lo[1], s_lo[2], s_lo[3], s_hi[0], s_hi[1], s_hi[2], s_hi[3]);
        if (is_k && k % 256 == 0) {
            for (int m = 0; m < mr; m++) {
                __m256 bs = _mm256_loadu_ps(qx_bsum(xq + m * xs, K) + k / 32);
                __m256 p[MQ_NR];
                for (int r = 0; r < MQ_NR; r++) p[r] = r < nr ? _mm256_mul_ps(mv[r], bs) : zf;
                acc[m] = _mm256_add_ps(acc[m], _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3])));
            }
        }
        for (int m = 0; m < mr; m++) {
            const uint8_t *xr = xq + m * xs;
            __m256i qx = _mm256_loadu_si256((const __m256i *)(xr + k));
            __m256i d[MQ_NR];
            if (shift < 0) {
                __m256i ax = _mm256_loadu_si256((const __m256i *)(xr + K + k));
                for (int r = 0; r < MQ_NR; r++) d[r] = r < nr ? QT_(qt_dot)(ax, _mm256_sign_epi8(wq[r], qx)) : zi;
            } else {
                for (int r = 0; r < MQ_NR; r++) d[r] = r < nr ? QT_(qt_dot)(wq[r], qx) : zi;
            }
            __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d[0], d[1]), _mm256_hadd_epi32(d[2], d[3]));
            if (shift > 0) {
                __m256i hv = _mm256_loadu_si256((const __m256i *)(qx_halves(xr, K) + 8 * (k / 32)));
                h = _mm256_sub_epi32(h, _mm256_sll_epi32(hv, _mm_cvtsi32_si128(shift)));
            }
            if (one_scale) /* whole-block sums in lanes 0-3, hi lanes stay zero (see qg_tile) */
                h = _mm256_blend_epi32(_mm256_add_epi32(h, _mm256_permute2x128_si256(h, h, 0x01)), zi, 0xF0);
            __m256 dx = _mm256_broadcast_ss(qx_scale(xr, K) + k / 32);
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_mul_ps(S, dx), acc[m]);
        }
    }
    for (int m = 0; m < mr; m++) {
        float o[4];
        _mm_storeu_ps(o, _mm_add_ps(_mm256_castps256_ps128(acc[m]), _mm256_extractf128_ps(acc[m], 1)));
        for (int r = 0; r < nr; r++) y[(size_t)m * ldy + (size_t)r * ys] = o[r];
    }
}

#if QT_VNNI
/* Two Q8_0 x8 groups in one 512-bit register (group 0 in lanes 0-7, group 1 in
 * 8-15): one vpdpbusd per input row and run instead of two, the same integer
 * sums and the same float steps per lane as qt_r8_tile, so the results are
 * bit-identical; fewer instructions leave the core more room to keep weight
 * loads in flight while it computes (5-row verification). */
static inline QT_TARGET void QT_(qt_r8_tile2)(int mr, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                              const uint8_t *g, int nvl, int stride) {
    const size_t gb = (size_t)(K / 32) * R8_BLOCK_BYTES;
    const uint8_t *g0 = g, *g1 = g + (size_t)stride * gb;
    __m512 acc[MQ_MR];
    for (int m = 0; m < mr; m++) acc[m] = _mm512_setzero_ps();
    for (int b = 0; b < K / 32; b++) {
        const uint8_t *b0 = g0 + (size_t)b * R8_BLOCK_BYTES, *b1 = g1 + (size_t)b * R8_BLOCK_BYTES;
        if (R8_PREFETCH)
            for (int l = 0; l < R8_BLOCK_BYTES; l += 64) {
                _mm_prefetch((const char *)b0 + R8_PREFETCH + l, _MM_HINT_T1);
                _mm_prefetch((const char *)b1 + R8_PREFETCH + l, _MM_HINT_T1);
            }
        __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b0)),
                                                           _mm_loadu_si128((const __m128i *)b1), 1));
        __m512i sm[MQ_MR];
        for (int m = 0; m < mr; m++) sm[m] = _mm512_set1_epi32(qx_corr(xq + m * xs, K)[b]);
        for (int j = 0; j < 8; j++) {
            __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 16 + 32 * j))),
                                            _mm256_loadu_si256((const __m256i *)(b1 + 16 + 32 * j)), 1);
            for (int m = 0; m < mr; m++) {
                int32_t q4;
                memcpy(&q4, xq + m * xs + 32 * b + 4 * j, 4);
                sm[m] = _mm512_dpbusd_epi32(sm[m], wv, _mm512_set1_epi32(q4));
            }
        }
        for (int m = 0; m < mr; m++) {
            __m512 dx = _mm512_set1_ps(qx_scale(xq + m * xs, K)[b]);
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sm[m]), _mm512_mul_ps(d, dx), acc[m]);
        }
    }
    float *y1 = y + (size_t)8 * stride;
    for (int m = 0; m < mr; m++) {
        _mm256_storeu_ps(y + (size_t)m * ldy, _mm512_castps512_ps256(acc[m]));
        __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[m]), 1));
        if (nvl == 8) {
            _mm256_storeu_ps(y1 + (size_t)m * ldy, hi);
        } else {
            float o[8];
            _mm256_storeu_ps(o, hi);
            for (int r = 0; r < nvl; r++) y1[(size_t)m * ldy + r] = o[r];
        }
    }
}
#endif

/* mr input rows x one Q8_0 x8 group (quant.h): per block, for each run j of
 * 4 columns one load of the 8 rows' bytes and one dot per input row against
 * its 4 broadcast bytes. VNNI: the stored weights + 128 as the unsigned
 * operand, the sum starting at -128 * sum(qx); AVX2: |qx| as the unsigned
 * operand and the sign moved onto the weights. Both are the exact sum of
 * q * qx. */
static inline QT_TARGET void QT_(qt_r8_tile)(int mr, int ng, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                             const uint8_t *g, int nvl, int stride) {
#if QT_VNNI
    if (ng == 2) {
        QT_(qt_r8_tile2)(mr, y, ldy, xq, xs, K, g, nvl, stride);
        return;
    }
#endif
    const size_t gb = (size_t)(K / 32) * R8_BLOCK_BYTES;
    const uint8_t *gs[2];
    for (int q = 0; q < ng; q++) gs[q] = g + (size_t)stride * q * gb;
    __m256 acc[2][MQ_MR];
    for (int q = 0; q < ng; q++)
        for (int m = 0; m < mr; m++) acc[q][m] = _mm256_setzero_ps();
    for (int b = 0; b < K / 32; b++) {
        __m256i s[2][MQ_MR];
        __m256 d[2];
        for (int q = 0; q < ng; q++) {
            const uint8_t *blk = gs[q] + (size_t)b * R8_BLOCK_BYTES;
            /* fetch ahead of the hardware prefetcher in each stream, into L2 (T0
             * holds an L1 miss buffer per line: M=5 measured 3.9-4.2 ms with T0
             * against 3.0-3.2 ms with T1 for the widen model's matmuls) */
            if (R8_PREFETCH) for (int l = 0; l < R8_BLOCK_BYTES; l += 64) _mm_prefetch((const char *)blk + R8_PREFETCH + l, _MM_HINT_T1);
            d[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
            for (int m = 0; m < mr; m++) {
#if QT_VNNI
                s[q][m] = _mm256_set1_epi32(qx_corr(xq + m * xs, K)[b]);
#else
                s[q][m] = _mm256_setzero_si256();
#endif
            }
        }
        for (int j = 0; j < 8; j++) {
            __m256i wv[2];
            for (int q = 0; q < ng; q++) {
                wv[q] = _mm256_loadu_si256((const __m256i *)(gs[q] + (size_t)b * R8_BLOCK_BYTES + 16 + 32 * j));
#if !QT_VNNI /* the layout stores q + 128; AVX2 needs q itself */
                wv[q] = _mm256_xor_si256(wv[q], _mm256_set1_epi8((char)0x80));
#endif
            }
            for (int m = 0; m < mr; m++) {
                const uint8_t *xr = xq + m * xs;
                int32_t q4;
                memcpy(&q4, xr + 32 * b + 4 * j, 4);
#if QT_VNNI
                __m256i xv = _mm256_set1_epi32(q4);
                for (int q = 0; q < ng; q++) s[q][m] = _mm256_dpbusd_epi32(s[q][m], wv[q], xv);
#else
                int32_t a4;
                memcpy(&a4, xr + K + 32 * b + 4 * j, 4);
                __m256i av = _mm256_set1_epi32(a4), sv = _mm256_set1_epi32(q4);
                for (int q = 0; q < ng; q++) {
                    __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(wv[q], sv));
                    s[q][m] = _mm256_add_epi32(s[q][m], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
                }
#endif
            }
        }
        for (int m = 0; m < mr; m++) {
            __m256 dx = _mm256_broadcast_ss(qx_scale(xq + m * xs, K) + b);
            for (int q = 0; q < ng; q++)
                acc[q][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[q][m]), _mm256_mul_ps(d[q], dx), acc[q][m]);
        }
    }
    for (int q = 0; q < ng; q++) {
        float *yq = y + (size_t)8 * stride * q;
        int nq = q == ng - 1 ? nvl : 8;
        for (int m = 0; m < mr; m++) {
            if (nq == 8) {
                _mm256_storeu_ps(yq + (size_t)m * ldy, acc[q][m]);
            } else {
                float o[8];
                _mm256_storeu_ps(o, acc[q][m]);
                for (int r = 0; r < nq; r++) yq[(size_t)m * ldy + r] = o[r];
            }
        }
    }
}

static QT_NOINLINE_TARGET void QT_(r8_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K,
                                            int n0, int n1) {
    R8_ROWS_BODY(QT_(qt_r8_tile))
}

/* ---- Q4_K x8 and Q5_K x8 (quant.h) ----
 * One super-block of a group: the mins first (acc_lo += (t0+t1)+(t2+t3),
 * acc_hi += (t4+t5)+(t6+t7), t_j = (-dmin m_j) bsum_j), then per sub-block j
 * the exact integer sums of its halves (4 runs of 4 columns each, one 32-byte
 * load feeding 8 rows) and acc_lo/hi = fma(float(sum), (d sc_j) dx_j, acc):
 * the steps of qt_tile per row, so the results are bit-identical to the file
 * layout's. Q5_K ORs bit j of a qh run (quant.h) in as bit 4. AVX2 adds the
 * 4 runs' vpmaddubsw products in int16 before one vpmaddwd (|sum| <= 4 * 2 *
 * 31 * 127 = 31496: exact). */

/* sum over 4 runs of the dot of weights wv[i] (u8, 0..15) with the 4 bytes
 * of x at xb + 4 i broadcast, one int32 per lane */
static inline QT_TARGET __m256i QT_(qt_rk_dot4)(const __m256i *wv, const uint8_t *xb) {
    int32_t q4[4];
    memcpy(q4, xb, 16);
#if QT_VNNI
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv[0], _mm256_set1_epi32(q4[0]));
    s = _mm256_dpbusd_epi32(s, wv[1], _mm256_set1_epi32(q4[1]));
    s = _mm256_dpbusd_epi32(s, wv[2], _mm256_set1_epi32(q4[2]));
    return _mm256_dpbusd_epi32(s, wv[3], _mm256_set1_epi32(q4[3]));
#else
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], _mm256_set1_epi32(q4[0])),
                                 _mm256_maddubs_epi16(wv[1], _mm256_set1_epi32(q4[1])));
    p = _mm256_add_epi16(p, _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], _mm256_set1_epi32(q4[2])),
                                             _mm256_maddubs_epi16(wv[3], _mm256_set1_epi32(q4[3]))));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

static inline QT_TARGET __m256 QT_(qt_rk_u8ps)(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

#if QT_VNNI
/* two groups in one 512-bit register (group 0 in lanes 0-7, group 1 in
 * 8-15), as qt_r8_tile2: the same sums and float steps per lane as
 * qt_rk_tile, half the instructions (the x bytes go in as vpdpbusd's
 * broadcast memory operand) */
static inline QT_TARGET __m512 QT_(qt_rk_u8ps2)(const uint8_t *p0, const uint8_t *p1) {
    __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p0), _mm_loadl_epi64((const __m128i *)p1));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}
static inline QT_TARGET __m512 QT_(qt_rk_h2ps2)(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                                   _mm_loadu_si128((const __m128i *)p1), 1));
}
static inline QT_TARGET void QT_(qt_rk_tile2)(int mr, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                              const uint8_t *g, int nvl, int stride, int q5) {
    const int bb = RK_BB(q5);
    const size_t gb = (size_t)(K / 256) * bb;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 lo[MQ_MR], hi[MQ_MR];
    for (int m = 0; m < mr; m++) lo[m] = hi[m] = _mm512_setzero_ps();
    for (int sb = 0; sb < K / 256; sb++) {
        const uint8_t *b0 = g + (size_t)sb * bb, *b1 = b0 + (size_t)stride * gb;
        if (R8_PREFETCH)
            for (int l = 0; l < bb; l += 64) {
                _mm_prefetch((const char *)b0 + R8_PREFETCH + l, _MM_HINT_T1);
                _mm_prefetch((const char *)b1 + R8_PREFETCH + l, _MM_HINT_T1);
            }
        __m512 d = QT_(qt_rk_h2ps2)(b0, b1), nd = QT_(qt_rk_h2ps2)(b0 + 16, b1 + 16);
        __m512 mv[8];
        for (int j = 0; j < 8; j++) mv[j] = _mm512_mul_ps(nd, QT_(qt_rk_u8ps2)(b0 + 96 + 8 * j, b1 + 96 + 8 * j));
        for (int m = 0; m < mr; m++) {
            const float *bs = qx_bsum(xq + m * xs, K) + 8 * sb;
            __m512 t[8];
            for (int j = 0; j < 8; j++) {
                t[j] = _mm512_mul_ps(mv[j], _mm512_set1_ps(bs[j]));
                __asm__("" : "+v"(t[j])); /* rounded products: no fused multiply-add (-ffp-contract) */
            }
            lo[m] = _mm512_add_ps(lo[m], _mm512_add_ps(_mm512_add_ps(t[0], t[1]), _mm512_add_ps(t[2], t[3])));
            hi[m] = _mm512_add_ps(hi[m], _mm512_add_ps(_mm512_add_ps(t[4], t[5]), _mm512_add_ps(t[6], t[7])));
        }
        for (int p = 0; p < 4; p++) {
            __m512 S[2];
            for (int e = 0; e < 2; e++) S[e] = _mm512_mul_ps(d, QT_(qt_rk_u8ps2)(b0 + 32 + 8 * (2 * p + e), b1 + 32 + 8 * (2 * p + e)));
            for (int h = 0; h < 2; h++) {
                __m512i wr[4];
                for (int i = 0; i < 4; i++) {
                    size_t o = 160 + 256 * p + 32 * (4 * h + i);
                    wr[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + o))),
                                               _mm256_loadu_si256((const __m256i *)(b1 + o)), 1);
                }
                __m512i qh[4];
                if (q5)
                    for (int i = 0; i < 4; i++) {
                        size_t o = RK_BLOCK_BYTES + 32 * (4 * h + i);
                        qh[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + o))),
                                                   _mm256_loadu_si256((const __m256i *)(b1 + o)), 1);
                    }
                for (int e = 0; e < 2; e++) {
                    int j = 2 * p + e;
                    __m512i wv[4];
                    for (int i = 0; i < 4; i++) wv[i] = _mm512_and_si512(e ? _mm512_srli_epi16(wr[i], 4) : wr[i], m4);
                    if (q5) /* bit j of the qh byte as bit 4 */
                        for (int i = 0; i < 4; i++)
                            wv[i] = _mm512_or_si512(wv[i], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh[i], _mm_cvtsi32_si128(j)),
                                                                                              _mm512_set1_epi8(1)), 4));
                    for (int m = 0; m < mr; m++) {
                        const uint8_t *xr = xq + m * xs;
                        int32_t q4[4];
                        memcpy(q4, xr + 256 * sb + 32 * j + 16 * h, 16);
                        __m512i sm = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], _mm512_set1_epi32(q4[0]));
                        sm = _mm512_dpbusd_epi32(sm, wv[1], _mm512_set1_epi32(q4[1]));
                        sm = _mm512_dpbusd_epi32(sm, wv[2], _mm512_set1_epi32(q4[2]));
                        sm = _mm512_dpbusd_epi32(sm, wv[3], _mm512_set1_epi32(q4[3]));
                        __m512 f = _mm512_cvtepi32_ps(sm), sd = _mm512_mul_ps(S[e], _mm512_set1_ps(qx_scale(xr, K)[8 * sb + j]));
                        if (h) hi[m] = _mm512_fmadd_ps(f, sd, hi[m]);
                        else lo[m] = _mm512_fmadd_ps(f, sd, lo[m]);
                    }
                }
            }
        }
    }
    float *y1 = y + (size_t)8 * stride;
    for (int m = 0; m < mr; m++) {
        __m512 o = _mm512_add_ps(lo[m], hi[m]);
        _mm256_storeu_ps(y + (size_t)m * ldy, _mm512_castps512_ps256(o));
        __m256 o1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(o), 1));
        if (nvl == 8) {
            _mm256_storeu_ps(y1 + (size_t)m * ldy, o1);
        } else {
            float t[8];
            _mm256_storeu_ps(t, o1);
            for (int r = 0; r < nvl; r++) y1[(size_t)m * ldy + r] = t[r];
        }
    }
}
#endif

#if !QT_VNNI
/* One input row (decode) x ng (1, 2) groups on AVX2: qt_rk_tile's integer
 * sums and float steps in the same order per accumulator, so bit-identical.
 * At M = 1 AVX2 is bound by vector instructions (the 1-layer set that stays in
 * L3 ran at 33-35 GB/s against 59 on AVX-512), so this form spends fewer: a
 * run's weights unpacked once for both sub-blocks of the pair and fed straight
 * to vpmaddubsw (no arrays for the compiler to keep in registers or spill),
 * the 4 runs of a half summed in int16 (|.| <= 4 * 2 * 31 * 127 = 31496:
 * exact) before one vpmaddwd, (d sc_j) dx_j once per sub-block, the prefetch
 * loop unrolled. Q5_K moves bit j of the qh byte to bit 4 with one immediate
 * shift and a mask (a 16-bit shift by at most 4 moves no bit the mask keeps
 * across a byte). */
static inline QT_TARGET __m256i QT_(qt_rk_hbit)(__m256i qh, int j) {
    __m256i t = j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
    return _mm256_and_si256(t, _mm256_set1_epi8(0x10));
}
static inline QT_TARGET void QT_(qt_rk_tile1)(int ng, float *y, const uint8_t *xq, int K, const uint8_t *g, int nvl,
                                              int stride, int q5) {
    const int bb = RK_BB(q5);
    const size_t gb = (size_t)(K / 256) * bb;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1);
    const float *dxs = qx_scale(xq, K), *bss = qx_bsum(xq, K);
    __m256 lo[2], hi[2];
    for (int q = 0; q < ng; q++) lo[q] = hi[q] = _mm256_setzero_ps();
    for (int sb = 0; sb < K / 256; sb++) {
        const uint8_t *blk[2];
        __m256 d[2];
        for (int q = 0; q < ng; q++) {
            blk[q] = g + (size_t)stride * q * gb + (size_t)sb * bb;
            /* every line, into L1 here: alternated at M = 1 on the 12-layer set,
             * 35.1-35.4 GB/s against 32.7-33.6 into L2 (T1) and 32.1-32.3 with
             * no software prefetch */
            if (R8_PREFETCH)
#pragma GCC unroll 32
                for (int l = 0; l < bb; l += 64) _mm_prefetch((const char *)blk[q] + R8_PREFETCH + l, _MM_HINT_T0);
            d[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk[q]));
            __m256 nd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk[q] + 16)));
            __m256 t[8];
            for (int j = 0; j < 8; j++) {
                t[j] = _mm256_mul_ps(_mm256_mul_ps(nd, QT_(qt_rk_u8ps)(blk[q] + 96 + 8 * j)), _mm256_broadcast_ss(bss + 8 * sb + j));
                __asm__("" : "+x"(t[j])); /* rounded products: no fused multiply-add (-ffp-contract) */
            }
            lo[q] = _mm256_add_ps(lo[q], _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3])));
            hi[q] = _mm256_add_ps(hi[q], _mm256_add_ps(_mm256_add_ps(t[4], t[5]), _mm256_add_ps(t[6], t[7])));
        }
        const uint8_t *xb = xq + 256 * sb;
        for (int p = 0; p < 4; p++)
            for (int q = 0; q < ng; q++) {
                const uint8_t *b = blk[q];
                __m256 sd0 = _mm256_mul_ps(_mm256_mul_ps(d[q], QT_(qt_rk_u8ps)(b + 32 + 8 * (2 * p))),
                                           _mm256_broadcast_ss(dxs + 8 * sb + 2 * p));
                __m256 sd1 = _mm256_mul_ps(_mm256_mul_ps(d[q], QT_(qt_rk_u8ps)(b + 32 + 8 * (2 * p + 1))),
                                           _mm256_broadcast_ss(dxs + 8 * sb + 2 * p + 1));
                for (int h = 0; h < 2; h++) {
                    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
                    for (int i = 0; i < 4; i++) {
                        __m256i w = _mm256_loadu_si256((const __m256i *)(b + 160 + 256 * p + 32 * (4 * h + i)));
                        __m256i w0 = _mm256_and_si256(w, m4), w1 = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
                        if (q5) {
                            __m256i qh = _mm256_loadu_si256((const __m256i *)(b + RK_BLOCK_BYTES + 32 * (4 * h + i)));
                            w0 = _mm256_or_si256(w0, QT_(qt_rk_hbit)(qh, 2 * p));
                            w1 = _mm256_or_si256(w1, QT_(qt_rk_hbit)(qh, 2 * p + 1));
                        }
                        int32_t x0, x1;
                        memcpy(&x0, xb + 32 * (2 * p) + 16 * h + 4 * i, 4);
                        memcpy(&x1, xb + 32 * (2 * p + 1) + 16 * h + 4 * i, 4);
                        __m256i m0 = _mm256_maddubs_epi16(w0, _mm256_set1_epi32(x0));
                        __m256i m1 = _mm256_maddubs_epi16(w1, _mm256_set1_epi32(x1));
                        s0 = i ? _mm256_add_epi16(s0, m0) : m0;
                        s1 = i ? _mm256_add_epi16(s1, m1) : m1;
                    }
                    __m256 f0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(s0, one));
                    __m256 f1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(s1, one));
                    if (h) hi[q] = _mm256_fmadd_ps(f1, sd1, _mm256_fmadd_ps(f0, sd0, hi[q]));
                    else lo[q] = _mm256_fmadd_ps(f1, sd1, _mm256_fmadd_ps(f0, sd0, lo[q]));
                }
            }
    }
    for (int q = 0; q < ng; q++) {
        float *yq = y + (size_t)8 * stride * q;
        int nq = q == ng - 1 ? nvl : 8;
        __m256 o = _mm256_add_ps(lo[q], hi[q]);
        if (nq == 8) {
            _mm256_storeu_ps(yq, o);
        } else {
            float t[8];
            _mm256_storeu_ps(t, o);
            for (int r = 0; r < nq; r++) yq[r] = t[r];
        }
    }
}
#endif

/* mr input rows x ng (1, 2) groups `stride` groups apart */
static inline QT_TARGET void QT_(qt_rk_tile)(int mr, int ng, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                             const uint8_t *g, int nvl, int stride, int q5) {
#if QT_VNNI
    if (ng == 2) {
        QT_(qt_rk_tile2)(mr, y, ldy, xq, xs, K, g, nvl, stride, q5);
        return;
    }
#else
    if (mr == 1) {
        QT_(qt_rk_tile1)(ng, y, xq, K, g, nvl, stride, q5);
        return;
    }
    if (ng == 2 && mr > 2) { /* 4 accumulators per input row: 2 groups of 5 rows would not fit 16 registers */
        QT_(qt_rk_tile)(mr, 1, y, ldy, xq, xs, K, g, 8, stride, q5);
        QT_(qt_rk_tile)(mr, 1, y + (size_t)8 * stride, ldy, xq, xs, K, g + (size_t)stride * (K / 256) * RK_BB(q5),
                        nvl, stride, q5);
        return;
    }
#endif
    const int bb = RK_BB(q5);
    const size_t gb = (size_t)(K / 256) * bb;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const uint8_t *gs[2];
    for (int q = 0; q < ng; q++) gs[q] = g + (size_t)stride * q * gb;
    __m256 lo[2][MQ_MR], hi[2][MQ_MR];
    for (int q = 0; q < ng; q++)
        for (int m = 0; m < mr; m++) lo[q][m] = hi[q][m] = _mm256_setzero_ps();
    for (int sb = 0; sb < K / 256; sb++) {
        const uint8_t *blk[2];
        __m256 d[2];
        for (int q = 0; q < ng; q++) {
            blk[q] = gs[q] + (size_t)sb * bb;
            if (R8_PREFETCH)
                for (int l = 0; l < bb; l += 64) _mm_prefetch((const char *)blk[q] + R8_PREFETCH + l, _MM_HINT_T1);
            d[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk[q]));
            __m256 nd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk[q] + 16)));
            __m256 mv[8];
            for (int j = 0; j < 8; j++) mv[j] = _mm256_mul_ps(nd, QT_(qt_rk_u8ps)(blk[q] + 96 + 8 * j));
            for (int m = 0; m < mr; m++) {
                const float *bs = qx_bsum(xq + m * xs, K) + 8 * sb;
                __m256 t[8];
                for (int j = 0; j < 8; j++) {
                    t[j] = _mm256_mul_ps(mv[j], _mm256_broadcast_ss(bs + j));
                    __asm__("" : "+x"(t[j])); /* rounded products: no fused multiply-add (-ffp-contract) */
                }
                lo[q][m] = _mm256_add_ps(lo[q][m], _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3])));
                hi[q][m] = _mm256_add_ps(hi[q][m], _mm256_add_ps(_mm256_add_ps(t[4], t[5]), _mm256_add_ps(t[6], t[7])));
            }
        }
        for (int p = 0; p < 4; p++) {
            __m256 S[2][2];
            for (int q = 0; q < ng; q++)
                for (int e = 0; e < 2; e++) S[q][e] = _mm256_mul_ps(d[q], QT_(qt_rk_u8ps)(blk[q] + 32 + 8 * (2 * p + e)));
            for (int h = 0; h < 2; h++) {
                __m256i wr[2][4];
                for (int q = 0; q < ng; q++)
                    for (int i = 0; i < 4; i++)
                        wr[q][i] = _mm256_loadu_si256((const __m256i *)(blk[q] + 160 + 256 * p + 32 * (4 * h + i)));
                for (int e = 0; e < 2; e++) {
                    int j = 2 * p + e;
                    __m256i wv[2][4];
                    for (int q = 0; q < ng; q++)
                        for (int i = 0; i < 4; i++) {
                            wv[q][i] = _mm256_and_si256(e ? _mm256_srli_epi16(wr[q][i], 4) : wr[q][i], m4);
                            if (q5) { /* bit j of the qh byte as bit 4 */
                                __m256i qh = _mm256_loadu_si256((const __m256i *)(blk[q] + RK_BLOCK_BYTES + 32 * (4 * h + i)));
                                wv[q][i] = _mm256_or_si256(wv[q][i], _mm256_slli_epi16(_mm256_and_si256(QT_(qt_srl16)(qh, j), _mm256_set1_epi8(1)), 4));
                            }
                        }
                    for (int m = 0; m < mr; m++) {
                        const uint8_t *xr = xq + m * xs;
                        __m256 dx = _mm256_broadcast_ss(qx_scale(xr, K) + 8 * sb + j);
                        for (int q = 0; q < ng; q++) {
                            __m256 f = _mm256_cvtepi32_ps(QT_(qt_rk_dot4)(wv[q], xr + 256 * sb + 32 * j + 16 * h));
                            if (h) hi[q][m] = _mm256_fmadd_ps(f, _mm256_mul_ps(S[q][e], dx), hi[q][m]);
                            else lo[q][m] = _mm256_fmadd_ps(f, _mm256_mul_ps(S[q][e], dx), lo[q][m]);
                        }
                    }
                }
            }
        }
    }
    for (int q = 0; q < ng; q++) {
        float *yq = y + (size_t)8 * stride * q;
        int nq = q == ng - 1 ? nvl : 8;
        for (int m = 0; m < mr; m++) {
            __m256 o = _mm256_add_ps(lo[q][m], hi[q][m]);
            if (nq == 8) {
                _mm256_storeu_ps(yq + (size_t)m * ldy, o);
            } else {
                float t[8];
                _mm256_storeu_ps(t, o);
                for (int r = 0; r < nq; r++) yq[(size_t)m * ldy + r] = t[r];
            }
        }
    }
}

#define QT_RK4_TILE(...) QT_(qt_rk_tile)(__VA_ARGS__, 0)
#define QT_RK5_TILE(...) QT_(qt_rk_tile)(__VA_ARGS__, 1)
static QT_NOINLINE_TARGET void QT_(rk_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K,
                                            int n0, int n1) {
    const int q5 = 0;
    RK_ROWS_BODY(QT_RK4_TILE)
}
static QT_NOINLINE_TARGET void QT_(rk5_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K,
                                             int n0, int n1) {
    const int q5 = 1;
    RK_ROWS_BODY(QT_RK5_TILE)
}
#undef QT_RK4_TILE
#undef QT_RK5_TILE

/* ---- Q6_K x8 (quant.h) ----
 * Per sub-block j and half: the 4 runs' weights + 32 (0..63) from a ql run
 * (nibble) and a qh run (2 bits), the dot products started at -32 times the
 * half's x sum (exact: the sum of q * qx, as qt_tile's shift), then
 * acc = fma(float(sum), (d sc_u) dx_j, acc): qt_tile's steps per row.
 * AVX2 adds two vpmaddubsw products in int16 (|.| <= 2 * 2 * 63 * 127 =
 * 32004: exact) before each vpmaddwd. */
static inline QT_TARGET __m256i QT_(qt_q6x_w)(const uint8_t *blk, int j, int i) {
    int h = j / 4, s = j % 4;
    __m256i l = _mm256_loadu_si256((const __m256i *)(blk + 144 + 256 * (2 * h + (s & 1)) + 32 * i));
    __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 1168 + 256 * h + 32 * i));
    l = _mm256_and_si256(s >> 1 ? _mm256_srli_epi16(l, 4) : l, _mm256_set1_epi8(0x0F));
    /* bits 2s, 2s+1 of the qh byte to bits 4, 5: one immediate 16-bit shift
     * (by at most 4: the bits the mask keeps come from the same byte) */
    q = s == 0 ? _mm256_slli_epi16(q, 4) : s == 1 ? _mm256_slli_epi16(q, 2) : s == 3 ? _mm256_srli_epi16(q, 2) : q;
    return _mm256_or_si256(l, _mm256_and_si256(q, _mm256_set1_epi8(0x30)));
}

static inline QT_TARGET __m256i QT_(qt_q6x_dot4)(__m256i init, const __m256i *wv, const uint8_t *xb) {
    int32_t q4[4];
    memcpy(q4, xb, 16);
#if QT_VNNI
    __m256i s = _mm256_dpbusd_epi32(init, wv[0], _mm256_set1_epi32(q4[0]));
    s = _mm256_dpbusd_epi32(s, wv[1], _mm256_set1_epi32(q4[1]));
    s = _mm256_dpbusd_epi32(s, wv[2], _mm256_set1_epi32(q4[2]));
    return _mm256_dpbusd_epi32(s, wv[3], _mm256_set1_epi32(q4[3]));
#else
    const __m256i one = _mm256_set1_epi16(1);
    __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], _mm256_set1_epi32(q4[0])),
                                   _mm256_maddubs_epi16(wv[1], _mm256_set1_epi32(q4[1])));
    __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], _mm256_set1_epi32(q4[2])),
                                   _mm256_maddubs_epi16(wv[3], _mm256_set1_epi32(q4[3])));
    return _mm256_add_epi32(init, _mm256_add_epi32(_mm256_madd_epi16(p01, one), _mm256_madd_epi16(p23, one)));
#endif
}

#if QT_VNNI
/* qt_q6x_w for two groups at once, unpacked in 512-bit registers (the same
 * bytes; vpternlogd ORs the masked high bits in) */
static inline QT_TARGET __m512i QT_(qt_q6x_load2)(const uint8_t *b0, const uint8_t *b1, size_t o) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + o))),
                              _mm256_loadu_si256((const __m256i *)(b1 + o)), 1);
}
static inline QT_TARGET __m512i QT_(qt_q6x_w2)(const uint8_t *b0, const uint8_t *b1, int j, int i) {
    int h = j / 4, s = j % 4;
    __m512i l = QT_(qt_q6x_load2)(b0, b1, 144 + 256 * (2 * h + (s & 1)) + 32 * i);
    __m512i q = QT_(qt_q6x_load2)(b0, b1, 1168 + 256 * h + 32 * i);
    l = _mm512_and_si512(s >> 1 ? _mm512_srli_epi16(l, 4) : l, _mm512_set1_epi8(0x0F));
    q = s == 0 ? _mm512_slli_epi16(q, 4) : s == 1 ? _mm512_slli_epi16(q, 2) : s == 3 ? _mm512_srli_epi16(q, 2) : q;
    return _mm512_ternarylogic_epi32(l, q, _mm512_set1_epi8(0x30), 0xF8); /* l | (q & 0x30) */
}
static inline QT_TARGET void QT_(qt_q6x_tile2)(int mr, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                               const uint8_t *g, int nvl, int stride) {
    const size_t gb = (size_t)(K / 256) * Q6X_BLOCK_BYTES;
    __m512 lo[MQ_MR], hi[MQ_MR];
    for (int m = 0; m < mr; m++) lo[m] = hi[m] = _mm512_setzero_ps();
    for (int sb = 0; sb < K / 256; sb++) {
        const uint8_t *b0 = g + (size_t)sb * Q6X_BLOCK_BYTES, *b1 = b0 + (size_t)stride * gb;
        if (R8_PREFETCH)
            for (int l = 0; l < Q6X_BLOCK_BYTES; l += 64) {
                _mm_prefetch((const char *)b0 + R8_PREFETCH + l, _MM_HINT_T1);
                _mm_prefetch((const char *)b1 + R8_PREFETCH + l, _MM_HINT_T1);
            }
        __m512 d = QT_(qt_rk_h2ps2)(b0, b1);
        for (int j = 0; j < 8; j++)
            for (int hh = 0; hh < 2; hh++) {
                int u = 2 * j + hh;
                __m128i sc8 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(b0 + 16 + 8 * u)),
                                                 _mm_loadl_epi64((const __m128i *)(b1 + 16 + 8 * u)));
                __m512 S = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
                __m512i wv[4];
                for (int i = 0; i < 4; i++) wv[i] = QT_(qt_q6x_w2)(b0, b1, j, 4 * hh + i);
                for (int m = 0; m < mr; m++) {
                    const uint8_t *xr = xq + m * xs;
                    int32_t q4[4];
                    memcpy(q4, xr + 256 * sb + 32 * j + 16 * hh, 16);
                    __m512i sm = _mm512_set1_epi32(-32 * qx_halves(xr, K)[8 * (8 * sb + j) + 4 * hh]);
                    for (int i = 0; i < 4; i++) sm = _mm512_dpbusd_epi32(sm, wv[i], _mm512_set1_epi32(q4[i]));
                    __m512 f = _mm512_cvtepi32_ps(sm), sd = _mm512_mul_ps(S, _mm512_set1_ps(qx_scale(xr, K)[8 * sb + j]));
                    if (hh) hi[m] = _mm512_fmadd_ps(f, sd, hi[m]);
                    else lo[m] = _mm512_fmadd_ps(f, sd, lo[m]);
                }
            }
    }
    float *y1 = y + (size_t)8 * stride;
    for (int m = 0; m < mr; m++) {
        __m512 o = _mm512_add_ps(lo[m], hi[m]);
        _mm256_storeu_ps(y + (size_t)m * ldy, _mm512_castps512_ps256(o));
        __m256 o1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(o), 1));
        if (nvl == 8) {
            _mm256_storeu_ps(y1 + (size_t)m * ldy, o1);
        } else {
            float t[8];
            _mm256_storeu_ps(t, o1);
            for (int r = 0; r < nvl; r++) y1[(size_t)m * ldy + r] = t[r];
        }
    }
}
#endif

static inline QT_TARGET void QT_(qt_q6x_tile)(int mr, int ng, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                              const uint8_t *g, int nvl, int stride) {
#if QT_VNNI
    if (ng == 2 && (mr > 1 || !Q6X_M1_YMM)) { /* M = 1: the 256-bit form below reads faster (Q6X_M1_YMM) */
        QT_(qt_q6x_tile2)(mr, y, ldy, xq, xs, K, g, nvl, stride);
        return;
    }
#else
    if (ng == 2 && mr > 2) { /* as qt_rk_tile */
        QT_(qt_q6x_tile)(mr, 1, y, ldy, xq, xs, K, g, 8, stride);
        QT_(qt_q6x_tile)(mr, 1, y + (size_t)8 * stride, ldy, xq, xs, K,
                         g + (size_t)stride * (K / 256) * Q6X_BLOCK_BYTES, nvl, stride);
        return;
    }
#endif
    const size_t gb = (size_t)(K / 256) * Q6X_BLOCK_BYTES;
    const uint8_t *gs[2];
    for (int q = 0; q < ng; q++) gs[q] = g + (size_t)stride * q * gb;
    __m256 lo[2][MQ_MR], hi[2][MQ_MR];
    for (int q = 0; q < ng; q++)
        for (int m = 0; m < mr; m++) lo[q][m] = hi[q][m] = _mm256_setzero_ps();
    for (int sb = 0; sb < K / 256; sb++) {
        const uint8_t *blk[2];
        __m256 d[2];
        for (int q = 0; q < ng; q++) {
            blk[q] = gs[q] + (size_t)sb * Q6X_BLOCK_BYTES;
            if (R8_PREFETCH)
                for (int l = 0; l < Q6X_BLOCK_BYTES; l += 64) _mm_prefetch((const char *)blk[q] + R8_PREFETCH + l, _MM_HINT_T1);
            d[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk[q]));
        }
        for (int j = 0; j < 8; j++)
            for (int hh = 0; hh < 2; hh++) {
                int u = 2 * j + hh;
                __m256 S[2];
                __m256i wv[2][4];
                for (int q = 0; q < ng; q++) {
                    S[q] = _mm256_mul_ps(d[q], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk[q] + 16 + 8 * u)))));
                    for (int i = 0; i < 4; i++) wv[q][i] = QT_(qt_q6x_w)(blk[q], j, 4 * hh + i);
                }
                for (int m = 0; m < mr; m++) {
                    const uint8_t *xr = xq + m * xs;
                    __m256i init = _mm256_set1_epi32(-32 * qx_halves(xr, K)[8 * (8 * sb + j) + 4 * hh]);
                    __m256 dx = _mm256_broadcast_ss(qx_scale(xr, K) + 8 * sb + j);
                    for (int q = 0; q < ng; q++) {
                        __m256 f = _mm256_cvtepi32_ps(QT_(qt_q6x_dot4)(init, wv[q], xr + 256 * sb + 32 * j + 16 * hh));
                        if (hh) hi[q][m] = _mm256_fmadd_ps(f, _mm256_mul_ps(S[q], dx), hi[q][m]);
                        else lo[q][m] = _mm256_fmadd_ps(f, _mm256_mul_ps(S[q], dx), lo[q][m]);
                    }
                }
            }
    }
    for (int q = 0; q < ng; q++) {
        float *yq = y + (size_t)8 * stride * q;
        int nq = q == ng - 1 ? nvl : 8;
        for (int m = 0; m < mr; m++) {
            __m256 o = _mm256_add_ps(lo[q][m], hi[q][m]);
            if (nq == 8) {
                _mm256_storeu_ps(yq + (size_t)m * ldy, o);
            } else {
                float t[8];
                _mm256_storeu_ps(t, o);
                for (int r = 0; r < nq; r++) yq[(size_t)m * ldy + r] = t[r];
            }
        }
    }
}

static QT_NOINLINE_TARGET void QT_(q6x_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K,
                                             int n0, int n1) {
    Q6X_ROWS_BODY(QT_(qt_q6x_tile))
}

/* ---- Q4_0, the file layout ----
 * qt_tile spends most of its time per block on each row alone (unpacking 16
 * bytes, a dot product with 8 partial lanes, a horizontal-add tree, the
 * scales assembled from scalars): M = 1 ran at a third of the memory
 * bandwidth. Here 8 (256-bit) or 16 (512-bit) consecutive rows go together
 * and their blocks are transposed in registers (4 dwords of each row's 16
 * bytes of nibbles, a 4x4 dword transpose in each 128-bit lane), so lane r
 * holds row r: each dot product advances every row by 4 weights against 4
 * broadcast activation bytes, the sum comes out whole per row (no horizontal
 * adds), and the unpacking is shared by all the input rows. The integer sum
 * is the block's exact sum of (q + 8) qx less 8 sum(qx), as qt_tile's, and the
 * float steps are qt_tile's per row: acc = fma(float(s), d dx, acc), plus its
 * zero upper half (fma(0, d dx, hi)) added at the end, so the results are
 * bit-identical to it. AVX2 sums the 8 vpmaddubsw products in int16 before
 * one vpmaddwd (|.| <= 8 * 2 * 15 * 127 = 30480: exact).
 * Memory: the rows of a group are read 18 bytes at a time each, 8 or 16
 * streams the hardware prefetchers do not follow (M = 1 fell to a third of
 * the bandwidth without help), so the kernel prefetches the group Q40_PF
 * groups ahead, which is one linear region (see Q40_PF). */
static inline QT_TARGET __m256i QT_(q40_ld2)(const uint8_t *p, size_t rb) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                   _mm_loadu_si128((const __m128i *)(p + 4 * rb)), 1);
}

/* the fp16 scales of 4 rows (row r at p + r rb) in one 64-bit word: scalar
 * loads and shifts, which leave the vector units to the dot products (a
 * vpgatherdd per block cost more than all the rest of the block) */
static inline QT_TARGET uint64_t QT_(q40_h4)(const uint8_t *p, size_t rb) {
    uint16_t h[4];
    for (int r = 0; r < 4; r++) memcpy(&h[r], p + r * rb, 2);
    return (uint64_t)h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
}
/* the 8 rows' scales of the block at p as half floats */
static inline QT_TARGET __m128i QT_(q40_h8)(const uint8_t *p, size_t rb) {
    return _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)QT_(q40_h4)(p, rb)),
                              _mm_cvtsi64_si128((long long)QT_(q40_h4)(p + 4 * rb, rb)));
}

/* 4 activation bytes in every 32-bit lane, broadcast from memory (a load:
 * through a general register it is two vector instructions) */
static inline QT_TARGET __m256i QT_(q40_bc8)(const uint8_t *p) { return _mm256_broadcastd_epi32(_mm_loadu_si32(p)); }
#if QT_VNNI
static inline QT_TARGET __m512i QT_(q40_bc16)(const uint8_t *p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }
#endif

/* one block of 8 rows (the block's first byte of row r at p + r rs) for mr
 * input rows; xb: the block's index in x */
static inline QT_TARGET void QT_(q40_step8)(int mr, __m256 *acc, __m256 *hi, const uint8_t *p, size_t rs,
                                            const uint8_t *xq, size_t xs, int K, int xb) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 d = _mm256_cvtph_ps(QT_(q40_h8)(p, rs));
    __m256i z0 = QT_(q40_ld2)(p + 2, rs), z1 = QT_(q40_ld2)(p + 2 + rs, rs);
    __m256i z2 = QT_(q40_ld2)(p + 2 + 2 * rs, rs), z3 = QT_(q40_ld2)(p + 2 + 3 * rs, rs);
    __m256i t0 = _mm256_unpacklo_epi32(z0, z1), t1 = _mm256_unpackhi_epi32(z0, z1);
    __m256i t2 = _mm256_unpacklo_epi32(z2, z3), t3 = _mm256_unpackhi_epi32(z2, z3);
    __m256i T[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                    _mm256_unpackhi_epi64(t1, t3)};
    __m256i L[4], H[4]; /* weights 4j..4j+3 and 16+4j.. of every row, + 8 */
    for (int j = 0; j < 4; j++) L[j] = _mm256_and_si256(T[j], m4), H[j] = _mm256_and_si256(_mm256_srli_epi16(T[j], 4), m4);
    for (int m = 0; m < mr; m++) {
        const uint8_t *xr = xq + m * xs;
        const uint8_t *xb4 = xr + 32 * xb;
        __m256i init = _mm256_set1_epi32(qx_corr(xr, K)[xb] / 16); /* -8 sum(qx) */
#if QT_VNNI
        __m256i s0 = _mm256_dpbusd_epi32(init, L[0], QT_(q40_bc8)(xb4 + 0));
        __m256i s1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), L[1], QT_(q40_bc8)(xb4 + 4));
        s0 = _mm256_dpbusd_epi32(s0, L[2], QT_(q40_bc8)(xb4 + 8));
        s1 = _mm256_dpbusd_epi32(s1, L[3], QT_(q40_bc8)(xb4 + 12));
        s0 = _mm256_dpbusd_epi32(s0, H[0], QT_(q40_bc8)(xb4 + 16));
        s1 = _mm256_dpbusd_epi32(s1, H[1], QT_(q40_bc8)(xb4 + 20));
        s0 = _mm256_dpbusd_epi32(s0, H[2], QT_(q40_bc8)(xb4 + 24));
        s1 = _mm256_dpbusd_epi32(s1, H[3], QT_(q40_bc8)(xb4 + 28));
        __m256i s = _mm256_add_epi32(s0, s1);
#else
        __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(L[0], QT_(q40_bc8)(xb4 + 0)),
                                      _mm256_maddubs_epi16(L[1], QT_(q40_bc8)(xb4 + 4)));
        __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(L[2], QT_(q40_bc8)(xb4 + 8)),
                                      _mm256_maddubs_epi16(L[3], QT_(q40_bc8)(xb4 + 12)));
        __m256i p2 = _mm256_add_epi16(_mm256_maddubs_epi16(H[0], QT_(q40_bc8)(xb4 + 16)),
                                      _mm256_maddubs_epi16(H[1], QT_(q40_bc8)(xb4 + 20)));
        __m256i p3 = _mm256_add_epi16(_mm256_maddubs_epi16(H[2], QT_(q40_bc8)(xb4 + 24)),
                                      _mm256_maddubs_epi16(H[3], QT_(q40_bc8)(xb4 + 28)));
        __m256i s = _mm256_add_epi32(init, _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p0, p1),
                                                                              _mm256_add_epi16(p2, p3)),
                                                             _mm256_set1_epi16(1)));
#endif
        __m256 t = _mm256_mul_ps(d, _mm256_broadcast_ss(qx_scale(xr, K) + xb));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), t, acc[m]);
        hi[m] = _mm256_fmadd_ps(_mm256_setzero_ps(), t, hi[m]);
    }
}

/* mr input rows x 8 consecutive weight rows (row r at w + r rb) */
static inline QT_TARGET void QT_(q40_tile8)(int mr, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                            const uint8_t *w, size_t rb) {
    __m256 acc[MQ_MR], hi[MQ_MR];
    for (int m = 0; m < mr; m++) acc[m] = hi[m] = _mm256_setzero_ps();
    for (int b = 0; b < K / 32; b++) {
        if (Q40_PF)
#pragma GCC unroll 8
            for (int l = 0; l < 8 * 18; l += 64) _mm_prefetch((const char *)w + Q40_PF * 8 * rb + 8 * 18 * b + l, _MM_HINT_T0);
        QT_(q40_step8)(mr, acc, hi, w + 18 * (size_t)b, rb, xq, xs, K, b);
    }
    for (int m = 0; m < mr; m++) _mm256_storeu_ps(y + (size_t)m * ldy, _mm256_add_ps(acc[m], hi[m]));
}

#if QT_VNNI
static inline QT_TARGET __m512i QT_(q40_ld4)(const uint8_t *p, size_t rb) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 4 * rb)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 8 * rb)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 12 * rb)), 3);
}

static inline QT_TARGET void QT_(q40_step16)(int mr, __m512 *acc, __m512 *hi, const uint8_t *p, size_t rs,
                                             const uint8_t *xq, size_t xs, int K, int xb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(QT_(q40_h8)(p, rs)), QT_(q40_h8)(p + 8 * rs, rs), 1));
    __m512i z0 = QT_(q40_ld4)(p + 2, rs), z1 = QT_(q40_ld4)(p + 2 + rs, rs);
    __m512i z2 = QT_(q40_ld4)(p + 2 + 2 * rs, rs), z3 = QT_(q40_ld4)(p + 2 + 3 * rs, rs);
    __m512i t0 = _mm512_unpacklo_epi32(z0, z1), t1 = _mm512_unpackhi_epi32(z0, z1);
    __m512i t2 = _mm512_unpacklo_epi32(z2, z3), t3 = _mm512_unpackhi_epi32(z2, z3);
    __m512i T[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                    _mm512_unpackhi_epi64(t1, t3)};
    __m512i L[4], H[4];
    for (int j = 0; j < 4; j++) L[j] = _mm512_and_si512(T[j], m4), H[j] = _mm512_and_si512(_mm512_srli_epi16(T[j], 4), m4);
    for (int m = 0; m < mr; m++) {
        const uint8_t *xr = xq + m * xs;
        const uint8_t *xb4 = xr + 32 * xb;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(qx_corr(xr, K)[xb] / 16), L[0], QT_(q40_bc16)(xb4 + 0));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), L[1], QT_(q40_bc16)(xb4 + 4));
        s0 = _mm512_dpbusd_epi32(s0, L[2], QT_(q40_bc16)(xb4 + 8));
        s1 = _mm512_dpbusd_epi32(s1, L[3], QT_(q40_bc16)(xb4 + 12));
        s0 = _mm512_dpbusd_epi32(s0, H[0], QT_(q40_bc16)(xb4 + 16));
        s1 = _mm512_dpbusd_epi32(s1, H[1], QT_(q40_bc16)(xb4 + 20));
        s0 = _mm512_dpbusd_epi32(s0, H[2], QT_(q40_bc16)(xb4 + 24));
        s1 = _mm512_dpbusd_epi32(s1, H[3], QT_(q40_bc16)(xb4 + 28));
        __m512 t = _mm512_mul_ps(d, _mm512_set1_ps(qx_scale(xr, K)[xb]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), t, acc[m]);
        hi[m] = _mm512_fmadd_ps(_mm512_setzero_ps(), t, hi[m]);
    }
}

/* mr input rows x 16 consecutive weight rows: q40_tile8 in 512-bit registers
 * (at M = 1 the 8-row form reads faster: 16 streams and a prefetch twice as far
 * ahead fill L1) */
static inline QT_TARGET void QT_(q40_tile16)(int mr, float *y, int ldy, const uint8_t *xq, size_t xs, int K,
                                             const uint8_t *w, size_t rb) {
    __m512 acc[MQ_MR], hi[MQ_MR];
    for (int m = 0; m < mr; m++) acc[m] = hi[m] = _mm512_setzero_ps();
    for (int b = 0; b < K / 32; b++) {
        if (Q40_PF)
#pragma GCC unroll 8
            for (int l = 0; l < 16 * 18; l += 64) _mm_prefetch((const char *)w + Q40_PF * 16 * rb + 16 * 18 * b + l, _MM_HINT_T0);
        QT_(q40_step16)(mr, acc, hi, w + 18 * (size_t)b, rb, xq, xs, K, b);
    }
    for (int m = 0; m < mr; m++) _mm512_storeu_ps(y + (size_t)m * ldy, _mm512_add_ps(acc[m], hi[m]));
}
#endif

/* TILE(mr, y, ldy, xq, xs, K, w, rb) with mr (1..5) a constant */
#define Q40_TILE_M(TILE, mr, ...)                                                                  \
    switch (mr) {                                                                                  \
    case 1: TILE(1, __VA_ARGS__); break;                                                           \
    case 2: TILE(2, __VA_ARGS__); break;                                                           \
    case 3: TILE(3, __VA_ARGS__); break;                                                           \
    case 4: TILE(4, __VA_ARGS__); break;                                                           \
    default: TILE(5, __VA_ARGS__); break;                                                          \
    }

/* Rows [n0, n1) of a Q4_0 matrix: 16 (VNNI, M > 1) and 8 consecutive rows at
 * a time, each group for every tile of up to MQ_MR input rows while it is in
 * L1, then the last rows through qt_tile (the same float steps per row). */
static QT_NOINLINE_TARGET void QT_(q40_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int M, int K,
                                             int n0, int n1) {
    const int wtype = GGML_TYPE_Q4_0;
    size_t rb = mm_row_bytes(wtype, K), xs = mm_qx_row_bytes(K);
    int n = n0;
    /* the first groups, which no group before them prefetched (a thread's
     * task starts cold) */
    size_t pre = (size_t)(n1 - n0 < Q40_PF * 8 ? n1 - n0 : Q40_PF * 8) * rb;
    for (size_t o = 0; o < pre; o += 64) _mm_prefetch((const char *)w + (size_t)n0 * rb + o, _MM_HINT_T0);
#if QT_VNNI
    for (; n + 16 <= n1 && M > 1; n += 16)
        for (int m = 0; m < M; m += MQ_MR)
            Q40_TILE_M(QT_(q40_tile16), M - m < MQ_MR ? M - m : MQ_MR, y + (size_t)m * ldy + n, ldy,
                       xq + (size_t)m * xs, xs, K, w + (size_t)n * rb, rb)
#endif
    for (; n + 8 <= n1; n += 8)
        for (int m = 0; m < M; m += MQ_MR)
            Q40_TILE_M(QT_(q40_tile8), M - m < MQ_MR ? M - m : MQ_MR, y + (size_t)m * ldy + n, ldy,
                       xq + (size_t)m * xs, xs, K, w + (size_t)n * rb, rb)
    for (; n < n1;) {
        int nr = n1 - n >= 4 ? 4 : 1;
        for (int m = 0; m < M; m += MQ_MR) {
            int mr = M - m < MQ_MR ? M - m : MQ_MR;
            MM_TILE_DISPATCH(QT_(qt_tile), y + (size_t)m * ldy + n, ldy, 1, xq + (size_t)m * xs, xs, K,
                             w + (size_t)n * rb, rb)
        }
        n += nr;
    }
}
#undef Q40_TILE_M

MQ_DISPATCH(QT_(qt_tile_mn), QT_(qt_tile), QT_TARGET)
MQ_TYPED(QT_(qt_tile_any), QT_(qt_tile_mn), QT_TARGET)

static QT_NOINLINE_TARGET void QT_(mmq_rows)(float *y, int ldy, const uint8_t *xq, const uint8_t *w, int wtype, int M,
                                             int K, int n0, int n1) {
    MQ_ROWS_BODY(QT_(qt_tile_any))
}

#undef QT_CAT2
#undef QT_CAT
#undef QT_
