/* spec.h — speculative decoding of one sequence over a target and its proposers:
 * pairing checks (tokenizer identity, model identity, draft memory share),
 * the linear speculation step (propose γ → verify γ+1 in ONE target call →
 * accept/reject → commit/rollback the target cache and the proposer
 * together), plain decoding as the γ = 0 case and the fallback path, and
 * per-sequence statistics. Proposers are drafters (drafter.h): the draft model
 * (draft_model.c) and prompt-lookup n-grams (draft_ngram.c); this file talks
 * to them only through that interface.
 *
 * Cache invariant between steps, for a sequence of n accepted tokens
 * (prompt + output): the target cache holds positions [0, n−1) — every token
 * but the last, which the next step feeds — and no drafter's state holds more
 * than n−1 positions (drafter state_len; the draft model lags and catches up
 * itself, see draft_model.h).
 *
 * Threading: a spec_pair and its sequences belong to one thread (the engine
 * thread); nothing here locks. */
#ifndef SPECD_SPEC_H
#define SPECD_SPEC_H

#include "engine/engine.h"
#include "engine/spec/accept.h"
#include "engine/spec/drafter.h"
#include "engine/spec/budget.h"
#include "engine/spec/gamma.h"
#include "engine/model/model.h"
#include "engine/sample/sampler.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* spec_logprob, spec_method and its names, the proposers' numbering in
 * reports (SPEC_PROPOSER_MEDUSA, SPEC_PROPOSERS), spec_stats and its derived
 * figures are public value types: engine.h. */

/* Proposer slots of a pair (drafter.h tables): what a step's proposal came
 * from. The Medusa heads propose trees only (draft_medusa.h). Reports name
 * each by spec_drafter_name and loop to SPEC_PROPOSERS. */
enum { SPEC_DRAFTER_MODEL = 0, SPEC_DRAFTER_NGRAM = 1, SPEC_DRAFTER_MEDUSA = 2, SPEC_DRAFTER_EAGLE = 3, SPEC_DRAFTERS = 4 };
_Static_assert((int)SPEC_DRAFTERS == (int)SPEC_PROPOSERS && (int)SPEC_DRAFTER_MEDUSA == (int)SPEC_PROPOSER_MEDUSA &&
                   (int)SPEC_DRAFTER_EAGLE == (int)SPEC_PROPOSER_EAGLE,
               "reports number the proposers as the pair's slots");

typedef struct {
    char arch[32];
    int n_layer, dim, n_head, n_kv_head, ff, n_vocab;
    char weight_type[16];
    uint64_t header_hash;       /* FNV-1a of the GGUF header (metadata + tensor infos) and file size */
    uint64_t tokenizer_hash;
    char id[64];                /* "arch-<hash16>": ties a session to the exact model */
} spec_model_id;

void spec_model_identity(const model *m, const tokenizer *t, spec_model_id *out);

typedef struct {
    int max_ctx;                /* per sequence */
    int kv_blocks;              /* per model pool; 0 = enough for one max_ctx sequence */
    int block_size;             /* 16 */
    kv_type kv_type;            /* KV_F32 (zeroed) or KV_F16: every model's cache (target, draft, EAGLE head) */
    float draft_mem_warn_pct;   /* warn when draft memory > this % of the target's (20) */
    int max_seqs;               /* most sequences in one batched step (32) */
    int max_gamma;              /* largest γ any sequence may use (8, at most GAMMA_MAX) */
    /* tensor parallelism of the target: tensor_parallel > 1 splits it over
     * target_shards[0..tensor_parallel) (shard 0 is the `be` of spec_pair_open,
     * where the draft lives too) summed by tp_comm (not owned) */
    int tensor_parallel;
    backend *const *target_shards;
    struct comm *tp_comm;
    int ngram_min, ngram_max;   /* n-gram lookup lengths (2, 5) */
    bool prefix_cache;          /* share full KV blocks of prompts by hash in both pools (kv.h) */
    int prefix_max_idle;        /* most cached blocks no sequence holds, per pool (0: any free block) */
} spec_pair_params;

