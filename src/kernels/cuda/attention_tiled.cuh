/* Attention for steps of many tokens a sequence (prefill), with the bits of
 * k_attention (attention.cuh). There, a block per (token, query head) reads
 * every K and V row of its positions from L2 on its own: at 512 tokens of an
 * 8B model that was 2.1 GB a layer, 137 ms of a 166 ms step. Here a block
 * takes 32 rows (token, query head) of one KV head, consecutive in the step,
 * and streams that KV head's positions through shared memory 32 at a time
 * (a stage), f32 as the kernels read them; every row of the block that
 * attends to a stage's positions reads them there. The stage is exactly
 * what one warp of att_chunk reads (positions c0 + 32 w ... of a 128-wide
 * chunk), and each warp runs att_chunk's arithmetic for its 4 rows on it:
 * the score of a (row, position) is the same fmaf chain over the dims, the
 * stage's max, exp and warp_sum are the same warp's, its V sum the same
 * fmaf chain over the 32 positions in order, the four stages of a chunk are
 * folded in order from empty, and the chunks into the row's running
 * partial in order, as k_attention does. So a row's output is the same
 * bits whichever kernel ran it, and batched == alone holds across them.
 *
 * The block's rows may span sequences (a ragged batch): it walks the runs of
 * one sequence in turn, each run over the union of its rows' positions. It
 * takes the runs of ATT_TILED_MIN tokens or more (att_long_run); k_attention,
 * launched beside it, the others (a decode row would be one warp of a block
 * walking its context alone). Steps of few tokens keep the split kernels.
 * Every cache format, head_dim a multiple of 4 up to 256 (others keep
 * k_attention for every token): a record (kvq.cuh) is staged as the floats
 * kv_elem reads, so the chains are att_chunk's there too. TurboQuant's rows
 * are read in their rotated basis as k_attention reads them: each warp
 * rotates its rows' queries once (kvt_rotate_q_warp) and rotates their
 * outputs back (att_write_rot). */
#ifndef HR_KERNELS_CUDA_ATTENTION_TILED_CUH
#define HR_KERNELS_CUDA_ATTENTION_TILED_CUH

#include "kernels/cuda/attention.cuh"

#define ATT_TW 8                     /* a block's warps */
#define ATT_RW 4                     /* rows (token, query head) a warp */
#define ATT_ROWS (ATT_TW * ATT_RW)   /* a block's rows */
#define ATT_GRP 32                   /* positions a stage: one warp's of a chunk */
#define ATT_TILED_MAX_HD 256
#define ATT_TILED_MINB 2             /* blocks an SM (registers: 128 a thread) */

/* shared memory of a block: the rows' queries [ROWS][hd], a stage's K rows
 * [GRP][hd + 4] (the pad puts 8 lanes' float4s on distinct banks) and V rows
 * [GRP][hd] */
static __host__ __device__ __forceinline__ size_t att_tiled_bytes(int hd) {
    return sizeof(float) * ((size_t)ATT_ROWS * hd + (size_t)ATT_GRP * (hd + 4) +
                            (size_t)ATT_GRP * hd + 2 * 2 * 16);
}

/* the 4 values at element `at` of a plain row as floats */
static __device__ __forceinline__ float4 att_load4(const void *base, size_t at, int t) {
    if (t == HR_DTYPE_F32)
        return *(const float4 *)((const float *)base + at);
    uint2 v = *(const uint2 *)((const uint16_t *)base + at);
    float2 a, b;
    if (t == HR_DTYPE_F16) {
        a = __half22float2(*(const __half2 *)&v.x);
        b = __half22float2(*(const __half2 *)&v.y);
    } else {
        a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x);
        b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
    }
    return make_float4(a.x, a.y, b.x, b.y);
}

/* the 4 floats at element i of the row at `at` (REC: K or V may be a
 * record) */
template <bool REC>
static __device__ __forceinline__ float4 att_elem4(const void *base, const kvf &f, size_t at,
                                                   int i) {
    return REC && kv_rec(f.t) ? kv_elem4(base, f, at, i) : att_load4(base, at + i, f.t);
}

