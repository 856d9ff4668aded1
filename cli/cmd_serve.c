/* cmd_serve.c — `specd serve`: loads the model pair into the engine and runs
 * the gateway (WebSocket streaming, OpenAI-compatible HTTP, metrics, web
 * pages) until SIGINT/SIGTERM. Settings come from config.yaml; flags override
 * the common ones. */
#include "cli/cmd.h"
#include "cli/util.h"
#include "engine/engine.h"
#include "engine/mkmodel.h"
#include "engine/telemetry.h"
#include "gateway/server.h"
#include "policy/yamlcfg.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void serve_usage(void) {
    fprintf(stderr,
            "usage: specd serve [-c config.yaml] [--host H] [--port P] [-m TARGET.gguf] [--draft DRAFT.gguf]\n"
            "                   [--web-root DIR] [-t THREADS] [--max-running N] [--ctx N]\n"
            "  --port 0 picks a free port; the ready line names the URL. Without a model (flag or\n"
            "  models.target in the config) a demo pair with RANDOM weights is served.\n");
}

/* Reads an integer config value into *out when present; returns -1 on a bad value. */
static int cfg_int(pol_yaml *y, const char *path, int lo, int hi, int *out, char *err, size_t n) {
    err[0] = 0;
    const char *v = pol_yaml_scalar(y, path, err, n);
    if (!v) return err[0] ? -1 : 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        snprintf(err, n, "config: %s must be an integer in [%d, %d], got '%s'", path, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int cfg_bool(pol_yaml *y, const char *path, int *out, char *err, size_t n) {
    err[0] = 0;
    const char *v = pol_yaml_scalar(y, path, err, n);
    if (!v) return err[0] ? -1 : 0;
    if (!strcmp(v, "true") || !strcmp(v, "yes")) *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "no")) *out = 0;
    else {
        snprintf(err, n, "config: %s must be true or false, got '%s'", path, v);
        return -1;
    }
    return 0;
}

