/* The tensor-core product's memory speed at decode (one row of x), on the
 * GPU: the products of a Llama-3.1-8B layer (q, k, v, o, gate, up, down;
 * bf16 weights, 8 layers' worth, several times the L2) and its lm_head,
 * each kernel variant's GB/s beside the device-to-device copy bandwidth
 * measured in the same run, and a check that every variant gives the same
 * bits as the kernel the engine used before (k_mma). Then the block
 * formats (Q8_0, Q4_0, Q4_K, Q5_K; random blocks): k_mma's lane loads
 * against k_mma_staged (the rows through shared memory), the same bits for
 * one row and for that row inside a batch of 24 (the prefill tiles), or the
 * run exits 1. Then the block formats with x rounded to int8 (mmq.cuh,
 * int8_kind; Q6_K too): both kernels against a host emulation, bit for
 * bit, and their speed beside the kernels before. `bench_cuda_mv int8`:
 * those alone; `bench_cuda_mv prefill [T...]`: the prefill products
 * instead (k_mma's tiles against k_mma_tiled, prefill_kind). Built with the
 * CUDA backend (bench_cuda_mv); run on the GPU machine by
 * tools/cuda-check.sh --bench. */
#include "kernels/cuda/mmq.cuh"
#include "kernels/cuda/mv_span.cuh"

