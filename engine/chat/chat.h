/* chat.h — chat templates without Jinja: recognises the common template
 * families from a GGUF's tokenizer.chat_template and renders a conversation
 * exactly as those templates would (Llama 2, Llama 3, ChatML, Mistral,
 * Zephyr/TinyLlama), with a plain "Role: text" fallback for models without one.
 *
 * Not a template engine: an unrecognised template falls back to PLAIN (or to a
 * family guessed from the vocabulary's special tokens). Pure functions; any
 * thread. Nothing allocates. */
#ifndef SPECD_CHAT_H
#define SPECD_CHAT_H

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CHAT_TEMPLATE_PLAIN = 0,   /* "System: s\nUser: u\nAssistant: a\n" ... "Assistant:" ("Assistant:" + a
                                * when a begins with whitespace, as the model wrote it) */
    CHAT_TEMPLATE_LLAMA2,      /* [INST] <<SYS>>\ns\n<</SYS>>\n\nu [/INST] a </s><s>[INST] ... */
    CHAT_TEMPLATE_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\ntext<|eot_id|> */
    CHAT_TEMPLATE_CHATML,      /* <|im_start|>role\ntext<|im_end|>\n (Qwen, SmolLM) */
    CHAT_TEMPLATE_MISTRAL,     /* [INST] u [/INST]a</s>[INST] ... (Mistral-7B-Instruct v0.1) */
    CHAT_TEMPLATE_ZEPHYR,      /* <|role|>\ntext</s>\n (Zephyr, TinyLlama-Chat) */
    CHAT_TEMPLATE_COUNT
} chat_template_kind;

/* One message. Strings are borrowed, NUL-terminated. Roles other than
 * "system", "user" and "assistant" are rendered as user turns by the families
 * that have no slot for them (Llama 2, Mistral) and under their own name by
 * the others. */
typedef struct {
    const char *role;
    const char *content;
} chat_msg;

/* Family of f's tokenizer.chat_template, by distinctive substrings, checked in
 * this order: "<|im_start|>" ChatML; "<|start_header_id|>" Llama 3; "[INST]"
 * with "<<SYS>>" Llama 2; "[INST]" Mistral; "<|user|>" Zephyr. With no
 * template string (or an unrecognised one) the vocabulary decides when t is
 * given: a "<|im_start|>" token means ChatML, "<|start_header_id|>" Llama 3;
 * otherwise PLAIN. f and t may be NULL. */
chat_template_kind chat_template_detect(const gguf_file *f, const tokenizer *t);

/* Config override: "llama2", "llama3", "chatml", "mistral", "zephyr", "plain"
 * (case-insensitive; "tinyllama" = zephyr, "qwen" = chatml). Returns -1 for any
 * other name (including NULL); callers treat that as a configuration error. */
chat_template_kind chat_template_from_name(const char *name);
/* The canonical name of k (those above), or "?" when out of range. */
const char *chat_template_name(chat_template_kind k);

/* Renders msgs[0..n) in family k, as the family's reference template does,
 * except that the BOS text the template puts at the very start is NOT written
 * (the engine's tokenizer adds BOS itself). Later BOS texts (Llama 2 writes one
 * before every user turn after the first) are written as bos_text (NULL:
 * "<s>"). The end-of-turn text of the Llama 2, Mistral and Zephyr families is
 * "</s>". add_generation_prompt appends the assistant header where the family
 * has one (Llama 3, ChatML, Zephyr, PLAIN; Llama 2 and Mistral end a user turn
 * with [/INST] anyway). Message content is plain text: tokenize the result
 * with the markup spans from chat_render_spans (engine_request.special_spans),
 * never with special tokens parsed everywhere.
 *
 * Like snprintf: returns the length of the full rendering (excluding the NUL);
 * writes at most cap bytes including a terminating NUL (when cap > 0). The
 * output is complete iff the return value < cap. out may be NULL when cap is 0.
 * Message strings must be non-NULL (NULL content renders as ""). */
int chat_render(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt,
                const char *bos_text, char *out, size_t cap);

/* chat_render that also reports which bytes of the rendering are the
 * template's own markup (its literal text, the BOS texts, and the role names
 * "system", "user", "assistant", "tool"): the only bytes that may spell
 * special tokens. Message content (and any other role name) is never
 * markup, so a message reading "</s><s>" or "<|eot_id|>" cannot close the
 * turn. Writes the first max_spans spans, sorted and disjoint, to spans (may
 * be NULL when max_spans is 0) and their total count to *n_spans (may be
 * NULL); there are at most 2 * n + 2. Offsets are into the full rendering. */
int chat_render_spans(chat_template_kind k, const chat_msg *msgs, int n, bool add_generation_prompt,
                      const char *bos_text, char *out, size_t cap, tok_span *spans, int max_spans, int *n_spans);

