/* grammar.h — constrained generation: a context-free grammar over bytes in
 * llama.cpp's GBNF syntax, compiled to a byte-level pushdown matcher, and the
 * per-state token masks speculation applies to the draft's q and the target's
 * p alike (the DESIGN's "constraints in lockstep").
 *
 * Not here: JSON Schema (gateway/json_schema.c turns a schema into GBNF text),
 * regular-expression shortcuts, or token-level (non-byte) grammars.
 *
 * Pieces and ownership:
 *   grammar          the compiled rules; immutable after grammar_parse.
 *   grammar_vocab    every token's byte string and a prefix trie over them,
 *                    built once per tokenizer.
 *   grammar_matcher  grammar x vocab: interned parser states, their
 *                    cached masks, and key masks (per stack top's upper
 *                    frames, shared by all states; grammar_matcher_prepare
 *                    makes them all up front). A state is an int32 id, so "copying the
 *                    state per draft position" is copying an int, and a
 *                    rollback is forgetting ids. Engine thread only (one
 *                    thread at a time); many sequences may share one matcher.
 *
 * Syntax accepted (a superset of llama.cpp's): `name ::= alternatives`;
 * `|` alternation; grouping `( )`; postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`;
 * literals "..." with escapes \n \r \t \\ \" \[ \] \- \/ \xHH \uHHHH
 * \UHHHHHHHH; character classes [a-z0-9_] [^"\\] over code points (UTF-8 in
 * the output); `.` any code point; `#` comments to the end of the line. A rule
 * ends where the next `name ::=` begins, so newlines are free inside rules.
 * The start rule is `root`. Refused with "line L, column C: reason": syntax
 * errors, undefined rules, left recursion (also through rules that can match
 * nothing), a rule that can never finish, and grammars over the size bounds. */
#ifndef SPECD_GRAMMAR_H
#define SPECD_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h" /* grammar_json_gbnf */

struct tokenizer;

#define GRAMMAR_MAX_TEXT (1u << 20)      /* grammar source bytes */
#define GRAMMAR_MAX_ELEMENTS (1u << 20)  /* compiled elements (after repetition expansion) */
#define GRAMMAR_MAX_RULES (1 << 20)      /* rules, helper rules of repetitions and groups included */
#define GRAMMAR_DEAD (-1)                /* the state id of "no continuation" (only end-of-generation is allowed there) */

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_matcher grammar_matcher;

/* Size limits of one grammar (a server sets them from its config: the
 * *_key strings name the setting in messages; NULL: "grammar.max_*").
 * Parsing is linear in the text and the expanded size (hash tables for rule
 * names and byte sets, Knuth's shortest-derivation pass for minimum lengths). */
typedef struct {
    size_t max_bytes;          /* source text, at most GRAMMAR_MAX_TEXT */
    int max_rules;             /* rules after expansion, at most GRAMMAR_MAX_RULES */
    size_t max_elements;       /* elements after expansion, at most GRAMMAR_MAX_ELEMENTS */
    const char *bytes_key, *rules_key, *elements_key;
} grammar_limits;
grammar_limits grammar_default_limits(void); /* the compile-time maxima */

/* Parses and compiles GBNF text[0..len). Returns NULL with "line L, column C:
 * reason" in err (a limit names its setting). The caller owns the result.
 * grammar_parse uses grammar_default_limits(). */
grammar *grammar_parse(const char *text, size_t len, char *err, size_t errlen);
grammar *grammar_parse_limited(const char *text, size_t len, const grammar_limits *lim, char *err, size_t errlen);
void grammar_destroy(grammar *g); /* NULL is fine */
int grammar_n_rules(const grammar *g);

/* grammar_json_gbnf (the GBNF of JSON mode) is public: engine.h. */

/* Token byte strings: from a tokenizer (tok_piece bytes: "▁" is a space,
 * byte tokens are their byte, BPE maps back to raw bytes; control, unused and
 * empty tokens are never allowed, end-of-generation tokens are allowed exactly
 * where the grammar may end), or from explicit strings (tests, benchmarks).
 * NULL on allocation failure. */
grammar_vocab *grammar_vocab_create(const struct tokenizer *t);
grammar_vocab *grammar_vocab_from_strings(int n, const char *const *s, const int *len, const bool *eog);
void grammar_vocab_destroy(grammar_vocab *v); /* NULL is fine */
int grammar_vocab_size(const grammar_vocab *v);
/* Whether every single byte is some token: then a grammar can always be
 * finished one byte a token (the token budget rule below relies on it). */
