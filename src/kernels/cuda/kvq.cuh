/* K/V rows of the cache on the GPU, in the formats of kernels/cpu/kvquant.h:
 * F32, F16, BF16 elements; Q8_0, Q4_0 rows of ggml blocks (--cache-type-k
 * / -v); AFFINE records (mlx-lm's mx.quantize, --kv-bits); TURBO records
 * (--kv-quant turbo: kvturbo.cuh, read in the rotated basis). A quantized row
 * is stored by one warp into the bytes the CPU's quantizers write for the
 * same floats (hr_kv_row_store: hr_quant_gguf_row, hr_quant_affine_row), so
 * the prompt cache and the SSD tier move blocks between the backends as
 * bytes; it is read element by element as the floats the CPU's
 * dequantization gives (hr_kv_row_load), so attention over a quantized row
 * is attention over its dequantized floats, summed in the order of an f32
 * row. Products and sums are rounded one by one (__fmul_rn, __fadd_rn,
 * __fdiv_rn): nvcc would otherwise fuse them where the CPU does not. */
#ifndef HR_KERNELS_CUDA_KVQ_CUH
#define HR_KERNELS_CUDA_KVQ_CUH

extern "C" {
#include "kernels/backend.h"
}
#include "core/f16.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/warp.cuh"

#include <math.h>

/* ---- formats --------------------------------------------------------------------- */

/* One side's (K or V) format in a layer: row r of block b (r = kv_head *
 * block_size + slot) begins at b * stride + r * row, counted in elements for
 * the plain dtypes and in bytes for the records. */
struct kvf {
    int t, bits, group, hd;
    int layer, v; /* TURBO: the rows' rotations (hr_turbo_kv_seed) */
    float rinv;   /* TURBO: 1 / sqrt(a segment's channels) */
    size_t stride, row;
    const float *cb0, *cb1; /* TURBO: its segments' codebooks where a kernel copied them
                               (kvt_bind), else NULL: kvt_cb's (two fields, not an
                               array: an index would put the struct in local memory) */
};

static __host__ __device__ __forceinline__ bool kv_rec(int t) {
    return t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0 || t == HR_DTYPE_AFFINE ||
           t == HR_DTYPE_TURBO;
}

/* a row's elements (plain) or bytes (records: hr_kv_row_size) */
static __host__ __device__ __forceinline__ size_t kv_row_len(int t, int hd, int bits, int group) {
    switch (t) {
    case HR_DTYPE_Q8_0: return (size_t)(hd / 32) * 34;
    case HR_DTYPE_Q4_0: return (size_t)(hd / 32) * 18;
    case HR_DTYPE_AFFINE: return (size_t)hd * (size_t)bits / 8 + 8 * (size_t)(hd / group);
    case HR_DTYPE_TURBO: return (bits % 2 ? 4u : 2u) + (size_t)hd * (size_t)bits / 16;
    default: return (size_t)hd;
    }
}

/* the bytes of one unit of kv_row_len and kv_at: a byte for a record, an
 * element for a plain type */
static __host__ __device__ __forceinline__ int kv_unit(int t) {
    return kv_rec(t) ? 1 : t == HR_DTYPE_F32 ? 4 : 2;
}

/* K's (v false) or V's format in a layer's arguments (hr_qkv_args,
 * hr_attn_in): V has K's format unless v_block_stride is set */
template <class A>
static __device__ __forceinline__ kvf kv_fmt(const A &a, bool v) {
    bool own = v && a.v_block_stride > 0;
    kvf f;
    f.t = own ? (int)a.v_dtype : (int)a.kv_dtype;
    f.bits = v && a.v_bits ? a.v_bits : a.kv_bits;
    f.group = a.kv_group;
    f.hd = a.head_dim;
    f.layer = a.layer;
    f.v = v;
    f.stride = own ? a.v_block_stride : a.block_stride;
    f.row = kv_row_len(f.t, a.head_dim, f.bits, f.group);
    int dim = f.bits % 2 ? a.head_dim / 2 : a.head_dim; /* hr_turbo_kv_layout's rinv */
    f.rinv = f.t == HR_DTYPE_TURBO ? __fdiv_rn(1.0f, __fsqrt_rn((float)dim)) : 0.0f;
    f.cb0 = f.cb1 = NULL;
    return f;
}

static __device__ __forceinline__ size_t kv_at(const kvf &f, int32_t block, int r) {
    return (size_t)block * f.stride + (size_t)r * f.row;
}

