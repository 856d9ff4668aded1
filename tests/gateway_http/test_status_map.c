/* test_status_map.c — the one table from engine failure kind to client codes
 * (gateway/status_map.h): each engine_status against the HTTP status, OpenAI
 * code and type and the specd.v1 WebSocket code it must give, every row
 * filled and in its own slot, a value outside the enum answered as a server
 * error, and the OpenAI error body built from a row. */
#include "gateway/openai_response.h"
#include "gateway/status_map.h"
#include "tests/testutil.h"

#include <jansson.h>
#include <string.h>

static const struct {
    engine_status st;
    int http;
    const char *oa_code, *oa_type, *ws_code;
} want[] = {
    {ENGINE_OK, 200, "", "", ""},
    {ENGINE_ERR_INVALID, 400, "invalid_request", "invalid_request_error", "invalid_request"},
    {ENGINE_ERR_OOM, 500, "engine_error", "server_error", "engine_error"},
    {ENGINE_ERR_CONTEXT_FULL, 400, "context_length_exceeded", "invalid_request_error", "prompt_too_long"},
    {ENGINE_ERR_QUEUE_FULL, 429, "overloaded", "server_error", "overloaded"},
    {ENGINE_ERR_SHUTTING_DOWN, 503, "shutting_down", "server_error", "shutting_down"},
    {ENGINE_ERR_BACKEND, 500, "engine_error", "server_error", "engine_error"},
    {ENGINE_ERR_GRAMMAR, 400, "invalid_grammar", "invalid_request_error", "invalid_grammar"},
};

int main(void) {
    int n = (int)(sizeof(want) / sizeof(want[0]));
    CHECKF(n == ENGINE_STATUS_COUNT, "%d rows expected, the enum has %d", n, ENGINE_STATUS_COUNT);
    for (int i = 0; i < n; i++) {
        const gw_status_row *r = gw_status_lookup(want[i].st);
        const char *name = engine_status_name(want[i].st);
        CHECKF(r && r->status == want[i].st, "%s: row for status %d", name, r ? (int)r->status : -1);
        if (!r) continue;
        CHECKF(r->http_status == want[i].http, "%s: http %d, want %d", name, r->http_status, want[i].http);
        CHECKF(r->oa_code && !strcmp(r->oa_code, want[i].oa_code), "%s: openai code %s", name, r->oa_code);
        CHECKF(r->oa_type && !strcmp(r->oa_type, want[i].oa_type), "%s: openai type %s", name, r->oa_type);
        CHECKF(r->ws_code && !strcmp(r->ws_code, want[i].ws_code), "%s: ws code %s", name, r->ws_code);
        CHECKF(strcmp(name, "?") != 0, "status %d has no name", (int)want[i].st);
        /* failures are client errors (4xx) or server errors (5xx), never success */
        if (want[i].st != ENGINE_OK)
            CHECKF(r->http_status >= 400 && r->http_status < 600 && r->oa_code[0] && r->ws_code[0], "%s", name);
    }
    /* outside the enum: a server error, not a crash or a success */
    const gw_status_row *bad = gw_status_lookup((engine_status)ENGINE_STATUS_COUNT);
    CHECK(bad && bad->http_status == 500 && !strcmp(bad->ws_code, "engine_error"));
    bad = gw_status_lookup((engine_status)-1);
    CHECK(bad && bad->http_status == 500);
    CHECK(!strcmp(engine_status_name((engine_status)ENGINE_STATUS_COUNT), "?"));

    /* the OpenAI body the HTTP path builds from a row */
    const gw_status_row *q = gw_status_lookup(ENGINE_ERR_QUEUE_FULL);
    oa_error oe = {.status = q->http_status, .code = q->oa_code, .type = q->oa_type};
    snprintf(oe.message, sizeof(oe.message), "the engine's queue is full");
    char *body = oa_error_json(&oe);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_t *e = j ? json_object_get(j, "error") : NULL;
    CHECK(e && !strcmp(json_string_value(json_object_get(e, "code")), "overloaded") &&
          !strcmp(json_string_value(json_object_get(e, "type")), "server_error"));
    json_decref(j);
    free(body);
    TEST_DONE();
}
