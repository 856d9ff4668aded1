/* eagle3_pair_dump.c — eagle3_dump for a head loaded beside its target
 * (model_load_eagle3), so that a head in llama.cpp's layout without its own
 * token embedding or output head runs on the target's:
 *   eagle3_pair_dump TARGET.gguf HEAD.gguf IN.bin OUT.bin
 * IN and OUT as eagle3_dump's: T1 rows of fused target features, then T2 rows
 * of the head's own features on the same cache; OUT holds the logits of all
 * rows (n_vocab each), then their final residual (D each). A load failure
 * prints the loader's reason and exits 1. */
#include "engine/model/model.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>

static int die(const char *what, const char *err) {
    fprintf(stderr, "eagle3_pair_dump: %s: %s\n", what, err ? err : "");
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) return die("usage", "eagle3_pair_dump TARGET.gguf HEAD.gguf IN.bin OUT.bin");
    char err[512];
    backend *be = backend_create(BACKEND_CPU, 0, 2, err, sizeof err);
    if (!be) return die("backend", err);
    model *t = model_load(argv[1], be, NULL, NULL, err, sizeof err);
    if (!t) return die("target", err);
    model *m = model_load_eagle3(argv[2], t, NULL, NULL, err, sizeof err);
    if (!m) return die("load", err);
    int D = m->hp.dim, V = m->hp.n_vocab, last = m->hp.n_layer;
    FILE *f = fopen(argv[3], "rb");
    int32_t T[2];
    if (!f || fread(T, 4, 2, f) != 2 || T[0] < 1 || T[1] < 1 || T[0] + T[1] > 256) return die("input", argv[3]);
    int n = T[0] + T[1];
    int32_t *tok = malloc(4 * (size_t)n);
    float *ft = malloc(sizeof(float) * 3 * (size_t)T[0] * D), *fo = malloc(sizeof(float) * (size_t)T[1] * D);
    if (fread(tok, 4, (size_t)n, f) != (size_t)n || fread(ft, 4, 3 * (size_t)T[0] * D, f) != 3 * (size_t)T[0] * D ||
        fread(fo, 4, (size_t)T[1] * D, f) != (size_t)T[1] * D)
        return die("input", "short file");
    fclose(f);
    if (model_set_taps(m, &last, 1) != 0) return die("taps", "");
    kv_pool *pool = model_kv_pool(m, 16, 64, NULL, err, sizeof err);
    if (!pool) return die("pool", err);
    float *lg = malloc(sizeof(float) * (size_t)n * V), *hid = malloc(sizeof(float) * (size_t)n * D);
    int rows[256];
    for (int i = 0; i < 256; i++) rows[i] = i;
    kv_seq *kv = kv_seq_create(pool, 512);
    model_seq a = {.kv = kv, .n = T[0], .tokens = tok, .all_logits = true, .feat = ft, .feat_fc = true};
    if (model_forward(m, pool, &a, 1, lg, err, sizeof err) != 0) return die("forward 1", err);
    if (model_tap_rows(m, 0, hid, rows, T[0]) != 0) return die("tap 1", "");
    model_seq b = {.kv = kv, .n = T[1], .tokens = tok + T[0], .all_logits = true, .feat = fo};
    if (model_forward(m, pool, &b, 1, lg + (size_t)T[0] * V, err, sizeof err) != 0) return die("forward 2", err);
    if (model_tap_rows(m, 0, hid + (size_t)T[0] * D, rows, T[1]) != 0) return die("tap 2", "");
    FILE *o = fopen(argv[4], "wb");
    if (!o || fwrite(lg, sizeof(float), (size_t)n * V, o) != (size_t)n * V ||
        fwrite(hid, sizeof(float), (size_t)n * D, o) != (size_t)n * D || fclose(o) != 0)
        return die("output", argv[4]);
    kv_seq_destroy(pool, kv);
    kv_pool_destroy(pool);
    model_free(m); /* the head before the target whose weights it borrowed */
    model_free(t);
    backend_destroy(be);
    free(tok), free(ft), free(fo), free(lg), free(hid);
    return 0;
}
