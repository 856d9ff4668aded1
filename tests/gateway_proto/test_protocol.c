/* test_protocol.c — the /v1/stream protocol layer without sockets: every parser
 * error code, every valid message shape, id echo, and the serializers' frames
 * read back with jansson (an independent JSON reader). */
#include "gateway/protocol.h"
#include "tests/testutil.h"

#include <jansson.h>
#include <float.h>
#include <math.h>
#include <string.h>

static gw_limits L;

static int parse(const char *s, gw_msg *m, gw_error *e) { return gw_parse(s, strlen(s), &L, m, e); }

/* Expects a parse failure with `code`; returns the error for more checks. */
#define EXPECT_ERR(json, want)                                                                                      \
    do {                                                                                                            \
        gw_msg m_;                                                                                                  \
        int rc_ = parse(json, &m_, &e);                                                                             \
        CHECKF(rc_ == -1 && e.code && strcmp(e.code, want) == 0, "%s: rc %d code %s (want %s) msg '%s'", json, rc_, \
               e.code ? e.code : "(null)", want, e.message);                                                        \
        CHECKF(e.message[0] != '\0', "%s: empty message", json);                                                    \
        CHECK(m_.prompt == NULL && m_.messages == NULL && m_.id[0] == '\0');                                        \
        if (rc_ == 0) gw_msg_free(&m_);                                                                             \
    } while (0)

