/* AVX-512 attention, one task (hr_attn_tile) at a time: up to
 * HR_ATTN_TILE_HEADS consecutive query tokens of a sequence and the query heads
 * that share one KV head (GQA), so every key and value row is loaded once
 * for all of their rows (half-precision rows are widened to f32 once). The
 * score dot products run 4 keys at a time (independent FMA chains, one
 * packed horizontal sum for the 4: hsum_avx512.h) and the output rows stay
 * in registers over the value pass. Each score and each output element is
 * computed by exactly the operations of the per-head path (dot_avx512 then
 * * scale; axpy_avx512 key by key; the softmax is hr_softmax, this ISA's
 * hr__softmax_avx512 for both), so the results are bit-identical to it.
 * The softmax, the KV stores' conversion (to_half), the exponential and
 * the sampler's reductions over the vocabulary (max, exp_sum) live here
 * too. */
#include "kernels/cpu/exp_neg.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/hsum_avx512.h"
#include "kernels/cpu/ops.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Floats between the rows of widened K/V: one cache line more than the
 * longest head, so that rows are not 4 KiB apart (a store to one row and a
 * load from the next would alias in the store buffer and stall). */
#define WROW (HR_ATTN_MAX_HEAD_DIM + 16)

/* prefetch `bytes` from element i of a KV layer of dtype DT, into L2: into
 * L1 (T0) the prefetches stalled the loop waiting for fill buffers, and
 * decode attention read 8% slower (one thread, 4096 keys, f16) */
AI void pf(const void *base, size_t i, size_t bytes, const hr_dtype DT) {
    const char *p = (const char *)base + i * (DT == HR_DTYPE_F32 ? 4 : 2);
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T1);
}

/* A task's keys are walked in block runs: the positions [j, hi) that lie
 * in j's block are its slots [*s, e) (e is returned). A head's slots of a
 * block are contiguous, so slot s is element base + s x hd of the layer:
 * the block table is read once a run, not divided into per key (decode
 * attention from L2, one thread: 24.0 -> 27.1 GB/s at 16/8 heads of 128,
 * 12.0 -> 14.3 at 32/8 of 64). The next block of the same head is a block
 * stride away (other heads between), where the hardware prefetcher starts
 * over, so each key prefetches its slot of the next block (next; NO_NEXT
 * when the run reaches hi), one block of rows ahead: 8 KiB of f16 at
 * head_dim 128. Without it decode attention read 20% slower from memory;
 * 4 KiB ahead (as before) or two blocks read as fast. */
#define NO_NEXT SIZE_MAX
AI int kv_run(const int32_t *bt, size_t stride, int bs, int kvh, int hd, int j, int hi,
              size_t *base, size_t *next, int *s) {
    int b = j / bs, e = hi - b * bs < bs ? hi - b * bs : bs;
    size_t head = (size_t)kvh * bs * hd;
    *s = j - b * bs;
    *base = (size_t)bt[b] * stride + head;
    *next = e == bs && (b + 1) * bs < hi ? (size_t)bt[b + 1] * stride + head : NO_NEXT;
    return e;
}

/* The first block run of the stream read after a pass (the values after
 * the keys, the next task's keys after the values): its rows are
 * prefetched over the pass's last run, so that the next pass does not
 * start cold */
typedef struct kv_cont {
    const void *base;
    size_t at;        /* element of its first row */
    int rows;         /* rows hd apart */
} kv_cont;

AI kv_cont cont_of(const void *base, const int32_t *bt, size_t stride, int bs, int kvh, int hd,
                   int lo, int hi) {
    size_t at, next;
    int s, e = kv_run(bt, stride, bs, kvh, hd, lo, hi, &at, &next, &s);
    return (kv_cont){base, at + (size_t)s * hd, e - s};
}

/* key i of the m keys of a pass's last run: its share of c's rows (NULL:
 * none) */
