/* cmd_generate.c — `specd generate`: prefill a prompt, then decode with
 * speculation (a draft model proposes, the target verifies γ+1 positions per
 * call) or plainly, streaming text to stdout (or one JSON object with --json).
 * --compare-plain runs plain decoding first in the same process and reports
 * the measured speedup next to the cost model's prediction.
 * Without a model it runs on a demo pair with random weights and says so. */
#include "cli/penalty_args.h"
#include "cli/cmd.h"
#include "cli/datadir.h"
#include "cli/hub.h"
#include "cli/util.h"
#include "engine/engine.h"

#include "policy/config.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GEN_MAX_REPEAT 99

static void generate_usage(FILE *f) {
    fprintf(f,
            "usage: specd generate [-c config.yaml] [-m TARGET.gguf] [--draft DRAFT.gguf] [-p PROMPT] [-n N]\n"
            "                      [--gamma G | --adaptive] [--gamma-min G] [--gamma-max G] [--no-spec]\n"
            "                      [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
            "                      [--backend auto|cpu|cuda] [--device N] [--tensor-parallel N] [--no-bos] [--json]\n"
            "                      [--compare-plain [--repeat N]] [--method auto|draft|ngram|off]\n"
            "                      [--tree off|auto|B/D/K] [--medusa HEADS.gguf] [--eagle HEAD.gguf] [--quiet]\n"
            "                      [--kv-type f32|f16]\n"
            "  -c FILE      config file (default: config.yaml when present), validated as `specd serve` does:\n"
            "               models, engine and speculation settings (flags given here override them)\n"
            "  -m MODEL     target GGUF (llama family); overrides the config. With neither, the built-in\n"
            "               pair (a small llama trained on Shakespeare and its distilled draft)\n"
            "  --draft D    draft GGUF sharing the target's tokenizer: enables speculative decoding\n"
            "  -hf REPO[:QUANT], --hf-draft REPO[:QUANT]  target / draft from a Hugging Face repository\n"
            "               (downloaded once into the cache, see specd pull)\n"
            "  --gamma G    fixed speculation depth (1..16); --adaptive picks γ per step (default when\n"
            "               a draft is given) within [--gamma-min, --gamma-max] (default 2..8)\n"
            "  --no-spec    plain decoding even with a draft\n"
            "  --method M   proposer: auto (n-gram lookup when the text repeats, else the draft; default),\n"
            "               draft, ngram (prompt lookup, no draft model needed) or off\n"
            "  --verify V   rejection (min(1,p/q) + residual; default) or coupled (Gumbel-max with shared\n"
            "               noise: the seeded output equals --no-spec's token for token, any gamma/method)\n"
            "  --tree T     tree speculation: auto (per step the shape controller picks the chain or a\n"
            "               tree of up to 16 nodes, 5 levels, 3 children), B/D/K (every step a tree of at\n"
            "               most B nodes, D levels, K children per node) or off (chains; default: the\n"
            "               config's speculation.tree)\n"
            "  --medusa H   Medusa heads for the target (specd train-medusa): speculate with them\n"
            "  --eagle H    an EAGLE-3 head for the target (specd convert-eagle3): speculate with it\n"
            "               (--method eagle implied): chains, or its dynamic trees with --tree auto|B/D/K\n"
            "  -p PROMPT    prompt text (default: empty = generate from BOS); -n N tokens (default 64)\n"
            "  --temp T     temperature, 0 = greedy (default 0.8); --top-k/--top-p/--min-p filters apply\n"
            "               identically to draft and target\n"
            PENALTY_ARGS_USAGE
            "  --seed S     seed of the counter-based sampler (default 42)\n"
            "  --kv-type T  the KV cache's elements: f16 (half the memory and attention's reads) or f32\n"
            "               (default: the config's engine.kv_type, f16)\n"
            "  --backend B  auto (CUDA when built with it and a GPU is present; default), cpu or cuda;\n"
            "               --device N picks the GPU (default 0)\n"
            "  --tensor-parallel N  split the target over N backends (GPUs --device .. --device+N-1;\n"
            "               on the CPU, N shards computed one after another: a check of the sharding)\n"
            "  --compare-plain  also run plain decoding in the same process and print the speedup\n"
            "  --repeat N   with --compare-plain: N plain/speculative pairs back to back (default 1); the\n"
            "               speedup is the median of the pairs' ratios (a shared host's speed drifts)\n"
            "  --json       print one JSON object (prompt_tokens, tokens, text, timings, speculation)\n");
}

