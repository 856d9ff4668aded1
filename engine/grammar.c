/* grammar.c — GBNF parser, byte-level pushdown matcher with interned states,
 * and trie-walked token masks (see grammar.h for the contract).
 *
 * Compiled form: every rule is a list of alternatives, each a run of elements
 * ending in END; an element is a byte set (256-bit map) or a reference to a
 * rule. Character classes over code points become alternatives of byte-set
 * sequences (UTF-8), repetitions become helper rules, so matching is over
 * bytes only. A parser stack is a chain of interned nodes (position, parent):
 * the top is a byte-set position, the rest are return positions; a state is
 * the sorted set of stack tops (node 0 = the empty stack: the root is done).
 * Byte steps are memoised per (state, byte), a state's whole row at once. A
 * state's mask is the union of its tops' key masks (see "key masks": the
 * tokens decided by a top's upper frames alone, made once per grammar by one
 * trie walk each) plus a check of the few tokens that depend on the frames
 * below; a token budget near its end falls back to one walk over the
 * vocabulary trie in preorder, pruning a subtree as soon as its prefix dies. */
#include "engine/grammar.h"

#include "engine/tokenizer.h"

#include <math.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G_ASSERT(c)                                                                                            \
    do {                                                                                                       \
        if (!(c)) {                                                                                            \
            fprintf(stderr, "%s:%d: grammar invariant failed: %s\n", __FILE__, __LINE__, #c);                  \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

enum { EL_END = 0, EL_BYTES = 1, EL_REF = 2 };
#define G_INF (1 << 29)
#define G_MAX_NODES (1 << 22)     /* interned stack nodes per matcher */
#define G_MAX_STEPS (1 << 20)     /* closure work items per byte step */
#define G_MAX_REPEAT 10000
#define G_MASK_BYTES (64u << 20)  /* cached masks per matcher */
#define G_HOLE 1                  /* the stack node "whatever lies below": a local walk's bottom (see key masks) */

/* ---- growable arrays ------------------------------------------------------ */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- compiled grammar ------------------------------------------------------ */

typedef struct {
    uint8_t kind;
    int32_t arg;
} gel;

typedef struct {
    gel *v;
    size_t n, cap;
} gseq;

typedef struct {
    char *name;
    int origin;                /* the user rule a helper rule was made for (itself for user rules) */
    gseq *alts;
    size_t n, cap;
    bool defined;
    size_t def_at, use_at;     /* byte offsets of the definition and the first use */
} grule;

struct grammar {
    int n_rules;
    char **names;              /* (n_rules) */
    int32_t *alt_off, *alt_n;  /* (n_rules) into alt_start */
    int32_t *alt_start;        /* positions */
    uint8_t *kind;             /* (n_code) */
    int32_t *arg;              /* (n_code) */
    int32_t *sufmin;           /* (n_code) fewest bytes from a position to its alternative's end */
    int32_t n_code;
    uint8_t (*sets)[32];       /* (n_sets) byte bitmaps */
    int n_sets;
    int root;
};

static bool set_has(const uint8_t *s, unsigned b) { return s[b >> 3] >> (b & 7) & 1; }

/* ---- parser ---------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n, i;
    grule *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    size_t n_elems;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
} gparser;

static void where(const gparser *p, size_t at, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

static bool perr_at(gparser *p, size_t at, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    int line, col;
    where(p, at, &line, &col);
    int k = snprintf(p->err, p->errlen, "line %d, column %d: ", line, col);
    if (k < 0 || (size_t)k >= p->errlen) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}
#define PERR(p, ...) perr_at((p), (p)->i, __VA_ARGS__)

static bool seq_push(gparser *p, gseq *q, uint8_t kind, int32_t arg) {
    if (++p->n_elems > GRAMMAR_MAX_ELEMENTS) return PERR(p, "grammar too large (over %u elements)", GRAMMAR_MAX_ELEMENTS);
    if (!grow((void **)&q->v, &q->cap, q->n + 1, sizeof(gel))) return PERR(p, "out of memory");
    q->v[q->n++] = (gel){kind, arg};
    return true;
}

static int new_rule(gparser *p, const char *name, size_t nlen, int origin) {
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof(grule))) return PERR(p, "out of memory"), -1;
    grule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof(*r));
    if (!(r->name = malloc(nlen + 1))) return PERR(p, "out of memory"), -1;
    memcpy(r->name, name, nlen);
    r->name[nlen] = 0;
    r->origin = origin < 0 ? (int)p->n_rules : origin;
    r->use_at = (size_t)-1;
    return (int)p->n_rules++;
}

static int helper_rule(gparser *p, int origin) {
    char nm[32];
    int k = snprintf(nm, sizeof(nm), "_%zu", p->n_rules);
    return new_rule(p, nm, (size_t)k, origin);
}

static gseq *rule_alt(gparser *p, int r) {
    grule *R = &p->rules[r];
    if (!grow((void **)&R->alts, &R->cap, R->n + 1, sizeof(gseq))) return PERR(p, "out of memory"), NULL;
    gseq *q = &R->alts[R->n++];
    memset(q, 0, sizeof(*q));
    return q;
}

static int find_rule(gparser *p, const char *name, size_t nlen) {
    for (size_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].name[0] != '_' && strlen(p->rules[r].name) == nlen && !memcmp(p->rules[r].name, name, nlen))
            return (int)r;
    return -1;
}

static int add_set(gparser *p, const uint8_t set[32]) {
    for (size_t k = 256; k < p->n_sets; k++)
        if (!memcmp(p->sets[k], set, 32)) return (int)k;
    if (!grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, 32)) return PERR(p, "out of memory"), -1;
    memcpy(p->sets[p->n_sets], set, 32);
    return (int)p->n_sets++;
}

static bool is_name(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

static void skip_ws(gparser *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#')
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        else break;
    }
}

/* Whether a rule definition `name ::=` starts at the current position. */
static bool at_definition(gparser *p) {
    size_t k = p->i;
    while (k < p->n && is_name(p->s[k])) k++;
    if (k == p->i) return false;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t' || p->s[k] == '\n' || p->s[k] == '\r')) k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class, with escapes; -1 on error. */
static int32_t read_char(gparser *p) {
    if (p->i >= p->n) return PERR(p, "unexpected end of grammar"), -1;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        p->i++;
        if (p->i >= p->n) return PERR(p, "unfinished escape"), -1;
        char e = p->s[p->i++];
        int nh = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '/': case '^': case '\'': return (unsigned char)e;
        case 'x': nh = 2; break;
        case 'u': nh = 4; break;
        case 'U': nh = 8; break;
        default: p->i -= 2; return PERR(p, "unknown escape '\\%c'", e), -1;
        }
        int32_t v = 0;
        for (int k = 0; k < nh; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) return PERR(p, "escape needs %d hex digits", nh), -1;
            v = v * 16 + h;
            p->i++;
        }
        if (v > 0x10FFFF) return PERR(p, "code point U+%X beyond U+10FFFF", (unsigned)v), -1;
        return v;
    }
    /* UTF-8 in the grammar text itself */
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n) return PERR(p, "invalid UTF-8 in the grammar"), -1;
    int32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80) return PERR(p, "invalid UTF-8 in the grammar"), -1;
        v = v << 6 | (d & 0x3F);
    }
    p->i += (size_t)len;
    return v;
}

static int utf8_enc(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)),
               o[2] = (uint8_t)(0x80 | (c & 0x3F)), 3;
    o[0] = (uint8_t)(0xF0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Code point range [lo, hi] (no surrogates) as byte-range sequences, each an
 * alternative of rule r (utf8-ranges' splitting). */
static bool utf8_ranges(gparser *p, int r, uint32_t lo, uint32_t hi) {
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int b = 0; b < 3; b++)
        if (lo <= bounds[b] && hi > bounds[b]) return utf8_ranges(p, r, lo, bounds[b]) && utf8_ranges(p, r, bounds[b] + 1, hi);
    if (hi >= 0x80) {
        for (int k = 1; k < 4; k++) {
            uint32_t m = (1u << (6 * k)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if (lo & m) return utf8_ranges(p, r, lo, lo | m) && utf8_ranges(p, r, (lo | m) + 1, hi);
                if ((hi & m) != m) return utf8_ranges(p, r, lo, (hi & ~m) - 1) && utf8_ranges(p, r, hi & ~m, hi);
            }
        }
    }
    uint8_t a[4], z[4];
    int n = utf8_enc(lo, a);
    G_ASSERT(utf8_enc(hi, z) == n);
    gseq *q = rule_alt(p, r);
    if (!q) return false;
    for (int k = 0; k < n; k++) {
        uint8_t set[32] = {0};
        for (unsigned b = a[k]; b <= z[k]; b++) set[b >> 3] |= (uint8_t)(1u << (b & 7));
        int si = add_set(p, set);
        if (si < 0 || !seq_push(p, q, EL_BYTES, si)) return false;
    }
    return true;
}

typedef struct {
    uint32_t lo, hi;
} cprange;

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A class from its code point ranges: one byte set when all are ASCII, else a
 * helper rule. Appends the element to q. */
static bool emit_class(gparser *p, gseq *q, cprange *rg, size_t n, bool negate, int origin) {
    qsort(rg, n, sizeof(*rg), cmp_range);
    /* merge, then complement if negated, then cut out the surrogates */
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        if (m && rg[k].lo <= rg[m - 1].hi + 1) {
            if (rg[k].hi > rg[m - 1].hi) rg[m - 1].hi = rg[k].hi;
        } else rg[m++] = rg[k];
    }
    cprange out[1024];
    size_t no = 0;
    cprange tmp[1024];
    size_t nt = 0;
    if (negate) {
        uint32_t next = 0;
        for (size_t k = 0; k < m && nt < 1023; k++) {
            if (rg[k].lo > next) tmp[nt++] = (cprange){next, rg[k].lo - 1};
            next = rg[k].hi + 1;
        }
        if (next <= 0x10FFFF) tmp[nt++] = (cprange){next, 0x10FFFF};
    } else {
        if (m > 1023) return PERR(p, "character class too large");
        memcpy(tmp, rg, m * sizeof(*rg));
        nt = m;
    }
    for (size_t k = 0; k < nt && no < 1022; k++) {
        cprange x = tmp[k];
        if (x.lo <= 0xDFFF && x.hi >= 0xD800) {
            if (x.lo < 0xD800) out[no++] = (cprange){x.lo, 0xD7FF};
            if (x.hi > 0xDFFF) out[no++] = (cprange){0xE000, x.hi};
        } else out[no++] = x;
    }
    if (!no) return PERR(p, "character class matches nothing");
    bool ascii = true;
    for (size_t k = 0; k < no; k++) ascii &= out[k].hi < 0x80;
    if (ascii) {
        uint8_t set[32] = {0};
        for (size_t k = 0; k < no; k++)
            for (uint32_t b = out[k].lo; b <= out[k].hi; b++) set[b >> 3] |= (uint8_t)(1u << (b & 7));
        int si = add_set(p, set);
        return si >= 0 && seq_push(p, q, EL_BYTES, si);
    }
    int r = helper_rule(p, origin);
    if (r < 0) return false;
    for (size_t k = 0; k < no; k++)
        if (!utf8_ranges(p, r, out[k].lo, out[k].hi)) return false;
    return seq_push(p, &(*q), EL_REF, r);
}

