/* errkind.h — failure kinds as values. engine_status is what a failure was:
 * engine_submit returns it and an error event carries it beside its message,
 * so a caller picks its reaction — the gateway its HTTP status and WebSocket
 * code (gateway/status_map.h) — from the kind, never from the words.
 *
 * Loading speaks the same language: every loader (gguf_open, model_load,
 * kv_pool_create, the draft and Medusa loaders, spec_pair_load,
 * engine_create) returns NULL (or -1) with a message for a person in err and
 * the kind in an out-parameter `engine_status *st` (which may be NULL;
 * ENGINE_OK after a success): ENGINE_ERR_OOM when memory ran out (host or backend), ENGINE_ERR_INVALID
 * when the input is wrong. spec.c drops a draft that does not fit by that
 * value; text taken from a file or a path cannot make a bad model read as a
 * shortage. */
#ifndef SPECD_ENGINE_ERRKIND_H
#define SPECD_ENGINE_ERRKIND_H

/* What kind of failure a request met. Derived from the engine's refusals and
 * error events; a new kind is one value here and one row in the gateway's
 * table (gateway/status_map.c). Cancellation is not a failure: it ends with
 * a `finished` event, reason cancelled. */
typedef enum {
    ENGINE_OK = 0,
    ENGINE_ERR_INVALID,       /* a bad request: sampler config, max_tokens, γ bounds, empty prompt, token ids,
                               * stop strings, grammar, tree bounds, a method without its model; at load: a
                               * missing, unreadable, malformed or unsupported file, a bad shape or setting,
                               * a draft or Medusa heads that do not match the target */
    ENGINE_ERR_OOM,           /* memory ran out (the request's state, a grammar, a sequence at admission; at
                               * load: weights, scratch, tables or KV pools, in host or backend memory) */
    ENGINE_ERR_CONTEXT_FULL,  /* prompt + max_tokens can never fit the context or the KV pools */
    ENGINE_ERR_QUEUE_FULL,    /* max_waiting requests are already queued: retry later */
    ENGINE_ERR_SHUTTING_DOWN, /* the engine is stopping (engine_destroy has begun) */
    ENGINE_ERR_BACKEND,       /* a model pass failed (prefill, draft, verify); at start-up: the backend (a
                               * device) or the engine thread could not be started */
    ENGINE_ERR_GRAMMAR,       /* a request's grammar does not compile, is over a grammar.* limit, or its
                               * shortest document cannot fit max_tokens (found by the compile worker) */
} engine_status;
#define ENGINE_STATUS_COUNT (ENGINE_ERR_GRAMMAR + 1)

/* A stable lower-case name ("ok", "invalid", "out_of_memory", "context_full",
 * "queue_full", "shutting_down", "backend"); "?" outside the enum. */
static inline const char *engine_status_name(engine_status st) {
    static const char *const names[ENGINE_STATUS_COUNT] = {"ok", "invalid", "out_of_memory", "context_full",
                                                           "queue_full", "shutting_down", "backend", "grammar"};
    return (unsigned)st < ENGINE_STATUS_COUNT ? names[st] : "?";
}

/* *st = v where st is not NULL (a loader's st may be NULL). */
static inline void engine_status_set(engine_status *st, engine_status v) {
    if (st) *st = v;
}

#endif
