/* cpu_backend.c — the CPU implementation of the backend table: fans the
 * kernels of matmul.c and ops.c out over a persistent thread pool. */
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/warena.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/ggml_type.h"
#include "kernels/cpu/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum { P_MATMUL, P_ATTENTION, P_GET_ROWS, P_RMSNORM, P_ROPE, P_ADD, P_SILU_MUL, P_KV_WRITE, P_COPY, P_COUNT } prof_op;
static const char *const prof_names[P_COUNT] = {"matmul", "attention", "get_rows", "rmsnorm", "rope",
                                                "add", "silu_mul", "kv_write", "copy"};

#define ROPE_MAX_HALF 512 /* n_rot <= 1024 (checked by the model loader) */
#define ROPE_RESERVE_HALF 64 /* reserve() sizes the tables for n_rot <= 128 */

typedef struct {
    threadpool *tp;
    warena *wa;             /* the repacked weights (huge pages) */
    simd_level simd;
    int n_threads;
    float **scratch;        /* (n_threads) each scratch_floats */
    size_t scratch_floats;
    uint8_t *xq;            /* quantized activations of the integer-dot matmuls */
    size_t xq_bytes;
    uint8_t **xq_t;         /* (n_threads) each thread's own copy for calls of few rows */
    size_t xq_t_bytes;
    uint64_t *xq_t_gen;     /* (n_threads) the call whose x each copy holds */
    uint64_t xq_gen;        /* calls that used the copies so far */
    size_t mem_used, mem_limit; /* bytes from alloc(); limit 0 = none */
    int prof;                   /* backend_cpu_profile */
    double prof_ms[P_COUNT];
    long long prof_calls[P_COUNT];
    double prof_mm_bytes;       /* weight bytes read by timed matmuls */
    /* RoPE tables of the last call, reused while positions and frequencies
     * repeat (every q and k of a forward pass: 2 * n_layer calls) */
    float *rope_cs, *rope_sn;   /* (rope_cap) each */
    int32_t *rope_pos;          /* (rope_rows) */
    size_t rope_cap;
    int rope_rows;
    float rope_freq[ROPE_MAX_HALF];
    int rope_M, rope_half;      /* rope_M 0: nothing cached */
} cpu_ctx;

static cpu_ctx *ctx_of(backend *be) { return be->ctx; }

/* Brackets an op's body: PROF_BEGIN(be) ... PROF_END(op). */
#define PROF_BEGIN(be)                                                                              \
    cpu_ctx *pc_ = ctx_of(be);                                                                      \
    double pt0_ = pc_->prof ? clock_now_ms() : 0.0;
#define PROF_END(op)                                                                                \
    if (pc_->prof) {                                                                                \
        pc_->prof_ms[op] += clock_now_ms() - pt0_;                                                      \
        pc_->prof_calls[op]++;                                                                      \
    }

static void cpu_destroy(backend *be) {
    cpu_ctx *c = ctx_of(be);
    tp_destroy(c->tp);
    warena_destroy(c->wa);
    free(c->xq);
    free(c->rope_cs), free(c->rope_sn), free(c->rope_pos);
    for (int i = 0; i < c->n_threads; i++) free(c->scratch[i]), free(c->xq_t[i]);
    free(c->scratch), free(c->xq_t), free(c->xq_t_gen);
    free(c);
    free(be);
}

/* Ops of at least this many multiply-adds (about a millisecond on one core)
 * use every thread even while the pool's contention guard runs jobs on the
 * caller alone (threadpool.h: tp_run_wide). */
#define TP_WIDE_WORK 1e8

/* Calls of fewer rows than this round x on every thread (see cpu_matmul_n_run). */
#define XQ_OWN_ROWS 16

/* Grows the quantized-activation buffers to hold rows x K: the shared one, and
 * for fewer than XQ_OWN_ROWS rows each thread's own. */
static int cpu_reserve_xq(cpu_ctx *c, int rows, int K) {
    size_t rb = mm_qx_row_bytes((K + 31) / 32 * 32), need = (size_t)rows * rb;
    if (need > c->xq_bytes) {
        uint8_t *p = realloc(c->xq, need);
        if (!p) return -1;
        c->xq = p;
        c->xq_bytes = need;
    }
    size_t own = (size_t)(rows < XQ_OWN_ROWS ? rows : XQ_OWN_ROWS - 1) * rb;
    if (own <= c->xq_t_bytes) return 0;
    for (int i = 0; i < c->n_threads; i++) {
        uint8_t *p = realloc(c->xq_t[i], own);
        if (!p) return -1;
        c->xq_t[i] = p;
    }
    c->xq_t_bytes = own;
    return 0;
}

