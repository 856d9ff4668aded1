/* telemetry.c — the bounded row ring, its one SQLite writer thread (batched
 * transactions, WAL, prepared statements) and background retention.
 * See telemetry.h for the contract. */
#include "engine/telemetry/telemetry.h"
#include "kernels/check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define TEL_SCHEMA_VERSION 5 /* 2: speculation_steps.method; 3: .shape; 4: .nodes_verified, gamma_used = depth;
                              * 5: .head_version */
#define TEL_FLUSH_MS 50           /* the writer commits at least this often when rows are waiting */
#define TEL_RETENTION_MS 1000     /* retention pass period */
#define TEL_RETENTION_BATCH 2000  /* rows per retention DELETE (short write locks) */

/* ---------------------------------------------------------------- rows */

typedef enum { ROW_SESSION = 1, ROW_STEP, ROW_END, ROW_POLICY_HEAD, ROW_POLICY_RULE } row_kind;

typedef struct {
    row_kind kind;
    union {
        tel_session session;
        tel_step step;
        tel_session_end end;
        struct { int n, version; int64_t at_ms; } policy_head;
        tel_policy_rule rule;
    } u;
} tel_row;

struct telemetry {
    telemetry_config cfg;
    sqlite3 *db;
    sqlite3_stmt *st_session, *st_step, *st_end, *st_pol_del, *st_pol_ins;
    sqlite3_stmt *st_ret_age, *st_ret_rows, *st_ret_sess, *st_max_step;
    sqlite3_stmt *st_begin, *st_commit, *st_rollback;

    /* ring: guarded by mu. Slots [tail, tail+count) belong to the writer
     * (it reads them without the lock); producers write only at head. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tel_row *ring;
    int cap, head, count, reserve;
    bool stop;
    tel_counters c;             /* guarded by mu */

