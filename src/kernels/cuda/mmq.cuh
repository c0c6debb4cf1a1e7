/* Products of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights with x rounded to
 * int8 (as the CPU's kernels round it for these formats: per 32 columns,
 * d = max|x| / 127, q = x * 127 / max|x| to the nearest integer), on the
 * tensor cores' integer mma (m16n8k32, s8/u8 into s32; Q6_K two m16n8k16),
 * batch-invariant.
 *
 * Why: with x in bf16 (mma.cuh) a decode step's product is one mma per 16
 * weight rows x 16 columns of which 1 activation column of 8 is used, the
 * block's integers first turned into bf16; and a row's sum is a chain of
 * float mmas whose rounding only the same instruction on the same operands
 * repeats, so decode cannot leave the tensor cores while prefill uses
 * them. Here a 32-column block's sum of integer products is exact in int32
 * whatever computes it; only the block's float terms are summed, in one
 * fixed order:
 *   Q8_0:  acc = fma(d_w * d_x, isum, acc)
 *   Q4_0:  acc = fma(d_w * d_x, isum - 8 * sum(q_x), acc)  (nibbles 0..15)
 *   Q4_K, Q5_K (w = d*sc*q - dmin*m per 32-column sub-block):
 *          acc = fma((d*sc) * d_x, isum, acc); acc = fma(-((dmin*m) * d_x), sum(q_x), acc)
 *   Q6_K (w = d*sc*(q - 32), sc an int8 per 16 columns):
 *          acc = fma(d * d_x, sc_0 * isum_0 + sc_1 * isum_1, acc)  (two 16-column halves)
 * each product rounded on its own (__fmul_rn), the integers exact in
 * float (|isum| < 2^24), the chunks of 32 columns in
 * the order of mma.cuh (warp q of 4 takes the chunks q, q + 4, ...), the
 * four warps' sums folded by the same tree (mma_fold). k_mmq_staged
 * (decode: up to 32 rows of x, the weight rows through shared memory) and
 * k_mmq_tiled (prefill: 128 weight rows x 64 rows of x a block) run these
 * same operations on the same integers: a row's result is the same alone
 * or in any batch (bench_cuda_mv compares both kernels with a host
 * emulation of the order above, bit for bit). A block's integer sum takes
 * one mma per 16 weight rows x 32 columns, its integers unpacked from the
 * block by masks and shifts (no conversion), and Q6_K, whose scales change
 * every 16 columns, joins the tensor cores. */
#ifndef HR_KERNELS_CUDA_MMQ_CUH
#define HR_KERNELS_CUDA_MMQ_CUH

#include "kernels/cuda/mma_tiled.cuh"

/* a 32-column block of x: its scale and the sum of its integers (exact
 * in float) */
struct mmq_xd {
    float d, s;
};

/* x rounded: q [T][K] (row stride K), d [T][K / 32] */
struct mmq_x {
    const int8_t *q;
    const mmq_xd *d;
    int T;
};

/* the bytes mmq_x takes in a buffer of T rows of K: q, then d 16-byte
 * aligned */
static __host__ __device__ inline size_t mmq_q_bytes(int64_t T, int64_t K) {
    return ((size_t)(T * K) + 15) / 16 * 16;
}
static __host__ __device__ inline size_t mmq_bytes(int64_t T, int64_t K) {
    return mmq_q_bytes(T, K) + (size_t)(T * (K / 32)) * sizeof(mmq_xd);
}

/* x (T rows of K, stride ldx; K % 32 == 0) -> q, d: a warp per 32-column
 * block, as hr_qact_row (kernels/cpu/qdot.c): NaNs do not count in the
 * block's max and become -127 */
