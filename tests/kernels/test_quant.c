/* Quantized formats: the scalar definitions (known-answer blocks, the
 * quantizers' round trip) and every ISA's quantized gemm against the scalar
 * dequantize-then-dot reference, on shapes with tails, for every format,
 * affine bit width and group size, and on random (not quantizer-made)
 * K-quant blocks. */
#include "core/pool.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_blocks.h"
#include "sample/rng.h"

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

static int compare_isas(hr_rng *rng, const qmat *q, const char *what) {
    static const int ns[] = {1, 2, 3, 4, 7, 13};
    int m = (int)q->t.shape[0], k = (int)q->t.shape[1], checked = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        int n = ns[a];
        float *x = malloc((size_t)n * k * sizeof *x);
        for (int i = 0; i < n * k; i++)
            x[i] = frand(rng);
        float *yr = calloc((size_t)n * m, sizeof *yr), *y = calloc((size_t)n * m, sizeof *y);
        int m0 = m > 4 ? 1 : 0;
        hr__cpu_scalar.gemm[q->t.dtype](yr, m, x, k, n, &q->t, m0, m);
        float scale = 0;
        for (int i = 0; i < n * m; i++)
            scale = fmaxf(scale, fabsf(yr[i]));
        for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++) {
            const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
            if (!K)
                continue;
            memset(y, 0, (size_t)n * m * sizeof *y);
            K->gemm[q->t.dtype](y, m, x, k, n, &q->t, m0, m);
            for (int i = 0; i < n * m; i++)
                if (fabsf(y[i] - yr[i]) > 2e-6f * (float)k * (1 + scale))
                    fail_msg("%s %s n=%d m=%d k=%d: element %d: %.8f vs scalar %.8f", K->name,
                             what, n, m, k, i, y[i], yr[i]);
            checked++;
        }
        free(x);
        free(y);
        free(yr);
    }
    return checked;
}

static void test_known_blocks(void **state) {
    (void)state;
    /* Q4_0: byte j holds element j (low nibble) and j + 16 (high) */
    hr_block_q4_0 b4 = {.d = hr_f32_to_f16(0.5f)};
    for (int j = 0; j < 16; j++)
        b4.qs[j] = (uint8_t)(j | (15 - j) << 4);
    hr_tensor t = {.dtype = HR_DTYPE_Q4_0, .ndim = 2, .shape = {1, 32}, .data = &b4};
    float out[256];
    hr_dequant_range(&t, 0, 0, 32, out);
    assert_float_equal(out[0], -4.0, 0);
    assert_float_equal(out[3], -2.5, 0);
    assert_float_equal(out[16], 3.5, 0);
    assert_float_equal(out[31], -4.0, 0);
    /* Q8_0 */
    hr_block_q8_0 b8 = {.d = hr_f32_to_f16(0.25f)};
    b8.qs[5] = -128;
    b8.qs[6] = 127;
    t.dtype = HR_DTYPE_Q8_0;
    t.data = &b8;
    hr_dequant_range(&t, 0, 0, 32, out);
    assert_float_equal(out[5], -32.0, 0);
    assert_float_equal(out[6], 31.75, 0);
    /* Q4_K: sub-block 5's 6-bit scale/min live split over scales[1], [9] */
    hr_block_q4_k bk = {.d = hr_f32_to_f16(1.0f), .dmin = hr_f32_to_f16(0.5f)};
    bk.scales[9] = 0x3 | (0x2 << 4); /* sc5 low = 3, m5 low = 2 */
    bk.scales[1] = 1u << 6;          /* sc5 high bits = 1 -> sc5 = 19 */
    bk.scales[5] = 2u << 6;          /* m5 high bits = 2 -> m5 = 34 */
    bk.qs[2 * 32 + 7] = 0x50;        /* sub-block 5 = high nibbles of bytes 64.. */
    t.dtype = HR_DTYPE_Q4_K;
    t.shape[1] = 256;
    t.data = &bk;
    hr_dequant_range(&t, 0, 0, 256, out);
    assert_float_equal(out[5 * 32 + 7], 19.0f * 5 - 0.5f * 34, 1e-6);
    assert_float_equal(out[5 * 32 + 8], -0.5f * 34, 1e-6);
    /* affine 3-bit: element i at bits [3i, 3i+3) of the row's bit stream */
    uint8_t packed[12] = {0};
    uint8_t want[32], got[32];
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    for (int i = 0; i < 32; i++) {
        want[i] = (uint8_t)(hr_rng_next(&rng) >> 61);
        unsigned bit = 3u * (unsigned)i;
        packed[bit / 8] |= (uint8_t)(want[i] << (bit % 8));
        if (bit % 8 > 5)
            packed[bit / 8 + 1] |= (uint8_t)(want[i] >> (8 - bit % 8));
    }
    hr_affine_unpack(packed, 3, 0, 32, got);
    assert_memory_equal(got, want, 32);
    hr_affine_unpack(packed, 3, 8, 8, got); /* from the second 3-byte pack */
    assert_memory_equal(got, want + 8, 8);
}

