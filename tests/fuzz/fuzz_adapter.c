/* libFuzzer: LoRA adapters (model/adapter.h) on the tiny llama fixture.
 * Input: one byte (bit 0: mlx-lm layout, else peft), a 2-byte little-endian
 * length n, n bytes of adapter_config.json, then the safetensors image.
 * Whatever loads must have matrices of the base's shapes (the loader's own
 * checks) and a finite fingerprint; errors are fine. */
#include "model/adapter.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

static hr_model *g_model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_model) {
        const char *root = getenv("HEARTH_ROOT");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/models/llama", root ? root : ".");
        if (hr_model_open(&g_model, dir, NULL))
            __builtin_trap(); /* run from the repository root, or set HEARTH_ROOT */
    }
    if (size < 3)
        return 0;
    size_t n = (size_t)data[1] | (size_t)data[2] << 8;
    if (3 + n > size)
        return 0;
    hr_adapter *a = NULL;
    hr_error err;
    if (hr_adapter_parse(&a, g_model, (const char *)data + 3, n, data + 3 + n, size - 3 - n,
                         data[0] & 1, &err) == 0) {
        for (int il = 0; il < g_model->hp.n_layers; il++)
            for (int s = 0; s < HR_LORA_SLOTS; s++) {
                const hr_lora_mat *m = hr_adapter_mat(a, il, s);
                if (m && (m->r < 1 || m->r > HR_LORA_MAX_RANK || !m->a || !m->bt))
                    __builtin_trap();
            }
        hr_adapter_unref(a);
    }
    return 0;
}
