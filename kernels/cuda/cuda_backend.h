/* cuda_backend.h — what the CUDA backend offers beyond the backend table
 * (kernels/backend.h): device facts, the device's measured copy bandwidth, and
 * per-op timing with CUDA events for `specd bench`. Every function takes a
 * backend made by backend_cuda_create. */
#ifndef SPECD_CUDA_BACKEND_H
#define SPECD_CUDA_BACKEND_H

#include "kernels/backend.h"

#include <stdio.h>

typedef struct {
    char name[256];
    int sm_count;
    double mem_gib;           /* total device memory */
    double weight_gib;        /* weight bytes uploaded so far */
    int graphs;               /* captured step graphs held */
    long long graph_replays;  /* steps replayed from a graph */
    long long graph_captures; /* steps captured */
} cuda_info;

void backend_cuda_info(backend *be, cuda_info *out);
/* Device-to-device copy bandwidth, counting bytes read plus written (GB/s),
 * median of reps copies of `bytes`. */
double backend_cuda_copy_gbs(backend *be, size_t bytes, int reps);
/* Per-op timing: while on, every op of an eager step is bracketed by CUDA
 * events (graphs are off, so the figures are launch-by-launch). */
void backend_cuda_profile(backend *be, int on);
/* Prints "op calls total_ms mean_us" rows accumulated since profiling was
 * turned on, and clears them. */
void backend_cuda_profile_report(backend *be, FILE *out);
/* Graph capture of repeated step shapes on (default) or off. */
void backend_cuda_graphs(backend *be, int on);
/* The device and the stream (a cudaStream_t) the backend's ops run on, for
 * collectives that must be ordered with them (kernels/cuda/nccl_comm.c). */
int backend_cuda_device(backend *be);
void *backend_cuda_stream(backend *be);
/* Opens cuBLAS (once; it is not linked, see cuda_backend.c): NULL when its
 * functions are there, else why not. backend_cuda_create calls it; needs no GPU. */
const char *backend_cuda_blas_load(void);

#endif
