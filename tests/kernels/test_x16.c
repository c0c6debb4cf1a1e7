/* The x16 layout (x16.h) and its kernels: packing keeps every weight's
 * value bit for bit (the read-back and the dequantization equal the row
 * layout's, bit for bit), the x16 activation quantizer is bit-identical across ISAs and
 * agrees with hr_qact_row, the scalar x16 kernel stays within the
 * activation rounding bound of the f32 product, every ISA's x16 kernel
 * gives the scalar kernel's bits exactly (qdot.h), and hr_matmul on a
 * repacked weight is batch-invariant on 1 or 3 threads. 4- and 8-bit MLX
 * affine weights are repacked (a unit per group) with the same values. The 24-bit
 * activations (3 digits) are checked the same way, and their products are
 * f32-grade. main packs under HR_QACT_INT8; `--default` runs the hr_matmul
 * tests under HR_QACT_DEFAULT (MLX affine matrices take 3 digits). */
#include "core/pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/x16.h"

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

/* The x16 formats: the GGUF types, then MLX affine (bf16 scales, as
 * mlx-community models) at 4 and 8 bits and groups of 32, 64, 128. The
 * activation side (qdot.h's off, group) depends on the dtype only. */
typedef struct fmt {
    hr_dtype t;
    int bits, group;
} fmt;
static const fmt FMTS[] = {
    {HR_DTYPE_Q8_0, 0, 0},   {HR_DTYPE_Q4_0, 0, 0},   {HR_DTYPE_Q4_1, 0, 0},
    {HR_DTYPE_Q4_K, 0, 0},   {HR_DTYPE_Q5_K, 0, 0},   {HR_DTYPE_Q6_K, 0, 0},
    {HR_DTYPE_AFFINE, 4, 32}, {HR_DTYPE_AFFINE, 4, 64}, {HR_DTYPE_AFFINE, 4, 128},
    {HR_DTYPE_AFFINE, 8, 32}, {HR_DTYPE_AFFINE, 8, 64}, {HR_DTYPE_AFFINE, 8, 128},
};
#define NFMTS (sizeof FMTS / sizeof FMTS[0])
#define NGGUF 6 /* the first NGGUF are GGUF types */

static bool kquant(hr_dtype t) {
    return t == HR_DTYPE_Q4_K || t == HR_DTYPE_Q5_K || t == HR_DTYPE_Q6_K;
}

/* an m x k matrix of format f (raw: random K-quant bytes, not quantizer-made) */
static qmat make_f(hr_rng *rng, const fmt *f, int m, int k, bool raw) {
    bool a = f->t == HR_DTYPE_AFFINE;
    return make_q(rng, f->t, f->bits, f->group, a ? HR_DTYPE_BF16 : HR_DTYPE_F32, m, k,
                  raw && kquant(f->t));
}

static const char *fmt_name(const fmt *f) {
    static char buf[16];
    if (f->t != HR_DTYPE_AFFINE)
        return hr_dtype_name(f->t);
    snprintf(buf, sizeof buf, "A%dg%d", f->bits, f->group);
    return buf;
}

/* w repacked into a new tensor (data owned by *mem) */
static hr_tensor packed(const hr_tensor *w, void **mem) {
    hr_tensor p = *w;
    *mem = malloc(hr_x16_bytes(w));
    assert_true(hr_x16_pack(w, 0, w->shape[0] / 16, *mem));
    p.data = *mem;
    p.nbytes = hr_x16_bytes(w);
    p.layout = HR_LAYOUT_X16;
    return p;
}

/* The activation digits hr_matmul_pack gives MLX affine matrices in this
 * run (main): 1 under HR_QACT_INT8, 3 under the default (`test_x16
 * --default`, ctest test_x16_default); GGUF ones always take 1. */
static int g_digits = 1;

/* t repacked for the kernels as a model load does (hr_matmul_packed_bytes,
 * hr_matmul_pack) into *mem (the caller frees it): 1, or 0 when it stays
 * as it is (*mem NULL) */
static int prepare(hr_tensor *t, void **mem) {
    hr_quant_act qa = g_digits == 1 ? HR_QACT_INT8 : HR_QACT_DEFAULT;
    size_t bytes = hr_matmul_packed_bytes(t, qa);
    *mem = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    if (bytes && !hr_matmul_pack(t, *mem, qa)) {
        free(*mem);
        *mem = NULL;
    }
    return *mem != NULL;
}


