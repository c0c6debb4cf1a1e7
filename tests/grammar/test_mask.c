/* src/grammar: token masks on the real Llama-3 vocabulary (128k tokens)
 * against brute force (try every token on the matcher and roll back), along
 * random walks that pick tokens from the mask; EOS handling; special tokens;
 * model vocabularies larger than the tokenizer's. */
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
    assert_int_equal(llama3_load(64), 0); /* padded like a model's */
    return 0;
}

/* Compare the mask with brute force at the current state. */
static void check_mask(hr_matcher *m, const uint32_t *mask) {
    for (int32_t t = 0; t < n_model; t++) {
        int want = hr_matcher_accept(m, t, NULL) == 0;
        if (want)
            assert_int_equal(hr_matcher_rollback(m, 1), 0);
        int got = (mask[t >> 5] >> (t & 31)) & 1;
        if (want != got) {
            size_t n = 0;
            const char *p = hr_tokenizer_token_to_piece(tok, t, &n);
            fprintf(stderr, "token %d '%.*s': brute force %d, mask %d\n", (int)t,
                    (int)n, p ? p : "", want, got);
        }
        assert_int_equal(want, got);
    }
}

static int count(const uint32_t *mask) {
    int c = 0;
    for (int i = 0; i < (n_model + 31) / 32; i++)
        c += __builtin_popcount(mask[i]);
    return c;
}

/* A random walk of up to steps tokens; brute-force check the first checks. */
static void walk(const hr_grammar *g, int steps, int checks, char *out, size_t cap) {
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    uint32_t *mask = calloc((size_t)(n_model + 31) / 32, sizeof *mask);
    size_t len = 0;
    for (int s = 0; s < steps; s++) {
        hr_matcher_mask(m, mask);
        if (s < checks)
            check_mask(m, mask);
        int c = count(mask);
        assert_true(c > 0);
        int k = (int)(next() % (uint32_t)c);
        int32_t pick = -1;
        for (int32_t t = 0; t < n_model && pick < 0; t++)
            if ((mask[t >> 5] >> (t & 31)) & 1 && k-- == 0)
                pick = t;
        assert_int_equal(hr_matcher_accept(m, pick, NULL), 0);
        if (pick == eos_id)
            break;
        char buf[256];
        size_t n = 0;
        hr_tokenizer_token_bytes(tok, pick, buf, sizeof buf, &n);
        if (len + n < cap) {
            memcpy(out + len, buf, n);
            len += n;
        }
    }
    out[len] = 0;
    free(mask);
    hr_matcher_free(m);
}

static void test_json_brute_force(void **state) {
    (void)state;
    if (!tok)
        skip();
    static const char *G =
        "root ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n"
        "pair ::= str \":\" ws value\n"
        "value ::= str | num | \"true\" | \"null\" | \"[\" ws (value (\",\" ws value)*)? \"]\" | root\n"
        "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt])* \"\\\"\"\n"
        "num ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\n"
        "ws ::= \" \"?\n";
    hr_grammar *g;
    hr_error err;
    assert_int_equal(hr_grammar_from_gbnf(&g, G, strlen(G), &err), 0);
    char out[4096];
    for (int i = 0; i < 4; i++) {
        walk(g, 12, 12, out, sizeof out);
        fprintf(stderr, "walk: %s\n", out);
    }
    hr_grammar_free(g);
}

/* String bodies (a fast path accepts whole trie subtrees of plain text):
 * unbounded, length-bounded, pattern-constrained, additional-property keys
 * that must differ from the declared names, against brute force. */
static void test_string_bodies_brute_force(void **state) {
    (void)state;
    if (!tok)
        skip();
    static const char *S[] = {
        "{\"type\":\"string\"}",
        "{\"type\":\"string\",\"minLength\":3,\"maxLength\":9}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z ]*[0-9]\"}}",
        ("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"integer\"},"
         "\"nap\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\",\"maxLength\":40}}"),
    };
    char out[4096];
    for (size_t i = 0; i < sizeof S / sizeof *S; i++) {
        json_t *js = json_loads(S[i], 0, NULL);
        assert_non_null(js);
        hr_grammar *g;
        hr_error err;
        assert_int_equal(hr_grammar_from_json_schema(&g, js, &err), 0);
        for (int k = 0; k < 2; k++) {
            walk(g, 7, 7, out, sizeof out);
            fprintf(stderr, "walk: %s\n", out);
        }
        hr_grammar_free(g);
        json_decref(js);
    }
}