/* Grows the RoPE tables to rows x half. */
static int cpu_reserve_rope(cpu_ctx *c, int rows, int half) {
    size_t need = (size_t)rows * half;
    if (need > c->rope_cap) {
        float *cs = realloc(c->rope_cs, need * sizeof(float));
        if (!cs) return -1;
        c->rope_cs = cs;
        float *sn = realloc(c->rope_sn, need * sizeof(float));
        if (!sn) return -1;
        c->rope_sn = sn;
        c->rope_cap = need;
        c->rope_M = 0;
    }
    if (rows > c->rope_rows) {
        int32_t *p = realloc(c->rope_pos, (size_t)rows * sizeof(int32_t));
        if (!p) return -1;
        c->rope_pos = p;
        c->rope_rows = rows;
        c->rope_M = 0;
    }
    return 0;
}

static int cpu_reserve(backend *be, int max_rows, int max_k, int max_ctx) {
    cpu_ctx *c = ctx_of(be);
    if (cpu_reserve_xq(c, max_rows, max_k) != 0) return -1;
    if (cpu_reserve_rope(c, max_rows, ROPE_RESERVE_HALF) != 0) return -1;
    size_t need = (size_t)max_ctx + 64; /* attention scores */
    if (need <= c->scratch_floats) return 0;
    for (int i = 0; i < c->n_threads; i++) {
        float *p = realloc(c->scratch[i], need * sizeof(float));
        if (!p) return -1;
        c->scratch[i] = p;
    }
    c->scratch_floats = need;
    return 0;
}

/* Makes sure the attention scratch fits max_ctx positions; only grows during
 * the first calls of a new shape when the caller skipped reserve(). Aborts on
 * failure (out of memory). */
static void cpu_need(backend *be, int max_ctx) {
    if (cpu_reserve(be, 0, 0, max_ctx) != 0) {
        fprintf(stderr, "%s:%d: out of memory for CPU scratch\n", __FILE__, __LINE__);
        abort();
    }
}

/* One matrix of a matmul op: its rows go in tasks of `chunk` rows, numbered
 * from task0 in the op's single dispatch. */
typedef struct {
    float *y;
    const uint8_t *w;
    int wtype, N, chunk, task0;
} mm_mat;

typedef struct {
    cpu_ctx *c;
    const float *x;
    int M, K, n;
    uint64_t own; /* != 0: each thread quantizes x into its own copy (call number) */
    mm_mat mat[BACKEND_MATMUL_N_MAX];
} mm_job;

static void mm_task(void *arg, int task, int thread) {
    mm_job *j = arg;
    cpu_ctx *c = j->c;
    const uint8_t *xq = c->xq;
    if (j->own) { /* this thread's first task of the call rounds x for it */
        xq = c->xq_t[thread];
        if (c->xq_t_gen[thread] != j->own) {
            mm_quantize_x(c->simd, c->xq_t[thread], j->x, j->M, j->K);
            c->xq_t_gen[thread] = j->own;
        }
    }
    int i = j->n - 1;
    while (i > 0 && task < j->mat[i].task0) i--;
    const mm_mat *a = &j->mat[i];
    int n0 = (task - a->task0) * a->chunk;
    int n1 = n0 + a->chunk < a->N ? n0 + a->chunk : a->N;
    mm_rows(c->simd, a->y, a->N, j->x, xq, a->w, a->wtype, j->M, j->K, n0, n1);
}

/* quantizes 8 rows of x per task (large-M calls: prefill) */
static void xq_task(void *arg, int task, int thread) {
    mm_job *j = arg;
    int m0 = task * 8, m1 = m0 + 8 < j->M ? m0 + 8 : j->M;
    mm_quantize_x(j->c->simd, j->c->xq + (size_t)m0 * mm_qx_row_bytes(j->K), j->x + (size_t)m0 * j->K, m1 - m0, j->K);
}

/* n matrices against one x in one dispatch: x is quantized once for all the
 * integer-dot ones, and each matrix keeps the chunks it would have alone, so
 * every output is the same as from its own call. */
