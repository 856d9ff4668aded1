/* cuda_backend.c — the CUDA implementation of the backend table.
 *
 * Weights are uploaded once at load (F32/F16/BF16 kept, Q8_0 repacked into a
 * split layout for aligned loads, other quant types dequantized to F16 on the
 * host). Matmuls of <= 8 rows run the memory-bound gemv kernel; larger ones go
 * through cuBLAS (bf16/f16 operands, fp32 accumulation; Q8_0 weights are
 * dequantized to a bf16 scratch first; F32 weights use SGEMM).
 *
 * Host arrays (token ids, positions, sequence descriptors with their block
 * tables and masks) are staged: packed into a pinned arena and copied to its
 * device twin, once per step per array. Because the layout of a step's
 * staging depends only on its shape, a step seen twice under the same
 * graph_key is captured as a CUDA graph; later steps of that shape only stage
 * their arrays (the graph's copy nodes read the arena) and launch the graph —
 * the draft model's γ autoregressive steps replay one graph. */
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/ops.h"
#include "kernels/ggml_type.h"
#include "kernels/half.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BYTES (8u << 20)
#define MAX_STAGED 16
#define MAX_GRAPHS 64
#define SEEN_SLOTS 256
#define MAX_PROF_EVENTS 8192

void cu_die(const char *file, int line, const char *what, const char *msg) {
    fprintf(stderr, "%s:%d: CUDA error in %s: %s\n", file, line, what, msg);
    abort();
}

/* cuBLAS is opened (dlopen) when the first CUDA backend is created instead of
 * being linked: libcublas loads libcublasLt (~540 MB), whose load-time
 * relocations cost every specd process about 0.4 s of CPU and 200 MB of
 * memory before main() even where no GPU is used (specd tokenize, --help, a
 * CPU server, each test that starts specd). The seven functions used: */
static struct {
    bool ok;
    char err[256];
    __typeof__(cublasCreate) *create;
    __typeof__(cublasDestroy) *destroy;
    __typeof__(cublasSetStream) *set_stream;
    __typeof__(cublasSetWorkspace) *set_workspace;
    __typeof__(cublasSgemm) *sgemm;
    __typeof__(cublasGemmEx) *gemm_ex;
    __typeof__(cublasGetStatusString) *status_string;
} cb;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

#define CB_STR_(x) #x
#define CB_STR(x) CB_STR_(x) /* cublasCreate -> "cublasCreate_v2" (cublas_v2.h's names) */

static void cb_open(void) {
    const char *soname = "libcublas.so." CB_STR(CUBLAS_VER_MAJOR);
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
#ifdef SPECD_CUDA_LIBDIR
    if (!h) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", SPECD_CUDA_LIBDIR, soname);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (!h) {
        snprintf(cb.err, sizeof(cb.err), "%s", dlerror());
        return;
    }
#define CB_SYM(field, fn)                                                                                      \
    if (!(*(void **)&cb.field = dlsym(h, CB_STR(fn)))) {                                                       \
        snprintf(cb.err, sizeof(cb.err), "%s has no %s", soname, CB_STR(fn));                                 \
        return;                                                                                                \
    }
    CB_SYM(create, cublasCreate)
    CB_SYM(destroy, cublasDestroy)
    CB_SYM(set_stream, cublasSetStream)
    CB_SYM(set_workspace, cublasSetWorkspace)
    CB_SYM(sgemm, cublasSgemm)
    CB_SYM(gemm_ex, cublasGemmEx)
    CB_SYM(status_string, cublasGetStatusString)
#undef CB_SYM
    cb.ok = true;
}

const char *backend_cuda_blas_load(void) {
    pthread_once(&cb_once, cb_open);
    return cb.ok ? NULL : cb.err;
}

