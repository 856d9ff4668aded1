/* test_config.c — the config.yaml loader: the shipped file loads, documents
 * every key and states the true defaults; a table of broken files each gives
 * its exact "file:line:col: message"; did-you-mean; environment overrides; rule
 * precedence and inheritance; restart-key detection; the store's reload result. */
#include "policy/config.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const pol_env no_env = {NULL};

static pol_config *load_str(const char *yaml, const pol_env *env, char *err, size_t n) {
    return pol_config_load_mem(yaml, strlen(yaml), "t.yaml", env ? env : &no_env, err, n);
}

typedef struct {
    const char *yaml;
    const char *want;   /* substring of the error (starts with the position) */
    const char *absent; /* must NOT appear (or NULL) */
} broken;

static const broken table[] = {
    /* unknown keys, with and without a suggestion */
    {"server:\n  prot: 80\n", "t.yaml:2:3: unknown key 'server.prot'; did you mean 'port'?", NULL},
    {"sever:\n  port: 1\n", "t.yaml:1:1: unknown section 'sever'; did you mean 'server'?", NULL},
    {"engine:\n  frobnicate: 1\n", "t.yaml:2:3: unknown key 'engine.frobnicate'", "did you mean"},
    {"speculation:\n  gama_max: 4\n", "t.yaml:2:3: unknown key 'speculation.gama_max'; did you mean 'gamma_max'?", NULL},
    {"policy:\n  rules:\n    - content_typ: chat\n",
     "t.yaml:3:7: unknown key 'policy.rules[0].content_typ'; did you mean 'content_type'?", NULL},
    {"policy:\n  rule:\n    - content_type: chat\n", "t.yaml:2:3: unknown key 'policy.rule'; did you mean 'rules'?", NULL},
    /* wrong types */
    {"server:\n  port: abc\n", "t.yaml:2:9: server.port: expected an integer, got 'abc'", NULL},
    {"server:\n  grace_ms: 2.5\n", "t.yaml:2:13: server.grace_ms: expected an integer, got '2.5'", NULL},
    {"speculation:\n  adaptive: maybe\n", "t.yaml:2:13: speculation.adaptive: expected true or false, got 'maybe'", NULL},
    {"engine:\n  threads: [1]\n", "t.yaml:2:12: engine.threads: expected an integer, got a list", NULL},
    {"engine:\n  backend: gpu\n", "t.yaml:2:12: engine.backend: expected one of auto, cpu, cuda, got 'gpu'; did you mean 'cpu'?",
     NULL},
    {"server: 8080\n", "t.yaml:1:9: server: expected a mapping of keys, got a value", NULL},
    {"- a\n- b\n", "t.yaml:1:1: the top level must be a mapping", NULL},
    {"policy:\n  rules: {a: 1}\n", "t.yaml:2:10: policy.rules: expected a list of rules, got a mapping", NULL},
    {"server:\n  allowed_origins: {a: b}\n", "t.yaml:2:20: server.allowed_origins: expected a list of strings", NULL},
    /* out of range */
    {"server:\n  port: 70000\n", "t.yaml:2:9: server.port: 70000 is out of range (0..65535)", NULL},
    {"telemetry:\n  sample_rate: 1.5\n", "t.yaml:2:16: telemetry.sample_rate: 1.5 is out of range (0..1)", NULL},
    {"speculation:\n  gamma_max: 17\n", "t.yaml:2:14: speculation.gamma_max: 17 is out of range (1..16)", NULL},
    {"server:\n  max_choices: 17\n", "t.yaml:2:16: server.max_choices: 17 is out of range (1..16)", NULL},
    {"server:\n  grace_ms: 99999999999999999999\n", "t.yaml:2:13: server.grace_ms: expected an integer", NULL},
    {"engine:\n  block_size: 24\n", "t.yaml:2:15: engine.block_size: 24 is not a power of two", NULL},
    {"engine:\n  max_running: 8\n  max_batch: 16\n", "t.yaml:3:14: engine.max_batch 16 > engine.max_running 8", NULL},
    /* γ bounds */
    {"speculation:\n  gamma_min: 9\n  gamma_max: 4\n", "t.yaml:2:14: speculation: gamma_min 9 > gamma_max 4", NULL},
    {"speculation:\n  gamma_default: 12\n",
     "t.yaml:2:18: speculation: gamma_default 12 is outside [gamma_min 2, gamma_max 8]", NULL},
    {"policy:\n  rules:\n    - content_type: chat\n      gamma_min: 7\n      gamma_max: 3\n",
     "t.yaml:4:18: policy.rules[0]: gamma_min 7 > gamma_max 3", NULL},
    /* duplicates */
    {"policy:\n  rules:\n    - content_type: code\n      gamma_max: 6\n    - content_type: code\n",
     "t.yaml:5:7: policy.rules[1]: duplicate rule for model '*' content_type 'code' (first at line 3)", NULL},
    {"server:\n  port: 1\n  port: 2\n", "t.yaml:3:3: duplicate key 'server.port' (first at line 2)", NULL},
    {"models: {}\nmodels: {}\n", "t.yaml:2:1: duplicate key 'models' (first at line 1)", NULL},
    /* model files, admin token, names */
    {"models:\n  target: /nonexistent/x.gguf\n",
     "t.yaml:2:11: models.target: cannot read model file '/nonexistent/x.gguf': No such file or directory", NULL},
    {"server:\n  admin_token: x\n  admin_token_env: Y\n", "t.yaml:3:20: server: give admin_token or admin_token_env, not both",
     NULL},
    {"server:\n  admin_token_env: SPECD_TEST_UNSET_VAR\n",
     "t.yaml:2:20: server.admin_token_env: environment variable 'SPECD_TEST_UNSET_VAR' is not set", NULL},
    {"policy:\n  rules:\n    - content_type: Code!\n", "t.yaml:3:21: policy.rules[0].content_type: expected", NULL},
    /* YAML itself */
    {"server:\n  port: 1\n---\nmodels: {}\n", "t.yaml:4:1: only one YAML document is allowed", NULL},
    {"server:\n\tport: 1\n", "t.yaml:2:1: found character that cannot start any token", NULL},
    {"server:\n  port: [1, 2\n", "t.yaml:3:1: did not find expected ',' or ']'", NULL},
    {"server: {port: 1\n", "t.yaml:2:1: did not find expected ',' or '}'", NULL},
};

