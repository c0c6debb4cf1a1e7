/* kvwide's passes (kvquant.h hr__kvwide: a run of quantized KV records
 * widened once into floats, for a prefill tile's many query rows) with
 * AVX-512, for the AVX-512 table's q8_0 / q4_0 and affine attention (their
 * decode bodies are the AVX2 ones; kvggml_attn_avx2.c, kvquant_attn_avx2.c)
 * and its TurboQuant calls of 16 rows and more (turbo_attn_avx512.c).
 * The same chains as kvwide_avx2.c, so the same bits as the scalar
 * references (test_kvquant, test_kvggml: test_attn_isas):
 *
 * The output pass: each output position is its own chain over the keys,
 * o[P] = fma(p_j * s_jg, v_j[P], o[P]): 32 positions of 6 rows in 12
 * registers, each value load serving 6 rows (AVX2: 32 positions of 2 rows
 * in 8 registers of 8): 4 rows' 8 chains were too few to hide the FMA's
 * latency, 8 rows' 16 no faster than 12 (docs/kv-quant.md).
 *
 * The score pass, from LANES_ROWS rows (a prefill tile's), with the keys
 * in the lanes (dots_lanes): the run's records transposed once (16 x 16
 * blocks of shuffles), then for 3 rows at a time and 16 keys a register,
 * each of the reference's 8 chains A_g[l] = fma(q[P], v[P], A_g[l]) (P =
 * 8c + l over the group's chunks c) is a register, its key operand one
 * load for the 3 rows and its query operand a broadcast from memory; T =
 * fma(s_g, A_g, T) register by register (the groups' T before the last on
 * the stack), then hsum8's additions register by register (no shuffle),
 * affine's bias terms and the scale, a row's 16 scores one store. Against
 * the pairs below it took 12-19% less time at 32-48 rows of head_dim 64 and
 * 128 (docs/kv-quant.md); below 16 rows the transposition costs more than
 * it saves, and a group count that is not a constant (1, 2, 4) left the
 * chains in memory.
 * Fewer rows (dots_pairs): a (row, key)'s 8 chains take the 8 lanes of a
 * half: a register holds rows a and b of one key, its query operand the
 * two rows' chunk c side by side (the rows interleaved by chunk once a
 * block) and its value operand the key's chunk in both halves (a broadcast
 * load, no shuffle). A block is 6 rows x 4 keys: 12 chain registers and 12
 * of T, all in registers (AVX2 spills T); 6 x 8 where a key has one group
 * (A and T share registers). Then hsum8's additions of a pair's 8 at once,
 * affine's bias terms and the scale lane by lane, a row's 4 scores one
 * store. */
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/kvwide_rows.h"
#include "kernels/cpu/transpose_avx512.h"

#include <immintrin.h>
#include <stdbool.h>

#define AI static inline __attribute__((always_inline))
#define BR 6 /* rows a block of the output pass */
#define NP 3 /* pairs of rows a block of the score pass (dots_pairs) */
#define RMAX 3 /* rows a block of the score pass (dots_lanes) */
#define LANES_ROWS 16 /* rows from which the score pass is dots_lanes */
/* dots_lanes' transposed run: hd * (n + 15) < HR_KVWIDE_FLOATS + 15 * 256 */
#define KT_FLOATS 8192
_Static_assert(HR_KVWIDE_FLOATS + 15 * 256 <= KT_FLOATS, "KT_FLOATS");

/* ---- the output pass ------------------------------------------------------------- */

/* M (1-6) output rows over the run: 32 positions at a time, key by key */
AI void axpys_m(float *o, const float *p, size_t ldp, const hr__kvwide *W, const int M) {
    int hd = W->hd, seg = hd / W->ns, n = W->n;
    float w[BR][HR_KVWIDE_MAX]; /* p_j * s_jg at g * n + j */
    for (int rr = 0; rr < M; rr++)
        hr__kvwide_weights(w[rr], p + (size_t)rr * ldp, W);
    for (int t = 0; t < hd; t += 32) { /* seg is a multiple of 32 */
        int g = t / seg;
        __m512 O[BR][2];
        for (int rr = 0; rr < M; rr++)
            for (int c = 0; c < 2; c++)
                O[rr][c] = _mm512_loadu_ps(o + (size_t)rr * hd + t + 16 * c);
        const float *v = W->v + t;
        for (int j = 0; j < n; j++, v += W->ld) {
            __m512 x0 = _mm512_loadu_ps(v), x1 = _mm512_loadu_ps(v + 16);
            for (int rr = 0; rr < M; rr++) {
                __m512 wv = _mm512_set1_ps(w[rr][g * n + j]);
                O[rr][0] = _mm512_fmadd_ps(wv, x0, O[rr][0]);
                O[rr][1] = _mm512_fmadd_ps(wv, x1, O[rr][1]);
            }
        }
        for (int rr = 0; rr < M; rr++)
            for (int c = 0; c < 2; c++)
                _mm512_storeu_ps(o + (size_t)rr * hd + t + 16 * c, O[rr][c]);
    }
}

