/* unicode_tables.h — the Unicode character classes the BPE pre-tokenizers need:
 * letter (\p{L}), number (\p{N}), punctuation (\p{P}) and white space (\s). Pure functions over
 * constant tables; callable from any thread. */
#ifndef SPECD_UNICODE_TABLES_H
#define SPECD_UNICODE_TABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    UNI_OTHER = 0,
    UNI_L = 1, /* general category L* (Lu, Ll, Lt, Lm, Lo) */
    UNI_N = 2, /* general category N* (Nd, Nl, No) */
} uni_class;

/* Class of code point cp (any value; out-of-range values are UNI_OTHER). */
uni_class uni_classify(uint32_t cp);
/* An inclusive code point range, and whether cp lies in one of n sorted,
 * disjoint ranges (binary search). */
typedef struct { uint32_t lo, hi; } uni_span;
bool uni_in_spans(const uni_span *spans, size_t n, uint32_t cp);

/* Is cp in general category P* (\p{P})? */
bool uni_is_punct(uint32_t cp);
/* Is cp White_Space (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680,
 * U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000)? */
bool uni_is_space(uint32_t cp);

#endif