#include <cuda_fp16.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(e)                                                                                  \
    do {                                                                                       \
        cudaError_t r_ = (e);                                                                  \
        if (r_ != cudaSuccess) {                                                               \
            fprintf(stderr, "bench_cuda_mv: %s: %s\n", #e, cudaGetErrorString(r_));            \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* best = min(best, the ms that run() takes on st) */
template <class F>
static void time_min(cudaStream_t st, float &best, F run) {
    static cudaEvent_t e0, e1;
    if (!e0) {
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
    }
    CK(cudaEventRecord(e0, st));
    run();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    best = t < best ? t : best;
}

struct shape {
    const char *name;
    int rows, cols;
};

static const shape k_layer[] = {{"q", 4096, 4096},     {"k", 1024, 4096},  {"v", 1024, 4096},
                                {"o", 4096, 4096},     {"gate", 14336, 4096},
                                {"up", 14336, 4096},   {"down", 4096, 14336}};
#define N_SHAPES 7
#define N_LAYERS 8

/* a layer's products as the engine launches them: (q k v) o (gate up)
 * down, each {first shape, count} */
static const int fused[4][2] = {{0, 3}, {3, 1}, {4, 2}, {6, 1}};

/* one launch of up to 3 products of x */
typedef void (*launch_fn)(const mma_x &x, mma_outs o, cudaStream_t st);

template <int U, int MINB>
static void run_reg(const mma_x &x, mma_outs o, cudaStream_t st) {
    k_mma<MMA_BF16, true, true, 1, 1, U, MINB>
        <<<dim3(1, (unsigned)mma_tiles(o, 16)), MMA_WARPS * 32, 0, st>>>(x, o);
}

struct variant {
    const char *name;
    launch_fn fn;
    bool fused; /* q/k/v and gate/up one launch each */
};

static uint16_t *g_xs; /* x's parts, for the staged variants */

/* as the engine stages block weights: x split by one more launch, the rows
 * through shared memory (k_mma_staged), U chunks a warp a stage, 4 stages */
template <int KIND, class P, int MINB, int NP>
static void run_staged(const mma_x &x, mma_outs o, cudaStream_t st);
template <int U>
static void run_staged_bf16(const mma_x &x, mma_outs o, cudaStream_t st) {
    mma_x xk = x;
    xk.xs = g_xs;
    run_staged<MMA_BF16, mma_stage_t<MMA_BF16, U, 4>, 3, MMA_PARTS>(xk, o, st);
}

static const variant k_variants[] = {
    {"U4, 7 launches", run_reg<4, 1>, false},
    {"U4, 4 launches", run_reg<4, 1>, true},
    {"U2 minb2, 4 launches", run_reg<2, 2>, true},
    {"U8, 4 launches", run_reg<8, 1>, true},
    {"staged U2, 4 launches", run_staged_bf16<2>, true},
    {"staged U4, 4 launches", run_staged_bf16<4>, true},
};
#define N_VARIANTS (int)(sizeof k_variants / sizeof k_variants[0])

static mma_outs outs_of(const dw *w, int n, float *y) {
    mma_outs o = {};
    for (int i = 0; i < n; i++) {
        o.w[i] = w[i];
        o.y[i] = y + 16384 * i;
        o.ldy[i] = (int)w[i].rows;
    }
    o.n = n;
    return o;
}

/* one layer's products as the engine launches them: q k v o gate up down,
 * or (q k v) o (gate up) down */
static void layer(const variant &va, const mma_x &x, const dw *w, float *y, cudaStream_t st) {
    static const int sep[7][2] = {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}};
    int n = va.fused ? 4 : 7;
    for (int i = 0; i < n; i++) {
        const int *g = va.fused ? fused[i] : sep[i];
        va.fn(x, outs_of(w + g[0], g[1], y), st);
    }
}

static dw bf16_matrix(int rows, int cols, uint64_t seed) {
    size_t n = (size_t)rows * cols;
    std::vector<uint16_t> h(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = ((int)(s % 2001) - 1000) * 1e-4f;
        uint32_t u;
        memcpy(&u, &v, 4);
        h[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
    void *d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
    dw w = {};
    w.dtype = HR_DTYPE_BF16;
    w.rows = rows;
    w.cols = cols;
    w.data = (const uint8_t *)d;
    w.row_bytes = (size_t)cols * 2;
    return w;
}

static double copy_bw(void) {
    size_t bytes = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    float best = 1e30f;
    for (int i = 0; i < 5; i++) /* the legacy stream, as cudaMemcpy's */
        time_min(0, best, [&] { CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); });
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * bytes / (best * 1e-3) / 1e9;
}

/* random blocks of a format at rows x cols, their f16 scales small and
 * finite */
static dw quant_matrix(int kind, int rows, int cols, uint64_t seed) {
    size_t row_bytes = (size_t)cols / 256 * mmq_sb_bytes(kind), n = row_bytes * rows;
    std::vector<uint8_t> h(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = (uint8_t)(s >> 24);
    }
    /* the scales: f16 in [1/256, 1/128) (K-quants: d and dmin; Q6_K: d,
     * at the super-block's end) */
    bool sb = mma_kq(kind) || kind == MMA_Q6_K;
    size_t blk = sb ? (size_t)mmq_sb_bytes(kind) : (size_t)mmq_sb_bytes(kind) / 8;
    for (size_t b = 0; b < n; b += blk)
        for (int k = 0; k < (mma_kq(kind) ? 2 : 1); k++) {
            size_t at = b + (kind == MMA_Q6_K ? 208 : 2 * k);
            uint16_t v = (uint16_t)(0x1C00 | ((h[at] | (h[at + 1] << 8)) & 0x3ff));
            memcpy(&h[at], &v, 2);
        }
    void *d;
    CK(cudaMalloc(&d, n));
    CK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
    static const int dt[] = {HR_DTYPE_BF16, HR_DTYPE_F16,  HR_DTYPE_Q8_0, HR_DTYPE_Q4_0,
                             HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K};
    dw w = {};
    w.dtype = dt[kind];
    w.rows = rows;
    w.cols = cols;
    w.data = (const uint8_t *)d;
    w.row_bytes = row_bytes;
    return w;
}

/* x's parts for T rows of K (as the engine's k_split_bf16 writes them) */
static void split(const float *x, int T, int K, uint16_t *xs, cudaStream_t st) {
    int64_t n = (int64_t)T * K;
    k_split_bf16<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, K, T, K, xs, n);
}

template <int KIND>
static void run_lanes(const mma_x &x, mma_outs o, cudaStream_t st) {
    k_mma<KIND, true, true, 1, 1, 4, 1>
        <<<dim3(1, (unsigned)mma_tiles(o, 16)), MMA_WARPS * 32, 0, st>>>(x, o);
}

/* as the engine: x split into its parts (one launch per input), then the
 * product */
template <int KIND, class P = mma_stage<KIND>, int MINB = 3, int NP = MMA_PARTS>
static void run_staged(const mma_x &x, mma_outs o, cudaStream_t st) {
    mma_x xk = x;
    xk.stride = (int64_t)x.T * o.w[0].cols;
    static bool attr = false; /* stages past 48 KB of shared memory */
    if (!attr)
        CK(cudaFuncSetAttribute(k_mma_staged<KIND, P, MINB, NP>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, P::BYTES));
    attr = true;
    split(x.x, x.T, (int)o.w[0].cols, (uint16_t *)x.xs, st);
    k_mma_staged<KIND, P, MINB, NP>
        <<<dim3(1, (unsigned)mma_tiles(o, 16)), MMA_WARPS * 32, P::BYTES, st>>>(xk, o);
}

/* ms[v]: the best of 5 runs of variant v over the NL layers w (fused
 * launches, one row of x) */
static void time_layers(const launch_fn (&fn)[4], const dw (*w)[N_SHAPES], int NL,
                        const mma_x &x1, float *y, float (&ms)[4], cudaStream_t st) {
    for (int v = 0; v < 4; v++)
        ms[v] = 1e30f;
    for (int rep = 0; rep < 5; rep++)
        for (int v = 0; v < 4; v++)
            time_min(st, ms[v], [&] {
                for (int l = 0; l < NL; l++)
                    for (int i = 0; i < 4; i++)
                        fn[v](x1, outs_of(w[l] + fused[i][0], fused[i][1], y), st);
            });
}

/* one format: GB/s of its layers through both kernels, and the bits; false
 * when they differ */
template <int KIND>
static bool quant_kind(const char *name, double bw, float *x, uint16_t *xs, float *y, float *ref,
                       float *big, cudaStream_t st) {
    const int NL = 4;
    static dw w[NL][N_SHAPES];
    size_t layer_bytes = 0;
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < N_SHAPES; i++) {
            w[l][i] = quant_matrix(KIND, k_layer[i].rows, k_layer[i].cols, 1000 * KIND + 10 * l + i);
            if (l == 0)
                layer_bytes += w[l][i].row_bytes * w[l][i].rows;
        }
    mma_x x1{x, 14336, xs, 14336, 1};
    /* the bits: q/k/v fused and down, one row through k_mma_staged, against
     * k_mma's lane loads and against that row in a batch of 24 (the prefill
     * tiles); with x as one bf16 part, against the batch of 24 */
    bool same = true;
    std::vector<float> a(16384 * 3), b(16384 * 3);
    /* the n outputs' first rows at dev (output i at dev + 16384 i) into a:
     * the same as b's */
    auto rows_equal = [&](const float *dev, const dw *ws, int n) {
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(a.data(), dev, sizeof(float) * 16384 * n, cudaMemcpyDeviceToHost));
        bool eq = true;
        for (int i = 0; i < n; i++)
            eq = eq && memcmp(&a[16384 * i], &b[16384 * i], ws[i].rows * 4) == 0;
        return eq;
    };
    for (int t = 0; t < 2; t++) {
        const dw *ws = t ? &w[0][6] : &w[0][0];
        int n = t ? 1 : 3, K = (int)ws[0].cols;
        mma_x xk{x, K, xs, K, 1};
        /* 24 rows: x then 23 rows of other values (x's tail of the buffer);
         * row r of output i at big + 16384 (3r + i) */
        mma_x xb{x, K, xs, (int64_t)24 * K, 24};
        mma_outs o = outs_of(ws, n, big);
        for (int i = 0; i < n; i++)
            o.ldy[i] = 3 * 16384;
        for (int np = 0; np < 2; np++) { /* MMA_PARTS parts, then one (bf16) */
            if (np == 0)
                run_staged<KIND>(xk, outs_of(ws, n, y), st);
            else
                run_staged<KIND, mma_stage<KIND>, 3, 1>(xk, outs_of(ws, n, y), st);
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(b.data(), y, sizeof(float) * 16384 * n, cudaMemcpyDeviceToHost));
            if (np == 0) { /* k_mma's lane loads (the engine's kernel before) */
                run_lanes<KIND>(xk, outs_of(ws, n, ref), st);
                same = rows_equal(ref, ws, n) && same;
            }
            /* that row as row 0 of 24 through the prefill tiles */
            split(x, 24, K, xs, st);
            if (np == 0)
                k_mma<KIND, false, false, 4, 4, 1, 2>
                    <<<dim3(1, (unsigned)mma_tiles(o, 64)), MMA_WARPS * 32, 0, st>>>(xb, o);
            else
                k_mma<KIND, false, false, 4, 4, 1, 2, 1>
                    <<<dim3(1, (unsigned)mma_tiles(o, 64)), MMA_WARPS * 32, 0, st>>>(xb, o);
            same = rows_equal(big, ws, n) && same;
        }
    }
    /* k_mma's lanes, the engine's stages, 4 chunks a warp in 6 stages, and
     * the engine's stages with x as one bf16 part */
    launch_fn fn[4] = {run_lanes<KIND>, run_staged<KIND>,
                       run_staged<KIND, mma_stage_t<KIND, 4, 6>, 4>,
                       run_staged<KIND, mma_stage<KIND>, 3, 1>};
    float ms[4];
    time_layers(fn, w, NL, x1, y, ms, st);
    CK(cudaGetLastError());
    double g[4];
    for (int v = 0; v < 4; v++)
        g[v] = (double)layer_bytes * NL / (ms[v] * 1e-3) / 1e9;
    printf("%-6s lanes %6.0f GB/s (%2.0f%%)  staged %6.0f (%2.0f%%)  U4 x 6 stages %6.0f (%2.0f%%)"
           "  x bf16 %6.0f (%2.0f%%)  same bits %s\n",
           name, g[0], 100 * g[0] / bw, g[1], 100 * g[1] / bw, g[2], 100 * g[2] / bw, g[3],
           100 * g[3] / bw, same ? "yes" : "NO");
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < N_SHAPES; i++)
            CK(cudaFree((void *)w[l][i].data));
    return same;
}

