/* The sampler chain against mlx-lm's formulas (fixtures from
 * tools/samplerref/gen.py): the logprobs after the logits processors match
 * exactly; sampled tokens never leave the filtered set, and their
 * frequencies over many seeded draws match the reference distribution. */
#include "core/error.h"
#include "sample/rng.h"
#include "sample/sampler.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRAWS 20000

static json_t *g_cases;
static int g_vocab;

static hr_sampler *make(json_t *params, json_t *hist, int32_t *bias_ids, float *bias_vals,
                        int32_t *special, uint64_t seed) {
    hr_sampler_params p;
    hr_sampler_params_default(&p);
    json_t *v;
#define NUM(key, field)                                                      \
    if ((v = json_object_get(params, key)))                                  \
        p.field = (float)json_number_value(v);
#define INT(key, field)                                                      \
    if ((v = json_object_get(params, key)))                                  \
        p.field = (int)json_integer_value(v);
    NUM("temp", temp) NUM("top_p", top_p) NUM("min_p", min_p) INT("top_k", top_k)
    INT("min_tokens_to_keep", min_tokens_to_keep) NUM("xtc_probability", xtc_probability)
    NUM("xtc_threshold", xtc_threshold) NUM("repetition_penalty", repetition_penalty)
    INT("repetition_context_size", repetition_context_size)
    NUM("presence_penalty", presence_penalty) INT("presence_context_size", presence_context_size)
    NUM("frequency_penalty", frequency_penalty)
    INT("frequency_context_size", frequency_context_size)
#undef NUM
#undef INT
    json_t *bias = json_object_get(params, "logit_bias");
    const char *key;
    json_object_foreach(bias, key, v) {
        bias_ids[p.n_bias] = atoi(key);
        bias_vals[p.n_bias++] = (float)json_number_value(v);
    }
    p.bias_ids = bias_ids;
    p.bias_values = bias_vals;
    json_t *sp = json_object_get(params, "xtc_special");
    for (size_t i = 0; i < json_array_size(sp); i++)
        special[p.n_xtc_special++] = (int32_t)json_integer_value(json_array_get(sp, i));
    p.xtc_special = special;
    p.seed = seed;
    hr_sampler *s;
    hr_error err;
    if (hr_sampler_new(&s, &p, g_vocab, &err))
        fail_msg("sampler: %s", err.msg);
    for (size_t i = 0; i < json_array_size(hist); i++) {
        int32_t t = (int32_t)json_integer_value(json_array_get(hist, i));
        hr_sampler_accept(s, &t, 1);
    }
    return s;
}

static void test_cases(void **state) {
    (void)state;
    int V = g_vocab;
    float logits[64], work[64];
    int32_t bias_ids[16], special[16];
    float bias_vals[16];
    json_t *cs = json_object_get(g_cases, "cases");
    for (size_t c = 0; c < json_array_size(cs); c++) {
        json_t *k = json_array_get(cs, c), *params = json_object_get(k, "params");
        json_t *hist = json_object_get(k, "history");
        for (int i = 0; i < V; i++) {
            logits[i] = (float)json_number_value(json_array_get(json_object_get(k, "logits"), (size_t)i));
        }
        hr_sampler *s = make(params, hist, bias_ids, bias_vals, special, 1);
        memcpy(work, logits, sizeof logits);
        hr_sampler_sample(s, work);
        json_t *lp = json_object_get(k, "logprobs"), *pr = json_object_get(k, "probs");
        for (int i = 0; i < V; i++)
            if (fabs(work[i] - json_number_value(json_array_get(lp, (size_t)i))) > 2e-5)
                fail_msg("case %zu: logprob[%d] %.7f, reference %.7f", c, i, work[i],
                         json_number_value(json_array_get(lp, (size_t)i)));
        /* many draws: support and frequencies (the history stays fixed) */
        int counts[64] = {0};
        for (int d = 0; d < DRAWS; d++) {
            memcpy(work, logits, sizeof logits);
            counts[hr_sampler_sample(s, work)]++;
        }
        for (int i = 0; i < V; i++) {
            double p = json_number_value(json_array_get(pr, (size_t)i));
            if (p == 0 && counts[i])
                fail_msg("case %zu: token %d was filtered out but drawn %d times", c, i, counts[i]);
            double sd = sqrt(DRAWS * p * (1 - p)) + 1;
            if (fabs(counts[i] - DRAWS * p) > 5 * sd)
                fail_msg("case %zu: token %d drawn %d times, expected %.0f", c, i, counts[i],
                         DRAWS * p);
        }
        hr_sampler_free(s);
    }
    printf("sampler: %zu mlx-lm reference cases match\n", json_array_size(cs));
}

