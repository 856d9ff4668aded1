/* json_schema.c — JSON Schema subset to GBNF (see json_schema.h). One rule
 * per schema node (r0, r1, ...), shared primitives at the end; $defs are
 * visited once under their own rule, so recursive schemas terminate. */
#include "gateway/json_schema.h"

#include "gateway/json_range.h"
#include "gateway/json_regex.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JS_MAX_DEPTH 64
#define JS_MAX_REPEAT 1000

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

typedef struct {
    const json_t *root;
    js_limits lim;
    sbuf out;
    int next;
    char *err;
    size_t errlen;
    bool failed;
    const char *def_names[256];
    int def_rule[256];
    int n_defs;
} jsc;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->s, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q, b->cap = c;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_add(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* "at PATH: reason", the reason always whole: a path too long for err is
 * shortened from its start ("at …/properties/a/items: reason"). */
static bool fail(jsc *c, const char *path, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char reason[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    size_t room = c->errlen > strlen(reason) + 8 ? c->errlen - strlen(reason) - 8 : 0, pl = strlen(path);
    if (pl <= room) snprintf(c->err, c->errlen, "at %s: %s", path, reason);
    else if (room > 4) snprintf(c->err, c->errlen, "at ...%s: %s", path + pl - (room - 3), reason);
    else snprintf(c->err, c->errlen, "%s", reason);
    return false;
}

/* A GBNF literal for bytes s[0..n): quotes, backslashes and control bytes
 * escaped, other bytes (UTF-8) as they are. */
static void sb_lit(sbuf *b, const char *s, size_t n) {
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_add(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_printf(b, "\\x%02X", ch);
        } else {
            sb_add(b, (const char *)&ch, 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* The JSON text of a value (compact, keys in order) as a literal. */
static bool sb_json_lit(jsc *c, const json_t *v, const char *path) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!t) return fail(c, path, "value cannot be encoded");
    sb_lit(&c->out, t, strlen(t));
    free(t);
    return true;
}

static int visit(jsc *c, const json_t *s, const char *path, int depth);

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "strict", "$defs",
                                          "definitions", "contentEncoding", "contentMediaType", "nullable"};
static const char *const handled[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                      "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf",
                                      "$ref", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                      "pattern", "allOf"};

static bool in_list(const char *k, const char *const *l, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i])) return true;
    return false;
}

static bool get_count(jsc *c, const json_t *s, const char *key, long *out, const char *path) {
    const json_t *v = json_object_get(s, key);
    if (!v) return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail(c, path, "'%s' must be a non-negative integer", key);
    *out = (long)json_integer_value(v);
    return true;
}

static int new_rule(jsc *c) { return c->next++; }

/* A lower (or upper) bound: key (e.g. minimum) and its exclusive form, either
 * a number (draft 6+) or, in draft 4, a boolean beside key. */
static bool get_bound(jsc *c, const json_t *s, const char *key, const char *ekey, bool *has, double *v, bool *excl,
                      const char *path) {
    const json_t *k = json_object_get(s, key), *e = json_object_get(s, ekey);
    if (k && !json_is_number(k)) return fail(c, path, "'%s' must be a number", key);
    if (e && !json_is_number(e) && !json_is_boolean(e)) return fail(c, path, "'%s' must be a number", ekey);
    if (k) *has = true, *v = json_number_value(k), *excl = json_is_true(e);
    if (e && json_is_number(e)) {
        double x = json_number_value(e);
        /* both given: the tighter one */
        bool lower = key[1] == 'i'; /* "minimum" */
        if (!*has || (lower ? x >= *v : x <= *v)) *has = true, *v = x, *excl = true;
    }
    return true;
}

/* "{m,n}" repetition text of x (n < 0: unbounded) into the output. */
static void sb_repeat(sbuf *b, const char *x, long lo, long hi) {
    if (hi < 0) sb_printf(b, "%s{%ld,}", x, lo);
    else sb_printf(b, "%s{%ld,%ld}", x, lo, hi);
}