/* A loaded target with its KV pool, its proposers, one tokenizer and the
 * scratch for one step. */
typedef struct spec_pair {
    model *target;              /* owned */
    drafter *drafters[SPEC_DRAFTERS]; /* owned; [SPEC_DRAFTER_MODEL] NULL without a draft model */
    tokenizer *tok;             /* the target's (identical to the draft's) */
    kv_pool *tpool;
    spec_model_id target_id, draft_id;
    double draft_mem_pct;       /* draft weights + KV as % of the target's */
    bool draft_oom;             /* a draft was asked for but did not fit in memory: plain decoding */
    gamma_costs costs;
    sampler *smp;
    int n_vocab;
    int max_seqs, max_gamma;
    int max_ctx;                /* positions per sequence: the smaller model's limit */
    float *p;                   /* (max_gamma+1, V) target distributions of the sequence being accepted */
    float *logits;              /* (logit_rows, V) rows of a batched verify call (spec_pair_verify) */
    int logit_rows;             /* max_seqs * (max_gamma+1), more after spec_pair_reserve_rows */
    float *scratch;             /* (V) */
    float *hidden;              /* (the target's dim) one hidden row for spec_seq_observe_hidden */
    /* a features-reading proposer's taps (drafter_i feature_layers; n_feat 0: none): scratch for
     * feat_rows rows of n_feat layers, one layer's rows, and 0 .. feat_rows-1 */
    int n_feat, feat_rows;
    float *feat, *hidden_rows;
    int learn_layers[MODEL_MAX_TAPS], n_learn; /* spec_pair_set_learn_taps: taps without a features reader */
    int *iota;
    model_seq *ms;              /* (max_seqs) */
    int *gam;                   /* (max_seqs) */
    drafter_prop *props;        /* (max_seqs) one drafter's batched proposal */
    int *prop_of;               /* (max_seqs) the sequence of each props entry */
    accept_variant variant;     /* tests and `specd verify --broken` only */
    bool prefix_cache;          /* the pools share prompt blocks (spec_pair_params.prefix_cache) */
    int ngram_min, ngram_max;   /* the n-gram lookup lengths in use (spec_pair_params, defaults applied) */
} spec_pair;

/* The draft slot's pieces through its table (drafter_i model, kv_pool; NULL
 * without a draft or hooks), for admission, reports and tests. */
bool spec_pair_has_draft(const spec_pair *sp);
model *spec_pair_draft_model(const spec_pair *sp);
kv_pool *spec_pair_draft_pool(const spec_pair *sp);

/* Learning (issue 37): the target layers tapped for sequences that record
 * (spec_seq_params.record) when no features-reading proposer is installed
 * (one that is sets them: its own layers); n 0 turns them off. Returns 0, or
 * -1 when out of memory. Between steps only. */
int spec_pair_set_learn_taps(spec_pair *sp, const int *layers, int n);

/* Installs d in a drafter slot and returns what was there (the caller owns
 * it now; the pair owns d). Sequences created before must be freed before
 * the drafter that made their state goes (tests wrap a drafter to inject
 * faults and put the original back). */
drafter *spec_pair_set_drafter(spec_pair *sp, int slot, drafter *d);

