/* Products of bf16, f16, Q8_0, Q4_0, Q4_K and Q5_K weights on the tensor cores
 * (mma.sync m16n8k16, f32 accumulation), batch-invariant and f32-grade.
 * An f16 weight is itself split into two bf16 parts (exactly:
 * f16x2_parts), the WP = 2 weight parts' mmas after each other for every
 * activation part. A Q8_0/Q4_0 block is one chunk: its integers (q, q - 8)
 * are exact in bf16, the block's sum runs from 0 and is then added to the
 * row's as fma(d, block, sum). A K-quant sub-block (32 columns) likewise,
 * w = d*sc*q - dmin*m: fma(d*sc, block, sum), then fma(-dmin*m, sum of the
 * chunk's x (an mma with a matrix of ones), sum).
 *
 * The activations are f32; the tensor cores take bf16. Each activation row
 * is split once per product into MMA_PARTS = 3 bf16 parts, x = x_0 + x_1 +
 * x_2 with x_i = bf16(x - x_0 - ... - x_{i-1}), so the products w * x_i
 * are exact in f32 (bf16 x bf16) and the parts together carry all 24 bits
 * of x's mantissa: the f32 path's grade (two parts, 16 bits, missed the
 * 1e-4 logprob bound of test_parity's llama-bf16 fixture on the H200).
 * k_split_bf16 writes the parts, dense [MMA_PARTS][T][K].
 *
 * k_mma computes y[t][j] = x[t] . w[j] (+ bias[j]): a block is 4 warps
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

static __device__ __forceinline__ uint16_t bf16_bits(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* the weight operand's kind: plain bf16 / f16, or a 32-column ggml block
 * (the chunk is the block: its integers exact in bf16, the scale after) */
enum { MMA_BF16, MMA_F16, MMA_Q8_0, MMA_Q4_0, MMA_Q4_K, MMA_Q5_K };

/* K-quants: a 32-column sub-block is one chunk, w = d*sc*q - dmin*m with q
 * exact in bf16; the chunk's sum of x (an mma with ones) takes the mins */
static __host__ __device__ __forceinline__ constexpr bool mma_kq(int kind) {
    return kind == MMA_Q4_K || kind == MMA_Q5_K;
}

static __host__ int mma_kind(const dw &w) {
    switch (w.dtype) {
    case HR_DTYPE_BF16: return MMA_BF16;
    case HR_DTYPE_F16: return MMA_F16;
    case HR_DTYPE_Q8_0: return MMA_Q8_0;
    case HR_DTYPE_Q4_0: return MMA_Q4_0;
    case HR_DTYPE_Q4_K: return MMA_Q4_K;
    case HR_DTYPE_Q5_K: return MMA_Q5_K;
    default: return -1;
    }
}

/* true when k_mma takes w: whole 32-column chunks; plain rows 16-byte
 * aligned, blocks 2-byte aligned */
static __host__ bool mma_fits(const dw &w) {
    int k = mma_kind(w);
    if (k < 0 || w.cols % 32 != 0)
        return false;
    if (k == MMA_BF16 || k == MMA_F16 || mma_kq(k))
        return ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0;
    return ((uintptr_t)w.data & 1) == 0 && w.row_bytes % 2 == 0;
}

/* the raw chunk of a block row for lane c: the 8 bytes its 8 columns come
 * from in .x/.y, the block's f16 scale in .z */
static __device__ __forceinline__ uint4 ld_block(int kind, const uint8_t *row, int ch, int c) {
    const uint16_t *b = (const uint16_t *)(row + (size_t)ch * (kind == MMA_Q8_0 ? 34 : 18));
    const uint16_t *q = b + 1 + (kind == MMA_Q8_0 ? 4 * c : 4 * (c & 1));
    return make_uint4((uint32_t)__ldg(q) | ((uint32_t)__ldg(q + 1) << 16),
                      (uint32_t)__ldg(q + 2) | ((uint32_t)__ldg(q + 3) << 16), __ldg(b), 0);
}

