/* config_load.c — config.yaml → validated immutable snapshot: YAML parsing
 * against the schema tables (config.c), range and consistency checks with
 * suggestions, environment overrides, file loading (see config.h). */
#include "policy/config_internal.h"
#include "policy/suggest.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

/* ---- helpers ---------------------------------------------------------------- */

typedef struct {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
} ctx;

/* Errors are one line: control bytes that a quoted value brought in (a path
 * with newlines, say) become '?'. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20) *s = '?';
}

static int fail(ctx *x, const yaml_node_t *at, const char *fmt, ...) {
    size_t off = 0;
    if (at) {
        int k = snprintf(x->err, x->errlen, "%s:%zu:%zu: ", x->file, at->start_mark.line + 1,
                         at->start_mark.column + 1);
        off = k > 0 ? (size_t)k : 0;
    } else {
        int k = snprintf(x->err, x->errlen, "%s: ", x->file);
        off = k > 0 ? (size_t)k : 0;
    }
    if (off < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + off, x->errlen - off, fmt, ap);
        va_end(ap);
    }
    one_line(x->err);
    return -1;
}

static const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

/* Printable excerpt of a scalar for messages (bounded, control bytes as '?'). */
static const char *excerpt(const yaml_node_t *n, char *buf, size_t cap) {
    size_t len = n->data.scalar.length, j = 0;
    for (size_t i = 0; i < len && j + 4 < cap; i++) {
        unsigned char ch = n->data.scalar.value[i];
        buf[j++] = (ch < 32 || ch == 127) ? '?' : (char)ch;
    }
    if (len > 0 && j + 4 >= cap) buf[j++] = '.', buf[j++] = '.', buf[j++] = '.';
    buf[j] = 0;
    return buf;
}

static const char *node_kind(const yaml_node_t *n) {
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a value";
}

static bool is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = sval(n);
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int unknown_key(ctx *x, const yaml_node_t *k, const char *where, const char *const *names, int n) {
    char buf[96];
    const char *word = excerpt(k, buf, sizeof(buf));
    const char *s = k->data.scalar.length == strlen(sval(k)) ? pol_suggest(sval(k), names, n) : NULL;
    if (s) return fail(x, k, "unknown key '%s%s%s'; did you mean '%s'?", where, *where ? "." : "", word, s);
    return fail(x, k, "unknown key '%s%s%s'", where, *where ? "." : "", word);
}

/* Checks for duplicate keys in a mapping (key scalars compared by bytes). */
static int check_dups(ctx *x, const yaml_node_t *map, const char *where) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE)
            return fail(x, k ? k : map, "%s%skeys must be plain names", where, *where ? ": " : "");
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k0 = yaml_document_get_node(x->doc, q->key);
            if (k0 && k0->type == YAML_SCALAR_NODE && k0->data.scalar.length == k->data.scalar.length &&
                !memcmp(k0->data.scalar.value, k->data.scalar.value, k->data.scalar.length)) {
                char buf[96];
                return fail(x, k, "duplicate key '%s%s%s' (first at line %zu)", where, *where ? "." : "",
                            excerpt(k, buf, sizeof(buf)), k0->start_mark.line + 1);
            }
        }
    }
    return 0;
}

static int parse_int_str(const char *v, long long *out) {
    if (!*v) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) return -1;
    *out = x;
    return 0;
}

