/* testutil.h — minimal assertion helpers for specd's C tests.
 * A test binary exits 0 when every CHECK held, 1 otherwise, 77 when skipped. */
#ifndef SPECD_TESTUTIL_H
#define SPECD_TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>

static int t_failures = 0;
static int t_checks = 0;

#define CHECK(cond) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define SKIP(...) do { fprintf(stderr, "SKIP: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); exit(77); } while (0)
#define TEST_DONE() do { fprintf(stderr, "%d checks, %d failed\n", t_checks, t_failures); \
    return t_failures ? 1 : 0; } while (0)

#endif
