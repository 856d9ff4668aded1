/* http.c — the gateway's HTTP side: OpenAI-compatible completions (plain and
 * server-sent events), /v1/models, /healthz, /metrics, and static files from
 * the web root (no path escapes it). Runs on the event loop thread only. */
#include "gateway/gw.h"
#include "gateway/endpoints.h"
#include "gateway/learn_api.h"
#include "gateway/metrics.h"
#include "gateway/openai_request.h"
#include "gateway/openai_response.h"
#include "gateway/status_map.h"
#include "gateway/tool_calls.h"

#include <arpa/inet.h>
#include <jansson.h>
#include "policy/classify.h"
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>


static const char *mime_of(const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot) return "application/octet-stream";
    static const struct { const char *ext, *mime; } t[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
        {".json", "application/json"}, {".svg", "image/svg+xml"}, {".png", "image/png"},
        {".ico", "image/x-icon"}, {".txt", "text/plain; charset=utf-8"}, {".map", "application/json"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (!strcmp(dot, t[i].ext)) return t[i].mime;
    return "application/octet-stream";
}

/* CORS: when the request's Origin may read our answers (access.h), the
 * headers that let its page do so. 0, or -1 when they do not fit. */
static int cors_headers(gw_conn *c, unsigned char **p, unsigned char *end) {
    gw_server *s = gw_server_of(c->wsi);
    char origin[256];
    if (!gw_cors_origin(s->cfg.cors_origins, s->cfg.allowed_origins, c->wsi, origin, sizeof origin)) return 0;
    if (lws_add_http_header_by_name(c->wsi, (const unsigned char *)"access-control-allow-origin:",
                                    (const unsigned char *)origin, (int)strlen(origin), p, end) ||
        lws_add_http_header_by_name(c->wsi, (const unsigned char *)"vary:", (const unsigned char *)"Origin", 6, p, end))
        return -1;
    return 0;
}

/* Sends headers for a response whose body is queued as one HTTP_FINAL chunk. */
static int respond(gw_conn *c, int status, const char *ctype, const char *body, size_t len) {
    unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (lws_add_http_common_headers(c->wsi, (unsigned int)status, ctype, (lws_filepos_t)len, &p, end)) return -1;
    if (lws_add_http_header_by_name(c->wsi, (const unsigned char *)"cache-control:", (const unsigned char *)"no-store",
                                    8, &p, end))
        return -1;
    if (cors_headers(c, &p, end)) return -1;
    if (lws_finalize_write_http_header(c->wsi, start, &p, end)) return -1;
    c->headers_sent = true;
    c->status = status;
    return gw_queue(c, body, len, GW_OUT_HTTP_FINAL);
}

static int respond_json(gw_conn *c, int status, char *json) {
    if (!json) return respond(c, 500, "application/json", "{}", 2);
    int rc = respond(c, status, "application/json", json, strlen(json));
    free(json);
    return rc;
}

/* Static file under the web root (or, for /vendor/uplot/, the charting
 * library's dist folder); refuses anything that resolves outside it. */
static int serve_static(gw_server *s, gw_conn *c, const char *uri) {
    const char *root = s->web_root_real;
    if (!strncmp(uri, "/vendor/uplot/", 14)) {
        root = s->vendor_real;
        uri += 13;
    }
    if (!root[0]) return respond(c, 404, "text/plain", "not found\n", 10);
    char rel[300], full[PATH_MAX + 300], real[PATH_MAX];
    snprintf(rel, sizeof(rel), "%s", !strcmp(uri, "/") ? "/index.html" : uri);
    if (strstr(rel, "..") || strchr(rel, '\\') || strchr(rel, '%')) return respond(c, 403, "text/plain", "forbidden\n", 10);
    snprintf(full, sizeof(full), "%s%s", root, rel);
    struct stat st;
    size_t rl = strlen(root);
    if (!realpath(full, real) || strncmp(real, root, rl) != 0 || (real[rl] != '/' && real[rl]) ||
        stat(real, &st) != 0 || !S_ISREG(st.st_mode))
        return respond(c, 404, "text/plain", "not found\n", 10);
    int n = lws_serve_http_file(c->wsi, real, mime_of(real), NULL, 0);
    if (n < 0) return -1;
    c->finished = true;
    return 0;
}

/* ---- completions ------------------------------------------------------------------ */

static int render_chat(gw_server *s, oa_request *oq, char *err, size_t errlen) {
    engine_info info;
    engine_get_info(s->eng, &info);
    (void)info;
    return oa_render_prompt_tmpl(oq, s->eng, err, errlen); /* the model's Jinja template, tools included */
}

/* The OpenAI error for a failure of kind st (status_map.h), with message. */
static oa_error status_error(engine_status st, const char *message) {
    const gw_status_row *row = gw_status_lookup(st);
    oa_error oe = {.status = row->http_status, .code = row->oa_code, .type = row->oa_type};
    snprintf(oe.message, sizeof(oe.message), "%.250s", message ? message : "");
    return oe;
}

/* Submits the n choices of a parsed request, each its own engine request (its
 * own sequence in the batch): choice i is seeded oa_choice_seed(seed, i), or
 * with a random seed of its own when the request has none. Returns 0 with the
 * choices in c->reqs, or -1 with *oe filled and nothing left running (the
 * choices submitted before a refusal are cancelled). */
static int submit_choices(gw_server *s, gw_conn *c, const oa_request *oq, int api, oa_error *oe) {
    engine_request rq = oq->req;
    rq.notify = gw_engine_notify;
    if (!rq.content_type && rq.prompt_text) rq.content_type = pol_classify(rq.prompt_text, strlen(rq.prompt_text));
    if (oq->n > 1) {
        /* the choices of one request are one client: the engine's fair-share
         * bound (engine.h) takes them together */
        if (!c->client_id) c->client_id = ++s->last_client_id;
        rq.client = c->client_id;
    }
    char session[sizeof c->reqs->session];
    gw_uuid4(session);
    for (int i = 0; i < oq->n; i++) {
        rq.seed = oq->seed_set ? oa_choice_seed(oq->req.seed, i) : gw_random_seed();
        rq.seeded = oq->seed_set; /* engine.h: reproducible under the defaults */
        char eerr[300];
        uint64_t eid = 0;
        engine_status st = engine_submit(s->eng, &rq, &eid, eerr, sizeof(eerr));
        gw_req *r = st == ENGINE_OK ? gw_req_add(c, eid, "") : NULL;
        if (!r) {
            if (st == ENGINE_OK) {
                engine_cancel(s->eng, eid);
                *oe = (oa_error){.status = 500, .code = GW_ERR_INTERNAL, .type = "server_error"};
                snprintf(oe->message, sizeof(oe->message), "out of memory");
            } else {
                *oe = status_error(st, eerr);
            }
            gw_conn_drop_requests(c); /* the choices already submitted */
            return -1;
        }
        r->api = api;
        r->stream = oq->stream;
        r->tools = oq->tool_format + 1;
        r->index = i;
        r->logprobs = oq->req.logprobs;
        if (r->logprobs && !r->stream) r->lp = oa_logprobs_new(api == GW_HTTP_CHAT);
        memcpy(r->session, session, sizeof(session)); /* one response id for all choices */
        s->requests++;
    }
    c->n_choices = oq->n;
    c->include_usage = oq->include_usage;
    return 0;
}

/* The headers of a server-sent-events response. */
static int sse_headers(gw_conn *c) {
    unsigned char buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    c->headers_sent = true;
    if (lws_add_http_common_headers(c->wsi, 200, "text/event-stream", LWS_ILLEGAL_HTTP_CONTENT_LEN, &p, end) ||
        cors_headers(c, &p, end) || lws_finalize_write_http_header(c->wsi, start, &p, end))
        return -1;
    return 0;
}

/* A CORS preflight (OPTIONS): 204 with what the page may send when its
 * Origin is allowed (server.cors_origins / allowed_origins), else 403.
 * Returns what the HTTP callback returns. */
static int preflight(gw_server *s, struct lws *wsi) {
    char origin[256];
    if (!gw_cors_origin(s->cfg.cors_origins, s->cfg.allowed_origins, wsi, origin, sizeof origin)) {
        gw_metrics_error("cors_refused");
        return gw_refuse_now(wsi, 403, "origin_not_allowed",
                          "this Origin may not call the API from a browser (see server.cors_origins)", NULL, NULL);
    }
    unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    static const char *const h[][2] = {{"access-control-allow-methods:", "GET, POST, OPTIONS"},
                                       {"access-control-allow-headers:", "Authorization, Content-Type"},
                                       {"access-control-max-age:", "600"},
                                       {"vary:", "Origin"}};
    if (lws_add_http_common_headers(wsi, 204, "text/plain", 0, &p, end) ||
        lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-origin:",
                                    (const unsigned char *)origin, (int)strlen(origin), &p, end))
        return -1;
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)h[i][0], (const unsigned char *)h[i][1],
                                        (int)strlen(h[i][1]), &p, end))
            return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end)) return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int start_completion(gw_server *s, gw_conn *c, int api) {
    oa_request oq;
    oa_error oe;
    c->body[c->rx_len] = 0;
    if (oa_parse(api == GW_HTTP_CHAT, c->body, c->rx_len, &s->limits, &oq, &oe) != 0) {
        gw_metrics_error(oe.code);
        return respond_json(c, oe.status, oa_error_json(&oe));
    }
    char perr[300];
    int rc = 0;
    if (oq.model[0] && !gw_model_known(s, oq.model)) {
        /* as OpenAI, vLLM and Ollama answer: an unknown model is a 404 (models.alias adds names) */
        oe = (oa_error){.status = 404, .code = "model_not_found", .type = "invalid_request_error"};
        snprintf(oe.param, sizeof(oe.param), "model");
        snprintf(oe.message, sizeof(oe.message), "The model '%.100s' does not exist; this server serves '%.80s'",
                 oq.model, s->cfg.model_name);
        gw_metrics_error(oe.code);
        rc = respond_json(c, 404, oa_error_json(&oe));
    } else if (s->draining) {
        oe = status_error(ENGINE_ERR_SHUTTING_DOWN, "the server is shutting down");
        rc = respond_json(c, oe.status, oa_error_json(&oe));
    } else if (c->n_reqs + oq.n > s->cfg.max_requests_per_conn) {
        /* the WebSocket rule (stream.c): each choice is a concurrent request
         * of this connection; HTTP/1.1 serves one request at a time, so only
         * n can pass the limit */
        gw_metrics_error(GW_ERR_TOO_MANY_REQUESTS);
        oe = (oa_error){.status = 429, .code = GW_ERR_TOO_MANY_REQUESTS};
        snprintf(oe.param, sizeof(oe.param), "n");
        snprintf(oe.message, sizeof(oe.message), GW_TOO_MANY_REQUESTS_MSG ": n = %d choices are %d concurrent "
                 "requests, server.max_requests_per_connection is %d", oq.n, oq.n, s->cfg.max_requests_per_conn);
        rc = respond_json(c, oe.status, oa_error_json(&oe));
    } else if (s->pool.n_reqs + oq.n > s->cfg.max_requests_total) {
        oe = status_error(ENGINE_ERR_QUEUE_FULL, "the server is at its concurrent request limit; retry later");
        rc = respond_json(c, oe.status, oa_error_json(&oe));
    } else if (render_chat(s, &oq, perr, sizeof(perr)) != 0) {
        oe = (oa_error){.status = 400, .code = "invalid_request", .type = "invalid_request_error"};
        snprintf(oe.message, sizeof(oe.message), "%.250s", perr);
        rc = respond_json(c, 400, oa_error_json(&oe));
    } else if (submit_choices(s, c, &oq, api, &oe) != 0) {
        rc = respond_json(c, oe.status, oa_error_json(&oe));
    } else {
        /* a constrained stream's headers wait for its first event: a grammar
         * the compile worker refuses is then a 400, not a 200 stream with an
         * error in it */
        if (oq.stream && !oq.grammar && sse_headers(c) != 0) rc = -1;
        gw_http_pump(s, c);
    }
    oa_request_free(&oq);
    return rc;
}

