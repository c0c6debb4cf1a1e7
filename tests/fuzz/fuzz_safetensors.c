/* libFuzzer: the safetensors header parser over arbitrary bytes. */
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_st_file *f = NULL;
    hr_error err;
    if (hr_st_parse(&f, data, size, "fuzz", &err) == 0) {
        for (size_t i = 0; i < hr_st_count(f); i++) {
            const hr_tensor *t = hr_st_tensor(f, i);
            volatile unsigned char sink = 0;
            if (t->nbytes) /* every view must be readable */
                sink ^= ((const unsigned char *)t->data)[t->nbytes - 1];
            (void)sink;
        }
    }
    hr_st_close(f);
    return 0;
}
