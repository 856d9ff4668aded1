/* drafter.h — the proposer interface of speculative decoding: a versioned
 * table of functions (kernels/backend.h style) that every proposer fills —
 * the draft model (draft_model.c), prompt-lookup n-grams (draft_ngram.c) and
 * Medusa heads (draft_medusa.c); a feature-level head (EAGLE) is one more
 * table. The step (spec.c chains, spec_tree.c trees), acceptance, KV commit,
 * the pair (spec_pair.c: sizing, prefix caching, memory share) and the
 * controllers talk only to this table; proposers never call the verify or
 * the acceptance rule themselves. Each proposer is built by its own
 * constructor in proposers/ (draft_model_load, draft_ngram_create,
 * draft_medusa_create, draft_eagle_load; pair_load.c and engine.c call
 * them) and installed with spec_pair_set_drafter.
 *
 * A proposal is a tree of nodes (token, parent); a chain is parent = i − 1
 * with node 0's parent −1 (the sequence's last accepted token). Each node
 * carries either the distribution q it was sampled from or the mark
 * "deterministic" (q is a point mass at its token: the proposer picked it
 * without sampling), which selects the point-mass case of the lossless rule
 * (accept.h).
 *
 * State per sequence lives in an opaque drafter_seq the drafter creates. The
 * drafter's own view of the sequence (a draft KV cache, an n-gram index) may
 * lag the accepted tokens but must never run ahead of them: after every step
 * spec.c calls commit(accepted_len), and a commit to a shorter length than
 * the state holds is the rollback (a pointer update, never a memset).
 *
 * Threading: a drafter and its sequences belong to the engine thread. */
#ifndef SPECD_DRAFTER_H
#define SPECD_DRAFTER_H

#include "engine/spec/gamma.h"
#include "engine/sample/sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DRAFTER_INTERFACE_VERSION 3
#define DRAFTER_MAX_NODES GAMMA_MAX

typedef struct drafter drafter;
typedef struct drafter_seq drafter_seq; /* per sequence, defined by each drafter */
struct spec_seq;                        /* spec.h: a sequence (tokens, sampler config, grammar state) */
struct spec_step_info;                  /* spec.h: what a step of it produced */
struct model;                           /* model.h: a model a proposer runs */
struct kv_pool;                         /* kv.h: a paged KV cache */
struct kv_seq;                          /* kv.h: one sequence's part of it */

typedef struct {
    int32_t token;
    int16_t parent;          /* node index, -1 = the last accepted token; a chain has parent = i - 1 */
    bool deterministic;      /* q is a point mass at token; the q row is not written */
} drafter_node;

/* A proposed tree (spec_tree.h verifies it). q rows as tree.h's tree_view
 * (row i = the law node i was drawn from given its earlier siblings); NULL
 * when every node is deterministic or the sequence is greedy. n_nodes 0: a
 * plain step. */
typedef struct {
    int n_nodes;
    drafter_node nodes[DRAFTER_MAX_NODES];
    const float *q;          /* (n_nodes, V) or NULL; valid until the proposer's next call */
} drafter_tree;

/* One sequence's part of a batched tree proposal. */
typedef struct {
    /* in */
    struct spec_seq *s;      /* the sequence: its accepted tokens, sampler config and grammar (read only) */
    drafter_seq *ds;         /* this proposer's state of it; NULL when the sequence holds none (a
                              * stateless proposer, the lookup, still proposes; others give no tree) */
    int budget, depth, topk; /* the granted bounds: most nodes, levels, children per node */
    /* out */
    drafter_tree tree;       /* at most the granted bounds; a proposer may choose fewer nodes (0: plain) */
    double draft_ms;         /* this sequence's share of the proposal time */
} drafter_tree_prop;

