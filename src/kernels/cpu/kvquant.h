/* The quantized KV row: mlx-lm's QuantizedKVCache format (mx.quantize
 * over the head dimension), one record per (token, KV head) row of K or V.
 *
 * A row of hd floats is cut into hd / group groups; group g gets a scale s
 * and a bias b (f32: mx.quantize keeps its input's dtype, and hearth's K/V
 * are f32) and each element an unsigned `bits`-bit q with x ~ s * q + b,
 * computed exactly as mx.quantize (mlx/backend/cpu/quantized.cpp; the
 * quantizer is hr_quant_affine_row, kernels/cpu/quant.h):
 *   w_min, w_max over the group; n = 2^bits - 1
 *   scale = max((w_max - w_min) / n, 1e-7), negated unless |w_min| > |w_max|
 *   edge  = |w_min| > |w_max| ? w_min : w_max;  q0 = rint(edge / scale)
 *   q0 != 0: scale = edge / q0, bias = edge;  else bias = 0
 *   q = clamp(rint((x - bias) / scale), 0, n)
 * Record layout (row bytes = hd * bits / 8 + 8 * hd / group):
 *   [q: the LSB-first bit stream of the hd quants (mlx's uint32 packing)]
 *   [scales: hd / group f32][biases: hd / group f32]
 * Dequantized, element i of group g is s * q (rounded to f32), then + b
 * (rounded): two roundings, never fused, on every ISA. */
#ifndef HR_KERNELS_KVQUANT_H
#define HR_KERNELS_KVQUANT_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether mlx-lm accepts these: bits 2, 3, 4, 6, 8; group 32, 64 or 128. */
bool hr_kvq_bits_ok(int bits);
bool hr_kvq_group_ok(int group);

/* Bytes of one row record of hd elements (hd a multiple of group). */
static inline size_t hr_kvq_row_bytes(int hd, int bits, int group) {
    return (size_t)hd * (size_t)bits / 8 + 8 * (size_t)(hd / group);
}

/* Quantize hd floats of x into the record at dst (hr_kvq_row_bytes). */
void hr_kvq_store(void *dst, const float *x, int hd, int bits, int group);

/* The record at src dequantized into y[0..hd): the scalar reference
 * (hr_cpu()->kvq_load gives its bits on every ISA). */
void hr__kvq_load_scalar(float *y, const void *src, int hd, int bits, int group);
void hr__kvq_load_avx2(float *y, const void *src, int hd, int bits, int group);
void hr__kvq_load_avx512(float *y, const void *src, int hd, int bits, int group);

/* Attention over records (kvquant_attn.c has the definitions; cpu.h's
 * kvq_dots and kvq_axpys give the scalar reference's bits on every ISA).
 * The element at layout position P (identity; 4 bits: each 16 as its
 * evens, then its odds). */
static inline int hr_kvq_elem(int P, int bits) {
    if (bits != 4)
        return P;
    int w = P % 16;
    return P - w + (w < 8 ? 2 * w : 2 * (w - 8) + 1);
}
/* Query rows prepared once for kvq_dots (a task's rows see every block of
 * keys with them): row r of q (hd floats) in layout order at qp + r * hd,
 * its group sums Q_g (index order, plain float adds from 0) at qsum + r *
 * (hd / group). */
void hr_kvq_prep(float *qp, float *qsum, const float *q, int nr, int hd, int bits, int group);
/* sc[r * ldsc + j] = the score of query row r (hr_kvq_prep's qp and qsum)
 * over record rec + j * rb, times scale (r < nr, j < nk). */
void hr__kvq_dots_scalar(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                         const void *rec, size_t rb, int nk, int hd, int bits, int group,
                         float scale);
void hr__kvq_dots_avx2(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                       const void *rec, size_t rb, int nk, int hd, int bits, int group,
                       float scale);
/* For r < nr, records j = 0 .. nv - 1 in turn weighted p[r * ldp + j]:
 * the layout-order accumulators o + r * hd and the group bias sums
 * bias + r * (hd / group) (zero them before the first record). */
