/* test_engine_stop.c — stop-string matching on its own (engine/sched/stop.h), as
 * emit_tokens feeds it: text arrives one token piece at a time; bytes that
 * can no longer begin a stop string pass through at once, the rest is held
 * back until a stop string completes (the output ends just before it) or
 * cannot any more; what is held at the end is flushed. */
#include "engine/sched/stop.h"
#include "tests/testutil.h"

#include <string.h>

#define CAP 256

typedef struct {
    stop_matcher m;
    char out[CAP];
    int len;
    bool stopped;
} run;

static void start(run *r, const char *const *stops) {
    memset(r, 0, sizeof(*r));
    stop_init(&r->m);
    for (int i = 0; stops && stops[i]; i++) CHECK(stop_add(&r->m, stops[i]) == 0);
}

/* feeds each piece in turn (as tokens would) until a stop completes */
static void feed(run *r, const char *const *pieces) {
    for (int i = 0; pieces[i] && !r->stopped; i++)
        r->stopped = stop_feed(&r->m, pieces[i], (int)strlen(pieces[i]), r->out, &r->len, CAP);
}

static bool out_is(const run *r, const char *want) {
    return r->len == (int)strlen(want) && !memcmp(r->out, want, (size_t)r->len);
}

#define S(...) ((const char *const[]){__VA_ARGS__, NULL})

int main(void) {
    run r;
    /* no stop strings: everything passes through at once, nothing is held */
    start(&r, NULL);
    feed(&r, S("Once ", "upon"));
    CHECK(!r.stopped && out_is(&r, "Once upon") && r.m.hold_len == 0);

    /* a stop string inside one piece: output ends just before it, the rest of the piece is dropped */
    start(&r, S("END"));
    feed(&r, S("abcENDxyz"));
    CHECK(r.stopped && out_is(&r, "abc") && r.m.hold_len == 0);

    /* across token boundaries: the partial match is held back, not emitted */
    start(&r, S("END"));
    feed(&r, S("abcE"));
    CHECKF(!r.stopped && out_is(&r, "abc") && r.m.hold_len == 1, "held %d", r.m.hold_len);
    feed(&r, S("N"));
    CHECK(!r.stopped && out_is(&r, "abc") && r.m.hold_len == 2);
    feed(&r, S("D", "never seen"));
    CHECK(r.stopped && out_is(&r, "abc"));

    /* one byte a piece, the stop spread over three */
    start(&r, S("</s>"));
    feed(&r, S("h", "i", "<", "/s", ">", "tail"));
    CHECK(r.stopped && out_is(&r, "hi"));

    /* a partial match that breaks: the held text is released with the byte that broke it */
    start(&r, S("END"));
    feed(&r, S("EN", "d!"));
    CHECK(!r.stopped && out_is(&r, "ENd!") && r.m.hold_len == 0);

    /* a broken partial match that is itself the start of another try */
    start(&r, S("aab"));
    feed(&r, S("a", "a", "a"));
    CHECKF(!r.stopped && out_is(&r, "a") && r.m.hold_len == 2, "len %d held %d", r.len, r.m.hold_len);
    feed(&r, S("b"));
    CHECK(r.stopped && out_is(&r, "a"));

    /* several stop strings: the first to complete wins, even when a longer
     * one that started earlier was still possible */
    start(&r, S("abcd", "bc"));
    feed(&r, S("xab", "cd"));
    CHECK(r.stopped && out_is(&r, "xa"));
    start(&r, S("xyz", "yq"));
    feed(&r, S("x", "y"));
    CHECK(!r.stopped && r.len == 0 && r.m.hold_len == 2); /* "xy" may begin xyz; "y" may begin yq */
    feed(&r, S("q"));
    CHECK(r.stopped && out_is(&r, "x"));
    start(&r, S("xyz", "yq"));
    feed(&r, S("xy", "z"));
    CHECK(r.stopped && out_is(&r, ""));

    /* held back while a stop might start, released by flush when the stream ends */
    start(&r, S("###"));
    feed(&r, S("done #", "#"));
    CHECK(!r.stopped && out_is(&r, "done ") && r.m.hold_len == 2);
    stop_flush(&r.m, r.out, &r.len, CAP);
    CHECK(out_is(&r, "done ##") && r.m.hold_len == 0);

    /* multi-byte UTF-8 stop across pieces; bytes are compared exactly */
    start(&r, S("\xC3\xA9t\xC3\xA9"));
    feed(&r, S("un \xC3", "\xA9t", "\xC3\xA9 !"));
    CHECK(r.stopped && out_is(&r, "un "));

    /* the output buffer bounds what is appended */
    {
        stop_matcher m;
        stop_init(&m);
        CHECK(stop_add(&m, "zz") == 0);
        char out[4];
        int len = 0;
        CHECK(!stop_feed(&m, "abcdefz", 7, out, &len, 4));
        CHECK(len == 4 && !memcmp(out, "abcd", 4) && m.hold_len == 1);
        stop_flush(&m, out, &len, 4);
        CHECK(len == 4 && m.hold_len == 0);
    }

    /* what stop_add refuses: empty, STOP_LEN bytes or more, more than STOP_MAX strings */
    {
        stop_matcher m;
        stop_init(&m);
        char longs[STOP_LEN + 1];
        memset(longs, 'x', sizeof(longs) - 1);
        longs[STOP_LEN] = 0;
        CHECK(stop_add(&m, "") == -1);
        CHECK(stop_add(&m, longs) == -1);
        longs[STOP_LEN - 1] = 0; /* STOP_LEN - 1 bytes: the longest allowed */
        CHECK(stop_add(&m, longs) == 0);
        for (int i = 1; i < STOP_MAX; i++) CHECK(stop_add(&m, "s") == 0);
        CHECK(stop_add(&m, "t") == -1 && m.n_stop == STOP_MAX);
        /* the longest stop string, fed a byte at a time, is held whole until it completes */
        char out[CAP];
        int len = 0;
        bool stopped = false;
        for (int i = 0; i < STOP_LEN - 1 && !stopped; i++) stopped = stop_feed(&m, "x", 1, out, &len, CAP);
        CHECK(stopped && len == 0);
    }
    TEST_DONE();
}
