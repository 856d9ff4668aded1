/* server_config.h — the gateway's configuration (gw_config), apart from
 * server.h so that the gateway's internal layers can read it without
 * including the server's entry point. Defaults: gw_config_default (server.c). */
#ifndef SPECD_GW_SERVER_CONFIG_H
#define SPECD_GW_SERVER_CONFIG_H

#include "policy/config.h"

#include <stddef.h>

struct telemetry;

typedef struct {
    char host[128];             /* bind address (127.0.0.1) */
    int port;                   /* 0 = pick a free port */
    char web_root[512];         /* static files; "" = none */
    char allowed_origins[512];  /* comma-separated; "" = same host only */
    char allowed_hosts[512];    /* Host names accepted besides loopback ones, comma-separated; "*" = any */
    int idle_timeout_s;         /* close a WebSocket that sent nothing and ran nothing this long (300; 0 = never) */
    int max_message_bytes;      /* largest client WebSocket message / HTTP body (1 MiB) */
    int max_requests_per_conn;  /* concurrent requests per connection (64) */
    int max_requests_total;     /* concurrent requests in the whole server (1024) */
    int max_connections;        /* open connections (1024) */
    int max_tokens_limit;       /* largest max_tokens a client may ask for (4096) */
    int max_choices;            /* largest OpenAI n (choices per request) a client may ask for (4) */
    int schema_max_enum;        /* JSON Schema enum values (grammar.max_enum; 0 = 20000) */
    size_t grammar_max_bytes;   /* GBNF text (grammar.max_bytes; 0 = 1 MiB) */
    int default_max_tokens;     /* when the client gives none (256; server.max_tokens_default, 0 = until
                                 * the end of the context) */
    size_t out_limit_bytes;     /* a client that lets this much output pile up is disconnected (8 MiB) */
    int grace_ms;               /* on SIGINT/SIGTERM: time running requests get to finish (10000) */
    char model_name[128];       /* reported by /v1/models and responses */
    char draft_name[128];       /* shown by the monitor ("" = no draft) */
    char vendor_root[512];      /* /vendor/uplot/ is served from here (node_modules/uplot/dist); "" = none */
    struct telemetry *telemetry;/* for the monitor's dropped-rows figure (not owned; may be NULL) */
    pol_store *policy;          /* reloaded on SIGHUP, on a change of config_path, and by POST /admin/reload */
    char config_path[512];      /* "" = no file to reload */
    char model_aliases[512];    /* more names the model answers to (models.alias), comma-separated */
    char api_keys[1024];        /* server.api_keys, comma-separated ("" with no file and no extra: the API is open) */
    char api_key_file[512];     /* server.api_key_file */
    char api_key_extra[2048];   /* serve --api-key values, NUL-separated, double-NUL-terminated */
    char auth_exempt[256];      /* server.auth_exempt */
    char cors_origins[512];     /* server.cors_origins */
    char tls_cert[512], tls_key[512]; /* server.tls_cert / tls_key: HTTPS + WSS ("" = plain) */
} gw_config;

gw_config gw_config_default(void);

#endif