#define CUBLAS_CHECK(call)                                                                                     \
    do {                                                                                                       \
        cublasStatus_t cb_s_ = (call);                                                                         \
        if (cb_s_ != CUBLAS_STATUS_SUCCESS) cu_die(__FILE__, __LINE__, #call, cb.status_string(cb_s_));        \
    } while (0)

typedef struct {
    const void *host;
    size_t bytes;
    void *dev;
} staged;

typedef struct {
    const cu_seq *seqs;     /* device */
    const int32_t *row_seq; /* device */
} staged_seqs;

typedef struct {
    uint64_t key;
    cudaGraphExec_t exec;
    uint64_t last_use;
} graph_entry;

typedef struct {
    const void *w;
    int64_t rows, cols;
    int type;
    size_t bytes;           /* device bytes of the upload */
} weight_entry;

typedef enum { OP_MATMUL, OP_GET_ROWS, OP_RMSNORM, OP_ROPE, OP_ADD, OP_SILU_MUL, OP_KV_WRITE, OP_ATTENTION,
               OP_COPY, OP_COUNT } op_id;
static const char *op_names[OP_COUNT] = {"matmul", "get_rows", "rmsnorm", "rope", "add", "silu_mul", "kv_write",
                                         "attention", "copy"};

typedef struct {
    int device;
    cudaStream_t st;
    cublasHandle_t blas;
    void *blas_ws;
    struct cudaDeviceProp prop;
    /* scratch */
    void *xh;               /* (max_rows, max_k) 16-bit activations for cuBLAS */
    size_t xh_bytes;
    void *wdq;              /* bf16 dequantized Q8_0 weight for cuBLAS */
    size_t wdq_bytes;
    int max_ctx;
    /* staging */
    uint8_t *pin, *dev_arena;
    size_t arena_used;
    staged st_tab[MAX_STAGED];
    int n_staged;
    const attn_seq *seq_host;  /* attn_seq array staged this step */
    staged_seqs seq_dev;
    /* graphs */
    bool graphs_on;
    int mode;               /* 0 eager, 1 capturing, 2 replaying */
    uint64_t key;
    graph_entry graphs[MAX_GRAPHS];
    int n_graphs;
    uint64_t seen[SEEN_SLOTS];
    uint64_t clock;
    long long replays, captures;
    /* weights */
    weight_entry *wt;
    int n_wt, cap_wt;
    size_t weight_bytes;
    /* profiling */
    bool prof;
    cudaEvent_t ev[MAX_PROF_EVENTS];
    op_id ev_op[MAX_PROF_EVENTS / 2];
    int n_ev;
    double prof_ms[OP_COUNT];
    long long prof_calls[OP_COUNT];
} cu_ctx;

static cu_ctx *ctx_of(backend *be) { return be->ctx; }

/* ---- profiling ---------------------------------------------------------- */

static void prof_start(cu_ctx *c, op_id op) {
    if (!c->prof || c->mode != 0 || c->n_ev + 2 > MAX_PROF_EVENTS) return;
    c->ev_op[c->n_ev / 2] = op;
    CU_CHECK(cudaEventRecord(c->ev[c->n_ev++], c->st));
}

static void prof_stop(cu_ctx *c) {
    if (!c->prof || c->mode != 0 || c->n_ev % 2 == 0) return;
    CU_CHECK(cudaEventRecord(c->ev[c->n_ev++], c->st));
}

static void prof_collect(cu_ctx *c) {
    if (!c->n_ev) return;
    CU_CHECK(cudaStreamSynchronize(c->st));
    for (int i = 0; i + 1 < c->n_ev; i += 2) {
        float ms = 0;
        CU_CHECK(cudaEventElapsedTime(&ms, c->ev[i], c->ev[i + 1]));
        c->prof_ms[c->ev_op[i / 2]] += ms;
        c->prof_calls[c->ev_op[i / 2]]++;
    }
    c->n_ev = 0;
}

/* ---- staging ------------------------------------------------------------ */

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Space in the arena for `bytes`; the pinned half is written by the caller. */
static size_t arena_take(cu_ctx *c, size_t bytes) {
    size_t off = c->arena_used;
    if (off + align16(bytes) > ARENA_BYTES) cu_die(__FILE__, __LINE__, "stage", "staging arena full for one step");
    c->arena_used += align16(bytes);
    return off;
}

static void arena_send(cu_ctx *c, size_t off, size_t bytes) {
    if (c->mode == 2 || !bytes) return; /* replay: the graph's copy node moves it */
    CU_CHECK(cudaMemcpyAsync(c->dev_arena + off, c->pin + off, bytes, cudaMemcpyHostToDevice, c->st));
}

/* Device copy of a host array, staged once per step. */
static void *stage(cu_ctx *c, const void *host, size_t bytes) {
    for (int i = 0; i < c->n_staged; i++)
        if (c->st_tab[i].host == host && c->st_tab[i].bytes == bytes) return c->st_tab[i].dev;
    size_t off = arena_take(c, bytes);
    memcpy(c->pin + off, host, bytes);
    arena_send(c, off, bytes);
    if (c->n_staged < MAX_STAGED) c->st_tab[c->n_staged++] = (staged){host, bytes, c->dev_arena + off};
    return c->dev_arena + off;
}

/* Device descriptors for a step's sequences: cu_seq (n_seqs), row_seq (M),
 * then each block table (fixed capacity, so the layout depends only on the
 * shape) and each mask, in one copy. */
static staged_seqs stage_seqs(cu_ctx *c, const attn_seq *seqs, int n_seqs, int block_size) {
    if (c->seq_host == seqs) return c->seq_dev;
    int M = 0;
    for (int s = 0; s < n_seqs; s++) M += seqs[s].n_new;
    int cap = (c->max_ctx + block_size - 1) / block_size + 1;
    size_t bytes = align16((size_t)n_seqs * sizeof(cu_seq)) + align16((size_t)M * 4);
    for (int s = 0; s < n_seqs; s++)
        bytes += align16((size_t)cap * 4) + (seqs[s].mask ? align16((size_t)seqs[s].n_new * seqs[s].n_new) : 0);
    size_t off = arena_take(c, bytes);
    uint8_t *ph = c->pin + off, *pd = c->dev_arena + off;
    cu_seq *cs = (cu_seq *)ph;
    int32_t *rs = (int32_t *)(ph + align16((size_t)n_seqs * sizeof(cu_seq)));
    size_t at = align16((size_t)n_seqs * sizeof(cu_seq)) + align16((size_t)M * 4);
    for (int s = 0; s < n_seqs; s++) {
        const attn_seq *a = &seqs[s];
        int need = (a->n_past + a->n_new + block_size - 1) / block_size;
        if (need > cap) cu_die(__FILE__, __LINE__, "stage_seqs", "sequence longer than the reserved context");
        memcpy(ph + at, a->blocks, (size_t)need * 4);
        cs[s] = (cu_seq){a->row0, a->n_new, a->n_past, a->window, (const int32_t *)(pd + at), NULL};
        at += align16((size_t)cap * 4);
        if (a->mask) {
            memcpy(ph + at, a->mask, (size_t)a->n_new * a->n_new);
            cs[s].mask = pd + at;
            at += align16((size_t)a->n_new * a->n_new);
        }
        for (int i = 0; i < a->n_new; i++) rs[a->row0 + i] = s;
    }
    arena_send(c, off, bytes);
    c->seq_host = seqs;
    c->seq_dev = (staged_seqs){(const cu_seq *)pd, (const int32_t *)(pd + align16((size_t)n_seqs * sizeof(cu_seq)))};
    return c->seq_dev;
}

/* Captured graphs hold device pointers: any release may leave one dangling
 * (a new model could even reuse the old one's host addresses, and so its
 * graph key), so every release drops them all. Releases happen at teardown. */
static void graphs_clear(cu_ctx *c) {
    for (int i = 0; i < c->n_graphs; i++) CU_CHECK(cudaGraphExecDestroy(c->graphs[i].exec));
    c->n_graphs = 0;
    memset(c->seen, 0, sizeof(c->seen));
}

/* ---- memory ------------------------------------------------------------- */

static void *cu_alloc(backend *be, size_t bytes) {
    cu_ctx *c = ctx_of(be);
    void *p = NULL;
    CU_CHECK(cudaSetDevice(c->device));
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free allocation error */
        return NULL;
    }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, c->st));
    CU_CHECK(cudaStreamSynchronize(c->st));
    return p;
}

