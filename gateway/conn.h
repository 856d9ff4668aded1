/* conn.h — the gateway's bottom layer: connections, their output queues and
 * the requests they run (request bookkeeping), in a pool. Every protocol file
 * (stream, HTTP, monitor) builds on it; it knows none of them. Loop thread
 * only; nothing is locked. Not a public header. */
#ifndef SPECD_GATEWAY_CONN_H
#define SPECD_GATEWAY_CONN_H

#include "engine/engine.h"
#include "gateway/protocol.h"
#include "gateway/wsrx.h"

#include <libwebsockets.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_PUMP_HIGH_WATER (256 * 1024) /* stop pulling engine events above this many queued bytes */
#define GW_MAX_HEADER_BYTES 16384       /* request line + headers lws buffers (its default is 4096); lws 4.1
                                         * drops a larger request without a status line (no hook to answer) */

/* GW_OUT_TEXT_FINAL: a WebSocket text frame that ends a request (its done or
 * error); written as GW_OUT_TEXT, and counted in gw_conn.n_finals_queued
 * until it is. */
enum { GW_OUT_TEXT = 1, GW_OUT_HTTP = 2, GW_OUT_HTTP_FINAL = 3, GW_OUT_TEXT_FINAL = 4 };
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
    /* HTTP requests: one gw_req per choice (OpenAI n) of the connection's request */
    int api;                      /* GW_HTTP_COMPLETIONS / GW_HTTP_CHAT */
    bool stream;
    int index;                    /* which choice, 0..n-1 */
    int tools;                    /* chat_tool_format + 1: the reply is parsed for tool calls (a stream's text is
                                   * held back until the end); 0: plain text */
    bool tool_called;             /* the held-back reply held tool calls (finish_reason "tool_calls") */
    bool done;                    /* its final event was polled: the engine has released eid */
    char *acc;                    /* accumulated text (non-streaming) */
    size_t acc_len, acc_cap;
    int prompt_tokens;
    int completion_tokens;        /* from its finished event */
    int fin_cached;               /* prompt tokens the prefix cache supplied (finished event) */
    engine_event *fin;            /* its finished event (non-streaming, until all choices are done; malloc'd) */
    bool logprobs;                /* the request asked for logprobs */
    void *lp;                     /* accumulated logprobs (non-streaming; openai_response.h oa_logprobs_*) */
    size_t lp_offset;             /* completions: text_offset of the next token */
    bool cut;                     /* cancelled by the drain at the end of server.grace_ms (gw_req_cut_event) */
} gw_req;

typedef struct gw_conn {
    struct gw_conn *next;
    struct gw_pool *pool;         /* the pool it is linked in */
    struct lws *wsi;
    int kind;
    gw_out *out_head, *out_tail;
    size_t out_bytes;
    gw_req *reqs;
    int n_reqs;
    int n_finals_queued;          /* WebSocket: requests that left reqs (their final event was polled) whose
                                   * GW_OUT_TEXT_FINAL frame is still queued: to the client they are still in
                                   * flight, so max_requests_per_connection counts them too */
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
    bool body_complete;           /* the request's body is read (lws' BODY_COMPLETION came) */
    bool admin_ok;                /* bearer token matched (admin endpoints) */
    int status;
    int n_choices;                /* completions: choices of the request (its gw_reqs, while they run) */
    bool include_usage;           /* completions, streaming n > 1: end with a usage chunk */
} gw_conn;

/* The open connections and the requests they run (orphans: requests of
 * closed connections, polled until the engine lets them go). */
typedef struct gw_pool {
    engine *eng;
    gw_conn *conns;
    int n_conns, n_reqs;
    gw_req *orphans;
} gw_pool;

double gw_now_ms(void);
uint64_t gw_random_seed(void);
int gw_queue(gw_conn *c, const char *data, size_t len, int flags);
int gw_queue_json(gw_conn *c, char *json);
/* Writes the head of c's output queue (text frame or HTTP body chunk, by its
 * flags) and pops it; a GW_OUT_TEXT_FINAL frame leaves c->n_finals_queued.
 * Returns 1 written (*flags = its GW_OUT_*), 0 when the queue is empty, -1 on
 * a write error. WRITEABLE callbacks only. */
int gw_write_head(gw_conn *c, int *flags);
void gw_queue_free(gw_conn *c);
gw_req *gw_req_add(gw_conn *c, uint64_t eid, const char *cid);
void gw_req_remove(gw_conn *c, gw_req *r);
gw_req *gw_req_find(gw_conn *c, const char *cid);
/* A request the drain cut (r->cut) ends as an error of kind
 * ENGINE_ERR_SHUTTING_DOWN, not as a plain cancellation, so its client
 * learns that the answer is incomplete and why: rewrites its `finished`
 * (cancelled) event ev in place; any other event is left alone. */
void gw_req_cut_event(const gw_req *r, engine_event *ev);
/* Cancels every request of a vanished client; they become p's orphans. */
void gw_conn_drop_requests(gw_conn *c);
void gw_conn_link(gw_pool *p, gw_conn *c, struct lws *wsi, int kind); /* zeroes c first */
void gw_conn_unlink(gw_conn *c);  /* drops its requests, queue and buffers; a never-linked (zeroed) c is fine */
void gw_pool_drain_orphans(gw_pool *p);

#endif
