/* config.h — config.yaml as a typed, validated, immutable snapshot (libyaml),
 * per-(model, content type) γ rules, and a store that swaps snapshots atomically
 * for hot reload. A leaf module: plain structs, nothing from engine/ or gateway/.
 *
 * Every load error is one line "FILE:LINE:COL: what is wrong" (lines and
 * columns count from 1): YAML syntax, unknown key (with "did you mean 'x'?" for
 * near misses), wrong type, out-of-range value, gamma_min > gamma_max, missing
 * model file, duplicate rule, duplicate key. Errors that come from the
 * environment name the variable instead of a position. */
#ifndef SPECD_POL_CONFIG_H
#define SPECD_POL_CONFIG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POL_GAMMA_LIMIT 16      /* largest γ any rule may give (= the engine's GAMMA_MAX) */
#define POL_MAX_ORIGINS 16
#define POL_MAX_RULES 64
#define POL_MAX_ENV 8
#define POL_MAX_DEVICES 16      /* most entries of engine.devices (and largest engine.tensor_parallel) */

typedef enum { POL_BACKEND_AUTO = 0, POL_BACKEND_CPU, POL_BACKEND_CUDA } pol_backend;
typedef enum { POL_KV_F32 = 0, POL_KV_F16 } pol_kv_type;
/* Same order as the engine's spec_mode (auto, draft, off). */
typedef enum { POL_SPEC_AUTO = 0, POL_SPEC_DRAFT, POL_SPEC_OFF } pol_spec_mode;
/* The proposer (speculation.method, a rule's method): names as the engine's
 * spec_method_parse takes them. */
typedef enum { POL_METHOD_AUTO = 0, POL_METHOD_DRAFT, POL_METHOD_NGRAM, POL_METHOD_OFF, POL_METHOD_MEDUSA } pol_spec_method;
const char *pol_method_name(pol_spec_method m); /* "auto", "draft", "ngram", "off" */
/* speculation.verify: how drafts are verified. rejection: min(1, p/q) with
 * residual correction; coupled: Gumbel-max with shared noise (seeded output
 * independent of γ, drafter and schedule). */
enum { POL_VERIFY_REJECTION = 0, POL_VERIFY_COUPLED = 1 };
typedef enum { POL_TREE_OFF = 0, POL_TREE_AUTO, POL_TREE_FIXED } pol_tree;
#define POL_TREE_NODES 16                  /* most nodes of a speculation tree (DRAFTER_MAX_NODES) */

typedef struct {
    char host[256];                        /* 127.0.0.1 */
    int port;                              /* 8080; 0 = pick a free port */
    char web_root[512];                    /* "" = the pages installed with specd; "none" = no pages;
                                            * else a folder (relative: to the working directory) */
    int n_origins;                         /* allowed WebSocket origins besides the same host */
    char origins[POL_MAX_ORIGINS][256];    /* "*" = any */
    char allowed_origins[512];             /* the same, comma-joined (gw_config.allowed_origins) */
    char allowed_hosts[512];               /* Host names served besides loopback ones (comma-separated; "*" = any) */
    int idle_timeout_s;                    /* close idle WebSockets after this long (300; 0 = never) */
    int max_message_bytes;                 /* 1 MiB */
    int max_requests_per_connection;       /* 64 */
    int max_requests_total;                /* 1024 */
    int max_connections;                   /* 1024 */
    int max_tokens_limit;                  /* 4096 */
    int max_tokens_default;                /* a request without max_tokens: 0 = until the end of the
                                            * context (at most max_tokens_limit); else this many (clamped) */
    int max_choices;                       /* 4: most choices (OpenAI n) one request may ask for, 1..16 */
    int grace_ms;                          /* 10000 */
    char admin_token[256];                 /* resolved: from admin_token, admin_token_env or SPECD_ADMIN_TOKEN;
                                            * "" = admin endpoints disabled */
    char admin_token_env[128];             /* the variable named in the file ("" = none) */
    char api_keys[1024];                   /* API keys, comma-separated ("" = none: the API is open) */
    char api_key_file[512];                /* or a file of them, one per line ("" = none) */
    char auth_exempt[256];                 /* paths served without a key ("/healthz,/health,/metrics") */
    char cors_origins[512];                /* origins that may call the API from a browser (CORS), comma-separated;
                                            * "*" = any; "" = none */
    char tls_cert[512], tls_key[512];      /* PEM files: HTTPS and WSS on the port ("" = plain HTTP); re-read on SIGHUP */
} pol_server;

