/* test_openai.c — the OpenAI-compatible JSON layer without sockets: valid and
 * invalid request bodies (every refusal is a 400 in OpenAI's error shape with
 * the right param and code), the builders' output parsed back by jansson field
 * by field, SSE framing, /v1/models, and UTF-8 repair. */
#include "gateway/openai_request.h"
#include "gateway/openai_response.h"
#include "tests/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static gw_limits lim(void) {
    return (gw_limits){.max_message_bytes = 4096, .max_tokens_limit = 1000, .default_max_tokens = 256,
                       .gamma_min = 2, .gamma_max = 8, .max_ctx = 0, .has_draft = true,
                       .tree = ENGINE_TREE_AUTO, .tree_budget = 16, .tree_depth = 5, .tree_topk = 3,
                       .max_choices = 4};
}

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    if (!j) fprintf(stderr, "not JSON: %s\n", s ? s : "(null)");
    return j;
}

static const char *sget(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* Checks an OpenAI error body: {"error":{"message":str,"type":type,"param":param|null,"code":code}}. */
static void check_error_body(const char *body, const char *type, const char *param, const char *code) {
    json_t *j = load(body);
    CHECK(j != NULL);
    if (!j) return;
    CHECK(json_object_size(j) == 1);
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_object(e) && json_object_size(e) == 4);
    CHECK(json_is_string(json_object_get(e, "message")) && strlen(sget(e, "message")) > 0);
    CHECKF(sget(e, "type") && !strcmp(sget(e, "type"), type), "type %s want %s", sget(e, "type"), type);
    if (param) CHECKF(sget(e, "param") && !strcmp(sget(e, "param"), param), "param %s want %s", sget(e, "param"), param);
    else CHECKF(json_is_null(json_object_get(e, "param")), "param should be null in %s", body);
    if (code) CHECKF(sget(e, "code") && !strcmp(sget(e, "code"), code), "code %s want %s", sget(e, "code"), code);
    json_decref(j);
}

typedef struct {
    bool chat;
    const char *body;
    const char *param; /* NULL: null */
    const char *code;
} bad_case;

static const bad_case bad[] = {
    {false, "", NULL, "invalid_json"},
    {false, "{\"prompt\":\"a\"", NULL, "invalid_json"},
    {false, "{\"prompt\":\"a\",\"prompt\":\"b\"}", NULL, "invalid_json"},
    {false, "[1,2]", NULL, "wrong_type"},
    {false, "\"hello\"", NULL, "wrong_type"},
    {false, "{}", "prompt", "missing_field"},
    {false, "{\"prompt\":null}", "prompt", "missing_field"},
    {false, "{\"prompt\":5}", "prompt", "wrong_type"},
    {false, "{\"prompt\":\"\"}", "prompt", "out_of_range"},
    {false, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "unsupported"},
    {false, "{\"prompt\":[1,2,3]}", "prompt", "unsupported"},
    {false, "{\"prompt\":[5]}", "prompt", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"model\":3}", "model", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"max_tokens\":1001}", "max_tokens", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"max_tokens\":-5}", "max_tokens", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"max_tokens\":\"10\"}", "max_tokens", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"max_tokens\":2.5}", "max_tokens", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"temperature\":-0.1}", "temperature", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"temperature\":2.5}", "temperature", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"top_p\":0}", "top_p", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"top_p\":1.5}", "top_p", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"top_k\":-1}", "top_k", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"min_p\":1}", "min_p", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"seed\":\"x\"}", "seed", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"stop\":5}", "stop", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"stop\":[\"\"]}", "stop", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"stop\":[\"a\",7]}", "stop", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage",
     "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":true}", "speculation", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"mode\":\"fast\"}}", "speculation.mode", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"mode\":1}}", "speculation.mode", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"gamma\":1}}", "speculation.gamma", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"gamma\":9}}", "speculation.gamma", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"gamma\":\"4\"}}", "speculation.gamma", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"adaptive\":\"no\"}}", "speculation.adaptive", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"tree\":\"big\"}}", "speculation.tree", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"tree\":true}}", "speculation.tree", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"tree_budget\":17}}", "speculation.tree_budget", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"tree_depth\":6}}", "speculation.tree_depth", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"speculation\":{\"tree_topk\":\"3\"}}", "speculation.tree_topk", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"content_type\":\"has space\"}", "content_type", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"n\":5}", "n", "out_of_range"}, /* over server.max_choices */
    {false, "{\"prompt\":\"a\",\"n\":0}", "n", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"n\":-1}", "n", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"n\":\"2\"}", "n", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"n\":1.5}", "n", "wrong_type"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":true}", "n", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"best_of\":3}", "best_of", "unsupported"},
    {false, "{\"prompt\":\"a\",\"echo\":true}", "echo", "unsupported"},
    {false, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"logprobs\":\"5\"}", "logprobs", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"logprobs\":2,\"top_logprobs\":2}", "top_logprobs", "unsupported"},
    {false, "{\"prompt\":\"a\",\"suffix\":\"x\"}", "suffix", "unsupported"},
    {false, "{\"prompt\":\"a\",\"presence_penalty\":2.5}", "presence_penalty", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"frequency_penalty\":\"1\"}", "frequency_penalty", "wrong_type"},
    {false, "{\"prompt\":\"a\",\"repeat_penalty\":0}", "repeat_penalty", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"repetition_penalty\":1.1,\"repeat_penalty\":1.2}", "repeat_penalty", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"repeat_last_n\":-2}", "repeat_last_n", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"logit_bias\":{\"50256\":-101}}", "logit_bias", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", "logit_bias", "out_of_range"},
    {false, "{\"prompt\":\"a\",\"logit_bias\":[1,2]}", "logit_bias", "wrong_type"},
    {false, "{\"prompt\":\"a\\u0000b\"}", NULL, "invalid_json"}, /* jansson refuses \u0000 without a flag */
    {true, "{\"prompt\":\"a\"}", "messages", "missing_field"},
    {true, "{\"messages\":{}}", "messages", "wrong_type"},
    {true, "{\"messages\":[]}", "messages", "out_of_range"},
    {true, "{\"messages\":[5]}", "messages[0]", "wrong_type"},
    {true, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "missing_field"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"robot\",\"content\":\"hi\"}]}",
     "messages[1].role", "out_of_range"},
    {true, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "missing_field"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":3}]}", "messages[0].content", "wrong_type"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
     "messages[0].content", "unsupported"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
     "messages[0].content", "wrong_type"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":0}",
     "max_completion_tokens", "out_of_range"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\"}]}", "tools",
     "wrong_type"}, /* tools are supported; a tool without a function is malformed */
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":1}", "logprobs", "wrong_type"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", "top_logprobs",
     "out_of_range"},
    {true, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":21}",
     "top_logprobs", "out_of_range"},
};

