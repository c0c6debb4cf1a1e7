/* libFuzzer: the input is a GBNF grammar, then a NUL, then text. Compile
 * it; feed the text byte by byte; walk tokens from the mask (every token
 * the mask allows must be accepted, any other refused). Errors are fine;
 * crashes, leaks and sanitizer reports are bugs. */
#include "grammar_fuzz.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_vocab_init();
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    hr_grammar *g = NULL;
    if (hr_grammar_from_gbnf(&g, (const char *)data, glen, NULL))
        return 0;
    hr_matcher *m = NULL;
    if (!hr_matcher_new(&m, g, fuzz_vocab, NULL)) {
        for (size_t i = glen + 1; i < size && i < glen + 257; i++)
            if (hr_matcher_accept_bytes(m, (const char *)data + i, 1, NULL))
                break;
        hr_matcher_can_end(m);
        hr_matcher_done(m);
        hr_matcher_free(m);
    }
    fuzz_walk(g, (uint32_t)size * 2654435761u, 24);
    hr_grammar_free(g);
    return 0;
}
