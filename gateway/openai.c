/* openai.c — OpenAI-compatible request parsing and response building with
 * jansson (see openai.h). Per request, not per token: allocation is fine here,
 * except that stream chunks are one json_dumps each. */
#include "gateway/openai.h"

#include "gateway/fields.h"
#include "engine/grammar.h"
#include "gateway/json_schema.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- UTF-8 ------------------------------------------------------------------- */

size_t oa_utf8_sanitize(char *out, const char *in, size_t len) {
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0, o = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        int need;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) need = 2, lo = 0xA0;
        else if (c == 0xED) need = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF) need = 2;
        else if (c == 0xF0) need = 3, lo = 0x90;
        else if (c == 0xF4) need = 3, hi = 0x8F;
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else need = 0;
        size_t j = i + 1;
        int got = 0;
        while (need && got < need && j < len) {
            unsigned d = s[j];
            if (got == 0 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
            got++, j++;
        }
        if (need && got == need) {
            memcpy(out + o, s + i, (size_t)need + 1);
            o += (size_t)need + 1;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3); /* the maximal subpart s[i..j) */
            o += 3;
        }
        i = j;
    }
    return o;
}

/* A jansson string from arbitrary bytes. */
static json_t *jstr(const char *s, size_t len) {
    if (!s) return json_string("");
    char stackbuf[1024];
    char *buf = 3 * len <= sizeof(stackbuf) ? stackbuf : malloc(3 * len);
    if (!buf) return NULL;
    size_t n = oa_utf8_sanitize(buf, s, len);
    json_t *j = json_stringn_nocheck(buf, n);
    if (buf != stackbuf) free(buf);
    return j;
}

static json_t *jcstr(const char *s) { return jstr(s, s ? strlen(s) : 0); }
static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* Dumps and frees j; NULL on failure. */
static char *dump(json_t *j, size_t *len) {
    if (!j) return NULL;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s && len) *len = strlen(s);
    return s;
}

/* ---- errors ------------------------------------------------------------------- */

