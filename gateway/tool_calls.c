/* tool_calls.c — tool calls in and out of a model's own format (see
 * tool_calls.h): the GBNF wrapper around each function's argument grammar,
 * the parser for the formats of the reference templates, and the OpenAI
 * shapes (message.tool_calls, finish_reason "tool_calls", delta.tool_calls). */
#include "gateway/tool_calls.h"

#include "gateway/json_schema.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- parsing ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int add_call(tc_result *r, const char *name, json_t *args, uint64_t seed) {
    tc_call *nc = realloc(r->calls, sizeof *nc * (size_t)(r->n_calls + 1));
    if (!nc) return -1;
    r->calls = nc;
    tc_call *c = &r->calls[r->n_calls];
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char id[10];
    uint64_t h = mix(seed + (uint64_t)r->n_calls * 7919u);
    for (int k = 0; k < 9; k++, h /= 62) id[k] = alnum[h % 62];
    id[9] = '\0';
    c->id = strdup(id);
    c->name = strdup(name);
    c->arguments = json_is_string(args) ? strdup(json_string_value(args))
                                         : json_dumps(args ? args : json_object(), JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!c->id || !c->name || !c->arguments) return -1;
    r->n_calls++;
    return 0;
}

/* one JSON value at s[*pos..len): advances *pos past it */
static json_t *json_at(const char *s, size_t len, size_t *pos) {
    while (*pos < len && (s[*pos] == ' ' || s[*pos] == '\n' || s[*pos] == '\t' || s[*pos] == '\r')) (*pos)++;
    if (*pos >= len) return NULL;
    json_error_t je;
    json_t *v = json_loadb(s + *pos, len - *pos, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (v) *pos += je.position;
    return v;
}

/* {"name", "arguments" | "parameters"} or Command-R's {"tool_name", "parameters"} */
static int call_object(tc_result *r, json_t *o, uint64_t seed) {
    if (!json_is_object(o)) return 0;
    json_t *name = json_object_get(o, "name");
    if (!json_is_string(name)) name = json_object_get(o, "tool_name");
    if (!json_is_string(name)) {
        json_t *fn = json_object_get(o, "function");
        if (json_is_object(fn)) return call_object(r, fn, seed);
        return 0;
    }
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    return add_call(r, json_string_value(name), args, seed) ? -1 : 1;
}

static int calls_value(tc_result *r, json_t *v, uint64_t seed) {
    if (json_is_array(v)) {
        size_t k;
        json_t *x;
        int n = 0;
        json_array_foreach(v, k, x) {
            int rc = call_object(r, x, seed);
            if (rc < 0) return -1;
            n += rc;
        }
        return n;
    }
    return call_object(r, v, seed);
}

static const char *find(const char *s, size_t len, size_t from, const char *needle) {
    size_t n = strlen(needle);
    for (size_t k = from; k + n <= len; k++)
        if (!memcmp(s + k, needle, n)) return s + k;
    return NULL;
}

static char *trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    if (!n) return NULL;
    char *o = malloc(n + 1);
    if (o) memcpy(o, s, n), o[n] = '\0';
    return o;
}

