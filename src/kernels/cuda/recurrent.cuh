/* The recurrent layers on the GPU: gated DeltaNet (hr_deltanet_args) and
 * Mamba-2 (hr_mamba2_args), as kernels/cpu/deltanet.c and mamba2.c, in f32
 * with the same summation orders. Each sequence's tokens run in order
 * through its state slot (conv_state, state: backend memory); a block
 * whose grid row t is not the first token of its sequence in the step
 * returns at once, so the launches depend on the step's token count alone
 * (one CUDA graph per count) and a sequence's result on its own tokens
 * alone. slot: [max_seqs] on the device (the step's, -1 past n_seqs).
 * A state block lives in shared memory while its sequence's tokens run:
 * 32 columns (DeltaNet) or rows (Mamba-2) of a head per block. */
#ifndef HR_KERNELS_CUDA_RECURRENT_CUH
#define HR_KERNELS_CUDA_RECURRENT_CUH

#include "kernels/cuda/ops.cuh"

#define REC_MAX_DIM 256 /* DeltaNet's dk, Mamba-2's state n: 32 KiB of shared state */

static __device__ __forceinline__ float rec_silu(float x) { return x / (1.0f + expf(-x)); }
static __device__ __forceinline__ float rec_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* the slot of token t0's sequence when t0 is its first token in the step,
 * else -1 (the block has nothing to do) */
static __device__ int first_slot(const dstep &st, const int32_t *slot, int t0) {
    int s = st.seq[t0];
    for (int t = 0; t < t0; t++)
        if (st.seq[t] == s)
            return -1;
    return slot[s];
}

/* the causal depthwise conv of channel c of a sequence, then silu: x[t *
 * stride] the channel's input of token t; h: its conv_k - 1 last inputs */
static __device__ void conv_channel(const dstep &st, int T, int t0, float *h, const float *w,
                                    float bias, int K, const float *x, size_t stride,
                                    float *mixed, int C, int c) {
    int s = st.seq[t0];
    for (int t = t0; t < T; t++) {
        if (st.seq[t] != s)
            continue;
        if (st.pos[t] == 0)
            for (int i = 0; i < K - 1; i++)
                h[i] = 0.0f;
        float xv = x[(size_t)t * stride], acc = 0.0f;
        for (int i = 0; i < K - 1; i++)
            acc += w[i] * h[i];
        acc += w[K - 1] * xv;
        acc += bias;
        mixed[(size_t)t * C + c] = rec_silu(acc);
        if (K > 1) {
            for (int i = 0; i < K - 2; i++)
                h[i] = h[i + 1];
            h[K - 2] = xv;
        }
    }
}

/* ---- gated DeltaNet ---------------------------------------------------------- */

/* grid (T, ceil(C / 128)), 128 threads: channel c of [q | k | v] */
__global__ void k_dn_conv(hr_deltanet_args a, dstep st, const int32_t *slot, int T) {
    int t0 = blockIdx.x, sl = first_slot(st, slot, t0);
    int nk = a.n_k_heads, r = a.n_v_heads / nk, dk = a.dk, dv = a.dv, K = a.conv_k;
    int kd = nk * dk, vd = a.n_v_heads * dv, C = 2 * kd + vd, W = 2 * dk + 2 * r * dv;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (sl < 0 || c >= C)
        return;
    int src; /* [q_g k_g v_g z_g] per key head g -> [q | k | v] */
    if (c < kd)
        src = c / dk * W + c % dk;
    else if (c < 2 * kd)
        src = (c - kd) / dk * W + dk + (c - kd) % dk;
    else
        src = (c - 2 * kd) / (r * dv) * W + 2 * dk + (c - 2 * kd) % (r * dv);
    conv_channel(st, T, t0, a.conv_state + ((size_t)sl * C + c) * (K - 1),
                 a.conv_w + (size_t)c * K, 0.0f, K, a.qkvz + src, (size_t)2 * kd + 2 * vd,
                 a.mixed, C, c);
}

/* grid T, 128 threads: q and k of every key head L2-normalised (a warp a
 * head), q also by 1/sqrt(dk) */
__global__ void k_dn_l2(hr_deltanet_args a) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int nk = a.n_k_heads, dk = a.dk, kd = nk * dk, C = 2 * kd + a.n_v_heads * a.dv;
    float *m = a.mixed + (size_t)blockIdx.x * C;
    for (int run = wid; run < 2 * nk; run += nw) {
        float *v = m + (size_t)run * dk, ss = 0.0f;
        for (int i = lane; i < dk; i += 32)
            ss += v[i] * v[i];
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss + 1e-6f) * (run < nk ? 1.0f / sqrtf((float)dk) : 1.0f);
        for (int i = lane; i < dk; i += 32)
            v[i] *= inv;
    }
}

