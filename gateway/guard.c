/* guard.c — who may talk to us: the checks every connection and request
 * passes before a protocol handles it (DNS-rebinding Host guard, the
 * connection limit, API keys, cross-site POSTs, message framing, the request
 * line's version, WebSocket origins) and the refusals they answer with. Used
 * by http.c, stream.c, monitor.c and server.c; it calls none of them (it sits
 * below the protocol files). Loop thread only. */
#include "gateway/gw.h"
#include "gateway/metrics.h"
#include "gateway/openai_response.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

int gw_pick_port(const char *num, int family) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, num, &a->sin6_addr) != 1) return -1;
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        if (inet_pton(AF_INET, num, &a->sin_addr) != 1) return -1;
        len = sizeof(*a);
    }
    int fd = socket(family == AF_INET6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&ss, len) == 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    close(fd);
    return port;
}

/* ---- who may talk to us ------------------------------------------------------------ */

static int accepted_marker; /* lws opaque user data of the TCP connections counted in n_tcp */

/* True for a Host header naming this machine's loopback: localhost, 127.x.y.z
 * or [::1], with or without a port. */
static bool host_is_loopback(const char *h) {
    char name[256];
    snprintf(name, sizeof(name), "%s", h);
    if (name[0] == '[') {
        char *e = strchr(name, ']');
        if (!e) return false;
        *e = 0;
        struct in6_addr a6;
        return inet_pton(AF_INET6, name + 1, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    char *colon = strchr(name, ':');
    if (colon) *colon = 0;
    if (!strcasecmp(name, "localhost") || !strcasecmp(name, "localhost.")) return true;
    struct in_addr a4;
    return inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* DNS rebinding guard: on a loopback bind the Host header must name the
 * loopback (a page of evil.example whose name now resolves to 127.0.0.1 sends
 * Host: evil.example), unless server.allowed_hosts lists it. Other binds take
 * any Host unless allowed_hosts is set. No Host header (HTTP/1.0) passes. */
bool gw_host_allowed(struct lws *wsi) {
    gw_server *s = gw_server_of(wsi);
    char host[256] = "";
    if (lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST) <= 0) return true;
    const char *list = s->cfg.allowed_hosts;
    if (!list[0] && !s->loopback) return true;
    if (s->loopback && host_is_loopback(host)) return true;
    size_t hl = strcspn(host[0] == '[' ? host + strcspn(host, "]") : host, ":");
    if (host[0] == '[') hl += strcspn(host, "]");
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ", ");
        if (n && ((n == 1 && *p == '*') || (n == hl && !strncasecmp(p, host, n)) ||
                  (n == strlen(host) && !strncasecmp(p, host, n))))
            return true;
        p += n;
    }
    return false;
}

/* Writes a complete refusal on a connection that has sent its headers and
 * not been answered: status, a JSON error body, Connection: close. Returns
 * what an lws callback returns after it (-1: close when written). */
int gw_refuse_now(struct lws *wsi, int status, const char *code, const char *message, const char *extra_name,
                      const char *extra_value) {
    char *body = oa_simple_error(status, code, message);
    if (!body) return -1;
    size_t blen = strlen(body);
    unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (!lws_add_http_common_headers(wsi, (unsigned int)status, "application/json", (lws_filepos_t)blen, &p, end) &&
        !lws_add_http_header_by_name(wsi, (const unsigned char *)"connection:", (const unsigned char *)"close", 5, &p,
                                     end) &&
        (!extra_name || !lws_add_http_header_by_name(wsi, (const unsigned char *)extra_name,
                                                     (const unsigned char *)extra_value, (int)strlen(extra_value), &p,
                                                     end)) &&
        !lws_finalize_http_header(wsi, &p, end) && p + blen < end) {
        memcpy(p, body, blen);
        p += blen;
        lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS);
    }
    free(body);
    return -1;
}

/* Connections over server.max_connections: answered 503 with Retry-After and
 * closed (a WebSocket before its upgrade). /healthz is always answered, so a
 * health check can tell a full server from a dead one. */
static bool over_connection_limit(const gw_server *s) { return s->n_tcp > s->cfg.max_connections; }

