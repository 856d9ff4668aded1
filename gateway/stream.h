/* stream.h — the WebSocket protocol specd.v1 (/v1/stream), one of the
 * gateway's protocol files beside http.c and monitor.c. Loop thread only. */
#ifndef SPECD_GATEWAY_STREAM_H
#define SPECD_GATEWAY_STREAM_H

#include <libwebsockets.h>

struct gw_server; /* gw.h */

/* The lws callback of "specd.v1". */
int gw_cb_stream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);
/* Moves engine events into every specd.v1 connection's queue (backpressure:
 * up to GW_PUMP_HIGH_WATER queued bytes each). */
void gw_stream_pump_all(struct gw_server *s);
/* Closes specd.v1 connections idle for server.idle_timeout_s (once a second). */
void gw_stream_close_idle(struct gw_server *s);

#endif
