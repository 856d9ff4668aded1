/* attention.cu — softmax(q k^T / sqrt(E) + mask) v over the paged KV cache,
 * one 256-thread block per (batch row, head). Each of the 8 warps walks a
 * strided share of the visible keys with an online softmax (lane d holds dims
 * d, d+32, ... of q and of its accumulator); the warps' partial results are
 * merged through shared memory. Visibility is the CPU reference's: causal or
 * the per-sequence ancestor mask over new positions, plus the sliding window. */
#include "kernels/cuda/ops.h"

#include <cuda_fp16.h>
#include <math.h>

#define ATT_WARPS 8
#define ATT_MAX_EPL 8 /* head dim <= 256 */

/* The position of new row i for the sliding window (see attn_seq.window). */
__device__ static int attn_pos(const cu_seq *s, int i) {
    if (!s->mask) return s->n_past + i;
    int c = 0;
    for (int j = 0; j < s->n_new; j++) c += s->mask[(size_t)i * s->n_new + j] != 0;
    return s->n_past + (c > 0 ? c - 1 : 0);
}

/* a cache element as float: F32 as is, F16 widened exactly */
__device__ static inline float kv_ld(const float *p, size_t i) { return p[i]; }
__device__ static inline float kv_ld(const __half *p, size_t i) { return __half2float(p[i]); }

template <typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32) attention_kernel(float *out, const float *q, const T *kc,
                                                                   const T *vc, size_t block_stride, int B,
                                                                   const cu_seq *seqs, const int32_t *row_seq, int H,
                                                                   int Hkv, int E) {
    extern __shared__ float sm[]; /* (ATT_WARPS, E) accumulators, then max and sum per warp */
    int r = blockIdx.x, h = blockIdx.y;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const cu_seq *s = &seqs[row_seq[r]];
    int i = r - s->row0, kvh = h / (H / Hkv);
    int epl = (E + 31) / 32;
    float scale = 1.0f / sqrtf((float)E);

    float qv[ATT_MAX_EPL], acc[ATT_MAX_EPL];
    const float *qr = q + ((size_t)r * H + h) * E;
#pragma unroll
    for (int t = 0; t < ATT_MAX_EPL; t++) {
        int d = lane + 32 * t;
        qv[t] = t < epl && d < E ? qr[d] * scale : 0.0f;
        acc[t] = 0.0f;
    }
    int n_keys = s->n_past + s->n_new;
    int lo = s->window > 0 ? attn_pos(s, i) - s->window + 1 : 0;
    int p0 = lo > 0 ? (lo < s->n_past ? lo : s->n_past) : 0;
    float mx = -INFINITY, sum = 0.0f;
    for (int p = p0 + warp; p < n_keys; p += ATT_WARPS) {
        int j = p - s->n_past;
        if (j >= 0) {
            if (s->mask ? !s->mask[(size_t)i * s->n_new + j] : j > i) continue;
            if (lo > 0 && attn_pos(s, j) < lo) continue;
        }
        /* block layout (Hkv, B, E): head kvh's run, then the position */
        size_t off = (size_t)s->blocks[p / B] * block_stride + ((size_t)kvh * B + p % B) * E;
        const T *kp = kc + off, *vp = vc + off;
        float d = 0.0f;
#pragma unroll
        for (int t = 0; t < ATT_MAX_EPL; t++) {
            int e = lane + 32 * t;
            if (t < epl && e < E) d = fmaf(qv[t], kv_ld(kp, e), d);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
        float nm = fmaxf(mx, d);
        float corr = mx == -INFINITY ? 0.0f : __expf(mx - nm);
        float pw = __expf(d - nm);
        sum = sum * corr + pw;
#pragma unroll
        for (int t = 0; t < ATT_MAX_EPL; t++) {
            int e = lane + 32 * t;
            if (t < epl && e < E) acc[t] = acc[t] * corr + pw * kv_ld(vp, e);
        }
        mx = nm;
    }

    float *wacc = sm, *wmx = sm + ATT_WARPS * E, *wsum = wmx + ATT_WARPS;
#pragma unroll
    for (int t = 0; t < ATT_MAX_EPL; t++) {
        int e = lane + 32 * t;
        if (t < epl && e < E) wacc[warp * E + e] = acc[t];
    }
    if (lane == 0) {
        wmx[warp] = mx;
        wsum[warp] = sum;
    }
    __syncthreads();
    float gm = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) gm = fmaxf(gm, wmx[w]);
    float tot = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        if (wmx[w] != -INFINITY) tot += wsum[w] * __expf(wmx[w] - gm);
    float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    float *orow = out + ((size_t)r * H + h) * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (wmx[w] != -INFINITY) v += wacc[w * E + e] * __expf(wmx[w] - gm);
        orow[e] = v * inv;
    }
}

extern "C" void cu_attention(cudaStream_t st, float *out, const float *q, const void *kc, const void *vc, int f16,
                             size_t block_stride, int block_size, const cu_seq *seqs, const int32_t *row_seq, int M,
                             int H, int Hkv, int E) {
    if (M <= 0) return;
    if (E > 32 * ATT_MAX_EPL) cu_die(__FILE__, __LINE__, "cu_attention", "head dim above 256");
    size_t smem = (size_t)ATT_WARPS * (E + 2) * sizeof(float);
    if (f16)
        attention_kernel<__half><<<dim3(M, H), ATT_WARPS * 32, smem, st>>>(
            out, q, (const __half *)kc, (const __half *)vc, block_stride, block_size, seqs, row_seq, H, Hkv, E);
    else
        attention_kernel<float><<<dim3(M, H), ATT_WARPS * 32, smem, st>>>(
            out, q, (const float *)kc, (const float *)vc, block_stride, block_size, seqs, row_seq, H, Hkv, E);
    CU_CHECK_LAUNCH();
}
