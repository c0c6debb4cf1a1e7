/* AVX2 kernels of the integer-activation path (qdot.h), compiled with the
 * AVX2 flags. One 32-element block at a time: a decoder gives 32 unsigned
 * bytes u and 8-lane sw / mn (one lane per 4 elements); maddubs + madd
 * make the 8 lane dot products (u <= 63 keeps maddubs' 16-bit pair sums
 * from saturating), then
 *   acc += cvt(dot + c4) * (sw * d4) [+ mn * s4].
 * Q8_0 (u up to 255 would saturate) takes the signed bytes with the sign
 * trick (|w| x sign(q, w)), which gives the same exact dot + c4 directly.
 * 4 weight rows per pass (the next 4 prefetched at the place being read),
 * one activation row at a time: each output has
 * the same sequence of operations whatever the batch (batch invariance). */
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant_blocks.h"

#include <immintrin.h>

typedef struct qblk {
    __m256i u;
    __m256 sw, mn;
    float ksw[8], kmn[8]; /* K-quants: the super-block's, set at bi % 8 == 0 */
} qblk;

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* nibbles of 16 bytes: [lo x 16, hi x 16] */
static inline __m256i nibbles(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0xF);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* 32 bytes shifted right by s bits, masked to m */
static inline __m256i bits(const uint8_t *p, int s, char m) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(m));
}

static inline void blk_q8_0(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q8_0 *B = (const hr_block_q8_0 *)row + bi;
    o->u = _mm256_loadu_si256((const __m256i *)B->qs); /* signed: see the kernel */
    o->sw = _mm256_set1_ps(h2f(B->d));
}

static inline void blk_q4_0(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q4_0 *B = (const hr_block_q4_0 *)row + bi;
    o->u = nibbles(B->qs);
    o->sw = _mm256_set1_ps(h2f(B->d));
}

static inline void blk_q4_1(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q4_1 *B = (const hr_block_q4_1 *)row + bi;
    o->u = nibbles(B->qs);
    o->sw = _mm256_set1_ps(h2f(B->d));
    o->mn = _mm256_set1_ps(h2f(B->m));
}

/* Q4_K / Q5_K: the super-block's 8 scales and mins (hr_scales_mins_k4)
 * once, then sub-block s's */
static inline void k45_scales(const uint8_t *scales, uint16_t dh, uint16_t mh, int bi,
                              qblk *o) {
    int s = bi % 8;
    if (s == 0) {
        uint8_t b[16];
        hr_scales_mins_k4(scales, b);
        float d = h2f(dh), dmin = h2f(mh);
        for (int j = 0; j < 8; j++) {
            o->ksw[j] = d * (float)b[j];
            o->kmn[j] = -(dmin * (float)b[8 + j]);
        }
    }
    o->sw = _mm256_set1_ps(o->ksw[s]);
    o->mn = _mm256_set1_ps(o->kmn[s]);
}

static inline void blk_q4_k(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q4_k *B = (const hr_block_q4_k *)row + bi / 8;
    int s = bi % 8;
    o->u = bits(B->qs + (s / 2) * 32, 4 * (s & 1), 0xF);
    k45_scales(B->scales, B->d, B->dmin, bi, o);
}

static inline void blk_q5_k(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q5_k *B = (const hr_block_q5_k *)row + bi / 8;
    int s = bi % 8;
    __m256i hi = bits(B->qh, s, 1);
    o->u = _mm256_or_si256(bits(B->qs + (s / 2) * 32, 4 * (s & 1), 0xF),
                           _mm256_slli_epi16(hi, 4));
    k45_scales(B->scales, B->d, B->dmin, bi, o);
}

static inline void blk_q6_k(const uint8_t *row, int bi, qblk *o) {
    const hr_block_q6_k *B = (const hr_block_q6_k *)row + bi / 8;
    int e0 = (bi % 8) * 32, h = e0 / 128, r = (e0 % 128) / 32;
    __m256i lo = bits(B->ql + h * 64 + (r & 1) * 32, r < 2 ? 0 : 4, 0xF);
    __m256i hi = bits(B->qh + h * 32, 2 * r, 3);
    o->u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    float d = h2f(B->d);
    __m128 s0 = _mm_set1_ps(d * (float)B->scales[e0 / 16]);
    __m128 s1 = _mm_set1_ps(d * (float)B->scales[e0 / 16 + 1]);
    o->sw = _mm256_set_m128(s1, s0);
}

