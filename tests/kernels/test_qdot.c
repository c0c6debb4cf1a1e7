/* The integer-activation path (qdot.h): the activation quantizer's known
 * answers, the weight regrouping w = sw * u + b against each format's
 * dequantization, the scalar kernel against an f32 product within the
 * activation rounding bound, every ISA's kernel against the scalar one, and
 * batch invariance (a row's result is bit-identical whatever rows run with
 * it) through hr_matmul on several threads. */
#include "core/pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmat.h"

static const hr_dtype DTS[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, HR_DTYPE_Q4_1,
                               HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K};
#define NDTS (sizeof DTS / sizeof DTS[0])

static bool kquant(hr_dtype t) {
    return t == HR_DTYPE_Q4_K || t == HR_DTYPE_Q5_K || t == HR_DTYPE_Q6_K;
}

/* n rows of k quantized activations, with storage */
typedef struct qx {
    hr_qact a;
    int8_t *q;
    float *d4, *s4;
    int32_t *c4;
} qx;

static qx quantize(const float *x, int n, int k, int off) {
    qx r = {.q = malloc((size_t)n * k), .d4 = malloc((size_t)n * k), .s4 = malloc((size_t)n * k),
            .c4 = malloc((size_t)n * k)};
    for (int i = 0; i < n; i++)
        hr_qact_row(x + (size_t)i * k, k, off, r.q + (size_t)i * k, r.d4 + (size_t)i * k / 4,
                    r.c4 + (size_t)i * k / 4, r.s4 + (size_t)i * k / 4);
    r.a = (hr_qact){.q = r.q, .d4 = r.d4, .c4 = r.c4, .s4 = r.s4, .k = k};
    return r;
}

static void qx_free(qx *r) {
    free(r->q);
    free(r->d4);
    free(r->s4);
    free(r->c4);
}

static void test_qact_known(void **state) {
    (void)state;
    float x[64] = {0};
    x[0] = 2.54f;  /* max of block 0: d = 0.02, q = 127 */
    x[1] = -1.27f; /* q = -63.5 -> -64 (ties to even) */
    x[2] = 0.03f;  /* 1.5 -> 2 */
    x[3] = 0.05f;  /* 2.5 -> 2 */
    /* block 1 all zero: d = 0, q = 0 */
    int8_t q[64];
    float d4[16], s4[16];
    int32_t c4[16];
    hr_qact_row(x, 64, 8, q, d4, c4, s4);
    assert_int_equal(q[0], 127);
    assert_int_equal(q[1], -64);
    assert_int_equal(q[2], 2);
    assert_int_equal(q[3], 2);
    for (int l = 0; l < 8; l++)
        assert_float_equal(d4[l], 2.54f / 127.0f, 0);
    assert_int_equal(c4[0], -8 * 67);
    assert_float_equal(s4[0], (2.54f / 127.0f) * 67.0f, 0);
    assert_int_equal(c4[1], 0);
    for (int i = 32; i < 64; i++)
        assert_int_equal(q[i], 0);
    assert_float_equal(d4[8], 0, 0);
    assert_float_equal(s4[15], 0, 0);
}

/* Every ISA's activation quantizer is bit-identical to the scalar one. */
static void test_qact_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 61);
    int k = 1024;
    float x[1024];
    for (int i = 0; i < k; i++) {
        float v = frand(&rng) * (i % 37 == 0 ? 100.0f : 1.0f);
        x[i] = i / 32 == 3 ? 0.0f : i / 32 == 5 ? 0.5f * (float)(i % 5) : v; /* zeros, ties */
    }
    int8_t q0[1024], q1[1024];
    float d0[256], d1[256], s0[256], s1[256];
    int32_t c0[256], c1[256];
    hr_qact_row(x, k, 32, q0, d0, c0, s0);
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        K->qact_row(x, k, 32, q1, d1, c1, s1);
        assert_memory_equal(q0, q1, sizeof q0);
        assert_memory_equal(d0, d1, sizeof d0);
        assert_memory_equal(c0, c1, sizeof c0);
        assert_memory_equal(s0, s1, sizeof s0);
    }
}

/* sw * (u - off) + mn is the format's dequantized weight (up to f32
 * rounding) */
