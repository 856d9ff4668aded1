/* constrain.h — the engine's constrained-generation cache: one vocabulary
 * trie per tokenizer (built at the first constrained request) and a few
 * compiled grammars with their matchers keyed by the GBNF text, so JSON mode
 * and a schema used again start with warm masks.
 *
 * Threading: engine thread only (matchers are mutable). */
#ifndef SPECD_CONSTRAIN_H
#define SPECD_CONSTRAIN_H

#include "engine/grammar.h"

#include <stddef.h>

struct tokenizer;
typedef struct constrain_cache constrain_cache;

/* t must outlive the cache. NULL on allocation failure. */
constrain_cache *constrain_cache_create(const struct tokenizer *t);
void constrain_cache_destroy(constrain_cache *c); /* NULL is fine; no matcher may be held */

/* The matcher of GBNF text[0..len), compiled on first use; the caller holds
 * it until constrain_release. NULL with err when the text does not compile
 * (grammar_parse's message) or on allocation failure. Entries nobody holds
 * are evicted beyond CONSTRAIN_ENTRIES. */
#define CONSTRAIN_ENTRIES 16
grammar_matcher *constrain_acquire(constrain_cache *c, const char *text, size_t len, char *err, size_t errlen);
void constrain_release(constrain_cache *c, grammar_matcher *m); /* NULL is fine */

#endif
