/* engine_util.h — shared helpers of the engine tests (header-only): model
 * paths, corpus prompts of chosen token lengths, a notify-driven waiter, and a
 * per-request event collector that checks the event order contract (started
 * first, finished/error last, the id released right after the final event). */
#ifndef SPECD_TEST_ENGINE_UTIL_H
#define SPECD_TEST_ENGINE_UTIL_H

#include "engine/engine.h"
#include "engine/spec/proposers/medusa.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EU_MAX_TOK 512
#define EU_MAX_TEXT 8192
#define EU_MAX_PROMPT 1024

static inline double eu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The real pair: stories260K target + llama2xs-281K draft, with cfg's other
 * fields kept. Aborts the test when the engine cannot be created. */
static inline engine *eu_create(engine_config *cfg, bool with_draft) {
    static char t[512], d[512];
    cfg->target_path = tu_model(t, sizeof(t), "stories260K.gguf");
    cfg->draft_path = with_draft ? tu_model(d, sizeof(d), "llama2xs-281K.gguf") : NULL;
    char err[512];
    engine *e = engine_create(cfg, NULL, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "engine_create: %s\n", err);
        exit(1);
    }
    return e;
}

/* Writes Medusa heads to path for the target of identity target_id
 * (engine_stats.target_id; another id makes heads the engine refuses): 3
 * zero-initialised heads of one ResBlock (each the identity on h) for the
 * real pair's dim 64 and vocabulary 512, with or without token input. They
 * propose; what they propose must not change an output. Fails the test
 * (returns false) when they cannot be written. */
static inline bool eu_identity_heads(const char *target_id, bool token_input, const char *path) {
    char err[512];
    medusa_heads *mh = medusa_heads_create(3, 1, 0, 64, 512, false, token_input, NULL, err, sizeof err);
    CHECKF(mh, "%s", err);
    if (!mh) return false;
    snprintf(mh->target_id, sizeof mh->target_id, "%s", target_id);
    int rc = medusa_heads_save(mh, path, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    medusa_heads_destroy(mh);
    return rc == 0;
}

/* ---- prompts ---------------------------------------------------------------- */

typedef struct {
    int32_t ids[EU_MAX_PROMPT];
    int n;
} eu_prompt;

/* The corpus text (first 256 KB), loaded once. */
static inline const char *eu_corpus(size_t *len) {
    static char *text;
    static size_t n;
    if (!text) {
        char path[512];
        tu_model(path, sizeof(path), "corpora/tinystories_valid_30K.txt");
        FILE *f = fopen(path, "rb");
        if (!f) SKIP("cannot open %s", path);
        text = malloc(1 << 18);
        if (!text) exit(1);
        n = fread(text, 1, (1 << 18) - 1, f);
        fclose(f);
        text[n] = 0;
    }
    *len = n;
    return text;
}

/* A prompt of exactly n_tokens ids (BOS + corpus text from the k-th sentence
 * start, cut at n_tokens). n_tokens ≤ EU_MAX_PROMPT. */
static inline void eu_make_prompt(const tokenizer *tok, int k, int n_tokens, eu_prompt *out) {
    size_t len;
    const char *text = eu_corpus(&len);
    size_t at = 0;
    for (int i = 0; i < k; i++) {
        const char *s = strstr(text + at, ". ");
        if (!s) break;
        at = (size_t)(s - text) + 2;
    }
    size_t take = len - at < 8192 ? len - at : 8192;
    static int32_t buf[4096];
    int got = tok_encode(tok, text + at, take, true, false, buf, 4096);
    if (got < 0) got = 4096;
    if (got < n_tokens) {
        fprintf(stderr, "corpus too short for a %d-token prompt\n", n_tokens);
        exit(1);
    }
    memcpy(out->ids, buf, sizeof(int32_t) * (size_t)n_tokens);
    out->n = n_tokens;
}

/* ---- notify-driven waiting -------------------------------------------------- */

/* Called by the engine thread (with its lock held) after events were pushed:
 * only bumps a counter and wakes the consumer. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
} eu_waiter;

static inline void eu_waiter_init(eu_waiter *w) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->gen = 0;
}

static inline void eu_waiter_destroy(eu_waiter *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static inline void eu_notify(void *user) {
    eu_waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->gen++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Waits until a notify newer than *seen (or timeout_ms) and updates *seen. */
static inline void eu_wait(eu_waiter *w, uint64_t *seen, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    ts.tv_sec += timeout_ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&w->mu);
    while (w->gen == *seen)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT) break;
    *seen = w->gen;
    pthread_mutex_unlock(&w->mu);
}

/* ---- per-request collection ------------------------------------------------- */

typedef struct {
    uint64_t id;
    int32_t toks[EU_MAX_TOK];
    int n_tok;
    char text[EU_MAX_TEXT];
    int text_len;
    int n_events, n_started, n_tokens_ev;
    bool started_first;        /* false if something came before `started` */
    bool got_final;
    engine_event fin;          /* the finished or error event */
    double queue_ms;
    int prompt_tokens;
    int bad_events;            /* contract violations seen (printed) */
    bool released;             /* poll returned -1 right after the final event */
} eu_out;

static inline void eu_out_init(eu_out *o, uint64_t id) {
    memset(o, 0, sizeof(*o));
    o->id = id;
    o->started_first = true;
}

