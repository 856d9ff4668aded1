/* test_telemetry.c — engine/telemetry against a real SQLite file: exact
 * row counts and sums after a known workload, drops under a tiny queue and a
 * slowed writer (producers never block), crash safety under SIGKILL, retention,
 * the policy mirror, and clear open errors.
 * Usage: test_telemetry MODE [DIR]   (MODE: workload drops crash retention policy
 * errors helpers; `write PATH` writes the shared synthetic workload for
 * test_readback.py). */
#include "engine/telemetry/telemetry.h"
#include "tests/testutil.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[512];

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void db_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_dir, name);
    char side[600];
    unlink(out);
    snprintf(side, sizeof side, "%s-wal", out), unlink(side);
    snprintf(side, sizeof side, "%s-shm", out), unlink(side);
}

/* One integer from a query (-1 on error). */
static int64_t q_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        else fprintf(stderr, "query %s: %s\n", sql, sqlite3_errmsg(db));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

static void q_text(const char *path, const char *sql, char *out, size_t n) {
    sqlite3 *db = NULL;
    out[0] = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
            sqlite3_column_text(st, 0))
            snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
}

/* The synthetic workload (test_readback.py computes the same numbers):
 * session s, step k: plain when k % 10 == 9, else γ = 1 + (s + k) % 8 and
 * accepted = (7s + 3k) % (γ + 1). */
enum { W_SESSIONS = 24, W_STEPS = 250 };
static void w_step(int s, int k, int *gamma, int *acc) {
    *gamma = k % 10 == 9 ? 0 : 1 + (s + k) % 8;
    *acc = *gamma ? (7 * s + 3 * k) % (*gamma + 1) : 0;
}

static void session_id(char out[TEL_UUID_LEN], int s) { tel_uuid_format(out, 0x1234000000000000ull + (uint64_t)s, 0xabcdull * (uint64_t)(s + 1)); }

/* Produces the workload; returns the expected (accepted, rejected, steps) sums. */
static void run_workload(telemetry *t, int64_t *acc_sum, int64_t *rej_sum, int64_t *n_steps, int64_t *n_gamma) {
    static const char *types[3] = {"chat", "code", "structured"};
    *acc_sum = *rej_sum = *n_steps = *n_gamma = 0;
    for (int s = 0; s < W_SESSIONS; s++) {
        tel_session ss = {0};
        session_id(ss.session_id, s);
        tel_uuid_format(ss.request_id, 0x77ull + (uint64_t)s, 0x99ull);
        ss.prompt_tokens = 10 + s;
        snprintf(ss.content_type, sizeof ss.content_type, "%s", types[s % 3]);
        snprintf(ss.spec_mode, sizeof ss.spec_mode, "auto");
        snprintf(ss.target_id, sizeof ss.target_id, "llama-%s", s % 2 ? "aaaa" : "bbbb");
        snprintf(ss.draft_id, sizeof ss.draft_id, "llama-dddd");
        ss.gamma = 4;
        CHECK(telemetry_session_start(t, &ss));
        int64_t sa = 0, sr = 0, gen = 0;
        for (int k = 0; k < W_STEPS; k++) {
            int g, a;
            w_step(s, k, &g, &a);
            spec_step_info info = {.n_new = a + 1, .gamma = g, .accepted = a, .bonus = g && a == g,
                                   .draft_ms = 0.5 * g, .target_ms = 2.0, .tree = g > 0 && k % 4 == 1};
            tel_step st;
            tel_step_from_info(&st, ss.session_id, k, &info);
            CHECK(telemetry_step(t, &st));
            sa += st.n_accepted, sr += st.n_rejected, gen += info.n_new;
            *n_gamma += g;
        }
        tel_session_end e = {0};
        snprintf(e.session_id, sizeof e.session_id, "%s", ss.session_id);
        e.generated_tokens = (int)gen;
        e.total_accepted = sa, e.total_rejected = sr, e.total_target_passes = W_STEPS;
        e.rolling_accept_sum = 15, e.rolling_accept_n = 20, e.current_gamma = 5, e.kv_valid_len = 10 + s + (int)gen;
        e.ttft_ms = 3.5, e.tpot_ms = 1.25;
        e.status = s % 5 == 4 ? TEL_STATUS_CANCELLED : TEL_STATUS_COMPLETED;
        CHECK(telemetry_session_end(t, &e));
        *acc_sum += sa, *rej_sum += sr, *n_steps += W_STEPS;
    }
}

