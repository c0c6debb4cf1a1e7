/* src/grammar/minimize.c: equivalent states merge to the minimal automaton
 * (state counts of grammars whose minimal DFA is known), across rules, and
 * long chains of distinguishable states (one refinement round per state)
 * minimize exactly; the language is unchanged. */
#include "core/error.h"
#include "core/timer.h"
#include "grammar/grammar.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_grammar *gbnf(const char *src) {
    hr_grammar *g = NULL;
    hr_error err = {0};
    int rc = hr_grammar_from_gbnf(&g, src, strlen(src), &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", src, err.msg);
    assert_int_equal(rc, 0);
    return g;
}

static int accepts(const hr_grammar *g, const char *s) {
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, NULL, NULL), 0);
    int r = !hr_matcher_accept_bytes(m, s, strlen(s), NULL) && hr_matcher_can_end(m);
    hr_matcher_free(m);
    return r;
}

static void test_merges(void **state) {
    (void)state;
    /* start, after a or c, end */
    hr_grammar *g = gbnf("root ::= \"ab\" | \"cb\"\n");
    assert_int_equal(hr_grammar_n_states(g), 3);
    hr_grammar_free(g);
    /* the same sub-automaton twice collapses to one: 5 states */
    g = gbnf("root ::= [ab] [ab] [ab] \"x\" | [ab] [ab] [ab] \"x\"\n");
    assert_int_equal(hr_grammar_n_states(g), 5);
    assert_true(accepts(g, "abax"));
    assert_false(accepts(g, "abx"));
    hr_grammar_free(g);
    /* across rules: x and y are the same automaton, called from one state */
    g = gbnf("root ::= \"(\" (x | y) \")\" root?\nx ::= [0-9]+ \".\"\ny ::= [0-9]+ \".\"\n");
    assert_true(accepts(g, "(12.)(3.)"));
    assert_false(accepts(g, "(12)"));
    hr_grammar_free(g);
}

static void test_long_chain(void **state) {
    (void)state;
    /* [a-z]{0,N} "!": positions 0..N, each distinguishable (how many letters
       may still come), and the end: N + 2 states */
    enum { N = 20000 };
    char src[64];
    snprintf(src, sizeof src, "root ::= [a-z]{0,%d} \"!\"\n", N);
    double t0 = hr_now();
    hr_grammar *g = gbnf(src);
    fprintf(stderr, "chain of %d: compiled in %.0f ms\n", N, (hr_now() - t0) * 1e3);
    assert_int_equal(hr_grammar_n_states(g), N + 2);
    char *s = malloc(N + 2);
    memset(s, 'q', N);
    strcpy(s + N, "!");
    assert_true(accepts(g, s));
    s[N] = 'q';
    s[N + 1] = 0;
    assert_false(accepts(g, s));
    free(s);
    hr_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges),
        cmocka_unit_test(test_long_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
