/* jinja_eval.c — runs a compiled template: statements (output, if, for with
 * loop.*, set, namespaces, macros, filter blocks, break/continue), scopes as
 * jinja2 keeps them (a for loop's body and a macro call are scopes of their
 * own; if is not), and expressions with Python's operator semantics. Errors
 * longjmp to jinja_run with the line; every step, byte and allocation is
 * counted against the render's limits. */
#include "engine/chat/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void jr_fail(jrender *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "line %d: %s", r->line, msg);
    longjmp(r->jmp, 1);
}

/* ---- scopes ---- */
static jscope *scope_new(jrender *r, jscope *parent) {
    jscope *s = ja_alloc(&r->arena, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jrender *r, jscope *s, const char *name, jv *v) {
    for (int k = 0; k < s->n; k++)
        if (!strcmp(s->names[k], name)) {
            s->vals[k] = v;
            return;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        const char **nn = ja_alloc(&r->arena, sizeof(char *) * (size_t)cap);
        jv **nv = ja_alloc(&r->arena, sizeof(jv *) * (size_t)cap);
        if (s->n) {
            memcpy(nn, s->names, sizeof(char *) * (size_t)s->n);
            memcpy(nv, s->vals, sizeof(jv *) * (size_t)s->n);
        }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

jv *jr_lookup(jrender *r, jscope *s, const char *name) {
    for (; s; s = s->parent)
        for (int k = s->n - 1; k >= 0; k--)
            if (!strcmp(s->names[k], name)) return s->vals[k];
    jv *g = jinja_global(r, name);
    return g ? g : jv_undef(r, name);
}

/* ---- public render API ---- */
jinja_render *jinja_render_begin(const jinja_template *t, const jinja_limits *lim) {
    jrender *r = calloc(1, sizeof *r);
    if (!r) abort();
    r->t = t;
    if (lim) r->lim = *lim;
    if (!r->lim.max_output) r->lim.max_output = 1u << 20;
    if (!r->lim.max_memory) r->lim.max_memory = 64u << 20;
    if (!r->lim.max_steps) r->lim.max_steps = 5000000;
    if (!r->lim.max_depth) r->lim.max_depth = 64;
    r->arena.cap = r->lim.max_memory;
    r->arena.oom = NULL; /* set while running */
    r->globals = scope_new(r, NULL);
    return r;
}

void jinja_render_end(jinja_render *r) {
    if (!r) return;
    ja_free(&r->arena);
    free(r);
}

jinja_value *jinja_from_json(jinja_render *r, const char *json, size_t n, bool data, char *err, size_t errlen) {
    return jv_parse_json(r, json, n, data, err, errlen);
}
jinja_value *jinja_string(jinja_render *r, const char *s, size_t n, bool data) { return jv_str(r, s, n, NULL, data); }
jinja_value *jinja_bool(jinja_render *r, bool b) { return jv_boolv(r, b); }
jinja_value *jinja_dict_get(const jinja_value *d, const char *key) { return d ? jv_dict_gets(d, key) : NULL; }
bool jinja_dict_set(jinja_render *r, jinja_value *d, const char *key, jinja_value *v) {
    if (!d || d->kind != JV_DICT) return false;
    jv_dict_setv(r, d, jv_cstr(r, key), v);
    return true;
}
const char *jinja_string_of(const jinja_value *v, size_t *n) {
    if (!v || v->kind != JV_STR) return NULL;
    if (n) *n = v->u.s.n;
    return v->u.s.s;
}
int jinja_list_len(const jinja_value *v) { return v && v->kind == JV_LIST ? v->u.l.n : -1; }
jinja_value *jinja_list_at(const jinja_value *v, int i) {
    return v && v->kind == JV_LIST && i >= 0 && i < v->u.l.n ? v->u.l.v[i] : NULL;
}
jinja_value *jinja_to_json(jinja_render *r, const jinja_value *v, int indent) {
    if (setjmp(r->jmp)) return NULL;
    jsb b = {0};
    jv_to_json(r, &b, v, indent, false, 0);
    jv *out = jsb_value(r, &b);
    if (jv_is_data(v) && b.n) {
        out->u.s.data = ja_alloc(&r->arena, b.n);
        memset(out->u.s.data, 1, b.n);
    }
    return out;
}

void jinja_define(jinja_render *r, const char *name, jinja_value *v) {
    scope_set(r, r->globals, ja_strndup(&r->arena, name, strlen(name)), v);
}

const char *jinja_output(const jinja_render *r, size_t *len, const uint8_t **data) {
    if (len) *len = r->out.n;
    if (data) *data = r->out.data;
    return r->out.s ? r->out.s : "";
}

/* ---- evaluation ---- */
static jv *eval(jrender *r, jscope *s, const jnode *n);
static void exec_body(jrender *r, jscope *s, jnode *const *body, int nbody);

static void step(jrender *r, const jnode *n) {
    if (++r->steps > r->lim.max_steps) jr_fail(r, "template exceeded its step limit (%ld)", r->lim.max_steps);
    r->line = n->line;
}

static void emit(jrender *r, const jv *v) {
    jv_to_str(r, &r->out, v);
    if (r->out.n > r->lim.max_output) jr_fail(r, "template output exceeds %zu bytes", r->lim.max_output);
}

/* Renders body into a fresh buffer and returns it as a string value. */
static jv *capture(jrender *r, jscope *s, jnode *const *body, int nbody) {
    jsb saved = r->out;
    r->out = (jsb){0};
    exec_body(r, s, body, nbody);
    jv *v = jsb_value(r, &r->out);
    r->out = saved;
    return v;
}

static bool is_num(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static int64_t ival(const jv *v) { return v->kind == JV_INT ? v->u.i : v->kind == JV_BOOL ? v->u.b : (int64_t)v->u.f; }
static double fval(const jv *v) { return v->kind == JV_FLOAT ? v->u.f : (double)ival(v); }

static _Noreturn void undefined_fail(jrender *r, const jv *v) {
    jr_fail(r, "'%s' is undefined", v->name ? v->name : "value");
}

static const char *op_name(int op) {
    static const char *n[] = {"?", "+", "-", "*", "/", "//", "%", "**", "~"};
    return op <= OP_CONCAT ? n[op] : "?";
}

static jv *concat_str(jrender *r, const jv *a, const jv *b) {
    jsb o = {0};
    jv_to_str(r, &o, a);
    jv_to_str(r, &o, b);
    return jsb_value(r, &o);
}

static jv *repeat(jrender *r, const jv *seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq->kind == JV_STR) {
        if ((double)seq->u.s.n * (double)times > (double)r->lim.max_output) jr_fail(r, "string repetition too large");
        jsb o = {0};
        for (int64_t k = 0; k < times; k++) jsb_put(r, &o, seq->u.s.s, seq->u.s.n, seq->u.s.data, false);
        return jsb_value(r, &o);
    }
    if ((double)seq->u.l.n * (double)times > 1e6) jr_fail(r, "list repetition too large");
    jv *l = jv_list(r, seq->u.l.n * (int)times);
    for (int64_t k = 0; k < times; k++)
        for (int j = 0; j < seq->u.l.n; j++) jv_list_push(r, l, seq->u.l.v[j]);
    return l;
}

static jv *binop(jrender *r, int op, jv *a, jv *b) {
    if (op == OP_CONCAT) return concat_str(r, a->kind == JV_UNDEF ? jv_cstr(r, "") : a, b->kind == JV_UNDEF ? jv_cstr(r, "") : b);
    if (a->kind == JV_UNDEF) undefined_fail(r, a);
    if (b->kind == JV_UNDEF) undefined_fail(r, b);
    if (is_num(a) && is_num(b)) {
        bool fl = a->kind == JV_FLOAT || b->kind == JV_FLOAT;
        switch (op) {
        case OP_ADD: return fl ? jv_float(r, fval(a) + fval(b)) : jv_int(r, ival(a) + ival(b));
        case OP_SUB: return fl ? jv_float(r, fval(a) - fval(b)) : jv_int(r, ival(a) - ival(b));
        case OP_MUL: return fl ? jv_float(r, fval(a) * fval(b)) : jv_int(r, ival(a) * ival(b));
        case OP_DIV:
            if (fval(b) == 0) jr_fail(r, "division by zero");
            return jv_float(r, fval(a) / fval(b));
        case OP_FLOORDIV:
            if (fval(b) == 0) jr_fail(r, "integer division or modulo by zero");
            if (fl) return jv_float(r, floor(fval(a) / fval(b)));
            else {
                int64_t x = ival(a), y = ival(b), q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return jv_int(r, q);
            }
        case OP_MOD:
            if (fval(b) == 0) jr_fail(r, "integer division or modulo by zero");
            if (fl) {
                double m = fmod(fval(a), fval(b));
                if (m != 0 && ((m < 0) != (fval(b) < 0))) m += fval(b);
                return jv_float(r, m);
            } else {
                int64_t x = ival(a), y = ival(b), m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jv_int(r, m);
            }
        case OP_POW:
            if (!fl && ival(b) >= 0) {
                int64_t res = 1, x = ival(a);
                for (int64_t k = 0; k < ival(b) && k < 64; k++) res *= x;
                return jv_int(r, res);
            }
            return jv_float(r, pow(fval(a), fval(b)));
        }
    }
    if (op == OP_ADD && a->kind == JV_STR && b->kind == JV_STR) {
        if (a->safe == b->safe) {
            jv *c = concat_str(r, a, b);
            c->safe = a->safe;
            return c;
        }
        /* markupsafe: Markup + str escapes the plain side */
        jv *c = concat_str(r, a->safe ? a : jinja_html_escape(r, a), b->safe ? b : jinja_html_escape(r, b));
        c->safe = true;
        return c;
    }
    if (op == OP_ADD && a->kind == JV_LIST && b->kind == JV_LIST) {
        jv *l = jv_list(r, a->u.l.n + b->u.l.n);
        for (int k = 0; k < a->u.l.n; k++) jv_list_push(r, l, a->u.l.v[k]);
        for (int k = 0; k < b->u.l.n; k++) jv_list_push(r, l, b->u.l.v[k]);
        l->tuple = a->tuple;
        return l;
    }
    if (op == OP_MUL && (a->kind == JV_STR || a->kind == JV_LIST) && (b->kind == JV_INT || b->kind == JV_BOOL)) return repeat(r, a, ival(b));
    if (op == OP_MUL && (b->kind == JV_STR || b->kind == JV_LIST) && (a->kind == JV_INT || a->kind == JV_BOOL)) return repeat(r, b, ival(a));
    if (op == OP_ADD && (a->kind == JV_STR || b->kind == JV_STR))
        jr_fail(r, "can only concatenate str (not \"%s\") to str", jv_kind_name(a->kind == JV_STR ? b : a));
    jr_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op), jv_kind_name(a), jv_kind_name(b));
}

static int compare(jrender *r, jv *a, jv *b, int op) {
    if (is_num(a) && is_num(b)) {
        double x = fval(a), y = fval(b);
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t p = ival(a), q = ival(b);
            return p < q ? -1 : p > q;
        }
        return x < y ? -1 : x > y;
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = memcmp(a->u.s.s, b->u.s.s, n);
        if (c) return c < 0 ? -1 : 1;
        return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST) {
        for (int k = 0; k < a->u.l.n && k < b->u.l.n; k++) {
            if (jv_equal(a->u.l.v[k], b->u.l.v[k])) continue;
            return compare(r, a->u.l.v[k], b->u.l.v[k], op);
        }
        return a->u.l.n < b->u.l.n ? -1 : a->u.l.n > b->u.l.n;
    }
    if (a->kind == JV_UNDEF) undefined_fail(r, a);
    if (b->kind == JV_UNDEF) undefined_fail(r, b);
    static const char *n[] = {"<", ">", "<=", ">="};
    jr_fail(r, "'%s' not supported between instances of '%s' and '%s'", n[op - OP_LT], jv_kind_name(a), jv_kind_name(b));
}

