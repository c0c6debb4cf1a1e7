/* Attention over the paged KV cache (flash-decoding). A token's positions
 * [lo, p] are cut into chunks of ATT_CHUNK at fixed positions (multiples of
 * ATT_CHUNK), and each chunk gives a softmax partial (m: the max score, l:
 * the sum of exp(s - m), o: the sum of exp(s - m) v), computed the same way
 * wherever it runs; the partials are folded left to right in chunk order
 * (att_fold, rounding pinned: no contraction). One block can walk a token's
 * chunks itself (k_attention: a step with many tokens has parallelism
 * enough), or many blocks compute them side by side into a scratch buffer
 * and one warp folds them (k_attention_split + k_attention_fold: decode).
 * Both give the same bits, so a token's attention does not depend on the
 * batch around it. */
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
} att_shared;

/* (m, l, o) <- (m, l, o) (+) (m2, l2, o2), o's dims lane + 32 i. */
static __device__ __forceinline__ void att_fold(float &m, float &l, float *o, float m2, float l2,
                                                const float *o2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY)
        return; /* both empty */
    float a = m == -INFINITY ? 0.0f : expf(m - mx), b = m2 == -INFINITY ? 0.0f : expf(m2 - mx);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(l2, b));
    for (int i = 0; i < ATT_PER; i++)
        o[i] = __fadd_rn(__fmul_rn(o[i], a), __fmul_rn(o2[i], b));
    m = mx;
}

/* q . k over hd dims of one cached row (kvq.cuh: its format f, at
 * kv_at), in dim order; a record's as over its dequantized floats. */
template <bool VEC>
static __device__ __forceinline__ float att_dot(const float *q, const void *k, const kvf &f,
                                                size_t at, int hd) {
    int t = f.t;
    if (kv_rec(t))
        return kv_dot_rec(q, k, f, at);
    float s = 0.0f;
    if (VEC && t == HR_DTYPE_F32) {
        const float4 *r = (const float4 *)((const float *)k + at);
        for (int d = 0; d < hd; d += 4) {
            float4 v = r[d / 4];
            s = fmaf(q[d], v.x, s);
            s = fmaf(q[d + 1], v.y, s);
            s = fmaf(q[d + 2], v.z, s);
            s = fmaf(q[d + 3], v.w, s);
        }
    } else if (VEC) { /* f16 / bf16: four halves at a time */
        const uint2 *r = (const uint2 *)((const uint16_t *)k + at);
        for (int d = 0; d < hd; d += 4) {
            uint2 v = r[d / 4];
            float f[4];
            if (t == HR_DTYPE_F16) {
                float2 a = __half22float2(*(const __half2 *)&v.x);
                float2 b = __half22float2(*(const __half2 *)&v.y);
                f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
            } else {
                float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&v.x);
                float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&v.y);
                f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
            }
            for (int i = 0; i < 4; i++)
                s = fmaf(q[d + i], f[i], s);
        }
    } else {
        for (int d = 0; d < hd; d++)
            s = fmaf(q[d], load_kv(k, at + d, t), s);
    }
    return s;
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
    kvf kf = kv_fmt(a, false), vf = kv_fmt(a, true); /* the rows' formats (kvq.cuh) */
    size_t at = 0; /* position j's V row */
    float s = -INFINITY;
    if (valid) {
        int32_t blk = tab[j / a.block_size];
        int r = kvh * a.block_size + j % a.block_size;
        at = kv_at(vf, blk, r);
        s = att_dot<VEC>(sh->q, a.k_cache, kf, kv_at(kf, blk, r), hd) * a.scale;
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
#pragma unroll 4
        for (int jj = 0; jj < 32; jj++) {
            float ej = __shfl_sync(0xffffffffu, e, jj);
            size_t aj = (size_t)__shfl_sync(0xffffffffu, (unsigned long long)at, jj);
            if (ej == 0.0f)
                continue; /* adds nothing (an invalid position, or underflow) */
            for (int i = 0; i < ATT_PER; i++) {
                int d = lane + 32 * i;
                if (d < hd)
                    o[i] = fmaf(ej, kv_elem(a.v_cache, vf, aj, d), o[i]);
            }
        }
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

/* token t's first position (a sliding window's start) and its query in sh */
static __device__ int att_begin(const hr_attn_in &a, const dstep &st, int t, int h,
                                att_shared *sh) {
    const float *q = a.q + ((size_t)t * a.n_heads + h) * a.head_dim;
    for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x)
        sh->q[d] = q[d];
    __syncthreads();
    kvf kf = kv_fmt(a, false);
    if (kf.t == HR_DTYPE_TURBO) /* scores in K's rotated basis (kvturbo.cuh) */
        kvt_rotate_q(kf, h / (a.n_heads / a.n_kv_heads), sh->q, sh->o[0]);
    int p = st.pos[t];
    return a.window > 0 ? max(0, p - a.window + 1) : 0;
}

