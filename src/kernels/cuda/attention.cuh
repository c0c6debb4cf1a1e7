/* Attention over the paged KV cache (flash-decoding). A token's positions
 * [lo, hi] (att_range: causal, an image's span, or an encoder's whole
 * sequence) are cut into chunks of ATT_CHUNK at fixed positions (multiples of
 * ATT_CHUNK), and each chunk gives a softmax partial (m: the max score, l:
 * the sum of exp(s - m), o: the sum of exp(s - m) v), computed the same way
 * wherever it runs; the partials are folded left to right in chunk order
 * (att_fold, rounding pinned: no contraction). One block can walk a token's
 * chunks itself (k_attention: a step with many tokens has parallelism
 * enough), or many blocks compute them side by side into a scratch buffer
 * and one warp folds them (k_attention_split + k_attention_fold: decode).
 * Both give the same bits, so a token's attention does not depend on the
 * batch around it; both fold a head's sink (gpt_oss) last, the same way
 * (att_sink). */
#ifndef HR_KERNELS_CUDA_ATTENTION_CUH
#define HR_KERNELS_CUDA_ATTENTION_CUH

#include "kernels/cuda/ops.cuh"

#define ATT_WARPS 4                /* a block's warps, one position per lane */
#define ATT_CHUNK (ATT_WARPS * 32) /* positions of one partial */
#define ATT_PER (HR_CU_MAX_HD / 32) /* output dims per lane: lane, lane + 32, ... */

typedef struct att_shared {
    float q[HR_CU_MAX_HD];
    float o[ATT_WARPS][HR_CU_MAX_HD];
    float m[ATT_WARPS], l[ATT_WARPS];
    float cb[2][2][16]; /* TurboQuant K's and V's codebooks (kvt_copy_cb) */
} att_shared;

/* the formats of K (v false) and V, TurboQuant's reading the block's
 * copies of their codebooks */
static __device__ __forceinline__ void att_fmts(const hr_attn_in &a, float (*cb)[2][16], kvf &kf,
                                                kvf &vf) {
    kf = kv_fmt(a, false);
    vf = kv_fmt(a, true);
    if (kf.t == HR_DTYPE_TURBO)
        kvt_bind(kf, cb[0]);
    if (vf.t == HR_DTYPE_TURBO)
        kvt_bind(vf, cb[1]);
}

/* TurboQuant K's and V's codebooks into cb (every thread of the block; a
 * __syncthreads before they are read) */
static __device__ __forceinline__ void att_copy_cbs(const hr_attn_in &a, float (*cb)[2][16]) {
    kvf kf = kv_fmt(a, false), vf = kv_fmt(a, true);
    if (kf.t == HR_DTYPE_TURBO)
        kvt_copy_cb(kf, cb[0]);
    if (vf.t == HR_DTYPE_TURBO)
        kvt_copy_cb(vf, cb[1]);
}

/* (m, l, o) <- (m, l, o) (+) (m2, l2, o2), o's dims lane + 32 i. */
template <int PER = ATT_PER>
static __device__ __forceinline__ void att_fold(float &m, float &l, float *o, float m2, float l2,
                                                const float *o2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY)
        return; /* both empty */
    float a = m == -INFINITY ? 0.0f : expf(m - mx), b = m2 == -INFINITY ? 0.0f : expf(m2 - mx);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(l2, b));
    for (int i = 0; i < PER; i++)
        o[i] = __fadd_rn(__fmul_rn(o[i], a), __fmul_rn(o2[i], b));
    m = mx;
}

/* q . k over hd dims of one cached row (kvq.cuh: its format f, at
 * kv_at), in dim order; a record's as over its dequantized floats. A plain
 * row is read 64 values at a time, the loads issued before their FMAs: a
 * decode token's attention is a chain of these loads, and one at a time it
 * was bound by their latency (68 us a layer at 600 positions on the H200,
 * for 5 MB). */