int tc_parse(chat_tool_format fmt, const char *text, size_t len, uint64_t seed, tc_result *out) {
    memset(out, 0, sizeof *out);
    size_t first = len; /* where the calls start: content is what comes before */
    const char *p;
    int rc = 0;
    switch (fmt) {
    case CHAT_TOOLS_HERMES: {
        size_t at = 0;
        while ((p = find(text, len, at, "<tool_call>"))) {
            size_t pos = (size_t)(p - text) + 11;
            json_t *v = json_at(text, len, &pos);
            if (!v) break;
            if (first == len) first = (size_t)(p - text);
            rc = calls_value(out, v, seed);
            json_decref(v);
            if (rc < 0) goto oom;
            const char *e = find(text, len, pos, "</tool_call>");
            at = e ? (size_t)(e - text) + 12 : pos;
        }
        break;
    }
    case CHAT_TOOLS_FUNCTIONARY31: {
        size_t at = 0;
        while ((p = find(text, len, at, "<function="))) {
            const char *gt = memchr(p, '>', len - (size_t)(p - text));
            if (!gt) break;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(gt - p - 10), p + 10);
            size_t pos = (size_t)(gt - text) + 1;
            json_t *v = json_at(text, len, &pos);
            if (!v) break;
            if (first == len) first = (size_t)(p - text);
            rc = add_call(out, name, v, seed);
            json_decref(v);
            if (rc < 0) goto oom;
            const char *e = find(text, len, pos, "</function>");
            at = e ? (size_t)(e - text) + 11 : pos;
        }
        break;
    }
    case CHAT_TOOLS_FUNCTIONARY32: {
        /* the generation prompt ends with ">>>": the reply is "NAME\n{...}" (or "all\ntext"), more after ">>>" */
        size_t at = 0;
        for (;;) {
            const char *nl = memchr(text + at, '\n', len - at);
            if (!nl) break;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(nl - text - (ptrdiff_t)at), text + at);
            if (!strcmp(name, "all") || !name[0] || strchr(name, ' ')) break;
            size_t pos = (size_t)(nl - text) + 1;
            json_t *v = json_at(text, len, &pos);
            if (!v) break;
            if (first == len) first = at;
            rc = add_call(out, name, v, seed);
            json_decref(v);
            if (rc < 0) goto oom;
            const char *nx = find(text, len, pos, ">>>");
            if (!nx) break;
            at = (size_t)(nx - text) + 3;
        }
        break;
    }
    case CHAT_TOOLS_MISTRAL: case CHAT_TOOLS_FIREFUNCTION: case CHAT_TOOLS_COMMAND_R7B: case CHAT_TOOLS_COMMAND_R: {
        const char *mark = fmt == CHAT_TOOLS_MISTRAL ? "[TOOL_CALLS]" : fmt == CHAT_TOOLS_FIREFUNCTION ? "functools"
                         : fmt == CHAT_TOOLS_COMMAND_R7B ? "<|START_ACTION|>" : "```json";
        if ((p = find(text, len, 0, mark))) {
            size_t pos = (size_t)(p - text) + strlen(mark);
            json_t *v = json_at(text, len, &pos);
            if (v) {
                first = (size_t)(p - text);
                if (fmt == CHAT_TOOLS_COMMAND_R) { /* "Action: ```json" */
                    const char *a = find(text, len, 0, "Action:");
                    if (a && a < p) first = (size_t)(a - text);
                }
                rc = calls_value(out, v, seed);
                json_decref(v);
                if (rc < 0) goto oom;
            }
        }
        break;
    }
    case CHAT_TOOLS_LLAMA3: case CHAT_TOOLS_GENERIC: default: {
        size_t pos = 0;
        p = find(text, len, 0, "<|python_tag|>");
        if (p) pos = (size_t)(p - text) + 14;
        size_t start = p ? (size_t)(p - text) : 0;
        while (pos < len && (text[pos] == ' ' || text[pos] == '\n')) pos++;
        if (!p) start = pos;
        if (pos < len && (text[pos] == '{' || text[pos] == '[')) {
            json_t *v = json_at(text, len, &pos);
            if (v) {
                rc = calls_value(out, v, seed);
                json_decref(v);
                if (rc < 0) goto oom;
                if (out->n_calls) first = start;
            }
        }
        break;
    }
    }
    if (out->n_calls) out->content = trimmed(text, first);
    return out->n_calls;
oom:
    tc_result_free(out);
    return -1;
}

void tc_result_free(tc_result *r) {
    if (!r) return;
    for (int i = 0; i < r->n_calls; i++) free(r->calls[i].id), free(r->calls[i].name), free(r->calls[i].arguments);
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof *r);
}

/* ---- grammar ---- */

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) abort();
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A GBNF string literal of s (quotes escaped). */
static void sb_lit(sbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') sb_put(b, "\\", 1), sb_put(b, s, 1);
        else if (*s == '\n') sb_puts(b, "\\n");
        else sb_put(b, s, 1);
    }
    sb_puts(b, "\"");
}

static bool ident_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

/* Appends one schema grammar with its per-schema rules (rN, root) renamed
 * tK_rN / tK_root; shared helper rules are written once (seen). */
static void append_renamed(sbuf *b, const char *g, int k, sbuf *seen) {
    char pre[16];
    snprintf(pre, sizeof pre, "t%d_", k);
    const char *line = g;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        /* rule name */
        size_t nl = 0;
        while (nl < n && ident_char(line[nl])) nl++;
        bool own = nl && (!strncmp(line, "root", nl) ? nl == 4 : (line[0] == 'r' && nl > 1 && strspn(line + 1, "0123456789") == nl - 1));
        if (!own && nl) {
            char key[80];
            snprintf(key, sizeof key, "|%.*s|", (int)nl, line);
            if (seen->s && strstr(seen->s, key)) goto next;
            sb_puts(seen, key);
        }
        for (size_t i = 0; i < n;) {
            char c = line[i];
            if (c == '"') { /* literal */
                size_t j = i + 1;
                while (j < n && line[j] != '"') j += line[j] == '\\' ? 2 : 1;
                sb_put(b, line + i, j + 1 - i);
                i = j + 1;
            } else if (c == '[') { /* class */
                size_t j = i + 1;
                while (j < n && line[j] != ']') j += line[j] == '\\' ? 2 : 1;
                sb_put(b, line + i, j + 1 - i);
                i = j + 1;
            } else if (ident_char(c) && (i == 0 || !ident_char(line[i - 1]))) {
                size_t j = i;
                while (j < n && ident_char(line[j])) j++;
                bool rn = (j - i == 4 && !strncmp(line + i, "root", 4)) ||
                          (line[i] == 'r' && j - i > 1 && strspn(line + i + 1, "0123456789") >= j - i - 1);
                if (rn) sb_puts(b, pre);
                sb_put(b, line + i, j - i);
                i = j;
            } else {
                sb_put(b, &c, 1);
                i++;
            }
        }
        sb_puts(b, "\n");
    next:
        if (!end) break;
        line = end + 1;
    }
}

