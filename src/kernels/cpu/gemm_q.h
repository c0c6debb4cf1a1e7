/* Quantized-weight gemm kernels of each ISA (gemm_q_avx512.c,
 * gemm_q_avx2.c), internal to this layer. */
#ifndef HR_KERNELS_GEMM_Q_H
#define HR_KERNELS_GEMM_Q_H

#include "kernels/cpu/cpu.h"

/* Activation rows from which the prefill (panel) path is taken. */
#define HR_GEMM_Q_PANEL_MIN 4

#define HR__GEMM_Q_DECL(isa)                                                    \
    void hr__gemm_affine_##isa(float *, int, const float *, int, int,          \
                               const hr_tensor *, int, int);                   \
    void hr__gemm_q8_0_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);                     \
    void hr__gemm_q4_0_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);                     \
    void hr__gemm_q4_1_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);                     \
    void hr__gemm_q4_k_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);                     \
    void hr__gemm_q5_k_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);                     \
    void hr__gemm_q6_k_##isa(float *, int, const float *, int, int,            \
                             const hr_tensor *, int, int);

HR__GEMM_Q_DECL(avx512)
HR__GEMM_Q_DECL(avx2)

/* Any quantized dtype through hr_dequant_range, row by row (gemm_scalar.c):
 * the reference, and every ISA's kernel for MXFP4 (no SIMD one yet). */
void hr__gemm_dequant_scalar(float *y, int ldy, const float *x, int ldx, int n,
                             const hr_tensor *w, int m0, int m1);

/* Table entries for the quantized dtypes of an ISA. */
#define HR__GEMM_Q_TABLE(isa)                                                   \
    [HR_DTYPE_AFFINE] = hr__gemm_affine_##isa, [HR_DTYPE_Q8_0] = hr__gemm_q8_0_##isa, \
    [HR_DTYPE_Q4_0] = hr__gemm_q4_0_##isa, [HR_DTYPE_Q4_1] = hr__gemm_q4_1_##isa,   \
    [HR_DTYPE_Q4_K] = hr__gemm_q4_k_##isa, [HR_DTYPE_Q5_K] = hr__gemm_q5_k_##isa,   \
    [HR_DTYPE_Q6_K] = hr__gemm_q6_k_##isa, [HR_DTYPE_MXFP4] = hr__gemm_dequant_scalar

/* Integer-activation kernels (qdot.h; gemm_i8_<isa>.c): k % 64 == 0. */
#define HR__GEMM_I8_DECL(isa)                                                   \
    void hr__gemm_i8_q8_0_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);                 \
    void hr__gemm_i8_q4_0_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);                 \
    void hr__gemm_i8_q4_1_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);                 \
    void hr__gemm_i8_q4_k_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);                 \
    void hr__gemm_i8_q5_k_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);                 \
    void hr__gemm_i8_q6_k_##isa(float *, int, const hr_qact *, int,           \
                                const hr_tensor *, int, int);

HR__GEMM_I8_DECL(avx512)
HR__GEMM_I8_DECL(avx2)
void hr__qact_row_avx2(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                       float *s4);
void hr__qact_row_avx512(const float *x, int k, int off, int8_t *q, float *d4, int32_t *c4,
                         float *s4);

/* x16-layout kernels (x16.h; gemm_x16_<isa>.c) */
#define HR__GEMM_X16_DECL(isa)                                                  \
    void hr__gemm_x16_q8_0_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_q4_0_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_q4_1_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_q4_k_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_q5_k_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_q6_k_##isa(float *, int, const hr_qact32 *, int,        \
                                 const hr_tensor *, int, int);                \
    void hr__gemm_x16_affine_##isa(float *, int, const hr_qact32 *, int,      \
                                   const hr_tensor *, int, int);

HR__GEMM_X16_DECL(avx512)
void hr__softmax_scalar(float *x, int n); /* expf */
void hr__silu_mul_scalar(float *g, const float *u, int n);
float hr__max_scalar(const float *x, int n);
int32_t hr__argmax_scalar(const float *x, int n);
void hr__rmsnorm_scalar(float *y, const float *x, const float *w, float offset, int d,
                        float eps);
int32_t hr__argmax_avx512(const float *x, int n);
void hr__rmsnorm_avx512(float *y, const float *x, const float *w, float offset, int d,
                        float eps);
double hr__exp_sum_scalar(float *dst, const float *x, int n, float m, float s);
void hr__to_half_scalar(uint16_t *dst, const float *x, int n, hr_dtype t);
void hr__widen_scalar(float *dst, const uint16_t *src, size_t n, hr_dtype t);
void hr__widen_avx2(float *dst, const uint16_t *src, size_t n, hr_dtype t);
void hr__to_half_avx512(uint16_t *dst, const float *x, int n, hr_dtype t);
void hr__softmax_avx512(float *x, int n);
void hr__silu_mul_avx512(float *g, const float *u, int n);
float hr__max_avx512(const float *x, int n);
double hr__exp_sum_avx512(float *dst, const float *x, int n, float m, float s);
void hr__attn_heads_avx512(const hr_attn_tile *t);
void hr__qact32_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                           int32_t *c, float *s);
void hr__qactk_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                          int32_t *c, int8_t *sd);
void hr__qact24_row_avx512(const float *x, int k, int off, int group, int8_t *q, float *d,
                           int32_t *c, float *s);

#define HR__GEMM_X16_TABLE(isa)                                                 \
    [HR_DTYPE_Q8_0] = hr__gemm_x16_q8_0_##isa, [HR_DTYPE_Q4_0] = hr__gemm_x16_q4_0_##isa, \
    [HR_DTYPE_Q4_1] = hr__gemm_x16_q4_1_##isa, [HR_DTYPE_Q4_K] = hr__gemm_x16_q4_k_##isa, \
    [HR_DTYPE_Q5_K] = hr__gemm_x16_q5_k_##isa, [HR_DTYPE_Q6_K] = hr__gemm_x16_q6_k_##isa, \
    [HR_DTYPE_AFFINE] = hr__gemm_x16_affine_##isa

#define HR__GEMM_I8_TABLE(isa)                                                  \
    [HR_DTYPE_Q8_0] = hr__gemm_i8_q8_0_##isa, [HR_DTYPE_Q4_0] = hr__gemm_i8_q4_0_##isa, \
    [HR_DTYPE_Q4_1] = hr__gemm_i8_q4_1_##isa, [HR_DTYPE_Q4_K] = hr__gemm_i8_q4_k_##isa, \
    [HR_DTYPE_Q5_K] = hr__gemm_i8_q5_k_##isa, [HR_DTYPE_Q6_K] = hr__gemm_i8_q6_k_##isa

#endif
