/* engine.c — the engine's public API (engine.h): create/destroy, submit,
 * cancel, poll, stats and info. The engine thread itself (admission,
 * planning, the step, event emission) is in sched.c; the shared struct
 * engine and its locking rules in engine_impl.h. */
#include "engine/sched/engine_impl.h"
#include "engine/sched/compile.h"
#include "engine/spec/proposers/pair_load.h" /* the pair with the draft model and the lookup */

#include "engine/chat/chat.h"
#include "engine/sample/rng.h"
#include "engine/telemetry/telemetry.h"
#include "policy/config.h"

#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(ENGINE_TREE_MAX_NODES == DRAFTER_MAX_NODES, "engine.h's tree node bound is the proposers'");

engine_config engine_config_default(void) {
    return (engine_config){.backend = BACKEND_CPU, .ragged = true, .block_size = 16, .max_running = 32, .max_waiting = 1024, .prefill_chunk = 256,
                           .ring_events = 64, .padding_cap = 1.5f, .gamma = gamma_params_default(),
                           .draft_mem_warn_pct = 20.0f, .calibrate = true, .method = SPEC_METHOD_AUTO,
                           .prefix_cache = true, .kv_type = KV_F16};
}

const char *engine_finish_name(engine_finish f) {
    static const char *names[] = {"length", "stop", "cancelled", "error"};
    return f <= FINISH_ERROR ? names[f] : "?";
}

const tokenizer *engine_tokenizer(const engine *e) { return e->sp->tok; }
const chat_tmpl *engine_chat_tmpl(const engine *e) { return e->chat; }

