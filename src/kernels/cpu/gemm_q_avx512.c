/* AVX-512 kernels for quantized weights (compiled with the AVX-512 flags).
 * Weights are dequantized in registers, 32 at a time, with the formulas of
 * quant.h (same f32 operations in the same order), and multiplied with f32
 * activations:
 *   - few activation rows (decode): 4 weight rows at a time, each 32-wide
 *     chunk decoded once per activation row, FMA into 16-lane accumulators,
 *     the next 4 rows prefetched at the place being read;
 *   - many rows (prefill): a panel of 32 weight rows x 256 columns is
 *     dequantized once into an f32 scratch (k-major, 32 KiB, L1-resident)
 *     and a 6x32 register-tiled outer-product kernel runs every activation
 *     row over it, so the dequantization is amortized over the batch. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

#include <immintrin.h>

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline float ld_scale(const void *p, hr_dtype t, size_t i) {
    switch (t) {
    case HR_DTYPE_BF16: return hr_bf16_to_f32(((const uint16_t *)p)[i]);
    case HR_DTYPE_F16: return h2f(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* 32 bytes -> two vectors of 16 int32 lanes */
static inline void u8x32(const uint8_t *p, __m512i *a, __m512i *b) {
    *a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    *b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)));
}

/* ---- decoders: 32 weights of row r from column t (t % 32 == 0) -------- */

typedef struct qrow {
    const uint8_t *q;     /* packed row */
    const void *s, *b;    /* affine: this row's scales / biases */
} qrow;

static inline qrow row_at(const hr_tensor *w, int j) {
    qrow r = {(const uint8_t *)w->data + (size_t)j * hr_tensor_row_bytes(w), NULL, NULL};
    if (w->dtype == HR_DTYPE_AFFINE) {
        size_t ng = (size_t)(w->shape[1] / w->q.group), ss = hr_dtype_size(w->q.sdtype);
        r.s = (const uint8_t *)w->q.scales + (size_t)j * ng * ss;
        r.b = (const uint8_t *)w->q.biases + (size_t)j * ng * ss;
    }
    return r;
}

static inline void affine_apply(const hr_tensor *w, const qrow *r, int t, __m512i a,
                                __m512i b, __m512 *lo, __m512 *hi) {
    size_t g = (size_t)(t / w->q.group);
    __m512 s = _mm512_set1_ps(ld_scale(r->s, w->q.sdtype, g));
    __m512 bb = _mm512_set1_ps(ld_scale(r->b, w->q.sdtype, g));
    *lo = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(a), bb);
    *hi = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(b), bb);
}

static inline void dec_affine4(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    __m128i v = _mm_loadu_si128((const __m128i *)(r->q + t / 2)), m = _mm_set1_epi8(0xF);
    __m128i l = _mm_and_si128(v, m), h = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    __m512i a = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(l, h));
    __m512i b = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(l, h));
    affine_apply(w, r, t, a, b, lo, hi);
}

static inline void dec_affine8(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    __m512i a, b;
    u8x32(r->q + t, &a, &b);
    affine_apply(w, r, t, a, b, lo, hi);
}

static inline void dec_affine_any(const hr_tensor *w, const qrow *r, int t, __m512 *lo,
                                  __m512 *hi) {
    uint8_t q[32];
    hr_affine_unpack(r->q, w->q.bits, t, 32, q);
    __m512i a, b;
    u8x32(q, &a, &b);
    affine_apply(w, r, t, a, b, lo, hi);
}

static inline void dec_q8_0(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q8_0 *blk = (const hr_block_q8_0 *)r->q + t / 32;
    __m512 d = _mm512_set1_ps(h2f(blk->d));
    __m512i a = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk->qs));
    __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk->qs + 16)));
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(a));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(b));
}

static inline void dec_q4_0(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q4_0 *blk = (const hr_block_q4_0 *)r->q + t / 32;
    __m512 d = _mm512_set1_ps(h2f(blk->d));
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk->qs));
    __m512i eight = _mm512_set1_epi32(8), m = _mm512_set1_epi32(0xF);
    __m512i a = _mm512_sub_epi32(_mm512_and_si512(v, m), eight);
    __m512i b = _mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight);
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(a));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(b));
}

