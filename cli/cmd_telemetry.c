/* cmd_telemetry.c — `specd telemetry`: reads the SQLite speculation telemetry
 * back (read-only): a summary over a time window, or the most recent sessions.
 * The schema is the one engine/telemetry/telemetry.c writes. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cmd.h"
#include "cli/util.h"
#include "policy/config.h"

static void telemetry_usage(FILE *f) {
    fprintf(f,
        "usage: specd telemetry [--db PATH | -c config.yaml] summary [--since HOURS]\n"
        "       specd telemetry [--db PATH | -c config.yaml] sessions [--last N]\n"
        "  summary   acceptance rate, mean accepted length, gamma distribution and TPOT,\n"
        "            overall, by content type and by model pair, over the last HOURS (24)\n"
        "  sessions  the N (20) most recent sessions\n"
        "  --db PATH the telemetry database; default: the one `specd serve` writes from here, its\n"
        "            config's telemetry.path (config found as serve finds it: -c, $SPECD_CONFIG,\n"
        "            ./config.yaml, the system location), else specd-telemetry.db\n");
}

static void fmt_time(char *out, size_t n, int64_t ms) {
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&s, &tm);
    strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* Prepares sql or prints the error; returns NULL on error. */
static sqlite3_stmt *prep(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "specd telemetry: %s\n", sqlite3_errmsg(db));
        return NULL;
    }
    return st;
}

static const char *col_text(sqlite3_stmt *st, int i) {
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* The window's step rows with their session's content type and model pair;
 * %s is the nodes-verified column (files before schema 4 have none: there
 * gamma_used was the nodes verified). */
#define STEPS_CTE \
    "WITH s AS (SELECT st.gamma_used, %s AS nodes, st.n_accepted, st.n_rejected, st.effective_tpot_ms," \
    " st.method AS method," \
    " COALESCE(se.content_type, '(none)') AS ct," \
    " CASE WHEN se.target_id IS NULL OR se.target_id = '' THEN '(unknown)'" \
    "      ELSE se.target_id || ' + ' || CASE WHEN se.draft_id = '' THEN '(no draft)' ELSE se.draft_id END END AS pair" \
    " FROM speculation_steps st LEFT JOIN speculation_sessions se USING(session_id)" \
    " WHERE st.recorded_at >= ?1) "

/* The nodes-verified column of this file's steps table. */
static const char *nodes_col(sqlite3 *db) {
    sqlite3_stmt *st = prep(db, "SELECT count(*) FROM pragma_table_info('speculation_steps') "
                                "WHERE name = 'nodes_verified'");
    bool has = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    return has ? "st.nodes_verified" : "st.gamma_used";
}

/* One table of per-group figures; key is "'all'", "ct", "pair" or "method".
 * The gamma distribution is of the proposals' depth (a chain's gamma, a
 * tree's deepest level); accept% is over the nodes verified. */
static int summary_group(sqlite3 *db, int64_t since, const char *title, const char *key) {
    char sql[2048];
    const char *nodes = nodes_col(db);
    snprintf(sql, sizeof sql,
             STEPS_CTE "SELECT %s AS k, count(*), sum(gamma_used > 0), sum(n_accepted),"
             " sum(CASE WHEN gamma_used > 0 THEN nodes ELSE 0 END), sum(n_rejected),"
             " avg(CASE WHEN gamma_used > 0 THEN n_accepted END), avg(effective_tpot_ms)"
             " FROM s GROUP BY k ORDER BY count(*) DESC, k",
             nodes, key);
    sqlite3_stmt *st = prep(db, sql);
    if (!st) return -1;
    snprintf(sql, sizeof sql, STEPS_CTE "SELECT %s AS k, gamma_used, count(*) FROM s GROUP BY k, gamma_used", nodes,
             key);
    sqlite3_stmt *gd = prep(db, sql);
    if (!gd) { sqlite3_finalize(st); return -1; }
    sqlite3_bind_int64(st, 1, since);

    printf("\n%s\n  %-28s %9s %9s %8s %9s %9s  %s\n", title, "", "steps", "verify", "accept%", "mean_acc",
           "tpot_ms", "gamma distribution (gamma:share of steps)");
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        rows++;
        char k[256];
        snprintf(k, sizeof k, "%s", col_text(st, 0));
        int64_t steps = sqlite3_column_int64(st, 1), verify = sqlite3_column_int64(st, 2);
        int64_t acc = sqlite3_column_int64(st, 3), drafted = sqlite3_column_int64(st, 4);
        double mean_acc = sqlite3_column_double(st, 6), tpot = sqlite3_column_double(st, 7);
        char accs[16] = "-", means[16] = "-";
        if (drafted > 0) snprintf(accs, sizeof accs, "%.1f", 100.0 * (double)acc / (double)drafted);
        if (verify > 0) snprintf(means, sizeof means, "%.2f", mean_acc);
        printf("  %-28.28s %9lld %9lld %8s %9s %9.2f  ", k, (long long)steps, (long long)verify, accs, means, tpot);
        sqlite3_bind_int64(gd, 1, since);
        while (sqlite3_step(gd) == SQLITE_ROW) {
            if (strcmp(col_text(gd, 0), k)) continue;
            printf("%d:%.0f%% ", sqlite3_column_int(gd, 1), 100.0 * (double)sqlite3_column_int64(gd, 2) / (double)steps);
        }
        sqlite3_reset(gd);
        printf("\n");
    }
    if (!rows) printf("  (no step rows in the window)\n");
    sqlite3_finalize(st);
    sqlite3_finalize(gd);
    return 0;
}