static void cu_release(backend *be, void *p) {
    if (!p) return;
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaStreamSynchronize(c->st));
    graphs_clear(c);
    CU_CHECK(cudaFree(p));
}

static const weight_entry *weight_find(cu_ctx *c, const void *w) {
    for (int i = c->n_wt - 1; i >= 0; i--)
        if (c->wt[i].w == w) return &c->wt[i];
    return NULL;
}

static const void *cu_weight(backend *be, const void *host, int *type, int64_t rows, int64_t cols) {
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaSetDevice(c->device));
    int t = *type;
    size_t n = (size_t)rows * cols;
    void *staging = NULL;
    const void *src = host;
    size_t bytes;
    if (t == GGML_TYPE_F32) bytes = n * 4;
    else if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) bytes = n * 2;
    else if (t == GGML_TYPE_Q8_0) { /* split: quants then scales */
        bytes = n + n / 32 * 2;
        uint8_t *s = malloc(bytes);
        if (!s) return NULL;
        const uint8_t *blk = host;
        uint16_t *sc = (uint16_t *)(s + n);
        for (size_t b = 0; b < n / 32; b++, blk += 34) {
            memcpy(&sc[b], blk, 2);
            memcpy(s + b * 32, blk + 2, 32);
        }
        staging = s;
        src = s;
    } else { /* no kernel for this quant type: dequantize to F16 on the host */
        bytes = n * 2;
        uint16_t *s = malloc(bytes);
        float *row = malloc((size_t)cols * sizeof(float));
        if (!s || !row) {
            free(s);
            free(row);
            return NULL;
        }
        size_t rb = ggml_row_size(t, (uint64_t)cols);
        for (int64_t r = 0; r < rows; r++) {
            /* the loader admits only the types the reference converts */
            if (!ggml_dequantize_row(row, t, (const uint8_t *)host + rb * r, (uint64_t)cols)) abort();
            for (int64_t k = 0; k < cols; k++) s[r * cols + k] = f32_to_fp16(row[k]);
        }
        free(row);
        staging = s;
        src = s;
        t = GGML_TYPE_F16;
    }
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) {
        cudaGetLastError();
        free(staging);
        return NULL;
    }
    CU_CHECK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    free(staging);
    if (t == GGML_TYPE_Q8_0 && n * 2 > c->wdq_bytes) { /* cuBLAS path dequantizes into this */
        if (c->wdq) CU_CHECK(cudaFree(c->wdq));
        c->wdq = NULL;
        c->wdq_bytes = 0;
        if (cudaMalloc(&c->wdq, n * 2) != cudaSuccess) {
            cudaGetLastError();
            CU_CHECK(cudaFree(d));
            return NULL;
        }
        c->wdq_bytes = n * 2;
    }
    if (c->n_wt == c->cap_wt) {
        int cap = c->cap_wt ? c->cap_wt * 2 : 256;
        weight_entry *e = realloc(c->wt, (size_t)cap * sizeof(*e));
        if (!e) {
            CU_CHECK(cudaFree(d));
            return NULL;
        }
        c->wt = e;
        c->cap_wt = cap;
    }
    c->wt[c->n_wt++] = (weight_entry){d, rows, cols, t, bytes};
    c->weight_bytes += bytes;
    *type = t;
    return d;
}

