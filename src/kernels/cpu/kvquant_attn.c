/* Attention read straight from quantized KV row records (kvquant.h): the
 * scalar reference of kvq_dots and kvq_axpys (cpu.h), and the step that
 * turns kvq_axpys' accumulators into output rows.
 *
 * A record's hd elements are visited in its layout order: the identity,
 * except at 4 bits, where each run of 16 elements is visited as its 8 even
 * elements, then its 8 odd ones (a byte's two nibbles go to two vectors in
 * the ISAs' unpacking). Layout position P = 8c + l is lane l of chunk c;
 * a group's chunks are consecutive (groups are multiples of 16).
 *
 * Score of query row q over a record (scale s_g, bias b_g, quants c):
 *   A_g[l] = fma chain over the chunks of group g in order:
 *            A_g[l] = fma(q[e], c[e], A_g[l]), e = element at 8c + l
 *   T[l]   = fma chain over the groups in order: T[l] = fma(s_g, A_g[l], T[l])
 *   d      = (T[0] + T[4] + T[2] + T[6]) + (T[1] + T[5] + T[3] + T[7]) in
 *            the AVX2 hsum order: u[l] = T[l] + T[l + 4]; v[l] = u[l] + u[l + 2];
 *            d = v[0] + v[1]
 *   d      = fma chain over the groups: d = fma(b_g, Q_g, d), Q_g the sum of
 *            q over group g in index order (plain float adds)
 *   score  = d * scale
 * which is q . (s c + b) up to rounding (within 1e-5 of the attention over
 * the dequantized rows: test_kvquant).
 *
 * Output of query row r over records j = 0, 1, .. (weights p_j): in layout
 * order, o[P] = fma(p_j * s_jg, c_j[e], o[P]) key by key, and per group
 * B_g = fma(p_j, b_jg, B_g); kvq_finish then writes y[e] = o[P] + B_g. */
#include "kernels/cpu/kvquant.h"

#include <math.h>
#include <string.h>

static inline float code(const uint8_t *q, int e, int bits) {
    size_t bit = (size_t)e * (size_t)bits;
    unsigned v = q[bit >> 3];
    if ((bit & 7) + (unsigned)bits > 8)
        v |= (unsigned)q[(bit >> 3) + 1] << 8;
    return (float)((v >> (bit & 7)) & ((1u << bits) - 1));
}

static inline float rec_f32(const uint8_t *q, size_t at) {
    float x;
    memcpy(&x, q + at, 4);
    return x;
}

float hr__kvq_hsum8(const float *t) {
    float u[4], v[2];
    for (int l = 0; l < 4; l++)
        u[l] = t[l] + t[l + 4];
    for (int l = 0; l < 2; l++)
        v[l] = u[l] + u[l + 2];
    return v[0] + v[1];
}

void hr_kvq_prep(float *qp, float *qsum, const float *q, int nr, int hd, int bits, int group) {
    int ng = hd / group;
    for (int r = 0; r < nr; r++) {
        const float *qr = q + (size_t)r * hd;
        for (int P = 0; P < hd; P++)
            qp[(size_t)r * hd + P] = qr[hr_kvq_elem(P, bits)];
        for (int g = 0; g < ng; g++) {
            float Q = 0;
            for (int i = g * group; i < (g + 1) * group; i++)
                Q += qr[i];
            qsum[(size_t)r * ng + g] = Q;
        }
    }
}

void hr__kvq_dots_scalar(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                         const void *rec, size_t rb, int nk, int hd, int bits, int group,
                         float scale) {
    int ng = hd / group;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    for (int r = 0; r < nr; r++) {
        const float *qr = qp + (size_t)r * hd;
        for (int j = 0; j < nk; j++) {
            const uint8_t *c = (const uint8_t *)rec + (size_t)j * rb;
            float T[8] = {0};
            for (int g = 0; g < ng; g++) {
                float A[8] = {0};
                for (int P = g * group; P < (g + 1) * group; P++)
                    A[P % 8] = fmaf(qr[P], code(c, hr_kvq_elem(P, bits), bits), A[P % 8]);
                float s = rec_f32(c, qb + 4 * (size_t)g);
                for (int l = 0; l < 8; l++)
                    T[l] = fmaf(s, A[l], T[l]);
            }
            float d = hr__kvq_hsum8(T);
            for (int g = 0; g < ng; g++)
                d = fmaf(rec_f32(c, qb + 4 * (size_t)(ng + g)), qsum[(size_t)r * ng + g], d);
            sc[(size_t)r * ldsc + j] = d * scale;
        }
    }
}

void hr__kvq_axpys_scalar(float *o, float *bias, const float *p, size_t ldp, int nr,
                          const void *rec, size_t rb, int nv, int hd, int bits, int group) {
    int ng = hd / group;
    size_t qb = (size_t)hd * (size_t)bits / 8;
    for (int r = 0; r < nr; r++) {
        float *orow = o + (size_t)r * hd, *br = bias + (size_t)r * ng;
        for (int j = 0; j < nv; j++) {
            const uint8_t *c = (const uint8_t *)rec + (size_t)j * rb;
            float pj = p[(size_t)r * ldp + j];
            for (int g = 0; g < ng; g++) {
                float w = pj * rec_f32(c, qb + 4 * (size_t)g);
                for (int P = g * group; P < (g + 1) * group; P++)
                    orow[P] = fmaf(w, code(c, hr_kvq_elem(P, bits), bits), orow[P]);
                br[g] = fmaf(pj, rec_f32(c, qb + 4 * (size_t)(ng + g)), br[g]);
            }
        }
    }
}

void hr_kvq_finish(float *o, const float *bias, int hd, int bits, int group) {
    float t[1024];
    memcpy(t, o, (size_t)hd * sizeof(float));
    for (int P = 0; P < hd; P++)
        o[hr_kvq_elem(P, bits)] = t[P] + bias[P / group];
}
