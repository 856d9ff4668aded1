/* pair_load.h — a pair with its built-in proposers: the target, the draft
 * model when a file is given (draft_model.h) and the prompt lookup
 * (draft_ngram.h), each built by its own constructor and installed in its
 * slot; the pair itself (spec.h) only opens the target and sizes what is
 * installed, through the proposer table (drafter.h). The engine adds Medusa
 * and EAGLE heads to the loaded pair the same way (engine.c).
 *
 * Threading: the caller's thread; the pair then belongs to one thread. */
#ifndef SPECD_PAIR_LOAD_H
#define SPECD_PAIR_LOAD_H

#include "engine/spec/spec.h"

#include <stdio.h>

/* Loads the pair. draft_path may be NULL. A draft that does not fit in memory
 * (its weights, scratch or KV pool: the brief's "draft model OOM on GPU") is
 * dropped with a warning on `log` and draft_oom set: the pair decodes plainly,
 * as if no draft were given. Refuses a draft whose tokenizer differs from the
 * target's, naming the first differing token. Prints the draft memory share
 * to `log` (NULL: quiet) with a warning above the limit. Returns NULL with
 * err filled and the kind in *st (errkind.h; st may be NULL): ENGINE_ERR_OOM
 * when the target, its KV pool or the step scratch do not fit,
 * ENGINE_ERR_INVALID for a bad file, a refused draft or n-gram lengths
 * outside 1..NGRAM_MAX_N; ENGINE_OK on success (a dropped draft included). be
 * must outlive the pair. */
spec_pair *spec_pair_load(const char *target_path, const char *draft_path, backend *be,
                          const spec_pair_params *pp, FILE *log, engine_status *st, char *err, size_t errlen);

#endif
