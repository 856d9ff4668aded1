/* bench_engine.c — `specd bench --concurrency 1,8,32`: drives the batch engine
 * through its public API with N concurrent greedy streams (prompts cut from a
 * corpus), once with speculation off and once on (same engine, same prompts),
 * and prints per concurrency the aggregate tokens/s, TTFT and TPOT (mean, p50,
 * p99), α, mean accepted length, the γ speculation settled at, micro-batches
 * per step, padding ratio, peak KV blocks, and the on/off ratio. Not a test:
 * it prints figures and asserts nothing. */
#include "cli/cmd.h"
#include "cli/hub.h"
#include "cli/util.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BE_MAX_CONC 16
#define BE_MAX_STREAMS 1024

int bench_engine(int argc, char **argv);

/* ---- notify → condition variable ------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
} be_wake;

static void be_notify(void *user) {
    be_wake *w = user;
    pthread_mutex_lock(&w->mu);
    w->gen++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void be_wait(be_wake *w, uint64_t *seen) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&w->mu);
    while (w->gen == *seen && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {
    }
    *seen = w->gen;
    pthread_mutex_unlock(&w->mu);
}

/* ---- prompts ----------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    int n;
} be_prompt;

/* n_streams prompts: BOS + the first prompt_tokens tokens of successive
 * non-empty corpus lines (lines too short are joined with the next). */
static int be_load_prompts(const char *path, const tokenizer *tok, int prompt_tokens, be_prompt *out, int n_streams) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "specd bench: cannot open prompts file %s\n", path);
        return -1;
    }
    char line[8192], acc[16384];
    int n = 0;
    size_t alen = 0;
    int32_t *buf = malloc(sizeof(int32_t) * 8192);
    while (n < n_streams && buf && fgets(line, sizeof(line), f)) {
        size_t l = strcspn(line, "\r\n");
        if (l == 0) continue;
        if (alen + l + 1 >= sizeof(acc)) alen = 0;
        if (alen) acc[alen++] = ' ';
        memcpy(acc + alen, line, l);
        alen += l;
        int k = tok_encode(tok, acc, alen, true, false, buf, 8192);
        if (k < 0) k = 8192;
        if (k < prompt_tokens) continue;
        out[n].ids = malloc(sizeof(int32_t) * (size_t)prompt_tokens);
        if (!out[n].ids) break;
        memcpy(out[n].ids, buf, sizeof(int32_t) * (size_t)prompt_tokens);
        out[n].n = prompt_tokens;
        n++;
        alen = 0;
    }
    free(buf);
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "specd bench: no prompt of %d tokens in %s\n", prompt_tokens, path);
        return -1;
    }
    for (int i = n; i < n_streams; i++) out[i] = out[i % n]; /* reuse (shared pointers) */
    return n;
}

/* ---- one phase: N streams, speculation on or off ---------------------------- */

typedef struct {
    double tok_s, wall_ms;
    double ttft_mean, ttft_p50, ttft_p99, tpot_mean, tpot_p50, tpot_p99;
    uint64_t tokens;
    spec_stats st;
    double mb_per_step, padding;
    uint64_t steps;
    int kv_peak;
    int errors;
} be_result;

static double pct(double *v, int n, double p) {
    sort_doubles(v, n);
    int k = (int)(p * (n - 1) + 0.5);
    return v[k < n ? k : n - 1];
}