__global__ void k_quant_x8(const float *__restrict__ x, int ldx, int T, int K,
                           int8_t *__restrict__ q, mmq_xd *__restrict__ d) {
    int nb = K / 32;
    int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= (int64_t)T * nb)
        return;
    int lane = threadIdx.x & 31;
    int64_t t = b / nb;
    int k = (int)(b % nb) * 32 + lane;
    float v = x[t * ldx + k], a = fabsf(v);
    float amax = a > 0.0f ? a : 0.0f; /* NaN -> 0 */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float id = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    float r = rintf(__fmul_rn(v, id));
    int qi = r >= -127.0f ? (r <= 127.0f ? (int)r : 127) : -127;
    q[t * K + k] = (int8_t)qi;
    int s = __reduce_add_sync(0xffffffffu, qi);
    if (lane == 0)
        d[b] = mmq_xd{__fdiv_rn(amax, 127.0f), (float)s};
}

/* the bytes of 8 chunks (256 columns) of a row: a K-quant's super-block */
static __host__ __device__ constexpr int mmq_sb_bytes(int kind) {
    return kind == MMA_Q8_0 ? 272 : kind == MMA_Q4_0 ? 144 : kind == MMA_Q4_K ? 144
           : kind == MMA_Q5_K ? 176 : 210;
}

/* two 16-bit loads as 32 bits (Q8_0, Q4_0 and Q6_K blocks are 2-byte aligned) */
template <bool SM>
static __device__ __forceinline__ uint32_t ld_u16x2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return ld_u16<SM>(h) | (ld_u16<SM>(h + 1) << 16);
}

/* four 6-bit integers (bytes of v, 0..63) less 32, as int8 */
static __device__ __forceinline__ uint32_t less32_s8x4(uint32_t v) {
    uint32_t t = v ^ 0x20202020u, m = t & 0x20202020u; /* m: v < 32, whose bytes go negative */
    return t | (m << 1) | (m << 2);
}

/* chunk ch of a weight row (from global memory or a stage in shared
 * memory, SM) for lane column group c: its integers of the columns 4c ..
 * 4c + 3 (*lo) and 16 + 4c .. 16 + 4c + 3 (*hi), a byte each (Q8_0 and
 * Q6_K signed, the others 0..31), and the scales (*d: d, or d*sc; *m:
 * dmin*m; *k: Q6_K's two int8 scales, of lo's and hi's 16 columns) */
template <int KIND, bool SM>
static __device__ __forceinline__ void mmq_w(const uint8_t *row, int ch, int c, uint32_t *lo,
                                             uint32_t *hi, float *d, float *m, uint32_t *k) {
    *m = 0.0f;
    *k = 0;
    if (KIND == MMA_Q8_0 || KIND == MMA_Q4_0) {
        const uint8_t *b = row + (size_t)ch * (mmq_sb_bytes(KIND) / 8);
        *d = __half2float(__ushort_as_half((uint16_t)ld_u16<SM>((const uint16_t *)b)));
        uint32_t u = ld_u16x2<SM>(b + 2 + 4 * c);
        if (KIND == MMA_Q8_0) {
            *lo = u;
            *hi = ld_u16x2<SM>(b + 18 + 4 * c);
        } else { /* byte j: column j in its low nibble, j + 16 in its high */
            *lo = u & 0x0f0f0f0fu;
            *hi = (u >> 4) & 0x0f0f0f0fu;
        }
    } else if (KIND == MMA_Q6_K) {
        /* ql[128], qh[64], sc[16] (int8), d; a 128-column half h: columns l
         * of sub-block j (0..3) from ql[64h + 32(j & 1) + l] (low nibbles for
         * j < 2, high for j >= 2) and bits 2j, 2j + 1 of qh[32h + l] */
        const uint8_t *sb = row + (size_t)(ch / 8) * 210;
        int s = ch % 8, h = s / 4, j = s % 4;
        *d = __half2float(__ushort_as_half((uint16_t)ld_u16<SM>((const uint16_t *)(sb + 208))));
        *k = ld_u16<SM>((const uint16_t *)(sb + 192 + 8 * h + 2 * j));
        const uint8_t *ql = sb + 64 * h + 32 * (j & 1) + 4 * c, *qh = sb + 128 + 32 * h + 4 * c;
        int ns = j >= 2 ? 4 : 0;
        *lo = less32_s8x4(((ld_u16x2<SM>(ql) >> ns) & 0x0f0f0f0fu) |
                          (((ld_u16x2<SM>(qh) >> (2 * j)) & 0x03030303u) << 4));
        *hi = less32_s8x4(((ld_u16x2<SM>(ql + 16) >> ns) & 0x0f0f0f0fu) |
                          (((ld_u16x2<SM>(qh + 16) >> (2 * j)) & 0x03030303u) << 4));
    } else {
        constexpr bool FIVE = KIND == MMA_Q5_K;
        const uint8_t *sb = row + (size_t)(ch / 8) * mmq_sb_bytes(KIND);
        int s = ch % 8;
        kq_scales(ld_vec<SM>((const uint4 *)sb), s, d, m);
        const uint32_t *qs = (const uint32_t *)(sb + (FIVE ? 48 : 16) + 32 * (s / 2)) + c;
        int sh = 4 * (s & 1);
        *lo = (ld_vec<SM>(qs) >> sh) & 0x0f0f0f0fu;
        *hi = (ld_vec<SM>(qs + 4) >> sh) & 0x0f0f0f0fu;
        if (FIVE) { /* column j's bit s of qh[j] is its 16 */
            const uint32_t *qh = (const uint32_t *)(sb + 16) + c;
            *lo |= ((ld_vec<SM>(qh) >> s) & 0x01010101u) << 4;
            *hi |= ((ld_vec<SM>(qh + 4) >> s) & 0x01010101u) << 4;
        }
    }
}