typedef struct {
    char target[1024];                     /* GGUF path; "" = demo pair (the CLI decides) */
    char draft[1024];                      /* GGUF path; "" = no draft */
    char medusa[1024];                     /* Medusa heads side file (specd train-medusa); "" = none */
    char eagle[1024];                      /* EAGLE-3 head side file (specd convert-eagle3); "" = none */
    char alias[512];                       /* more names the served model answers to, comma-separated */
    char chat_template[1024];              /* a Jinja file, a tokenizer.chat_template.NAME or a built-in family ("" = the model's) */
} pol_models;

/* A list of small integers from the file (engine.devices). */
typedef struct {
    int n;                                 /* entries used, >= 1 */
    int v[POL_MAX_DEVICES];
} pol_int_list;

typedef struct {
    pol_backend backend;                   /* auto */
    int tensor_parallel;                   /* 1: backends (GPUs) the target model is split over (1..16) */
    pol_int_list devices;                  /* [0]: CUDA device ids, shard r on devices.v[r]; distinct, 0..255;
                                            * with backend cuda at least tensor_parallel of them */
    int threads;                           /* 0 = all online CPUs */
    int max_batch;                         /* largest verify micro-batch; 0 = max_running */
    int max_ctx;                           /* 0 = the models' context */
    int kv_blocks;                         /* per model pool; 0 = room for max_running full contexts */
    int block_size;                        /* 16 (power of two) */
    pol_kv_type kv_type;                   /* f16: the KV cache's element type (f32: twice the memory) */
    int prefill_chunk;                     /* 256 */
    int max_running;                       /* 32 */
    bool prefix_cache;                     /* true: share prompt KV blocks by hash in both pools */
    int prefix_cache_blocks;               /* most cached blocks no request holds, per pool; 0 = any free block */
} pol_engine;

typedef struct {
    pol_spec_mode mode;                    /* auto; off: no speculation for any request */
    pol_spec_method method;                /* auto: n-gram lookup when it matches, else the draft model */
    int verify;                            /* POL_VERIFY_REJECTION (default) or POL_VERIFY_COUPLED */
    int ngram_min, ngram_max;              /* n-gram lookup lengths (2, 5; 1..8) */
    int gamma_min, gamma_max, gamma_default; /* 2, 8, 4 */
    bool adaptive;                         /* true */
    int window;                            /* 20 (1..64) */
    int warmup;                            /* 5 */
    double fallback_alpha;                 /* 0.4 */
    int fallback_steps;                    /* 10 */
    int probe_interval;                    /* 32 */
    double padding_cap;                    /* 1.5 */
    double draft_mem_warn_pct;             /* 20 */
    pol_tree tree;                         /* off: chains only; auto: the shape controller picks chain or tree
                                            * per step; fixed: every step a tree of the bounds below */
    int tree_budget, tree_depth, tree_topk; /* tree bounds: nodes (16, 1..16), levels (5), children per node (3, 1..8) */
    /* learning from traffic (issue 37; `specd serve --learn`): learn turns it on at start; later, false pauses
     * recording and training (hot); the rest are hot but learn_spill */
    bool learn;                            /* false */
    int learn_ring_mb;                     /* the ring's cap (256) */
    char learn_spill[1024];                /* the ring's SQLite mirror; "" = memory only (restart) */
    char learn_dir[1024];                  /* where learned heads are written ("specd-learn"; restart) */
    double learn_share;                    /* the trainer's share of the CPU's cores, 0.05..1 (0.25) */
    double learn_margin;                   /* a candidate must beat the live head's held-out mean accepted length
                                            * by more than this (0.05) */
    int learn_min_positions;               /* ring positions before the first round (4096) */
    int learn_steps;                       /* optimizer steps per round (50) */
} pol_speculation;