static int visit_object(jsc *c, const json_t *s, const char *path, int depth) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, path, "'properties' must be an object"), -1;
    if (req && !json_is_array(req)) return fail(c, path, "'required' must be an array"), -1;
    size_t np = props ? json_object_size(props) : 0;
    if (req)
        for (size_t i = 0; i < json_array_size(req); i++) {
            const json_t *k = json_array_get(req, i);
            if (!json_is_string(k)) return fail(c, path, "'required' must list strings"), -1;
            if (!props || !json_object_get(props, json_string_value(k)))
                return fail(c, path, "required property '%s' is not in 'properties'", json_string_value(k)), -1;
        }
    if (np == 0) {
        /* a map: any keys, values of additionalProperties (or anything) */
        int val = -2; /* -2: the generic value */
        if (addl && json_is_object(addl)) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s/additionalProperties", path);
            if ((val = visit(c, addl, sub, depth + 1)) < 0) return -1;
        } else if (addl && json_is_false(addl)) {
            int r = new_rule(c);
            sb_printf(&c->out, "r%d ::= \"{\" ws \"}\" ws\n", r);
            return r;
        }
        int r = new_rule(c);
        char v[32];
        if (val == -2) snprintf(v, sizeof v, "value");
        else snprintf(v, sizeof v, "r%d", val);
        sb_printf(&c->out, "r%d ::= \"{\" ws ( string \":\" ws %s ( \",\" ws string \":\" ws %s )* )? \"}\" ws\n", r, v, v);
        return r;
    }
    /* each property's key-value rule */
    int *kv = calloc(np, sizeof(int));
    bool *isreq = calloc(np, sizeof(bool));
    if (!kv || !isreq) {
        free(kv), free(isreq);
        return fail(c, path, "out of memory"), -1;
    }
    size_t i = 0;
    const char *key;
    json_t *sub;
    int r = -1;
    json_object_foreach((json_t *)props, key, sub) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s/properties/%s", path, key);
        int vr = visit(c, sub, p2, depth + 1);
        if (vr < 0) goto out;
        kv[i] = new_rule(c);
        json_t *kj = json_string(key);
        char *ks = kj ? json_dumps(kj, JSON_ENCODE_ANY) : NULL;
        json_decref(kj);
        sb_printf(&c->out, "r%d ::= ", kv[i]);
        sb_lit(&c->out, ks ? ks : "\"\"", ks ? strlen(ks) : 2);
        free(ks);
        sb_printf(&c->out, " ws \":\" ws r%d\n", vr);
        if (req)
            for (size_t k = 0; k < json_array_size(req); k++)
                if (!strcmp(json_string_value(json_array_get(req, k)), key)) isreq[i] = true;
        i++;
    }
    r = new_rule(c);
    /* required ones first in schema order, then the optional ones, each optional with its comma */
    size_t nreq = 0;
    for (i = 0; i < np; i++) nreq += isreq[i];
    if (nreq) {
        sb_printf(&c->out, "r%d ::= \"{\" ws", r);
        bool first = true;
        for (i = 0; i < np; i++)
            if (isreq[i]) sb_printf(&c->out, first ? " r%d" : " \",\" ws r%d", kv[i]), first = false;
        for (i = 0; i < np; i++)
            if (!isreq[i]) sb_printf(&c->out, " ( \",\" ws r%d )?", kv[i]);
        sb_printf(&c->out, " \"}\" ws\n");
    } else {
        /* any in-order subset: chain_i ::= kv_i ( "," ws chain_{i+1} )? | chain_{i+1} */
        int base = c->next;
        c->next += (int)np;
        for (i = 0; i < np; i++) {
            if (i + 1 < np)
                sb_printf(&c->out, "r%d ::= r%d ( \",\" ws r%d )? | r%d\n", base + (int)i, kv[i], base + (int)i + 1,
                          base + (int)i + 1);
            else sb_printf(&c->out, "r%d ::= r%d\n", base + (int)i, kv[i]);
        }
        sb_printf(&c->out, "r%d ::= \"{\" ws r%d? \"}\" ws\n", r, base);
    }
out:
    free(kv), free(isreq);
    return c->failed ? -1 : r;
}

