/* cmd_verify.c — `specd verify`: the distribution-equivalence harness. Draws N
 * sequences with plain decoding and N with speculation from one prompt and
 * tests, position by position, that the two token distributions agree (χ²
 * homogeneity, Bonferroni-corrected); the two-sample KS statistic is printed
 * beside it for comparison only. Exit 0: equivalent, 1: they differ, 2: usage
 * or setup error, or nothing testable. */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/spec/proposers/draft_eagle.h"
#include "engine/spec/proposers/draft_medusa.h"
#include "engine/spec/proposers/draft_tree.h"
#include "cli/penalty_args.h"
#include "engine/grammar/grammar.h"
#include "gateway/json_schema.h"

#include <jansson.h>
#include "engine/sample/rng.h"
#include "engine/spec/proposers/pair_load.h"
#include "engine/spec/spec.h"
#include "engine/spec/stattest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void verify_usage(FILE *f) {
    fprintf(f,
            "usage: specd verify -m TARGET.gguf --draft DRAFT.gguf [--samples N] [--positions K] [--temp T]\n"
            "                    [--top-k K] [--top-p P] [--min-p P] [--gamma G | --adaptive] [-p PROMPT]\n"
            "                    [--seed S] [--alpha A] [-t THREADS] [--quiet] [--broken]\n"
            "                    [--method draft|ngram|auto] [--ngram-min N] [--ngram-max N] [--verify rejection|coupled]\n"
            "                    [--tree B/D/K] [--medusa HEADS.gguf] [--eagle HEAD.gguf]\n"
            "  Draws N sequences with plain decoding and N with speculation (independent seeds) for the\n"
            "  same prompt, K tokens each, and tests per position that the token distributions agree:\n"
            "  chi-square homogeneity on the two token histograms (tokens with expected count < 5 merged),\n"
            "  Bonferroni-corrected over the K positions at level --alpha. End-of-generation is a token\n"
            "  category; a sequence that ended contributes nothing to later positions.\n"
            "  -m, --draft  target and draft GGUF (they must share the tokenizer); --draft is optional\n"
            "               with --method ngram\n"
            "  --method M   the proposer under test: draft (default), ngram (prompt lookup: deterministic\n"
            "               proposals, the point-mass rule) or auto (both); --ngram-min/--ngram-max the\n"
            "               lookup lengths (default 2 and 5)\n"
            "  --samples N  sequences per decoding mode (default 5000); --positions K (default 8)\n"
            "  --temp T     temperature (default 1.0); --top-k/--top-p/--min-p filters as in generate\n"
            "  --gamma G    fixed speculation depth (default 4); --adaptive lets the controller choose\n"
            "               (timing-dependent: not reproducible run to run)\n"
            "  -p PROMPT    prompt text after BOS (default: empty = BOS only)\n"
            "  --grammar F  GBNF file: every token of both sample sets is constrained by it (draft and\n"
            "               target masked in lockstep); --broken-grammar masks only the draft's q, the\n"
            "               target's p left unmasked (testing only: expected to FAIL)\n"
            "  --schema F   a JSON Schema file instead: its grammar as the server makes it\n"
            PENALTY_ARGS_USAGE
            "  --broken-penalties  the target's verify rows see the accepted tokens but not the drafts\n"
            "               before them (testing only: expected to FAIL)\n"
            "  --seed S     base seed (default 1); each sample's seed is a hash of (S, mode, i), so the\n"
            "               plain and speculative sets, and runs with different S, are independent\n"
            "  --alpha A    family-wise significance level (default 0.01)\n"
            "  -t THREADS   CPU threads (default 1: tiny models gain nothing from more)\n"
            "  --verify V   the verification rule under test: rejection (default) or coupled (Gumbel-max\n"
            "               with noise shared by draft and target; plain samples stay inverse-CDF draws)\n"
            "  --tree B/D/K tree speculation: every speculative step verifies a tree of at most B nodes\n"
            "               (1..16), D levels and K children per node, drafted by --method (draft: the\n"
            "               draft model, siblings drawn without replacement; ngram: every earlier match\n"
            "               merged, deterministic nodes); with --broken the siblings skip the residual update\n"
            "  --medusa H   Medusa heads (specd train-medusa) propose the trees of every speculative\n"
            "               step (deterministic nodes; shape from --tree, default 16/4/4); no --draft needed\n"
            "  --eagle H    an EAGLE-3 head (specd convert-eagle3) drafts the chains (q from the head,\n"
            "               the target's features), or with --tree the trees (siblings drawn without\n"
            "               replacement); no --draft needed\n"
            "  --swap-eagle H2  a second head: the two trade places after every speculative step, as\n"
            "               serve --learn swaps a learned head in mid-request (state rebuilt from the\n"
            "               sequence's recorded features); chains only\n"
            "  --broken     testing only: use a deliberately wrong residual (|p-q| instead of\n"
            "               max(0, p-q)) to prove the harness detects a lossy algorithm\n"
            "  exit status: 0 distributions agree, 1 they differ, 2 usage or setup error, or nothing to\n"
            "               test (every position near-deterministic: verdict INCONCLUSIVE)\n");
}

