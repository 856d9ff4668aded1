/* jinja_builtins.c — the names a chat template calls: jinja2's filters and
 * tests (the subset templates use), attribute and item lookup as jinja2's
 * sandbox does it (a dict's methods before its keys for obj.name, keys
 * before methods for obj[name]), the str/dict methods, and the globals
 * range, namespace, dict, raise_exception and strftime_now. */
#include "engine/chat/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static jv *html_escape(jrender *r, jv *v);

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_D, F_DICTSORT, F_ESCAPE, F_E, F_FIRST, F_FLOAT, F_INDENT,
    F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR,
    F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON,
    F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_
};
static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "count", "default", "d", "dictsort", "escape", "e", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson",
    "trim", "unique", "upper", "wordcount"};

enum {
    T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_EQEQ, T_ESCAPED, T_EVEN, T_FALSE, T_FLOAT,
    T_GE, T_GEOP, T_GT, T_GTOP, T_GREATERTHAN, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LEOP, T_LOWER, T_LT, T_LTOP,
    T_LESSTHAN, T_MAPPING, T_NE, T_NEOP, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TRUE,
    T_UNDEFINED, T_UPPER, T_COUNT_
};
static const char *const test_names[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false", "float",
    "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=", "lower", "lt", "<",
    "lessthan", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "true",
    "undefined", "upper"};

int jinja_filter_id(const char *name) {
    for (int k = 0; k < F_COUNT_; k++)
        if (!strcmp(filter_names[k], name)) return k;
    return -1;
}
int jinja_test_id(const char *name) {
    for (int k = 0; k < T_COUNT_; k++)
        if (!strcmp(test_names[k], name)) return k;
    return -1;
}

/* builtin functions and methods */
enum {
    B_RANGE, B_NAMESPACE, B_DICT, B_RAISE, B_STRFTIME,
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE,
    M_REPLACE, M_FIND, M_COUNT, M_JOIN, M_SPLITLINES, M_GET, M_ITEMS, M_KEYS, M_VALUES, M_RSPLIT, M_ISDIGIT,
    M_ISALPHA, M_ISSPACE, M_FORMAT_UNSUPPORTED
};
static const struct { const char *name; int id; } str_methods[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT}, {"rsplit", M_RSPLIT},
    {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH}, {"upper", M_UPPER}, {"lower", M_LOWER},
    {"title", M_TITLE}, {"capitalize", M_CAPITALIZE}, {"replace", M_REPLACE}, {"find", M_FIND},
    {"count", M_COUNT}, {"join", M_JOIN}, {"splitlines", M_SPLITLINES}, {"isdigit", M_ISDIGIT},
    {"isalpha", M_ISALPHA}, {"isspace", M_ISSPACE}};
static const struct { const char *name; int id; } dict_methods[] = {
    {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}};

static jv *func(jrender *r, int id, jv *self) {
    jv *f = jv_new(r, JV_FUNC);
    f->u.fn.id = id;
    f->u.fn.self = self;
    return f;
}

jv *jinja_global(jrender *r, const char *name) {
    if (!strcmp(name, "range")) return func(r, B_RANGE, NULL);
    if (!strcmp(name, "namespace")) return func(r, B_NAMESPACE, NULL);
    if (!strcmp(name, "dict")) return func(r, B_DICT, NULL);
    if (!strcmp(name, "raise_exception")) return func(r, B_RAISE, NULL);
    if (!strcmp(name, "strftime_now")) return func(r, B_STRFTIME, NULL);
    return NULL;
}

/* ---- lookup ---- */
static bool dict_method_name(const char *name, int *id) {
    for (size_t k = 0; k < sizeof dict_methods / sizeof *dict_methods; k++)
        if (!strcmp(dict_methods[k].name, name)) { *id = dict_methods[k].id; return true; }
    return false;
}
static bool str_method_name(const char *name, int *id) {
    for (size_t k = 0; k < sizeof str_methods / sizeof *str_methods; k++)
        if (!strcmp(str_methods[k].name, name)) { *id = str_methods[k].id; return true; }
    return false;
}

jv *jinja_getattr(jrender *r, jv *obj, const char *name) {
    int id;
    switch (obj->kind) {
    case JV_DICT: {
        if (dict_method_name(name, &id)) return func(r, id, obj);
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(r, name);
    }
    case JV_NS: {
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(r, name);
    }
    case JV_STR:
        if (str_method_name(name, &id)) return func(r, id, obj);
        return jv_undef(r, name);
    default: return jv_undef(r, name);
    }
}

jv *jinja_getitem(jrender *r, jv *obj, jv *key) {
    switch (obj->kind) {
    case JV_DICT: case JV_NS: {
        jv *v = jv_dict_getv(obj, key);
        if (v) return v;
        if (key->kind == JV_STR) return jinja_getattr(r, obj, key->u.s.s);
        return jv_undef(r, NULL);
    }
    case JV_LIST: case JV_STR: {
        if (obj->gen) jr_fail(r, "'generator' object is not subscriptable");
        if (key->kind == JV_STR) return jinja_getattr(r, obj, key->u.s.s);
        if (key->kind != JV_INT && key->kind != JV_BOOL) return jv_undef(r, NULL);
        jv *items = obj->kind == JV_LIST ? obj : jinja_iterable(r, obj);
        int64_t i = key->kind == JV_INT ? key->u.i : key->u.b;
        if (i < 0) i += items->u.l.n;
        if (i < 0 || i >= items->u.l.n) return jv_undef(r, NULL);
        return items->u.l.v[i];
    }
    default: return jv_undef(r, NULL);
    }
}

