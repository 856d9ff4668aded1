/* engine.h — the batch-level speculation engine and its thread-safe API.
 *
 * The engine runs on its own thread: admit requests → prefill (in chunks,
 * interleaved with decode) → per step: plan γ per sequence and bin them into
 * micro-batches → draft → ONE verify call per micro-batch → accept/reject →
 * commit/rollback → emit events. Other threads (the gateway, the CLI, tests)
 * only call the functions below.
 *
 * Events: each request has a bounded ring of events that the engine fills and
 * the consumer drains with engine_poll. When a request's ring is full the
 * engine pauses THAT request (backpressure) and keeps stepping the others.
 * A paused request gives up its max_running slot, so a consumer that stops
 * reading stalls only its own requests: waiting requests are admitted into
 * the freed slots. It keeps its KV blocks (its reservation too) and all
 * sequence state, so once its ring is half empty it resumes — taking the
 * next free slot ahead of waiting requests — with no gap and the tokens it
 * would have produced unpaused. KV space is not taken from paused requests:
 * admission still waits for room in the pools, and the per-client bound
 * below keeps one client from holding all of it.
 *
 * Fair share: requests that carry the same client (> 0; the gateway passes
 * its connection) may hold at most max_per_client admitted (prefilling,
 * running or paused) requests at once; the rest wait in the queue as usual
 * and enter as that client's earlier ones finish. Among waiting requests the
 * one whose client holds the fewest goes first (FIFO on ties), so a newcomer
 * is not queued behind a busy client's backlog.
 * The submitter's notify callback is called (on the engine thread) after new
 * events were pushed; it must be cheap and must not call back into the engine
 * with a lock held (the gateway passes one that calls lws_cancel_service).
 *
 * Ordering: per request, `started` comes first and `finished` (or `error`) is
 * the last event; nothing follows it. After the consumer has polled the final
 * event the request id is released (engine_poll returns -1 for it). */
#ifndef SPECD_ENGINE_H
#define SPECD_ENGINE_H

/* engine.h stands alone: it includes only C headers and policy/config.h (a
 * leaf). The value types it hands out are defined HERE, and the internal
 * headers that compute on them (errkind.h, sampler.h, gamma.h, cost_curve.h,
 * spec.h, tokenizer.h, draft_tree.h, tree_ctl.h) include this file for them:
 * the public header is the bottom, as sqlite3.h is for sqliteInt.h. A caller
 * of the engine (the gateway, the CLI's serving commands) needs nothing else
 * (tests/check_layers.py holds them to it). Pure functions on those values
 * keep their module's name (sampler_config_validate, spec_stats_alpha,
 * chat_render); what needs the loaded models is an engine_* function of the
 * engine (engine_tokenize, engine_chat_apply, ...). */
