/* ring.c — the learning ring (see ring.h): a FIFO of reference-counted
 * samples bounded by bytes, and its SQLite mirror. */
#include "engine/learn/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

struct learn_ring {
    pthread_mutex_t mu;
    learn_sample **s;           /* (cap_n) oldest first */
    int n, cap_n;
    int width;
    uint64_t next_id;
    learn_ring_stats st;
    sqlite3 *db;                /* spill file (NULL: none) */
    int lock_fd;                /* PATH.lock, flock'ed while open: one server per spill file (-1: none) */
    pthread_mutex_t io;         /* one spill at a time */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t sample_bytes(int n, int width) {
    return sizeof(learn_sample) + sizeof(int32_t) * (size_t)n + sizeof(uint16_t) * (size_t)(n - 1) * (size_t)width;
}

/* One allocation: the header, then tokens, then features. */
static learn_sample *sample_new(int n, int width) {
    size_t b = sample_bytes(n, width);
    learn_sample *s = malloc(b);
    if (!s) return NULL;
    memset(s, 0, sizeof(*s));
    s->n = n, s->width = width, s->bytes = b, s->refs = 1;
    s->tok = (const int32_t *)(s + 1);
    s->feat = (const uint16_t *)((const int32_t *)(s + 1) + n);
    return s;
}

static void sample_unref(learn_sample *s) {
    if (s && atomic_fetch_sub_explicit((_Atomic int *)&s->refs, 1, memory_order_acq_rel) == 1) free(s);
}

/* Drops oldest samples until `extra` more bytes fit (mu held). */
static void make_room(learn_ring *r, size_t extra) {
    int k = 0;
    while (k < r->n && r->st.bytes + extra > r->st.cap) {
        learn_sample *s = r->s[k++];
        r->st.bytes -= s->bytes, r->st.positions -= s->n - 1;
        r->st.dropped++;
        sample_unref(s);
    }
    if (k) memmove(r->s, r->s + k, sizeof(*r->s) * (size_t)(r->n - k)), r->n -= k;
    r->st.samples = r->n;
}

static int append(learn_ring *r, learn_sample *s) {
    if (r->n == r->cap_n) {
        int c = r->cap_n ? 2 * r->cap_n : 64;
        learn_sample **p = realloc(r->s, sizeof(*p) * (size_t)c);
        if (!p) return -1;
        r->s = p, r->cap_n = c;
    }
    r->s[r->n++] = s;
    r->st.bytes += s->bytes, r->st.positions += s->n - 1, r->st.samples = r->n;
    return 0;
}

/* ---- the spill file ------------------------------------------------------ */

static int db_exec(sqlite3 *db, const char *sql) { return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1; }

/* Loads the file's samples for target_id, newest first until the cap, into r
 * (oldest first). Rows whose sizes do not match their header are skipped. */
static int spill_load(learn_ring *r, const char *target_id, char *err, size_t errlen) {
    sqlite3 *db = r->db;
    if (db_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
                    "CREATE TABLE IF NOT EXISTS samples(id INTEGER PRIMARY KEY, t REAL, n INTEGER, width INTEGER,"
                    " tok BLOB, feat BLOB);") != 0) {
        snprintf(err, errlen, "learning spill file: %s", sqlite3_errmsg(db));
        return -1;
    }
    sqlite3_stmt *q = NULL;
    char old[160] = "";
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'target'", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
        snprintf(old, sizeof(old), "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    if (strcmp(old, target_id)) {
        if (old[0])
            fprintf(stderr, "specd: learning spill file holds another target's samples (%s, not %s): emptied\n", old,
                    target_id);
        if (db_exec(db, "DELETE FROM samples") != 0 ||
            sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta VALUES('target', ?)", -1, &q, NULL) != SQLITE_OK) {
            snprintf(err, errlen, "learning spill file: %s", sqlite3_errmsg(db));
            return -1;
        }
        sqlite3_bind_text(q, 1, target_id, -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(q);
        sqlite3_finalize(q);
        if (rc != SQLITE_DONE) {
            snprintf(err, errlen, "learning spill file: %s", sqlite3_errmsg(db));
            return -1;
        }
        return 0;
    }
    if (sqlite3_prepare_v2(db, "SELECT id, t, n, width, tok, feat FROM samples ORDER BY id DESC", -1, &q, NULL) !=
        SQLITE_OK) {
        snprintf(err, errlen, "learning spill file: %s", sqlite3_errmsg(db));
        return -1;
    }
    learn_sample **got = NULL;
    int ng = 0, capg = 0;
    size_t bytes = 0;
    uint64_t max_id = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        uint64_t id = (uint64_t)sqlite3_column_int64(q, 0);
        int n = sqlite3_column_int(q, 2), w = sqlite3_column_int(q, 3);
        if (id > max_id) max_id = id;
        if (n < 2 || n > (1 << 24) || w != r->width) continue;
        if (sqlite3_column_bytes(q, 4) != (int)(sizeof(int32_t) * (size_t)n) ||
            (size_t)sqlite3_column_bytes(q, 5) != sizeof(uint16_t) * (size_t)(n - 1) * (size_t)w)
            continue;
        if (bytes + sample_bytes(n, w) > r->st.cap) break;
        learn_sample *s = sample_new(n, w);
        if (!s) break;
        if (ng == capg) {
            capg = capg ? 2 * capg : 64;
            learn_sample **p = realloc(got, sizeof(*p) * (size_t)capg);
            if (!p) {
                free(s);
                break;
            }
            got = p;
        }
        s->id = id, s->t = sqlite3_column_double(q, 1), s->spilled = true;
        memcpy((void *)s->tok, sqlite3_column_blob(q, 4), sizeof(int32_t) * (size_t)n);
        memcpy((void *)s->feat, sqlite3_column_blob(q, 5), sizeof(uint16_t) * (size_t)(n - 1) * (size_t)w);
        got[ng++] = s, bytes += s->bytes;
    }
    sqlite3_finalize(q);
    for (int i = ng - 1; i >= 0; i--)
        if (append(r, got[i]) != 0) sample_unref(got[i]);
    free(got);
    r->st.loaded = (uint64_t)r->n;
    r->next_id = max_id + 1;
    return 0;
}

