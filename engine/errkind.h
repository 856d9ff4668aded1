/* errkind.h — failure kinds as values. engine_status is what a request-time
 * failure was (engine_submit returns it; an error event carries it beside its
 * message), so a caller picks its reaction — the gateway its HTTP status and
 * WebSocket code (gateway/status_map.h) — from the kind, never from the words.
 *
 * Model loading still reports errors as strings (char *err, size_t errlen);
 * its one kind, a memory shortage, is a fixed prefix that err_is_oom() tests
 * (spec.c drops a draft that does not fit). */
#ifndef SPECD_ENGINE_ERRKIND_H
#define SPECD_ENGINE_ERRKIND_H

#include <stdbool.h>
#include <string.h>

/* What kind of failure a request met. Derived from the engine's refusals and
 * error events; a new kind is one value here and one row in the gateway's
 * table (gateway/status_map.c). Cancellation is not a failure: it ends with
 * a `finished` event, reason cancelled. */
typedef enum {
    ENGINE_OK = 0,
    ENGINE_ERR_INVALID,       /* a bad request: sampler config, max_tokens, γ bounds, empty prompt, token ids,
                               * stop strings, grammar, tree bounds, a method without its model */
    ENGINE_ERR_OOM,           /* memory ran out (the request's state, a grammar, a sequence at admission) */
    ENGINE_ERR_CONTEXT_FULL,  /* prompt + max_tokens can never fit the context or the KV pools */
    ENGINE_ERR_QUEUE_FULL,    /* max_waiting requests are already queued: retry later */
    ENGINE_ERR_SHUTTING_DOWN, /* the engine is stopping (engine_destroy has begun) */
    ENGINE_ERR_BACKEND,       /* a model pass failed (prefill, draft, verify) */
} engine_status;
#define ENGINE_STATUS_COUNT (ENGINE_ERR_BACKEND + 1)

/* A stable lower-case name ("ok", "invalid", "out_of_memory", "context_full",
 * "queue_full", "shutting_down", "backend"); "?" outside the enum. */
static inline const char *engine_status_name(engine_status st) {
    static const char *const names[ENGINE_STATUS_COUNT] = {"ok", "invalid", "out_of_memory", "context_full",
                                                           "queue_full", "shutting_down", "backend"};
    return (unsigned)st < ENGINE_STATUS_COUNT ? names[st] : "?";
}

/* Every allocation failure of model loading (gguf_read.c's mmap, model.c) and KV
 * pool creation (kv.c) puts this at the very start of err, before the path or
 * anything else, then says what did not fit: "out of memory: m.gguf: the cuda
 * backend cannot hold a 4096 x 32000 q8_0 tensor". No other failure starts
 * with it, so text taken from a file or a path cannot make a bad model read
 * as a shortage. A caller that wraps such an error keeps the prefix first. */
#define SPECD_ERR_OOM "out of memory: "

/* Whether err (not NULL) reports a memory shortage. */
static inline bool err_is_oom(const char *err) {
    return strncmp(err, SPECD_ERR_OOM, sizeof(SPECD_ERR_OOM) - 1) == 0;
}

#endif
