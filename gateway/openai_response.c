/* openai_response.c — OpenAI-compatible response, stream-chunk, logprobs,
 * model-list and error bodies with jansson (see openai_response.h). Per
 * request, not per token: allocation is fine here, except that stream chunks
 * are one json_dumps each. */
#include "gateway/openai_response.h"

#include "gateway/fields.h"

#include <jansson.h>
#include <math.h>
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
    json_object_set_new(o, "by_method", gw_by_method_json(st)); /* which proposer made the verify steps */
    json_object_set_new(o, "fallbacks", json_integer((json_int_t)st->fallbacks));
    json_object_set_new(o, "kv_resets", json_integer((json_int_t)st->kv_resets));
    json_object_set_new(o, "ttft_ms", jnum(ev->ttft_ms));
    json_object_set_new(o, "tpot_ms", jnum(ev->tpot_ms));
    return o;
}

/* OpenAI's usage: the prompt tokens the prefix cache supplied are
 * prompt_tokens_details.cached_tokens. */
static json_t *usage_object(int prompt_tokens, int completion_tokens, int cached_tokens) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)prompt_tokens + completion_tokens));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(cached_tokens));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static int cached_of(const engine_event *ev) { return ev ? (int)ev->st.prefix_reused : 0; }

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
        json_t *m = json_object(); /* a stream's role comes once, in its first chunk (oa_stream_role_chunk) */
        if (!chunk) json_object_set_new(m, "role", json_string("assistant"));
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
    json_object_set_new(o, "usage", usage_object(prompt_tokens, completion, n ? cached_of(ch[0].fin) : 0));
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

static int piece_of(const engine *eng, int32_t id, char *buf, size_t n) {
    int k = engine_token_piece(eng, id, buf, n);
    return k < 0 ? 0 : k;
}

void oa_logprobs_add(void *lp_obj, bool chat, const engine *eng, const engine_event *ev, size_t *text_offset) {
    json_t *o = lp_obj;
    if (!o || !ev->has_logprobs) return;
    char piece[256], alt[256];
    for (int i = 0; i < ev->n_tokens; i++) {
        int32_t id = ev->tokens[i];
        if (engine_token_is_eog(eng, id)) continue; /* the end-of-generation token is not part of the text */
        const spec_logprob *l = &ev->lp[i];
        int n = piece_of(eng, id, piece, sizeof piece);
        if (chat) {
            json_t *e = chat_token(piece, n, l->logprob), *top = json_array();
            for (int k = 0; k < l->n_top; k++) {
                int m = piece_of(eng, l->top_id[k], alt, sizeof alt);
                json_array_append_new(top, chat_token(alt, m, l->top_logprob[k]));
            }
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(json_object_get(o, "content"), e);
        } else {
            json_array_append_new(json_object_get(o, "tokens"), jstr(piece, (size_t)n));
            json_array_append_new(json_object_get(o, "token_logprobs"), jlp(l->logprob));
            json_t *top = json_object();
            for (int k = 0; k < l->n_top; k++) {
                int m = piece_of(eng, l->top_id[k], alt, sizeof alt);
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

char *oa_stream_final(bool chat, const char *id, const char *model, const engine_event *ev, int prompt_tokens,
                      bool include_usage) {
    char *fin = sse(final_chunk(chat, id, model, 0, ev), include_usage ? NULL : OA_SSE_DONE, NULL);
    if (!fin || !include_usage) return fin;
    char *end = oa_stream_end_cached(chat, id, model, true, prompt_tokens, ev->completion_tokens, cached_of(ev));
    size_t a = strlen(fin), b = end ? strlen(end) : 0;
    char *both = end ? malloc(a + b + 1) : NULL;
    if (both) memcpy(both, fin, a), memcpy(both + a, end, b + 1);
    free(fin), free(end);
    return both;
}

char *oa_stream_role_chunk(const char *id, const char *model, int index) {
    json_t *c = json_object(), *d = json_object();
    json_object_set_new(c, "index", json_integer(index));
    json_object_set_new(d, "role", json_string("assistant"));
    json_object_set_new(d, "content", json_string(""));
    json_object_set_new(c, "delta", d);
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", json_null());
    return sse(envelope(true, true, id, model, c), NULL, NULL);
}

char *oa_stream_choice_final(bool chat, const char *id, const char *model, int index, const engine_event *ev) {
    return sse(final_chunk(chat, id, model, index, ev), NULL, NULL);
}

char *oa_stream_end(bool chat, const char *id, const char *model, bool include_usage, int prompt_tokens,
                    int completion_tokens) {
    return oa_stream_end_cached(chat, id, model, include_usage, prompt_tokens, completion_tokens, 0);
}

char *oa_stream_end_cached(bool chat, const char *id, const char *model, bool include_usage, int prompt_tokens,
                           int completion_tokens, int cached_tokens) {
    if (!include_usage) return strdup(OA_SSE_DONE);
    json_t *o = envelope(chat, true, id, model, NULL);
    json_object_set_new(o, "usage", usage_object(prompt_tokens, completion_tokens, cached_tokens));
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
