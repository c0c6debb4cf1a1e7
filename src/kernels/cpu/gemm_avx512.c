/* AVX-512 kernels (compiled with -mavx512f/bw/vl/dq/vnni: no BF16
 * instructions, bf16 is widened by a word permute). Weights are
 * widened to f32 in registers; activations and accumulation stay f32, so
 * this path agrees with the scalar reference to rounding. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
#include "kernels/cpu/hsum_avx512.h"

#include <immintrin.h>

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

static inline __m512 load_f32(const void *p, size_t off, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + off);
}
/* bf16 widened by one word permute (port 5) that puts value i in the high
 * half of lane i and zeroes the low halves, rather than a widen (port 5)
 * and a shift (port 0, the FMAs'): the same floats */
static inline __m512 load_bf16(const void *p, size_t off, __mmask16 m) {
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                         7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    __m512i h = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xaaaaaaaau, idx, h));
}
static inline __m512 load_f16(const void *p, size_t off, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + off));
}

/* One kernel family per weight dtype: 4x4, 1x4 and 1x1 register tiles,
 * X blocked by IB rows so a block stays in L2 while W streams past it. */
#define IB 64
#define GEMM_AVX512(NAME, LOADW)                                                \
    static void NAME(float *y, int ldy, const float *x, int ldx, int n,         \
                     const hr_tensor *wt, int m0, int m1) {                     \
        const void *w = wt->data;                                               \
        int k = (int)wt->shape[1];                                              \
        for (int i0 = 0; i0 < n; i0 += IB) {                                    \
            int i1 = i0 + IB < n ? i0 + IB : n;                                 \
            int j = m0;                                                         \
            for (; j + 4 <= m1; j += 4) {                                       \
                size_t w0 = (size_t)j * k;                                      \
                int i = i0;                                                     \
                for (; i + 4 <= i1; i += 4) {                                   \
                    __m512 acc[4][4];                                           \
                    for (int a = 0; a < 4; a++)                                 \
                        for (int b = 0; b < 4; b++)                             \
                            acc[a][b] = _mm512_setzero_ps();                    \
                    for (int t = 0; t < k; t += 16) {                           \
                        __mmask16 m = tail_mask(k - t);                         \
                        __m512 wv[4], xv;                                       \
                        for (int b = 0; b < 4; b++)                             \
                            wv[b] = LOADW(w, w0 + (size_t)b * k + t, m);        \
                        for (int a = 0; a < 4; a++) {                           \
                            xv = _mm512_maskz_loadu_ps(                         \
                                m, x + (size_t)(i + a) * ldx + t);              \
                            for (int b = 0; b < 4; b++)                         \
                                acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]); \
                        }                                                       \
                    }                                                           \
                    for (int a = 0; a < 4; a++)                                 \
                        for (int b = 0; b < 4; b++)                             \
                            y[(size_t)(i + a) * ldy + j + b] =                  \
                                _mm512_reduce_add_ps(acc[a][b]);                \
                }                                                               \
                for (; i < i1; i++) {                                           \
                    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),  \
                                     _mm512_setzero_ps(), _mm512_setzero_ps()}; \
                    const float *xi = x + (size_t)i * ldx;                      \
                    for (int t = 0; t < k; t += 16) {                           \
                        __mmask16 m = tail_mask(k - t);                         \
                        __m512 xv = _mm512_maskz_loadu_ps(m, xi + t);           \
                        for (int b = 0; b < 4; b++)                             \
                            acc[b] = _mm512_fmadd_ps(                           \
                                xv, LOADW(w, w0 + (size_t)b * k + t, m), acc[b]); \
                    }                                                           \
                    for (int b = 0; b < 4; b++)                                 \
                        y[(size_t)i * ldy + j + b] = _mm512_reduce_add_ps(acc[b]); \
                }                                                               \
            }                                                                   \
            for (; j < m1; j++)                                                 \
                for (int i = i0; i < i1; i++) {                                 \
                    __m512 acc = _mm512_setzero_ps();                           \
                    const float *xi = x + (size_t)i * ldx;                      \
                    for (int t = 0; t < k; t += 16) {                           \
                        __mmask16 m = tail_mask(k - t);                         \
                        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xi + t), \
                                              LOADW(w, (size_t)j * k + t, m), acc); \
                    }                                                           \
                    y[(size_t)i * ldy + j] = _mm512_reduce_add_ps(acc);         \
                }                                                               \
        }                                                                       \
    }

