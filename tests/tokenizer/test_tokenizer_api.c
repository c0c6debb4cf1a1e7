/* src/tokenizer: the API's contracts and every error it returns, on small
 * hand-written tokenizer.json files. */
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
#include <unistd.h>

/* A byte-level BPE over "a", "b", "ab", "abc"... with an added special token
 * and a template post-processor; %s slots let tests swap components. */
static char *make_json(const char *model_extra, const char *pre, const char *post,
                       const char *dec) {
    static const char fmt[] =
        "{\"version\":\"1.0\",\"added_tokens\":["
        "{\"id\":6,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
        "{\"id\":7,\"content\":\"<eos>\",\"special\":true,\"normalized\":false}],"
        "\"normalizer\":null,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,"
        "\"model\":{\"type\":\"BPE\",%s\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,"
        "\"\xc4\xa0\":5},\"merges\":[\"a b\",[\"ab\",\"c\"]]}}";
    size_t n = strlen(fmt) + strlen(model_extra) + strlen(pre) + strlen(post) + strlen(dec);
    char *s = malloc(n);
    snprintf(s, n, fmt, pre, post, dec, model_extra);
    return s;
}

static const char *BL = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
static const char *TP =
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<eos>\",\"type_id\":0}}],"
    "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[6],\"tokens\":[\"<s>\"]},"
    "\"<eos>\":{\"id\":\"<eos>\",\"ids\":[7],\"tokens\":[\"<eos>\"]}}}";

static int load(hr_tokenizer **t, const char *extra, const char *pre, const char *post,
                const char *dec, hr_error *err) {
    char *j = make_json(extra, pre, post, dec);
    int rc = hr_tokenizer_load_json(t, j, strlen(j), NULL, 0, err);
    free(j);
    return rc;
}

static void expect(const hr_tokenizer *t, const char *text, unsigned flags, const int32_t *want,
                   size_t n) {
    hr_tokens ids = {0};
    hr_error err;
    assert_int_equal(hr_tokenizer_encode(t, text, strlen(text), flags, &ids, &err), 0);
    assert_int_equal(ids.n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids.ids[i], want[i]);
    hr_tokens_free(&ids);
}

static void test_encode_merges_and_specials(void **state) {
    (void)state;
    hr_tokenizer *t;
    hr_error err;
    assert_int_equal(load(&t, "", BL, TP, BL, &err), 0);
    assert_int_equal(hr_tokenizer_n_vocab(t), 8);
    expect(t, "abc", 0, (int32_t[]){4}, 1);
    expect(t, "abc", HR_TOK_ADD_SPECIAL, (int32_t[]){6, 4, 7}, 3);
    expect(t, "ab<s>c", 0, (int32_t[]){3, 6, 2}, 3);
    /* split-special: "<s>" is text; '<', '>' and 's' are not in the vocab
     * and there is no unk: they vanish, as in HF */
    expect(t, "ab<s>c", HR_TOK_SPLIT_SPECIAL, (int32_t[]){3, 2}, 2);
    expect(t, "", HR_TOK_ADD_SPECIAL, (int32_t[]){6, 7}, 2);
    assert_int_equal(hr_tokenizer_find(t, "abc"), 4);
    assert_int_equal(hr_tokenizer_find(t, "<eos>"), 7);
    assert_int_equal(hr_tokenizer_find(t, "zzz"), -1);
    assert_true(hr_tokenizer_is_special(t, 6));
    assert_false(hr_tokenizer_is_special(t, 4));
    size_t len;
    assert_memory_equal(hr_tokenizer_token_to_piece(t, 3, &len), "ab", 2);
    assert_int_equal(len, 2);
    assert_null(hr_tokenizer_token_to_piece(t, 8, &len));
    assert_null(hr_tokenizer_token_to_piece(t, -1, &len));
    /* encode appends; on error the buffer is unchanged */
    hr_tokens ids = {0};
    assert_int_equal(hr_tokenizer_encode(t, "ab", 2, 0, &ids, &err), 0);
    assert_int_equal(hr_tokenizer_encode(t, "c", 1, 0, &ids, &err), 0);
    assert_int_equal(ids.n, 2);
    assert_int_equal(hr_tokenizer_encode(NULL, "c", 1, 0, &ids, &err), HR_EINVAL);
    assert_int_equal(ids.n, 2);
    hr_tokens_free(&ids);
    hr_tokens_free(&ids);
    hr_tokenizer_free(t);
    hr_tokenizer_free(NULL);
}

