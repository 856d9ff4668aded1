/* test_load_status.c — loads report what kind of failure they met as a value
 * (engine/errkind.h), never only in words. With tests/alloc_hook.h failing
 * the k-th host allocation, for every k of a successful load in turn: a GGUF
 * index, a model, a KV pool and Medusa heads each fail with ENGINE_ERR_OOM
 * and a message that says "out of memory" (never a crash, never a model with
 * holes, no backend memory left behind). A corrupt, truncated or missing file
 * is ENGINE_ERR_INVALID, with memory to spare or not. engine_create carries
 * the kind up from the pair: a KV pool that cannot be had (every allocation
 * of 1 MiB or more fails) is ENGINE_ERR_OOM, a corrupt target or missing
 * Medusa heads ENGINE_ERR_INVALID, a good pair ENGINE_OK. */
#include "tests/alloc_hook.h"

#include "engine/engine.h"
#include "engine/spec/proposers/medusa.h"
#include "tests/spec/spec_util.h"

#ifdef ALLOC_HOOK_SANITIZED
int main(void) { SKIP("the allocation hook cannot run under a sanitizer"); }
#else

/* Whether a load said it ran out of memory, by its status and in its words. */
static bool says_oom(engine_status st, const char *err) {
    return st == ENGINE_ERR_OOM && strstr(err, "out of memory") != NULL;
}

/* A load to sweep: returns the loaded object (NULL on failure, *st and err
 * filled) and frees one. */
typedef struct {
    const char *name;
    void *(*load)(void *ctx, engine_status *st, char *err, size_t n);
    void (*release)(void *ctx, void *obj);
    void *ctx;
} load_case;

/* Runs the load once counting its allocations, then once per allocation
 * with that one failing. A failing allocation may be one the load can do
 * without (a faster layout it falls back from); every other must fail the
 * load as a shortage. Returns the allocations of the successful load. */
static long sweep(const load_case *lc, backend *be) {
    char err[1024];
    engine_status st = ENGINE_ERR_BACKEND;
    /* once first: the backend keeps scratch it grew, so later loads allocate less */
    void *obj = lc->load(lc->ctx, &st, err, sizeof(err));
    if (obj) lc->release(lc->ctx, obj);
    fail_at = 0, n_calls = 0, counting = 1;
    obj = lc->load(lc->ctx, &st, err, sizeof(err));
    counting = 0;
    long total = n_calls;
    CHECKF(obj && st == ENGINE_OK, "%s: the load itself fails: %s", lc->name, obj ? engine_status_name(st) : err);
    if (obj) lc->release(lc->ctx, obj);
    size_t used = be ? backend_cpu_memory_used(be) : 0;
    int survived = 0, wrong = 0;
    for (long k = 1; k <= total; k++) {
        st = ENGINE_OK;
        err[0] = 0;
        fail_at = k, n_calls = 0, counting = 1;
        obj = lc->load(lc->ctx, &st, err, sizeof(err));
        counting = 0;
        fail_at = 0;
        if (obj) {
            survived++;
            CHECKF(st == ENGINE_OK, "%s, allocation %ld failing: loaded with status %s", lc->name, k,
                   engine_status_name(st));
            lc->release(lc->ctx, obj);
        } else if (!says_oom(st, err) && wrong++ < 3) {
            CHECKF(0, "%s, allocation %ld of %ld failing: status %s, message '%s'", lc->name, k, total,
                   engine_status_name(st), err);
        }
        if (be) CHECKF(backend_cpu_memory_used(be) == used, "%s, allocation %ld failing: backend memory %zu, was %zu",
                       lc->name, k, backend_cpu_memory_used(be), used);
    }
    CHECKF(wrong == 0, "%s: %d failed allocations not reported as a shortage", lc->name, wrong);
    fprintf(stderr, "%s: %ld allocations, each failing in turn: %ld out of memory, %d done without\n", lc->name, total,
            total - survived, survived);
    return total;
}