    pthread_t thread;
    int64_t last_retention_ms;
    int lock_fd;                /* PATH.lock, flock'ed while open (-1: none) */
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void copy_str(char *dst, size_t n, const char *src) {
    if (!src) { dst[0] = 0; return; }
    size_t l = strnlen(src, n - 1);
    memcpy(dst, src, l);
    dst[l] = 0;
}

const char *tel_status_name(tel_status s) {
    switch (s) {
    case TEL_STATUS_ACTIVE: return "active";
    case TEL_STATUS_COMPLETED: return "completed";
    case TEL_STATUS_FAILED: return "failed";
    case TEL_STATUS_CANCELLED: return "cancelled";
    }
    return "failed";
}

telemetry_config telemetry_config_default(void) {
    telemetry_config c = {0};
    c.path = "telemetry.db";
    c.sample_rate = 1.0;
    c.queue_size = 16384;
    c.batch_max = 512;
    return c;
}

void tel_step_from_info(tel_step *out, const char *session_id, int step_num, const spec_step_info *info) {
    memset(out, 0, sizeof *out);
    copy_str(out->session_id, sizeof out->session_id, session_id);
    out->step_num = step_num;
    /* depth unset (0) with drafts: a producer that knows only γ, i.e. a chain */
    out->gamma_used = info->gamma > 0 ? (info->depth > 0 ? info->depth : info->gamma) : 0;
    out->nodes = info->gamma;
    out->n_accepted = info->accepted;
    out->n_rejected = info->gamma > 0 ? info->gamma - info->accepted : 0;
    out->draft_ms = info->draft_ms;
    out->target_ms = info->target_ms;
    out->effective_tpot_ms = info->n_new > 0 ? (info->draft_ms + info->target_ms) / info->n_new : 0.0;
    copy_str(out->method, sizeof out->method, spec_drafter_name(info->gamma > 0 ? info->method : -1));
    out->tree = info->tree;
    out->recorded_ms = 0;
}

void tel_uuid_format(char out[TEL_UUID_LEN], uint64_t hi, uint64_t lo) {
    hi = (hi & ~0xF000ull) | 0x4000ull;                       /* version 4 */
    lo = (lo & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull; /* variant 10 */
    snprintf(out, TEL_UUID_LEN, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(hi >> 32), (unsigned)(hi >> 16) & 0xFFFF,
             (unsigned)hi & 0xFFFF, (unsigned)(lo >> 48), (unsigned long long)(lo & 0xFFFFFFFFFFFFull));
}

/* ---------------------------------------------------------------- producers */

/* Deterministic sampling: a hash of (session, step) mapped to [0, 1). */
static bool step_sampled(const tel_step *s, double rate) {
    if (rate >= 1.0) return true;
    if (rate <= 0.0) return false;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s->session_id; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h ^= (uint64_t)(uint32_t)s->step_num * 0x9E3779B97F4A7C15ull;
    h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27; h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < rate;
}

/* Caller holds t->mu. Returns the slot to fill, or NULL (counted as dropped). */
static tel_row *ring_claim(telemetry *t, int limit) {
    if (t->count >= limit) { t->c.dropped++; return NULL; }
    tel_row *r = &t->ring[t->head];
    t->head = (t->head + 1) % t->cap;
    t->count++;
    t->c.queued++;
    return r;
}

/* Caller holds t->mu: wakes the writer once a full batch is waiting. */
static void ring_pushed(telemetry *t, int before) {
    if (before < t->cfg.batch_max && t->count >= t->cfg.batch_max) pthread_cond_signal(&t->cv);
}

bool telemetry_session_start(telemetry *t, const tel_session *s) {
    if (!t) return true;
    int64_t at = s->created_ms ? s->created_ms : now_ms();
    pthread_mutex_lock(&t->mu);
    int before = t->count;
    tel_row *r = ring_claim(t, t->cap);
    if (r) {
        r->kind = ROW_SESSION;
        r->u.session = *s;
        tel_session *d = &r->u.session;
        d->created_ms = at;
        d->session_id[TEL_UUID_LEN - 1] = d->request_id[TEL_UUID_LEN - 1] = 0;
        d->content_type[TEL_NAME_LEN - 1] = d->spec_mode[TEL_NAME_LEN - 1] = 0;
        d->target_id[TEL_ID_LEN - 1] = d->draft_id[TEL_ID_LEN - 1] = d->model_version[TEL_ID_LEN - 1] = 0;
        ring_pushed(t, before);
    }
    pthread_mutex_unlock(&t->mu);
    return r != NULL;
}

bool telemetry_step(telemetry *t, const tel_step *s) {
    if (!t) return true;
    if (!step_sampled(s, t->cfg.sample_rate)) {
        pthread_mutex_lock(&t->mu);
        t->c.sampled_out++;
        pthread_mutex_unlock(&t->mu);
        return true;
    }
    int64_t at = s->recorded_ms ? s->recorded_ms : now_ms();
    pthread_mutex_lock(&t->mu);
    int before = t->count;
    tel_row *r = ring_claim(t, t->cap - t->reserve);
    if (r) {
        r->kind = ROW_STEP;
        r->u.step = *s;
        r->u.step.recorded_ms = at;
        r->u.step.session_id[TEL_UUID_LEN - 1] = 0;
        ring_pushed(t, before);
    }
    pthread_mutex_unlock(&t->mu);
    return r != NULL;
}

bool telemetry_session_end(telemetry *t, const tel_session_end *e) {
    if (!t) return true;
    pthread_mutex_lock(&t->mu);
    int before = t->count;
    tel_row *r = ring_claim(t, t->cap);
    if (r) {
        r->kind = ROW_END;
        r->u.end = *e;
        r->u.end.session_id[TEL_UUID_LEN - 1] = 0;
        ring_pushed(t, before);
    }
    pthread_mutex_unlock(&t->mu);
    return r != NULL;
}

bool telemetry_policy(telemetry *t, const tel_policy_rule *rules, int n, int version) {
    if (!t) return true;
    SPECD_CHECK(n >= 0 && (n == 0 || rules));
    int64_t at = now_ms();
    pthread_mutex_lock(&t->mu);
    bool ok = t->count + n + 1 <= t->cap;
    if (!ok) {
        t->c.dropped += (uint64_t)n + 1;
    } else {
        tel_row *h = ring_claim(t, t->cap);
        h->kind = ROW_POLICY_HEAD;
        h->u.policy_head.n = n;
        h->u.policy_head.version = version;
        h->u.policy_head.at_ms = at;
        for (int i = 0; i < n; i++) {
            tel_row *r = ring_claim(t, t->cap);
            r->kind = ROW_POLICY_RULE;
            r->u.rule = rules[i];
            r->u.rule.model_id[TEL_ID_LEN - 1] = r->u.rule.content_type[TEL_NAME_LEN - 1] = 0;
        }
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void telemetry_counters(telemetry *t, tel_counters *out) {
    memset(out, 0, sizeof *out);
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    *out = t->c;
    out->queue_depth = t->count;
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- writer */

static const char *k_schema =
    "CREATE TABLE IF NOT EXISTS speculation_sessions (\n"
    "  session_id          TEXT PRIMARY KEY,\n"
    "  request_id          TEXT NOT NULL,\n"
    "  created_at          INTEGER NOT NULL,            -- unix ms\n"
    "  prompt_token_count  INTEGER NOT NULL,\n"
    "  generated_tokens    INTEGER NOT NULL DEFAULT 0,\n"
    "  current_gamma       INTEGER NOT NULL DEFAULT 4,\n"
    "  rolling_accept_sum  INTEGER NOT NULL DEFAULT 0,\n"
    "  rolling_accept_n    INTEGER NOT NULL DEFAULT 0,\n"
    "  total_accepted      INTEGER NOT NULL DEFAULT 0,\n"
    "  total_rejected      INTEGER NOT NULL DEFAULT 0,\n"
    "  total_target_passes INTEGER NOT NULL DEFAULT 0,\n"
    "  target_id           TEXT NOT NULL DEFAULT '',    -- pair identity (spec_model_id.id)\n"
    "  draft_id            TEXT NOT NULL DEFAULT '',\n"
    "  kv_valid_len        INTEGER NOT NULL DEFAULT 0,\n"
    "  last_ttft_ms        REAL,\n"
    "  last_tpot_ms        REAL,\n"
    "  model_version       TEXT NOT NULL,\n"
    "  content_type        TEXT,\n"
    "  spec_mode           TEXT NOT NULL DEFAULT 'auto',\n"
    "  status              TEXT NOT NULL DEFAULT 'active',  -- active|completed|failed|cancelled\n"
    "  ended_at            INTEGER                      -- unix ms\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS speculation_sessions_created ON speculation_sessions(created_at);\n"
    "CREATE TABLE IF NOT EXISTS speculation_steps (\n"
    "  step_id           INTEGER PRIMARY KEY,\n"
    "  session_id        TEXT NOT NULL,                 -- speculation_sessions.session_id (not enforced)\n"
    "  step_num          INTEGER NOT NULL,\n"
    "  gamma_used        INTEGER NOT NULL,              -- depth: a chain's gamma, a tree's deepest level\n"
    "  n_accepted        INTEGER NOT NULL,\n"
    "  n_rejected        INTEGER NOT NULL,\n"
    "  draft_latency_ms  REAL NOT NULL,\n"
    "  target_latency_ms REAL NOT NULL,\n"
    "  effective_tpot_ms REAL NOT NULL,\n"
    "  recorded_at       INTEGER NOT NULL,              -- unix ms\n"
    "  method            TEXT NOT NULL DEFAULT 'plain', -- proposer: draft|ngram|medusa, plain for a plain step\n"
    "  shape             TEXT NOT NULL DEFAULT 'chain', -- chain, or tree (n_accepted = the accepted path's length)\n"
    "  nodes_verified    INTEGER NOT NULL DEFAULT 0,    -- drafts verified: a chain's gamma, a tree's nodes\n"
    "  head_version      INTEGER NOT NULL DEFAULT 0     -- the EAGLE head's version (serve --learn swaps)\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS speculation_steps_session ON speculation_steps(session_id, step_num);\n"
    "CREATE INDEX IF NOT EXISTS speculation_steps_recorded ON speculation_steps(recorded_at);\n"
    "CREATE TABLE IF NOT EXISTS gamma_policy (\n"
    "  policy_id       INTEGER PRIMARY KEY,\n"
    "  model_id        TEXT NOT NULL,\n"
    "  content_type    TEXT,                            -- NULL = the model's default rule\n"
    "  gamma_min       INTEGER NOT NULL DEFAULT 2,\n"
    "  gamma_max       INTEGER NOT NULL DEFAULT 8,\n"
    "  gamma_default   INTEGER NOT NULL DEFAULT 4,\n"
    "  alpha_threshold REAL NOT NULL DEFAULT 0.65,\n"
    "  updated_at      INTEGER NOT NULL,                -- unix ms\n"
    "  version         INTEGER NOT NULL\n"
    ");\n";

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s) {
    if (s[0]) sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, i);
}

/* Runs a bound statement to completion. Returns the number of changed rows, or
 * -1 with the error recorded. Writer thread only. */
static int run_stmt(telemetry *t, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    int out = rc == SQLITE_DONE || rc == SQLITE_ROW ? sqlite3_changes(t->db) : -1;
    if (out < 0) {
        pthread_mutex_lock(&t->mu);
        snprintf(t->c.last_error, sizeof t->c.last_error, "%s", sqlite3_errmsg(t->db));
        pthread_mutex_unlock(&t->mu);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return out;
}

static int write_session(telemetry *t, const tel_session *s) {
    sqlite3_stmt *st = t->st_session;
    sqlite3_bind_text(st, 1, s->session_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, s->request_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, s->created_ms);
    sqlite3_bind_int(st, 4, s->prompt_tokens);
    sqlite3_bind_int(st, 5, s->gamma);
    sqlite3_bind_text(st, 6, s->target_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, s->draft_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, s->model_version[0] ? s->model_version : s->target_id, -1, SQLITE_STATIC);
    bind_text_or_null(st, 9, s->content_type);
    sqlite3_bind_text(st, 10, s->spec_mode[0] ? s->spec_mode : "auto", -1, SQLITE_STATIC);
    return run_stmt(t, st);
}

static int write_step(telemetry *t, const tel_step *s) {
    sqlite3_stmt *st = t->st_step;
    sqlite3_bind_text(st, 1, s->session_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, s->step_num);
    sqlite3_bind_int(st, 3, s->gamma_used);
    sqlite3_bind_int(st, 4, s->n_accepted);
    sqlite3_bind_int(st, 5, s->n_rejected);
    sqlite3_bind_double(st, 6, s->draft_ms);
    sqlite3_bind_double(st, 7, s->target_ms);
    sqlite3_bind_double(st, 8, s->effective_tpot_ms);
    sqlite3_bind_int64(st, 9, s->recorded_ms);
    sqlite3_bind_text(st, 10, s->method[0] ? s->method : "plain", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 11, s->tree ? "tree" : "chain", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 12, s->nodes);
    sqlite3_bind_int(st, 13, s->head_version);
    return run_stmt(t, st);
}

static int write_end(telemetry *t, const tel_session_end *e) {
    sqlite3_stmt *st = t->st_end;
    sqlite3_bind_text(st, 1, e->session_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now_ms());
    sqlite3_bind_int(st, 3, e->generated_tokens);
    sqlite3_bind_int(st, 4, e->current_gamma);
    sqlite3_bind_int(st, 5, e->rolling_accept_sum);
    sqlite3_bind_int(st, 6, e->rolling_accept_n);
    sqlite3_bind_int64(st, 7, e->total_accepted);
    sqlite3_bind_int64(st, 8, e->total_rejected);
    sqlite3_bind_int64(st, 9, e->total_target_passes);
    sqlite3_bind_int(st, 10, e->kv_valid_len);
    sqlite3_bind_double(st, 11, e->ttft_ms);
    sqlite3_bind_double(st, 12, e->tpot_ms);
    sqlite3_bind_text(st, 13, tel_status_name(e->status), -1, SQLITE_STATIC);
    return run_stmt(t, st);
}

/* Replaces the mirror with the n rules that follow the head at ring index i. */
static int write_policy(telemetry *t, int i, int n, int version, int64_t at) {
    if (run_stmt(t, t->st_pol_del) < 0) return -1;
    for (int k = 1; k <= n; k++) {
        const tel_row *r = &t->ring[(i + k) % t->cap];
        SPECD_CHECK(r->kind == ROW_POLICY_RULE);
        sqlite3_stmt *st = t->st_pol_ins;
        sqlite3_bind_text(st, 1, r->u.rule.model_id, -1, SQLITE_STATIC);
        bind_text_or_null(st, 2, r->u.rule.content_type);
        sqlite3_bind_int(st, 3, r->u.rule.gamma_min);
        sqlite3_bind_int(st, 4, r->u.rule.gamma_max);
        sqlite3_bind_int(st, 5, r->u.rule.gamma_default);
        sqlite3_bind_double(st, 6, r->u.rule.alpha_threshold);
        sqlite3_bind_int64(st, 7, at);
        sqlite3_bind_int(st, 8, version);
        if (run_stmt(t, st) < 0) return -1;
    }
    return n + 1;
}

/* Writes up to batch_max rows from the ring (a policy table always whole) in
 * one transaction, then releases their slots. Returns the rows consumed.
 * Writer thread only; t->mu not held. */
static int write_batch(telemetry *t) {
    pthread_mutex_lock(&t->mu);
    int avail = t->count;
    int tail = (t->head - t->count + t->cap) % t->cap;
    pthread_mutex_unlock(&t->mu);
    if (avail == 0) return 0;
    int take = avail < t->cfg.batch_max ? avail : t->cfg.batch_max;

    uint64_t ok = 0, bad = 0;
    bool txn = run_stmt(t, t->st_begin) >= 0;
    int i = 0;
    while (i < take) {
        const tel_row *r = &t->ring[(tail + i) % t->cap];
        int rows = 1, rc = 0;
        switch (r->kind) {
        case ROW_SESSION: rc = write_session(t, &r->u.session); break;
        case ROW_STEP: rc = write_step(t, &r->u.step); break;
        case ROW_END: rc = write_end(t, &r->u.end); break;
        case ROW_POLICY_HEAD:
            rows = r->u.policy_head.n + 1; /* queued together: all in the ring */
            SPECD_CHECK(i + rows <= avail);
            rc = write_policy(t, (tail + i) % t->cap, r->u.policy_head.n, r->u.policy_head.version,
                              r->u.policy_head.at_ms);
            break;
        default: SPECD_CHECK(!"ring row of unknown kind");
        }
        if (rc < 0) bad += (uint64_t)rows;
        else ok += (uint64_t)rows;
        i += rows;
    }
    if (txn && run_stmt(t, t->st_commit) < 0) {
        run_stmt(t, t->st_rollback);
        bad += ok;
        ok = 0;
    }
    if (!txn) { bad += ok; ok = 0; }

    pthread_mutex_lock(&t->mu);
    t->count -= i;
    t->c.written += ok;
    t->c.failed += bad;
    if (ok) t->c.batches++;
    pthread_mutex_unlock(&t->mu);
    return i;
}

/* One retention pass: deletes step rows (and finished sessions) past the age
 * or row limits, TEL_RETENTION_BATCH rows per transaction. A background pass
 * stops early when rows are piling up in the ring. Writer thread only. */
static void retention_pass(telemetry *t, bool to_completion) {
    int64_t cutoff = t->cfg.retention_days > 0 ? now_ms() - (int64_t)(t->cfg.retention_days * 86400000.0) : 0;
    int64_t max_id_keep = -1;
    if (t->cfg.retention_rows > 0) {
        if (sqlite3_step(t->st_max_step) == SQLITE_ROW && sqlite3_column_type(t->st_max_step, 0) != SQLITE_NULL)
            max_id_keep = sqlite3_column_int64(t->st_max_step, 0) - t->cfg.retention_rows;
        sqlite3_reset(t->st_max_step);
    }
    sqlite3_stmt *jobs[3] = {0};
    int nj = 0;
    if (cutoff > 0) {
        sqlite3_bind_int64(t->st_ret_age, 1, cutoff);
        sqlite3_bind_int64(t->st_ret_sess, 1, cutoff);
        jobs[nj++] = t->st_ret_age;
        jobs[nj++] = t->st_ret_sess;
    }
    if (max_id_keep > 0) {
        sqlite3_bind_int64(t->st_ret_rows, 1, max_id_keep);
        jobs[nj++] = t->st_ret_rows;
    }
    for (int j = 0; j < nj; j++) {
        for (int rounds = 0;; rounds++) {
            if (!to_completion) {
                pthread_mutex_lock(&t->mu);
                bool busy = t->count >= t->cfg.batch_max || t->stop;
                pthread_mutex_unlock(&t->mu);
                if (busy || rounds >= 16) break;
            }
            int rc = sqlite3_step(jobs[j]);
            int n = rc == SQLITE_DONE ? sqlite3_changes(t->db) : -1;
            if (n < 0) {
                pthread_mutex_lock(&t->mu);
                snprintf(t->c.last_error, sizeof t->c.last_error, "retention: %s", sqlite3_errmsg(t->db));
                pthread_mutex_unlock(&t->mu);
            }
            sqlite3_reset(jobs[j]);
            if (n <= 0) break;
            pthread_mutex_lock(&t->mu);
            t->c.retention_deleted += (uint64_t)n;
            pthread_mutex_unlock(&t->mu);
        }
        sqlite3_clear_bindings(jobs[j]);
    }
}

static void *writer_main(void *arg) {
    telemetry *t = arg;
    t->last_retention_ms = 0; /* first pass at start */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += TEL_FLUSH_MS * 1000000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        while (!t->stop && t->count < t->cfg.batch_max)
            if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT) break;
        bool stop = t->stop;
        pthread_mutex_unlock(&t->mu);

        while (write_batch(t) > 0) {
            if (t->cfg.writer_delay_us > 0) usleep((useconds_t)t->cfg.writer_delay_us);
            if (!stop) break; /* back to waiting: batches fill up while we sleep */
        }
        if (stop) break;
        int64_t now = now_ms();
        if (now - t->last_retention_ms >= TEL_RETENTION_MS) {
            retention_pass(t, false);
            t->last_retention_ms = now;
        }
    }
    retention_pass(t, true);
    return NULL;
}

/* ---------------------------------------------------------------- open/close */

static void finalize_all(telemetry *t) {
    sqlite3_stmt *all[] = {t->st_session, t->st_step, t->st_end, t->st_pol_del, t->st_pol_ins, t->st_ret_age,
                           t->st_ret_rows, t->st_ret_sess, t->st_max_step, t->st_begin, t->st_commit, t->st_rollback};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sqlite3_finalize(all[i]);
}

static void free_handle(telemetry *t) {
    finalize_all(t);
    if (t->db) sqlite3_close(t->db);
    if (t->lock_fd >= 0) close(t->lock_fd); /* after the database: the lock covers every write */
    free(t->ring);
    free(t);
}

/* One server per database file: the file's sessions left 'active' are
 * marked failed at open (a crashed run's), and retention prunes it, so a
 * second live server on the same file would fail the first one's running
 * sessions. An exclusive flock on PATH.lock (a file of its own: SQLite's
 * POSIX locks on the database must not be disturbed) is held from before the
 * first read until telemetry_close; the kernel drops it when the process
 * dies, so a crash leaves no stale lock. The holder writes its pid there for
 * the refusal's message. Returns the descriptor, or -1 with err filled. */
static int lock_db(const char *path, char *err, size_t errlen) {
    char lp[4096];
    if (snprintf(lp, sizeof lp, "%s.lock", path) >= (int)sizeof lp) {
        snprintf(err, errlen, "telemetry: cannot open %.200s: the path is too long", path);
        return -1;
    }
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "telemetry: cannot open %s: cannot create its lock file %s: %s (does the directory "
                 "exist and is it writable?)", path, lp, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strspn(pid, "0123456789")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            snprintf(err, errlen, "telemetry: %s is in use by another running specd%s%s%s (it holds %s); give each "
                     "instance its own telemetry.path", path, pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "", lp);
        else
            snprintf(err, errlen, "telemetry: cannot lock %s: %s", lp, strerror(e));
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) { /* only the message loses the pid */ }
    return fd;
}

telemetry *telemetry_open(const telemetry_config *cfg, char *err, size_t errlen) {
    SPECD_CHECK(cfg);
    const char *path = cfg->path && cfg->path[0] ? cfg->path : "telemetry.db";
    if (cfg->sample_rate < 0 || cfg->sample_rate > 1 || cfg->queue_size < 0 || cfg->batch_max < 0 ||
        cfg->retention_rows < 0 || cfg->retention_days < 0) {
        snprintf(err, errlen, "telemetry: bad config (sample_rate %g must be 0..1; sizes and retention >= 0)",
                 cfg->sample_rate);
        return NULL;
    }
    int lock_fd = -1;
    if (strcmp(path, ":memory:") != 0 && (lock_fd = lock_db(path, err, errlen)) < 0) return NULL;
    telemetry *t = calloc(1, sizeof *t);
    SPECD_CHECK(t);
    t->lock_fd = lock_fd;
    t->cfg = *cfg;
    t->cfg.path = NULL; /* not kept: the caller's string */
    if (t->cfg.queue_size <= 0) t->cfg.queue_size = 16384;
    if (t->cfg.batch_max <= 0) t->cfg.batch_max = 512;
    t->cap = t->cfg.queue_size;
    t->reserve = t->cap >= 8 ? t->cap / 8 : 0;
    t->ring = calloc((size_t)t->cap, sizeof *t->ring);
    SPECD_CHECK(t->ring);

    const char *stage = "open";
    int rc = sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK && sqlite3_db_readonly(t->db, "main") == 1) {
        snprintf(err, errlen, "telemetry: cannot open %s: the file is read-only", path);
        free_handle(t);
        return NULL;
    }
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(t->db, 5000);
        stage = "set up";
        rc = sqlite3_exec(t->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, NULL);
    }
    int user_version = 0;
    if (rc == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(t->db, "PRAGMA user_version", -1, &st, NULL);
        if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) user_version = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    if (rc == SQLITE_OK && user_version > TEL_SCHEMA_VERSION) {
        snprintf(err, errlen, "telemetry: cannot open %s: schema version %d is newer than this build's %d", path,
                 user_version, TEL_SCHEMA_VERSION);
        free_handle(t);
        return NULL;
    }
    if (rc == SQLITE_OK) {
        stage = "create the schema in";
        rc = sqlite3_exec(t->db, "BEGIN", NULL, NULL, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_exec(t->db, k_schema, NULL, NULL, NULL);
        if (rc == SQLITE_OK && user_version == 1) /* a version-1 file: its steps table has no method column */
            rc = sqlite3_exec(t->db, "ALTER TABLE speculation_steps ADD COLUMN method TEXT NOT NULL DEFAULT 'plain'",
                              NULL, NULL, NULL);
        if (rc == SQLITE_OK && user_version >= 1 && user_version <= 2) /* ... nor a shape column */
            rc = sqlite3_exec(t->db, "ALTER TABLE speculation_steps ADD COLUMN shape TEXT NOT NULL DEFAULT 'chain'",
                              NULL, NULL, NULL);
        if (rc == SQLITE_OK && user_version >= 1 && user_version <= 3) /* ... nor nodes_verified: in those files
                                                                          * gamma_used was the nodes verified */
            rc = sqlite3_exec(t->db, "ALTER TABLE speculation_steps ADD COLUMN nodes_verified INTEGER NOT NULL "
                                     "DEFAULT 0; UPDATE speculation_steps SET nodes_verified = gamma_used",
                              NULL, NULL, NULL);
        if (rc == SQLITE_OK && user_version >= 1 && user_version <= 4) /* ... nor head_version */
            rc = sqlite3_exec(t->db, "ALTER TABLE speculation_steps ADD COLUMN head_version INTEGER NOT NULL DEFAULT 0",
                              NULL, NULL, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_exec(t->db, "PRAGMA user_version=5; COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        /* sessions an earlier run never ended (it crashed or was killed with
         * -9) would stay 'active' forever: nothing runs them any more. No
         * other live server writes this file: lock_db holds its lock. */
        stage = "recover the sessions of an earlier run in";
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(t->db, "UPDATE speculation_sessions SET status='failed', "
                                       "ended_at=COALESCE(ended_at, ?1) WHERE status='active'", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, now_ms());
            rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(t->db);
        }
        int n = rc == SQLITE_OK ? sqlite3_changes(t->db) : 0;
        sqlite3_finalize(st);
        if (n > 0)
            fprintf(stderr, "telemetry: %d session%s left 'active' by an earlier run (crash or kill -9) marked "
                            "'failed'\n", n, n == 1 ? "" : "s");
    }
    struct { sqlite3_stmt **st; const char *sql; } stmts[] = {
        {&t->st_session,
         "INSERT INTO speculation_sessions(session_id, request_id, created_at, prompt_token_count, current_gamma,"
         " target_id, draft_id, model_version, content_type, spec_mode) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)"
         " ON CONFLICT(session_id) DO UPDATE SET request_id=excluded.request_id, created_at=excluded.created_at,"
         " prompt_token_count=excluded.prompt_token_count, target_id=excluded.target_id,"
         " draft_id=excluded.draft_id, model_version=excluded.model_version, content_type=excluded.content_type,"
         " spec_mode=excluded.spec_mode"},
        {&t->st_step,
         "INSERT INTO speculation_steps(session_id, step_num, gamma_used, n_accepted, n_rejected, draft_latency_ms,"
         " target_latency_ms, effective_tpot_ms, recorded_at, method, shape, nodes_verified, head_version)"
         " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)"},
        {&t->st_end,
         "INSERT INTO speculation_sessions(session_id, request_id, created_at, prompt_token_count, model_version,"
         " ended_at, generated_tokens, current_gamma, rolling_accept_sum, rolling_accept_n, total_accepted,"
         " total_rejected, total_target_passes, kv_valid_len, last_ttft_ms, last_tpot_ms, status)"
         " VALUES(?1,'',?2,0,'',?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)"
         " ON CONFLICT(session_id) DO UPDATE SET ended_at=excluded.ended_at,"
         " generated_tokens=excluded.generated_tokens, current_gamma=excluded.current_gamma,"
         " rolling_accept_sum=excluded.rolling_accept_sum, rolling_accept_n=excluded.rolling_accept_n,"
         " total_accepted=excluded.total_accepted, total_rejected=excluded.total_rejected,"
         " total_target_passes=excluded.total_target_passes, kv_valid_len=excluded.kv_valid_len,"
         " last_ttft_ms=excluded.last_ttft_ms, last_tpot_ms=excluded.last_tpot_ms, status=excluded.status"},
        {&t->st_pol_del, "DELETE FROM gamma_policy"},
        {&t->st_pol_ins,
         "INSERT INTO gamma_policy(model_id, content_type, gamma_min, gamma_max, gamma_default, alpha_threshold,"
         " updated_at, version) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)"},
        {&t->st_ret_age,
         "DELETE FROM speculation_steps WHERE step_id IN (SELECT step_id FROM speculation_steps"
         " WHERE recorded_at < ?1 LIMIT 2000)"},
        {&t->st_ret_rows,
         "DELETE FROM speculation_steps WHERE step_id IN (SELECT step_id FROM speculation_steps"
         " WHERE step_id <= ?1 ORDER BY step_id LIMIT 2000)"},
        {&t->st_ret_sess,
         "DELETE FROM speculation_sessions WHERE rowid IN (SELECT rowid FROM speculation_sessions"
         " WHERE created_at < ?1 AND status != 'active' LIMIT 2000)"},
        {&t->st_max_step, "SELECT max(step_id) FROM speculation_steps"},
        {&t->st_begin, "BEGIN"},
        {&t->st_commit, "COMMIT"},
        {&t->st_rollback, "ROLLBACK"},
    };
    _Static_assert(TEL_RETENTION_BATCH == 2000, "retention statements say LIMIT 2000");
    for (size_t i = 0; rc == SQLITE_OK && i < sizeof stmts / sizeof stmts[0]; i++) {
        stage = "prepare statements for";
        rc = sqlite3_prepare_v3(t->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, stmts[i].st, NULL);
    }
    if (rc != SQLITE_OK) {
        const char *msg = t->db ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc);
        if (rc == SQLITE_CANTOPEN || rc == SQLITE_READONLY || rc == SQLITE_PERM || rc == SQLITE_IOERR ||
            rc == SQLITE_AUTH || !strcmp(stage, "open"))
            snprintf(err, errlen, "telemetry: cannot open %s: %s (does the directory exist and is it writable?)",
                     path, msg);
        else
            snprintf(err, errlen, "telemetry: cannot %s %s: %s", stage, path, msg);
        free_handle(t);
        return NULL;
    }

    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t->thread, NULL, writer_main, t) != 0) {
        snprintf(err, errlen, "telemetry: cannot start the writer thread");
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free_handle(t);
        return NULL;
    }
    return t;
}

void telemetry_close(telemetry *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    SPECD_CHECK(t->count == 0);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free_handle(t);
}