/* ---- x rounded to int8 (mmq.cuh) --------------------------------------------
 * The host's emulation of the order mmq.cuh's head states, from the
 * formats' definitions (ggml's block layouts), not from the kernels: the
 * kernels' outputs must equal it bit for bit. */
static float h_f16(const uint8_t *p) {
    uint16_t u = (uint16_t)(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(u));
}

/* chunk ch of a weight row: its 32 integers, *d (d or d*sc), *m (dmin*m),
 * sc: the integer scales of its two 16-column halves (Q6_K; else 1) */
static void h_chunk(int kind, const uint8_t *row, int ch, int *w, float *d, float *m, int *sc2) {
    *m = 0.0f;
    sc2[0] = sc2[1] = 1;
    if (kind == MMA_Q6_K) { /* ggml's block_q6_K: ql[128], qh[64], scales[16], d */
        const uint8_t *sb = row + (size_t)(ch / 8) * 210;
        int s = ch % 8, h = s / 4, j = s % 4;
        const uint8_t *ql = sb + 64 * h, *qh = sb + 128 + 32 * h;
        *d = h_f16(sb + 208);
        sc2[0] = (int8_t)sb[192 + 8 * h + 2 * j];
        sc2[1] = (int8_t)sb[192 + 8 * h + 2 * j + 1];
        for (int l = 0; l < 32; l++) {
            int lo = j & 1 ? ql[32 + l] : ql[l];
            w[l] = ((j >= 2 ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * j)) & 3) << 4)) - 32;
        }
        return;
    }
    if (kind == MMA_Q8_0 || kind == MMA_Q4_0) {
        const uint8_t *b = row + (size_t)ch * (mmq_sb_bytes(kind) / 8);
        *d = h_f16(b);
        for (int i = 0; i < 32; i++)
            w[i] = kind == MMA_Q8_0 ? (int)(int8_t)b[2 + i]
                                    : (i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4) - 8;
        return;
    }
    const uint8_t *sb = row + (size_t)(ch / 8) * mmq_sb_bytes(kind), *sc = sb + 4;
    int j = ch % 8, a, mn;
    if (j < 4) {
        a = sc[j] & 63;
        mn = sc[j + 4] & 63;
    } else {
        a = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    *d = h_f16(sb) * (float)a;
    *m = h_f16(sb + 2) * (float)mn;
    bool five = kind == MMA_Q5_K;
    const uint8_t *qs = sb + (five ? 48 : 16) + 32 * (j / 2), *qh = sb + 16;
    for (int l = 0; l < 32; l++)
        w[l] = ((qs[l] >> (4 * (j & 1))) & 15) + (five ? ((qh[l] >> j) & 1) << 4 : 0);
}

