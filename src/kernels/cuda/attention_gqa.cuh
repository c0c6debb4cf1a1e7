/* Decode attention for a GQA group at once, with the bits of
 * k_attention_split (attention.cuh). There, a block per (token, query head,
 * run of chunks) reads every K and V row of its positions itself, so each
 * row is read once for every query head of its KV head's group: after 16k
 * tokens at 32 query / 8 KV heads of 128, 1.06 ms a layer on the H200 for
 * 67 MB of f16 K and V (bench_cuda_attn). Here a block per (token, up to
 * ATT_GR query heads of one KV head, run of chunks) reads each row once
 * for all of them. Each row (query head) runs att_chunk's arithmetic: a
 * lane a position, the score the same fmaf chain over the dims (4 at a
 * time as k_attention_tiled's stages read them: the same floats), the
 * warp's max, exp and sum, the V sums in position order, the warps'
 * partials folded in warp order, and the chunk's partial written where
 * k_attention_split writes it, for k_attention_fold. So a row's output has
 * the same bits whichever kernel ran it. A lane reading its own row alone
 * touches a sector of 32 rows at every load, so where the rows fit, each
 * warp first copies its 32 positions' K and V rows into shared memory in
 * one coalesced stream (cp.async; V's still coming in while the scores
 * run), and the lanes read them there. */
#ifndef HR_KERNELS_CUDA_ATTENTION_GQA_CUH
#define HR_KERNELS_CUDA_ATTENTION_GQA_CUH

#include "kernels/cuda/attention_tiled.cuh"

#include <cuda_pipeline.h>

#define ATT_GR 4                      /* query heads of one KV head a block */
#define ATT_GQA_MINB 4                /* blocks an SM (registers: at most 128 a thread) */
#define ATT_GQA_BPS 8                 /* blocks launched per SM, where the chunks allow */
#define ATT_GQA_KU 4                  /* a K row's 4-element loads issued before their products */
#define ATT_GQA_VU 4                  /* positions whose V elements a lane loads at once */
#define ATT_GQA_STAGE_MAX (72 * 1024) /* staged rows' bytes a block at most */

template <int PER>
struct att_gqa_shared {
    float q[ATT_GR][32 * PER];
    float o[ATT_WARPS][ATT_GR][32 * PER];
    float m[ATT_WARPS][ATT_GR], l[ATT_WARPS][ATT_GR];
};

/* The bytes between two staged rows of a format whose rows are `row` bytes
 * (elements for a plain type: kv_row_len), 0 where its rows are not staged
 * (a record that is not a whole number of words). Each lane reads its own
 * row (plain: 16 or 8 bytes at a time, records: words and halves), so the
 * pitch is an odd number of those reads: the warp's rows start on
 * different banks. */
static __host__ __device__ __forceinline__ int att_gqa_pitch(int t, size_t row) {
    int rd = kv_rec(t) ? 4 : 4 * kv_unit(t); /* a read's bytes */
    size_t b = row * (size_t)kv_unit(t);
    if (b % 4)
        return 0;
    size_t p = (b + rd - 1) / rd * rd;
    return (int)(p / rd % 2 ? p : p + rd);
}

/* Copies (cp.async, not yet waited for) the rows at byte offsets off[p] of
 * base (p < 32; SIZE_MAX: none) into dst at pitch bytes a row: the warp's
 * lanes word by word across the rows, each copy of W bytes. */
template <int W>
static __device__ __forceinline__ void att_gqa_copy_w(uint8_t *dst, int pitch, const uint8_t *base,
                                                      const size_t *off, int row, int lane) {
    int nw = row / W;
    for (int i = lane; i < 32 * nw; i += 32) {
        int p = i / nw, w = i % nw;
        if (off[p] != SIZE_MAX)
            __pipeline_memcpy_async(dst + (size_t)p * pitch + (size_t)w * W,
                                    base + off[p] + (size_t)w * W, W);
    }
}