static void cu_weight_release(backend *be, const void *host, const void *w) {
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaStreamSynchronize(c->st));
    graphs_clear(c);
    for (int i = 0; i < c->n_wt; i++)
        if (c->wt[i].w == w) {
            c->weight_bytes -= c->wt[i].bytes;
            c->wt[i] = c->wt[--c->n_wt];
            break;
        }
    CU_CHECK(cudaFree((void *)w));
}

static void cu_upload(backend *be, void *dst, const void *host, size_t bytes) {
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->st));
    CU_CHECK(cudaStreamSynchronize(c->st));
}

static void cu_download(backend *be, void *host, const void *src, size_t bytes) {
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->st));
    CU_CHECK(cudaStreamSynchronize(c->st));
}

static void cu_copy(backend *be, void *dst, const void *src, size_t bytes) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 2) return;
    prof_start(c, OP_COPY);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->st));
    prof_stop(c);
}

static int cu_reserve(backend *be, int max_rows, int max_k, int max_ctx) {
    cu_ctx *c = ctx_of(be);
    size_t need = (size_t)max_rows * max_k * 2;
    if (max_ctx > c->max_ctx) c->max_ctx = max_ctx;
    if (need <= c->xh_bytes) return 0;
    if (c->xh) CU_CHECK(cudaFree(c->xh));
    c->xh = NULL;
    c->xh_bytes = 0;
    if (cudaMalloc(&c->xh, need) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    c->xh_bytes = need;
    return 0;
}

/* ---- steps and graphs --------------------------------------------------- */

static graph_entry *graph_find(cu_ctx *c, uint64_t key) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].key == key) return &c->graphs[i];
    return NULL;
}

