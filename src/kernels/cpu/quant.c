/* Scalar definitions of the quantized formats (see quant.h). */
#include "kernels/cpu/quant.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant_blocks.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- dequantization ------------------------------------------------------ */

void hr_affine_unpack(const uint8_t *row, int bits, int64_t e0, int n, uint8_t *q) {
    unsigned mask = (1u << bits) - 1;
    for (int i = 0; i < n; i++) {
        uint64_t bit = (uint64_t)(e0 + i) * (unsigned)bits;
        size_t byte = (size_t)(bit >> 3);
        unsigned sh = (unsigned)(bit & 7), v = row[byte];
        if (sh + (unsigned)bits > 8)
            v |= (unsigned)row[byte + 1] << 8;
        q[i] = (uint8_t)((v >> sh) & mask);
    }
}

static float load_float(const void *p, hr_dtype t, size_t i) {
    switch (t) {
    case HR_DTYPE_BF16: return hr_bf16_to_f32(((const uint16_t *)p)[i]);
    case HR_DTYPE_F16: return hr_f16_to_f32(((const uint16_t *)p)[i]);
    default: {
        float f;
        memcpy(&f, (const float *)p + i, 4);
        return f;
    }
    }
}

static void dequant_affine(const hr_tensor *w, int64_t row, int64_t c0, int64_t n,
                           float *out) {
    int64_t cols = w->shape[1], ng = cols / w->q.group;
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * hr_tensor_row_bytes(w);
    uint8_t q[256];
    for (int64_t done = 0; done < n;) {
        int64_t e = c0 + done, g = e / w->q.group;
        int chunk = (int)(n - done < 256 ? n - done : 256);
        int64_t gend = (g + 1) * w->q.group - e; /* stay within one group */
        if (chunk > gend)
            chunk = (int)gend;
        float s = load_float(w->q.scales, w->q.sdtype, (size_t)(row * ng + g));
        float b = load_float(w->q.biases, w->q.sdtype, (size_t)(row * ng + g));
        hr_affine_unpack(r, w->q.bits, e, chunk, q);
        for (int i = 0; i < chunk; i++)
            out[done + i] = s * (float)q[i] + b;
        done += chunk;
    }
}

/* One block of a ggml type into out[0..block). */
static void dequant_block(hr_dtype t, const uint8_t *p, float *out) {
    switch (t) {
    case HR_DTYPE_Q8_0: {
        const hr_block_q8_0 *b = (const void *)p;
        float d = hr_f16_to_f32(b->d);
        for (int i = 0; i < 32; i++)
            out[i] = d * (float)b->qs[i];
        break;
    }
    case HR_DTYPE_Q4_0: {
        const hr_block_q4_0 *b = (const void *)p;
        float d = hr_f16_to_f32(b->d);
        for (int i = 0; i < 16; i++) {
            out[i] = d * (float)((b->qs[i] & 0xF) - 8);
            out[i + 16] = d * (float)((b->qs[i] >> 4) - 8);
        }
        break;
    }
    case HR_DTYPE_Q4_1: {
        const hr_block_q4_1 *b = (const void *)p;
        float d = hr_f16_to_f32(b->d), m = hr_f16_to_f32(b->m);
        for (int i = 0; i < 16; i++) {
            out[i] = d * (float)(b->qs[i] & 0xF) + m;
            out[i + 16] = d * (float)(b->qs[i] >> 4) + m;
        }
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        bool five = t == HR_DTYPE_Q5_K;
        const hr_block_q4_k *b4 = (const void *)p;
        const hr_block_q5_k *b5 = (const void *)p;
        uint16_t dh = five ? b5->d : b4->d, mh = five ? b5->dmin : b4->dmin;
        const uint8_t *sc = five ? b5->scales : b4->scales;
        const uint8_t *qs = five ? b5->qs : b4->qs;
        float d = hr_f16_to_f32(dh), dmin = hr_f16_to_f32(mh);
        for (int s = 0; s < 8; s++) {
            int isc, im;
            hr_scale_min_k4(s, sc, &isc, &im);
            float ds = d * (float)isc, dm = dmin * (float)im;
            const uint8_t *q = qs + (s / 2) * 32;
            for (int l = 0; l < 32; l++) {
                int v = (s & 1) ? q[l] >> 4 : q[l] & 0xF;
                if (five && (b5->qh[l] >> s & 1))
                    v += 16;
                out[s * 32 + l] = ds * (float)v - dm;
            }
        }
        break;
    }
    case HR_DTYPE_Q6_K: {
        const hr_block_q6_k *b = (const void *)p;
        float d = hr_f16_to_f32(b->d);
        for (int e = 0; e < 256; e++) {
            int h = e / 128, r = (e % 128) / 32, l = e % 32;
            uint8_t lo = b->ql[h * 64 + (r & 1) * 32 + l];
            int v = ((r < 2 ? lo & 0xF : lo >> 4) | (((b->qh[h * 32 + l] >> (2 * r)) & 3) << 4)) - 32;
            out[e] = d * (float)b->scales[e / 16] * (float)v;
        }
        break;
    }
    case HR_DTYPE_MXFP4: /* the doubled E2M1 values times 2^(e - 128), as ggml */
        for (int i = 0; i < 16; i++) {
            out[i] = ldexpf((float)hr_mxfp4_kvalues[p[1 + i] & 0xF], (int)p[0] - 128);
            out[i + 16] = ldexpf((float)hr_mxfp4_kvalues[p[1 + i] >> 4], (int)p[0] - 128);
        }
        break;
    default:
        break;
    }
}