static int digits_of(hr_dtype t) { return t == HR_DTYPE_AFFINE ? g_digits : 1; }

/* n rows of activations quantized for the x16 kernels of dtype t, in D
 * digits (1: int8; 3: 24-bit) by K's quantizer, or the scalar one */
typedef struct qx {
    hr_qact32 a;
    int8_t *q, *sd;
    float *d, *s;
    int32_t *c;
} qx;

/* (int8, the K-quants: their 256-blocks, as hr_matmul quantizes them) */
static qx quantize_d(const hr_cpu_kernels *K, const float *x, int n, int k, hr_dtype t, int D) {
    int G = hr_qdot_group(t), off = hr_qdot_offset(t);
    int B = D == 1 ? hr_qdot_act_block(t) : 32;
    qx r = {.q = malloc((size_t)n * k * D), .d = malloc((size_t)n * k / B * 4),
            .s = B == 32 ? malloc((size_t)n * k / 32 * 4) : NULL,
            .sd = B == 256 ? malloc((size_t)n * k / 16) : NULL,
            .c = malloc((size_t)n * k / G * 4 * D)};
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * k;
        float *d = r.d + (size_t)i * k / B;
        int32_t *c = r.c + (size_t)i * D * (k / G);
        int8_t *q = r.q + (size_t)i * D * k;
        if (B == 256)
            (K ? K->qactk_row : hr_qactk_row)(xi, k, off, G, q, d, c, r.sd + (size_t)i * k / 16);
        else if (D == 3)
            (K ? K->qact24_row : hr_qact24_row)(xi, k, off, G, q, d, c, r.s + (size_t)i * k / 32);
        else
            (K ? K->qact32_row : hr_qact32_row)(xi, k, off, G, q, d, c, r.s + (size_t)i * k / 32);
    }
    r.a = (hr_qact32){.q = r.q, .d = r.d, .s = r.s, .sd = r.sd, .c = r.c, .k = k, .group = G,
                      .digits = D, .block = B};
    return r;
}

static qx quantize(const hr_cpu_kernels *K, const float *x, int n, int k, hr_dtype t) {
    return quantize_d(K, x, n, k, t, 1);
}

static void qx_free(qx *r) {
    free(r->q);
    free(r->sd);
    free(r->d);
    free(r->s);
    free(r->c);
}

/* Row by row and block by block, the packed tensor reads back the same
 * u, sw, mn (bits) and dequantizes to the same floats. */
static void test_pack_exact(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 61);
    for (size_t d = 0; d < NFMTS; d++)
        for (int raw = 0; raw < 2; raw++) {
            int m = 48, k = 512;
            qmat w = make_f(&rng, &FMTS[d], m, k, raw);
            void *mem;
            hr_tensor p = packed(&w.t, &mem);
            assert_int_equal(p.nbytes, (size_t)(m / 16) * (k / hr_x16_unit_cols(&w.t)) *
                                           hr_x16_unit_bytes(&w.t));
            /* as many bytes as the file's (affine: 16-bit scales and biases) */
            if (FMTS[d].t == HR_DTYPE_AFFINE)
                assert_int_equal(p.nbytes, hr_tensor_bytes(&w.t));
            float a[512], b[512];
            for (int j = 0; j < m; j++) {
                for (int blk = 0; blk < k / 32 && d < NGGUF; blk++) {
                    uint8_t u0[32], u1[32];
                    float sw0[2], sw1[2], mn0[2], mn1[2];
                    hr_qdot_block(&w.t, j, blk, u0, sw0, mn0);
                    hr_qdot_block(&p, j, blk, u1, sw1, mn1);
                    if (memcmp(u0, u1, 32) || memcmp(sw0, sw1, 8) || memcmp(mn0, mn1, 8))
                        fail_msg("%s row %d block %d differs after packing",
                                 fmt_name(&FMTS[d]), j, blk);
                }
                for (int sb = 0; sb < k / 256 && kquant(FMTS[d].t); sb++) {
                    int sc0[16] = {0}, sc1[16] = {0}, m0[8] = {0}, m1[8] = {0};
                    float dd0[2], dd1[2];
                    hr_qdot_kscales(&w.t, j, sb, sc0, m0, dd0);
                    hr_qdot_kscales(&p, j, sb, sc1, m1, dd1);
                    if (memcmp(sc0, sc1, sizeof sc0) || memcmp(m0, m1, sizeof m0) ||
                        memcmp(dd0, dd1, sizeof dd0))
                        fail_msg("%s row %d super-block %d: scales differ after packing",
                                 fmt_name(&FMTS[d]), j, sb);
                }
                hr_dequant_range(&w.t, j, 0, k, a);
                hr_dequant_range(&p, j, 0, k, b);
                for (int e = 0; e < k; e++)
                    if (memcmp(&a[e], &b[e], 4))
                        fail_msg("%s row %d column %d: %g vs %g", fmt_name(&FMTS[d]), j, e,
                                 b[e], a[e]);
                hr_dequant_range(&p, j, 37, 100, b); /* a range inside blocks */
                assert_memory_equal(a + 37, b, 100 * sizeof *b);
            }
            free(mem);
            qmat_free(&w);
        }
}

