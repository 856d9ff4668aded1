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
void ops_kv_write(const kv_layer_view *kv, const int32_t *blocks, int start, const float *k, const float *v,
                  int n, int kv_dim);

#endif
