/* libFuzzer: tokenizer.json parsing, then encode/decode/stream of the input
 * itself with the tokenizer it describes. */
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_tokenizer *t = NULL;
    hr_error err;
    if (hr_tokenizer_load_json(&t, (const char *)data, size, NULL, 0, &err))
        return 0;
    hr_tokens ids = {0};
    for (unsigned flags = 0; flags < 4; flags++) {
        ids.n = 0;
        if (hr_tokenizer_encode(t, (const char *)data, size, flags, &ids, &err))
            continue;
        char *s = NULL;
        size_t n = 0;
        if (hr_tokenizer_decode(t, ids.ids, ids.n, flags & 1 ? HR_DETOK_SKIP_SPECIAL : 0, &s, &n,
                                &err) == 0) {
            hr_detok_stream *st;
            if (!hr_detok_stream_new(&st, t, flags & 1 ? HR_DETOK_SKIP_SPECIAL : 0, &err)) {
                size_t m = 0;
                const char *p;
                size_t k;
                for (size_t i = 0; i < ids.n; i++) {
                    if (hr_detok_stream_push(st, ids.ids[i], &p, &k, &err))
                        abort();
                    if (m + k > n || memcmp(s + m, p, k))
                        abort(); /* stream != decode */
                    m += k;
                }
                hr_detok_stream_flush(st, &p, &k);
                if (m + k != n || memcmp(s + m, p, k))
                    abort();
                hr_detok_stream_free(st);
            }
            free(s);
        }
    }
    hr_tokens_free(&ids);
    hr_tokenizer_free(t);
    return 0;
}