static int parse_float_str(const char *v, double *out) {
    if (!*v) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

static int parse_bool_str(const char *v, bool *out) {
    static const char *const t[] = {"true", "yes", "on", NULL}, *const f[] = {"false", "no", "off", NULL};
    for (int i = 0; t[i]; i++)
        if (!strcasecmp(v, t[i])) return *out = true, 0;
    for (int i = 0; f[i]; i++)
        if (!strcasecmp(v, f[i])) return *out = false, 0;
    return -1;
}

/* Sets one typed field from a value node; errors name "where.key". */
static int set_value(ctx *x, const keydef *kd, void *base, const yaml_node_t *v, const char *where) {
    char buf[96];
    if (v->type != YAML_SCALAR_NODE && kd->t != K_ORIGINS && kd->t != K_INTLIST)
        return fail(x, v, "%s.%s: expected %s, got %s", where, kd->name,
                    kd->t == K_INT ? "an integer" : kd->t == K_FLOAT ? "a number" : kd->t == K_BOOL ? "true or false"
                                                                                                     : "a single value",
                    node_kind(v));
    bool has_nul = v->type == YAML_SCALAR_NODE && v->data.scalar.length != strlen(sval(v));
    if (has_nul) return fail(x, v, "%s.%s: value contains a NUL byte", where, kd->name);
    char *field = (char *)base + kd->off;
    switch (kd->t) {
    case K_INT: {
        long long i;
        if (parse_int_str(sval(v), &i))
            return fail(x, v, "%s.%s: expected an integer, got '%s'", where, kd->name, excerpt(v, buf, sizeof(buf)));
        if (i < (long long)kd->lo || i > (long long)kd->hi)
            return fail(x, v, "%s.%s: %lld is out of range (%.0f..%.0f)", where, kd->name, i, kd->lo, kd->hi);
        *(int *)field = (int)i;
        return 0;
    }
    case K_FLOAT: {
        double d;
        if (parse_float_str(sval(v), &d))
            return fail(x, v, "%s.%s: expected a number, got '%s'", where, kd->name, excerpt(v, buf, sizeof(buf)));
        if (d < kd->lo || d > kd->hi)
            return fail(x, v, "%s.%s: %g is out of range (%g..%g)", where, kd->name, d, kd->lo, kd->hi);
        *(double *)field = d;
        return 0;
    }
    case K_BOOL: {
        bool b;
        if (parse_bool_str(sval(v), &b))
            return fail(x, v, "%s.%s: expected true or false, got '%s'", where, kd->name, excerpt(v, buf, sizeof(buf)));
        *(bool *)field = b;
        return 0;
    }
    case K_STR: {
        const char *s = is_null(v) ? "" : sval(v);
        size_t len = strlen(s);
        if (len >= kd->cap)
            return fail(x, v, "%s.%s: value too long (%zu bytes, at most %zu)", where, kd->name, len, kd->cap - 1);
        memcpy(field, s, len + 1);
        return 0;
    }
    case K_ENUM: {
        int n = 0;
        while (kd->enums[n]) n++;
        for (int i = 0; i < n; i++)
            if (!strcmp(sval(v), kd->enums[i])) return *(int *)field = i, 0;
        char list[128] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", kd->enums[i]);
        const char *s = pol_suggest(sval(v), kd->enums, n);
        if (s)
            return fail(x, v, "%s.%s: expected one of %s, got '%s'; did you mean '%s'?", where, kd->name, list,
                        excerpt(v, buf, sizeof(buf)), s);
        return fail(x, v, "%s.%s: expected one of %s, got '%s'", where, kd->name, list, excerpt(v, buf, sizeof(buf)));
    }
    case K_INTLIST: {
        pol_int_list *l = (pol_int_list *)field;
        if (v->type != YAML_SEQUENCE_NODE)
            return fail(x, v, "%s.%s: expected a list of integers, got %s", where, kd->name, node_kind(v));
        l->n = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *o = yaml_document_get_node(x->doc, *it);
            if (!o || o->type != YAML_SCALAR_NODE)
                return fail(x, o ? o : v, "%s.%s: expected a list of integers, got %s in it", where, kd->name,
                            o ? node_kind(o) : "nothing");
            long long i;
            if (o->data.scalar.length != strlen(sval(o)) || parse_int_str(sval(o), &i))
                return fail(x, o, "%s.%s: expected an integer, got '%s'", where, kd->name, excerpt(o, buf, sizeof(buf)));
            if (i < (long long)kd->lo || i > (long long)kd->hi)
                return fail(x, o, "%s.%s: %lld is out of range (%.0f..%.0f)", where, kd->name, i, kd->lo, kd->hi);
            for (int j = 0; j < l->n; j++)
                if (l->v[j] == i) return fail(x, o, "%s.%s: %lld is listed twice", where, kd->name, i);
            if (l->n >= POL_MAX_DEVICES)
                return fail(x, o, "%s.%s: too many entries (at most %d)", where, kd->name, POL_MAX_DEVICES);
            l->v[l->n++] = (int)i;
        }
        if (l->n == 0) return fail(x, v, "%s.%s: the list is empty", where, kd->name);
        return 0;
    }
    case K_ORIGINS:
        break; /* handled by the caller */
    }
    return 0;
}

