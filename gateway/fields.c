/* fields.c — the shared request-field table (see fields.h). One row per
 * field: its path, its kind, its range (fixed, or from gw_limits), how the
 * message words the range, and where the value goes. */
#include "gateway/fields.h"


#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_INT, F_NUM, F_BOOL, F_NAME } field_kind;

typedef struct {
    long long i; /* F_INT; F_NAME: the parsed name's value */
    double x;    /* F_NUM */
    bool b;      /* F_BOOL */
} field_value;

typedef struct field_row {
    gw_fields_group group;
    const char *key;  /* key inside the group's object */
    const char *path; /* as named in messages and err->param */
    field_kind kind;
    /* F_INT: [lo, hi], or bounds() when set (note: words why, e.g. " (the policy bounds)") */
    long long lo, hi;
    const char *note;
    void (*bounds)(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n);
    /* F_NUM: lo/hi (open when lo_open/hi_open), checked on the value and on it as a float */
    double xlo, xhi;
    bool lo_open, hi_open;
    const char *range; /* F_NUM and F_NAME: the allowed values in words */
    int (*name)(const char *s); /* F_NAME: value, or -1 */
    /* Stores v; may refuse it (no_draft): returns 0 or -1 with err filled. */
    int (*set)(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err);
} field_row;

static int fail(gw_field_error *err, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- bounds from the limits ------------------------------------------------------ */

/* max_tokens in [1, max_tokens_limit], and below the context when it is known. */
static void max_tokens_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    *lo = 1;
    *hi = lim->max_tokens_limit;
    if (lim->max_ctx > 0 && (long long)lim->max_ctx - 1 < *hi) {
        *hi = (long long)lim->max_ctx - 1;
        snprintf(note, n, " (the context holds %d tokens)", lim->max_ctx);
    }
    if (*hi < 1) *hi = 1;
}

/* tree bounds: [1, the server's] (16 when unknown) */
static void tree_bounds(long long top, long long *lo, long long *hi, char *note, size_t n) {
    *lo = 1;
    *hi = top > 0 ? top : 16;
    snprintf(note, n, " (the server's tree bounds)");
}
static void tree_budget_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    tree_bounds(lim->tree_budget, lo, hi, note, n);
}
static void tree_depth_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    tree_bounds(lim->tree_depth, lo, hi, note, n);
}
static void tree_topk_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    tree_bounds(lim->tree_topk, lo, hi, note, n);
}

/* n: [1, server.max_choices] */
static void choices_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    *lo = 1;
    *hi = lim->max_choices > 1 ? lim->max_choices : 1;
    snprintf(note, n, " (server.max_choices)");
}

static void gamma_bounds(const gw_limits *lim, long long *lo, long long *hi, char *note, size_t n) {
    *lo = lim->gamma_min;
    *hi = lim->gamma_max;
    snprintf(note, n, " (the policy bounds)");
}

/* ---- names ----------------------------------------------------------------------- */

static int mode_parse(const char *s) {
    if (!strcmp(s, "auto")) return SPEC_MODE_AUTO;
    if (!strcmp(s, "draft")) return SPEC_MODE_DRAFT;
    if (!strcmp(s, "off")) return SPEC_MODE_OFF;
    return -1;
}

/* ---- setters --------------------------------------------------------------------- */