static bool parse_alts(gparser *p, int r, int origin);

/* Wraps item (one or more elements) as one element: itself when single. */
static bool item_element(gparser *p, gseq *item, int origin, gel *out) {
    if (item->n == 1) {
        *out = item->v[0];
        return true;
    }
    int r = helper_rule(p, origin);
    gseq *q = r < 0 ? NULL : rule_alt(p, r);
    if (!q) return false;
    for (size_t k = 0; k < item->n; k++)
        if (!seq_push(p, q, item->v[k].kind, item->v[k].arg)) return false;
    *out = (gel){EL_REF, r};
    return true;
}

/* x*: R ::= x R | ε */
static int star_rule(gparser *p, gel x, int origin) {
    int r = helper_rule(p, origin);
    gseq *a = r < 0 ? NULL : rule_alt(p, r);
    if (!a || !seq_push(p, a, x.kind, x.arg) || !seq_push(p, a, EL_REF, r) || !rule_alt(p, r)) return -1;
    return r;
}

static bool apply_repeat(gparser *p, gseq *q, gseq *item, long lo, long hi, int origin) {
    if (lo == 1 && hi == 1) {
        for (size_t k = 0; k < item->n; k++)
            if (!seq_push(p, q, item->v[k].kind, item->v[k].arg)) return false;
        return true;
    }
    gel x;
    if (!item_element(p, item, origin, &x)) return false;
    for (long k = 0; k < lo; k++)
        if (!seq_push(p, q, x.kind, x.arg)) return false;
    if (hi < 0) {
        int r = star_rule(p, x, origin);
        return r >= 0 && seq_push(p, q, EL_REF, r);
    }
    /* hi - lo nested optionals: R1 ::= x | ε, Rk ::= x R(k-1) | ε */
    int prev = -1;
    for (long k = lo; k < hi; k++) {
        int r = helper_rule(p, origin);
        gseq *a = r < 0 ? NULL : rule_alt(p, r);
        if (!a || !seq_push(p, a, x.kind, x.arg) || (prev >= 0 && !seq_push(p, a, EL_REF, prev)) || !rule_alt(p, r))
            return false;
        prev = r;
    }
    return prev < 0 || seq_push(p, q, EL_REF, prev);
}

static bool read_count(gparser *p, long *v) {
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return PERR(p, "expected a number");
    long x = 0;
    size_t at = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > G_MAX_REPEAT) return perr_at(p, at, "repetition count above %d", G_MAX_REPEAT);
    }
    *v = x;
    return true;
}

/* One sequence into q, up to '|', ')', the end or the next definition. */
static bool parse_seq(gparser *p, gseq *q, int origin) {
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] == '|' || p->s[p->i] == ')' || at_definition(p)) return true;
        gseq item = {0};
        size_t start = p->i;
        char c = p->s[p->i];
        bool ok = true;
        if (c == '"') {
            p->i++;
            while (ok && (p->i >= p->n || p->s[p->i] != '"')) {
                if (p->i >= p->n) {
                    ok = perr_at(p, start, "unterminated literal");
                    break;
                }
                int32_t cp = read_char(p);
                if (cp < 0) {
                    ok = false;
                    break;
                }
                uint8_t b[4];
                int nb = utf8_enc((uint32_t)cp, b);
                for (int k = 0; ok && k < nb; k++) ok = seq_push(p, &item, EL_BYTES, b[k]);
            }
            if (ok) p->i++;
            if (ok && item.n == 0) {
                /* "" matches the empty string: an empty helper rule */
                int r = helper_rule(p, origin);
                ok = r >= 0 && rule_alt(p, r) && seq_push(p, &item, EL_REF, r);
            }
        } else if (c == '[') {
            p->i++;
            bool neg = p->i < p->n && p->s[p->i] == '^';
            if (neg) p->i++;
            cprange rg[512];
            size_t nr = 0;
            while (ok && (p->i >= p->n || p->s[p->i] != ']')) {
                if (p->i >= p->n) {
                    ok = perr_at(p, start, "unterminated character class");
                    break;
                }
                int32_t a = read_char(p), z = a;
                if (a < 0) {
                    ok = false;
                    break;
                }
                if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                    p->i++;
                    if ((z = read_char(p)) < 0) {
                        ok = false;
                        break;
                    }
                    if (z < a) {
                        ok = PERR(p, "range end below its start");
                        break;
                    }
                }
                if (nr == 512) {
                    ok = PERR(p, "character class with over 512 ranges");
                    break;
                }
                rg[nr++] = (cprange){(uint32_t)a, (uint32_t)z};
            }
            if (ok) {
                p->i++;
                if (!nr && !neg) ok = perr_at(p, start, "empty character class");
                else ok = emit_class(p, &item, rg, nr, neg, origin);
            }
        } else if (c == '.') {
            p->i++;
            cprange none[1];
            ok = emit_class(p, &item, none, 0, true, origin);
        } else if (c == '(') {
            p->i++;
            if (++p->depth > 256) {
                ok = PERR(p, "groups nested deeper than 256");
            } else {
                int r = helper_rule(p, origin);
                ok = r >= 0 && parse_alts(p, r, origin);
                skip_ws(p);
                if (ok && (p->i >= p->n || p->s[p->i] != ')')) ok = perr_at(p, start, "unclosed '('");
                if (ok) p->i++, ok = seq_push(p, &item, EL_REF, r);
            }
            p->depth--;
        } else if (is_name(c)) {
            size_t k = p->i;
            while (k < p->n && is_name(p->s[k])) k++;
            int r = find_rule(p, p->s + p->i, k - p->i);
            if (r < 0) r = new_rule(p, p->s + p->i, k - p->i, -1);
            if (r >= 0 && p->rules[r].use_at == (size_t)-1) p->rules[r].use_at = p->i;
            p->i = k;
            ok = r >= 0 && seq_push(p, &item, EL_REF, r);
        } else {
            ok = PERR(p, "unexpected '%c'", c);
        }
        /* postfix operators */
        long lo = 1, hi = 1;
        if (ok && p->i < p->n) {
            char o = p->s[p->i];
            if (o == '*') lo = 0, hi = -1, p->i++;
            else if (o == '+') lo = 1, hi = -1, p->i++;
            else if (o == '?') lo = 0, hi = 1, p->i++;
            else if (o == '{') {
                p->i++;
                skip_ws(p);
                ok = read_count(p, &lo);
                skip_ws(p);
                hi = lo;
                if (ok && p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_ws(p);
                    if (p->i < p->n && p->s[p->i] == '}') hi = -1;
                    else if ((ok = read_count(p, &hi)) && hi < lo) ok = PERR(p, "{m,n} with n below m");
                    skip_ws(p);
                }
                if (ok && (p->i >= p->n || p->s[p->i] != '}')) ok = PERR(p, "expected '}'");
                if (ok) p->i++;
            }
            if (ok && p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?'))
                ok = PERR(p, "two repetition operators in a row (group the first)");
        }
        if (ok) ok = apply_repeat(p, q, &item, lo, hi, origin);
        free(item.v);
        if (!ok) return false;
    }
}

static bool parse_alts(gparser *p, int r, int origin) {
    for (;;) {
        gseq *q = rule_alt(p, r);
        if (!q) return false;
        gseq tmp = {0};
        bool ok = parse_seq(p, &tmp, origin);
        /* rule_alt may have moved: re-fetch */
        q = &p->rules[r].alts[p->rules[r].n - 1];
        *q = tmp;
        if (!ok) return false;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        return true;
    }
}

static void parser_free(gparser *p) {
    for (size_t r = 0; r < p->n_rules; r++) {
        for (size_t a = 0; a < p->rules[r].n; a++) free(p->rules[r].alts[a].v);
        free(p->rules[r].alts);
        free(p->rules[r].name);
    }
    free(p->rules);
    free(p->sets);
}

void grammar_destroy(grammar *g) {
    if (!g) return;
    if (g->names)
        for (int r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->alt_off);
    free(g->alt_n);
    free(g->alt_start);
    free(g->kind);
    free(g->arg);
    free(g->sufmin);
    free(g->sets);
    free(g);
}

int grammar_n_rules(const grammar *g) { return g->n_rules; }

/* Fewest bytes each rule can match (G_INF: it never finishes), to a fixpoint. */
static void rule_minlen(const gparser *p, int32_t *ml) {
    for (size_t r = 0; r < p->n_rules; r++) ml[r] = G_INF;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < p->n_rules; r++)
            for (size_t a = 0; a < p->rules[r].n; a++) {
                long s = 0;
                const gseq *q = &p->rules[r].alts[a];
                for (size_t k = 0; k < q->n && s < G_INF; k++) s += q->v[k].kind == EL_BYTES ? 1 : ml[q->v[k].arg];
                if (s > G_INF) s = G_INF;
                if (s < ml[r]) ml[r] = (int32_t)s, changed = true;
            }
    }
}

/* Left recursion: r reaches itself through first elements (after nullable
 * ones). Iterative DFS with colours; returns the rule on a cycle, or -1. */
