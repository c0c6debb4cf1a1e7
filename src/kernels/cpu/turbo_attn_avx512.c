/* turbo_dots and turbo_axpys (turbo_attn.c defines them) with AVX-512: the
 * AVX2 bodies' lanes (turbo_attn_avx2.c), two of them in one register, so
 * that a 4-bit codebook is one permute (the 16 centroids in one register;
 * AVX2 needs two and a blend) and every widening, permute and FMA serves
 * two chunks of 8 codes:
 *   dots:  lanes 0-7 key j's chunk, lanes 8-15 key j + 1's (the same query
 *          chunk in both halves), each half the reference's 8 fma chains of
 *          its key; four keys a pass (two registers a row), reduced by
 *          hsum8's additions all four at once (two rows at a time), their
 *          scores one store; a body per head_dim 64 and 128 (shape);
 *   axpys: chunks ch and ch + 1 of one key interleaved (pair_load: one
 *          load at 2 and 4 bits), each lane the reference's chain over the
 *          keys; two such pairs a part (32 outputs in 2 M registers), two
 *          parts a key up to 4 rows, so that 4 M chains hide the FMA's
 *          latency; a run's weights from a gather of its records' scales.
 * Every lane runs the reference's operations in its order, so the bits are
 * the scalar's (test_turbo_kv test_attn_isas). The odd key at a run's end
 * goes through the AVX2 body (the same bits). A dots chunk's codes are one
 * 4-byte load broadcast from memory; where 4 bytes from the chunk would
 * run past the record (its last chunk at 2 or 3 bits), the 4 bytes that
 * end with the chunk's, shifted down (chunk_at).
 * From WIDE rows (a prefill tile's) a run of records is widened once, two
 * chunks a register as above, for kvwide_avx512.c's passes. */
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define RB 4    /* query rows a pass of four keys (decode: a GQA group) */
#define RW 8    /* query rows a pass of two keys (prefill: a tile's tokens x the group) */
#define VRUN 32 /* records whose weights a pass of turbo_axpys holds */
/* rows from which a run of records is widened once for all of them
 * (wide): below, passes of 8 rows widening the codes again are faster
 * (kvattn t3.5, dots, ns a key, these passes against the run widened
 * once: 12 rows 17.2 against 18.4, 16 rows 23.8 against 22.5, 48 rows 71.2
 * against 57.0) */
#define WIDE 16

/* A segment's codebook: its 2^bits centroids repeated over the 16 lanes,
 * so that vpermps, which reads the low 4 bits of a lane's index, picks a
 * code's centroid whatever the bits above the code hold (no mask) */
AI __m512 cbook_of(const float *cb, const int bits) {
    if (bits == 4)
        return _mm512_loadu_ps(cb);
    if (bits == 3)
        return _mm512_broadcast_f32x8(_mm256_loadu_ps(cb));
    return _mm512_broadcast_f32x4(_mm_loadu_ps(cb));
}

