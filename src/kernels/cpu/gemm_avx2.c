/* AVX2 + FMA kernels (compiled with -mavx2 -mfma -mf16c): register tiles
 * of up to 3 rows by 4 outputs with 8-lane vectors; the k tail is done in
 * scalar. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/exp_neg.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

static inline __m256 load_f32(const void *p, size_t off) {
    return _mm256_loadu_ps((const float *)p + off);
}
static inline __m256 load_bf16(const void *p, size_t off) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline __m256 load_f16(const void *p, size_t off) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + off)));
}
static inline float scal_f32(const void *p, size_t off) { return ((const float *)p)[off]; }
static inline float scal_bf16(const void *p, size_t off) {
    return hr_bf16_to_f32(((const uint16_t *)p)[off]);
}
static inline float scal_f16(const void *p, size_t off) {
    return hr_f16_to_f32(((const uint16_t *)p)[off]);
}

/* bf16 widened by one byte shuffle (port 5) of the 8 values loaded into
 * both halves, rather than a widen (port 5) and a shift (ports 0 and 1,
 * the FMAs'): the same floats, for the tiles of 2 rows, where the FMAs
 * would otherwise wait on the shifts (a 1024 x 384 product in L2: 2 rows
 * 36 -> 21 us, 1 row 18 us) */
static inline __m256 load_bf16_p5(const void *p, size_t off) {
    const __m256i idx = _mm256_setr_epi8(
        -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
        -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    __m256i h = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off)));
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(h, idx));
}

/* The weight dtypes of the f32-activation kernels */
typedef enum wkind { W_F32, W_BF16, W_F16 } wkind;

static inline __attribute__((always_inline)) __m256 load_w(wkind kd, int R, const void *p,
                                                           size_t off) {
    if (kd == W_BF16)
        return R > 1 ? load_bf16_p5(p, off) : load_bf16(p, off);
    return kd == W_F16 ? load_f16(p, off) : load_f32(p, off);
}

static inline __attribute__((always_inline)) float scal_w(wkind kd, const void *p, size_t off) {
    return kd == W_BF16 ? scal_bf16(p, off) : kd == W_F16 ? scal_f16(p, off) : scal_f32(p, off);
}

/* y[i + a][j + b] for a < R (1, 2), b < 4: each weight vector widened once
 * for the R rows. Every output is its own 8-lane accumulator over k in
 * order, hsum8, then the k tail in order: the same bits whatever R, so a
 * row gets the same result alone or in a batch of any size. With PF the
 * tile prefetches the next 4 weight rows into L1, a line at a time, as the
 * AVX-512 kernel does (docs/numerics.md). */
static inline __attribute__((always_inline)) void tile_rx4(wkind kd, int R, float *y, int ldy,
                                                           const float *x, int ldx,
                                                           const void *w, int k, int i, int j,
                                                           bool pf) {
    int k8 = k & ~7;
    size_t w0 = (size_t)j * k;
    const uint16_t *next = (const uint16_t *)w + w0 + 4 * (size_t)k;
    __m256 acc[2][4];
    for (int a = 0; a < R; a++)
        for (int b = 0; b < 4; b++)
            acc[a][b] = _mm256_setzero_ps();
    for (int t = 0; t < k8; t += 8) {
        if (pf && t % 32 == 0)
            for (int b = 0; b < 4; b++)
                _mm_prefetch((const char *)(next + (size_t)b * k + t), _MM_HINT_T0);
        __m256 wv[4];
        for (int b = 0; b < 4; b++)
            wv[b] = load_w(kd, R, w, w0 + (size_t)b * k + t);
        for (int a = 0; a < R; a++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)(i + a) * ldx + t);
            for (int b = 0; b < 4; b++)
                acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
        }
    }
    for (int a = 0; a < R; a++)
        for (int b = 0; b < 4; b++) {
            const float *xi = x + (size_t)(i + a) * ldx;
            float s = hr_hsum8_avx2(acc[a][b]);
            for (int t = k8; t < k; t++)
                s += xi[t] * scal_w(kd, w, w0 + (size_t)b * k + t);
            y[(size_t)(i + a) * ldy + j + b] = s;
        }
}

