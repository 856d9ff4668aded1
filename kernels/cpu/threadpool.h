/* threadpool.h — a persistent worker pool for the CPU kernels: one fork/join
 * `tp_run` per op, workers spin briefly then sleep, so the per-op cost at decode
 * (a few hundred ops per token) stays in the microseconds; with a core taken by
 * another process the pool steps back to the caller alone instead of stalling. */
#ifndef SPECD_THREADPOOL_H
#define SPECD_THREADPOOL_H

/* fn(ctx, task, thread): called once for every task in [0, n_tasks), spread over
 * the pool's threads (thread in [0, n_threads)); the caller's thread is thread 0. */
typedef void (*tp_fn)(void *ctx, int task, int thread);

typedef struct threadpool threadpool;

threadpool *tp_create(int n_threads); /* aborts on failure */
void tp_destroy(threadpool *tp);      /* accepts NULL */
int tp_threads(const threadpool *tp);

/* Runs all tasks and returns when every one has finished. Tasks are handed out
 * dynamically (an atomic counter), so uneven tasks balance and a thread slowed
 * by another process does fewer. Only one thread may call tp_run on a pool at a
 * time. Where another process takes a core, the caller may run a job's tasks
 * alone (see threadpool.c): fn must compute the same whichever thread runs a
 * task (per-thread scratch only). */
void tp_run(threadpool *tp, int n_tasks, tp_fn fn, void *ctx);

/* What the pool did, for tests and benchmarks: jobs offered to the workers,
 * jobs the caller ran alone after a stall, stalls (a worker holding a task
 * off its core kept the caller waiting), and workers' steps aside from the
 * caller's core. */
typedef struct {
    long long shared, alone, stalls, parks;
} tp_counts;
void tp_get_counts(const threadpool *tp, tp_counts *out);

/* Both on by default. fallback: after a stall the caller runs the jobs alone for
 * a while; park: a worker on the caller's core steps aside. Both off: every job
 * of 2+ tasks is offered to every worker, as tests of the join want. */
void tp_set_adaptive(threadpool *tp, int fallback, int park);

#endif
