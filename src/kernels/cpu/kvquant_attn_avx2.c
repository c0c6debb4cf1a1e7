/* kvq_dots and kvq_axpys (kvquant_attn.c defines them) with AVX2: a
 * record's chunks of 8 layout positions are unpacked to floats once for up
 * to 4 query rows (a GQA group), 8 bits by zero extension, 4 bits as a
 * byte's low nibbles and its high nibbles (the layout's evens and odds),
 * the other widths through the byte shuffle of kvquant_avx2.c; for more
 * query and output rows (a prefill tile's tokens x the group) a run of
 * records is widened once for all of them (kvwide_avx2.c). The query rows
 * come prepared (hr_kvq_prep: layout order, group sums), once a task.
 * Every lane runs the reference's fma chain, so the bits are the scalar's;
 * the AVX-512 table uses these too. */
#include "kernels/cpu/hsum_avx2.h"
#include "kernels/cpu/kvquant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define RB 4 /* query rows a pass */
#define VRUN 32 /* records whose weights a pass of kvq_axpys holds */
#define WIDE 5  /* query or output rows from which a run of records is widened once */

typedef struct unpack {
    __m256i ctl, shift, mask;
} unpack;

AI unpack unpack_new(const int bits) {
    unpack u;
    __m256i bit = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                     _mm256_set1_epi32(bits));
    __m256i lo = _mm256_srli_epi32(bit, 3), hi = _mm256_add_epi32(lo, _mm256_set1_epi32(1));
    u.shift = _mm256_and_si256(bit, _mm256_set1_epi32(7));
    u.ctl = _mm256_or_si256(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)),
                            _mm256_set1_epi32((int)0x80800000u));
    u.mask = _mm256_set1_epi32((1 << bits) - 1);
    return u;
}

/* chunk ch (layout positions 8 ch ..) of the quants q as floats */
AI __m256 chunk(const uint8_t *q, int ch, const int bits, const unpack *u) {
    if (bits == 8)
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + 8 * ch))));
    if (bits == 4) {
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + 8 * (ch / 2))));
        b = ch & 1 ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
        return _mm256_cvtepi32_ps(b);
    }
    long long raw; /* 8 bytes from the chunk's first: inside the record */
    memcpy(&raw, q + (size_t)ch * bits, 8);
    __m256i v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_cvtsi64_si128(raw)), u->ctl);
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, u->shift), u->mask));
}

/* chunks ch and ch + 1 (ch even: at 4 bits the same 8 bytes' low and
 * high nibbles) */
AI void chunk2(const uint8_t *q, int ch, const int bits, const unpack *u, __m256 *v0,
               __m256 *v1) {
    if (bits == 4) {
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(q + 4 * ch)));
        *v0 = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)));
        *v1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
        return;
    }
    *v0 = chunk(q, ch, bits, u);
    *v1 = chunk(q, ch + 1, bits, u);
}

AI float rec_f32(const uint8_t *q, size_t at) {
    float x;
    memcpy(&x, q + at, 4);
    return x;
}

/* M (1-4) query rows (hr_kvq_prep's) over nk records */
AI void dots_m(float *sc, size_t ldsc, const float *qp, const float *Q, const int M,
               const uint8_t *rec, size_t rb, int nk, int hd, const int bits, int group,
               float scale) {
    int ng = hd / group, cpg = group / 8;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    unpack u = unpack_new(bits);
    const float *qv[RB];
    for (int rr = 0; rr < M; rr++)
        qv[rr] = qp + (size_t)rr * hd;
    for (int j = 0; j < nk; j++) {
        const uint8_t *c = rec + (size_t)j * rb;
        __m256 T[RB];
        for (int rr = 0; rr < M; rr++)
            T[rr] = _mm256_setzero_ps();
        for (int g = 0; g < ng; g++) {
            __m256 A[RB];
            for (int rr = 0; rr < M; rr++)
                A[rr] = _mm256_setzero_ps();
            for (int ch = g * cpg; ch < (g + 1) * cpg; ch += 2) { /* cpg is even */
                __m256 v0, v1;
                chunk2(c, ch, bits, &u, &v0, &v1);
                for (int rr = 0; rr < M; rr++) {
                    A[rr] = _mm256_fmadd_ps(_mm256_loadu_ps(qv[rr] + 8 * ch), v0, A[rr]);
                    A[rr] = _mm256_fmadd_ps(_mm256_loadu_ps(qv[rr] + 8 * ch + 8), v1, A[rr]);
                }
            }
            __m256 s = _mm256_set1_ps(rec_f32(c, qb + 4 * (size_t)g));
            for (int rr = 0; rr < M; rr++)
                T[rr] = _mm256_fmadd_ps(s, A[rr], T[rr]);
        }
        for (int rr = 0; rr < M; rr++) {
            float d = hr_hsum8_avx2(T[rr]);
            for (int g = 0; g < ng; g++)
                d = fmaf(rec_f32(c, qb + 4 * (size_t)(ng + g)), Q[rr * ng + g], d);
            sc[(size_t)rr * ldsc + j] = d * scale;
        }
    }
}

