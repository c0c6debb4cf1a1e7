/* The mixture-of-experts MLP on the GPU (kernels/backend.h hr_moe_args),
 * every part device-side so that the step stays one CUDA graph:
 *   k_moe_route    a warp per row: the router's choice and weights
 *                  (kernels/cpu/moe.c hr_moe_route, hr_moe_route_grouped)
 *   k_moe_order    steps of several rows: the (row, chosen expert) pairs
 *                  grouped by expert, in tiles of up to 8 pairs of one expert
 *   k_moe_up       a warp per (tile, ff column): gate and up products
 *                  (+ biases) of the tile's pairs, then the activation
 *   k_moe_down     a warp per (tile, d column): the down product
 *   k_moe_combine  a block per row: the k results in routing order, then
 *                  the shared expert (gated by sigmoid(sh_inp . x))
 * A row's sums run in the same order alone or in any batch (batch-invariant):
 * each output is one warp's dot product of one vector, a lane's running sum
 * over its columns then the warp's in lane order, whatever the tile holds
 * (moe_dot). A tile reads its expert's rows once for its pairs: a step of
 * many rows reads an expert about once per 8 rows routed to it, on the CUDA
 * cores (docs/gpu.md, "next": the tensor cores). */
#ifndef HR_KERNELS_CUDA_MOE_CUH
#define HR_KERNELS_CUDA_MOE_CUH

#include "kernels/cuda/mv_span.cuh"
#include "kernels/cuda/ops.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One expert's three matrices (a device table of them per layer). */
struct moe_expert {
    dw gate, up, down;
};

#define MOE_MAX_EXPERTS 4096 /* the router's shared memory: 9 bytes an expert */

/* the largest v[e] of e in [0, n) not taken, lower index on ties (as the
 * CPU's top_k); every lane of the warp gets it. v, taken: shared memory. */
static __device__ int warp_argmax(const float *v, const uint8_t *taken, int n) {
    int lane = threadIdx.x & 31;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = lane; e < n; e += 32)
        if (!taken[e] && (bi == 0x7fffffff || v[e] > bv)) {
            bv = v[e];
            bi = e;
        }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) {
            bv = ov;
            bi = oi;
        }
    }
    return bi;
}

/* the k largest of v[0..n), best first, into sel (shared); taken: n bytes */
static __device__ void warp_top_k(const float *v, uint8_t *taken, int n, int k, int32_t *sel) {
    for (int e = threadIdx.x; e < n; e += 32)
        taken[e] = 0;
    __syncwarp();
    for (int j = 0; j < k; j++) {
        int b = warp_argmax(v, taken, n);
        __syncwarp();
        if (threadIdx.x == 0) {
            sel[j] = b;
            taken[b] = 1;
        }
        __syncwarp();
    }
}

/* One warp (one block of 32) per row t: sel[t][k] and w[t][k] from the
 * logits [T][E]. Shared: E floats s, E floats c, E bytes, k ints. */