static int test_write(const char *path) {
    telemetry_config c = telemetry_config_default();
    c.path = path;
    char err[512];
    telemetry *t = telemetry_open(&c, err, sizeof err);
    if (!t) { fprintf(stderr, "%s\n", err); return 1; }
    int64_t a, r, n, g;
    run_workload(t, &a, &r, &n, &g);
    telemetry_close(t);
    printf("{\"accepted\": %lld, \"rejected\": %lld, \"steps\": %lld, \"drafted\": %lld}\n", (long long)a,
           (long long)r, (long long)n, (long long)g);
    return 0;
}

static void test_workload(void) {
    char path[600], sql[256], err[512];
    db_path(path, sizeof path, "workload.db");
    telemetry_config c = telemetry_config_default();
    c.path = path;
    c.batch_max = 100;
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    int64_t a, r, n, g;
    run_workload(t, &a, &r, &n, &g);
    telemetry_close(t);
    /* counters were read before close in real use; reopen to check the file */
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps") == n);
    CHECK(q_int(path, "SELECT sum(n_accepted) FROM speculation_steps") == a);
    CHECK(q_int(path, "SELECT sum(n_rejected) FROM speculation_steps") == r);
    CHECK(q_int(path, "SELECT sum(gamma_used) FROM speculation_steps") == g);
    CHECK(q_int(path, "SELECT sum(n_accepted + n_rejected = gamma_used) FROM speculation_steps") == n);
    CHECK(q_int(path, "SELECT sum(nodes_verified = gamma_used) FROM speculation_steps") == n); /* chains */
    CHECK(q_int(path, "SELECT count(*) FROM speculation_sessions") == W_SESSIONS);
    CHECK(q_int(path, "SELECT sum(total_accepted) FROM speculation_sessions") == a);
    CHECK(q_int(path, "SELECT sum(total_rejected) FROM speculation_sessions") == r);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_sessions WHERE status = 'cancelled'") == W_SESSIONS / 5);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_sessions WHERE status = 'active'") == 0);
    CHECK(q_int(path, "SELECT count(DISTINCT content_type) FROM speculation_sessions") == 3);
    /* tree steps are marked: shape 'tree' exactly where the step was one */
    {
        int64_t want = 0;
        for (int s = 0; s < W_SESSIONS; s++)
            for (int k = 0; k < W_STEPS; k++) {
                int gg, aa;
                w_step(s, k, &gg, &aa);
                want += gg > 0 && k % 4 == 1;
            }
        CHECK(q_int(path, "SELECT count(*) FROM speculation_steps WHERE shape = 'tree'") == want && want > 0);
        CHECK(q_int(path, "SELECT count(*) FROM speculation_steps WHERE shape NOT IN ('tree', 'chain')") == 0);
    }
    /* effective TPOT = (draft + target) / tokens emitted */
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps WHERE abs(effective_tpot_ms -"
                      " (draft_latency_ms + target_latency_ms) / (n_accepted + 1)) > 1e-9") == 0);
    char s0[TEL_UUID_LEN], txt[128];
    session_id(s0, 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM speculation_steps WHERE session_id = '%s'", s0);
    CHECK(q_int(path, sql) == W_STEPS);
    q_text(path, "PRAGMA journal_mode", txt, sizeof txt);
    CHECKF(!strcmp(txt, "wal"), "journal_mode %s", txt);
    q_text(path, "PRAGMA integrity_check", txt, sizeof txt);
    CHECK(!strcmp(txt, "ok"));

    /* counters, and deterministic sampling at 0.5: the same steps both times */
    int64_t kept[2] = {0, 0};
    char csum[2][64];
    for (int run = 0; run < 2; run++) {
        db_path(path, sizeof path, run ? "sampled1.db" : "sampled0.db");
        c.path = path;
        c.sample_rate = 0.5;
        t = telemetry_open(&c, err, sizeof err);
        CHECKF(t, "%s", err);
        if (!t) return;
        run_workload(t, &a, &r, &n, &g);
        tel_counters tc;
        for (int w = 0; w < 200; w++) { /* wait for the writer to drain */
            telemetry_counters(t, &tc);
            if (tc.queue_depth == 0 && tc.written == tc.queued) break;
            usleep(10000);
        }
        telemetry_counters(t, &tc);
        telemetry_close(t);
        CHECK(tc.dropped == 0 && tc.failed == 0);
        CHECK(tc.queued == tc.written);
        CHECK(tc.sampled_out + (tc.queued - 2 * W_SESSIONS) == (uint64_t)n);
        CHECK(tc.batches > 0 && tc.last_error[0] == 0);
        kept[run] = q_int(path, "SELECT count(*) FROM speculation_steps");
        CHECK(kept[run] == (int64_t)(tc.queued - 2 * W_SESSIONS));
        snprintf(csum[run], sizeof csum[run], "%lld", (long long)q_int(path,
                 "SELECT sum(step_num * 1000 + length(session_id) + unicode(substr(session_id, 8, 1)))"
                 " FROM speculation_steps"));
    }
    fprintf(stderr, "sample_rate 0.5 kept %lld of %lld steps\n", (long long)kept[0], (long long)n);
    CHECK(kept[0] == kept[1]);
    CHECK(!strcmp(csum[0], csum[1]));
    CHECK(kept[0] > n * 4 / 10 && kept[0] < n * 6 / 10);
}

