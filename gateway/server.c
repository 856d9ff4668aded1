/* server.c — the gateway's event loop (see server.h): context and vhost setup,
 * signals and graceful shutdown, the engine wake-up, per-connection output
 * queues written only from WRITEABLE callbacks, and the WebSocket protocol
 * specd.v1 on /v1/stream. HTTP routes live in http.c. */
#include "gateway/server.h"

#include "gateway/gw.h"
#include "gateway/metrics.h"
#include "gateway/openai.h"
#include "gateway/protocol.h"
#include "policy/classify.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

gw_server *gw_srv; /* the one server of this process (signal handlers and the engine notify need it) */

gw_config gw_config_default(void) {
    gw_config c;
    memset(&c, 0, sizeof(c));
    snprintf(c.host, sizeof(c.host), "127.0.0.1");
    c.port = 8080;
    c.max_message_bytes = 1 << 20;
    c.max_requests_per_conn = 64;
    c.max_requests_total = 1024;
    c.max_connections = 1024;
    c.max_tokens_limit = 4096;
    c.default_max_tokens = 256;
    c.out_limit_bytes = (size_t)8 << 20;
    c.grace_ms = 10000;
    c.idle_timeout_s = 300;
    snprintf(c.model_name, sizeof(c.model_name), "specd");
    return c;
}

/* ---- engine events -> client messages ----------------------------------------- */

static void ws_pump(gw_conn *c) {
    for (gw_req *r = c->reqs, *next; r; r = next) {
        next = r->next;
        engine_event ev;
        /* backpressure: stop pulling while this client's queue is long; the
         * engine then pauses only this request */
        while (c->out_bytes < GW_PUMP_HIGH_WATER && engine_poll(gw_srv->eng, r->eid, &ev) == 1) {
            char *json = NULL;
            bool last = false;
            switch (ev.type) {
            case ENGINE_EV_STARTED:
                r->prompt_tokens = ev.prompt_tokens;
                snprintf(r->session, sizeof(r->session), "%s", ev.session); /* the telemetry session */
                json = gw_json_start(r->cid, r->session, ev.prompt_tokens, ev.queue_ms);
                break;
            case ENGINE_EV_TOKENS:
                json = gw_json_tokens(r->cid, &ev);
                gw_srv->tokens_out += (uint64_t)ev.n_tokens;
                break;
            case ENGINE_EV_FINISHED:
                json = gw_json_done(r->cid, r->prompt_tokens, &ev);
                gw_metrics_finished(&ev);
                gw_monitor_record(&ev);
                last = true;
                break;
            case ENGINE_EV_ERROR: {
                /* the engine refuses prompts that can never fit at admission */
                const char *code = strstr(ev.message, "cannot fit") ? "prompt_too_long" : "engine_error";
                json = gw_json_error(r->cid, code, ev.message);
                gw_metrics_error(code);
                last = true;
                break;
            }
            }
            gw_queue_json(c, json);
            if (last) {
                gw_req_remove(c, r);
                break;
            }
        }
    }
}

static void pump_all(void) {
    for (gw_conn *c = gw_srv->pool.conns; c; c = c->next) {
        if (c->kind == GW_CONN_WS) ws_pump(c);
        else if (c->kind == GW_CONN_HTTP) gw_http_pump(c);
    }
    gw_pool_drain_orphans(&gw_srv->pool);
}

/* The engine thread's wake-up. It may run while the loop thread tears the
 * context down (requests still in the engine at shutdown): the lock keeps
 * lws_cancel_service off a destroyed context. */
static pthread_mutex_t notify_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lws_context *notify_ctx;

void gw_engine_notify(void *user) {
    (void)user;
    pthread_mutex_lock(&notify_lock);
    if (notify_ctx) lws_cancel_service(notify_ctx);
    pthread_mutex_unlock(&notify_lock);
}

static void notify_target(struct lws_context *ctx) {
    pthread_mutex_lock(&notify_lock);
    notify_ctx = ctx;
    pthread_mutex_unlock(&notify_lock);
}

/* ---- WebSocket protocol specd.v1 ---------------------------------------------- */

static void ws_error(gw_conn *c, const char *cid, const char *code, const char *msg) {
    gw_metrics_error(code);
    gw_queue_json(c, gw_json_error(cid, code, msg));
}

