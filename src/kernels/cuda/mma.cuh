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
 * k_split_bf16 writes the parts, dense [MMA_PARTS][T][K]. The kernels take
 * the first NP of them: MMA_PARTS, or 1 for GGUF block weights (their CPU
 * path rounds x to int8 anyway; MMA_PARTS with quant_act "f32").
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
enum { MMA_BF16, MMA_F16, MMA_Q8_0, MMA_Q4_0, MMA_Q4_K, MMA_Q5_K, MMA_Q6_K /* mmq.cuh only */ };

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
    case HR_DTYPE_Q6_K: return MMA_Q6_K;
    default: return -1;
    }
}

/* true when k_mma takes w: whole 32-column chunks; plain rows 16-byte
 * aligned, blocks 2-byte aligned */
static __host__ bool mma_fits(const dw &w) {
    int k = mma_kind(w);
    if (k < 0 || k == MMA_Q6_K || w.cols % 32 != 0)
        return false;
    if (k == MMA_BF16 || k == MMA_F16 || mma_kq(k))
        return ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0;
    return ((uintptr_t)w.data & 1) == 0 && w.row_bytes % 2 == 0;
}

/* the bytes of a 32-column chunk of a row (K-quants: an eighth of a
 * super-block) */
static __host__ __device__ __forceinline__ constexpr int mma_chunk_bytes(int kind) {
    return kind == MMA_Q8_0   ? 34
           : kind == MMA_Q4_0 ? 18
           : kind == MMA_Q4_K ? 144 / 8
           : kind == MMA_Q5_K ? 176 / 8
                              : 64;
}

/* a row's bytes: from global memory through the read-only path, or from
 * shared memory (SM: the stage k_mma_staged copied) */
template <bool SM>
static __device__ __forceinline__ uint32_t ld_u16(const uint16_t *p) {
    return SM ? (uint32_t)*p : (uint32_t)__ldg(p);
}
template <bool SM, class V>
static __device__ __forceinline__ V ld_vec(const V *p) {
    return SM ? *p : __ldg(p);
}

/* the raw chunk ch of a block row for lane c: the 8 bytes its 8 columns come
 * from in .x/.y, the block's f16 scale in .z */
template <bool SM = false>
static __device__ __forceinline__ uint4 ld_block(int kind, const uint8_t *row, int ch, int c) {
    const uint16_t *b = (const uint16_t *)(row + (size_t)ch * mma_chunk_bytes(kind));
    const uint16_t *q = b + 1 + (kind == MMA_Q8_0 ? 4 * c : 4 * (c & 1));
    return make_uint4(ld_u16<SM>(q) | (ld_u16<SM>(q + 1) << 16),
                      ld_u16<SM>(q + 2) | (ld_u16<SM>(q + 3) << 16), ld_u16<SM>(b), 0);
}

/* a K-quant super-block's chunk ch for lane c: its 8 bytes of nibbles in
 * .x/.y (Q5_K: its 8 bytes of high bits in .z/.w), the super-block's
 * d, dmin and scales in *hdr */
template <bool SM = false>
static __device__ __forceinline__ uint4 ld_kq(int kind, const uint8_t *row, int ch, int c,
                                              uint4 *hdr) {
    bool five = kind == MMA_Q5_K;
    const uint8_t *b = row + (size_t)(ch / 8) * (8 * mma_chunk_bytes(kind));
    int s = ch % 8;
    *hdr = ld_vec<SM>((const uint4 *)b);
    uint2 q = ld_vec<SM>((const uint2 *)(b + (five ? 48 : 16) + 32 * (s / 2) + 8 * c));
    uint2 h = five ? ld_vec<SM>((const uint2 *)(b + 16 + 8 * c)) : make_uint2(0, 0);
    return make_uint4(q.x, q.y, h.x, h.y);
}

/* four small integers (bytes of u, each < 128) as two bf16x2: 128 + v
 * is exact in bf16 (exponent 7, 7 mantissa bits), so (0x4300 | v) less
 * `off` is v - off + 128 exactly; lo: bytes 0, 1, hi: bytes 2, 3 */
