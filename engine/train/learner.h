/* learner.h — the background trainer of `specd serve --learn` (issue 37):
 * it fine-tunes the live EAGLE head on the learning ring (engine.h's
 * engine_learn_*: served requests' tokens and the target's features), or
 * trains one from nothing when the server has none, and offers a candidate
 * to the engine only when it beats the live head on a held-out slice of
 * recent traffic.
 *
 * A round: the ring's samples, cut into windows of `window` tokens, become
 * training data whose newest tenth is held out; the trainee (a copy of the
 * live head, or a new head whose output is the target's, kept from round to
 * round) trains `steps` more optimizer steps with the training-time test
 * (eagle_train.h; its AdamW moments go on from round to round, the rate
 * warms up and anneals within each round); the held-out figure is simulated acceptance — the greedy
 * acceptance rule run on the stored target tokens: the mean number of drafts
 * a J-step greedy chain gets accepted per target pass (eagle_eval.accept_len),
 * no target pass needed — of the trainee and of the live head on the same
 * rows (0 without a head). Only a trainee ahead by the margin is written
 * (head-v<N>.gguf in dir, through a temporary file and a rename) and offered
 * (engine_learn_offer); it is then the live head and trains on. Otherwise it
 * is counted as refused and not offered; one behind the live head by the
 * margin is dropped (the next round starts again from the live head), else
 * it trains on. A failed or worse candidate never touches the live head.
 *
 * Cost: the thread runs at the server's priority (at nice 19 a steady load
 * starved it: about 4 % of a core at two streams on two cores, no round
 * finished in 13 minutes) with
 * round(share x cpus) worker threads (at least 1); while requests run it
 * sleeps after each optimizer step so that its busy time stays within
 * share x cpus cores, on an idle server it trains without sleeping, and
 * while requests wait for admission it does not train at all. While a step
 * computes, it lends its cores (backend_cpu_lend): the engine's short ops
 * then run on the cores left instead of waiting at every op's join for a
 * decode thread that shares a core with the trainer.
 *
 * Threading: one thread of its own (learner_start); learner_round runs a
 * round on the caller's thread instead (tests, with no thread started). */
#ifndef SPECD_LEARNER_H
#define SPECD_LEARNER_H

#include "engine/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Held-out windows scored per round, at most (the newest). */
#define LEARNER_EVAL_MAX 64

typedef struct {
    engine *e;                   /* started with engine_config.learn.enabled */
    pol_store *policy;           /* speculation.learn_* (hot); NULL: the fields below */
    const char *dir;             /* where heads are written (must exist) */
    int cpus;                    /* the host's cores (0: sysconf) */
    double share;                /* of the cores (0.1) */
    double margin;               /* accepted drafts per pass a candidate must gain (0.05) */
    int min_positions;           /* ring positions before the first round (4096) */
    int steps;                   /* optimizer steps per round (50) */
    int window;                  /* tokens per training sequence (128) */
    int J;                       /* training-time-test steps (3) */
    int batch;                   /* sequences per optimizer step (4) */
    float lr;                    /* peak learning rate (0: 1e-3 from nothing, 3e-4 fine-tuning) */
    float holdout;               /* newest share of the windows held out (0.1) */
    uint64_t seed;
    bool worse;                  /* tests only: the trainee's weights are scrambled after training (it must be
                                  * refused and dropped) */
} learner_config;

void learner_config_init(learner_config *c);

typedef struct learner learner;

/* Starts the thread (manual: none; call learner_round). A live head that
 * cannot be fine-tuned (a converted checkpoint's reduced vocabulary,
 * quantized matrices) leaves the learner idle with the reason in the
 * engine's learning stats. NULL with err (out of memory, no thread). */
learner *learner_start(const learner_config *c, bool manual, char *err, size_t errlen);
/* Stops after the current optimizer step and joins (accepts NULL). */
void learner_stop(learner *l);
/* One round now. Returns 1 when a candidate was offered, 0 when none was
 * (waiting for data, paused, refused: msg says which), -1 on an error. */
int learner_round(learner *l, char *msg, size_t n);

#endif
