/* What the encoders (model/vision.h: Gemma-3's SigLIP, model/
 * vision_qwen.h: Qwen2.5-VL's ViT, model/audio.h: Qwen2-Audio's Whisper
 * encoder) share: binding their tensors under a checkpoint's layout,
 * bidirectional attention over an input's tokens, and the pre-LN
 * transformer layer SigLIP and Whisper both use. */
#ifndef HR_MODEL_VIT_H
#define HR_MODEL_VIT_H

#include "core/pool.h"
#include "hearth.h"
#include "model/weights.h"

#include <stdbool.h>

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

/* A pre-LN encoder layer (SigLIP's, Whisper's): x += o(attn(LN1 x));
 * x += fc2(gelu(fc1(LN2 x))), LayerNorms with biases, every product with
 * a bias but k's where the checkpoint has none. */
typedef struct hr_enc_layer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* (d) */
    hr_tensor q, k, v, o, fc1, fc2;       /* (out, in) */
    float *q_b, *k_b, *v_b, *o_b, *fc1_b, *fc2_b; /* (out); k_b NULL: none */
} hr_enc_layer;

/* A layer's tensor names under the layer's prefix, without ".weight" /
 * ".bias" (SigLIP: "layer_norm1", "mlp.fc1"; Whisper:
 * "self_attn_layer_norm", "fc1") */
typedef struct hr_enc_names {
    const char *ln1, *ln2, *q, *k, *v, *o, *fc1, *fc2;
    bool k_bias;
} hr_enc_names;

/* Binds layer `layer` ("<layers>.<layer>." under b's prefix) of width d,
 * MLP width f. */
void hr__enc_layer_bind(hr_vbind *b, hr_enc_layer *L, const char *layers, int layer,
                        const hr_enc_names *names, int d, int f);
void hr__enc_layer_free(hr_enc_layer *L);

/* Scratch of an encoder's n tokens: h, q, k, v, att (n, d), ff (n, f) */
typedef struct hr_enc_scratch {
    float *h, *q, *k, *v, *att, *ff;
} hr_enc_scratch;

/* x (n, d) through layer L, n_heads heads; gelu_tanh: the MLP's GELU is
 * the tanh approximation (SigLIP's), else the exact one (Whisper's).
 * HR_ENOMEM. */
int hr__enc_layer_forward(hr_pool *pool, const hr_enc_layer *L, float *x, int n, int d, int f,
                          int n_heads, float eps, bool gelu_tanh, const hr_enc_scratch *s,
                          hr_error *err);

#endif
