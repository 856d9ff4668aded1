/* suggest.h — "did you mean ...?" for names a person typed (config keys,
 * protocol fields): the closest known name by case-insensitive edit distance.
 * Pure functions; any thread; nothing allocates. */
#ifndef SPECD_POLICY_SUGGEST_H
#define SPECD_POLICY_SUGGEST_H

#include <stddef.h>

/* Levenshtein distance between a and b, ASCII case folded; 99 when either is
 * longer than 40 bytes (too long to be a typo of a name). */
size_t pol_edit_distance(const char *a, const char *b);

/* The name among names[0..n) closest to word within distance 2 (the first of
 * equally close ones), or NULL when none is that close. */
const char *pol_suggest(const char *word, const char *const *names, int n);

#endif