static void axpys(float *o, float *bias, const float *p, size_t ldp, int nr, const hr__kvwide *W) {
    for (int r = 0; bias && r < nr; r += 8)
        hr__kvwide_bias_rows(bias + (size_t)r * W->ns, p + (size_t)r * ldp, ldp,
                             nr - r < 8 ? nr - r : 8, W);
    for (int r = 0; r < nr; r += BR) {
        float *orow = o + (size_t)r * W->hd;
        const float *pr = p + (size_t)r * ldp;
        switch (nr - r < BR ? nr - r : BR) { /* rows a pass, constant in each body */
        case 1: axpys_m(orow, pr, ldp, W, 1); break;
        case 2: axpys_m(orow, pr, ldp, W, 2); break;
        case 3: axpys_m(orow, pr, ldp, W, 3); break;
        case 4: axpys_m(orow, pr, ldp, W, 4); break;
        case 5: axpys_m(orow, pr, ldp, W, 5); break;
        default: axpys_m(orow, pr, ldp, W, 6); break;
        }
    }
}

/* ---- the score pass: rows in pairs (dots_pairs) ---------------------------------- */

/* hsum8 (hr__kvq_hsum8's order) of both halves of a (keys' rows a, b) and
 * of b: l + (l + 4) by 128-bit lane shuffles of both at once, then lanes
 * 0 + 2 and 1 + 3, then 0 + 1; the sums in lanes 0, 4, 8, 12 (a's rows a,
 * b, then b's) */
AI __m512 hsum8x4(__m512 a, __m512 b) {
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 1, 1, 1)));
}

/* The sums of the block's NP pairs of rows (qi: pair h's chunk c at qi +
 * (h * hd/8 + c) * 16, rows a, b side by side) over keys key[0..KB) of the
 * run, into d[h][k / 4]: lane 4 * (row of the pair) + k % 4, bias and scale
 * not yet applied. Blocks of 3 pairs x 8 keys where a key has one group (A
 * and T share 24 registers), else 3 pairs x 4 keys (A and T: 24).
 * NS: W->ns where a constant (1, 2), else 0. */
AI void block_sums(__m256 (*d)[2], const float *qi, const hr__kvwide *W, const int *key,
                   const int NS, const int KB) {
    int hd = W->hd, ns = NS ? NS : W->ns, cps = hd / ns / 8, n = W->n;
    const float *vk[8];
    for (int k = 0; k < KB; k++)
        vk[k] = W->v + (size_t)key[k] * W->ld;
    __m512 T[NP][8];
    for (int h = 0; h < NP; h++)
        for (int k = 0; k < KB; k++)
            T[h][k] = _mm512_setzero_ps();
    for (int g = 0; g < ns; g++) {
        __m512 A[NP][8];
        for (int h = 0; h < NP; h++)
            for (int k = 0; k < KB; k++)
                A[h][k] = _mm512_setzero_ps();
        for (int c = g * cps; c < (g + 1) * cps; c++) {
            __m512 x[NP];
            for (int h = 0; h < NP; h++)
                x[h] = _mm512_loadu_ps(qi + ((size_t)h * hd / 8 + c) * 16);
            for (int k = 0; k < KB; k++) {
                __m512 y = _mm512_broadcast_f32x8(_mm256_loadu_ps(vk[k] + 8 * c));
                for (int h = 0; h < NP; h++)
                    A[h][k] = _mm512_fmadd_ps(x[h], y, A[h][k]);
            }
        }
        for (int k = 0; k < KB; k++) {
            __m512 w = _mm512_set1_ps(W->s[(size_t)g * n + key[k]]);
            for (int h = 0; h < NP; h++)
                T[h][k] = _mm512_fmadd_ps(w, A[h][k], T[h][k]);
        }
    }
    /* lanes 0, 4, 8, 12 of hsum8x4(T[h][k], T[h][k + 1]): (a, k), (b, k),
     * (a, k + 1), (b, k + 1) of pair h; gathered to lane 4 * row + k % 4 */
    const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int h = 0; h < NP; h++)
        for (int k = 0; k < KB; k += 4)
            d[h][k / 4] = _mm512_castps512_ps256(_mm512_permutex2var_ps(
                hsum8x4(T[h][k], T[h][k + 1]), lo, hsum8x4(T[h][k + 2], T[h][k + 3])));
}

