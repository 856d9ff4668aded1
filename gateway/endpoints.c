/* endpoints.c — the everyday endpoints beside completions, in llama.cpp's
 * server's request and response shapes so its clients work unchanged
 * (see endpoints.h). Loop thread. */
#include "gateway/endpoints.h"

#include "gateway/openai_response.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static char *err400(int *status, const char *code, const char *msg) {
    *status = 400;
    return oa_simple_error(400, code, msg);
}

/* Whether name is in the comma-separated list. */
static bool in_csv(const char *list, const char *name) {
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ') n--;
        if (n && n == nl && !strncmp(p, name, n)) return true;
        p += strcspn(p, ",");
    }
    return false;
}

bool gw_model_known(const gw_server *s, const char *name) {
    return !strcmp(name, s->cfg.model_name) || in_csv(s->cfg.model_aliases, name);
}

char *gw_models_json(const gw_server *s) {
    const char *ids[33];
    int n = 0;
    ids[n++] = s->cfg.model_name;
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", s->cfg.model_aliases);
    for (char *p = buf, *save = NULL, *t; n < 33 && (t = strtok_r(p, ",", &save)); p = NULL) {
        while (*t == ' ') t++;
        size_t k = strlen(t);
        while (k && t[k - 1] == ' ') t[--k] = 0;
        if (*t) ids[n++] = t;
    }
    return oa_models_list_json(ids, n);
}

char *gw_ep_model(const gw_server *s, const char *id, int *status) {
    if (!gw_model_known(s, id)) {
        char msg[300];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", id);
        *status = 404;
        return oa_simple_error(404, "model_not_found", msg);
    }
    *status = 200;
    return dump(json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "model", "created", (json_int_t)time(NULL),
                          "owned_by", "specd"));
}

char *gw_ep_health(const gw_server *s, int *status) {
    if (s->draining) {
        *status = 503;
        return dump(json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 503, "message", "the server is shutting down",
                              "type", "unavailable_error"));
    }
    *status = 200;
    return dump(json_pack("{s:s}", "status", "ok"));
}

char *gw_ep_props(const gw_server *s, int *status) {
    engine_info info;
    engine_get_info(s->eng, &info);
    const char *tmpl = chat_template_name((chat_template_kind)info.chat_template);
    json_t *o = json_pack(
        "{s:{s:i,s:{s:i}},s:i,s:s,s:s,s:s,s:s,s:{s:b,s:s,s:b,s:s,s:i,s:i,s:i},s:s,s:i}",
        "default_generation_settings", "n_ctx", info.max_ctx, "params", "n_predict",
        s->cfg.default_max_tokens > 0 ? s->cfg.default_max_tokens : -1, /* -1: to the end of the context (llama.cpp's) */
        "total_slots", s->cfg.max_requests_total,
        "model_path", s->cfg.model_name,
        "model_alias", s->cfg.model_aliases,
        "chat_template", tmpl,
        "chat_template_source", info.chat_template ? "detected from tokenizer.chat_template" : "none: a plain User:/Assistant: format",
        "speculation", "draft", info.has_draft, "draft_model", s->cfg.draft_name, "medusa", info.has_medusa,
        "tree", info.tree == 2 ? "auto" : info.tree == 3 ? "fixed" : "off",
        "gamma_min", info.gamma.gamma_min, "gamma_max", info.gamma.gamma_max, "gamma_default", info.gamma.gamma_default,
        "backend", info.backend_desc,
        "n_ctx", info.max_ctx);
    if (!o) {
        *status = 500;
        return oa_simple_error(500, "internal", "out of memory");
    }
    if (!info.chat_template)
        json_object_set_new(o, "warning", json_string("the model carries no known chat template: chat requests use a "
                                                      "plain User:/Assistant: format"));
    *status = 200;
    return dump(o);
}

/* A token's piece as llama.cpp gives it: a string when it is valid UTF-8,
 * else its bytes as numbers. */