/* positions [g0, g0 + GRP) of one side's rows (K: into rows of hd + 4
 * floats, V: of hd) of the run's KV head, those in [lo, hi] (the others are
 * never read) */
template <int PER, bool REC>
static __device__ __forceinline__ void att_stage(const void *base, const kvf &f, int pitch,
                                                 const int32_t *tab, int kvh, int block_size,
                                                 int g0, int lo, int hi, float *dst) {
    int q4 = f.hd / 4;
    float4 r[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) { /* every load issued before the stores */
        int u = threadIdx.x + i * ATT_TW * 32, p = u / q4, j = g0 + p;
        if (p < ATT_GRP && j >= lo && j <= hi)
            r[i] = att_elem4<REC>(base, f,
                                  kv_at(f, tab[j / block_size], kvh * block_size + j % block_size),
                                  4 * (u % q4));
    }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int u = threadIdx.x + i * ATT_TW * 32, p = u / q4, j = g0 + p;
        if (p < ATT_GRP && j >= lo && j <= hi)
            *(float4 *)(dst + p * pitch + 4 * (u % q4)) = r[i];
    }
}

/* Block (b, kvh): rows b * ROWS + i of the step's T * G rows (token
 * row / G, query head kvh * G + row % G). PER: head_dim <= 32 PER; MINB:
 * the blocks an SM must hold (registers; bench/cuda_attn.cu compares); REC:
 * K or V is a record format. */
