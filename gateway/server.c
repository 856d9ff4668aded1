/* server.c — the gateway's event loop (see server.h): the lws context and
 * vhost, the protocol table, signals and graceful shutdown, and the engine
 * wake-up. The protocols live in their own files, each pumping its own
 * connections when the loop is woken: specd.v1 in stream.c, HTTP/OpenAI and
 * static files in http.c, the monitor feed in monitor.c; connections, queues
 * and requests in conn.c (the layer under all of them). */
#include "gateway/server.h"

#include "gateway/gw.h"
#include "gateway/stream.h"
#include "gateway/metrics.h"
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
#include <unistd.h>
#include <time.h>

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
    c.max_choices = 4;
    c.default_max_tokens = 256;
    c.out_limit_bytes = (size_t)8 << 20;
    c.grace_ms = 10000;
    c.idle_timeout_s = 300;
    snprintf(c.model_name, sizeof(c.model_name), "specd");
    snprintf(c.auth_exempt, sizeof(c.auth_exempt), "/healthz,/health,/metrics");
    return c;
}

/* ---- waking: each protocol pumps its own connections ----------------------------- */

/* Everything the loop does on a wake-up outside a protocol: the drain loop
 * below, and the specd.loop protocol's handler. */
static void pump_all(gw_server *s) {
    gw_stream_pump_all(s);
    gw_http_pump_all(s);
    gw_pool_drain_orphans(&s->pool);
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

/* A protocol no client can open: it exists to receive the loop's wake-up
 * (lws hands EVENT_WAIT_CANCELLED to every protocol, and specd.v1 and http
 * each pump their own connections on it); here the loop drains orphaned
 * requests and handles a pending policy reload. */
static int cb_loop(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    (void)user, (void)in, (void)len;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: return -1;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
        gw_server *s = gw_server_of(wsi);
        gw_pool_drain_orphans(&s->pool);
        gw_reload_poll(s); /* a SIGHUP wakes the loop through lws_cancel_service */
        return 0;
    }
    default: return 0;
    }
}

/* ---- the loop ------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal;
/* The context a signal wakes (handlers get no user data); set while gw_run serves. */
static struct lws_context *volatile signal_ctx;

static void on_signal(int sig) {
    stop_signal = sig;
    struct lws_context *ctx = signal_ctx;
    if (ctx) lws_cancel_service(ctx);
}