/* ---- argument helpers ---- */
typedef struct {
    jv **pos;
    int npos;
    jv **kwv;
    const char **kwn;
    int nkw;
} jargs;

static jargs split_args(jrender *r, jv **args, const char **kw, int n) {
    jargs a = {.pos = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(n + 1)), .kwv = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(n + 1)),
               .kwn = ja_alloc(&r->arena, sizeof(char *) * (size_t)(n + 1))};
    for (int k = 0; k < n; k++) {
        if (kw && kw[k]) {
            a.kwn[a.nkw] = kw[k];
            a.kwv[a.nkw++] = args[k];
        } else a.pos[a.npos++] = args[k];
    }
    return a;
}
/* positional i or keyword name, else NULL */
static jv *arg(const jargs *a, int i, const char *name) {
    if (i < a->npos) return a->pos[i];
    for (int k = 0; k < a->nkw; k++)
        if (!strcmp(a->kwn[k], name)) return a->kwv[k];
    return NULL;
}
static const char *want_str(jrender *r, jv *v, const char *what) {
    if (v->kind != JV_STR) jr_fail(r, "%s must be a string, not %s", what, jv_kind_name(v));
    return v->u.s.s;
}
static int64_t want_int(jrender *r, jv *v, const char *what) {
    if (v->kind == JV_INT) return v->u.i;
    if (v->kind == JV_BOOL) return v->u.b;
    jr_fail(r, "%s must be an integer, not %s", what, jv_kind_name(v));
}

static bool py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

/* s[a..b) of a string value, keeping its data mask */
static jv *substr(jrender *r, const jv *s, size_t a, size_t b) {
    return jv_str(r, s->u.s.s + a, b - a, s->u.s.data ? s->u.s.data + a : NULL, false);
}

static bool in_chars(unsigned char c, const jv *chars) {
    if (!chars || chars->kind == JV_NONE) return py_space(c);
    return memchr(chars->u.s.s, c, chars->u.s.n) != NULL;
}

static jv *strip(jrender *r, jv *s, const jv *chars, bool left, bool right) {
    size_t a = 0, b = s->u.s.n;
    if (left) while (a < b && in_chars((unsigned char)s->u.s.s[a], chars)) a++;
    if (right) while (b > a && in_chars((unsigned char)s->u.s.s[b - 1], chars)) b--;
    return substr(r, s, a, b);
}

