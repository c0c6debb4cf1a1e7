/* f32 -> f16 with round to nearest even, the one conversion the CPU's KV
 * records and the GPU's (kernels/cuda/kvq.cuh) share bit for bit: an inline
 * body that compiles as C and as CUDA device code. */
#ifndef HR_CORE_F16_H
#define HR_CORE_F16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HR_HOST_DEVICE __host__ __device__
#else
#define HR_HOST_DEVICE
#endif

static inline HR_HOST_DEVICE uint16_t hr__f32_to_f16(float f) {
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

#endif
