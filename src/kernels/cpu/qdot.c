/* Scalar definitions of the integer-activation path (see qdot.h). */
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/x16.h"

#include <math.h>

bool hr_qdot_has_min(hr_dtype t) {
    return t == HR_DTYPE_Q4_1 || t == HR_DTYPE_Q4_K || t == HR_DTYPE_Q5_K ||
           t == HR_DTYPE_AFFINE;
}

int hr_qdot_group(hr_dtype t) { return t == HR_DTYPE_Q6_K ? 16 : 32; }

int hr_qdot_offset(hr_dtype t) {
    switch (t) {
    case HR_DTYPE_Q8_0: return 128;
    case HR_DTYPE_Q4_0: return 8;
    case HR_DTYPE_Q6_K: return 32;
    default: return 0;
    }
}

int hr_qdot_act_block(hr_dtype t) {
    return t == HR_DTYPE_Q4_K || t == HR_DTYPE_Q5_K || t == HR_DTYPE_Q6_K ? 256 : 32;
}

/* max |x| over n values (NaNs ignored) */
static float block_amax(const float *x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

/* One block of n values: q[n] and the returned d (qdot.h) */
static float quant_block(const float *x, int n, int8_t *q) {
    float amax = block_amax(x, n);
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) {
        float v = nearbyintf(x[i] * id); /* NaN -> -127, as cvtps + clamp */
        q[i] = (int8_t)(v >= -127 ? (v <= 127 ? v : 127) : -127);
    }
    return d;
}

static int qsum(const int8_t *q, int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += q[i];
    return s;
}

void hr_qact_row(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                 float *s4) {
    for (int b = 0; b < k; b += 32) {
        float d = quant_block(x + b, 32, q + b);
        for (int l = b / 4; l < (b + 32) / 4; l++) {
            d4[l] = d;
            int sum = qsum(q + 4 * l, 4);
            c4[l] = -off * sum;
            s4[l] = d * (float)sum;
        }
    }
}

void hr_qact32_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                   float *s) {
    for (int b = 0; b < k / 32; b++) {
        d[b] = quant_block(x + 32 * b, 32, q + 32 * b);
        s[b] = d[b] * (float)qsum(q + 32 * b, 32);
        for (int g = 32 * b / group; g < 32 * (b + 1) / group; g++)
            c[g] = -off * qsum(q + g * group, group);
    }
}

/* the balanced base-256 digit of v (v - digit is a multiple of 256) */
static int digit(int v) { return (int)(int8_t)(uint8_t)(v & 0xFF); }

void hr_qactk_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                  int8_t *sd) {
    for (int B = 0; B < k / 256; B++) {
        d[B] = quant_block(x + 256 * B, 256, q + 256 * B);
        for (int j = 0; j < 8; j++) {
            int S = qsum(q + 256 * B + 32 * j, 32), lo = digit(S);
            sd[16 * B + j] = (int8_t)((S - lo) / 256);
            sd[16 * B + 8 + j] = (int8_t)lo;
        }
    }
    for (int g = 0; g < k / group; g++)
        c[g] = -off * qsum(q + g * group, group);
}

#define H24 8355711 /* 127 * (2^16 + 2^8 + 1): the largest |x_int| */

void hr_qact24_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                   float *s) {
    int8_t *hi = q, *mid = q + k, *lo = q + 2 * k;
    for (int b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = block_amax(xb, 32);
        float id = amax > 0 ? (float)H24 / amax : 0.0f;
        d[b] = amax / (float)H24;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            float v = nearbyintf(xb[i] * id); /* NaN -> -H24, as cvtps + clamp */
            int xi = (int)(v >= -H24 ? (v <= H24 ? v : H24) : -H24);
            int l = digit(xi), r = (xi - l) / 256, m = digit(r);
            hi[32 * b + i] = (int8_t)((r - m) / 256);
            mid[32 * b + i] = (int8_t)m;
            lo[32 * b + i] = (int8_t)l;
            sum += xi;
        }
        s[b] = d[b] * (float)sum;
    }
    for (int j = 0; j < 3; j++)
        for (int g = 0; g < k / group; g++)
            c[j * (k / group) + g] = -off * qsum(q + (size_t)j * k + g * group, group);
}