static bool contains(jrender *r, jv *item, jv *seq) {
    switch (seq->kind) {
    case JV_STR:
        if (item->kind != JV_STR) jr_fail(r, "'in <string>' requires string as left operand, not %s", jv_kind_name(item));
        if (!item->u.s.n) return true;
        for (size_t k = 0; k + item->u.s.n <= seq->u.s.n; k++)
            if (!memcmp(seq->u.s.s + k, item->u.s.s, item->u.s.n)) return true;
        return false;
    case JV_LIST:
        for (int k = 0; k < seq->u.l.n; k++)
            if (jv_equal(seq->u.l.v[k], item)) return true;
        return false;
    case JV_DICT: case JV_NS: return jv_dict_getv(seq, item) != NULL;
    case JV_UNDEF: return false;
    default: jr_fail(r, "argument of type '%s' is not iterable", jv_kind_name(seq));
    }
}

/* Items a for loop (or a filter) walks: list members, dict keys, a
 * string's characters; undefined walks nothing. */
jv *jinja_iterable(jrender *r, jv *v) {
    switch (v->kind) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list(r, 0);
    case JV_NONE: jr_fail(r, "'NoneType' object is not iterable");
    case JV_DICT: case JV_NS: {
        jv *l = jv_list(r, v->u.d.n);
        for (int k = 0; k < v->u.d.n; k++) jv_list_push(r, l, v->u.d.k[k]);
        return l;
    }
    case JV_STR: {
        jv *l = jv_list(r, (int)v->u.s.n);
        for (size_t k = 0; k < v->u.s.n;) {
            size_t e = k + 1;
            while (e < v->u.s.n && ((unsigned char)v->u.s.s[e] & 0xC0) == 0x80) e++;
            jv_list_push(r, l, jv_str(r, v->u.s.s + k, e - k, v->u.s.data ? v->u.s.data + k : NULL, false));
            k = e;
        }
        return l;
    }
    default: jr_fail(r, "'%s' object is not iterable", jv_kind_name(v));
    }
}

