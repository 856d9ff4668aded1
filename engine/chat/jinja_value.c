/* jinja_value.c — the Jinja renderer's values: the arena they live in, their
 * constructors, and their Python faces (truth, equality, str, repr, JSON
 * dump as json.dumps writes it, JSON parse). Strings carry a per-byte data
 * mask through every operation (see jinja.h). */
#include "engine/chat/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */
struct jarena_chunk {
    jarena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (a->cap && a->used + n > a->cap) {
        if (a->oom) longjmp(*a->oom, 2);
        abort();
    }
    jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 60000 ? n : 60000;
        c = malloc(sizeof(jarena_chunk) + size);
        if (!c) {
            if (a->oom) longjmp(*a->oom, 2);
            abort();
        }
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void ja_free(jarena *a) {
    for (jarena_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- string builder ---- */
void jsb_put(jrender *r, jsb *b, const char *s, size_t n, const uint8_t *data, bool all_data) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = ja_alloc(&r->arena, cap);
        uint8_t *nd = ja_alloc(&r->arena, cap);
        if (b->n) {
            memcpy(ns, b->s, b->n);
            memcpy(nd, b->data, b->n);
        }
        b->s = ns;
        b->data = nd;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    if (data) {
        memcpy(b->data + b->n, data, n);
        for (size_t k = 0; k < n && !b->any_data; k++) b->any_data = data[k] != 0;
    } else {
        memset(b->data + b->n, all_data ? 1 : 0, n);
        if (all_data && n) b->any_data = true;
    }
    b->n += n;
    b->s[b->n] = '\0';
}

void jsb_putc(jrender *r, jsb *b, char c, bool data) { jsb_put(r, b, &c, 1, NULL, data); }

static void jsb_puts(jrender *r, jsb *b, const char *s, bool data) { jsb_put(r, b, s, strlen(s), NULL, data); }

jv *jsb_value(jrender *r, jsb *b) {
    jv *v = jv_new(r, JV_STR);
    v->u.s.s = b->s ? b->s : ja_strndup(&r->arena, "", 0);
    v->u.s.n = b->n;
    v->u.s.data = b->any_data ? b->data : NULL;
    return v;
}

/* ---- constructors ---- */
jv *jv_new(jrender *r, jv_kind k) {
    jv *v = ja_alloc(&r->arena, sizeof(jv));
    v->kind = (uint8_t)k;
    return v;
}
jv *jv_undef(jrender *r, const char *name) {
    jv *v = jv_new(r, JV_UNDEF);
    v->name = name;
    return v;
}
jv *jv_none(jrender *r) { return jv_new(r, JV_NONE); }
jv *jv_boolv(jrender *r, bool b) {
    jv *v = jv_new(r, JV_BOOL);
    v->u.b = b;
    return v;
}
jv *jv_int(jrender *r, int64_t i) {
    jv *v = jv_new(r, JV_INT);
    v->u.i = i;
    return v;
}
jv *jv_float(jrender *r, double f) {
    jv *v = jv_new(r, JV_FLOAT);
    v->u.f = f;
    return v;
}
jv *jv_str(jrender *r, const char *s, size_t n, const uint8_t *data, bool all_data) {
    jv *v = jv_new(r, JV_STR);
    v->u.s.s = ja_strndup(&r->arena, s, n);
    v->u.s.n = n;
    bool any = all_data && n > 0;
    for (size_t k = 0; data && k < n && !any; k++) any = data[k] != 0;
    if (any) {
        v->u.s.data = ja_alloc(&r->arena, n ? n : 1);
        if (data) memcpy(v->u.s.data, data, n);
        else memset(v->u.s.data, 1, n);
    }
    return v;
}
jv *jv_cstr(jrender *r, const char *s) { return jv_str(r, s, strlen(s), NULL, false); }

jv *jv_list(jrender *r, int cap) {
    jv *v = jv_new(r, JV_LIST);
    v->u.l.cap = cap > 4 ? cap : 4;
    v->u.l.v = ja_alloc(&r->arena, sizeof(jv *) * (size_t)v->u.l.cap);
    return v;
}
void jv_list_push(jrender *r, jv *l, jv *x) {
    if (l->u.l.n == l->u.l.cap) {
        jv **nv = ja_alloc(&r->arena, sizeof(jv *) * (size_t)l->u.l.cap * 2);
        memcpy(nv, l->u.l.v, sizeof(jv *) * (size_t)l->u.l.n);
        l->u.l.v = nv;
        l->u.l.cap *= 2;
    }
    l->u.l.v[l->u.l.n++] = x;
}
jv *jv_dict(jrender *r) { return jv_new(r, JV_DICT); }

jv *jv_dict_getv(const jv *d, const jv *key) {
    if (d->kind != JV_DICT && d->kind != JV_NS) return NULL;
    for (int k = 0; k < d->u.d.n; k++)
        if (jv_equal(d->u.d.k[k], key)) return d->u.d.v[k];
    return NULL;
}
jv *jv_dict_gets(const jv *d, const char *key) {
    if (d->kind != JV_DICT && d->kind != JV_NS) return NULL;
    size_t n = strlen(key);
    for (int k = 0; k < d->u.d.n; k++) {
        const jv *kk = d->u.d.k[k];
        if (kk->kind == JV_STR && kk->u.s.n == n && !memcmp(kk->u.s.s, key, n)) return d->u.d.v[k];
    }
    return NULL;
}
void jv_dict_setv(jrender *r, jv *d, jv *key, jv *x) {
    for (int k = 0; k < d->u.d.n; k++)
        if (jv_equal(d->u.d.k[k], key)) {
            d->u.d.v[k] = x;
            return;
        }
    if (d->u.d.n == d->u.d.cap) {
        int cap = d->u.d.cap ? d->u.d.cap * 2 : 8;
        jv **nk = ja_alloc(&r->arena, sizeof(jv *) * (size_t)cap), **nv = ja_alloc(&r->arena, sizeof(jv *) * (size_t)cap);
        if (d->u.d.n) {
            memcpy(nk, d->u.d.k, sizeof(jv *) * (size_t)d->u.d.n);
            memcpy(nv, d->u.d.v, sizeof(jv *) * (size_t)d->u.d.n);
        }
        d->u.d.k = nk;
        d->u.d.v = nv;
        d->u.d.cap = cap;
    }
    d->u.d.k[d->u.d.n] = key;
    d->u.d.v[d->u.d.n++] = x;
}

/* ---- Python semantics ---- */
bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s.n > 0;
    case JV_LIST: return v->gen || v->u.l.n > 0;
    case JV_DICT: return v->u.d.n > 0;
    default: return true;
    }
}

