/* config.c — the reference-counted snapshot, the schema (a table per section;
 * parsing, range checks, suggestions and the restart diff are all driven by
 * it), the defaults, rule lookup, the key listing and the restart diff (see
 * config.h). Parsing and loading: config_load.c; the store: store.c. */
#include "policy/config_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- snapshot allocation (reference counted) ------------------------------- */

void pol_config_free(pol_config *c) {
    if (!c) return;
    pol_snap *s = snap_of(c);
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) free(s);
}

int pol_config_version(const pol_config *c) { return c ? c->version : 0; }

bool pol_config_from_env(const pol_config *c, const char *key) {
    for (int i = 0; i < c->n_env; i++)
        if (!strcmp(c->env_keys[i], key)) return true;
    return false;
}

/* ---- schema ----------------------------------------------------------------- */

static const char *const backend_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const kv_type_names[] = {"f32", "f16", NULL};
static const char *const mode_names[] = {"auto", "draft", "off", NULL};
static const char *const method_names[] = {"auto", "draft", "ngram", "off", "medusa", "eagle", NULL};
static const char *const verify_names[] = {"rejection", "coupled", NULL};
static const char *const tree_names[] = {"off", "auto", "fixed", NULL};

const char *pol_method_name(pol_spec_method m) { return (unsigned)m <= POL_METHOD_MEDUSA ? method_names[m] : "?"; }

#define KI(s, f, lo, hi, rs) {#f, K_INT, offsetof(s, f), 0, lo, hi, NULL, rs}
#define KF(s, f, lo, hi, rs) {#f, K_FLOAT, offsetof(s, f), 0, lo, hi, NULL, rs}
#define KB(s, f, rs) {#f, K_BOOL, offsetof(s, f), 0, 0, 0, NULL, rs}
#define KS(s, f, rs) {#f, K_STR, offsetof(s, f), sizeof(((s *)0)->f), 0, 0, NULL, rs}
#define KE(s, f, names, rs) {#f, K_ENUM, offsetof(s, f), 0, 0, 0, names, rs}
#define KL(s, f, lo, hi, rs) {#f, K_INTLIST, offsetof(s, f), 0, lo, hi, NULL, rs} /* a pol_int_list */

