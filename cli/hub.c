/* hub.c — resolve a Hugging Face model reference to a cached GGUF: list, pick
 * by quant tag, download with resume and SHA-256 check, merge splits. */
#include "cli/hub.h"
#include "kernels/clock.h"
#include "cli/gguf_split.h"
#include "cli/sha256.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HUB_MAX_FILES 4096
#define HUB_MAX_SPLITS 256
#define HUB_RETRIES 5

/* One GGUF file of a repository listing. */
typedef struct {
    char path[512];
    long long size;  /* -1 unknown */
    char sha256[65]; /* "" unknown */
} hub_file;

/* ---- small helpers ------------------------------------------------------------ */

static int mkdirs(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no");
}

static const char *endpoint(void) {
    const char *e = getenv("HF_ENDPOINT");
    return e && *e ? e : "https://huggingface.co";
}

/* HF_TOKEN, else the token file huggingface-cli login writes. */
static const char *token(char *buf, size_t n) {
    const char *t = getenv("HF_TOKEN");
    if (t && *t) return t;
    char path[1024];
    const char *hf_home = getenv("HF_HOME"), *home = getenv("HOME");
    if (hf_home && *hf_home) snprintf(path, sizeof(path), "%s/token", hf_home);
    else if (home) snprintf(path, sizeof(path), "%s/.cache/huggingface/token", home);
    else return NULL;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t len = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[len] = 0;
    while (len && isspace((unsigned char)buf[len - 1])) buf[--len] = 0;
    return len ? buf : NULL;
}

