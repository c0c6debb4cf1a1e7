/* AVX-512 VNNI kernels of the integer-activation path (qdot.h), compiled
 * with the AVX-512 flags. The weight row is walked in pairs of 32-element
 * blocks: a decoder turns a pair into 64 unsigned bytes u and 16-lane
 * vectors sw and mn (one lane per 4 elements), then for each activation row
 *   acc += cvt(dpbusd(c4, u, q)) * (sw * d4) [+ mn * s4]
 * on 16 lanes, reduced at the end. Every output gets exactly this sequence
 * whatever the tile it is computed in, so a row's result does not depend on
 * how many rows run with it (batch invariance).
 *
 * The weight rows of the next tile are prefetched at the place being read
 * (the hardware prefetcher alone leaves decode latency-bound: 9 -> 14.5
 * tokens/s on one thread for Llama-3.2-1B Q4_0).
 *
 * Tiles: 4 weight rows x 4 activation rows (4 x 1 for the last n % 4), over
 * blocks of 16 weight rows (L1) x as many activation rows as fit in 384 KiB
 * (L2; each activation element takes 4 bytes with its scale terms). */
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant_blocks.h"

#include <immintrin.h>

typedef struct qpair {
    __m512i u;
    __m512 sw, mn; /* mn: only for the formats with a min (HASMIN) */
    __m512 ksw, kmn; /* K-quants: the super-block's scales, set at p % 4 == 0 */
} qpair;

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 16 lanes: f16 a in lanes 0-7, f16 b in lanes 8-15 */
static inline __m512 halves_f16(uint16_t a, uint16_t b) {
    return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short)a), 0xFF00, (short)b));
}

/* [v, v] shifted right per 256-bit half by s0 / s1 bits, masked to m */
static inline __m512i split2(__m256i v, int s0, int s1, char m) {
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1);
    __m512i sh = _mm512_set_epi64(s1, s1, s1, s1, s0, s0, s0, s0);
    return _mm512_and_si512(_mm512_srlv_epi64(z, sh), _mm512_set1_epi8(m));
}

/* ---- pair decoders: blocks 2p and 2p+1 of a row -------------------------- */

static inline void pair_q8_0(const uint8_t *row, int p, qpair *o) {
    const hr_block_q8_0 *B = (const hr_block_q8_0 *)row + 2 * p;
    __m256i a = _mm256_loadu_si256((const __m256i *)B[0].qs);
    __m256i c = _mm256_loadu_si256((const __m256i *)B[1].qs);
    o->u = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1),
                            _mm512_set1_epi8((char)0x80));
    o->sw = halves_f16(B[0].d, B[1].d);
}

/* nibbles of two 16-byte runs: [lo a, hi a, lo c, hi c] */
static inline __m512i nibbles2(const uint8_t *a, const uint8_t *c) {
    __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
        _mm_loadu_si128((const __m128i *)c), 1);
    __m512i z = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                         _mm512_castsi256_si512(v));
    __m512i sh = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(z, sh), _mm512_set1_epi8(0xF));
}

static inline void pair_q4_0(const uint8_t *row, int p, qpair *o) {
    const hr_block_q4_0 *B = (const hr_block_q4_0 *)row + 2 * p;
    o->u = nibbles2(B[0].qs, B[1].qs);
    o->sw = halves_f16(B[0].d, B[1].d);
}

static inline void pair_q4_1(const uint8_t *row, int p, qpair *o) {
    const hr_block_q4_1 *B = (const hr_block_q4_1 *)row + 2 * p;
    o->u = nibbles2(B[0].qs, B[1].qs);
    o->sw = halves_f16(B[0].d, B[1].d);
    o->mn = halves_f16(B[0].m, B[1].m);
}

/* Q4_K / Q5_K: the 8 sub-block scales and mins of a super-block
 * (hr_scales_mins_k4) as d * sc in lanes 0-7 of ksw and -dmin * mn in lanes
 * 0-7 of kmn; then sub-blocks 2s and 2s+1 of the pair spread over lanes
 * 0-7 / 8-15. */
