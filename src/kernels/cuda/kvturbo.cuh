/* TurboQuant's KV rows on the GPU (--kv-quant turbo; the format:
 * kernels/cpu/turbo.h). A row is stored by one warp into the bytes
 * hr_turbo_kv_store writes for the same floats: each segment's channels
 * gathered, its norm summed in double in channel order by one lane, two
 * rounds of signs + Walsh-Hadamard transform + 1/sqrt(dim) (the transform's
 * butterflies are the CPU's, stage by stage), the nearest centroid by the
 * same midpoints, <z, c> summed in double in order by one lane, and the
 * unbiased scale rounded to f16 by the CPU's converter. Attention works in
 * the rotated basis as the CPU's does: the query is rotated once by its KV
 * head's K rotation (kvt_rotate_q), a row's rotated element is c(code) *
 * (w * rinv), and the output is rotated back once by V's (kvt_unrotate).
 * Included by kvq.cuh (kvf, kv_f2h, kv_pack). */
#ifndef HR_KERNELS_CUDA_KVTURBO_CUH
#define HR_KERNELS_CUDA_KVTURBO_CUH

/* the codebooks (turbo_codebooks.h's hr_turbo_centroids), [dim 32, 64, 128,
 * 256][bits - 1][code]: uploaded when a device is opened (backend_cuda.cu) */
__constant__ float kvt_cb[4][4][16];

/* a row format's segments (hr_turbo_kv_layout) */
struct kvt_lay {
    int nseg, dim, bits[2], off[2];
    float rinv;
};

static __device__ __forceinline__ kvt_lay kvt_layout(const kvf &f) {
    int hd = f.hd, r2 = f.bits;
    kvt_lay L;
    L.nseg = r2 % 2 ? 2 : 1; /* (shifts, not divisions: these run for every element read) */
    L.dim = hd >> (L.nseg - 1);
    L.bits[0] = (r2 + 1) >> 1;
    L.bits[1] = r2 >> 1;
    L.off[0] = 2 * L.nseg;
    L.off[1] = L.off[0] + ((L.dim * L.bits[0]) >> 3);
    L.rinv = f.rinv; /* kv_fmt's */
    return L;
}

static __device__ __forceinline__ const float *kvt_centroids(int dim, int bits) {
    return kvt_cb[__ffs(dim) - 6][bits - 1]; /* dim 32 .. 256 */
}

/* segment s's codebook: the kernel's copy (kvt_bind), else kvt_cb's. A
 * warp's lanes read codes of their own, and constant memory serializes
 * diverging addresses where shared memory serves them at once. */
static __device__ __forceinline__ const float *kvt_cbook(const kvf &f, const kvt_lay &L, int s) {
    const float *c = s ? f.cb1 : f.cb0;
    return c ? c : kvt_centroids(L.dim, L.bits[s]);
}

/* f's segments' codebooks copied into sh[2][16] (shared; every thread of
 * the block calls it, a __syncthreads before they are read) */
static __device__ void kvt_copy_cb(const kvf &f, float (*sh)[16]) {
    kvt_lay L = kvt_layout(f);
    for (int i = threadIdx.x; i < 2 * 16; i += blockDim.x)
        if (i / 16 < L.nseg)
            sh[i / 16][i % 16] = kvt_centroids(L.dim, L.bits[i / 16])[i % 16];
}

/* f reads its codebooks from sh (kvt_copy_cb's) */
static __device__ __forceinline__ void kvt_bind(kvf &f, float (*sh)[16]) {
    f.cb0 = sh[0];
    f.cb1 = sh[1];
}

/* the channel of position e of segment s (hr_turbo_kv_chan) */
static __device__ __forceinline__ int kvt_chan(int hd, int nseg, int s, int e) {
    if (nseg == 1)
        return e;
    int q = hd / 4;
    return e + (e >= q ? q : 0) + (s == 0 ? q : 0);
}

/* sign i of the rotation round `seed` names (hr_turbo_signs: splitmix64,
 * 64 signs a draw) */
