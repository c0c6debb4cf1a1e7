/* Scalar reference kernels: the definition every SIMD path is tested
 * against. Accumulation is in float, in index order. */
#include "kernels/cpu/cpu.h"

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

const hr_cpu_kernels hr__cpu_scalar = {
    .name = "scalar",
    .gemm = {[HR_DTYPE_F32] = gemm_f32_scalar,
             [HR_DTYPE_BF16] = gemm_bf16_scalar,
             [HR_DTYPE_F16] = gemm_f16_scalar},
    .dot = dot_scalar,
    .axpy = axpy_scalar,
};