/* one output column j, rows [i0, i1) (the columns past the last whole 4) */
static inline __attribute__((always_inline)) void col_1(wkind kd, float *y, int ldy,
                                                        const float *x, int ldx, const void *w,
                                                        int k, int i0, int i1, int j) {
    int k8 = k & ~7;
    for (int i = i0; i < i1; i++) {
        const float *xi = x + (size_t)i * ldx;
        __m256 acc = _mm256_setzero_ps();
        for (int t = 0; t < k8; t += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(xi + t), load_w(kd, 1, w, (size_t)j * k + t),
                                  acc);
        float s = hr_hsum8_avx2(acc);
        for (int t = k8; t < k; t++)
            s += xi[t] * scal_w(kd, w, (size_t)j * k + t);
        y[(size_t)i * ldy + j] = s;
    }
}

/* One kernel per weight dtype: 4 output columns at a time, their rows in
 * tiles of 2 (and the last one alone), X blocked by IB rows so a block
 * stays in L2 while W streams past it. (Tiles of 3 rows ran no faster a
 * row: their 12 accumulators, the shuffle's index and the weights spill
 * out of the 16 registers.) */
#define IB 64
static inline __attribute__((always_inline)) void gemm(wkind kd, float *y, int ldy,
                                                       const float *x, int ldx, int n,
                                                       const hr_tensor *wt, int m0, int m1) {
    const void *w = wt->data;
    int k = (int)wt->shape[1];
    for (int i0 = 0; i0 < n; i0 += IB) {
        int i1 = i0 + IB < n ? i0 + IB : n;
        int j = m0;
        for (; j + 4 <= m1; j += 4) {
            bool pf = kd != W_F32 && j + 8 <= m1;
            int i = i0;
            for (; i1 - i >= 2; i += 2, pf = false)
                tile_rx4(kd, 2, y, ldy, x, ldx, w, k, i, j, pf);
            if (i < i1)
                tile_rx4(kd, 1, y, ldy, x, ldx, w, k, i, j, pf);
        }
        for (; j < m1; j++)
            col_1(kd, y, ldy, x, ldx, w, k, i0, i1, j);
    }
}

static void gemm_f32_avx2(float *y, int ldy, const float *x, int ldx, int n, const hr_tensor *wt,
                          int m0, int m1) {
    gemm(W_F32, y, ldy, x, ldx, n, wt, m0, m1);
}
static void gemm_bf16_avx2(float *y, int ldy, const float *x, int ldx, int n,
                           const hr_tensor *wt, int m0, int m1) {
    gemm(W_BF16, y, ldy, x, ldx, n, wt, m0, m1);
}
static void gemm_f16_avx2(float *y, int ldy, const float *x, int ldx, int n, const hr_tensor *wt,
                          int m0, int m1) {
    gemm(W_F16, y, ldy, x, ldx, n, wt, m0, m1);
}

/* hr__widen_scalar 8 at a time (F16C; BF16: the bits shifted up), exact */
void hr__widen_avx2(float *dst, const uint16_t *src, size_t n, hr_dtype t) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, t == HR_DTYPE_F16
                                      ? _mm256_cvtph_ps(h)
                                      : _mm256_castsi256_ps(_mm256_slli_epi32(
                                            _mm256_cvtepu16_epi32(h), 16)));
    }
    hr__widen_scalar(dst + i, src + i, n - i, t);
}

/* hr__to_half_scalar 8 at a time: vcvtps2ph (F16C) after the clamp; BF16
 * by hr_f32_to_bf16's integer rounding */
