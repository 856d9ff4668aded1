/* train_gguf.h — a trained model as a llama GGUF that specd and llama.cpp
 * load: the llama.* shape keys, the tensors under llama.cpp's names (token
 * embedding, per-layer attn_norm/q/k/v/output, ffn_norm/gate/up/down, the
 * output norm, the output head unless tied) with norms in F32 and matrices in
 * the chosen type, and the tokenizer metadata copied key by key, value by
 * value from a source GGUF (so the tokenizer hash is the source's). */
#ifndef SPECD_TRAIN_GGUF_H
#define SPECD_TRAIN_GGUF_H

#include "engine/gguf/gguf.h"
#include "engine/train/train_model.h"

/* Writes m to path. type: GGML_TYPE_F32 or GGML_TYPE_F16 for the matrices.
 * tok_src: every "tokenizer.*" key (and llama.vocab_size) is copied from it.
 * name: general.name. Returns 0, or -1 with err. */
int train_gguf_save(const train_model *m, const char *path, const gguf_file *tok_src, ggml_type type,
                    const char *name, const char *description, char *err, size_t errlen);

/* Copies every "tokenizer.*" key of src to w with its exact type (so the
 * tokenizer hash is src's). */
void train_gguf_copy_tokenizer(gguf_writer *w, const gguf_file *src);

/* Adds n tensors of a parameter table (train_model's, or an EAGLE head's)
 * laid out in params to w under their names: matrices in type (F32 or F16),
 * norms F32, GGUF dims (cols, rows). Returns 0, or -1 with err. */
int train_gguf_add_tensors(gguf_writer *w, const train_tensor *t, int n, const float *params, ggml_type type,
                           char *err, size_t errlen);

/* Reads a llama GGUF with F32/F16 tensors into a new train_model (to train
 * on from it). NULL with err when the file is not such a model. */
train_model *train_gguf_load(const char *path, char *err, size_t errlen);

#endif