static int cu_begin(backend *be, uint64_t key) {
    cu_ctx *c = ctx_of(be);
    CU_CHECK(cudaSetDevice(c->device)); /* the engine thread is not the one that created the backend */
    /* the previous step may still read the pinned arena */
    CU_CHECK(cudaStreamSynchronize(c->st));
    c->arena_used = 0;
    c->n_staged = 0;
    c->seq_host = NULL;
    c->mode = 0;
    c->key = key;
    if (!key || !c->graphs_on || c->prof) return 0;
    graph_entry *g = graph_find(c, key);
    if (g) {
        g->last_use = ++c->clock;
        c->mode = 2;
        return 1;
    }
    uint64_t *slot = &c->seen[key % SEEN_SLOTS];
    if (*slot != key) { /* first sight: run eagerly, capture next time */
        *slot = key;
        return 0;
    }
    CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
    c->mode = 1;
    return 0;
}

static void cu_end(backend *be) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 1) {
        cudaGraph_t graph;
        CU_CHECK(cudaStreamEndCapture(c->st, &graph));
        cudaGraphExec_t exec;
        CU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CU_CHECK(cudaGraphDestroy(graph));
        graph_entry *g;
        if (c->n_graphs < MAX_GRAPHS) {
            g = &c->graphs[c->n_graphs++];
        } else { /* evict the least recently used */
            g = &c->graphs[0];
            for (int i = 1; i < c->n_graphs; i++)
                if (c->graphs[i].last_use < g->last_use) g = &c->graphs[i];
            CU_CHECK(cudaGraphExecDestroy(g->exec));
        }
        *g = (graph_entry){c->key, exec, ++c->clock};
        c->captures++;
        CU_CHECK(cudaGraphLaunch(exec, c->st));
    } else if (c->mode == 2) {
        graph_entry *g = graph_find(c, c->key);
        c->replays++;
        CU_CHECK(cudaGraphLaunch(g->exec, c->st));
    }
    c->mode = 0;
    prof_collect(c);
}

/* ---- ops ---------------------------------------------------------------- */