/* y[j] for one row of x (K columns) and weight rows [0, rows): x rounded
 * as hr_qact_row, the chunks' terms in 4 chains (chunk ch into chain ch %
 * 4), folded (2 into 0, 3 into 1, then 1 into 0) */
static void h_mmq(int kind, const std::vector<uint8_t> &wb, size_t row_bytes, int rows, int K,
                  const float *x, float *y) {
    int nch = K / 32;
    std::vector<int> q(K);
    std::vector<float> xd(nch);
    std::vector<int> xs(nch);
    for (int b = 0; b < nch; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++)
            amax = fabsf(x[32 * b + i]) > amax ? fabsf(x[32 * b + i]) : amax;
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        xs[b] = 0;
        for (int i = 0; i < 32; i++) {
            float r = rintf(x[32 * b + i] * id);
            q[32 * b + i] = r >= -127.0f ? (r <= 127.0f ? (int)r : 127) : -127;
            xs[b] += q[32 * b + i];
        }
        xd[b] = amax / 127.0f;
    }
    for (int j = 0; j < rows; j++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int ch = 0; ch < nch; ch++) {
            int w[32], sc2[2], half[2] = {0, 0};
            float d, m;
            h_chunk(kind, wb.data() + (size_t)j * row_bytes, ch, w, &d, &m, sc2);
            for (int i = 0; i < 32; i++)
                half[i / 16] += w[i] * q[32 * ch + i];
            int is = sc2[0] * half[0] + sc2[1] * half[1];
            float p = d * xd[ch];
            acc[ch % 4] = fmaf(p, (float)is, acc[ch % 4]);
            if (mma_kq(kind)) {
                float pm = m * xd[ch];
                acc[ch % 4] = fmaf(-pm, (float)xs[ch], acc[ch % 4]);
            }
        }
        acc[0] += acc[2];
        acc[1] += acc[3];
        acc[0] += acc[1];
        y[j] = acc[0] + 0.0f;
    }
}

/* x rounded once per product input, then mmq_launch (the engine's) */
template <int KIND>
static void run_mmq(const mma_x &x, mma_outs o, cudaStream_t st) {
    int K = (int)o.w[0].cols;
    mmq_x xq = mmq_quantize(x.x, x.ldx, x.T, K, (void *)x.xs, st);
    if (!mmq_launch<KIND>(xq, o, x.T, 0, st)) {
        fprintf(stderr, "bench_cuda_mv: mmq_launch refused its shared memory\n");
        exit(1);
    }
}

/* the decode kernel with other stages than the engine's (x rounded once per
 * input, as run_mmq) */
template <int KIND, int U, int ST>
static void run_mmq_p(const mma_x &x, mma_outs o, cudaStream_t st) {
    using P = mmq_stage_t<KIND, U, ST>;
    int K = (int)o.w[0].cols;
    mmq_x xq = mmq_quantize(x.x, x.ldx, x.T, K, (void *)x.xs, st);
    static bool attr = false;
    if (!attr)
        CK(cudaFuncSetAttribute(k_mmq_staged<KIND, 1, P>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, P::BYTES));
    attr = true;
    k_mmq_staged<KIND, 1, P>
        <<<dim3(1, (unsigned)mma_tiles(o, 16)), MMA_WARPS * 32, P::BYTES, st>>>(xq, o);
}

/* the engine's kernel before mmq.cuh: x as one bf16 part (k_mma_staged;
 * the prefill tiles are called apart), Q6_K the span kernel (f32 sums, any
 * number of rows) */