static __device__ __forceinline__ void att_gqa_copy(uint8_t *dst, int pitch, const void *base,
                                                    const size_t *off, int row, int lane) {
    const uint8_t *b = (const uint8_t *)base;
    int al = (int)((uintptr_t)b % 16);
    if (row % 16 == 0 && pitch % 16 == 0 && al == 0)
        att_gqa_copy_w<16>(dst, pitch, b, off, row, lane);
    else if (row % 8 == 0 && pitch % 8 == 0 && al % 8 == 0)
        att_gqa_copy_w<8>(dst, pitch, b, off, row, lane);
    else
        att_gqa_copy_w<4>(dst, pitch, b, off, row, lane);
}

/* Block (t, kvh * ngr + gi, z): token t's query heads kvh * G + ATT_GR *
 * gi + k (k < ATT_GR, within the group), chunks z, z + gridDim.z, ... of
 * its range, into part as k_attention_split. PER: head_dim <= 32 PER, a
 * multiple of 4. */
template <int PER, bool STG>
__global__ void __launch_bounds__(ATT_CHUNK, ATT_GQA_MINB)
    k_attention_split_gqa(hr_attn_in a, dstep st, float *part, int n_chunks, int pk, int pv) {
    constexpr int IB = PER < 4 ? PER : 4; /* dims a lane loads at once in the V sums */
    __shared__ att_gqa_shared<PER> sh;
    __shared__ size_t offs[ATT_WARPS][2][32];
    __shared__ float cbs[2][2][16]; /* TurboQuant K's and V's codebooks (att_copy_cbs) */
    extern __shared__ float4 att_gqa_rows[];
    int G = a.n_heads / a.n_kv_heads, ngr = (G + ATT_GR - 1) / ATT_GR;
    int t = blockIdx.x, kvh = blockIdx.y / ngr, g0 = blockIdx.y % ngr * ATT_GR;
    int nr = min(ATT_GR, G - g0), h0 = kvh * G + g0, hd = a.head_dim, lo, hi;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    att_range(a, st, t, lo, hi);
    for (int i = threadIdx.x; i < nr * hd; i += blockDim.x)
        sh.q[i / hd][i % hd] = a.q[((size_t)t * a.n_heads + h0 + i / hd) * hd + i % hd];
    att_copy_cbs(a, cbs);
    __syncthreads();
    kvf kf, vf;
    att_fmts(a, cbs, kf, vf);
    if (kf.t == HR_DTYPE_TURBO) { /* scores in K's rotated basis: warp k rotates row k */
        if (wid < nr)
            kvt_rotate_q_warp(kf, kvh, sh.q[wid], sh.o[0][wid]);
        __syncthreads();
    }
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    /* STG: the warp's K and V rows, copied into shared memory whole (one
     * coalesced stream) before a lane reads its own row */
    uint8_t *sk = (uint8_t *)att_gqa_rows + (size_t)wid * 32 * (pk + pv), *sv = sk + 32 * pk;
    const void *kb = STG ? (const void *)sk : a.k_cache, *vb = STG ? (const void *)sv : a.v_cache;
    int kes = kv_unit(kf.t), ves = kv_unit(vf.t);
    for (int ci = lo / ATT_CHUNK + blockIdx.z; ci <= hi / ATT_CHUNK; ci += gridDim.z) {
        int j = ci * ATT_CHUNK + wid * 32 + lane; /* this lane's position, as att_chunk's */
        bool valid = j >= lo && j <= hi;
        size_t atk = 0, at = 0; /* position j's K and V rows in kb and vb */
        if (valid) {
            int32_t blk = tab[j / a.block_size];
            int r = kvh * a.block_size + j % a.block_size;
            atk = kv_at(kf, blk, r);
            at = kv_at(vf, blk, r);
        }
        if (STG) {
            offs[wid][0][lane] = valid ? atk * kes : SIZE_MAX;
            offs[wid][1][lane] = valid ? at * ves : SIZE_MAX;
            __syncwarp();
            att_gqa_copy(sk, pk, a.k_cache, offs[wid][0], (int)kf.row * kes, lane);
            __pipeline_commit();
            att_gqa_copy(sv, pv, a.v_cache, offs[wid][1], (int)vf.row * ves, lane);
            __pipeline_commit();
            atk = (size_t)lane * pk / kes;
            at = (size_t)lane * pv / ves;
            __pipeline_wait_prior(1); /* K's rows; V's come in during the scores */
            __syncwarp();
        }
        float s[ATT_GR];
#pragma unroll
        for (int k = 0; k < ATT_GR; k++)
            s[k] = 0.0f;
        if (valid) { /* att_dot's chain, for the rows at once */
            for (int d0 = 0; d0 < hd; d0 += 4 * ATT_GQA_KU) {
                float4 xs[ATT_GQA_KU];
#pragma unroll
                for (int u = 0; u < ATT_GQA_KU; u++)
                    if (d0 + 4 * u < hd)
                        xs[u] = att_elem4<true>(kb, kf, atk, d0 + 4 * u);
#pragma unroll
                for (int u = 0; u < ATT_GQA_KU; u++) {
                    int d = d0 + 4 * u;
                    if (d >= hd)
                        break;
                    float4 x = xs[u];
#pragma unroll
                    for (int k = 0; k < ATT_GR; k++)
                        if (k < nr) {
                            s[k] = fmaf(sh.q[k][d], x.x, s[k]);
                            s[k] = fmaf(sh.q[k][d + 1], x.y, s[k]);
                            s[k] = fmaf(sh.q[k][d + 2], x.z, s[k]);
                            s[k] = fmaf(sh.q[k][d + 3], x.w, s[k]);
                        }
                }
            }
        }
        float m[ATT_GR], l[ATT_GR], e[ATT_GR], o[ATT_GR][PER];
#pragma unroll
        for (int k = 0; k < ATT_GR; k++) {
            float sc = -INFINITY;
            if (valid && k < nr) {
                sc = __fmul_rn(s[k], a.scale); /* never fused into sc - m */
                if (a.softcap > 0)
                    sc = tanhf(sc / a.softcap) * a.softcap;
            }
            m[k] = warp_max(sc);
            l[k] = 0.0f, e[k] = 0.0f;
#pragma unroll
            for (int i = 0; i < PER; i++)
                o[k][i] = 0.0f;
            if (m[k] != -INFINITY) {
                e[k] = valid ? expf(sc - m[k]) : 0.0f;
                l[k] = warp_sum(e[k]);
            }
        }
        if (STG) {
            __pipeline_wait_prior(0); /* V's rows */
            __syncwarp();
        }
        /* att_accum_v's chains: o[i] += e_j v_j[lane + 32 i], j in order */
#pragma unroll
        for (int i0 = 0; i0 < PER; i0 += IB) {
            if (32 * i0 >= hd)
                break;
            for (int j0 = 0; j0 < 32; j0 += ATT_GQA_VU) {
                float ej[ATT_GQA_VU][ATT_GR], vv[ATT_GQA_VU][IB];
                size_t aj[ATT_GQA_VU];
                bool need[ATT_GQA_VU];
#pragma unroll
                for (int u = 0; u < ATT_GQA_VU; u++) {
                    need[u] = false;
#pragma unroll
                    for (int k = 0; k < ATT_GR; k++) {
                        ej[u][k] = __shfl_sync(0xffffffffu, e[k], j0 + u);
                        need[u] |= ej[u][k] != 0.0f;
                    }
                    aj[u] = (size_t)__shfl_sync(0xffffffffu, (unsigned long long)at, j0 + u);
                }
#pragma unroll
                for (int u = 0; u < ATT_GQA_VU; u++)
#pragma unroll
                    for (int ii = 0; ii < IB; ii++) {
                        int d = lane + 32 * (i0 + ii);
                        vv[u][ii] = need[u] && d < hd ? kv_elem(vb, vf, aj[u], d) : 0.0f;
                    }
#pragma unroll
                for (int u = 0; u < ATT_GQA_VU; u++)
#pragma unroll
                    for (int k = 0; k < ATT_GR; k++)
                        if (ej[u][k] != 0.0f) /* an invalid position, or underflow */
#pragma unroll
                            for (int ii = 0; ii < IB; ii++)
                                if (lane + 32 * (i0 + ii) < hd)
                                    o[k][i0 + ii] = fmaf(ej[u][k], vv[u][ii], o[k][i0 + ii]);
            }
        }
        /* the warps' partials, folded in warp order: row k by warp k */
#pragma unroll
        for (int k = 0; k < ATT_GR; k++) {
            if (lane == 0) {
                sh.m[wid][k] = m[k];
                sh.l[wid][k] = l[k];
            }
#pragma unroll
            for (int i = 0; i < PER; i++)
                sh.o[wid][k][lane + 32 * i] = o[k][i];
        }
        __syncthreads();
        if (wid < nr) {
            float M = -INFINITY, L = 0.0f, O[PER];
#pragma unroll
            for (int i = 0; i < PER; i++)
                O[i] = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) {
                float o2[PER];
#pragma unroll
                for (int i = 0; i < PER; i++)
                    o2[i] = sh.o[w][wid][lane + 32 * i];
                att_fold<PER>(M, L, O, sh.m[w][wid], sh.l[w][wid], o2);
            }
            float *dst = part + (((size_t)t * a.n_heads + h0 + wid) * n_chunks + ci) * (hd + 2);
            if (lane == 0) {
                dst[0] = M;
                dst[1] = L;
            }
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (lane + 32 * i < hd)
                    dst[2 + lane + 32 * i] = O[i];
        }
        __syncthreads(); /* sh is reused by the next chunk */
    }
}

