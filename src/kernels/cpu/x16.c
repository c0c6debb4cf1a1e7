/* The x16 layout (x16.h): packing at load and the scalar read-back. */
#include "kernels/cpu/x16.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"

#include <string.h>

/* byte offsets inside a unit */
enum {
    K_D = 0, K_DMIN = 32, K_SC = 64, K_MN = 192, K_NIB = 320, K_HB = 2368, /* Q4_K, Q5_K */
    S_D = 0, S_SC = 32, S_NIB = 288, S_HB = 2336,                       /* Q6_K */
};

/* Q4_K/Q5_K: block j's min of row r (x16.h's mn[2][16][4]) */
static size_t kmn_at(int j, int r) { return K_MN + 64 * (j / 4) + 4 * r + j % 4; }

static bool affine(const hr_tensor *w) { return w->dtype == HR_DTYPE_AFFINE; }

bool hr_x16_supports(const hr_tensor *w) {
    if (affine(w))
        return (w->q.bits == 4 || w->q.bits == 8) &&
               (w->q.group == 32 || w->q.group == 64 || w->q.group == 128);
    return hr_x16_unit_bytes(w) != 0;
}

int hr_x16_unit_cols(const hr_tensor *w) {
    hr_dtype t = w->dtype;
    if (affine(w))
        return w->q.group;
    return t == HR_DTYPE_Q4_K || t == HR_DTYPE_Q5_K || t == HR_DTYPE_Q6_K ? 256 : 32;
}

size_t hr_x16_unit_bytes(const hr_tensor *w) {
    switch (w->dtype) {
    case HR_DTYPE_Q8_0: return 32 + 512;
    case HR_DTYPE_Q4_0: return 32 + 256;
    case HR_DTYPE_Q4_1: return 64 + 256;
    case HR_DTYPE_Q4_K: return K_HB;
    case HR_DTYPE_Q5_K: return K_HB + 512;
    case HR_DTYPE_Q6_K: return S_HB + 1024;
    case HR_DTYPE_AFFINE: return 64 + (size_t)(w->q.group / 32) * (w->q.bits == 4 ? 256 : 512);
    default: return 0;
    }
}