/* Python slice indices for a sequence of length len. */
static void slice_bounds(int64_t len, const jv *a, const jv *b, const jv *c, int64_t *start, int64_t *stop, int64_t *stepv) {
    int64_t st = c && c->kind != JV_NONE ? ival(c) : 1;
    if (st == 0) st = 1;
    *stepv = st;
    int64_t lo, hi;
    if (st > 0) {
        lo = a && a->kind != JV_NONE ? ival(a) : 0;
        hi = b && b->kind != JV_NONE ? ival(b) : len;
        if (lo < 0) lo += len;
        if (hi < 0) hi += len;
        if (lo < 0) lo = 0;
        if (lo > len) lo = len;
        if (hi < 0) hi = 0;
        if (hi > len) hi = len;
    } else {
        lo = a && a->kind != JV_NONE ? ival(a) : len - 1;
        hi = b && b->kind != JV_NONE ? ival(b) : -len - 1;
        if (lo < 0) lo += len;
        if (hi < 0) hi += len;
        if (lo < -1) lo = -1;
        if (lo >= len) lo = len - 1;
        if (hi < -1) hi = -1;
        if (hi >= len) hi = len - 1;
    }
    *start = lo;
    *stop = hi;
}

static jv *do_slice(jrender *r, jv *obj, jv *a, jv *b, jv *c) {
    if (obj->kind == JV_UNDEF) undefined_fail(r, obj);
    if (obj->kind == JV_LIST) {
        int64_t lo, hi, st;
        slice_bounds(obj->u.l.n, a, b, c, &lo, &hi, &st);
        jv *l = jv_list(r, 4);
        l->tuple = obj->tuple;
        for (int64_t k = lo; st > 0 ? k < hi : k > hi; k += st) jv_list_push(r, l, obj->u.l.v[k]);
        return l;
    }
    if (obj->kind == JV_STR) {
        jv *chars = jinja_iterable(r, obj);
        int64_t lo, hi, st;
        slice_bounds(chars->u.l.n, a, b, c, &lo, &hi, &st);
        jsb o = {0};
        for (int64_t k = lo; st > 0 ? k < hi : k > hi; k += st) jv_to_str(r, &o, chars->u.l.v[k]);
        return jsb_value(r, &o);
    }
    jr_fail(r, "'%s' object is not subscriptable", jv_kind_name(obj));
}

