/* AVX-512 VNNI kernels for weights in the x16 layout (x16.h), computing
 * qdot.h's x16 definition bit for bit. A 64-byte chunk of a panel holds 4
 * consecutive columns of its 16 rows, so
 *   acc_a = dpbusd(acc_a, chunk, 4 bytes of activation row a broadcast)
 * advances the 16 outputs of row a at once; acc_a starts at the group's c
 * (the weight offset term) and after the group
 *   y_a = fma(cvt(acc_a), sw * d_a, y_a)    [y_a = fma(mn, s_a, y_a)]
 * with sw, mn 16-lane vectors of the panel's scales. Nibbles are split with
 * a shift and a mask; the fifth bits (Q5_K) are spread over the lane's
 * bytes through a 16-entry vpermd table, and Q6_K's top two bits, stored
 * beside their bytes, join them by a shift and a vpternlogd. With 24-bit
 * activations (DIG = 3 digit planes) every chunk runs one vpdpbusd per
 * digit into its own accumulator, and the group's value is
 * fma(hi, 2^16, 2^8 mid + lo) before the same scale step (MLX affine
 * only; the GGUF formats are compiled for int8 alone). MLX affine units
 * (4 or 8 bits, a group of 32-128 columns) run Q4_1's or Q8_0's chunks per
 * 32-block with the group's scale and bias.
 *
 * Tiles: MR activation rows x 2 panels (32 outputs), one panel after the
 * other over the slice (only one panel's accumulators are busy at a time:
 * with both, the K-quants spilled registers); the k range in slices whose 2
 * panels fit in L1 (32 KiB), the activation rows in blocks that fit in L2;
 * y carries the sum from slice to slice, so the order of the terms, and the
 * bits, do not depend on the tiling. */
#include "core/error.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/x16.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define MR 4                     /* activation rows per tile */
#define L1_BYTES (32 << 10)      /* 2 panels of a k slice */
#define IBLOCK_BYTES (384 << 10) /* activation rows per block (L2) */
#ifndef PF_BYTES
#define PF_BYTES 8192            /* prefetch distance in a panel, into L2 */
#endif
#define L1_BYTES_AHEAD 2048      /* and from L2 into L1 */

typedef struct arow {
    const int8_t *q[3]; /* digit planes (qdot.h): q[0] alone for int8 */
    const float *d, *s;
    const int8_t *sd; /* the K-quants' block sums (qdot.h) */
    const int32_t *c[3];
} arow;

/* acc + w . the 4 activation bytes at q, broadcast: vpdpbusd with an
 * m32bcst operand, one fused uop (gcc 12 loads the broadcast apart: two) */
typedef int32_t i32u __attribute__((may_alias, aligned(1)));
AI __m512i dpb(__m512i acc, __m512i w, const int8_t *q) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const i32u *)q));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*(const i32u *)q));
#endif
}

/* 64 weight bytes that several ops read, loaded once: gcc folds the load
 * into each op instead, which doubled the loads (Q4_0's decode matvec from
 * L2: 41 GB/s, 51 with this, 59.5 with its units in pairs, x16.h) */
AI __m512i ld64(const uint8_t *p) {
    __m512i v;
    __asm__("vmovdqu64 %1, %0" : "=v"(v) : "m"(*(const __m512i *)p));
    return v;
}

AI __m512 f16x16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* 16 bytes zero-extended to int32 lanes (the K-quants' integer scales) */
AI __m512i u8x16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

AI __m512i lo4(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0xF)); }
AI __m512i hi4(__m512i v) { return lo4(_mm512_srli_epi16(v, 4)); }
/* 16 times the high nibbles, where they lie: dotted on a chain of their own,
 * which an arithmetic shift by 4 brings back exactly (one op, not hi4's two) */
AI __m512i hi4x16(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8((char)0xF0)); }

/* A group's integer dots for one activation row: one per digit plane. */
typedef struct iacc {
    __m512i v[3];
} iacc;

