#include "cli/cli.h"
#include "hearth.h"

#include <stdio.h>

int hr_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("hearth %s\ndefault model: %s\n", hr_version(), hr_cli_default_model());
    return 0;
}
