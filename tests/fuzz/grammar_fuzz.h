/* Shared by the grammar fuzz targets: a small byte-level vocabulary (every
 * byte plus a few JSON-ish multi-byte tokens) and a short random walk that
 * takes tokens from the mask, checks them with accept, and rolls back. */
#ifndef HR_FUZZ_GRAMMAR_H
#define HR_FUZZ_GRAMMAR_H

#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_grammar_vocab *fuzz_vocab;
static int32_t fuzz_eos;

static size_t put_cp(char *o, unsigned c) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    o[0] = (char)(0xC0 | c >> 6);
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

static void fuzz_vocab_init(void) {
    if (fuzz_vocab)
        return;
    static const char *const extra[] = {"{\\\"", "\\\":", "true", "null", ", ", "\\\"}", "ab", "12"};
    char *j = malloc(1 << 16);
    size_t o = 0;
    o += (size_t)sprintf(j + o, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":%d,\"content\":\"<eos>\","
                         "\"special\":true,\"normalized\":false}],\"normalizer\":null,"
                         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                         "\"use_regex\":false},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                         "\"model\":{\"type\":\"BPE\",\"vocab\":{", 264);
    int n = 0;
    for (unsigned b = 0; b < 256; b++) {
        /* GPT-2's byte -> code point map */
        unsigned c = b;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
            unsigned k = 0;
            for (unsigned x = 0; x < b; x++)
                if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE)))
                    k++;
            c = 256 + k;
        }
        j[o++] = n ? ',' : ' ';
        j[o++] = '"';
        if (c == '"' || c == '\\')
            j[o++] = '\\';
        o += put_cp(j + o, c);
        o += (size_t)sprintf(j + o, "\":%d", n++);
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        o += (size_t)sprintf(j + o, ",\"%s\":%d", extra[i], n++);
    o += (size_t)sprintf(j + o, "},\"merges\":[]}}");
    hr_tokenizer *t = NULL;
    if (hr_tokenizer_load_json(&t, j, o, NULL, 0, NULL)) {
        fprintf(stderr, "fuzz: tokenizer did not load\n");
        abort();
    }
    fuzz_eos = 264;
    if (hr_grammar_vocab_new(&fuzz_vocab, t, 270, &fuzz_eos, 1, NULL))
        abort();
    hr_tokenizer_free(t);
    free(j);
}

/* Walk up to steps tokens chosen by seed from the mask. */
static void fuzz_walk(const hr_grammar *g, uint32_t seed, int steps) {
    hr_matcher *m = NULL;
    if (hr_matcher_new(&m, g, fuzz_vocab, NULL))
        return;
    uint32_t mask[(270 + 31) / 32];
    for (int s = 0; s < steps; s++) {
        hr_matcher_mask(m, mask);
        int n = 0;
        for (int i = 0; i < 270; i++)
            n += (mask[i >> 5] >> (i & 31)) & 1;
        /* a token outside the mask must be refused */
        int32_t out = (int32_t)(seed % 270);
        if (!((mask[out >> 5] >> (out & 31)) & 1) && !hr_matcher_accept(m, out, NULL))
            abort();
        if (!n)
            break;
        int k = (int)(seed % (uint32_t)n);
        seed = seed * 1103515245u + 12345u;
        int32_t pick = -1;
        for (int i = 0; i < 270 && pick < 0; i++)
            if ((mask[i >> 5] >> (i & 31)) & 1 && k-- == 0)
                pick = i;
        if (hr_matcher_accept(m, pick, NULL))
            abort(); /* the mask said yes */
        if (pick == fuzz_eos)
            break;
        if (s % 7 == 6)
            hr_matcher_rollback(m, 2);
    }
    hr_matcher_free(m);
}

#endif
