/* Products of many rows of x (prefill, T > 32) on the tensor cores, through
 * shared memory: the same sums as k_mma, bit for bit, faster.
 *
 * k_mma's prefill tile loads each warp's fragments straight from global
 * memory, one chunk at a time with nothing in flight while its mmas run.
 * Here a block of MMA_TILED_GROUPS x MMA_WARPS warps streams stages of the
 * block's weight rows (BM = 128) and activation parts (BN = 32 rows) into
 * shared memory with cp.async, ST - 1 stages in flight. A stage is S =
 * MMA_WARPS x U chunks of 32 columns; warp (group p, q) takes the stage's
 * chunks q, q + 4, ... for its group's 64 weight rows, so over the stages
 * warp q runs the chunks q, q + 4, q + 8, ... in order, each through the
 * same mma_chunks on the same operands as k_mma's warp q; the four warps'
 * sums are then folded by the same tree (mma_fold). So a row's result is
 * what k_mma, k_mma_staged and the decode kernels give (batched == alone);
 * bench_cuda_mv checks the bits. */
#ifndef HR_KERNELS_CUDA_MMA_TILED_CUH
#define HR_KERNELS_CUDA_MMA_TILED_CUH

#include "kernels/cuda/mma.cuh"


#define MMA_TILED_GROUPS 2
#define MMA_TILED_THREADS (MMA_TILED_GROUPS * MMA_WARPS * 32)
#define MMA_TILED_SMEM (225 * 1024) /* of the 227 KB a block may take */

/* activation rows a block over 8 (a warp's tile: 64 x 8 NT): 32. NT 8 (64
 * rows, twice the weights' reuse; the same sums) compiles, with a few
 * registers spilled at one part of x, more at three; `bench_cuda_mv
 * prefill` times both and checks their bits: not measured yet, so not the
 * engine's (docs/gpu.md) */
#define MMA_TILED_NT 4

template <int KIND, int NP, int NT_ = MMA_TILED_NT>
struct mma_tiled_p {
    static constexpr int MT = 4, NT = NT_;                 /* a warp's tile: 64 x 8 NT */
    static constexpr int BM = MMA_TILED_GROUPS * MT * 16;  /* weight rows a block */
    static constexpr int BN = NT * 8;                      /* activation rows a block */
    static constexpr bool PLAIN = KIND == MMA_BF16 || KIND == MMA_F16;
    static constexpr int U = PLAIN ? 1 : 2;                /* chunks a warp, a stage */
    static constexpr int S = MMA_WARPS * U;                /* chunks a stage */
    /* a row's 16-byte pieces a stage, and its pitch in shared memory (the
     * parts' at 4 mod 8 pieces, as plain weight rows') */
    static constexpr int WSPAN = S * mma_chunk_bytes(KIND) / 16;
    static constexpr int WPITCH = mma_row_pitch(KIND, WSPAN);
    static constexpr int XSPAN = S * 4;
    static constexpr int XPITCH = XSPAN + 4;
    static constexpr int STAGE = BM * WPITCH + NP * BN * XPITCH; /* in 16-byte pieces */
    static constexpr int ST0 = MMA_TILED_SMEM / (STAGE * 16);
    static constexpr int ST = ST0 > 4 ? 4 : ST0;
    static constexpr int BYTES = ST * STAGE * 16;
    static_assert(S * mma_chunk_bytes(KIND) % 16 == 0, "a stage: whole blocks");
    static_assert(ST >= 2, "two stages at least");
    static_assert(MMA_TILED_GROUPS * MMA_WARPS / 2 * MT * NT * 4 * 32 * 4 <= BYTES,
                  "the fold's sums fit the stages");
};

/* The stage ring of the tiled kernels (k_mma_tiled, mmq.cuh's
 * k_mmq_tiled): ST - 1 stages issued ahead; then stage i waited for (this
 * thread's copies, then the block's), the next issued into the slot every
 * warp is done with, and stage i used. issue(i) issues stage i's copies
 * (none past the last) and commits one group. On return every copy has
 * landed and the block is in step, so the stages may be reused. */