static bool is_hex64(const char *s, size_t len) {
    if (len != 64) return false;
    for (size_t i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

static bool ends_with_ci(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

/* "NAME-00001-of-00003.gguf": returns the part number (1-based) and count,
 * and the prefix length (up to the dash), or 0 when not a split name. */
static int split_info(const char *path, int *count, size_t *prefix_len) {
    size_t n = strlen(path);
    const char *suf = "-00000-of-00000.gguf";
    size_t sl = strlen(suf);
    if (n <= sl) return 0;
    const char *p = path + n - sl;
    for (size_t i = 0; i < sl; i++) {
        if (suf[i] == '0') {
            if (!isdigit((unsigned char)p[i])) return 0;
        } else if (tolower((unsigned char)p[i]) != suf[i]) return 0;
    }
    int no = atoi(p + 1), cnt = atoi(p + 10);
    if (no < 1 || cnt < 1 || no > cnt) return 0;
    *count = cnt;
    *prefix_len = (size_t)(p - path);
    return no;
}

static const char *basename_of(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* Tag match as llama.cpp's: the tag appears in the file's name bounded by
 * non-alphanumerics (so Q4_K does not match Q4_K_M's "Q4_K_" ... it does:
 * '_' is a bound, hence the preference for exact-length tags below). */
static bool tag_matches(const char *path, const char *tag) {
    const char *name = basename_of(path);
    size_t tl = strlen(tag), nl = strlen(name);
    for (size_t i = 0; i + tl <= nl; i++) {
        if (strncasecmp(name + i, tag, tl)) continue;
        bool lb = i == 0 || !isalnum((unsigned char)name[i - 1]);
        char c = name[i + tl];
        bool rb = c == 0 || c == '.' || c == '-';
        if (lb && rb) return true;
    }
    return false;
}

static bool pickable(const char *path) {
    return ends_with_ci(path, ".gguf") && !strcasestr(basename_of(path), "mmproj");
}

/* Picks the file for a tag (or the default choice) among n paths; returns the
 * index or -1. Split files are represented by their first part. */
static int pick(const char *const *paths, int n, const char *quant) {
    static const char *defaults[] = {"Q4_K_M", "Q4_0", "Q8_0", "Q6_K", "Q5_K_M", "F16", "BF16", "F32", NULL};
    const char *one[] = {quant, NULL};
    const char **tags = quant && *quant ? one : defaults;
    for (int t = 0; tags[t]; t++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int cnt;
            size_t pl;
            if (!pickable(paths[i]) || !tag_matches(paths[i], tags[t])) continue;
            if (split_info(paths[i], &cnt, &pl) > 1) continue;
            if (best < 0 || strlen(paths[i]) < strlen(paths[best])) best = i;
        }
        if (best >= 0) return best;
    }
    if (quant && *quant) return -1;
    int best = -1; /* no known tag: the first GGUF by name */
    for (int i = 0; i < n; i++) {
        int cnt;
        size_t pl;
        if (!pickable(paths[i]) || split_info(paths[i], &cnt, &pl) > 1) continue;
        if (best < 0 || strcmp(paths[i], paths[best]) < 0) best = i;
    }
    return best;
}

/* Where a resolved file (or merged split) lives in the cache. */
static void local_name(const char *path, char *out, size_t n) {
    int cnt;
    size_t pl;
    if (split_info(path, &cnt, &pl)) snprintf(out, n, "%.*s.gguf", (int)pl, path);
    else snprintf(out, n, "%s", path);
}

/* ---- reference parsing -------------------------------------------------------- */

static bool name_ok(const char *s, size_t n) {
    if (!n || n > 96 || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
    return true;
}

static bool path_ok(const char *p) {
    if (!*p || *p == '/') return false;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!len || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) return false;
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == '\\') return false;
        s = e ? e + 1 : s + len;
        if (!e) break;
    }
    return true;
}

hub_status hub_parse_ref(const char *spec, hub_ref *r, char *err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    const char *slash = spec ? strchr(spec, '/') : NULL;
    if (!slash) {
        snprintf(err, errlen, "'%s' is not a model reference: expected OWNER/NAME[:QUANT] or OWNER/NAME/FILE.gguf",
                 spec ? spec : "");
        return HUB_ERR_USAGE;
    }
    const char *name = slash + 1;
    size_t name_len = strcspn(name, "/:");
    if (!name_ok(spec, (size_t)(slash - spec)) || !name_ok(name, name_len)) {
        snprintf(err, errlen, "'%s': bad repository name (letters, digits, '-', '_', '.')", spec);
        return HUB_ERR_USAGE;
    }
    snprintf(r->repo, sizeof(r->repo), "%.*s", (int)(name + name_len - spec), spec);
    const char *rest = name + name_len;
    if (*rest == ':') {
        if (!name_ok(rest + 1, strlen(rest + 1)) || strlen(rest + 1) >= sizeof(r->quant)) {
            snprintf(err, errlen, "'%s': bad quant tag '%s'", spec, rest + 1);
            return HUB_ERR_USAGE;
        }
        snprintf(r->quant, sizeof(r->quant), "%s", rest + 1);
    } else if (*rest == '/') {
        if (!path_ok(rest + 1) || !ends_with_ci(rest + 1, ".gguf") || strlen(rest + 1) >= sizeof(r->file)) {
            snprintf(err, errlen, "'%s': the file must be a relative path ending in .gguf", spec);
            return HUB_ERR_USAGE;
        }
        snprintf(r->file, sizeof(r->file), "%s", rest + 1);
    }
    return HUB_OK;
}

const char *hub_cache_dir(char *buf, size_t n) {
    const char *c = getenv("SPECD_CACHE");
    if (c && *c) snprintf(buf, n, "%s", c);
    else {
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (x && *x) snprintf(buf, n, "%s/specd", x);
        else snprintf(buf, n, "%s/.cache/specd", home && *home ? home : ".");
    }
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
    return buf;
}

int hub_exit_code(hub_status s) { return s == HUB_OK ? 0 : s == HUB_ERR_USAGE ? 2 : 1; }

/* ---- the cache ---------------------------------------------------------------- */

/* Collects the complete .gguf files under dir (relative paths from root). */
static void scan_cache(const char *root, const char *rel, char **out, int *n, int cap) {
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) && *n < cap) {
        if (de->d_name[0] == '.') continue;
        char sub[1024], full[3072];
        snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        snprintf(full, sizeof(full), "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) scan_cache(root, sub, out, n, cap);
        else if (S_ISREG(st.st_mode) && ends_with_ci(sub, ".gguf")) out[(*n)++] = strdup(sub);
    }
    closedir(d);
}