static bool is_num(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double num(const jv *v) { return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b; }

bool jv_equal(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_INT ? a->u.i : a->u.b, y = b->kind == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.s, b->u.s.s, a->u.s.n);
    case JV_LIST:
        if (a->u.l.n != b->u.l.n || a->tuple != b->tuple || a->gen || b->gen) return false;
        for (int k = 0; k < a->u.l.n; k++)
            if (!jv_equal(a->u.l.v[k], b->u.l.v[k])) return false;
        return true;
    case JV_DICT:
        if (a->u.d.n != b->u.d.n) return false;
        for (int k = 0; k < a->u.d.n; k++) {
            const jv *o = jv_dict_getv(b, a->u.d.k[k]);
            if (!o || !jv_equal(a->u.d.v[k], o)) return false;
        }
        return true;
    default: return a == b;
    }
}

bool jv_is_data(const jv *v) {
    switch (v->kind) {
    case JV_STR: return v->u.s.data != NULL;
    case JV_LIST:
        for (int k = 0; k < v->u.l.n; k++)
            if (jv_is_data(v->u.l.v[k])) return true;
        return false;
    case JV_DICT: case JV_NS:
        for (int k = 0; k < v->u.d.n; k++)
            if (jv_is_data(v->u.d.k[k]) || jv_is_data(v->u.d.v[k])) return true;
        return false;
    default: return false;
    }
}

