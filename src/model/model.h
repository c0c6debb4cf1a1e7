/* hr_model: config + mmapped weights bound to per-layer views. Immutable
 * after load and shared by every sequence. */
#ifndef HR_MODEL_MODEL_H
#define HR_MODEL_MODEL_H

#include "hearth.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/weights.h"
#include "media/imgproc.h"
#include "media/mel.h"

struct hr_vision;
struct hr_vision_qwen;

/* A multimodal model's image side (model/mm.c): the vision tower and
 * projector, the image processor's settings, and how images sit in the
 * prompt (Gemma-3: boi, image_token x mm_tokens, eoi). */
typedef struct hr_model_vision {
    struct hr_vision *tower;
    hr_image_proc proc;
    int32_t boi, eoi, image_token;
    int mm_tokens;
} hr_model_vision;

/* Qwen2.5-VL's image side (model/mm.c): the ViT and merger, the image
 * processor's settings (height and width per image: smart_resize between
 * min_pixels and max_pixels), the prompt's tokens (vision_start,
 * image_pad x the image's merged patches, vision_end). */
typedef struct hr_model_vision_qwen {
    struct hr_vision_qwen *tower;
    hr_image_proc proc;
    long min_pixels, max_pixels;
    int32_t vstart, vend, image_token;
} hr_model_vision_qwen;

/* Qwen2-Audio's audio side (model/mm_audio.c): the encoder and projector,
 * the feature extractor's settings (preprocessor_config.json), the audio
 * token (audio_token_index: <|AUDIO|>, repeated once per encoder row of a
 * clip between the tokenizer's <|audio_bos|> and <|audio_eos|>). */
typedef struct hr_model_audio {
    struct hr_audio_enc *tower;
    hr_mel_cfg mel;
    int32_t audio_token;
} hr_model_audio;

/* the last three: hr_arch_norms' post_dense, pre_moe, post_moe (layers
 * with experts of a moe.beside_dense family) */
enum { HR_NORM_PRE_ATTN, HR_NORM_POST_ATTN, HR_NORM_PRE_MLP, HR_NORM_POST_MLP,
       HR_NORM_POST_DENSE, HR_NORM_PRE_MOE, HR_NORM_POST_MOE, HR_NORM_SLOTS };

typedef struct hr_norm_w {
    const float *w; /* [d] f32; NULL: slot absent */
    const float *b; /* [d] LayerNorm bias or NULL */
} hr_norm_w;

typedef struct hr_layer {
    hr_tensor wq;              /* (n_heads*head_dim, d_model) */
    hr_tensor wk, wv;          /* (n_kv_heads*head_dim, d_model) */
    hr_tensor wo;              /* (d_model, n_heads*head_dim) */
    const float *bq, *bk, *bv, *bo;  /* NULL when the model has none */
    const float *q_norm, *k_norm;    /* (head_dim) or full projection; NULL */
    hr_norm_w norm[HR_NORM_SLOTS];
    hr_tensor w_gate, w_up;    /* (d_ff, d_model); w_gate.data NULL if not gated */
    hr_tensor w_down;          /* (d_model, d_ff) */
    const float *b_up, *b_down;
    const float *sinks;        /* (n_heads) attention sinks or NULL */
    const float *v_norm;       /* (head_dim) ones: arch->v_norm's unweighted
                                * norm of V; NULL: none */
    float out_scale;           /* arch->layer_scalar: the layer's output
                                * times this (host value); 0: none */

    /* mixture of experts (hp.layer_moe[il]): the dense fields are unused */
    hr_tensor router;          /* (n_experts, d_model) */
    const float *router_b;     /* (n_experts) or NULL */
    const float *score_bias;   /* (n_experts) SIGMOID_GROUPED's choice bias */
    const float *router_scale; /* (d_model) moe.router_scale / sqrt(d_model), or NULL */
    const float *expert_scale; /* (n_experts) moe.expert_scale, or NULL */
    hr_tensor *e_gate, *e_up;  /* [n_experts] (d_ff_expert, d_model) */
    hr_tensor *e_down;         /* [n_experts] (d_model, d_ff_expert) */
    const float *eb_gate, *eb_up, *eb_down; /* [n_experts][ff | d] or NULL */
    hr_tensor sh_gate, sh_up;  /* (d_ff_shared, d_model); data NULL: none */
    hr_tensor sh_down;         /* (d_model, d_ff_shared) */
    hr_tensor sh_inp;          /* (1, d_model) the shared expert's gate */

    /* attn_out_gate: wq holds the query rows, w_qgate the gate rows */
    hr_tensor w_qgate;         /* (n_heads*head_dim, d_model) */

    /* gated DeltaNet (hp.layer_linear[il]); the attention fields are unused */
    hr_tensor ln_qkvz;         /* (2 kd + 2 vd, d_model) */
    hr_tensor ln_ba;           /* (2 n_v_heads, d_model) */
    hr_tensor ln_out;          /* (d_model, vd) */
    const float *ln_conv;      /* (2 kd + vd, conv_k) */
    const float *ln_a, *ln_dt_bias; /* (n_v_heads); ln_a = -exp(A_log) */
    const float *ln_norm;      /* (v_dim) */

    /* Mamba-2 (hp.layer_linear[il] of an arch->mamba2 family) */
    hr_tensor mb_in;           /* (2 inner + 2 groups n + heads, d_model) */
    hr_tensor mb_out;          /* (d_model, inner) */
    const float *mb_conv, *mb_conv_b; /* (inner + 2 groups n, conv_k), (..) or NULL */
    const float *mb_a, *mb_dt_bias, *mb_d; /* (heads); mb_a = -exp(A_log) */
    const float *mb_norm;      /* (inner) */
} hr_layer;

