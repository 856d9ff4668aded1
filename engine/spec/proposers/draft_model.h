/* draft_model.h — the separate draft model as a drafter (drafter.h): a small
 * llama-family model with its own KV pool that samples a chain of γ tokens,
 * one batched forward call per draft position, keeping each q.
 *
 * Its cache, for a sequence of n accepted tokens, holds [0, n−1−lag) where
 * lag is the number of accepted tokens it has not yet seen (1 after an
 * all-accepted step, more after steps another proposer or plain decoding
 * made); it catches up in one call before it drafts again. commit() truncates
 * it to the accepted prefix (a block-table length update).
 *
 * Threading: engine thread only. */
#ifndef SPECD_DRAFT_MODEL_H
#define SPECD_DRAFT_MODEL_H

#include "engine/spec/drafter.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdio.h>

/* Loads the draft at path for contexts up to max_ctx and checks it against the
 * target's tokenizer and vocabulary (a mismatch refuses the pair: NULL, err
 * names the first difference, *st = ENGINE_ERR_INVALID). A draft whose
 * weights do not fit returns NULL with *st = ENGINE_ERR_OOM (errkind.h): the
 * caller decodes without it. st may be NULL; ENGINE_OK on success. Install
 * it in the pair's draft slot (spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL,
 * d)) before spec_pair_ready: the pair reads its model and pool through the
 * table (drafter.h's model, kv_pool, seq_kv) and calls its reserve, which
 * allocates the KV pool (the target pool's shape) and the scratch for
 * batches of the pair's max_seqs; the drafter is not used before. Its
 * source is path; kv: its cache's element type (the target's). (pair_load.h's
 * spec_pair_load does all this.) */
drafter *draft_model_load(const char *path, backend *be, int max_ctx, kv_type kv, const tokenizer *target_tok,
                          int n_vocab, engine_status *st, char *err, size_t errlen);

/* The pieces, for the draft tree (draft_tree.c) and tests (cache
 * contents); the pair reads them through the table. Borrowed: owned by the
 * drafter. NULL for NULL or a drafter that is not a draft model. */
model *draft_model_model(drafter *d);
kv_pool *draft_model_pool(drafter *d);
kv_seq *draft_model_kv(drafter_seq *ds);

/* Registers tree scratch with the draft model (draft_tree_create does; NULL
 * unregisters): its table's propose_tree grows trees with it, and proposes
 * none without it. */
struct draft_tree;
void draft_model_set_trees(drafter *d, struct draft_tree *dt);

#endif
