/* json_range.c — numeric intervals as GBNF (see json_range.h). */
#include "gateway/json_range.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 16
#define BIG 9999999999999999LL /* the largest 16-digit integer */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} tb;

static void add(tb *b, const char *s) {
    size_t k = strlen(s);
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->n + k + 1) c *= 2;
        char *q = realloc(b->s, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q, b->cap = c;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static void digit_class(tb *b, char lo, char hi) {
    char t[16];
    if (lo == hi) snprintf(t, sizeof t, " \"%c\"", lo);
    else snprintf(t, sizeof t, " [%c-%c]", lo, hi);
    add(b, t);
}

static void any_digits(tb *b, int n) {
    char t[24];
    if (n == 1) add(b, " [0-9]");
    else if (n > 1) snprintf(t, sizeof t, " [0-9]{%d}", n), add(b, t);
}

static bool all(const char *s, int n, char c) {
    for (int i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* n-digit strings from x to y (x <= y, same length), leading zeros allowed
 * below the first position. */
static void same_len(tb *b, const char *x, const char *y, int n) {
    if (n == 0) return;
    if (all(x + 1, n - 1, '0') && all(y + 1, n - 1, '9')) {
        digit_class(b, x[0], y[0]);
        any_digits(b, n - 1);
        return;
    }
    if (x[0] == y[0]) {
        digit_class(b, x[0], x[0]);
        same_len(b, x + 1, y + 1, n - 1);
        return;
    }
    char nines[MAX_DIGITS + 1], zeros[MAX_DIGITS + 1];
    memset(nines, '9', (size_t)n), memset(zeros, '0', (size_t)n);
    add(b, " (");
    digit_class(b, x[0], x[0]);
    same_len(b, x + 1, nines, n - 1);
    if (x[0] + 1 <= y[0] - 1) {
        add(b, " |");
        digit_class(b, (char)(x[0] + 1), (char)(y[0] - 1));
        any_digits(b, n - 1);
    }
    add(b, " |");
    digit_class(b, y[0], y[0]);
    same_len(b, zeros, y + 1, n - 1);
    add(b, " )");
}

static int ndigits(long long v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

static long long pow10ll(int d) {
    long long p = 1;
    while (d-- > 0) p *= 10;
    return p;
}

/* v as exactly d decimal digits (d <= MAX_DIGITS). */
static void put_digits(char *o, long long v, int d) {
    o[d] = 0;
    for (int i = d - 1; i >= 0; i--) o[i] = (char)('0' + v % 10), v /= 10;
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), as alternatives
 * joined by " |" (first: whether one was written before). */
static void uint_range(tb *b, long long lo, long long hi, bool *first) {
    if (hi > BIG) hi = BIG;
    if (hi < 0) hi = BIG;
    if (lo > hi) return;
    int dl = ndigits(lo), dh = ndigits(hi);
    for (int d = dl; d <= dh; d++) {
        long long x = d == dl ? lo : pow10ll(d - 1), y = d == dh ? hi : pow10ll(d) - 1;
        char xs[MAX_DIGITS + 1], ys[MAX_DIGITS + 1];
        put_digits(xs, x, d);
        put_digits(ys, y, d);
        add(b, *first ? " (" : " | (");
        *first = false;
        same_len(b, xs, ys, d);
        add(b, " )");
    }
}

char *js_range_to_gbnf(bool integer, const js_bounds *bd, char *err, size_t errlen) {
    double lo = bd->lo, hi = bd->hi;
    if ((bd->has_lo && !isfinite(lo)) || (bd->has_hi && !isfinite(hi))) {
        snprintf(err, errlen, "a bound is not a finite number");
        return NULL;
    }
    if (!integer && ((bd->has_lo && lo != floor(lo)) || (bd->has_hi && hi != floor(hi)))) {
        snprintf(err, errlen, "bounds of a 'number' must be integers (%g..%g; use an integer bound or type integer)",
                 bd->has_lo ? lo : -INFINITY, bd->has_hi ? hi : INFINITY);
        return NULL;
    }
    if ((bd->has_lo && fabs(lo) > (double)BIG) || (bd->has_hi && fabs(hi) > (double)BIG)) {
        snprintf(err, errlen, "bounds beyond 16 digits are not supported");
        return NULL;
    }
    /* the integers: [A, B] */
    long long A = bd->has_lo ? (long long)(bd->lo_excl ? floor(lo) + 1 : ceil(lo)) : -BIG;
    long long B = bd->has_hi ? (long long)(bd->hi_excl ? ceil(hi) - 1 : floor(hi)) : BIG;
    tb b = {0};
    bool first = true;
    add(&b, "(");
    if (A <= B) {
        if (B >= 0) uint_range(&b, A > 0 ? A : 0, B, &first);
        if (A < 0) {
            bool f2 = true;
            add(&b, first ? " \"-\" (" : " | \"-\" (");
            first = false;
            uint_range(&b, B < 0 ? -B : 1, -A, &f2);
            add(&b, " )");
        }
    }
    if (!integer) {
        /* fractions: I.f with f in (0, 1) inside the interval: (I, I+1) within
         * [lo, hi] for non-negative values, (-(I+1), -I) for negative ones */
        long long a = bd->has_lo ? (long long)lo : -BIG, c = bd->has_hi ? (long long)hi : BIG;
        long long p0 = a > 0 ? a : 0, p1 = c - 1;
        long long n0 = c < 0 ? -c : 0, n1 = -a - 1;
        static const char frac[] = " \".\" [0-9]{0,15} [1-9]";
        if (p0 <= p1) {
            bool f2 = true;
            add(&b, first ? " (" : " | (");
            first = false;
            uint_range(&b, p0, p1, &f2);
            add(&b, " )");
            add(&b, frac);
        }
        if (n0 <= n1) {
            bool f2 = true;
            add(&b, first ? " \"-\" (" : " | \"-\" (");
            first = false;
            uint_range(&b, n0, n1, &f2);
            add(&b, " )");
            add(&b, frac);
        }
    }
    add(&b, " )");
    if (b.oom || first) {
        free(b.s);
        if (b.oom) snprintf(err, errlen, "out of memory");
        else snprintf(err, errlen, "no %s lies within the bounds", integer ? "integer" : "number");
        return NULL;
    }
    return b.s;
}