static void test_bad_bodies(void) {
    gw_limits L = lim();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        oa_request r;
        oa_error e;
        memset(&r, 0x5a, sizeof r);
        int rc = oa_parse(bad[i].chat, bad[i].body, strlen(bad[i].body), &L, &r, &e);
        CHECKF(rc == -1, "case %zu accepted: %s", i, bad[i].body);
        if (rc != -1) {
            oa_request_free(&r);
            continue;
        }
        CHECKF(e.status == 400, "case %zu: status %d", i, e.status);
        CHECK(r.prompt == NULL && r.messages == NULL && r.model == NULL); /* zeroed on failure */
        char *js = oa_error_json(&e);
        check_error_body(js, "invalid_request_error", bad[i].param, bad[i].code);
        free(js);
    }
    /* the size limit: 413 */
    char big[5000];
    memset(big, ' ', sizeof big);
    memcpy(big, "{\"prompt\":\"a\"}", 14);
    oa_request r;
    oa_error e;
    CHECK(oa_parse(false, big, sizeof big, &L, &r, &e) == -1 && e.status == 413);
    CHECK(!strcmp(e.code, "message_too_large"));
    char *js = oa_error_json(&e);
    check_error_body(js, "invalid_request_error", NULL, "message_too_large");
    free(js);
    /* n: the messages name the field and the limit */
    const char *n9 = "{\"prompt\":\"a\",\"n\":9}";
    CHECK(oa_parse(false, n9, strlen(n9), &L, &r, &e) == -1);
    CHECKF(!strcmp(e.message, "field 'n' must be an integer in [1, 4] (server.max_choices), got 9"), "%s", e.message);
    const char *ns = "{\"prompt\":\"a\",\"n\":\"2\"}";
    CHECK(oa_parse(false, ns, strlen(ns), &L, &r, &e) == -1);
    CHECKF(!strcmp(e.message, "field 'n' must be an integer, got \"2\""), "%s", e.message);
    /* draft mode without a draft model */
    L.has_draft = false;
    const char *nd = "{\"prompt\":\"a\",\"speculation\":{\"mode\":\"draft\"}}";
    CHECK(oa_parse(false, nd, strlen(nd), &L, &r, &e) == -1 && e.status == 400 && !strcmp(e.code, "no_draft"));
    /* max_tokens must leave room in the context */
    L = lim();
    L.max_ctx = 128;
    const char *mt = "{\"prompt\":\"a\",\"max_tokens\":128}";
    CHECK(oa_parse(false, mt, strlen(mt), &L, &r, &e) == -1 && !strcmp(e.param, "max_tokens"));
    const char *mt2 = "{\"prompt\":\"a\",\"max_tokens\":127}";
    CHECK(oa_parse(false, mt2, strlen(mt2), &L, &r, &e) == 0 && r.req.max_tokens == 127);
    oa_request_free(&r);
}

