/* The forward pass's kernels on the GPU, f32 activations and accumulation
 * (no TF32): each one computes what its CPU twin (kernels/cpu/ops.h,
 * backend_cpu.c) computes, in another summation order. Bodies are device
 * functions; backend_cuda.cu launches them. */
#ifndef HR_KERNELS_CUDA_OPS_CUH
#define HR_KERNELS_CUDA_OPS_CUH

extern "C" {
#include "kernels/backend.h"
}
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/kvq.cuh"
#include "kernels/cuda/warp.cuh"

#include <atomic>
#include <math.h>

/* Lets kernel fn take `bytes` of dynamic shared memory on device dev (the
 * attribute set once a device and kernel: state is the kernel's, 0 not yet,
 * 1 set, -1 refused; racing threads set it twice, harmlessly); false where
 * the device refuses (the caller falls back to another kernel). */
template <class F>
static __host__ bool cu_smem_allow(F *fn, size_t bytes, int dev,
                                   std::atomic<signed char> (&state)[64]) {
    if (dev < 0 || dev >= 64)
        return false;
    if (state[dev].load(std::memory_order_relaxed) == 0) {
        bool set = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)bytes) == cudaSuccess;
        if (!set)
            (void)cudaGetLastError();
        state[dev].store(set ? 1 : -1, std::memory_order_relaxed);
    }
    return state[dev].load(std::memory_order_relaxed) > 0;
}

#define HR_CU_MAX_HD 512 /* longest head the attention kernel takes */

/* the sum of v over the block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets it. red: 32 floats of shared memory. */
static __device__ float block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    return warp_sum(s);
}

/* HEARTH_FAULT=device:N (core/fault.h): a write to an invalid address, so
 * that the step faults as a broken kernel would */
__global__ void k_fault(void) { *(volatile int *)(uintptr_t)16 = 1; }

/* ---- products: y[n][m] = x[n][k] . w[m][k]^T (+ bias) -------------------------- */

/* One warp per output column j = row of w, NR rows of x at a time. Plain
 * dtypes: lanes take consecutive columns; quantized ones: each lane 32
 * columns (one dequantized slice) at a time. */
template <int NR>
__global__ void k_matmul(const float *__restrict__ x, int ldx, int n, dw w,
                         float *__restrict__ y, int ldy, const float *__restrict__ bias) {
    int lane = threadIdx.x & 31;
    int64_t j = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int r0 = blockIdx.y * NR;
    if (j >= w.rows)
        return;
    float acc[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = 0.0f;
    int64_t k = w.cols;
    if (is_plain(w.dtype)) {
        for (int64_t c = lane; c < k; c += 32) {
            float wv = ld_plain(w.data, w.dtype, (size_t)j * k + c);
            for (int r = 0; r < NR; r++)
                if (r0 + r < n)
                    acc[r] += wv * x[(size_t)(r0 + r) * ldx + c];
        }
    } else {
        for (int64_t c0 = (int64_t)lane * 32; c0 < k; c0 += 32 * 32) {
            float wv[32];
            load32(w, j, c0, wv);
            for (int r = 0; r < NR; r++)
                if (r0 + r < n) {
                    const float *xr = x + (size_t)(r0 + r) * ldx + c0;
                    float s = 0.0f;
                    for (int i = 0; i < 32; i++)
                        s += wv[i] * xr[i];
                    acc[r] += s;
                }
        }
    }
    for (int r = 0; r < NR; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n)
            y[(size_t)(r0 + r) * ldy + j] = s + (bias ? bias[j] : 0.0f);
    }
}

/* Products of plain weights: one block (MV_THREADS threads) per output
 * column j = row of w, and NR rows of x (from blockIdx.y * NR). Thread i
 * takes the 16-byte pieces i, i + MV_THREADS, ... of the weight row (16-byte
 * aligned rows, a multiple of 16 bytes), the warps' sums are folded in warp
 * order: a row's sum runs in the same order whatever NR and n (batched ==
 * alone), and a short matrix still spreads over the whole GPU. */
