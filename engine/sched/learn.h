/* learn.h — the engine's side of learning from traffic (issue 37; the
 * public functions are engine.h's engine_learn_*): the ring's set-up, what a
 * finished request leaves in it, and the head swap between steps.
 *
 * A swap (an offered head, or a rollback to the one before) runs on the
 * engine thread at the top of its loop, between steps, under mu: every
 * running sequence's state of the old head is freed, the new head goes into
 * the pair's slot, and each sequence that may use it (spec_method_uses)
 * adopts it from its recorded features (spec_seq_adopt_drafter) — its next
 * proposal catches up on the committed tokens. No model work happens there
 * (the catch-up is the next proposal's), so a swap never holds mu long. The
 * replaced head stays loaded for a rollback; the one before it is freed.
 *
 * Not a public header: engine.c and sched.c include it. */
#ifndef SPECD_SCHED_LEARN_H
#define SPECD_SCHED_LEARN_H

#include "engine/engine.h"
#include "engine/learn/ring.h"

#include <stdbool.h>
#include <stdint.h>

struct engine;
struct req;
struct drafter;

typedef struct {
    learn_ring *ring;              /* cfg.learn.enabled (else NULL: learning off) */
    int layers[3];                 /* the taps the ring's features come from */
    char target_id[64];
    struct drafter *next;          /* an offered head waiting for the next step boundary (under mu) */
    char next_path[512];
    bool rollback;                 /* asked (under mu) */
    struct drafter *prev;          /* the head the last swap replaced (engine thread; under mu) */
    bool has_prev;                 /* a swap happened: prev (NULL: no head) is what a rollback brings back */
    char prev_path[512], path[512];/* their files (under mu) */
    bool paused;                   /* admin pause (under mu) */
    bool policy_off;               /* speculation.learn turned off by a reload (under mu) */
    bool policy_seen_true;         /* some snapshot said speculation.learn: true (engine thread) */
    engine_learn_stats st;         /* counters and the trainer's report (under mu) */
} learn_state;

/* engine_create, after the EAGLE head (if any) is installed: the ring, the
 * taps. Returns 0, or -1 with err. */
int learn_init(struct engine *e, char *err, size_t errlen);
void learn_free(struct engine *e); /* the ring and a head kept for rollback; engine_destroy */
/* finish_as (mu held): pushes r's tokens and features unless it opted out. */
void learn_on_finish(struct engine *e, struct req *r);
/* The top of the engine loop (mu held): a pending swap or rollback. */
void learn_apply(struct engine *e);

#endif
