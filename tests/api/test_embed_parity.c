/* Embeddings against sentence-transformers (float32): the fixtures of
 * tools/refgen/embed.py (tests/fixtures/embed/<case>/ref.json), one per
 * pooling kind: qwen3-embed (last token, Normalize, an instruction prompt,
 * Matryoshka 16 and 8), bert-cls (CLS, Normalize), bert-mean (mean,
 * Normalize, a default prompt, max_seq_length 24 cuts one input). For every
 * input: the ids hearth feeds the model (prompt, special tokens, truncation)
 * equal the ones sentence-transformers fed it, and the vector is within
 * 1e-4 of cosine of its vector; the same ids given as tokens give the same
 * vector; all inputs in one call (batched by the engine) give what each
 * gives alone. With --device NAME (tests/device_arg.h) the same on that
 * backend (test_embed_parity_cuda: the GPU). */
#include "api/api.h"
#include "core/error.h"
#include "core/file.h"

#include "../device_arg.h"

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

static const char *g_device; /* --device NAME: the backend under test */

static void path_of(char *out, size_t n, const char *rel) {
    const char *r = getenv("HEARTH_ROOT");
    snprintf(out, n, "%s/%s", r ? r : ".", rel);
}

static double cosine(const float *a, const json_t *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        double y = json_number_value(json_array_get(b, (size_t)i));
        ab += a[i] * y;
        aa += (double)a[i] * a[i];
        bb += y * y;
    }
    return ab / sqrt(aa * bb);
}

static double max_abs(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void run_case(const char *name, int want_pooling) {
    char dir[1024], refp[1100];
    snprintf(refp, sizeof refp, "tests/fixtures/embed/%s", name);
    path_of(dir, sizeof dir, refp);
    snprintf(refp, sizeof refp, "%s/ref.json", dir);
    if (!hr_file_exists(refp)) {
        print_message("%s: no fixture (tools/refgen/embed.py runs on the GPU machine)\n", name);
        skip();
    }
    json_error_t je;
    json_t *ref = json_load_file(refp, 0, &je);
    assert_non_null(ref);
    hr_llm *m = NULL;
    hr_session *s = NULL;
    hr_error err = {0};
    if (hr_llm_load(&m, dir, &(hr_llm_opts){.n_threads = 2, .device = g_device}, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_string_equal(m->emb.err, "");
    assert_int_equal(m->emb.pooling, want_pooling);
    assert_true(m->emb.normalize);
    assert_int_equal(hr_session_new(&s, m, &(hr_session_opts){.n_threads = 2, .max_batch = 8, .warmup = 1}, &err), 0);
    int d = hr_llm_embed_dim(m);
    assert_int_equal(d, (int)json_integer_value(json_object_get(ref, "dim")));
    json_t *cases = json_object_get(ref, "cases");
    size_t nc = json_array_size(cases);
    assert_true(nc >= 6);
    float *v = malloc(sizeof(float) * (size_t)d), *w = malloc(sizeof(float) * (size_t)d);
    float *all = malloc(sizeof(float) * (size_t)d * nc);
    hr_embed_input *ins = calloc(nc, sizeof *ins);
    double worst = 1, worst_m = 1, worst_ids = 0;
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *pn = json_string_value(json_object_get(c, "prompt_name")); /* NULL: default */
        json_t *ids = json_object_get(c, "ids"), *emb = json_object_get(c, "embedding");
        /* the ids */
        const char *prompt;
        assert_int_equal(hr__embed_prompt(&m->emb, pn, &prompt, &err), 0);
        hr_tokens t = {0};
        assert_int_equal(hr__embed_ids(m, prompt, text, strlen(text), &t, &err), 0);
        bool same = t.n == json_array_size(ids);
        for (size_t k = 0; same && k < t.n; k++)
            same = t.ids[k] == json_integer_value(json_array_get(ids, k));
        if (!same)
            fail_msg("%s case %zu (%s, prompt %s): %zu ids, sentence-transformers fed %zu", name,
                     i, text, pn ? pn : "default", t.n, json_array_size(ids));
        /* the vector */
        hr_embed_opts o = {.prompt_name = pn};
        hr_embed_input in = {.text = text, .text_len = strlen(text)};
        long nt = 0;
        if (hr_embed(s, &in, 1, &o, v, &nt, &err))
            fail_msg("%s case %zu: %s", name, i, err.msg);
        assert_int_equal(nt, (long)t.n);
        double cs = cosine(v, emb, d);
        worst = fmin(worst, cs);
        if (1 - cs > 1e-4)
            fail_msg("%s case %zu (%s, prompt %s): cosine %.8f", name, i, text,
                     pn ? pn : "default", cs);
        /* the same ids as tokens */
        hr_embed_input tin = {.tokens = t.ids, .n_tokens = (int)t.n};
        assert_int_equal(hr_embed(s, &tin, 1, NULL, w, NULL, &err), 0);
        worst_ids = fmax(worst_ids, max_abs(v, w, d));
        assert_true(max_abs(v, w, d) < 1e-6);
        ins[i] = tin;
        ins[i].tokens = malloc(t.n * sizeof(int32_t));
        memcpy((int32_t *)ins[i].tokens, t.ids, t.n * sizeof(int32_t));
        memcpy(all + i * (size_t)d, v, sizeof(float) * (size_t)d);
        hr_tokens_free(&t);
        /* Matryoshka */
        json_t *mat = json_object_get(c, "matryoshka");
        const char *k;
        json_t *mv;
        json_object_foreach(mat, k, mv) {
            int dims = atoi(k);
            assert_int_equal(hr_embed(s, &in, 1, &(hr_embed_opts){.prompt_name = pn, .dimensions = dims},
                                      w, NULL, &err), 0);
            double cm = cosine(w, mv, dims);
            worst_m = fmin(worst_m, cm);
            if (1 - cm > 1e-4)
                fail_msg("%s case %zu: dimensions %d: cosine %.8f", name, i, dims, cm);
            double nrm = 0;
            for (int q = 0; q < dims; q++)
                nrm += (double)w[q] * w[q];
            assert_true(fabs(nrm - 1) < 1e-5);
        }
    }
    /* every input in one call: batched in the engine, the same vectors */
    float *batch = malloc(sizeof(float) * (size_t)d * nc);
    assert_int_equal(hr_embed(s, ins, (int)nc, NULL, batch, NULL, &err), 0);
    double bd = max_abs(batch, all, d * (int)nc);
    assert_true(bd < 1e-5);
    print_message("%s (%s): %zu inputs, ids equal; worst 1 - cosine %.2g (Matryoshka %.2g); "
                  "tokens vs text %.2g, batched vs alone %.2g\n", name, g_device, nc, 1 - worst,
                  1 - worst_m, worst_ids, bd);
    for (size_t i = 0; i < nc; i++)
        free((void *)ins[i].tokens);
    free(ins);
    free(batch);
    free(all);
    free(v);
    free(w);
    hr_session_free(s);
    hr_llm_free(m);
    json_decref(ref);
}

static void test_qwen3_last_token(void **st) {
    (void)st;
    run_case("qwen3-embed", HR_POOL_LAST);
}
static void test_bert_cls(void **st) {
    (void)st;
    run_case("bert-cls", HR_POOL_CLS);
}
static void test_bert_mean(void **st) {
    (void)st;
    run_case("bert-mean", HR_POOL_MEAN);
}

/* test_embed_parity [--device NAME] */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_last_token),
        cmocka_unit_test(test_bert_cls),
        cmocka_unit_test(test_bert_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
