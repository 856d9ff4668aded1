/* grammar_parse.c — the GBNF parser: rules, alternatives, character classes
 * (as UTF-8 byte-set sequences), repetitions (as helper rules), checks for
 * undefined rules and left recursion, and the compiled form the matcher runs;
 * the built-in JSON grammar. */
#include "engine/grammar/grammar_internal.h"

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

/* ---- parser ---------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n, i;
    grule *rules;
    size_t n_rules, cap_rules;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    size_t n_elems;
    grammar_limits lim;
    int32_t *rhash;            /* (rhcap) open addressing: named rules by name, -1 empty */
    size_t rhcap, rhn;
    int32_t *shash;            /* (shcap) byte sets >= 256 by content, -1 empty */
    size_t shcap, shn;
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
    if (++p->n_elems > p->lim.max_elements)
        return PERR(p, "grammar too large: over %zu elements after expanding repetitions (limit %s)", p->lim.max_elements,
                    p->lim.elements_key ? p->lim.elements_key : "grammar.max_elements");
    if (!grow((void **)&q->v, &q->cap, q->n + 1, sizeof(gel))) return PERR(p, "out of memory");
    q->v[q->n++] = (gel){kind, arg};
    return true;
}

/* ---- hash tables: rule names and byte sets in O(1), so a grammar of n rules
 * parses in O(n), not O(n^2) ---------------------------------------------------- */

static uint64_t hash_bytes(const void *d, size_t n) {
    const uint8_t *b = d;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Grows table t (cap slots, -1 empty) to hold one more of n entries, rehashing
 * with key(i) = the hash of entry i. */
static bool table_reserve(int32_t **t, size_t *cap, size_t n, uint64_t (*key)(const gparser *, int32_t), const gparser *p) {
    if ((n + 1) * 2 <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 1024;
    while ((n + 1) * 2 > nc) nc *= 2;
    int32_t *nt = malloc(sizeof(int32_t) * nc);
    if (!nt) return false;
    memset(nt, 0xff, sizeof(int32_t) * nc);
    for (size_t i = 0; i < *cap; i++) {
        int32_t v = (*t)[i];
        if (v < 0) continue;
        size_t h = (size_t)key(p, v) & (nc - 1);
        while (nt[h] >= 0) h = (h + 1) & (nc - 1);
        nt[h] = v;
    }
    free(*t);
    *t = nt, *cap = nc;
    return true;
}

static uint64_t rule_key(const gparser *p, int32_t r) { return hash_bytes(p->rules[r].name, strlen(p->rules[r].name)); }
static uint64_t set_key(const gparser *p, int32_t k) { return hash_bytes(p->sets[k], 32); }

static int new_rule(gparser *p, const char *name, size_t nlen, int origin) {
    if (p->n_rules >= (size_t)p->lim.max_rules)
        return PERR(p, "grammar too large: over %d rules, helper rules of repetitions and groups included (limit %s)",
                    p->lim.max_rules, p->lim.rules_key ? p->lim.rules_key : "grammar.max_rules"), -1;
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof(grule))) return PERR(p, "out of memory"), -1;
    grule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof(*r));
    if (!(r->name = malloc(nlen + 1))) return PERR(p, "out of memory"), -1;
    memcpy(r->name, name, nlen);
    r->name[nlen] = 0;
    r->origin = origin < 0 ? (int)p->n_rules : origin;
    r->use_at = (size_t)-1;
    if (name[0] != '_') { /* helper rules are never looked up by name */
        if (!table_reserve(&p->rhash, &p->rhcap, p->rhn, rule_key, p)) return PERR(p, "out of memory"), -1;
        size_t h = (size_t)hash_bytes(name, nlen) & (p->rhcap - 1);
        while (p->rhash[h] >= 0) h = (h + 1) & (p->rhcap - 1);
        p->rhash[h] = (int32_t)p->n_rules;
        p->rhn++;
    }
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
    if (!p->rhcap || (nlen && name[0] == '_')) return -1;
    for (size_t h = (size_t)hash_bytes(name, nlen) & (p->rhcap - 1); p->rhash[h] >= 0; h = (h + 1) & (p->rhcap - 1)) {
        const char *rn = p->rules[p->rhash[h]].name;
        if (strlen(rn) == nlen && !memcmp(rn, name, nlen)) return p->rhash[h];
    }
    return -1;
}

static int add_set(gparser *p, const uint8_t set[32]) {
    size_t h0 = (size_t)hash_bytes(set, 32);
    if (p->shcap)
        for (size_t h = h0 & (p->shcap - 1); p->shash[h] >= 0; h = (h + 1) & (p->shcap - 1))
            if (!memcmp(p->sets[p->shash[h]], set, 32)) return p->shash[h];
    if (!grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, 32)) return PERR(p, "out of memory"), -1;
    if (!table_reserve(&p->shash, &p->shcap, p->shn, set_key, p)) return PERR(p, "out of memory"), -1;
    memcpy(p->sets[p->n_sets], set, 32);
    size_t h = h0 & (p->shcap - 1);
    while (p->shash[h] >= 0) h = (h + 1) & (p->shcap - 1);
    p->shash[h] = (int32_t)p->n_sets;
    p->shn++;
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
    free(p->rhash);
    free(p->shash);
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

