/* path_ctl.h — the statistics and the rule for which proposer the auto
 * method's sequences take this step (the budget controller, budget.h, alone
 * asks and feeds it), when
 * Medusa heads are loaded beside a draft model or the n-gram lookup (issue
 * 18): arm 0 is the chain/tree path (the draft model or the lookup, its γ or
 * tree from its own controllers, plain decoding when that pays), arm 1 is
 * Medusa trees (draft_medusa.h, its budget from the verify curve).
 *
 * Measured, not predicted: the heads' held-out accuracies and the draft's α
 * say little about this text on this host, so per batch-size bucket each arm
 * keeps the tokens its sequences got per millisecond of their share of the
 * step (a running mean over the first observations, then an EWMA), and the
 * faster arm is taken. Every arm is tried `PATH_EXPLORE` steps first; the
 * other arm is re-tried for a few steps every `PATH_REPROBE` steps of its
 * bucket, ever less often (backoff up to 16x) while it stays well below. The
 * cost of switching (the draft model's catch-up after Medusa steps) lands in
 * the first steps of a run, which is where it belongs.
 *
 * One decision per step for the whole batch, not one per sequence: the
 * step's one target pass verifies both paths' rows together (sched_run.c),
 * but a batch split between the arms would make each arm's tokens per ms
 * depend on the other's rows, and the comparison is what this controller
 * is for. At batch 1 it is the sequence's own.
 *
 * Threading: one controller per engine, engine thread. */
#ifndef SPECD_PATH_CTL_H
#define SPECD_PATH_CTL_H

#define PATH_ARMS 2
#define PATH_BUCKETS 6              /* batch 1, 2, 3-4, 5-8, 9-16, 17+ */
#define PATH_EXPLORE 4              /* steps each arm gets first, per bucket */
#define PATH_REPROBE 64             /* steps of a bucket before the other arm is re-tried */
#define PATH_PROBE_LEN 3            /* steps a re-try lasts */

typedef struct {
    double rate[PATH_BUCKETS][PATH_ARMS]; /* tokens per ms of a sequence's share of the step */
    int seen[PATH_BUCKETS][PATH_ARMS];
    int since[PATH_BUCKETS];              /* steps of the bucket since its last re-try ended */
    int backoff[PATH_BUCKETS][PATH_ARMS];
    int run_left, run_arm, run_bucket;    /* a re-try (or exploration) in progress */
    long picks[PATH_ARMS];                /* reports */
} path_ctl;

void path_ctl_init(path_ctl *c);

/* The bucket of a batch of `batch` sequences. */
int path_ctl_bucket(int batch);

/* This step's arm for a batch of `batch` sequences. */
int path_ctl_pick(path_ctl *c, int batch);

/* After a step on `arm` at that batch size: its auto sequences appended
 * `tokens` in `ms` (the sum of their shares of the step's calls). */
void path_ctl_observe(path_ctl *c, int arm, int batch, int tokens, double ms);

#endif