static const keydef server_keys[] = {
    KS(pol_server, host, true),
    KI(pol_server, port, 0, 65535, true),
    KS(pol_server, web_root, true),
    {"allowed_origins", K_ORIGINS, 0, 0, 0, 0, NULL, false},
    KS(pol_server, allowed_hosts, true),
    KI(pol_server, idle_timeout_s, 0, 86400, true),
    KI(pol_server, max_message_bytes, 256, 64 << 20, true),
    KI(pol_server, max_requests_per_connection, 1, 100000, false),
    KI(pol_server, max_requests_total, 1, 1000000, false),
    KI(pol_server, max_connections, 1, 1000000, true),
    KI(pol_server, max_tokens_limit, 1, 1 << 20, false),
    KI(pol_server, max_tokens_default, 0, 1 << 20, false),
    KI(pol_server, max_choices, 1, 16, false),
    KI(pol_server, grace_ms, 0, 3600000, false),
    KS(pol_server, admin_token, false),
    KS(pol_server, admin_token_env, false),
    KS(pol_server, api_keys, false),
    KS(pol_server, api_key_file, false),
    KS(pol_server, auth_exempt, false),
    KS(pol_server, cors_origins, false),
    KS(pol_server, tls_cert, true),
    KS(pol_server, tls_key, true),
};
static const keydef models_keys[] = {
    KS(pol_models, target, true),
    KS(pol_models, draft, true),
    KS(pol_models, medusa, true),
    KS(pol_models, eagle, true),
    KS(pol_models, alias, false),
    KS(pol_models, chat_template, true),
};
static const keydef engine_keys[] = {
    KE(pol_engine, backend, backend_names, true),
    KI(pol_engine, tensor_parallel, 1, POL_MAX_DEVICES, true),
    KL(pol_engine, devices, 0, 255, true),
    KI(pol_engine, threads, 0, 1024, true),
    KI(pol_engine, max_batch, 0, 1024, true),
    KI(pol_engine, max_ctx, 0, 1 << 20, true),
    KI(pol_engine, kv_blocks, 0, 1 << 24, true),
    KI(pol_engine, block_size, 1, 1024, true),
    KE(pol_engine, kv_type, kv_type_names, true),
    KI(pol_engine, prefill_chunk, 1, 1 << 16, true),
    KI(pol_engine, max_running, 1, 1024, true),
    KB(pol_engine, prefix_cache, true),
    KI(pol_engine, prefix_cache_blocks, 0, 1 << 24, true),
};
static const keydef spec_keys[] = {
    KE(pol_speculation, mode, mode_names, true),
    KE(pol_speculation, method, method_names, false),
    KE(pol_speculation, verify, verify_names, true),
    KI(pol_speculation, ngram_min, 1, 8, true),
    KI(pol_speculation, ngram_max, 1, 8, true),
    KI(pol_speculation, gamma_min, 1, POL_GAMMA_LIMIT, false),
    KI(pol_speculation, gamma_max, 1, POL_GAMMA_LIMIT, false),
    KI(pol_speculation, gamma_default, 1, POL_GAMMA_LIMIT, false),
    KB(pol_speculation, adaptive, true),
    KI(pol_speculation, window, 1, 64, true),
    KI(pol_speculation, warmup, 0, 1000, true),
    KF(pol_speculation, fallback_alpha, 0, 1, false),
    KI(pol_speculation, fallback_steps, 1, 100000, true),
    KI(pol_speculation, probe_interval, 1, 1000000, true),
    KF(pol_speculation, padding_cap, 1, 16, true),
    KF(pol_speculation, draft_mem_warn_pct, 0, 100, true),
    KE(pol_speculation, tree, tree_names, true),
    KI(pol_speculation, tree_budget, 1, POL_TREE_NODES, true),
    KI(pol_speculation, tree_depth, 1, POL_TREE_NODES, true),
    KI(pol_speculation, tree_topk, 1, 8, true),
    KB(pol_speculation, learn, false),
    KI(pol_speculation, learn_ring_mb, 1, 1 << 20, false),
    KS(pol_speculation, learn_spill, true),
    KS(pol_speculation, learn_dir, true),
    KF(pol_speculation, learn_share, 0.05, 1, false),
    KF(pol_speculation, learn_margin, 0, 16, false),
    KI(pol_speculation, learn_min_positions, 16, 1 << 30, false),
    KI(pol_speculation, learn_steps, 1, 1 << 20, false),
};
const keydef pol_rule_keys[] = {
    KS(pol_rule, model, false),
    KS(pol_rule, content_type, false),
    KI(pol_rule, gamma_min, 1, POL_GAMMA_LIMIT, false),
    KI(pol_rule, gamma_max, 1, POL_GAMMA_LIMIT, false),
    KI(pol_rule, gamma_default, 1, POL_GAMMA_LIMIT, false),
    KF(pol_rule, alpha_threshold, 0, 1, false),
    KE(pol_rule, method, method_names, false),
    KB(pol_rule, learn, false),
};
static const keydef telemetry_keys[] = {
    KB(pol_telemetry, enabled, true),
    KS(pol_telemetry, path, true),
    KF(pol_telemetry, sample_rate, 0, 1, true),
    KI(pol_telemetry, retention_rows, 0, 2000000000, true),
    KI(pol_telemetry, retention_days, 0, 36500, true),
    KI(pol_telemetry, queue_size, 16, 1 << 24, true),
};
static const keydef grammar_keys[] = {
    KI(pol_grammar, max_bytes, 256, 1 << 20, true),
    KI(pol_grammar, max_rules, 16, 1 << 20, true),
    KI(pol_grammar, max_elements, 64, 1 << 20, true),
    KI(pol_grammar, max_enum, 1, 1 << 20, true),
    KI(pol_grammar, compile_ms, 10, 600000, true),
    KI(pol_grammar, matcher_mb, 1, 65536, true),
    KI(pol_grammar, cache_mb, 1, 65536, true),
};
static const keydef policy_keys[] = {{"rules", K_INT, 0, 0, 0, 0, NULL, false}}; /* handled by hand */