#define EXPECT_OK(json, m)                                                                                          \
    do {                                                                                                            \
        int rc_ = parse(json, m, &e);                                                                               \
        CHECKF(rc_ == 0, "%s: %s: %s", json, e.code ? e.code : "?", e.message);                                     \
    } while (0)

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) fprintf(stderr, "jansson rejects our frame: %s: %s\n", je.text, s);
    return j;
}

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static long long jint(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void test_valid_shapes(void) {
    gw_error e;
    gw_msg m;

    EXPECT_OK("{\"type\":\"generate\",\"id\":\"a1\",\"prompt\":\"Hello\"}", &m);
    CHECK(m.type == GW_MSG_GENERATE);
    CHECK(strcmp(m.id, "\"a1\"") == 0);
    CHECK(m.prompt && strcmp(m.prompt, "Hello") == 0 && m.prompt_len == 5);
    CHECK(m.req.prompt_text == m.prompt && m.req.prompt == NULL && m.req.n_special_spans == 0);
    CHECK(m.messages == NULL && m.n_messages == 0);
    CHECK(m.req.max_tokens == L.default_max_tokens);
    sampler_config d = sampler_config_default();
    CHECK(m.req.sc.temperature == d.temperature && m.req.sc.top_k == d.top_k && m.req.sc.top_p == d.top_p &&
          m.req.sc.min_p == d.min_p);
    CHECK(!m.seed_set && m.req.seed == 0);
    CHECK(m.req.mode == SPEC_MODE_AUTO && m.req.gamma == 0 && !m.req.adaptive_set);
    CHECK(m.req.content_type == NULL && m.req.stop[0] == NULL);
    gw_msg_free(&m);
    CHECK(m.prompt == NULL && m.type == 0);

    gw_limits ld = L;
    ld.has_draft = true;
    const char *full = "{\"type\":\"generate\",\"id\":7,\"prompt\":\"x\",\"max_tokens\":100,\"temperature\":0.7,"
                       "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":12345678901,\"stop\":[\"\\n\\n\",\"END\"],"
                       "\"speculation\":{\"mode\":\"draft\",\"gamma\":5,\"adaptive\":false},\"content_type\":\"code\"}";
    CHECK(gw_parse(full, strlen(full), &ld, &m, &e) == 0);
    CHECK(strcmp(m.id, "7") == 0);
    CHECK(m.req.max_tokens == 100);
    CHECK(m.req.sc.temperature == 0.7f && m.req.sc.top_p == 0.9f && m.req.sc.top_k == 40 && m.req.sc.min_p == 0.05f);
    CHECK(m.seed_set && m.req.seed == 12345678901ull);
    CHECK(m.req.stop[0] && strcmp(m.req.stop[0], "\n\n") == 0 && strcmp(m.req.stop[1], "END") == 0 &&
          m.req.stop[2] == NULL);
    CHECK(m.req.mode == SPEC_MODE_DRAFT && m.req.gamma == 5 && m.req.adaptive_set && !m.req.adaptive);
    CHECK(m.req.content_type && strcmp(m.req.content_type, "code") == 0);
    /* moving by value transfers ownership; the pointers stay valid */
    gw_msg moved = m;
    memset(&m, 0xAB, sizeof(m));
    CHECK(strcmp(moved.req.stop[1], "END") == 0 && strcmp(moved.prompt, "x") == 0);
    gw_msg_free(&moved);

    EXPECT_OK("{\"type\":\"generate\",\"id\":\"c\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
              "{\"role\":\"user\",\"content\":\"Hi \\u00e9\",\"name\":\"bob\"},{\"role\":\"assistant\",\"content\":\"\"}]}",
              &m);
    CHECK(m.prompt == NULL && m.req.prompt_text == NULL);
    CHECK(m.n_messages == 3 && m.messages);
    if (m.n_messages == 3) {
        CHECK(m.messages[0].role == GW_ROLE_SYSTEM && strcmp(m.messages[0].content, "Be brief.") == 0);
        CHECK(m.messages[1].role == GW_ROLE_USER && strcmp(m.messages[1].content, "Hi \xC3\xA9") == 0 &&
              m.messages[1].content_len == 5);
        CHECK(m.messages[2].role == GW_ROLE_ASSISTANT && m.messages[2].content_len == 0);
        CHECK(strcmp(gw_role_name(m.messages[2].role), "assistant") == 0);
    }
    gw_msg_free(&m);

    /* stop as one string; empty stop list; null optional fields = absent; integral reals */
    EXPECT_OK("{\"type\":\"generate\",\"id\":\"s\",\"prompt\":\"p\",\"stop\":\"###\",\"max_tokens\":1e2,"
              "\"top_k\":3.0,\"seed\":0,\"temperature\":0}",
              &m);
    CHECK(m.req.stop[0] && strcmp(m.req.stop[0], "###") == 0 && m.req.stop[1] == NULL);
    CHECK(m.req.max_tokens == 100 && m.req.sc.top_k == 3 && m.seed_set && m.req.seed == 0);
    CHECK(m.req.sc.temperature == 0.0f);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":\"s\",\"prompt\":\"p\",\"stop\":[],\"temperature\":null,\"seed\":null,"
              "\"messages\":null,\"speculation\":{\"mode\":null,\"gamma\":null},\"content_type\":null}",
              &m);
    CHECK(m.req.stop[0] == NULL && !m.seed_set && m.req.sc.temperature == 1.0f && m.req.content_type == NULL);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":\"s\",\"prompt\":\"p\",\"stop\":[\"a\",\"b\",\"c\",\"d\"],"
              "\"speculation\":{\"mode\":\"off\",\"adaptive\":true}}",
              &m);
    CHECK(m.req.stop[3] && strcmp(m.req.stop[3], "d") == 0);
    CHECK(m.req.mode == SPEC_MODE_OFF && m.req.adaptive_set && m.req.adaptive);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":\"s\",\"prompt\":\"p\",\"speculation\":{\"mode\":\"auto\"}}", &m);
    CHECK(m.req.mode == SPEC_MODE_AUTO);
    gw_msg_free(&m);
    /* tree speculation: refused while the server has trees off, bounded by its bounds when on */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree\":\"auto\"}}",
               GW_ERR_OUT_OF_RANGE);
    CHECKF(strstr(e.message, "tree speculation is off on this server (speculation.tree)"), "%s", e.message);
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree\":\"off\"}}", &m);
    CHECK(m.req.tree == ENGINE_TREE_OFF);
    gw_msg_free(&m);
    {
        gw_limits keep = L;
        L.tree = ENGINE_TREE_AUTO, L.tree_budget = 16, L.tree_depth = 5, L.tree_topk = 3;
        EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree\":\"fixed\","
                  "\"tree_budget\":8,\"tree_depth\":4,\"tree_topk\":2}}", &m);
        CHECK(m.req.tree == ENGINE_TREE_FIXED && m.req.tree_budget == 8 && m.req.tree_depth == 4 && m.req.tree_topk == 2);
        gw_msg_free(&m);
        EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree_budget\":17}}",
                   GW_ERR_OUT_OF_RANGE);
        CHECKF(!strcmp(e.message, "field 'speculation.tree_budget' must be an integer in [1, 16] (the server's tree "
                                  "bounds), got 17"), "%s", e.message);
        EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree\":\"wide\"}}",
                   GW_ERR_OUT_OF_RANGE);
        EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"tree_topk\":1.5}}",
                   GW_ERR_WRONG_TYPE);
        L = keep;
    }
    /* bounds are inclusive where documented */
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":4096,\"top_p\":1,\"min_p\":0,"
              "\"speculation\":{\"gamma\":8}}",
              &m);
    CHECK(m.req.max_tokens == 4096 && m.req.gamma == 8);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":2}}", &m);
    CHECK(m.req.gamma == 2);
    gw_msg_free(&m);

    /* the default max_tokens is clamped to the context */
    gw_limits lc = L;
    lc.max_ctx = 64;
    const char *g = "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\"}";
    CHECK(gw_parse(g, strlen(g), &lc, &m, &e) == 0 && m.req.max_tokens == 63);
    gw_msg_free(&m);

    EXPECT_OK("{\"type\":\"cancel\",\"id\":\"a1\"}", &m);
    CHECK(m.type == GW_MSG_CANCEL && strcmp(m.id, "\"a1\"") == 0 && m.prompt == NULL);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"ping\"}", &m);
    CHECK(m.type == GW_MSG_PING && m.id[0] == '\0');
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"ping\",\"id\":99}", &m);
    CHECK(m.type == GW_MSG_PING && strcmp(m.id, "99") == 0);
    gw_msg_free(&m);
    /* a cancel carries only type and id: generate fields are unknown there */
    EXPECT_ERR("{\"type\":\"cancel\",\"id\":3,\"temperature\":-5}", GW_ERR_UNKNOWN_FIELD);
    /* not NUL-terminated input: only len bytes are read */
    const char *pad = "{\"type\":\"ping\"}garbage";
    CHECK(gw_parse(pad, 15, &L, &m, &e) == 0 && m.type == GW_MSG_PING);
    gw_msg_free(&m);
    /* NULL limits = defaults */
    CHECK(gw_parse(g, strlen(g), NULL, &m, &e) == 0 && m.req.max_tokens == gw_limits_default().default_max_tokens);
    gw_msg_free(&m);
    gw_msg_free(NULL);
    CHECK(strcmp(gw_msg_type_name(GW_MSG_CANCEL), "cancel") == 0);
}

