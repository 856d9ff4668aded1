/* conn.c — the gateway's bottom layer (see conn.h): per-connection output
 * queues, the requests each connection runs, and the pool of open
 * connections. Knows libwebsockets only to write and to ask for WRITEABLE. */
#include "gateway/conn.h"
#include "kernels/clock.h"

#include "gateway/openai_response.h"
#include "gateway/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t gw_random_seed(void) {
    char u[37];
    gw_uuid4(u);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; u[i]; i++) h = (h ^ (uint8_t)u[i]) * 1099511628211ull;
    return h >> 1;
}

double gw_now_ms(void) { return clock_now_ms(); }

/* ---- output queues ------------------------------------------------------------ */

int gw_queue(gw_conn *c, const char *data, size_t len, int flags) {
    gw_out *o = malloc(sizeof(gw_out) + LWS_PRE + len);
    if (!o) return -1;
    o->next = NULL;
    o->len = len;
    o->flags = flags;
    memcpy(o->data + LWS_PRE, data, len);
    if (c->out_tail) c->out_tail->next = o;
    else c->out_head = o;
    c->out_tail = o;
    c->out_bytes += len;
    if (flags == GW_OUT_TEXT_FINAL) c->n_finals_queued++;
    lws_callback_on_writable(c->wsi);
    return 0;
}

/* Queues a JSON text message on a WebSocket connection and frees it. */
int gw_queue_json(gw_conn *c, char *json) {
    if (!json) return -1;
    int rc = gw_queue(c, json, strlen(json), GW_OUT_TEXT);
    free(json);
    return rc;
}

int gw_write_head(gw_conn *c, int *flags) {
    gw_out *o = c->out_head;
    if (!o) return 0;
    enum lws_write_protocol mode = o->flags == GW_OUT_TEXT || o->flags == GW_OUT_TEXT_FINAL ? LWS_WRITE_TEXT
                                   : o->flags == GW_OUT_HTTP_FINAL ? LWS_WRITE_HTTP_FINAL
                                                                   : LWS_WRITE_HTTP;
    if (lws_write(c->wsi, o->data + LWS_PRE, o->len, mode) < (int)o->len) return -1;
    if (flags) *flags = o->flags;
    if (o->flags == GW_OUT_TEXT_FINAL) c->n_finals_queued--;
    c->out_head = o->next;
    if (!c->out_head) c->out_tail = NULL;
    c->out_bytes -= o->len;
    free(o);
    return 1;
}

void gw_queue_free(gw_conn *c) {
    for (gw_out *o = c->out_head, *n; o; o = n) {
        n = o->next;
        free(o);
    }
    c->out_head = c->out_tail = NULL;
    c->out_bytes = 0;
    c->n_finals_queued = 0;
}

/* ---- requests ----------------------------------------------------------------- */

static void req_free(gw_req *r) {
    free(r->acc);
    free(r->fin);
    oa_logprobs_free(r->lp);
    free(r);
}

gw_req *gw_req_add(gw_conn *c, uint64_t eid, const char *cid) {
    gw_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->eid = eid;
    r->conn = c;
    snprintf(r->cid, sizeof(r->cid), "%s", cid ? cid : "");
    r->next = c->reqs;
    c->reqs = r;
    c->n_reqs++;
    c->pool->n_reqs++;
    return r;
}

void gw_req_remove(gw_conn *c, gw_req *r) {
    for (gw_req **pp = &c->reqs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            c->n_reqs--;
            c->pool->n_reqs--;
            c->last_rx_ms = gw_now_ms(); /* a finished request restarts the idle clock */
            req_free(r);
            return;
        }
}

void gw_req_cut_event(const gw_req *r, engine_event *ev) {
    if (!r->cut || ev->type != ENGINE_EV_FINISHED || ev->reason != FINISH_CANCELLED) return;
    ev->type = ENGINE_EV_ERROR;
    ev->status = ENGINE_ERR_SHUTTING_DOWN;
    snprintf(ev->message, sizeof(ev->message), "the server is shutting down: the answer was cut at the end of its "
             "grace period (server.grace_ms); retry on another instance");
}

gw_req *gw_req_find(gw_conn *c, const char *cid) {
    for (gw_req *r = c->reqs; r; r = r->next)
        if (!strcmp(r->cid, cid)) return r;
    return NULL;
}

/* Cancels every request of a vanished client and drains their events so the
 * engine can release them; their KV is freed by the engine at once. */
void gw_conn_drop_requests(gw_conn *c) {
    for (gw_req *r = c->reqs; r; r = r->next) engine_cancel(c->pool->eng, r->eid);
    for (gw_req *r = c->reqs; r; r = r->next) {
        r->conn = NULL;
        r->orphan_next = c->pool->orphans;
        c->pool->orphans = r;
    }
    c->pool->n_reqs -= c->n_reqs;
    c->reqs = NULL;
    c->n_reqs = 0;
}

/* Orphans (requests of closed connections) are polled until their final
 * event so the engine can release their slots. */
void gw_pool_drain_orphans(gw_pool *p) {
    for (gw_req **pp = &p->orphans; *pp;) {
        gw_req *r = *pp;
        engine_event ev;
        int got;
        bool gone = false;
        while ((got = engine_poll(p->eng, r->eid, &ev)) == 1)
            if (ev.type == ENGINE_EV_FINISHED || ev.type == ENGINE_EV_ERROR) {
                gone = true;
                break;
            }
        if (got < 0) gone = true;
        if (gone) {
            *pp = r->orphan_next;
            req_free(r);
            continue;
        }
        pp = &r->orphan_next;
    }
}

void gw_conn_link(gw_pool *p, gw_conn *c, struct lws *wsi, int kind) {
    memset(c, 0, sizeof(*c));
    c->pool = p;
    c->wsi = wsi;
    c->kind = kind;
    c->next = p->conns;
    p->conns = c;
    p->n_conns++;
}

void gw_conn_unlink(gw_conn *c) {
    /* lws reports CLOSED also for an upgrade its filter refused: never linked, nothing held */
    if (!c->pool) return;
    for (gw_conn **pp = &c->pool->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            c->pool->n_conns--;
            break;
        }
    gw_conn_drop_requests(c);
    gw_queue_free(c);
    ws_rx_free(&c->rx);
    free(c->body);
    c->body = NULL;
}

