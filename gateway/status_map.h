/* status_map.h — the ONE table from an engine failure kind (engine_status,
 * engine/errkind.h) to what each client protocol says: the HTTP status,
 * OpenAI error code and type, and the specd.v1 WebSocket error code. Used by
 * the OpenAI/HTTP path (http.c) and the WebSocket path (stream.c) for
 * engine_submit refusals and error events alike, and by the gateway's own
 * refusals of the same kinds (draining, its concurrent-request limit).
 *
 * Socket-free and stateless; any thread. */
#ifndef SPECD_GATEWAY_STATUS_MAP_H
#define SPECD_GATEWAY_STATUS_MAP_H

#include "engine/engine.h"

typedef struct {
    engine_status status;
    int http_status;       /* HTTP status of the response (200 for ENGINE_OK) */
    const char *oa_code;   /* OpenAI error `code` (and the metrics label of HTTP errors) */
    const char *oa_type;   /* OpenAI error `type` */
    const char *ws_code;   /* specd.v1 error frame `code` (and the metrics label of WebSocket errors) */
} gw_status_row;

/* The row of st; a value outside the enum gets ENGINE_ERR_BACKEND's row (a
 * server error). Never NULL; the strings are static. */
const gw_status_row *gw_status_lookup(engine_status st);

#endif