static __device__ __forceinline__ void mma_i8(int (&d)[4], bool u8, uint32_t a0, uint32_t a1,
                                              uint32_t a2, uint32_t a3, uint32_t b0,
                                              uint32_t b1) {
    if (u8)
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 16 columns: rows g, g + 8 (a0, a1) by x's 4c.. (b0), signed */
static __device__ __forceinline__ void mma_i8_k16(int (&d)[4], uint32_t a0, uint32_t a1,
                                                  uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

/* an integer below 2^22 in magnitude as float, exactly, without a
 * conversion instruction (a quarter of the FP32 rate): 1.5 * 2^23 + i has
 * i in its mantissa */
static __device__ __forceinline__ float i22_float(int i) {
    return __fsub_rn(__int_as_float(0x4B400000 + i), 12582912.0f);
}

/* a warp's weight fragments of one chunk: MT x 16 rows (lane (g, c): rows g
 * and g + 8 of each 16, columns 4c.. and 16 + 4c..: the mma's A) and their
 * scales */
template <int MT>
struct mmq_wf {
    uint32_t a[MT][4];
    float d[MT][2], m[MT][2];
    uint32_t k[MT][2]; /* Q6_K's scales */
};

/* 8 rows of x of one chunk: row g's columns 4c.. and 16 + 4c.. (the mma's
 * B), and the blocks of rows 2c and 2c + 1, whose outputs the lane holds */
struct mmq_xf {
    uint32_t b[2];
    mmq_xd x[2];
};

/* tile m of f: the weight rows at r0 (row g) and r8 (row g + 8) */
template <int KIND, bool SM, int MT>
static __device__ __forceinline__ void mmq_load_w(mmq_wf<MT> &f, int m, const uint8_t *r0,
                                                  const uint8_t *r8, int ch, int c) {
    mmq_w<KIND, SM>(r0, ch, c, &f.a[m][0], &f.a[m][2], &f.d[m][0], &f.m[m][0], &f.k[m][0]);
    mmq_w<KIND, SM>(r8, ch, c, &f.a[m][1], &f.a[m][3], &f.d[m][1], &f.m[m][1], &f.k[m][1]);
}

/* the integer sums of one chunk: weight tile m of f by 8 rows of x (Q6_K:
 * of the two 16-column halves, is and is1) */
template <int KIND, int MT>
static __device__ __forceinline__ void mmq_isum(int (&is)[4], int (&is1)[4], const mmq_wf<MT> &f,
                                                int m, const mmq_xf &xf) {
#pragma unroll
    for (int i = 0; i < 4; i++)
        is[i] = is1[i] = 0;
    if (KIND == MMA_Q6_K) { /* the halves apart: their scales differ */
        mma_i8_k16(is, f.a[m][0], f.a[m][1], xf.b[0]);
        mma_i8_k16(is1, f.a[m][2], f.a[m][3], xf.b[1]);
    } else
        mma_i8(is, KIND != MMA_Q8_0, f.a[m][0], f.a[m][1], f.a[m][2], f.a[m][3], xf.b[0],
               xf.b[1]);
}

/* one chunk's terms (its integer sums is, is1 of weight tile m by 8 rows
 * of x, xf) into acc (the order of the file's head): the only place a sum
 * is formed, for every kernel */
template <int KIND, int MT>
static __device__ __forceinline__ void mmq_terms(float (&acc)[4], const int (&is)[4],
                                                 const int (&is1)[4], const mmq_wf<MT> &f, int m,
                                                 const mmq_xf &xf) {
#pragma unroll
    for (int i = 0; i < 4; i++) { /* row g + 8 (i >> 1), x row 2c + (i & 1) */
        const mmq_xd xv = xf.x[i & 1];
        float v;
        if (KIND == MMA_Q6_K) { /* |sc_0 isum_0 + sc_1 isum_1| < 2^24: exact */
            uint32_t k = f.k[m][i >> 1];
            v = (float)((int)(int8_t)(k & 0xff) * is[i] + (int)(int8_t)(k >> 8) * is1[i]);
        } else {
            v = i22_float(is[i]);
            if (KIND == MMA_Q4_0) /* exact: integers below 2^24 */
                v = __fsub_rn(v, __fmul_rn(8.0f, xv.s));
        }
        acc[i] = fmaf(__fmul_rn(f.d[m][i >> 1], xv.d), v, acc[i]);
        if (mma_kq(KIND))
            acc[i] = fmaf(-__fmul_rn(f.m[m][i >> 1], xv.d), xv.s, acc[i]);
    }
}

/* one chunk: its sums and terms for every weight tile, x tile n */
template <int KIND, int MT, int NT>
static __device__ __forceinline__ void mmq_chunk(float (&acc)[MT][NT][4], const mmq_wf<MT> &f,
                                                 const mmq_xf &xf, int n) {
#pragma unroll
    for (int m = 0; m < MT; m++) {
        int is[4], is1[4];
        mmq_isum<KIND>(is, is1, f, m, xf);
        mmq_terms<KIND>(acc[m][n], is, is1, f, m, xf);
    }
}

/* chunk ch (in K) of the 8 rows of x from r0, from global memory; rows past
 * T read as zeros (their outputs are not written) */
static __device__ __forceinline__ mmq_xf mmq_load_x(const mmq_x &x, int K, int r0, int ch, int g,
                                                    int c) {
    mmq_xf f;
    int row = r0 + g, nch = K / 32;
    const uint32_t *p = (const uint32_t *)(x.q + (int64_t)row * K + ch * 32) + c;
    f.b[0] = row < x.T ? __ldg(p) : 0u;
    f.b[1] = row < x.T ? __ldg(p + 4) : 0u;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int rj = r0 + 2 * c + j;
        f.x[j] = rj < x.T ? x.d[(int64_t)rj * nch + ch] : mmq_xd{0.0f, 0.0f};
    }
    return f;
}

static __device__ __forceinline__ void cp_async4(void *dst, const void *src, int bytes) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

/* A stage's weight rows: RB bytes of a row (S chunks, whole super-blocks),
 * copied in CU-byte pieces (16, or 4 where RB is not a multiple of 16:
 * Q6_K's 210-byte super-blocks), PITCH bytes apart in shared memory (16-byte
 * pieces: an odd count; 4-byte words: 4 mod 8), so that the lanes' reads of
 * rows g and g + 8 at columns 4c.. fall on distinct banks. */
template <int KIND, int S>
struct mmq_rows {
    static constexpr int RB = S / 8 * mmq_sb_bytes(KIND);
    /* (a Q6_K row is 4-byte aligned at least: mmq_fits) */
    static constexpr int CU = RB % 16 == 0 && KIND != MMA_Q6_K ? 16 : 4;
    static constexpr int PITCH =
        CU == 16 ? (RB / 16 | 1) * 16 : (RB / 4 + (12 - RB / 4 % 8) % 8) * 4;
    static_assert(S % 8 == 0 && RB % 4 == 0, "a stage: whole super-blocks, 4-byte pieces");
};

/* stage i of the n weight rows from j0 into dst: their bytes [i RB, (i + 1)
 * RB), zeros past a row's end or w's last row; threads tid of nth */
template <class R>
static __device__ __forceinline__ void mmq_stage_rows(uint8_t *dst, const dw &w, int64_t j0, int n,
                                                      int i, int tid, int nth) {
    constexpr int UN = R::RB / R::CU;
    for (int k = tid; k < n * UN; k += nth) {
        int r = k / UN, pc = k % UN;
        size_t off = (size_t)i * R::RB + (size_t)pc * R::CU;
        bool in = j0 + r < w.rows && off < w.row_bytes;
        const uint8_t *src = in ? w.data + (j0 + r) * w.row_bytes + off : w.data;
        if (R::CU == 16)
            cp_async16(dst + r * R::PITCH + pc * 16, src, in ? 16 : 0);
        else
            cp_async4(dst + r * R::PITCH + pc * 4, src, in ? 4 : 0);
    }
}

/* true when mmq.cuh takes w: a block kind whose rows and stages are
 * aligned for the copies (Q6_K: 4 bytes, whole super-blocks; the others as
 * k_mma_staged) */
static __host__ bool mmq_fits(const dw &w) {
    if (mma_kind(w) == MMA_Q6_K)
        return w.cols % 256 == 0 && ((uintptr_t)w.data & 3) == 0 && w.row_bytes % 4 == 0;
    return mma_staged_fits(w);
}

/* the decode kernel's stages: U chunks a warp, ST stages of 16 rows */
template <int KIND, int U_, int ST_>
struct mmq_stage_t {
    static constexpr int U = U_, ST = ST_, S = MMA_WARPS * U;
    using R = mmq_rows<KIND, S>;
    static constexpr int BYTES = ST * 16 * R::PITCH;
};

/* the engine's (bench_cuda_mv times others; docs/gpu.md) */
template <int KIND>
struct mmq_stage_p : mmq_stage_t<KIND, KIND == MMA_Q8_0 ? 4 : 8, 4> {};

/* Decode (and steps of up to 32 rows of x, NT x 8 a block): a block is 16
 * weight rows x NT x 8 rows of x, its 4 warps splitting the chunks (warp q:
 * q, q + 4, ...); the weight rows stream into shared memory through
 * cp.async in stages of 16 rows x P::S chunks (as k_mma_staged), ST - 1 in
 * flight. */
template <int KIND, int NT, class P = mmq_stage_p<KIND>>
__global__ void __launch_bounds__(MMA_WARPS * 32, 3) k_mmq_staged(mmq_x x, mma_outs outs) {
    using R = typename P::R;
    constexpr int U = P::U, ST = P::ST;
    extern __shared__ uint4 stage[]; /* [ST][16 rows, R::PITCH bytes apart] */
    int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const mma_out1 o = mma_pick(outs, blockIdx.y, 16);
    int K = (int)o.w.cols, nch = K / 32, nst = (nch + P::S - 1) / P::S;
    int r0 = blockIdx.x * NT * 8;
    auto issue = [&](int i) {
        if (i < nst)
            mmq_stage_rows<R>((uint8_t *)stage + (i % ST) * 16 * R::PITCH, o.w, o.j0, 16, i,
                              threadIdx.x, MMA_WARPS * 32);
        asm volatile("cp.async.commit_group;\n" ::);
    };
#pragma unroll
    for (int i = 0; i < ST - 1; i++)
        issue(i);
    /* one row tile of x (decode): the stage's x fragments loaded before
     * the stage is waited for, in flight with it */
    constexpr bool PF = NT == 1;
    float acc[1][NT][4] = {};
    for (int i = 0; i < nst; i++) {
        mmq_xf xp[PF ? U : 1];
        if (PF)
#pragma unroll
            for (int u = 0; u < U; u++) {
                int ch = i * P::S + q + u * MMA_WARPS;
                xp[u] = ch < nch ? mmq_load_x(x, K, r0, ch, g, c) : mmq_xf{};
            }
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads();
        issue(i + ST - 1); /* into the stage every warp is done with */
        const uint8_t *rows = (const uint8_t *)stage + (i % ST) * 16 * R::PITCH;
        if (PF && (i + 1) * P::S <= nch) {
            /* a whole stage: no branch between its chunks, whose loads and
             * mmas then overlap; the terms after, in chunk order */
            mmq_wf<1> f[U];
            int is[U][4], is1[U][4];
#pragma unroll
            for (int u = 0; u < U; u++) {
                mmq_load_w<KIND, true>(f[u], 0, rows + g * R::PITCH, rows + (g + 8) * R::PITCH,
                                       q + u * MMA_WARPS, c);
                mmq_isum<KIND>(is[u], is1[u], f[u], 0, xp[u]);
            }
#pragma unroll
            for (int u = 0; u < U; u++)
                mmq_terms<KIND>(acc[0][0], is[u], is1[u], f[u], 0, xp[u]);
            continue;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int l = q + u * MMA_WARPS, ch = i * P::S + l; /* in the stage, in K */
            if (ch >= nch) /* warp-uniform */
                break;
            mmq_wf<1> f;
            mmq_load_w<KIND, true>(f, 0, rows + g * R::PITCH, rows + (g + 8) * R::PITCH, l, c);
#pragma unroll
            for (int n = 0; n < NT; n++)
                mmq_chunk<KIND>(acc, f, PF ? xp[u] : mmq_load_x(x, K, r0 + n * 8, ch, g, c), n);
        }
    }
    mma_store(acc, o, r0, x.T);
}

/* Prefill: a block of MMA_TILED_GROUPS x 4 warps, BM = 128 weight rows x
 * BN = NT x 8 rows of x, stages of S chunks of the weight rows, of x's
 * integers and of its blocks' scales streamed into shared memory (as
 * k_mma_tiled); warp (group p, q) runs the stage's chunks q, q + 4, ... for
 * its group's 64 weight rows and the block's rows of x. */
template <int KIND, int NT_>
struct mmq_tiled_p {
    static constexpr int MT = 4, NT = NT_;                /* a warp's tile: 64 x 8 NT */
    static constexpr int BM = MMA_TILED_GROUPS * MT * 16; /* weight rows a block */
    static constexpr int BN = NT * 8;                     /* rows of x a block */
    static constexpr int U = KIND == MMA_Q6_K ? 4 : 2;    /* chunks a warp, a stage */
    static constexpr int S = MMA_WARPS * U;               /* chunks a stage */
    using R = mmq_rows<KIND, S>;
    static constexpr int XSPAN = S * 2;      /* x's integers: 32 bytes a chunk */
    static constexpr int XPITCH = XSPAN | 1; /* an odd pitch: 8 rows on distinct banks */
    /* x's scales chunk-major ([S][BN]): a lane's two rows 2c, 2c + 1 in one load */
    static constexpr int DPIECES = S * BN / 2;
    static constexpr int WBYTES = BM * R::PITCH; /* a multiple of 16 */
    static constexpr int STAGE = WBYTES + (BN * XPITCH + DPIECES) * 16; /* bytes */
    static constexpr int ST0 = MMA_TILED_SMEM / STAGE;
    static constexpr int ST = ST0 > 4 ? 4 : ST0;
    static constexpr int BYTES = ST * STAGE;
    static_assert(WBYTES % 16 == 0, "x's pieces 16-byte aligned");
    static_assert(ST >= 2, "two stages at least");
    static_assert(MMA_TILED_GROUPS * MMA_WARPS / 2 * MT * NT * 4 * 32 * 4 <= BYTES,
                  "the fold's sums fit the stages");
};

#define MMQ_TILED_NT 8 /* the engine's: 64 rows of x a block */

static __device__ __forceinline__ void cp_async8(void *dst, const void *src, int bytes) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

template <int KIND, int NT_>
__global__ void __launch_bounds__(MMA_TILED_THREADS, 1) k_mmq_tiled(mmq_x x, mma_outs outs) {
    using P = mmq_tiled_p<KIND, NT_>;
    constexpr int MT = P::MT, NT = P::NT;
    using R = typename P::R;
    extern __shared__ uint4 smem[]; /* [ST][weights BM x R::PITCH | x BN x XPITCH | d S x BN] */
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, q = w % MMA_WARPS, p = w / MMA_WARPS;
    int g = lane >> 2, c = lane & 3;
    const mma_out1 o = mma_pick(outs, blockIdx.y, P::BM);
    int r0 = blockIdx.x * P::BN, K = (int)o.w.cols, nch = K / 32, nst = (nch + P::S - 1) / P::S;
    auto issue = [&](int i) {
        if (i < nst) {
            uint8_t *ws = (uint8_t *)smem + (i % P::ST) * P::STAGE;
            uint4 *xs = (uint4 *)(ws + P::WBYTES);
            mmq_xd *ds = (mmq_xd *)(xs + P::BN * P::XPITCH);
            mmq_stage_rows<R>(ws, o.w, o.j0, P::BM, i, threadIdx.x, MMA_TILED_THREADS);
            for (int k = threadIdx.x; k < P::BN * P::XSPAN; k += MMA_TILED_THREADS) {
                int r = k / P::XSPAN, pc = k % P::XSPAN;
                int col = i * P::S * 32 + pc * 16;
                bool in = r0 + r < x.T && col < K;
                const int8_t *src = in ? x.q + (int64_t)(r0 + r) * K + col : x.q;
                cp_async16(xs + r * P::XPITCH + pc, src, in ? 16 : 0);
            }
            for (int k = threadIdx.x; k < P::S * P::BN; k += MMA_TILED_THREADS) {
                int l = k / P::BN, r = k % P::BN, ch = i * P::S + l;
                bool in = r0 + r < x.T && ch < nch;
                const mmq_xd *src = in ? x.d + (int64_t)(r0 + r) * nch + ch : x.d;
                cp_async8(ds + k, src, in ? 8 : 0);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    float acc[MT][NT][4] = {};
    mma_tiled_ring<P::ST>(nst, issue, [&](int i) {
        const uint8_t *st = (const uint8_t *)smem + (i % P::ST) * P::STAGE;
        const uint8_t *ws = st + p * MT * 16 * R::PITCH;
        const uint8_t *xs = st + P::WBYTES;
        const uint4 *ds = (const uint4 *)(xs + P::BN * P::XPITCH * 16);
#pragma unroll
        for (int u = 0; u < P::U; u++) {
            int l = q + u * MMA_WARPS, ch = i * P::S + l; /* in the stage, in K */
            if (ch >= nch) /* warp-uniform */
                break;
            mmq_wf<MT> f;
#pragma unroll
            for (int m = 0; m < MT; m++)
                mmq_load_w<KIND, true>(f, m, ws + (m * 16 + g) * R::PITCH,
                                       ws + (m * 16 + g + 8) * R::PITCH, l, c);
#pragma unroll
            for (int n = 0; n < NT; n++) {
                mmq_xf xf;
                const uint32_t *xr =
                    (const uint32_t *)(xs + (n * 8 + g) * P::XPITCH * 16 + l * 32) + c;
                xf.b[0] = xr[0];
                xf.b[1] = xr[4];
                uint4 dd = ds[(l * P::BN + n * 8 + 2 * c) / 2]; /* rows 2c, 2c + 1 */
                xf.x[0] = mmq_xd{__uint_as_float(dd.x), __uint_as_float(dd.y)};
                xf.x[1] = mmq_xd{__uint_as_float(dd.z), __uint_as_float(dd.w)};
                mmq_chunk<KIND>(acc, f, xf, n);
            }
        }
    });
    mma_tiled_out(acc, smem, o, p, q, lane, r0, x.T);
}

/* x rounded (k_quant_x8 into buf: mmq_bytes(T, K)), as mmq_x */
static __host__ mmq_x mmq_quantize(const float *x, int ldx, int T, int K, void *buf,
                                   cudaStream_t st) {
    int8_t *q = (int8_t *)buf;
    mmq_xd *d = (mmq_xd *)((uint8_t *)buf + mmq_q_bytes(T, K));
    int64_t blocks = (int64_t)T * (K / 32);
    k_quant_x8<<<(unsigned)((blocks + 7) / 8), 256, 0, st>>>(x, ldx, T, K, q, d);
    return mmq_x{q, d, T};
}

/* the product of T rows of x (rounded: xq) with o's weights (one block
 * kind, mmq_fits): the tiles for T > 32 where the device gives them
 * their shared memory, else the staged kernel over the rows in tiles of up
 * to 32; false (nothing launched) when the device refuses that one's */
template <int KIND, int NT = MMQ_TILED_NT>
static __host__ bool mmq_launch(const mmq_x &xq, mma_outs o, int T, int dev, cudaStream_t st) {
    using P = mmq_stage_p<KIND>;
    unsigned th = MMA_WARPS * 32;
    if (T > 32) {
        using TP = mmq_tiled_p<KIND, NT>;
        static std::atomic<signed char> state[64];
        if (cu_smem_allow(k_mmq_tiled<KIND, NT>, TP::BYTES, dev, state)) {
            dim3 grid((unsigned)((T + TP::BN - 1) / TP::BN), (unsigned)mma_tiles(o, TP::BM));
            k_mmq_tiled<KIND, NT><<<grid, MMA_TILED_THREADS, TP::BYTES, st>>>(xq, o);
            return true;
        }
    }
    /* (the stages and the fold's sums may pass 48 KB) */
    static std::atomic<signed char> s1[64], s2[64], s4[64];
    unsigned ty = (unsigned)mma_tiles(o, 16);
    if (T <= 8) {
        if (!cu_smem_allow(k_mmq_staged<KIND, 1>, P::BYTES, dev, s1))
            return false;
        k_mmq_staged<KIND, 1><<<dim3(1, ty), th, P::BYTES, st>>>(xq, o);
    } else if (T <= 16) {
        if (!cu_smem_allow(k_mmq_staged<KIND, 2>, P::BYTES, dev, s2))
            return false;
        k_mmq_staged<KIND, 2><<<dim3(1, ty), th, P::BYTES, st>>>(xq, o);
    } else {
        if (!cu_smem_allow(k_mmq_staged<KIND, 4>, P::BYTES, dev, s4))
            return false;
        k_mmq_staged<KIND, 4><<<dim3((unsigned)((T + 31) / 32), ty), th, P::BYTES, st>>>(xq, o);
    }
    return true;
}

#endif