/* ---- the loads ---------------------------------------------------------------- */

typedef struct {
    const char *path;
    backend *be;
} file_ctx;

static void *gguf_load(void *ctx, engine_status *st, char *err, size_t n) {
    return gguf_open(((file_ctx *)ctx)->path, st, err, n);
}
static void gguf_release(void *ctx, void *obj) { gguf_close(obj); }

static void *model_load_case(void *ctx, engine_status *st, char *err, size_t n) {
    file_ctx *c = ctx;
    model_params mp = {.max_batch = 64, .max_ctx = 256};
    return model_load(c->path, c->be, &mp, st, err, n);
}
static void model_release(void *ctx, void *obj) { model_free(obj); }

static void *kv_load(void *ctx, engine_status *st, char *err, size_t n) {
    return kv_pool_create_on(((file_ctx *)ctx)->be, 2, 64, 64, 16, 32, st, err, n);
}
static void kv_release(void *ctx, void *obj) { kv_pool_destroy(obj); }

static void *medusa_load(void *ctx, engine_status *st, char *err, size_t n) {
    return medusa_heads_load(((file_ctx *)ctx)->path, NULL, 0, 0, st, err, n);
}
static void medusa_release(void *ctx, void *obj) { medusa_heads_destroy(obj); }

/* A copy of the first n bytes of src at dst (a GGUF cut short). */
static void copy_head(const char *dst, const char *src, size_t n) {
    static char buf[1 << 16];
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    if (!in || !out) SKIP("cannot copy %s to %s", src, dst);
    size_t got = fread(buf, 1, n < sizeof(buf) ? n : sizeof(buf), in);
    fwrite(buf, 1, got, out);
    fclose(in);
    fclose(out);
}

/* Bad files are ENGINE_ERR_INVALID for every loader, whatever memory there is. */
static void check_bad_files(backend *be, const char *const *bad, int n_bad) {
    char err[1024];
    for (int i = 0; i < n_bad; i++) {
        engine_status st = ENGINE_OK;
        gguf_file *g = gguf_open(bad[i], &st, err, sizeof(err));
        CHECKF(!g && st == ENGINE_ERR_INVALID && strstr(err, bad[i]), "gguf_open %s: %s (%s)", bad[i],
               g ? "opened" : err, engine_status_name(st));
        gguf_close(g);
        st = ENGINE_OK;
        model *m = model_load(bad[i], be, NULL, &st, err, sizeof(err));
        CHECKF(!m && st == ENGINE_ERR_INVALID && !strstr(err, "out of memory"), "model_load %s: %s (%s)", bad[i],
               m ? "loaded" : err, engine_status_name(st));
        model_free(m);
        st = ENGINE_OK;
        medusa_heads *mh = medusa_heads_load(bad[i], NULL, 0, 0, &st, err, sizeof(err));
        CHECKF(!mh && st == ENGINE_ERR_INVALID, "medusa_heads_load %s: %s (%s)", bad[i], mh ? "loaded" : err,
               engine_status_name(st));
        medusa_heads_destroy(mh);
    }
}

/* engine_create's status, with allocations of fail_over bytes or more failing (0: none). */
static engine_status engine_status_of(const char *target, const char *medusa, size_t fail_over, char *err, size_t n) {
    engine_config c = engine_config_default();
    c.target_path = target;
    c.medusa_path = medusa;
    c.threads = 1;
    c.max_running = 2;
    c.max_ctx = 256;
    c.kv_blocks = 4096; /* 5 layers x 16 positions x 64 floats x 4096 blocks: 80 MiB for K alone */
    c.calibrate = false;
    engine_status st = ENGINE_ERR_BACKEND;
    fail_bytes = fail_over, counting = fail_over > 0;
    engine *e = engine_create(&c, &st, err, n);
    counting = 0, fail_bytes = 0;
    if (e && st != ENGINE_OK) snprintf(err, n, "created with status %s", engine_status_name(st));
    engine_destroy(e);
    return e ? ENGINE_OK : st;
}

