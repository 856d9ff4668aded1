/* monitor.c — the live monitor feed: WebSocket /v1/monitor (subprotocol
 * specd.monitor.v1). A timer on the loop thread builds one JSON snapshot a few
 * times a second from engine counters (copied under the engine's lock, never
 * touching its hot path) and queues it on every monitor connection; a client
 * that does not keep up simply misses snapshots. */
#include "gateway/gw.h"
#include "gateway/learn_api.h"


#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MON_INTERVAL_US (250 * LWS_US_PER_MS)
#define MON_WINDOW 20 /* snapshots in the rolling α window (5 s) */
#define MON_LAT_RING 512
#define MON_MAX_SEQS 256
/* the window's proposal counters: drafted tokens (nodes), plain passes, tree
 * steps that branched, then per proposer slot verify steps, drafted, accepted */
enum { MP_DRAFTED, MP_PLAIN, MP_TREE_STEPS, MP_BY, MON_PROP = MP_BY + 3 * SPEC_PROPOSERS };

static struct {
    bool scheduled;               /* gw_server.monitor_sul is scheduled */
    double t_prev, tps;
    uint64_t tokens_prev;
    /* rolling window of cumulative counters */
    uint64_t acc[MON_WINDOW], rej[MON_WINDOW], ver[MON_WINDOW];
    uint64_t prop[MON_WINDOW][MON_PROP]; /* the proposal counters below (mon_prop) */
    int n, head;
    double ttft[MON_LAT_RING], tpot[MON_LAT_RING];
    int n_lat, lat_head;
    engine_seq_info seqs[MON_MAX_SEQS];
} mon;