const int pol_n_rule_keys = NKEYS(pol_rule_keys);

const secdef pol_sections[] = {
    {"server", server_keys, NKEYS(server_keys), offsetof(pol_config, server)},
    {"models", models_keys, NKEYS(models_keys), offsetof(pol_config, models)},
    {"engine", engine_keys, NKEYS(engine_keys), offsetof(pol_config, engine)},
    {"speculation", spec_keys, NKEYS(spec_keys), offsetof(pol_config, speculation)},
    {"policy", policy_keys, NKEYS(policy_keys), 0},
    {"telemetry", telemetry_keys, NKEYS(telemetry_keys), offsetof(pol_config, telemetry)},
    {"grammar", grammar_keys, NKEYS(grammar_keys), offsetof(pol_config, grammar)},
};
_Static_assert(NKEYS(pol_sections) == POL_N_SECTIONS, "POL_N_SECTIONS (config_internal.h) counts the sections");
/* the loader's per-section tables (names, value marks) hold MAXKEYS keys */
_Static_assert(NKEYS(server_keys) <= MAXKEYS && NKEYS(models_keys) <= MAXKEYS && NKEYS(engine_keys) <= MAXKEYS &&
                   NKEYS(spec_keys) <= MAXKEYS && NKEYS(pol_rule_keys) <= MAXKEYS && NKEYS(telemetry_keys) <= MAXKEYS &&
                   NKEYS(grammar_keys) <= MAXKEYS,
               "a config section has more keys than MAXKEYS (config_internal.h): raise it");

void pol_cfg_defaults(pol_config *c) {
    memset(c, 0, sizeof(*c));
    pol_server *s = &c->server;
    snprintf(s->host, sizeof(s->host), "127.0.0.1");
    s->port = 8080;
    s->max_message_bytes = 1 << 20;
    s->max_requests_per_connection = 64;
    s->max_requests_total = 1024;
    s->max_connections = 1024;
    s->idle_timeout_s = 300;
    s->max_tokens_limit = 4096;
    s->max_choices = 4;
    s->grace_ms = 10000;
    snprintf(s->auth_exempt, sizeof(s->auth_exempt), "/healthz,/health,/metrics");
    c->engine = (pol_engine){.backend = POL_BACKEND_AUTO, .tensor_parallel = 1, .devices = {.n = 1, .v = {0}},
                             .block_size = 16, .kv_type = POL_KV_F16, .prefill_chunk = 256, .max_running = 32,
                             .prefix_cache = true};
    c->speculation = (pol_speculation){.mode = POL_SPEC_AUTO, .gamma_min = 2, .gamma_max = 8, .gamma_default = 4,
                                       .adaptive = true, .window = 20, .warmup = 5, .fallback_alpha = 0.4,
                                       .fallback_steps = 10, .probe_interval = 32, .padding_cap = 1.5,
                                       .method = POL_METHOD_AUTO, .ngram_min = 2, .ngram_max = 5,
                                       .draft_mem_warn_pct = 20, .tree = POL_TREE_OFF, .tree_budget = 16,
                                       .tree_depth = 5, .tree_topk = 3, .learn_ring_mb = 256, .learn_share = 0.1,
                                       .learn_margin = 0.05, .learn_min_positions = 4096, .learn_steps = 50};
    c->telemetry = (pol_telemetry){.enabled = true, .sample_rate = 1.0, .retention_rows = 1000000,
                                   .retention_days = 7, .queue_size = 65536};
    snprintf(c->telemetry.path, sizeof(c->telemetry.path), "specd-telemetry.db");
    snprintf(c->speculation.learn_dir, sizeof(c->speculation.learn_dir), "specd-learn");
    c->grammar = (pol_grammar){.max_bytes = 1 << 20, .max_rules = 65536, .max_elements = 1 << 20, .max_enum = 20000,
                               .compile_ms = 10000, .matcher_mb = 256, .cache_mb = 256};
}

