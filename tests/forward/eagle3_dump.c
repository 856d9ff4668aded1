/* eagle3_dump.c — runs an EAGLE-3 head (model.h's eagle3 layout) on rows
 * given by a file and writes what it computed, for test_eagle3_ref.py to
 * compare with its float64 reference:
 *   eagle3_dump [--target TARGET.gguf] HEAD.gguf IN.bin OUT.bin
 * (--target: the head loads beside its target, model_load_eagle3, so a head
 * in llama.cpp's layout without its own token embedding or output head runs
 * on the target's)
 * IN: int32 T1, T2, then T1 + T2 int32 tokens, T1 x 3D float32 target
 * features (three layers per row), T2 x D float32 own features. The head
 * takes the first T1 rows fused by fc in one call, then the T2 rows as its
 * own features in a second call on the same cache (the drafting order).
 * OUT: float32 logits of all T1 + T2 rows (n_vocab each), then the final
 * residual (tap n_layer, D each) of all rows. A second sequence runs the same
 * first call beside an unrelated one: its rows must equal the first call's
 * bit for bit, and a row without features must be refused (exit 1 otherwise). */
#include "engine/model/model.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, const char *err) {
    fprintf(stderr, "eagle3_dump: %s: %s\n", what, err ? err : "");
    return 1;
}

int main(int argc, char **argv) {
    const char *target = NULL;
    if (argc == 6 && !strcmp(argv[1], "--target")) target = argv[2], argc -= 2, argv += 2;
    if (argc != 4) return die("usage", "eagle3_dump [--target TARGET.gguf] HEAD.gguf IN.bin OUT.bin");
    char err[512];
    backend *be = backend_create(BACKEND_CPU, 0, 2, err, sizeof err);
    if (!be) return die("backend", err);
    model *t = target ? model_load(target, be, NULL, NULL, err, sizeof err) : NULL;
    if (target && !t) return die("target", err);
    model *m = t ? model_load_eagle3(argv[1], t, NULL, NULL, err, sizeof err) : model_load(argv[1], be, NULL, NULL, err, sizeof err);
    if (!m) return die("load", err);
    int D = m->hp.dim, V = m->hp.n_vocab, last = m->hp.n_layer;
    FILE *f = fopen(argv[2], "rb");
    int32_t T[2];
    if (!f || fread(T, 4, 2, f) != 2 || T[0] < 1 || T[1] < 1 || T[0] + T[1] > 256) return die("input", argv[2]);
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
    kv_seq *kv = kv_seq_create(pool, 512), *kv2 = kv_seq_create(pool, 512);
    model_seq a = {.kv = kv, .n = T[0], .tokens = tok, .all_logits = true, .feat = ft, .feat_fc = true};
    if (model_forward(m, pool, &a, 1, lg, err, sizeof err) != 0) return die("forward 1", err);
    if (model_tap_rows(m, 0, hid, rows, T[0]) != 0) return die("tap 1", "");
    model_seq b = {.kv = kv, .n = T[1], .tokens = tok + T[0], .all_logits = true, .feat = fo};
    if (model_forward(m, pool, &b, 1, lg + (size_t)T[0] * V, err, sizeof err) != 0) return die("forward 2", err);
    if (model_tap_rows(m, 0, hid + (size_t)T[0] * D, rows, T[1]) != 0) return die("tap 2", "");
    /* the first call again, second in a batch beside own-feature rows */
    float *lg2 = malloc(sizeof(float) * (size_t)(T[1] + T[0]) * V);
    kv_seq_truncate(pool, kv, 0);
    model_seq two[2] = {{.kv = kv2, .n = T[1], .tokens = tok + T[0], .all_logits = true, .feat = fo}, a};
    if (model_forward(m, pool, two, 2, lg2, err, sizeof err) != 0) return die("forward batched", err);
    int same = !memcmp(lg2 + (size_t)T[1] * V, lg, sizeof(float) * (size_t)T[0] * V);
    /* refusals: a row without features; nothing changes in the cache */
    model_seq nf = {.kv = kv2, .n = 1, .tokens = tok};
    int len = kv2->len;
    if (model_forward(m, pool, &nf, 1, lg2, err, sizeof err) == 0 || !strstr(err, "feature") || kv2->len != len)
        return die("refusal", "a row without features was not refused");
    FILE *o = fopen(argv[3], "wb");
    if (!o || fwrite(lg, sizeof(float), (size_t)n * V, o) != (size_t)n * V ||
        fwrite(hid, sizeof(float), (size_t)n * D, o) != (size_t)n * D || fclose(o) != 0)
        return die("output", argv[3]);
    kv_seq_destroy(pool, kv), kv_seq_destroy(pool, kv2);
    kv_pool_destroy(pool);
    model_free(m); /* the head before the target whose weights it may borrow */
    model_free(t);
    backend_destroy(be);
    free(tok), free(ft), free(fo), free(lg), free(hid), free(lg2);
    if (!same) return die("batch", "the fused rows differ when batched beside another sequence");
    return 0;
}
