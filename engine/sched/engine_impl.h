/* engine_impl.h — the engine's internals shared by its two files: engine.c
 * (the public API: create/destroy, submit, cancel, poll, stats) and sched.c
 * (the engine thread: admission, planning, the step, event emission). Not a
 * public header: only those two include it.
 *
 * Locking: e->mu guards the request table (slots), the waiting FIFO, cancel
 * flags, the rings and every field marked "under mu"; the engine thread alone
 * touches the active set, the step scratch and the sequences' model state,
 * and runs model work without the lock. Debug builds (no NDEBUG) assert both:
 * ENG_HOLDS_MU(e) and ENG_ON_THREAD(e). */
#ifndef SPECD_ENGINE_IMPL_H
#define SPECD_ENGINE_IMPL_H

#include "engine/engine.h"
#include "engine/grammar/constrain.h"
#include "engine/spec/proposers/draft_eagle.h"  /* an EAGLE-3 head's loading (engine.c) */
#include "engine/spec/proposers/draft_medusa.h" /* the heads' loading, shape and curve (engine.c) */
#include "engine/spec/budget.h"
#include "engine/spec/proposers/draft_tree.h"
#include "engine/sched/learn.h"
#include "engine/sched/plan.h"
#include "engine/sched/stop.h"
#include "engine/util.h"
#include "kernels/check.h"
#include "kernels/comm.h"

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

_Static_assert(ENGINE_MAX_STOP <= STOP_MAX && ENGINE_STOP_LEN <= STOP_LEN, "stop.h holds engine.h's stop strings");

/* The paths a stepped sequence takes, by the shape of its proposal, in the
 * order their rows sit in the step's one target pass (sched_run.c): trees
 * (any proposer's: the draft model's, the lookup's, the heads'), chains
 * (the draft model's and the lookup's, and plain steps). */
enum { SCHED_PATH_TREE = 0, SCHED_PATH_CHAIN, SCHED_PATHS };

typedef enum { RQ_WAITING = 0, RQ_PREFILL, RQ_RUNNING, RQ_DONE } rq_state;

/* A constrained request's grammar: compiled off the engine thread by the
 * compile worker (compile.c) while the request waits; admission skips it
 * until then. */
enum { GRAM_NONE = 0, GRAM_PENDING, GRAM_READY, GRAM_FAILED };

typedef struct req {
    uint64_t id;
    rq_state state;
    int32_t *prompt;
    int n_prompt;
    spec_seq_params prm;
    int max_tokens;
    stop_matcher stop;            /* stop strings and the text held back for them (stop.h) */
    int32_t *stop_ids;
    int n_stop_ids;
    bool adaptive;
    bool policy_bounds;           /* γ bounds come from the policy (the request did not fix γ) */
    bool method_set;              /* the request chose its proposer (else the policy rule's) */
    char content_type[32];
    engine_notify_fn notify;
    void *user;
    uint64_t client;              /* the fair-share group (0: none) */
    bool cancel;                  /* requested by a client */
    bool no_learn;                /* kept out of the learning ring (the request's "learn": false, a policy rule) */
    bool paused;                  /* admitted, waiting for its reader: holds KV but no running slot */
    uint64_t pause_seq;           /* when it paused (resume order) */
    bool final_pushed;            /* finished/error is in the ring: nothing more */
    int reserved;                 /* KV blocks reserved per pool */
    spec_seq *seq;
    char *grammar_text;           /* GBNF of a constrained request (NULL: none) */
    sampler_bias *logit_bias;     /* the request's copy; prm.sc.logit_bias points here (NULL: none) */
    size_t grammar_len;
    grammar_matcher *gm;          /* held from the cache from its compile to the end (engine thread, under mu) */
    int gram;                     /* GRAM_*: where its grammar's compile stands (under mu) */
    int gram_need;                /* bytes of the grammar's shortest document (compile worker) */
    int gram_min_tokens;          /* the fewest tokens that could hold them (longest token) */
    engine_status gram_status;    /* GRAM_FAILED: the kind and the message */
    char *gram_err;
    int32_t gst_out;              /* grammar state after the emitted tokens (the emit check) */
    struct req *next_compile;     /* the compile queue (under mu) */
    tok_stream ts;
    int n_out;
    int step_num;
    int pub_gamma;                /* published under mu after each step */
    int pub_method;               /* drafter slot of the last step, -1 plain */
    tree_shape pub_shape;         /* the last step's tree shape (budget 0: the chain path) */
    /* tree speculation: mode (ENGINE_TREE_OFF/AUTO/FIXED, resolved at submit)
     * and the bounds (the fixed shape); the sequence's budget state holds
     * them from its admission (budget_seq_set_trees) with auto's controller */
    int tree_mode;
    tree_shape tree_sh;
    bool auto_medusa;             /* method auto and its sequence holds the heads' state
                                   * (seq->ds[SPEC_DRAFTER_MEDUSA]): the budget controller's path choice
                                   * moves it per step between the heads and the chain/tree path */
    bool pub_medusa;              /* the last step was a Medusa step */
    double pub_alpha;
    char session[40];
    double t_submit, t_admit, t_first, t_last;
    engine_event *ring;           /* (ring_cap) */
    int head, count;
    struct req *next_wait;
} req;

