/* fields.h — the request fields both client protocols share, parsed by ONE
 * table (fields.c): the sampling fields (max_tokens, temperature, top_p,
 * min_p, top_k, seed), prefix_cache, learn, the speculation object (mode, method,
 * verify, gamma, adaptive) and OpenAI's n. The WebSocket parser (protocol.c)
 * and the OpenAI parser (openai_request.c) both call gw_fields_parse, so a field has
 * one name, one type, one range and one error message in both. A new field is one row in
 * the table in fields.c (and, for the WebSocket protocol, one name in its
 * list of known fields). Also the finish-reason names, once.
 *
 * Socket-free and stateless like protocol.h; any thread. */
#ifndef SPECD_GATEWAY_FIELDS_H
#define SPECD_GATEWAY_FIELDS_H

#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Stable error codes (the `code` of an error frame). The parser produces the
 * first group; the server produces the second itself. */
#define GW_ERR_INVALID_JSON "invalid_json"
#define GW_ERR_NOT_OBJECT "not_object"
#define GW_ERR_UNKNOWN_TYPE "unknown_type"
#define GW_ERR_MISSING_FIELD "missing_field"
#define GW_ERR_UNKNOWN_FIELD "unknown_field"
#define GW_ERR_WRONG_TYPE "wrong_type"
#define GW_ERR_OUT_OF_RANGE "out_of_range"
#define GW_ERR_MESSAGE_TOO_LARGE "message_too_large"
#define GW_ERR_NO_DRAFT "no_draft"
#define GW_ERR_BINARY_FRAME "binary_frame"
#define GW_ERR_DUPLICATE_ID "duplicate_id"
#define GW_ERR_UNKNOWN_ID "unknown_id"
#define GW_ERR_PROMPT_TOO_LONG "prompt_too_long"
#define GW_ERR_TOO_MANY_REQUESTS "too_many_requests" /* server.max_requests_per_connection, both protocols */
#define GW_TOO_MANY_REQUESTS_MSG "too many concurrent requests on this connection" /* its message's start */
#define GW_ERR_INTERNAL "internal"
#define GW_ERR_INVALID_GRAMMAR "invalid_grammar" /* a grammar or JSON Schema that does not compile */

/* What the server allows; filled from the config and the loaded models. */
typedef struct {
    int max_message_bytes;  /* larger frames → message_too_large (0 = no limit) */
    int max_tokens_limit;   /* max_tokens must be in [1, this] */
    int default_max_tokens; /* when max_tokens is absent (clamped to the limits); 0 = the most the
                             * limits allow: until the end of the context */
    int gamma_min, gamma_max; /* policy bounds for speculation.gamma */
    int max_ctx;            /* context per sequence; if > 0, max_tokens must also be < max_ctx */
    bool has_draft;         /* false: speculation.mode "draft" → no_draft */
    int tree;               /* engine_tree of the engine: unless AUTO or FIXED, speculation.tree auto|fixed is refused */
    int tree_budget, tree_depth, tree_topk; /* its tree bounds: request bounds must not exceed them */
    int max_choices;        /* OpenAI `n` must be in [1, this] (server.max_choices; 0 counts as 1) */
    int schema_max_enum;    /* JSON Schema: values of one enum (grammar.max_enum; 0 = 20,000) */
    size_t grammar_max_bytes; /* GBNF text, given or made from a schema (grammar.max_bytes; 0 = 1 MiB) */
} gw_limits;

/* 1 MiB frames, max_tokens ≤ 4096 (default 256), γ in [2, 8], no context bound, no draft, n ≤ 4. */
gw_limits gw_limits_default(void);

/* Which object a group of rows reads: the request itself, or its
 * "speculation" object; GW_FIELDS_OPENAI are top-level fields only the
 * OpenAI endpoints take (n: the WebSocket protocol sends one generate per
 * answer instead). */
typedef enum { GW_FIELDS_TOP = 1, GW_FIELDS_SPECULATION = 2, GW_FIELDS_OPENAI = 3 } gw_fields_group;

/* Where parsed values go. */
typedef struct {
    engine_request *req; /* sc, max_tokens, seed, no_prefix_cache, no_learn, mode, method(_set), verify, gamma, adaptive(_set) */
    bool seed_set;       /* a seed was given */
    int n;               /* GW_FIELDS_OPENAI: choices asked for (1 when absent) */
} gw_field_target;

/* A refused field: code is a GW_ERR_* literal; param the field's path
 * ("speculation.gamma"); message one line naming the field, the allowed
 * values and what was received. */
typedef struct {
    const char *code;
    char param[64];
    char message[200];
} gw_field_error;

/* Reads every row of group from obj (an object; a key that is absent or null
 * keeps its default). For GW_FIELDS_TOP it first sets the defaults the rows
 * own: sampler_config_default(), max_tokens from lim (default_max_tokens
 * clamped to the bounds), mode auto; for GW_FIELDS_OPENAI, n = 1. Returns 0, or -1 with *err filled for the
 * first refused row in table order. */
int gw_fields_parse(json_t *obj, gw_fields_group group, const gw_limits *lim, gw_field_target *t,
                    gw_field_error *err);

/* Reads one row (path as in the table, e.g. "max_tokens") from v, naming it
 * shown in messages (OpenAI's "max_completion_tokens" is the max_tokens row). */
int gw_field_parse_one(const char *path, const char *shown, json_t *v, const gw_limits *lim, gw_field_target *t,
                       gw_field_error *err);

/* What a JSON value is, for "got ..." in messages: numbers and literals by
 * value, strings briefly quoted, containers by kind. Returns b. */
const char *gw_json_describe(const json_t *v, char *b, size_t n);

/* The finish reason's wire name: "length", "stop", "cancelled", "error" (the
 * same in done frames, OpenAI finish_reason and the metrics label). */
const char *gw_finish_name(engine_finish f);
#define GW_FINISH_COUNT 4 /* FINISH_LENGTH .. FINISH_ERROR */

/* The per-proposer counters every report shows under "by_method" (the
 * WebSocket done frame, the OpenAI response's speculation object,
 * /api/stats): ONE list of fields, so all three name the same counters of
 * every proposer, Medusa included. gw_by_method_value is field f of b. */
#define GW_BY_METHOD_FIELDS 5
extern const char *const gw_by_method_field[GW_BY_METHOD_FIELDS]; /* verify_steps drafted accepted rejections tokens */
uint64_t gw_by_method_value(const spec_method_stats *b, int f);
/* {"draft":{...},"ngram":{...},"medusa":{...}} of st (jansson; caller owns it). */
json_t *gw_by_method_json(const spec_stats *st);

#endif