static __device__ __forceinline__ void small_bf16x4(uint32_t u, float off, uint32_t *lo,
                                                    uint32_t *hi) {
    __nv_bfloat162 o = __float2bfloat162_rn(off);
    uint32_t a = __byte_perm(u, 0, 0x4140) | 0x43004300u;
    uint32_t b = __byte_perm(u, 0, 0x4342) | 0x43004300u;
    __nv_bfloat162 va = __hsub2(*(const __nv_bfloat162 *)&a, o);
    __nv_bfloat162 vb = __hsub2(*(const __nv_bfloat162 *)&b, o);
    *lo = *(const uint32_t *)&va;
    *hi = *(const uint32_t *)&vb;
}

/* a K-quant super-block's sub-block s: d*sc and dmin*m from its header
 * (the first 16 bytes: d, dmin, then the 12 scale bytes, kept in registers) */
static __device__ __forceinline__ void kq_scales(uint4 hdr, int s, float *ds, float *dm) {
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
}

/* a K-quant chunk (sub-block s) -> its 8 integers as bf16, d*sc and
 * dmin*m */
static __device__ __forceinline__ uint4 kq_vals(int kind, uint4 r, uint4 hdr, int s, float *ds,
                                                float *dm) {
    kq_scales(hdr, s, ds, dm);
    /* q = the chunk's nibbles (+ 16 x its high bit, Q5_K), each < 32 */
    uint32_t q0 = ((s & 1) ? r.x >> 4 : r.x) & 0x0f0f0f0fu;
    uint32_t q1 = ((s & 1) ? r.y >> 4 : r.y) & 0x0f0f0f0fu;
    if (kind == MMA_Q5_K) {
        q0 |= ((r.z >> s) & 0x01010101u) << 4;
        q1 |= ((r.w >> s) & 0x01010101u) << 4;
    }
    uint4 v;
    small_bf16x4(q0, 128.0f, &v.x, &v.y);
    small_bf16x4(q1, 128.0f, &v.z, &v.w);
    return v;
}

/* a raw chunk -> its 8 integers as bf16 (Q8_0: q; Q4_0: the low nibbles
 * for lanes 0, 1, the high ones for 2, 3, minus 8) and the scale */
static __device__ __forceinline__ uint4 block_vals(int kind, uint4 r, int c, float *d) {
    *d = __half2float(__ushort_as_half((uint16_t)r.z));
    uint4 v;
    if (kind == MMA_Q8_0) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t u = i < 2 ? r.x : r.y;
            int sh = 16 * (i & 1);
            __nv_bfloat162 p = __floats2bfloat162_rn((float)(int8_t)(u >> sh),
                                                     (float)(int8_t)(u >> (sh + 8)));
            w[i] = *(const uint32_t *)&p;
        }
        v = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        small_bf16x4(((c >> 1) ? r.x >> 4 : r.x) & 0x0f0f0f0fu, 136.0f, &v.x, &v.y);
        small_bf16x4(((c >> 1) ? r.y >> 4 : r.y) & 0x0f0f0f0fu, 136.0f, &v.z, &v.w);
    }
    return v;
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

template <int KIND, bool XF, int MT, int NT, int U, int NP = MMA_PARTS>
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
                for (int s = 0; s < NP; s++)
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

/* the output of block tile ty: its weights, y, ldy, bias and its first
 * weight row */
struct mma_out1 {
    dw w;
    float *y;
    int ldy;
    const float *bias;
    int64_t j0;
};

static __device__ __forceinline__ mma_out1 mma_pick(const mma_outs &o, int ty, int rows) {
    int oi = mma_out_of(o, ty);
    mma_out1 r;
    r.w = oi == 2 ? o.w[2] : oi == 1 ? o.w[1] : o.w[0];
    r.y = oi == 2 ? o.y[2] : oi == 1 ? o.y[1] : o.y[0];
    r.ldy = oi == 2 ? o.ldy[2] : oi == 1 ? o.ldy[1] : o.ldy[0];
    r.bias = oi == 2 ? o.bias[2] : oi == 1 ? o.bias[1] : o.bias[0];
    r.j0 = (int64_t)(ty - (oi == 2 ? o.tile0[2] : oi == 1 ? o.tile0[1] : 0)) * rows;
    return r;
}

