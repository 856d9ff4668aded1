/* check.h — the one assert of the tree: SPECD_CHECK(cond) aborts with
 * file:line and the condition when it is false, in every build type (these
 * guard invariants whose failure would corrupt output, not debug-only
 * conditions); SPECD_DIE(fmt, ...) aborts with file:line and a message (an
 * allocation that must not fail). In kernels/, the lowest layer, so every
 * folder may include it. */
#ifndef SPECD_CHECK_H
#define SPECD_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define SPECD_CHECK(c)                                                                                           \
    do {                                                                                                         \
        if (!(c)) {                                                                                              \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);                            \
            abort();                                                                                             \
        }                                                                                                        \
    } while (0)

#define SPECD_DIE(...)                                                                                           \
    do {                                                                                                         \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                          \
        fprintf(stderr, __VA_ARGS__);                                                                            \
        fputc('\n', stderr);                                                                                     \
        abort();                                                                                                 \
    } while (0)

#endif