#include "policy/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================================================================
 * Public value types (their functions live in the engine's modules)
 * ====================================================================== */

/* ---- failure kinds (errkind.h explains the contract) -------------------
 * engine_status is what a failure was: engine_submit returns it and an error
 * event carries it beside its message, so a caller picks its reaction — the
 * gateway its HTTP status and WebSocket code (gateway/status_map.h) — from
 * the kind, never from the words. Derived from the engine's refusals and
 * error events; a new kind is one value here and one row in the gateway's
 * table (gateway/status_map.c). Cancellation is not a failure: it ends with
 * a `finished` event, reason cancelled. */
typedef enum {
    ENGINE_OK = 0,
    ENGINE_ERR_INVALID,       /* a bad request: sampler config, max_tokens, γ bounds, empty prompt, token ids,
                               * stop strings, grammar, tree bounds, a method without its model; at load: a
                               * missing, unreadable, malformed or unsupported file, a bad shape or setting,
                               * a draft or Medusa heads that do not match the target */
    ENGINE_ERR_OOM,           /* memory ran out (the request's state, a grammar, a sequence at admission; at
                               * load: weights, scratch, tables or KV pools, in host or backend memory) */
    ENGINE_ERR_CONTEXT_FULL,  /* prompt + max_tokens can never fit the context or the KV pools */
    ENGINE_ERR_QUEUE_FULL,    /* max_waiting requests are already queued: retry later */
    ENGINE_ERR_SHUTTING_DOWN, /* the engine is stopping (engine_destroy has begun) */
    ENGINE_ERR_BACKEND,       /* a model pass failed (prefill, draft, verify); at start-up: the backend (a
                               * device) or the engine thread could not be started */
    ENGINE_ERR_GRAMMAR,       /* a request's grammar does not compile, is over a grammar.* limit, or its
                               * shortest document cannot fit max_tokens (found by the compile worker) */
} engine_status;
#define ENGINE_STATUS_COUNT (ENGINE_ERR_GRAMMAR + 1)

/* A stable lower-case name ("ok", "invalid", "out_of_memory", "context_full",
 * "queue_full", "shutting_down", "backend"); "?" outside the enum. */
static inline const char *engine_status_name(engine_status st) {
    static const char *const names[ENGINE_STATUS_COUNT] = {"ok", "invalid", "out_of_memory", "context_full",
                                                           "queue_full", "shutting_down", "backend", "grammar"};
    return (unsigned)st < ENGINE_STATUS_COUNT ? names[st] : "?";
}

/* *st = v where st is not NULL (a loader's st may be NULL). */
static inline void engine_status_set(engine_status *st, engine_status v) {
    if (st) *st = v;
}

/* ---- sampling settings (sampler.h applies them) ------------------------
 * One request's sampling settings. Speculation applies ONE config to both the
 * draft (q) and the target (p), through sampler_probs, so both are processed
 * identically.
 *   temperature  0 = greedy (one-hot at the argmax, lowest id on ties); > 0 scales.
 *   top_k        0 = off; else keep the k most probable tokens.
 *   top_p        1 = off; else keep the smallest most-probable prefix whose mass
 *                reaches top_p (nucleus).
 *   min_p        0 = off; else keep tokens with prob >= min_p * (max prob). */
typedef struct {
    int32_t id;
    float bias;        /* added to the token's logit, in [-100, 100] */
} sampler_bias;

#define SAMPLER_MAX_BIAS 1024   /* most logit_bias entries of one config */
#define SAMPLER_LAST_N_DEFAULT 64

typedef struct {
    float temperature; /* finite, >= 0 */
    int top_k;         /* >= 0 */
    float top_p;       /* in (0, 1] */
    float min_p;       /* in [0, 1) */
    /* History-dependent logit processing (sampler_penalize), applied to the
     * raw logits before the steps of sampler_probs, as llama.cpp's chain does
     * (logit bias, then penalties). Zero-initialised fields mean off. */
    float repeat_penalty;    /* 0 or 1 = off; else > 0: a logit of a token in the window is divided by it
                              * when positive, multiplied when not (llama.cpp's repeat_penalty, vLLM's
                              * repetition_penalty) */
    float presence_penalty;  /* in [-2, 2]: subtracted once from the logit of each token in the window */
    float frequency_penalty; /* in [-2, 2]: subtracted once per occurrence in the window */
    int penalty_last_n;      /* the window: the last N tokens of the sequence, prompt included (llama.cpp's
                              * repeat_last_n); 0 = SAMPLER_LAST_N_DEFAULT, -1 = the whole sequence */
    const sampler_bias *logit_bias; /* (n_logit_bias) borrowed: whoever fills it keeps it alive */
    int n_logit_bias;        /* 0..SAMPLER_MAX_BIAS */
} sampler_config;

/* temperature 1, every filter off: the model's own distribution. */
sampler_config sampler_config_default(void);

/* Checks a config from a request. Returns true if valid; else false and writes a
 * one-line message naming the field and the allowed range into err[n] (if err and
 * n > 0). NaN is rejected everywhere. */
bool sampler_config_validate(const sampler_config *cfg, char *err, size_t n);

/* ---- speculation depth: γ bounds and the cost model (gamma.h) ---------- */
#define GAMMA_MAX 16
#define COST_CURVE_ROWS 32          /* the verify cost curve's extent; beyond it, extrapolated */

typedef struct {
    int gamma_min, gamma_max, gamma_default; /* 2..8 by policy; per-request override within bounds */
    bool adaptive;
    int window;             /* rolling window of verify steps (20) */
    int warmup;             /* steps of data before the controller decides (5) */
    float fallback_alpha;   /* rolling α below this ... (0.4) */
    int fallback_steps;     /* ... for this many consecutive steps drops to plain decoding (10) */
    int probe_interval;     /* plain steps before speculation is probed again (32) */
} gamma_params;

gamma_params gamma_params_default(void);
/* false with a message when bounds are inconsistent (min > max, outside 1..GAMMA_MAX, ...). */
bool gamma_params_validate(const gamma_params *g, char *err, unsigned long n);

/* The target's verify cost curve t(rows) (cost_curve.h). */
typedef struct {
    int n;                          /* the last measured row count (0: no curve) */
    double t[COST_CURVE_ROWS + 1];  /* [r], r = 1..COST_CURVE_ROWS: ms of a pass of r rows */
    double slope;                   /* ms per row past n (>= 0) */
} cost_curve;

/* Cost model of one draft/target pair, in milliseconds (gamma.h explains the
 * terms: a pass's base cost, per-position slopes, attention per key and per
 * (row, key) pair, the draft's per-token cost; calibrated at load, refitted
 * online). */
typedef struct {
    double draft_ms;
    double target_ms;
    double target_ms_per_pos;
    double draft_ms_per_row;
    double target_ms_per_pos_big;
    double target_ms_per_key, target_ms_per_pair;
    double key_prior, pair_prior;        /* the calibrated attention slopes */
    double fit[9];                       /* weighted sums of the online fit (gamma.c) */
    /* The measured verify cost curve, when there is one (gamma_costs_set_curve):
     * curve(m) = t(m rows) / t(1 row) (cost_curve_ratio), non-decreasing. It
     * then replaces the two per-position slopes: the rows of a pass cost
     * target_ms * (curve(m) - 1), linear past the measured rows. A CPU's curve is flat
     * while the pass is memory-bound and steps up where the kernels' row tiles
     * fill (F16 target here: 8 rows 1.0x, 16 rows 2.5x), which no two slopes
     * fit; and learning a slope from batched passes that all had the same row
     * count taught the model that rows were free (plain passes of 8 rows) or
     * dear (verify passes of 24) in turn, so the batch decision flipped. */
    cost_curve curve;                    /* curve.n 0: no curve, the slopes apply */
} gamma_costs;

/* ---- proposers, their names and statistics (spec.h) -------------------- */

/* Which proposer a sequence uses. DRAFT is 0 so a zeroed spec_seq_params
 * keeps the draft model; AUTO: the n-gram proposal when a lookup match exists
 * (with adaptive γ: and the cost model expects at least as many tokens per
 * millisecond from it as from the draft model, each at its own rolling α; the
 * lookup is nearly free, so it wins ties), else the draft model when one is
 * loaded. */
/* MEDUSA: the Medusa heads' slot (draft_medusa.h), which proposes trees
 * only: the engine steps such sequences through the tree path, and a chain
 * step of one is a plain step. AUTO sequences hold the heads' state too when
 * the heads are loaded and the sequence could use them (no logprobs, no
 * coupled verification, no penalties), so the engine's auto method can move
 * them onto the heads at any step. */
typedef enum { SPEC_METHOD_DRAFT = 0, SPEC_METHOD_NGRAM = 1, SPEC_METHOD_AUTO = 2, SPEC_METHOD_OFF = 3,
               SPEC_METHOD_MEDUSA = 4, SPEC_METHOD_EAGLE = 5 } spec_method;
const char *spec_method_name(spec_method m); /* "draft", "ngram", "auto", "off", "medusa", "eagle" */
/* Parses a method name; -1 when unknown. */
int spec_method_parse(const char *s);

/* Proposers as every report names and counts them (spec_stats.by[],
 * spec_drafter_name): 0 the draft model, 1 n-gram lookup, 2 the Medusa
 * heads — the numbering of the step's proposer slots (spec.h SPEC_DRAFTER_*).
 * Reports loop to SPEC_PROPOSERS. */
enum { SPEC_PROPOSER_MEDUSA = 2, SPEC_PROPOSER_EAGLE = 3, SPEC_PROPOSERS = 4 };
const char *spec_drafter_name(int slot); /* "draft", "ngram", "medusa", "eagle"; "plain" otherwise (-1) */
/* speculation.verify names: "rejection" -> 0, "coupled" -> 1, else -1
 * (spec_seq_params.coupled; engine_verify is this + 1). */
int spec_verify_parse(const char *s);

/* The per-step counters of one proposer. */
typedef struct {
    uint64_t verify_steps, drafted, accepted, rejections, tokens;
    uint64_t pos_reached[GAMMA_MAX], pos_accepted[GAMMA_MAX];
} spec_method_stats;

typedef struct {
    uint64_t verify_steps;      /* target passes that verified drafts */
    uint64_t plain_steps;       /* target passes without drafts */
    uint64_t drafted;           /* draft tokens proposed */
    uint64_t accepted;          /* draft tokens accepted */
    uint64_t rejections;        /* verify steps that ended in a rejection */
    uint64_t tokens;            /* tokens emitted by steps */
    uint64_t pos_reached[GAMMA_MAX]; /* verify steps that drafted a token at position i+1 */
    uint64_t pos_accepted[GAMMA_MAX];/* ... and accepted it */
    uint64_t fallbacks, probes, draft_failures, kv_resets;
    uint64_t tree_steps;        /* verify steps whose proposal branched (a tree, not a chain; spec_tree.h) */
    uint64_t tree_nodes;        /* nodes those and any other tree-path steps verified */
    /* time spent in the draft and target models: this sequence's SHARE of
     * each call it was batched into (the call's wall time x its rows / the
     * call's rows; see spec_step_info), so sums over sequences are wall time */
    double draft_ms, target_ms;
    /* prefix reuse (kv.h): prompt tokens offered to each pool's cache, and how
     * many came from it instead of a prefill; prompt tokens the target computed */
    uint64_t prefix_offered, prefix_reused, prefix_draft_offered, prefix_draft_reused, prefill_tokens;
    uint64_t kv_reset_reused;   /* target positions a hard reset took back from the prefix cache */
    spec_method_stats by[SPEC_PROPOSERS]; /* the verify-step counters above, per proposer */
} spec_stats;

/* Derived figures (0 when undefined). */
double spec_stats_alpha(const spec_stats *s);          /* accepted / (accepted + rejections) */
double spec_stats_mean_accepted(const spec_stats *s);  /* accepted drafts per verify step */
double spec_stats_tokens_per_pass(const spec_stats *s);/* tokens emitted per target pass */
void spec_stats_add(spec_stats *into, const spec_stats *s);

/* Log probabilities of an emitted token (the OpenAI `logprobs` fields):
 * log softmax of the target's raw logits at the token's position — the
 * model's own distribution, before temperature, top-k, top-p and min-p
 * (as the OpenAI API reports it) — but AFTER the grammar mask under a
 * constraint (renormalised over the tokens the grammar allows there, so the
 * alternatives are tokens that could have been emitted). For accepted drafts,
 * corrections and bonus tokens alike it is the verify pass's row at that
 * position, so a draft never changes it: the same numbers with speculation
 * on or off (greedy, up to the float rounding of the batch shape). */
#define SPEC_TOP_LOGPROBS 20
typedef struct {
    float logprob;              /* of the emitted token */
    int n_top;                  /* alternatives below (the request's top count, fewer when the mask allows fewer) */
    int32_t top_id[SPEC_TOP_LOGPROBS]; /* most probable first; ties: lower id first */
    float top_logprob[SPEC_TOP_LOGPROBS];
} spec_logprob;

/* ---- tree shapes (draft_tree.h, tree_ctl.h) ---------------------------- */
#define ENGINE_TREE_MAX_NODES GAMMA_MAX /* most nodes of one proposal (drafter.h DRAFTER_MAX_NODES) */
typedef struct {
    int budget;                 /* most nodes, 1..ENGINE_TREE_MAX_NODES (engine.tree_budget) */
    int depth;                  /* most levels (engine.tree_depth) */
    int topk;                   /* most children per node (engine.tree_topk); 1 = a chain */
} tree_shape;

#define TREE_CTL_ROWS COST_CURVE_ROWS /* t(rows) is measured up to here, extrapolated linearly beyond */

/* ---- text: tokens, chat messages and templates (tokenizer.h, chat.h) ---- */
typedef struct tokenizer tokenizer;  /* immutable; tokenizer.h */
typedef struct chat_tmpl chat_tmpl;  /* a loaded chat template; chat.h */

/* A byte span [start, end) of a text (tok_encode_spans: where special tokens
 * may be spelled). */
typedef struct {
    size_t start, end;
} tok_span;

/* The built-in chat template families (chat.c); engine_info.chat_template
 * is the one detected from the target's metadata. */
typedef enum {
    CHAT_TEMPLATE_PLAIN = 0,   /* "System: s\nUser: u\nAssistant: a\n" ... "Assistant:" ("Assistant:" + a
                                * when a begins with whitespace, as the model wrote it) */
    CHAT_TEMPLATE_LLAMA2,      /* [INST] <<SYS>>\ns\n<</SYS>>\n\nu [/INST] a </s><s>[INST] ... */
    CHAT_TEMPLATE_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\ntext<|eot_id|> */
    CHAT_TEMPLATE_CHATML,      /* <|im_start|>role\ntext<|im_end|>\n (Qwen, SmolLM) */
    CHAT_TEMPLATE_MISTRAL,     /* [INST] u [/INST]a</s>[INST] ... (Mistral-7B-Instruct v0.1) */
    CHAT_TEMPLATE_ZEPHYR,      /* <|role|>\ntext</s>\n (Zephyr, TinyLlama-Chat) */
    CHAT_TEMPLATE_COUNT
} chat_template_kind;

/* One message. Strings are borrowed, NUL-terminated. Roles other than
 * "system", "user" and "assistant" are rendered as user turns by the families
 * that have no slot for them (Llama 2, Mistral) and under their own name by
 * the others. */
typedef struct {
    const char *role;
    const char *content;
} chat_msg;

/* The canonical name of k (those above), or "?" when out of range. */
const char *chat_template_name(chat_template_kind k);

/* Renders msgs[0..n) in family k, as the family's reference template does,
 * except that the BOS text the template puts at the very start is NOT written
 * (the engine's tokenizer adds BOS itself). Later BOS texts (Llama 2 writes one
 * before every user turn after the first) are written as bos_text (NULL:
 * "<s>"). The end-of-turn text of the Llama 2, Mistral and Zephyr families is
 * "</s>". add_generation_prompt appends the assistant header where the family
 * has one (Llama 3, ChatML, Zephyr, PLAIN; Llama 2 and Mistral end a user turn
 * with [/INST] anyway). Message content is plain text: tokenize the result
 * with the markup spans from chat_render_spans (engine_request.special_spans),
 * never with special tokens parsed everywhere.
 *
 * Like snprintf: returns the length of the full rendering (excluding the NUL);
 * writes at most cap bytes including a terminating NUL (when cap > 0). The
 * output is complete iff the return value < cap. out may be NULL when cap is 0.
 * Message strings must be non-NULL (NULL content renders as ""). */
int chat_render(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt,
                const char *bos_text, char *out, size_t cap);

/* chat_render that also reports which bytes of the rendering are the
 * template's own markup (its literal text, the BOS texts, and the role names
 * "system", "user", "assistant", "tool"): the only bytes that may spell
 * special tokens. Message content (and any other role name) is never
 * markup, so a message reading "</s><s>" or "<|eot_id|>" cannot close the
 * turn. Writes the first max_spans spans, sorted and disjoint, to spans (may
 * be NULL when max_spans is 0) and their total count to *n_spans (may be
 * NULL); there are at most 2 * n + 2. Offsets are into the full rendering. */
int chat_render_spans(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt,
                      const char *bos_text, char *out, size_t cap, tok_span *spans, int max_spans, int *n_spans);

/* How a template's model writes tool calls (detected from the template's
 * text; the tool-call parser and grammar follow it). */
typedef enum {
    CHAT_TOOLS_GENERIC = 0,  /* {"name": ..., "arguments": {...}} as the whole reply */
    CHAT_TOOLS_LLAMA3,       /* {"name": ..., "parameters": {...}}, optionally after <|python_tag|> */
    CHAT_TOOLS_HERMES,       /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen 2.5) */
    CHAT_TOOLS_MISTRAL,      /* [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] */
    CHAT_TOOLS_FUNCTIONARY31,/* <function=NAME>{...}</function> */
    CHAT_TOOLS_FUNCTIONARY32,/* >>>NAME\n{...} (after the generation prompt's ">>>": NAME\n{...}) */
    CHAT_TOOLS_FIREFUNCTION, /*  functools[{"name": ..., "arguments": {...}}, ...] */
    CHAT_TOOLS_COMMAND_R7B,  /* <|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|> */
    CHAT_TOOLS_COMMAND_R,    /* Action: ```json\n[{"tool_name": ..., "parameters": {...}}]\n``` */
    CHAT_TOOLS_COUNT
} chat_tool_format;
const char *chat_tool_format_name(chat_tool_format f); /* "generic", "llama3", "hermes", ... */

