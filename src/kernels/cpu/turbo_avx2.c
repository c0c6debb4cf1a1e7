/* TurboQuant's row operations (turbo.c: the scalar bodies are the
 * definition) with AVX2, as turbo_avx512.c's in 8 lanes: the rotation's
 * stages h = 1, 2, 4 inside a register (the partners from one permute; the
 * pairs' low lanes take v + p, their high lanes p - v, by a blend), the
 * stages h >= 8 between registers through memory, in the scalar's stage
 * order, each butterfly the same a + b and a - b; a row's codes the count
 * of the cells' thresholds below each coordinate. The same bits as the
 * scalar (test_turbo: test_rows_isas). */
#include "kernels/cpu/turbo.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* v's lanes as the pair's low lane (v + p) or high lane (p - v, where hi's
 * sign bit is set) */
AI __m256 bfly(__m256 v, __m256 p, __m256 hi) {
    return _mm256_blendv_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), hi);
}

AI __m256 high_lanes(int h) { /* lane l with l & h set: -0.0f (the sign bit) */
    float m[8];
    for (int l = 0; l < 8; l++)
        m[l] = l & h ? -0.0f : 0.0f;
    return _mm256_loadu_ps(m);
}

/* turbo.c's fwht of n floats (a power of 2, at least 8), in place */
AI void fwht(float *v, int n) {
    const __m256 h1 = high_lanes(1), h2 = high_lanes(2), h4 = high_lanes(4);
    for (int i = 0; i < n; i += 8) {
        __m256 x = _mm256_loadu_ps(v + i);
        x = bfly(x, _mm256_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1)), h1);
        x = bfly(x, _mm256_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2)), h2);
        x = bfly(x, _mm256_permute2f128_ps(x, x, 0x01), h4);
        _mm256_storeu_ps(v + i, x);
    }
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
                _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
            }
}

AI int vec_ok(int n) { return n >= 8 && n <= 256 && !(n & (n - 1)); }

void hr__turbo_rotate_avx2(float *y, const float *x, const float *signs, int n) {
    if (!vec_ok(n)) {
        hr__turbo_rotate_scalar(y, x, signs, n);
        return;
    }
    __m256 r = _mm256_set1_ps(1.0f / sqrtf((float)n));
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(signs + i)));
    fwht(y, n);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), r));
}

void hr__turbo_unrotate_avx2(float *x, const float *y, const float *signs, int n) {
    if (!vec_ok(n)) {
        hr__turbo_unrotate_scalar(x, y, signs, n);
        return;
    }
    __m256 r = _mm256_set1_ps(1.0f / sqrtf((float)n));
    if (x != y)
        memcpy(x, y, (size_t)n * sizeof *x);
    fwht(x, n);
    for (int i = 0; i < n; i += 8) /* x * (r * sign): the scalar's two roundings */
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i),
                                              _mm256_mul_ps(r, _mm256_loadu_ps(signs + i))));
}

double hr__turbo_encode_avx2(uint8_t *q, const float *y, float s, const float *c, int dim,
                             int bits) {
    if (dim % 8 || dim > 256 || bits < 1 || bits > 4) /* the buffers below */
        return hr__turbo_encode_scalar(q, y, s, c, dim, bits);
    int k = 1 << bits;
    float z[256];
    int32_t code[256];
    __m256 t[15];
    for (int i = 0; i + 1 < k; i++)
        t[i] = _mm256_set1_ps(0.5f * (c[i] + c[i + 1]));
    const __m256 sv = _mm256_set1_ps(s);
    for (int i = 0; i < dim; i += 8) {
        __m256 zv = _mm256_mul_ps(_mm256_loadu_ps(y + i), sv);
        __m256i cv = _mm256_setzero_si256();
        for (int j = 0; j + 1 < k; j++) /* z > t: all ones, -1 */
            cv = _mm256_sub_epi32(cv, _mm256_castps_si256(_mm256_cmp_ps(zv, t[j], _CMP_GT_OQ)));
        _mm256_storeu_ps(z + i, zv);
        _mm256_storeu_si256((__m256i *)(code + i), cv);
    }
    return hr__turbo_pack(q, z, code, c, dim, bits);
}
