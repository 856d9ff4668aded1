/* json_regex.h — a JSON Schema `pattern` (an ECMAScript regular expression)
 * as a GBNF expression over the *content* of a JSON string: every string the
 * expression generates, put between quotes, is a JSON string whose decoded
 * value the pattern matches (a `"` or `\` the pattern allows comes out
 * escaped, control characters as \n \t \r \f \u00XX escapes).
 *
 * Supported: literals and escapes (\. \\ \/ \n \t \r \f \v \xHH \uHHHH and
 * the other punctuation escapes), `.` (any character but line terminators),
 * classes [a-z0-9_] [^...] with \d \w \s inside, \d \w \s \D \W \S, groups
 * ( ) (?: ) (?<name> ), alternation |, quantifiers * + ? {m} {m,} {m,n}
 * (lazy forms generate the same strings), `^` at the start and `$` at the
 * end (a side without its anchor lets any characters through, as JSON
 * Schema's unanchored match does). Refused with a message naming the
 * construct: backreferences, lookaround, word boundaries (\b \B), Unicode
 * property escapes (\p), anchors inside the pattern, counts over 10000.
 * Linear in the pattern's length. Reentrant. */
#ifndef SPECD_GATEWAY_JSON_REGEX_H
#define SPECD_GATEWAY_JSON_REGEX_H

#include <stddef.h>

/* The GBNF expression (one parenthesised group, referring to no rules) for
 * pattern[0..len); malloc'd, or NULL with the reason in err. */
char *js_regex_to_gbnf(const char *pattern, size_t len, char *err, size_t errlen);

#endif