/* ---- constrained generation (grammar.h) -------------------------------- */

/* The GBNF of JSON mode: any JSON value with an object or array at the top,
 * whitespace bounded as llama.cpp's json.gbnf does. Static storage. */
const char *grammar_json_gbnf(void);

/* ---- telemetry (telemetry.h): the durable SQLite record ----------------
 * A server opens the database, hands the handle to the engine
 * (engine_config.telemetry: per-step rows) and to whatever reads its
 * counters or mirrors the policy into it, and closes it after the engine. */
#define TEL_ID_LEN 64       /* model identities (spec_model_id.id) */
#define TEL_NAME_LEN 32     /* content type, speculation mode */

typedef struct {
    const char *path;           /* database file; created with its schema if missing */
    double sample_rate;         /* fraction of step rows kept, 0..1 (sessions are always kept) */
    int queue_size;             /* ring capacity in rows (default 16384) */
    int64_t retention_rows;     /* keep at most this many step rows (0 = no limit) */
    double retention_days;      /* delete step rows and finished sessions older than this (0 = keep) */
    int batch_max;              /* rows per write transaction (default 512) */
    int writer_delay_us;        /* tests only: sleep after each batch to slow the writer */
} telemetry_config;

/* sample_rate 1, queue 16384, batch 512, no retention limits. */
telemetry_config telemetry_config_default(void);

