/* src/grammar: the GBNF front end and the matcher over bytes: strings
 * accepted and rejected whole and byte by byte, rollback, every parse error
 * with its position, and llama.cpp's own grammars/ files. */
#include "core/error.h"
#include "core/file.h"
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
        fprintf(stderr, "gbnf error: %s\n", err.msg);
    assert_int_equal(rc, 0);
    return g;
}

/* 1: the whole string is in the language; 0: a valid prefix only;
 * -1: rejected at some byte. Also checks byte-by-byte feeding agrees. */
static int run(const hr_grammar *g, const char *s) {
    hr_matcher *m = NULL;
    assert_int_equal(hr_matcher_new(&m, g, NULL, NULL), 0);
    int whole = hr_matcher_accept_bytes(m, s, strlen(s), NULL);
    int r = whole ? -1 : hr_matcher_can_end(m) ? 1 : 0;
    hr_matcher_reset(m);
    int byb = 0;
    for (size_t i = 0; s[i] && !byb; i++)
        byb = hr_matcher_accept_bytes(m, s + i, 1, NULL);
    int r2 = byb ? -1 : hr_matcher_can_end(m) ? 1 : 0;
    assert_int_equal(r, r2);
    hr_matcher_free(m);
    return r;
}

static void test_basics(void **state) {
    (void)state;
    hr_grammar *g = gbnf("root ::= \"ab\" [c-e]+ (\"x\" | \"yz\")? # comment\n");
    assert_int_equal(run(g, "abc"), 1);
    assert_int_equal(run(g, "abcdeyz"), 1);
    assert_int_equal(run(g, "ab"), 0);
    assert_int_equal(run(g, "abcy"), 0);
    assert_int_equal(run(g, "abf"), -1);
    assert_int_equal(run(g, "abcxx"), -1);
    hr_grammar_free(g);

    g = gbnf("root ::= a{2,3} b{2} c{1,} d{0,2}\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"\nd ::= \"d\"\n");
    assert_int_equal(run(g, "aabbc"), 1);
    assert_int_equal(run(g, "aaabbccdd"), 1);
    assert_int_equal(run(g, "aaaab"), -1);
    assert_int_equal(run(g, "aabbcddd"), -1);
    hr_grammar_free(g);
}

static void test_recursion(void **state) {
    (void)state;
    /* balanced parentheses: recursion through a called rule */
    hr_grammar *g = gbnf("root ::= p\np ::= \"(\" p* \")\"\n");
    assert_int_equal(run(g, "()"), 1);
    assert_int_equal(run(g, "(()(()))"), 1);
    assert_int_equal(run(g, "(()"), 0);
    assert_int_equal(run(g, "())"), -1);
    hr_grammar_free(g);
    /* right recursion (a tail call) runs deep without growing the stack */
    g = gbnf("root ::= \"x\" root | \"y\"\n");
    char buf[20002];
    memset(buf, 'x', 20000);
    buf[20000] = 'y';
    buf[20001] = 0;
    assert_int_equal(run(g, buf), 1);
    hr_grammar_free(g);
}

static void test_unicode(void **state) {
    (void)state;
    hr_grammar *g = gbnf("root ::= [ぁ-ゟ]+ \"\\u00e9\" [^a-z\\n] .\n");
    assert_int_equal(run(g, "あい\xc3\xa9Zq"), 1);
    assert_int_equal(run(g, "あ\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac"), 1);
    assert_int_equal(run(g, "あ\xc3\xa9z"), -1);
    assert_int_equal(run(g, "\xe3"), 0);   /* a partial code point is a prefix */
    assert_int_equal(run(g, "\xe3\x30"), -1);
    hr_grammar_free(g);
    /* negated class: any code point but a, as UTF-8, never a surrogate */
    g = gbnf("root ::= [^a]\n");
    assert_int_equal(run(g, "\xf4\x8f\xbf\xbf"), 1);
    assert_int_equal(run(g, "\xed\xa0\x80"), -1);
    assert_int_equal(run(g, "\xc0\x80"), -1);
    hr_grammar_free(g);
}

