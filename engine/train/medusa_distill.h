/* medusa_distill.h — self-distillation data for Medusa training (issue 18):
 * the target generates continuations of prompts, many sequences in lockstep
 * (one forward call per step for all of them, so the weights are read once
 * per step, not once per sequence), and every position's final-normed hidden
 * state is kept from the generating passes themselves — the prompt's rows
 * from its prefill, each generated token's row from the step that fed it —
 * so the training data costs exactly one target pass per position, with no
 * second hidden-state pass. Each position then sees its whole sequence
 * (medusa_data_add's chunking does not apply).
 *
 * Why: heads trained on the target's own continuations learn what the target
 * does, not what the corpus says; at temperature 0 (greedy continuations)
 * they learn exactly the tokens greedy verification accepts — on the tiny
 * TinyStories target head 1's top-1 accuracy is 0.44 against 0.11 for T = 1
 * continuations and 0.05 for corpus text (README "Medusa heads").
 *
 * Threading: the model's thread. */
#ifndef SPECD_MEDUSA_DISTILL_H
#define SPECD_MEDUSA_DISTILL_H

#include "engine/train/medusa_train.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdint.h>

/* Continues n prompts (prompts[i], n_prompt[i] >= 1 tokens) by warm[i]
 * tokens drawn at temperature warm_temp (warm NULL: none) and then gen tokens
 * at temperature temp (n_prompt[i] + warm[i] + gen <= m->mp.max_ctx; 0: the
 * target's argmax; > 0: a sample of softmax(logits / T) drawn with the
 * splitmix64 state *rs), stopping a sequence early at an end-of-generation
 * token of tok (may be NULL: never), with at most `batch` sequences per
 * forward call. A warm-up is a prompt the target writes itself (--target-
 * prompts: BOS, then sampled tokens) in the same pass as its continuation, so
 * its positions cost one target pass, not a generating pass plus a prefill.
 * Appends every position of each prompt + continuation that has a next token
 * to d (hidden state and labels as medusa_data_add does), stopping when d is
 * full; d NULL: generation only (for out). out (may be NULL): (n, max_ctx)
 * tokens of each finished sequence, with their lengths in out_len. Uses its
 * own KV pool on m's backend. At temp 0 without a warm-up the tokens and
 * hidden states do not depend on the batch size (the forward pass is
 * batch-invariant); draws follow the order of the steps, so they do. Returns
 * the positions added, or -1 with err. */
int64_t medusa_distill_add(medusa_data *d, model *m, const tokenizer *tok, const int32_t *const *prompts,
                           const int *n_prompt, const int *warm, int n, int gen, float temp, float warm_temp,
                           int batch, uint64_t *rs, int32_t *out, int *out_len, char *err, size_t errlen);

#endif
