/* bench_engine.c — `specd bench --concurrency 1,8,32`: drives the batch engine
 * through its public API with N concurrent streams (prompts cut from a
 * corpus), with speculation off and on (same engine, same prompts) over
 * --rounds rounds whose order is swapped each round (the second phase finds
 * the prompts in the prefix cache), and prints per concurrency the aggregate
 * tokens/s, TTFT and TPOT (mean, p50, p99), α, mean accepted length, the γ
 * speculation settled at, micro-batches per step, padding ratio, peak KV
 * blocks, and the on/off ratio per round with their median. With --trees
 * it compares speculation shapes instead (the chain path, fixed trees, the
 * auto controller) against plain decoding over --rounds alternated rounds and
 * prints medians and ranges. Not a test: it prints figures and asserts
 * nothing. */
#include "cli/cmd.h"
#include "cli/hub.h"
#include "cli/datadir.h"
#include "cli/util.h"
#include "engine/engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define BE_MAX_CONC 16
#define BE_MAX_STREAMS 1024
#define BE_MAX_CFG 12
#define BE_MAX_ROUNDS 1000
#define BE_MAX_PROMPTS 256      /* distinct prompts read from the corpus */

int bench_engine(int argc, char **argv);

/* ---- prompts ----------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    int n;
} be_prompt;

/* Up to cap prompts, then repeated to fill n_streams <= cap slots: BOS + the
 * first prompt_tokens tokens of successive non-empty corpus lines (lines
 * too short are joined with the next). Returns the distinct ones loaded. */
