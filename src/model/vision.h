/* Gemma-3's vision path (Gemma3ForConditionalGeneration in transformers
 * 5.17): the SigLIP vision tower (patch embedding, learned positions,
 * pre-norm encoder layers with full attention, post layer norm) and the
 * multi-modal projector (average pool of the patch grid to
 * mm_tokens_per_image tokens, Gemma RMSNorm, projection to the text
 * model's width). Runs on the CPU ops, float32 activations; weights of any
 * dtype hr_matmul takes. */
#ifndef HR_MODEL_VISION_H
#define HR_MODEL_VISION_H

#include "core/pool.h"
#include "hearth.h"
#include "model/weights.h"

#include <jansson.h>

typedef struct hr_vision_cfg {
    int image_size, patch_size, channels;
    int d, n_layers, n_heads, d_ff;  /* the tower's width, depth, heads, MLP width */
    float ln_eps;                    /* layer_norm_eps: the tower's norms and the projector's */
    int mm_tokens;                   /* mm_tokens_per_image */
    int d_text;                      /* text_config.hidden_size */
} hr_vision_cfg;

typedef struct hr_vision hr_vision;

/* The vision config of a Gemma3ForConditionalGeneration config.json
 * (vision_config, mm_tokens_per_image, text_config.hidden_size), SigLIP's
 * defaults for fields it omits. HR_ENOTFOUND when cfg has no
 * vision_config; HR_EUNSUPPORTED for a tower this code does not compute
 * (vision_use_head, an activation other than gelu_pytorch_tanh, a patch
 * grid the pool does not divide). */
int hr_vision_cfg_from_json(hr_vision_cfg *c, const json_t *cfg, hr_error *err);

/* Binds the tower and projector in w, under whichever layout w uses
 * (model/names.h: the Hub's, transformers 4.5x's and 5.17's saves). Norm
 * weights, biases, the position table and the projection are copied to
 * float32 (owned); the matrices stay in w, which must outlive v. */
int hr_vision_new(hr_vision **out, const hr_vision_cfg *c, const hr_weights *w, hr_error *err);
void hr_vision_free(hr_vision *v);
const hr_vision_cfg *hr_vision_config(const hr_vision *v);

/* One image: pixels (channels, image_size, image_size), as the image
 * processor gives them (media/imgproc.h). features: (mm_tokens, d_text),
 * the rows that replace the image tokens' embeddings. hidden (may be
 * NULL): the tower's last_hidden_state, (n_patches, d). HR_ENOMEM. */
int hr_vision_encode(hr_vision *v, hr_pool *pool, const float *pixels, float *features,
                     float *hidden, hr_error *err);

#endif