template <int PER, int MINB = ATT_TILED_MINB, bool REC = false>
__global__ void __launch_bounds__(ATT_TW * 32, MINB) k_attention_tiled(hr_attn_in a, dstep st,
                                                                       int T) {
    extern __shared__ float4 att_tiled_sh[];
    int hd = a.head_dim, G = a.n_heads / a.n_kv_heads, kvh = blockIdx.y;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float *sq = (float *)att_tiled_sh, *sk = sq + ATT_ROWS * hd, *sv = sk + ATT_GRP * (hd + 4);
    float(*cb)[2][16] = (float(*)[2][16])(sv + ATT_GRP * hd); /* TurboQuant's codebooks */
    int r0 = blockIdx.x * ATT_ROWS, r1 = min(T * G, r0 + ATT_ROWS); /* the block's rows */
    kvf kf, vf;
    att_fmts(a, cb, kf, vf);
    if (REC)
        att_copy_cbs(a, cb);

    for (int i = threadIdx.x; i < (r1 - r0) * hd; i += blockDim.x) {
        int r = r0 + i / hd, t = r / G, h = kvh * G + r % G;
        sq[i] = a.q[((size_t)t * a.n_heads + h) * hd + i % hd];
    }
    __syncthreads();
    if (REC && kf.t == HR_DTYPE_TURBO) /* the warp's rows; sv is scratch till the first stage */
        for (int k = 0; k < ATT_RW && r0 + wid * ATT_RW + k < r1; k++)
            kvt_rotate_q_warp(kf, kvh, sq + (wid * ATT_RW + k) * hd, sv + wid * hd);

    for (int ta = r0 / G; ta <= (r1 - 1) / G;) { /* a run: tokens [ta, tb] of one sequence */
        int tb = ta;
        while (tb < (r1 - 1) / G && st.seq[tb + 1] == st.seq[ta])
            tb++;
        if (!att_long_run(st, ta, T)) { /* k_attention's (block-uniform) */
            ta = tb + 1;
            continue;
        }
        const int32_t *tab = st.tables + st.tab_off[st.seq[ta]];
        int lo_run = INT_MAX, hi_run = -1;
        for (int t = ta; t <= tb; t++) {
            int lo, hi;
            att_range(a, st, t, lo, hi);
            lo_run = min(lo_run, lo);
            hi_run = max(hi_run, hi);
        }
        /* this warp's rows in the run: their ranges and running partials */
        bool on[ATT_RW];
        int lo[ATT_RW], hi[ATT_RW];
        float M[ATT_RW], L[ATT_RW], O[ATT_RW][PER];
#pragma unroll
        for (int k = 0; k < ATT_RW; k++) {
            int r = r0 + wid * ATT_RW + k, t = r / G;
            on[k] = r < r1 && t >= ta && t <= tb;
            lo[k] = 0, hi[k] = -1;
            if (on[k])
                att_range(a, st, t, lo[k], hi[k]);
            M[k] = -INFINITY, L[k] = 0.0f;
#pragma unroll
            for (int i = 0; i < PER; i++)
                O[k][i] = 0.0f;
        }
        for (int c0 = lo_run / ATT_CHUNK * ATT_CHUNK; c0 <= hi_run; c0 += ATT_CHUNK) {
            bool in[ATT_RW]; /* row k walks this chunk (k_attention's loop) */
            float mc[ATT_RW], lc[ATT_RW], oc[ATT_RW][PER];
#pragma unroll
            for (int k = 0; k < ATT_RW; k++) {
                in[k] = on[k] && c0 >= lo[k] / ATT_CHUNK * ATT_CHUNK && c0 <= hi[k];
                mc[k] = -INFINITY, lc[k] = 0.0f;
#pragma unroll
                for (int i = 0; i < PER; i++)
                    oc[k][i] = 0.0f;
            }
            for (int g0 = c0; g0 < c0 + ATT_CHUNK; g0 += ATT_GRP) {
                __syncthreads(); /* the last stage is read */
                att_stage<PER, REC>(a.k_cache, kf, hd + 4, tab, kvh, a.block_size, g0, lo_run,
                                    hi_run, sk);
                att_stage<PER, REC>(a.v_cache, vf, hd, tab, kvh, a.block_size, g0, lo_run,
                                    hi_run, sv);
                __syncthreads();
                int j = g0 + lane; /* this lane's position, as att_chunk's */
                bool valid[ATT_RW], any = false;
                float s[ATT_RW];
#pragma unroll
                for (int k = 0; k < ATT_RW; k++) {
                    valid[k] = in[k] && j >= lo[k] && j <= hi[k];
                    any |= valid[k];
                    s[k] = 0.0f;
                }
                if (any) { /* att_dot's chain, for the 4 rows at once */
                    const float *kr = sk + lane * (hd + 4);
                    const float *q = sq + (wid * ATT_RW) * hd;
                    for (int d = 0; d < hd; d += 4) {
                        float4 kv = *(const float4 *)(kr + d);
#pragma unroll
                        for (int k = 0; k < ATT_RW; k++) {
                            float4 qv = *(const float4 *)(q + k * hd + d);
                            s[k] = fmaf(qv.x, kv.x, s[k]);
                            s[k] = fmaf(qv.y, kv.y, s[k]);
                            s[k] = fmaf(qv.z, kv.z, s[k]);
                            s[k] = fmaf(qv.w, kv.w, s[k]);
                        }
                    }
                }
                float e[ATT_RW], m[ATT_RW], l[ATT_RW], o[ATT_RW][PER];
#pragma unroll
                for (int k = 0; k < ATT_RW; k++) {
                    float sc = -INFINITY;
                    if (valid[k]) {
                        sc = __fmul_rn(s[k], a.scale); /* never fused into sc - m */
                        if (a.softcap > 0)
                            sc = tanhf(sc / a.softcap) * a.softcap;
                    }
                    m[k] = in[k] ? warp_max(sc) : -INFINITY; /* in[k]: the same for the warp */
                    l[k] = 0.0f, e[k] = 0.0f;
#pragma unroll
                    for (int i = 0; i < PER; i++)
                        o[k][i] = 0.0f;
                    if (m[k] != -INFINITY) {
                        e[k] = valid[k] ? expf(sc - m[k]) : 0.0f;
                        l[k] = warp_sum(e[k]);
                    }
                }
                /* att_accum_v's chains: o[i] += e_j v_j[lane + 32 i], j in order */
                for (int jj = 0; jj < ATT_GRP; jj++) {
                    float ej[ATT_RW];
                    bool need = false;
#pragma unroll
                    for (int k = 0; k < ATT_RW; k++) {
                        ej[k] = __shfl_sync(0xffffffffu, e[k], jj);
                        need |= ej[k] != 0.0f;
                    }
                    if (!need)
                        continue;
                    float vv[PER];
#pragma unroll
                    for (int i = 0; i < PER; i++)
                        vv[i] = lane + 32 * i < hd ? sv[jj * hd + lane + 32 * i] : 0.0f;
#pragma unroll
                    for (int k = 0; k < ATT_RW; k++)
                        if (ej[k] != 0.0f)
#pragma unroll
                            for (int i = 0; i < PER; i++)
                                if (lane + 32 * i < hd)
                                    o[k][i] = fmaf(ej[k], vv[i], o[k][i]);
                }
#pragma unroll
                for (int k = 0; k < ATT_RW; k++)
                    if (in[k])
                        att_fold<PER>(mc[k], lc[k], oc[k], m[k], l[k], o[k]);
            }
#pragma unroll
            for (int k = 0; k < ATT_RW; k++)
                if (in[k])
                    att_fold<PER>(M[k], L[k], O[k], mc[k], lc[k], oc[k]);
        }
        bool rot = REC && vf.t == HR_DTYPE_TURBO;
        if (rot)
            __syncthreads(); /* the last stage is read: sv is the warps' scratch */
#pragma unroll
        for (int k = 0; k < ATT_RW; k++)
            if (on[k]) {
                int r = r0 + wid * ATT_RW + k, t = r / G, h = kvh * G + r % G;
                att_sink<PER>(a, h, M[k], L[k], O[k]);
                if (rot)
                    att_write_rot<PER>(a, vf, t, h, L[k], O[k], sv + wid * hd);
                else
                    att_write_plain<PER>(a, t, h, L[k], O[k]);
            }
        ta = tb + 1;
    }
}