/* acc_a = c of group g, for a < I */
AI void acc_init(iacc *acc, const arow *A, int I, int g, int DIG) {
    UNROLL
    for (int a = 0; a < I; a++)
        UNROLL
        for (int j = 0; j < DIG; j++)
            acc[a].v[j] = _mm512_set1_epi32(A[a].c[j][g]);
}

/* acc_a += chunk w . the 4 activation bytes at column e, every digit (e a
 * size_t: as an int gcc rebuilt each chunk's address from a spilled
 * register; the K-quants' decode matvecs run 5-7% faster from L2) */
AI void acc_dot(iacc *acc, __m512i w, const arow *A, int I, size_t e, int DIG) {
    UNROLL
    for (int a = 0; a < I; a++)
        UNROLL
        for (int j = 0; j < DIG; j++)
            acc[a].v[j] = dpb(acc[a].v[j], w, A[a].q[j] + e);
}

/* the group's dot as a float: fma(hi, 2^16, 2^8 mid + lo) for 3 digits */
AI __m512 acc_value(iacc acc, int DIG) {
    if (DIG == 1)
        return _mm512_cvtepi32_ps(acc.v[0]);
    __m512i t = _mm512_add_epi32(_mm512_slli_epi32(acc.v[1], 8), acc.v[2]);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc.v[0]), _mm512_set1_ps(65536.0f),
                           _mm512_cvtepi32_ps(t));
}

/* y_a = fma(value(acc_a), sw * d_a, y_a) for a < I */
AI void scale_add(__m512 *y, const iacc *acc, __m512 sw, const arow *A, int I, int b, int DIG) {
    UNROLL
    for (int a = 0; a < I; a++)
        y[a] = _mm512_fmadd_ps(acc_value(acc[a], DIG),
                               _mm512_mul_ps(sw, _mm512_set1_ps(A[a].d[b])), y[a]);
}

AI void min_add(__m512 *y, __m512 mn, const arow *A, int I, int b) {
    UNROLL
    for (int a = 0; a < I; a++)
        y[a] = _mm512_fmadd_ps(mn, _mm512_set1_ps(A[a].s[b]), y[a]);
}

/* One activation row with int8 (decode): a block's odd chunks go on a
 * chain of their own, added after (exact in int32), so that no chain is 8
 * dependent vpdpbusd long (5 cycles each). A decode token's time, A/B in
 * one process with the tokens alternating: Q4_K 1.1-3.4% less (Llama-3.2-1B
 * and Qwen3-0.6B shapes), Q8_0 0-1%; from L2 a Q4_K matvec read 46 -> 50
 * GB/s. More rows, or 3 digits, have enough chains already. */
AI bool split_chains(int I, int DIG) { return I == 1 && DIG == 1; }

/* the odd chain back into the row's accumulator, when split */
AI void join_odd(iacc *acc, iacc odd, bool split) {
    if (split)
        acc[0].v[0] = _mm512_add_epi32(acc[0].v[0], odd.v[0]);
}

/* acc += the 32-column block at Q against activation block b: 8 byte
 * chunks (Q8_0, 8-bit affine) */
AI void dot_bytes(iacc *acc, const uint8_t *Q, const arow *A, int I, int b, int DIG) {
    bool split = split_chains(I, DIG);
    iacc odd = {{_mm512_setzero_si512()}};
    UNROLL
    for (int c = 0; c < 8; c++)
        acc_dot(split && c % 2 ? &odd : acc, _mm512_loadu_si512(Q + 64 * c), A, I,
                (size_t)32 * b + 4 * c, DIG);
    join_odd(acc, odd, split);
}

/* the same for 4 nibble chunks (Q4_0, Q4_1, 4-bit affine): low nibbles
 * columns 4c+t, high ones 16+4c+t. With int8 activations the high nibbles
 * go on chains of their own (hi4x16); with 24-bit ones, whose rows already
 * take three accumulators each, that was slower (MLX 4-bit decode). */
