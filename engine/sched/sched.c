/* sched.c — the engine thread (engine.h, engine_impl.h): admission by KV
 * reservation, chunked prefill interleaved with decode, binned speculative
 * steps, per-request event rings with backpressure. One loop iteration:
 * sched_reap (cancelled and finished requests leave, never-fitting ones are
 * answered), sched_slots (pause/resume for backpressure), sched_admit
 * (waiting requests enter), sched_pick (this iteration's work), then without
 * the lock sched_run (sched_run.c: one prefill chunk, one step over the running requests),
 * and under it again sched_emit (events, statistics, telemetry). */
#include "engine/sched/engine_impl.h"

#include "engine/telemetry/telemetry.h"
#include "policy/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rings (caller holds mu) ------------------------------------------------ */

static engine_event *ring_push(engine *e, req *r) {
    ENG_HOLDS_MU(e);
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

/* Ends a request: frees its sequence (KV) and reservation at once and pushes
 * the final event. Caller holds mu; the ring always has room for it because
 * requests are only stepped with two free slots. */
static void finish_as(engine *e, req *r, engine_finish why, engine_status status, const char *msg) {
    ENG_HOLDS_MU(e);
    if (r->final_pushed) return;
    spec_stats st = r->seq ? r->seq->st : (spec_stats){0};
    learn_on_finish(e, r);
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
    if (msg) snprintf(ev->message, sizeof(ev->message), "%s", msg), ev->status = status;
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

/* A request's normal end (length, stop, cancelled). Caller holds mu. */
static void finish(engine *e, req *r, engine_finish why) { finish_as(e, r, why, ENGINE_OK, NULL); }

/* A request's failure: an error event of kind status with msg. Caller holds mu. */
static void fail_req(engine *e, req *r, engine_status status, const char *msg) {
    finish_as(e, r, FINISH_ERROR, status, msg);
}

/* ---- the engine thread ------------------------------------------------------ */

/* Emits the tokens a step appended (mu held). */
static void emit_tokens(engine *e, req *r, const spec_step_info *info) {
    ENG_HOLDS_MU(e);
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
    double now = clock_now_ms();
    if (r->t_first == 0) r->t_first = now;
    r->t_last = now;
    bool stop = false;
    engine_finish why = FINISH_LENGTH;
    char piece[512];
    for (int i = 0; i < n_new && !stop; i++) {
        int32_t t = toks[i];
        if (r->gm) { /* never a token outside the grammar: one the budget left no room for ends it, "length" */
            int32_t gs = grammar_advance_token(r->gm, r->gst_out, t);
            if (gs == GRAMMAR_DEAD) {
                stop = true, why = FINISH_LENGTH;
                break;
            }
            r->gst_out = gs;
        }
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
        if (k > 0 && stop_feed(&r->stop, piece, k, ev->text, &ev->text_len, ENGINE_TEXT_MAX))
            stop = true, why = FINISH_STOP;
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
            if (k > 0) stop_feed(&r->stop, piece, k, ev->text, &ev->text_len, ENGINE_TEXT_MAX);
            stop_flush(&r->stop, ev->text, &ev->text_len, ENGINE_TEXT_MAX);
        }
        finish(e, r, why);
    }
}

/* Engine-thread helper: remove active[i] (swap with the last). */
static void drop_active(engine *e, int i) {
    ENG_ON_THREAD(e);
    e->active[i] = e->active[--e->n_active];
}

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
    ENG_ON_THREAD(e);
    if (!r->prm.speculate) {
        const pol_rule *rule = pol_config_rule(pc, e->cfg.model_name ? e->cfg.model_name : "*",
                                               r->content_type[0] ? r->content_type : "chat");
        if (!rule->learn) r->no_learn = true;
        return;
    }
    const pol_rule *rule = pol_config_rule(pc, e->cfg.model_name ? e->cfg.model_name : "*",
                                           r->content_type[0] ? r->content_type : "chat");
    if (!rule->learn) r->no_learn = true; /* the rule keeps this content out of the learning ring */
    if (starting && !r->method_set) { /* the rule's proposer, for the whole request */
        int m = spec_method_parse(pol_method_name(rule->method));
        /* the heads serve sequences without logprobs, coupled noise or
         * penalties (the sequence then holds their state: spec.h) */
        bool heads = e->dm && !r->prm.logprobs && !r->prm.coupled && !sampler_has_penalties(&r->prm.sc);
        if (m == SPEC_METHOD_MEDUSA) { /* the heads' trees; where they cannot serve, the engine's default */
            r->auto_medusa = false;
            m = heads ? SPEC_METHOD_MEDUSA : -1;
        } else if (m == SPEC_METHOD_AUTO) { /* with heads loaded they are one of auto's paths, as at submit */
            r->auto_medusa = heads;
        } else if (m >= 0) {
            r->auto_medusa = false;
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
            gp.gamma_default = budget_prior_gamma(&e->sp->costs, a, &gp, r->n_prompt);
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
    ENG_ON_THREAD(e);
    ENG_HOLDS_MU(e);
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
    ENG_ON_THREAD(e);
    ENG_HOLDS_MU(e);
    req *best = NULL;
    int best_held = 0;
    for (req *p = NULL, *r = e->wait_head; r; p = r, r = r->next_wait) {
        if (r->gram == GRAM_PENDING) continue; /* its grammar is still compiling (compile.h) */
        int held = client_held(e, r);
        if (r->client && held >= e->cfg.max_per_client) continue;
        if (!best || held < best_held) best = r, best_held = held, *prev = p;
        if (held == 0) break; /* nobody waiting can beat it */
    }
    return best;
}

/* Copies the pools' free counts for engine_get_stats (mu held; the pools
 * themselves change during model work, outside the lock). */
void publish_pools(engine *e) {
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
    ENG_ON_THREAD(e);
    ENG_HOLDS_MU(e);
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
    ENG_ON_THREAD(e);
    ENG_HOLDS_MU(e);
    memset(&e->st_run, 0, sizeof(e->st_run));
    for (int i = 0; i < e->n_active; i++)
        if (e->active[i]->seq && !e->active[i]->final_pushed) spec_stats_add(&e->st_run, &e->active[i]->seq->st);
}

/* 1. Cancelled and finished requests leave the active set; waiting ones
 * that were cancelled or can never fit are answered at once. mu held. */
static void sched_reap(engine *e) {
    ENG_HOLDS_MU(e);
    /* 1. cancellations and finished requests leave the active set */
    for (int i = 0; i < e->n_active;) {
        req *r = e->active[i];
        if (r->cancel && !r->final_pushed) finish(e, r, FINISH_CANCELLED);
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
                fail_req(e, r, ENGINE_ERR_CONTEXT_FULL, msg);
            } else {
                finish(e, r, FINISH_CANCELLED);
            }
            if (r->notify) r->notify(r->user);
            continue;
        }
        pp = &r->next_wait;
    }
}

