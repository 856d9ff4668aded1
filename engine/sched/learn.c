/* learn.c — learning from traffic on the engine's side (see learn.h) and
 * engine.h's engine_learn_* functions. */
#include "engine/sched/learn.h"
#include "engine/sched/engine_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int learn_init(engine *e, char *err, size_t errlen) {
    learn_state *L = &e->learn;
    const engine_learn_config *c = &e->cfg.learn;
    snprintf(L->st.state, sizeof(L->st.state), "off");
    if (!c->enabled) return 0;
    spec_pair *sp = e->sp;
    int nl = sp->target->hp.n_layer;
    drafter *ea = sp->drafters[SPEC_DRAFTER_EAGLE];
    if (ea) {
        draft_eagle_layers(ea, L->layers);
        snprintf(L->path, sizeof(L->path), "%s", e->cfg.eagle_path ? e->cfg.eagle_path : "");
    } else { /* the reference's: the inputs of layers 2, L/2 and L - 3 */
        L->layers[0] = nl > 2 ? 2 : 0, L->layers[1] = nl / 2, L->layers[2] = nl > 3 ? nl - 3 : nl - 1;
    }
    /* the taps stay on with no head in the slot too (before the first head, after a rollback to none) */
    if (spec_pair_set_learn_taps(sp, L->layers, 3) != 0) {
        util_fail(err, errlen, "out of memory for the learning taps");
        return -1;
    }
    snprintf(L->target_id, sizeof(L->target_id), "%s", sp->target_id.id);
    int width = 3 * sp->target->hp.dim;
    size_t cap = c->ring_bytes ? c->ring_bytes : (size_t)256 << 20;
    if (!(L->ring = learn_ring_create(cap, width, c->spill_path, L->target_id, err, errlen))) return -1;
    L->st.enabled = true;
    snprintf(L->st.state, sizeof(L->st.state), "waiting");
    return 0;
}

void learn_free(engine *e) {
    learn_ring_destroy(e->learn.ring);
    drafter_destroy(e->learn.next);
    drafter_destroy(e->learn.prev);
    e->learn.ring = NULL, e->learn.next = e->learn.prev = NULL;
}

void learn_on_finish(engine *e, req *r) {
    ENG_HOLDS_MU(e);
    learn_state *L = &e->learn;
    spec_seq *s = r->seq;
    if (!L->ring || !s || !s->prm.record) return;
    if (r->no_learn || L->paused || L->policy_off) {
        L->st.opted_out += r->no_learn;
        return;
    }
    int n = s->n_tokens;
    if (s->rf_gap || s->rf_n < n - 1) n = s->rf_gap ? 0 : s->rf_n + 1; /* the record's whole prefix */
    if (n >= 2) learn_ring_push(L->ring, s->tokens, n, s->rf);
}

/* Frees every running sequence's state of the head in the EAGLE slot,
 * installs d there and lets the sequences that may use it adopt it. */
static void swap_head(engine *e, drafter *d) {
    for (int i = 0; i < e->n_active; i++) e->aseq[i] = e->active[i]->seq;
    drafter *old = spec_pair_swap_drafter(e->sp, e->aseq, e->n_active, SPEC_DRAFTER_EAGLE, d);
    budget_pool_reset(&e->bud, SPEC_DRAFTER_EAGLE); /* the old head's α says nothing of this one */
    e->learn.prev = old;
    e->learn.has_prev = true;
}

void learn_apply(engine *e) {
    ENG_HOLDS_MU(e);
    learn_state *L = &e->learn;
    if (L->next) {
        drafter_destroy(L->prev);
        L->prev = NULL;
        swap_head(e, L->next);
        L->next = NULL;
        snprintf(L->prev_path, sizeof(L->prev_path), "%s", L->path);
        snprintf(L->path, sizeof(L->path), "%s", L->next_path);
        L->st.head_version++, L->st.swaps++;
    } else if (L->rollback) {
        L->rollback = false;
        if (!L->has_prev) return;
        drafter *back = L->prev; /* NULL: back to no head */
        L->prev = NULL;
        swap_head(e, back); /* the current head becomes prev: a second rollback undoes the first */
        char t[sizeof(L->path)];
        memcpy(t, L->path, sizeof(t));
        memcpy(L->path, L->prev_path, sizeof(t));
        memcpy(L->prev_path, t, sizeof(t));
        L->st.head_version++, L->st.rollbacks++;
    }
}

/* ---- engine.h ----------------------------------------------------------- */

void engine_get_learn_stats(engine *e, engine_learn_stats *out) {
    eng_lock(e);
    learn_state *L = &e->learn;
    *out = L->st;
    out->paused = L->paused || L->policy_off;
    out->has_head = e->sp->drafters[SPEC_DRAFTER_EAGLE] != NULL;
    snprintf(out->head_path, sizeof(out->head_path), "%s", L->path);
    if (out->enabled && out->paused) snprintf(out->state, sizeof(out->state), "paused");
    eng_unlock(e);
    if (L->ring) {
        learn_ring_stats rs;
        learn_ring_get_stats(L->ring, &rs);
        out->ring_samples = rs.samples, out->ring_positions = rs.positions;
        out->ring_bytes = rs.bytes, out->ring_cap = rs.cap, out->ring_pushed = rs.pushed, out->ring_dropped = rs.dropped;
    }
}

