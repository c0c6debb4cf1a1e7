/* Quantized weight formats: the scalar definitions every kernel is tested
 * against, and the quantizers `convert` uses.
 *
 * MLX affine (HR_DTYPE_AFFINE), as mlx's CPU backend defines it
 * (mlx/backend/cpu/quantized.cpp, `quantize` and `extract_bits`):
 *   each row is cut into groups of `group` columns; group g has a scale s
 *   and a bias b (stored as the model's float dtype) and every element is an
 *   unsigned `bits`-bit integer q with w = s * q + b. The q of a row form one
 *   LSB-first bit stream over the little-endian uint32 words (element i sits
 *   at bits [i*bits, (i+1)*bits) of the row), which is how mlx packs 2/4/8
 *   bits into uint32 and 3/5/6 bits into 3- or 5-byte packs.
 *
 * GGUF blocks (ggml-common.h / ggml-quants.c in llama.cpp):
 *   Q8_0  {f16 d; i8 q[32]}                  w = d * q
 *   Q4_0  {f16 d; u8 qs[16]}                 w = d * (nibble - 8); byte j holds
 *                                            element j (low) and j+16 (high)
 *   Q4_1  {f16 d, m; u8 qs[16]}              w = d * nibble + m
 *   Q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}  8 sub-blocks of 32 with
 *         6-bit scale/min: w = d*sc * q - dmin*mn
 *   Q5_K  Q4_K plus u8 qh[32] for the fifth bit
 *   Q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}  16 sub-blocks of 16:
 *         w = d*sc * (q - 32)
 * The formulas are evaluated in f32 in exactly this order by every path. */
#ifndef HR_KERNELS_QUANT_H
#define HR_KERNELS_QUANT_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Dequantize columns [c0, c0 + n) of row `row` of a 2-D weight (any dtype
 * hr_matmul accepts) into out[0..n). For affine weights c0 must be a
 * multiple of 8; any range otherwise. */
void hr_dequant_range(const hr_tensor *w, int64_t row, int64_t c0, int64_t n,
                      float *out);

/* A row of cols values (a multiple of the block) of ggml blocks of type t
 * (Q8_0 .. Q6_K) at p dequantized into out, ggml's dequantize_row_*. */
void hr_dequant_gguf_row(hr_dtype t, const void *p, int64_t cols, float *out);

/* Unpacked affine quants of one run: q[i] for elements [e0, e0 + n) of a
 * packed row (e0 a multiple of 8). */
void hr_affine_unpack(const uint8_t *row, int bits, int64_t e0, int n, uint8_t *q);

/* The scale and bias of group g of row `row` of an affine weight as f16
 * bits: false when either has no exact f16 (so f16 copies would change the
 * weights' values). */
bool hr_affine_f16_params(const hr_tensor *w, int64_t row, int64_t g, uint16_t *s,
                          uint16_t *b);

/* ---- quantizers -------------------------------------------------------- */

/* MLX affine quantization of one row of cols floats (a multiple of group),
 * bit for bit as mlx's CPU quantize: packed gets cols*bits/8 bytes, scales
 * and biases cols/group floats each (the caller rounds them to the model's
 * dtype, as mlx stores them). */
void hr_quant_affine_row(const float *x, int64_t cols, int bits, int group,
                         uint8_t *packed, float *scales, float *biases);

/* One row of cols floats (a multiple of the block) into ggml blocks of type
 * t (Q8_0, Q4_0, Q4_1: llama.cpp's reference quantizers; Q4_K, Q5_K, Q6_K:
 * a simple min/max search, valid blocks but not llama.cpp's optimizer). */
void hr_quant_gguf_row(hr_dtype t, const float *x, int64_t cols, uint8_t *out);

/* One row of n_groups MXFP4 groups as the Hugging Face hub ships gpt-oss
 * (`*_blocks`: 16 bytes a group, element 2i the low nibble of byte i and
 * 2i + 1 its high one; `*_scales`: one E8M0 byte a group) rewritten as
 * HR_DTYPE_MXFP4 blocks (17 bytes each) at dst: the same values. */
void hr_mxfp4_from_hub(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales,
                       int64_t n_groups);

#endif