static int set_max_tokens(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->max_tokens = (int)v->i;
    return 0;
}
static int set_temperature(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->sc.temperature = (float)v->x;
    return 0;
}
static int set_top_p(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->sc.top_p = (float)v->x;
    return 0;
}
static int set_min_p(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->sc.min_p = (float)v->x;
    return 0;
}
static int set_top_k(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->sc.top_k = (int)v->i;
    return 0;
}
static int set_seed(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->seed = (uint64_t)v->i; /* a negative seed wraps (two's complement), as OpenAI clients expect */
    t->seed_set = true;
    return 0;
}
static int set_choices(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->n = (int)v->i;
    return 0;
}
static int set_prefix_cache(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->no_prefix_cache = !v->b; /* false: neither reuse cached blocks nor leave this prompt's */
    return 0;
}
static int set_learn(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->no_learn = !v->b; /* false: its tokens and features never enter the learning ring */
    return 0;
}
static int set_mode(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    if (v->i == SPEC_MODE_DRAFT && !lim->has_draft)
        return fail(err, GW_ERR_NO_DRAFT, "speculation.mode",
                    "speculation mode 'draft' needs a draft model, and none is loaded");
    t->req->mode = (spec_mode)v->i;
    return 0;
}
static int set_method(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    if (v->i == SPEC_METHOD_DRAFT && !lim->has_draft)
        return fail(err, GW_ERR_NO_DRAFT, "speculation.method",
                    "speculation method 'draft' needs a draft model, and none is loaded");
    t->req->method = (spec_method)v->i;
    t->req->method_set = true;
    return 0;
}
static int set_verify(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->verify = (engine_verify)(v->i + 1);
    return 0;
}
static int set_gamma(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->gamma = (int)v->i;
    return 0;
}
static int set_tree(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    if (v->i != ENGINE_TREE_OFF && lim->tree != ENGINE_TREE_AUTO && lim->tree != ENGINE_TREE_FIXED)
        return fail(err, GW_ERR_OUT_OF_RANGE, "speculation.tree",
                    "field 'speculation.tree': tree speculation is off on this server (speculation.tree)");
    t->req->tree = (engine_tree)v->i;
    return 0;
}
static int set_tree_budget(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->tree_budget = (int)v->i;
    return 0;
}
static int set_tree_depth(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->tree_depth = (int)v->i;
    return 0;
}
static int set_tree_topk(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->tree_topk = (int)v->i;
    return 0;
}

static int set_adaptive(const field_value *v, const gw_limits *lim, gw_field_target *t, gw_field_error *err) {
    (void)lim, (void)err;
    t->req->adaptive = v->b;
    t->req->adaptive_set = true;
    return 0;
}

gw_limits gw_limits_default(void) {
    return (gw_limits){.max_message_bytes = 1 << 20, .max_tokens_limit = 4096, .default_max_tokens = 256,
                       .gamma_min = 2, .gamma_max = 8, .max_ctx = 0, .has_draft = false, .max_choices = 4};
}

/* ---- the table ------------------------------------------------------------------- */

#define TOP GW_FIELDS_TOP
#define SPEC GW_FIELDS_SPECULATION
#define OPENAI GW_FIELDS_OPENAI
static const field_row rows[] = {
    {.group = TOP, .key = "max_tokens", .path = "max_tokens", .kind = F_INT, .bounds = max_tokens_bounds,
     .set = set_max_tokens},
    {.group = TOP, .key = "temperature", .path = "temperature", .kind = F_NUM, .xlo = 0, .xhi = 2,
     .range = "a number in [0, 2] (0 = greedy)", .set = set_temperature},
    {.group = TOP, .key = "top_p", .path = "top_p", .kind = F_NUM, .xlo = 0, .xhi = 1, .lo_open = true,
     .range = "a number in (0, 1] (1 = off)", .set = set_top_p},
    {.group = TOP, .key = "min_p", .path = "min_p", .kind = F_NUM, .xlo = 0, .xhi = 1, .hi_open = true,
     .range = "a number in [0, 1) (0 = off)", .set = set_min_p},
    {.group = TOP, .key = "top_k", .path = "top_k", .kind = F_INT, .lo = 0, .hi = INT_MAX, .note = " (0 = off)",
     .set = set_top_k},
    {.group = TOP, .key = "seed", .path = "seed", .kind = F_INT, .lo = LLONG_MIN, .hi = LLONG_MAX, .note = "",
     .set = set_seed},
    {.group = TOP, .key = "prefix_cache", .path = "prefix_cache", .kind = F_BOOL, .set = set_prefix_cache},
    {.group = TOP, .key = "learn", .path = "learn", .kind = F_BOOL, .set = set_learn},
    {.group = OPENAI, .key = "n", .path = "n", .kind = F_INT, .bounds = choices_bounds, .set = set_choices},
    {.group = SPEC, .key = "mode", .path = "speculation.mode", .kind = F_NAME, .name = mode_parse,
     .range = "one of auto, draft, off", .set = set_mode},
    {.group = SPEC, .key = "method", .path = "speculation.method", .kind = F_NAME, .name = spec_method_parse,
     .range = "one of auto, draft, ngram, off, medusa", .set = set_method},
    {.group = SPEC, .key = "verify", .path = "speculation.verify", .kind = F_NAME, .name = spec_verify_parse,
     .range = "one of rejection, coupled", .set = set_verify},
    {.group = SPEC, .key = "gamma", .path = "speculation.gamma", .kind = F_INT, .bounds = gamma_bounds,
     .set = set_gamma},
    {.group = SPEC, .key = "adaptive", .path = "speculation.adaptive", .kind = F_BOOL, .set = set_adaptive},
    {.group = SPEC, .key = "tree", .path = "speculation.tree", .kind = F_NAME, .name = engine_tree_parse,
     .range = "one of off, auto, fixed", .set = set_tree},
    {.group = SPEC, .key = "tree_budget", .path = "speculation.tree_budget", .kind = F_INT,
     .bounds = tree_budget_bounds, .set = set_tree_budget},
    {.group = SPEC, .key = "tree_depth", .path = "speculation.tree_depth", .kind = F_INT, .bounds = tree_depth_bounds,
     .set = set_tree_depth},
    {.group = SPEC, .key = "tree_topk", .path = "speculation.tree_topk", .kind = F_INT, .bounds = tree_topk_bounds,
     .set = set_tree_topk},
};
#undef TOP
#undef SPEC
#undef OPENAI
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