static void ws_handle_message(gw_conn *c, const char *buf, size_t len) {
    gw_limits lim = gw_srv->limits;
    gw_msg m;
    gw_error er;
    if (len == 0) {
        ws_error(c, NULL, "invalid_json", "empty message: send one JSON object per text message");
        return;
    }
    if (gw_parse(buf, len, &lim, &m, &er) != 0) {
        ws_error(c, er.id[0] ? er.id : NULL, er.code, er.message);
        return;
    }
    if (m.type == GW_MSG_PING) {
        gw_queue_json(c, gw_json_pong(m.id));
    } else if (m.type == GW_MSG_CANCEL) {
        gw_req *r = gw_req_find(c, m.id);
        if (!r) ws_error(c, m.id, "unknown_id", "no active request with this id on this connection");
        else engine_cancel(gw_srv->eng, r->eid);
    } else if (gw_req_find(c, m.id)) {
        ws_error(c, m.id, "duplicate_id", "a request with this id is still active on this connection");
    } else if (c->n_reqs >= gw_srv->cfg.max_requests_per_conn) {
        ws_error(c, m.id, "too_many_requests", "too many concurrent requests on this connection");
    } else if (gw_srv->pool.n_reqs >= gw_srv->cfg.max_requests_total) {
        ws_error(c, m.id, "overloaded", "the server is at its concurrent request limit; retry later");
    } else if (gw_srv->draining) {
        ws_error(c, m.id, "shutting_down", "the server is shutting down");
    } else {
        char perr[300];
        if (gw_prepare_prompt(&m, perr, sizeof(perr)) != 0) {
            ws_error(c, m.id, "invalid_request", perr);
        } else {
            engine_request rq = m.req;
            rq.notify = gw_engine_notify;
            rq.user = NULL;
            /* one connection is one client: the engine bounds what its
             * requests hold at once (engine.h, fair share) */
            if (!c->client_id) c->client_id = ++gw_srv->last_client_id;
            rq.client = c->client_id;
            if (!m.seed_set) rq.seed = gw_random_seed();
            if (!rq.content_type && rq.prompt_text) rq.content_type = pol_classify(rq.prompt_text, strlen(rq.prompt_text));
            char eerr[300];
            uint64_t eid = engine_submit(gw_srv->eng, &rq, eerr, sizeof(eerr));
            if (!eid) {
                ws_error(c, m.id, strstr(eerr, "queue is full") ? "overloaded" : "invalid_request", eerr);
            } else {
                gw_req *r = gw_req_add(c, eid, m.id);
                if (!r) {
                    engine_cancel(gw_srv->eng, eid);
                    ws_error(c, m.id, "internal", "out of memory");
                } else {
                    gw_uuid4(r->session);
                    gw_srv->requests++;
                }
            }
        }
    }
    gw_msg_free(&m);
}

static int cb_stream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    gw_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return gw_ws_filter(wsi, "/v1/stream");
    case LWS_CALLBACK_ESTABLISHED:
        gw_conn_link(&gw_srv->pool, c, wsi, GW_CONN_WS);
        ws_rx_init(&c->rx, (size_t)gw_srv->cfg.max_message_bytes);
        c->last_rx_ms = gw_now_ms();
        gw_srv->connections++;
        break;
    case LWS_CALLBACK_RECEIVE: {
        c->last_rx_ms = gw_now_ms();
        bool final = lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi);
        ws_rx_status st = ws_rx_feed(&c->rx, in, len, lws_frame_is_binary(wsi), final);
        if (st == WS_RX_NOMEM) return -1;
        if (st == WS_RX_MORE) break;
        if (st == WS_RX_BINARY) {
            ws_error(c, NULL, "binary_frame", "binary frames are not part of specd.v1; send JSON text");
        } else if (st == WS_RX_TOO_BIG) {
            char msg[128];
            snprintf(msg, sizeof(msg), "message larger than the limit of %d bytes", gw_srv->cfg.max_message_bytes);
            ws_error(c, NULL, "message_too_large", msg);
        } else {
            ws_handle_message(c, c->rx.buf, c->rx.len);
        }
        ws_rx_reset(&c->rx);
        ws_pump(c);
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* a malformed close (1 byte, a code no peer may send, bad UTF-8)
         * fails the connection: no echo */
        if (!ws_close_payload_ok(in, len)) return -1;
        break;
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->out_bytes > gw_srv->cfg.out_limit_bytes) {
            static const char why[] = "client too slow: output limit exceeded";
            lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)why, sizeof(why) - 1);
            gw_srv->slow_disconnects++;
            return -1;
        }
        int w = gw_write_head(c, NULL);
        if (w < 0 || (w == 0 && c->closing)) return -1;
        if (w == 0) break;
        ws_pump(c);
        if (c->out_head) lws_callback_on_writable(wsi);
        break;
    }
    case LWS_CALLBACK_CLOSED:
        gw_conn_unlink(c);
        break;
    case LWS_CALLBACK_WSI_DESTROY:
        gw_count_connection(wsi, (int)reason);
        break;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        pump_all();
        gw_reload_poll(); /* a SIGHUP wakes the loop through lws_cancel_service */
        break;
    default:
        break;
    }
    return 0;
}