static void test_decode_and_stream(void **state) {
    (void)state;
    hr_tokenizer *t;
    hr_error err;
    assert_int_equal(load(&t, "", BL, TP, BL, &err), 0);
    char *s;
    size_t n;
    int32_t ids[] = {6, 3, 5, 2, 7};
    assert_int_equal(hr_tokenizer_decode(t, ids, 5, 0, &s, &n, &err), 0);
    assert_string_equal(s, "<s>ab c<eos>");
    free(s);
    assert_int_equal(hr_tokenizer_decode(t, ids, 5, HR_DETOK_SKIP_SPECIAL, &s, &n, &err), 0);
    assert_string_equal(s, "ab c");
    free(s);
    int32_t bad[] = {1, 99};
    assert_int_equal(hr_tokenizer_decode(t, bad, 2, 0, &s, &n, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "99"));
    /* stream: an out-of-range id is an error and changes nothing */
    hr_detok_stream *st;
    const char *p;
    assert_int_equal(hr_detok_stream_new(&st, t, 0, &err), 0);
    assert_int_equal(hr_detok_stream_push(st, 3, &p, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(hr_detok_stream_push(st, 1000, &p, &n, &err), HR_ERANGE);
    assert_int_equal(hr_detok_stream_push(st, 2, &p, &n, &err), 0);
    assert_memory_equal(p, "c", 1);
    assert_int_equal(hr_detok_stream_flush(st, &p, &n), 0);
    assert_int_equal(n, 0);
    hr_detok_stream_free(st);
    hr_detok_stream_free(NULL);
    hr_tokenizer_free(t);
}

/* Byte-level output is held until a UTF-8 sequence completes; clean-up
 * holds a space that may still go. Uses GPT-2-style byte chars. */
static void test_stream_holdback(void **state) {
    (void)state;
    /* vocab: the 3 bytes of U+20AC as byte-level chars, 'Ġ' (space), '.' */
    const char *j =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xc3\xa2\":0,\"\xc4\xa4\":1,\"\xc2\xac\":2,"
        "\"\xc4\xa0\":3,\".\":4,\"n\":5,\"'\":6,\"t\":7},\"merges\":[]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false}}";
    hr_tokenizer *t;
    hr_error err;
    assert_int_equal(hr_tokenizer_load_json(&t, j, strlen(j), NULL, 0, &err), 0);
    hr_detok_stream *st;
    const char *p;
    size_t n;
    assert_int_equal(hr_detok_stream_new(&st, t, 0, &err), 0);
    assert_int_equal(hr_detok_stream_push(st, 0, &p, &n, &err), 0);
    assert_int_equal(n, 0); /* E2: incomplete */
    assert_int_equal(hr_detok_stream_push(st, 1, &p, &n, &err), 0);
    assert_int_equal(n, 0); /* E2 82 */
    assert_int_equal(hr_detok_stream_push(st, 2, &p, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "\xe2\x82\xac", 3);
    /* a truncated sequence then ASCII: replaced once, then the ASCII */
    assert_int_equal(hr_detok_stream_push(st, 0, &p, &n, &err), 0);
    assert_int_equal(hr_detok_stream_push(st, 4, &p, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(p, "\xef\xbf\xbd.", 4);
    /* flush replaces an incomplete tail */
    assert_int_equal(hr_detok_stream_push(st, 0, &p, &n, &err), 0);
    assert_int_equal(hr_detok_stream_flush(st, &p, &n), 0);
    assert_int_equal(n, 3);
    hr_detok_stream_free(st);
    /* clean-up: " ." -> ".", " n't" -> "n't"; the space waits */
    assert_int_equal(hr_detok_stream_new(&st, t, HR_DETOK_CLEANUP, &err), 0);
    assert_int_equal(hr_detok_stream_push(st, 5, &p, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(hr_detok_stream_push(st, 3, &p, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(hr_detok_stream_push(st, 4, &p, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_memory_equal(p, ".", 1);
    int32_t seq[] = {3, 5, 6, 7};
    for (int i = 0; i < 4; i++)
        assert_int_equal(hr_detok_stream_push(st, seq[i], &p, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "n't", 3);
    hr_detok_stream_free(st);
    char *s;
    int32_t all[] = {5, 3, 4, 3, 5, 6, 7, 3};
    assert_int_equal(hr_tokenizer_decode(t, all, 8, HR_DETOK_CLEANUP, &s, &n, &err), 0);
    assert_string_equal(s, "n.n't ");
    free(s);
    hr_tokenizer_free(t);
}

static void test_errors(void **state) {
    (void)state;
    hr_tokenizer *t = (hr_tokenizer *)1;
    hr_error err;
    /* not JSON */
    assert_int_equal(hr_tokenizer_load_json(&t, "{", 1, NULL, 0, &err), HR_EFORMAT);
    assert_null(t);
    assert_non_null(strstr(err.msg, "tokenizer.json"));
    /* unsupported models and components say so */
    const char *uni = "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}";
    assert_int_equal(hr_tokenizer_load_json(&t, uni, strlen(uni), NULL, 0, &err), HR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not supported yet: Unigram"));
    /* WordPiece (test_wordpiece.c) needs its unk token in the vocab */
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
    assert_int_equal(hr_tokenizer_load_json(&t, wp, strlen(wp), NULL, 0, &err), HR_EFORMAT);
    assert_int_equal(load(&t, "", "{\"type\":\"UnicodeScripts\"}", "null", "null", &err),
                     HR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not supported yet: UnicodeScripts"));
    assert_int_equal(load(&t, "", "null", "null", "{\"type\":\"CTC\"}", &err), HR_EUNSUPPORTED);
    assert_int_equal(load(&t, "", "null", "{\"type\":\"Nope\"}", "null", &err), HR_EUNSUPPORTED);
    assert_int_equal(load(&t, "\"dropout\":0.1,", "null", "null", "null", &err), HR_EUNSUPPORTED);
    /* malformed parts */
    assert_int_equal(load(&t, "", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                               "\"behavior\":\"Isolated\"}", "null", "null", &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "bad regex"));
    assert_int_equal(load(&t, "", "{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},"
                               "\"behavior\":\"Sideways\"}", "null", "null", &err), HR_EFORMAT);
    assert_int_equal(load(&t, "\"unk_token\":\"<zz>\",", "null", "null", "null", &err), HR_EFORMAT);
    const char *badmerge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a q\"]}}";
    assert_int_equal(hr_tokenizer_load_json(&t, badmerge, strlen(badmerge), NULL, 0, &err),
                     HR_EFORMAT);
    assert_non_null(strstr(err.msg, "merge 0"));
    const char *badid = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]}}";
    assert_int_equal(hr_tokenizer_load_json(&t, badid, strlen(badid), NULL, 0, &err), HR_EFORMAT);
    /* files */
    assert_int_equal(hr_tokenizer_load(&t, "/nonexistent/dir", &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/dir"));
    assert_int_equal(hr_tokenizer_load(&t, "/tmp", &err), HR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "tokenizer.json"));
}

static void test_config(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth-tok-XXXXXX", p[128];
    assert_non_null(mkdtemp(dir));
    char *j = make_json("", BL, TP, BL);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "w");
    fputs(j, f);
    fclose(f);
    free(j);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "w");
    fputs("{\"bos_token\":{\"content\":\"<s>\"},\"add_bos_token\":true,"
          "\"model_max_length\":1000000000000000019884624838656,"
          "\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
          "{\"name\":\"default\",\"template\":\"{{ bos_token }}\"}]}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/special_tokens_map.json", dir);
    f = fopen(p, "w");
    fputs("{\"eos_token\":\"<eos>\",\"bos_token\":\"abc\"}", f);
    fclose(f);
    hr_tokenizer *t;
    hr_error err;
    assert_int_equal(hr_tokenizer_load(&t, dir, &err), 0);
    assert_int_equal(hr_tokenizer_bos(t), 6); /* the config wins over the map */
    assert_int_equal(hr_tokenizer_eos(t), 7);
    assert_int_equal(hr_tokenizer_pad(t), -1);
    assert_string_equal(hr_tokenizer_config_str(t, "bos_token"), "<s>");
    assert_null(hr_tokenizer_config_str(t, "nope"));
    assert_true(hr_tokenizer_config_bool(t, "add_bos_token", 0));
    assert_int_equal(hr_tokenizer_config_bool(t, "add_eos_token", 7), 7);
    assert_string_equal(hr_tokenizer_chat_template(t), "{{ bos_token }}");
    hr_tokenizer_free(t);
    /* bad config: a clear error naming the file */
    f = fopen(p, "w");
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "w");
    fputs("[1,", f);
    fclose(f);
    assert_int_equal(hr_tokenizer_load(&t, dir, &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_merges_and_specials),
        cmocka_unit_test(test_decode_and_stream),
        cmocka_unit_test(test_stream_holdback),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