static int cfg_str(pol_yaml *y, const char *path, char *out, size_t cap, char *err, size_t n) {
    err[0] = 0;
    const char *v = pol_yaml_scalar(y, path, err, n);
    if (!v) return err[0] ? -1 : 0;
    snprintf(out, cap, "%s", v);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *config_path = NULL, *host = NULL, *model = NULL, *draft = NULL, *web_root = NULL;
    int port = -1, threads = -1, max_running = -1, ctx = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) config_path = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--host")) host = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--port")) port = (int)arg_long(argc, argv, &i, 0, 65535);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--draft")) draft = arg_str(argc, argv, &i);
        else if (!strcmp(a, "--web-root")) web_root = arg_str(argc, argv, &i);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) threads = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--max-running")) max_running = (int)arg_long(argc, argv, &i, 1, 1024);
        else if (!strcmp(a, "--ctx")) ctx = (int)arg_long(argc, argv, &i, 16, 1 << 20);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { serve_usage(); return 0; }
        else { fprintf(stderr, "specd serve: unknown option '%s'\n", a); serve_usage(); return 2; }
    }
    gw_config gc = gw_config_default();
    engine_config ec = engine_config_default();
    char err[1024] = "", tpath[1024] = "", dpath[1024] = "", wroot[512] = "web";
    int cfg_threads = 0, cfg_running = ec.max_running, cfg_ctx = 0, tel_enabled = 0;
    char tel_path[512] = "telemetry.db";
    if (config_path || access("config.yaml", R_OK) == 0) {
        pol_yaml *y = pol_yaml_load(config_path ? config_path : "config.yaml", err, sizeof(err));
        if (!y) {
            fprintf(stderr, "specd serve: %s\n", err);
            return 2;
        }
        int rc = cfg_str(y, "server.host", gc.host, sizeof(gc.host), err, sizeof(err)) ||
                 cfg_int(y, "server.port", 0, 65535, &gc.port, err, sizeof(err)) ||
                 cfg_str(y, "server.web_root", wroot, sizeof(wroot), err, sizeof(err)) ||
                 cfg_str(y, "server.allowed_origins", gc.allowed_origins, sizeof(gc.allowed_origins), err,
                         sizeof(err)) ||
                 cfg_int(y, "server.max_message_bytes", 256, 64 << 20, &gc.max_message_bytes, err, sizeof(err)) ||
                 cfg_int(y, "server.max_requests_per_connection", 1, 100000, &gc.max_requests_per_conn, err,
                         sizeof(err)) ||
                 cfg_int(y, "server.max_requests_total", 1, 1000000, &gc.max_requests_total, err, sizeof(err)) ||
                 cfg_int(y, "server.max_connections", 1, 1000000, &gc.max_connections, err, sizeof(err)) ||
                 cfg_int(y, "server.max_tokens_limit", 1, 1 << 20, &gc.max_tokens_limit, err, sizeof(err)) ||
                 cfg_int(y, "server.grace_ms", 0, 3600000, &gc.grace_ms, err, sizeof(err)) ||
                 cfg_str(y, "models.target", tpath, sizeof(tpath), err, sizeof(err)) ||
                 cfg_str(y, "models.draft", dpath, sizeof(dpath), err, sizeof(err)) ||
                 cfg_int(y, "engine.threads", 0, 1024, &cfg_threads, err, sizeof(err)) ||
                 cfg_int(y, "engine.max_running", 1, 1024, &cfg_running, err, sizeof(err)) ||
                 cfg_int(y, "engine.max_ctx", 0, 1 << 20, &cfg_ctx, err, sizeof(err)) ||
                 cfg_int(y, "speculation.gamma_min", 1, GAMMA_MAX, &ec.gamma.gamma_min, err, sizeof(err)) ||
                 cfg_int(y, "speculation.gamma_max", 1, GAMMA_MAX, &ec.gamma.gamma_max, err, sizeof(err)) ||
                 cfg_int(y, "speculation.gamma_default", 1, GAMMA_MAX, &ec.gamma.gamma_default, err, sizeof(err)) ||
                 cfg_bool(y, "telemetry.enabled", &tel_enabled, err, sizeof(err)) ||
                 cfg_str(y, "telemetry.path", tel_path, sizeof(tel_path), err, sizeof(err));
        pol_yaml_free(y);
        if (rc) {
            fprintf(stderr, "specd serve: %s\n", err);
            return 2;
        }
    }
    if (host) snprintf(gc.host, sizeof(gc.host), "%s", host);
    if (port >= 0) gc.port = port;
    if (web_root) snprintf(wroot, sizeof(wroot), "%s", web_root);
    snprintf(gc.web_root, sizeof(gc.web_root), "%s", access(wroot, R_OK) == 0 ? wroot : "");
    if (model) snprintf(tpath, sizeof(tpath), "%s", model), dpath[0] = 0;
    if (draft) snprintf(dpath, sizeof(dpath), "%s", draft);
    const char *env_port = getenv("SPECD_PORT"), *env_model = getenv("SPECD_MODEL"), *env_draft = getenv("SPECD_DRAFT");
    if (env_port && port < 0) gc.port = atoi(env_port);
    if (env_model && !model) snprintf(tpath, sizeof(tpath), "%s", env_model);
    if (env_draft && !draft) snprintf(dpath, sizeof(dpath), "%s", env_draft);
    if (!tpath[0]) {
        const char *t, *d;
        if (cmd_demo_models(&t, &d, err, sizeof(err)) != 0) {
            fprintf(stderr, "specd serve: cannot create the demo models: %s\n", err);
            return 1;
        }
        snprintf(tpath, sizeof(tpath), "%s", t);
        snprintf(dpath, sizeof(dpath), "%s", d);
    }
    ec.target_path = tpath;
    ec.draft_path = dpath[0] ? dpath : NULL;
    ec.threads = threads > 0 ? threads : cfg_threads;
    ec.max_running = max_running > 0 ? max_running : cfg_running;
    ec.max_ctx = ctx > 0 ? ctx : cfg_ctx;
    if (!gamma_params_validate(&ec.gamma, err, sizeof(err))) {
        fprintf(stderr, "specd serve: config: speculation: %s\n", err);
        return 2;
    }
    const char *base = strrchr(tpath, '/');
    snprintf(gc.model_name, sizeof(gc.model_name), "%s", base ? base + 1 : tpath);
    const char *dbase = dpath[0] ? strrchr(dpath, '/') : NULL;
    snprintf(gc.draft_name, sizeof(gc.draft_name), "%s", dbase ? dbase + 1 : dpath);
    /* the charting library the monitor page uses, installed by npm beside web/ */
    if (gc.web_root[0]) snprintf(gc.vendor_root, sizeof(gc.vendor_root), "%.480s/../node_modules/uplot/dist", gc.web_root);
    telemetry *tel = NULL;
    if (tel_enabled) {
        telemetry_config tc = telemetry_config_default();
        tc.path = tel_path;
        if (!(tel = telemetry_open(&tc, err, sizeof(err)))) {
            fprintf(stderr, "specd serve: %s (or set telemetry.enabled: false)\n", err);
            return 1;
        }
        ec.telemetry = tel;
        gc.telemetry = tel;
    }
    engine *e = engine_create(&ec, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "specd serve: %s\n", err);
        telemetry_close(tel);
        return 1;
    }
    int rc = gw_run(e, &gc, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "specd serve: %s\n", err);
    engine_destroy(e);
    telemetry_close(tel); /* after the engine: every session-end row is queued, then flushed */
    return rc == 0 ? 0 : 1;
}