/* Fewest bytes each rule can match (G_INF: it never finishes): Knuth's
 * generalisation of Dijkstra's algorithm (an alternative's length is a sum,
 * so a rule's length is final when it is the smallest candidate left). Each
 * alternative waits for its referenced rules; O(E log E) in the references,
 * where a fixpoint sweep took a pass per rule of a chain (O(n^2)).
 * Returns false when out of memory. */
typedef struct {
    int32_t len, rule;
} mlcand;

static void heap_push(mlcand *h, size_t *n, mlcand c) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2].len > c.len) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = c;
}

static mlcand heap_pop(mlcand *h, size_t *n) {
    mlcand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].len < h[c].len) c++;
        if (h[c].len >= last.len) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static bool rule_minlen(const gparser *p, int32_t *ml) {
    size_t nr = p->n_rules, na = 0, nref = 0;
    for (size_t r = 0; r < nr; r++) {
        na += p->rules[r].n;
        for (size_t a = 0; a < p->rules[r].n; a++)
            for (size_t k = 0; k < p->rules[r].alts[a].n; k++) nref += p->rules[r].alts[a].v[k].kind == EL_REF;
    }
    int32_t *alt_rule = malloc(sizeof(int32_t) * (na + 1)), *pending = malloc(sizeof(int32_t) * (na + 1));
    int64_t *sum = malloc(sizeof(int64_t) * (na + 1));
    size_t *occ_off = calloc(nr + 1, sizeof(size_t));
    int32_t *occ = malloc(sizeof(int32_t) * (nref + 1));
    mlcand *heap = malloc(sizeof(mlcand) * (na + 1));
    bool *done = calloc(nr + 1, 1);
    bool ok = alt_rule && pending && sum && occ_off && occ && heap && done;
    size_t nh = 0;
    if (ok) {
        size_t ai = 0;
        for (size_t r = 0; r < nr; r++)
            for (size_t a = 0; a < p->rules[r].n; a++, ai++) {
                const gseq *q = &p->rules[r].alts[a];
                alt_rule[ai] = (int32_t)r, pending[ai] = 0, sum[ai] = 0;
                for (size_t k = 0; k < q->n; k++)
                    if (q->v[k].kind == EL_REF) pending[ai]++, occ_off[q->v[k].arg + 1]++;
                    else sum[ai]++;
            }
        for (size_t r = 0; r < nr; r++) occ_off[r + 1] += occ_off[r];
        size_t *fill = malloc(sizeof(size_t) * (nr + 1));
        if (!fill) ok = false;
        if (ok) {
            memcpy(fill, occ_off, sizeof(size_t) * (nr + 1));
            ai = 0;
            for (size_t r = 0; r < nr; r++)
                for (size_t a = 0; a < p->rules[r].n; a++, ai++) {
                    const gseq *q = &p->rules[r].alts[a];
                    for (size_t k = 0; k < q->n; k++)
                        if (q->v[k].kind == EL_REF) occ[fill[q->v[k].arg]++] = (int32_t)ai;
                    if (!pending[ai]) heap_push(heap, &nh, (mlcand){(int32_t)(sum[ai] < G_INF ? sum[ai] : G_INF), (int32_t)r});
                }
            free(fill);
        }
    }
    for (size_t r = 0; r < nr; r++) ml[r] = G_INF;
    while (ok && nh) {
        mlcand c = heap_pop(heap, &nh);
        if (done[c.rule] || c.len >= G_INF) continue;
        done[c.rule] = true;
        ml[c.rule] = c.len;
        for (size_t o = occ_off[c.rule]; o < occ_off[c.rule + 1]; o++) {
            int32_t a = occ[o];
            sum[a] += c.len;
            if (--pending[a] == 0 && !done[alt_rule[a]])
                heap_push(heap, &nh, (mlcand){(int32_t)(sum[a] < G_INF ? sum[a] : G_INF), alt_rule[a]});
        }
    }
    free(alt_rule), free(pending), free(sum), free(occ_off), free(occ), free(heap), free(done);
    return ok;
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

grammar_limits grammar_default_limits(void) {
    return (grammar_limits){.max_bytes = GRAMMAR_MAX_TEXT, .max_rules = GRAMMAR_MAX_RULES, .max_elements = GRAMMAR_MAX_ELEMENTS};
}

grammar *grammar_parse(const char *text, size_t len, char *err, size_t errlen) {
    grammar_limits lim = grammar_default_limits();
    return grammar_parse_limited(text, len, &lim, err, errlen);
}

grammar *grammar_parse_limited(const char *text, size_t len, const grammar_limits *lim, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof(dummy);
    if (len > lim->max_bytes) {
        snprintf(err, errlen, "line 1, column 1: grammar of %zu bytes is over the limit of %zu (%s)", len,
                 lim->max_bytes, lim->bytes_key ? lim->bytes_key : "grammar.max_bytes");
        return NULL;
    }
    gparser P = {.s = text, .n = len, .err = err, .errlen = errlen, .lim = *lim}, *p = &P;
    if (p->lim.max_elements > GRAMMAR_MAX_ELEMENTS) p->lim.max_elements = GRAMMAR_MAX_ELEMENTS;
    if (p->lim.max_rules <= 0 || p->lim.max_rules > GRAMMAR_MAX_RULES) p->lim.max_rules = GRAMMAR_MAX_RULES;
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
    if (!rule_minlen(p, ml)) goto fail_oom;
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