AI void dot_nibbles(iacc *acc, const uint8_t *Q, const arow *A, int I, int b, int DIG) {
    bool in_place = DIG == 1;
    iacc hi[MR];
    if (in_place)
        UNROLL
        for (int a = 0; a < I; a++)
            hi[a].v[0] = _mm512_setzero_si512();
    UNROLL
    for (int c = 0; c < 4; c++) {
        __m512i v = ld64(Q + 64 * c);
        size_t e = (size_t)32 * b + 4 * c;
        acc_dot(acc, lo4(v), A, I, e, DIG);
        if (in_place)
            acc_dot(hi, hi4x16(v), A, I, e + 16, 1);
        else
            acc_dot(acc, hi4(v), A, I, e + 16, DIG);
    }
    if (in_place)
        UNROLL
        for (int a = 0; a < I; a++)
            acc[a].v[0] = _mm512_add_epi32(acc[a].v[0], _mm512_srai_epi32(hi[a].v[0], 4));
}

/* ---- one unit of one panel, for I activation rows; u: the unit index ---- */

/* Each unit (at u; NULL: no prefetch; ub: its bytes, hr_x16_unit_bytes)
 * prefetches into L2 the unit PF_BYTES on, part by part spread
 * over its work: a burst of all 37 lines of a Q4_K unit at its start
 * stalled the loop on the L1 fill buffers: Q4_K matvecs on one thread read
 * 76% of a plain read, now 83-90% (bench_kernels). The same lines
 * L1_BYTES_AHEAD on go from L2 into L1 (T0), by then mostly in L2 (the
 * distances were retimed at 4df3436: below, at GEMM_X16): decode
 * tokens took 1-3.6% less time (one process, the switch flipped every
 * token, medians of 64 tokens a side: Qwen3-0.6B Q4_0 2.6% at 1 KiB, 2% at
 * 512 B, 1% at 256 B, 2.3% at 2 KiB; at 1 KiB Q4_K 2.2-2.8%, Q8_0
 * 0.7-3.2%, MLX 4-bit 0.8-1.7%, Llama-3.2-1B Q4_0 1.0-3.6%). Into L1 only,
 * from memory (T0 at 2 KiB), the prefetches held the fill buffers and the
 * matvecs read slower. */
typedef struct upf {
    const uint8_t *u;
    size_t ub;
} upf;

/* the n lines from byte off of the unit (n a constant where the caller's
 * is: the loop unrolls) */
AI void pf_lines(upf pf, size_t off, int n) {
    if (pf.u)
        UNROLL
        for (int l = 0; l < n; l++) {
            _mm_prefetch((const char *)pf.u + PF_BYTES + off + 64 * l, _MM_HINT_T1);
            _mm_prefetch((const char *)pf.u + L1_BYTES_AHEAD + off + 64 * l, _MM_HINT_T0);
        }
}

/* part `part` of `parts` of the unit's lines */
AI void pf_part(upf pf, int part, int parts) {
    size_t lo = pf.ub * part / parts, hi = pf.ub * (part + 1) / parts;
    pf_lines(pf, lo, (int)((hi - lo + 63) / 64));
}

/* Q8_0 and Q4_0: their units in pairs (x16.h) */
AI void unit_q8_0(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    pf_part(pf, 0, 1);
    iacc acc[MR];
    acc_init(acc, A, I, u, DIG);
    dot_bytes(acc, U + hr_x16_q_at(u), A, I, u, DIG);
    scale_add(y, acc, f16x16(U + hr_x16_d_at(u, 512)), A, I, u, DIG);
}

/* Q4_0 and Q4_1 (MIN): nibble chunks at Q, d at D, Q4_1's m after d */
AI void unit_q4(const uint8_t *Q, const uint8_t *D, const arow *A, int I, int u, __m512 *y,
                int MIN, int DIG, upf pf) {
    pf_part(pf, 0, 1);
    iacc acc[MR];
    acc_init(acc, A, I, u, DIG);
    dot_nibbles(acc, Q, A, I, u, DIG);
    scale_add(y, acc, f16x16(D), A, I, u, DIG);
    if (MIN)
        min_add(y, f16x16(D + 32), A, I, u);
}