/* One sequence's part of a batched propose call. */
typedef struct {
    /* in */
    drafter_seq *ds;
    const int32_t *tokens;   /* (n_tokens) accepted tokens: prompt then output */
    int n_tokens;
    int budget;              /* most nodes to propose, 1..DRAFTER_MAX_NODES */
    const sampler_config *sc;/* the sequence's ONE sampler config (draft and target) */
    uint64_t seed;
    bool coupled;            /* coupled verification: a sampling drafter draws node i as the Gumbel-max of
                              * its q row at its position (gumbel.h), the target's noise, not inverse CDF */
    float *q;                /* (budget, V) caller's memory: row i for each non-deterministic node i */
    /* Optional constraint (grammar.h): a sampling drafter calls it on node
     * i's logits (its own, mutable) before turning them into q row i, so q is
     * masked by the grammar state after nodes[0..i) exactly as the target's
     * p will be. NULL: unconstrained. */
    void (*mask)(void *mask_ctx, int i, const drafter_node *nodes, float *logits);
    void *mask_ctx;
    /* out */
    int n_nodes;             /* 0..budget (0: nothing to propose; the step is plain) */
    drafter_node nodes[DRAFTER_MAX_NODES];
} drafter_prop;

typedef struct drafter_i {
    int version;             /* DRAFTER_INTERFACE_VERSION */
    const char *name;        /* "draft", "ngram", "medusa" (the method label in reports) */
    bool needs_hidden;       /* proposes from the target's hidden states: observe_hidden is called */
    void (*destroy)(drafter *d);
    /* Per-sequence state for sequences of up to max_len tokens; NULL when out
     * of memory. seq_destroy accepts NULL. */
    drafter_seq *(*seq_create)(drafter *d, int max_len);
    void (*seq_destroy)(drafter *d, drafter_seq *ds);
    /* Optional (NULL: "as many as asked"): how many nodes a propose call could
     * give this sequence now (0 = none: an n-gram with no earlier match), cheap
     * enough to call while planning. */
    int (*available)(drafter *d, drafter_seq *ds, const int32_t *tokens, int n_tokens);
    /* Chains (NULL: the proposer proposes trees only, and a chain step of
     * its sequences is plain). Proposes for n sequences at once. Returns 0, or -1 with err on failure:
     * then no sequence's state is ahead of its accepted tokens (the drafter
     * rolled back) and the caller decodes those sequences plainly. */
    int (*propose)(drafter *d, drafter_prop *props, int n, char *err, size_t errlen);
    /* tokens[0, accepted_len) are accepted and the drafter may keep state for
     * them and nothing after; 0 is a reset. */
    void (*commit)(drafter *d, drafter_seq *ds, const int32_t *tokens, int accepted_len);
    /* Optional: positions of the sequence the drafter's state holds (a draft KV
     * length), for the per-step invariant; NULL = it holds no positional state. */
    int (*state_len)(drafter *d, drafter_seq *ds);
    /* The cost model's figures for this proposer: ms for one proposed node of
     * one sequence, and ms added per extra sequence in a batched call. */
    void (*cost)(drafter *d, double *node_ms, double *per_row_ms);
    /* Optional: measure cost() (called once at load, with spare pool blocks). */
    void (*calibrate)(drafter *d);
    /* Optional: after a successful propose of `nodes` nodes in all over `rows`
     * sequences taking ms, refines the cost estimate. */
    void (*observe)(drafter *d, int nodes, int rows, double ms);
    /* Optional, prefix reuse (kv.h; NULL: the drafter keeps no cache to
     * share): attaches to a fresh ds the cached run of full blocks of
     * tokens[0, n) its cache holds, at most max_len positions, and returns the
     * positions attached (0 when none). The caller then commit()s both caches
     * to the shorter of theirs. */
    int (*prefix_attach)(drafter *d, drafter_seq *ds, const int32_t *tokens, int n, int max_len);
    /* Optional: trees for n sequences at once, each within its granted
     * bounds (props[i].tree; nodes in proposal order, parents first). The
     * rule of tree.h must hold: a node's child count is decided before its
     * children are drawn. Returns 0, or -1 with err (then every tree is
     * empty and no state is ahead of the accepted tokens). */
    int (*propose_tree)(drafter *d, drafter_tree_prop *props, int n, char *err, size_t errlen);
    /* Optional: after a verified tree step of sequences this proposer
     * proposed for (props as proposed, info[i] the step's result for
     * props[i]), the proposer's own evidence (acceptance, the verify time it
     * saw). */
    void (*tree_done)(drafter *d, const drafter_tree_prop *props, int n, const struct spec_step_info *info);
    /* needs_hidden proposers: the target's final-normed hidden state (the
     * model's dim floats) of the row that sampled the sequence's last token,
     * for tokens[0, n_tokens); called after every prefill and step of a
     * sequence that holds this proposer's state, whatever proposed the step. */
    void (*observe_hidden)(drafter *d, drafter_seq *ds, const float *h, int n_tokens);
    /* Proposers that read the target's features (EAGLE): fills layers[] with
     * the target layers whose residual stream (model.h layer taps) they read
     * and returns how many (at most 4; NULL or 0: none). The pair then taps
     * the target and, after every prefill chunk and step of a sequence that
     * holds this proposer's state, calls observe_features with the rows of
     * the target positions [pos0, pos0 + n) that step fed and committed:
     * feat is (n, k, D), row j's k layers one after another. */
    int (*feature_layers)(drafter *d, int *layers);
    void (*observe_features)(drafter *d, drafter_seq *ds, const float *feat, int pos0, int n);
    /* Optional: offers the state's final full blocks of tokens[0, n) (the
     * sequence's accepted tokens) to its prefix cache. */
    void (*prefix_publish)(drafter *d, drafter_seq *ds, const int32_t *tokens, int n);
    /* ---- a proposer that runs a model of its own (version 3) ----
     * All optional (NULL: the proposer runs no model the pair accounts for).
     * The pair reads them of the proposer in its draft slot (spec.h,
     * SPEC_DRAFTER_MODEL): that model is the pair's second model, and its
     * pool the second pool admission reserves. Nothing else in spec/ knows
     * which proposer it is. */
    /* The model it runs (borrowed; the same pointer for the drafter's life).
     * The pair takes from it: its identity (spec_model_identity: draft_id in
     * reports, and the seed of its pool's prefix-cache chains); its context
     * (mp.max_ctx), which caps the pair's sequences and so sizes both pools;
     * its weight bytes, which with kv_pool's bytes make the draft's memory
     * share (draft_mem_pct, the load's report and its warning). */
    struct model *(*model)(drafter *d);
    /* Called once by spec_pair_ready, after the target's KV pool exists:
     * allocate what the proposer could not before the pair was sized — its
     * KV pool of `blocks` blocks of block_size (the target pool's shape) and
     * scratch for batched calls of up to max_seqs sequences. Returns 0, or -1
     * with err and *st: ENGINE_ERR_OOM drops the proposer (the pair frees
     * it, warns and decodes without it: draft_oom), any other status fails
     * the pair's load with err. */
    int (*reserve)(drafter *d, int block_size, int blocks, int max_seqs, engine_status *st, char *err,
                   size_t errlen);
    /* Its KV pool (borrowed; NULL before reserve). Admission reserves its
     * blocks in lockstep with the target's, engine stats count its free and
     * cached blocks, and with prefix caching on its full prompt blocks are
     * shared by hash (kv_pool_set_prefix, seeded by the model's identity). */
    struct kv_pool *(*kv_pool)(drafter *d);
    /* The sequence's cache in that pool (borrowed; NULL for none): admission
     * counts the blocks it holds and its pending copies on write. */
    struct kv_seq *(*seq_kv)(drafter *d, drafter_seq *ds);
} drafter_i;

/* Every drafter struct starts with this. */
struct drafter {
    const drafter_i *i;
    int n_vocab;
    const char *source;      /* optional: where it came from (its file), named in the pair's messages; owned by
                              * the drafter, NULL: none */
};

/* Calls through the table (NULL-safe for optional entries). */
static inline int drafter_available(drafter *d, drafter_seq *ds, const int32_t *t, int n, int budget) {
    if (!d->i->available) return budget;
    int a = d->i->available(d, ds, t, n);
    return a < budget ? a : budget;
}
static inline int drafter_state_len(drafter *d, drafter_seq *ds) {
    return d->i->state_len && ds ? d->i->state_len(d, ds) : -1;
}
static inline bool drafter_trees(const drafter *d) { return d && d->i->propose_tree; }
static inline bool drafter_chains(const drafter *d) { return d && d->i->propose; }
static inline void drafter_destroy(drafter *d) {
    if (d) d->i->destroy(d);
}

#endif
