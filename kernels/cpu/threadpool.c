/* threadpool.c — persistent fork/join pool (see threadpool.h). Workers wait on a
 * generation counter: spin for a short while (decode issues ops back to back),
 * then block on a condition variable so an idle server burns no CPU.
 *
 * A job is joined through a door: one atomic word holding the job's
 * generation, a closed bit and the number of workers inside. A worker enters
 * only an open door of the generation it woke for; the caller, once it has
 * handed out every task, closes the door and waits for the workers inside —
 * never for a worker that has not started. On a host where other processes
 * take the cores, a worker is often descheduled while the caller runs an op;
 * waiting for every worker to check in then cost one scheduler slice per op
 * (a few hundred ops per token: a 2-thread decode measured 25x slower with
 * one competing process). Now the caller does the tasks itself and moves on;
 * the late worker finds the door closed and waits for the next job. */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#include "kernels/clock.h"

#define TP_SPIN 20000
#define DOOR_CLOSED (1ull << 31)
#define DOOR_INSIDE (DOOR_CLOSED - 1)

typedef struct {
    threadpool *tp;
    int id;
    pthread_t th;
} tp_worker;

/* The contention guard (tp_set_adaptive). Under contention the pool loses in
 * two ways: a worker descheduled in the middle of a task holds up the join for
 * the rest of another process's time slice (milliseconds, against an op of
 * tens of microseconds at decode), and a worker spinning for the next job
 * while the caller waits for a CPU takes a core the caller could have had.
 * With one core busy elsewhere, a 2-thread Q8_0 decode ran at 0.4-0.8x of
 * 1 thread; alone on the caller it runs as 1 thread does. The guard measures
 * the first loss directly: the time the caller spends at joins waiting for
 * workers still inside. On a quiet host that is a task's imbalance, a few
 * microseconds; with a worker descheduled it is a time slice. (An earlier
 * guard read the threads' schedstat run_delay, and ordinary wake-up latency
 * on a quiet host passed its threshold: a 2-thread decode ran 1.15-1.18x
 * slower with it.) */
#define TP_WINDOW_MS 20.0    /* how long a measurement lasts */
#define TP_WAIT_FRAC 0.25    /* join wait / wall in a window that counts as contention */
#define TP_HOT_WINDOWS 2     /* contended windows in a row before going solo (1 right after solo):
                              * on a quiet host one window in a few dozen passes 0.25 (a 256-token
                              * Q8_0 decode: 1 of 23), and 200 ms solo cost such a run several % */
#define TP_SOLO_MIN_MS 200.0 /* solo this long after the first contended window */
#define TP_SOLO_MAX_MS 3200.0 /* ... doubling while contention lasts, up to this */

/* Cores lent to other work of this process (tp_lend): the sum over lending
 * threads, and the calling thread's own part of it. */
static _Atomic int tp_lent;
static _Thread_local int tp_lent_here;

struct threadpool {
    int n_threads, n_cpus;          /* n_cpus: online CPUs at tp_create */
    _Atomic int active;             /* threads that may enter the current job (ids below it) */
    int lend_sleepers;              /* workers left out by a lend, waiting on lend_cv (under mu) */
    pthread_cond_t lend_cv;
    tp_worker *workers;             /* (n_threads - 1) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic unsigned gen;           /* bumped once per tp_run */
    _Atomic int next;               /* next task index to hand out */
    _Atomic unsigned long long door; /* gen << 32 | DOOR_CLOSED | workers inside */
    _Atomic int sleepers;
    _Atomic int quit;
    int n_tasks;
    tp_fn fn;
    void *ctx;
    /* contention guard: caller-only state */
    int adapt, solo, hot; /* hot: contended windows in a row */
    double win_t0, solo_until, backoff_ms; /* clock_now_ms() */
    double win_wait;                       /* ms waited at joins since win_t0 */
    unsigned calls;
};

/* Called by tp_run before each job: closes a measurement window when one is
 * due and decides whether the coming jobs run solo. */
static void tp_adapt(threadpool *tp) {
    if ((++tp->calls & 7) != 0) return; /* the clock every 8th job is enough */
    double now = clock_now_ms();
    if (tp->solo) {
        if (now < tp->solo_until) return;
        tp->solo = 0; /* try the pool again for one window */
        tp->hot = TP_HOT_WINDOWS - 1; /* one contended window goes back */
        tp->win_t0 = now, tp->win_wait = 0;
        return;
    }
    double dt = now - tp->win_t0;
    if (dt < TP_WINDOW_MS) return;
    double frac = tp->win_wait / dt;
    tp->win_t0 = now, tp->win_wait = 0;
    if (frac > TP_WAIT_FRAC && ++tp->hot >= TP_HOT_WINDOWS) {
        tp->hot = 0;
        tp->solo = 1;
        tp->solo_until = now + tp->backoff_ms;
        tp->backoff_ms = tp->backoff_ms * 2 < TP_SOLO_MAX_MS ? tp->backoff_ms * 2 : TP_SOLO_MAX_MS;
    } else if (frac <= TP_WAIT_FRAC) {
        tp->hot = 0;
        tp->backoff_ms = TP_SOLO_MIN_MS;
    }
}

static void tp_do_tasks(threadpool *tp, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&tp->next, 1, memory_order_relaxed);
        if (t >= tp->n_tasks) break;
        tp->fn(tp->ctx, t, thread);
    }
}

