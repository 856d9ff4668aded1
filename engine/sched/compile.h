/* compile.h — the engine's compile worker: one thread that compiles the
 * grammars of constrained requests (constrain_acquire: parse, matcher, key
 * masks, the start mask) while they wait, so neither the gateway's event loop
 * nor the engine thread ever runs a compile, and a large grammar delays only
 * its own request. A request is queued at submit (GRAM_PENDING); the worker
 * sets its matcher (GRAM_READY, with the shortest document's size for the
 * budget check at admission) or its refusal (GRAM_FAILED: the kind and the
 * message, answered at admission) and wakes the engine thread. A request
 * cancelled meanwhile lets its matcher go.
 *
 * Internal to the engine (engine_impl.h's req and engine). */
#ifndef SPECD_COMPILE_H
#define SPECD_COMPILE_H

struct engine;
struct req;

/* Starts the worker (mu and cv initialised). Returns 0, or an errno. */
int compile_start(struct engine *e);
/* Stops it (e->quit already set under mu) and joins it. Safe when it never started. */
void compile_stop(struct engine *e);
/* Queues r (mu held): r->gram becomes GRAM_PENDING. */
void compile_enqueue(struct engine *e, struct req *r);

#endif