#define MV_THREADS 128
template <int NR>
__global__ void __launch_bounds__(MV_THREADS) k_mv_plain(const float *__restrict__ x, int ldx,
                                                         int n, dw w, float *__restrict__ y,
                                                         int ldy, const float *__restrict__ bias) {
    __shared__ float red[MV_THREADS / 32][NR];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int64_t j = blockIdx.x;
    int r0 = blockIdx.y * NR;
    int per = w.dtype == HR_DTYPE_F32 ? 4 : 8;
    int64_t nv = w.cols / per;
    const uint4 *wr = (const uint4 *)(w.data + (size_t)j * w.row_bytes);
    float acc[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = 0.0f;
#pragma unroll 4
    for (int64_t v = threadIdx.x; v < nv; v += MV_THREADS) {
        uint4 q = __ldg(wr + v);
        float wv[8];
        unpack16(q, w.dtype, wv);
        int64_t c = v * per;
        for (int r = 0; r < NR; r++)
            if (r0 + r < n)
                acc[r] += dot_unpacked(wv, (const float4 *)(x + (size_t)(r0 + r) * ldx + c), per);
    }
    for (int r = 0; r < NR; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0)
            red[wid][r] = s;
    }
    __syncthreads();
    if (threadIdx.x < NR && r0 + (int)threadIdx.x < n) {
        int r = threadIdx.x;
        float s = 0.0f;
        for (int k = 0; k < MV_THREADS / 32; k++)
            s += red[k][r];
        y[(size_t)(r0 + r) * ldy + j] = s + (bias ? bias[j] : 0.0f);
    }
}

static __device__ __forceinline__ uint32_t ld_u16x2(const uint8_t *p) { /* 2-byte aligned */
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

/* Products of the 32-column ggml formats (Q8_0, Q4_0, Q4_1): one warp per
 * output column and NR rows of x per block, each lane one whole block at a
 * time, so a warp reads 32 consecutive blocks. */
template <int NR>
__global__ void k_mv_q32(const float *__restrict__ x, int ldx, int n, dw w,
                         float *__restrict__ y, int ldy, const float *__restrict__ bias) {
    int lane = threadIdx.x & 31;
    int64_t j = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int r0 = blockIdx.y * NR;
    if (j >= w.rows)
        return;
    int bs = w.dtype == HR_DTYPE_Q8_0 ? 34 : w.dtype == HR_DTYPE_Q4_0 ? 18 : 20;
    int64_t nb = w.cols / 32;
    const uint8_t *row = w.data + (size_t)j * w.row_bytes;
    float acc[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = 0.0f;
#pragma unroll 2
    for (int64_t bi = lane; bi < nb; bi += 32) {
        const uint8_t *b = row + bi * bs;
        float wv[32];
        float d = h2f(*(const uint16_t *)b);
        if (w.dtype == HR_DTYPE_Q8_0) {
            for (int i = 0; i < 16; i++) {
                uint16_t u = ((const uint16_t *)(b + 2))[i];
                wv[2 * i] = d * (float)(int8_t)(u & 0xff);
                wv[2 * i + 1] = d * (float)(int8_t)(u >> 8);
            }
        } else {
            bool one = w.dtype == HR_DTYPE_Q4_1;
            float m = one ? h2f(*(const uint16_t *)(b + 2)) : 0.0f;
            const uint8_t *qs = b + (one ? 4 : 2);
            for (int i = 0; i < 16; i += 4) {
                uint32_t u = ld_u16x2(qs + i);
                for (int k = 0; k < 4; k++) {
                    int q = (int)((u >> (8 * k)) & 0xff);
                    if (one) {
                        wv[i + k] = d * (float)(q & 0xF) + m;
                        wv[i + k + 16] = d * (float)(q >> 4) + m;
                    } else {
                        wv[i + k] = d * (float)((q & 0xF) - 8);
                        wv[i + k + 16] = d * (float)((q >> 4) - 8);
                    }
                }
            }
        }
        for (int r = 0; r < NR; r++)
            if (r0 + r < n) {
                const float4 *xr = (const float4 *)(x + (size_t)(r0 + r) * ldx + bi * 32);
                float s = 0.0f;
                for (int i = 0; i < 8; i++) {
                    float4 a = xr[i];
                    s += wv[4 * i] * a.x + wv[4 * i + 1] * a.y + wv[4 * i + 2] * a.z +
                         wv[4 * i + 3] * a.w;
                }
                acc[r] += s;
            }
    }
    for (int r = 0; r < NR; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < n)
            y[(size_t)(r0 + r) * ldy + j] = s + (bias ? bias[j] : 0.0f);
    }
}

/* ---- row ops ------------------------------------------------------------------ */

/* one block a row: RMS norm y = x / rms(x) * (w + offset), or LayerNorm */
__global__ void k_norm(float *y, const float *x, const float *w, const float *b, int kind,
                       float offset, float eps, int d) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    if (kind == HR_BNORM_RMS) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            ss += xr[i] * xr[i];
        ss = block_sum(ss, red);
        float r = 1.0f / sqrtf(ss / (float)d + eps);
        __syncthreads();
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            yr[i] = (xr[i] * r) * (w[i] + offset);
    } else {
        float s = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            s += xr[i];
        float mu = block_sum(s, red) / (float)d;
        float v = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            v += (xr[i] - mu) * (xr[i] - mu);
        v = block_sum(v, red) / (float)d;
        float r = 1.0f / sqrtf(v + eps);
        __syncthreads();
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            yr[i] = (xr[i] - mu) * r * w[i] + (b ? b[i] : 0.0f);
    }
}