/* Quantize -> dequantize stays within each format's step. */
static void test_round_trip(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 9);
    static const hr_dtype dts[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, HR_DTYPE_Q4_1,
                                   HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K};
    /* max |error| / max |x| allowed per format (half a step, plus the
     * 6-bit scale rounding of the K-quants) */
    static const float bound[] = {0.6f / 127, 1.0f / 8, 1.0f / 15, 0.15f, 0.08f, 0.035f};
    int k = 512;
    float x[512], y[512];
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        qmat q = make_q(&rng, dts[d], 0, 0, HR_DTYPE_F32, 1, k, false);
        /* make_q drew its own x: requantize a known row instead */
        for (int i = 0; i < k; i++)
            x[i] = frand(&rng);
        hr_quant_gguf_row(dts[d], x, k, q.data);
        hr_dequant_range(&q.t, 0, 0, k, y);
        float worst = 0;
        for (int i = 0; i < k; i++)
            worst = fmaxf(worst, fabsf(x[i] - y[i]));
        printf("round trip %-5s max |err| %.4f (bound %.4f)\n", hr_dtype_name(dts[d]), worst,
               bound[d]);
        assert_true(worst <= bound[d]);
        qmat_free(&q);
    }
    for (int bits = 2; bits <= 8; bits++) {
        if (bits == 7)
            continue;
        uint8_t packed[512];
        float s[16], b[16];
        for (int i = 0; i < k; i++)
            x[i] = frand(&rng);
        hr_quant_affine_row(x, k, bits, 64, packed, s, b);
        hr_tensor t = {.dtype = HR_DTYPE_AFFINE, .ndim = 2, .shape = {1, k}, .data = packed,
                       .q = {.scales = s, .biases = b, .sdtype = HR_DTYPE_F32, .bits = bits,
                             .group = 64}};
        hr_dequant_range(&t, 0, 0, k, y);
        /* mlx anchors the grid at the larger-magnitude end (scale = edge /
         * q0), so the far end may be clipped by up to about half a step
         * more than the rounding's half step */
        float worst = 0;
        for (int i = 0; i < k; i++)
            worst = fmaxf(worst, fabsf(x[i] - y[i]) / fabsf(s[i / 64]));
        printf("round trip affine %d-bit g64: max |err| = %.3f steps\n", bits, worst);
        assert_true(worst <= 1.001f);
    }
}

static void test_gemm_quant_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 3);
    int checked = 0;
    static const int ms[] = {1, 5, 33, 70};
    /* ggml types: quantizer-made and random blocks */
    static const hr_dtype dts[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, HR_DTYPE_Q4_1,
                                   HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        int be, bb;
        hr_dtype_block(dts[d], &be, &bb);
        int ks[] = {be, 3 * be, be == 32 ? 640 : 768};
        for (int raw = 0; raw < 2; raw++)
            for (size_t a = 0; a < 4; a++)
                for (size_t c = 0; c < 3; c++) {
                    if (raw && be == 32)
                        continue;
                    qmat q = make_q(&rng, dts[d], 0, 0, HR_DTYPE_F32, ms[a], ks[c], raw);
                    checked += compare_isas(&rng, &q, hr_dtype_name(dts[d]));
                    qmat_free(&q);
                }
    }
    /* affine: every bit width, group size and scale dtype */
    static const int groups[] = {32, 64, 128};
    static const hr_dtype sdts[] = {HR_DTYPE_BF16, HR_DTYPE_F16, HR_DTYPE_F32};
    for (int bits = 2; bits <= 8; bits++) {
        if (bits == 7)
            continue;
        for (size_t g = 0; g < 3; g++)
            for (size_t a = 0; a < 4; a += 2) {
                char what[64];
                snprintf(what, sizeof what, "affine %d-bit g%d", bits, groups[g]);
                qmat q = make_q(&rng, HR_DTYPE_AFFINE, bits, groups[g], sdts[(bits + g) % 3],
                                ms[a + 1], 2 * groups[g] + 256, false);
                checked += compare_isas(&rng, &q, what);
                qmat_free(&q);
            }
    }
    printf("quantized gemm: %d ISA/format/shape combinations match the scalar reference\n",
           checked);
    assert_true(checked > 0 || !hr_cpu_isa(HR_ISA_AVX2));
}

