/* CPU kernel table: one row per ISA, picked by cpuid at run time.
 * Every SIMD kernel has a scalar reference it is tested against
 * (tests/kernels/). HEARTH_ISA=scalar|avx2|avx512 forces a lower path. */
#ifndef HR_KERNELS_CPU_H
#define HR_KERNELS_CPU_H

#include "core/tensor.h"
#include "hearth.h"

#include <stdint.h>

struct hr_turbo_kv; /* kernels/cpu/turbo.h */

typedef enum hr_isa { HR_ISA_SCALAR, HR_ISA_AVX2, HR_ISA_AVX512, HR_ISA_COUNT } hr_isa;

/* y[i*ldy + j] = dot(x[i*ldx .. +k], w row j) for i < n, m0 <= j < m1,
 * where w is a 2-D weight (m, k) of the kernel's dtype, k = w->shape[1]. */
typedef void (*hr_gemm_fn)(float *y, int ldy, const float *x, int ldx, int n,
                           const hr_tensor *w, int m0, int m1);

/* Activations quantized for the integer path (qdot.h): row i of k values
 * is q[i*k ..] and d4, c4, s4[i*k/4 ..]. */
typedef struct hr_qact {
    const int8_t *q;
    const float *d4, *s4;
    const int32_t *c4;
    int k;
} hr_qact;

/* The same product as hr_gemm_fn, with the activations quantized. */
typedef void (*hr_gemm_i8_fn)(float *y, int ldy, const hr_qact *x, int n,
                              const hr_tensor *w, int m0, int m1);

/* Activations quantized for the x16 kernels (qdot.h), as `digits` int8
 * planes (1: int8; 3: 24-bit): row i's plane j is q[(i*digits + j)*k ..]
 * with c[(i*digits + j)*k/group ..]; d[i*k/block ..]; block 32: s[i*k/32
 * ..]; block 256 (the K-quants' activations, int8): sd[i*k/16 ..], s
 * NULL. */
typedef struct hr_qact32 {
    const int8_t *q;
    const float *d, *s;
    const int32_t *c;
    const int8_t *sd;
    int k, group, digits, block;
} hr_qact32;

/* The product for weights in the x16 layout (x16.h); m0, m1 multiples of 16. */
typedef void (*hr_gemm_x16_fn)(float *y, int ldy, const hr_qact32 *x, int n,
                               const hr_tensor *w, int m0, int m1);

/* An attention task: nq consecutive query tokens of one sequence (block
 * table bt) and the G query heads that share KV head kvh. Token i's rows
 * are q + i * ldq + g * hd (g < G, hd a multiple of 16), its outputs at
 * the same offsets of out; it attends to positions [start[i], start[i] +
 * n[i]). The key/value of position p is at element bt[p / bs] * stride +
 * (kvh * bs + p % bs) * hd of k/v, in kv_dtype (F32, F16, BF16). sc holds
 * nq * G * (the tasks' span of positions) floats. */
typedef struct hr_attn_tile {
    const float *q;
    float *out;
    int ldq, nq, G, hd;
    const void *k, *v;
    hr_dtype kv_dtype;
    size_t stride;
    int bs, kvh;
    int next_kvh; /* this thread's next task: KV head next_kvh over the same
                   * keys (its first keys are prefetched); -1: none */
    const int32_t *bt;
    const int *start, *n;
    float scale, softcap;
    float *sc;
} hr_attn_tile;