static void test_regrouping(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 41);
    for (size_t d = 0; d < NDTS; d++)
        for (int raw = 0; raw < 2; raw++) {
            int k = 512, m = 3;
            qmat w = make_q(&rng, DTS[d], 0, 0, HR_DTYPE_F32, m, k, raw && kquant(DTS[d]));
            int off = hr_qdot_offset(DTS[d]);
            float ref[512];
            for (int j = 0; j < m; j++) {
                hr_dequant_range(&w.t, j, 0, k, ref);
                for (int blk = 0; blk < k / 32; blk++) {
                    uint8_t u[32];
                    float sw[2], mn[2];
                    hr_qdot_block(&w.t, j, blk, u, sw, mn);
                    for (int e = 0; e < 32; e++) {
                        float got = sw[e / 16] * (float)(u[e] - off) + mn[e / 16];
                        float tol = 1e-6f * (fabsf(sw[e / 16]) * 256 + fabsf(mn[e / 16]));
                        if (fabsf(got - ref[blk * 32 + e]) > tol)
                            fail_msg("%s row %d element %d: %g vs dequantized %g",
                                     hr_dtype_name(DTS[d]), j, blk * 32 + e, got,
                                     ref[blk * 32 + e]);
                    }
                }
            }
            qmat_free(&w);
        }
}

/* The scalar integer kernel against the f32 product: the difference is the
 * activation rounding, at most sum_t |w_t| * d_t / 2 (plus f32 slack). */
static void test_scalar_bound(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 43);
    int n = 3, m = 9, k = 768;
    float *x = malloc((size_t)n * k * sizeof *x);
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng) * (i % 97 == 0 ? 20.0f : 1.0f); /* outliers, as real activations */
    for (size_t d = 0; d < NDTS; d++) {
        qx a = quantize(x, n, k, hr_qdot_offset(DTS[d]));
        qmat w = make_q(&rng, DTS[d], 0, 0, HR_DTYPE_F32, m, k, false);
        float y[27];
        hr__gemm_i8_scalar(y, m, &a.a, n, &w.t, 0, m);
        double worst = check_rounding_bound(x, n, k, &w.t, m, y, a.d4, 4);
        printf("%-4s: integer path within %.2f of the activation rounding bound\n",
               hr_dtype_name(DTS[d]), worst);
        qmat_free(&w);
        qx_free(&a);
    }
    free(x);
}

/* Every ISA against the scalar kernel, on every row count the tiles treat
 * apart, and with m0 > 0 and ragged m. */
static void test_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 47);
    static const int ns[] = {1, 2, 3, 4, 5, 7, 13};
    static const int ms[] = {1, 5, 19, 70};
    int checked = 0;
    for (size_t d = 0; d < NDTS; d++) {
        int ks[] = {256, 768};
        for (int raw = 0; raw < 2; raw++)
            for (size_t c = 0; c < 2; c++)
                for (size_t mi = 0; mi < 4; mi++) {
                    int k = ks[c], m = ms[mi], m0 = m > 4 ? 1 : 0;
                    qmat w = make_q(&rng, DTS[d], 0, 0, HR_DTYPE_F32, m, k,
                                    raw && kquant(DTS[d]));
                    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
                        int n = ns[a];
                        float *x = malloc((size_t)n * k * sizeof *x);
                        for (int i = 0; i < n * k; i++)
                            x[i] = frand(&rng);
                        qx q = quantize(x, n, k, hr_qdot_offset(DTS[d]));
                        float *yr = calloc((size_t)n * m, sizeof *yr);
                        float *y = calloc((size_t)n * m, sizeof *y);
                        hr__gemm_i8_scalar(yr, m, &q.a, n, &w.t, m0, m);
                        float scale = 0;
                        for (int i = 0; i < n * m; i++)
                            scale = fmaxf(scale, fabsf(yr[i]));
                        for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++) {
                            const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                            if (!K || !K->gemm_i8[DTS[d]])
                                continue;
                            memset(y, 0, (size_t)n * m * sizeof *y);
                            K->gemm_i8[DTS[d]](y, m, &q.a, n, &w.t, m0, m);
                            for (int i = 0; i < n * m; i++)
                                if (fabsf(y[i] - yr[i]) > 2e-6f * (float)k * (1 + scale))
                                    fail_msg("%s %s n=%d m=%d k=%d: element %d: %.8f vs "
                                             "scalar %.8f",
                                             K->name, hr_dtype_name(DTS[d]), n, m, k, i, y[i],
                                             yr[i]);
                            checked++;
                        }
                        qx_free(&q);
                        free(x);
                        free(y);
                        free(yr);
                    }
                    qmat_free(&w);
                }
    }
    printf("integer path: %d ISA/format/shape combinations match the scalar kernel\n", checked);
    assert_true(checked > 0 || !hr_cpu_isa(HR_ISA_AVX512));
}

