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
 * the same bits whichever kernel ran it. */
#ifndef HR_KERNELS_CUDA_ATTENTION_GQA_CUH
#define HR_KERNELS_CUDA_ATTENTION_GQA_CUH

#include "kernels/cuda/attention_tiled.cuh"

#define ATT_GR 4 /* query heads of one KV head a block */

template <int PER>
struct att_gqa_shared {
    float q[ATT_GR][32 * PER];
    float o[ATT_WARPS][ATT_GR][32 * PER];
    float m[ATT_WARPS][ATT_GR], l[ATT_WARPS][ATT_GR];
};

/* Block (t, kvh * ngr + gi, z): token t's query heads kvh * G + ATT_GR *
 * gi + k (k < ATT_GR, within the group), chunks z, z + gridDim.z, ... of
 * its range, into part as k_attention_split. PER: head_dim <= 32 PER, a
 * multiple of 4. */
template <int PER>
__global__ void __launch_bounds__(ATT_CHUNK) k_attention_split_gqa(hr_attn_in a, dstep st,
                                                                   float *part, int n_chunks) {
    constexpr int IB = PER < 4 ? PER : 4; /* dims a lane loads at once in the V sums */
    __shared__ att_gqa_shared<PER> sh;
    int G = a.n_heads / a.n_kv_heads, ngr = (G + ATT_GR - 1) / ATT_GR;
    int t = blockIdx.x, kvh = blockIdx.y / ngr, g0 = blockIdx.y % ngr * ATT_GR;
    int nr = min(ATT_GR, G - g0), h0 = kvh * G + g0, hd = a.head_dim, lo, hi;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    att_range(a, st, t, lo, hi);
    for (int i = threadIdx.x; i < nr * hd; i += blockDim.x)
        sh.q[i / hd][i % hd] = a.q[((size_t)t * a.n_heads + h0 + i / hd) * hd + i % hd];
    __syncthreads();
    kvf kf = kv_fmt(a, false), vf = kv_fmt(a, true);
    if (kf.t == HR_DTYPE_TURBO) { /* scores in K's rotated basis: warp k rotates row k */
        if (wid < nr)
            kvt_rotate_q_warp(kf, kvh, sh.q[wid], sh.o[0][wid]);
        __syncthreads();
    }
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    for (int ci = lo / ATT_CHUNK + blockIdx.z; ci <= hi / ATT_CHUNK; ci += gridDim.z) {
        int j = ci * ATT_CHUNK + wid * 32 + lane; /* this lane's position, as att_chunk's */
        bool valid = j >= lo && j <= hi;
        size_t at = 0; /* position j's V row */
        float s[ATT_GR];
#pragma unroll
        for (int k = 0; k < ATT_GR; k++)
            s[k] = 0.0f;
        if (valid) { /* att_dot's chain, for the rows at once */
            int32_t blk = tab[j / a.block_size];
            int r = kvh * a.block_size + j % a.block_size;
            size_t atk = kv_at(kf, blk, r);
            at = kv_at(vf, blk, r);
            for (int d = 0; d < hd; d += 4) {
                float4 x = att_elem4<true>(a.k_cache, kf, atk, d);
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
        /* att_accum_v's chains: o[i] += e_j v_j[lane + 32 i], j in order */
#pragma unroll
        for (int i0 = 0; i0 < PER; i0 += IB) {
            if (32 * i0 >= hd)
                break;
            for (int j0 = 0; j0 < 32; j0 += 8) {
                float ej[8][ATT_GR], vv[8][IB];
                size_t aj[8];
                bool need[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    need[u] = false;
#pragma unroll
                    for (int k = 0; k < ATT_GR; k++) {
                        ej[u][k] = __shfl_sync(0xffffffffu, e[k], j0 + u);
                        need[u] |= ej[u][k] != 0.0f;
                    }
                    aj[u] = (size_t)__shfl_sync(0xffffffffu, (unsigned long long)at, j0 + u);
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
#pragma unroll
                    for (int ii = 0; ii < IB; ii++) {
                        int d = lane + 32 * (i0 + ii);
                        vv[u][ii] = need[u] && d < hd ? kv_elem(a.v_cache, vf, aj[u], d) : 0.0f;
                    }
#pragma unroll
                for (int u = 0; u < 8; u++)
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

/* Launches k_attention_split_gqa over the step's T tokens into part (the
 * partials of n_chunks chunks a (token, head)), about 2 blocks an SM of
 * n_sm; false when it does not take this layer (a group of one, or a head
 * that is not a multiple of 4 up to 256): the caller's k_attention_split
 * takes it then. Either way k_attention_fold folds the partials. */
static __host__ bool att_gqa_launch(const hr_attn_in &a, const dstep &st, int T, int n_sm,
                                    float *part, int n_chunks, cudaStream_t s) {
    int G = a.n_heads / a.n_kv_heads;
    if (G < 2 || a.head_dim % 4 || a.head_dim > 256)
        return false;
    int rows = T * a.n_kv_heads * ((G + ATT_GR - 1) / ATT_GR);
    int g = (2 * n_sm + rows - 1) / rows;
    g = g < n_chunks ? g : n_chunks;
    dim3 grid((unsigned)T, (unsigned)(a.n_kv_heads * ((G + ATT_GR - 1) / ATT_GR)), (unsigned)g);
    if (a.head_dim <= 64)
        k_attention_split_gqa<2><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks);
    else if (a.head_dim <= 128)
        k_attention_split_gqa<4><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks);
    else
        k_attention_split_gqa<8><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks);
    return true;
}

#endif