static inline void k45_super(const uint8_t *scales, uint16_t dh, uint16_t mh, qpair *o) {
    uint8_t sm[16];
    hr_scales_mins_k4(scales, sm);
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sm)));
    __m512 dd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(h2f(dh)), _mm512_set1_ps(-h2f(mh)));
    f = _mm512_mul_ps(f, dd); /* sc 0-7, mn 8-15 */
    o->ksw = f;
    o->kmn = _mm512_shuffle_f32x4(f, f, 0xEE); /* lanes 8-15 -> 0-7 */
}

static inline void k45_scales(const uint8_t *scales, uint16_t dh, uint16_t mh, int p,
                              qpair *o) {
    if ((p & 3) == 0)
        k45_super(scales, dh, mh, o);
    int s = p & 3;
    __m512i idx = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * s),
                                          _mm512_set1_epi32(2 * s + 1));
    o->sw = _mm512_permutexvar_ps(idx, o->ksw);
    o->mn = _mm512_permutexvar_ps(idx, o->kmn);
}

static inline void pair_q4_k(const uint8_t *row, int p, qpair *o) {
    const hr_block_q4_k *B = (const hr_block_q4_k *)row + p / 4;
    int s = p % 4;
    o->u = split2(_mm256_loadu_si256((const __m256i *)(B->qs + 32 * s)), 0, 4, 0xF);
    k45_scales(B->scales, B->d, B->dmin, p, o);
}

static inline void pair_q5_k(const uint8_t *row, int p, qpair *o) {
    const hr_block_q5_k *B = (const hr_block_q5_k *)row + p / 4;
    int s = p % 4;
    __m512i lo = split2(_mm256_loadu_si256((const __m256i *)(B->qs + 32 * s)), 0, 4, 0xF);
    __m512i hi = split2(_mm256_loadu_si256((const __m256i *)B->qh), 2 * s, 2 * s + 1, 1);
    o->u = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
    k45_scales(B->scales, B->d, B->dmin, p, o);
}

static inline void pair_q6_k(const uint8_t *row, int p, qpair *o) {
    const hr_block_q6_k *B = (const hr_block_q6_k *)row + p / 4;
    int s = p % 4, h = s / 2, odd = s & 1;
    __m512i l = _mm512_loadu_si512(B->ql + h * 64);
    if (odd)
        l = _mm512_srli_epi16(l, 4);
    l = _mm512_and_si512(l, _mm512_set1_epi8(0xF));
    __m512i hb = split2(_mm256_loadu_si256((const __m256i *)(B->qh + h * 32)), 4 * odd,
                        4 * odd + 2, 3);
    o->u = _mm512_or_si512(l, _mm512_slli_epi16(hb, 4));
    if (s == 0)
        o->ksw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                   _mm_loadu_si128((const __m128i *)B->scales))),
                               _mm512_set1_ps(h2f(B->d)));
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * s),
                                   _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
    o->sw = _mm512_permutexvar_ps(idx, o->ksw);
}

/* ---- kernels ------------------------------------------------------------------ */

#define JB 16                    /* weight rows per block */
#define IBLOCK_BYTES (384 << 10) /* activation rows per block: this much (L2) */

/* y[i0..i0+I) x [j0..j0+J): J <= 4, I <= 4, constants after inlining.
 * HASMIN: the format has mn. */