/* The cache remembers which file a tag (or no tag) resolved to online, in
 * REPO_DIR/.ref-TAG, so that `-hf REPO` means the same file offline as it did
 * online, not whatever other quant happens to be cached. */
static void ref_path(const hub_ref *r, const char *repo_dir, char *out, size_t n) {
    snprintf(out, n, "%s/.ref-%s", repo_dir, r->quant[0] ? r->quant : "_default");
    for (char *p = out + strlen(repo_dir) + 6; *p; p++) *p = (char)tolower((unsigned char)*p);
}

static void remember_ref(const hub_ref *r, const char *repo_dir, const char *local) {
    if (r->file[0]) return;
    char rp[2100], tmp[2200];
    ref_path(r, repo_dir, rp, sizeof(rp));
    snprintf(tmp, sizeof(tmp), "%s.tmp", rp);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%s\n", local);
    if (fclose(f) == 0) rename(tmp, rp);
    else unlink(tmp);
}

/* A cached file for the reference, or false. Without a tag, only what an
 * earlier online resolution recorded counts, unless offline (then the best
 * cached quant by the default order). */
static bool find_cached(const hub_ref *r, const char *repo_dir, bool offline, char *path, size_t pathlen) {
    struct stat st;
    if (!r->file[0]) {
        char rp[2100], local[600] = "";
        ref_path(r, repo_dir, rp, sizeof(rp));
        FILE *f = fopen(rp, "r");
        if (f) {
            if (fgets(local, sizeof(local), f)) local[strcspn(local, "\n")] = 0;
            fclose(f);
            snprintf(path, pathlen, "%s/%s", repo_dir, local);
            if (local[0] && path_ok(local) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) return true;
        }
        if (!r->quant[0] && !offline) return false;
    }
    if (r->file[0]) {
        char ln[600];
        local_name(r->file, ln, sizeof(ln));
        snprintf(path, pathlen, "%s/%s", repo_dir, ln);
        return stat(path, &st) == 0 && S_ISREG(st.st_mode);
    }
    char *names[512];
    int n = 0;
    scan_cache(repo_dir, "", names, &n, 512);
    int i = pick((const char *const *)names, n, r->quant);
    if (i >= 0) snprintf(path, pathlen, "%s/%s", repo_dir, names[i]);
    for (int k = 0; k < n; k++) free(names[k]);
    return i >= 0;
}

/* ---- HTTP --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} membuf;

static size_t mem_write(char *p, size_t sz, size_t nm, void *u) {
    membuf *b = u;
    size_t n = sz * nm;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        if (cap > (64u << 20)) return 0; /* a listing is never this large */
        char *nd = realloc(b->data, cap);
        if (!nd) return 0;
        b->data = nd, b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return n;
}

static struct curl_slist *auth_headers(void) {
    char tb[512], hdr[700];
    const char *t = token(tb, sizeof(tb));
    struct curl_slist *h = curl_slist_append(NULL, "User-Agent: specd/0.1");
    if (t) {
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", t);
        h = curl_slist_append(h, hdr);
    }
    return h;
}

static void curl_common(CURL *c, struct curl_slist *h) {
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L); /* the hub redirects LFS files to its CDN */
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L); /* the token goes to the endpoint only */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer fails, then resumes */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
}

static hub_status http_status(long code, const char *what, const char *repo, char *err, size_t errlen) {
    if (code == 401 || code == 403) {
        snprintf(err, errlen, "%s: HTTP %ld: %s is gated or private%s", what, code, repo,
                 getenv("HF_TOKEN") ? " and HF_TOKEN was refused" : ": set HF_TOKEN to a token that may read it");
        return HUB_ERR_AUTH;
    }
    if (code == 404) {
        snprintf(err, errlen, "%s: HTTP 404: no such repository or file (%s)", what, repo);
        return HUB_ERR_NOT_FOUND;
    }
    snprintf(err, errlen, "%s: HTTP %ld", what, code);
    return HUB_ERR_NETWORK;
}