static int add_origin(ctx *x, pol_server *s, const yaml_node_t *at, const char *o, size_t len) {
    while (len && isspace((unsigned char)*o)) o++, len--;
    while (len && isspace((unsigned char)o[len - 1])) len--;
    if (!len) return 0;
    if (s->n_origins >= POL_MAX_ORIGINS)
        return fail(x, at, "server.allowed_origins: too many origins (at most %d)", POL_MAX_ORIGINS);
    if (len >= sizeof(s->origins[0]))
        return fail(x, at, "server.allowed_origins: origin too long (at most %zu bytes)", sizeof(s->origins[0]) - 1);
    for (size_t i = 0; i < len; i++)
        if (o[i] == ',' || (unsigned char)o[i] < 33)
            return fail(x, at, "server.allowed_origins: an origin may not contain spaces or commas");
    memcpy(s->origins[s->n_origins], o, len);
    s->origins[s->n_origins][len] = 0;
    s->n_origins++;
    size_t used = strlen(s->allowed_origins);
    if (used + len + 2 > sizeof(s->allowed_origins))
        return fail(x, at, "server.allowed_origins: origins too long together (at most %zu bytes)",
                    sizeof(s->allowed_origins) - 1);
    snprintf(s->allowed_origins + used, sizeof(s->allowed_origins) - used, "%s%.*s", used ? "," : "", (int)len, o);
    return 0;
}

/* allowed_origins: a list of strings, or one comma-separated string. */
static int parse_origins(ctx *x, pol_server *s, const yaml_node_t *v) {
    s->n_origins = 0;
    s->allowed_origins[0] = 0;
    if (is_null(v)) return 0;
    if (v->type == YAML_SCALAR_NODE) {
        if (v->data.scalar.length != strlen(sval(v)))
            return fail(x, v, "server.allowed_origins: value contains a NUL byte");
        const char *p = sval(v);
        while (*p) {
            size_t len = strcspn(p, ",");
            if (add_origin(x, s, v, p, len)) return -1;
            p += len;
            if (*p == ',') p++;
        }
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE) return fail(x, v, "server.allowed_origins: expected a list of strings, got a mapping");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *o = yaml_document_get_node(x->doc, *it);
        if (!o || o->type != YAML_SCALAR_NODE)
            return fail(x, o ? o : v, "server.allowed_origins: expected a list of strings, got %s in it",
                        o ? node_kind(o) : "nothing");
        if (o->data.scalar.length != strlen(sval(o)) || !o->data.scalar.length)
            return fail(x, o, "server.allowed_origins: empty origin or NUL byte");
        if (add_origin(x, s, o, sval(o), o->data.scalar.length)) return -1;
    }
    return 0;
}

/* Parses a mapping against a key table into base; marks[i] = the value node of
 * key i (NULL if absent). */