/* a K-quant super-block's chunk for lane c: its 8 bytes of nibbles in
 * .x/.y (Q5_K: its 8 bytes of high bits in .z/.w), the super-block's
 * d, dmin and scales in *hdr */
static __device__ __forceinline__ uint4 ld_kq(int kind, const uint8_t *row, int ch, int c,
                                              uint4 *hdr) {
    bool five = kind == MMA_Q5_K;
    const uint8_t *b = row + (size_t)(ch / 8) * (five ? 176 : 144);
    int s = ch % 8;
    *hdr = __ldg((const uint4 *)b);
    uint2 q = __ldg((const uint2 *)(b + (five ? 48 : 16) + 32 * (s / 2) + 8 * c));
    uint2 h = five ? __ldg((const uint2 *)(b + 16 + 8 * c)) : make_uint2(0, 0);
    return make_uint4(q.x, q.y, h.x, h.y);
}

static __device__ __forceinline__ uint32_t bf16x2_of(float a, float b) {
    return (uint32_t)bf16_bits(a) | ((uint32_t)bf16_bits(b) << 16);
}

/* a K-quant chunk (sub-block s) -> its 8 integers as bf16, d*sc and
 * dmin*m */
static __device__ __forceinline__ uint4 kq_vals(int kind, uint4 r, uint4 hdr, int s, float *ds,
                                                float *dm) {
    /* the 12 scale bytes are hdr's bytes 4..15 (kept in registers) */
    int sb = s & 3;
    int lo = (int)((hdr.y >> (8 * sb)) & 0xff), mid = (int)((hdr.z >> (8 * sb)) & 0xff);
    int hi = (int)((hdr.w >> (8 * sb)) & 0xff);
    int sc, m;
    if (s < 4) {
        sc = lo & 63;
        m = mid & 63;
    } else {
        sc = (hi & 0xF) | ((lo >> 6) << 4);
        m = (hi >> 4) | ((mid >> 6) << 4);
    }
    *ds = __half2float(__ushort_as_half((uint16_t)(hdr.x & 0xffff))) * (float)sc;
    *dm = __half2float(__ushort_as_half((uint16_t)(hdr.x >> 16))) * (float)m;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t byte = ((i < 4 ? r.x : r.y) >> (8 * (i & 3))) & 0xff;
        int q = (s & 1) ? (int)(byte >> 4) : (int)(byte & 0xf);
        if (kind == MMA_Q5_K)
            q += (int)((((i < 4 ? r.z : r.w) >> (8 * (i & 3))) >> s) & 1) << 4;
        v[i] = (float)q;
    }
    return make_uint4(bf16x2_of(v[0], v[1]), bf16x2_of(v[2], v[3]), bf16x2_of(v[4], v[5]),
                      bf16x2_of(v[6], v[7]));
}

/* a raw chunk -> its 8 integers as bf16 (Q8_0: q; Q4_0: the low nibbles
 * for lanes 0, 1, the high ones for 2, 3, minus 8) and the scale */
static __device__ __forceinline__ uint4 block_vals(int kind, uint4 r, int c, float *d) {
    *d = __half2float(__ushort_as_half((uint16_t)r.z));
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t byte = ((i < 4 ? r.x : r.y) >> (8 * (i & 3))) & 0xff;
        v[i] = kind == MMA_Q8_0 ? (float)(int8_t)byte
                                : (float)((int)((c >> 1) ? byte >> 4 : byte & 0xf) - 8);
    }
    return make_uint4(bf16x2_of(v[0], v[1]), bf16x2_of(v[2], v[3]), bf16x2_of(v[4], v[5]),
                      bf16x2_of(v[6], v[7]));
}

/* two f16 -> their bf16 parts: hi = bf16(w), lo = w - hi, both exact (an
 * f16's 11 significant bits fit 8 + 8, and bf16 has f16's range) */