static void test_good_bodies(void) {
    gw_limits L = lim();
    oa_request r;
    oa_error e;
    /* every field */
    const char *full = "{\"model\":\"stories\",\"prompt\":[\"Once upon\"],\"max_tokens\":12,\"temperature\":0.5,"
                       "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":-1,\"stop\":[\"\\n\",\"The end\"],"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"n\":1,\"logprobs\":null,"
                       "\"presence_penalty\":0,\"user\":\"me\",\"speculation\":{\"mode\":\"draft\",\"gamma\":5,"
                       "\"adaptive\":false},\"content_type\":\"chat\"}";
    CHECK(oa_parse(false, full, strlen(full), &L, &r, &e) == 0);
    CHECK(!r.chat && !strcmp(r.model, "stories"));
    CHECK(r.prompt && !strcmp(r.prompt, "Once upon") && r.req.prompt_text == r.prompt && r.req.n_special_spans == 0);
    CHECK(r.req.max_tokens == 12);
    CHECK(r.req.sc.temperature == 0.5f && r.req.sc.top_p == 0.9f && r.req.sc.top_k == 40 && r.req.sc.min_p == 0.05f);
    CHECK(r.seed_set && r.req.seed == UINT64_MAX);
    CHECK(r.req.stop[0] && !strcmp(r.req.stop[0], "\n") && r.req.stop[1] && !strcmp(r.req.stop[1], "The end"));
    CHECK(r.req.stop[2] == NULL);
    CHECK(r.stream && r.include_usage);
    CHECK(r.req.mode == SPEC_MODE_DRAFT && r.req.gamma == 5 && !r.req.adaptive && r.req.adaptive_set);
    CHECK(r.req.content_type && !strcmp(r.req.content_type, "chat"));
    char err[128];
    CHECK(oa_render_prompt(&r, CHAT_TEMPLATE_CHATML, NULL, err, sizeof err) == 0 && r.req.prompt_text == r.prompt);
    oa_request_free(&r);
    CHECK(r.prompt == NULL && r.model == NULL);
    oa_request_free(&r); /* twice is fine */
    oa_request_free(NULL);
    /* logprobs: chat flag + top count, completions count */
    const char *lc = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":3}";
    CHECK(oa_parse(true, lc, strlen(lc), &L, &r, &e) == 0 && r.req.logprobs && r.req.top_logprobs == 3);
    oa_request_free(&r);
    const char *lp = "{\"prompt\":\"a\",\"logprobs\":0}";
    CHECK(oa_parse(false, lp, strlen(lp), &L, &r, &e) == 0 && r.req.logprobs && r.req.top_logprobs == 0);
    oa_request_free(&r);
    CHECK(oa_parse(false, full, strlen(full), &L, &r, &e) == 0 && !r.req.logprobs && r.n == 1);
    oa_request_free(&r);
    /* n: choices up to the limit (absent and null: 1), integral reals */
    const char *n3 = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":3,\"seed\":5}";
    CHECK(oa_parse(true, n3, strlen(n3), &L, &r, &e) == 0 && r.n == 3 && r.seed_set && r.req.seed == 5);
    oa_request_free(&r);
    const char *n4 = "{\"prompt\":\"a\",\"n\":4.0}", *nn = "{\"prompt\":\"a\",\"n\":null}";
    CHECK(oa_parse(false, n4, strlen(n4), &L, &r, &e) == 0 && r.n == 4);
    oa_request_free(&r);
    CHECK(oa_parse(false, nn, strlen(nn), &L, &r, &e) == 0 && r.n == 1);
    oa_request_free(&r);
    CHECK(oa_choice_seed(5, 0) == 5 && oa_choice_seed(5, 2) == 7 && oa_choice_seed(UINT64_MAX, 1) == 0);

    /* defaults, nulls as absent, a stop string, integral reals */
    const char *min = "{\"prompt\":\"hi\",\"temperature\":null,\"stop\":\"END\",\"top_k\":3.0}";
    CHECK(oa_parse(false, min, strlen(min), &L, &r, &e) == 0);
    CHECK(!strcmp(r.model, "") && r.req.max_tokens == 256 && r.req.sc.temperature == 1.0f && r.req.sc.top_p == 1.0f);
    CHECK(r.req.sc.top_k == 3 && r.req.sc.min_p == 0.0f && !r.seed_set && !r.stream && !r.include_usage);
    CHECK(r.req.mode == SPEC_MODE_AUTO && r.req.gamma == 0 && !r.req.adaptive_set && r.req.content_type == NULL);
    CHECK(r.req.stop[0] && !strcmp(r.req.stop[0], "END") && r.req.stop[1] == NULL);
    oa_request_free(&r);
    /* the default is clamped to the limit */
    L.max_tokens_limit = 100;
    CHECK(oa_parse(false, "{\"prompt\":\"x\"}", 14, &L, &r, &e) == 0 && r.req.max_tokens == 100);
    oa_request_free(&r);
    L = lim();

    /* chat: developer -> system, text parts joined, assistant null content, max_completion_tokens */
    const char *chat = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"},"
                       "{\"type\":\"text\",\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null},"
                       "{\"role\":\"user\",\"content\":\"Again\"}],\"max_completion_tokens\":7}";
    CHECK(oa_parse(true, chat, strlen(chat), &L, &r, &e) == 0);
    CHECK(r.chat && r.n_messages == 4 && r.req.max_tokens == 7 && r.req.prompt_text == NULL);
    CHECK(!strcmp(r.messages[0].role, "system") && !strcmp(r.messages[0].content, "Be brief."));
    CHECK(!strcmp(r.messages[1].role, "user") && !strcmp(r.messages[1].content, "Hello\nthere"));
    CHECK(!strcmp(r.messages[2].role, "assistant") && !strcmp(r.messages[2].content, ""));
    CHECK(oa_render_prompt(&r, CHAT_TEMPLATE_CHATML, NULL, err, sizeof err) == 0);
    CHECK(r.req.prompt_text == r.rendered && r.req.special_spans == r.spans);
    /* markup is everything but the message content: 4 spans around 3 non-empty contents */
    CHECKF(r.req.n_special_spans == 4, "%d spans", r.req.n_special_spans);
    {
        char plain[64] = "";
        size_t at = 0, np = 0;
        for (int k = 0; k <= r.req.n_special_spans && np < sizeof plain - 1; k++) {
            size_t end = k < r.req.n_special_spans ? r.req.special_spans[k].start : strlen(r.rendered);
            for (; at < end && np < sizeof plain - 1; at++) plain[np++] = r.rendered[at];
            if (k < r.req.n_special_spans) at = r.req.special_spans[k].end;
        }
        plain[np] = '\0';
        CHECKF(!strcmp(plain, "Be brief.Hello\nthereAgain"), "outside the markup: '%s'", plain);
    }
    CHECKF(!strcmp(r.rendered, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello\nthere<|im_end|>\n"
                               "<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n"
                               "<|im_start|>assistant\n"),
           "%s", r.rendered);
    oa_request_free(&r);
}

