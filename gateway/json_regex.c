/* json_regex.c — ECMAScript regular expression subset to GBNF over JSON
 * string content (see json_regex.h). A recursive-descent parser that writes
 * the GBNF as it reads: alternation -> ( a | b ), a quantified atom -> ( atom )
 * with the same quantifier, a class -> a GBNF class of the characters a JSON
 * string holds raw, plus the escaped forms of the others it allows. */
#include "gateway/json_regex.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_MAX_REPEAT 10000
#define RX_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t n, i;
    char *o;
    size_t on, ocap;
    bool oom, failed;
    char *err;
    size_t errlen;
    int depth;
} rx;

static void out(rx *r, const char *s, size_t n) {
    if (r->oom) return;
    if (r->on + n + 1 > r->ocap) {
        size_t c = r->ocap ? r->ocap * 2 : 256;
        while (c < r->on + n + 1) c *= 2;
        char *q = realloc(r->o, c);
        if (!q) {
            r->oom = true;
            return;
        }
        r->o = q, r->ocap = c;
    }
    memcpy(r->o + r->on, s, n);
    r->on += n;
    r->o[r->on] = 0;
}

static void outs(rx *r, const char *s) { out(r, s, strlen(s)); }

static void outf(rx *r, const char *fmt, ...) {
    char t[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    if (k > 0) out(r, t, (size_t)k < sizeof t ? (size_t)k : sizeof t - 1);
}

static bool rfail(rx *r, const char *fmt, ...) {
    if (r->failed) return false;
    r->failed = true;
    int k = snprintf(r->err, r->errlen, "'pattern' at offset %zu: ", r->i);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < r->errlen) vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- characters: how a code point appears inside a JSON string ------------- */

/* One code point c of the decoded string as GBNF (a literal of its JSON
 * form: raw, or an escape for ", \ and control characters). */
static void out_char(rx *r, uint32_t c) {
    char b[16];
    if (c == '"') outs(r, "\"\\\\\\\"\"");        /* the two bytes \" */
    else if (c == '\\') outs(r, "\"\\\\\\\\\"");  /* the two bytes \\ */
    else if (c == '\n') outs(r, "\"\\\\n\"");
    else if (c == '\t') outs(r, "\"\\\\t\"");
    else if (c == '\r') outs(r, "\"\\\\r\"");
    else if (c == '\f') outs(r, "\"\\\\f\"");
    else if (c == '\b') outs(r, "\"\\\\b\"");
    else if (c < 0x20 || c == 0x7F) snprintf(b, sizeof b, "\"\\\\u%04x\"", c), outs(r, b);
    else snprintf(b, sizeof b, "\"\\U%08X\"", c), outs(r, b);
}

/* A code point inside a GBNF class (escaped as \UHHHHHHHH). */
static void out_class_cp(rx *r, uint32_t c) { outf(r, "\\U%08X", c); }

/* ---- classes ------------------------------------------------------------------ */

typedef struct {
    uint32_t lo, hi;
} range;

typedef struct {
    range v[256];
    int n;
    bool neg;
} cset;

static bool cs_add(rx *r, cset *cs, uint32_t lo, uint32_t hi) {
    if (cs->n == 256) return rfail(r, "character class too large (256 ranges)");
    cs->v[cs->n++] = (range){lo, hi};
    return true;
}

static bool cs_has(const cset *cs, uint32_t c) {
    for (int i = 0; i < cs->n; i++)
        if (c >= cs->v[i].lo && c <= cs->v[i].hi) return true;
    return false;
}

/* \d \w \s into a set. */
static bool cs_shorthand(rx *r, cset *cs, char k) {
    if (k == 'd') return cs_add(r, cs, '0', '9');
    if (k == 'w') return cs_add(r, cs, '0', '9') && cs_add(r, cs, 'a', 'z') && cs_add(r, cs, 'A', 'Z') && cs_add(r, cs, '_', '_');
    if (k == 's')
        return cs_add(r, cs, ' ', ' ') && cs_add(r, cs, '\t', '\r') && cs_add(r, cs, 0xA0, 0xA0) &&
               cs_add(r, cs, 0xFEFF, 0xFEFF) && cs_add(r, cs, 0x2028, 0x2029);
    return rfail(r, "'\\%c' is not supported inside a class", k);
}

/* The characters a JSON string holds only escaped: " \ and U+0000..U+001F. */
static bool special(uint32_t c) { return c == '"' || c == '\\' || c < 0x20; }

/* A set as GBNF: ( [raw part] | escaped forms ). For a negated set the raw
 * part is [^set " \ controls] and the escaped forms are the specials not in
 * the set. */
static void out_set(rx *r, const cset *cs) {
    bool any = false;
    outs(r, "(");
    if (cs->neg) {
        outs(r, " [^");
        for (int i = 0; i < cs->n; i++) {
            out_class_cp(r, cs->v[i].lo);
            if (cs->v[i].hi > cs->v[i].lo) outs(r, "-"), out_class_cp(r, cs->v[i].hi);
        }
        outs(r, "\\\"\\\\\\x00-\\x1F]");
        any = true;
        for (uint32_t c = 0; c < 0x20; c++)
            if (!cs_has(cs, c)) outs(r, " | "), out_char(r, c); /* ('.' is a negated set holding the line ends) */
        if (!cs_has(cs, '"')) outs(r, " | "), out_char(r, '"');
        if (!cs_has(cs, '\\')) outs(r, " | "), out_char(r, '\\');
    } else {
        bool raw = false;
        for (int i = 0; i < cs->n; i++) {
            uint32_t lo = cs->v[i].lo, hi = cs->v[i].hi;
            /* the raw part: the range without the specials (they sit at 0x00-0x1F, '"' and '\\') */
            uint32_t a = lo < 0x20 ? 0x20 : lo;
            while (a <= hi) {
                uint32_t b = hi;
                if (a <= '"' && b >= '"') b = a == '"' ? a : '"' - 1;
                if (a <= '\\' && b >= '\\') b = a == '\\' ? a : '\\' - 1;
                if (!special(a)) {
                    if (!raw) outs(r, " ["), raw = any = true;
                    out_class_cp(r, a);
                    if (b > a) outs(r, "-"), out_class_cp(r, b);
                }
                if (b == UINT32_MAX) break;
                a = b + 1;
            }
        }
        if (raw) outs(r, "]");
        for (uint32_t c = 0; c <= '\\'; c++)
            if (special(c) && cs_has(cs, c)) outs(r, any ? " | " : " "), out_char(r, c), any = true;
        if (!any) outs(r, " [^\\x00-\\U0010FFFF]"); /* the empty class: matches nothing */
    }
    outs(r, " )");
}

/* ---- escapes -------------------------------------------------------------------- */

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reads a code point at r->i (UTF-8), or -1 for invalid UTF-8. */
static int64_t read_cp(rx *r) {
    const unsigned char *s = (const unsigned char *)r->s;
    unsigned char c = s[r->i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || r->i + (size_t)len > r->n) return -1;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) {
        if ((s[r->i + (size_t)k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[r->i + (size_t)k] & 0x3F);
    }
    r->i += (size_t)len;
    return cp;
}

/* After a backslash: a single code point escape, or -1 (with a failure) or
 * -2 for a shorthand class (its letter in *sh). */
static int64_t read_escape(rx *r, char *sh) {
    if (r->i >= r->n) return rfail(r, "a pattern cannot end with '\\'"), -1;
    char k = r->s[r->i++];
    switch (k) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'd': case 'w': case 's': case 'D': case 'W': case 'S': *sh = k; return -2;
    case 'x': {
        if (r->i + 2 > r->n || hexv(r->s[r->i]) < 0 || hexv(r->s[r->i + 1]) < 0) return rfail(r, "bad '\\x' escape"), -1;
        int v = hexv(r->s[r->i]) * 16 + hexv(r->s[r->i + 1]);
        r->i += 2;
        return v;
    }
    case 'u': {
        if (r->i + 4 > r->n) return rfail(r, "bad '\\u' escape"), -1;
        int v = 0;
        for (int j = 0; j < 4; j++) {
            int h = hexv(r->s[r->i + (size_t)j]);
            if (h < 0) return rfail(r, "bad '\\u' escape"), -1;
            v = v * 16 + h;
        }
        r->i += 4;
        return v;
    }
    case 'b': case 'B': return rfail(r, "word boundaries (\\%c) are not supported", k), -1;
    case 'p': case 'P': return rfail(r, "Unicode property escapes (\\%c) are not supported", k), -1;
    case 'k': return rfail(r, "named backreferences (\\k) are not supported"), -1;
    case 'c': return rfail(r, "control escapes (\\c) are not supported"), -1;
    default:
        if (k >= '1' && k <= '9') return rfail(r, "backreferences (\\%c) are not supported", k), -1;
        if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z')) return rfail(r, "unknown escape '\\%c'", k), -1;
        r->i--;
        int64_t cp = read_cp(r);
        return cp < 0 ? (rfail(r, "invalid UTF-8"), -1) : cp;
    }
}

/* ---- the grammar --------------------------------------------------------------- */

static bool parse_alt(rx *r);

static bool parse_class(rx *r) {
    cset cs = {.n = 0};
    if (r->i < r->n && r->s[r->i] == '^') cs.neg = true, r->i++;
    bool first = true;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        int64_t lo;
        char sh = 0;
        if (r->s[r->i] == '\\') {
            r->i++;
            if ((lo = read_escape(r, &sh)) == -1) return false;
            if (lo == -2) {
                if (sh >= 'A' && sh <= 'Z') return rfail(r, "'\\%c' inside a class is not supported", sh);
                if (!cs_shorthand(r, &cs, sh)) return false;
                continue;
            }
        } else if ((lo = read_cp(r)) < 0) {
            return rfail(r, "invalid UTF-8");
        }
        int64_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                if ((hi = read_escape(r, &sh)) == -1) return false;
                if (hi == -2) return rfail(r, "a range cannot end in '\\%c'", sh);
            } else if ((hi = read_cp(r)) < 0) {
                return rfail(r, "invalid UTF-8");
            }
            if (hi < lo) return rfail(r, "class range out of order");
        }
        if (!cs_add(r, &cs, (uint32_t)lo, (uint32_t)hi)) return false;
    }
    if (r->i >= r->n) return rfail(r, "unterminated character class");
    r->i++; /* ] */
    out_set(r, &cs);
    return true;
}