/* ---- rules ------------------------------------------------------------------- */

const pol_rule *pol_config_rule(const pol_config *c, const char *model, const char *content_type) {
    if (!model) model = "*";
    if (!content_type) content_type = "*";
    const pol_rule *best = NULL;
    int best_rank = 0;
    for (int i = 0; i < c->n_rules; i++) {
        const pol_rule *r = &c->rules[i];
        bool mw = !strcmp(r->model, "*"), tw = !strcmp(r->content_type, "*");
        if (!mw && strcmp(r->model, model)) continue;
        if (!tw && strcmp(r->content_type, content_type)) continue;
        int rank = !mw && !tw ? 4 : mw && !tw ? 3 : !mw ? 2 : 1;
        if (rank > best_rank) best_rank = rank, best = r;
    }
    return best ? best : &c->default_rule;
}

/* ---- schema listing ---------------------------------------------------------- */

static char key_names[96][48];
static bool key_restart[96];
static int key_count;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void key_add(const char *sec, const char *name, bool restart) {
    if (key_count >= 96) return;
    snprintf(key_names[key_count], sizeof(key_names[0]), "%s.%s", sec, name);
    key_restart[key_count++] = restart;
}

static void key_build(void) {
    for (int s = 0; s < POL_N_SECTIONS; s++)
        for (int k = 0; k < pol_sections[s].n; k++) key_add(pol_sections[s].name, pol_sections[s].keys[k].name, pol_sections[s].keys[k].restart);
    for (int k = 0; k < pol_n_rule_keys; k++) key_add("policy.rules[]", pol_rule_keys[k].name, false);
}

const char *pol_config_key(int i, bool *restart) {
    pthread_once(&key_once, key_build);
    if (i < 0 || i >= key_count) return NULL;
    if (restart) *restart = key_restart[i];
    return key_names[i];
}

/* ---- restart diff ------------------------------------------------------------ */

static bool field_differs(const keydef *kd, const char *a, const char *b) {
    switch (kd->t) {
    case K_INT:
    case K_ENUM: return *(const int *)(a + kd->off) != *(const int *)(b + kd->off);
    case K_FLOAT: return *(const double *)(a + kd->off) != *(const double *)(b + kd->off);
    case K_BOOL: return *(const bool *)(a + kd->off) != *(const bool *)(b + kd->off);
    case K_STR: return strcmp(a + kd->off, b + kd->off) != 0;
    case K_ORIGINS: return strcmp(((const pol_server *)a)->allowed_origins, ((const pol_server *)b)->allowed_origins);
    case K_INTLIST: {
        const pol_int_list *la = (const pol_int_list *)(a + kd->off), *lb = (const pol_int_list *)(b + kd->off);
        return la->n != lb->n || memcmp(la->v, lb->v, (size_t)la->n * sizeof(int)) != 0;
    }
    }
    return false;
}

int pol_restart_keys(const pol_config *a, const pol_config *b, char *out, size_t n) {
    int count = 0;
    size_t used = 0;
    if (n) out[0] = 0;
    for (int s = 0; s < POL_N_SECTIONS; s++) {
        if (!strcmp(pol_sections[s].name, "policy")) continue;
        for (int k = 0; k < pol_sections[s].n; k++) {
            const keydef *kd = &pol_sections[s].keys[k];
            if (!kd->restart) continue;
            if (!field_differs(kd, (const char *)a + pol_sections[s].off, (const char *)b + pol_sections[s].off)) continue;
            int w = snprintf(out + used, used < n ? n - used : 0, "%s%s.%s", count ? ", " : "needs restart: ",
                             pol_sections[s].name, kd->name);
            if (w > 0) used += (size_t)w;
            if (used >= n) used = n ? n - 1 : 0;
            count++;
        }
    }
    return count;
}
