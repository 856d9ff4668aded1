/* bench_telemetry.c — the figures for the note: database size after 1,000,000
 * step rows (2,000 sessions × 500 steps, realistic UUIDs and latencies) and the
 * writer's sustained rows/s; also the producer's mean and worst call time.
 * Usage: bench_telemetry [DIR] [ROWS]. Prints; asserts nothing about speed. */
#include "engine/telemetry/telemetry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    long rows = argc > 2 ? atol(argv[2]) : 1000000;
    char path[600], side[700];
    snprintf(path, sizeof path, "%s/bench-telemetry.db", dir);
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path), unlink(side);
    snprintf(side, sizeof side, "%s-shm", path), unlink(side);

    telemetry_config c = telemetry_config_default();
    c.path = path;
    char err[512];
    telemetry *t = telemetry_open(&c, err, sizeof err);
    if (!t) { fprintf(stderr, "%s\n", err); return 1; }
    const int per_session = 500;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    double t0 = mono_ms(), worst = 0, in_calls = 0;
    long spins = 0, produced = 0;
    char sid[TEL_UUID_LEN] = "";
    for (long i = 0; i < rows; i++) {
        int k = (int)(i % per_session);
        if (k == 0) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tel_session s = {0};
            tel_uuid_format(s.session_id, rng, rng ^ 0xabcdef);
            memcpy(sid, s.session_id, sizeof sid);
            tel_uuid_format(s.request_id, rng >> 7, rng << 3);
            snprintf(s.content_type, sizeof s.content_type, "%s", (i / per_session) % 2 ? "chat" : "code");
            snprintf(s.target_id, sizeof s.target_id, "llama-0123456789abcdef");
            snprintf(s.draft_id, sizeof s.draft_id, "llama-fedcba9876543210");
            s.prompt_tokens = 100;
            s.gamma = 4;
            while (!telemetry_session_start(t, &s)) usleep(50), spins++;
        }
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int g = 1 + (int)((rng >> 33) % 8), a = (int)((rng >> 45) % (uint64_t)(g + 1));
        spec_step_info info = {.n_new = a + 1, .gamma = g, .accepted = a, .draft_ms = 0.31 * g, .target_ms = 4.7};
        tel_step st;
        tel_step_from_info(&st, sid, k, &info);
        for (;;) {
            double a0 = mono_ms();
            bool ok = telemetry_step(t, &st);
            double d = mono_ms() - a0;
            in_calls += d;
            if (d > worst) worst = d;
            if (ok) break;
            usleep(50), spins++;
        }
        produced++;
        if (k == per_session - 1) {
            tel_session_end e = {0};
            memcpy(e.session_id, sid, sizeof sid);
            e.generated_tokens = 1000;
            e.status = TEL_STATUS_COMPLETED;
            while (!telemetry_session_end(t, &e)) usleep(50), spins++;
        }
    }
    tel_counters tc;
    telemetry_counters(t, &tc);
    telemetry_close(t);
    double ms = mono_ms() - t0;
    struct stat sb;
    if (stat(path, &sb) != 0) { perror(path); return 1; }
    printf("telemetry bench: %ld step rows (+%ld sessions) in %.2f s = %.0f rows/s written; "
           "%llu batches; producer mean %.2f us, worst %.3f ms per call; %ld full-queue retries\n",
           produced, rows / per_session, ms / 1e3, produced / (ms / 1e3), (unsigned long long)tc.batches,
           1e3 * in_calls / (double)produced, worst, spins);
    printf("telemetry bench: database size after %ld step rows: %.1f MB (%.0f bytes/row)\n", produced,
           sb.st_size / 1e6, (double)sb.st_size / (double)produced);
    unlink(path);
    return 0;
}
