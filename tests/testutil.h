/* testutil.h — minimal assertion helpers for specd's C tests.
 * A test binary exits 0 when every CHECK held and at least one ran, 1
 * otherwise, 77 when skipped. */
#ifndef SPECD_TESTUTIL_H
#define SPECD_TESTUTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int t_failures = 0;
static int t_checks = 0;

#define CHECK(cond) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define SKIP(...) do { fprintf(stderr, "SKIP: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); exit(77); } while (0)
/* $SPECD_MODELS/name (default ../shared/models) into buf; SKIPs (exit 77)
 * when the file is missing. */
static inline const char *tu_model(char *buf, size_t n, const char *name) {
    const char *dir = getenv("SPECD_MODELS");
    snprintf(buf, n, "%s/%s", dir && *dir ? dir : "../shared/models", name);
    if (access(buf, R_OK) != 0) SKIP("%s not found (set SPECD_MODELS)", buf);
    return buf;
}

/* Ends main: exit 1 when a check failed or when none ran (a test that
 * checked nothing passes nothing: a loop over an empty list, a skipped
 * section); else 0. */
#define TEST_DONE() do { fprintf(stderr, "%d checks, %d failed\n", t_checks, t_failures); \
    if (t_checks == 0) fprintf(stderr, "FAIL: no check ran\n"); \
    return t_failures || t_checks == 0 ? 1 : 0; } while (0)

/* The largest |a[i] - b[i]| over n floats, relative to the largest |b[i]|
 * (absolute when b is all zeros); INFINITY when a difference is NaN. */
static inline float tu_max_rel(const float *a, const float *b, int n) {
    float md = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
    }
    return mx > 0 ? md / mx : md;
}

#endif
