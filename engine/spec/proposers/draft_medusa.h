/* draft_medusa.h — the Medusa tree proposer (issue 18): from a sequence's
 * last target hidden state the heads (medusa.h) give, for each depth d, head
 * d's top-k tokens; the tree takes rank r at depth d as a child of the nodes
 * at depth d-1, its shape chosen once per (heads, shape) by best-first on the
 * heads' measured held-out rank probabilities (acc[d][r] - acc[d][r-1]: a
 * path's value is the product over its nodes, the expected-acceptance greedy
 * of the Medusa paper's sparse trees). Every node is deterministic (a point
 * mass), so the tree rule of tree.h is lossless at any temperature; no
 * "typical acceptance".
 *
 * The hidden state comes from the previous step's verify pass
 * (spec_tree_step_h: the row of the last accepted node, no extra pass); a
 * sequence without a fresh one (the first step after a prefill that did not
 * record it, or after another proposer stepped it) gets a plain step, which
 * records it.
 *
 * Budget from the verify cost curve (draft_medusa_set_curve), chosen by the
 * budget controller (budget.h budget_heads_nodes) from the evidence below: the shape's
 * nodes come best-first, so its first b nodes are the best b-node tree and
 * their path values sum to its expected accepted tokens E(b) (heads taken as
 * independent). Each step takes the b in 0..budget with the most expected
 * tokens per ms, (1 + E(b)) / (t(rows of the batch) / n + heads' ms), at the
 * batch's size: a compute-bound verify (big batch, steep curve) gets small
 * trees, and b = 0 is plain decoding (the hidden state is still recorded).
 * The heads' time per row and the host's speed against the curve are
 * learned from the steps (EWMA), and so is how far the heads' stored
 * accuracies hold: the path values are scaled by the accepted path lengths
 * the trees delivered over the values they promised (decaying sums over
 * about 50 proposing rows). The stored figures are top-k matches on greedy
 * held-out text; a sampled step accepts a deterministic node with the
 * target's probability of it, and served text is not held-out text
 * (measured: a T = 0.8 Medusa-only run on a Q8_0 target verified 3-node
 * trees at 0.81x plain before the scaling). Plain steps feed the ratio too:
 * every SHADOW_EVERY-th records the heads' top-1 chain for each fresh
 * sequence (a heads' pass, nothing verified), scored against the tokens the
 * sequence produces next (a deterministic node matches a sampled token with
 * the probability the tree rule accepts it). When the scaled choice is plain
 * for BUDGET_HEADS_PROBE (32) steps in a row, one step takes the unscaled choice.
 * Without a curve the whole budget is used.
 *
 * A sequence on the chain path keeps its state fresh through the table's
 * observe_hidden (every step hands it the row that sampled the last
 * token), so the engine's auto method can move it between the draft model
 * and Medusa at any step.
 *
 * The heads are a proposer table (drafter.h, draft_medusa_drafter): a pair
 * that holds it in slot SPEC_DRAFTER_MEDUSA hands every Medusa-enabled
 * sequence's hidden state to it after each prefill and step
 * (observe_hidden), and the tree step asks it for trees (propose_tree). The
 * calls below are the same proposer driven directly, for tests and `specd
 * verify`. Not yet: static path lists from config.
 *
 * Threading: the engine thread (the pair's). */
#ifndef SPECD_DRAFT_MEDUSA_H
#define SPECD_DRAFT_MEDUSA_H

#include "engine/spec/proposers/draft_tree.h"
#include "engine/spec/proposers/medusa.h"
#include "engine/spec/budget.h"

typedef struct draft_medusa draft_medusa;
typedef struct medusa_seq medusa_seq;

/* Binds heads to the pair's target (they must have been trained for it:
 * checked again here against sp->target_id) with scratch for sp->max_seqs
 * sequences. mh must outlive the result. NULL with err and *st (heads for
 * another target: ENGINE_ERR_INVALID; out of memory: ENGINE_ERR_OOM; st may
 * be NULL). */
