/* test_kv_move.c — tree compaction of the KV cache (kv_seq_move, issue 17):
 * random accepted paths of up to 16 nodes are moved in a pool of 3 layers x 3
 * kv heads whose every float encodes (position, layer, head, element, K/V),
 * and the result must equal the reference (each destination holds its
 * source's rows, every other position is untouched, in K and V); moves that
 * break the contract (destination not before the source, past the length,
 * out of order) and moves into an indexed (shareable) block are refused with
 * nothing changed. */
#include "engine/model/kv.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <string.h>

enum { L = 3, HKV = 3, E = 4, D = HKV * E, B = 4, NB = 16, LEN = 30 };

static float code(int pos, int l, int h, int e, int v) { return (float)(pos * 1000 + l * 100 + h * 10 + e) + (v ? 0.5f : 0); }

static float *at(kv_pool *p, kv_seq *s, int pos, int l, int h, int v) {
    size_t off = (size_t)s->blocks[pos / B] * p->block_stride + (size_t)l * B * D + ((size_t)h * B + pos % B) * E;
    return (v ? p->v : p->k) + off;
}

static void fill(kv_pool *p, kv_seq *s) {
    for (int pos = 0; pos < LEN; pos++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HKV; h++)
                for (int v = 0; v < 2; v++)
                    for (int e = 0; e < E; e++) at(p, s, pos, l, h, v)[e] = code(pos, l, h, e, v);
}

/* every position holds the rows of want[pos] */
static int mismatches(kv_pool *p, kv_seq *s, const int *want) {
    int bad = 0;
    for (int pos = 0; pos < LEN; pos++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HKV; h++)
                for (int v = 0; v < 2; v++)
                    for (int e = 0; e < E; e++) bad += at(p, s, pos, l, h, v)[e] != code(want[pos], l, h, e, v);
    return bad;
}

int main(void) {
    char err[256];
    kv_pool *p = kv_pool_create(L, D, E, B, NB, NULL, err, sizeof(err));
    CHECK(p != NULL);
    kv_seq *s = kv_seq_create(p, 64);
    CHECK(kv_seq_reserve(p, s, LEN) == 0);
    s->len = LEN;
    uint64_t rs = 12345;
    long moved = 0;
    for (int rep = 0; rep < 500; rep++) {
        fill(p, s);
        int want[LEN], dst[16], src[16], n = 0, k = 0, path[16];
        for (int i = 0; i < LEN; i++) want[i] = i;
        int base = (int)((rs = rs * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % 12;
        for (int node = 0; node < 16 && k < 16; node++) /* a random increasing path over 16 nodes */
            if (((rs = rs * 6364136223846793005ULL + 1442695040888963407ULL) >> 60) & 1) path[k++] = node;
        for (int j = 0; j < k; j++)
            if (path[j] != j) dst[n] = base + 1 + j, src[n++] = base + 1 + path[j];
        for (int j = 0; j < n; j++) want[dst[j]] = src[j];
        CHECK(kv_seq_move(p, s, dst, src, n) == 0);
        int bad = mismatches(p, s, want);
        CHECKF(bad == 0, "rep %d: %d floats differ from the reference after moving %d rows", rep, bad, n);
        moved += n;
    }
    /* refusals leave the cache untouched */
    fill(p, s);
    int ident[LEN];
    for (int i = 0; i < LEN; i++) ident[i] = i;
    int d1[2] = {5, 6}, s1[2] = {5, 9};   /* dst == src */
    int d2[1] = {20}, s2[1] = {LEN};      /* past the length */
    int d3[2] = {8, 7}, s3[2] = {10, 12}; /* out of order */
    CHECK(kv_seq_move(p, s, d1, s1, 2) == -1);
    CHECK(kv_seq_move(p, s, d2, s2, 1) == -1);
    CHECK(kv_seq_move(p, s, d3, s3, 2) == -1);
    CHECK(mismatches(p, s, ident) == 0);
    /* an indexed block (published: another sequence may attach it) is never written */
    int32_t toks[LEN];
    for (int i = 0; i < LEN; i++) toks[i] = i;
    kv_pool_set_prefix(p, true, 77, 0);
    kv_seq_publish(p, s, toks, LEN);
    int d4[1] = {2}, s4[1] = {25};
    CHECK(kv_seq_move(p, s, d4, s4, 1) == -1);
    CHECK(mismatches(p, s, ident) == 0);
    /* past the published blocks (the last, partial block is not indexed) a move works */
    int d6[1] = {28}, s6[1] = {29};
    CHECK(kv_seq_move(p, s, d6, s6, 1) == 0);
    ident[28] = 29;
    CHECK(mismatches(p, s, ident) == 0);
    fprintf(stderr, "kv_seq_move: 500 random paths (%ld rows moved) equal the reference; bad moves and moves into "
                    "indexed blocks refused\n", moved);
    kv_seq_destroy(p, s);
    kv_pool_destroy(p);
    TEST_DONE();
}