static __device__ __forceinline__ void f16x2_parts(uint32_t u, uint32_t *hi, uint32_t *lo) {
    float2 f = __half22float2(*(const __half2 *)&u);
    __nv_bfloat16 h0 = __float2bfloat16_rn(f.x), h1 = __float2bfloat16_rn(f.y);
    __nv_bfloat16 l0 = __float2bfloat16_rn(f.x - __bfloat162float(h0));
    __nv_bfloat16 l1 = __float2bfloat16_rn(f.y - __bfloat162float(h1));
    *hi = (uint32_t)__bfloat16_as_ushort(h0) | ((uint32_t)__bfloat16_as_ushort(h1) << 16);
    *lo = (uint32_t)__bfloat16_as_ushort(l0) | ((uint32_t)__bfloat16_as_ushort(l1) << 16);
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
    uint4 hdr[U][MT][2];       /* K-quants: the super-block's scales */
    uint4 b[U][NT][MMA_PARTS]; /* the parts, read */
    float4 xf[U][NT][2];       /* or x, split when used (XF) */
};

template <int KIND, bool XF, int MT, int NT, int U>
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
                bool in = cu < nch && row < w.rows;
                if (KIND == MMA_BF16 || KIND == MMA_F16)
                    f.a[u][m][h] =
                        in ? ld_stream((const uint4 *)(w.data + row * w.row_bytes) + cu * 4 + c)
                           : zero;
                else if (mma_kq(KIND)) {
                    f.a[u][m][h] = zero;
                    f.hdr[u][m][h] = zero;
                    if (in)
                        f.a[u][m][h] =
                            ld_kq(KIND, w.data + row * w.row_bytes, cu, c, &f.hdr[u][m][h]);
                } else
                    f.a[u][m][h] = in ? ld_block(KIND, w.data + row * w.row_bytes, cu, c) : zero;
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

#define MMA_MAX_OUT 3

/* The products of one launch: outputs of one weight kind that share x
 * (q/k/v, gate/up), their tiles of weight rows side by side along the
 * grid's y (output i: tiles [tile0[i], tile0[i + 1])). One launch instead
 * of three fills the GPU at decode, where a 1024-row k or v alone is 64
 * blocks on 132 SMs. */
struct mma_outs {
    dw w[MMA_MAX_OUT];
    float *y[MMA_MAX_OUT];
    int ldy[MMA_MAX_OUT];
    const float *bias[MMA_MAX_OUT];
    int tile0[MMA_MAX_OUT + 1];
    int n;
};

/* o's tile0 for tiles of `rows` weight rows (MT x 16); the grid's y: tile0[n] */
static __host__ int mma_tiles(mma_outs &o, int rows) {
    o.tile0[0] = 0;
    for (int i = 0; i < o.n; i++)
        o.tile0[i + 1] = o.tile0[i] + (int)((o.w[i].rows + rows - 1) / rows);
    return o.tile0[o.n];
}

/* block tile ty's output and its first tile (constant indices: the
 * kernel's parameters stay in the constant bank) */
static __device__ __forceinline__ int mma_out_of(const mma_outs &o, int ty) {
    return o.n > 2 && ty >= o.tile0[2] ? 2 : o.n > 1 && ty >= o.tile0[1] ? 1 : 0;
}

/* U chunks' loads in flight per warp; PF: the next U's issued before this
 * U's mmas (decode: the loads are what takes the time) */