/* The running requests' statistics, and a new policy version applied to
 * their γ bounds. mu held. */
static void sched_policy(engine *e) {
    refresh_running_stats(e);
    if (e->cfg.policy) {
        const pol_config *pc = pol_store_acquire(e->cfg.policy);
        if (pc->version != e->policy_version) {
            for (int i = 0; i < e->n_active; i++) apply_policy(e, e->active[i], pc, false);
            /* a reload that turns speculation.learn from true to false pauses learning, true resumes it; a
             * server the flag started learning is not paused by a file that never said true */
            if (pc->speculation.learn) e->learn.policy_seen_true = true;
            e->learn.policy_off = e->learn.policy_seen_true && !pc->speculation.learn;
            if (e->learn.ring) learn_ring_set_cap(e->learn.ring, (size_t)pc->speculation.learn_ring_mb << 20);
            e->policy_version = pc->version;
        }
        pol_store_release(e->cfg.policy, pc);
    }
}

/* 2. Slots: a request whose ring is full pauses and gives its slot up;
 * paused requests whose reader has caught up (ring half empty) take free
 * slots first, oldest pause first. Returns the slots held. mu held. */
static int sched_slots(engine *e) {
    ENG_HOLDS_MU(e);
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
    return holding;
}

/* A constrained request at admission (its grammar compiled: GRAM_READY or
 * GRAM_FAILED). The token budget: a grammar whose shortest document cannot
 * fit max_tokens even in the vocabulary's longest tokens is refused, saying
 * what it needs; one that fits at one byte per token gets the budget rule
 * (grammar.h: every output cut by max_tokens is still complete); one in
 * between runs without it, and an output the budget cuts ends "length" with
 * its valid prefix (emit_tokens never emits a token the grammar refuses).
 * Returns ENGINE_OK, or r->gram_status with the message in err. mu held. */
