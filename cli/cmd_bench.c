/* cmd_bench.c — `specd bench`: prefill and decode speed of one model on this
 * machine, against the memory-bandwidth roofline (weight bytes read per decode
 * step / measured read bandwidth), plus the cost of a (γ+1)-position
 * verification call relative to a 1-position decode call. All ratios come from
 * the same run. */
#include "cli/cmd.h"
#include "cli/hub.h"
#include "cli/util.h"
#include "engine/model/model.h"
#include "kernels/cpu/membw.h"
#ifdef SPECD_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#include <stdlib.h>
#include <string.h>

typedef struct {
    model *m;
    kv_pool *pool;
    kv_seq *seq;
    float *logits;
    int32_t *toks;
    char err[512];
} bench_ctx;

/* One forward call of n tokens continuing the sequence; returns ms or -1. */
static double timed_call(bench_ctx *b, int n, int first_tok) {
    model_seq s = {.kv = b->seq, .n = n, .tokens = b->toks + first_tok, .all_logits = n <= 16};
    double t0 = now_ms();
    if (model_forward(b->m, b->pool, &s, 1, b->logits, b->err, sizeof(b->err)) != 0) return -1;
    return now_ms() - t0;
}

int bench_engine(int argc, char **argv);  /* bench_engine.c: the --concurrency mode */
int bench_kernels(int argc, char **argv); /* bench_kernels.c: the --kernels mode */
int bench_chat(int argc, char **argv);    /* bench_chat.c: the --multi-turn mode (prefix reuse) */

/* Read bandwidth for the roofline: the CPU's measured read rate (the best of
 * 8 passes over the probe's buffer; 0 without one), or on a GPU the device's
 * measured copy rate (bytes read + written). */
static double bench_bw(backend *be, membw *probe) {
#ifdef SPECD_CUDA
    if (!be->host_memory) return backend_cuda_copy_gbs(be, (size_t)1 << 30, 10);
#endif
    return probe ? membw_measure(probe, 8, 1) : 0;
}

static void bench_prof_on(backend *be, int on) {
#ifdef SPECD_CUDA
    if (!be->host_memory) {
        backend_cuda_profile(be, on);
        return;
    }
#endif
    backend_cpu_profile(be, on);
}

static void bench_prof_report(backend *be) {
#ifdef SPECD_CUDA
    if (!be->host_memory) {
        backend_cuda_profile_report(be, stdout);
        return;
    }
#endif
    backend_cpu_profile_report(be, stdout);
}

/* Per-op times of n decode steps and n verify calls at context ctx (GPU: CUDA
 * events around every op, graphs off; CPU: wall time of every op). */