static void cu_matmul(backend *be, float *y, const float *x, const void *w, int wtype, int M, int K, int N) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 2 || M <= 0) return;
    prof_start(c, OP_MATMUL);
    if (M <= CU_GEMV_MAX_M && K % 8 == 0) {
        cu_gemv(c->st, y, x, w, wtype, M, K, N);
        prof_stop(c);
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    if (wtype == GGML_TYPE_F32) {
        CUBLAS_CHECK(cb.sgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, x, K, &zero, y, N));
    } else {
        int ht = wtype == GGML_TYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
        const void *wm = w;
        if (wtype == GGML_TYPE_Q8_0) {
            if ((size_t)N * K * 2 > c->wdq_bytes) cu_die(__FILE__, __LINE__, "matmul", "Q8_0 scratch too small");
            cu_q8_to_bf16(c->st, c->wdq, w, N, K);
            wm = c->wdq;
        }
        if ((size_t)M * K * 2 > c->xh_bytes) cu_die(__FILE__, __LINE__, "matmul", "more rows than reserved");
        cu_f32_to_half(c->st, c->xh, ht, x, (int64_t)M * K);
        cudaDataType dt = ht == GGML_TYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
        CUBLAS_CHECK(cb.gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, wm, dt, K, c->xh, dt, K, &zero, y,
                                  CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    prof_stop(c);
}

/* cuBLAS and the gemv kernels take one matrix at a time; the GPU overlaps
 * nothing more by fusing them here. */
static void cu_matmul_n(backend *be, int n, float *const *y, const float *x, const void *const *w, const int *wtype,
                        int M, int K, const int *N) {
    for (int i = 0; i < n; i++) cu_matmul(be, y[i], x, w[i], wtype[i], M, K, N[i]);
}

static void cu_get_rows_op(backend *be, float *y, const void *table, int type, const int32_t *ids, int M, int D) {
    cu_ctx *c = ctx_of(be);
    const int32_t *dids = stage(c, ids, (size_t)M * 4);
    if (c->mode == 2) return;
    const weight_entry *we = weight_find(c, table);
    if (type == GGML_TYPE_Q8_0 && !we) cu_die(__FILE__, __LINE__, "get_rows", "Q8_0 table not uploaded by weight()");
    prof_start(c, OP_GET_ROWS);
    cu_get_rows(c->st, y, table, type, dids, M, D, we ? (int)we->rows : 0);
    prof_stop(c);
}

static void cu_rmsnorm_op(backend *be, float *y, const float *x, const float *w, int M, int D, float eps) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 2) return;
    prof_start(c, OP_RMSNORM);
    cu_rmsnorm(c->st, y, x, w, M, D, eps);
    prof_stop(c);
}

static void cu_rope_op(backend *be, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E,
                       int n_rot, int neox) {
    cu_ctx *c = ctx_of(be);
    const int32_t *dpos = stage(c, pos, (size_t)M * 4);
    if (c->mode == 2) return;
    prof_start(c, OP_ROPE);
    cu_rope(c->st, x, dpos, inv_freq, M, H, E, n_rot, neox);
    prof_stop(c);
}

static void cu_add_op(backend *be, float *x, const float *y, int M, int D) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 2) return;
    prof_start(c, OP_ADD);
    cu_add(c->st, x, y, (int64_t)M * D);
    prof_stop(c);
}

static void cu_silu_mul_op(backend *be, float *g, const float *u, int M, int F) {
    cu_ctx *c = ctx_of(be);
    if (c->mode == 2) return;
    prof_start(c, OP_SILU_MUL);
    cu_silu_mul(c->st, g, u, (int64_t)M * F);
    prof_stop(c);
}

static int rows_of(const attn_seq *seqs, int n_seqs) {
    int M = 0;
    for (int s = 0; s < n_seqs; s++) M += seqs[s].n_new;
    return M;
}

