/* src/grammar/budget.c: what one grammar may cost (issue 40). Compiling
 * past its CPU budget fails with HR_ERANGE; warming stops at its budget and
 * the masks stay right (the rest computed when used); the mask caches stay
 * under their byte bound whatever the grammars (16 regexes X{N} raised RSS
 * to 2.7 GB before), and masks computed past the bound are the same. */
#include "core/error.h"
#include "core/timer.h"
#include "grammar/grammar.h"
#include "grammar/internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama3_vocab.h"

static int setup(void **state) {
    (void)state;
    assert_int_equal(llama3_load(0), 0);
    return 0;
}

static void test_compile_budget(void **state) {
    (void)state;
    /* 2^17 DFA states: 0.7 s of CPU here, 9.9 s with its masks before */
    const char *re = "(a|b)*a(a|b){16}";
    hr_grammar_budget b = {.compile_seconds = 0.01};
    hr_grammar_budget_set(&b);
    hr_grammar *g = NULL;
    hr_error err = {0};
    double t0 = hr_thread_cpu();
    assert_int_equal(hr_grammar_from_regex(&g, re, &err), HR_ERANGE);
    assert_null(g);
    assert_non_null(strstr(err.msg, "too costly"));
    assert_true(hr_thread_cpu() - t0 < 0.5);
    json_t *s = json_pack("{s:s, s:s}", "type", "string", "pattern", "^(a|b)*a(a|b){16}$");
    assert_int_equal(hr_grammar_from_json_schema(&g, s, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "too costly"));
    json_decref(s);
    /* the same budget leaves ordinary grammars alone */
    assert_int_equal(hr_grammar_from_regex(&g, "(a|b)*a(a|b){4}", &err), 0);
    hr_grammar_free(g);
    hr_grammar_budget_set(NULL);
}

/* A cancel check that says "gone" from its nth call on. */
static int calls, gone_at;
static int gone_after(void *arg) {
    (void)arg;
    return ++calls >= gone_at;
}

/* A client that leaves stops its compile at the next budget check: the
 * compile fails with HR_ECANCELLED long before its CPU budget, frees what
 * it built (ASan's leak check in CI), and the thread's next compile with no
 * cancel check set is unaffected. */
static void test_compile_cancel(void **state) {
    (void)state;
    const char *re = "(a|b)*a(a|b){16}"; /* 0.7 s of CPU to compile here */
    hr_grammar *g = NULL;
    hr_error err = {0};
    calls = 0;
    gone_at = 3;
    hr_grammar_cancel_set(gone_after, NULL);
    double t0 = hr_thread_cpu();
    assert_int_equal(hr_grammar_from_regex(&g, re, &err), HR_ECANCELLED);
    double dt = hr_thread_cpu() - t0;
    assert_null(g);
    assert_non_null(strstr(err.msg, "cancelled"));
    assert_int_equal(calls, 3); /* polled as it goes, and it stopped at once */
    assert_true(dt < 0.3);
    /* a schema's pattern too */
    calls = 0;
    json_t *s = json_pack("{s:s, s:s}", "type", "string", "pattern", "^(a|b)*a(a|b){16}$");
    assert_int_equal(hr_grammar_from_json_schema(&g, s, &err), HR_ECANCELLED);
    json_decref(s);
    /* a check that never fires leaves a compile alone; so does none */
    gone_at = 1 << 30;
    assert_int_equal(hr_grammar_from_regex(&g, "(a|b)*a(a|b){6}", &err), 0);
    hr_grammar_free(g);
    hr_grammar_cancel_set(NULL, NULL);
    assert_int_equal(hr_grammar_from_regex(&g, "(a|b)*a(a|b){6}", &err), 0);
    hr_grammar_free(g);
    /* warming stops too (the states left are computed when used) */
    if (tok) {
        assert_int_equal(hr_grammar_from_regex(&g, "a{100000}", NULL), 0);
        calls = 0;
        gone_at = 1;
        hr_grammar_cancel_set(gone_after, NULL);
        t0 = hr_thread_cpu();
        assert_int_equal(hr_grammar_warm(g, voc, NULL), 0);
        assert_true(hr_thread_cpu() - t0 < 0.3);
        assert_true(calls >= 1);
        hr_grammar_cancel_set(NULL, NULL);
        hr_grammar_free(g);
    }
}

/* The mask of g after bytes s, into m (words). */
static void mask_after(const hr_grammar *g, const char *s, uint32_t *m) {
    hr_matcher *mt;
    assert_int_equal(hr_matcher_new(&mt, g, voc, NULL), 0);
    assert_int_equal(hr_matcher_accept_bytes(mt, s, strlen(s), NULL), 0);
    hr_matcher_mask(mt, m);
    hr_matcher_free(mt);
}

static void test_warm_budget_and_cache_bound(void **state) {
    (void)state;
    if (!tok)
        skip();
    size_t words = ((size_t)n_model + 31) / 32;
    uint32_t *want = calloc(words, 4), *got = calloc(words, 4);
    /* warming a{100000} took 7.8 s: now it stops at its budget */
    hr_grammar_budget b = {.warm_seconds = 0.05};
    hr_grammar_budget_set(&b);
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_regex(&g, "a{100000}", NULL), 0);
    double t0 = hr_thread_cpu();
    assert_int_equal(hr_grammar_warm(g, voc, NULL), 0);
    assert_true(hr_thread_cpu() - t0 < 1.0);
    mask_after(g, "aaa", got); /* a state warming did not reach: computed now */
    int32_t a = hr_tokenizer_find(tok, "a"), bb = hr_tokenizer_find(tok, "b");
    assert_true(a >= 0 && bb >= 0);
    assert_true(got[a >> 5] & 1u << (a & 31));
    assert_false(got[bb >> 5] & 1u << (bb & 31));
    hr_grammar_free(g);

    /* 16 distinct long regexes: the caches stay under a 1 MiB bound, and
     * the masks are those computed without a bound */
    char re[32];
    snprintf(re, sizeof re, "Q{400}");
    hr_grammar_budget_set(NULL);
    assert_int_equal(hr_grammar_from_regex(&g, re, NULL), 0);
    mask_after(g, "QQQQQQQQ", want);
    hr_grammar_free(g);
    b = (hr_grammar_budget){.cache_bytes = (size_t)1 << 20, .warm_seconds = 10};
    hr_grammar_budget_set(&b);
    for (int i = 0; i < 16; i++) {
        snprintf(re, sizeof re, "%c{400}", 'A' + i);
        assert_int_equal(hr_grammar_from_regex(&g, re, NULL), 0);
        assert_int_equal(hr_grammar_warm(g, voc, NULL), 0);
        size_t gb, sb;
        hr__mask_cache_bytes(g, voc, &gb, &sb);
        assert_true(gb <= b.cache_bytes);
        assert_true(sb <= b.cache_bytes);
        hr_grammar_free(g);
    }
    assert_int_equal(hr_grammar_from_regex(&g, "Q{400}", NULL), 0);
    for (int k = 0; k < 2; k++) { /* cold, then from whatever is cached */
        memset(got, 0, words * 4);
        mask_after(g, "QQQQQQQQ", got);
        assert_memory_equal(got, want, words * 4);
    }
    hr_grammar_free(g);
    hr_grammar_budget_set(NULL);
    free(want);
    free(got);
}

int main(void) {
    (void)next;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_budget),
        cmocka_unit_test(test_compile_cancel),
        cmocka_unit_test(test_warm_budget_and_cache_bound),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
