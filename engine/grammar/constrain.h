/* constrain.h — the engine's constrained-generation cache: one vocabulary
 * trie per tokenizer (built at the first constrained request) and compiled
 * grammars with their matchers keyed by the GBNF text, so JSON mode and a
 * schema used again start with warm masks.
 *
 * Bounded by bytes, not by count: every entry's memory (its grammar and
 * matcher, which grows as generation meets new states) is measured when it is
 * compiled and each time a holder lets it go; entries nobody holds are evicted,
 * least recently used first, while the total is over cache_bytes, and their
 * memory is freed (and handed back to the system) at once.
 *
 * Compilation is bounded too (constrain_limits): the grammar's size limits,
 * a compile deadline and a memory ceiling per grammar; a grammar over one is
 * refused with a message naming the setting.
 *
 * Threading: constrain_acquire compiles and may run on any one thread (the
 * engine's compile worker); the cache's table is under its own mutex. A
 * matcher itself is mutable and used by the engine thread only, between
 * acquire and release; constrain_release and the stats are safe anywhere. */
#ifndef SPECD_CONSTRAIN_H
#define SPECD_CONSTRAIN_H

#include "engine/grammar/grammar.h"

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
typedef struct constrain_cache constrain_cache;

typedef struct {
    grammar_limits grammar;    /* text bytes, rules, elements */
    double compile_ms;         /* a parse + matcher preparation past this is refused (0: no deadline) */
    size_t matcher_bytes;      /* a compiled grammar larger than this is refused (0: no ceiling) */
    size_t cache_bytes;        /* entries nobody holds are evicted past this total */
} constrain_limits;

/* Defaults: the grammar's compile-time maxima, 10 s, 256 MiB per grammar, a
 * 256 MiB cache. */
constrain_limits constrain_default_limits(void);

/* t must outlive the cache. NULL on allocation failure. */
constrain_cache *constrain_cache_create(const struct tokenizer *t, const constrain_limits *lim);
void constrain_cache_destroy(constrain_cache *c); /* NULL is fine; no matcher may be held */

/* The matcher of GBNF text[0..len), compiled on first use; the caller holds
 * it until constrain_release. NULL with err when the text does not compile
 * (grammar_parse's message), is over a limit, or memory ran out (*oom set
 * then; oom may be NULL). info (may be NULL) gets the grammar's shortest
 * document, measured while it was compiled. */
typedef struct {
    int min_bytes;             /* the grammar's shortest document, in bytes */
    int min_tokens;            /* the fewest tokens that could hold it (all of the vocabulary's longest token) */
} constrain_info;
grammar_matcher *constrain_acquire(constrain_cache *c, const char *text, size_t len, char *err, size_t errlen,
                                   bool *oom, constrain_info *info);
/* Lets m go (NULL is fine). Call on the thread that used m last. */
void constrain_release(constrain_cache *c, grammar_matcher *m);

typedef struct {
    uint64_t bytes;            /* memory of the cached grammars (as last measured) */
    uint64_t entries, held;    /* grammars cached, of them held by requests */
    uint64_t compiles, hits, evictions, refused;
    double compile_ms_max;     /* the slowest compile so far */
} constrain_stats;
void constrain_cache_stats(constrain_cache *c, constrain_stats *out);

#endif