AI void unit_q4_0(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    unit_q4(U + hr_x16_q_at(u), U + hr_x16_d_at(u, 256), A, I, u, y, 0, DIG, pf);
}
AI void unit_q4_1(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    unit_q4(U + 64, U, A, I, u, y, 1, DIG, pf);
}

/* MLX affine, BITS 4 or 8, NB 32-column blocks per group (the unit): the
 * group's s and b (f16) serve every block, each block scaled by its own
 * activation d as Q4_1's. Each block prefetches its own lines (the first
 * block the unit's scales too), and the block loop is unrolled: rolled,
 * with pf_part's share of the unit, the prefetch loop ran on bounds
 * computed at run time from registers gcc had spilled, and took a quarter
 * of a 24-bit decode matvec's time (bench_kernels matvec a4g64 1024 1024 1
 * from L2: 25.6 -> 18.9 us, a8g64 27.0 -> 20.2 us; groups of 32, one block
 * a unit, were not affected). pf_part unrolled gave the same speed and
 * took this file 40% longer to compile; the block loop rolled with
 * pf_lines, 15% slower. */
AI void unit_affine(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int BITS, int NB,
                    int DIG, upf pf) {
    __m512 sw = f16x16(U), mn = f16x16(U + 32);
    const int bb = BITS == 4 ? 256 : 512;
    UNROLL
    for (int e = 0; e < NB; e++) {
        if (e == 0)
            pf_lines(pf, 0, 1);
        pf_lines(pf, 64 + (size_t)bb * e, bb / 64);
        int b = NB * u + e;
        const uint8_t *Q = U + 64 + bb * e;
        iacc acc[MR];
        acc_init(acc, A, I, b, DIG);
        if (BITS == 4)
            dot_nibbles(acc, Q, A, I, b, DIG);
        else
            dot_bytes(acc, Q, A, I, b, DIG);
        scale_add(y, acc, sw, A, I, b, DIG);
        min_add(y, mn, A, I, b);
    }
}

#define AFFINE_UNIT(BITS, NB)                                                               \
    AI void unit_a##BITS##_##NB(const uint8_t *U, const arow *A, int I, int u, __m512 *y,   \
                                int DIG, upf pf) {                                          \
        unit_affine(U, A, I, u, y, BITS, NB, DIG, pf);                                      \
    }
AFFINE_UNIT(4, 1)
AFFINE_UNIT(4, 2)
AFFINE_UNIT(4, 4)
AFFINE_UNIT(8, 1)
AFFINE_UNIT(8, 2)
AFFINE_UNIT(8, 4)

/* x16.h's byte offsets */
enum { K_D = 0, K_DMIN = 32, K_SC = 64, K_MN = 192, K_NIB = 320, K_HB = 2368 };
enum { S_D = 0, S_SC = 32, S_NIB = 288, S_HB = 2336 };

/* bit t of the index -> bit 4 of byte t */
AI __m512i bits5(__m512i idx) {
    const __m512i T = _mm512_setr_epi32(
        0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000,
        0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010,
        0x10101000, 0x10101010);
    return _mm512_permutexvar_epi32(idx, T);
}

/* lo | (h & 0x30): a nibble with its top 2 bits (vpternlogd A | B & C) */
AI __m512i top2(__m512i lo, __m512i h) {
    return _mm512_ternarylogic_epi32(lo, h, _mm512_set1_epi8(0x30), 0xF8);
}