__global__ void __launch_bounds__(32) k_moe_route(const float *__restrict__ logits, int E, int k,
                                                  int router, bool norm_topk,
                                                  const float *__restrict__ score_bias,
                                                  int n_group, int topk_group, float scale,
                                                  const float *__restrict__ expert_scale,
                                                  int32_t *__restrict__ sel_out,
                                                  float *__restrict__ w_out) {
    extern __shared__ float sm[];
    float *s = sm, *c = sm + E;
    int32_t *sel = (int32_t *)(sm + 2 * E);
    uint8_t *taken = (uint8_t *)(sel + k);
    int t = blockIdx.x, lane = threadIdx.x;
    const float *l = logits + (size_t)t * E;
    int32_t *so = sel_out + (size_t)t * k;
    float *wo = w_out + (size_t)t * k;
    if (router != HR_BROUTER_SIGMOID_GROUPED) {
        for (int e = lane; e < E; e += 32)
            s[e] = l[e];
        __syncwarp();
        warp_top_k(s, taken, E, k, sel); /* softmax keeps the order */
        float mx = s[sel[0]];
        float sum = 0.0f;
        if (router == HR_BROUTER_SOFTMAX_TOPK) {
            for (int e = lane; e < E; e += 32)
                sum += expf(s[e] - mx);
            sum = warp_sum(sum);
        }
        if (lane == 0) {
            if (router == HR_BROUTER_TOPK_SOFTMAX) {
                float ks = 0.0f;
                for (int j = 0; j < k; j++)
                    ks += wo[j] = expf(s[sel[j]] - mx);
                for (int j = 0; j < k; j++)
                    wo[j] /= ks;
            } else {
                float ks = 0.0f;
                for (int j = 0; j < k; j++)
                    ks += wo[j] = expf(s[sel[j]] - mx) / sum;
                if (norm_topk)
                    for (int j = 0; j < k; j++)
                        wo[j] /= ks;
            }
        }
    } else {
        int per = E / n_group;
        for (int e = lane; e < E; e += 32) {
            s[e] = 1.0f / (1.0f + expf(-l[e]));
            c[e] = s[e] + score_bias[e];
        }
        __syncwarp();
        /* a group's score: the sum of its 2 best (lane g, g + 32, ...); the
         * group scores go to taken's space as floats after the flags */
        float *gs = (float *)(taken + ((E + 15) & ~15));
        for (int g = lane; g < n_group; g += 32) {
            const float *cg = c + g * per;
            int a = 0;
            for (int e = 1; e < per; e++)
                if (cg[e] > cg[a])
                    a = e;
            int b = a == 0 ? 1 : 0;
            for (int e = 0; e < per; e++)
                if (e != a && cg[e] > cg[b])
                    b = e;
            gs[g] = cg[a] + cg[b];
        }
        __syncwarp();
        if (lane == 0) { /* the topk_group best groups keep their scores */
            uint8_t *keep = taken; /* n_group flags, then reused below */
            for (int g = 0; g < n_group; g++)
                keep[g] = 0;
            for (int j = 0; j < topk_group; j++) {
                int b = -1;
                for (int g = 0; g < n_group; g++)
                    if (!keep[g] && (b < 0 || gs[g] > gs[b]))
                        b = g;
                keep[b] = 1;
            }
        }
        __syncwarp();
        for (int e = lane; e < E; e += 32)
            if (!taken[e / per])
                c[e] = 0.0f; /* as transformers' masked_fill(.., 0.0) */
        __syncwarp();
        warp_top_k(c, taken, E, k, sel);
        if (lane == 0) {
            float sum = 0.0f;
            for (int j = 0; j < k; j++)
                sum += wo[j] = s[sel[j]];
            for (int j = 0; j < k; j++)
                wo[j] = (norm_topk ? wo[j] / (sum + 1e-20f) : wo[j]) * scale;
        }
    }
    if (lane == 0)
        for (int j = 0; j < k; j++) {
            so[j] = sel[j];
            if (expert_scale)
                wo[j] *= expert_scale[sel[j]];
        }
}

/* bytes of k_moe_route's shared memory */
static __host__ size_t moe_route_smem(int E, int k, int n_group) {
    return (size_t)2 * E * sizeof(float) + (size_t)k * sizeof(int32_t) +
           (size_t)((E + 15) & ~15) + (size_t)(n_group > 0 ? n_group : 1) * sizeof(float);
}

/* How a layer's products read their weights (the same for every expert
 * of the kind; x 16-byte aligned): MOE_DOT_VEC plain weights with 16-byte
 * loads, MOE_DOT_SPAN as k_mv_span (mv_span_fits), MOE_DOT_ANY a column
 * (plain) or 32-column slice (quantized) a lane at a time */
enum { MOE_DOT_ANY, MOE_DOT_VEC, MOE_DOT_SPAN };

static __host__ int moe_dot_kind(const dw &w) {
    if (is_plain(w.dtype) && w.cols % 8 == 0 && ((uintptr_t)w.data & 15) == 0 &&
        w.row_bytes % 16 == 0)
        return MOE_DOT_VEC;
    return mv_span_fits(w) ? MOE_DOT_SPAN : MOE_DOT_ANY;
}

#define MOE_NR 8 /* pairs of one expert a block takes together */

/* out[r] = row j of w . xs[r] (w.cols floats each) for r < nr <= MOE_NR,
 * every lane of the warp calling: the row's weights read once for the nr
 * vectors, and each sum the same whatever nr and r (a lane's running sum
 * over its columns in order, then the warp's in lane order): a pair's
 * result never depends on the pairs it is computed with. */
