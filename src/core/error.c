#include "core/error.h"

#include <stdarg.h>
#include <string.h>

const char *hr_strerror(int code) {
    switch (code) {
#define HR_X(name, val, text) case val: return text;
        HR_ERRNO_MAP(HR_X)
#undef HR_X
    }
    return "unknown error";
}

int hr_err(hr_error *err, int code, const char *fmt, ...) {
    if (!err)
        return code;
    err->code = code;
    err->pos = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int hr_err_wrap(hr_error *err, const char *fmt, ...) {
    if (!err)
        return HR_EINVAL;
    char prefix[sizeof err->msg], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return err->code;
}
