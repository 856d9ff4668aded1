/* engine.c — the engine thread: admission by KV reservation, chunked prefill
 * interleaved with decode, binned speculative steps, per-request event rings
 * with backpressure (see engine.h). One mutex guards the request table, the
 * waiting FIFO, cancel flags and the rings; model work runs without it. */
#include "engine/engine.h"
#include "engine/constrain.h"

#include "engine/chat.h"
#include "engine/draft_medusa.h"
#include "engine/draft_tree.h"
#include "engine/plan.h"
#include "engine/rng.h"
#include "engine/telemetry.h"
#include "kernels/comm.h"
#include "policy/config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENGINE_ASSERT(c) do { if (!(c)) { fprintf(stderr, "%s:%d: engine invariant failed: %s\n", \
                                                  __FILE__, __LINE__, #c); abort(); } } while (0)

typedef enum { RQ_WAITING = 0, RQ_PREFILL, RQ_RUNNING, RQ_DONE } rq_state;

typedef struct req {
    uint64_t id;
    rq_state state;
    int32_t *prompt;
    int n_prompt;
    spec_seq_params prm;
    int max_tokens;
    char stop[ENGINE_MAX_STOP][ENGINE_STOP_LEN];
    int n_stop;
    int32_t *stop_ids;
    int n_stop_ids;
    bool adaptive;
    bool policy_bounds;           /* γ bounds come from the policy (the request did not fix γ) */
    bool method_set;              /* the request chose its proposer (else the policy rule's) */
    char content_type[32];
    engine_notify_fn notify;
    void *user;
    uint64_t client;              /* the fair-share group (0: none) */
    bool cancel;                  /* requested by a client */
    bool paused;                  /* admitted, waiting for its reader: holds KV but no running slot */
    uint64_t pause_seq;           /* when it paused (resume order) */
    bool final_pushed;            /* finished/error is in the ring: nothing more */
    int reserved;                 /* KV blocks reserved per pool */
    spec_seq *seq;
    char *grammar_text;           /* GBNF of a constrained request (NULL: none) */
    size_t grammar_len;
    grammar_matcher *gm;          /* held from the cache while admitted (engine thread, under mu) */
    tok_stream ts;
    char hold[ENGINE_STOP_LEN * 2];/* text held back: may be the start of a stop string */
    int hold_len;
    int n_out;
    int step_num;
    int pub_gamma;                /* published under mu after each step */
    int pub_method;               /* drafter slot of the last step, -1 plain */
    tree_shape pub_shape;         /* the last step's tree shape (budget 0: the chain path) */
    /* tree speculation: mode (ENGINE_TREE_OFF/AUTO/FIXED, resolved at submit),
     * the bounds (the fixed shape), the controller (auto) and this step's pick */
    int tree_mode;
    tree_shape tree_sh;
    tree_ctl tctl;
    bool tctl_seeded;
    int tree_entry;               /* menu entry of this step (0: the chain path) */
    medusa_seq *ms;               /* speculation.method medusa: the last hidden state (else NULL) */
    double pub_alpha;
    char session[40];
    double t_submit, t_admit, t_first, t_last;
    engine_event *ring;           /* (ring_cap) */
    int head, count;
    struct req *next_wait;
} req;

struct engine {
    engine_config cfg;
    backend *be;                   /* shard 0: the draft's and the unsharded target's */
    backend *shards[ENGINE_MAX_SHARDS]; /* the target's shards (n_shards; [0] == be) */
    int n_shards;
    comm *tp_comm;                 /* all-reduce between the shards (n_shards > 1) */
    spec_pair *sp;
    constrain_cache *gc;           /* grammars and matchers of constrained requests (under mu) */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    req **slots;                  /* (n_slots) id & 0xffff -> request */
    int n_slots;
    uint64_t gen;
    req *wait_head, *wait_tail;
    int n_waiting;
    req **active;                 /* (n_slots) admitted: prefilling, running or paused; engine thread */
    int n_active;
    uint64_t pause_ctr;
    int reserved_blocks;          /* per pool */
    plan_history hist;
    /* step scratch (engine thread) */
    spec_seq **bseq, **mseq;
    int *bmax, *bgam, *order, *gam_all, *mmax;
    spec_step_info *binfo;
    plan_bin *bins;
    /* tree speculation (cfg.tree != off): scratch, the measured cost curve,
     * the engine-wide controller that seeds each sequence's, this step's tree
     * sequences */
    spec_tree_ctx *tc;
    draft_tree *dt;
    medusa_heads *mh;             /* cfg.medusa_path: the heads and their proposer (else NULL) */
    draft_medusa *dm;
    tree_shape medusa_sh;
    spec_seq **useq;              /* this step's Medusa sequences (and their states, limits, info) */
    medusa_seq **ums;
    int *umax;
    struct req **ureq;
    spec_step_info *uinfo;
    double t_rows[TREE_CTL_ROWS + 1];
    tree_ctl tree_prior;
    struct req **treq;
    spec_seq **tseq;
    tree_shape *tsh;
    spec_method *thow;
    int *tmax, *tent;
    spec_step_info *tinfo;
    /* per stepped sequence (chain: binfo's index; tree: tinfo's): its call's
     * wall time / sequences, the sequences and verify rows of the call */
    double *cms, *tms;
    int *cbatch, *crows, *tbatch, *trows;
    uint64_t tree_decisions[2], tree_auto; /* under mu */
    /* copies of engine-thread state for engine_get_stats (under mu) */
    int kv_free_t, kv_free_d;
    int pfx_cached[2], pfx_idle[2];
    uint64_t pfx_evicted[2], pfx_cow[2];
    gamma_costs costs_pub;
    /* counters (under mu) */
    uint64_t steps, tokens, done, microbatches;
    uint64_t verify_calls;        /* target calls of decode steps (more than bins when max_batch splits them) */
    uint64_t accepted_hist[GAMMA_MAX + 1];
    spec_stats st_run;
    /* policy: the version the running requests' bounds come from, and the
     * acceptance each content type has been achieving (the controller's prior) */
    int policy_version;
    struct { char type[32]; double alpha; uint64_t n; } ct[16];
    int n_ct;            /* running requests' statistics, refreshed each step */
    double pad_sum;
    spec_stats st;
};

static double eng_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

engine_config engine_config_default(void) {
    return (engine_config){.backend = BACKEND_CPU, .ragged = true, .block_size = 16, .max_running = 32, .max_waiting = 1024, .prefill_chunk = 256,
                           .ring_events = 64, .padding_cap = 1.5f, .gamma = gamma_params_default(),
                           .draft_mem_warn_pct = 20.0f, .calibrate = true, .method = SPEC_METHOD_AUTO,
                           .prefix_cache = true};
}

const char *engine_finish_name(engine_finish f) {
    static const char *names[] = {"length", "stop", "cancelled", "error"};
    return f <= FINISH_ERROR ? names[f] : "?";
}

const tokenizer *engine_tokenizer(const engine *e) { return e->sp->tok; }