/* An atom into the output; false on failure. */
static bool parse_atom(rx *r) {
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
            else if (r->i + 1 < r->n && r->s[r->i + 1] == '<' && r->i + 2 < r->n && r->s[r->i + 2] != '=' &&
                     r->s[r->i + 2] != '!') {
                const char *gt = memchr(r->s + r->i, '>', r->n - r->i);
                if (!gt) return rfail(r, "unterminated group name");
                r->i = (size_t)(gt - r->s) + 1;
            } else {
                return rfail(r, "lookaround groups ('(?=', '(?!', '(?<=', '(?<!') are not supported");
            }
        }
        if (++r->depth > RX_MAX_DEPTH) return rfail(r, "groups nested deeper than %d", RX_MAX_DEPTH);
        if (!parse_alt(r)) return false;
        r->depth--;
        if (r->i >= r->n || r->s[r->i] != ')') return rfail(r, "missing ')'");
        r->i++;
        return true;
    }
    if (c == '[') {
        r->i++;
        return parse_class(r);
    }
    if (c == '.') {
        r->i++;
        cset cs = {.n = 0, .neg = true};
        cs_add(r, &cs, '\n', '\n'), cs_add(r, &cs, '\r', '\r'), cs_add(r, &cs, 0x2028, 0x2029);
        out_set(r, &cs);
        return true;
    }
    if (c == '^' || c == '$') return rfail(r, "'%c' is supported only at the pattern's start ('^') or end ('$')", c);
    if (c == '*' || c == '+' || c == '?' || c == '{') return rfail(r, "nothing to repeat before '%c'", c);
    if (c == '\\') {
        r->i++;
        char sh = 0;
        int64_t cp = read_escape(r, &sh);
        if (cp == -1) return false;
        if (cp == -2) {
            cset cs = {.n = 0, .neg = sh >= 'A' && sh <= 'Z'};
            if (!cs_shorthand(r, &cs, (char)(sh | 0x20))) return false;
            out_set(r, &cs);
            return true;
        }
        outs(r, "( "), out_char(r, (uint32_t)cp), outs(r, " )");
        return true;
    }
    int64_t cp = read_cp(r);
    if (cp < 0) return rfail(r, "invalid UTF-8");
    outs(r, "( "), out_char(r, (uint32_t)cp), outs(r, " )");
    return true;
}

