/* turbo_dots and turbo_axpys (turbo_attn.c defines them) with AVX2, in
 * kvggml_attn_avx2.c's loop shape (a segment here is a block there, its
 * weight n * rinv the block's scale): a chunk of 8 codes is `bits` whole
 * bytes (one 4-byte load: chunk), widened to 8 indices by one variable
 * shift, then to
 * their centroids by a permute (bits 2, 3: one register of the codebook;
 * 4: two, blended on the index's bit 3; the bits above a code are left:
 * cbook_of), once for up to 4 query rows (a GQA
 * group); for more output rows (a prefill tile's tokens x the group) a
 * run of records is widened once for all of them (kvwide_avx2.c's score
 * and output passes). Every lane runs the reference's fma chain, so the
 * bits are the scalar's; the AVX-512 bodies (turbo_attn_avx512.c) take a
 * run's odd last keys here. */
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define RB 4    /* query rows a pass */
#define VRUN 32 /* records whose weights a pass of turbo_axpys holds */
#define WIDE 5  /* query or output rows from which a run of records is widened once */

/* A segment's codebook in registers: centroids 0-7 (at 2 bits, 0-3
 * twice) in lo, 8-15 in hi (4 bits), so that vpermps, which reads the low
 * 3 bits of a lane's index, picks a code's centroid whatever the bits
 * above the code hold (no mask; at 4 bits the blend reads bit 3) */
typedef struct cbook {
    __m256 lo, hi;
} cbook;

AI cbook cbook_of(const float *cb, const int bits) {
    if (bits == 2) {
        __m128 c = _mm_loadu_ps(cb);
        return (cbook){_mm256_set_m128(c, c), _mm256_setzero_ps()};
    }
    cbook k = {_mm256_loadu_ps(cb), _mm256_setzero_ps()};
    if (bits == 4)
        k.hi = _mm256_loadu_ps(cb + 8);
    return k;
}

/* The chunks of segment s whose 4 bytes from the chunk's first lie inside
 * the record */
AI int safe_of(const hr_turbo_kv *L, int s, const int bits) {
    return hr_turbo_kv_safe_chunks(L->bytes, L->code_off[s], bits);
}

/* chunk ch (positions 8 ch ..) of a segment's codes c as their centroids:
 * one 4-byte load from the chunk's first byte, or, where those 4 bytes
 * would run past the record (ch >= safe: the last chunk at 2 or 3 bits),
 * the 4 bytes that end with the chunk's, the word shifted down by the
 * bytes it starts early (the same codes; the permute reads only the code) */