static inline void dec_q4_1(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q4_1 *blk = (const hr_block_q4_1 *)r->q + t / 32;
    __m512 d = _mm512_set1_ps(h2f(blk->d)), mn = _mm512_set1_ps(h2f(blk->m));
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk->qs));
    __m512i a = _mm512_and_si512(v, _mm512_set1_epi32(0xF)), b = _mm512_srli_epi32(v, 4);
    *lo = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(a), mn);
    *hi = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(b), mn);
}

static inline void dec_k45(const uint8_t *scales, uint16_t dh, uint16_t mh,
                           const uint8_t *qs, const uint8_t *qh, int s, __m512 *lo,
                           __m512 *hi) {
    int isc, im;
    hr_scale_min_k4(s, scales, &isc, &im);
    __m512 ds = _mm512_set1_ps(h2f(dh) * (float)isc), dm = _mm512_set1_ps(h2f(mh) * (float)im);
    __m512i a, b, m = _mm512_set1_epi32(0xF);
    u8x32(qs + (s / 2) * 32, &a, &b);
    if (s & 1) {
        a = _mm512_srli_epi32(a, 4);
        b = _mm512_srli_epi32(b, 4);
    } else {
        a = _mm512_and_si512(a, m);
        b = _mm512_and_si512(b, m);
    }
    if (qh) {
        __m512i ha, hb, one = _mm512_set1_epi32(1);
        u8x32(qh, &ha, &hb);
        __m128i sh = _mm_cvtsi32_si128(s);
        a = _mm512_or_si512(a, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(ha, sh), one), 4));
        b = _mm512_or_si512(b, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(hb, sh), one), 4));
    }
    *lo = _mm512_fmsub_ps(ds, _mm512_cvtepi32_ps(a), dm);
    *hi = _mm512_fmsub_ps(ds, _mm512_cvtepi32_ps(b), dm);
}

static inline void dec_q4_k(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q4_k *blk = (const hr_block_q4_k *)r->q + t / 256;
    dec_k45(blk->scales, blk->d, blk->dmin, blk->qs, NULL, (t % 256) / 32, lo, hi);
}

static inline void dec_q5_k(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q5_k *blk = (const hr_block_q5_k *)r->q + t / 256;
    dec_k45(blk->scales, blk->d, blk->dmin, blk->qs, blk->qh, (t % 256) / 32, lo, hi);
}

static inline void dec_q6_k(const hr_tensor *w, const qrow *r, int t, __m512 *lo, __m512 *hi) {
    const hr_block_q6_k *blk = (const hr_block_q6_k *)r->q + t / 256;
    int e0 = t % 256, h = e0 / 128, q4 = (e0 % 128) / 32;
    __m512i a, b, ha, hb, m = _mm512_set1_epi32(0xF), three = _mm512_set1_epi32(3);
    u8x32(blk->ql + h * 64 + (q4 & 1) * 32, &a, &b);
    u8x32(blk->qh + h * 32, &ha, &hb);
    if (q4 >= 2) {
        a = _mm512_srli_epi32(a, 4);
        b = _mm512_srli_epi32(b, 4);
    } else {
        a = _mm512_and_si512(a, m);
        b = _mm512_and_si512(b, m);
    }
    __m128i sh = _mm_cvtsi32_si128(2 * q4);
    __m512i off = _mm512_set1_epi32(32);
    a = _mm512_sub_epi32(_mm512_or_si512(a, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(ha, sh), three), 4)), off);
    b = _mm512_sub_epi32(_mm512_or_si512(b, _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(hb, sh), three), 4)), off);
    float d = h2f(blk->d);
    __m512 s0 = _mm512_set1_ps(d * (float)blk->scales[e0 / 16]);
    __m512 s1 = _mm512_set1_ps(d * (float)blk->scales[e0 / 16 + 1]);
    *lo = _mm512_mul_ps(s0, _mm512_cvtepi32_ps(a));
    *hi = _mm512_mul_ps(s1, _mm512_cvtepi32_ps(b));
}

/* ---- kernels ---------------------------------------------------------------- */

#define NR 32  /* panel width (weight rows) */
#define MR 6   /* activation rows per register tile */
#define KC 256 /* panel depth (columns) */