static jv *map_case(jrender *r, jv *s, int mode) { /* 0 upper, 1 lower, 2 title, 3 capitalize */
    jv *o = jv_str(r, s->u.s.s, s->u.s.n, s->u.s.data, false);
    char *p = o->u.s.s;
    bool prev_alpha = false;
    for (size_t k = 0; k < o->u.s.n; k++) {
        char c = p[k];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (mode == 0 && c >= 'a' && c <= 'z') p[k] = (char)(c - 32);
        else if (mode == 1 && c >= 'A' && c <= 'Z') p[k] = (char)(c + 32);
        else if (mode == 2 && alpha) p[k] = prev_alpha ? (char)(c >= 'A' && c <= 'Z' ? c + 32 : c) : (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
        else if (mode == 3 && alpha) p[k] = k == 0 ? (char)(c >= 'a' && c <= 'z' ? c - 32 : c) : (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        if (mode == 2) prev_alpha = alpha || ((unsigned char)c >= 0x80 && prev_alpha) || (c >= '0' && c <= '9' && prev_alpha);
    }
    return o;
}

static jv *replace(jrender *r, jv *s, jv *old, jv *new_, int64_t count) {
    jsb o = {0};
    size_t k = 0, n = s->u.s.n, m = old->u.s.n;
    int64_t done = 0;
    if (m == 0) {
        /* Python inserts new between every character */
        jv *chars = jinja_iterable(r, s);
        for (int i = 0; i < chars->u.l.n; i++) {
            if (count < 0 || done < count) { jv_to_str(r, &o, new_); done++; }
            jv_to_str(r, &o, chars->u.l.v[i]);
        }
        if (count < 0 || done < count) jv_to_str(r, &o, new_);
        return jsb_value(r, &o);
    }
    while (k < n) {
        if ((count < 0 || done < count) && k + m <= n && !memcmp(s->u.s.s + k, old->u.s.s, m)) {
            jv_to_str(r, &o, new_);
            k += m;
            done++;
        } else {
            jsb_put(r, &o, s->u.s.s + k, 1, s->u.s.data ? s->u.s.data + k : NULL, false);
            k++;
        }
    }
    return jsb_value(r, &o);
}

static jv *split(jrender *r, jv *s, jv *sep, int64_t maxsplit) {
    jv *l = jv_list(r, 4);
    size_t n = s->u.s.n, k = 0;
    if (!sep || sep->kind == JV_NONE) {
        while (k < n) {
            while (k < n && py_space((unsigned char)s->u.s.s[k])) k++;
            if (k >= n) break;
            if (maxsplit >= 0 && l->u.l.n >= maxsplit) {
                size_t e = n;
                while (e > k && py_space((unsigned char)s->u.s.s[e - 1])) e--;
                jv_list_push(r, l, substr(r, s, k, e));
                break;
            }
            size_t st = k;
            while (k < n && !py_space((unsigned char)s->u.s.s[k])) k++;
            jv_list_push(r, l, substr(r, s, st, k));
        }
        return l;
    }
    size_t m = sep->u.s.n;
    if (!m) jr_fail(r, "empty separator");
    size_t st = 0;
    while (k + m <= n) {
        if ((maxsplit < 0 || l->u.l.n < maxsplit) && !memcmp(s->u.s.s + k, sep->u.s.s, m)) {
            jv_list_push(r, l, substr(r, s, st, k));
            k += m;
            st = k;
        } else k++;
    }
    jv_list_push(r, l, substr(r, s, st, n));
    return l;
}

static bool affix(jrender *r, jv *s, jv *x, bool end) {
    if (x->kind == JV_LIST) {
        for (int k = 0; k < x->u.l.n; k++)
            if (affix(r, s, x->u.l.v[k], end)) return true;
        return false;
    }
    want_str(r, x, "startswith/endswith argument");
    if (x->u.s.n > s->u.s.n) return false;
    return !memcmp(s->u.s.s + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.s, x->u.s.n);
}

static int64_t length_of(jrender *r, jv *v) {
    switch (v->kind) {
    case JV_STR: return (int64_t)ju_len(v->u.s.s, v->u.s.n);
    case JV_LIST: if (v->gen) break; return v->u.l.n;
    case JV_DICT: case JV_NS: return v->u.d.n;
    case JV_UNDEF: return 0;
    default: break;
    }
    jr_fail(r, "object of type '%s' has no len()", jv_kind_name(v));
}

static jv *items_of(jrender *r, jv *v) {
    if (v->kind == JV_UNDEF) return jv_list(r, 0);
    if (v->kind != JV_DICT && v->kind != JV_NS) jr_fail(r, "Can only get item pairs from a mapping.");
    jv *l = jv_list(r, v->u.d.n);
    for (int k = 0; k < v->u.d.n; k++) {
        jv *t = jv_list(r, 2);
        t->tuple = true;
        jv_list_push(r, t, v->u.d.k[k]);
        jv_list_push(r, t, v->u.d.v[k]);
        jv_list_push(r, l, t);
    }
    return l;
}

/* item.attribute for selectattr/map/join/sort: dotted paths, ints index */
static jv *attr_path(jrender *r, jv *item, jv *attr) {
    if (attr->kind == JV_INT) return jinja_getitem(r, item, attr);
    const char *p = want_str(r, attr, "attribute");
    jv *cur = item;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char *part = ja_strndup(&r->arena, p, n);
        char *end;
        long idx = strtol(part, &end, 10);
        if (cur->kind == JV_UNDEF) return cur;
        cur = (*part && !*end) ? jinja_getitem(r, cur, jv_int(r, idx)) : jinja_getitem(r, cur, jv_cstr(r, part));
        p += n;
        if (*p == '.') p++;
    }
    return cur;
}

jv *jinja_html_escape(jrender *r, jv *v) { return html_escape(r, v); }
static jv *html_escape(jrender *r, jv *v) {
    jv *s = jv_stringify(r, v);
    jsb o = {0};
    for (size_t k = 0; k < s->u.s.n; k++) {
        char c = s->u.s.s[k];
        bool d = s->u.s.data ? s->u.s.data[k] : false;
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) jsb_put(r, &o, e, strlen(e), NULL, d);
        else jsb_putc(r, &o, c, d);
    }
    return jsb_value(r, &o);
}

static jv *indent(jrender *r, jv *v, jv *width, bool first, bool blank) {
    jv *s = jv_stringify(r, v);
    jsb ind = {0};
    if (!width) width = jv_int(r, 4);
    if (width->kind == JV_STR) jv_to_str(r, &ind, width);
    else for (int64_t k = 0; k < want_int(r, width, "indent width"); k++) jsb_putc(r, &ind, ' ', false);
    jv *indv = jsb_value(r, &ind);
    /* Python: (s + "\n").splitlines() */
    jv *lines = jv_list(r, 8);
    size_t n = s->u.s.n, st = 0, k = 0;
    while (k < n) {
        char c = s->u.s.s[k];
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            jv_list_push(r, lines, substr(r, s, st, k));
            if (c == '\r' && k + 1 < n && s->u.s.s[k + 1] == '\n') k++;
            st = ++k;
        } else k++;
    }
    jv_list_push(r, lines, substr(r, s, st, n)); /* the part before the appended "\n" */
    jsb o = {0};
    if (first) jv_to_str(r, &o, indv);
    for (int i = 0; i < lines->u.l.n; i++) {
        jv *ln = lines->u.l.v[i];
        if (i) {
            jsb_putc(r, &o, '\n', false);
            if (blank || ln->u.s.n) jv_to_str(r, &o, indv);
        }
        jv_to_str(r, &o, ln);
    }
    return jsb_value(r, &o);
}

