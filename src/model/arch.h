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

/* How a mixture-of-experts layer picks its experts from the router logits
 * (one row of E per token). */
typedef enum hr_router {
    HR_ROUTER_NONE,         /* dense MLP only */
    HR_ROUTER_SOFTMAX_TOPK, /* softmax over all E, then the top k (optionally
                             * renormalised over the k: norm_topk) */
    HR_ROUTER_TOPK_SOFTMAX, /* the top k logits (+ router bias), softmax over
                             * those k (gpt_oss, granitemoe) */
    HR_ROUTER_SIGMOID_GROUPED, /* DeepSeek-V3 style (glm4_moe): s = sigmoid(r);
                             * the experts of the topk_group best of n_group
                             * groups (a group's score: its 2 best s + bias)
                             * compete on s + <router>.e_score_correction_bias;
                             * weights s (renormalised when norm_topk) times
                             * routed_scaling_factor */
} hr_router;

/* Where a family keeps its experts' weights. */
typedef enum hr_experts_layout {
    HR_EXPERTS_SPLIT,   /* <block>.experts.<e>.<gate|up|down>.weight, one
                         * (out, in) matrix per expert (the hub's layout) */
    HR_EXPERTS_FUSED_T, /* gpt_oss: <block>.experts.gate_up_proj [E, d, 2ff]
                         * (x @ W, gate/up interleaved by column) and
                         * down_proj [E, ff, d], with _bias [E, 2ff] / [E, d] */
    HR_EXPERTS_GATE_UP, /* <block>.<e_gate> [E, 2ff, d] (per expert the gate
                         * rows, then the up rows) and <block>.<e_down>
                         * [E, d, ff], whole tensor names (granitemoe:
                         * input_linear.weight / output_linear.weight;
                         * gemma4: experts.gate_up_proj / experts.down_proj) */
} hr_experts_layout;

/* A shared expert beside the routed ones (every token goes through it). */
typedef enum hr_shared {
    HR_SHARED_NONE,
    HR_SHARED_GATED,   /* qwen2_moe: <block>.shared_expert.{gate,up,down}_proj
                        * scaled by sigmoid(<block>.shared_expert_gate . x) */
    HR_SHARED_PLAIN,   /* glm4_moe: <block>.shared_experts.{gate,up,down}_proj,
                        * n_shared_experts * moe_intermediate_size wide */
    HR_SHARED_GRANITE, /* granitemoehybrid: <layer>.shared_mlp.input_linear
                        * [2 ff, d] (gate rows, then up rows) and
                        * .output_linear [d, ff] */
} hr_shared;

/* The routed MLP of a mixture-of-experts family (router NONE: dense). */
typedef struct hr_arch_moe {
    hr_router router;
    const char *block;       /* module under the layer: "mlp", "block_sparse_moe";
                              * "": the layer itself (gemma4) */
    const char *router_name; /* the router's linear under block: "gate", "router" */
    const char *e_gate, *e_up, *e_down; /* per-expert names (SPLIT), the
                              * stacked tensors' (GATE_UP: e_gate, e_down) */
    hr_experts_layout layout;
    int norm_topk;           /* 0 / 1: fixed by the family; -1 / -2:
                              * config.json's norm_topk_prob, absent: false
                              * / true */
    hr_shared shared;        /* the shared expert, if any */
    bool swiglu_clamped;     /* gpt_oss: the clamped swiglu with alpha, limit
                              * and (up + 1) */
    /* gemma4: the router reads rmsnorm(h) * <block>.<router_scale> / sqrt(d)
     * of the residual stream h (no weight in the norm), not the MLP's
     * normed input; NULL: the MLP's input */
    const char *router_scale;
    /* gemma4: a chosen expert's weight (after the renormalisation) times
     * <block>.<expert_scale>[e]; NULL: none */
    const char *expert_scale;
    /* gemma4: the dense MLP runs on every layer and the experts beside it,
     * from the residual stream h:
     *   mlp = post_dense(mlp(pre_mlp(h))) + post_moe(moe(pre_moe(h)))
     * then post_mlp and the residual add as usual (hr_arch_norms) */
    bool beside_dense;
    /* a config.json boolean that turns the experts off (gemma4's
     * enable_moe_block, absent: off); NULL: always on */
    const char *enable_field;
} hr_arch_moe;

