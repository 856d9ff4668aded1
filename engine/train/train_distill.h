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

/* ids (K), vals (K) = the K largest of z (V), largest first (ties: lower id). */
void train_topk(int32_t *ids, float *vals, const float *z, int V, int K);

#endif
