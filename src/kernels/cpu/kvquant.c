#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/quant.h"

#include <string.h>

bool hr_kvq_bits_ok(int bits) {
    return bits == 2 || bits == 3 || bits == 4 || bits == 6 || bits == 8;
}

bool hr_kvq_group_ok(int group) { return group == 32 || group == 64 || group == 128; }

void hr_kvq_store(void *dst, const float *x, int hd, int bits, int group) {
    uint8_t *q = dst;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    int ng = hd / group;
    float sb[2 * 1024 / 32]; /* scales then biases: hd <= 1024 (the pool checks) */
    float *s = sb, *b = sb + ng;
    hr_quant_affine_row(x, hd, bits, group, q, s, b);
    memcpy(q + qb, sb, 2 * (size_t)ng * sizeof(float));
}

void hr__kvq_load_scalar(float *y, const void *src, int hd, int bits, int group) {
    const uint8_t *q = src;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    int ng = hd / group;
    unsigned mask = (1u << bits) - 1;
    for (int g = 0; g < ng; g++) {
        float s, b;
        memcpy(&s, q + qb + 4 * (size_t)g, 4);
        memcpy(&b, q + qb + 4 * (size_t)(ng + g), 4);
        for (int j = 0; j < group; j++) {
            int i = g * group + j;
            size_t bit = (size_t)i * (size_t)bits;
            unsigned v = q[bit >> 3];
            if ((bit & 7) + (unsigned)bits > 8)
                v |= (unsigned)q[(bit >> 3) + 1] << 8;
            float t = s * (float)((v >> (bit & 7)) & mask); /* two roundings, as */
            y[i] = t + b;                                   /* the vector path */
        }
    }
}
