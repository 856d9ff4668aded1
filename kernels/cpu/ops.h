/* ops.h — the CPU backend's element-wise kernels and the KV cache write.
 * Single-threaded building blocks; cpu_backend.c decides how to fan them out. */
#ifndef SPECD_CPU_OPS_H
#define SPECD_CPU_OPS_H

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"

void ops_rmsnorm(simd_level lvl, float *y, const float *x, const float *w, int M, int D, float eps);
/* RoPE in two steps, so the tables (cos and sin of pos[m] * inv_freq[i], (M,
 * n_rot/2) each) can serve every q and k of a forward pass: */
void ops_rope_tables(float *cs, float *sn, const int32_t *pos, const float *inv_freq, int M, int half);
void ops_rope_apply(float *x, const float *cs, const float *sn, int M, int H, int E, int n_rot, int neox);
void ops_add(float *x, const float *y, int M, int D);
/* g (M, F) = silu(g) * u (M, F) on SIMD path lvl, with a polynomial exp of about
 * 1 ulp (silu_mul within 3e-7 relative). Finite g gives a finite result: g below
 * -88 counts as -88 (silu there is under 1e-36 in magnitude). */
void ops_silu_mul(simd_level lvl, float *g, const float *u, int M, int F);
/* Rows of k, v (n, kv_dim) to cache positions start .. start+n-1, converted
 * to the cache's element type. */
void ops_kv_write(simd_level lvl, const kv_layer_view *kv, const int32_t *blocks, int start, const float *k,
                  const float *v, int n, int kv_dim);
/* n floats to IEEE halves, round to nearest even (F16C or NEON where lvl has it; the
 * same bits as half.h's f32_to_fp16 for every input but NaN payloads), and
 * back (exact). */
void ops_f32_to_f16(simd_level lvl, uint16_t *dst, const float *src, int n);
void ops_f16_to_f32(simd_level lvl, float *dst, const uint16_t *src, int n);

#endif
