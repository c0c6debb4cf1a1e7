/* The trainable LoRA parameters of `hearth train` (docs/training.md): per
 * adapted projection of the last num_layers layers, a (r, in) and bt
 * (r, out) in the layout the serving side uses (kernels/backend.h
 * hr_lora_mat: y += scale * (x a^T) bt), with their gradients and the
 * optimizer's moments. Every array is one slice of four flat buffers
 * (params, grads, m, v), so the optimizer and the checkpoint walk flat
 * memory. Written as mlx-lm's adapters.safetensors (lora_a = a^T (in, r),
 * lora_b = bt (r, out)) + adapter_config.json, which model/adapter.c
 * loads. */
#ifndef HR_TRAIN_LORA_PARAMS_H
#define HR_TRAIN_LORA_PARAMS_H

#include "hearth.h"
#include "model/adapter.h"
#include "model/model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct hr_lora_param {
    int r, in, out;  /* r == 0: not adapted */
    float scale;
    float *a, *bt;   /* (r, in), (r, out) */
    float *ga, *gbt; /* their gradients (same shapes) */
} hr_lora_param;

typedef struct hr_lora_cfg {
    int rank;        /* mlx-lm lora_parameters.rank (8) */
    float scale;     /* lora_parameters.scale (20) */
    int num_layers;  /* the last num_layers layers; -1: all (16) */
    bool keys[HR_LORA_SLOTS]; /* adapted projections (all by default) */
} hr_lora_cfg;

typedef struct hr_lora_set {
    const hr_model *m;
    hr_lora_cfg cfg;
    int first;           /* the lowest adapted layer */
    hr_lora_param *p;    /* [n_layers][HR_LORA_SLOTS] */
    size_t n;            /* trainable floats */
    float *w, *g, *m1, *m2; /* params, grads, first and second moments [n] */
} hr_lora_set;

/* Adapters on every dense q/k/v/o/gate/up/down projection of model m named
 * by cfg: a uniform in +-1/sqrt(in) from the seed, bt zero (mlx-lm's
 * LoRALinear init). Errors: a model this trainer does not support
 * (hr_bp_supports), num_layers past the model's, rank outside
 * 1..HR_LORA_MAX_RANK. */
int hr_lora_set_new(hr_lora_set **out, const hr_model *m, const hr_lora_cfg *cfg,
                    uint64_t seed, hr_error *err);
void hr_lora_set_free(hr_lora_set *s);

/* Zero the gradients. */
void hr_lora_set_zero_grad(hr_lora_set *s);

/* g /= d (gradient accumulation: mlx-lm divides the sum by its steps). */
void hr_lora_set_div_grad(hr_lora_set *s, float d);

/* mlx.optimizers Adam / AdamW (no bias correction, their default):
 * w *= 1 - lr * wd (AdamW only, wd > 0), m1 = b1 m1 + (1 - b1) g,
 * m2 = b2 m2 + (1 - b2) g^2, w -= lr m1 / (sqrt(m2) + eps). */
typedef struct hr_adam {
    float lr, b1, b2, eps, wd;
} hr_adam;
void hr_lora_set_adam(hr_lora_set *s, const hr_adam *o);

/* Write the parameters to path as mlx-lm's adapters.safetensors
 * (atomically: a temp file, then rename). */
int hr_lora_set_save(const hr_lora_set *s, const char *path, hr_error *err);

/* Write path as mlx-lm's adapter_config.json: fine_tune_type "lora",
 * num_layers, lora_parameters {rank, scale, dropout 0, keys}, and every
 * field of extra (the run's options; may be NULL). Atomically. */
int hr_lora_set_write_config(const hr_lora_set *s, const char *path, const json_t *extra,
                             hr_error *err);

/* Read an mlx-lm adapters.safetensors into the parameters (mlx_lm.lora's
 * --resume-adapter-file): every tensor must name an adapted projection
 * of this set with its shape. */
int hr_lora_set_load(hr_lora_set *s, const char *path, hr_error *err);

/* The name of slot s under model.layers.N ("self_attn.q_proj"). */
const char *hr_lora_slot_path(int slot);

#endif
