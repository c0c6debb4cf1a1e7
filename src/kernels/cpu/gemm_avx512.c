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
#include <stdbool.h>

#define AI static inline __attribute__((always_inline))

typedef enum wkind { W_F32, W_BF16, W_F16 } wkind;

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* bf16 widened by one word permute (port 5) that puts value i in the high
 * half of lane i and zeroes the low halves, rather than a widen (port 5)
 * and a shift (port 0, the FMAs'): the same floats */
AI __m512 load_bf16(const uint16_t *p, __mmask16 m, bool full) {
    const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                         7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(
        _mm512_maskz_permutexvar_epi16(0xaaaaaaaau, idx, _mm512_castsi256_si512(h)));
}

/* The loads: plain in the k loop's body (FULL), masked for the k tail
 * alone. A mask computed in every iteration (a kmov from a general
 * register, and masked loads) cost a one-row product from memory nearly
 * half its speed on Zen 5 (docs/numerics.md). */
AI __m512 load_w(wkind kd, const void *w, size_t off, __mmask16 m, bool full) {
    if (kd == W_F32)
        return full ? _mm512_loadu_ps((const float *)w + off)
                    : _mm512_maskz_loadu_ps(m, (const float *)w + off);
    const uint16_t *p = (const uint16_t *)w + off;
    if (kd == W_BF16)
        return load_bf16(p, m, full);
    return _mm512_cvtph_ps(full ? _mm256_loadu_si256((const __m256i *)p)
                                : _mm256_maskz_loadu_epi16(m, p));
}

AI __m512 load_x(const float *x, __mmask16 m, bool full) {
    return full ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps(m, x);
}

/* One 16-column step of a tile of R activation rows by NB weight rows
 * (those from row j of w); every output its own accumulator */
AI void tile_step(wkind kd, int R, int NB, __m512 acc[4][4], const float *x, int ldx,
                  const void *w, int k, size_t w0, int t, __mmask16 m, bool full) {
    __m512 wv[4];
    for (int b = 0; b < NB; b++)
        wv[b] = load_w(kd, w, w0 + (size_t)b * k + t, m, full);
    for (int a = 0; a < R; a++) {
        __m512 xv = load_x(x + (size_t)a * ldx + t, m, full);
        for (int b = 0; b < NB; b++)
            acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
    }
}

/* y[a][j + b] for a < R, b < NB over k: 16-lane chunks in order, then the
 * lanes' sum, so a row's result does not depend on the tile it ran in.
 * With PF the tile prefetches the next NB weight rows into L1 as it goes,
 * a line at a time: left to the hardware prefetcher, the memory stream
 * stalled while a tile computed on rows already in L1 (docs/numerics.md).
 * f32 weights are not prefetched: a one-row product ran slower with it. */
AI void tile(wkind kd, int R, int NB, float *y, int ldy, const float *x, int ldx,
             const void *w, int k, int j, bool pf) {
    size_t w0 = (size_t)j * k;
    int es = kd == W_F32 ? 4 : 2;
    const char *next = (const char *)w + (w0 + (size_t)NB * k) * es;
    __m512 acc[4][4];
    for (int a = 0; a < R; a++)
        for (int b = 0; b < NB; b++)
            acc[a][b] = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= k; t += 16) {
        for (int b = 0; pf && t % 32 == 0 && b < NB; b++)
            _mm_prefetch(next + ((size_t)b * k + t) * es, _MM_HINT_T0);
        tile_step(kd, R, NB, acc, x, ldx, w, k, w0, t, 0xffff, true);
    }
    if (t < k)
        tile_step(kd, R, NB, acc, x, ldx, w, k, w0, t, tail_mask(k - t), false);
    for (int a = 0; a < R; a++)
        for (int b = 0; b < NB; b++)
            y[(size_t)a * ldy + j + b] = _mm512_reduce_add_ps(acc[a][b]);
}

/* One kernel per weight dtype: register tiles of 4 weight rows by 4
 * activation rows (the last 1-3 in one tile) and 1x1 for the last weight
 * rows, X blocked by IB rows so a block stays in L2 while W streams past
 * it. */
#define IB 64
AI void gemm(wkind kd, float *y, int ldy, const float *x, int ldx, int n, const hr_tensor *wt,
             int m0, int m1) {
    const void *w = wt->data;
    int k = (int)wt->shape[1];
    for (int i0 = 0; i0 < n; i0 += IB) {
        int i1 = i0 + IB < n ? i0 + IB : n;
        int j = m0;
        for (; j + 4 <= m1; j += 4) {
            bool pf = kd != W_F32 && j + 8 <= m1;
            int i = i0;
            for (; i + 4 <= i1; i += 4, pf = false)
                tile(kd, 4, 4, y + (size_t)i * ldy, ldy, x + (size_t)i * ldx, ldx, w, k, j, pf);
            float *yi = y + (size_t)i * ldy;
            const float *xi = x + (size_t)i * ldx;
            switch (i1 - i) {
            case 3: tile(kd, 3, 4, yi, ldy, xi, ldx, w, k, j, pf); break;
            case 2: tile(kd, 2, 4, yi, ldy, xi, ldx, w, k, j, pf); break;
            case 1: tile(kd, 1, 4, yi, ldy, xi, ldx, w, k, j, pf); break;
            }
        }
        for (; j < m1; j++)
            for (int i = i0; i < i1; i++)
                tile(kd, 1, 1, y + (size_t)i * ldy, ldy, x + (size_t)i * ldx, ldx, w, k, j,
                     false);
    }
}

static void gemm_f32_avx512(float *y, int ldy, const float *x, int ldx, int n,
                            const hr_tensor *wt, int m0, int m1) {
    gemm(W_F32, y, ldy, x, ldx, n, wt, m0, m1);
}
static void gemm_bf16_avx512(float *y, int ldy, const float *x, int ldx, int n,
                             const hr_tensor *wt, int m0, int m1) {
    gemm(W_BF16, y, ldy, x, ldx, n, wt, m0, m1);
}
static void gemm_f16_avx512(float *y, int ldy, const float *x, int ldx, int n,
                            const hr_tensor *wt, int m0, int m1) {
    gemm(W_F16, y, ldy, x, ldx, n, wt, m0, m1);
}

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
