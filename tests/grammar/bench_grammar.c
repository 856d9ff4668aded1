/* bench_grammar.c — token-mask cost per generated token (issue 19): seeded
 * random walks through JSON mode and a schema-shaped grammar on the real
 * vocabularies (llama-spm 32k, gpt-2 50k, deepseek-llm 102k) and a 128k-token
 * one (Llama 3's size: `specd mkmodel`'s synthetic byte-fallback SPM
 * vocabulary, written to TMPDIR and removed). Each walk asks
 * for the mask of its state, draws an allowed token uniformly, advances, and
 * restarts at an accepting state now and then. Every grammar starts with a
 * fresh matcher, so a state's first mask is a cold walk of the trie and a
 * later one a cache hit; the figures are median and p99 per mask call, cold
 * and warm apart, plus all calls together (what a token pays). A figure, not
 * a timed assertion (`meson test --benchmark -C BUILD grammar_bench`;
 * each grammar twice: "prep" makes every key mask first (timed apart as
 * prepare, what constrain.c pays when it compiles a grammar), "lazy" makes
 * them on first use, inside the cold figures;
 * BENCH_DEBUG=US also lists every cold mask over US µs with its trie nodes).
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID). */
#include "cli/mkmodel.h"
#include "tests/grammar/grammar_util.h"
#include "tests/testutil.h"
#include "gateway/json_schema.h"

#include <jansson.h>

#include <sys/resource.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WALKS 40
#define STEPS 64

/* This thread's CPU time: the machine is shared, and a wall clock counts the
 * time other processes held the core as mask time. */
static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void pct(double *x, int n, double *med, double *p99) {
    if (n == 0) {
        *med = *p99 = 0;
        return;
    }
    qsort(x, (size_t)n, sizeof(double), cmp_d);
    *med = x[n / 2];
    int k = (int)(0.99 * (n - 1) + 0.5);
    *p99 = x[k];
}

static void bench(const char *vname, grammar_vocab *v, const char *gname, const char *gtext, bool prepare) {
    char err[256];
    double c0 = now_us();
    grammar *g = grammar_parse(gtext, strlen(gtext), err, sizeof err);
    CHECKF(g != NULL, "%s: %s", gname, err);
    grammar_matcher *m = grammar_matcher_create(g, v);
    CHECK(m != NULL);
    double parse_ms = (now_us() - c0) / 1e3;
    double p0 = now_us();
    int nkeys = prepare ? grammar_matcher_prepare(m) : 0;
    double prep_ms = (now_us() - p0) / 1e3;
    CHECK(nkeys >= 0);
    int V = grammar_vocab_size(v), cap = WALKS * STEPS;
    double *cold = malloc(sizeof(double) * (size_t)cap), *warm = malloc(sizeof(double) * (size_t)cap);
    double *all = malloc(sizeof(double) * (size_t)cap);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)V);
    CHECK(cold && warm && all && allowed);
    int nc = 0, nw = 0, na = 0;
    long faults = 0;
    gu_rng = 0x9E3779B97F4A7C15ull;
    for (int w = 0; w < WALKS; w++) {
        int32_t st = grammar_start(m);
        for (int k = 0; k < STEPS && st >= 0; k++) {
            grammar_stats a, b;
            grammar_matcher_stats(m, &a);
            struct rusage r0, r1;
            getrusage(RUSAGE_THREAD, &r0);
            double t0 = now_us();
            const uint32_t *mask = grammar_mask(m, st, -1);
            double dt = now_us() - t0;
            getrusage(RUSAGE_THREAD, &r1);
            grammar_matcher_stats(m, &b);
            if (b.mask_hits > a.mask_hits) warm[nw++] = dt;
            else {
                cold[nc++] = dt;
                faults += r1.ru_minflt - r0.ru_minflt;
                if (getenv("BENCH_DEBUG") && dt > atof(getenv("BENCH_DEBUG")))
                    fprintf(stderr, "  cold %s %s: %.0f us, %ld page faults, %llu nodes, %llu new states, %llu new stack nodes\n", vname, gname, dt,
                            (long)(r1.ru_minflt - r0.ru_minflt),
                            (unsigned long long)(b.nodes_visited - a.nodes_visited),
                            (unsigned long long)(b.states - a.states), (unsigned long long)(b.stack_nodes - a.stack_nodes));
            }
            all[na++] = dt;
            int n = 0;
            for (int t = 0; t < V; t++)
                if (mask[t >> 5] >> (t & 31) & 1) allowed[n++] = t;
            if (n == 0) break;
            if (grammar_accepting(m, st) && gu_next() % 8 == 0) break;
            st = grammar_advance_token(m, st, allowed[gu_next() % (uint32_t)n]);
        }
    }
    double cm, cp, wm, wp, am, ap;
    pct(cold, nc, &cm, &cp);
    pct(warm, nw, &wm, &wp);
    pct(all, na, &am, &ap);
    grammar_stats s;
    grammar_matcher_stats(m, &s);
    printf("%-10s %-8s parse+matcher %5.2f ms | ", vname, gname, parse_ms);
    printf("%-10s %-7s %-4s V=%6d  cold n=%4d median %7.1f us p99 %7.1f us | warm n=%4d median %4.1f us p99 %5.1f us | "
           "all median %5.1f us p99 %7.1f us | prepare %4d keys %6.1f ms %5.1f MiB | %llu states, %llu keys, %llu walks of %.0f trie "
           "nodes, %.0f context-dependent tokens and %.1f page faults per cold mask\n",
           vname, gname, prepare ? "prep" : "lazy", V, nc, cm, cp, nw, wm, wp, am, ap, nkeys, prep_ms, (double)s.key_bytes / (1 << 20),
           (unsigned long long)s.states, (unsigned long long)s.keys, (unsigned long long)s.walks,
           s.walks ? (double)s.nodes_visited / (double)s.walks : 0.0, nc ? (double)s.cd_checked / nc : 0.0,
           nc ? (double)faults / nc : 0.0);
    free(cold), free(warm), free(all), free(allowed);
    grammar_matcher_destroy(m);
    grammar_destroy(g);
}

