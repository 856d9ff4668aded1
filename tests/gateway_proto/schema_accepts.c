/* schema_accepts.c — a test tool: does specd's grammar for a JSON Schema
 * accept each candidate document? Reads the schema from argv[1], turns it
 * into GBNF (js_schema_to_gbnf) and a matcher over single bytes, then reads
 * one JSON text per stdin line and prints 1 (the grammar accepts it whole)
 * or 0. A refused schema prints "E <reason>" and exits 2. The independent
 * side (python3-jsonschema, re) is in test_schema_keywords.py. */
#include "engine/grammar/grammar.h"
#include "gateway/json_schema.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    json_error_t je;
    json_t *sc = json_load_file(argv[1], 0, &je);
    if (!sc) {
        printf("E cannot read the schema: %s\n", je.text);
        return 2;
    }
    char err[300];
    char *g = js_schema_to_gbnf(sc, err, sizeof err);
    json_decref(sc);
    if (!g) {
        printf("E %s\n", err);
        return 2;
    }
    grammar *gr = grammar_parse(g, strlen(g), err, sizeof err);
    if (!gr) {
        printf("E grammar: %s\n", err);
        return 2;
    }
    static char buf[256][2];
    const char *s[257];
    int len[257];
    bool eog[257] = {0};
    for (int i = 0; i < 256; i++) buf[i][0] = (char)i, s[i] = buf[i], len[i] = 1;
    s[256] = "", len[256] = 0, eog[256] = true;
    grammar_vocab *v = grammar_vocab_from_strings(257, s, len, eog);
    grammar_matcher *m = grammar_matcher_create(gr, v);
    if (!v || !m) return 3;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        if (line[n - 1] == '\n') line[--n] = 0;
        int32_t st = grammar_advance_bytes(m, grammar_start(m), (const uint8_t *)line, (int)n);
        printf("%d\n", st >= 0 && grammar_accepting(m, st));
    }
    free(line);
    grammar_matcher_destroy(m);
    grammar_vocab_destroy(v);
    grammar_destroy(gr);
    free(g);
    return 0;
}
