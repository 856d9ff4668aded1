/* backend.h — the compute backend interface: a versioned table of ops that the
 * llama forward pass calls (ggml-backend style). The CPU backend is always
 * built and is the reference; the CUDA backend (kernels/cuda) fills the same
 * table. Nothing here knows about models, requests or speculation.
 *
 * Size letters in shape comments: M rows (positions in a batch), K input
 * features, N output features, D model width, H heads, Hkv kv heads,
 * E head dim, B KV block size. Outputs come first in every op.
 *
 * Memory: every float/weight pointer an op takes is BACKEND memory (from alloc
 * or weight; host memory on the CPU backend, device memory on CUDA). The small
 * integer arrays (ids, pos, attn_seq and what it points to) are HOST memory:
 * the backend stages them itself. Between begin() and end() the caller must not
 * change a host array it has already passed to an op (the CUDA backend uploads
 * each one once per step and replays captured graphs).
 *
 * Threading: a backend instance is used by ONE thread at a time (the engine
 * thread); ops may fan out internally over the backend's own thread pool. */
#ifndef SPECD_BACKEND_H
#define SPECD_BACKEND_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define BACKEND_INTERFACE_VERSION 6 /* 3: KV blocks laid out (Hkv, B, E); 4: matmul_n; 5: describe; 6: F16 KV */
#define BACKEND_MATMUL_N_MAX 4

typedef struct backend backend;

/* One sequence's slice of a batched attention call. Its new rows are
 * q[row0 .. row0+n_new) and their keys/values have already been written at
 * cache positions n_past .. n_past+n_new-1. */
typedef struct {
    int row0;                /* first batch row of this sequence */
    int n_new;               /* new positions in this batch */
    int n_past;              /* cached positions every new row may attend to */
    const int32_t *blocks;   /* block table: cache position p lives in block blocks[p / B] */
    const uint8_t *mask;     /* (n_new, n_new) row i may attend new j iff mask[i*n_new+j]; NULL = causal */
    int window;              /* sliding window W: a query at position P sees only keys at positions
                              * > P - W (0 = unlimited). Positions: cache position p for past keys;
                              * for new rows n_past + i (causal) or, with a mask, n_past + (number of
                              * allowed new positions in the row) - 1, i.e. tree depth for ancestor masks */
} attn_seq;

/* The paged KV storage of one layer: block b's keys are k + b*block_stride,
 * (Hkv, B, E) row-major — each kv head's B positions side by side, so a head's
 * keys for a block are one contiguous run that attention streams (a (B, Hkv*E)
 * layout strides a head's rows by Hkv*E floats, which the prefetchers and the
 * L1 sets handle badly: 2.6x slower attention from DRAM on the CPU); same for v. */
typedef enum { KV_F32 = 0, KV_F16 = 1 } kv_type;
typedef struct {
    void *k, *v;             /* KV_F32: float; KV_F16: IEEE half (uint16_t), rounded to nearest even */
    size_t block_stride;     /* elements between consecutive blocks */
    int block_size;          /* B */
    int head_dim;            /* E */
    kv_type type;
} kv_layer_view;
/* Bytes of one KV element, and the type's name ("f32", "f16"). */
static inline size_t kv_type_size(kv_type t) { return t == KV_F16 ? 2 : 4; }
static inline const char *kv_type_name(kv_type t) { return t == KV_F16 ? "f16" : "f32"; }

