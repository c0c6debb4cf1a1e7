/* TurboQuant's MSE quantizer of one row (turbo.h). */
#include "kernels/cpu/turbo.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/turbo_codebooks.h"

#include <math.h>
#include <string.h>

static int dim_index(int hd) {
    return hd == 32 ? 0 : hd == 64 ? 1 : hd == 128 ? 2 : hd == 256 ? 3 : -1;
}

bool hr_turbo_ok(int hd, int bits) { return dim_index(hd) >= 0 && bits >= 1 && bits <= 4; }

const float *hr_turbo_codebook(int hd, int bits) {
    return hr_turbo_centroids[dim_index(hd)][bits - 1];
}

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

void hr__turbo_rotate_scalar(float *y, const float *x, const float *signs, int hd) {
    float r = 1.0f / sqrtf((float)hd);
    for (int i = 0; i < hd; i++)
        y[i] = x[i] * signs[i];
    fwht(y, hd);
    for (int i = 0; i < hd; i++)
        y[i] *= r;
}

void hr__turbo_unrotate_scalar(float *x, const float *y, const float *signs, int hd) {
    float r = 1.0f / sqrtf((float)hd);
    if (x != y)
        memcpy(x, y, (size_t)hd * sizeof *x);
    fwht(x, hd);
    for (int i = 0; i < hd; i++)
        x[i] *= r * signs[i];
}

double hr__turbo_encode_scalar(uint8_t *q, const float *y, float s, const float *c, int dim,
                               int bits) {
    int k = 1 << bits;
    double zc = 0;
    memset(q, 0, (size_t)dim * (size_t)bits / 8);
    for (int i = 0; i < dim; i++) {
        float z = y[i] * s;
        int code = 0; /* the nearest centroid: the cells' thresholds are midpoints */
        while (code + 1 < k && z > 0.5f * (c[code] + c[code + 1]))
            code++;
        zc += (double)z * c[code];
        size_t bit = (size_t)i * (size_t)bits;
        q[bit >> 3] |= (uint8_t)(code << (bit & 7));
        if ((bit & 7) + (unsigned)bits > 8)
            q[(bit >> 3) + 1] |= (uint8_t)(code >> (8 - (bit & 7)));
    }
    return zc;
}

void hr_turbo_rotate(float *y, const float *x, const float *signs, int hd) {
    hr_cpu()->turbo_rotate(y, x, signs, hd);
}

void hr_turbo_unrotate(float *x, const float *y, const float *signs, int hd) {
    hr_cpu()->turbo_unrotate(x, y, signs, hd);
}

/* The codes of y (dim floats: x rotated, x of norm n) at q; returns
 * sum_i z_i c[code_i] (double), <z, the centroids> */
static double encode(uint8_t *q, const float *y, float n, int dim, int bits) {
    float s = n > 0 ? sqrtf((float)dim) / n : 0.0f;
    return hr_cpu()->turbo_encode(q, y, s, hr_turbo_centroids[dim_index(dim)][bits - 1], dim, bits);
}

static float norm_of(const float *x, int n) {
    double n2 = 0;
    for (int i = 0; i < n; i++)
        n2 += (double)x[i] * x[i];
    return (float)sqrt(n2);
}

void hr_turbo_store(void *dst, const float *x, int hd, int bits, const float *signs) {
    float n = norm_of(x, hd), y[256];
    memcpy(dst, &n, 4);
    hr_turbo_rotate(y, x, signs, hd);
    encode((uint8_t *)dst + 4, y, n, hd, bits);
}

void hr_turbo_load_rotated(float *y, const void *src, int hd, int bits) {
    const float *c = hr_turbo_centroids[dim_index(hd)][bits - 1];
    const uint8_t *q = (const uint8_t *)src + 4;
    float n;
    memcpy(&n, src, 4);
    float s = n / sqrtf((float)hd);
    for (int i = 0; i < hd; i++)
        y[i] = c[hr_turbo_code(q, i, bits)] * s;
}

void hr_turbo_load(float *x, const void *src, int hd, int bits, const float *signs) {
    hr_turbo_load_rotated(x, src, hd, bits);
    hr_turbo_unrotate(x, x, signs, hd);
}

/* ---- the KV pool's rows ------------------------------------------------------------ */

