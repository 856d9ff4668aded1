/* test_grammar — the GBNF parser (valid grammars in llama.cpp's grammars/
 * style, every error with its line and column, bounded pathological input),
 * the byte matcher on accepted and refused strings, and masks (key masks
 * made up front or on first use, trie walks under a token budget) against
 * testing every token by simulation on a separate matcher, on the real
 * vocabularies. */
#include "tests/grammar/grammar_util.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

static grammar *gparse_s(const char *s, char *err) { return grammar_parse(s, strlen(s), err, 256); }

static grammar *parse(const char *s) {
    char err[256];
    grammar *g = grammar_parse(s, strlen(s), err, sizeof err);
    if (!g) fprintf(stderr, "parse failed: %s\n", err);
    return g;
}

/* Whether s is in the language, and whether each strict prefix is viable,
 * on a tiny byte vocabulary. */
static grammar_vocab *byte_vocab(void) {
    static char bytes[256];
    const char *s[257];
    int len[257];
    bool eog[257] = {0};
    for (int b = 0; b < 256; b++) bytes[b] = (char)b, s[b] = &bytes[b], len[b] = 1;
    s[256] = "", len[256] = 0, eog[256] = true;
    return grammar_vocab_from_strings(257, s, len, eog);
}

static int accepts(grammar_matcher *m, const char *s) {
    int32_t st = grammar_advance_bytes(m, grammar_start(m), (const uint8_t *)s, (int)strlen(s));
    return st < 0 ? -1 : grammar_accepting(m, st) ? 1 : 0; /* -1 dead, 0 viable prefix, 1 complete */
}

static void check_lang(const char *gtext, const char *const *yes, const char *const *prefix, const char *const *no) {
    grammar *g = parse(gtext);
    CHECK(g != NULL);
    if (!g) return;
    grammar_vocab *v = byte_vocab();
    grammar_matcher *m = grammar_matcher_create(g, v);
    for (int k = 0; yes && yes[k]; k++) CHECKF(accepts(m, yes[k]) == 1, "should accept \"%s\"", yes[k]);
    for (int k = 0; prefix && prefix[k]; k++) CHECKF(accepts(m, prefix[k]) == 0, "should be a prefix: \"%s\"", prefix[k]);
    for (int k = 0; no && no[k]; k++) CHECKF(accepts(m, no[k]) == -1, "should refuse \"%s\"", no[k]);
    grammar_matcher_destroy(m);
    grammar_vocab_destroy(v);
    grammar_destroy(g);
}

static void test_languages(void) {
    const char *jy[] = {"{}", "{\"a\":1}", "{\"a\": [1, 2.5e3, \"x\\u00e9\", true, null, {}]}", "{\"k\":\"caf\xc3\xa9\"}",
                        "{ \"a\" : -0.5 }", "{\"a\":\"\\n\"}\n", NULL};
    const char *jp[] = {"", "{", "{\"a\"", "{\"a\":", "{\"a\":[1,", NULL};
    const char *jn[] = {"[", "{a", "{\"a\":01", "{\"a\":tru,", "{}}", "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", NULL};
    check_lang(grammar_json_gbnf(), jy, jp, jn);
    const char *ly[] = {"- one\n", "- one\n- two\n", "- \xe2\x82\xac\n", NULL};
    const char *ln[] = {"-one", "- \n", "- a\r", "- a\xe2\x80\xa8", NULL};
    check_lang(GU_LIST, ly, NULL, ln);
    const char *ay[] = {"a=b\n", "(x+1)=2\n", "x1*y/3= z\n", NULL};
    const char *an[] = {"=", "1=+", NULL};
    check_lang(GU_ARITH, ay, NULL, an);
    const char *cy[] = {"", "int main(){return 0;}", "float f(int x){x = x*2;if(x<3){y (x);}else{}}",
                        "char c(){/* a * b */}", NULL};
    const char *cn[] = {"int 1", "main(){}", NULL};
    check_lang(GU_CLIKE, cy, NULL, cn);
    /* repetition bounds, classes, escapes, groups, dot */
    const char *ry[] = {"ab", "aab", "aaab", "Zx\xf0\x9f\x98\x80\n", NULL};
    const char *rn[] = {"b", "aaaab", "Zab\nc", NULL};
    check_lang("root ::= a{1,3} \"b\" | [A-Z] . . \"\\n\"\na ::= \"a\"", ry, NULL, rn);
    const char *ey[] = {"x", "", NULL};
    check_lang("root ::= (\"x\" | \"\")", ey, NULL, NULL);
    const char *hy[] = {"\xc3\xa9", "\xe4\xb8\xad", "\xf0\x90\x80\x80", NULL};
    const char *hn[] = {"\xed\xa0\x80", "a", "\xc3\xa9\xc3", NULL}; /* a surrogate; ASCII; two characters */
    check_lang("root ::= [^\\x00-\\x7F]", hy, NULL, hn);
}