/* Moves engine events of this connection's request into HTTP output. */
void gw_http_pump_all(gw_server *s) {
    for (gw_conn *c = s->pool.conns; c; c = c->next)
        if (c->kind == GW_CONN_HTTP) gw_http_pump(s, c);
}

/* The response is queued: the choices whose final event was polled are
 * freed, the others (siblings of a failed choice) cancelled and left to the
 * orphan drain. */
static void release_choices(gw_conn *c) {
    for (gw_req *r = c->reqs, *next; r; r = next) {
        next = r->next;
        if (r->done) gw_req_remove(c, r);
    }
    gw_conn_drop_requests(c);
}

/* The choice of c with this index (NULL when absent). */
static gw_req *choice_at(gw_conn *c, int index) {
    for (gw_req *r = c->reqs; r; r = r->next)
        if (r->index == index) return r;
    return NULL;
}

static bool all_choices_done(gw_conn *c) {
    for (gw_req *r = c->reqs; r; r = r->next)
        if (!r->done) return false;
    return true;
}

/* Non-streaming, every choice finished: one response with them all. */
static void respond_choices(gw_server *s, gw_conn *c) {
    int n = c->n_choices;
    oa_choice *ch = calloc((size_t)n, sizeof(*ch));
    bool ok = ch != NULL;
    for (int i = 0; ok && i < n; i++) {
        gw_req *r = choice_at(c, i);
        if (!r || !r->fin) ok = false;
        else ch[i] = (oa_choice){.text = r->acc, .len = r->acc_len, .fin = r->fin, .logprobs = r->lp};
    }
    if (!ok) {
        respond_json(c, 500, oa_simple_error(500, GW_ERR_INTERNAL, "out of memory"));
    } else {
        for (int i = 0; i < n; i++) choice_at(c, i)->lp = NULL; /* handed over */
        char *body = oa_response_json_n(c->reqs->api == GW_HTTP_CHAT, c->reqs->session, s->cfg.model_name, ch, n,
                                         choice_at(c, 0)->prompt_tokens);
        if (c->reqs->tools) body = tc_rewrite_response(body, (chat_tool_format)(c->reqs->tools - 1), gw_random_seed());
        respond_json(c, 200, body);
    }
    free(ch);
}