bool jv_str_eq(const jv *v, const char *s) {
    return v->kind == JV_STR && v->u.s.n == strlen(s) && !memcmp(v->u.s.s, s, v->u.s.n);
}

const char *jv_kind_name(const jv *v) {
    static const char *n[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "Namespace", "Macro", "builtin_function"};
    if (v->kind == JV_LIST && v->tuple) return "tuple";
    if (v->kind == JV_LIST && v->gen) return "generator";
    return v->kind <= JV_FUNC ? n[v->kind] : "?";
}

/* Python repr(float): the shortest digits that round-trip; fixed notation
 * for decimal exponents -4..15, else d.ddde+XX. */
static void fmt_float(double f, char *out, size_t cap, bool json) {
    if (isnan(f)) { snprintf(out, cap, json ? "NaN" : "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, json ? (f < 0 ? "-Infinity" : "Infinity") : (f < 0 ? "-inf" : "inf")); return; }
    char buf[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, e10;
    const char *q = buf;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    e10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = out;
    size_t left = cap;
#define EMIT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ > 0 && (size_t)w_ < left) { o += w_; left -= (size_t)w_; } } while (0)
    if (neg) EMIT("-");
    if (e10 >= -5 + 1 && e10 < 16) {
        int decpt = e10 + 1;
        if (decpt <= 0) {
            EMIT("0.");
            for (int k = 0; k < -decpt; k++) EMIT("0");
            EMIT("%s", digits);
        } else if (decpt >= nd) {
            EMIT("%s", digits);
            for (int k = nd; k < decpt; k++) EMIT("0");
            EMIT(".0");
        } else {
            EMIT("%.*s.%s", decpt, digits, digits + decpt);
        }
    } else {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    }
#undef EMIT
}

static void put_str_value(jrender *r, jsb *b, const jv *v) {
    jsb_put(r, b, v->u.s.s, v->u.s.n, v->u.s.data, false);
}

static void repr_string(jrender *r, jsb *b, const jv *v) {
    const char *s = v->u.s.s;
    size_t n = v->u.s.n;
    bool d = v->u.s.data != NULL;
    char q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';
    jsb_putc(r, b, q, d);
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        bool dk = v->u.s.data ? v->u.s.data[k] : false;
        char e[8];
        if (c == '\\') jsb_put(r, b, "\\\\", 2, NULL, dk);
        else if (c == (unsigned char)q) { e[0] = '\\'; e[1] = (char)q; jsb_put(r, b, e, 2, NULL, dk); }
        else if (c == '\n') jsb_put(r, b, "\\n", 2, NULL, dk);
        else if (c == '\r') jsb_put(r, b, "\\r", 2, NULL, dk);
        else if (c == '\t') jsb_put(r, b, "\\t", 2, NULL, dk);
        else if (c < 0x20 || c == 0x7f) { snprintf(e, sizeof e, "\\x%02x", c); jsb_put(r, b, e, 4, NULL, dk); }
        else jsb_putc(r, b, (char)c, dk);
    }
    jsb_putc(r, b, q, d);
}

void jv_repr(jrender *r, jsb *b, const jv *v) {
    char buf[64];
    bool d = jv_is_data(v);
    switch (v->kind) {
    case JV_STR: repr_string(r, b, v); return;
    case JV_LIST:
        if (v->gen) { jsb_puts(r, b, "<generator object>", false); return; }
        jsb_putc(r, b, v->tuple ? '(' : '[', d);
        for (int k = 0; k < v->u.l.n; k++) {
            if (k) jsb_puts(r, b, ", ", d);
            jv_repr(r, b, v->u.l.v[k]);
        }
        if (v->tuple && v->u.l.n == 1) jsb_putc(r, b, ',', d);
        jsb_putc(r, b, v->tuple ? ')' : ']', d);
        return;
    case JV_DICT:
        jsb_putc(r, b, '{', d);
        for (int k = 0; k < v->u.d.n; k++) {
            if (k) jsb_puts(r, b, ", ", d);
            jv_repr(r, b, v->u.d.k[k]);
            jsb_puts(r, b, ": ", d);
            jv_repr(r, b, v->u.d.v[k]);
        }
        jsb_putc(r, b, '}', d);
        return;
    case JV_NS:
        jsb_puts(r, b, "<Namespace ", d);
        jv dv = *v;
        dv.kind = JV_DICT;
        jv_repr(r, b, &dv);
        jsb_putc(r, b, '>', d);
        return;
    case JV_UNDEF: return;
    case JV_NONE: jsb_puts(r, b, "None", false); return;
    case JV_BOOL: jsb_puts(r, b, v->u.b ? "True" : "False", false); return;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->u.i); jsb_puts(r, b, buf, false); return;
    case JV_FLOAT: fmt_float(v->u.f, buf, sizeof buf, false); jsb_puts(r, b, buf, false); return;
    case JV_MACRO: jsb_puts(r, b, "<Macro>", false); return;
    default: jsb_puts(r, b, "<built-in function>", false); return;
    }
}

void jv_to_str(jrender *r, jsb *b, const jv *v) {
    if (v->kind == JV_STR) put_str_value(r, b, v);
    else jv_repr(r, b, v);
}

jv *jv_stringify(jrender *r, const jv *v) {
    if (v->kind == JV_STR) return (jv *)v;
    jsb b = {0};
    jv_to_str(r, &b, v);
    return jsb_value(r, &b);
}

/* ---- JSON out (Python json.dumps, ensure_ascii=False) ---- */
static void json_string(jrender *r, jsb *b, const char *s, size_t n, const uint8_t *data, bool d) {
    jsb_putc(r, b, '"', d);
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        bool dk = data ? data[k] : d;
        char e[8];
        switch (c) {
        case '"': jsb_put(r, b, "\\\"", 2, NULL, dk); break;
        case '\\': jsb_put(r, b, "\\\\", 2, NULL, dk); break;
        case '\n': jsb_put(r, b, "\\n", 2, NULL, dk); break;
        case '\r': jsb_put(r, b, "\\r", 2, NULL, dk); break;
        case '\t': jsb_put(r, b, "\\t", 2, NULL, dk); break;
        case '\b': jsb_put(r, b, "\\b", 2, NULL, dk); break;
        case '\f': jsb_put(r, b, "\\f", 2, NULL, dk); break;
        default:
            if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); jsb_put(r, b, e, 6, NULL, dk); }
            else jsb_putc(r, b, (char)c, dk);
        }
    }
    jsb_putc(r, b, '"', d);
}