static int sort_cmp_dir;
static jrender *sort_r;
static int cmp_values(const void *x, const void *y) {
    jv *a = *(jv *const *)x, *b = *(jv *const *)y;
    /* numbers and strings; others keep order */
    int c = 0;
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        c = memcmp(a->u.s.s, b->u.s.s, n);
        if (!c) c = (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
    } else if ((a->kind == JV_INT || a->kind == JV_FLOAT || a->kind == JV_BOOL) && (b->kind == JV_INT || b->kind == JV_FLOAT || b->kind == JV_BOOL)) {
        double p = a->kind == JV_FLOAT ? a->u.f : a->kind == JV_INT ? (double)a->u.i : a->u.b;
        double q = b->kind == JV_FLOAT ? b->u.f : b->kind == JV_INT ? (double)b->u.i : b->u.b;
        c = (p > q) - (p < q);
    } else jr_fail(sort_r, "'<' not supported between instances of '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
    return c * sort_cmp_dir;
}

static jv *select_items(jrender *r, jv *seq, const jargs *a, int first_arg, bool reject, bool by_attr) {
    jv *items = jv_truthy(seq) ? jinja_iterable(r, seq) : jv_list(r, 0); /* jinja2: "if value: for item in value" */
    jv *out = jv_list(r, items->u.l.n);
    out->gen = true;
    jv *attr = by_attr ? arg(a, 0, "attribute") : NULL;
    if (by_attr && !attr) jr_fail(r, "selectattr/rejectattr need an attribute");
    jv *test = a->npos > first_arg ? a->pos[first_arg] : NULL;
    int tid = -1;
    if (test) {
        tid = jinja_test_id(want_str(r, test, "test name"));
        if (tid < 0) jr_fail(r, "No test named '%s'.", test->u.s.s);
    }
    int ntargs = a->npos > first_arg + 1 ? a->npos - first_arg - 1 : 0;
    for (int k = 0; k < items->u.l.n; k++) {
        jv *x = items->u.l.v[k];
        jv *val = by_attr ? attr_path(r, x, attr) : x;
        bool ok = tid >= 0 ? jinja_apply_test(r, tid, val, a->pos + first_arg + 1, ntargs) : jv_truthy(val);
        if (ok != reject) jv_list_push(r, out, x);
    }
    return out;
}

jv *jinja_apply_filter(jrender *r, int id, jv *v, jv **args, const char **kw, int nargs) {
    jargs a = split_args(r, args, kw, nargs);
    switch (id) {
    case F_ABS:
        if (v->kind == JV_INT) return jv_int(r, v->u.i < 0 ? -v->u.i : v->u.i);
        if (v->kind == JV_FLOAT) return jv_float(r, fabs(v->u.f));
        jr_fail(r, "bad operand type for abs(): '%s'", jv_kind_name(v));
    case F_ATTR: return jinja_getattr(r, v, want_str(r, arg(&a, 0, "name") ? arg(&a, 0, "name") : jv_cstr(r, ""), "attribute"));
    case F_CAPITALIZE: return map_case(r, jv_stringify(r, v), 3);
    case F_TITLE: return map_case(r, jv_stringify(r, v), 2);
    case F_UPPER: return map_case(r, jv_stringify(r, v), 0);
    case F_LOWER: return map_case(r, jv_stringify(r, v), 1);
    case F_COUNT: case F_LENGTH: return jv_int(r, length_of(r, v));
    case F_DEFAULT: case F_D: {
        jv *def = arg(&a, 0, "default_value");
        jv *boolean = arg(&a, 1, "boolean");
        if (v->kind == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(v))) return def ? def : jv_cstr(r, "");
        return v;
    }
    case F_DICTSORT: {
        jv *it = items_of(r, v);
        sort_r = r;
        sort_cmp_dir = arg(&a, 2, "reverse") && jv_truthy(arg(&a, 2, "reverse")) ? -1 : 1;
        jv **keys = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(it->u.l.n + 1));
        for (int k = 0; k < it->u.l.n; k++) keys[k] = it->u.l.v[k]->u.l.v[0];
        qsort(keys, (size_t)it->u.l.n, sizeof(jv *), cmp_values);
        jv *out = jv_list(r, it->u.l.n);
        for (int k = 0; k < it->u.l.n; k++)
            for (int j = 0; j < it->u.l.n; j++)
                if (it->u.l.v[j]->u.l.v[0] == keys[k]) jv_list_push(r, out, it->u.l.v[j]);
        return out;
    }
    case F_ESCAPE: case F_E: {
        if (v->kind == JV_STR && v->safe) return v;
        jv *e = html_escape(r, v);
        e->safe = true;
        return e;
    }
    case F_FIRST: case F_LAST: {
        if (id == F_LAST && v->kind == JV_LIST && v->gen) jr_fail(r, "'generator' object is not reversible");
        jv *it = jinja_iterable(r, v);
        if (!it->u.l.n) return jv_undef(r, "first");
        return it->u.l.v[id == F_FIRST ? 0 : it->u.l.n - 1];
    }
    case F_FLOAT: {
        if (v->kind == JV_FLOAT) return v;
        if (v->kind == JV_INT || v->kind == JV_BOOL) return jv_float(r, v->kind == JV_INT ? (double)v->u.i : v->u.b);
        if (v->kind == JV_STR) {
            char *end;
            double f = strtod(v->u.s.s, &end);
            if (end != v->u.s.s && !*end) return jv_float(r, f);
        }
        return arg(&a, 0, "default") ? arg(&a, 0, "default") : jv_float(r, 0.0);
    }
    case F_INT: {
        if (v->kind == JV_INT) return v;
        if (v->kind == JV_BOOL) return jv_int(r, v->u.b);
        if (v->kind == JV_FLOAT) return jv_int(r, (int64_t)v->u.f);
        if (v->kind == JV_STR) {
            char *end;
            long long x = strtoll(v->u.s.s, &end, 10);
            if (end != v->u.s.s && !*end) return jv_int(r, x);
            double f = strtod(v->u.s.s, &end);
            if (end != v->u.s.s && !*end) return jv_int(r, (int64_t)f);
        }
        return arg(&a, 0, "default") ? arg(&a, 0, "default") : jv_int(r, 0);
    }
    case F_INDENT: {
        jv *f = arg(&a, 1, "first"), *b = arg(&a, 2, "blank");
        return indent(r, v, arg(&a, 0, "width"), f && jv_truthy(f), b && jv_truthy(b));
    }
    case F_ITEMS: return items_of(r, v);
    case F_JOIN: {
        jv *it = jinja_iterable(r, v);
        jv *sep = arg(&a, 0, "d");
        jv *attr = arg(&a, 1, "attribute");
        jsb o = {0};
        for (int k = 0; k < it->u.l.n; k++) {
            if (k && sep) jv_to_str(r, &o, sep);
            jv *x = attr ? attr_path(r, it->u.l.v[k], attr) : it->u.l.v[k];
            if (x->kind != JV_UNDEF) jv_to_str(r, &o, x);
        }
        return jsb_value(r, &o);
    }
    case F_LIST: {
        jv *it = jinja_iterable(r, v);
        jv *l = jv_list(r, it->u.l.n);
        for (int k = 0; k < it->u.l.n; k++) jv_list_push(r, l, it->u.l.v[k]);
        return l;
    }
    case F_MAP: {
        jv *it = jv_truthy(v) ? jinja_iterable(r, v) : jv_list(r, 0);
        jv *out = jv_list(r, it->u.l.n);
        out->gen = true;
        jv *attr = NULL;
        for (int k = 0; k < a.nkw; k++)
            if (!strcmp(a.kwn[k], "attribute")) attr = a.kwv[k];
        jv *def = NULL;
        for (int k = 0; k < a.nkw; k++)
            if (!strcmp(a.kwn[k], "default")) def = a.kwv[k];
        if (attr) {
            for (int k = 0; k < it->u.l.n; k++) {
                jv *x = attr_path(r, it->u.l.v[k], attr);
                jv_list_push(r, out, x->kind == JV_UNDEF && def ? def : x);
            }
            return out;
        }
        if (!a.npos) jr_fail(r, "map needs a filter name or attribute=");
        int fid = jinja_filter_id(want_str(r, a.pos[0], "filter name"));
        if (fid < 0) jr_fail(r, "No filter named '%s'.", a.pos[0]->u.s.s);
        for (int k = 0; k < it->u.l.n; k++) jv_list_push(r, out, jinja_apply_filter(r, fid, it->u.l.v[k], a.pos + 1, NULL, a.npos - 1));
        return out;
    }
    case F_MAX: case F_MIN: {
        jv *it = jinja_iterable(r, v);
        if (!it->u.l.n) return jv_undef(r, "max");
        sort_r = r;
        sort_cmp_dir = 1;
        jv *best = it->u.l.v[0];
        for (int k = 1; k < it->u.l.n; k++) {
            int c = cmp_values(&it->u.l.v[k], &best);
            if (id == F_MAX ? c > 0 : c < 0) best = it->u.l.v[k];
        }
        return best;
    }
    case F_REJECT: return select_items(r, v, &a, 0, true, false);
    case F_SELECT: return select_items(r, v, &a, 0, false, false);
    case F_REJECTATTR: return select_items(r, v, &a, 1, true, true);
    case F_SELECTATTR: return select_items(r, v, &a, 1, false, true);
    case F_REPLACE: {
        jv *s = jv_stringify(r, v);
        jv *old = arg(&a, 0, "old"), *nw = arg(&a, 1, "new"), *cnt = arg(&a, 2, "count");
        if (!old || !nw) jr_fail(r, "replace needs old and new");
        return replace(r, s, jv_stringify(r, old), jv_stringify(r, nw), cnt && cnt->kind != JV_NONE ? want_int(r, cnt, "count") : -1);
    }
    case F_REVERSE: {
        if (v->kind == JV_STR) {
            jv *it = jinja_iterable(r, v);
            jsb o = {0};
            for (int k = it->u.l.n - 1; k >= 0; k--) jv_to_str(r, &o, it->u.l.v[k]);
            return jsb_value(r, &o);
        }
        jv *it = jinja_iterable(r, v);
        jv *l = jv_list(r, it->u.l.n);
        for (int k = it->u.l.n - 1; k >= 0; k--) jv_list_push(r, l, it->u.l.v[k]);
        return l;
    }
    case F_ROUND: {
        jv *pr = arg(&a, 0, "precision"), *m = arg(&a, 1, "method");
        double x = v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : 0;
        int64_t p = pr ? want_int(r, pr, "precision") : 0;
        double s = pow(10.0, (double)p);
        const char *meth = m ? want_str(r, m, "method") : "common";
        double y = !strcmp(meth, "ceil") ? ceil(x * s) / s : !strcmp(meth, "floor") ? floor(x * s) / s : round(x * s) / s;
        return jv_float(r, y);
    }
    case F_SAFE: {
        jv *s = v->kind == JV_UNDEF ? jv_cstr(r, "") : jv_stringify(r, v);
        if (s->safe) return s;
        jv *c = jv_new(r, JV_STR);
        *c = *s;
        c->safe = true;
        return c;
    }
    case F_STRING:
        if (v->kind == JV_UNDEF) return jv_cstr(r, "");
        return jv_stringify(r, v);
    case F_SORT: {
        jv *it = jinja_iterable(r, v);
        jv *rev = arg(&a, 0, "reverse"), *attr = arg(&a, 2, "attribute");
        sort_r = r;
        sort_cmp_dir = rev && jv_truthy(rev) ? -1 : 1;
        int n = it->u.l.n;
        jv **keys = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(n + 1));
        jv **pairs = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(n + 1));
        for (int k = 0; k < n; k++) {
            jv *key = attr ? attr_path(r, it->u.l.v[k], attr) : it->u.l.v[k];
            jv *pr = jv_list(r, 2);
            jv_list_push(r, pr, key);
            jv_list_push(r, pr, it->u.l.v[k]);
            pairs[k] = pr;
            keys[k] = key;
        }
        /* stable insertion sort on keys */
        for (int k = 1; k < n; k++) {
            jv *p = pairs[k];
            int j = k - 1;
            while (j >= 0 && cmp_values(&pairs[j]->u.l.v[0], &p->u.l.v[0]) > 0) {
                pairs[j + 1] = pairs[j];
                j--;
            }
            pairs[j + 1] = p;
        }
        jv *out = jv_list(r, n);
        for (int k = 0; k < n; k++) jv_list_push(r, out, pairs[k]->u.l.v[1]);
        return out;
    }
    case F_SUM: {
        jv *it = jinja_iterable(r, v);
        jv *attr = arg(&a, 0, "attribute"), *start = arg(&a, 1, "start");
        double f = 0;
        int64_t i = start ? want_int(r, start, "start") : 0;
        bool fl = false;
        for (int k = 0; k < it->u.l.n; k++) {
            jv *x = attr ? attr_path(r, it->u.l.v[k], attr) : it->u.l.v[k];
            if (x->kind == JV_FLOAT) { fl = true; f += x->u.f; }
            else i += want_int(r, x, "sum item");
        }
        return fl ? jv_float(r, f + (double)i) : jv_int(r, i);
    }
    case F_TOJSON: {
        jv *ind = NULL, *sk = NULL;
        for (int k = 0; k < a.nkw; k++) {
            if (!strcmp(a.kwn[k], "indent")) ind = a.kwv[k];
            else if (!strcmp(a.kwn[k], "sort_keys")) sk = a.kwv[k];
            else if (!strcmp(a.kwn[k], "ensure_ascii") && jv_truthy(a.kwv[k])) jr_fail(r, "tojson: ensure_ascii=True is not supported");
            else if (!strcmp(a.kwn[k], "separators") && a.kwv[k]->kind != JV_NONE) jr_fail(r, "tojson: custom separators are not supported");
        }
        if (a.npos > 1) ind = a.pos[1];
        int indent_n = ind && ind->kind != JV_NONE ? (int)want_int(r, ind, "indent") : -1;
        jsb o = {0};
        jv_to_json(r, &o, v, indent_n, sk && jv_truthy(sk), 0);
        jv *out = jsb_value(r, &o);
        /* JSON of data is data, whole (quotes and separators included) */
        if (jv_is_data(v) && o.n) {
            out->u.s.data = ja_alloc(&r->arena, o.n);
            memset(out->u.s.data, 1, o.n);
        }
        return out;
    }
    case F_TRIM: {
        jv *src = jv_stringify(r, v->kind == JV_UNDEF ? jv_cstr(r, "") : v);
        jv *t = strip(r, src, arg(&a, 0, "chars"), true, true);
        t->safe = src->safe;
        return t;
    }
    case F_UNIQUE: {
        jv *it = jinja_iterable(r, v);
        jv *cs = arg(&a, 0, "case_sensitive"), *attr = arg(&a, 1, "attribute");
        bool sens = cs && jv_truthy(cs);
        jv *seen = jv_list(r, it->u.l.n), *out = jv_list(r, it->u.l.n);
        for (int k = 0; k < it->u.l.n; k++) {
            jv *key = attr ? attr_path(r, it->u.l.v[k], attr) : it->u.l.v[k];
            if (!sens && key->kind == JV_STR) key = map_case(r, key, 1);
            bool dup = false;
            for (int j = 0; j < seen->u.l.n && !dup; j++) dup = jv_equal(seen->u.l.v[j], key);
            if (!dup) {
                jv_list_push(r, seen, key);
                jv_list_push(r, out, it->u.l.v[k]);
            }
        }
        return out;
    }
    case F_WORDCOUNT: {
        jv *s = jv_stringify(r, v);
        return jv_int(r, split(r, s, NULL, -1)->u.l.n);
    }
    }
    jr_fail(r, "internal: filter %d", id);
}