void engine_learn_report(engine *e, const engine_learn_stats *t, bool rejected) {
    eng_lock(e);
    engine_learn_stats *s = &e->learn.st;
    s->train_positions = t->train_positions, s->train_pos_per_s = t->train_pos_per_s;
    s->train_cpu_share = t->train_cpu_share, s->rounds = t->rounds;
    s->live_accept = t->live_accept, s->cand_accept = t->cand_accept, s->eval_rows = t->eval_rows;
    memcpy(s->state, t->state, sizeof(s->state));
    memcpy(s->message, t->message, sizeof(s->message));
    s->rejected += rejected;
    eng_unlock(e);
}

int engine_learn_snapshot(engine *e, learn_sample ***out) {
    if (!e->learn.ring) return -1;
    return learn_ring_snapshot(e->learn.ring, out);
}

void engine_learn_release(learn_sample **s, int n) { learn_ring_release(s, n); }

int engine_learn_spill(engine *e) { return e->learn.ring ? learn_ring_spill(e->learn.ring) : 0; }

int engine_learn_layers(engine *e, int *layers) {
    memcpy(layers, e->learn.layers, sizeof(e->learn.layers));
    return e->learn.ring ? 3 : 0;
}

struct model *engine_learn_target(engine *e) { return e->sp->target; }
const char *engine_learn_target_id(engine *e) { return e->learn.target_id; }

int engine_learn_offer(engine *e, const char *path, char *err, size_t errlen) {
    if (!e->learn.ring) return util_fail(err, errlen, "learning is off (serve --learn or speculation.learn)"), -1;
    engine_status st;
    drafter *d = draft_eagle_load(e->sp, path, 0, &st, err, errlen);
    if (!d) return -1;
    int layers[3];
    draft_eagle_layers(d, layers);
    if (memcmp(layers, e->learn.layers, sizeof(layers))) {
        drafter_destroy(d);
        return util_fail(err, errlen, "head %s reads target layers %d, %d, %d; the ring's features are of %d, %d, %d",
                         path, layers[0], layers[1], layers[2], e->learn.layers[0], e->learn.layers[1],
                         e->learn.layers[2]),
               -1;
    }
    eng_lock(e);
    drafter_destroy(e->learn.next); /* an older offer not yet swapped in: the newer wins */
    e->learn.next = d;
    snprintf(e->learn.next_path, sizeof(e->learn.next_path), "%s", path);
    pthread_cond_signal(&e->cv);
    eng_unlock(e);
    return 0;
}

/* Copies src to dst through dst.tmp and a rename: dst is whole or untouched. */
static int copy_file(const char *src, const char *dst, char *msg, size_t n) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    if (!in || !out) {
        snprintf(msg, n, "cannot %s %s: %s", in ? "write" : "read", in ? tmp : src, strerror(errno));
        if (in) fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t k;
    bool ok = true;
    while (ok && (k = fread(buf, 1, sizeof(buf), in)) > 0) ok = fwrite(buf, 1, k, out) == k;
    ok = ok && !ferror(in);
    fclose(in);
    ok = fclose(out) == 0 && ok;
    if (!ok || rename(tmp, dst) != 0) {
        snprintf(msg, n, "cannot write %s: %s", dst, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int engine_learn_control(engine *e, const char *op, const char *arg, char *msg, size_t n) {
    learn_state *L = &e->learn;
    if (!L->ring) return snprintf(msg, n, "learning is off (serve --learn or speculation.learn)"), -1;
    int rc = 0;
    char path[sizeof(L->path)];
    eng_lock(e);
    if (!strcmp(op, "pause")) {
        L->paused = true;
        snprintf(msg, n, "learning paused: nothing is recorded or trained until resume");
    } else if (!strcmp(op, "resume")) {
        L->paused = false;
        snprintf(msg, n, "learning resumed");
    } else if (!strcmp(op, "rollback")) {
        if (!L->has_prev) rc = -1, snprintf(msg, n, "nothing to roll back to: no head was swapped in yet");
        else {
            L->rollback = true;
            pthread_cond_signal(&e->cv);
            snprintf(msg, n, "rolling back to %s (head version %d follows)", L->prev_path[0] ? L->prev_path : "no head",
                     L->st.head_version + 1);
        }
    } else if (!strcmp(op, "save")) {
        memcpy(path, L->path, sizeof(path));
        if (!path[0] || !e->sp->drafters[SPEC_DRAFTER_EAGLE]) rc = -1, snprintf(msg, n, "no head is live: nothing to save");
        else if (!arg || !arg[0]) rc = -1, snprintf(msg, n, "save needs a path");
    } else {
        rc = -1;
        snprintf(msg, n, "unknown learning operation '%s' (pause, resume, save, rollback)", op);
    }
    eng_unlock(e);
    if (rc == 0 && !strcmp(op, "save")) {
        if (copy_file(path, arg, msg, n) != 0) return -1;
        snprintf(msg, n, "saved head version %d (%s) to %s", L->st.head_version, path, arg);
    }
    return rc;
}
