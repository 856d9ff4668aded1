/* threadpool.h — a persistent worker pool for the CPU kernels: one fork/join
 * `tp_run` per op, workers spin briefly then sleep, so the per-op cost at decode
 * (a few hundred ops per token) stays in the microseconds. */
#ifndef SPECD_THREADPOOL_H
#define SPECD_THREADPOOL_H

/* fn(ctx, task, thread): called once for every task in [0, n_tasks), spread over
 * the pool's threads (thread in [0, n_threads)); the caller's thread is thread 0. */
typedef void (*tp_fn)(void *ctx, int task, int thread);

typedef struct threadpool threadpool;

threadpool *tp_create(int n_threads); /* aborts on failure */
void tp_destroy(threadpool *tp);      /* accepts NULL */
int tp_threads(const threadpool *tp);

/* Turns on (1) or off (0, the default) the contention guard: the caller
 * times how long it waits at each job's join for workers still inside (a
 * worker descheduled mid-task by another process); when that passes a
 * quarter of the wall time of a TP_WINDOW of tp_run calls, the host has fewer
 * free cores than the pool has threads, and tp_run runs every job on the
 * calling thread alone for a while (then tries the pool again, backing off
 * while the contention lasts). A task's result must not depend on its thread
 * (it never does in the kernels), so only the speed changes.
 * SPECD_TP_ADAPT=0 in the environment keeps it off (the CPU backend's
 * default is in cpu_backend.c). Call it while no tp_run is in progress.
 * Returns whether the guard is on. */
int tp_set_adaptive(threadpool *tp, int on);
/* tp_run for a long job (a millisecond or more of work, a prefill's matmul):
 * it uses the whole pool even while the guard has it solo, because there a
 * descheduled worker's delay is small next to the help it gives (a 512-token
 * F16 prefill with one core busy elsewhere ran 1.26x longer solo). */
void tp_run_wide(threadpool *tp, int n_tasks, tp_fn fn, void *ctx);
/* Whether the guard has the pool on the calling thread alone now (1) or not. */
int tp_solo(const threadpool *tp);

/* Lends n cores (0: none) from the calling thread to work of its own that
 * runs outside every pool (the server's background trainer): until it lends
 * 0 again, short jobs that other threads run on any pool use at most the
 * online CPUs less the cores lent (at least their caller; tp_run_wide jobs
 * keep every thread). A left-out worker sleeps rather than spins, so the
 * lender's threads get their cores without a pool's join waiting on a
 * descheduled worker at every op. A later call replaces the thread's
 * earlier lend. Only the speed changes, never a result. */
void tp_lend(int n);
int tp_lent_cores(void); /* the cores lent now, over all threads */

/* Runs all tasks and returns when every one has finished. Tasks are handed out
 * dynamically (an atomic counter), so uneven tasks balance. Only one thread may
 * call tp_run on a pool at a time. */
void tp_run(threadpool *tp, int n_tasks, tp_fn fn, void *ctx);

#endif
