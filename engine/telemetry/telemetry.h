/* telemetry.h — speculation telemetry in SQLite, off the hot path: producers
 * copy fixed-size rows into a bounded ring; ONE writer thread drains it into
 * the database in batched transactions (WAL, prepared statements) and prunes
 * old step rows in the background. It is not a metrics system: live figures
 * come from engine_get_stats; this is the durable record read back by
 * `specd telemetry`.
 *
 * Threads: telemetry_open/telemetry_close on one owning thread. The producers
 * (telemetry_session_start, telemetry_step, telemetry_session_end,
 * telemetry_policy) and telemetry_counters may be called from any thread; they
 * never wait on SQLite and never allocate: each takes a mutex only long enough
 * to copy one row (or one policy table) into the ring. When the ring is full
 * the row is dropped, counted, and the call returns false.
 *
 * Tables (schema version 1; times are INTEGER unix milliseconds):
 *   speculation_sessions  one row per sequence: inserted at start, updated at end
 *   speculation_steps     one row per (sampled) speculation step
 *   gamma_policy          a mirror of the active γ policy rules */
#ifndef SPECD_TELEMETRY_H
#define SPECD_TELEMETRY_H

#include "engine/engine.h"
#include "engine/spec/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEL_UUID_LEN 37     /* 36 characters + NUL */

/* The handle (telemetry), its settings (telemetry_config), telemetry_open,
 * telemetry_close, the policy mirror (tel_policy_rule, telemetry_policy) and
 * the counters (tel_counters, telemetry_counters) are public: engine.h — a
 * server opens the database and hands it to the engine and the gateway. The
 * producers below are the engine's. */

typedef enum { TEL_STATUS_ACTIVE = 0, TEL_STATUS_COMPLETED, TEL_STATUS_FAILED, TEL_STATUS_CANCELLED } tel_status;
const char *tel_status_name(tel_status s); /* "active", "completed", "failed", "cancelled" */

/* Strings are copied (truncated to fit) into the ring; the caller keeps its own. */
typedef struct {
    char session_id[TEL_UUID_LEN];
    char request_id[TEL_UUID_LEN];
    int64_t created_ms;         /* unix ms; 0 = now */
    int prompt_tokens;
    char content_type[TEL_NAME_LEN];  /* "chat", "code", "structured", ... ("" = NULL) */
    char spec_mode[TEL_NAME_LEN];     /* "auto", "draft", "off" */
    char target_id[TEL_ID_LEN];       /* pair identity (spec_model_id.id of each model) */
    char draft_id[TEL_ID_LEN];        /* "" = no draft */
    char model_version[TEL_ID_LEN];   /* "" = target_id */
    int gamma;                        /* γ at start */
} tel_session;

typedef struct {
    char session_id[TEL_UUID_LEN];
    int step_num;
    int gamma_used;             /* the proposal's depth: γ of a chain, a tree's deepest level (0 = plain step) */
    int nodes;                  /* drafts verified: γ of a chain, a tree's nodes (0 = plain step) */
    int n_accepted;
    int n_rejected;             /* nodes - n_accepted for verify steps, 0 for plain */
    double draft_ms, target_ms; /* the sequence's share of the step's batched calls (spec_step_info) */
    double effective_tpot_ms;   /* (draft_ms + target_ms) / tokens emitted: model time per token, not latency */
    int64_t recorded_ms;        /* unix ms; 0 = now */
    char method[8];             /* the proposer: "draft", "ngram", "medusa"; "plain" for a plain step */
    bool tree;                  /* a tree step (shape 'tree'): n_accepted the accepted path's length */
    int head_version;           /* learning from traffic: the EAGLE head's version live at this step (0: the one
                                 * loaded at start, or none) */
} tel_step;

typedef struct {
    char session_id[TEL_UUID_LEN];
    int generated_tokens;
    int64_t total_accepted, total_rejected, total_target_passes;
    int rolling_accept_sum, rolling_accept_n;
    int current_gamma;
    int kv_valid_len;
    double ttft_ms, tpot_ms;
    tel_status status;
} tel_session_end;

/* Producers: any thread, never block on the database, never allocate. Each
 * returns true when the row was queued (or, for telemetry_step, deliberately
 * not sampled), false when the ring was full and the row was dropped (and
 * counted). t may be NULL (telemetry off): they return true and do nothing. */
bool telemetry_session_start(telemetry *t, const tel_session *s);
/* Kept when the deterministic hash of (session_id, step_num) falls under
 * sample_rate, so the same steps are kept on every run. Step rows leave a
 * reserve of queue_size/8 ring slots to session and policy rows. */
bool telemetry_step(telemetry *t, const tel_step *s);
/* Updates the session row (inserting it if its start row was dropped). */
bool telemetry_session_end(telemetry *t, const tel_session_end *e);

/* Helpers for the engine. tel_step_from_info fills a step row from one
 * spec_seq_step result (recorded now). tel_uuid_format writes a version-4
 * UUID built from two random 64-bit words. */
void tel_step_from_info(tel_step *out, const char *session_id, int step_num, const spec_step_info *info);
void tel_uuid_format(char out[TEL_UUID_LEN], uint64_t hi, uint64_t lo);

#endif
