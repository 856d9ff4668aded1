/* wsrx.h — assembling one WebSocket message from the fragments libwebsockets
 * hands the RECEIVE callback (socket-free, so the whole path from fragments to
 * a complete message is unit-tested and fuzzed on its own).
 *
 * A message is the payload of one data frame, or of a first frame and its
 * continuations; lws delivers each frame's payload in one or more chunks, any
 * of which may be empty (a zero-length text frame, an empty continuation).
 * Control frames (ping, pong, close) never reach the assembler. The buffer is
 * always allocated and NUL-terminated when a message completes, so an empty
 * message is an empty string, never a NULL pointer. */
#ifndef SPECD_GW_WSRX_H
#define SPECD_GW_WSRX_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *buf;            /* the message so far; NUL-terminated on WS_RX_TEXT */
    size_t len, cap;      /* cap excludes the byte kept for the NUL */
    size_t limit;         /* largest message accepted (bytes) */
    bool binary;          /* some frame of this message was binary */
    bool too_big;         /* the message passed limit: its bytes are dropped */
} ws_rx;

typedef enum {
    WS_RX_MORE = 0,       /* the message goes on */
    WS_RX_TEXT = 1,       /* complete text message in buf[0..len) (NUL at buf[len]) */
    WS_RX_BINARY = 2,     /* complete, but binary: refuse it */
    WS_RX_TOO_BIG = 3,    /* complete, but larger than limit: refuse it */
    WS_RX_NOMEM = -1,     /* allocation failed: close the connection */
} ws_rx_status;

void ws_rx_init(ws_rx *rx, size_t limit);
/* Appends one chunk (len may be 0, in may be NULL when len is 0). binary: the
 * frame is binary; final: this chunk ends the message (last chunk of a FIN
 * frame). On any status but WS_RX_MORE the caller handles the message and
 * calls ws_rx_reset before the next chunk. */
ws_rx_status ws_rx_feed(ws_rx *rx, const void *in, size_t len, bool binary, bool final);
void ws_rx_reset(ws_rx *rx);   /* forgets the message, keeps the buffer */
/* RFC 6455 5.5.1 / 7.4: a close frame's payload is empty, or a 2-byte status
 * code a peer may send (1000-1003, 1007-1011, 3000-4999) followed by UTF-8.
 * False: fail the connection instead of echoing the close. */
bool ws_close_payload_ok(const void *payload, size_t len);
void ws_rx_free(ws_rx *rx);

#endif
