/* access.h — who may use the API: API keys and the paths exempt from them.
 *
 * Keys come from server.api_keys (comma-separated), server.api_key_file (one
 * key per line, # comments) and `serve --api-key` (repeatable); with none,
 * the API is open as before. A request proves a key with
 * "Authorization: Bearer KEY"; a WebSocket may instead offer the subprotocol
 * "specd.key.KEY" beside specd.v1 / specd.monitor.v1 (browsers cannot set
 * headers on a WebSocket). Paths in server.auth_exempt (default "/healthz,
 * /health,/metrics") and the static pages need no key; every API path does
 * (/v1/... paths, /tokenize, /detokenize, /apply-template, /props, /api/stats);
 * the admin endpoints keep their own admin token. Keys are compared in constant time.
 * Reloaded with the policy (SIGHUP, /admin/reload). Loop thread only. */
#ifndef SPECD_GATEWAY_ACCESS_H
#define SPECD_GATEWAY_ACCESS_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>

#define GW_MAX_KEYS 64
#define GW_KEY_MAX 128

typedef struct {
    int n;
    char keys[GW_MAX_KEYS][GW_KEY_MAX];
    char exempt[256];          /* comma-separated paths */
} gw_access;

/* Fills a from the comma-separated keys, the key file (may be NULL or "")
 * and extra (a NUL-separated, double-NUL-terminated list from the command
 * line; may be NULL). 0, or -1 with a message (unreadable file, a key with
 * spaces or over GW_KEY_MAX - 1 bytes, more than GW_MAX_KEYS keys). */
int gw_access_load(gw_access *a, const char *keys, const char *key_file, const char *extra, const char *exempt,
                   char *err, size_t errlen);

/* Whether path needs a key at all (keys configured and path an API path not
 * in the exempt list). */
bool gw_access_required(const gw_access *a, const char *path);

/* Whether the request on wsi carries a configured key (Authorization:
 * Bearer, or a "specd.key.KEY" subprotocol offer). */
bool gw_access_has_key(const gw_access *a, struct lws *wsi);

/* CORS (server.cors_origins, comma-separated, "*" = any; the WebSocket list
 * server.allowed_origins counts too): the request's Origin when a page of it
 * may read our answers, copied into origin (else false: no Origin header,
 * or one not listed). Same-host pages need no CORS. */
bool gw_cors_origin(const char *cors, const char *allowed_origins, struct lws *wsi, char *origin, size_t n);

/* The 401 refusal's message: which way to send a key. */
#define GW_ACCESS_MSG "missing or invalid API key: send \"Authorization: Bearer <key>\" (a WebSocket may offer the subprotocol \"specd.key.<key>\")"

#endif