static int be_phase(engine *e, const be_prompt *prompts, int n_streams, int n_tokens, bool spec, be_wake *w,
                    be_result *res) {
    memset(res, 0, sizeof(*res));
    uint64_t ids[BE_MAX_STREAMS];
    bool done[BE_MAX_STREAMS] = {false};
    double ttft[BE_MAX_STREAMS], tpot[BE_MAX_STREAMS];
    char err[512];
    engine_stats s0, s;
    engine_get_stats(e, &s0);
    double t0 = now_ms();
    for (int i = 0; i < n_streams; i++) {
        engine_request r = {0};
        r.prompt = prompts[i].ids;
        r.n_prompt = prompts[i].n;
        r.sc = sampler_config_default();
        r.sc.temperature = 0.0f;
        r.seed = (uint64_t)i + 1;
        r.max_tokens = n_tokens;
        r.mode = spec ? SPEC_MODE_AUTO : SPEC_MODE_OFF;
        r.notify = be_notify;
        r.user = w;
        ids[i] = engine_submit(e, &r, err, sizeof(err));
        if (!ids[i]) {
            fprintf(stderr, "specd bench: submit: %s\n", err);
            return -1;
        }
    }
    int n_done = 0;
    uint64_t seen = 0;
    while (n_done < n_streams) {
        for (int i = 0; i < n_streams; i++) {
            engine_event ev;
            while (!done[i] && engine_poll(e, ids[i], &ev) == 1) {
                if (ev.type == ENGINE_EV_FINISHED || ev.type == ENGINE_EV_ERROR) {
                    done[i] = true;
                    n_done++;
                    if (ev.type == ENGINE_EV_ERROR) {
                        fprintf(stderr, "specd bench: stream %d: %s\n", i, ev.message);
                        res->errors++;
                    }
                    ttft[i] = ev.ttft_ms;
                    tpot[i] = ev.tpot_ms;
                    res->tokens += (uint64_t)ev.completion_tokens;
                    spec_stats_add(&res->st, &ev.st);
                }
            }
        }
        engine_get_stats(e, &s);
        int used = s.kv_total - s.kv_free_target;
        if (used > res->kv_peak) res->kv_peak = used;
        if (n_done < n_streams) be_wait(w, &seen);
    }
    res->wall_ms = now_ms() - t0;
    engine_get_stats(e, &s);
    res->tok_s = res->tokens / (res->wall_ms / 1e3);
    double sum_ttft = 0, sum_tpot = 0;
    for (int i = 0; i < n_streams; i++) sum_ttft += ttft[i], sum_tpot += tpot[i];
    res->ttft_mean = sum_ttft / n_streams;
    res->tpot_mean = sum_tpot / n_streams;
    res->ttft_p50 = pct(ttft, n_streams, 0.50), res->ttft_p99 = pct(ttft, n_streams, 0.99);
    res->tpot_p50 = pct(tpot, n_streams, 0.50), res->tpot_p99 = pct(tpot, n_streams, 0.99);
    /* per-phase figures from the engine's running means */
    res->steps = s.steps - s0.steps;
    double mb = s.mean_microbatches * (double)s.steps - s0.mean_microbatches * (double)s0.steps;
    double pad = s.padding_ratio * (double)s.steps - s0.padding_ratio * (double)s0.steps;
    res->mb_per_step = res->steps ? mb / (double)res->steps : 0;
    res->padding = res->steps ? pad / (double)res->steps : 0;
    return 0;
}

/* ---- command ------------------------------------------------------------------ */

static void be_usage(void) {
    fprintf(stderr,
            "usage: specd bench --concurrency N[,N...] -m TARGET.gguf [--draft DRAFT.gguf] [-n TOKENS (64)]\n"
            "                   [-hf REPO[:QUANT]] [--hf-draft REPO[:QUANT]]\n"
            "                   [--prompts FILE] [--prompt-tokens P (32)] [-t THREADS (0 = all CPUs)]\n"
            "  N greedy streams at once through the engine API, speculation off then on (same prompts),\n"
            "  for each concurrency; prompts are the first P tokens of the corpus lines\n"
            "  (default ../shared/models/corpora/tinystories_valid_30K.txt beside the source tree)\n");
}

static void be_row(int conc, const char *mode, const be_result *r, int kv_total) {
    double alpha = spec_stats_alpha(&r->st), acc = spec_stats_mean_accepted(&r->st);
    double gam = r->st.verify_steps ? (double)r->st.drafted / (double)r->st.verify_steps : 0;
    double spec_frac = r->st.verify_steps + r->st.plain_steps
                           ? (double)r->st.verify_steps / (double)(r->st.verify_steps + r->st.plain_steps) : 0;
    printf("%4d  %-4s %9.1f %8.1f %8.1f %8.1f %7.2f %7.2f %7.2f %6.3f %6.2f %5.2f/%3.0f%% %6.2f %6.3f %5d/%d%s\n",
           conc, mode, r->tok_s, r->ttft_mean, r->ttft_p50, r->ttft_p99, r->tpot_mean, r->tpot_p50, r->tpot_p99,
           alpha, acc, gam, 100 * spec_frac, r->mb_per_step, r->padding, r->kv_peak, kv_total,
           r->errors ? "  (errors!)" : "");
}