/* k_attention_split_gqa<PER> on grid, its rows staged where their pitch
 * allows and they fit ATT_GQA_STAGE_MAX */
template <int PER>
static __host__ void att_gqa_launch_per(const hr_attn_in &a, const dstep &st, dim3 grid, int dev,
                                        float *part, int n_chunks, cudaStream_t s) {
    static std::atomic<signed char> state[64];
    int vt = a.v_block_stride > 0 ? a.v_dtype : a.kv_dtype, vbits = a.v_bits ? a.v_bits : a.kv_bits;
    int pk = att_gqa_pitch(a.kv_dtype, kv_row_len(a.kv_dtype, a.head_dim, a.kv_bits, a.kv_group));
    int pv = att_gqa_pitch(vt, kv_row_len(vt, a.head_dim, vbits, a.kv_group));
    size_t bytes = (size_t)ATT_WARPS * 32 * (pk + pv);
    if (pk && pv && bytes <= ATT_GQA_STAGE_MAX &&
        cu_smem_allow(k_attention_split_gqa<PER, true>, ATT_GQA_STAGE_MAX, dev, state))
        k_attention_split_gqa<PER, true>
            <<<grid, ATT_CHUNK, bytes, s>>>(a, st, part, n_chunks, pk, pv);
    else
        k_attention_split_gqa<PER, false><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks, 0, 0);
}

