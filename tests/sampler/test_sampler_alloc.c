/* test_sampler_alloc.c — the per-token sampler path never allocates: this executable
 * interposes malloc and friends (glibc lets the executable define them; they forward
 * to __libc_*) and counts calls across 1000+ sampler calls made after create. */
#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "tests/testutil.h"
#include "tests/sampler/chi2.h"

#include <stddef.h>
#include <string.h>

#include "tests/alloc_hook.h"

int main(void) {
#ifdef ALLOC_HOOK_SANITIZED
    SKIP("malloc interposition conflicts with the sanitizer runtime");
#else
    enum { V = 32000 };
    float *logits = malloc(V * sizeof *logits), *probs = malloc(V * sizeof *probs);
    float *q = malloc(V * sizeof *q);
    uint64_t st = 1;
    for (int i = 0; i < V; i++) logits[i] = (float)(t_gauss(&st) * 3.0);

    /* positive control: the hook sees allocations, including sampler_create's */
    counting = 1;
    sampler *s = sampler_create(V);
    void *volatile probe = malloc(64);
    counting = 0;
    long during_create = n_calls;
    free(probe);
    CHECKF(s != NULL && during_create >= 2, "hook counted %ld calls for create + probe", during_create);

    const sampler_config cfgs[6] = {
        { 1.0f, 0, 1.0f, 0.0f }, { 0.0f, 0, 1.0f, 0.0f }, { 0.8f, 40, 1.0f, 0.0f },
        { 1.0f, 0, 0.9f, 0.0f }, { 1.0f, 0, 1.0f, 0.05f }, { 0.7f, 100, 0.95f, 0.02f },
    };
    sampler_probs(s, &cfgs[5], logits, q);
    n_calls = 0;
    counting = 1;
    long sink = 0;
    for (int i = 0; i < 1200; i++) {
        const sampler_config *c = &cfgs[i % 6];
        logits[i % V] += 0.5f; /* vary the input a little */
        sampler_probs(s, c, logits, probs);
        sink += sampler_sample(probs, V, rng_uniform(3, (uint64_t)i, RNG_SAMPLE, 0));
        sink += sampler_sample_residual(probs, q, V, rng_uniform(3, (uint64_t)i, RNG_RESIDUAL, 0));
        sink += sampler_sample_logits(s, c, logits, NULL, 3, (uint64_t)i);
        sink += sampler_argmax(logits, V);
    }
    counting = 0;
    CHECKF(n_calls == 0, "%ld allocations during 1200 rounds of sampler calls", n_calls);
    fprintf(stderr, "allocations on the sampling path: %ld (checksum %ld)\n", n_calls, sink);
    sampler_destroy(s);
    free(logits); free(probs); free(q);
    TEST_DONE();
#endif
}