bool jinja_apply_test(jrender *r, int id, jv *v, jv **args, int nargs) {
    jv *x = nargs > 0 ? args[0] : NULL;
    bool num = v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
    switch (id) {
    case T_BOOLEAN: return v->kind == JV_BOOL;
    case T_CALLABLE: return v->kind == JV_MACRO || v->kind == JV_FUNC;
    case T_DEFINED: return v->kind != JV_UNDEF;
    case T_UNDEFINED: return v->kind == JV_UNDEF;
    case T_DIVISIBLEBY: {
        if (!x) jr_fail(r, "divisibleby needs an argument");
        int64_t d = want_int(r, x, "divisor");
        if (!d) jr_fail(r, "integer division or modulo by zero");
        return want_int(r, v, "value") % d == 0;
    }
    case T_EQ: case T_EQUALTO: case T_EQEQ: if (!x) jr_fail(r, "test needs an argument"); return jv_equal(v, x);
    case T_NE: case T_NEOP: if (!x) jr_fail(r, "test needs an argument"); return !jv_equal(v, x);
    case T_ESCAPED: return false;
    case T_EVEN: return want_int(r, v, "value") % 2 == 0;
    case T_ODD: return want_int(r, v, "value") % 2 != 0;
    case T_FALSE: return v->kind == JV_BOOL && !v->u.b;
    case T_TRUE: return v->kind == JV_BOOL && v->u.b;
    case T_FLOAT: return v->kind == JV_FLOAT;
    case T_INTEGER: return v->kind == JV_INT;
    case T_NUMBER: return num;
    case T_GE: case T_GEOP: case T_GT: case T_GTOP: case T_GREATERTHAN: case T_LE: case T_LEOP: case T_LT: case T_LTOP: case T_LESSTHAN: {
        if (!x) jr_fail(r, "test needs an argument");
        sort_r = r;
        sort_cmp_dir = 1;
        int c = cmp_values(&v, &x);
        if (id == T_GE || id == T_GEOP) return c >= 0;
        if (id == T_GT || id == T_GTOP || id == T_GREATERTHAN) return c > 0;
        if (id == T_LE || id == T_LEOP) return c <= 0;
        return c < 0;
    }
    case T_IN: {
        if (!x) jr_fail(r, "test needs an argument");
        if (x->kind == JV_STR) {
            want_str(r, v, "left operand of in");
            if (!v->u.s.n) return true;
            for (size_t k = 0; k + v->u.s.n <= x->u.s.n; k++)
                if (!memcmp(x->u.s.s + k, v->u.s.s, v->u.s.n)) return true;
            return false;
        }
        if (x->kind == JV_DICT || x->kind == JV_NS) return jv_dict_getv(x, v) != NULL;
        jv *it = jinja_iterable(r, x);
        for (int k = 0; k < it->u.l.n; k++)
            if (jv_equal(it->u.l.v[k], v)) return true;
        return false;
    }
    case T_ITERABLE: return v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_UNDEF;
    case T_SEQUENCE: return v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_UNDEF;
    case T_MAPPING: return v->kind == JV_DICT;
    case T_NONE: return v->kind == JV_NONE;
    case T_STRING: return v->kind == JV_STR;
    case T_SAMEAS: if (!x) jr_fail(r, "test needs an argument"); return v == x || (v->kind == x->kind && (v->kind == JV_NONE || (v->kind == JV_BOOL && v->u.b == x->u.b)));
    case T_LOWER: case T_UPPER: {
        if (v->kind != JV_STR) return false;
        bool cased = false;
        for (size_t k = 0; k < v->u.s.n; k++) {
            char c = v->u.s.s[k];
            if (c >= 'a' && c <= 'z') { if (id == T_UPPER) return false; cased = true; }
            if (c >= 'A' && c <= 'Z') { if (id == T_LOWER) return false; cased = true; }
        }
        return cased;
    }
    }
    jr_fail(r, "internal: test %d", id);
}

