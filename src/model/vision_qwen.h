/* Qwen2.5-VL's vision path (Qwen2_5_VLForConditionalGeneration in
 * transformers 5.17): an image of any size (a multiple of patch * merge a
 * side, media/imgproc.h hr_image_smart_resize) cut into patches (each the
 * frame twice: the temporal patch), a ViT over them (patch embedding
 * without positions, 2D rotary positions, pre-norm RMSNorm blocks with a
 * SwiGLU MLP, attention within windows of window_size pixels except in
 * fullatt_block_indexes), then the merger (RMSNorm, merge x merge patches
 * concatenated, MLP with exact GELU) to the text model's width: one row per
 * merge x merge patches. CPU ops, float32 activations. */
#ifndef HR_MODEL_VISION_QWEN_H
#define HR_MODEL_VISION_QWEN_H

#include "core/pool.h"
#include "hearth.h"
#include "model/weights.h"

#include <jansson.h>
#include <stdbool.h>

#define HR_VQ_MAX_DEPTH 256

typedef struct hr_vision_qwen_cfg {
    int depth, d, n_heads, d_ff; /* blocks, width, heads, MLP width */
    int channels, patch, merge, tpatch; /* in_channels, patch_size, spatial_merge_size,
                                         * temporal_patch_size */
    int window;                  /* window_size, in pixels */
    int d_out;                   /* out_hidden_size: the text model's width */
    bool full[HR_VQ_MAX_DEPTH];  /* fullatt_block_indexes */
} hr_vision_qwen_cfg;

typedef struct hr_vision_qwen hr_vision_qwen;

/* The vision_config of a Qwen2_5_VLForConditionalGeneration config.json
 * (transformers' defaults for fields it omits). HR_ENOTFOUND without one;
 * HR_EUNSUPPORTED for what this code does not compute (an activation other
 * than silu, a window that is not a whole number of merged patches). */
int hr_vision_qwen_cfg_from_json(hr_vision_qwen_cfg *c, const json_t *cfg, hr_error *err);

/* Binds the tower and merger in w (visual.*, or model.visual.*: names.h).
 * Norms and biases are copied to float32 (owned); the matrices stay in w,
 * which must outlive v. */
int hr_vision_qwen_new(hr_vision_qwen **out, const hr_vision_qwen_cfg *c, const hr_weights *w,
                       hr_error *err);
void hr_vision_qwen_free(hr_vision_qwen *v);
const hr_vision_qwen_cfg *hr_vision_qwen_config(const hr_vision_qwen *v);

/* The processor's pixel_values of one image: pixels (channels, h, w)
 * (h, w multiples of patch * merge) to rows (n, channels * tpatch * patch
 * * patch), n = (h / patch) * (w / patch), in Qwen2VLImageProcessor's
 * order (merge x merge blocks row by row, the patches of a block row by
 * row; each row channel, frame, y, x). */
void hr_vision_qwen_patchify(const hr_vision_qwen_cfg *c, const float *pixels, int h, int w,
                             float *rows);

/* One image: rows as hr_vision_qwen_patchify gives them over a grid of gh x
 * gw patches (multiples of merge). features: (n / merge^2, d_out), the rows
 * that replace the image's tokens, in the processor's order. hidden (may
 * be NULL): the blocks' output before the merger, (n, d), in the rows'
 * order. HR_EINVAL for a grid the merge does not divide, HR_ENOMEM. */
int hr_vision_qwen_encode(hr_vision_qwen *v, hr_pool *pool, const float *rows, int gh, int gw,
                          float *features, float *hidden, hr_error *err);

/* The M-RoPE positions of a prompt of n tokens (transformers'
 * get_rope_index for images): image k's tokens are [start[k], start[k] +
 * lh[k] * lw[k]) (its merged grid, row by row), in increasing order and
 * apart. A text token takes the next position on all three axes; an image
 * token (base, base + row, base + column), base the position its first
 * token would have had, and the text after it continues from base +
 * max(lh, lw). pos3: [n][3] (temporal, height, width). Returns the
 * position the next token takes: the rope delta of later tokens is that
 * minus n. */
int hr_vision_qwen_rope_pos(int n, const int *start, const int *lh, const int *lw,
                            int n_images, int32_t *pos3);

#endif
