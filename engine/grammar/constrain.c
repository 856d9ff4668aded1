/* constrain.c — the engine's grammar/matcher cache (see constrain.h). */
#include "engine/grammar/constrain.h"

#include "engine/tokenizer/tokenizer.h"
#include "kernels/clock.h"

#include <malloc.h>
#include <pthread.h>
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
    size_t bytes;              /* as last measured (compile, release) */
    constrain_info info;
    int holders;
} centry;

struct constrain_cache {
    pthread_mutex_t mu;        /* the table below; never held while compiling */
    const tokenizer *tok;
    constrain_limits lim;
    grammar_vocab *v;          /* built lazily, by the compiling thread */
    centry *e;
    int n, cap;
    uint64_t clock;
    size_t bytes;
    constrain_stats st;
};

constrain_limits constrain_default_limits(void) {
    return (constrain_limits){.grammar = grammar_default_limits(), .compile_ms = 10000,
                              .matcher_bytes = (size_t)256 << 20, .cache_bytes = (size_t)256 << 20};
}

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

constrain_cache *constrain_cache_create(const tokenizer *t, const constrain_limits *lim) {
    constrain_cache *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->tok = t;
    c->lim = lim ? *lim : constrain_default_limits();
    pthread_mutex_init(&c->mu, NULL);
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
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Evicts entries nobody holds, least recently used first, until the total
 * fits cache_bytes (or nothing is evictable). Returns how many went. mu held. */
static int evict_to_cap(constrain_cache *c) {
    int gone = 0;
    while (c->bytes > c->lim.cache_bytes) {
        int victim = -1;
        for (int i = 0; i < c->n; i++)
            if (!c->e[i].holders && (victim < 0 || c->e[i].last_use < c->e[victim].last_use)) victim = i;
        if (victim < 0) break;
        c->bytes -= c->e[victim].bytes;
        entry_free(&c->e[victim]);
        c->e[victim] = c->e[--c->n];
        c->st.evictions++;
        gone++;
    }
    return gone;
}

/* The entry of text (holders + 1), or -1. mu held. */
static int lookup(constrain_cache *c, const char *text, size_t len, uint64_t h) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].len == len && !memcmp(c->e[i].text, text, len)) {
            c->e[i].holders++;
            c->e[i].last_use = ++c->clock;
            return i;
        }
    return -1;
}

static grammar_matcher *refuse(constrain_cache *c, bool *oom, bool is_oom) {
    pthread_mutex_lock(&c->mu);
    c->st.refused++;
    pthread_mutex_unlock(&c->mu);
    if (oom) *oom = is_oom;
    return NULL;
}