int main(void) {
    char tpath[512], junk[512], cut[512], heads[512], err[1024];
    tu_model(tpath, sizeof(tpath), "stories260K.gguf");
    backend *be = backend_cpu_create(1);

    /* every failing allocation of a good load is a shortage */
    file_ctx fc = {tpath, be};
    load_case gc = {"gguf_open", gguf_load, gguf_release, &fc};
    CHECK(sweep(&gc, NULL) > 0);
    load_case mc = {"model_load", model_load_case, model_release, &fc};
    CHECK(sweep(&mc, be) > 0);
    load_case kc = {"kv_pool_create", kv_load, kv_release, &fc};
    CHECK(sweep(&kc, be) > 0);
    /* Q8_0 heads: the quantized copy is one more allocation */
    medusa_heads *mh = medusa_heads_create(2, 1, 0, 64, 512, true, true, NULL, err, sizeof(err));
    CHECKF(mh != NULL, "%s", err);
    if (!mh) return 1;
    snprintf(mh->target_id, sizeof(mh->target_id), "test-target");
    CHECKF(medusa_heads_set_type(mh, GGML_TYPE_Q8_0, NULL, err, sizeof(err)) == 0, "%s", err);
    su_tmp_path(heads, sizeof(heads), "heads.gguf");
    CHECKF(medusa_heads_save(mh, heads, err, sizeof(err)) == 0, "%s", err);
    medusa_heads_destroy(mh);
    file_ctx hc = {heads, be};
    load_case lc = {"medusa_heads_load", medusa_load, medusa_release, &hc};
    CHECK(sweep(&lc, NULL) > 0);

    /* bad input is not a shortage */
    su_tmp_path(junk, sizeof(junk), "not-a-model.gguf");
    su_tmp_path(cut, sizeof(cut), "cut-short.gguf");
    FILE *jf = fopen(junk, "wb");
    if (!jf) SKIP("cannot write %s", junk);
    fputs("this is a text file, not a GGUF model\n", jf);
    fclose(jf);
    copy_head(cut, tpath, 4096);
    const char *bad[] = {junk, cut, "/nonexistent/specd-model.gguf"};
    check_bad_files(be, bad, 3);
    /* a model file is no Medusa heads file */
    engine_status st = ENGINE_OK;
    mh = medusa_heads_load(tpath, NULL, 0, 0, &st, err, sizeof(err));
    CHECKF(!mh && st == ENGINE_ERR_INVALID, "heads from a model file: %s (%s)", mh ? "loaded" : err,
           engine_status_name(st));
    medusa_heads_destroy(mh);

    /* up through engine_create */
    st = engine_status_of(tpath, NULL, 0, err, sizeof(err));
    CHECKF(st == ENGINE_OK, "engine_create: %s (%s)", err, engine_status_name(st));
    st = engine_status_of(tpath, NULL, (size_t)1 << 20, err, sizeof(err));
    CHECKF(says_oom(st, err), "engine_create, large allocations failing: %s (%s)", err, engine_status_name(st));
    fprintf(stderr, "engine_create without memory: %s\n", err);
    for (int i = 0; i < 2; i++) {
        st = engine_status_of(bad[i], NULL, 0, err, sizeof(err));
        CHECKF(st == ENGINE_ERR_INVALID, "engine_create on %s: %s (%s)", bad[i], err, engine_status_name(st));
    }
    st = engine_status_of(tpath, "/nonexistent/heads.gguf", 0, err, sizeof(err));
    CHECKF(st == ENGINE_ERR_INVALID, "engine_create with missing heads: %s (%s)", err, engine_status_name(st));

    const char *tmp[] = {"heads.gguf", "not-a-model.gguf", "cut-short.gguf"};
    su_tmp_cleanup(tmp, 3);
    backend_destroy(be);
    TEST_DONE();
}
#endif
