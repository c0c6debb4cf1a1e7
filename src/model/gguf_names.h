/* GGUF architectures, families and tensor names (gguf_names.c), and what
 * llama.cpp derives for gemma instead of reading it: shared by the reader
 * (gguf_model.c) and the writer (gguf_export.c). Internal to model/. */
#ifndef HR_MODEL_GGUF_NAMES_H
#define HR_MODEL_GGUF_NAMES_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum hr__gguf_family {
    FAM_LLAMA, FAM_QWEN, FAM_GEMMA, FAM_GEMMA2, FAM_GEMMA3, FAM_GPTOSS,
    FAM_QNEXT, FAM_GLM4MOE, FAM_GRANITE, FAM_GRANITEH, /* gguf_hybrid.c */
    FAM_GEMMA4, /* gguf_gemma4.c */
} hr__gguf_family;

typedef struct hr__gguf_arch {
    const char *gguf, *model_type;
    hr__gguf_family fam;
} hr__gguf_arch;

/* The architectures hearth reads and writes (GGUF name, model_type). */
extern const hr__gguf_arch hr__gguf_archs[];
extern const size_t hr__gguf_n_archs;

/* The row of a GGUF architecture name (len bytes), or -1. */
int hr__gguf_arch_index(const char *a, size_t len);
/* from -> to between GGUF (to_hf) and Hugging Face names of family f. */
const char *hr__gguf_map_name(const char *from, bool to_hf, hr__gguf_family f, char *buf,
                              size_t n);

/* gemma2/3 have four norms per layer ("sandwich"): llama.cpp's ffn_norm is
 * the norm before the MLP, which Hugging Face calls post_attention_layernorm
 * in llama's layout but pre_feedforward_layernorm in this one. */
static inline bool hr__gguf_sandwich(hr__gguf_family f) {
    return f == FAM_GEMMA2 || f == FAM_GEMMA3;
}

static inline bool hr__gguf_is_gemma(hr__gguf_family f) {
    return f == FAM_GEMMA || hr__gguf_sandwich(f);
}

/* ---- gemma: what llama.cpp derives instead of reading (src/models/gemma*.cpp) ---- */

/* llama.cpp's hparams.set_swa_pattern(p): layer i slides when p == 0 or
 * i % p < p - 1 (p = 6: five sliding layers, then a global one). */
static inline bool hr__gguf_swa_layer(int p, int i) {
    return p == 0 || i % p < p - 1;
}

/* The default sliding_window_pattern of gemma2 (2) and gemma3 (6). */
static inline int hr__gguf_swa_default(hr__gguf_family f) {
    return f == FAM_GEMMA2 ? 2 : 6;
}

/* gemma2/3's query_pre_attn_scalar as llama.cpp derives it: the file does
 * not carry it; llama.cpp scales q by 1/sqrt(n_embd / n_head) for the "27B"
 * models (gemma2: 46 layers, gemma3: 62) and by 1/sqrt(head_dim) otherwise,
 * after gemma_pytorch's configs. */
static inline int hr__gguf_gemma_qpas(hr__gguf_family f, int n_layers, int d_model, int n_heads,
                                      int head_dim) {
    bool big = (f == FAM_GEMMA2 && n_layers == 46) || (f == FAM_GEMMA3 && n_layers == 62);
    return big ? d_model / n_heads : head_dim;
}

#endif
