/* Qwen2-Audio's audio side (Qwen2AudioForConditionalGeneration in
 * transformers 5.17): the Whisper-style encoder (Qwen2AudioEncoder: two
 * conv1d of kernel 3 with GELU, the second of stride 2; learned positions;
 * pre-LN encoder layers with full attention over the clip's frames; an
 * average pool by 2; a final layer norm) and the projector (one linear
 * layer into the text model's width). Runs on the CPU ops, float32
 * activations; weights of any dtype hr_matmul takes. */
#ifndef HR_MODEL_AUDIO_H
#define HR_MODEL_AUDIO_H

#include "core/pool.h"
#include "hearth.h"
#include "model/weights.h"

#include <jansson.h>

typedef struct hr_audio_enc_cfg {
    int n_mels;                     /* num_mel_bins */
    int d, n_layers, n_heads, d_ff; /* d_model, encoder_layers, encoder_attention_heads, encoder_ffn_dim */
    int max_pos;                    /* max_source_positions: the mel frames / 2 */
    float ln_eps;                   /* nn.LayerNorm's 1e-5 */
    int d_text;                     /* the text model's width */
} hr_audio_enc_cfg;

typedef struct hr_audio_enc hr_audio_enc;

/* The audio_config of a Qwen2AudioForConditionalGeneration config.json,
 * Qwen2AudioEncoderConfig's defaults for fields it omits; d_text the text
 * model's width. HR_ENOTFOUND when cfg has no audio_config;
 * HR_EUNSUPPORTED for an encoder this code does not compute (an
 * activation other than gelu). */
int hr_audio_enc_cfg_from_json(hr_audio_enc_cfg *c, const json_t *cfg, int d_text, hr_error *err);

/* Binds audio_tower.* and multi_modal_projector.* (or the same under
 * model.) in w. Vectors and the position table are copied to float32
 * (owned); the matrices stay in w, which must outlive a. */
int hr_audio_enc_new(hr_audio_enc **out, const hr_audio_enc_cfg *c, const hr_weights *w,
                     hr_error *err);
void hr_audio_enc_free(hr_audio_enc *a);
const hr_audio_enc_cfg *hr_audio_enc_config(const hr_audio_enc *a);

/* The rows a clip of `frames` mel frames (its attention mask's count)
 * gives: ((frames - 1) / 2 + 1 - 2) / 2 + 1 with Python's floor division
 * (0 for fewer than 3 frames). */
int hr_audio_enc_tokens(int frames);

/* One clip: mel (n_mels, 2 * max_pos) as media/mel.h gives it, frames the
 * valid ones (1..2 * max_pos). features: (tokens, d_text), the rows that
 * replace the audio tokens' embeddings; hidden (may be NULL): the
 * encoder's last_hidden_state rows for those tokens, (tokens, d). The
 * frames past the clip are attended to by nobody (transformers' padding
 * mask), so only the clip's positions are computed. HR_EINVAL for a clip
 * of no tokens, HR_ENOMEM. */
int hr_audio_enc_encode(hr_audio_enc *a, hr_pool *pool, const float *mel, int frames,
                        float *features, float *hidden, hr_error *err);

#endif