static __device__ __forceinline__ float kvt_sign(uint64_t seed, int i) {
    uint64_t z = seed + (uint64_t)(i / 64 + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (z >> (i % 64)) & 1 ? -1.0f : 1.0f;
}

static __device__ __forceinline__ uint64_t kvt_seed(int layer, int head, int seg, int v,
                                                    int round) {
    return 0x7475726271756174ull ^ ((uint64_t)layer << 24 | (uint64_t)head << 4 |
                                     (uint64_t)round << 2 | (uint64_t)seg << 1 | (uint64_t)v);
}

/* the unnormalized Walsh-Hadamard transform of buf[0..n) in place, a stage
 * at a time (the CPU's fwht: each butterfly a + b, a - b) (a whole warp) */
static __device__ void kvt_fwht(float *buf, int n) {
    int lane = threadIdx.x & 31;
    for (int h = 1; h < n; h *= 2) {
        for (int p = lane; p < n / 2; p += 32) {
            int i = p / h * 2 * h + p % h;
            float a = buf[i], b = buf[i + h];
            buf[i] = __fadd_rn(a, b);
            buf[i + h] = __fsub_rn(a, b);
        }
        __syncwarp();
    }
}

/* segment s's buf (dim floats) rotated: twice y = H D y / sqrt(dim), D the
 * signs of rounds 0 and 1 (a whole warp) */
static __device__ void kvt_rotate(float *buf, const kvt_lay &L, int layer, int head, int s,
                                  int v) {
    int lane = threadIdx.x & 31;
    for (int round = 0; round < 2; round++) {
        uint64_t seed = kvt_seed(layer, head, s, v, round);
        for (int e = lane; e < L.dim; e += 32)
            buf[e] = __fmul_rn(buf[e], kvt_sign(seed, e));
        __syncwarp();
        kvt_fwht(buf, L.dim);
        for (int e = lane; e < L.dim; e += 32)
            buf[e] = __fmul_rn(buf[e], L.rinv);
        __syncwarp();
    }
}

/* the inverse: twice x = D H x / sqrt(dim), rounds 1 then 0 */
static __device__ void kvt_unrotate(float *buf, const kvt_lay &L, int layer, int head, int s,
                                    int v) {
    int lane = threadIdx.x & 31;
    for (int round = 1; round >= 0; round--) {
        uint64_t seed = kvt_seed(layer, head, s, v, round);
        kvt_fwht(buf, L.dim);
        for (int e = lane; e < L.dim; e += 32)
            buf[e] = __fmul_rn(buf[e], __fmul_rn(L.rinv, kvt_sign(seed, e)));
        __syncwarp();
    }
}

/* code e of a segment's bit stream q (hr_turbo_code) */
static __device__ __forceinline__ unsigned kvt_code(const uint8_t *q, int e, int bits) {
    unsigned bit = (unsigned)e * (unsigned)bits;
    unsigned v = q[bit >> 3];
    if ((bit & 7) + (unsigned)bits > 8)
        v |= (unsigned)q[(bit >> 3) + 1] << 8;
    return (v >> (bit & 7)) & ((1u << bits) - 1);
}

/* segment s's scale times rinv (hr_turbo_kv_load_rotated's w) */
static __device__ __forceinline__ float kvt_w(const uint8_t *row, const kvt_lay &L, int s) {
    return __fmul_rn(h2f(((const uint16_t *)row)[s]), L.rinv);
}

/* element i of the row's rotated vector, w its segment's kvt_w (a row
 * has at most two segments: i's is i >= dim) */
static __device__ __forceinline__ float kvt_elem_w(const uint8_t *row, const kvf &f, int i,
                                                   float w) {
    kvt_lay L = kvt_layout(f);
    int s = i >= L.dim, e = i - s * L.dim;
    return __fmul_rn(kvt_cbook(f, L, s)[kvt_code(row + L.off[s], e, L.bits[s])], w);
}

/* elements i .. i + 3 (i a multiple of 4: one segment's, whose dim is a
 * multiple of 32), as kvt_elem_w */
static __device__ __forceinline__ float4 kvt_elem4_w(const uint8_t *row, const kvf &f, int i,
                                                     float w) {
    kvt_lay L = kvt_layout(f);
    int s = i >= L.dim, e = i - s * L.dim;
    const float *c = kvt_cbook(f, L, s);
    const uint8_t *q = row + L.off[s];
    float x[4];
    for (int k = 0; k < 4; k++)
        x[k] = __fmul_rn(c[kvt_code(q, e + k, L.bits[s])], w);
    return make_float4(x[0], x[1], x[2], x[3]);
}

/* element i of the row's rotated vector */
static __device__ __forceinline__ float kvt_elem(const uint8_t *row, const kvf &f, int i) {
    kvt_lay L = kvt_layout(f);
    return kvt_elem_w(row, f, i, kvt_w(row, L, i >= L.dim));
}

/* q (rotated) . the row's rotated vector, in order */
static __device__ float kvt_dot(const float *q, const uint8_t *row, const kvf &f) {
    kvt_lay L = kvt_layout(f);
    float acc = 0.0f;
    for (int s = 0; s < L.nseg; s++) {
        const float *c = kvt_cbook(f, L, s);
        const uint8_t *qs = row + L.off[s];
        float w = kvt_w(row, L, s);
        for (int e = 0; e < L.dim; e++)
            acc = fmaf(q[s * L.dim + e], __fmul_rn(c[kvt_code(qs, e, L.bits[s])], w), acc);
    }
    return acc;
}

/* hr_turbo_kv_store of KV head `head`'s row x into row (a whole warp); sq,
 * sf: the warp's dim bytes and floats of scratch */
static __device__ void kvt_store(uint8_t *row, const float *x, const kvf &f, int head,
                                 uint8_t *sq, float *sf) {
    int lane = threadIdx.x & 31;
    kvt_lay L = kvt_layout(f);
    for (int s = 0; s < L.nseg; s++) {
        for (int e = lane; e < L.dim; e += 32)
            sf[e] = x[kvt_chan(f.hd, L.nseg, s, e)];
        __syncwarp();
        float n = 0.0f;
        if (lane == 0) { /* norm_of: a double sum in channel order */
            double n2 = 0;
            for (int e = 0; e < L.dim; e++)
                n2 = __dadd_rn(n2, __dmul_rn((double)sf[e], (double)sf[e]));
            n = (float)__dsqrt_rn(n2);
        }
        n = __shfl_sync(0xffffffffu, n, 0);
        kvt_rotate(sf, L, f.layer, head, s, f.v);
        /* encode: z = y sqrt(dim) / n to its nearest centroid */
        const float *c = kvt_centroids(L.dim, L.bits[s]);
        int k = 1 << L.bits[s];
        float sc = n > 0 ? __fdiv_rn(__fsqrt_rn((float)L.dim), n) : 0.0f;
        for (int e = lane; e < L.dim; e += 32) {
            float z = __fmul_rn(sf[e], sc);
            int code = 0;
            while (code + 1 < k && z > __fmul_rn(0.5f, __fadd_rn(c[code], c[code + 1])))
                code++;
            sf[e] = z;
            sq[e] = (uint8_t)code;
        }
        __syncwarp();
        if (lane == 0) { /* <z, c> in double, in order; the unbiased scale */
            double zc = 0;
            for (int e = 0; e < L.dim; e++)
                zc = __dadd_rn(zc, __dmul_rn((double)sf[e], (double)c[sq[e]]));
            float w = zc > 0 ? (float)__ddiv_rn(__dmul_rn((double)n, (double)L.dim), zc) : 0.0f;
            ((uint16_t *)row)[s] = kv_f2h(fminf(w, 65504.0f));
        }
        kv_pack(row + L.off[s], sq, L.dim, L.bits[s]);
        __syncwarp(); /* sf, sq are the next segment's */
    }
}

/* ---- attention in the rotated basis ------------------------------------------------- */

/* The query q (hd floats, shared) rotated by KV head kvh's K rotation, in
 * place; tmp: hd floats of shared scratch (a whole warp). */
static __device__ void kvt_rotate_q_warp(const kvf &kf, int kvh, float *q, float *tmp) {
    int lane = threadIdx.x & 31;
    kvt_lay L = kvt_layout(kf);
    for (int s = 0; s < L.nseg; s++)
        for (int e = lane; e < L.dim; e += 32)
            tmp[s * L.dim + e] = q[kvt_chan(kf.hd, L.nseg, s, e)];
    __syncwarp();
    for (int s = 0; s < L.nseg; s++)
        kvt_rotate(tmp + s * L.dim, L, kf.layer, kvh, s, 0);
    for (int e = lane; e < kf.hd; e += 32)
        q[e] = tmp[e];
    __syncwarp();
}

/* kvt_rotate_q_warp by warp 0; every thread of the block calls it */
static __device__ void kvt_rotate_q(const kvf &kf, int kvh, float *q, float *tmp) {
    if (threadIdx.x < 32)
        kvt_rotate_q_warp(kf, kvh, q, tmp);
    __syncthreads();
}

/* An output row o (hd floats, shared, in V's rotated basis) rotated back by
 * KV head kvh's V rotation into out (a whole warp). */
static __device__ void kvt_unrotate_out(const kvf &vf, int kvh, float *o, float *out) {
    kvt_lay L = kvt_layout(vf);
    for (int s = 0; s < L.nseg; s++)
        kvt_unrotate(o + s * L.dim, L, vf.layer, kvh, s, 1);
    for (int s = 0; s < L.nseg; s++)
        for (int e = threadIdx.x & 31; e < L.dim; e += 32)
            out[kvt_chan(vf.hd, L.nseg, s, e)] = o[s * L.dim + e];
}

#endif
