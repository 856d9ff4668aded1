/* openai_response.h — the response half of the OpenAI-compatible HTTP API
 * as JSON, without sockets: the non-streaming responses, the
 * server-sent-event chunks of a stream, logprobs, GET /v1/models and the
 * OpenAI error body (of an oa_error, openai_request.h).
 *
 * Threads: every function is reentrant. Builders return malloc'd,
 * NUL-terminated text the caller frees with free() (NULL only when out of
 * memory). Text that goes into JSON is made valid UTF-8 first (invalid bytes
 * become U+FFFD), so a model emitting half a character never breaks a
 * response. */
#ifndef SPECD_OPENAI_RESPONSE_H
#define SPECD_OPENAI_RESPONSE_H

#include "engine/engine.h"
#include "gateway/openai_request.h"

#include <stdbool.h>
#include <stddef.h>

/* The OpenAI error body {"error":{"message","type","param","code"}}. */
char *oa_error_json(const oa_error *e);
/* Same from parts (param null). */
char *oa_simple_error(int status, const char *code, const char *message);

/* ---- responses ------------------------------------------------------------------
 * id: a unique string of the caller's (e.g. a uuid); the response id is
 * "cmpl-<id>" or "chatcmpl-<id>". model: echoed. created: time(NULL).
 * ev: the request's ENGINE_EV_FINISHED event; prompt_tokens: from its
 * started event. */

/* "length", "stop"; cancelled and error requests say "cancelled" / "error". */
const char *oa_finish_reason(engine_finish f);

/* Speculation statistics of a finished request, the same figures as the
 * WebSocket `done` message: {"alpha","mean_accepted","gamma_used",
 * "tokens_per_pass","verify_steps","plain_steps","drafted","accepted",
 * "rejections","per_position":[{"position":1,"drafted":n,"accepted":m},...],
 * "fallbacks","kv_resets","ttft_ms","tpot_ms"} (non-finite numbers: null).
 * Returns a new jansson object (json_t *; the caller owns the reference),
 * typed void * to keep jansson out of this header. */
void *oa_speculation_object(const engine_event *ev);

/* Non-streaming: {"id","object":"text_completion"|"chat.completion","created",
 * "model","choices":[{"index":0,"text" | "message":{"role":"assistant",
 * "content"},"logprobs":null,"finish_reason"}],"usage":{"prompt_tokens",
 * "completion_tokens","total_tokens"},"speculation":{...}}. */
char *oa_response_json(bool chat, const char *id, const char *model, const char *text, size_t len,
                       const engine_event *ev, int prompt_tokens);

/* One finished choice of a request (n >= 1), for oa_response_json_n. */
typedef struct {
    const char *text;           /* its text (may be NULL when len is 0) */
    size_t len;
    const engine_event *fin;    /* its ENGINE_EV_FINISHED event */
    void *logprobs;             /* NULL: "logprobs": null; else taken over (see oa_logprobs_new) */
} oa_choice;

/* Non-streaming with n choices (ch[0..n), ch[i] is choice i): "choices" lists
 * them with "index": i; "usage" counts the shared prompt once
 * (prompt_tokens), completion_tokens summed over the choices. n == 1: the
 * same text as oa_response_json_lp (the "speculation" object at the top);
 * n > 1: each choice carries its own "speculation" object and the top has
 * none. Takes over every ch[i].logprobs. */
char *oa_response_json_n(bool chat, const char *id, const char *model, oa_choice *ch, int n, int prompt_tokens);

/* One server-sent event carrying text: "data: {json}\n\n" where json is
 * {"id","object":"text_completion","created","model","choices":[{"index":0,
 * "text","logprobs":null,"finish_reason":null}]} or, for chat,
 * {"id","object":"chat.completion.chunk",...,"choices":[{"index":0,"delta":
 * {"role":"assistant","content"},"logprobs":null,"finish_reason":null}]}.
 * *out_len (may be NULL) receives the length. */
