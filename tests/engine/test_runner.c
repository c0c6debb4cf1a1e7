/* hr_runner's quantized KV (--kv-bits, --quantized-kv-start) on the demo
 * model (head_dim 64), against a full-precision runner on the same tokens:
 *  - a sequence that never reaches the start gives the f32 bits;
 *  - the eval that reaches it still gives the f32 bits (mlx-lm converts
 *    after that forward), the next ones differ, by a KL below 1e-3 at 8
 *    bits;
 *  - after a reset the runner is full precision again. */
#include "engine/runner.h"
#include "model/model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 48

/* KL(p_a || p_b) of the softmaxes of two logit rows */
static double kl(const float *a, const float *b, int V) {
    double ma = -INFINITY, mb = -INFINITY, sa = 0, sb = 0, k = 0;
    for (int i = 0; i < V; i++) {
        ma = a[i] > ma ? a[i] : ma;
        mb = b[i] > mb ? b[i] : mb;
    }
    for (int i = 0; i < V; i++) {
        sa += exp(a[i] - ma);
        sb += exp(b[i] - mb);
    }
    for (int i = 0; i < V; i++) {
        double la = a[i] - ma - log(sa), lb = b[i] - mb - log(sb);
        k += exp(la) * (la - lb);
    }
    return k;
}

static void test_convert_at_start(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", root ? root : ".");
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open_on(&m, dir, "cpu", &err))
        fail_msg("%s", err.msg);
    int V = m->hp.n_vocab;
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % V);
    hr_runner *rf = NULL, *rq = NULL, *rn = NULL;
    hr_runner_opts of = {.n_threads = 1, .n_ctx = 128, .prefill_chunk = 64};
    hr_runner_opts oq = of, on = of;
    oq.kv_bits = 8, oq.kv_group = 64, oq.kv_start = 32;
    on.kv_bits = 4, on.kv_group = 32, on.kv_start = 1000; /* never reached */
    assert_int_equal(hr_runner_new(&rf, m, &of, &err), 0);
    assert_int_equal(hr_runner_new(&rq, m, &oq, &err), 0);
    assert_int_equal(hr_runner_new(&rn, m, &on, &err), 0);
    float *lf = malloc((size_t)V * 4), *lq = malloc((size_t)V * 4), *ln = malloc((size_t)V * 4);
    for (int pass = 0; pass < 2; pass++) { /* the second after a reset */
        /* the first 32 tokens in one eval: it reaches the start */
        assert_int_equal(hr_runner_eval(rf, tok, 32, lf, &err), 0);
        assert_int_equal(hr_runner_eval(rq, tok, 32, lq, &err), 0);
        assert_int_equal(hr_runner_eval(rn, tok, 32, ln, &err), 0);
        assert_memory_equal(lf, lq, (size_t)V * 4);
        assert_memory_equal(lf, ln, (size_t)V * 4);
        double worst = 0;
        int differ = 0;
        for (int i = 32; i < N; i++) {
            assert_int_equal(hr_runner_eval(rf, tok + i, 1, lf, &err), 0);
            assert_int_equal(hr_runner_eval(rq, tok + i, 1, lq, &err), 0);
            assert_int_equal(hr_runner_eval(rn, tok + i, 1, ln, &err), 0);
            assert_memory_equal(lf, ln, (size_t)V * 4);
            differ += memcmp(lf, lq, (size_t)V * 4) != 0;
            double d = kl(lf, lq, V);
            worst = d > worst ? d : worst;
        }
        assert_int_equal(differ, N - 32); /* every step after reads quantized K/V */
        printf("pass %d: 8-bit KV after 32 tokens, worst KL(f32 || 8-bit) %.2e over %d steps\n", pass,
               worst, N - 32);
        assert_true(worst < 1e-3);
        hr_runner_reset(rf);
        hr_runner_reset(rq);
        hr_runner_reset(rn);
    }
    free(lf);
    free(lq);
    free(ln);
    hr_runner_free(rf);
    hr_runner_free(rq);
    hr_runner_free(rn);
    hr_model_free(m);
}

/* A format the model cannot take is refused when the runner is made. */
static void test_bad_format(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", root ? root : ".");
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open_on(&m, dir, "cpu", &err))
        fail_msg("%s", err.msg);
    hr_runner *r = NULL;
    hr_runner_opts o = {.n_threads = 1, .n_ctx = 64, .kv_bits = 4, .kv_group = 128};
    assert_int_not_equal(hr_runner_new(&r, m, &o, &err), 0);
    assert_non_null(strstr(err.msg, "--kv-group-size"));
    assert_null(r);
    hr_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_at_start),
        cmocka_unit_test(test_bad_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
