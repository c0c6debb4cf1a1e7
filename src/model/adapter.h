/* LoRA adapters (docs/adapters.md): low-rank deltas on a model's q/k/v/o
 * and gate/up/down projections, loaded from a directory in either layout:
 *   peft    adapter_config.json (peft_type LORA: r, lora_alpha, rank_pattern,
 *           alpha_pattern, use_rslora, use_dora) + adapter_model.safetensors
 *           (base_model.model.<module>.lora_A.weight (r, in),
 *            .lora_B.weight (out, r), .lora_magnitude_vector (out))
 *   mlx-lm  adapter_config.json (fine_tune_type lora|dora, num_layers,
 *           lora_parameters {rank, scale, keys}) + adapters.safetensors
 *           (<module>.lora_a (in, r), .lora_b (r, out), .m (out))
 * Both become, per layer and projection, an hr_lora_mat: a (r, in),
 * bt (r, out), the scale, and for DoRA the per-row factor
 * m / ||W + scale * B A|| computed once here from the base weights. The
 * weights are f32 copies owned by the adapter, in the base's row order (a
 * GGUF llama's permuted q/k rows included). An adapter belongs to the model
 * it was opened for and is immutable after load; the caller keeps it alive
 * while requests use it (hr_adapter_ref / _unref). */
#ifndef HR_MODEL_ADAPTER_H
#define HR_MODEL_ADAPTER_H

#include "hearth.h"
#include "kernels/backend.h"
#include "model/model.h"

#include <stdatomic.h>
#include <stdint.h>

enum { HR_LORA_Q, HR_LORA_K, HR_LORA_V, HR_LORA_O, HR_LORA_GATE, HR_LORA_UP, HR_LORA_DOWN,
       HR_LORA_SLOTS };

typedef struct hr_adapter {
    _Atomic int refs;
    char *name;           /* given at open (owned) */
    char *path;           /* the directory (owned) */
    const char *format;   /* "peft" or "mlx" */
    bool dora;
    int max_rank;
    int n_mats;           /* adapted projections */
    const hr_model *model;
    hr_lora_mat *mats;    /* [n_layers][HR_LORA_SLOTS]; r == 0: not adapted */
    float *mem;           /* every a, bt, dora (owned) */
    size_t n_floats;
    uint64_t fingerprint; /* weights and scales: the prompt cache's key seed,
                           * never 0 */
} hr_adapter;

/* Open the adapter in dir for model m. Errors (one line, naming the file
 * and tensor): no adapter files, a non-LoRA type, a module that is not one
 * of the seven projections of a dense layer, a shape that does not match
 * the base, rank above HR_LORA_MAX_RANK. The result holds one reference. */
int hr_adapter_open(hr_adapter **out, const hr_model *m, const char *dir, const char *name,
                    hr_error *err);
/* The same from memory: config text and a safetensors image (not copied;
 * it must outlive the call only), peft layout or mlx-lm's (the fuzzed
 * entry point; name and path stay NULL). */
int hr_adapter_parse(hr_adapter **out, const hr_model *m, const char *config, size_t config_len,
                     const void *st_image, size_t st_len, bool mlx, hr_error *err);
void hr_adapter_ref(hr_adapter *a);
/* Drops a reference; the last frees it. NULL allowed. */
void hr_adapter_unref(hr_adapter *a);

/* The projection of layer il, slot HR_LORA_*, or NULL when not adapted. */
static inline const hr_lora_mat *hr_adapter_mat(const hr_adapter *a, int il, int slot) {
    const hr_lora_mat *mm = &a->mats[(size_t)il * HR_LORA_SLOTS + slot];
    return mm->r ? mm : NULL;
}

/* The base weight of a slot in a layer (for fuse and the DoRA norms). */
const hr_tensor *hr_adapter_base(const hr_model *m, int il, int slot);

#endif