typedef struct {
    char model_id[TEL_ID_LEN];
    char content_type[TEL_NAME_LEN];  /* "" = the model's default rule (NULL in the table) */
    int gamma_min, gamma_max, gamma_default;
    double alpha_threshold;
} tel_policy_rule;

typedef struct {
    uint64_t queued;            /* rows accepted into the ring */
    uint64_t written;           /* rows committed to the database */
    uint64_t dropped;           /* rows refused because the ring was full */
    uint64_t sampled_out;       /* step rows skipped by sample_rate (not drops) */
    uint64_t failed;            /* rows lost to a database error (see last_error) */
    uint64_t batches;           /* committed write transactions */
    uint64_t retention_deleted; /* rows removed by retention */
    int queue_depth;            /* rows in the ring now */
    char last_error[256];       /* "" when none */
} tel_counters;

typedef struct telemetry telemetry;

/* Opens (creating if missing) the database, sets WAL + synchronous=NORMAL,
 * creates the schema, prepares the statements, and starts the writer thread.
 * Returns NULL with err filled ("telemetry: cannot open PATH: ...") when the
 * path cannot be opened for writing or is not a specd telemetry database.
 * One live handle per file: an exclusive advisory lock on PATH.lock (flock,
 * created beside the database and left there) is held until
 * telemetry_close, and a file another process (or handle) holds is refused
 * ("telemetry: PATH is in use by another running specd (pid N) ...") before
 * anything in it is read or changed. The caller owns the handle. */
telemetry *telemetry_open(const telemetry_config *cfg, char *err, size_t errlen);
/* Writes everything still queued, runs one retention pass, stops the writer
 * and closes the database. Accepts NULL. No producer may be running. */
void telemetry_close(telemetry *t);

/* Mirrors the active policy: the writer replaces every gamma_policy row with
 * these n rules (version `version`) in one transaction. All n rules are queued
 * together or none (false). n may be 0 (clears the table). */
bool telemetry_policy(telemetry *t, const tel_policy_rule *rules, int n, int version);

/* A snapshot of the counters; any thread. t may be NULL (all zero). */
void telemetry_counters(telemetry *t, tel_counters *out);

/* ======================================================================
 * The engine
 * ====================================================================== */

#define ENGINE_MAX_STOP 4          /* stop strings per request */
#define ENGINE_STOP_LEN 64         /* bytes per stop string */
#define ENGINE_TEXT_MAX 1024       /* text bytes per tokens event */
#define ENGINE_MAX_SHARDS 16       /* most backends the target can be split over */