/* Launches k_attention_tiled<PER, MINB> over the long runs of the step's
 * T tokens; false when the device refuses its shared memory */
template <int PER, int MINB = ATT_TILED_MINB, bool REC = false>
static __host__ bool att_tiled_launch_per(const hr_attn_in &a, const dstep &st, int T, int dev,
                                          cudaStream_t s) {
    static std::atomic<signed char> state[64];
    if (!cu_smem_allow(k_attention_tiled<PER, MINB, REC>, att_tiled_bytes(32 * PER), dev, state))
        return false;
    int G = a.n_heads / a.n_kv_heads;
    dim3 grid((unsigned)((T * G + ATT_ROWS - 1) / ATT_ROWS), (unsigned)a.n_kv_heads);
    k_attention_tiled<PER, MINB, REC>
        <<<grid, ATT_TW * 32, att_tiled_bytes(a.head_dim), s>>>(a, st, T);
    return true;
}

template <int PER>
static __host__ bool att_tiled_launch_rec(const hr_attn_in &a, const dstep &st, int T, int dev,
                                          cudaStream_t s, bool rec) {
    return rec ? att_tiled_launch_per<PER, ATT_TILED_MINB, true>(a, st, T, dev, s)
               : att_tiled_launch_per<PER, ATT_TILED_MINB, false>(a, st, T, dev, s);
}

/* k_attention_tiled over the step's T tokens; false when it does not take
 * this layer (its formats, its head, or the device's shared memory): the
 * caller's k_attention takes every token then, else the others. */
static __host__ bool att_tiled_launch(const hr_attn_in &a, const dstep &st, int T, int dev,
                                      cudaStream_t s) {
    /* V has K's format unless v_block_stride is set (kv_fmt) */
    int vt = a.v_block_stride > 0 ? a.v_dtype : a.kv_dtype;
    bool rec = kv_rec(a.kv_dtype) || kv_rec(vt);
    if (a.head_dim % 4 || a.head_dim > ATT_TILED_MAX_HD)
        return false;
    if (a.head_dim <= 64)
        return att_tiled_launch_rec<2>(a, st, T, dev, s, rec);
    if (a.head_dim <= 128)
        return att_tiled_launch_rec<4>(a, st, T, dev, s, rec);
    return att_tiled_launch_rec<8>(a, st, T, dev, s, rec);
}

#endif