static int visit_type(jsc *c, const json_t *s, const char *type, const char *path, int depth) {
    if (!strcmp(type, "object")) return visit_object(c, s, path, depth);
    if (!strcmp(type, "number") || !strcmp(type, "integer")) {
        js_bounds bd = {0};
        if (!get_bound(c, s, "minimum", "exclusiveMinimum", &bd.has_lo, &bd.lo, &bd.lo_excl, path) ||
            !get_bound(c, s, "maximum", "exclusiveMaximum", &bd.has_hi, &bd.hi, &bd.hi_excl, path))
            return -1;
        int r = new_rule(c);
        if (!bd.has_lo && !bd.has_hi) {
            sb_printf(&c->out, "r%d ::= %s\n", r, type);
            return r;
        }
        char msg[160];
        char *ex = js_range_to_gbnf(!strcmp(type, "integer"), &bd, msg, sizeof msg);
        if (!ex) return fail(c, path, "%s", msg), -1;
        sb_printf(&c->out, "r%d ::= ", r);
        sb_add(&c->out, ex, strlen(ex));
        sb_printf(&c->out, " ws\n");
        free(ex);
        return r;
    }
    if (!strcmp(type, "null") || !strcmp(type, "boolean")) {
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::= %s\n", r, type);
        return r;
    }
    if (!strcmp(type, "string")) {
        const json_t *f = json_object_get(s, "format");
        long lo = 0, hi = -1;
        if (!get_count(c, s, "minLength", &lo, path) || !get_count(c, s, "maxLength", &hi, path)) return -1;
        if (hi >= 0 && hi < lo) return fail(c, path, "maxLength below minLength"), -1;
        if (lo > JS_MAX_REPEAT || hi > JS_MAX_REPEAT) return fail(c, path, "string lengths above %d are not supported", JS_MAX_REPEAT), -1;
        int r = new_rule(c);
        const json_t *pat = json_object_get(s, "pattern");
        if (pat) {
            if (!json_is_string(pat)) return fail(c, path, "'pattern' must be a string"), -1;
            if (f || json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
                return fail(c, path, "'pattern' with 'format', minLength or maxLength is not supported"), -1;
            char msg[160];
            char *ex = js_regex_to_gbnf(json_string_value(pat), json_string_length(pat), msg, sizeof msg);
            if (!ex) return fail(c, path, "%s", msg), -1;
            sb_printf(&c->out, "r%d ::= \"\\\"\" ", r);
            sb_add(&c->out, ex, strlen(ex));
            sb_printf(&c->out, " \"\\\"\" ws\n");
            free(ex);
            return r;
        }
        if (f) {
            const char *fs = json_is_string(f) ? json_string_value(f) : "";
            if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
                return fail(c, path, "'format' with minLength/maxLength is not supported"), -1;
            if (!strcmp(fs, "date")) sb_printf(&c->out, "r%d ::= \"\\\"\" date \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "time")) sb_printf(&c->out, "r%d ::= \"\\\"\" time \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "date-time")) sb_printf(&c->out, "r%d ::= \"\\\"\" date \"T\" time \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "uuid"))
                sb_printf(&c->out, "r%d ::= \"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                                   "[0-9a-f]{12} \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "email"))
                /* a conservative address: dot-separated atoms of [A-Za-z0-9_+-] (no leading, trailing or
                 * double dot), labels starting alphanumeric, a letters-only top-level domain */
                sb_printf(&c->out, "r%d ::= \"\\\"\" [a-zA-Z0-9_+-]{1,32} ( \".\" [a-zA-Z0-9_+-]{1,32} ){0,3} \"@\" "
                                   "( [a-zA-Z0-9] [a-zA-Z0-9-]{0,62} \".\" ){1,4} [a-zA-Z]{2,24} \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "uri"))
                sb_printf(&c->out, "r%d ::= \"\\\"\" [a-z] [a-z0-9+.-]{0,15} \"://\" [a-zA-Z0-9] [a-zA-Z0-9.-]{0,252} "
                                   "( \":\" [0-9]{1,5} )? ( \"/\" [a-zA-Z0-9._~%%!$&'()*+,;=:@-]* )* "
                                   "( \"?\" [a-zA-Z0-9._~%%!$&'()*+,;=:@/?-]* )? \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "ipv4"))
                sb_printf(&c->out, "r%d ::= \"\\\"\" octet \".\" octet \".\" octet \".\" octet \"\\\"\" ws\n", r);
            else if (!strcmp(fs, "hostname"))
                sb_printf(&c->out, "r%d ::= \"\\\"\" [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )? "
                                   "( \".\" [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )? )* \"\\\"\" ws\n", r);
            else return fail(c, path, "'format' '%s' is not supported (date, time, date-time, uuid, email, uri, ipv4, "
                                      "hostname are)", fs), -1;
            return r;
        }
        if (lo == 0 && hi < 0) {
            sb_printf(&c->out, "r%d ::= string\n", r);
            return r;
        }
        sb_printf(&c->out, "r%d ::= \"\\\"\" ", r);
        sb_repeat(&c->out, "char", lo, hi);
        sb_printf(&c->out, " \"\\\"\" ws\n");
        return r;
    }
    if (!strcmp(type, "array")) {
        const json_t *items = json_object_get(s, "items");
        long lo = 0, hi = -1;
        if (!get_count(c, s, "minItems", &lo, path) || !get_count(c, s, "maxItems", &hi, path)) return -1;
        if (hi >= 0 && hi < lo) return fail(c, path, "maxItems below minItems"), -1;
        if (lo > JS_MAX_REPEAT || hi > JS_MAX_REPEAT) return fail(c, path, "item counts above %d are not supported", JS_MAX_REPEAT), -1;
        char it[32] = "value";
        if (items) {
            if (json_is_array(items)) return fail(c, path, "'items' as an array (tuple) is not supported"), -1;
            char p2[512];
            snprintf(p2, sizeof p2, "%s/items", path);
            int ir = visit(c, items, p2, depth + 1);
            if (ir < 0) return -1;
            snprintf(it, sizeof it, "r%d", ir);
        }
        int r = new_rule(c);
        if (hi == 0) {
            sb_printf(&c->out, "r%d ::= \"[\" ws \"]\" ws\n", r);
            return r;
        }
        char more[64];
        snprintf(more, sizeof more, "( \",\" ws %s )", it);
        sb_printf(&c->out, "r%d ::= \"[\" ws %s%s ", r, lo == 0 ? "( " : "", it);
        sb_repeat(&c->out, more, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
        sb_printf(&c->out, "%s \"]\" ws\n", lo == 0 ? " )?" : "");
        return r;
    }
    return fail(c, path, "unknown type '%s'", type), -1;
}

/* ---- enum: a trie of the values' JSON texts ------------------------------------ */

/* One rule per branching node of the trie of the values' texts, so a state
 * of the matcher holds one position however many values share a prefix (a
 * flat alternation of 50,000 literals made states of 50,000 stacks: seconds
 * per token). Built without recursion: a queue of (rule, first, last, depth)
 * over the sorted texts. Linear in the texts' total size after the sort. */
typedef struct {
    const char *s;
    size_t n;
} jtext;

static int jtext_cmp(const void *a, const void *b) {
    const jtext *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int k = memcmp(x->s, y->s, n);
    return k ? k : (x->n > y->n) - (x->n < y->n);
}

typedef struct {
    int rule;
    size_t lo, hi, d;
} tnode;

static int enum_rule(jsc *c, const json_t *en, const char *path) {
    size_t n = json_array_size(en);
    char **dump = calloc(n, sizeof(char *));
    jtext *v = calloc(n, sizeof(jtext));
    tnode *q = calloc(n + 1, sizeof(tnode));
    size_t qn = 0, qi = 0, m = 0;
    int root = -1;
    if (!dump || !v || !q) {
        fail(c, path, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        dump[i] = json_dumps(json_array_get(en, i), JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        if (!dump[i]) {
            fail(c, path, "enum value %zu cannot be encoded", i);
            goto done;
        }
        v[i] = (jtext){dump[i], strlen(dump[i])};
    }
    qsort(v, n, sizeof(jtext), jtext_cmp);
    for (size_t i = 0; i < n; i++) /* duplicates go */
        if (!m || jtext_cmp(&v[m - 1], &v[i])) v[m++] = v[i];
    root = new_rule(c);
    int body = new_rule(c);
    sb_printf(&c->out, "r%d ::= r%d ws\n", root, body);
    q[qn++] = (tnode){body, 0, m, 0};
    while (qi < qn && !c->out.oom) {
        tnode t = q[qi++];
        sb_printf(&c->out, "r%d ::=", t.rule);
        bool first = true;
        for (size_t i = t.lo; i < t.hi;) {
            sb_add(&c->out, first ? " " : " | ", first ? 1 : 3);
            first = false;
            if (v[i].n == t.d) { /* a value ends here: the empty alternative */
                sb_add(&c->out, "\"\"", 2);
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < t.hi && v[j].s[t.d] == v[i].s[t.d]) j++;
            /* the group [i, j) shares bytes [d, e): the common prefix of its first and last */
            size_t e = t.d + 1, lim = v[i].n < v[j - 1].n ? v[i].n : v[j - 1].n;
            while (e < lim && v[i].s[e] == v[j - 1].s[e]) e++;
            sb_lit(&c->out, v[i].s + t.d, e - t.d);
            if (j - i > 1 || v[i].n > e) {
                int child = new_rule(c);
                sb_printf(&c->out, " r%d", child);
                q[qn++] = (tnode){child, i, j, e};
            }
            i = j;
        }
        sb_add(&c->out, "\n", 1);
        if (c->lim.max_bytes && c->out.n > c->lim.max_bytes) {
            fail(c, path, "schema too large: its grammar is over %zu bytes (grammar.max_bytes)", c->lim.max_bytes);
            root = -1;
            break;
        }
    }
done:
    for (size_t i = 0; dump && i < n; i++) free(dump[i]);
    free(dump), free(v), free(q);
    return c->failed ? -1 : root;
}

/* allOf: one schema is that schema (with this node's other keywords); object
 * schemas merge (properties, required; additionalProperties only if one says
 * it and the others agree). Other combinations cannot be expressed as one
 * grammar here and are refused. */
static int visit_all_of(jsc *c, const json_t *s, const json_t *all, const char *path, int depth) {
    if (!json_is_array(all) || json_array_size(all) == 0) return fail(c, path, "'allOf' must be a non-empty array"), -1;
    json_t *m = json_copy((json_t *)s);
    if (!m) return fail(c, path, "out of memory"), -1;
    json_object_del(m, "allOf");
    json_t *props = json_object(), *req = json_array();
    int r = -1;
    const json_t *src = NULL;
    int with_props = 0;
    bool closed = false;      /* some schema restricts additionalProperties */
    bool closed_bare = false; /* ... one without properties of its own (it then allows none) */
    for (size_t i = 0; i <= json_array_size(all); i++) {
        const json_t *sub = i < json_array_size(all) ? json_array_get(all, i) : s;
        if (!json_is_object(sub)) {
            fail(c, path, "'allOf' entries must be schemas (objects)");
            goto out;
        }
        const json_t *ref = json_object_get(sub, "$ref");
        if (ref && json_is_string(ref)) { /* a reference to a $defs entry: merge its body */
            const char *rs = json_string_value(ref);
            const json_t *defs = !strncmp(rs, "#/$defs/", 8) ? json_object_get(c->root, "$defs")
                                 : !strncmp(rs, "#/definitions/", 14) ? json_object_get(c->root, "definitions") : NULL;
            const json_t *t = defs ? json_object_get(defs, strchr(rs + 2, '/') + 1) : NULL;
            if (!t) {
                fail(c, path, "'allOf' entry '$ref' '%s' does not name an entry of #/$defs or #/definitions", rs);
                goto out;
            }
            sub = t;
        }
        with_props += json_object_get(sub, "properties") != NULL;
        const json_t *ap = json_object_get(sub, "additionalProperties");
        closed |= ap && !json_is_true(ap);
        if (ap && !json_is_true(ap) && !json_object_get(sub, "properties")) closed_bare = true;
        if ((closed && with_props > 1) || (closed_bare && with_props > 0)) {
            /* each schema's additionalProperties covers its own properties only: the
             * merged object would allow what one of them forbids */
            fail(c, path, "'allOf' of several objects with additionalProperties is not supported");
            goto out;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)sub, key, v) {
            if (!strcmp(key, "properties") && json_is_object(v)) {
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    if (json_object_get(props, pk) && !json_equal(json_object_get(props, pk), pv)) {
                        fail(c, path, "'allOf' gives property '%s' two different schemas (not supported)", pk);
                        goto out;
                    }
                    json_object_set(props, pk, pv);
                }
            } else if (!strcmp(key, "required") && json_is_array(v)) {
                json_array_extend(req, v);
            } else if (!strcmp(key, "$ref") || !strcmp(key, "allOf") || in_list(key, annotations, sizeof annotations / sizeof *annotations)) {
                continue;
            } else if (json_object_get(m, key) && !json_equal(json_object_get(m, key), v)) {
                fail(c, path, "'allOf' combines different '%s' values (not supported)", key);
                goto out;
            } else {
                json_object_set(m, key, v);
            }
        }
        src = sub;
    }
    (void)src;
    if (json_object_size(props)) json_object_set(m, "properties", props);
    if (json_array_size(req)) json_object_set(m, "required", req);
    r = visit(c, m, path, depth + 1);
out:
    json_decref(m), json_decref(props), json_decref(req);
    return c->failed ? -1 : r;
}

static int visit(jsc *c, const json_t *s, const char *path, int depth) {
    if (c->failed) return -1;
    if (depth > JS_MAX_DEPTH) return fail(c, path, "schema nested deeper than %d", JS_MAX_DEPTH), -1;
    if (c->out.n > c->lim.max_bytes)
        return fail(c, path, "schema too large: its grammar is over %zu bytes (grammar.max_bytes)", c->lim.max_bytes), -1;
    if (json_is_true(s)) {
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::= value\n", r);
        return r;
    }
    if (!json_is_object(s)) return fail(c, path, "a schema must be an object or true"), -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (!in_list(key, annotations, sizeof annotations / sizeof *annotations) &&
            !in_list(key, handled, sizeof handled / sizeof *handled))
            return fail(c, path, "'%s' is not supported", key), -1;
    }
    const json_t *all = json_object_get(s, "allOf");
    if (all) return visit_all_of(c, s, all, path, depth);
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *rs = json_is_string(ref) ? json_string_value(ref) : "";
        const char *name = NULL;
        const json_t *defs = NULL;
        if (!strncmp(rs, "#/$defs/", 8)) name = rs + 8, defs = json_object_get(c->root, "$defs");
        else if (!strncmp(rs, "#/definitions/", 14)) name = rs + 14, defs = json_object_get(c->root, "definitions");
        const json_t *target = name && defs ? json_object_get(defs, name) : NULL;
        if (!strcmp(rs, "#")) target = c->root, name = "#";
        if (!target) return fail(c, path, "'$ref' '%s' does not name an entry of #/$defs or #/definitions", rs), -1;
        for (int k = 0; k < c->n_defs; k++)
            if (!strcmp(c->def_names[k], rs)) return c->def_rule[k];
        if (c->n_defs == 256) return fail(c, path, "more than 256 $ref targets"), -1;
        int r = new_rule(c);
        c->def_names[c->n_defs] = rs, c->def_rule[c->n_defs++] = r;
        int t = visit(c, target, rs, depth + 1);
        if (t < 0) return -1;
        sb_printf(&c->out, "r%d ::= r%d\n", r, t);
        return r;
    }
    const json_t *cst = json_object_get(s, "const");
    if (cst) {
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::= ", r);
        if (!sb_json_lit(c, cst, path)) return -1;
        sb_printf(&c->out, " ws\n");
        return r;
    }
    const json_t *en = json_object_get(s, "enum");
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) return fail(c, path, "'enum' must be a non-empty array"), -1;
        if (c->lim.max_enum > 0 && json_array_size(en) > (size_t)c->lim.max_enum)
            return fail(c, path, "'enum' has %zu values, over the limit of %d (grammar.max_enum)", json_array_size(en),
                        c->lim.max_enum), -1;
        return enum_rule(c, en, path);
    }
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) return fail(c, path, "'anyOf'/'oneOf' must be a non-empty array"), -1;
        size_t n = json_array_size(any);
        int *alt = calloc(n, sizeof(int));
        if (!alt) return fail(c, path, "out of memory"), -1;
        for (size_t i = 0; i < n; i++) {
            char p2[512];
            snprintf(p2, sizeof p2, "%s/anyOf/%zu", path, i);
            if ((alt[i] = visit(c, json_array_get(any, i), p2, depth + 1)) < 0) {
                free(alt);
                return -1;
            }
        }
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::=", r);
        for (size_t i = 0; i < n; i++) sb_printf(&c->out, "%s r%d", i ? " |" : "", alt[i]);
        sb_printf(&c->out, "\n");
        free(alt);
        return r;
    }
    const json_t *ty = json_object_get(s, "type");
    if (!ty) {
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) return visit_type(c, s, "object", path, depth);
        if (json_object_get(s, "items")) return visit_type(c, s, "array", path, depth);
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::= value\n", r);
        return r;
    }
    if (json_is_string(ty)) return visit_type(c, s, json_string_value(ty), path, depth);
    if (json_is_array(ty) && json_array_size(ty) > 0) {
        size_t n = json_array_size(ty);
        int alts[8];
        if (n > 8) return fail(c, path, "'type' lists more than 8 types"), -1;
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(ty, i);
            if (!json_is_string(t)) return fail(c, path, "'type' must list strings"), -1;
            if ((alts[i] = visit_type(c, s, json_string_value(t), path, depth)) < 0) return -1;
        }
        int r = new_rule(c);
        sb_printf(&c->out, "r%d ::=", r);
        for (size_t i = 0; i < n; i++) sb_printf(&c->out, "%s r%d", i ? " |" : "", alts[i]);
        sb_printf(&c->out, "\n");
        return r;
    }
    return fail(c, path, "'type' must be a string or an array of strings"), -1;
}