/* Tree speculation (spec_tree.h, draft_tree.h, tree_ctl.h). off: chains only.
 * auto: per sequence and step, tree_ctl picks between the chain path (the
 * adaptive chain, or plain decoding) and trees of up to tree_budget nodes,
 * tree_depth levels and tree_topk children per node, by expected tokens per
 * millisecond from the measured verify cost curve and the acceptance each
 * shape achieved. fixed: every step proposes a tree of exactly those bounds.
 * Requests with logprobs or coupled verification always take the chain path
 * (auto) or are refused (a request asking for trees); a grammar applies to
 * every tree node (masked by the state after the node's own path). In a request
 * DEFAULT is the engine's setting; the engine's tree setting must not be off
 * for a request to ask for trees. */
typedef enum { ENGINE_TREE_DEFAULT = 0, ENGINE_TREE_OFF, ENGINE_TREE_AUTO, ENGINE_TREE_FIXED } engine_tree;
const char *engine_tree_name(engine_tree t); /* "default", "off", "auto", "fixed" */
int engine_tree_parse(const char *s);         /* "off", "auto", "fixed"; -1 otherwise */

/* Limits of one request's grammar (config section grammar:); 0 = the default. */
typedef struct {
    size_t max_bytes;              /* GBNF text (1 MiB) */
    int max_rules;                 /* rules after expansion (GRAMMAR_MAX_RULES) */
    size_t max_elements;           /* elements after expansion (GRAMMAR_MAX_ELEMENTS) */
    double compile_ms;             /* compile deadline (10 s) */
    size_t matcher_bytes;          /* memory of one compiled grammar (256 MiB) */
    size_t cache_bytes;            /* the compiled-grammar cache (256 MiB) */
} engine_grammar_limits;

/* Learning from traffic (issue 37; `specd serve --learn`, speculation.learn).
 * With `enabled` every sequence keeps the target's features at three layers
 * (the EAGLE head's, else 2, L/2 and L - 3) of every position it feeds —
 * prefix reuse is off for them — and a request that finishes, unless it
 * opted out (engine_request.no_learn, a policy rule's learn: false), leaves
 * its tokens and those features in the learning ring (engine/learn/ring.h):
 * nothing else, and only until newer requests push it out of ring_bytes. A
 * trainer (engine/train/learner.h) reads the ring and offers heads, which
 * the engine swaps in between steps (engine_learn_offer). */
typedef struct {
    bool enabled;
    size_t ring_bytes;             /* the ring's cap (256 MiB) */
    const char *spill_path;        /* the ring's SQLite mirror (NULL: memory only) */
} engine_learn_config;

/* Where the models run (engine_config.backend): the values of
 * kernels/backend.h's backend_kind. */
typedef enum { ENGINE_BACKEND_AUTO = 0, ENGINE_BACKEND_CPU = 1, ENGINE_BACKEND_CUDA = 2 } engine_backend;

typedef struct {
    const char *target_path;
    const char *draft_path;        /* NULL: plain decoding only */
    const char *chat_template;     /* --chat-template / models.chat_template: a file, a tokenizer.chat_template.NAME
                                    * of the model, or a built-in family; NULL: the model's own (chat.h chat_tmpl_load) */
    const char *medusa_path;       /* Medusa heads for the target (specd train-medusa; NULL: none): requests with
                                    * speculation.method medusa verify their trees (shape: the tree bounds) */
    const char *eagle_path;        /* an EAGLE-3 head for the target (specd convert-eagle3; NULL: none): requests with
                                    * speculation.method eagle draft chains with it */
    int threads;                   /* kernel threads (0 = all CPUs) */
    int backend;                   /* engine_backend: auto (CUDA when built and a GPU is present), cpu, cuda */
    int device;                    /* CUDA device of the models (of target shard 0 and the draft) */
    int tensor_parallel;           /* > 1: the target is split over this many backends (GPUs) */
    int devices[ENGINE_MAX_SHARDS]; /* CUDA device of each target shard (tensor_parallel of them) */
    int max_ctx;                   /* per sequence (0 = model's, capped) */
    int kv_blocks;                 /* per model pool (0 = room for max_running full contexts) */
    int block_size;                /* 16 */
    int kv_type;                   /* KV_F16 (default) or KV_F32 (kernels/backend.h): the caches' element type */
    int max_running;               /* sequences stepped together (32); paused requests do not count */
    int max_per_client;            /* admitted requests one client may hold (0 = max_running / 2, at least 1) */
    int max_waiting;               /* queued requests before submit refuses (1024) */
    int prefill_chunk;             /* prompt tokens prefilled per loop iteration (256) */
    int ring_events;               /* per-request event ring capacity (64) */
    float padding_cap;             /* micro-batch merge limit (1.5) */
    bool ragged;                   /* the backend takes ragged batches (CPU: true): all micro-batches share
                                    * one verify call; bins and padding are still planned and reported */
    gamma_params gamma;            /* defaults and bounds for requests */
    float draft_mem_warn_pct;      /* 20 */
    bool calibrate;                /* measure the cost model at start (true) */
    struct telemetry *telemetry;   /* per-step rows go here (not owned; NULL = off) */
    pol_store *policy;             /* γ rules per (model, content type), hot-reloadable (not owned; NULL = none) */
    const char *model_name;        /* the name policy rules match (the target file's base name) */
    int max_batch;                 /* most sequences in one verify call (0 = max_running) */
    int mode;                      /* spec_mode: SPEC_MODE_OFF turns speculation off for every request */
    int method;                    /* spec_method of requests that do not choose (auto) */
    bool coupled;                  /* speculation.verify: coupled for requests that do not choose (false) */
    int ngram_min, ngram_max;      /* n-gram lookup lengths (0: 2 and 5) */
    bool prefix_cache;             /* prefix KV reuse in both pools (true; kv.h, spec.h) */
    int prefix_cache_blocks;       /* most cached blocks no request holds, per pool (0: any free block) */
    int tree;                      /* engine_tree: OFF (or DEFAULT), AUTO, FIXED */
    int tree_budget, tree_depth, tree_topk; /* bounds of tree shapes (0: 16, 5, 3) */
    engine_grammar_limits grammar; /* constrained requests: compile limits and the cache's size */
    engine_learn_config learn;     /* learning from traffic (below; off by default) */
} engine_config;

engine_config engine_config_default(void);
/* The engine settings of a validated config snapshot (engine and speculation
 * sections; not models, telemetry or policy, which the caller wires): the one
 * path `specd serve`, `generate -c` and `bench -c` share. */
