/* --model NAME: the names a model goes by besides its path. */
#include "cli/args.h"
#include "core/error.h"
#include "io/hfcache.h"

#include <string.h>
#include <sys/stat.h>

/* The bundled demo model's name (docs/models.md). */
#define DEMO_NAME "hearth-demo"

int hr_cli_model_resolve(const char *arg, char *out, size_t n, hr_error *err) {
    struct stat st;
    const char *p = stat(arg, &st) == 0 ? arg : !strcmp(arg, DEMO_NAME) ? HEARTH_DEFAULT_MODEL
                                                                        : NULL;
    if (!p)
        return hr_hf_model_path(out, n, arg, err);
    if (strlen(p) >= n)
        return hr_err(err, HR_ERANGE, "model path too long");
    strcpy(out, p);
    return 0;
}

int hr_cli_model_path(const char *arg, const char **out, hr_error *err) {
    static char paths[4][HR_HF_PATH_MAX]; /* a verb names at most a few models */
    static int used;
    struct stat st;
    if (stat(arg, &st) == 0) {
        *out = arg;
        return 0;
    }
    if (used == 4)
        return hr_err(err, HR_EFULL, "too many models named");
    int rc = hr_cli_model_resolve(arg, paths[used], sizeof paths[used], err);
    if (rc)
        return rc;
    *out = paths[used++];
    return 0;
}