#define ATT_DOT_BATCH 16 /* float4 / uint2 loads in flight per lane */
template <bool VEC>
static __device__ __forceinline__ float att_dot(const float *q, const void *k, const kvf &f,
                                                size_t at, int hd) {
    int t = f.t;
    if (kv_rec(t))
        return kv_dot_rec(q, k, f, at);
    float s = 0.0f;
    if (VEC && t == HR_DTYPE_F32) {
        const float4 *r = (const float4 *)((const float *)k + at);
        for (int d0 = 0; d0 < hd; d0 += 4 * ATT_DOT_BATCH) {
            float4 v[ATT_DOT_BATCH];
#pragma unroll
            for (int i = 0; i < ATT_DOT_BATCH; i++)
                v[i] = d0 + 4 * i < hd ? r[d0 / 4 + i] : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < ATT_DOT_BATCH; i++) {
                int d = d0 + 4 * i;
                if (d < hd) {
                    s = fmaf(q[d], v[i].x, s);
                    s = fmaf(q[d + 1], v[i].y, s);
                    s = fmaf(q[d + 2], v[i].z, s);
                    s = fmaf(q[d + 3], v[i].w, s);
                }
            }
        }
    } else if (VEC) { /* f16 / bf16: four halves at a time */
        const uint2 *r = (const uint2 *)((const uint16_t *)k + at);
        for (int d0 = 0; d0 < hd; d0 += 4 * ATT_DOT_BATCH) {
            uint2 v[ATT_DOT_BATCH];
#pragma unroll
            for (int i = 0; i < ATT_DOT_BATCH; i++)
                v[i] = d0 + 4 * i < hd ? r[d0 / 4 + i] : make_uint2(0, 0);
#pragma unroll
            for (int i = 0; i < ATT_DOT_BATCH; i++) {
                int d = d0 + 4 * i;
                if (d >= hd)
                    continue;
                float f[4];
                if (t == HR_DTYPE_F16) {
                    float2 a = __half22float2(*(const __half2 *)&v[i].x);
                    float2 b = __half22float2(*(const __half2 *)&v[i].y);
                    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
                } else {
                    float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v[i].x);
                    float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&v[i].y);
                    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
                }
                for (int u = 0; u < 4; u++)
                    s = fmaf(q[d + u], f[u], s);
            }
        }
    } else {
        for (int d = 0; d < hd; d++)
            s = fmaf(q[d], load_kv(k, at + d, t), s);
    }
    return s;
}

/* o[i] += e_j v_j[lane + 32 i] over the warp's 32 positions in order
 * (positions with e_j = 0 add nothing), 8 positions' loads of 4 dims in
 * flight before their FMAs */