AI float norm_of(const uint8_t *row, int s) { /* the f16 scale (F16C: hr_f16_to_f32's value) */
    uint16_t h;
    memcpy(&h, row + 2 * s, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* hsum8 (hr__kvq_hsum8's order) of lanes 0-7 and of lanes 8-15 at once:
 * l + (l + 4), then lanes 0 + 2 and 1 + 3, then 0 + 1, within each half */
AI void hsum8x2(__m512 t, float *s0, float *s1) {
    __m512 s = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(3, 3, 1, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(3, 2, 3, 2)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 1, 1, 1)));
    *s0 = _mm512_cvtss_f32(s);
    *s1 = _mm_cvtss_f32(_mm512_extractf32x4_ps(s, 2));
}

/* the 4 bytes at b (a chunk's codes, chunk_at's) broadcast from memory (a
 * load port, where a word assembled in a register costs a shuffle port's
 * move) to lanes m of src */
AI __m512i bword(__m512i src, __mmask16 m, const uint8_t *b) {
    uint32_t u;
    memcpy(&u, b, 4);
    return _mm512_mask_set1_epi32(src, m, (int)u);
}

/* the first key's word in every lane (a plain broadcast load: no merge
 * into a register), for bword to put the second's over lanes 8-15 */
AI __m512i bword0(const uint8_t *b) {
    uint32_t u;
    memcpy(&u, b, 4);
    return _mm512_set1_epi32((int)u);
}

/* Chunk c of a segment's codes: where its 4-byte load starts (bytes past
 * the segment's offset) and how far its word is shifted down first. A
 * load that would run past the record (c >= safe: the last chunk at 2 or
 * 3 bits) starts 4 - BITS bytes early instead, its word shifted down by
 * those bytes: the same codes in the low bits, zeros above (vpermps
 * reads the low 4 bits, the codebook repeated above 2^BITS), so every
 * chunk is one broadcast load from memory. */
AI int chunk_at(int c, int safe, const int BITS) {
    return c * BITS - (c < safe || BITS == 4 ? 0 : 4 - BITS);
}
AI int chunk_shift(int c, int safe, const int BITS) {
    return c < safe || BITS == 4 ? 0 : 8 * (4 - BITS);
}

/* the lane shifts of a register of chunks c0 (lanes 0-7) and c1 (8-15) */
AI __m512i shifts_of(int c0, int c1, int safe, const int BITS) {
    const __m512i l = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512i e = _mm512_mask_set1_epi32(_mm512_set1_epi32(chunk_shift(c0, safe, BITS)), 0xff00,
                                       chunk_shift(c1, safe, BITS));
    return _mm512_add_epi32(_mm512_mullo_epi32(l, _mm512_set1_epi32(BITS)), e);
}

/* A rate's record at head_dim HD: its sizes (hr_turbo_kv_layout's) as
 * constants where HD is one (64, 128), so that a pass's chunk offsets and
 * loops fold (kvattn t3.5 16384 3 64 32, dots: 3.77 against 3.39 ns a
 * key); HD 0: L's, read at run time */
typedef struct shape {
    int hd, dim, off[2], bytes;
} shape;

AI shape shape_of(const hr_turbo_kv *L, const int HD, const int NSEG, const int B0,
                  const int B1) {
    if (!HD)
        return (shape){L->hd, L->dim, {(int)L->code_off[0], (int)L->code_off[1]}, (int)L->bytes};
    int dim = HD / NSEG;
    return (shape){HD, dim, {2 * NSEG, 2 * NSEG + dim * B0 / 8},
                   2 * NSEG + dim * (B0 + (NSEG > 1 ? B1 : 0)) / 8};
}

/* segment s (of BITS bits) of four keys' records r[0..4) for M rows: T[h]
 * (keys 2h, 2h + 1) += w * A, A the codes' chains. One function a segment,
 * so that BITS is a constant in each. */
AI void dots_seg(__m512 (*T)[2], const float *q, const int M, const uint8_t *const *r,
                 const shape *S, int s, __m512 k, const __m512 *wn, const int BITS) {
    int hd = S->hd, dim = S->dim, nch = dim / 8, off = S->off[s];
    /* chunks whose 4-byte load stays inside the record */
    int safe = hr_turbo_kv_safe_chunks((size_t)S->bytes, (size_t)off, BITS);
    const __m512i sh = shifts_of(0, 0, safe, BITS), sht = shifts_of(nch, nch, safe, BITS);
    __m512 A[RB][2];
    for (int rr = 0; rr < M; rr++)
        A[rr][0] = A[rr][1] = _mm512_setzero_ps();
    for (int ch = 0; ch < nch; ch++) {
        size_t at = off + (size_t)chunk_at(ch, safe, BITS);
        __m512 v[2];
        for (int h = 0; h < 2; h++) {
            __m512i w = bword0(r[2 * h] + at);
            w = bword(w, 0xff00, r[2 * h + 1] + at);
            v[h] = _mm512_permutexvar_ps(_mm512_srlv_epi32(w, ch < safe ? sh : sht), k);
        }
        for (int rr = 0; rr < M; rr++) {
            __m512 x = _mm512_broadcast_f32x8(
                _mm256_loadu_ps(q + (size_t)rr * hd + (size_t)s * dim + 8 * ch));
            A[rr][0] = _mm512_fmadd_ps(x, v[0], A[rr][0]);
            A[rr][1] = _mm512_fmadd_ps(x, v[1], A[rr][1]);
        }
    }
    for (int h = 0; h < 2; h++)
        for (int rr = 0; rr < M; rr++)
            T[rr][h] = _mm512_fmadd_ps(wn[h], A[rr][h], T[rr][h]);
}

/* The four records' segment weights (norm_of(r[i], s) * rinv, the same
 * products) as dots_seg's: w[s][h] holds key 2h's in lanes 0-7 and key
 * 2h + 1's in lanes 8-15. The records' leading 4 bytes (both segments'
 * f16 scales; with one segment its scale and 2 bytes of codes, w[1]
 * unused) widened at once. */
AI void norms4(__m512 w[2][2], const uint8_t *const *r, float rinv) {
    uint32_t u[4];
    for (int i = 0; i < 4; i++)
        memcpy(&u[i], r[i], 4);
    __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(_mm_setr_epi32((int)u[0], (int)u[1], (int)u[2],
                                                              (int)u[3])),
                             _mm256_set1_ps(rinv));
    __m512 z = _mm512_castps256_ps512(f); /* lane 2 i + s: record i's segment s */
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < 2; h++)
            w[s][h] = _mm512_permutexvar_ps(
                _mm512_mask_set1_epi32(_mm512_set1_epi32(4 * h + s), 0xff00, 4 * h + 2 + s), z);
}

