/* train_distill.h — distillation data from a target: the target continues
 * prompts (from a corpus, or written by itself from BOS), many sequences in
 * lockstep (one forward call per step for all of them, so its weights are
 * read once per step), and the top-k of the target's logits at every fed
 * position is kept from those same generating passes — the prompt's rows
 * from its prefill, each generated token's row from the step that fed it.
 * Each finished sequence becomes one training example (train_data.h):
 * inputs, the token that followed (the target's own pick) and the target's
 * top-k there. The same scheme as medusa_distill.h, keeping logits instead
 * of hidden states.
 *
 * Threading: the model's thread. */
#ifndef SPECD_TRAIN_DISTILL_H
#define SPECD_TRAIN_DISTILL_H

#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/train_data.h"

#include <stdint.h>

/* Continues n prompts (prompts[i], n_prompt[i] >= 1 tokens) by warm[i]
 * tokens at temperature warm_temp (warm NULL: none; a prompt the target
 * writes itself) and then gen tokens at temperature temp (0: argmax; else a
 * draw from softmax(logits / temp) with the splitmix64 state *rs), a
 * sequence ending early at an end-of-generation token of tok (may be NULL),
 * at most `batch` sequences per forward call, and appends each finished
 * sequence to d (d->K top-k per position; d->T >= n_prompt + warm + gen - 1
 * keeps all of it). Uses its own KV pool on m's backend. Returns the
 * examples added, or -1 with err. */
int64_t train_distill_add(train_data *d, model *m, const tokenizer *tok, const int32_t *const *prompts,
                          const int *n_prompt, const int *warm, int n, int gen, float temp, float warm_temp, int batch,
                          uint64_t *rs, char *err, size_t errlen);

/* What a finished sequence is handed to: its tokens (len), the top-k (len,
 * K) after feeding each, and with taps the residual stream entering each
 * tapped layer at each position (len, n_taps, D; else NULL). Returns 1
 * (kept), 0 (full: the run ends) or -1 (out of memory: the run fails). */
typedef int (*train_distill_sink)(void *ctx, const int32_t *tok, int len, const int32_t *kid, const float *kz,
                                  const float *feat);

/* train_distill_add's generation with the K top-k per position and, when
 * n_taps > 0, the target's residual stream entering layers[0..n_taps) at
 * every fed position (model_set_taps: on for the run, off after), every
 * finished sequence handed to sink. Returns the sum of the sink's returns,
 * or -1 with err. */
int64_t train_distill_run(model *m, const tokenizer *tok, const int32_t *const *prompts, const int *n_prompt,
                          const int *warm, int n, int gen, float temp, float warm_temp, int batch, uint64_t *rs, int K,
                          const int *layers, int n_taps, train_distill_sink sink, void *sink_ctx, char *err,
                          size_t errlen);

/* ids (K), vals (K) = the K largest of z (V), largest first (ties: lower id). */
void train_topk(int32_t *ids, float *vals, const float *z, int V, int K);

#endif