static void test_seeded_and_greedy(void **state) {
    (void)state;
    float logits[64], w[64];
    for (int i = 0; i < g_vocab; i++)
        logits[i] = (float)sin(i * 1.7);
    json_t *params = json_pack("{s:f,s:f}", "temp", 1.0, "top_p", 0.9);
    int32_t a[16], b[16], bi[1], sp[1];
    float bv[1];
    hr_sampler *s1 = make(params, NULL, bi, bv, sp, 42), *s2 = make(params, NULL, bi, bv, sp, 42);
    int same_as_other_seed = 1;
    hr_sampler *s3 = make(params, NULL, bi, bv, sp, 43);
    for (int i = 0; i < 16; i++) {
        memcpy(w, logits, sizeof w);
        a[i] = hr_sampler_sample(s1, w);
        memcpy(w, logits, sizeof w);
        b[i] = hr_sampler_sample(s2, w);
        memcpy(w, logits, sizeof w);
        same_as_other_seed &= hr_sampler_sample(s3, w) == a[i];
    }
    assert_memory_equal(a, b, sizeof a);
    assert_false(same_as_other_seed);
    hr_sampler_free(s1);
    hr_sampler_free(s2);
    hr_sampler_free(s3);
    json_decref(params);
    /* greedy: argmax, ties to the lower id */
    params = json_pack("{s:f}", "temp", 0.0);
    hr_sampler *g = make(params, NULL, bi, bv, sp, 0);
    memset(w, 0, sizeof w);
    w[9] = w[4] = 3;
    assert_int_equal(hr_sampler_sample(g, w), 4);
    hr_sampler_free(g);
    json_decref(params);
}

/* Resampling after removing tokens: the processors are not applied twice,
 * the remaining log-probabilities are renormalized. */
static void test_resample(void **state) {
    (void)state;
    float w[64];
    memset(w, 0, sizeof w);
    w[0] = 5;
    w[1] = 1;
    w[2] = 2;
    json_t *params = json_pack("{s:f,s:{s:f}}", "temp", 0.0, "logit_bias", "1", 2.0);
    int32_t bi[1], sp[1];
    float bv[1];
    hr_sampler *s = make(params, NULL, bi, bv, sp, 0);
    assert_int_equal(hr_sampler_sample(s, w), 0);
    assert_float_equal(w[1] - w[2], 1.0, 1e-5); /* biased once */
    w[0] = -INFINITY;
    assert_int_equal(hr_sampler_resample(s, w), 1);
    assert_float_equal(w[1] - w[2], 1.0, 1e-5); /* not biased again */
    double total = 0;
    for (int i = 0; i < g_vocab; i++)
        total += exp(w[i]);
    assert_float_equal(total, 1.0, 1e-4);
    hr_sampler_free(s);
    json_decref(params);
}

static void expect_invalid(const char *field, void (*set)(hr_sampler_params *)) {
    hr_sampler_params p;
    hr_sampler_params_default(&p);
    set(&p);
    hr_sampler *s = NULL;
    hr_error err = {0};
    assert_int_equal(hr_sampler_new(&s, &p, 32, &err), HR_ERANGE);
    assert_null(s);
    if (!strstr(err.msg, field))
        fail_msg("error '%s' does not name %s", err.msg, field);
}
static void bad_temp(hr_sampler_params *p) { p->temp = -1; }
static void bad_top_p(hr_sampler_params *p) { p->top_p = 1.5f; }
static void bad_min_p(hr_sampler_params *p) { p->min_p = -0.1f; }
static void bad_top_k(hr_sampler_params *p) { p->temp = 1; p->top_k = 32; }
static void bad_xtc_t(hr_sampler_params *p) { p->xtc_threshold = 0.7f; }
static void bad_xtc_p(hr_sampler_params *p) { p->xtc_probability = 2; }
static void bad_rep(hr_sampler_params *p) { p->repetition_penalty = -1; }
static void bad_keep(hr_sampler_params *p) { p->min_tokens_to_keep = 0; }
static int32_t g_bad_id = 99;
static float g_bad_val = 1;
static void bad_bias(hr_sampler_params *p) {
    p->bias_ids = &g_bad_id;
    p->bias_values = &g_bad_val;
    p->n_bias = 1;
}

static void test_validation(void **state) {
    (void)state;
    expect_invalid("temperature", bad_temp);
    expect_invalid("top_p", bad_top_p);
    expect_invalid("min_p", bad_min_p);
    expect_invalid("top_k", bad_top_k);
    expect_invalid("xtc_threshold", bad_xtc_t);
    expect_invalid("xtc_probability", bad_xtc_p);
    expect_invalid("repetition_penalty", bad_rep);
    expect_invalid("min_tokens_to_keep", bad_keep);
    expect_invalid("logit_bias", bad_bias);
}

/* A vocabulary the size of a real one's order of magnitude, with ties at
 * the filters' edges: top_k, top_p and min_p keep exactly the set a sort
 * by (logprob desc, id asc) gives (the selection in one pass, top_p's
 * floor), so every draw lands in it and every member is drawn. */
#define BIGV 6000
static int by_value(const void *a, const void *b, void *lp) {
    const float *v = lp;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return v[x] > v[y] ? -1 : v[x] < v[y] ? 1 : (x > y) - (x < y);
}