static json_t *piece_json(const engine *t, int32_t id) {
    char buf[256];
    int n = engine_token_piece(t, id, buf, sizeof buf);
    if (n < 0) n = 0;
    json_t *s = json_stringn(buf, (size_t)n); /* NULL for invalid UTF-8 */
    if (s) return s;
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

char *gw_ep_tokenize(const gw_server *s, const char *body, size_t len, int *status) {
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return err400(status, "invalid_json", "the body must be a JSON object {\"content\": \"...\"}");
    }
    json_t *c = json_object_get(o, "content"), *sp = json_object_get(o, "add_special"),
           *wp = json_object_get(o, "with_pieces"), *ps = json_object_get(o, "parse_special");
    if (!json_is_string(c) || (sp && !json_is_boolean(sp)) || (wp && !json_is_boolean(wp)) || (ps && !json_is_boolean(ps))) {
        json_decref(o);
        return err400(status, "wrong_type", "'content' must be a string; add_special, with_pieces and parse_special "
                                            "booleans");
    }
    const engine *t = s->eng;
    size_t cl = json_string_length(c);
    int cap = (int)(cl + 8 < 1u << 24 ? cl + 8 : 1u << 24);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n = ids ? engine_tokenize(t, json_string_value(c), cl, json_is_true(sp), json_is_true(ps), ids, cap) : -1;
    json_t *arr = json_array();
    for (int i = 0; i < n && i < cap; i++) {
        if (json_is_true(wp)) json_array_append_new(arr, json_pack("{s:i,s:o}", "id", ids[i], "piece", piece_json(t, ids[i])));
        else json_array_append_new(arr, json_integer(ids[i]));
    }
    free(ids);
    json_decref(o);
    if (n < 0) {
        json_decref(arr);
        *status = 500;
        return oa_simple_error(500, "internal", "cannot tokenize");
    }
    *status = 200;
    return dump(json_pack("{s:o}", "tokens", arr));
}

char *gw_ep_detokenize(const gw_server *s, const char *body, size_t len, int *status) {
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    json_t *a = json_is_object(o) ? json_object_get(o, "tokens") : NULL;
    if (!json_is_array(a)) {
        json_decref(o);
        return err400(status, "wrong_type", "the body must be {\"tokens\": [ids]}");
    }
    const engine *t = s->eng;
    size_t n = json_array_size(a);
    int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
    for (size_t i = 0; ids && i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX ||
            !engine_token_valid(t, (int32_t)json_integer_value(v))) {
            free(ids);
            json_decref(o);
            char msg[120];
            snprintf(msg, sizeof msg, "tokens[%zu] is not a token id of this model (0..%d)", i, engine_n_vocab(t) - 1);
            return err400(status, "out_of_range", msg);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(o);
    if (!ids) {
        *status = 500;
        return oa_simple_error(500, "internal", "out of memory");
    }
    size_t cap = 64 + n * 32;
    char *text = malloc(cap);
    int k = text ? engine_detokenize(t, ids, (int)n, text, cap, 0) : -1;
    free(ids);
    if (k < 0) {
        free(text);
        *status = 500;
        return oa_simple_error(500, "internal", "cannot detokenize");
    }
    /* invalid UTF-8 (a token boundary inside a character) as U+FFFD, as llama.cpp's JSON does */
    json_t *js = json_stringn(text, (size_t)k);
    if (!js) {
        size_t o2 = 0;
        char *fixed = malloc((size_t)k * 3 + 1);
        for (int i = 0; fixed && i < k;) {
            unsigned char ch = (unsigned char)text[i];
            int l = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 0;
            bool ok = l > 0 && i + l <= k;
            for (int j = 1; ok && j < l; j++) ok = ((unsigned char)text[i + j] & 0xC0) == 0x80;
            json_t *one = ok ? json_stringn(text + i, (size_t)l) : NULL; /* jansson's UTF-8 check (overlongs, surrogates) */
            ok = one != NULL;
            json_decref(one);
            if (ok) memcpy(fixed + o2, text + i, (size_t)l), o2 += (size_t)l, i += l;
            else memcpy(fixed + o2, "\xEF\xBF\xBD", 3), o2 += 3, i++;
        }
        js = fixed ? json_stringn(fixed, o2) : NULL;
        free(fixed);
    }
    free(text);
    *status = 200;
    return dump(json_pack("{s:o}", "content", js ? js : json_string("")));
}

char *gw_ep_apply_template(const gw_server *s, const char *body, size_t len, int *status) {
    oa_request oq;
    oa_error oe;
    if (oa_parse(true, body, len, &s->limits, &oq, &oe) != 0) {
        *status = oe.status;
        return oa_error_json(&oe);
    }
    char err[300];
    if (oa_render_prompt_tmpl(&oq, s->eng, err, sizeof err) != 0) {
        oa_request_free(&oq);
        return err400(status, "invalid_request", err);
    }
    char *out = dump(json_pack("{s:s}", "prompt", oq.rendered));
    oa_request_free(&oq);
    *status = 200;
    return out;
}