/* Launches k_attention_split_gqa over the step's T tokens into part (the
 * partials of n_chunks chunks a (token, head)), ATT_GQA_BPS blocks an SM
 * of n_sm where the chunks allow; false when it does not take this layer (a group of one, or a head
 * that is not a multiple of 4 up to 256): the caller's k_attention_split
 * takes it then. Either way k_attention_fold folds the partials. */
static __host__ bool att_gqa_launch(const hr_attn_in &a, const dstep &st, int T, int dev, int n_sm,
                                    float *part, int n_chunks, cudaStream_t s) {
    int G = a.n_heads / a.n_kv_heads;
    if (G < 2 || a.head_dim % 4 || a.head_dim > 256)
        return false;
    int heads = a.n_kv_heads * ((G + ATT_GR - 1) / ATT_GR), rows = T * heads;
    int g = (ATT_GQA_BPS * n_sm + rows - 1) / rows;
    g = g < n_chunks ? g : n_chunks;
    dim3 grid((unsigned)T, (unsigned)heads, (unsigned)g);
    if (a.head_dim <= 64)
        att_gqa_launch_per<2>(a, st, grid, dev, part, n_chunks, s);
    else if (a.head_dim <= 128)
        att_gqa_launch_per<4>(a, st, grid, dev, part, n_chunks, s);
    else
        att_gqa_launch_per<8>(a, st, grid, dev, part, n_chunks, s);
    return true;
}

#endif
