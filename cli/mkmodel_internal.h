/* mkmodel_internal.h — what the mkmodel files share (cli/mkmodel.h is the
 * contract): limits, counter-based randomness, the tensor emitter, metadata
 * helpers and the source-model reader. Files: mkmodel_common.c (those
 * helpers), mkmodel_vocab.c (the synthetic SPM vocabulary), mkmodel.c (random
 * models), mkmodel_widen.c (widening), mkmodel_quant.c (re-typing). */
#ifndef SPECD_MKMODEL_INTERNAL_H
#define SPECD_MKMODEL_INTERNAL_H

#include "cli/mkmodel.h"
#include "engine/util.h"
#include "kernels/ggml_type.h"

#define MK_MAX_DIM (1 << 20)
#define MK_MAX_LAYERS 4096
#define MK_MAX_VOCAB (1 << 20)
#define MK_MAX_PARAMS (1ull << 37)
#define MK_MIN_VOCAB 259 /* <unk> <s> </s> + 256 byte tokens */

static inline bool type_supported(int type) { return ggml_type_convertible(type); }

/* ---- counter-based randomness ---------------------------------------------
 * Value i of tensor NAME depends only on (seed, NAME, i): files do not depend
 * on the order tensors are built in, and widening can fill any sub-block. */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t mk_tensor_key(uint64_t seed, const char *name);

/* Approximately standard normal: Irwin–Hall sum of four 16-bit uniforms
 * (variance-matched; tails cut at 3.5 sigma, which suits weights). */
static inline float rnd_normal(uint64_t key, uint64_t i)
{
    uint64_t r = mix64(key + i * 0x9e3779b97f4a7c15ull);
    float s = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) +
              (float)((r >> 32) & 0xffff) + (float)(r >> 48);
    return (s - 131070.0f) * (1.0f / 37837.2f);
}

void mk_fill_normal(float *x, uint64_t n, uint64_t key, uint64_t first, float std);

/* ---- tensor emission ----------------------------------------------------- */

typedef struct {
    gguf_writer *w;
    uint64_t n_params;
    char *err;
    size_t errlen;
} emitter;

/* Converts x (ne1 rows of ne0 floats; ne1 == 0 means a vector) to type and adds it. */
int mk_emit(emitter *e, const char *name, int type, uint64_t ne0, uint64_t ne1, const float *x);
/* calloc'd floats, or NULL with err set. */
float *mk_falloc(uint64_t n, char *err, size_t errlen);

/* ---- metadata and shapes ---------------------------------------------------- */

/* Copies the keys of src that start with prefix, with their exact types. */
int mk_copy_kv_prefix(gguf_writer *w, const gguf_file *src, const char *prefix, char *err, size_t errlen);
/* info->file_bytes from the written file. */
void mk_finish_info(mkmodel_info *info, const char *path);
int mk_check_range(const char *what, long v, long lo, long hi, char *err, size_t errlen);
uint64_t mk_count_params(int L, int D, int H, int KV, int hd, int FF, int V, bool tied, int n_rot_freqs);
/* The llama.* shape keys. */
void mk_set_llama_shape(gguf_writer *w, int ctx, int D, int L, int FF, int H, int KV, int n_rot,
                     int hd, float eps, float base);
/* tokenizer.* of a synthetic byte-fallback SPM vocabulary of n_vocab tokens (mkmodel_vocab.c). */
int mk_write_synth_tokenizer(gguf_writer *w, uint32_t n_vocab, char *err, size_t errlen);

/* ---- reading a source model ----------------------------------------------- */

typedef struct {
    gguf_file *f;
    const char *path;
    int D, L, H, KV, hd, n_rot, FF, V, ctx;
    float eps, base;
    int type; /* matrix type, from blk.0.attn_q.weight */
    bool tied;
} src_model;

/* Opens path and reads its llama shape (s->f stays open: gguf_close it). */
int mk_src_open(src_model *s, const char *path, char *err, size_t errlen);
/* Loads tensor NAME as F32; it must have shape [ne0, ne1] (ne1 == 0: a vector).
 * Returns a malloc'd array or NULL with err set. */
float *mk_src_load(const src_model *s, const char *name, uint64_t ne0, uint64_t ne1, char *err, size_t errlen);

#endif
