/* hearth: a local LLM engine. Public embedding API.
 *
 * Every fallible call returns 0 or a negative HR_E* code and, when err is
 * not NULL, fills it with a one-line message. Handles are opaque; every
 * _free accepts NULL. */
#ifndef HEARTH_H
#define HEARTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

#define HR_ERRNO_MAP(X)                                  \
    X(OK, 0, "success")                                  \
    X(INVAL, -1, "invalid argument")                     \
    X(NOMEM, -2, "out of memory")                        \
    X(IO, -3, "i/o error")                               \
    X(FORMAT, -4, "bad file format")                     \
    X(UNSUPPORTED, -5, "not supported yet")              \
    X(NOTFOUND, -6, "not found")                         \
    X(RANGE, -7, "out of range")                         \
    X(FULL, -8, "capacity exhausted")                    \
    X(CANCELLED, -9, "cancelled")

enum {
#define HR_X(name, val, text) HR_E##name = val,
    HR_ERRNO_MAP(HR_X)
#undef HR_X
};

typedef struct hr_error {
    int code;      /* HR_E* */
    long pos;      /* byte position for parsers, -1 when not applicable */
    char msg[512]; /* one line, no trailing newline */
} hr_error;

const char *hr_strerror(int code);

/* ---- models ------------------------------------------------------------ */

typedef struct hr_model hr_model;

typedef struct hr_model_opts {
    int n_threads; /* compute threads; 0 = all cores */
} hr_model_opts;

/* Load a Hugging Face-style model directory (config.json + *.safetensors).
 * The weights are mmapped read-only; the model is immutable after load and
 * may be shared by any number of sessions. */
int hr_model_load(hr_model **out, const char *path, const hr_model_opts *opts,
                  hr_error *err);
void hr_model_free(hr_model *m);

#ifdef __cplusplus
}
#endif

#endif