/* y_a += int32 sums I_a scaled as qdot.h's K-quant step: fma(cvt(I_a), sw * d_a) */
AI void kscale_add(__m512 *y, const __m512i *Isum, __m512 sw, const arow *A, int I, int u) {
    UNROLL
    for (int a = 0; a < I; a++)
        y[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Isum[a]),
                               _mm512_mul_ps(sw, _mm512_set1_ps(A[a].d[u])), y[a]);
}

/* sum_a += acc_a * sc (int32 lanes) for a < I */
AI void kscale_int(__m512i *sum, const iacc *acc, __m512i sc, int I) {
    UNROLL
    for (int a = 0; a < I; a++)
        sum[a] = _mm512_add_epi32(sum[a], _mm512_mullo_epi32(acc[a].v[0], sc));
}

/* Q4_K / Q5_K (FIVE), with the K-quants' int8 activations (qdot.h): 8
 * blocks of 32, block-pair by block-pair, each block's integer dot times
 * its 6-bit scale into the super-block's int32 sum (Q4_K's high-nibble
 * blocks, 16 times their dot, on a sum of their own, shifted back once);
 * the mins' term from the activation block sums' two digits, 4 vpdpbusd a
 * super-block (x16.h's mn layout); two float steps a super-block. Their c
 * are 0 (off 0): the chains start at 0. */
AI void unit_k45(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int FIVE, upf pf) {
    bool in_place = !FIVE, split = split_chains(I, 1);
    __m512i Is[MR], Ih[MR];
    UNROLL
    for (int a = 0; a < I; a++)
        Is[a] = Ih[a] = _mm512_setzero_si512();
    UNROLL
    for (int s = 0; s < 4; s++) {
        pf_part(pf, s, 4);
        int b0 = 8 * u + 2 * s;
        /* odd chunks on odd0, odd1 when split */
        iacc acc0[MR], acc1[MR], odd0 = {{_mm512_setzero_si512()}},
                                 odd1 = {{_mm512_setzero_si512()}};
        UNROLL
        for (int a = 0; a < I; a++)
            acc0[a].v[0] = acc1[a].v[0] = _mm512_setzero_si512();
        UNROLL
        for (int c = 0; c < 8; c++) {
            __m512i v = ld64(U + K_NIB + 64 * (8 * s + c)), l = lo4(v);
            __m512i h = in_place ? hi4x16(v) : hi4(v);
            if (FIVE) {
                __m512i hb = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128((const __m128i *)(U + K_HB + 16 * (8 * s + c))));
                l = _mm512_or_si512(l, bits5(hb));
                h = _mm512_or_si512(h, bits5(_mm512_srli_epi32(hb, 4)));
            }
            bool o = split && c % 2;
            acc_dot(o ? &odd0 : acc0, l, A, I, (size_t)32 * b0 + 4 * c, 1);
            acc_dot(o ? &odd1 : acc1, h, A, I, (size_t)32 * b0 + 32 + 4 * c, 1);
        }
        join_odd(acc0, odd0, split);
        join_odd(acc1, odd1, split);
        kscale_int(Is, acc0, u8x16(U + K_SC + 16 * (2 * s)), I);
        kscale_int(in_place ? Ih : Is, acc1, u8x16(U + K_SC + 16 * (2 * s + 1)), I);
    }
    __m512i m0 = ld64(U + K_MN), m1 = ld64(U + K_MN + 64);
    __m512i M[MR];
    UNROLL
    for (int a = 0; a < I; a++) {
        if (in_place)
            Is[a] = _mm512_add_epi32(Is[a], _mm512_srai_epi32(Ih[a], 4));
        const int8_t *sd = A[a].sd + 16 * u; /* hi digits of the 8 sums, then lo */
        M[a] = dpb(dpb(_mm512_setzero_si512(), m0, sd), m1, sd + 4);
        M[a] = dpb(dpb(_mm512_slli_epi32(M[a], 8), m0, sd + 8), m1, sd + 12);
    }
    kscale_add(y, Is, f16x16(U + K_D), A, I, u);
    kscale_add(y, M, _mm512_sub_ps(_mm512_setzero_ps(), f16x16(U + K_DMIN)), A, I, u);
}

