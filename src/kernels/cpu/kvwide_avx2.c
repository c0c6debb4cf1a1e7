/* Attention over a run of quantized KV records widened once (kvquant.h's
 * hr__kvwide), for many query rows: a prefill tile's tokens x a GQA group
 * (16 x 3 = 48 rows) read each record's codes as floats widened once, where
 * the formats' own AVX2 bodies widen them again for every 4 rows.
 *
 * The output pass: the f16 path's shape on this ISA (gemm_avx2.c
 * attn_axpys over rows widened once): 32 positions of 2 rows in 8
 * registers over the keys, each value load serving both rows (q8_0, 24
 * rows of 64, records in L2: 75-80 ns a key against 110-120 with the
 * format's own body, one thread, this AMD EPYC).
 *
 * The score pass: blocks of 2 rows x 4 keys, 8 chains at once, each value
 * load serving 2 rows and each query load 4 keys, and the block's 8
 * horizontal sums taken together (hsum_avx2.h), then affine's bias
 * terms and the scale lane by lane.
 *
 * Every score and output is the formats' reference chain, operation for
 * operation (kvquant_attn.c, kvggml.c, turbo_attn.c), so the bits are the
 * scalar's: score = [fma(b_g, Q_g, ..)] (hsum8(T)) * scale, T[l] =
 * fma(s_g, A_g[l], T[l]) over the groups, A_g[l] = fma(q[P], v[P], A_g[l])
 * over the group's chunks; o[P] = fma(p_j * s_jg, v_j[P], o[P]) key by key [affine:
 * B_g = fma(p_j, b_jg, B_g)]. */
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/kvwide_rows.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* M (1, 2) output rows over the run: 32 positions at a time, key by key
 * (affine's bias sums: hr__kvwide_bias_rows) */
AI void axpys_m(float *o, const float *p, size_t ldp, const hr__kvwide *W, const int M) {
    int hd = W->hd, ns = W->ns, seg = hd / ns, n = W->n;
    float w[2][HR_KVWIDE_MAX]; /* p_j * s_jg at g * n + j */
    for (int rr = 0; rr < M; rr++)
        hr__kvwide_weights(w[rr], p + (size_t)rr * ldp, W);
    for (int t = 0; t < hd; t += 32) { /* seg is a multiple of 32 */
        int g = t / seg;
        __m256 O[2][4];
        for (int rr = 0; rr < M; rr++)
            for (int c = 0; c < 4; c++)
                O[rr][c] = _mm256_loadu_ps(o + (size_t)rr * hd + t + 8 * c);
        const float *v = W->v + t;
        for (int j = 0; j < n; j++, v += W->ld) {
            __m256 x[4];
            for (int c = 0; c < 4; c++)
                x[c] = _mm256_loadu_ps(v + 8 * c);
            for (int rr = 0; rr < M; rr++) {
                __m256 wv = _mm256_broadcast_ss(&w[rr][g * n + j]);
                for (int c = 0; c < 4; c++)
                    O[rr][c] = _mm256_fmadd_ps(wv, x[c], O[rr][c]);
            }
        }
        for (int rr = 0; rr < M; rr++)
            for (int c = 0; c < 4; c++)
                _mm256_storeu_ps(o + (size_t)rr * hd + t + 8 * c, O[rr][c]);
    }
}

void hr__kvwide_axpys_avx2(float *o, float *bias, const float *p, size_t ldp, int nr,
                           const hr__kvwide *W) {
    for (int r = 0; bias && r < nr; r += 8)
        hr__kvwide_bias_rows(bias + (size_t)r * W->ns, p + (size_t)r * ldp, ldp,
                             nr - r < 8 ? nr - r : 8, W);
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        axpys_m(o + (size_t)r * W->hd, p + (size_t)r * ldp, ldp, W, 2);
    if (r < nr)
        axpys_m(o + (size_t)r * W->hd, p + (size_t)r * ldp, ldp, W, 1);
}

/* rows x keys a block of the score pass (2 x 4, 3 x 2 and 3 x 4 ran alike
 * for TurboQuant's 24 rows of 64; rows come in GQA groups, mostly even):
 * hr_dots_2x4_avx2's */
#define WR 2
#define WK 4

/* The scores of rows q, q + hd (nrow of them: 1 or 2) over keys j .. j +
 * nkey - 1 (nkey <= 4) of the run, into sc + r * ldsc + j. Rows / keys past
 * the last are computed on row 0 / key 0 and dropped. Qb[g]: the rows'
 * bias sums of group g (lanes 0-3 row 0's, 4-7 row 1's; affine only). NS:
 * W->ns where a constant (1, 2), else 0. */
AI void dots_block(float *sc, size_t ldsc, const float *q, int nrow, const hr__kvwide *W,
                   const __m256 *Qb, int j, int nkey, float scale, const int NS, bool bias) {
    int hd = W->hd, ns = NS ? NS : W->ns, seg = hd / ns, n = W->n;
    const float *qr[WR], *vk[WK];
    int key[WK];
    for (int rr = 0; rr < WR; rr++)
        qr[rr] = q + (size_t)(rr < nrow ? rr : 0) * hd;
    for (int kk = 0; kk < WK; kk++) {
        key[kk] = j + (kk < nkey ? kk : 0);
        vk[kk] = W->v + (size_t)key[kk] * W->ld;
    }
    __m256 A[WR][WK], T[WR][WK];
    hr_dots_2x4_avx2(A, qr, vk, 0, seg);
    for (int kk = 0; kk < WK; kk++) {
        __m256 w = _mm256_broadcast_ss(W->s + key[kk]);
        for (int rr = 0; rr < WR; rr++)
            T[rr][kk] = _mm256_fmadd_ps(w, A[rr][kk], _mm256_setzero_ps());
    }
    if (NS != 1) { /* T between groups in memory (A's 8 chains take the registers) */
        _Alignas(32) float Tm[WR][WK][8];
        for (int rr = 0; rr < WR; rr++)
            for (int kk = 0; kk < WK; kk++)
                _mm256_store_ps(Tm[rr][kk], T[rr][kk]);
        for (int g = 1; g < ns; g++) {
            hr_dots_2x4_avx2(A, qr, vk, g * seg, seg);
            for (int kk = 0; kk < WK; kk++) {
                __m256 w = _mm256_broadcast_ss(W->s + (size_t)g * n + key[kk]);
                for (int rr = 0; rr < WR; rr++)
                    _mm256_store_ps(Tm[rr][kk], _mm256_fmadd_ps(w, A[rr][kk],
                                                                 _mm256_load_ps(Tm[rr][kk])));
            }
        }
        for (int rr = 0; rr < WR; rr++)
            for (int kk = 0; kk < WK; kk++)
                T[rr][kk] = _mm256_load_ps(Tm[rr][kk]);
    }
    __m256 d = hr_hsum_2x4_avx2(T);
    for (int g = 0; bias && g < W->ns; g++) {
        const float *b = W->b + (size_t)g * n;
        __m128 bk = nkey == WK ? _mm_loadu_ps(b + j)
                               : _mm_setr_ps(b[key[0]], b[key[1]], b[key[2]], b[key[3]]);
        d = _mm256_fmadd_ps(_mm256_set_m128(bk, bk), Qb[g], d);
    }
    d = _mm256_mul_ps(d, _mm256_set1_ps(scale));
    if (nkey == WK) {
        _mm_storeu_ps(sc + j, _mm256_castps256_ps128(d));
        if (nrow > 1)
            _mm_storeu_ps(sc + ldsc + j, _mm256_extractf128_ps(d, 1));
        return;
    }
    float o[8];
    _mm256_storeu_ps(o, d);
    for (int rr = 0; rr < nrow; rr++)
        for (int kk = 0; kk < nkey; kk++)
            sc[(size_t)rr * ldsc + j + kk] = o[4 * rr + kk];
}

AI void dots_rows(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                  const hr__kvwide *W, float scale, const int NS, bool bias) {
    int ns = W->ns;
    __m256 Qb[HR_KVWIDE_MAX / 4];
    for (int r0 = 0; r0 < nr; r0 += WR) {
        int nrow = nr - r0 < WR ? nr - r0 : WR;
        for (int g = 0; bias && g < ns; g++)
            Qb[g] = _mm256_set_m128(_mm_set1_ps(qsum[(size_t)(r0 + nrow - 1) * ns + g]),
                                    _mm_set1_ps(qsum[(size_t)r0 * ns + g]));
        for (int j = 0; j < W->n; j += WK)
            dots_block(sc + (size_t)r0 * ldsc, ldsc, q + (size_t)r0 * W->hd, nrow, W, Qb, j,
                       W->n - j < WK ? W->n - j : WK, scale, NS, bias);
    }
}

void hr__kvwide_dots_avx2(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                          const hr__kvwide *W, float scale) {
    bool bias = W->b != NULL;
    switch (W->ns) { /* the common group counts as constants */
    case 1: dots_rows(sc, ldsc, q, qsum, nr, W, scale, 1, bias); break;
    case 2: dots_rows(sc, ldsc, q, qsum, nr, W, scale, 2, bias); break;
    default: dots_rows(sc, ldsc, q, qsum, nr, W, scale, 0, bias); break;
    }
}

void hr__kvwide_pass_avx2(const hr__kvwide_job *J, int j0, const hr__kvwide *W) {
    if (J->sc)
        hr__kvwide_dots_avx2(J->sc + j0, J->ldsc, J->q, J->qsum, J->nr, W, J->scale);
    else
        hr__kvwide_axpys_avx2(J->o, J->bias, J->p + j0, J->ldp, J->nr, W);
}
