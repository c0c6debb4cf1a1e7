/* AVX-512 row kernels with the scalar ones' results (cpu.h): greedy
 * decoding's argmax and the RMS norm, which run on one thread between the
 * pool's jobs in a decode step, where every microsecond is one the other
 * threads wait. Scalar, the argmax's search for the max's index took 100-190
 * us over a 151936-token vocabulary, and a Qwen3-0.6B token's norms (2 of
 * 1024 and 24 of 128 a layer) 160 us. */
#include "kernels/cpu/gemm_q.h"

#include <immintrin.h>
#include <math.h>

int32_t hr__argmax_avx512(const float *x, int n) {
    __m512 m = _mm512_set1_ps(hr__max_avx512(x, n));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __mmask16 e = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), m, _CMP_EQ_OQ);
        if (e)
            return i + __builtin_ctz(e);
    }
    return 0;
}

/* The 8 chains of hr__rmsnorm_scalar are the 8 lanes of one vector of
 * doubles (a product of floats is exact in double: fmadd rounds as the
 * scalar add does) */
void hr__rmsnorm_avx512(float *y, const float *x, const float *w, float offset, int d,
                        float eps) {
    __m512d acc = _mm512_setzero_pd();
    int i = 0;
    for (; i + 8 <= d; i += 8) {
        __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        acc = _mm512_fmadd_pd(v, v, acc);
    }
    double ss = 0, a[8];
    for (int j = i; j < d; j++)
        ss += (double)x[j] * x[j];
    _mm512_storeu_pd(a, acc);
    for (int j = 0; j < 8; j++)
        ss += a[j];
    float r = 1.0f / sqrtf((float)(ss / d) + eps);
    __m512 vr = _mm512_set1_ps(r), vo = _mm512_set1_ps(offset);
    for (i = 0; i < d; i += 16) {
        __mmask16 k = d - i >= 16 ? 0xffff : (__mmask16)((1u << (d - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vr),
                                 _mm512_add_ps(_mm512_maskz_loadu_ps(k, w + i), vo));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}
