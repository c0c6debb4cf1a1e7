/* hub: the revision listing parser, file-name checks and include globs, each
 * error provoked (the transfers are tested end to end: tests/e2e/hub.sh). */
#include "core/error.h"
#include "io/hub.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#define SHA "5d3c0e8a1f2b4c6d8e0f1a2b3c4d5e6f7a8b9c0d"

static void expect_bad(const char *json, const char *want) {
    hr_hub_info info;
    hr_error err;
    assert_int_equal(hr_hub_info_parse(&info, json, strlen(json), &err), HR_EFORMAT);
    if (!strstr(err.msg, want))
        fail_msg("'%s' not in '%s'", want, err.msg);
    assert_int_equal(info.n_files, 0);
    assert_null(info.files);
}

static void test_listing(void **state) {
    (void)state;
    const char *ok = "{\"id\": \"o/n\", \"sha\": \"" SHA "\", \"siblings\": [{\"rfilename\": "
                     "\"config.json\"}, {\"rfilename\": \"sub/x.bin\", \"size\": 3}]}";
    hr_hub_info info;
    hr_error err;
    assert_int_equal(hr_hub_info_parse(&info, ok, strlen(ok), &err), 0);
    assert_string_equal(info.sha, SHA);
    assert_int_equal(info.n_files, 2);
    assert_string_equal(info.files[1], "sub/x.bin");
    hr_hub_info_deinit(&info);
    hr_hub_info_deinit(NULL);
    const char *empty = "{\"sha\": \"" SHA "\", \"siblings\": []}";
    assert_int_equal(hr_hub_info_parse(&info, empty, strlen(empty), &err), 0);
    assert_int_equal(info.n_files, 0);
    hr_hub_info_deinit(&info);

    expect_bad("{", "bad JSON");
    expect_bad("[]", "no 40-hex-digit \"sha\"");
    expect_bad("{\"sha\": \"abc\", \"siblings\": []}", "no 40-hex-digit");
    expect_bad("{\"sha\": \"" SHA "\"}", "\"siblings\" is not an array");
    expect_bad("{\"sha\": \"" SHA "\", \"siblings\": [3]}", "siblings[0] has no string");
    expect_bad("{\"sha\": \"" SHA "\", \"siblings\": [{\"rfilename\": \"a\\u0000b\"}]}",
               "bad JSON");
    expect_bad("{\"sha\": \"" SHA "\", \"siblings\": [{\"rfilename\": 7}]}",
               "siblings[0] has no string");
    expect_bad("{\"sha\": \"" SHA "\", \"siblings\": [{\"rfilename\": \"a\\nb\"}]}",
               "control character");
    /* an error quoting the input stays one line */
    hr_hub_info info2;
    assert_int_equal(hr_hub_info_parse(&info2, "{\"a\n\": x", 9, &err), HR_EFORMAT);
    assert_null(strchr(err.msg, '\n'));
    expect_bad("{\"sha\": \"" SHA "\", \"siblings\": [{\"rfilename\": \"../etc/passwd\"}]}",
               "leaves its folder");
    expect_bad("{\"sha\": \"" SHA "\", \"sha\": \"" SHA "\", \"siblings\": []}", "bad JSON");
}

static void test_paths(void **state) {
    (void)state;
    hr_error err;
    const char *good[] = {"a", "config.json", "sub/dir/x.safetensors", ".gitattributes", "a..b"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_int_equal(hr_hub_path_check(good[i], &err), 0);
    const char *bad[] = {"", "/abs", "a//b", "a/", ".", "..", "a/../b", "a/./b", "a\\b",
                         "a\nb", "x\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(hr_hub_path_check(bad[i], &err), HR_EFORMAT);
    char longname[1100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(hr_hub_path_check(longname, &err), HR_EFORMAT);
}

static void test_globs(void **state) {
    (void)state;
    assert_true(hr_hub_glob_match("*.json", "config.json"));
    assert_true(hr_hub_glob_match("*.json", "sub/x.json")); /* '*' crosses '/' */
    assert_false(hr_hub_glob_match("*.json", "model.safetensors"));
    assert_true(hr_hub_glob_match("sub/", "sub/a/b.txt"));  /* a folder: all under it */
    assert_false(hr_hub_glob_match("sub/", "subx/a"));
    assert_true(hr_hub_glob_match("model-0000?-of-*.safetensors",
                                  "model-00001-of-00003.safetensors"));
    assert_true(hr_hub_glob_match("[ct]*", "tokenizer.json"));
    assert_false(hr_hub_glob_match("*.JSON", "config.json")); /* case-sensitive */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_globs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