static void bench_profile(backend *be, bench_ctx *b, int ctx, int n, int gamma) {
    bool gpu = !be->host_memory;
    kv_seq_truncate(b->pool, b->seq, ctx);
    bench_prof_on(be, 1);
    double t0 = now_ms();
    for (int g = 0; g < n; g++) timed_call(b, 1, ctx + g);
    double wall = now_ms() - t0;
    printf("\nper-op %s time over %d decode steps at context %d (%.3f ms per step wall)%s:\n", gpu ? "device" : "wall",
           n, ctx, wall / n, gpu ? " (CUDA events, graphs off)" : "");
    bench_prof_report(be);
    kv_seq_truncate(b->pool, b->seq, ctx);
    t0 = now_ms();
    for (int g = 0; g < n; g++) {
        timed_call(b, gamma + 1, ctx);
        kv_seq_truncate(b->pool, b->seq, ctx);
    }
    wall = now_ms() - t0;
    printf("per-op %s time over %d verify calls of %d positions (%.3f ms per call wall):\n", gpu ? "device" : "wall", n,
           gamma + 1, wall / n);
    bench_prof_report(be);
    bench_prof_on(be, 0);
#ifdef SPECD_CUDA
    if (!gpu) return;
    cuda_info ci;
    backend_cuda_info(be, &ci);
    printf("device %s: %d SMs, %.1f GiB, %.2f GiB of weights; %d step graphs captured, %lld replays\n", ci.name,
           ci.sm_count, ci.mem_gib, ci.weight_gib, ci.graphs, ci.graph_replays);
#endif
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: specd bench -m MODEL.gguf | -hf REPO[:QUANT] [-t THREADS (2)] [-r REPS (5)] [--gamma G (4)] [--json]\n"
               "                   [--backend cpu|cuda|auto (cpu)] [--device N] [--kv-type f32|f16 (f16)]\n"
               "       specd bench --kernels [-t THREADS] [-r REPS]   (CPU matmul kernels alone)\n"
               "       specd bench --concurrency 1,8,32 -m TARGET [--draft DRAFT] ...   (engine streams, --help: all)\n"
               "       specd bench --multi-turn 8 -m TARGET [--draft DRAFT] [--turns 6] ...   (chat, prefix cache on/off)\n"
               "  -m, --model MODEL  the model; prefill and decode tok/s against the memory-bandwidth roofline\n"
               "  -t, --threads N  CPU threads (default 2); -r, --reps N  repetitions per figure (default 5)\n"
               "  --gamma G   the verify call measured: G+1 positions against a 1-position decode (default 4)\n"
               "  --json      one JSON object instead of the table\n"
               "  --backend B cpu (default), cuda or auto; --device N the GPU\n"
               "  --kv-type T the KV cache's elements: f16 (default, as serve) or f32\n");
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--concurrency")) return bench_engine(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kernels")) return bench_kernels(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--multi-turn")) return bench_chat(argc, argv);
    const char *model_path = NULL, *hf = NULL;
    int threads = 2, reps = 5, gamma = 4, kind = BACKEND_CPU, device = 0, kvt = KV_F16; /* as serve */
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-hf") || !strcmp(a, "--hf")) hf = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--kv-type")) kvt = arg_kv_type(argc, argv, &i);
        else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) reps = (int)arg_long(argc, argv, &i, 1, 1000);
        else if (!strcmp(a, "--gamma")) gamma = (int)arg_long(argc, argv, &i, 1, 15);
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--backend")) kind = arg_backend(argc, argv, &i);
        else if (!strcmp(a, "--device")) device = (int)arg_long(argc, argv, &i, 0, 1023);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 0;
        } else
            return cli_unknown_option("bench", a, bench_usage);
    }
    static char hf_path[2048];
    int hrc = hub_resolve_flag("bench", hf, hf_path, sizeof(hf_path), &model_path);
    if (hrc) return hrc;
    if (!model_path) { /* the built-in pair's target */
        const char *d;
        char err[1024];
        if (cmd_default_pair(&model_path, &d, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd bench: %s\n", err);
            return 2;
        }
    }
    bench_ctx b = {0};
    membw *probe = NULL; /* CPU: one 512 MiB buffer for every bandwidth probe of the run */
    int rc = 1;
    backend *be = backend_create((backend_kind)kind, device, threads, b.err, sizeof(b.err));
    if (!be) {
        fprintf(stderr, "specd bench: %s\n", b.err);
        return 1;
    }
    bool gpu = !be->host_memory;
    char desc[128]; /* what runs the ops: the CPU's SIMD and threads, or the GPU */
    backend_describe(be, desc, sizeof(desc));
    model_params mp = {.max_batch = 512, .max_ctx = 1024, .kv = (kv_type)kvt};
    engine_status est;
    b.m = model_load(model_path, be, &mp, &est, b.err, sizeof(b.err));
    if (!b.m) {
        cli_load_failed("bench", est, b.err, CLI_OOM_HINT_MODEL);
        backend_destroy(be);
        return 1;
    }
    model *m = b.m;
    b.pool = model_kv_pool(m, 16, 1024 / 16, &est, b.err, sizeof(b.err));
    if (!b.pool) {
        cli_load_failed("bench", est, b.err, CLI_OOM_HINT_MODEL);
        goto done;
    }
    b.seq = kv_seq_create(b.pool, 1024);
    b.logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab * 512);
    b.toks = malloc(sizeof(int32_t) * 1024);
    if (!b.seq || !b.logits || !b.toks) {
        fprintf(stderr, "specd bench: out of memory\n");
        goto done;
    }
    for (int i = 0; i < 1024; i++) b.toks[i] = (int32_t)((i * 2654435761u) % (unsigned)m->hp.n_vocab);

    /* The roofline's bandwidth is the best of three probes spread over the run
     * (start, after decode, end): on a shared machine a single probe can land
     * in a busy moment and understate it, which would flatter the percentage. */
    /* GPU: the device's measured copy bandwidth (bytes read + written) */
    if (!gpu) probe = membw_create(threads, (size_t)512 << 20);
    double bw = bench_bw(be, probe);

    /* warm up: fault the weights in and settle the thread pool */
    if (timed_call(&b, 32, 0) < 0) goto fail;
    for (int i = 0; i < 8; i++)
        if (timed_call(&b, 1, 32 + i) < 0) goto fail;
    kv_seq_truncate(b.pool, b.seq, 0);

    /* decode and prefill at a few lengths */
    static const int prompts[] = {16, 128, 512}, gens[] = {32, 128};
    double dec_tps[3][2], pre_tps[3];
    for (int pi = 0; pi < 3; pi++) {
        int P = prompts[pi];
        double best_pre = 0;
        for (int r = 0; r < (P >= 512 ? 2 : 3); r++) {
            kv_seq_truncate(b.pool, b.seq, 0);
            double t = timed_call(&b, P, 0);
            if (t < 0) goto fail;
            if (P / (t / 1e3) > best_pre) best_pre = P / (t / 1e3);
        }
        pre_tps[pi] = best_pre;
        for (int gi = 0; gi < 2; gi++) {
            int G = gens[gi];
            double best = 0;
            for (int r = 0; r < (reps < 3 ? reps : 3); r++) {
                kv_seq_truncate(b.pool, b.seq, P);
                double t0 = now_ms();
                for (int g = 0; g < G; g++)
                    if (timed_call(&b, 1, P + g) < 0) goto fail;
                double tps = G / ((now_ms() - t0) / 1e3);
                if (tps > best) best = tps;
            }
            dec_tps[pi][gi] = best;
        }
    }

    double bw2 = bench_bw(be, probe);
    if (bw2 > bw) bw = bw2;

    /* (γ+1)-position verification vs 1-position decode at the same context (64) */
    int ctx = 64, nrep = 20 * reps;
    double *t1 = malloc(sizeof(double) * (size_t)nrep), *tv = malloc(sizeof(double) * (size_t)nrep);
    if (!t1 || !tv) goto fail;
    kv_seq_truncate(b.pool, b.seq, 0);
    if (timed_call(&b, ctx, 0) < 0) goto fail;
    for (int r = 0; r < nrep; r++) {
        t1[r] = timed_call(&b, 1, ctx);
        kv_seq_truncate(b.pool, b.seq, ctx); /* rollback: a pointer update */
        tv[r] = timed_call(&b, gamma + 1, ctx);
        kv_seq_truncate(b.pool, b.seq, ctx);
        if (t1[r] < 0 || tv[r] < 0) {
            free(t1);
            free(tv);
            goto fail;
        }
    }
    double med1 = sort_median(t1, nrep), medv = sort_median(tv, nrep);
    free(t1);
    free(tv);
    double bw3 = bench_bw(be, probe);
    if (bw3 > bw) bw = bw3;
    double roof = bw * 1e9 / (double)m->step_bytes;
    double decode_ref = dec_tps[0][0]; /* 16-token prompt, 32 generated */
    double roof_pct = 100.0 * decode_ref / roof;

    /* Paired roofline (CPU): this host's bandwidth moves by tens of percent
     * within seconds (shared memory channels), so the best of a few short
     * probes can catch a quiet moment no decode run sees. Each decode run here
     * (prompt 16, 32 tokens) follows a probe that reads about as many bytes as
     * the run does; the run's percentage is against that probe, and the
     * median over the runs is reported next to the peak figure above. */
    int npair = reps < 3 ? 3 : reps > 9 ? 9 : reps;
    double pair_pct[9], pair_bw[9];
    if (probe) {
        double want = 32.0 * (double)m->step_bytes / (double)((size_t)512 << 20);
        int passes = want < 2 ? 2 : want > 16 ? 16 : (int)(want + 0.5);
        for (int r = 0; r < npair; r++) {
            pair_bw[r] = membw_measure(probe, passes, 0);
            kv_seq_truncate(b.pool, b.seq, 16);
            double t0 = now_ms();
            for (int g = 0; g < 32; g++)
                if (timed_call(&b, 1, 16 + g) < 0) goto fail;
            double tps = 32 / ((now_ms() - t0) / 1e3);
            pair_pct[r] = 100.0 * tps * (double)m->step_bytes / (pair_bw[r] * 1e9);
        }
    }
    double pct_med = 0, pct_lo = 0, pct_hi = 0, bw_lo = 0, bw_hi = 0;
    if (probe) {
        pct_med = sort_median(pair_pct, npair);
        sort_doubles(pair_bw, npair);
        pct_lo = pair_pct[0], pct_hi = pair_pct[npair - 1], bw_lo = pair_bw[0], bw_hi = pair_bw[npair - 1];
    }
    double pre_ratio = pre_tps[1] / decode_ref;

    if (json) {
        printf("{\"model\":");
        json_write_str(stdout, model_path, strlen(model_path));
        printf(",\"backend\":");
        json_write_str(stdout, desc, strlen(desc));
        if (!gpu) printf(",\"simd\":\"%s\"", backend_cpu_simd()); /* the CPU backend's kernels */
        printf(",\"params\":%llu,\"weight_type\":\"%s\",\"step_bytes\":%llu,\"threads\":%d,"
               "\"read_gbs\":%.2f,\"roofline_tok_s\":%.2f,\"decode_tok_s\":%.2f,\"roofline_pct\":%.1f,"
               "\"roofline_pct_paired\":%.1f,"
               "\"prefill128_tok_s\":%.2f,\"prefill_decode_ratio\":%.2f,\"decode_call_ms\":%.3f,"
               "\"verify_call_ms\":%.3f,\"verify_positions\":%d,\"verify_decode_ratio\":%.3f}\n",
               (unsigned long long)m->n_params, ggml_type_name(m->layers[0].wq.file_type),
               (unsigned long long)m->step_bytes, threads, bw, roof, decode_ref, roof_pct,
               pct_med, pre_tps[1], pre_ratio, med1, medv, gamma + 1, medv / med1);
    } else {
        printf("model %s: %s, %.1fM params, %s matrices, %.1f MB read per decode step\n", model_path, m->name,
               m->n_params / 1e6, ggml_type_name(m->layers[0].wq.file_type), m->step_bytes / 1e6);
        if (gpu)
            printf("backend: %s, measured copy bandwidth %.1f GB/s (read + write) -> roofline %.1f tok/s\n", desc,
                   bw, roof);
        else
            printf("backend: %s, measured read bandwidth %.1f GB/s -> roofline %.1f tok/s\n", desc, bw, roof);
        printf("\n%8s %8s %14s %14s\n", "prompt", "gen", "prefill tok/s", "decode tok/s");
        for (int pi = 0; pi < 3; pi++)
            for (int gi = 0; gi < 2; gi++)
                printf("%8d %8d %14.1f %14.1f\n", prompts[pi], gens[gi], pre_tps[pi], dec_tps[pi][gi]);
        printf("\ndecode (prompt 16, gen 32): %.1f tok/s = %.1f%% of roofline\n", decode_ref, roof_pct);
        if (probe)
            printf("decode against a bandwidth probe run just before it (%d runs, probes %.1f-%.1f GB/s): "
                   "median %.1f%% of roofline (range %.1f-%.1f%%)\n",
                   npair, bw_lo, bw_hi, pct_med, pct_lo, pct_hi);
        printf("prefill 128 / decode: %.2fx\n", pre_ratio);
        printf("verify call (%d positions) / decode call (1 position) at context %d: %.3f ms / %.3f ms = %.2fx\n",
               gamma + 1, ctx, medv, med1, medv / med1);
        if (gpu)
            printf("decode step %.3f ms moves %.1f MB of weights: %.0f GB/s = %.1f%% of the measured copy bandwidth\n",
                   med1, m->step_bytes / 1e6, m->step_bytes / (med1 * 1e-3) / 1e9,
                   100.0 * m->step_bytes / (med1 * 1e-3) / 1e9 / bw);
        bench_profile(be, &b, ctx, 32, gamma);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "specd bench: %s\n", b.err);
done:
    membw_destroy(probe);
    free(b.logits);
    free(b.toks);
    if (b.pool) kv_seq_destroy(b.pool, b.seq);
    kv_pool_destroy(b.pool);
    model_free(b.m);
    backend_destroy(be);
    return rc;
}