static __device__ void moe_dot(int how, const dw &w, int64_t j, const float *const *xs, int nr,
                               float *out) {
    int lane = threadIdx.x & 31;
    float acc[MOE_NR];
#pragma unroll
    for (int r = 0; r < MOE_NR; r++)
        acc[r] = 0.0f;
    if (how == MOE_DOT_VEC) {
        int per = w.dtype == HR_DTYPE_F32 ? 4 : 8;
        int64_t nv = w.cols / per;
        const uint4 *wr = (const uint4 *)(w.data + (size_t)j * w.row_bytes);
        for (int64_t v = lane; v < nv; v += 32) {
            uint4 q = __ldg(wr + v);
            float wv[8];
            unpack16(q, w.dtype, wv);
#pragma unroll
            for (int r = 0; r < MOE_NR; r++)
                if (r < nr)
                    acc[r] += dot_unpacked(wv, (const float4 *)(xs[r] + v * per), per);
        }
    } else if (how == MOE_DOT_SPAN) {
        for (int64_t e0 = (int64_t)lane * 8; e0 < w.cols; e0 += 256) {
            float v[8];
            span8(w, j, e0, v);
#pragma unroll
            for (int r = 0; r < MOE_NR; r++)
                if (r < nr) {
                    const float4 *xr = (const float4 *)(xs[r] + e0);
                    float4 a = xr[0], b = xr[1];
                    acc[r] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x +
                              v[5] * b.y + v[6] * b.z + v[7] * b.w;
                }
        }
    } else if (is_plain(w.dtype)) {
        for (int64_t c = lane; c < w.cols; c += 32) {
            float wv = ld_plain(w.data, w.dtype, (size_t)j * w.cols + c);
#pragma unroll
            for (int r = 0; r < MOE_NR; r++)
                if (r < nr)
                    acc[r] += wv * xs[r][c];
        }
    } else {
        for (int64_t c0 = (int64_t)lane * 32; c0 < w.cols; c0 += 32 * 32) {
            float wv[32];
            load32(w, j, c0, wv);
#pragma unroll
            for (int r = 0; r < MOE_NR; r++)
                if (r < nr) {
                    float s = 0.0f;
                    for (int i = 0; i < 32; i++)
                        s += wv[i] * xs[r][c0 + i];
                    acc[r] += s;
                }
        }
    }
#pragma unroll
    for (int r = 0; r < MOE_NR; r++)
        if (r < nr)
            out[r] = warp_sum(acc[r]);
}

/* The pairs 0 .. n - 1 (sel: each one's expert) grouped by expert into
 * order, and tiles[0 .. n): {start in order, count} of up to MOE_NR pairs
 * of one expert each, {0, 0} past the last. One block; within an expert
 * the pairs come in any order (a pair's result does not depend on it).
 * Shared: 2 E ints. */
__global__ void k_moe_order(const int32_t *__restrict__ sel, int n, int E,
                            int32_t *__restrict__ order, int2 *__restrict__ tiles) {
    extern __shared__ int cnt[];
    __shared__ int n_tiles;
    int *at = cnt + E;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        atomicAdd(&cnt[sel[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, nt = 0;
        for (int e = 0; e < E; e++) {
            at[e] = o;
            for (int m = 0; m < cnt[e]; m += MOE_NR)
                tiles[nt++] = make_int2(o + m, cnt[e] - m < MOE_NR ? cnt[e] - m : MOE_NR);
            o += cnt[e];
        }
        n_tiles = nt;
    }
    __syncthreads();
    for (int i = n_tiles + threadIdx.x; i < n; i += blockDim.x)
        tiles[i] = make_int2(0, 0);
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        order[atomicAdd(&at[sel[p]], 1)] = p;
}

/* block x's pairs into p[0 .. nr): tile x of tiles (NULL: the pair x alone);
 * 0 when the tile is empty */
static __device__ int tile_pairs(const int2 *tiles, const int32_t *order, int *p) {
    if (!tiles) {
        p[0] = blockIdx.x;
        return 1;
    }
    int2 tl = tiles[blockIdx.x];
#pragma unroll
    for (int r = 0; r < MOE_NR; r++)
        if (r < tl.y)
            p[r] = order[tl.x + r];
    return tl.y;
}

static __device__ __forceinline__ float moe_act(int act, float g, float u, float alpha,
                                                float limit) {
    switch (act) {
    case HR_BACT_SWIGLU_CLAMPED:
        g = g < limit ? g : limit;
        u = u < -limit ? -limit : u > limit ? limit : u;
        return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    case HR_BACT_GELU_TANH:
        return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    case HR_BACT_GELU: return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f)) * u;
    default: return g / (1.0f + expf(-g)) * u;
    }
}

#define MOE_WARPS 8 /* output columns of a block (a warp each) */

