/* A 16 x 16 block of floats transposed in registers (64 shuffles), for a
 * score pass that puts 16 keys in the lanes of a register (kvwide_avx512.c's
 * dots_lanes). For files compiled with the AVX-512 flags. */
#ifndef HR_KERNELS_TRANSPOSE_AVX512_H
#define HR_KERNELS_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* r[0..16) (16 rows of 16) transposed in place: r[d] = element d of each row */
static inline __attribute__((always_inline)) void hr_transpose16_avx512(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) { /* per 128-bit lane: (a0 b0 a1 b1), (a2 b2 a3 b3) */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + k], lane L: element 4L + k of rows i .. i + 3 */
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) { /* the 4 x 4 lanes of u[k], u[4 + k], .. transposed */
        __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44),
               v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE),
               v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44),
               v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
        r[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

#endif
