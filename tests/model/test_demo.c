/* The bundled demo models against transformers' golden outputs
 * (tests/fixtures/demo/golden.json, from tools/demo-model/train.py): the
 * chat template renders each prompt byte for byte, the tokenizer gives its
 * ids, and teacher-forced along the oracle's greedy continuation every
 * step's argmax and top-5 logprobs match (bf16 weights, float32 math on
 * both sides: 1e-4 absolute). */
#include "chat/chat.h"
#include "core/error.h"
#include "support/kl.h"
#include "support/runner.h"
#include "model/forward.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

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

#define TOL 1e-4
#define NEAR_TIE 1e-3

static json_t *g_golden;
static char g_root[4096];

static void check_model(const char *dir, const char *key) {
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, dir, &err))
        fail_msg("%s", err.msg);
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 512};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    int V = m->hp.n_vocab, steps = 0, agree = 0;
    float *logits = malloc((size_t)V * sizeof *logits);
    double worst = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(g_golden, "prompts"), i, p) {
        json_t *ids = json_object_get(p, "prompt_ids"), *side = json_object_get(p, key);
        int n = (int)json_array_size(ids);
        int32_t *prompt = malloc((size_t)n * sizeof *prompt);
        for (int k = 0; k < n; k++)
            prompt[k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
        hr_runner_reset(r);
        assert_int_equal(hr_runner_eval(r, prompt, n, logits, &err), 0);
        free(prompt);
        size_t s;
        json_t *st;
        json_array_foreach(json_object_get(side, "steps"), s, st) {
            int32_t want = (int32_t)json_integer_value(json_object_get(st, "token"));
            double margin = json_number_value(json_object_get(st, "margin"));
            int32_t got = hr_argmax(logits, V);
            steps++;
            if (got == want)
                agree++;
            else if (margin >= NEAR_TIE)
                fail_msg("%s %s step %zu: argmax %d, oracle %d (margin %g)", key,
                         json_string_value(json_object_get(p, "name")), s, got, want, margin);
            double lse = hr_logsumexp_f64(logits, V);
            size_t t;
            json_t *e;
            json_array_foreach(json_object_get(st, "top5"), t, e) {
                int id = (int)json_integer_value(json_array_get(e, 0));
                double d = fabs(logits[id] - lse - json_number_value(json_array_get(e, 1)));
                worst = d > worst ? d : worst;
                if (d > TOL)
                    fail_msg("%s step %zu: logprob of %d off by %g", key, s, id, d);
            }
            assert_int_equal(hr_runner_eval(r, &want, 1, logits, &err), 0);
        }
    }
    printf("demo %-11s %d/%d greedy steps match transformers, max |dlogprob| %.2e\n", key,
           agree, steps, worst);
    free(logits);
    hr_runner_free(r);
    hr_model_free(m);
}

static void test_main_model(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", g_root);
    check_model(dir, "main");
}

/* A forward context made for 40 positions takes position 39 and refuses
 * 40 with a clear error (its attention scratch is sized by it). */
static void test_forward_context(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", g_root);
    hr_error err = {0};
    hr_model *m = NULL;
    assert_int_equal(hr_model_open(&m, dir, &err), 0);
    hr_kv kv;
    assert_int_equal(hr_kv_init(&kv, &m->hp, HR_DTYPE_F32, 2, &err), 0);
    hr_fwd *f = NULL;
    assert_int_equal(hr_fwd_new(&f, m, 4, 1, 40, 2, &err), 0);
    int32_t table[2] = {hr_kv_alloc(&kv), hr_kv_alloc(&kv)}, tok = 1, seq = 0;
    uint8_t want = 1;
    hr_seq_blocks sb = {table, 2, 0, 0};
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    for (int32_t pos = 38; pos <= 40; pos++) {
        hr_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &want,
                      .n_seqs = 1, .seqs = &sb};
        int rc = hr_forward(f, &kv, &b, logits, &err);
        if (pos < 40) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, HR_ERANGE);
            assert_string_equal(err.msg, "position 40 is past the context of 40 tokens");
        }
    }
    free(logits);
    hr_fwd_free(f);
    hr_kv_deinit(&kv);
    hr_model_free(m);
}

static void test_draft_model(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo-draft", g_root);
    check_model(dir, "draft");
}

static void test_template_and_tokens(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", g_root);
    hr_error err;
    hr_tokenizer *tok;
    assert_int_equal(hr_tokenizer_load(&tok, dir, &err), 0);
    hr_chat_model_files files = {0};
    assert_int_equal(hr_chat_model_load(&files, dir, NULL, 0, &err), 0);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(g_golden, "prompts"), i, p) {
        const char *want = json_string_value(json_object_get(p, "prompt"));
        json_t *msgs = json_object_get(p, "messages");
        if (msgs) {
            hr_chat_opts co = {.bos_token = files.bos_token, .eos_token = files.eos_token,
                               .add_generation_prompt = 1};
            char *got = NULL;
            if (hr_chat_render(files.template_src, msgs, NULL, NULL, &co, &got, &err))
                fail_msg("%s", err.msg);
            assert_string_equal(got, want);
            free(got);
        }
        hr_tokens t = {0};
        assert_int_equal(hr_tokenizer_encode(tok, want, strlen(want), msgs ? 0 : HR_TOK_ADD_SPECIAL,
                                             &t, &err), 0);
        json_t *ids = json_object_get(p, "prompt_ids");
        assert_int_equal(t.n, json_array_size(ids));
        for (size_t k = 0; k < t.n; k++)
            assert_int_equal(t.ids[k], json_integer_value(json_array_get(ids, k)));
        hr_tokens_free(&t);
    }
    hr_chat_model_files_free(&files);
    hr_tokenizer_free(tok);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s", root ? root : ".");
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/demo/golden.json", g_root);
    json_error_t je;
    g_golden = json_load_file(path, 0, &je);
    if (!g_golden) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_and_tokens),
        cmocka_unit_test(test_main_model),
        cmocka_unit_test(test_draft_model),
        cmocka_unit_test(test_forward_context),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_golden);
    return rc;
}