/* Records [0, n) widened (kvquant.h hr__kvwide: the codes in layout order,
 * the groups' s and b) into v, s, b */
AI hr__kvwide widen(float *v, float *s, float *b, const uint8_t *rec, size_t rb, int n, int hd,
                    const int bits, int group) {
    int ng = hd / group, cpg = group / 8, ld = hr__kvwide_ld(hd);
    size_t qb = (size_t)hd * (size_t)bits / 8;
    unpack u = unpack_new(bits);
    for (int j = 0; j < n; j++) {
        const uint8_t *c = rec + (size_t)j * rb;
        for (int g = 0; g < ng; g++) {
            s[g * n + j] = rec_f32(c, qb + 4 * (size_t)g);
            b[g * n + j] = rec_f32(c, qb + 4 * (size_t)(ng + g));
            for (int ch = g * cpg; ch < (g + 1) * cpg; ch += 2) { /* cpg is even */
                __m256 v0, v1;
                chunk2(c, ch, bits, &u, &v0, &v1);
                _mm256_storeu_ps(v + (size_t)j * ld + 8 * ch, v0);
                _mm256_storeu_ps(v + (size_t)j * ld + 8 * ch + 8, v1);
            }
        }
    }
    return (hr__kvwide){v, s, b, n, hd, ng, ld};
}

/* The pass J over nk records, runs of records widened once */
AI void wide(hr__kvwide_pass_fn pass, const hr__kvwide_job *J, const uint8_t *rec, size_t rb,
             int nk, int hd, const int bits, int group) {
    int run = HR_KVWIDE_FLOATS / hr__kvwide_ld(hd);
    _Alignas(32) float v[HR_KVWIDE_FLOATS + 64]; /* + 64: s not 4 KiB from v's rows */
    float s[HR_KVWIDE_MAX], b[HR_KVWIDE_MAX];
    for (int j0 = 0; j0 < nk; j0 += run) {
        int n = nk - j0 < run ? nk - j0 : run;
        hr__kvwide W = widen(v, s, b, rec + (size_t)j0 * rb, rb, n, hd, bits, group);
        pass(J, j0, &W);
    }
}

AI void dots(hr__kvwide_pass_fn pass, float *sc, size_t ldsc, const float *qp, const float *Q,
             int nr, const uint8_t *rec, size_t rb, int nk, int hd, const int bits, int group,
             float scale) {
    if (nr >= WIDE) {
        wide(pass,
             &(hr__kvwide_job){.sc = sc, .ldsc = ldsc, .q = qp, .qsum = Q, .scale = scale,
                               .nr = nr},
             rec, rb, nk, hd, bits, group);
        return;
    }
    int ng = hd / group;
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *s = sc + (size_t)r0 * ldsc;
        const float *qr = qp + (size_t)r0 * hd, *Qr = Q + (size_t)r0 * ng;
        switch (nr - r0 < RB ? nr - r0 : RB) { /* rows a pass, constant in each body */
        case 1: dots_m(s, ldsc, qr, Qr, 1, rec, rb, nk, hd, bits, group, scale); break;
        case 2: dots_m(s, ldsc, qr, Qr, 2, rec, rb, nk, hd, bits, group, scale); break;
        case 3: dots_m(s, ldsc, qr, Qr, 3, rec, rb, nk, hd, bits, group, scale); break;
        default: dots_m(s, ldsc, qr, Qr, 4, rec, rb, nk, hd, bits, group, scale); break;
        }
    }
}

/* M (1-4) output rows over nv records */
AI void axpys_m(float *o, float *bias, const float *p, size_t ldp, const int M,
                const uint8_t *rec, size_t rb, int nv, int hd, const int bits, int group) {
    int ng = hd / group, cpg = group / 8;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    unpack u = unpack_new(bits);
    float W[RB][VRUN], S[VRUN], B[VRUN];
    for (int j0 = 0; j0 < nv; j0 += VRUN) {
        int n = nv - j0 < VRUN ? nv - j0 : VRUN;
        const uint8_t *c0 = rec + (size_t)j0 * rb;
        for (int g = 0; g < ng; g++) {
            for (int j = 0; j < n; j++) {
                S[j] = rec_f32(c0 + (size_t)j * rb, qb + 4 * (size_t)g);
                B[j] = rec_f32(c0 + (size_t)j * rb, qb + 4 * (size_t)(ng + g));
            }
            for (int rr = 0; rr < M; rr++) {
                const float *pr = p + (size_t)rr * ldp + j0;
                float b = bias[(size_t)rr * ng + g];
                for (int j = 0; j < n; j++) {
                    W[rr][j] = pr[j] * S[j];
                    b = fmaf(pr[j], B[j], b);
                }
                bias[(size_t)rr * ng + g] = b;
            }
            for (int ch = g * cpg; ch < (g + 1) * cpg; ch += 2) { /* cpg is even */
                __m256 O0[RB], O1[RB];
                for (int rr = 0; rr < M; rr++) {
                    O0[rr] = _mm256_loadu_ps(o + (size_t)rr * hd + 8 * ch);
                    O1[rr] = _mm256_loadu_ps(o + (size_t)rr * hd + 8 * ch + 8);
                }
                for (int j = 0; j < n; j++) {
                    __m256 v0, v1;
                    chunk2(c0 + (size_t)j * rb, ch, bits, &u, &v0, &v1);
                    for (int rr = 0; rr < M; rr++) {
                        __m256 w = _mm256_broadcast_ss(&W[rr][j]);
                        O0[rr] = _mm256_fmadd_ps(w, v0, O0[rr]);
                        O1[rr] = _mm256_fmadd_ps(w, v1, O1[rr]);
                    }
                }
                for (int rr = 0; rr < M; rr++) {
                    _mm256_storeu_ps(o + (size_t)rr * hd + 8 * ch, O0[rr]);
                    _mm256_storeu_ps(o + (size_t)rr * hd + 8 * ch + 8, O1[rr]);
                }
            }
        }
    }
}

