/* GGUF vocabularies against llama.cpp's golden vectors (models/ggml-vocab-*
 * .gguf.inp/.out from node-llama-cpp's bundle, extracted by
 * tools/tokref/setup.sh): tokenize with add_special=false,
 * parse_special=false, as tests/test-tokenizer-0.cpp does. */
#include "core/file.h"
#include "tokenizer/tokenizer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SEP[] = "\n__ggml_vocab_test__\n";

static void run_vocab(const char *name) {
    const char *root = getenv("HEARTH_ROOT") ? getenv("HEARTH_ROOT") : ".";
    char path[1024], p2[1100];
    snprintf(path, sizeof path, "%s/.deps/tokenizers/gguf/ggml-vocab-%s.gguf", root, name);
    hr_tokenizer *tok = NULL;
    hr_error err = {0};
    if (hr_tokenizer_load(&tok, path, &err))
        fail_msg("%s: %s (make installs the npm packages and runs tools/tokref/setup.sh)",
                 name, err.msg);
    char *inp, *out;
    size_t il, ol;
    snprintf(p2, sizeof p2, "%s.inp", path);
    assert_int_equal(hr_file_read(p2, &inp, &il, &err), 0);
    snprintf(p2, sizeof p2, "%s.out", path);
    assert_int_equal(hr_file_read(p2, &out, &ol, &err), 0);
    int total = 0, match = 0, dec_ok = 0;
    char *ip = inp, *op = out;
    hr_tokens ids = {0};
    for (;;) {
        char *end = strstr(ip, SEP);
        size_t len = end ? (size_t)(end - ip) : strlen(ip);
        char *nl = strchr(op, '\n');
        if (!nl && !*op)
            break;
        if (nl)
            *nl = 0;
        ids.n = 0;
        assert_int_equal(hr_tokenizer_encode(tok, ip, len, HR_TOK_SPLIT_SPECIAL, &ids, &err), 0);
        /* expected: space-separated IDs */
        int ok = 1;
        size_t k = 0;
        char *q = op;
        while (*q) {
            while (*q == ' ')
                q++;
            if (!*q)
                break;
            long v = strtol(q, &q, 10);
            ok &= k < ids.n && ids.ids[k] == v;
            k++;
        }
        ok &= k == ids.n;
        total++;
        match += ok;
        if (!ok && total - match <= 3)
            print_message("%s: MISMATCH #%d '%.*s' (got %zu ids, want '%s')\n", name, total,
                          (int)(len > 60 ? 60 : len), ip, ids.n, op);
        /* decode + stream agree */
        char *d;
        size_t dl;
        assert_int_equal(hr_tokenizer_decode(tok, ids.ids, ids.n, 0, &d, &dl, &err), 0);
        hr_detok_stream *s;
        assert_int_equal(hr_detok_stream_new(&s, tok, 0, &err), 0);
        size_t sl = 0;
        int same = 1;
        for (size_t i = 0; i <= ids.n; i++) {
            const char *p;
            size_t n;
            if (i < ids.n)
                assert_int_equal(hr_detok_stream_push(s, ids.ids[i], &p, &n, &err), 0);
            else
                assert_int_equal(hr_detok_stream_flush(s, &p, &n), 0);
            same &= sl + n <= dl && !memcmp(d + sl, p, n);
            sl += n;
        }
        dec_ok += same && sl == dl;
        hr_detok_stream_free(s);
        free(d);
        if (!end || !nl)
            break;
        ip = end + sizeof SEP - 1;
        op = nl + 1;
    }
    print_message("gguf %-10s %d/%d ids match, stream==decode %d/%d\n", name, match, total,
                  dec_ok, total);
    assert_true(total >= 20);
    assert_int_equal(match, total);
    assert_int_equal(dec_ok, total);
    hr_tokens_free(&ids);
    free(inp);
    free(out);
    hr_tokenizer_free(tok);
}

static void test_qwen2(void **s) { (void)s; run_vocab("qwen2"); }
static void test_llama_bpe(void **s) { (void)s; run_vocab("llama-bpe"); }
static void test_llama_spm(void **s) { (void)s; run_vocab("llama-spm"); }
static void test_gemma4(void **s) { (void)s; run_vocab("gemma-4"); }
static void test_phi3(void **s) { (void)s; run_vocab("phi-3"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2),     cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_llama_spm), cmocka_unit_test(test_gemma4),
        cmocka_unit_test(test_phi3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