/* Drains every ready event of o->id. Returns true once the final event was
 * consumed (then also checks that the id is released at once). */
static inline bool eu_take(engine *e, eu_out *o) {
    engine_event ev;
    while (!o->got_final) {
        int rc = engine_poll(e, o->id, &ev);
        if (rc == 0) break;
        if (rc < 0) {
            fprintf(stderr, "request %llu: poll returned -1 before its final event\n", (unsigned long long)o->id);
            o->bad_events++;
            o->got_final = true; /* nothing more will come */
            break;
        }
        if (ev.id != o->id) {
            fprintf(stderr, "request %llu: event carries id %llu\n", (unsigned long long)o->id,
                    (unsigned long long)ev.id);
            o->bad_events++;
        }
        if (o->n_events == 0 && ev.type != ENGINE_EV_STARTED && ev.type != ENGINE_EV_ERROR &&
            !(ev.type == ENGINE_EV_FINISHED && ev.reason == FINISH_CANCELLED))
            o->started_first = false;
        o->n_events++;
        switch (ev.type) {
        case ENGINE_EV_STARTED:
            if (o->n_events != 1) o->started_first = false;
            o->n_started++;
            o->queue_ms = ev.queue_ms;
            o->prompt_tokens = ev.prompt_tokens;
            break;
        case ENGINE_EV_TOKENS:
            o->n_tokens_ev++;
            if (ev.n_tokens < 1 || ev.n_tokens > GAMMA_MAX + 1 || ev.n_accepted < 0 || ev.n_accepted > ev.n_tokens) {
                fprintf(stderr, "request %llu: tokens event with n_tokens %d n_accepted %d\n",
                        (unsigned long long)o->id, ev.n_tokens, ev.n_accepted);
                o->bad_events++;
            }
            for (int i = 0; i < ev.n_tokens && o->n_tok < EU_MAX_TOK; i++) o->toks[o->n_tok++] = ev.tokens[i];
            if (ev.text_len < 0 || ev.text_len > ENGINE_TEXT_MAX || o->text_len + ev.text_len > EU_MAX_TEXT) {
                fprintf(stderr, "request %llu: text_len %d\n", (unsigned long long)o->id, ev.text_len);
                o->bad_events++;
            } else {
                memcpy(o->text + o->text_len, ev.text, (size_t)ev.text_len);
                o->text_len += ev.text_len;
            }
            break;
        case ENGINE_EV_FINISHED:
        case ENGINE_EV_ERROR:
            o->got_final = true;
            o->fin = ev;
            break;
        default:
            fprintf(stderr, "request %llu: unknown event type %d\n", (unsigned long long)o->id, (int)ev.type);
            o->bad_events++;
        }
        if (o->got_final) {
            /* nothing follows the final event: the id is released at once */
            engine_event more;
            o->released = engine_poll(e, o->id, &more) == -1;
            if (!o->released) {
                fprintf(stderr, "request %llu: poll did not return -1 after the final event\n",
                        (unsigned long long)o->id);
                o->bad_events++;
            }
        }
    }
    return o->got_final;
}

/* Drains o until its final event, waiting on w (the request's notify user).
 * Returns false on timeout. */
static inline bool eu_drain(engine *e, eu_out *o, eu_waiter *w, double timeout_ms) {
    double t0 = eu_now_ms();
    uint64_t seen = 0;
    while (!eu_take(e, o)) {
        if (eu_now_ms() - t0 > timeout_ms) {
            fprintf(stderr, "request %llu: no final event after %.0f ms\n", (unsigned long long)o->id, timeout_ms);
            return false;
        }
        eu_wait(w, &seen, 50);
    }
    return true;
}

/* Submits r with the given notify callback and returns its id; aborts the
 * test when the engine refuses it. */
static inline uint64_t eu_submit_notify(engine *e, engine_request *r, engine_notify_fn notify, void *user) {
    char err[512];
    r->notify = notify;
    r->user = user;
    uint64_t id = 0;
    engine_submit(e, r, &id, err, sizeof(err));
    if (!id) {
        fprintf(stderr, "engine_submit: %s\n", err);
        exit(1);
    }
    return id;
}

/* Submits r (notify routed to w); see eu_submit_notify. */
static inline uint64_t eu_submit(engine *e, engine_request *r, eu_waiter *w) {
    return eu_submit_notify(e, r, eu_notify, w);
}

/* Waits until the engine has nothing running, prefilling or waiting. */
static inline bool eu_wait_idle(engine *e, double timeout_ms) {
    double t0 = eu_now_ms();
    for (;;) {
        engine_stats st;
        engine_get_stats(e, &st);
        if (st.running == 0 && st.waiting == 0 && st.prefilling == 0) return true;
        if (eu_now_ms() - t0 > timeout_ms) return false;
        usleep(1000);
    }
}

/* Polls the stats until pred(st, arg) holds (or timeout); returns it. */
typedef bool (*eu_stats_pred)(const engine_stats *st, void *arg);
static inline bool eu_wait_stats(engine *e, eu_stats_pred pred, void *arg, double timeout_ms, engine_stats *out) {
    double t0 = eu_now_ms();
    for (;;) {
        engine_get_stats(e, out);
        if (pred(out, arg)) return true;
        if (eu_now_ms() - t0 > timeout_ms) return false;
        usleep(1000);
    }
}

#endif