/* h[p][i] = act(gate_e x_t + b_gate, up_e x_t + b_up)[i] for the pairs
 * p = (t, j) of block x's tile (t = p / k, e = sel[p], the same for the
 * tile), column i (blockIdx.y); how: MOE_DOT_* (the layer's weights decide
 * it, never the batch) */
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_up(const float *__restrict__ x, int d, int k, int ff, int how,
             const int2 *__restrict__ tiles, const int32_t *__restrict__ order,
             const int32_t *__restrict__ sel, const moe_expert *__restrict__ tab,
             const float *__restrict__ b_gate, const float *__restrict__ b_up, int act,
             float alpha, float limit, float *__restrict__ h) {
    int p[MOE_NR];
    int nr = tile_pairs(tiles, order, p);
    int64_t i = (int64_t)blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    if (nr == 0 || i >= ff)
        return;
    int e = sel[p[0]];
    const float *xs[MOE_NR];
#pragma unroll
    for (int r = 0; r < MOE_NR; r++)
        xs[r] = r < nr ? x + (size_t)(p[r] / k) * d : x;
    float g[MOE_NR], u[MOE_NR];
    moe_dot(how, tab[e].gate, i, xs, nr, g);
    moe_dot(how, tab[e].up, i, xs, nr, u);
    if ((threadIdx.x & 31) != 0)
        return;
#pragma unroll
    for (int r = 0; r < MOE_NR; r++) {
        if (r >= nr)
            break;
        float gr = g[r], ur = u[r];
        if (b_gate)
            gr += b_gate[(size_t)e * ff + i];
        if (b_up)
            ur += b_up[(size_t)e * ff + i];
        h[(size_t)p[r] * ff + i] = moe_act(act, gr, ur, alpha, limit);
    }
}

/* y[p][i] = down_e h[p] + b_down for the pairs of block x's tile (as
 * k_moe_up's), column i of d (blockIdx.y) */
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_down(const float *__restrict__ h, int d, int ff, int how,
               const int2 *__restrict__ tiles, const int32_t *__restrict__ order,
               const int32_t *__restrict__ sel, const moe_expert *__restrict__ tab,
               const float *__restrict__ b_down, float *__restrict__ y) {
    int p[MOE_NR];
    int nr = tile_pairs(tiles, order, p);
    int64_t i = (int64_t)blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    if (nr == 0 || i >= d)
        return;
    int e = sel[p[0]];
    const float *xs[MOE_NR];
#pragma unroll
    for (int r = 0; r < MOE_NR; r++)
        xs[r] = r < nr ? h + (size_t)p[r] * ff : h;
    float s[MOE_NR];
    moe_dot(how, tab[e].down, i, xs, nr, s);
    if ((threadIdx.x & 31) != 0)
        return;
#pragma unroll
    for (int r = 0; r < MOE_NR; r++) {
        if (r >= nr)
            break;
        float v = s[r];
        if (b_down)
            v += b_down[(size_t)e * d + i];
        y[(size_t)p[r] * d + i] = v;
    }
}

/* out[t] = sum over j in order of w[t][j] y[(t, j)], then + the shared
 * expert's sh[t] times sigmoid(sh_s[t]) (sh_s NULL: 1; sh NULL: none) */
__global__ void k_moe_combine(float *__restrict__ out, const float *__restrict__ y,
                              const float *__restrict__ w, int k, int d,
                              const float *__restrict__ sh, const float *__restrict__ sh_s) {
    int t = blockIdx.x;
    const float *wt = w + (size_t)t * k;
    float gate = sh_s ? 1.0f / (1.0f + expf(-sh_s[t])) : 1.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < k; j++)
            o += wt[j] * y[((size_t)t * k + j) * d + i];
        if (sh)
            o += gate * sh[(size_t)t * d + i];
        out[(size_t)t * d + i] = o;
    }
}

/* ---- a forward context's expert state (host side) ---------------------------- */

#define MOE_MAX_LAYERS 256 /* expert tables per context */

/* Scratch for up to max_tokens rows, and each layer's experts' views on the
 * device, made the first time the layer runs (moe_table). */
struct moe_ctx {
    int E, k, ff, d, max_tokens; /* E 0: the model has no experts */
    float *mem;                  /* moe_carve's pieces */
    struct {
        const hr_tensor *gate; /* the layer's (hr_moe_args.gate) */
        moe_expert *tab;       /* [E] on the device */
        int dot_up, dot_down;  /* MOE_DOT_*: every expert's gate and up / down */
    } layer[MOE_MAX_LAYERS];
    int n_layers;
};

/* The step's pieces of the scratch, each 64-byte aligned: the router's
 * logits [T][E], choices and weights [T][k], the pairs' order [T * k] and
 * tiles [T * k], the experts' activations [T * k][ff] and outputs
 * [T * k][d], the shared expert's gate and up [T][ff], output [T][d] and
 * gate logits [T] (T = max_tokens) */
