/* spec_tree.h — one tree speculation step in the engine (issue 17): the
 * sequences' drafted trees become verify rows (positions root + depth, the
 * ancestor mask) of ONE target forward over the whole ragged batch; each
 * sequence's tree is accepted by the lossless rule of tree.h, its accepted
 * path's KV rows are moved together (kv_seq_move) and the rest truncated, and
 * tokens, drafters and stats are committed as spec.c's chain step does.
 *
 * Kept out of spec.c so the chain path is untouched; it reads spec_seq and
 * spec_pair through spec.h. Not yet: grammar-constrained sequences (refused
 * with an error: each node would need its own grammar state copy), logprobs,
 * and prefix publishing on a tree step (the next chain step publishes).
 * Proposers give the trees through drafter_i's propose_tree (draft_tree.h
 * asks them); every finished step hands the target's hidden state to the
 * sequence's needs_hidden proposers (drafter_i observe_hidden).
 *
 * Threading: the engine thread (the pair's). */
#ifndef SPECD_SPEC_TREE_H
#define SPECD_SPEC_TREE_H

#include "engine/spec/spec.h"
#include "engine/spec/tree.h"

/* One sequence's drafted tree: a proposer's drafter_tree (drafter.h). */
typedef drafter_tree spec_tree;

typedef struct spec_tree_ctx spec_tree_ctx;

/* Scratch for tree steps of up to sp->max_seqs sequences of up to
 * DRAFTER_MAX_NODES nodes; the logits go to the pair's verify scratch, grown
 * here to max_seqs x (DRAFTER_MAX_NODES + 1) rows. NULL when out of memory.
 * The caller owns it; it must not outlive sp. */
spec_tree_ctx *spec_tree_create(spec_pair *sp);
void spec_tree_destroy(spec_tree_ctx *tc); /* accepts NULL */

/* Tests and `specd verify --broken` only: the acceptance variant (tree.h). */
void spec_tree_set_variant(spec_tree_ctx *tc, tree_variant v);

/* Steps n sequences with one tree each. A tree deeper than max_new[i] − 1 is
 * cut to that depth (so at most max_new[i] tokens are appended), and one the
 * context cannot hold becomes a plain step. Returns 0, or -1 with err (target
 * failure or a refused sequence: nothing changed). info[i] as spec.h's, with
 * gamma = nodes verified and accepted = path length. */
int spec_tree_step(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                   spec_step_info *info, char *err, size_t errlen);

/* The same step, also returning in hidden (n, D) host (may be NULL) each
 * sequence's final-normed target hidden state at the row whose logits gave
 * its last appended token (the root row, or the last accepted node's): what
 * a Medusa proposer reads for the next tree (model_hidden_rows, no extra pass). */
int spec_tree_step_h(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                     spec_step_info *info, float *hidden, char *err, size_t errlen);

/* The same step in phases (spec.h's chain phases, for one target pass over
 * every proposer's rows): spec_tree_prepare cuts each tree (max_new, the
 * grammar, the context) and writes its verify rows to ms[i] (pointing into
 * tc, valid until its next prepare); returns the rows in all or -1 with err
 * (nothing changed). After spec_pair_verify ran them, spec_tree_finish
 * accepts and commits sequences S[i0, i0+n), whose rows start at `logits`
 * (row row0 of the call), each with its rows' share of call_ms over
 * call_rows; hidden as spec_tree_step_h's, row k for S[i0+k]. A tree context
 * holds one prepared batch at a time: a second batch in the same pass needs
 * its own context. */
int spec_tree_prepare(spec_tree_ctx *tc, spec_seq **S, int n, const spec_tree *trees, const int *max_new,
                      spec_step_info *info, model_seq *ms, char *err, size_t errlen);
void spec_tree_finish(spec_tree_ctx *tc, spec_seq **S, int i0, int n, float *logits, int row0, double call_ms,
                      int call_rows, spec_step_info *info, float *hidden);

/* Asks the proposers for n sequences' trees (n <= 64), through their
 * tables (drafter_i propose_tree) only: how[i] names the proposer (DRAFT
 * the draft model, NGRAM the lookup, AUTO the lookup when it matches and
 * else the draft model, MEDUSA the heads, OFF none; NULL: DRAFT for all),
 * each tree within sh[i] (budget 0: no tree). The sequences of one proposer
 * go to it in one batched call; a proposer that fails leaves its sequences
 * a plain step (counted in draft_failures). Fills t[i] (q rows valid until
 * that proposer's next call), slot[i] (the proposer, -1 none) and
 * draft_ms[i] (its share of the proposal time). Returns 0, or -1 with err
 * for a batch over the limit. */
int spec_tree_propose(spec_pair *sp, spec_seq **S, int n, const tree_shape *sh, const spec_method *how, spec_tree *t,
                      int *slot, double *draft_ms, char *err, size_t errlen);
/* After those trees were verified (spec_tree_finish filled info): each
 * step's proposer and time in info and the sequence's stats, its
 * per-proposer counters, and each proposer's tree_done with its own
 * sequences' results. */
void spec_tree_note(spec_pair *sp, spec_seq **S, int n, const spec_tree *t, const tree_shape *sh, const int *slot,
                    const double *draft_ms, spec_step_info *info);

#endif
