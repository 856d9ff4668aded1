/* json_range.h — JSON Schema numeric bounds (minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum) as a GBNF expression: exactly the
 * JSON numbers in the interval, integers without leading zeros (at most 16
 * digits, like the schema grammar's number rule), fractions with 1-16 digits
 * and no trailing zero, no exponent. Integer ranges are split into runs of
 * equal digit count and each run into digit-by-digit prefixes (the classic
 * range-to-pattern construction). A `number` with a bound that is not an
 * integer is refused (say so in the message); an empty interval is refused.
 * Reentrant. */
#ifndef SPECD_GATEWAY_JSON_RANGE_H
#define SPECD_GATEWAY_JSON_RANGE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    bool has_lo, lo_excl, has_hi, hi_excl;
    double lo, hi;
} js_bounds;

/* malloc'd GBNF expression (one parenthesised group) for the integers
 * (integer) or numbers in b, or NULL with the reason in err. */
char *js_range_to_gbnf(bool integer, const js_bounds *b, char *err, size_t errlen);

#endif
