/* Horizontal sums of 16-lane f32 vectors in one fixed order (compilers
 * differ in how they expand _mm512_reduce_add_ps): halves of 256, then of
 * 128, then lanes (0+2, 1+3), then those two. hr_hsum4_avx512 sums four
 * vectors at once, each in exactly that order, so its lanes 0, 4, 8 and 12
 * equal hr_hsum_avx512 of a0..a3 bit for bit. For files compiled with the
 * AVX-512 flags. */
#ifndef HR_KERNELS_HSUM_AVX512_H
#define HR_KERNELS_HSUM_AVX512_H

#include <immintrin.h>

static inline float hr_hsum_avx512(__m512 a) {
    __m256 t3 = _mm256_add_ps(_mm512_extractf32x8_ps(a, 1), _mm512_castps512_ps256(a));
    __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(2, 3, 0, 1))));
}

static inline __m512 hr_hsum4_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    /* [lo256 a0 | lo256 a1] + [hi256 a0 | hi256 a1] */
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0xEE), _mm512_shuffle_f32x4(a0, a1, 0x44));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0xEE), _mm512_shuffle_f32x4(a2, a3, 0x44));
    /* 128-bit lane i: hi128 + lo128 of key i's 256-bit sum */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0xDD), _mm512_shuffle_f32x4(s01, s23, 0x88));
    __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
}

#endif