static int cmd_summary(sqlite3 *db, const char *path, double hours) {
    int64_t now = (int64_t)time(NULL) * 1000;
    int64_t since = now - (int64_t)(hours * 3600000.0);
    char from[32];
    fmt_time(from, sizeof from, since);
    sqlite3_stmt *st = prep(db,
        "SELECT count(*), sum(status = 'completed'), sum(status = 'failed'), sum(status = 'cancelled'),"
        " sum(status = 'active'), sum(generated_tokens), avg(last_ttft_ms), avg(last_tpot_ms),"
        " sum(total_accepted), sum(total_rejected), sum(total_target_passes)"
        " FROM speculation_sessions WHERE created_at >= ?1");
    if (!st) return 1;
    sqlite3_bind_int64(st, 1, since);
    printf("%s: the last %g h (since %s)\n", path, hours, from);
    if (sqlite3_step(st) == SQLITE_ROW) {
        printf("sessions: %lld (completed %lld, failed %lld, cancelled %lld, active %lld); %lld tokens generated\n",
               (long long)sqlite3_column_int64(st, 0), (long long)sqlite3_column_int64(st, 1),
               (long long)sqlite3_column_int64(st, 2), (long long)sqlite3_column_int64(st, 3),
               (long long)sqlite3_column_int64(st, 4), (long long)sqlite3_column_int64(st, 5));
        if (sqlite3_column_type(st, 6) != SQLITE_NULL)
            printf("session means: ttft %.2f ms, tpot %.2f ms; session totals: %lld accepted, %lld rejected, "
                   "%lld target passes\n",
                   sqlite3_column_double(st, 6), sqlite3_column_double(st, 7), (long long)sqlite3_column_int64(st, 8),
                   (long long)sqlite3_column_int64(st, 9), (long long)sqlite3_column_int64(st, 10));
    }
    sqlite3_finalize(st);
    printf("step rows: accept%% = accepted / drafted over verify steps; mean_acc = accepted drafts per verify "
           "step;\n           tpot_ms = mean model time per output token (the step's share of its batched draft +\n"
           "           target calls: by rows, so it is cost, not latency, at batch > 1)\n");
    if (summary_group(db, since, "overall", "'all'") < 0) return 1;
    if (summary_group(db, since, "by content type", "ct") < 0) return 1;
    if (summary_group(db, since, "by model pair (target + draft)", "pair") < 0) return 1;
    if (summary_group(db, since, "by proposer (plain: steps without a proposal)", "method") < 0) return 1;
    return 0;
}