GEMM_AVX512(gemm_f32_avx512, load_f32)
GEMM_AVX512(gemm_bf16_avx512, load_bf16)
GEMM_AVX512(gemm_f16_avx512, load_f16)

static float dot_avx512(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    for (int t = 0; t < n; t += 16) {
        __mmask16 m = tail_mask(n - t);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + t),
                              _mm512_maskz_loadu_ps(m, b + t), acc);
    }
    return hr_hsum_avx512(acc);
}

static void axpy_avx512(float *y, float a, const float *x, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int t = 0; t < n; t += 16) {
        __mmask16 m = tail_mask(n - t);
        __m512 yv = _mm512_maskz_loadu_ps(m, y + t);
        _mm512_mask_storeu_ps(y + t, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + t), yv));
    }
}

/* axpys (cpu.h): 64 columns in 4 registers over the k loop, then 16 at a
 * time (the tail masked: the same fused operation per lane) */
static void axpys_avx512(float *y, int n, const float *a, int r, const float *x, size_t ldx) {
    int t = 0;
    for (; t + 64 <= n; t += 64) {
        __m512 y0 = _mm512_loadu_ps(y + t), y1 = _mm512_loadu_ps(y + t + 16),
               y2 = _mm512_loadu_ps(y + t + 32), y3 = _mm512_loadu_ps(y + t + 48);
        const float *xr = x + t;
        for (int k = 0; k < r; k++, xr += ldx) {
            __m512 av = _mm512_set1_ps(a[k]);
            y0 = _mm512_fmadd_ps(av, _mm512_loadu_ps(xr), y0);
            y1 = _mm512_fmadd_ps(av, _mm512_loadu_ps(xr + 16), y1);
            y2 = _mm512_fmadd_ps(av, _mm512_loadu_ps(xr + 32), y2);
            y3 = _mm512_fmadd_ps(av, _mm512_loadu_ps(xr + 48), y3);
        }
        _mm512_storeu_ps(y + t, y0);
        _mm512_storeu_ps(y + t + 16, y1);
        _mm512_storeu_ps(y + t + 32, y2);
        _mm512_storeu_ps(y + t + 48, y3);
    }
    for (; t < n; t += 16) {
        __mmask16 m = tail_mask(n - t);
        __m512 y0 = _mm512_maskz_loadu_ps(m, y + t);
        const float *xr = x + t;
        for (int k = 0; k < r; k++, xr += ldx)
            y0 = _mm512_fmadd_ps(_mm512_set1_ps(a[k]), _mm512_maskz_loadu_ps(m, xr), y0);
        _mm512_mask_storeu_ps(y + t, m, y0);
    }
}

const hr_cpu_kernels hr__cpu_avx512 = {
    .name = "avx512",
    .math = 2,
    .gemm = {[HR_DTYPE_F32] = gemm_f32_avx512,
             [HR_DTYPE_BF16] = gemm_bf16_avx512,
             [HR_DTYPE_F16] = gemm_f16_avx512,
             HR__GEMM_Q_TABLE(avx512)},
    .gemm_i8 = {HR__GEMM_I8_TABLE(avx512)},
    .qact_row = hr__qact_row_avx512,
    .gemm_x16 = {HR__GEMM_X16_TABLE(avx512)},
    .qact32_row = hr__qact32_row_avx512,
    .qactk_row = hr__qactk_row_avx512,
    .qact24_row = hr__qact24_row_avx512,
    .attn_heads = hr__attn_heads_avx512,
    .to_half = hr__to_half_avx512,
    .widen = hr__widen_avx2,
    .kvq_load = hr__kvq_load_avx512,
    .kvq_dots = hr__kvq_dots_avx2_w512,
    .kvq_axpys = hr__kvq_axpys_avx2_w512,
    .kvg_dots = hr__kvg_dots_avx2_w512,
    .kvg_axpys = hr__kvg_axpys_avx2_w512,
    .turbo_dots = hr__turbo_dots_avx512,
    .turbo_axpys = hr__turbo_axpys_avx512,
    .turbo_rotate = hr__turbo_rotate_avx512,
    .turbo_unrotate = hr__turbo_unrotate_avx512,
    .turbo_encode = hr__turbo_encode_avx512,
    .softmax = hr__softmax_avx512,
    .silu_mul = hr__silu_mul_avx512,
    .max = hr__max_avx512,
    .argmax = hr__argmax_avx512,
    .rmsnorm = hr__rmsnorm_avx512,
    .exp_sum = hr__exp_sum_avx512,
    .dot = dot_avx512,
    .axpy = axpy_avx512,
    .axpys = axpys_avx512,
};