void engine_config_from_policy(engine_config *ec, const pol_config *pc);

typedef enum { SPEC_MODE_AUTO = 0, SPEC_MODE_DRAFT = 1, SPEC_MODE_OFF = 2 } spec_mode;

/* Verification of a seeded sampled request. rejection: accept min(1, p/q),
 * residual correction — the output is distributed as the target's, and for a
 * seed reproducible at a fixed γ. coupled: Gumbel-max with one noise per
 * (seed, position, token) for plain steps, drafts and verification — the
 * output is plain seeded sampling's token for token, for any γ, drafter,
 * batch and schedule (gumbel.h). Greedy requests are unaffected. */
typedef enum { ENGINE_VERIFY_DEFAULT = 0, ENGINE_VERIFY_REJECTION = 1, ENGINE_VERIFY_COUPLED = 2 } engine_verify;

typedef void (*engine_notify_fn)(void *user);

typedef struct {
    const int32_t *prompt;         /* token ids, or NULL to tokenize prompt_text */
    int n_prompt;
    const char *prompt_text;       /* used when prompt is NULL; BOS added per the vocabulary */
    /* Byte spans of prompt_text that may spell special tokens (a chat
     * template's own markup, from chat_render_spans; sorted, disjoint;
     * borrowed for the engine_submit call only). Everything else, and the
     * whole text when n_special_spans is 0, is plain text: a prompt never
     * turns "</s>" or "<|eot_id|>" typed by a user into control tokens. */
    const tok_span *special_spans;
    int n_special_spans;
    sampler_config sc;             /* ONE config for draft and target */
    uint64_t seed;
    int max_tokens;
    const char *stop[ENGINE_MAX_STOP]; /* stop strings (NULL-terminated list, may be NULL) */
    const int32_t *stop_ids;       /* extra stop token ids */
    int n_stop_ids;
    spec_mode mode;                /* auto: speculate when a proposer can; draft: the draft model; off: plain */
    spec_method method;            /* the proposer, when method_set (else the policy rule's / the engine's) */
    bool method_set;
    engine_verify verify;          /* how drafts are verified (default: the engine's speculation.verify) */
    bool seeded;                   /* the client chose the seed: with verify DEFAULT, coupled verification (so
                                    * the tokens are the same for any γ, proposer, timing and batch) unless the
                                    * request asks for Medusa or a tree, which only rejection verifies */
    bool no_prefix_cache;          /* neither reuse cached prompt blocks nor leave this prompt's behind */
    int gamma;                     /* 0: the engine's default; else fixed γ within bounds (adaptive=false) */
    bool adaptive;                 /* adaptive γ (default true in auto mode) */
    bool adaptive_set;             /* whether `adaptive` was given explicitly */
    const char *content_type;      /* "chat", "code", ... (policy hook; may be NULL) */
    /* Constrained generation: GBNF text (grammar.h; JSON mode and JSON
     * Schema arrive as their grammars), NULL = none. Copied by engine_submit,
     * which refuses a grammar that does not compile with the parser's
     * "line L, column C: reason". Every output token, drafted or verified,
     * is masked by it, and the output is finished within max_tokens. */
    const char *grammar;
    /* Log probabilities (spec.h spec_logprob: the target's raw distribution,
     * grammar-masked under a constraint): tokens events carry one per token,
     * with top_logprobs (0..SPEC_TOP_LOGPROBS) alternatives each. */
    bool logprobs;
    int top_logprobs;
    /* tree speculation (engine_tree above); bounds 0 = the engine's, else at
     * most the engine's */
    engine_tree tree;
    int tree_budget, tree_depth, tree_topk;
    bool no_learn;                 /* "learn": false — never enters the learning ring */
    uint64_t client;               /* who asked (the gateway: its connection); > 0 groups requests under
                                    * the max_per_client bound; 0 = a client of its own */
    engine_notify_fn notify;
    void *user;
} engine_request;

typedef enum { ENGINE_EV_STARTED = 1, ENGINE_EV_TOKENS, ENGINE_EV_FINISHED, ENGINE_EV_ERROR } engine_ev_type;
typedef enum { FINISH_LENGTH = 0, FINISH_STOP, FINISH_CANCELLED, FINISH_ERROR } engine_finish;

const char *engine_finish_name(engine_finish f); /* "length", "stop", "cancelled", "error" */

typedef struct {
    engine_ev_type type;
    uint64_t id;
    char session[40];              /* the request's session uuid (telemetry key), in every event */
    double t_emit_ms;              /* wall clock (unix ms) when the engine pushed the event */
    /* started */
    int prompt_tokens;
    double queue_ms;               /* time waiting for admission */
    /* tokens: ids and text of one step */
    int n_tokens;
    int32_t tokens[GAMMA_MAX + 1];
    int n_accepted;                /* leading tokens that were accepted draft tokens */
    int gamma;                     /* drafts proposed this step (0: plain step or the first token) */
    bool last_is_correction;       /* the last token corrected a rejected draft */
    bool last_is_bonus;            /* all drafts accepted: the last token is the bonus */
    bool has_logprobs;             /* the request asked for logprobs: lp[i] belongs to tokens[i] */
    spec_logprob lp[GAMMA_MAX + 1];
    int text_len;
    int text_accepted_len;         /* leading bytes of text that came from the accepted draft tokens */
    char text[ENGINE_TEXT_MAX];
    /* finished */
    engine_finish reason;
    int completion_tokens;
    double ttft_ms, tpot_ms;       /* time to first token; mean time per output token after it */
    spec_stats st;                 /* this request's speculation statistics */
    /* error */
    engine_status status;          /* what kind of failure (errkind.h): the caller's code comes from it */
    char message[256];             /* why, for a person */
} engine_event;

typedef struct engine engine;

/* Loads the models, calibrates, starts the engine thread. Returns NULL with
 * err filled and the failure's kind in *st (errkind.h; st may be NULL):
 * ENGINE_ERR_OOM when the models, KV pools or tables do not fit (the caller
 * may say what to lower), ENGINE_ERR_INVALID for bad files or settings,
 * ENGINE_ERR_BACKEND when the backend or the thread cannot start; ENGINE_OK
 * on success. Call from any thread; the caller owns the engine. */