/* The shipped file: every schema key appears under its section. */
static void check_documented(const char *text) {
    for (int i = 0; pol_config_key(i, NULL); i++) {
        char sec[48], key[48], pat[64];
        const char *name = pol_config_key(i, NULL);
        const char *dot = strrchr(name, '.');
        snprintf(sec, sizeof(sec), "%.*s", (int)(strchr(name, '.') - name), name);
        snprintf(key, sizeof(key), "%s", dot + 1);
        snprintf(pat, sizeof(pat), "\n%s:", sec);
        const char *s = strstr(text, pat);
        CHECKF(s != NULL, "section %s not in config.yaml", sec);
        if (!s) continue;
        const char *end = s + 1;
        while ((end = strchr(end, '\n')) && end[1] && (end[1] == ' ' || end[1] == '#' || end[1] == '\n')) end++;
        bool rule_key = strstr(name, "rules[]") != NULL;
        snprintf(pat, sizeof(pat), rule_key ? " %s:" : "\n  %s:", key);
        const char *k = strstr(s, pat);
        if (rule_key && k == NULL) { /* the first rule key follows "- " */
            snprintf(pat, sizeof(pat), "- %s:", key);
            k = strstr(s, pat);
        }
        CHECKF(k && (!end || k < end), "key %s is not documented in config.yaml", name);
    }
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
    fclose(f);
    return b;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

int main(void) {
    char err[1024];
    const char *src = getenv("SPECD_SRC") ? getenv("SPECD_SRC") : ".";
    char path[1024];

    /* ---- the shipped file ---- */
    snprintf(path, sizeof(path), "%s/config.yaml", src);
    pol_config *c = pol_config_load(path, &no_env, err, sizeof(err));
    CHECKF(c != NULL, "shipped config.yaml: %s", err);
    pol_config *d = pol_config_default();
    if (c) {
        CHECK(c->server.port == 8080 && !strcmp(c->server.host, "127.0.0.1"));
        CHECK(c->n_rules == 3);
        const pol_rule *r = pol_config_rule(c, "any.gguf", "code");
        CHECK(r->gamma_default == 6 && r->gamma_max == 10 && r->line > 0);
        /* "the values shown are the defaults" */
        CHECK(!memcmp(&c->server, &d->server, sizeof(c->server)));
        CHECK(!memcmp(&c->models, &d->models, sizeof(c->models)));
        CHECK(!memcmp(&c->engine, &d->engine, sizeof(c->engine)));
        CHECK(!memcmp(&c->speculation, &d->speculation, sizeof(c->speculation)));
        CHECK(!memcmp(&c->telemetry, &d->telemetry, sizeof(c->telemetry)));
        CHECK(c->n_env == 0 && c->version == 0);
    }
    char *text = read_all(path);
    CHECK(text != NULL);
    if (text) check_documented(text);
    free(text);
    pol_config_free(c);
    CHECK(d->n_rules == 0 && d->default_rule.gamma_default == 4 && d->default_rule.alpha_threshold == 0.4);

    /* ---- broken files ---- */
    int nt = (int)(sizeof(table) / sizeof(table[0]));
    CHECK(nt >= 15);
    for (int i = 0; i < nt; i++) {
        err[0] = 0;
        pol_config *b = load_str(table[i].yaml, &no_env, err, sizeof(err));
        CHECKF(b == NULL, "case %d loaded: %s", i, table[i].yaml);
        pol_config_free(b);
        CHECKF(strstr(err, table[i].want) != NULL, "case %d:\n   want '%s'\n   got  '%s'", i, table[i].want, err);
        if (table[i].absent) CHECKF(!strstr(err, table[i].absent), "case %d: '%s' in '%s'", i, table[i].absent, err);
        CHECKF(!strchr(err, '\n'), "case %d: multi-line error", i);
    }
    /* the same through a real file: the message names the path */
    snprintf(path, sizeof(path), "/tmp/specd-test-config-%d.yaml", (int)getpid());
    write_file(path, "server:\n  port: abc\n");
    CHECK(pol_config_load(path, &no_env, err, sizeof(err)) == NULL);
    char want[1200];
    snprintf(want, sizeof(want), "%s:2:9: server.port: expected an integer, got 'abc'", path);
    CHECKF(!strcmp(err, want), "got '%s'", err);
    CHECK(pol_config_load("/nonexistent/specd.yaml", &no_env, err, sizeof(err)) == NULL);
    CHECKF(strstr(err, "/nonexistent/specd.yaml: cannot open") != NULL, "got '%s'", err);

    /* ---- valid odds and ends ---- */
    c = load_str("{}", &no_env, err, sizeof(err));
    CHECKF(c && !memcmp(&c->speculation, &d->speculation, sizeof(d->speculation)), "{}: %s", err);
    pol_config_free(c);
    c = load_str("# all defaults\n---\n{}\n", &no_env, err, sizeof(err));
    CHECKF(c && c->server.port == d->server.port, "comment and {}: %s", err);
    pol_config_free(c);
    /* a file without settings is refused (an editor mid-write), not taken as all defaults */
    static const char *const empties[] = {"", "   \n  \n\n", "# only a comment\n# and another\n", "---\n", "~\n",
                                          "null", "\n---\n# nothing\n"};
    for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
        err[0] = 0;
        CHECKF(load_str(empties[i], &no_env, err, sizeof(err)) == NULL, "empty file %zu accepted", i);
        CHECKF(!strncmp(err, "t.yaml:", 7) && strstr(err, "holds no settings") && strstr(err, "write {}"),
               "empty file %zu: '%s'", i, err);
    }
    /* a section with nothing under it is a mistake (keys that lost their
     * indentation, a cut file), not "this section's defaults": refused with
     * its position, for every section and every way of writing "nothing" */
    static const struct { const char *yaml, *want; } nulls[] = {
        {"server:\n", "t.yaml:1:1: section 'server' is empty"},
        {"server:\nmodels: ~\n", "t.yaml:1:1: section 'server' is empty"},
        {"server:\n  port: 1\nmodels: ~\n", "t.yaml:3:1: section 'models' is empty"},
        {"engine: null\n", "t.yaml:1:1: section 'engine' is empty"},
        {"speculation:\ngamma_max: 4\n", "t.yaml:1:1: section 'speculation' is empty"}, /* lost indentation */
        {"server:\n  port: 1\npolicy:\n", "t.yaml:3:1: section 'policy' is empty"},
        {"telemetry: \n# path: x.db\n", "t.yaml:1:1: section 'telemetry' is empty"},
    };
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++) {
        err[0] = 0;
        c = load_str(nulls[i].yaml, &no_env, err, sizeof(err));
        CHECKF(c == NULL && !strncmp(err, nulls[i].want, strlen(nulls[i].want)), "null section %zu: got '%s', want '%s'",
               i, err, nulls[i].want);
        pol_config_free(c);
    }
    CHECKF(strstr(err, "write 'telemetry: {}'"), "the refusal says how to keep the defaults: '%s'", err);
    c = load_str("server: {}\nmodels: {}\npolicy: {}\n", &no_env, err, sizeof(err));
    CHECKF(c != NULL && c->server.port == d->server.port, "explicit empty sections {}: %s", err);
    pol_config_free(c);
    c = load_str("server:\n  allowed_origins: [\"https://a.example\", \"https://b.example\"]\n", &no_env, err,
                 sizeof(err));
    CHECKF(c && c->server.n_origins == 2 && !strcmp(c->server.allowed_origins, "https://a.example,https://b.example"),
           "%s", err);
    pol_config_free(c);
    c = load_str("server:\n  allowed_origins: \"https://a.example, *\"\n", &no_env, err, sizeof(err));
    CHECKF(c && c->server.n_origins == 2 && !strcmp(c->server.origins[1], "*"), "%s", err);
    pol_config_free(c);
    c = load_str("engine: {backend: cuda}\nspeculation: {mode: off, adaptive: no}\n", &no_env, err, sizeof(err));
    CHECKF(c && c->engine.backend == POL_BACKEND_CUDA && c->speculation.mode == POL_SPEC_OFF &&
               !c->speculation.adaptive, "%s", err);
    pol_config_free(c);

    /* ---- environment ---- */
    snprintf(path, sizeof(path), "/tmp/specd-test-model-%d.gguf", (int)getpid());
    write_file(path, "GGUF");
    char model_var[1100];
    snprintf(model_var, sizeof(model_var), "SPECD_MODEL=%s", path);
    const char *vars[] = {"SPECD_PORT=9001", model_var, "MY_TOKEN=s3cret", NULL};
    pol_env env = {vars};
    c = load_str("server:\n  port: 8000\n  admin_token_env: MY_TOKEN\n", &env, err, sizeof(err));
    CHECKF(c != NULL, "%s", err);
    if (c) {
        CHECK(c->server.port == 9001 && !strcmp(c->models.target, path));
        CHECK(pol_config_from_env(c, "server.port") && pol_config_from_env(c, "models.target"));
        CHECK(!pol_config_from_env(c, "models.draft") && c->n_env == 2);
        CHECK(!strcmp(c->server.admin_token, "s3cret") && !strcmp(c->server.admin_token_env, "MY_TOKEN"));
    }
    pol_config_free(c);
    const char *bad_port[] = {"SPECD_PORT=http", NULL};
    env.vars = bad_port;
    CHECK(load_str("{}", &env, err, sizeof(err)) == NULL);
    CHECKF(!strcmp(err, "SPECD_PORT (environment, for server.port): expected an integer, got 'http'"), "got '%s'", err);
    const char *bad_model[] = {"SPECD_DRAFT=/nonexistent/d.gguf", model_var, NULL};
    env.vars = bad_model;
    CHECK(load_str("{}", &env, err, sizeof(err)) == NULL);
    CHECKF(strstr(err, "SPECD_DRAFT (environment, for models.draft): cannot read model file '/nonexistent/d.gguf'"),
           "got '%s'", err);
    /* NULL env = the process environment */
    setenv("SPECD_PORT", "9123", 1);
    setenv("SPECD_ADMIN_TOKEN", "tok", 1);
    c = pol_config_load_mem("{}", 2, "t.yaml", NULL, err, sizeof(err));
    CHECKF(c && c->server.port == 9123 && !strcmp(c->server.admin_token, "tok") &&
               pol_config_from_env(c, "server.admin_token"), "%s", err);
    pol_config_free(c);
    unsetenv("SPECD_PORT");
    unsetenv("SPECD_ADMIN_TOKEN");

    /* ---- rule precedence and inheritance ---- */
    c = load_str("speculation: {gamma_min: 2, gamma_max: 8, gamma_default: 5, fallback_alpha: 0.3}\n"
                 "policy:\n  rules:\n"
                 "    - {model: \"*\", content_type: \"*\", gamma_default: 3}\n"
                 "    - {model: m1, content_type: \"*\", gamma_default: 4}\n"
                 "    - {model: \"*\", content_type: code, gamma_default: 6}\n"
                 "    - {model: m1, content_type: code, gamma_default: 7}\n"
                 "    - {model: m2, content_type: chat, gamma_max: 3}\n",
                 &no_env, err, sizeof(err));
    CHECKF(c != NULL, "%s", err);
    if (c) {
        CHECK(pol_config_rule(c, "m1", "code")->gamma_default == 7);  /* exact + exact */
        CHECK(pol_config_rule(c, "m9", "code")->gamma_default == 6);  /* * + exact */
        CHECK(pol_config_rule(c, "m1", "chat")->gamma_default == 4);  /* exact + * */
        CHECK(pol_config_rule(c, "m9", "chat")->gamma_default == 3);  /* * + * */
        CHECK(pol_config_rule(c, NULL, NULL)->gamma_default == 3);
        const pol_rule *r = pol_config_rule(c, "m2", "chat");
        CHECK(r->gamma_max == 3 && r->gamma_default == 3 && r->gamma_min == 2); /* inherited default clamped */
        CHECK(r->alpha_threshold == 0.3 && r->line == 8);
    }
    pol_config_free(c);
    c = load_str("speculation: {gamma_default: 5}\npolicy: {rules: [{model: m1, content_type: code, gamma_max: 6}]}\n",
                 &no_env, err, sizeof(err));
    CHECKF(c != NULL, "%s", err);
    if (c) {
        CHECK(pol_config_rule(c, "m1", "code")->gamma_max == 6);
        const pol_rule *r = pol_config_rule(c, "m1", "chat"); /* no match: the speculation section */
        CHECK(r == &c->default_rule && r->gamma_default == 5 && r->line == 0);
    }
    pol_config_free(c);

    /* ---- restart keys ---- */
    char note[512];
    pol_config *a = load_str("server: {port: 8000}\nspeculation: {gamma_max: 8}\n", &no_env, err, sizeof(err));
    char yb[1400];
    snprintf(yb, sizeof(yb),
             "server: {port: 8001, max_tokens_limit: 100}\nmodels: {target: \"%s\"}\nspeculation: {gamma_max: 6}\n"
             "policy: {rules: [{content_type: code, gamma_max: 5}]}\n", path);
    pol_config *b = load_str(yb, &no_env, err, sizeof(err));
    CHECKF(a && b, "%s", err);
    if (a && b) {
        CHECK(pol_restart_keys(a, b, note, sizeof(note)) == 2);
        CHECKF(!strcmp(note, "needs restart: server.port, models.target"), "got '%s'", note);
        CHECK(pol_restart_keys(a, a, note, sizeof(note)) == 0 && note[0] == 0);
        char tiny[8];
        CHECK(pol_restart_keys(a, b, tiny, sizeof(tiny)) == 2 && strlen(tiny) == 7);
    }
    pol_config_free(a);
    pol_config_free(b);
    bool rs = false;
    int nkeys = 0, nrestart = 0;
    for (; pol_config_key(nkeys, &rs); nkeys++) nrestart += rs;
    CHECK(nkeys > 40 && nrestart > 10 && pol_config_key(-1, NULL) == NULL);

    /* ---- store: reload keeps the old snapshot on error ---- */
    char cpath[1100];
    snprintf(cpath, sizeof(cpath), "/tmp/specd-test-store-%d.yaml", (int)getpid());
    write_file(cpath, "speculation: {gamma_max: 6}\n");
    pol_store st;
    pol_store_init(&st, pol_config_load(cpath, &no_env, err, sizeof(err)));
    const pol_config *held = pol_store_acquire(&st);
    CHECK(pol_config_version(held) == 1);
    write_file(cpath, "server: {port: 9999}\nspeculation: {gamma_max: 7}\n");
    CHECK(pol_store_reload(&st, cpath, err, sizeof(err), note, sizeof(note)) == 0);
    CHECKF(!strcmp(note, "needs restart: server.port"), "got '%s'", note);
    const pol_config *now = pol_store_acquire(&st);
    CHECK(pol_config_version(now) == 2 && now->speculation.gamma_max == 7);
    CHECK(held->speculation.gamma_max == 6 && pol_config_version(held) == 1); /* still valid */
    pol_store_release(&st, held);
    pol_store_release(&st, now);
    write_file(cpath, "speculation: {gamma_max: 7, gama_min: 1}\n");
    CHECK(pol_store_reload(&st, cpath, err, sizeof(err), note, sizeof(note)) == -1);
    CHECKF(strstr(err, ":1:29: unknown key 'speculation.gama_min'; did you mean 'gamma_min'?"), "got '%s'", err);
    pol_reload_status rst;
    pol_store_last_reload(&st, &rst);
    CHECK(!rst.ok && rst.version == 2 && rst.n_ok == 1 && rst.n_failed == 1 && rst.time > 0 && !strcmp(rst.message, err));
    now = pol_store_acquire(&st);
    CHECK(pol_config_version(now) == 2);
    pol_store_release(&st, now);
    pol_store_destroy(&st);

    pol_config_free(d);
    unlink(cpath);
    unlink(path);
    snprintf(path, sizeof(path), "/tmp/specd-test-config-%d.yaml", (int)getpid());
    unlink(path);
    printf("config: %d broken files checked, %d schema keys (%d need a restart)\n", nt, nkeys, nrestart);
    TEST_DONE();
}
