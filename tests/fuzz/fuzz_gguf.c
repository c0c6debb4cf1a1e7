/* libFuzzer: the GGUF reader (every accessor on whatever opens) and the
 * GGUF vocabulary loader. */
#include "io/gguf.h"
#include "tokenizer/internal.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_gguf *g;
    hr_error err;
    if (hr_gguf_open_mem(&g, data, size, "fuzz.gguf", &err))
        return 0;
    for (int64_t i = 0; i < hr_gguf_n_kv(g); i++) {
        const char *s;
        size_t l;
        int64_t v;
        double d;
        int b;
        hr_gguf_type et;
        uint64_t n;
        (void)hr_gguf_key(g, i);
        hr_gguf_get_int(g, i, &v);
        hr_gguf_get_float(g, i, &d);
        hr_gguf_get_bool(g, i, &b);
        if (!hr_gguf_get_str(g, i, &s, &l) && l)
            (void)(volatile char)s[l - 1];
        if (!hr_gguf_get_arr(g, i, &et, &n))
            for (uint64_t j = 0; j < n && j < 64; j++) {
                if (!hr_gguf_arr_str(g, i, j, &s, &l) && l)
                    (void)(volatile char)s[l - 1];
                hr_gguf_arr_int(g, i, j, &v);
                hr_gguf_arr_float(g, i, j, &d);
            }
    }
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        if (t->size)
            (void)(volatile char)((const char *)t->data)[t->size - 1];
    }
    hr_tokenizer *t = hr__tok_alloc();
    if (t && !hr__tok_from_gguf(t, g, &err)) {
        hr_tokens ids = {0};
        static const char text[] = "Hello  world\n\n<s> 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff";
        if (!hr_tokenizer_encode(t, text, sizeof text - 1, HR_TOK_ADD_SPECIAL, &ids, &err)) {
            char *s;
            size_t n;
            if (!hr_tokenizer_decode(t, ids.ids, ids.n, 0, &s, &n, &err))
                free(s);
        }
        hr_tokens_free(&ids);
    }
    hr_tokenizer_free(t);
    hr_gguf_close(g);
    return 0;
}
