/* gw.h — the gateway's internal shared state: connections, their output
 * queues and requests, and the server. Everything here belongs to the event
 * loop thread; nothing is locked. Not a public header. */
#ifndef SPECD_GW_INTERNAL_H
#define SPECD_GW_INTERNAL_H

#include "engine/engine.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"
#include "gateway/server.h"
#include "gateway/wsrx.h"

#include <libwebsockets.h>
#include <stdbool.h>
#include <stdint.h>

#define GW_PUMP_HIGH_WATER (256 * 1024) /* stop pulling engine events above this many queued bytes */
#define GW_MAX_HEADER_BYTES 16384       /* request line + headers lws buffers (its default is 4096); lws 4.1
                                         * drops a larger request without a status line (no hook to answer) */

enum { GW_OUT_TEXT = 1, GW_OUT_HTTP = 2, GW_OUT_HTTP_FINAL = 3 };
enum { GW_CONN_WS = 1, GW_CONN_HTTP = 2, GW_CONN_MONITOR = 3 };
enum { GW_HTTP_COMPLETIONS = 1, GW_HTTP_CHAT = 2 };

typedef struct gw_out {
    struct gw_out *next;
    size_t len;
    int flags;
    unsigned char data[]; /* LWS_PRE bytes of headroom, then the payload */
} gw_out;

typedef struct gw_req {
    struct gw_req *next, *orphan_next;
    uint64_t eid;                 /* engine request id */
    struct gw_conn *conn;
    char cid[GW_ID_JSON_MAX];     /* the client's id as JSON text */
    char session[40];             /* uuid */
    /* HTTP requests */
    int api;                      /* GW_HTTP_COMPLETIONS / GW_HTTP_CHAT */
    bool stream;
    char *acc;                    /* accumulated text (non-streaming) */
    size_t acc_len, acc_cap;
    int prompt_tokens;
    bool logprobs;                /* the request asked for logprobs */
    void *lp;                     /* accumulated logprobs (non-streaming; openai.h oa_logprobs_*) */
    size_t lp_offset;             /* completions: text_offset of the next token */
} gw_req;

typedef struct gw_conn {
    struct gw_conn *next;
    struct lws *wsi;
    int kind;
    gw_out *out_head, *out_tail;
    size_t out_bytes;
    gw_req *reqs;
    int n_reqs;
    bool closing;
    uint64_t client_id;           /* engine fair-share group of its requests (0 until the first) */
    ws_rx rx;                     /* WebSocket message being received */
    double last_rx_ms;            /* last client message (idle timeout) */
    /* HTTP request body */
    char *body;
    size_t rx_len, rx_cap;
    bool rx_binary, rx_too_big;
    /* HTTP */
    char path[256];
    bool is_post, headers_sent, finished;
    bool admin_ok;                /* bearer token matched (admin endpoints) */
    int status;
} gw_conn;

typedef struct {
    struct lws_context *ctx;
    engine *eng;
    gw_config cfg;
    gw_limits limits;
    char web_root_real[PATH_MAX];
    char vendor_real[PATH_MAX];
    int port;
    gw_conn *conns;
    int n_conns, n_reqs;
    int n_tcp;                    /* accepted TCP connections now open (max_connections counts these) */
    bool loopback;                /* the bind address is a loopback address */
    gw_req *orphans;
    bool draining, cancelled_rest;
    int policy_version;
    bool policy_reload_ok;
    char policy_reload_msg[256];  /* the full message (path, YAML excerpt): admin only */
    char policy_reload_public[160]; /* outcome and version only (the monitor feed) */
    uint64_t connections, requests, tokens_out, slow_disconnects;
    uint64_t last_client_id;      /* the last gw_conn.client_id handed out */
    uint64_t idle_disconnects, refused_connections;
} gw_server;

extern gw_server *gw_srv;

double gw_now_ms(void);
uint64_t gw_random_seed(void);
int gw_queue(gw_conn *c, const char *data, size_t len, int flags);
int gw_queue_json(gw_conn *c, char *json);
/* Writes the head of c's output queue (text frame or HTTP body chunk, by its
 * flags) and pops it. Returns 1 written (*flags = its GW_OUT_*), 0 when the
 * queue is empty, -1 on a write error. WRITEABLE callbacks only. */
int gw_write_head(gw_conn *c, int *flags);
void gw_queue_free(gw_conn *c);
gw_req *gw_req_add(gw_conn *c, uint64_t eid, const char *cid);
void gw_req_remove(gw_conn *c, gw_req *r);
gw_req *gw_req_find(gw_conn *c, const char *cid);
void gw_conn_link(gw_conn *c, struct lws *wsi, int kind);
void gw_conn_unlink(gw_conn *c);
void gw_engine_notify(void *user);

/* http.c */
int gw_cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
void gw_http_pump(gw_conn *c);
int gw_pick_port(const char *num, int family); /* a free port on the numeric address */
bool gw_host_allowed(struct lws *wsi);
/* Answers 503 (over max_connections, except /healthz) or 403 (Host not
 * allowed) and returns -1, or returns 0 to go on. */
int gw_refuse_if_full(struct lws *wsi, const char *uri);
void gw_count_connection(struct lws *wsi, int reason);
int gw_origin_allowed(struct lws *wsi);
int gw_ws_filter(struct lws *wsi, const char *path);

/* reload.c: policy reloads (SIGHUP, file change, /admin/reload) and /api/stats */
void gw_reload_init(void);
void gw_reload_poll(void);                /* loop thread: handles a pending SIGHUP or file change */
int gw_reload(const char *why, char *msg, size_t n); /* 0 ok, -1 kept the old policy */
/* The /api/stats body (malloc'd). The config path, the reload message (which
 * names the file and quotes YAML from it) and telemetry's last error (which
 * names the database) are in it only when admin is true. */
char *gw_stats_json(bool admin);
/* Whether the request on wsi carries "Authorization: Bearer <server.admin_token>"
 * (false when no token is configured). Responds nothing. Loop thread. */
bool gw_admin_bearer_ok(struct lws *wsi);
void gw_reload_stop(void);

/* monitor.c */
int gw_cb_monitor(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
void gw_monitor_record(const engine_event *ev);
void gw_monitor_stop(void);

/* prompt.c: messages -> prompt text with the model's chat template */
int gw_prepare_prompt(gw_msg *m, char *err, size_t errlen);
void gw_limits_from_engine(gw_limits *lim, engine *e);


#endif
