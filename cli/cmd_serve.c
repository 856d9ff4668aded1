/* cmd_serve.c — `specd serve`: loads the model pair into the engine and runs
 * the gateway (WebSocket streaming, OpenAI-compatible HTTP, metrics, web
 * pages) until SIGINT/SIGTERM. Settings come from config.yaml; flags override
 * the common ones. */
#include "cli/cmd.h"
#include "cli/datadir.h"
#include "cli/hub.h"
#include "cli/logfmt.h"
#include "cli/util.h"
#include "engine/engine.h"
#include "engine/train/learner.h"
#include "gateway/server.h"
#include "policy/config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: specd serve [-c config.yaml] [--host H] [--port P] [-m TARGET.gguf] [--draft DRAFT.gguf]\n"
            "                   [--medusa HEADS.gguf] [--eagle HEAD.gguf] [-hf REPO[:QUANT]] [--hf-draft REPO[:QUANT]]\n"
            "                   [--web-root DIR] [-t THREADS] [--max-running N] [--ctx N] [--kv-type f32|f16]\n"
            "                   [--log-format text|json]\n"
            "                   [--api-key KEY]... [--api-key-file FILE] [--tls-cert CERT.pem --tls-key KEY.pem]\n"
            "  -c FILE        config file; without -c: $SPECD_CONFIG, else ./config.yaml, else\n"
            "                 %s, else the built-in defaults (the first line printed says which)\n"
            "  --host H       address to listen on (server.host, default 127.0.0.1); --port P (8080; 0 = a free one,\n"
            "                 the ready line names the URL)\n"
            "  -m MODEL       target GGUF (models.target); without one, a demo pair with RANDOM weights is served\n"
            "  --draft D      draft GGUF sharing the target's tokenizer (models.draft)\n"
            "  --medusa H     Medusa heads for the target (models.medusa; specd train-medusa)\n"
            "  --eagle H      an EAGLE-3 head for the target (models.eagle; specd convert-eagle3): method eagle\n"
            "  --chat-template FILE|NAME  chat template instead of the model's tokenizer.chat_template: a Jinja\n"
            "                 file, a tokenizer.chat_template.NAME of the model, or a built-in family (models.chat_template)\n"
            "  -hf REPO[:QUANT], --hf-draft REPO[:QUANT]  target / draft from a Hugging Face repository,\n"
            "                 downloaded once into the cache (see specd pull)\n"
            "  --web-root DIR the pages to serve (server.web_root; \"none\" = no pages); default: the pages\n"
            "                 installed with specd (meson install), found from the binary's own path\n"
            "  -t THREADS     CPU threads (engine.threads); --max-running N sequences in the batch\n"
            "                 (engine.max_running); --ctx N context per sequence (engine.max_ctx)\n"
            "  --kv-type T    the KV cache's elements: f16 (default; half the memory and the bytes attention\n"
            "                 reads) or f32 (engine.kv_type)\n"
            "  --log-format json  every stderr line as a JSON object (ts, pid, msg)\n"
            "  --api-key KEY  every API request needs \"Authorization: Bearer KEY\" (repeatable; also\n"
            "                 server.api_keys / api_key_file); --api-key-file FILE: one key per line\n"
            "  --tls-cert/--tls-key  HTTPS and WSS on the port (server.tls_cert / tls_key; re-read on SIGHUP)\n"
            "  --learn        learn the EAGLE head from the traffic while serving (speculation.learn):\n"
            "                 a background trainer fine-tunes --eagle's head, or trains one from nothing,\n"
            "                 and swaps a candidate in only when it beats the live head on held-out traffic;\n"
            "                 heads go to --learn-dir DIR (speculation.learn_dir, ./specd-learn)\n"
            "  SIGHUP reloads the config; SIGINT/SIGTERM drain running requests and exit 0.\n",
            pol_config_system_path());
}