/* SIGNED: u holds signed bytes (Q8_0); HASMIN: the format has mn */
#define GEMM_I8(NAME, DEC, SIGNED, HASMIN)                                         \
    static inline __attribute__((always_inline)) void NAME##_tile(                 \
        float *y, int ldy, const hr_qact *x, int i, const hr_tensor *w, int j0,    \
        int J) {                                                                   \
        int k = x->k, nb = k / 32;                                                 \
        size_t rb = hr_tensor_row_bytes(w);                                        \
        const int8_t *q = x->q + (size_t)i * k;                                    \
        const float *d4 = x->d4 + (size_t)i * (k / 4), *s4 = x->s4 + (size_t)i * (k / 4); \
        const int32_t *c4 = x->c4 + (size_t)i * (k / 4);                           \
        const uint8_t *row[4];                                                     \
        __m256 acc[4];                                                             \
        for (int b = 0; b < J; b++) {                                              \
            row[b] = (const uint8_t *)w->data + (size_t)(j0 + b) * rb;             \
            acc[b] = _mm256_setzero_ps();                                          \
        }                                                                          \
        const __m256i ones = _mm256_set1_epi16(1);                                 \
        qblk wb[4]; /* kept across blocks: the K-quant super-block scales */       \
        for (int bi = 0; bi < nb; bi++) {                                          \
            __m256i qa = _mm256_loadu_si256((const __m256i *)(q + 32 * bi));       \
            __m256 da = _mm256_loadu_ps(d4 + 8 * bi);                              \
            __m256i ca = _mm256_loadu_si256((const __m256i *)(c4 + 8 * bi));       \
            __m256 ms = HASMIN ? _mm256_loadu_ps(s4 + 8 * bi) : _mm256_setzero_ps(); \
            for (int b = 0; b < J; b++) {                                          \
                _mm_prefetch((const char *)row[b] + (size_t)J * rb + (size_t)bi * rb / nb, \
                             _MM_HINT_T0);                                         \
                DEC(row[b], bi, &wb[b]);                                           \
                __m256i dot;                                                       \
                if (SIGNED) {                                                      \
                    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wb[b].u, wb[b].u), \
                                                     _mm256_sign_epi8(qa, wb[b].u));  \
                    dot = _mm256_madd_epi16(p, ones);                              \
                } else {                                                           \
                    __m256i p = _mm256_maddubs_epi16(wb[b].u, qa);                    \
                    dot = _mm256_add_epi32(_mm256_madd_epi16(p, ones), ca);        \
                }                                                                  \
                acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),                  \
                                         _mm256_mul_ps(wb[b].sw, da), acc[b]);        \
                if (HASMIN)                                                        \
                    acc[b] = _mm256_fmadd_ps(wb[b].mn, ms, acc[b]);                   \
            }                                                                      \
        }                                                                          \
        for (int b = 0; b < J; b++) {                                              \
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[b]),                  \
                                  _mm256_extractf128_ps(acc[b], 1));               \
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                \
            s = _mm_add_ss(s, _mm_movehdup_ps(s));                                 \
            y[(size_t)i * ldy + j0 + b] = _mm_cvtss_f32(s);                        \
        }                                                                          \
    }                                                                              \
    void NAME(float *y, int ldy, const hr_qact *x, int n, const hr_tensor *w,      \
              int m0, int m1) {                                                    \
        for (int jb = m0; jb < m1; jb += 16) {                                     \
            int je = m1 - jb < 16 ? m1 : jb + 16;                                  \
            for (int i = 0; i < n; i++) {                                          \
                int j = jb;                                                        \
                for (; j + 4 <= je; j += 4)                                        \
                    NAME##_tile(y, ldy, x, i, w, j, 4);                            \
                for (; j < je; j++)                                                \
                    NAME##_tile(y, ldy, x, i, w, j, 1);                            \
            }                                                                      \
        }                                                                          \
    }

GEMM_I8(hr__gemm_i8_q8_0_avx2, blk_q8_0, 1, 0)
GEMM_I8(hr__gemm_i8_q4_0_avx2, blk_q4_0, 0, 0)
GEMM_I8(hr__gemm_i8_q4_1_avx2, blk_q4_1, 0, 1)
GEMM_I8(hr__gemm_i8_q4_k_avx2, blk_q4_k, 0, 1)
GEMM_I8(hr__gemm_i8_q5_k_avx2, blk_q5_k, 0, 1)
GEMM_I8(hr__gemm_i8_q6_k_avx2, blk_q6_k, 0, 0)

/* hr_qact_row with the same IEEE operations, so bit-identical for finite
 * inputs (see the AVX-512 one) */
void hr__qact_row_avx2(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                       float *s4) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int b = 0; b < k; b += 32) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int t = 0; t < 4; t++) {
            v[t] = _mm256_loadu_ps(x + b + 8 * t);
            m = _mm256_max_ps(m, _mm256_and_ps(v[t], absmask));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        int32_t qi[32];
        for (int t = 0; t < 4; t++) {
            __m256i qq = _mm256_cvtps_epi32(_mm256_mul_ps(v[t], vid));
            qq = _mm256_max_epi32(_mm256_min_epi32(qq, lim), nlim);
            _mm256_storeu_si256((__m256i *)(qi + 8 * t), qq);
        }
        for (int i = 0; i < 32; i++)
            q[b + i] = (int8_t)qi[i];
        for (int l = 0; l < 8; l++) {
            int sum = qi[4 * l] + qi[4 * l + 1] + qi[4 * l + 2] + qi[4 * l + 3];
            d4[b / 4 + l] = d;
            c4[b / 4 + l] = -off * sum;
            s4[b / 4 + l] = d * (float)sum;
        }
    }
}
