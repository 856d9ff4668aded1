/* path_ctl.c — the auto method's choice between the chain/tree path and
 * Medusa trees, from measured tokens per ms (see path_ctl.h). */
#include "engine/spec/path_ctl.h"

#include <stdbool.h>
#include <string.h>

#define RATE_EWMA 0.1               /* after the first RATE_MEAN observations */
#define RATE_MEAN 8
#define BACKOFF_MAX 3               /* re-tries at most every PATH_REPROBE << 3 steps */
#define FAR_BELOW 0.8               /* a re-tried arm this far below the other backs off */

void path_ctl_init(path_ctl *c) { memset(c, 0, sizeof(*c)); }

int path_ctl_bucket(int batch) {
    int b = 0;
    for (int lim = 1; b < PATH_BUCKETS - 1 && batch > lim; lim *= 2) b++;
    return b;
}

static int start_run(path_ctl *c, int arm, int b, int len) {
    c->run_arm = arm, c->run_bucket = b, c->run_left = len;
    c->picks[arm]++;
    return arm;
}

int path_ctl_pick(path_ctl *c, int batch) {
    int b = path_ctl_bucket(batch);
    if (c->run_left > 0 && c->run_bucket == b) {
        c->picks[c->run_arm]++;
        return c->run_arm;
    }
    c->run_left = 0; /* the batch moved to another bucket: that run is over */
    for (int a = 0; a < PATH_ARMS; a++)
        if (c->seen[b][a] < PATH_EXPLORE) return start_run(c, a, b, PATH_EXPLORE - c->seen[b][a]);
    int best = c->rate[b][1] > c->rate[b][0], other = 1 - best;
    if (c->since[b] >= PATH_REPROBE << c->backoff[b][other]) {
        c->since[b] = 0;
        return start_run(c, other, b, PATH_PROBE_LEN);
    }
    c->picks[best]++;
    return best;
}

void path_ctl_observe(path_ctl *c, int arm, int batch, int tokens, double ms) {
    if (arm < 0 || arm >= PATH_ARMS || ms <= 0) return;
    int b = path_ctl_bucket(batch);
    double r = tokens / ms, w;
    int n = ++c->seen[b][arm];
    bool in_run = c->run_left > 0 && c->run_arm == arm && c->run_bucket == b;
    if (n <= RATE_MEAN) w = 1.0 / n;
    else if (in_run) w = 1.0 / (PATH_PROBE_LEN - c->run_left + 2); /* a re-try replaces most of a stale figure */
    else w = RATE_EWMA;
    c->rate[b][arm] += w * (r - c->rate[b][arm]);
    if (!in_run) {
        c->since[b]++;
        return;
    }
    if (--c->run_left > 0) return;
    /* the run is over: an arm found well below the other waits longer for its next one */
    int other = 1 - arm;
    if (c->seen[b][other] < PATH_EXPLORE) return;
    if (c->rate[b][arm] < FAR_BELOW * c->rate[b][other])
        c->backoff[b][arm] += c->backoff[b][arm] < BACKOFF_MAX;
    else
        c->backoff[b][arm] = 0;
}