static int parse_map(ctx *x, const yaml_node_t *map, const keydef *keys, int n, void *base, const char *where,
                     const yaml_node_t **marks) {
    for (int i = 0; i < n; i++) marks[i] = NULL;
    if (is_null(map)) return 0;
    if (map->type != YAML_MAPPING_NODE) return fail(x, map, "%s: expected a mapping of keys, got %s", where, node_kind(map));
    if (check_dups(x, map, where)) return -1;
    const char *names[MAXKEYS];
    for (int i = 0; i < n; i++) names[i] = keys[i].name;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        if (!k || !v) return fail(x, map, "%s: malformed mapping", where);
        int idx = -1;
        for (int i = 0; i < n; i++)
            if (k->data.scalar.length == strlen(keys[i].name) && !strcmp(sval(k), keys[i].name)) idx = i;
        if (idx < 0) return unknown_key(x, k, where, names, n);
        marks[idx] = v;
        if (keys[idx].t == K_ORIGINS) {
            if (parse_origins(x, base, v)) return -1;
        } else if (set_value(x, &keys[idx], base, v, where)) {
            return -1;
        }
    }
    return 0;
}

static int key_index(const keydef *keys, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(keys[i].name, name)) return i;
    return -1;
}

/* γ bounds consistency; the error sits at gamma_min's value (or the first bound given). */
static int check_gamma(ctx *x, const char *where, int gmin, int gmax, int gdef, const yaml_node_t *nmin,
                       const yaml_node_t *nmax, const yaml_node_t *ndef, const yaml_node_t *sect) {
    if (gmin > gmax) {
        const yaml_node_t *at = nmin ? nmin : nmax ? nmax : sect;
        return fail(x, at, "%s: gamma_min %d > gamma_max %d", where, gmin, gmax);
    }
    if (gdef < gmin || gdef > gmax) {
        const yaml_node_t *at = ndef ? ndef : nmin ? nmin : nmax ? nmax : sect;
        return fail(x, at, "%s: gamma_default %d is outside [gamma_min %d, gamma_max %d]", where, gdef, gmin, gmax);
    }
    return 0;
}

static bool valid_name(const char *s, bool allow_any) {
    if (!*s) return false;
    if (!strcmp(s, "*")) return true;
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (allow_any ? (ch < 33 || ch == 127) : !(islower(ch) || isdigit(ch) || ch == '_' || ch == '-')) return false;
    }
    return true;
}