AI void dots_pairs(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                  const hr__kvwide *W, float scale, const int NS, bool bias) {
    const int KB = NS == 1 ? 8 : 4, R = 2 * NP; /* keys, rows a block */
    int hd = W->hd, ns = W->ns, n = W->n, nc = hd / 8;
    _Alignas(64) float qi[NP * 256 / 8 * 16]; /* hd <= 256 */
    __m256 Qb[NP][HR_KVWIDE_MAX / 4];
    const __m256i kidx = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
    for (int r0 = 0; r0 < nr; r0 += R) {
        int nrow = nr - r0 < R ? nr - r0 : R;
        const float *qr[2 * NP];
        for (int r = 0; r < R; r++) /* rows past the last: row r0's, dropped */
            qr[r] = q + (size_t)(r0 + (r < nrow ? r : 0)) * hd;
        for (int h = 0; h < NP; h++)
            for (int c = 0; c < nc; c++) {
                _mm256_store_ps(qi + ((size_t)h * nc + c) * 16, _mm256_loadu_ps(qr[2 * h] + 8 * c));
                _mm256_store_ps(qi + ((size_t)h * nc + c) * 16 + 8,
                                _mm256_loadu_ps(qr[2 * h + 1] + 8 * c));
            }
        for (int g = 0; g < ns; g++) /* lane 4 * (row of the pair) + k: its Q_g */
            for (int h = 0; h < NP; h++) {
                if (!bias) {
                    Qb[h][g] = _mm256_setzero_ps();
                    continue;
                }
                const float *Q = qsum + g;
                size_t a = (size_t)(r0 + 2 * h < nr ? r0 + 2 * h : r0) * ns,
                       b = (size_t)(r0 + 2 * h + 1 < nr ? r0 + 2 * h + 1 : r0) * ns;
                Qb[h][g] = _mm256_set_m128(_mm_set1_ps(Q[b]), _mm_set1_ps(Q[a]));
            }
        for (int j = 0; j < n; j += KB) {
            int key[8];
            for (int k = 0; k < KB; k++) /* keys past the last: key j, dropped */
                key[k] = j + k < n ? j + k : j;
            __m256 d[NP][2];
            block_sums(d, qi, W, key, NS, KB);
            for (int k = 0; k < KB && j + k < n; k += 4) {
                int nkey = n - j - k < 4 ? n - j - k : 4;
                __mmask8 m = (__mmask8)((1u << nkey) - 1);
                __m256 bk[HR_KVWIDE_MAX / 4];
                for (int g = 0; bias && g < ns; g++) { /* lane 4 * row + k: b of key k */
                    const float *b = W->b + (size_t)g * n;
                    __m128 b4 = nkey == 4 ? _mm_loadu_ps(b + j + k)
                                          : _mm_setr_ps(b[key[k]], b[key[k + 1]], b[key[k + 2]],
                                                        b[key[k + 3]]);
                    bk[g] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(b4), kidx);
                }
                for (int h = 0; h < NP && 2 * h < nrow; h++) {
                    __m256 e = d[h][k / 4];
                    for (int g = 0; bias && g < ns; g++)
                        e = _mm256_fmadd_ps(bk[g], Qb[h][g], e);
                    e = _mm256_mul_ps(e, _mm256_set1_ps(scale));
                    float *row = sc + (size_t)(r0 + 2 * h) * ldsc + j + k;
                    _mm_mask_storeu_ps(row, m, _mm256_castps256_ps128(e));
                    if (2 * h + 1 < nrow)
                        _mm_mask_storeu_ps(row + ldsc, m, _mm256_extractf128_ps(e, 1));
                }
            }
        }
    }
}

/* ---- the score pass: keys in the lanes (dots_lanes) ------------------------------ */

/* The run's records with the keys in the lanes: kt[P * nt + j] = v_j[P],
 * nt = n rounded up to 16 (the keys past n: 0) */
AI void keys_in_lanes(float *kt, int nt, const hr__kvwide *W) {
    for (int j = 0; j < nt; j += 16)
        for (int P = 0; P < W->hd; P += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = j + i < W->n ? _mm512_loadu_ps(W->v + (size_t)(j + i) * W->ld + P)
                                    : _mm512_setzero_ps();
            hr_transpose16_avx512(r);
            for (int d = 0; d < 16; d++)
                _mm512_store_ps(kt + (size_t)(P + d) * nt + j, r[d]);
        }
}

/* The scores of R rows (q: chain order, hd apart; qsum: their group sums,
 * ns apart) over the 16 keys at column j of kt (m: those before n), each
 * lane a key: the reference's 8 chains A_g[l] and T[l] one register each,
 * hsum8's additions register by register, then the bias terms and the
 * scale, a row's 16 scores one store. NS: W->ns (1, 2 or 4). */
