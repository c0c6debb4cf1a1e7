/* api/textout.c: tokens -> final text through the streaming detokenizer and
 * the stop strings (tests/fixtures/serve's tokenizer). */
#include "api/textout.h"
#include "core/error.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/serve", root ? root : ".");
    hr_error err = {0};
    if (hr_tokenizer_load(&g_tok, dir, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hr_tokenizer_free(g_tok);
    return 0;
}

/* Push text's tokens one by one; the emitted text and whether a stop hit. */
static bool run(const char *text, const char *const *stops, int n_stops, bool eos, char *out) {
    hr_tokens t = {0};
    hr_error err = {0};
    assert_int_equal(hr_tokenizer_encode(g_tok, text, strlen(text), 0, &t, &err), 0);
    hr_textout o;
    assert_int_equal(hr_textout_init(&o, g_tok, HR_DETOK_SKIP_SPECIAL, stops, n_stops, &err), 0);
    size_t len = 0;
    bool hit = false;
    const char *e;
    size_t el;
    for (size_t i = 0; i < t.n && !hit; i++) {
        int r = hr_textout_push(&o, t.ids[i], &e, &el, &err);
        assert_true(r >= 0);
        hit = r == 1;
        memcpy(out + len, e, el);
        len += el;
    }
    assert_int_equal(hr_textout_finish(&o, eos, &e, &el, &err), 0);
    memcpy(out + len, e, el);
    out[len + el] = 0;
    hr_textout_deinit(&o);
    hr_tokens_free(&t);
    return hit;
}

static void test_plain_text(void **state) {
    (void)state;
    char out[256];
    assert_false(run("the fox and the box", NULL, 0, false, out));
    assert_string_equal(out, "the fox and the box");
}

static void test_stop_split_across_tokens(void **state) {
    (void)state;
    const char *stops[] = {"nope", "x and"};
    char out[256];
    assert_true(run("the fox and the box", stops, 2, false, out));
    assert_string_equal(out, "the fo"); /* nothing of the stop string leaks */
}

static void test_partial_stop_at_the_end(void **state) {
    (void)state;
    const char *stops[] = {"box!"};
    char out[256];
    /* the text ends inside a possible stop string: released at the end of
     * generation by length, dropped at end of sequence (as mlx-lm) */
    assert_false(run("the fox and the box", stops, 1, false, out));
    assert_string_equal(out, "the fox and the box");
    assert_false(run("the fox and the box", stops, 1, true, out));
    assert_string_equal(out, "the fox and the ");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text),
        cmocka_unit_test(test_stop_split_across_tokens),
        cmocka_unit_test(test_partial_stop_at_the_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