int cmd_serve(int argc, char **argv) {
    const char *chat_template = NULL;
    const char *config_path = NULL, *host = NULL, *model = NULL, *draft = NULL, *web_root = NULL, *medusa = NULL;
    const char *eagle = NULL;
    static char mpath[1024], epath[1024];
    const char *hf = NULL, *hf_draft = NULL;
    bool log_json = false, learn = false;
    const char *learn_dir = NULL;
    int port = -1, threads = -1, max_running = -1, ctx = -1, kv_type = -1;
    const char *key_file = NULL, *tls_cert = NULL, *tls_key = NULL;
    static char key_extra[2048];
    size_t key_extra_len = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) config_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--host")) host = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--port")) port = (int)arg_long(argc, argv, &i, 0, 65535);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--medusa")) medusa = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--eagle")) eagle = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--learn")) learn = true;
        else if (!strcmp(a, "--learn-dir")) learn_dir = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--chat-template")) chat_template = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-hf") || !strcmp(a, "--hf")) hf = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--hf-draft") || !strcmp(a, "-hfd")) hf_draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--log-format")) {
            const char *v = arg_str(argc, argv, &i);
            if (strcmp(v, "text") && strcmp(v, "json")) {
                fprintf(stderr, "specd serve: bad value for --log-format: %s (text or json)\n", v);
                return 2;
            }
            log_json = !strcmp(v, "json");
        }
        else if (!strcmp(a, "--web-root")) web_root = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--api-key")) {
            const char *k = arg_str(argc, argv, &i);
            size_t kl = strlen(k);
            if (!kl || key_extra_len + kl + 2 > sizeof(key_extra)) {
                fprintf(stderr, "specd serve: --api-key: empty, or too many keys on the command line\n");
                return 2;
            }
            memcpy(key_extra + key_extra_len, k, kl + 1);
            key_extra_len += kl + 1;
        }
        else if (!strcmp(a, "--api-key-file")) key_file = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--tls-cert")) tls_cert = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--tls-key")) tls_key = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--max-running")) max_running = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--ctx")) ctx = (int)arg_long(argc, argv, &i, 16, 1 << 20);
        else if (!strcmp(a, "--kv-type")) kv_type = arg_kv_type(argc, argv, &i);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { serve_usage(stdout); return 0; }
        else return cli_unknown_option("serve", a, serve_usage);
    }
    if (log_json && logfmt_json_start() != 0) perror("specd serve: --log-format json");
    static char hf_path[2048], hf_draft_path[2048];
    int hrc = hub_resolve_flag("serve", hf, hf_path, sizeof(hf_path), &model);
    if (!hrc) hrc = hub_resolve_flag("serve", hf_draft, hf_draft_path, sizeof(hf_draft_path), &draft);
    if (hrc) return hrc;
    gw_config gc = gw_config_default();
    engine_config ec = engine_config_default();
    char err[1024] = "", tpath[1024] = "", dpath[1024] = "", wroot[512] = "";
    /* the typed, validated snapshot: the config file (-c, $SPECD_CONFIG, ./config.yaml, the
     * system location: the first that applies) or the defaults, + environment */
    const char *csource;
    const char *cpath = pol_config_find(config_path, &csource);
    pol_config *pc = cpath ? pol_config_load(cpath, NULL, err, sizeof(err))
                           : pol_config_load_mem("{}", 2, "(defaults)", NULL, err, sizeof(err));
    if (!pc) {
        fprintf(stderr, "specd serve: %s\n", err);
        return 2;
    }
    if (cpath) fprintf(stderr, "specd: config %s (from %s)\n", cpath, csource);
    else
        fprintf(stderr, "specd: no config file (none given with -c or $SPECD_CONFIG, no ./config.yaml, no %s): "
                        "built-in defaults\n", pol_config_system_path());
    snprintf(gc.host, sizeof(gc.host), "%.127s", pc->server.host);
    gc.port = pc->server.port;
    snprintf(wroot, sizeof(wroot), "%s", pc->server.web_root);
    snprintf(gc.allowed_origins, sizeof(gc.allowed_origins), "%s", pc->server.allowed_origins);
    gc.max_message_bytes = pc->server.max_message_bytes;
    gc.max_requests_per_conn = pc->server.max_requests_per_connection;
    gc.max_requests_total = pc->server.max_requests_total;
    gc.max_connections = pc->server.max_connections;
    snprintf(gc.allowed_hosts, sizeof(gc.allowed_hosts), "%s", pc->server.allowed_hosts);
    gc.idle_timeout_s = pc->server.idle_timeout_s;
    gc.max_tokens_limit = pc->server.max_tokens_limit;
    gc.default_max_tokens = pc->server.max_tokens_default; /* 0: until the end of the context */
    gc.max_choices = pc->server.max_choices;
    gc.schema_max_enum = pc->grammar.max_enum;
    gc.grammar_max_bytes = (size_t)pc->grammar.max_bytes;
    gc.grace_ms = pc->server.grace_ms;
    snprintf(gc.model_aliases, sizeof(gc.model_aliases), "%s", pc->models.alias);
    snprintf(gc.api_keys, sizeof(gc.api_keys), "%s", pc->server.api_keys);
    snprintf(gc.api_key_file, sizeof(gc.api_key_file), "%s", key_file ? key_file : pc->server.api_key_file);
    memcpy(gc.api_key_extra, key_extra, sizeof(key_extra) < sizeof(gc.api_key_extra) ? sizeof(key_extra) : sizeof(gc.api_key_extra));
    snprintf(gc.auth_exempt, sizeof(gc.auth_exempt), "%s", pc->server.auth_exempt);
    snprintf(gc.cors_origins, sizeof(gc.cors_origins), "%s", pc->server.cors_origins);
    snprintf(gc.tls_cert, sizeof(gc.tls_cert), "%s", tls_cert ? tls_cert : pc->server.tls_cert);
    snprintf(gc.tls_key, sizeof(gc.tls_key), "%s", tls_key ? tls_key : pc->server.tls_key);
    snprintf(tpath, sizeof(tpath), "%s", pc->models.target);
    snprintf(dpath, sizeof(dpath), "%s", pc->models.draft);
    snprintf(mpath, sizeof(mpath), "%s", pc->models.medusa);
    snprintf(epath, sizeof(epath), "%s", pc->models.eagle);
    engine_config_from_policy(&ec, pc); /* engine and speculation sections, max_batch and mode included */
    bool tel_enabled = pc->telemetry.enabled;
    telemetry_config tc = telemetry_config_default();
    char tel_path[1024];
    snprintf(tel_path, sizeof(tel_path), "%s", pc->telemetry.path);
    tc.path = tel_path;
    tc.sample_rate = pc->telemetry.sample_rate;
    tc.retention_rows = pc->telemetry.retention_rows;
    tc.retention_days = pc->telemetry.retention_days;
    tc.queue_size = pc->telemetry.queue_size;
    if (host) snprintf(gc.host, sizeof(gc.host), "%s", host);
    if (port >= 0) gc.port = port;
    if (web_root) snprintf(wroot, sizeof(wroot), "%s", web_root);
    /* the pages: --web-root / server.web_root ("none": no pages), else the ones installed with specd */
    if (!strcmp(wroot, "none")) gc.web_root[0] = 0;
    else if (wroot[0]) {
        if (access(wroot, R_OK | X_OK) != 0) {
            fprintf(stderr, "specd serve: web root %s: %s (%s; \"none\" serves no pages)\n", wroot, strerror(errno),
                    web_root ? "--web-root" : "server.web_root");
            pol_config_free(pc);
            return 2;
        }
        snprintf(gc.web_root, sizeof(gc.web_root), "%s", wroot);
    } else if (cli_default_web_root(gc.web_root, sizeof(gc.web_root)) != 0) {
        fprintf(stderr, "specd: no web pages found (looked in %s): / answers 404; install with "
                        "`meson install` or pass --web-root DIR\n", gc.web_root);
        gc.web_root[0] = 0;
    }
    if (gc.web_root[0]) fprintf(stderr, "specd: web pages from %s\n", gc.web_root);
    if (model) snprintf(tpath, sizeof(tpath), "%s", model), dpath[0] = 0, mpath[0] = 0, epath[0] = 0;
    if (medusa) snprintf(mpath, sizeof(mpath), "%s", medusa);
    if (eagle) snprintf(epath, sizeof(epath), "%s", eagle);
    if (draft) snprintf(dpath, sizeof(dpath), "%s", draft);
    if (threads > 0) ec.threads = threads;
    if (max_running > 0) ec.max_running = max_running;
    if (ctx > 0) ec.max_ctx = ctx;
    if (kv_type >= 0) ec.kv_type = kv_type;
    if (!tpath[0]) {
        const char *t, *d;
        if (cmd_default_pair(&t, &d, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd serve: %s\n", err);
            return 1;
        }
        snprintf(tpath, sizeof(tpath), "%s", t);
        snprintf(dpath, sizeof(dpath), "%s", d);
    }
    ec.target_path = tpath;
    ec.draft_path = dpath[0] ? dpath : NULL;
    ec.medusa_path = mpath[0] ? mpath : NULL;
    ec.eagle_path = epath[0] ? epath : NULL;
    if (learn) ec.learn.enabled = true;
    static char ldir[1024];
    snprintf(ldir, sizeof(ldir), "%s", learn_dir ? learn_dir : pc->speculation.learn_dir);
    if (ec.learn.enabled && mkdir(ldir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "specd serve: cannot create the learning directory %s: %s (--learn-dir, speculation.learn_dir)\n",
                ldir, strerror(errno));
        pol_config_free(pc);
        return 2;
    }
    ec.chat_template = chat_template ? chat_template : pc->models.chat_template[0] ? pc->models.chat_template : NULL;
    if (!gamma_params_validate(&ec.gamma, err, sizeof(err))) {
        fprintf(stderr, "specd serve: config: speculation: %s\n", err);
        pol_config_free(pc);
        return 2;
    }
    const char *base = strrchr(tpath, '/');
    snprintf(gc.model_name, sizeof(gc.model_name), "%s", base ? base + 1 : tpath);
    const char *dbase = dpath[0] ? strrchr(dpath, '/') : NULL;
    snprintf(gc.draft_name, sizeof(gc.draft_name), "%s", dbase ? dbase + 1 : dpath);
    /* the charting library the monitor page uses: a copy of uPlot's dist files under web/vendor/uplot */
    if (gc.web_root[0]) snprintf(gc.vendor_root, sizeof(gc.vendor_root), "%.480s/vendor/uplot", gc.web_root);
    telemetry *tel = NULL;
    if (tel_enabled) {
        if (!(tel = telemetry_open(&tc, err, sizeof(err)))) {
            fprintf(stderr, "specd serve: %s (or set telemetry.enabled: false)\n", err);
            pol_config_free(pc);
            return 1;
        }
        ec.telemetry = tel;
        gc.telemetry = tel;
    }
    static pol_store store;
    pol_store_init(&store, pc); /* the store owns the snapshot now; reloads swap it */
    ec.policy = &store;
    ec.model_name = gc.model_name;
    gc.policy = &store;
    snprintf(gc.config_path, sizeof(gc.config_path), "%s", cpath ? cpath : "");
    engine_status est;
    engine *e = engine_create(&ec, &est, err, sizeof(err));
    if (!e) {
        cli_load_failed("serve", est, err, CLI_OOM_HINT_CONFIG);
        telemetry_close(tel);
        pol_store_destroy(&store);
        return 1;
    }
    {
        if (engine_chat_is_jinja(e))
            fprintf(stderr, "specd: chat template: %s (Jinja; tool calls: %s)\n", engine_chat_source(e),
                    chat_tool_format_name(engine_chat_tool_format(e)));
        else
            fprintf(stderr, "specd: warning: the model has no chat template (%s): chat prompts use a built-in format "
                            "that may not be the model's; pass --chat-template FILE|NAME (models.chat_template)\n",
                    engine_chat_source(e));
    }
    learner *lr = NULL;
    if (ec.learn.enabled) {
        learner_config lc;
        learner_config_init(&lc);
        lc.e = e, lc.policy = &store, lc.dir = ldir;
        if (!(lr = learner_start(&lc, false, err, sizeof(err)))) {
            fprintf(stderr, "specd serve: %s\n", err);
            engine_destroy(e);
            telemetry_close(tel);
            pol_store_destroy(&store);
            return 1;
        }
        fprintf(stderr, "specd: learning from traffic: heads in %s, ring %zu MiB%s%s\n", ldir, ec.learn.ring_bytes >> 20,
                ec.learn.spill_path ? ", spilled to " : " (memory only)", ec.learn.spill_path ? ec.learn.spill_path : "");
    }
    int rc = gw_run(e, &gc, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "specd serve: %s\n", err);
    learner_stop(lr); /* before the engine it reads */
    engine_destroy(e);
    telemetry_close(tel); /* after the engine: every session-end row is queued, then flushed */
    pol_store_destroy(&store);
    return rc == 0 ? 0 : 1;
}