/* The id comes back as JSON text that decodes to what the client sent. */
static void test_id_echo(void) {
    gw_error e;
    gw_msg m;
    struct {
        const char *json_id;  /* as the client writes it */
        const char *value;    /* the decoded string (NULL: integer) */
        long long ival;
    } cases[] = {
        {"\"plain\"", "plain", 0},
        {"\"q\\\"uo\\\\te\\/s\"", "q\"uo\\te/s", 0},
        {"\"nl\\n tab\\t \\u0001 \\u001f\"", "nl\n tab\t \x01 \x1f", 0},
        {"\"\\u00e9\\ud83d\\ude00\"", "\xC3\xA9\xF0\x9F\x98\x80", 0},
        {"42", NULL, 42},
        {"-7", NULL, -7},
        {"9007199254740993", NULL, 9007199254740993ll},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[256];
        snprintf(buf, sizeof(buf), "{\"type\":\"generate\",\"id\":%s,\"prompt\":\"p\"}", cases[i].json_id);
        EXPECT_OK(buf, &m);
        json_t *j = load(m.id);
        CHECKF(j != NULL, "id text %s", m.id);
        if (j && cases[i].value) CHECKF(json_is_string(j) && strcmp(json_string_value(j), cases[i].value) == 0, "%s", m.id);
        if (j && !cases[i].value) CHECK(json_is_integer(j) && json_integer_value(j) == cases[i].ival);
        /* the id inside a frame decodes the same */
        char *f = gw_json_pong(m.id);
        json_t *p = f ? load(f) : NULL;
        CHECK(p && json_equal(json_object_get(p, "id"), j));
        json_decref(p);
        free(f);
        json_decref(j);
        gw_msg_free(&m);
    }
    /* canonical: the same string written two ways gives the same text; the
     * string "42" and the integer 42 differ */
    gw_msg a, b;
    EXPECT_OK("{\"type\":\"cancel\",\"id\":\"abc\"}", &a);
    EXPECT_OK("{\"type\":\"cancel\",\"id\":\"\\u0061bc\"}", &b);
    CHECK(strcmp(a.id, b.id) == 0);
    gw_msg_free(&a);
    gw_msg_free(&b);
    EXPECT_OK("{\"type\":\"cancel\",\"id\":\"42\"}", &a);
    EXPECT_OK("{\"type\":\"cancel\",\"id\":42}", &b);
    CHECK(strcmp(a.id, b.id) != 0);
    gw_msg_free(&a);
    gw_msg_free(&b);

    /* worst case: 100 control bytes fit GW_ID_JSON_MAX */
    char buf[1024], *o = buf;
    o += sprintf(o, "{\"type\":\"cancel\",\"id\":\"");
    for (int i = 0; i < GW_ID_MAX; i++) o += sprintf(o, "\\u0002");
    sprintf(o, "\"}");
    EXPECT_OK(buf, &m);
    CHECK(strlen(m.id) == (size_t)GW_ID_MAX * 6 + 2 && strlen(m.id) < GW_ID_JSON_MAX);
    gw_msg_free(&m);
}