static void call_rule(sbuf *b, chat_tool_format fmt, const char *name, int k) {
    char args[32], lit[300];
    snprintf(args, sizeof args, " t%d_root ", k);
    switch (fmt) {
    case CHAT_TOOLS_HERMES:
        snprintf(lit, sizeof lit, "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name);
        sb_lit(b, lit), sb_puts(b, args), sb_lit(b, "}\n</tool_call>");
        break;
    case CHAT_TOOLS_LLAMA3:
        snprintf(lit, sizeof lit, "{\"name\": \"%s\", \"parameters\": ", name);
        sb_lit(b, lit), sb_puts(b, args), sb_lit(b, "}");
        break;
    case CHAT_TOOLS_FUNCTIONARY31:
        snprintf(lit, sizeof lit, "<function=%s>", name);
        sb_lit(b, lit), sb_puts(b, args), sb_lit(b, "</function>");
        break;
    case CHAT_TOOLS_FUNCTIONARY32:
        snprintf(lit, sizeof lit, "%s\n", name);
        sb_lit(b, lit), sb_puts(b, args);
        break;
    case CHAT_TOOLS_COMMAND_R7B: case CHAT_TOOLS_COMMAND_R:
        snprintf(lit, sizeof lit, "{\"tool_call_id\": \"%d\", \"tool_name\": \"%s\", \"parameters\": ", k, name);
        if (fmt == CHAT_TOOLS_COMMAND_R) snprintf(lit, sizeof lit, "{\"tool_name\": \"%s\", \"parameters\": ", name);
        sb_lit(b, lit), sb_puts(b, args), sb_lit(b, "}");
        break;
    default: /* generic, Mistral, Firefunction: inside their list markup */
        snprintf(lit, sizeof lit, "{\"name\": \"%s\", \"arguments\": ", name);
        sb_lit(b, lit), sb_puts(b, args), sb_lit(b, "}");
    }
}

char *tc_grammar(chat_tool_format fmt, const void *tools_v, const char *only, bool parallel, char *err, size_t errlen) {
    const json_t *tools = tools_v;
    sbuf rules = {0}, seen = {0}, calls = {0};
    int n = 0;
    size_t k;
    json_t *t;
    json_array_foreach(tools, k, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(only, name))) continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *any = NULL;
        if (!params) params = any = json_pack("{s:s}", "type", "object");
        char jerr[200];
        char *g = js_schema_to_gbnf(params, jerr, sizeof jerr);
        json_decref(any);
        if (!g) {
            snprintf(err, errlen, "tools[%zu].function.parameters: %s", k, jerr);
            free(rules.s), free(seen.s), free(calls.s);
            return NULL;
        }
        append_renamed(&rules, g, (int)k, &seen);
        free(g);
        if (n++) sb_puts(&calls, " | ");
        sb_puts(&calls, "( ");
        call_rule(&calls, fmt, name, (int)k);
        sb_puts(&calls, " )");
    }
    free(seen.s);
    if (!n) {
        snprintf(err, errlen, only ? "tool_choice names function '%s', which is not in tools" : "no function in tools%s", only ? only : "");
        free(rules.s), free(calls.s);
        return NULL;
    }
    sbuf g = {0};
    sb_puts(&g, "tool-call ::= ");
    sb_puts(&g, calls.s);
    sb_puts(&g, "\n");
    switch (fmt) {
    case CHAT_TOOLS_HERMES:
        sb_puts(&g, parallel ? "root ::= tool-call ( \"\\n\" tool-call )*\n" : "root ::= tool-call\n");
        break;
    case CHAT_TOOLS_MISTRAL:
        sb_puts(&g, parallel ? "root ::= \"[TOOL_CALLS][\" tool-call ( \", \" tool-call )* \"]\"\n" : "root ::= \"[TOOL_CALLS][\" tool-call \"]\"\n");
        break;
    case CHAT_TOOLS_FIREFUNCTION:
        sb_puts(&g, parallel ? "root ::= \" functools[\" tool-call ( \", \" tool-call )* \"]\"\n" : "root ::= \" functools[\" tool-call \"]\"\n");
        break;
    case CHAT_TOOLS_COMMAND_R7B:
        sb_puts(&g, "root ::= \"<|START_ACTION|>[\" tool-call \"]<|END_ACTION|>\"\n");
        break;
    case CHAT_TOOLS_COMMAND_R:
        sb_puts(&g, "root ::= \"Action: ```json\\n[\" tool-call \"]\\n```\"\n");
        break;
    case CHAT_TOOLS_FUNCTIONARY31:
        sb_puts(&g, parallel ? "root ::= tool-call ( tool-call )*\n" : "root ::= tool-call\n");
        break;
    default: sb_puts(&g, "root ::= tool-call\n");
    }
    sb_puts(&g, rules.s);
    free(rules.s), free(calls.s);
    return g.s;
}

