/* reload.c — policy reloads on the loop thread: SIGHUP, a change of the
 * config file on disk (inotify, checked by a timer) and POST /admin/reload all
 * end in gw_reload, which builds and validates a new snapshot and swaps it in
 * atomically (or keeps the old one and reports why). Also /api/stats. */
#include "gateway/gw.h"
#include "gateway/learn_api.h"


#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#define RELOAD_POLL_US (500 * LWS_US_PER_MS)

static struct {
    int inotify_fd, watch;
    char file[256];
    volatile sig_atomic_t hup;
    struct lws_context *volatile ctx; /* the context SIGHUP wakes (handlers get no user data) */
} rl = {.inotify_fd = -1};

static void on_hup(int sig) {
    (void)sig;
    rl.hup = 1;
    struct lws_context *ctx = rl.ctx;
    if (ctx) lws_cancel_service(ctx);
}

/* Mirrors the active rules into telemetry's gamma_policy table. */
static void mirror_policy(gw_server *s, const pol_config *pc) {
    if (!s->cfg.telemetry) return;
    tel_policy_rule rules[POL_MAX_RULES + 1];
    int n = 0;
    for (int i = 0; i < pc->n_rules && n < POL_MAX_RULES; i++, n++) {
        const pol_rule *r = &pc->rules[i];
        memset(&rules[n], 0, sizeof(rules[n]));
        snprintf(rules[n].model_id, sizeof(rules[n].model_id), "%s", r->model);
        snprintf(rules[n].content_type, sizeof(rules[n].content_type), "%s", strcmp(r->content_type, "*") ? r->content_type : "");
        rules[n].gamma_min = r->gamma_min, rules[n].gamma_max = r->gamma_max, rules[n].gamma_default = r->gamma_default;
        rules[n].alpha_threshold = r->alpha_threshold;
    }
    const pol_rule *d = &pc->default_rule;
    memset(&rules[n], 0, sizeof(rules[n]));
    snprintf(rules[n].model_id, sizeof(rules[n].model_id), "*");
    rules[n].gamma_min = d->gamma_min, rules[n].gamma_max = d->gamma_max, rules[n].gamma_default = d->gamma_default;
    rules[n].alpha_threshold = d->alpha_threshold;
    telemetry_policy(s->cfg.telemetry, rules, n + 1, pc->version);
}

/* What anyone may read (the monitor feed): the outcome, the version in force
 * and, for a failure, where and which key (the file's base name, line,
 * column and the key the error names) — never the file's directory or the
 * values and YAML the error quotes (those are for the admin, at /api/stats).
 * err is the loader's "PATH:LINE:COL: KEY: reason" (or NULL). */
static void set_public_message(gw_server *s, bool ok, const char *err) {
    char *out = s->policy_reload_public;
    size_t n = sizeof(s->policy_reload_public);
    if (ok) {
        snprintf(out, n, "reloaded: version %d in force", s->policy_version);
        return;
    }
    char where[160] = "";
    const char *path = s->cfg.config_path;
    size_t pl = strlen(path);
    if (err && pl && !strncmp(err, path, pl) && err[pl] == ':') {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *p = err + pl + 1; /* LINE:COL: KEY: ... */
        size_t pos = strspn(p, "0123456789:");
        while (pos && p[pos - 1] == ':') pos--;
        const char *key = p + pos;
        while (*key == ':' || *key == ' ') key++;
        size_t kl = strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
        if (key[kl] != ':') kl = 0; /* not a key: a YAML syntax message */
        snprintf(where, sizeof(where), " at %s:%.*s%s%.*s%s", base, (int)pos, p, kl ? " (" : "", (int)kl, key,
                 kl ? ")" : "");
    }
    snprintf(out, n, "reload failed%s: version %d stays in force (the admin sees why at /api/stats)", where,
             s->policy_version);
}

/* Re-reads the TLS certificate and key (their paths are fixed at start) into
 * the vhost. 0, or -1 when a file is unreadable or lws refuses them. */