static int left_recursion(const gparser *p, const int32_t *ml) {
    size_t n = p->n_rules;
    uint8_t *col = calloc(n, 1);
    size_t *st = malloc(sizeof(size_t) * 2 * (n + 1));
    int found = -1;
    if (!col || !st) {
        free(col), free(st);
        return -2;
    }
    for (size_t s = 0; s < n && found < 0; s++) {
        if (col[s]) continue;
        /* stack of (rule, edge cursor); an edge cursor enumerates (alt, elem) pairs flattened */
        size_t sp = 0;
        st[sp++] = s, st[sp++] = 0;
        col[s] = 1;
        while (sp && found < 0) {
            size_t r = st[sp - 2], cur = st[sp - 1];
            /* find the next left edge from cursor cur */
            size_t a = cur >> 20, e = cur & 0xFFFFF;
            int next = -1;
            while (a < p->rules[r].n) {
                const gseq *q = &p->rules[r].alts[a];
                if (e < q->n && (e == 0 || (q->v[e - 1].kind == EL_REF && ml[q->v[e - 1].arg] == 0))) {
                    if (q->v[e].kind == EL_REF) {
                        next = q->v[e].arg;
                        e++;
                        break;
                    }
                }
                a++, e = 0;
            }
            st[sp - 1] = (a << 20) | e;
            if (next < 0) {
                col[r] = 2;
                sp -= 2;
            } else if (col[next] == 1) {
                found = next;
            } else if (col[next] == 0) {
                col[next] = 1;
                st[sp++] = (size_t)next, st[sp++] = 0;
            }
        }
    }
    free(col);
    free(st);
    return found;
}

grammar *grammar_parse(const char *text, size_t len, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof(dummy);
    if (len > GRAMMAR_MAX_TEXT) {
        snprintf(err, errlen, "line 1, column 1: grammar of %zu bytes (limit %u)", len, GRAMMAR_MAX_TEXT);
        return NULL;
    }
    gparser P = {.s = text, .n = len, .err = err, .errlen = errlen}, *p = &P;
    grammar *g = NULL;
    int32_t *ml = NULL;
    for (int b = 0; b < 256; b++) { /* sets 0..255: the single bytes */
        uint8_t set[32] = {0};
        set[b >> 3] = (uint8_t)(1u << (b & 7));
        if (!grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, 32)) goto fail_oom;
        memcpy(p->sets[p->n_sets++], set, 32);
    }
    skip_ws(p);
    if (p->i >= p->n) {
        PERR(p, "empty grammar (no rules)");
        goto fail;
    }
    while (p->i < p->n) {
        size_t at = p->i;
        size_t k = p->i;
        while (k < p->n && is_name(p->s[k])) k++;
        if (k == p->i) {
            PERR(p, "expected a rule name");
            goto fail;
        }
        size_t nlen = k - p->i;
        p->i = k;
        skip_ws(p);
        if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3)) {
            PERR(p, "expected '::=' after the rule name");
            goto fail;
        }
        p->i += 3;
        int r = find_rule(p, text + at, nlen);
        if (r >= 0 && p->rules[r].defined) {
            perr_at(p, at, "rule '%.*s' defined twice", (int)nlen, text + at);
            goto fail;
        }
        if (r < 0 && (r = new_rule(p, text + at, nlen, -1)) < 0) goto fail;
        p->rules[r].defined = true;
        p->rules[r].def_at = at;
        if (!parse_alts(p, r, r)) goto fail;
        skip_ws(p);
        if (p->i < p->n && !at_definition(p)) {
            PERR(p, "unexpected '%c'", p->s[p->i]);
            goto fail;
        }
    }
    for (size_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].name[0] != '_' && !p->rules[r].defined) {
            perr_at(p, p->rules[r].use_at, "undefined rule '%s'", p->rules[r].name);
            goto fail;
        }
    int root = find_rule(p, "root", 4);
    if (root < 0) {
        perr_at(p, 0, "no 'root' rule");
        goto fail;
    }
    if (!(ml = malloc(sizeof(int32_t) * p->n_rules))) goto fail_oom;
    rule_minlen(p, ml);
    for (size_t r = 0; r < p->n_rules; r++)
        if (ml[r] >= G_INF) {
            const grule *o = &p->rules[p->rules[r].origin];
            perr_at(p, o->def_at, "rule '%s' can never finish (every alternative recurses)", o->name);
            goto fail;
        }
    int lr = left_recursion(p, ml);
    if (lr == -2) goto fail_oom;
    if (lr >= 0) {
        const grule *o = &p->rules[p->rules[lr].origin];
        perr_at(p, o->def_at, "left recursion in rule '%s' (rewrite it with repetition)", o->name);
        goto fail;
    }
    /* flatten */
    if (!(g = calloc(1, sizeof(*g)))) goto fail_oom;
    g->n_rules = (int)p->n_rules;
    g->root = root;
    size_t n_alts = 0, n_code = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_alts += p->rules[r].n;
        for (size_t a = 0; a < p->rules[r].n; a++) n_code += p->rules[r].alts[a].n + 1;
    }
    g->names = calloc(p->n_rules, sizeof(char *));
    g->alt_off = malloc(sizeof(int32_t) * p->n_rules);
    g->alt_n = malloc(sizeof(int32_t) * p->n_rules);
    g->alt_start = malloc(sizeof(int32_t) * (n_alts + 1));
    g->kind = malloc(n_code + 1);
    g->arg = malloc(sizeof(int32_t) * (n_code + 1));
    g->sufmin = malloc(sizeof(int32_t) * (n_code + 1));
    g->sets = malloc(32 * p->n_sets);
    if (!g->names || !g->alt_off || !g->alt_n || !g->alt_start || !g->kind || !g->arg || !g->sufmin || !g->sets)
        goto fail_oom;
    memcpy(g->sets, p->sets, 32 * p->n_sets);
    g->n_sets = (int)p->n_sets;
    size_t ai = 0, ci = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->names[r] = p->rules[r].name;
        p->rules[r].name = NULL;
        g->alt_off[r] = (int32_t)ai;
        g->alt_n[r] = (int32_t)p->rules[r].n;
        for (size_t a = 0; a < p->rules[r].n; a++) {
            const gseq *q = &p->rules[r].alts[a];
            g->alt_start[ai++] = (int32_t)ci;
            size_t c0 = ci;
            for (size_t k = 0; k < q->n; k++) g->kind[ci] = q->v[k].kind, g->arg[ci] = q->v[k].arg, ci++;
            g->kind[ci] = EL_END, g->arg[ci] = 0, g->sufmin[ci] = 0, ci++;
            for (size_t k = q->n; k-- > 0;) {
                long s = (long)g->sufmin[c0 + k + 1] + (q->v[k].kind == EL_BYTES ? 1 : ml[q->v[k].arg]);
                g->sufmin[c0 + k] = (int32_t)(s > G_INF ? G_INF : s);
            }
        }
    }
    g->n_code = (int32_t)ci;
    free(ml);
    parser_free(p);
    return g;
fail_oom:
    if (!p->failed) snprintf(err, errlen, "line 1, column 1: out of memory");
fail:
    free(ml);
    grammar_destroy(g);
    parser_free(p);
    return NULL;
}

const char *grammar_json_gbnf(void) {
    return "root   ::= object\n"
           "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
           "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
           "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
           "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt/] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
           "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,4})? ws\n"
           "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
}

/* ---- vocabulary ------------------------------------------------------------ */

struct grammar_vocab {
    int n;
    uint8_t *blob;             /* token bytes */
    int64_t *off;              /* (n + 1) */
    uint8_t *eog;              /* (n) */
    int32_t *eog_ids;
    int n_eog;
    bool all_bytes;
    /* trie in preorder: node 0 is the root (empty prefix) */
    int32_t n_nodes;
    uint8_t *nbyte;            /* (n_nodes) the edge byte into the node */
    uint16_t *ndepth;          /* (n_nodes) */
    int32_t *nskip;            /* (n_nodes) the first node after the subtree */
    int32_t *ntok_off;         /* (n_nodes + 1) into ntok */
    int32_t *ntok;             /* token ids, grouped by node */
    uint32_t *nsub;            /* (n_nodes, 8) bitmap of the edge bytes below each node (its subtree) */
    uint16_t *nheight;         /* (n_nodes) the longest path below each node */
    uint16_t *ntok_len;        /* byte length of each ntok entry (a subtree's tokens in one sequential pass) */
    int max_len;
};

void grammar_vocab_destroy(grammar_vocab *v) {
    if (!v) return;
    free(v->blob), free(v->off), free(v->eog), free(v->eog_ids);
    free(v->nbyte), free(v->ndepth), free(v->nskip), free(v->ntok_off), free(v->ntok), free(v->nsub), free(v->nheight), free(v->ntok_len);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }
bool grammar_vocab_has_all_bytes(const grammar_vocab *v) { return v->all_bytes; }
int grammar_vocab_trie_nodes(const grammar_vocab *v) { return v->n_nodes; }

