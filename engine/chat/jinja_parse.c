/* jinja_parse.c — tokens -> syntax tree, with jinja2's statement set for
 * chat templates and its expression precedence (lowest first): conditional
 * "x if c else y", or, and, not, comparisons (== != < > <= >= in, not in),
 * + -, ~, * / // %, **, unary - +, then primaries with . [] () and the
 * |filter and "is test" suffixes. Unknown filters and tests fail here, at
 * load, like jinja2's compile does. */
#include "engine/chat/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    jinja_template *t;
    const jtok *tk;
    int n, i;
    char *err;
    size_t errlen;
    jmp_buf jmp;
} parser;

static _Noreturn void perr(parser *p, int line, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d: %s", line, msg);
    longjmp(p->jmp, 1);
}

static const jtok *cur(parser *p) { return &p->tk[p->i]; }
static bool is_op(parser *p, const char *op) {
    const jtok *x = cur(p);
    return x->kind == JT_OP && x->n == strlen(op) && !memcmp(x->s, op, x->n);
}
static bool is_name(parser *p, const char *nm) {
    const jtok *x = cur(p);
    return x->kind == JT_NAME && !strcmp(x->s, nm);
}
static bool accept_op(parser *p, const char *op) {
    if (!is_op(p, op)) return false;
    p->i++;
    return true;
}
static bool accept_name(parser *p, const char *nm) {
    if (!is_name(p, nm)) return false;
    p->i++;
    return true;
}
static const char *tokdesc(const jtok *x) {
    switch (x->kind) {
    case JT_EOF: return "end of template";
    case JT_BLOCK_END: return "end of statement block";
    case JT_VAR_END: return "end of print statement";
    case JT_NAME: return x->s;
    case JT_OP: return x->s;
    case JT_STRING: return "string";
    default: return "token";
    }
}
static void expect_op(parser *p, const char *op) {
    if (!accept_op(p, op)) perr(p, cur(p)->line, "expected '%s', got '%s'", op, tokdesc(cur(p)));
}
static const char *expect_name(parser *p) {
    if (cur(p)->kind != JT_NAME) perr(p, cur(p)->line, "expected a name, got '%s'", tokdesc(cur(p)));
    return p->tk[p->i++].s;
}
static void expect_kind(parser *p, jtok_kind k) {
    if (cur(p)->kind != k) perr(p, cur(p)->line, "unexpected '%s'", tokdesc(cur(p)));
    p->i++;
}

static jnode *node(parser *p, jnode_kind k, int line) {
    jnode *x = ja_alloc(&p->t->arena, sizeof(jnode));
    x->kind = (uint8_t)k;
    x->line = line;
    return x;
}

/* growable node/name arrays in the template's arena */
typedef struct { jnode **v; const char **nm; int n, cap; } nvec;
static void nv_push(parser *p, nvec *v, jnode *x, const char *nm) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        jnode **nn = ja_alloc(&p->t->arena, sizeof(jnode *) * (size_t)cap);
        const char **nmm = ja_alloc(&p->t->arena, sizeof(char *) * (size_t)cap);
        if (v->n) {
            memcpy(nn, v->v, sizeof(jnode *) * (size_t)v->n);
            memcpy(nmm, v->nm, sizeof(char *) * (size_t)v->n);
        }
        v->v = nn;
        v->nm = nmm;
        v->cap = cap;
    }
    v->v[v->n] = x;
    v->nm[v->n++] = nm;
}

static jv *const_val(parser *p, jv_kind k) {
    jv *v = ja_alloc(&p->t->arena, sizeof(jv));
    v->kind = (uint8_t)k;
    return v;
}

/* ---- expressions ---- */
static jnode *parse_expr(parser *p);
static jnode *parse_or(parser *p);
static jnode *parse_unary(parser *p, bool with_filter);

