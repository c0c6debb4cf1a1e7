/* TurboQuant's MSE quantizer of one row (turbo.h). */
#include "kernels/cpu/turbo.h"
#include "kernels/cpu/turbo_codebooks.h"

#include <math.h>
#include <string.h>

static int dim_index(int hd) { return hd == 64 ? 0 : hd == 128 ? 1 : hd == 256 ? 2 : -1; }

bool hr_turbo_ok(int hd, int bits) { return dim_index(hd) >= 0 && bits >= 1 && bits <= 4; }

double hr_turbo_codebook_mse(int hd, int bits) { return hr_turbo_mse[dim_index(hd)][bits - 1]; }

void hr_turbo_signs(float *signs, int hd, uint64_t seed) {
    uint64_t s = seed, z = 0;
    for (int i = 0; i < hd; i++) {
        if (i % 64 == 0) { /* splitmix64 */
            z = (s += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
        }
        signs[i] = (z >> (i % 64)) & 1 ? -1.0f : 1.0f;
    }
}

/* In place: the unnormalized fast Walsh-Hadamard transform (Sylvester order) */
static void fwht(float *v, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
}

void hr_turbo_rotate(float *y, const float *x, const float *signs, int hd) {
    float r = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < hd; i++)
        y[i] = x[i] * signs[i];
    fwht(y, hd);
    for (int i = 0; i < hd; i++)
        y[i] *= r;
}

void hr_turbo_unrotate(float *x, const float *y, const float *signs, int hd) {
    float r = 1.0f / sqrtf((float)hd);
    if (x != y)
        memcpy(x, y, (size_t)hd * sizeof *x);
    fwht(x, hd);
    for (int i = 0; i < hd; i++)
        x[i] *= r * signs[i];
}

void hr_turbo_store(void *dst, const float *x, int hd, int bits, const float *signs) {
    const float *c = hr_turbo_centroids[dim_index(hd)][bits - 1];
    int k = 1 << bits;
    float y[256];
    double n2 = 0;
    for (int i = 0; i < hd; i++)
        n2 += (double)x[i] * x[i];
    float n = (float)sqrt(n2), s = n > 0 ? sqrtf((float)hd) / n : 0.0f;
    hr_turbo_rotate(y, x, signs, hd);
    uint8_t *q = (uint8_t *)dst + 4;
    memcpy(dst, &n, 4);
    memset(q, 0, (size_t)hd * (size_t)bits / 8);
    for (int i = 0; i < hd; i++) {
        float z = y[i] * s;
        int code = 0; /* the nearest centroid: the cells' thresholds are midpoints */
        while (code + 1 < k && z > 0.5f * (c[code] + c[code + 1]))
            code++;
        size_t bit = (size_t)i * (size_t)bits;
        q[bit >> 3] |= (uint8_t)(code << (bit & 7));
        if ((bit & 7) + (unsigned)bits > 8)
            q[(bit >> 3) + 1] |= (uint8_t)(code >> (8 - (bit & 7)));
    }
}

void hr_turbo_load_rotated(float *y, const void *src, int hd, int bits) {
    const float *c = hr_turbo_centroids[dim_index(hd)][bits - 1];
    const uint8_t *q = (const uint8_t *)src + 4;
    float n;
    memcpy(&n, src, 4);
    float s = n / sqrtf((float)hd);
    for (int i = 0; i < hd; i++) {
        size_t bit = (size_t)i * (size_t)bits;
        unsigned v = q[bit >> 3];
        if ((bit & 7) + (unsigned)bits > 8)
            v |= (unsigned)q[(bit >> 3) + 1] << 8;
        y[i] = c[(v >> (bit & 7)) & ((1u << bits) - 1)] * s;
    }
}

void hr_turbo_load(float *x, const void *src, int hd, int bits, const float *signs) {
    hr_turbo_load_rotated(x, src, hd, bits);
    hr_turbo_unrotate(x, x, signs, hd);
}