static bool read_num(rx *r, long *v) {
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') return false;
    long x = 0;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        x = x * 10 + (r->s[r->i++] - '0');
        if (x > RX_MAX_REPEAT) return rfail(r, "repetition count over %d", RX_MAX_REPEAT);
    }
    *v = x;
    return true;
}

/* A quantifier after an atom (or nothing). */
static bool parse_quant(rx *r) {
    if (r->i >= r->n) return true;
    char c = r->s[r->i];
    if (c == '*' || c == '+' || c == '?') {
        char q[2] = {c, 0};
        outs(r, q);
        r->i++;
    } else if (c == '{') {
        size_t save = r->i;
        r->i++;
        long lo = 0, hi = -1;
        if (!read_num(r, &lo)) {
            if (r->failed) return false;
            r->i = save; /* a literal '{' (ECMAScript's Annex B) */
            return true;
        }
        bool comma = r->i < r->n && r->s[r->i] == ',';
        if (comma) {
            r->i++;
            if (r->i < r->n && r->s[r->i] != '}' && !read_num(r, &hi)) return r->failed ? false : rfail(r, "bad count");
        } else {
            hi = lo;
        }
        if (r->i >= r->n || r->s[r->i] != '}') return rfail(r, "bad count");
        r->i++;
        if (hi >= 0 && hi < lo) return rfail(r, "count {%ld,%ld} out of order", lo, hi);
        if (hi < 0) outf(r, "{%ld,}", lo);
        else outf(r, "{%ld,%ld}", lo, hi);
    } else {
        return true;
    }
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same strings */
    if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?' || r->s[r->i] == '{'))
        return rfail(r, "a quantifier cannot follow another");
    return true;
}

static bool at_end_anchor(const rx *r) { return r->i + 1 == r->n && r->s[r->i] == '$'; }

/* A sequence, up to '|', ')' or the end (or a final '$'). */
static bool parse_seq(rx *r) {
    outs(r, "(");
    bool empty = true;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')' && !at_end_anchor(r)) {
        outs(r, " (");
        if (!parse_atom(r)) return false;
        outs(r, ")");
        if (!parse_quant(r)) return false;
        empty = false;
    }
    if (empty) outs(r, " \"\"");
    outs(r, " )");
    return !r->failed;
}