static int be_load_prompts(const char *path, const engine *e, int prompt_tokens, be_prompt *out, int n_streams,
                           int cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "specd bench: cannot open prompts file %s\n", path);
        return -1;
    }
    char line[8192], acc[16384];
    int n = 0;
    size_t alen = 0;
    int32_t *buf = malloc(sizeof(int32_t) * 8192);
    while (n < cap && buf && fgets(line, sizeof(line), f)) {
        size_t l = strcspn(line, "\r\n");
        if (l == 0) continue;
        if (alen + l + 1 >= sizeof(acc)) alen = 0;
        if (alen) acc[alen++] = ' ';
        memcpy(acc + alen, line, l);
        alen += l;
        int k = engine_tokenize(e, acc, alen, true, false, buf, 8192);
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

/* How one phase's requests speculate. */
typedef struct {
    char name[24];
    bool spec;
    engine_tree tree;
    tree_shape sh;              /* fixed trees: the request's bounds */
    int method;                 /* a spec_method the requests ask for, -1: the engine's (auto) */
    bool mixed;                 /* odd streams take another proposer than even ones (be_phase) */
} be_cfg;

/* --grammar: every request of every configuration (plain included) carries
 * this GBNF text, so constrained speculation is compared with constrained
 * plain decoding; NULL: unconstrained. */
static const char *be_grammar;
/* the engine has Medusa heads (the mixed configuration's odd streams use them) */
static bool be_has_medusa;

static int be_phase(engine *e, const be_prompt *prompts, int n_streams, int n_tokens, const be_cfg *cfg, float temp,
                    cli_waker *w, be_result *res) {
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
        r.sc.temperature = temp;
        r.seed = (uint64_t)i + 1;
        r.max_tokens = n_tokens;
        r.mode = cfg->spec ? SPEC_MODE_AUTO : SPEC_MODE_OFF;
        r.tree = cfg->spec ? cfg->tree : ENGINE_TREE_DEFAULT;
        if (cfg->spec && cfg->method >= 0) r.method = (spec_method)cfg->method, r.method_set = true;
        if (cfg->tree == ENGINE_TREE_FIXED)
            r.tree_budget = cfg->sh.budget, r.tree_depth = cfg->sh.depth, r.tree_topk = cfg->sh.topk;
        if (cfg->mixed) { /* even streams: the draft model's γ = 4 chains; odd: Medusa trees, or fixed 8/4/2 draft trees */
            r.method = SPEC_METHOD_DRAFT, r.method_set = true, r.tree = ENGINE_TREE_OFF;
            r.gamma = 4, r.adaptive = false, r.adaptive_set = true; /* a fixed γ: the same work each round */
            if (i % 2 && be_has_medusa) r.method = SPEC_METHOD_MEDUSA;
            else if (i % 2) r.tree = ENGINE_TREE_FIXED, r.tree_budget = 8, r.tree_depth = 4, r.tree_topk = 2;
        }
        r.grammar = be_grammar;
        r.notify = cli_waker_notify;
        r.user = w;
        engine_submit(e, &r, &ids[i], err, sizeof(err));
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
        if (n_done < n_streams) cli_waker_wait(w, &seen, 20);
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

static void be_usage(FILE *f) {
    fprintf(f,
            "usage: specd bench --concurrency N[,N...] -m TARGET.gguf [--draft DRAFT.gguf] [-n TOKENS (64)]\n"
            "                   [-hf REPO[:QUANT]] [--hf-draft REPO[:QUANT]]\n"
            "                   [--prompts FILE] [--prompt-tokens P (32)] [-t THREADS (0 = all CPUs)]\n"
            "                   [--temp T (0)] [--trees LIST] [--rounds R (5 with --trees, else 2)] [--grammar json|FILE.gbnf]\n"
            "                   [--medusa HEADS.gguf] [--eagle HEAD.gguf] [--backend auto|cpu|cuda (auto)] [--device N]\n"
            "  N streams at once through the engine API, speculation off and on (same prompts) for R\n"
            "  rounds, their order swapped each round (the second phase finds a warm prefix cache),\n"
            "  for each concurrency; prompts are the first P tokens of the corpus lines\n"
            "  (--prompts FILE, one text a line; default: the prompts.txt installed with specd, or\n"
            "  $SPECD_MODELS/corpora/tinystories_valid_30K.txt when $SPECD_MODELS is set)\n"
            "  --temp T     sampling temperature of every stream (0 = greedy; seeds 1..N)\n"
            "  --trees LIST compare speculation shapes against plain decoding instead of on/off:\n"
            "               plain (plain decoding again: an A/A control of the noise),\n"
            "               chain (the chain path, adaptive gamma; with --medusa, auto between it and Medusa),\n"
            "               draft (the draft model's chain only), medusa (Medusa trees only, --medusa),\n"
            "               eagle (the EAGLE-3 head's chains, --eagle), 4, 8, 16 (fixed trees 4/3/2, 8/4/2,\n"
            "               16/5/3 nodes/levels/children), B/D/K (any fixed tree), auto (the shape\n"
            "               controller), mixed (even streams the draft model's γ=4 chains, odd ones Medusa trees\n"
            "               with --medusa, else fixed 8/4/2 draft trees: proposers side by side in one\n"
            "               batch); eagle:SHAPE and draft:SHAPE (SHAPE auto, 4, 8, 16 or B/D/K) take that\n"
            "               tree shape with one proposer only; R rounds, the configurations' order rotated each round;\n"
            "               medians and ranges of tokens/s and of the per-round ratio to plain\n"
            "  --grammar G  every stream constrained by G (json: the JSON grammar; else a GBNF file),\n"
            "               plain decoding included: constrained speculation against constrained plain\n");
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

/* --trees LIST: cfgs[0] is plain decoding, then the list. */
static int be_parse_trees(const char *list, be_cfg *cfgs, int *n) {
    *n = 1;
    cfgs[0] = (be_cfg){"plain", false, ENGINE_TREE_OFF, {0, 0, 0}, -1, false};
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == BE_MAX_CFG) {
            fprintf(stderr, "specd bench: --trees: at most %d configurations\n", BE_MAX_CFG - 1);
            return -1;
        }
        be_cfg c = {"", true, ENGINE_TREE_FIXED, {0, 0, 0}, -1, false};
        const char *full = t;
        /* METHOD:SHAPE, a tree shape (auto, 4, 8, 16, B/D/K) of one proposer's */
        if (!strncmp(t, "eagle:", 6)) c.method = SPEC_METHOD_EAGLE, t += 6;
        else if (!strncmp(t, "draft:", 6)) c.method = SPEC_METHOD_DRAFT, t += 6;
        if (c.method >= 0 && (!strcmp(t, "plain") || !strcmp(t, "chain") || !strcmp(t, "draft") || !strcmp(t, "medusa") ||
                              !strcmp(t, "eagle") || !strcmp(t, "mixed"))) {
            fprintf(stderr, "specd bench: --trees: '%s': a METHOD: prefix takes a tree shape (auto, 4, 8, 16, B/D/K)\n",
                    full);
            return -1;
        }
        if (!strcmp(t, "plain")) c.spec = false, c.tree = ENGINE_TREE_OFF; /* an A/A control: the noise floor */
        else if (!strcmp(t, "chain")) c.tree = ENGINE_TREE_OFF;
        else if (!strcmp(t, "draft")) c.tree = ENGINE_TREE_OFF, c.method = SPEC_METHOD_DRAFT;
        else if (!strcmp(t, "medusa")) c.tree = ENGINE_TREE_OFF, c.method = SPEC_METHOD_MEDUSA;
        else if (!strcmp(t, "eagle")) c.tree = ENGINE_TREE_OFF, c.method = SPEC_METHOD_EAGLE;
        else if (!strcmp(t, "auto")) c.tree = ENGINE_TREE_AUTO;
        else if (!strcmp(t, "mixed")) c.mixed = true, c.tree = ENGINE_TREE_OFF;
        else if (!strcmp(t, "4")) c.sh = (tree_shape){4, 3, 2};
        else if (!strcmp(t, "8")) c.sh = (tree_shape){8, 4, 2};
        else if (!strcmp(t, "16")) c.sh = (tree_shape){16, 5, 3};
        else if (sscanf(t, "%d/%d/%d", &c.sh.budget, &c.sh.depth, &c.sh.topk) != 3 || c.sh.budget < 1 ||
                 c.sh.budget > ENGINE_TREE_MAX_NODES || c.sh.depth < 1 || c.sh.depth > c.sh.budget || c.sh.topk < 1 ||
                 c.sh.topk > 8) {
            fprintf(stderr, "specd bench: --trees: '%s' is not plain, chain, draft, medusa, eagle, auto, mixed, 4, 8, 16 or BUDGET/DEPTH/TOPK\n", t);
            return -1;
        }
        if (c.tree == ENGINE_TREE_FIXED && t == full)
            snprintf(c.name, sizeof(c.name), "%d/%d/%d", c.sh.budget, c.sh.depth, c.sh.topk);
        else if (c.tree == ENGINE_TREE_FIXED)
            snprintf(c.name, sizeof(c.name), "%.*s%d/%d/%d", (int)(t - full), full, c.sh.budget, c.sh.depth, c.sh.topk);
        else snprintf(c.name, sizeof(c.name), "%s", full);
        cfgs[(*n)++] = c;
    }
    return 0;
}

/* --trees: per concurrency, R rounds of every configuration (order rotated),
 * then medians and ranges. */
/* Round r gives stream i distinct prompt (i + r * conc) mod n_distinct: every
 * configuration of a round decodes the same prompts, and the rounds move on
 * through the corpus (one prompt would be one sample of the acceptance). */
static int be_compare_trees(engine *e, const be_prompt *all, int n_distinct, const int *conc, int n_conc,
                            int n_tokens, float temp, const be_cfg *cfgs, int n_cfg, int rounds, cli_waker *w) {
    be_prompt prompts[BE_MAX_STREAMS];
    engine_info info;
    engine_get_info(e, &info);
    be_has_medusa = info.has_medusa;
    printf("verify cost curve t(rows), measured at start: t(1) %.2f ms;", info.tree_t_rows[1]);
    for (int r = 2; r <= TREE_CTL_ROWS; r++)
        if (info.tree_t_rows[r] > 0) printf(" %d: %.2fx", r, info.tree_t_rows[r] / info.tree_t_rows[1]);
    printf("\n");
    printf("T=%.2f, %d tokens per stream, %d rounds per configuration (order rotated each round; the prompts move on "
           "each round)\n", (double)temp, n_tokens, rounds);
    printf("conc config      tok/s:median   min      max   x plain:median  min   max  tok/pass nodes/pass branched "
           "tree-steps%s\n", info.has_medusa ? " medusa-steps" : "");
    for (int c = 0; c < n_conc; c++) {
        double tps[BE_MAX_CFG][BE_MAX_ROUNDS], ratio[BE_MAX_CFG][BE_MAX_ROUNDS];
        spec_stats st[BE_MAX_CFG];
        uint64_t dec[BE_MAX_CFG][2], path[BE_MAX_CFG][2];
        memset(st, 0, sizeof(st));
        memset(dec, 0, sizeof(dec));
        memset(path, 0, sizeof(path));
        for (int r = 0; r < rounds; r++) {
            double plain = 0;
            double got[BE_MAX_CFG];
            for (int i = 0; i < conc[c]; i++) prompts[i] = all[(i + (int64_t)r * conc[c]) % n_distinct];
            for (int k0 = 0; k0 < n_cfg; k0++) {
                int k = (k0 + r) % n_cfg;
                be_result res;
                engine_stats a, b;
                engine_get_stats(e, &a);
                if (be_phase(e, prompts, conc[c], n_tokens, &cfgs[k], temp, w, &res) != 0 || res.errors) return 1;
                engine_get_stats(e, &b);
                got[k] = res.tok_s;
                spec_stats_add(&st[k], &res.st);
                dec[k][0] += b.tree_decisions[0] - a.tree_decisions[0];
                dec[k][1] += b.tree_decisions[1] - a.tree_decisions[1];
                path[k][0] += b.path_steps[0] - a.path_steps[0];
                path[k][1] += b.path_steps[1] - a.path_steps[1];
            }
            plain = got[0];
            for (int k = 0; k < n_cfg; k++) tps[k][r] = got[k], ratio[k][r] = plain > 0 ? got[k] / plain : 0;
        }
        for (int k = 0; k < n_cfg; k++) {
            double t = sort_median(tps[k], rounds), tlo = tps[k][0], thi = tps[k][rounds - 1];
            double x = sort_median(ratio[k], rounds), xlo = ratio[k][0], xhi = ratio[k][rounds - 1];
            uint64_t passes = st[k].verify_steps + st[k].plain_steps;
            printf("%4d %-10s %9.1f %8.1f %8.1f   %8.3f %6.3f %6.3f %8.2f %9.2f %8llu %5.0f%%", conc[c],
                   cfgs[k].name, t, tlo, thi, x, xlo, xhi, spec_stats_tokens_per_pass(&st[k]),
                   passes ? (double)st[k].tree_nodes / (double)passes : 0.0, (unsigned long long)st[k].tree_steps,
                   dec[k][0] + dec[k][1] ? 100.0 * (double)dec[k][1] / (double)(dec[k][0] + dec[k][1]) : 0.0);
            if (info.has_medusa)
                printf("  %10.0f%%", path[k][0] + path[k][1] ? 100.0 * (double)path[k][1] / (double)(path[k][0] + path[k][1]) : 0.0);
            printf("\n");
        }
        fflush(stdout);
    }
    printf("\nx plain: per-round ratio of tokens/s to plain decoding (same round); tok/pass: tokens per target pass;\n"
           "nodes/pass: tree nodes verified per target pass; branched: tree steps that branched; tree-steps: share\n"
           "of the tree-enabled sequences' steps that verified a tree (the rest took the chain path)%s.\n",
           info.has_medusa ? ";\nmedusa-steps: share of the engine steps whose auto requests took Medusa (path_ctl)" : "");
    return 0;
}

int bench_engine(int argc, char **argv) {
    const char *target = NULL, *draft = NULL, *prompts_path = NULL, *hf = NULL, *hf_draft = NULL;
    int conc[BE_MAX_CONC], n_conc = 0, n_tokens = 64, prompt_tokens = 32, threads = 0;
    int backend = ENGINE_BACKEND_AUTO, device = 0;
    float temp = 0.0f;
    int rounds = 0, n_cfg = 0; /* 0: the mode's default (--trees 5, on/off 2) */
    bool trees = false;
    const char *grammar_arg = NULL, *medusa = NULL, *eagle = NULL;
    be_cfg cfgs[BE_MAX_CFG];
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
        else if (!strcmp(a, "--medusa")) medusa = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--eagle")) eagle = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-hf") || !strcmp(a, "--hf")) hf = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--hf-draft") || !strcmp(a, "-hfd")) hf_draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-n")) n_tokens = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--prompts")) prompts_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--prompt-tokens")) prompt_tokens = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 0, 1024);
        else if (!strcmp(a, "--backend")) backend = arg_backend(argc, argv, &i);
        else if (!strcmp(a, "--device")) device = (int)arg_long(argc, argv, &i, 0, 1023);
        else if (!strcmp(a, "--temp")) temp = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--rounds")) rounds = (int)arg_long(argc, argv, &i, 1, 1000);
        else if (!strcmp(a, "--grammar")) grammar_arg = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--trees")) {
            if (be_parse_trees(arg_str(argc, argv, &i), cfgs, &n_cfg) != 0) return 2;
            trees = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            be_usage(stdout);
            return 0;
        } else
            return cli_unknown_option("bench", a, be_usage);
    }
    static char hf_path[2048], hf_draft_path[2048];
    int hrc = hub_resolve_flag("bench", hf, hf_path, sizeof(hf_path), &target);
    if (!hrc) hrc = hub_resolve_flag("bench", hf_draft, hf_draft_path, sizeof(hf_draft_path), &draft);
    if (hrc) return hrc;
    if (n_conc == 0) {
        be_usage(stderr);
        return 2;
    }
    if (!target) { /* the built-in pair, draft included */
        char err[1024];
        const char *d;
        if (cmd_default_pair(&target, &d, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd bench: %s\n", err);
            return 2;
        }
        if (!draft) draft = d;
    }
    char *grammar_text = NULL;
    if (grammar_arg && !strcmp(grammar_arg, "json")) {
        be_grammar = grammar_json_gbnf();
    } else if (grammar_arg) {
        if (!(be_grammar = grammar_text = read_file(grammar_arg, NULL))) {
            fprintf(stderr, "specd bench: cannot read the grammar %s\n", grammar_arg);
            return 1;
        }
    }
    char defpath[1024];
    if (!prompts_path) {
        /* the test suite's corpus when $SPECD_MODELS names the shared models, else the prompts installed with specd */
        const char *dir = getenv("SPECD_MODELS");
        if (dir && *dir) snprintf(defpath, sizeof(defpath), "%s/corpora/tinystories_valid_30K.txt", dir);
        if ((!dir || !*dir || access(defpath, R_OK) != 0) && cli_data_file("prompts.txt", defpath, sizeof(defpath)) != 0) {
            fprintf(stderr, "specd bench: no prompts file (looked in %s): give one with --prompts FILE\n", defpath);
            return 2;
        }
        prompts_path = defpath;
    }
    int max_conc = 0;
    for (int i = 0; i < n_conc; i++) max_conc = conc[i] > max_conc ? conc[i] : max_conc;

    engine_config cfg = engine_config_default();
    cfg.target_path = target;
    cfg.draft_path = draft;
    cfg.medusa_path = medusa;
    cfg.eagle_path = eagle;
    cfg.threads = threads;
    cfg.backend = backend; /* auto: the GPU when built with CUDA and one is present, as serve and generate */
    cfg.device = cfg.devices[0] = device;
    cfg.max_running = max_conc;
    cfg.max_ctx = prompt_tokens + n_tokens + GAMMA_MAX + 16;
    if (trees) cfg.tree = ENGINE_TREE_AUTO; /* bounds 16/5/3; each request picks its shape */
    char err[1024];
    double tl = now_ms();
    engine_status est;
    engine *e = engine_create(&cfg, &est, err, sizeof(err));
    if (!e) {
        cli_load_failed("bench", est, err, CLI_OOM_HINT_MODEL);
        free(grammar_text);
        return 1;
    }
    tl = now_ms() - tl;
    int pcap = max_conc > BE_MAX_PROMPTS ? max_conc : BE_MAX_PROMPTS;
    be_prompt *prompts = calloc((size_t)pcap, sizeof(be_prompt));
    int n_distinct =
        prompts ? be_load_prompts(prompts_path, e, prompt_tokens, prompts, max_conc, pcap) : -1;
    if (n_distinct < 0) {
        engine_destroy(e);
        free(prompts);
        free(grammar_text);
        return 1;
    }
    cli_waker w = {.gen = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    engine_stats st;
    engine_get_stats(e, &st);
    engine_info ei;
    engine_get_info(e, &ei);
    printf("target %s (%s) on %s\n", target, st.target_id, ei.backend_desc);
    if (draft) printf("draft  %s (%s): memory %.1f%% of the target's (weights + KV)\n", draft, st.draft_id,
                      st.draft_mem_pct);
    printf("cost model: target %.2f ms + %.3f ms/position + %.2f us/cached key + %.3f us/(row, key), draft %.3f "
           "ms/token; engine ready in %.0f ms\n",
           st.costs.target_ms, st.costs.target_ms_per_pos, st.costs.target_ms_per_key * 1e3,
           st.costs.target_ms_per_pair * 1e3, st.costs.draft_ms, tl);
    printf("%d %s streams x %d tokens, prompts of %d tokens (%d distinct) from %s\n\n", max_conc, temp > 0 ? "sampled" : "greedy", n_tokens,
           prompt_tokens, n_distinct, prompts_path);
    /* warm-up: touch the weights and the code paths once */
    be_result warm;
    be_cfg on_cfg = {"on", true, ENGINE_TREE_DEFAULT, {0, 0, 0}, -1, false}, off_cfg = {"off", false, ENGINE_TREE_DEFAULT, {0, 0, 0}, -1, false};
    be_phase(e, prompts, 1, 8, draft != NULL ? &on_cfg : &off_cfg, temp, &w, &warm);
    int rc = 0;
    if (trees) {
        rc = be_compare_trees(e, prompts, n_distinct, conc, n_conc, n_tokens, temp, cfgs, n_cfg, rounds ? rounds : 5, &w);
        goto done;
    }

    printf("conc mode     tok/s  TTFT ms:mean    p50      p99 TPOT ms:mean  p50     p99  alpha acclen gamma/spec  mb/stp  "
           "pad   KV peak\n");
    /* R rounds per concurrency, the order of off and on swapped each round:
     * the phase that runs second finds the prompts' KV blocks in the prefix
     * cache and the weights warm, so a fixed order favours one mode */
    if (!rounds) rounds = draft ? 2 : 1;
    for (int c = 0; c < n_conc && rc == 0; c++) {
        be_result off = {0}, on = {0};
        double ratio[BE_MAX_ROUNDS];
        for (int r = 0; r < rounds && rc == 0; r++) {
            for (int k = 0; k < (draft ? 2 : 1); k++) {
                bool is_on = draft && (k ^ (r & 1)); /* round 0: off then on; round 1: on then off; ... */
                be_result *res = is_on ? &on : &off;
                if (be_phase(e, prompts, conc[c], n_tokens, is_on ? &on_cfg : &off_cfg, temp, &w, res) != 0) {
                    rc = 1;
                    break;
                }
                be_row(conc[c], is_on ? "on" : "off", res, st.kv_total);
            }
            if (rc == 0 && draft) {
                ratio[r] = off.tok_s > 0 ? on.tok_s / off.tok_s : 0;
                printf("      round %d (%s first): on/off tokens/s ratio %.2f\n", r + 1, r & 1 ? "on" : "off", ratio[r]);
            }
        }
        if (rc) break;
        if (draft && rounds > 1) {
            double med = sort_median(ratio, rounds);
            printf("      on/off tokens/s ratio: median %.2f [%.2f, %.2f] over %d rounds, order swapped each round\n", med,
                   ratio[0], ratio[rounds - 1], rounds);
        }
        if (conc[c] == 1) { /* what the engine thread and the API cost a single stream (the last round's phases) */
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
done:
    engine_destroy(e);
    for (int i = 0; i < n_distinct; i++) free(prompts[i].ids);
    free(prompts);
    free(grammar_text);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}