static const grammar_vocab *sort_v;
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = sort_v->off[x + 1] - sort_v->off[x], ly = sort_v->off[y + 1] - sort_v->off[y];
    int c = memcmp(sort_v->blob + sort_v->off[x], sort_v->blob + sort_v->off[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the trie from blob/off (tokens of length 0 are left out). */
static bool vocab_trie(grammar_vocab *v) {
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)(v->n + 1));
    if (!ord) return false;
    int m = 0;
    for (int t = 0; t < v->n; t++)
        if (v->off[t + 1] > v->off[t] && !v->eog[t]) ord[m++] = t;
    sort_v = v; /* engine start-up only; not reentrant */
    qsort(ord, (size_t)m, sizeof(int32_t), cmp_tok);
    size_t total = 1;
    for (int k = 0; k < m; k++) total += (size_t)(v->off[ord[k] + 1] - v->off[ord[k]]);
    v->nbyte = malloc(total), v->ndepth = malloc(sizeof(uint16_t) * total);
    v->nskip = malloc(sizeof(int32_t) * total), v->ntok_off = malloc(sizeof(int32_t) * (total + 1));
    v->ntok = malloc(sizeof(int32_t) * (size_t)(m + 1));
    int32_t *path = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    int32_t *tokcnt = calloc(total + 1, sizeof(int32_t));
    if (!v->nbyte || !v->ndepth || !v->nskip || !v->ntok_off || !v->ntok || !path || !tokcnt) {
        free(ord), free(path), free(tokcnt);
        return false;
    }
    int32_t nn = 1;
    v->nbyte[0] = 0, v->ndepth[0] = 0;
    path[0] = 0;
    int depth = 0; /* path[0..depth] is the current chain */
    const uint8_t *prev = NULL;
    int64_t plen = 0;
    int32_t *tok_node = malloc(sizeof(int32_t) * (size_t)(m + 1));
    if (!tok_node) {
        free(ord), free(path), free(tokcnt);
        return false;
    }
    for (int k = 0; k < m; k++) {
        const uint8_t *s = v->blob + v->off[ord[k]];
        int64_t len = v->off[ord[k] + 1] - v->off[ord[k]];
        int64_t c = 0;
        while (prev && c < len && c < plen && s[c] == prev[c]) c++;
        /* close nodes deeper than the common prefix */
        while (depth > c) v->nskip[path[depth]] = nn, depth--;
        for (int64_t j = c; j < len; j++) {
            v->nbyte[nn] = s[j];
            v->ndepth[nn] = (uint16_t)(j + 1);
            path[++depth] = nn++;
        }
        tok_node[k] = path[depth];
        tokcnt[path[depth]]++;
        prev = s, plen = len;
    }
    while (depth >= 0) v->nskip[path[depth]] = nn, depth--;
    v->n_nodes = nn;
    v->ntok_off[0] = 0;
    for (int32_t i = 0; i < nn; i++) v->ntok_off[i + 1] = v->ntok_off[i] + tokcnt[i];
    for (int32_t i = 0; i < nn; i++) tokcnt[i] = v->ntok_off[i];
    for (int k = 0; k < m; k++) v->ntok[tokcnt[tok_node[k]]++] = ord[k];
    free(tok_node), free(ord), free(path), free(tokcnt);
    /* subtree byte sets, children before parents (reverse preorder) */
    if (!(v->nsub = calloc((size_t)nn * 8, sizeof(uint32_t))) || !(v->nheight = calloc((size_t)nn, sizeof(uint16_t))) ||
        !(v->ntok_len = malloc(sizeof(uint16_t) * (size_t)(m + 1))))
        return false;
    for (int k = 0; k < m; k++) v->ntok_len[k] = (uint16_t)(v->off[v->ntok[k] + 1] - v->off[v->ntok[k]]);
    for (int32_t i = nn - 1; i >= 0; i--)
        for (int32_t c = i + 1; c < v->nskip[i]; c = v->nskip[c]) {
            if (v->nheight[c] + 1 > v->nheight[i]) v->nheight[i] = (uint16_t)(v->nheight[c] + 1);
            uint32_t *dst = v->nsub + (size_t)i * 8;
            const uint32_t *src = v->nsub + (size_t)c * 8;
            for (int w = 0; w < 8; w++) dst[w] |= src[w];
            dst[v->nbyte[c] >> 5] |= 1u << (v->nbyte[c] & 31);
        }
    return true;
}

grammar_vocab *grammar_vocab_from_strings(int n, const char *const *s, const int *len, const bool *eog) {
    grammar_vocab *v = calloc(1, sizeof(*v));
    if (!v) return NULL;
    v->n = n;
    int64_t total = 0;
    for (int t = 0; t < n; t++) total += len[t] > 0 ? len[t] : 0;
    v->blob = malloc((size_t)total + 1), v->off = malloc(sizeof(int64_t) * (size_t)(n + 1));
    v->eog = calloc((size_t)n + 1, 1), v->eog_ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!v->blob || !v->off || !v->eog || !v->eog_ids) goto fail;
    bool seen[256] = {0};
    int64_t o = 0;
    for (int t = 0; t < n; t++) {
        v->off[t] = o;
        int l = len[t] > 0 ? len[t] : 0;
        if (eog && eog[t]) {
            v->eog[t] = 1, v->eog_ids[v->n_eog++] = t;
            l = 0;
        }
        memcpy(v->blob + o, s[t], (size_t)l);
        if (l == 1) seen[(uint8_t)s[t][0]] = true;
        if (l > v->max_len) v->max_len = l;
        o += l;
    }
    v->off[n] = o;
    v->all_bytes = true;
    for (int b = 0; b < 256; b++) v->all_bytes &= seen[b];
    if (!vocab_trie(v)) goto fail;
    return v;
fail:
    grammar_vocab_destroy(v);
    return NULL;
}

grammar_vocab *grammar_vocab_create(const tokenizer *t) {
    int n = tok_n_vocab(t);
    char **s = calloc((size_t)n, sizeof(char *));
    int *len = calloc((size_t)n, sizeof(int));
    bool *eog = calloc((size_t)n, sizeof(bool));
    size_t cap = tok_max_token_len(t) * 4 + 16;
    char *buf = malloc(cap * (size_t)n);
    grammar_vocab *v = NULL;
    if (s && len && eog && buf) {
        for (int i = 0; i < n; i++) {
            s[i] = buf + cap * (size_t)i;
            eog[i] = tok_is_eog(t, i);
            tok_type ty = tok_token_type(t, i);
            int l = (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED || ty == TOK_TYPE_UNKNOWN) ? 0
                                                                                              : tok_piece(t, i, s[i], cap);
            len[i] = l > 0 ? l : 0;
        }
        v = grammar_vocab_from_strings(n, (const char *const *)s, len, eog);
    }
    free(s), free(len), free(eog), free(buf);
    return v;
}

/* ---- matcher ----------------------------------------------------------------- */

struct grammar_matcher {
    const grammar *g;
    const grammar_vocab *v;
    /* stack nodes: (pos, parent), node 0 = the empty stack */
    int32_t *npos, *npar, *ndist;
    size_t nn, ncap;
    int32_t *nhash;
    uint32_t nhmask;
    /* states: sorted sets of stack tops */
    int32_t *spool;
    size_t sp_n, sp_cap;
    int64_t *soff;
    int32_t *scnt, *sdist, *smask, *smaxd;
    size_t ns, scap;
    int32_t *shash;
    uint32_t shmask;
    /* byte-step memo: key state * 256 + byte + 1 (0 = empty slot) */
    uint64_t *akey;
    int32_t *aval;
    size_t an;
    uint32_t amask;
    /* masks */
    int words;
    uint32_t *masks;
    size_t nmask, maskcap;
    uint32_t *tmp;
    /* scratch */
    int32_t *work;
    size_t wcap;
    int32_t *tops;
    size_t tcap;
    uint64_t *vkey;
    uint32_t vmask;
    int32_t *walk_state;       /* (max_len + 2) trie walk: state per depth */
    int32_t *chain;            /* (max_len + 2) subtree_chain: the state at each depth below a node */
    /* dense byte-step rows over the memo above: drow[st][b] (G_UNSEEN until
     * computed), allocated on a state's first step, at most G_DENSE_ROWS rows;
     * a trie walk is one load per node instead of a hash probe */
    int32_t **drow;
    size_t ndrow, nrows;
    int32_t **chunks;          /* the rows' memory: G_ROW_CHUNK rows each */
    size_t nchunks, chunk_cap, row_used;
    /* key masks: a top's mask by its K upper frames alone (see mask_keyed) */
    int32_t *kkey, *kdeep;     /* (nkmap) per node: its key node (-2: not yet) and the node below the key's frames */
    size_t nkmap;
    int32_t *kslot;            /* (nkslot) per key node: its gkey index, -1 none yet */
    size_t nkslot;
    struct gkey *keys;
    size_t nkeys, kcap, key_bytes;
    uint8_t *hh;               /* (max_len + 2) local walk: a state at depth <= d held G_HOLE */
    int32_t *kseen;            /* scratch: the keys of one state */
    size_t kseen_cap;
    uint64_t closure_steps;    /* work items all closures took (prepare's budget) */
    bool overflow;
    grammar_stats st;
};

/* A key's mask: the tokens its frames accept whatever lies below (acc), the
 * tokens that leave the frames and then die there, so only the real stack can
 * say (cd, in trie order, lcp[k] = bytes shared with cd[k - 1]), and the
 * largest distance to the frames' end over acc (maxlocal). */
struct gkey {
    uint32_t *acc;             /* (words), NULL when the tokens are few: then the list */
    int32_t *list;             /* (nlist) */
    int32_t nlist;
    int32_t *cd;               /* (ncd) */
    uint16_t *lcp;             /* (ncd) */
    int32_t ncd;
    int32_t maxlocal;
};

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static bool rehash_i32(int32_t **tab, uint32_t *mask, size_t count, uint32_t (*hash)(grammar_matcher *, int32_t),
                       grammar_matcher *m) {
    if ((count + 1) * 2 <= (size_t)*mask + 1) return true;
    uint32_t nm = (*mask + 1) * 2 - 1;
    int32_t *t = malloc(sizeof(int32_t) * ((size_t)nm + 1));
    if (!t) return false;
    memset(t, 0xff, sizeof(int32_t) * ((size_t)nm + 1));
    for (uint32_t k = 0; k <= *mask; k++) {
        int32_t id = (*tab)[k];
        if (id < 0) continue;
        uint32_t h = hash(m, id) & nm;
        while (t[h] >= 0) h = (h + 1) & nm;
        t[h] = id;
    }
    free(*tab);
    *tab = t;
    *mask = nm;
    return true;
}

static uint32_t node_hash(grammar_matcher *m, int32_t id) {
    return mix((uint64_t)(uint32_t)m->npos[id] << 32 | (uint32_t)m->npar[id]);
}

static int32_t node_intern(grammar_matcher *m, int32_t pos, int32_t par) {
    uint32_t h = mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) & m->nhmask;
    for (; m->nhash[h] >= 0; h = (h + 1) & m->nhmask) {
        int32_t id = m->nhash[h];
        if (m->npos[id] == pos && m->npar[id] == par) return id;
    }
    if (m->nn >= G_MAX_NODES) return m->overflow = true, -1;
    size_t old = m->ncap; /* npar and ndist follow npos's capacity */
    if (!grow((void **)&m->npos, &m->ncap, m->nn + 1, sizeof(int32_t))) return m->overflow = true, -1;
    if (m->ncap != old) {
        int32_t *a = realloc(m->npar, sizeof(int32_t) * m->ncap), *b = a ? realloc(m->ndist, sizeof(int32_t) * m->ncap) : NULL;
        if (a) m->npar = a;
        if (b) m->ndist = b;
        if (!a || !b) return m->overflow = true, -1;
    }
    int32_t id = (int32_t)m->nn++;
    m->npos[id] = pos, m->npar[id] = par;
    long d = (long)m->g->sufmin[pos] + (par > 0 ? m->ndist[par] : 0);
    m->ndist[id] = (int32_t)(d > G_INF ? G_INF : d);
    m->nhash[h] = id;
    m->st.stack_nodes = m->nn;
    if (!rehash_i32(&m->nhash, &m->nhmask, m->nn, node_hash, m)) return m->overflow = true, -1;
    return id;
}