static void to_half_avx2(uint16_t *dst, const float *x, int n, hr_dtype t) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h;
        if (t == HR_DTYPE_F16) {
            v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-65504.0f)),
                              _mm256_set1_ps(65504.0f));
            h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else {
            __m256i u = _mm256_castps_si256(v);
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
            __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
            r = _mm256_srli_epi32(r, 16); /* 8 x 16 bits in the low halves: pack */
            h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        }
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    if (i < n)
        hr__to_half_scalar(dst + i, x + i, n - i, t);
}

/* max_ps(x, acc) returns acc where x is NaN: NaNs never win */
static float max_avx2(const float *x, int n) {
    __m256 a = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        a = _mm256_max_ps(_mm256_loadu_ps(x + i), a);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float m = _mm_cvtss_f32(h);
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* the first index of the max, 8 lanes compared at a time */
static int32_t argmax_avx2(const float *x, int n) {
    float mx = max_avx2(x, n);
    __m256 m = _mm256_set1_ps(mx);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        int e = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), m, _CMP_EQ_OQ));
        if (e)
            return i + __builtin_ctz((unsigned)e);
    }
    for (; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0;
}

/* hr__rmsnorm_scalar's chains as two vectors of 4 doubles */
static void rmsnorm_avx2(float *y, const float *x, const float *w, float offset, int d,
                         float eps) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        a0 = _mm256_fmadd_pd(v0, v0, a0);
        a1 = _mm256_fmadd_pd(v1, v1, a1);
    }
    double ss = 0, acc[8];
    for (int j = i; j < d; j++)
        ss += (double)x[j] * x[j];
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    for (int j = 0; j < 8; j++)
        ss += acc[j];
    float r = 1.0f / sqrtf((float)(ss / d) + eps);
    __m256 vr = _mm256_set1_ps(r), vo = _mm256_set1_ps(offset);
    for (i = 0; i + 8 <= d; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vr),
                                              _mm256_add_ps(_mm256_loadu_ps(w + i), vo)));
    for (; i < d; i++)
        y[i] = (x[i] * r) * (w[i] + offset);
}

/* e^x for x <= 0, 8 lanes, as exp_neg.h says, with 2^n built in the
 * exponent bits (n >= -126 where the result is normal); 0 below ln
 * FLT_MIN */
static inline __m256 exp_neg8(__m256 x) {
    __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(HR_EXP_MIN), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(HR_EXP_MIN));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(HR_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(HR_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(HR_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(hr_exp_taylor[0]);
    for (int i = 1; i < HR_EXP_TERMS; i++)
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(hr_exp_taylor[i]));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), normal);
}

/* hr__exp_sum_avx512 8 lanes at a time, summed in double */
static double exp_sum_avx2(float *dst, const float *x, int n, float m, float s) {
    __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), sv));
        if (dst)
            _mm256_storeu_ps(dst + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    __m256d t = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    if (i < n) { /* the tail: the same exponential on 8 lanes padded with -inf */
        float xt[8], et[8];
        for (int j = 0; j < 8; j++)
            xt[j] = i + j < n ? x[i + j] : -INFINITY;
        _mm256_storeu_ps(et, exp_neg8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xt), mv), sv)));
        for (int j = 0; i + j < n; j++) {
            sum += et[j];
            if (dst)
                dst[i + j] = et[j];
        }
    }
    return sum;
}

/* hr__silu_mul_avx512's formulation 8 lanes at a time: sigmoid from
 * e = e^-|g|; the tail padded to 8 lanes, so that every element takes the
 * same operations wherever it falls */
static __m256 silu8(__m256 x) {
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    __m256 e = exp_neg8(_mm256_sub_ps(zero, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)));
    __m256 neg = _mm256_cmp_ps(x, zero, _CMP_LT_OQ);
    return _mm256_mul_ps(x, _mm256_div_ps(_mm256_blendv_ps(one, e, neg), _mm256_add_ps(one, e)));
}

