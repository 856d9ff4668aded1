/* draft_tree.h — tree proposers for spec_tree.h (issue 17): the draft model
 * grows a tree level by level, one batched draft forward per depth over all
 * sequences (EAGLE-2 style: the node budget goes to the candidates with the
 * highest cumulative path probability), and prompt-lookup n-gram trees merge
 * the continuations of every earlier match of the context's suffix.
 *
 * Losslessness at T > 0: how many children a node gets is decided from its
 * path and from its distribution q (its top probabilities) before any child
 * is drawn, never from the children drawn; children are then drawn without
 * replacement and node j's q row is q with its earlier siblings removed,
 * renormalised (tree.h's second mode). At T = 0 children are the top-k
 * tokens, deterministic. n-gram nodes are deterministic (point masses).
 *
 * The draft cache is left at the accepted tokens after a proposal (every
 * level re-feeds the tree so far under its ancestor mask, since cached rows
 * are visible to every later row): the accepted path is re-fed at the next
 * catch-up, so the draft cache needs no compaction.
 *
 * Threading: the engine thread (the pair's). */
#ifndef SPECD_DRAFT_TREE_H
#define SPECD_DRAFT_TREE_H

#include "engine/engine.h" /* tree_shape (budget, depth, topk): public, engine_info hands it out */
#include "engine/spec/spec_tree.h"

typedef struct draft_tree draft_tree;

/* One sequence's tree as it grows level by level: the frontier, each node's
 * path probability and grammar state. The growth rule (which candidates get
 * the node budget, how children are drawn, their q rows) is this one
 * implementation for every proposer that grows trees from its own
 * distributions: the draft model here and the EAGLE-3 head (draft_eagle.c),
 * each with its own forward per level. */
typedef struct {
    int fr[DRAFTER_MAX_NODES + 1], nf; /* the frontier: nodes whose children come next (-1 the root); nf 0: done */
    double score[DRAFTER_MAX_NODES];   /* each node's path probability: its q and its ancestors' */
    int32_t gst[DRAFTER_MAX_NODES];    /* constrained sequences: the grammar state after each node */
} tree_grow;

/* Starts g and t for a tree of shape sh on s: the root as the frontier, or
 * no tree (nf 0) without a budget or without room for its rows in max_ctx.
 * t->q is qrows ((DRAFTER_MAX_NODES, V), the caller's) when s samples, NULL
 * when greedy. */
void tree_grow_start(tree_grow *g, spec_tree *t, float *qrows, const spec_seq *s, const tree_shape *sh, int max_ctx);

/* Whether level `level` (1: the root's children) is to be grown. */
bool tree_grow_wants(const tree_grow *g, const spec_tree *t, const tree_shape *sh, int level);

/* Grows one level: lr[f] (V floats, over the target's vocabulary; masked in
 * place by a constrained sequence's grammar) are the logits after frontier
 * node g->fr[f] for f < g->nf. Turns them into distributions in fq (nf, V)
 * (the sequence's sampler config; greedy: the T = 1 softmax, for ranking),
 * gives the budget to the candidates with the highest path probability,
 * appends the children to t (top ranks when greedy, deterministic; else
 * drawn without replacement, q rows into qrows as t->q) and makes them the
 * frontier. Returns how many were added (0: the tree is done). */
int tree_grow_level(tree_grow *g, spec_tree *t, float *qrows, spec_seq *s, sampler *smp, float *const *lr, float *fq,
                    const tree_shape *sh, int level, int V);

/* Scratch for proposals of up to sp->max_seqs sequences (the only
 * allocation), registered with the pair's draft model, which then proposes
 * trees through its table (drafter_i propose_tree) until
 * draft_tree_destroy. NULL without a draft model or when out of memory. */
draft_tree *draft_tree_create(spec_pair *sp);
void draft_tree_destroy(draft_tree *dt); /* accepts NULL */

/* Draft-model trees for n sequences, sh[i] the shape of sequence i (budget 0:
 * no tree for it); out[i].q points into dt (valid until the next call).
 * Returns 0, or -1 with err (then every out[i] is empty and each draft cache
 * is back at its accepted tokens). */
int draft_tree_propose(draft_tree *dt, spec_seq **S, int n, const tree_shape *sh, spec_tree *out, char *err,
                       size_t errlen);

/* An n-gram tree from tokens[0, n_tokens): for the longest suffix length in
 * [nmin, nmax] with an earlier match, every match's continuation is merged
 * into a trie (siblings by how many matches continue that way, then by
 * recency); deterministic nodes. Returns the node count (0: no match). */
int ngram_tree_propose(const int32_t *tokens, int n_tokens, int nmin, int nmax, const tree_shape *sh, spec_tree *out);

/* Proposes a tree of shape sh[i] for each of n sequences and steps them all
 * through spec_tree_step (one target pass). how[i] picks the proposer (NULL:
 * the draft model for all): DRAFT the draft model (plain without one or dt),
 * NGRAM prompt lookup (the pair's n-gram lengths), AUTO the lookup when it
 * matches else the draft model, OFF plain; budget 0 is a plain step too. All
 * draft-model trees of the batch share one draft forward per depth; a draft
 * failure leaves those sequences a plain step (counted in draft_failures).
 * info[i].method is the proposer's slot (-1 plain), draft_ms its share of the
 * proposal time. */
int draft_tree_step(draft_tree *dt, spec_tree_ctx *tc, spec_seq **S, int n, const tree_shape *sh,
                    const spec_method *how, const int *max_new, spec_step_info *info, char *err, size_t errlen);

#endif