typedef struct backend_i {
    int version;             /* BACKEND_INTERFACE_VERSION */
    const char *name;
    void (*destroy)(backend *be);
    /* Sizes internal scratch for matmuls of <= max_rows rows with K <= max_k and
     * attention over <= max_ctx positions, so no op allocates afterwards.
     * Returns 0 or -1. */
    int (*reserve)(backend *be, int max_rows, int max_k, int max_ctx);

    /* Backend memory, zeroed; NULL when it cannot be had. release accepts NULL. */
    void *(*alloc)(backend *be, size_t bytes);
    void (*release)(backend *be, void *p);
    /* Makes a weight tensor of (rows, cols) elements of *type, at host address
     * `host` (the GGUF mapping, which outlives the model), usable by the ops.
     * The CPU returns host itself; CUDA uploads, and may convert to a type it has
     * kernels for (updating *type). NULL when out of memory. Undo with
     * weight_release(host, returned pointer). Called from the thread that
     * runs the ops (the CPU repacks Q8_0 on its thread pool). */
    const void *(*weight)(backend *be, const void *host, int *type, int64_t rows, int64_t cols);
    void (*weight_release)(backend *be, const void *host, const void *w);
    /* Host <-> backend copies; download returns when the bytes have arrived
     * (it waits for all queued work). copy is within backend memory. */
    void (*upload)(backend *be, void *dst, const void *host, size_t bytes);
    void (*download)(backend *be, void *host, const void *src, size_t bytes);
    void (*copy)(backend *be, void *dst, const void *src, size_t bytes);
    /* Brackets one step (a forward pass). graph_key != 0 names the step's shape
     * (same ops, same sizes, same host-array sizes, same backend pointers): a
     * backend may capture the step on first sight and replay it afterwards, in
     * which case begin returns 1 and the ops between only stage their host
     * arrays. graph_key 0: plain execution. */
    int (*begin)(backend *be, uint64_t graph_key);
    void (*end)(backend *be);

    /* y (M, N) = x (M, K) . W^T, W (N, K) rows of `wtype` (ggml_type). K must be a
     * multiple of the type's block size. Reads each weight row once for all M. */
    void (*matmul)(backend *be, float *y, const float *x, const void *w, int wtype, int M, int K, int N);
    /* n matmuls of one x: y[i] (M, N[i]) = x (M, K) . W[i]^T, the same results
     * as n matmul calls (more than BACKEND_MATMUL_N_MAX run as several ops).
     * One op lets a backend share the work on x and run every matrix in one
     * dispatch (the CPU quantizes x once and wakes its threads once: q/k/v
     * and gate/up of a layer). */
    void (*matmul_n)(backend *be, int n, float *const *y, const float *x, const void *const *w, const int *wtype,
                     int M, int K, const int *N);
    /* y (M, D) = rows ids (M) of table (n, D) of `type`, dequantized. */
    void (*get_rows)(backend *be, float *y, const void *table, int type, const int32_t *ids, int M, int D);
    /* y (M, D) = x / sqrt(mean(x^2) + eps) * w (D). y may alias x. */
    void (*rmsnorm)(backend *be, float *y, const float *x, const float *w, int M, int D, float eps);
    /* In place on x (M, H*E): rotate pairs of the first n_rot dims of every head
     * by pos[m] * inv_freq[i]. neox=0: adjacent pairs (2i, 2i+1); neox=1: (i, i+n_rot/2). */
    void (*rope)(backend *be, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E, int n_rot, int neox);
    /* x (M, D) += y (M, D) */
    void (*add)(backend *be, float *x, const float *y, int M, int D);
    /* g (M, F) = silu(g) * u (M, F) */
    void (*silu_mul)(backend *be, float *g, const float *u, int M, int F);
    /* For each sequence s, writes k, v rows row0 .. row0+n_new-1 (of (M, Hkv*E))
     * at its cache positions n_past .. n_past+n_new-1. */
    void (*kv_write)(backend *be, const kv_layer_view *kv, const float *k, const float *v,
                     const attn_seq *seqs, int n_seqs, int kv_dim);
    /* out (M, H*E) = softmax(q k^T / sqrt(E) + mask) v for each sequence, over its
     * cached positions [0, n_past) plus the allowed new ones. Head h reads kv head
     * h / (H / Hkv). */
    void (*attention)(backend *be, float *out, const float *q, const kv_layer_view *kv,
                      const attn_seq *seqs, int n_seqs, int H, int Hkv, int E);

    /* Optional (NULL: the name alone). One line for people saying what runs
     * the ops, starting with the name: "cpu avx512, 16 threads",
     * "cuda NVIDIA H200, 132 SMs, 139.8 GiB". Writes at most n bytes to buf. */
    void (*describe)(backend *be, char *buf, size_t n);
} backend_i;

struct backend {
    const backend_i *i;
    void *ctx;
    int n_threads;
    int host_memory;         /* 1: backend memory is host memory (ops may take host buffers) */
};

/* Creates the CPU backend with n_threads (<= 0: all online CPUs). Aborts on
 * failure (start-up path). Caller owns it; free with backend_destroy. */
backend *backend_cpu_create(int n_threads);
void backend_destroy(backend *be); /* accepts NULL */
/* The backend's one-line description (backend_i.describe, or its name) into buf
 * (n bytes, NUL-terminated). */
void backend_describe(backend *be, char *buf, size_t n);

/* Which backend to make: AUTO is CUDA when this build has it and a GPU is
 * present, else the CPU. */
typedef enum { BACKEND_AUTO = 0, BACKEND_CPU = 1, BACKEND_CUDA = 2 } backend_kind;
/* Makes a backend of `kind` (threads for the CPU, device for CUDA). Returns NULL
 * with the reason in err (CUDA asked for but not built or no GPU). */
backend *backend_create(backend_kind kind, int device, int threads, char *err, size_t errlen);

/* Creates the CUDA backend on `device` (builds with -Dcuda; see
 * kernels/cuda/cuda_backend.h). Returns NULL with the reason in err when specd
 * was built without CUDA, no GPU is present, or the device cannot be set up. */
backend *backend_cuda_create(int device, char *err, size_t errlen);
/* 1 when this build has the CUDA backend compiled in. */
int backend_cuda_built(void);
/* Number of usable CUDA devices (0 without CUDA or GPU). */
int backend_cuda_devices(void);

/* Bytes the CPU backend has handed out through alloc(), and a cap on them
 * (0 = none): allocations past it fail as they would on a full device, which
 * is how tests exercise out-of-memory paths. */
size_t backend_cpu_memory_used(backend *be);
void backend_cpu_limit_memory(backend *be, size_t bytes);

/* The SIMD path the CPU kernels picked at run time: "avx512", "avx2" or
 * "generic". SPECD_SIMD=generic|avx2|avx512 in the environment forces a path
 * (for tests of the portable fallback); an unsupported request falls back. */
const char *backend_cpu_simd(void);

/* Lends n CPU cores (0: none) from the calling thread to work it runs outside
 * the backends (the server's background trainer): until it lends 0, the CPU
 * backends' short ops leave that many cores free (tp_lend in
 * kernels/cpu/threadpool.h). A later call replaces the earlier lend. */
void backend_cpu_lend(int n);

/* Per-op wall time of the CPU backend: while on, every op is timed (a clock
 * read on each side, well under a microsecond). The report prints
 * "op calls total_ms mean_us share" rows, with the weight bytes matmul read
 * and its rate, accumulated since profiling was turned on, and clears them. */
void backend_cpu_profile(backend *be, int on);
void backend_cpu_profile_report(backend *be, FILE *out);

/* The table both backends' profile reports print: a header, then one
 * "op calls total_ms mean_us share" row for each of the n ops that was
 * called, its share being of the ops' summed time. */
void backend_profile_table(FILE *out, const char *const *names, const double *ms, const long long *calls, int n);

#endif
