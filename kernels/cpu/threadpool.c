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
 * the late worker finds the door closed and waits for the next job.
 *
 * Tasks are claimed one at a time from an atomic counter, so a slowed thread
 * simply does fewer. With one of two cores taken by another process, three
 * more things cost a 2-thread decode its speed (0.77x of 1 thread before):
 *  - The scheduler often puts the worker on the caller's core (the other one
 *    holds the competitor), where its wait for the next job spun on the
 *    caller's time. A worker that finds itself on the core the caller last
 *    ran on now steps aside (tp_park): it sleeps TP_PARK_NS without taking
 *    jobs, and the caller, not waking it per job, does them alone.
 *  - A worker that loses its core while inside (holding a task) makes the
 *    caller wait until the scheduler gives it back: a slice of the competitor,
 *    milliseconds (tens of them on a loaded host), against tens of
 *    microseconds for a decode op. The caller waits at the door by spinning
 *    TP_CALLER_SPIN_NS and then sleeping on a futex that the last worker out
 *    wakes, so its core is free for the late worker meanwhile; and such a
 *    stall (a door wait longer than the caller's own part of the job by
 *    TP_STALL_NS) makes the pool run its jobs on the caller alone for a while
 *    (TP_SOLO_MIN_NS, 4x longer for each stall that follows within TP_CALM_NS
 *    of sharing again, up to TP_SOLO_MAX_NS), then offer them to the workers
 *    again.
 * On a quiet host neither happens and every job is shared as before. Which
 * thread runs a task never changes what the task computes (the kernels'
 * contract: per-thread scratch only), so running alone changes no result. */
#define _GNU_SOURCE 1 /* sched_getcpu */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define TP_SPIN 20000                  /* worker: pauses (about 1 ms) before it sleeps */
#define TP_CALLER_SPIN_NS 100000ll     /* caller at a closed door: spin this long, then sleep */
#define TP_STALL_NS 500000ll           /* a door wait this much longer than the caller's own part: a stall */
#define TP_SOLO_MIN_NS 32000000ll      /* the first run-alone period after a stall */
#define TP_SOLO_MAX_NS 2048000000ll    /* the longest */
#define TP_CALM_NS 200000000ll         /* sharing this long without a stall: the next period is the first again */
#define TP_PARK_NS 2000000             /* a worker on the caller's core looks again after this */
#define DOOR_CLOSED (1ull << 31)
#define DOOR_INSIDE (DOOR_CLOSED - 1)

typedef struct {
    threadpool *tp;
    int id;
    pthread_t th;
} tp_worker;

struct threadpool {
    int n_threads;
    tp_worker *workers;             /* (n_threads - 1) */
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* sleeping workers: a new job or quit */
    pthread_cond_t park_cv;         /* parked workers: quit (else they time out) */
    _Atomic unsigned gen;           /* bumped once per tp_run */
    _Atomic int next;               /* next task index to hand out */
    _Atomic unsigned long long door; /* gen << 32 | DOOR_CLOSED | workers inside */
    _Atomic int sleepers;
    _Atomic int quit;
    _Atomic int caller_asleep;      /* futex word: the caller sleeps at a closed door */
    _Atomic int caller_cpu;         /* the core the caller last ran tp_run on (-2: none yet) */
    _Atomic bool park;              /* workers step aside from the caller's core (tp_set_adaptive) */
    _Atomic long long parks;
    int n_tasks;
    tp_fn fn;
    void *ctx;
    /* the caller's alone */
    bool fallback;                  /* run alone after stalls (tp_set_adaptive) */
    long long solo_until, backoff, last_stall; /* CLOCK_MONOTONIC ns */
    long long shared, alone, stalls;
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int cur_cpu(void) {
#ifdef __linux__
    return sched_getcpu(); /* a few ns (rseq) */
#else
    return -1;
#endif
}

/* sleeps while *w == val, at most ns nanoseconds (spurious returns are fine) */
static void wait_word(_Atomic int *w, int val, long ns) {
#ifdef __linux__
    struct timespec ts = {0, ns};
    syscall(SYS_futex, (int *)w, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
#else
    (void)w, (void)val, (void)ns;
    sched_yield();
#endif
}

static void wake_word(_Atomic int *w) {
#ifdef __linux__
    syscall(SYS_futex, (int *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
    (void)w;
#endif
}

/* true when this thread runs on the core the caller last ran a job from */
static bool on_caller_cpu(threadpool *tp) {
    if (!atomic_load_explicit(&tp->park, memory_order_relaxed)) return false;
    int c = cur_cpu();
    return c >= 0 && c == atomic_load_explicit(&tp->caller_cpu, memory_order_relaxed);
}

/* A worker on the caller's core can only run while the caller does not: it
 * would spin on the caller's time, or take a task the caller then waits for.
 * It steps aside, not counted as a sleeper (the caller does not wake it for
 * each job), and looks again after TP_PARK_NS, by when the scheduler may
 * have given it a core of its own. */
static void tp_park(threadpool *tp) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += TP_PARK_NS;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_mutex_lock(&tp->mu);
    if (!atomic_load(&tp->quit)) pthread_cond_timedwait(&tp->park_cv, &tp->mu, &ts);
    pthread_mutex_unlock(&tp->mu);
    atomic_fetch_add_explicit(&tp->parks, 1, memory_order_relaxed);
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
                if ((spins & 255) == 0 && on_caller_cpu(tp)) {
                    tp_park(tp);
                    if (atomic_load(&tp->quit)) return NULL;
                    spins = 0;
                    continue;
                }
                cpu_relax();
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
        if (on_caller_cpu(tp)) { /* the caller does this job without us */
            tp_park(tp);
            continue;
        }
        /* enter job g if its door is still open; the job's fields are valid
         * while we are inside (the caller rewrites them only with nobody in) */
        unsigned long long d = atomic_load(&tp->door);
        bool in = false;
        while ((unsigned)(d >> 32) == g && !(d & DOOR_CLOSED))
            if ((in = atomic_compare_exchange_weak(&tp->door, &d, d + 1))) break;
        if (!in) continue; /* done without us, or a later job already: wait for the next */
        tp_do_tasks(tp, w->id);
        /* seq_cst: pairs with the caller's store of caller_asleep and its
         * load of the door (one of the two sees the other) */
        unsigned long long prev = atomic_fetch_sub(&tp->door, 1);
        if ((prev & DOOR_CLOSED) && (prev & DOOR_INSIDE) == 1 && atomic_load(&tp->caller_asleep)) {
            atomic_store(&tp->caller_asleep, 0);
            wake_word(&tp->caller_asleep);
        }
    }
}

threadpool *tp_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    threadpool *tp = calloc(1, sizeof(*tp));
    if (!tp) { fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__); abort(); }
    tp->n_threads = n_threads;
    tp->fallback = true;
    atomic_store(&tp->park, true);
    tp->backoff = TP_SOLO_MIN_NS;
    tp->last_stall = -TP_SOLO_MAX_NS - TP_CALM_NS;
    atomic_store(&tp->caller_cpu, -2);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&tp->park_cv, &ca);
    pthread_condattr_destroy(&ca);
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
    pthread_cond_broadcast(&tp->park_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < tp->n_threads - 1; i++) pthread_join(tp->workers[i].th, NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    pthread_cond_destroy(&tp->park_cv);
    free(tp->workers);
    free(tp);
}

