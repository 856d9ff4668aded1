/* test_arch_tree.c — tree verification (ancestor mask + explicit positions) on qwen2, qwen3 and
 * mistral (sliding window) random models: every tree node's logits must equal the logits of
 * its root-to-node path evaluated as a plain causal sequence after the same prefix. */
#include "cli/mkmodel.h"
#include "engine/model/model.h"
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_PREFIX 7
#define N_TREE 6

/* parent of each tree node (-1: child of the prefix); depth follows */
static const int parent[N_TREE] = {-1, 0, 0, 2, 3, 4};

static void check_arch(const char *arch, int window, const char *dir, backend *be) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, arch);
    mkmodel_opts o;
    mkmodel_opts_init(&o);
    o.arch = arch;
    o.sliding_window = window;
    o.dim = 64, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2, o.ff = 128, o.ctx = 64, o.seed = 21;
    CHECKF(mkmodel_random(path, &o, NULL, err, sizeof err) == 0, "%s: mkmodel: %s", arch, err);
    model *m = model_load(path, be, NULL, NULL, err, sizeof err);
    CHECKF(m != NULL, "%s: load: %s", arch, err);
    if (!m) return;
    CHECKF(m->hp.sliding_window == window && m->hp.rope_neox == !strncmp(arch, "qwen", 4) &&
           m->hp.qk_norm == !strcmp(arch, "qwen3"),
           "%s: window %d neox %d", arch, m->hp.sliding_window, m->hp.rope_neox);
    int V = m->hp.n_vocab;
    kv_pool *pool = model_kv_pool(m, 4, 64, NULL, err, sizeof err); /* small blocks: the tree straddles them */
    CHECKF(pool != NULL, "%s: pool: %s", arch, err);
    kv_seq *kv = kv_seq_create(pool, 64);
    int32_t prefix[N_PREFIX], tree[N_TREE], pos[N_TREE], depth[N_TREE];
    uint8_t mask[N_TREE * N_TREE] = {0};
    for (int i = 0; i < N_PREFIX; i++) prefix[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < N_TREE; i++) {
        tree[i] = (int32_t)((i * 53 + 5) % V);
        depth[i] = parent[i] < 0 ? 0 : depth[parent[i]] + 1;
        pos[i] = N_PREFIX + depth[i];
        for (int a = i; a >= 0; a = parent[a]) mask[i * N_TREE + a] = 1;
    }
    float *lt = malloc((size_t)N_TREE * V * sizeof(float)), *lp = malloc((size_t)(N_PREFIX + N_TREE) * V * 4);
    model_seq sq = {.kv = kv, .n = N_PREFIX, .tokens = prefix};
    CHECKF(model_forward(m, pool, &sq, 1, lp, err, sizeof err) == 0, "%s: prefix: %s", arch, err);
    sq = (model_seq){.kv = kv, .n = N_TREE, .tokens = tree, .pos = pos, .mask = mask, .all_logits = true};
    CHECKF(model_forward(m, pool, &sq, 1, lt, err, sizeof err) == 0, "%s: tree: %s", arch, err);
    for (int i = 0; i < N_TREE; i++) {
        int32_t seq[N_PREFIX + N_TREE];
        memcpy(seq, prefix, sizeof prefix);
        int n = N_PREFIX + depth[i] + 1;
        for (int a = i; a >= 0; a = parent[a]) seq[N_PREFIX + depth[a]] = tree[a];
        kv_seq_truncate(pool, kv, 0);
        model_seq ps = {.kv = kv, .n = n, .tokens = seq};
        CHECKF(model_forward(m, pool, &ps, 1, lp, err, sizeof err) == 0, "%s: path: %s", arch, err);
        float e = tu_max_rel(lt + (size_t)i * V, lp, V);
        CHECKF(e <= 1e-5f, "%s: tree node %d (depth %d) vs its causal path: rel err %g", arch, i, depth[i], e);
    }
    /* the window must matter: the same tree on the model without it differs at deep nodes */
    if (window) {
        m->hp.sliding_window = 0;
        kv_seq_truncate(pool, kv, 0);
        sq = (model_seq){.kv = kv, .n = N_PREFIX, .tokens = prefix};
        model_forward(m, pool, &sq, 1, lp, err, sizeof err);
        sq = (model_seq){.kv = kv, .n = N_TREE, .tokens = tree, .pos = pos, .mask = mask, .all_logits = true};
        model_forward(m, pool, &sq, 1, lp, err, sizeof err);
        float e = tu_max_rel(lt + (size_t)(N_TREE - 1) * V, lp + (size_t)(N_TREE - 1) * V, V);
        CHECKF(e > 1e-3f, "%s: without the window the deepest node changes (rel %g)", arch, e);
    }
    free(lt);
    free(lp);
    kv_seq_destroy(pool, kv);
    kv_pool_destroy(pool);
    model_free(m);
    unlink(path);
}

int main(void) {
    char dir[] = "/tmp/specd-arch-XXXXXX";
    if (!mkdtemp(dir)) SKIP("no temp dir");
    backend *be = backend_cpu_create(1);
    check_arch("qwen2", 0, dir, be);
    check_arch("qwen3", 0, dir, be);
    check_arch("mistral", 3, dir, be);
    check_arch("mistral", 1, dir, be);
    backend_destroy(be);
    rmdir(dir);
    TEST_DONE();
}