/* A pair is built in three moves (pair_load.h's spec_pair_load does them
 * for the draft model and the lookup; engine.c adds Medusa and EAGLE after):
 *
 * spec_pair_open loads the target and its tokenizer: a pair without pools or
 * proposers yet. Returns NULL with err and *st (errkind.h; st may be NULL):
 * ENGINE_ERR_OOM when the target does not fit, ENGINE_ERR_INVALID for a bad
 * file. be must outlive the pair.
 *
 * Then the proposers' own constructors (proposers/) build them against
 * sp->tok, sp->n_vocab and the target's context, and spec_pair_set_drafter
 * installs them.
 *
 * spec_pair_ready sizes the pair for what is installed, through the table
 * only (drafter.h): the draft slot's model (drafter_i model) names the draft
 * (draft_id) and caps the context; the target's KV pool; each proposer's
 * reserve — one that runs out of memory there (the brief's "draft model OOM
 * on GPU") is dropped with a warning on `log` and draft_oom set, and the pair
 * decodes as if it had never been given; prefix caching in the target's pool
 * and the draft slot's (drafter_i kv_pool); the step scratch; and the draft
 * slot's memory share (draft_mem_pct), printed to `log` (NULL: quiet) with a
 * warning above pp's limit. Returns 0 (a dropped proposer included), or -1
 * with err and *st (ENGINE_ERR_OOM: the target's pool or the scratch did not
 * fit; a proposer's reserve failing otherwise: its status); then free the
 * pair. Called once. */
spec_pair *spec_pair_open(const char *target_path, backend *be, const spec_pair_params *pp, engine_status *st,
                          char *err, size_t errlen);
int spec_pair_ready(spec_pair *sp, const spec_pair_params *pp, FILE *log, engine_status *st, char *err,
                    size_t errlen);
/* A proposer that did not fit in memory (its constructor said
 * ENGINE_ERR_OOM, or its reserve did): sets draft_oom and warns on log
 * ("specd: WARNING: <what> <source> does not fit in memory; decoding without
 * speculation (<why>)"). */
void spec_pair_dropped(spec_pair *sp, const char *what, const char *source, const char *why, FILE *log);
void spec_pair_free(spec_pair *sp); /* accepts NULL */

/* Measures the cost model (draft 1-position call, target 1- and 5-position
 * calls) on scratch sequences; the pair's pools must have a few free blocks. */
void spec_pair_calibrate(spec_pair *sp);
/* Copies the draft model's cost figures into sp->costs (after they change). */
void spec_pair_sync_draft_costs(spec_pair *sp);

typedef struct {
    sampler_config sc;          /* ONE config for both draft and target */
    uint64_t seed;
    bool no_prefix;             /* neither reuse cached prompt blocks nor offer this sequence's */
    gamma_params gp;            /* gamma_max = 0 or no draft: plain decoding */
    bool speculate;             /* false: plain decoding always */
    spec_method method;         /* the proposer (DRAFT without a draft model: plain) */
    bool coupled;               /* coupled verification: plain steps, drafts and verification all sample by
                                 * Gumbel-max with one noise per (seed, position, token) (gumbel.h), so the
                                 * seeded output is plain seeded sampling's for any γ, drafter, batch */
    /* Constrained generation (grammar.h): every token, drafted or verified,
     * is drawn from distributions masked by the grammar state after the
     * tokens before it; NULL = unconstrained. Not owned: outlives the sequence. */
    struct grammar_matcher *grammar;
    int grammar_budget;         /* the output's token limit (max_tokens) for the finish-in-budget rule; 0 = none */
    bool grammar_broken;        /* tests only: the verify rows' p left unmasked (the draft's q masked) */
    bool penalty_broken;        /* tests only: the verify rows' penalties see the accepted tokens only, not the
                                 * drafts before the row (sc's penalties; the draft's q sees them) */
    bool logprobs;              /* fill spec_seq.lp for every appended token */
    int top_logprobs;           /* alternatives per token in lp (0..SPEC_TOP_LOGPROBS) */
    bool record;                /* learning (issue 37): keep the target's tapped features of every position
                                 * (spec_seq.rf) for the learning ring and for a swapped-in proposer's catch-up;
                                 * needs the pair's taps (spec_pair_set_learn_taps) */
} spec_seq_params;

