/* jinja_internal.h — what the Jinja renderer's files share: the arena, the
 * value model (Python-like: undefined, None, bool, int, float, str with a
 * per-byte data mask, list/tuple, dict, namespace, macro, builtin), the token
 * stream and the syntax tree. Not a public header: include jinja.h. */
#ifndef SPECD_JINJA_INTERNAL_H
#define SPECD_JINJA_INTERNAL_H

#include "engine/chat/jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena: bump allocation in chunks, freed at once; a cap bounds it ---- */
typedef struct jarena_chunk jarena_chunk;
typedef struct {
    jarena_chunk *head;
    size_t used, cap;   /* bytes handed out so far; 0 cap = unbounded */
    jmp_buf *oom;       /* where to jump when cap is exceeded (NULL: abort) */
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed */
char *ja_strndup(jarena *a, const char *s, size_t n);
void ja_free(jarena *a);

/* ---- values ---- */
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO, JV_FUNC } jv_kind;
typedef struct jnode jnode;
typedef struct jinja_value jv;
struct jinja_value {
    uint8_t kind;
    bool tuple;           /* JV_LIST: a tuple (repr with parentheses) */
    bool gen;             /* JV_LIST: a generator (map/select/reject results): no len, no index, no JSON, always true */
    bool safe;            /* JV_STR: markupsafe.Markup (|safe, |escape): '+' with a plain str escapes the other side */
    union {
        bool b;
        int64_t i;
        double f;
        struct { char *s; size_t n; uint8_t *data; } s; /* data NULL: all markup */
        struct { jv **v; int n, cap; } l;
        struct { jv **k, **v; int n, cap; } d;             /* JV_DICT and JV_NS */
        struct { const jnode *node; void *scope; } m;         /* macro and the scope it was defined in */
        struct { int id; jv *self; } fn;                    /* builtin (self: bound object or NULL) */
    } u;
    const char *name;     /* JV_UNDEF: the missing name, for messages */
};

/* ---- strings being built ---- */
typedef struct {
    char *s;
    uint8_t *data;
    size_t n, cap;
    bool any_data;
} jsb;

typedef struct jinja_render jrender;
void jsb_put(jrender *r, jsb *b, const char *s, size_t n, const uint8_t *data, bool all_data);
void jsb_putc(jrender *r, jsb *b, char c, bool data);
jv *jsb_value(jrender *r, jsb *b);

/* constructors (in r's arena) */
jv *jv_new(jrender *r, jv_kind k);
jv *jv_undef(jrender *r, const char *name);
jv *jv_none(jrender *r);
jv *jv_boolv(jrender *r, bool b);
jv *jv_int(jrender *r, int64_t i);
jv *jv_float(jrender *r, double f);
jv *jv_str(jrender *r, const char *s, size_t n, const uint8_t *data, bool all_data);
jv *jv_cstr(jrender *r, const char *s); /* markup */
jv *jv_list(jrender *r, int cap);
void jv_list_push(jrender *r, jv *l, jv *v);
jv *jv_dict(jrender *r);
jv *jv_dict_getv(const jv *d, const jv *key);
jv *jv_dict_gets(const jv *d, const char *key);
void jv_dict_setv(jrender *r, jv *d, jv *key, jv *v);

bool jv_truthy(const jv *v);
bool jv_equal(const jv *a, const jv *b);
bool jv_is_data(const jv *v);          /* any data byte anywhere inside */
bool jv_str_eq(const jv *v, const char *s);
const char *jv_kind_name(const jv *v);
/* Python str(v) / repr(v) appended to b (strings keep their data mask; a
 * container's text is data when anything in it is). */
void jv_to_str(jrender *r, jsb *b, const jv *v);
void jv_repr(jrender *r, jsb *b, const jv *v);
jv *jv_stringify(jrender *r, const jv *v); /* str(v) as a value (v itself when a string) */
/* json.dumps(v, ensure_ascii=False, indent, separators default, sort_keys) */
void jv_to_json(jrender *r, jsb *b, const jv *v, int indent, bool sort_keys, int depth);
jv *jv_parse_json(jrender *r, const char *s, size_t n, bool data, char *err, size_t errlen);
/* UTF-8 code points in s[0..n) */
size_t ju_len(const char *s, size_t n);
size_t ju_offset(const char *s, size_t n, int64_t cp); /* byte offset of code point cp (clamped) */