engine *engine_create(const engine_config *cfg, engine_status *st, char *err, size_t errlen);
/* Cancels everything still running, stops the thread, frees (accepts NULL). */
void engine_destroy(engine *e);

/* Queues a request: ENGINE_OK with *id set (> 0), or the refusal's kind with
 * *id = 0 and err filled — ENGINE_ERR_INVALID (bad sampler config, γ outside
 * bounds, empty prompt, ...), ENGINE_ERR_QUEUE_FULL, ENGINE_ERR_OOM or
 * ENGINE_ERR_SHUTTING_DOWN (engine_destroy has begun). A prompt too long for
 * the context or the KV pools is accepted here and answered with an error
 * event of kind ENGINE_ERR_CONTEXT_FULL. Any thread. */
engine_status engine_submit(engine *e, const engine_request *r, uint64_t *id, char *err, size_t errlen);
/* Cancels a request (queued, prefilling or running). Returns 0, or -1 for an
 * unknown or already finished id. Its KV blocks are freed at once; a
 * `finished` event with reason cancelled follows. Any thread. */
int engine_cancel(engine *e, uint64_t id);
/* Pops the next event of request id without blocking. Returns 1 with *ev
 * filled, 0 when none is ready, -1 for an unknown or released id. Any thread
 * (one consumer per request). */
int engine_poll(engine *e, uint64_t id, engine_event *ev);

/* A snapshot of engine-wide counters (cheap; any thread). */
typedef struct {
    int running, waiting, prefilling;
    int paused;                    /* of running + prefilling: waiting for their reader (hold no slot) */
    int kv_free_target, kv_free_draft, kv_total;
    uint64_t steps, tokens, requests_done;
    double mean_microbatches, padding_ratio;
    uint64_t verify_calls;         /* target calls made by decode steps (one per step unless engine.max_batch
                                    * or the target's batch splits it) */
    uint64_t mixed_steps;          /* steps whose target pass verified the rows of more than one proposer path
                                    * (Medusa trees, draft/n-gram trees, chains) together */
    spec_stats st;                 /* totals over finished requests, plus running ones' steps so far */
    uint64_t accepted_hist[GAMMA_MAX + 1]; /* verify steps by number of accepted drafts */
    gamma_costs costs;
    double draft_mem_pct;
    bool draft_oom;                /* the configured draft did not fit in memory: plain decoding only */
    char backend[16];              /* "cpu" or "cuda" */
    int tensor_parallel;           /* target shards */
    char target_id[64], draft_id[64];
    /* prefix reuse per pool ([0] target, [1] draft): blocks in the index
     * (held or idle), idle ones (evictable), evicted and copied on write so
     * far; the tokens offered and reused are in st.prefix_* */
    int prefix_cached[2], prefix_idle[2];
    uint64_t prefix_evicted[2], prefix_cow[2];
    bool prefix_cache;             /* on for this engine */
    /* tree speculation: steps of tree-enabled sequences by the path taken
     * ([0] the chain path, [1] a tree), and of those trees, how many came
     * from the controller (auto) rather than a fixed shape */
    uint64_t tree_decisions[2], tree_auto;
    /* method auto with Medusa heads loaded: engine steps whose auto
     * sequences took [0] the chain/tree path, [1] Medusa trees */
    uint64_t path_steps[2];
    /* constrained generation: the compiled-grammar cache (bytes as last
     * measured, grammars, of them held), compiles, refusals, the slowest
     * compile, and requests whose grammar is being compiled now */
    uint64_t grammar_cache_bytes, grammar_cache_entries, grammar_cache_held;
    uint64_t grammar_compiles, grammar_cache_hits, grammar_evictions, grammar_refused;
    double grammar_compile_ms_max;
    int grammar_compiling;
} engine_stats;

void engine_get_stats(engine *e, engine_stats *out);

/* One running (or prefilling) request, as published after each engine step. */
typedef struct {
    uint64_t id;
    char session[40];
    char content_type[32];
    char mode[12];                 /* "adaptive", "fixed", "off" */
    char method[8];                /* the proposer of its last step: "draft", "ngram", "plain" */
    char shape[24];                /* its last step's shape: "chain", or "tree B/D/K" (budget/depth/topk) */
    bool prefilling;
    int gamma;                     /* γ of its last step */
    double alpha;                  /* its rolling α (-1 before data) */
    int tokens;                    /* generated so far */
    double tokens_per_s;           /* since its first token */
} engine_seq_info;

/* Copies up to max running requests into out; returns how many. Any thread. */
int engine_get_sequences(engine *e, engine_seq_info *out, int max);
/* The tokenizer of the loaded pair (immutable; any thread), for the engine's
 * own tools and tests, which include tokenizer.h; callers of the engine use
 * the engine_token* functions below. */
const tokenizer *engine_tokenizer(const engine *e);
/* The chat template chat requests render with (loaded at engine_create:
 * a template that does not compile fails the create). Owned by e. For tools
 * and tests (chat.h); callers use engine_chat_* below. */
const chat_tmpl *engine_chat_tmpl(const engine *e);

/* Fixed facts of the loaded engine (immutable; any thread). */
typedef struct {
    gamma_params gamma;            /* request bounds and defaults */
    int max_ctx;                   /* positions per sequence */
    bool has_draft;
    bool has_medusa;               /* Medusa heads are loaded */
    bool has_eagle;                /* an EAGLE-3 head is loaded */
    int chat_template;             /* chat_template_kind detected from the target's metadata */
    char bos_text[32];             /* the BOS token's text (chat templates that spell it out) */
    int tree;                      /* engine_tree of the engine (OFF when trees are off) */
    tree_shape tree_bounds;        /* its tree bounds */
    double tree_t_rows[TREE_CTL_ROWS + 1]; /* the measured verify cost curve t(rows), ms (0: not measured) */
    char backend_desc[96];         /* the (first shard's) backend, for people: backend_describe */
} engine_info;

void engine_get_info(const engine *e, engine_info *out);

/* ---- learning from traffic (engine/sched/learn.c; issue 37) ---------------
 * The trainer's side and the admin's. Any thread. */
