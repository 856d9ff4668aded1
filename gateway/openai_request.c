/* openai_request.c — OpenAI-compatible request parsing and validation with
 * jansson, and the chat prompt's rendering (see openai_request.h). Per
 * request: allocation is fine here. */
#include "gateway/openai_request.h"
#include "gateway/tool_calls.h"

#include "gateway/fields.h"
#include "gateway/json_schema.h"
#include "gateway/penalty_fields.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------------- */

#define FAIL(code_, param_, ...)                                                                                    \
    do {                                                                                                            \
        err->status = 400;                                                                                          \
        err->code = (code_);                                                                                        \
        snprintf(err->param, sizeof err->param, "%s", (param_));                                                    \
        snprintf(err->message, sizeof err->message, __VA_ARGS__);                                                   \
        return -1;                                                                                                  \
    } while (0)

static json_t *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* An integer, or a real with an integral value in int64 range. */
static bool as_int(json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (isfinite(d) && d == floor(d) && d >= -9.2e18 && d <= 9.2e18) {
            *out = (int64_t)d;
            return true;
        }
    }
    return false;
}

static int get_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out, bool *present, oa_error *err) {
    json_t *v = field(o, k);
    *present = v != NULL;
    if (!v) return 0;
    if (!as_int(v, out)) FAIL(GW_ERR_WRONG_TYPE, k, "'%s' must be an integer", k);
    if (*out < lo || *out > hi)
        FAIL(GW_ERR_OUT_OF_RANGE, k, "'%s' must be in [%lld, %lld], got %lld", k, (long long)lo, (long long)hi,
             (long long)*out);
    return 0;
}