/* One γ rule (the brief's gamma_policy row). Fields the file leaves out are
 * inherited from the speculation section (alpha_threshold from fallback_alpha);
 * an inherited gamma_default is clamped into the rule's [gamma_min, gamma_max]. */
typedef struct {
    char model[128];                       /* exact model name, or "*" */
    char content_type[32];                 /* "chat", "code", "structured", any [a-z0-9_-] name, or "*" */
    int gamma_min, gamma_max, gamma_default;
    double alpha_threshold;                /* rolling α below this → fall back to plain decoding */
    pol_spec_method method;                /* the proposer for this content (speculation.method when left out) */
    bool learn;                            /* false: its requests never enter the learning ring (true) */
    int line;                              /* where it was defined (0 = the built-in default rule) */
} pol_rule;

typedef struct {
    bool enabled;                          /* true */
    char path[1024];                       /* SQLite database, "specd-telemetry.db" */
    double sample_rate;                    /* fraction of steps recorded, 0..1 (1) */
    int retention_rows;                    /* step rows kept; 0 = no row limit (1000000) */
    int retention_days;                    /* step rows younger than this kept; 0 = no age limit (7) */
    int queue_size;                        /* writer queue capacity in rows (65536) */
} pol_telemetry;

/* Constrained generation: limits of one request's grammar (GBNF given, or
 * made from a JSON Schema) and the compiled-grammar cache. */
typedef struct {
    int max_bytes;                         /* GBNF text (1 MiB) */
    int max_rules;                         /* rules after expanding repetitions and groups (65536) */
    int max_elements;                      /* elements after expansion (1048576) */
    int max_enum;                          /* values of one JSON Schema enum (20000) */
    int compile_ms;                        /* compile deadline per grammar (10000) */
    int matcher_mb;                        /* memory of one compiled grammar (256) */
    int cache_mb;                          /* compiled grammars kept for reuse (256) */
} pol_grammar;

/* The snapshot. Immutable once returned (readers share it across threads
 * without locks); read the fields directly. */
typedef struct pol_config {
    pol_server server;
    pol_models models;
    pol_engine engine;
    pol_speculation speculation;
    int n_rules;
    pol_rule rules[POL_MAX_RULES];         /* in file order */
    pol_rule default_rule;                 /* "*"/"*" from the speculation section */
    pol_telemetry telemetry;
    pol_grammar grammar;
    int n_env;
    char env_keys[POL_MAX_ENV][40];        /* keys whose value came from the environment, e.g. "server.port" */
    char source[512];                      /* the file name given to the loader */
    int version;                           /* 0 until a store publishes it; then 1, 2, ... */
} pol_config;

/* The environment the loader consults: NULL-terminated "NAME=value" strings
 * (like environ). Passing NULL for a pol_env * means the process environment
 * (getenv). Recognised: SPECD_PORT → server.port, SPECD_MODEL → models.target,
 * SPECD_DRAFT → models.draft, SPECD_ADMIN_TOKEN → server.admin_token, plus the
 * variable named by server.admin_token_env. */
typedef struct {
    const char *const *vars;
} pol_env;

/* Loads and validates PATH. Returns a new snapshot (the caller owns one
 * reference: pol_config_free), or NULL with "FILE:LINE:COL: message" in err.
 * A file without settings (empty, whitespace, only comments, a bare "---" or
 * null) is refused: it is almost always an editor mid-write, and taking it as
 * "all defaults" would reset live limits on reload; "{}" means every default. A
 * missing model file is checked with access(R_OK) relative to the current
 * directory. Thread-safe (no shared state). */
pol_config *pol_config_load(const char *path, const pol_env *env, char *err, size_t errlen);
/* The same from memory: `name` is used as FILE in messages. yaml need not be
 * NUL-terminated; any bytes are accepted (the fuzz target). */
pol_config *pol_config_load_mem(const char *yaml, size_t len, const char *name, const pol_env *env, char *err,
                                size_t errlen);