void hr__kvq_axpys_scalar(float *o, float *bias, const float *p, size_t ldp, int nr,
                          const void *rec, size_t rb, int nv, int hd, int bits, int group);
void hr__kvq_axpys_avx2(float *o, float *bias, const float *p, size_t ldp, int nr,
                        const void *rec, size_t rb, int nv, int hd, int bits, int group);
/* One row's accumulators into its output in element order, in place:
 * y[elem(P)] = o[P] + bias[P / group] (hd <= 1024). */
void hr_kvq_finish(float *o, const float *bias, int hd, int bits, int group);
/* The 8 lanes summed in the AVX2 order (u = t[l] + t[l + 4], ...). */
float hr__kvq_hsum8(const float *t);

/* ---- llama.cpp's cache types: rows of ggml blocks ---------------------------------
 * A Q8_0 or Q4_0 row (--cache-type-k / --cache-type-v q8_0, q4_0) is hd / 32
 * ggml blocks (quant_blocks.h: {f16 d; i8 q[32]}, 34 bytes; {f16 d; u8
 * qs[16]}, 18 bytes, byte j holding element j in its low nibble and j + 16
 * in its high one), written by ggml's reference quantizers
 * (quantize_row_q8_0_ref, quantize_row_q4_0_ref: hr_quant_gguf_row) and
 * read as ggml's dequantize_row_*: x = d * c, c = q (Q8_0) or nibble - 8
 * (Q4_0). Attention reads the blocks in place (kvggml.c defines it):
 *   score(q, row) = hsum8(T) * scale,  T[l] = fma chain over the blocks b:
 *                   T[l] = fma(d_b, A_b[l], T[l]),  A_b[l] = fma chain over
 *                   the block's elements e = l, l + 8, l + 16, l + 24:
 *                   A_b[l] = fma(q[32 b + e], c_b[e], A_b[l])
 *   out[i]       += fma(p_j * d_jb, c_j[i], out[i]), key j by key
 * (hsum8: hr__kvq_hsum8's order), within 1e-5 of attention over the
 * dequantized rows. hd is a multiple of 32. */
static inline size_t hr_kvg_row_bytes(int hd, hr_dtype t) {
    return (size_t)(hd / 32) * (t == HR_DTYPE_Q8_0 ? 34u : 18u);
}
void hr__kvg_dots_scalar(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                         size_t rb, int nk, int hd, hr_dtype t, float scale);
void hr__kvg_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                       size_t rb, int nk, int hd, hr_dtype t, float scale);
/* For r < nr, records j = 0 .. nv - 1 in turn weighted p[r * ldp + j],
 * added into o + r * hd (element order). */
void hr__kvg_axpys_scalar(float *o, const float *p, size_t ldp, int nr, const void *rec,
                          size_t rb, int nv, int hd, hr_dtype t);
void hr__kvg_axpys_avx2(float *o, const float *p, size_t ldp, int nr, const void *rec,
                        size_t rb, int nv, int hd, hr_dtype t);

/* ---- a run of records widened once (kvwide_avx2.c) ------------------------------
 * For many query rows (prefill), the formats' AVX2 output passes widen a run of n
 * records once: record j's hd codes as floats in the reference's chain
 * order (v + j * ld: position P = 8 c + l is lane l of chunk c; affine:
 * layout order; Q8_0 / Q4_0: elements; TurboQuant: centroids, segments
 * concatenated), its ns scales (s + g * n + j: each of hd / ns consecutive
 * positions, a multiple of 32: the affine group's s, the block's d,
 * TurboQuant's segment norm * rinv) and, affine only, its ns biases (b + g
 * * n + j; else NULL). n * ld <= HR_KVWIDE_FLOATS: a block of 32 records
 * up to head_dim 128 (hr__kvwide_ld), so that the runs of a block's keys
 * come in whole 16s (kvwide_avx512.c's score pass: 16 keys a register). */