/* hr_matmul over threads: same result as one thread, and the scalar
 * reference equals an explicit dequantize-then-dot. */
static void test_matmul_quant_threads(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 17);
    int n = 9, m = 70, k = 256;
    qmat q = make_q(&rng, HR_DTYPE_AFFINE, 4, 64, HR_DTYPE_BF16, m, k, false);
    float *x = malloc((size_t)n * k * sizeof *x), *wf = malloc((size_t)m * k * sizeof *wf);
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    for (int j = 0; j < m; j++)
        hr_dequant_range(&q.t, j, 0, k, wf + (size_t)j * k);
    float *y1 = malloc((size_t)n * m * sizeof *y1), *y3 = malloc((size_t)n * m * sizeof *y3);
    hr_pool *p3 = hr_pool_new(3);
    assert_true(hr_matmul_supports(HR_DTYPE_AFFINE));
    hr_matmul(NULL, y1, m, x, k, n, &q.t, NULL);
    hr_matmul(p3, y3, m, x, k, n, &q.t, NULL);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            float ref = 0;
            for (int t = 0; t < k; t++)
                ref += x[i * k + t] * wf[(size_t)j * k + t];
            assert_float_equal(y1[i * m + j], ref, 1e-4);
            assert_float_equal(y3[i * m + j], y1[i * m + j], 0);
        }
    hr_pool_free(p3);
    qmat_free(&q);
    free(x);
    free(wf);
    free(y1);
    free(y3);
}

/* hr_quant_affine_row reproduces mlx's CPU quantize bit for bit on the
 * fixtures of tools/refgen/quant_ref.py (a numpy transcription of
 * mlx/backend/cpu/quantized.cpp `quantize`). */
static void test_affine_matches_mlx(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant/affine_ref.safetensors",
             root ? root : ".");
    hr_st_file *f = NULL;
    hr_error err = {0};
    if (hr_st_open(&f, path, &err))
        fail_msg("%s", err.msg);
    const hr_tensor *x = hr_st_find(f, "x");
    assert_non_null(x);
    int rows = (int)x->shape[0], cols = (int)x->shape[1], checked = 0;
    for (int bits = 2; bits <= 8; bits++)
        for (int group = 32; group <= 128; group *= 2) {
            char nm[64];
            snprintf(nm, sizeof nm, "b%d_g%d.weight", bits, group);
            const hr_tensor *w = hr_st_find(f, nm);
            if (bits == 7) {
                assert_null(w);
                continue;
            }
            snprintf(nm, sizeof nm, "b%d_g%d.scales", bits, group);
            const hr_tensor *sc = hr_st_find(f, nm);
            snprintf(nm, sizeof nm, "b%d_g%d.biases", bits, group);
            const hr_tensor *bi = hr_st_find(f, nm);
            assert_non_null(w);
            assert_non_null(sc);
            assert_non_null(bi);
            size_t pb = (size_t)cols * bits / 8;
            uint8_t *packed = malloc(pb);
            float s[8], b[8];
            for (int r = 0; r < rows; r++) {
                hr_quant_affine_row((const float *)x->data + (size_t)r * cols, cols, bits, group,
                                    packed, s, b);
                if (memcmp(packed, (const uint8_t *)w->data + r * pb, pb))
                    fail_msg("%d-bit group %d row %d: packing differs from mlx's", bits, group, r);
                assert_memory_equal(s, (const float *)sc->data + r * (cols / group),
                                    (size_t)(cols / group) * sizeof(float));
                assert_memory_equal(b, (const float *)bi->data + r * (cols / group),
                                    (size_t)(cols / group) * sizeof(float));
                checked++;
            }
            free(packed);
        }
    printf("affine quantize: %d rows bit-identical to the mlx reference\n", checked);
    hr_st_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_blocks),
        cmocka_unit_test(test_affine_matches_mlx),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_gemm_quant_isas),
        cmocka_unit_test(test_matmul_quant_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