static void cpu_matmul_n_run(backend *be, int n, float *const *y, const float *x, const void *const *w,
                             const int *wtype, int M, int K, const int *N) {
    cpu_ctx *c = ctx_of(be);
    mm_job j = {.c = c, .x = x, .M = M, .K = K, .n = n};
    int tasks = 0, quant = 0;
    double work = 0; /* multiply-adds of the whole op */
    for (int i = 0; i < n; i++) {
        /* Tasks per thread: one row (decode) is memory-bound, and 2 tasks
         * keep each weight stream long (a new task restarts the prefetchers).
         * A few rows (verification) are both: 4 tasks (Q8_0 widen model, 5
         * rows, alternated: verify/decode 1.17-1.24 against 1.26-1.28 with 8
         * and 1.20-1.29 with 2). Many rows are compute-bound: 8 balance
         * better. Chunks stay multiples of the 4-row tile. */
        int per = M == 1 ? 2 : M <= 8 ? 4 : 8;
        int chunk = N[i] / (c->n_threads * per);
        chunk = chunk < 4 ? 4 : (chunk + 3) / 4 * 4;
        if (wtype[i] == SPECD_TYPE_Q8_0_R8 || wtype[i] == SPECD_TYPE_Q4_K_R8 || wtype[i] == SPECD_TYPE_Q5_K_R8 ||
            wtype[i] == SPECD_TYPE_Q6_K_R8)
            chunk = (chunk + 7) / 8 * 8; /* whole 8-row groups */
        j.mat[i] = (mm_mat){y[i], w[i], wtype[i], N[i], chunk, tasks};
        tasks += (N[i] + chunk - 1) / chunk;
        quant |= mm_q8_path(wtype[i]);
        work += (double)M * K * N[i];
    }
    int inline_op = work < 32768.0; /* too small to be worth waking the pool */
    if (quant) {
        if (cpu_reserve_xq(c, M, K) != 0) {
            fprintf(stderr, "%s:%d: out of memory for quantized activations\n", __FILE__, __LINE__);
            abort();
        }
        if (M >= XQ_OWN_ROWS) {
            tp_run(c->tp, (M + 7) / 8, xq_task, &j);
        } else if (inline_op) {
            mm_quantize_x(c->simd, c->xq, x, M, K);
        } else {
            /* few rows: every thread rounds x itself, in parallel, into memory
             * no other core reads (one shared copy made the caller round it
             * alone while the others waited, and its stores waited on lines
             * the other cores had just read: 3.4 us per call in the model
             * against 1.8 us in isolation, 5-row Q8_0) */
            j.own = ++c->xq_gen;
        }
    }
    if (inline_op) {
        for (int i = 0; i < n; i++)
            mm_rows(c->simd, y[i], N[i], x, c->xq, w[i], wtype[i], M, K, 0, N[i]);
        return;
    }
    if (work >= TP_WIDE_WORK) tp_run_wide(c->tp, tasks, mm_task, &j);
    else tp_run(c->tp, tasks, mm_task, &j);
}

static void cpu_matmul_n(backend *be, int n, float *const *y, const float *x, const void *const *w,
                         const int *wtype, int M, int K, const int *N) {
    for (; n > BACKEND_MATMUL_N_MAX; n -= BACKEND_MATMUL_N_MAX, y += BACKEND_MATMUL_N_MAX, w += BACKEND_MATMUL_N_MAX,
                                     wtype += BACKEND_MATMUL_N_MAX, N += BACKEND_MATMUL_N_MAX)
        cpu_matmul_n(be, BACKEND_MATMUL_N_MAX, y, x, w, wtype, M, K, N); /* more than one op holds */
    if (n <= 0) return;
    PROF_BEGIN(be)
    cpu_matmul_n_run(be, n, y, x, w, wtype, M, K, N);
    PROF_END(P_MATMUL)
    if (pc_->prof)
        for (int i = 0; i < n; i++) pc_->prof_mm_bytes += (double)mm_row_bytes(wtype[i], K) * N[i];
}

static void cpu_matmul(backend *be, float *y, const float *x, const void *w, int wtype, int M, int K, int N) {
    cpu_matmul_n(be, 1, &y, x, &w, &wtype, M, K, &N);
}

