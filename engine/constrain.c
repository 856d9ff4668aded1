/* constrain.c — the engine's grammar/matcher cache (see constrain.h). */
#include "engine/constrain.h"

#include "engine/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *text;
    size_t len;
    uint64_t hash, last_use;
    grammar *g;
    grammar_matcher *m;
    int holders;
} centry;

struct constrain_cache {
    const tokenizer *tok;
    grammar_vocab *v;          /* built lazily */
    centry *e;
    int n, cap;
    uint64_t clock;
};

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

constrain_cache *constrain_cache_create(const tokenizer *t) {
    constrain_cache *c = calloc(1, sizeof(*c));
    if (c) c->tok = t;
    return c;
}

static void entry_free(centry *e) {
    grammar_matcher_destroy(e->m);
    grammar_destroy(e->g);
    free(e->text);
}

void constrain_cache_destroy(constrain_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) entry_free(&c->e[i]);
    free(c->e);
    grammar_vocab_destroy(c->v);
    free(c);
}

grammar_matcher *constrain_acquire(constrain_cache *c, const char *text, size_t len, char *err, size_t errlen) {
    uint64_t h = fnv(text, len);
    c->clock++;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].len == len && !memcmp(c->e[i].text, text, len)) {
            c->e[i].holders++;
            c->e[i].last_use = c->clock;
            return c->e[i].m;
        }
    if (!c->v && !(c->v = grammar_vocab_create(c->tok))) {
        snprintf(err, errlen, "out of memory (grammar vocabulary)");
        return NULL;
    }
    grammar *g = grammar_parse(text, len, err, errlen);
    if (!g) return NULL;
    grammar_matcher *m = grammar_matcher_create(g, c->v);
    if (m) grammar_matcher_prepare(m); /* every key mask now: first masks cost an OR, not a trie walk (-1: made on use) */
    char *copy = malloc(len + 1);
    /* evict the least recently used entry nobody holds */
    if (c->n >= CONSTRAIN_ENTRIES) {
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (!c->e[i].holders && (victim < 0 || c->e[i].last_use < c->e[victim].last_use)) victim = i;
        if (victim >= 0) {
            entry_free(&c->e[victim]);
            c->e[victim] = c->e[--c->n];
        }
    }
    if (c->n == c->cap) {
        int nc = c->cap ? c->cap * 2 : 8;
        centry *ne = realloc(c->e, sizeof(centry) * (size_t)nc);
        if (ne) c->e = ne, c->cap = nc;
    }
    if (!m || !copy || c->n == c->cap) {
        grammar_matcher_destroy(m);
        grammar_destroy(g);
        free(copy);
        snprintf(err, errlen, "out of memory (grammar)");
        return NULL;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    c->e[c->n++] = (centry){.text = copy, .len = len, .hash = h, .last_use = c->clock, .g = g, .m = m, .holders = 1};
    return m;
}

void constrain_release(constrain_cache *c, grammar_matcher *m) {
    if (!m) return;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].m == m) {
            c->e[i].holders--;
            return;
        }
}