/* grid (T, n_v_heads, ceil(dv / 32)), 32 threads: the delta rule of value
 * head h for the columns c of the block (one a lane); o to out (unnormed).
 * Shared: S[dk][32], q[dk], k[dk]. */
__global__ void __launch_bounds__(32) k_dn_head(hr_deltanet_args a, dstep st, const int32_t *slot,
                                                int T) {
    extern __shared__ float sm[];
    int t0 = blockIdx.x, sl = first_slot(st, slot, t0);
    if (sl < 0)
        return;
    int nk = a.n_k_heads, nv = a.n_v_heads, r = nv / nk, dk = a.dk, dv = a.dv;
    int kd = nk * dk, vd = nv * dv, C = 2 * kd + vd;
    int h = blockIdx.y, g = h / r, hh = h % r, lane = threadIdx.x;
    int c = blockIdx.z * 32 + lane;
    bool on = c < dv;
    float *S = sm, *qs = sm + (size_t)dk * 32, *ks = qs + dk;
    float *Sg = a.state + ((size_t)sl * nv + h) * dk * dv;
    for (int i = 0; i < dk; i++)
        S[i * 32 + lane] = on ? Sg[(size_t)i * dv + c] : 0.0f;
    float A = a.a[h], dtb = a.dt_bias[h];
    int s = st.seq[t0];
    for (int t = t0; t < T; t++) {
        if (st.seq[t] != s)
            continue;
        if (st.pos[t] == 0)
            for (int i = 0; i < dk; i++)
                S[i * 32 + lane] = 0.0f;
        const float *m = a.mixed + (size_t)t * C;
        __syncwarp();
        for (int i = lane; i < dk; i += 32) {
            qs[i] = m[g * dk + i];
            ks[i] = m[kd + g * dk + i];
        }
        __syncwarp();
        const float *ba = a.ba + (size_t)t * 2 * nv;
        float beta = 1.0f / (1.0f + expf(-ba[g * 2 * r + hh]));
        float decay = expf(A * rec_softplus(ba[g * 2 * r + r + hh] + dtb));
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) {
            float v = S[i * 32 + lane] * decay;
            S[i * 32 + lane] = v;
            kv += v * ks[i];
        }
        float vc = on ? m[2 * kd + h * dv + c] : 0.0f;
        kv = (vc - kv) * beta;
        float o = 0.0f;
        for (int i = 0; i < dk; i++) {
            float v = S[i * 32 + lane] + ks[i] * kv;
            S[i * 32 + lane] = v;
            o += v * qs[i];
        }
        if (on)
            a.out[(size_t)t * vd + h * dv + c] = o;
    }
    if (on)
        for (int i = 0; i < dk; i++)
            Sg[(size_t)i * dv + c] = S[i * 32 + lane];
}

static __host__ size_t dn_head_smem(int dk) { return (size_t)(32 + 2) * dk * sizeof(float); }

/* grid (T, n_v_heads), 32 threads: out = rmsnorm(o) * norm_w * silu(z) */
__global__ void __launch_bounds__(32) k_dn_norm(hr_deltanet_args a) {
    int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    int nk = a.n_k_heads, nv = a.n_v_heads, r = nv / nk, dk = a.dk, dv = a.dv;
    int kd = nk * dk, vd = nv * dv, W = 2 * dk + 2 * r * dv, g = h / r, hh = h % r;
    float *o = a.out + (size_t)t * vd + h * dv, ss = 0.0f;
    const float *z = a.qkvz + (size_t)t * (2 * kd + 2 * vd) + g * W + 2 * dk + r * dv + hh * dv;
    for (int c = lane; c < dv; c += 32)
        ss += o[c] * o[c];
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / dv + a.norm_eps);
    for (int c = lane; c < dv; c += 32)
        o[c] = a.norm_w[c] * (o[c] * inv) * rec_silu(z[c]);
}

/* ---- Mamba-2 ------------------------------------------------------------------ */

/* grid (T, ceil(C / 128)), 128 threads: channel c of [x | B | C] */
__global__ void k_mb_conv(hr_mamba2_args a, dstep st, const int32_t *slot, int T) {
    int t0 = blockIdx.x, sl = first_slot(st, slot, t0);
    int I = a.heads * a.head_dim, C = I + 2 * a.groups * a.n, K = a.conv_k;
    int W = 2 * I + 2 * a.groups * a.n + a.heads;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (sl < 0 || c >= C)
        return;
    conv_channel(st, T, t0, a.conv_state + ((size_t)sl * C + c) * (K - 1),
                 a.conv_w + (size_t)c * K, a.conv_b ? a.conv_b[c] : 0.0f, K,
                 a.zxbcdt + I + c /* past z */, (size_t)W, a.mixed, C, c);
}