/* Norm slots around the two sublayers. A NULL name: slot absent. */
typedef struct hr_arch_norms {
    const char *pre_attn, *post_attn, *pre_mlp, *post_mlp;
    /* moe.beside_dense: the dense MLP's output norm, the experts' input
     * and output norms (on the layers with experts) */
    const char *post_dense, *pre_moe, *post_moe;
} hr_arch_norms;

/* A module's name in the file when it is not the canonical (llama-style)
 * one: canon and file are module paths ("model.layers.%d.self_attn.q_proj"),
 * at most one %d each; ".weight" / ".bias" follow either. */
typedef struct hr_name_alias {
    const char *canon, *file;
} hr_name_alias;

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
    hr_arch_moe moe;         /* router NONE for dense families */
    bool attn_sinks;         /* gpt_oss: self_attn.sinks, a learned logit per
                              * head in the softmax's denominator */
    bool attn_out_gate;      /* qwen3_next: q_proj gives per head [query |
                              * gate]; the output is attn * sigmoid(gate) */
    /* layers of layer_types "linear_attention" are gated DeltaNet
     * (qwen3_next: linear_attn.*, kernels/cpu/deltanet.h) */
    bool linear_deltanet;
    /* encoders (bert): bidirectional attention over the whole sequence, no
     * causal mask, no language-model head and no final norm: embeddings
     * only (the engine's embed requests), never generation */
    bool encoder;
    bool abs_positions;      /* learned absolute position embeddings, token
                              * type 0's embedding and a LayerNorm
                              * (model.embed_positions / embed_types /
                              * embed_norm) added to the token embeddings */
    bool post_ln;            /* the post_attn / post_mlp norms apply to the
                              * residual sum: x = norm(x + sublayer(x)) */
    bool no_rope;            /* no rotary embedding on any layer */
    const hr_name_alias *aliases; /* NULL-terminated; NULL: canonical names */
    /* layers of layer_types "mamba" are Mamba-2 mixers (granitemoehybrid:
     * mamba.*, kernels/cpu/mamba2.h) */
    bool mamba2;
    /* attention without positions unless config.json's
     * position_embedding_type is "rope" (granitemoehybrid) */
    bool nope_default;
    /* the transformers config class's defaults (a JSON object) for what a
     * composite model's nested text_config leaves out: to_diff_dict writes
     * it without the values equal to them (Gemma-3 4B's holds six keys).
     * A top-level config.json has every key of its class. NULL: none
     * beyond config.c's own fallbacks */
    const char *config_defaults;
    /* q.k scale when not derived from head_dim / query_pre_attn_scalar
     * (gemma4: 1, its q and k are RMS-normed); 0: derived */
    float attn_scale;
    bool v_norm;             /* gemma4: V RMS-normed per head, no weight */
    bool layer_scalar;       /* gemma4: <layer>.layer_scalar [1] multiplies
                              * the layer's output (residual included) */
    bool last_layer_full;    /* gemma4: the last layer is full attention
                              * whatever layer_types says (as transformers
                              * forces it) */
    bool gemma4_fields;      /* config.c parse_gemma4: Gemma-4's refused
                              * fields, its full-attention layers' head
                              * sizes, attention_k_eq_v */
} hr_arch;

/* NULL when the model_type is unknown. */
const hr_arch *hr_arch_find(const char *model_type);
/* Comma-separated list of supported model_types, for error messages. */
const char *hr_arch_list(void);

#endif