static int cmd_sessions(sqlite3 *db, long last) {
    sqlite3_stmt *st = prep(db,
        "SELECT created_at, session_id, COALESCE(content_type, '-'), spec_mode, prompt_token_count,"
        " generated_tokens, current_gamma, total_accepted, total_rejected, total_target_passes, last_ttft_ms,"
        " last_tpot_ms, status, target_id, draft_id"
        " FROM speculation_sessions ORDER BY created_at DESC, rowid DESC LIMIT ?1");
    if (!st) return 1;
    sqlite3_bind_int64(st, 1, last);
    printf("%-19s  %-8s  %-10s %-5s %6s %6s %5s %7s %7s %8s %8s %-9s  %s\n", "created", "session", "type", "mode",
           "prompt", "gen", "gamma", "accept%", "passes", "ttft_ms", "tpot_ms", "status", "target + draft");
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        rows++;
        char when[32], accs[16] = "-", ttft[16] = "-", tpot[16] = "-";
        fmt_time(when, sizeof when, sqlite3_column_int64(st, 0));
        int64_t acc = sqlite3_column_int64(st, 7), rej = sqlite3_column_int64(st, 8);
        if (acc + rej > 0) snprintf(accs, sizeof accs, "%.1f", 100.0 * (double)acc / (double)(acc + rej));
        if (sqlite3_column_type(st, 10) != SQLITE_NULL) snprintf(ttft, sizeof ttft, "%.1f", sqlite3_column_double(st, 10));
        if (sqlite3_column_type(st, 11) != SQLITE_NULL) snprintf(tpot, sizeof tpot, "%.2f", sqlite3_column_double(st, 11));
        const char *draft = col_text(st, 14);
        printf("%-19s  %-8.8s  %-10.10s %-5.5s %6d %6d %5d %7s %7lld %8s %8s %-9s  %s + %s\n", when, col_text(st, 1),
               col_text(st, 2), col_text(st, 3), sqlite3_column_int(st, 4), sqlite3_column_int(st, 5),
               sqlite3_column_int(st, 6), accs, (long long)sqlite3_column_int64(st, 9), ttft, tpot, col_text(st, 12),
               col_text(st, 13), draft[0] ? draft : "(no draft)");
    }
    if (!rows) printf("(no sessions)\n");
    sqlite3_finalize(st);
    return 0;
}

int cmd_telemetry(int argc, char **argv) {
    const char *path = NULL, *sub = NULL, *config_flag = NULL;
    char cfg_db[1024];
    double hours = 24;
    long last = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { telemetry_usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--db")) path = arg_str(argc, argv, &i);
        else if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) config_flag = arg_str(argc, argv, &i);
        else if (!strcmp(argv[i], "--since")) hours = arg_double(argc, argv, &i, 1e-6, 1e7);
        else if (!strcmp(argv[i], "--last")) last = arg_long(argc, argv, &i, 1, 1000000);
        else if (!sub && (!strcmp(argv[i], "summary") || !strcmp(argv[i], "sessions"))) sub = argv[i];
        else
            return cli_unknown_option("telemetry", argv[i], telemetry_usage);
    }
    if (!sub) { telemetry_usage(stderr); return 2; }
    if (!path) {
        /* what serve writes: the telemetry.path of the config it would read */
        const char *source;
        const char *cpath = pol_config_find(config_flag, &source);
        char err[512];
        pol_config *pc = cpath ? pol_config_load(cpath, NULL, err, sizeof(err)) : pol_config_default();
        if (!pc) {
            fprintf(stderr, "specd telemetry: %s\n", err);
            return 2;
        }
        snprintf(cfg_db, sizeof(cfg_db), "%s", pc->telemetry.path);
        pol_config_free(pc);
        path = cfg_db;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "specd telemetry: no telemetry database at %s (give --db PATH, or -c the server's config)\n",
                path);
        return 1;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "specd telemetry: cannot open %s: %s\n", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return 1;
    }
    sqlite3_busy_timeout(db, 5000);
    int rc = !strcmp(sub, "summary") ? cmd_summary(db, path, hours) : cmd_sessions(db, last);
    sqlite3_close(db);
    return rc;
}
