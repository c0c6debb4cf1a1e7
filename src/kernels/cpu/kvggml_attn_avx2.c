/* kvg_dots and kvg_axpys (kvggml.c defines them) with AVX2: a block's 32
 * codes are widened to floats a chunk of 8 at a time (Q8_0: sign extension;
 * Q4_0: bytes 0-7 and 8-15, their low nibbles then their high nibbles, less
 * 8: elements 0-7, 8-15, 16-23, 24-31), once for up to 4 query rows (a GQA
 * group). For more query and output rows (a prefill tile's tokens x the
 * group) a run of records is widened once into floats for all of them
 * (kvwide_avx2.c).
 * Every lane runs the reference's fma chain, so the bits are the
 * scalar's; the AVX-512 table uses these too. */
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/kvquant.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define RB 4    /* query rows a pass */
#define VRUN 32 /* records whose weights a pass of kvg_axpys holds */
#define WIDE 5  /* query or output rows from which a run of records is widened once */

AI float scale_of(const uint8_t *b) {
    uint16_t d;
    memcpy(&d, b, 2);
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
}

/* chunk ch (0..3: elements 8 ch ..) of the block at b as floats */
AI __m256 chunk(const uint8_t *b, int ch, const bool q8) {
    if (q8) {
        __m128i x = _mm_loadl_epi64((const void *)(b + 2 + 8 * ch));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
    }
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(b + 2 + 8 * (ch & 1))));
    x = ch < 2 ? _mm256_and_si256(x, _mm256_set1_epi32(15)) : _mm256_srli_epi32(x, 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(x, _mm256_set1_epi32(8)));
}

/* records [0, n) widened (kvquant.h hr__kvwide) into v and s */
AI hr__kvwide widen(float *v, float *s, const uint8_t *rec, size_t rb, int n, int hd,
                    const bool q8) {
    size_t bb = q8 ? 34 : 18;
    int nb = hd / 32, ld = hr__kvwide_ld(hd);
    for (int j = 0; j < n; j++)
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = rec + (size_t)j * rb + (size_t)b * bb;
            s[b * n + j] = scale_of(blk);
            for (int ch = 0; ch < 4; ch++)
                _mm256_storeu_ps(v + (size_t)j * ld + 32 * b + 8 * ch, chunk(blk, ch, q8));
        }
    return (hr__kvwide){v, s, NULL, n, hd, nb, ld};
}

/* The pass J over nk records, runs of records widened once */
AI void wide(hr__kvwide_pass_fn pass, const hr__kvwide_job *J, const uint8_t *rec, size_t rb,
             int nk, int hd, const bool q8) {
    _Alignas(32) float v[HR_KVWIDE_FLOATS + 64]; /* + 64: s not 4 KiB from v's rows */
    float s[HR_KVWIDE_MAX];
    int run = HR_KVWIDE_FLOATS / hr__kvwide_ld(hd);
    for (int j0 = 0; j0 < nk; j0 += run) {
        int n = nk - j0 < run ? nk - j0 : run;
        hr__kvwide W = widen(v, s, rec + (size_t)j0 * rb, rb, n, hd, q8);
        pass(J, j0, &W);
    }
}

/* M (1-4) query rows over nk records */
AI void dots_m(float *sc, size_t ldsc, const float *q, const int M, const uint8_t *rec,
               size_t rb, int nk, int hd, const bool q8, float scale) {
    size_t bb = q8 ? 34 : 18;
    for (int j = 0; j < nk; j++) {
        const uint8_t *row = rec + (size_t)j * rb;
        __m256 T[RB];
        for (int rr = 0; rr < M; rr++)
            T[rr] = _mm256_setzero_ps();
        for (int b = 0; b < hd / 32; b++) {
            const uint8_t *blk = row + (size_t)b * bb;
            __m256 A[RB];
            for (int rr = 0; rr < M; rr++)
                A[rr] = _mm256_setzero_ps();
            for (int ch = 0; ch < 4; ch++) {
                __m256 v = chunk(blk, ch, q8);
                for (int rr = 0; rr < M; rr++)
                    A[rr] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)rr * hd + 32 * b + 8 * ch),
                                            v, A[rr]);
            }
            __m256 d = _mm256_set1_ps(scale_of(blk));
            for (int rr = 0; rr < M; rr++)
                T[rr] = _mm256_fmadd_ps(d, A[rr], T[rr]);
        }
        for (int rr = 0; rr < M; rr++)
            sc[(size_t)rr * ldsc + j] = hr_hsum8_avx2(T[rr]) * scale;
    }
}

AI void dots(hr__kvwide_pass_fn pass, float *sc, size_t ldsc, const float *q, int nr,
             const uint8_t *rec, size_t rb, int nk, int hd, const bool q8, float scale) {
    if (nr >= WIDE) {
        wide(pass, &(hr__kvwide_job){.sc = sc, .ldsc = ldsc, .q = q, .scale = scale, .nr = nr}, rec,
             rb, nk, hd, q8);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *s = sc + (size_t)r0 * ldsc;
        const float *qr = q + (size_t)r0 * hd;
        switch (nr - r0 < RB ? nr - r0 : RB) { /* rows a pass, constant in each body */
        case 1: dots_m(s, ldsc, qr, 1, rec, rb, nk, hd, q8, scale); break;
        case 2: dots_m(s, ldsc, qr, 2, rec, rb, nk, hd, q8, scale); break;
        case 3: dots_m(s, ldsc, qr, 3, rec, rb, nk, hd, q8, scale); break;
        default: dots_m(s, ldsc, qr, 4, rec, rb, nk, hd, q8, scale); break;
        }
    }
}