void gw_monitor_record(const engine_event *ev) {
    mon.ttft[mon.lat_head] = ev->ttft_ms;
    mon.tpot[mon.lat_head] = ev->tpot_ms;
    mon.lat_head = (mon.lat_head + 1) % MON_LAT_RING;
    if (mon.n_lat < MON_LAT_RING) mon.n_lat++;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static json_t *percentiles(const double *ring, int n) {
    double v[MON_LAT_RING];
    memcpy(v, ring, sizeof(double) * (size_t)n);
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    json_t *o = json_object();
    json_object_set_new(o, "p50", n ? json_real(v[(n - 1) / 2]) : json_null());
    json_object_set_new(o, "p99", n ? json_real(v[(int)((n - 1) * 0.99)]) : json_null());
    return o;
}

static json_t *kv_obj(int free_blocks, int total) {
    json_t *o = json_object();
    json_object_set_new(o, "used", json_integer(total - free_blocks));
    json_object_set_new(o, "free", json_integer(free_blocks));
    json_object_set_new(o, "total", json_integer(total));
    return o;
}

static char *snapshot_json(gw_server *s) {
    engine_stats es;
    engine_get_stats(s->eng, &es);
    engine_info info;
    engine_get_info(s->eng, &info);
    double now = gw_now_ms();
    if (mon.t_prev > 0 && now > mon.t_prev) {
        double inst = (double)(es.tokens - mon.tokens_prev) / ((now - mon.t_prev) / 1e3);
        mon.tps = 0.5 * mon.tps + 0.5 * inst;
    }
    mon.t_prev = now;
    mon.tokens_prev = es.tokens;
    /* window of cumulative counters: α over the last MON_WINDOW snapshots */
    mon.acc[mon.head] = es.st.accepted, mon.rej[mon.head] = es.st.rejections, mon.ver[mon.head] = es.st.verify_steps;
    int oldest = mon.n < MON_WINDOW ? 0 : (mon.head + 1) % MON_WINDOW;
    uint64_t da = es.st.accepted - mon.acc[oldest], dr = es.st.rejections - mon.rej[oldest];
    uint64_t dv = es.st.verify_steps - mon.ver[oldest];
    uint64_t *pw = mon.prop[mon.head], dp[MON_PROP];
    pw[MP_DRAFTED] = es.st.drafted, pw[MP_PLAIN] = es.st.plain_steps;
    pw[MP_TREE_STEPS] = es.st.tree_steps;
    for (int m = 0; m < SPEC_PROPOSERS; m++) {
        pw[MP_BY + 3 * m] = es.st.by[m].verify_steps;
        pw[MP_BY + 3 * m + 1] = es.st.by[m].drafted;
        pw[MP_BY + 3 * m + 2] = es.st.by[m].accepted;
    }
    for (int k = 0; k < MON_PROP; k++) dp[k] = pw[k] - mon.prop[oldest][k];
    mon.head = (mon.head + 1) % MON_WINDOW;
    if (mon.n < MON_WINDOW) mon.n++;

    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("snapshot"));
    json_object_set_new(o, "t_ms", json_real(now));
    json_object_set_new(o, "tokens_per_s", json_real(mon.tps));
    json_object_set_new(o, "running", json_integer(es.running));
    json_object_set_new(o, "waiting", json_integer(es.waiting));
    json_object_set_new(o, "prefilling", json_integer(es.prefilling));
    json_t *kv = json_object();
    json_object_set_new(kv, "target", kv_obj(es.kv_free_target, es.kv_total));
    if (info.has_draft) json_object_set_new(kv, "draft", kv_obj(es.kv_free_draft, es.kv_total));
    json_object_set_new(o, "kv", kv);
    json_object_set_new(o, "alpha", da + dr ? json_real((double)da / (double)(da + dr))
                                            : (es.st.accepted + es.st.rejections ? json_real(spec_stats_alpha(&es.st))
                                                                                 : json_null()));
    json_object_set_new(o, "mean_accepted", dv ? json_real((double)da / (double)dv)
                                               : json_real(spec_stats_mean_accepted(&es.st)));
    /* server-wide proposal size over the window: drafted tokens (chain γ, or
     * tree nodes) per verify step, and each proposer's share of the target
     * passes (plain passes included); tree_share: verify steps that branched */
    json_t *prop = json_object();
    json_object_set_new(prop, "per_step", dv ? json_real((double)dp[MP_DRAFTED] / (double)dv) : json_null());
    json_object_set_new(prop, "tree_share", dv ? json_real((double)dp[MP_TREE_STEPS] / (double)dv) : json_null());
    json_t *shares = json_array();
    /* every proposer (Medusa included: its steps are counted in its own
     * slot), then the plain passes */
    uint64_t passes = dp[MP_PLAIN];
    for (int m = 0; m < SPEC_PROPOSERS; m++) passes += dp[MP_BY + 3 * m];
    for (int m = 0; m <= SPEC_PROPOSERS; m++) {
        bool plain = m == SPEC_PROPOSERS;
        uint64_t steps = plain ? dp[MP_PLAIN] : dp[MP_BY + 3 * m];
        if (m == SPEC_PROPOSER_MEDUSA && !steps && !info.has_medusa) continue; /* no heads loaded */
        json_t *x = json_object();
        json_object_set_new(x, "method", json_string(spec_drafter_name(plain ? -1 : m)));
        json_object_set_new(x, "passes", json_integer((json_int_t)steps));
        json_object_set_new(x, "share", passes ? json_real((double)steps / (double)passes) : json_null());
        if (!plain) {
            uint64_t d = dp[MP_BY + 3 * m + 1], a = dp[MP_BY + 3 * m + 2];
            json_object_set_new(x, "per_step", steps ? json_real((double)d / (double)steps) : json_null());
            json_object_set_new(x, "accept_rate", d ? json_real((double)a / (double)d) : json_null());
        }
        json_array_append_new(shares, x);
    }
    json_object_set_new(prop, "by_method", shares);
    json_object_set_new(o, "proposal", prop);
    json_t *pp = json_array();
    for (int i = 0; i < GAMMA_MAX && es.st.pos_reached[i]; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "position", json_integer(i + 1));
        json_object_set_new(p, "rate", json_real((double)es.st.pos_accepted[i] / (double)es.st.pos_reached[i]));
        json_array_append_new(pp, p);
    }
    json_object_set_new(o, "per_position", pp);
    json_t *h = json_array();
    int last = 0;
    for (int i = 0; i <= GAMMA_MAX; i++)
        if (es.accepted_hist[i]) last = i;
    for (int i = 0; i <= last; i++) json_array_append_new(h, json_integer((json_int_t)es.accepted_hist[i]));
    json_object_set_new(o, "accepted_hist", h);
    json_object_set_new(o, "ttft_ms", percentiles(mon.ttft, mon.n_lat));
    json_object_set_new(o, "tpot_ms", percentiles(mon.tpot, mon.n_lat));
    json_object_set_new(o, "fallbacks", json_integer((json_int_t)es.st.fallbacks));
    json_object_set_new(o, "kv_resets", json_integer((json_int_t)es.st.kv_resets));
    uint64_t dropped = 0;
    if (s->cfg.telemetry) {
        tel_counters tc;
        telemetry_counters(s->cfg.telemetry, &tc);
        dropped = tc.dropped;
    }
    json_object_set_new(o, "telemetry_dropped", json_integer((json_int_t)dropped));
    /* prefix reuse (target pool): reused / offered prompt tokens since start */
    json_t *pc = json_object();
    json_object_set_new(pc, "enabled", json_boolean(es.prefix_cache));
    json_object_set_new(pc, "prompt_tokens", json_integer((json_int_t)es.st.prefix_offered));
    json_object_set_new(pc, "reused_tokens", json_integer((json_int_t)es.st.prefix_reused));
    json_object_set_new(pc, "hit_ratio", json_real(es.st.prefix_offered ? (double)es.st.prefix_reused /
                                                                             (double)es.st.prefix_offered
                                                                       : 0.0));
    json_object_set_new(o, "prefix_cache", pc);
    /* tree speculation: the engine's mode and what tree-enabled requests' steps did */
    json_t *tr = json_object();
    json_object_set_new(tr, "mode", json_string(engine_tree_name((engine_tree)info.tree)));
    json_object_set_new(tr, "chain_steps", json_integer((json_int_t)es.tree_decisions[0]));
    json_object_set_new(tr, "tree_steps", json_integer((json_int_t)es.tree_decisions[1]));
    json_object_set_new(tr, "branched_steps", json_integer((json_int_t)es.st.tree_steps));
    json_object_set_new(tr, "nodes", json_integer((json_int_t)es.st.tree_nodes));
    json_object_set_new(o, "tree", tr);
    /* learning from traffic: the page marks each head swap (head_version changes) on its acceptance chart */
    engine_learn_stats ls;
    engine_get_learn_stats(s->eng, &ls);
    json_t *learn = gw_learn_json(&ls, false);
    if (learn) json_object_set_new(o, "learn", learn);
    json_t *pol = json_object();
    json_object_set_new(pol, "version", json_integer(s->policy_version));
    json_object_set_new(pol, "last_reload_ok", json_boolean(s->policy_reload_ok));
    json_object_set_new(pol, "last_reload_message", json_string(s->policy_reload_public));
    json_object_set_new(o, "policy", pol);
    json_t *model = json_object();
    json_object_set_new(model, "target", json_string(s->cfg.model_name));
    json_object_set_new(model, "draft", json_string(s->cfg.draft_name));
    json_object_set_new(model, "backend", json_string(es.backend));
    json_object_set_new(model, "backend_desc", json_string(info.backend_desc));
    json_object_set_new(o, "model", model);
    json_t *seqs = json_array();
    int n = engine_get_sequences(s->eng, mon.seqs, MON_MAX_SEQS);
    for (int i = 0; i < n; i++) {
        const engine_seq_info *q = &mon.seqs[i];
        json_t *x = json_object();
        json_object_set_new(x, "id", json_string(q->session));
        json_object_set_new(x, "content_type", json_string(q->content_type));
        json_object_set_new(x, "mode", json_string(q->mode));
        json_object_set_new(x, "method", json_string(q->method));
        json_object_set_new(x, "shape", json_string(q->shape));
        json_object_set_new(x, "prefilling", json_boolean(q->prefilling));
        json_object_set_new(x, "gamma", json_integer(q->gamma));
        json_object_set_new(x, "alpha", q->alpha >= 0 ? json_real(q->alpha) : json_null());
        json_object_set_new(x, "tokens", json_integer(q->tokens));
        json_object_set_new(x, "tokens_per_s", json_real(q->tokens_per_s));
        json_array_append_new(seqs, x);
    }
    json_object_set_new(o, "sequences", seqs);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