static const char *type_of(int status) {
    if (status == 401) return "authentication_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

static json_t *error_object(const oa_error *e) {
    json_t *o = json_object();
    json_object_set_new(o, "message", jcstr(e->message));
    json_object_set_new(o, "type", json_string(e->type ? e->type : type_of(e->status)));
    json_object_set_new(o, "param", e->param[0] ? jcstr(e->param) : json_null());
    json_object_set_new(o, "code", e->code ? jcstr(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", o);
    return root;
}

char *oa_error_json(const oa_error *e) { return dump(error_object(e), NULL); }

char *oa_simple_error(int status, const char *code, const char *message) {
    oa_error e = {.status = status, .code = code};
    snprintf(e.message, sizeof e.message, "%s", message ? message : "");
    return oa_error_json(&e);
}

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
    if ((v = field(o, "tools")) && !(json_is_array(v) && json_array_size(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "tools", "'tools' (function calling) is not supported");
    if ((v = field(o, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "functions", "'functions' (function calling) is not supported");
    if ((v = field(o, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        FAIL(OA_ERR_UNSUPPORTED, "logit_bias", "'logit_bias' is not supported");
    static const char *const pen[] = {"presence_penalty", "frequency_penalty"};
    for (int k = 0; k < 2; k++)
        if ((v = field(o, pen[k])) && !(json_is_number(v) && json_number_value(v) == 0))
            FAIL(OA_ERR_UNSUPPORTED, pen[k], "'%s' is not supported (only 0)", pen[k]);
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

static int parse_messages(json_t *o, oa_request *r, oa_error *err) {
    json_t *v = field(o, "messages");
    if (!v) FAIL(GW_ERR_MISSING_FIELD, "messages", "'messages' is required");
    if (!json_is_array(v)) FAIL(GW_ERR_WRONG_TYPE, "messages", "'messages' must be an array");
    size_t n = json_array_size(v);
    if (n == 0) FAIL(GW_ERR_OUT_OF_RANGE, "messages", "'messages' must not be empty");
    if (n > 4096) FAIL(GW_ERR_OUT_OF_RANGE, "messages", "'messages' has %zu entries, at most 4096", n);
    if (!(r->messages = calloc(n, sizeof(chat_msg)))) OOM();
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
        else FAIL(GW_ERR_OUT_OF_RANGE, param, "'%s' must be system, developer, user or assistant", param);
        r->messages[i].role = canon; /* static storage */
        char *content = NULL;
        if (message_content(field(m, "content"), (int)i, canon[0] == 'a', &content, err)) return -1;
        r->messages[i].content = content;
        r->n_messages = (int)i + 1;
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
static int parse_constraint(json_t *o, oa_request *r, oa_error *err) {
    json_t *rf = field(o, "response_format"), *g = field(o, "grammar");
    char msg[200];
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
            if (!(text = js_schema_to_gbnf(sc, msg, sizeof msg)))
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
        if (json_string_length(g) > 0 && !(text = dupn(json_string_value(g), json_string_length(g)))) OOM();
    }
    if (!text) return 0;
    grammar *gr = grammar_parse(text, strlen(text), msg, sizeof msg);
    if (!gr) {
        free(text);
        FAIL(GW_ERR_INVALID_GRAMMAR, param, "invalid grammar: %s", msg);
    }
    grammar_destroy(gr);
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
    if (parse_constraint(o, r, err)) return -1;
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

/* ---- responses --------------------------------------------------------------------- */

const char *oa_finish_reason(engine_finish f) { return gw_finish_name(f); }

void *oa_speculation_object(const engine_event *ev) {
    const spec_stats *st = &ev->st;
    json_t *o = json_object();
    json_object_set_new(o, "alpha", jnum(spec_stats_alpha(st)));
    json_object_set_new(o, "mean_accepted", jnum(spec_stats_mean_accepted(st)));
    json_object_set_new(o, "gamma_used", jnum(st->verify_steps ? (double)st->drafted / (double)st->verify_steps : 0));
    json_object_set_new(o, "tokens_per_pass", jnum(spec_stats_tokens_per_pass(st)));
    json_object_set_new(o, "verify_steps", json_integer((json_int_t)st->verify_steps));
    json_object_set_new(o, "plain_steps", json_integer((json_int_t)st->plain_steps));
    json_object_set_new(o, "drafted", json_integer((json_int_t)st->drafted));
    json_object_set_new(o, "accepted", json_integer((json_int_t)st->accepted));
    json_object_set_new(o, "rejections", json_integer((json_int_t)st->rejections));
    int last = 0;
    for (int i = 0; i < GAMMA_MAX; i++)
        if (st->pos_reached[i]) last = i + 1;
    json_t *pp = json_array();
    for (int i = 0; i < last; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "position", json_integer(i + 1));
        json_object_set_new(p, "drafted", json_integer((json_int_t)st->pos_reached[i]));
        json_object_set_new(p, "accepted", json_integer((json_int_t)st->pos_accepted[i]));
        json_array_append_new(pp, p);
    }
    json_object_set_new(o, "per_position", pp);
    json_object_set_new(o, "fallbacks", json_integer((json_int_t)st->fallbacks));
    json_object_set_new(o, "kv_resets", json_integer((json_int_t)st->kv_resets));
    json_object_set_new(o, "ttft_ms", jnum(ev->ttft_ms));
    json_object_set_new(o, "tpot_ms", jnum(ev->tpot_ms));
    return o;
}

static json_t *usage_object(int prompt_tokens, int completion_tokens) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)prompt_tokens + completion_tokens));
    return u;
}

/* {"id","object","created","model","choices":[choice]} */
static json_t *envelope(bool chat, bool chunk, const char *id, const char *model, json_t *choice) {
    char full[160];
    snprintf(full, sizeof full, "%s%s", chat ? "chatcmpl-" : "cmpl-", id ? id : "");
    json_t *o = json_object();
    json_object_set_new(o, "id", jcstr(full));
    json_object_set_new(o, "object",
                        json_string(!chat ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion"));
    json_object_set_new(o, "created", json_integer((json_int_t)time(NULL)));
    json_object_set_new(o, "model", jcstr(model));
    json_t *choices = json_array();
    if (choice) json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return o;
}

static json_t *choice_object_lp(bool chat, bool chunk, int index, const char *text, size_t len, const char *finish,
                                json_t *lp);
static json_t *choice_object(bool chat, bool chunk, int index, const char *text, size_t len, const char *finish) {
    return choice_object_lp(chat, chunk, index, text, len, finish, NULL);
}

static json_t *choice_object_lp(bool chat, bool chunk, int index, const char *text, size_t len, const char *finish,
                                json_t *lp) {
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(index));
    if (!chat) {
        json_object_set_new(c, "text", jstr(text, len));
    } else {
        json_t *m = json_object();
        if (!chunk || text) json_object_set_new(m, "role", json_string("assistant"));
        if (!chunk || text) json_object_set_new(m, "content", jstr(text, len));
        json_object_set_new(c, chunk ? "delta" : "message", m);
    }
    json_object_set_new(c, "logprobs", lp ? lp : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

char *oa_response_json(bool chat, const char *id, const char *model, const char *text, size_t len,
                       const engine_event *ev, int prompt_tokens) {
    return oa_response_json_lp(chat, id, model, text, len, ev, prompt_tokens, NULL);
}

char *oa_response_json_lp(bool chat, const char *id, const char *model, const char *text, size_t len,
                          const engine_event *ev, int prompt_tokens, void *logprobs) {
    oa_choice one = {.text = text, .len = len, .fin = ev, .logprobs = logprobs};
    return oa_response_json_n(chat, id, model, &one, 1, prompt_tokens);
}

char *oa_response_json_n(bool chat, const char *id, const char *model, oa_choice *ch, int n, int prompt_tokens) {
    json_t *o = envelope(chat, false, id, model, NULL), *choices = json_object_get(o, "choices");
    int completion = 0;
    for (int i = 0; i < n; i++) {
        json_t *c = choice_object_lp(chat, false, i, ch[i].text ? ch[i].text : "", ch[i].text ? ch[i].len : 0,
                                     oa_finish_reason(ch[i].fin->reason), ch[i].logprobs);
        ch[i].logprobs = NULL; /* handed over */
        if (n > 1) json_object_set_new(c, "speculation", oa_speculation_object(ch[i].fin));
        json_array_append_new(choices, c);
        completion += ch[i].fin->completion_tokens;
    }
    json_object_set_new(o, "usage", usage_object(prompt_tokens, completion));
    if (n == 1) json_object_set_new(o, "speculation", oa_speculation_object(ch[0].fin));
    return dump(o, NULL);
}

/* "data: " json "\n\n" [+ tail] */
static char *sse(json_t *o, const char *tail, size_t *out_len) {
    size_t jl;
    char *js = dump(o, &jl);
    if (!js) return NULL;
    size_t tl = tail ? strlen(tail) : 0, n = 6 + jl + 2 + tl;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, js, jl);
        memcpy(s + 6 + jl, "\n\n", 2);
        if (tl) memcpy(s + 8 + jl, tail, tl);
        s[n] = '\0';
        if (out_len) *out_len = n;
    }
    free(js);
    return s;
}

char *oa_stream_chunk(bool chat, const char *id, const char *model, const char *text, size_t len, size_t *out_len) {
    return oa_stream_chunk_lp(chat, id, model, text, len, NULL, out_len);
}

char *oa_stream_chunk_lp(bool chat, const char *id, const char *model, const char *text, size_t len, void *logprobs,
                         size_t *out_len) {
    return oa_stream_chunk_ix(chat, id, model, 0, text, len, logprobs, out_len);
}

char *oa_stream_chunk_ix(bool chat, const char *id, const char *model, int index, const char *text, size_t len,
                         void *logprobs, size_t *out_len) {
    json_t *o = envelope(chat, true, id, model,
                         choice_object_lp(chat, true, index, text ? text : "", text ? len : 0, NULL, logprobs));
    return sse(o, NULL, out_len);
}

/* ---- logprobs ------------------------------------------------------------------ */

void *oa_logprobs_new(bool chat) {
    json_t *o = json_object();
    if (chat) {
        json_object_set_new(o, "content", json_array());
        json_object_set_new(o, "refusal", json_null());
    } else {
        json_object_set_new(o, "tokens", json_array());
        json_object_set_new(o, "token_logprobs", json_array());
        json_object_set_new(o, "top_logprobs", json_array());
        json_object_set_new(o, "text_offset", json_array());
    }
    return o;
}

void oa_logprobs_free(void *lp) { json_decref(lp); }

/* -inf (a token the mask or the model rules out) has no JSON spelling: the
 * API's convention is -9999.0. */
static json_t *jlp(float x) { return json_real(isfinite(x) ? (double)x : -9999.0); }

/* {"token","logprob","bytes":[...]} of one token (chat) */
static json_t *chat_token(const char *piece, int n, float lp) {
    json_t *t = json_object(), *b = json_array();
    json_object_set_new(t, "token", jstr(piece, (size_t)n));
    json_object_set_new(t, "logprob", jlp(lp));
    for (int i = 0; i < n; i++) json_array_append_new(b, json_integer((uint8_t)piece[i]));
    json_object_set_new(t, "bytes", b);
    return t;
}

static int piece_of(const tokenizer *t, int32_t id, char *buf, size_t n) {
    int k = tok_piece(t, id, buf, n);
    return k < 0 ? 0 : k;
}

void oa_logprobs_add(void *lp_obj, bool chat, const tokenizer *t, const engine_event *ev, size_t *text_offset) {
    json_t *o = lp_obj;
    if (!o || !ev->has_logprobs) return;
    char piece[256], alt[256];
    for (int i = 0; i < ev->n_tokens; i++) {
        int32_t id = ev->tokens[i];
        if (tok_is_eog(t, id)) continue; /* the end-of-generation token is not part of the text */
        const spec_logprob *l = &ev->lp[i];
        int n = piece_of(t, id, piece, sizeof piece);
        if (chat) {
            json_t *e = chat_token(piece, n, l->logprob), *top = json_array();
            for (int k = 0; k < l->n_top; k++) {
                int m = piece_of(t, l->top_id[k], alt, sizeof alt);
                json_array_append_new(top, chat_token(alt, m, l->top_logprob[k]));
            }
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(json_object_get(o, "content"), e);
        } else {
            json_array_append_new(json_object_get(o, "tokens"), jstr(piece, (size_t)n));
            json_array_append_new(json_object_get(o, "token_logprobs"), jlp(l->logprob));
            json_t *top = json_object();
            for (int k = 0; k < l->n_top; k++) {
                int m = piece_of(t, l->top_id[k], alt, sizeof alt);
                char key[256];
                size_t kl = oa_utf8_sanitize(key, alt, (size_t)m < 80 ? (size_t)m : 80);
                key[kl] = 0;
                if (!json_object_get(top, key)) json_object_set_new(top, key, jlp(l->top_logprob[k]));
            }
            json_array_append_new(json_object_get(o, "top_logprobs"), top);
            json_array_append_new(json_object_get(o, "text_offset"), json_integer((json_int_t)*text_offset));
            *text_offset += (size_t)n;
        }
    }
}

/* A choice's finish chunk: empty text / delta, its finish_reason and speculation. */
static json_t *final_chunk(bool chat, const char *id, const char *model, int index, const engine_event *ev) {
    json_t *c = chat ? choice_object(true, true, index, NULL, 0, oa_finish_reason(ev->reason))
                     : choice_object(false, true, index, "", 0, oa_finish_reason(ev->reason));
    json_t *o = envelope(chat, true, id, model, c);
    json_object_set_new(o, "speculation", oa_speculation_object(ev));
    return o;
}

char *oa_stream_final(bool chat, const char *id, const char *model, const engine_event *ev, int prompt_tokens) {
    json_t *o = final_chunk(chat, id, model, 0, ev);
    json_object_set_new(o, "usage", usage_object(prompt_tokens, ev->completion_tokens));
    return sse(o, OA_SSE_DONE, NULL);
}

char *oa_stream_choice_final(bool chat, const char *id, const char *model, int index, const engine_event *ev) {
    return sse(final_chunk(chat, id, model, index, ev), NULL, NULL);
}

char *oa_stream_end(bool chat, const char *id, const char *model, bool include_usage, int prompt_tokens,
                    int completion_tokens) {
    if (!include_usage) return strdup(OA_SSE_DONE);
    json_t *o = envelope(chat, true, id, model, NULL);
    json_object_set_new(o, "usage", usage_object(prompt_tokens, completion_tokens));
    return sse(o, OA_SSE_DONE, NULL);
}

char *oa_stream_error(const char *message) {
    oa_error e = {.status = 500, .code = "engine_error"};
    snprintf(e.message, sizeof e.message, "%s", message ? message : "");
    return oa_stream_error_as(&e);
}

char *oa_stream_error_as(const oa_error *e) { return sse(error_object(e), OA_SSE_DONE, NULL); }

char *oa_models_list_json(const char *const *ids, int n) {
    json_t *data = json_array();
    json_int_t now = (json_int_t)time(NULL);
    for (int i = 0; i < n; i++) {
        if (!ids[i] || !ids[i][0]) continue;
        json_t *m = json_object();
        json_object_set_new(m, "id", jcstr(ids[i]));
        json_object_set_new(m, "object", json_string("model"));
        json_object_set_new(m, "created", json_integer(now));
        json_object_set_new(m, "owned_by", json_string("specd"));
        json_array_append_new(data, m);
    }
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return dump(o, NULL);
}

char *oa_models_json(const char *model_name) { return oa_models_list_json(&model_name, 1); }
