/* Fusing a LoRA adapter into its base (mlx_lm.fuse): every adapted
 * projection W becomes W + scale * B A (DoRA: dora * (W + scale * B A),
 * row by row), as f32 tensors under the base's Hugging Face names, which a
 * conversion (convert.h) writes in place of the originals. */
#ifndef HR_MODEL_FUSE_H
#define HR_MODEL_FUSE_H

#include "hearth.h"
#include "model/adapter.h"
#include "model/model.h"

typedef struct hr_fused {
    hr_tensor *t;   /* [n] F32, names "model.layers.N.<module>.weight" */
    size_t n;
    char *names;    /* (owned) */
    float *mem;     /* (owned) */
} hr_fused;

/* m must be a model directory's (not a GGUF: its q/k rows are permuted). */
int hr_fuse(hr_fused *out, const hr_model *m, const hr_adapter *a, hr_error *err);
void hr_fused_free(hr_fused *f);

#endif