/* The mmas of a warp's chunks ch, ch + 4, ... (U of them, those < nch;
 * FULL: all U, no branch between them, so their mma chains interleave) into
 * acc: every chunk's sum in the order the file's head states, whatever
 * kernel loaded the fragments. */
template <int KIND, bool XF, int MT, int NT, int U, bool FULL = false, int NP = MMA_PARTS>
static __device__ __forceinline__ void mma_chunks(float (&acc)[MT][NT][4],
                                                  const mma_frags<MT, NT, U> &cur, int ch,
                                                  int nch, int c) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (!FULL && ch + u * MMA_WARPS >= nch) /* warp-uniform */
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
                for (int s = 0; s < NP; s++)
                    bp[s] = cur.b[u][n][s];
            float sx[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* K-quants: the chunk's sum of x */
            if (mma_kq(KIND)) {
                const uint32_t one = 0x3f803f80u; /* bf16 1.0, twice */
#pragma unroll
                for (int s = 0; s < NP; s++)
                    mma_bf16(sx, one, one, one, one, bp[s].x, bp[s].y);
#pragma unroll
                for (int s = 0; s < NP; s++)
                    mma_bf16(sx, one, one, one, one, bp[s].z, bp[s].w);
            }
#pragma unroll
            for (int m = 0; m < MT; m++) {
                /* a block's sum from 0, then scaled into the row's sum */
                float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float *d = Q ? blk : acc[m][n];
#pragma unroll
                for (int s = 0; s < NP; s++)
#pragma unroll
                    for (int p = 0; p < WP; p++)
                        mma_bf16(d, ap[m][p][0][0], ap[m][p][0][1], ap[m][p][0][2],
                                 ap[m][p][0][3], bp[s].x, bp[s].y);
#pragma unroll
                for (int s = 0; s < NP; s++)
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
}

/* the four warps' sums folded as a tree (warp q + h into warp q, h = 2,
 * 1) through red ([MMA_WARPS / 2][MT * NT * 4][32] floats): warp 0 (q, the
 * warp's index among the four that split K) ends with the tile's sums. Every
 * thread of the block calls it (it synchronizes the block). */
template <int MT, int NT>
static __device__ __forceinline__ void mma_fold(float (&acc)[MT][NT][4], float *red, int q,
                                                int lane) {
    constexpr int N = MT * NT * 4;
#pragma unroll
    for (int h = MMA_WARPS / 2; h > 0; h /= 2) {
        if (q >= h && q < 2 * h) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        red[((q - h) * N + (m * NT + n) * 4 + i) * 32 + lane] = acc[m][n][i];
        }
        __syncthreads();
        if (q < h) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[m][n][i] += red[(q * N + (m * NT + n) * 4 + i) * 32 + lane];
        }
        __syncthreads();
    }
}

/* a warp's folded tile into y (+ bias): activation rows from r0, weight
 * rows from o.j0 */
template <int MT, int NT>
static __device__ __forceinline__ void mma_write(const float (&acc)[MT][NT][4], const mma_out1 &o,
                                                 int r0, int T, int lane) {
    int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = r0 + n * 8 + 2 * c + (i & 1);
                int64_t j = o.j0 + m * 16 + g + 8 * (i >> 1);
                if (row < T && j < o.w.rows)
                    o.y[(int64_t)row * o.ldy + j] = acc[m][n][i] + (o.bias ? o.bias[j] : 0.0f);
            }
}

/* the four warps' sums folded (mma_fold), then warp 0 writes y (+ bias) */
template <int MT, int NT>
static __device__ __forceinline__ void mma_store(float (&acc)[MT][NT][4], const mma_out1 &o,
                                                 int r0, int T) {
    __shared__ float red[MMA_WARPS / 2 * MT * NT * 4 * 32];
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5;
    mma_fold(acc, red, q, lane);
    if (q == 0)
        mma_write(acc, o, r0, T, lane);
}

/* U chunks' loads in flight per warp; PF: the next U's issued before this
 * U's mmas (decode: the loads are what takes the time) */