draft_medusa *draft_medusa_create(spec_pair *sp, const medusa_heads *mh, engine_status *st, char *err,
                                  size_t errlen);
void draft_medusa_destroy(draft_medusa *dm); /* accepts NULL */

/* The target's verify cost curve t_rows[1..n] (budget_measure's; zeros
 * interpolated) for the per-step budget choice above (the budget
 * controller's budget_heads_nodes, from the evidence the heads keep). */
void draft_medusa_set_curve(draft_medusa *dm, const double *t_rows);
/* The choice itself (budget_heads_best, under the name the heads' tests
 * use): the best b in 0..n_shape for a step of n sequences, nr of them
 * proposing, given the nodes' path values (best-first), the curve, the host's
 * speed against it and the heads' ms per proposing row. */
int draft_medusa_pick_budget(const double *value, int n_shape, const cost_curve *curve, double speed, double heads_ms,
                             int n, int nr);
/* The learned acceptance ratio (delivered over promised path length; 1.0
 * before any tree). */
double draft_medusa_accept_ratio(const draft_medusa *dm);
/* The node budget the last step used (its tree's size; 0: a plain step). */
int draft_medusa_last_budget(const draft_medusa *dm);

/* The heads as a proposer table; a pair that takes it (spec_pair_set_drafter)
 * owns dm from then on (its destroy is draft_medusa_destroy). */
drafter *draft_medusa_drafter(draft_medusa *dm);
/* The heads' proposer behind a table, or NULL when d is another proposer. */
draft_medusa *draft_medusa_of(drafter *d);

/* Per-sequence state: the last hidden state and the token count it is for. */
medusa_seq *medusa_seq_create(draft_medusa *dm);
void medusa_seq_destroy(medusa_seq *ms); /* accepts NULL */
/* dst takes src's hidden state and token count (both of the same proposer). */
void medusa_seq_copy(medusa_seq *dst, const medusa_seq *src);

/* Records s's hidden state from the target's last forward, which must be the
 * prefill that sampled s's last token (call right after spec_seq_start or the
 * spec_seq_prefill that returned 1, before any other target forward). */
void medusa_seq_prefilled(draft_medusa *dm, medusa_seq *ms, const spec_seq *s);

/* The tree shape for these heads: nodes (parent, depth 1.., rank 0..) in
 * proposal order (parents first, siblings by rank), at most sh->budget nodes,
 * depth <= min(sh->depth, n_heads), rank < sh->topk. Returns the count. */
int draft_medusa_shape(const medusa_heads *mh, const tree_shape *sh, int16_t *parent, int8_t *depth, int8_t *rank);

/* Proposes Medusa trees for n sequences (M[i] is S[i]'s state) and steps
 * them through spec_tree_step_h, recording the new hidden states. Returns 0 or
 * -1 with err as spec_tree_step. info[i].draft_ms: the heads' share. */
int draft_medusa_step(draft_medusa *dm, spec_tree_ctx *tc, spec_seq **S, medusa_seq **M, int n, const tree_shape *sh,
                      const int *max_new, spec_step_info *info, char *err, size_t errlen);

/* The same step in phases, for one target pass over every proposer's rows:
 * draft_medusa_propose runs the heads and points *trees at the n trees
 * (valid until the next propose); the caller verifies them
 * (spec_tree_prepare / spec_pair_verify / spec_tree_finish) with the hidden
 * states going to draft_medusa_hidden(dm) (row i for S[i]), then
 * draft_medusa_finish records them and the budget's evidence. */
int draft_medusa_propose(draft_medusa *dm, spec_seq **S, medusa_seq **M, int n, const tree_shape *sh,
                         const spec_tree **trees, char *err, size_t errlen);
float *draft_medusa_hidden(draft_medusa *dm);
void draft_medusa_finish(draft_medusa *dm, spec_seq **S, medusa_seq **M, int n, spec_step_info *info);

#endif