static engine_event finished_event(void) {
    engine_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = ENGINE_EV_FINISHED;
    ev.reason = FINISH_LENGTH;
    ev.completion_tokens = 20;
    ev.ttft_ms = 12.5;
    ev.tpot_ms = 1.25;
    ev.st.verify_steps = 5;
    ev.st.drafted = 20;
    ev.st.accepted = 12;
    ev.st.rejections = 4;
    ev.st.tokens = 20;
    ev.st.plain_steps = 3;
    ev.st.pos_reached[0] = 5, ev.st.pos_accepted[0] = 4;
    ev.st.pos_reached[1] = 5, ev.st.pos_accepted[1] = 3;
    ev.st.pos_reached[2] = 4, ev.st.pos_accepted[2] = 3;
    ev.st.pos_reached[3] = 4, ev.st.pos_accepted[3] = 2;
    return ev;
}

static void check_speculation(json_t *s, const engine_event *ev) {
    CHECK(json_is_object(s));
    if (!s) return;
    const spec_stats *st = &ev->st;
    CHECK(fabs(json_real_value(json_object_get(s, "alpha")) - 12.0 / 16.0) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(s, "mean_accepted")) - spec_stats_mean_accepted(st)) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(s, "tokens_per_pass")) - spec_stats_tokens_per_pass(st)) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(s, "gamma_used")) - 4.0) < 1e-12);
    CHECK(json_integer_value(json_object_get(s, "verify_steps")) == 5);
    CHECK(json_integer_value(json_object_get(s, "drafted")) == 20);
    CHECK(json_integer_value(json_object_get(s, "accepted")) == 12);
    CHECK(json_integer_value(json_object_get(s, "rejections")) == 4);
    CHECK(fabs(json_real_value(json_object_get(s, "ttft_ms")) - 12.5) < 1e-12);
    CHECK(fabs(json_real_value(json_object_get(s, "tpot_ms")) - 1.25) < 1e-12);
    json_t *pp = json_object_get(s, "per_position");
    CHECK(json_is_array(pp) && json_array_size(pp) == 4);
    for (size_t i = 0; i < json_array_size(pp); i++) {
        json_t *p = json_array_get(pp, i);
        CHECK(json_integer_value(json_object_get(p, "position")) == (json_int_t)i + 1);
        CHECK(json_integer_value(json_object_get(p, "drafted")) == (json_int_t)st->pos_reached[i]);
        CHECK(json_integer_value(json_object_get(p, "accepted")) == (json_int_t)st->pos_accepted[i]);
    }
}