static int parse_rules(ctx *x, pol_config *c, const yaml_node_t *policy) {
    const yaml_node_t *marks[MAXKEYS];
    if (is_null(policy)) return 0;
    if (policy->type != YAML_MAPPING_NODE)
        return fail(x, policy, "policy: expected a mapping of keys, got %s", node_kind(policy));
    if (check_dups(x, policy, "policy")) return -1;
    const char *names[] = {"rules"};
    const yaml_node_t *rules = NULL;
    for (yaml_node_pair_t *p = policy->data.mapping.pairs.start; p < policy->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        if (!k || !v) return fail(x, policy, "policy: malformed mapping");
        if (strcmp(sval(k), "rules") || k->data.scalar.length != 5) return unknown_key(x, k, "policy", names, 1);
        rules = v;
    }
    if (!rules || is_null(rules)) return 0;
    if (rules->type != YAML_SEQUENCE_NODE)
        return fail(x, rules, "policy.rules: expected a list of rules, got %s", node_kind(rules));
    const pol_speculation *sp = &c->speculation;
    int i = 0;
    for (yaml_node_item_t *it = rules->data.sequence.items.start; it < rules->data.sequence.items.top; it++, i++) {
        yaml_node_t *rn = yaml_document_get_node(x->doc, *it);
        char where[40];
        snprintf(where, sizeof(where), "policy.rules[%d]", i);
        if (!rn) return fail(x, rules, "%s: malformed", where);
        if (rn->type != YAML_MAPPING_NODE) return fail(x, rn, "%s: expected a mapping, got %s", where, node_kind(rn));
        if (c->n_rules >= POL_MAX_RULES) return fail(x, rn, "policy.rules: too many rules (at most %d)", POL_MAX_RULES);
        pol_rule *r = &c->rules[c->n_rules];
        memset(r, 0, sizeof(*r));
        snprintf(r->model, sizeof(r->model), "*");
        snprintf(r->content_type, sizeof(r->content_type), "*");
        r->gamma_min = sp->gamma_min;
        r->gamma_max = sp->gamma_max;
        r->gamma_default = sp->gamma_default;
        r->alpha_threshold = sp->fallback_alpha;
        r->method = sp->method;
        r->learn = true;
        r->line = (int)rn->start_mark.line + 1;
        if (parse_map(x, rn, pol_rule_keys, pol_n_rule_keys, r, where, marks)) return -1;
        const yaml_node_t *nmodel = marks[key_index(pol_rule_keys, pol_n_rule_keys, "model")];
        const yaml_node_t *nct = marks[key_index(pol_rule_keys, pol_n_rule_keys, "content_type")];
        const yaml_node_t *nmin = marks[key_index(pol_rule_keys, pol_n_rule_keys, "gamma_min")];
        const yaml_node_t *nmax = marks[key_index(pol_rule_keys, pol_n_rule_keys, "gamma_max")];
        const yaml_node_t *ndef = marks[key_index(pol_rule_keys, pol_n_rule_keys, "gamma_default")];
        if (!valid_name(r->model, true))
            return fail(x, nmodel ? nmodel : rn, "%s.model: expected a model name or \"*\"", where);
        if (!valid_name(r->content_type, false))
            return fail(x, nct ? nct : rn, "%s.content_type: expected \"*\" or a name of [a-z0-9_-] (e.g. chat, code, structured)",
                        where);
        if (!ndef) { /* inherited default: clamp into the rule's own bounds */
            if (r->gamma_default < r->gamma_min) r->gamma_default = r->gamma_min;
            if (r->gamma_default > r->gamma_max) r->gamma_default = r->gamma_max;
        }
        if (check_gamma(x, where, r->gamma_min, r->gamma_max, r->gamma_default, nmin, nmax, ndef, rn)) return -1;
        for (int j = 0; j < c->n_rules; j++) {
            const pol_rule *o = &c->rules[j];
            if (!strcmp(o->model, r->model) && !strcmp(o->content_type, r->content_type))
                return fail(x, rn, "%s: duplicate rule for model '%s' content_type '%s' (first at line %d)", where,
                            r->model, r->content_type, o->line);
        }
        c->n_rules++;
    }
    return 0;
}

/* ---- environment ------------------------------------------------------------- */

static const char *env_get(const pol_env *env, const char *name) {
    if (!env) return getenv(name);
    size_t n = strlen(name);
    for (const char *const *v = env->vars; v && *v; v++)
        if (!strncmp(*v, name, n) && (*v)[n] == '=') return *v + n + 1;
    return NULL;
}

static void env_note(pol_config *c, const char *key) {
    if (c->n_env < POL_MAX_ENV && !pol_config_from_env(c, key))
        snprintf(c->env_keys[c->n_env++], sizeof(c->env_keys[0]), "%s", key);
}

static int env_str(ctx *x, pol_config *c, const pol_env *env, const char *var, const char *key, char *field,
                   size_t cap) {
    const char *v = env_get(env, var);
    if (!v) return 0;
    if (strlen(v) >= cap) {
        snprintf(x->err, x->errlen, "%s (environment, for %s): value too long (at most %zu bytes)", var, key, cap - 1);
        return -1;
    }
    snprintf(field, cap, "%s", v);
    env_note(c, key);
    return 0;
}

static int apply_env(ctx *x, pol_config *c, const pol_env *env) {
    const char *port = env_get(env, "SPECD_PORT");
    if (port) {
        long long p;
        if (parse_int_str(port, &p)) {
            snprintf(x->err, x->errlen, "SPECD_PORT (environment, for server.port): expected an integer, got '%.64s'",
                     port);
            return -1;
        }
        if (p < 0 || p > 65535) {
            snprintf(x->err, x->errlen, "SPECD_PORT (environment, for server.port): %lld is out of range (0..65535)", p);
            return -1;
        }
        c->server.port = (int)p;
        env_note(c, "server.port");
    }
    return env_str(x, c, env, "SPECD_MODEL", "models.target", c->models.target, sizeof(c->models.target)) ||
                   env_str(x, c, env, "SPECD_DRAFT", "models.draft", c->models.draft, sizeof(c->models.draft)) ||
                   env_str(x, c, env, "SPECD_ADMIN_TOKEN", "server.admin_token", c->server.admin_token,
                           sizeof(c->server.admin_token))
               ? -1
               : 0;
}

