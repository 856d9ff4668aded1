/* openai_request.h — the request half of the OpenAI-compatible HTTP API,
 * without sockets: parses and validates POST /v1/completions and
 * /v1/chat/completions bodies into an engine_request and renders chat
 * messages with a chat template. A refusal is an oa_error, which
 * openai_response.h turns into the error body. The server (http.c) moves
 * the bytes.
 *
 * Threads: every function is reentrant; an oa_request belongs to one thread at
 * a time. Error codes are the WebSocket protocol's (GW_ERR_*) so both APIs
 * name the same failure the same way. */
#ifndef SPECD_OPENAI_REQUEST_H
#define SPECD_OPENAI_REQUEST_H

#include "engine/engine.h"
#include "gateway/protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OA_ERR_UNSUPPORTED "unsupported" /* a field specd cannot honour (best_of > 1, echo, tools, ...) */

/* A refused request. code: a static string (GW_ERR_* or OA_ERR_UNSUPPORTED);
 * type: NULL = derived from status ("invalid_request_error" for 4xx,
 * "authentication_error" 401, "rate_limit_error" 429, "server_error" 5xx);
 * param: the offending field ("" = null). */
typedef struct {
    int status;
    const char *code;
    const char *type;
    char message[256];
    char param[64];
} oa_error;

/* A parsed request. Owns every string it points to; free with
 * oa_request_free. req is ready for engine_submit once the caller has set
 * notify/user and, for chat, rendered the messages (oa_render_prompt):
 *   prompt_text (completions: the prompt; chat: NULL until rendered),
 *   special_spans (none: plain text; chat: the template's markup once
 *   rendered), sc, seed (0 unless seed_set),
 *   max_tokens (default applied), stop[] → stop_owned, mode, gamma (0 =
 *   engine default), adaptive/adaptive_set, content_type. */
typedef struct {
    bool chat;
    engine_request req;
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    bool seed_set;              /* false: the server should pick a seed */
    int n;                      /* choices asked for, 1..lim->max_choices: each its own engine request
                                   (the server derives choice i's seed: oa_choice_seed) */
    char *model;                /* as sent ("" when absent) */
    char *prompt;               /* completions (a 1-element array is unwrapped) */
    chat_msg *messages;         /* chat: (n_messages) roles "system" | "user" | "assistant"
                                   ("developer" becomes "system"); text parts are joined with "\n" */
    int n_messages;
    char *rendered;             /* chat: the rendered prompt (oa_render_prompt) */
    tok_span *spans;            /* chat: its markup spans (req.special_spans points here) */
    char *stop_owned[ENGINE_MAX_STOP];
    char *content_type;
    char *grammar;              /* GBNF of response_format json_object/json_schema or of 'grammar' (req.grammar) */
    sampler_bias *logit_bias;   /* owned or NULL: 'logit_bias' (req.sc.logit_bias points here) */
    /* tools (chat): the messages as the template sees them, the tools, the choice */
    char *messages_json;        /* chat: [{role, content, tool_calls, tool_call_id, name}] as JSON text */
    char *tools_json;           /* 'tools' as JSON text (NULL: none) */
    int tool_choice;            /* OA_TOOLS_AUTO, _NONE, _REQUIRED, _NAMED */
    char *tool_name;            /* OA_TOOLS_NAMED: the function */
    bool parallel_tool_calls;   /* default true */
    int tool_format;            /* after rendering: the chat_tool_format replies are parsed in; -1: no parsing */
} oa_request;
enum { OA_TOOLS_AUTO = 0, OA_TOOLS_NONE, OA_TOOLS_REQUIRED, OA_TOOLS_NAMED };

/* Parses and validates body[0..len) (need not be NUL-terminated) of
 * /v1/chat/completions (chat) or /v1/completions. Returns 0 with *out filled
 * (free with oa_request_free), or -1 with *err filled (400; 413 for a body
 * over lim->max_message_bytes) and *out zeroed. Never aborts on any input.
 * Fields: model (string), prompt (string or [string]) | messages (non-empty
 * array of {role, content: string | [{"type":"text","text"}] | null for
 * assistant}), max_tokens | max_completion_tokens (1..lim->max_tokens_limit
 * and < lim->max_ctx when that is > 0), temperature (0..2), top_p (0..1],
 * top_k (>= 0), min_p [0..1), seed (integer), stop (string or up to
 * ENGINE_MAX_STOP strings of 1..ENGINE_STOP_LEN-1 bytes), stream (bool),
 * stream_options {include_usage}, n (1..lim->max_choices: the choices
 * wanted; the parser only checks it), speculation {mode: auto|draft|off, gamma
 * in [lim->gamma_min, lim->gamma_max], adaptive: bool}, content_type (string).
 * response_format {type: text | json_object | json_schema, json_schema:
 * {name, schema, strict}} and grammar (GBNF text; not with a JSON
 * response_format) become req.grammar (a schema or grammar that does not
 * compile: 400 invalid_grammar with the reason).
 * logprobs: chat {logprobs: bool, top_logprobs: 0..20 (needs logprobs
 * true)}, completions {logprobs: 0..20 alternatives} → req.logprobs /
 * req.top_logprobs (values: spec.h spec_logprob).
 * tools [{type: "function", function: {name, description, parameters}}],
 * tool_choice (auto | none | required | {type: function, function: {name}}),
 * parallel_tool_calls (bool); messages may then hold role "tool" results
 * ({tool_call_id, content}) and assistant messages with tool_calls
 * ([{id, type, function: {name, arguments: JSON text}}], content null).
 * null means absent; unknown fields are ignored; best_of > 1, echo,
 * suffix, functions (the legacy API), logit_bias, top_logprobs on completions and non-zero
 * presence/frequency penalties are refused (unsupported).
 * Integers may be written as integral reals. */
int oa_parse(bool chat, const char *body, size_t len, const gw_limits *lim, oa_request *out, oa_error *err);
void oa_request_free(oa_request *r); /* accepts NULL and a zeroed request; zeroes it */

/* The seed of choice i of a request seeded with seed: seed + i (wrapping),
 * so choice 0 is what the same request with n = 1 answers. */
uint64_t oa_choice_seed(uint64_t seed, int i);

/* Chat: renders r->messages with template k (see chat_render; bos_text may be
 * NULL) into r->rendered, with the generation prompt, and points
 * r->req.prompt_text at it, with r->req.special_spans at the template's own
 * markup (message content never yields special tokens). Completions: nothing to
 * do. Returns 0, or -1 with err filled when out of memory. */
int oa_render_prompt(oa_request *r, chat_template_kind k, const char *bos_text, char *err, size_t errlen);

/* Chat: renders r->messages_json and r->tools_json with the model's template
 * (engine_chat_apply) into r->rendered / r->req.prompt_text and the markup
 * spans, sets r->tool_format (-1 when the reply is not parsed: no tools, or
 * tool_choice none) and, for tool_choice required or a named function, the
 * grammar that forces a call in the template's format (tool_calls.h) as
 * r->grammar / req.grammar. Returns 0, or -1 with err (the template raised,
 * a function's schema is refused, tools without a Jinja template): a 400. */
int oa_render_prompt_tmpl(oa_request *r, const engine *e, char *err, size_t errlen);

#endif