static void test_errors(void) {
    gw_error e;
    gw_msg m;

    /* message_too_large: the limit is inclusive */
    gw_limits small = L;
    small.max_message_bytes = 15;
    const char *ping = "{\"type\":\"ping\"}"; /* 15 bytes */
    CHECK(gw_parse(ping, 15, &small, &m, &e) == 0);
    gw_msg_free(&m);
    small.max_message_bytes = 14;
    CHECK(gw_parse(ping, 15, &small, &m, &e) == -1 && strcmp(e.code, GW_ERR_MESSAGE_TOO_LARGE) == 0);
    CHECK(strstr(e.message, "15 bytes") && strstr(e.message, "14"));

    EXPECT_ERR("", GW_ERR_INVALID_JSON);
    EXPECT_ERR("{", GW_ERR_INVALID_JSON);
    EXPECT_ERR("{\"type\":\"ping\"} x", GW_ERR_INVALID_JSON);
    EXPECT_ERR("{\"type\":\"ping\",\"type\":\"ping\"}", GW_ERR_INVALID_JSON);                  /* duplicate key */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"a\\u0000b\"}", GW_ERR_INVALID_JSON); /* NUL in a string */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"\xFF\"}", GW_ERR_INVALID_JSON);       /* bad UTF-8 */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"seed\":99999999999999999999999}", GW_ERR_INVALID_JSON);
    CHECK(strstr(e.message, "line 1"));
    CHECK(gw_parse(NULL, 0, &L, &m, &e) == -1 && strcmp(e.code, GW_ERR_INVALID_JSON) == 0);

    EXPECT_ERR("[]", GW_ERR_NOT_OBJECT);
    EXPECT_ERR("42", GW_ERR_NOT_OBJECT);
    EXPECT_ERR("\"generate\"", GW_ERR_NOT_OBJECT);
    EXPECT_ERR("null", GW_ERR_NOT_OBJECT);

    EXPECT_ERR("{\"type\":\"bogus\",\"id\":\"r\"}", GW_ERR_UNKNOWN_TYPE);
    CHECK(strcmp(e.id, "\"r\"") == 0 && strstr(e.message, "bogus"));
    EXPECT_ERR("{\"type\":\"Generate\"}", GW_ERR_UNKNOWN_TYPE);
    CHECK(e.id[0] == '\0');

    EXPECT_ERR("{}", GW_ERR_MISSING_FIELD);
    CHECK(strstr(e.message, "'type'"));
    EXPECT_ERR("{\"type\":\"generate\",\"prompt\":\"p\"}", GW_ERR_MISSING_FIELD);
    CHECK(strstr(e.message, "'id'"));
    EXPECT_ERR("{\"type\":\"cancel\"}", GW_ERR_MISSING_FIELD);
    EXPECT_ERR("{\"type\":\"cancel\",\"id\":null}", GW_ERR_MISSING_FIELD);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":\"m\"}", GW_ERR_MISSING_FIELD);
    CHECK(strstr(e.message, "'prompt'") && strcmp(e.id, "\"m\"") == 0);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"messages\":[{\"content\":\"x\"}]}", GW_ERR_MISSING_FIELD);
    CHECK(strstr(e.message, "messages[0].role"));
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]}",
               GW_ERR_MISSING_FIELD);
    CHECK(strstr(e.message, "messages[1].content"));

    const char *wrong[] = {
        "{\"type\":5}",
        "{\"type\":\"ping\",\"id\":true}",
        "{\"type\":\"cancel\",\"id\":1.5}",
        "{\"type\":\"cancel\",\"id\":{}}",
        "{\"type\":\"cancel\",\"id\":[1]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":[\"a\"]}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":\"hi\"}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":[5]}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":1,\"content\":\"x\"}]}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":\"10\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":1.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":true}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature\":\"hot\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature\":false}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":true}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"min_p\":[]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_k\":2.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"seed\":\"1\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"seed\":1.25}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"a\",1]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":\"off\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"mode\":3}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":\"4\"}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":4.5}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"adaptive\":1}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"content_type\":7}",
    };
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) EXPECT_ERR(wrong[i], GW_ERR_WRONG_TYPE);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":\"w\",\"prompt\":\"p\",\"max_tokens\":\"10\"}", GW_ERR_WRONG_TYPE);
    CHECKF(strcmp(e.message, "field 'max_tokens' must be an integer, got \"10\"") == 0, "%s", e.message);
    CHECK(strcmp(e.id, "\"w\"") == 0);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"a\",1]}", GW_ERR_WRONG_TYPE);
    CHECKF(strstr(e.message, "'stop[1]'"), "%s", e.message);

    /* unknown_field: a typo is refused with the closest field, never defaulted */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":\"u\",\"prompt\":\"p\",\"max_token\":5}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'max_token' (did you mean 'max_tokens'?)") == 0, "%s", e.message);
    CHECK(strcmp(e.id, "\"u\"") == 0);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"Temperature\":0}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'Temperature' (did you mean 'temperature'?)") == 0, "%s", e.message);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"frobnicate\":null}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'frobnicate'") == 0, "%s", e.message);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gama\":4}}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'speculation.gama' (did you mean 'speculation.gamma'?)") == 0, "%s",
           e.message);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
               "{\"role\":\"user\",\"contents\":\"b\"}]}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'messages[1].contents' (did you mean 'messages[1].content'?)") == 0, "%s",
           e.message);
    EXPECT_ERR("{\"type\":\"cancel\",\"id\":1,\"prompt\":\"p\"}", GW_ERR_UNKNOWN_FIELD);
    EXPECT_ERR("{\"type\":\"ping\",\"idd\":1}", GW_ERR_UNKNOWN_FIELD);
    CHECKF(strcmp(e.message, "unknown field 'idd' (did you mean 'id'?)") == 0, "%s", e.message);
    /* the split-sampling keys keep their own explanation */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"draft_temperature\":0.5}", GW_ERR_OUT_OF_RANGE);
    /* every defined field together is fine (see test_valid_shapes for their values) */
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":3,\"temperature\":0,\"top_p\":1,"
              "\"top_k\":0,\"min_p\":0,\"seed\":1,\"stop\":\"x\",\"speculation\":{\"mode\":\"auto\",\"gamma\":4,"
              "\"adaptive\":true},\"content_type\":\"chat\",\"messages\":null}", &m);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"cancel\",\"id\":1}", &m);
    gw_msg_free(&m);
    /* issue 22: seeds take any 64-bit integer in both protocols; a negative one wraps as in the OpenAI API */
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"seed\":-1}", &m);
    CHECK(m.seed_set && m.req.seed == UINT64_MAX);
    gw_msg_free(&m);

    /* out_of_range, with the precise messages for the common ones */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":\"t\",\"prompt\":\"p\",\"temperature\":-1}", GW_ERR_OUT_OF_RANGE);
    /* issue 22: one range for both protocols (fields.c), temperature in [0, 2] as OpenAI's */
    CHECKF(strcmp(e.message, "field 'temperature' must be a number in [0, 2] (0 = greedy), got -1") == 0, "%s",
           e.message);
    CHECK(strcmp(e.id, "\"t\"") == 0);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":4097}", GW_ERR_OUT_OF_RANGE);
    CHECKF(strcmp(e.message, "field 'max_tokens' must be an integer in [1, 4096], got 4097") == 0, "%s", e.message);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":12}}", GW_ERR_OUT_OF_RANGE);
    CHECKF(strcmp(e.message, "field 'speculation.gamma' must be an integer in [2, 8] (the policy bounds), got 12") == 0,
           "%s", e.message);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":1.0000001}", GW_ERR_OUT_OF_RANGE);
    CHECKF(strstr(e.message, "got 1.0000001"), "%s", e.message);
    const char *range[] = {
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature\":1e39}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature\":-0.0001}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":0}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":1.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":1e-50}", /* 0 as a float */
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_p\":-0.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"min_p\":1}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"min_p\":0.99999999999}", /* 1 as a float */
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"min_p\":-0.1}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_k\":-1}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"top_k\":3000000000}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":0}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":-3}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature\":2.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":1}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"gamma\":0}}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"mode\":\"fast\"}}",
        "{\"type\":\"cancel\",\"id\":\"\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":\"\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"ok\",\"\"]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":[]}",
        "{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"content_type\":\"bad type!\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"content_type\":\"\"}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"draft_temperature\":0.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"temperature_draft\":0.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"target_temperature\":0.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"draft_top_p\":0.5}",
        "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"speculation\":{\"draft_temperature\":0}}",
    };
    for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++) EXPECT_ERR(range[i], GW_ERR_OUT_OF_RANGE);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"draft_temperature\":0.5}", GW_ERR_OUT_OF_RANGE);
    CHECKF(strstr(e.message, "draft and target share one sampling config"), "%s", e.message);

    /* string lengths at and past the limits */
    char buf[512], s[128];
    memset(s, 'x', sizeof(s));
    snprintf(buf, sizeof(buf), "{\"type\":\"cancel\",\"id\":\"%.*s\"}", GW_ID_MAX, s);
    EXPECT_OK(buf, &m);
    gw_msg_free(&m);
    snprintf(buf, sizeof(buf), "{\"type\":\"cancel\",\"id\":\"%.*s\"}", GW_ID_MAX + 1, s);
    EXPECT_ERR(buf, GW_ERR_OUT_OF_RANGE);
    snprintf(buf, sizeof(buf), "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":\"%.*s\"}", ENGINE_STOP_LEN - 1,
             s);
    EXPECT_OK(buf, &m);
    CHECK(m.req.stop[0] && strlen(m.req.stop[0]) == ENGINE_STOP_LEN - 1);
    gw_msg_free(&m);
    snprintf(buf, sizeof(buf), "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"%.*s\"]}", ENGINE_STOP_LEN,
             s);
    EXPECT_ERR(buf, GW_ERR_OUT_OF_RANGE);
    snprintf(buf, sizeof(buf), "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"content_type\":\"%.*s\"}",
             GW_CONTENT_TYPE_MAX, s);
    EXPECT_ERR(buf, GW_ERR_OUT_OF_RANGE);

    /* max_tokens bounded by the context as well */
    gw_limits lc = L;
    lc.max_ctx = 512;
    const char *mt = "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"max_tokens\":512}";
    CHECK(gw_parse(mt, strlen(mt), &lc, &m, &e) == -1 && strcmp(e.code, GW_ERR_OUT_OF_RANGE) == 0);
    CHECKF(strstr(e.message, "[1, 511]") && strstr(e.message, "context"), "%s", e.message);

    /* no_draft: mode draft needs a draft model */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":\"d\",\"prompt\":\"p\",\"speculation\":{\"mode\":\"draft\"}}",
               GW_ERR_NO_DRAFT);
    CHECK(strcmp(e.id, "\"d\"") == 0);

    /* errors in messages free what was built so far (checked under ASan) */
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
               "{\"role\":\"user\",\"content\":\"b\"},{\"role\":\"x\",\"content\":\"c\"}]}",
               GW_ERR_OUT_OF_RANGE);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"stop\":[\"a\",\"b\"],\"content_type\":\"code\","
               "\"speculation\":{\"gamma\":99}}",
               GW_ERR_OUT_OF_RANGE);
}

