/* test_kv_move.c — tree compaction of the KV cache (kv_seq_move, issue 17):
 * random accepted paths of up to 16 nodes are moved in a pool of 3 layers x 3
 * kv heads whose every element encodes (position, layer, head, element, K/V),
 * in an F32 and in an F16 pool,
 * and the result must equal the reference (each destination holds its
 * source's rows, every other position is untouched, in K and V); moves that
 * break the contract (destination not before the source, past the length,
 * out of order) and moves into an indexed (shareable) block are refused with
 * nothing changed. */
#include "engine/model/kv.h"
#include "kernels/half.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <string.h>

enum { L = 3, HKV = 3, E = 4, D = HKV * E, B = 4, NB = 16, LEN = 30 };

/* (position, layer, head, element, K/V) as a value exact in F16 as in F32 */
static float code(int pos, int l, int h, int e, int v) { return (float)(pos * 64 + l * 16 + h * 4 + e) * (v ? -1.0f : 1.0f); }

static size_t at(kv_pool *p, kv_seq *s, int pos, int l, int h) {
    return (size_t)s->blocks[pos / B] * p->block_stride + (size_t)l * B * D + ((size_t)h * B + pos % B) * E;
}

static float get(kv_pool *p, kv_seq *s, int pos, int l, int h, int v, int e) {
    size_t o = at(p, s, pos, l, h) + e;
    void *base = v ? p->v : p->k;
    return p->type == KV_F16 ? fp16_to_f32(((uint16_t *)base)[o]) : ((float *)base)[o];
}

static void fill(kv_pool *p, kv_seq *s) {
    for (int pos = 0; pos < LEN; pos++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HKV; h++)
                for (int v = 0; v < 2; v++)
                    for (int e = 0; e < E; e++) {
                        size_t o = at(p, s, pos, l, h) + e;
                        void *base = v ? p->v : p->k;
                        if (p->type == KV_F16) ((uint16_t *)base)[o] = f32_to_fp16(code(pos, l, h, e, v));
                        else ((float *)base)[o] = code(pos, l, h, e, v);
                    }
}

/* every position holds the rows of want[pos] */
static int mismatches(kv_pool *p, kv_seq *s, const int *want) {
    int bad = 0;
    for (int pos = 0; pos < LEN; pos++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HKV; h++)
                for (int v = 0; v < 2; v++)
                    for (int e = 0; e < E; e++) bad += get(p, s, pos, l, h, v, e) != code(want[pos], l, h, e, v);
    return bad;
}

static void test_type(kv_type type) {
    char err[256];
    backend *none = NULL;
    kv_pool *p = kv_pool_create_typed(&none, 1, type, L, D, E, B, NB, NULL, err, sizeof(err));
    CHECK(p != NULL);
    CHECK(kv_pool_bytes(p) == 2 * (size_t)NB * L * B * D * (type == KV_F16 ? 2 : 4));
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
        CHECKF(bad == 0, "%s rep %d: %d elements differ from the reference after moving %d rows", kv_type_name(type),
               rep, bad, n);
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
    fprintf(stderr, "kv_seq_move, %s cache: 500 random paths (%ld rows moved) equal the reference; bad moves and "
                    "moves into indexed blocks refused\n", kv_type_name(type), moved);
    kv_seq_destroy(p, s);
    kv_pool_destroy(p);
}

int main(void) {
    test_type(KV_F32);
    test_type(KV_F16);
    TEST_DONE();
}
