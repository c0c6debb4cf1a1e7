#include "model/fuse.h"
#include "core/error.h"
#include "kernels/cpu/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 96

static const char *const PATHS[HR_LORA_SLOTS] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

int hr_fuse(hr_fused *out, const hr_model *m, const hr_adapter *a, hr_error *err) {
    memset(out, 0, sizeof *out);
    if (m->qk_permuted)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: fusing into a GGUF base "
                      "(fuse the model directory it came from)");
    size_t floats = 0;
    int L = m->hp.n_layers;
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++)
            if (hr_adapter_mat(a, il, s)) {
                const hr_tensor *w = hr_adapter_base(m, il, s);
                floats += (size_t)w->shape[0] * (size_t)w->shape[1];
                out->n++;
            }
    out->t = calloc(out->n ? out->n : 1, sizeof *out->t);
    out->names = malloc((out->n ? out->n : 1) * NAME_MAX_LEN);
    out->mem = malloc((floats ? floats : 1) * sizeof(float));
    if (!out->t || !out->names || !out->mem) {
        hr_fused_free(out);
        return hr_err(err, HR_ENOMEM, "out of memory (%zu MiB for the fused matrices)",
                      floats >> 18);
    }
    float *p = out->mem;
    size_t k = 0;
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++) {
            const hr_lora_mat *mm = hr_adapter_mat(a, il, s);
            if (!mm)
                continue;
            const hr_tensor *w = hr_adapter_base(m, il, s);
            int64_t rows = w->shape[0], cols = w->shape[1];
            for (int64_t j = 0; j < rows; j++) {
                float *y = p + (size_t)j * cols;
                hr_dequant_range(w, j, 0, cols, y);
                for (int r = 0; r < mm->r; r++) {
                    float b = mm->scale * mm->bt[(size_t)r * rows + j];
                    const float *ar = mm->a + (size_t)r * cols;
                    for (int64_t i = 0; i < cols; i++)
                        y[i] += b * ar[i];
                }
                if (mm->dora)
                    for (int64_t i = 0; i < cols; i++)
                        y[i] *= mm->dora[j];
            }
            char *name = out->names + k * NAME_MAX_LEN;
            snprintf(name, NAME_MAX_LEN, "model.layers.%d.%s.weight", il, PATHS[s]);
            out->t[k++] = (hr_tensor){.name = name, .dtype = HR_DTYPE_F32, .ndim = 2,
                                      .shape = {rows, cols}, .data = p,
                                      .nbytes = (size_t)rows * cols * sizeof(float)};
            p += (size_t)rows * cols;
        }
    return 0;
}

void hr_fused_free(hr_fused *f) {
    free(f->t);
    free(f->names);
    free(f->mem);
    memset(f, 0, sizeof *f);
}
