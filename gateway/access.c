/* access.c — API keys (see access.h). */
#include "gateway/access.h"

#include <stdio.h>
#include <string.h>

static int add_key(gw_access *a, const char *k, size_t n, char *err, size_t errlen) {
    while (n && (*k == ' ' || *k == '\t')) k++, n--;
    while (n && (k[n - 1] == ' ' || k[n - 1] == '\t' || k[n - 1] == '\r' || k[n - 1] == '\n')) n--;
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= ' ' || k[i] == ',' || (unsigned char)k[i] >= 0x7F) {
            snprintf(err, errlen, "an API key may hold only printable ASCII without spaces or commas");
            return -1;
        }
    if (n >= GW_KEY_MAX) {
        snprintf(err, errlen, "an API key is longer than %d bytes", GW_KEY_MAX - 1);
        return -1;
    }
    if (a->n == GW_MAX_KEYS) {
        snprintf(err, errlen, "more than %d API keys", GW_MAX_KEYS);
        return -1;
    }
    memcpy(a->keys[a->n], k, n);
    a->keys[a->n++][n] = 0;
    return 0;
}

int gw_access_load(gw_access *a, const char *keys, const char *key_file, const char *extra, const char *exempt,
                   char *err, size_t errlen) {
    memset(a, 0, sizeof(*a));
    snprintf(a->exempt, sizeof(a->exempt), "%s", exempt ? exempt : "/healthz,/health,/metrics");
    for (const char *p = keys ? keys : ""; *p;) {
        size_t n = strcspn(p, ",");
        if (add_key(a, p, n, err, errlen)) return -1;
        p += n;
        if (*p == ',') p++;
    }
    for (const char *p = extra; p && *p; p += strlen(p) + 1)
        if (add_key(a, p, strlen(p), err, errlen)) return -1;
    if (key_file && key_file[0]) {
        FILE *f = fopen(key_file, "r");
        if (!f) {
            snprintf(err, errlen, "server.api_key_file %s: cannot read it", key_file);
            return -1;
        }
        char line[512];
        int rc = 0;
        while (!rc && fgets(line, sizeof line, f)) {
            if (line[0] == '#') continue;
            rc = add_key(a, line, strlen(line), err, errlen);
        }
        fclose(f);
        if (rc) return -1;
    }
    return 0;
}

/* Whether item is one of list's entries (separated by commas and/or
 * spaces); with star, an entry "*" matches anything. */
static bool listed(const char *list, const char *item, bool star) {
    size_t il = strlen(item);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ", ");
        if (n && ((star && n == 1 && *p == '*') || (n == il && !strncmp(p, item, n)))) return true;
        p += n;
    }
    return false;
}

bool gw_access_required(const gw_access *a, const char *path) {
    if (!a->n || listed(a->exempt, path, false)) return false;
    /* the API; everything else is a static page (or an admin endpoint, with its own token) */
    static const char *const api[] = {"/tokenize", "/detokenize", "/apply-template", "/props", "/api/stats", "/health"};
    if (!strncmp(path, "/v1/", 4) || !strcmp(path, "/v1")) return true;
    for (size_t i = 0; i < sizeof api / sizeof *api; i++)
        if (!strcmp(path, api[i])) return true;
    return false;
}

/* Constant-time: whether s[0..n) is one of the keys. */
static bool is_key(const gw_access *a, const char *s, size_t n) {
    bool hit = false;
    for (int i = 0; i < a->n; i++) {
        size_t kl = strlen(a->keys[i]);
        unsigned diff = (unsigned)(kl != n);
        for (size_t j = 0; j < kl; j++) diff |= (unsigned)(a->keys[i][j] ^ (j < n ? s[j] : 0));
        hit |= diff == 0;
    }
    return hit;
}

bool gw_access_has_key(const gw_access *a, struct lws *wsi) {
    char buf[1024];
    if (lws_hdr_copy(wsi, buf, sizeof buf, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 && !strncmp(buf, "Bearer ", 7) &&
        is_key(a, buf + 7, strlen(buf + 7)))
        return true;
    if (lws_hdr_copy(wsi, buf, sizeof buf, WSI_TOKEN_PROTOCOL) > 0)
        for (const char *p = buf; *p;) {
            while (*p == ',' || *p == ' ') p++;
            size_t n = strcspn(p, ", ");
            if (n > 10 && !strncmp(p, "specd.key.", 10) && is_key(a, p + 10, n - 10)) return true;
            p += n;
        }
    return false;
}

bool gw_cors_origin(const char *cors, const char *allowed_origins, struct lws *wsi, char *origin, size_t n) {
    char o[256];
    if (lws_hdr_copy(wsi, o, sizeof o, WSI_TOKEN_ORIGIN) <= 0 || !o[0] || !strcmp(o, "null")) return false;
    if (!listed(cors ? cors : "", o, true) && !listed(allowed_origins ? allowed_origins : "", o, true)) return false;
    snprintf(origin, n, "%s", o);
    return true;
}
