/* gw.h — the gateway's internal shared state: connections, their output
 * queues and requests, and the server. Everything here belongs to the event
 * loop thread; nothing is locked. Not a public header.
 *
 * There is no global server: gw_run puts its gw_server in the lws context's
 * user data, callbacks get it from their wsi (gw_server_of), timers from
 * their lws_sorted_usec_list_t inside it (lws_container_of), and everything
 * else is handed it as an argument. */
#ifndef SPECD_GW_INTERNAL_H
#define SPECD_GW_INTERNAL_H

#include "engine/engine.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"
#include "gateway/access.h"
#include "gateway/conn.h"
#include "gateway/server_config.h"
#include "gateway/wsrx.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gw_server {
    struct lws_context *ctx;
    engine *eng;
    gw_config cfg;
    gw_limits limits;
    char web_root_real[PATH_MAX];
    char vendor_real[PATH_MAX];
    int port;
    gw_pool pool;                 /* connections and their requests (conn.h) */
    int n_tcp;                    /* accepted TCP connections now open (max_connections counts these) */
    bool loopback;                /* the bind address is a loopback address */
    bool draining, cancelled_rest;
    int policy_version;
    bool policy_reload_ok;
    char policy_reload_msg[256];  /* the full message (path, YAML excerpt): admin only */
    char policy_reload_public[160]; /* outcome and version only (the monitor feed) */
    uint64_t connections, requests, tokens_out, slow_disconnects;
    uint64_t last_client_id;      /* the last gw_conn.client_id handed out */
    uint64_t idle_disconnects, refused_connections;
    gw_access access;             /* API keys (access.h), reloaded with the policy */
    bool tls;                     /* HTTPS/WSS on the port */
    /* the loop's timers (callbacks find the server with lws_container_of) */
    lws_sorted_usec_list_t idle_sul;    /* server.c: specd.v1 idle timeouts, once a second */
    lws_sorted_usec_list_t reload_sul;  /* reload.c: pending SIGHUP / file change */
    lws_sorted_usec_list_t monitor_sul; /* monitor.c: snapshots */
} gw_server;

/* The server wsi belongs to (its context's user data; set by gw_run). */
static inline gw_server *gw_server_of(struct lws *wsi) { return lws_context_user(lws_get_context(wsi)); }

void gw_engine_notify(void *user);

/* http.c */
int gw_cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
void gw_http_pump(gw_server *s, gw_conn *c);
void gw_http_pump_all(gw_server *s); /* every HTTP connection (a wake-up) */

/* guard.c: who may talk to us (below every protocol file; calls none of them) */
int gw_pick_port(const char *num, int family); /* a free port on the numeric address */
bool gw_host_allowed(struct lws *wsi);
/* Writes a complete refusal (status, a JSON error body, Connection: close) on
 * a connection that has sent its headers and not been answered; returns what
 * an lws callback returns after it. extra_name/value: one more header or NULL. */
int gw_refuse_now(struct lws *wsi, int status, const char *code, const char *message, const char *extra_name,
                  const char *extra_value);
/* Answers 503 (over max_connections, except /healthz) or 403 (Host not
 * allowed) and returns -1, or returns 0 to go on. */
int gw_refuse_if_full(struct lws *wsi, const char *uri);
void gw_count_connection(struct lws *wsi, int reason);
/* Answers 401 (an API path without a valid API key, access.h) and returns -1, or returns 0. */
int gw_refuse_unauthorized(struct lws *wsi, const char *uri);
/* A cross-site POST: 403 for a foreign Origin, 415 for a non-JSON body
 * without an allowed Origin; -1 after answering, else 0. */
int gw_refuse_cross_site(gw_server *s, struct lws *wsi, const char *uri);
/* Content-Length checks (400/411/413); -1 after answering (close), 1 after a
 * 413 whose body is still to be drained, else 0. */
int gw_refuse_bad_framing(gw_server *s, gw_conn *c, struct lws *wsi, bool post);
/* A request line without HTTP/1.x: 505 or 400; -1 after answering, else 0. */
int gw_refuse_bad_version(struct lws *wsi);
int gw_origin_allowed(struct lws *wsi);
int gw_ws_filter(struct lws *wsi, const char *path);

/* reload.c: policy reloads (SIGHUP, file change, /admin/reload) and /api/stats */
void gw_reload_init(gw_server *s);
void gw_reload_poll(gw_server *s);       /* loop thread: handles a pending SIGHUP or file change */
int gw_reload(gw_server *s, const char *why, char *msg, size_t n); /* 0 ok, -1 kept the old policy */
/* The /api/stats body (malloc'd). The config path, the reload message (which
 * names the file and quotes YAML from it) and telemetry's last error (which
 * names the database) are in it only when admin is true. */
char *gw_stats_json(gw_server *s, bool admin);
/* Whether the request on wsi carries "Authorization: Bearer <server.admin_token>"
 * (false when no token is configured). Responds nothing. Loop thread. */
bool gw_admin_bearer_ok(struct lws *wsi);
void gw_reload_stop(gw_server *s);
int gw_tls_reload(gw_server *s); /* re-reads the TLS certificate and key files (SIGHUP) */

/* monitor.c */
int gw_cb_monitor(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
void gw_monitor_record(const engine_event *ev);
void gw_monitor_stop(gw_server *s);

/* prompt.c: messages -> prompt text with the model's chat template */
int gw_prepare_prompt(engine *e, gw_msg *m, char *err, size_t errlen);
void gw_limits_from_engine(gw_limits *lim, engine *e);


#endif
