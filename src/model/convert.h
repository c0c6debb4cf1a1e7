/* Model conversion: a Hugging Face / MLX model directory into
 *  - an mlx-lm–compatible directory (same tensor names, MLX affine packing,
 *    config.json "quantization" + "quantization_config" blocks with
 *    per-module overrides, other files copied), or
 *  - one GGUF file (llama.cpp names, metadata and Q/K permutation).
 * Output is atomic: a temporary sibling is renamed into place at the end;
 * on error nothing is left at `out`. */
#ifndef HR_MODEL_CONVERT_H
#define HR_MODEL_CONVERT_H

#include "core/tensor.h"
#include "hearth.h"

#include <jansson.h>

#include <stdbool.h>
#include <stdio.h>

typedef struct hr_convert_opts {
    const char *src, *out;
    bool quantize;       /* MLX affine */
    int bits, group;     /* default 4, 64 */
    hr_dtype dtype;      /* float tensors' dtype; HR_DTYPE_COUNT: keep the source's */
    double target_bpw;   /* > 0: mixed precision to this bits-per-weight budget */
    hr_dtype gguf;       /* HR_DTYPE_COUNT: MLX directory; else a GGUF file whose
                          * matrices have this type (F32, F16, BF16, Q8_0, ...) */
    bool gguf_km;        /* with gguf Q4_K or Q5_K: llama.cpp's _M mix
                          * (hr_gguf_export) */
    FILE *report;        /* what was chosen (may be NULL) */
    const char *adapter; /* a LoRA adapter directory fused into the weights first
                          * (hearth fuse: fuse.h); NULL: none. On an MLX-quantized
                          * base the fused weights are quantized again with their
                          * module's bits and group, the rest copied as is */
    bool dequantize;     /* hearth fuse --de-quantize (a quantized base: not
                          * supported yet) */
} hr_convert_opts;

int hr_convert(const hr_convert_opts *o, hr_error *err);

/* The same from a config and weights already open (hearth synth: lazy
 * weights, model/weights.h, made tensor by tensor as the output is written;
 * o->src NULL: no tokenizer or other files to copy). No adapter. */
struct hr_weights;
int hr_convert_weights(const hr_convert_opts *o, json_t *cfg, struct hr_weights *w,
                       hr_error *err);

/* Bits per weight of an affine matrix with `bits` and `group` (scales and
 * biases of sbytes each included). */
double hr_affine_bpw(int bits, int group, int sbytes);

#endif
