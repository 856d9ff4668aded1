/* test_store.c — pol_store under concurrency: reader threads acquire, check and
 * release snapshots while one thread reloads 100 times (every fourth file is
 * invalid). Readers must never see a half-built snapshot (each file's values
 * are tied together), versions seen by a reader never go back, an invalid
 * reload leaves the version unchanged, and every old snapshot is freed (run
 * under ASan/LSan and TSan builds of this same file). */
#include "policy/config.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READERS 4
#define RELOADS 100

static pol_store store;
static atomic_int stop;
static atomic_int bad_reads, non_monotonic;
static atomic_long reads;

/* Reload k writes gamma_max = 2 + k % 14 everywhere; consistency = all equal. */
static void write_cfg(const char *path, int k, bool valid) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        perror(tmp);
        exit(1);
    }
    int g = 2 + k % 14;
    fprintf(f, "speculation:\n  gamma_min: 1\n  gamma_max: %d\n  gamma_default: 1\n  window: %d\n", g, g);
    fprintf(f, "policy:\n  rules:\n    - {content_type: code, gamma_max: %d}\n    - {content_type: chat, gamma_max: %d}\n",
            g, g);
    fprintf(f, "telemetry:\n  queue_size: %d\n", valid ? 1000 + g : 1);
    fclose(f);
    if (rename(tmp, path)) {
        perror("rename");
        exit(1);
    }
}

static void *reader(void *arg) {
    (void)arg;
    int last = 0;
    while (!atomic_load(&stop)) {
        const pol_config *c = pol_store_acquire(&store);
        int v = pol_config_version(c);
        if (v < last) atomic_fetch_add(&non_monotonic, 1);
        last = v;
        int g = c->speculation.gamma_max;
        if (c->speculation.window != g || c->n_rules != 2 || pol_config_rule(c, "m", "code")->gamma_max != g ||
            pol_config_rule(c, "m", "chat")->gamma_max != g || c->telemetry.queue_size != 1000 + g)
            atomic_fetch_add(&bad_reads, 1);
        atomic_fetch_add(&reads, 1);
        pol_store_release(&store, c);
    }
    return NULL;
}

int main(void) {
    char path[256], err[1024], note[256];
    snprintf(path, sizeof(path), "/tmp/specd-test-storeconc-%d.yaml", (int)getpid());
    write_cfg(path, 0, true);
    pol_config *c0 = pol_config_load(path, NULL, err, sizeof(err));
    CHECKF(c0 != NULL, "%s", err);
    if (!c0) TEST_DONE();
    pol_store_init(&store, c0);

    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) pthread_create(&th[i], NULL, reader, NULL);
    int ok = 0, failed = 0, version_errors = 0;
    for (int k = 1; k <= RELOADS; k++) {
        bool valid = k % 4 != 0;
        write_cfg(path, k, valid);
        const pol_config *before = pol_store_acquire(&store);
        int v0 = pol_config_version(before);
        pol_store_release(&store, before);
        int rc = pol_store_reload(&store, path, err, sizeof(err), note, sizeof(note));
        const pol_config *after = pol_store_acquire(&store);
        int v1 = pol_config_version(after);
        pol_store_release(&store, after);
        if (valid) {
            ok += rc == 0;
            if (rc != 0) fprintf(stderr, "reload %d: %s\n", k, err);
            version_errors += v1 != v0 + 1;
        } else {
            failed += rc == -1 && strstr(err, "telemetry.queue_size: 1 is out of range") != NULL;
            version_errors += v1 != v0;
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++) pthread_join(th[i], NULL);

    CHECK(ok == RELOADS - RELOADS / 4);
    CHECK(failed == RELOADS / 4);
    CHECK(version_errors == 0);
    CHECK(atomic_load(&bad_reads) == 0);
    CHECK(atomic_load(&non_monotonic) == 0);
    pol_reload_status st;
    pol_store_last_reload(&store, &st);
    CHECK(st.ok == (RELOADS % 4 != 0) && st.n_ok == (uint64_t)ok && st.n_failed == (uint64_t)failed && st.version == 1 + ok);
    const pol_config *c = pol_store_acquire(&store);
    CHECK(pol_config_version(c) == 1 + ok);
    pol_store_release(&store, c);
    printf("store: %d reloads ok, %d rejected, %ld snapshot reads by %d threads\n", ok, failed, atomic_load(&reads),
           READERS);
    pol_store_destroy(&store);
    unlink(path);
    TEST_DONE();
}