static void parse_args(parser *p, jnode *call) {
    /* after '(' */
    nvec v = {0};
    bool any_kw = false;
    while (!is_op(p, ")")) {
        if (v.n) expect_op(p, ",");
        if (is_op(p, ")")) break;
        const char *kw = NULL;
        if (cur(p)->kind == JT_NAME && p->tk[p->i + 1].kind == JT_OP && p->tk[p->i + 1].n == 1 && p->tk[p->i + 1].s[0] == '=') {
            kw = cur(p)->s;
            p->i += 2;
            any_kw = true;
        } else if (any_kw) perr(p, cur(p)->line, "positional argument after keyword argument");
        nv_push(p, &v, parse_expr(p), kw);
    }
    expect_op(p, ")");
    call->kids = v.v;
    call->names = v.nm;
    call->nkids = v.n;
}

static jnode *parse_primary(parser *p) {
    const jtok *x = cur(p);
    int line = x->line;
    jnode *n;
    if (x->kind == JT_NAME) {
        p->i++;
        n = node(p, E_CONST, line);
        if (!strcmp(x->s, "true") || !strcmp(x->s, "True") || !strcmp(x->s, "false") || !strcmp(x->s, "False")) {
            n->cval = const_val(p, JV_BOOL);
            n->cval->u.b = x->s[0] == 't' || x->s[0] == 'T';
        } else if (!strcmp(x->s, "none") || !strcmp(x->s, "None")) {
            n->cval = const_val(p, JV_NONE);
        } else {
            n->kind = E_NAME;
            n->name = x->s;
        }
        return n;
    }
    if (x->kind == JT_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0;
        int k = p->i;
        while (p->tk[k].kind == JT_STRING) total += p->tk[k++].n;
        char *s = ja_alloc(&p->t->arena, total + 1);
        size_t w = 0;
        while (cur(p)->kind == JT_STRING) {
            memcpy(s + w, cur(p)->s, cur(p)->n);
            w += cur(p)->n;
            p->i++;
        }
        n = node(p, E_CONST, line);
        n->cval = const_val(p, JV_STR);
        n->cval->u.s.s = s;
        n->cval->u.s.n = w;
        return n;
    }
    if (x->kind == JT_INT || x->kind == JT_FLOAT) {
        p->i++;
        n = node(p, E_CONST, line);
        n->cval = const_val(p, x->kind == JT_INT ? JV_INT : JV_FLOAT);
        if (x->kind == JT_INT) n->cval->u.i = x->i;
        else n->cval->u.f = x->f;
        return n;
    }
    if (accept_op(p, "(")) {
        if (accept_op(p, ")")) {
            n = node(p, E_TUPLE, line);
            return n;
        }
        jnode *e = parse_expr(p);
        if (accept_op(p, ")")) return e;
        nvec v = {0};
        nv_push(p, &v, e, NULL);
        while (accept_op(p, ",")) {
            if (is_op(p, ")")) break;
            nv_push(p, &v, parse_expr(p), NULL);
        }
        expect_op(p, ")");
        n = node(p, E_TUPLE, line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    if (accept_op(p, "[")) {
        nvec v = {0};
        while (!is_op(p, "]")) {
            if (v.n) expect_op(p, ",");
            if (is_op(p, "]")) break;
            nv_push(p, &v, parse_expr(p), NULL);
        }
        expect_op(p, "]");
        n = node(p, E_LIST, line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    if (accept_op(p, "{")) {
        nvec v = {0};
        while (!is_op(p, "}")) {
            if (v.n) expect_op(p, ",");
            if (is_op(p, "}")) break;
            nv_push(p, &v, parse_expr(p), NULL);
            expect_op(p, ":");
            nv_push(p, &v, parse_expr(p), NULL);
        }
        expect_op(p, "}");
        n = node(p, E_DICT, line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    perr(p, line, "unexpected '%s'", tokdesc(x));
}

static jnode *parse_postfix(parser *p, jnode *n) {
    for (;;) {
        int line = cur(p)->line;
        if (accept_op(p, ".")) {
            jnode *a = node(p, E_ATTR, line);
            a->a = n;
            if (cur(p)->kind == JT_INT) {
                a->kind = E_ITEM;
                a->b = node(p, E_CONST, line);
                a->b->cval = const_val(p, JV_INT);
                a->b->cval->u.i = cur(p)->i;
                p->i++;
            } else a->name = expect_name(p);
            n = a;
        } else if (accept_op(p, "[")) {
            jnode *parts[3] = {NULL, NULL, NULL};
            bool slice = false;
            int k = 0;
            for (;;) {
                if (is_op(p, ":")) {
                    p->i++;
                    slice = true;
                    if (++k > 2) perr(p, line, "bad slice");
                    continue;
                }
                if (is_op(p, "]")) break;
                if (parts[k]) perr(p, cur(p)->line, "expected ']'");
                parts[k] = parse_expr(p);
            }
            expect_op(p, "]");
            jnode *a = node(p, slice ? E_SLICE : E_ITEM, line);
            a->a = n;
            if (slice) {
                a->kids = ja_alloc(&p->t->arena, sizeof(jnode *) * 3);
                memcpy(a->kids, parts, sizeof parts);
                a->nkids = 3;
            } else {
                if (!parts[0]) perr(p, line, "expected a subscript");
                a->b = parts[0];
            }
            n = a;
        } else if (accept_op(p, "(")) {
            jnode *c = node(p, E_CALL, line);
            c->a = n;
            parse_args(p, c);
            n = c;
        } else return n;
    }
}

static jnode *parse_filters(parser *p, jnode *n) {
    for (;;) {
        int line = cur(p)->line;
        if (accept_op(p, "|")) {
            const char *nm = expect_name(p);
            while (accept_op(p, ".")) nm = expect_name(p); /* dotted names: last part */
            jnode *f = node(p, E_FILTER, line);
            f->a = n;
            f->name = nm;
            f->filter_id = jinja_filter_id(nm);
            if (f->filter_id < 0) perr(p, line, "No filter named '%s'.", nm);
            if (accept_op(p, "(")) parse_args(p, f);
            n = f;
        } else if (is_name(p, "is")) {
            p->i++;
            bool neg = accept_name(p, "not");
            const char *nm;
            if (cur(p)->kind == JT_NAME) nm = expect_name(p);
            else if (is_op(p, "==") || is_op(p, "!=") || is_op(p, "<") || is_op(p, ">") || is_op(p, "<=") || is_op(p, ">=")) nm = p->tk[p->i++].s;
            else perr(p, line, "expected a test name");
            jnode *t = node(p, E_TEST, line);
            t->a = n;
            t->name = nm;
            t->op = neg;
            t->test_id = jinja_test_id(nm);
            if (t->test_id < 0) perr(p, line, "No test named '%s'.", nm);
            if (accept_op(p, "(")) parse_args(p, t);
            else {
                const jtok *x = cur(p);
                bool arg = x->kind == JT_STRING || x->kind == JT_INT || x->kind == JT_FLOAT ||
                           (x->kind == JT_NAME && strcmp(x->s, "else") && strcmp(x->s, "or") && strcmp(x->s, "and") &&
                            strcmp(x->s, "if") && strcmp(x->s, "is") && strcmp(x->s, "in") && strcmp(x->s, "not")) ||
                           (x->kind == JT_OP && (is_op(p, "[") || is_op(p, "{") || is_op(p, "-")));
                if (arg) {
                    jnode *a = parse_postfix(p, parse_primary(p));
                    t->kids = ja_alloc(&p->t->arena, sizeof(jnode *));
                    t->names = ja_alloc(&p->t->arena, sizeof(char *));
                    t->kids[0] = a;
                    t->nkids = 1;
                }
            }
            n = t;
        } else return n;
    }
}

static jnode *parse_unary(parser *p, bool with_filter) {
    int line = cur(p)->line;
    jnode *n;
    if (accept_op(p, "-")) {
        n = node(p, E_NEG, line);
        n->a = parse_unary(p, false);
    } else if (accept_op(p, "+")) {
        n = node(p, E_POS, line);
        n->a = parse_unary(p, false);
    } else n = parse_postfix(p, parse_primary(p));
    if (with_filter) n = parse_filters(p, n);
    return n;
}

static jnode *bin(parser *p, int op, jnode *a, jnode *b, int line) {
    jnode *n = node(p, E_BIN, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *p) {
    jnode *n = parse_unary(p, true);
    while (is_op(p, "**")) {
        int line = cur(p)->line;
        p->i++;
        n = bin(p, OP_POW, n, parse_unary(p, true), line);
    }
    return n;
}
static jnode *parse_math2(parser *p) {
    jnode *n = parse_pow(p);
    for (;;) {
        int line = cur(p)->line, op = 0;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else return n;
        p->i++;
        n = bin(p, op, n, parse_pow(p), line);
    }
}
static jnode *parse_concat(parser *p) {
    jnode *n = parse_math2(p);
    while (is_op(p, "~")) {
        int line = cur(p)->line;
        p->i++;
        n = bin(p, OP_CONCAT, n, parse_math2(p), line);
    }
    return n;
}
static jnode *parse_math1(parser *p) {
    jnode *n = parse_concat(p);
    for (;;) {
        int line = cur(p)->line, op = 0;
        if (is_op(p, "+")) op = OP_ADD;
        else if (is_op(p, "-")) op = OP_SUB;
        else return n;
        p->i++;
        n = bin(p, op, n, parse_concat(p), line);
    }
}
static jnode *parse_compare(parser *p) {
    jnode *n = parse_math1(p);
    for (;;) {
        int line = cur(p)->line, op = 0;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_name(p, "in")) op = OP_IN;
        else if (is_name(p, "not") && p->tk[p->i + 1].kind == JT_NAME && !strcmp(p->tk[p->i + 1].s, "in")) {
            op = OP_NOTIN;
            p->i++;
        } else return n;
        p->i++;
        jnode *c = node(p, E_CMP, line);
        c->op = (uint8_t)op;
        c->a = n;
        c->b = parse_math1(p);
        n = c;
    }
}
static jnode *parse_not(parser *p) {
    int line = cur(p)->line;
    if (accept_name(p, "not")) {
        jnode *n = node(p, E_NOT, line);
        n->a = parse_not(p);
        return n;
    }
    return parse_compare(p);
}
static jnode *parse_and(parser *p) {
    jnode *n = parse_not(p);
    while (is_name(p, "and")) {
        jnode *a = node(p, E_AND, cur(p)->line);
        p->i++;
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}
static jnode *parse_or(parser *p) {
    jnode *n = parse_and(p);
    while (is_name(p, "or")) {
        jnode *a = node(p, E_OR, cur(p)->line);
        p->i++;
        a->a = n;
        a->b = parse_and(p);
        n = a;
    }
    return n;
}
static jnode *parse_expr(parser *p) {
    jnode *n = parse_or(p);
    while (is_name(p, "if")) {
        jnode *c = node(p, E_COND, cur(p)->line);
        p->i++;
        c->b = n;
        c->a = parse_or(p);
        if (accept_name(p, "else")) c->c = parse_expr(p);
        n = c;
    }
    return n;
}
/* a, b = ... / for a, b in ...: a tuple without parentheses */
static jnode *parse_tuple_expr(parser *p) {
    int line = cur(p)->line;
    jnode *e = parse_expr(p);
    if (!is_op(p, ",")) return e;
    nvec v = {0};
    nv_push(p, &v, e, NULL);
    while (accept_op(p, ",")) {
        if (cur(p)->kind == JT_BLOCK_END || cur(p)->kind == JT_VAR_END) break;
        nv_push(p, &v, parse_expr(p), NULL);
    }
    jnode *t = node(p, E_TUPLE, line);
    t->kids = v.v;
    t->nkids = v.n;
    return t;
}

/* ---- statements ---- */
static void parse_body(parser *p, nvec *out, const char *const *ends, int nends);

static int targets(parser *p, const char ***names) {
    nvec v = {0};
    bool paren = accept_op(p, "(");
    do {
        if (paren && is_op(p, ")")) break;
        nv_push(p, &v, NULL, expect_name(p));
    } while (accept_op(p, ","));
    if (paren) expect_op(p, ")");
    *names = v.nm;
    return v.n;
}

static void end_block(parser *p) { expect_kind(p, JT_BLOCK_END); }

static const char *end_tag(parser *p) {
    /* at the name after {% that ended a body */
    return cur(p)->s;
}

static jnode *parse_stmt(parser *p) {
    int line = cur(p)->line;
    const char *kw = expect_name(p);
    jnode *n;
    if (!strcmp(kw, "if")) {
        n = node(p, N_IF, line);
        n->a = parse_expr(p);
        end_block(p);
        static const char *const ends[] = {"elif", "else", "endif"};
        nvec body = {0};
        parse_body(p, &body, ends, 3);
        n->body = body.v;
        n->nbody = body.n;
        jnode *tail = n;
        for (;;) {
            const char *e = end_tag(p);
            int l2 = cur(p)->line;
            p->i++;
            if (!strcmp(e, "elif")) {
                jnode *m = node(p, N_IF, l2);
                m->a = parse_expr(p);
                end_block(p);
                nvec b2 = {0};
                parse_body(p, &b2, ends, 3);
                m->body = b2.v;
                m->nbody = b2.n;
                tail->ebody = ja_alloc(&p->t->arena, sizeof(jnode *));
                tail->ebody[0] = m;
                tail->nebody = 1;
                tail = m;
            } else if (!strcmp(e, "else")) {
                end_block(p);
                static const char *const e2[] = {"endif"};
                nvec b2 = {0};
                parse_body(p, &b2, e2, 1);
                tail->ebody = b2.v;
                tail->nebody = b2.n;
                p->i++;
                end_block(p);
                break;
            } else {
                end_block(p);
                break;
            }
        }
        return n;
    }
    if (!strcmp(kw, "for")) {
        n = node(p, N_FOR, line);
        n->nnames = targets(p, &n->names);
        if (!accept_name(p, "in")) perr(p, cur(p)->line, "expected 'in'");
        n->a = parse_or(p); /* no conditional expression: "if" filters the loop */
        if (accept_name(p, "if")) n->b = parse_expr(p);
        accept_name(p, "recursive");
        end_block(p);
        static const char *const ends[] = {"else", "endfor"};
        nvec body = {0};
        parse_body(p, &body, ends, 2);
        n->body = body.v;
        n->nbody = body.n;
        if (!strcmp(end_tag(p), "else")) {
            p->i++;
            end_block(p);
            static const char *const e2[] = {"endfor"};
            nvec b2 = {0};
            parse_body(p, &b2, e2, 1);
            n->ebody = b2.v;
            n->nebody = b2.n;
        }
        p->i++;
        end_block(p);
        return n;
    }
    if (!strcmp(kw, "set")) {
        const char *name = expect_name(p);
        if (accept_op(p, ".")) {
            n = node(p, N_SETATTR, line);
            n->nnames = 1;
            n->names = ja_alloc(&p->t->arena, sizeof(char *));
            n->names[0] = name;
            n->name = expect_name(p);
            expect_op(p, "=");
            n->a = parse_tuple_expr(p);
            end_block(p);
            return n;
        }
        if (cur(p)->kind == JT_BLOCK_END || is_op(p, "|")) {
            n = node(p, N_SETBLOCK, line);
            n->name = name;
            if (is_op(p, "|")) {
                jnode *hole = node(p, E_HOLE, line);
                n->a = parse_filters(p, hole);
            }
            end_block(p);
            static const char *const ends[] = {"endset"};
            nvec body = {0};
            parse_body(p, &body, ends, 1);
            n->body = body.v;
            n->nbody = body.n;
            p->i++;
            end_block(p);
            return n;
        }
        n = node(p, N_SET, line);
        nvec v = {0};
        nv_push(p, &v, NULL, name);
        while (accept_op(p, ",")) nv_push(p, &v, NULL, expect_name(p));
        n->names = v.nm;
        n->nnames = v.n;
        expect_op(p, "=");
        n->a = parse_tuple_expr(p);
        end_block(p);
        return n;
    }
    if (!strcmp(kw, "macro")) {
        n = node(p, N_MACRO, line);
        n->name = expect_name(p);
        expect_op(p, "(");
        nvec v = {0};
        while (!is_op(p, ")")) {
            if (v.n) expect_op(p, ",");
            const char *pn = expect_name(p);
            jnode *def = NULL;
            if (accept_op(p, "=")) def = parse_expr(p);
            nv_push(p, &v, def, pn);
        }
        expect_op(p, ")");
        n->kids = v.v;
        n->names = v.nm;
        n->nkids = n->nnames = v.n;
        end_block(p);
        static const char *const ends[] = {"endmacro"};
        nvec body = {0};
        parse_body(p, &body, ends, 1);
        n->body = body.v;
        n->nbody = body.n;
        p->i++;
        if (cur(p)->kind == JT_NAME) p->i++; /* {% endmacro name %} */
        end_block(p);
        return n;
    }
    if (!strcmp(kw, "filter")) {
        n = node(p, N_FILTERBLOCK, line);
        jnode *hole = node(p, E_HOLE, line);
        /* {% filter name(args) | other %}: same as hole|name(args)|other */
        const char *nm = expect_name(p);
        jnode *f = node(p, E_FILTER, line);
        f->a = hole;
        f->name = nm;
        f->filter_id = jinja_filter_id(nm);
        if (f->filter_id < 0) perr(p, line, "No filter named '%s'.", nm);
        if (accept_op(p, "(")) parse_args(p, f);
        n->a = parse_filters(p, f);
        end_block(p);
        static const char *const ends[] = {"endfilter"};
        nvec body = {0};
        parse_body(p, &body, ends, 1);
        n->body = body.v;
        n->nbody = body.n;
        p->i++;
        end_block(p);
        return n;
    }
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        n = node(p, kw[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        end_block(p);
        return n;
    }
    if (!strcmp(kw, "generation")) { /* HF's assistant-mask marker: renders its body */
        end_block(p);
        static const char *const ends[] = {"endgeneration"};
        nvec body = {0};
        parse_body(p, &body, ends, 1);
        p->i++;
        end_block(p);
        n = node(p, N_IF, line);
        n->a = node(p, E_CONST, line);
        n->a->cval = const_val(p, JV_BOOL);
        n->a->cval->u.b = true;
        n->body = body.v;
        n->nbody = body.n;
        return n;
    }
    perr(p, line, "Encountered unknown tag '%s'.", kw);
}

/* Statements until a block tag named in ends (left at that name), or EOF
 * when nends is 0. */
static void parse_body(parser *p, nvec *out, const char *const *ends, int nends) {
    for (;;) {
        const jtok *x = cur(p);
        if (x->kind == JT_EOF) {
            if (nends) perr(p, x->line, "Unexpected end of template. Jinja was looking for '%s'.", ends[nends - 1]);
            return;
        }
        if (x->kind == JT_TEXT) {
            jnode *n = node(p, N_TEXT, x->line);
            n->cval = const_val(p, JV_STR);
            n->cval->u.s.s = (char *)x->s;
            n->cval->u.s.n = x->n;
            nv_push(p, out, n, NULL);
            p->i++;
        } else if (x->kind == JT_VAR_BEGIN) {
            p->i++;
            jnode *n = node(p, N_OUT, x->line);
            n->a = parse_tuple_expr(p);
            expect_kind(p, JT_VAR_END);
            nv_push(p, out, n, NULL);
        } else if (x->kind == JT_BLOCK_BEGIN) {
            p->i++;
            const jtok *nm = cur(p);
            if (nm->kind == JT_NAME)
                for (int k = 0; k < nends; k++)
                    if (!strcmp(nm->s, ends[k])) return;
            if (nm->kind == JT_NAME && (!strncmp(nm->s, "end", 3) || !strcmp(nm->s, "elif") || !strcmp(nm->s, "else")))
                perr(p, nm->line, "Encountered unknown tag '%s'.", nm->s);
            nv_push(p, out, parse_stmt(p), NULL);
        } else perr(p, x->line, "unexpected '%s'", tokdesc(x));
    }
}

int jinja_parse(jinja_template *t, const jtok *toks, int ntoks, char *err, size_t errlen) {
    parser p = {.t = t, .tk = toks, .n = ntoks, .err = err, .errlen = errlen};
    if (setjmp(p.jmp)) return -1;
    nvec body = {0};
    parse_body(&p, &body, NULL, 0);
    t->body = body.v;
    t->nbody = body.n;
    return 0;
}

jinja_template *jinja_compile(const char *src, size_t len, char *err, size_t errlen) {
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->arena.cap = 256u << 20;
    jtok *toks;
    int n = jinja_lex(&t->arena, src, len, &toks, err, errlen);
    if (n < 0 || jinja_parse(t, toks, n, err, errlen) < 0) {
        jinja_destroy(t);
        return NULL;
    }
    return t;
}

void jinja_destroy(jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