template <int KIND, bool XF, bool PF, int MT, int NT, int U, int MINB>
__global__ void __launch_bounds__(MMA_WARPS * 32, MINB) k_mma(mma_x x, mma_outs outs) {
    __shared__ float red[MMA_WARPS / 2][MT * NT * 4][32];
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    int oi = mma_out_of(outs, blockIdx.y);
    const dw w = oi == 2 ? outs.w[2] : oi == 1 ? outs.w[1] : outs.w[0];
    float *__restrict__ y = oi == 2 ? outs.y[2] : oi == 1 ? outs.y[1] : outs.y[0];
    int ldy = oi == 2 ? outs.ldy[2] : oi == 1 ? outs.ldy[1] : outs.ldy[0];
    const float *__restrict__ bias = oi == 2 ? outs.bias[2] : oi == 1 ? outs.bias[1] : outs.bias[0];
    int tile = (int)blockIdx.y - (oi == 2 ? outs.tile0[2] : oi == 1 ? outs.tile0[1] : 0);
    int r0 = blockIdx.x * NT * 8;               /* activation rows */
    int64_t j0 = (int64_t)tile * MT * 16;       /* weight rows */
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
        mma_load<KIND, XF>(cur, w, x, j0, r0, q, nch, g, c);
    for (int ch = q; ch < nch; ch += step) {
        if (!PF)
            mma_load<KIND, XF>(cur, w, x, j0, r0, ch, nch, g, c);
        else if (ch + step < nch) /* warp-uniform */
            mma_load<KIND, XF>(nxt, w, x, j0, r0, ch + step, nch, g, c);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (ch + u * MMA_WARPS >= nch) /* warp-uniform */
                break;
            /* the weights' mma operands: [part][first/second mma][register];
             * blocks: their integers, and the rows' scales */
            constexpr int WP = KIND == MMA_F16 ? 2 : 1;
            constexpr bool Q = KIND == MMA_Q8_0 || KIND == MMA_Q4_0 || mma_kq(KIND);
            int sub = (ch + u * MMA_WARPS) % 8; /* K-quants: the chunk's sub-block */
            uint32_t ap[MT][WP][2][4];
            float dq[MT][2], mq[MT][2];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint4 a0 = cur.a[u][m][0], a1 = cur.a[u][m][1];
                if (mma_kq(KIND)) {
                    a0 = kq_vals(KIND, a0, cur.hdr[u][m][0], sub, &dq[m][0], &mq[m][0]);
                    a1 = kq_vals(KIND, a1, cur.hdr[u][m][1], sub, &dq[m][1], &mq[m][1]);
                } else if (Q) {
                    a0 = block_vals(KIND, a0, c, &dq[m][0]);
                    a1 = block_vals(KIND, a1, c, &dq[m][1]);
                }
                uint32_t r[2][4] = {{a0.x, a1.x, a0.y, a1.y}, {a0.z, a1.z, a0.w, a1.w}};
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        if (WP == 1)
                            ap[m][0][h][i] = r[h][i];
                        else
                            f16x2_parts(r[h][i], &ap[m][0][h][i], &ap[m][WP - 1][h][i]);
                    }
            }
#pragma unroll
            for (int n = 0; n < NT; n++) {
                uint4 bp[MMA_PARTS];
                if (XF)
                    split8(cur.xf[u][n][0], cur.xf[u][n][1], bp);
                else
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        bp[s] = cur.b[u][n][s];
                float sx[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* K-quants: the chunk's sum of x */
                if (mma_kq(KIND)) {
                    const uint32_t one = 0x3f803f80u; /* bf16 1.0, twice */
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        mma_bf16(sx, one, one, one, one, bp[s].x, bp[s].y);
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
                        mma_bf16(sx, one, one, one, one, bp[s].z, bp[s].w);
                }
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    /* a block's sum from 0, then scaled into the row's sum */
                    float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    float *d = Q ? blk : acc[m][n];
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
#pragma unroll
                        for (int p = 0; p < WP; p++)
                            mma_bf16(d, ap[m][p][0][0], ap[m][p][0][1], ap[m][p][0][2],
                                     ap[m][p][0][3], bp[s].x, bp[s].y);
#pragma unroll
                    for (int s = 0; s < MMA_PARTS; s++)
#pragma unroll
                        for (int p = 0; p < WP; p++)
                            mma_bf16(d, ap[m][p][1][0], ap[m][p][1][1], ap[m][p][1][2],
                                     ap[m][p][1][3], bp[s].z, bp[s].w);
                    if (Q)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            acc[m][n][i] = fmaf(dq[m][i >> 1], blk[i], acc[m][n][i]);
                            if (mma_kq(KIND))
                                acc[m][n][i] = fmaf(-mq[m][i >> 1], sx[i], acc[m][n][i]);
                        }
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