/* hr_softmax 8 lanes at a time: the max, e^(x - max) by exp_neg8 (the
 * tail padded with -inf), the sum lane-wise, then one scale (the scalar
 * one's expf on every score made the attention of a few tokens cost as
 * much as its products) */
static void softmax_avx2(float *x, int n) {
    float mx = max_avx2(x, n);
    __m256 m = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        float t[8];
        for (int j = 0; j < 8; j++)
            t[j] = i + j < n ? x[i + j] : -INFINITY;
        __m256 e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(t), m));
        _mm256_storeu_ps(t, e);
        sum = _mm256_add_ps(sum, e);
        for (int j = 0; i + j < n; j++)
            x[i + j] = t[j];
    }
    __m256 inv = _mm256_set1_ps(1.0f / hr_hsum8_avx2(sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= _mm256_cvtss_f32(inv);
}

static void silu_mul_avx2(float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y = silu8(_mm256_loadu_ps(g + i));
        _mm256_storeu_ps(g + i, u ? _mm256_mul_ps(y, _mm256_loadu_ps(u + i)) : y);
    }
    if (i < n) {
        float gt[8] = {0}, ut[8] = {0};
        for (int j = 0; i + j < n; j++) {
            gt[j] = g[i + j];
            ut[j] = u ? u[i + j] : 1.0f;
        }
        __m256 y = silu8(_mm256_loadu_ps(gt));
        _mm256_storeu_ps(gt, u ? _mm256_mul_ps(y, _mm256_loadu_ps(ut)) : y);
        for (int j = 0; i + j < n; j++)
            g[i + j] = gt[j];
    }
}

static float dot_avx2(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= n; t += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + t), _mm256_loadu_ps(b + t), acc);
    float s = hr_hsum8_avx2(acc);
    for (; t < n; t++)
        s += a[t] * b[t];
    return s;
}

static void axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int t = 0;
    for (; t + 8 <= n; t += 8)
        _mm256_storeu_ps(y + t, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + t),
                                                _mm256_loadu_ps(y + t)));
    for (; t < n; t++)
        y[t] += a * x[t];
}

/* 2 rows x 4 keys of attn_dots: 8 chains of dot_avx2's operations, each
 * key load serving both rows and each query load 4 keys, the 8 sums taken
 * together (hr_hsum_2x4_avx2: each in hsum8's order) */
static inline void attn_dots_2x4(float *s, size_t ldsc, const float *q, const float *k, int hd,
                                 float scale) {
    const float *qr[2] = {q, q + hd}, *vk[4] = {k, k + hd, k + 2 * (size_t)hd, k + 3 * (size_t)hd};
    __m256 a[2][4];
    hr_dots_2x4_avx2(a, qr, vk, 0, hd);
    __m256 d = _mm256_mul_ps(hr_hsum_2x4_avx2(a), _mm256_set1_ps(scale));
    _mm_storeu_ps(s, _mm256_castps256_ps128(d));
    _mm_storeu_ps(s + ldsc, _mm256_extractf128_ps(d, 1));
}

/* attn_dots (cpu.h): pairs of rows 4 keys at a time (attn_dots_2x4), the
 * rest 4 keys at a time, four independent chains of dot_avx2's operations
 * (fma over the 8-float chunks in order, then hsum8), so each score has
 * its bits whatever the rows and keys called with it. */
