/* `--device NAME` for the tests that run a model or a backend's ops
 * (test_parity, test_engine, test_quant_parity, test_spec, test_backend_kv):
 * the backend under test, "cpu" without the flag. A
 * device that is not there (no GPU, no driver, a build without CUDA) skips
 * the whole program, saying why: the ctest *_cuda entries pass on CI that
 * way, and run for real on the GPU machine (tools/cuda-check.sh). */
#ifndef HR_TESTS_DEVICE_ARG_H
#define HR_TESTS_DEVICE_ARG_H

#include "kernels/backend.h"

#include <stdio.h>
#include <string.h>

/* 1: run on *device; 0: skip (the reason printed) */
static inline int hr_test_device(int argc, char **argv, const char **device) {
    *device = "cpu";
    if (argc < 3 || strcmp(argv[1], "--device"))
        return 1;
    *device = argv[2];
    hr_backend *be;
    hr_error err = {0};
    if (hr_backend_get(*device, &be, &err)) {
        printf("%s --device %s: skipped: %s\n", argv[0], *device, err.msg);
        return 0;
    }
    return 1;
}

#endif