static int get_bool(json_t *o, const char *k, bool *out, oa_error *err) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) FAIL(GW_ERR_WRONG_TYPE, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

#define OOM()                                                                                                       \
    do {                                                                                                            \
        err->status = 500;                                                                                          \
        err->code = GW_ERR_INTERNAL;                                                                                \
        snprintf(err->message, sizeof err->message, "out of memory");                                               \
        return -1;                                                                                                  \
    } while (0)

/* Fields specd cannot honour: refused rather than silently ignored. */
static int check_unsupported(json_t *o, bool chat, oa_error *err) {
    int64_t i;
    json_t *v;
    if ((v = field(o, "best_of")) && (!as_int(v, &i) || i != 1))
        FAIL(OA_ERR_UNSUPPORTED, "best_of", "'best_of' must be 1");
    if ((v = field(o, "echo")) && !json_is_false(v)) FAIL(OA_ERR_UNSUPPORTED, "echo", "'echo' is not supported");
    if (!chat && (v = field(o, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "top_logprobs", "'top_logprobs' is a chat field: completions take 'logprobs': n");
    if ((v = field(o, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "suffix", "'suffix' is not supported");
    if ((v = field(o, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "functions", "'functions' (function calling) is not supported");
    (void)chat; /* response_format and grammar: parse_constraint */
    return 0;
}

static int parse_prompt(json_t *o, oa_request *r, oa_error *err) {
    json_t *v = field(o, "prompt");
    if (!v) FAIL(GW_ERR_MISSING_FIELD, "prompt", "'prompt' is required");
    if (json_is_array(v)) {
        if (json_array_size(v) != 1 || !json_is_string(json_array_get(v, 0)))
            FAIL(json_array_size(v) == 1 ? GW_ERR_WRONG_TYPE : OA_ERR_UNSUPPORTED, "prompt",
                 "'prompt' must be a string or an array of exactly one string (batches and token ids are not "
                 "supported)");
        v = json_array_get(v, 0);
    } else if (!json_is_string(v)) {
        FAIL(GW_ERR_WRONG_TYPE, "prompt", "'prompt' must be a string");
    }
    if (json_string_length(v) == 0) FAIL(GW_ERR_OUT_OF_RANGE, "prompt", "'prompt' must not be empty");
    if (memchr(json_string_value(v), 0, json_string_length(v)))
        FAIL(GW_ERR_OUT_OF_RANGE, "prompt", "'prompt' must not contain NUL characters");
    if (!(r->prompt = dupn(json_string_value(v), json_string_length(v)))) OOM();
    return 0;
}

/* content: a string, null (assistant only) or an array of text parts (joined by "\n"). */
static int message_content(json_t *c, int i, bool assistant, char **out, oa_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c) {
        if (!assistant) FAIL(GW_ERR_MISSING_FIELD, param, "'%s' is required", param);
        *out = dupn("", 0);
    } else if (json_is_string(c)) {
        if (memchr(json_string_value(c), 0, json_string_length(c)))
            FAIL(GW_ERR_OUT_OF_RANGE, param, "'%s' must not contain NUL characters", param);
        *out = dupn(json_string_value(c), json_string_length(c));
    } else if (json_is_array(c)) {
        size_t total = 0, k;
        json_t *part;
        json_array_foreach(c, k, part) {
            json_t *ty = json_is_object(part) ? json_object_get(part, "type") : NULL;
            json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") != 0)
                FAIL(OA_ERR_UNSUPPORTED, param, "'%s[%zu]': only {\"type\":\"text\",\"text\":...} parts are supported",
                     param, k);
            if (!json_is_string(tx)) FAIL(GW_ERR_WRONG_TYPE, param, "'%s[%zu].text' must be a string", param, k);
            if (memchr(json_string_value(tx), 0, json_string_length(tx)))
                FAIL(GW_ERR_OUT_OF_RANGE, param, "'%s[%zu].text' must not contain NUL characters", param, k);
            total += json_string_length(tx) + 1;
        }
        char *s = malloc(total + 1);
        if (!s) OOM();
        size_t n = 0;
        json_array_foreach(c, k, part) {
            json_t *tx = json_object_get(part, "text");
            if (k) s[n++] = '\n';
            memcpy(s + n, json_string_value(tx), json_string_length(tx));
            n += json_string_length(tx);
        }
        s[n] = '\0';
        *out = s;
    } else {
        FAIL(GW_ERR_WRONG_TYPE, param, "'%s' must be a string or an array of text parts", param);
    }
    if (!*out) OOM();
    return 0;
}

static int parse_messages_each(json_t *v, size_t n, oa_request *r, json_t *tmsgs, oa_error *err);

static int parse_messages(json_t *o, oa_request *r, oa_error *err) {
    json_t *v = field(o, "messages");
    if (!v) FAIL(GW_ERR_MISSING_FIELD, "messages", "'messages' is required");
    if (!json_is_array(v)) FAIL(GW_ERR_WRONG_TYPE, "messages", "'messages' must be an array");
    size_t n = json_array_size(v);
    if (n == 0) FAIL(GW_ERR_OUT_OF_RANGE, "messages", "'messages' must not be empty");
    if (n > 4096) FAIL(GW_ERR_OUT_OF_RANGE, "messages", "'messages' has %zu entries, at most 4096", n);
    if (!(r->messages = calloc(n, sizeof(chat_msg)))) OOM();
    json_t *tmsgs = json_array();
    if (!tmsgs) OOM();
    int rc = parse_messages_each(v, n, r, tmsgs, err);
    if (!rc && !(r->messages_json = json_dumps(tmsgs, JSON_COMPACT | JSON_PRESERVE_ORDER))) rc = -1, snprintf(err->message, sizeof err->message, "out of memory"), err->status = 500;
    json_decref(tmsgs);
    return rc;
}

static int parse_messages_each(json_t *v, size_t n, oa_request *r, json_t *tmsgs, oa_error *err) {
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) FAIL(GW_ERR_WRONG_TYPE, param, "'%s' must be an object", param);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        json_t *role = field(m, "role");
        if (!role) FAIL(GW_ERR_MISSING_FIELD, param, "'%s' is required", param);
        if (!json_is_string(role)) FAIL(GW_ERR_WRONG_TYPE, param, "'%s' must be a string", param);
        const char *rs = json_string_value(role), *canon;
        if (!strcmp(rs, "system") || !strcmp(rs, "developer")) canon = "system";
        else if (!strcmp(rs, "user")) canon = "user";
        else if (!strcmp(rs, "assistant")) canon = "assistant";
        else if (!strcmp(rs, "tool")) canon = "tool";
        else FAIL(GW_ERR_OUT_OF_RANGE, param, "'%s' must be system, developer, user, assistant or tool", param);
        r->messages[i].role = canon; /* static storage */
        char *content = NULL;
        json_t *calls = field(m, "tool_calls");
        if (message_content(field(m, "content"), (int)i, canon[0] == 'a', &content, err)) return -1;
        r->messages[i].content = content;
        r->n_messages = (int)i + 1;
        /* the message as the template sees it */
        json_t *tm = json_pack("{s:s,s:s}", "role", canon, "content", content);
        if (!tm) OOM();
        json_array_append_new(tmsgs, tm);
        if (calls && canon[0] == 'a') {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(calls)) FAIL(GW_ERR_WRONG_TYPE, param, "'%s' must be an array", param);
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                json_t *nm = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
                if (!json_is_string(nm) || (args && !json_is_string(args) && !json_is_object(args)))
                    FAIL(GW_ERR_WRONG_TYPE, param, "'%s[%zu]' must be {id, type: \"function\", function: {name, arguments}}",
                         param, k);
            }
            json_object_set(tm, "tool_calls", calls);
            if (!field(m, "content")) json_object_set_new(tm, "content", json_null());
        }
        json_t *tcid = field(m, "tool_call_id"), *nm = field(m, "name");
        if (json_is_string(tcid)) json_object_set(tm, "tool_call_id", tcid);
        if (json_is_string(nm)) json_object_set(tm, "name", nm);
    }
    return 0;
}

/* tools, tool_choice, parallel_tool_calls (rendered by the template; the
 * choice decides the grammar at rendering, oa_render_prompt_tmpl). */
static int parse_tools(json_t *o, oa_request *r, oa_error *err) {
    json_t *tools = field(o, "tools"), *tc = field(o, "tool_choice"), *par = field(o, "parallel_tool_calls");
    r->parallel_tool_calls = true;
    r->tool_format = -1;
    if (par && !json_is_boolean(par)) FAIL(GW_ERR_WRONG_TYPE, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (par) r->parallel_tool_calls = json_is_true(par);
    if (tools) {
        if (!json_is_array(tools)) FAIL(GW_ERR_WRONG_TYPE, "tools", "'tools' must be an array");
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            json_t *fn = json_object_get(t, "function"), *ty = json_object_get(t, "type");
            if (!json_is_object(t) || (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function"))) ||
                !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
                (json_object_get(fn, "parameters") && !json_is_object(json_object_get(fn, "parameters"))))
                FAIL(GW_ERR_WRONG_TYPE, "tools", "'tools[%zu]' must be {type: \"function\", function: {name, description, "
                     "parameters: a JSON Schema object}}", k);
        }
        if (json_array_size(tools) && !(r->tools_json = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER))) OOM();
    }
    if (tc) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "auto")) r->tool_choice = OA_TOOLS_AUTO;
            else if (!strcmp(s, "none")) r->tool_choice = OA_TOOLS_NONE;
            else if (!strcmp(s, "required")) r->tool_choice = OA_TOOLS_REQUIRED;
            else FAIL(GW_ERR_OUT_OF_RANGE, "tool_choice", "'tool_choice' must be auto, none, required or {type: function, function: {name}}");
        } else {
            const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (!name) FAIL(GW_ERR_WRONG_TYPE, "tool_choice", "'tool_choice' must be auto, none, required or {type: function, function: {name}}");
            r->tool_choice = OA_TOOLS_NAMED;
            if (!(r->tool_name = dupn(name, strlen(name)))) OOM();
        }
        if (r->tool_choice >= OA_TOOLS_REQUIRED && !r->tools_json)
            FAIL(GW_ERR_OUT_OF_RANGE, "tool_choice", "'tool_choice' %s needs 'tools'", r->tool_choice == OA_TOOLS_NAMED ? "naming a function" : "required");
        if (r->tool_choice >= OA_TOOLS_REQUIRED && (field(o, "response_format") || field(o, "grammar")))
            FAIL(GW_ERR_OUT_OF_RANGE, "tool_choice", "'tool_choice' %s cannot be combined with response_format or grammar",
                 r->tool_choice == OA_TOOLS_NAMED ? "naming a function" : "required");
    }
    return 0;
}