void engine_get_info(const engine *e, engine_info *out) {
    memset(out, 0, sizeof(*out));
    out->gamma = e->cfg.gamma;
    out->max_ctx = e->sp->max_ctx;
    out->has_draft = spec_pair_has_draft(e->sp);
    out->has_medusa = e->dm != NULL;
    out->has_eagle = e->sp->drafters[SPEC_DRAFTER_EAGLE] != NULL;
    out->chat_template = (int)(e->chat ? chat_tmpl_family(e->chat) : chat_template_detect(e->sp->target->gguf, e->sp->tok));
    out->tree = e->tc ? e->cfg.tree : ENGINE_TREE_OFF;
    out->tree_bounds = (tree_shape){e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    memcpy(out->tree_t_rows, e->bud.t_rows, sizeof(out->tree_t_rows));
    backend_describe(e->be, out->backend_desc, sizeof(out->backend_desc));
    size_t n = 0;
    const char *b = tok_bos(e->sp->tok) >= 0 ? tok_token_str(e->sp->tok, tok_bos(e->sp->tok), &n) : "";
    snprintf(out->bos_text, sizeof(out->bos_text), "%.*s", (int)n, b ? b : "");
}

static void req_free(req *r) {
    if (!r) return;
    spec_seq_free(r->seq);
    free(r->prompt);
    free(r->stop_ids);
    free(r->grammar_text);
    free(r->logit_bias);
    free(r->gram_err);
    free(r->ring);
    free(r);
}

/* ---- public API ------------------------------------------------------------- */

/* util_fail for engine_submit: fills err, returns the failure's kind. */
static engine_status sub_fail(engine_status st, char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return st;
}

/* The request's tree mode and bounds (engine_tree in engine.h). Trees need
 * the engine's tree setting on, and speculation without logprobs or coupled
 * verification (a grammar is fine: every node is masked by its own state): a request that asks for trees without those is
 * refused; one that inherits auto takes the chain path. */
static int resolve_tree(const engine *e, const engine_request *rq, req *r, char *err, size_t errlen) {
    int eng = e->tc ? e->cfg.tree : ENGINE_TREE_OFF;
    bool asked = rq->tree == ENGINE_TREE_AUTO || rq->tree == ENGINE_TREE_FIXED;
    if ((unsigned)rq->tree > ENGINE_TREE_FIXED) return util_fail(err, errlen, "unknown tree mode %d", (int)rq->tree);
    if (asked && eng == ENGINE_TREE_OFF)
        return util_fail(err, errlen, "tree speculation is off on this server (speculation.tree)");
    const tree_shape lim = {e->cfg.tree_budget, e->cfg.tree_depth, e->cfg.tree_topk};
    tree_shape sh = lim;
    const int ask[3] = {rq->tree_budget, rq->tree_depth, rq->tree_topk}, top[3] = {lim.budget, lim.depth, lim.topk};
    static const char *names[3] = {"tree_budget", "tree_depth", "tree_topk"};
    for (int k = 0; k < 3; k++) {
        if (ask[k] == 0) continue;
        if (ask[k] < 1 || ask[k] > top[k])
            return util_fail(err, errlen, "%s %d is outside [1, %d] (the server's bound)", names[k], ask[k], top[k]);
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
                          : sampler_has_penalties(&r->prm.sc) ? "penalties or logit_bias"
                                            : NULL;
        if (why && asked) return util_fail(err, errlen, "tree speculation cannot be combined with %s", why);
        if (why) mode = ENGINE_TREE_OFF;
    }
    r->tree_mode = mode;
    r->tree_sh = sh;
    r->pub_shape = (tree_shape){0, 0, 0};
    return 0;
}

engine_status engine_submit(engine *e, const engine_request *rq, uint64_t *id, char *err, size_t errlen) {
    *id = 0;
    if (!sampler_config_validate(&rq->sc, err, errlen)) return ENGINE_ERR_INVALID;
    if (rq->max_tokens < 1) return sub_fail(ENGINE_ERR_INVALID, err, errlen, "max_tokens must be at least 1");
    if (rq->mode == SPEC_MODE_DRAFT && !spec_pair_has_draft(e->sp))
        return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation mode 'draft' needs a draft model, and none is loaded");
    if (rq->method_set && rq->method == SPEC_METHOD_DRAFT && !spec_pair_has_draft(e->sp))
        return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation method 'draft' needs a draft model, and none is loaded");
    spec_method method = rq->mode == SPEC_MODE_DRAFT ? SPEC_METHOD_DRAFT : rq->method_set ? rq->method : (spec_method)e->cfg.method;
    if (method == SPEC_METHOD_MEDUSA && !e->dm) {
        if (rq->method_set)
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation method 'medusa' needs Medusa heads (models.medusa), and none "
                                         "are loaded");
        method = SPEC_METHOD_AUTO;
    }
    /* learning from traffic: a head may arrive any time (plain steps until then) */
    if (method == SPEC_METHOD_EAGLE && !e->sp->drafters[SPEC_DRAFTER_EAGLE] && !e->learn.ring) {
        if (rq->method_set)
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation method 'eagle' needs an EAGLE-3 head (models.eagle), "
                            "and none is loaded");
        method = SPEC_METHOD_AUTO;
    }
    if (method == SPEC_METHOD_MEDUSA && (rq->logprobs || rq->verify == ENGINE_VERIFY_COUPLED))
        return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation method 'medusa' cannot be combined with %s",
                        rq->logprobs ? "logprobs" : "coupled verification");
    /* penalties depend on each position's history: only the chain path
     * applies them to the draft's q and the target's p alike */
    bool penalties = sampler_has_penalties(&rq->sc);
    if (method == SPEC_METHOD_MEDUSA && penalties)
        return sub_fail(ENGINE_ERR_INVALID, err, errlen, "speculation method 'medusa' cannot be combined with "
                        "penalties or logit_bias");
    for (int i = 0; i < rq->sc.n_logit_bias; i++)
        if (!tok_valid_id(e->sp->tok, rq->sc.logit_bias[i].id))
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "logit_bias token id %d is outside the vocabulary",
                            (int)rq->sc.logit_bias[i].id);
    bool can_speculate = rq->mode != SPEC_MODE_OFF && e->cfg.mode != SPEC_MODE_OFF && method != SPEC_METHOD_OFF &&
                         (method != SPEC_METHOD_DRAFT || spec_pair_has_draft(e->sp));
    gamma_params gp = e->cfg.gamma;
    if (rq->gamma) {
        if (rq->gamma < gp.gamma_min || rq->gamma > gp.gamma_max)
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "gamma %d is outside the policy bounds [%d, %d]", rq->gamma, gp.gamma_min,
                            gp.gamma_max);
        gp.gamma_default = rq->gamma;
        gp.adaptive = rq->adaptive_set ? rq->adaptive : false;
    } else if (rq->adaptive_set) {
        gp.adaptive = rq->adaptive;
    }
    req *r = calloc(1, sizeof(*r));
    if (!r) return sub_fail(ENGINE_ERR_OOM, err, errlen, "out of memory");
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
                return sub_fail(ENGINE_ERR_INVALID, err, errlen, "special_spans must be sorted and disjoint");
            }
        r->n_prompt = r->prompt ? tok_encode_spans(e->sp->tok, text, len, true, rq->special_spans,
                                                   rq->n_special_spans, r->prompt, cap) : -1;
    }
    if (!r->ring || !r->prompt) {
        req_free(r);
        return sub_fail(ENGINE_ERR_OOM, err, errlen, "out of memory");
    }
    if (r->n_prompt <= 0) {
        req_free(r);
        return sub_fail(ENGINE_ERR_INVALID, err, errlen, "empty prompt");
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (!tok_valid_id(e->sp->tok, r->prompt[i])) {
            int bad = r->prompt[i];
            req_free(r);
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "prompt token id %d is outside the vocabulary", bad);
        }
    stop_init(&r->stop);
    for (int i = 0; i < ENGINE_MAX_STOP && rq->stop[i]; i++) {
        if (strlen(rq->stop[i]) == 0 || strlen(rq->stop[i]) >= ENGINE_STOP_LEN) {
            req_free(r);
            return sub_fail(ENGINE_ERR_INVALID, err, errlen, "stop strings must be 1..%d bytes", ENGINE_STOP_LEN - 1);
        }
        stop_add(&r->stop, rq->stop[i]);
    }
    if (rq->n_stop_ids > 0) {
        r->stop_ids = malloc(sizeof(int32_t) * (size_t)rq->n_stop_ids);
        if (!r->stop_ids) {
            req_free(r);
            return sub_fail(ENGINE_ERR_OOM, err, errlen, "out of memory");
        }
        memcpy(r->stop_ids, rq->stop_ids, sizeof(int32_t) * (size_t)rq->n_stop_ids);
        r->n_stop_ids = rq->n_stop_ids;
    }
    if (rq->grammar) { /* compiled by the compile worker while the request waits (compile.h) */
        size_t gl = strlen(rq->grammar);
        size_t lim = e->cfg.grammar.max_bytes ? e->cfg.grammar.max_bytes : GRAMMAR_MAX_TEXT;
        if (gl == 0 || gl > lim) {
            req_free(r);
            if (gl == 0) return sub_fail(ENGINE_ERR_GRAMMAR, err, errlen, "the grammar is empty");
            return sub_fail(ENGINE_ERR_GRAMMAR, err, errlen, "grammar of %zu bytes is over the limit of %zu "
                            "(grammar.max_bytes)", gl, lim);
        }
        if (!(r->grammar_text = malloc(gl + 1))) {
            req_free(r);
            return sub_fail(ENGINE_ERR_OOM, err, errlen, "out of memory");
        }
        memcpy(r->grammar_text, rq->grammar, gl + 1);
        r->grammar_len = gl;
    }
    /* Medusa sequences hold the heads' state (slot SPEC_DRAFTER_MEDUSA) and
     * take the tree path */
    r->prm = (spec_seq_params){.sc = rq->sc, .seed = rq->seed, .gp = gp, .speculate = can_speculate,
                               .method = method};
    /* auto with heads loaded: Medusa is one of its paths, where it may be */
    /* a seed the client chose must reproduce under adaptive γ (timing-driven)
     * and any batch: only coupled verification makes the tokens independent
     * of the schedule, so it is a seeded request's default */
    bool seeded_coupled = rq->seeded && method != SPEC_METHOD_MEDUSA && rq->tree != ENGINE_TREE_AUTO &&
                          rq->tree != ENGINE_TREE_FIXED;
    bool coupled = rq->verify == ENGINE_VERIFY_COUPLED ||
                   (rq->verify == ENGINE_VERIFY_DEFAULT && (e->cfg.coupled || seeded_coupled));
    r->auto_medusa = method == SPEC_METHOD_AUTO && e->dm && can_speculate && !rq->logprobs && !coupled && !penalties;
    if (rq->sc.n_logit_bias > 0) {
        size_t nb = sizeof(sampler_bias) * (size_t)rq->sc.n_logit_bias;
        if (!(r->logit_bias = malloc(nb))) {
            req_free(r);
            return sub_fail(ENGINE_ERR_OOM, err, errlen, "out of memory");
        }
        memcpy(r->logit_bias, rq->sc.logit_bias, nb);
        r->prm.sc.logit_bias = r->logit_bias;
    }
    r->prm.coupled = coupled;
    if (r->prm.speculate && !gamma_params_validate(&gp, err, errlen)) {
        req_free(r);
        return ENGINE_ERR_INVALID;
    }
    r->adaptive = gp.adaptive;
    r->prm.no_prefix = rq->no_prefix_cache;
    r->prm.record = e->learn.ring != NULL; /* every sequence, for a swapped-in head; no_learn keeps it out of the ring */
    r->no_learn = rq->no_learn;
    r->prm.logprobs = rq->logprobs;
    r->prm.top_logprobs = rq->top_logprobs < 0 ? 0 : rq->top_logprobs > SPEC_TOP_LOGPROBS ? SPEC_TOP_LOGPROBS : rq->top_logprobs;
    if (resolve_tree(e, rq, r, err, errlen) != 0) {
        req_free(r);
        return ENGINE_ERR_INVALID;
    }
    r->policy_bounds = rq->gamma == 0;
    r->method_set = rq->method_set || rq->mode == SPEC_MODE_DRAFT;
    r->pub_method = -1;
    snprintf(r->content_type, sizeof(r->content_type), "%s", rq->content_type ? rq->content_type : "");
    r->max_tokens = rq->max_tokens;
    r->notify = rq->notify;
    r->user = rq->user;
    r->client = rq->client;
    r->t_submit = clock_now_ms();
    {
        static _Atomic uint64_t counter;
        uint64_t k = atomic_fetch_add(&counter, 1) + 1, t = (uint64_t)(r->t_submit * 1e3);
        tel_uuid_format(r->session, rng_u64(t, k, 11, 0), rng_u64(t, k, 12, 1));
    }
    tok_stream_init(&r->ts, e->sp->tok, TOK_DECODE_CONTINUATION * (r->n_prompt > 1));

    eng_lock(e);
    int slot = -1;
    if (e->n_waiting < e->cfg.max_waiting)
        for (int i = 0; i < e->n_slots; i++)
            if (!e->slots[i]) {
                slot = i;
                break;
            }
    if (e->quit) {
        eng_unlock(e);
        req_free(r);
        return sub_fail(ENGINE_ERR_SHUTTING_DOWN, err, errlen, "the engine is shutting down");
    }
    if (slot < 0) {
        eng_unlock(e);
        req_free(r);
        return sub_fail(ENGINE_ERR_QUEUE_FULL, err, errlen, "the engine's queue is full (%d waiting); try again later", e->cfg.max_waiting);
    }
    r->id = (++e->gen << 16) | (uint64_t)slot;
    e->slots[slot] = r;
    if (e->wait_tail) e->wait_tail->next_wait = r;
    else e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    if (r->grammar_text) compile_enqueue(e, r);
    pthread_cond_signal(&e->cv);
    eng_unlock(e);
    *id = r->id;
    return ENGINE_OK;
}