/* ---- plain elements ------------------------------------------------------------------ */

static __device__ __forceinline__ void store_kv(void *base, size_t at, float v, int t) {
    if (t == HR_DTYPE_F32) {
        ((float *)base)[at] = v;
    } else if (t == HR_DTYPE_F16) { /* saturate as the CPU: finite stays finite */
        if (fabsf(v) > 65504.0f)
            v = copysignf(65504.0f, v);
        ((__half *)base)[at] = __float2half_rn(v);
    } else {
        ((__nv_bfloat16 *)base)[at] = __float2bfloat16_rn(v);
    }
}

static __device__ __forceinline__ float load_kv(const void *base, size_t at, int t) {
    if (t == HR_DTYPE_F32)
        return ((const float *)base)[at];
    if (t == HR_DTYPE_F16)
        return __half2float(((const __half *)base)[at]);
    return __bfloat162float(((const __nv_bfloat16 *)base)[at]);
}

/* ---- helpers ---------------------------------------------------------------------- */

/* hr_f32_to_f16 (core/f16.h), bit for bit: round to nearest even */
static __device__ __forceinline__ uint16_t kv_f2h(float x) { return hr__f32_to_f16(x); }

/* n quants q[0..n) of `bits` bits as an LSB-first bit stream at dst (n *
 * bits / 8 whole bytes), a byte a lane at a time (a whole warp) */
static __device__ void kv_pack(uint8_t *dst, const uint8_t *q, int n, int bits) {
    int lane = threadIdx.x & 31;
    for (int k = lane; k < n * bits / 8; k += 32) {
        int b0 = 8 * k;
        unsigned v = 0;
        for (int i = b0 / bits; i <= (b0 + 7) / bits; i++) {
            int sh = i * bits - b0;
            v |= sh >= 0 ? (unsigned)q[i] << sh : (unsigned)q[i] >> -sh;
        }
        dst[k] = (uint8_t)v;
    }
}

#include "kernels/cuda/kvturbo.cuh"

/* ---- reading records --------------------------------------------------------------- */

/* the f16 scale of a ggml block (2-byte aligned: rows are even) */
static __device__ __forceinline__ float kvg_d(const uint8_t *b) {
    return h2f(*(const uint16_t *)b);
}

/* quant i of an affine record's packed stream (4-byte aligned: rows are
 * multiples of 4 bytes) */
static __device__ __forceinline__ unsigned kva_q(const uint8_t *row, int i, int bits) {
    const uint32_t *w = (const uint32_t *)row;
    unsigned bit = (unsigned)i * (unsigned)bits, off = bit & 31;
    uint32_t v = w[bit >> 5] >> off;
    if (off + (unsigned)bits > 32)
        v |= w[(bit >> 5) + 1] << (32 - off);
    return v & ((1u << bits) - 1);
}

/* an affine record's scales (then its biases): after the hd * bits / 8
 * bytes of quants */
static __device__ __forceinline__ const float *kva_scales(const uint8_t *row, const kvf &f) {
    return (const float *)(row + (size_t)f.hd * (size_t)f.bits / 8);
}

/* element i of the row at `at`, as hr_kv_row_load gives it */
static __device__ __forceinline__ float kv_elem(const void *base, const kvf &f, size_t at, int i) {
    const uint8_t *row = (const uint8_t *)base + at;
    switch (f.t) {
    case HR_DTYPE_Q8_0: {
        const uint8_t *b = row + (size_t)(i / 32) * 34;
        return __fmul_rn(kvg_d(b), (float)(int8_t)b[2 + i % 32]);
    }
    case HR_DTYPE_Q4_0: {
        const uint8_t *b = row + (size_t)(i / 32) * 18;
        int e = i % 32, x = b[2 + (e & 15)];
        return __fmul_rn(kvg_d(b), (float)((e < 16 ? x & 15 : x >> 4) - 8));
    }
    case HR_DTYPE_TURBO: return kvt_elem(row, f, i);
    case HR_DTYPE_AFFINE: {
        const float *sc = kva_scales(row, f);
        int g = i / f.group;
        return __fadd_rn(__fmul_rn(sc[g], (float)kva_q(row, i, f.bits)), sc[f.hd / f.group + g]);
    }
    default: return load_kv(base, at + (size_t)i, f.t);
    }
}