/* Per-mode histograms: hist[(pos * V) + token], positions 0..K-1 after the prompt. */
typedef struct {
    uint64_t *hist; /* (K, V) */
    spec_stats st;
    uint64_t stopped; /* sequences that ended (EOG) before K tokens */
    double ms;
} verify_set;

/* Seed streams of the two sample sets: arbitrary constants, distinct so that
 * the plain and speculative samples are independent. */
#define VERIFY_STREAM_PLAIN 0x56504c4eu
#define VERIFY_STREAM_SPEC 0x56535043u

/* Draws n sequences of up to K tokens into vs; sample i is seeded with
 * rng_u64(seed, i, stream, 0), a Philox hash, so different --seed values give
 * independent sample sets (consecutive raw seeds would share most samples). */
/* tree speculation for the speculative set (--tree): the shape, the proposer
 * and the scratch; budget 0 = chains */
typedef struct {
    tree_shape sh;
    spec_method how;
    spec_tree_ctx *tc;
    draft_tree *dt;
    draft_medusa *dm;           /* --medusa: the heads' proposer (then trees come from it) */
    medusa_seq *ms;
} verify_tree;

/* --swap-eagle: the head in the pair's EAGLE slot and *other trade places
 * between two steps of s, as serve --learn swaps a learned head in: s drops
 * its state of the old head and adopts the new one from its recorded
 * features. */
static void swap_heads(spec_pair *sp, spec_seq *s, drafter **other) {
    *other = spec_pair_swap_drafter(sp, &s, 1, SPEC_DRAFTER_EAGLE, *other);
}

static drafter *g_swap;     /* --swap-eagle's other head (NULL: no swaps) */
static uint64_t g_swaps;

static int draw_set(spec_pair *sp, const int32_t *prompt, int n_prompt, const spec_seq_params *base, uint64_t seed,
                    uint32_t stream, int n, int K, const verify_tree *vt, verify_set *vs, char *err, size_t errlen) {
    size_t V = (size_t)sp->n_vocab;
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        spec_seq_params prm = *base;
        prm.seed = rng_u64(seed, (uint64_t)i, stream, 0);
        spec_seq *s = spec_seq_start(sp, prompt, n_prompt, &prm, err, errlen);
        if (!s) return -1;
        if (vt && vt->dm) medusa_seq_prefilled(vt->dm, vt->ms, s); /* the prefill was the last target pass */
        int got = 0; /* output tokens recorded */
        bool done = false;
        for (;;) {
            for (; got < s->n_tokens - n_prompt && got < K; got++) {
                int32_t t = s->tokens[n_prompt + got];
                vs->hist[(size_t)got * V + (size_t)t]++;
                if (tok_is_eog(sp->tok, t)) {
                    done = true;
                    got++;
                    break;
                }
            }
            if (done || got >= K) break;
            spec_step_info info;
            int mx = K - got;
            medusa_seq *msq = vt ? vt->ms : NULL;
            int src = vt && prm.speculate && vt->dm
                          ? draft_medusa_step(vt->dm, vt->tc, &s, &msq, 1, &vt->sh, &mx, &info, err, errlen)
                      : vt && prm.speculate
                          ? draft_tree_step(vt->dt, vt->tc, &s, 1, &vt->sh, &vt->how, &mx, &info, err, errlen)
                          : spec_seq_step(s, mx, &info, err, errlen);
            if (src != 0) {
                spec_seq_free(s);
                return -1;
            }
            if (g_swap && prm.speculate) swap_heads(sp, s, &g_swap), g_swaps++;
        }
        if (done && got < K) vs->stopped++;
        spec_stats_add(&vs->st, &s->st);
        spec_seq_free(s);
    }
    vs->ms = now_ms() - t0;
    return 0;
}

