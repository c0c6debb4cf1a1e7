/* Random quantized matrices for the kernel tests (test_quant, test_qdot). */
#ifndef HR_TESTS_QMAT_H
#define HR_TESTS_QMAT_H

#include "core/tensor.h"
#include "kernels/cpu/quant.h"
#include "sample/rng.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* A quantized (m, k) matrix and its storage. */
typedef struct qmat {
    hr_tensor t;
    void *data, *scales, *biases;
} qmat;

static void qmat_free(qmat *q) {
    free(q->data);
    free(q->scales);
    free(q->biases);
}

/* Quantize m x k random floats into dtype dt (affine: bits/group, scales of
 * sdtype). With raw, K-quant blocks are random bytes (sane f16 scales). */
static qmat make_q(hr_rng *rng, hr_dtype dt, int bits, int group, hr_dtype sdt, int m,
                   int k, bool raw) {
    qmat q = {0};
    q.t = (hr_tensor){.name = "w", .dtype = dt, .ndim = 2, .shape = {m, k}};
    q.t.q.bits = bits;
    q.t.q.group = group;
    q.t.q.sdtype = sdt;
    size_t rb = hr_tensor_row_bytes(&q.t);
    q.data = calloc((size_t)m, rb);
    float *x = malloc((size_t)k * sizeof *x);
    if (dt == HR_DTYPE_AFFINE) {
        int ng = k / group;
        size_t ss = hr_dtype_size(sdt);
        q.scales = malloc((size_t)m * ng * ss);
        q.biases = malloc((size_t)m * ng * ss);
        float *s = malloc((size_t)ng * sizeof *s), *b = malloc((size_t)ng * sizeof *b);
        for (int j = 0; j < m; j++) {
            for (int i = 0; i < k; i++)
                x[i] = frand(rng);
            hr_quant_affine_row(x, k, bits, group, (uint8_t *)q.data + (size_t)j * rb, s, b);
            for (int g = 0; g < ng; g++) {
                size_t at = (size_t)j * ng + g;
                if (sdt == HR_DTYPE_BF16) {
                    ((uint16_t *)q.scales)[at] = hr_f32_to_bf16(s[g]);
                    ((uint16_t *)q.biases)[at] = hr_f32_to_bf16(b[g]);
                } else if (sdt == HR_DTYPE_F16) {
                    ((uint16_t *)q.scales)[at] = hr_f32_to_f16(s[g]);
                    ((uint16_t *)q.biases)[at] = hr_f32_to_f16(b[g]);
                } else {
                    ((float *)q.scales)[at] = s[g];
                    ((float *)q.biases)[at] = b[g];
                }
            }
        }
        free(s);
        free(b);
        q.t.q.scales = q.scales;
        q.t.q.biases = q.biases;
    } else if (raw) {
        uint8_t *p = q.data;
        for (size_t i = 0; i < (size_t)m * rb; i++)
            p[i] = (uint8_t)(hr_rng_next(rng) >> 56);
        int be, bb;
        hr_dtype_block(dt, &be, &bb);
        for (size_t blk = 0; blk < (size_t)m * rb / bb; blk++) {
            uint8_t *b = p + blk * bb;
            uint16_t d = hr_f32_to_f16(0.01f * frand(rng)), dm = hr_f32_to_f16(0.01f * frand(rng));
            if (dt == HR_DTYPE_Q6_K) {
                memcpy(b + 208, &d, 2);
            } else {
                memcpy(b, &d, 2);
                memcpy(b + 2, &dm, 2);
            }
        }
    } else {
        for (int j = 0; j < m; j++) {
            for (int i = 0; i < k; i++)
                x[i] = frand(rng);
            hr_quant_gguf_row(dt, x, k, (uint8_t *)q.data + (size_t)j * rb);
        }
    }
    free(x);
    q.t.data = q.data;
    q.t.nbytes = (size_t)m * rb;
    return q;
}

/* y[n][m] (an integer-activation product of x[n][k] and w) against the f32
 * product with w's dequantized rows: each output within the activation
 * rounding, sum_t |w_t| * d_t / 2 (plus f32 slack), where d_t is the
 * activation scale d[(i * k + t) / per]. Returns the worst err / bound.
 * For tests that include cmocka. */
static inline double check_rounding_bound(const float *x, int n, int k, const hr_tensor *w, int m,
                                          const float *y, const float *d, int per) {
    float *wf = malloc((size_t)k * sizeof *wf);
    double worst = 0;
    for (int j = 0; j < m; j++) {
        hr_dequant_range(w, j, 0, k, wf);
        for (int i = 0; i < n; i++) {
            double ref = 0, bound = 0, mag = 0;
            for (int t = 0; t < k; t++) {
                ref += (double)x[i * k + t] * wf[t];
                bound += fabs(wf[t]) * d[(i * k + t) / per] / 2;
                mag += fabs((double)x[i * k + t] * wf[t]);
            }
            double err = fabs(y[i * m + j] - ref);
            assert_true(err <= bound + 1e-5 * mag);
            worst = fmax(worst, err / (bound + 1e-30));
        }
    }
    free(wf);
    return worst;
}

#endif