typedef struct spec_seq {
    spec_pair *sp;
    kv_seq *tkv;
    drafter_seq *ds[SPEC_DRAFTERS]; /* each usable drafter's state (NULL where none) */
    int32_t *tokens;            /* (cap) accepted tokens: prompt then output */
    int n_tokens, n_prompt, cap;
    bool prefilled;             /* the prompt is in the target cache and the first token sampled */
    bool prefix;                /* shares blocks through the pools' prefix caches */
    spec_seq_params prm;
    budget_seq bud;             /* the budget controller's memory of it: each proposer's chains (α, fallback,
                                 * probes), its trees, this step's choice (budget.h) */
    spec_stats st;
    int slot;                   /* this step's chain proposer (budget_pick), -1: plain */
    float *q;                   /* (max_gamma, V) draft distributions of the current step */
    int32_t draft[GAMMA_MAX];   /* drafted tokens of the current step */
    bool det[GAMMA_MAX];        /* ... each a point mass (deterministic proposal) */
    int32_t vtoks[GAMMA_MAX + 1];/* tokens fed to the verify call */
    int vgam;                   /* drafts in this step's verify rows (spec_chain_prepare) */
    int32_t gst;                /* grammar state after the accepted tokens (prm.grammar set) */
    int32_t gpos[GAMMA_MAX + 1];/* ... after the accepted tokens and drafts [0, j): this step's copies */
    spec_logprob lp[GAMMA_MAX + 1]; /* prm.logprobs: of the tokens the last step (or the prefill) appended, in order */
    int32_t *pen;               /* (cap) sampler_penalize's window scratch when sc has penalties, else NULL. Penalties
                                 * depend on the history, so draft row j and verify row j both see the accepted
                                 * tokens and drafts [0, j); sequences with them take the chain path */
    /* prm.record: the target's tapped features of positions [0, rf_n) (F16, sp->n_feat x dim each, layer by
     * layer), kept as committed tokens are fed; rf_gap: a position's never came (a cache reset), nothing
     * recorded from then on */
    uint16_t *rf;
    int rf_n, rf_cap;
    bool rf_gap;
} spec_seq;

/* Creates a sequence and prefills the prompt into the target (the draft
 * catches up at its first draft). The first output token is sampled from the
 * prefill's logits and appended. Returns NULL with err filled (prompt too long
 * for the context, KV full, ...). */
spec_seq *spec_seq_start(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                         size_t errlen);
void spec_seq_free(spec_seq *s); /* accepts NULL; returns KV blocks */

/* The same in two parts, for chunked prefill interleaved with decode steps:
 * create (validates, allocates, no model work), then prefill up to max_tokens
 * prompt tokens per call (0 = all). spec_seq_prefill returns 1 when the prompt
 * is done and the first token sampled, 0 when more remains, -1 on error. */
spec_seq *spec_seq_create(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p, char *err,
                          size_t errlen);
int spec_seq_prefill(spec_seq *s, int max_tokens, char *err, size_t errlen);

/* What one step produced. */
typedef struct spec_step_info {
    int n_new;                  /* tokens appended (accepted drafts + correction/bonus) */
    int gamma;                  /* drafts proposed this step (0 = plain step) */
    int accepted;               /* drafts accepted */
    bool bonus;                 /* all accepted: the last token is the bonus */
    bool stopped;               /* an end-of-generation token was appended (output ends there) */
    int method;                 /* the proposer (SPEC_DRAFTER_* or SPEC_PROPOSER_MEDUSA), -1: plain step */
    bool tree;                  /* a tree step (spec_tree.h): gamma = nodes verified, accepted = path length */
    /* What reports record (telemetry, spec_seq stats): the proposal's depth
     * (γ of a chain, the deepest level of a tree) and the nodes verified (γ
     * of a chain); gamma above stays the nodes verified, as the controllers
     * read it. 0 and 0 for a plain step. */
    int depth, nodes;
    /* This sequence's share of the step's model calls, ms: a batched call's
     * wall time x this sequence's rows / the call's rows — verify rows γ+1
     * (a tree: its nodes + 1), draft rows its γ budget (a tree: its nodes;
     * Medusa: one row each). Alone in a call the share is the wall time. */
    double draft_ms, target_ms;
} spec_step_info;

