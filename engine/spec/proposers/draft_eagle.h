/* draft_eagle.h — an EAGLE-3 draft head as a proposer (drafter.h; issue
 * 36): the head (model.h's eagle3 layout, one decoder layer) reads the
 * target's residual stream at three layers, fused by its fc, for every
 * position the target has committed, and drafts a chain or a tree from its
 * own output features after the first step, as it was trained to.
 *
 * Rows: head row i pairs token i+1 with the target's features at position i
 * (the target computed them feeding token i) and predicts token i+2. For a
 * sequence of n accepted tokens the head's cache holds the committed rows
 * [0, hc), the features of positions [hc, hc + np) wait in a host buffer
 * (observe_features fills it after every target pass), and a proposal first
 * feeds the waiting rows up to position n − 2 (one call), whose last row's
 * logits give draft 1 and whose final residual is the feature of the next
 * row (draft 1, that residual), and so on: γ drafts cost one catch-up call
 * plus γ − 1 one-row calls, batched over the sequences. The draft rows are
 * taken back at commit (they used the head's features, not the target's);
 * the next catch-up recomputes the accepted ones from the target's.
 *
 * Drafts are drawn from the head's own distribution q (the sequence's one
 * sampler config, over the target's vocabulary: a smaller draft vocabulary
 * maps through the head's d2t and leaves the rest at zero), so the chain
 * rule p/q with its residual is lossless at any temperature; at T = 0 the
 * argmax. A sequence without the features of every position (prefix cache
 * hits are turned off for it; a cache reset) proposes nothing until its
 * features are whole again.
 *
 * Trees (EAGLE-2's dynamic tree, drafter_i propose_tree): grown level by
 * level by draft_tree.h's one growth rule (the node budget to the highest
 * path probabilities; children drawn without replacement with their q rows
 * when sampling, the top k, deterministic, at T = 0), one batched head
 * forward per depth: the catch-up's last row is the root; every later
 * level re-feeds the tree so far under its ancestor mask, node c's row
 * being (its token, its parent's output feature) at RoPE position
 * hc + depth. The tree's rows are taken back before the proposal returns:
 * the head's cache is left at its committed rows. Trees, like every
 * proposer's, are not combined with coupled verification (engine.c).
 *
 * Not yet: training (specd train-eagle), the auto method choosing it. The
 * engine loads it from models.eagle (engine.c) for requests with
 * speculation.method eagle; with the engine's tree setting on (--tree) their
 * steps are trees, as the draft model's are.
 *
 * Threading: engine thread only. */
#ifndef SPECD_DRAFT_EAGLE_H
#define SPECD_DRAFT_EAGLE_H

#include "engine/spec/spec.h"

/* Loads the head at path on the pair's target backend for the pair's
 * sequences (max_seqs, contexts up to max_ctx) with a KV pool of `blocks`
 * blocks (0: as the target's), and checks it against the target: its hidden
 * size, its embedding's vocabulary, the tokenizer when the head carries one
 * (a converted head does), the target layers it reads (eagle3.target_layers,
 * or llama.cpp's eagle3.extract_layers, which must be layers of this target;
 * default 2, L/2 and L − 3 of the target's L, as the reference code). Heads
 * in llama.cpp's layout load too (model.h): d2t as I64 target ids, or as
 * offsets under "d2t.weight"; without their own token embedding or output
 * head they use the target's. NULL
 * with err and *st (ENGINE_ERR_INVALID for a head of another target or a bad
 * file, ENGINE_ERR_OOM) on failure. Install it with spec_pair_set_drafter(sp,
 * SPEC_DRAFTER_EAGLE, d): the pair then owns it and taps the target. */
drafter *draft_eagle_load(spec_pair *sp, const char *path, int blocks, engine_status *st, char *err, size_t errlen);

/* The target layers a loaded head reads (3), for reports and tests. */
int draft_eagle_layers(const drafter *d, int *layers);

#endif
