/* AVX2 + FMA kernels for quantized weights: the AVX-512 file's structure
 * (decode kernel for few rows, dequantized panel + 6x16 outer-product tile
 * for many) with 8-lane vectors. Q8_0, Q4_0 and 4/8-bit affine decode in
 * SIMD; the other formats decode through the scalar definition
 * (hr_dequant_range), 32 columns at a time. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

#include <immintrin.h>

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline float ld_scale(const void *p, hr_dtype t, size_t i) {
    switch (t) {
    case HR_DTYPE_BF16: return hr_bf16_to_f32(((const uint16_t *)p)[i]);
    case HR_DTYPE_F16: return h2f(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

typedef struct qrow {
    const uint8_t *q;
    const void *s, *b;
    int j;
} qrow;

static inline qrow row_at(const hr_tensor *w, int j) {
    qrow r = {(const uint8_t *)w->data + (size_t)j * hr_tensor_row_bytes(w), NULL, NULL, j};
    if (w->dtype == HR_DTYPE_AFFINE) {
        size_t ng = (size_t)(w->shape[1] / w->q.group), ss = hr_dtype_size(w->q.sdtype);
        r.s = (const uint8_t *)w->q.scales + (size_t)j * ng * ss;
        r.b = (const uint8_t *)w->q.biases + (size_t)j * ng * ss;
    }
    return r;
}

/* 8 bytes -> 8 int32 lanes */
static inline __m256i u8x8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* ---- decoders: 32 weights into v[0..3] --------------------------------- */

static inline void dec_generic(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    float f[32];
    hr_dequant_range(w, r->j, t, 32, f);
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_loadu_ps(f + 8 * i);
}

static inline void dec_affine4(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    size_t g = (size_t)(t / w->q.group);
    __m256 s = _mm256_set1_ps(ld_scale(r->s, w->q.sdtype, g));
    __m256 b = _mm256_set1_ps(ld_scale(r->b, w->q.sdtype, g));
    __m128i x = _mm_loadu_si128((const __m128i *)(r->q + t / 2)), m = _mm_set1_epi8(0xF);
    __m128i l = _mm_and_si128(x, m), h = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    __m128i e0 = _mm_unpacklo_epi8(l, h), e1 = _mm_unpackhi_epi8(l, h);
    __m128i parts[4] = {e0, _mm_srli_si128(e0, 8), e1, _mm_srli_si128(e1, 8)};
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i])), b);
}

static inline void dec_affine8(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    size_t g = (size_t)(t / w->q.group);
    __m256 s = _mm256_set1_ps(ld_scale(r->s, w->q.sdtype, g));
    __m256 b = _mm256_set1_ps(ld_scale(r->b, w->q.sdtype, g));
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(u8x8(r->q + t + 8 * i)), b);
}

static inline void dec_affine(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    if (w->q.bits == 4)
        dec_affine4(w, r, t, v);
    else if (w->q.bits == 8)
        dec_affine8(w, r, t, v);
    else
        dec_generic(w, r, t, v);
}

static inline void dec_q8_0(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    const hr_block_q8_0 *blk = (const hr_block_q8_0 *)r->q + t / 32;
    __m256 d = _mm256_set1_ps(h2f(blk->d));
    for (int i = 0; i < 4; i++)
        v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                    _mm_loadl_epi64((const __m128i *)(blk->qs + 8 * i)))));
}

static inline void dec_q4_0(const hr_tensor *w, const qrow *r, int t, __m256 *v) {
    const hr_block_q4_0 *blk = (const hr_block_q4_0 *)r->q + t / 32;
    __m256 d = _mm256_set1_ps(h2f(blk->d));
    __m256i eight = _mm256_set1_epi32(8), m = _mm256_set1_epi32(0xF);
    for (int i = 0; i < 2; i++) {
        __m256i q = u8x8(blk->qs + 8 * i);
        v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(q, m), eight)));
        v[i + 2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight)));
    }
}

/* ---- kernels ------------------------------------------------------------- */

#define NR 16
#define MR 6
#define KC 256

