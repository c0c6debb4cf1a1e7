/* Products of the 256-column formats (GGUF Q4_K, Q5_K, Q6_K) and of MLX
 * affine 4- and 8-bit weights: one warp per output column (row of w), NR
 * rows of x per block; the row is read 256 columns at a time, each lane
 * taking 8 consecutive columns of them, so a warp's loads of a super-block
 * are contiguous. A lane sums its 8 products in column order and adds that
 * to its running sum; the warp's sums fold in lane order: the same order
 * whatever NR and the batch (batched == alone). */
#ifndef HR_KERNELS_CUDA_MV_SPAN_CUH
#define HR_KERNELS_CUDA_MV_SPAN_CUH

#include "kernels/cuda/ops.cuh"

/* true when k_mv_span takes w: whole 256-column spans, aligned loads */
static __host__ bool mv_span_fits(const dw &w) {
    if (w.cols % 256 != 0)
        return false;
    switch (w.dtype) {
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K:
        return ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0;
    case HR_DTYPE_Q6_K:
        return ((uintptr_t)w.data & 1) == 0 && w.row_bytes % 2 == 0;
    case HR_DTYPE_AFFINE:
        return (w.bits == 4 || w.bits == 8) && w.group % 8 == 0 &&
               ((uintptr_t)w.data & 7) == 0 && w.row_bytes % 8 == 0;
    default:
        return false;
    }
}

/* columns [e0, e0 + 8) of row `row` (e0 a multiple of 8) into v */
static __device__ __forceinline__ void span8(const dw &w, int64_t row, int64_t e0, float *v) {
    const uint8_t *r = w.data + (size_t)row * w.row_bytes;
    switch (w.dtype) {
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K: {
        bool five = w.dtype == HR_DTYPE_Q5_K;
        const uint8_t *b = r + (e0 / 256) * (five ? 176 : 144);
        int e = (int)(e0 % 256), s = e / 32, l = e % 32;
        int isc, im;
        scale_min_k4(s, b + 4, &isc, &im);
        float ds = blk_h(b) * (float)isc, dm = blk_h(b + 2) * (float)im;
        const uint8_t *q = b + (five ? 48 : 16) + (s / 2) * 32 + l;
        uint2 u = *(const uint2 *)q;
        uint2 h = five ? *(const uint2 *)(b + 16 + l) : make_uint2(0, 0);
        for (int i = 0; i < 8; i++) {
            uint32_t qq = i < 4 ? u.x >> (8 * i) : u.y >> (8 * (i - 4));
            int x = (s & 1) ? (int)((qq >> 4) & 0xF) : (int)(qq & 0xF);
            if (five) {
                uint32_t hh = i < 4 ? h.x >> (8 * i) : h.y >> (8 * (i - 4));
                x += (int)((hh >> s) & 1) << 4;
            }
            v[i] = ds * (float)x - dm;
        }
        break;
    }
    case HR_DTYPE_Q6_K: {
        const uint8_t *b = r + (e0 / 256) * 210;
        int e = (int)(e0 % 256), hf = e / 128, rr = (e % 128) / 32, l = e % 32;
        float d = blk_h(b + 208) * (float)((const int8_t *)(b + 192))[e / 16];
        const uint16_t *ql = (const uint16_t *)(b + hf * 64 + (rr & 1) * 32 + l);
        const uint16_t *qh = (const uint16_t *)(b + 128 + hf * 32 + l);
        for (int i = 0; i < 8; i += 2) {
            uint32_t lo2 = ql[i / 2], hi2 = qh[i / 2];
            for (int k = 0; k < 2; k++) {
                uint32_t lo = (lo2 >> (8 * k)) & 0xFF, hi = (hi2 >> (8 * k)) & 0xFF;
                int x = (int)(((rr < 2 ? lo & 0xF : lo >> 4) | (((hi >> (2 * rr)) & 3) << 4))) - 32;
                v[i + k] = d * (float)x;
            }
        }
        break;
    }
    default: { /* HR_DTYPE_AFFINE, 4 or 8 bits */
        int64_t ng = w.cols / w.group, g = e0 / w.group;
        float s = ld_plain(w.scales, w.sdtype, (size_t)(row * ng + g));
        float bb = ld_plain(w.biases, w.sdtype, (size_t)(row * ng + g));
        if (w.bits == 4) {
            uint32_t u = *(const uint32_t *)(r + e0 / 2);
            for (int i = 0; i < 8; i++)
                v[i] = s * (float)((u >> (4 * i)) & 0xF) + bb;
        } else {
            uint2 u = *(const uint2 *)(r + e0);
            for (int i = 0; i < 8; i++)
                v[i] = s * (float)(((i < 4 ? u.x : u.y) >> (8 * (i & 3))) & 0xFF) + bb;
        }
        break;
    }
    }
}

template <int NR>
__global__ void k_mv_span(const float *__restrict__ x, int ldx, int n, dw w,
                          float *__restrict__ y, int ldy, const float *__restrict__ bias) {
    int lane = threadIdx.x & 31;
    int64_t j = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int r0 = blockIdx.y * NR;
    if (j >= w.rows)
        return;
    float acc[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = 0.0f;
#pragma unroll 2
    for (int64_t e0 = (int64_t)lane * 8; e0 < w.cols; e0 += 256) {
        float v[8];
        span8(w, j, e0, v);
        for (int r = 0; r < NR; r++)
            if (r0 + r < n) {
                const float4 *xr = (const float4 *)(x + (size_t)(r0 + r) * ldx + e0);
                float4 a = xr[0], b = xr[1];
                acc[r] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x +
                          v[5] * b.y + v[6] * b.z + v[7] * b.w;
            }
    }
    for (int r = 0; r < NR; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n)
            y[(size_t)(r0 + r) * ldy + j] = s + (bias ? bias[j] : 0.0f);
    }
}

#endif