void hr_qdot_block(const hr_tensor *w, int64_t row, int64_t blk, uint8_t u[32],
                   float sw[2], float mn[2]) {
    if (w->layout == HR_LAYOUT_X16) {
        hr_x16_block(w, row, blk, u, sw, mn);
        return;
    }
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * hr_tensor_row_bytes(w);
    switch (w->dtype) {
    case HR_DTYPE_Q8_0: {
        const hr_block_q8_0 *B = (const hr_block_q8_0 *)r + blk;
        for (int i = 0; i < 32; i++)
            u[i] = (uint8_t)(B->qs[i] + 128);
        sw[0] = sw[1] = hr_f16_to_f32(B->d);
        mn[0] = mn[1] = 0;
        break;
    }
    case HR_DTYPE_Q4_0:
    case HR_DTYPE_Q4_1: {
        bool q41 = w->dtype == HR_DTYPE_Q4_1;
        const uint8_t *qs = q41 ? ((const hr_block_q4_1 *)r)[blk].qs
                                : ((const hr_block_q4_0 *)r)[blk].qs;
        uint16_t dh = q41 ? ((const hr_block_q4_1 *)r)[blk].d : ((const hr_block_q4_0 *)r)[blk].d;
        for (int i = 0; i < 16; i++) {
            u[i] = qs[i] & 0xF;
            u[i + 16] = qs[i] >> 4;
        }
        sw[0] = sw[1] = hr_f16_to_f32(dh);
        mn[0] = mn[1] = q41 ? hr_f16_to_f32(((const hr_block_q4_1 *)r)[blk].m) : 0.0f;
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        bool five = w->dtype == HR_DTYPE_Q5_K;
        const hr_block_q4_k *b4 = (const hr_block_q4_k *)r + blk / 8;
        const hr_block_q5_k *b5 = (const hr_block_q5_k *)r + blk / 8;
        int s = (int)(blk % 8), isc, im;
        hr_scale_min_k4(s, five ? b5->scales : b4->scales, &isc, &im);
        const uint8_t *q = (five ? b5->qs : b4->qs) + (s / 2) * 32;
        for (int l = 0; l < 32; l++) {
            u[l] = (s & 1) ? q[l] >> 4 : q[l] & 0xF;
            if (five)
                u[l] |= (uint8_t)(((b5->qh[l] >> s) & 1) << 4);
        }
        sw[0] = sw[1] = hr_f16_to_f32(five ? b5->d : b4->d) * (float)isc;
        mn[0] = mn[1] = -(hr_f16_to_f32(five ? b5->dmin : b4->dmin) * (float)im);
        break;
    }
    case HR_DTYPE_Q6_K: {
        const hr_block_q6_k *B = (const hr_block_q6_k *)r + blk / 8;
        int e0 = (int)(blk % 8) * 32, h = e0 / 128, rr = (e0 % 128) / 32;
        for (int l = 0; l < 32; l++) {
            uint8_t lo = B->ql[h * 64 + (rr & 1) * 32 + l];
            u[l] = (uint8_t)((rr < 2 ? lo & 0xF : lo >> 4) |
                             (((B->qh[h * 32 + l] >> (2 * rr)) & 3) << 4));
        }
        float d = hr_f16_to_f32(B->d);
        for (int i = 0; i < 2; i++) {
            sw[i] = d * (float)B->scales[e0 / 16 + i];
            mn[i] = 0;
        }
        break;
    }
    default:
        break;
    }
}

void hr_qdot_kscales(const hr_tensor *w, int64_t row, int64_t sb, int sc[16], int mn[8],
                     float dd[2]) {
    if (w->layout == HR_LAYOUT_X16) {
        hr_x16_kscales(w, row, sb, sc, mn, dd);
        return;
    }
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * hr_tensor_row_bytes(w);
    if (w->dtype == HR_DTYPE_Q6_K) {
        const hr_block_q6_k *B = (const hr_block_q6_k *)r + sb;
        for (int g = 0; g < 16; g++)
            sc[g] = B->scales[g];
        dd[0] = hr_f16_to_f32(B->d);
        dd[1] = 0;
        return;
    }
    bool five = w->dtype == HR_DTYPE_Q5_K;
    const hr_block_q4_k *b4 = (const hr_block_q4_k *)r + sb;
    const hr_block_q5_k *b5 = (const hr_block_q5_k *)r + sb;
    for (int j = 0; j < 8; j++)
        hr_scale_min_k4(j, five ? b5->scales : b4->scales, &sc[j], &mn[j]);
    dd[0] = hr_f16_to_f32(five ? b5->d : b4->d);
    dd[1] = hr_f16_to_f32(five ? b5->dmin : b4->dmin);
}