static void attn_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const float *k,
                           int nk, int hd, float scale) {
    int r = 0, jp = 0; /* rows [0, r) done for keys [0, jp) */
    if (hd % 8 == 0) {
        jp = nk - nk % 4;
        for (; r + 2 <= nr; r += 2)
            for (int j = 0; j < jp; j += 4)
                attn_dots_2x4(sc + (size_t)r * ldsc + j, ldsc, q + (size_t)r * hd,
                              k + (size_t)j * hd, hd, scale);
    }
    for (int rr = 0; rr < nr; rr++) {
        const float *qr = q + (size_t)rr * hd;
        float *s = sc + (size_t)rr * ldsc;
        int j = rr < r ? jp : 0;
        if (hd % 8 == 0)
            for (; j + 4 <= nk; j += 4) {
                const float *k0 = k + (size_t)j * hd, *k1 = k0 + hd, *k2 = k1 + hd,
                            *k3 = k2 + hd;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int t = 0; t < hd; t += 8) {
                    __m256 qv = _mm256_loadu_ps(qr + t);
                    a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + t), a0);
                    a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + t), a1);
                    a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + t), a2);
                    a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + t), a3);
                }
                s[j] = hr_hsum8_avx2(a0) * scale;
                s[j + 1] = hr_hsum8_avx2(a1) * scale;
                s[j + 2] = hr_hsum8_avx2(a2) * scale;
                s[j + 3] = hr_hsum8_avx2(a3) * scale;
            }
        for (; j < nk; j++)
            s[j] = dot_avx2(qr, k + (size_t)j * hd, hd) * scale;
    }
}

/* 2 output rows of attn_axpys, 32 positions at a time: 8 chains over the
 * keys, each value load serving both rows */
static inline void attn_axpys_2(float *o, const float *p, size_t ldp, const float *v, int nv,
                                int hd) {
    for (int t = 0; t < hd; t += 32) {
        __m256 O[2][4];
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++)
                O[r][c] = _mm256_loadu_ps(o + (size_t)r * hd + t + 8 * c);
        for (int j = 0; j < nv; j++) {
            const float *vr = v + (size_t)j * hd + t;
            __m256 x[4];
            for (int c = 0; c < 4; c++)
                x[c] = _mm256_loadu_ps(vr + 8 * c);
            for (int r = 0; r < 2; r++) {
                __m256 pv = _mm256_broadcast_ss(p + (size_t)r * ldp + j);
                for (int c = 0; c < 4; c++)
                    O[r][c] = _mm256_fmadd_ps(pv, x[c], O[r][c]);
            }
        }
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(o + (size_t)r * hd + t + 8 * c, O[r][c]);
    }
}

/* attn_axpys (cpu.h): each 8-float chunk of an output row stays in a
 * register over the keys, fma by fma in key order (axpy_avx2's bits), rows
 * in pairs where hd is a multiple of 32 (attn_axpys_2). */
static void attn_axpys_avx2(float *o, const float *p, size_t ldp, int nr, const float *v,
                            int nv, int hd) {
    int r = 0;
    for (; hd % 32 == 0 && r + 2 <= nr; r += 2)
        attn_axpys_2(o + (size_t)r * hd, p + (size_t)r * ldp, ldp, v, nv, hd);
    for (; r < nr; r++) {
        float *orow = o + (size_t)r * hd;
        const float *pr = p + (size_t)r * ldp;
        if (hd % 8) {
            for (int j = 0; j < nv; j++)
                axpy_avx2(orow, pr[j], v + (size_t)j * hd, hd);
            continue;
        }
        for (int t = 0; t < hd; t += 32) {
            int w = hd - t < 32 ? (hd - t) / 8 : 4; /* chunks of 8 in this pass */
            __m256 o0 = _mm256_loadu_ps(orow + t);
            __m256 o1 = w > 1 ? _mm256_loadu_ps(orow + t + 8) : o0;
            __m256 o2 = w > 2 ? _mm256_loadu_ps(orow + t + 16) : o0;
            __m256 o3 = w > 3 ? _mm256_loadu_ps(orow + t + 24) : o0;
            for (int j = 0; j < nv; j++) {
                const float *vr = v + (size_t)j * hd + t;
                __m256 pv = _mm256_set1_ps(pr[j]);
                o0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr), o0);
                if (w > 1)
                    o1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8), o1);
                if (w > 2)
                    o2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 16), o2);
                if (w > 3)
                    o3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 24), o3);
            }
            _mm256_storeu_ps(orow + t, o0);
            if (w > 1)
                _mm256_storeu_ps(orow + t + 8, o1);
            if (w > 2)
                _mm256_storeu_ps(orow + t + 16, o2);
            if (w > 3)
                _mm256_storeu_ps(orow + t + 24, o3);
        }
    }
}

