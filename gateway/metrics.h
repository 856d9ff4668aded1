/* metrics.h — Prometheus text exposition (format 0.0.4) of the engine's
 * counters and the gateway's own: speculative-decoding counters under vLLM's
 * names (prefix "specd:"), TTFT/TPOT histograms, queue and KV gauges,
 * connections, requests and errors by code.
 *
 * State: one process-wide set of gateway metrics (histograms, error and
 * finish counters), updated lock-free from any thread (histograms and finish
 * counters are atomics; the error table takes a mutex, errors being rare).
 * metrics_render reads it while others update: each number is consistent on
 * its own, and a histogram's +Inf bucket always equals its _count. */
#ifndef SPECD_METRICS_H
#define SPECD_METRICS_H

#include "engine/engine.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Counters the gateway keeps itself and hands to metrics_render. */
typedef struct {
    uint64_t connections_open;  /* gauge: open connections (WebSocket + HTTP) */
    uint64_t connections_total; /* connections accepted since start */
    uint64_t requests_total;    /* generation requests submitted to the engine */
    uint64_t slow_disconnects;  /* clients dropped for not reading their output */
} gw_counters;

/* ---- histogram ----------------------------------------------------------------- */

#define METRICS_HIST_MAX 24

/* Fixed upper bounds in seconds (ascending), plus the implicit +Inf bucket.
 * Lock-free: observe is a few relaxed atomic adds. Zero-initialised state
 * with `bounds`/`n` set is ready (see metrics_hist_init). */
typedef struct {
    const double *bounds;               /* (n) upper bounds, seconds, ascending */
    int n;
    _Atomic uint64_t counts[METRICS_HIST_MAX + 1]; /* per bucket, NOT cumulative; [n] = above the last bound */
    _Atomic uint64_t sum_ns;            /* sum of observations, nanoseconds */
} metrics_hist;

/* Sets the bounds (n <= METRICS_HIST_MAX, ascending; else aborts) and zeroes
 * the counts. Not concurrent with observe. */
void metrics_hist_init(metrics_hist *h, const double *bounds, int n);
/* Counts one observation in seconds (negative and NaN count as 0). Any thread. */
void metrics_hist_observe(metrics_hist *h, double seconds);

/* ---- the process-wide gateway metrics --------------------------------------------- */

/* Zeroes every process-wide metric (start of serving; tests). */
void metrics_reset(void);
/* Time to first token / mean time per output token of a finished request, in
 * milliseconds. Any thread. */
void metrics_observe_ttft(double ms);
void metrics_observe_tpot(double ms);
/* One refused or failed request, by its stable code (GW_ERR_* / the OpenAI
 * error codes). Codes are copied (at most 31 bytes kept); past 32 distinct
 * codes the rest count as "other". NULL counts as "unknown". Any thread. */
void metrics_count_error(const char *code);
/* One finished request by reason (length/stop/cancelled/error). Any thread. */
void metrics_count_finished(engine_finish reason);

/* The exposition text: engine counters from es (NULL: engine families are
 * omitted), gateway counters from gc (NULL: zeros), and the process-wide
 * histograms and counters. Returns malloc'd NUL-terminated text (free());
 * NULL only when out of memory. Families (each with # HELP and # TYPE):
 *   specd:spec_decode_num_drafts_total            counter (verify steps)
 *   specd:spec_decode_num_draft_tokens_total      counter
 *   specd:spec_decode_num_accepted_tokens_total   counter
 *   specd:spec_decode_num_accepted_tokens_per_pos_total{position="1".."k"} counter
 *   specd:spec_decode_fallbacks_total, specd:kv_resets_total   counters
 *   specd:kv_reset_reused_tokens_total (positions a reset took back from the prefix cache) counter
 *   specd:generation_tokens_total, specd:engine_steps_total    counters
 *   specd:requests_total (gc), specd:request_success_total{finished_reason} counters
 *   specd:num_requests_running, _waiting, _prefilling          gauges
 *   specd:kv_blocks_used, specd:kv_blocks_free {model="target"|"draft"} gauges
 *   specd:time_to_first_token_seconds, specd:time_per_output_token_seconds histograms
 *   specd:connections_open (gauge), specd:connections_total,
 *   specd:slow_disconnects_total, specd:errors_total{code} counters
 * and, from ls when learning from traffic is on (NULL or off: omitted):
 *   specd:learn_swaps_total, _rejected_total, _rollbacks_total, _train_positions_total,
 *   _ring_pushed_total, _ring_dropped_total, _opted_out_total     counters
 *   specd:learn_head_version, _paused, _ring_bytes, _ring_cap_bytes, _ring_samples, _ring_positions,
 *   _train_positions_per_second, _train_cpu_share, _live_accept, _candidate_accept  gauges */
char *metrics_render(const engine_stats *es, const gw_counters *gc, const engine_learn_stats *ls);

/* ---- glue used by the gateway's event loop (also declared in gw.h) ---------------- */

void gw_metrics_init(void);                        /* = metrics_reset */
void gw_metrics_finished(const engine_event *ev);  /* TTFT, TPOT (when > 1 token), finish reason */
void gw_metrics_error(const char *code);           /* = metrics_count_error */

#endif