/* hsum8 (hr__kvq_hsum8's order) of the four keys' halves of a and b (keys
 * 0, 1 in a, 2, 3 in b), times scale, to dst[0..4): l + (l + 4) by 128-bit
 * lane shuffles of both at once, then lanes 0 + 2 and 1 + 3, then 0 + 1,
 * each key's sum in lane 4 key */
AI void hsum8x4(float *dst, __m512 a, __m512 b, __m512 scale) {
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(3, 2, 3, 2)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 1, 1, 1)));
    s = _mm512_mul_ps(s, scale);
    const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(dst, _mm512_castps512_ps128(_mm512_permutexvar_ps(lanes, s)));
}

/* hsum8x4 of two rows at once (a0, b0: row 0's; a1, b1: row 1's) to d0
 * and d1: each row's l + (l + 4) as hsum8x4's, then lanes 0 + 2 and 1 + 3
 * of both rows by one pair of shuffles and an add, then 0 + 1 */
AI void hsum8x4x2(float *d0, float *d1, __m512 a0, __m512 b0, __m512 a1, __m512 b1,
                  __m512 scale) {
    __m512 s0 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, b0, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(a0, b0, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 s1 = _mm512_add_ps(_mm512_shuffle_f32x4(a1, b1, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(a1, b1, _MM_SHUFFLE(3, 1, 3, 1)));
    /* block k: row 0's 0 + 2, 1 + 3, then row 1's */
    __m512 u = _mm512_add_ps(_mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
    u = _mm512_mul_ps(u, scale);
    const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 r = _mm512_permutexvar_ps(lanes, u);
    _mm_storeu_ps(d0, _mm512_castps512_ps128(r));
    _mm_storeu_ps(d1, _mm512_extractf32x4_ps(r, 1));
}

/* M (1-4) query rows over nk records, four keys a pass (two a register);
 * NSEG segments of B0 and B1 bits */
AI void dots_m(float *sc, size_t ldsc, const float *q, const int M, const uint8_t *rec,
               size_t rb, int nk, const hr_turbo_kv *L, float scale, const int NSEG,
               const int B0, const int B1, const int HD) {
    shape S = shape_of(L, HD, NSEG, B0, B1);
    __m512 k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    __m512 sv = _mm512_set1_ps(scale);
    int j = 0;
    for (; j + 4 <= nk; j += 4) {
        const uint8_t *r[4];
        for (int i = 0; i < 4; i++)
            r[i] = rec + (size_t)(j + i) * rb;
        __m512 T[RB][2], wn[2][2];
        for (int rr = 0; rr < M; rr++)
            T[rr][0] = T[rr][1] = _mm512_setzero_ps();
        norms4(wn, r, L->rinv); /* one segment: wn[1] unused */
        dots_seg(T, q, M, r, &S, 0, k[0], wn[0], B0);
        if (NSEG > 1)
            dots_seg(T, q, M, r, &S, 1, k[1], wn[1], B1);
        int rr = 0;
        for (; rr + 2 <= M; rr += 2)
            hsum8x4x2(sc + (size_t)rr * ldsc + j, sc + (size_t)(rr + 1) * ldsc + j, T[rr][0],
                      T[rr][1], T[rr + 1][0], T[rr + 1][1], sv);
        if (rr < M)
            hsum8x4(sc + (size_t)rr * ldsc + j, T[rr][0], T[rr][1], sv);
    }
    if (j < nk) /* the last keys: the AVX2 body, the same bits */
        hr__turbo_dots_avx2(sc + j, ldsc, q, M, rec + (size_t)j * rb, rb, nk - j, L, scale);
}

/* segment s (of BITS bits) of two keys' records r0, r1 for M (up to RW)
 * rows: T += w * A, as dots_seg's */
AI void dots2_seg(__m512 *T, const float *q, const int M, const uint8_t *r0, const uint8_t *r1,
                  const hr_turbo_kv *L, const shape *S, int s, __m512 k, const int BITS) {
    int hd = S->hd, dim = S->dim, off = S->off[s];
    int safe = hr_turbo_kv_safe_chunks((size_t)S->bytes, (size_t)off, BITS);
    const __m512i sh = shifts_of(0, 0, safe, BITS), sht = shifts_of(dim / 8, dim / 8, safe, BITS);
    __m512 A[RW];
    for (int rr = 0; rr < M; rr++)
        A[rr] = _mm512_setzero_ps();
    for (int ch = 0; ch < dim / 8; ch++) {
        size_t at = (size_t)(off + chunk_at(ch, safe, BITS));
        __m512i w = bword0(r0 + at);
        w = bword(w, 0xff00, r1 + at);
        __m512 v = _mm512_permutexvar_ps(_mm512_srlv_epi32(w, ch < safe ? sh : sht), k);
        for (int rr = 0; rr < M; rr++)
            A[rr] = _mm512_fmadd_ps(
                _mm512_broadcast_f32x8(
                    _mm256_loadu_ps(q + (size_t)rr * hd + (size_t)s * dim + 8 * ch)),
                v, A[rr]);
    }
    __m512 w = _mm512_mask_broadcastss_ps(_mm512_set1_ps(norm_of(r0, s) * L->rinv), 0xff00,
                                          _mm_set_ss(norm_of(r1, s) * L->rinv));
    for (int rr = 0; rr < M; rr++)
        T[rr] = _mm512_fmadd_ps(w, A[rr], T[rr]);
}

/* M (5 to RW) query rows over nk records, two keys a pass: each record's
 * codes widened once for up to RW rows (a prefill tile's 8 tokens x a
 * group of 3 are 24 rows: 3 passes over the records, not 6) */
AI void dots2_m(float *sc, size_t ldsc, const float *q, const int M, const uint8_t *rec,
                size_t rb, int nk, const hr_turbo_kv *L, float scale, const int NSEG,
                const int B0, const int B1, const int HD) {
    __m512 k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    shape S = shape_of(L, HD, NSEG, B0, B1);
    int j = 0;
    for (; j + 2 <= nk; j += 2) {
        const uint8_t *r0 = rec + (size_t)j * rb, *r1 = r0 + rb;
        __m512 T[RW];
        for (int rr = 0; rr < M; rr++)
            T[rr] = _mm512_setzero_ps();
        dots2_seg(T, q, M, r0, r1, L, &S, 0, k[0], B0);
        if (NSEG > 1)
            dots2_seg(T, q, M, r0, r1, L, &S, 1, k[1], B1);
        for (int rr = 0; rr < M; rr++) {
            float s0, s1;
            hsum8x2(T[rr], &s0, &s1);
            sc[(size_t)rr * ldsc + j] = s0 * scale;
            sc[(size_t)rr * ldsc + j + 1] = s1 * scale;
        }
    }
    if (j < nk) /* the odd key: the AVX2 body, the same bits */
        hr__turbo_dots_avx2(sc + j, ldsc, q, M, rec + (size_t)j * rb, rb, nk - j, L, scale);
}

AI void dots_hd(float *sc, size_t ldsc, const float *q, int nr, const uint8_t *rec, size_t rb,
                int nk, const hr_turbo_kv *L, float scale, const int NSEG, const int B0,
                const int B1, const int HD) {
    for (int r0 = 0, m; r0 < nr; r0 += m) {
        float *s = sc + (size_t)r0 * ldsc;
        const float *qr = q + (size_t)r0 * L->hd;
        m = nr - r0 < RW ? nr - r0 : RW;
        switch (m) { /* rows a pass, constant in each body */
        case 1: dots_m(s, ldsc, qr, 1, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 2: dots_m(s, ldsc, qr, 2, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 3: dots_m(s, ldsc, qr, 3, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 4: dots_m(s, ldsc, qr, 4, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 5: dots2_m(s, ldsc, qr, 5, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 6: dots2_m(s, ldsc, qr, 6, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        case 7: dots2_m(s, ldsc, qr, 7, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        default: dots2_m(s, ldsc, qr, 8, rec, rb, nk, L, scale, NSEG, B0, B1, HD); break;
        }
    }
}

/* one body per head_dim 64 and 128 (shape), one for the others */
AI void dots(float *sc, size_t ldsc, const float *q, int nr, const uint8_t *rec, size_t rb,
             int nk, const hr_turbo_kv *L, float scale, const int NSEG, const int B0,
             const int B1) {
    switch (L->hd) {
    case 64: dots_hd(sc, ldsc, q, nr, rec, rb, nk, L, scale, NSEG, B0, B1, 64); break;
    case 128: dots_hd(sc, ldsc, q, nr, rec, rb, nk, L, scale, NSEG, B0, B1, 128); break;
    default: dots_hd(sc, ldsc, q, nr, rec, rb, nk, L, scale, NSEG, B0, B1, 0); break;
    }
}

/* One part of an axpys pass: 32 outputs (chunks ch .. ch + 3 of segment
 * s, of BITS bits, codebook k) in 2 registers a row, their weights W */
typedef struct axpart {
    int s, ch;
    __m512 k;
    float (*W)[VRUN];
} axpart;

/* Chunks c and c + 1 of a segment's codes (of BITS bits, at byte off of
 * the record) in one register, interleaved: lane 2l code l of chunk c,
 * lane 2l + 1 code l of chunk c + 1 (pair_order), one key's. At 2 bits
 * the 4 bytes of both chunks (c + 1's in the upper half), at 4 bits their
 * 8 bytes (c + 1's the upper word of each lane pair): one load. At 3 bits
 * c's 4 bytes and, over the odd lanes, the 4 bytes that end with c + 1's 3
 * (its codes from bit 8): two (one 8-byte load from the byte before c,
 * which puts both chunks at whole words, was measured slower:
 * kvattn t3 16384 3 64 32, axpys 3.03 against 2.85 ns a key). */
typedef struct pair_ld {
    int at;     /* bytes into the record */
    __m512i sh; /* each lane's shift */
} pair_ld;

AI pair_ld pair_of(int c, size_t off, const int BITS) {
    int hi = BITS == 2 ? 16 : BITS == 3 ? 8 : 0, e[16];
    for (int l = 0; l < 8; l++)
        e[2 * l] = BITS * l, e[2 * l + 1] = BITS * l + hi;
    return (pair_ld){(int)off + c * BITS, _mm512_loadu_si512(e)};
}

/* the pair's codes of record r as their centroids (codebook k) */
AI __m512 pair_load(const uint8_t *r, const pair_ld *P, __m512 k, const int BITS) {
    __m512i w;
    if (BITS == 4) {
        uint64_t u;
        memcpy(&u, r + P->at, 8);
        w = _mm512_set1_epi64((long long)u);
    } else if (BITS == 3) {
        w = bword(bword0(r + P->at), 0xaaaa, r + P->at + 2);
    } else {
        w = bword0(r + P->at);
    }
    return _mm512_permutexvar_ps(_mm512_srlv_epi32(w, P->sh), k);
}

/* 16 consecutive floats at x in pair_load's lane order, and back */
AI __m512 pair_order(const float *x) {
    const __m512i il = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    return _mm512_permutexvar_ps(il, _mm512_loadu_ps(x));
}
AI void pair_store(float *x, __m512 v) {
    const __m512i un = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    _mm512_storeu_ps(x, _mm512_permutexvar_ps(un, v));
}

/* NP (1 or 2) parts x[] (segments of B0 and B1 bits) of n records from r0
 * for M rows, key by key: each output lane the reference's chain over the
 * keys (in pair_load's lane order, put back at the end). Two parts a key
 * loop (decode's few rows) give 4 M chains, so that the FMA's latency does
 * not bound a row's chains (a segment's dim is a multiple of 32: head_dim
 * 64-256, whole or halved) */
AI void axpys_parts(float *o, const axpart *x, const int NP, const int M, const uint8_t *r0,
                    size_t rb, int n, const hr_turbo_kv *L, const int B0, const int B1) {
    int hd = L->hd, dim = L->dim;
    __m512 O[RW][2][2];
    pair_ld P[2][2];
    for (int i = 0; i < NP; i++) {
        for (int h = 0; h < 2; h++) {
            P[i][h] = pair_of(x[i].ch + 2 * h, L->code_off[x[i].s], i ? B1 : B0);
            for (int rr = 0; rr < M; rr++)
                O[rr][i][h] = pair_order(o + (size_t)rr * hd + (size_t)x[i].s * dim +
                                         8 * (x[i].ch + 2 * h));
        }
    }
    const uint8_t *c = r0;
    for (int j = 0; j < n; j++, c += rb) {
        for (int i = 0; i < NP; i++) {
            __m512 v[2];
            for (int h = 0; h < 2; h++)
                v[h] = pair_load(c, &P[i][h], x[i].k, i ? B1 : B0);
            for (int rr = 0; rr < M; rr++) {
                __m512 w = _mm512_set1_ps(x[i].W[rr][j]);
                O[rr][i][0] = _mm512_fmadd_ps(w, v[0], O[rr][i][0]);
                O[rr][i][1] = _mm512_fmadd_ps(w, v[1], O[rr][i][1]);
            }
        }
    }
    for (int i = 0; i < NP; i++)
        for (int rr = 0; rr < M; rr++)
            for (int h = 0; h < 2; h++)
                pair_store(o + (size_t)rr * hd + (size_t)x[i].s * dim + 8 * (x[i].ch + 2 * h),
                           O[rr][i][h]);
}

/* W[s][rr][j] = p[rr * ldp + j] * (norm_of(record j, s) * rinv), the
 * products the reference takes, for the n (up to VRUN) records from r0:
 * 16 records' leading 4 bytes (both segments' f16 scales) a gather */
AI void weights(float (*W)[RW][VRUN], const float *p, size_t ldp, const int M, const uint8_t *r0,
                size_t rb, int n, float rinv, const int NSEG) {
    const __m512i at = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)rb));
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        __m512i u = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at,
                                                r0 + (size_t)j * rb, 1);
        for (int s = 0; s < NSEG; s++) {
            __m256i h = _mm512_cvtepi32_epi16(s ? _mm512_srli_epi32(u, 16) : u);
            __m512 w = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(rinv));
            for (int rr = 0; rr < M; rr++)
                _mm512_storeu_ps(&W[s][rr][j],
                                 _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + (size_t)rr * ldp + j), w));
        }
    }
}

/* M (1 to RW) output rows over nv records, VRUN at a time: each run's
 * parts two a key loop up to 4 rows (the segments side by side, or a
 * segment's halves), one above */
AI void axpys_m(float *o, const float *p, size_t ldp, const int M, const uint8_t *rec,
                size_t rb, int nv, const hr_turbo_kv *L, const int NSEG, const int B0,
                const int B1) {
    __m512 k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    float W[2][RW][VRUN];
    int dim = L->dim;
    for (int j0 = 0; j0 < nv; j0 += VRUN) {
        int n = nv - j0 < VRUN ? nv - j0 : VRUN;
        const uint8_t *r0 = rec + (size_t)j0 * rb;
        weights(W, p + j0, ldp, M, r0, rb, n, L->rinv, NSEG);
        for (int ch = 0; ch < dim / 8; ch += 4) {
            if (NSEG > 1 && M <= 4) { /* segment 0's and 1's chunks ch .. ch + 3 */
                axpart x[2] = {{0, ch, k[0], W[0]}, {1, ch, k[1], W[1]}};
                axpys_parts(o, x, 2, M, r0, rb, n, L, B0, B1);
            } else if (NSEG > 1) {
                axpys_parts(o, &(axpart){0, ch, k[0], W[0]}, 1, M, r0, rb, n, L, B0, B0);
                axpys_parts(o, &(axpart){1, ch, k[1], W[1]}, 1, M, r0, rb, n, L, B1, B1);
            } else if (M <= 4 && ch + 4 < dim / 8) { /* chunks ch .. ch + 7 */
                axpart x[2] = {{0, ch, k[0], W[0]}, {0, ch + 4, k[0], W[0]}};
                axpys_parts(o, x, 2, M, r0, rb, n, L, B0, B0);
                ch += 4;
            } else {
                axpys_parts(o, &(axpart){0, ch, k[0], W[0]}, 1, M, r0, rb, n, L, B0, B0);
            }
        }
    }
}

AI void axpys(float *o, const float *p, size_t ldp, int nr, const uint8_t *rec, size_t rb,
              int nv, const hr_turbo_kv *L, const int NSEG, const int B0, const int B1) {
    for (int r0 = 0; r0 < nr; r0 += RW) {
        float *orow = o + (size_t)r0 * L->hd;
        const float *pr = p + (size_t)r0 * ldp;
        switch (nr - r0 < RW ? nr - r0 : RW) {
        case 1: axpys_m(orow, pr, ldp, 1, rec, rb, nv, L, NSEG, B0, B1); break;
        case 2: axpys_m(orow, pr, ldp, 2, rec, rb, nv, L, NSEG, B0, B1); break;
        case 3: axpys_m(orow, pr, ldp, 3, rec, rb, nv, L, NSEG, B0, B1); break;
        case 4: axpys_m(orow, pr, ldp, 4, rec, rb, nv, L, NSEG, B0, B1); break;
        case 5: axpys_m(orow, pr, ldp, 5, rec, rb, nv, L, NSEG, B0, B1); break;
        case 6: axpys_m(orow, pr, ldp, 6, rec, rb, nv, L, NSEG, B0, B1); break;
        case 7: axpys_m(orow, pr, ldp, 7, rec, rb, nv, L, NSEG, B0, B1); break;
        default: axpys_m(orow, pr, ldp, 8, rec, rb, nv, L, NSEG, B0, B1); break;
        }
    }
}

/* segment s's codes of the record at row as their centroids at v (dim
 * floats), two chunks a register: dots_seg's unpacking, no products */
AI void widen_seg(float *v, const uint8_t *row, const hr_turbo_kv *L, int s, __m512 k,
                  const int BITS) {
    size_t off = L->code_off[s];
    int safe = hr_turbo_kv_safe_chunks(L->bytes, off, BITS);
    for (int ch = 0; ch < L->dim / 8; ch += 2) { /* dim: a multiple of 32 */
        const uint8_t *b = row + off;
        __m512i w = bword0(b + chunk_at(ch, safe, BITS));
        w = bword(w, 0xff00, b + chunk_at(ch + 1, safe, BITS));
        __m512i sh = shifts_of(ch, ch + 1, safe, BITS);
        _mm512_storeu_ps(v + 8 * ch, _mm512_permutexvar_ps(_mm512_srlv_epi32(w, sh), k));
    }
}

/* The pass J over nk records, runs of records widened once (kvquant.h
 * hr__kvwide: the centroids, the segments' norm * rinv), for a prefill
 * tile's many rows: kvwide_avx512.c's passes */
AI void wide(const hr__kvwide_job *J, const uint8_t *rec, size_t rb, int nk, const hr_turbo_kv *L,
             const int NSEG, const int B0, const int B1) {
    int ld = hr__kvwide_ld(L->hd), run = HR_KVWIDE_FLOATS / ld;
    __m512 k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    _Alignas(64) float v[HR_KVWIDE_FLOATS + 64]; /* + 64: s not 4 KiB from v's rows */
    float s[HR_KVWIDE_MAX];
    for (int j0 = 0; j0 < nk; j0 += run) {
        int n = nk - j0 < run ? nk - j0 : run;
        for (int j = 0; j < n; j++) {
            const uint8_t *row = rec + (size_t)(j0 + j) * rb;
            s[j] = norm_of(row, 0) * L->rinv;
            widen_seg(v + (size_t)j * ld, row, L, 0, k[0], B0);
            if (NSEG > 1) {
                s[n + j] = norm_of(row, 1) * L->rinv;
                widen_seg(v + (size_t)j * ld + L->dim, row, L, 1, k[1], B1);
            }
        }
        hr__kvwide W = {v, s, NULL, n, L->hd, NSEG, ld};
        hr__kvwide_pass_avx512(J, j0, &W);
    }
}

AI void wide_rate(const hr__kvwide_job *J, const uint8_t *rec, size_t rb, int nk,
                  const hr_turbo_kv *L) {
    switch (L->r2) {
    case 4: wide(J, rec, rb, nk, L, 1, 2, 2); break;
    case 5: wide(J, rec, rb, nk, L, 2, 3, 2); break;
    case 6: wide(J, rec, rb, nk, L, 1, 3, 3); break;
    case 7: wide(J, rec, rb, nk, L, 2, 4, 3); break;
    default: wide(J, rec, rb, nk, L, 1, 4, 4); break;
    }
}

/* one body per rate: the unpacking's branches fold away */
void hr__turbo_dots_avx512(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                           size_t rb, int nk, const hr_turbo_kv *L, float scale) {
    if (nr >= WIDE) {
        wide_rate(&(hr__kvwide_job){.sc = sc, .ldsc = ldsc, .q = q, .scale = scale, .nr = nr},
                  rec, rb, nk, L);
        return;
    }
    switch (L->r2) {
    case 4: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 2, 2); break;
    case 5: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 2, 3, 2); break;
    case 6: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 3, 3); break;
    case 7: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 2, 4, 3); break;
    default: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 4, 4); break;
    }
}

void hr__turbo_axpys_avx512(float *o, const float *p, size_t ldp, int nr, const void *rec,
                            size_t rb, int nv, const hr_turbo_kv *L) {
    if (nr >= WIDE) {
        wide_rate(&(hr__kvwide_job){.o = o, .p = p, .ldp = ldp, .nr = nr}, rec, rb, nv, L);
        return;
    }
    switch (L->r2) {
    case 4: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 2, 2); break;
    case 5: axpys(o, p, ldp, nr, rec, rb, nv, L, 2, 3, 2); break;
    case 6: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 3, 3); break;
    case 7: axpys(o, p, ldp, nr, rec, rb, nv, L, 2, 4, 3); break;
    default: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 4, 4); break;
    }
}