grammar_matcher *constrain_acquire(constrain_cache *c, const char *text, size_t len, char *err, size_t errlen,
                                   bool *oom, constrain_info *info) {
    constrain_info dummy;
    if (!info) info = &dummy;
    if (oom) *oom = false;
    uint64_t h = fnv(text, len);
    pthread_mutex_lock(&c->mu);
    int hit = lookup(c, text, len, h);
    if (hit >= 0) c->st.hits++, *info = c->e[hit].info;
    grammar_matcher *m = hit >= 0 ? c->e[hit].m : NULL;
    pthread_mutex_unlock(&c->mu);
    if (m) return m;

    /* compile outside the lock: the engine thread may release meanwhile */
    double t0 = clock_now_ms();
    if (!c->v && !(c->v = grammar_vocab_create(c->tok))) {
        snprintf(err, errlen, "out of memory (grammar vocabulary)");
        return refuse(c, oom, true);
    }
    grammar *g = grammar_parse_limited(text, len, &c->lim.grammar, err, errlen);
    if (!g) return refuse(c, oom, false);
    m = grammar_matcher_create(g, c->v);
    char *copy = m ? malloc(len + 1) : NULL;
    if (!m || !copy) {
        grammar_matcher_destroy(m);
        grammar_destroy(g);
        free(copy);
        snprintf(err, errlen, "out of memory (grammar)");
        return refuse(c, oom, true);
    }
    /* every key mask now: first masks cost an OR, not a trie walk; past the
     * deadline the grammar is refused (its masks would stall generation) */
    double deadline = c->lim.compile_ms > 0 ? t0 + c->lim.compile_ms : 0;
    int keys = grammar_matcher_prepare_until(m, deadline);
    /* the start state's mask too: the first token of a request costs nothing */
    int32_t st0 = grammar_start(m);
    if (keys != -2) grammar_mask(m, st0, -1);
    constrain_info ci = {.min_bytes = grammar_min_remaining(m, st0)};
    int lmax = grammar_vocab_max_len(c->v);
    ci.min_tokens = lmax > 0 ? (ci.min_bytes + lmax - 1) / lmax : ci.min_bytes;
    double dt = clock_now_ms() - t0;
    size_t bytes = grammar_matcher_bytes(m) + len + 1;
    const char *why = NULL;
    char msg[200];
    if (keys == -2 || (deadline > 0 && dt > c->lim.compile_ms)) {
        snprintf(msg, sizeof msg, "grammar takes over %.0f ms to compile (limit grammar.compile_ms)", c->lim.compile_ms);
        why = msg;
    } else if (c->lim.matcher_bytes && bytes > c->lim.matcher_bytes) {
        snprintf(msg, sizeof msg, "compiled grammar needs %zu MiB, over the limit of %zu MiB (grammar.matcher_mb)",
                 bytes >> 20, c->lim.matcher_bytes >> 20);
        why = msg;
    }
    if (why) {
        grammar_matcher_destroy(m);
        grammar_destroy(g);
        free(copy);
        malloc_trim(0);
        snprintf(err, errlen, "%s", why);
        return refuse(c, oom, false);
    }
    memcpy(copy, text, len);
    copy[len] = 0;

    pthread_mutex_lock(&c->mu);
    c->st.compiles++;
    if (dt > c->st.compile_ms_max) c->st.compile_ms_max = dt;
    if ((hit = lookup(c, text, len, h)) >= 0) { /* compiled twice at once: keep the first */
        grammar_matcher *first = c->e[hit].m;
        *info = c->e[hit].info;
        pthread_mutex_unlock(&c->mu);
        grammar_matcher_destroy(m);
        grammar_destroy(g);
        free(copy);
        return first;
    }
    if (c->n == c->cap) {
        int nc = c->cap ? c->cap * 2 : 8;
        centry *ne = realloc(c->e, sizeof(centry) * (size_t)nc);
        if (!ne) {
            pthread_mutex_unlock(&c->mu);
            grammar_matcher_destroy(m);
            grammar_destroy(g);
            free(copy);
            snprintf(err, errlen, "out of memory (grammar)");
            return refuse(c, oom, true);
        }
        c->e = ne, c->cap = nc;
    }
    c->e[c->n++] = (centry){.text = copy, .len = len, .hash = h, .last_use = ++c->clock, .g = g, .m = m,
                            .bytes = bytes, .info = ci, .holders = 1};
    *info = ci;
    c->bytes += bytes;
    int gone = evict_to_cap(c);
    pthread_mutex_unlock(&c->mu);
    if (gone) malloc_trim(0);
    return m;
}

void constrain_release(constrain_cache *c, grammar_matcher *m) {
    if (!m) return;
    pthread_mutex_lock(&c->mu);
    int gone = 0;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].m == m) {
            c->e[i].holders--;
            /* measured now, by the thread that used it: it grew with its states */
            size_t b = grammar_matcher_bytes(m) + c->e[i].len + 1;
            c->bytes += b - c->e[i].bytes;
            c->e[i].bytes = b;
            gone = evict_to_cap(c);
            break;
        }
    pthread_mutex_unlock(&c->mu);
    if (gone) malloc_trim(0);
}

void constrain_cache_stats(constrain_cache *c, constrain_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->bytes = c->bytes;
    out->entries = (uint64_t)c->n;
    out->held = 0;
    for (int i = 0; i < c->n; i++) out->held += c->e[i].holders > 0;
    pthread_mutex_unlock(&c->mu);
}