int tp_threads(const threadpool *tp) { return tp->n_threads; }

void tp_set_adaptive(threadpool *tp, int fallback, int park) {
    tp->fallback = fallback != 0;
    if (!fallback) tp->solo_until = 0;
    atomic_store(&tp->park, park != 0);
}

void tp_get_counts(const threadpool *tp, tp_counts *out) {
    out->shared = tp->shared;
    out->alone = tp->alone;
    out->stalls = tp->stalls;
    out->parks = atomic_load_explicit(&tp->parks, memory_order_relaxed);
}

/* A stall ended at t: run alone for a while, longer when stalls keep coming. */
static void tp_stalled(threadpool *tp, long long t) {
    tp->stalls++;
    if (!tp->fallback) return;
    if (t - tp->last_stall > tp->backoff + TP_CALM_NS) tp->backoff = TP_SOLO_MIN_NS;
    else if (tp->backoff < TP_SOLO_MAX_NS) tp->backoff *= 4;
    if (tp->backoff > TP_SOLO_MAX_NS) tp->backoff = TP_SOLO_MAX_NS;
    tp->last_stall = t;
    tp->solo_until = t + tp->backoff;
}

void tp_run(threadpool *tp, int n_tasks, tp_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (tp->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    atomic_store_explicit(&tp->caller_cpu, cur_cpu(), memory_order_relaxed);
    long long t0 = now_ns();
    if (t0 < tp->solo_until) {
        tp->alone++;
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    tp->shared++;
    /* nobody is inside the previous job (its door closed empty) */
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
     * inside to finish theirs: spin briefly, then sleep until the last one
     * out wakes us (our core is then free for a worker that was not running) */
    unsigned long long d = atomic_fetch_or(&tp->door, DOOR_CLOSED) | DOOR_CLOSED;
    if (!(d & DOOR_INSIDE)) return;
    long long t1 = now_ns();
    for (int spins = 1; d & DOOR_INSIDE; spins++) {
        if (spins % 64 == 0 && now_ns() - t1 > TP_CALLER_SPIN_NS) break;
        cpu_relax();
        d = atomic_load_explicit(&tp->door, memory_order_acquire);
    }
    if (!(d & DOOR_INSIDE)) return;
    while (d & DOOR_INSIDE) {
        atomic_store(&tp->caller_asleep, 1);
        if (atomic_load(&tp->door) & DOOR_INSIDE) wait_word(&tp->caller_asleep, 1, 1000000);
        atomic_store(&tp->caller_asleep, 0);
        d = atomic_load_explicit(&tp->door, memory_order_acquire);
    }
    long long t2 = now_ns();
    if (t2 - t1 > (t1 - t0) + TP_STALL_NS) tp_stalled(tp, t2);
}
