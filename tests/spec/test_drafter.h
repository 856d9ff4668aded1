/* test_drafter.h — a drafter for fault injection: it wraps a real drafter
 * (sequences, commits and costs pass straight through, so the wrapped one's
 * state is the sequences' state) and fails every propose call from the
 * fail_after-th on, as an allocation failure or a device error would, before
 * touching any state. Install with spec_pair_set_drafter; put the original
 * back before the pair is freed. */
#ifndef SPECD_TEST_DRAFTER_H
#define SPECD_TEST_DRAFTER_H

#include "engine/spec/drafter.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    drafter base;
    drafter *inner;             /* not owned */
    int fail_after;             /* > 0: calls >= this fail */
    int calls;
} test_drafter;

static void td_destroy(drafter *d) { free(d); }
static drafter_seq *td_seq_create(drafter *d, int max_len) {
    drafter *in = ((test_drafter *)d)->inner;
    return in->i->seq_create(in, max_len);
}
static void td_seq_destroy(drafter *d, drafter_seq *ds) {
    drafter *in = ((test_drafter *)d)->inner;
    in->i->seq_destroy(in, ds);
}
static int td_available(drafter *d, drafter_seq *ds, const int32_t *t, int n) {
    drafter *in = ((test_drafter *)d)->inner;
    return in->i->available ? in->i->available(in, ds, t, n) : GAMMA_MAX;
}
static int td_propose(drafter *d, drafter_prop *p, int n, char *err, size_t errlen) {
    test_drafter *td = (test_drafter *)d;
    if (td->fail_after > 0 && ++td->calls >= td->fail_after) {
        snprintf(err, errlen, "injected draft failure");
        for (int i = 0; i < n; i++) p[i].n_nodes = 0;
        return -1;
    }
    return td->inner->i->propose(td->inner, p, n, err, errlen);
}
static void td_commit(drafter *d, drafter_seq *ds, const int32_t *t, int len) {
    drafter *in = ((test_drafter *)d)->inner;
    in->i->commit(in, ds, t, len);
}
static int td_state_len(drafter *d, drafter_seq *ds) {
    drafter *in = ((test_drafter *)d)->inner;
    return in->i->state_len ? in->i->state_len(in, ds) : -1;
}
static void td_cost(drafter *d, double *node_ms, double *per_row_ms) {
    drafter *in = ((test_drafter *)d)->inner;
    in->i->cost(in, node_ms, per_row_ms);
}
static void td_observe(drafter *d, int nodes, int rows, double ms) {
    drafter *in = ((test_drafter *)d)->inner;
    if (in->i->observe) in->i->observe(in, nodes, rows, ms);
}

static const drafter_i test_drafter_i = {
    .version = DRAFTER_INTERFACE_VERSION, .name = "test", .destroy = td_destroy,
    .seq_create = td_seq_create, .seq_destroy = td_seq_destroy, .available = td_available,
    .propose = td_propose, .commit = td_commit, .state_len = td_state_len, .cost = td_cost,
    .observe = td_observe,
};

/* A failing wrapper around inner (NULL when out of memory). */
static inline drafter *test_drafter_failing(drafter *inner, int fail_after) {
    test_drafter *td = calloc(1, sizeof(*td));
    if (!td) return NULL;
    td->base.i = &test_drafter_i;
    td->base.n_vocab = inner->n_vocab;
    td->inner = inner;
    td->fail_after = fail_after;
    return &td->base;
}

#endif
