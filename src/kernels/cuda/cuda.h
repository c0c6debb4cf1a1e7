/* The CUDA backend's entry points, for the backend registry
 * (kernels/backend.c); built only when CMake finds the CUDA toolkit. */
#ifndef HR_KERNELS_CUDA_CUDA_H
#define HR_KERNELS_CUDA_CUDA_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices the driver offers, or a negative HR_E* with the reason (no
 * driver, no device). */
int hr__cuda_count(hr_error *err);
/* The backend of device dev, created on first use (its CUDA context too). */
int hr__cuda_open(int dev, hr_backend **out, hr_error *err);
/* "cuda:0 (NVIDIA H200, 139.8 GiB)" */
void hr__cuda_describe(int dev, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
