/* Added-token IDs as HF assigns them, whatever tokenizer.json declares: a
 * gap between the vocabulary and the declared IDs, a vocabulary with a gap,
 * declared IDs out of order, a content listed twice, a content the
 * vocabulary has. Every expected ID list and decode is what HF tokenizers
 * gave for the same tokenizer.json and text (the `tokenizers` npm package,
 * 0.13 bindings, and @anush008/tokenizers, Rust tokenizers 0.22, agree):
 * the Rust library renumbers (Tokenizer deserialization adds each token
 * through AddedVocabulary::add_tokens and only warns about the declared id). */
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A WordPiece tokenizer over "[UNK]" 0, "w1".."w370" 1..370 (plus extra
 * vocabulary entries), WhitespaceSplit, the given normalizer and added
 * tokens (a JSON list body). */
static hr_tokenizer *load(const char *extra_vocab, const char *norm, const char *added) {
    size_t cap = 16384;
    char *j = malloc(cap);
    int n = snprintf(j, cap, "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":%s,"
                     "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},\"post_processor\":null,"
                     "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":false},"
                     "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
                     "\"vocab\":{\"[UNK]\":0%s", added, norm, extra_vocab);
    for (int i = 1; i <= 370; i++)
        n += snprintf(j + n, cap - (size_t)n, ",\"w%d\":%d", i, i);
    snprintf(j + n, cap - (size_t)n, "}}}");
    hr_tokenizer *t = NULL;
    hr_error err = {0};
    if (hr_tokenizer_load_json(&t, j, strlen(j), NULL, 0, &err))
        fail_msg("load: %s", err.msg);
    free(j);
    return t;
}

#define TOK(id, s, special, extra) \
    "{\"id\":" #id ",\"content\":\"" s "\",\"special\":" #special extra "}"

static const char *TEXT = "w1 <a> <b> <c> <x> <y> <z> w3 w370";

/* encode(text) == want; decode(want) == dec; decode(want, skip) == dec1 */
static void expect(const hr_tokenizer *t, const char *text, const int32_t *want, size_t n,
                   const char *dec, const char *dec1) {
    hr_tokens ids = {0};
    hr_error err;
    assert_int_equal(hr_tokenizer_encode(t, text, strlen(text), HR_TOK_ADD_SPECIAL, &ids, &err), 0);
    assert_int_equal(ids.n, n);
    assert_memory_equal(ids.ids, want, n * sizeof *want);
    hr_tokens_free(&ids);
    char *s;
    assert_int_equal(hr_tokenizer_decode(t, want, n, 0, &s, NULL, &err), 0);
    assert_string_equal(s, dec);
    free(s);
    assert_int_equal(hr_tokenizer_decode(t, want, n, HR_DETOK_SKIP_SPECIAL, &s, NULL, &err), 0);
    assert_string_equal(s, dec1);
    free(s);
}

/* Declared 500..502 over a 371-entry vocabulary: HF gives 371..373. */
static void test_gap_renumbered(void **state) {
    (void)state;
    hr_tokenizer *t = load("", "null", TOK(500, "<a>", true, "") "," TOK(501, "<b>", false, "")
                                           "," TOK(502, "<c>", true, ""));
    const int32_t want[] = {1, 371, 372, 373, 0, 0, 0, 3, 370};
    expect(t, TEXT, want, 9, "w1 <a> <b> <c> [UNK] [UNK] [UNK] w3 w370",
           "w1 <b> [UNK] [UNK] [UNK] w3 w370");
    assert_int_equal(hr_tokenizer_n_vocab(t), 374);
    assert_int_equal(hr_tokenizer_find(t, "<a>"), 371);
    assert_int_equal(hr_tokenizer_find(t, "<c>"), 373);
    assert_true(hr_tokenizer_is_special(t, 371));
    assert_false(hr_tokenizer_is_special(t, 372));
    assert_true(hr_tokenizer_is_special(t, 373));
    /* the declared IDs are not IDs of this tokenizer (HF decodes them to
     * nothing; hearth says so) */
    char *s;
    hr_error err;
    int32_t declared = 500;
    assert_int_equal(hr_tokenizer_decode(t, &declared, 1, 0, &s, NULL, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "500"));
    hr_tokenizer_free(t);
}

