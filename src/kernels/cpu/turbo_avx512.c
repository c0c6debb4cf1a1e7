/* TurboQuant's row operations (turbo.c: the scalar bodies are the
 * definition) with AVX-512, for the rows a step rotates and stores: the
 * rotation of n floats (n 16 to 256, a multiple of 16) held in registers,
 * and the codes of a rotated row. Every value comes from the scalar's
 * operations on the same operands, so the bits are the scalar's
 * (test_turbo: test_rows_isas).
 *
 * The transform's stages run in the scalar's order (h = 1, 2, 4, ...); a
 * stage's butterflies are independent, each a + b and a - b of the same
 * two values. For h < 16 the pair lies inside a register: p, the register
 * with each lane's partner, from one permute, then a + b = v + p on the
 * pairs' low lanes and a - b = p - v on their high lanes (a masked
 * subtraction over the sum). For h >= 16 the pair is two registers. */
#include "kernels/cpu/turbo.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define MAXR (256 / 16) /* registers of the longest row */

/* v's lanes as the pair's low lane (v + p) or high lane (p - v, hi) */
AI __m512 bfly(__m512 v, __m512 p, __mmask16 hi) {
    return _mm512_mask_sub_ps(_mm512_add_ps(v, p), hi, p, v);
}

/* The unnormalized fast Walsh-Hadamard transform of the R registers V
 * (turbo.c's fwht over 16 R floats) */
AI void fwht(__m512 *V, const int R) {
    for (int i = 0; i < R; i++) {
        __m512 v = V[i];
        v = bfly(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)), 0xaaaa);
        v = bfly(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)), 0xcccc);
        v = bfly(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)), 0xf0f0);
        V[i] = bfly(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)), 0xff00);
    }
    for (int h = 1; h < R; h *= 2)
        for (int i = 0; i < R; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                __m512 a = V[j], b = V[j + h];
                V[j] = _mm512_add_ps(a, b);
                V[j + h] = _mm512_sub_ps(a, b);
            }
}

AI void rotate_r(float *y, const float *x, const float *signs, const int R) {
    __m512 V[MAXR], r = _mm512_set1_ps(1.0f / sqrtf((float)(16 * R)));
    for (int i = 0; i < R; i++)
        V[i] = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), _mm512_loadu_ps(signs + 16 * i));
    fwht(V, R);
    for (int i = 0; i < R; i++)
        _mm512_storeu_ps(y + 16 * i, _mm512_mul_ps(V[i], r));
}

AI void unrotate_r(float *x, const float *y, const float *signs, const int R) {
    __m512 V[MAXR], r = _mm512_set1_ps(1.0f / sqrtf((float)(16 * R)));
    for (int i = 0; i < R; i++)
        V[i] = _mm512_loadu_ps(y + 16 * i);
    fwht(V, R);
    for (int i = 0; i < R; i++) /* x * (r * sign): the scalar's two roundings */
        _mm512_storeu_ps(x + 16 * i,
                         _mm512_mul_ps(V[i], _mm512_mul_ps(r, _mm512_loadu_ps(signs + 16 * i))));
}

void hr__turbo_rotate_avx512(float *y, const float *x, const float *signs, int n) {
    switch (n) { /* the lengths TurboQuant takes (a row's or a segment's) */
    case 32: rotate_r(y, x, signs, 2); break;
    case 64: rotate_r(y, x, signs, 4); break;
    case 128: rotate_r(y, x, signs, 8); break;
    case 256: rotate_r(y, x, signs, 16); break;
    default: hr__turbo_rotate_scalar(y, x, signs, n); break;
    }
}

void hr__turbo_unrotate_avx512(float *x, const float *y, const float *signs, int n) {
    switch (n) {
    case 32: unrotate_r(x, y, signs, 2); break;
    case 64: unrotate_r(x, y, signs, 4); break;
    case 128: unrotate_r(x, y, signs, 8); break;
    case 256: unrotate_r(x, y, signs, 16); break;
    default: hr__turbo_unrotate_scalar(x, y, signs, n); break;
    }
}

/* The code of each z = y s is the number of cell thresholds (the
 * centroids' midpoints, increasing) below it: the scalar's walk up the
 * cells stops at the first threshold z does not exceed, and z exceeds none
 * after it (a NaN none at all). zc's sum stays one chain in order. */
double hr__turbo_encode_avx512(uint8_t *q, const float *y, float s, const float *c, int dim,
                               int bits) {
    if (dim % 16 || dim > 256 || bits < 1 || bits > 4) /* the buffers below */
        return hr__turbo_encode_scalar(q, y, s, c, dim, bits);
    int k = 1 << bits;
    float z[256];
    int32_t code[256];
    __m512 t[15];
    for (int i = 0; i + 1 < k; i++)
        t[i] = _mm512_set1_ps(0.5f * (c[i] + c[i + 1]));
    const __m512 sv = _mm512_set1_ps(s);
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < dim; i += 16) {
        __m512 zv = _mm512_mul_ps(_mm512_loadu_ps(y + i), sv);
        __m512i cv = _mm512_setzero_si512();
        for (int j = 0; j + 1 < k; j++)
            cv = _mm512_mask_add_epi32(cv, _mm512_cmp_ps_mask(zv, t[j], _CMP_GT_OQ), cv, one);
        _mm512_storeu_ps(z + i, zv);
        _mm512_storeu_si512(code + i, cv);
    }
    return hr__turbo_pack(q, z, code, c, dim, bits);
}