static int check_model(ctx *x, const pol_config *c, const char *key, const char *path, const yaml_node_t *at) {
    if (!path[0] || access(path, R_OK) == 0) return 0;
    const char *why = strerror(errno);
    if (pol_config_from_env(c, key)) {
        snprintf(x->err, x->errlen, "%s (environment, for %s): cannot read model file '%s': %s",
                 !strcmp(key, "models.target") ? "SPECD_MODEL" : "SPECD_DRAFT", key, path, why);
        one_line(x->err);
        return -1;
    }
    return fail(x, at, "%s: cannot read model file '%s': %s", key, path, why);
}

/* ---- loading ----------------------------------------------------------------- */

static int load_doc(ctx *x, pol_config *c, const pol_env *env) {
    yaml_document_t *doc = x->doc;
    yaml_node_t *root = yaml_document_get_root_node(doc);
    const yaml_node_t *marks[POL_N_SECTIONS][MAXKEYS];
    const yaml_node_t *snode[POL_N_SECTIONS];
    memset(marks, 0, sizeof(marks));
    memset(snode, 0, sizeof(snode));
    if (root && !is_null(root)) {
        if (root->type != YAML_MAPPING_NODE)
            return fail(x, root, "the top level must be a mapping of pol_sections (server, models, engine, speculation, "
                                 "policy, telemetry)");
        if (check_dups(x, root, "")) return -1;
        const char *names[POL_N_SECTIONS];
        for (int i = 0; i < POL_N_SECTIONS; i++) names[i] = pol_sections[i].name;
        /* First pass: find sections (rules inherit from speculation whatever the order). */
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            yaml_node_t *v = yaml_document_get_node(doc, p->value);
            if (!k || !v) return fail(x, root, "malformed top-level mapping");
            int idx = -1;
            for (int i = 0; i < POL_N_SECTIONS; i++)
                if (k->data.scalar.length == strlen(pol_sections[i].name) && !strcmp(sval(k), pol_sections[i].name)) idx = i;
            if (idx < 0) {
                char buf[96];
                const char *s = pol_suggest(sval(k), names, POL_N_SECTIONS);
                if (s) return fail(x, k, "unknown section '%s'; did you mean '%s'?", excerpt(k, buf, sizeof(buf)), s);
                return fail(x, k, "unknown section '%s' (expected server, models, engine, speculation, policy or telemetry)",
                            excerpt(k, buf, sizeof(buf)));
            }
            /* a section with nothing under it ("server:" alone, or "~"): its
             * keys lost their indentation, or the file was cut. Taking it as
             * "all defaults" would silently drop the admin token, limits and
             * rules a reload was meant to keep. */
            if (is_null(v)) {
                char buf[96];
                return fail(x, k, "section '%s' is empty (no settings under it: lost indentation or a cut file?); "
                            "indent its keys under it, delete it, or write '%s: {}' for its defaults",
                            excerpt(k, buf, sizeof(buf)), excerpt(k, buf, sizeof(buf)));
            }
            snode[idx] = v;
        }
        for (int i = 0; i < POL_N_SECTIONS; i++) {
            if (!snode[i] || !strcmp(pol_sections[i].name, "policy")) continue;
            if (parse_map(x, snode[i], pol_sections[i].keys, pol_sections[i].n, (char *)c + pol_sections[i].off, pol_sections[i].name,
                          marks[i]))
                return -1;
        }
    }
    /* speculation cross-checks */
    const secdef *sd = &pol_sections[3];
    const yaml_node_t **sm = marks[3];
    pol_speculation *sp = &c->speculation;
    if (check_gamma(x, "speculation", sp->gamma_min, sp->gamma_max, sp->gamma_default,
                    sm[key_index(sd->keys, sd->n, "gamma_min")], sm[key_index(sd->keys, sd->n, "gamma_max")],
                    sm[key_index(sd->keys, sd->n, "gamma_default")], snode[3] ? snode[3] : root))
        return -1;
    c->default_rule = (pol_rule){.gamma_min = sp->gamma_min, .gamma_max = sp->gamma_max,
                                 .gamma_default = sp->gamma_default, .alpha_threshold = sp->fallback_alpha,
                                 .method = sp->method, .learn = true};
    if (sp->ngram_min > sp->ngram_max)
        return fail(x, sm[key_index(sd->keys, sd->n, "ngram_min")] ? sm[key_index(sd->keys, sd->n, "ngram_min")]
                                                                   : snode[3] ? snode[3] : root,
                    "speculation.ngram_min %d > speculation.ngram_max %d", sp->ngram_min, sp->ngram_max);
    snprintf(c->default_rule.model, sizeof(c->default_rule.model), "*");
    snprintf(c->default_rule.content_type, sizeof(c->default_rule.content_type), "*");
    if (snode[4] && parse_rules(x, c, snode[4])) return -1;
    /* engine cross-checks */
    const secdef *ed = &pol_sections[2];
    int bs = c->engine.block_size;
    if (bs & (bs - 1)) return fail(x, marks[2][key_index(ed->keys, ed->n, "block_size")], "engine.block_size: %d is not a power of two", bs);
    if (c->engine.max_batch > c->engine.max_running)
        return fail(x, marks[2][key_index(ed->keys, ed->n, "max_batch")],
                    "engine.max_batch %d > engine.max_running %d", c->engine.max_batch, c->engine.max_running);
    if (c->engine.backend == POL_BACKEND_CUDA && c->engine.devices.n < c->engine.tensor_parallel) {
        const yaml_node_t *at = marks[2][key_index(ed->keys, ed->n, "devices")];
        if (!at) at = marks[2][key_index(ed->keys, ed->n, "tensor_parallel")];
        return fail(x, at, "engine.devices: %d device%s listed for engine.tensor_parallel %d (backend cuda needs one "
                    "GPU per shard)", c->engine.devices.n, c->engine.devices.n == 1 ? "" : "s",
                    c->engine.tensor_parallel);
    }
    /* server: admin token */
    const secdef *svd = &pol_sections[0];
    const yaml_node_t *nenv = marks[0][key_index(svd->keys, svd->n, "admin_token_env")];
    if (c->server.admin_token[0] && c->server.admin_token_env[0])
        return fail(x, nenv, "server: give admin_token or admin_token_env, not both");
    if (c->server.admin_token_env[0]) {
        const char *name = c->server.admin_token_env;
        bool ok = isalpha((unsigned char)name[0]) || name[0] == '_';
        for (const char *q = name; *q; q++) ok = ok && (isalnum((unsigned char)*q) || *q == '_');
        if (!ok) return fail(x, nenv, "server.admin_token_env: '%s' is not an environment variable name", name);
        const char *tok = env_get(env, name);
        if (!tok || !*tok) return fail(x, nenv, "server.admin_token_env: environment variable '%s' is not set", name);
        if (strlen(tok) >= sizeof(c->server.admin_token))
            return fail(x, nenv, "server.admin_token_env: the token in '%s' is too long", name);
        snprintf(c->server.admin_token, sizeof(c->server.admin_token), "%s", tok);
    }
    if (!c->server.host[0]) return fail(x, marks[0][key_index(svd->keys, svd->n, "host")], "server.host: must not be empty");
    if (!c->telemetry.path[0] && c->telemetry.enabled)
        return fail(x, marks[5][key_index(pol_sections[5].keys, pol_sections[5].n, "path")],
                    "telemetry.path: must not be empty while telemetry.enabled is true");
    /* environment, then model files */
    if (apply_env(x, c, env)) return -1;
    const secdef *md = &pol_sections[1];
    if (check_model(x, c, "models.target", c->models.target, marks[1][key_index(md->keys, md->n, "target")]) ||
        check_model(x, c, "models.draft", c->models.draft, marks[1][key_index(md->keys, md->n, "draft")]))
        return -1;
    if (c->models.draft[0] && !c->models.target[0]) {
        const yaml_node_t *at = marks[1][key_index(md->keys, md->n, "draft")];
        return fail(x, at, "models.draft: a draft needs models.target too");
    }
    return 0;
}

