/* test_metrics.c — /metrics text: parsed by a small Prometheus text-format
 * (0.0.4) parser written here (names, labels with escapes, values, HELP/TYPE
 * for every family before its samples, cumulative histogram buckets ending in
 * +Inf == _count), exact values from a known engine_stats, counters moving
 * after a request, and lock-free histogram counts under 4 writer threads. */
#include "gateway/metrics.h"
#include "tests/testutil.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small exposition parser ------------------------------------------------------- */

#define MAXS 512
#define MAXF 128

typedef struct {
    char name[96];
    char labels[160]; /* canonical: k="v",k="v" (unescaped values) */
    double value;
} sample;

typedef struct {
    char name[96];
    char type[16];
    bool help;
} fam;

typedef struct {
    sample s[MAXS];
    int ns;
    fam f[MAXF];
    int nf;
    char why[256]; /* first problem, "" when the text is valid */
} expo;

static bool valid_name(const char *s, size_t n, bool metric) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = isalpha((unsigned char)c) || c == '_' || (metric && c == ':') || (i > 0 && isdigit((unsigned char)c));
        if (!ok) return false;
    }
    return true;
}

static fam *find_fam(expo *e, const char *name) {
    for (int i = 0; i < e->nf; i++)
        if (!strcmp(e->f[i].name, name)) return &e->f[i];
    return NULL;
}

/* The family a sample belongs to: a histogram's _bucket/_sum/_count map to it. */
static fam *family_of(expo *e, const char *name) {
    fam *f = find_fam(e, name);
    if (f) return f;
    static const char *const suf[] = {"_bucket", "_sum", "_count"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(name), l = strlen(suf[k]);
        if (n > l && !strcmp(name + n - l, suf[k])) {
            char base[96];
            snprintf(base, sizeof base, "%.*s", (int)(n - l), name);
            f = find_fam(e, base);
            if (f && !strcmp(f->type, "histogram")) return f;
        }
    }
    return NULL;
}

#define BAD(...) do { snprintf(e->why, sizeof e->why, __VA_ARGS__); return; } while (0)

