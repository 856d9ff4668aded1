/* server.h — the specd gateway: ONE libwebsockets event-loop thread serving the
 * WebSocket streaming protocol (/v1/stream, subprotocol specd.v1), the
 * OpenAI-compatible HTTP API (with server-sent events), /metrics, /healthz and
 * the static web pages, in front of the engine thread.
 *
 * Threading: gw_run runs the loop on the calling thread. Only that thread
 * touches connections and writes, and only from WRITEABLE callbacks; the
 * engine wakes it with lws_cancel_service (its notify callback). */
#ifndef SPECD_GW_SERVER_H
#define SPECD_GW_SERVER_H

#include "engine/engine.h"
#include "gateway/server_config.h"

#include <stddef.h>


/* Serves until SIGINT or SIGTERM, then stops accepting, lets running requests
 * finish up to grace_ms, cancels the rest and returns 0 (or -1 when the
 * server cannot start, with err filled). Prints one line with the URL when
 * ready. e must outlive the call. */
int gw_run(engine *e, const gw_config *cfg, char *err, size_t errlen);

#endif
