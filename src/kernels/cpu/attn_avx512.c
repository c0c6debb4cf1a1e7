/* AVX-512 attention for the query heads that share one KV head (GQA), for
 * one token: every key and value is loaded once for all of them, the score
 * dot products run 4 keys at a time (independent FMA chains, one packed
 * horizontal sum for the 4: hsum_avx512.h) and the output
 * rows stay in registers over the whole value pass. Each score and each
 * output element is computed by exactly the operations of the per-head
 * path (dot_avx512 then * scale; axpy_avx512 key by key; the softmax is
 * hr_softmax, this ISA's hr__softmax_avx512 for both), so the results are
 * bit-identical to it. */
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/hsum_avx512.h"
#include "kernels/cpu/ops.h"

#include <immintrin.h>
#include <math.h>

/* element index of position p's row in a layer of the KV pool */
#define KV(p) ((size_t)bt[(p) / bs] * stride + ((size_t)kvh * bs + (p) % bs) * hd)
#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Keys ahead to prefetch: a head's slots of a block are contiguous, but the
 * next block of the same head is a block stride away (other heads between),
 * where the hardware prefetcher starts over; decode attention stalled on
 * those loads. */
#define PF_KEYS 8

/* prefetch `bytes` from element i of a KV layer of dtype DT */
AI void pf(const void *base, size_t i, size_t bytes, const hr_dtype DT) {
    const char *p = (const char *)base + i * (DT == HR_DTYPE_F32 ? 4 : 2);
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T0);
}

/* 16 values from element i of a KV layer of dtype DT, as f32 (exact) */
AI __m512 ld(const void *base, size_t i, const hr_dtype DT) {
    const uint16_t *h = (const uint16_t *)base + i;
    switch (DT) {
    case HR_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
    case HR_DTYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)h)), 16));
    default:
        return _mm512_loadu_ps((const float *)base + i);
    }
}

/* out[g][c .. c + 16W) = sum_j p_gj v_j[c ..] for GN heads: constant GN, W
 * keep the accumulators in registers */
AI void pv_tile(const float *sc, int n, const void *v, size_t stride, int bs, int kvh,
                const int32_t *bt, int start, int hd, int c, float *out, const int GN,
                const int W, const hr_dtype DT) {
    __m512 o[4][4];
    UNROLL
    for (int g = 0; g < GN; g++)
        UNROLL
        for (int i = 0; i < W; i++)
            o[g][i] = _mm512_setzero_ps();
    size_t es = DT == HR_DTYPE_F32 ? 4 : 2;
    for (int j = 0; j < n; j++) {
        size_t vj = KV(start + j) + c;
        if (j + PF_KEYS < n)
            pf(v, KV(start + j + PF_KEYS) + c, (size_t)W * 16 * es, DT);
        __m512 vv[4];
        UNROLL
        for (int i = 0; i < W; i++)
            vv[i] = ld(v, vj + 16 * i, DT);
        UNROLL
        for (int g = 0; g < GN; g++) {
            __m512 p = _mm512_set1_ps(sc[(size_t)g * n + j]);
            UNROLL
            for (int i = 0; i < W; i++)
                o[g][i] = _mm512_fmadd_ps(p, vv[i], o[g][i]);
        }
    }
    UNROLL
    for (int g = 0; g < GN; g++)
        UNROLL
        for (int i = 0; i < W; i++)
            _mm512_storeu_ps(out + (size_t)g * hd + c + 16 * i, o[g][i]);
}

/* e^x for x <= 0 (softmax arguments; -inf gives 0): x = n ln2 + r with
 * |r| <= ln2/2 (ln2 in two parts), e^r by its degree-7 Taylor polynomial
 * (truncation below 5e-9 relative), times 2^n by scalef (exact, and 0 below
 * the denormals). Within 2 ulp of expf. */
AI __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 floats to F16 (saturating) or BF16, round to nearest even: vcvtps2ph,
 * and for BF16 the integer rounding of hr_f32_to_bf16 (vcvtneps2bf16 would
 * flush denormals) */
AI __m256i half16(__m512 x, const hr_dtype t) {
    if (t == HR_DTYPE_F16) {
        x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-65504.0f)), _mm512_set1_ps(65504.0f));
        return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    __m512i u = _mm512_castps_si512(x);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                                      _mm512_set1_epi32(1))));
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