template <int KIND, bool XF, bool PF, int MT, int NT, int U, int MINB, int NP = MMA_PARTS>
__global__ void __launch_bounds__(MMA_WARPS * 32, MINB) k_mma(mma_x x, mma_outs outs) {
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const mma_out1 o = mma_pick(outs, blockIdx.y, MT * 16);
    int r0 = blockIdx.x * NT * 8; /* activation rows */
    int nch = (int)(o.w.cols / 32), step = MMA_WARPS * U;
    float acc[MT][NT][4] = {};
    mma_frags<MT, NT, U> cur, nxt;
    if (PF)
        mma_load<KIND, XF, MT, NT, U, NP>(cur, o.w, x, o.j0, r0, q, nch, g, c);
    for (int ch = q; ch < nch; ch += step) {
        if (!PF)
            mma_load<KIND, XF, MT, NT, U, NP>(cur, o.w, x, o.j0, r0, ch, nch, g, c);
        else if (ch + step < nch) /* warp-uniform */
            mma_load<KIND, XF, MT, NT, U, NP>(nxt, o.w, x, o.j0, r0, ch + step, nch, g, c);
        mma_chunks<KIND, XF, MT, NT, U, false, NP>(acc, cur, ch, nch, c);
        if (PF)
            cur = nxt;
    }
    mma_store(acc, o, r0, x.T);
}

/* a weight row's pitch in shared memory, in 16-byte pieces, for a stage of
 * `span` pieces: block rows (read in 2- to 8-byte pieces) at an odd pitch;
 * plain rows (lane c reads piece 4l + c of rows g, g + 8) at 4 mod 8
 * pieces, a quarter warp's two rows on the 32 banks (k_mma_staged,
 * k_mma_tiled) */
static __host__ __device__ constexpr int mma_row_pitch(int kind, int span) {
    return kind == MMA_BF16 || kind == MMA_F16 ? span + 4 : span | 1;
}

/* Decode steps (up to 8 rows of x) of block weights: the rows' bytes
 * stream into shared memory through cp.async, ST - 1 stages in flight,
 * instead of each lane's 2-byte loads of 18- or 34-byte blocks (a load
 * instruction for every 2 bytes kept the quantized products at a tenth of
 * the memory's speed). A stage is 16 weight rows x MMA_WARPS * U chunks,
 * whole blocks or super-blocks from a 16-byte boundary (mma_staged_fits);
 * the warps then read their fragments from it and run the same mma_chunks
 * on the same chunks as k_mma: the same bits, for any number of rows. The
 * activations are the parts k_split_bf16 wrote. */
template <int KIND, int U_, int ST_>
struct mma_stage_t {
    static constexpr int U = U_;                                    /* chunks a warp, a stage */
    static constexpr int ST = ST_;                                  /* stages */
    static constexpr int S = MMA_WARPS * U;                         /* chunks a stage */
    static constexpr int SPAN = S * mma_chunk_bytes(KIND) / 16;     /* 16-byte pieces a row */
    static constexpr int PITCH = mma_row_pitch(KIND, SPAN);
    static constexpr int BYTES = ST * 16 * PITCH * 16;              /* the stages */
    static_assert(S * mma_chunk_bytes(KIND) % 16 == 0 && S % 8 == 0, "a stage: whole blocks");
};

/* the engine's (bench/cuda_mv.cu measured the others) */
template <int KIND>
struct mma_stage : mma_stage_t<KIND, KIND == MMA_Q8_0 ? 4 : 8, 4> {};

static __host__ __device__ constexpr bool mma_staged_kind(int kind) {
    return kind == MMA_Q8_0 || kind == MMA_Q4_0 || mma_kq(kind);
}

/* true when k_mma_staged takes w: every stage of every row starts 16-byte
 * aligned */
static __host__ bool mma_staged_fits(const dw &w) {
    return mma_staged_kind(mma_kind(w)) && w.cols % 32 == 0 &&
           ((uintptr_t)w.data & 15) == 0 && w.row_bytes % 16 == 0;
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(bytes));
}

/* a stage's U chunks of a warp: the fragments from shared memory, then
 * mma_chunks. FULL (every chunk of the stage is < nch), Q8_0 and Q4_0: all
 * U chunks' fragments first and no branch between their mma chains, which
 * then interleave; K-quants (their scales take as many registers again) and
 * the last stage: a chunk at a time (bench_cuda_mv measured both). */
