/* tok_decode.c — ids back to text: pieces, the space-prefix rule, special
 * tokens on request, and the streaming decoder that never splits a UTF-8
 * character (held bytes, U+FFFD for what cannot complete). */
#include "engine/tokenizer/tok_internal.h"

/* ---- decode -------------------------------------------------------------- */

/* The bytes id contributes under flags. Sets *is_special when the rendered
 * token is one tok_encode matches whole (so a space prefix follows it). */
static inline void render(const tokenizer *t, int32_t id, unsigned flags, const char **p, size_t *n,
                          bool *is_special) {
    uint8_t ty = t->type[id];
    *is_special = false;
    if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN) && (flags & TOK_DECODE_SPECIAL)) {
        *p = t->text + t->off[id];
        *n = t->len[id];
        *is_special = true;
        return;
    }
    *p = t->dtext + t->doff[id];
    *n = t->dlen[id];
    *is_special = ty == TOK_TYPE_USER_DEFINED;
}

int tok_piece(const tokenizer *t, int32_t id, char *buf, size_t n) {
    check_id(t, id, "tok_piece");
    size_t len = t->dlen[id];
    if (len > n) return -(int)len;
    memcpy(buf, t->dtext + t->doff[id], len);
    return (int)len;
}

/* Applies the space-prefix rule to one rendered token; advances p and n. */
static inline void apply_strip(const tokenizer *t, bool *strip, bool is_special, const char **p, size_t *n) {
    if (is_special) {
        /* matched whole by the encoder: never stripped, and the text run after
         * it got a space prefix */
        *strip = t->add_space_prefix;
        return;
    }
    if (*n == 0 || !*strip) return;
    *strip = false;
    if ((*p)[0] == ' ') { (*p)++; (*n)--; }
}

int tok_decode(const tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap, unsigned flags) {
    bool strip = t->add_space_prefix && !(flags & TOK_DECODE_CONTINUATION);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        check_id(t, ids[i], "tok_decode");
        const char *p;
        size_t len;
        bool sp;
        render(t, ids[i], flags, &p, &len, &sp);
        apply_strip(t, &strip, sp, &p, &len);
        if (len > 0 && total + len <= cap) memcpy(buf + total, p, len);
        total += len;
    }
    if (total > (size_t)0x7fffffff) TOK_ABORT("tok_decode: %zu bytes of text", total);
    return total <= cap ? (int)total : -(int)total;
}

/* ---- streaming decode ------------------------------------------------------ */

void tok_stream_init(tok_stream *s, const tokenizer *t, unsigned flags) {
    memset(s, 0, sizeof *s);
    s->flags = flags;
    s->strip = t->add_space_prefix && !(flags & TOK_DECODE_CONTINUATION);
}

size_t tok_stream_max_out(const tokenizer *t) {
    size_t piece = t->max_len > t->max_dlen ? t->max_len : t->max_dlen;
    if (piece < 3) piece = 3;
    /* every byte may turn into U+FFFD, plus the replacement of held bytes */
    return 3 * piece + 3;
}

static inline size_t put_fffd(char *out, size_t o) {
    out[o] = '\xef';
    out[o + 1] = '\xbf';
    out[o + 2] = '\xbd';
    return o + 3;
}

/* Is c a valid byte at position npend of a sequence starting with lead? */
static inline bool utf8_cont_ok(uint8_t lead, uint8_t npend, uint8_t c) {
    if (npend == 1) {
        switch (lead) {
        case 0xE0: return c >= 0xA0 && c <= 0xBF;
        case 0xED: return c >= 0x80 && c <= 0x9F;
        case 0xF0: return c >= 0x90 && c <= 0xBF;
        case 0xF4: return c >= 0x80 && c <= 0x8F;
        default: break;
        }
    }
    return c >= 0x80 && c <= 0xBF;
}

int tok_stream_feed(tok_stream *s, const tokenizer *t, int32_t id, char *out, size_t cap) {
    check_id(t, id, "tok_stream_feed");
    size_t need_cap = tok_stream_max_out(t);
    if (cap < need_cap) return -(int)need_cap;
    const char *p;
    size_t len;
    bool sp;
    render(t, id, s->flags, &p, &len, &sp);
    apply_strip(t, &s->strip, sp, &p, &len);

    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)p[i];
        if (s->need) {
            if (utf8_cont_ok(s->pend[0], s->npend, c)) {
                s->pend[s->npend++] = c;
                if (s->npend == s->need) {
                    memcpy(out + o, s->pend, s->npend);
                    o += s->npend;
                    s->npend = s->need = 0;
                }
                continue;
            }
            /* the held prefix can no longer complete: one U+FFFD for it,
             * then c starts afresh */
            o = put_fffd(out, o);
            s->npend = s->need = 0;
        }
        if (c < 0x80) out[o++] = (char)c;
        else if (c >= 0xC2 && c <= 0xDF) { s->pend[0] = c; s->npend = 1; s->need = 2; }
        else if (c >= 0xE0 && c <= 0xEF) { s->pend[0] = c; s->npend = 1; s->need = 3; }
        else if (c >= 0xF0 && c <= 0xF4) { s->pend[0] = c; s->npend = 1; s->need = 4; }
        else o = put_fffd(out, o);
    }
    return (int)o;
}

int tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    if (!s->need) return 0;
    if (cap < 3) return -3;
    s->npend = s->need = 0;
    put_fffd(out, 0);
    return 3;
}
