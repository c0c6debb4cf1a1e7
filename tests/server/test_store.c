/* The /v1/responses store: entries by id, deep copies out, eviction of the
 * oldest by count and by bytes, oversize entries dropped, replace, delete. */
#include "server/store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

static void put(hr_resp_store *st, const char *id, const char *text) {
    hr__resp_store_put(st, id, json_pack("{s:s}", "id", id), json_pack("[s]", text));
}

static bool has(hr_resp_store *st, const char *id) { return hr__resp_store_get(st, id, NULL, NULL); }

static void test_get_copy_delete(void **state) {
    (void)state;
    hr_resp_store *st = hr__resp_store_new(4, 1 << 20);
    assert_non_null(st);
    put(st, "a", "x");
    json_t *r = NULL, *c = NULL;
    assert_true(hr__resp_store_get(st, "a", &r, &c));
    assert_string_equal(json_string_value(json_object_get(r, "id")), "a");
    json_array_append_new(c, json_string("changed")); /* a copy: the store keeps its own */
    json_decref(c);
    assert_true(hr__resp_store_get(st, "a", NULL, &c));
    assert_int_equal(json_array_size(c), 1);
    json_decref(c);
    json_decref(r);
    put(st, "a", "y"); /* replaces */
    assert_true(hr__resp_store_get(st, "a", NULL, &c));
    assert_string_equal(json_string_value(json_array_get(c, 0)), "y");
    json_decref(c);
    assert_false(has(st, "b"));
    assert_true(hr__resp_store_delete(st, "a"));
    assert_false(hr__resp_store_delete(st, "a"));
    assert_false(has(st, "a"));
    hr__resp_store_free(st);
    hr__resp_store_free(NULL);
}

static void test_eviction(void **state) {
    (void)state;
    hr_resp_store *st = hr__resp_store_new(3, 1 << 20);
    char id[8];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "r%d", i);
        put(st, id, "x");
    }
    assert_false(has(st, "r0"));
    assert_false(has(st, "r1"));
    assert_true(has(st, "r2") && has(st, "r3") && has(st, "r4"));
    hr__resp_store_free(st);
    /* by bytes: each entry is {"id":"rN"} + ["<100 x>"], about 115 bytes */
    st = hr__resp_store_new(100, 300);
    char big[101];
    memset(big, 'x', 100);
    big[100] = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "r%d", i);
        put(st, id, big);
    }
    assert_false(has(st, "r0") || has(st, "r1"));
    assert_true(has(st, "r2") && has(st, "r3"));
    char huge[400];
    memset(huge, 'y', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    put(st, "h", huge); /* larger than the whole store: dropped, the rest stays */
    assert_false(has(st, "h"));
    assert_true(has(st, "r3"));
    hr__resp_store_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_copy_delete),
        cmocka_unit_test(test_eviction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
