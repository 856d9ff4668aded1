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

/* Runs all tasks and returns when every one has finished. Tasks are handed out
 * dynamically (an atomic counter), so uneven tasks balance. Only one thread may
 * call tp_run on a pool at a time. */
void tp_run(threadpool *tp, int n_tasks, tp_fn fn, void *ctx);

#endif
