/* test_path_ctl.c — the auto method's choice between the chain/tree path and
 * Medusa (engine/spec/path_ctl.h) on synthetic arms: each arm delivers tokens per
 * ms around a true rate with ±25% noise (seeded). Asserts what a user of
 * `speculation.method: auto` depends on: after exploration the faster arm
 * gets nearly every step, in each batch bucket independently; when the arms'
 * speeds swap (other text, a busy host) the controller follows within a
 * bounded number of steps; the exploration a re-try costs stays small. The
 * same driver run with re-tries disabled (a controller that decides once)
 * must fail the swap check, so that check has teeth. */
#include "engine/spec/path_ctl.h"
#include "tests/testutil.h"

#include <stdbool.h>
#include <stdint.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* n steps at `batch` with true rates rate[0], rate[1]; returns the steps that
 * took the faster arm among the last `tail` of them. frozen: no re-tries. */
static int drive(path_ctl *c, int batch, const double *rate, int n, int tail, bool frozen) {
    int faster = rate[1] > rate[0], good = 0;
    for (int s = 0; s < n; s++) {
        int a = path_ctl_pick(c, batch);
        if (frozen) c->since[path_ctl_bucket(batch)] = 0;
        double ms = 10.0 * batch, r = rate[a] * (0.75 + 0.5 * urand());
        path_ctl_observe(c, a, batch, (int)(r * ms + 0.5), ms);
        if (s >= n - tail) good += a == faster;
    }
    return good;
}

int main(void) {
    CHECK(path_ctl_bucket(1) == 0 && path_ctl_bucket(2) == 1 && path_ctl_bucket(3) == 2 && path_ctl_bucket(4) == 2);
    CHECK(path_ctl_bucket(8) == 3 && path_ctl_bucket(9) == 4 && path_ctl_bucket(16) == 4 && path_ctl_bucket(17) == 5);
    CHECK(path_ctl_bucket(1000) == PATH_BUCKETS - 1);

    /* exploration: both arms are tried PATH_EXPLORE steps first */
    path_ctl c;
    path_ctl_init(&c);
    const double med_fast[2] = {0.20, 0.30}, chain_fast[2] = {0.30, 0.18};
    drive(&c, 1, med_fast, 2 * PATH_EXPLORE, 0, false);
    CHECKF(c.picks[0] == PATH_EXPLORE && c.picks[1] == PATH_EXPLORE, "explore %ld/%ld", c.picks[0], c.picks[1]);

    /* the faster arm wins nearly every step, per bucket: Medusa at batch 1,
     * the chain path at batch 8 (a compute-bound verify) */
    int g1 = drive(&c, 1, med_fast, 1000, 800, false);
    int g8 = drive(&c, 8, chain_fast, 1000, 800, false);
    CHECKF(g1 >= 760, "batch 1: the faster arm (Medusa) on %d of 800 steps", g1);
    CHECKF(g8 >= 760, "batch 8: the faster arm (chain) on %d of 800 steps", g8);
    /* learning batch 8 did not disturb batch 1 */
    g1 = drive(&c, 1, med_fast, 200, 200, false);
    CHECKF(g1 >= 190, "batch 1 after batch 8: %d of 200", g1);

    /* the speeds swap at batch 1: followed within PATH_REPROBE << 3 steps
     * (the longest backoff) plus a re-try; after it, the new faster arm wins */
    const double swapped[2] = {0.30, 0.20};
    path_ctl d = c;
    int after = drive(&d, 1, swapped, 1200, 400, false);
    CHECKF(after >= 380, "after the swap: the new faster arm on %d of the last 400 steps", after);
    /* ... and a controller that never re-tries does not (the check's teeth) */
    path_ctl f = c;
    int frozen = drive(&f, 1, swapped, 1200, 400, true);
    CHECKF(frozen < 380, "a frozen controller passed the swap check (%d of 400)", frozen);

    /* re-tries of a far slower arm back off: over 4000 steps with Medusa at
     * half the chain's rate, the slower arm gets under 2% of the steps */
    path_ctl_init(&c);
    const double far[2] = {0.30, 0.15};
    long p0 = c.picks[1];
    drive(&c, 1, far, 4000, 0, false);
    double share = (double)(c.picks[1] - p0) / 4000.0;
    CHECKF(share < 0.02, "the slower arm got %.3f of the steps", share);
    CHECKF(c.backoff[0][1] >= 2, "backoff %d", c.backoff[0][1]);
    /* a close race keeps re-trying at the base interval (either may be ahead) */
    path_ctl_init(&c);
    const double close[2] = {0.30, 0.28};
    drive(&c, 1, close, 2000, 0, false);
    CHECKF(c.backoff[0][0] == 0 && c.backoff[0][1] == 0, "close race backoff %d/%d", c.backoff[0][0], c.backoff[0][1]);

    /* nothing observed with no time */
    path_ctl_init(&c);
    path_ctl_observe(&c, 1, 1, 5, 0.0);
    path_ctl_observe(&c, 7, 1, 5, 1.0);
    CHECK(c.seen[0][0] == 0 && c.seen[0][1] == 0);
    TEST_DONE();
}