pol_config *pol_config_load_mem(const char *yaml, size_t len, const char *name, const pol_env *env, char *err,
                                size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof(dummy);
    err[0] = 0;
    if (!name) name = "<config>";
    pol_snap *s = calloc(1, sizeof(*s));
    yaml_parser_t p;
    if (!s || !yaml_parser_initialize(&p)) {
        free(s);
        snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    pol_config *c = &s->cfg;
    pol_cfg_defaults(c);
    snprintf(c->source, sizeof(c->source), "%s", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    yaml_document_t doc;
    ctx x = {&doc, name, err, errlen};
    int rc = -1;
    if (!yaml_parser_load(&p, &doc)) {
        snprintf(err, errlen, "%s:%zu:%zu: %s%s%s", name, p.problem_mark.line + 1, p.problem_mark.column + 1,
                 p.problem ? p.problem : "YAML syntax error", p.context ? " " : "", p.context ? p.context : "");
    } else if (!yaml_document_get_root_node(&doc) || is_null(yaml_document_get_root_node(&doc))) {
        /* an empty file is almost always an editor mid-write (or a truncated
         * copy): taking it as "all defaults" would silently reset live limits */
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        snprintf(err, errlen, "%s:%zu:%zu: the file holds no settings (empty, blank or only comments); write {} to "
                 "use every default", name, root ? root->start_mark.line + 1 : 1, root ? root->start_mark.column + 1 : 1);
        yaml_document_delete(&doc);
    } else {
        rc = load_doc(&x, c, env);
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        yaml_document_delete(&doc);
        if (rc == 0 && root) { /* a second document would be silently ignored: refuse it */
            yaml_document_t doc2;
            if (!yaml_parser_load(&p, &doc2)) {
                snprintf(err, errlen, "%s:%zu:%zu: %s%s%s", name, p.problem_mark.line + 1, p.problem_mark.column + 1,
                         p.problem ? p.problem : "YAML syntax error", p.context ? " " : "", p.context ? p.context : "");
                rc = -1;
            } else {
                yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
                if (r2) {
                    snprintf(err, errlen, "%s:%zu:%zu: only one YAML document is allowed", name,
                             r2->start_mark.line + 1, r2->start_mark.column + 1);
                    rc = -1;
                }
                yaml_document_delete(&doc2);
            }
        }
    }
    yaml_parser_delete(&p);
    if (rc) {
        free(s);
        return NULL;
    }
    return c;
}

pol_config *pol_config_load(const char *path, const pol_env *env, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 14, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        if (cap >= ((size_t)16 << 20)) {
            free(buf);
            fclose(f);
            snprintf(err, errlen, "%s: larger than 16 MiB", path);
            return NULL;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf || rerr) {
        free(buf);
        snprintf(err, errlen, "%s: %s", path, buf ? "read error" : "out of memory");
        return NULL;
    }
    pol_config *c = pol_config_load_mem(buf, len, path, env, err, errlen);
    free(buf);
    return c;
}

pol_config *pol_config_default(void) {
    char err[256];
    pol_env none = {NULL};
    pol_config *c = pol_config_load_mem("{}", 2, "<defaults>", &none, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "%s:%d: built-in defaults do not validate: %s\n", __FILE__, __LINE__, err);
        abort();
    }
    return c;
}