struct hr_model {
    char *path;
    hr_hparams hp;
    hr_weights *weights;
    const hr_tensor *embed;    /* (n_vocab, d_model): &embed_t */
    const hr_tensor *lm_head;  /* (n_vocab, d_model); == embed when tied */
    hr_tensor embed_t, head_t; /* views (quantized ones are built at load) */
    hr_norm_w final_norm;      /* w NULL: none (encoders) */
    /* encoders (arch->abs_positions): f32 copies (owned) */
    float *pos_emb;            /* [max_pos][d_model] */
    float *type_emb;           /* [n_types][d_model]; token type 0 is used */
    hr_norm_w embed_norm;
    hr_layer *layers;          /* [n_layers] */
    float *vecs;               /* f32 copies of every 1-D tensor (owned) */
    hr_tensor *experts;        /* every layer's expert views (owned) */
    void *converted;           /* matrices rewritten at load (gpt_oss's
                                * transposed experts, qwen3_next's q rows) */
    size_t converted_bytes;    /* (owned, hr_big_alloc) */
    size_t n_vecs;             /* floats at vecs */
    void *repacked;            /* matrices repacked for the kernels (owned, */
    size_t repacked_bytes;     /* hr_big_alloc) */
    size_t weight_bytes;
    uint64_t fingerprint;      /* the weights and the math (SSD cache keys) */
    bool gguf;                 /* loaded from a GGUF file */
    bool f32_act;              /* quantized products with f32-grade activations
                                * (the load's quant_act "f32") */
    bool qk_permuted;          /* q/k rows in llama.cpp's order (a GGUF llama:
                                * gguf_model.h), rotated as interleaved pairs */
    hr_backend *be;            /* where the weights live (cpu: the mmap) */
    hr_model_vision *mm;       /* images, or NULL: a text model (owned) */
    hr_model_vision_qwen *mm_qwen; /* Qwen2.5-VL's, or NULL (owned) */
    hr_model_audio *mm_audio;  /* audio (Qwen2-Audio), or NULL (owned) */
    void *dev_mem;             /* off the host: every weight, one allocation */
    size_t dev_bytes;
};

/* How to load: resolved here, once (the kernels never read the environment). */
typedef struct hr_model_opts {
    const char *device;    /* --device (kernels/backend.h: auto, cpu, cuda[:N]); NULL: cpu */
    const char *quant_act; /* quantized weights' activations (kernels/cpu/ops.h:
                            * default, int8, rows, f32); NULL: $HEARTH_QUANT_ACT,
                            * else default */
    const char *isa;       /* CPU kernels' cap (kernels/cpu/cpu.h: scalar, avx2,
                            * avx512; process-wide, chosen once); NULL:
                            * $HEARTH_ISA, else the best */
} hr_model_opts;

/* Load a model directory or GGUF file without a tokenizer. */
int hr_model_open_with(hr_model **out, const char *dir, const hr_model_opts *o,
                       hr_error *err);
/* The same on the CPU, NULL options. */
int hr_model_open(hr_model **out, const char *dir, hr_error *err);
/* The same, the weights on the backend --device `device` names
 * (kernels/backend.h: auto, cpu, cuda[:N]; NULL: cpu). */
int hr_model_open_on(hr_model **out, const char *dir, const char *device, hr_error *err);

/* Bytes of weights read per decoded token (matrices + embedding row). */
size_t hr_model_decode_bytes(const hr_model *m);

#endif
