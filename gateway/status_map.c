/* status_map.c — engine failure kind -> HTTP status, OpenAI code/type and
 * WebSocket code (status_map.h). A new engine_status is one row here. */
#include "gateway/status_map.h"

#include "gateway/fields.h"

/* Indexed by engine_status. A prompt that can never fit the context is the
 * client's mistake: 400 with OpenAI's own code for it,
 * context_length_exceeded (the WebSocket frame names it prompt_too_long). */
static const gw_status_row rows[ENGINE_STATUS_COUNT] = {
    [ENGINE_OK] = {ENGINE_OK, 200, "", "", ""},
    [ENGINE_ERR_INVALID] = {ENGINE_ERR_INVALID, 400, "invalid_request", "invalid_request_error", "invalid_request"},
    [ENGINE_ERR_OOM] = {ENGINE_ERR_OOM, 500, "engine_error", "server_error", "engine_error"},
    [ENGINE_ERR_CONTEXT_FULL] = {ENGINE_ERR_CONTEXT_FULL, 400, "context_length_exceeded", "invalid_request_error",
                                 GW_ERR_PROMPT_TOO_LONG},
    [ENGINE_ERR_QUEUE_FULL] = {ENGINE_ERR_QUEUE_FULL, 429, "overloaded", "server_error", "overloaded"},
    [ENGINE_ERR_SHUTTING_DOWN] = {ENGINE_ERR_SHUTTING_DOWN, 503, "shutting_down", "server_error", "shutting_down"},
    [ENGINE_ERR_BACKEND] = {ENGINE_ERR_BACKEND, 500, "engine_error", "server_error", "engine_error"},
    [ENGINE_ERR_GRAMMAR] = {ENGINE_ERR_GRAMMAR, 400, GW_ERR_INVALID_GRAMMAR, "invalid_request_error", GW_ERR_INVALID_GRAMMAR},
};

const gw_status_row *gw_status_lookup(engine_status st) {
    return (unsigned)st < ENGINE_STATUS_COUNT ? &rows[st] : &rows[ENGINE_ERR_BACKEND];
}