int engine_cancel(engine *e, uint64_t id) {
    eng_lock(e);
    req *r = eng_lookup(e, id);
    int rc = -1;
    if (r && !r->final_pushed && !r->cancel) {
        r->cancel = true;
        rc = 0;
        pthread_cond_signal(&e->cv);
    }
    eng_unlock(e);
    return rc;
}

int engine_poll(engine *e, uint64_t id, engine_event *ev) {
    eng_lock(e);
    req *r = eng_lookup(e, id);
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
    eng_unlock(e);
    return rc;
}

int engine_get_sequences(engine *e, engine_seq_info *out, int max) {
    eng_lock(e);
    int n = 0;
    double now = clock_now_ms();
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
        snprintf(o->method, sizeof(o->method), "%s", r->pub_medusa ? "medusa" : spec_drafter_name(r->pub_method));
        if (r->pub_shape.budget > 0)
            snprintf(o->shape, sizeof(o->shape), "tree %d/%d/%d", r->pub_shape.budget, r->pub_shape.depth,
                     r->pub_shape.topk);
        else
            snprintf(o->shape, sizeof(o->shape), "chain");
        o->alpha = r->pub_alpha;
        o->tokens = r->n_out;
        o->tokens_per_s = r->t_first > 0 && now > r->t_first && r->n_out > 1 ? (r->n_out - 1) / ((now - r->t_first) / 1e3) : 0;
    }
    eng_unlock(e);
    return n;
}