AI void unit_q4_k(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    (void)DIG; /* int8 only */
    unit_k45(U, A, I, u, y, 0, pf);
}
AI void unit_q5_k(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    (void)DIG;
    unit_k45(U, A, I, u, y, 1, pf);
}

/* Q6_K: groups of 16 (c and an int8 scale per group), so four accumulators
 * per pair, each times its scale into the super-block's int32 sum */
AI void unit_q6_k(const uint8_t *U, const arow *A, int I, int u, __m512 *y, int DIG, upf pf) {
    (void)DIG;
    __m512i Is[MR];
    UNROLL
    for (int a = 0; a < I; a++)
        Is[a] = _mm512_setzero_si512();
    UNROLL
    for (int s = 0; s < 4; s++) {
        pf_part(pf, s, 4);
        int b0 = 8 * u + 2 * s;
        iacc acc[4][MR]; /* block b0 halves 0, 1; block b0 + 1 halves 0, 1 */
        UNROLL
        for (int g = 0; g < 4; g++)
            acc_init(acc[g], A, I, 2 * b0 + g, 1);
        UNROLL
        for (int c = 0; c < 8; c += 2) {
            /* chunks c and c + 1 and their top bits (x16.h), put in place by
             * 16-bit shifts: every byte is masked after, so the bits a shift
             * carries across bytes do not matter */
            __m512i v0 = ld64(U + S_NIB + 64 * (8 * s + c));
            __m512i v1 = ld64(U + S_NIB + 64 * (8 * s + c + 1));
            __m512i hb = ld64(U + S_HB + 64 * (4 * s + c / 2));
            int half = c / 4;
            acc_dot(acc[half], top2(lo4(v0), _mm512_slli_epi16(hb, 4)), A, I,
                    (size_t)32 * b0 + 4 * c, 1);
            acc_dot(acc[2 + half], top2(hi4(v0), _mm512_slli_epi16(hb, 2)), A, I,
                    (size_t)32 * b0 + 32 + 4 * c, 1);
            acc_dot(acc[half], top2(lo4(v1), hb), A, I, (size_t)32 * b0 + 4 * (c + 1), 1);
            acc_dot(acc[2 + half], top2(hi4(v1), _mm512_srli_epi16(hb, 2)), A, I,
                    (size_t)32 * b0 + 32 + 4 * (c + 1), 1);
        }
        UNROLL
        for (int g = 0; g < 4; g++)
            kscale_int(Is, acc[g],
                       _mm512_cvtepi8_epi32(
                           _mm_loadu_si128((const __m128i *)(U + S_SC + 16 * (4 * s + g)))),
                       I);
    }
    kscale_add(y, Is, f16x16(U + S_D), A, I, u);
}

/* ---- tiles and blocking ---------------------------------------------------------- */

/* y[i0..i0+I) x panels [p0, p0+P) over units [u0, u1); u0 == 0: y starts
 * at 0. PF: the first tile over these weights, which come from memory: its
 * units prefetch PF_BYTES ahead in each panel (pf_part; the hardware prefetcher alone
 * leaves the 4-bit formats' decode short of the memory bandwidth). Into L2
 * (T1): 4 KiB ahead, the decode matvecs of Qwen3-0.6B Q4_0 read 24.4 GB/s
 * against 22.4 for T0 at 2 KiB (Q4_K 23.4 vs 22.0; prefill unchanged).
 * 8 KiB ahead took 0.1-8.1% less time a decode token than 4 KiB at
 * 4df3436 (one process, the distance switched every token, medians of 64
 * tokens a side, both parities: Llama-3.2-1B Q4_K 3.7-8.1%, Q4_0
 * 5.0-5.6%, Qwen3 Q4_0 2.2-5.9%, MLX 4-bit 3.8-4.1%, MLX 8-bit 2.4-2.6%,
 * Q8_0 0.1-1.9%); 16 KiB the same as 8. Then L1_BYTES_AHEAD 2 KiB
 * against 1: up to 2.3% less time (22 runs over 6 models; two more, by
 * 0.7% and 0.05%). */
