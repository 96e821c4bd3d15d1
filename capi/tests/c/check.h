/*
 * The C tests' two checks: each prints where it failed and what it found, and exits 1.
 */
#ifndef CXDIRECT_TESTS_CHECK_H
#define CXDIRECT_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "cxdirect.h"

/* Checks that `call` returned `want`; on a mismatch prints both, the library's message, and
 * exits. */
#define EXPECT(call, want)                                                              \
    do {                                                                                \
        int got_ = (call);                                                              \
        if (got_ != (want)) {                                                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s): %s\n",       \
                    __FILE__, __LINE__, #call, got_, cxd_error_name(got_), (int)(want), \
                    cxd_error_name(want), cxd_last_error());                            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* Checks that `cond` holds. */
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif
