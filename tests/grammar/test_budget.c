/* src/grammar/distance.c: distances to the end of the text (GBNF, recursion,
 * JSON Schema), and budget masks on the real Llama-3 vocabulary: random
 * walks that pick any token of hr_matcher_mask_budget end complete within
 * the budget whenever the budget covers the shortest completion, the budget
 * mask is the brute-force set (tokens of the plain mask whose distance after
 * them fits), and a budget too small leaves the tokens that progress most. */
#include "core/error.h"
#include "grammar/grammar.h"

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

static int bit(const uint32_t *mask, int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1; }

/* Distance after the bytes s (from the start), or -2 if s does not fit. */
static int dist_after(hr_matcher *m, const char *s) {
    hr_matcher_reset(m);
    if (hr_matcher_accept_bytes(m, s, strlen(s), NULL))
        return -2;
    return hr_matcher_distance(m);
}

/* ---- distances ----------------------------------------------------- */

static hr_matcher *matcher_of(const hr_grammar *g) {
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    return m;
}

static void test_distance_gbnf(void **state) {
    (void)state;
    if (!tok)
        skip();
    static const char *G1 = "root ::= \"abc\" | \"de\" | \"f\"* \"ghij\"\n";
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_gbnf(&g, G1, strlen(G1), NULL), 0);
    hr_matcher *m = matcher_of(g);
    assert_int_equal(hr_matcher_distance(m), 2);
    assert_int_equal(dist_after(m, "a"), 2);
    assert_int_equal(dist_after(m, "ab"), 1);
    assert_int_equal(dist_after(m, "abc"), 0);
    assert_int_equal(dist_after(m, "d"), 1);
    assert_int_equal(dist_after(m, "fff"), 4);
    assert_int_equal(dist_after(m, "fffgh"), 2);
    assert_int_equal(dist_after(m, "x"), -2);
    hr_matcher_free(m);
    hr_grammar_free(g);

    /* recursion: each open parenthesis adds its closing one */
    static const char *G2 = "root ::= \"(\" root \")\" | \"x\" | \"[\" list \"]\"\n"
                            "list ::= root (\",\" root)*\n";
    assert_int_equal(hr_grammar_from_gbnf(&g, G2, strlen(G2), NULL), 0);
    m = matcher_of(g);
    assert_int_equal(hr_matcher_distance(m), 1);
    assert_int_equal(dist_after(m, "((("), 4);
    assert_int_equal(dist_after(m, "(((x"), 3);
    assert_int_equal(dist_after(m, "([(x),"), 3); /* x ] ) */
    assert_int_equal(dist_after(m, "([(x),x"), 2);
    assert_int_equal(dist_after(m, "([(x),x])"), 0);
    hr_matcher_free(m);
    hr_grammar_free(g);
}

static void test_distance_json_schema(void **state) {
    (void)state;
    if (!tok)
        skip();
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{"
                           "\"a\":{\"type\":\"string\",\"minLength\":2},"
                           "\"b\":{\"type\":\"integer\"},"
                           "\"c\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2}},"
                           "\"required\":[\"a\",\"b\",\"c\"]}", 0, NULL);
    assert_non_null(s);
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_json_schema(&g, s, NULL), 0);
    hr_matcher *m = matcher_of(g);
    const char *shortest = "{\"a\":\"xx\",\"b\":0,\"c\":[true,true]}";
    assert_int_equal(hr_matcher_distance(m), (int)strlen(shortest));
    assert_int_equal(dist_after(m, "{\"a\": \"hello"), (int)strlen("\",\"b\":0,\"c\":[true,true]}"));
    assert_int_equal(dist_after(m, "{\"a\": \"h"), (int)strlen("x\",\"b\":0,\"c\":[true,true]}"));
    assert_int_equal(dist_after(m, "{\"a\": \"hi\", \"b\": -12"), (int)strlen(",\"c\":[true,true]}"));
    assert_int_equal(dist_after(m, "{\"a\": \"hi\", \"b\": -12, \"c\": [fa"), (int)strlen("lse,true]}"));
    assert_int_equal(dist_after(m, "{\"a\": \"hi\", \"b\": -12, \"c\": [false, true]}"), 0);
    hr_matcher_free(m);
    hr_grammar_free(g);
    json_decref(s);
}

/* ---- budget masks ---------------------------------------------------------------- */

static int count(const uint32_t *mask) {
    int c = 0;
    for (int i = 0; i < (n_model + 31) / 32; i++)
        c += __builtin_popcount(mask[i]);
    return c;
}

static int32_t pick(const uint32_t *mask) {
    int k = (int)(next() % (uint32_t)count(mask));
    for (int32_t t = 0; t < n_model; t++)
        if (bit(mask, t) && k-- == 0)
            return t;
    return -1;
}

/* The budget mask against brute force: tokens of the plain mask whose
 * distance after them is at most max(budget - 1, least such distance). */
static void check_budget(hr_matcher *m, const uint32_t *plain, const uint32_t *got, int budget) {
    int *d = malloc((size_t)n_model * sizeof *d);
    int least = -1;
    for (int32_t t = 0; t < n_model; t++) {
        d[t] = -1;
        if (!bit(plain, t) || t == eos_id)
            continue;
        assert_int_equal(hr_matcher_accept(m, t, NULL), 0);
        d[t] = hr_matcher_distance(m);
        assert_int_equal(hr_matcher_rollback(m, 1), 0);
        if (d[t] >= 0 && (least < 0 || d[t] < least))
            least = d[t];
    }
    int lim = budget - 1 > least ? budget - 1 : least;
    for (int32_t t = 0; t < n_model; t++) {
        int want = t == eos_id ? bit(plain, t) : d[t] >= 0 && d[t] <= lim;
        assert_int_equal(bit(got, t), want);
    }
    free(d);
}

/* Random walks under budgets: any token of the budget mask; complete (EOS
 * allowed) within the budget when it covers the shortest completion. */
static void walks(const hr_grammar *g, int n_walks, int checks) {
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    uint32_t *plain = calloc((size_t)(n_model + 31) / 32, sizeof *plain);
    uint32_t *mask = calloc((size_t)(n_model + 31) / 32, sizeof *mask);
    int d0 = hr_matcher_distance(m);
    assert_true(d0 > 0);
    for (int w = 0; w < n_walks; w++) {
        int budget = d0 + (int)(next() % 6);
        hr_matcher_reset(m);
        char out[2048];
        size_t len = 0;
        for (int used = 0; used < budget; used++) {
            int left = budget - used;
            assert_true(hr_matcher_distance(m) <= left);
            hr_matcher_mask_budget(m, mask, left);
            if (checks-- > 0) {
                hr_matcher_mask(m, plain);
                check_budget(m, plain, mask, left);
            }
            int32_t t = pick(mask);
            assert_true(t >= 0);
            if (t == eos_id)
                break;
            assert_int_equal(hr_matcher_accept(m, t, NULL), 0);
            size_t n = 0;
            char buf[256];
            hr_tokenizer_token_bytes(tok, t, buf, sizeof buf, &n);
            if (len + n < sizeof out) {
                memcpy(out + len, buf, n);
                len += n;
            }
        }
        out[len] = 0;
        if (w < 3)
            fprintf(stderr, "budget %d (shortest %d bytes): %s\n", budget, d0, out);
        assert_true(hr_matcher_can_end(m));
    }
    free(plain);
    free(mask);
    hr_matcher_free(m);
}

static void test_budget_walks(void **state) {
    (void)state;
    if (!tok)
        skip();
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{"
                           "\"name\":{\"type\":\"string\"},"
                           "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
                           "\"age\":{\"type\":\"integer\",\"minimum\":0},"
                           "\"child\":{\"$ref\":\"#\"}},"
                           "\"required\":[\"name\",\"age\"]}", 0, NULL);
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_json_schema(&g, s, NULL), 0);
    walks(g, 40, 3);
    hr_grammar_free(g);
    json_decref(s);
    static const char *G = "root ::= \"(\" root \")\" | \"x\" | \"[\" root (\",\" root)* \"]\"\n";
    assert_int_equal(hr_grammar_from_gbnf(&g, G, strlen(G), NULL), 0);
    walks(g, 40, 3);
    hr_grammar_free(g);
}

/* Without the budget the same random walks run out of tokens: the test
 * above would fail without budget masks. */
static void test_plain_walks_overrun(void **state) {
    (void)state;
    if (!tok)
        skip();
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{"
                           "\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}", 0, NULL);
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_json_schema(&g, s, NULL), 0);
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    uint32_t *mask = calloc((size_t)(n_model + 31) / 32, sizeof *mask);
    int budget = hr_matcher_distance(m) + 2, incomplete = 0;
    for (int w = 0; w < 10; w++) {
        hr_matcher_reset(m);
        for (int used = 0; used < budget; used++) {
            hr_matcher_mask(m, mask);
            int32_t t = pick(mask);
            if (t == eos_id)
                break;
            assert_int_equal(hr_matcher_accept(m, t, NULL), 0);
        }
        incomplete += !hr_matcher_can_end(m);
    }
    assert_true(incomplete > 5);
    free(mask);
    hr_matcher_free(m);
    hr_grammar_free(g);
    json_decref(s);
}

/* A budget below the shortest completion: the tokens that progress most. */
static void test_budget_too_small(void **state) {
    (void)state;
    if (!tok)
        skip();
    static const char *G = "root ::= \"hello world\" | \"abcdefghijklmnopqrstuvwxyz\"\n";
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_gbnf(&g, G, strlen(G), NULL), 0);
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    uint32_t *plain = calloc((size_t)(n_model + 31) / 32, sizeof *plain);
    uint32_t *mask = calloc((size_t)(n_model + 31) / 32, sizeof *mask);
    assert_int_equal(hr_matcher_distance(m), 11);
    hr_matcher_mask(m, plain);
    hr_matcher_mask_budget(m, mask, 1);
    check_budget(m, plain, mask, 1);
    /* Llama-3 has the whole alphabet as one token: the only one that fits */
    int32_t abc = hr_tokenizer_find(tok, "abcdefghijklmnopqrstuvwxyz");
    assert_true(abc >= 0 && bit(mask, abc));
    assert_int_equal(count(mask), 1);
    /* (the distances the walk compares: "hello" leaves 6 bytes) */
    int32_t hello = hr_tokenizer_find(tok, "hello");
    assert_int_equal(hr_matcher_accept(m, hello, NULL), 0);
    assert_int_equal(hr_matcher_distance(m), 6);
    assert_int_equal(hr_matcher_rollback(m, 1), 0);
    /* complete: EOS, and nothing else fits a budget of one */
    assert_int_equal(hr_matcher_accept_bytes(m, "hello world", 11, NULL), 0);
    assert_int_equal(hr_matcher_distance(m), 0);
    hr_matcher_mask_budget(m, mask, 1);
    assert_int_equal(count(mask), 1);
    assert_true(bit(mask, eos_id));
    free(plain);
    free(mask);
    hr_matcher_free(m);
    hr_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distance_gbnf),
        cmocka_unit_test(test_distance_json_schema),
        cmocka_unit_test(test_budget_walks),
        cmocka_unit_test(test_plain_walks_overrun),
        cmocka_unit_test(test_budget_too_small),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