AI void pf_cont(const kv_cont *c, int i, int m, int hd, const hr_dtype DT) {
    if (c)
        for (int r = c->rows * i / m; r < c->rows * (i + 1) / m; r++)
            pf(c->base, c->at + (size_t)r * hd, (size_t)hd * (DT == HR_DTYPE_F32 ? 4 : 2), DT);
}

/* into L1 (T0): `bytes` from element i, the rows NEAR keys on in the same
 * block run, which pf brought into L2 a block before. Qwen3-0.6B Q4_0 decode
 * tokens took 0-3.2% less time (one process, the switch flipped every
 * token, medians of 64 tokens a side, 9 runs, both parities: 1.7% median;
 * 8 or 2 keys on the same), Q4_K 1.3-1.9%, Llama-3.2-1B 0.5-1.6%. */
#define NEAR 4
AI void pf0(const void *base, size_t i, size_t bytes, const hr_dtype DT) {
    const char *p = (const char *)base + i * (DT == HR_DTYPE_F32 ? 4 : 2);
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T0);
}

/* 16 values from element i of a KV layer of dtype DT, as f32 (exact) */
AI __m512 ld(const void *base, size_t i, const hr_dtype DT) {
    const uint16_t *h = (const uint16_t *)base + i;
    switch (DT) {
    case HR_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
    case HR_DTYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)h)), 16));
    default:
        return _mm512_loadu_ps((const float *)base + i);
    }
}

/* The V rows of a value pass: key j is position start + j of KV head kvh
 * in the pool (through the block table, in the pool's dtype), or with FLAT
 * row j of vf, f32 rows WROW apart (widened once for
 * several tokens) */
typedef struct vrows {
    const void *v;
    const int32_t *bt;
    size_t stride;
    int bs, kvh, hd, start;
    const float *vf;
} vrows;

/* out[g][c .. c + 16W) = sum_j p_gj v_j[c ..] for GN heads: constant GN, W
 * keep the accumulators in registers; they start at 0, or unless first
 * from out (the sums of earlier keys: a stored f32 reloads exact, so the
 * operations and their order are those of one pass over all the keys) */
AI void pv_tile(const float *sc, size_t ldsc, int n, const vrows *V, int c, float *out,
                bool first, const kv_cont *cont, const int GN, const int W, const hr_dtype DT,
                const int FLAT) {
    size_t stride = V->stride, es = DT == HR_DTYPE_F32 ? 4 : 2;
    int bs = V->bs, kvh = V->kvh, hd = V->hd, start = V->start;
    const void *base = FLAT ? (const void *)V->vf : V->v;
    __m512 o[4][8];
    UNROLL
    for (int g = 0; g < GN; g++)
        UNROLL
        for (int i = 0; i < W; i++)
            o[g][i] = first ? _mm512_setzero_ps()
                            : _mm512_loadu_ps(out + (size_t)g * hd + c + 16 * i);
    for (int j = 0; j < n;) {
        size_t at = 0, next = NO_NEXT;
        int s = 0, e = n;
        if (!FLAT)
            e = kv_run(V->bt, stride, bs, kvh, hd, start + j, start + n, &at, &next, &s);
        for (int s0 = s; s < e; s++, j++) {
            size_t vj = FLAT ? (size_t)j * WROW + c : at + (size_t)s * hd + c;
            if (!FLAT && s + NEAR < e)
                pf0(base, at + (size_t)(s + NEAR) * hd + c, (size_t)W * 16 * es, DT);
            if (!FLAT && next != NO_NEXT)
                pf(base, next + (size_t)s * hd + c, (size_t)W * 16 * es, DT);
            else if (!FLAT)
                pf_cont(cont, s - s0, e - s0, hd, DT);
            __m512 vv[8];
            UNROLL
            for (int i = 0; i < W; i++)
                vv[i] = ld(base, vj + 16 * i, FLAT ? HR_DTYPE_F32 : DT);
            UNROLL
            for (int g = 0; g < GN; g++) {
                __m512 p = _mm512_set1_ps(sc[(size_t)g * ldsc + j]);
                UNROLL
                for (int i = 0; i < W; i++)
                    o[g][i] = _mm512_fmadd_ps(p, vv[i], o[g][i]);
            }
        }
    }
    UNROLL
    for (int g = 0; g < GN; g++)
        UNROLL
        for (int i = 0; i < W; i++)
            _mm512_storeu_ps(out + (size_t)g * hd + c + 16 * i, o[g][i]);
}