static __device__ __forceinline__ void att_accum_v(const hr_attn_in &a, const kvf &vf, float e,
                                                   size_t at, float *o) {
    int lane = threadIdx.x & 31, hd = a.head_dim;
#pragma unroll
    for (int i0 = 0; i0 < ATT_PER; i0 += 4) {
        if (32 * i0 >= hd)
            break;
        for (int j0 = 0; j0 < 32; j0 += 8) {
            float ej[8], vv[8][4];
            size_t aj[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                ej[u] = __shfl_sync(0xffffffffu, e, j0 + u);
                aj[u] = (size_t)__shfl_sync(0xffffffffu, (unsigned long long)at, j0 + u);
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
#pragma unroll
                for (int ii = 0; ii < 4; ii++) {
                    int d = lane + 32 * (i0 + ii);
                    vv[u][ii] = ej[u] != 0.0f && d < hd ? kv_elem(a.v_cache, vf, aj[u], d) : 0.0f;
                }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (ej[u] != 0.0f) /* an invalid position, or underflow */
#pragma unroll
                    for (int ii = 0; ii < 4; ii++)
                        if (lane + 32 * (i0 + ii) < hd)
                            o[i0 + ii] = fmaf(ej[u], vv[u][ii], o[i0 + ii]);
        }
    }
}

/* The partial of chunk [c0, c0 + ATT_CHUNK) cut to [lo, p], in warp 0's m,
 * l, o (the other warps' are scratch). Every thread of the block calls it;
 * sh->q holds the query. */
template <bool VEC>
static __device__ void att_chunk(const hr_attn_in &a, const int32_t *tab, int kvh, int lo, int p,
                                 int c0, att_shared *sh, float &m, float &l, float *o) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, hd = a.head_dim;
    int j = c0 + wid * 32 + lane;
    bool valid = j >= lo && j <= p;
    kvf kf, vf; /* the rows' formats (kvq.cuh) */
    att_fmts(a, sh->cb, kf, vf);
    size_t at = 0; /* position j's V row */
    float s = -INFINITY;
    if (valid) {
        int32_t blk = tab[j / a.block_size];
        int r = kvh * a.block_size + j % a.block_size;
        at = kv_at(vf, blk, r);
        s = __fmul_rn(att_dot<VEC>(sh->q, a.k_cache, kf, kv_at(kf, blk, r), hd), a.scale);
        if (a.softcap > 0)
            s = tanhf(s / a.softcap) * a.softcap;
    }
    m = warp_max(s);
    l = 0.0f;
    for (int i = 0; i < ATT_PER; i++)
        o[i] = 0.0f;
    if (m != -INFINITY) {
        float e = valid ? expf(s - m) : 0.0f;
        l = warp_sum(e);
        att_accum_v(a, vf, e, at, o);
    }
    /* the warps' partials, folded in warp order */
    if (lane == 0) {
        sh->m[wid] = m;
        sh->l[wid] = l;
    }
    for (int i = 0; i < ATT_PER; i++)
        if (lane + 32 * i < HR_CU_MAX_HD)
            sh->o[wid][lane + 32 * i] = o[i];
    __syncthreads();
    if (wid == 0) {
        m = -INFINITY;
        l = 0.0f;
        for (int i = 0; i < ATT_PER; i++)
            o[i] = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
            float o2[ATT_PER];
            for (int i = 0; i < ATT_PER; i++)
                o2[i] = sh->o[w][lane + 32 * i];
            att_fold(m, l, o, sh->m[w], sh->l[w], o2);
        }
    }
    __syncthreads(); /* sh is reused by the next chunk */
}

/* token t's positions [lo, hi]: from its sliding window's start (0: none)
 * to its own position (causal), the end of its image's span (attn_end), or
 * the last of its sequence in this step (bidirectional) */
static __device__ __forceinline__ void att_range(const hr_attn_in &a, const dstep &st, int t,
                                                 int &lo, int &hi) {
    int p = st.pos[t];
    lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
    hi = (a.bidirectional ? st.end_bidir[t] : st.end_causal[t]) - 1;
}

/* token t's query in sh */
static __device__ void att_begin(const hr_attn_in &a, int t, int h, att_shared *sh) {
    const float *q = a.q + ((size_t)t * a.n_heads + h) * a.head_dim;
    for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x)
        sh->q[d] = q[d];
    att_copy_cbs(a, sh->cb);
    __syncthreads();
    kvf kf = kv_fmt(a, false);
    if (kf.t == HR_DTYPE_TURBO) /* scores in K's rotated basis (kvturbo.cuh) */
        kvt_rotate_q(kf, h / (a.n_heads / a.n_kv_heads), sh->q, sh->o[0]);
}

/* head h's sink (a logit with no value, in the softmax's denominator only)
 * folded into (M, L, O) after the chunks, as the partial (sink, 1, 0) */
template <int PER = ATT_PER>
static __device__ __forceinline__ void att_sink(const hr_attn_in &a, int h, float &M, float &L,
                                                float *O) {
    if (!a.sinks)
        return;
    float z[PER];
    for (int i = 0; i < PER; i++)
        z[i] = 0.0f;
    att_fold<PER>(M, L, O, a.sinks[h], 1.0f, z);
}

/* a plain V's output row (not TurboQuant's rotated basis) */
template <int PER = ATT_PER>
static __device__ __forceinline__ void att_write_plain(const hr_attn_in &a, int t, int h, float l,
                                                       const float *o) {
    float *out = a.out + ((size_t)t * a.n_heads + h) * a.head_dim;
    int lane = threadIdx.x & 31;
    for (int i = 0; i < PER; i++) {
        int d = lane + 32 * i;
        if (d < a.head_dim)
            out[d] = o[i] / l;
    }
}

