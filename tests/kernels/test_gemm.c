/* Every ISA's kernels against the scalar reference, on shapes with tails. */
#include "core/pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/membw.h"
#include "kernels/cpu/ops.h"
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

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

static void *make_weights(hr_rng *r, hr_dtype dt, int m, int k) {
    size_t n = (size_t)m * k;
    void *w = malloc(n * hr_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = frand(r);
        if (dt == HR_DTYPE_F32)
            ((float *)w)[i] = v;
        else if (dt == HR_DTYPE_BF16)
            ((uint16_t *)w)[i] = hr_f32_to_bf16(v);
        else
            ((uint16_t *)w)[i] = hr_f32_to_f16(v);
    }
    return w;
}

static void check_close(const float *a, const float *b, size_t n, int k, const char *what) {
    for (size_t i = 0; i < n; i++) {
        float tol = 1e-5f * (float)k + 1e-6f; /* |x|,|w| <= 1: error grows with k */
        if (fabsf(a[i] - b[i]) > tol)
            fail_msg("%s: element %zu: %.8f vs scalar %.8f", what, i, a[i], b[i]);
    }
}

static void test_gemm_isas(void **state) {
    (void)state;
    static const int ns[] = {1, 2, 3, 4, 5, 70}, ms[] = {1, 5, 16, 17, 33}, ks[] = {1, 7, 16, 33, 100};
    static const hr_dtype dts[] = {HR_DTYPE_F32, HR_DTYPE_BF16, HR_DTYPE_F16};
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    int checked = 0;
    for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K) {
            printf("isa %d not available on this CPU\n", isa);
            continue;
        }
        for (size_t di = 0; di < 3; di++)
            for (size_t a = 0; a < 6; a++)
                for (size_t b = 0; b < 5; b++)
                    for (size_t c = 0; c < 5; c++) {
                        int n = ns[a], m = ms[b], k = ks[c];
                        float *x = malloc((size_t)n * k * sizeof *x);
                        for (int i = 0; i < n * k; i++)
                            x[i] = frand(&rng);
                        void *w = make_weights(&rng, dts[di], m, k);
                        float *y = calloc((size_t)n * m, sizeof *y), *yr = calloc((size_t)n * m, sizeof *yr);
                        /* a sub-range of columns, like one thread's share */
                        int m0 = m > 4 ? 1 : 0;
                        hr_tensor wt = {.name = "w", .dtype = dts[di], .ndim = 2,
                                        .shape = {m, k}, .data = w};
                        hr__cpu_scalar.gemm[dts[di]](yr, m, x, k, n, &wt, m0, m);
                        K->gemm[dts[di]](y, m, x, k, n, &wt, m0, m);
                        char what[96];
                        snprintf(what, sizeof what, "%s %s n=%d m=%d k=%d", K->name,
                                 hr_dtype_name(dts[di]), n, m, k);
                        check_close(y, yr, (size_t)n * m, k, what);
                        /* a row's bits do not depend on the rows beside it
                         * (the tile it ran in): each row alone */
                        float *y1 = calloc((size_t)m, sizeof *y1);
                        for (int i = 0; i < n; i++) {
                            K->gemm[dts[di]](y1, m, x + (size_t)i * k, k, 1, &wt, m0, m);
                            if (memcmp(y1 + m0, y + (size_t)i * m + m0,
                                       (size_t)(m - m0) * sizeof *y1))
                                fail_msg("%s: row %d alone differs from its batch", what, i);
                        }
                        free(y1);
                        assert_float_equal(K->dot(x, x, k), hr__cpu_scalar.dot(x, x, k), 1e-4 * k);
                        free(x);
                        free(w);
                        free(y);
                        free(yr);
                        checked++;
                    }
    }
    printf("gemm: %d ISA/dtype/shape combinations match the scalar reference\n", checked);
}

/* The products on pools of 2, 3 and 70 threads (more than the 64 shares and
 * than the 16-row groups: empty shares, shared shares, threads taking from
 * the backs of others) give the one-thread bits in every row, each row
 * written (y starts as NaN), at 5 and 38 groups */
