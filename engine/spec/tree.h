/* tree.h — tree speculation without models: the verify rows of a drafted tree
 * (positions n_past + depth and the ancestor mask) and the lossless
 * multi-candidate acceptance rule over it, as pure functions over probability
 * vectors so they can be checked exactly by enumeration (tests/spec/test_tree_exact.c).
 *
 * A tree is drafter.h's node list: node i has a token and a parent < i (−1 =
 * the root, the sequence's last accepted token); siblings are tried in index
 * order, which must be the order the drafter drew them in.
 *
 * The rule (SpecInfer's multi-step speculative sampling, generalised):
 * start at the root with r = p_root. For each child c_k of the current node,
 * in order, with q_k the law c_k was drawn from GIVEN its earlier siblings:
 *   accept c_k with probability min(1, r(c_k) / q_k(c_k)) (point mass: r(c_k));
 *   on rejection r ← normalize(max(0, r − q_k)) (point mass: r without c_k).
 * If a child is accepted, continue at it with r = the target's p there; if
 * every child is rejected, emit a correction drawn from r; at an accepted leaf
 * emit a bonus drawn from its p. Greedy (T = 0, p one-hot): follow the child
 * equal to the argmax, else emit the argmax.
 *
 * The three proposal modes differ only in what q_k is, and the drafter writes
 * it as node k's q row (drafter.h: "the distribution it was sampled from"):
 *   i.i.d. children (SpecInfer, with replacement): q_k = q for every sibling;
 *   without replacement (Sequoia, Gumbel top-k): q_k = q with the earlier
 *     siblings' tokens removed, renormalised;
 *   deterministic children (top-k picks, n-gram, Medusa): a point mass.
 * They may be mixed among siblings.
 *
 * Proof sketch. One stage "x ~ q', accept with min(1, r/q'), else go on with
 * r' = normalize(max(0, r − q'))" outputs a token with law r provided that,
 * after a rejection of x, what follows outputs a token with law r' — for every
 * rejected x (it may depend on x): P(out = t) = q'(t)·min(1, r(t)/q'(t)) +
 * P(reject)·r'(t) = min(q'(t), r(t)) + (r(t) − q'(t))⁺ = r(t), because
 * P(reject) = Σ (r − q')⁺ is the normaliser of r'. The next sibling is such a
 * stage for target r' whose proposal q_{k+1} is the law of c_{k+1} given the
 * earlier siblings (so it may depend on the rejected ones: without
 * replacement is allowed, it only has to be the law used), and the last
 * correction is a draw from r' itself; by induction on the number of
 * siblings left, the first emitted token has law p_root. A point mass at d is
 * the case q' = e_d: min(1, r(d)) = r(d) and (r − e_d)⁺ = r without d.
 * Conditioned on accepting c, the subtree under c was drawn by the drafter
 * from c's context without looking at the target's coins, so the same
 * argument applies at c with r = p(· | prefix, c): the whole output is a draw
 * from the target, token by token. The two classic mistakes break the first
 * step: not updating r between siblings (each sibling is then judged against
 * p, the marginal over-weights tokens several siblings hit), and treating
 * i.i.d. siblings as if drawn without replacement (q_k is then not the law of
 * c_k). Both are the test-only variants below.
 *
 * Randomness is counter-based (rng.h), keyed by the absolute position of the
 * token being decided: the accept coin of the k-th sibling uses RNG_ACCEPT
 * with counter k, the correction RNG_RESIDUAL, the bonus RNG_BONUS, so a
 * chain (one child per node) takes the same decisions as accept_chain.
 *
 * Threading: pure functions, any thread; no allocation except tree_accept_law. */
#ifndef SPECD_TREE_H
#define SPECD_TREE_H

#include "engine/spec/drafter.h"

#include <stdbool.h>
#include <stdint.h>

/* Test-only deliberately wrong variants (never set outside tests and
 * `specd verify --broken`). */
typedef enum {
    TREE_CORRECT = 0,
    TREE_BROKEN_NO_RESIDUAL = 1,     /* every sibling judged against p itself: r never updated */
    TREE_BROKEN_REMOVE_REJECTED = 2, /* q_k renormalised without the earlier siblings even when they were
                                      * drawn i.i.d. (with replacement) */
} tree_variant;

/* One drafted tree with the target's and the drafter's distributions. */
typedef struct {
    int n_nodes;                /* 0..DRAFTER_MAX_NODES */
    const drafter_node *nodes;  /* (n_nodes) parent < own index */
    const float *p;             /* (n_nodes + 1, V): row 0 at the root, row 1 + i after node i (processed by
                                 * the sequence's sampler config, masked by its grammar) */
    const float *q;             /* (n_nodes, V): row i = law node i was drawn from given its earlier
                                 * siblings; not read for deterministic nodes (may be NULL if all are) */
    int V;
} tree_view;

typedef struct {
    uint64_t seed;
    uint64_t pos0;              /* absolute position of a depth-1 node's token */
    tree_variant variant;
} tree_rng;

/* True when every parent is in [-1, i) and every token in [0, V). depth
 * (n, may be NULL) receives 1 + the parent's depth (a root child: 1). */
bool tree_validate(const drafter_node *nodes, int n, int V, int *depth);

/* The verify rows of a tree for one sequence: row 0 is the root (the last
 * accepted token, not yet in the cache, at root_pos = the cache length), row
 * 1 + i node i. Writes tokens (n + 1), RoPE positions pos (n + 1) = root_pos +
 * depth (never root_pos + row index: siblings share a position), and mask
 * ((n + 1) x (n + 1)): mask[r·(n+1) + a] = 1 iff row a is row r or one of its
 * ancestors (model.h's model_seq.mask). Returns n + 1, or -1 for an invalid
 * tree. A chain gives positions root_pos + row and the causal mask. */
int tree_rows(int32_t *tokens, int32_t *pos, uint8_t *mask, int32_t root_token, int root_pos,
              const drafter_node *nodes, int n, int V);

/* The lossless acceptance. Writes the accepted path's node indices into
 * path (k) and its tokens followed by one correction or bonus token into out
 * (k + 1); returns k (0..depth of the tree). scratch: 2·V doubles. greedy:
 * temperature 0 (every p row one-hot; q is not read). */
int tree_accept(int32_t *out, int16_t *path, const tree_view *t, bool greedy, const tree_rng *rng, double *scratch);

/* The exact law of tree_accept's outcome, by the same walk with both branches
 * of every coin taken: emit(ctx, path, k, token, prob) once for each accepted
 * path (k node indices) and final token with prob > 0. The probabilities sum
 * to 1. Allocates (n_nodes + 1)·2·V doubles; returns -1 when that fails or
 * the tree is invalid, else 0. For tests and `specd verify`. */
typedef void (*tree_emit_fn)(void *ctx, const int16_t *path, int k, int32_t token, double prob);
int tree_accept_law(const tree_view *t, bool greedy, tree_variant variant, tree_emit_fn emit, void *ctx);

/* The rows of the accepted path inside the verify rows (row 0 the root,
 * row 1 + path[j] the j-th accepted node): src[j] = 1 + path[j] for j < k.
 * True when they are already contiguous (src[j] = 1 + j: a chain prefix), so
 * no KV rows need moving. */
bool tree_path_rows(int *src, const int16_t *path, int k);

#endif