struct engine {
    engine_config cfg;
    chat_tmpl *chat;               /* the chat template (engine_create; immutable) */
    backend *be;                   /* shard 0: the draft's and the unsharded target's */
    backend *shards[ENGINE_MAX_SHARDS]; /* the target's shards (n_shards; [0] == be) */
    int n_shards;
    comm *tp_comm;                 /* all-reduce between the shards (n_shards > 1) */
    spec_pair *sp;
    constrain_cache *gc;           /* grammars and matchers of constrained requests (its own lock) */
    pthread_t cth;                 /* the compile worker (compile.c); 0 when not started */
    pthread_cond_t ccv;            /* wakes it (with mu) */
    struct req *cq_head, *cq_tail; /* requests whose grammar waits for it (under mu) */
    int n_compiling;               /* queued or in the worker (under mu) */
    pthread_t th;
    pthread_mutex_t mu;            /* lock and unlock with eng_lock / eng_unlock / eng_wait */
    pthread_cond_t cv;
#ifndef NDEBUG
    pthread_t mu_owner;            /* who holds mu (meaningful while mu_held; both under mu) */
    bool mu_held;
    pthread_t self;                /* the engine thread (written by it as it starts, read only by it) */
#endif
    bool quit;
    req **slots;                  /* (n_slots) id & 0xffff -> request */
    int n_slots;
    uint64_t gen;
    req *wait_head, *wait_tail;
    int n_waiting;
    req **active;                 /* (n_slots) admitted: prefilling, running or paused; engine thread */
    spec_seq **aseq;              /* (n_slots) scratch: the active requests' sequences (a head swap) */
    int n_active;
    uint64_t pause_ctr;
    int reserved_blocks;          /* per pool */
    budget bud;                   /* the budget controller: every step's which proposer and how much
                                   * (engine thread; engine_create sets it up) */
    /* step scratch (engine thread) */
    spec_seq **bseq, **mseq;
    int *bmax, *bgam, *order, *gam_all, *mmax;
    spec_step_info *binfo;
    plan_bin *bins;
    /* tree speculation (cfg.tree != off) or heads: scratch, this step's tree
     * sequences */
    spec_tree_ctx *tc;            /* tree speculation or heads loaded: every tree's verify rows */
    draft_tree *dt;
    medusa_heads *mh;             /* cfg.medusa_path: the heads (else NULL) ... */
    draft_medusa *dm;             /* ... and their proposer, owned by the pair (slot SPEC_DRAFTER_MEDUSA) */
    uint64_t path_steps[PATH_ARMS]; /* steps per arm of the budget's path choice (under mu, for engine_get_stats) */
    struct req **treq;
    spec_seq **tseq;
    tree_shape *tsh;
    spec_method *thow;
    int *tmax;
    spec_step_info *tinfo;
    spec_tree *ttree;             /* this step's draft/n-gram trees, their proposers (-1 none), draft ms */
    int *tslot;
    double *tdms;
    /* the step's ONE target pass: every stepped sequence's verify rows
     * (trees, then chains) and which path and index each is */
    model_seq *vms;
    struct { int path, i; } *vunit;
    /* per stepped sequence (chain: binfo's index; tree: tinfo's): its call's
     * wall time / sequences, the sequences and verify rows of the call */
    double *vshare[SCHED_PATHS];  /* (max_running) each path's sequences (chains in bin order): the
                                   * sequence's share of its call's wall time (the call's time over its
                                   * sequences) plus its draft time, and its call's sequences and rows */
    int *vbatch[SCHED_PATHS], *vrows[SCHED_PATHS];
    uint64_t tree_decisions[2], tree_auto; /* under mu */
    /* copies of engine-thread state for engine_get_stats (under mu) */
    int kv_free_t, kv_free_d;
    int pfx_cached[2], pfx_idle[2];
    uint64_t pfx_evicted[2], pfx_cow[2];
    gamma_costs costs_pub;
    /* counters (under mu) */
    uint64_t steps, tokens, done, microbatches;
    uint64_t verify_calls;        /* target calls of decode steps (more than steps when max_batch splits them) */
    uint64_t mixed_steps;         /* steps whose pass held rows of more than one path */
    uint64_t accepted_hist[GAMMA_MAX + 1];
    spec_stats st_run;
    /* policy: the version the running requests' bounds come from, and the
     * acceptance each content type has been achieving (the controller's prior) */
    int policy_version;
    struct { char type[32]; double alpha; uint64_t n; } ct[16];
    int n_ct;            /* running requests' statistics, refreshed each step */
    learn_state learn;            /* learning from traffic (learn.h) */
    double pad_sum;
    spec_stats st;
};