static struct lws_protocols protocols[] = {
    {"http", gw_cb_http, sizeof(gw_conn), 0, 0, NULL, 0},
    {"specd.v1", gw_cb_stream, sizeof(gw_conn), 4096, 0, NULL, 0},
    {"specd.monitor.v1", gw_cb_monitor, sizeof(gw_conn), 1024, 0, NULL, 0},
    {"specd.loop", cb_loop, 0, 0, 0, NULL, 0},
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

/* Once a second on the loop's scheduler (gw_server.idle_sul): specd.v1's idle timeouts. */
static void on_idle_tick(lws_sorted_usec_list_t *sul) {
    gw_server *s = lws_container_of(sul, gw_server, idle_sul);
    gw_stream_close_idle(s);
    lws_sul_schedule(s->ctx, 0, sul, on_idle_tick, LWS_US_PER_SEC);
}

int gw_run(engine *e, const gw_config *cfg, char *err, size_t errlen) {
    static gw_server srv;
    memset(&srv, 0, sizeof(srv));
    srv.eng = e;
    srv.pool.eng = e;
    srv.cfg = *cfg;
    engine_stats es;
    engine_get_stats(e, &es);
    srv.limits = gw_limits_default();
    srv.limits.max_message_bytes = cfg->max_message_bytes;
    srv.limits.max_tokens_limit = cfg->max_tokens_limit;
    srv.limits.max_choices = cfg->max_choices;
    srv.limits.schema_max_enum = cfg->schema_max_enum;
    srv.limits.grammar_max_bytes = cfg->grammar_max_bytes;
    srv.limits.default_max_tokens = cfg->default_max_tokens;
    gw_limits_from_engine(&srv.limits, e);
    if (cfg->web_root[0] && !realpath(cfg->web_root, srv.web_root_real)) {
        snprintf(err, errlen, "web root %s: %s", cfg->web_root, strerror(errno));
        return -1;
    }
    if (cfg->vendor_root[0] && !realpath(cfg->vendor_root, srv.vendor_real)) srv.vendor_real[0] = 0;
    if (gw_access_load(&srv.access, cfg->api_keys, cfg->api_key_file, cfg->api_key_extra, cfg->auth_exempt, err,
                       errlen) != 0)
        return -1;
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
    info.user = &srv; /* gw_server_of */
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
    if (cfg->tls_cert[0] || cfg->tls_key[0]) {
        /* HTTPS and WSS only: lws answers a plain-HTTP client on this port with a TLS alert and closes */
        if (!cfg->tls_cert[0] || !cfg->tls_key[0] || access(cfg->tls_cert, R_OK) || access(cfg->tls_key, R_OK)) {
            snprintf(err, errlen, "TLS needs a readable certificate and key (server.tls_cert %s, server.tls_key %s)",
                     cfg->tls_cert[0] ? cfg->tls_cert : "(none)", cfg->tls_key[0] ? cfg->tls_key : "(none)");
            return -1;
        }
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = cfg->tls_cert;
        info.ssl_private_key_filepath = cfg->tls_key;
        srv.tls = true;
    }
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
    signal_ctx = srv.ctx;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    gw_reload_init(&srv);
    /* the address really bound (localhost names 127.0.0.1; IPv6 in brackets) */
    char shown[INET6_ADDRSTRLEN + 2];
    snprintf(shown, sizeof(shown), family == AF_INET6 ? "[%s]" : "%s", bind_num);
    printf("specd: serving on %s://%s:%d/ (WebSocket %s://%s:%d/v1/stream)%s\n", srv.tls ? "https" : "http", shown,
           srv.port, srv.tls ? "wss" : "ws", shown, srv.port, srv.access.n ? " with API keys" : "");
    fflush(stdout);

    if (cfg->idle_timeout_s > 0) lws_sul_schedule(srv.ctx, 0, &srv.idle_sul, on_idle_tick, LWS_US_PER_SEC);
    double drain_deadline = 0;
    while (lws_service(srv.ctx, 0) >= 0) {
        if (stop_signal && !srv.draining) {
            srv.draining = true;
            drain_deadline = gw_now_ms() + cfg->grace_ms;
            fprintf(stderr, "specd: %s: finishing %d running requests (grace %d ms)\n",
                    stop_signal == SIGINT ? "SIGINT" : "SIGTERM", srv.pool.n_reqs, cfg->grace_ms);
        }
        if (srv.draining) {
            pump_all(&srv);
            bool idle = srv.pool.n_reqs == 0;
            for (gw_conn *c = srv.pool.conns; c && idle; c = c->next) idle = c->out_head == NULL;
            if (gw_now_ms() > drain_deadline && !srv.cancelled_rest) {
                for (gw_conn *c = srv.pool.conns; c; c = c->next)
                    for (gw_req *r = c->reqs; r; r = r->next)
                        if (engine_cancel(e, r->eid) == 0) r->cut = true; /* ends as shutting_down */
                srv.cancelled_rest = true;
            }
            if (idle || gw_now_ms() > drain_deadline + 2000) break;
        }
    }
    lws_sul_cancel(&srv.idle_sul);
    gw_monitor_stop(&srv);
    gw_reload_stop(&srv);
    notify_target(NULL);
    signal_ctx = NULL;
    lws_context_destroy(srv.ctx);
    srv.ctx = NULL;
    gw_pool_drain_orphans(&srv.pool);
    fprintf(stderr, "specd: stopped\n");
    return 0;
}