static uint32_t state_hash_of(const int32_t *t, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t k = 0; k < n; k++) h = (h ^ (uint32_t)t[k]) * 0x100000001b3ull;
    return mix(h);
}

static uint32_t state_hash(grammar_matcher *m, int32_t id) {
    return state_hash_of(m->spool + m->soff[id], m->scnt[id]);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int32_t state_intern(grammar_matcher *m, int32_t *t, int32_t n) {
    if (n == 0) return GRAMMAR_DEAD;
    qsort(t, (size_t)n, sizeof(int32_t), cmp_i32);
    int32_t u = 0;
    for (int32_t k = 0; k < n; k++)
        if (!u || t[u - 1] != t[k]) t[u++] = t[k];
    n = u;
    uint32_t h = state_hash_of(t, n) & m->shmask;
    for (; m->shash[h] >= 0; h = (h + 1) & m->shmask) {
        int32_t id = m->shash[h];
        if (m->scnt[id] == n && !memcmp(m->spool + m->soff[id], t, sizeof(int32_t) * (size_t)n)) return id;
    }
    if (!grow((void **)&m->spool, &m->sp_cap, m->sp_n + (size_t)n, sizeof(int32_t))) return m->overflow = true, -1;
    size_t old = m->scap;
    if (!grow((void **)&m->soff, &m->scap, m->ns + 1, sizeof(int64_t))) return m->overflow = true, -1;
    if (m->scap != old) {
        int32_t *a = realloc(m->scnt, sizeof(int32_t) * m->scap), *b = a ? realloc(m->sdist, sizeof(int32_t) * m->scap) : NULL;
        if (a) m->scnt = a;
        if (b) m->sdist = b;
        int32_t *c = b ? realloc(m->smask, sizeof(int32_t) * m->scap) : NULL;
        if (c) m->smask = c;
        int32_t *d = c ? realloc(m->smaxd, sizeof(int32_t) * m->scap) : NULL;
        if (d) m->smaxd = d;
        if (!d) return m->overflow = true, -1;
    }
    int32_t id = (int32_t)m->ns++;
    m->soff[id] = (int64_t)m->sp_n;
    m->scnt[id] = n;
    memcpy(m->spool + m->sp_n, t, sizeof(int32_t) * (size_t)n);
    m->sp_n += (size_t)n;
    int32_t d = G_INF;
    for (int32_t k = 0; k < n; k++) {
        int32_t x = t[k] == 0 ? 0 : m->ndist[t[k]];
        if (x < d) d = x;
    }
    m->sdist[id] = d;
    m->smask[id] = -1;
    m->smaxd[id] = 0;
    m->shash[h] = id;
    m->st.states = m->ns;
    if (!rehash_i32(&m->shash, &m->shmask, m->ns, state_hash, m)) return m->overflow = true, -1;
    return id;
}

/* Closure of the work items in m->work[0..nw) (pairs pos, parent) into a
 * state: rule references are expanded (tail calls push no return node),
 * finished alternatives return to their parent, byte sets become tops. */
static int32_t closure(grammar_matcher *m, size_t nw) {
    const grammar *g = m->g;
    size_t nt = 0;
    /* visited (pos, parent) pairs of this closure */
    memset(m->vkey, 0, sizeof(uint64_t) * ((size_t)m->vmask + 1));
    size_t nvis = 0, steps = 0;
    while (nw) {
        nw -= 2;
        int32_t pos = m->work[nw], par = m->work[nw + 1];
        if (++steps > G_MAX_STEPS) return m->overflow = true, GRAMMAR_DEAD;
        m->closure_steps++;
        uint64_t key = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)par) + 1;
        uint32_t h = mix(key) & m->vmask;
        bool seen = false;
        for (; m->vkey[h]; h = (h + 1) & m->vmask)
            if (m->vkey[h] == key) {
                seen = true;
                break;
            }
        if (seen) continue;
        m->vkey[h] = key;
        if (++nvis * 2 > m->vmask) {
            /* grow the visited set and re-insert */
            uint32_t om = m->vmask, nm = (om + 1) * 4 - 1;
            uint64_t *nv = calloc((size_t)nm + 1, sizeof(uint64_t));
            if (!nv) return m->overflow = true, GRAMMAR_DEAD;
            for (uint32_t k = 0; k <= om; k++)
                if (m->vkey[k]) {
                    uint32_t j = mix(m->vkey[k]) & nm;
                    while (nv[j]) j = (j + 1) & nm;
                    nv[j] = m->vkey[k];
                }
            free(m->vkey);
            m->vkey = nv;
            m->vmask = nm;
        }
        uint8_t k = g->kind[pos];
        if (k == EL_BYTES) {
            int32_t id = node_intern(m, pos, par);
            if (id < 0) return GRAMMAR_DEAD;
            if (!grow((void **)&m->tops, &m->tcap, nt + 1, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
            m->tops[nt++] = id;
        } else if (k == EL_END) {
            if (par == 0 || par == G_HOLE) { /* the root is done, or a local walk left its frames */
                if (!grow((void **)&m->tops, &m->tcap, nt + 1, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
                m->tops[nt++] = par;
            } else {
                if (!grow((void **)&m->work, &m->wcap, nw + 2, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
                m->work[nw++] = m->npos[par], m->work[nw++] = m->npar[par];
            }
        } else {
            int32_t r = g->arg[pos], cont = pos + 1;
            int32_t np = g->kind[cont] == EL_END ? par : node_intern(m, cont, par);
            if (np < 0) return GRAMMAR_DEAD;
            int32_t na = g->alt_n[r];
            if (!grow((void **)&m->work, &m->wcap, nw + 2 * (size_t)na, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
            for (int32_t a = 0; a < na; a++) m->work[nw++] = g->alt_start[g->alt_off[r] + a], m->work[nw++] = np;
        }
    }
    return state_intern(m, m->tops, (int32_t)nt);
}

static bool amemo_grow(grammar_matcher *m) {
    if ((m->an + 1) * 2 <= (size_t)m->amask + 1) return true;
    uint32_t om = m->amask, nm = (om + 1) * 2 - 1;
    uint64_t *k = calloc((size_t)nm + 1, sizeof(uint64_t));
    int32_t *v = malloc(sizeof(int32_t) * ((size_t)nm + 1));
    if (!k || !v) return free(k), free(v), false;
    for (uint32_t i = 0; i <= om; i++)
        if (m->akey[i]) {
            uint32_t j = mix(m->akey[i]) & nm;
            while (k[j]) j = (j + 1) & nm;
            k[j] = m->akey[i], v[j] = m->aval[i];
        }
    free(m->akey), free(m->aval);
    m->akey = k, m->aval = v, m->amask = nm;
    return true;
}

#define G_UNSEEN (-2)
#define G_DENSE_ROWS 65536 /* 64 MiB of rows at most */
#define G_ROW_CHUNK 2048   /* rows per allocation: 2 MiB, one huge page */

/* A dense row from the current chunk (rows are freed with the matcher
 * only). Chunks of G_ROW_CHUNK rows in huge pages where given: a 1 KiB row
 * per new state from malloc would fault a fresh 4 KiB page every four
 * states. NULL when out of memory. */
static int32_t *row_alloc(grammar_matcher *m) {
    if (m->row_used == G_ROW_CHUNK || !m->nchunks) {
        if (!grow((void **)&m->chunks, &m->chunk_cap, m->nchunks + 1, sizeof(int32_t *))) return NULL;
        void *p = NULL;
        size_t bytes = sizeof(int32_t) * 256 * G_ROW_CHUNK;
        if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
        m->chunks[m->nchunks++] = p;
        m->row_used = 0;
    }
    return m->chunks[m->nchunks - 1] + (size_t)256 * m->row_used++;
}

/* Records st --b--> r in st's dense row (allocating it; silently nothing
 * when out of memory or rows: the hash memo still has it). */
static void dense_put(grammar_matcher *m, int32_t st, uint8_t b, int32_t r) {
    if ((size_t)st >= m->ndrow) {
        size_t nc = m->ndrow ? m->ndrow : 256;
        while (nc <= (size_t)st) nc *= 2;
        int32_t **nd = realloc(m->drow, sizeof(int32_t *) * nc);
        if (!nd) return;
        memset(nd + m->ndrow, 0, sizeof(int32_t *) * (nc - m->ndrow));
        m->drow = nd, m->ndrow = nc;
    }
    int32_t *row = m->drow[st];
    if (!row) {
        if (m->nrows >= G_DENSE_ROWS || !(row = row_alloc(m))) return;
        for (int k = 0; k < 256; k++) row[k] = G_UNSEEN;
        m->drow[st] = row;
        m->nrows++;
    }
    row[b] = r;
}

static int32_t step_byte_memo(grammar_matcher *m, int32_t st, uint8_t b);

/* Fills st's whole dense row at once: bytes that the same subset of st's
 * tops accepts lead to the same state, so one closure per distinct subset
 * (a JSON string state: its character class, '\\', '"', the rest) instead of
 * one per byte. False (row untouched or partly filled, all entries right)
 * when st has over 64 tops, rows or memory ran out, or a bound was hit. */
static bool fill_row(grammar_matcher *m, int32_t st) {
    const grammar *g = m->g;
    int32_t n = m->scnt[st], pos[64], par[64], nk = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k];
        if (id == 0 || id == G_HOLE) continue;
        if (nk == 64) return false;
        pos[nk] = m->npos[id], par[nk] = m->npar[id], nk++;
    }
    dense_put(m, st, 0, G_UNSEEN); /* allocates the row */
    if ((size_t)st >= m->ndrow || !m->drow[st]) return false;
    uint64_t sig[256];
    for (int b = 0; b < 256; b++) {
        uint64_t x = 0;
        for (int32_t k = 0; k < nk; k++)
            if (set_has(g->sets[g->arg[pos[k]]], (unsigned)b)) x |= 1ull << k;
        sig[b] = x;
    }
    for (int b = 0; b < 256; b++) {
        if (m->drow[st][b] != G_UNSEEN) continue;
        int32_t r = GRAMMAR_DEAD;
        if (sig[b]) {
            size_t nw = 0;
            if (!grow((void **)&m->work, &m->wcap, 2 * (size_t)nk, sizeof(int32_t))) return false;
            for (int32_t k = 0; k < nk; k++)
                if (sig[b] >> k & 1) m->work[nw++] = pos[k] + 1, m->work[nw++] = par[k];
            r = closure(m, nw);
            if (m->overflow) return false;
        }
        for (int c = b; c < 256; c++) /* the row pointer is stable: rows are never moved */
            if (sig[c] == sig[b]) m->drow[st][c] = r;
    }
    return true;
}

static int32_t step_byte(grammar_matcher *m, int32_t st, uint8_t b) {
    if (st < 0) return GRAMMAR_DEAD;
    if ((size_t)st < m->ndrow && m->drow[st] && m->drow[st][b] != G_UNSEEN) return m->drow[st][b];
    if (!m->overflow && fill_row(m, st)) return m->drow[st][b];
    int32_t r = step_byte_memo(m, st, b);
    if (!m->overflow) dense_put(m, st, b, r);
    return r;
}

static int32_t step_byte_memo(grammar_matcher *m, int32_t st, uint8_t b) {
    uint64_t key = (uint64_t)st * 256 + b + 1;
    uint32_t h = mix(key) & m->amask;
    for (; m->akey[h]; h = (h + 1) & m->amask)
        if (m->akey[h] == key) return m->aval[h];
    const grammar *g = m->g;
    size_t nw = 0;
    int32_t n = m->scnt[st];
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k];
        if (id == 0 || id == G_HOLE) continue;
        int32_t pos = m->npos[id];
        if (!set_has(g->sets[g->arg[pos]], b)) continue;
        if (!grow((void **)&m->work, &m->wcap, nw + 2, sizeof(int32_t))) return m->overflow = true, GRAMMAR_DEAD;
        m->work[nw++] = pos + 1, m->work[nw++] = m->npar[id];
    }
    int32_t r = nw ? closure(m, nw) : GRAMMAR_DEAD;
    if (m->overflow) return GRAMMAR_DEAD; /* not memoised: the bound, not the grammar, said no */
    if (!amemo_grow(m)) return GRAMMAR_DEAD;
    h = mix(key) & m->amask;
    while (m->akey[h]) h = (h + 1) & m->amask;
    m->akey[h] = key, m->aval[h] = r;
    m->an++;
    return r;
}

grammar_matcher *grammar_matcher_create(const grammar *g, const grammar_vocab *v) {
    grammar_matcher *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->g = g, m->v = v;
    m->words = (v->n + 31) / 32;
    m->nhmask = m->shmask = 1023, m->amask = 4095, m->vmask = 255;
    m->nhash = malloc(sizeof(int32_t) * 1024), m->shash = malloc(sizeof(int32_t) * 1024);
    m->akey = calloc(4096, sizeof(uint64_t)), m->aval = malloc(sizeof(int32_t) * 4096);
    m->vkey = calloc(256, sizeof(uint64_t));
    m->tmp = malloc(sizeof(uint32_t) * (size_t)m->words);
    m->walk_state = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    m->chain = malloc(sizeof(int32_t) * (size_t)(v->max_len + 2));
    m->hh = malloc((size_t)v->max_len + 2);
    if (!m->hh || !m->nhash || !m->shash || !m->akey || !m->aval || !m->vkey || !m->tmp || !m->walk_state || !m->chain) {
        grammar_matcher_destroy(m);
        return NULL;
    }
    memset(m->nhash, 0xff, sizeof(int32_t) * 1024);
    memset(m->shash, 0xff, sizeof(int32_t) * 1024);
    /* node 0: the empty stack */
    if (!grow((void **)&m->npos, &m->ncap, 2, sizeof(int32_t)) || !(m->npar = malloc(sizeof(int32_t) * m->ncap)) ||
        !(m->ndist = malloc(sizeof(int32_t) * m->ncap))) {
        grammar_matcher_destroy(m);
        return NULL;
    }
    m->npos[0] = -1, m->npar[0] = 0, m->ndist[0] = 0;
    m->npos[G_HOLE] = -2, m->npar[G_HOLE] = G_HOLE, m->ndist[G_HOLE] = 0;
    m->nn = 2;
    size_t maskbytes = sizeof(uint32_t) * (size_t)m->words;
    m->maskcap = G_MASK_BYTES / (maskbytes ? maskbytes : 1);
    if (m->maskcap < 16) m->maskcap = 16;
    return m;
}

void grammar_matcher_destroy(grammar_matcher *m) {
    if (!m) return;
    free(m->npos), free(m->npar), free(m->ndist), free(m->nhash);
    free(m->spool), free(m->soff), free(m->scnt), free(m->sdist), free(m->smask), free(m->smaxd), free(m->shash);
    free(m->akey), free(m->aval), free(m->masks), free(m->tmp), free(m->work), free(m->tops), free(m->vkey);
    free(m->walk_state), free(m->chain), free(m->hh), free(m->kseen);
    free(m->kkey), free(m->kdeep), free(m->kslot);
    for (size_t k = 0; k < m->nkeys; k++) free(m->keys[k].acc), free(m->keys[k].list), free(m->keys[k].cd), free(m->keys[k].lcp);
    free(m->keys);
    for (size_t k = 0; k < m->nchunks; k++) free(m->chunks[k]);
    free(m->chunks), free(m->drow);
    free(m);
}

int32_t grammar_start(grammar_matcher *m) {
    const grammar *g = m->g;
    int32_t na = g->alt_n[g->root];
    if (!grow((void **)&m->work, &m->wcap, 2 * (size_t)na, sizeof(int32_t))) return GRAMMAR_DEAD;
    size_t nw = 0;
    for (int32_t a = 0; a < na; a++) m->work[nw++] = g->alt_start[g->alt_off[g->root] + a], m->work[nw++] = 0;
    return closure(m, nw);
}

int32_t grammar_advance_bytes(grammar_matcher *m, int32_t st, const uint8_t *s, int n) {
    for (int k = 0; k < n && st >= 0; k++) st = step_byte(m, st, s[k]);
    return st;
}

bool grammar_accepting(const grammar_matcher *m, int32_t st) {
    return st >= 0 && m->scnt[st] > 0 && m->spool[m->soff[st]] == 0; /* sorted: node 0 first */
}

int grammar_min_remaining(const grammar_matcher *m, int32_t st) { return st < 0 ? G_INF : m->sdist[st]; }

int32_t grammar_advance_token(grammar_matcher *m, int32_t st, int32_t t) {
    const grammar_vocab *v = m->v;
    if (st < 0 || t < 0 || t >= v->n) return GRAMMAR_DEAD;
    if (v->eog[t]) return grammar_accepting(m, st) ? st : GRAMMAR_DEAD;
    int64_t len = v->off[t + 1] - v->off[t];
    if (len == 0) return GRAMMAR_DEAD;
    return grammar_advance_bytes(m, st, v->blob + v->off[t], (int)len);
}

#define G_FIXED_MIN 16 /* subtrees smaller than this are walked: the check costs more */

/* Whether the state at every depth below a node is the same for all its
 * paths: every byte of sub (the subtree's byte set) steps chain[j-1] to one
 * chain[j], j = 1..h, chain[0] = s (a string's character loop maps s to
 * itself; a bounded string {0,n} to the next position; a dead state stays
 * dead). Then every token below ends in the chain state of its depth. */
static bool subtree_chain(grammar_matcher *m, int32_t s, const uint32_t *sub, int h, int32_t *chain) {
    chain[0] = s;
    for (int j = 1; j <= h; j++) {
        int32_t cur = chain[j - 1], nxt = G_UNSEEN;
        if (cur < 0) {
            chain[j] = GRAMMAR_DEAD;
            continue;
        }
        const int32_t *row = NULL;
        for (int w = 0; w < 8; w++)
            for (uint32_t bits = sub[w]; bits; bits &= bits - 1) {
                uint8_t b = (uint8_t)(w * 32 + __builtin_ctz(bits));
                row = (size_t)cur < m->ndrow ? m->drow[cur] : NULL;
                int32_t r = row && row[b] != G_UNSEEN ? row[b] : step_byte(m, cur, b);
                if (nxt == G_UNSEEN) nxt = r;
                else if (r != nxt) return false;
            }
        chain[j] = nxt;
        if (nxt == cur) { /* a fixpoint: the same below */
            for (int k = j + 1; k <= h; k++) chain[k] = nxt;
            break;
        }
    }
    return true;
}

/* One preorder walk of the trie from st into mask; budget < 0: no limit.
 * Returns the largest remaining distance among allowed tokens. */
static int32_t walk(grammar_matcher *m, int32_t st, int budget, uint32_t *mask) {
    const grammar_vocab *v = m->v;
    memset(mask, 0, sizeof(uint32_t) * (size_t)m->words);
    int32_t maxd = 0;
    m->st.walks++;
    if (st < 0) return 0;
    int32_t *ws = m->walk_state;
    ws[0] = st;
    int32_t i = 1, n = v->n_nodes;
    uint64_t visited = 0;
    while (i < n) {
        visited++;
        int d = v->ndepth[i];
        int32_t ps = ws[d - 1];
        const int32_t *row = (size_t)ps < m->ndrow ? m->drow[ps] : NULL;
        int32_t s = row && row[v->nbyte[i]] != G_UNSEEN ? row[v->nbyte[i]] : step_byte(m, ps, v->nbyte[i]);
        if (s < 0) {
            i = v->nskip[i];
            continue;
        }
        ws[d] = s;
        int32_t end = v->nskip[i];
        /* a state every byte below this node maps to itself (a JSON string's
         * character loop): the whole subtree's tokens end in s, so they are
         * all allowed or all refused alike, without visiting a node */
        int h = v->nheight[i];
        bool fixed = end - i > G_FIXED_MIN && subtree_chain(m, s, v->nsub + (size_t)i * 8, h, m->chain);
        if (fixed) { /* the tokens below, by their depth's chain state */
            const int32_t *ch = m->chain;
            bool all = true;
            for (int j = 1; j <= h && all; j++)
                all = ch[j] >= 0 && (budget < 0 || m->sdist[ch[j]] <= budget - 1);
            int32_t u0 = v->ntok_off[i + 1], u1 = v->ntok_off[end];
            for (int32_t k = u0; k < u1; k++) {
                int32_t t = v->ntok[k];
                int32_t cs = ch[v->ntok_len[k] - d];
                if (!all && (cs < 0 || (budget >= 0 && m->sdist[cs] > budget - 1))) continue;
                mask[t >> 5] |= 1u << (t & 31);
                if (m->sdist[cs] > maxd) maxd = m->sdist[cs];
            }
        }
        int32_t t0 = v->ntok_off[i], t1 = v->ntok_off[i + 1];
        if (t0 < t1) {
            int32_t dist = m->sdist[s];
            if (budget < 0 || dist <= budget - 1) {
                for (int32_t k = t0; k < t1; k++) mask[v->ntok[k] >> 5] |= 1u << (v->ntok[k] & 31);
                if (dist > maxd) maxd = dist;
            }
        }
        if (fixed) m->st.subtrees_skipped++;
        i = fixed ? end : i + 1;
    }
    m->st.nodes_visited += visited;
    if (grammar_accepting(m, st))
        for (int k = 0; k < v->n_eog; k++) mask[v->eog_ids[k] >> 5] |= 1u << (v->eog_ids[k] & 31);
    return maxd;
}

/* The mask cache's memory, in huge pages where the kernel gives them: a
 * fresh 4 KiB page costs a fault on first touch (over 10 us on a virtual
 * machine), and a 102k-token mask spans four. NULL on failure. */
static uint32_t *mask_pool(grammar_matcher *m) {
    size_t bytes = sizeof(uint32_t) * (size_t)m->words * m->maskcap;
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advice: nothing to do when refused */
#endif
    return p;
}

/* ---- key masks ----------------------------------------------------------------
 *
 * A state's mask is the union of its tops' masks, and a top's mask depends
 * on its whole stack only through the tokens that empty its upper frames.
 * So a top is masked by its key: its G_KEY_FRAMES upper frames over G_HOLE
 * ("whatever lies below"), or the top itself when its stack is no deeper.
 * One trie walk per key (from the local state {key}) sorts the vocabulary
 * into tokens accepted whatever lies below (a local path survives the whole
 * token, possibly ending exactly at G_HOLE: any real stack below continues
 * from there), tokens refused whatever lies below (every path dies without
 * ever reaching G_HOLE), and the few context-dependent rest (a path reached
 * G_HOLE before the token ended, and every local path died), which a mask
 * checks against the real state by stepping their bytes. The keys of a
 * grammar are few (a byte position times the continuation positions of its
 * rule, see grammar_matcher_prepare) and shared by every state, so a state
 * seen for the first time costs an OR of a few bitmaps and a short list.
 * Exact: a token is allowed by the real state iff some path of some top
 * survives it; a path that stays in its top's frames is the key's local
 * path, one that goes below them passed G_HOLE locally, so the token is in
 * acc or cd of that key. */

#define G_KEY_FRAMES 3
#define G_KEY_BYTES (256u << 20) /* key masks per matcher; past it masks fall back to whole walks */

static bool has_hole(const grammar_matcher *m, int32_t s) {
    const int32_t *t = m->spool + m->soff[s];
    int32_t n = m->scnt[s];
    return t[0] == G_HOLE || (t[0] == 0 && n > 1 && t[1] == G_HOLE);
}

/* The key node of real top id (id itself when its stack has at most
 * G_KEY_FRAMES frames) and the real node below the key's frames (0 for an
 * exact key). -1 when a bound was hit. */
static int32_t key_of(grammar_matcher *m, int32_t id, int32_t *deep) {
    if ((size_t)id < m->nkmap && m->kkey[id] != -2) return *deep = m->kdeep[id], m->kkey[id];
    int32_t fr[G_KEY_FRAMES], c = id, key = id, dp = 0;
    int nf = 0;
    for (; nf < G_KEY_FRAMES && c != 0; nf++) fr[nf] = c, c = m->npar[c];
    if (c != 0) { /* deeper than the frames: the key ends in G_HOLE */
        key = G_HOLE;
        for (int j = nf - 1; j >= 0 && key >= 0; j--) key = node_intern(m, m->npos[fr[j]], key);
        if (key < 0) return -1;
        dp = c;
    }
    if ((size_t)id >= m->nkmap) {
        size_t nc = m->nkmap ? m->nkmap : 1024;
        while (nc <= (size_t)id) nc *= 2;
        int32_t *a = realloc(m->kkey, sizeof(int32_t) * nc), *b = a ? realloc(m->kdeep, sizeof(int32_t) * nc) : NULL;
        if (a) m->kkey = a;
        if (!b) return -1;
        m->kdeep = b;
        for (size_t k = m->nkmap; k < nc; k++) m->kkey[k] = -2;
        m->nkmap = nc;
    }
    m->kkey[id] = key, m->kdeep[id] = dp;
    *deep = dp;
    return key;
}

static bool cd_push(struct gkey *e, size_t *cap, int32_t t) {
    if (!grow((void **)&e->cd, cap, (size_t)e->ncd + 1, sizeof(int32_t))) return false;
    e->cd[e->ncd++] = t;
    return true;
}

/* The gkey index of key node key, walking the trie for it the first time;
 * -1 when out of memory or over G_KEY_BYTES. */
static int32_t key_entry(grammar_matcher *m, int32_t key) {
    if ((size_t)key < m->nkslot && m->kslot[key] >= 0) return m->kslot[key];
    size_t words = (size_t)m->words;
    if (m->key_bytes + words * 4 > G_KEY_BYTES) return -1;
    if ((size_t)key >= m->nkslot) {
        size_t nc = m->nkslot ? m->nkslot : 1024;
        while (nc <= (size_t)key) nc *= 2;
        int32_t *a = realloc(m->kslot, sizeof(int32_t) * nc);
        if (!a) return -1;
        for (size_t k = m->nkslot; k < nc; k++) a[k] = -1;
        m->kslot = a, m->nkslot = nc;
    }
    if (!grow((void **)&m->keys, &m->kcap, m->nkeys + 1, sizeof(struct gkey))) return -1;
    int32_t one = key, st0 = state_intern(m, &one, 1);
    if (st0 < 0) return -1;
    struct gkey e = {.acc = calloc(words, sizeof(uint32_t))};
    if (!e.acc) return -1;
    size_t cdcap = 0;
    const grammar_vocab *v = m->v;
    int32_t *ws = m->walk_state;
    uint8_t *hh = m->hh;
    ws[0] = st0, hh[0] = 0; /* st0 is one byte position: no G_HOLE */
    int32_t i = 1, n = v->n_nodes;
    bool ok = true;
    uint64_t visited = 0;
    m->st.walks++;
    while (i < n && ok) {
        visited++;
        int d = v->ndepth[i];
        int32_t s = step_byte(m, ws[d - 1], v->nbyte[i]), end = v->nskip[i];
        if (s < 0) {
            if (hh[d - 1]) /* left the frames on the way: the real state decides */
                for (int32_t k = v->ntok_off[i]; k < v->ntok_off[end] && ok; k++) ok = cd_push(&e, &cdcap, v->ntok[k]);
            i = end;
            continue;
        }
        ws[d] = s, hh[d] = hh[d - 1] || has_hole(m, s);
        for (int32_t k = v->ntok_off[i]; k < v->ntok_off[i + 1]; k++) e.acc[v->ntok[k] >> 5] |= 1u << (v->ntok[k] & 31);
        if (v->ntok_off[i] < v->ntok_off[i + 1] && m->sdist[s] > e.maxlocal) e.maxlocal = m->sdist[s];
        /* a subtree every byte of which keeps a live state per depth: all accepted */
        int h = v->nheight[i];
        if (end - i > G_FIXED_MIN && subtree_chain(m, s, v->nsub + (size_t)i * 8, h, m->chain)) {
            bool all = true;
            for (int j = 1; j <= h && all; j++) all = m->chain[j] >= 0;
            if (all) {
                for (int32_t k = v->ntok_off[i + 1]; k < v->ntok_off[end]; k++) {
                    int32_t t = v->ntok[k], cs = m->chain[v->ntok_len[k] - d];
                    e.acc[t >> 5] |= 1u << (t & 31);
                    if (m->sdist[cs] > e.maxlocal) e.maxlocal = m->sdist[cs];
                }
                m->st.subtrees_skipped++;
                i = end;
                continue;
            }
        }
        i++;
    }
    m->st.nodes_visited += visited;
    if (ok && e.ncd && !(e.lcp = malloc(sizeof(uint16_t) * (size_t)e.ncd))) ok = false;
    if (!ok || m->overflow) {
        free(e.acc), free(e.cd), free(e.lcp);
        return -1;
    }
    for (int32_t k = 0; k < e.ncd; k++) {
        int l = 0;
        if (k) {
            const uint8_t *a = v->blob + v->off[e.cd[k - 1]], *b = v->blob + v->off[e.cd[k]];
            int la = (int)(v->off[e.cd[k - 1] + 1] - v->off[e.cd[k - 1]]), lb = (int)(v->off[e.cd[k] + 1] - v->off[e.cd[k]]);
            while (l < la && l < lb && a[l] == b[l]) l++;
        }
        e.lcp[k] = (uint16_t)l;
    }
    /* few tokens (a literal's first byte): a list, set bit by bit, instead
     * of a bitmap to OR word by word */
    int32_t cnt = 0;
    for (size_t w = 0; w < words; w++) cnt += __builtin_popcount(e.acc[w]);
    if ((size_t)cnt * 8 < words && (e.list = malloc(sizeof(int32_t) * (size_t)(cnt + 1)))) {
        for (size_t w = 0; w < words; w++)
            for (uint32_t x = e.acc[w]; x; x &= x - 1) e.list[e.nlist++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(x));
        free(e.acc);
        e.acc = NULL;
    }
    m->key_bytes += (e.acc ? words * 4 : (size_t)e.nlist * 4) + (size_t)e.ncd * 6;
    m->keys[m->nkeys] = e;
    m->kslot[key] = (int32_t)m->nkeys;
    m->st.keys = ++m->nkeys;
    m->st.key_bytes = m->key_bytes;
    return m->kslot[key];
}

/* st's mask (no budget) from its tops' keys into mask; false when a key
 * could not be had (the caller walks instead). *maxd: an upper bound on the
 * distance left after any allowed token (exact for the context-dependent
 * ones, key's maxlocal plus the distance below its frames for the rest). */
static bool mask_keyed(grammar_matcher *m, int32_t st, uint32_t *mask, int32_t *maxd) {
    const grammar_vocab *v = m->v;
    size_t words = (size_t)m->words;
    int32_t n = m->scnt[st], nseen = 0, md = 0;
    if (!grow((void **)&m->kseen, &m->kseen_cap, (size_t)n, sizeof(int32_t))) return false;
    memset(mask, 0, sizeof(uint32_t) * words);
    for (int32_t k = 0; k < n; k++) {
        int32_t id = m->spool[m->soff[st] + k], deep;
        if (id == 0) continue;
        int32_t key = key_of(m, id, &deep), ei = key < 0 ? -1 : key_entry(m, key);
        if (ei < 0) return false;
        const struct gkey *e = &m->keys[ei];
        int32_t d = e->maxlocal + (deep > 0 ? m->ndist[deep] : 0);
        if (d > md) md = d;
        bool dup = false;
        for (int32_t j = 0; j < nseen && !dup; j++) dup = m->kseen[j] == ei;
        if (dup) continue;
        m->kseen[nseen++] = ei;
        if (e->acc)
            for (size_t w = 0; w < words; w++) mask[w] |= e->acc[w];
        else
            for (int32_t j = 0; j < e->nlist; j++) mask[e->list[j] >> 5] |= 1u << (e->list[j] & 31);
    }
    /* the context-dependent tokens, stepped from st with the trie order's
     * shared prefixes: ws[0..vd] are the states of the last stepped prefix */
    int32_t *ws = m->walk_state;
    for (int32_t j = 0; j < nseen; j++) {
        const struct gkey *e = &m->keys[m->kseen[j]];
        int vd = 0;
        ws[0] = st;
        for (int32_t k = 0; k < e->ncd; k++) {
            int32_t t = e->cd[k];
            if (e->lcp[k] < vd) vd = e->lcp[k];
            if (mask[t >> 5] >> (t & 31) & 1) continue;
            const uint8_t *b = v->blob + v->off[t];
            int len = (int)(v->off[t + 1] - v->off[t]);
            int32_t s = ws[vd];
            while (vd < len && s >= 0) s = step_byte(m, s, b[vd]), ws[++vd] = s;
            m->st.cd_checked++;
            if (s < 0 || vd < len) continue;
            mask[t >> 5] |= 1u << (t & 31);
            if (m->sdist[s] > md) md = m->sdist[s];
        }
    }
    if (m->overflow) return false;
    if (grammar_accepting(m, st))
        for (int k = 0; k < v->n_eog; k++) mask[v->eog_ids[k] >> 5] |= 1u << (v->eog_ids[k] & 31);
    *maxd = md;
    return true;
}

/* ---- preparing every key ------------------------------------------------------ */

#define G_PREP_PAR 4096   /* continuation positions per rule */
#define G_PREP_KEYS 16384 /* keys prepared at most (the rest on first use) */
#define G_PREP_NODES (16u << 20) /* trie nodes prepare visits at most (a few hundred ms) */
#define G_PREP_STEPS (8u << 20)  /* closure work items prepare spends at most */
#define G_PREP_WORK (8u << 20)   /* set operations finding the continuation positions */
#define G_PREFAULT_BYTES (8u << 20) /* cached masks' memory touched by prepare */

typedef struct {
    int32_t *v;
    size_t n, cap;
} i32set;

static bool set_add(i32set *s, int32_t x, bool *changed, uint64_t *work) {
    *work += s->n + 1;
    if (*work > G_PREP_WORK) return false;
    for (size_t k = 0; k < s->n; k++)
        if (s->v[k] == x) return true;
    if (s->n >= G_PREP_PAR || !grow((void **)&s->v, &s->cap, s->n + 1, sizeof(int32_t))) return false;
    s->v[s->n++] = x;
    *changed = true;
    return true;
}

typedef struct {
    grammar_matcher *m;
    const int32_t *rule_of;
    const i32set *par;
    int32_t fr[G_KEY_FRAMES];
    int nkeys;
    uint64_t node_cap, step_cap;
    bool failed;
} prep;

/* Whether prepare has used its budget (the keys left are made on first use). */
static bool prep_spent(const prep *P) {
    return P->nkeys >= G_PREP_KEYS || P->m->st.nodes_visited >= P->node_cap || P->m->closure_steps >= P->step_cap;
}

static void prep_key(prep *P, int j, int32_t bottom) {
    int32_t node = bottom;
    for (int i = j - 1; i >= 0 && node >= 0; i--) node = node_intern(P->m, P->fr[i], node);
    if (node < 0 || key_entry(P->m, node) < 0) P->failed = true;
    else P->nkeys++;
}

/* Keys with frames fr[0..j): every way the frames continue below fr[j - 1]. */
static void prep_rec(prep *P, int j) {
    const i32set *s = &P->par[P->rule_of[P->fr[j - 1]]];
    bool hole = false;
    for (size_t k = 0; k < s->n && !P->failed && !prep_spent(P); k++) {
        int32_t x = s->v[k];
        if (x == 0) prep_key(P, j, 0);
        else if (j == G_KEY_FRAMES) {
            if (!hole) prep_key(P, j, G_HOLE), hole = true;
        } else {
            P->fr[j] = x;
            prep_rec(P, j + 1);
        }
    }
}

int grammar_matcher_prepare(grammar_matcher *m) {
    const grammar *g = m->g;
    int32_t *rule_of = malloc(sizeof(int32_t) * (size_t)(g->n_code + 1));
    i32set *par = calloc((size_t)g->n_rules, sizeof(i32set));
    int result = -1;
    if (!rule_of || !par) goto done;
    for (int r = 0; r < g->n_rules; r++)
        for (int32_t a = 0; a < g->alt_n[r]; a++)
            for (int32_t p = g->alt_start[g->alt_off[r] + a];; p++) {
                rule_of[p] = r;
                if (g->kind[p] == EL_END) break;
            }
    /* the positions a rule's frame can return to (0: the end of the output);
     * a reference in tail position returns where its own rule does */
    bool changed = true, ok = true;
    uint64_t work = 0;
    ok = set_add(&par[g->root], 0, &changed, &work);
    while (changed && ok) {
        changed = false;
        for (int32_t p = 0; p < g->n_code && ok; p++) {
            if (g->kind[p] != EL_REF) continue;
            i32set *dst = &par[g->arg[p]];
            if (g->kind[p + 1] != EL_END) ok = set_add(dst, p + 1, &changed, &work);
            else {
                const i32set *src = &par[rule_of[p]];
                for (size_t k = 0; k < src->n && ok; k++) ok = set_add(dst, src->v[k], &changed, &work);
            }
        }
    }
    if (!ok) goto done;
    prep P = {.m = m, .rule_of = rule_of, .par = par, .node_cap = m->st.nodes_visited + G_PREP_NODES,
              .step_cap = m->closure_steps + G_PREP_STEPS};
    for (int32_t p = 0; p < g->n_code && !P.failed && !prep_spent(&P); p++)
        if (g->kind[p] == EL_BYTES) P.fr[0] = p, prep_rec(&P, 1);
    result = P.failed ? -1 : P.nkeys;
    /* touch the rest of the current row chunk and the first masks' memory
     * now, not a page fault every few new states later */
    if (m->nchunks && m->row_used < G_ROW_CHUNK)
        memset(m->chunks[m->nchunks - 1] + (size_t)256 * m->row_used, 0xff,
               sizeof(int32_t) * 256 * (G_ROW_CHUNK - m->row_used));
    if (!m->masks && (m->masks = mask_pool(m))) {
        size_t bytes = sizeof(uint32_t) * (size_t)m->words * m->maskcap;
        memset(m->masks, 0, bytes < G_PREFAULT_BYTES ? bytes : G_PREFAULT_BYTES);
    }
done:
    if (par)
        for (int r = 0; r < g->n_rules; r++) free(par[r].v);
    free(par), free(rule_of);
    return result;
}

const uint32_t *grammar_mask(grammar_matcher *m, int32_t st, int budget) {
    m->st.masks++;
    if (st < 0) { /* dead (only after a state bound was hit): end the output */
        memset(m->tmp, 0, sizeof(uint32_t) * (size_t)m->words);
        for (int k = 0; k < m->v->n_eog; k++) m->tmp[m->v->eog_ids[k] >> 5] |= 1u << (m->v->eog_ids[k] & 31);
        return m->tmp;
    }
    int32_t slot = m->smask[st];
    if (slot < 0) {
        if (m->nmask == m->maskcap) { /* full: start over (the states stay) */
            for (size_t k = 0; k < m->ns; k++) m->smask[k] = -1;
            m->nmask = 0;
        }
        if (!m->masks) {
            m->masks = mask_pool(m);
            if (!m->masks) {
                walk(m, st, budget, m->tmp);
                return m->tmp;
            }
        }
        slot = (int32_t)m->nmask++;
        uint32_t *dst = m->masks + (size_t)slot * (size_t)m->words;
        int32_t maxd;
        if (!mask_keyed(m, st, dst, &maxd)) maxd = walk(m, st, -1, dst); /* may grow smaxd */
        m->smaxd[st] = maxd;
        m->smask[st] = slot;
    } else {
        m->st.mask_hits++;
    }
    if (budget >= 0 && budget - 1 < m->smaxd[st]) {
        walk(m, st, budget, m->tmp);
        return m->tmp;
    }
    return m->masks + (size_t)slot * (size_t)m->words;
}

void grammar_mask_logits(grammar_matcher *m, int32_t st, int budget, float *logits) {
    const uint32_t *mask = grammar_mask(m, st, budget);
    int n = m->v->n;
    for (int w = 0; w < m->words; w++) {
        uint32_t x = mask[w];
        if (x == 0xFFFFFFFFu) continue;
        int t0 = w * 32, t1 = t0 + 32 < n ? t0 + 32 : n;
        for (int t = t0; t < t1; t++)
            if (!(x >> (t - t0) & 1)) logits[t] = -INFINITY;
    }
}

bool grammar_allows(grammar_matcher *m, int32_t st, int budget, int32_t t) {
    if (t < 0 || t >= m->v->n) return false;
    const uint32_t *mask = grammar_mask(m, st, budget);
    return mask[t >> 5] >> (t & 31) & 1;
}

void grammar_matcher_stats(const grammar_matcher *m, grammar_stats *out) { *out = m->st; }