/* Counts one verify step of a tree proposer (info->gamma > 0) in its slot's
 * counters: the step, its nodes, accepted drafts, a rejection unless all
 * accepted, and its tokens. */
void spec_method_stats_note(spec_method_stats *b, const spec_step_info *info);

/* One step: plain or speculative as the controller decides. At most max_new
 * tokens are appended (γ is capped so that never overflows, and by the
 * context). Stops after an end-of-generation token. Returns 0, or -1 with err
 * (target failure: the sequence is unchanged). Draft failures never fail the
 * step: they fall back to plain decoding and are counted. */
int spec_seq_step(spec_seq *s, int max_new, spec_step_info *info, char *err, size_t errlen);

/* The same step for n sequences of one pair at once (n <= max_seqs): each
 * draft position is one batched draft call over the sequences still drafting,
 * and the verify is ONE target call over all sequences' γ+1 positions; accept
 * and commit run per sequence exactly as for one. Per-row results do not
 * depend on the other rows, so outputs equal those of single steps. */
int spec_step_batch(spec_pair *sp, spec_seq **seqs, int n, const int *max_new, spec_step_info *info, char *err,
                    size_t errlen);

/* For a scheduler that bins sequences by draft length before stepping them:
 * the budget controller's budget_pick chose each sequence's proposer and γ
 * (call it once per step), and spec_step_batch_planned steps with the given γ
 * per sequence (re-capped by max_new, the context and the pair's max_gamma). */
int spec_step_batch_planned(spec_pair *sp, spec_seq **seqs, int n, const int *max_new, const int *gamma,
                            spec_step_info *info, char *err, size_t errlen);

/* The step in phases, so that one target pass verifies every proposer's
 * rows (the engine packs chains, draft trees and Medusa trees into one
 * call; spec_step_batch_planned is the three phases over one call):
 *   spec_chain_prepare: the checks, γ (planned, or the controller's), the
 *     batched draft calls, and each sequence's verify rows in ms[i] (its last
 *     token and drafts); returns the rows in all, or -1 with err (nothing
 *     changed, no draft state ahead);
 *   spec_pair_verify: ONE target forward over any model_seq rows (chains'
 *     and trees' alike) into sp->logits, its wall time in *call_ms; -1 with
 *     err on failure (no KV length changed: call spec_chain_abort for the
 *     chains that were in it);
 *   spec_chain_finish: accept/commit for S[0, n) whose rows start at
 *     `logits` (row row0 of the call, for the hidden states), each with its
 *     rows' share of call_ms over call_rows.
 * Between prepare and finish no other target forward may touch these
 * sequences' caches. */
int spec_chain_prepare(spec_pair *sp, spec_seq **S, int n, const int *max_new, const int *planned,
                       spec_step_info *info, model_seq *ms, char *err, size_t errlen);
int spec_pair_verify(spec_pair *sp, const model_seq *ms, int n, double *call_ms, char *err, size_t errlen);
void spec_chain_finish(spec_pair *sp, spec_seq **S, int n, float *logits, int row0, double call_ms, int call_rows,
                       spec_step_info *info);
void spec_chain_abort(spec_pair *sp, spec_seq **S, int n);
/* Grows the verify scratch to at least rows rows (trees need max_seqs x
 * (DRAFTER_MAX_NODES + 1)). Returns 0, or -1 when out of memory (unchanged). */
int spec_pair_reserve_rows(spec_pair *sp, int rows);

/* The sequence took a step on another proposer (Medusa trees, outside
 * this file): its drafters' controllers count it as a plain step, so a
 * fallback's countdown to its next probe keeps running (else a sequence the
 * auto method keeps on Medusa while its draft is in fallback never probes the
 * draft again, and both paths look like plain decoding). */
void spec_seq_note_other_step(spec_seq *s);

/* Hands the target's final-normed hidden state of row `row` of its last
 * forward (the row that sampled s's last token) to every needs_hidden
 * proposer whose state s holds (drafter_i observe_hidden); row < 0 or an
 * unreadable row resets them instead. The prefill, chain and tree steps call
 * it, so such a proposer is fresh after every step whatever proposed it. */
