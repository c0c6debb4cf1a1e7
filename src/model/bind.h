/* The weight binder model.c runs at load, shared with the files that bind
 * parts of a layer (bind_moe.c). Internal to the model layer. */
#ifndef HR_MODEL_BIND_H
#define HR_MODEL_BIND_H

#include "model/model.h"

#include <jansson.h>
#include <stdbool.h>

/* Binding state: the first error stops it (rc), every helper then does
 * nothing. */
typedef struct hr__binder {
    hr_model *m;
    hr_error *err;
    int rc;
    float *vec_next, *vec_end; /* bump space for 1-D f32 copies */
    const json_t *quant;       /* config.json "quantization" block or NULL */
    char *conv_next;           /* bump space for converted matrices */
} hr__binder;

/* The file (base name) a tensor came from, for error messages. */
const char *hr__bind_file_of(hr__binder *b, const hr_tensor *t);
/* A tensor by name; NULL when absent (an error when required). */
const hr_tensor *hr__bind_find(hr__binder *b, const char *name, bool required);
/* A matrix (rows, cols) in any dtype the products take (a 3-D [E, R, C]
 * tensor is the 2-D [E R, C] it is in memory); a zero tensor on error. */
hr_tensor hr__bind_matrix(hr__binder *b, const char *name, int64_t rows, int64_t cols);
/* A 1-D tensor of n as f32 in the vector space, or NULL. */
const float *hr__bind_vec(hr__binder *b, const char *name, int64_t n, bool required);

/* ---- bind_moe.c ---- */

/* Bytes of the matrices binding rewrites (an upper bound): m->converted. */
size_t hr__bind_converted_bytes(const hr_model *m);
/* Layer il's routed MLP: router, experts, shared expert. */
void hr__bind_moe(hr__binder *b, int il);
/* A gated DeltaNet layer's weights (<pre>linear_attn.*). */
void hr__bind_deltanet(hr__binder *b, hr_layer *L, const char *pre);
/* A Mamba-2 mixer's weights (<pre>mamba.*). */
void hr__bind_mamba2(hr__binder *b, hr_layer *L, const char *pre);
/* qwen3_next's q_proj (per head [query | gate] rows) as L->wq and L->w_qgate. */
void hr__bind_gated_q(hr__binder *b, hr_layer *L, const char *name);

/* A multimodal config.json's image side (model/mm.c): the vision tower in
 * m->weights, preprocessor_config.json in dir, the image token ids; m->mm
 * set. */
int hr__model_open_vision(hr_model *m, const char *dir, const json_t *cfg, hr_error *err);
void hr__model_vision_free(hr_model_vision *v); /* NULL allowed */
void hr__model_vision_qwen_free(hr_model_vision_qwen *v); /* NULL allowed */
/* A config.json's audio side (model/mm_audio.c, Qwen2-Audio): the encoder
 * and projector in m->weights, preprocessor_config.json in dir, the audio
 * token ids; m->mm_audio set. */
int hr__model_open_audio(hr_model *m, const char *dir, const json_t *cfg, hr_error *err);
void hr__model_audio_free(hr_model_audio *a); /* NULL allowed */

#endif