/* ---- locking and thread ownership, asserted in debug builds -------------- */

static inline void eng_lock(engine *e) {
    pthread_mutex_lock(&e->mu);
#ifndef NDEBUG
    e->mu_owner = pthread_self();
    e->mu_held = true;
#endif
}

static inline void eng_unlock(engine *e) {
#ifndef NDEBUG
    SPECD_CHECK(e->mu_held && pthread_equal(e->mu_owner, pthread_self()));
    e->mu_held = false;
#endif
    pthread_mutex_unlock(&e->mu);
}

/* Waits on cond (mu held; released while waiting, held again after). */
static inline void eng_wait_on(engine *e, pthread_cond_t *cond) {
#ifndef NDEBUG
    SPECD_CHECK(e->mu_held && pthread_equal(e->mu_owner, pthread_self()));
    e->mu_held = false;
#endif
    pthread_cond_wait(cond, &e->mu);
#ifndef NDEBUG
    e->mu_owner = pthread_self();
    e->mu_held = true;
#endif
}

/* Waits on cv, the engine thread's wake-up. */
static inline void eng_wait(engine *e) { eng_wait_on(e, &e->cv); }

#ifndef NDEBUG
/* "caller holds mu" */
#define ENG_HOLDS_MU(e) SPECD_CHECK((e)->mu_held && pthread_equal((e)->mu_owner, pthread_self()))
/* "engine thread only" */
#define ENG_ON_THREAD(e) SPECD_CHECK(pthread_equal((e)->self, pthread_self()))
/* the engine thread, as it starts */
#define ENG_OWN_THREAD(e) ((e)->self = pthread_self())
#else
#define ENG_HOLDS_MU(e) ((void)(e))
#define ENG_ON_THREAD(e) ((void)(e))
#define ENG_OWN_THREAD(e) ((void)(e))
#endif

/* The live request of id (engine_submit's slot | generation), or NULL when
 * it has been released. Caller holds mu. */
static inline req *eng_lookup(engine *e, uint64_t id) {
    ENG_HOLDS_MU(e);
    int slot = (int)(id & 0xffff);
    if (slot >= e->n_slots) return NULL;
    req *r = e->slots[slot];
    return r && r->id == id ? r : NULL;
}

/* sched.c: the engine thread's body (pthread start routine; arg is the engine) */
void *engine_main(void *arg);
/* sched.c: copies the pools' free counts for engine_get_stats (mu held, or
 * before the thread starts) */
void publish_pools(engine *e);

/* One iteration's work and what came of it: sched_pick fills the first
 * part under mu, sched_run the rest without it, sched_emit reads it all
 * under mu again. */
typedef struct {
    req *pre;                     /* the request getting a prefill chunk (NULL: none) */
    int n_run, n_pre;             /* running sequences (in e->bseq), prefilling requests */
    int pre_rc;                   /* spec_seq_prefill: 1 done, 0 more chunks, -1 failed (err) */
    int n_path[SCHED_PATHS];      /* the running sequences by path (SCHED_PATH_*) */
    int nb;                       /* chain micro-batches (e->bins) */
    double pad;                   /* their padding ratio */
    int n_calls;                  /* target calls made */
    bool mixed;                   /* a call held rows of more than one path */
    int path_rc[SCHED_PATHS];     /* 0, or -1 with the path's error */
    char err[512], path_err[SCHED_PATHS][512];
} sched_step;

/* The model work of one iteration (sched_run.c): w's first part as
 * sched_pick left it, the rest filled. Engine thread, mu not held. */
void sched_run(engine *e, sched_step *w);


#endif
