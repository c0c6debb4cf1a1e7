/* libFuzzer: the hub's revision listing (JSON from the network) and the
 * checks on the file names and globs that come with it. */
#include "io/hub.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_hub_info info;
    hr_error err;
    if (hr_hub_info_parse(&info, (const char *)data, size, &err) == 0) {
        for (int i = 0; i < info.n_files; i++) {
            if (hr_hub_path_check(info.files[i], &err) != 0)
                __builtin_trap(); /* the parser let through a path that fails its check */
            (void)hr_hub_glob_match(info.files[i], info.files[0]);
            (void)hr_hub_glob_match("*.json", info.files[i]);
        }
    }
    hr_hub_info_deinit(&info);
    return 0;
}