static void parse_expo(const char *text, expo *e) {
    memset(e, 0, sizeof *e);
    const char *p = text;
    int lineno = 0;
    if (!*p) BAD("empty");
    while (*p) {
        lineno++;
        const char *eol = strchr(p, '\n');
        if (!eol) BAD("line %d: no final newline", lineno);
        size_t len = (size_t)(eol - p);
        char line[512];
        if (len >= sizeof line) BAD("line %d too long", lineno);
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol + 1;
        if (len == 0) continue;
        if (line[0] == '#') {
            char kw[8], name[96];
            int off = 0;
            if (sscanf(line, "# %7s %95s %n", kw, name, &off) < 2) continue; /* a plain comment */
            if (strcmp(kw, "HELP") && strcmp(kw, "TYPE")) continue;
            if (!valid_name(name, strlen(name), true)) BAD("line %d: bad family name '%s'", lineno, name);
            fam *f = find_fam(e, name);
            if (!f) {
                if (e->nf == MAXF) BAD("too many families");
                f = &e->f[e->nf++];
                snprintf(f->name, sizeof f->name, "%s", name);
            }
            for (int i = 0; i < e->ns; i++)
                if (family_of(e, e->s[i].name) == f) BAD("line %d: %s for %s after its samples", lineno, kw, name);
            if (!strcmp(kw, "HELP")) {
                if (f->help) BAD("line %d: second HELP for %s", lineno, name);
                f->help = true;
            } else {
                if (f->type[0]) BAD("line %d: second TYPE for %s", lineno, name);
                const char *t = line + off;
                if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") && strcmp(t, "summary") &&
                    strcmp(t, "untyped"))
                    BAD("line %d: bad type '%s'", lineno, t);
                snprintf(f->type, sizeof f->type, "%s", t);
            }
            continue;
        }
        if (e->ns == MAXS) BAD("too many samples");
        sample *s = &e->s[e->ns];
        size_t n = strcspn(line, "{ ");
        if (!valid_name(line, n, true) || n >= sizeof s->name) BAD("line %d: bad metric name", lineno);
        memcpy(s->name, line, n);
        s->name[n] = '\0';
        const char *q = line + n;
        size_t lo = 0;
        if (*q == '{') {
            q++;
            while (*q != '}') {
                size_t ln = strcspn(q, "=");
                if (!valid_name(q, ln, false) || q[ln] != '=' || q[ln + 1] != '"')
                    BAD("line %d: bad label name", lineno);
                if (lo) s->labels[lo++] = ',';
                memcpy(s->labels + lo, q, ln + 2);
                lo += ln + 2;
                q += ln + 2;
                while (*q != '"') {
                    if (!*q) BAD("line %d: unterminated label value", lineno);
                    char c = *q++;
                    if (c == '\\') {
                        c = *q++;
                        if (c == 'n') c = '\n';
                        else if (c != '\\' && c != '"') BAD("line %d: bad escape", lineno);
                    }
                    if (lo + 3 >= sizeof s->labels) BAD("line %d: labels too long", lineno);
                    s->labels[lo++] = c;
                }
                s->labels[lo++] = '"';
                q++;
                if (*q == ',') q++;
                else if (*q != '}') BAD("line %d: expected , or }", lineno);
            }
            q++;
        }
        s->labels[lo] = '\0';
        if (*q != ' ') BAD("line %d: expected a space before the value", lineno);
        q++;
        char *end;
        if (!strcmp(q, "+Inf")) s->value = INFINITY;
        else if (!strcmp(q, "-Inf")) s->value = -INFINITY;
        else if (!strcmp(q, "NaN")) s->value = NAN;
        else {
            s->value = strtod(q, &end);
            if (end == q || *end) BAD("line %d: bad value '%s'", lineno, q);
        }
        fam *f = family_of(e, s->name);
        if (!f || !f->help || !f->type[0]) BAD("line %d: %s has no HELP and TYPE before it", lineno, s->name);
        if (!strcmp(f->type, "counter") && !(s->value >= 0)) BAD("line %d: negative counter", lineno);
        e->ns++;
    }
    /* histograms: buckets ascending in le, cumulative, last +Inf == _count */
    for (int i = 0; i < e->nf; i++) {
        fam *f = &e->f[i];
        if (!f->help || !f->type[0]) BAD("family %s lacks HELP or TYPE", f->name);
        if (strcmp(f->type, "histogram")) continue;
        char bn[112], cn[112], sn[112];
        snprintf(bn, sizeof bn, "%s_bucket", f->name);
        snprintf(cn, sizeof cn, "%s_count", f->name);
        snprintf(sn, sizeof sn, "%s_sum", f->name);
        double prev_le = -INFINITY, prev = 0, count = -1, last_le = 0, last = -1;
        int nb = 0, nsum = 0;
        for (int k = 0; k < e->ns; k++) {
            sample *s = &e->s[k];
            if (!strcmp(s->name, bn)) {
                if (strncmp(s->labels, "le=\"", 4)) BAD("%s: bucket without le", f->name);
                double le = !strcmp(s->labels, "le=\"+Inf\"") ? INFINITY : strtod(s->labels + 4, NULL);
                if (!(le > prev_le)) BAD("%s: le not ascending", f->name);
                if (s->value < prev) BAD("%s: buckets not cumulative", f->name);
                prev_le = le, prev = s->value, last_le = le, last = s->value;
                nb++;
            } else if (!strcmp(s->name, cn)) {
                count = s->value;
            } else if (!strcmp(s->name, sn)) {
                nsum++;
            }
        }
        if (nb < 2 || !isinf(last_le) || last != count || nsum != 1)
            BAD("%s: %d buckets, last le %g = %g, _count %g, %d _sum", f->name, nb, last_le, last, count, nsum);
    }
}

/* Value of the sample name{labels} (labels "" = none); NAN when absent. */
static double val(const expo *e, const char *name, const char *labels) {
    for (int i = 0; i < e->ns; i++)
        if (!strcmp(e->s[i].name, name) && !strcmp(e->s[i].labels, labels)) return e->s[i].value;
    return NAN;
}

static const char *type_of(expo *e, const char *name) {
    fam *f = find_fam(e, name);
    return f ? f->type : "";
}

/* ---- the tests --------------------------------------------------------------------- */

static expo E, E2;

static void *observer(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        metrics_observe_ttft(0.5 + (i % 100));
        metrics_observe_tpot(0.2);
    }
    return NULL;
}

