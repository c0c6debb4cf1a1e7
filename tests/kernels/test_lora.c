/* The CPU's LoRA deltas (kernels/cpu/lora.h): the axpys kernel of every
 * ISA, and the deltas run inside the base product's job (hr_matmul_lora)
 * against the product followed by the reference passes on one thread. */
#include "core/pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/lora.h"
#include "kernels/cpu/ops.h"
#include "sample/rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

static float *rand_floats(hr_rng *r, size_t n) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand(r);
    return p;
}

/* each ISA's axpys: every column the chain of its ISA's fused (vector) or
 * plain (scalar) multiply-adds in k order, whatever range it is computed
 * in (split at every column: the bits do not depend on the split) */
static void test_axpys_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 3);
    static const int ns[] = {1, 7, 8, 31, 33, 64, 100, 130}, rs[] = {1, 3, 16};
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
            for (size_t ir = 0; ir < sizeof rs / sizeof rs[0]; ir++) {
                int n = ns[in], r = rs[ir];
                size_t ld = (size_t)n + 5;
                float *x = rand_floats(&rng, (size_t)r * ld), *a = rand_floats(&rng, (size_t)r);
                float *y0 = rand_floats(&rng, (size_t)n), *ref = malloc((size_t)n * sizeof *ref);
                float *y = malloc((size_t)n * sizeof *y);
                for (int j = 0; j < n; j++) {
                    float s = y0[j];
                    for (int k = 0; k < r; k++) {
                        float p = x[(size_t)k * ld + j];
                        s = isa == HR_ISA_SCALAR ? s + a[k] * p : fmaf(a[k], p, s);
                    }
                    ref[j] = s;
                }
                memcpy(y, y0, (size_t)n * sizeof *y);
                K->axpys(y, n, a, r, x, ld);
                assert_memory_equal(y, ref, (size_t)n * sizeof *y);
                for (int cut = 1; cut < n; cut += 3) {
                    memcpy(y, y0, (size_t)n * sizeof *y);
                    K->axpys(y, cut, a, r, x, ld);
                    K->axpys(y + cut, n - cut, a, r, x + cut, ld);
                    assert_memory_equal(y, ref, (size_t)n * sizeof *y);
                }
                free(x);
                free(a);
                free(y0);
                free(ref);
                free(y);
            }
    }
}

/* A step of 9 rows: three adapters (one with DoRA on the second output,
 * whose product has a bias), two rows of no adapter; outputs 0 and 1 bf16,
 * output 2 f32 (its own job), output 3 bf16 and not adapted (qgate). The
 * fused job on 1, 2 and 3 threads equals the products then hr_lora_ref,
 * bit for bit; a row alone equals the same row in the step. */