/* an output row in TurboQuant V's rotated basis, rotated back; ob: hd
 * floats of the warp's shared scratch (a whole warp) */
template <int PER = ATT_PER>
static __device__ void att_write_rot(const hr_attn_in &a, const kvf &vf, int t, int h, float l,
                                     const float *o, float *ob) {
    float *out = a.out + ((size_t)t * a.n_heads + h) * a.head_dim;
    int lane = threadIdx.x & 31;
    for (int i = 0; i < PER; i++) {
        int d = lane + 32 * i;
        if (d < a.head_dim)
            ob[d] = o[i] / l;
    }
    __syncwarp();
    kvt_unrotate_out(vf, h / (a.n_heads / a.n_kv_heads), ob, out);
    __syncwarp(); /* ob is the warp's next row's */
}

template <int PER = ATT_PER>
static __device__ void att_write(const hr_attn_in &a, int t, int h, float l, const float *o) {
    kvf vf = kv_fmt(a, true);
    if (vf.t == HR_DTYPE_TURBO) { /* o is in V's rotated basis */
        __shared__ float ob[HR_CU_MAX_HD];
        att_write_rot<PER>(a, vf, t, h, l, o, ob);
        return;
    }
    att_write_plain<PER>(a, t, h, l, o);
}

/* tokens a sequence's run in a step (its tokens side by side) must have for
 * k_attention_tiled (attention_tiled.cuh) to take them */
#define ATT_TILED_MIN 8

/* token t's run of its sequence (the tokens beside it of the same sequence,
 * among the step's T) has ATT_TILED_MIN tokens or more */
static __device__ __forceinline__ bool att_long_run(const dstep &st, int t, int T) {
    int s = st.seq[t], n = 1;
    for (int u = t - 1; u >= 0 && n < ATT_TILED_MIN && st.seq[u] == s; u--)
        n++;
    for (int u = t + 1; u < T && n < ATT_TILED_MIN && st.seq[u] == s; u++)
        n++;
    return n >= ATT_TILED_MIN;
}

/* One block per (token, query head) walks the token's chunks; with
 * skip_long, not the tokens of long runs (k_attention_tiled's). */
template <bool VEC>
__global__ void __launch_bounds__(ATT_CHUNK) k_attention(hr_attn_in a, dstep st, bool skip_long) {
    __shared__ att_shared sh;
    int t = blockIdx.x, h = blockIdx.y, lo, hi;
    if (skip_long && att_long_run(st, t, gridDim.x))
        return;
    int kvh = h / (a.n_heads / a.n_kv_heads);
    att_range(a, st, t, lo, hi);
    att_begin(a, t, h, &sh);
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    float M = -INFINITY, L = 0.0f, O[ATT_PER];
    for (int i = 0; i < ATT_PER; i++)
        O[i] = 0.0f;
    for (int c0 = lo / ATT_CHUNK * ATT_CHUNK; c0 <= hi; c0 += ATT_CHUNK) {
        float m, l, o[ATT_PER];
        att_chunk<VEC>(a, tab, kvh, lo, hi, c0, &sh, m, l, o);
        if (threadIdx.x < 32)
            att_fold(M, L, O, m, l, o);
    }
    if (threadIdx.x < 32) {
        att_sink(a, h, M, L, O);
        att_write(a, t, h, L, O);
    }
}

/* Block (t, h, g) computes chunks g, g + G, ... of (token t, head h) into
 * part[t][h][chunk] = {m, l, o[hd]} (stride: n_chunks * (hd + 2)). */
template <bool VEC>
__global__ void __launch_bounds__(ATT_CHUNK) k_attention_split(hr_attn_in a, dstep st,
                                                               float *part, int n_chunks) {
    __shared__ att_shared sh;
    int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim, lo, hi;
    int kvh = h / (a.n_heads / a.n_kv_heads);
    att_range(a, st, t, lo, hi);
    att_begin(a, t, h, &sh);
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    for (int ci = lo / ATT_CHUNK + blockIdx.z; ci <= hi / ATT_CHUNK; ci += gridDim.z) {
        float m, l, o[ATT_PER];
        att_chunk<VEC>(a, tab, kvh, lo, hi, ci * ATT_CHUNK, &sh, m, l, o);
        if (threadIdx.x < 32) {
            float *dst = part + (((size_t)t * a.n_heads + h) * n_chunks + ci) * (hd + 2);
            int lane = threadIdx.x;
            if (lane == 0) {
                dst[0] = m;
                dst[1] = l;
            }
            for (int i = 0; i < ATT_PER; i++)
                if (lane + 32 * i < hd)
                    dst[2 + lane + 32 * i] = o[i];
        }
    }
}