/* DIGS: the most activation digits the format takes (3: MLX affine; the
 * GGUF formats only run int8, which keeps this file's compile time down) */
#define GEMM_X16(LINKAGE, NAME, UNIT, UB, DIGS)                                      \
    AI void NAME##_tile(float *y, int ldy, const hr_qact32 *x, int i0, int I,       \
                        const uint8_t *w, size_t pb, int p0, int P, int u0, int u1,  \
                        size_t ub, int PF, int DIG) {                               \
        int k = x->k, ng = k / x->group;                                            \
        arow A[MR];                                                                 \
        UNROLL                                                                      \
        for (int a = 0; a < I; a++) {                                               \
            size_t i = (size_t)(i0 + a);                                            \
            A[a] = (arow){.d = x->d + i * (k / x->block),                          \
                          .s = x->s ? x->s + i * (k / 32) : NULL,                   \
                          .sd = x->sd ? x->sd + i * (k / 16) : NULL};               \
            UNROLL                                                                  \
            for (int j = 0; j < DIG; j++) {                                         \
                A[a].q[j] = x->q + (i * DIG + j) * k;                               \
                A[a].c[j] = x->c + (i * DIG + j) * ng;                              \
            }                                                                       \
        }                                                                           \
        __m512 acc[2][MR];                                                          \
        UNROLL                                                                      \
        for (int p = 0; p < P; p++)                                                 \
            UNROLL                                                                  \
            for (int a = 0; a < I; a++)                                             \
                acc[p][a] = u0 ? _mm512_loadu_ps(y + (size_t)(i0 + a) * ldy + 16 * (p0 + p)) \
                               : _mm512_setzero_ps();                               \
        UNROLL                                                                      \
        for (int p = 0; p < P; p++)                                                 \
            for (int u = u0; u < u1; u++) {                                         \
                const uint8_t *U = w + (size_t)(p0 + p) * pb + (size_t)u * ub;      \
                UNIT(U, A, I, u, acc[p], DIG, (upf){PF ? U : NULL, ub});            \
            }                                                                       \
        UNROLL                                                                      \
        for (int p = 0; p < P; p++)                                                 \
            UNROLL                                                                  \
            for (int a = 0; a < I; a++)                                             \
                _mm512_storeu_ps(y + (size_t)(i0 + a) * ldy + 16 * (p0 + p), acc[p][a]); \
    }                                                                               \
    AI void NAME##_run(float *y, int ldy, const hr_qact32 *x, int n, const hr_tensor *w, \
                       int m0, int m1, int DIG) {                                   \
        const uint8_t *wd = w->data;                                                \
        int uc = hr_x16_unit_cols(w), nu = x->k / uc;                               \
        size_t ub = UB, pb = (size_t)nu * ub; /* a constant: pf_part unrolls */    \
        HR_ASSERT(ub == hr_x16_unit_bytes(w)); /* the one definition, x16.c */      \
        HR_ASSERT((uc == 256) == (x->block == 256)); /* K-quants: their activations */ \
        /* k slices that keep 2 panels in L1 for the row tiles after the first; \
         * rows that make one tile (decode) read the panels straight through */ \
        int ks = n == 1 || n == MR ? nu : (int)(L1_BYTES / (2 * ub));               \
        ks = ks < 1 ? 1 : ks;                                                       \
        int ib = IBLOCK_BYTES / (2 * x->k * DIG) / MR * MR;                         \
        ib = ib < MR ? MR : ib;                                                     \
        int pe = m1 / 16;                                                           \
        /* the tiles prefetch PF_BYTES ahead: the start of the range too */         \
        for (size_t o = 0; o < PF_BYTES && o < (size_t)(pe - m0 / 16) * pb; o += 64) \
            _mm_prefetch((const char *)wd + (size_t)(m0 / 16) * pb + o, _MM_HINT_T1); \
        for (int i0 = 0; i0 < n; i0 += ib) {                                        \
            int i1 = n - i0 < ib ? n : i0 + ib;                                     \
            for (int p = m0 / 16; p < pe; p += 2) {                                 \
                int P = pe - p < 2 ? 1 : 2;                                         \
                for (int u0 = 0; u0 < nu; u0 += ks) {                               \
                    int u1 = nu - u0 < ks ? nu : u0 + ks, i = i0;                   \
                    for (; i + MR <= i1; i += MR)                                   \
                        if (P == 2)                                                 \
                            NAME##_tile(y, ldy, x, i, MR, wd, pb, p, 2, u0, u1, ub, i == i0, \
                                        DIG);                                       \
                        else                                                        \
                            NAME##_tile(y, ldy, x, i, MR, wd, pb, p, 1, u0, u1, ub, i == i0, \
                                        DIG);                                       \
                    for (; i < i1; i++)                                             \
                        if (P == 2)                                                 \
                            NAME##_tile(y, ldy, x, i, 1, wd, pb, p, 2, u0, u1, ub, i == i0, \
                                        DIG);                                       \
                        else                                                        \
                            NAME##_tile(y, ldy, x, i, 1, wd, pb, p, 1, u0, u1, ub, i == i0, \
                                        DIG);                                       \
                }                                                                   \
            }                                                                       \
        }                                                                           \
    }                                                                               \
    LINKAGE void NAME(float *y, int ldy, const hr_qact32 *x, int n, const hr_tensor *w, \
                      int m0, int m1) {                                             \
        if (DIGS == 3 && x->digits == 3)                                            \
            NAME##_run(y, ldy, x, n, w, m0, m1, 3);                                 \
        else                                                                        \
            NAME##_run(y, ldy, x, n, w, m0, m1, 1);                                 \
    }