int gw_tls_reload(gw_server *s) {
    char *cert = NULL, *key = NULL;
    size_t cl = 0, kl = 0;
    int rc = -1;
    FILE *f = fopen(s->cfg.tls_cert, "rb");
    if (f) {
        cert = malloc(1 << 20);
        cl = cert ? fread(cert, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
    }
    if ((f = fopen(s->cfg.tls_key, "rb"))) {
        key = malloc(1 << 20);
        kl = key ? fread(key, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
    }
    if (cert && key && cl && kl) {
        cert[cl] = 0, key[kl] = 0;
        rc = lws_tls_cert_updated(s->ctx, s->cfg.tls_cert, s->cfg.tls_key, cert, cl, key, kl) == 0 ? 0 : -1;
    }
    free(cert), free(key);
    return rc;
}

int gw_reload(gw_server *s, const char *why, char *msg, size_t n) {
    /* the certificate first: a renewed one is wanted with or without a config file */
    if (s->tls && gw_tls_reload(s) != 0)
        fprintf(stderr, "specd: %s: TLS certificate kept: cannot load %.200s / %.200s\n", why, s->cfg.tls_cert,
                s->cfg.tls_key);
    if (!s->cfg.policy || !s->cfg.config_path[0]) {
        snprintf(msg, n, "no config file to reload (started without one)");
        s->policy_reload_ok = false;
        snprintf(s->policy_reload_msg, sizeof(s->policy_reload_msg), "%s", msg);
        set_public_message(s, false, NULL);
        return -1;
    }
    char err[768] = "", note[512] = "";
    int rc = pol_store_reload(s->cfg.policy, s->cfg.config_path, err, sizeof(err), note, sizeof(note));
    const pol_config *pc = pol_store_acquire(s->cfg.policy);
    s->policy_version = pc->version;
    if (rc == 0) {
        /* the server limits that can change live */
        gw_config *c = &s->cfg;
        snprintf(c->allowed_origins, sizeof(c->allowed_origins), "%s", pc->server.allowed_origins);
        c->max_requests_per_conn = pc->server.max_requests_per_connection;
        c->max_requests_total = pc->server.max_requests_total;
        c->max_tokens_limit = pc->server.max_tokens_limit;
        c->max_choices = pc->server.max_choices;
        c->grace_ms = pc->server.grace_ms;
        s->limits.max_tokens_limit = pc->server.max_tokens_limit;
        c->default_max_tokens = s->limits.default_max_tokens = pc->server.max_tokens_default;
        s->limits.max_choices = pc->server.max_choices;
        /* API keys (the command line's stay), CORS, aliases; TLS: the files re-read */
        gw_access na;
        char aerr[200];
        snprintf(c->api_keys, sizeof(c->api_keys), "%s", pc->server.api_keys);
        if (pc->server.api_key_file[0]) snprintf(c->api_key_file, sizeof(c->api_key_file), "%s", pc->server.api_key_file);
        snprintf(c->auth_exempt, sizeof(c->auth_exempt), "%s", pc->server.auth_exempt);
        snprintf(c->cors_origins, sizeof(c->cors_origins), "%s", pc->server.cors_origins);
        snprintf(c->model_aliases, sizeof(c->model_aliases), "%s", pc->models.alias);
        if (gw_access_load(&na, c->api_keys, c->api_key_file, c->api_key_extra, c->auth_exempt, aerr, sizeof(aerr)) == 0)
            s->access = na;
        else
            snprintf(note + strlen(note), sizeof(note) - strlen(note), "%sAPI keys kept: %s", note[0] ? "; " : "", aerr);

        snprintf(msg, n, "reloaded %s (version %d, %s)%s%s", s->cfg.config_path, pc->version, why,
                 note[0] ? "; " : "", note);
        mirror_policy(s, pc);
    } else {
        snprintf(msg, n, "reload (%s) failed, keeping version %d: %s", why, pc->version, err);
    }
    pol_store_release(s->cfg.policy, pc);
    s->policy_reload_ok = rc == 0;
    snprintf(s->policy_reload_msg, sizeof(s->policy_reload_msg), "%s", msg);
    set_public_message(s, rc == 0, rc == 0 ? NULL : err);
    fprintf(stderr, "specd: %s\n", msg);
    return rc;
}

/* Drains inotify events; true when the config file was written or replaced. */
static bool file_changed(void) {
    if (rl.inotify_fd < 0) return false;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool hit = false;
    ssize_t len;
    while ((len = read(rl.inotify_fd, buf, sizeof(buf))) > 0)
        for (char *p = buf; p < buf + len;) {
            struct inotify_event *ev = (struct inotify_event *)p;
            if (ev->len && !strcmp(ev->name, rl.file)) hit = true;
            p += sizeof(struct inotify_event) + ev->len;
        }
    return hit;
}

void gw_reload_poll(gw_server *s) {
    char msg[1024];
    if (rl.hup) {
        rl.hup = 0;
        gw_reload(s, "SIGHUP", msg, sizeof(msg));
    }
    if (file_changed()) gw_reload(s, "file changed", msg, sizeof(msg));
}

static void reload_tick(lws_sorted_usec_list_t *sul) {
    gw_server *s = lws_container_of(sul, gw_server, reload_sul);
    gw_reload_poll(s);
    if (s->ctx) lws_sul_schedule(s->ctx, 0, &s->reload_sul, reload_tick, RELOAD_POLL_US);
}

void gw_reload_init(gw_server *s) {
    rl.ctx = s->ctx;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    if (s->cfg.policy) {
        const pol_config *pc = pol_store_acquire(s->cfg.policy);
        s->policy_version = pc->version;
        mirror_policy(s, pc);
        pol_store_release(s->cfg.policy, pc);
    }
    if (s->cfg.config_path[0]) {
        /* watch the directory: editors and deploy tools replace files by rename */
        char dir[512], base[512];
        snprintf(dir, sizeof(dir), "%s", s->cfg.config_path);
        snprintf(base, sizeof(base), "%s", s->cfg.config_path);
        snprintf(rl.file, sizeof(rl.file), "%s", basename(base));
        rl.inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (rl.inotify_fd >= 0)
            rl.watch = inotify_add_watch(rl.inotify_fd, dirname(dir), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
        if (rl.inotify_fd >= 0 && rl.watch < 0) {
            fprintf(stderr, "specd: cannot watch %s for changes (%s); SIGHUP and /admin/reload still reload it\n",
                    s->cfg.config_path, strerror(errno));
            close(rl.inotify_fd);
            rl.inotify_fd = -1;
        }
    }
    lws_sul_schedule(s->ctx, 0, &s->reload_sul, reload_tick, RELOAD_POLL_US);
}

void gw_reload_stop(gw_server *s) {
    lws_sul_cancel(&s->reload_sul);
    rl.ctx = NULL;
    if (rl.inotify_fd >= 0) close(rl.inotify_fd);
    rl.inotify_fd = -1;
}

bool gw_admin_bearer_ok(struct lws *wsi) {
    gw_server *s = gw_server_of(wsi);
    char token[300] = "", auth[400] = "";
    if (s->cfg.policy) {
        const pol_config *pc = pol_store_acquire(s->cfg.policy);
        snprintf(token, sizeof(token), "%s", pc->server.admin_token);
        pol_store_release(s->cfg.policy, pc);
    }
    if (!token[0] || lws_hdr_copy(wsi, auth, sizeof(auth), WSI_TOKEN_HTTP_AUTHORIZATION) < 0) return false;
    size_t tl = strlen(token);
    if (strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != tl) return false;
    unsigned diff = 0; /* constant time in the token's bytes */
    for (size_t i = 0; i < tl; i++) diff |= (unsigned)(auth[7 + i] ^ token[i]);
    return diff == 0;
}

char *gw_stats_json(gw_server *s, bool admin) {
    engine_stats es;
    engine_get_stats(s->eng, &es);
    json_t *o = json_object();
    json_object_set_new(o, "running", json_integer(es.running));
    json_object_set_new(o, "waiting", json_integer(es.waiting));
    json_object_set_new(o, "prefilling", json_integer(es.prefilling));
    json_object_set_new(o, "steps", json_integer((json_int_t)es.steps));
    json_object_set_new(o, "tokens", json_integer((json_int_t)es.tokens));
    json_object_set_new(o, "requests_done", json_integer((json_int_t)es.requests_done));
    json_object_set_new(o, "kv_free_target", json_integer(es.kv_free_target));
    json_object_set_new(o, "kv_free_draft", json_integer(es.kv_free_draft));
    json_object_set_new(o, "kv_total", json_integer(es.kv_total));
    json_object_set_new(o, "alpha", json_real(spec_stats_alpha(&es.st)));
    json_object_set_new(o, "mean_accepted", json_real(spec_stats_mean_accepted(&es.st)));
    json_object_set_new(o, "verify_steps", json_integer((json_int_t)es.st.verify_steps));
    json_object_set_new(o, "drafted", json_integer((json_int_t)es.st.drafted));
    json_object_set_new(o, "accepted", json_integer((json_int_t)es.st.accepted));
    json_object_set_new(o, "fallbacks", json_integer((json_int_t)es.st.fallbacks));
    json_object_set_new(o, "kv_resets", json_integer((json_int_t)es.st.kv_resets));
    json_object_set_new(o, "by_method", gw_by_method_json(&es.st)); /* per proposer, every one */
    json_object_set_new(o, "draft_mem_pct", json_real(es.draft_mem_pct));
    json_object_set_new(o, "draft_oom", json_boolean(es.draft_oom));
    json_object_set_new(o, "backend", json_string(es.backend));
    json_object_set_new(o, "tensor_parallel", json_integer(es.tensor_parallel));
    json_object_set_new(o, "target_id", json_string(es.target_id));
    json_object_set_new(o, "draft_id", json_string(es.draft_id));
    json_t *pol = json_object();
    json_object_set_new(pol, "version", json_integer(s->policy_version));
    json_object_set_new(pol, "last_reload_ok", json_boolean(s->policy_reload_ok));
    /* the message names the config file and quotes YAML from it: admin only */
    if (admin) {
        json_object_set_new(pol, "config_path", json_string(s->cfg.config_path));
        json_object_set_new(pol, "last_reload_message", json_string(s->policy_reload_msg));
    }
    json_object_set_new(o, "policy", pol);
    engine_learn_stats ls; /* learning from traffic (issue 37); enabled: false when off */
    engine_get_learn_stats(s->eng, &ls);
    json_t *learn = gw_learn_json(&ls, admin);
    if (learn) json_object_set_new(o, "learn", learn);
    if (s->cfg.telemetry) {
        tel_counters tc;
        telemetry_counters(s->cfg.telemetry, &tc);
        json_t *t = json_object();
        json_object_set_new(t, "queued", json_integer((json_int_t)tc.queued));
        json_object_set_new(t, "written", json_integer((json_int_t)tc.written));
        json_object_set_new(t, "dropped", json_integer((json_int_t)tc.dropped));
        if (admin) json_object_set_new(t, "last_error", json_string(tc.last_error)); /* names the database */
        else json_object_set_new(t, "failing", json_boolean(tc.last_error[0] != '\0'));
        json_object_set_new(o, "telemetry", t);
    }
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}
