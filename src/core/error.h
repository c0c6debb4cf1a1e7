/* Errors: one X-macro table makes the HR_E* codes and hr_strerror.
 * Fallible calls return 0 or a negative HR_E* code and fill an optional
 * hr_error (NULL allowed) with a one-line message. */
#ifndef HR_CORE_ERROR_H
#define HR_CORE_ERROR_H

#include "hearth.h"

#include <stdio.h>
#include <stdlib.h>

/* Fill err (if not NULL) with code and a printf-style message; returns code. */
int hr_err(hr_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix err->msg with "<ctx>: " (used when an error crosses a layer). */
int hr_err_wrap(hr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Internal invariants only; never for user input. */
#define HR_ASSERT(x)                                                        \
    do {                                                                    \
        if (!(x)) {                                                         \
            fprintf(stderr, "hearth: %s:%d: assertion failed: %s\n",        \
                    __FILE__, __LINE__, #x);                                \
            abort();                                                        \
        }                                                                   \
    } while (0)

#endif