static void test_serializers(void) {
    char *f;
    json_t *j;

    f = gw_json_start("\"r1\"", "123e4567-e89b-42d3-a456-426614174000", 17, 2.5);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "type"), "start") == 0 && strcmp(jstr(j, "id"), "r1") == 0);
    CHECK(j && strcmp(jstr(j, "session"), "123e4567-e89b-42d3-a456-426614174000") == 0);
    CHECK(j && jint(j, "prompt_tokens") == 17 && jnum(j, "queue_ms") == 2.5);
    json_decref(j);
    free(f);
    f = gw_json_start("5", "u", 1, NAN);
    j = f ? load(f) : NULL;
    CHECK(j && jint(j, "id") == 5 && json_is_null(json_object_get(j, "queue_ms")));
    json_decref(j);
    free(f);

    /* tokens: text with escapes, NUL, valid multibyte, and invalid UTF-8 */
    engine_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = ENGINE_EV_TOKENS;
    const char text[] = "q\"b\\ n\n\x01\x7f \xC3\xA9\xF0\x9F\x99\x82 "
                        "\xFF|\xE2\x82|\xC0\xAF|\xED\xA0\x80|\xF4\x90\x80\x80|\xF0\x9F\x99";
    const char want[] = "q\"b\\ n\n\x01\x7f \xC3\xA9\xF0\x9F\x99\x82 "
                        "\xEF\xBF\xBD|\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|"
                        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD";
    ev.text_len = (int)sizeof(text) - 1 + 2;
    memcpy(ev.text, text, sizeof(text) - 1);
    ev.text[sizeof(text) - 1] = '\0'; /* an embedded NUL byte */
    ev.text[sizeof(text)] = 'z';
    ev.n_tokens = 3;
    ev.tokens[0] = 10, ev.tokens[1] = 20, ev.tokens[2] = 30;
    ev.n_accepted = 2;
    ev.gamma = 4;
    ev.last_is_correction = true;
    f = gw_json_tokens("\"r1\"", &ev);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "type"), "tokens") == 0);
    json_t *jt = j ? json_object_get(j, "text") : NULL;
    size_t wl = sizeof(want) - 1;
    CHECKF(jt && json_string_length(jt) == wl + 2 && memcmp(json_string_value(jt), want, wl) == 0 &&
               json_string_value(jt)[wl] == '\0' && json_string_value(jt)[wl + 1] == 'z',
           "text round trip: %s", f);
    json_t *ids = j ? json_object_get(j, "token_ids") : NULL;
    CHECK(ids && json_array_size(ids) == 3 && json_integer_value(json_array_get(ids, 2)) == 30);
    CHECK(j && jint(j, "accepted") == 2 && jint(j, "gamma") == 4 && strcmp(jstr(j, "last"), "correction") == 0);
    json_decref(j);
    free(f);
    ev.last_is_correction = false, ev.last_is_bonus = true;
    f = gw_json_tokens("\"r1\"", &ev);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "last"), "bonus") == 0);
    json_decref(j);
    free(f);
    ev.last_is_bonus = false, ev.gamma = 0, ev.n_accepted = 0;
    f = gw_json_tokens("\"r1\"", &ev);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "last"), "sample") == 0 && jint(j, "gamma") == 0);
    json_decref(j);

    /* gw_write_* agrees with gw_json_*, measures, and truncates like snprintf */
    char buf[GW_TOKENS_JSON_MAX];
    size_t n = gw_write_tokens(buf, sizeof(buf), "\"r1\"", &ev);
    CHECK(f && n == strlen(f) && strcmp(buf, f) == 0);
    CHECK(gw_write_tokens(NULL, 0, "\"r1\"", &ev) == n);
    char small[10];
    memset(small, '#', sizeof(small));
    CHECK(gw_write_tokens(small, sizeof(small), "\"r1\"", &ev) == n);
    CHECK(small[9] == '\0' && strncmp(small, f, 9) == 0);
    free(f);

    /* worst-case sizes stay within the documented bounds */
    char id[GW_ID_JSON_MAX], *o = id;
    *o++ = '"';
    for (int i = 0; i < GW_ID_MAX; i++) o += sprintf(o, "\\u0001");
    *o++ = '"';
    *o = '\0';
    memset(&ev, 0, sizeof(ev));
    ev.text_len = ENGINE_TEXT_MAX;
    memset(ev.text, 0x01, ENGINE_TEXT_MAX);
    ev.n_tokens = GAMMA_MAX + 1;
    for (int i = 0; i <= GAMMA_MAX; i++) ev.tokens[i] = INT32_MIN;
    ev.n_accepted = INT32_MIN, ev.gamma = INT32_MIN, ev.last_is_correction = true;
    n = gw_write_tokens(buf, sizeof(buf), id, &ev);
    CHECKF(n < GW_TOKENS_JSON_MAX, "worst tokens frame %zu bytes", n);
    j = load(buf);
    CHECK(j != NULL);
    json_decref(j);
    /* out-of-range lengths are clamped, not trusted */
    ev.text_len = 1 << 20, ev.n_tokens = 1000;
    CHECK(gw_write_tokens(buf, sizeof(buf), id, &ev) < GW_TOKENS_JSON_MAX);
    ev.text_len = -5, ev.n_tokens = -1;
    n = gw_write_tokens(buf, sizeof(buf), NULL, &ev);
    j = load(buf);
    CHECK(j && json_string_length(json_object_get(j, "text")) == 0 && json_object_get(j, "id") == NULL);
    json_decref(j);

    /* done */
    memset(&ev, 0, sizeof(ev));
    ev.type = ENGINE_EV_FINISHED;
    ev.reason = FINISH_STOP;
    ev.completion_tokens = 40;
    ev.ttft_ms = 12.25, ev.tpot_ms = 3.5;
    spec_stats *st = &ev.st;
    st->verify_steps = 10, st->plain_steps = 2, st->drafted = 45, st->accepted = 30, st->rejections = 8;
    st->tokens = 40, st->fallbacks = 1, st->probes = 2, st->draft_failures = 0, st->kv_resets = 3;
    st->draft_ms = 100.5, st->target_ms = 200.25;
    st->pos_reached[0] = 10, st->pos_accepted[0] = 9, st->pos_reached[1] = 9, st->pos_accepted[1] = 7;
    st->pos_reached[4] = 3, st->pos_accepted[4] = 1;
    f = gw_json_done("\"r1\"", 17, &ev);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "type"), "done") == 0 && strcmp(jstr(j, "id"), "r1") == 0);
    CHECK(j && strcmp(jstr(j, "finish_reason"), "stop") == 0);
    json_t *u = j ? json_object_get(j, "usage") : NULL;
    CHECK(u && jint(u, "prompt_tokens") == 17 && jint(u, "completion_tokens") == 40 && jint(u, "total_tokens") == 57);
    CHECK(j && jnum(j, "ttft_ms") == 12.25 && jnum(j, "tpot_ms") == 3.5);
    CHECKF(j && fabs(jnum(j, "alpha") - spec_stats_alpha(st)) < 1e-4, "alpha %g vs %g", jnum(j, "alpha"),
           spec_stats_alpha(st));
    CHECK(j && fabs(jnum(j, "mean_accepted") - spec_stats_mean_accepted(st)) < 1e-4);
    CHECK(j && fabs(jnum(j, "tokens_per_pass") - spec_stats_tokens_per_pass(st)) < 1e-4);
    CHECK(j && jnum(j, "gamma_used") == 4.5);
    json_t *sp = j ? json_object_get(j, "speculation") : NULL;
    CHECK(sp && jint(sp, "verify_steps") == 10 && jint(sp, "plain_steps") == 2 && jint(sp, "drafted") == 45 &&
          jint(sp, "accepted") == 30 && jint(sp, "rejections") == 8 && jint(sp, "tokens") == 40);
    CHECK(sp && jint(sp, "fallbacks") == 1 && jint(sp, "probes") == 2 && jint(sp, "kv_resets") == 3 &&
          jnum(sp, "draft_ms") == 100.5 && jnum(sp, "target_ms") == 200.25);
    json_t *pp = sp ? json_object_get(sp, "per_position") : NULL;
    CHECK(pp && json_array_size(pp) == 5);
    if (pp && json_array_size(pp) == 5) {
        CHECK(jint(json_array_get(pp, 0), "position") == 1 && jint(json_array_get(pp, 0), "accepted") == 9);
        CHECK(jint(json_array_get(pp, 2), "drafted") == 0);
        CHECK(jint(json_array_get(pp, 4), "position") == 5 && jint(json_array_get(pp, 4), "drafted") == 3);
    }
    json_decref(j);
    free(f);
    /* plain decoding: no verify steps, no division by zero */
    memset(&ev, 0, sizeof(ev));
    ev.reason = FINISH_CANCELLED;
    f = gw_json_done("1", 3, &ev);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "finish_reason"), "cancelled") == 0 && jnum(j, "alpha") == 0 &&
          json_array_size(json_object_get(json_object_get(j, "speculation"), "per_position")) == 0);
    json_decref(j);
    free(f);
    const engine_finish reasons[] = {FINISH_LENGTH, FINISH_ERROR};
    const char *rnames[] = {"length", "error"};
    for (int i = 0; i < 2; i++) {
        ev.reason = reasons[i];
        f = gw_json_done("1", 3, &ev);
        j = f ? load(f) : NULL;
        CHECK(j && strcmp(jstr(j, "finish_reason"), rnames[i]) == 0);
        CHECK(strcmp(engine_finish_name(reasons[i]), rnames[i]) == 0);
        json_decref(j);
        free(f);
    }
    /* worst case done */
    memset(&ev, 0xFF, sizeof(ev));
    ev.reason = FINISH_ERROR;
    ev.prompt_tokens = ev.completion_tokens = INT32_MIN;
    ev.ttft_ms = ev.tpot_ms = ev.st.draft_ms = ev.st.target_ms = -9.99e14;
    char dbuf[GW_DONE_JSON_MAX];
    n = gw_write_done(dbuf, sizeof(dbuf), id, INT32_MIN, &ev);
    CHECKF(n < GW_DONE_JSON_MAX, "worst done frame %zu bytes", n);
    /* jansson reads integers up to INT64_MAX only: check the syntax with those */
    memset(&ev.st, 0x7F, sizeof(ev.st));
    ev.st.draft_ms = ev.st.target_ms = 1.5;
    gw_write_done(dbuf, sizeof(dbuf), id, INT32_MIN, &ev);
    j = load(dbuf);
    CHECK(j != NULL);
    json_decref(j);

    /* error and pong, with and without an id */
    f = gw_json_error("\"r\\\"1\"", GW_ERR_OUT_OF_RANGE, "field 'x' must be \"y\"\n");
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "type"), "error") == 0 && strcmp(jstr(j, "id"), "r\"1") == 0);
    CHECK(j && strcmp(jstr(j, "code"), "out_of_range") == 0 && strcmp(jstr(j, "message"), "field 'x' must be \"y\"\n") == 0);
    json_decref(j);
    free(f);
    f = gw_json_error(NULL, GW_ERR_INVALID_JSON, "bad");
    j = f ? load(f) : NULL;
    CHECK(j && json_object_get(j, "id") == NULL && json_object_size(j) == 3);
    json_decref(j);
    free(f);
    f = gw_json_error("", NULL, NULL);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "code"), "internal") == 0 && json_object_get(j, "id") == NULL);
    json_decref(j);
    free(f);
    f = gw_json_pong(NULL);
    CHECK(f && strcmp(f, "{\"type\":\"pong\"}") == 0);
    free(f);
    f = gw_json_pong("12");
    CHECK(f && strcmp(f, "{\"type\":\"pong\",\"id\":12}") == 0);
    free(f);

    /* a parse error round-trips into an error frame tagged with the id */
    gw_error e;
    gw_msg m;
    const char *bad = "{\"type\":\"generate\",\"id\":\"x\\\"y\",\"prompt\":\"p\",\"temperature\":-2}";
    CHECK(gw_parse(bad, strlen(bad), &L, &m, &e) == -1);
    f = gw_json_error(e.id, e.code, e.message);
    j = f ? load(f) : NULL;
    CHECK(j && strcmp(jstr(j, "id"), "x\"y") == 0 && strcmp(jstr(j, "code"), "out_of_range") == 0);
    CHECK(j && strstr(jstr(j, "message"), "temperature"));
    json_decref(j);
    free(f);
}

