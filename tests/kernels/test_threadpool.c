/* test_threadpool.c — the CPU pool's fork/join contract under contention:
 * every task of every job runs exactly once and is finished when tp_run
 * returns, with uneven tasks, jobs of 1..40 tasks back to back, more workers
 * than cores and busy threads competing for the cores, so workers are often
 * descheduled mid-job and wake for a job that is already done (the door in
 * threadpool.c). The TSan suite runs it too. */
#include "kernels/cpu/threadpool.h"
#include "tests/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#define MAXT 40

typedef struct {
    _Atomic int hits[MAXT];
    _Atomic int threads_seen;
    int n;
    unsigned job;
} job_ctx;

static void task(void *p, int t, int thread) {
    job_ctx *c = p;
    volatile uint64_t x = (uint64_t)t * 2654435761u;
    for (int i = 0; i < (t % 7) * 200; i++) x = x * 6364136223846793005ull + 1; /* uneven work */
    (void)x;
    atomic_fetch_or(&c->threads_seen, 1 << (thread & 15));
    atomic_fetch_add(&c->hits[t], 1);
}

static _Atomic int stop;

/* tp_lend from another thread: the lender holds its lend until told to stop */
static _Atomic int lend_n = -1, lend_phase;
static void *lender(void *arg) {
    (void)arg;
    tp_lend(atomic_load(&lend_n));
    atomic_store(&lend_phase, 1);
    while (atomic_load(&lend_phase) == 1) sched_yield();
    tp_lend(0);
    atomic_store(&lend_phase, 3);
    return NULL;
}

/* 2000 jobs of 40 tasks on tp; the threads that took part, as a bit set */
static int run_jobs(threadpool *tp, int wide, int *bad) {
    int seen = 0;
    for (unsigned j = 0; j < 2000; j++) {
        job_ctx c = {.n = MAXT, .job = j};
        if (wide) tp_run_wide(tp, c.n, task, &c);
        else tp_run(tp, c.n, task, &c);
        for (int t = 0; t < MAXT; t++) *bad += atomic_load(&c.hits[t]) != 1;
        seen |= atomic_load(&c.threads_seen);
    }
    return seen;
}
static void *busy(void *arg) {
    (void)arg;
    volatile uint64_t x = 1;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) x = x * 3 + 1;
    return NULL;
}

int main(void) {
    pthread_t comp[2];
    for (int i = 0; i < 2; i++) pthread_create(&comp[i], NULL, busy, NULL);
    int threads[] = {2, 3, 5};
    for (int k = 0; k < 3; k++) {
        threadpool *tp = tp_create(threads[k]);
        CHECK(tp_threads(tp) == threads[k]);
        int bad = 0, helped = 0;
        for (unsigned j = 0; j < 20000; j++) {
            job_ctx c = {.n = 1 + (int)(j * 7 % MAXT), .job = j};
            tp_run(tp, c.n, task, &c);
            /* c lives on this stack frame: a worker touching it after tp_run
             * returned would be a use after scope (TSan/ASan see it) */
            for (int t = 0; t < c.n; t++) bad += atomic_load(&c.hits[t]) != 1;
            for (int t = c.n; t < MAXT; t++) bad += atomic_load(&c.hits[t]) != 0;
            helped += (atomic_load(&c.threads_seen) & ~1) != 0;
        }
        CHECKF(bad == 0, "%d threads: %d tasks ran other than once", threads[k], bad);
        /* the workers still take part (the caller does not run every job alone) */
        CHECKF(helped > 0, "%d threads: no job had a worker's help", threads[k]);
        tp_destroy(tp);
    }
    /* the contention guard (tp_set_adaptive): with the busy threads above it
     * runs jobs on the caller alone for stretches, and tp_run_wide uses the
     * pool through them; every task still runs exactly once */
    threadpool *tp = tp_create(2);
    int on = tp_set_adaptive(tp, 1), bad = 0, solo = 0;
    for (unsigned j = 0; j < 20000; j++) {
        job_ctx c = {.n = 1 + (int)(j * 7 % MAXT), .job = j};
        if (j % 3 == 0) tp_run_wide(tp, c.n, task, &c);
        else tp_run(tp, c.n, task, &c);
        for (int t = 0; t < MAXT; t++) bad += atomic_load(&c.hits[t]) != (t < c.n);
        solo += tp_solo(tp);
    }
    CHECKF(bad == 0, "adaptive pool: %d tasks ran other than once", bad);
    fprintf(stderr, "contention guard %s: %d of 20000 jobs while solo\n", on ? "on" : "unavailable", solo);
    tp_destroy(tp);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(comp[i], NULL);

    /* lent cores (tp_lend): while another thread lends L cores, short jobs use
     * only the threads below max(1, cpus - L); wide jobs and the lender's own
     * jobs use all; once the lend ends every thread takes part again */
    int cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int L = 1; L <= cpus; L++) {
        tp = tp_create(5);
        int allow = cpus - L < 1 ? 1 : cpus - L < 5 ? cpus - L : 5, b = 0;
        atomic_store(&lend_n, L), atomic_store(&lend_phase, 0);
        pthread_t lt;
        pthread_create(&lt, NULL, lender, NULL);
        while (atomic_load(&lend_phase) != 1) sched_yield();
        CHECK(tp_lent_cores() == L);
        int seen = run_jobs(tp, 0, &b);
        CHECKF((seen >> allow) == 0, "lend %d of %d cpus: threads 0x%x took part, only %d allowed", L, cpus, seen,
               allow);
        int wide = run_jobs(tp, 1, &b);
        CHECKF((wide & ~1) != 0, "lend %d: a wide job had no worker's help", L);
        atomic_store(&lend_phase, 2);
        while (atomic_load(&lend_phase) != 3) sched_yield();
        pthread_join(lt, NULL);
        CHECK(tp_lent_cores() == 0);
        int after = run_jobs(tp, 0, &b);
        CHECKF((after >> allow) != 0, "lend %d ended: threads 0x%x, none above %d came back", L, after, allow);
        CHECKF(b == 0, "lend %d: %d tasks ran other than once", L, b);
        tp_destroy(tp);
    }
    /* a thread's own lend leaves its own jobs alone, and a later call replaces it */
    tp = tp_create(2);
    tp_lend(cpus), tp_lend(cpus);
    CHECK(tp_lent_cores() == cpus);
    int b = 0, own = run_jobs(tp, 0, &b);
    CHECKF((own & ~1) != 0 && b == 0, "the lender's own jobs: threads 0x%x, %d bad", own, b);
    tp_lend(0);
    CHECK(tp_lent_cores() == 0);
    tp_destroy(tp);
    TEST_DONE();
}
