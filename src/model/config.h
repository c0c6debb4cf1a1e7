/* Model hyperparameters resolved from a Hugging Face config.json, as written
 * by transformers 4.x (rope_theta, rope_scaling), 5.x (rope_parameters,
 * layer_types) and mlx-lm. Architecture quirks come from the descriptor
 * table (arch.h); this struct holds the numbers. */
#ifndef HR_MODEL_CONFIG_H
#define HR_MODEL_CONFIG_H

#include "hearth.h"
#include "model/arch.h"

#include <jansson.h>
#include <stdbool.h>

#define HR_MAX_LAYERS 512
#define HR_MAX_EXPERTS_USED 32 /* k: experts a token is routed to */

typedef enum hr_rope_type {
    HR_ROPE_DEFAULT,
    HR_ROPE_LINEAR,
    HR_ROPE_DYNAMIC,
    HR_ROPE_YARN,
    HR_ROPE_LONGROPE,
    HR_ROPE_LLAMA3,
} hr_rope_type;

/* One RoPE parameterization (a model may have one per layer type). */
typedef struct hr_rope_params {
    hr_rope_type type;
    double theta;
    double factor;
    int original_max_pos;   /* 0 when not given */
    double low_freq_factor, high_freq_factor;    /* llama3 */
    double beta_fast, beta_slow, attention_factor; /* yarn / longrope; 0 = derive */
    double mscale, mscale_all_dim;               /* yarn (deepseek style), 0 = unset */
    bool truncate;                               /* yarn: floor/ceil the range */
    float *short_factor, *long_factor;           /* longrope, rot_dim/2 each (owned) */
} hr_rope_params;

typedef struct hr_hparams {
    const hr_arch *arch;
    int n_vocab;
    int d_model;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int d_ff;
    int max_pos;            /* max_position_embeddings */
    int ctx_max;            /* longest sequence served: max_pos, times the
                             * factor for dynamic NTK (whose max_pos is the
                             * original training length) */
    float norm_eps;
    hr_act act;
    bool tie_embeddings;
    float norm_offset;      /* the arch's, 0 for GGUF files (llama.cpp adds it) */
    bool rope_interleaved;  /* the arch's, or a llama GGUF's permuted q/k rows */

    /* attention */
    float attn_scale;       /* multiplies q.k */
    float attn_softcap;     /* 0 = none */
    float final_softcap;    /* 0 = none */
    int sliding_window;     /* 0 = none */
    bool k_eq_v;            /* gemma4 attention_k_eq_v: a full-attention
                             * layer's values are its key projection (no
                             * v_proj) */
    bool layer_sliding[HR_MAX_LAYERS];
    bool layer_rope[HR_MAX_LAYERS];   /* false for smollm3's no-rope layers */

    /* rope */
    int rot_dim;            /* rotated dims per head (partial rotary) */
    hr_rope_params rope;        /* full-attention layers */
    hr_rope_params rope_local;  /* sliding layers (gemma3: rope_local_base_freq) */
    bool has_rope_local;
    int mrope_section[3];   /* M-RoPE (Qwen2.5-VL): how many of the rot_dim/2
                             * frequencies take the t, h, w position; all 0:
                             * one position (batch.h rope_pos) */

    /* scalings (granite; gemma's sqrt(d_model) comes from the arch) */
    float embed_mult, residual_mult, logit_div;

    /* mixture of experts (arch->moe.router != NONE) */
    int n_experts;          /* num_experts / num_local_experts */
    int n_experts_used;     /* num_experts_per_tok (k) */
    int d_ff_expert;        /* moe_intermediate_size, else intermediate_size */
    int d_ff_shared;        /* shared_expert_intermediate_size; 0 = none */
    bool norm_topk;         /* renormalise the k routing weights */
    float routed_scale;     /* routed_scaling_factor (SIGMOID_GROUPED), else 1 */
    int n_group, topk_group; /* SIGMOID_GROUPED's expert groups, 1 and 1 when absent */
    float swiglu_alpha, swiglu_limit; /* gpt_oss's clamped swiglu */
    bool layer_moe[HR_MAX_LAYERS]; /* the layer's MLP is routed */

    /* recurrent layers: a state per sequence instead of KV; gated DeltaNet
     * (arch->linear_deltanet, layer_types "linear_attention") or Mamba-2
     * (arch->mamba2, layer_types "mamba") */
    bool layer_linear[HR_MAX_LAYERS];
    int n_linear;           /* how many */
    int ln_k_heads, ln_v_heads, ln_k_dim, ln_v_dim, ln_conv; /* linear_* */
    /* Mamba-2: mamba_n_heads x mamba_d_head (= inner, expand * d_model),
     * mamba_n_groups of B and C, mamba_d_state, mamba_d_conv taps */
    int mb_heads, mb_head_dim, mb_groups, mb_state, mb_conv, mb_inner;

    /* encoders (arch->abs_positions): type_vocab_size */
    int n_types;

    /* generation_config.json defaults (0 / -1 when absent) */
    int n_eos;
    int eos_ids[8];
    int bos_id;
} hr_hparams;

/* Resolve hyperparameters from a parsed config.json. gen may be NULL
 * (generation_config.json). Errors name the offending field. */
int hr_hparams_from_json(hr_hparams *hp, const json_t *cfg, const json_t *gen,
                         hr_error *err);
void hr_hparams_deinit(hr_hparams *hp);

#endif