template <int KIND>
static void run_before(const mma_x &x, mma_outs o, cudaStream_t st) {
    if constexpr (KIND == MMA_Q6_K) {
        for (int i = 0; i < o.n; i++) {
            dim3 grid((unsigned)((o.w[i].rows + 3) / 4), x.T == 1 ? 1 : (unsigned)((x.T + 7) / 8));
            if (x.T == 1)
                k_mv_span<1><<<grid, 128, 0, st>>>(x.x, x.ldx, x.T, o.w[i], o.y[i], o.ldy[i], nullptr);
            else
                k_mv_span<8><<<grid, 128, 0, st>>>(x.x, x.ldx, x.T, o.w[i], o.y[i], o.ldy[i], nullptr);
        }
    } else
        run_staged<KIND, mma_stage<KIND>, 3, 1>(x, o, st);
}

/* One block format through mmq.cuh: q/k/v fused and down for T rows of x
 * (1: k_mmq_staged's decode, 24: its 32-row tiles, 40: k_mmq_tiled), each
 * checked rows' outputs against the host's emulation, bit for bit; then
 * decode GB/s of 4 layers beside k_mma_staged with x as one bf16 part (the
 * engine's kernel before), and prefill TFLOP/s at T = 512 beside
 * k_mma_tiled with one part. False when any bit differs. */
template <int KIND>
static bool int8_kind(const char *name, double bw, const float *x24h, cudaStream_t st) {
    const int NL = 4, TT = 512;
    static dw w[NL][N_SHAPES];
    size_t layer_bytes = 0;
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < N_SHAPES; i++) {
            w[l][i] = quant_matrix(KIND, k_layer[i].rows, k_layer[i].cols, 3000 + 50 * KIND + 10 * l + i);
            if (l == 0)
                layer_bytes += w[l][i].row_bytes * w[l][i].rows;
        }
    /* x: TT rows of 14336 (the first 40 from x24h's pattern, as bench's) */
    std::vector<float> hx((size_t)TT * 14336);
    for (size_t i = 0; i < hx.size(); i++)
        hx[i] = i < (size_t)24 * 14336 ? x24h[i]
                                       : sinf(0.013f * (float)i) * (1.0f + (float)(i % 11) * 0.2f);
    float *x, *y;
    void *buf;
    CK(cudaMalloc(&x, hx.size() * 4));
    CK(cudaMalloc(&y, (size_t)TT * 3 * 16384 * 4));
    CK(cudaMalloc(&buf, (size_t)MMA_PARTS * TT * 14336 * 2 + 4096));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    bool same = true;
    int checked = 0;
    static const int Ts[3] = {1, 24, 40}, rows_of[3][5] = {{0, -1}, {0, 9, 23, -1}, {0, 17, 32, 39, -1}};
    for (int t = 0; t < 2; t++) {
        const dw *ws = t ? &w[0][6] : &w[0][0];
        int n = t ? 1 : 3, K = (int)ws[0].cols;
        std::vector<std::vector<uint8_t>> hw(n);
        for (int i = 0; i < n; i++) {
            hw[i].resize(ws[i].row_bytes * ws[i].rows);
            CK(cudaMemcpy(hw[i].data(), ws[i].data, hw[i].size(), cudaMemcpyDeviceToHost));
        }
        for (int ti = 0; ti < 3; ti++) {
            int T = Ts[ti];
            /* x's rows of K columns: the first K of each 14336 */
            mma_outs o = outs_of(ws, n, y);
            for (int i = 0; i < n; i++) {
                o.y[i] = y + (size_t)i * TT * 16384;
                o.ldy[i] = 16384;
            }
            run_mmq<KIND>(mma_x{x, 14336, (const uint16_t *)buf, 0, T}, o, st);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            for (int ri = 0; rows_of[ti][ri] >= 0; ri++) {
                int r = rows_of[ti][ri];
                for (int i = 0; i < n; i++) {
                    int R = (int)ws[i].rows;
                    std::vector<float> got(R), want(R);
                    CK(cudaMemcpy(got.data(), y + (size_t)i * TT * 16384 + (size_t)r * 16384,
                                  (size_t)R * 4, cudaMemcpyDeviceToHost));
                    h_mmq(KIND, hw[i], ws[i].row_bytes, R, K, &hx[(size_t)r * 14336], want.data());
                    if (memcmp(got.data(), want.data(), (size_t)R * 4) != 0) {
                        int j = 0;
                        while (j < R - 1 && memcmp(&got[j], &want[j], 4) == 0)
                            j++;
                        fprintf(stderr, "%s int8: T %d row %d output %d: weight row %d %.9g != host %.9g\n",
                                name, T, r, i, j, got[j], want[j]);
                        same = false;
                    }
                    checked++;
                }
            }
        }
    }
    /* decode: 4 layers, q/k/v and gate/up fused, one row of x */
    mma_x x1{x, 14336, (const uint16_t *)buf, 14336, 1};
    /* the engine's before and now, then the int8 kernel's other stages:
     * U 4 x 8 stages, U 16 x 3 (Q8_0: U 2 x 8, U 8 x 3) */
    constexpr int UA = KIND == MMA_Q8_0 ? 2 : 4, UB = KIND == MMA_Q8_0 ? 8 : 16;
    launch_fn fn[4] = {run_before<KIND>, run_mmq<KIND>, run_mmq_p<KIND, UA, 8>,
                       run_mmq_p<KIND, UB, 3>};
    float ms[4];
    time_layers(fn, w, NL, x1, y, ms, st);
    /* prefill: layer 0 at T = 512 */
    double flop = 0;
    for (int i = 0; i < N_SHAPES; i++)
        flop += 2.0 * TT * k_layer[i].rows * k_layer[i].cols;
    auto pre = [&](int v) { /* bf16 x, int8 x (the engine's tiles), int8 x in tiles of 32 rows */
        for (int i = 0; i < 4; i++) {
            mma_outs o = outs_of(w[0] + fused[i][0], fused[i][1], y);
            for (int j = 0; j < o.n; j++) {
                o.y[j] = y + (size_t)j * TT * 16384;
                o.ldy[j] = (int)o.w[j].rows;
            }
            int K = (int)o.w[0].cols;
            mma_x xa{x, 14336, (const uint16_t *)buf, (int64_t)TT * K, TT};
            if (v == 1)
                run_mmq<KIND>(xa, o, st);
            else if (v == 2) {
                mmq_x xq = mmq_quantize(x, 14336, TT, K, buf, st);
                if (!mmq_launch<KIND, 4>(xq, o, TT, 0, st))
                    exit(1);
            } else if constexpr (KIND == MMA_Q6_K)
                run_before<KIND>(xa, o, st);
            else {
                split(x, TT, K, (uint16_t *)buf, st);
                if (!mma_tiled_launch<KIND, 1>(xa, o, TT, 0, st))
                    exit(1);
            }
        }
    };
    float pms[3] = {1e30f, 1e30f, 1e30f};
    for (int rep = 0; rep < 5; rep++)
        for (int v = 0; v < 3; v++)
            time_min(st, pms[v], [&] { pre(v); });
    CK(cudaGetLastError());
    double g0 = (double)layer_bytes * NL / (ms[0] * 1e-3) / 1e9;
    double g1 = (double)layer_bytes * NL / (ms[1] * 1e-3) / 1e9;
    printf("%-6s int8 decode stages: U %d x 8 %6.0f GB/s  U %d x 3 %6.0f\n", name, UA,
           (double)layer_bytes * NL / (ms[2] * 1e-3) / 1e9, UB,
           (double)layer_bytes * NL / (ms[3] * 1e-3) / 1e9);
    printf("%-6s int8: decode before %6.0f GB/s (%2.0f%%)  int8 x %6.0f (%2.0f%%, %.2fx);  prefill "
           "T %d before %6.1f TFLOP/s  int8 x %6.1f (%.2fx; 32-row tiles %6.1f);  %d outputs "
           "equal to the host's: %s\n",
           name, g0, 100 * g0 / bw, g1, 100 * g1 / bw, ms[0] / ms[1], TT,
           flop / (pms[0] * 1e-3) / 1e12, flop / (pms[1] * 1e-3) / 1e12, pms[0] / pms[1],
           flop / (pms[2] * 1e-3) / 1e12, checked, same ? "yes" : "NO");
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < N_SHAPES; i++)
            CK(cudaFree((void *)w[l][i].data));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(buf));
    return same;
}