/* Handles one event of choice r. Returns true when the response is complete
 * (every choice finished, or one failed): it is queued and c's requests are
 * released. */
static bool choice_event(gw_server *s, gw_conn *c, gw_req *r, const engine_event *ev) {
    bool chat = r->api == GW_HTTP_CHAT;
    if (r->stream && !c->headers_sent && ev->type != ENGINE_EV_ERROR && sse_headers(c) != 0) return false;
    if (ev->type == ENGINE_EV_STARTED) {
        r->prompt_tokens = ev->prompt_tokens;
        if (r->stream && chat) { /* the role, once, before any content */
            char *rc = oa_stream_role_chunk(r->session, s->cfg.model_name, r->index);
            if (rc) gw_queue(c, rc, strlen(rc), GW_OUT_HTTP), free(rc);
        }
        return false;
    }
    if (ev->type == ENGINE_EV_TOKENS) {
        s->tokens_out += (uint64_t)ev->n_tokens;
        if (r->lp) oa_logprobs_add(r->lp, chat, s->eng, ev, &r->lp_offset);
        if (r->stream && !r->tools) {
            void *lp = NULL;
            if (r->logprobs && (lp = oa_logprobs_new(chat)))
                oa_logprobs_add(lp, chat, s->eng, ev, &r->lp_offset);
            char *chunk = oa_stream_chunk_ix(chat, r->session, s->cfg.model_name, r->index, ev->text,
                                             (size_t)ev->text_len, lp, NULL);
            if (chunk) gw_queue(c, chunk, strlen(chunk), GW_OUT_HTTP), free(chunk);
        } else if (ev->text_len) {
            if (r->acc_len + (size_t)ev->text_len + 1 > r->acc_cap) {
                size_t cap = r->acc_cap ? r->acc_cap * 2 : 4096;
                while (cap < r->acc_len + (size_t)ev->text_len + 1) cap *= 2;
                char *nb = realloc(r->acc, cap);
                if (!nb) return false;
                r->acc = nb, r->acc_cap = cap;
            }
            memcpy(r->acc + r->acc_len, ev->text, (size_t)ev->text_len);
            r->acc_len += (size_t)ev->text_len;
        }
        return false;
    }
    r->done = true; /* finished or error: the engine has let it go */
    if (ev->type == ENGINE_EV_ERROR) {
        /* one failed choice fails the request; its siblings are cancelled */
        oa_error oe = status_error(ev->status, ev->message);
        gw_metrics_error(oe.code);
        if (r->stream && c->headers_sent) {
            char *fin = oa_stream_error_as(&oe);
            if (fin) gw_queue(c, fin, strlen(fin), GW_OUT_HTTP_FINAL), free(fin);
        } else {
            respond_json(c, oe.status, oa_error_json(&oe));
        }
        release_choices(c);
        return true;
    }
    gw_metrics_finished(ev), gw_monitor_record(ev);
    r->completion_tokens = ev->completion_tokens;
    r->fin_cached = (int)ev->st.prefix_reused;
    if (r->stream && r->tools) {
        /* a reply that may hold tool calls was held back: its calls (or its text) now, as OpenAI's deltas */
        bool calls = false;
        char *tc = tc_stream_chunks((chat_tool_format)(r->tools - 1), r->acc, r->acc_len, gw_random_seed(), r->session,
                                    s->cfg.model_name, r->index, &calls);
        if (tc) gw_queue(c, tc, strlen(tc), GW_OUT_HTTP), free(tc);
        r->tool_called = calls;
    }
    if (r->stream && c->n_choices == 1) {
        char *fin = oa_stream_final(chat, r->session, s->cfg.model_name, ev, r->prompt_tokens, c->include_usage);
        if (fin && r->tool_called) fin = tc_finish_reason(fin);
        if (fin) gw_queue(c, fin, strlen(fin), GW_OUT_HTTP_FINAL), free(fin);
        release_choices(c);
        return true;
    }
    if (r->stream) {
        char *fin = oa_stream_choice_final(chat, r->session, s->cfg.model_name, r->index, ev);
        if (fin) gw_queue(c, fin, strlen(fin), GW_OUT_HTTP), free(fin);
    } else if ((r->fin = malloc(sizeof(*r->fin)))) {
        *r->fin = *ev;
    }
    if (!all_choices_done(c)) return false;
    if (r->stream) {
        int completion = 0;
        for (gw_req *q = c->reqs; q; q = q->next) completion += q->completion_tokens;
        char *end = oa_stream_end_cached(chat, r->session, s->cfg.model_name, c->include_usage,
                                         choice_at(c, 0)->prompt_tokens, completion,
                                         choice_at(c, 0)->fin_cached);
        if (end) gw_queue(c, end, strlen(end), GW_OUT_HTTP_FINAL), free(end);
    } else {
        respond_choices(s, c);
    }
    release_choices(c);
    return true;
}

