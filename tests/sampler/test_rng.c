/* test_rng.c — the counter-based generator: Philox4x32-10 known answers, the key
 * layout, [0,1) with 53 bits, uniformity (χ², 100 bins) and independence between
 * purposes, positions, seeds and counters (2-D χ² and correlation). */
#include "engine/sample/rng.h"
#include "tests/testutil.h"
#include "tests/sampler/chi2.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Random123 tests/kat_vectors, "philox4x32 10" lines: ctr[4], key[2], expected[4] */
static const uint32_t KAT[3][10] = {
    { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
    { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
    { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
      0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 },
};

static void test_known_answers(void) {
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        rng_philox4x32_10(out, &KAT[t][0], &KAT[t][4]);
        for (int w = 0; w < 4; w++)
            CHECKF(out[w] == KAT[t][6 + w], "vector %d word %d: %08x want %08x", t, w, out[w], KAT[t][6 + w]);
        /* the key layout: seed = key words (low first), counter = (pos lo, pos hi, purpose, counter) */
        uint64_t seed = (uint64_t)KAT[t][4] | ((uint64_t)KAT[t][5] << 32);
        uint64_t pos = (uint64_t)KAT[t][0] | ((uint64_t)KAT[t][1] << 32);
        uint64_t want = (uint64_t)KAT[t][6] | ((uint64_t)KAT[t][7] << 32);
        uint64_t got = rng_u64(seed, pos, KAT[t][2], KAT[t][3]);
        CHECKF(got == want, "rng_u64 layout, vector %d: %016llx want %016llx", t,
               (unsigned long long)got, (unsigned long long)want);
        double u = rng_uniform(seed, pos, KAT[t][2], KAT[t][3]);
        CHECK(u == (double)(want >> 11) * 0x1.0p-53);
    }
}

static void test_range_and_resolution(void) {
    int fine = 0, outside = 0;
    double lo = 1.0, hi = 0.0;
    for (uint64_t i = 0; i < 200000; i++) {
        double u = rng_uniform(7, i, RNG_SAMPLE, 0);
        outside += !(u >= 0.0 && u < 1.0);
        if (u < lo) lo = u;
        if (u > hi) hi = u;
        /* bits below 2^-32 are set: more than 32 bits of resolution */
        if (fmod(u * 0x1.0p32, 1.0) != 0.0) fine++;
    }
    CHECKF(outside == 0, "%d draws outside [0, 1)", outside);
    CHECKF(fine > 199000, "only %d of 200000 draws use bits below 2^-32", fine);
    CHECKF(lo < 1e-4 && hi > 1.0 - 1e-4, "range [%g, %g]", lo, hi);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_pure_and_distinct(void) {
    /* same key → same value, whatever was computed in between */
    uint64_t a = rng_u64(42, 1000, RNG_ACCEPT, 3);
    for (int i = 0; i < 100; i++) (void)rng_u64((uint64_t)i, (uint64_t)i * 7, RNG_SAMPLE, 0);
    CHECK(rng_u64(42, 1000, RNG_ACCEPT, 3) == a);
    /* every field of the key changes the value */
    CHECK(rng_u64(43, 1000, RNG_ACCEPT, 3) != a);
    CHECK(rng_u64(42, 1001, RNG_ACCEPT, 3) != a);
    CHECK(rng_u64(42, 1000, RNG_RESIDUAL, 3) != a);
    CHECK(rng_u64(42, 1000, RNG_ACCEPT, 4) != a);
    CHECK(rng_u64(42, 1000 + (1ull << 32), RNG_ACCEPT, 3) != a); /* high position word */
    CHECK(rng_u64(42 + (1ull << 32), 1000, RNG_ACCEPT, 3) != a); /* high seed word */
    /* no collisions over many neighbouring keys */
    enum { N = 6 * 4 * 4096 };
    uint64_t *v = malloc(N * sizeof *v);
    int k = 0;
    for (uint32_t purpose = 1; purpose <= 6; purpose++)
        for (uint64_t seed = 0; seed < 4; seed++)
            for (uint64_t pos = 0; pos < 4096; pos++) v[k++] = rng_u64(seed, pos, purpose, 0);
    qsort(v, N, sizeof *v, cmp_u64);
    int dups = 0;
    for (int i = 1; i < N; i++) dups += v[i] == v[i - 1];
    CHECKF(dups == 0, "%d duplicate values among %d keys", dups, N);
    free(v);
}

static void test_uniformity(void) {
    enum { BINS = 100, N = 1000000 };
    long counts[BINS] = { 0 };
    double expect[BINS];
    for (int b = 0; b < BINS; b++) expect[b] = 1.0;
    for (uint32_t purpose = RNG_SAMPLE; purpose <= RNG_TREE; purpose++) {
        memset(counts, 0, sizeof counts);
        for (uint64_t i = 0; i < N; i++) counts[(int)(rng_uniform(12345, i, purpose, 0) * BINS)]++;
        int dof;
        double x2 = chi2_stat(counts, expect, BINS, N, &dof);
        double crit = chi2_critical_001(dof);
        fprintf(stderr, "uniformity purpose %u: chi2 %.1f (dof %d, crit %.1f)\n", purpose, x2, dof, crit);
        CHECKF(dof == 99 && x2 < crit, "purpose %u: chi2 %.1f >= %.1f", purpose, x2, crit);
    }
    /* power check: a slightly non-uniform variant (u^1.02) must fail the same test */
    memset(counts, 0, sizeof counts);
    for (uint64_t i = 0; i < N; i++) counts[(int)(pow(rng_uniform(12345, i, RNG_SAMPLE, 0), 1.02) * BINS)]++;
    int dof;
    double x2 = chi2_stat(counts, expect, BINS, N, &dof);
    CHECKF(x2 > chi2_critical_001(dof), "skewed variant passed: chi2 %.1f", x2);
}

/* Pairs (a_i, b_i) from two keyings of the same index i must look independent:
 * 10x10 joint histogram χ² against 1/100 each, and |Pearson r| < 4/sqrt(N). */
typedef double (*draw_fn)(uint64_t i);
static double d_sample(uint64_t i) { return rng_uniform(99, i, RNG_SAMPLE, 0); }
static double d_accept(uint64_t i) { return rng_uniform(99, i, RNG_ACCEPT, 0); }
static double d_residual(uint64_t i) { return rng_uniform(99, i, RNG_RESIDUAL, 0); }
static double d_draft(uint64_t i) { return rng_uniform(99, i, RNG_DRAFT, 0); }
static double d_bonus(uint64_t i) { return rng_uniform(99, i, RNG_BONUS, 0); }
static double d_tree(uint64_t i) { return rng_uniform(99, i, RNG_TREE, 0); }
static double d_next_pos(uint64_t i) { return rng_uniform(99, i + 1, RNG_SAMPLE, 0); }
static double d_next_seed(uint64_t i) { return rng_uniform(100, i, RNG_SAMPLE, 0); }
static double d_counter1(uint64_t i) { return rng_uniform(99, i, RNG_SAMPLE, 1); }
static double d_same(uint64_t i) { return rng_uniform(99, i, RNG_SAMPLE, 0); }
static double d_shifted(uint64_t i) { /* correlated on purpose: power check */
    double u = rng_uniform(99, i, RNG_SAMPLE, 0) + 0.05 * rng_uniform(5, i, RNG_SAMPLE, 0);
    return u >= 1.0 ? u - 1.0 : u;
}

static bool independent(draw_fn fa, draw_fn fb, const char *name, bool report) {
    enum { N = 400000 };
    long counts[100] = { 0 };
    double expect[100];
    for (int b = 0; b < 100; b++) expect[b] = 1.0;
    double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
    for (uint64_t i = 0; i < N; i++) {
        double a = fa(i), b = fb(i);
        counts[(int)(a * 10) * 10 + (int)(b * 10)]++;
        sa += a; sb += b; sab += a * b; saa += a * a; sbb += b * b;
    }
    double ma = sa / N, mb = sb / N;
    double r = (sab / N - ma * mb) / sqrt((saa / N - ma * ma) * (sbb / N - mb * mb));
    int dof;
    double x2 = chi2_stat(counts, expect, 100, N, &dof);
    double crit = chi2_critical_001(dof);
    bool ok = x2 < crit && fabs(r) < 4.0 / sqrt((double)N);
    if (report) fprintf(stderr, "independence %-22s chi2 %7.1f (crit %.1f) r %+.5f\n", name, x2, crit, r);
    return ok;
}

static void test_independence(void) {
    draw_fn purposes[6] = { d_sample, d_draft, d_accept, d_residual, d_bonus, d_tree };
    for (int a = 0; a < 6; a++)
        for (int b = a + 1; b < 6; b++) {
            char name[64];
            snprintf(name, sizeof name, "purpose %d vs %d", a + 1, b + 1);
            CHECKF(independent(purposes[a], purposes[b], name, true), "%s", name);
        }
    CHECK(independent(d_sample, d_next_pos, "position i vs i+1", true));
    CHECK(independent(d_sample, d_next_seed, "seed 99 vs 100", true));
    CHECK(independent(d_sample, d_counter1, "counter 0 vs 1", true));
    /* power checks: identical and correlated streams must be detected */
    CHECK(!independent(d_sample, d_same, "same stream (control)", true));
    CHECK(!independent(d_sample, d_shifted, "shifted copy (control)", true));
}

int main(void) {
    test_known_answers();
    test_range_and_resolution();
    test_pure_and_distinct();
    test_uniformity();
    test_independence();
    TEST_DONE();
}