static engine_status grammar_admit(engine *e, req *r, char *err, size_t errlen) {
    (void)e;
    if (r->gram != GRAM_READY) {
        if (r->gram_status == ENGINE_OK) r->gram_status = ENGINE_ERR_GRAMMAR;
        snprintf(err, errlen, "%s", r->gram_err ? r->gram_err : "the grammar was not compiled");
        return r->gram_status;
    }
    if (r->gram_min_tokens > r->max_tokens) {
        r->gram_status = ENGINE_ERR_GRAMMAR;
        snprintf(err, errlen, "the grammar's shortest document is %d bytes and needs at least %d tokens; max_tokens "
                 "is %d", r->gram_need, r->gram_min_tokens, r->max_tokens);
        return r->gram_status;
    }
    r->prm.grammar = r->gm;
    r->prm.grammar_budget = r->gram_need <= r->max_tokens ? r->max_tokens : 0;
    r->gst_out = grammar_start(r->gm);
    return ENGINE_OK;
}

/* Admission into the slots left (holding of max_running are taken), fairly
 * between clients (pick_waiting): a request enters when its prompt plus a
 * reservation for its output fits in both pools. err: scratch for a failure's
 * message. mu held. */
static void sched_admit(engine *e, int holding, char *err, size_t errlen) {
    ENG_HOLDS_MU(e);
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
        if (r->grammar_text && grammar_admit(e, r, err, errlen) != ENGINE_OK) {
            fail_req(e, r, r->gram_status, err);
            if (r->notify) r->notify(r->user);
            continue;
        }
        r->seq = spec_seq_create(e->sp, r->prompt, r->n_prompt, &r->prm, err, errlen);
        if (!r->seq) { /* submit checked the request: what is left is memory */
            fail_req(e, r, ENGINE_ERR_OOM, err);
            if (r->notify) r->notify(r->user);
            continue;
        }
        /* an auto request holds the heads' state, kept fresh by every step
         * (spec_seq_observe_hidden), so path_ctl can move it at any step */
        r->auto_medusa = r->auto_medusa && r->prm.method == SPEC_METHOD_AUTO && r->seq->ds[SPEC_DRAFTER_MEDUSA];
        budget_seq_set_trees(&e->bud, &r->seq->bud, r->tree_mode, r->tree_sh);
        r->reserved = need;
        e->reserved_blocks += need;
        r->state = RQ_PREFILL;
        r->t_admit = clock_now_ms();
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
}

/* 3. This iteration's work: the first prefilling request gets a chunk, the
 * running ones (not paused) a step. Returns whether there is any. mu held. */
static bool sched_pick(engine *e, sched_step *w) {
    ENG_HOLDS_MU(e);
    req *pre = NULL;
    int n_run = 0, n_pre = 0;
    for (int i = 0; i < e->n_active; i++) {
        req *r = e->active[i];
        if (r->paused) continue; /* backpressure: this request waits for its reader */
        SPECD_CHECK(ring_free(e, r) >= 2);
        n_pre += r->state == RQ_PREFILL;
        if (r->state == RQ_PREFILL && !pre) pre = r;
        else if (r->state == RQ_RUNNING) e->bseq[n_run++] = r->seq;
    }
    SPECD_CHECK(n_run <= e->cfg.max_running);
    w->pre = pre, w->n_run = n_run, w->n_pre = n_pre;
    return pre || n_run > 0;
}

/* One stepped sequence's results (mu held): its published state, what the
 * budget controller learns from it (budget_observe), its telemetry row, and
 * its tokens — or, when its path's step failed, its failure. path: 0 chain,
 * 1 draft/n-gram tree (its shape sh), 2 Medusa; ms, batch, rows: its share of
 * the step's time and its call's sequences and rows. */
