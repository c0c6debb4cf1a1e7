#include "core/tensor.h"

#include "core/f16.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int block, block_bytes; /* quantized: elements and bytes per block */
} dtypes[HR_DTYPE_COUNT] = {
    [HR_DTYPE_F32] = {"F32", 4, 0, 0},  [HR_DTYPE_F16] = {"F16", 2, 0, 0},
    [HR_DTYPE_BF16] = {"BF16", 2, 0, 0}, [HR_DTYPE_F64] = {"F64", 8, 0, 0},
    [HR_DTYPE_I64] = {"I64", 8, 0, 0},  [HR_DTYPE_I32] = {"I32", 4, 0, 0},
    [HR_DTYPE_U32] = {"U32", 4, 0, 0},  [HR_DTYPE_I16] = {"I16", 2, 0, 0},
    [HR_DTYPE_U16] = {"U16", 2, 0, 0},  [HR_DTYPE_I8] = {"I8", 1, 0, 0},
    [HR_DTYPE_U8] = {"U8", 1, 0, 0},    [HR_DTYPE_BOOL] = {"BOOL", 1, 0, 0},
    [HR_DTYPE_AFFINE] = {"AFFINE", 0, 0, 0},
    [HR_DTYPE_Q8_0] = {"Q8_0", 0, 32, 34}, [HR_DTYPE_Q4_0] = {"Q4_0", 0, 32, 18},
    [HR_DTYPE_Q4_1] = {"Q4_1", 0, 32, 20}, [HR_DTYPE_Q4_K] = {"Q4_K", 0, 256, 144},
    [HR_DTYPE_Q5_K] = {"Q5_K", 0, 256, 176}, [HR_DTYPE_Q6_K] = {"Q6_K", 0, 256, 210},
    [HR_DTYPE_MXFP4] = {"MXFP4", 0, 32, 17}, [HR_DTYPE_TURBO] = {"TURBO", 0, 0, 0},
};

size_t hr_dtype_size(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *hr_dtype_name(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT ? dtypes[t].name : "?";
}

int hr_dtype_from_name(const char *name) {
    for (int i = 0; i < HR_DTYPE_COUNT; i++)
        if (dtypes[i].size && !strcmp(dtypes[i].name, name))
            return i;
    return -1;
}

int hr_dtype_is_quant(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT && t >= HR_DTYPE_AFFINE;
}

void hr_dtype_block(hr_dtype t, int *elems, int *bytes) {
    *elems = *bytes = 0;
    if ((unsigned)t >= HR_DTYPE_COUNT)
        return;
    if (dtypes[t].size) {
        *elems = 1;
        *bytes = (int)dtypes[t].size;
    } else {
        *elems = dtypes[t].block;
        *bytes = dtypes[t].block_bytes;
    }
}

size_t hr_tensor_row_bytes(const hr_tensor *t) {
    int64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : t->shape[0];
    if (t->dtype == HR_DTYPE_AFFINE)
        return (size_t)cols * (size_t)t->q.bits / 8;
    int be, bb;
    hr_dtype_block(t->dtype, &be, &bb);
    return be ? (size_t)(cols / be) * (size_t)bb : 0;
}

int hr_tensor_block_cols(const hr_tensor *t) {
    if (t->dtype == HR_DTYPE_AFFINE)
        return t->q.group;
    int be, bb;
    hr_dtype_block(t->dtype, &be, &bb);
    return be;
}

hr_tensor hr_tensor_rows(const hr_tensor *t, int64_t r0, int64_t n) {
    hr_tensor v = *t;
    size_t rb = hr_tensor_row_bytes(t);
    v.shape[0] = n;
    v.data = (const unsigned char *)t->data + (size_t)r0 * rb;
    v.nbytes = (size_t)n * rb;
    if (t->dtype == HR_DTYPE_AFFINE) {
        size_t sb = (size_t)(t->shape[1] / t->q.group) * hr_dtype_size(t->q.sdtype);
        v.q.scales = (const unsigned char *)t->q.scales + (size_t)r0 * sb;
        v.q.biases = (const unsigned char *)t->q.biases + (size_t)r0 * sb;
    }
    return v;
}

size_t hr_tensor_bytes(const hr_tensor *t) {
    size_t b = t->nbytes;
    if (t->dtype == HR_DTYPE_AFFINE)
        b += 2 * (size_t)t->shape[0] * (size_t)(t->shape[1] / t->q.group) *
             hr_dtype_size(t->q.sdtype);
    return b;
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

uint16_t hr_f32_to_f16(float f) { return hr__f32_to_f16(f); }
