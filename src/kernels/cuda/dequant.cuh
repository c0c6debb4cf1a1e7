/* Weight views and dequantization on the GPU: the same values as the CPU's
 * scalar definitions (kernels/cpu/quant.c), element for element, for every
 * format a model's matrices come in (core/tensor.h). */
#ifndef HR_KERNELS_CUDA_DEQUANT_CUH
#define HR_KERNELS_CUDA_DEQUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "core/tensor.h"
}

/* A matrix in device memory, row layout (rows, cols). */
struct dw {
    int dtype;              /* hr_dtype */
    int64_t rows, cols;
    const uint8_t *data;
    size_t row_bytes;
    const void *scales, *biases; /* HR_DTYPE_AFFINE: (rows, cols/group) of sdtype */
    int sdtype, bits, group;
};

static __device__ __forceinline__ float h2f(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ float bf2f(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}

/* 16 bytes of a plain row -> its values: 4 f32 or 8 bf16 / f16 */
static __device__ __forceinline__ void unpack16(uint4 q, int dtype, float *wv) {
    if (dtype == HR_DTYPE_F32) {
        wv[0] = __uint_as_float(q.x);
        wv[1] = __uint_as_float(q.y);
        wv[2] = __uint_as_float(q.z);
        wv[3] = __uint_as_float(q.w);
        return;
    }
    uint32_t u[4] = {q.x, q.y, q.z, q.w};
    for (int i = 0; i < 4; i++) {
        uint16_t lo = (uint16_t)(u[i] & 0xffff), hi = (uint16_t)(u[i] >> 16);
        wv[2 * i] = dtype == HR_DTYPE_BF16 ? bf2f(lo) : h2f(lo);
        wv[2 * i + 1] = dtype == HR_DTYPE_BF16 ? bf2f(hi) : h2f(hi);
    }
}

/* unpack16's per values (4 or 8) . the x at xr, in column order */
static __device__ __forceinline__ float dot_unpacked(const float *wv, const float4 *xr, int per) {
    float4 a = xr[0];
    float s = wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w;
    if (per == 8) {
        float4 b = xr[1];
        s += wv[4] * b.x + wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
    }
    return s;
}

static __device__ __forceinline__ float ld_plain(const void *p, int t, size_t i) {
    switch (t) {
    case HR_DTYPE_BF16: return bf2f(((const uint16_t *)p)[i]);
    case HR_DTYPE_F16: return h2f(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static __host__ __device__ __forceinline__ bool is_plain(int t) {
    return t == HR_DTYPE_F32 || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16;
}

/* unaligned little-endian f16 field of a ggml block */
static __device__ __forceinline__ float blk_h(const uint8_t *p) {
    return h2f((uint16_t)(p[0] | (p[1] << 8)));
}

static __device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Columns [c0, c0 + 32) of row `row` of a quantized matrix (c0 a multiple
 * of 32, inside the row). */
static __device__ void load32(const dw &w, int64_t row, int64_t c0, float *out) {
    const uint8_t *r = w.data + (size_t)row * w.row_bytes;
    switch (w.dtype) {
    case HR_DTYPE_Q8_0: {
        const uint8_t *b = r + (c0 / 32) * 34;
        float d = blk_h(b);
        for (int i = 0; i < 32; i++)
            out[i] = d * (float)(int8_t)b[2 + i];
        break;
    }
    case HR_DTYPE_Q4_0: {
        const uint8_t *b = r + (c0 / 32) * 18;
        float d = blk_h(b);
        for (int i = 0; i < 16; i++) {
            out[i] = d * (float)((b[2 + i] & 0xF) - 8);
            out[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
        }
        break;
    }
    case HR_DTYPE_Q4_1: {
        const uint8_t *b = r + (c0 / 32) * 20;
        float d = blk_h(b), m = blk_h(b + 2);
        for (int i = 0; i < 16; i++) {
            out[i] = d * (float)(b[4 + i] & 0xF) + m;
            out[i + 16] = d * (float)(b[4 + i] >> 4) + m;
        }
        break;
    }
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        bool five = w.dtype == HR_DTYPE_Q5_K;
        const uint8_t *b = r + (c0 / 256) * (five ? 176 : 144);
        int s = (int)(c0 % 256) / 32;
        float d = blk_h(b), dmin = blk_h(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        int isc, im;
        scale_min_k4(s, sc, &isc, &im);
        float ds = d * (float)isc, dm = dmin * (float)im;
        const uint8_t *q = qs + (s / 2) * 32;
        for (int l = 0; l < 32; l++) {
            int v = (s & 1) ? q[l] >> 4 : q[l] & 0xF;
            if (five && (qh[l] >> s & 1))
                v += 16;
            out[l] = ds * (float)v - dm;
        }
        break;
    }
    case HR_DTYPE_Q6_K: {
        const uint8_t *b = r + (c0 / 256) * 210;
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = blk_h(b + 208);
        int e0 = (int)(c0 % 256), h = e0 / 128, rr = (e0 % 128) / 32;
        for (int l = 0; l < 32; l++) {
            int e = e0 + l;
            uint8_t lo = ql[h * 64 + (rr & 1) * 32 + l];
            int v = ((rr < 2 ? lo & 0xF : lo >> 4) | (((qh[h * 32 + l] >> (2 * rr)) & 3) << 4)) -
                    32;
            out[l] = d * (float)scales[e / 16] * (float)v;
        }
        break;
    }
    case HR_DTYPE_AFFINE: {
        int64_t ng = w.cols / w.group, g = c0 / w.group;
        float s = ld_plain(w.scales, w.sdtype, (size_t)(row * ng + g));
        float bb = ld_plain(w.biases, w.sdtype, (size_t)(row * ng + g));
        unsigned mask = (1u << w.bits) - 1;
        for (int i = 0; i < 32; i++) {
            uint64_t bit = (uint64_t)(c0 + i) * (unsigned)w.bits;
            size_t byte = (size_t)(bit >> 3);
            unsigned sh = (unsigned)(bit & 7), v = r[byte];
            if (sh + (unsigned)w.bits > 8)
                v |= (unsigned)r[byte + 1] << 8;
            out[i] = s * (float)((v >> sh) & mask) + bb;
        }
        break;
    }
    default:
        for (int i = 0; i < 32; i++)
            out[i] = 0.0f;
        break;
    }
}

/* Element (row, c) of any matrix (slow: for one-row reads like embeddings). */
static __device__ float load1(const dw &w, int64_t row, int64_t c) {
    if (is_plain(w.dtype))
        return ld_plain(w.data, w.dtype, (size_t)row * w.cols + c);
    float v[32];
    load32(w, row, c / 32 * 32, v);
    return v[c % 32];
}

#endif