GEMM_X16(, hr__gemm_x16_q8_0_avx512, unit_q8_0, 32 + 512, 1)
GEMM_X16(, hr__gemm_x16_q4_0_avx512, unit_q4_0, 32 + 256, 1)
GEMM_X16(, hr__gemm_x16_q4_1_avx512, unit_q4_1, 64 + 256, 1)
GEMM_X16(, hr__gemm_x16_q4_k_avx512, unit_q4_k, K_HB, 1)
GEMM_X16(, hr__gemm_x16_q5_k_avx512, unit_q5_k, K_HB + 512, 1)
GEMM_X16(, hr__gemm_x16_q6_k_avx512, unit_q6_k, S_HB + 1024, 1)
GEMM_X16(static, x16_a4_g32, unit_a4_1, 64 + 256, 3)
GEMM_X16(static, x16_a4_g64, unit_a4_2, 64 + 2 * 256, 3)
GEMM_X16(static, x16_a4_g128, unit_a4_4, 64 + 4 * 256, 3)
GEMM_X16(static, x16_a8_g32, unit_a8_1, 64 + 512, 3)
GEMM_X16(static, x16_a8_g64, unit_a8_2, 64 + 2 * 512, 3)
GEMM_X16(static, x16_a8_g128, unit_a8_4, 64 + 4 * 512, 3)

/* MLX affine (hr_x16_supports: 4 or 8 bits, groups 32, 64, 128) */
void hr__gemm_x16_affine_avx512(float *y, int ldy, const hr_qact32 *x, int n,
                                const hr_tensor *w, int m0, int m1) {
    static const hr_gemm_x16_fn fn[2][3] = {{x16_a4_g32, x16_a4_g64, x16_a4_g128},
                                            {x16_a8_g32, x16_a8_g64, x16_a8_g128}};
    int g = w->q.group == 32 ? 0 : w->q.group == 64 ? 1 : 2;
    fn[w->q.bits == 8][g](y, ldy, x, n, w, m0, m1);
}