/* ---- OpenAI shapes ---- */

static json_t *calls_json(const tc_result *r, bool with_index) {
    json_t *a = json_array();
    for (int i = 0; i < r->n_calls; i++) {
        json_t *c = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", r->calls[i].id, "type", "function", "function", "name",
                              r->calls[i].name, "arguments", r->calls[i].arguments);
        if (with_index) json_object_set_new(c, "index", json_integer(i));
        json_array_append_new(a, c);
    }
    return a;
}

char *tc_rewrite_response(char *json, chat_tool_format fmt, uint64_t seed) {
    if (!json) return NULL;
    json_t *root = json_loads(json, 0, NULL);
    json_t *choices = json_object_get(root, "choices");
    bool changed = false;
    size_t k;
    json_t *ch;
    json_array_foreach(choices, k, ch) {
        json_t *msg = json_object_get(ch, "message");
        const char *text = json_string_value(json_object_get(msg, "content"));
        if (!text) continue;
        tc_result r;
        if (tc_parse(fmt, text, strlen(text), seed + k * 1000003u, &r) <= 0) continue;
        json_object_set_new(msg, "content", r.content ? json_string(r.content) : json_null());
        json_object_set_new(msg, "tool_calls", calls_json(&r, false));
        json_object_set_new(ch, "finish_reason", json_string("tool_calls"));
        tc_result_free(&r);
        changed = true;
    }
    char *out = changed ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!out) return json;
    free(json);
    return out;
}

char *tc_stream_chunks(chat_tool_format fmt, const char *text, size_t len, uint64_t seed, const char *id,
                       const char *model, int index, bool *had_calls) {
    tc_result r;
    int n = tc_parse(fmt, text, len, seed, &r);
    *had_calls = n > 0;
    json_t *delta;
    if (n > 0) {
        delta = json_object();
        if (r.content) json_object_set_new(delta, "content", json_string(r.content));
        json_object_set_new(delta, "tool_calls", calls_json(&r, true));
    } else {
        delta = json_object();
        json_object_set_new(delta, "content", json_stringn(text ? text : "", len));
    }
    tc_result_free(&r);
    char cid[80];
    snprintf(cid, sizeof cid, "chatcmpl-%s", id);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:n}]}", "id", cid, "object", "chat.completion.chunk",
                          "created", (json_int_t)time(NULL), "model", model, "choices", "index", index, "delta", delta,
                          "logprobs", "finish_reason");
    char *j = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!j) return NULL;
    size_t jl = strlen(j);
    char *ev = malloc(jl + 9);
    if (ev) snprintf(ev, jl + 9, "data: %s\n\n", j);
    free(j);
    return ev;
}

char *tc_finish_reason(char *sse) {
    if (!sse) return NULL;
    static const char *const from[] = {"\"finish_reason\":\"stop\"", "\"finish_reason\":\"length\""};
    for (int k = 0; k < 2; k++) {
        char *p = strstr(sse, from[k]);
        if (!p) continue;
        const char *to = "\"finish_reason\":\"tool_calls\"";
        size_t n = strlen(sse), fl = strlen(from[k]), tl = strlen(to);
        char *o = malloc(n - fl + tl + 1);
        if (!o) return sse;
        size_t at = (size_t)(p - sse);
        memcpy(o, sse, at);
        memcpy(o + at, to, tl);
        memcpy(o + at + tl, p + fl, n - at - fl + 1);
        free(sse);
        return o;
    }
    return sse;
}