static void cpu_get_rows(backend *be, float *y, const void *table, int type, const int32_t *ids, int M, int D) {
    PROF_BEGIN(be)
    size_t rb = mm_row_bytes(type, D);
    for (int m = 0; m < M; m++) {
        if (type == SPECD_TYPE_Q8_0_R8) mm_r8_dequant_row(y + (size_t)m * D, table, ids[m], D);
        else if (type == SPECD_TYPE_Q4_K_R8 || type == SPECD_TYPE_Q5_K_R8)
            mm_rk_dequant_row(y + (size_t)m * D, table, ids[m], D, type == SPECD_TYPE_Q5_K_R8);
        else if (type == SPECD_TYPE_Q6_K_R8) mm_q6x_dequant_row(y + (size_t)m * D, table, ids[m], D);
        else mm_dequant_row(y + (size_t)m * D, (const uint8_t *)table + rb * ids[m], type, D);
    }
    PROF_END(P_GET_ROWS)
}

/* Row-wise ops over many rows (prefill) run a slice of rows per thread; a few
 * rows (decode, verification) stay on the caller, where waking the pool would
 * cost more than the op. Rows are independent, so the split changes no bit. */
enum { ROWS_RMSNORM, ROWS_ROPE, ROWS_ADD, ROWS_SILU_MUL };
#ifndef ROWS_SPLIT_MIN
#define ROWS_SPLIT_MIN 32768 /* floats */
#endif
typedef struct {
    cpu_ctx *c;
    int op, M, D; /* D: floats per row of a (and b) */
    float *a;
    const float *b, *w; /* rmsnorm: a = norm(b) * w; add: a += b; silu_mul: a = silu(a) * b */
    const float *cs, *sn;
    int H, E, n_rot, neox;
    float eps;
} rows_job;

/* Rows [m0, m1) of j. */
static void rows_do(const rows_job *j, int m0, int m1) {
    size_t o = (size_t)m0 * j->D;
    int half = j->n_rot / 2;
    switch (j->op) {
    case ROWS_RMSNORM: ops_rmsnorm(j->c->simd, j->a + o, j->b + o, j->w, m1 - m0, j->D, j->eps); break;
    case ROWS_ROPE:
        ops_rope_apply(j->a + o, j->cs + (size_t)m0 * half, j->sn + (size_t)m0 * half, m1 - m0, j->H, j->E,
                       j->n_rot, j->neox);
        break;
    case ROWS_ADD: ops_add(j->a + o, j->b + o, m1 - m0, j->D); break;
    default: ops_silu_mul(j->c->simd, j->a + o, j->b + o, m1 - m0, j->D); break;
    }
}

static void rows_task(void *arg, int task, int thread) {
    const rows_job *j = arg;
    int n = tp_threads(j->c->tp);
    int m0 = (int)((long)j->M * task / n), m1 = (int)((long)j->M * (task + 1) / n);
    if (m1 > m0) rows_do(j, m0, m1);
}

/* Runs j over its rows, split over the threads when there are enough. */
static void rows_run(rows_job *j) {
    int n = tp_threads(j->c->tp);
    if (n > 1 && j->M >= 4 * n && (size_t)j->M * j->D >= ROWS_SPLIT_MIN) tp_run(j->c->tp, n, rows_task, j);
    else if (j->M > 0) rows_do(j, 0, j->M);
}

static void cpu_rmsnorm(backend *be, float *y, const float *x, const float *w, int M, int D, float eps) {
    PROF_BEGIN(be)
    rows_job j = {.c = ctx_of(be), .op = ROWS_RMSNORM, .M = M, .D = D, .a = y, .b = x, .w = w, .eps = eps};
    rows_run(&j);
    PROF_END(P_RMSNORM)
}

static void cpu_rope(backend *be, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E,
                     int n_rot, int neox) {
    PROF_BEGIN(be)
    cpu_ctx *c = ctx_of(be);
    int half = n_rot / 2;
    if (M <= c->rope_rows && (size_t)M * half <= c->rope_cap) {
        if (c->rope_M != M || c->rope_half != half || memcmp(c->rope_pos, pos, sizeof(int32_t) * (size_t)M) ||
            memcmp(c->rope_freq, inv_freq, sizeof(float) * (size_t)half)) {
            ops_rope_tables(c->rope_cs, c->rope_sn, pos, inv_freq, M, half);
            memcpy(c->rope_pos, pos, sizeof(int32_t) * (size_t)M);
            memcpy(c->rope_freq, inv_freq, sizeof(float) * (size_t)half);
            c->rope_M = M, c->rope_half = half;
        }
        rows_job j = {.c = c, .op = ROWS_ROPE, .M = M, .D = H * E, .a = x, .cs = c->rope_cs, .sn = c->rope_sn,
                      .H = H, .E = E, .n_rot = n_rot, .neox = neox};
        rows_run(&j);
    } else { /* more rows than reserved (or n_rot > 128): tables a row at a time, no allocation */
        float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
        for (int m = 0; m < M; m++) {
            ops_rope_tables(cs, sn, pos + m, inv_freq, 1, half);
            ops_rope_apply(x + (size_t)m * H * E, cs, sn, 1, H, E, n_rot, neox);
        }
    }
    PROF_END(P_ROPE)
}

