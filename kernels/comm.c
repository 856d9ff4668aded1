/* comm.c — the host-memory all-reduce (see comm.h) and the interface helpers. */
#include "kernels/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void local_destroy(comm *c) { free(c); }

static void local_allreduce_sum(comm *c, float *const *bufs, size_t count) {
    float *acc = bufs[0];
    for (int r = 1; r < c->n_ranks; r++) {
        const float *b = bufs[r];
        for (size_t i = 0; i < count; i++) acc[i] += b[i];
    }
    for (int r = 1; r < c->n_ranks; r++) memcpy(bufs[r], acc, count * sizeof(float));
}

static const comm_i local_iface = {
    .version = COMM_INTERFACE_VERSION,
    .name = "local",
    .destroy = local_destroy,
    .allreduce_sum = local_allreduce_sum,
};

comm *comm_local_create(backend *const *bes, int n) {
    if (n < 1) return NULL;
    for (int r = 0; r < n; r++)
        if (!bes[r] || !bes[r]->host_memory) return NULL;
    comm *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->i = &local_iface;
    c->n_ranks = n;
    return c;
}

void comm_destroy(comm *c) {
    if (c) c->i->destroy(c);
}

void comm_allreduce_sum(comm *c, float *const *bufs, size_t count) {
    if (c->n_ranks > 1) c->i->allreduce_sum(c, bufs, count);
}

comm *comm_create(backend *const *bes, int n, char *err, size_t errlen) {
    if (n >= 1 && bes[0] && bes[0]->host_memory) {
        comm *c = comm_local_create(bes, n);
        if (!c) snprintf(err, errlen, "tensor parallelism: every shard must be on the same kind of backend");
        return c;
    }
    return comm_nccl_create(bes, n, err, errlen);
}

#ifndef SPECD_CUDA
comm *comm_nccl_create(backend *const *bes, int n, char *err, size_t errlen) {
    snprintf(err, errlen, "NCCL all-reduce needs a CUDA build of specd");
    return NULL;
}
#endif
