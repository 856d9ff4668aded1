/* mkmodel.h — writes llama GGUF models: seeded random weights of any shape, a
 * function-preserving widening of a real model, or a re-typed copy of one.
 * Used by `specd mkmodel`, the demo-model path and tests; not a loader. */
#ifndef SPECD_CLI_MKMODEL_H
#define SPECD_CLI_MKMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"

/* What to build. Zero / NULL / -1 fields mean "default" (random models) or
 * "keep the source's value" (widening); mkmodel_opts_init sets them so. */
typedef struct {
    int n_layers, dim, n_heads, n_kv_heads, head_dim, ff, vocab, ctx;
    int type;                   /* ggml_type of the matrices; -1 = default (F32, or the source's for --widen) */
    uint64_t seed;
    const char *tokenizer_path; /* random only: copy tokenizer.* from this GGUF (NULL = synthetic vocab) */
    const char *chat_template_path; /* random only: a Jinja chat template file written as tokenizer.chat_template */
    float rope_base;            /* random only; 0 = 10000 (500000 with rope_llama3) */
    float eps;                  /* random only; 0 = 1e-5 */
    bool tied;                  /* random only: no output.weight (the head reuses token_embd) */
    bool rope_llama3;           /* random only: Llama-3 rope scaling as rope_freqs.weight (factor 8,
                                 * low/high 1/4, original context 8192); no rope.scaling.* keys */
    const char *name;           /* general.name; NULL = "specd-random" / the source's */
    const char *arch;           /* random only: "llama" (NULL), "qwen2" (QKV biases, NeoX RoPE, qwen2.* keys,
                                 * rope base 1e6), "qwen3" (per-head q/k RMSNorm attn_{q,k}_norm, no biases,
                                 * NeoX RoPE, qwen3.* keys, rope base 1e6) or "mistral" (llama with
                                 * llama.attention.sliding_window) */
    int sliding_window;         /* random only, arch "mistral": the window; 0 = 8 */
} mkmodel_opts;

/* What was written (for the one-line summary). */
typedef struct {
    int n_layers, dim, n_heads, n_kv_heads, head_dim, ff, vocab, ctx;
    int type;                   /* ggml_type of the matrices */
    bool tied;
    uint64_t n_params;          /* elements of all tensors */
    uint64_t file_bytes;
    char arch[16];              /* general.architecture written ("llama", "qwen2", "qwen3") */
} mkmodel_info;

void mkmodel_opts_init(mkmodel_opts *o);

/* All three return 0, or -1 with a one-line reason in err (bad option, shape
 * that cannot work, unreadable source, write failure); they never abort on bad
 * input. info may be NULL. Output is deterministic: same options and seed give
 * byte-identical files. Single-threaded; no global state. */

/* A llama model with random weights: matrices ~ N(0, 1/fan_in), norms 1 + small
 * noise. Without o->tokenizer_path, a synthetic byte-fallback SPM vocabulary of
 * o->vocab tokens (>= 259) that can tokenize any text. */
int mkmodel_random(const char *out_path, const mkmodel_opts *o, mkmodel_info *info,
                   char *err, size_t errlen);

/* Function-preserving widening of the llama model at src_path to the shape in o
 * (dim, n_heads, n_kv_heads, head_dim, ff, n_layers: each >= the source's;
 * head_dim a multiple of the source's). Logits equal the source's up to float
 * rounding when the type stays F32. o->type -1 keeps the source's matrix type;
 * o->ctx and o->name override; vocab/tokenizer/rope/eps/tied options are errors. */
int mkmodel_widen(const char *out_path, const char *src_path, const mkmodel_opts *o,
                  mkmodel_info *info, char *err, size_t errlen);

/* Copy of src_path with every 2-D tensor converted to type (F32/F16/BF16/Q8_0)
 * and 1-D tensors as F32; all metadata kept, general.file_type updated. */
int mkmodel_quantize(const char *out_path, const char *src_path, int type,
                     mkmodel_info *info, char *err, size_t errlen);

/* Row conversion: ggml_quantize_row / ggml_dequantize_row (kernels/ggml_type.h),
 * exactly as the shared contracts say (f16/bf16: round to nearest even; Q8_0:
 * d = max|w|/127 stored as f16, q = roundf(w / d) with the f32 d). n must be a
 * multiple of the block size (32 for Q8_0). Return false on an unsupported
 * type or a bad n. */
bool mkmodel_row_from_f32(void *dst, int type, const float *src, uint64_t n);
bool mkmodel_row_to_f32(float *dst, int type, const void *src, uint64_t n);

/* llama.cpp's general.file_type for a matrix type (0 F32, 1 F16, 7 Q8_0, 32 BF16). */
uint32_t mkmodel_ftype(int type);

#endif