static void test_rollback(void **state) {
    (void)state;
    hr_grammar *g = gbnf("root ::= \"abc\" | \"abd\"\n");
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, NULL, NULL), 0);
    assert_int_equal(hr_matcher_accept_bytes(m, "a", 1, NULL), 0);
    assert_int_equal(hr_matcher_accept_bytes(m, "b", 1, NULL), 0);
    assert_int_equal(hr_matcher_accept_bytes(m, "c", 1, NULL), 0);
    assert_true(hr_matcher_can_end(m));
    assert_true(hr_matcher_done(m));
    assert_int_equal(hr_matcher_n_accepted(m), 3);
    assert_int_equal(hr_matcher_rollback(m, 1), 0);
    assert_false(hr_matcher_can_end(m));
    assert_int_equal(hr_matcher_accept_bytes(m, "d", 1, NULL), 0);
    assert_true(hr_matcher_can_end(m));
    assert_int_equal(hr_matcher_rollback(m, 5), HR_ERANGE);
    assert_int_equal(hr_matcher_rollback(m, 3), 0);
    assert_int_equal(hr_matcher_n_accepted(m), 0);
    hr_error err;
    assert_int_equal(hr_matcher_accept_bytes(m, "ax", 2, &err), HR_EINVAL);
    assert_int_equal(err.pos, 1);
    assert_int_equal(hr_matcher_n_accepted(m), 0); /* unchanged */
    assert_int_equal(hr_matcher_accept_bytes(m, "abd", 3, NULL), 0);
    assert_true(hr_matcher_can_end(m));
    hr_matcher_free(m);
    hr_grammar_free(g);
}

static void test_ambiguity_and_nullable(void **state) {
    (void)state;
    /* nullable rules inside repetition, ambiguous alternatives */
    hr_grammar *g = gbnf("root ::= (a | b)* \"!\"\na ::= \"x\"?\nb ::= \"x\" \"y\"? | \"xy\"\n");
    assert_int_equal(run(g, "!"), 1);
    assert_int_equal(run(g, "xxyxy!"), 1);
    assert_int_equal(run(g, "xyy!"), -1);
    hr_grammar_free(g);
}

static void expect_error(const char *src, int code, long pos, const char *needle) {
    hr_grammar *g = NULL;
    hr_error err = {0};
    err.pos = -2;
    int rc = hr_grammar_from_gbnf(&g, src, strlen(src), &err);
    if (rc != code || (pos >= -1 && err.pos != pos) || !strstr(err.msg, needle))
        fprintf(stderr, "for %s: rc %d pos %ld msg %s\n", src, rc, err.pos, err.msg);
    assert_int_equal(rc, code);
    assert_null(g);
    if (pos >= -1)
        assert_int_equal(err.pos, pos);
    assert_non_null(strstr(err.msg, needle));
}