/* The token whose share differs most between the two histograms (for a
 * failing position's diagnosis). */
static int largest_gap(const uint64_t *a, const uint64_t *b, int V, double *fa, double *fb) {
    uint64_t n1 = 0, n2 = 0;
    for (int j = 0; j < V; j++) n1 += a[j], n2 += b[j];
    int best = 0;
    double gap = -1;
    for (int j = 0; j < V; j++) {
        double x = n1 ? (double)a[j] / (double)n1 : 0, y = n2 ? (double)b[j] / (double)n2 : 0;
        if (fabs(x - y) > gap) gap = fabs(x - y), best = j, *fa = x, *fb = y;
    }
    return best;
}

int cmd_verify(int argc, char **argv) {
    verify_tree tree = {{0, 0, 0}, SPEC_METHOD_DRAFT, NULL, NULL, NULL, NULL};
    const char *medusa_path = NULL;
    medusa_heads *mh = NULL;
    bool coupled = false; /* --verify coupled */
    const char *model_path = NULL, *draft_path = NULL, *prompt = "", *eagle_path = NULL, *swap_path = NULL;
    int n_samples = 5000, K = 8, threads = 1, gamma_fixed = 0, method = SPEC_METHOD_DRAFT, ngram_min = 0,
        ngram_max = 0;
    bool adaptive = false, broken = false, quiet = false;
    uint64_t seed = 1;
    double alpha = 0.01;
    const char *grammar_path = NULL;
    bool broken_grammar = false, grammar_is_schema = false, broken_penalties = false;
    static sampler_bias bias[SAMPLER_MAX_BIAS];
    int pa;
    sampler_config sc = sampler_config_default();
    sc.temperature = 1.0f;
    gamma_params gp = gamma_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--samples")) n_samples = (int)arg_long(argc, argv, &i, 1, 100000000);
        else if (!strcmp(a, "--positions")) K = (int)arg_long(argc, argv, &i, 1, 4096);
        else if (!strcmp(a, "--temp")) sc.temperature = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--top-k")) sc.top_k = (int)arg_long(argc, argv, &i, 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) sc.top_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--min-p")) sc.min_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--gamma")) gamma_fixed = (int)arg_long(argc, argv, &i, 1, GAMMA_MAX);
        else if (!strcmp(a, "--adaptive")) adaptive = true;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--grammar")) grammar_path = arg_str(argc, argv, &i), grammar_is_schema = false;
        else if (!strcmp(a, "--schema")) grammar_path = arg_str(argc, argv, &i), grammar_is_schema = true;
        else if (!strcmp(a, "--broken-grammar")) broken_grammar = true;
        else if (!strcmp(a, "--broken-penalties")) broken_penalties = true;
        else if ((pa = penalty_arg("verify", argc, argv, &i, &sc, bias)) != 0) { if (pa < 0) return 2; }
        else if (!strcmp(a, "--seed")) seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "--alpha")) alpha = arg_double(argc, argv, &i, 1e-12, 0.5);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--broken")) broken = true;
        else if (!strcmp(a, "--verify")) {
            const char *v = arg_str(argc, argv, &i);
            int mode = spec_verify_parse(v);
            if (mode < 0) {
                fprintf(stderr, "specd verify: --verify must be rejection or coupled, got '%s'\n", v);
                return 2;
            }
            coupled = mode == 1;
        }
        else if (!strcmp(a, "--method")) {
            const char *v = arg_str(argc, argv, &i);
            method = spec_method_parse(v);
            if (method != SPEC_METHOD_DRAFT && method != SPEC_METHOD_NGRAM && method != SPEC_METHOD_AUTO) {
                fprintf(stderr, "specd verify: --method must be draft, ngram or auto, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--ngram-min")) ngram_min = (int)arg_long(argc, argv, &i, 1, 8);
        else if (!strcmp(a, "--ngram-max")) ngram_max = (int)arg_long(argc, argv, &i, 1, 8);
        else if (!strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "--medusa")) medusa_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--eagle")) eagle_path = arg_str(argc, argv, &i), method = SPEC_METHOD_EAGLE;
        else if (!strcmp(a, "--swap-eagle")) swap_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--tree")) {
            const char *v = arg_str(argc, argv, &i);
            if (sscanf(v, "%d/%d/%d", &tree.sh.budget, &tree.sh.depth, &tree.sh.topk) != 3 || tree.sh.budget < 1 ||
                tree.sh.budget > DRAFTER_MAX_NODES || tree.sh.depth < 1 || tree.sh.depth > tree.sh.budget ||
                tree.sh.topk < 1 || tree.sh.topk > 8) {
                fprintf(stderr, "specd verify: --tree must be BUDGET/DEPTH/TOPK with budget 1..%d, depth 1..budget "
                                "and topk 1..8, got '%s'\n", DRAFTER_MAX_NODES, v);
                return 2;
            }
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { verify_usage(stdout); return 0; }
        else return cli_unknown_option("verify", a, verify_usage);
    }
    char err[1024] = "";
    if (swap_path && !eagle_path) {
        fprintf(stderr, "specd verify: --swap-eagle needs --eagle (the two heads trade places)\n");
        return 2;
    }
    if (!model_path || (!draft_path && method != SPEC_METHOD_NGRAM && !medusa_path && !eagle_path)) {
        fprintf(stderr, "specd verify: both -m TARGET and --draft DRAFT are required (the draft is optional with "
                        "--method ngram or --medusa)\n");
        verify_usage(stderr);
        return 2;
    }
    if (!sampler_config_validate(&sc, err, sizeof(err))) {
        fprintf(stderr, "specd verify: %s\n", err);
        return 2;
    }
    if (gamma_fixed && adaptive) {
        fprintf(stderr, "specd verify: --gamma (fixed) and --adaptive exclude each other\n");
        return 2;
    }
    if (!adaptive) {
        int g = gamma_fixed ? gamma_fixed : 4;
        gp.adaptive = false;
        gp.gamma_default = g;
        if (gp.gamma_min > g) gp.gamma_min = g;
        if (gp.gamma_max < g) gp.gamma_max = g;
    }
    if (!gamma_params_validate(&gp, err, sizeof(err))) {
        fprintf(stderr, "specd verify: %s\n", err);
        return 2;
    }

    int rc = 2;
    backend *be = backend_cpu_create(threads);
    spec_pair_params pp = {.ngram_min = ngram_min, .ngram_max = ngram_max};
    engine_status est;
    spec_pair *sp = spec_pair_load(model_path, draft_path, be, &pp, quiet ? NULL : stderr, &est, err, sizeof(err));
    int32_t *ids = NULL;
    verify_set plain = {0}, spec = {0};
    int *scratch = NULL;
    grammar *gr = NULL;
    grammar_vocab *gv = NULL;
    grammar_matcher *gm = NULL;
    if (!sp) {
        cli_load_failed("verify", est, err, CLI_OOM_HINT_MODEL);
        goto done;
    }
    if (eagle_path) {
        drafter *ea = draft_eagle_load(sp, eagle_path, 0, &est, err, sizeof(err));
        if (!ea) {
            fprintf(stderr, "specd verify: %s\n", err);
            goto done;
        }
        spec_pair_set_drafter(sp, SPEC_DRAFTER_EAGLE, ea);
        if (swap_path && tree.sh.budget) {
            fprintf(stderr, "specd verify: --swap-eagle swaps heads between chain steps: no --tree\n");
            goto done;
        }
        if (swap_path && !(g_swap = draft_eagle_load(sp, swap_path, 0, &est, err, sizeof(err)))) {
            fprintf(stderr, "specd verify: --swap-eagle: %s\n", err);
            goto done;
        }
        if (medusa_path) {
            fprintf(stderr, "specd verify: --eagle and --medusa are two proposers: give one\n");
            goto done;
        }
    }
    size_t V = (size_t)sp->n_vocab;
    size_t plen = strlen(prompt);
    int cap = (int)plen + 8;
    ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n_prompt = ids ? tok_encode(sp->tok, prompt, plen, true, false, ids, cap) : -1;
    if (n_prompt <= 0) {
        fprintf(stderr, "specd verify: cannot tokenize the prompt\n");
        goto done;
    }
    int max_ctx = sp->max_ctx;
    if (n_prompt + K + GAMMA_MAX + 1 > max_ctx) {
        fprintf(stderr, "specd verify: prompt (%d tokens) + %d positions do not fit the context of %d\n", n_prompt,
                K, max_ctx);
        goto done;
    }
    plain.hist = calloc((size_t)K * V, sizeof(uint64_t));
    spec.hist = calloc((size_t)K * V, sizeof(uint64_t));
    scratch = malloc(sizeof(int) * V);
    if (!plain.hist || !spec.hist || !scratch) {
        fprintf(stderr, "specd verify: out of memory\n");
        goto done;
    }
    if (broken) sp->variant = coupled ? ACCEPT_BROKEN_COUPLED : ACCEPT_BROKEN_RESIDUAL_ABS;
    if (medusa_path && !tree.sh.budget) tree.sh = (tree_shape){16, 4, 4};
    if (tree.sh.budget > 0) {
        if (coupled) {
            fprintf(stderr, "specd verify: --tree cannot be combined with --verify coupled\n");
            goto done;
        }
        tree.how = (spec_method)method;
        tree.tc = spec_tree_create(sp);
        tree.dt = spec_pair_has_draft(sp) ? draft_tree_create(sp) : NULL;
        if (!tree.tc || (spec_pair_has_draft(sp) && !tree.dt)) {
            fprintf(stderr, "specd verify: out of memory (tree)\n");
            goto done;
        }
        if (broken) spec_tree_set_variant(tree.tc, TREE_BROKEN_NO_RESIDUAL);
        if (medusa_path) {
            mh = medusa_heads_load(medusa_path, sp->target_id.id, sp->target->hp.dim, sp->n_vocab, &est, err, sizeof(err));
            if (!mh || !(tree.dm = draft_medusa_create(sp, mh, &est, err, sizeof(err))) || !(tree.ms = medusa_seq_create(tree.dm))) {
                if (mh && tree.dm) { /* the sequence state */
                    est = ENGINE_ERR_OOM;
                    snprintf(err, sizeof(err), "out of memory (medusa)");
                }
                cli_load_failed("verify", est, err, CLI_OOM_HINT_MODEL);
                goto done;
            }
        }
    }
    if (adaptive) spec_pair_calibrate(sp);
    if (sampler_has_penalties(&sc) && (tree.sh.budget || medusa_path)) {
        fprintf(stderr, "specd verify: penalties and --logit-bias take the chain path: no --tree or --medusa\n");
        return 2;
    }
    if (broken_penalties && !sampler_has_penalties(&sc)) {
        fprintf(stderr, "specd verify: --broken-penalties needs a penalty flag\n");
        return 2;
    }
    if (broken_grammar && !grammar_path) {
        fprintf(stderr, "specd verify: --broken-grammar needs --grammar FILE or --schema FILE\n");
        goto done;
    }
    if (grammar_path) {
        size_t n = 0;
        char *text = read_file(grammar_path, &n);
        if (text && grammar_is_schema) { /* a JSON Schema: its GBNF, as the server makes it */
            json_error_t je;
            json_t *schema = json_loadb(text, n, 0, &je);
            free(text);
            text = schema ? js_schema_to_gbnf(schema, err, sizeof(err)) : NULL;
            if (!schema) snprintf(err, sizeof(err), "not JSON: %s", je.text);
            json_decref(schema);
            if (!text) {
                fprintf(stderr, "specd verify: %s: %s\n", grammar_path, err);
                goto done;
            }
            n = strlen(text);
        }
        if (text) {
            gr = grammar_parse(text, n, err, sizeof(err));
            if (!gr) fprintf(stderr, "specd verify: %s: %s\n", grammar_path, err);
        } else {
            fprintf(stderr, "specd verify: cannot read %s\n", grammar_path);
        }
        free(text);
        if (!gr) goto done;
        if (!(gv = grammar_vocab_create(sp->tok)) || !(gm = grammar_matcher_create(gr, gv))) {
            fprintf(stderr, "specd verify: out of memory (grammar)\n");
            goto done;
        }
        grammar_matcher_prepare(gm); /* key masks up front; -1 (a bound) leaves the rest to first use */
    }

    spec_seq_params prm = {.sc = sc, .gp = gp, .speculate = false, .method = (spec_method)method};
    prm.grammar = gm; /* no token budget: K positions of an unfinished output are what is compared */
    if (draw_set(sp, ids, n_prompt, &prm, seed, VERIFY_STREAM_PLAIN, n_samples, K, NULL, &plain, err, sizeof(err)) != 0) {
        fprintf(stderr, "specd verify: plain decoding failed: %s\n", err);
        goto done;
    }
    prm.speculate = true;
    prm.record = g_swap != NULL; /* the features a swapped-in head adopts */
    prm.coupled = coupled;
    /* lookups propose whenever the text repeats, however often they miss: the
     * low-acceptance fallback would leave the point-mass rule mostly untested */
    if (method != SPEC_METHOD_DRAFT) prm.gp.fallback_alpha = 0.0f;
    prm.grammar_broken = broken_grammar;
    prm.penalty_broken = broken_penalties;
    if (draw_set(sp, ids, n_prompt, &prm, seed, VERIFY_STREAM_SPEC, n_samples, K, tree.sh.budget ? &tree : NULL, &spec,
                 err, sizeof(err)) != 0) {
        fprintf(stderr, "specd verify: speculative decoding failed: %s\n", err);
        goto done;
    }

    double alpha_pos = alpha / K, min_p = 1.0;
    int failed = 0, untestable = 0;
    printf("specd verify: %d plain vs %d speculative samples, %d positions, prompt %d tokens, temp %g top-k %d "
           "top-p %g min-p %g, ",
           n_samples, n_samples, K, n_prompt, (double)sc.temperature, sc.top_k, (double)sc.top_p, (double)sc.min_p);
    if (adaptive) printf("adaptive gamma %d..%d, seed %llu\n", gp.gamma_min, gp.gamma_max, (unsigned long long)seed);
    else printf("gamma %d, seed %llu\n", gp.gamma_default, (unsigned long long)seed);
    printf("  proposer: %s, verification: %s\n", spec_method_name((spec_method)method), coupled ? "coupled" : "rejection");
    if (tree.dm) printf("  proposer under test: Medusa heads %s (%d heads)\n", medusa_path, mh->n_heads);
    if (tree.sh.budget)
        printf("  tree: at most %d nodes, %d levels, %d children per node%s\n", tree.sh.budget, tree.sh.depth,
               tree.sh.topk, broken ? " (TESTING ONLY: --broken, siblings without the residual update)" : "");
    if (broken) printf("  TESTING ONLY: --broken residual |p-q| in use: this run is expected to FAIL\n");
    if (gm) printf("  grammar: %s (both sets masked%s)\n", grammar_path,
                   broken_grammar ? "; TESTING ONLY: --broken-grammar, the target's p unmasked: expected to FAIL" : "");
    if (sampler_has_penalties(&sc))
        printf("  penalties: repeat %g presence %g frequency %g over the last %d tokens, %d biased tokens%s\n",
               (double)(sc.repeat_penalty ? sc.repeat_penalty : 1.0f), (double)sc.presence_penalty,
               (double)sc.frequency_penalty, sc.penalty_last_n ? sc.penalty_last_n : SAMPLER_LAST_N_DEFAULT,
               sc.n_logit_bias, broken_penalties ? " (TESTING ONLY: --broken-penalties: expected to FAIL)" : "");
    printf("%4s %7s %7s %5s %6s %10s %4s %10s  %7s %10s  %s\n", "pos", "n_plain", "n_spec", "bins", "merged", "chi2",
           "dof", "p", "KS_D", "KS_p", "result");
    for (int k = 0; k < K; k++) {
        const uint64_t *a = plain.hist + (size_t)k * V, *b = spec.hist + (size_t)k * V;
        stattest_chi2_result r;
        stattest_chi2_homogeneity(a, b, (int)V, 5.0, scratch, &r);
        double ks_p;
        double D = stattest_ks_2samp_hist(a, b, (int)V, &ks_p);
        const char *res;
        if (r.dof == 0) res = "n/a", untestable++;
        else if (r.p < alpha_pos) res = "FAIL", failed++;
        else res = "pass";
        if (r.p < min_p) min_p = r.p;
        printf("%4d %7llu %7llu %5d %6d %10.2f %4d %10.3g  %7.4f %10.3g  %s\n", k + 1, (unsigned long long)r.n1,
               (unsigned long long)r.n2, r.bins, r.merged, r.stat, r.dof, r.p, D, ks_p, res);
        if (r.dof > 0 && r.p < alpha_pos) {
            double fa = 0, fb = 0;
            int t = largest_gap(a, b, (int)V, &fa, &fb);
            size_t len;
            printf("       largest gap: token %d '%s': plain %.2f%%, speculative %.2f%%\n", t,
                   tok_token_str(sp->tok, t, &len), 100 * fa, 100 * fb);
        }
    }
    printf("note: chi-square homogeneity is the right test for categorical tokens and alone decides the verdict;\n"
           "      KS treats token ids as ordinal values (their order means nothing) and is shown for comparison only.\n");
    if (untestable)
        printf("note: %d position(s) had fewer than 2 bins (a near-deterministic token): nothing to test there\n",
               untestable);
    const spec_stats *st = &spec.st;
    printf("speculation: %llu verify + %llu plain target passes, drafted %llu, accepted %llu, alpha %.3f, "
           "mean accepted %.2f per verify, %.2f tokens per target pass\n",
           (unsigned long long)st->verify_steps, (unsigned long long)st->plain_steps, (unsigned long long)st->drafted,
           (unsigned long long)st->accepted, spec_stats_alpha(st), spec_stats_mean_accepted(st),
           spec_stats_tokens_per_pass(st));
    for (int m = 0; m < SPEC_PROPOSERS; m++)
        if (st->by[m].verify_steps)
            printf("  %s: %llu verify passes, drafted %llu, accepted %llu\n", spec_drafter_name(m),
                   (unsigned long long)st->by[m].verify_steps, (unsigned long long)st->by[m].drafted,
                   (unsigned long long)st->by[m].accepted);
    if (tree.sh.budget)
        printf("  tree: %llu of the verify passes branched, %.2f nodes verified per pass\n",
               (unsigned long long)st->tree_steps,
               st->verify_steps ? (double)st->tree_nodes / (double)st->verify_steps : 0.0);
    if (g_swap) printf("  heads swapped %llu times (--swap-eagle)\n", (unsigned long long)g_swaps);
    printf("  per-position acceptance:");
    for (int i = 0; i < GAMMA_MAX && st->pos_reached[i]; i++)
        printf(" %d:%.3f", i + 1, (double)st->pos_accepted[i] / (double)st->pos_reached[i]);
    printf("\n  ended early (EOG): plain %llu, speculative %llu; time: plain %.2f s, speculative %.2f s\n",
           (unsigned long long)plain.stopped, (unsigned long long)spec.stopped, plain.ms / 1e3, spec.ms / 1e3);
    if (untestable == K && !failed) {
        /* every position was (near-)deterministic: passing would prove nothing */
        printf("verdict: INCONCLUSIVE (no position had 2 or more token categories with enough samples: raise the "
               "temperature, relax top-p/top-k or pick a prompt with an uncertain continuation)\n");
        rc = 2;
        goto done;
    }
    printf("verdict: %s (%d positions, Bonferroni alpha %.3g, min p %.3g)\n", failed ? "FAIL" : "PASS", K,
           alpha_pos, min_p);
    if (failed) printf("  %d of %d positions differ: the speculative output distribution is NOT the target's\n",
                       failed, K);
    rc = failed ? 1 : 0;
done:
    drafter_destroy(g_swap); /* before the pair: it borrows the target's tables */
    medusa_seq_destroy(tree.ms);
    draft_medusa_destroy(tree.dm);
    medusa_heads_destroy(mh);
    spec_tree_destroy(tree.tc);
    draft_tree_destroy(tree.dt);
    grammar_matcher_destroy(gm);
    grammar_destroy(gr);
    grammar_vocab_destroy(gv);
    free(ids);
    free(scratch);
    free(plain.hist), free(spec.hist);
    spec_pair_free(sp);
    backend_destroy(be);
    return rc;
}