static void test_response(void) {
    engine_event ev = finished_event();
    time_t now = time(NULL);
    for (int chat = 0; chat < 2; chat++) {
        const char text[] = "Once upon a time\xE2\x82"; /* ends in half a character */
        char *s = oa_response_json(chat, "abc123", "stories", text, sizeof text - 1, &ev, 7);
        json_t *j = load(s);
        CHECK(j != NULL);
        if (j) {
            CHECK(!strcmp(sget(j, "id"), chat ? "chatcmpl-abc123" : "cmpl-abc123"));
            CHECK(!strcmp(sget(j, "object"), chat ? "chat.completion" : "text_completion"));
            json_int_t created = json_integer_value(json_object_get(j, "created"));
            CHECK(created >= now - 5 && created <= now + 5);
            CHECK(!strcmp(sget(j, "model"), "stories"));
            json_t *ch = json_object_get(j, "choices");
            CHECK(json_is_array(ch) && json_array_size(ch) == 1);
            json_t *c0 = json_array_get(ch, 0);
            CHECK(json_integer_value(json_object_get(c0, "index")) == 0);
            CHECK(!strcmp(sget(c0, "finish_reason"), "length"));
            CHECK(json_is_null(json_object_get(c0, "logprobs")));
            const char *got;
            if (chat) {
                json_t *m = json_object_get(c0, "message");
                CHECK(!strcmp(sget(m, "role"), "assistant"));
                got = sget(m, "content");
                CHECK(json_object_get(c0, "text") == NULL);
            } else {
                got = sget(c0, "text");
                CHECK(json_object_get(c0, "message") == NULL);
            }
            CHECKF(got && !strcmp(got, "Once upon a time\xEF\xBF\xBD"), "text %s", got);
            json_t *u = json_object_get(j, "usage");
            CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 7);
            CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 20);
            CHECK(json_integer_value(json_object_get(u, "total_tokens")) == 27);
            check_speculation(json_object_get(j, "speculation"), &ev);
            json_decref(j);
        }
        free(s);
    }
    /* finish reasons */
    CHECK(!strcmp(oa_finish_reason(FINISH_STOP), "stop") && !strcmp(oa_finish_reason(FINISH_LENGTH), "length"));
    /* a request that never speculated: zeros, no NaN, empty per_position */
    engine_event z;
    memset(&z, 0, sizeof z);
    z.reason = FINISH_STOP;
    char *s = oa_response_json(true, "z", "m", "", 0, &z, 1);
    json_t *j = load(s);
    json_t *sp = json_object_get(j, "speculation");
    CHECK(json_is_number(json_object_get(sp, "alpha")) && json_number_value(json_object_get(sp, "alpha")) == 0);
    CHECK(json_array_size(json_object_get(sp, "per_position")) == 0);
    CHECK(!strcmp(sget(json_array_get(json_object_get(j, "choices"), 0), "finish_reason"), "stop"));
    json_decref(j);
    free(s);
}

/* n choices in one response: indexes in order, each its own text, finish
 * reason, logprobs and speculation object; usage counts the prompt once. */
static void test_response_choices(void) {
    engine_event ev[3];
    for (int i = 0; i < 3; i++) ev[i] = finished_event(), ev[i].completion_tokens = 10 + i;
    ev[1].reason = FINISH_STOP;
    for (int chat = 0; chat < 2; chat++) {
        oa_choice ch[3] = {{"zero", 4, &ev[0], NULL}, {"one", 3, &ev[1], oa_logprobs_new(chat)}, {NULL, 0, &ev[2], NULL}};
        char *s = oa_response_json_n(chat, "k", "m", ch, 3, 7);
        CHECK(ch[1].logprobs == NULL); /* taken over */
        json_t *j = load(s);
        CHECK(j != NULL);
        if (j) {
            json_t *cs = json_object_get(j, "choices");
            CHECK(json_is_array(cs) && json_array_size(cs) == 3);
            static const char *const want[] = {"zero", "one", ""};
            for (size_t i = 0; i < json_array_size(cs); i++) {
                json_t *c = json_array_get(cs, i);
                CHECK(json_integer_value(json_object_get(c, "index")) == (json_int_t)i);
                const char *t = chat ? sget(json_object_get(c, "message"), "content") : sget(c, "text");
                CHECKF(t && !strcmp(t, want[i]), "choice %zu text %s", i, t);
                CHECK(!strcmp(sget(c, "finish_reason"), i == 1 ? "stop" : "length"));
                CHECK(i == 1 ? json_is_object(json_object_get(c, "logprobs")) : json_is_null(json_object_get(c, "logprobs")));
                check_speculation(json_object_get(c, "speculation"), &ev[i]);
            }
            json_t *u = json_object_get(j, "usage");
            CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 7);
            CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 33);
            CHECK(json_integer_value(json_object_get(u, "total_tokens")) == 40);
            CHECK(json_object_get(j, "speculation") == NULL);
            json_decref(j);
        }
        free(s);
    }
    /* n = 1 is the one-choice response, text for text (the created second aside) */
    oa_choice one = {"zero", 4, &ev[0], NULL};
    char *a = oa_response_json_n(true, "k", "m", &one, 1, 7), *b = oa_response_json(true, "k", "m", "zero", 4, &ev[0], 7);
    json_t *ja = load(a), *jb = load(b);
    json_object_del(ja, "created"), json_object_del(jb, "created");
    CHECK(ja && jb && json_equal(ja, jb));
    json_decref(ja), json_decref(jb);
    free(a), free(b);
}

/* Splits an SSE stream into its events' data payloads; every event must be
 * exactly "data: <payload>\n\n". Returns the count (at most max), -1 on bad framing. */
static int sse_split(const char *s, char payload[][4096], int max) {
    int n = 0;
    while (*s) {
        if (strncmp(s, "data: ", 6) != 0 || n == max) return -1;
        const char *end = strstr(s, "\n\n");
        if (!end) return -1;
        size_t len = (size_t)(end - s - 6);
        if (len >= 4096 || memchr(s + 6, '\n', len)) return -1;
        memcpy(payload[n], s + 6, len);
        payload[n][len] = '\0';
        n++;
        s = end + 2;
    }
    return n;
}

