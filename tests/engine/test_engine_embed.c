/* The engine's embed requests (hidden states of every prompt token) on the
 * llama fixture: the last position's state, through the model's own
 * lm_head, gives transformers' log-probabilities (ref.json's first greedy
 * step: the hidden-state rows are the final-normed states the logits come
 * from); embed rows batched with each other and with generating rows change
 * nothing (the generation still equals the oracle, each state equals the
 * request alone); and the requests that make no sense are refused. */
#include "engine/engine.h"
#include "core/error.h"
#include "kernels/cpu/quant.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_model *g_model;
static json_t *g_ref;

static hr_request *submit(hr_engine *e, const int32_t *p, int n, int max_tokens, bool embed) {
    hr_req_params rp = {.prompt = p, .n_prompt = n, .max_tokens = max_tokens, .embed = embed};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r;
    hr_error err;
    if (hr_request_new(&r, e, &rp, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static void wait_end(hr_request *r) {
    hr_step s;
    int i = 0, rc;
    while ((rc = hr_request_wait(r, i, &s, 5000)) == 1)
        i++;
    assert_int_equal(rc, 0);
}

static int prompt(int i, int32_t *p) {
    json_t *pt = json_object_get(json_array_get(json_object_get(g_ref, "cases"), (size_t)i),
                                 "prompt_tokens");
    for (size_t k = 0; k < json_array_size(pt); k++)
        p[k] = (int32_t)json_integer_value(json_array_get(pt, k));
    return (int)json_array_size(pt);
}

/* log_softmax(lm_head . h)[tok] */
static double logprob(const float *h, int tok) {
    const hr_hparams *hp = &g_model->hp;
    int V = hp->n_vocab, d = hp->d_model;
    double *l = malloc(sizeof(double) * (size_t)V), mx = -INFINITY, s = 0;
    float *row = malloc(sizeof(float) * (size_t)d);
    for (int v = 0; v < V; v++) {
        hr_dequant_range(g_model->lm_head, v, 0, d, row);
        double z = 0;
        for (int i = 0; i < d; i++)
            z += (double)row[i] * h[i];
        l[v] = z;
        mx = fmax(mx, z);
    }
    for (int v = 0; v < V; v++)
        s += exp(l[v] - mx);
    double r = l[tok] - mx - log(s);
    free(l);
    free(row);
    return r;
}

static void test_states_give_the_oracle(void **state) {
    (void)state;
    hr_error err;
    hr_engine *e;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 4, .n_ctx = 256, .prefill_chunk = 16};
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    int d = g_model->hp.d_model;
    double worst = 0;
    for (int c = 0; c < 3; c++) {
        int32_t p[128];
        int n = prompt(c, p);
        hr_request *r = submit(e, p, n, 0, true);
        wait_end(r);
        assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_STOP);
        assert_int_equal(hr_request_completion_tokens(r), 0);
        const float *h = hr_request_hidden(r);
        assert_non_null(h);
        json_t *top = json_object_get(json_array_get(json_object_get(
                          json_array_get(json_object_get(g_ref, "cases"), (size_t)c), "steps"), 0),
                                      "top");
        for (size_t k = 0; k < json_array_size(top); k++) {
            json_t *t = json_array_get(top, k);
            double want = json_number_value(json_array_get(t, 1));
            double got = logprob(h + (size_t)(n - 1) * d, (int)json_integer_value(json_array_get(t, 0)));
            worst = fmax(worst, fabs(got - want));
        }
        hr_request_release(r);
    }
    printf("embed: the last state through lm_head: top-10 logprobs within %.2g of transformers\n",
           worst);
    assert_true(worst < 1e-4);
    hr_engine_free(e);
}

static void test_mixed_batch(void **state) {
    (void)state;
    hr_error err;
    hr_engine *e;
    /* prefill_chunk 16: the 61-token prompt's states come over several steps */
    hr_engine_opts o = {.n_threads = 2, .max_batch = 8, .n_ctx = 256, .prefill_chunk = 16};
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    int d = g_model->hp.d_model;
    int32_t p[3][128];
    int n[3];
    float *alone[3];
    for (int c = 0; c < 3; c++) {
        n[c] = prompt(c, p[c]);
        hr_request *r = submit(e, p[c], n[c], 0, true);
        wait_end(r);
        alone[c] = malloc(sizeof(float) * (size_t)n[c] * d);
        memcpy(alone[c], hr_request_hidden(r), sizeof(float) * (size_t)n[c] * d);
        hr_request_release(r);
    }
    /* generations and embeddings together */
    hr_request *g[3], *m[3];
    for (int c = 0; c < 3; c++) {
        g[c] = submit(e, p[c], n[c], 16, false);
        m[c] = submit(e, p[c], n[c], 0, true);
    }
    json_t *cases = json_object_get(g_ref, "cases");
    for (int c = 0; c < 3; c++) {
        hr_step s;
        json_t *gt = json_object_get(json_array_get(cases, (size_t)c), "greedy_tokens");
        for (int k = 0; k < 16; k++) {
            assert_int_equal(hr_request_wait(g[c], k, &s, 5000), 1);
            assert_int_equal(s.token, json_integer_value(json_array_get(gt, (size_t)k)));
        }
        wait_end(m[c]);
        const float *h = hr_request_hidden(m[c]);
        for (size_t i = 0; i < (size_t)n[c] * d; i++)
            if (fabsf(h[i] - alone[c][i]) > 1e-6f)
                fail_msg("prompt %d: state %zu differs batched (%g vs %g)", c, i, h[i], alone[c][i]);
        hr_request_release(g[c]);
        hr_request_release(m[c]);
        free(alone[c]);
    }
    /* embed requests neither read nor fill the prompt cache */
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_int_equal(st.cache_lookups, 3); /* the three generations */
    printf("embed: batched with generations: greedy == transformers, states == alone\n");
    hr_engine_free(e);
}

static void test_refused(void **state) {
    (void)state;
    hr_error err;
    hr_engine *e;
    hr_engine_opts o = {.n_threads = 1, .max_batch = 2, .n_ctx = 64};
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    int32_t p[4] = {5, 6, 7, 8};
    hr_req_params rp = {.prompt = p, .n_prompt = 4, .max_tokens = 3, .embed = true};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r = NULL;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "embedding request generates nothing"));
    rp.max_tokens = 0;
    rp.score_from = 1;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), HR_EINVAL);
    /* a single token is a whole prompt too */
    rp.score_from = 0;
    rp.n_prompt = 1;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), 0);
    assert_int_equal(hr_engine_submit(e, r, &err), 0);
    wait_end(r);
    assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_STOP);
    hr_request_release(r);
    hr_engine_free(e);
}

int main(void) {
    hr_error err = {0};
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096], ref[4200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/llama", root ? root : ".");
    snprintf(ref, sizeof ref, "%s/ref.json", dir);
    if (hr_model_open(&g_model, dir, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_error_t je;
    g_ref = json_load_file(ref, 0, &je);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_give_the_oracle),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_ref);
    hr_model_free(g_model);
    return rc;
}
