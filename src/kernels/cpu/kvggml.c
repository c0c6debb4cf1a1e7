/* llama.cpp's cache types (Q8_0, Q4_0 rows of ggml blocks, kvquant.h): the
 * scalar reference of attention read from the blocks in place (cpu.h's
 * kvg_dots and kvg_axpys give its bits on every ISA), and a row of any KV
 * format stored and loaded. */
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/turbo.h"

#include <math.h>
#include <string.h>

/* element e (0..31) of the block at b as its integer c */
static inline float code(const uint8_t *b, int e, hr_dtype t) {
    if (t == HR_DTYPE_Q8_0)
        return (float)((const int8_t *)b)[2 + e];
    uint8_t x = b[2 + (e & 15)];
    return (float)((e < 16 ? x & 15 : x >> 4) - 8);
}

static inline float scale_of(const uint8_t *b) {
    uint16_t d;
    memcpy(&d, b, 2);
    return hr_f16_to_f32(d);
}

void hr__kvg_dots_scalar(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                         size_t rb, int nk, int hd, hr_dtype t, float scale) {
    size_t bb = t == HR_DTYPE_Q8_0 ? 34 : 18;
    for (int r = 0; r < nr; r++) {
        const float *qr = q + (size_t)r * hd;
        for (int j = 0; j < nk; j++) {
            const uint8_t *row = (const uint8_t *)rec + (size_t)j * rb;
            float T[8] = {0};
            for (int b = 0; b < hd / 32; b++) {
                const uint8_t *blk = row + (size_t)b * bb;
                float A[8] = {0};
                for (int e = 0; e < 32; e++)
                    A[e % 8] = fmaf(qr[32 * b + e], code(blk, e, t), A[e % 8]);
                float d = scale_of(blk);
                for (int l = 0; l < 8; l++)
                    T[l] = fmaf(d, A[l], T[l]);
            }
            sc[(size_t)r * ldsc + j] = hr__kvq_hsum8(T) * scale;
        }
    }
}

void hr__kvg_axpys_scalar(float *o, const float *p, size_t ldp, int nr, const void *rec,
                          size_t rb, int nv, int hd, hr_dtype t) {
    size_t bb = t == HR_DTYPE_Q8_0 ? 34 : 18;
    for (int r = 0; r < nr; r++) {
        float *orow = o + (size_t)r * hd;
        for (int j = 0; j < nv; j++) {
            const uint8_t *row = (const uint8_t *)rec + (size_t)j * rb;
            float pj = p[(size_t)r * ldp + j];
            for (int b = 0; b < hd / 32; b++) {
                const uint8_t *blk = row + (size_t)b * bb;
                float w = pj * scale_of(blk);
                for (int e = 0; e < 32; e++)
                    orow[32 * b + e] = fmaf(w, code(blk, e, t), orow[32 * b + e]);
            }
        }
    }
}

/* ---- a row of any KV format ------------------------------------------------------- */

size_t hr_kv_row_size(hr_dtype t, int hd, int bits, int group) {
    switch (t) {
    case HR_DTYPE_AFFINE: return hr_kvq_row_bytes(hd, bits, group);
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0: return hr_kvg_row_bytes(hd, t);
    case HR_DTYPE_TURBO: return hr_turbo_kv_bytes(hd, bits);
    default: return (size_t)hd * hr_dtype_size(t);
    }
}

void hr_kv_row_store(void *dst, const float *x, int hd, hr_dtype t, int bits, int group) {
    switch (t) {
    case HR_DTYPE_AFFINE: hr_kvq_store(dst, x, hd, bits, group); break;
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0: hr_quant_gguf_row(t, x, hd, dst); break;
    case HR_DTYPE_TURBO: {
        hr_turbo_kv L;
        float signs[HR_TURBO_KV_SIGNS];
        hr_turbo_kv_layout(&L, hd, bits);
        hr_turbo_kv_signs(signs, &L, group >> 16, (group >> 1) & 0x7fff, group & 1);
        hr_turbo_kv_store(dst, x, &L, signs);
        break;
    }
    default: hr_store_row(dst, x, hd, t); break;
    }
}

void hr_kv_row_load(float *y, const void *src, int hd, hr_dtype t, int bits, int group) {
    const uint16_t *h = src;
    switch (t) {
    case HR_DTYPE_AFFINE: hr__kvq_load_scalar(y, src, hd, bits, group); break;
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0: hr_dequant_gguf_row(t, src, hd, y); break;
    case HR_DTYPE_TURBO: {
        hr_turbo_kv L;
        float signs[HR_TURBO_KV_SIGNS], r[256];
        hr_turbo_kv_layout(&L, hd, bits);
        hr_turbo_kv_signs(signs, &L, group >> 16, (group >> 1) & 0x7fff, group & 1);
        hr_turbo_kv_load_rotated(r, src, &L);
        hr_turbo_kv_unrotate(y, r, &L, signs);
        break;
    }
    case HR_DTYPE_F16:
        for (int i = 0; i < hd; i++)
            y[i] = hr_f16_to_f32(h[i]);
        break;
    case HR_DTYPE_BF16:
        for (int i = 0; i < hd; i++)
            y[i] = hr_bf16_to_f32(h[i]);
        break;
    default: memcpy(y, src, (size_t)hd * sizeof *y); break;
    }
}
