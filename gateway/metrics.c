/* metrics.c — Prometheus text exposition of engine and gateway metrics (see
 * metrics.h). The render path allocates (a scrape is not a per-token path);
 * observations never do. */
#include "gateway/metrics.h"
#include "kernels/check.h"

#include "gateway/fields.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- histogram ----------------------------------------------------------------------- */

void metrics_hist_init(metrics_hist *h, const double *bounds, int n) {
    SPECD_CHECK(n >= 1 && n <= METRICS_HIST_MAX);
    for (int i = 1; i < n; i++) SPECD_CHECK(bounds[i] > bounds[i - 1]);
    h->bounds = bounds;
    h->n = n;
    for (int i = 0; i <= METRICS_HIST_MAX; i++) atomic_store_explicit(&h->counts[i], 0, memory_order_relaxed);
    atomic_store_explicit(&h->sum_ns, 0, memory_order_relaxed);
}

void metrics_hist_observe(metrics_hist *h, double seconds) {
    if (!(seconds > 0)) seconds = 0; /* NaN too */
    int b = 0;
    while (b < h->n && seconds > h->bounds[b]) b++; /* le: a value equal to a bound falls in it */
    atomic_fetch_add_explicit(&h->counts[b], 1, memory_order_relaxed);
    double ns = seconds * 1e9;
    atomic_fetch_add_explicit(&h->sum_ns, ns < 1.8e19 ? (uint64_t)ns : UINT64_MAX / 2, memory_order_relaxed);
}

/* ---- process-wide state ------------------------------------------------------------------ */

/* TTFT spans queueing and prefill (ms to seconds); TPOT is per token, so its
 * buckets reach down to 50 µs for small models on fast hardware. */
static const double ttft_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                     0.5,   0.75,   1.0,   2.5,  5.0,   10.0, 20.0,  40.0};
static const double tpot_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                     0.025,   0.05,   0.075,   0.1,    0.15,  0.25,   0.5,   1.0, 2.5};

#define N_ERR_CODES 32

static struct {
    metrics_hist ttft, tpot;
    _Atomic uint64_t finished[GW_FINISH_COUNT]; /* by engine_finish */
    pthread_mutex_t err_lock;
    char err_code[N_ERR_CODES][32];
    uint64_t err_count[N_ERR_CODES];
    int n_err;
    uint64_t err_other;
} g = {
    .ttft = {.bounds = ttft_bounds, .n = (int)(sizeof ttft_bounds / sizeof ttft_bounds[0])},
    .tpot = {.bounds = tpot_bounds, .n = (int)(sizeof tpot_bounds / sizeof tpot_bounds[0])},
    .err_lock = PTHREAD_MUTEX_INITIALIZER,
};

void metrics_reset(void) {
    metrics_hist_init(&g.ttft, ttft_bounds, (int)(sizeof ttft_bounds / sizeof ttft_bounds[0]));
    metrics_hist_init(&g.tpot, tpot_bounds, (int)(sizeof tpot_bounds / sizeof tpot_bounds[0]));
    for (int i = 0; i < GW_FINISH_COUNT; i++) atomic_store_explicit(&g.finished[i], 0, memory_order_relaxed);
    pthread_mutex_lock(&g.err_lock);
    g.n_err = 0;
    g.err_other = 0;
    pthread_mutex_unlock(&g.err_lock);
}

void metrics_observe_ttft(double ms) { metrics_hist_observe(&g.ttft, ms / 1000.0); }
void metrics_observe_tpot(double ms) { metrics_hist_observe(&g.tpot, ms / 1000.0); }

void metrics_count_finished(engine_finish reason) {
    int r = (int)reason;
    if (r < 0 || r >= GW_FINISH_COUNT) r = FINISH_ERROR;
    atomic_fetch_add_explicit(&g.finished[r], 1, memory_order_relaxed);
}

