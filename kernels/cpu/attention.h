/* attention.h — the CPU backend's attention over the paged KV cache, one head
 * of one sequence per call (cpu_backend.c fans the heads out over threads). */
#ifndef SPECD_CPU_ATTENTION_H
#define SPECD_CPU_ATTENTION_H

#include "kernels/backend.h"
#include "kernels/cpu/simd.h"

/* Attention of head h of one sequence for all its new rows, on SIMD path lvl:
 * out rows row0 .. row0+n_new-1 (head h's E floats of each), nothing else.
 * scores: scratch of at least n_past + s->n_new floats; stage: scratch of
 * B * E floats, used for an F16 cache (kv->type), not overlapping scores. */
void ops_attention_head(simd_level lvl, float *out, const float *q, const kv_layer_view *kv, const attn_seq *s, int h,
                        int H, int Hkv, int E, float *scores, float *stage);

#endif
