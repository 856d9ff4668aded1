/* util.c — CLI helpers (see util.h). */
#include "cli/util.h"
#include "kernels/clock.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

double now_ms(void) { return clock_now_ms(); }

/* ---- notify -> condition variable ------------------------------------------- */

void cli_waker_notify(void *user) {
    cli_waker *w = user;
    pthread_mutex_lock(&w->mu);
    w->gen++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void cli_waker_wait(cli_waker *w, uint64_t *seen, int timeout_ms) {
    if (timeout_ms < 0) {
        pthread_mutex_lock(&w->mu);
        while (w->gen == *seen) pthread_cond_wait(&w->cv, &w->mu);
        *seen = w->gen;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&w->mu);
    while (w->gen == *seen && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {
    }
    *seen = w->gen;
    pthread_mutex_unlock(&w->mu);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void sort_doubles(double *v, int n) { qsort(v, (size_t)n, sizeof(double), cmp_double); }

double sort_median(double *v, int n) {
    sort_doubles(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char *arg_str(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "specd: %s needs a value\n", argv[*i]);
        exit(2);
    }
    return argv[++*i];
}

long arg_long(int argc, char **argv, int *i, long lo, long hi) {
    const char *flag = argv[*i], *s = arg_str(argc, argv, i);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "specd: bad value for %s: '%s' (expected an integer in [%ld, %ld])\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

double arg_double(int argc, char **argv, int *i, double lo, double hi) {
    const char *flag = argv[*i], *s = arg_str(argc, argv, i);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "specd: bad value for %s: '%s' (expected a number in [%g, %g])\n", flag, s, lo, hi);
        exit(2);
    }
    return v;
}

uint64_t arg_u64(int argc, char **argv, int *i) {
    const char *flag = argv[*i], *s = arg_str(argc, argv, i);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "specd: bad value for %s: '%s' (expected an unsigned integer)\n", flag, s);
        exit(2);
    }
    return v;
}

void json_write_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
    if (f) fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

char *read_all_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int arg_kv_type(int argc, char **argv, int *i) {
    const char *v = arg_str(argc, argv, i);
    if (!strcmp(v, "f32")) return 0; /* KV_F32 */
    if (!strcmp(v, "f16")) return 1; /* KV_F16 */
    fprintf(stderr, "specd: bad value for %s: %s (f32 or f16)\n", argv[*i - 1], v);
    exit(2);
}

int arg_backend(int argc, char **argv, int *i) {
    const char *v = arg_str(argc, argv, i);
    if (!strcmp(v, "auto")) return 0;
    if (!strcmp(v, "cpu")) return 1;
    if (!strcmp(v, "cuda")) return 2;
    fprintf(stderr, "specd %s: bad value for --backend: '%s' (expected auto, cpu or cuda)\n", argv[0], v);
    exit(2);
}

/* ---- load failures ------------------------------------------------------------ */

void cli_load_failed(const char *cmd, engine_status st, const char *err, const char *oom_hint) {
    fprintf(stderr, "specd %s: %s\n", cmd, err);
    if (st == ENGINE_ERR_OOM) fprintf(stderr, "specd %s: the model weights, scratch and KV cache do not fit in memory: %s\n", cmd, oom_hint);
}

/* ---- unknown options: did you mean? ------------------------------------------ */

/* Edit distance between a and b, case-folded, where swapping two neighbours
 * counts one edit like an insertion, deletion or substitution (optimal string
 * alignment: "--prot" is one edit from "--port"); 99 past 47 bytes. */
static size_t typo_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), d[48][48];
    if (la > 47 || lb > 47) return 99;
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t v = d[i - 1][j - 1] + (ai != bj);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == bj &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* Whether name is close enough to a (both without dashes) to suggest: the
 * edit distance allowed by a's length, or a prefix; *d gets the distance. */
static bool close_enough(const char *a, const char *name, size_t *d) {
    size_t al = strlen(a), n = strlen(name);
    size_t allow = al <= 2 ? 0 : al <= 5 ? 1 : 2;
    *d = typo_distance(a, name);
    size_t shorter = n < al ? n : al;
    if (*d > allow && shorter >= 3 && !strncasecmp(a, name, shorter)) *d = allow; /* a prefix */
    return *d <= allow;
}

const char *cli_suggest_word(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    size_t best_d = 99, d;
    for (int i = 0; i < n; i++)
        if (close_enough(word, names[i], &d) && d < best_d) best_d = d, best = names[i];
    return best;
}

const char *cli_suggest_option(const char *arg, const char *text, char *out, size_t len) {
    const char *a = arg;
    while (*a == '-') a++;
    size_t al = strlen(a), best_d = 99;
    if (!al || al > 40) return NULL;
    bool found = false;
    for (const char *p = text; *p; p++) {
        /* an option: '-' or '--' then a letter, at the start or after a space, '[', '|', '(' or ',' */
        if (*p != '-' || (p > text && !strchr(" \t\n[|(,", p[-1]))) continue;
        const char *q = p;
        while (*q == '-') q++;
        if (q - p > 2 || !isalpha((unsigned char)*q)) continue;
        char name[48];
        size_t n = 0;
        while ((isalnum((unsigned char)q[n]) || q[n] == '-' || q[n] == '_') && n + 1 < sizeof name) n++;
        memcpy(name, q, n);
        name[n] = 0;
        size_t d;
        if (close_enough(a, name, &d) && d < best_d) {
            best_d = d;
            snprintf(out, len, "%.*s", (int)(q - p + n), p);
            found = true;
        }
        p = q + n - 1;
    }
    return found ? out : NULL;
}

int cli_unknown_option(const char *cmd, const char *arg, void (*usage)(FILE *)) {
    char *text = NULL, sug[64];
    size_t tl = 0;
    FILE *m = open_memstream(&text, &tl);
    if (m) {
        usage(m);
        fclose(m);
    }
    const char *s = text && arg[0] == '-' ? cli_suggest_option(arg, text, sug, sizeof sug) : NULL;
    if (arg[0] != '-') fprintf(stderr, "specd %s: unexpected argument '%s'", cmd, arg);
    else fprintf(stderr, "specd %s: unknown option '%s'", cmd, arg);
    if (s) fprintf(stderr, " (did you mean '%s'?)", s);
    fprintf(stderr, "\n  `specd %s --help` lists the options\n", cmd);
    free(text);
    return 2;
}

volatile sig_atomic_t cli_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    cli_interrupted = 1;
}

void cli_catch_sigint(struct sigaction *old) {
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, old);
}

void cli_restore_sigint(const struct sigaction *old) {
    if (old->sa_handler != SIG_ERR) sigaction(SIGINT, old, NULL);
}
