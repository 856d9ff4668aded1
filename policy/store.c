/* store.c — the reference-counted snapshot store: acquire/release, swaps
 * and reloads with their restart notes and last-reload status (see config.h). */
#include "policy/config_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void lock(pthread_mutex_t *m) {
    if (pthread_mutex_lock(m)) {
        fprintf(stderr, "%s:%d: pthread_mutex_lock failed\n", __FILE__, __LINE__);
        abort();
    }
}

static double now_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void pol_store_init(pol_store *s, pol_config *cfg) {
    if (!cfg) {
        fprintf(stderr, "%s:%d: pol_store_init: NULL snapshot\n", __FILE__, __LINE__);
        abort();
    }
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->reload_mu, NULL);
    cfg->version = 1;
    s->cur = cfg;
    s->last.version = 1;
}

void pol_store_destroy(pol_store *s) {
    if (!s || !s->cur) return;
    pol_config_free(s->cur);
    s->cur = NULL;
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reload_mu);
}

const pol_config *pol_store_acquire(pol_store *s) {
    lock(&s->mu);
    const pol_config *c = s->cur;
    cfg_ref(c);
    pthread_mutex_unlock(&s->mu);
    return c;
}

void pol_store_release(pol_store *s, const pol_config *c) {
    (void)s;
    pol_config_free((pol_config *)c);
}

/* Caller holds reload_mu (so versions are assigned in order). */
static int swap_locked(pol_store *s, pol_config *cfg, char *note, size_t m) {
    lock(&s->mu);
    pol_config *old = s->cur;
    cfg->version = old->version + 1; /* not yet visible to readers */
    char tmp[960];
    pol_restart_keys(old, cfg, tmp, sizeof(tmp));
    s->cur = cfg;
    s->last.time = now_unix();
    s->last.ok = true;
    s->last.version = cfg->version;
    s->last.n_ok++;
    snprintf(s->last.message, sizeof(s->last.message), "reloaded (version %d)%s%s", cfg->version, tmp[0] ? "; " : "",
             tmp);
    int v = cfg->version;
    pthread_mutex_unlock(&s->mu);
    if (note && m) snprintf(note, m, "%s", tmp);
    pol_config_free(old);
    return v;
}

int pol_store_swap(pol_store *s, pol_config *cfg, char *restart_note, size_t m) {
    lock(&s->reload_mu);
    int v = swap_locked(s, cfg, restart_note, m);
    pthread_mutex_unlock(&s->reload_mu);
    return v;
}

int pol_store_reload(pol_store *s, const char *path, char *err, size_t n, char *restart_note, size_t m) {
    lock(&s->reload_mu);
    char e[1024] = "";
    pol_config *cfg = pol_config_load(path, NULL, e, sizeof(e));
    if (!cfg) {
        lock(&s->mu);
        s->last.time = now_unix();
        s->last.ok = false;
        s->last.version = s->cur->version;
        s->last.n_failed++;
        snprintf(s->last.message, sizeof(s->last.message), "%s", e);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_unlock(&s->reload_mu);
        if (err && n) snprintf(err, n, "%s", e);
        if (restart_note && m) restart_note[0] = 0;
        return -1;
    }
    swap_locked(s, cfg, restart_note, m);
    pthread_mutex_unlock(&s->reload_mu);
    if (err && n) err[0] = 0;
    return 0;
}

void pol_store_last_reload(pol_store *s, pol_reload_status *out) {
    lock(&s->mu);
    *out = s->last;
    pthread_mutex_unlock(&s->mu);
}