/* elements i .. i + 3 (i a multiple of 4) of the record at `at`, each as
 * kv_elem gives it, from two-byte and four-byte loads (a ggml block's quants
 * begin 2 bytes in; an affine record's stream is words) */
static __device__ __forceinline__ float4 kv_elem4(const void *base, const kvf &f, size_t at,
                                                  int i) {
    const uint8_t *row = (const uint8_t *)base + at;
    float x[4];
    if (f.t == HR_DTYPE_Q8_0 || f.t == HR_DTYPE_Q4_0) {
        bool q8 = f.t == HR_DTYPE_Q8_0;
        int e = i % 32;
        const uint8_t *b = row + (size_t)(i / 32) * (q8 ? 34 : 18);
        const uint16_t *p = (const uint16_t *)(b + 2 + (q8 ? e : e & 15));
        unsigned u = (unsigned)p[0] | (unsigned)p[1] << 16;
        float d = kvg_d(b);
        for (int k = 0; k < 4; k++) {
            unsigned c = u >> 8 * k & 0xff;
            int v = q8 ? (int)(int8_t)c : (int)(e < 16 ? c & 15 : c >> 4) - 8;
            x[k] = __fmul_rn(d, (float)v);
        }
    } else if (f.t == HR_DTYPE_AFFINE) {
        const uint32_t *w = (const uint32_t *)row;
        unsigned bits = (unsigned)f.bits, bit = (unsigned)i * bits, off = bit & 31;
        uint64_t v = w[bit >> 5];
        if (off + 4 * bits > 32)
            v |= (uint64_t)w[(bit >> 5) + 1] << 32;
        v >>= off;
        const float *sc = kva_scales(row, f);
        int g = i / f.group;
        float s = sc[g], b = sc[f.hd / f.group + g];
        for (int k = 0; k < 4; k++)
            x[k] = __fadd_rn(__fmul_rn(s, (float)(unsigned)(v >> k * bits & ((1u << bits) - 1))),
                             b);
    } else { /* TURBO */
        kvt_lay L = kvt_layout(f); /* (w passed in: ptxas spills less in the GQA kernel) */
        return kvt_elem4_w(row, f, i, kvt_w(row, L, i >= L.dim));
    }
    return make_float4(x[0], x[1], x[2], x[3]);
}

/* q . row over the hd dims of a record at `at`, in dim order: the same
 * fmaf chain as over the dequantized row in f32 */
static __device__ float kv_dot_rec(const float *q, const void *base, const kvf &f, size_t at) {
    const uint8_t *row = (const uint8_t *)base + at;
    int hd = f.hd;
    float s = 0.0f;
    if (f.t == HR_DTYPE_TURBO) {
        return kvt_dot(q, row, f);
    } else if (f.t == HR_DTYPE_Q8_0) {
        for (int b = 0; b < hd / 32; b++) {
            const uint8_t *blk = row + (size_t)b * 34;
            const uint16_t *qs = (const uint16_t *)(blk + 2);
            float d = kvg_d(blk);
            const float *qb = q + 32 * b;
            for (int i = 0; i < 16; i++) {
                uint16_t u = qs[i];
                s = fmaf(qb[2 * i], __fmul_rn(d, (float)(int8_t)(u & 0xff)), s);
                s = fmaf(qb[2 * i + 1], __fmul_rn(d, (float)(int8_t)(u >> 8)), s);
            }
        }
    } else if (f.t == HR_DTYPE_Q4_0) {
        for (int b = 0; b < hd / 32; b++) {
            const uint8_t *blk = row + (size_t)b * 18;
            const uint16_t *qs = (const uint16_t *)(blk + 2);
            float d = kvg_d(blk);
            const float *qb = q + 32 * b;
            uint16_t u[8];
            for (int i = 0; i < 8; i++)
                u[i] = qs[i];
            for (int e = 0; e < 16; e++) /* low nibbles: elements 0..15 */
                s = fmaf(qb[e], __fmul_rn(d, (float)((int)((u[e / 2] >> (8 * (e & 1))) & 15) - 8)),
                         s);
            for (int e = 0; e < 16; e++) /* high nibbles: 16..31 */
                s = fmaf(qb[16 + e],
                         __fmul_rn(d, (float)((int)((u[e / 2] >> (8 * (e & 1) + 4)) & 15) - 8)),
                         s);
        }
    } else { /* AFFINE */
        const float *sc = kva_scales(row, f);
        int ng = hd / f.group;
        for (int g = 0; g < ng; g++) {
            float sg = sc[g], bg = sc[ng + g];
            for (int j = 0; j < f.group; j++) {
                int i = g * f.group + j;
                s = fmaf(q[i], __fadd_rn(__fmul_rn(sg, (float)kva_q(row, i, f.bits)), bg), s);
            }
        }
    }
    return s;
}