void engine_get_stats(engine *e, engine_stats *out) {
    memset(out, 0, sizeof(*out));
    constrain_stats cs; /* its own lock, taken before mu (never both: the compile worker holds neither long) */
    constrain_cache_stats(e->gc, &cs);
    out->grammar_cache_bytes = cs.bytes, out->grammar_cache_entries = cs.entries, out->grammar_cache_held = cs.held;
    out->grammar_compiles = cs.compiles, out->grammar_cache_hits = cs.hits, out->grammar_evictions = cs.evictions;
    out->grammar_refused = cs.refused, out->grammar_compile_ms_max = cs.compile_ms_max;
    eng_lock(e);
    out->waiting = e->n_waiting;
    for (int i = 0; i < e->n_active; i++) {
        if (e->active[i]->state == RQ_PREFILL) out->prefilling++;
        else out->running++;
        out->paused += e->active[i]->paused;
    }
    out->grammar_compiling = e->n_compiling;
    out->kv_free_target = e->kv_free_t;
    out->kv_free_draft = e->kv_free_d;
    out->kv_total = e->sp->tpool->n_blocks;
    out->steps = e->steps, out->tokens = e->tokens, out->requests_done = e->done;
    out->verify_calls = e->verify_calls;
    out->mixed_steps = e->mixed_steps;
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
    out->path_steps[0] = e->path_steps[0], out->path_steps[1] = e->path_steps[1];
    out->tree_auto = e->tree_auto;
    eng_unlock(e);
}