static void test_sse(void) {
    static char ev_data[4][4096];
    for (int chat = 0; chat < 2; chat++) {
        size_t len = 0;
        char *c = oa_stream_chunk(chat, "u1", "stories", " there\nwas", 10, &len);
        CHECK(c && len == strlen(c));
        CHECK(sse_split(c, ev_data, 4) == 1);
        json_t *j = load(ev_data[0]);
        CHECK(j != NULL);
        if (j) {
            CHECK(!strcmp(sget(j, "id"), chat ? "chatcmpl-u1" : "cmpl-u1"));
            CHECK(!strcmp(sget(j, "object"), chat ? "chat.completion.chunk" : "text_completion"));
            CHECK(!strcmp(sget(j, "model"), "stories"));
            CHECK(json_is_integer(json_object_get(j, "created")));
            json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
            CHECK(json_integer_value(json_object_get(c0, "index")) == 0);
            CHECK(json_is_null(json_object_get(c0, "finish_reason")));
            if (chat) {
                json_t *d = json_object_get(c0, "delta");
                /* content deltas carry no role: it comes once, in the stream's first chunk */
                CHECK(!strcmp(sget(d, "content"), " there\nwas") && json_object_get(d, "role") == NULL);
            } else {
                CHECK(!strcmp(sget(c0, "text"), " there\nwas"));
            }
            CHECK(json_object_get(j, "usage") == NULL && json_object_get(j, "speculation") == NULL);
            json_decref(j);
        }
        free(c);

        if (chat) { /* the role chunk */
            char *rc = oa_stream_role_chunk("u1", "stories", 0);
            CHECK(sse_split(rc, ev_data, 4) == 1);
            json_t *rj = load(ev_data[0]);
            json_t *d = json_object_get(json_array_get(json_object_get(rj, "choices"), 0), "delta");
            CHECK(!strcmp(sget(d, "role"), "assistant") && !strcmp(sget(d, "content"), ""));
            json_decref(rj);
            free(rc);
        }
        engine_event ev = finished_event();
        ev.reason = FINISH_STOP;
        ev.st.prefix_reused = 4;
        /* with include_usage: the final chunk, a usage chunk with no choices, [DONE] */
        char *f = oa_stream_final(chat, "u1", "stories", &ev, 9, true);
        CHECK(sse_split(f, ev_data, 4) == 3);
        CHECK(!strcmp(ev_data[2], "[DONE]"));
        json_t *uj = load(ev_data[1]);
        CHECK(uj && json_array_size(json_object_get(uj, "choices")) == 0);
        CHECK(json_integer_value(json_object_get(json_object_get(uj, "usage"), "total_tokens")) == 29);
        CHECK(json_integer_value(json_object_get(json_object_get(json_object_get(uj, "usage"), "prompt_tokens_details"),
                                                 "cached_tokens")) == 4);
        json_decref(uj);
        free(f);
        /* without it: the final chunk (no usage), [DONE] */
        f = oa_stream_final(chat, "u1", "stories", &ev, 9, false);
        CHECK(sse_split(f, ev_data, 4) == 2);
        CHECK(!strcmp(ev_data[1], "[DONE]"));
        CHECK(strlen(f) >= strlen(OA_SSE_DONE) && !strcmp(f + strlen(f) - strlen(OA_SSE_DONE), OA_SSE_DONE));
        j = load(ev_data[0]);
        if (j) {
            json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
            CHECK(!strcmp(sget(c0, "finish_reason"), "stop"));
            if (chat) CHECK(json_object_size(json_object_get(c0, "delta")) == 0);
            else CHECK(!strcmp(sget(c0, "text"), ""));
            CHECK(json_object_get(j, "usage") == NULL);
            check_speculation(json_object_get(j, "speculation"), &ev);
            json_decref(j);
        }
        free(f);
    }
    /* several choices: chunks name their index; each choice's finish chunk has
     * no usage and no [DONE]; the end has the usage chunk (when asked) then [DONE] */
    for (int chat = 0; chat < 2; chat++) {
        char *c = oa_stream_chunk_ix(chat, "u2", "m", 2, "hi", 2, NULL, NULL);
        CHECK(sse_split(c, ev_data, 4) == 1);
        json_t *j = load(ev_data[0]);
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        CHECK(json_integer_value(json_object_get(c0, "index")) == 2 && json_is_null(json_object_get(c0, "finish_reason")));
        json_decref(j);
        free(c);
        engine_event ev = finished_event();
        char *f = oa_stream_choice_final(chat, "u2", "m", 1, &ev);
        CHECK(sse_split(f, ev_data, 4) == 1);
        j = load(ev_data[0]);
        c0 = json_array_get(json_object_get(j, "choices"), 0);
        CHECK(json_integer_value(json_object_get(c0, "index")) == 1 && !strcmp(sget(c0, "finish_reason"), "length"));
        CHECK(json_object_get(j, "usage") == NULL);
        check_speculation(json_object_get(j, "speculation"), &ev);
        json_decref(j);
        free(f);
        char *end = oa_stream_end(chat, "u2", "m", true, 5, 30);
        CHECK(sse_split(end, ev_data, 4) == 2 && !strcmp(ev_data[1], "[DONE]"));
        j = load(ev_data[0]);
        CHECK(j && json_array_size(json_object_get(j, "choices")) == 0);
        CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")) == 35);
        CHECK(!strcmp(sget(j, "id"), chat ? "chatcmpl-u2" : "cmpl-u2"));
        json_decref(j);
        free(end);
        end = oa_stream_end(chat, "u2", "m", false, 5, 30);
        CHECK(end && !strcmp(end, OA_SSE_DONE));
        free(end);
    }
    char *e = oa_stream_error("model exploded");
    CHECK(sse_split(e, ev_data, 4) == 2 && !strcmp(ev_data[1], "[DONE]"));
    check_error_body(ev_data[0], "server_error", NULL, "engine_error");
    free(e);
    /* invalid UTF-8 never breaks a chunk */
    char *b = oa_stream_chunk(true, "u", "m", "\xFF\xC3", 2, NULL);
    CHECK(sse_split(b, ev_data, 4) == 1);
    json_t *j = load(ev_data[0]);
    CHECK(j && !strcmp(sget(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "content"),
                       "\xEF\xBF\xBD\xEF\xBF\xBD"));
    json_decref(j);
    free(b);
}