static int parse_stop(json_t *o, oa_request *r, oa_error *err) {
    json_t *v = field(o, "stop");
    if (!v) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    json_t *arr[ENGINE_MAX_STOP];
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > ENGINE_MAX_STOP) FAIL(GW_ERR_OUT_OF_RANGE, "stop", "'stop' has %zu strings, at most %d", n, ENGINE_MAX_STOP);
        for (size_t i = 0; i < n; i++) arr[i] = json_array_get(v, i);
        items = arr;
    }
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(items[i])) FAIL(GW_ERR_WRONG_TYPE, "stop", "'stop' must be a string or an array of strings");
        size_t l = json_string_length(items[i]);
        if (l == 0 || l >= ENGINE_STOP_LEN || memchr(json_string_value(items[i]), 0, l))
            FAIL(GW_ERR_OUT_OF_RANGE, "stop", "each 'stop' string must be 1..%d bytes without NUL", ENGINE_STOP_LEN - 1);
        if (!(r->stop_owned[i] = dupn(json_string_value(items[i]), l))) OOM();
        r->req.stop[i] = r->stop_owned[i];
    }
    return 0;
}

/* A refused shared field (fields.h) as a 400. */
static int field_fail(const gw_field_error *fe, oa_error *err) {
    err->status = 400;
    err->code = fe->code;
    snprintf(err->param, sizeof err->param, "%s", fe->param);
    snprintf(err->message, sizeof err->message, "%s", fe->message);
    return -1;
}