/* ---- storing records: one warp a row ----------------------------------------------- */

/* ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref (hr_quant_gguf_row):
 * lane e holds element e of each block of 32 */
static __device__ void kvg_store(uint8_t *row, const float *x, int hd, int t) {
    int lane = threadIdx.x & 31;
    bool q8 = t == HR_DTYPE_Q8_0;
    for (int b = 0; b < hd / 32; b++) {
        uint8_t *blk = row + (size_t)b * (q8 ? 34 : 18);
        float v = x[32 * b + lane], av = fabsf(v), amax = warp_max(av);
        if (q8) {
            float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            if (lane == 0)
                *(uint16_t *)blk = kv_f2h(d);
            blk[2 + lane] = (uint8_t)(int8_t)roundf(__fmul_rn(v, id));
        } else {
            /* the signed value of the first element of the largest |x| */
            unsigned first = __ballot_sync(0xffffffffu, av == amax);
            float mx = __shfl_sync(0xffffffffu, v, first ? __ffs(first) - 1 : 0);
            if (!(amax > 0.0f))
                mx = 0.0f;
            float d = __fdiv_rn(mx, -8.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            int a = (int)(int8_t)(int)__fadd_rn(__fmul_rn(v, id), 8.5f);
            a = a < 15 ? a : 15;
            int c = __shfl_down_sync(0xffffffffu, a, 16);
            if (lane == 0)
                *(uint16_t *)blk = kv_f2h(d);
            if (lane < 16)
                blk[2 + lane] = (uint8_t)(a | c << 4);
        }
    }
}

/* mlx's affine quantization (hr_quant_affine_row) into a record; sq: hd
 * bytes of this warp's shared scratch */
static __device__ void kva_store(uint8_t *row, const float *x, const kvf &f, uint8_t *sq) {
    int lane = threadIdx.x & 31, hd = f.hd, bits = f.bits, group = f.group, ng = hd / group;
    float n_bins = (float)((1 << bits) - 1);
    float *sc = (float *)(row + (size_t)hd * (size_t)bits / 8);
    for (int g = 0; g < ng; g++) {
        const float *w = x + (size_t)g * group;
        float w_max = -INFINITY, w_min = INFINITY;
        for (int j = lane; j < group; j += 32) {
            w_max = fmaxf(w_max, w[j]);
            w_min = fminf(w_min, w[j]);
        }
        w_max = warp_max(w_max);
        w_min = warp_min(w_min);
        bool mask = fabsf(w_min) > fabsf(w_max);
        float scale = fmaxf(__fdiv_rn(__fsub_rn(w_max, w_min), n_bins), 1e-7f);
        scale = mask ? scale : -scale;
        float edge = mask ? w_min : w_max;
        float q0 = rintf(__fdiv_rn(edge, scale)), bias = 0.0f;
        if (q0 != 0.0f) {
            scale = __fdiv_rn(edge, q0);
            bias = edge;
        }
        for (int j = lane; j < group; j += 32) {
            float q = rintf(__fdiv_rn(__fsub_rn(w[j], bias), scale));
            sq[g * group + j] = (uint8_t)fminf(fmaxf(q, 0.0f), n_bins);
        }
        if (lane == 0) {
            sc[g] = scale;
            sc[ng + g] = bias;
        }
    }
    __syncwarp();
    kv_pack(row, sq, hd, bits);
    __syncwarp(); /* sq is reused by the warp's next row */
}

/* x[0..hd) (KV head `head`'s row) stored as the record at `at` of base (a
 * whole warp calls it); sq, sf: hd bytes and hd floats of the warp's shared
 * scratch */
static __device__ void kv_store_rec(void *base, const kvf &f, size_t at, int head,
                                    const float *x, uint8_t *sq, float *sf) {
    uint8_t *row = (uint8_t *)base + at;
    if (f.t == HR_DTYPE_TURBO)
        kvt_store(row, x, f, head, sq, sf);
    else if (f.t == HR_DTYPE_AFFINE)
        kva_store(row, x, f, sq);
    else
        kvg_store(row, x, f.hd, f.t);
}

#endif