static void *tp_main(void *arg) {
    tp_worker *w = arg;
    threadpool *tp = w->tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen) {
            if (++spins < TP_SPIN) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            if (spins < TP_SPIN + 16) { /* cheap second chance before sleeping */
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleepers, 1);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit))
                pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&tp->quit)) return NULL;
        /* enter job g if its door is still open; the job's fields are valid
         * while we are inside (the caller rewrites them only with nobody in) */
        unsigned long long d = atomic_load(&tp->door);
        bool in = false;
        while ((unsigned)(d >> 32) == g && !(d & DOOR_CLOSED))
            if ((in = atomic_compare_exchange_weak(&tp->door, &d, d + 1))) break;
        if (!in) continue; /* done without us, or a later job already: wait for the next */
        if (w->id >= atomic_load_explicit(&tp->active, memory_order_relaxed)) {
            /* left out while cores are lent (tp_lend): leave the job and sleep until
             * the pool is widened again rather than spin on a lent core */
            atomic_fetch_sub_explicit(&tp->door, 1, memory_order_release);
            pthread_mutex_lock(&tp->mu);
            tp->lend_sleepers++;
            while (w->id >= atomic_load(&tp->active) && !atomic_load(&tp->quit)) pthread_cond_wait(&tp->lend_cv, &tp->mu);
            tp->lend_sleepers--;
            pthread_mutex_unlock(&tp->mu);
            continue;
        }
        tp_do_tasks(tp, w->id);
        atomic_fetch_sub_explicit(&tp->door, 1, memory_order_release);
    }
}

threadpool *tp_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) { fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__); abort(); }
    tp->n_threads = n_threads;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    tp->n_cpus = nc > 0 ? (int)nc : n_threads;
    atomic_init(&tp->active, n_threads);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    pthread_cond_init(&tp->lend_cv, NULL);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof(tp_worker));
        if (!tp->workers) { fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__); abort(); }
        for (int i = 0; i < n_threads - 1; i++) {
            tp->workers[i].tp = tp;
            tp->workers[i].id = i + 1;
            if (pthread_create(&tp->workers[i].th, NULL, tp_main, &tp->workers[i]) != 0) {
                fprintf(stderr, "%s:%d: pthread_create failed\n", __FILE__, __LINE__);
                abort();
            }
        }
    }
    return tp;
}

void tp_destroy(threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, 1);
    atomic_fetch_add(&tp->gen, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_cond_broadcast(&tp->lend_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_threads - 1; i++) pthread_join(tp->workers[i].th, NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    pthread_cond_destroy(&tp->lend_cv);
    free(tp->workers);
    free(tp);
}

int tp_threads(const threadpool *tp) { return tp->n_threads; }

int tp_set_adaptive(threadpool *tp, int on) {
    const char *env = getenv("SPECD_TP_ADAPT");
    if (env && !strcmp(env, "0")) on = 0;
    tp->solo = 0, tp->hot = 0;
    tp->adapt = on && tp->n_threads > 1;
    tp->win_t0 = clock_now_ms(), tp->win_wait = 0;
    tp->backoff_ms = TP_SOLO_MIN_MS;
    return tp->adapt;
}

int tp_solo(const threadpool *tp) { return tp->solo; }

void tp_lend(int n) {
    if (n < 0) n = 0;
    atomic_fetch_add(&tp_lent, n - tp_lent_here);
    tp_lent_here = n;
}

int tp_lent_cores(void) { return atomic_load_explicit(&tp_lent, memory_order_relaxed); }

/* How many of the pool's threads a short job may use now: all but those
 * whose cores other threads of this process have lent themselves (never
 * fewer than the caller). */
static int tp_active(threadpool *tp) {
    int lent = atomic_load_explicit(&tp_lent, memory_order_relaxed) - tp_lent_here;
    if (lent <= 0) return tp->n_threads;
    int free = tp->n_cpus - lent;
    return free < 1 ? 1 : free < tp->n_threads ? free : tp->n_threads;
}

static void tp_run_any(threadpool *tp, int n_tasks, tp_fn fn, void *ctx, int wide) {
    if (n_tasks <= 0) return;
    if (tp->adapt) tp_adapt(tp);
    int active = wide ? tp->n_threads : tp_active(tp);
    if (tp->n_threads == 1 || n_tasks == 1 || active == 1 || (tp->solo && !wide)) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    /* nobody is inside the previous job (its door closed empty) */
    if (active != atomic_load_explicit(&tp->active, memory_order_relaxed)) {
        pthread_mutex_lock(&tp->mu); /* the left-out workers read it under mu */
        atomic_store(&tp->active, active);
        if (tp->lend_sleepers) pthread_cond_broadcast(&tp->lend_cv);
        pthread_mutex_unlock(&tp->mu);
    }
    tp->n_tasks = n_tasks;
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    atomic_store(&tp->door, (unsigned long long)g << 32); /* open, empty: publishes the fields */
    atomic_store(&tp->gen, g); /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    tp_do_tasks(tp, 0);
    /* every task is handed out: close the door and wait for the workers
     * inside to finish theirs; if they are not running (more threads than
     * free cores), give the CPU away instead of burning our time slice */
    unsigned long long d = atomic_fetch_or(&tp->door, DOOR_CLOSED) | DOOR_CLOSED;
    double t_wait = tp->adapt && (d & DOOR_INSIDE) ? clock_now_ms() : 0;
    for (int spins = 0; d & DOOR_INSIDE; spins++) {
        if (spins < TP_SPIN) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
        d = atomic_load_explicit(&tp->door, memory_order_acquire);
    }
    if (t_wait > 0) tp->win_wait += clock_now_ms() - t_wait;
}

void tp_run(threadpool *tp, int n_tasks, tp_fn fn, void *ctx) { tp_run_any(tp, n_tasks, fn, ctx, 0); }

void tp_run_wide(threadpool *tp, int n_tasks, tp_fn fn, void *ctx) { tp_run_any(tp, n_tasks, fn, ctx, 1); }