static void test_errors(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "line 1, column 1: empty grammar"},
        {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' defined twice"},
        {"a ::= \"x\"", "line 1, column 1: no 'root' rule"},
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"root ::= [abc", "line 1, column 10: unterminated character class"},
        {"root ::= ( \"a\"", "line 1, column 10: unclosed '('"},
        {"root ::= \"a\" )", "line 1, column 14: unexpected ')'"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape"},
        {"root ::= \"\\x4\"", "line 1, column 14: escape needs 2 hex digits"},
        {"root\n  ::= [z-a]", "line 2, column 11: range end below its start"},
        {"root ::= \"a\"{3,2}", "line 1, column 17: {m,n} with n below m"},
        {"root ::= \"a\"{99999}", "line 1, column 14: repetition count above"},
        {"root ::= \"a\"*+", "line 1, column 14: two repetition operators"},
        {"root ::= root \"a\" | \"b\"", "line 1, column 1: left recursion in rule 'root'"},
        {"root ::= x\nx ::= e root \"a\" | \"b\"\ne ::= \"\"?", "line 1, column 1: left recursion in rule 'root'"},
        {"root ::= \"a\" root", "line 1, column 1: rule 'root' can never finish"},
        {"root := \"a\"", "line 1, column 6: expected '::=' after the rule name"},
        {"root ::= @", "line 1, column 10: unexpected '@'"},
        {"root ::= []", "line 1, column 10: empty character class"},
        {"# c\n\n  ::= \"a\"", "line 3, column 3: expected a rule name"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char err[256] = "";
        grammar *g = grammar_parse(cases[k].text, strlen(cases[k].text), err, sizeof err);
        CHECKF(g == NULL, "accepted: %s", cases[k].text);
        CHECKF(strncmp(err, cases[k].want, strlen(cases[k].want)) == 0, "grammar %zu: got \"%s\", want \"%s\"", k, err,
               cases[k].want);
        grammar_destroy(g);
    }
    /* pathological but legal: deep nesting and big counts stay bounded */
    char *deep = malloc(4096);
    strcpy(deep, "root ::= ");
    for (int k = 0; k < 300; k++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int k = 0; k < 300; k++) strcat(deep, ")");
    char err[256];
    grammar *g = grammar_parse(deep, strlen(deep), err, sizeof err);
    CHECK(!g && strstr(err, "nested deeper"));
    free(deep);
    /* a repeated group is referenced, not copied: 2000 x 2000 stays small */
    g = parse("root ::= (\"a\"{0,2000}){0,2000} \"b\"");
    CHECK(g != NULL);
    if (g) {
        grammar_vocab *v = byte_vocab();
        grammar_matcher *m = grammar_matcher_create(g, v);
        CHECK(accepts(m, "aaaab") == 1);
        grammar_matcher_destroy(m);
        grammar_vocab_destroy(v);
        grammar_destroy(g);
    }
    /* prepare on grammars with long tail-call chains and deep nesting stays
     * bounded, and its masks still equal stepping each byte token */
    const char *deepg[] = {"root ::= (\"a\"{0,300}){0,300} \"b\"", "root ::= x\nx ::= \"(\" x? \")\" | [a-c]{1,40}", NULL};
    for (int k = 0; deepg[k]; k++) {
        grammar *dg = parse(deepg[k]);
        CHECK(dg != NULL);
        if (!dg) continue;
        grammar_vocab *v = byte_vocab();
        grammar_matcher *m = grammar_matcher_create(dg, v), *sim = grammar_matcher_create(dg, v);
        CHECK(grammar_matcher_prepare(m) != 0);
        const char *walk = k ? "((((ab" : "aaaaaaaaaa";
        int32_t st = grammar_start(m), ss = grammar_start(sim);
        for (int i = 0; walk[i] && st >= 0; i++) {
            const uint32_t *mask = grammar_mask(m, st, -1);
            for (int32_t t = 0; t < 257; t++)
                CHECKF((mask[t >> 5] >> (t & 31) & 1) == (grammar_advance_token(sim, ss, t) >= 0),
                       "deep grammar %d step %d token %d", k, i, t);
            st = grammar_advance_token(m, st, (uint8_t)walk[i]), ss = grammar_advance_token(sim, ss, (uint8_t)walk[i]);
        }
        CHECK(st >= 0);
        grammar_matcher_destroy(m), grammar_matcher_destroy(sim);
        grammar_vocab_destroy(v);
        grammar_destroy(dg);
    }
    grammar_destroy(g = gparse_s("root ::= (\"\" | \"\")* \"x\"", err));
    CHECK(!g && strstr(err, "left recursion")); /* a loop whose body may be empty */
    g = gparse_s("root ::= \"a\"{0,600}{0,600}{0,600}", err);
    CHECK(!g); /* two operators in a row */
    g = gparse_s("root ::= ((\"a\"{10000}){100}){2}", err);
    CHECK(g != NULL); /* referenced, bounded */
    grammar_destroy(g);
    /* random bytes never crash the parser */
    for (int k = 0; k < 3000; k++) {
        char buf[64];
        int n = (int)(gu_next() % 63);
        const char alpha[] = "root::= \"ab|()[]^-*+?{},.#\\\nxr0";
        for (int i = 0; i < n; i++) buf[i] = gu_next() % 4 ? alpha[gu_next() % (sizeof(alpha) - 1)] : (char)gu_next();
        buf[n] = 0;
        grammar *f = grammar_parse(buf, (size_t)n, err, sizeof err);
        CHECK(f != NULL || strncmp(err, "line ", 5) == 0);
        grammar_destroy(f);
    }
}

