#include "core/tensor.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[HR_DTYPE_COUNT] = {
    [HR_DTYPE_F32] = {"F32", 4},  [HR_DTYPE_F16] = {"F16", 2},
    [HR_DTYPE_BF16] = {"BF16", 2}, [HR_DTYPE_F64] = {"F64", 8},
    [HR_DTYPE_I64] = {"I64", 8},  [HR_DTYPE_I32] = {"I32", 4},
    [HR_DTYPE_U32] = {"U32", 4},  [HR_DTYPE_I16] = {"I16", 2},
    [HR_DTYPE_U16] = {"U16", 2},  [HR_DTYPE_I8] = {"I8", 1},
    [HR_DTYPE_U8] = {"U8", 1},    [HR_DTYPE_BOOL] = {"BOOL", 1},
};

size_t hr_dtype_size(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *hr_dtype_name(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT ? dtypes[t].name : "?";
}

int hr_dtype_from_name(const char *name) {
    for (int i = 0; i < HR_DTYPE_COUNT; i++)
        if (!strcmp(dtypes[i].name, name))
            return i;
    return -1;
}

int64_t hr_tensor_numel(const hr_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

float hr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t hr_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) /* inf / nan */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (uint32_t)exp << 10 | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
        r++; /* may carry into the exponent: still correct */
    return (uint16_t)(sign | r);
}
