#include "cli/cli.h"

#include <stdio.h>

int hr_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("hearth 0.1.0\n");
    return 0;
}