/* The x16 quantizer: every ISA's bits equal the scalar one's; q and d are
 * hr_qact_row's (the K-quants': the same rounding over 256-blocks, a zero
 * one all zeros); c, s and sd are the sums they are defined as. */
static void test_qact32(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 67);
    int k = 768;
    float x[768];
    for (int i = 0; i < k; i++)
        x[i] = frand(&rng) * (i % 53 == 0 ? 30.0f : 1.0f);
    for (int i = 64; i < 96; i++)
        x[i] = 0; /* a zero block */
    for (int i = 512; i < 768; i++)
        x[i] = 0; /* a zero super-block */
    int8_t q4[768];
    float d4[192], s4[192];
    int32_t c4[192];
    hr_qact_row(x, k, 0, q4, d4, c4, s4);
    for (size_t d = 0; d < NGGUF; d++) {
        qx r = quantize(NULL, x, 1, k, FMTS[d].t);
        int G = r.a.group, off = hr_qdot_offset(FMTS[d].t), B = r.a.block;
        assert_int_equal(B, kquant(FMTS[d].t) ? 256 : 32);
        if (B == 32)
            assert_memory_equal(r.q, q4, (size_t)k);
        for (int b = 0; b < k / B; b++) {
            float amax = 0;
            for (int e = 0; e < B; e++)
                amax = fmaxf(amax, fabsf(x[B * b + e]));
            assert_true(r.d[b] == amax / 127.0f);
            for (int e = B * b; e < B * (b + 1); e++) {
                assert_true(abs(r.q[e]) <= 127);
                if (amax > 0)
                    assert_true(fabsf(r.q[e] - x[e] * (127.0f / amax)) <= 0.5f + 1e-4f);
                else
                    assert_int_equal(r.q[e], 0);
            }
        }
        for (int b = 0; b < k / 32; b++) {
            int sum = 0;
            for (int e = 0; e < 32; e++)
                sum += r.q[32 * b + e];
            if (B == 32) {
                assert_true(r.d[b] == d4[8 * b]);
                assert_true(r.s[b] == r.d[b] * (float)sum);
            } else {
                int hi = r.sd[16 * (b / 8) + b % 8], lo = r.sd[16 * (b / 8) + 8 + b % 8];
                assert_int_equal(256 * hi + lo, sum);
            }
        }
        for (int g = 0; g < k / G; g++) {
            int sum = 0;
            for (int e = 0; e < G; e++)
                sum += r.q[G * g + e];
            assert_int_equal(r.c[g], -off * sum);
        }
        for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
            const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
            if (!K || !K->qact32_row)
                continue;
            qx v = quantize(K, x, 1, k, FMTS[d].t);
            assert_memory_equal(v.q, r.q, (size_t)k);
            assert_memory_equal(v.d, r.d, (size_t)k / B * 4);
            if (B == 32)
                assert_memory_equal(v.s, r.s, (size_t)k / 32 * 4);
            else
                assert_memory_equal(v.sd, r.sd, (size_t)k / 16);
            assert_memory_equal(v.c, r.c, (size_t)k / G * 4);
            qx_free(&v);
        }
        qx_free(&r);
    }
    /* groups of 16 (no format quantizes 32-blocks with them today, qdot.h
     * allows them): every ISA's c per 16 columns, the rest as with 32 */
    int8_t q16[768], qv[768];
    float d16[24], s16[24], dv[24], sv[24];
    int32_t c16[48], cv[48];
    hr_qact32_row(x, k, 3, 16, q16, d16, c16, s16);
    for (int g = 0; g < k / 16; g++) {
        int sum = 0;
        for (int e = 0; e < 16; e++)
            sum += q16[16 * g + e];
        assert_int_equal(c16[g], -3 * sum);
    }
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K || !K->qact32_row)
            continue;
        K->qact32_row(x, k, 3, 16, qv, dv, cv, sv);
        assert_memory_equal(qv, q16, sizeof qv);
        assert_memory_equal(dv, d16, sizeof dv);
        assert_memory_equal(sv, s16, sizeof sv);
        assert_memory_equal(cv, c16, sizeof cv);
    }
}

