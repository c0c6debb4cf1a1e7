/* Tensor descriptors: a dtype, a shape and a pointer into memory the
 * descriptor does not own (usually a read-only mmap of a weights file). */
#ifndef HR_CORE_TENSOR_H
#define HR_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum hr_dtype {
    HR_DTYPE_F32,
    HR_DTYPE_F16,
    HR_DTYPE_BF16,
    HR_DTYPE_F64,
    HR_DTYPE_I64,
    HR_DTYPE_I32,
    HR_DTYPE_U32,
    HR_DTYPE_I16,
    HR_DTYPE_U16,
    HR_DTYPE_I8,
    HR_DTYPE_U8,
    HR_DTYPE_BOOL,
    HR_DTYPE_COUNT
} hr_dtype;

#define HR_MAX_DIMS 4

typedef struct hr_tensor {
    const char *name;  /* owned by whoever made the descriptor */
    hr_dtype dtype;
    int ndim;
    int64_t shape[HR_MAX_DIMS]; /* outermost first, as safetensors/torch */
    const void *data;
    size_t nbytes;
} hr_tensor;

size_t hr_dtype_size(hr_dtype t);
const char *hr_dtype_name(hr_dtype t); /* safetensors spelling: "F32", "BF16" */
/* -1 when the name is unknown. */
int hr_dtype_from_name(const char *name);

int64_t hr_tensor_numel(const hr_tensor *t);

/* ---- scalar conversions (exact, round-to-nearest-even on narrowing) ---- */

static inline float hr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t hr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float hr_f16_to_f32(uint16_t h);
uint16_t hr_f32_to_f16(float f);

#endif