/* e^x for x <= 0 (softmax arguments; -inf gives 0), as exp_neg.h says,
 * times 2^n by scalef (exact). Within 2 ulp of expf where that is a normal
 * float; 0 below (x < ln FLT_MIN), where expf is denormal: a denormal
 * result costs a microcode assist per lane, and the sampler's weights over
 * a vocabulary filtered to -inf ran 5x slower for it. */
AI __m512 exp_neg(__m512 x) {
    __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(HR_EXP_MIN), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(HR_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(HR_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(HR_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(hr_exp_taylor[0]);
    UNROLL
    for (int i = 1; i < HR_EXP_TERMS; i++)
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(hr_exp_taylor[i]));
    return _mm512_maskz_scalef_ps(normal, p, n);
}

/* 16 floats to F16 (saturating) or BF16, round to nearest even: vcvtps2ph,
 * and for BF16 the integer rounding of hr_f32_to_bf16 (vcvtneps2bf16 would
 * flush denormals) */
AI __m256i half16(__m512 x, const hr_dtype t) {
    if (t == HR_DTYPE_F16) {
        x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-65504.0f)), _mm512_set1_ps(65504.0f));
        return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    __m512i u = _mm512_castps_si512(x);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                                      _mm512_set1_epi32(1))));
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

void hr__to_half_avx512(uint16_t *dst, const float *x, int n, hr_dtype t) {
    int i = 0;
    if (t == HR_DTYPE_F16)
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i),
                                half16(_mm512_loadu_ps(x + i), HR_DTYPE_F16));
    else
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i),
                                half16(_mm512_loadu_ps(x + i), HR_DTYPE_BF16));
    if (i < n)
        hr__to_half_scalar(dst + i, x + i, n - i, t);
}

void hr__softmax_avx512(float *x, int n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
    mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, x + i));
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(x + i, e);
        sum = _mm512_add_ps(sum, e);
    }
    __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), m));
    _mm512_mask_storeu_ps(x + i, tail, e);
    sum = _mm512_mask_add_ps(sum, tail, sum, e);
    __m512 inv = _mm512_set1_ps(1.0f / hr_hsum_avx512(sum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    _mm512_mask_storeu_ps(x + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), inv));
}

/* silu(g) = g sigmoid(g), with e = e^-|g| <= 1 (exp_neg): sigmoid is
 * 1 / (1 + e) for g >= 0 and e / (1 + e) below, which never overflows; a
 * NaN g stays NaN through the product */
void hr__silu_mul_avx512(float *g, const float *u, int n) {
    __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
        __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        __m512 s = _mm512_div_ps(_mm512_mask_mov_ps(one, neg, e), _mm512_add_ps(one, e));
        __m512 y = _mm512_mul_ps(x, s);
        if (u)
            y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(k, u + i));
        _mm512_mask_storeu_ps(g + i, k, y);
    }
}

/* max_ps(x, acc) returns acc where x is NaN: NaNs never win */
float hr__max_avx512(const float *x, int n) {
    __m512 a = _mm512_set1_ps(-INFINITY), b = a;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a = _mm512_max_ps(_mm512_loadu_ps(x + i), a);
        b = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), b);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        a = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), a);
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
}

