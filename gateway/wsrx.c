/* wsrx.c — WebSocket message assembly (see wsrx.h). */
#include "gateway/wsrx.h"

#include <stdlib.h>
#include <string.h>

void ws_rx_init(ws_rx *rx, size_t limit) {
    memset(rx, 0, sizeof(*rx));
    rx->limit = limit;
}

/* Room for need bytes plus the NUL. */
static int reserve(ws_rx *rx, size_t need) {
    if (rx->buf && need <= rx->cap) return 0;
    size_t cap = rx->cap ? rx->cap : 256;
    while (cap < need) cap *= 2;
    char *nb = realloc(rx->buf, cap + 1);
    if (!nb) return -1;
    rx->buf = nb;
    rx->cap = cap;
    return 0;
}

ws_rx_status ws_rx_feed(ws_rx *rx, const void *in, size_t len, bool binary, bool final) {
    if (binary) rx->binary = true;
    if (!rx->too_big && !rx->binary) {
        if (len > rx->limit || rx->len > rx->limit - len) {
            rx->too_big = true;
        } else {
            if (reserve(rx, rx->len + len)) return WS_RX_NOMEM;
            if (len) memcpy(rx->buf + rx->len, in, len);
            rx->len += len;
        }
    }
    if (!final) return WS_RX_MORE;
    if (rx->binary) return WS_RX_BINARY;
    if (rx->too_big) return WS_RX_TOO_BIG;
    if (reserve(rx, rx->len)) return WS_RX_NOMEM; /* an empty message still gets a buffer */
    rx->buf[rx->len] = 0;
    return WS_RX_TEXT;
}

void ws_rx_reset(ws_rx *rx) {
    rx->len = 0;
    rx->binary = rx->too_big = false;
}

void ws_rx_free(ws_rx *rx) {
    free(rx->buf);
    size_t limit = rx->limit;
    ws_rx_init(rx, limit);
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        unsigned cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        static const unsigned min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_of[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k;
    }
    return true;
}

bool ws_close_payload_ok(const void *payload, size_t len) {
    const unsigned char *p = payload;
    if (len == 0) return true;
    if (len == 1 || len > 125) return false;
    unsigned code = (unsigned)p[0] << 8 | p[1];
    bool code_ok = (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) || (code >= 3000 && code <= 4999);
    return code_ok && utf8_ok(p + 2, len - 2);
}