/* The built-in pair (cli/data/default-pair/, installed with specd): a small
 * llama specd trained on the Shakespeare corpus and the draft it distilled
 * from it (cli/data/default-pair/reproduce.sh makes both). Returns 0 and the
 * paths, or -1 with err when the files are not where specd's data files are. */
int cmd_default_pair(const char **target, const char **draft, char *err, size_t errlen) {
    static char tpath[1024], dpath[1024];
    if (cli_data_file("default-pair/target.gguf", tpath, sizeof(tpath)) != 0 ||
        cli_data_file("default-pair/draft.gguf", dpath, sizeof(dpath)) != 0) {
        snprintf(err, errlen, "no model given, and the built-in pair is not installed (looked in %s); pass -m "
                              "MODEL.gguf or set models.target", tpath);
        return -1;
    }
    fprintf(stderr, "specd: no model given: using the built-in pair %s + %s, a 4.5M-parameter llama specd trained on "
                    "Shakespeare's plays and a draft distilled from it (it writes Shakespeare-like verse, not "
                    "answers).\n", tpath, dpath);
    char cache[1024];
    if (cmd_models_hint(NULL, 0) > 0) {
        fprintf(stderr, "specd: models in the cache (%s; `specd models` describes them), use one with -hf:\n",
                hub_cache_dir(cache, sizeof(cache)));
        int n = cmd_models_hint(stderr, 8);
        if (n > 8) fprintf(stderr, "    ... and %d more\n", n - 8);
    } else {
        fprintf(stderr, "specd: for a real chat model, fetch a small target + draft pair that share one tokenizer "
                        "(2.2 GB, chat speed on a CPU) and serve it:\n"
                        "    specd serve -hf " SPECD_RECOMMENDED_TARGET " --hf-draft " SPECD_RECOMMENDED_DRAFT "\n");
    }
    fprintf(stderr, "specd: or pass -m MODEL.gguf [--draft DRAFT.gguf], or set models.target in config.yaml.\n");
    *target = tpath;
    *draft = dpath;
    return 0;
}

typedef struct {
    int32_t *out;     /* generated ids */
    int n_out;
    char *text;
    size_t text_len;
    const char *finish;
    double prefill_ms, decode_ms;
    spec_stats st;
    int gamma_hist[GAMMA_MAX + 1];
} gen_result;

/* Runs one generation through the engine API; streams text to `stream` when
 * non-NULL. */
static int run_generation(engine *e, const int32_t *prompt, int n_prompt, int n_gen, spec_mode mode, int method,
                          const sampler_config *sc, uint64_t seed, FILE *stream, gen_result *r, char *err,
                          size_t errlen) {
    memset(r, 0, sizeof(*r));
    r->out = malloc(sizeof(int32_t) * (size_t)(n_gen + GAMMA_MAX + 2));
    r->text = malloc((size_t)ENGINE_TEXT_MAX * (size_t)(n_gen + 2));
    if (!r->out || !r->text) return snprintf(err, errlen, "out of memory"), -1;
    r->finish = "length";
    cli_waker w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}; /* wakes this thread on events */
    uint64_t seen = 0;
    engine_request rq = {.prompt = prompt, .n_prompt = n_prompt, .sc = *sc, .seed = seed, .max_tokens = n_gen,
                         .mode = mode, .method = method >= 0 ? (spec_method)method : SPEC_METHOD_AUTO,
                         .method_set = method >= 0, .notify = cli_waker_notify, .user = &w};
    uint64_t id = 0;
    if (engine_submit(e, &rq, &id, err, errlen) != ENGINE_OK) return -1;
    for (bool done = false; !done;) {
        engine_event ev;
        int got = engine_poll(e, id, &ev);
        if (got < 0) break;
        if (got == 0) {
            cli_waker_wait(&w, &seen, -1);
            continue;
        }
        switch (ev.type) {
        case ENGINE_EV_TOKENS:
            for (int i = 0; i < ev.n_tokens && r->n_out < n_gen + GAMMA_MAX + 1; i++) r->out[r->n_out++] = ev.tokens[i];
            if (r->n_out > 1 || ev.gamma > 0) r->gamma_hist[ev.gamma]++;
            memcpy(r->text + r->text_len, ev.text, (size_t)ev.text_len);
            r->text_len += (size_t)ev.text_len;
            if (stream && ev.text_len) fwrite(ev.text, 1, (size_t)ev.text_len, stream), fflush(stream);
            break;
        case ENGINE_EV_FINISHED:
            r->finish = engine_finish_name(ev.reason);
            r->st = ev.st;
            r->prefill_ms = ev.ttft_ms;
            r->decode_ms = ev.tpot_ms * (ev.completion_tokens > 1 ? ev.completion_tokens - 1 : 0);
            done = true;
            break;
        case ENGINE_EV_ERROR:
            snprintf(err, errlen, "%s", ev.message);
            return -1;
        default: break;
        }
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return 0;
}