template <int ST, class Issue, class Use>
static __device__ __forceinline__ void mma_tiled_ring(int nst, Issue &issue, Use &&use) {
#pragma unroll
    for (int i = 0; i < ST - 1; i++)
        issue(i);
    for (int i = 0; i < nst; i++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads();
        issue(i + ST - 1); /* into the stage every warp is done with */
        use(i);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads(); /* the stages become the fold's sums */
}

/* a tiled block's end: the four warps of group p folded (mma_fold) in its
 * share of the stages' memory, then its warp 0 writes its 64 weight rows */
template <int MT, int NT>
static __device__ __forceinline__ void mma_tiled_out(float (&acc)[MT][NT][4], uint4 *smem,
                                                     mma_out1 o, int p, int q, int lane, int r0,
                                                     int T) {
    mma_fold(acc, (float *)smem + p * (MMA_WARPS / 2 * MT * NT * 4 * 32), q, lane);
    if (q == 0) {
        o.j0 += p * MT * 16;
        mma_write(acc, o, r0, T, lane);
    }
}

template <int KIND, int NP, int NT_>
__global__ void __launch_bounds__(MMA_TILED_THREADS, 1) k_mma_tiled(mma_x x, mma_outs outs) {
    using P = mma_tiled_p<KIND, NP, NT_>;
    constexpr int MT = P::MT, NT = P::NT;
    extern __shared__ uint4 smem[]; /* [ST][weights BM x WPITCH | parts NP x BN x XPITCH] */
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, q = w % MMA_WARPS, p = w / MMA_WARPS;
    int g = lane >> 2, c = lane & 3;
    const mma_out1 o = mma_pick(outs, blockIdx.y, P::BM);
    int r0 = blockIdx.x * P::BN, K = (int)o.w.cols, nch = K / 32, nst = (nch + P::S - 1) / P::S;
    /* stage i: the weight rows' pieces [i * WSPAN, (i + 1) * WSPAN) and the
     * parts' columns [i * S * 32, (i + 1) * S * 32), zeros past a row's end,
     * the last weight row or x's last row */
    auto issue = [&](int i) {
        if (i < nst) {
            uint4 *ws = smem + (i % P::ST) * P::STAGE, *xs = ws + P::BM * P::WPITCH;
            for (int k = threadIdx.x; k < P::BM * P::WSPAN; k += MMA_TILED_THREADS) {
                int r = k / P::WSPAN, pc = k % P::WSPAN;
                size_t off = ((size_t)i * P::WSPAN + pc) * 16;
                bool in = o.j0 + r < o.w.rows && off < o.w.row_bytes;
                const uint8_t *src = in ? o.w.data + (o.j0 + r) * o.w.row_bytes + off : o.w.data;
                cp_async16(ws + r * P::WPITCH + pc, src, in ? 16 : 0);
            }
            for (int k = threadIdx.x; k < NP * P::BN * P::XSPAN; k += MMA_TILED_THREADS) {
                int s = k / (P::BN * P::XSPAN), r = k / P::XSPAN % P::BN, pc = k % P::XSPAN;
                int col = i * P::S * 32 + pc * 8;
                bool in = r0 + r < x.T && col < K;
                const uint16_t *src =
                    in ? x.xs + s * x.stride + (int64_t)(r0 + r) * K + col : x.xs;
                cp_async16(xs + (s * P::BN + r) * P::XPITCH + pc, src, in ? 16 : 0);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    float acc[MT][NT][4] = {};
    mma_tiled_ring<P::ST>(nst, issue, [&](int i) {
        const uint4 *st = smem + (i % P::ST) * P::STAGE;
        const uint8_t *ws = (const uint8_t *)(st + p * MT * 16 * P::WPITCH);
        const uint4 *xs = st + P::BM * P::WPITCH;
#pragma unroll
        for (int u = 0; u < P::U; u++) {
            int l = q + u * MMA_WARPS, ch = i * P::S + l; /* the chunk: in the stage, in K */
            if (ch >= nch) /* warp-uniform */
                break;
            mma_frags<MT, NT, 1> f;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint8_t *row = ws + (m * 16 + g + 8 * h) * P::WPITCH * 16;
                    if (P::PLAIN)
                        f.a[0][m][h] = ((const uint4 *)row)[l * 4 + c];
                    else if (mma_kq(KIND))
                        f.a[0][m][h] = ld_kq<true>(KIND, row, l, c, &f.hdr[0][m][h]);
                    else
                        f.a[0][m][h] = ld_block<true>(KIND, row, l, c);
                }
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int s = 0; s < NP; s++)
                    f.b[0][n][s] = xs[(s * P::BN + n * 8 + g) * P::XPITCH + l * 4 + c];
            mma_chunks<KIND, false, MT, NT, 1, true, NP>(acc, f, ch, nch, c);
        }
    });
    mma_tiled_out(acc, smem, o, p, q, lane, r0, x.T);
}

/* launches k_mma_tiled for T rows of x (its parts written); false when the
 * kernel cannot take its shared memory on this device (the caller launches
 * k_mma). Takes what mma_staged_fits takes (every stage of
 * every row 16-byte aligned); dev: the current device, the stream's. */
template <int KIND, int NP, int NT = MMA_TILED_NT>
static __host__ bool mma_tiled_launch(const mma_x &x, mma_outs o, int T, int dev,
                                      cudaStream_t st) {
    using P = mma_tiled_p<KIND, NP, NT>;
    static std::atomic<signed char> state[64];
    if (!cu_smem_allow(k_mma_tiled<KIND, NP, NT>, P::BYTES, dev, state))
        return false;
    dim3 grid((unsigned)((T + P::BN - 1) / P::BN), (unsigned)mma_tiles(o, P::BM));
    k_mma_tiled<KIND, NP, NT><<<grid, MMA_TILED_THREADS, P::BYTES, st>>>(x, o);
    return true;
}

#endif