static jv *call_macro(jrender *r, jv *m, jv **args, const char **kw, int nargs) {
    const jnode *mn = m->u.m.node;
    if (++r->depth > r->lim.max_depth) jr_fail(r, "macro recursion deeper than %d", r->lim.max_depth);
    jscope *s = scope_new(r, (jscope *)m->u.m.scope);
    int npos = 0;
    for (int k = 0; k < nargs; k++) {
        if (kw && kw[k]) {
            bool found = false;
            for (int j = 0; j < mn->nnames; j++)
                if (!strcmp(mn->names[j], kw[k])) {
                    scope_set(r, s, mn->names[j], args[k]);
                    found = true;
                }
            if (!found) jr_fail(r, "macro '%s' takes no keyword argument '%s'", mn->name, kw[k]);
        } else {
            if (npos >= mn->nnames) jr_fail(r, "macro '%s' takes not more than %d argument(s)", mn->name, mn->nnames);
            scope_set(r, s, mn->names[npos++], args[k]);
        }
    }
    for (int j = 0; j < mn->nnames; j++) {
        bool set = false;
        for (int k = 0; k < s->n; k++)
            if (!strcmp(s->names[k], mn->names[j])) set = true;
        if (!set) scope_set(r, s, mn->names[j], mn->kids[j] ? eval(r, s, mn->kids[j]) : jv_undef(r, mn->names[j]));
    }
    int saved_ctl = r->loop_ctl;
    jv *out = capture(r, s, mn->body, mn->nbody);
    r->loop_ctl = saved_ctl;
    r->depth--;
    return out;
}