static void test_models_errors(void) {
    char *m = oa_models_json("stories260K");
    json_t *j = load(m);
    CHECK(j && !strcmp(sget(j, "object"), "list"));
    json_t *d = json_object_get(j, "data");
    CHECK(json_array_size(d) == 1);
    json_t *m0 = json_array_get(d, 0);
    CHECK(!strcmp(sget(m0, "id"), "stories260K") && !strcmp(sget(m0, "object"), "model"));
    CHECK(!strcmp(sget(m0, "owned_by"), "specd") && json_is_integer(json_object_get(m0, "created")));
    json_decref(j);
    free(m);
    const char *ids[3] = {"target", NULL, "draft"};
    m = oa_models_list_json(ids, 3);
    j = load(m);
    CHECK(json_array_size(json_object_get(j, "data")) == 2);
    CHECK(!strcmp(sget(json_array_get(json_object_get(j, "data"), 1), "id"), "draft"));
    json_decref(j);
    free(m);

    char *e = oa_simple_error(404, "not_found", "no such endpoint");
    check_error_body(e, "invalid_request_error", NULL, "not_found");
    free(e);
    e = oa_simple_error(503, "shutting_down", "bye");
    check_error_body(e, "server_error", NULL, "shutting_down");
    free(e);
    e = oa_simple_error(429, "overloaded", "later");
    check_error_body(e, "rate_limit_error", NULL, "overloaded");
    free(e);
    oa_error oe = {.status = 400, .code = "x", .type = "custom_error"};
    snprintf(oe.message, sizeof oe.message, "bad \xC3 byte");
    e = oa_error_json(&oe);
    check_error_body(e, "custom_error", NULL, "x");
    free(e);
}

static void check_utf8n(const char *in, size_t len, const char *want, size_t want_len) {
    char out[64];
    size_t n = oa_utf8_sanitize(out, in, len);
    CHECKF(n == want_len && memcmp(out, want, n) == 0, "sanitize of %zu bytes gave %zu bytes", len, n);
}
#define check_utf8(in, len, want) check_utf8n(in, len, want, sizeof(want) - 1)

static void test_utf8(void) {
#define R "\xEF\xBF\xBD"
    check_utf8("abc", 3, "abc");
    check_utf8("\xC3\xA9", 2, "\xC3\xA9");
    check_utf8("\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80");
    check_utf8("\xC3", 1, R);
    check_utf8("\xE2\x82", 2, R);               /* one maximal subpart */
    check_utf8("\xE2\x82x", 3, R "x");
    check_utf8("a\x80" "b", 3, "a" R "b");
    check_utf8("\xC0\xAF", 2, R R);             /* overlong: C0 is never valid */
    check_utf8("\xE0\x80\xAF", 3, R R R);       /* overlong 3-byte */
    check_utf8("\xED\xA0\x80", 3, R R R);       /* surrogate */
    check_utf8("\xF4\x90\x80\x80", 4, R R R R); /* > U+10FFFF */
    check_utf8("\xF0\x9F\x98", 3, R);
    check_utf8("\xFF\xFE", 2, R R);
    check_utf8("a\0b", 3, "a\0b");
    char big[300], out[900];
    memset(big, 0xFF, sizeof big);
    CHECK(oa_utf8_sanitize(out, big, sizeof big) == 900);
#undef R
}

/* Issue 22: the shared fields (fields.c) read the same in both protocols: for
 * each value, the WebSocket parser and the OpenAI parser accept it with the
 * same result or refuse it with the same code and the same message. */
