/* Products of bf16 weights on the tensor cores (mma.sync m16n8k16, f32
 * accumulation), batch-invariant and f32-grade.
 *
 * The activations are f32; the tensor cores take bf16. Each activation row
 * is split once per product into MMA_PARTS = 3 bf16 parts, x = x_0 + x_1 +
 * x_2 with x_i = bf16(x - x_0 - ... - x_{i-1}), so the products w * x_i
 * are exact in f32 (bf16 x bf16) and the parts together carry all 24 bits
 * of x's mantissa: the f32 path's grade (two parts, 16 bits, missed the
 * 1e-4 logprob bound of test_parity's llama-bf16 fixture on the H200).
 * k_split_bf16 writes the parts, dense [MMA_PARTS][T][K].
 *
 * k_mma_bf16 computes y[t][j] = x[t] . w[j] (+ bias[j]): a block is 4 warps
 * that split K (warp q takes the 32-column chunks q, q + 4, ...), each warp
 * a tile of MT x 16 output columns (rows of w, the mma's A operand) by NT x
 * 8 activation rows (its B operand). Within a chunk, lane (g, c) holds the
 * columns 8c .. 8c + 7 of its rows: the chunk's first mma takes columns
 * {8c .. 8c + 3}, the second {8c + 4 .. 8c + 7}, the same columns for the
 * weights and the activations, so a k-slot pairs the right values. An
 * output's sum is, whatever MT, NT and the number of rows: per chunk in
 * order, the first mma with each part in order, then the second; then the
 * four warps' sums folded as a tree (q + 2 into q, then q + 1),
 * then the bias. Steps of few rows split x in the kernel, steps of many
 * read the parts k_split_bf16 wrote: the same parts. So a row's result
 * does not depend on the rows batched with it (the engine's batched ==
 * alone), only on its own values. */
#ifndef HR_KERNELS_CUDA_MMA_CUH
#define HR_KERNELS_CUDA_MMA_CUH

#include "kernels/cuda/ops.cuh"

#include <cuda_bf16.h>

#define MMA_WARPS 4
#define MMA_PARTS 3

/* true when k_mma_bf16 takes w: bf16, whole 32-column chunks, 16-byte rows */
static __host__ bool mma_fits(const dw &w) {
    return w.dtype == HR_DTYPE_BF16 && w.cols % 32 == 0 && ((uintptr_t)w.data & 15) == 0 &&
           w.row_bytes % 16 == 0;
}

static __device__ __forceinline__ uint16_t bf16_bits(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* 8 consecutive values of x -> their MMA_PARTS parts, 8 bf16 each */
static __device__ __forceinline__ void split8(float4 lo, float4 hi, uint4 *parts) {
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int s = 0; s < MMA_PARTS; s++) {
        uint32_t u[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint16_t b0 = bf16_bits(v[2 * i]), b1 = bf16_bits(v[2 * i + 1]);
            u[i] = (uint32_t)b0 | ((uint32_t)b1 << 16);
            v[2 * i] -= __bfloat162float(__ushort_as_bfloat16(b0));
            v[2 * i + 1] -= __bfloat162float(__ushort_as_bfloat16(b1));
        }
        parts[s] = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

/* x (T rows of K, stride ldx) -> parts [MMA_PARTS][T][K] (part s at xs + s *
 * stride) */
__global__ void k_split_bf16(const float *__restrict__ x, int ldx, int T, int K,
                             uint16_t *__restrict__ xs, int64_t stride) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)T * K)
        return;
    int64_t t = i / K, k = i % K;
    float r = x[t * ldx + k];
#pragma unroll
    for (int s = 0; s < MMA_PARTS; s++) {
        uint16_t b = bf16_bits(r);
        xs[s * stride + i] = b;
        r -= __bfloat162float(__ushort_as_bfloat16(b));
    }
}

