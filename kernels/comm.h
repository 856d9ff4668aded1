/* comm.h — the collective a tensor-parallel forward pass needs: an all-reduce
 * (sum) over one buffer per rank, each in its rank's backend memory. A table of
 * function pointers like backend.h, so the host-memory implementation here and
 * an NCCL one (kernels/cuda) are interchangeable. Nothing here knows models.
 *
 * Threading: one thread drives all ranks (the engine thread); a comm is used by
 * that thread only. */
#ifndef SPECD_COMM_H
#define SPECD_COMM_H

#include "kernels/backend.h"

#include <stddef.h>

#define COMM_INTERFACE_VERSION 1

typedef struct comm comm;

typedef struct comm_i {
    int version;             /* COMM_INTERFACE_VERSION */
    const char *name;
    void (*destroy)(comm *c);
    /* bufs[r] (count floats) is rank r's buffer in rank r's backend memory, for
     * r = 0 .. n_ranks-1. Afterwards every bufs[r] holds the elementwise sum of
     * all of them, identical bit for bit on every rank. Ordered after the ops
     * already queued on each rank's backend and before the ops queued after it;
     * it may be called between begin() and end() of the ranks' backends (a
     * backend that captures steps must capture it too). Summation order must
     * not depend on timing: the same inputs give the same sums on every call. */
    void (*allreduce_sum)(comm *c, float *const *bufs, size_t count);
} comm_i;

struct comm {
    const comm_i *i;
    void *ctx;
    int n_ranks;
};

/* All-reduce for backends whose memory is host memory and whose ops have
 * finished when they return (the CPU backend): sums into rank 0 in rank order
 * r = 0 .. n-1 with plain float adds, then copies the sum to the other ranks.
 * Deterministic. Returns NULL when n < 1 or a backend is not host memory. The
 * backends are not owned; the caller frees the comm with comm_destroy. */
comm *comm_local_create(backend *const *bes, int n);
void comm_destroy(comm *c); /* accepts NULL */

/* The NCCL all-reduce for CUDA backends, one per GPU (kernels/cuda/nccl_comm.c).
 * NULL with the reason in err (not a CUDA build, a rank not on CUDA, two ranks
 * on one GPU, NCCL failure). */
comm *comm_nccl_create(backend *const *bes, int n, char *err, size_t errlen);
/* The all-reduce that suits the backends: local for host memory, else NCCL. */
comm *comm_create(backend *const *bes, int n, char *err, size_t errlen);

/* c->i->allreduce_sum; a no-op for a single rank. */
void comm_allreduce_sum(comm *c, float *const *bufs, size_t count);

#endif