void spec_seq_observe_hidden(spec_seq *s, int row);

/* Hands the target's tapped features of rows rows[0, n) of its last forward,
 * which fed positions [pos0, pos0 + n) of s, to every features-reading
 * proposer whose state s holds (drafter_i observe_features). The prefill,
 * chain and tree steps call it with the rows of the tokens they committed. */
void spec_seq_observe_features(spec_seq *s, const int *rows, int n, int pos0);

/* Learning: a proposer installed after s started (a swapped-in head) gets
 * s's state: seq_create in slot, then the recorded features of every
 * position (spec_seq.rf), so its next proposal catches up from the committed
 * tokens. Without a whole record the state starts with a gap and proposes
 * nothing (plain steps, still lossless). Returns 0, or -1 out of memory (the
 * slot stays empty). */
int spec_seq_adopt_drafter(spec_seq *s, int slot);
/* Frees s's state of the proposer in slot (before that proposer leaves the
 * slot: a head swap drops every sequence's state, installs the new head,
 * then each sequence adopts it). */
void spec_seq_drop_drafter(spec_seq *s, int slot);
/* A proposer swapped live: every one of the n running sequences drops its
 * state of slot's proposer, d takes the slot (NULL: none), and each sequence
 * that may use it adopts it (out of memory: plain steps for that one).
 * Returns the proposer that left the slot (the caller's to keep or free). */
drafter *spec_pair_swap_drafter(spec_pair *sp, spec_seq *const *seqs, int n, int slot, drafter *d);

/* The grammar's token budget (grammar.h) when the token at absolute position
 * pos is drawn: what is left of prm.grammar_budget (at least 1), -1 without
 * one. Every proposer and verify row of a constrained sequence uses this. */
int spec_seq_grammar_budget(const spec_seq *s, int pos);

/* Whether a sequence with these parameters may use the proposer in slot
 * (SPEC_DRAFTER_*): its method's proposers; the heads' trees cannot carry
 * logprobs, coupled noise or penalties, so such a sequence never holds their
 * state. */
bool spec_method_uses(const spec_seq_params *p, int slot);

/* Replaces the γ bounds of every controller of the sequence (policy rule,
 * per-request override); takes effect at its next step. */
void spec_seq_set_gamma_params(spec_seq *s, const gamma_params *gp);

/* Prefix reuse. spec_seq_create attaches the longest cached run of the
 * prompt's full blocks to the target cache and, for a sequence that may use
 * the draft model, the draft's own cached run, at most the target's length
 * (a draft that starts behind catches up at its first proposal; the draft is
 * never ahead), always leaving at least the last prompt token to
 * prefill; the rest is prefilled as usual. Full blocks are offered to the
 * caches as the sequence's tokens become final. Outputs never change: the
 * reused rows are the ones a prefill of the same tokens computes.
 *
 * For admission: spec_prefix_probe says, per pool (0 target, 1 draft), how
 * many blocks an attach of this prompt would take that some sequence holds
 * now (shared[]: at most that many, 0 for the draft) and whether the last
 * one may be copied on write (cow[]);
 * read-only. spec_seq_blocks gives what a sequence holds per pool and the
 * copies its next write would make. */
void spec_prefix_probe(const spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *p,
                       int shared[2], int cow[2]);
void spec_seq_blocks(const spec_seq *s, int held[2], int cow[2]);

/* Cache-invariant check (also run by every step): on mismatch the caches are
 * reset and re-prefilled from the tokens, counted in kv_resets; with the
 * prefix cache on, the cached full blocks of the accepted tokens are attached
 * again first (by the same rule as at creation; counted in
 * kv_reset_reused) and only the rest is re-prefilled. Returns 0 if
 * the caches were consistent, 1 after a successful reset, -1 if re-prefill failed. */
int spec_seq_check_kv(spec_seq *s, char *err, size_t errlen);

#endif