static void cu_kv_write_op(backend *be, const kv_layer_view *kv, const float *k, const float *v, const attn_seq *seqs,
                           int n_seqs, int kv_dim) {
    cu_ctx *c = ctx_of(be);
    staged_seqs ss = stage_seqs(c, seqs, n_seqs, kv->block_size);
    if (c->mode == 2) return;
    prof_start(c, OP_KV_WRITE);
    cu_kv_write(c->st, kv->k, kv->v, kv->type == KV_F16, kv->block_stride, kv->block_size, k, v, ss.seqs, ss.row_seq,
                rows_of(seqs, n_seqs), kv_dim, kv->head_dim);
    prof_stop(c);
}

static void cu_attention_op(backend *be, float *out, const float *q, const kv_layer_view *kv, const attn_seq *seqs,
                            int n_seqs, int H, int Hkv, int E) {
    cu_ctx *c = ctx_of(be);
    staged_seqs ss = stage_seqs(c, seqs, n_seqs, kv->block_size);
    if (c->mode == 2) return;
    prof_start(c, OP_ATTENTION);
    cu_attention(c->st, out, q, kv->k, kv->v, kv->type == KV_F16, kv->block_stride, kv->block_size, ss.seqs, ss.row_seq,
                 rows_of(seqs, n_seqs), H, Hkv, E);
    prof_stop(c);
}

static void cu_destroy(backend *be) {
    cu_ctx *c = ctx_of(be);
    cudaStreamSynchronize(c->st);
    for (int i = 0; i < c->n_graphs; i++) cudaGraphExecDestroy(c->graphs[i].exec);
    for (int i = 0; i < MAX_PROF_EVENTS; i++) cudaEventDestroy(c->ev[i]);
    cb.destroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->xh);
    cudaFree(c->wdq);
    cudaFree(c->dev_arena);
    cudaFreeHost(c->pin);
    cudaStreamDestroy(c->st);
    free(c->wt);
    free(c);
    free(be);
}

static void cu_describe(backend *be, char *buf, size_t n) {
    const cu_ctx *c = ctx_of(be);
    snprintf(buf, n, "cuda %s, %d SMs, %.1f GiB", c->prop.name, c->prop.multiProcessorCount,
             c->prop.totalGlobalMem / 1073741824.0);
}

static const backend_i cuda_iface = {
    .version = BACKEND_INTERFACE_VERSION,
    .name = "cuda",
    .destroy = cu_destroy,
    .reserve = cu_reserve,
    .alloc = cu_alloc,
    .release = cu_release,
    .weight = cu_weight,
    .weight_release = cu_weight_release,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .begin = cu_begin,
    .end = cu_end,
    .matmul = cu_matmul,
    .matmul_n = cu_matmul_n,
    .get_rows = cu_get_rows_op,
    .rmsnorm = cu_rmsnorm_op,
    .rope = cu_rope_op,
    .add = cu_add_op,
    .silu_mul = cu_silu_mul_op,
    .kv_write = cu_kv_write_op,
    .attention = cu_attention_op,
    .describe = cu_describe,
};

int backend_cuda_built(void) { return 1; }

int backend_cuda_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

#define SETUP(call)                                                                                            \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            snprintf(err, errlen, "CUDA device %d: %s failed: %s", device, #call, cudaGetErrorString(e_));    \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