__global__ void k_act(int act, float *g, const float *u, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float x = g[i], m = u ? u[i] : 1.0f;
    if (act == HR_BACT_SILU)
        g[i] = x / (1.0f + expf(-x)) * m;
    else if (act == HR_BACT_GELU_TANH)
        g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * m;
    else if (act == HR_BACT_SIGMOID) /* qwen3_next's output gate */
        g[i] = m / (1.0f + expf(-x));
    else
        g[i] = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)) * m;
}

__global__ void k_add(float *x, const float *y, float mult, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += y[i] * mult;
}

__global__ void k_gather(float *y, const float *x, const int32_t *rows, int d) {
    const float *src = x + (size_t)rows[blockIdx.x] * d;
    float *dst = y + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        dst[i] = src[i];
}

__global__ void k_logit_scale(float *l, size_t n, float div, float cap) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = l[i] / div;
    if (cap > 0)
        v = tanhf(v / cap) * cap;
    l[i] = v;
}

/* ---- the step's batch, embeddings ---------------------------------------------- */

/* The step's batch in device memory (begin() uploads it). Every field is
 * the same for each step of a context (its arrays at fixed offsets), so
 * that a captured step stays right when replayed. */
struct dstep {
    const int32_t *token, *pos, *seq, *tables, *tab_off, *out_rows;
    const float *freq;
    int rot_dim;
    /* [T] 1 + the last position token t attends to: causal (attn_end[t],
     * else pos[t] + 1) and bidirectional (attn_end[t], else 1 + the
     * largest pos of its sequence in the step) */
    const int32_t *end_causal, *end_bidir;
    /* [T] >= 0: token t's row is embd[t] (an image's, staged per token,
     * [max_tokens][d_model]); -1: its token's embedding */
    const int32_t *embd_row;
    const float *embd;
    /* M-RoPE (mrope true): token t's (temporal, height, width) positions at
     * mrope_pos[3t..3t+2], the rotary frequencies cut in sections of these
     * counts */
    const int32_t *mrope_pos;
    int mrope_section[3];
    bool mrope;
};

/* x[t] = emb[token[t]] * scale, or an image's row as it is */
__global__ void k_embed(float *x, dw emb, dstep st, int d, float scale) {
    int t = blockIdx.x;
    float *xt = x + (size_t)t * d;
    if (st.embd_row[t] >= 0) {
        const float *r = st.embd + (size_t)t * d;
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            xt[i] = r[i];
        return;
    }
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xt[i] = load1(emb, st.token[t], i) * scale;
}

/* encoders: x[t] += type_row + pos_emb[pos[t]] (the CPU's order of the adds) */
__global__ void k_embed_abs(float *x, const float *pos_emb, const float *type_row,
                            const int32_t *pos, int d) {
    int t = blockIdx.x;
    float *xt = x + (size_t)t * d;
    const float *pe = pos_emb + (size_t)pos[t] * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        xt[i] = xt[i] + type_row[i] + pe[i];
}

/* ---- q/k/v: norms, RoPE, the cache -------------------------------------------- */

/* rms-normalize each of n runs of len floats at v (one warp a run) */
static __device__ void norm_runs(float *v, int n, int len, const float *w, float offset,
                                 float eps) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int h = wid; h < n; h += nw) {
        float *r = v + (size_t)h * len, ss = 0.0f;
        for (int i = lane; i < len; i += 32)
            ss += r[i] * r[i];
        ss = warp_sum(ss);
        float s = 1.0f / sqrtf(ss / (float)len + eps);
        for (int i = lane; i < len; i += 32)
            r[i] = (r[i] * s) * (w[i] + offset);
    }
}