AI __m256 chunk(const uint8_t *c, int ch, int safe, const int bits, cbook k) {
    uint32_t u;
    __m256i sh = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits,
                                   7 * bits);
    if (bits == 4 || ch < safe) {
        memcpy(&u, c + (size_t)ch * bits, 4);
    } else {
        memcpy(&u, c + (size_t)ch * bits - (4 - bits), 4);
        sh = _mm256_add_epi32(sh, _mm256_set1_epi32(8 * (4 - bits)));
    }
    __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)u), sh);
    __m256 lo = _mm256_permutevar8x32_ps(k.lo, idx);
    if (bits < 4)
        return lo;
    __m256 hi = _mm256_permutevar8x32_ps(k.hi, idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

AI float norm_of(const uint8_t *row, int s) { /* the f16 scale (F16C: hr_f16_to_f32's value) */
    uint16_t h;
    memcpy(&h, row + 2 * s, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* segment s (of BITS bits, safe chunks: safe_of's) of the record at row for
 * M rows: T += w * A, A the codes' chains. One function a segment, so
 * that BITS is a constant in each. */
AI void dots_seg(__m256 *T, const float *q, const int M, const uint8_t *row,
                 const hr_turbo_kv *L, int s, int safe, cbook k, const int BITS) {
    int hd = L->hd, dim = L->dim;
    const uint8_t *c = row + L->code_off[s];
    __m256 A[RB];
    for (int rr = 0; rr < M; rr++)
        A[rr] = _mm256_setzero_ps();
#pragma GCC unroll 8 /* (a segment's chunks whole: at 4 bits gcc kept a loop, 1.25x slower) */
    for (int ch = 0; ch < dim / 8; ch++) {
        __m256 v = chunk(c, ch, safe, BITS, k);
        for (int rr = 0; rr < M; rr++)
            A[rr] = _mm256_fmadd_ps(
                _mm256_loadu_ps(q + (size_t)rr * hd + (size_t)s * dim + 8 * ch), v, A[rr]);
    }
    __m256 w = _mm256_set1_ps(norm_of(row, s) * L->rinv);
    for (int rr = 0; rr < M; rr++)
        T[rr] = _mm256_fmadd_ps(w, A[rr], T[rr]);
}

/* M (1-4) query rows over nk records; NSEG segments of B0 and B1 bits.
 * The sums T of 4 keys wait, so that their horizontal sums go 8 at a time
 * (hr_hsum_2x4_avx2: each in hr_hsum8_avx2's order) and their scores are
 * stored 4 at a time; the last nk % 4 keys sum one by one. */
AI void dots_m(float *sc, size_t ldsc, const float *q, const int M, const uint8_t *rec,
               size_t rb, int nk, const hr_turbo_kv *L, float scale, const int NSEG,
               const int B0, const int B1) {
    cbook k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    int safe[2] = {safe_of(L, 0, B0), safe_of(L, NSEG - 1, B1)};
    __m256 Tk[RB][4]; /* [row][key % 4] */
    for (int j = 0; j < nk; j++) {
        const uint8_t *row = rec + (size_t)j * rb;
        __m256 T[RB];
        for (int rr = 0; rr < M; rr++)
            T[rr] = _mm256_setzero_ps();
        dots_seg(T, q, M, row, L, 0, safe[0], k[0], B0);
        if (NSEG > 1)
            dots_seg(T, q, M, row, L, 1, safe[1], k[1], B1);
        if (j >= nk / 4 * 4) { /* the tail */
            for (int rr = 0; rr < M; rr++)
                sc[(size_t)rr * ldsc + j] = hr_hsum8_avx2(T[rr]) * scale;
            continue;
        }
        for (int rr = 0; rr < M; rr++)
            Tk[rr][j % 4] = T[rr];
        if (j % 4 < 3)
            continue;
        __m256 sv = _mm256_set1_ps(scale);
        for (int rr = 0; rr < M; rr += 2) { /* rows rr and rr + 1 (or rr again) */
            __m256 t[2][4];
            for (int kk = 0; kk < 4; kk++) {
                t[0][kk] = Tk[rr][kk];
                t[1][kk] = Tk[rr + 1 < M ? rr + 1 : rr][kk];
            }
            __m256 y = _mm256_mul_ps(hr_hsum_2x4_avx2(t), sv);
            _mm_storeu_ps(sc + (size_t)rr * ldsc + j - 3, _mm256_castps256_ps128(y));
            if (rr + 1 < M)
                _mm_storeu_ps(sc + (size_t)(rr + 1) * ldsc + j - 3, _mm256_extractf128_ps(y, 1));
        }
    }
}

/* a segment's codes c (dim of them, BITS bits) as their centroids at v */
AI void widen_seg(float *v, const uint8_t *c, int dim, int safe, cbook k, const int BITS) {
    for (int ch = 0; ch < dim / 8; ch++)
        _mm256_storeu_ps(v + 8 * ch, chunk(c, ch, safe, BITS, k));
}

/* Records j0 .. j0 + n widened (kvquant.h hr__kvwide's layout: the
 * centroids at v + j * ld, the segments' norm * rinv at s + sg * n + j) */
AI void widen_run(float *v, float *s, const uint8_t *rec, size_t rb, int j0, int n, int ld,
                  const hr_turbo_kv *L, const cbook *k, const int NSEG, const int B0,
                  const int B1) {
    int safe[2] = {safe_of(L, 0, B0), safe_of(L, NSEG - 1, B1)};
    for (int j = 0; j < n; j++) {
        const uint8_t *row = rec + (size_t)(j0 + j) * rb;
        s[j] = norm_of(row, 0) * L->rinv;
        widen_seg(v + (size_t)j * ld, row + L->code_off[0], L->dim, safe[0], k[0], B0);
        if (NSEG > 1) {
            s[n + j] = norm_of(row, 1) * L->rinv;
            widen_seg(v + (size_t)j * ld + L->dim, row + L->code_off[1], L->dim, safe[1], k[1],
                      B1);
        }
    }
}

/* The pass J over nk records, runs of records widened once (kvquant.h
 * hr__kvwide: the centroids, the segments' norm * rinv) */
AI void wide(const hr__kvwide_job *J, const uint8_t *rec, size_t rb, int nk, const hr_turbo_kv *L,
             const int NSEG, const int B0, const int B1) {
    int ld = hr__kvwide_ld(L->hd), run = HR_KVWIDE_FLOATS / ld;
    cbook k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    _Alignas(32) float v[HR_KVWIDE_FLOATS + 64]; /* + 64: s not 4 KiB from v's rows */
    float s[HR_KVWIDE_MAX];
    for (int j0 = 0; j0 < nk; j0 += run) {
        int n = nk - j0 < run ? nk - j0 : run;
        widen_run(v, s, rec, rb, j0, n, ld, L, k, NSEG, B0, B1);
        hr__kvwide W = {v, s, NULL, n, L->hd, NSEG, ld};
        hr__kvwide_pass_avx2(J, j0, &W);
    }
}

AI void dots(float *sc, size_t ldsc, const float *q, int nr, const uint8_t *rec, size_t rb, int nk,
             const hr_turbo_kv *L, float scale, const int NSEG, const int B0, const int B1) {
    if (nr >= WIDE) {
        wide(&(hr__kvwide_job){.sc = sc, .ldsc = ldsc, .q = q, .scale = scale, .nr = nr}, rec, rb,
             nk, L, NSEG, B0, B1);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *s = sc + (size_t)r0 * ldsc;
        const float *qr = q + (size_t)r0 * L->hd;
        switch (nr - r0 < RB ? nr - r0 : RB) { /* rows a pass, constant in each body */
        case 1: dots_m(s, ldsc, qr, 1, rec, rb, nk, L, scale, NSEG, B0, B1); break;
        case 2: dots_m(s, ldsc, qr, 2, rec, rb, nk, L, scale, NSEG, B0, B1); break;
        case 3: dots_m(s, ldsc, qr, 3, rec, rb, nk, L, scale, NSEG, B0, B1); break;
        default: dots_m(s, ldsc, qr, 4, rec, rb, nk, L, scale, NSEG, B0, B1); break;
        }
    }
}

/* segment s (of BITS bits) of n records from r0 for M output rows,
 * weights W: a chunk's 8 outputs at a time, key by key */
AI void axpys_seg(float *o, float (*W)[VRUN], const int M, const uint8_t *r0, size_t rb, int n,
                  const hr_turbo_kv *L, int s, int safe, cbook k, const int BITS) {
    int hd = L->hd, dim = L->dim;
    for (int ch = 0; ch < dim / 8; ch++) {
        __m256 O[RB];
        for (int rr = 0; rr < M; rr++)
            O[rr] = _mm256_loadu_ps(o + (size_t)rr * hd + (size_t)s * dim + 8 * ch);
        for (int j = 0; j < n; j++) {
            __m256 v = chunk(r0 + (size_t)j * rb + L->code_off[s], ch, safe, BITS, k);
            for (int rr = 0; rr < M; rr++)
                O[rr] = _mm256_fmadd_ps(_mm256_broadcast_ss(&W[rr][j]), v, O[rr]);
        }
        for (int rr = 0; rr < M; rr++)
            _mm256_storeu_ps(o + (size_t)rr * hd + (size_t)s * dim + 8 * ch, O[rr]);
    }
}

/* M (1-4) output rows over nv records */
AI void axpys_m(float *o, const float *p, size_t ldp, const int M, const uint8_t *rec,
                size_t rb, int nv, const hr_turbo_kv *L, const int NSEG, const int B0,
                const int B1) {
    cbook k[2] = {cbook_of(L->cb[0], B0), cbook_of(L->cb[NSEG - 1], B1)};
    int safe[2] = {safe_of(L, 0, B0), safe_of(L, NSEG - 1, B1)};
    float W[RB][VRUN];
    for (int j0 = 0; j0 < nv; j0 += VRUN) {
        int n = nv - j0 < VRUN ? nv - j0 : VRUN;
        const uint8_t *r0 = rec + (size_t)j0 * rb;
        for (int s = 0; s < NSEG; s++) {
            for (int j = 0; j < n; j++) {
                float w = norm_of(r0 + (size_t)j * rb, s) * L->rinv;
                for (int rr = 0; rr < M; rr++)
                    W[rr][j] = p[(size_t)rr * ldp + j0 + j] * w;
            }
            if (s == 0)
                axpys_seg(o, W, M, r0, rb, n, L, 0, safe[0], k[0], B0);
            else
                axpys_seg(o, W, M, r0, rb, n, L, 1, safe[1], k[1], B1);
        }
    }
}

AI void axpys(float *o, const float *p, size_t ldp, int nr, const uint8_t *rec, size_t rb, int nv,
              const hr_turbo_kv *L, const int NSEG, const int B0, const int B1) {
    if (nr >= WIDE) {
        wide(&(hr__kvwide_job){.o = o, .p = p, .ldp = ldp, .nr = nr}, rec, rb, nv, L, NSEG, B0, B1);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *orow = o + (size_t)r0 * L->hd;
        const float *pr = p + (size_t)r0 * ldp;
        switch (nr - r0 < RB ? nr - r0 : RB) {
        case 1: axpys_m(orow, pr, ldp, 1, rec, rb, nv, L, NSEG, B0, B1); break;
        case 2: axpys_m(orow, pr, ldp, 2, rec, rb, nv, L, NSEG, B0, B1); break;
        case 3: axpys_m(orow, pr, ldp, 3, rec, rb, nv, L, NSEG, B0, B1); break;
        default: axpys_m(orow, pr, ldp, 4, rec, rb, nv, L, NSEG, B0, B1); break;
        }
    }
}

/* one body per rate: the unpacking's branches fold away */
static void turbo_dots(float *sc, size_t ldsc, const float *q, int nr, const void *rec, size_t rb,
                       int nk, const hr_turbo_kv *L, float scale) {
    switch (L->r2) {
    case 4: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 2, 2); break;
    case 5: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 2, 3, 2); break;
    case 6: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 3, 3); break;
    case 7: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 2, 4, 3); break;
    default: dots(sc, ldsc, q, nr, rec, rb, nk, L, scale, 1, 4, 4); break;
    }
}

static void turbo_axpys(float *o, const float *p, size_t ldp, int nr, const void *rec, size_t rb,
                        int nv, const hr_turbo_kv *L) {
    switch (L->r2) {
    case 4: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 2, 2); break;
    case 5: axpys(o, p, ldp, nr, rec, rb, nv, L, 2, 3, 2); break;
    case 6: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 3, 3); break;
    case 7: axpys(o, p, ldp, nr, rec, rb, nv, L, 2, 4, 3); break;
    default: axpys(o, p, ldp, nr, rec, rb, nv, L, 1, 4, 4); break;
    }
}

void hr__turbo_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                         size_t rb, int nk, const hr_turbo_kv *L, float scale) {
    turbo_dots(sc, ldsc, q, nr, rec, rb, nk, L, scale);
}

void hr__turbo_axpys_avx2(float *o, const float *p, size_t ldp, int nr, const void *rec,
                          size_t rb, int nv, const hr_turbo_kv *L) {
    turbo_axpys(o, p, ldp, nr, rec, rb, nv, L);
}
