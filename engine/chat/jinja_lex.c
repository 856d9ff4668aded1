/* jinja_lex.c — Jinja source -> tokens, with whitespace control as jinja2's
 * lexer applies it under trim_blocks and lstrip_blocks: "-" strips all
 * whitespace on that side, "+" turns lstrip/trim off, lstrip removes the
 * spaces before a block/comment tag that starts a line, trim removes the
 * newline right after a block/comment tag. Comments vanish; one trailing
 * newline of the source is dropped; line ends become "\n". */
#include "engine/chat/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    jarena *a;
    jtok *v;
    int n, cap;
} tokv;

static jtok *push(tokv *t, jtok_kind k, int line) {
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 256;
        jtok *nv = ja_alloc(t->a, sizeof(jtok) * (size_t)cap);
        if (t->n) memcpy(nv, t->v, sizeof(jtok) * (size_t)t->n);
        t->v = nv;
        t->cap = cap;
    }
    jtok *x = &t->v[t->n++];
    x->kind = (uint8_t)k;
    x->line = line;
    return x;
}

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

static size_t utf8_enc(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) { o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63)); o[2] = (char)(0x80 | (cp & 63)); return 3; }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 63)); o[2] = (char)(0x80 | (cp >> 6 & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python's unicode-escape decoding of a string literal's body. */
static size_t unescape(const char *s, size_t n, char *o) {
    size_t w = 0;
    for (size_t k = 0; k < n; k++) {
        if (s[k] != '\\' || k + 1 >= n) { o[w++] = s[k]; continue; }
        char e = s[++k];
        int digits = 0;
        switch (e) {
        case '\n': break;
        case '\\': o[w++] = '\\'; break;
        case '\'': o[w++] = '\''; break;
        case '"': o[w++] = '"'; break;
        case 'n': o[w++] = '\n'; break;
        case 't': o[w++] = '\t'; break;
        case 'r': o[w++] = '\r'; break;
        case 'b': o[w++] = '\b'; break;
        case 'f': o[w++] = '\f'; break;
        case 'v': o[w++] = '\v'; break;
        case 'a': o[w++] = '\a'; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                unsigned v = 0;
                int m = 0;
                while (m < 3 && k < n && s[k] >= '0' && s[k] <= '7') v = v * 8 + (unsigned)(s[k++] - '0'), m++;
                k--;
                w += utf8_enc(o + w, v);
            } else {
                o[w++] = '\\';
                o[w++] = e;
            }
        }
        if (digits) {
            unsigned v = 0;
            int m = 0;
            while (m < digits && k + 1 < n && hexval(s[k + 1]) >= 0) v = v * 16 + (unsigned)hexval(s[++k]), m++;
            if (m == digits) w += utf8_enc(o + w, v);
            else { o[w++] = '\\'; o[w++] = e; }
        }
    }
    return w;
}

static int fail(char *err, size_t errlen, int line, const char *msg) {
    snprintf(err, errlen, "line %d: %s", line, msg);
    return -1;
}

/* Tokens inside a tag from src[*pos], up to its end marker ("%}" or "}}"),
 * which is consumed; strip_after and no_trim say how it ended. */
static int lex_tag(tokv *t, const char *src, size_t len, size_t *pos, int *line, bool block, bool *strip_after,
                   bool *no_trim, char *err, size_t errlen) {
    size_t i = *pos;
    int depth = 0;
    const char end = block ? '%' : '}';
    for (;;) {
        while (i < len && ws(src[i])) {
            if (src[i] == '\n') (*line)++;
            i++;
        }
        if (i >= len) return fail(err, errlen, *line, block ? "unexpected end of template: unclosed '{%'" : "unexpected end of template: unclosed '{{'");
        char c = src[i];
        if (depth == 0) {
            if ((c == '-' || c == '+') && i + 2 < len && src[i + 1] == end && src[i + 2] == '}') {
                *strip_after = c == '-';
                *no_trim = c == '+';
                *pos = i + 3;
                return 0;
            }
            if (c == end && i + 1 < len && src[i + 1] == '}') {
                *strip_after = false;
                *no_trim = false;
                *pos = i + 2;
                return 0;
            }
        }
        if (name_start(c)) {
            size_t st = i;
            while (i < len && name_char(src[i])) i++;
            jtok *x = push(t, JT_NAME, *line);
            x->s = ja_strndup(t->a, src + st, i - st);
            x->n = i - st;
            continue;
        }
        if (c >= '0' && c <= '9') {
            size_t st = i;
            bool fl = false;
            while (i < len && ((src[i] >= '0' && src[i] <= '9') || src[i] == '_')) i++;
            if (i + 1 < len && src[i] == '.' && src[i + 1] >= '0' && src[i + 1] <= '9') {
                fl = true;
                i++;
                while (i < len && ((src[i] >= '0' && src[i] <= '9') || src[i] == '_')) i++;
            }
            if (i < len && (src[i] == 'e' || src[i] == 'E')) {
                size_t j = i + 1;
                if (j < len && (src[j] == '+' || src[j] == '-')) j++;
                if (j < len && src[j] >= '0' && src[j] <= '9') {
                    fl = true;
                    i = j;
                    while (i < len && src[i] >= '0' && src[i] <= '9') i++;
                }
            }
            char buf[64];
            size_t m = 0;
            for (size_t k = st; k < i && m < sizeof buf - 1; k++)
                if (src[k] != '_') buf[m++] = src[k];
            buf[m] = '\0';
            jtok *x = push(t, fl ? JT_FLOAT : JT_INT, *line);
            if (fl) x->f = strtod(buf, NULL);
            else x->i = strtoll(buf, NULL, 10);
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t st = ++i;
            int l0 = *line;
            while (i < len && src[i] != c) {
                if (src[i] == '\\' && i + 1 < len) i++;
                if (src[i] == '\n') (*line)++;
                i++;
            }
            if (i >= len) return fail(err, errlen, l0, "unterminated string");
            char *o = ja_alloc(t->a, (i - st) * 4 + 1);
            size_t w = unescape(src + st, i - st, o);
            jtok *x = push(t, JT_STRING, l0);
            x->s = o;
            x->n = w;
            i++;
            continue;
        }
        static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
        jtok *x = NULL;
        for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
            if (i + 1 < len && src[i] == ops2[k][0] && src[i + 1] == ops2[k][1]) {
                x = push(t, JT_OP, *line);
                x->s = ops2[k];
                x->n = 2;
                i += 2;
                break;
            }
        if (x) continue;
        if (strchr("+-*/%~<>=()[]{},.:|", c)) {
            if (c == '(' || c == '[' || c == '{') depth++;
            if (c == ')' || c == ']' || c == '}') depth--;
            x = push(t, JT_OP, *line);
            x->s = ja_strndup(t->a, &src[i], 1);
            x->n = 1;
            i++;
            continue;
        }
        char msg[64];
        snprintf(msg, sizeof msg, "unexpected character '%c'", c);
        return fail(err, errlen, *line, msg);
    }
}

int jinja_lex(jarena *a, const char *src0, size_t len0, jtok **out, char *err, size_t errlen) {
    /* normalise line ends, drop one trailing newline */
    char *src = ja_alloc(a, len0 + 1);
    size_t len = 0;
    for (size_t k = 0; k < len0; k++) {
        if (src0[k] == '\r') {
            src[len++] = '\n';
            if (k + 1 < len0 && src0[k + 1] == '\n') k++;
        } else src[len++] = src0[k];
    }
    if (len && src[len - 1] == '\n') len--;
    src[len] = '\0';

    tokv t = {.a = a};
    size_t pos = 0;
    int line = 1;
    bool line_starting = true;
    while (pos <= len) {
        size_t i = pos;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        for (; i + 1 < len; i++)
            if (src[i] == '{' && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
                kind = src[i + 1] == '{' ? 1 : src[i + 1] == '%' ? 2 : 3;
                break;
            }
        if (!kind) i = len;
        size_t tend = i; /* text is src[pos..tend) */
        char sign = kind && i + 2 < len ? src[i + 2] : 0;
        if (kind && sign == '-') {
            while (tend > pos && ws(src[tend - 1])) tend--;
        } else if (kind >= 2 && sign != '+') {
            size_t l = tend;
            while (l > pos && src[l - 1] != '\n') l--;
            bool at_line_start = l > pos || line_starting;
            bool all_ws = l < tend;
            for (size_t k = l; k < tend; k++)
                if (!ws(src[k])) all_ws = false;
            if (at_line_start && all_ws) tend = l;
        }
        int text_line = line;
        for (size_t k = pos; k < i; k++)
            if (src[k] == '\n') line++;
        if (tend > pos) {
            jtok *x = push(&t, JT_TEXT, text_line);
            x->s = ja_strndup(a, src + pos, tend - pos);
            x->n = tend - pos;
        }
        if (!kind) break;
        size_t p = i + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
        bool strip_after = false, no_trim = false;
        if (kind == 3) {
            size_t e = p;
            while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= len) return fail(err, errlen, line, "unclosed comment");
            for (size_t k = p; k < e; k++)
                if (src[k] == '\n') line++;
            strip_after = e > p && src[e - 1] == '-';
            no_trim = e > p && src[e - 1] == '+';
            p = e + 2;
        } else {
            /* {% raw %} ... {% endraw %}: the body is text */
            size_t q = p;
            while (q < len && ws(src[q])) q++;
            if (kind == 2 && len - q >= 3 && !strncmp(src + q, "raw", 3) && !name_char(src[q + 3])) {
                const char *e = strstr(src + q, "endraw");
                const char *close = strstr(src + q, "%}");
                if (!e || !close) return fail(err, errlen, line, "unclosed raw block");
                size_t body = (size_t)(close - src) + 2;
                if (close > src + q && close[-1] == '-') while (body < len && ws(src[body])) body++;
                size_t bend = (size_t)(e - src);
                while (bend > body && src[bend - 1] != '{') bend--;
                size_t tagstart = bend - 1;
                bool minus = src[tagstart + 2] == '-';
                size_t tb = tagstart;
                if (minus) while (tb > body && ws(src[tb - 1])) tb--;
                if (tb > body) {
                    jtok *x = push(&t, JT_TEXT, line);
                    x->s = ja_strndup(a, src + body, tb - body);
                    x->n = tb - body;
                }
                const char *c2 = strstr(e, "%}");
                if (!c2) return fail(err, errlen, line, "unclosed endraw");
                for (size_t k = p; k < (size_t)(c2 - src); k++)
                    if (src[k] == '\n') line++;
                strip_after = c2[-1] == '-';
                p = (size_t)(c2 - src) + 2;
            } else {
                push(&t, kind == 1 ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, line);
                if (lex_tag(&t, src, len, &p, &line, kind == 2, &strip_after, &no_trim, err, errlen) < 0) return -1;
                push(&t, kind == 1 ? JT_VAR_END : JT_BLOCK_END, line);
            }
        }
        line_starting = false;
        if (strip_after) {
            while (p < len && ws(src[p])) {
                if (src[p] == '\n') line++;
                line_starting = src[p] == '\n';
                p++;
            }
        } else if (kind >= 2 && !no_trim && p < len && src[p] == '\n') {
            p++;
            line++;
            line_starting = true;
        }
        pos = p;
        if (pos >= len) break;
    }
    push(&t, JT_EOF, line);
    *out = t.v;
    return t.n;
}