/* Moves engine events of c's choices into its output, one event per choice
 * in turn (so no choice starves the others), up to GW_PUMP_HIGH_WATER queued
 * bytes. */
void gw_http_pump(gw_server *s, gw_conn *c) {
    engine_event ev;
    bool moved = true;
    while (moved && c->reqs && c->out_bytes < GW_PUMP_HIGH_WATER) {
        moved = false;
        for (gw_req *r = c->reqs, *next; r && c->out_bytes < GW_PUMP_HIGH_WATER; r = next) {
            next = r->next;
            if (r->done || engine_poll(s->eng, r->eid, &ev) != 1) continue;
            moved = true;
            gw_req_cut_event(r, &ev);
            if (choice_event(s, c, r, &ev)) return;
        }
    }
}

/* Admin endpoints need "Authorization: Bearer <server.admin_token>"; with no
 * token configured they are disabled. Responds (401/403) when not allowed. */
static bool admin_authorized(gw_server *s, gw_conn *c) {
    char token[300] = "";
    if (s->cfg.policy) {
        const pol_config *pc = pol_store_acquire(s->cfg.policy);
        snprintf(token, sizeof(token), "%s", pc->server.admin_token);
        pol_store_release(s->cfg.policy, pc);
    }
    if (!token[0]) {
        respond_json(c, 403, oa_simple_error(403, "admin_disabled",
                                             "admin endpoints are disabled: set server.admin_token or admin_token_env"));
        return false;
    }
    char auth[400] = "";
    lws_hdr_copy(c->wsi, auth, sizeof(auth), WSI_TOKEN_HTTP_AUTHORIZATION);
    size_t tl = strlen(token);
    /* constant-time compare of the bearer token */
    bool ok = !strncmp(auth, "Bearer ", 7) && strlen(auth + 7) == tl;
    unsigned diff = 0;
    for (size_t i = 0; ok && i < tl; i++) diff |= (unsigned)(auth[7 + i] ^ token[i]);
    if (!ok || diff) {
        respond_json(c, 401, oa_simple_error(401, "unauthorized", "missing or wrong bearer token"));
        return false;
    }
    return true;
}

