/* test_warena.c — the CPU backend's weight arena: blocks are 64-byte aligned,
 * disjoint and writable; a chunk starts on a 2 MiB boundary (huge pages); a
 * block larger than a chunk gets one of its own; chunks go back to the system
 * when their last block is freed, in any order; and a model loaded, freed and
 * loaded again through the backend leaves nothing mapped behind. */
#include "kernels/backend.h"
#include "kernels/cpu/warena.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    warena *a = warena_create();
    CHECK(a != NULL);
    CHECK(warena_mapped(a) == 0);
    CHECK(warena_alloc(a, 0) == NULL);
    warena_free(a, NULL); /* accepted */

    /* 300 blocks of uneven sizes: about 100 MiB, so at least two chunks */
    enum { NB = 300 };
    uint8_t *p[NB];
    size_t sz[NB];
    for (int i = 0; i < NB; i++) {
        sz[i] = 1 + (size_t)(i * 7919 % 700) * 1000 + (size_t)i * 13;
        p[i] = warena_alloc(a, sz[i]);
        CHECKF(p[i] != NULL, "block %d of %zu bytes: out of memory", i, sz[i]);
        CHECKF(((uintptr_t)p[i] & 63) == 0, "block %d not 64-byte aligned", i);
        memset(p[i], i & 0xFF, sz[i]);
    }
    size_t mapped = warena_mapped(a);
    CHECKF(mapped >= ((size_t)128 << 20), "%zu bytes mapped for about 100 MiB of blocks", mapped);
    CHECKF(mapped % ((size_t)2 << 20) == 0, "chunks are not whole huge pages: %zu bytes", mapped);
    CHECKF(((uintptr_t)p[0] & (((uintptr_t)2 << 20) - 1)) == 0, "the first block does not start a 2 MiB page");
    int bad = 0;
    for (int i = 0; i < NB; i++) /* no block overwrote another */
        for (size_t k = 0; k < sz[i]; k += 997) bad += p[i][k] != (uint8_t)(i & 0xFF);
    CHECKF(bad == 0, "%d bytes overwritten by other blocks", bad);

    /* one block bigger than a chunk */
    size_t big = ((size_t)80 << 20) + 5;
    uint8_t *b = warena_alloc(a, big);
    CHECK(b != NULL && ((uintptr_t)b & (((uintptr_t)2 << 20) - 1)) == 0);
    if (b) b[0] = 1, b[big - 1] = 2;
    CHECK(warena_mapped(a) >= mapped + big);
    warena_free(a, b);
    CHECKF(warena_mapped(a) == mapped, "the big block's chunk stays mapped after its free");

    /* free odd blocks, then even ones backwards: everything goes back */
    for (int i = 1; i < NB; i += 2) warena_free(a, p[i]);
    CHECK(warena_mapped(a) > 0);
    for (int i = NB - 2; i >= 0; i -= 2) warena_free(a, p[i]);
    CHECKF(warena_mapped(a) == 0, "%zu bytes still mapped after every block was freed", warena_mapped(a));
    /* and the arena keeps working */
    void *q = warena_alloc(a, 4096);
    CHECK(q != NULL && warena_mapped(a) > 0);
    warena_destroy(a); /* frees the live chunk too */
    warena_destroy(NULL);

    /* through the backend: Q8_0 matrices are repacked into the arena and
     * released by weight_release (a hot reload's unload) */
    backend *be = backend_cpu_create(2);
    int K = 256, N = 64;
    size_t rb = (size_t)K / 32 * 34;
    uint8_t *host = calloc((size_t)N, rb);
    const void *w[4];
    for (int i = 0; i < 4; i++) {
        int t = 8; /* GGML_TYPE_Q8_0 */
        w[i] = be->i->weight(be, host, &t, N, K);
        CHECKF(w[i] != host && t != 8, "Q8_0 matrix %d was not repacked", i);
    }
    for (int i = 0; i < 4; i++) be->i->weight_release(be, host, w[i]);
    free(host);
    backend_destroy(be);
    TEST_DONE();
}
