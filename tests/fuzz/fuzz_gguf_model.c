/* libFuzzer: GGUF files as models: whatever the reader accepts goes through
 * does with an accepted file: metadata -> config, tensors -> HF-named
 * views (types, dims), and one dequantized row of every matrix. */
#include "io/gguf.h"
#include "kernels/cpu/quant.h"
#include "model/gguf_model.h"
#include "model/weights.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_gguf *g = NULL;
    hr_error err;
    if (hr_gguf_open_mem(&g, data, size, "fuzz", &err))
        return 0;
    json_t *cfg = NULL;
    bool permuted;
    if (!hr_gguf_config(g, &cfg, &permuted, &err))
        json_decref(cfg);
    hr_weights *w = NULL;
    if (hr_weights_open_gguf(&w, g, &err)) /* takes g */
        return 0;
    for (size_t i = 0; i < hr_weights_count(w); i++) {
        const hr_tensor *t = hr_weights_at(w, i);
        int bc = hr_tensor_block_cols(t);
        if (t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[1] > 65536 ||
            (bc > 1 && t->shape[1] % bc))
            continue;
        float *row = malloc((size_t)t->shape[1] * sizeof *row);
        if (row)
            hr_dequant_range(t, t->shape[0] - 1, 0, t->shape[1], row);
        free(row);
    }
    hr_weights_close(w);
    return 0;
}
