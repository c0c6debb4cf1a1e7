/* The quantized KV row (kvquant.h) dequantized 8 elements at a time, for
 * any bit width: the 8 quants span `bits` bytes from a byte boundary; 8
 * bytes from there (still inside the record: its f32 scales and biases
 * follow the quants) go to both 128-bit lanes, a byte shuffle puts the two
 * bytes holding quant i into dword i, a per-lane shift and a mask leave q.
 * Then s * q and + b as two rounded operations, the scalar reference's
 * bits. */
#include "kernels/cpu/kvquant.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i unpack_ctl(int bits, __m256i *shift) {
    __m256i bit = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                     _mm256_set1_epi32(bits));
    __m256i lo = _mm256_srli_epi32(bit, 3), hi = _mm256_add_epi32(lo, _mm256_set1_epi32(1));
    *shift = _mm256_and_si256(bit, _mm256_set1_epi32(7));
    return _mm256_or_si256(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)),
                           _mm256_set1_epi32((int)0x80800000u));
}

void hr__kvq_load_avx2(float *y, const void *src, int hd, int bits, int group) {
    const uint8_t *q = src;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    int ng = hd / group;
    __m256i shift, ctl = unpack_ctl(bits, &shift), mask = _mm256_set1_epi32((1 << bits) - 1);
    for (int g = 0; g < ng; g++) {
        float s, b;
        memcpy(&s, q + qb + 4 * (size_t)g, 4);
        memcpy(&b, q + qb + 4 * (size_t)(ng + g), 4);
        __m256 sv = _mm256_set1_ps(s), bv = _mm256_set1_ps(b);
        for (int j = 0; j < group; j += 8) {
            int i = g * group + j;
            long long raw;
            memcpy(&raw, q + (size_t)i * (size_t)bits / 8, 8);
            __m256i v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_cvtsi64_si128(raw)),
                                            ctl);
            __m256 qv = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, shift), mask));
            _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(sv, qv), bv));
        }
    }
}