/* A 20-property object schema, half of the strings with a pattern, integer
 * ranges and enums (issue 39's compile target), made GBNF as the server does. */
static char *schema20_gbnf(void) {
    json_t *props = json_object(), *req = json_array();
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof k, "field_%02d", i);
        json_t *p;
        if (i % 4 == 0) p = json_pack("{s:s,s:s}", "type", "string", "pattern", "^[A-Z]{2,4}-[0-9]{3,6}$");
        else if (i % 4 == 1) p = json_pack("{s:s,s:i,s:i}", "type", "integer", "minimum", -50, "maximum", 20000);
        else if (i % 4 == 2) p = json_pack("{s:s,s:s}", "type", "string", "pattern", "^[a-z]+(\\.[a-z]+)*@[a-z]+\\.(com|org)$");
        else p = json_pack("{s:[s,s,s]}", "enum", "red", "green", "blue");
        json_object_set_new(props, k, p);
        json_array_append_new(req, json_string(k));
    }
    json_t *sc = json_pack("{s:s,s:o,s:o,s:b}", "type", "object", "properties", props, "required", req,
                           "additionalProperties", 0);
    char err[256];
    char *g = js_schema_to_gbnf(sc, err, sizeof err);
    json_decref(sc);
    if (!g) fprintf(stderr, "schema20: %s\n", err);
    return g;
}

int main(void) {
    char *schema20 = schema20_gbnf();
    const char *files[] = {"tokenizer-vectors/ggml-vocab-llama-spm.gguf", "tokenizer-vectors/ggml-vocab-gpt-2.gguf",
                           "tokenizer-vectors/ggml-vocab-deepseek-llm.gguf"};
    const char *names[] = {"llama-spm", "gpt-2", "deepseek", "synth128k"};
    for (int f = 0; f < 4; f++) {
        char path[512];
        if (f < 3) {
            tu_model(path, sizeof path, files[f]);
        } else { /* 128k tokens: a one-layer model whose tokenizer is all that is read */
            const char *tmp = getenv("TMPDIR");
            snprintf(path, sizeof path, "%s/specd-bench-v128k-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
            mkmodel_opts o;
            mkmodel_opts_init(&o);
            o.n_layers = 1, o.dim = 64, o.n_heads = 4, o.n_kv_heads = 4, o.ff = 128, o.ctx = 64, o.vocab = 128256;
            o.seed = 1, o.name = "bench-v128k";
            char err[512];
            CHECKF(mkmodel_random(path, &o, NULL, err, sizeof err) == 0, "mkmodel: %s", err);
        }
        tokenizer *t = gu_tokenizer(path);
        if (f == 3) unlink(path);
        if (!t) SKIP("cannot load %s", path);
        grammar_vocab *v = grammar_vocab_create(t);
        CHECK(v != NULL);
        for (int prep = 1; prep >= 0; prep--) {
            bench(names[f], v, "json", grammar_json_gbnf(), prep);
            bench(names[f], v, "schema", GU_SCHEMA, prep);
            if (schema20) bench(names[f], v, "schema20", schema20, prep);
            fflush(stdout); /* before TEST_DONE's stderr line */
        }
        grammar_vocab_destroy(v);
        tok_destroy(t);
    }
    free(schema20);
    TEST_DONE();
}