static void cpu_add(backend *be, float *x, const float *y, int M, int D) {
    PROF_BEGIN(be)
    rows_job j = {.c = ctx_of(be), .op = ROWS_ADD, .M = M, .D = D, .a = x, .b = y};
    rows_run(&j);
    PROF_END(P_ADD)
}

static void cpu_silu_mul(backend *be, float *g, const float *u, int M, int F) {
    PROF_BEGIN(be)
    rows_job j = {.c = ctx_of(be), .op = ROWS_SILU_MUL, .M = M, .D = F, .a = g, .b = u};
    rows_run(&j);
    PROF_END(P_SILU_MUL)
}

typedef struct {
    const kv_layer_view *kv;
    const float *k, *v;
    const attn_seq *seqs;
    int n_seqs, kv_dim, n_tasks;
    simd_level simd;
} kvw_job;

/* Slice `task` of every sequence's new rows: rows land in disjoint cache
 * positions, so any split writes the same cache. */
static void kvw_task(void *arg, int task, int thread) {
    const kvw_job *j = arg;
    for (int s = 0; s < j->n_seqs; s++) {
        const attn_seq *sq = &j->seqs[s];
        int r0 = (int)((long)sq->n_new * task / j->n_tasks), r1 = (int)((long)sq->n_new * (task + 1) / j->n_tasks);
        if (r1 > r0)
            ops_kv_write(j->simd, j->kv, sq->blocks, sq->n_past + r0, j->k + (size_t)(sq->row0 + r0) * j->kv_dim,
                         j->v + (size_t)(sq->row0 + r0) * j->kv_dim, r1 - r0, j->kv_dim);
    }
}

static void cpu_kv_write(backend *be, const kv_layer_view *kv, const float *k, const float *v, const attn_seq *seqs,
                         int n_seqs, int kv_dim) {
    PROF_BEGIN(be)
    cpu_ctx *c = ctx_of(be);
    size_t rows = 0;
    for (int s = 0; s < n_seqs; s++) rows += (size_t)seqs[s].n_new;
    /* a prefill's copies on every thread (rows_run's rule: small ones stay here) */
    int n = c->n_threads > 1 && rows * (size_t)kv_dim >= ROWS_SPLIT_MIN ? c->n_threads : 1;
    kvw_job j = {kv, k, v, seqs, n_seqs, kv_dim, n, c->simd};
    if (n > 1) tp_run(c->tp, n, kvw_task, &j);
    else kvw_task(&j, 0, 0);
    PROF_END(P_KV_WRITE)
}

/* Memory: plain host memory; weights are used in place in the GGUF mapping.
 * Each block carries its size in a 64-byte header (keeps 64-byte alignment of
 * what follows relative to the block) so the budget of backend_cpu_limit_memory
 * can be kept. */
#define CPU_HDR 64
static void *cpu_alloc(backend *be, size_t bytes) {
    cpu_ctx *c = ctx_of(be);
    if (c->mem_limit && c->mem_used + bytes > c->mem_limit) return NULL;
    uint8_t *p = calloc(1, CPU_HDR + (bytes ? bytes : 1));
    if (!p) return NULL;
    memcpy(p, &bytes, sizeof(bytes));
    c->mem_used += bytes;
    return p + CPU_HDR;
}
static void cpu_release(backend *be, void *ptr) {
    if (!ptr) return;
    cpu_ctx *c = ctx_of(be);
    uint8_t *p = (uint8_t *)ptr - CPU_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof(bytes));
    c->mem_used -= bytes;
    free(p);
}
/* Weight matrices live in the weight arena (warena.h: 2 MiB-aligned chunks
 * advised as huge pages), not in the GGUF mapping: Q8_0 matrices repacked
 * into the Q8_0 x8 layout (quant.h) that the integer-dot kernels stream 8 rows
 * at a time, Q4_K, Q5_K and Q6_K matrices at the x86 SIMD levels and NEON
 * repacked into the K-quant x8 layouts (quant.h; the portable path keeps the
 * file layout), every other matrix copied as it is. A decode streams every
 * weight once per token; from the file mapping's 4 KiB page-cache pages that
 * is a TLB miss per 4 KiB; an F16 decode of the 12-layer bench model ran
 * 1.08x faster from the arena's huge pages at 2 threads and no faster at 1
 * (6 alternated pairs each).
 * SPECD_REPACK=0 keeps every matrix in place in the mapping (the kernels read
 * both layouts and give the same results). The copies are not counted
 * against backend_cpu_limit_memory (weights never were); the page cache the
 * file was read through is clean and the kernel reclaims it as needed. */
typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
} copy_job;

#define COPY_PIECE ((size_t)1 << 20)

static void copy_task(void *arg, int task, int thread) {
    (void)thread;
    copy_job *j = arg;
    size_t o = (size_t)task * COPY_PIECE, n = j->bytes - o < COPY_PIECE ? j->bytes - o : COPY_PIECE;
    memcpy(j->dst + o, j->src + o, n);
}
typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    int N, K, per, type; /* per: 8-row groups per task; type: the file type repacked */
} repack_job;

static void repack_task(void *arg, int task, int thread) {
    repack_job *j = arg;
    int ng = (j->N + 7) / 8, g0 = task * j->per, g1 = g0 + j->per < ng ? g0 + j->per : ng;
    if (j->type == GGML_TYPE_Q4_K || j->type == GGML_TYPE_Q5_K)
        mm_rk_repack_groups(j->dst, j->src, j->N, j->K, g0, g1, j->type == GGML_TYPE_Q5_K);
    else if (j->type == GGML_TYPE_Q6_K) mm_q6x_repack_groups(j->dst, j->src, j->N, j->K, g0, g1);
    else mm_r8_repack_groups(j->dst, j->src, j->N, j->K, g0, g1);
}

static const void *cpu_weight(backend *be, const void *host, int *type, int64_t rows, int64_t cols) {
    const char *env = getenv("SPECD_REPACK");
    simd_level lvl = ctx_of(be)->simd;
    int kq = (*type == GGML_TYPE_Q4_K || *type == GGML_TYPE_Q5_K || *type == GGML_TYPE_Q6_K) &&
             (lvl == SIMD_AVX2 || lvl == SIMD_AVX512 || lvl == SIMD_NEON);
    if (env && !strcmp(env, "0")) return host;
    if ((*type != GGML_TYPE_Q8_0 && !kq) || cols % (kq ? 256 : 32) || rows < 8 || rows > INT32_MAX ||
        cols > INT32_MAX) {
        /* the file's layout, copied into the arena's huge pages */
        size_t bytes = cols <= INT32_MAX ? (size_t)rows * mm_row_bytes(*type, (int)cols) : 0;
        uint8_t *p = bytes ? warena_alloc(ctx_of(be)->wa, bytes) : NULL;
        if (!p) return host;
        copy_job j = {p, host, bytes};
        tp_run(ctx_of(be)->tp, (int)((bytes + COPY_PIECE - 1) / COPY_PIECE), copy_task, &j);
        return p;
    }
    size_t bytes = *type == GGML_TYPE_Q4_K || *type == GGML_TYPE_Q5_K
                       ? mm_rk_bytes((int)rows, (int)cols, *type == GGML_TYPE_Q5_K)
                   : *type == GGML_TYPE_Q6_K ? mm_q6x_bytes((int)rows, (int)cols)
                                             : mm_r8_bytes((int)rows, (int)cols);
    uint8_t *p = warena_alloc(ctx_of(be)->wa, bytes);
    if (!p) return host; /* the in-place layout works too, just slower */
    /* on all threads: an 8B model's Q8_0 matrices are 8.5 GB to rewrite */
    repack_job j = {p, host, (int)rows, (int)cols, 16, *type};
    tp_run(ctx_of(be)->tp, (int)(((rows + 7) / 8 + j.per - 1) / j.per), repack_task, &j);
    *type = *type == GGML_TYPE_Q4_K   ? SPECD_TYPE_Q4_K_R8
            : *type == GGML_TYPE_Q5_K ? SPECD_TYPE_Q5_K_R8
            : *type == GGML_TYPE_Q6_K ? SPECD_TYPE_Q6_K_R8
                                      : SPECD_TYPE_Q8_0_R8;
    return p;
}
static void cpu_weight_release(backend *be, const void *host, const void *w) {
    if (w != host) warena_free(ctx_of(be)->wa, (void *)w);
}
static void cpu_copy(backend *be, void *dst, const void *src, size_t bytes) {
    PROF_BEGIN(be)
    memmove(dst, src, bytes);
    PROF_END(P_COPY)
}
static int cpu_begin(backend *be, uint64_t graph_key) { return 0; }
static void cpu_end(backend *be) {}