/* ---- reading one value ----------------------------------------------------------- */

/* The shortest %g form that reads back as x. */
static void fmt_double(char *b, size_t n, double x) {
    for (int p = 1; p <= 17; p++) {
        snprintf(b, n, "%.*g", p, x);
        if (strtod(b, NULL) == x) return;
    }
}

const char *gw_json_describe(const json_t *v, char *b, size_t n) {
    switch (json_typeof(v)) {
    case JSON_INTEGER: snprintf(b, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: fmt_double(b, n, json_real_value(v)); break;
    case JSON_TRUE: snprintf(b, n, "true"); break;
    case JSON_FALSE: snprintf(b, n, "false"); break;
    case JSON_NULL: snprintf(b, n, "null"); break;
    case JSON_STRING: {
        size_t len = json_string_length(v);
        if (len <= 24) snprintf(b, n, "\"%s\"", json_string_value(v));
        else snprintf(b, n, "a string of %zu bytes", len);
        break;
    }
    case JSON_ARRAY: snprintf(b, n, "an array"); break;
    case JSON_OBJECT: snprintf(b, n, "an object"); break;
    }
    return b;
}

/* An integer: a JSON integer, or a real with an integral value in range. */
static bool as_int(const json_t *v, long long *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (isfinite(x) && x == floor(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0) {
            *out = (long long)x;
            return true;
        }
    }
    return false;
}

static int parse_row(const field_row *f, const char *shown, json_t *v, const gw_limits *lim, gw_field_target *t,
                     gw_field_error *err) {
    char d[48];
    field_value fv = {0};
    switch (f->kind) {
    case F_INT: {
        long long lo = f->lo, hi = f->hi;
        char note[64] = "";
        if (f->bounds) f->bounds(lim, &lo, &hi, note, sizeof note);
        else snprintf(note, sizeof note, "%s", f->note ? f->note : "");
        if (!as_int(v, &fv.i))
            return fail(err, GW_ERR_WRONG_TYPE, shown, "field '%s' must be an integer, got %s", shown,
                        gw_json_describe(v, d, sizeof d));
        if (fv.i < lo || fv.i > hi)
            return fail(err, GW_ERR_OUT_OF_RANGE, shown, "field '%s' must be an integer in [%lld, %lld]%s, got %s",
                        shown, lo, hi, note, gw_json_describe(v, d, sizeof d));
        break;
    }
    case F_NUM: {
        if (!json_is_number(v))
            return fail(err, GW_ERR_WRONG_TYPE, shown, "field '%s' must be a number, got %s", shown,
                        gw_json_describe(v, d, sizeof d));
        double x = json_number_value(v), xf = (double)(float)x; /* the engine keeps a float: check both */
        bool ok = isfinite(x) && (f->lo_open ? x > f->xlo && xf > f->xlo : x >= f->xlo && xf >= f->xlo) &&
                  (f->hi_open ? x < f->xhi && xf < f->xhi : x <= f->xhi && xf <= f->xhi);
        if (!ok)
            return fail(err, GW_ERR_OUT_OF_RANGE, shown, "field '%s' must be %s, got %s", shown, f->range,
                        gw_json_describe(v, d, sizeof d));
        fv.x = x;
        break;
    }
    case F_BOOL:
        if (!json_is_boolean(v))
            return fail(err, GW_ERR_WRONG_TYPE, shown, "field '%s' must be true or false, got %s", shown,
                        gw_json_describe(v, d, sizeof d));
        fv.b = json_is_true(v);
        break;
    case F_NAME: {
        if (!json_is_string(v))
            return fail(err, GW_ERR_WRONG_TYPE, shown, "field '%s' must be a string, got %s", shown,
                        gw_json_describe(v, d, sizeof d));
        int k = f->name(json_string_value(v));
        if (k < 0)
            return fail(err, GW_ERR_OUT_OF_RANGE, shown, "field '%s' must be %s, got %s", shown, f->range,
                        gw_json_describe(v, d, sizeof d));
        fv.i = k;
        break;
    }
    }
    return f->set(&fv, lim, t, err);
}

/* ---- API ------------------------------------------------------------------------- */

int gw_fields_parse(json_t *obj, gw_fields_group group, const gw_limits *lim, gw_field_target *t,
                    gw_field_error *err) {
    memset(err, 0, sizeof *err);
    if (group == GW_FIELDS_TOP) {
        long long lo, hi;
        char note[64];
        max_tokens_bounds(lim, &lo, &hi, note, sizeof note);
        /* absent: server.max_tokens_default, or (0) until the end of the context, at most the limit */
        long long def = lim->default_max_tokens > 0 ? lim->default_max_tokens : hi;
        t->req->max_tokens = (int)(def < hi ? def : hi);
        t->req->sc = sampler_config_default();
        t->req->mode = SPEC_MODE_AUTO;
    }
    if (group == GW_FIELDS_OPENAI) t->n = 1;
    for (int i = 0; i < NROWS; i++) {
        if (rows[i].group != group) continue;
        json_t *v = json_object_get(obj, rows[i].key);
        if (!v || json_is_null(v)) continue;
        if (parse_row(&rows[i], rows[i].path, v, lim, t, err)) return -1;
    }
    return 0;
}

int gw_field_parse_one(const char *path, const char *shown, json_t *v, const gw_limits *lim, gw_field_target *t,
                       gw_field_error *err) {
    memset(err, 0, sizeof *err);
    for (int i = 0; i < NROWS; i++)
        if (!strcmp(rows[i].path, path)) return v && !json_is_null(v) ? parse_row(&rows[i], shown, v, lim, t, err) : 0;
    return fail(err, GW_ERR_INTERNAL, path, "no request field '%s'", path);
}

static const char *const finish_names[GW_FINISH_COUNT] = {"length", "stop", "cancelled", "error"};

const char *gw_finish_name(engine_finish f) {
    return (unsigned)f < GW_FINISH_COUNT ? finish_names[f] : "error";
}

const char *const gw_by_method_field[GW_BY_METHOD_FIELDS] = {"verify_steps", "drafted", "accepted", "rejections",
                                                             "tokens"};

uint64_t gw_by_method_value(const spec_method_stats *b, int f) {
    switch (f) {
    case 0: return b->verify_steps;
    case 1: return b->drafted;
    case 2: return b->accepted;
    case 3: return b->rejections;
    default: return b->tokens;
    }
}

json_t *gw_by_method_json(const spec_stats *st) {
    json_t *bm = json_object();
    for (int m = 0; m < SPEC_PROPOSERS; m++) {
        json_t *x = json_object();
        for (int f = 0; f < GW_BY_METHOD_FIELDS; f++)
            json_object_set_new(x, gw_by_method_field[f], json_integer((json_int_t)gw_by_method_value(&st->by[m], f)));
        json_object_set_new(bm, spec_drafter_name(m), x);
    }
    return bm;
}