AI void axpys(hr__kvwide_pass_fn pass, float *o, float *bias, const float *p, size_t ldp, int nr,
              const uint8_t *rec, size_t rb, int nv, int hd, const int bits, int group) {
    int ng = hd / group;
    if (nr >= WIDE) {
        wide(pass, &(hr__kvwide_job){.o = o, .bias = bias, .p = p, .ldp = ldp, .nr = nr}, rec, rb,
             nv, hd, bits, group);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += RB) {
        float *orow = o + (size_t)r0 * hd, *b = bias + (size_t)r0 * ng;
        const float *pr = p + (size_t)r0 * ldp;
        switch (nr - r0 < RB ? nr - r0 : RB) {
        case 1: axpys_m(orow, b, pr, ldp, 1, rec, rb, nv, hd, bits, group); break;
        case 2: axpys_m(orow, b, pr, ldp, 2, rec, rb, nv, hd, bits, group); break;
        case 3: axpys_m(orow, b, pr, ldp, 3, rec, rb, nv, hd, bits, group); break;
        default: axpys_m(orow, b, pr, ldp, 4, rec, rb, nv, hd, bits, group); break;
        }
    }
}

/* the bodies of the entries below: the AVX2 table's runs widened once go
 * through hr__kvwide_pass_avx2, the AVX-512 table's through
 * hr__kvwide_pass_avx512 (the same bits) */
static void kvq_dots(hr__kvwide_pass_fn pass, float *sc, size_t ldsc, const float *qp,
                     const float *qsum, int nr, const void *rec, size_t rb, int nk, int hd,
                     int bits, int group, float scale) {
    switch (bits) { /* one body per width: the unpacking's branches fold away */
    case 8: dots(pass, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, 8, group, scale); break;
    case 4: dots(pass, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, 4, group, scale); break;
    case 6: dots(pass, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, 6, group, scale); break;
    case 3: dots(pass, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, 3, group, scale); break;
    default: dots(pass, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, 2, group, scale); break;
    }
}

static void kvq_axpys(hr__kvwide_pass_fn pass, float *o, float *bias, const float *p, size_t ldp,
                      int nr, const void *rec, size_t rb, int nv, int hd, int bits, int group) {
    switch (bits) {
    case 8: axpys(pass, o, bias, p, ldp, nr, rec, rb, nv, hd, 8, group); break;
    case 4: axpys(pass, o, bias, p, ldp, nr, rec, rb, nv, hd, 4, group); break;
    case 6: axpys(pass, o, bias, p, ldp, nr, rec, rb, nv, hd, 6, group); break;
    case 3: axpys(pass, o, bias, p, ldp, nr, rec, rb, nv, hd, 3, group); break;
    default: axpys(pass, o, bias, p, ldp, nr, rec, rb, nv, hd, 2, group); break;
    }
}

void hr__kvq_dots_avx2(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                       const void *rec, size_t rb, int nk, int hd, int bits, int group,
                       float scale) {
    kvq_dots(hr__kvwide_pass_avx2, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, bits, group, scale);
}

void hr__kvq_axpys_avx2(float *o, float *bias, const float *p, size_t ldp, int nr,
                        const void *rec, size_t rb, int nv, int hd, int bits, int group) {
    kvq_axpys(hr__kvwide_pass_avx2, o, bias, p, ldp, nr, rec, rb, nv, hd, bits, group);
}

void hr__kvq_dots_avx2_w512(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                            const void *rec, size_t rb, int nk, int hd, int bits, int group,
                            float scale) {
    kvq_dots(hr__kvwide_pass_avx512, sc, ldsc, qp, qsum, nr, rec, rb, nk, hd, bits, group, scale);
}

void hr__kvq_axpys_avx2_w512(float *o, float *bias, const float *p, size_t ldp, int nr,
                             const void *rec, size_t rb, int nv, int hd, int bits, int group) {
    kvq_axpys(hr__kvwide_pass_avx512, o, bias, p, ldp, nr, rec, rb, nv, hd, bits, group);
}
