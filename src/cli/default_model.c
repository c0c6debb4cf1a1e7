/* The default model of serve and generate: $HEARTH_MODEL, else the demo
 * model installed beside the binary (BIN/../share/hearth/models/hearth-demo,
 * as make install lays it out), else the one in the source tree the binary
 * was built from. */
#include "cli/cli.h"
#include "core/file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HEARTH_DEFAULT_MODEL
#define HEARTH_DEFAULT_MODEL "models/hearth-demo"
#endif

const char *hr_cli_default_model(void) {
    static char installed[PATH_MAX];
    const char *env = getenv("HEARTH_MODEL");
    if (env && *env)
        return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if (!hr_path_join(installed, sizeof installed, exe,
                              "../share/hearth/models/hearth-demo") &&
                hr_dir_exists(installed))
                return installed;
        }
    }
    return HEARTH_DEFAULT_MODEL;
}
