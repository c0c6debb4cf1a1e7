/* The output pass of attention over a run of quantized KV records widened
 * once (kvquant.h's hr__kvwide), for many query rows: a prefill tile's
 * tokens x a GQA group (8 x 3 = 24 rows) read each record's codes as
 * floats widened once, where the formats' own AVX2 bodies widen them again
 * for every 4 rows. The f16 path's shape on this ISA (gemm_avx2.c
 * attn_axpys over rows widened once): 32 positions of 2 rows in 8
 * registers over the keys, each value load serving both rows (q8_0, 24
 * rows of 64, records in L2: 75-80 ns a key against 110-120 with the
 * format's own body, one thread, this AMD EPYC).
 *
 * (The score pass widened once the same way, 4 keys a row at a time or 6
 * rows a key, measured 150-170 ns a key against the formats' own bodies'
 * 110-130. TurboQuant's own score pass now widens a run once for blocks
 * of 2 rows x 4 keys, 8 chains at once (turbo_attn_avx2.c dots_rk: 82-85
 * ns a key against 123-128, 24 rows of 64 at 3.5 bits); the same blocks
 * over affine 4-bit records ran 134-140 against its own body's 127-131
 * (its unpacking is cheap) and were not kept.)
 *
 * Every output is the formats' reference chain, operation for operation
 * (kvquant_attn.c, kvggml.c, turbo_attn.c), so the bits are the scalar's:
 * o[P] = fma(p_j * s_jg, v_j[P], o[P]) key by key [affine: B_g = fma(p_j,
 * b_jg, B_g)]. */
#include "kernels/cpu/kvquant.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* M (1, 2) output rows over the run: 32 positions at a time, key by key */
AI void axpys_m(float *o, float *bias, const float *p, size_t ldp, const hr__kvwide *W,
                const int M) {
    int hd = W->hd, ns = W->ns, seg = hd / ns, n = W->n;
    float w[2][HR_KVWIDE_MAX]; /* p_j * s_jg at g * n + j */
    for (int rr = 0; rr < M; rr++) {
        const float *pr = p + (size_t)rr * ldp;
        for (int g = 0; g < ns; g++) {
            const float *sg = W->s + (size_t)g * n;
            float *wg = w[rr] + (size_t)g * n;
            for (int j = 0; j < n; j++)
                wg[j] = pr[j] * sg[j];
        }
        if (bias)
            for (int g = 0; g < ns; g++) {
                float B = bias[(size_t)rr * ns + g];
                for (int j = 0; j < n; j++)
                    B = __builtin_fmaf(pr[j], W->b[(size_t)g * n + j], B);
                bias[(size_t)rr * ns + g] = B;
            }
    }
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
    int r = 0;
    for (; r + 2 <= nr; r += 2)
        axpys_m(o + (size_t)r * W->hd, bias ? bias + (size_t)r * W->ns : NULL,
                p + (size_t)r * ldp, ldp, W, 2);
    if (r < nr)
        axpys_m(o + (size_t)r * W->hd, bias ? bias + (size_t)r * W->ns : NULL,
                p + (size_t)r * ldp, ldp, W, 1);
}