/* The hub pages long listings: the next page is in a Link header, rel="next". */
static size_t link_header(char *p, size_t sz, size_t nm, void *u) {
    char *next = u;
    size_t n = sz * nm;
    if (n > 5 && !strncasecmp(p, "link:", 5)) {
        char line[2400];
        snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) - 1 ? n : sizeof(line) - 1), p);
        char *rel = strstr(line, "rel=\"next\"");
        char *lt = rel ? memchr(line, '<', (size_t)(rel - line)) : NULL;
        char *gt = lt ? strchr(lt, '>') : NULL;
        if (lt && gt && gt < rel && (size_t)(gt - lt - 1) < 2000) snprintf(next, 2000, "%.*s", (int)(gt - lt - 1), lt + 1);
    }
    return n;
}

/* GETs one page of the listing into *root (a JSON array); next = its next page or "". */
static hub_status list_page(const hub_ref *r, const char *url, json_t **root, char *next, char *err, size_t errlen) {
    CURL *c = curl_easy_init();
    if (!c) return snprintf(err, errlen, "libcurl failed to start"), HUB_ERR_NETWORK;
    membuf b = {0};
    next[0] = 0;
    struct curl_slist *h = auth_headers();
    curl_common(c, h);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, link_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, next);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    CURLcode cr = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    hub_status s = HUB_OK;
    if (cr != CURLE_OK) {
        snprintf(err, errlen, "listing %s at %s: %s", r->repo, endpoint(), curl_easy_strerror(cr));
        s = HUB_ERR_NETWORK;
    } else if (code != 200) s = http_status(code, "listing the repository", r->repo, err, errlen);
    if (s != HUB_OK) return free(b.data), s;
    json_error_t je;
    *root = json_loadb(b.data ? b.data : "", b.len, 0, &je);
    free(b.data);
    if (!json_is_array(*root)) {
        json_decref(*root);
        *root = NULL;
        snprintf(err, errlen, "listing %s: the hub's answer is not a JSON array", r->repo);
        return HUB_ERR_NETWORK;
    }
    return HUB_OK;
}

/* GETs the repository listing (every page) and keeps its .gguf files. */
static hub_status list_repo(const hub_ref *r, hub_file **out, int *n_out, char *err, size_t errlen) {
    char url[2000], next[2000];
    snprintf(url, sizeof(url), "%s/api/models/%s/tree/main?recursive=true", endpoint(), r->repo);
    hub_file *files = calloc(HUB_MAX_FILES, sizeof(hub_file));
    if (!files) return snprintf(err, errlen, "out of memory"), HUB_ERR_IO;
    int n = 0;
    for (int page = 0; page < 64 && url[0]; page++) {
        json_t *root = NULL;
        hub_status s = list_page(r, url, &root, next, err, errlen);
        if (s != HUB_OK) return free(files), s;
        size_t i;
        json_t *e;
        json_array_foreach(root, i, e) {
            const char *type = json_string_value(json_object_get(e, "type"));
            const char *path = json_string_value(json_object_get(e, "path"));
            if (n >= HUB_MAX_FILES || !path || (type && strcmp(type, "file"))) continue;
            if (!ends_with_ci(path, ".gguf") || !path_ok(path) || strlen(path) >= sizeof(files[n].path)) continue;
            hub_file *f = &files[n++];
            snprintf(f->path, sizeof(f->path), "%s", path);
            json_t *lfs = json_object_get(e, "lfs");
            json_t *sz = json_object_get(lfs ? lfs : e, "size");
            f->size = json_is_integer(sz) ? (long long)json_integer_value(sz) : -1;
            const char *oid = json_string_value(json_object_get(lfs, "oid"));
            if (oid && !strncmp(oid, "sha256:", 7)) oid += 7;
            if (oid && is_hex64(oid, strlen(oid))) snprintf(f->sha256, sizeof(f->sha256), "%s", oid);
        }
        json_decref(root);
        /* a relative next link is resolved against the endpoint; one to another
         * host is not followed (it would receive the token) */
        if (next[0] == '/') snprintf(url, sizeof(url), "%s%s", endpoint(), next);
        else if (!next[0] || !strncmp(next, endpoint(), strlen(endpoint()))) snprintf(url, sizeof(url), "%s", next);
        else {
            snprintf(err, errlen, "listing %s: the next page is on another host (%.200s)", r->repo, next);
            return free(files), HUB_ERR_NETWORK;
        }
    }
    *out = files;
    *n_out = n;
    return HUB_OK;
}