js_limits js_default_limits(void) { return (js_limits){.max_enum = 20000, .max_bytes = 1u << 20}; }

char *js_schema_to_gbnf(const void *schema, char *err, size_t errlen) {
    js_limits lim = js_default_limits();
    return js_schema_to_gbnf_limited(schema, &lim, err, errlen);
}

char *js_schema_to_gbnf_limited(const void *schema, const js_limits *lim, char *err, size_t errlen) {
    jsc c = {.root = schema, .err = err, .errlen = errlen, .lim = *lim};
    if (!c.lim.max_bytes) c.lim.max_bytes = 1u << 20;
    int r = visit(&c, schema, "#", 0);
    if (r < 0 || c.out.oom) {
        if (c.out.oom && !c.failed) snprintf(err, errlen, "out of memory");
        free(c.out.s);
        return NULL;
    }
    sb_printf(&c.out, "root ::= r%d\n", r);
    static const char prims[] =
              "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
              "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
              "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
              "char   ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt/] | \"u\" [0-9a-fA-F]{4})\n"
              "string ::= \"\\\"\" char* \"\\\"\" ws\n"
              "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? ws\n"
              "integer ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) ws\n"
              "boolean ::= (\"true\" | \"false\") ws\n"
              "null   ::= \"null\" ws\n"
              "date   ::= [1-9] [0-9]{3} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )\n" /* days 01-28: valid in every month */
              "time   ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
              "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
              "octet  ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
              "ws     ::= | \" \" | \"\\n\" [ ]{0,8}\n";
    sb_add(&c.out, prims, sizeof prims - 1);
    if (!c.out.oom && c.out.n > c.lim.max_bytes) {
        free(c.out.s);
        snprintf(err, errlen, "schema too large: its grammar is over %zu bytes (grammar.max_bytes)", c.lim.max_bytes);
        return NULL;
    }
    if (c.out.oom) {
        free(c.out.s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return c.out.s;
}
