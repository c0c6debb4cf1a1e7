/* The parts of kvwide's output pass (kvquant.h hr__kvwide) that are the
 * same on AVX2 and AVX-512, for the files of both ISAs (compiled with
 * either's flags; AVX2 instructions): a row's weights p_j * s_jg, and
 * affine's group bias sums, 8 rows a register. */
#ifndef HR_KERNELS_KVWIDE_ROWS_H
#define HR_KERNELS_KVWIDE_ROWS_H

#include "kernels/cpu/kvquant.h"

#include <immintrin.h>

/* w[g * n + j] = p[j] * s_jg (one rounding each: the reference's) */
static inline __attribute__((always_inline)) void
hr__kvwide_weights(float *w, const float *p, const hr__kvwide *W) {
    int n = W->n;
    for (int g = 0; g < W->ns; g++) {
        const float *sg = W->s + (size_t)g * n;
        float *wg = w + (size_t)g * n;
        int j = 0;
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(wg + j,
                             _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(sg + j)));
        for (; j < n; j++)
            wg[j] = p[j] * sg[j];
    }
}

/* x[0..7] (8 rows of 8) transposed in place: x[k] = element k of each row */
static inline __attribute__((always_inline)) void hr__kvwide_transpose8(__m256 x[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        x[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        x[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* affine's group bias sums of rows r0 .. r0 + m - 1 (m <= 8): B_g =
 * fma(p_j, b_jg, B_g) key by key, the 8 rows' chains in the lanes of one
 * register, 8 keys of the rows' weights transposed at a time (rows past m
 * computed on row r0 and dropped) */
static inline __attribute__((always_inline)) void
hr__kvwide_bias_rows(float *bias, const float *p, size_t ldp, int m, const hr__kvwide *W) {
    int ns = W->ns, n = W->n;
    const float *pr[8];
    for (int i = 0; i < 8; i++)
        pr[i] = p + (size_t)(i < m ? i : 0) * ldp;
    for (int g = 0; g < ns; g++) {
        const float *b = W->b + (size_t)g * n;
        float in[8], out[8];
        for (int i = 0; i < 8; i++)
            in[i] = bias[(size_t)(i < m ? i : 0) * ns + g];
        __m256 B = _mm256_loadu_ps(in);
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 x[8];
            for (int i = 0; i < 8; i++)
                x[i] = _mm256_loadu_ps(pr[i] + j);
            hr__kvwide_transpose8(x);
            for (int k = 0; k < 8; k++)
                B = _mm256_fmadd_ps(x[k], _mm256_broadcast_ss(b + j + k), B);
        }
        _mm256_storeu_ps(out, B);
        for (int i = 0; i < m; i++) {
            float s = out[i];
            for (int jj = j; jj < n; jj++)
                s = __builtin_fmaf(pr[i][jj], b[jj], s);
            bias[(size_t)i * ns + g] = s;
        }
    }
}

#endif