static void test_uuid(void) {
    char a[37], b[37];
    CHECK(gw_uuid4(a) == 0 && gw_uuid4(b) == 0);
    CHECK(strlen(a) == 36 && strcmp(a, b) != 0);
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) CHECK(a[i] == '-');
        else CHECK((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'));
    }
    CHECK(a[14] == '4');
    CHECK(strchr("89ab", a[19]) != NULL);
}

/* logprobs / top_logprobs on generate, and the tokens frame's "logprobs". */
static void test_logprobs(void) {
    gw_error e;
    gw_msg m;
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"logprobs\":true,\"top_logprobs\":5}", &m);
    CHECK(m.req.logprobs && m.req.top_logprobs == 5);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"logprobs\":false,\"top_logprobs\":0}", &m);
    CHECK(!m.req.logprobs && m.req.top_logprobs == 0);
    gw_msg_free(&m);
    EXPECT_OK("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\"}", &m);
    CHECK(!m.req.logprobs && m.req.top_logprobs == 0);
    gw_msg_free(&m);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"logprobs\":1}", GW_ERR_WRONG_TYPE);
    CHECK(strstr(e.message, "logprobs"));
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"logprobs\":true,\"top_logprobs\":21}", GW_ERR_OUT_OF_RANGE);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"logprobs\":true,\"top_logprobs\":-1}", GW_ERR_OUT_OF_RANGE);
    EXPECT_ERR("{\"type\":\"generate\",\"id\":1,\"prompt\":\"x\",\"top_logprobs\":3}", GW_ERR_OUT_OF_RANGE);
    CHECK(strstr(e.message, "needs 'logprobs'"));

    engine_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = ENGINE_EV_TOKENS;
    ev.text_len = 2, ev.text[0] = 'a', ev.text[1] = 'b';
    ev.n_tokens = 2, ev.tokens[0] = 7, ev.tokens[1] = 9;
    char *f = gw_json_tokens("\"r\"", &ev);
    json_t *j = f ? load(f) : NULL;
    CHECK(j && json_object_get(j, "logprobs") == NULL); /* not asked: not written */
    json_decref(j), free(f);
    ev.has_logprobs = true;
    ev.lp[0] = (spec_logprob){.logprob = -0.25f, .n_top = 2, .top_id = {7, 3}, .top_logprob = {-0.25f, -1.5f}};
    ev.lp[1] = (spec_logprob){.logprob = -INFINITY, .n_top = 0};
    f = gw_json_tokens("\"r\"", &ev);
    j = f ? load(f) : NULL;
    json_t *lp = j ? json_object_get(j, "logprobs") : NULL;
    CHECKF(lp && json_array_size(lp) == 2, "logprobs: %s", f);
    if (lp && json_array_size(lp) == 2) {
        json_t *a = json_array_get(lp, 0), *b = json_array_get(lp, 1), *top = json_object_get(a, "top_logprobs");
        CHECK(jint(a, "token_id") == 7 && jnum(a, "logprob") == -0.25 && json_array_size(top) == 2);
        CHECK(jint(json_array_get(top, 1), "token_id") == 3 && jnum(json_array_get(top, 1), "logprob") == -1.5);
        CHECK(jint(b, "token_id") == 9 && jnum(b, "logprob") == -9999 && json_array_size(json_object_get(b, "top_logprobs")) == 0);
    }
    json_decref(j), free(f);
    /* the worst case stays within GW_TOKENS_JSON_MAX */
    char id[GW_ID_JSON_MAX], *o = id;
    *o++ = '"';
    for (int i = 0; i < GW_ID_MAX; i++) o += sprintf(o, "\\u0001");
    *o++ = '"';
    *o = '\0';
    ev.text_len = ENGINE_TEXT_MAX;
    memset(ev.text, 0x01, ENGINE_TEXT_MAX);
    ev.n_tokens = GAMMA_MAX + 1;
    ev.n_accepted = INT32_MIN, ev.gamma = INT32_MIN;
    for (int i = 0; i <= GAMMA_MAX; i++) {
        ev.tokens[i] = INT32_MIN;
        ev.lp[i].logprob = -1234.5678f, ev.lp[i].n_top = 1000; /* clamped to SPEC_TOP_LOGPROBS */
        for (int k = 0; k < SPEC_TOP_LOGPROBS; k++) ev.lp[i].top_id[k] = INT32_MIN, ev.lp[i].top_logprob[k] = -8765.4321f;
    }
    static char buf[GW_TOKENS_JSON_MAX];
    size_t n = gw_write_tokens(buf, sizeof(buf), id, &ev);
    CHECKF(n < GW_TOKENS_JSON_MAX, "worst tokens frame with logprobs: %zu bytes, bound %d", n, (int)GW_TOKENS_JSON_MAX);
    j = load(buf);
    CHECK(j && json_array_size(json_object_get(json_array_get(json_object_get(j, "logprobs"), 0), "top_logprobs")) ==
                   SPEC_TOP_LOGPROBS);
    json_decref(j);
}

int main(void) {
    L = gw_limits_default();
    test_valid_shapes();
    test_id_echo();
    test_errors();
    test_serializers();
    test_logprobs();
    test_uuid();
    TEST_DONE();
}