static void test_eos_and_specials(void **state) {
    (void)state;
    if (!tok)
        skip();
    const char *c[] = {"yes", "no"};
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_choices(&g, c, 2, NULL), 0);
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, voc, NULL), 0);
    uint32_t *mask = calloc((size_t)(n_model + 31) / 32, sizeof *mask);
    hr_matcher_mask(m, mask);
    check_mask(m, mask);
    assert_false((mask[eos_id >> 5] >> (eos_id & 31)) & 1);
    int32_t bos = hr_tokenizer_find(tok, "<|begin_of_text|>");
    assert_false((mask[bos >> 5] >> (bos & 31)) & 1);
    hr_error err;
    assert_int_equal(hr_matcher_accept(m, bos, &err), HR_EINVAL);
    assert_int_equal(hr_matcher_accept(m, eos_id, &err), HR_EINVAL);
    assert_int_equal(hr_matcher_accept(m, n_model - 1, &err), HR_EINVAL);
    assert_int_equal(hr_matcher_accept(m, n_model, &err), HR_EINVAL);
    int32_t yes = hr_tokenizer_find(tok, "yes");
    assert_true(yes >= 0);
    assert_int_equal(hr_matcher_accept(m, yes, NULL), 0);
    assert_true(hr_matcher_done(m));
    hr_matcher_mask(m, mask);
    assert_int_equal(count(mask), 1);
    assert_true((mask[eos_id >> 5] >> (eos_id & 31)) & 1);
    assert_int_equal(hr_matcher_accept(m, eos_id, NULL), 0);
    hr_matcher_mask(m, mask);
    assert_int_equal(count(mask), 0);
    assert_int_equal(hr_matcher_accept(m, yes, &err), HR_EINVAL);
    assert_int_equal(hr_matcher_rollback(m, 1), 0);
    hr_matcher_mask(m, mask);
    assert_int_equal(count(mask), 1);
    free(mask);
    hr_matcher_free(m);
    hr_grammar_free(g);
}

static void test_partial_utf8_tokens(void **state) {
    (void)state;
    if (!tok)
        skip();
    /* Llama-3 has tokens that are a part of a UTF-8 sequence: they must be
       allowed where the character may start, and checked exactly. */
    static const char *G = "root ::= [à-ÿ一-龥]{1,4} \"!\"\n";
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_gbnf(&g, G, strlen(G), NULL), 0);
    char out[256];
    for (int i = 0; i < 3; i++)
        walk(g, 6, 6, out, sizeof out);
    hr_grammar_free(g);
}

static void test_vocab_errors(void **state) {
    (void)state;
    if (!tok)
        skip();
    hr_grammar_vocab *v;
    hr_error err;
    int32_t bad = n_model + 5;
    assert_int_equal(hr_grammar_vocab_new(&v, tok, n_model, &bad, 1, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "EOS"));
    assert_int_equal(hr_grammar_vocab_new(&v, tok, 0, NULL, 0, &err), HR_EINVAL);
    /* a model vocabulary smaller than the tokenizer's cuts it */
    assert_int_equal(hr_grammar_vocab_new(&v, tok, 1000, NULL, 0, &err), 0);
    assert_int_equal(hr_grammar_vocab_n(v), 1000);
    hr_grammar_vocab_free(v);
    hr_grammar_vocab_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_brute_force),
        cmocka_unit_test(test_string_bodies_brute_force),
        cmocka_unit_test(test_eos_and_specials),
        cmocka_unit_test(test_partial_utf8_tokens),
        cmocka_unit_test(test_vocab_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
