/* test_spec_pair.c — pairing checks: a draft whose tokenizer differs from the
 * target's (aidreams260K for stories260K: same vocabulary size, other tokens)
 * is refused with a message naming the first differing token and both strings;
 * a good pair loads with its identities recorded and the draft memory share
 * reported (with a warning above the limit). */
#include "tests/spec/spec_util.h"

int main(void) {
    char tpath[512], dpath[512], apath[512], err[1024];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    tu_model(dpath, sizeof(dpath), "llama2xs-281K.gguf");
    tu_model(apath, sizeof(apath), "aidreams260K.gguf");
    backend *be = backend_cpu_create(1);

    err[0] = 0;
    spec_pair *bad = spec_pair_load(tpath, apath, be, NULL, NULL, NULL, err, sizeof(err));
    CHECK(bad == NULL);
    fprintf(stderr, "refused: %s\n", err);
    CHECKF(strstr(err, "token 259") != NULL, "message does not name token 259: %s", err);
    CHECKF(strstr(err, "'\xe2\x96\x81t'") != NULL, "message lacks the target's string '\xe2\x96\x81t': %s", err);
    CHECKF(strstr(err, "'in'") != NULL, "message lacks the draft's string 'in': %s", err);
    CHECKF(strstr(err, "aidreams260K.gguf") != NULL, "message does not name the draft file: %s", err);
    spec_pair_free(bad);

    /* the good pair: identities, memory share, and the warning (the draft here is
     * as large as the target: far above 20%) */
    char logbuf[4096] = "";
    FILE *log = fmemopen(logbuf, sizeof(logbuf) - 1, "w");
    spec_pair *sp = spec_pair_load(tpath, dpath, be, NULL, log, NULL, err, sizeof(err));
    fclose(log);
    CHECKF(sp != NULL, "%s", err);
    if (sp) {
        CHECK(sp->target_id.id[0] && sp->draft_id.id[0] && strcmp(sp->target_id.id, sp->draft_id.id) != 0);
        CHECK(sp->target_id.tokenizer_hash == sp->draft_id.tokenizer_hash);
        CHECK(sp->draft_mem_pct > 50 && sp->draft_mem_pct < 200);
        CHECKF(strstr(logbuf, "WARNING") != NULL, "no warning for a draft at %.1f%% of the target: %s",
               sp->draft_mem_pct, logbuf);
        /* the same files give the same identities */
        spec_pair *again = spec_pair_load(tpath, dpath, be, NULL, NULL, NULL, err, sizeof(err));
        CHECK(again && !strcmp(again->target_id.id, sp->target_id.id) && !strcmp(again->draft_id.id, sp->draft_id.id));
        spec_pair_free(again);
        /* aidreams has other weights and tokenizer: another identity */
        spec_pair *ai = spec_pair_load(apath, NULL, be, NULL, NULL, NULL, err, sizeof(err));
        CHECK(ai && strcmp(ai->target_id.id, sp->target_id.id) != 0 &&
              ai->target_id.tokenizer_hash != sp->target_id.tokenizer_hash);
        spec_pair_free(ai);
    }
    spec_pair_free(sp);
    backend_destroy(be);
    TEST_DONE();
}