/* ---- the loop ------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    stop_signal = sig;
    if (gw_srv && gw_srv->ctx) lws_cancel_service(gw_srv->ctx);
}

static struct lws_protocols protocols[] = {
    {"http", gw_cb_http, sizeof(gw_conn), 0, 0, NULL, 0},
    {"specd.v1", cb_stream, sizeof(gw_conn), 4096, 0, NULL, 0},
    {"specd.monitor.v1", gw_cb_monitor, sizeof(gw_conn), 1024, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* The bind address: host resolved to one numeric address (a name such as
 * localhost to its IPv4 address when it has one), its family, and whether it
 * is a loopback address. lws is given the numeric form with IPv6 off for an
 * IPv4 address, so 127.0.0.1 never becomes a dual-stack [::] socket. */
static int resolve_bind(const char *host, char *num, size_t n, int *family, bool *loopback, char *err, size_t errlen) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve server.host '%s': %s", host, rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET) pick = a;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET6) pick = a;
    if (!pick) {
        freeaddrinfo(res);
        snprintf(err, errlen, "server.host '%s' has no IPv4 or IPv6 address", host);
        return -1;
    }
    *family = pick->ai_family;
    if (pick->ai_family == AF_INET) {
        const struct in_addr *a4 = &((const struct sockaddr_in *)pick->ai_addr)->sin_addr;
        inet_ntop(AF_INET, a4, num, (socklen_t)n);
        *loopback = (ntohl(a4->s_addr) >> 24) == 127;
    } else {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
        inet_ntop(AF_INET6, a6, num, (socklen_t)n);
        *loopback = IN6_IS_ADDR_LOOPBACK(a6);
    }
    freeaddrinfo(res);
    return 0;
}

/* Closes WebSockets that sent nothing and ran nothing for idle_timeout_s;
 * runs once a second on the loop's scheduler. */
static lws_sorted_usec_list_t idle_sul;

static void close_idle(lws_sorted_usec_list_t *sul) {
    double now = gw_now_ms(), limit = gw_srv->cfg.idle_timeout_s * 1e3;
    for (gw_conn *c = gw_srv->pool.conns; c; c = c->next) {
        if (c->kind != GW_CONN_WS || c->closing || c->n_reqs || c->out_head) continue;
        if (now - c->last_rx_ms < limit) continue;
        static const char why[] = "idle timeout";
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)why, sizeof(why) - 1);
        c->closing = true;
        gw_srv->idle_disconnects++;
        lws_callback_on_writable(c->wsi);
    }
    lws_sul_schedule(gw_srv->ctx, 0, sul, close_idle, LWS_US_PER_SEC);
}