static inline void micro(float *y, int ldy, const float *x, int ldx, int i0, int mr,
                         const float *P, int kc, int t0, int j0, int nr) {
    __m256 c[MR][2];
    for (int a = 0; a < MR; a++)
        c[a][0] = c[a][1] = _mm256_setzero_ps();
    _Alignas(32) float tmp[16];
    for (int a = 0; a < mr; a++) {
        if (t0) {
            const float *ya = y + (size_t)(i0 + a) * ldy + j0;
            for (int e = 0; e < 16; e++)
                tmp[e] = e < nr ? ya[e] : 0.0f;
            c[a][0] = _mm256_load_ps(tmp);
            c[a][1] = _mm256_load_ps(tmp + 8);
        } else {
            c[a][0] = c[a][1] = _mm256_setzero_ps();
        }
    }
    const float *xr = x + (size_t)i0 * ldx + t0;
    for (int kk = 0; kk < kc; kk++) {
        __m256 p0 = _mm256_load_ps(P + kk * NR), p1 = _mm256_load_ps(P + kk * NR + 8);
        for (int a = 0; a < MR; a++) {
            if (a >= mr)
                break;
            __m256 xa = _mm256_broadcast_ss(xr + (size_t)a * ldx + kk);
            c[a][0] = _mm256_fmadd_ps(xa, p0, c[a][0]);
            c[a][1] = _mm256_fmadd_ps(xa, p1, c[a][1]);
        }
    }
    for (int a = 0; a < mr; a++) {
        float *ya = y + (size_t)(i0 + a) * ldy + j0;
        if (nr == 16) {
            _mm256_storeu_ps(ya, c[a][0]);
            _mm256_storeu_ps(ya + 8, c[a][1]);
        } else {
            _mm256_store_ps(tmp, c[a][0]);
            _mm256_store_ps(tmp + 8, c[a][1]);
            for (int e = 0; e < nr; e++)
                ya[e] = tmp[e];
        }
    }
}

#define GEMM_Q(NAME, DEC)                                                          \
    static void NAME##_panel(float *y, int ldy, const float *x, int ldx, int n,    \
                             const hr_tensor *w, int m0, int m1) {                 \
        _Alignas(32) float P[KC * NR];                                             \
        _Alignas(32) float tmp[32];                                                \
        int k = (int)w->shape[1];                                                  \
        for (int j0 = m0; j0 < m1; j0 += NR) {                                     \
            int nr = m1 - j0 < NR ? m1 - j0 : NR;                                  \
            for (int t0 = 0; t0 < k; t0 += KC) {                                   \
                int kc = k - t0 < KC ? k - t0 : KC;                                \
                for (int jj = 0; jj < NR; jj++) {                                  \
                    if (jj >= nr) {                                                \
                        for (int kk = 0; kk < kc; kk++)                            \
                            P[kk * NR + jj] = 0;                                   \
                        continue;                                                  \
                    }                                                              \
                    qrow r = row_at(w, j0 + jj);                                   \
                    for (int t = 0; t < kc; t += 32) {                             \
                        __m256 v[4];                                               \
                        DEC(w, &r, t0 + t, v);                                     \
                        for (int q = 0; q < 4; q++)                                \
                            _mm256_store_ps(tmp + 8 * q, v[q]);                    \
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
    void NAME(float *y, int ldy, const float *x, int ldx, int n,                   \
              const hr_tensor *w, int m0, int m1) {                                \
        if (n >= HR_GEMM_Q_PANEL_MIN) {                                            \
            NAME##_panel(y, ldy, x, ldx, n, w, m0, m1);                            \
            return;                                                                \
        }                                                                          \
        int k = (int)w->shape[1];                                                  \
        int j = m0;                                                                \
        for (; j + 2 <= m1; j += 2) {                                              \
            qrow r[2] = {row_at(w, j), row_at(w, j + 1)};                          \
            for (int i = 0; i < n; i++) {                                          \
                const float *xi = x + (size_t)i * ldx;                             \
                __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};        \
                for (int t = 0; t < k; t += 32)                                    \
                    for (int b = 0; b < 2; b++) {                                  \
                        __m256 v[4];                                               \
                        DEC(w, &r[b], t, v);                                       \
                        for (int q = 0; q < 4; q++)                                \
                            acc[b] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + t + 8 * q), \
                                                     v[q], acc[b]);                \
                    }                                                              \
                for (int b = 0; b < 2; b++)                                        \
                    y[(size_t)i * ldy + j + b] = hr_hsum8_avx2(acc[b]);            \
            }                                                                      \
        }                                                                          \
        for (; j < m1; j++) {                                                      \
            qrow r = row_at(w, j);                                                 \
            for (int i = 0; i < n; i++) {                                          \
                const float *xi = x + (size_t)i * ldx;                             \
                __m256 acc = _mm256_setzero_ps();                                  \
                for (int t = 0; t < k; t += 32) {                                  \
                    __m256 v[4];                                                   \
                    DEC(w, &r, t, v);                                              \
                    for (int q = 0; q < 4; q++)                                    \
                        acc = _mm256_fmadd_ps(_mm256_loadu_ps(xi + t + 8 * q), v[q], acc); \
                }                                                                  \
                y[(size_t)i * ldy + j] = hr_hsum8_avx2(acc);                       \
            }                                                                      \
        }                                                                          \
    }

GEMM_Q(hr__gemm_affine_avx2, dec_affine)
GEMM_Q(hr__gemm_q8_0_avx2, dec_q8_0)
GEMM_Q(hr__gemm_q4_0_avx2, dec_q4_0)
GEMM_Q(hr__gemm_q4_1_avx2, dec_generic)
GEMM_Q(hr__gemm_q4_k_avx2, dec_generic)
GEMM_Q(hr__gemm_q5_k_avx2, dec_generic)
GEMM_Q(hr__gemm_q6_k_avx2, dec_generic)
