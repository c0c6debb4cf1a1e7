#include "cli/tokens.h"
#include "core/error.h"

#include <errno.h>
#include <stdlib.h>

int hr_parse_token_list(const char *s, int32_t **out, int *n, hr_error *err) {
    *out = NULL;
    *n = 0;
    int cap = 16, cnt = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return hr_err(err, HR_ENOMEM, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return hr_err(err, HR_EINVAL, "bad token list at '%s' (want ids like 1,2,3)", p);
        }
        if (cnt == cap) {
            int32_t *g = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!g) {
                free(ids);
                return hr_err(err, HR_ENOMEM, "out of memory");
            }
            ids = g;
        }
        ids[cnt++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        free(ids);
        return hr_err(err, HR_EINVAL, "empty token list");
    }
    *out = ids;
    *n = cnt;
    return 0;
}