/* Prefill: T rows of x through an 8B layer's products (q/k/v and gate/up
 * fused, as the engine launches them), k_mma's tiles of 64 x 32 (the
 * engine's kernel before) against k_mma_tiled; TFLOP/s of the products
 * (2 T rows cols a matrix, whatever the parts) and the same bits for every
 * row, or the run exits 1. The parts are split once a run, outside the
 * timing (both kernels read them). */
static dw plain_matrix(int kind, int rows, int cols, uint64_t seed) {
    dw w = bf16_matrix(rows, cols, seed);
    if (kind == MMA_F16) { /* the same values as f16 */
        size_t n = (size_t)rows * cols;
        std::vector<uint16_t> b(n);
        CK(cudaMemcpy(b.data(), w.data, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)b[i] << 16;
            float v;
            memcpy(&v, &u, 4);
            b[i] = __half_as_ushort(__float2half_rn(v));
        }
        CK(cudaMemcpy((void *)w.data, b.data(), n * 2, cudaMemcpyHostToDevice));
        w.dtype = HR_DTYPE_F16;
    }
    return w;
}

template <int KIND, int NP>
static bool prefill_kind(const char *name, int T, const float *x, uint16_t *xs, float *y,
                         float *ref, cudaStream_t st) {
    dw w[N_SHAPES];
    double flop = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        w[i] = KIND == MMA_BF16 || KIND == MMA_F16
                   ? plain_matrix(KIND, k_layer[i].rows, k_layer[i].cols, 500 + i)
                   : quant_matrix(KIND, k_layer[i].rows, k_layer[i].cols, 700 + 10 * KIND + i);
        flop += 2.0 * T * k_layer[i].rows * k_layer[i].cols;
    }
    /* product i's output j of T rows at out + (i * 3 + j) * T * 14336 */
    auto outs = [&](int i, float *out) {
        mma_outs o = {};
        for (int j = 0; j < fused[i][1]; j++) {
            o.w[j] = w[fused[i][0] + j];
            o.y[j] = out + (size_t)(i * 3 + j) * T * 14336;
            o.ldy[j] = (int)o.w[j].rows;
        }
        o.n = fused[i][1];
        return o;
    };
    auto xin = [&](int i) {
        int K = (int)w[fused[i][0]].cols;
        return mma_x{x, K, xs + (size_t)(i == 3) * MMA_PARTS * T * 4096, (int64_t)T * K, T};
    };
    /* the parts of x's first 4096 and 14336 columns (the down product's input) */
    split(x, T, 4096, xs, st);
    split(x, T, 14336, xs + (size_t)MMA_PARTS * T * 4096, st);
    auto old_kernel = [&](float *out) {
        for (int i = 0; i < 4; i++) {
            mma_outs o = outs(i, out);
            k_mma<KIND, false, false, 4, 4, 1, 2, NP>
                <<<dim3((T + 31) / 32, (unsigned)mma_tiles(o, 64)), MMA_WARPS * 32, 0, st>>>(
                    xin(i), o);
        }
    };
    /* k_mma_tiled with 32 activation rows a block (NT 4: the engine's,
     * MMA_TILED_NT) and with 64 (NT 8; x in one part: three parts' stages
     * do not fit twice) */
    constexpr int NT2 = NP == 1 ? 8 : 4;
    auto tiled = [&](float *out, bool nt4) {
        for (int i = 0; i < 4; i++)
            if (!(nt4 ? mma_tiled_launch<KIND, NP, 4>(xin(i), outs(i, out), T, 0, st)
                      : mma_tiled_launch<KIND, NP, NT2>(xin(i), outs(i, out), T, 0, st))) {
                fprintf(stderr, "bench_cuda_mv: k_mma_tiled refused its shared memory\n");
                exit(1);
            }
    };
    auto same_as_ref = [&]() {
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        bool same = true;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < fused[i][1]; j++) {
                size_t n = (size_t)T * w[fused[i][0] + j].rows;
                size_t off = (size_t)(i * 3 + j) * T * 14336;
                std::vector<float> a(n), b(n);
                CK(cudaMemcpy(a.data(), ref + off, n * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(b.data(), y + off, n * 4, cudaMemcpyDeviceToHost));
                same = same && memcmp(a.data(), b.data(), n * 4) == 0;
            }
        return same;
    };
    old_kernel(ref);
    tiled(y, true);
    bool same = same_as_ref();
    CK(cudaMemset(y, 0, (size_t)12 * T * 14336 * 4));
    tiled(y, false);
    same = same_as_ref() && same;
    float ms[3] = {1e30f, 1e30f, 1e30f};
    for (int rep = 0; rep < 5; rep++) {
        time_min(st, ms[0], [&] { old_kernel(ref); });
        time_min(st, ms[1], [&] { tiled(y, true); });
        time_min(st, ms[2], [&] { tiled(y, false); });
    }
    CK(cudaGetLastError());
    printf("prefill %-5s x %d part%s T %4d: k_mma %6.1f TFLOP/s  k_mma_tiled 32 rows %6.1f "
           "(%.2fx)  %d rows %6.1f (%.2fx)  same bits %s\n",
           name, NP, NP > 1 ? "s" : " ", T, flop / (ms[0] * 1e-3) / 1e12,
           flop / (ms[1] * 1e-3) / 1e12, ms[0] / ms[1], 8 * NT2, flop / (ms[2] * 1e-3) / 1e12,
           ms[0] / ms[2], same ? "yes" : "NO");
    for (int i = 0; i < N_SHAPES; i++)
        CK(cudaFree((void *)w[i].data));
    return same;
}