/* e^((x - m) s) in float (exp_neg), summed in double, 16 at a time */
double hr__exp_sum_avx512(float *dst, const float *x, int n, float m, float s) {
    __m512 mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(s);
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv), sv);
        __m512 e = _mm512_maskz_mov_ps(k, exp_neg(d));
        if (dst)
            _mm512_mask_storeu_ps(dst + i, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* One token's outputs from its probabilities s (row g at s + g * ldsc)
 * over n keys: up to 4 heads x 64 columns (16 at the tail) in registers,
 * key by key (pv_tile); 1 or 2 heads x 128 columns, so that a head_dim of
 * 128 reads each V row in one pass instead of half a row in each of two
 * (one thread, 4096 f16 keys, groups of 2: 8% faster) */
AI void pv(const float *s, size_t ldsc, int n, const vrows *V, int G, float *out, bool first,
           const kv_cont *cont, const hr_dtype DT, const int FLAT) {
    int hd = V->hd;
    for (int g0 = 0; g0 < G; g0 += 4) {
        const float *sg = s + (size_t)g0 * ldsc;
        float *o = out + (size_t)g0 * hd;
        int gn = G - g0 < 4 ? G - g0 : 4;
        for (int c = 0; c < hd;) {
            int W = hd - c >= 128 && gn <= 2 ? 8 : hd - c >= 64 ? 4 : 1;
#define PV(GN, W_) pv_tile(sg, ldsc, n, V, c, o, first, g0 || c ? NULL : cont, GN, W_, DT, FLAT)
            switch (gn * 16 + W) {
            case 24: PV(1, 8); break;
            case 40: PV(2, 8); break;
            case 20: PV(1, 4); break;
            case 36: PV(2, 4); break;
            case 52: PV(3, 4); break;
            case 68: PV(4, 4); break;
            case 17: PV(1, 1); break;
            case 33: PV(2, 1); break;
            case 49: PV(3, 1); break;
            default: PV(4, 1); break;
            }
#undef PV
            c += 16 * W;
        }
    }
}

#define VCHUNK 16 /* keys whose V rows are widened at once for several tokens */

/* the query of row r of a task: token r / G, head r % G of the group */
AI const float *qrow(const hr_attn_tile *T, int r) {
    return T->q + (size_t)(r / T->G) * T->ldq + (size_t)(r % T->G) * T->hd;
}

/* lanes 0, 4, 8 and 12 of v (hr_hsum4_avx512's sums) to dst[0..4): one
 * vpermps and a 16-byte store, where vcompressps to memory is several uops */
AI void store4(float *dst, __m512 v) {
    const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(dst, _mm512_castps512_ps128(_mm512_permutexvar_ps(lanes, v)));
}

/* The scores of 4 consecutive keys of a block run (element offset k0 and
 * the next three, hd apart) for R rows (row r's query at qr[r]), each
 * key's row loaded and widened once, in registers, for all of them; row
 * r's into sc + r * N, 4 from col. HD is the head_dim when it is a
 * compile-time constant (0: T->hd): the four rows are then one address and
 * immediate offsets, and the loop unrolls. With hd in a register gcc kept
 * the four row addresses in vector registers, one vmovq each per 16
 * columns, and the key pass took 1.8x the time of the value pass.
 * near and ahead (NULL: none) are 4 rows' bytes (4 hd of DT) to prefetch,
 * into L1 and into L2, a line or more of each per 16 columns: issued in
 * one burst before the 4 keys, their 32 lines (head_dim 128, f16) stalled
 * the loop on the L1 fill buffers, and decode tokens took 0.5-1.4% more
 * time (Qwen3-0.6B Q4_0 and Q8_0, one process, the switch flipped every
 * token, medians of 64 tokens a side, both parities, 8 runs; spreading
 * the value pass's 8 lines a key likewise changed nothing). */
AI void scores4(const hr_attn_tile *T, const float *const *qr, size_t k0, float *sc, size_t N,
                size_t col, __m512 scale, const char *near, const char *ahead, const int R,
                const int HD, const hr_dtype DT) {
    const int hd = HD ? HD : T->hd, es = DT == HR_DTYPE_F32 ? 4 : 2;
    __m512 acc[4][4];
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int i = 0; i < 4; i++)
            acc[r][i] = _mm512_setzero_ps();
    UNROLL
    for (int t = 0; t < hd; t += 16) {
        __m512 kv[4];
        UNROLL
        for (int l = 0; l < es; l++) { /* 4 rows' bytes / (hd / 16) steps */
            if (near)
                _mm_prefetch(near + (size_t)t * 4 * es + 64 * l, _MM_HINT_T0);
            if (ahead)
                _mm_prefetch(ahead + (size_t)t * 4 * es + 64 * l, _MM_HINT_T1);
        }
        UNROLL
        for (int i = 0; i < 4; i++)
            kv[i] = ld(T->k, k0 + (size_t)i * hd + t, DT);
        UNROLL
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_loadu_ps(qr[r] + t);
            UNROLL
            for (int i = 0; i < 4; i++)
                acc[r][i] = _mm512_fmadd_ps(x, kv[i], acc[r][i]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        store4(sc + (size_t)r * N + col,
               _mm512_mul_ps(hr_hsum4_avx512(acc[r][0], acc[r][1], acc[r][2], acc[r][3]), scale));
}

/* The scores of one key (element offset kj) for every row of the task,
 * into column col */
AI void score1(const hr_attn_tile *T, size_t kj, float *sc, size_t N, size_t col,
               const hr_dtype DT) {
    int hd = T->hd, G = T->G;
    for (int r = 0; r < T->nq * G; r++) {
        const float *qr = qrow(T, r);
        __m512 acc = _mm512_setzero_ps();
        for (int t = 0; t < hd; t += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(qr + t), ld(T->k, kj + t, DT), acc);
        sc[(size_t)r * N + col] = hr_hsum_avx512(acc) * T->scale;
    }
}

/* Rows r0 .. r0 + RN - 1 of scores4_wide: the 4 keys' f32 rows at kr[i],
 * RN x 4 chains in registers, so that each key load serves RN rows and
 * each query load 4 keys */
AI void rows4(const hr_attn_tile *T, int r0, const float *const *kr, float *sc, size_t N,
              size_t col, __m512 scale, const int RN) {
    int hd = T->hd;
    const float *qr[4];
    for (int r = 0; r < RN; r++)
        qr[r] = qrow(T, r0 + r);
    __m512 acc[4][4];
    for (int r = 0; r < RN; r++)
        for (int i = 0; i < 4; i++)
            acc[r][i] = _mm512_setzero_ps();
    for (int t = 0; t < hd; t += 16) {
        __m512 kv[4];
        for (int i = 0; i < 4; i++)
            kv[i] = _mm512_loadu_ps(kr[i] + t);
        for (int r = 0; r < RN; r++) {
            __m512 qv = _mm512_loadu_ps(qr[r] + t);
            for (int i = 0; i < 4; i++)
                acc[r][i] = _mm512_fmadd_ps(qv, kv[i], acc[r][i]);
        }
    }
    for (int r = 0; r < RN; r++)
        store4(sc + (size_t)(r0 + r) * N + col,
               _mm512_mul_ps(hr_hsum4_avx512(acc[r][0], acc[r][1], acc[r][2], acc[r][3]), scale));
}

/* More than 4 rows (several tokens, or a GQA group over 4), the 4 keys
 * of scores4 (k0 and the next three, hd apart): half-precision keys
 * widened once into kf (a conversion costs two uops), then the rows' 4
 * scores 4 rows at a time (rows4). One row at a time, every FMA had a load
 * of its own: the demo model's 16k prefill with f16 KV ran 1302-1348
 * tokens/s against 1580-1619 now (2 threads, Zen 5). */
AI void scores4_wide(const hr_attn_tile *T, size_t k0, float *sc, size_t N, size_t col,
                     __m512 scale, const hr_dtype DT) {
    int hd = T->hd, R = T->nq * T->G;
    bool widen = DT != HR_DTYPE_F32;
    _Alignas(64) float kf[4][WROW];
    const float *kr[4];
    for (int i = 0; i < 4; i++) {
        kr[i] = widen ? kf[i] : (const float *)T->k + k0 + (size_t)i * hd;
        for (int t = 0; widen && t < hd; t += 16)
            _mm512_store_ps(kf[i] + t, ld(T->k, k0 + (size_t)i * hd + t, DT));
    }
    int r = 0;
    for (; r + 4 <= R; r += 4)
        rows4(T, r, kr, sc, N, col, scale, 4);
    switch (R - r) {
    case 3: rows4(T, r, kr, sc, N, col, scale, 3); break;
    case 2: rows4(T, r, kr, sc, N, col, scale, 2); break;
    case 1: rows4(T, r, kr, sc, N, col, scale, 1); break;
    default: break;
    }
}

/* The scores of R rows over the keys [lo, hi), block run by block run
 * (kv_run): 4 keys at a time (scores4 up to 4 rows, scores4_wide above),
 * each prefetching its rows of the next block, then the run's last keys
 * one at a time. HD: as scores4. */
AI void scores_runs(const hr_attn_tile *T, int lo, int hi, float *sc, size_t N, __m512 scale,
                    int R, const int HD, const kv_cont *cont, const hr_dtype DT) {
    const int hd = HD ? HD : T->hd;
    size_t es = DT == HR_DTYPE_F32 ? 4 : 2;
    const float *qr[4];
    for (int r = 0; r < R && r < 4; r++)
        qr[r] = qrow(T, r);
    for (int j = lo; j < hi;) {
        size_t at, next;
        int s, e = kv_run(T->bt, T->stride, T->bs, T->kvh, hd, j, hi, &at, &next, &s), s0 = s;
        for (; s + 4 <= e; s += 4, j += 4) {
            size_t k0 = at + (size_t)s * hd; /* the 4 keys' rows are hd apart */
            /* the rows NEAR keys on, into L1; the 4 keys' slots of the next
             * block, into L2 (scores4 spreads them over its work) */
            const char *near = NULL, *ahead = NULL;
            if (s + 4 + NEAR <= e)
                near = (const char *)T->k + (k0 + (size_t)NEAR * hd) * es;
            if (next != NO_NEXT)
                ahead = (const char *)T->k + (next + (size_t)s * hd) * es;
            else
                for (int i = 0; i < 4; i++)
                    pf_cont(cont, s + i - s0, e - s0, hd, DT);
            if (R > 4) {
                if (near)
                    pf0(T->k, k0 + (size_t)NEAR * hd, (size_t)4 * hd * es, DT);
                if (ahead)
                    pf(T->k, next + (size_t)s * hd, (size_t)4 * hd * es, DT);
            }
            size_t col = (size_t)(j - lo);
            switch (R) {
            case 1: scores4(T, qr, k0, sc, N, col, scale, near, ahead, 1, HD, DT); break;
            case 2: scores4(T, qr, k0, sc, N, col, scale, near, ahead, 2, HD, DT); break;
            case 3: scores4(T, qr, k0, sc, N, col, scale, near, ahead, 3, HD, DT); break;
            case 4: scores4(T, qr, k0, sc, N, col, scale, near, ahead, 4, HD, DT); break;
            default: scores4_wide(T, k0, sc, N, col, scale, DT); break;
            }
        }
        for (; s < e; s++, j++) {
            if (next == NO_NEXT)
                pf_cont(cont, s - s0, e - s0, hd, DT);
            score1(T, at + (size_t)s * hd, sc, N, (size_t)(j - lo), DT);
        }
    }
}

/* Scores of the task's rows (token i, head g: row i * G + g of sc, N wide,
 * column j - lo for position j) over the span [lo, hi) of all its tokens,
 * 4 keys at a time: each key row is loaded once for every query row, and a
 * score is the same operations whatever the keys beside it (hsum_avx512.h),
 * so the columns outside a token's own range are merely unused. Then each
 * row's softmax over its range and its outputs. */
AI void heads(const hr_attn_tile *T, const hr_dtype DT) {
    const int32_t *bt = T->bt;
    const void *v = T->v;
    size_t stride = T->stride, es = DT == HR_DTYPE_F32 ? 4 : 2;
    int bs = T->bs, kvh = T->kvh, hd = T->hd, G = T->G, nq = T->nq;
    int lo = T->start[0], hi = T->start[0] + T->n[0];
    for (int i = 1; i < nq; i++) {
        lo = T->start[i] < lo ? T->start[i] : lo;
        hi = T->start[i] + T->n[i] > hi ? T->start[i] + T->n[i] : hi;
    }
    size_t N = (size_t)(hi - lo);
    float *sc = T->sc;
    __m512 scale = _mm512_set1_ps(T->scale);
    /* up to 4 rows (decode with GQA groups up to 4): each key widened once
     * in registers for all of them (scores4); more rows: half-precision
     * keys widened once per 4 into kf (a conversion costs two uops). Values
     * are widened once for several tokens; for one, pv widens each V row in
     * registers for all its heads. */
    int R = nq * G;
    bool widen_v = DT != HR_DTYPE_F32 && nq > 1;
    kv_cont vc = cont_of(v, bt, stride, bs, kvh, hd, lo, hi);
    /* head_dim 64 and 128 (most models) as constants for scores4 */
    if (hd == 128)
        scores_runs(T, lo, hi, sc, N, scale, R, 128, &vc, DT);
    else if (hd == 64)
        scores_runs(T, lo, hi, sc, N, scale, R, 64, &vc, DT);
    else
        scores_runs(T, lo, hi, sc, N, scale, R, 0, &vc, DT);
    for (int i = 0; i < nq; i++)
        for (int g = 0; g < G; g++) {
            float *s = sc + (size_t)(i * G + g) * N + (T->start[i] - lo);
            if (T->softcap > 0)
                hr_softcap(s, T->n[i], T->softcap);
            hr_softmax(s, T->n[i]);
        }
    if (!widen_v) {
        /* the last token's value pass prefetches the next task's keys */
        kv_cont kc = {0};
        if (T->next_kvh >= 0)
            kc = cont_of(T->k, bt, stride, bs, T->next_kvh, hd, lo, hi);
        for (int i = 0; i < nq; i++) {
            vrows V = {v, bt, stride, bs, kvh, hd, T->start[i], NULL};
            pv(sc + (size_t)i * G * N + (T->start[i] - lo), N, T->n[i], &V, G,
               T->out + (size_t)i * T->ldq, true, i == nq - 1 && kc.base ? &kc : NULL, DT, 0);
        }
        return;
    }
    /* half-precision values, likewise widened once, up to VCHUNK keys of a
     * block run at a time, each token carrying its sums in out from chunk to
     * chunk */
    _Alignas(64) float vf[VCHUNK][WROW];
    for (int c0 = lo, m; c0 < hi; c0 += m) {
        size_t at, next;
        int s0, e = kv_run(bt, stride, bs, kvh, hd, c0, hi, &at, &next, &s0);
        m = e - s0 < VCHUNK ? e - s0 : VCHUNK;
        for (int jj = 0; jj < m; jj++) {
            size_t vj = at + (size_t)(s0 + jj) * hd;
            if (next != NO_NEXT)
                pf(v, next + (size_t)(s0 + jj) * hd, (size_t)hd * es, DT);
            for (int t = 0; t < hd; t += 16)
                _mm512_store_ps(vf[jj] + t, ld(v, vj + t, DT));
        }
        for (int i = 0; i < nq; i++) {
            int a = T->start[i] > c0 ? T->start[i] : c0;
            int b = T->start[i] + T->n[i] < c0 + m ? T->start[i] + T->n[i] : c0 + m;
            if (a >= b)
                continue;
            vrows V = {.hd = hd, .vf = vf[a - c0]};
            pv(sc + (size_t)i * G * N + (a - lo), N, b - a, &V, G, T->out + (size_t)i * T->ldq,
               a == T->start[i], NULL, HR_DTYPE_F32, 1);
        }
    }
}

void hr__attn_heads_avx512(const hr_attn_tile *t) {
    switch (t->kv_dtype) {
    case HR_DTYPE_F16:
        heads(t, HR_DTYPE_F16);
        return;
    case HR_DTYPE_BF16:
        heads(t, HR_DTYPE_BF16);
        return;
    default:
        heads(t, HR_DTYPE_F32);
        return;
    }
}