/* y[i][j0 .. j0+nr) (+)= x[i][t0 .. t0+kc) . P for rows i0 .. i0+mr. */
static inline void micro(float *y, int ldy, const float *x, int ldx, int i0, int mr,
                         const float *P, int kc, int t0, int j0, int nr) {
    __m512 c[MR][2];
    for (int a = 0; a < MR; a++)
        c[a][0] = c[a][1] = _mm512_setzero_ps();
    __mmask16 k0 = tail_mask(nr), k1 = tail_mask(nr - 16);
    for (int a = 0; a < MR; a++) {
        if (a >= mr)
            break;
        float *ya = y + (size_t)(i0 + a) * ldy + j0;
        c[a][0] = t0 ? _mm512_maskz_loadu_ps(k0, ya) : _mm512_setzero_ps();
        c[a][1] = t0 ? _mm512_maskz_loadu_ps(k1, ya + 16) : _mm512_setzero_ps();
    }
    const float *xr = x + (size_t)i0 * ldx + t0;
    if (mr == MR) {
        for (int kk = 0; kk < kc; kk++) {
            __m512 p0 = _mm512_load_ps(P + kk * NR), p1 = _mm512_load_ps(P + kk * NR + 16);
            for (int a = 0; a < MR; a++) {
                __m512 xa = _mm512_set1_ps(xr[(size_t)a * ldx + kk]);
                c[a][0] = _mm512_fmadd_ps(xa, p0, c[a][0]);
                c[a][1] = _mm512_fmadd_ps(xa, p1, c[a][1]);
            }
        }
    } else {
        for (int kk = 0; kk < kc; kk++) {
            __m512 p0 = _mm512_load_ps(P + kk * NR), p1 = _mm512_load_ps(P + kk * NR + 16);
            for (int a = 0; a < MR; a++) {
                if (a >= mr)
                    break;
                __m512 xa = _mm512_set1_ps(xr[(size_t)a * ldx + kk]);
                c[a][0] = _mm512_fmadd_ps(xa, p0, c[a][0]);
                c[a][1] = _mm512_fmadd_ps(xa, p1, c[a][1]);
            }
        }
    }
    for (int a = 0; a < MR; a++) {
        if (a >= mr)
            break;
        float *ya = y + (size_t)(i0 + a) * ldy + j0;
        _mm512_mask_storeu_ps(ya, k0, c[a][0]);
        _mm512_mask_storeu_ps(ya + 16, k1, c[a][1]);
    }
}