/* grid (T, heads, ceil(head_dim / 32)), 32 threads: the state rows p of
 * head h (one a lane); y = S C + D x to out. Shared: S[n][32], B[n], C[n]. */
__global__ void __launch_bounds__(32) k_mb_head(hr_mamba2_args a, dstep st, const int32_t *slot,
                                                int T) {
    extern __shared__ float sm[];
    int t0 = blockIdx.x, sl = first_slot(st, slot, t0);
    if (sl < 0)
        return;
    int P = a.head_dim, N = a.n, I = a.heads * P, C = I + 2 * a.groups * N;
    int W = 2 * I + 2 * a.groups * N + a.heads;
    int h = blockIdx.y, g = h / (a.heads / a.groups), lane = threadIdx.x;
    int p = blockIdx.z * 32 + lane;
    bool on = p < P;
    float *S = sm, *Bs = sm + (size_t)N * 32, *Cs = Bs + N;
    float *Sg = a.state + ((size_t)sl * a.heads + h) * P * N;
    for (int k = 0; k < N; k++)
        S[k * 32 + lane] = on ? Sg[(size_t)p * N + k] : 0.0f;
    float A = a.a[h], dtb = a.dt_bias[h], D = a.d_skip[h];
    int s = st.seq[t0];
    for (int t = t0; t < T; t++) {
        if (st.seq[t] != s)
            continue;
        if (st.pos[t] == 0)
            for (int k = 0; k < N; k++)
                S[k * 32 + lane] = 0.0f;
        const float *m = a.mixed + (size_t)t * C;
        __syncwarp();
        for (int k = lane; k < N; k += 32) {
            Bs[k] = m[I + g * N + k];
            Cs[k] = m[I + a.groups * N + g * N + k];
        }
        __syncwarp();
        float dt = rec_softplus(a.zxbcdt[(size_t)t * W + W - a.heads + h] + dtb);
        float dA = expf(dt * A);
        float x = on ? m[h * P + p] : 0.0f, dx = dt * x, acc = 0.0f;
        for (int k = 0; k < N; k++) {
            float v = S[k * 32 + lane] * dA + dx * Bs[k];
            S[k * 32 + lane] = v;
            acc += v * Cs[k];
        }
        if (on)
            a.out[(size_t)t * I + h * P + p] = acc + D * x;
    }
    if (on)
        for (int k = 0; k < N; k++)
            Sg[(size_t)p * N + k] = S[k * 32 + lane];
}

static __host__ size_t mb_head_smem(int n) { return (size_t)(32 + 2) * n * sizeof(float); }

/* grid T: out = rmsnorm(y * silu(z)) * norm_w over the inner width */
__global__ void k_mb_norm(hr_mamba2_args a) {
    __shared__ float red[32];
    int I = a.heads * a.head_dim, W = 2 * I + 2 * a.groups * a.n + a.heads;
    const float *z = a.zxbcdt + (size_t)blockIdx.x * W;
    float *y = a.out + (size_t)blockIdx.x * I, ss = 0.0f;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        float v = y[i] * rec_silu(z[i]);
        y[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / I + a.norm_eps);
    for (int i = threadIdx.x; i < I; i += blockDim.x)
        y[i] = a.norm_w[i] * (y[i] * inv);
}

/* ---- the step's slots (host side) ------------------------------------------------ */

/* Each sequence's state slot, [max_seqs] pinned and on the device: staged
 * by a step's first recurrent layer (replays too: their graph copies from
 * the pinned buffer, so it is refilled), -1 past the step's sequences. */
struct rec_slots {
    int32_t *h, *d;
    int max_seqs;
    bool staged; /* this step's */
};

static __host__ cudaError_t rec_slots_init(rec_slots *r, int max_seqs) {
    r->max_seqs = max_seqs;
    r->staged = false;
    r->h = r->d = NULL;
    cudaError_t e = cudaMallocHost((void **)&r->h, (size_t)max_seqs * sizeof(int32_t));
    return e == cudaSuccess ? cudaMalloc((void **)&r->d, (size_t)max_seqs * sizeof(int32_t)) : e;
}

static __host__ void rec_slots_free(rec_slots *r) {
    cudaFreeHost(r->h);
    cudaFree(r->d);
    r->h = r->d = NULL;
}

/* slot: [n_seqs] host memory; copy: queue the copy (a step that launches
 * its ops, or one being captured) */
static __host__ void rec_slots_stage(rec_slots *r, const int32_t *slot, int n_seqs, bool copy,
                                     cudaStream_t st) {
    if (r->staged)
        return;
    r->staged = true;
    for (int s = 0; s < r->max_seqs; s++)
        r->h[s] = s < n_seqs ? slot[s] : -1;
    if (copy)
        cudaMemcpyAsync(r->d, r->h, (size_t)r->max_seqs * sizeof(int32_t),
                        cudaMemcpyHostToDevice, st);
}

#endif