/* ---- download ----------------------------------------------------------------- */

typedef struct {
    FILE *f;
    long long have;       /* bytes in the .part file before this request */
    long long total;      /* expected size, -1 unknown */
    long long written;    /* bytes written by this request */
    bool checked;         /* first body byte: response code seen */
    bool restart;         /* the server ignored the Range: start over */
    CURL *c;
    char linked_sha[65];  /* from x-linked-etag / etag */
    long long linked_size;
    const char *label;
    bool quiet, tty;
    double t0, last_print;
    int last_decile;
} dl_state;

static double now_s(void) { return clock_now_ms() * 1e-3; }

static size_t dl_header(char *p, size_t sz, size_t nm, void *u) {
    dl_state *s = u;
    size_t n = sz * nm;
    const char *keys[] = {"x-linked-etag:", "etag:"};
    for (int k = 0; k < 2; k++) {
        size_t kl = strlen(keys[k]);
        if (n > kl && !strncasecmp(p, keys[k], kl)) {
            const char *v = p + kl;
            while (*v == ' ' || *v == '"' || *v == 'W' || *v == '/') v++;
            if ((size_t)(v - p) + 64 <= n && is_hex64(v, 64) && (k == 0 || !s->linked_sha[0]))
                snprintf(s->linked_sha, sizeof(s->linked_sha), "%.64s", v);
        }
    }
    if (n > 15 && !strncasecmp(p, "x-linked-size:", 14)) s->linked_size = atoll(p + 14);
    /* a redirect's headers come first; a new status line resets the per-response ones */
    if (n > 5 && !strncmp(p, "HTTP/", 5)) s->checked = false;
    return n;
}