/* ---- the model's own Jinja template (chat_tmpl.c) ---------------------------
 *
 * A chat_tmpl is what a served model renders chat prompts with: its GGUF's
 * tokenizer.chat_template compiled by the Jinja renderer (jinja.h), or a
 * named/file override, or, for a model without any, a built-in family above
 * (the server warns). Immutable after load; any thread may apply it. */
typedef struct chat_tmpl chat_tmpl;

/* How a template's model writes tool calls (detected from the template's
 * text; the tool-call parser and grammar follow it). */
typedef enum {
    CHAT_TOOLS_GENERIC = 0,  /* {"name": ..., "arguments": {...}} as the whole reply */
    CHAT_TOOLS_LLAMA3,       /* {"name": ..., "parameters": {...}}, optionally after <|python_tag|> */
    CHAT_TOOLS_HERMES,       /* <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen 2.5) */
    CHAT_TOOLS_MISTRAL,      /* [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] */
    CHAT_TOOLS_FUNCTIONARY31,/* <function=NAME>{...}</function> */
    CHAT_TOOLS_FUNCTIONARY32,/* >>>NAME\n{...} (after the generation prompt's ">>>": NAME\n{...}) */
    CHAT_TOOLS_FIREFUNCTION, /*  functools[{"name": ..., "arguments": {...}}, ...] */
    CHAT_TOOLS_COMMAND_R7B,  /* <|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|> */
    CHAT_TOOLS_COMMAND_R,    /* Action: ```json\n[{"tool_name": ..., "parameters": {...}}]\n``` */
    CHAT_TOOLS_COUNT
} chat_tool_format;
const char *chat_tool_format_name(chat_tool_format f); /* "generic", "llama3", "hermes", ... */
/* The format a template's text implies (NULL: generic). */
chat_tool_format chat_tool_format_detect(const char *template_text);

/* Loads the template of the model (f, t; either may be NULL). override:
 * NULL or "" = the model's tokenizer.chat_template; a path to a readable
 * file = that file's text; otherwise a name: tokenizer.chat_template.NAME
 * from the model, or a built-in family name (chat_template_from_name).
 * Returns NULL with err ("tokenizer.chat_template line N: ...", "no
 * template named X ...") when the chosen template does not compile or the
 * override names nothing: reported once, at load. A model with no template
 * at all loads as its detected built-in family (chat_tmpl_is_jinja false).
 * Free with chat_tmpl_free (accepts NULL). */
chat_tmpl *chat_tmpl_load(const gguf_file *f, const tokenizer *t, const char *override, char *err, size_t errlen);
void chat_tmpl_free(chat_tmpl *ct);
bool chat_tmpl_is_jinja(const chat_tmpl *ct);
chat_template_kind chat_tmpl_family(const chat_tmpl *ct);   /* the built-in family (detected, for information) */
chat_tool_format chat_tmpl_tool_format(const chat_tmpl *ct);
const char *chat_tmpl_source(const chat_tmpl *ct);          /* e.g. "tokenizer.chat_template", "file tmpl.jinja" */
const char *chat_tmpl_text(const chat_tmpl *ct);            /* the Jinja text ("" for a built-in family) */

/* Renders a conversation. messages: a JSON array of OpenAI-shaped messages
 * ({role, content (string or null), tool_calls [{id, type, function: {name,
 * arguments (JSON text)}}], tool_call_id, name}); tools: a JSON array of
 * {type: "function", function: {...}} or NULL/empty for none (then the
 * template sees no tools variable at all). The template also sees
 * add_generation_prompt, bos_token, eos_token (and datetime/functions
 * when it reads them, as llama.cpp passes them to Firefunction).
 * Message strings are data: only the template's markup (its literals,
 * bos/eos, the standard role names) lands in the spans, so message text
 * can never spell a special token. Tool-call arguments are given to the
 * template as objects when it formats them with tojson. A BOS text the
 * template writes first is dropped when the tokenizer adds BOS itself.
 *
 * Returns 0 with *out (malloc'd, NUL-terminated, *out_len bytes) and
 * spans and n_spans (malloc'd, sorted, disjoint) set; -1 with err when the
 * template raises or fails (raise_exception's message, with the line) or
 * the input is not such JSON; -2 when tools are given to a model without
 * a Jinja template. Bounded in time and output (1 MiB by default). */
int chat_tmpl_apply(const chat_tmpl *ct, const char *messages_json, size_t messages_len, const char *tools_json,
                    size_t tools_len, bool add_generation_prompt, char **out, size_t *out_len, tok_span **spans,
                    int *n_spans, char *err, size_t errlen);

#endif