/* A lone causal sequence of many new rows (a prefill) also splits its rows
 * into ATT_RUNS runs of about equal work (row i scores n_past + i + 1 keys),
 * so the threads get enough tasks to balance: a 512-row prompt of a
 * 6-KV-head model was 6 tasks of a third of the op each on 2 threads. A row's
 * bits do not depend on its run (attention.c: a row alone and in a tile agree). */
#define ATT_RUNS 4
#define ATT_RUN_MIN_ROWS 64
typedef struct {
    cpu_ctx *c;
    float *out;
    const float *q;
    const kv_layer_view *kv;
    const attn_seq *seqs;
    int H, Hkv, E, per, runs; /* runs: of every sequence's rows (1 or ATT_RUNS) */
    size_t stage_off;         /* a thread's F16 staging buffer: scratch + stage_off */
} attn_job;

/* The first row of run j of n of causal sequence s (s->n_new for j = n), on
 * the 4-row tile: r * n_past + r (r + 1) / 2 = j / n of the sequence's work. */
static int attn_run_row(const attn_seq *s, int j, int n) {
    if (j <= 0) return 0;
    if (j >= n) return s->n_new;
    double b = 2.0 * s->n_past + 1, total = (double)s->n_new * s->n_past + 0.5 * s->n_new * (s->n_new + 1.0);
    double r = (-b + sqrt(b * b + 8.0 * total * j / n)) / 2.0;
    int ri = ((int)(r + 0.5) + 2) / 4 * 4;
    return ri < 0 ? 0 : ri > s->n_new ? s->n_new : ri;
}

/* A task is `per` consecutive heads of one run of one sequence's rows. When
 * there are enough tasks, it is a whole GQA group: the heads sharing a KV head
 * run back to back on one thread, so that KV head's keys and values come from
 * DRAM once and from cache for the group's other heads. */
static void attn_task(void *arg, int task, int thread) {
    attn_job *j = arg;
    int groups = j->H / j->per;
    int s = task / (groups * j->runs), run = task / groups % j->runs, h0 = task % groups * j->per;
    attn_seq sub = j->seqs[s];
    if (j->runs > 1) { /* rows [r0, r1): causal, so they sit n_past + r0 positions in */
        int r0 = attn_run_row(&sub, run, j->runs), r1 = attn_run_row(&sub, run + 1, j->runs);
        if (r1 <= r0) return;
        sub.row0 += r0, sub.n_new = r1 - r0, sub.n_past += r0;
    }
    for (int h = h0; h < h0 + j->per; h++)
        ops_attention_head(j->c->simd, j->out, j->q, j->kv, &sub, h, j->H, j->Hkv, j->E, j->c->scratch[thread],
                           j->c->scratch[thread] + j->stage_off);
}

static void cpu_attention_run(backend *be, float *out, const float *q, const kv_layer_view *kv, const attn_seq *seqs,
                              int n_seqs, int H, int Hkv, int E) {
    cpu_ctx *c = ctx_of(be);
    int max_ctx = 0;
    for (int s = 0; s < n_seqs; s++)
        if (seqs[s].n_past + seqs[s].n_new > max_ctx) max_ctx = seqs[s].n_past + seqs[s].n_new;
    /* scores, then (F16 cache) one block's run of a head as floats */
    size_t stage_off = ((size_t)max_ctx + 64 + 15) / 16 * 16;
    cpu_need(be, kv->type == KV_F16 ? (int)(stage_off + (size_t)kv->block_size * E) : max_ctx);
    int per = n_seqs * Hkv >= 2 * c->n_threads ? H / Hkv : 1;
    int runs = n_seqs == 1 && !seqs[0].mask && seqs[0].n_new >= ATT_RUN_MIN_ROWS && c->n_threads > 1 ? ATT_RUNS : 1;
    attn_job j = {c, out, q, kv, seqs, H, Hkv, E, per, runs, stage_off};
    int n_tasks = n_seqs * (H / per) * runs;
    if ((double)max_ctx * H * E * n_seqs < 16384.0) {
        for (int t = 0; t < n_tasks; t++) attn_task(&j, t, 0);
        return;
    }
    double rows = 0; /* new rows x keys x features: at most the op's multiply-adds per pass */
    for (int s = 0; s < n_seqs; s++) rows += seqs[s].n_new;
    if (rows * max_ctx * H * E >= TP_WIDE_WORK) tp_run_wide(c->tp, n_tasks, attn_task, &j);
    else tp_run(c->tp, n_tasks, attn_task, &j);
}