static __device__ void att_write(const hr_attn_in &a, int t, int h, float l, const float *o) {
    float *out = a.out + ((size_t)t * a.n_heads + h) * a.head_dim;
    int lane = threadIdx.x & 31;
    kvf vf = kv_fmt(a, true);
    if (vf.t == HR_DTYPE_TURBO) { /* o is in V's rotated basis: rotated back */
        __shared__ float ob[HR_CU_MAX_HD];
        for (int i = 0; i < ATT_PER; i++) {
            int d = lane + 32 * i;
            if (d < a.head_dim)
                ob[d] = o[i] / l;
        }
        __syncwarp();
        kvt_unrotate_out(vf, h / (a.n_heads / a.n_kv_heads), ob, out);
        return;
    }
    for (int i = 0; i < ATT_PER; i++) {
        int d = lane + 32 * i;
        if (d < a.head_dim)
            out[d] = o[i] / l;
    }
}

/* One block per (token, query head) walks the token's chunks. */
template <bool VEC>
__global__ void __launch_bounds__(ATT_CHUNK) k_attention(hr_attn_in a, dstep st) {
    __shared__ att_shared sh;
    int t = blockIdx.x, h = blockIdx.y, p = st.pos[t];
    int kvh = h / (a.n_heads / a.n_kv_heads), lo = att_begin(a, st, t, h, &sh);
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    float M = -INFINITY, L = 0.0f, O[ATT_PER];
    for (int i = 0; i < ATT_PER; i++)
        O[i] = 0.0f;
    for (int c0 = lo / ATT_CHUNK * ATT_CHUNK; c0 <= p; c0 += ATT_CHUNK) {
        float m, l, o[ATT_PER];
        att_chunk<VEC>(a, tab, kvh, lo, p, c0, &sh, m, l, o);
        if (threadIdx.x < 32)
            att_fold(M, L, O, m, l, o);
    }
    if (threadIdx.x < 32)
        att_write(a, t, h, L, O);
}

/* Block (t, h, g) computes chunks g, g + G, ... of (token t, head h) into
 * part[t][h][chunk] = {m, l, o[hd]} (stride: n_chunks * (hd + 2)). */
template <bool VEC>
__global__ void __launch_bounds__(ATT_CHUNK) k_attention_split(hr_attn_in a, dstep st,
                                                               float *part, int n_chunks) {
    __shared__ att_shared sh;
    int t = blockIdx.x, h = blockIdx.y, p = st.pos[t], hd = a.head_dim;
    int kvh = h / (a.n_heads / a.n_kv_heads), lo = att_begin(a, st, t, h, &sh);
    const int32_t *tab = st.tables + st.tab_off[st.seq[t]];
    for (int ci = lo / ATT_CHUNK + blockIdx.z; ci <= p / ATT_CHUNK; ci += gridDim.z) {
        float m, l, o[ATT_PER];
        att_chunk<VEC>(a, tab, kvh, lo, p, ci * ATT_CHUNK, &sh, m, l, o);
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

/* One warp per (token, head): the partials folded in chunk order. */
__global__ void k_attention_fold(hr_attn_in a, dstep st, const float *part, int n_chunks) {
    int t = blockIdx.x, h = blockIdx.y, p = st.pos[t], hd = a.head_dim, lane = threadIdx.x;
    int lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
    float M = -INFINITY, L = 0.0f, O[ATT_PER];
    for (int i = 0; i < ATT_PER; i++)
        O[i] = 0.0f;
    for (int ci = lo / ATT_CHUNK; ci <= p / ATT_CHUNK; ci++) {
        const float *src = part + (((size_t)t * a.n_heads + h) * n_chunks + ci) * (hd + 2);
        float o2[ATT_PER];
        for (int i = 0; i < ATT_PER; i++)
            o2[i] = lane + 32 * i < hd ? src[2 + lane + 32 * i] : 0.0f;
        att_fold(M, L, O, src[0], src[1], o2);
    }
    att_write(a, t, h, L, O);
}

#endif