static jv *strftime_now(jrender *r, const char *fmt) {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char buf[256];
    size_t n = strftime(buf, sizeof buf, fmt, &tm);
    return jv_str(r, buf, n, NULL, false);
}

jv *jinja_call_builtin(jrender *r, jv *fn, jv **args, const char **kw, int nargs) {
    jargs a = split_args(r, args, kw, nargs);
    jv *self = fn->u.fn.self;
    switch (fn->u.fn.id) {
    case B_RANGE: {
        int64_t lo = 0, hi, st = 1;
        if (a.npos == 1) hi = want_int(r, a.pos[0], "range stop");
        else if (a.npos >= 2) {
            lo = want_int(r, a.pos[0], "range start");
            hi = want_int(r, a.pos[1], "range stop");
            if (a.npos > 2) st = want_int(r, a.pos[2], "range step");
        } else jr_fail(r, "range expected at least 1 argument");
        if (!st) jr_fail(r, "range() arg 3 must not be zero");
        if ((hi - lo) / st > 100000) jr_fail(r, "range too large");
        jv *l = jv_list(r, 8);
        for (int64_t k = lo; st > 0 ? k < hi : k > hi; k += st) jv_list_push(r, l, jv_int(r, k));
        return l;
    }
    case B_NAMESPACE: case B_DICT: {
        jv *d = jv_new(r, fn->u.fn.id == B_NAMESPACE ? JV_NS : JV_DICT);
        for (int k = 0; k < a.npos; k++) {
            if (a.pos[k]->kind != JV_DICT) jr_fail(r, "namespace/dict positional argument must be a mapping");
            for (int j = 0; j < a.pos[k]->u.d.n; j++) jv_dict_setv(r, d, a.pos[k]->u.d.k[j], a.pos[k]->u.d.v[j]);
        }
        for (int k = 0; k < a.nkw; k++) jv_dict_setv(r, d, jv_cstr(r, a.kwn[k]), a.kwv[k]);
        return d;
    }
    case B_RAISE: {
        jsb o = {0};
        if (a.npos) jv_to_str(r, &o, a.pos[0]);
        jr_fail(r, "%s", o.s ? o.s : "");
    }
    case B_STRFTIME: return strftime_now(r, a.npos ? want_str(r, a.pos[0], "format") : "");
    }
    /* methods */
    if (self->kind == JV_STR) {
        jv *p0 = a.npos > 0 ? a.pos[0] : NULL, *p1 = a.npos > 1 ? a.pos[1] : NULL, *p2 = a.npos > 2 ? a.pos[2] : NULL;
        switch (fn->u.fn.id) {
        case M_STRIP: return strip(r, self, p0, true, true);
        case M_LSTRIP: return strip(r, self, p0, true, false);
        case M_RSTRIP: return strip(r, self, p0, false, true);
        case M_SPLIT: {
            jv *ms = p1 ? p1 : arg(&a, 99, "maxsplit");
            return split(r, self, p0 ? p0 : arg(&a, 99, "sep"), ms ? want_int(r, ms, "maxsplit") : -1);
        }
        case M_RSPLIT: {
            if (p1 && want_int(r, p1, "maxsplit") >= 0) {
                /* rsplit(sep, n): split from the right */
                int64_t n = p1->u.i;
                jv *all = split(r, self, p0, -1);
                if (all->u.l.n <= n + 1) return all;
                jv *sep = p0 ? p0 : jv_cstr(r, " ");
                int head = all->u.l.n - (int)n;
                jsb o = {0};
                for (int k = 0; k < head; k++) {
                    if (k) jv_to_str(r, &o, sep);
                    jv_to_str(r, &o, all->u.l.v[k]);
                }
                jv *l = jv_list(r, (int)n + 1);
                jv_list_push(r, l, jsb_value(r, &o));
                for (int k = head; k < all->u.l.n; k++) jv_list_push(r, l, all->u.l.v[k]);
                return l;
            }
            return split(r, self, p0, -1);
        }
        case M_STARTSWITH: if (!p0) jr_fail(r, "startswith needs an argument"); return jv_boolv(r, affix(r, self, p0, false));
        case M_ENDSWITH: if (!p0) jr_fail(r, "endswith needs an argument"); return jv_boolv(r, affix(r, self, p0, true));
        case M_UPPER: return map_case(r, self, 0);
        case M_LOWER: return map_case(r, self, 1);
        case M_TITLE: return map_case(r, self, 2);
        case M_CAPITALIZE: return map_case(r, self, 3);
        case M_REPLACE:
            if (!p0 || !p1) jr_fail(r, "replace needs 2 arguments");
            return replace(r, self, jv_stringify(r, p0), jv_stringify(r, p1), p2 ? want_int(r, p2, "count") : -1);
        case M_FIND: case M_COUNT: {
            const char *x = want_str(r, p0 ? p0 : jv_none(r), "substring");
            size_t m = p0->u.s.n;
            int64_t c = 0;
            for (size_t k = 0; k + m <= self->u.s.n; k++)
                if (!memcmp(self->u.s.s + k, x, m)) {
                    if (fn->u.fn.id == M_FIND) return jv_int(r, (int64_t)ju_len(self->u.s.s, k));
                    c++;
                    if (m) k += m - 1;
                }
            return jv_int(r, fn->u.fn.id == M_FIND ? -1 : c);
        }
        case M_JOIN: {
            jv *it = jinja_iterable(r, p0 ? p0 : jv_list(r, 0));
            jsb o = {0};
            for (int k = 0; k < it->u.l.n; k++) {
                if (k) jv_to_str(r, &o, self);
                want_str(r, it->u.l.v[k], "join item");
                jv_to_str(r, &o, it->u.l.v[k]);
            }
            return jsb_value(r, &o);
        }
        case M_SPLITLINES: {
            jv *l = jv_list(r, 4);
            size_t st = 0, k = 0, n = self->u.s.n;
            while (k < n) {
                char c = self->u.s.s[k];
                if (c == '\n' || c == '\r') {
                    jv_list_push(r, l, substr(r, self, st, k));
                    if (c == '\r' && k + 1 < n && self->u.s.s[k + 1] == '\n') k++;
                    st = ++k;
                } else k++;
            }
            if (st < n) jv_list_push(r, l, substr(r, self, st, n));
            return l;
        }
        case M_ISDIGIT: case M_ISALPHA: case M_ISSPACE: {
            if (!self->u.s.n) return jv_boolv(r, false);
            for (size_t k = 0; k < self->u.s.n; k++) {
                char c = self->u.s.s[k];
                bool ok = fn->u.fn.id == M_ISDIGIT ? (c >= '0' && c <= '9') : fn->u.fn.id == M_ISSPACE ? py_space((unsigned char)c)
                                                                                                       : ((c | 32) >= 'a' && (c | 32) <= 'z');
                if (!ok) return jv_boolv(r, false);
            }
            return jv_boolv(r, true);
        }
        }
    }
    if (self->kind == JV_DICT) {
        switch (fn->u.fn.id) {
        case M_GET: {
            if (!a.npos) jr_fail(r, "get expected at least 1 argument");
            jv *v = jv_dict_getv(self, a.pos[0]);
            return v ? v : a.npos > 1 ? a.pos[1] : jv_none(r);
        }
        case M_ITEMS: return items_of(r, self);
        case M_KEYS: return jinja_iterable(r, self);
        case M_VALUES: {
            jv *l = jv_list(r, self->u.d.n);
            for (int k = 0; k < self->u.d.n; k++) jv_list_push(r, l, self->u.d.v[k]);
            return l;
        }
        }
    }
    jr_fail(r, "unsupported method call");
}