void metrics_count_error(const char *code) {
    char c[32];
    /* label values are escaped at render time; keep the stored code printable */
    snprintf(c, sizeof c, "%s", code && code[0] ? code : "unknown");
    pthread_mutex_lock(&g.err_lock);
    int i = 0;
    while (i < g.n_err && strcmp(g.err_code[i], c) != 0) i++;
    if (i < g.n_err) {
        g.err_count[i]++;
    } else if (g.n_err < N_ERR_CODES) {
        memcpy(g.err_code[i], c, sizeof c);
        g.err_count[i] = 1;
        g.n_err++;
    } else {
        g.err_other++;
    }
    pthread_mutex_unlock(&g.err_lock);
}

void gw_metrics_init(void) { metrics_reset(); }

void gw_metrics_finished(const engine_event *ev) {
    if (ev->completion_tokens > 0 && ev->reason != FINISH_ERROR) metrics_observe_ttft(ev->ttft_ms);
    if (ev->completion_tokens > 1 && ev->reason != FINISH_ERROR) metrics_observe_tpot(ev->tpot_ms);
    metrics_count_finished(ev->reason);
}

void gw_metrics_error(const char *code) { metrics_count_error(code); }

/* ---- text ---------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} tbuf;

static void tb_printf(tbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns, b->cap = cap;
    }
}

static void family(tbuf *b, const char *name, const char *type, const char *help) {
    tb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(tbuf *b, const char *name, uint64_t v) { tb_printf(b, "%s %llu\n", name, (unsigned long long)v); }

static void counter(tbuf *b, const char *name, const char *help, uint64_t v) {
    family(b, name, "counter", help);
    sample_u(b, name, v);
}

static void gauge(tbuf *b, const char *name, const char *help, double v) {
    family(b, name, "gauge", help);
    tb_printf(b, "%s %.17g\n", name, v);
}

/* A label value with \\, \" and \n escaped, as the text format wants. */
static void label_value(char *out, size_t cap, const char *v) {
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"') out[o++] = '\\', out[o++] = *v;
        else if (*v == '\n') out[o++] = '\\', out[o++] = 'n';
        else out[o++] = *v;
    }
    out[o] = '\0';
}

static void histogram(tbuf *b, const char *name, const char *help, metrics_hist *h) {
    family(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->n) tb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
        else tb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    tb_printf(b, "%s_sum %.9f\n", name, (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) * 1e-9);
    /* _count from the same bucket reads, so +Inf == _count even under concurrent observes */
    tb_printf(b, "%s_count %llu\n", name, (unsigned long long)cum);
}

/* Learning from traffic (issue 37): only while it is on, as the draft's KV
 * samples only with a draft. */
static void learn_families(tbuf *b, const engine_learn_stats *ls) {
    counter(b, "specd:learn_swaps_total", "Learned heads swapped in between engine steps.", ls->swaps);
    counter(b, "specd:learn_rejected_total",
            "Candidate heads the trainer refused (not ahead of the live head by speculation.learn_margin).",
            ls->rejected);
    counter(b, "specd:learn_rollbacks_total", "Rollbacks to the previous head (POST /admin/learn).", ls->rollbacks);
    counter(b, "specd:learn_train_positions_total", "Positions (rows) the trainer trained on since start.",
            (uint64_t)ls->train_positions);
    counter(b, "specd:learn_ring_pushed_total", "Finished requests recorded into the learning ring.", ls->ring_pushed);
    counter(b, "specd:learn_ring_dropped_total", "Requests dropped from the learning ring, oldest first, to stay under its cap.",
            ls->ring_dropped);
    counter(b, "specd:learn_opted_out_total",
            "Finished requests kept out of the learning ring (\"learn\": false or a policy rule's learn: false).",
            ls->opted_out);
    gauge(b, "specd:learn_head_version", "Version of the live head: 0 at start, +1 at every swap and rollback.",
          ls->head_version);
    gauge(b, "specd:learn_paused", "1 while learning is paused (POST /admin/learn or speculation.learn: false).",
          ls->paused ? 1 : 0);
    gauge(b, "specd:learn_ring_bytes", "Memory the learning ring holds.", (double)ls->ring_bytes);
    gauge(b, "specd:learn_ring_cap_bytes", "The learning ring's cap (speculation.learn_ring_mb).", (double)ls->ring_cap);
    gauge(b, "specd:learn_ring_samples", "Requests in the learning ring.", ls->ring_samples);
    gauge(b, "specd:learn_ring_positions", "Token positions in the learning ring.", (double)ls->ring_positions);
    gauge(b, "specd:learn_train_positions_per_second", "The trainer's rows per second over its last round.",
          ls->train_pos_per_s);
    gauge(b, "specd:learn_train_cpu_share", "The trainer's busy time over wall time in its last round.",
          ls->train_cpu_share);
    gauge(b, "specd:learn_live_accept",
          "Simulated acceptance (accepted drafts per target pass) of the live head on the last round's held-out slice.",
          ls->live_accept);
    gauge(b, "specd:learn_candidate_accept", "The same of the last round's candidate.", ls->cand_accept);
}

