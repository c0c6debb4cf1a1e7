/* libFuzzer: the input is a JSON Schema. Compile it; walk tokens from the
 * mask (every token the mask allows must be accepted, any other refused).
 * Errors are fine; crashes, leaks and sanitizer reports are bugs. */
#include "grammar_fuzz.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_vocab_init();
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!j)
        return 0;
    hr_grammar *g = NULL;
    if (!hr_grammar_from_json_schema(&g, j, NULL)) {
        fuzz_walk(g, (uint32_t)size * 2654435761u, 32);
        hr_grammar_free(g);
    }
    if (json_is_object(j) && json_is_string(json_object_get(j, "pattern"))) {
        if (!hr_grammar_from_regex(&g, json_string_value(json_object_get(j, "pattern")), NULL)) {
            fuzz_walk(g, 7, 16);
            hr_grammar_free(g);
        }
    }
    json_decref(j);
    return 0;
}
