/* The integer-activation path for GGUF weights (how llama.cpp runs them):
 * the activations are quantized to int8 and the weights are used as the
 * unsigned integers they are stored as, so the inner products are integer
 * dot products (VNNI).
 *
 * Activations: each row of k values (k a multiple of 32) is cut into blocks
 * of 32; block b has d = max|x| / 127 and q = round(x / d) (ties to even,
 * |q| <= 127). The kernels take them as hr_qact (cpu.h): q, and per
 * 4-element lane l, with S the lane's sum of q: the block's d (d4[l]),
 * c4[l] = -off * S for the weight format's off (below) and
 * s4[l] = d * S.
 *
 * Weights: every GGUF type is regrouped, exactly, as
 * w = sw * (u - off) + mn with u an unsigned integer, off a constant of the
 * format and (sw, mn) constant over each 16 elements:
 *   Q8_0  u = q + 128   off = 128   sw = d          mn = 0
 *   Q4_0  u = nibble    off = 8     sw = d          mn = 0
 *   Q4_1  u = nibble    off = 0     sw = d          mn = m
 *   AFFINE (MLX 4/8-bit, x16 layout only)  u = q  off = 0  sw = s  mn = b
 *   Q4_K  u = 4-bit q   off = 0     sw = d * sc     mn = -dmin * min
 *   Q5_K  u = 5-bit q   off = 0     sw = d * sc     mn = -dmin * min
 *   Q6_K  u = 6-bit q   off = 32    sw = d * sc     mn = 0
 * and each output is, over the 4-element lanes l of the row,
 *   y = sum_l  sw * d4[l] * (dot(u, q)_l + c4[l]) + mn * s4[l]
 * with the integer part exact in int32. This file is that definition, in
 * scalar code, in index order; the SIMD kernels sum the same terms in
 * 16-lane order (the tests bound the difference). */
#ifndef HR_KERNELS_QDOT_H
#define HR_KERNELS_QDOT_H

#include "kernels/cpu/cpu.h"

#include <stdbool.h>
#include <stdint.h>

/* Quantize one row of k floats (k % 32 == 0) for weights of offset off
 * into q[k], d4[k/4], c4[k/4], s4[k/4]. */
void hr_qact_row(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                 float *s4);

/* The format's off (above); 0 for dtypes the path does not define. */
int hr_qdot_offset(hr_dtype t);

/* The weight side of 32-element block `blk` of row `row`: u[32] and, per
 * 16-element half h, sw[h] and mn[h]; either layout (x16.h). */
void hr_qdot_block(const hr_tensor *w, int64_t row, int64_t blk, uint8_t u[32],
                   float sw[2], float mn[2]);

/* Whether the format has mn (Q4_1, Q4_K, Q5_K, AFFINE), and the columns one weight
 * scale spans (16 for Q6_K, 32 for the others). */
bool hr_qdot_has_min(hr_dtype t);
int hr_qdot_group(hr_dtype t);

/* ---- the x16 path (the kernels of x16.h's layout) ----------------------------
 * Activations (hr_qact32, cpu.h): q as above; per 32-block b its d[b] and
 * s[b] = d * (sum of its 32 q); per group g of G columns (hr_qdot_group)
 * c[g] = -off * (sum of the group's q). Each output is, over the blocks b in
 * order and in b over its groups g in order,
 *   y = fma((float)(dot(u, q)_g + c[g]), sw_g * d[b], y)
 * then, for the formats with a min, y = fma(mn_b, s[b], y): the integer part
 * exact (|dot| < 2^24), each step one rounding, so every kernel gives these
 * bits whatever rows it runs with. */
void hr_qact32_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                   float *s);

/* ---- the K-quants' activations (hr_qact32 block = 256; llama.cpp's Q8_K) ----
 * For Q4_K, Q5_K and Q6_K the int8 activations take one scale per 256
 * columns (a super-block), so that a super-block's integer dots are scaled
 * by the integer weight scales in int32 and only its sum is converted:
 * each 256-block B of a row has d[B] = max|x| / 127 and q = round(x / d[B])
 * (ties to even, |q| <= 127), c[g] as above (-off * the group's sum of q:
 * zero for Q4_K and Q5_K), and per 32-block j of it the sum S_j of its q in
 * balanced base-256 digits, S_j = 256 hi + lo: sd[16 B + j] = hi,
 * sd[16 B + 8 + j] = lo. With the super-block's integer scales sc_g (per
 * group g: Q4_K/Q5_K the 6-bit scale, Q6_K the int8 one), 6-bit mins m_j
 * (Q4_K/Q5_K) and its D and Dmin (hr_qdot_kscales), each output is, over
 * the super-blocks B in order,
 *   I = sum_g sc_g * (dot(u, q)_g + c[g]),  M = sum_j m_j * S_j  (int32, exact)
 *   y = fma((float)I, D * d[B], y), then y = fma((float)M, -(Dmin * d[B]), y)
 * ((float)I the one rounding of the integer part). A 256-wide amax costs
 * precision on rows with outliers, as it does llama.cpp; it saves the
 * K-quants a float scale step per group (about a quarter of their vector
 * work at decode). */
int hr_qdot_act_block(hr_dtype t); /* 256 for the K-quants, else 32 */
void hr_qactk_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                  int8_t *sd);

/* Super-block sb of row `row` of a K-quant (either layout): sc[16 or 8]
 * (per group), mn[8] (Q4_K/Q5_K), dd = {D, Dmin} (Q6_K: Dmin 0). */
void hr_qdot_kscales(const hr_tensor *w, int64_t row, int64_t sb, int sc[16], int mn[8],
                     float dd[2]);

/* ---- 24-bit activations (hr_qact32 digits = 3): f32-grade ------------------
 * Each 32-block b has d[b] = max|x| / H, H = 127 * (2^16 + 2^8 + 1), and
 * x_int = round(x / d) (ties to even, |x_int| <= H) written in balanced
 * base 256 as three int8 digits, x_int = 2^16 hi + 2^8 mid + lo (each in
 * [-128, 127]; planes hi, mid, lo of k bytes each, in that order, per row);
 * s[b] = d * (float)(sum of the block's x_int); c per digit and group:
 * -off * (the group's sum of that digit). The rounding is at most
 * max|x| / 2^24 per element, below f32's own. Per group the three exact
 * integer dots D_hi, D_mid, D_lo (each starting at its c) give
 *   v = fma((float)D_hi, 2^16, (float)(2^8 D_mid + D_lo))
 * and y = fma(v, sw_g * d[b], y) as above; the min term is the same. */
void hr_qact24_row(const float *x, int k, int off, int group, int8_t *q, float *d, int32_t *c,
                   float *s);
void hr__gemm_x16_scalar(float *y, int ldy, const hr_qact32 *x, int n, const hr_tensor *w,
                         int m0, int m1);

/* The scalar kernel (the definition above), for the six GGUF types. */
void hr__gemm_i8_scalar(float *y, int ldy, const hr_qact *x, int n,
                        const hr_tensor *w, int m0, int m1);

#endif
