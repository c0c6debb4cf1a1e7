/* Stop strings across token boundaries never leak. */
#include "api/stop.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

/* Feed pieces; return the total emitted text and whether it stopped. */
static int run(const char *const *stops, int n_stops, const char *const *pieces, int n,
               char *out) {
    hr_stop s;
    assert_int_equal(hr_stop_init(&s, stops, n_stops), 0);
    out[0] = 0;
    int stopped = 0;
    for (int i = 0; i < n && !stopped; i++) {
        const char *e;
        size_t el;
        stopped = hr_stop_push(&s, pieces[i], strlen(pieces[i]), &e, &el);
        strncat(out, e, el);
    }
    if (!stopped) {
        const char *e;
        size_t el;
        hr_stop_flush(&s, &e, &el);
        strncat(out, e, el);
    }
    hr_stop_deinit(&s);
    return stopped;
}

static void test_split_stop(void **state) {
    (void)state;
    char out[256];
    const char *stops[] = {"</end>", "STOP"};
    const char *p1[] = {"hello <", "/e", "nd> more"};
    assert_int_equal(run(stops, 2, p1, 3, out), 1);
    assert_string_equal(out, "hello ");
    const char *p2[] = {"a <", "/x> b"}; /* a near-miss is released */
    assert_int_equal(run(stops, 2, p2, 2, out), 0);
    assert_string_equal(out, "a </x> b");
    const char *p3[] = {"ST", "O", "P!"};
    assert_int_equal(run(stops, 2, p3, 3, out), 1);
    assert_string_equal(out, "");
    const char *p4[] = {"ends with </en"}; /* held back, then flushed */
    assert_int_equal(run(stops, 2, p4, 1, out), 0);
    assert_string_equal(out, "ends with </en");
    const char *p5[] = {"x STOP y </end>"}; /* earliest wins */
    assert_int_equal(run(stops, 2, p5, 1, out), 1);
    assert_string_equal(out, "x ");
    const char *none[] = {"a", "b"};
    assert_int_equal(run(NULL, 0, none, 2, out), 0);
    assert_string_equal(out, "ab");
    const char *empty[] = {""}; /* an empty stop string never matches */
    assert_int_equal(run(empty, 1, none, 2, out), 0);
    assert_string_equal(out, "ab");
}

static void test_hold_back_is_minimal(void **state) {
    (void)state;
    hr_stop s;
    const char *stops[] = {"abc"};
    assert_int_equal(hr_stop_init(&s, stops, 1), 0);
    const char *e;
    size_t el;
    assert_int_equal(hr_stop_push(&s, "xxab", 4, &e, &el), 0);
    assert_int_equal(el, 2); /* "ab" may start "abc" */
    assert_memory_equal(e, "xx", 2);
    assert_int_equal(hr_stop_push(&s, "d", 1, &e, &el), 0);
    assert_int_equal(el, 3);
    assert_memory_equal(e, "abd", 3);
    hr_stop_deinit(&s);
}

/* Which stop string ended the stream: the earliest in the text, after
 * empty strings are dropped. */
static void test_matched(void **state) {
    (void)state;
    hr_stop s;
    const char *stops[] = {"", "</end>", "STOP"};
    assert_int_equal(hr_stop_init(&s, stops, 3), 0);
    const char *e;
    size_t el;
    assert_int_equal(hr_stop_push(&s, "x ST", 4, &e, &el), 0);
    assert_null(hr_stop_matched(&s));
    assert_int_equal(hr_stop_push(&s, "OP </end>", 9, &e, &el), 1);
    assert_string_equal(hr_stop_matched(&s), "STOP");
    hr_stop_deinit(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_stop),
        cmocka_unit_test(test_hold_back_is_minimal),
        cmocka_unit_test(test_matched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