/* Decode tokens/s of a run: the tokens after the first over the time after it. */
static double decode_tps(const gen_result *r) {
    return r->n_out > 1 && r->decode_ms > 0 ? (r->n_out - 1) / (r->decode_ms / 1e3) : 0;
}

static void print_stats(FILE *f, const char *label, const char *method, const gen_result *r, int n_prompt) {
    const spec_stats *st = &r->st;
    double dec_tps = decode_tps(r);
    fprintf(f, "%s: prompt tokens %d, generated %d (%s), prefill %.1f tok/s, decode %.1f tok/s\n", label, n_prompt,
            r->n_out, r->finish, r->prefill_ms > 0 ? n_prompt / (r->prefill_ms / 1e3) : 0, dec_tps);
    if (st->verify_steps) {
        fprintf(f, "  speculation: %llu verify + %llu plain target passes, drafted %llu, accepted %llu, alpha %.3f, "
                   "mean accepted %.2f per verify, %.2f tokens per target pass\n",
                (unsigned long long)st->verify_steps, (unsigned long long)st->plain_steps,
                (unsigned long long)st->drafted, (unsigned long long)st->accepted, spec_stats_alpha(st),
                spec_stats_mean_accepted(st), spec_stats_tokens_per_pass(st));
        fprintf(f, "  method %s:", method);
        for (int m = 0; m < SPEC_PROPOSERS; m++) {
            const spec_method_stats *b = &st->by[m];
            if (!b->verify_steps) continue;
            fprintf(f, " %s %llu verify passes, alpha %.3f, %.2f tokens per pass;", spec_drafter_name(m),
                    (unsigned long long)b->verify_steps,
                    b->accepted + b->rejections ? (double)b->accepted / (double)(b->accepted + b->rejections) : 0.0,
                    (double)b->tokens / (double)b->verify_steps);
        }
        if (st->tree_nodes)
            fprintf(f, "\n  tree: %llu of the verify passes branched, %.2f nodes verified per pass",
                    (unsigned long long)st->tree_steps, (double)st->tree_nodes / (double)st->verify_steps);
        fprintf(f, "\n  per-position acceptance:");
        for (int i = 0; i < GAMMA_MAX && st->pos_reached[i]; i++)
            fprintf(f, " %d:%.2f", i + 1, (double)st->pos_accepted[i] / (double)st->pos_reached[i]);
        fprintf(f, "\n  gamma used:");
        for (int g = 0; g <= GAMMA_MAX; g++)
            if (r->gamma_hist[g]) fprintf(f, " %d x%d", g, r->gamma_hist[g]);
        fprintf(f, "\n  draft %.1f ms, target %.1f ms; fallbacks %llu, probes %llu, draft failures %llu, kv resets %llu\n",
                st->draft_ms, st->target_ms, (unsigned long long)st->fallbacks, (unsigned long long)st->probes,
                (unsigned long long)st->draft_failures, (unsigned long long)st->kv_resets);
    }
}