static void fmt_mib(char *b, size_t n, double bytes) {
    if (bytes >= 1024.0 * 1024 * 1024) snprintf(b, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else snprintf(b, n, "%.1f MiB", bytes / (1024.0 * 1024));
}

static void progress_print(dl_state *s, bool final) {
    if (s->quiet) return;
    double t = now_s(), el = t - s->t0;
    long long done = s->have + s->written;
    double rate = el > 0 ? s->written / el : 0;
    char a[32], b[32], rt[32];
    fmt_mib(a, sizeof(a), (double)done);
    fmt_mib(b, sizeof(b), (double)(s->total > 0 ? s->total : 0));
    fmt_mib(rt, sizeof(rt), rate);
    int pct = s->total > 0 ? (int)(100.0 * done / s->total) : -1;
    char eta[32] = "--:--";
    if (rate > 0 && s->total > 0) {
        long r = (long)((s->total - done) / rate);
        snprintf(eta, sizeof(eta), "%ld:%02ld", r / 60, r % 60);
    }
    if (s->tty) {
        if (!final && t - s->last_print < 0.1) return;
        char bar[31];
        int fill = pct >= 0 ? pct * 30 / 100 : 0;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r%-.40s [%s] %3d%% %s/%s %s/s ETA %s   ", s->label, bar, pct < 0 ? 0 : pct, a, b, rt, eta);
        if (final) fputc('\n', stderr);
    } else {
        int dec = pct >= 0 ? pct / 10 : 0;
        if (!final && dec <= s->last_decile && t - s->last_print < 10) return;
        s->last_decile = dec;
        fprintf(stderr, "specd pull: %s: %d%% (%s of %s, %s/s, ETA %s)\n", s->label, pct < 0 ? 0 : pct, a, b, rt, eta);
    }
    s->last_print = t;
}

static size_t dl_write(char *p, size_t sz, size_t nm, void *u) {
    dl_state *s = u;
    size_t n = sz * nm;
    if (!s->checked) {
        long code = 0;
        curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &code);
        if (code == 200 && s->have > 0) { /* the server sent the whole file: start over */
            s->restart = true;
            if (fflush(s->f) || ftruncate(fileno(s->f), 0) || fseeko(s->f, 0, SEEK_SET)) return 0;
            s->have = 0;
        }
        if (code != 200 && code != 206) return n; /* an error body: read and drop */
        s->checked = true;
        if (s->total < 0) {
            curl_off_t cl = -1;
            curl_easy_getinfo(s->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
            if (cl >= 0) s->total = s->have + cl;
        }
    }
    if (fwrite(p, 1, n, s->f) != n) return 0;
    s->written += (long long)n;
    progress_print(s, false);
    return n;
}

/* Downloads REPO/FILE into dest (via dest.part, resuming), checking size and
 * SHA-256 (want_sha "" = take the hub's x-linked-etag if it sends one). */
static hub_status download(const hub_ref *r, const hub_file *hf, const char *dest, unsigned flags, char *err,
                           size_t errlen) {
    char part[2100], url[2000];
    snprintf(part, sizeof(part), "%s.part", dest);
    snprintf(url, sizeof(url), "%s/%s/resolve/main/%s", endpoint(), r->repo, hf->path);
    char dir[2100];
    snprintf(dir, sizeof(dir), "%s", dest);
    *strrchr(dir, '/') = 0;
    if (mkdirs(dir) != 0) return snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno)), HUB_ERR_IO;
    int fd = open(part, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return snprintf(err, errlen, "cannot open %s: %s", part, strerror(errno)), HUB_ERR_IO;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* another specd is fetching the same file */
        if (!(flags & HUB_QUIET)) fprintf(stderr, "specd pull: waiting for another download of %s\n", hf->path);
        flock(fd, LOCK_EX);
    }
    struct stat st;
    if (stat(dest, &st) == 0) return close(fd), HUB_OK; /* the other download finished it */
    FILE *f = fdopen(fd, "r+b");
    dl_state s = {.f = f, .total = hf->size, .label = basename_of(hf->path), .quiet = (flags & HUB_QUIET) != 0,
                  .tty = isatty(2), .linked_size = -1, .last_decile = -1};
    hub_status rs = HUB_ERR_NETWORK;
    struct curl_slist *h = auth_headers();
    for (int attempt = 0; attempt <= HUB_RETRIES; attempt++) {
        if (fstat(fd, &st) != 0) break;
        s.have = st.st_size;
        if (s.total >= 0 && s.have > s.total) { /* longer than the file: not ours */
            if (ftruncate(fd, 0) != 0) break;
            s.have = 0;
        }
        fseeko(f, s.have, SEEK_SET);
        if (s.total >= 0 && s.have == s.total) { rs = HUB_OK; break; }
        if (s.have > 0 && !s.quiet) {
            char a[32];
            fmt_mib(a, sizeof(a), (double)s.have);
            fprintf(stderr, "specd pull: %s: resuming at %s\n", s.label, a);
        }
        s.written = 0, s.checked = false, s.restart = false, s.t0 = now_s(), s.last_print = 0;
        CURL *c = curl_easy_init();
        if (!c) break;
        s.c = c;
        curl_common(c, h);
        curl_easy_setopt(c, CURLOPT_URL, url);
        char range[64];
        if (s.have > 0) {
            snprintf(range, sizeof(range), "%lld-", s.have);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dl_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, dl_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &s);
        CURLcode cr = curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(c);
        fflush(f);
        if (s.total < 0 && s.linked_size > 0) s.total = s.linked_size;
        if (cr == CURLE_OK && (code == 200 || code == 206)) {
            progress_print(&s, true);
            if (fstat(fd, &st) == 0 && (s.total < 0 || st.st_size == s.total)) { rs = HUB_OK; break; }
            snprintf(err, errlen, "%s: transfer ended at %lld of %lld bytes", hf->path, (long long)st.st_size, s.total);
        } else if (cr == CURLE_OK && code == 416) { /* nothing past our end: complete or bogus */
            if (s.total >= 0 && s.have == s.total) { rs = HUB_OK; break; }
            if (ftruncate(fd, 0) != 0) break;
            snprintf(err, errlen, "%s: the server refused the resume range", hf->path);
        } else if (cr == CURLE_OK || cr == CURLE_WRITE_ERROR) {
            if (cr == CURLE_WRITE_ERROR && code / 100 == 2) {
                snprintf(err, errlen, "writing %s: %s", part, strerror(errno));
                rs = HUB_ERR_IO;
                break;
            }
            rs = http_status(code, hf->path, r->repo, err, errlen);
            if (code / 100 == 4) break; /* retrying will not help */
            rs = HUB_ERR_NETWORK;
        } else {
            if (s.written > 0 || s.have > 0) progress_print(&s, true);
            snprintf(err, errlen, "downloading %s: %s", hf->path, curl_easy_strerror(cr));
        }
        if (attempt < HUB_RETRIES) {
            if (!s.quiet) fprintf(stderr, "specd pull: %s; retrying (%d of %d)\n", err, attempt + 1, HUB_RETRIES);
            sleep(attempt < 2 ? 1 : 3);
        }
    }
    curl_slist_free_all(h);
    if (rs != HUB_OK) return fclose(f), rs; /* the .part stays: the next pull resumes it */
    const char *want = hf->sha256[0] ? hf->sha256 : s.linked_sha;
    if (want[0]) {
        char got[65];
        if (!s.quiet && !s.tty) fprintf(stderr, "specd pull: %s: checking SHA-256\n", s.label);
        if (sha256_file(part, got, NULL, NULL) != 0) {
            snprintf(err, errlen, "reading %s: %s", part, strerror(errno));
            return fclose(f), HUB_ERR_IO;
        }
        if (strcasecmp(got, want)) {
            unlink(part);
            fclose(f);
            snprintf(err, errlen, "%s: SHA-256 mismatch (hub %s, downloaded %s): the file is corrupt and was "
                     "removed; run the pull again", hf->path, want, got);
            return HUB_ERR_HASH;
        }
    } else if (!s.quiet) fprintf(stderr, "specd pull: %s: the hub reports no SHA-256; size checked only\n", s.label);
    if (rename(part, dest) != 0) {
        snprintf(err, errlen, "renaming %s: %s", part, strerror(errno));
        return fclose(f), HUB_ERR_IO;
    }
    fclose(f);
    return HUB_OK;
}