AI void keys16(float *sc, size_t ldsc, const float *q, const float *qsum, const float *kt,
               int nt, int j, __mmask16 m, const hr__kvwide *W, __m512 scale, bool bias,
               const int R, const int NS) {
    const int ns = NS;
    int hd = W->hd, cps = hd / ns / 8, n = W->n;
    _Alignas(64) float T[RMAX][8][16]; /* the groups' sums T before the last group's */
    __m512 A[RMAX][8];
    _Pragma("GCC unroll 4") /* (rolled, gcc kept A in memory across the groups) */
    for (int g = 0; g < ns; g++) {
        for (int r = 0; r < R; r++)
            for (int l = 0; l < 8; l++)
                A[r][l] = _mm512_setzero_ps();
        for (int c = g * cps; c < (g + 1) * cps; c++)
            for (int l = 0; l < 8; l++) {
                __m512 k = _mm512_load_ps(kt + (size_t)(8 * c + l) * nt + j);
                __asm__("" : "+v"(k)); /* one load for the R rows (gcc folds it into each) */
                for (int r = 0; r < R; r++)
                    A[r][l] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)r * hd + 8 * c + l]), k,
                                              A[r][l]);
            }
        __m512 s = _mm512_maskz_loadu_ps(m, W->s + (size_t)g * n + j);
        for (int r = 0; r < R; r++) /* T = fma(s_g, A_g, T): in A after the last group */
            for (int l = 0; l < 8; l++) {
                __m512 t0 = g ? _mm512_load_ps(T[r][l]) : _mm512_setzero_ps(),
                       t = _mm512_fmadd_ps(s, A[r][l], t0);
                if (g + 1 < ns)
                    _mm512_store_ps(T[r][l], t);
                else
                    A[r][l] = t;
            }
    }
    for (int r = 0; r < R; r++) {
        __m512 u[4];
        for (int l = 0; l < 4; l++)
            u[l] = _mm512_add_ps(A[r][l], A[r][l + 4]);
        __m512 d = _mm512_add_ps(_mm512_add_ps(u[0], u[2]), _mm512_add_ps(u[1], u[3]));
        for (int g = 0; bias && g < ns; g++)
            d = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, W->b + (size_t)g * n + j),
                                _mm512_set1_ps(qsum[(size_t)r * ns + g]), d);
        _mm512_mask_storeu_ps(sc + (size_t)r * ldsc + j, m, _mm512_mul_ps(d, scale));
    }
}

AI void dots_lanes(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                  const hr__kvwide *W, float scale, const int NS, bool bias) {
    const int R = RMAX;
    int nt = (W->n + 15) / 16 * 16, ns = W->ns;
    _Alignas(64) float kt[KT_FLOATS];
    keys_in_lanes(kt, nt, W);
    __m512 sv = _mm512_set1_ps(scale);
    for (int r0 = 0; r0 < nr; r0 += R) {
        const float *qr = q + (size_t)r0 * W->hd, *Q = bias ? qsum + (size_t)r0 * ns : NULL;
        float *s = sc + (size_t)r0 * ldsc;
        for (int j = 0; j < nt; j += 16) {
            __mmask16 m = W->n - j >= 16 ? 0xffff : (__mmask16)((1u << (W->n - j)) - 1);
            switch (nr - r0 < R ? nr - r0 : R) { /* rows a block, constant in each body */
            case 1: keys16(s, ldsc, qr, Q, kt, nt, j, m, W, sv, bias, 1, NS); break;
            case 2: keys16(s, ldsc, qr, Q, kt, nt, j, m, W, sv, bias, 2, NS); break;
            default: keys16(s, ldsc, qr, Q, kt, nt, j, m, W, sv, bias, R, NS); break;
            }
        }
    }
}

static void dots(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                 const hr__kvwide *W, float scale) {
    bool bias = W->b != NULL;
    if (nr >= LANES_ROWS) /* with a group count as a constant (others: slower than pairs) */
        switch (W->ns) {
        case 1: dots_lanes(sc, ldsc, q, qsum, nr, W, scale, 1, bias); return;
        case 2: dots_lanes(sc, ldsc, q, qsum, nr, W, scale, 2, bias); return;
        case 4: dots_lanes(sc, ldsc, q, qsum, nr, W, scale, 4, bias); return;
        default: break;
        }
    switch (W->ns) { /* the common group counts as constants */
    case 1: dots_pairs(sc, ldsc, q, qsum, nr, W, scale, 1, bias); break;
    case 2: dots_pairs(sc, ldsc, q, qsum, nr, W, scale, 2, bias); break;
    default: dots_pairs(sc, ldsc, q, qsum, nr, W, scale, 0, bias); break;
    }
}

void hr__kvwide_pass_avx512(const hr__kvwide_job *J, int j0, const hr__kvwide *W) {
    if (J->sc)
        dots(J->sc + j0, J->ldsc, J->q, J->qsum, J->nr, W, J->scale);
    else
        axpys(J->o, J->bias, J->p + j0, J->ldp, J->nr, W);
}
