/* The chat page's embedded files: every file of web/ is in the table with
 * its URL, content type, ETag and exact bytes. */
#include "server/ui.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_paths(void **state) {
    (void)state;
    const hr_ui_asset *index = hr_ui_find("/");
    assert_non_null(index);
    assert_string_equal(index->content_type, "text/html; charset=utf-8");
    assert_non_null(hr_ui_find("/ui/app.js"));
    assert_non_null(hr_ui_find("/ui/markdown.js"));
    assert_non_null(hr_ui_find("/ui/style.css"));
    assert_null(hr_ui_find("/ui/index.html")); /* only at "/" */
    assert_null(hr_ui_find("/index.html"));
    assert_null(hr_ui_find("/ui/"));
    assert_null(hr_ui_find("/ui/../CMakeLists.txt"));
    assert_null(hr_ui_find(""));
}

/* Each entry holds the bytes of web/<file>, NUL-terminated, with a quoted
 * 16-hex-digit ETag that differs between files. */
static void test_bytes(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    assert_non_null(root);
    assert_true(hr__ui_n_assets >= 5);
    for (int i = 0; i < hr__ui_n_assets; i++) {
        const hr_ui_asset *a = &hr__ui_assets[i];
        char path[4096];
        const char *name = !strcmp(a->path, "/") ? "index.html" : a->path + 4;
        snprintf(path, sizeof path, "%s/web/%s", root, name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char *buf = malloc(a->len + 1);
        assert_non_null(buf);
        size_t n = fread(buf, 1, a->len + 1, f);
        fclose(f);
        assert_int_equal(n, a->len);
        assert_memory_equal(buf, a->data, a->len);
        free(buf);
        assert_int_equal(a->data[a->len], 0);
        assert_int_equal(strlen(a->etag), 18);
        assert_true(a->etag[0] == '"' && a->etag[17] == '"');
        assert_ptr_equal(hr_ui_find(a->path), a);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(hr__ui_assets[j].etag, a->etag);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