bool hr_turbo_kv_ok(int hd, int r2) {
    return (hd == 64 || hd == 128 || hd == 256) && r2 >= 4 && r2 <= 8;
}

void hr_turbo_kv_layout(hr_turbo_kv *L, int hd, int r2) {
    memset(L, 0, sizeof *L);
    L->hd = hd;
    L->r2 = r2;
    L->nseg = r2 % 2 ? 2 : 1;
    L->dim = hd / L->nseg;
    L->bits[0] = (r2 + 1) / 2;
    L->bits[1] = r2 / 2;
    L->code_off[0] = 2 * (size_t)L->nseg;
    L->code_off[1] = L->code_off[0] + (size_t)L->dim * (size_t)L->bits[0] / 8;
    L->bytes = hr_turbo_kv_bytes(hd, r2);
    L->rinv = 1.0f / sqrtf((float)L->dim);
    for (int s = 0; s < L->nseg; s++)
        L->cb[s] = hr_turbo_centroids[dim_index(L->dim)][L->bits[s] - 1];
}

void hr_turbo_kv_signs(float *signs, const hr_turbo_kv *L, int layer, int head, bool v) {
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < L->nseg; s++)
            hr_turbo_signs(signs + (size_t)r * L->hd + (size_t)s * L->dim, L->dim,
                           hr_turbo_kv_seed(layer, head, s, v, r));
}

/* Segment s's channels g (dim floats) rotated into y: H D2 H D1 g / dim */
static void seg_rotate(float *y, const float *g, const hr_turbo_kv *L, const float *signs,
                       int s) {
    hr_turbo_rotate(y, g, signs + (size_t)s * L->dim, L->dim);
    hr_turbo_rotate(y, y, signs + (size_t)L->hd + (size_t)s * L->dim, L->dim);
}

void hr_turbo_kv_rotate(float *y, const float *x, const hr_turbo_kv *L, const float *signs) {
    float g[256];
    for (int s = 0; s < L->nseg; s++) {
        for (int e = 0; e < L->dim; e++)
            g[e] = x[hr_turbo_kv_chan(L, s, e)];
        seg_rotate(y + (size_t)s * L->dim, g, L, signs, s);
    }
}

void hr_turbo_kv_unrotate(float *x, const float *y, const hr_turbo_kv *L, const float *signs) {
    float g[256];
    for (int s = 0; s < L->nseg; s++) {
        hr_turbo_unrotate(g, y + (size_t)s * L->dim, signs + (size_t)L->hd + (size_t)s * L->dim,
                          L->dim);
        hr_turbo_unrotate(g, g, signs + (size_t)s * L->dim, L->dim);
        for (int e = 0; e < L->dim; e++)
            x[hr_turbo_kv_chan(L, s, e)] = g[e];
    }
}

void hr_turbo_kv_store(void *dst, const float *x, const hr_turbo_kv *L, const float *signs) {
    float g[256], y[256];
    for (int s = 0; s < L->nseg; s++) {
        for (int e = 0; e < L->dim; e++)
            g[e] = x[hr_turbo_kv_chan(L, s, e)];
        float n = norm_of(g, L->dim);
        seg_rotate(y, g, L, signs, s);
        double zc = encode((uint8_t *)dst + L->code_off[s], y, n, L->dim, L->bits[s]);
        /* the scale that makes <x^, x> = |x|^2 (turbo.h): n d / <z, c>
         * (z c(z) >= 0 term by term, and > 0 somewhere when n > 0) */
        float w = zc > 0 ? (float)((double)n * L->dim / zc) : 0.0f;
        uint16_t h = hr_f32_to_f16(fminf(w, 65504.0f));
        memcpy((char *)dst + 2 * s, &h, 2);
    }
}

void hr_turbo_kv_load_rotated(float *y, const void *src, const hr_turbo_kv *L) {
    for (int s = 0; s < L->nseg; s++) {
        uint16_t h;
        memcpy(&h, (const char *)src + 2 * s, 2);
        float w = hr_f16_to_f32(h) * L->rinv;
        const uint8_t *q = (const uint8_t *)src + L->code_off[s];
        for (int e = 0; e < L->dim; e++)
            y[(size_t)s * L->dim + e] = L->cb[s][hr_turbo_code(q, e, L->bits[s])] * w;
    }
}