static void mon_tick(lws_sorted_usec_list_t *sul) {
    gw_server *s = lws_container_of(sul, gw_server, monitor_sul);
    mon.scheduled = false;
    bool any = false;
    char *json = NULL;
    for (gw_conn *c = s->pool.conns; c; c = c->next) {
        if (c->kind != GW_CONN_MONITOR) continue;
        any = true;
        if (c->out_bytes > 64 * 1024) continue; /* a slow viewer skips snapshots */
        if (!json) json = snapshot_json(s);
        if (json) gw_queue(c, json, strlen(json), GW_OUT_TEXT);
    }
    free(json);
    if (any && s->ctx) {
        lws_sul_schedule(s->ctx, 0, &s->monitor_sul, mon_tick, MON_INTERVAL_US);
        mon.scheduled = true;
    }
}

int gw_cb_monitor(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    gw_conn *c = user;
    (void)in, (void)len;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return gw_ws_filter(wsi, "/v1/monitor");
    case LWS_CALLBACK_ESTABLISHED: {
        gw_server *s = gw_server_of(wsi);
        gw_conn_link(&s->pool, c, wsi, GW_CONN_MONITOR);
        if (!mon.scheduled) {
            lws_sul_schedule(s->ctx, 0, &s->monitor_sul, mon_tick, 1);
            mon.scheduled = true;
        }
        break;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (gw_write_head(c, NULL) < 0) return -1;
        if (c->out_head) lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_WSI_DESTROY:
        gw_count_connection(wsi, (int)reason);
        break;
    case LWS_CALLBACK_CLOSED:
        gw_conn_unlink(c);
        break;
    default:
        break;
    }
    return 0;
}

void gw_monitor_stop(gw_server *s) {
    if (s->ctx) lws_sul_cancel(&s->monitor_sul);
    mon.scheduled = false;
}