/* The 24-bit quantizer: the digits are in [-128, 127] and spell x_int =
 * 2^16 hi + 2^8 mid + lo = round(x / d) with d = max|x| / H; s and c are
 * the sums they are defined as; a zero block is all zeros; every ISA's
 * quantizer gives these bits (also for NaN and infinities). */
static void test_qact24(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 68);
    enum { K = 768, H = 8355711 };
    float x[K];
    for (int i = 0; i < K; i++)
        x[i] = frand(&rng) * (i % 53 == 0 ? 30.0f : 1.0f) * (i >= 512 ? 1e-30f : 1.0f);
    for (int i = 64; i < 96; i++)
        x[i] = 0; /* a zero block */
    x[100] = -x[101] * 0; /* a negative zero */
    x[130] = NAN;          /* NaN -> -H */
    x[200] = 1e-38f;       /* a block of tiny values: H / max overflows, x * id = inf -> H */
    for (int i = 192; i < 224; i++)
        x[i] = i == 200 ? 1e-38f : 0.0f;
    x[300] = INFINITY;     /* d = inf, id = 0: the other values go to 0, inf * 0 = NaN -> -H */
    for (size_t dt = 0; dt < NGGUF; dt++) {
        qx r = quantize_d(NULL, x, 1, K, FMTS[dt].t, 3);
        int G = r.a.group, off = hr_qdot_offset(FMTS[dt].t);
        const int8_t *hi = r.q, *mid = r.q + K, *lo = r.q + 2 * K;
        for (int b = 0; b < K / 32; b++) {
            float amax = 0; /* NaNs ignored */
            bool plain = true; /* finite, no NaN, H / max finite */
            for (int e = 0; e < 32; e++) {
                amax = fmaxf(amax, fabsf(x[32 * b + e]));
                plain = plain && isfinite(x[32 * b + e]);
            }
            plain = plain && isfinite((float)H / amax);
            assert_true(r.d[b] == amax / (float)H);
            long sum = 0;
            for (int e = 32 * b; e < 32 * b + 32; e++) {
                long xi = 65536L * hi[e] + 256L * mid[e] + lo[e];
                assert_true(labs(xi) <= H);
                if (e == 130 || e == 300)
                    assert_true(xi == -H);
                else if (e == 200)
                    assert_true(xi == H);
                else if (plain) /* round(x / d), up to the rounding of x * (H / amax) */
                    assert_true(fabs((double)xi - (double)x[e] / r.d[b]) <= 0.5 + 1e-6 * H);
                else if (amax == 0 || b == 9)
                    assert_true(xi == 0);
                sum += xi;
            }
            if (b != 9) /* d = inf there, s = -inf */
                assert_true(r.s[b] == r.d[b] * (float)sum);
        }
        for (int j = 0; j < 3; j++)
            for (int g = 0; g < K / G; g++) {
                int sum = 0;
                for (int e = 0; e < G; e++)
                    sum += r.q[j * K + G * g + e];
                assert_int_equal(r.c[j * (K / G) + g], -off * sum);
            }
        for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
            const hr_cpu_kernels *I = hr_cpu_isa((hr_isa)isa);
            if (!I || !I->qact24_row)
                continue;
            qx v = quantize_d(I, x, 1, K, FMTS[dt].t, 3);
            assert_memory_equal(v.q, r.q, (size_t)K * 3);
            assert_memory_equal(v.d, r.d, (size_t)K / 32 * 4);
            assert_memory_equal(v.s, r.s, (size_t)K / 32 * 4);
            assert_memory_equal(v.c, r.c, (size_t)K / G * 4 * 3);
            qx_free(&v);
        }
        qx_free(&r);
    }
}

