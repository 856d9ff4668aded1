/* compile.c — the compile worker (see compile.h). */
#include "engine/sched/compile.h"

#include "engine/sched/engine_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void compile_enqueue(engine *e, req *r) {
    ENG_HOLDS_MU(e);
    r->gram = GRAM_PENDING;
    r->next_compile = NULL;
    if (e->cq_tail) e->cq_tail->next_compile = r;
    else e->cq_head = r;
    e->cq_tail = r;
    e->n_compiling++;
    pthread_cond_signal(&e->ccv);
}

static void *compile_main(void *arg) {
    engine *e = arg;
    char err[512];
    eng_lock(e);
    for (;;) {
        while (!e->quit && !e->cq_head) eng_wait_on(e, &e->ccv);
        if (e->quit) break;
        req *r = e->cq_head;
        e->cq_head = r->next_compile;
        if (!e->cq_head) e->cq_tail = NULL;
        r->next_compile = NULL;
        uint64_t id = r->id;
        /* the text is the request's: copied, since a cancelled request may be
         * freed while its grammar compiles */
        size_t len = r->grammar_len;
        char *text = r->cancel ? NULL : malloc(len + 1);
        if (text) memcpy(text, r->grammar_text, len + 1);
        bool cancelled = r->cancel;
        eng_unlock(e);

        grammar_matcher *m = NULL;
        bool oom = !text && !cancelled;
        constrain_info info = {0};
        err[0] = 0;
        if (text) m = constrain_acquire(e->gc, text, len, err, sizeof(err), &oom, &info);
        free(text);

        eng_lock(e);
        e->n_compiling--;
        req *q = eng_lookup(e, id);
        if (!q || q->final_pushed || q->cancel) {
            if (q) q->gram = GRAM_FAILED, q->gram_status = ENGINE_ERR_INVALID;
            eng_unlock(e);
            constrain_release(e->gc, m); /* nobody wants it any more */
            eng_lock(e);
        } else if (m) {
            q->gm = m;
            q->gram_need = info.min_bytes;
            q->gram_min_tokens = info.min_tokens;
            q->gram = GRAM_READY;
        } else {
            q->gram_status = oom ? ENGINE_ERR_OOM : ENGINE_ERR_GRAMMAR;
            q->gram_err = strdup(err[0] ? err : "out of memory");
            q->gram = GRAM_FAILED;
        }
        pthread_cond_signal(&e->cv); /* the engine thread admits (or refuses) it */
    }
    eng_unlock(e);
    return NULL;
}

int compile_start(engine *e) {
    pthread_cond_init(&e->ccv, NULL);
    int rc = pthread_create(&e->cth, NULL, compile_main, e);
    if (rc != 0) {
        e->cth = 0;
        pthread_cond_destroy(&e->ccv);
    }
    return rc;
}

void compile_stop(engine *e) {
    if (!e->cth) return;
    pthread_mutex_lock(&e->mu);
    e->quit = true;
    pthread_cond_signal(&e->ccv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->cth, NULL);
    e->cth = 0;
    pthread_cond_destroy(&e->ccv);
}