static void test_errors(void **state) {
    (void)state;
    expect_error("root ::= \"abc", HR_EINVAL, 9, "unterminated literal");
    expect_error("root ::= [abc", HR_EINVAL, 9, "unterminated character class");
    expect_error("root ::= [z-a]", HR_EINVAL, 9, "out of order");
    expect_error("root ::= \"\\q\"", HR_EINVAL, 10, "unknown escape");
    expect_error("root ::= \"\\x4\"", HR_EINVAL, 10, "bad hex escape");
    expect_error("root ::= \"\\U00110000\"", HR_EINVAL, 10, "code point out of range");
    expect_error("root ::= \"\xff\"", HR_EINVAL, 10, "invalid UTF-8");
    expect_error("root ::= (\"a\"", HR_EINVAL, 9, "unclosed '('");
    expect_error("root ::= \"a\"{3,2}", HR_EINVAL, 12, "n < m");
    expect_error("root ::= \"a\"{2", HR_EINVAL, 12, "expected '}'");
    expect_error("root ::= \"a\"{x}", HR_EINVAL, 13, "expected a number");
    expect_error("root ::= \"a\"{1000000}", HR_ERANGE, 13, "too large");
    expect_error("root \"a\"", HR_EINVAL, 5, "expected '::='");
    expect_error("::= \"a\"", HR_EINVAL, 0, "expected a rule name");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", HR_EINVAL, 13, "defined twice");
    expect_error("root ::= \"a\" )", HR_EINVAL, 13, "expected a newline");
    expect_error("root ::= <think>", HR_EUNSUPPORTED, 9, "token references");
    expect_error("rot ::= \"a\"", HR_EINVAL, -1, "no 'root' rule");
    expect_error("root ::= foo", HR_EINVAL, 9, "undefined rule 'foo'");
    expect_error("root ::= root \"a\" | \"b\"", HR_EUNSUPPORTED, -2, "left-recursive");
    expect_error("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"", HR_EUNSUPPORTED, -2, "left-recursive");
    char deep[1000];
    memset(deep, '(', 500);
    strcpy(deep + 500, "\"a\"");
    char src[1100];
    snprintf(src, sizeof src, "root ::= %s", deep);
    expect_error(src, HR_ERANGE, -2, "nested too deeply");
    expect_error("root ::= \"a\"{100000}{100000}", HR_ERANGE, -2, "too large");
    const char nul[] = "root ::= \"a\"\0";
    hr_grammar *g = NULL;
    hr_error err;
    assert_int_equal(hr_grammar_from_gbnf(&g, nul, sizeof nul - 1, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "NUL"));
}

/* llama.cpp's grammars compile, and accept their own examples. */
static void test_llama_cpp_grammars(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    static const struct { const char *file, *good, *bad; } G[] = {
        {"json.gbnf", "{\"a\": [1, 2.5e3, true, null, \"x\\u00e9\"]}", "{\"a\" 1}"},
        {"json_arr.gbnf", "[\n{\"a\": 1},\n {\"b\": \"c\"}]", "[1,]"},
        {"arithmetic.gbnf", "1 +2*(3-4)= 7\n", "1 + + 2"},
        {"c.gbnf", "int main(){return 0;}", "int main{"},
        {"chess.gbnf", "1. e4 e5\n2. Nf3 Nc6\n", "1. e9"},
        {"list.gbnf", "- one\n- two\n", "one"},
        {"japanese.gbnf", NULL, NULL},
        {"english.gbnf", NULL, NULL},
    };
    if (!root)
        skip();
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/.deps/npm/node_modules/node-llama-cpp/llama/grammars/%s",
                 root, G[i].file);
        char *src;
        size_t len;
        if (hr_file_read(path, &src, &len, NULL)) {
            fprintf(stderr, "skipping %s (not installed)\n", path);
            continue;
        }
        hr_grammar *g = NULL;
        hr_error err;
        int rc = hr_grammar_from_gbnf(&g, src, len, &err);
        if (rc)
            fprintf(stderr, "%s: %s\n", G[i].file, err.msg);
        assert_int_equal(rc, 0);
        if (G[i].good) {
            int r = run(g, G[i].good);
            if (r != 1)
                fprintf(stderr, "%s: good example gives %d\n", G[i].file, r);
            assert_int_equal(r, 1);
            assert_int_not_equal(run(g, G[i].bad), 1);
        }
        hr_grammar_free(g);
        free(src);
    }
}

static void test_choices(void **state) {
    (void)state;
    const char *c[] = {"yes", "no", "maybe so"};
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_choices(&g, c, 3, NULL), 0);
    assert_int_equal(run(g, "yes"), 1);
    assert_int_equal(run(g, "maybe"), 0);
    assert_int_equal(run(g, "nope"), -1);
    hr_grammar_free(g);
    hr_error err;
    assert_int_equal(hr_grammar_from_choices(&g, c, 0, &err), HR_EINVAL);
    const char *bad[] = {"a", NULL};
    assert_int_equal(hr_grammar_from_choices(&g, bad, 2, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "entry 1"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_recursion),
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_ambiguity_and_nullable),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_llama_cpp_grammars),
        cmocka_unit_test(test_choices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