static void emit_one(engine *e, req *r, int path, const spec_step_info *si, int rc, const char *err,
                     const tree_shape *sh, double ms, int batch, int rows) {
    ENG_HOLDS_MU(e);
    if (rc == 0) {
        if (path == 1 || (path == 0 && r->tree_mode != ENGINE_TREE_OFF)) {
            e->tree_decisions[path]++;
            e->tree_auto += path == 1 && r->tree_mode == ENGINE_TREE_AUTO;
        }
        r->pub_medusa = path == 2;
        budget_observe(&e->bud, r->seq, path, si->n_new, si->gamma, si->accepted, ms, batch, rows, r->auto_medusa);
        r->pub_gamma = si->gamma;
        r->pub_method = si->method;
        r->pub_shape = *sh;
        if (path == 2) r->pub_shape.budget = si->gamma; /* the budget the curve chose (0: a plain step) */
        else r->pub_alpha = budget_seq_alpha(&r->seq->bud, r->seq->prm.method);
        if (si->gamma > 0) e->accepted_hist[si->accepted]++;
        if (e->cfg.telemetry) {
            tel_step row;
            tel_step_from_info(&row, r->session, ++r->step_num, si);
            row.head_version = e->learn.st.head_version;
            telemetry_step(e->cfg.telemetry, &row);
        }
    }
    if (rc != 0) fail_req(e, r, ENGINE_ERR_BACKEND, err);
    else if (si->n_new > 0) emit_tokens(e, r, si);
    if (r->notify) r->notify(r->user);
}

/* Every stepped sequence's results (mu held): chains (in bin order), then
 * trees (the heads' as path 2). */
static void emit_steps(engine *e, const sched_step *w) {
    ENG_HOLDS_MU(e);
    static const tree_shape chain = {0, 0, 0};
    for (int b = 0; b < w->nb; b++)
        for (int k = 0; k < e->bins[b].n; k++) {
            int at = e->bins[b].first + k;
            req *r = NULL;
            for (int j = 0; j < e->n_active; j++)
                if (e->active[j]->seq == e->bseq[e->order[at]]) r = e->active[j];
            if (r)
                emit_one(e, r, 0, &e->binfo[at], w->path_rc[SCHED_PATH_CHAIN], w->path_err[SCHED_PATH_CHAIN], &chain,
                         e->vshare[SCHED_PATH_CHAIN][at], e->vbatch[SCHED_PATH_CHAIN][at], e->vrows[SCHED_PATH_CHAIN][at]);
        }
    for (int k = 0; k < w->n_path[SCHED_PATH_TREE]; k++)
        emit_one(e, e->treq[k], e->thow[k] == SPEC_METHOD_MEDUSA ? 2 : 1, &e->tinfo[k], w->path_rc[SCHED_PATH_TREE], w->path_err[SCHED_PATH_TREE], &e->tsh[k],
                 e->vshare[SCHED_PATH_TREE][k], e->vbatch[SCHED_PATH_TREE][k], e->vrows[SCHED_PATH_TREE][k]);
}

/* The results of sched_run under mu: the prefilled request's first token (or
 * its failure), the engine counters, then each path's events. */
static void sched_emit(engine *e, const sched_step *w) {
    ENG_HOLDS_MU(e);
    req *pre = w->pre;
    if (pre) {
        if (w->pre_rc < 0) {
            fail_req(e, pre, ENGINE_ERR_BACKEND, w->err);
        } else if (w->pre_rc == 1) {
            pre->state = RQ_RUNNING;
            spec_step_info first = {.n_new = 1};
            emit_tokens(e, pre, &first); /* the first token, sampled from the prefill */
        }
        if (pre->notify) pre->notify(pre->user);
    }
    if (w->n_run > 0) {
        e->steps++;
        e->microbatches += (uint64_t)w->nb + (w->n_path[SCHED_PATH_TREE] > 0);
        e->verify_calls += (uint64_t)w->n_calls;
        e->mixed_steps += w->mixed;
        e->pad_sum += w->pad;
        emit_steps(e, w);
        int arm = budget_step_end(&e->bud, w->n_run + w->n_pre);
        if (arm >= 0) e->path_steps[arm]++;
        refresh_running_stats(e);
    }
}

void *engine_main(void *arg) {
    engine *e = arg;
    sched_step *w = calloc(1, sizeof(*w));
    SPECD_CHECK(w);
    ENG_OWN_THREAD(e);
    eng_lock(e);
    for (;;) {
        /* publish what engine_get_stats reports (the pools and costs change
         * during model work, outside the lock) */
        publish_pools(e);
        e->costs_pub = e->sp->costs;
        sched_reap(e);
        if (e->quit) break;
        learn_apply(e);
        sched_policy(e);
        sched_admit(e, sched_slots(e), w->err, sizeof(w->err));
        if (!sched_pick(e, w)) {
            publish_pools(e);
            eng_wait(e);
            continue;
        }
        eng_unlock(e);
        sched_run(e, w);
        eng_lock(e);
        sched_emit(e, w);
    }
    eng_unlock(e);
    free(w);
    return NULL;
}