/* axpys (cpu.h): 32 columns in 4 registers over the k loop, then 8, then
 * one at a time with fmaf (the same fused operation as a lane) */
static void axpys_avx2(float *y, int n, const float *a, int r, const float *x, size_t ldx) {
    int t = 0;
    for (; t + 32 <= n; t += 32) {
        __m256 y0 = _mm256_loadu_ps(y + t), y1 = _mm256_loadu_ps(y + t + 8),
               y2 = _mm256_loadu_ps(y + t + 16), y3 = _mm256_loadu_ps(y + t + 24);
        const float *xr = x + t;
        for (int k = 0; k < r; k++, xr += ldx) {
            __m256 av = _mm256_set1_ps(a[k]);
            y0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(xr), y0);
            y1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(xr + 8), y1);
            y2 = _mm256_fmadd_ps(av, _mm256_loadu_ps(xr + 16), y2);
            y3 = _mm256_fmadd_ps(av, _mm256_loadu_ps(xr + 24), y3);
        }
        _mm256_storeu_ps(y + t, y0);
        _mm256_storeu_ps(y + t + 8, y1);
        _mm256_storeu_ps(y + t + 16, y2);
        _mm256_storeu_ps(y + t + 24, y3);
    }
    for (; t + 8 <= n; t += 8) {
        __m256 y0 = _mm256_loadu_ps(y + t);
        const float *xr = x + t;
        for (int k = 0; k < r; k++, xr += ldx)
            y0 = _mm256_fmadd_ps(_mm256_set1_ps(a[k]), _mm256_loadu_ps(xr), y0);
        _mm256_storeu_ps(y + t, y0);
    }
    for (; t < n; t++) {
        float s = y[t];
        for (int k = 0; k < r; k++)
            s = fmaf(a[k], x[(size_t)k * ldx + t], s);
        y[t] = s;
    }
}

const hr_cpu_kernels hr__cpu_avx2 = {
    .name = "avx2",
    .math = 1,
    .gemm = {[HR_DTYPE_F32] = gemm_f32_avx2,
             [HR_DTYPE_BF16] = gemm_bf16_avx2,
             [HR_DTYPE_F16] = gemm_f16_avx2,
             HR__GEMM_Q_TABLE(avx2)},
    .gemm_i8 = {HR__GEMM_I8_TABLE(avx2)},
    .qact_row = hr__qact_row_avx2,
    .to_half = to_half_avx2,
    .widen = hr__widen_avx2,
    .kvq_load = hr__kvq_load_avx2,
    .kvq_dots = hr__kvq_dots_avx2,
    .kvq_axpys = hr__kvq_axpys_avx2,
    .kvg_dots = hr__kvg_dots_avx2,
    .kvg_axpys = hr__kvg_axpys_avx2,
    .turbo_dots = hr__turbo_dots_avx2,
    .turbo_axpys = hr__turbo_axpys_avx2,
    .turbo_rotate = hr__turbo_rotate_avx2,
    .turbo_unrotate = hr__turbo_unrotate_avx2,
    .turbo_encode = hr__turbo_encode_avx2,
    .softmax = softmax_avx2,
    .silu_mul = silu_mul_avx2,
    .max = max_avx2,
    .argmax = argmax_avx2,
    .rmsnorm = rmsnorm_avx2,
    .exp_sum = exp_sum_avx2,
    .attn_dots = attn_dots_avx2,
    .attn_axpys = attn_axpys_avx2,
    .dot = dot_avx2,
    .axpy = axpy_avx2,
    .axpys = axpys_avx2,
};