learn_ring *learn_ring_create(size_t cap, int width, const char *spill_path, const char *target_id, char *err,
                              size_t errlen) {
    learn_ring *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->io, NULL);
    r->width = width, r->st.cap = cap, r->next_id = 1, r->lock_fd = -1;
    if (spill_path && spill_path[0]) {
        /* two servers on one file would overwrite each other's samples (ids from 1 in each): refused */
        char lp[1100];
        snprintf(lp, sizeof(lp), "%s.lock", spill_path);
        r->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
        if (r->lock_fd < 0 || flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0) {
            int en = errno;
            snprintf(err, errlen, "learning spill file %s: %s", spill_path,
                     r->lock_fd >= 0 && en == EWOULDBLOCK ? "in use by another running specd (give each its own "
                                                           "speculation.learn_spill)"
                                                         : strerror(en));
            learn_ring_destroy(r);
            return NULL;
        }
        if (sqlite3_open(spill_path, &r->db) != SQLITE_OK) {
            snprintf(err, errlen, "cannot open the learning spill file %s: %s", spill_path,
                     r->db ? sqlite3_errmsg(r->db) : "out of memory");
            learn_ring_destroy(r);
            return NULL;
        }
        sqlite3_busy_timeout(r->db, 2000);
        if (spill_load(r, target_id ? target_id : "", err, errlen) != 0) {
            learn_ring_destroy(r);
            return NULL;
        }
    }
    return r;
}

void learn_ring_destroy(learn_ring *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) sample_unref(r->s[i]);
    free(r->s);
    if (r->db) sqlite3_close(r->db);
    if (r->lock_fd >= 0) close(r->lock_fd); /* the flock goes with it */
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->io);
    free(r);
}