static void test_drops(void) {
    char path[600], err[512];
    db_path(path, sizeof path, "drops.db");
    telemetry_config c = telemetry_config_default();
    c.path = path;
    c.queue_size = 32;
    c.batch_max = 8;
    c.writer_delay_us = 20000; /* 20 ms per batch of 8: ~400 rows/s */
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    tel_session ss = {0};
    session_id(ss.session_id, 1);
    snprintf(ss.target_id, sizeof ss.target_id, "t");
    CHECK(telemetry_session_start(t, &ss));
    int ok = 0, refused = 0, N = 20000;
    double worst = 0, t0 = mono_ms();
    for (int k = 0; k < N; k++) {
        tel_step st = {0};
        snprintf(st.session_id, sizeof st.session_id, "%s", ss.session_id);
        st.step_num = k, st.gamma_used = 4, st.n_accepted = 2, st.n_rejected = 2;
        double a = mono_ms();
        bool q = telemetry_step(t, &st);
        double d = mono_ms() - a;
        if (d > worst) worst = d;
        q ? ok++ : refused++;
        if (k % 1000 == 999) usleep(5000); /* spread over ~100 ms so the writer drains some */
    }
    double total = mono_ms() - t0;
    /* sessions keep a reserve: even with steps refused, an end row still fits */
    tel_session_end e = {0};
    snprintf(e.session_id, sizeof e.session_id, "%s", ss.session_id);
    e.status = TEL_STATUS_COMPLETED;
    CHECK(telemetry_session_end(t, &e));
    tel_counters tc;
    telemetry_counters(t, &tc);
    fprintf(stderr, "drops: %d steps queued, %d dropped; producer worst call %.3f ms, %d calls in %.1f ms\n", ok,
            refused, worst, N, total);
    CHECK(refused > 0);
    CHECK(tc.dropped == (uint64_t)refused);
    CHECK(tc.queued == (uint64_t)ok + 2);
    CHECK(worst < 50.0); /* sanity only: a blocked producer would wait ~20 ms per batch many times over */
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps") == ok);
    CHECK(q_int(path, "SELECT status = 'completed' FROM speculation_sessions") == 1);
}

/* Child: writes steps as fast as it can until killed. */
static void crash_child(const char *path) {
    telemetry_config c = telemetry_config_default();
    c.path = path;
    c.batch_max = 256;
    char err[512];
    telemetry *t = telemetry_open(&c, err, sizeof err);
    if (!t) { fprintf(stderr, "child: %s\n", err); _exit(3); }
    tel_session ss = {0};
    session_id(ss.session_id, (int)getpid());
    telemetry_session_start(t, &ss);
    for (int k = 0;; k++) {
        tel_step st = {0};
        snprintf(st.session_id, sizeof st.session_id, "%s", ss.session_id);
        st.step_num = k, st.gamma_used = 3, st.n_accepted = k % 4, st.n_rejected = 3 - k % 4;
        if (!telemetry_step(t, &st)) usleep(100);
        if (k % 1000 == 0) {
            tel_policy_rule r = {.gamma_min = 1, .gamma_max = 8, .gamma_default = 4, .alpha_threshold = 0.6};
            snprintf(r.model_id, sizeof r.model_id, "m");
            telemetry_policy(t, &r, 1, k);
        }
    }
}

