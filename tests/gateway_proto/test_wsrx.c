/* test_wsrx.c — the WebSocket message assembler and the close-payload check
 * (gateway/wsrx.h): the shapes that crashed the server (an empty first
 * message, an empty fragment plus an empty continuation), fragments, the size
 * limit, binary frames, reuse after each message, and RFC 6455 close codes. */
#include "gateway/wsrx.h"
#include "tests/testutil.h"

#include <string.h>

int main(void) {
    ws_rx rx;
    ws_rx_init(&rx, 16);

    /* an empty text message as the very first message: an empty string */
    CHECK(ws_rx_feed(&rx, NULL, 0, false, true) == WS_RX_TEXT);
    CHECK(rx.buf != NULL && rx.len == 0 && rx.buf[0] == 0);
    ws_rx_reset(&rx);
    ws_rx_free(&rx);

    /* an empty fragment, then an empty continuation, on a fresh assembler */
    ws_rx_init(&rx, 16);
    CHECK(ws_rx_feed(&rx, NULL, 0, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, NULL, 0, false, true) == WS_RX_TEXT);
    CHECK(rx.buf != NULL && rx.len == 0 && rx.buf[0] == 0);
    ws_rx_reset(&rx);

    /* fragments join, NUL-terminated */
    CHECK(ws_rx_feed(&rx, "{\"a\"", 4, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, "", 0, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, ":1}", 3, false, true) == WS_RX_TEXT);
    CHECK(rx.len == 7 && !strcmp(rx.buf, "{\"a\":1}"));
    ws_rx_reset(&rx);

    /* exactly the limit passes; one byte more is refused, and the next
     * message is assembled from scratch */
    CHECK(ws_rx_feed(&rx, "0123456789abcdef", 16, false, true) == WS_RX_TEXT && rx.len == 16);
    ws_rx_reset(&rx);
    CHECK(ws_rx_feed(&rx, "0123456789", 10, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, "abcdefg", 7, false, true) == WS_RX_TOO_BIG);
    ws_rx_reset(&rx);
    CHECK(ws_rx_feed(&rx, "ok", 2, false, true) == WS_RX_TEXT && !strcmp(rx.buf, "ok"));
    ws_rx_reset(&rx);
    /* a huge chunk length cannot wrap the size check */
    CHECK(ws_rx_feed(&rx, "x", 1, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, "y", (size_t)-1, false, true) == WS_RX_TOO_BIG);
    ws_rx_reset(&rx);

    /* binary, in any frame of the message */
    CHECK(ws_rx_feed(&rx, "ab", 2, false, false) == WS_RX_MORE);
    CHECK(ws_rx_feed(&rx, "\x01", 1, true, true) == WS_RX_BINARY);
    ws_rx_reset(&rx);
    CHECK(ws_rx_feed(&rx, NULL, 0, true, true) == WS_RX_BINARY);
    ws_rx_reset(&rx);
    ws_rx_free(&rx);

    /* close payloads */
    CHECK(ws_close_payload_ok(NULL, 0));
    CHECK(!ws_close_payload_ok("\x03", 1));
    CHECK(ws_close_payload_ok("\x03\xe8", 2));             /* 1000 */
    CHECK(ws_close_payload_ok("\x03\xe8" "bye", 5));
    CHECK(ws_close_payload_ok("\x0f\xa0", 2));             /* 4000: application */
    CHECK(!ws_close_payload_ok("\x03\xed", 2));            /* 1005: never sent on the wire */
    CHECK(!ws_close_payload_ok("\x03\xee", 2));            /* 1006 */
    CHECK(!ws_close_payload_ok("\x03\xe7", 2));            /* 999 */
    CHECK(!ws_close_payload_ok("\x13\x88", 2));            /* 5000 */
    CHECK(!ws_close_payload_ok("\x03\xe8\xff", 3));        /* bad UTF-8 reason */
    CHECK(!ws_close_payload_ok("\x03\xe8\xed\xa0\x80", 5)); /* a surrogate */
    CHECK(ws_close_payload_ok("\x03\xe8\xc3\xa9", 4));     /* é */
    TEST_DONE();
}