static void test_matmul_threads_bias(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 11);
    const int ms[] = {70, 16 * 37 + 5}, nths[] = {2, 3, 70};
    int n = 9, k = 48;
    for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++) {
        int m = ms[im];
        float *x = malloc((size_t)n * k * sizeof *x), *bias = malloc((size_t)m * sizeof *bias);
        for (int i = 0; i < n * k; i++)
            x[i] = frand(&rng);
        for (int i = 0; i < m; i++)
            bias[i] = frand(&rng);
        void *w = make_weights(&rng, HR_DTYPE_BF16, m, k);
        hr_tensor t = {.name = "w", .dtype = HR_DTYPE_BF16, .ndim = 2, .shape = {m, k}, .data = w};
        float *y1 = malloc((size_t)n * m * sizeof *y1), *yt = malloc((size_t)n * m * sizeof *yt);
        hr_matmul(NULL, y1, m, x, k, n, &t, bias);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                float ref = bias[j];
                for (int q = 0; q < k; q++)
                    ref += x[i * k + q] * hr_bf16_to_f32(((uint16_t *)w)[j * k + q]);
                assert_float_equal(y1[i * m + j], ref, 1e-4);
            }
        for (size_t ip = 0; ip < sizeof nths / sizeof nths[0]; ip++) {
            hr_pool *pool = hr_pool_new(nths[ip]);
            assert_non_null(pool);
            for (int i = 0; i < n * m; i++)
                yt[i] = NAN;
            hr_matmul(pool, yt, m, x, k, n, &t, bias);
            assert_memory_equal(yt, y1, (size_t)n * m * sizeof *yt);
            /* armed with its own weights: the threads prefetch them while
             * waiting, then the next product runs as before */
            for (int rep = 0; rep < 3; rep++) {
                hr_matmul_prefetch_next(pool, 1, (const hr_tensor *[]){&t});
                for (int i = 0; i < n * m; i++)
                    yt[i] = NAN;
                hr_matmul(pool, yt, m, x, k, n, &t, bias);
                assert_memory_equal(yt, y1, (size_t)n * m * sizeof *yt);
            }
            hr_pool_free(pool);
        }
        free(x);
        free(bias);
        free(w);
        free(y1);
        free(yt);
    }
}

/* Each thread's range is the start of its share of the 16-row groups
 * (run_task's split, pairs of groups), in the share's first part, to the
 * share's or the part's end, at most 256 KiB. */
static void test_matmul_prefetch_ranges(void **state) {
    (void)state;
    static char a[4 * 1000], b[6 * 1000], big[100 * 16 << 10];
    hr_tensor w0 = {.shape = {64, 8}, .data = a, .nbytes = sizeof a};   /* 4 groups */
    hr_tensor w1 = {.shape = {90, 8}, .data = b, .nbytes = sizeof b};   /* 6 (the last short) */
    hr_tensor wb = {.shape = {1600, 8}, .data = big, .nbytes = sizeof big}; /* 100 */
    const hr_tensor *two[] = {&w0, &w1};
    hr_pool_range r[64];
    /* 2 threads: groups [0, 4) of w0 and [4, 10) = w1's 6 */
    assert_int_equal(hr_matmul_prefetch_ranges(2, 2, two, r), 2);
    assert_ptr_equal(r[0].p, a);
    assert_int_equal(r[0].n, 4000);
    assert_ptr_equal(r[1].p, b);
    assert_int_equal(r[1].n, 6000);
    /* 3: [0, 2), [2, 6) from w0's third group to its end, [6, 10) from w1's third */
    assert_int_equal(hr_matmul_prefetch_ranges(3, 2, two, r), 3);
    assert_ptr_equal(r[0].p, a);
    assert_int_equal(r[0].n, 2000);
    assert_ptr_equal(r[1].p, a + 2000);
    assert_int_equal(r[1].n, 2000);
    assert_ptr_equal(r[2].p, b + 2000);
    assert_int_equal(r[2].n, 4000);
    /* 8 threads over 4 groups: some shares are empty */
    hr_matmul_prefetch_ranges(8, 1, two, r);
    for (int i = 0; i < 8; i++)
        assert_true(r[i].n == 0 || ((const char *)r[i].p >= a && (const char *)r[i].p +
                                    r[i].n <= a + sizeof a));
    assert_int_equal(r[0].n, 0); /* 4 * 0 / 8 .. 4 * 1 / 8, rounded to pairs */
    /* the cap */
    assert_int_equal(hr_matmul_prefetch_ranges(2, 1, (const hr_tensor *[]){&wb}, r), 2);
    assert_ptr_equal(r[1].p, big + 50 * (16 << 10));
    assert_int_equal(r[0].n, 256 << 10);
    assert_int_equal(r[1].n, 256 << 10);
}

