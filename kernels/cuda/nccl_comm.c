/* nccl_comm.c — the all-reduce of tensor parallelism over NCCL (see
 * kernels/comm.h): one communicator per rank, created together for the ranks'
 * devices by ncclCommInitAll; each rank's all-reduce runs on its backend's
 * stream, so it is ordered after the ops queued there and before the next
 * ones, and the host does not wait. NCCL's ring all-reduce gives the same sum
 * on every rank, and the same sum for the same inputs on every call. */
#include "kernels/comm.h"
#include "kernels/cuda/cuda_backend.h"

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    ncclComm_t *comms;
    cudaStream_t *streams;
    int *devices;
} nccl_ctx;

static void nccl_die(const char *file, int line, const char *what, ncclResult_t r) {
    fprintf(stderr, "%s:%d: NCCL error in %s: %s\n", file, line, what, ncclGetErrorString(r));
    abort();
}

#define NCCL_CHECK(call)                                                                                       \
    do {                                                                                                       \
        ncclResult_t nc_r_ = (call);                                                                           \
        if (nc_r_ != ncclSuccess) nccl_die(__FILE__, __LINE__, #call, nc_r_);                                   \
    } while (0)

static void nccl_destroy(comm *c) {
    nccl_ctx *x = c->ctx;
    for (int r = 0; r < c->n_ranks; r++) ncclCommDestroy(x->comms[r]);
    free(x->comms);
    free(x->streams);
    free(x->devices);
    free(x);
    free(c);
}

static void nccl_allreduce_sum(comm *c, float *const *bufs, size_t count) {
    nccl_ctx *x = c->ctx;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < c->n_ranks; r++)
        NCCL_CHECK(ncclAllReduce(bufs[r], bufs[r], count, ncclFloat, ncclSum, x->comms[r], x->streams[r]));
    NCCL_CHECK(ncclGroupEnd());
}

static const comm_i nccl_iface = {
    .version = COMM_INTERFACE_VERSION,
    .name = "nccl",
    .destroy = nccl_destroy,
    .allreduce_sum = nccl_allreduce_sum,
};

comm *comm_nccl_create(backend *const *bes, int n, char *err, size_t errlen) {
    if (n < 1) {
        snprintf(err, errlen, "NCCL: %d ranks", n);
        return NULL;
    }
    comm *c = calloc(1, sizeof(*c));
    nccl_ctx *x = calloc(1, sizeof(*x));
    if (!c || !x) goto oom;
    x->comms = calloc((size_t)n, sizeof(ncclComm_t));
    x->streams = calloc((size_t)n, sizeof(cudaStream_t));
    x->devices = calloc((size_t)n, sizeof(int));
    if (!x->comms || !x->streams || !x->devices) goto oom;
    for (int r = 0; r < n; r++) {
        if (!bes[r] || bes[r]->host_memory) {
            snprintf(err, errlen, "NCCL: rank %d is not a CUDA backend", r);
            goto fail;
        }
        x->devices[r] = backend_cuda_device(bes[r]);
        x->streams[r] = backend_cuda_stream(bes[r]);
        for (int q = 0; q < r; q++)
            if (x->devices[q] == x->devices[r]) {
                snprintf(err, errlen, "NCCL: ranks %d and %d are both on CUDA device %d (one rank per GPU)", q, r,
                         x->devices[r]);
                goto fail;
            }
    }
    ncclResult_t rc = ncclCommInitAll(x->comms, n, x->devices);
    if (rc != ncclSuccess) {
        snprintf(err, errlen, "NCCL: cannot create communicators for %d GPUs: %s", n, ncclGetErrorString(rc));
        goto fail;
    }
    c->i = &nccl_iface;
    c->ctx = x;
    c->n_ranks = n;
    return c;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (x) {
        free(x->comms);
        free(x->streams);
        free(x->devices);
    }
    free(x);
    free(c);
    return NULL;
}
