/* chat/messages.c: OpenAI messages made ready for a template, and mlx-lm's
 * plain format for models without one. */
#include "chat/messages.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

static json_t *load(const char *s) { return json_loads(s, 0, NULL); }

static void test_normalize(void **state) {
    (void)state;
    json_t *in = load("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                      " {\"type\": \"text\", \"text\": \"b\"}]},"
                      " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\":"
                      " {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}]");
    json_t *out = NULL;
    hr_error err = {0};
    assert_int_equal(hr_chat_messages_normalize(in, &out, &err), 0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 0), "content")), "ab");
    json_t *a = json_array_get(out, 1);
    assert_string_equal(json_string_value(json_object_get(a, "content")), "");
    json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(a, "tool_calls"),
                                                                  0), "function"), "arguments");
    assert_true(json_is_object(args));
    assert_int_equal(json_integer_value(json_object_get(args, "x")), 1);
    /* the input is not changed */
    assert_true(json_is_array(json_object_get(json_array_get(in, 0), "content")));
    json_decref(out);
    json_decref(in);
}

static void expect_err(const char *text, const char *msg) {
    json_t *in = text ? load(text) : NULL, *out = (json_t *)1;
    hr_error err = {0};
    assert_int_equal(hr_chat_messages_normalize(in, &out, &err), HR_EINVAL);
    assert_null(out);
    assert_non_null(strstr(err.msg, msg));
    json_decref(in);
}

static void test_errors(void **state) {
    (void)state;
    expect_err(NULL, "non-empty array");
    expect_err("[]", "non-empty array");
    expect_err("[{\"content\": \"x\"}]", "string 'role'");
    expect_err("[{\"role\": \"user\", \"content\": 3}]", "content must be");
    expect_err("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", "'text' content parts");
}

static void test_plain(void **state) {
    (void)state;
    json_t *in = load("[{\"role\": \"system\", \"content\": \"be brief\"},"
                      " {\"role\": \"user\", \"content\": \"hi\"}]");
    char *p = hr_chat_plain(in);
    assert_string_equal(p, "ASSISTANT's RULE: be brief\nUSER: hi\nASSISTANT:");
    free(p);
    json_decref(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