static void json_newline(jrender *r, jsb *b, int indent, int depth, bool d) {
    jsb_putc(r, b, '\n', d);
    for (int k = 0; k < indent * depth; k++) jsb_putc(r, b, ' ', d);
}

static int cmp_keys(const void *x, const void *y) {
    const jv *a = *(jv *const *)x, *b = *(jv *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.s, b->u.s.s, n);
    return c ? c : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

void jv_to_json(jrender *r, jsb *b, const jv *v, int indent, bool sort_keys, int depth) {
    char buf[64];
    bool d = jv_is_data(v);
    if (depth > 200) jr_fail(r, "tojson: nesting too deep");
    switch (v->kind) {
    case JV_NONE: jsb_puts(r, b, "null", false); return;
    case JV_BOOL: jsb_puts(r, b, v->u.b ? "true" : "false", false); return;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->u.i); jsb_puts(r, b, buf, false); return;
    case JV_FLOAT: fmt_float(v->u.f, buf, sizeof buf, true); jsb_puts(r, b, buf, false); return;
    case JV_STR: json_string(r, b, v->u.s.s, v->u.s.n, v->u.s.data, false); return;
    case JV_LIST:
        if (v->gen) jr_fail(r, "Object of type generator is not JSON serializable");
        if (!v->u.l.n) { jsb_puts(r, b, "[]", d); return; }
        jsb_putc(r, b, '[', d);
        for (int k = 0; k < v->u.l.n; k++) {
            if (k) jsb_puts(r, b, indent >= 0 ? "," : ", ", d);
            if (indent >= 0) json_newline(r, b, indent, depth + 1, d);
            jv_to_json(r, b, v->u.l.v[k], indent, sort_keys, depth + 1);
        }
        if (indent >= 0) json_newline(r, b, indent, depth, d);
        jsb_putc(r, b, ']', d);
        return;
    case JV_DICT: {
        if (!v->u.d.n) { jsb_puts(r, b, "{}", d); return; }
        int n = v->u.d.n;
        int *order = ja_alloc(&r->arena, sizeof(int) * (size_t)n);
        for (int k = 0; k < n; k++) order[k] = k;
        if (sort_keys) {
            jv **keys = ja_alloc(&r->arena, sizeof(jv *) * (size_t)n);
            for (int k = 0; k < n; k++) {
                if (v->u.d.k[k]->kind != JV_STR) jr_fail(r, "tojson: sort_keys needs string keys");
                keys[k] = v->u.d.k[k];
            }
            qsort(keys, (size_t)n, sizeof *keys, cmp_keys);
            for (int k = 0; k < n; k++)
                for (int j = 0; j < n; j++)
                    if (v->u.d.k[j] == keys[k]) order[k] = j;
        }
        jsb_putc(r, b, '{', d);
        for (int kk = 0; kk < n; kk++) {
            int k = order[kk];
            if (kk) jsb_puts(r, b, indent >= 0 ? "," : ", ", d);
            if (indent >= 0) json_newline(r, b, indent, depth + 1, d);
            const jv *key = v->u.d.k[k];
            if (key->kind == JV_STR) json_string(r, b, key->u.s.s, key->u.s.n, key->u.s.data, false);
            else {
                jsb kb = {0};
                jv_to_json(r, &kb, key, -1, false, depth + 1);
                json_string(r, b, kb.s, kb.n, NULL, false);
            }
            jsb_puts(r, b, ": ", d);
            jv_to_json(r, b, v->u.d.v[k], indent, sort_keys, depth + 1);
        }
        if (indent >= 0) json_newline(r, b, indent, depth, d);
        jsb_putc(r, b, '}', d);
        return;
    }
    default: jr_fail(r, "Object of type %s is not JSON serializable", jv_kind_name(v));
    }
}