/* M (1-4) output rows over nv records */
AI void axpys_m(float *o, const float *p, size_t ldp, const int M, const uint8_t *rec,
                size_t rb, int nv, int hd, const bool q8) {
    size_t bb = q8 ? 34 : 18;
    float W[RB][VRUN];
    for (int j0 = 0; j0 < nv; j0 += VRUN) {
        int n = nv - j0 < VRUN ? nv - j0 : VRUN;
        const uint8_t *r0 = rec + (size_t)j0 * rb;
        for (int b = 0; b < hd / 32; b++) {
            for (int j = 0; j < n; j++) {
                float d = scale_of(r0 + (size_t)j * rb + (size_t)b * bb);
                for (int rr = 0; rr < M; rr++)
                    W[rr][j] = p[(size_t)rr * ldp + j0 + j] * d;
            }
            for (int ch = 0; ch < 4; ch++) {
                __m256 O[RB];
                for (int rr = 0; rr < M; rr++)
                    O[rr] = _mm256_loadu_ps(o + (size_t)rr * hd + 32 * b + 8 * ch);
                for (int j = 0; j < n; j++) {
                    __m256 v = chunk(r0 + (size_t)j * rb + (size_t)b * bb, ch, q8);
                    for (int rr = 0; rr < M; rr++)
                        O[rr] = _mm256_fmadd_ps(_mm256_broadcast_ss(&W[rr][j]), v, O[rr]);
                }
                for (int rr = 0; rr < M; rr++)
                    _mm256_storeu_ps(o + (size_t)rr * hd + 32 * b + 8 * ch, O[rr]);
            }
        }
    }
}

AI void axpys(hr__kvwide_pass_fn pass, float *o, const float *p, size_t ldp, int nr,
              const uint8_t *rec, size_t rb, int nv, int hd, const bool q8) {
    if (nr >= WIDE) {
        wide(pass, &(hr__kvwide_job){.o = o, .p = p, .ldp = ldp, .nr = nr}, rec, rb, nv, hd, q8);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *orow = o + (size_t)r0 * hd;
        const float *pr = p + (size_t)r0 * ldp;
        switch (nr - r0 < RB ? nr - r0 : RB) {
        case 1: axpys_m(orow, pr, ldp, 1, rec, rb, nv, hd, q8); break;
        case 2: axpys_m(orow, pr, ldp, 2, rec, rb, nv, hd, q8); break;
        case 3: axpys_m(orow, pr, ldp, 3, rec, rb, nv, hd, q8); break;
        default: axpys_m(orow, pr, ldp, 4, rec, rb, nv, hd, q8); break;
        }
    }
}

/* the bodies of the entries below: the AVX2 table's runs widened once go
 * through hr__kvwide_pass_avx2, the AVX-512 table's through
 * hr__kvwide_pass_avx512 (the same bits) */
static void kvg_dots(hr__kvwide_pass_fn pass, float *sc, size_t ldsc, const float *q, int nr,
                     const void *rec, size_t rb, int nk, int hd, hr_dtype t, float scale) {
    if (t == HR_DTYPE_Q8_0) /* one body per type: the unpacking's branches fold away */
        dots(pass, sc, ldsc, q, nr, rec, rb, nk, hd, true, scale);
    else
        dots(pass, sc, ldsc, q, nr, rec, rb, nk, hd, false, scale);
}

static void kvg_axpys(hr__kvwide_pass_fn pass, float *o, const float *p, size_t ldp, int nr,
                      const void *rec, size_t rb, int nv, int hd, hr_dtype t) {
    if (t == HR_DTYPE_Q8_0)
        axpys(pass, o, p, ldp, nr, rec, rb, nv, hd, true);
    else
        axpys(pass, o, p, ldp, nr, rec, rb, nv, hd, false);
}

void hr__kvg_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                       size_t rb, int nk, int hd, hr_dtype t, float scale) {
    kvg_dots(hr__kvwide_pass_avx2, sc, ldsc, q, nr, rec, rb, nk, hd, t, scale);
}

void hr__kvg_axpys_avx2(float *o, const float *p, size_t ldp, int nr, const void *rec,
                        size_t rb, int nv, int hd, hr_dtype t) {
    kvg_axpys(hr__kvwide_pass_avx2, o, p, ldp, nr, rec, rb, nv, hd, t);
}

void hr__kvg_dots_avx2_w512(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                            size_t rb, int nk, int hd, hr_dtype t, float scale) {
    kvg_dots(hr__kvwide_pass_avx512, sc, ldsc, q, nr, rec, rb, nk, hd, t, scale);
}

void hr__kvg_axpys_avx2_w512(float *o, const float *p, size_t ldp, int nr, const void *rec,
                             size_t rb, int nv, int hd, hr_dtype t) {
    kvg_axpys(hr__kvwide_pass_avx512, o, p, ldp, nr, rec, rb, nv, hd, t);
}