/* Many activation rows over long weight rows, on every ISA: the kernels
 * block the rows (by what fits in L2), and the result still equals the
 * scalar definition and, bit for bit, each row computed alone. */
static void test_many_rows(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 59);
    int n = 133, m = 19, k = 3072;
    float *x = malloc((size_t)n * k * sizeof *x);
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    float *yr = malloc((size_t)n * m * sizeof *yr), *y = malloc((size_t)n * m * sizeof *y);
    float one[19];
    for (size_t d = 0; d < NDTS * HR_ISA_COUNT; d++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)(d / NDTS));
        if (!K || !K->gemm_i8[DTS[d % NDTS]])
            continue;
        qmat w = make_q(&rng, DTS[d % NDTS], 0, 0, HR_DTYPE_F32, m, k, false);
        qx q = quantize(x, n, k, hr_qdot_offset(DTS[d % NDTS]));
        hr__gemm_i8_scalar(yr, m, &q.a, n, &w.t, 0, m);
        K->gemm_i8[DTS[d % NDTS]](y, m, &q.a, n, &w.t, 0, m);
        for (int i = 0; i < n * m; i++)
            if (fabsf(y[i] - yr[i]) > 2e-6f * (float)k * (1 + fabsf(yr[i])))
                fail_msg("%s %s: element %d: %.8f vs scalar %.8f", K->name,
                         hr_dtype_name(DTS[d % NDTS]), i, y[i], yr[i]);
        for (int i = 0; i < n; i += 11) {
            hr_qact row = q.a;
            row.q += (size_t)i * k;
            row.d4 += (size_t)i * k / 4;
            row.c4 += (size_t)i * k / 4;
            row.s4 += (size_t)i * k / 4;
            K->gemm_i8[DTS[d % NDTS]](one, m, &row, 1, &w.t, 0, m);
            assert_memory_equal(one, y + (size_t)i * m, sizeof one);
        }
        qx_free(&q);
        qmat_free(&w);
    }
    free(x);
    free(y);
    free(yr);
}

/* hr_matmul with GGUF weights: on 1 or 3 threads, row by row or all rows
 * at once, every output is bit-identical. */
static void test_batch_invariance(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 53);
    int n = 13, m = 70, k = 512;
    hr_pool *p3 = hr_pool_new(3);
    float *x = malloc((size_t)n * k * sizeof *x);
    float *all = malloc((size_t)n * m * sizeof *all), *one = malloc((size_t)m * sizeof *one);
    float *all3 = malloc((size_t)n * m * sizeof *all3);
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    for (size_t d = 0; d < NDTS; d++) {
        if (!hr_cpu()->gemm_i8[DTS[d]])
            continue; /* the f32-activation kernels switch order at 4 rows */
        qmat w = make_q(&rng, DTS[d], 0, 0, HR_DTYPE_F32, m, k, false);
        hr_matmul(NULL, all, m, x, k, n, &w.t, NULL);
        hr_matmul(p3, all3, m, x, k, n, &w.t, NULL);
        assert_memory_equal(all, all3, (size_t)n * m * sizeof *all);
        for (int i = 0; i < n; i++) {
            hr_matmul(p3, one, m, x + (size_t)i * k, k, 1, &w.t, NULL);
            assert_memory_equal(one, all + (size_t)i * m, (size_t)m * sizeof *one);
        }
        qmat_free(&w);
    }
    hr_pool_free(p3);
    free(x);
    free(all);
    free(all3);
    free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qact_known),
        cmocka_unit_test(test_qact_isas),
        cmocka_unit_test(test_regrouping),
        cmocka_unit_test(test_scalar_bound),
        cmocka_unit_test(test_isas),
        cmocka_unit_test(test_many_rows),
        cmocka_unit_test(test_batch_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