#define NR 9
#define NG 3
#define NO 4
#define RK 5
static void test_matmul_lora(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    int k = 40, ns[NO] = {37, 16, 70, 20};
    hr_dtype dts[NO] = {HR_DTYPE_BF16, HR_DTYPE_BF16, HR_DTYPE_F32, HR_DTYPE_BF16};
    float *x = rand_floats(&rng, (size_t)NR * k);
    hr_tensor w[NO];
    float *wf[NO], *bias[NO] = {NULL}, *y[NO], *yr[NO];
    for (int o = 0; o < NO; o++) {
        size_t cnt = (size_t)ns[o] * k;
        wf[o] = rand_floats(&rng, cnt);
        if (dts[o] == HR_DTYPE_BF16) {
            uint16_t *h = malloc(cnt * sizeof *h);
            for (size_t i = 0; i < cnt; i++)
                h[i] = hr_f32_to_bf16(wf[o][i]);
            free(wf[o]);
            wf[o] = (float *)h;
        }
        w[o] = (hr_tensor){.name = "w", .dtype = dts[o], .ndim = 2, .shape = {ns[o], k},
                           .data = wf[o]};
        y[o] = malloc((size_t)NR * ns[o] * sizeof(float));
        yr[o] = malloc((size_t)NR * ns[o] * sizeof(float));
    }
    bias[1] = rand_floats(&rng, (size_t)ns[1]);
    hr_lora_mat mats[NG][3];
    float *mem[NG][3][3] = {{{NULL}}};
    for (int g = 0; g < NG; g++)
        for (int o = 0; o < 3; o++) {
            int r = RK - g; /* ranks 5, 4, 3 */
            mem[g][o][0] = rand_floats(&rng, (size_t)r * k);
            mem[g][o][1] = rand_floats(&rng, (size_t)r * ns[o]);
            if (g == 1 && o == 1)
                mem[g][o][2] = rand_floats(&rng, (size_t)ns[o]);
            mats[g][o] = (hr_lora_mat){.a = mem[g][o][0], .bt = mem[g][o][1],
                                       .dora = mem[g][o][2], .r = r, .scale = 0.5f + g};
        }
    /* rows 0..8: adapters 2, -, 0, 1, 0, -, 2, 1, 0 */
    static const int adapter_of[NR] = {2, -1, 0, 1, 0, -1, 2, 1, 0};
    int32_t rows[NR], off[NG + 1];
    int n = 0;
    for (int g = 0; g < NG; g++) {
        off[g] = n;
        for (int t = 0; t < NR; t++)
            if (adapter_of[t] == g)
                rows[n++] = t;
    }
    off[NG] = n;
    const hr_lora_mat *matp[3][NG];
    hr_lora_out lo[3];
    hr_matmul_out mo[NO];
    for (int o = 0; o < NO; o++)
        mo[o] = (hr_matmul_out){y[o], ns[o], &w[o], bias[o]};
    for (int o = 0; o < 3; o++) {
        for (int g = 0; g < NG; g++)
            matp[o][g] = g == 2 && o == 0 ? NULL : &mats[g][o]; /* adapter 2: no q */
        lo[o] = (hr_lora_out){.y = yr[o], .ldy = ns[o], .n = ns[o], .bias = bias[o],
                              .mat = matp[o]};
    }
    hr_lora_args la = {.x = x, .ldx = k, .k = k, .n_groups = NG, .rows = rows, .off = off,
                       .count = 3, .out = lo};
    float *z = malloc((size_t)HR_LORA_MAX_OUT * NR * HR_LORA_MAX_RANK * sizeof *z);
    /* the reference: the products, then the deltas on one thread */
    hr_matmul_out mr[NO];
    for (int o = 0; o < NO; o++)
        mr[o] = (hr_matmul_out){yr[o], ns[o], &w[o], bias[o]};
    hr_matmul_multi(NULL, x, k, NR, NO, mr);
    float *plain = malloc((size_t)NR * ns[0] * sizeof *plain);
    memcpy(plain, yr[0], (size_t)NR * ns[0] * sizeof *plain);
    hr_lora_ref(z, NR, &la);
    /* the deltas changed the adapted rows, and only those */
    for (int t = 0; t < NR; t++) {
        bool same = !memcmp(plain + (size_t)t * ns[0], yr[0] + (size_t)t * ns[0],
                            (size_t)ns[0] * sizeof *plain);
        assert_true(same == (adapter_of[t] < 0 || adapter_of[t] == 2));
    }
    for (int o = 0; o < 3; o++)
        lo[o].y = y[o];
    for (int nth = 1; nth <= 3; nth++) {
        hr_pool *pool = hr_pool_new(nth);
        assert_non_null(pool);
        for (int rep = 0; rep < 3; rep++) {
            for (int o = 0; o < NO; o++)
                for (int i = 0; i < NR * ns[o]; i++)
                    y[o][i] = NAN;
            hr_matmul_lora(pool, x, k, NR, NO, mo, &la, z);
            for (int o = 0; o < NO; o++)
                assert_memory_equal(y[o], yr[o], (size_t)NR * ns[o] * sizeof(float));
        }
        hr_pool_free(pool);
    }
    /* row 4 (adapter 0) alone */
    int32_t one_rows[1] = {0}, one_off[2] = {0, 1};
    const hr_lora_mat *one_mat[3][1];
    hr_lora_out one_lo[3];
    hr_matmul_out one_mo[NO];
    float *y1[NO];
    for (int o = 0; o < NO; o++) {
        y1[o] = malloc((size_t)ns[o] * sizeof(float));
        one_mo[o] = (hr_matmul_out){y1[o], ns[o], &w[o], bias[o]};
    }
    for (int o = 0; o < 3; o++) {
        one_mat[o][0] = &mats[0][o];
        one_lo[o] = (hr_lora_out){.y = y1[o], .ldy = ns[o], .n = ns[o], .bias = bias[o],
                                  .mat = one_mat[o]};
    }
    hr_lora_args one = {.x = x + 4 * k, .ldx = k, .k = k, .n_groups = 1, .rows = one_rows,
                        .off = one_off, .count = 3, .out = one_lo};
    hr_pool *pool = hr_pool_new(2);
    hr_matmul_lora(pool, x + 4 * k, k, 1, NO, one_mo, &one, z);
    hr_pool_free(pool);
    for (int o = 0; o < NO; o++) {
        assert_memory_equal(y1[o], yr[o] + (size_t)4 * ns[o], (size_t)ns[o] * sizeof(float));
        free(y1[o]);
    }
    for (int g = 0; g < NG; g++)
        for (int o = 0; o < 3; o++)
            for (int i = 0; i < 3; i++)
                free(mem[g][o][i]);
    for (int o = 0; o < NO; o++) {
        free(wf[o]);
        free(y[o]);
        free(yr[o]);
        free(bias[o]);
    }
    free(x);
    free(z);
    free(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_axpys_isas),
        cmocka_unit_test(test_matmul_lora),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