int main(void) {
    /* the parser itself must refuse broken text */
    parse_expo("a_total 1\n", &E);
    CHECK(E.why[0] != '\0'); /* no HELP/TYPE */
    parse_expo("# HELP x h\n# TYPE x counter\nx{a=\"1\" 2\n", &E);
    CHECK(E.why[0] != '\0');
    parse_expo("# HELP 1x h\n# TYPE 1x counter\n1x 2\n", &E);
    CHECK(E.why[0] != '\0');
    parse_expo("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n", &E);
    CHECK(E.why[0] != '\0'); /* not cumulative */
    parse_expo("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", &E);
    CHECK(E.why[0] != '\0'); /* +Inf != _count */
    parse_expo("# HELP x h\n# TYPE x gauge\nx{a=\"q\\\"\\n\"} -1.5\n", &E);
    CHECKF(E.why[0] == '\0' && val(&E, "x", "a=\"q\"\n\"") == -1.5, "%s", E.why);

    metrics_reset();
    engine_stats es;
    memset(&es, 0, sizeof es);
    es.running = 3, es.waiting = 2, es.prefilling = 1;
    es.kv_total = 100, es.kv_free_target = 60, es.kv_free_draft = 70;
    es.steps = 500, es.tokens = 1234, es.requests_done = 9;
    es.verify_calls = 503, es.mixed_steps = 17;
    es.st.verify_steps = 40, es.st.drafted = 160, es.st.accepted = 100, es.st.fallbacks = 2, es.st.kv_resets = 1;
    es.st.kv_reset_reused = 48;
    es.st.pos_reached[0] = 40, es.st.pos_accepted[0] = 35;
    es.st.pos_reached[1] = 40, es.st.pos_accepted[1] = 28;
    es.st.pos_reached[2] = 30, es.st.pos_accepted[2] = 20;
    es.tree_decisions[0] = 7, es.tree_decisions[1] = 13, es.tree_auto = 5, es.st.tree_steps = 11, es.st.tree_nodes = 99;
    snprintf(es.target_id, sizeof es.target_id, "llama-1");
    snprintf(es.draft_id, sizeof es.draft_id, "llama-2");
    gw_counters gc = {.connections_open = 4, .connections_total = 17, .requests_total = 11, .slow_disconnects = 1};

    metrics_observe_ttft(3.0);    /* 0.003 s: first bucket with le >= 0.003 is 0.005 */
    metrics_observe_ttft(2.5);    /* exactly on the 0.0025 bound: le is inclusive */
    metrics_observe_ttft(100000); /* 100 s: only +Inf */
    metrics_observe_tpot(0.8);
    metrics_count_error("invalid_json");
    metrics_count_error("invalid_json");
    metrics_count_error("we\"ird");
    metrics_count_error(NULL);

    char *t = metrics_render(&es, &gc, NULL);
    CHECK(t != NULL);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s\n%s", E.why, t);
    CHECK(val(&E, "specd:spec_decode_num_drafts_total", "") == 40);
    CHECK(val(&E, "specd:spec_decode_num_draft_tokens_total", "") == 160);
    CHECK(val(&E, "specd:spec_decode_num_accepted_tokens_total", "") == 100);
    CHECK(val(&E, "specd:spec_decode_num_accepted_tokens_per_pos_total", "position=\"1\"") == 35);
    CHECK(val(&E, "specd:spec_decode_num_accepted_tokens_per_pos_total", "position=\"2\"") == 28);
    CHECK(val(&E, "specd:spec_decode_num_accepted_tokens_per_pos_total", "position=\"3\"") == 20);
    CHECK(isnan(val(&E, "specd:spec_decode_num_accepted_tokens_per_pos_total", "position=\"4\"")));
    CHECK(val(&E, "specd:spec_decode_num_drafted_tokens_per_pos_total", "position=\"3\"") == 30);
    CHECK(!strcmp(type_of(&E, "specd:spec_decode_num_drafts_total"), "counter"));
    CHECK(val(&E, "specd:spec_decode_fallbacks_total", "") == 2);
    CHECK(val(&E, "specd:kv_resets_total", "") == 1);
    CHECK(val(&E, "specd:kv_reset_reused_tokens_total", "") == 48);
    CHECK(val(&E, "specd:spec_tree_decisions_total", "path=\"chain\"") == 7);
    CHECK(val(&E, "specd:spec_tree_decisions_total", "path=\"tree\"") == 13);
    CHECK(val(&E, "specd:spec_tree_auto_steps_total", "") == 5);
    CHECK(val(&E, "specd:spec_tree_branched_steps_total", "") == 11);
    CHECK(val(&E, "specd:spec_tree_nodes_total", "") == 99);
    CHECK(!strcmp(type_of(&E, "specd:spec_tree_nodes_total"), "counter"));
    CHECK(val(&E, "specd:generation_tokens_total", "") == 1234);
    CHECK(val(&E, "specd:verify_calls_total", "") == 503);
    CHECK(val(&E, "specd:mixed_steps_total", "") == 17 && !strcmp(type_of(&E, "specd:mixed_steps_total"), "counter"));
    CHECK(val(&E, "specd:num_requests_running", "") == 3 && !strcmp(type_of(&E, "specd:num_requests_running"), "gauge"));
    CHECK(val(&E, "specd:num_requests_waiting", "") == 2);
    CHECK(val(&E, "specd:kv_blocks_used", "model=\"target\"") == 40);
    CHECK(val(&E, "specd:kv_blocks_used", "model=\"draft\"") == 30);
    CHECK(val(&E, "specd:kv_blocks_free", "model=\"target\"") == 60);
    CHECK(val(&E, "specd:kv_blocks_free", "model=\"draft\"") == 70);
    CHECK(val(&E, "specd:requests_total", "") == 11);
    CHECK(val(&E, "specd:connections_open", "") == 4 && val(&E, "specd:connections_total", "") == 17);
    CHECK(val(&E, "specd:slow_disconnects_total", "") == 1);
    CHECK(val(&E, "specd:errors_total", "code=\"invalid_json\"") == 2);
    CHECK(val(&E, "specd:errors_total", "code=\"we\"ird\"") == 1);
    CHECK(val(&E, "specd:errors_total", "code=\"unknown\"") == 1);
    const char *h = "specd:time_to_first_token_seconds";
    CHECK(!strcmp(type_of(&E, h), "histogram"));
    CHECK(val(&E, "specd:time_to_first_token_seconds_bucket", "le=\"0.001\"") == 0);
    CHECK(val(&E, "specd:time_to_first_token_seconds_bucket", "le=\"0.0025\"") == 1);
    CHECK(val(&E, "specd:time_to_first_token_seconds_bucket", "le=\"0.005\"") == 2);
    CHECK(val(&E, "specd:time_to_first_token_seconds_bucket", "le=\"40\"") == 2);
    CHECK(val(&E, "specd:time_to_first_token_seconds_bucket", "le=\"+Inf\"") == 3);
    CHECK(val(&E, "specd:time_to_first_token_seconds_count", "") == 3);
    CHECK(fabs(val(&E, "specd:time_to_first_token_seconds_sum", "") - 100.0055) < 1e-6);
    CHECK(val(&E, "specd:time_per_output_token_seconds_bucket", "le=\"0.001\"") == 1);
    CHECK(val(&E, "specd:time_per_output_token_seconds_bucket", "le=\"0.0005\"") == 0);
    /* every family the gateway promises is there */
    const char *must[] = {"specd:spec_decode_num_drafts_total", "specd:spec_decode_num_draft_tokens_total",
                          "specd:spec_decode_num_accepted_tokens_total",
                          "specd:spec_decode_num_accepted_tokens_per_pos_total", "specd:time_to_first_token_seconds",
                          "specd:time_per_output_token_seconds", "specd:num_requests_running",
                          "specd:num_requests_waiting", "specd:kv_blocks_used", "specd:kv_blocks_free",
                          "specd:spec_decode_fallbacks_total", "specd:kv_resets_total",
                          "specd:generation_tokens_total", "specd:requests_total", "specd:errors_total",
                          "specd:request_success_total"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) CHECKF(find_fam(&E, must[i]) != NULL, "%s", must[i]);
    (void)h;
    free(t);

    /* counters move after a request */
    engine_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = ENGINE_EV_FINISHED;
    ev.reason = FINISH_STOP;
    ev.completion_tokens = 5;
    ev.ttft_ms = 20, ev.tpot_ms = 2;
    gw_metrics_finished(&ev);
    gw_metrics_error("invalid_json");
    es.tokens += 5, es.requests_done++;
    gc.requests_total++;
    t = metrics_render(&es, &gc, NULL);
    parse_expo(t, &E2);
    CHECKF(E2.why[0] == '\0', "%s", E2.why);
    CHECK(val(&E2, "specd:time_to_first_token_seconds_count", "") == 4);
    CHECK(val(&E2, "specd:time_per_output_token_seconds_count", "") == 2);
    CHECK(val(&E2, "specd:request_success_total", "finished_reason=\"stop\"") == 1);
    CHECK(val(&E2, "specd:request_success_total", "finished_reason=\"length\"") == 0);
    CHECK(val(&E2, "specd:errors_total", "code=\"invalid_json\"") == 3);
    CHECK(val(&E2, "specd:generation_tokens_total", "") == 1239);
    CHECK(val(&E2, "specd:requests_total", "") == 12);
    free(t);

    /* no draft: no draft samples; no engine: still valid text */
    es.draft_id[0] = '\0';
    t = metrics_render(&es, NULL, NULL);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s", E.why);
    CHECK(isnan(val(&E, "specd:kv_blocks_used", "model=\"draft\"")) && val(&E, "specd:requests_total", "") == 0);
    free(t);
    t = metrics_render(NULL, NULL, NULL);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s", E.why);
    CHECK(find_fam(&E, "specd:num_requests_running") == NULL && find_fam(&E, "specd:time_to_first_token_seconds"));
    free(t);

    /* learning from traffic (issue 37): its families only while it is on, each with its value */
    engine_learn_stats ls = {0};
    t = metrics_render(&es, NULL, &ls);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s", E.why);
    CHECK(find_fam(&E, "specd:learn_swaps_total") == NULL && find_fam(&E, "specd:learn_head_version") == NULL);
    free(t);
    ls.enabled = true, ls.swaps = 3, ls.rejected = 5, ls.rollbacks = 1, ls.train_positions = 123456;
    ls.ring_pushed = 40, ls.ring_dropped = 7, ls.opted_out = 2, ls.head_version = 4, ls.ring_bytes = 1 << 20;
    ls.ring_cap = 256u << 20, ls.ring_samples = 33, ls.ring_positions = 4096, ls.train_pos_per_s = 812.5;
    ls.train_cpu_share = 0.25, ls.live_accept = 1.75;
    t = metrics_render(&es, NULL, &ls);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s", E.why);
    CHECK(val(&E, "specd:learn_swaps_total", "") == 3 && val(&E, "specd:learn_rejected_total", "") == 5);
    CHECK(val(&E, "specd:learn_rollbacks_total", "") == 1 && val(&E, "specd:learn_train_positions_total", "") == 123456);
    CHECK(val(&E, "specd:learn_ring_pushed_total", "") == 40 && val(&E, "specd:learn_ring_dropped_total", "") == 7);
    CHECK(val(&E, "specd:learn_opted_out_total", "") == 2 && val(&E, "specd:learn_head_version", "") == 4);
    CHECK(val(&E, "specd:learn_ring_bytes", "") == 1 << 20 && val(&E, "specd:learn_ring_positions", "") == 4096);
    CHECK(val(&E, "specd:learn_train_positions_per_second", "") == 812.5);
    CHECK(val(&E, "specd:learn_train_cpu_share", "") == 0.25 && val(&E, "specd:learn_live_accept", "") == 1.75);
    CHECK(!strcmp(find_fam(&E, "specd:learn_swaps_total")->type, "counter") &&
          !strcmp(find_fam(&E, "specd:learn_ring_bytes")->type, "gauge"));
    free(t);

    /* concurrent observers: nothing lost */
    metrics_reset();
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, observer, NULL);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    t = metrics_render(NULL, NULL, NULL);
    parse_expo(t, &E);
    CHECKF(E.why[0] == '\0', "%s", E.why);
    CHECK(val(&E, "specd:time_to_first_token_seconds_count", "") == 40000);
    CHECK(val(&E, "specd:time_per_output_token_seconds_bucket", "le=\"0.00025\"") == 40000);
    CHECK(val(&E, "specd:time_per_output_token_seconds_bucket", "le=\"0.0001\"") == 0);
    CHECK(fabs(val(&E, "specd:time_per_output_token_seconds_sum", "") - 8.0) < 1e-3);
    free(t);

    /* a standalone histogram */
    static const double b[] = {1, 2};
    metrics_hist hh;
    metrics_hist_init(&hh, b, 2);
    metrics_hist_observe(&hh, NAN);
    metrics_hist_observe(&hh, 1.5);
    metrics_hist_observe(&hh, 7);
    CHECK(hh.counts[0] == 1 && hh.counts[1] == 1 && hh.counts[2] == 1);
    TEST_DONE();
}