void hr__to_half_avx512(uint16_t *dst, const float *x, int n, hr_dtype t) {
    int i = 0;
    if (t == HR_DTYPE_F16)
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i), half16(_mm512_loadu_ps(x + i), HR_DTYPE_F16));
    else
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i), half16(_mm512_loadu_ps(x + i), HR_DTYPE_BF16));
    if (i < n)
        hr__to_half_scalar(dst + i, x + i, n - i, t);
}

void hr__softmax_avx512(float *x, int n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
    mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, x + i));
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(x + i, e);
        sum = _mm512_add_ps(sum, e);
    }
    __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), m));
    _mm512_mask_storeu_ps(x + i, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
    __m512 inv = _mm512_set1_ps(1.0f / hr_hsum_avx512(sum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    _mm512_mask_storeu_ps(x + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), inv));
}

AI void heads(const float *q, float *out, int G, int hd, const void *k, const void *v,
              size_t stride, int bs, int kvh, const int32_t *bt, int start, int n, float scale,
              float softcap, float *sc, const hr_dtype DT) {
    /* scores: sc[g * n + j] */
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        size_t kj[4];
        for (int i = 0; i < 4; i++) {
            kj[i] = KV(start + j + i);
            if (j + i + PF_KEYS < n)
                pf(k, KV(start + j + i + PF_KEYS), (size_t)hd * (DT == HR_DTYPE_F32 ? 4 : 2), DT);
        }
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * hd;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                             _mm512_setzero_ps()};
            for (int t = 0; t < hd; t += 16) {
                __m512 qv = _mm512_loadu_ps(qg + t);
                for (int i = 0; i < 4; i++)
                    acc[i] = _mm512_fmadd_ps(qv, ld(k, kj[i] + t, DT), acc[i]);
            }
            __m512 s4 = _mm512_mul_ps(hr_hsum4_avx512(acc[0], acc[1], acc[2], acc[3]),
                                      _mm512_set1_ps(scale));
            _mm512_mask_compressstoreu_ps(sc + (size_t)g * n + j, 0x1111, s4);
        }
    }
    for (; j < n; j++) {
        size_t kj = KV(start + j);
        for (int g = 0; g < G; g++) {
            __m512 acc = _mm512_setzero_ps();
            for (int t = 0; t < hd; t += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * hd + t),
                                      ld(k, kj + t, DT), acc);
            sc[(size_t)g * n + j] = hr_hsum_avx512(acc) * scale;
        }
    }
    for (int g = 0; g < G; g++) {
        if (softcap > 0)
            hr_softcap(sc + (size_t)g * n, n, softcap);
        hr_softmax(sc + (size_t)g * n, n);
    }
    /* out_g = sum_j p_gj v_j, key by key: 64 columns (16 at the tail) x up
     * to 4 heads in registers */
    for (int g0 = 0; g0 < G; g0 += 4) {
        const float *s = sc + (size_t)g0 * n;
        float *o = out + (size_t)g0 * hd;
        for (int c = 0; c < hd;) {
            int W = hd - c >= 64 ? 4 : 1;
            switch ((G - g0 < 4 ? G - g0 : 4) * 8 + W) {
            case 12: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 1, 4, DT); break;
            case 20: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 2, 4, DT); break;
            case 28: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 3, 4, DT); break;
            case 36: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 4, 4, DT); break;
            case 9: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 1, 1, DT); break;
            case 17: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 2, 1, DT); break;
            case 25: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 3, 1, DT); break;
            default: pv_tile(s, n, v, stride, bs, kvh, bt, start, hd, c, o, 4, 1, DT); break;
            }
            c += 16 * W;
        }
    }
}

void hr__attn_heads_avx512(const float *q, float *out, int G, int hd, const void *k,
                           const void *v, hr_dtype kv_dtype, size_t stride, int bs, int kvh,
                           const int32_t *bt, int start, int n, float scale, float softcap,
                           float *sc) {
    switch (kv_dtype) {
    case HR_DTYPE_F16:
        heads(q, out, G, hd, k, v, stride, bs, kvh, bt, start, n, scale, softcap, sc,
              HR_DTYPE_F16);
        return;
    case HR_DTYPE_BF16:
        heads(q, out, G, hd, k, v, stride, bs, kvh, bt, start, n, scale, softcap, sc,
              HR_DTYPE_BF16);
        return;
    default:
        heads(q, out, G, hd, k, v, stride, bs, kvh, bt, start, n, scale, softcap, sc,
              HR_DTYPE_F32);
        return;
    }
}
