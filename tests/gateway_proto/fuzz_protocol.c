/* fuzz_protocol.c — libFuzzer target for the /v1/stream request path without
 * sockets: gw_parse + validation under two limit sets, the invariants an
 * accepted message must satisfy, and the serializers fed the raw bytes (every
 * frame must be JSON that jansson reads back). Crashes via __builtin_trap. */
#include "gateway/protocol.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static const char *const codes[] = {GW_ERR_INVALID_JSON, GW_ERR_NOT_OBJECT, GW_ERR_UNKNOWN_TYPE,
                                    GW_ERR_MISSING_FIELD, GW_ERR_WRONG_TYPE, GW_ERR_OUT_OF_RANGE,
                                    GW_ERR_MESSAGE_TOO_LARGE, GW_ERR_NO_DRAFT, GW_ERR_INTERNAL, GW_ERR_UNKNOWN_FIELD};

static json_t *reload(const char *s) {
    json_error_t je;
    return json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
}

/* An id text must decode to a string of 1..GW_ID_MAX bytes or an integer. */
static void check_id(const char *id) {
    if (!id[0]) return;
    json_t *j = reload(id);
    REQUIRE(j);
    REQUIRE((json_is_string(j) && json_string_length(j) >= 1 && json_string_length(j) <= GW_ID_MAX) ||
            json_is_integer(j));
    json_decref(j);
}

static void check_frame(char *f, const char *id) {
    REQUIRE(f);
    json_t *j = reload(f);
    REQUIRE(j && json_is_object(j));
    if (id && id[0]) {
        json_t *want = reload(id);
        REQUIRE(want && json_equal(want, json_object_get(j, "id")));
        json_decref(want);
    }
    json_decref(j);
    free(f);
}

static void check_ok(const gw_msg *m, const gw_limits *lim) {
    REQUIRE(m->type == GW_MSG_GENERATE || m->type == GW_MSG_CANCEL || m->type == GW_MSG_PING);
    REQUIRE(m->type == GW_MSG_PING || m->id[0]);
    check_id(m->id);
    if (m->type != GW_MSG_GENERATE) {
        REQUIRE(!m->prompt && !m->messages && !m->req.stop[0] && !m->content_type);
        return;
    }
    const engine_request *r = &m->req;
    REQUIRE((m->prompt != NULL) != (m->messages != NULL));
    if (m->prompt) REQUIRE(r->prompt_text == m->prompt && strlen(m->prompt) == m->prompt_len);
    REQUIRE((m->n_messages > 0) == (m->messages != NULL));
    for (int i = 0; i < m->n_messages; i++) {
        REQUIRE(m->messages[i].role <= GW_ROLE_ASSISTANT);
        REQUIRE(strlen(m->messages[i].content) == m->messages[i].content_len);
    }
    REQUIRE(sampler_config_validate(&r->sc, NULL, 0));
    REQUIRE(r->max_tokens >= 1 && r->max_tokens <= lim->max_tokens_limit);
    if (lim->max_ctx > 0) REQUIRE(r->max_tokens < lim->max_ctx);
    REQUIRE(r->gamma == 0 || (r->gamma >= lim->gamma_min && r->gamma <= lim->gamma_max));
    REQUIRE(r->mode == SPEC_MODE_AUTO || r->mode == SPEC_MODE_OFF || (r->mode == SPEC_MODE_DRAFT && lim->has_draft));
    REQUIRE(m->seed_set || r->seed == 0);
    int n = 0;
    while (n < ENGINE_MAX_STOP && r->stop[n]) {
        size_t len = strlen(r->stop[n]);
        REQUIRE(len >= 1 && len < ENGINE_STOP_LEN && r->stop[n] == m->stop_owned[n]);
        n++;
    }
    for (int i = n; i < ENGINE_MAX_STOP; i++) REQUIRE(!r->stop[i] && !m->stop_owned[i]);
    if (m->content_type) {
        size_t len = strlen(m->content_type);
        REQUIRE(r->content_type == m->content_type && len >= 1 && len < GW_CONTENT_TYPE_MAX);
    } else {
        REQUIRE(!r->content_type);
    }
    /* echo the prompt through an error frame */
    check_frame(gw_json_error(m->id, GW_ERR_INTERNAL, m->prompt ? m->prompt : ""), m->id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gw_limits lims[2];
    lims[0] = gw_limits_default();
    lims[1] = gw_limits_default();
    lims[1].has_draft = true;
    lims[1].max_ctx = 100;
    lims[1].max_message_bytes = 4096;
    lims[1].gamma_min = 1;
    lims[1].gamma_max = GAMMA_MAX;
    for (int k = 0; k < 2; k++) {
        gw_msg m;
        gw_error e;
        int rc = gw_parse((const char *)data, size, &lims[k], &m, &e);
        if (rc == 0) {
            REQUIRE(e.code == NULL);
            check_ok(&m, &lims[k]);
            gw_msg moved = m; /* moves are allowed */
            gw_msg_free(&moved);
        } else {
            REQUIRE(rc == -1 && e.code && e.message[0]);
            bool known = false;
            for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) known |= strcmp(e.code, codes[i]) == 0;
            REQUIRE(known);
            REQUIRE(!m.prompt && !m.messages && !m.content_type && !m.id[0]);
            check_id(e.id);
            check_frame(gw_json_error(e.id, e.code, e.message), e.id);
        }
    }

    /* the raw bytes as a tokens event's text: always JSON; valid UTF-8 comes back unchanged */
    static engine_event ev;
    static char buf[GW_TOKENS_JSON_MAX];
    ev.text_len = size < ENGINE_TEXT_MAX ? (int)size : ENGINE_TEXT_MAX;
    memcpy(ev.text, data, (size_t)ev.text_len);
    ev.n_tokens = size % (GAMMA_MAX + 2);
    for (int i = 0; i < ev.n_tokens; i++) ev.tokens[i] = (int32_t)(size * 2654435761u + (unsigned)i);
    size_t n = gw_write_tokens(buf, sizeof(buf), "1", &ev);
    REQUIRE(n < sizeof(buf) && strlen(buf) == n);
    json_t *j = reload(buf);
    REQUIRE(j);
    json_t *t = json_object_get(j, "text");
    REQUIRE(json_is_string(t));
    json_t *raw = json_stringn((const char *)data, (size_t)ev.text_len); /* NULL when not valid UTF-8 */
    if (raw) REQUIRE(json_equal(raw, t));
    else REQUIRE(json_string_length(t) >= 1);
    json_decref(raw);
    json_decref(j);
    return 0;
}