static void test_row_ops(void **state) {
    (void)state;
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1}, y[4];
    hr_rmsnorm(y, x, w, 0.0f, 4, 0.0f);
    float rms = sqrtf((1 + 4 + 9 + 16) / 4.0f);
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], x[i] / rms, 1e-6);
    float z[4] = {0, 0, 0, 0};
    hr_rmsnorm(y, x, z, 1.0f, 4, 0.0f); /* gemma: w + 1 */
    assert_float_equal(y[3], 4 / rms, 1e-6);
    hr_layernorm(y, x, w, NULL, 4, 0.0f);
    assert_float_equal(y[0] + y[1] + y[2] + y[3], 0, 1e-6);
    float s[3] = {1, 2, 3};
    hr_softmax(s, 3);
    assert_float_equal(s[0] + s[1] + s[2], 1, 1e-6);
    assert_true(s[2] > s[1] && s[1] > s[0]);
    float c[2] = {100, -100};
    hr_softcap(c, 2, 30);
    assert_float_equal(c[0], 30 * tanhf(100 / 30.0f), 1e-5);
    /* rope at position 0 is the identity; a quarter turn swaps the pair */
    float h[4] = {1, 2, 3, 4}, f[2] = {1.0f, 0.0f}, cs[4];
    hr_rope_table(cs, 4, 0, f, 1.0f);
    hr_rope(h, 1, 4, 4, cs, false);
    assert_float_equal(h[0], 1, 1e-6);
    float q[4] = {1, 0, 0, 0}, fq[2] = {(float)M_PI / 2, 0};
    hr_rope_table(cs, 4, 1, fq, 1.0f);
    hr_rope(q, 1, 4, 4, cs, false); /* pair (0, 2) */
    assert_float_equal(q[0], 0, 1e-6);
    assert_float_equal(q[2], 1, 1e-6);
    float qi[4] = {1, 0, 0, 0};
    hr_rope(qi, 1, 4, 4, cs, true); /* interleaved: pair (0, 1) */
    assert_float_equal(qi[1], 1, 1e-6);
    hr_rope_table(cs, 4, 1, fq, 2.0f); /* attn_factor scales cos and sin */
    assert_float_equal(cs[2], 2, 1e-6);
    assert_float_equal(cs[3], 0, 1e-6);
    float g[2] = {1, -1}, u[2] = {2, 2};
    hr_silu_mul(g, u, 2);
    assert_float_equal(g[0], 2 / (1 + expf(-1)), 1e-6);
}

/* Every ISA's rmsnorm gives the scalar bits (lengths 1..300: every chain
 * and vector tail; in place and not; values of mixed magnitudes, a Gemma
 * offset), and is within float rounding of the norm in double */
static void test_rmsnorm_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 41);
    enum { N = 300 };
    float x[N], w[N], want[N], got[N];
    for (int d = 1; d <= N; d += d < 40 ? 1 : 37)
        for (int rep = 0; rep < 2; rep++) {
            for (int i = 0; i < d; i++) {
                x[i] = frand(&rng) * (i % 5 == 0 ? 300.0f : 1.0f);
                w[i] = frand(&rng);
            }
            float off = rep ? 1.0f : 0.0f;
            hr__rmsnorm_scalar(want, x, w, off, d, 1e-6f);
            double ss = 0;
            for (int i = 0; i < d; i++)
                ss += (double)x[i] * x[i];
            double r = 1 / sqrt(ss / d + 1e-6);
            for (int i = 0; i < d; i++)
                assert_true(fabs(want[i] - x[i] * r * (w[i] + off)) <=
                            1e-6 * fabs(x[i] * r) * (fabs(w[i]) + off) + 1e-30);
            for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
                const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                if (!K)
                    continue;
                K->rmsnorm(got, x, w, off, d, 1e-6f);
                if (memcmp(got, want, (size_t)d * sizeof *got))
                    fail_msg("%s rmsnorm d=%d differs from scalar", K->name, d);
                memcpy(got, x, (size_t)d * sizeof *got);
                K->rmsnorm(got, got, w, off, d, 1e-6f); /* in place (q/k norms) */
                assert_memory_equal(got, want, (size_t)d * sizeof *got);
            }
        }
}

/* Every ISA's silu_mul against the same in double: within 5e-7 relative
 * plus 3e-36 absolute over g in [-100, 100] (below -87.3 the result, under
 * 2e-36 with |u| <= 2, may flush to 0: e^-g overflows a float, or e^g is
 * below FLT_MIN), every length 1..40 (the vector tails), with and without
 * u; each element's bits are those of a call on it alone; +inf stays
 * +inf, NaN stays NaN. */