static void engine_backends_free(engine *e);

/* The backends: one, or with tensor parallelism one per target shard (shard 0
 * also runs the draft) and the all-reduce between them. */
static int engine_backends(engine *e, char *err, size_t errlen) {
    const engine_config *c = &e->cfg;
    int n = c->tensor_parallel > 1 ? c->tensor_parallel : 1;
    if (n > ENGINE_MAX_SHARDS) {
        util_fail(err, errlen, "tensor_parallel %d exceeds %d", n, ENGINE_MAX_SHARDS);
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

/* engine_create's way out before the engine's tables exist: what is built so
 * far, in the order engine_destroy frees it (tree scratch before the pair,
 * whose draft model it is registered with; the pair, which owns the heads'
 * and the EAGLE head's proposers, before the heads). */
static void create_unwind(engine *e) {
    learn_free(e);
    spec_tree_destroy(e->tc);
    draft_tree_destroy(e->dt);
    spec_pair_free(e->sp);
    medusa_heads_destroy(e->mh);
    engine_backends_free(e);
    free(e);
}

static void engine_backends_free(engine *e) {
    comm_destroy(e->tp_comm);
    for (int r = 0; r < e->n_shards; r++) backend_destroy(e->shards[r]);
    e->tp_comm = NULL;
    e->n_shards = 0;
    e->be = NULL;
}

engine *engine_create(const engine_config *cfg, engine_status *st, char *err, size_t errlen) {
    engine *e = calloc(1, sizeof(*e));
    if (!e) return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory"), NULL;
    e->cfg = cfg ? *cfg : engine_config_default();
    engine_config *c = &e->cfg;
    budget_init(&e->bud);
    if (c->block_size <= 0) c->block_size = 16;
    if (c->max_running <= 0) c->max_running = 32;
    if (c->max_running > 1024) c->max_running = 1024;
    if (c->max_waiting <= 0) c->max_waiting = 1024;
    if (c->max_per_client <= 0) c->max_per_client = c->max_running / 2 > 0 ? c->max_running / 2 : 1;
    if (c->prefill_chunk <= 0) c->prefill_chunk = 256;
    if (c->ring_events < 4) c->ring_events = 64;
    if (c->padding_cap < 1.0f) c->padding_cap = 1.5f;
    if (!gamma_params_validate(&c->gamma, err, errlen)) {
        engine_status_set(st, ENGINE_ERR_INVALID);
        free(e);
        return NULL;
    }
    if (engine_backends(e, err, errlen) != 0) {
        engine_status_set(st, ENGINE_ERR_BACKEND);
        free(e);
        return NULL;
    }
    spec_pair_params pp = {.max_ctx = c->max_ctx, .kv_blocks = c->kv_blocks, .block_size = c->block_size,
                           .kv_type = c->kv_type == KV_F16 ? KV_F16 : KV_F32,
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
    e->sp = spec_pair_load(c->target_path, c->draft_path, e->be, &pp, stderr, st, err, errlen);
    if (!e->sp) {
        engine_backends_free(e);
        free(e);
        return NULL;
    }
    if (c->calibrate) {
        /* the verify cost curve t(rows), for the budget controller */
        spec_pair_calibrate(e->sp);
        budget_measure(&e->bud, e->sp);
    }
    if (c->tree_budget <= 0) c->tree_budget = 16;
    if (c->tree_depth <= 0) c->tree_depth = 5;
    if (c->tree_topk <= 0) c->tree_topk = 3;
    if (c->tree_budget > DRAFTER_MAX_NODES) c->tree_budget = DRAFTER_MAX_NODES;
    if (c->tree_depth > c->tree_budget) c->tree_depth = c->tree_budget;
    if (c->tree == ENGINE_TREE_DEFAULT) c->tree = ENGINE_TREE_OFF;
    if (c->medusa_path && c->medusa_path[0]) {
        /* refused unless trained for exactly this target (its identity) */
        e->mh = medusa_heads_load(c->medusa_path, e->sp->target_id.id, e->sp->target->hp.dim, e->sp->n_vocab, st,
                                  err, errlen);
        if (e->mh) e->dm = draft_medusa_create(e->sp, e->mh, st, err, errlen);
        /* the pair owns the heads' proposer from here on (its slot) */
        if (e->dm) spec_pair_set_drafter(e->sp, SPEC_DRAFTER_MEDUSA, draft_medusa_drafter(e->dm));
        if (!e->mh || !e->dm || !(e->tc = spec_tree_create(e->sp))) {
            if (e->mh && e->dm && !e->tc) util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory for Medusa");
            create_unwind(e);
            return NULL;
        }
        tree_shape hs = {c->tree_budget, c->tree_depth, c->tree_topk};
        if (hs.depth > e->mh->n_heads) hs.depth = e->mh->n_heads;
        budget_set_heads(&e->bud, hs);
        /* each step's budget from t(rows); a fixed shape (speculation.tree:
         * fixed, generate --tree B/D/K) is the user's: every step uses it */
        if (e->bud.t_rows[1] > 0 && c->tree != ENGINE_TREE_FIXED) draft_medusa_set_curve(e->dm, e->bud.t_rows);
    }
    if (c->eagle_path && c->eagle_path[0]) { /* the pair owns it from here on (its slot) */
        drafter *ea = draft_eagle_load(e->sp, c->eagle_path, 0, st, err, errlen);
        if (!ea) {
            create_unwind(e);
            return NULL;
        }
        spec_pair_set_drafter(e->sp, SPEC_DRAFTER_EAGLE, ea);
    }
    if (learn_init(e, err, errlen) != 0) {
        engine_status_set(st, ENGINE_ERR_INVALID);
        create_unwind(e);
        return NULL;
    }
    if (c->tree != ENGINE_TREE_OFF) {
        budget_set_trees(&e->bud, e->sp, c->tree, (tree_shape){c->tree_budget, c->tree_depth, c->tree_topk});
        if (!e->tc) e->tc = spec_tree_create(e->sp);
        e->dt = spec_pair_has_draft(e->sp) ? draft_tree_create(e->sp) : NULL;
        if (!e->tc || (spec_pair_has_draft(e->sp) && !e->dt)) {
            create_unwind(e);
            return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory for tree speculation (speculation.tree)"),
                   NULL;
        }
    }
    constrain_limits cl = constrain_default_limits();
    const engine_grammar_limits *gl = &c->grammar;
    if (gl->max_bytes) cl.grammar.max_bytes = gl->max_bytes;
    if (gl->max_rules) cl.grammar.max_rules = gl->max_rules;
    if (gl->max_elements) cl.grammar.max_elements = gl->max_elements;
    if (gl->compile_ms) cl.compile_ms = gl->compile_ms;
    if (gl->matcher_bytes) cl.matcher_bytes = gl->matcher_bytes;
    if (gl->cache_bytes) cl.cache_bytes = gl->cache_bytes;
    if (!(e->gc = constrain_cache_create(e->sp->tok, &cl))) {
        create_unwind(e);
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory for the grammar mask cache"), NULL;
    }
    if (!(e->chat = chat_tmpl_load(e->sp->target->gguf, e->sp->tok, c->chat_template, err, errlen))) {
        engine_destroy(e); /* reported once, at load */
        engine_status_set(st, ENGINE_ERR_INVALID);
        return NULL;
    }
    e->n_slots = c->max_waiting + c->max_running;
    if (e->n_slots > 65535) e->n_slots = 65535;
    int R = c->max_running;
    e->slots = calloc((size_t)e->n_slots, sizeof(req *));
    e->active = calloc((size_t)e->n_slots, sizeof(req *));
    e->aseq = calloc((size_t)e->n_slots, sizeof(spec_seq *));
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
    e->tinfo = calloc((size_t)R, sizeof(spec_step_info));
    bool vok = true;
    for (int p = 0; p < SCHED_PATHS; p++) {
        e->vshare[p] = calloc((size_t)R, sizeof(double));
        e->vbatch[p] = calloc((size_t)R, sizeof(int));
        e->vrows[p] = calloc((size_t)R, sizeof(int));
        vok &= e->vshare[p] && e->vbatch[p] && e->vrows[p];
    }
    e->ttree = calloc((size_t)R, sizeof(spec_tree));
    e->tslot = calloc((size_t)R, sizeof(int));
    e->tdms = calloc((size_t)R, sizeof(double));
    e->vms = calloc((size_t)R, sizeof(model_seq));
    e->vunit = calloc((size_t)R, sizeof(*e->vunit));
    if (!e->slots || !e->active || !e->aseq || !e->bseq || !e->mseq || !e->mmax || !e->bmax || !e->bgam || !e->order || !e->gam_all || !e->binfo ||
        !e->bins || !e->treq || !e->tseq || !e->tsh || !e->thow || !e->tmax || !e->tinfo ||
        !vok || !e->ttree || !e->tslot || !e->tdms || !e->vms || !e->vunit) {
        engine_destroy(e);
        return util_fail_st(st, ENGINE_ERR_OOM, err, errlen, "out of memory for the engine's tables"), NULL;
    }
    publish_pools(e);
    e->costs_pub = e->sp->costs;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int prc = compile_start(e);
    if (prc == 0 && (prc = pthread_create(&e->th, NULL, engine_main, e)) != 0) compile_stop(e);
    if (prc != 0) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        e->th = 0;
        engine_destroy(e); /* without a thread: only frees */
        return util_fail_st(st, ENGINE_ERR_BACKEND, err, errlen, "cannot start the engine thread: %s", strerror(prc)),
               NULL;
    }
    engine_status_set(st, ENGINE_OK);
    return e;
}

void engine_destroy(engine *e) {
    if (!e) return;
    if (e->sp && e->th) {
        eng_lock(e);
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i]) e->slots[i]->cancel = true;
        e->quit = true;
        pthread_cond_signal(&e->cv);
        eng_unlock(e);
        pthread_join(e->th, NULL);
        compile_stop(e);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
    for (int i = 0; e->slots && i < e->n_slots; i++) req_free(e->slots[i]);
    free(e->slots), free(e->active), free(e->aseq), free(e->bseq), free(e->bmax), free(e->bgam), free(e->order), free(e->gam_all);
    free(e->binfo), free(e->bins), free(e->mseq), free(e->mmax);
    free(e->treq), free(e->tseq), free(e->tsh), free(e->thow), free(e->tmax), free(e->tinfo);
    for (int p = 0; p < SCHED_PATHS; p++) free(e->vshare[p]), free(e->vbatch[p]), free(e->vrows[p]);
    free(e->ttree), free(e->tslot), free(e->tdms), free(e->vms), free(e->vunit);
    spec_tree_destroy(e->tc);
    draft_tree_destroy(e->dt);
    constrain_cache_destroy(e->gc);
    chat_tmpl_free(e->chat);
    learn_free(e);                 /* heads kept for rollback: before the target they borrow from */
    spec_pair_free(e->sp);         /* the heads' proposer with it (its slot) */
    medusa_heads_destroy(e->mh);
    engine_backends_free(e);
    free(e);
}
