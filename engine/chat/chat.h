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

#include "engine/engine.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

/* The families (chat_template_kind), one message (chat_msg), the families'
 * names and renderers (chat_template_name, chat_render, chat_render_spans)
 * are public value types and pure functions on them: engine.h. */

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

/* ---- the model's own Jinja template (chat_tmpl.c) ---------------------------
 *
 * A chat_tmpl is what a served model renders chat prompts with: its GGUF's
 * tokenizer.chat_template compiled by the Jinja renderer (jinja.h), or a
 * named/file override, or, for a model without any, a built-in family above
 * (the server warns). Immutable after load; any thread may apply it.
 * The handle (chat_tmpl), the tool-call formats (chat_tool_format) and
 * chat_tool_format_name are public: engine.h; a caller of the engine applies
 * the loaded template with engine_chat_apply. */

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