static int route(gw_server *s, gw_conn *c) {
    const char *u = c->path;
    if (c->is_post) {
        if (!strcmp(u, "/v1/completions")) return 1;
        if (!strcmp(u, "/v1/chat/completions")) return 2;
        if (!strcmp(u, "/tokenize")) return 4;
        if (!strcmp(u, "/detokenize")) return 5;
        if (!strcmp(u, "/apply-template")) return 6;
        if (!strcmp(u, "/admin/reload")) {
            if (!admin_authorized(s, c)) return c->headers_sent ? 0 : -1;
            return 3;
        }
        if (!strcmp(u, "/admin/learn")) { /* a small JSON body follows (learn_api.h) */
            if (!admin_authorized(s, c)) return c->headers_sent ? 0 : -1;
            return 7;
        }
        return respond_json(c, 404, oa_simple_error(404, "not_found", "no such endpoint"));
    }
    if (!strcmp(u, "/healthz")) {
        const char *b = s->draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}";
        return respond(c, s->draining ? 503 : 200, "application/json", b, strlen(b));
    }
    if (!strcmp(u, "/metrics")) {
        engine_stats es;
        engine_get_stats(s->eng, &es);
        gw_counters gc = {.connections_open = (uint64_t)s->pool.n_conns, .connections_total = s->connections,
                          .requests_total = s->requests, .slow_disconnects = s->slow_disconnects};
        engine_learn_stats ls;
        engine_get_learn_stats(s->eng, &ls);
        char *text = metrics_render(&es, &gc, &ls);
        if (!text) return respond(c, 500, "text/plain", "error\n", 6);
        int rc = respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
        free(text);
        return rc;
    }
    if (!strcmp(u, "/api/stats")) return respond_json(c, 200, gw_stats_json(s, gw_admin_bearer_ok(c->wsi)));
    if (!strcmp(u, "/v1/models")) return respond_json(c, 200, gw_models_json(s));
    int st = 200;
    if (!strncmp(u, "/v1/models/", 11)) {
        char *b = gw_ep_model(s, u + 11, &st);
        return respond_json(c, st, b);
    }
    if (!strcmp(u, "/health")) {
        char *b = gw_ep_health(s, &st);
        return respond_json(c, st, b);
    }
    if (!strcmp(u, "/props")) {
        char *b = gw_ep_props(s, &st);
        return respond_json(c, st, b);
    }
    if (!strncmp(u, "/v1/", 4)) return respond_json(c, 404, oa_simple_error(404, "not_found", "no such endpoint"));
    return serve_static(s, c, u);
}