#define GEMM_I8(NAME, DEC, HASMIN)                                          \
    static inline __attribute__((always_inline)) void NAME##_tile(                 \
        float *y, int ldy, const hr_qact *x, int i0, int I, const hr_tensor *w,    \
        int j0, int J) {                                                           \
        int k = x->k, np = k / 64;                                                 \
        size_t rb = hr_tensor_row_bytes(w);                                        \
        const uint8_t *row[4];                                                     \
        const int8_t *q[4];                                                        \
        const float *d4[4], *s4[4];                                                \
        const int32_t *c4[4];                                                      \
        __m512 acc[4][4];                                                          \
        for (int b = 0; b < J; b++) {                                              \
            row[b] = (const uint8_t *)w->data + (size_t)(j0 + b) * rb;             \
            for (int a = 0; a < I; a++)                                            \
                acc[b][a] = _mm512_setzero_ps();                                   \
        }                                                                          \
        for (int a = 0; a < I; a++) {                                              \
            q[a] = x->q + (size_t)(i0 + a) * k;                                    \
            d4[a] = x->d4 + (size_t)(i0 + a) * (k / 4);                            \
            c4[a] = x->c4 + (size_t)(i0 + a) * (k / 4);                            \
            s4[a] = x->s4 + (size_t)(i0 + a) * (k / 4);                            \
        }                                                                          \
        qpair wp[4]; /* kept across pairs: the K-quant super-block scales */       \
        for (int b = 0; b < J; b++)                                                \
            wp[b].ksw = wp[b].kmn = _mm512_setzero_ps();                           \
        size_t ahead = (size_t)J * rb; /* the next tile's rows, same place */      \
        for (int p = 0; p < np; p++) {                                             \
            for (int b = 0; b < J; b++) {                                          \
                _mm_prefetch((const char *)row[b] + ahead + (size_t)p * rb / np,   \
                             _MM_HINT_T0);                                         \
                DEC(row[b], p, &wp[b]);                                            \
            }                                                                      \
            for (int a = 0; a < I; a++) {                                          \
                __m512i qa = _mm512_loadu_si512(q[a] + 64 * p);                    \
                __m512 da = _mm512_loadu_ps(d4[a] + 16 * p);                       \
                __m512i c0 = _mm512_loadu_si512(c4[a] + 16 * p);                   \
                __m512 ms = HASMIN ? _mm512_loadu_ps(s4[a] + 16 * p)               \
                                   : _mm512_setzero_ps();                          \
                for (int b = 0; b < J; b++) {                                      \
                    __m512i dot = _mm512_dpbusd_epi32(c0, wp[b].u, qa);            \
                    acc[b][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),           \
                                                _mm512_mul_ps(wp[b].sw, da),       \
                                                acc[b][a]);                        \
                    if (HASMIN)                                                    \
                        acc[b][a] = _mm512_fmadd_ps(wp[b].mn, ms, acc[b][a]);      \
                }                                                                  \
            }                                                                      \
        }                                                                          \
        for (int a = 0; a < I; a++)                                                \
            for (int b = 0; b < J; b++)                                            \
                y[(size_t)(i0 + a) * ldy + j0 + b] = _mm512_reduce_add_ps(acc[b][a]); \
    }                                                                              \
    static void NAME##_rows(float *y, int ldy, const hr_qact *x, int i0, int I,     \
                            const hr_tensor *w, int j0, int j1) {                  \
        int j = j0;                                                                \
        if (I == 4) {                                                              \
            for (; j + 4 <= j1; j += 4)                                            \
                NAME##_tile(y, ldy, x, i0, 4, w, j, 4);                            \
            for (; j < j1; j++)                                                    \
                NAME##_tile(y, ldy, x, i0, 4, w, j, 1);                            \
            return;                                                                \
        }                                                                          \
        for (; j + 4 <= j1; j += 4)                                                \
            NAME##_tile(y, ldy, x, i0, 1, w, j, 4);                                \
        for (; j < j1; j++)                                                        \
            NAME##_tile(y, ldy, x, i0, 1, w, j, 1);                                \
    }                                                                              \
    void NAME(float *y, int ldy, const hr_qact *x, int n, const hr_tensor *w,      \
              int m0, int m1) {                                                    \
        int ib = IBLOCK_BYTES / (4 * x->k) / 4 * 4;                                \
        ib = ib < 4 ? 4 : ib;                                                      \
        for (int i0 = 0; i0 < n; i0 += ib) {                                       \
            int i1 = n - i0 < ib ? n : i0 + ib;                                    \
            for (int jb = m0; jb < m1; jb += JB) {                                 \
                int je = m1 - jb < JB ? m1 : jb + JB, i = i0;                      \
                for (; i + 4 <= i1; i += 4)                                        \
                    NAME##_rows(y, ldy, x, i, 4, w, jb, je);                       \
                for (; i < i1; i++)                                                \
                    NAME##_rows(y, ldy, x, i, 1, w, jb, je);                       \
            }                                                                      \
        }                                                                          \
    }

