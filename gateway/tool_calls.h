/* tool_calls.h — OpenAI tool calling over a model's own tool-call format
 * (engine/chat/chat.h chat_tool_format): the grammar that forces a well-formed
 * call (tool_choice "required" or a named function; the arguments follow
 * the function's JSON Schema via json_schema.h), and the parser that finds
 * the calls in a finished reply and turns them into OpenAI's
 * message.tool_calls. Pure functions; any thread. */
#ifndef SPECD_TOOL_CALLS_H
#define SPECD_TOOL_CALLS_H

#include "engine/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *id;         /* "call" + 9 characters is what OpenAI-style clients accept; 9 alphanumerics here (Mistral's rule) */
    char *name;
    char *arguments;  /* JSON text of the arguments object */
} tc_call;

typedef struct {
    char *content;    /* the reply's text outside the calls (NULL: none) */
    tc_call *calls;
    int n_calls;
} tc_result;

/* Finds the tool calls in text[0..len) written in format fmt. Returns the
 * number of calls (0: none, *out->content is then NULL and the reply is plain
 * text), -1 on out of memory. ids are derived from id_seed. Free with
 * tc_result_free (accepts a zeroed result). */
int tc_parse(chat_tool_format fmt, const char *text, size_t len, uint64_t id_seed, tc_result *out);
void tc_result_free(tc_result *r);

/* GBNF forcing one call (several with parallel, where the format allows)
 * of the tools (a json_t array of {type:"function", function:{name,
 * parameters}}), or of only the function named only (NULL: any). Returns
 * malloc'd text, or NULL with err (a schema json_schema.h refuses, an
 * unknown name). */
char *tc_grammar(chat_tool_format fmt, const void *tools, const char *only, bool parallel, char *err, size_t errlen);

/* Rewrites a finished chat response (oa_response_json_n's text, freed here)
 * so that each choice whose message holds tool calls carries them as
 * message.tool_calls (content: the text around them or null) and
 * finish_reason "tool_calls". Returns the new malloc'd text (json itself
 * when nothing changed, NULL when json was NULL). */
char *tc_rewrite_response(char *json, chat_tool_format fmt, uint64_t id_seed);

/* A stream's tool-call chunks for a buffered reply: "data: {...}\n\n" events
 * with delta.tool_calls [{index, id, type, function: {name, arguments}}]
 * (or delta.content when the reply holds no call), as OpenAI streams them.
 * *had_calls says which. Returns malloc'd text (NULL when out of memory). */
char *tc_stream_chunks(chat_tool_format fmt, const char *text, size_t len, uint64_t id_seed, const char *id,
                       const char *model, int index, bool *had_calls);

/* A stream's final events (oa_stream_final's text, freed here) with the
 * first finish_reason made "tool_calls". */
char *tc_finish_reason(char *sse);

#endif