/* For random states reached by generating allowed tokens, the mask equals
 * advancing every token by itself; with a budget, also its distance rule. */
static int tok_piece_len(const tokenizer *t, int32_t tok) {
    char buf[512];
    return tok_piece(t, tok, buf, sizeof buf);
}

static void test_masks(const char *file) {
    char path[512];
    tu_model(path, sizeof path, file);
    tokenizer *t = gu_tokenizer(path);
    CHECK(t != NULL);
    if (!t) return;
    grammar_vocab *v = grammar_vocab_create(t);
    CHECK(v != NULL);
    int V = grammar_vocab_size(v);
    fprintf(stderr, "%s: %d tokens, %d trie nodes, all bytes: %d\n", file, V, grammar_vocab_trie_nodes(v),
            grammar_vocab_has_all_bytes(v));
    const char *gs[] = {grammar_json_gbnf(), GU_SCHEMA, GU_CLIKE, GU_ARITH, GU_LIST, GU_NESTED};
    for (int gi = 0; gi < 6; gi++) {
        grammar *g = parse(gs[gi]);
        /* m masks (its key masks all made first for even grammars, on first
         * use for odd ones); the simulation steps tokens on a matcher of its
         * own, so no cache is shared between the two sides */
        grammar_matcher *m = grammar_matcher_create(g, v), *sim = grammar_matcher_create(g, v);
        if (gi % 2 == 0) CHECK(grammar_matcher_prepare(m) > 0);
        int32_t *allowed = malloc(sizeof(int32_t) * (size_t)V);
        for (int run = 0; run < 4; run++) {
            int32_t st = grammar_start(m), ss = grammar_start(sim);
            for (int step = 0; step < 25 && st >= 0; step++) {
                int budget = (run == 2) ? 8 + (int)(gu_next() % 12) : -1;
                const uint32_t *mask = grammar_mask(m, st, budget);
                uint32_t *copy = malloc(sizeof(uint32_t) * (size_t)((V + 31) / 32));
                memcpy(copy, mask, sizeof(uint32_t) * (size_t)((V + 31) / 32));
                int na = 0, bad = 0;
                for (int32_t tok = 0; tok < V; tok++) {
                    int32_t s2 = grammar_advance_token(sim, ss, tok);
                    bool want = s2 >= 0 && (budget < 0 || tok_is_eog(t, tok) || grammar_min_remaining(sim, s2) <= budget - 1);
                    bool got = copy[tok >> 5] >> (tok & 31) & 1;
                    if (want != got && bad++ < 3)
                        fprintf(stderr, "  grammar %d step %d token %d: mask %d, simulation %d\n", gi, step, tok, got, want);
                    if (want) allowed[na++] = tok;
                }
                CHECKF(bad == 0, "%s grammar %d: %d tokens differ at step %d", file, gi, bad, step);
                free(copy);
                if (!na) break;
                /* run 3 prefers long tokens: deeper into strings and counters */
                int32_t pick = allowed[gu_next() % (uint32_t)na];
                for (int k = 0; run == 3 && k < 8; k++) {
                    int32_t c = allowed[gu_next() % (uint32_t)na];
                    if (tok_piece_len(t, c) > tok_piece_len(t, pick)) pick = c;
                }
                if (tok_is_eog(t, pick)) break;
                st = grammar_advance_token(m, st, pick);
                ss = grammar_advance_token(sim, ss, pick);
                CHECK(st >= 0 && ss >= 0);
            }
        }
        free(allowed);
        grammar_matcher_destroy(m);
        grammar_matcher_destroy(sim);
        grammar_destroy(g);
    }
    grammar_vocab_destroy(v);
    tok_destroy(t);
}

int main(void) {
    test_languages();
    test_errors();
    test_masks("stories260K.gguf");
    test_masks("tokenizer-vectors/ggml-vocab-llama-spm.gguf");
    test_masks("tokenizer-vectors/ggml-vocab-gpt-2.gguf");
    test_masks("tokenizer-vectors/ggml-vocab-deepseek-llm.gguf");
    TEST_DONE();
}