/* token t's position for rotary frequency i: M-RoPE's (kernels/cpu/ops.c
 * hr_rope_table_mrope: the section that holds i), else p */
static __device__ __forceinline__ int rope_pos(const dstep &st, int t, int i, int p) {
    if (!st.mrope)
        return p;
    int k = 0, end = st.mrope_section[0];
    while (i >= end && k < 2)
        end += st.mrope_section[++k];
    return st.mrope_pos[3 * t + k];
}

/* rotate the first rot dims of n heads of hd at v, token t at position p */
static __device__ void rope_heads(float *v, int n, int hd, int rot, const float *fs,
                                  const dstep &st, int t, int p, bool interleaved) {
    int half = rot / 2;
    float factor = fs[half];
    for (int e = threadIdx.x; e < n * half; e += blockDim.x) {
        int h = e / half, i = e % half;
        float ang = (float)rope_pos(st, t, i, p) * fs[i];
        float c = cosf(ang) * factor, s = sinf(ang) * factor;
        float *r = v + (size_t)h * hd;
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = r[a], x1 = r[b];
        r[a] = x0 * c - x1 * s;
        r[b] = x1 * c + x0 * s;
    }
}

/* one block a token (QKV_THREADS threads) */
#define QKV_THREADS 256
__global__ void __launch_bounds__(QKV_THREADS) k_qkv(hr_qkv_args a, dstep st) {
    __shared__ float red[32];
    /* a warp's row of a record: its quants, its floats (TurboQuant) */
    __shared__ uint8_t sq[QKV_THREADS / 32][HR_CU_MAX_HD];
    __shared__ float sf[QKV_THREADS / 32][HR_CU_MAX_HD];
    int t = blockIdx.x, hd = a.head_dim;
    int qd = a.n_heads * hd, kvd = a.n_kv_heads * hd;
    float *q = a.q + (size_t)t * qd, *k = a.k + (size_t)t * kvd;
    if (a.qk_norm == HR_BQK_HEAD) {
        norm_runs(q, a.n_heads, hd, a.q_norm, a.norm_offset, a.norm_eps);
        norm_runs(k, a.n_kv_heads, hd, a.k_norm, a.norm_offset, a.norm_eps);
    } else if (a.qk_norm == HR_BQK_FULL) {
        for (int which = 0; which < 2; which++) {
            float *v = which ? k : q;
            int len = which ? kvd : qd;
            const float *w = which ? a.k_norm : a.q_norm;
            float ss = 0.0f;
            for (int i = threadIdx.x; i < len; i += blockDim.x)
                ss += v[i] * v[i];
            ss = block_sum(ss, red);
            float s = 1.0f / sqrtf(ss / (float)len + a.norm_eps);
            __syncthreads();
            for (int i = threadIdx.x; i < len; i += blockDim.x)
                v[i] = (v[i] * s) * (w[i] + a.norm_offset);
        }
    }
    __syncthreads();
    int p = st.pos[t], rot = st.rot_dim;
    if (a.rope && rot >= 2) {
        const float *fs = st.freq + (size_t)st.seq[t] * 2 * (rot / 2 + 1);
        if (a.rope_local)
            fs += rot / 2 + 1;
        rope_heads(q, a.n_heads, hd, rot, fs, st, t, p, a.rope_interleaved);
        rope_heads(k, a.n_kv_heads, hd, rot, fs, st, t, p, a.rope_interleaved);
    }
    __syncthreads();
    int32_t block = st.tables[st.tab_off[st.seq[t]] + p / a.block_size];
    int slot = p % a.block_size;
    const float *v = a.v + (size_t)t * kvd;
    /* K, then V: plain rows a thread an element, records a warp a row */
    for (int side = 0; side < 2; side++) {
        kvf f = kv_fmt(a, side == 1);
        void *base = side ? a.v_cache : a.k_cache;
        const float *x = side ? v : k;
        if (!kv_rec(f.t)) {
            for (int e = threadIdx.x; e < kvd; e += blockDim.x) {
                int h = e / hd, i = e % hd;
                store_kv(base, kv_at(f, block, h * a.block_size + slot) + (size_t)i, x[e], f.t);
            }
            continue;
        }
        int wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (int h = wid; h < a.n_kv_heads; h += nw)
            kv_store_rec(base, f, kv_at(f, block, h * a.block_size + slot), h,
                         x + (size_t)h * hd, sq[wid], sf[wid]);
    }
}

#endif
