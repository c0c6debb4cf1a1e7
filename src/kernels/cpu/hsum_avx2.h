/* Horizontal sums of 8-lane f32 vectors in one fixed order (every AVX2
 * kernel's and the scalar references' hr__kvq_hsum8): u[l] = t[l] + t[l +
 * 4], v[l] = u[l] + u[l + 2], v[0] + v[1]. hr_hsum_2x4_avx2 sums eight
 * vectors at once, each in exactly that order; hr_dots_2x4_avx2 makes the
 * eight it sums for 2 query rows x 4 keys. For files compiled with the AVX2
 * flags. */
#ifndef HR_KERNELS_HSUM_AVX2_H
#define HR_KERNELS_HSUM_AVX2_H

#include <immintrin.h>

static inline float hr_hsum8_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hr_hsum8_avx2 of t[r][k] (r < 2, k < 4: a block of 2 query rows x 4 keys)
 * in one vector, lanes 0-3 row 0's keys 0-3, lanes 4-7 row 1's: 14
 * shuffles and 7 adds where 8 single sums are 40 operations */
static inline __m256 hr_hsum_2x4_avx2(__m256 t[2][4]) {
    __m256 u[4]; /* u of (0, k) in lanes 0-3, of (1, k) in lanes 4-7 */
    for (int k = 0; k < 4; k++)
        u[k] = _mm256_add_ps(_mm256_permute2f128_ps(t[0][k], t[1][k], 0x20),
                             _mm256_permute2f128_ps(t[0][k], t[1][k], 0x31));
    /* v[0], v[1] of keys 0 and 1 (lanes 0-3 row 0, 4-7 row 1), of keys 2 and 3 */
    __m256 v01 = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 v23 = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* A[r][k] = the fma chains of rows qr[r] and keys vk[k] over positions
 * [t0, t0 + len) (len a multiple of 8), 8 floats at a time in order: each
 * key load serves both rows and each row load 4 keys (attn_dots' 2 x 4
 * blocks, kvwide's score pass) */
static inline __attribute__((always_inline)) void
hr_dots_2x4_avx2(__m256 A[2][4], const float *const qr[2], const float *const vk[4], int t0,
                 int len) {
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++)
            A[r][k] = _mm256_setzero_ps();
    for (int t = t0; t < t0 + len; t += 8) {
        __m256 x0 = _mm256_loadu_ps(qr[0] + t), x1 = _mm256_loadu_ps(qr[1] + t);
        for (int k = 0; k < 4; k++) {
            __m256 y = _mm256_loadu_ps(vk[k] + t);
            A[0][k] = _mm256_fmadd_ps(x0, y, A[0][k]);
            A[1][k] = _mm256_fmadd_ps(x1, y, A[1][k]);
        }
    }
}

#endif