int gw_refuse_if_full(struct lws *wsi, const char *uri) {
    gw_server *s = gw_server_of(wsi);
    if (over_connection_limit(s) && strcmp(uri, "/healthz") != 0) {
        s->refused_connections++;
        gw_metrics_error("too_many_connections");
        char msg[160];
        snprintf(msg, sizeof(msg), "the server is at its connection limit (%d); retry later", s->cfg.max_connections);
        return gw_refuse_now(wsi, 503, "too_many_connections", msg, "retry-after:", "1");
    }
    if (!gw_host_allowed(wsi)) {
        gw_metrics_error("host_not_allowed");
        return gw_refuse_now(wsi, 403, "host_not_allowed",
                          "this Host is not allowed (a loopback server answers only loopback names; see "
                          "server.allowed_hosts)",
                          NULL, NULL);
    }
    return 0;
}

/* API keys (access.h): a request for an API path without a valid key is
 * answered 401 with WWW-Authenticate and closed. Returns -1 then, else 0. */
int gw_refuse_unauthorized(struct lws *wsi, const char *uri) {
    gw_server *s = gw_server_of(wsi);
    char path[256];
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(uri, "?"), uri);
    if (!gw_access_required(&s->access, path) || gw_access_has_key(&s->access, wsi)) return 0;
    gw_metrics_error("invalid_api_key");
    return gw_refuse_now(wsi, 401, "invalid_api_key", GW_ACCESS_MSG, "www-authenticate:", "Bearer");
}

/* Cross-site protection for state-changing requests (POST): a page of
 * another site may send a "simple" cross-origin POST (text/plain, no
 * preflight) and the browser delivers it. So a POST whose Origin is neither
 * this host nor listed (server.allowed_origins, server.cors_origins) is 403,
 * and a POST without an allowed Origin must say Content-Type:
 * application/json (which a page can only send after a preflight, refused
 * for foreign origins) or it is 415. Returns -1 after answering, else 0. */
int gw_refuse_cross_site(gw_server *s, struct lws *wsi, const char *uri) {
    char origin[256];
    bool listed = gw_cors_origin(s->cfg.cors_origins, s->cfg.allowed_origins, wsi, origin, sizeof origin);
    if (!listed && !gw_origin_allowed(wsi)) {
        gw_metrics_error("origin_not_allowed");
        return gw_refuse_now(wsi, 403, "origin_not_allowed",
                          "a request from a page of another site is refused (see server.cors_origins)", NULL, NULL);
    }
    /* admin endpoints need the admin's bearer token, which a cross-site page
     * cannot send without a preflight; they take no body but /admin/learn's
     * small JSON object (at most GW_LEARN_BODY_MAX bytes, http.c) */
    if (listed || !strncmp(uri, "/admin/", 7)) return 0;
    char ct[128] = "";
    lws_hdr_copy(wsi, ct, sizeof ct, WSI_TOKEN_HTTP_CONTENT_TYPE);
    size_t n = strcspn(ct, "; ");
    if (n != 16 || strncasecmp(ct, "application/json", 16) != 0) {
        gw_metrics_error("unsupported_media_type");
        return gw_refuse_now(wsi, 415, "unsupported_media_type",
                          "the body must be sent with Content-Type: application/json", NULL, NULL);
    }
    return 0;
}

/* Message framing (RFC 9112 6): a body's length is one Content-Length of
 * decimal digits. lws takes atoll() of the header, so a negative value
 * leaves it waiting for a body it never reads (the socket held until its
 * 30 s timeout), a huge one has it read "forever", and of two headers it
 * uses the first: each is 400 here, at the headers. A length over
 * server.max_message_bytes is 413 before any of the body is read. A POST
 * must have one (411), and no Transfer-Encoding (chunked bodies are not
 * read: 411). Returns -1 after answering (close), 1 after a 413 whose body
 * is still to be read and dropped, else 0. */