static void test_crash(void) {
    char path[600], err[512], txt[256];
    db_path(path, sizeof path, "crash.db");
    int64_t prev = 0;
    for (int round = 0; round < 3; round++) {
        pid_t pid = fork();
        if (pid == 0) crash_child(path);
        CHECK(pid > 0);
        /* wait until the child has committed rows beyond what was there, then kill it mid-write */
        int64_t n = 0;
        for (int w = 0; w < 500 && n <= prev + 20000; w++) {
            usleep(10000);
            n = q_int(path, "SELECT count(*) FROM speculation_steps");
        }
        usleep(30000);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        q_text(path, "PRAGMA integrity_check", txt, sizeof txt);
        CHECKF(!strcmp(txt, "ok"), "round %d: integrity_check: %s", round, txt);
        int64_t after = q_int(path, "SELECT count(*) FROM speculation_steps");
        fprintf(stderr, "crash round %d: %lld step rows survive the kill\n", round, (long long)after);
        CHECK(after > prev);
        CHECK(q_int(path, "SELECT count(*) FROM gamma_policy") == 1);
        prev = after;
        /* telemetry_open works on it again and appends */
        telemetry_config c = telemetry_config_default();
        c.path = path;
        telemetry *t = telemetry_open(&c, err, sizeof err);
        CHECKF(t, "%s", err);
        if (!t) return;
        tel_step st = {0};
        snprintf(st.session_id, sizeof st.session_id, "after-crash");
        CHECK(telemetry_step(t, &st));
        telemetry_close(t);
        CHECK(q_int(path, "SELECT count(*) FROM speculation_steps") == prev + 1);
        prev++;
    }
    q_text(path, "PRAGMA integrity_check", txt, sizeof txt);
    CHECK(!strcmp(txt, "ok"));
}

static void test_retention(void) {
    char path[600], err[512];
    db_path(path, sizeof path, "retention.db");
    telemetry_config c = telemetry_config_default();
    c.path = path;
    c.retention_days = 1;
    int64_t now = (int64_t)time(NULL) * 1000;
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    for (int s = 0; s < 2; s++) { /* an old finished session and a fresh one */
        tel_session ss = {0};
        session_id(ss.session_id, s);
        ss.created_ms = s ? now : now - 10 * 86400000LL;
        CHECK(telemetry_session_start(t, &ss));
        tel_session_end e = {0};
        snprintf(e.session_id, sizeof e.session_id, "%s", ss.session_id);
        e.status = TEL_STATUS_COMPLETED;
        CHECK(telemetry_session_end(t, &e));
        for (int k = 0; k < (s ? 300 : 5000); k++) {
            tel_step st = {0};
            snprintf(st.session_id, sizeof st.session_id, "%s", ss.session_id);
            st.step_num = k;
            st.recorded_ms = s ? now : now - 10 * 86400000LL + k;
            CHECK(telemetry_step(t, &st));
        }
    }
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps") == 300);
    CHECK(q_int(path, "SELECT min(recorded_at) FROM speculation_steps") >= now);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_sessions") == 1);

    /* row limit: keeps the newest */
    db_path(path, sizeof path, "retention_rows.db");
    c = telemetry_config_default();
    c.path = path;
    c.retention_rows = 1000;
    t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    for (int k = 0; k < 7500; k++) {
        tel_step st = {0};
        snprintf(st.session_id, sizeof st.session_id, "s");
        st.step_num = k;
        while (!telemetry_step(t, &st)) usleep(1000);
    }
    usleep(1500 * 1000); /* let a background pass run while open */
    tel_counters tc;
    telemetry_counters(t, &tc);
    fprintf(stderr, "retention: %llu rows deleted in the background\n", (unsigned long long)tc.retention_deleted);
    CHECK(tc.retention_deleted > 0);
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps") == 1000);
    CHECK(q_int(path, "SELECT min(step_num) FROM speculation_steps") == 6500);
}