void hr_mxfp4_from_hub(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales,
                       int64_t n_groups) {
    for (int64_t g = 0; g < n_groups; g++, dst += 17, blocks += 16) {
        uint8_t code[32];
        for (int i = 0; i < 16; i++) {
            code[2 * i] = blocks[i] & 0xF;
            code[2 * i + 1] = blocks[i] >> 4;
        }
        dst[0] = scales[g];
        for (int j = 0; j < 16; j++)
            dst[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
    }
}

/* x16 layout (x16.h): w = sw * (u - off) + mn, the same f32 operations as
 * each format's block dequantization */
static void dequant_x16(const hr_tensor *w, int64_t row, int64_t c0, int64_t n, float *out) {
    int off = hr_qdot_offset(w->dtype);
    bool has_min = hr_qdot_has_min(w->dtype); /* else no "+ 0": -0.0 stays -0.0 */
    for (int64_t e = c0; e < c0 + n;) {
        int64_t blk = e / 32;
        uint8_t u[32];
        float sw[2], mn[2];
        hr_qdot_block(w, row, blk, u, sw, mn);
        for (; e < c0 + n && e < 32 * (blk + 1); e++) {
            int i = (int)(e % 32);
            float v = sw[i / 16] * (float)((int)u[i] - off);
            out[e - c0] = has_min ? v + mn[i / 16] : v;
        }
    }
}

void hr_dequant_gguf_row(hr_dtype t, const void *p, int64_t cols, float *out) {
    int be, bb;
    hr_dtype_block(t, &be, &bb);
    for (int64_t i = 0; i < cols / be; i++)
        dequant_block(t, (const uint8_t *)p + i * bb, out + i * be);
}

void hr_dequant_range(const hr_tensor *w, int64_t row, int64_t c0, int64_t n,
                      float *out) {
    if (w->layout == HR_LAYOUT_X16) {
        dequant_x16(w, row, c0, n, out);
        return;
    }
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * hr_tensor_row_bytes(w);
    switch (w->dtype) {
    case HR_DTYPE_F32:
    case HR_DTYPE_BF16:
    case HR_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = load_float(r, w->dtype, (size_t)(c0 + i));
        return;
    case HR_DTYPE_AFFINE:
        dequant_affine(w, row, c0, n, out);
        return;
    default: {
        int be, bb;
        hr_dtype_block(w->dtype, &be, &bb);
        float tmp[256];
        for (int64_t e = c0; e < c0 + n;) {
            int64_t blk = e / be, off = e - blk * be;
            int64_t len = be - off < c0 + n - e ? be - off : c0 + n - e;
            if (off == 0 && len == be) {
                dequant_block(w->dtype, r + (size_t)blk * bb, out + (e - c0));
            } else {
                dequant_block(w->dtype, r + (size_t)blk * bb, tmp);
                memcpy(out + (e - c0), tmp + off, (size_t)len * sizeof *tmp);
            }
            e += len;
        }
        return;
    }
    }
}

static bool f16_exact(float v, uint16_t *h) {
    *h = hr_f32_to_f16(v);
    float back = hr_f16_to_f32(*h);
    return back == v && signbit(back) == signbit(v);
}

bool hr_affine_f16_params(const hr_tensor *w, int64_t row, int64_t g, uint16_t *s,
                          uint16_t *b) {
    size_t at = (size_t)(row * (w->shape[1] / w->q.group) + g);
    return f16_exact(load_float(w->q.scales, w->q.sdtype, at), s) &&
           f16_exact(load_float(w->q.biases, w->q.sdtype, at), b);
}

/* ---- MLX affine quantization (mlx/backend/cpu/quantized.cpp) ------------- */

void hr_quant_affine_row(const float *x, int64_t cols, int bits, int group,
                         uint8_t *packed, float *scales, float *biases) {
    float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    memset(packed, 0, (size_t)cols * (size_t)bits / 8);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *w = x + g * group;
        float w_min = INFINITY, w_max = -INFINITY;
        for (int j = 0; j < group; j++) {
            w_max = fmaxf(w_max, w[j]);
            w_min = fminf(w_min, w[j]);
        }
        bool mask = fabsf(w_min) > fabsf(w_max);
        float scale = fmaxf((w_max - w_min) / n_bins, eps);
        scale = mask ? scale : -scale;
        float edge = mask ? w_min : w_max;
        float q0 = rintf(edge / scale), bias = 0;
        if (q0 != 0) {
            scale = edge / q0;
            bias = edge;
        }
        for (int j = 0; j < group; j++) {
            float q = rintf((w[j] - bias) / scale);
            q = fminf(fmaxf(q, 0.0f), n_bins);
            uint64_t bit = (uint64_t)(g * group + j) * (unsigned)bits;
            unsigned v = (unsigned)q << (bit & 7);
            packed[bit >> 3] |= (uint8_t)v;
            if ((bit & 7) + (unsigned)bits > 8)
                packed[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
        }
        scales[g] = scale;
        biases[g] = bias;
    }
}

/* ---- ggml quantization ---------------------------------------------------- */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q4_K / Q5_K: 8 sub-blocks of 32, each [min(0, min), max] mapped onto
 * 0..nmax, scales and mins quantized to 6 bits against d / dmin. */
static void quant_k45(const float *x, uint8_t *out, bool five) {
    int nmax = five ? 31 : 15;
    float sc[8], mn[8], maxsc = 0, maxmn = 0;
    for (int s = 0; s < 8; s++) {
        float lo = 0, hi = -FLT_MAX;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[s * 32 + l]);
            hi = fmaxf(hi, x[s * 32 + l]);
        }
        sc[s] = (hi - lo) / (float)nmax;
        mn[s] = -lo;
        maxsc = fmaxf(maxsc, sc[s]);
        maxmn = fmaxf(maxmn, mn[s]);
    }
    uint16_t dh = hr_f32_to_f16(maxsc / 63), mh = hr_f32_to_f16(maxmn / 63);
    float d = hr_f16_to_f32(dh), dmin = hr_f16_to_f32(mh);
    int isc[8], im[8];
    for (int s = 0; s < 8; s++) {
        isc[s] = d > 0 ? clampi((int)rintf(sc[s] / d), 0, 63) : 0;
        im[s] = dmin > 0 ? clampi((int)rintf(mn[s] / dmin), 0, 63) : 0;
    }
    uint8_t scales[12] = {0}, q[256];
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((isc[j] & 63) | ((isc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((im[j] & 63) | ((im[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((isc[j + 4] & 0xF) | ((im[j + 4] & 0xF) << 4));
    }
    for (int s = 0; s < 8; s++) {
        float ds = d * (float)isc[s], dm = dmin * (float)im[s];
        for (int l = 0; l < 32; l++)
            q[s * 32 + l] = ds > 0 ? (uint8_t)clampi((int)rintf((x[s * 32 + l] + dm) / ds), 0, nmax) : 0;
    }
    if (five) {
        hr_block_q5_k *b = (void *)out;
        memset(b, 0, sizeof *b);
        b->d = dh;
        b->dmin = mh;
        memcpy(b->scales, scales, 12);
        for (int s = 0; s < 8; s++)
            for (int l = 0; l < 32; l++) {
                int v = q[s * 32 + l];
                b->qs[(s / 2) * 32 + l] |= (uint8_t)((v & 0xF) << ((s & 1) * 4));
                b->qh[l] |= (uint8_t)((v >> 4) << s);
            }
    } else {
        hr_block_q4_k *b = (void *)out;
        memset(b, 0, sizeof *b);
        b->d = dh;
        b->dmin = mh;
        memcpy(b->scales, scales, 12);
        for (int s = 0; s < 8; s++)
            for (int l = 0; l < 32; l++)
                b->qs[(s / 2) * 32 + l] |= (uint8_t)(q[s * 32 + l] << ((s & 1) * 4));
    }
}

/* Q6_K: 16 sub-blocks of 16 with a signed scale (max / -32, as Q4_0 does),
 * the scales quantized to int8 against d. */
static void quant_q6k(const float *x, uint8_t *out) {
    hr_block_q6_k *b = (void *)out;
    memset(b, 0, sizeof *b);
    float s[16], amax = 0;
    for (int j = 0; j < 16; j++) {
        float am = 0, mx = 0;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[j * 16 + l]) > am) {
                am = fabsf(x[j * 16 + l]);
                mx = x[j * 16 + l];
            }
        s[j] = mx / -32;
        amax = fmaxf(amax, fabsf(s[j]));
    }
    b->d = hr_f32_to_f16(amax / 127);
    float d = hr_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++)
        b->scales[j] = (int8_t)(d > 0 ? clampi((int)rintf(s[j] / d), -128, 127) : 0);
    for (int e = 0; e < 256; e++) {
        float ds = d * (float)b->scales[e / 16];
        int v = ds != 0 ? clampi((int)rintf(x[e] / ds) + 32, 0, 63) : 32;
        int h = e / 128, r = (e % 128) / 32, l = e % 32;
        b->ql[h * 64 + (r & 1) * 32 + l] |= (uint8_t)((v & 0xF) << (r < 2 ? 0 : 4));
        b->qh[h * 32 + l] |= (uint8_t)((v >> 4) << (2 * r));
    }
}

void hr_quant_gguf_row(hr_dtype t, const float *x, int64_t cols, uint8_t *out) {
    int be, bb;
    hr_dtype_block(t, &be, &bb);
    for (int64_t i = 0; i < cols / be; i++, x += be, out += bb) {
        switch (t) {
        case HR_DTYPE_Q8_0: {
            hr_block_q8_0 *b = (void *)out;
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127, id = d ? 1.0f / d : 0.0f;
            b->d = hr_f32_to_f16(d);
            for (int j = 0; j < 32; j++)
                b->qs[j] = (int8_t)roundf(x[j] * id);
            break;
        }
        case HR_DTYPE_Q4_0: {
            hr_block_q4_0 *b = (void *)out;
            float amax = 0, mx = 0;
            for (int j = 0; j < 32; j++)
                if (amax < fabsf(x[j])) {
                    amax = fabsf(x[j]);
                    mx = x[j];
                }
            float d = mx / -8, id = d ? 1.0f / d : 0.0f;
            b->d = hr_f32_to_f16(d);
            for (int j = 0; j < 16; j++) {
                int a = (int8_t)(x[j] * id + 8.5f), c = (int8_t)(x[j + 16] * id + 8.5f);
                b->qs[j] = (uint8_t)((a < 15 ? a : 15) | (c < 15 ? c : 15) << 4);
            }
            break;
        }
        case HR_DTYPE_Q4_1: {
            hr_block_q4_1 *b = (void *)out;
            float lo = FLT_MAX, hi = -FLT_MAX;
            for (int j = 0; j < 32; j++) {
                lo = fminf(lo, x[j]);
                hi = fmaxf(hi, x[j]);
            }
            float d = (hi - lo) / 15, id = d ? 1.0f / d : 0.0f;
            b->d = hr_f32_to_f16(d);
            b->m = hr_f32_to_f16(lo);
            for (int j = 0; j < 16; j++) {
                int a = (int8_t)((x[j] - lo) * id + 0.5f), c = (int8_t)((x[j + 16] - lo) * id + 0.5f);
                b->qs[j] = (uint8_t)((a < 15 ? a : 15) | (c < 15 ? c : 15) << 4);
            }
            break;
        }
        case HR_DTYPE_Q4_K: quant_k45(x, out, false); break;
        case HR_DTYPE_Q5_K: quant_k45(x, out, true); break;
        case HR_DTYPE_Q6_K: quant_q6k(x, out); break;
        default: break;
        }
    }
}