/* The scalar x16 kernel against the f32 product: with int8 activations
 * within the activation rounding, sum_t |w_t| * d_t / 2 (plus f32 slack);
 * with 24-bit ones within 2^-20 of sum_t |x_t w_t|, as f32 is (the plain
 * f32 loop's error is printed beside it). */
static void test_scalar_bound(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 71);
    int n = 3, m = 16, k = 768;
    float *x = malloc((size_t)n * k * sizeof *x), y[48];
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng) * (i % 97 == 0 ? 20.0f : 1.0f);
    float *wf = malloc((size_t)k * sizeof *wf);
    for (size_t d = 0; d < NFMTS; d++) {
        hr_dtype t = FMTS[d].t;
        qx a = quantize(NULL, x, n, k, t), a3 = quantize_d(NULL, x, n, k, t, 3);
        qmat w = make_f(&rng, &FMTS[d], m, k, false);
        void *mem;
        hr_tensor p = packed(&w.t, &mem);
        hr__gemm_x16_scalar(y, m, &a.a, n, &p, 0, m);
        double worst = check_rounding_bound(x, n, k, &w.t, m, y, a.d, a.a.block);
        hr__gemm_x16_scalar(y, m, &a3.a, n, &p, 0, m);
        double w24 = 0, w32 = 0; /* worst |error| / sum |x w|: 24-bit, plain f32 */
        for (int j = 0; j < m; j++) {
            hr_dequant_range(&w.t, j, 0, k, wf);
            for (int i = 0; i < n; i++) {
                double ref = 0, mag = 0;
                float f = 0;
                for (int t = 0; t < k; t++) {
                    ref += (double)x[i * k + t] * wf[t];
                    mag += fabs((double)x[i * k + t] * wf[t]);
                    f += x[i * k + t] * wf[t];
                }
                w24 = fmax(w24, fabs(y[i * m + j] - ref) / mag);
                w32 = fmax(w32, fabs(f - ref) / mag);
            }
        }
        printf("%-4s: int8 x16 path within %.2f of the activation rounding bound; 24-bit "
               "within %.1e of sum |x w| (plain f32 %.1e)\n", fmt_name(&FMTS[d]), worst, w24,
               w32);
        assert_true(w24 <= 0x1p-20);
        free(mem);
        qmat_free(&w);
        qx_free(&a);
        qx_free(&a3);
    }
    free(wf);
    free(x);
}

/* Every ISA's x16 kernel gives the scalar kernel's bits, for the row counts
 * the tiles treat apart, odd and even panel counts, m0 > 0, k in several
 * L1 slices, and on random K-quant blocks. */
static void test_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 73);
    static const int ns[] = {1, 2, 3, 4, 5, 7, 13};
    static const int ms[] = {16, 48, 80};
    static const int ks[] = {256, 3072};
    int checked = 0;
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        for (size_t d = 0; d < NFMTS && K; d++) {
            hr_dtype t = FMTS[d].t;
            if (!K->gemm_x16[t])
                continue;
            for (int raw = 0; raw < 2; raw++)
                for (size_t ki = 0; ki < 2; ki++)
                    for (size_t mi = 0; mi < 3; mi++) {
                        int k = ks[ki], m = ms[mi], m0 = m > 16 ? 16 : 0;
                        qmat w = make_f(&rng, &FMTS[d], m, k, raw);
                        void *mem;
                        hr_tensor p = packed(&w.t, &mem);
                        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                            int n = ns[ni];
                            float *x = malloc((size_t)n * k * sizeof *x);
                            for (int i = 0; i < n * k; i++)
                                x[i] = frand(&rng);
                            float *yr = calloc((size_t)n * m, sizeof *yr);
                            float *y = calloc((size_t)n * m, sizeof *y);
                            /* 24-bit activations: MLX affine only */
                            for (int D = 1; D <= (t == HR_DTYPE_AFFINE ? 3 : 1); D += 2) {
                                qx a = quantize_d(NULL, x, n, k, t, D);
                                hr__gemm_x16_scalar(yr, m, &a.a, n, &p, m0, m);
                                K->gemm_x16[t](y, m, &a.a, n, &p, m0, m);
                                for (int i = 0; i < n * m; i++)
                                    if (memcmp(&y[i], &yr[i], 4))
                                        fail_msg("%s %s %d digits n %d m %d k %d: output %d: "
                                                 "%.9g vs scalar %.9g", K->name,
                                                 fmt_name(&FMTS[d]), D, n, m, k, i, y[i],
                                                 yr[i]);
                                checked++;
                                qx_free(&a);
                            }
                            free(x);
                            free(y);
                            free(yr);
                        }
                        free(mem);
                        qmat_free(&w);
                    }
        }
    }
    printf("x16 kernels: %d ISA x format x shape x digits combinations equal the scalar "
           "bits\n",
           checked);
}

