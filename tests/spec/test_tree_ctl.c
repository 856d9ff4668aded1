/* test_tree_ctl.c — the shape controller (engine/tree_ctl.h) on synthetic
 * cost curves: it explores every shape first; with a flat (memory-bound)
 * verify it picks the shape with the most tokens per pass; with a
 * compute-bound verify (t proportional to rows) it picks plain decoding; with
 * a knee at 8 rows it picks a tree alone but plain at a batch of 8; the
 * policy bounds (tree_budget/depth/topk) bound the menu. */
#include "engine/tree_ctl.h"
#include "tests/testutil.h"

#include <math.h>

static void curve(double *t, int kind) {
    for (int r = 1; r <= TREE_CTL_ROWS; r++)
        t[r] = kind == 0 ? 1.0 : kind == 1 ? (double)r : r <= 8 ? 1.0 : (double)r / 8.0;
}

/* tokens per pass a shape delivers in these tests: grows with budget */
static int tokens_for(const tree_shape *s) { return s->budget == 0 ? 1 : 1 + (int)ceil(log2(1.0 + s->budget)); }

static int settle(tree_ctl *c, int batch) {
    int e = 0;
    for (int step = 0; step < 200; step++) {
        e = tree_ctl_pick(c, batch);
        tree_ctl_observe(c, e, tokens_for(&c->menu[e]), 0.0);
    }
    return e;
}

int main(void) {
    double t[TREE_CTL_ROWS + 1] = {0};
    tree_ctl c;
    /* exploration: each non-plain entry first */
    curve(t, 0);
    tree_ctl_init(&c, t, 16, 8, 4);
    CHECK(c.n == 7 && c.menu[0].budget == 0);
    for (int e = 1; e < c.n; e++)
        for (int k = 0; k < c.explore; k++) {
            CHECK(tree_ctl_pick(&c, 1) == e);
            tree_ctl_observe(&c, e, tokens_for(&c.menu[e]), 0.0);
        }
    /* flat: the biggest tree */
    int e = settle(&c, 1);
    CHECKF(c.menu[e].budget == 16 && c.menu[e].topk == 3, "flat curve: picked budget %d topk %d", c.menu[e].budget,
           c.menu[e].topk);
    /* compute-bound: plain */
    curve(t, 1);
    tree_ctl_init(&c, t, 16, 8, 4);
    e = settle(&c, 1);
    CHECKF(e == 0, "compute-bound: picked budget %d", c.menu[e].budget);
    /* knee at 8 rows: alone a shape of <= 7 nodes pays; at batch 8 nothing does */
    curve(t, 2);
    tree_ctl_init(&c, t, 16, 8, 4);
    e = settle(&c, 1);
    CHECKF(c.menu[e].budget > 0 && c.menu[e].budget <= 8, "knee, alone: picked budget %d", c.menu[e].budget);
    double best = 0;
    for (int k = 0; k < c.n; k++) best = fmax(best, tree_ctl_rate(&c, k, 1));
    CHECK(tree_ctl_rate(&c, e, 1) >= best);
    int e8 = tree_ctl_pick(&c, 8);
    CHECKF(e8 == 0, "knee, batch 8: picked budget %d", c.menu[e8].budget);
    /* proposal time counts: an expensive drafter loses to plain */
    curve(t, 0);
    tree_ctl_init(&c, t, 16, 8, 4);
    for (int step = 0; step < 200; step++) {
        int k = tree_ctl_pick(&c, 1);
        tree_ctl_observe(&c, k, tokens_for(&c.menu[k]), 10.0);
    }
    CHECK(tree_ctl_pick(&c, 1) == 0);
    /* bounds */
    tree_ctl_init(&c, t, 1, 8, 4);
    CHECK(c.n == 2 && c.menu[1].budget == 1);
    tree_ctl_init(&c, t, 16, 8, 1);
    for (int k = 1; k < c.n; k++) CHECK(c.menu[k].topk == 1);
    /* interpolation of a sparse curve */
    double sp[TREE_CTL_ROWS + 1] = {0};
    sp[1] = 1, sp[5] = 2, sp[9] = 4;
    tree_ctl_init(&c, sp, 16, 8, 4);
    CHECK(fabs(c.t_rows[3] - 1.5) < 1e-12 && fabs(c.t_rows[7] - 3) < 1e-12 && fabs(c.t_rows[13] - 6) < 1e-12);
    TEST_DONE();
}
