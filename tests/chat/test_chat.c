/* The chat front end: template variables as transformers passes them,
 * kwargs / chat_template_kwargs, and finding a model directory's template
 * and special tokens. */
#include "chat/chat.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static json_t *js(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j)
        fail_msg("bad JSON in test: %s", je.text);
    return j;
}

static void test_variables(void **state) {
    (void)state;
    json_t *msgs = js("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
                      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":"
                      "{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}]");
    json_t *tools = js("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    json_t *kw = js("{\"enable_thinking\":false,\"chat_template_kwargs\":{\"x\":\"X\"}}");
    const char *tpl =
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}:"
        "{% if m.content is string %}{{ m.content }}{% elif m.content is none %}none"
        "{% else %}{{ m.content[0].text }}{% endif %}"
        "{% for c in m.tool_calls or [] %}<{{ c.function.name }}{{ c.function.arguments|tojson }}>"
        "{% endfor %}]{% endfor %}{{ tools|length }}{{ documents is none }}{{ enable_thinking }}"
        "{{ x }}{{ chat_template_kwargs is defined }}{% if add_generation_prompt %}GO{% endif %}"
        "{{ eos_token is defined }}";
    hr_chat_opts o = {.bos_token = "<s>", .add_generation_prompt = 1};
    char *out;
    hr_error err;
    assert_int_equal(hr_chat_render(tpl, msgs, tools, kw, &o, &out, &err), 0);
    assert_string_equal(out, "<s>[user:hi][assistant:none<f{\"a\": 1}>]1TrueFalseXFalseGOFalse");
    free(out);
    /* no tools: the variable exists and is None, as transformers passes it */
    assert_int_equal(hr_chat_render("{{ tools is none }}{{ tools is defined }}", msgs, NULL,
                                    NULL, NULL, &out, &err),
                     0);
    assert_string_equal(out, "TrueTrue");
    free(out);
    /* compile once, render many */
    hr_chat_template *t;
    assert_int_equal(hr_chat_template_new(&t, "{{ messages|length }}", strlen("{{ messages|length }}"), &err), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hr_chat_template_render(t, msgs, NULL, NULL, NULL, &out, &err), 0);
        assert_string_equal(out, "2");
        free(out);
    }
    hr_chat_template_free(t);
    hr_chat_template_free(NULL);
    json_decref(msgs);
    json_decref(tools);
    json_decref(kw);
}

static void test_errors(void **state) {
    (void)state;
    json_t *msgs = js("[{\"role\":\"user\",\"content\":\"hi\"}]"), *obj = js("{}");
    json_t *bad_kw = js("{\"messages\":[]}"), *arr = js("[]");
    char *out;
    hr_error err;
    assert_int_equal(hr_chat_render("x", obj, NULL, NULL, NULL, &out, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "messages must be a JSON array"));
    assert_int_equal(hr_chat_render("x", msgs, obj, NULL, NULL, &out, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "tools"));
    assert_int_equal(hr_chat_render("x", msgs, NULL, arr, NULL, &out, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "kwargs must be a JSON object"));
    assert_int_equal(hr_chat_render("x", msgs, NULL, bad_kw, NULL, &out, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "'messages' cannot be overridden"));
    assert_int_equal(hr_chat_render("{% if messages[0].role != 'system' %}"
                                    "{{ raise_exception('System role required') }}{% endif %}",
                                    msgs, NULL, NULL, NULL, &out, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "raise_exception: System role required"));
    assert_int_equal(hr_chat_render("{% if %}", msgs, NULL, NULL, NULL, &out, &err), HR_EFORMAT);
    hr_chat_opts small = {.max_output = 100};
    assert_int_equal(hr_chat_render("{{ 'x' * 200 }}", msgs, NULL, NULL, &small, &out, &err),
                     HR_ENOMEM);
    json_decref(msgs);
    json_decref(obj);
    json_decref(bad_kw);
    json_decref(arr);
}

/* ---- model directories ---------------------------------------------------------- */

static char dir[256];

static void put(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void drop(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void test_model_dir(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hearth-chat-XXXXXX");
    assert_non_null(mkdtemp(dir));
    hr_chat_model_files f;
    hr_error err;
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no chat template"));

    put("tokenizer_config.json",
        "{\"bos_token\":{\"content\":\"<B>\",\"lstrip\":false},\"eos_token\":\"<E>\","
        "\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
        "{\"name\":\"tool_use\",\"template\":\"T\"}]}");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), 0);
    assert_string_equal(f.template_src, "D");
    assert_string_equal(f.bos_token, "<B>");
    assert_string_equal(f.eos_token, "<E>");
    hr_chat_model_files_free(&f);
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 1, &err), 0);
    assert_string_equal(f.template_src, "T");
    hr_chat_model_files_free(&f);
    assert_int_equal(hr_chat_model_load(&f, dir, "nope", 0, &err), HR_ENOTFOUND);

    put("tokenizer_config.json", "{\"chat_template\":\"S\",\"eos_token\":null}");
    put("special_tokens_map.json", "{\"bos_token\":\"<b2>\",\"eos_token\":{\"content\":\"<e2>\"}}");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), 0);
    assert_string_equal(f.template_src, "S");
    assert_string_equal(f.bos_token, "<b2>");
    assert_string_equal(f.eos_token, "<e2>");
    hr_chat_model_files_free(&f);

    put("chat_template.json", "{\"chat_template\":\"J\"}");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), 0);
    assert_string_equal(f.template_src, "J");
    hr_chat_model_files_free(&f);
    put("chat_template.jinja", "{{ 'file' }}");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), 0);
    assert_string_equal(f.template_src, "{{ 'file' }}");
    hr_chat_model_files_free(&f);

    put("tokenizer_config.json", "{not json");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    put("tokenizer_config.json", "{}");
    drop("chat_template.jinja");
    put("chat_template.json", "{\"chat_template\":5}");
    assert_int_equal(hr_chat_model_load(&f, dir, NULL, 0, &err), HR_EFORMAT);
    hr_chat_model_files_free(NULL);

    drop("tokenizer_config.json");
    drop("special_tokens_map.json");
    drop("chat_template.json");
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variables),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_model_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