backend *backend_cuda_create(int device, char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no CUDA GPU is available (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist (this machine has %d)", device, n);
        return NULL;
    }
    backend *be = calloc(1, sizeof(*be));
    cu_ctx *c = calloc(1, sizeof(*c));
    if (!be || !c) {
        snprintf(err, errlen, "out of memory");
        free(be);
        free(c);
        return NULL;
    }
    c->device = device;
    c->graphs_on = !getenv("SPECD_CUDA_GRAPHS") || strcmp(getenv("SPECD_CUDA_GRAPHS"), "0") != 0;
    SETUP(cudaSetDevice(device));
    SETUP(cudaGetDeviceProperties(&c->prop, device));
    SETUP(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    SETUP(cudaHostAlloc((void **)&c->pin, ARENA_BYTES, cudaHostAllocDefault));
    SETUP(cudaMalloc((void **)&c->dev_arena, ARENA_BYTES));
    SETUP(cudaMalloc(&c->blas_ws, 32u << 20));
    for (int i = 0; i < MAX_PROF_EVENTS; i++) SETUP(cudaEventCreate(&c->ev[i]));
    const char *blas_err = backend_cuda_blas_load();
    if (blas_err) {
        snprintf(err, errlen, "CUDA device %d: cuBLAS cannot be loaded: %s", device, blas_err);
        goto fail;
    }
    if (cb.create(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "CUDA device %d: cuBLAS cannot be initialised", device);
        goto fail;
    }
    CUBLAS_CHECK(cb.set_stream(c->blas, c->st));
    CUBLAS_CHECK(cb.set_workspace(c->blas, c->blas_ws, 32u << 20)); /* no allocation inside graph capture */
    be->i = &cuda_iface;
    be->ctx = c;
    be->n_threads = 1;
    be->host_memory = 0;
    return be;
fail:
    cudaGetLastError();
    if (c->st) cudaStreamDestroy(c->st);
    if (c->pin) cudaFreeHost(c->pin);
    cudaFree(c->dev_arena);
    cudaFree(c->blas_ws);
    free(c);
    free(be);
    return NULL;
}

/* ---- extras (cuda_backend.h) -------------------------------------------- */

void backend_cuda_info(backend *be, cuda_info *out) {
    cu_ctx *c = ctx_of(be);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", c->prop.name);
    out->sm_count = c->prop.multiProcessorCount;
    out->mem_gib = c->prop.totalGlobalMem / 1073741824.0;
    out->weight_gib = c->weight_bytes / 1073741824.0;
    out->graphs = c->n_graphs;
    out->graph_replays = c->replays;
    out->graph_captures = c->captures;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

double backend_cuda_copy_gbs(backend *be, size_t bytes, int reps) {
    cu_ctx *c = ctx_of(be);
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(a);
        return 0;
    }
    CU_CHECK(cudaMemsetAsync(a, 1, bytes, c->st));
    float ms[64];
    if (reps > 64) reps = 64;
    for (int r = -2; r < reps; r++) {
        CU_CHECK(cudaEventRecord(c->ev[0], c->st));
        CU_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, c->st));
        CU_CHECK(cudaEventRecord(c->ev[1], c->st));
        CU_CHECK(cudaEventSynchronize(c->ev[1]));
        if (r >= 0) CU_CHECK(cudaEventElapsedTime(&ms[r], c->ev[0], c->ev[1]));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    CU_CHECK(cudaFree(a));
    CU_CHECK(cudaFree(b));
    return 2.0 * bytes / (ms[reps / 2] * 1e-3) / 1e9;
}

void backend_cuda_profile(backend *be, int on) {
    cu_ctx *c = ctx_of(be);
    c->prof = on != 0;
    memset(c->prof_ms, 0, sizeof(c->prof_ms));
    memset(c->prof_calls, 0, sizeof(c->prof_calls));
}

void backend_cuda_profile_report(backend *be, FILE *out) {
    cu_ctx *c = ctx_of(be);
    prof_collect(c);
    backend_profile_table(out, op_names, c->prof_ms, c->prof_calls, OP_COUNT);
    memset(c->prof_ms, 0, sizeof(c->prof_ms));
    memset(c->prof_calls, 0, sizeof(c->prof_calls));
}

void backend_cuda_graphs(backend *be, int on) { ctx_of(be)->graphs_on = on != 0; }

int backend_cuda_device(backend *be) { return ctx_of(be)->device; }
void *backend_cuda_stream(backend *be) { return ctx_of(be)->st; }