void hr__gemm_i8_scalar(float *y, int ldy, const hr_qact *x, int n,
                        const hr_tensor *w, int m0, int m1) {
    int k = x->k;
    for (int j = m0; j < m1; j++)
        for (int i = 0; i < n; i++) {
            const int8_t *q = x->q + (size_t)i * k;
            const float *d4 = x->d4 + (size_t)i * k / 4, *s4 = x->s4 + (size_t)i * k / 4;
            const int32_t *c4 = x->c4 + (size_t)i * k / 4;
            float acc = 0;
            for (int blk = 0; blk < k / 32; blk++) {
                uint8_t u[32];
                float sw[2], mn[2];
                hr_qdot_block(w, j, blk, u, sw, mn);
                for (int l = 0; l < 8; l++) {
                    int e = blk * 32 + 4 * l, dot = c4[e / 4];
                    for (int t = 0; t < 4; t++)
                        dot += (int)u[4 * l + t] * (int)q[e + t];
                    acc += sw[l / 4] * d4[e / 4] * (float)dot + mn[l / 4] * s4[e / 4];
                }
            }
            y[(size_t)i * ldy + j] = acc;
        }
}

/* the K-quant definition (block 256) for output (i, j) */
static float kquant_dot(const hr_qact32 *x, int i, const hr_tensor *w, int j) {
    int k = x->k, G = x->group;
    bool has_min = hr_qdot_has_min(w->dtype);
    const int8_t *q = x->q + (size_t)i * k, *sd = x->sd + (size_t)i * (k / 16);
    const int32_t *c = x->c + (size_t)i * (k / G);
    float acc = 0;
    for (int B = 0; B < k / 256; B++) {
        int sc[16], mn[8];
        float dd[2];
        hr_qdot_kscales(w, j, B, sc, mn, dd);
        int32_t I = 0, M = 0;
        for (int blk = 0; blk < 8; blk++) {
            uint8_t u[32];
            float sw[2], mnf[2];
            hr_qdot_block(w, j, 8 * B + blk, u, sw, mnf);
            for (int e0 = 0; e0 < 32; e0 += G) {
                int e = 256 * B + 32 * blk + e0, dot = c[e / G];
                for (int t = 0; t < G; t++)
                    dot += (int)u[e0 + t] * (int)q[e + t];
                I += sc[e / G % (256 / G)] * dot;
            }
            if (has_min)
                M += mn[blk] * (256 * sd[16 * B + blk] + sd[16 * B + 8 + blk]);
        }
        float dB = x->d[(size_t)i * (k / 256) + B];
        acc = fmaf((float)I, dd[0] * dB, acc);
        if (has_min)
            acc = fmaf((float)M, -(dd[1] * dB), acc);
    }
    return acc;
}

void hr__gemm_x16_scalar(float *y, int ldy, const hr_qact32 *x, int n, const hr_tensor *w,
                         int m0, int m1) {
    if (x->block == 256) {
        for (int j = m0; j < m1; j++)
            for (int i = 0; i < n; i++)
                y[(size_t)i * ldy + j] = kquant_dot(x, i, w, j);
        return;
    }
    int k = x->k, G = x->group, D = x->digits == 3 ? 3 : 1;
    bool has_min = hr_qdot_has_min(w->dtype);
    for (int j = m0; j < m1; j++)
        for (int i = 0; i < n; i++) {
            const int8_t *q = x->q + (size_t)i * D * k;
            const float *d = x->d + (size_t)i * (k / 32), *s = x->s + (size_t)i * (k / 32);
            const int32_t *c = x->c + (size_t)i * D * (k / G);
            float acc = 0;
            for (int blk = 0; blk < k / 32; blk++) {
                uint8_t u[32];
                float sw[2], mn[2];
                hr_qdot_block(w, j, blk, u, sw, mn);
                for (int e0 = 0; e0 < 32; e0 += G) {
                    int dot[3];
                    for (int p = 0; p < D; p++) {
                        dot[p] = c[p * (k / G) + (32 * blk + e0) / G];
                        for (int e = e0; e < e0 + G; e++)
                            dot[p] += (int)u[e] * (int)q[(size_t)p * k + 32 * blk + e];
                    }
                    float v = D == 1 ? (float)dot[0]
                                     : fmaf((float)dot[0], 65536.0f,
                                            (float)(dot[1] * 256 + dot[2]));
                    acc = fmaf(v, sw[e0 / 16] * d[blk], acc);
                }
                if (has_min)
                    acc = fmaf(mn[0], s[blk], acc);
            }
            y[(size_t)i * ldy + j] = acc;
        }
}