/* ---- tokens ---- */
typedef enum {
    JT_EOF, JT_TEXT, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_VAR_BEGIN, JT_VAR_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP
} jtok_kind;
typedef struct {
    uint8_t kind;
    int line;
    const char *s; size_t n; /* text, name, string value (unescaped), op spelling */
    int64_t i;
    double f;
} jtok;
/* Splits src into tokens with trim_blocks/lstrip_blocks applied (comments
 * dropped). Returns the count, or -1 with "line N: reason" in err. Token
 * strings live in a. */
int jinja_lex(jarena *a, const char *src, size_t len, jtok **out, char *err, size_t errlen);

/* ---- syntax tree ---- */
typedef enum {
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETATTR, N_SETBLOCK, N_MACRO, N_FILTERBLOCK, N_BREAK, N_CONTINUE,
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS,
    E_BIN, E_NOT, E_AND, E_OR, E_CMP, E_COND, E_HOLE
} jnode_kind;
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };
struct jnode {
    uint8_t kind;
    uint8_t op;            /* E_BIN/E_CMP operator; E_TEST: 1 = negated */
    int line;
    const char *name;      /* E_NAME, E_ATTR attribute, E_FILTER/E_TEST name, N_SETATTR attribute, N_MACRO name, N_SETBLOCK target */
    jv *cval;              /* E_CONST, N_TEXT */
    jnode *a, *b, *c;      /* operands; N_FOR: a iterable, b filter condition */
    jnode **kids; int nkids;          /* args, list items, dict k/v pairs, slice parts (may be NULL) */
    const char **names; int nnames;   /* kwarg names parallel to kids (NULL = positional); N_FOR/N_SET targets; macro params */
    jnode **body; int nbody;
    jnode **ebody; int nebody;        /* else / elif chain */
    int filter_id, test_id;           /* resolved at parse time */
};

typedef struct { const char *name; int n_args_min; } jbuiltin_info;
int jinja_filter_id(const char *name); /* -1 when unknown */
int jinja_test_id(const char *name);

struct jinja_template {
    jarena arena;
    jnode **body; int nbody;
};
/* Parses tokens into t's tree. 0, or -1 with "line N: reason". */
int jinja_parse(jinja_template *t, const jtok *toks, int ntoks, char *err, size_t errlen);

/* ---- render state ---- */
typedef struct jscope {
    struct jscope *parent;
    const char **names;
    jv **vals;
    int n, cap;
} jscope;

struct jinja_render {
    const jinja_template *t;
    jinja_limits lim;
    jarena arena;
    jmp_buf jmp;
    char err[512];
    jscope *globals;
    jsb out;          /* the current output (a capture swaps it) */
    long steps;
    int depth;
    int line;         /* line of the node being evaluated */
    int loop_ctl;     /* 1 break, 2 continue */
    jv *hole;         /* a filter block's body */
    bool ran;
};

_Noreturn void jr_fail(jrender *r, const char *fmt, ...);
jv *jr_lookup(jrender *r, jscope *s, const char *name);
/* builtins (jinja_builtins.c) */
jv *jinja_apply_filter(jrender *r, int id, jv *v, jv **args, const char **kw, int nargs);
bool jinja_apply_test(jrender *r, int id, jv *v, jv **args, int nargs);
jv *jinja_getattr(jrender *r, jv *obj, const char *name);  /* obj.name (dict key, then method) */
jv *jinja_getitem(jrender *r, jv *obj, jv *key);           /* obj[key] */
jv *jinja_call_builtin(jrender *r, jv *fn, jv **args, const char **kw, int nargs);
jv *jinja_global(jrender *r, const char *name);            /* range, namespace, raise_exception, ... or NULL */
/* the items a for loop walks (list members, dict keys, characters; undefined: none) */
jv *jinja_iterable(jrender *r, jv *v);
/* markupsafe.escape(str(v)) */
jv *jinja_html_escape(jrender *r, jv *v);
/* evaluation (jinja_eval.c), used by builtins that call back (map with a filter) */
jv *jinja_call_value(jrender *r, jv *fn, jv **args, const char **kw, int nargs);

#endif