char *oa_stream_chunk(bool chat, const char *id, const char *model, const char *text, size_t len, size_t *out_len);
/* Logprobs in the OpenAI shapes, typed void * (a json_t *) to keep jansson
 * out of this header. oa_logprobs_new: chat {"content":[],"refusal":null},
 * completions {"tokens":[],"token_logprobs":[],"top_logprobs":[],
 * "text_offset":[]}. oa_logprobs_add appends the tokens of a tokens event
 * (nothing unless ev->has_logprobs; end-of-generation tokens are skipped):
 * chat entries {"token","logprob","bytes":[..],"top_logprobs":[{"token",
 * "logprob","bytes"}]}, completions a token string, its logprob, a
 * {token: logprob} object of the alternatives and the token's byte offset in
 * the completion text (*text_offset, advanced). A logprob of -inf is written
 * -9999.0. The _lp builders below take ownership of the object they are given
 * (NULL: "logprobs":null); oa_logprobs_free frees one not handed over. */
void *oa_logprobs_new(bool chat);
void oa_logprobs_add(void *lp, bool chat, const engine *eng, const engine_event *ev, size_t *text_offset); /* eng: its tokens */
void oa_logprobs_free(void *lp); /* NULL is fine */
char *oa_response_json_lp(bool chat, const char *id, const char *model, const char *text, size_t len,
                          const engine_event *ev, int prompt_tokens, void *logprobs);
char *oa_stream_chunk_lp(bool chat, const char *id, const char *model, const char *text, size_t len, void *logprobs,
                         size_t *out_len);
/* The same for choice index of a request with several (oa_stream_chunk_lp is index 0). */
char *oa_stream_chunk_ix(bool chat, const char *id, const char *model, int index, const char *text, size_t len,
                         void *logprobs, size_t *out_len);

/* The end of a stream, as OpenAI ends one: the final chunk (empty text /
 * empty delta, finish_reason and "speculation"), then, only with
 * include_usage (stream_options.include_usage), a chunk {"choices": [],
 * "usage": {...}} (prompt_tokens_details.cached_tokens: what the prefix
 * cache supplied), then "data: [DONE]\n\n", in one string. */
char *oa_stream_final(bool chat, const char *id, const char *model, const engine_event *ev, int prompt_tokens,
                      bool include_usage);
/* A chat stream's first chunk for a choice: delta {"role":"assistant","content":""}
 * (OpenAI sends the role once; content deltas carry no role). */
char *oa_stream_role_chunk(const char *id, const char *model, int index);
/* Streams of several choices (n > 1) end differently: each choice's own
 * finish chunk (oa_stream_choice_final: empty text / delta, its
 * finish_reason, its "speculation"; no usage, no [DONE]) when it finishes,
 * then once all have, oa_stream_end: with include_usage a chunk
 * {"choices":[],"usage":{...}} (prompt counted once, completion tokens
 * summed), then "data: [DONE]\n\n". */
char *oa_stream_choice_final(bool chat, const char *id, const char *model, int index, const engine_event *ev);
char *oa_stream_end(bool chat, const char *id, const char *model, bool include_usage, int prompt_tokens,
                    int completion_tokens);
char *oa_stream_end_cached(bool chat, const char *id, const char *model, bool include_usage, int prompt_tokens,
                           int completion_tokens, int cached_tokens);
/* A stream that failed after its headers were sent: "data: {"error":{...}}\n\n"
 * (server_error, code engine_error) then "data: [DONE]\n\n". */
char *oa_stream_error(const char *message);
/* The same with the error e (the gateway's status_map.h row for the failure). */
char *oa_stream_error_as(const oa_error *e);
#define OA_SSE_DONE "data: [DONE]\n\n"

/* GET /v1/models: {"object":"list","data":[{"id","object":"model","created",
 * "owned_by":"specd"}]} for each of the n ids (NULL / "" entries skipped). */
char *oa_models_list_json(const char *const *ids, int n);
/* The same for one model. */
char *oa_models_json(const char *model_name);

/* Copies in[0..len) to out as valid UTF-8: each maximal invalid subpart (a
 * stray continuation byte, a truncated sequence, an overlong form, an encoded
 * surrogate, a code point > U+10FFFF) becomes U+FFFD. out needs 3 * len bytes
 * at most; returns the bytes written (no NUL). */
size_t oa_utf8_sanitize(char *out, const char *in, size_t len);

#endif