struct moe_scratch {
    float *logits, *w;
    int32_t *sel, *order;
    int2 *tiles;
    float *h, *y, *shg, *shu, *shy, *shs;
};

/* n floats at *at (an address), 64-byte aligned */
static __host__ float *moe_piece(uintptr_t *at, size_t n) {
    uintptr_t p = (*at + 63) & ~(uintptr_t)63;
    *at = p + n * sizeof(float);
    return (float *)p;
}

/* The pieces at base (NULL: their addresses are offsets); their bytes. */
static __host__ size_t moe_carve(const moe_ctx *m, float *base, moe_scratch *s) {
    size_t mt = (size_t)m->max_tokens, mk = mt * m->k;
    uintptr_t at = (uintptr_t)base;
    s->logits = moe_piece(&at, mt * m->E);
    s->w = moe_piece(&at, mk);
    s->sel = (int32_t *)moe_piece(&at, mk);
    s->order = (int32_t *)moe_piece(&at, mk);
    s->tiles = (int2 *)moe_piece(&at, 2 * mk);
    s->h = moe_piece(&at, mk * m->ff);
    s->y = moe_piece(&at, mk * m->d);
    s->shg = moe_piece(&at, mt * m->ff);
    s->shu = moe_piece(&at, mt * m->ff);
    s->shy = moe_piece(&at, mt * m->d);
    s->shs = moe_piece(&at, mt);
    return (size_t)(at - (uintptr_t)base);
}

/* The scratch for dims' steps (none without experts); a CUDA error, or
 * cudaErrorNotSupported past MOE_MAX_EXPERTS. */
static __host__ cudaError_t moe_ctx_init(moe_ctx *m, const hr_bctx_dims *dm) {
    memset(m, 0, sizeof *m);
    if (dm->n_experts <= 0)
        return cudaSuccess;
    if (dm->n_experts > MOE_MAX_EXPERTS)
        return cudaErrorNotSupported;
    *m = moe_ctx{dm->n_experts, dm->n_experts_used, dm->moe_ff, dm->d_model, dm->max_tokens,
                 NULL, {}, 0};
    moe_scratch s;
    return cudaMalloc((void **)&m->mem, moe_carve(m, NULL, &s));
}

static __host__ void moe_ctx_free(moe_ctx *m) {
    cudaFree(m->mem);
    for (int i = 0; i < m->n_layers; i++)
        cudaFree(m->layer[i].tab);
    memset(m, 0, sizeof *m);
}

/* The index of a's layer in m->layer, its table made (and copied to the
 * device, in the relaxed capture mode: a captured step's graph holds only
 * the table's address) on first use; -1 with *fail set on error. view: a
 * tensor's device view. */
static __host__ int moe_table(moe_ctx *m, const hr_moe_args *a, dw (*view)(const hr_tensor *),
                              char *fail, size_t fail_n) {
    for (int i = 0; i < m->n_layers; i++)
        if (m->layer[i].gate == a->gate)
            return i;
    if (m->n_layers == MOE_MAX_LAYERS) {
        snprintf(fail, fail_n, "more than %d expert layers", MOE_MAX_LAYERS);
        return -1;
    }
    size_t n = (size_t)a->n_experts;
    moe_expert *h = (moe_expert *)malloc(n * sizeof *h), *d = NULL;
    if (!h) {
        snprintf(fail, fail_n, "out of memory");
        return -1;
    }
    int ku = -1, kd = -1; /* the kind every expert's matrices take, else MOE_DOT_ANY */
    for (size_t e = 0; e < n; e++) {
        h[e] = moe_expert{view(&a->gate[e]), view(&a->up[e]), view(&a->down[e])};
        int g = moe_dot_kind(h[e].gate), u = moe_dot_kind(h[e].up);
        int dn = moe_dot_kind(h[e].down);
        ku = g == u && (ku < 0 || ku == g) ? g : MOE_DOT_ANY;
        kd = kd < 0 || kd == dn ? dn : MOE_DOT_ANY;
    }
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc((void **)&d, n * sizeof *h);
    if (e == cudaSuccess)
        e = cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
    cudaThreadExchangeStreamCaptureMode(&mode);
    free(h);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(d);
        snprintf(fail, fail_n, "CUDA error in an expert table: %s", cudaGetErrorString(e));
        return -1;
    }
    m->layer[m->n_layers].gate = a->gate;
    m->layer[m->n_layers].tab = d;
    m->layer[m->n_layers].dot_up = ku < 0 ? MOE_DOT_ANY : ku;
    m->layer[m->n_layers].dot_down = kd < 0 ? MOE_DOT_ANY : kd;
    return m->n_layers++;
}

#endif