int gw_refuse_bad_framing(gw_server *s, gw_conn *c, struct lws *wsi, bool post) {
    if (post && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
        gw_metrics_error("length_required");
        return gw_refuse_now(wsi, 411, "length_required",
                          "Transfer-Encoding bodies are not accepted; send the body with Content-Length", NULL, NULL);
    }
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0) {
        if (!post) return 0;
        gw_metrics_error("length_required");
        return gw_refuse_now(wsi, 411, "length_required", "a POST needs a Content-Length header", NULL, NULL);
    }
    if (lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, 1) > 0) {
        gw_metrics_error("invalid_content_length");
        return gw_refuse_now(wsi, 400, "invalid_content_length", "more than one Content-Length header", NULL, NULL);
    }
    char v[256];
    const char *p = v;
    bool ok = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
    size_t n = ok ? strlen(v) : 0;
    while (ok && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    ok = ok && n > 0 && strspn(p, "0123456789") >= n;
    if (!ok) {
        gw_metrics_error("invalid_content_length");
        return gw_refuse_now(wsi, 400, "invalid_content_length",
                          "Content-Length must be one number of bytes (decimal digits, not negative)", NULL, NULL);
    }
    while (n > 1 && *p == '0') p++, n--;
    unsigned long long len = 0;
    for (size_t i = 0; i < n && i < 19; i++) len = len * 10 + (unsigned)(p[i] - '0');
    if (n > 18 || len > (unsigned long long)s->cfg.max_message_bytes) {
        gw_metrics_error("message_too_large");
        char msg[200];
        snprintf(msg, sizeof msg, "the body (Content-Length %.*s%s) is over server.max_message_bytes (%d bytes)",
                 n > 24 ? 24 : (int)n, p, n > 24 ? "..." : "", s->cfg.max_message_bytes);
        gw_refuse_now(wsi, 413, "message_too_large", msg, NULL, NULL);
        /* closing now, with the client still sending, would reset the
         * connection (RST) and it may never read the 413: a body up to 4x
         * the limit is read and dropped first (HTTP_BODY ignores an
         * unlinked connection), then the connection closes */
        if (n > 18 || len > 4ull * (unsigned long long)s->cfg.max_message_bytes) return -1;
        c->kind = 0, c->status = 0; /* not linked: HTTP_BODY drops what arrives */
        c->rx_too_big = true;      /* BODY_COMPLETION closes it */
        return 1;
    }
    return 0;
}

/* The request line's version (RFC 9110 2.5): lws serves anything it does
 * not know as HTTP/1.0. HTTP/1.x is served; another major version is 505,
 * no version or a malformed one 400. Returns -1 after answering, else 0. */
int gw_refuse_bad_version(struct lws *wsi) {
    if (lws_get_network_wsi(wsi) != wsi) return 0; /* a stream of an HTTP/2 connection (TLS, ALPN h2) */
    char v[32] = "";
    int n = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP);
    if (n == 8 && !strncmp(v, "HTTP/1.", 7) && v[7] >= '0' && v[7] <= '9') return 0;
    bool other = n == 8 && !strncmp(v, "HTTP/", 5) && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
                 v[7] <= '9';
    gw_metrics_error(other ? "http_version_not_supported" : "bad_request_line");
    if (other)
        return gw_refuse_now(wsi, 505, "http_version_not_supported", "this server speaks HTTP/1.1 (and 1.0)", NULL, NULL);
    return gw_refuse_now(wsi, 400, "bad_request_line", "the request line must end with the version, e.g. HTTP/1.1", NULL,
                      NULL);
}

/* Counts accepted TCP connections (any callback's WSI_DESTROY calls this). */
void gw_count_connection(struct lws *wsi, int reason) {
    gw_server *s = gw_server_of(wsi);
    if (reason == LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED) {
        lws_set_opaque_user_data(wsi, &accepted_marker);
        s->n_tcp++;
    } else if (reason == LWS_CALLBACK_WSI_DESTROY && lws_get_opaque_user_data(wsi) == &accepted_marker) {
        lws_set_opaque_user_data(wsi, NULL);
        s->n_tcp--;
    }
}

/* WebSocket upgrade filter: the path must match the subprotocol's and the
 * origin must be allowed. Returns 0 to accept. */
int gw_ws_filter(struct lws *wsi, const char *path) {
    char uri[128] = "";
    lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
    if (strcmp(uri, path) != 0) return 1;
    return gw_origin_allowed(wsi) ? 0 : 1;
}

/* Same host (the Origin's host:port equals the Host header) or listed in
 * allowed_origins; no Origin header (non-browser clients) is allowed. */
int gw_origin_allowed(struct lws *wsi) {
    gw_server *s = gw_server_of(wsi);
    char origin[256] = "", host[256] = "";
    if (lws_hdr_copy(wsi, origin, sizeof(origin), WSI_TOKEN_ORIGIN) <= 0) return 1;
    lws_hdr_copy(wsi, host, sizeof(host), WSI_TOKEN_HOST);
    const char *o = strstr(origin, "://");
    o = o ? o + 3 : origin;
    if (host[0] && !strcmp(o, host)) return 1;
    const char *list = s->cfg.allowed_origins;
    size_t ol = strlen(origin);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ') n--;
        if ((n == ol && !strncmp(p, origin, n)) || (n == 1 && *p == '*')) return 1;
        p += strcspn(p, ",");
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}
