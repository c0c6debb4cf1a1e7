/* Architectures as data: every supported model_type is one descriptor row
 * over the one generic forward pass. A new dense architecture is a new row,
 * not a new forward. */
#ifndef HR_MODEL_ARCH_H
#define HR_MODEL_ARCH_H

#include <stdbool.h>

typedef enum hr_norm_kind { HR_NORM_RMS, HR_NORM_LAYER } hr_norm_kind;
typedef enum hr_act {
    HR_ACT_SILU,
    HR_ACT_GELU_TANH, /* gelu_pytorch_tanh, gelu_new */
    HR_ACT_GELU,      /* exact erf gelu */
} hr_act;
typedef enum hr_qk_norm {
    HR_QK_NORM_NONE,
    HR_QK_NORM_HEAD, /* over head_dim, per head (qwen3, gemma3) */
    HR_QK_NORM_FULL, /* over the whole projection (olmo2) */
} hr_qk_norm;

/* Norm slots around the two sublayers. A NULL name: slot absent. */
typedef struct hr_arch_norms {
    const char *pre_attn, *post_attn, *pre_mlp, *post_mlp;
} hr_arch_norms;

typedef struct hr_arch {
    const char *model_type;
    hr_norm_kind norm;
    float norm_offset;       /* gemma: weight is stored as w - 1 */
    bool embed_scale_sqrt;   /* gemma: embeddings * sqrt(d_model) */
    bool gated_mlp;          /* act(gate) * up, else act(up) */
    bool fused_qkv;          /* phi3: self_attn.qkv_proj */
    bool fused_gate_up;      /* phi3, glm4: mlp.gate_up_proj (gate first) */
    hr_qk_norm qk_norm;
    bool rope_interleaved;   /* glm4: rotate (x0,x1),(x2,x3).. pairs */
    hr_arch_norms norms;
    const char *mlp_up, *mlp_down, *mlp_gate; /* names under mlp. */
    const char *default_act; /* when the config names none */
    /* default layer pattern when config.json has no layer_types:
     * sliding every layer whose (i+1) % sliding_period != 0; 0 = none,
     * 1 = every layer when sliding_window is set */
    int sliding_period;
} hr_arch;

/* NULL when the model_type is unknown. */
const hr_arch *hr_arch_find(const char *model_type);
/* Comma-separated list of supported model_types, for error messages. */
const char *hr_arch_list(void);

#endif
