/* fuzz_wsrx.c — libFuzzer target for the WebSocket receive path below the
 * sockets: the input is a client's byte stream of RFC 6455 frames (decoded
 * here the way the server's frame parser does: FIN, opcode, mask, 7/16/64-bit
 * lengths), each frame's payload handed to the message assembler in chunks of
 * fuzzer-chosen sizes (empty chunks included), control frames to the close
 * check, and every complete text message to gw_parse as /v1/stream does.
 * Invariants: a complete message is never a NULL buffer, is NUL-terminated,
 * equals the concatenation of its frames' payloads, and is no larger than
 * the limit. Crashes via __builtin_trap. */
#include "gateway/protocol.h"
#include "gateway/wsrx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)
#define LIMIT 4096

typedef struct { const uint8_t *p; size_t n; } cursor;

static int take(cursor *c, size_t k, const uint8_t **out) {
    if (c->n < k) return -1;
    *out = c->p;
    c->p += k, c->n -= k;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cursor cur = {data, size};
    ws_rx rx;
    ws_rx_init(&rx, LIMIT);
    gw_limits lim = gw_limits_default();
    lim.max_message_bytes = LIMIT;
    /* the harness's own copy of the message, to check the assembler */
    static uint8_t want[LIMIT + 1];
    size_t want_len = 0;
    bool in_msg = false, want_big = false, want_bin = false;
    uint8_t payload[LIMIT + 256];
    while (cur.n >= 2) {
        const uint8_t *h;
        take(&cur, 2, &h);
        bool fin = h[0] & 0x80;
        int op = h[0] & 0x0f;
        bool masked = h[1] & 0x80;
        uint64_t len = h[1] & 0x7f;
        const uint8_t *x;
        if (len == 126) {
            if (take(&cur, 2, &x)) break;
            len = (uint64_t)x[0] << 8 | x[1];
        } else if (len == 127) {
            if (take(&cur, 8, &x)) break;
            len = 0;
            for (int i = 0; i < 8; i++) len = len << 8 | x[i];
        }
        uint8_t key[4] = {0, 0, 0, 0};
        if (masked) {
            if (take(&cur, 4, &x)) break;
            memcpy(key, x, 4);
        }
        if (len > sizeof(payload) || len > cur.n) break; /* truncated stream: the connection ends */
        take(&cur, (size_t)len, &x);
        for (size_t i = 0; i < len; i++) payload[i] = x[i] ^ key[i & 3];
        if (op & 8) { /* control frames: never fragmented, never assembled */
            if (op == 8) {
                (void)ws_close_payload_ok(payload, (size_t)len);
                break; /* close: nothing after it is read */
            }
            continue;
        }
        if (op != 0 && op != 1 && op != 2) break;   /* reserved opcode: the parser fails the connection */
        if ((op == 0) != in_msg) break;             /* continuation without a start, or a start inside one */
        if (op != 0) want_len = 0, want_big = false, want_bin = op == 2;
        if (want_len + len > LIMIT) want_big = true;
        else memcpy(want + want_len, payload, (size_t)len), want_len += (size_t)len;
        in_msg = !fin;
        /* the payload in chunks: one size byte from the stream after each
         * frame says where to cut (0 = an empty chunk first) */
        size_t cut = len;
        if (cur.n) {
            cut = cur.p[0] % (len + 1);
            cur.p++, cur.n--;
        }
        ws_rx_status st = WS_RX_MORE;
        if (cut < len) {
            st = ws_rx_feed(&rx, payload, cut, op == 2, false);
            REQUIRE(st == WS_RX_MORE);
        }
        st = ws_rx_feed(&rx, payload + (cut < len ? cut : 0), cut < len ? (size_t)len - cut : (size_t)len, op == 2,
                        fin);
        if (!fin) {
            REQUIRE(st == WS_RX_MORE);
            continue;
        }
        if (want_bin) {
            REQUIRE(st == WS_RX_BINARY);
        } else if (want_big) {
            REQUIRE(st == WS_RX_TOO_BIG);
        } else {
            REQUIRE(st == WS_RX_TEXT);
            REQUIRE(rx.buf != NULL && rx.len == want_len && rx.buf[rx.len] == 0);
            REQUIRE(!want_len || !memcmp(rx.buf, want, want_len));
            gw_msg m;
            gw_error er;
            if (gw_parse(rx.buf, rx.len, &lim, &m, &er) == 0) gw_msg_free(&m);
        }
        ws_rx_reset(&rx);
    }
    ws_rx_free(&rx);
    return 0;
}