static void test_silu(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 11);
    float g[40], u[40], y[40];
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        double worst = 0;
        for (int rep = 0; rep < 200; rep++)
            for (int n = 1; n <= 40; n += rep % 7 + 1) {
                float amp = rep % 3 == 0 ? 100.0f : rep % 3 == 1 ? 10.0f : 1.0f;
                for (int i = 0; i < n; i++) {
                    g[i] = amp * (float)(hr_rng_uniform(&rng) * 2 - 1);
                    u[i] = (float)(hr_rng_uniform(&rng) * 4 - 2);
                }
                bool with_u = rep % 2;
                memcpy(y, g, sizeof g);
                K->silu_mul(y, with_u ? u : NULL, n);
                for (int i = 0; i < n; i++) {
                    double ref = (double)g[i] / (1 + exp(-(double)g[i])) * (with_u ? u[i] : 1);
                    double err = fabs(y[i] - ref);
                    if (err > 5e-7 * fabs(ref) + 3e-36)
                        fail_msg("%s silu(%.9g) = %.9g, double %.9g", K->name, g[i], y[i], ref);
                    if (fabs(ref) > 1e-30)
                        worst = fmax(worst, err / fabs(ref));
                    float one = g[i]; /* the same bits alone (batch invariance) */
                    K->silu_mul(&one, with_u ? &u[i] : NULL, 1);
                    if (memcmp(&one, &y[i], sizeof one))
                        fail_msg("%s silu(%.9g): %.9g alone, %.9g at %d of %d", K->name, g[i],
                                 one, y[i], i, n);
                }
            }
        float sp[3] = {INFINITY, NAN, 0.0f};
        K->silu_mul(sp, NULL, 3);
        assert_true(isinf(sp[0]) && sp[0] > 0);
        assert_true(isnan(sp[1]));
        assert_true(sp[2] == 0.0f);
        printf("%-7s silu: worst relative error %.2e\n", K->name, worst);
    }
}

/* The roofline's read: positive for buffers of whole 256-byte groups on
 * 1 and 3 threads (the shares' edges), 0 (no buffer) below one group, and
 * one buffer read again as often as asked (hearth bench reads one before
 * and after every decode); under ASan it also checks that no read leaves
 * the buffer. */
static void test_membw(void **state) {
    (void)state;
    for (int nth = 1; nth <= 3; nth += 2) {
        hr_pool *pool = hr_pool_new(nth);
        assert_non_null(pool);
        assert_true(hr_membw(pool, 256, 1) > 0);
        assert_true(hr_membw(pool, 3 * 256 + 100, 2) > 0);
        assert_true(hr_membw(pool, (size_t)1 << 20, 1) > 0);
        assert_true(hr_membw(pool, 255, 1) == 0);
        assert_null(hr_membw_buf_new(255));
        hr_membw_buf *b = hr_membw_buf_new(5 * 256 + 10);
        assert_non_null(b);
        for (int i = 0; i < 3; i++)
            assert_true(hr_membw_read(b, pool, 1) > 0);
        hr_membw_buf_free(b);
        hr_membw_buf_free(NULL);
        hr_pool_free(pool);
    }
}

/* Does /proc/cpuinfo's first flags line have each of the space-separated
 * names? -1: no flags line (not Linux on x86) */
static int cpu_has(const char *names) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    static char line[8192];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            found = 1;
            break;
        }
    if (f)
        fclose(f);
    if (!found)
        return -1;
    char want[128];
    snprintf(want, sizeof want, "%s", names);
    line[strcspn(line, "\n")] = ' ';
    for (char *sv, *w = strtok_r(want, " ", &sv); w; w = strtok_r(NULL, " ", &sv)) {
        char pat[40];
        snprintf(pat, sizeof pat, " %s ", w);
        if (!strstr(line, pat))
            return 0;
    }
    return 1;
}

/* The tables cpuid picks agree with the kernel's view of the CPU: avx512
 * needs F/BW/VL/DQ/VNNI and no AVX512_BF16 (an Ice Lake ran avx2 while the
 * table asked for it, though no kernel uses it) */
static void test_isa_detect(void **state) {
    (void)state;
    int avx2 = cpu_has("avx2 fma f16c");
    if (avx2 < 0)
        skip();
    int avx512 = avx2 && cpu_has("avx512f avx512bw avx512vl avx512dq avx512_vnni");
    assert_int_equal(!!hr_cpu_isa(HR_ISA_AVX2), avx2);
    assert_int_equal(!!hr_cpu_isa(HR_ISA_AVX512), avx512);
    assert_non_null(hr_cpu_isa(HR_ISA_SCALAR));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_isas),
        cmocka_unit_test(test_isa_detect),
        cmocka_unit_test(test_matmul_threads_bias),
        cmocka_unit_test(test_matmul_prefetch_ranges),
        cmocka_unit_test(test_row_ops),
        cmocka_unit_test(test_rmsnorm_isas),
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_membw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