/* One warp per (token, head): the partials folded in chunk order, AHEAD
 * chunks' loads issued before their folds (after 16k tokens a head has 128
 * chunks, and one at a time each fold waited on its loads). PER: head_dim <=
 * 32 PER. */
template <int PER>
__global__ void k_attention_fold(hr_attn_in a, dstep st, const float *part, int n_chunks) {
    constexpr int ATT_FOLD_AHEAD = PER <= 8 ? 8 : 4; /* AHEAD (registers: 8 x PER floats) */
    int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim, lane = threadIdx.x, lo, hi;
    att_range(a, st, t, lo, hi);
    float M = -INFINITY, L = 0.0f, O[PER];
    for (int i = 0; i < PER; i++)
        O[i] = 0.0f;
    const float *head = part + ((size_t)t * a.n_heads + h) * n_chunks * (hd + 2);
    for (int c0 = lo / ATT_CHUNK; c0 <= hi / ATT_CHUNK; c0 += ATT_FOLD_AHEAD) {
        float m2[ATT_FOLD_AHEAD], l2[ATT_FOLD_AHEAD], o2[ATT_FOLD_AHEAD][PER];
#pragma unroll
        for (int u = 0; u < ATT_FOLD_AHEAD; u++) {
            const float *src = head + (size_t)(c0 + u) * (hd + 2);
            bool in = c0 + u <= hi / ATT_CHUNK;
            m2[u] = in ? src[0] : -INFINITY;
            l2[u] = in ? src[1] : 0.0f;
#pragma unroll
            for (int i = 0; i < PER; i++)
                o2[u][i] = in && lane + 32 * i < hd ? src[2 + lane + 32 * i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < ATT_FOLD_AHEAD; u++)
            if (c0 + u <= hi / ATT_CHUNK)
                att_fold<PER>(M, L, O, m2[u], l2[u], o2[u]);
    }
    att_sink<PER>(a, h, M, L, O);
    att_write<PER>(a, t, h, L, O);
}

/* k_attention_fold over the step's T tokens */
static __host__ void att_fold_launch(const hr_attn_in &a, const dstep &st, int T, const float *part,
                                     int n_chunks, cudaStream_t s) {
    dim3 grid((unsigned)T, (unsigned)a.n_heads);
    if (a.head_dim <= 64)
        k_attention_fold<2><<<grid, 32, 0, s>>>(a, st, part, n_chunks);
    else if (a.head_dim <= 128)
        k_attention_fold<4><<<grid, 32, 0, s>>>(a, st, part, n_chunks);
    else if (a.head_dim <= 256)
        k_attention_fold<8><<<grid, 32, 0, s>>>(a, st, part, n_chunks);
    else
        k_attention_fold<ATT_PER><<<grid, 32, 0, s>>>(a, st, part, n_chunks);
}

/* Launches k_attention_split over the step's T tokens into part (the
 * partials of n_chunks chunks a (token, head)), about 2 blocks an SM of
 * n_sm; k_attention_fold folds them. */
static __host__ void att_split_launch(const hr_attn_in &a, const dstep &st, int T, int n_sm,
                                      float *part, int n_chunks, cudaStream_t s) {
    int g = (2 * n_sm + T * a.n_heads - 1) / (T * a.n_heads);
    g = g < n_chunks ? g : n_chunks;
    dim3 grid((unsigned)T, (unsigned)a.n_heads, (unsigned)g);
    if (a.head_dim % 4 == 0)
        k_attention_split<true><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks);
    else
        k_attention_split<false><<<grid, ATT_CHUNK, 0, s>>>(a, st, part, n_chunks);
}

#endif
