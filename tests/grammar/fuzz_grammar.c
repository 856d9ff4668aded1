/* fuzz_grammar.c — libFuzzer target for a request's whole grammar path
 * (issue 44): the input is GBNF text (mode byte 0) or a JSON Schema (mode
 * byte 1) that becomes GBNF through js_schema_to_gbnf_limited, then
 * grammar_parse_limited under the server's default limits, a matcher over a
 * small vocabulary (every byte, some multi-byte pieces, an end token),
 * prepare under a deadline, and a walk that masks, checks the mask against
 * the budget rule and advances by tokens the mask allows. Findings: a crash,
 * a sanitizer report, an invariant (__builtin_trap), or a slow or large input
 * (run_fuzz.sh sets libFuzzer's -timeout and -rss_limit_mb: a slow input is
 * a finding). */
#include "engine/grammar/grammar.h"
#include "gateway/json_schema.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)
#define V 300

static grammar_vocab *vocab(void) {
    static grammar_vocab *v;
    if (v) return v;
    static char buf[V][4];
    static const char *s[V];
    static int len[V];
    static bool eog[V];
    for (int i = 0; i < V; i++) {
        if (i < 256) buf[i][0] = (char)i, len[i] = 1;
        else if (i < V - 1) buf[i][0] = "{\" :,}ab"[i % 8], buf[i][1] = "\"a1 :"[i % 5], buf[i][2] = "b\"} "[i % 4], len[i] = 1 + i % 3;
        else len[i] = 0, eog[i] = true;
        s[i] = buf[i];
    }
    return v = grammar_vocab_from_strings(V, s, len, eog);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    char err[200];
    char *text = NULL;
    if (data[0] & 1) { /* a JSON Schema */
        json_error_t je;
        json_t *sc = json_loadb((const char *)data + 1, n - 1, JSON_DECODE_ANY, &je);
        if (!sc) return 0;
        js_limits jl = js_default_limits();
        text = js_schema_to_gbnf_limited(sc, &jl, err, sizeof err);
        json_decref(sc);
        if (!text) {
            REQUIRE(err[0]); /* a refusal says why */
            return 0;
        }
    } else {
        text = malloc(n);
        REQUIRE(text);
        memcpy(text, data + 1, n - 1);
        text[n - 1] = 0;
    }
    grammar_limits lim = grammar_default_limits();
    lim.max_rules = 65536;
    grammar *g = grammar_parse_limited(text, strlen(text), &lim, err, sizeof err);
    if (!g) {
        REQUIRE(err[0]);
        REQUIRE(!(data[0] & 1) || strstr(err, "too large") || strstr(err, "grammar.")); /* a schema's GBNF is well formed */
        free(text);
        return 0;
    }
    grammar_matcher *m = grammar_matcher_create(g, vocab());
    REQUIRE(m);
    grammar_matcher_prepare_until(m, 0);
    int32_t st = grammar_start(m);
    uint32_t pick = n > 1 ? data[n - 1] : 0;
    for (int step = 0; step < 32 && st >= 0; step++) {
        int budget = (int)(pick % 40) + 1;
        const uint32_t *mask = grammar_mask(m, st, -1);
        int allowed[V], na = 0;
        for (int t = 0; t < V; t++)
            if (mask[t >> 5] >> (t & 31) & 1) allowed[na++] = t;
        /* a budget-limited mask is a subset of the free one */
        const uint32_t *bm = grammar_mask(m, st, budget);
        for (int t = 0; t < V; t++)
            if (bm[t >> 5] >> (t & 31) & 1) REQUIRE(grammar_allows(m, st, -1, t));
        if (!na) break;
        int t = allowed[(pick = pick * 1103515245u + 12345u) % (uint32_t)na];
        int32_t nx = grammar_advance_token(m, st, t);
        if (t == V - 1) {
            REQUIRE(grammar_accepting(m, st)); /* the end token only where the output may end */
            break;
        }
        REQUIRE(nx >= 0 || nx == GRAMMAR_DEAD);
        st = nx;
    }
    (void)grammar_matcher_bytes(m);
    grammar_matcher_destroy(m);
    grammar_destroy(g);
    free(text);
    return 0;
}