static void test_policy(void) {
    char path[600], err[512], txt[128];
    db_path(path, sizeof path, "policy.db");
    telemetry_config c = telemetry_config_default();
    c.path = path;
    c.queue_size = 64;
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    tel_policy_rule r[3] = {
        {"llama-a", "code", 2, 8, 6, 0.7}, {"llama-a", "chat", 1, 6, 3, 0.6}, {"llama-a", "", 2, 8, 4, 0.65}};
    CHECK(telemetry_policy(t, r, 3, 1));
    tel_policy_rule big[64];
    memset(big, 0, sizeof big);
    CHECK(!telemetry_policy(t, big, 64, 9)); /* can never fit: refused whole, counted */
    tel_counters tc;
    telemetry_counters(t, &tc);
    CHECK(tc.dropped == 65);
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM gamma_policy") == 3);
    CHECK(q_int(path, "SELECT count(*) FROM gamma_policy WHERE content_type IS NULL AND gamma_default = 4") == 1);
    CHECK(q_int(path, "SELECT max(version) FROM gamma_policy") == 1);

    t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    tel_policy_rule r2[2] = {{"llama-b", "structured", 3, 7, 5, 0.5}, {"llama-b", "", 2, 4, 2, 0.8}};
    CHECK(telemetry_policy(t, r2, 2, 2));
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM gamma_policy") == 2);
    CHECK(q_int(path, "SELECT count(*) FROM gamma_policy WHERE version = 2 AND model_id = 'llama-b'") == 2);
    q_text(path, "SELECT content_type FROM gamma_policy WHERE gamma_max = 7", txt, sizeof txt);
    CHECK(!strcmp(txt, "structured"));

    t = telemetry_open(&c, err, sizeof err);
    CHECK(t && telemetry_policy(t, NULL, 0, 3));
    telemetry_close(t);
    CHECK(q_int(path, "SELECT count(*) FROM gamma_policy") == 0);
}

static void test_errors(void) {
    char err[512] = "", path[600];
    telemetry_config c = telemetry_config_default();
    c.path = "/nonexistent-specd-dir/sub/t.db";
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECK(t == NULL);
    fprintf(stderr, "missing dir: %s\n", err);
    CHECK(strstr(err, "telemetry: cannot open /nonexistent-specd-dir/sub/t.db: "));
    CHECK(strstr(err, "does the directory exist and is it writable?"));

    db_path(path, sizeof path, "garbage.db");
    FILE *f = fopen(path, "wb");
    CHECK(f);
    if (f) {
        for (int i = 0; i < 4096; i++) fputc("not a database\n"[i % 15], f);
        fclose(f);
    }
    c.path = path;
    t = telemetry_open(&c, err, sizeof err);
    CHECK(t == NULL);
    fprintf(stderr, "garbage file: %s\n", err);
    CHECK(strstr(err, path) && strstr(err, "not a database"));

    c.path = g_dir; /* a directory */
    t = telemetry_open(&c, err, sizeof err);
    CHECK(t == NULL);
    fprintf(stderr, "directory: %s\n", err);
    CHECK(strstr(err, "cannot open"));

    /* one live handle per file (an advisory lock on PATH.lock): a second
     * open is refused before it touches the file, and works once closed */
    db_path(path, sizeof path, "locked.db");
    c = telemetry_config_default();
    c.path = path;
    telemetry *t1 = telemetry_open(&c, err, sizeof err);
    CHECKF(t1, "%s", err);
    err[0] = 0;
    t = telemetry_open(&c, err, sizeof err);
    CHECK(t == NULL);
    fprintf(stderr, "second open: %s\n", err);
    char pid[32];
    snprintf(pid, sizeof pid, "(pid %d)", (int)getpid());
    CHECKF(strstr(err, path) && strstr(err, "in use by another running specd") && strstr(err, pid), "%s", err);
    telemetry_close(t);
    telemetry_close(t1);
    t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "after close: %s", err);
    telemetry_close(t);

    c = telemetry_config_default();
    c.sample_rate = 1.5;
    CHECK(telemetry_open(&c, err, sizeof err) == NULL && strstr(err, "sample_rate"));

    /* NULL handle = telemetry off: producers succeed and do nothing */
    tel_step st = {0};
    tel_counters tc;
    CHECK(telemetry_step(NULL, &st));
    telemetry_counters(NULL, &tc);
    CHECK(tc.queued == 0);
    telemetry_close(NULL);
}

static void test_helpers(void) {
    char u[TEL_UUID_LEN];
    tel_uuid_format(u, 0xffffffffffffffffull, 0xffffffffffffffffull);
    CHECKF(!strcmp(u, "ffffffff-ffff-4fff-bfff-ffffffffffff"), "%s", u);
    tel_uuid_format(u, 0, 0);
    CHECKF(!strcmp(u, "00000000-0000-4000-8000-000000000000"), "%s", u);
    spec_step_info plain = {.n_new = 1, .gamma = 0, .accepted = 0, .draft_ms = 0, .target_ms = 3};
    tel_step s;
    tel_step_from_info(&s, "abc", 7, &plain);
    CHECK(s.n_rejected == 0 && s.gamma_used == 0 && s.effective_tpot_ms == 3.0 && !strcmp(s.session_id, "abc"));
    spec_step_info v = {.n_new = 3, .gamma = 5, .accepted = 2, .draft_ms = 5, .target_ms = 4};
    tel_step_from_info(&s, "abc", 8, &v);
    CHECK(s.n_rejected == 3 && s.n_accepted == 2 && s.step_num == 8 && s.effective_tpot_ms == 3.0);
    CHECK(!strcmp(tel_status_name(TEL_STATUS_CANCELLED), "cancelled"));
}

