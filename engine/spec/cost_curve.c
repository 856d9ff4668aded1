/* cost_curve.c — the verify cost curve t(rows) (see cost_curve.h). */
#include "engine/spec/cost_curve.h"

#include <string.h>

void cost_curve_init(cost_curve *c, const double *t_rows, int n) {
    memset(c, 0, sizeof(*c));
    if (n > COST_CURVE_ROWS) n = COST_CURVE_ROWS;
    int prev = 0, prev2 = 0;
    for (int r = 1; r <= n; r++) {
        if (!(t_rows[r] > 0)) continue;
        c->t[r] = t_rows[r];
        for (int g = prev ? prev + 1 : 1; g < r; g++)
            c->t[g] = prev ? t_rows[prev] + (t_rows[r] - t_rows[prev]) * (double)(g - prev) / (double)(r - prev)
                           : t_rows[r];
        prev2 = prev, prev = r;
    }
    if (!prev) return;
    for (int r = 2; r <= prev; r++)
        if (c->t[r] < c->t[r - 1]) c->t[r] = c->t[r - 1];
    /* past the table: along the last two measured points, or along the upper
     * half of the table when that is steeper — one noisy point must not make
     * rows look free past it (measured on a Q8_0 target: 24 rows 7.95x,
     * 32 rows 8.23x, so 96 rows looked like 10.5x; the chain then verified
     * 3 rows a sequence at concurrency 32, at 0.76x plain decoding) */
    double s = prev2 ? (c->t[prev] - c->t[prev2]) / (double)(prev - prev2) : 0.0;
    int half = prev / 2;
    if (half >= 1 && half < prev) {
        double sh = (c->t[prev] - c->t[half]) / (double)(prev - half);
        if (sh > s) s = sh;
    }
    c->slope = s > 0 ? s : 0.0;
    for (int g = prev + 1; g <= COST_CURVE_ROWS; g++) c->t[g] = c->t[prev] + c->slope * (double)(g - prev);
    c->n = prev;
}

double cost_curve_ms(const cost_curve *c, int rows) {
    if (c->n == 0) return 0.0;
    if (rows < 1) rows = 1;
    if (rows <= COST_CURVE_ROWS) return c->t[rows];
    return c->t[COST_CURVE_ROWS] + c->slope * (double)(rows - COST_CURVE_ROWS);
}

double cost_curve_ratio(const cost_curve *c, int rows) {
    return c->n == 0 || !(c->t[1] > 0) ? 1.0 : cost_curve_ms(c, rows) / c->t[1];
}