typedef struct {
    bool enabled;                  /* engine_config.learn.enabled */
    bool paused;                   /* engine_learn_control "pause" (or speculation.learn.enabled: false) */
    int head_version;              /* 0: the head loaded at start (or none); +1 at every swap and rollback */
    bool has_head;                 /* an EAGLE head is live */
    char head_path[512];           /* its file ("" none) */
    int ring_samples;
    int64_t ring_positions;
    uint64_t ring_bytes, ring_cap, ring_pushed, ring_dropped;
    uint64_t opted_out;            /* finished requests kept out of the ring (no_learn, a policy rule) */
    uint64_t swaps, rejected, rollbacks; /* heads swapped in; candidates the trainer refused; rollbacks */
    /* the trainer's figures (engine_learn_report) */
    int64_t train_positions;       /* rows trained since start */
    double train_pos_per_s;        /* over its last round */
    double train_cpu_share;        /* its busy time / wall time over its last round */
    int rounds;
    double live_accept, cand_accept; /* the last round's held-out simulated acceptance (mean accepted
                                      * drafts per target pass) of the live head and the candidate */
    int64_t eval_rows;             /* held-out positions of that comparison */
    char state[24];                /* "off", "waiting", "training", "paused", "idle" */
    char message[200];             /* the last round's outcome, for people */
} engine_learn_stats;

void engine_get_learn_stats(engine *e, engine_learn_stats *out);

/* The trainer's report after each round (it sets the fields from
 * train_positions on; rejected counts a candidate refused). */
void engine_learn_report(engine *e, const engine_learn_stats *t, bool rejected);

/* A snapshot of the learning ring (ring.h's samples, oldest first; release
 * with engine_learn_release). Returns how many, -1 when learning is off. */
struct learn_sample;
int engine_learn_snapshot(engine *e, struct learn_sample ***out);
void engine_learn_release(struct learn_sample **s, int n);
/* Writes the ring's new samples to its spill file (the trainer calls it;
 * engine_destroy does not). */
int engine_learn_spill(engine *e);
/* The target layers whose features the ring holds (3), the target model and
 * its identity (for the trainer; immutable, read-only use). */
int engine_learn_layers(engine *e, int *layers);
struct model *engine_learn_target(engine *e);
const char *engine_learn_target_id(engine *e);

/* Offers the EAGLE head at path: loaded and checked on the caller's thread
 * (as models.eagle is: a head for another target is refused with the
 * reason), then swapped in by the engine thread between steps — running
 * sequences switch at a step boundary, their head state rebuilt from the
 * features of their committed tokens. The replaced head is kept for a
 * rollback. Returns 0, or -1 with err (nothing changes). */
int engine_learn_offer(engine *e, const char *path, char *err, size_t errlen);

/* The admin's operations (POST /admin/learn): "pause", "resume", "save"
 * (copies the live head's file to arg), "rollback" (the head before the last
 * swap comes back, between steps). Returns 0 with a message for people in
 * msg, or -1 with the reason (learning off, no head, nothing to roll back
 * to, an unknown op, the copy failed). */
int engine_learn_control(engine *e, const char *op, const char *arg, char *msg, size_t n);

/* ---- the loaded pair's text (engine_api.c) ------------------------------
 * The tokenizer and the chat template of the loaded pair, for callers of the
 * engine. All are immutable after engine_create: any thread, any number at
 * once. Each is the tokenizer's or the template's own function (tokenizer.h,
 * chat.h), whose contract it keeps. */

int engine_n_vocab(const engine *e);
bool engine_token_valid(const engine *e, int32_t id);    /* 0 <= id < engine_n_vocab */
bool engine_token_is_eog(const engine *e, int32_t id);   /* eos, eot or eom: the end of a generation */
/* Bytes of one token as they enter the text (no NUL); -(length) when over n
 * (nothing written). id must be valid. (tok_piece) */
int engine_token_piece(const engine *e, int32_t id, char *buf, size_t n);
/* Tokenizes text[0..len): add_special adds BOS/EOS as the vocabulary says
 * (prompts: true); parse_special lets control tokens written in the text
 * ("</s>") become those tokens. Returns the number of ids, or -(number
 * needed) with the first max_out written when they do not fit (out may be
 * NULL when max_out is 0). (tok_encode) */
int engine_tokenize(const engine *e, const char *text, size_t len, bool add_special, bool parse_special, int32_t *out,
                    int max_out);
/* Text of ids (every id must be valid: engine_token_valid; an invalid one
 * aborts). flags: ENGINE_DECODE_* below. Returns the length (no NUL), or
 * -(length) when over cap (buf clobbered). (tok_decode) */
enum {
    ENGINE_DECODE_SPECIAL = 1u << 0,      /* control and unknown tokens as their vocabulary text */
    ENGINE_DECODE_CONTINUATION = 1u << 1, /* the ids continue a text: keep a leading space */
};
int engine_detokenize(const engine *e, const int32_t *ids, int n, char *buf, size_t cap, unsigned flags);

/* Renders a conversation with the loaded chat template (chat_tmpl_apply):
 * messages a JSON array of OpenAI-shaped messages, tools a JSON array of
 * function tools or NULL. Returns 0 with *out (malloc'd, NUL-terminated,
 * *out_len bytes) and the template's markup spans (malloc'd, sorted,
 * disjoint: the only bytes that may spell special tokens, for
 * engine_request.special_spans); -1 with err when the template raises or the
 * input is not such JSON; -2 when tools are given and the model has no Jinja
 * template. The caller frees *out and *spans. */
int engine_chat_apply(const engine *e, const char *messages_json, size_t messages_len, const char *tools_json,
                      size_t tools_len, bool add_generation_prompt, char **out, size_t *out_len, tok_span **spans,
                      int *n_spans, char *err, size_t errlen);
/* How the loaded template's model writes tool calls. */
chat_tool_format engine_chat_tool_format(const engine *e);
/* Whether the loaded template is the model's (or a file's) Jinja template
 * (false: a built-in family, for a model without one), and where it came from
 * ("tokenizer.chat_template", "file tmpl.jinja", ...). */
bool engine_chat_is_jinja(const engine *e);
const char *engine_chat_source(const engine *e);

/* ---- the cost model's prediction (engine_api.c) -------------------------
 * The speedup the pair's cost model (engine_stats.costs) predicts for
 * speculation over plain decoding at per-token acceptance alpha, for a
 * sequence at about ctx cached tokens that took gamma_hist[g] steps at each
 * depth g = 0..GAMMA_MAX: expected tokens per millisecond of that mix over
 * plain decoding's. 0 when nothing was measured. Any thread. */
double engine_predicted_speedup(const gamma_costs *c, double alpha, const int *gamma_hist, int ctx);

#endif
