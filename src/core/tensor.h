/* Tensor descriptors: a dtype, a shape and a pointer into memory the
 * descriptor does not own (usually a read-only mmap of a weights file).
 *
 * Plain dtypes (F32 .. BOOL) store one element per hr_dtype_size bytes.
 * Quantized dtypes store a 2-D matrix (rows, cols) row by row, each row a
 * run of blocks (docs/quantization.md):
 *   HR_DTYPE_AFFINE  MLX affine: `data` is the packed uint32 `weight`
 *                    (cols*bits/32 words per row, an LSB-first bit stream),
 *                    q.scales / q.biases are (rows, cols/group) of q.sdtype;
 *                    w = scale * q + bias per group of q.group columns.
 *   HR_DTYPE_Q8_0 .. HR_DTYPE_Q6_K  GGUF (ggml) blocks of 32 or 256 columns,
 *                    scales inside the blocks (ggml-common.h layouts).
 * `shape` is always the logical (dequantized) shape.
 * GGUF and MLX 4/8-bit matrices may instead be repacked in panels of 16
 * rows for the integer kernels (layout HR_LAYOUT_X16, kernels/cpu/x16.h). */
#ifndef HR_CORE_TENSOR_H
#define HR_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum hr_dtype {
    HR_DTYPE_F32,
    HR_DTYPE_F16,
    HR_DTYPE_BF16,
    HR_DTYPE_F64,
    HR_DTYPE_I64,
    HR_DTYPE_I32,
    HR_DTYPE_U32,
    HR_DTYPE_I16,
    HR_DTYPE_U16,
    HR_DTYPE_I8,
    HR_DTYPE_U8,
    HR_DTYPE_BOOL,
    /* quantized matrices (not valid in safetensors headers) */
    HR_DTYPE_AFFINE, /* MLX affine, bits/group in hr_tensor.q */
    HR_DTYPE_Q8_0,
    HR_DTYPE_Q4_0,
    HR_DTYPE_Q4_1,
    HR_DTYPE_Q4_K,
    HR_DTYPE_Q5_K,
    HR_DTYPE_Q6_K,
    HR_DTYPE_MXFP4,  /* OCP MX FP4 as ggml's block_mxfp4: an E8M0 scale byte e
                      * then 16 bytes of E2M1 codes (element j the low nibble
                      * of byte j, element j + 16 its high nibble);
                      * w = fp4(code) * 2^(e - 127) */
    HR_DTYPE_TURBO,  /* KV rows only: TurboQuant records (kernels/cpu/turbo.h) */
    HR_DTYPE_COUNT
} hr_dtype;

#define HR_MAX_DIMS 5 /* Qwen2.5-VL's patch embedding is a Conv3d: (out, c, t, p, p) */

enum { HR_LAYOUT_ROWS, HR_LAYOUT_X16 };

typedef struct hr_tensor {
    const char *name;  /* owned by whoever made the descriptor */
    hr_dtype dtype;
    int ndim;
    int64_t shape[HR_MAX_DIMS]; /* outermost first, as safetensors/torch */
    const void *data;
    size_t nbytes;          /* bytes at data (the packed weight when quantized) */
    int layout;             /* HR_LAYOUT_ROWS (0) or HR_LAYOUT_X16 */
    int act_digits;         /* HR_LAYOUT_X16: the activations' int8 digits, 1
                             * (int8) or 3 (24-bit, f32-grade; qdot.h); 0 = 1;
                             * -1: f32 activations only (HR_QACT_F32) */
    struct {                /* HR_DTYPE_AFFINE only */
        const void *scales, *biases; /* (rows, cols/group) of sdtype */
        hr_dtype sdtype;             /* F32, F16 or BF16 */
        int bits;                    /* 2, 3, 4, 5, 6, 8 */
        int group;                   /* 32, 64, 128 */
    } q;
} hr_tensor;

/* Bytes per element of a plain dtype; 0 for quantized ones. */
size_t hr_dtype_size(hr_dtype t);
/* "F32", "BF16" (safetensors spelling), "Q4_K" (ggml spelling), "AFFINE". */
const char *hr_dtype_name(hr_dtype t);
/* A plain dtype by its safetensors name; -1 when unknown. */
int hr_dtype_from_name(const char *name);
/* True for the block-quantized dtypes. */
int hr_dtype_is_quant(hr_dtype t);
/* ggml block geometry: elements and bytes per block (1 and the element size
 * for plain dtypes, 0/0 for HR_DTYPE_AFFINE, whose layout is per tensor). */
void hr_dtype_block(hr_dtype t, int *elems, int *bytes);

int64_t hr_tensor_numel(const hr_tensor *t);

/* Bytes of one row of a 2-D tensor in data (the packed weight row when
 * quantized). */
size_t hr_tensor_row_bytes(const hr_tensor *t);
/* Columns that one quantization block covers (1 for plain dtypes, the group
 * for affine, 32 or 256 for ggml types): cols must be a multiple. */
int hr_tensor_block_cols(const hr_tensor *t);
/* A view of rows [r0, r0 + n) of a 2-D tensor (plain or quantized). */
hr_tensor hr_tensor_rows(const hr_tensor *t, int64_t r0, int64_t n);
/* Bytes a matrix occupies including its scales and biases. */
size_t hr_tensor_bytes(const hr_tensor *t);

/* ---- scalar conversions (exact, round-to-nearest-even on narrowing) ---- */

static inline float hr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t hr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float hr_f16_to_f32(uint16_t h);
uint16_t hr_f32_to_f16(float f);

#endif
