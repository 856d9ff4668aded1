/* draft_ngram.h — prompt-lookup drafting as a drafter (drafter.h): proposes
 * the continuation of the longest earlier occurrence (latest among equals) of
 * the sequence's last n tokens, n from ngram_max down to ngram_min, searched
 * over the prompt and everything generated so far. No model: proposals are
 * deterministic chains (q is a point mass), so acceptance is the point-mass
 * case of the lossless rule (accept.h).
 *
 * Index: per sequence and per n, an open-addressing hash table from the
 * n-gram ending at position e to the latest such e (only positions whose
 * continuation is known, e <= n_tokens - 2), filled incrementally from the
 * accepted tokens; a lookup hashes the last ngram_max tokens once and probes
 * one table per n: O(ngram_max) work at any context length. Tables are sized
 * for the sequence's longest context at seq_create; nothing allocates after.
 *
 * Threading: engine thread only. */
#ifndef SPECD_DRAFT_NGRAM_H
#define SPECD_DRAFT_NGRAM_H

#include "engine/spec/drafter.h"

#define NGRAM_MAX_N 8

/* A drafter for vocabularies of n_vocab with lookup lengths
 * 1 <= ngram_min <= ngram_max <= NGRAM_MAX_N (0: the defaults 2 and 5, so
 * each may be given alone). NULL when out of memory or the lengths are
 * invalid. */
drafter *draft_ngram_create(int n_vocab, int ngram_min, int ngram_max);

/* The lookup alone (for benchmarks and tests): indexes tokens up to n_tokens
 * and returns the position e of the latest longest earlier match of the last
 * n tokens (the proposal is tokens[e+1 ...]), with its n in *match_n, or -1
 * (*match_n = 0) when there is none. */
int draft_ngram_lookup(drafter *d, drafter_seq *ds, const int32_t *tokens, int n_tokens, int *match_n);

#endif