GEMM_I8(hr__gemm_i8_q8_0_avx512, pair_q8_0, 0)
GEMM_I8(hr__gemm_i8_q4_0_avx512, pair_q4_0, 0)
GEMM_I8(hr__gemm_i8_q4_1_avx512, pair_q4_1, 1)
GEMM_I8(hr__gemm_i8_q4_k_avx512, pair_q4_k, 1)
GEMM_I8(hr__gemm_i8_q5_k_avx512, pair_q5_k, 1)
GEMM_I8(hr__gemm_i8_q6_k_avx512, pair_q6_k, 0)

/* max |x| of a 32-block held in x0, x1 (NaNs ignored, as the scalar loop) */
static inline float amax32(__m512 x0, __m512 x1) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    return _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_and_ps(x0, absmask), _mm512_and_ps(x1, absmask)));
}

/* One 32-block as hr_qact_row quantizes it, with the same IEEE operations
 * (max of |x|, the two divisions, x * id rounded half to even by the default
 * MXCSR mode), so bit-identical for finite inputs: q[32] stored, the q as
 * int32 in *q0 (columns 0-15) and *q1, d returned. */
static inline void qstore(__m512 x0, __m512 x1, float id, int8_t *q, __m512i *q0,
                          __m512i *q1) {
    __m512 vid = _mm512_set1_ps(id);
    __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    *q0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)), lim), nlim);
    *q1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, vid)), lim), nlim);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(*q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(*q1));
}

static inline float qblock(const float *x, int8_t *q, __m512i *q0, __m512i *q1) {
    __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    float amax = amax32(x0, x1);
    qstore(x0, x1, amax > 0 ? 127.0f / amax : 0.0f, q, q0, q1);
    return amax / 127.0f;
}

void hr__qact_row_avx512(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                         float *s4) {
    const __m512i lane4 = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int b = 0; b < k; b += 32) {
        __m512i q0, q1;
        float d = qblock(x + b, q + b, &q0, &q1);
        /* lane sums: 4 consecutive int32 -> 1 (8 lanes for 32 elements) */
        __m512i h0 = _mm512_add_epi32(q0, _mm512_shuffle_epi32(q0, _MM_PERM_CDAB));
        __m512i h1 = _mm512_add_epi32(q1, _mm512_shuffle_epi32(q1, _MM_PERM_CDAB));
        h0 = _mm512_add_epi32(h0, _mm512_shuffle_epi32(h0, _MM_PERM_BADC));
        h1 = _mm512_add_epi32(h1, _mm512_shuffle_epi32(h1, _MM_PERM_BADC));
        /* every 4th lane of h0, h1 (lanes 0, 4, 8, 12) -> 8 sums */
        __m512i idx = _mm512_slli_epi32(lane4, 2);
        __m512i sums = _mm512_permutex2var_epi32(h0, idx, h1); /* lanes 0-7 valid */
        __m256i s8 = _mm512_castsi512_si256(sums);
        _mm256_storeu_si256((__m256i *)(c4 + b / 4), _mm256_mullo_epi32(s8, _mm256_set1_epi32(-off)));
        _mm256_storeu_ps(s4 + b / 4, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s8)));
        _mm256_storeu_ps(d4 + b / 4, _mm256_set1_ps(d));
    }
}