char *metrics_render(const engine_stats *es, const gw_counters *gc, const engine_learn_stats *ls) {
    tbuf b = {malloc(8192), 0, 8192, false};
    if (!b.s) return NULL;
    b.s[0] = '\0';
    gw_counters zero = {0};
    if (!gc) gc = &zero;

    if (es) {
        const spec_stats *st = &es->st;
        counter(&b, "specd:spec_decode_num_drafts_total", "Verify steps that checked drafted tokens (finished requests).",
                st->verify_steps);
        counter(&b, "specd:spec_decode_num_draft_tokens_total", "Draft tokens proposed (finished requests).",
                st->drafted);
        counter(&b, "specd:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (finished requests).",
                st->accepted);
        family(&b, "specd:spec_decode_num_accepted_tokens_per_pos_total", "counter",
               "Draft tokens accepted at each draft position (1 = first drafted token).");
        int last = 1;
        for (int i = 0; i < GAMMA_MAX; i++)
            if (st->pos_reached[i]) last = i + 1;
        for (int i = 0; i < last; i++)
            tb_printf(&b, "specd:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", i + 1,
                      (unsigned long long)st->pos_accepted[i]);
        family(&b, "specd:spec_decode_num_drafted_tokens_per_pos_total", "counter",
               "Draft tokens proposed at each draft position (denominator of the per-position acceptance rate).");
        for (int i = 0; i < last; i++)
            tb_printf(&b, "specd:spec_decode_num_drafted_tokens_per_pos_total{position=\"%d\"} %llu\n", i + 1,
                      (unsigned long long)st->pos_reached[i]);
        /* the same per proposer: separate families, so a sum over a family's samples stays the total */
        static const char *const fams[3][2] = {
            {"specd:spec_decode_num_drafts_by_method_total", "Verify steps that checked drafted tokens, per proposer."},
            {"specd:spec_decode_num_draft_tokens_by_method_total", "Draft tokens proposed, per proposer."},
            {"specd:spec_decode_num_accepted_tokens_by_method_total", "Draft tokens accepted, per proposer."}};
        for (int f = 0; f < 3; f++) {
            family(&b, fams[f][0], "counter", fams[f][1]);
            for (int m = 0; m < SPEC_PROPOSERS; m++) {
                const spec_method_stats *bm = &st->by[m];
                uint64_t v = f == 0 ? bm->verify_steps : f == 1 ? bm->drafted : bm->accepted;
                tb_printf(&b, "%s{method=\"%s\"} %llu\n", fams[f][0], spec_drafter_name(m), (unsigned long long)v);
            }
        }
        for (int f = 0; f < 2; f++) {
            const char *name = f ? "specd:spec_decode_num_drafted_tokens_per_pos_by_method_total"
                                 : "specd:spec_decode_num_accepted_tokens_per_pos_by_method_total";
            family(&b, name, "counter",
                   f ? "Draft tokens proposed at each draft position, per proposer."
                     : "Draft tokens accepted at each draft position, per proposer.");
            for (int m = 0; m < SPEC_PROPOSERS; m++)
                for (int i = 0; i < GAMMA_MAX && st->by[m].pos_reached[i]; i++)
                    tb_printf(&b, "%s{method=\"%s\",position=\"%d\"} %llu\n", name, spec_drafter_name(m), i + 1,
                              (unsigned long long)(f ? st->by[m].pos_reached[i] : st->by[m].pos_accepted[i]));
        }
        counter(&b, "specd:spec_decode_fallbacks_total", "Times a sequence dropped to plain decoding for low acceptance.",
                st->fallbacks);
        counter(&b, "specd:kv_resets_total", "KV cache resets after a failed draft or verify.", st->kv_resets);
        counter(&b, "specd:kv_reset_reused_tokens_total",
                "Positions KV resets took back from the prefix cache instead of re-prefilling them.", st->kv_reset_reused);
        /* tree speculation (speculation.tree): what the tree-enabled requests' steps did */
        family(&b, "specd:spec_tree_decisions_total", "counter",
               "Steps of tree-enabled requests by the path taken: chain (the chain path) or tree.");
        tb_printf(&b, "specd:spec_tree_decisions_total{path=\"chain\"} %llu\n",
                  (unsigned long long)es->tree_decisions[0]);
        tb_printf(&b, "specd:spec_tree_decisions_total{path=\"tree\"} %llu\n",
                  (unsigned long long)es->tree_decisions[1]);
        counter(&b, "specd:spec_tree_auto_steps_total", "Tree steps whose shape the controller chose (tree: auto).",
                es->tree_auto);
        counter(&b, "specd:spec_tree_branched_steps_total",
                "Verify steps whose proposal branched (a tree, not a chain; finished requests).", st->tree_steps);
        counter(&b, "specd:spec_tree_nodes_total", "Tree nodes verified (finished requests).", st->tree_nodes);
        counter(&b, "specd:generation_tokens_total", "Tokens generated by the engine.", es->tokens);
        counter(&b, "specd:engine_steps_total", "Engine decode steps.", es->steps);
        counter(&b, "specd:verify_calls_total",
                "Target calls of decode steps (more than steps when engine.max_batch splits a step).", es->verify_calls);
        counter(&b, "specd:mixed_steps_total",
                "Decode steps whose one target pass verified rows of several proposer paths (Medusa trees, "
                "draft/n-gram trees, chains).", es->mixed_steps);
        counter(&b, "specd:requests_finished_total", "Requests the engine finished (any reason).", es->requests_done);
        gauge(&b, "specd:num_requests_running", "Requests being decoded.", es->running);
        gauge(&b, "specd:num_requests_waiting", "Requests queued for admission.", es->waiting);
        gauge(&b, "specd:num_requests_prefilling", "Requests whose prompt is being prefilled.", es->prefilling);
        bool draft = es->draft_id[0] != '\0';
        family(&b, "specd:kv_blocks_used", "gauge", "KV cache blocks in use, per model.");
        tb_printf(&b, "specd:kv_blocks_used{model=\"target\"} %d\n", es->kv_total - es->kv_free_target);
        if (draft) tb_printf(&b, "specd:kv_blocks_used{model=\"draft\"} %d\n", es->kv_total - es->kv_free_draft);
        family(&b, "specd:kv_blocks_free", "gauge", "KV cache blocks free, per model.");
        tb_printf(&b, "specd:kv_blocks_free{model=\"target\"} %d\n", es->kv_free_target);
        if (draft) tb_printf(&b, "specd:kv_blocks_free{model=\"draft\"} %d\n", es->kv_free_draft);
        /* constrained generation: the compiled-grammar cache (bounded by grammar.cache_mb) */
        gauge(&b, "specd:grammar_cache_bytes", "Memory of the compiled grammars kept for reuse (as last measured).",
              (double)es->grammar_cache_bytes);
        gauge(&b, "specd:grammar_cache_entries", "Compiled grammars kept for reuse.", (double)es->grammar_cache_entries);
        gauge(&b, "specd:grammar_compiling", "Requests whose grammar the compile worker is compiling or has queued.",
              es->grammar_compiling);
        counter(&b, "specd:grammar_compiles_total", "Grammars compiled (cache misses).", es->grammar_compiles);
        counter(&b, "specd:grammar_cache_hits_total", "Constrained requests whose grammar was already compiled.",
                es->grammar_cache_hits);
        counter(&b, "specd:grammar_evictions_total", "Compiled grammars evicted to stay under grammar.cache_mb.",
                es->grammar_evictions);
        counter(&b, "specd:grammar_refused_total", "Grammars refused: invalid, over a grammar.* limit, or out of memory.",
                es->grammar_refused);
        gauge(&b, "specd:grammar_compile_seconds_max", "The slowest grammar compile so far.",
              es->grammar_compile_ms_max / 1000.0);
        /* prefix reuse (issue 20), per pool; the hit ratio is reused / prompt tokens */
        const uint64_t pt[2] = {es->st.prefix_offered, es->st.prefix_draft_offered};
        const uint64_t pr[2] = {es->st.prefix_reused, es->st.prefix_draft_reused};
        static const char *const pm[2] = {"target", "draft"};
        int np = draft ? 2 : 1;
        family(&b, "specd:prefix_cache_prompt_tokens_total", "counter",
               "Prompt tokens offered to the prefix cache, per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_prompt_tokens_total{model=\"%s\"} %llu\n", pm[k], (unsigned long long)pt[k]);
        family(&b, "specd:prefix_cache_reused_tokens_total", "counter",
               "Prompt tokens taken from cached KV blocks instead of a prefill, per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_reused_tokens_total{model=\"%s\"} %llu\n", pm[k], (unsigned long long)pr[k]);
        family(&b, "specd:prefix_cache_hit_ratio", "gauge", "Reused / offered prompt tokens since start, per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_hit_ratio{model=\"%s\"} %.4f\n", pm[k], pt[k] ? (double)pr[k] / (double)pt[k] : 0.0);
        family(&b, "specd:prefix_cache_blocks", "gauge", "KV blocks in the prefix index (held or idle), per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_blocks{model=\"%s\"} %d\n", pm[k], es->prefix_cached[k]);
        family(&b, "specd:prefix_cache_idle_blocks", "gauge", "Cached KV blocks no request holds (evictable), per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_idle_blocks{model=\"%s\"} %d\n", pm[k], es->prefix_idle[k]);
        family(&b, "specd:prefix_cache_evicted_blocks_total", "counter", "Cached KV blocks evicted (LRU), per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_evicted_blocks_total{model=\"%s\"} %llu\n", pm[k], (unsigned long long)es->prefix_evicted[k]);
        family(&b, "specd:prefix_cache_cow_blocks_total", "counter", "Shared KV blocks copied before a write, per model pool.");
        for (int k = 0; k < np; k++) tb_printf(&b, "specd:prefix_cache_cow_blocks_total{model=\"%s\"} %llu\n", pm[k], (unsigned long long)es->prefix_cow[k]);
    }

    if (ls && ls->enabled) learn_families(&b, ls);

    histogram(&b, "specd:time_to_first_token_seconds", "Time from request arrival to its first token.", &g.ttft);
    histogram(&b, "specd:time_per_output_token_seconds", "Mean time per output token after the first, per request.",
              &g.tpot);
    family(&b, "specd:request_success_total", "counter", "Finished requests by finish reason.");
    for (int i = 0; i < GW_FINISH_COUNT; i++)
        tb_printf(&b, "specd:request_success_total{finished_reason=\"%s\"} %llu\n", gw_finish_name((engine_finish)i),
                  (unsigned long long)atomic_load_explicit(&g.finished[i], memory_order_relaxed));

    counter(&b, "specd:requests_total", "Generation requests the gateway submitted to the engine.", gc->requests_total);
    gauge(&b, "specd:connections_open", "Open client connections.", (double)gc->connections_open);
    counter(&b, "specd:connections_total", "Client connections accepted.", gc->connections_total);
    counter(&b, "specd:slow_disconnects_total", "Clients disconnected for not reading their output.",
            gc->slow_disconnects);

    family(&b, "specd:errors_total", "counter", "Requests refused or failed, by error code.");
    pthread_mutex_lock(&g.err_lock);
    for (int i = 0; i < g.n_err; i++) {
        char lv[80];
        label_value(lv, sizeof lv, g.err_code[i]);
        tb_printf(&b, "specd:errors_total{code=\"%s\"} %llu\n", lv, (unsigned long long)g.err_count[i]);
    }
    if (g.err_other) tb_printf(&b, "specd:errors_total{code=\"other\"} %llu\n", (unsigned long long)g.err_other);
    pthread_mutex_unlock(&g.err_lock);

    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
