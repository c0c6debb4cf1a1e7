/* What the vision towers (model/vision.h: Gemma-3's SigLIP, model/
 * vision_qwen.h: Qwen2.5-VL's ViT) share: binding their tensors under a
 * checkpoint's layout, and bidirectional attention over an image's
 * patches. */
#ifndef HR_MODEL_VIT_H
#define HR_MODEL_VIT_H

#include "core/pool.h"
#include "hearth.h"
#include "model/weights.h"

/* Binds one component's tensors; the first error sticks in rc (and later
 * calls do nothing), so a constructor binds everything, then checks rc. */
typedef struct hr_vbind {
    const hr_weights *w;
    const char *prefix; /* the layout's (model/names.h), set by hr__vbind_layout */
    hr_error *err;
    int rc;
} hr_vbind;

/* The component's layout: the first of prefixes (NULL-terminated) under
 * which probe exists; none is an HR_EFORMAT naming what was looked for. */
void hr__vbind_layout(hr_vbind *b, const char *what, const char *const *prefixes,
                      const char *probe);
/* prefix + name, d0 (x d1 when d1 > 0) elements of a float dtype, copied
 * to float32 (owned by the caller; NULL after an error). */
float *hr__vbind_vec(hr_vbind *b, const char *name, int64_t d0, int64_t d1);
/* prefix + name as a (rows, cols) matrix view for hr_matmul (the tensor
 * stays in w; a conv's weight is flattened); a zero tensor after an error. */
hr_tensor hr__vbind_mat(hr_vbind *b, const char *name, int64_t rows, int64_t cols);

/* out = softmax(q k^T * scale) v per head, over n tokens: q, k, v, out are
 * (n, ld) with head h at columns [h*hd, (h+1)*hd) from q's, k's, v's own
 * starts. group (may be NULL): token i attends only to the tokens j with
 * group[j] == group[i] (Qwen2.5-VL's windows). HR_ENOMEM. */
int hr__vit_attention(hr_pool *pool, const float *q, const float *k, const float *v, int ld,
                      float *out, int ldo, int n, int n_heads, int hd, float scale,
                      const int32_t *group, hr_error *err);

#endif
