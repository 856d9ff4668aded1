/* pair_load.c — the pair with the draft model and the lookup (see
 * pair_load.h): open the target, build and install each proposer, size. */
#include "engine/spec/proposers/pair_load.h"
#include "engine/spec/proposers/draft_model.h"
#include "engine/spec/proposers/draft_ngram.h"
#include "engine/errkind.h"
#include "engine/util.h"

spec_pair *spec_pair_load(const char *target_path, const char *draft_path, backend *be, const spec_pair_params *pp,
                          FILE *log, engine_status *st, char *err, size_t errlen) {
    spec_pair_params prm = pp ? *pp : (spec_pair_params){0};
    spec_pair *sp = spec_pair_open(target_path, be, &prm, st, err, errlen);
    if (!sp) return NULL;
    if (draft_path) { /* its weights before the pools: spec_pair_ready calls its reserve after the target's */
        engine_status dst = ENGINE_OK;
        drafter *dm = draft_model_load(draft_path, be, sp->target->mp.max_ctx, sp->target->mp.kv, sp->tok,
                                       sp->n_vocab, &dst, err, errlen);
        if (dm) {
            spec_pair_set_drafter(sp, SPEC_DRAFTER_MODEL, dm);
        } else if (dst == ENGINE_ERR_OOM) {
            spec_pair_dropped(sp, "draft", draft_path, err, log);
        } else { /* the draft's own failure, not a shortage */
            engine_status_set(st, dst);
            goto fail;
        }
    }
    sp->ngram_min = prm.ngram_min ? prm.ngram_min : 2;
    sp->ngram_max = prm.ngram_max ? prm.ngram_max : 5;
    drafter *ng = draft_ngram_create(sp->n_vocab, prm.ngram_min, prm.ngram_max);
    if (!ng) {
        util_fail_st(st, ENGINE_ERR_INVALID, err, errlen, "n-gram drafter: lengths %d..%d outside 1..%d (or out of "
                     "memory)", prm.ngram_min, prm.ngram_max, NGRAM_MAX_N);
        goto fail;
    }
    spec_pair_set_drafter(sp, SPEC_DRAFTER_NGRAM, ng);
    if (spec_pair_ready(sp, &prm, log, st, err, errlen) != 0) goto fail;
    return sp;
fail:
    spec_pair_free(sp);
    return NULL;
}