int cmd_generate(int argc, char **argv) {
    int verify = -1; /* --verify: -1 = the config's speculation.verify, 0 rejection, 1 coupled */
    const char *model_path = NULL, *draft_path = NULL, *prompt = "", *config_path = NULL;
    const char *hf = NULL, *hf_draft = NULL;
    int n_gen = 64, threads = 0, kv_type = -1, gamma_fixed = 0, backend_kind = -1, device = -1, tp = 0, repeat = 1, method = -1;
    bool gamma_flags = false;
    bool json = false, bos = true, adaptive = false, no_spec = false, compare = false, quiet = false;
    uint64_t seed = 42;
    int tree_mode = -1; /* --tree: -1 = the config's */
    const char *medusa_path = NULL, *medusa_cfg = NULL, *eagle_path = NULL;
    tree_shape tree_sh = {0, 0, 0};
    sampler_config sc = sampler_config_default();
    static sampler_bias bias[SAMPLER_MAX_BIAS];
    int pa;
    sc.temperature = 0.8f;
    gamma_params gp = gamma_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-hf") || !strcmp(a, "--hf")) hf = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--hf-draft") || !strcmp(a, "-hfd")) hf_draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-c") || !strcmp(a, "--config")) config_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-n")) n_gen = (int)arg_long(argc, argv, &i, 0, 1 << 20);
        else if (!strcmp(a, "--gamma")) gamma_fixed = (int)arg_long(argc, argv, &i, 1, GAMMA_MAX), gamma_flags = true;
        else if (!strcmp(a, "--gamma-min")) gp.gamma_min = (int)arg_long(argc, argv, &i, 1, GAMMA_MAX), gamma_flags = true;
        else if (!strcmp(a, "--gamma-max")) gp.gamma_max = (int)arg_long(argc, argv, &i, 1, GAMMA_MAX), gamma_flags = true;
        else if (!strcmp(a, "--adaptive")) adaptive = true, gamma_flags = true;
        else if (!strcmp(a, "--method")) {
            const char *v = arg_str(argc, argv, &i);
            if ((method = spec_method_parse(v)) < 0) {
                fprintf(stderr, "specd generate: --method must be auto, draft, ngram or off, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--verify")) {
            const char *v = arg_str(argc, argv, &i);
            if ((verify = spec_verify_parse(v)) < 0) {
                fprintf(stderr, "specd generate: --verify must be rejection or coupled, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--no-spec")) no_spec = true;
        else if (!strcmp(a, "--medusa")) medusa_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--eagle")) eagle_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--tree")) {
            const char *v = arg_str(argc, argv, &i);
            if (!strcmp(v, "off")) tree_mode = ENGINE_TREE_OFF;
            else if (!strcmp(v, "auto")) tree_mode = ENGINE_TREE_AUTO;
            else if (sscanf(v, "%d/%d/%d", &tree_sh.budget, &tree_sh.depth, &tree_sh.topk) == 3 && tree_sh.budget >= 1 &&
                     tree_sh.budget <= ENGINE_TREE_MAX_NODES && tree_sh.depth >= 1 && tree_sh.depth <= tree_sh.budget &&
                     tree_sh.topk >= 1 && tree_sh.topk <= 8)
                tree_mode = ENGINE_TREE_FIXED;
            else {
                fprintf(stderr, "specd generate: --tree must be off, auto or BUDGET/DEPTH/TOPK (budget 1..%d, depth "
                                "1..budget, topk 1..8), got '%s'\n", ENGINE_TREE_MAX_NODES, v);
                return 2;
            }
        }
        else if (!strcmp(a, "--compare-plain")) compare = true;
        else if (!strcmp(a, "--repeat")) repeat = (int)arg_long(argc, argv, &i, 1, GEN_MAX_REPEAT);
        else if (!strcmp(a, "--temp")) sc.temperature = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--draft-temp") || !strcmp(a, "--target-temp")) {
            fprintf(stderr, "specd generate: %s: draft and target always share ONE sampling config (--temp); "
                            "different temperatures would break the lossless guarantee\n", a);
            return 2;
        }
        else if (!strcmp(a, "--top-k")) sc.top_k = (int)arg_long(argc, argv, &i, 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) sc.top_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--min-p")) sc.min_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if ((pa = penalty_arg("generate", argc, argv, &i, &sc, bias)) != 0) { if (pa < 0) return 2; }
        else if (!strcmp(a, "--seed")) seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--kv-type")) kv_type = arg_kv_type(argc, argv, &i);
        else if (!strcmp(a, "--backend")) backend_kind = arg_backend(argc, argv, &i);
        else if (!strcmp(a, "--device")) device = (int)arg_long(argc, argv, &i, 0, 1023);
        else if (!strcmp(a, "--tensor-parallel")) tp = (int)arg_long(argc, argv, &i, 1, ENGINE_MAX_SHARDS);
        else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { generate_usage(stdout); return 0; }
        else return cli_unknown_option("generate", a, generate_usage);
    }
    char err[1024] = "";
    if (!sampler_config_validate(&sc, err, sizeof(err))) {
        fprintf(stderr, "specd generate: %s\n", err);
        return 2;
    }
    if (repeat > 1 && !compare) {
        fprintf(stderr, "specd generate: --repeat needs --compare-plain\n");
        return 2;
    }
    if (gamma_fixed) {
        if (adaptive) {
            fprintf(stderr, "specd generate: --gamma (fixed) and --adaptive exclude each other\n");
            return 2;
        }
        gp.adaptive = false;
        gp.gamma_default = gamma_fixed;
        if (gp.gamma_min > gamma_fixed) gp.gamma_min = gamma_fixed;
        if (gp.gamma_max < gamma_fixed) gp.gamma_max = gamma_fixed;
    }
    if (!gamma_params_validate(&gp, err, sizeof(err))) {
        fprintf(stderr, "specd generate: %s\n", err);
        return 2;
    }
    static char hf_path[2048], hf_draft_path[2048];
    int hrc = hub_resolve_flag("generate", hf, hf_path, sizeof(hf_path), &model_path);
    if (!hrc) hrc = hub_resolve_flag("generate", hf_draft, hf_draft_path, sizeof(hf_draft_path), &draft_path);
    if (hrc) return hrc;
    /* config.yaml through the one validated loader (as serve): models when -m is not given, and the engine
     * and speculation settings */
    pol_config *pc = NULL;
    static char cfg_model[1024], cfg_draft[1024];
    if (config_path || access("config.yaml", R_OK) == 0) {
        if (!(pc = pol_config_load(config_path ? config_path : "config.yaml", NULL, err, sizeof(err)))) {
            fprintf(stderr, "specd generate: %s\n", err);
            return 2;
        }
        snprintf(cfg_model, sizeof(cfg_model), "%s", pc->models.target);
        snprintf(cfg_draft, sizeof(cfg_draft), "%s", pc->models.draft);
        if (!model_path && cfg_model[0]) {
            static char cfg_medusa[1024];
            snprintf(cfg_medusa, sizeof(cfg_medusa), "%s", pc->models.medusa);
            model_path = cfg_model;
            if (cfg_draft[0] && !draft_path) draft_path = cfg_draft;
            if (cfg_medusa[0] && !medusa_path) medusa_cfg = cfg_medusa; /* used when the config's method says medusa */
        }
    }
    if (!model_path && cmd_default_pair(&model_path, &draft_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "specd generate: cannot create the demo models: %s\n", err);
        return 1;
    }
    if (no_spec) draft_path = NULL;

    int rc = 1;
    engine_config ec = engine_config_default();
    ec.backend = ENGINE_BACKEND_AUTO;
    if (pc) {
        engine_config_from_policy(&ec, pc);
        pol_config_free(pc);
        pc = NULL;
    }
    ec.target_path = model_path;
    ec.draft_path = draft_path;
    if (threads > 0) ec.threads = threads;
    if (kv_type >= 0) ec.kv_type = kv_type;
    if (backend_kind >= 0) ec.backend = backend_kind;
    if (device >= 0) ec.device = device;
    if (tp > 0) ec.tensor_parallel = tp;
    if (device >= 0 || tp > 0)
        for (int r = 0; r < ec.tensor_parallel; r++) ec.devices[r] = ec.device + r;
    ec.max_running = 2;
    if (ec.max_batch > ec.max_running) ec.max_batch = ec.max_running;
    if (gamma_flags || !config_path) ec.gamma = gp;
    if (no_spec) ec.mode = SPEC_MODE_OFF;
    if (verify >= 0) ec.coupled = verify == 1;
    /* with Medusa heads only a fixed shape passes through: the heads take it
     * every step instead of choosing their budget from the cost curve */
    if (tree_mode >= 0 && (!medusa_path || tree_mode == ENGINE_TREE_FIXED)) ec.tree = tree_mode;
    if (eagle_path) {
        ec.eagle_path = eagle_path;
        if (method < 0) method = SPEC_METHOD_EAGLE;
    }
    if (medusa_path) {
        ec.medusa_path = medusa_path;
        if (method < 0) method = SPEC_METHOD_MEDUSA;
    } else if (medusa_cfg) {
        ec.medusa_path = medusa_cfg;
    }
    if (tree_mode == ENGINE_TREE_FIXED)
        ec.tree_budget = tree_sh.budget, ec.tree_depth = tree_sh.depth, ec.tree_topk = tree_sh.topk;
    int eff_method = method >= 0 ? method : ec.method;
    bool speculating = ec.mode != SPEC_MODE_OFF && eff_method != SPEC_METHOD_OFF &&
                       (draft_path || eff_method != SPEC_METHOD_DRAFT);
    ec.calibrate = speculating;
    if (quiet) ec.draft_mem_warn_pct = 1e9f;
    engine_status est;
    engine *e = engine_create(&ec, &est, err, sizeof(err));
    int32_t *ids = NULL;
    gen_result plain = {0}, spec = {0};
    engine_stats es = {0};
    if (!e) {
        cli_load_failed("generate", est, err, CLI_OOM_HINT_CONFIG);
        goto done;
    }
    size_t plen = strlen(prompt);
    int cap = (int)plen + 8;
    ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n_prompt = ids ? engine_tokenize(e, prompt, plen, bos, false, ids, cap) : -1;
    if (n_prompt <= 0) {
        fprintf(stderr, "specd generate: %s\n", n_prompt == 0 ? "empty prompt and --no-bos: nothing to condition on"
                                                              : "cannot tokenize the prompt");
        goto done;
    }
    if (n_gen < 1) {
        rc = 0;
        goto done;
    }
    bool has_draft = draft_path != NULL;
    if (compare && speculating &&
        run_generation(e, ids, n_prompt, n_gen, SPEC_MODE_OFF, method, &sc, seed, NULL, &plain, err, sizeof(err)) != 0) {
        fprintf(stderr, "specd generate: %s\n", err);
        goto done;
    }
    if (run_generation(e, ids, n_prompt, n_gen, speculating ? SPEC_MODE_AUTO : SPEC_MODE_OFF, method, &sc, seed,
                       json ? NULL : stdout, &spec, err, sizeof(err)) != 0) {
        fprintf(stderr, "\nspecd generate: %s\n", err);
        goto done;
    }
    double dec_tps = decode_tps(&spec), plain_tps = decode_tps(&plain);
    /* more plain/speculative pairs: each pair's ratio, then the median */
    double ratios[GEN_MAX_REPEAT];
    int n_ratios = 0;
    if (plain_tps > 0) ratios[n_ratios++] = dec_tps / plain_tps;
    for (int r = 1; r < repeat && plain_tps > 0; r++) {
        gen_result p2 = {0}, s2 = {0};
        int bad = run_generation(e, ids, n_prompt, n_gen, SPEC_MODE_OFF, method, &sc, seed, NULL, &p2, err,
                                 sizeof(err)) ||
                  run_generation(e, ids, n_prompt, n_gen, SPEC_MODE_AUTO, method, &sc, seed, NULL, &s2, err,
                                 sizeof(err));
        double pt = decode_tps(&p2), st = decode_tps(&s2);
        free(p2.out), free(p2.text), free(s2.out), free(s2.text);
        if (bad) {
            fprintf(stderr, "specd generate: %s\n", err);
            goto done;
        }
        if (pt > 0) ratios[n_ratios++] = st / pt;
    }
    double speedup = 0, sp_lo = 0, sp_hi = 0;
    if (n_ratios) {
        speedup = sort_median(ratios, n_ratios);
        sp_lo = ratios[0], sp_hi = ratios[n_ratios - 1];
    }
    engine_get_stats(e, &es);
    /* the cost model's prediction at the measured α and costs, for the γ mix used */
    double pred = 0;
    const gamma_costs *costs = &es.costs;
    if (spec.st.verify_steps) /* at the run's mean context */
        pred = engine_predicted_speedup(costs, spec_stats_alpha(&spec.st), spec.gamma_hist, n_prompt + spec.n_out / 2);
    if (json) {
        printf("{\"model\":");
        json_write_str(stdout, model_path, strlen(model_path));
        printf(",\"target_id\":\"%s\"", es.target_id);
        if (has_draft) {
            printf(",\"draft\":");
            json_write_str(stdout, draft_path, strlen(draft_path));
            printf(",\"draft_id\":\"%s\",\"draft_mem_pct\":%.2f", es.draft_id, es.draft_mem_pct);
        }
        printf(",\"prompt_tokens\":[");
        for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("],\"tokens\":[");
        for (int i = 0; i < spec.n_out; i++) printf("%s%d", i ? "," : "", spec.out[i]);
        printf("],\"text\":");
        json_write_str(stdout, spec.text, spec.text_len);
        printf(",\"finish_reason\":\"%s\",\"timings\":{\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
               "\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f}",
               spec.finish, spec.prefill_ms, spec.decode_ms,
               spec.prefill_ms > 0 ? n_prompt / (spec.prefill_ms / 1e3) : 0, dec_tps);
        const spec_stats *st = &spec.st;
        printf(",\"method\":\"%s\",\"by_method\":{", speculating ? spec_method_name((spec_method)eff_method) : "off");
        for (int m = 0; m < SPEC_PROPOSERS; m++)
            printf("%s\"%s\":{\"verify_steps\":%llu,\"drafted\":%llu,\"accepted\":%llu,\"tokens\":%llu}", m ? "," : "",
                   spec_drafter_name(m), (unsigned long long)st->by[m].verify_steps,
                   (unsigned long long)st->by[m].drafted, (unsigned long long)st->by[m].accepted,
                   (unsigned long long)st->by[m].tokens);
        printf("}");
        printf(",\"speculation\":{\"verify_steps\":%llu,\"plain_steps\":%llu,\"drafted\":%llu,\"accepted\":%llu,"
               "\"alpha\":%.4f,\"mean_accepted\":%.4f,\"tokens_per_pass\":%.4f,\"draft_ms\":%.3f,\"target_ms\":%.3f,"
               "\"fallbacks\":%llu,\"probes\":%llu,\"draft_failures\":%llu,\"kv_resets\":%llu,"
               "\"tree_steps\":%llu,\"tree_nodes\":%llu,\"per_position\":[",
               (unsigned long long)st->verify_steps, (unsigned long long)st->plain_steps,
               (unsigned long long)st->drafted, (unsigned long long)st->accepted, spec_stats_alpha(st),
               spec_stats_mean_accepted(st), spec_stats_tokens_per_pass(st), st->draft_ms, st->target_ms,
               (unsigned long long)st->fallbacks, (unsigned long long)st->probes,
               (unsigned long long)st->draft_failures, (unsigned long long)st->kv_resets,
               (unsigned long long)st->tree_steps, (unsigned long long)st->tree_nodes);
        for (int i = 0; i < GAMMA_MAX && st->pos_reached[i]; i++)
            printf("%s%.4f", i ? "," : "", (double)st->pos_accepted[i] / (double)st->pos_reached[i]);
        printf("]}");
        if (plain.n_out) {
            printf(",\"plain\":{\"tokens\":[");
            for (int i = 0; i < plain.n_out; i++) printf("%s%d", i ? "," : "", plain.out[i]);
            printf("],\"decode_tok_s\":%.2f},\"speedup\":%.3f,\"predicted_speedup\":%.3f,\"pairs\":%d,"
                   "\"speedup_min\":%.3f,\"speedup_max\":%.3f",
                   plain_tps, speedup, pred, n_ratios, sp_lo, sp_hi);
        }
        printf("}\n");
    } else {
        printf("\n");
    }
    fflush(stdout); /* the text and its newline before the statistics on stderr, also when both go to one pipe */
    if (!quiet) {
        if (plain.n_out) print_stats(stderr, "plain", "off", &plain, n_prompt);
        print_stats(stderr, speculating ? "speculative" : "plain",
                    speculating ? spec_method_name((spec_method)eff_method) : "off", &spec, n_prompt);
        if (plain.n_out && plain_tps > 0) {
            fprintf(stderr, "speedup over plain decoding: %.2fx measured, %.2fx predicted by the cost model "
                            "(draft %.3f ms/token, target %.3f ms + %.3f ms per extra position + %.2f us per cached key "
                            "+ %.3f us per row and key)\n",
                    speedup, pred, costs->draft_ms, costs->target_ms, costs->target_ms_per_pos,
                    costs->target_ms_per_key * 1e3, costs->target_ms_per_pair * 1e3);
            if (n_ratios > 1)
                fprintf(stderr, "  measured: median of %d plain/speculative pairs, range %.2fx-%.2fx\n", n_ratios,
                        sp_lo, sp_hi);
        }
        engine_info info;
        engine_get_info(e, &info);
        fprintf(stderr, "[backend: %s]\n", info.backend_desc); /* what ran the models: CPU SIMD or the GPU */
    }
    rc = 0;
done:
    free(ids);
    free(plain.out), free(plain.text), free(spec.out), free(spec.text);
    engine_destroy(e);
    return rc;
}