/* The built-in defaults (what "{}" gives, without environment). */
pol_config *pol_config_default(void);
/* Which config file `specd serve` reads: `flag` (-c) when given, else
 * $SPECD_CONFIG when set and not empty, else config.yaml in the working
 * directory when readable, else SYSCONFDIR/specd/config.yaml (the system
 * location, compiled in) when readable; NULL when none of them applies. A
 * flag or variable naming a missing file is returned as is, so the load
 * reports it. *source says which rule chose (a string literal: "-c",
 * "$SPECD_CONFIG", "the working directory", "the system location"; "" with
 * NULL). The result is `flag`, getenv's string or a static buffer: valid
 * until the next call. Not thread-safe (start-up only). */
const char *pol_config_find(const char *flag, const char **source);
/* The system location searched last: SYSCONFDIR "/specd/config.yaml". */
const char *pol_config_system_path(void);
/* Drops one reference (the loader's, or one taken by pol_store_acquire via
 * pol_store_release); the last one frees. Accepts NULL. */
void pol_config_free(pol_config *c);

int pol_config_version(const pol_config *c);
/* True when KEY ("server.port") was set from the environment. */
bool pol_config_from_env(const pol_config *c, const char *key);

/* The most specific rule for (model, content_type): exact model + exact type >
 * "*" + exact type > exact model + "*" > "*" + "*" > c->default_rule. Never
 * NULL; the pointer lives as long as c. model/content_type may be NULL ("*"). */
const pol_rule *pol_config_rule(const pol_config *c, const char *model, const char *content_type);

/* Lists the settings that differ between old and new but only take effect on a
 * restart (server.host, server.port, server.web_root, server.max_connections,
 * server.max_message_bytes, models.*, engine.*, speculation.padding_cap,
 * speculation.draft_mem_warn_pct, telemetry.enabled, telemetry.path,
 * telemetry.queue_size) as "needs restart: server.port, models.target" in out
 * ("" when none). Returns how many. */
int pol_restart_keys(const pol_config *old_cfg, const pol_config *new_cfg, char *out, size_t n);

/* The schema, for documentation checks and tools: key i as "section.key"
 * ("policy.rules" stands for the whole list; rule keys are listed as
 * "policy.rules[].gamma_min" etc.), NULL past the end. *restart (may be NULL)
 * tells whether it only takes effect on a restart. */
const char *pol_config_key(int i, bool *restart);

/* ---- store: the live snapshot, swapped atomically ---------------------------
 * Readers: acquire → read → release (any thread, cheap: one short mutex hold and
 * an atomic increment; never blocks on a reload in progress, which parses
 * outside the lock). A reader keeps its snapshot for as long as it holds it;
 * the old snapshot is freed when its last holder releases it. */

typedef struct {
    double time;                           /* unix seconds of the last reload attempt (0: none yet) */
    bool ok;
    int version;                           /* the version in force after it */
    char message[1024];                    /* the error, or "reloaded (version N)" + restart note */
    uint64_t n_ok, n_failed;
} pol_reload_status;

typedef struct {
    pthread_mutex_t mu;
    pthread_mutex_t reload_mu;             /* serialises reloads */
    pol_config *cur;                       /* holds one reference */
    pol_reload_status last;
} pol_store;

/* Takes ownership of cfg (the caller's reference) and publishes it as version 1. */
void pol_store_init(pol_store *s, pol_config *cfg);
/* Drops the store's reference (readers still holding theirs keep them valid). */
void pol_store_destroy(pol_store *s);
/* A reference to the current snapshot; never NULL after init. */
const pol_config *pol_store_acquire(pol_store *s);
void pol_store_release(pol_store *s, const pol_config *c);
/* Loads and validates PATH (process environment); on success publishes it as
 * version+1, returns 0 and writes the restart note (or "") to restart_note. On
 * failure keeps the current snapshot, returns -1 with the error in err. Either
 * way the result is recorded for pol_store_last_reload. Any thread. */
int pol_store_reload(pol_store *s, const char *path, char *err, size_t n, char *restart_note, size_t m);
/* Publishes an already built snapshot (takes ownership) as version+1; writes
 * the restart note. Returns the new version. */
int pol_store_swap(pol_store *s, pol_config *cfg, char *restart_note, size_t m);
void pol_store_last_reload(pol_store *s, pol_reload_status *out);

#endif