size_t hr_x16_bytes(const hr_tensor *w) {
    return (size_t)(w->shape[0] / 16) * (size_t)(w->shape[1] / hr_x16_unit_cols(w)) *
           hr_x16_unit_bytes(w);
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* One unit of row r of the panel: src is the row's GGUF block(s), dst the
 * panel's unit, b its index in the row. */
static void pack_unit(hr_dtype t, const uint8_t *src, int r, int64_t b, uint8_t *dst) {
    switch (t) {
    case HR_DTYPE_Q8_0: {
        const hr_block_q8_0 *B = (const hr_block_q8_0 *)src;
        put16(dst + hr_x16_d_at(b, 512) + 2 * r, B->d);
        for (int c = 0; c < 8; c++)
            for (int i = 0; i < 4; i++)
                dst[hr_x16_q_at(b) + 64 * c + 4 * r + i] = (uint8_t)B->qs[4 * c + i] ^ 0x80;
        return;
    }
    case HR_DTYPE_Q4_0: {
        const hr_block_q4_0 *B = (const hr_block_q4_0 *)src;
        put16(dst + hr_x16_d_at(b, 256) + 2 * r, B->d);
        for (int c = 0; c < 4; c++)
            memcpy(dst + hr_x16_q_at(b) + 64 * c + 4 * r, B->qs + 4 * c, 4);
        return;
    }
    case HR_DTYPE_Q4_1: {
        const hr_block_q4_1 *B = (const hr_block_q4_1 *)src;
        put16(dst + 2 * r, B->d);
        put16(dst + 32 + 2 * r, B->m);
        for (int c = 0; c < 4; c++)
            memcpy(dst + 64 + 64 * c + 4 * r, B->qs + 4 * c, 4);
        return;
    }
    default:
        break;
    }
    /* the K-quants, through their u values (hr_qdot_block's definition) */
    hr_tensor one = {.dtype = t, .ndim = 2, .shape = {1, 256}, .data = src};
    uint8_t u[8][32];
    float sw[2], mn[2];
    for (int e = 0; e < 8; e++)
        hr_qdot_block(&one, 0, e, u[e], sw, mn);
    bool six = t == HR_DTYPE_Q6_K;
    uint8_t *nib = dst + (six ? S_NIB : K_NIB);
    for (int s = 0; s < 4; s++)
        for (int c = 0; c < 8; c++) {
            unsigned hb = 0;
            for (int i = 0; i < 4; i++) {
                unsigned a = u[2 * s][4 * c + i], b = u[2 * s + 1][4 * c + i];
                nib[(s * 8 + c) * 64 + 4 * r + i] = (uint8_t)((a & 0xF) | (b & 0xF) << 4);
                if (six) { /* chunk c even: bits 0-3 of the byte, odd: 4-7 */
                    uint8_t *h = dst + S_HB + 64 * (4 * s + c / 2) + 4 * r + i;
                    unsigned top = ((a >> 4) | (b >> 4) << 2) << (4 * (c & 1));
                    *h = (uint8_t)(c & 1 ? *h | top : top);
                } else
                    hb |= (a >> 4) << i | (b >> 4) << (4 + i);
            }
            if (t == HR_DTYPE_Q5_K)
                dst[K_HB + (s * 8 + c) * 16 + r] = (uint8_t)hb;
        }
    if (six) {
        const hr_block_q6_k *B = (const hr_block_q6_k *)src;
        put16(dst + S_D + 2 * r, B->d);
        for (int g = 0; g < 16; g++)
            dst[S_SC + 16 * g + r] = (uint8_t)B->scales[g];
        return;
    }
    const hr_block_q4_k *B4 = (const hr_block_q4_k *)src;
    const hr_block_q5_k *B5 = (const hr_block_q5_k *)src;
    bool five = t == HR_DTYPE_Q5_K;
    put16(dst + K_D + 2 * r, five ? B5->d : B4->d);
    put16(dst + K_DMIN + 2 * r, five ? B5->dmin : B4->dmin);
    for (int e = 0; e < 8; e++) {
        int sc, m;
        hr_scale_min_k4(e, five ? B5->scales : B4->scales, &sc, &m);
        dst[K_SC + 16 * e + r] = (uint8_t)sc;
        dst[kmn_at(e, r)] = (uint8_t)m;
    }
}

/* Unit b (group b) of row `row` of an affine weight, as row r of its panel */
static bool pack_affine_unit(const hr_tensor *w, int64_t row, int64_t b, int r, uint8_t *dst) {
    uint16_t s, m;
    if (!hr_affine_f16_params(w, row, b, &s, &m))
        return false;
    put16(dst + 2 * r, s);
    put16(dst + 32 + 2 * r, m);
    int bits = w->q.bits;
    /* the group's q: element i at byte i (8-bit) or nibble i of byte i / 2,
     * low first (4-bit) */
    const uint8_t *src = (const uint8_t *)w->data + (size_t)row * hr_tensor_row_bytes(w) +
                         (size_t)b * (size_t)w->q.group * (size_t)bits / 8;
    for (int e = 0; e < w->q.group / 32; e++, src += 4 * bits) {
        uint8_t *blk = dst + 64 + (size_t)e * (bits == 4 ? 256 : 512) + 4 * r;
        if (bits == 8) {
            for (int c = 0; c < 8; c++)
                memcpy(blk + 64 * c, src + 4 * c, 4);
            continue;
        }
        for (int c = 0; c < 4; c++)
            for (int t = 0; t < 4; t++) {
                int i = 4 * c + t, j = i + 16;
                unsigned lo = src[i / 2] >> (4 * (i & 1)) & 0xF;
                unsigned hi = src[j / 2] >> (4 * (j & 1)) & 0xF;
                blk[64 * c + t] = (uint8_t)(lo | hi << 4);
            }
    }
    return true;
}

bool hr_x16_pack(const hr_tensor *w, int64_t p0, int64_t p1, uint8_t *dst) {
    int64_t units = w->shape[1] / hr_x16_unit_cols(w);
    size_t ub = hr_x16_unit_bytes(w), rb = hr_tensor_row_bytes(w);
    size_t sb = rb / (size_t)units; /* GGUF bytes of one unit of a row */
    for (int64_t p = p0; p < p1; p++)
        for (int r = 0; r < 16; r++) {
            int64_t row = 16 * p + r;
            for (int64_t b = 0; b < units; b++) {
                uint8_t *U = dst + ((size_t)p * (size_t)units + (size_t)b) * ub;
                if (affine(w)) {
                    if (!pack_affine_unit(w, row, b, r, U))
                        return false;
                } else {
                    pack_unit(w->dtype, (const uint8_t *)w->data + (size_t)row * rb +
                                            (size_t)b * sb, r, b, U);
                }
            }
        }
    return true;
}

/* u[32] of row r of a 32-column block whose chunks start at q: 8 byte
 * chunks (Q8_0, 8-bit affine), or 4 nibble chunks (Q4_0, Q4_1, 4-bit
 * affine: low nibble column 4c+t, high 16+4c+t) */
static void read_bytes(const uint8_t *q, int r, uint8_t u[32]) {
    for (int i = 0; i < 32; i++)
        u[i] = q[64 * (i / 4) + 4 * r + i % 4];
}
static void read_nibbles(const uint8_t *q, int r, uint8_t u[32]) {
    for (int i = 0; i < 16; i++) {
        uint8_t v = q[64 * (i / 4) + 4 * r + i % 4];
        u[i] = v & 0xF;
        u[i + 16] = v >> 4;
    }
}

/* Unit `unit` (its index in the row) of the panel that holds row `row` */
static const uint8_t *unit_at(const hr_tensor *w, int64_t row, int64_t unit) {
    size_t units = (size_t)(w->shape[1] / hr_x16_unit_cols(w));
    return (const uint8_t *)w->data +
           ((size_t)(row / 16) * units + (size_t)unit) * hr_x16_unit_bytes(w);
}

void hr_x16_block(const hr_tensor *w, int64_t row, int64_t blk, uint8_t u[32], float sw[2],
                  float mn[2]) {
    hr_dtype t = w->dtype;
    int per = hr_x16_unit_cols(w) / 32, r = (int)(row % 16);
    const uint8_t *U = unit_at(w, row, blk / per);
    int e = (int)(blk % per), s = e / 2, odd = e & 1;
    mn[0] = mn[1] = 0;
    switch (t) {
    case HR_DTYPE_AFFINE: {
        const uint8_t *q = U + 64 + (size_t)e * (w->q.bits == 4 ? 256 : 512);
        (w->q.bits == 8 ? read_bytes : read_nibbles)(q, r, u);
        sw[0] = sw[1] = hr_f16_to_f32(get16(U + 2 * r));
        mn[0] = mn[1] = hr_f16_to_f32(get16(U + 32 + 2 * r));
        return;
    }
    case HR_DTYPE_Q8_0:
        read_bytes(U + hr_x16_q_at(blk), r, u);
        sw[0] = sw[1] = hr_f16_to_f32(get16(U + hr_x16_d_at(blk, 512) + 2 * r));
        return;
    case HR_DTYPE_Q4_0:
        read_nibbles(U + hr_x16_q_at(blk), r, u);
        sw[0] = sw[1] = hr_f16_to_f32(get16(U + hr_x16_d_at(blk, 256) + 2 * r));
        return;
    case HR_DTYPE_Q4_1:
        read_nibbles(U + 64, r, u);
        sw[0] = sw[1] = hr_f16_to_f32(get16(U + 2 * r));
        mn[0] = mn[1] = hr_f16_to_f32(get16(U + 32 + 2 * r));
        return;
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K:
        for (int i = 0; i < 32; i++) {
            int at = (s * 8 + i / 4) * 16 + r;
            u[i] = (U[K_NIB + 4 * at + i % 4] >> (4 * odd)) & 0xF;
            if (t == HR_DTYPE_Q5_K)
                u[i] |= (uint8_t)(((U[K_HB + at] >> (i % 4 + 4 * odd)) & 1) << 4);
        }
        sw[0] = sw[1] = hr_f16_to_f32(get16(U + K_D + 2 * r)) * (float)U[K_SC + 16 * e + r];
        mn[0] = mn[1] = -(hr_f16_to_f32(get16(U + K_DMIN + 2 * r)) * (float)U[kmn_at(e, r)]);
        return;
    case HR_DTYPE_Q6_K: {
        for (int i = 0; i < 32; i++) {
            int c = i / 4, at = (s * 8 + c) * 16 + r;
            unsigned hb = U[S_HB + 64 * (4 * s + c / 2) + 4 * r + i % 4];
            u[i] = (uint8_t)(((U[S_NIB + 4 * at + i % 4] >> (4 * odd)) & 0xF) |
                             ((hb >> (4 * (c & 1) + 2 * odd)) & 3) << 4);
        }
        float d = hr_f16_to_f32(get16(U + S_D + 2 * r));
        for (int h = 0; h < 2; h++)
            sw[h] = d * (float)(int8_t)U[S_SC + 16 * (2 * e + h) + r];
        return;
    }
    default:
        return;
    }
}

void hr_x16_kscales(const hr_tensor *w, int64_t row, int64_t sb, int sc[16], int mn[8],
                    float dd[2]) {
    int r = (int)(row % 16);
    const uint8_t *U = unit_at(w, row, sb);
    if (w->dtype == HR_DTYPE_Q6_K) {
        for (int g = 0; g < 16; g++)
            sc[g] = (int8_t)U[S_SC + 16 * g + r];
        dd[0] = hr_f16_to_f32(get16(U + S_D + 2 * r));
        dd[1] = 0;
        return;
    }
    for (int j = 0; j < 8; j++) {
        sc[j] = U[K_SC + 16 * j + r];
        mn[j] = U[kmn_at(j, r)];
    }
    dd[0] = hr_f16_to_f32(get16(U + K_D + 2 * r));
    dd[1] = hr_f16_to_f32(get16(U + K_DMIN + 2 * r));
}