int gw_cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    gw_conn *c = user;
    gw_server *s = wsi ? gw_server_of(wsi) : NULL;

    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return 1; /* a WebSocket without one of our subprotocols */
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
    case LWS_CALLBACK_WSI_DESTROY:
        gw_count_connection(wsi, (int)reason);
        break;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: {
        if (in && !strcasecmp((const char *)in, "h2c")) {
            /* Upgrade: h2c (HTTP/2 over cleartext). lws 4.1 would answer 101
             * and then serve HTTP/2 frames our HTTP callback does not
             * handle: a POST then waits forever. RFC 9113 3.2 lets a server
             * ignore the upgrade and answer in HTTP/1.1. `in` is lws's own
             * copy of the Upgrade value, which it compares with "websocket"
             * and "h2c" after this callback returns 0: a value that matches
             * neither is served as a plain HTTP/1.1 request. */
            ((char *)in)[0] = '-';
            return 0;
        }
        char uri[128] = "";
        lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
        if (s->draining) {
            /* a draining instance takes no new streams: 503 before the
             * upgrade, so a proxy retries the upgrade on another instance */
            gw_metrics_error("shutting_down");
            gw_refuse_now(wsi, 503, "shutting_down", "the server is shutting down; retry on another instance",
                       "retry-after:", "1");
            return 1;
        }
        int r = gw_refuse_if_full(wsi, uri);
        if (!r) r = gw_refuse_unauthorized(wsi, uri);
        return r ? 1 : 0; /* > 0: answered here */
    }
    case LWS_CALLBACK_HTTP: {
        if (c->kind == GW_CONN_HTTP && c->wsi) gw_conn_unlink(c); /* keep-alive: a new transaction */
        c->rx_too_big = false;
        if (gw_refuse_bad_version(wsi)) return -1;
        if (gw_refuse_if_full(wsi, (const char *)in)) return -1;
        /* a preflight carries no credentials: answered before the key check */
        if (lws_hdr_total_length(wsi, WSI_TOKEN_OPTIONS_URI) > 0) return preflight(s, wsi);
        if (gw_refuse_unauthorized(wsi, (const char *)in)) return -1;
        {
            bool post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
            int fr = gw_refuse_bad_framing(s, c, wsi, post);
            if (fr) return fr < 0 ? -1 : 0; /* 1: answered, its body is read and dropped */
            if (post && gw_refuse_cross_site(s, wsi, (const char *)in)) return -1;
        }
        gw_conn_link(&s->pool, c, wsi, GW_CONN_HTTP);
        snprintf(c->path, sizeof(c->path), "%s", (const char *)in);
        c->is_post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
        int r = route(s, c);
        if (r == 3) { /* /admin/reload: no body needed */
            char msg[1024];
            int rc = gw_reload(s, "POST /admin/reload", msg, sizeof(msg));
            json_t *o = json_pack("{s:b,s:i,s:s}", "ok", rc == 0, "version", s->policy_version, "message", msg);
            char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            return respond_json(c, rc == 0 ? 200 : 422, body) < 0 ? -1 : 0;
        }
        if (r == 1 || r == 2 || r == 4 || r == 5 || r == 6 || r == 7) {
            c->status = r; /* which API: the body follows */
            return 0;
        }
        if (r < 0) return -1;
        if (c->finished) return 0; /* static file: lws writes it */
        return 0;
    }
    case LWS_CALLBACK_HTTP_BODY:
        if (c->status < 1 || c->status > 7 || c->status == 3) return 0; /* already answered: drop the body */
        if (!len) return 0; /* a POST with Content-Length: 0 gets one empty call (in == NULL) */
        if (c->rx_len + len > (c->status == 7 ? (size_t)GW_LEARN_BODY_MAX : (size_t)s->cfg.max_message_bytes)) {
            c->rx_too_big = true;
            return 0;
        }
        if (c->rx_len + len + 1 > c->rx_cap) {
            size_t cap = c->rx_cap ? c->rx_cap : 4096;
            while (cap < c->rx_len + len + 1) cap *= 2;
            char *nb = realloc(c->body, cap);
            if (!nb) return -1;
            c->body = nb, c->rx_cap = cap;
        }
        memcpy(c->body + c->rx_len, in, len);
        c->rx_len += len;
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (c->kind != GW_CONN_HTTP) /* answered before its body was read; a 413's connection closes */
            return c->rx_too_big ? -1 : 0;
        if (c->body_complete) {
            /* bytes past this body before its answer: a request pipelined
             * behind a POST (RFC 9112 9.3.2: clients should not). lws 4.1
             * hands them back to this state on every service pass until the
             * transaction completes, spinning the loop (and re-running the
             * request), and holding its input would stall our writes too;
             * the request cannot wait its turn, so the connection closes
             * (its running request is cancelled) */
            gw_metrics_error("pipelined_request");
            return -1;
        }
        c->body_complete = true;
        if (c->rx_too_big) {
            gw_metrics_error("message_too_large");
            return respond_json(c, 413, oa_simple_error(413, "message_too_large", "request body too large")) < 0 ? -1 : 0;
        }
        if (!c->body) {
            c->body = malloc(1);
            if (!c->body) return -1;
            c->rx_cap = 1;
        }
        if (c->headers_sent) return 0; /* already answered (admin) */
        if (c->status == 7) { /* POST /admin/learn (the token was checked at the headers) */
            int st = 200;
            char *b = gw_learn_admin(s->eng, c->body, c->rx_len, &st);
            return respond_json(c, st, b) < 0 ? -1 : 0;
        }
        if (c->status == 4 || c->status == 5 || c->status == 6) {
            int st = 200;
            char *b = c->status == 4 ? gw_ep_tokenize(s, c->body, c->rx_len, &st)
                    : c->status == 5 ? gw_ep_detokenize(s, c->body, c->rx_len, &st)
                                     : gw_ep_apply_template(s, c->body, c->rx_len, &st);
            return respond_json(c, st, b) < 0 ? -1 : 0;
        }
        return start_completion(s, c, c->status == 2 ? GW_HTTP_CHAT : GW_HTTP_COMPLETIONS) < 0 ? -1 : 0;
    case LWS_CALLBACK_HTTP_WRITEABLE: {
        int flag = 0, w = gw_write_head(c, &flag);
        if (w <= 0) return w;
        if (flag == GW_OUT_HTTP_FINAL) {
            /* lws may free this connection's session data when the transaction
             * completes: leave the server's lists first */
            gw_conn_unlink(c);
            c->wsi = NULL;
            c->kind = 0;
            if (lws_http_transaction_completed(wsi)) return -1;
            return 0;
        }
        gw_http_pump(s, c);
        if (c->out_head) lws_callback_on_writable(wsi);
        return 0;
    }
    case LWS_CALLBACK_HTTP_FILE_COMPLETION:
        if (c->kind == GW_CONN_HTTP && c->wsi) gw_conn_unlink(c);
        c->wsi = NULL;
        c->kind = 0;
        if (lws_http_transaction_completed(wsi)) return -1;
        return 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (c && c->kind == GW_CONN_HTTP && c->wsi) gw_conn_unlink(c);
        if (c) c->wsi = NULL, c->kind = 0;
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        gw_http_pump_all(s); /* the loop was woken: this protocol's connections */
        return 0;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}
