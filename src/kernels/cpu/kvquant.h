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
/* sc[r * ldsc + j] = the score of query row q + r * hd over record
 * rec + j * rb, times scale (r < nr, j < nk). */
void hr__kvq_dots_scalar(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                         size_t rb, int nk, int hd, int bits, int group, float scale);
void hr__kvq_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                       size_t rb, int nk, int hd, int bits, int group, float scale);
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

#endif