jv *jinja_call_value(jrender *r, jv *fn, jv **args, const char **kw, int nargs) {
    if (fn->kind == JV_MACRO) return call_macro(r, fn, args, kw, nargs);
    if (fn->kind == JV_FUNC) return jinja_call_builtin(r, fn, args, kw, nargs);
    if (fn->kind == JV_UNDEF) undefined_fail(r, fn);
    jr_fail(r, "'%s' object is not callable", jv_kind_name(fn));
}

static void eval_args(jrender *r, jscope *s, const jnode *n, jv ***args, const char ***kw) {
    *args = ja_alloc(&r->arena, sizeof(jv *) * (size_t)(n->nkids + 1));
    *kw = n->names;
    for (int k = 0; k < n->nkids; k++) (*args)[k] = eval(r, s, n->kids[k]);
}

static jv *eval(jrender *r, jscope *s, const jnode *n) {
    step(r, n);
    switch (n->kind) {
    case E_CONST: return n->cval;
    case E_NAME: return jr_lookup(r, s, n->name);
    case E_HOLE: return r->hole;
    case E_LIST: case E_TUPLE: {
        jv *l = jv_list(r, n->nkids);
        l->tuple = n->kind == E_TUPLE;
        for (int k = 0; k < n->nkids; k++) jv_list_push(r, l, eval(r, s, n->kids[k]));
        return l;
    }
    case E_DICT: {
        jv *d = jv_dict(r);
        for (int k = 0; k + 1 < n->nkids; k += 2) jv_dict_setv(r, d, eval(r, s, n->kids[k]), eval(r, s, n->kids[k + 1]));
        return d;
    }
    case E_ATTR: {
        jv *o = eval(r, s, n->a);
        r->line = n->line;
        if (o->kind == JV_UNDEF) undefined_fail(r, o);
        return jinja_getattr(r, o, n->name);
    }
    case E_ITEM: {
        jv *o = eval(r, s, n->a);
        jv *k = eval(r, s, n->b);
        r->line = n->line;
        if (o->kind == JV_UNDEF) undefined_fail(r, o);
        return jinja_getitem(r, o, k);
    }
    case E_SLICE: {
        jv *o = eval(r, s, n->a);
        jv *p[3];
        for (int k = 0; k < 3; k++) p[k] = n->kids[k] ? eval(r, s, n->kids[k]) : NULL;
        r->line = n->line;
        return do_slice(r, o, p[0], p[1], p[2]);
    }
    case E_CALL: {
        jv *fn = eval(r, s, n->a);
        jv **args;
        const char **kw;
        eval_args(r, s, n, &args, &kw);
        r->line = n->line;
        return jinja_call_value(r, fn, args, kw, n->nkids);
    }
    case E_FILTER: {
        jv *v = eval(r, s, n->a);
        jv **args;
        const char **kw;
        eval_args(r, s, n, &args, &kw);
        r->line = n->line;
        return jinja_apply_filter(r, n->filter_id, v, args, kw, n->nkids);
    }
    case E_TEST: {
        jv *v = eval(r, s, n->a);
        jv **args;
        const char **kw;
        eval_args(r, s, n, &args, &kw);
        r->line = n->line;
        bool res = jinja_apply_test(r, n->test_id, v, args, n->nkids);
        return jv_boolv(r, n->op ? !res : res);
    }
    case E_NEG: case E_POS: {
        jv *v = eval(r, s, n->a);
        r->line = n->line;
        if (!is_num(v)) jr_fail(r, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+', jv_kind_name(v));
        if (n->kind == E_POS) return v->kind == JV_BOOL ? jv_int(r, v->u.b) : v;
        return v->kind == JV_FLOAT ? jv_float(r, -v->u.f) : jv_int(r, -ival(v));
    }
    case E_BIN: {
        jv *a = eval(r, s, n->a), *b = eval(r, s, n->b);
        r->line = n->line;
        return binop(r, n->op, a, b);
    }
    case E_NOT: return jv_boolv(r, !jv_truthy(eval(r, s, n->a)));
    case E_AND: {
        jv *a = eval(r, s, n->a);
        return jv_truthy(a) ? eval(r, s, n->b) : a;
    }
    case E_OR: {
        jv *a = eval(r, s, n->a);
        return jv_truthy(a) ? a : eval(r, s, n->b);
    }
    case E_CMP: {
        jv *a = eval(r, s, n->a), *b = eval(r, s, n->b);
        r->line = n->line;
        switch (n->op) {
        case OP_EQ: return jv_boolv(r, jv_equal(a, b));
        case OP_NE: return jv_boolv(r, !jv_equal(a, b));
        case OP_LT: return jv_boolv(r, compare(r, a, b, n->op) < 0);
        case OP_GT: return jv_boolv(r, compare(r, a, b, n->op) > 0);
        case OP_LE: return jv_boolv(r, compare(r, a, b, n->op) <= 0);
        case OP_GE: return jv_boolv(r, compare(r, a, b, n->op) >= 0);
        case OP_IN: return jv_boolv(r, contains(r, a, b));
        default: return jv_boolv(r, !contains(r, a, b));
        }
    }
    case E_COND:
        if (jv_truthy(eval(r, s, n->a))) return eval(r, s, n->b);
        return n->c ? eval(r, s, n->c) : jv_undef(r, NULL);
    default: jr_fail(r, "internal: bad expression node %d", n->kind);
    }
}

static void assign(jrender *r, jscope *s, const char *const *names, int nnames, jv *v) {
    if (nnames == 1) {
        scope_set(r, s, names[0], v);
        return;
    }
    jv *items = jinja_iterable(r, v);
    if (items->u.l.n != nnames)
        jr_fail(r, "%s values to unpack (expected %d, got %d)", items->u.l.n > nnames ? "too many" : "not enough", nnames, items->u.l.n);
    for (int k = 0; k < nnames; k++) scope_set(r, s, names[k], items->u.l.v[k]);
}

static jv *loop_object(jrender *r, jv *items, int i) {
    jv *d = jv_dict(r);
    int n = items->u.l.n;
#define SETL(k, v) jv_dict_setv(r, d, jv_cstr(r, k), v)
    SETL("index", jv_int(r, i + 1));
    SETL("index0", jv_int(r, i));
    SETL("revindex", jv_int(r, n - i));
    SETL("revindex0", jv_int(r, n - i - 1));
    SETL("first", jv_boolv(r, i == 0));
    SETL("last", jv_boolv(r, i == n - 1));
    SETL("length", jv_int(r, n));
    SETL("depth", jv_int(r, 1));
    SETL("depth0", jv_int(r, 0));
    SETL("previtem", i > 0 ? items->u.l.v[i - 1] : jv_undef(r, "previtem"));
    SETL("nextitem", i + 1 < n ? items->u.l.v[i + 1] : jv_undef(r, "nextitem"));
#undef SETL
    return d;
}

static void exec_for(jrender *r, jscope *s, const jnode *n) {
    jv *it = eval(r, s, n->a);
    r->line = n->line;
    jv *items = jinja_iterable(r, it);
    jscope *ls = scope_new(r, s);
    if (n->b) {
        jv *kept = jv_list(r, items->u.l.n);
        for (int k = 0; k < items->u.l.n; k++) {
            assign(r, ls, n->names, n->nnames, items->u.l.v[k]);
            if (jv_truthy(eval(r, ls, n->b))) jv_list_push(r, kept, items->u.l.v[k]);
        }
        items = kept;
        ls = scope_new(r, s);
    }
    for (int k = 0; k < items->u.l.n; k++) {
        jscope *is = scope_new(r, ls);
        assign(r, is, n->names, n->nnames, items->u.l.v[k]);
        scope_set(r, is, "loop", loop_object(r, items, k));
        exec_body(r, is, n->body, n->nbody);
        if (r->loop_ctl == 1) {
            r->loop_ctl = 0;
            break;
        }
        r->loop_ctl = 0;
    }
    if (!items->u.l.n && n->nebody) exec_body(r, s, n->ebody, n->nebody);
}

static void exec_stmt(jrender *r, jscope *s, const jnode *n) {
    step(r, n);
    switch (n->kind) {
    case N_TEXT: emit(r, n->cval); return;
    case N_OUT: {
        jv *v = eval(r, s, n->a);
        r->line = n->line;
        emit(r, v);
        return;
    }
    case N_IF:
        if (jv_truthy(eval(r, s, n->a))) exec_body(r, s, n->body, n->nbody);
        else exec_body(r, s, n->ebody, n->nebody);
        return;
    case N_FOR: exec_for(r, s, n); return;
    case N_SET: assign(r, s, n->names, n->nnames, eval(r, s, n->a)); return;
    case N_SETATTR: {
        jv *ns = jr_lookup(r, s, n->names[0]);
        jv *v = eval(r, s, n->a);
        r->line = n->line;
        if (ns->kind != JV_NS) jr_fail(r, "cannot assign attribute on non-namespace object");
        jv_dict_setv(r, ns, jv_cstr(r, n->name), v);
        return;
    }
    case N_SETBLOCK: {
        jv *v = capture(r, s, n->body, n->nbody);
        if (n->a) {
            r->hole = v;
            v = eval(r, s, n->a);
        }
        scope_set(r, s, n->name, v);
        return;
    }
    case N_FILTERBLOCK: {
        r->hole = capture(r, s, n->body, n->nbody);
        emit(r, eval(r, s, n->a));
        return;
    }
    case N_MACRO: {
        jv *m = jv_new(r, JV_MACRO);
        m->u.m.node = n;
        m->u.m.scope = s; /* the macro's scope parent: where it was defined (usually the top) */
        scope_set(r, s, n->name, m);
        return;
    }
    case N_BREAK: r->loop_ctl = 1; return;
    case N_CONTINUE: r->loop_ctl = 2; return;
    default: jr_fail(r, "internal: bad statement node %d", n->kind);
    }
}

static void exec_body(jrender *r, jscope *s, jnode *const *body, int nbody) {
    for (int k = 0; k < nbody && !r->loop_ctl; k++) exec_stmt(r, s, body[k]);
}

int jinja_run(jinja_render *r, char *err, size_t errlen) {
    if (r->ran || !r->t) {
        snprintf(err, errlen, r->t ? "jinja_run called twice" : "no template to run");
        return -1;
    }
    r->ran = true;
    jmp_buf oom;
    r->arena.oom = &oom;
    volatile int rc = setjmp(r->jmp);
    if (rc == 0 && setjmp(oom) != 0) {
        snprintf(r->err, sizeof r->err, "line %d: template used more than %zu bytes of memory", r->line, r->lim.max_memory);
        rc = 1;
    }
    if (rc == 0) {
        jscope *top = scope_new(r, r->globals);
        r->out = (jsb){0};
        exec_body(r, top, r->t->body, r->t->nbody);
        r->arena.oom = NULL;
        return 0;
    }
    r->arena.oom = NULL;
    r->out = (jsb){0};
    if (err) snprintf(err, errlen, "%s", r->err);
    return -1;
}
