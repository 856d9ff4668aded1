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
 * shortage.
 *
 * The enum itself (engine_status, engine_status_name, engine_status_set) is
 * a public value type and lives in engine.h, the bottom of the engine's
 * headers; internals that want only the failure kinds include this file. */
#ifndef SPECD_ENGINE_ERRKIND_H
#define SPECD_ENGINE_ERRKIND_H

#include "engine/engine.h"

#endif