/* hr_matmul on a weight hr_matmul_pack repacked: on 1 or 3 threads, row
 * by row or all rows at once, every output is bit-identical. */
static void test_batch_invariance(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 79);
    int n = 13, m = 80, k = 512;
    hr_pool *p3 = hr_pool_new(3);
    /* reserved up front, the scratch is never reallocated by a product */
    assert_true(hr_matmul_reserve(p3, n, k));
    void *scratch = hr_pool_scratch(p3, 1);
    float *x = malloc((size_t)n * k * sizeof *x);
    float *all = malloc((size_t)n * m * sizeof *all), *one = malloc((size_t)m * sizeof *one);
    float *all3 = malloc((size_t)n * m * sizeof *all3);
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    for (size_t d = 0; d < NFMTS; d++) {
        qmat w = make_f(&rng, &FMTS[d], m, k, false);
        hr_tensor t = w.t;
        void *mem;
        if (prepare(&t, &mem) != 1) {
            qmat_free(&w);
            continue; /* no x16 kernels on this CPU */
        }
        assert_int_equal(t.act_digits, digits_of(w.t.dtype));
        hr_matmul(NULL, all, m, x, k, n, &t, NULL);
        hr_matmul(p3, all3, m, x, k, n, &t, NULL);
        assert_memory_equal(all, all3, (size_t)n * m * sizeof *all);
        for (int i = 0; i < n; i++) {
            hr_matmul(p3, one, m, x + (size_t)i * k, k, 1, &t, NULL);
            assert_memory_equal(one, all + (size_t)i * m, (size_t)m * sizeof *one);
        }
        assert_ptr_equal(hr_pool_scratch(p3, 1), scratch);
        free(mem);
        qmat_free(&w);
    }
    hr_pool_free(p3);
    free(x);
    free(all);
    free(all3);
    free(one);
}

/* hr_matmul_multi: products of one x as one job give each product's
 * hr_matmul bits, for x16 and row layouts, ragged groups, biases, and a
 * list whose dtypes change (split into jobs). */
static void test_multi(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 89);
    int n = 5, k = 512;
    static const int ms[] = {48, 16, 80};
    hr_pool *p3 = hr_pool_new(3);
    float *x = malloc((size_t)n * k * sizeof *x), bias[80];
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    for (int i = 0; i < 80; i++)
        bias[i] = frand(&rng);
    for (int pack = 0; pack < 2; pack++)
        for (int mixed = 0; mixed < 2; mixed++) {
            qmat w[3];
            hr_tensor t[3];
            void *mem[3] = {0};
            float *y[3], *ref[3];
            hr_matmul_out out[3];
            for (int i = 0; i < 3; i++) {
                /* the default run: MLX affine, 24-bit activations; mixed:
                 * 8 bits among 4 (two jobs) */
                hr_dtype dt = mixed && i == 1 ? HR_DTYPE_Q6_K : HR_DTYPE_Q4_K;
                if (g_digits == 3)
                    w[i] = make_q(&rng, HR_DTYPE_AFFINE, mixed && i == 1 ? 8 : 4, 64,
                                  HR_DTYPE_BF16, ms[i], k, false);
                else
                    w[i] = make_q(&rng, dt, 0, 0, HR_DTYPE_F32, ms[i], k, false);
                t[i] = w[i].t;
                if (pack)
                    prepare(&t[i], &mem[i]);
                y[i] = malloc((size_t)n * ms[i] * sizeof *y[i]);
                ref[i] = malloc((size_t)n * ms[i] * sizeof *ref[i]);
                out[i] = (hr_matmul_out){y[i], ms[i], &t[i], i == 2 ? bias : NULL};
                hr_matmul(p3, ref[i], ms[i], x, k, n, &t[i], out[i].bias);
            }
            hr_matmul_multi(p3, x, k, n, 3, out);
            for (int i = 0; i < 3; i++) {
                assert_memory_equal(y[i], ref[i], (size_t)n * ms[i] * sizeof *y[i]);
                free(y[i]);
                free(ref[i]);
                free(mem[i]);
                qmat_free(&w[i]);
            }
        }
    hr_pool_free(p3);
    free(x);
}