/* lane-wise max of floats, or sum of int32s (ADD), in float registers */
static inline __attribute__((always_inline)) __m512 op16(__m512 a, __m512 b, const int ADD) {
    return ADD ? _mm512_castsi512_ps(
                     _mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
               : _mm512_max_ps(a, b);
}

/* 16 vectors to one, lane b the max (sum) of v[b]'s lanes: four levels of
 * shuffles, each halving the vectors, 45 uops for the 16 where one at a
 * time took 8 each on a chain of 8. v is overwritten. */
static inline __attribute__((always_inline)) __m512 reduce16(__m512 *v, const int ADD) {
    for (int i = 0; i < 8; i++) /* lanes 0-7: v[2i]'s, 8-15: v[2i+1]'s */
        v[i] = op16(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                    _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE), ADD);
    for (int i = 0; i < 4; i++) /* 128-bit chunk c: v[4i + c]'s */
        v[i] = op16(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88),
                    _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD), ADD);
    for (int i = 0; i < 2; i++) /* chunk c: v[8i + c]'s twice, then v[8i + 4 + c]'s */
        v[i] = op16(_mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0x44),
                    _mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0xEE), ADD);
    /* lane 4c + j: v[c + 4j]'s */
    __m512 r = op16(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD), ADD);
    const __m512i to_b = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(to_b, r);
}

/* The 16 32-blocks at x: each block's max |x| m, id[b] = m > 0 ? lim / m
 * : 0 (as qblock) and the returned m / lim, as vectors */
static inline __m512 scales16(const float *x, float lim, float *id) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 m[16];
    for (int i = 0; i < 16; i++)
        m[i] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + 32 * i), absmask),
                             _mm512_and_ps(_mm512_loadu_ps(x + 32 * i + 16), absmask));
    __m512 amax = reduce16(m, 0);
    __mmask16 pos = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_store_ps(id, _mm512_maskz_div_ps(pos, _mm512_set1_ps(lim), amax));
    return _mm512_div_ps(amax, _mm512_set1_ps(lim));
}

/* c[2i] = S0[i], c[2i + 1] = S1[i] for i < 16: groups of 16 columns, two
 * per 32-block */
static inline void store_pairs(int32_t *c, __m512i S0, __m512i S1) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                  hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_storeu_si512(c, _mm512_permutex2var_epi32(S0, lo, S1));
    _mm512_storeu_si512(c + 16, _mm512_permutex2var_epi32(S0, hi, S1));
}

/* hr_qact32_row, bit-identical (qblock's operations; the sums are exact
 * integers): 16 blocks at a time, their maxes, divisions and sums as
 * vectors (reduce16), then the one-block steps for the rest. 1024 columns
 * took 0.72 us one block at a time. */
void hr__qact32_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                           int32_t *c, float *s) {
    int nb = k / 32, b = 0;
    for (; b + 16 <= nb; b += 16) {
        const float *xb = x + 32 * b;
        _Alignas(64) float id[16];
        __m512 dv = scales16(xb, 127.0f, id);
        __m512 s0[16], s1[16]; /* the q of columns 0-15, 16-31 as int32 */
        for (int i = 0; i < 16; i++) {
            __m512i q0, q1;
            qstore(_mm512_loadu_ps(xb + 32 * i), _mm512_loadu_ps(xb + 32 * i + 16), id[i],
                   q + 32 * (b + i), &q0, &q1);
            s0[i] = _mm512_castsi512_ps(q0);
            s1[i] = _mm512_castsi512_ps(group == 16 ? q1 : _mm512_add_epi32(q0, q1));
        }
        __m512i S, noff = _mm512_set1_epi32(-off);
        if (group == 16) {
            __m512i S0 = _mm512_castps_si512(reduce16(s0, 1)),
                    S1 = _mm512_castps_si512(reduce16(s1, 1));
            S = _mm512_add_epi32(S0, S1);
            S0 = _mm512_mullo_epi32(S0, noff);
            S1 = _mm512_mullo_epi32(S1, noff);
            store_pairs(c + 2 * b, S0, S1);
        } else {
            S = _mm512_castps_si512(reduce16(s1, 1));
            _mm512_storeu_si512(c + b, _mm512_mullo_epi32(S, noff));
        }
        _mm512_storeu_ps(d + b, dv);
        _mm512_storeu_ps(s + b, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(S)));
    }
    for (; b < nb; b++) {
        __m512i q0, q1;
        d[b] = qblock(x + 32 * b, q + 32 * b, &q0, &q1);
        int s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
        s[b] = d[b] * (float)(s0 + s1);
        if (group == 16) {
            c[2 * b] = -off * s0;
            c[2 * b + 1] = -off * s1;
        } else {
            c[b] = -off * (s0 + s1);
        }
    }
}

