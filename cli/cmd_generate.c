/* cmd_generate.c — `specd generate`: prefill a prompt, then decode one token
 * per target pass, streaming text to stdout (or one JSON object with --json).
 * Without -m it runs on a demo model with random weights and says so. */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/mkmodel.h"
#include "engine/model.h"
#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "policy/yamlcfg.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void generate_usage(void) {
    fprintf(stderr,
            "usage: specd generate [-c config.yaml] [-m MODEL.gguf] [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "                      [--min-p P] [--seed S] [-t THREADS] [--no-bos] [--json]\n"
            "  -c FILE      config file (default: config.yaml when present); models.target names the model\n"
            "  -m MODEL     GGUF model (llama family); overrides the config. With neither, a demo model\n"
            "               with RANDOM weights is created under demo-models/ (its output is gibberish).\n"
            "  -p PROMPT    prompt text (default: empty = generate from BOS)\n"
            "  -n N         tokens to generate (default 64)\n"
            "  --temp T     temperature, 0 = greedy (default 0.8); --top-k/--top-p/--min-p filters\n"
            "  --seed S     seed of the counter-based sampler (default 42): same seed, same output\n"
            "  --json       print one JSON object (prompt_tokens, tokens, text, timings) instead\n");
}

/* Creates (once) and returns the demo model path. */
static const char *demo_model(char *err, size_t errlen) {
    static const char *path = "demo-models/demo-target.gguf";
    struct stat st;
    if (stat(path, &st) == 0) return path;
    mkdir("demo-models", 0755);
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.n_layers = 4, o.dim = 256, o.n_heads = 8, o.n_kv_heads = 4, o.ff = 688, o.vocab = 512, o.ctx = 2048;
    o.seed = 1, o.name = "specd-demo-target";
    mkmodel_info info;
    if (mkmodel_random(path, &o, &info, err, errlen) != 0) return NULL;
    fprintf(stderr, "specd: no model given: created %s with RANDOM weights (not a trained model: its output is "
                    "gibberish). Pass -m MODEL.gguf for real text.\n", path);
    return path;
}

int cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "", *config_path = NULL;
    int n_gen = 64, threads = 0;
    bool json = false, bos = true;
    uint64_t seed = 42;
    sampler_config sc = sampler_config_default();
    sc.temperature = 0.8f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-c") || !strcmp(a, "--config")) config_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-n")) n_gen = (int)arg_long(argc, argv, &i, 0, 1 << 20);
        else if (!strcmp(a, "--temp")) sc.temperature = (float)arg_double(argc, argv, &i, 0, 100);
        else if (!strcmp(a, "--top-k")) sc.top_k = (int)arg_long(argc, argv, &i, 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) sc.top_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--min-p")) sc.min_p = (float)arg_double(argc, argv, &i, 0, 1);
        else if (!strcmp(a, "--seed")) seed = arg_u64(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { generate_usage(); return 0; }
        else { fprintf(stderr, "specd generate: unknown option '%s'\n", a); generate_usage(); return 2; }
    }
    char err[768] = "";
    if (!sampler_config_validate(&sc, err, sizeof(err))) {
        fprintf(stderr, "specd generate: %s\n", err);
        return 2;
    }
    char cfg_model[1024] = "";
    if (!model_path && (config_path || access("config.yaml", R_OK) == 0)) {
        pol_yaml *y = pol_yaml_load(config_path ? config_path : "config.yaml", err, sizeof(err));
        const char *t = y ? pol_yaml_scalar(y, "models.target", err, sizeof(err)) : NULL;
        if (!y || (!t && err[0])) {
            fprintf(stderr, "specd generate: %s\n", err);
            pol_yaml_free(y);
            return 2;
        }
        if (t && *t) snprintf(cfg_model, sizeof(cfg_model), "%s", t);
        pol_yaml_free(y);
        if (cfg_model[0]) model_path = cfg_model;
    }
    if (!model_path && !(model_path = demo_model(err, sizeof(err)))) {
        fprintf(stderr, "specd generate: cannot create the demo model: %s\n", err);
        return 1;
    }

    int rc = 1;
    backend *be = backend_cpu_create(threads);
    model *m = model_load(model_path, be, NULL, err, sizeof(err));
    tokenizer *tok = NULL;
    kv_pool *pool = NULL;
    kv_seq *seq = NULL;
    sampler *smp = NULL;
    int32_t *ids = NULL;
    float *logits = NULL, *probs = NULL;
    char *text = NULL;
    size_t text_len = 0;
    if (!m) {
        fprintf(stderr, "specd generate: %s\n", err);
        goto done;
    }
    if (!(tok = tok_create(m->gguf, err, sizeof(err)))) {
        fprintf(stderr, "specd generate: %s: %s\n", model_path, err);
        goto done;
    }
    if (tok_n_vocab(tok) != m->hp.n_vocab) {
        fprintf(stderr, "specd generate: tokenizer has %d tokens but the model's vocabulary is %d\n", tok_n_vocab(tok),
                m->hp.n_vocab);
        goto done;
    }
    int max_ctx = m->mp.max_ctx;
    size_t plen = strlen(prompt);
    int cap = (int)plen + 8;
    ids = malloc(sizeof(int32_t) * (size_t)(cap + n_gen + 1));
    int n_prompt = tok_encode(tok, prompt, plen, bos, false, ids, cap);
    if (n_prompt < 0) {
        fprintf(stderr, "specd generate: cannot tokenize the prompt\n");
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "specd generate: empty prompt and --no-bos: nothing to condition on\n");
        goto done;
    }
    if (n_prompt + n_gen > max_ctx) {
        fprintf(stderr, "specd generate: prompt (%d tokens) + %d new tokens exceed the context of %d\n", n_prompt, n_gen,
                max_ctx);
        goto done;
    }
    pool = model_kv_pool(m, 16, kv_blocks_for(&(kv_pool){.block_size = 16}, max_ctx), err, sizeof(err));
    seq = pool ? kv_seq_create(pool, max_ctx) : NULL;
    smp = sampler_create(m->hp.n_vocab);
    logits = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    probs = malloc(sizeof(float) * (size_t)m->hp.n_vocab);
    text = malloc(tok_stream_max_out(tok) * (size_t)(n_gen + 1) + 16);
    if (!pool || !seq || !smp || !logits || !probs || !text) {
        fprintf(stderr, "specd generate: %s\n", pool ? "out of memory" : err);
        goto done;
    }

    double t0 = now_ms();
    for (int p = 0; p < n_prompt; p += m->mp.max_batch) {
        int n = n_prompt - p < m->mp.max_batch ? n_prompt - p : m->mp.max_batch;
        model_seq s = {.kv = seq, .n = n, .tokens = ids + p};
        if (model_forward(m, pool, &s, 1, logits, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd generate: %s\n", err);
            goto done;
        }
    }
    double t1 = now_ms();
    tok_stream ts;
    /* after a text prompt the output continues it (keep its leading space); from
     * BOS alone it starts a text (drop the space prefix, as a decode would) */
    tok_stream_init(&ts, tok, n_prompt > (bos ? 1 : 0) ? TOK_DECODE_CONTINUATION : 0);
    int n_out = 0;
    const char *finish = "length";
    for (; n_out < n_gen; n_out++) {
        int pos = n_prompt + n_out;
        int32_t t = sampler_sample_logits(smp, &sc, logits, probs, seed, (uint64_t)pos);
        ids[pos] = t;
        if (tok_is_eog(tok, t)) {
            finish = "stop";
            break;
        }
        int k = tok_stream_feed(&ts, tok, t, text + text_len, tok_stream_max_out(tok));
        if (k > 0) {
            if (!json) {
                fwrite(text + text_len, 1, (size_t)k, stdout);
                fflush(stdout);
            }
            text_len += (size_t)k;
        }
        if (n_out + 1 == n_gen) {
            n_out++;
            break;
        }
        model_seq s = {.kv = seq, .n = 1, .tokens = &ids[pos]};
        if (model_forward(m, pool, &s, 1, logits, err, sizeof(err)) != 0) {
            fprintf(stderr, "\nspecd generate: %s\n", err);
            goto done;
        }
    }
    int k = tok_stream_flush(&ts, text + text_len, tok_stream_max_out(tok));
    if (k > 0) {
        if (!json) fwrite(text + text_len, 1, (size_t)k, stdout);
        text_len += (size_t)k;
    }
    double t2 = now_ms();
    double prefill_ms = t1 - t0, decode_ms = t2 - t1;
    int n_decode_calls = n_out > 0 ? n_out - (strcmp(finish, "stop") ? 1 : 0) : 0;
    double prefill_tps = prefill_ms > 0 ? n_prompt / (prefill_ms / 1e3) : 0;
    double decode_tps = decode_ms > 0 && n_decode_calls > 0 ? n_decode_calls / (decode_ms / 1e3) : 0;
    if (json) {
        printf("{\"model\":");
        json_write_str(stdout, model_path, strlen(model_path));
        printf(",\"prompt_tokens\":[");
        for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("],\"tokens\":[");
        for (int i = 0; i < n_out; i++) printf("%s%d", i ? "," : "", ids[n_prompt + i]);
        printf("],\"text\":");
        json_write_str(stdout, text, text_len);
        printf(",\"finish_reason\":\"%s\",\"timings\":{\"prefill_ms\":%.3f,\"decode_ms\":%.3f,"
               "\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f}}\n",
               finish, prefill_ms, decode_ms, prefill_tps, decode_tps);
    } else {
        printf("\n");
    }
    fprintf(stderr, "prompt tokens: %d, generated tokens: %d (%s), prefill: %.1f tok/s, decode: %.1f tok/s [%s, %d threads]\n",
            n_prompt, n_out, finish, prefill_tps, decode_tps, backend_cpu_simd(), be->n_threads);
    rc = 0;
done:
    free(ids);
    free(logits);
    free(probs);
    free(text);
    sampler_destroy(smp);
    if (pool) kv_seq_destroy(pool, seq);
    kv_pool_destroy(pool);
    tok_destroy(tok);
    model_free(m);
    backend_destroy(be);
    return rc;
}