/* ---- JSON in ---- */
typedef struct {
    jrender *r;
    const char *s;
    size_t n, i;
    bool data;
    const char *err;
    int depth;
} jp;

static void jp_ws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int hex4(const char *s) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

static size_t utf8_put(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) { o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63)); o[2] = (char)(0x80 | (cp & 63)); return 3; }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 63)); o[2] = (char)(0x80 | (cp >> 6 & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static jv *jp_value(jp *p);

static jv *jp_string(jp *p) {
    p->i++; /* opening quote */
    jsb b = {0};
    while (p->i < p->n && p->s[p->i] != '"') {
        char c = p->s[p->i];
        if ((unsigned char)c < 0x20) { p->err = "control character in string"; return NULL; }
        if (c != '\\') { jsb_putc(p->r, &b, c, p->data); p->i++; continue; }
        if (p->i + 1 >= p->n) break;
        char e = p->s[p->i + 1];
        p->i += 2;
        char o[4];
        switch (e) {
        case '"': case '\\': case '/': jsb_putc(p->r, &b, e, p->data); break;
        case 'n': jsb_putc(p->r, &b, '\n', p->data); break;
        case 't': jsb_putc(p->r, &b, '\t', p->data); break;
        case 'r': jsb_putc(p->r, &b, '\r', p->data); break;
        case 'b': jsb_putc(p->r, &b, '\b', p->data); break;
        case 'f': jsb_putc(p->r, &b, '\f', p->data); break;
        case 'u': {
            int cp = p->i + 4 <= p->n ? hex4(p->s + p->i) : -1;
            if (cp < 0) { p->err = "bad \\u escape"; return NULL; }
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                int lo = hex4(p->s + p->i + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                }
            }
            jsb_put(p->r, &b, o, utf8_put(o, (unsigned)cp), NULL, p->data);
            break;
        }
        default: p->err = "bad escape"; return NULL;
        }
    }
    if (p->i >= p->n) { p->err = "unterminated string"; return NULL; }
    p->i++;
    jv *v = jsb_value(p->r, &b);
    if (!p->data) v->u.s.data = NULL;
    return v;
}

static jv *jp_value(jp *p) {
    jp_ws(p);
    if (p->i >= p->n) { p->err = "unexpected end"; return NULL; }
    if (++p->depth > 256) { p->err = "nesting too deep"; return NULL; }
    char c = p->s[p->i];
    jv *v = NULL;
    if (c == '"') v = jp_string(p);
    else if (c == '{') {
        v = jv_dict(p->r);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') p->i++;
        else for (;;) {
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') { p->err = "expected a key"; return NULL; }
            jv *k = jp_string(p);
            if (!k) return NULL;
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') { p->err = "expected ':'"; return NULL; }
            p->i++;
            jv *x = jp_value(p);
            if (!x) return NULL;
            jv_dict_setv(p->r, v, k, x);
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; break; }
            p->err = "expected ',' or '}'";
            return NULL;
        }
    } else if (c == '[') {
        v = jv_list(p->r, 4);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') p->i++;
        else for (;;) {
            jv *x = jp_value(p);
            if (!x) return NULL;
            jv_list_push(p->r, v, x);
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == ']') { p->i++; break; }
            p->err = "expected ',' or ']'";
            return NULL;
        }
    } else if (p->n - p->i >= 4 && !strncmp(p->s + p->i, "true", 4)) { v = jv_boolv(p->r, true); p->i += 4; }
    else if (p->n - p->i >= 5 && !strncmp(p->s + p->i, "false", 5)) { v = jv_boolv(p->r, false); p->i += 5; }
    else if (p->n - p->i >= 4 && !strncmp(p->s + p->i, "null", 4)) { v = jv_none(p->r); p->i += 4; }
    else if (c == '-' || (c >= '0' && c <= '9')) {
        size_t st = p->i;
        bool fl = false;
        if (p->s[p->i] == '-') p->i++;
        while (p->i < p->n) {
            char d = p->s[p->i];
            if (d >= '0' && d <= '9') p->i++;
            else if (d == '.' || d == 'e' || d == 'E' || d == '+' || d == '-') { fl = true; p->i++; }
            else break;
        }
        char buf[64];
        size_t len = p->i - st < 63 ? p->i - st : 63;
        memcpy(buf, p->s + st, len);
        buf[len] = '\0';
        char *end;
        if (fl) {
            v = jv_float(p->r, strtod(buf, &end));
        } else {
            long long x = strtoll(buf, &end, 10);
            v = jv_int(p->r, x);
        }
        if (*end) { p->err = "bad number"; return NULL; }
    } else { p->err = "unexpected character"; return NULL; }
    p->depth--;
    return v;
}

jv *jv_parse_json(jrender *r, const char *s, size_t n, bool data, char *err, size_t errlen) {
    jp p = {.r = r, .s = s, .n = n, .data = data};
    jv *v = jp_value(&p);
    if (v) {
        jp_ws(&p);
        if (p.i != n) { v = NULL; p.err = "trailing characters"; }
    }
    if (!v && err) snprintf(err, errlen, "JSON: %s at offset %zu", p.err ? p.err : "error", p.i);
    return v;
}

/* ---- UTF-8 ---- */
size_t ju_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t k = 0; k < n; k++) c += ((unsigned char)s[k] & 0xC0) != 0x80;
    return c;
}

size_t ju_offset(const char *s, size_t n, int64_t cp) {
    if (cp <= 0) return 0;
    size_t k = 0;
    int64_t c = 0;
    while (k < n) {
        if (((unsigned char)s[k] & 0xC0) != 0x80) {
            if (c == cp) return k;
            c++;
        }
        k++;
    }
    return n;
}