/* hr_qactk_row, bit-identical: qblock's steps with the 256-block's max,
 * the 16 half-block sums of q reduced at once (reduce16) */
void hr__qactk_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                          int32_t *c, int8_t *sd) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int B = 0; B < k / 256; B++) {
        const float *xb = x + 256 * B;
        __m512 m = _mm512_setzero_ps();
        for (int i = 0; i < 256; i += 16)
            m = _mm512_max_ps(m, _mm512_and_ps(_mm512_loadu_ps(xb + i), absmask));
        float amax = _mm512_reduce_max_ps(m), id = amax > 0 ? 127.0f / amax : 0.0f;
        d[B] = amax / 127.0f;
        __m512 v[16]; /* the q of 16-column halves as int32 */
        for (int j = 0; j < 8; j++) {
            __m512i q0, q1;
            qstore(_mm512_loadu_ps(xb + 32 * j), _mm512_loadu_ps(xb + 32 * j + 16), id,
                   q + 256 * B + 32 * j, &q0, &q1);
            v[2 * j] = _mm512_castsi512_ps(q0);
            v[2 * j + 1] = _mm512_castsi512_ps(q1);
        }
        /* lane 2j: the sum of 32-block j's first 16 q, 2j + 1: of its last */
        __m512i P = _mm512_castps_si512(reduce16(v, 1)), noff = _mm512_set1_epi32(-off);
        __m256i S = _mm512_cvtepi64_epi32(_mm512_add_epi32(P, _mm512_srli_epi64(P, 32)));
        if (group == 16)
            _mm512_storeu_si512(c + 16 * B, _mm512_mullo_epi32(P, noff));
        else
            _mm256_storeu_si256((__m256i *)(c + 8 * B),
                                _mm256_mullo_epi32(S, _mm512_castsi512_si256(noff)));
        /* sd: S = 256 hi + lo, lo its balanced low digit (exact shifts) */
        __m256i lo = _mm256_srai_epi32(_mm256_slli_epi32(S, 24), 24);
        __m256i hi = _mm256_srai_epi32(_mm256_sub_epi32(S, lo), 8);
        _mm_storel_epi64((__m128i *)(sd + 16 * B), _mm256_cvtepi32_epi8(hi));
        _mm_storel_epi64((__m128i *)(sd + 16 * B + 8), _mm256_cvtepi32_epi8(lo));
    }
}

/* The balanced base-256 digit of each lane (its low byte, sign-extended) */
static inline __m512i digit8(__m512i v) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24); }

/* One 32-block of hr_qact24_row given its id: q's three digit planes
 * stored, the block's x_int as int32 summed into *xs and each plane's
 * digits into dg[j][h] (columns 16h .. 16h + 15) */