static bool parse_alt(rx *r) {
    outs(r, "(");
    if (!parse_seq(r)) return false;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        outs(r, " |");
        if (!parse_seq(r)) return false;
    }
    outs(r, " )");
    return true;
}

char *js_regex_to_gbnf(const char *pattern, size_t len, char *err, size_t errlen) {
    rx r = {.s = pattern, .n = len, .err = err, .errlen = errlen};
    bool start = len > 0 && pattern[0] == '^';
    if (start) r.i = 1;
    /* any JSON string content: the unanchored sides */
    static const char any[] = " ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] | \"\\\\u\" [0-9a-fA-F]{4} )*";
    outs(&r, "(");
    if (!start) outs(&r, any);
    outs(&r, " ");
    bool ok = parse_alt(&r);
    if (ok && r.i < r.n && r.s[r.i] == ')') ok = rfail(&r, "unmatched ')'");
    bool end = ok && r.i < r.n && r.s[r.i] == '$';
    if (end) r.i++;
    if (ok && r.i != r.n) ok = rfail(&r, "unexpected '%c'", r.s[r.i]);
    if (ok && !end) outs(&r, any);
    outs(&r, " )");
    if (!ok || r.oom) {
        if (r.oom && !r.failed) snprintf(err, errlen, "out of memory");
        free(r.o);
        return NULL;
    }
    return r.o;
}