static int parse_speculation(json_t *o, const gw_limits *lim, oa_request *r, oa_error *err) {
    json_t *s = field(o, "speculation");
    if (!s) return 0;
    if (!json_is_object(s)) FAIL(GW_ERR_WRONG_TYPE, "speculation", "'speculation' must be an object");
    gw_field_target t = {.req = &r->req};
    gw_field_error fe;
    return gw_fields_parse(s, GW_FIELDS_SPECULATION, lim, &t, &fe) ? field_fail(&fe, err) : 0;
}

/* response_format ({"type":"text"|"json_object"|"json_schema","json_schema":
 * {"name","schema","strict"}}) or grammar (GBNF text) into r->grammar, checked
 * by compiling it: a bad schema or grammar is a 400 with the reason. */
static int parse_constraint(json_t *o, const gw_limits *lim, oa_request *r, oa_error *err) {
    json_t *rf = field(o, "response_format"), *g = field(o, "grammar");
    char msg[170]; /* fits the error message after its prefix: js_schema_to_gbnf shortens the path, not the reason */
    js_limits jl = js_default_limits();
    if (lim->schema_max_enum > 0) jl.max_enum = lim->schema_max_enum;
    if (lim->grammar_max_bytes > 0) jl.max_bytes = lim->grammar_max_bytes;
    char *text = NULL;
    const char *param = "grammar";
    if (rf) {
        if (!json_is_object(rf)) FAIL(GW_ERR_WRONG_TYPE, "response_format", "'response_format' must be an object");
        json_t *t = json_object_get(rf, "type");
        const char *ts = json_is_string(t) ? json_string_value(t) : NULL;
        if (!ts) FAIL(GW_ERR_MISSING_FIELD, "response_format.type", "'response_format.type' (a string) is required");
        if (!strcmp(ts, "json_object")) {
            if (!(text = dupn(grammar_json_gbnf(), strlen(grammar_json_gbnf())))) OOM();
            param = "response_format";
        } else if (!strcmp(ts, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            if (!json_is_object(js))
                FAIL(GW_ERR_WRONG_TYPE, "response_format.json_schema", "'response_format.json_schema' must be an object");
            json_t *sc = json_object_get(js, "schema");
            if (!sc) FAIL(GW_ERR_MISSING_FIELD, "response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
            if (!(text = js_schema_to_gbnf_limited(sc, &jl, msg, sizeof msg)))
                FAIL(GW_ERR_INVALID_GRAMMAR, "response_format.json_schema.schema", "JSON Schema not supported: %s", msg);
            param = "response_format.json_schema.schema";
        } else if (strcmp(ts, "text") != 0) {
            FAIL(OA_ERR_UNSUPPORTED, "response_format.type",
                 "'response_format.type' must be text, json_object or json_schema, got '%.40s'", ts);
        }
    }
    if (g) {
        if (!json_is_string(g)) {
            free(text);
            FAIL(GW_ERR_WRONG_TYPE, "grammar", "'grammar' must be a string (GBNF)");
        }
        if (text) {
            free(text);
            FAIL(GW_ERR_OUT_OF_RANGE, "grammar", "'grammar' cannot be combined with a JSON 'response_format'");
        }
        if (json_string_length(g) == 0)
            FAIL(GW_ERR_INVALID_GRAMMAR, "grammar", "'grammar' is empty (leave it out for unconstrained output)");
        if (!(text = dupn(json_string_value(g), json_string_length(g)))) OOM();
    }
    if (!text) return 0;
    (void)param; /* compiled off this thread: the engine's compile worker answers a bad one (invalid_grammar) */
    r->grammar = text;
    r->req.grammar = text;
    return 0;
}

/* chat: logprobs (bool) and top_logprobs (0..20, needs logprobs true);
 * completions: logprobs (0..20 alternatives; null/absent = none). */
static int parse_logprobs(json_t *o, bool chat, oa_request *r, oa_error *err) {
    int64_t i;
    bool present;
    if (chat) {
        json_t *v = field(o, "logprobs");
        if (v && !json_is_boolean(v)) FAIL(GW_ERR_WRONG_TYPE, "logprobs", "'logprobs' must be a boolean");
        r->req.logprobs = json_is_true(v);
        if (get_int(o, "top_logprobs", 0, SPEC_TOP_LOGPROBS, &i, &present, err)) return -1;
        if (present && i > 0 && !r->req.logprobs)
            FAIL(GW_ERR_OUT_OF_RANGE, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->req.top_logprobs = present ? (int)i : 0;
        return 0;
    }
    json_t *v = field(o, "logprobs");
    if (v && json_is_boolean(v)) { /* a chat-style flag sent to completions: on with no alternatives */
        r->req.logprobs = json_is_true(v);
        return 0;
    }
    if (get_int(o, "logprobs", 0, SPEC_TOP_LOGPROBS, &i, &present, err)) return -1;
    r->req.logprobs = present;
    r->req.top_logprobs = present ? (int)i : 0;
    return 0;
}

static int parse_object(bool chat, json_t *o, const gw_limits *lim, oa_request *r, oa_error *err) {
    json_t *v;
    if (check_unsupported(o, chat, err)) return -1;
    if ((v = field(o, "model")) && !json_is_string(v)) FAIL(GW_ERR_WRONG_TYPE, "model", "'model' must be a string");
    if (!(r->model = v ? dupn(json_string_value(v), json_string_length(v)) : dupn("", 0))) OOM();
    if (chat ? parse_messages(o, r, err) : parse_prompt(o, r, err)) return -1;
    if (chat ? parse_tools(o, r, err) : 0) return -1;
    if (!chat && field(o, "tools") && !(json_is_array(field(o, "tools")) && !json_array_size(field(o, "tools"))))
        FAIL(OA_ERR_UNSUPPORTED, "tools", "'tools' is a chat field");

    /* the shared fields (max_tokens ... seed, prefix_cache); chat may name max_tokens max_completion_tokens */
    gw_field_target t = {.req = &r->req};
    gw_field_error fe;
    if (gw_fields_parse(o, GW_FIELDS_TOP, lim, &t, &fe)) return field_fail(&fe, err);
    if (gw_fields_parse(o, GW_FIELDS_OPENAI, lim, &t, &fe)) return field_fail(&fe, err);
    r->n = t.n;
    if (chat && !field(o, "max_tokens") &&
        gw_field_parse_one("max_tokens", "max_completion_tokens", field(o, "max_completion_tokens"), lim, &t, &fe))
        return field_fail(&fe, err);
    r->seed_set = t.seed_set;
    /* penalties and logit_bias: after the defaults gw_fields_parse set */
    if (gw_penalties_parse(o, &r->req, &r->logit_bias, &fe)) return field_fail(&fe, err);
    if (parse_stop(o, r, err)) return -1;
    if (get_bool(o, "stream", &r->stream, err)) return -1;
    if ((v = field(o, "stream_options"))) {
        if (!json_is_object(v)) FAIL(GW_ERR_WRONG_TYPE, "stream_options", "'stream_options' must be an object");
        json_t *u = field(v, "include_usage");
        if (u && !json_is_boolean(u))
            FAIL(GW_ERR_WRONG_TYPE, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(u);
    }
    if (parse_speculation(o, lim, r, err)) return -1;
    if (parse_constraint(o, lim, r, err)) return -1;
    if (parse_logprobs(o, chat, r, err)) return -1;
    if ((v = field(o, "content_type"))) {
        if (!json_is_string(v)) FAIL(GW_ERR_WRONG_TYPE, "content_type", "'content_type' must be a string");
        size_t l = json_string_length(v);
        if (l == 0 || l >= GW_CONTENT_TYPE_MAX || strspn(json_string_value(v),
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != l)
            FAIL(GW_ERR_OUT_OF_RANGE, "content_type", "'content_type' must be 1..%d bytes of [A-Za-z0-9_.-]",
                 GW_CONTENT_TYPE_MAX - 1);
        if (!(r->content_type = dupn(json_string_value(v), l))) OOM();
        r->req.content_type = r->content_type;
    }
    r->req.prompt_text = r->prompt;
    r->req.special_spans = NULL; /* a completion prompt is plain text: never special tokens */
    r->req.n_special_spans = 0;
    r->req.n_prompt = 0;
    return 0;
}

int oa_parse(bool chat, const char *body, size_t len, const gw_limits *lim, oa_request *out, oa_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->chat = chat;
    out->tool_format = -1; /* completions have no tools: their replies are never parsed for calls */
    if (lim->max_message_bytes > 0 && len > (size_t)lim->max_message_bytes) {
        err->status = 413;
        err->code = GW_ERR_MESSAGE_TOO_LARGE;
        snprintf(err->message, sizeof err->message, "request body of %zu bytes exceeds the limit of %d", len,
                 lim->max_message_bytes);
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    int rc;
    if (!root) {
        err->status = 400;
        err->code = GW_ERR_INVALID_JSON;
        snprintf(err->message, sizeof err->message, "invalid JSON at line %d column %d: %s", je.line, je.column,
                 je.text);
        rc = -1;
    } else if (!json_is_object(root)) {
        err->status = 400;
        err->code = GW_ERR_WRONG_TYPE;
        snprintf(err->message, sizeof err->message, "the request body must be a JSON object");
        rc = -1;
    } else {
        rc = parse_object(chat, root, lim, out, err);
    }
    json_decref(root);
    if (rc) oa_request_free(out);
    return rc;
}

uint64_t oa_choice_seed(uint64_t seed, int i) { return seed + (uint64_t)i; }

void oa_request_free(oa_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt);
    for (int i = 0; i < r->n_messages; i++) free((char *)r->messages[i].content);
    free(r->messages);
    free(r->rendered);
    free(r->spans);
    for (int i = 0; i < ENGINE_MAX_STOP; i++) free(r->stop_owned[i]);
    free(r->content_type);
    free(r->grammar);
    free(r->logit_bias);
    free(r->messages_json);
    free(r->tools_json);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}

int oa_render_prompt(oa_request *r, chat_template_kind k, const char *bos_text, char *err, size_t errlen) {
    if (!r->chat) return 0;
    int need = chat_render(k, r->messages, r->n_messages, true, bos_text, NULL, 0);
    int max_spans = 2 * r->n_messages + 2, n_spans = 0;
    char *buf = malloc((size_t)need + 1);
    tok_span *spans = malloc(sizeof *spans * (size_t)max_spans);
    if (!buf || !spans) {
        free(buf);
        free(spans);
        snprintf(err, errlen, "out of memory rendering %d bytes of chat prompt", need);
        return -1;
    }
    /* only the template's markup may spell special tokens: message content is plain text */
    chat_render_spans(k, r->messages, r->n_messages, true, bos_text, buf, (size_t)need + 1, spans, max_spans,
                      &n_spans);
    free(r->rendered);
    free(r->spans);
    r->rendered = buf;
    r->spans = spans;
    r->req.prompt_text = buf;
    r->req.special_spans = spans;
    r->req.n_special_spans = n_spans < max_spans ? n_spans : max_spans;
    return 0;
}

int oa_render_prompt_tmpl(oa_request *r, const engine *e, char *err, size_t errlen) {
    if (!r->chat) return 0;
    char *out = NULL;
    size_t len = 0;
    tok_span *spans = NULL;
    int ns = 0;
    const char *tj = r->tools_json;
    if (engine_chat_apply(e, r->messages_json, strlen(r->messages_json), tj, tj ? strlen(tj) : 0, true, &out, &len, &spans,
                        &ns, err, errlen) != 0)
        return -1;
    free(r->rendered);
    free(r->spans);
    r->rendered = out;
    r->spans = spans;
    r->req.prompt_text = out;
    r->req.special_spans = spans;
    r->req.n_special_spans = ns;
    r->tool_format = tj && r->tool_choice != OA_TOOLS_NONE ? (int)engine_chat_tool_format(e) : -1;
    if (tj && r->tool_choice >= OA_TOOLS_REQUIRED) {
        json_t *tools = json_loads(tj, 0, NULL);
        char *g = tools ? tc_grammar(engine_chat_tool_format(e), tools, r->tool_choice == OA_TOOLS_NAMED ? r->tool_name : NULL,
                                     r->parallel_tool_calls, err, errlen) : NULL;
        json_decref(tools);
        if (!g) return -1;
        free(r->grammar);
        r->grammar = g;
        r->req.grammar = g;
    }
    return 0;
}
