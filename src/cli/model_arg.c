/* --model NAME: the names a model goes by besides its path. */
#include "cli/args.h"
#include "core/error.h"
#include "io/hfcache.h"

#include <string.h>
#include <sys/stat.h>

/* The bundled demo model's name (docs/models.md). */
#define DEMO_NAME "hearth-demo"

int hr_cli_model_path(const char *arg, const char **out, hr_error *err) {
    static char paths[4][HR_HF_PATH_MAX]; /* a verb names at most a few models */
    static int used;
    struct stat st;
    if (stat(arg, &st) == 0) {
        *out = arg;
        return 0;
    }
    if (!strcmp(arg, DEMO_NAME)) {
        *out = HEARTH_DEFAULT_MODEL;
        return 0;
    }
    if (used == 4)
        return hr_err(err, HR_EFULL, "too many models named");
    int rc = hr_hf_model_path(paths[used], sizeof paths[used], arg, err);
    if (rc)
        return rc;
    *out = paths[used++];
    return 0;
}