void engine_get_info(const engine *e, engine_info *out) {
    memset(out, 0, sizeof(*out));
    out->gamma = e->cfg.gamma;
    out->max_ctx = e->sp->max_ctx;
    out->has_draft = spec_pair_has_draft(e->sp);
    out->has_medusa = e->dm != NULL;
    out->chat_template = (int)chat_template_detect(e->sp->target->gguf, e->sp->tok);
    out->tree = e->tc ? e->cfg.tree : ENGINE_TREE_OFF;
    out->tree_bounds = (tree_shape){e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    memcpy(out->tree_t_rows, e->t_rows, sizeof(out->tree_t_rows));
    backend_describe(e->be, out->backend_desc, sizeof(out->backend_desc));
    size_t n = 0;
    const char *b = tok_bos(e->sp->tok) >= 0 ? tok_token_str(e->sp->tok, tok_bos(e->sp->tok), &n) : "";
    snprintf(out->bos_text, sizeof(out->bos_text), "%.*s", (int)n, b ? b : "");
}

/* ---- rings (caller holds mu) ------------------------------------------------ */

static engine_event *ring_push(engine *e, req *r) {
    if (r->count == e->cfg.ring_events) return NULL;
    engine_event *ev = &r->ring[(r->head + r->count++) % e->cfg.ring_events];
    memset(ev, 0, offsetof(engine_event, text));
    ev->text_len = 0;
    ev->id = r->id;
    memcpy(ev->session, r->session, sizeof(ev->session));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ev->t_emit_ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
    return ev;
}

static int ring_free(const engine *e, const req *r) { return e->cfg.ring_events - r->count; }

static void ct_observe(engine *e, const char *type, const spec_stats *st);

static void req_free(req *r) {
    if (!r) return;
    spec_seq_free(r->seq);
    medusa_seq_destroy(r->ms);
    free(r->prompt);
    free(r->stop_ids);
    free(r->grammar_text);
    free(r->ring);
    free(r);
}

/* Ends a request: frees its sequence (KV) and reservation at once and pushes
 * the final event. Caller holds mu; the ring always has room for it because
 * requests are only stepped with two free slots. */
static void finish(engine *e, req *r, engine_finish why, const char *msg) {
    if (r->final_pushed) return;
    spec_stats st = r->seq ? r->seq->st : (spec_stats){0};
    spec_seq_free(r->seq);
    r->seq = NULL;
    constrain_release(e->gc, r->gm);
    r->gm = NULL;
    e->reserved_blocks -= r->reserved;
    r->reserved = 0;
    if (r->count == e->cfg.ring_events) r->count--; /* never lose the final event: drop the oldest unread */
    engine_event *ev = ring_push(e, r);
    ev->type = msg ? ENGINE_EV_ERROR : ENGINE_EV_FINISHED;
    ev->reason = msg ? FINISH_ERROR : why;
    if (msg) snprintf(ev->message, sizeof(ev->message), "%s", msg);
    ev->completion_tokens = r->n_out;
    ev->ttft_ms = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    ev->tpot_ms = r->n_out > 1 ? (r->t_last - r->t_first) / (r->n_out - 1) : 0;
    ev->st = st;
    if (e->cfg.telemetry && r->t_admit > 0) {
        tel_session_end te = {.generated_tokens = r->n_out, .total_accepted = (int64_t)st.accepted,
                              .total_rejected = (int64_t)(st.drafted - st.accepted),
                              .total_target_passes = (int64_t)(st.verify_steps + st.plain_steps),
                              .rolling_accept_sum = (int)st.accepted, .rolling_accept_n = (int)st.drafted,
                              .current_gamma = r->prm.gp.gamma_default, .kv_valid_len = r->n_prompt + r->n_out,
                              .ttft_ms = ev->ttft_ms, .tpot_ms = ev->tpot_ms,
                              .status = why == FINISH_CANCELLED ? TEL_STATUS_CANCELLED
                                        : msg                  ? TEL_STATUS_FAILED
                                                               : TEL_STATUS_COMPLETED};
        memcpy(te.session_id, r->session, sizeof(te.session_id));
        telemetry_session_end(e->cfg.telemetry, &te);
    }
    r->final_pushed = true;
    r->state = RQ_DONE;
    e->done++;
    spec_stats_add(&e->st, &st);
    ct_observe(e, r->content_type[0] ? r->content_type : "chat", &st);
}

/* ---- public API ------------------------------------------------------------- */

static int eng_fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The request's tree mode and bounds (engine_tree in engine.h). Trees need
 * the engine's tree setting on, and speculation without logprobs or coupled
 * verification (a grammar is fine: every node is masked by its own state): a request that asks for trees without those is
 * refused; one that inherits auto takes the chain path. */
static int resolve_tree(const engine *e, const engine_request *rq, req *r, char *err, size_t errlen) {
    int eng = e->tc ? e->cfg.tree : ENGINE_TREE_OFF;
    bool asked = rq->tree == ENGINE_TREE_AUTO || rq->tree == ENGINE_TREE_FIXED;
    if ((unsigned)rq->tree > ENGINE_TREE_FIXED) return eng_fail(err, errlen, "unknown tree mode %d", (int)rq->tree);
    if (asked && eng == ENGINE_TREE_OFF)
        return eng_fail(err, errlen, "tree speculation is off on this server (speculation.tree)");
    const tree_shape lim = {e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    tree_shape sh = lim;
    const int ask[3] = {rq->tree_budget, rq->tree_depth, rq->tree_topk}, top[3] = {lim.budget, lim.depth, lim.topk};
    static const char *names[3] = {"tree_budget", "tree_depth", "tree_topk"};
    for (int k = 0; k < 3; k++) {
        if (ask[k] == 0) continue;
        if (ask[k] < 1 || ask[k] > top[k])
            return eng_fail(err, errlen, "%s %d is outside [1, %d] (the server's bound)", names[k], ask[k], top[k]);
        if (k == 0) sh.budget = ask[k];
        else if (k == 1) sh.depth = ask[k];
        else sh.topk = ask[k];
    }
    if (sh.depth > sh.budget) sh.depth = sh.budget;
    int mode = rq->tree == ENGINE_TREE_DEFAULT ? eng : (int)rq->tree;
    if (mode != ENGINE_TREE_OFF) {
        const char *why = !r->prm.speculate ? "speculation is off for it"
                          : r->prm.logprobs ? "logprobs"
                          : r->prm.coupled  ? "coupled verification"
                                            : NULL;
        if (why && asked) return eng_fail(err, errlen, "tree speculation cannot be combined with %s", why);
        if (why) mode = ENGINE_TREE_OFF;
    }
    r->tree_mode = mode;
    r->tree_sh = sh;
    r->pub_shape = (tree_shape){0, 0, 0};
    if (mode == ENGINE_TREE_AUTO) tree_ctl_init(&r->tctl, e->t_rows, sh.budget, sh.depth, sh.topk);
    return 0;
}

uint64_t engine_submit(engine *e, const engine_request *rq, char *err, size_t errlen) {
    if (!sampler_config_validate(&rq->sc, err, errlen)) return 0;
    if (rq->max_tokens < 1) return eng_fail(err, errlen, "max_tokens must be at least 1"), 0;
    if (rq->mode == SPEC_MODE_DRAFT && !spec_pair_has_draft(e->sp))
        return eng_fail(err, errlen, "speculation mode 'draft' needs a draft model, and none is loaded"), 0;
    if (rq->method_set && rq->method == SPEC_METHOD_DRAFT && !spec_pair_has_draft(e->sp))
        return eng_fail(err, errlen, "speculation method 'draft' needs a draft model, and none is loaded"), 0;
    spec_method method = rq->mode == SPEC_MODE_DRAFT ? SPEC_METHOD_DRAFT : rq->method_set ? rq->method : (spec_method)e->cfg.method;
    if (method == SPEC_METHOD_MEDUSA && !e->dm) {
        if (rq->method_set)
            return eng_fail(err, errlen, "speculation method 'medusa' needs Medusa heads (models.medusa), and none "
                                         "are loaded"), 0;
        method = SPEC_METHOD_AUTO;
    }
    if (method == SPEC_METHOD_MEDUSA && (rq->logprobs || rq->verify == ENGINE_VERIFY_COUPLED))
        return eng_fail(err, errlen, "speculation method 'medusa' cannot be combined with %s",
                        rq->logprobs ? "logprobs" : "coupled verification"), 0;
    bool can_speculate = rq->mode != SPEC_MODE_OFF && e->cfg.mode != SPEC_MODE_OFF && method != SPEC_METHOD_OFF &&
                         (method != SPEC_METHOD_DRAFT || spec_pair_has_draft(e->sp));
    gamma_params gp = e->cfg.gamma;
    if (rq->gamma) {
        if (rq->gamma < gp.gamma_min || rq->gamma > gp.gamma_max)
            return eng_fail(err, errlen, "gamma %d is outside the policy bounds [%d, %d]", rq->gamma, gp.gamma_min,
                            gp.gamma_max), 0;
        gp.gamma_default = rq->gamma;
        gp.adaptive = rq->adaptive_set ? rq->adaptive : false;
    } else if (rq->adaptive_set) {
        gp.adaptive = rq->adaptive;
    }
    req *r = calloc(1, sizeof(*r));
    if (!r) return eng_fail(err, errlen, "out of memory"), 0;
    r->ring = malloc(sizeof(engine_event) * (size_t)e->cfg.ring_events);
    if (rq->prompt) {
        r->n_prompt = rq->n_prompt;
        r->prompt = malloc(sizeof(int32_t) * (size_t)(rq->n_prompt > 0 ? rq->n_prompt : 1));
        if (r->prompt && rq->n_prompt > 0) memcpy(r->prompt, rq->prompt, sizeof(int32_t) * (size_t)rq->n_prompt);
    } else {
        const char *text = rq->prompt_text ? rq->prompt_text : "";
        size_t len = strlen(text);
        int cap = (int)len + 8;
        r->prompt = malloc(sizeof(int32_t) * (size_t)cap);
        for (int k = 0; k < rq->n_special_spans; k++)
            if (rq->special_spans[k].start > rq->special_spans[k].end ||
                (k > 0 && rq->special_spans[k].start < rq->special_spans[k - 1].end)) {
                req_free(r);
                return eng_fail(err, errlen, "special_spans must be sorted and disjoint"), 0;
            }
        r->n_prompt = r->prompt ? tok_encode_spans(e->sp->tok, text, len, true, rq->special_spans,
                                                   rq->n_special_spans, r->prompt, cap) : -1;
    }
    if (!r->ring || !r->prompt) {
        req_free(r);
        return eng_fail(err, errlen, "out of memory"), 0;
    }
    if (r->n_prompt <= 0) {
        req_free(r);
        return eng_fail(err, errlen, "empty prompt"), 0;
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (!tok_valid_id(e->sp->tok, r->prompt[i])) {
            int bad = r->prompt[i];
            req_free(r);
            return eng_fail(err, errlen, "prompt token id %d is outside the vocabulary", bad), 0;
        }
    for (int i = 0; i < ENGINE_MAX_STOP && rq->stop[i]; i++) {
        if (strlen(rq->stop[i]) == 0 || strlen(rq->stop[i]) >= ENGINE_STOP_LEN) {
            req_free(r);
            return eng_fail(err, errlen, "stop strings must be 1..%d bytes", ENGINE_STOP_LEN - 1), 0;
        }
        snprintf(r->stop[r->n_stop++], ENGINE_STOP_LEN, "%s", rq->stop[i]);
    }
    if (rq->n_stop_ids > 0) {
        r->stop_ids = malloc(sizeof(int32_t) * (size_t)rq->n_stop_ids);
        if (!r->stop_ids) {
            req_free(r);
            return eng_fail(err, errlen, "out of memory"), 0;
        }
        memcpy(r->stop_ids, rq->stop_ids, sizeof(int32_t) * (size_t)rq->n_stop_ids);
        r->n_stop_ids = rq->n_stop_ids;
    }
    if (rq->grammar) { /* refused here with the parser's reason; compiled again (cached) at admission */
        size_t gl = strlen(rq->grammar);
        grammar *g = grammar_parse(rq->grammar, gl, err, errlen);
        if (!g) {
            req_free(r);
            return 0;
        }
        grammar_destroy(g);
        if (!(r->grammar_text = malloc(gl + 1))) {
            req_free(r);
            return eng_fail(err, errlen, "out of memory"), 0;
        }
        memcpy(r->grammar_text, rq->grammar, gl + 1);
        r->grammar_len = gl;
    }
    /* Medusa sequences are stepped by draft_medusa (the tree path); to the
     * spec layer they are n-gram sequences (cheap state, never used) */
    r->prm = (spec_seq_params){.sc = rq->sc, .seed = rq->seed, .gp = gp, .speculate = can_speculate,
                               .method = method == SPEC_METHOD_MEDUSA ? SPEC_METHOD_NGRAM : method};
    if (method == SPEC_METHOD_MEDUSA && can_speculate && !(r->ms = medusa_seq_create(e->dm))) {
        req_free(r);
        return eng_fail(err, errlen, "out of memory"), 0;
    }
    r->prm.coupled = rq->verify == ENGINE_VERIFY_COUPLED || (rq->verify == ENGINE_VERIFY_DEFAULT && e->cfg.coupled);
    if (r->prm.speculate && !gamma_params_validate(&gp, err, errlen)) {
        req_free(r);
        return 0;
    }
    r->adaptive = gp.adaptive;
    r->prm.no_prefix = rq->no_prefix_cache;
    r->prm.logprobs = rq->logprobs;
    r->prm.top_logprobs = rq->top_logprobs < 0 ? 0 : rq->top_logprobs > SPEC_TOP_LOGPROBS ? SPEC_TOP_LOGPROBS : rq->top_logprobs;
    if (resolve_tree(e, rq, r, err, errlen) != 0) {
        req_free(r);
        return 0;
    }
    r->policy_bounds = rq->gamma == 0;
    r->method_set = rq->method_set || rq->mode == SPEC_MODE_DRAFT;
    r->pub_method = -1;
    snprintf(r->content_type, sizeof(r->content_type), "%s", rq->content_type ? rq->content_type : "");
    r->max_tokens = rq->max_tokens;
    r->notify = rq->notify;
    r->user = rq->user;
    r->client = rq->client;
    r->t_submit = eng_now_ms();
    {
        static _Atomic uint64_t counter;
        uint64_t k = atomic_fetch_add(&counter, 1) + 1, t = (uint64_t)(r->t_submit * 1e3);
        tel_uuid_format(r->session, rng_u64(t, k, 11, 0), rng_u64(t, k, 12, 1));
    }
    tok_stream_init(&r->ts, e->sp->tok, TOK_DECODE_CONTINUATION * (r->n_prompt > 1));

    pthread_mutex_lock(&e->mu);
    int slot = -1;
    if (e->n_waiting < e->cfg.max_waiting)
        for (int i = 0; i < e->n_slots; i++)
            if (!e->slots[i]) {
                slot = i;
                break;
            }
    if (slot < 0) {
        pthread_mutex_unlock(&e->mu);
        req_free(r);
        return eng_fail(err, errlen, "the engine's queue is full (%d waiting); try again later", e->cfg.max_waiting), 0;
    }
    r->id = (++e->gen << 16) | (uint64_t)slot;
    e->slots[slot] = r;
    if (e->wait_tail) e->wait_tail->next_wait = r;
    else e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return r->id;
}

static req *lookup(engine *e, uint64_t id) {
    int slot = (int)(id & 0xffff);
    if (slot >= e->n_slots) return NULL;
    req *r = e->slots[slot];
    return r && r->id == id ? r : NULL;
}

int engine_cancel(engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    req *r = lookup(e, id);
    int rc = -1;
    if (r && !r->final_pushed && !r->cancel) {
        r->cancel = true;
        rc = 0;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_poll(engine *e, uint64_t id, engine_event *ev) {
    pthread_mutex_lock(&e->mu);
    req *r = lookup(e, id);
    int rc = -1;
    bool wake = false;
    if (r) {
        rc = 0;
        if (r->count > 0) {
            *ev = r->ring[r->head];
            r->head = (r->head + 1) % e->cfg.ring_events;
            r->count--;
            rc = 1;
            wake = r->count == e->cfg.ring_events / 2; /* a paused request may run again */
            if (r->count == 0 && r->final_pushed) {
                e->slots[id & 0xffff] = NULL; /* released: the engine no longer references it */
                req_free(r);
            }
        }
    }
    if (wake) pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_get_sequences(engine *e, engine_seq_info *out, int max) {
    pthread_mutex_lock(&e->mu);
    int n = 0;
    double now = eng_now_ms();
    for (int i = 0; i < e->n_active && n < max; i++) {
        const req *r = e->active[i];
        if (r->final_pushed) continue;
        engine_seq_info *o = &out[n++];
        memset(o, 0, sizeof(*o));
        o->id = r->id;
        memcpy(o->session, r->session, sizeof(o->session));
        snprintf(o->content_type, sizeof(o->content_type), "%s", r->content_type[0] ? r->content_type : "chat");
        snprintf(o->mode, sizeof(o->mode), "%s", !r->prm.speculate ? "off" : r->adaptive ? "adaptive" : "fixed");
        o->prefilling = r->state == RQ_PREFILL;
        o->gamma = r->pub_gamma;
        snprintf(o->method, sizeof(o->method), "%s", r->ms ? "medusa" : spec_drafter_name(r->pub_method));
        if (r->pub_shape.budget > 0)
            snprintf(o->shape, sizeof(o->shape), "tree %d/%d/%d", r->pub_shape.budget, r->pub_shape.depth,
                     r->pub_shape.topk);
        else
            snprintf(o->shape, sizeof(o->shape), "chain");
        o->alpha = r->pub_alpha;
        o->tokens = r->n_out;
        o->tokens_per_s = r->t_first > 0 && now > r->t_first && r->n_out > 1 ? (r->n_out - 1) / ((now - r->t_first) / 1e3) : 0;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

void engine_get_stats(engine *e, engine_stats *out) {
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&e->mu);
    out->waiting = e->n_waiting;
    for (int i = 0; i < e->n_active; i++) {
        if (e->active[i]->state == RQ_PREFILL) out->prefilling++;
        else out->running++;
        out->paused += e->active[i]->paused;
    }
    out->kv_free_target = e->kv_free_t;
    out->kv_free_draft = e->kv_free_d;
    out->kv_total = e->sp->tpool->n_blocks;
    out->steps = e->steps, out->tokens = e->tokens, out->requests_done = e->done;
    out->verify_calls = e->verify_calls;
    out->mean_microbatches = e->steps ? (double)e->microbatches / (double)e->steps : 0;
    out->padding_ratio = e->steps ? e->pad_sum / (double)e->steps : 0;
    out->st = e->st;
    spec_stats_add(&out->st, &e->st_run);
    memcpy(out->accepted_hist, e->accepted_hist, sizeof(out->accepted_hist));
    out->costs = e->costs_pub;
    out->draft_mem_pct = e->sp->draft_mem_pct;
    out->draft_oom = e->sp->draft_oom;
    snprintf(out->backend, sizeof(out->backend), "%s", e->be->i->name);
    out->tensor_parallel = e->n_shards;
    snprintf(out->target_id, sizeof(out->target_id), "%s", e->sp->target_id.id);
    snprintf(out->draft_id, sizeof(out->draft_id), "%s", spec_pair_has_draft(e->sp) ? e->sp->draft_id.id : "");
    for (int k = 0; k < 2; k++) {
        out->prefix_cached[k] = e->pfx_cached[k], out->prefix_idle[k] = e->pfx_idle[k];
        out->prefix_evicted[k] = e->pfx_evicted[k], out->prefix_cow[k] = e->pfx_cow[k];
    }
    out->prefix_cache = e->sp->prefix_cache;
    out->tree_decisions[0] = e->tree_decisions[0], out->tree_decisions[1] = e->tree_decisions[1];
    out->tree_auto = e->tree_auto;
    pthread_mutex_unlock(&e->mu);
}

/* ---- the engine thread ------------------------------------------------------ */

/* Appends text to the request's held-back buffer and moves to `out` everything
 * that can no longer be part of a stop string. Returns true when a stop string
 * completed (out then ends before it). */
static bool take_text(req *r, const char *s, int n, char *out, int *out_len, int out_cap) {
    for (int i = 0; i < n; i++) {
        if (r->hold_len == (int)sizeof(r->hold)) { /* cannot happen: hold < longest stop */
            if (*out_len < out_cap) out[(*out_len)++] = r->hold[0];
            memmove(r->hold, r->hold + 1, (size_t)--r->hold_len);
        }
        r->hold[r->hold_len++] = s[i];
        for (int k = 0; k < r->n_stop; k++) {
            int L = (int)strlen(r->stop[k]);
            if (r->hold_len >= L && !memcmp(r->hold + r->hold_len - L, r->stop[k], (size_t)L)) {
                int keep = r->hold_len - L;
                memcpy(out + *out_len, r->hold, (size_t)(keep < out_cap - *out_len ? keep : out_cap - *out_len));
                *out_len += keep < out_cap - *out_len ? keep : out_cap - *out_len;
                r->hold_len = 0;
                return true;
            }
        }
        /* release the longest prefix of hold that no stop string can still complete */
        int rel = 0;
        for (; rel < r->hold_len; rel++) {
            bool maybe = false;
            for (int k = 0; k < r->n_stop && !maybe; k++) {
                int L = (int)strlen(r->stop[k]), m = r->hold_len - rel;
                if (m < L && !memcmp(r->hold + rel, r->stop[k], (size_t)m)) maybe = true;
            }
            if (maybe) break;
        }
        int take = rel < out_cap - *out_len ? rel : out_cap - *out_len;
        memcpy(out + *out_len, r->hold, (size_t)take);
        *out_len += take;
        memmove(r->hold, r->hold + rel, (size_t)(r->hold_len - rel));
        r->hold_len -= rel;
    }
    return false;
}

/* Emits the tokens a step appended (mu held). */
static void emit_tokens(engine *e, req *r, const spec_step_info *info) {
    spec_seq *s = r->seq;
    int n_new = info->n_new;
    const int32_t *toks = s->tokens + s->n_tokens - n_new;
    engine_event *ev = ring_push(e, r);
    ev->type = ENGINE_EV_TOKENS;
    ev->n_accepted = info->accepted;
    ev->gamma = info->gamma;
    ev->last_is_bonus = info->bonus;
    ev->last_is_correction = info->gamma > 0 && !info->bonus;
    ev->has_logprobs = r->prm.logprobs;
    double now = eng_now_ms();
    if (r->t_first == 0) r->t_first = now;
    r->t_last = now;
    bool stop = false;
    engine_finish why = FINISH_LENGTH;
    char piece[512];
    for (int i = 0; i < n_new && !stop; i++) {
        int32_t t = toks[i];
        if (r->prm.logprobs) ev->lp[ev->n_tokens] = s->lp[i];
        ev->tokens[ev->n_tokens++] = t;
        r->n_out++;
        bool eog = tok_is_eog(e->sp->tok, t);
        for (int k = 0; k < r->n_stop_ids; k++) eog |= r->stop_ids[k] == t;
        if (eog) {
            stop = true, why = FINISH_STOP;
            break;
        }
        int k = tok_stream_feed(&r->ts, e->sp->tok, t, piece, sizeof(piece));
        if (k > 0 && take_text(r, piece, k, ev->text, &ev->text_len, ENGINE_TEXT_MAX)) stop = true, why = FINISH_STOP;
        if (!stop && r->n_out >= r->max_tokens) stop = true, why = FINISH_LENGTH;
        /* the context is full: no position left for another step */
        if (!stop && i + 1 == n_new && r->seq->n_tokens > e->sp->max_ctx) stop = true, why = FINISH_LENGTH;
        if (i + 1 == ev->n_accepted) ev->text_accepted_len = ev->text_len;
    }
    if (ev->n_accepted > ev->n_tokens) ev->n_accepted = ev->n_tokens;
    e->tokens += (uint64_t)ev->n_tokens;
    if (stop) {
        if (why == FINISH_LENGTH) { /* flush what was held back and any partial UTF-8 */
            int k = tok_stream_flush(&r->ts, piece, sizeof(piece));
            if (k > 0) take_text(r, piece, k, ev->text, &ev->text_len, ENGINE_TEXT_MAX);
            int room = ENGINE_TEXT_MAX - ev->text_len;
            int take = r->hold_len < room ? r->hold_len : room;
            memcpy(ev->text + ev->text_len, r->hold, (size_t)take);
            ev->text_len += take;
            r->hold_len = 0;
        }
        finish(e, r, why, NULL);
    }
}

/* Engine-thread helper: remove active[i] (swap with the last). */
static void drop_active(engine *e, int i) { e->active[i] = e->active[--e->n_active]; }

/* The rolling α a content type has been achieving (-1 when unknown). */
static double ct_alpha(const engine *e, const char *type) {
    for (int i = 0; i < e->n_ct; i++)
        if (!strcmp(e->ct[i].type, type)) return e->ct[i].n ? e->ct[i].alpha : -1.0;
    return -1.0;
}

static void ct_observe(engine *e, const char *type, const spec_stats *st) {
    uint64_t d = st->accepted + st->rejections;
    if (!d) return;
    int i = 0;
    while (i < e->n_ct && strcmp(e->ct[i].type, type)) i++;
    if (i == e->n_ct) {
        if (e->n_ct == 16) return;
        snprintf(e->ct[e->n_ct++].type, sizeof(e->ct[0].type), "%s", type);
    }
    double a = (double)st->accepted / (double)d;
    e->ct[i].alpha = e->ct[i].n ? 0.8 * e->ct[i].alpha + 0.2 * a : a;
    e->ct[i].n++;
}

/* Applies the policy rule for the request's (model, content type) to its γ
 * bounds — unless the request fixed its own γ — and starts it from the γ its
 * content type's recent acceptance favours. Engine thread. */
static void apply_policy(engine *e, req *r, const pol_config *pc, bool starting) {
    if (!r->prm.speculate) return;
    const pol_rule *rule = pol_config_rule(pc, e->cfg.model_name ? e->cfg.model_name : "*",
                                           r->content_type[0] ? r->content_type : "chat");
    if (starting && !r->method_set) { /* the rule's proposer, for the whole request */
        int m = spec_method_parse(pol_method_name(rule->method));
        if (m == SPEC_METHOD_MEDUSA) { /* stepped by draft_medusa; without heads (or state) the engine's default */
            if (e->dm && !r->ms && !r->prm.logprobs && !r->prm.coupled) r->ms = medusa_seq_create(e->dm);
            m = r->ms ? SPEC_METHOD_NGRAM : -1;
        } else if (r->ms && m >= 0) {
            medusa_seq_destroy(r->ms);
            r->ms = NULL;
        }
        if (m == SPEC_METHOD_OFF || (m == SPEC_METHOD_DRAFT && !spec_pair_has_draft(e->sp))) r->prm.speculate = false;
        if (m >= 0) r->prm.method = (spec_method)m;
        if (!r->prm.speculate) return;
    }
    if (!r->policy_bounds) return;
    gamma_params gp = r->prm.gp;
    gp.gamma_min = rule->gamma_min;
    gp.gamma_max = rule->gamma_max > e->sp->max_gamma ? e->sp->max_gamma : rule->gamma_max;
    if (gp.gamma_min > gp.gamma_max) gp.gamma_min = gp.gamma_max;
    gp.gamma_default = rule->gamma_default < gp.gamma_min ? gp.gamma_min
                       : rule->gamma_default > gp.gamma_max ? gp.gamma_max : rule->gamma_default;
    gp.fallback_alpha = (float)rule->alpha_threshold;
    if (starting) {
        double a = ct_alpha(e, r->content_type[0] ? r->content_type : "chat");
        if (a >= 0) { /* prior: the best γ at the acceptance this content type has been getting */
            double best = -1;
            for (int g = gp.gamma_min; g <= gp.gamma_max; g++) {
                double rate = gamma_rate(&e->sp->costs, a, g, r->n_prompt);
                if (rate > best) best = rate, gp.gamma_default = g;
            }
        }
        r->prm.gp = gp;
    } else if (r->seq) {
        r->prm.gp = gp;
        spec_seq_set_gamma_params(r->seq, &gp); /* picked up at the next step */
    }
}

static int blocks_needed(const engine *e, const req *r) {
    int len = r->n_prompt + r->max_tokens; /* a sequence never grows past the context */
    if (len > e->sp->max_ctx + 1) len = e->sp->max_ctx + 1;
    int ahead = e->sp->max_gamma > r->tree_sh.budget ? e->sp->max_gamma : r->tree_sh.budget; /* verify rows past it */
    return kv_blocks_for(e->sp->tpool, len + ahead + 2);
}

/* Admitted requests (prefilling, running or paused) of r's client; 0 for a
 * request without one. Engine thread, mu held. */
static int client_held(const engine *e, const req *r) {
    int n = 0;
    if (r->client)
        for (int i = 0; i < e->n_active; i++) n += e->active[i]->client == r->client;
    return n;
}

/* The waiting request to admit next: the first (FIFO) among those whose
 * client holds the fewest admitted requests, skipping clients at their
 * max_per_client bound. NULL when none may enter. *prev gets its
 * predecessor in the FIFO (NULL at the head). Engine thread, mu held. */
static req *pick_waiting(const engine *e, req **prev) {
    req *best = NULL;
    int best_held = 0;
    for (req *p = NULL, *r = e->wait_head; r; p = r, r = r->next_wait) {
        int held = client_held(e, r);
        if (r->client && held >= e->cfg.max_per_client) continue;
        if (!best || held < best_held) best = r, best_held = held, *prev = p;
        if (held == 0) break; /* nobody waiting can beat it */
    }
    return best;
}

/* Copies the pools' free counts for engine_get_stats (mu held; the pools
 * themselves change during model work, outside the lock). */
static void publish_pools(engine *e) {
    const kv_pool *pl[2] = {e->sp->tpool, spec_pair_draft_pool(e->sp)};
    e->kv_free_t = kv_pool_available(pl[0]); /* cached blocks nobody holds count as free: they are evicted on demand */
    e->kv_free_d = pl[1] ? kv_pool_available(pl[1]) : 0;
    for (int k = 0; k < 2; k++) {
        e->pfx_cached[k] = pl[k] ? pl[k]->n_indexed : 0;
        e->pfx_idle[k] = pl[k] ? pl[k]->n_idle : 0;
        e->pfx_evicted[k] = pl[k] ? pl[k]->evicted : 0;
        e->pfx_cow[k] = pl[k] ? pl[k]->cow_copies : 0;
    }
}

/* Whether waiting request w (needing `need` blocks per pool) fits now. Per
 * pool: what the admitted requests may still allocate (their reservation less
 * the blocks they hold, plus pending copies on write) plus what w needs beyond
 * the cached blocks other requests hold must fit in the free and idle
 * (evictable) blocks. Without prefix reuse this is the plain sum of
 * reservations against the pool. Engine thread, mu held. */
static bool admit_fits(engine *e, const req *w, int need) {
    const kv_pool *pools[2] = {e->sp->tpool, spec_pair_draft_pool(e->sp)};
    int shared[2], cow[2], rem[2] = {0, 0};
    spec_prefix_probe(e->sp, w->prompt, w->n_prompt, &w->prm, shared, cow);
    for (int i = 0; i < e->n_active; i++) {
        const req *r = e->active[i];
        if (!r->seq || r->final_pushed) continue;
        int held[2], c[2];
        spec_seq_blocks(r->seq, held, c);
        for (int k = 0; k < 2; k++) rem[k] += r->reserved - held[k] + c[k] > 0 ? r->reserved - held[k] + c[k] : 0;
    }
    for (int k = 0; k < 2; k++)
        if (pools[k] && rem[k] + need - shared[k] + cow[k] > kv_pool_available(pools[k])) return false;
    return true;
}

/* Running requests' statistics so far (finished ones are already in e->st).
 * Engine thread, mu held. */
static void refresh_running_stats(engine *e) {
    memset(&e->st_run, 0, sizeof(e->st_run));
    for (int i = 0; i < e->n_active; i++)
        if (e->active[i]->seq && !e->active[i]->final_pushed) spec_stats_add(&e->st_run, &e->active[i]->seq->st);
}

/* Tree speculation, engine thread. Picks each tree-enabled sequence's shape
 * for this step (fixed: its bounds; auto: its controller, seeded from the
 * engine-wide one at its first step) and moves the ones that get a tree out of
 * e->bseq[0, n_run) into e->tseq etc., keeping the rest in order at the front.
 * Returns how many moved. mu is not needed: only the engine thread touches
 * these fields. */
static int pick_trees(engine *e, int n_run, int batch) {
    if (!e->tc) return 0;
    int n_tree = 0, n_chain = 0;
    /* auto requests with the engine's bounds share one decision per step,
     * the engine-wide controller's: a tree for some and chains for others
     * would cost two target passes (each reading the weights) where one
     * does; requests with bounds of their own use their own controller */
    const tree_shape lim = {e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    int shared = tree_ctl_pick(&e->tree_prior, batch);
    for (int i = 0; i < n_run; i++) {
        spec_seq *sq = e->bseq[i];
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == sq) r = e->active[j];
        int ent = 0;
        tree_shape sh = {0, 0, 0};
        if (r->tree_mode != ENGINE_TREE_OFF && r->prm.speculate) {
            if (r->tree_mode == ENGINE_TREE_FIXED) {
                ent = 1, sh = r->tree_sh;
            } else {
                if (!r->tctl_seeded) tree_ctl_seed(&r->tctl, &e->tree_prior), r->tctl_seeded = true;
                ent = !memcmp(&r->tree_sh, &lim, sizeof(lim)) ? shared : tree_ctl_pick(&r->tctl, batch);
                sh = r->tctl.menu[ent];
            }
        }
        r->tree_entry = ent;
        if (sh.budget > 0) {
            e->treq[n_tree] = r;
            e->tseq[n_tree] = sq;
            e->tsh[n_tree] = sh;
            e->thow[n_tree] = r->prm.method;
            e->tmax[n_tree] = r->max_tokens - r->n_out;
            e->tent[n_tree++] = ent;
        } else {
            e->bseq[n_chain++] = sq;
        }
    }
    return n_tree;
}

/* Moves the running Medusa sequences (speculation.method medusa) out of
 * e->bseq[0, n_run) into e->useq etc., keeping the rest in order at the
 * front; returns how many moved. Engine thread. */
static int pick_medusa(engine *e, int n_run) {
    if (!e->dm) return 0;
    int n_med = 0, n_rest = 0;
    for (int i = 0; i < n_run; i++) {
        spec_seq *sq = e->bseq[i];
        req *r = NULL;
        for (int j = 0; j < e->n_active; j++)
            if (e->active[j]->seq == sq) r = e->active[j];
        if (r->ms && r->prm.speculate) {
            e->ureq[n_med] = r;
            e->useq[n_med] = sq;
            e->ums[n_med] = r->ms;
            e->umax[n_med++] = r->max_tokens - r->n_out;
        } else {
            e->bseq[n_rest++] = sq;
        }
    }
    return n_med;
}

/* One step call over m sequences took per_seq ms for each: noted for each
 * with the call's size and verify rows (the shape controller's inputs). */
static void note_call(const spec_step_info *info, int m, double per_seq, double *ms, int *batch, int *rows) {
    int R = 0;
    for (int k = 0; k < m; k++) R += info[k].gamma + 1;
    for (int k = 0; k < m; k++) ms[k] = per_seq, batch[k] = m, rows[k] = R;
}

/* What a step of a tree-enabled auto request delivered, into its controller
 * and the engine-wide one (menu entry ent; 0 the chain path). mu held. */
static void tree_learn(engine *e, req *r, int ent, const spec_step_info *si, int batch, int call_rows,
                       double step_ms) {
    if (r->tree_mode != ENGINE_TREE_AUTO || !r->tctl_seeded) return;
    r->tctl.picks[ent]++;
    tree_ctl_observe(&r->tctl, ent, si->n_new, si->gamma + 1, batch, call_rows, step_ms);
    const tree_shape *sh = &r->tctl.menu[ent];
    for (int f = 0; f < e->tree_prior.n; f++)
        if (!memcmp(&e->tree_prior.menu[f], sh, sizeof(*sh))) {
            e->tree_prior.picks[f]++;
            tree_ctl_observe(&e->tree_prior, f, si->n_new, si->gamma + 1, batch, call_rows, step_ms);
        }
}

static void *engine_main(void *arg) {
    engine *e = arg;
    char err[512];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* publish what engine_get_stats reports (the pools and costs change
         * during model work, outside the lock) */
        publish_pools(e);
        e->costs_pub = e->sp->costs;
        /* 1. cancellations and finished requests leave the active set */
        for (int i = 0; i < e->n_active;) {
            req *r = e->active[i];
            if (r->cancel && !r->final_pushed) finish(e, r, FINISH_CANCELLED, NULL);
            if (r->final_pushed) {
                drop_active(e, i);
                if (r->notify) r->notify(r->user);
                continue;
            }
            i++;
        }
        /* cancelled while waiting, or never able to fit: answered at once */
        int pool_blocks = e->sp->tpool->n_blocks;
        const kv_pool *dpool = spec_pair_draft_pool(e->sp);
        if (dpool && dpool->n_blocks < pool_blocks) pool_blocks = dpool->n_blocks;
        for (req **pp = &e->wait_head; *pp;) {
            req *r = *pp;
            bool never = blocks_needed(e, r) > pool_blocks || r->n_prompt + 1 > e->sp->max_ctx;
            if (r->cancel || never) {
                *pp = r->next_wait;
                if (e->wait_tail == r) {
                    e->wait_tail = NULL;
                    for (req *q = e->wait_head; q; q = q->next_wait) e->wait_tail = q;
                }
                e->n_waiting--;
                if (never && !r->cancel) {
                    char msg[200];
                    snprintf(msg, sizeof(msg), "prompt of %d tokens + max_tokens %d cannot fit (context %d, KV pool "
                             "%d blocks of %d)", r->n_prompt, r->max_tokens, e->sp->max_ctx, pool_blocks,
                             e->sp->tpool->block_size);
                    finish(e, r, FINISH_ERROR, msg);
                } else {
                    finish(e, r, FINISH_CANCELLED, NULL);
                }
                if (r->notify) r->notify(r->user);
                continue;
            }
            pp = &r->next_wait;
        }
        if (e->quit) break;
        refresh_running_stats(e);
        if (e->cfg.policy) {
            const pol_config *pc = pol_store_acquire(e->cfg.policy);
            if (pc->version != e->policy_version) {
                for (int i = 0; i < e->n_active; i++) apply_policy(e, e->active[i], pc, false);
                e->policy_version = pc->version;
            }
            pol_store_release(e->cfg.policy, pc);
        }
        /* 2. slots: a request whose ring is full pauses and gives its slot
         * up; paused requests whose reader has caught up (ring half empty)
         * take free slots first, oldest pause first */
        int holding = 0;
        for (int i = 0; i < e->n_active; i++) {
            req *r = e->active[i];
            if (!r->paused && ring_free(e, r) < 2) r->paused = true, r->pause_seq = ++e->pause_ctr;
            holding += !r->paused;
        }
        while (holding < e->cfg.max_running) {
            req *up = NULL;
            for (int i = 0; i < e->n_active; i++) {
                req *r = e->active[i];
                if (r->paused && r->count <= e->cfg.ring_events / 2 && (!up || r->pause_seq < up->pause_seq)) up = r;
            }
            if (!up) break;
            up->paused = false;
            holding++;
        }
        /* then admission into the remaining slots, fairly between clients
         * (pick_waiting): a request enters when its prompt plus a
         * reservation for its output fits in both pools */
        while (e->wait_head && holding < e->cfg.max_running && e->n_active < e->n_slots) {
            req *prev = NULL, *r = pick_waiting(e, &prev);
            if (!r) break;
            int need = blocks_needed(e, r);
            if (!admit_fits(e, r, need)) break;
            if (prev) prev->next_wait = r->next_wait;
            else e->wait_head = r->next_wait;
            if (e->wait_tail == r) e->wait_tail = prev;
            r->next_wait = NULL;
            e->n_waiting--;
            if (e->cfg.policy) {
                const pol_config *pc = pol_store_acquire(e->cfg.policy);
                apply_policy(e, r, pc, true);
                pol_store_release(e->cfg.policy, pc);
            }
            if (r->grammar_text) {
                r->gm = constrain_acquire(e->gc, r->grammar_text, r->grammar_len, err, sizeof(err));
                r->prm.grammar = r->gm;
                r->prm.grammar_budget = r->max_tokens;
            }
            r->seq = r->grammar_text && !r->gm ? NULL : spec_seq_create(e->sp, r->prompt, r->n_prompt, &r->prm, err, sizeof(err));
            if (!r->seq) {
                finish(e, r, FINISH_ERROR, err);
                if (r->notify) r->notify(r->user);
                continue;
            }
            r->reserved = need;
            e->reserved_blocks += need;
            r->state = RQ_PREFILL;
            r->t_admit = eng_now_ms();
            engine_event *ev = ring_push(e, r);
            ev->type = ENGINE_EV_STARTED;
            ev->prompt_tokens = r->n_prompt;
            if (e->cfg.telemetry) {
                tel_session ts = {.prompt_tokens = r->n_prompt, .gamma = r->prm.speculate ? r->prm.gp.gamma_default : 0};
                memcpy(ts.session_id, r->session, sizeof(ts.session_id));
                memcpy(ts.request_id, r->session, sizeof(ts.request_id));
                snprintf(ts.content_type, sizeof(ts.content_type), "%s", r->content_type);
                snprintf(ts.spec_mode, sizeof(ts.spec_mode), "%s", !r->prm.speculate ? "off" : r->adaptive ? "adaptive" : "fixed");
                snprintf(ts.target_id, sizeof(ts.target_id), "%s", e->sp->target_id.id);
                snprintf(ts.draft_id, sizeof(ts.draft_id), "%s", spec_pair_has_draft(e->sp) ? e->sp->draft_id.id : "");
                telemetry_session_start(e->cfg.telemetry, &ts);
            }
            ev->queue_ms = r->t_admit - r->t_submit;
            e->active[e->n_active++] = r;
            holding++;
            if (r->notify) r->notify(r->user);
        }
        /* 3. work: one prefill chunk, then one step over the running requests */
        req *pre = NULL;
        int n_run = 0, n_pre = 0;
        for (int i = 0; i < e->n_active; i++) {
            req *r = e->active[i];
            if (r->paused) continue; /* backpressure: this request waits for its reader */
            ENGINE_ASSERT(ring_free(e, r) >= 2);
            n_pre += r->state == RQ_PREFILL;
            if (r->state == RQ_PREFILL && !pre) pre = r;
            else if (r->state == RQ_RUNNING) e->bseq[n_run++] = r->seq;
        }
        ENGINE_ASSERT(n_run <= e->cfg.max_running);
        if (!pre && n_run == 0) {
            publish_pools(e);
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);

        int pre_rc = 0;
        if (pre) pre_rc = spec_seq_prefill(pre->seq, e->cfg.prefill_chunk, err, sizeof(err));
        if (pre && pre_rc == 1 && pre->ms) medusa_seq_prefilled(e->dm, pre->ms, pre->seq); /* before any other pass */
        int nb = 0;
        double pad = 1.0;
        int step_rc = 0, n_calls = 0, tree_rc = 0;
        char step_err[512] = "", tree_err[512] = "";
        /* tree-enabled sequences whose shape this step is a tree leave the
         * chain path: all of them share one tree verify pass (per chunk) */
        int n_med = n_run ? pick_medusa(e, n_run) : 0;
        int n_tree = n_run - n_med ? pick_trees(e, n_run - n_med, n_run + n_pre) : 0;
        int n_chain = n_run - n_med - n_tree;
        int med_rc = 0;
        char med_err[512] = "";
        if (n_med > 0) {
            /* Medusa trees: one target pass per chunk, hidden states kept for the next proposal */
            int cap = e->sp->target->mp.max_batch / (DRAFTER_MAX_NODES + 1);
            if (e->cfg.max_batch > 0 && e->cfg.max_batch < cap) cap = e->cfg.max_batch;
            if (cap < 1) cap = 1;
            for (int c0 = 0; c0 < n_med && med_rc == 0; c0 += cap, n_calls++) {
                int m = n_med - c0 < cap ? n_med - c0 : cap;
                med_rc = draft_medusa_step(e->dm, e->tc, e->useq + c0, e->ums + c0, m, &e->medusa_sh, e->umax + c0,
                                           e->uinfo + c0, med_err, sizeof(med_err));
            }
        }
        if (n_tree > 0) {
            /* chunks the draft and target batches hold: a tree is at most
             * DRAFTER_MAX_NODES + 1 rows in either */
            int cap = e->sp->target->mp.max_batch / (DRAFTER_MAX_NODES + 1);
            if (e->cfg.max_batch > 0 && e->cfg.max_batch < cap) cap = e->cfg.max_batch;
            if (cap < 1) cap = 1;
            for (int c0 = 0; c0 < n_tree && tree_rc == 0; c0 += cap, n_calls++) {
                int m = n_tree - c0 < cap ? n_tree - c0 : cap;
                double t0 = eng_now_ms();
                tree_rc = draft_tree_step(e->dt, e->tc, e->tseq + c0, m, e->tsh + c0, e->thow + c0, e->tmax + c0,
                                          e->tinfo + c0, tree_err, sizeof(tree_err));
                note_call(e->tinfo + c0, m, (eng_now_ms() - t0) / m, e->tms + c0, e->tbatch + c0, e->trows + c0);
            }
        }
        if (n_chain > 0) {
            for (int i = 0; i < n_chain; i++) {
                req *r = NULL;
                for (int j = 0; j < e->n_active; j++)
                    if (e->active[j]->seq == e->bseq[i]) r = e->active[j];
                e->bmax[i] = r->max_tokens - r->n_out;
                /* requests still prefilling join the batch in a few steps, and
                 * every step spent verifying drafts delays their first token:
                 * the controller plans for the batch they will make */
                int g = spec_seq_plan(e->bseq[i], e->bmax[i], n_run + n_pre);
                if (r->adaptive) g = plan_cap_gamma(g, &e->hist);
                e->gam_all[i] = g;
            }
            nb = plan_bins(e->gam_all, n_chain, e->cfg.padding_cap, e->bins, e->order, &pad);
            if (e->cfg.ragged && nb > 1) {
                /* the backend takes ragged batches: every bin shares ONE verify
                 * call (weights read once); the bins are what a rectangular
                 * backend would launch, and their padding is reported */
                e->bins[0] = (plan_bin){.gamma = e->bins[nb - 1].gamma, .n = n_chain, .first = 0};
                nb = 1;
            }
            /* each micro-batch: its draft calls and ONE verify call */
            spec_seq **mseq = e->mseq;
            int *mmax = e->mmax, *mg = e->bgam;
            for (int b = 0; b < nb && step_rc == 0; b++) {
                int m = e->bins[b].n;
                for (int k = 0; k < m; k++) {
                    int i = e->order[e->bins[b].first + k];
                    mseq[k] = e->bseq[i];
                    mmax[k] = e->bmax[i];
                    mg[k] = e->gam_all[i];
                }
                /* engine.max_batch: at most that many sequences per verify call */
                int cap = e->cfg.max_batch > 0 && e->cfg.max_batch < m ? e->cfg.max_batch : m;
                for (int c0 = 0; c0 < m && step_rc == 0; c0 += cap, n_calls++) {
                    int mc = m - c0 < cap ? m - c0 : cap, at = e->bins[b].first + c0;
                    double t0 = eng_now_ms();
                    step_rc = spec_step_batch_planned(e->sp, mseq + c0, mc, mmax + c0, mg + c0, e->binfo + at,
                                                      step_err, sizeof(step_err));
                    note_call(e->binfo + at, mc, (eng_now_ms() - t0) / mc, e->cms + at, e->cbatch + at, e->crows + at);
                }
                for (int k = 0; k < m && step_rc == 0; k++)
                    if (e->binfo[e->bins[b].first + k].gamma > 0)
                        plan_history_add(&e->hist, e->binfo[e->bins[b].first + k].accepted);
            }
        }

        pthread_mutex_lock(&e->mu);
        if (pre) {
            if (pre_rc < 0) {
                finish(e, pre, FINISH_ERROR, err);
            } else if (pre_rc == 1) {
                pre->state = RQ_RUNNING;
                spec_step_info first = {.n_new = 1};
                emit_tokens(e, pre, &first); /* the first token, sampled from the prefill */
            }
            if (pre->notify) pre->notify(pre->user);
        }
        if (n_run > 0) {
            e->steps++;
            e->microbatches += (uint64_t)nb + (n_tree > 0);
            e->verify_calls += (uint64_t)n_calls;
            e->pad_sum += pad;
            for (int b = 0; b < nb; b++)
                for (int k = 0; k < e->bins[b].n; k++) {
                    int i = e->order[e->bins[b].first + k];
                    req *r = NULL;
                    for (int j = 0; j < e->n_active; j++)
                        if (e->active[j]->seq == e->bseq[i]) r = e->active[j];
                    if (!r) continue;
                    const spec_step_info *si = &e->binfo[e->bins[b].first + k];
                    if (step_rc == 0 && r->tree_mode != ENGINE_TREE_OFF) {
                        int at = e->bins[b].first + k;
                        e->tree_decisions[0]++;
                        tree_learn(e, r, 0, si, e->cbatch[at], e->crows[at], e->cms[at]);
                    }
                    if (step_rc == 0) {
                        r->pub_gamma = si->gamma;
                        r->pub_method = si->method;
                        r->pub_shape = (tree_shape){0, 0, 0};
                        r->pub_alpha = gamma_ctl_alpha(&r->seq->ctl);
                        if (si->gamma > 0) e->accepted_hist[si->accepted]++;
                    }
                    if (step_rc == 0 && e->cfg.telemetry) {
                        tel_step row;
                        tel_step_from_info(&row, r->session, ++r->step_num, si);
                        telemetry_step(e->cfg.telemetry, &row);
                    }
                    if (step_rc != 0) finish(e, r, FINISH_ERROR, step_err);
                    else if (si->n_new > 0) emit_tokens(e, r, si);
                    if (r->notify) r->notify(r->user);
                }
            for (int k = 0; k < n_med; k++) {
                req *r = e->ureq[k];
                const spec_step_info *si = &e->uinfo[k];
                if (med_rc == 0) {
                    r->pub_gamma = si->gamma;
                    r->pub_method = si->method;
                    r->pub_shape = e->medusa_sh;
                    if (si->gamma > 0) e->accepted_hist[si->accepted]++;
                    if (e->cfg.telemetry) {
                        tel_step row;
                        tel_step_from_info(&row, r->session, ++r->step_num, si);
                        telemetry_step(e->cfg.telemetry, &row);
                    }
                }
                if (med_rc != 0) finish(e, r, FINISH_ERROR, med_err);
                else if (si->n_new > 0) emit_tokens(e, r, si);
                if (r->notify) r->notify(r->user);
            }
            for (int k = 0; k < n_tree; k++) {
                req *r = e->treq[k];
                const spec_step_info *si = &e->tinfo[k];
                if (tree_rc == 0) {
                    e->tree_decisions[1]++;
                    e->tree_auto += r->tree_mode == ENGINE_TREE_AUTO;
                    tree_learn(e, r, e->tent[k], si, e->tbatch[k], e->trows[k], e->tms[k]);
                    r->pub_gamma = si->gamma;
                    r->pub_method = si->method;
                    r->pub_shape = e->tsh[k];
                    r->pub_alpha = gamma_ctl_alpha(&r->seq->ctl);
                    if (si->gamma > 0) e->accepted_hist[si->accepted]++;
                    if (e->cfg.telemetry) {
                        tel_step row;
                        tel_step_from_info(&row, r->session, ++r->step_num, si);
                        telemetry_step(e->cfg.telemetry, &row);
                    }
                }
                if (tree_rc != 0) finish(e, r, FINISH_ERROR, tree_err);
                else if (si->n_new > 0) emit_tokens(e, r, si);
                if (r->notify) r->notify(r->user);
            }
            refresh_running_stats(e);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void engine_backends_free(engine *e);

/* The backends: one, or with tensor parallelism one per target shard (shard 0
 * also runs the draft) and the all-reduce between them. */
static int engine_backends(engine *e, char *err, size_t errlen) {
    const engine_config *c = &e->cfg;
    int n = c->tensor_parallel > 1 ? c->tensor_parallel : 1;
    if (n > ENGINE_MAX_SHARDS) {
        eng_fail(err, errlen, "tensor_parallel %d exceeds %d", n, ENGINE_MAX_SHARDS);
        return -1;
    }
    for (int r = 0; r < n; r++) {
        int dev = n > 1 ? c->devices[r] : c->device;
        if (!(e->shards[r] = backend_create((backend_kind)c->backend, dev, c->threads, err, errlen))) {
            for (int q = 0; q < r; q++) backend_destroy(e->shards[q]);
            return -1;
        }
    }
    e->be = e->shards[0];
    e->n_shards = n;
    if (n > 1 && !(e->tp_comm = comm_create(e->shards, n, err, errlen))) {
        engine_backends_free(e);
        return -1;
    }
    return 0;
}

static void engine_backends_free(engine *e) {
    comm_destroy(e->tp_comm);
    for (int r = 0; r < e->n_shards; r++) backend_destroy(e->shards[r]);
    e->tp_comm = NULL;
    e->n_shards = 0;
    e->be = NULL;
}

engine *engine_create(const engine_config *cfg, char *err, size_t errlen) {
    engine *e = calloc(1, sizeof(*e));
    if (!e) return eng_fail(err, errlen, "out of memory"), NULL;
    e->cfg = cfg ? *cfg : engine_config_default();
    engine_config *c = &e->cfg;
    if (c->block_size <= 0) c->block_size = 16;
    if (c->max_running <= 0) c->max_running = 32;
    if (c->max_running > 1024) c->max_running = 1024;
    if (c->max_waiting <= 0) c->max_waiting = 1024;
    if (c->max_per_client <= 0) c->max_per_client = c->max_running / 2 > 0 ? c->max_running / 2 : 1;
    if (c->prefill_chunk <= 0) c->prefill_chunk = 256;
    if (c->ring_events < 4) c->ring_events = 64;
    if (c->padding_cap < 1.0f) c->padding_cap = 1.5f;
    if (!gamma_params_validate(&c->gamma, err, errlen)) {
        free(e);
        return NULL;
    }
    if (engine_backends(e, err, errlen) != 0) {
        free(e);
        return NULL;
    }
    spec_pair_params pp = {.max_ctx = c->max_ctx, .kv_blocks = c->kv_blocks, .block_size = c->block_size,
                           .draft_mem_warn_pct = c->draft_mem_warn_pct, .max_seqs = c->max_running,
                           .max_gamma = c->gamma.gamma_max, .tensor_parallel = e->n_shards,
                           .target_shards = e->shards, .tp_comm = e->tp_comm,
                           .ngram_min = c->ngram_min, .ngram_max = c->ngram_max,
                           .prefix_cache = c->prefix_cache, .prefix_max_idle = c->prefix_cache_blocks};
    if (!c->kv_blocks) {
        /* room for every running sequence at a modest context; admission queues the rest */
        int ctx = c->max_ctx > 0 ? c->max_ctx : 2048;
        pp.kv_blocks = c->max_running * ((ctx + GAMMA_MAX + 2) / c->block_size + 1);
        if (pp.kv_blocks > 65536) pp.kv_blocks = 65536;
    }
    e->sp = spec_pair_load(c->target_path, c->draft_path, e->be, &pp, stderr, err, errlen);
    if (!e->sp) {
        engine_backends_free(e);
        free(e);
        return NULL;
    }
    if (c->calibrate) spec_pair_calibrate(e->sp);
    if (c->tree_budget <= 0) c->tree_budget = 16;
    if (c->tree_depth <= 0) c->tree_depth = 5;
    if (c->tree_topk <= 0) c->tree_topk = 3;
    if (c->tree_budget > DRAFTER_MAX_NODES) c->tree_budget = DRAFTER_MAX_NODES;
    if (c->tree_depth > c->tree_budget) c->tree_depth = c->tree_budget;
    if (c->tree == ENGINE_TREE_DEFAULT) c->tree = ENGINE_TREE_OFF;
    if (c->medusa_path && c->medusa_path[0]) {
        /* refused unless trained for exactly this target (its identity) */
        e->mh = medusa_heads_load(c->medusa_path, e->sp->target_id.id, e->sp->target->hp.dim, e->sp->n_vocab, err,
                                  errlen);
        if (e->mh) e->dm = draft_medusa_create(e->sp, e->mh, err, errlen);
        if (!e->mh || !e->dm || !(e->tc = spec_tree_create(e->sp))) {
            if (e->mh && e->dm && !e->tc) eng_fail(err, errlen, "out of memory for Medusa");
            draft_medusa_destroy(e->dm);
            medusa_heads_destroy(e->mh);
            spec_pair_free(e->sp);
            engine_backends_free(e);
            free(e);
            return NULL;
        }
        e->medusa_sh = (tree_shape){c->tree_budget, c->tree_depth, c->tree_topk};
        if (e->medusa_sh.depth > e->mh->n_heads) e->medusa_sh.depth = e->mh->n_heads;
    }
    if (c->tree != ENGINE_TREE_OFF) {
        /* the verify cost curve is measured always (the shape controller has
         * nothing else to go on); the draft proposal cost is learned online */
        tree_ctl_measure(e->sp, e->t_rows);
        tree_ctl_init(&e->tree_prior, e->t_rows, c->tree_budget, c->tree_depth, c->tree_topk);
        e->tree_prior.reprobe = 512; /* it sees every sequence's steps: a batch of B ages it B per step */
        if (!e->tc) e->tc = spec_tree_create(e->sp);
        e->dt = spec_pair_has_draft(e->sp) ? draft_tree_create(e->sp) : NULL;
        if (!e->tc || (spec_pair_has_draft(e->sp) && !e->dt)) {
            spec_tree_destroy(e->tc);
            draft_tree_destroy(e->dt);
            draft_medusa_destroy(e->dm);
            medusa_heads_destroy(e->mh);
            spec_pair_free(e->sp);
            engine_backends_free(e);
            free(e);
            return eng_fail(err, errlen, "out of memory for tree speculation (speculation.tree)"), NULL;
        }
    }
    if (!(e->gc = constrain_cache_create(e->sp->tok))) {
        spec_pair_free(e->sp);
        engine_backends_free(e);
        free(e);
        return eng_fail(err, errlen, "out of memory"), NULL;
    }
    e->n_slots = c->max_waiting + c->max_running;
    if (e->n_slots > 65535) e->n_slots = 65535;
    int R = c->max_running;
    e->slots = calloc((size_t)e->n_slots, sizeof(req *));
    e->active = calloc((size_t)e->n_slots, sizeof(req *));
    e->bseq = calloc((size_t)R, sizeof(spec_seq *));
    e->mseq = calloc((size_t)R, sizeof(spec_seq *));
    e->mmax = calloc((size_t)R, sizeof(int));
    e->bmax = calloc((size_t)R, sizeof(int));
    e->bgam = calloc((size_t)R, sizeof(int));
    e->order = calloc((size_t)R, sizeof(int));
    e->gam_all = calloc((size_t)R, sizeof(int));
    e->binfo = calloc((size_t)R, sizeof(spec_step_info));
    e->bins = calloc((size_t)R + 1, sizeof(plan_bin));
    e->treq = calloc((size_t)R, sizeof(req *));
    e->tseq = calloc((size_t)R, sizeof(spec_seq *));
    e->tsh = calloc((size_t)R, sizeof(tree_shape));
    e->thow = calloc((size_t)R, sizeof(spec_method));
    e->tmax = calloc((size_t)R, sizeof(int));
    e->tent = calloc((size_t)R, sizeof(int));
    e->tinfo = calloc((size_t)R, sizeof(spec_step_info));
    e->useq = calloc((size_t)R, sizeof(spec_seq *));
    e->ums = calloc((size_t)R, sizeof(medusa_seq *));
    e->umax = calloc((size_t)R, sizeof(int));
    e->ureq = calloc((size_t)R, sizeof(req *));
    e->uinfo = calloc((size_t)R, sizeof(spec_step_info));
    e->cms = calloc((size_t)R, sizeof(double));
    e->tms = calloc((size_t)R, sizeof(double));
    e->cbatch = calloc((size_t)R, sizeof(int));
    e->crows = calloc((size_t)R, sizeof(int));
    e->tbatch = calloc((size_t)R, sizeof(int));
    e->trows = calloc((size_t)R, sizeof(int));
    if (!e->slots || !e->active || !e->bseq || !e->mseq || !e->mmax || !e->bmax || !e->bgam || !e->order || !e->gam_all || !e->binfo ||
        !e->bins || !e->treq || !e->tseq || !e->tsh || !e->thow || !e->tmax || !e->tent || !e->tinfo ||
        !e->cms || !e->tms || !e->cbatch || !e->crows || !e->tbatch || !e->trows || !e->useq || !e->ums ||
        !e->umax || !e->ureq || !e->uinfo) {
        engine_destroy(e);
        return eng_fail(err, errlen, "out of memory"), NULL;
    }
    publish_pools(e);
    e->costs_pub = e->sp->costs;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->th, NULL, engine_main, e) != 0) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        spec_pair_free(e->sp);
        engine_backends_free(e);
        free(e);
        return eng_fail(err, errlen, "cannot start the engine thread"), NULL;
    }
    return e;
}

void engine_destroy(engine *e) {
    if (!e) return;
    if (e->sp && e->th) {
        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i]) e->slots[i]->cancel = true;
        e->quit = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
    for (int i = 0; e->slots && i < e->n_slots; i++) req_free(e->slots[i]);
    free(e->slots), free(e->active), free(e->bseq), free(e->bmax), free(e->bgam), free(e->order), free(e->gam_all);
    free(e->binfo), free(e->bins), free(e->mseq), free(e->mmax);
    free(e->treq), free(e->tseq), free(e->tsh), free(e->thow), free(e->tmax), free(e->tent), free(e->tinfo);
    free(e->cms), free(e->tms), free(e->cbatch), free(e->crows), free(e->tbatch), free(e->trows);
    free(e->useq), free(e->ums), free(e->umax), free(e->ureq), free(e->uinfo);
    spec_tree_destroy(e->tc);
    draft_tree_destroy(e->dt);
    draft_medusa_destroy(e->dm);
    medusa_heads_destroy(e->mh);
    constrain_cache_destroy(e->gc);
    spec_pair_free(e->sp);
    engine_backends_free(e);
    free(e);
}