static bool prefill(int T) {
    float *x, *y, *ref;
    uint16_t *xs;
    size_t nx = (size_t)T * 14336, ny = (size_t)12 * T * 14336;
    std::vector<float> hx(nx);
    for (size_t i = 0; i < nx; i++)
        hx[i] = sinf(0.37f * (float)i) * (1.0f + (float)(i % 7) * 0.1f);
    CK(cudaMalloc(&x, nx * 4));
    CK(cudaMalloc(&xs, (size_t)MMA_PARTS * T * (4096 + 14336) * 2));
    CK(cudaMalloc(&y, ny * 4));
    CK(cudaMalloc(&ref, ny * 4));
    CK(cudaMemcpy(x, hx.data(), nx * 4, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    bool ok = prefill_kind<MMA_BF16, MMA_PARTS>("bf16", T, x, xs, y, ref, st);
    ok = prefill_kind<MMA_F16, MMA_PARTS>("f16", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q8_0, MMA_PARTS>("Q8_0", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q8_0, 1>("Q8_0", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q4_0, MMA_PARTS>("Q4_0", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q4_0, 1>("Q4_0", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q4_K, MMA_PARTS>("Q4_K", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q4_K, 1>("Q4_K", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q5_K, MMA_PARTS>("Q5_K", T, x, xs, y, ref, st) && ok;
    ok = prefill_kind<MMA_Q5_K, 1>("Q5_K", T, x, xs, y, ref, st) && ok;
    CK(cudaFree(x));
    CK(cudaFree(xs));
    CK(cudaFree(y));
    CK(cudaFree(ref));
    CK(cudaStreamDestroy(st));
    return ok;
}

int main(int argc, char **argv) {
    /* bench_cuda_mv prefill [T...]: the prefill products alone */
    if (argc > 1 && strcmp(argv[1], "prefill") == 0) {
        bool ok = true;
        for (int i = 2; i < argc || i == 2; i++)
            ok = prefill(i < argc ? atoi(argv[i]) : 512) && ok;
        return ok ? 0 : 1;
    }
    double bw = copy_bw();
    printf("device-to-device copy: %.0f GB/s (read + written)\n", bw);
    bool only8 = argc > 1 && strcmp(argv[1], "int8") == 0; /* bench_cuda_mv int8: mmq.cuh's alone */
    static dw w[N_LAYERS][N_SHAPES];
    size_t layer_bytes = 0;
    for (int l = 0; l < N_LAYERS; l++)
        for (int i = 0; i < N_SHAPES; i++) {
            w[l][i] = bf16_matrix(k_layer[i].rows, k_layer[i].cols, 100 * l + i);
            if (l == 0)
                layer_bytes += (size_t)k_layer[i].rows * k_layer[i].cols * 2;
        }
    dw head = bf16_matrix(128256, 4096, 7);
    std::vector<float> hx(14336);
    for (int i = 0; i < 14336; i++)
        hx[i] = sinf(0.37f * i) * (1.0f + (i % 7) * 0.1f);
    float *x, *y, *ref;
    CK(cudaMalloc(&x, 14336 * 4));
    CK(cudaMalloc(&y, 128256 * 4 + 3 * 16384 * 4));
    CK(cudaMalloc(&ref, 128256 * 4));
    CK(cudaMemcpy(x, hx.data(), 14336 * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&g_xs, 14336 * 2 * MMA_PARTS));
    mma_x xa{x, 14336, nullptr, 0, 1};
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    std::vector<float> hr(128256), hy(128256);
    printf("%-22s %9s %9s %9s  (GB/s; %% of the copy's)\n", "variant", "layers", "lm_head",
           "same bits");
    for (int v = 0; v < (only8 ? 0 : N_VARIANTS); v++) {
        const variant &va = k_variants[v];
        /* the same bits as the first variant: k, v fused with q, and the head */
        bool same = true;
        for (int t = 0; t < 2; t++) {
            k_variants[0].fn(xa, outs_of(t ? &head : &w[0][2], 1, ref), st);
            va.fn(xa, t ? outs_of(&head, 1, y) : outs_of(&w[0][0], 3, y), st);
            CK(cudaStreamSynchronize(st));
            size_t n = t ? 128256 : 1024;
            CK(cudaMemcpy(hr.data(), ref, n * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hy.data(), t ? y : y + 2 * 16384, n * 4, cudaMemcpyDeviceToHost));
            same = same && memcmp(hr.data(), hy.data(), n * 4) == 0;
        }
        float ms_l = 1e30f, ms_h = 1e30f;
        for (int rep = 0; rep < 5; rep++) {
            time_min(st, ms_l, [&] {
                for (int l = 0; l < N_LAYERS; l++)
                    layer(va, xa, w[l], y, st);
            });
            time_min(st, ms_h, [&] { va.fn(xa, outs_of(&head, 1, y), st); });
        }
        CK(cudaGetLastError());
        double gl = (double)layer_bytes * N_LAYERS / (ms_l * 1e-3) / 1e9;
        double gh = 128256.0 * 4096 * 2 / (ms_h * 1e-3) / 1e9;
        printf("%-22s %9.0f %9.0f %9s  (%.0f%% / %.0f%%)\n", va.name, gl, gh, same ? "yes" : "NO",
               100 * gl / bw, 100 * gh / bw);
    }
    /* the block formats: x's 24 rows (the first as above), their parts */
    std::vector<float> hx24((size_t)24 * 14336);
    for (size_t i = 0; i < hx24.size(); i++)
        hx24[i] = i < 14336 ? hx[i] : cosf(0.11f * (float)i) * (1.0f + (float)(i % 5) * 0.3f);
    float *x24, *big;
    uint16_t *xs;
    CK(cudaMalloc(&big, (size_t)24 * 3 * 16384 * 4));
    CK(cudaMalloc(&x24, hx24.size() * 4));
    CK(cudaMalloc(&xs, hx24.size() * 2 * MMA_PARTS));
    CK(cudaMemcpy(x24, hx24.data(), hx24.size() * 4, cudaMemcpyHostToDevice));
    bool ok = true;
    if (!only8) {
        ok = quant_kind<MMA_Q8_0>("Q8_0", bw, x24, xs, y, ref, big, st);
        ok = quant_kind<MMA_Q4_0>("Q4_0", bw, x24, xs, y, ref, big, st) && ok;
        ok = quant_kind<MMA_Q4_K>("Q4_K", bw, x24, xs, y, ref, big, st) && ok;
        ok = quant_kind<MMA_Q5_K>("Q5_K", bw, x24, xs, y, ref, big, st) && ok;
    }
    ok = int8_kind<MMA_Q8_0>("Q8_0", bw, hx24.data(), st) && ok;
    ok = int8_kind<MMA_Q4_0>("Q4_0", bw, hx24.data(), st) && ok;
    ok = int8_kind<MMA_Q4_K>("Q4_K", bw, hx24.data(), st) && ok;
    ok = int8_kind<MMA_Q5_K>("Q5_K", bw, hx24.data(), st) && ok;
    ok = int8_kind<MMA_Q6_K>("Q6_K", bw, hx24.data(), st) && ok;
    return ok ? 0 : 1;
}