bool grammar_vocab_has_all_bytes(const grammar_vocab *v);
int grammar_vocab_trie_nodes(const grammar_vocab *v);
int grammar_vocab_max_len(const grammar_vocab *v); /* the longest token's bytes (0 for NULL) */

/* A matcher for g over v; both must outlive it. NULL on allocation failure. */
grammar_matcher *grammar_matcher_create(const grammar *g, const grammar_vocab *v);
void grammar_matcher_destroy(grammar_matcher *m); /* NULL is fine */

/* Makes the key masks of every stack top the grammar can produce (a byte
 * position with its rule's continuation positions, G_KEY_FRAMES frames
 * deep, in grammar_mask.c), so that a state seen for the first time costs an OR of
 * its tops' key masks and a check of their few context-dependent tokens, not
 * a walk of the vocabulary trie. One trie walk per key (bounded: at most
 * 16384 keys, 16M trie nodes and 8M closure steps, so a pathological grammar
 * costs under a few seconds); keys not made here are made on first use.
 * Also touches the first 8 MiB of the mask cache, so new states do not pay
 * page faults. Returns
 * the keys made, -1 on allocation failure or a bound (masks stay right: the
 * rest is done on first use or by whole walks). Engine thread only. */
int grammar_matcher_prepare(grammar_matcher *m);
/* The same, stopping at clock_now_ms() > deadline_ms (0: no deadline):
 * then -2 (the masks stay right; the rest is made on use). */
int grammar_matcher_prepare_until(grammar_matcher *m, double deadline_ms);
/* The memory m holds now (its grammar's compiled form included; it grows
 * as new states are seen). Engine thread, or whoever owns m. */
size_t grammar_matcher_bytes(const grammar_matcher *m);

/* The state before any output. */
int32_t grammar_start(grammar_matcher *m);
/* The state after bytes s[0..n) from state st, GRAMMAR_DEAD if they leave the
 * language (or st is dead, or the matcher hit its state bound). */
int32_t grammar_advance_bytes(grammar_matcher *m, int32_t st, const uint8_t *s, int n);
/* The same for one token's bytes. An end-of-generation token keeps an
 * accepting state (the output is complete) and kills any other. */
int32_t grammar_advance_token(grammar_matcher *m, int32_t st, int32_t token);
/* Whether the output may end in st (the root rule is complete). */
bool grammar_accepting(const grammar_matcher *m, int32_t st);
/* The fewest bytes that complete the output from st (0: accepting). */
int grammar_min_remaining(const grammar_matcher *m, int32_t st);

/* Token budget: budget >= 0 also refuses tokens after which the output could
 * not be completed in the remaining budget - 1 tokens (counting one byte per
 * token, see grammar_vocab_has_all_bytes), so an output cut by max_tokens is
 * still complete. budget < 0: no limit. */

/* The allowed-token bitmap ((V + 31) / 32 words; bit t of word t/32) of st
 * under budget. Cached per state (the budget-limited variant only when the
 * budget is close enough to matter, which is not cached). The pointer is
 * valid until the next grammar_mask* call on m. */
const uint32_t *grammar_mask(grammar_matcher *m, int32_t st, int budget);
/* Sets logits[t] = -INFINITY for every token grammar_mask refuses. */
void grammar_mask_logits(grammar_matcher *m, int32_t st, int budget, float *logits);
/* Whether token t is allowed in st under budget (a mask lookup). */
bool grammar_allows(grammar_matcher *m, int32_t st, int budget, int32_t t);

/* Counters for benchmarks and reports. */
typedef struct {
    uint64_t masks, mask_hits, walks, nodes_visited, states, stack_nodes;
    uint64_t subtrees_skipped;  /* trie subtrees a walk took whole (a state that maps every byte below to itself) */
    uint64_t keys;              /* key masks made (one trie walk each; see grammar_matcher_prepare) */
    uint64_t cd_checked;        /* context-dependent tokens a mask stepped through the real state */
    uint64_t key_bytes;         /* memory of the key masks */
} grammar_stats;
void grammar_matcher_stats(const grammar_matcher *m, grammar_stats *out);

#endif