static inline __attribute__((always_inline)) void q24_block(const float *x, float id, int8_t *q,
                                                            size_t k, __m512i *xs,
                                                            __m512i dg[3][2]) {
    const float H = 8355711.0f;
    __m512 vid = _mm512_set1_ps(id), hi = _mm512_set1_ps(H), lo = _mm512_set1_ps(-H);
    *xs = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), vid);
        __m512i xi = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
        __m512i l = digit8(xi), r = _mm512_srai_epi32(_mm512_sub_epi32(xi, l), 8);
        __m512i m = digit8(r), t = _mm512_srai_epi32(_mm512_sub_epi32(r, m), 8);
        dg[0][h] = t, dg[1][h] = m, dg[2][h] = l;
        for (int j = 0; j < 3; j++)
            _mm_storeu_si128((__m128i *)(q + (size_t)j * k + 16 * h), _mm512_cvtepi32_epi8(dg[j][h]));
        *xs = _mm512_add_epi32(*xs, xi);
    }
}

/* hr_qact24_row, bit-identical: the same max, divisions and product, the
 * clamp before the rounding (the bounds are integers, so it commutes; NaN
 * goes to -H as in the scalar code), digits by shifts (exact). 16 blocks
 * at a time, their maxes, divisions and the sums as vectors (reduce16, as
 * hr__qact32_row_avx512): 1024 columns 1.73 -> 0.63 us. */
void hr__qact24_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                           int32_t *c, float *s) {
    const float H = 8355711.0f;
    const __m512i noff = _mm512_set1_epi32(-off);
    int ng = k / group, nb = k / 32, b = 0;
    for (; b + 16 <= nb; b += 16) {
        const float *xb = x + 32 * b;
        _Alignas(64) float id[16];
        __m512 dv = scales16(xb, H, id);
        /* per block: x_int's sum, each plane's digit sums per half */
        __m512 xs[16], ds[3][2][16];
        for (int i = 0; i < 16; i++) {
            __m512i xsum, dg[3][2];
            q24_block(xb + 32 * i, id[i], q + 32 * (b + i), (size_t)k, &xsum, dg);
            xs[i] = _mm512_castsi512_ps(xsum);
            for (int j = 0; j < 3; j++)
                if (group == 16) {
                    ds[j][0][i] = _mm512_castsi512_ps(dg[j][0]);
                    ds[j][1][i] = _mm512_castsi512_ps(dg[j][1]);
                } else {
                    ds[j][0][i] = _mm512_castsi512_ps(_mm512_add_epi32(dg[j][0], dg[j][1]));
                }
        }
        _mm512_storeu_ps(d + b, dv);
        _mm512_storeu_ps(s + b, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_castps_si512(
                                                      reduce16(xs, 1)))));
        for (int j = 0; j < 3; j++) {
            __m512i S0 = _mm512_mullo_epi32(_mm512_castps_si512(reduce16(ds[j][0], 1)), noff);
            if (group == 16) {
                __m512i S1 = _mm512_mullo_epi32(_mm512_castps_si512(reduce16(ds[j][1], 1)), noff);
                store_pairs(c + j * ng + 2 * b, S0, S1);
            } else {
                _mm512_storeu_si512(c + j * ng + b, S0);
            }
        }
    }
    for (; b < nb; b++) {
        float amax = amax32(_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16));
        d[b] = amax / H;
        __m512i xsum, dg[3][2];
        q24_block(x + 32 * b, amax > 0 ? H / amax : 0.0f, q + 32 * b, (size_t)k, &xsum, dg);
        s[b] = d[b] * (float)_mm512_reduce_add_epi32(xsum);
        for (int j = 0; j < 3; j++) {
            int s0 = _mm512_reduce_add_epi32(dg[j][0]), s1 = _mm512_reduce_add_epi32(dg[j][1]);
            if (group == 16) {
                c[j * ng + 2 * b] = -off * s0;
                c[j * ng + 2 * b + 1] = -off * s1;
            } else {
                c[j * ng + b] = -off * (s0 + s1);
            }
        }
    }
}
