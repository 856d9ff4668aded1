/* stream.c — the WebSocket protocol specd.v1 on /v1/stream (frames:
 * protocol.h): receives client messages, submits them to the engine, and
 * pumps the engine's events into each connection's queue (conn.h). */
#include "gateway/stream.h"

#include "gateway/gw.h"
#include "gateway/metrics.h"
#include "gateway/protocol.h"
#include "gateway/status_map.h"
#include "policy/classify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- engine events -> client messages ----------------------------------------- */

static void ws_pump(gw_server *s, gw_conn *c) {
    for (gw_req *r = c->reqs, *next; r; r = next) {
        next = r->next;
        engine_event ev;
        /* backpressure: stop pulling while this client's queue is long; the
         * engine then pauses only this request */
        while (c->out_bytes < GW_PUMP_HIGH_WATER && engine_poll(s->eng, r->eid, &ev) == 1) {
            gw_req_cut_event(r, &ev);
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
                s->tokens_out += (uint64_t)ev.n_tokens;
                break;
            case ENGINE_EV_FINISHED:
                json = gw_json_done(r->cid, r->prompt_tokens, &ev);
                gw_metrics_finished(&ev);
                gw_monitor_record(&ev);
                last = true;
                break;
            case ENGINE_EV_ERROR: {
                const char *code = gw_status_lookup(ev.status)->ws_code;
                json = gw_json_error(r->cid, code, ev.message);
                gw_metrics_error(code);
                last = true;
                break;
            }
            }
            if (!last) {
                gw_queue_json(c, json);
            } else {
                /* the request leaves reqs now, but to its client it runs
                 * until this frame goes out: n_finals_queued keeps it
                 * counted (ws_handle_message) */
                if (json) gw_queue(c, json, strlen(json), GW_OUT_TEXT_FINAL);
                free(json);
                gw_req_remove(c, r);
                break;
            }
        }
    }
}

void gw_stream_pump_all(gw_server *s) {
    for (gw_conn *c = s->pool.conns; c; c = c->next)
        if (c->kind == GW_CONN_WS) ws_pump(s, c);
}

/* ---- WebSocket protocol specd.v1 ---------------------------------------------- */

static void ws_error(gw_conn *c, const char *cid, const char *code, const char *msg) {
    gw_metrics_error(code);
    gw_queue_json(c, gw_json_error(cid, code, msg));
}

static void ws_handle_message(gw_server *s, gw_conn *c, const char *buf, size_t len) {
    gw_limits lim = s->limits;
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
        else engine_cancel(s->eng, r->eid);
    } else if (gw_req_find(c, m.id)) {
        ws_error(c, m.id, "duplicate_id", "a request with this id is still active on this connection");
    } else if (c->n_reqs + c->n_finals_queued + 1 > s->cfg.max_requests_per_conn) {
        /* the HTTP rule too (http.c: n choices count n). A request whose done
         * is still queued counts: the engine may finish one while the loop
         * has not yet read the client's next messages (a busy or descheduled
         * loop thread), and the client, which has not seen that done, still
         * has it in flight */
        ws_error(c, m.id, GW_ERR_TOO_MANY_REQUESTS, GW_TOO_MANY_REQUESTS_MSG);
    } else if (s->pool.n_reqs >= s->cfg.max_requests_total) {
        ws_error(c, m.id, gw_status_lookup(ENGINE_ERR_QUEUE_FULL)->ws_code,
                 "the server is at its concurrent request limit; retry later");
    } else if (s->draining) {
        ws_error(c, m.id, gw_status_lookup(ENGINE_ERR_SHUTTING_DOWN)->ws_code, "the server is shutting down");
    } else {
        char perr[300];
        if (gw_prepare_prompt(s->eng, &m, perr, sizeof(perr)) != 0) {
            ws_error(c, m.id, "invalid_request", perr);
        } else {
            engine_request rq = m.req;
            rq.notify = gw_engine_notify;
            rq.user = NULL;
            /* one connection is one client: the engine bounds what its
             * requests hold at once (engine.h, fair share) */
            if (!c->client_id) c->client_id = ++s->last_client_id;
            rq.client = c->client_id;
            if (!m.seed_set) rq.seed = gw_random_seed();
            rq.seeded = m.seed_set; /* engine.h: reproducible under the defaults */
            if (!rq.content_type && rq.prompt_text) rq.content_type = pol_classify(rq.prompt_text, strlen(rq.prompt_text));
            char eerr[300];
            uint64_t eid = 0;
            engine_status st = engine_submit(s->eng, &rq, &eid, eerr, sizeof(eerr));
            if (st != ENGINE_OK) {
                ws_error(c, m.id, gw_status_lookup(st)->ws_code, eerr);
            } else {
                gw_req *r = gw_req_add(c, eid, m.id);
                if (!r) {
                    engine_cancel(s->eng, eid);
                    ws_error(c, m.id, "internal", "out of memory");
                } else {
                    gw_uuid4(r->session);
                    s->requests++;
                }
            }
        }
    }
    gw_msg_free(&m);
}

int gw_cb_stream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    gw_conn *c = user;
    gw_server *s = wsi ? gw_server_of(wsi) : NULL;
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return gw_ws_filter(wsi, "/v1/stream");
    case LWS_CALLBACK_ESTABLISHED:
        gw_conn_link(&s->pool, c, wsi, GW_CONN_WS);
        ws_rx_init(&c->rx, (size_t)s->cfg.max_message_bytes);
        c->last_rx_ms = gw_now_ms();
        s->connections++;
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
            snprintf(msg, sizeof(msg), "message larger than the limit of %d bytes", s->cfg.max_message_bytes);
            ws_error(c, NULL, "message_too_large", msg);
        } else {
            ws_handle_message(s, c, c->rx.buf, c->rx.len);
        }
        ws_rx_reset(&c->rx);
        ws_pump(s, c);
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* a malformed close (1 byte, a code no peer may send, bad UTF-8)
         * fails the connection: no echo */
        if (!ws_close_payload_ok(in, len)) return -1;
        break;
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->out_bytes > s->cfg.out_limit_bytes) {
            static const char why[] = "client too slow: output limit exceeded";
            lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)why, sizeof(why) - 1);
            s->slow_disconnects++;
            return -1;
        }
        int w = gw_write_head(c, NULL);
        if (w < 0 || (w == 0 && c->closing)) return -1;
        if (w == 0) break;
        ws_pump(s, c);
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
        gw_stream_pump_all(s); /* the loop was woken: this protocol's connections */
        break;
    default:
        break;
    }
    return 0;
}

void gw_stream_close_idle(gw_server *s) {
    double now = gw_now_ms(), limit = s->cfg.idle_timeout_s * 1e3;
    for (gw_conn *c = s->pool.conns; c; c = c->next) {
        if (c->kind != GW_CONN_WS || c->closing || c->n_reqs || c->out_head) continue;
        if (now - c->last_rx_ms < limit) continue;
        static const char why[] = "idle timeout";
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_GOINGAWAY, (unsigned char *)why, sizeof(why) - 1);
        c->closing = true;
        s->idle_disconnects++;
        lws_callback_on_writable(c->wsi);
    }
}