/* The vocabulary itself has a gap ("<x>" at 500 over 372 entries): "<x>"
 * keeps 500, new tokens count from the entry count (372, 373), and ID 371 is
 * a hole. */
static void test_vocab_gap(void **state) {
    (void)state;
    hr_tokenizer *t = load(",\"<x>\":500", "null", TOK(371, "<y>", true, "") ","
                           TOK(500, "<x>", true, "") "," TOK(501, "<z>", true, ""));
    const int32_t want[] = {1, 0, 0, 0, 500, 372, 373, 3, 370};
    expect(t, TEXT, want, 9, "w1 [UNK] [UNK] [UNK] <x> <y> <z> w3 w370",
           "w1 [UNK] [UNK] [UNK] w3 w370");
    assert_int_equal(hr_tokenizer_n_vocab(t), 501);
    char *s;
    hr_error err;
    int32_t hole = 371;
    assert_int_equal(hr_tokenizer_decode(t, &hole, 1, 0, &s, NULL, &err), HR_ERANGE);
    assert_null(hr_tokenizer_token_to_piece(t, 371, NULL));
    hr_tokenizer_free(t);
}

/* Declared out of order: IDs follow the list, not the declarations. */
static void test_list_order(void **state) {
    (void)state;
    hr_tokenizer *t = load("", "null", TOK(373, "<c>", true, "") "," TOK(371, "<a>", true, "")
                                           "," TOK(372, "<b>", true, ""));
    const int32_t want[] = {1, 372, 373, 371, 0, 0, 0, 3, 370};
    expect(t, TEXT, want, 9, "w1 <a> <b> <c> [UNK] [UNK] [UNK] w3 w370",
           "w1 [UNK] [UNK] [UNK] w3 w370");
    hr_tokenizer_free(t);
}

/* A content listed twice: the second entry takes no ID, but makes the token
 * special if it says so; the token matches as its first entry says. A content the vocabulary has keeps its vocabulary ID. */
static void test_duplicates(void **state) {
    (void)state;
    const char *lower = "{\"type\":\"Lowercase\"}", *text = "w1 <a>w2   <a> <A> <a> w3";
    const int32_t both[] = {1, 371, 2, 371, 0, 371, 3};
    const char *dec = "w1 <a> w2 <a> [UNK] <a> w3", *skip = "w1 w2 [UNK] w3";
    /* special first, then not; not, then special: special either way */
    hr_tokenizer *t = load("", lower, TOK(4, "<a>", true, "") "," TOK(5, "<a>", false, ""));
    expect(t, text, both, 7, dec, skip);
    assert_int_equal(hr_tokenizer_n_vocab(t), 372);
    hr_tokenizer_free(t);
    t = load("", lower, TOK(4, "<a>", false, ",\"normalized\":false") "," TOK(5, "<a>", true, ""));
    expect(t, text, both, 7, dec, skip);
    hr_tokenizer_free(t);
    /* normalized first: "<A>" is matched after lower-casing, so "<a>" is it too */
    t = load("", lower, TOK(4, "<A>", false, ",\"normalized\":true") ","
             TOK(5, "<A>", false, ",\"normalized\":false"));
    const int32_t norm[] = {1, 371, 2, 371, 371, 371, 3};
    expect(t, text, norm, 7, "w1 <A> w2 <A> <A> <A> w3", "w1 <A> w2 <A> <A> <A> w3");
    hr_tokenizer_free(t);
    /* (not normalized first, then normalized: tokenizers 0.13 matches only
     * the raw "<A>", as hearth does, 0.22 both forms; not pinned) */
    /* in the vocabulary: "w3" declared as 9 keeps 3, and is special */
    t = load("", "null", TOK(9, "w3", true, ""));
    const int32_t voc[] = {1, 0, 0, 0, 0, 0, 0, 3, 3, 0};
    expect(t, TEXT, voc, 10, "w1 [UNK] [UNK] [UNK] [UNK] [UNK] [UNK] w3 w3 [UNK]",
           "w1 [UNK] [UNK] [UNK] [UNK] [UNK] [UNK] [UNK]");
    assert_int_equal(hr_tokenizer_n_vocab(t), 371);
    assert_true(hr_tokenizer_is_special(t, 3));
    hr_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gap_renumbered),
        cmocka_unit_test(test_vocab_gap),
        cmocka_unit_test(test_list_order),
        cmocka_unit_test(test_duplicates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
