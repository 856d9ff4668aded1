/* json_schema.h — JSON Schema (the subset structured-output users send) to a
 * GBNF grammar (engine/grammar.h) whose every complete output is a JSON
 * document valid against the schema.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, or
 * an array of them), properties, required, additionalProperties (false, true
 * or a schema; with properties, only the declared ones are generated), items,
 * minItems/maxItems, minLength/maxLength, enum, const, anyOf, oneOf (as
 * anyOf: the branches are not checked for exclusivity), $ref to
 * #/$defs/NAME or #/definitions/NAME (recursion allowed), string formats
 * date, time, date-time and uuid (dates only generate days 01-28); annotations (title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, strict)
 * are ignored. Properties come out in schema order, required ones always.
 * Anything else (pattern, minimum, maximum, multipleOf, allOf, not, if,
 * patternProperties, prefixItems, uniqueItems, other formats, ...) is refused
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