int learn_ring_push(learn_ring *r, const int32_t *tok, int n, const uint16_t *feat) {
    if (n < 2) return 0;
    size_t b = sample_bytes(n, r->width);
    pthread_mutex_lock(&r->mu);
    bool fits = b <= r->st.cap;
    if (!fits) r->st.refused++;
    pthread_mutex_unlock(&r->mu);
    if (!fits) return 0;
    learn_sample *s = sample_new(n, r->width); /* the copy outside the lock */
    if (!s) return -1;
    memcpy((void *)s->tok, tok, sizeof(int32_t) * (size_t)n);
    memcpy((void *)s->feat, feat, sizeof(uint16_t) * (size_t)(n - 1) * (size_t)r->width);
    s->t = now_s();
    pthread_mutex_lock(&r->mu);
    make_room(r, s->bytes);
    s->id = r->next_id++;
    int rc = append(r, s);
    if (rc == 0) r->st.pushed++;
    pthread_mutex_unlock(&r->mu);
    if (rc != 0) {
        free(s);
        return -1;
    }
    return 1;
}

void learn_ring_set_cap(learn_ring *r, size_t cap) {
    pthread_mutex_lock(&r->mu);
    r->st.cap = cap;
    make_room(r, 0);
    pthread_mutex_unlock(&r->mu);
}

int learn_ring_snapshot(learn_ring *r, learn_sample ***out) {
    pthread_mutex_lock(&r->mu);
    learn_sample **v = malloc(sizeof(*v) * (size_t)(r->n ? r->n : 1));
    int n = v ? r->n : -1;
    for (int i = 0; i < n; i++) {
        v[i] = r->s[i];
        atomic_fetch_add_explicit((_Atomic int *)&v[i]->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&r->mu);
    *out = v;
    return n;
}

void learn_ring_release(learn_sample **s, int n) {
    for (int i = 0; i < n; i++) sample_unref(s[i]);
}

void learn_ring_get_stats(learn_ring *r, learn_ring_stats *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

int learn_ring_spill(learn_ring *r) {
    if (!r->db) return 0;
    pthread_mutex_lock(&r->io);
    /* what to write and the oldest id still held, taken under the lock */
    pthread_mutex_lock(&r->mu);
    learn_sample **w = malloc(sizeof(*w) * (size_t)(r->n ? r->n : 1));
    int nw = 0;
    uint64_t oldest = r->n ? r->s[0]->id : r->next_id;
    for (int i = 0; w && i < r->n; i++)
        if (!r->s[i]->spilled) {
            w[nw++] = r->s[i];
            atomic_fetch_add_explicit((_Atomic int *)&r->s[i]->refs, 1, memory_order_relaxed);
        }
    pthread_mutex_unlock(&r->mu);
    if (!w) {
        pthread_mutex_unlock(&r->io);
        return -1;
    }
    sqlite3 *db = r->db;
    sqlite3_stmt *ins = NULL, *del = NULL;
    bool ok = db_exec(db, "BEGIN IMMEDIATE") == 0 &&
              sqlite3_prepare_v2(db, "DELETE FROM samples WHERE id < ?", -1, &del, NULL) == SQLITE_OK &&
              sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO samples VALUES(?, ?, ?, ?, ?, ?)", -1, &ins, NULL) ==
                  SQLITE_OK;
    if (ok) {
        sqlite3_bind_int64(del, 1, (sqlite3_int64)oldest);
        ok = sqlite3_step(del) == SQLITE_DONE;
    }
    for (int i = 0; ok && i < nw; i++) {
        learn_sample *s = w[i];
        sqlite3_reset(ins);
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)s->id);
        sqlite3_bind_double(ins, 2, s->t);
        sqlite3_bind_int(ins, 3, s->n);
        sqlite3_bind_int(ins, 4, s->width);
        sqlite3_bind_blob(ins, 5, s->tok, (int)(sizeof(int32_t) * (size_t)s->n), SQLITE_STATIC);
        sqlite3_bind_blob64(ins, 6, s->feat, sizeof(uint16_t) * (size_t)(s->n - 1) * (size_t)s->width, SQLITE_STATIC);
        ok = sqlite3_step(ins) == SQLITE_DONE;
    }
    sqlite3_finalize(ins), sqlite3_finalize(del);
    ok = ok && db_exec(db, "COMMIT") == 0;
    if (!ok) db_exec(db, "ROLLBACK");
    pthread_mutex_lock(&r->mu);
    if (ok)
        for (int i = 0; i < nw; i++) w[i]->spilled = true;
    else
        r->st.spill_errors++;
    pthread_mutex_unlock(&r->mu);
    learn_ring_release(w, nw);
    free(w);
    pthread_mutex_unlock(&r->io);
    return ok ? nw : -1;
}
