/* json_schema.h — JSON Schema (the subset structured-output users send) to a
 * GBNF grammar (engine/grammar/grammar.h) whose every complete output is a JSON
 * document valid against the schema.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, or
 * an array of them: nullable types), properties, required (required ones
 * first, then the optional ones, in schema order), additionalProperties
 * (false, true or a schema; with properties, only the declared ones are
 * generated), items, minItems/maxItems, minLength/maxLength, enum (any JSON
 * values), const, anyOf, oneOf (as anyOf: the branches are not checked for
 * exclusivity), allOf (one schema, or objects merged: properties and
 * required; refused when an additionalProperties of one would forbid
 * another's properties), $ref to #/$defs/NAME or #/definitions/NAME
 * (recursion allowed), minimum/maximum/exclusiveMinimum/exclusiveMaximum
 * (draft 4's boolean form too) for integers and for numbers with integer
 * bounds (gateway/json_range.h), pattern (an ECMAScript regular expression,
 * gateway/json_regex.h: unsupported constructs are refused by name), string
 * formats date, time, date-time, uuid, email, uri, ipv4 and hostname (dates
 * only generate days 01-28); annotations (title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, strict,
 * nullable (OpenAPI's, not JSON Schema's: ignored), contentEncoding,
 * contentMediaType) are ignored. Anything else (multipleOf, not, if,
 * patternProperties, prefixItems, uniqueItems, other formats, pattern with
 * format or length bounds, non-integer bounds of a number, ...) is refused
 * with a message naming the keyword and its path. Reentrant. */
#ifndef SPECD_JSON_SCHEMA_H
#define SPECD_JSON_SCHEMA_H
#include <stddef.h>

/* schema: a jansson json_t * (typed void * to keep jansson out of the
 * header). Returns malloc'd GBNF text (root rule "root"), or NULL with a
 * message in err ("at #/properties/x: 'pattern' is not supported"). */
char *js_schema_to_gbnf(const void *schema, char *err, size_t errlen);

/* Limits (a server sets them from grammar.max_enum and grammar.max_bytes;
 * a schema over one is refused naming it). Defaults: 20,000 enum values, a
 * 1 MiB grammar. The conversion is linear in the schema (enums: n log n,
 * as a trie of their values, one rule per branching point). */
typedef struct {
    int max_enum;              /* values of one enum (0: no limit) */
    size_t max_bytes;          /* the grammar text */
} js_limits;
js_limits js_default_limits(void);
char *js_schema_to_gbnf_limited(const void *schema, const js_limits *lim, char *err, size_t errlen);

#endif