int gw_run(engine *e, const gw_config *cfg, char *err, size_t errlen) {
    static gw_server srv;
    memset(&srv, 0, sizeof(srv));
    srv.eng = e;
    srv.pool.eng = e;
    srv.cfg = *cfg;
    gw_srv = &srv;
    engine_stats es;
    engine_get_stats(e, &es);
    srv.limits = gw_limits_default();
    srv.limits.max_message_bytes = cfg->max_message_bytes;
    srv.limits.max_tokens_limit = cfg->max_tokens_limit;
    srv.limits.default_max_tokens = cfg->default_max_tokens;
    gw_limits_from_engine(&srv.limits, e);
    if (cfg->web_root[0] && !realpath(cfg->web_root, srv.web_root_real)) {
        snprintf(err, errlen, "web root %s: %s", cfg->web_root, strerror(errno));
        return -1;
    }
    if (cfg->vendor_root[0] && !realpath(cfg->vendor_root, srv.vendor_real)) srv.vendor_real[0] = 0;
    gw_metrics_init();
    srv.policy_version = 1;
    srv.policy_reload_ok = true;
    lws_set_log_level(LLL_ERR, NULL);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    char bind_num[INET6_ADDRSTRLEN];
    int family = AF_INET;
    if (resolve_bind(cfg->host, bind_num, sizeof(bind_num), &family, &srv.loopback, err, errlen)) return -1;
    info.port = cfg->port == 0 ? CONTEXT_PORT_NO_LISTEN_SERVER : cfg->port;
    info.iface = bind_num;
    info.protocols = protocols;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    if (family == AF_INET) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    else info.options |= LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY | LWS_SERVER_OPTION_IPV6_V6ONLY_VALUE;
    info.count_threads = 1;
    /* room past max_connections, so that connections over the limit are
     * accepted and answered 503 instead of waiting in the kernel's backlog */
    info.fd_limit_per_thread = (unsigned int)(2 * cfg->max_connections + 64);
    info.max_http_header_data2 = GW_MAX_HEADER_BYTES;
    info.ka_time = 0;
    info.timeout_secs = 30;
    if (cfg->port == 0) info.port = gw_pick_port(bind_num, family);
    if (info.port <= 0) {
        snprintf(err, errlen, "cannot find a free port on %s", cfg->host);
        return -1;
    }
    srv.port = info.port;
    srv.ctx = lws_create_context(&info);
    if (!srv.ctx) {
        snprintf(err, errlen, "cannot listen on %s:%d (in use or not permitted)", cfg->host, info.port);
        return -1;
    }
    notify_target(srv.ctx);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    gw_reload_init();
    /* the address really bound (localhost names 127.0.0.1; IPv6 in brackets) */
    char shown[INET6_ADDRSTRLEN + 2];
    snprintf(shown, sizeof(shown), family == AF_INET6 ? "[%s]" : "%s", bind_num);
    printf("specd: serving on http://%s:%d/ (WebSocket ws://%s:%d/v1/stream)\n", shown, srv.port, shown, srv.port);
    fflush(stdout);

    memset(&idle_sul, 0, sizeof(idle_sul));
    if (cfg->idle_timeout_s > 0) lws_sul_schedule(srv.ctx, 0, &idle_sul, close_idle, LWS_US_PER_SEC);
    double drain_deadline = 0;
    while (lws_service(srv.ctx, 0) >= 0) {
        if (stop_signal && !srv.draining) {
            srv.draining = true;
            drain_deadline = gw_now_ms() + cfg->grace_ms;
            fprintf(stderr, "specd: %s: finishing %d running requests (grace %d ms)\n",
                    stop_signal == SIGINT ? "SIGINT" : "SIGTERM", srv.pool.n_reqs, cfg->grace_ms);
        }
        if (srv.draining) {
            pump_all();
            bool idle = srv.pool.n_reqs == 0;
            for (gw_conn *c = srv.pool.conns; c && idle; c = c->next) idle = c->out_head == NULL;
            if (gw_now_ms() > drain_deadline && !srv.cancelled_rest) {
                for (gw_conn *c = srv.pool.conns; c; c = c->next)
                    for (gw_req *r = c->reqs; r; r = r->next) engine_cancel(e, r->eid);
                srv.cancelled_rest = true;
            }
            if (idle || gw_now_ms() > drain_deadline + 2000) break;
        }
    }
    lws_sul_cancel(&idle_sul);
    gw_monitor_stop();
    gw_reload_stop();
    notify_target(NULL);
    lws_context_destroy(srv.ctx);
    srv.ctx = NULL;
    gw_pool_drain_orphans(&gw_srv->pool);
    fprintf(stderr, "specd: stopped\n");
    return 0;
}