int bench_engine(int argc, char **argv) {
    const char *target = NULL, *draft = NULL, *prompts_path = NULL, *hf = NULL, *hf_draft = NULL;
    int conc[BE_MAX_CONC], n_conc = 0, n_tokens = 64, prompt_tokens = 32, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--concurrency")) {
            const char *list = arg_str(argc, argv, &i);
            for (const char *p = list; *p && n_conc < BE_MAX_CONC;) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > BE_MAX_STREAMS || (*end && *end != ',')) {
                    fprintf(stderr, "specd bench: bad value for --concurrency: %s (1..%d, comma-separated)\n", list,
                            BE_MAX_STREAMS);
                    return 2;
                }
                conc[n_conc++] = (int)v;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) target = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-hf") || !strcmp(a, "--hf")) hf = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--hf-draft") || !strcmp(a, "-hfd")) hf_draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-n")) n_tokens = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--prompts")) prompts_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--prompt-tokens")) prompt_tokens = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 0, 1024);
        else {
            be_usage();
            return 2;
        }
    }
    static char hf_path[2048], hf_draft_path[2048];
    int hrc = hub_resolve_flag("bench", hf, hf_path, sizeof(hf_path), &target);
    if (!hrc) hrc = hub_resolve_flag("bench", hf_draft, hf_draft_path, sizeof(hf_draft_path), &draft);
    if (hrc) return hrc;
    if (!target || n_conc == 0) {
        be_usage();
        return 2;
    }
    char defpath[1024];
    if (!prompts_path) {
        snprintf(defpath, sizeof(defpath), "%s", "/work/shared/models/corpora/tinystories_valid_30K.txt");
        const char *dir = getenv("SPECD_MODELS");
        if (dir && *dir) snprintf(defpath, sizeof(defpath), "%s/corpora/tinystories_valid_30K.txt", dir);
        prompts_path = defpath;
    }
    int max_conc = 0;
    for (int i = 0; i < n_conc; i++) max_conc = conc[i] > max_conc ? conc[i] : max_conc;

    engine_config cfg = engine_config_default();
    cfg.target_path = target;
    cfg.draft_path = draft;
    cfg.threads = threads;
    cfg.max_running = max_conc;
    cfg.max_ctx = prompt_tokens + n_tokens + GAMMA_MAX + 16;
    char err[1024];
    double tl = now_ms();
    engine *e = engine_create(&cfg, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "specd bench: %s\n", err);
        return 1;
    }
    tl = now_ms() - tl;
    be_prompt *prompts = calloc((size_t)max_conc, sizeof(be_prompt));
    int n_distinct = prompts ? be_load_prompts(prompts_path, engine_tokenizer(e), prompt_tokens, prompts, max_conc) : -1;
    if (n_distinct < 0) {
        engine_destroy(e);
        free(prompts);
        return 1;
    }
    be_wake w = {.gen = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    engine_stats st;
    engine_get_stats(e, &st);
    printf("target %s (%s)\n", target, st.target_id);
    if (draft) printf("draft  %s (%s): memory %.1f%% of the target's (weights + KV)\n", draft, st.draft_id,
                      st.draft_mem_pct);
    printf("cost model: target %.2f ms + %.3f ms/position + %.2f us/cached key + %.3f us/(row, key), draft %.3f "
           "ms/token; engine ready in %.0f ms\n",
           st.costs.target_ms, st.costs.target_ms_per_pos, st.costs.target_ms_per_key * 1e3,
           st.costs.target_ms_per_pair * 1e3, st.costs.draft_ms, tl);
    printf("%d greedy streams x %d tokens, prompts of %d tokens (%d distinct) from %s\n\n", max_conc, n_tokens,
           prompt_tokens, n_distinct, prompts_path);
    /* warm-up: touch the weights and the code paths once */
    be_result warm;
    be_phase(e, prompts, 1, 8, draft != NULL, &w, &warm);

    printf("conc mode     tok/s  TTFT ms:mean    p50      p99 TPOT ms:mean  p50     p99  alpha acclen gamma/spec  mb/stp  "
           "pad   KV peak\n");
    int rc = 0;
    for (int c = 0; c < n_conc && rc == 0; c++) {
        be_result off, on;
        if (be_phase(e, prompts, conc[c], n_tokens, false, &w, &off) != 0) {
            rc = 1;
            break;
        }
        be_row(conc[c], "off", &off, st.kv_total);
        if (draft) {
            if (be_phase(e, prompts, conc[c], n_tokens, true, &w, &on) != 0) {
                rc = 1;
                break;
            }
            be_row(conc[c], "on", &on, st.kv_total);
            printf("      on/off tokens/s ratio %.2f\n", off.tok_s > 0 ? on.tok_s / off.tok_s : 0);
        }
        if (conc[c] == 1) { /* what the engine thread and the API cost a single stream */
            for (int k = 0; k < (draft ? 2 : 1); k++) {
                const be_result *r = k ? &on : &off;
                /* the stream's time from submit to its last token: prefill (TTFT) + decode */
                double life = r->ttft_mean + r->tpot_mean * (double)(r->tokens > 1 ? r->tokens - 1 : 0);
                double model = r->st.draft_ms + r->st.target_ms;
                if (life > 0 && r->tpot_mean > 0)
                    printf("      single stream, speculation %s: decode %.1f tok/s (1/TPOT, as specd generate "
                           "reports it); draft and target calls %.1f%% of the stream's time\n",
                           k ? "on" : "off", 1e3 / r->tpot_mean, 100.0 * model / life);
            }
        }
        fflush(stdout);
    }
    printf("\nalpha: accepted/(accepted+rejections); acclen: accepted drafts per verify step; gamma/spec: mean drafts\n"
           "per verify step / share of target passes that verified drafts; mb/stp: micro-batches per engine step;\n"
           "pad: rectangular/real positions; KV peak: target blocks in use (of the pool).\n");
    engine_destroy(e);
    for (int i = 0; i < n_distinct; i++) free(prompts[i].ids);
    free(prompts);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}