/* ---- resolve ------------------------------------------------------------------ */

hub_status hub_resolve(const char *spec, unsigned flags, char *path, size_t pathlen, char *err, size_t errlen) {
    hub_ref r;
    hub_status s = hub_parse_ref(spec, &r, err, errlen);
    if (s != HUB_OK) return s;
    if (env_true("HF_HUB_OFFLINE") || env_true("SPECD_OFFLINE")) flags |= HUB_OFFLINE;
    char cache[1024], repo_dir[1400];
    hub_cache_dir(cache, sizeof(cache));
    snprintf(repo_dir, sizeof(repo_dir), "%s/%s", cache, r.repo);
    if (!(flags & HUB_REFRESH) && find_cached(&r, repo_dir, flags & HUB_OFFLINE, path, pathlen)) return HUB_OK;
    if (flags & HUB_OFFLINE) {
        snprintf(err, errlen, "%s is not in the cache (%s) and offline mode is on (HF_HUB_OFFLINE/SPECD_OFFLINE)", spec,
                 repo_dir);
        return HUB_ERR_OFFLINE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    hub_file *files = NULL;
    int n = 0;
    s = list_repo(&r, &files, &n, err, errlen);
    if (s != HUB_OK) {
        /* unreachable hub: a cached file of the repo still serves */
        if (s == HUB_ERR_NETWORK && find_cached(&r, repo_dir, true, path, pathlen)) {
            fprintf(stderr, "specd: %s; using the cached %s\n", err, path);
            return HUB_OK;
        }
        return s;
    }
    const char **paths = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) paths[i] = files[i].path;
    int pi = -1;
    if (r.file[0]) {
        for (int i = 0; i < n; i++)
            if (!strcmp(files[i].path, r.file)) pi = i;
    } else pi = pick(paths, n, r.quant);
    if (pi < 0) {
        size_t o = (size_t)snprintf(err, errlen, "%s: no GGUF file %s%s in the repository; it has:", r.repo,
                                    r.file[0] ? r.file : r.quant[0] ? "for quant " : "", r.file[0] ? "" : r.quant);
        for (int i = 0; i < n && o < errlen; i++) o += (size_t)snprintf(err + o, errlen - o, " %s", files[i].path);
        if (n == 0 && o < errlen) snprintf(err + o, errlen - o, " none");
        free(paths), free(files);
        return HUB_ERR_NOT_FOUND;
    }
    char ln[600];
    local_name(files[pi].path, ln, sizeof(ln));
    snprintf(path, pathlen, "%s/%s", repo_dir, ln);
    int cnt = 1;
    size_t pl = 0;
    struct stat st;
    if (stat(path, &st) == 0) s = HUB_OK;
    else if (!split_info(files[pi].path, &cnt, &pl)) {
        s = download(&r, &files[pi], path, flags, err, errlen);
    } else {
        /* every part, then one merged file */
        if (cnt > HUB_MAX_SPLITS) {
            snprintf(err, errlen, "%s: %d parts is more than specd merges (%d)", files[pi].path, cnt, HUB_MAX_SPLITS);
            s = HUB_ERR_USAGE;
        }
        char *parts[HUB_MAX_SPLITS];
        int np = 0;
        for (int k = 1; s == HUB_OK && k <= cnt; k++) {
            char want[600];
            snprintf(want, sizeof(want), "%.*s-%05d-of-%05d.gguf", (int)pl, files[pi].path, k, cnt);
            int fi = -1;
            for (int i = 0; i < n; i++)
                if (!strcmp(files[i].path, want)) fi = i;
            if (fi < 0) {
                snprintf(err, errlen, "%s: split part %s is missing from the repository", r.repo, want);
                s = HUB_ERR_NOT_FOUND;
                break;
            }
            char dest[2100];
            snprintf(dest, sizeof(dest), "%s/.parts/%s", repo_dir, want);
            if (!(flags & HUB_QUIET)) fprintf(stderr, "specd pull: part %d of %d: %s\n", k, cnt, want);
            if (stat(dest, &st) != 0) s = download(&r, &files[fi], dest, flags, err, errlen);
            if (s == HUB_OK) parts[np++] = strdup(dest);
        }
        if (s == HUB_OK) {
            if (!(flags & HUB_QUIET)) fprintf(stderr, "specd pull: merging %d parts into %s\n", np, path);
            if (gguf_merge_parts((const char *const *)parts, np, path, err, errlen) != 0) s = HUB_ERR_IO;
            else
                for (int k = 0; k < np; k++) unlink(parts[k]); /* the merged file replaces them */
        }
        for (int k = 0; k < np; k++) free(parts[k]);
    }
    if (s == HUB_OK) remember_ref(&r, repo_dir, ln);
    free(paths), free(files);
    return s;
}

int hub_resolve_flag(const char *cmd, const char *spec, char *buf, size_t n, const char **model) {
    if (!spec) return 0;
    char err[2048];
    hub_status s = hub_resolve(spec, 0, buf, n, err, sizeof(err));
    if (s != HUB_OK) {
        fprintf(stderr, "specd %s: %s\n", cmd, err);
        return hub_exit_code(s);
    }
    fprintf(stderr, "specd %s: %s -> %s\n", cmd, spec, buf);
    *model = buf;
    return 0;
}