static __device__ __forceinline__ void mma_bf16(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                                uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* weights: streamed once, kept out of L1 */
static __device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* the activations: x itself (XF: split in the kernel) or its parts */
struct mma_x {
    const float *x;
    int ldx;
    const uint16_t *xs;
    int64_t stride; /* between the parts */
    int T;
};

/* the fragments of U chunks of a warp: its weight rows' and activation
 * rows' 8 columns of each */
template <int MT, int NT, int U>
struct mma_frags {
    uint4 a[U][MT][2];
    uint4 b[U][NT][MMA_PARTS]; /* the parts, read */
    float4 xf[U][NT][2];       /* or x, split when used (XF) */
};

template <bool XF, int MT, int NT, int U>
static __device__ __forceinline__ void mma_load(mma_frags<MT, NT, U> &f, const dw &w,
                                                const mma_x &x, int64_t j0, int r0, int ch,
                                                int nch, int g, int c) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    int K = (int)w.cols;
#pragma unroll
    for (int u = 0; u < U; u++) {
        int cu = ch + u * MMA_WARPS;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int64_t row = j0 + m * 16 + g + 8 * h;
                f.a[u][m][h] = cu < nch && row < w.rows
                                   ? ld_stream((const uint4 *)(w.data + row * w.row_bytes) +
                                               cu * 4 + c)
                                   : zero;
            }
#pragma unroll
        for (int n = 0; n < NT; n++) {
            int row = r0 + n * 8 + g;
            bool in = cu < nch && row < x.T;
            if (XF) { /* split where used: the loads stay in flight together */
                const float4 *p = (const float4 *)(x.x + (int64_t)row * x.ldx + cu * 32 + c * 8);
                f.xf[u][n][0] = in ? __ldg(p) : make_float4(0, 0, 0, 0);
                f.xf[u][n][1] = in ? __ldg(p + 1) : make_float4(0, 0, 0, 0);
            } else {
#pragma unroll
                for (int s = 0; s < MMA_PARTS; s++)
                    f.b[u][n][s] = in ? __ldg((const uint4 *)(x.xs + s * x.stride +
                                                              (int64_t)row * K) +
                                              cu * 4 + c)
                                      : zero;
            }
        }
    }
}

/* U chunks' loads in flight per warp; PF: the next U's issued before this
 * U's mmas (decode: the loads are what takes the time) */
template <bool XF, bool PF, int MT, int NT, int U, int MINB>
__global__ void __launch_bounds__(MMA_WARPS * 32, MINB)
    k_mma_bf16(mma_x x, dw w, float *__restrict__ y, int ldy, const float *__restrict__ bias) {
    __shared__ float red[MMA_WARPS / 2][MT * NT * 4][32];
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    int r0 = blockIdx.x * NT * 8;                 /* activation rows */
    int64_t j0 = (int64_t)blockIdx.y * MT * 16;   /* weight rows */
    int nch = (int)(w.cols / 32), step = MMA_WARPS * U;
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[m][n][i] = 0.0f;
    mma_frags<MT, NT, U> cur, nxt;
    if (PF)
        mma_load<XF>(cur, w, x, j0, r0, q, nch, g, c);
    for (int ch = q; ch < nch; ch += step) {
        if (!PF)
            mma_load<XF>(cur, w, x, j0, r0, ch, nch, g, c);
        else if (ch + step < nch) /* warp-uniform */
            mma_load<XF>(nxt, w, x, j0, r0, ch + step, nch, g, c);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (ch + u * MMA_WARPS >= nch) /* warp-uniform */
                break;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint4 bp[MMA_PARTS];
                if (XF)
                    split8(cur.xf[u][n][0], cur.xf[u][n][1], bp);
                else
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        bp[s] = cur.b[u][n][s];
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const uint4 &a0 = cur.a[u][m][0], &a1 = cur.a[u][m][1];
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        mma_bf16(acc[m][n], a0.x, a1.x, a0.y, a1.y, bp[s].x, bp[s].y);
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        mma_bf16(acc[m][n], a0.z, a1.z, a0.w, a1.w, bp[s].z, bp[s].w);
                }
            }
        }
        if (PF)
            cur = nxt;
    }
    /* the warps' sums folded as a tree: warp q + h into warp q, h = 2, 1 */
#pragma unroll
    for (int h = MMA_WARPS / 2; h > 0; h /= 2) {
        if (q >= h && q < 2 * h) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        red[q - h][(m * NT + n) * 4 + i][lane] = acc[m][n][i];
        }
        __syncthreads();
        if (q < h) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[m][n][i] += red[q][(m * NT + n) * 4 + i][lane];
        }
        __syncthreads();
    }
    if (q > 0)
        return;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = r0 + n * 8 + 2 * c + (i & 1);
                int64_t j = j0 + m * 16 + g + 8 * (i >> 1);
                if (row < x.T && j < w.rows)
                    y[(int64_t)row * ldy + j] = acc[m][n][i] + (bias ? bias[j] : 0.0f);
            }
}

#endif