static void test_shared_fields(void) {
    static const char *const cases[] = {
        "\"temperature\":2", "\"temperature\":2.5", "\"temperature\":-0.1", "\"temperature\":\"hot\"",
        "\"top_p\":0", "\"top_p\":1", "\"top_p\":1e-50", "\"min_p\":1", "\"min_p\":0.5",
        "\"top_k\":-1", "\"top_k\":2147483647", "\"top_k\":2147483648", "\"top_k\":3.0",
        "\"seed\":-1", "\"seed\":9223372036854775807", "\"seed\":1.5", "\"seed\":\"1\"",
        "\"max_tokens\":0", "\"max_tokens\":1000", "\"max_tokens\":1001", "\"prefix_cache\":1",
        "\"prefix_cache\":false", "\"speculation\":{\"mode\":\"fast\"}", "\"speculation\":{\"gamma\":9}",
        "\"speculation\":{\"gamma\":4,\"adaptive\":false}", "\"speculation\":{\"method\":\"ngram\"}",
        "\"speculation\":{\"verify\":\"x\"}", "\"speculation\":{\"verify\":\"coupled\"}",
        "\"learn\":false", "\"learn\":true", "\"learn\":\"no\"", "\"learn\":0",
    };
    /* n is an OpenAI field: the WebSocket protocol refuses it as unknown */
    gw_limits L0 = lim();
    gw_msg m0;
    gw_error we0;
    const char *wn = "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"n\":2}";
    CHECK(gw_parse(wn, strlen(wn), &L0, &m0, &we0) == -1 && !strcmp(we0.code, "unknown_field"));
    gw_limits L = lim();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ws[256], oa[256];
        snprintf(ws, sizeof ws, "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",%s}", cases[i]);
        snprintf(oa, sizeof oa, "{\"prompt\":\"p\",%s}", cases[i]);
        gw_msg m;
        gw_error we;
        oa_request r;
        oa_error oe;
        int rw = gw_parse(ws, strlen(ws), &L, &m, &we), ro = oa_parse(false, oa, strlen(oa), &L, &r, &oe);
        CHECKF(rw == ro, "%s: ws %d, openai %d", cases[i], rw, ro);
        if (rw == 0 && ro == 0) {
            CHECKF(m.req.sc.temperature == r.req.sc.temperature && m.req.sc.top_p == r.req.sc.top_p &&
                       m.req.sc.min_p == r.req.sc.min_p && m.req.sc.top_k == r.req.sc.top_k &&
                       m.req.seed == r.req.seed && m.seed_set == r.seed_set && m.req.max_tokens == r.req.max_tokens &&
                       m.req.no_prefix_cache == r.req.no_prefix_cache && m.req.no_learn == r.req.no_learn &&
                       m.req.mode == r.req.mode &&
                       m.req.gamma == r.req.gamma && m.req.adaptive == r.req.adaptive &&
                       m.req.method == r.req.method && m.req.verify == r.req.verify,
                   "%s: parsed differently", cases[i]);
        } else if (rw && ro) {
            CHECKF(we.code && oe.code && !strcmp(we.code, oe.code), "%s: ws %s, openai %s", cases[i], we.code,
                   oe.code);
            CHECKF(!strcmp(we.message, oe.message), "%s: ws '%s', openai '%s'", cases[i], we.message, oe.message);
        }
        if (rw == 0) gw_msg_free(&m);
        if (ro == 0) oa_request_free(&r);
    }
    /* issue 37: "learn": false opts the request out of the learning ring; absent or true leaves it in */
    static const char *const learn_cases[3][2] = {{"", "0"}, {",\"learn\":true", "0"}, {",\"learn\":false", "1"}};
    for (int i = 0; i < 3; i++) {
        char ws[256], oa[256];
        snprintf(ws, sizeof ws, "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\"%s}", learn_cases[i][0]);
        snprintf(oa, sizeof oa, "{\"prompt\":\"p\"%s}", learn_cases[i][0]);
        gw_msg m;
        gw_error we;
        oa_request r;
        oa_error oe;
        bool want = learn_cases[i][1][0] == '1';
        CHECK(gw_parse(ws, strlen(ws), &L, &m, &we) == 0);
        CHECKF(m.req.no_learn == want, "ws %s: no_learn %d", learn_cases[i][0], m.req.no_learn);
        gw_msg_free(&m);
        CHECK(oa_parse(false, oa, strlen(oa), &L, &r, &oe) == 0);
        CHECKF(r.req.no_learn == want, "openai %s: no_learn %d", learn_cases[i][0], r.req.no_learn);
        oa_request_free(&r);
    }
    const char *bad = "{\"type\":\"generate\",\"id\":1,\"prompt\":\"p\",\"learn\":\"no\"}";
    gw_msg mb;
    gw_error wb;
    CHECK(gw_parse(bad, strlen(bad), &L, &mb, &wb) == -1 && !strcmp(wb.code, "wrong_type") &&
          strstr(wb.message, "'learn'"));
}

int main(void) {
    test_bad_bodies();
    test_good_bodies();
    test_response();
    test_response_choices();
    test_sse();
    test_models_errors();
    test_utf8();
    test_shared_fields();
    TEST_DONE();
}