#define HR_KVWIDE_FLOATS (32 * 136)
#define HR_KVWIDE_MAX (HR_KVWIDE_FLOATS / 32) /* n * ns */
typedef struct hr__kvwide {
    const float *v, *s, *b;
    int n, hd, ns;
    int ld; /* floats from a record's values to the next's: hr__kvwide_ld */
} hr__kvwide;
/* hd and 8 more: rows not a multiple of 256 bytes apart */
static inline int hr__kvwide_ld(int hd) { return hd + 8; }
/* o + r * hd (chain order) += the records weighted p[r * ldp + j] in turn,
 * and (affine, else NULL) the group bias sums bias + r * ns, for r < nr. */
void hr__kvwide_axpys_avx2(float *o, float *bias, const float *p, size_t ldp, int nr,
                           const hr__kvwide *W);
/* sc[r * ldsc + j] = the score of query row q + r * hd (in the chain order
 * of the records' values) over record j, times scale, for r < nr, j < n;
 * affine (W->b): qsum + r * ns holds the row's group sums (kvquant_attn.c's
 * Q_g), else unused. */
void hr__kvwide_dots_avx2(float *sc, size_t ldsc, const float *q, const float *qsum, int nr,
                          const hr__kvwide *W, float scale);
/* One of those two passes over the runs of a call, run after run: the
 * scores (sc non-NULL: sc, ldsc, q, qsum, scale) or the outputs (o, bias,
 * p, ldp), of nr rows; hr__kvwide_pass_avx2 runs it over the run W of the
 * call's records j0 .. j0 + W->n - 1. */
typedef struct hr__kvwide_job {
    float *sc;
    size_t ldsc;
    const float *q, *qsum;
    float scale;
    float *o, *bias;
    const float *p;
    size_t ldp;
    int nr;
} hr__kvwide_job;
void hr__kvwide_pass_avx2(const hr__kvwide_job *J, int j0, const hr__kvwide *W);
/* The same with AVX-512 (kvwide_avx512.c: the same bits), for the AVX-512
 * table's records (its q8_0 / q4_0 and affine entries are the AVX2 decode
 * bodies with this pass: hr__kvg_dots_avx2_w512 and the others below). */
void hr__kvwide_pass_avx512(const hr__kvwide_job *J, int j0, const hr__kvwide *W);
typedef void (*hr__kvwide_pass_fn)(const hr__kvwide_job *J, int j0, const hr__kvwide *W);
void hr__kvq_dots_avx2_w512(float *sc, size_t ldsc, const float *qp, const float *qsum, int nr,
                            const void *rec, size_t rb, int nk, int hd, int bits, int group,
                            float scale);
void hr__kvq_axpys_avx2_w512(float *o, float *bias, const float *p, size_t ldp, int nr,
                             const void *rec, size_t rb, int nv, int hd, int bits, int group);
void hr__kvg_dots_avx2_w512(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                            size_t rb, int nk, int hd, hr_dtype t, float scale);
void hr__kvg_axpys_avx2_w512(float *o, const float *p, size_t ldp, int nr, const void *rec,
                             size_t rb, int nv, int hd, hr_dtype t);

/* ---- a row of any KV format -------------------------------------------------------
 * F32, F16, BF16: hd elements; AFFINE: the record above (bits, group);
 * Q8_0, Q4_0: ggml blocks; TURBO: turbo.h's record (bits: the rate r2,
 * group: the row's rotation, hr_turbo_kv_rot). Records (bytes, not
 * elements): AFFINE, Q8_0, Q4_0, TURBO. */
static inline bool hr_kv_is_rec(hr_dtype t) {
    return t == HR_DTYPE_AFFINE || t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0 ||
           t == HR_DTYPE_TURBO;
}
size_t hr_kv_row_size(hr_dtype t, int hd, int bits, int group);
/* x[0..hd) stored at dst in format t (rounded to half, quantized) */
void hr_kv_row_store(void *dst, const float *x, int hd, hr_dtype t, int bits, int group);
/* The row at src as f32 (exact for F32/F16/BF16; dequantized otherwise:
 * the scalar definitions) */
void hr_kv_row_load(float *y, const void *src, int hd, hr_dtype t, int bits, int group);

#endif
