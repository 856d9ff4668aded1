/* test_kv.c — paged KV cache: pool accounting stays exact through append,
 * truncate (rollback) and free; and the decode path (forward calls, rollback)
 * performs no heap allocation, counted by interposing malloc. */
#include "engine/kv.h"
#include "engine/mkmodel.h"
#include "engine/model.h"
#include "tests/testutil.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/alloc_hook.h"

static int held(const kv_pool *p, kv_seq **s, int n) {
    int t = 0;
    for (int i = 0; i < n; i++) t += s[i]->n_blocks;
    return t + p->n_free;
}

static void test_accounting(void) {
    char err[256];
    kv_pool *p = kv_pool_create(2, 8, 4, 16, 10, err, sizeof(err));
    CHECK(p != NULL);
    CHECK(p->n_free == 10);
    kv_seq *s[3] = {kv_seq_create(p, 100), kv_seq_create(p, 100), kv_seq_create(p, 32)};
    CHECK(kv_seq_reserve(p, s[0], 1) == 0 && s[0]->n_blocks == 1);
    CHECK(kv_seq_reserve(p, s[0], 16) == 0 && s[0]->n_blocks == 1);
    CHECK(kv_seq_reserve(p, s[0], 17) == 0 && s[0]->n_blocks == 2);
    s[0]->len = 17;
    CHECK(kv_seq_reserve(p, s[1], 48) == 0 && s[1]->n_blocks == 3);
    s[1]->len = 48;
    CHECK(p->n_free == 5);
    CHECK(held(p, s, 3) == 10);
    /* a table limit: 32 positions = 2 blocks */
    CHECK(kv_seq_reserve(p, s[2], 33) == -1 && s[2]->n_blocks == 0 && p->n_free == 5);
    /* pool exhaustion leaves everything unchanged */
    CHECK(kv_seq_reserve(p, s[1], 48 + 16 * 6) == -1 && s[1]->n_blocks == 3 && p->n_free == 5);
    /* rollback inside a block keeps the block; across blocks returns them */
    kv_seq_truncate(p, s[1], 40);
    CHECK(s[1]->len == 40 && s[1]->n_blocks == 3 && p->n_free == 5);
    kv_seq_truncate(p, s[1], 16);
    CHECK(s[1]->len == 16 && s[1]->n_blocks == 1 && p->n_free == 7);
    /* truncate never grows */
    kv_seq_truncate(p, s[1], 30);
    CHECK(s[1]->len == 16);
    kv_seq_truncate(p, s[0], 0);
    CHECK(s[0]->n_blocks == 0 && p->n_free == 9);
    CHECK(held(p, s, 3) == 10);
    /* blocks handed out are distinct */
    CHECK(kv_seq_reserve(p, s[0], 16 * 6) == 0);
    int seen[10] = {0}, dup = 0;
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < s[i]->n_blocks; b++) dup |= seen[s[i]->blocks[b]]++;
    CHECK(!dup);
    CHECK(held(p, s, 3) == 10);
    kv_seq_destroy(p, s[0]);
    kv_seq_destroy(p, s[1]);
    kv_seq_destroy(p, s[2]);
    CHECK(p->n_free == 10);
    kv_pool_destroy(p);
    CHECK(kv_pool_create(0, 8, 4, 16, 10, err, sizeof(err)) == NULL && strstr(err, "bad shape"));
    CHECK(kv_pool_create(2, 8, 3, 16, 10, err, sizeof(err)) == NULL && strstr(err, "bad shape")); /* 8 % 3 */
}

static void test_no_alloc_decode(void) {
    char path[] = "/tmp/specd-kv-XXXXXX", file[64], err[512];
    CHECK(mkdtemp(path) != NULL);
    snprintf(file, sizeof(file), "%s/m.gguf", path);
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.n_layers = 2, o.dim = 64, o.n_heads = 4, o.n_kv_heads = 2, o.ff = 128, o.vocab = 300, o.ctx = 256;
    o.type = GGML_TYPE_Q8_0, o.seed = 7;
    mkmodel_info info;
    CHECKF(mkmodel_random(file, &o, &info, err, sizeof(err)) == 0, "%s", err);
    backend *be = backend_cpu_create(2);
    model *m = model_load(file, be, NULL, err, sizeof(err));
    CHECKF(m != NULL, "%s", err);
    if (!m) return;
    kv_pool *pool = model_kv_pool(m, 16, 16, err, sizeof(err));
    kv_seq *seq = kv_seq_create(pool, 256);
    float *logits = malloc(sizeof(float) * 300 * 8);
    int32_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (i * 37) % 300;
    model_seq s = {.kv = seq, .n = 20, .tokens = toks};
    CHECK(model_forward(m, pool, &s, 1, logits, err, sizeof(err)) == 0);
    int ok = 1;
    counting = 1;
    for (int step = 0; step < 40 && ok; step++) {
        /* a γ=4 verification, then a rollback to accept 2 + correction */
        int base = seq->len;
        s = (model_seq){.kv = seq, .n = 5, .tokens = toks + base, .all_logits = true};
        ok &= model_forward(m, pool, &s, 1, logits, err, sizeof(err)) == 0;
        kv_seq_truncate(pool, seq, base + 3);
        s = (model_seq){.kv = seq, .n = 1, .tokens = toks + seq->len};
        ok &= model_forward(m, pool, &s, 1, logits, err, sizeof(err)) == 0;
    }
    counting = 0;
    CHECKF(ok, "%s", err);
    CHECKF(n_calls == 0, "%ld heap allocations on the decode path", n_calls);
    CHECK(seq->len == 20 + 40 * 4);
    /* positive control: the hook does count */
    counting = 1;
    void *volatile probe = malloc(8);
    counting = 0;
    CHECK(n_calls == 1);
    free(probe);
    /* the KV pool refuses cleanly when full, without changing the sequence */
    int len = seq->len, nfree = pool->n_free;
    s = (model_seq){.kv = seq, .n = 100, .tokens = toks};
    CHECK(model_forward(m, pool, &s, 1, logits, err, sizeof(err)) != 0);
    CHECK(seq->len == len && pool->n_free == nfree);
    free(logits);
    kv_seq_destroy(pool, seq);
    kv_pool_destroy(pool);
    model_free(m);
    backend_destroy(be);
    unlink(file);
    rmdir(path);
}

int main(void) {
    test_accounting();
    test_no_alloc_decode();
    TEST_DONE();
}
