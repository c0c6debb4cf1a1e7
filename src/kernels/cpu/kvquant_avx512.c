/* The quantized KV row (kvquant.h) dequantized 16 elements at a time, for
 * any bit width: the 16 quants span 2 * bits bytes from a byte boundary;
 * those bytes go to every 128-bit lane, a byte shuffle puts the two bytes
 * holding quant i into dword i, a per-lane shift and a mask leave q. Then
 * s * q and + b as two rounded operations, the scalar reference's bits. */
#include "kernels/cpu/kvquant.h"

#include <immintrin.h>
#include <string.h>

/* dword i of the shuffle: bytes (i bits) / 8 and the next (0x80: zero when
 * past the 2 * bits bytes, where the quant never reaches) */
static inline __m512i unpack_ctl(int bits, __m512i *shift) {
    __m512i bit = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(bits));
    __m512i lo = _mm512_srli_epi32(bit, 3), hi = _mm512_add_epi32(lo, _mm512_set1_epi32(1));
    __mmask16 past = _mm512_cmpgt_epi32_mask(hi, _mm512_set1_epi32(2 * bits - 1));
    hi = _mm512_mask_mov_epi32(hi, past, _mm512_set1_epi32(0x80));
    *shift = _mm512_and_si512(bit, _mm512_set1_epi32(7));
    return _mm512_or_si512(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 8)),
                           _mm512_set1_epi32((int)0x80800000u));
}

static inline __m512 quants16(const uint8_t *p, int bits, __m512i ctl, __m512i shift,
                              __m512i mask) {
    __m128i raw = _mm_maskz_loadu_epi8((__mmask16)((1u << (2 * bits)) - 1), p);
    __m512i v = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(raw), ctl);
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(v, shift), mask));
}

void hr__kvq_load_avx512(float *y, const void *src, int hd, int bits, int group) {
    const uint8_t *q = src;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    int ng = hd / group;
    __m512i shift, ctl = unpack_ctl(bits, &shift), mask = _mm512_set1_epi32((1 << bits) - 1);
    for (int g = 0; g < ng; g++) {
        float s, b;
        memcpy(&s, q + qb + 4 * (size_t)g, 4);
        memcpy(&b, q + qb + 4 * (size_t)(ng + g), 4);
        __m512 sv = _mm512_set1_ps(s), bv = _mm512_set1_ps(b);
        for (int j = 0; j < group; j += 16) {
            int i = g * group + j;
            __m512 qv = quants16(q + (size_t)i * (size_t)bits / 8, bits, ctl, shift, mask);
            _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(sv, qv), bv));
        }
    }
}