typedef struct hr_cpu_kernels {
    const char *name;
    int math; /* which bits its kernels give, for the model's fingerprint (a
               * prompt cache's rows are reused only where they are the
               * same): distinct for tables whose results differ */
    hr_gemm_fn gemm[HR_DTYPE_COUNT]; /* NULL for unsupported weight dtypes */
    hr_gemm_i8_fn gemm_i8[HR_DTYPE_COUNT]; /* integer path: GGUF types */
    hr_gemm_x16_fn gemm_x16[HR_DTYPE_COUNT]; /* x16 layout; NULL: not repacked here */
    /* hr_qact32_row (qdot.h), bit-identical on every ISA that has gemm_x16 */
    void (*qact32_row)(const float *x, int k, int off, int group, int8_t *q, float *d,
                       int32_t *c, float *s);
    /* hr_qactk_row (qdot.h: the K-quants' activations), the same */
    void (*qactk_row)(const float *x, int k, int off, int group, int8_t *q, float *d,
                      int32_t *c, int8_t *sd);
    /* hr_qact24_row (qdot.h: 3 digits), the same */
    void (*qact24_row)(const float *x, int k, int off, int group, int8_t *q, float *d,
                       int32_t *c, float *s);
    /* hr_qact_row (qdot.h), bit-identical on every ISA */
    void (*qact_row)(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                     float *s4);
    /* One attention task (hr_attn_tile) over the paged KV cache,
     * bit-identical per query row to dot, softmax and axpy per head on the
     * f32 values of K/V. NULL: attention.c runs the same task through attn_dots
     * and attn_axpys (the same bits). */
    void (*attn_heads)(const hr_attn_tile *t);
    /* n floats rounded to F16 (values beyond +-65504 saturate) or BF16,
     * to nearest even; the KV cache's stores. Bit-identical on every ISA
     * except for NaN payloads. */
    void (*to_half)(uint16_t *dst, const float *x, int n, hr_dtype t);
    /* n F16 or BF16 values widened to f32 (exact, every ISA) */
    void (*widen)(float *dst, const uint16_t *src, size_t n, hr_dtype t);
    /* A quantized KV row (kvquant.h) dequantized into y[0..hd) (groups of
     * 32 or more); the scalar reference's bits on every ISA. */
    void (*kvq_load)(float *y, const void *src, int hd, int bits, int group);
    /* Attention read from quantized KV records in place: kvquant.h's
     * hr__kvq_dots_scalar (its query rows prepared by hr_kvq_prep) and
     * hr__kvq_axpys_scalar, their bits on every ISA. */
    void (*kvq_dots)(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                     const void *rec, size_t rb, int nk, int hd, int bits, int group,
                     float scale);
    void (*kvq_axpys)(float *o, float *bias, const float *p, size_t ldp, int nr, const void *rec,
                      size_t rb, int nv, int hd, int bits, int group);
    /* The same for llama.cpp's Q8_0 / Q4_0 cache rows: kvquant.h's
     * hr__kvg_dots_scalar and hr__kvg_axpys_scalar, their bits on every ISA. */
    void (*kvg_dots)(float *sc, size_t ldsc, const float *q, int nr, const void *rec, size_t rb,
                     int nk, int hd, hr_dtype t, float scale);
    void (*kvg_axpys)(float *o, const float *p, size_t ldp, int nr, const void *rec, size_t rb,
                      int nv, int hd, hr_dtype t);
    /* The same for TurboQuant rows, in the rotated basis: turbo.h's
     * hr__turbo_dots_scalar and hr__turbo_axpys_scalar, their bits on every ISA. */
    void (*turbo_dots)(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                       size_t rb, int nk, const struct hr_turbo_kv *L, float scale);
    void (*turbo_axpys)(float *o, const float *p, size_t ldp, int nr, const void *rec,
                        size_t rb, int nv, const struct hr_turbo_kv *L);
    /* TurboQuant's row operations (turbo.h: hr__turbo_rotate_scalar,
     * hr__turbo_unrotate_scalar, hr__turbo_encode_scalar), their bits on
     * every ISA */
    void (*turbo_rotate)(float *y, const float *x, const float *signs, int n);
    void (*turbo_unrotate)(float *x, const float *y, const float *signs, int n);
    double (*turbo_encode)(uint8_t *q, const float *y, float s, const float *c, int dim,
                           int bits);
    /* hr_softmax (ops.h), in place */
    void (*softmax)(float *x, int n);
    /* hr_silu_mul (ops.h): g[i] = silu(g[i]) u[i] (u NULL: 1), within 5e-7
     * relative of the same in double (scalar: expf; AVX2, AVX-512: the
     * softmax's exponential); an element's value does not depend on where
     * it falls in g (batch invariance) */
    void (*silu_mul)(float *g, const float *u, int n);
    /* The largest of x[0..n), NaNs ignored; -inf when there is none. The
     * same value on every ISA. */
    float (*max)(const float *x, int n);
    /* The first index of max(x, n), 0 when there is none (n == 0 or every
     * value NaN): greedy decoding's pick. The same index on every ISA. */
    int32_t (*argmax)(const float *x, int n);
    /* hr_rmsnorm (ops.h): the sum of squares in double over 8 chains
     * (element i in chain i % 8, the tail then the chains added in order;
     * each product is exact in double, so fused or not is the same), then
     * y = (x r)(w + offset) in float. Bit-identical on every ISA. */
    void (*rmsnorm)(float *y, const float *x, const float *w, float offset, int d, float eps);
    /* The sum in double of e^((x[i] - m) * s) over x[0..n) (x[i] <= m or
     * -inf, no NaN, s > 0), each term also stored to dst[i] unless dst is
     * NULL (dst may be x): the sampler's normalizer and weights over the
     * vocabulary. Scalar: exp in double; vector ISAs: a float exponential
     * (within 2 ulp of e^ of the float (x[i] - m) * s; 0 where that is
     * below FLT_MIN), so within 3e-7 relative of the scalar sum. */
    double (*exp_sum)(float *dst, const float *x, int n, float m, float s);
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n); /* y += a*x */
    /* The attention of query rows over a run of K/V rows, for the pools and
     * ISAs without attn_heads (kernels/cpu/attention.c), NULL: dot and axpy one
     * row at a time, which these equal bit for bit.
     * attn_dots: sc[r * ldsc + j] = dot(q + r * hd, k + j * hd, hd) * scale
     * for r < nr, j < nk. attn_axpys: axpy(o + r * hd, p[r * ldp + j],
     * v + j * hd, hd) for j = 0, 1, .. nv - 1 in turn, for r < nr. */
    void (*attn_dots)(float *sc, size_t ldsc, const float *q, int nr, const float *k, int nk,
                      int hd, float scale);
    void (*attn_axpys)(float *o, const float *p, size_t ldp, int nr, const float *v, int nv,
                       int hd);
    /* y[j] += a[k] * x[k * ldx + j] for k = 0, 1, .. r - 1 in turn, j < n:
     * a LoRA up product's columns (kernels/cpu/lora.c). Each y[j] is the
     * same sequence of operations wherever it falls in [0, n) (vector ISAs:
     * a fused multiply-add per k, in registers across the k loop), so the
     * bits do not depend on how the columns are split. */
    void (*axpys)(float *y, int n, const float *a, int r, const float *x, size_t ldx);
} hr_cpu_kernels;

/* The process's kernels: one table (the code is compiled per ISA), the best
 * this CPU runs up to a cap ("scalar", "avx2", "avx512"), chosen once: by
 * the first hr_cpu_select (a model load: hr_model_opts.isa, else
 * $HEARTH_ISA; NULL: the best), or by the first hr_cpu before any (then
 * $HEARTH_ISA). A later select that would give another table is an error,
 * as is a name that is none of the three. Any thread. */
int hr_cpu_select(const char *cap, hr_error *err);
/* The chosen kernels. Never NULL. */
const hr_cpu_kernels *hr_cpu(void);
/* A given ISA's kernels, or NULL when this CPU cannot run them. */
const hr_cpu_kernels *hr_cpu_isa(hr_isa isa);

extern const hr_cpu_kernels hr__cpu_scalar;
extern const hr_cpu_kernels hr__cpu_avx2;
extern const hr_cpu_kernels hr__cpu_avx512;

#endif
