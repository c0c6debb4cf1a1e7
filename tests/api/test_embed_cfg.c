/* src/api/embed_cfg.c: reading sentence-transformers files (every way one
 * can be unsupported says so) and pooling (cls / mean / last token,
 * Normalize, Matryoshka head re-normalised). */
#include "api/embed_cfg.h"
#include "core/error.h"
#include "support/tree.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hr_embed_cfg_%d", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static const char MODULES[] =
    "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
    "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
    "{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]";

static void pooling_file(const char *modes) {
    char j[512];
    snprintf(j, sizeof j, "{\"word_embedding_dimension\": 4, %s}", modes);
    assert_int_equal(hr_test_put(dir, "1_Pooling/config.json", j), 0);
}

static void test_read(void **state) {
    (void)state;
    hr_embed_cfg c;
    /* no modules.json: the defaults */
    assert_int_equal(hr_test_put(dir, "config.json", "{}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_true(c.pooling == HR_POOL_MEAN && !c.normalize && !c.from_st && !c.err[0]);
    hr__embed_cfg_free(&c);
    assert_int_equal(hr__embed_cfg_load(&c, dir, false, 4), 0);
    assert_true(c.pooling == HR_POOL_LAST && c.normalize && !c.err[0]);
    hr__embed_cfg_free(&c);
    /* a full configuration */
    assert_int_equal(hr_test_put(dir, "modules.json", MODULES), 0);
    pooling_file("\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false");
    assert_int_equal(hr_test_put(dir, "sentence_bert_config.json",
                                 "{\"max_seq_length\": 24, \"do_lower_case\": false}"), 0);
    assert_int_equal(hr_test_put(dir, "config_sentence_transformers.json",
                                 "{\"prompts\": {\"query\": \"query: \", \"passage\": \"passage: \"},"
                                 " \"default_prompt_name\": \"query\"}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_true(c.from_st && c.pooling == HR_POOL_CLS && c.normalize && c.max_seq == 24);
    assert_string_equal(c.err, "");
    const char *p;
    hr_error err;
    assert_int_equal(hr__embed_prompt(&c, NULL, &p, &err), 0);
    assert_string_equal(p, "query: ");
    assert_int_equal(hr__embed_prompt(&c, "passage", &p, &err), 0);
    assert_string_equal(p, "passage: ");
    assert_int_equal(hr__embed_prompt(&c, "", &p, &err), 0);
    assert_null(p);
    assert_int_equal(hr__embed_prompt(&c, "nope", &p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "'query'"));
    hr__embed_cfg_free(&c);
    /* unsupported: said in err, never a load failure */
    const char *modes[] = {"\"pooling_mode_max_tokens\": true",
                           "\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true",
                           "\"pooling_mode_mean_tokens\": false"};
    const char *want[] = {"pooling mode max_tokens", "2 pooling modes", "0 pooling modes"};
    for (int i = 0; i < 3; i++) {
        pooling_file(modes[i]);
        assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
        assert_non_null(strstr(c.err, want[i]));
        hr__embed_cfg_free(&c);
    }
    pooling_file("\"pooling_mode_lasttoken\": true");
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 8), 0); /* the model is 8 wide */
    assert_non_null(strstr(c.err, "embedding dimension 4"));
    hr__embed_cfg_free(&c);
    assert_int_equal(hr_test_put(dir, "modules.json",
                                 "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
                                 "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
                                 "{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_non_null(strstr(c.err, "not supported yet: sentence-transformers module "
                                  "sentence_transformers.models.Dense"));
    hr__embed_cfg_free(&c);
    assert_int_equal(hr_test_put(dir, "modules.json", "[1"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_non_null(strstr(c.err, "not valid JSON"));
    hr__embed_cfg_free(&c);
    /* sentence-transformers 6: one pooling_mode string, max_seq_length in the
     * tokenizer's model_max_length */
    assert_int_equal(hr_test_put(dir, "modules.json", MODULES), 0);
    assert_int_equal(hr_test_put(dir, "1_Pooling/config.json",
                                 "{\"embedding_dimension\": 4, \"pooling_mode\": \"lasttoken\"}"), 0);
    assert_int_equal(hr_test_put(dir, "sentence_bert_config.json", "{\"transformer_task\": \"x\"}"), 0);
    assert_int_equal(hr_test_put(dir, "tokenizer_config.json", "{\"model_max_length\": 40}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_true(c.pooling == HR_POOL_LAST && c.max_seq == 40 && !c.err[0]);
    hr__embed_cfg_free(&c);
    assert_int_equal(hr_test_put(dir, "1_Pooling/config.json", "{\"pooling_mode\": \"max\"}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_non_null(strstr(c.err, "not supported yet: pooling mode max"));
    hr__embed_cfg_free(&c);
    /* do_lower_case: not supported yet */
    assert_int_equal(hr_test_put(dir, "modules.json", MODULES), 0);
    pooling_file("\"pooling_mode_cls_token\": true");
    assert_int_equal(hr_test_put(dir, "sentence_bert_config.json", "{\"do_lower_case\": true}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_non_null(strstr(c.err, "not supported yet: sentence_bert_config.json do_lower_case"));
    hr__embed_cfg_free(&c);
    assert_int_equal(hr_test_put(dir, "sentence_bert_config.json", "{\"do_lower_case\": false}"), 0);
    /* a default prompt that is not among the prompts */
    assert_int_equal(hr_test_put(dir, "modules.json", MODULES), 0);
    assert_int_equal(hr_test_put(dir, "config_sentence_transformers.json",
                                 "{\"prompts\": {\"a\": \"x\"}, \"default_prompt_name\": \"b\"}"), 0);
    assert_int_equal(hr__embed_cfg_load(&c, dir, true, 4), 0);
    assert_non_null(strstr(c.err, "default_prompt_name 'b'"));
    hr__embed_cfg_free(&c);
}

static void test_pool(void **state) {
    (void)state;
    const float h[3 * 4] = {1, 2, 3, 4, 0, 0, 0, 2, -1, 4, 0, 0};
    float full[4], out[4];
    hr_embed_cfg c = {.pooling = HR_POOL_CLS};
    hr__embed_pool(&c, h, 3, 4, 4, full, out);
    assert_true(out[0] == 1 && out[3] == 4);
    c.pooling = HR_POOL_LAST;
    hr__embed_pool(&c, h, 3, 4, 4, full, out);
    assert_true(out[0] == -1 && out[1] == 4 && out[3] == 0);
    c.pooling = HR_POOL_MEAN;
    hr__embed_pool(&c, h, 3, 4, 4, full, out);
    assert_true(fabsf(out[0] - 0.0f) < 1e-7f && fabsf(out[1] - 2.0f) < 1e-7f &&
                fabsf(out[3] - 2.0f) < 1e-7f);
    c.normalize = true; /* mean (0, 2, 1, 2) / 3 */
    hr__embed_pool(&c, h, 3, 4, 4, full, out);
    assert_true(fabsf(out[1] - 2.0f / 3) < 1e-6f && fabsf(out[2] - 1.0f / 3) < 1e-6f);
    /* Matryoshka: the head of the normalised vector, normalised again */
    hr__embed_pool(&c, h, 3, 4, 2, full, out);
    assert_true(fabsf(out[0]) < 1e-7f && fabsf(out[1] - 1.0f) < 1e-6f);
    c.pooling = HR_POOL_CLS;
    hr__embed_pool(&c, h, 3, 4, 2, full, out);
    assert_true(fabsf(out[0] - 1 / sqrtf(5)) < 1e-6f && fabsf(out[1] - 2 / sqrtf(5)) < 1e-6f);
    /* a zero vector stays zero (torch's eps), no NaN */
    const float z[4] = {0};
    hr__embed_pool(&c, z, 1, 4, 4, full, out);
    assert_true(out[0] == 0 && !isnan(out[3]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
