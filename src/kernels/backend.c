/* The backend registry: --device names to backends. */
#include "kernels/backend.h"
#include "core/error.h"
#include "core/log.h"
#ifdef HEARTH_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HEARTH_HAVE_CUDA
static int hr__cuda_count(hr_error *err) {
    return hr_err(err, HR_EUNSUPPORTED, "this build of hearth has no CUDA backend (the CUDA "
                  "toolkit was not found when it was built: docs/gpu.md)");
}

static int hr__cuda_open(int dev, hr_backend **out, hr_error *err) {
    (void)dev;
    (void)out;
    return hr__cuda_count(err);
}

static void hr__cuda_describe(int dev, char *buf, size_t n) { snprintf(buf, n, "cuda:%d", dev); }
#endif

int hr_backend_get(const char *name, hr_backend **out, hr_error *err) {
    *out = NULL;
    if (!name || !strcmp(name, "auto")) {
        hr_error why = {0};
        if (hr__cuda_count(&why) > 0 && hr__cuda_open(0, out, &why) == 0) {
            char d[128];
            hr__cuda_describe(0, d, sizeof d);
            fprintf(stderr, "hearth: device auto: %s\n", d);
            return 0;
        }
        /* on most machines there is no GPU to mention: serve's log says it */
        hr_log(HR_LOG_INFO, "device auto: cpu (%s)", why.msg);
        *out = hr_backend_cpu();
        return 0;
    }
    if (!strcmp(name, "cpu")) {
        *out = hr_backend_cpu();
        return 0;
    }
    if (!strncmp(name, "cuda", 4) && (name[4] == '\0' || name[4] == ':')) {
        int dev = 0;
        if (name[4] == ':') {
            char *end;
            long v = strtol(name + 5, &end, 10);
            if (end == name + 5 || *end || v < 0 || v > 1024)
                return hr_err(err, HR_EINVAL, "--device %s: the GPU index must be a number "
                              "(cuda:0, cuda:1, ...)", name);
            dev = (int)v;
        }
        int rc = hr__cuda_open(dev, out, err);
        if (rc)
            hr_err_wrap(err, "--device %s", name);
        return rc;
    }
    return hr_err(err, HR_EINVAL, "--device %s (auto, cpu, cuda, cuda:N are)", name);
}