static void cpu_attention(backend *be, float *out, const float *q, const kv_layer_view *kv, const attn_seq *seqs,
                          int n_seqs, int H, int Hkv, int E) {
    PROF_BEGIN(be)
    cpu_attention_run(be, out, q, kv, seqs, n_seqs, H, Hkv, E);
    PROF_END(P_ATTENTION)
}

static void cpu_describe(backend *be, char *buf, size_t n) {
    snprintf(buf, n, "cpu %s, %d threads", simd_name(ctx_of(be)->simd), be->n_threads);
}

static const backend_i cpu_iface = {
    .version = BACKEND_INTERFACE_VERSION,
    .name = "cpu",
    .destroy = cpu_destroy,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .weight = cpu_weight,
    .weight_release = cpu_weight_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .begin = cpu_begin,
    .end = cpu_end,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .add = cpu_add,
    .silu_mul = cpu_silu_mul,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .describe = cpu_describe,
};

backend *backend_cpu_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    backend *be = calloc(1, sizeof(*be));
    cpu_ctx *c = calloc(1, sizeof(*c));
    float **scr = calloc((size_t)n_threads, sizeof(float *));
    uint8_t **xq_t = calloc((size_t)n_threads, sizeof(uint8_t *));
    uint64_t *xq_t_gen = calloc((size_t)n_threads, sizeof(uint64_t));
    warena *wa = warena_create();
    if (!be || !c || !scr || !xq_t || !xq_t_gen || !wa) {
        fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
        abort();
    }
    c->n_threads = n_threads;
    c->scratch = scr;
    c->xq_t = xq_t;
    c->xq_t_gen = xq_t_gen;
    c->wa = wa;
    c->simd = simd_detect();
    c->tp = tp_create(n_threads);
    /* the contention guard (SPECD_TP_ADAPT=0 turns it off): with one core busy elsewhere a 2-thread Q8_0 decode
     * of 1024 tokens ran 1.08x as fast as 1 thread with it and 0.81x (256 tokens) without; on a quiet host it
     * cost nothing measurable (farm-bench, 6 pairs: 0.95x the wall time, 0.89-1.09) */
    tp_set_adaptive(c->tp, 1);
    be->i = &cpu_iface;
    be->ctx = c;
    be->n_threads = n_threads;
    be->host_memory = 1;
    cpu_need(be, 4096);
    return be;
}

void backend_cpu_limit_memory(backend *be, size_t bytes) { ctx_of(be)->mem_limit = bytes; }
size_t backend_cpu_memory_used(backend *be) { return ctx_of(be)->mem_used; }

const char *backend_cpu_simd(void) { return simd_name(simd_detect()); }

void backend_cpu_lend(int n) { tp_lend(n); }

void backend_cpu_profile(backend *be, int on) {
    cpu_ctx *c = ctx_of(be);
    c->prof = on != 0;
    memset(c->prof_ms, 0, sizeof(c->prof_ms));
    memset(c->prof_calls, 0, sizeof(c->prof_calls));
    c->prof_mm_bytes = 0;
}

void backend_cpu_profile_report(backend *be, FILE *out) {
    cpu_ctx *c = ctx_of(be);
    backend_profile_table(out, prof_names, c->prof_ms, c->prof_calls, P_COUNT);
    if (c->prof_ms[P_MATMUL] > 0)
        fprintf(out, "  matmul read %.1f MB of weights at %.1f GB/s\n", c->prof_mm_bytes / 1e6,
                c->prof_mm_bytes / (c->prof_ms[P_MATMUL] * 1e-3) / 1e9);
    backend_cpu_profile(be, c->prof);
}