/* A version-2 file (steps without the shape and nodes_verified columns) is
 * migrated in place: its rows read as chains with their gamma_used as the
 * nodes verified, new tree steps as trees with depth and nodes apart. */
static void test_migrate(void) {
    char path[600], err[512];
    db_path(path, sizeof path, "v2.db");
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db,
                       "CREATE TABLE speculation_steps (step_id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
                       " step_num INTEGER NOT NULL, gamma_used INTEGER NOT NULL, n_accepted INTEGER NOT NULL,"
                       " n_rejected INTEGER NOT NULL, draft_latency_ms REAL NOT NULL, target_latency_ms REAL NOT NULL,"
                       " effective_tpot_ms REAL NOT NULL, recorded_at INTEGER NOT NULL,"
                       " method TEXT NOT NULL DEFAULT 'plain');"
                       "INSERT INTO speculation_steps VALUES(1, 'old', 0, 4, 2, 2, 1.0, 2.0, 1.0, 1, 'draft');"
                       "PRAGMA user_version=2;",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    telemetry_config c = telemetry_config_default();
    c.path = path;
    telemetry *t = telemetry_open(&c, err, sizeof err);
    CHECKF(t, "%s", err);
    if (!t) return;
    spec_step_info info = {.n_new = 3, .gamma = 8, .depth = 3, .nodes = 8, .accepted = 2, .tree = true,
                           .draft_ms = 1, .target_ms = 2};
    tel_step st;
    tel_step_from_info(&st, "new", 1, &info);
    st.head_version = 3;
    CHECK(telemetry_step(t, &st));
    telemetry_close(t);
    CHECK(q_int(path, "SELECT head_version FROM speculation_steps WHERE session_id = 'old'") == 0);
    CHECK(q_int(path, "SELECT head_version FROM speculation_steps WHERE session_id = 'new'") == 3);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps WHERE session_id = 'old' AND shape = 'chain'") == 1);
    CHECK(q_int(path, "SELECT count(*) FROM speculation_steps WHERE session_id = 'new' AND shape = 'tree'") == 1);
    CHECK(q_int(path, "SELECT nodes_verified FROM speculation_steps WHERE session_id = 'old'") == 4);
    CHECK(q_int(path, "SELECT gamma_used FROM speculation_steps WHERE session_id = 'new'") == 3);
    CHECK(q_int(path, "SELECT nodes_verified FROM speculation_steps WHERE session_id = 'new'") == 8);
    CHECK(q_int(path, "SELECT n_rejected FROM speculation_steps WHERE session_id = 'new'") == 6);
    CHECK(q_int(path, "PRAGMA user_version") == 5);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_telemetry MODE [DIR] | write PATH\n"); return 2; }
    if (!strcmp(argv[1], "write")) return argc > 2 ? test_write(argv[2]) : 2;
    snprintf(g_dir, sizeof g_dir, "%s", argc > 2 ? argv[2] : "/tmp");
    char tmpl[sizeof g_dir + 32];
    snprintf(tmpl, sizeof tmpl, "%s/specd-tel-XXXXXX", g_dir);
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    if (strlen(tmpl) >= sizeof g_dir) { fprintf(stderr, "directory name too long\n"); return 2; }
    memcpy(g_dir, tmpl, strlen(tmpl) + 1);
    const char *m = argv[1];
    if (!strcmp(m, "workload")) test_workload();
    else if (!strcmp(m, "drops")) test_drops();
    else if (!strcmp(m, "crash")) test_crash();
    else if (!strcmp(m, "retention")) test_retention();
    else if (!strcmp(m, "policy")) test_policy();
    else if (!strcmp(m, "errors")) test_errors();
    else if (!strcmp(m, "helpers")) test_helpers();
    else if (!strcmp(m, "migrate")) test_migrate();
    else { fprintf(stderr, "unknown mode %s\n", m); return 2; }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (!t_failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_DONE();
}