/* A 4- or 8-bit affine matrix with f16-exact scales and biases (bf16 or
 * f16 storage; groups of 32, 64, 128) is repacked into the x16 layout,
 * with this run's activation digits, whose every value is the affine one,
 * bit for bit, and whose product is within the activation rounding bound;
 * f32 scales (not exact in f16) and 3-bit weights keep the row layout. */
static void test_affine(void **state) {
    (void)state;
    if (!hr_cpu()->gemm_x16[HR_DTYPE_AFFINE]) {
        printf("skipped: this CPU (%s kernels) has no x16 kernels for MLX affine weights\n",
               hr_cpu()->name);
        skip();
    }
    hr_rng rng;
    hr_rng_seed(&rng, 97);
    int n = 3, m = 48, k = 512;
    float *x = malloc((size_t)n * k * sizeof *x), *y = malloc((size_t)n * m * sizeof *y);
    float a[512], b[512];
    for (int i = 0; i < n * k; i++)
        x[i] = frand(&rng);
    static const hr_dtype sdts[] = {HR_DTYPE_BF16, HR_DTYPE_F16};
    static const int groups[] = {32, 64, 128};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int s = 0; s < 2; s++)
            for (int g = 0; g < 3; g++) {
                qmat w = make_q(&rng, HR_DTYPE_AFFINE, bits, groups[g], sdts[s], m, k, false);
                hr_tensor t = w.t;
                void *mem;
                assert_int_equal(prepare(&t, &mem), 1);
                assert_int_equal(t.dtype, HR_DTYPE_AFFINE);
                assert_int_equal(t.layout, HR_LAYOUT_X16);
                assert_int_equal(t.act_digits, g_digits);
                for (int j = 0; j < m; j++) {
                    hr_dequant_range(&w.t, j, 0, k, a);
                    hr_dequant_range(&t, j, 0, k, b);
                    if (memcmp(a, b, sizeof a))
                        fail_msg("affine %d-bit %s group %d row %d: values differ in x16", bits,
                                 hr_dtype_name(sdts[s]), groups[g], j);
                }
                qx q = quantize_d(NULL, x, n, k, HR_DTYPE_AFFINE, g_digits);
                hr_matmul(NULL, y, m, x, k, n, &t, NULL);
                double worst = check_rounding_bound(x, n, k, &w.t, m, y, q.d, 32);
                printf("affine %d-bit %s g%-3d in x16, %d digits: within %.2f of the activation "
                       "rounding bound\n", bits, hr_dtype_name(sdts[s]), groups[g], g_digits,
                       worst);
                qx_free(&q);
                free(mem);
                qmat_free(&w);
            }
    static const struct {
        int bits;
        hr_dtype sdt;
    } kept[] = {{4, HR_DTYPE_F32}, {8, HR_DTYPE_F32}, {3, HR_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        qmat w = make_q(&rng, HR_DTYPE_AFFINE, kept[i].bits, 64, kept[i].sdt, m, k, false);
        hr_tensor t = w.t;
        void *mem;
        assert_int_equal(prepare(&t, &mem), 0);
        assert_memory_equal(&t, &w.t, sizeof t);
        qmat_free(&w);
    }
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    /* one run checks what hr_matmul_pack makes under one setting */
    if (argc > 1 && !strcmp(argv[1], "--default")) {
        g_digits = 3;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_batch_invariance),
            cmocka_unit_test(test_multi),
            cmocka_unit_test(test_affine),
        };
        return cmocka_run_group_tests_name("x16_default", tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_exact),
        cmocka_unit_test(test_qact32),
        cmocka_unit_test(test_qact24),
        cmocka_unit_test(test_scalar_bound),
        cmocka_unit_test(test_isas),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_affine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
