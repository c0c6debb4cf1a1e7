/* Scalar reference kernels: the definition every SIMD path is tested
 * against. Accumulation is in float, in index order. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant.h"

#include <math.h>

static float dot_scalar(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void axpy_scalar(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void axpys_scalar(float *y, int n, const float *a, int r, const float *x, size_t ldx) {
    for (int k = 0; k < r; k++)
        axpy_scalar(y, a[k], x + (size_t)k * ldx, n);
}

#define GEMM_SCALAR(NAME, T, LOAD)                                          \
    static void NAME(float *y, int ldy, const float *x, int ldx, int n,    \
                     const hr_tensor *w, int m0, int m1) {                  \
        const T *W = w->data;                                               \
        int k = (int)w->shape[1];                                           \
        for (int j = m0; j < m1; j++) {                                     \
            const T *row = W + (size_t)j * k;                               \
            for (int i = 0; i < n; i++) {                                   \
                const float *xi = x + (size_t)i * ldx;                      \
                float s = 0;                                                \
                for (int t = 0; t < k; t++)                                 \
                    s += xi[t] * LOAD(row[t]);                              \
                y[(size_t)i * ldy + j] = s;                                 \
            }                                                               \
        }                                                                   \
    }

#define LOAD_F32(v) (v)
GEMM_SCALAR(gemm_f32_scalar, float, LOAD_F32)
GEMM_SCALAR(gemm_bf16_scalar, uint16_t, hr_bf16_to_f32)
GEMM_SCALAR(gemm_f16_scalar, uint16_t, hr_f16_to_f32)

/* Quantized weights: dequantize (hr_dequant_range, the format's definition)
 * a chunk of the row, then dot, accumulating in index order. */
#define QCHUNK 1024
static void gemm_quant_scalar(float *y, int ldy, const float *x, int ldx, int n,
                              const hr_tensor *w, int m0, int m1) {
    hr__gemm_dequant_scalar(y, ldy, x, ldx, n, w, m0, m1);
}

void hr__gemm_dequant_scalar(float *y, int ldy, const float *x, int ldx, int n,
                             const hr_tensor *w, int m0, int m1) {
    int k = (int)w->shape[1], bc = hr_tensor_block_cols(w);
    int chunk = QCHUNK / bc * bc;
    float buf[QCHUNK];
    for (int j = m0; j < m1; j++)
        for (int i = 0; i < n; i++) {
            const float *xi = x + (size_t)i * ldx;
            float s = 0;
            for (int c0 = 0; c0 < k; c0 += chunk) {
                int len = k - c0 < chunk ? k - c0 : chunk;
                hr_dequant_range(w, j, c0, len, buf);
                for (int t = 0; t < len; t++)
                    s += xi[c0 + t] * buf[t];
            }
            y[(size_t)i * ldy + j] = s;
        }
}

void hr__softmax_scalar(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void hr__silu_mul_scalar(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * (u ? u[i] : 1.0f);
}

float hr__max_scalar(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

int32_t hr__argmax_scalar(const float *x, int n) {
    float mx = hr__max_scalar(x, n);
    for (int32_t i = 0; i < n; i++)
        if (x[i] == mx)
            return i;
    return 0; /* none, or all NaN */
}

void hr__rmsnorm_scalar(float *y, const float *x, const float *w, float offset, int d,
                        float eps) {
    double acc[8] = {0}, ss = 0; /* 8 chains: the sum is not one long dependency */
    int i = 0;
    for (; i + 8 <= d; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (; i < d; i++)
        ss += (double)x[i] * x[i];
    for (int j = 0; j < 8; j++)
        ss += acc[j];
    float r = 1.0f / sqrtf((float)(ss / d) + eps);
    for (i = 0; i < d; i++)
        y[i] = (x[i] * r) * (w[i] + offset);
}

double hr__exp_sum_scalar(float *dst, const float *x, int n, float m, float s) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double e = exp(((double)x[i] - m) * s);
        sum += e;
        if (dst)
            dst[i] = (float)e;
    }
    return sum;
}

void hr__widen_scalar(float *dst, const uint16_t *src, size_t n, hr_dtype t) {
    for (size_t i = 0; i < n; i++)
        dst[i] = t == HR_DTYPE_F16 ? hr_f16_to_f32(src[i]) : hr_bf16_to_f32(src[i]);
}

void hr__to_half_scalar(uint16_t *dst, const float *x, int n, hr_dtype t) {
    for (int i = 0; i < n; i++)
        dst[i] = t == HR_DTYPE_F16 ? hr_f32_to_f16(fminf(fmaxf(x[i], -65504.0f), 65504.0f))
                                   : hr_f32_to_bf16(x[i]);
}

const hr_cpu_kernels hr__cpu_scalar = {
    .name = "scalar",
    .math = 0,
    .gemm = {[HR_DTYPE_F32] = gemm_f32_scalar,
             [HR_DTYPE_BF16] = gemm_bf16_scalar,
             [HR_DTYPE_F16] = gemm_f16_scalar,
             [HR_DTYPE_AFFINE] = gemm_quant_scalar,
             [HR_DTYPE_Q8_0] = gemm_quant_scalar,
             [HR_DTYPE_Q4_0] = gemm_quant_scalar,
             [HR_DTYPE_Q4_1] = gemm_quant_scalar,
             [HR_DTYPE_Q4_K] = gemm_quant_scalar,
             [HR_DTYPE_Q5_K] = gemm_quant_scalar,
             [HR_DTYPE_Q6_K] = gemm_quant_scalar,
             [HR_DTYPE_MXFP4] = hr__gemm_dequant_scalar},
    .gemm_i8 = {[HR_DTYPE_Q8_0] = hr__gemm_i8_scalar,
                [HR_DTYPE_Q4_0] = hr__gemm_i8_scalar,
                [HR_DTYPE_Q4_1] = hr__gemm_i8_scalar,
                [HR_DTYPE_Q4_K] = hr__gemm_i8_scalar,
                [HR_DTYPE_Q5_K] = hr__gemm_i8_scalar,
                [HR_DTYPE_Q6_K] = hr__gemm_i8_scalar},
    .qact_row = hr_qact_row,
    .to_half = hr__to_half_scalar,
    .widen = hr__widen_scalar,
    .kvq_load = hr__kvq_load_scalar,
    .kvq_dots = hr__kvq_dots_scalar,
    .kvq_axpys = hr__kvq_axpys_scalar,
    .kvg_dots = hr__kvg_dots_scalar,
    .kvg_axpys = hr__kvg_axpys_scalar,
    .turbo_dots = hr__turbo_dots_scalar,
    .turbo_axpys = hr__turbo_axpys_scalar,
    .turbo_rotate = hr__turbo_rotate_scalar,
    .turbo_unrotate = hr__turbo_unrotate_scalar,
    .turbo_encode = hr__turbo_encode_scalar,
    .softmax = hr__softmax_scalar,
    .silu_mul = hr__silu_mul_scalar,
    .max = hr__max_scalar,
    .argmax = hr__argmax_scalar,
    .rmsnorm = hr__rmsnorm_scalar,
    .exp_sum = hr__exp_sum_scalar,
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .axpys = axpys_scalar,
};