template <int KIND, int U, int PITCH, bool FULL, int NP>
static __device__ __forceinline__ void mma_stage_chunks(float (&acc)[1][1][4],
                                                        const uint8_t *rows,
                                                        const uint4 (&xb)[U][MMA_PARTS], int ch,
                                                        int nch, int q, int g, int c) {
    constexpr bool ALL = FULL && !mma_kq(KIND);
    constexpr int UL = ALL ? U : 1; /* chunks a call of mma_chunks */
#pragma unroll
    for (int u0 = 0; u0 < U; u0 += UL) {
        mma_frags<1, 1, UL> f;
#pragma unroll
        for (int u = 0; u < UL; u++) {
            int l = q + (u0 + u) * MMA_WARPS; /* the chunk within the stage */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *row = rows + (g + 8 * h) * PITCH * 16;
                if (KIND == MMA_BF16 || KIND == MMA_F16)
                    f.a[u][0][h] = ((const uint4 *)row)[l * 4 + c];
                else if (mma_kq(KIND))
                    f.a[u][0][h] = ld_kq<true>(KIND, row, l, c, &f.hdr[u][0][h]);
                else
                    f.a[u][0][h] = ld_block<true>(KIND, row, l, c);
            }
#pragma unroll
            for (int s = 0; s < NP; s++)
                f.b[u][0][s] = xb[u0 + u][s];
        }
        mma_chunks<KIND, false, 1, 1, UL, ALL, NP>(acc, f, ch + u0 * MMA_WARPS, nch, c);
    }
}

template <int KIND, class P = mma_stage<KIND>, int MINB = 3, int NP = MMA_PARTS>
__global__ void __launch_bounds__(MMA_WARPS * 32, MINB) k_mma_staged(mma_x x, mma_outs outs) {
    constexpr int U = P::U, ST = P::ST;
    extern __shared__ uint4 stage[]; /* [ST][16][PITCH] */
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const mma_out1 o = mma_pick(outs, blockIdx.y, 16);
    int nch = (int)(o.w.cols / 32), nst = (nch + P::S - 1) / P::S;
    /* stage i: the 16-byte pieces [i * SPAN, (i + 1) * SPAN) of the tile's
     * rows, zeros past a row's end or the last row */
    auto issue = [&](int i) {
        if (i < nst) {
            uint4 *dst = stage + (i % ST) * 16 * P::PITCH;
            for (int k = threadIdx.x; k < 16 * P::SPAN; k += MMA_WARPS * 32) {
                int r = k / P::SPAN, pc = k % P::SPAN;
                size_t off = ((size_t)i * P::SPAN + pc) * 16;
                bool in = o.j0 + r < o.w.rows && off < o.w.row_bytes;
                const uint8_t *src = in ? o.w.data + (o.j0 + r) * o.w.row_bytes + off : o.w.data;
                cp_async16(dst + r * P::PITCH + pc, src, in ? 16 : 0);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
#pragma unroll
    for (int i = 0; i < ST - 1; i++)
        issue(i);
    float acc[1][1][4] = {};
    for (int i = 0; i < nst; i++) {
        int ch = i * P::S + q; /* this warp's first chunk of the stage */
        /* the activations' parts: their loads in flight while the stage lands */
        uint4 xb[U][MMA_PARTS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int cu = ch + u * MMA_WARPS;
            bool in = cu < nch && g < x.T;
#pragma unroll
            for (int s = 0; s < NP; s++)
                xb[u][s] = in ? __ldg((const uint4 *)(x.xs + s * x.stride +
                                                      (int64_t)g * o.w.cols) +
                                      cu * 4 + c)
                              : make_uint4(0, 0, 0, 0);
        }
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads();
        issue(i + ST - 1); /* into the stage every warp is done with */
        const uint8_t *rows = (const uint8_t *)(stage + (i % ST) * 16 * P::PITCH);
        if ((i + 1) * P::S <= nch)
            mma_stage_chunks<KIND, U, P::PITCH, true, NP>(acc, rows, xb, ch, nch, q, g, c);
        else
            mma_stage_chunks<KIND, U, P::PITCH, false, NP>(acc, rows, xb, ch, nch, q, g, c);
    }
    mma_store(acc, o, 0, x.T);
}

#endif