#define GEMM_Q(NAME, DEC)                                                          \
    static void NAME##_panel(float *y, int ldy, const float *x, int ldx, int n,    \
                             const hr_tensor *w, int m0, int m1) {                 \
        _Alignas(64) float P[KC * NR];                                             \
        _Alignas(64) float tmp[32];                                                \
        int k = (int)w->shape[1];                                                  \
        for (int j0 = m0; j0 < m1; j0 += NR) {                                     \
            int nr = m1 - j0 < NR ? m1 - j0 : NR;                                  \
            qrow rows[NR];                                                         \
            for (int jj = 0; jj < nr; jj++)                                        \
                rows[jj] = row_at(w, j0 + jj);                                     \
            for (int t0 = 0; t0 < k; t0 += KC) {                                   \
                int kc = k - t0 < KC ? k - t0 : KC;                                \
                for (int jj = 0; jj < NR; jj++) {                                  \
                    if (jj >= nr) {                                                \
                        for (int kk = 0; kk < kc; kk++)                            \
                            P[kk * NR + jj] = 0;                                   \
                        continue;                                                  \
                    }                                                              \
                    for (int t = 0; t < kc; t += 32) {                             \
                        __m512 lo, hi;                                             \
                        DEC(w, &rows[jj], t0 + t, &lo, &hi);                       \
                        _mm512_store_ps(tmp, lo);                                  \
                        _mm512_store_ps(tmp + 16, hi);                             \
                        for (int e = 0; e < 32; e++)                               \
                            P[(t + e) * NR + jj] = tmp[e];                         \
                    }                                                              \
                }                                                                  \
                int i0 = 0;                                                        \
                for (; i0 + MR <= n; i0 += MR)                                     \
                    micro(y, ldy, x, ldx, i0, MR, P, kc, t0, j0, nr);              \
                if (i0 < n)                                                        \
                    micro(y, ldy, x, ldx, i0, n - i0, P, kc, t0, j0, nr);          \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    LINKAGE void NAME(float *y, int ldy, const float *x, int ldx, int n,           \
                      const hr_tensor *w, int m0, int m1) {                        \
        if (n >= HR_GEMM_Q_PANEL_MIN) {                                            \
            NAME##_panel(y, ldy, x, ldx, n, w, m0, m1);                            \
            return;                                                                \
        }                                                                          \
        int k = (int)w->shape[1];                                                  \
        size_t rb = hr_tensor_row_bytes(w);                                        \
        int j = m0;                                                                \
        for (; j + 4 <= m1; j += 4) {                                              \
            qrow r[4] = {row_at(w, j), row_at(w, j + 1), row_at(w, j + 2),         \
                         row_at(w, j + 3)};                                        \
            for (int i = 0; i < n; i++) {                                          \
                const float *xi = x + (size_t)i * ldx;                             \
                __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),         \
                                 _mm512_setzero_ps(), _mm512_setzero_ps()};        \
                for (int t = 0; t < k; t += 32) {                                  \
                    __m512 x0 = _mm512_loadu_ps(xi + t), x1 = _mm512_loadu_ps(xi + t + 16); \
                    for (int b = 0; b < 4; b++) {                                  \
                        _mm_prefetch((const char *)r[b].q + 4 * rb + (size_t)t * rb / k, \
                                     _MM_HINT_T0);                                 \
                        __m512 lo, hi;                                             \
                        DEC(w, &r[b], t, &lo, &hi);                                \
                        acc[b] = _mm512_fmadd_ps(x0, lo, acc[b]);                  \
                        acc[b] = _mm512_fmadd_ps(x1, hi, acc[b]);                  \
                    }                                                              \
                }                                                                  \
                for (int b = 0; b < 4; b++)                                        \
                    y[(size_t)i * ldy + j + b] = _mm512_reduce_add_ps(acc[b]);     \
            }                                                                      \
        }                                                                          \
        for (; j < m1; j++) {                                                      \
            qrow r = row_at(w, j);                                                 \
            for (int i = 0; i < n; i++) {                                          \
                const float *xi = x + (size_t)i * ldx;                             \
                __m512 acc = _mm512_setzero_ps();                                  \
                for (int t = 0; t < k; t += 32) {                                  \
                    __m512 lo, hi;                                                 \
                    DEC(w, &r, t, &lo, &hi);                                       \
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(xi + t), lo, acc);       \
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(xi + t + 16), hi, acc);  \
                }                                                                  \
                y[(size_t)i * ldy + j] = _mm512_reduce_add_ps(acc);                \
            }                                                                      \
        }                                                                          \
    }

#define LINKAGE static
GEMM_Q(gemm_affine4, dec_affine4)
GEMM_Q(gemm_affine8, dec_affine8)
GEMM_Q(gemm_affine_any, dec_affine_any)
#undef LINKAGE
#define LINKAGE
GEMM_Q(hr__gemm_q8_0_avx512, dec_q8_0)
GEMM_Q(hr__gemm_q4_0_avx512, dec_q4_0)
GEMM_Q(hr__gemm_q4_1_avx512, dec_q4_1)
GEMM_Q(hr__gemm_q4_k_avx512, dec_q4_k)
GEMM_Q(hr__gemm_q5_k_avx512, dec_q5_k)
GEMM_Q(hr__gemm_q6_k_avx512, dec_q6_k)

void hr__gemm_affine_avx512(float *y, int ldy, const float *x, int ldx, int n,
                        const hr_tensor *w, int m0, int m1) {
    switch (w->q.bits) {
    case 4: gemm_affine4(y, ldy, x, ldx, n, w, m0, m1); break;
    case 8: gemm_affine8(y, ldy, x, ldx, n, w, m0, m1); break;
    default: gemm_affine_any(y, ldy, x, ldx, n, w, m0, m1); break;
    }
}