static void check_set(const char *what, const hr_sampler_params *p, const float *logits,
                      const uint8_t *keep) {
    static float w[BIGV];
    static int hits[BIGV];
    hr_sampler *s;
    assert_int_equal(hr_sampler_new(&s, p, BIGV, NULL), 0);
    memset(hits, 0, sizeof hits);
    for (int d = 0; d < 4000; d++) {
        memcpy(w, logits, sizeof w);
        int32_t t = hr_sampler_sample(s, w);
        if (!keep[t])
            fail_msg("%s: drew token %d, outside the reference set", what, t);
        hits[t]++;
    }
    for (int i = 0; i < BIGV; i++)
        if (keep[i] && !hits[i])
            fail_msg("%s: token %d is in the reference set but never drawn", what, i);
    hr_sampler_free(s);
}

static void test_large_vocab_filters(void **state) {
    (void)state;
    static float logits[BIGV], lp[BIGV];
    static int32_t order[BIGV];
    static uint8_t keep[BIGV];
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    for (int i = 0; i < BIGV; i++)
        logits[i] = (float)(hr_rng_uniform(&rng) * 6 - 3);
    for (int j = 0; j < 30; j++) /* 30 likely tokens, equal in pairs */
        logits[(j * 977 + 13) % BIGV] = 6.0f + (float)(j / 2) * 0.05f;
    float lse = hr_logsumexp(logits, BIGV);
    for (int i = 0; i < BIGV; i++) {
        lp[i] = logits[i] - lse; /* as the sampler computes them */
        order[i] = i;
    }
    qsort_r(order, BIGV, sizeof *order, by_value, lp);
    hr_sampler_params p;
    hr_sampler_params_default(&p);
    p.temp = 1.0f;
    p.seed = 3;

    /* top_k 11: the edge falls inside a pair of equal logprobs */
    p.top_k = 11;
    memset(keep, 0, sizeof keep);
    for (int i = 0; i < 11; i++)
        keep[order[i]] = 1;
    assert_true(lp[order[10]] == lp[order[11]]);
    check_set("top_k", &p, logits, keep);
    p.top_k = 0;

    /* top_p halfway between the masses above the 14th and 15th tokens */
    double above[20] = {0};
    for (int i = 1; i < 20; i++)
        above[i] = above[i - 1] + exp((double)lp[order[i - 1]]);
    p.top_p = (float)((above[14] + above[15]) / 2);
    memset(keep, 0, sizeof keep);
    for (int i = 0; i < 15; i++)
        keep[order[i]] = 1;
    check_set("top_p", &p, logits, keep);
    p.top_p = 1.0f;

    /* min_p: within log(0.9) of the best, or among the best 3 */
    p.min_p = 0.9f;
    p.min_tokens_to_keep = 3;
    memset(keep, 0, sizeof keep);
    for (int i = 0; i < BIGV; i++)
        keep[order[i]] = i < 3 || lp[order[i]] >= lp[order[0]] + logf(0.9f);
    check_set("min_p", &p, logits, keep);
}

/* top_p over a flat distribution keeps most of a real vocabulary's size:
 * every logprob ties, so the kept set is the lowest ids up to the mass
 * (the first k whose masses, in order, reach top_p). A draw never leaves
 * it, and draws reach both of its ends. */
#define FLATV 151936
static void test_top_p_flat(void **state) {
    (void)state;
    static float logits[FLATV], w[FLATV];
    for (int i = 0; i < FLATV; i++)
        logits[i] = 0.25f;
    float lp = logits[0] - hr_logsumexp(logits, FLATV); /* as the sampler computes them */
    hr_sampler_params p;
    hr_sampler_params_default(&p);
    p.temp = 1.0f;
    p.top_p = 0.9f;
    p.seed = 5;
    int k = 0;
    for (double above = 0; above < p.top_p; k++)
        above += exp((double)lp);
    hr_sampler *s;
    assert_int_equal(hr_sampler_new(&s, &p, FLATV, NULL), 0);
    int lo = FLATV, hi = -1;
    for (int d = 0; d < 500; d++) {
        memcpy(w, logits, sizeof w);
        int32_t t = hr_sampler_sample(s, w);
        if (t >= k)
            fail_msg("drew token %d; the kept set is ids 0..%d", t, k - 1);
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
    }
    assert_true(lo < k / 50 && hi >= k - k / 50);
    hr_sampler_free(s);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/sample/cases.json", root ? root : ".");
    json_error_t je;
    g_cases = json_load_file(path, 0, &je);
    if (!g_cases) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    g_vocab = (int)json_integer_value(json_object_get(g_cases, "vocab"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_seeded_and_greedy),
        cmocka_unit_test(test_resample),
        cmocka_unit_test(test_large_vocab_filters),
        cmocka_unit_test(test_top_p_flat),
        cmocka_unit_test(test_validation),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_cases);
    return rc;
}
