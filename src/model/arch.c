#include "model/arch.h"

#include <string.h>

/* Norm layouts. */
#define LLAMA_NORMS {.pre_attn = "input_layernorm", .pre_mlp = "post_attention_layernorm"}
#define SANDWICH_NORMS                                                          \
    {.pre_attn = "input_layernorm", .post_attn = "post_attention_layernorm",    \
     .pre_mlp = "pre_feedforward_layernorm", .post_mlp = "post_feedforward_layernorm"}
#define OLMO2_NORMS {.post_attn = "post_attention_layernorm", .post_mlp = "post_feedforward_layernorm"}
#define GLM4_NORMS                                                              \
    {.pre_attn = "input_layernorm", .post_attn = "post_self_attn_layernorm",    \
     .pre_mlp = "post_attention_layernorm", .post_mlp = "post_mlp_layernorm"}
/* Gemma-4: sandwich norms, and around the experts beside the dense MLP */
#define GEMMA4_NORMS                                                            \
    {.pre_attn = "input_layernorm", .post_attn = "post_attention_layernorm",    \
     .pre_mlp = "pre_feedforward_layernorm", .post_mlp = "post_feedforward_layernorm", \
     .post_dense = "post_feedforward_layernorm_1", .pre_moe = "pre_feedforward_layernorm_2", \
     .post_moe = "post_feedforward_layernorm_2"}

/* MoE blocks */
#define QWEN_MOE(norm, sh)                                                \
    {.router = HR_ROUTER_SOFTMAX_TOPK, .block = "mlp", .router_name = "gate", \
     .e_gate = "gate_proj", .e_up = "up_proj", .e_down = "down_proj",       \
     .norm_topk = (norm), .shared = (sh) ? HR_SHARED_GATED : HR_SHARED_NONE}
#define DENSE_MLP                                                           \
    .gated_mlp = true, .mlp_up = "up_proj", .mlp_down = "down_proj",        \
    .mlp_gate = "gate_proj", .default_act = "silu"

/* BERT (BertModel, and BertFor* under "bert."): the file's module names
 * for the canonical ones the binder asks for */
static const hr_name_alias BERT_NAMES[] = {
    {"model.embed_tokens", "embeddings.word_embeddings"},
    {"model.embed_positions", "embeddings.position_embeddings"},
    {"model.embed_types", "embeddings.token_type_embeddings"},
    {"model.embed_norm", "embeddings.LayerNorm"},
    {"model.layers.%d.self_attn.q_proj", "encoder.layer.%d.attention.self.query"},
    {"model.layers.%d.self_attn.k_proj", "encoder.layer.%d.attention.self.key"},
    {"model.layers.%d.self_attn.v_proj", "encoder.layer.%d.attention.self.value"},
    {"model.layers.%d.self_attn.o_proj", "encoder.layer.%d.attention.output.dense"},
    {"model.layers.%d.attn_norm", "encoder.layer.%d.attention.output.LayerNorm"},
    {"model.layers.%d.mlp.up", "encoder.layer.%d.intermediate.dense"},
    {"model.layers.%d.mlp.down", "encoder.layer.%d.output.dense"},
    {"model.layers.%d.mlp_norm", "encoder.layer.%d.output.LayerNorm"},
    {NULL, NULL},
};

static const hr_arch archs[] = {
    {.model_type = "llama", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu", .sliding_period = 1},
    {.model_type = "mistral", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu", .sliding_period = 1},
    {.model_type = "qwen2", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu",
     /* Qwen2Config.__init__'s (Qwen2-Audio's nested text_config) */
     .config_defaults = "{\"vocab_size\": 151936, \"hidden_size\": 4096, "
                        "\"intermediate_size\": 22016, \"num_hidden_layers\": 32, "
                        "\"num_attention_heads\": 32, \"num_key_value_heads\": 32, "
                        "\"hidden_act\": \"silu\", \"max_position_embeddings\": 32768, "
                        "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false, "
                        "\"rope_theta\": 10000.0}"},
    /* Qwen2.5-VL's text model: qwen2 with M-RoPE (config.h mrope_section) */
    {.model_type = "qwen2_5_vl_text", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu"},
    {.model_type = "qwen3", .norms = LLAMA_NORMS, .gated_mlp = true,
     .qk_norm = HR_QK_NORM_HEAD, .mlp_up = "up_proj", .mlp_down = "down_proj",
     .mlp_gate = "gate_proj", .default_act = "silu"},
    {.model_type = "gemma", .norms = LLAMA_NORMS, .norm_offset = 1.0f,
     .embed_scale_sqrt = true, .gated_mlp = true, .mlp_up = "up_proj",
     .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "gelu_pytorch_tanh"},
    {.model_type = "gemma2", .norms = SANDWICH_NORMS, .norm_offset = 1.0f,
     .embed_scale_sqrt = true, .gated_mlp = true, .mlp_up = "up_proj",
     .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "gelu_pytorch_tanh", .sliding_period = 2},
    {.model_type = "gemma3_text", .norms = SANDWICH_NORMS, .norm_offset = 1.0f,
     .embed_scale_sqrt = true, .gated_mlp = true, .qk_norm = HR_QK_NORM_HEAD,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "gelu_pytorch_tanh", .sliding_period = 6,
     /* Gemma3TextConfig.__init__'s */
     .config_defaults = "{\"vocab_size\": 262208, \"hidden_size\": 2304, "
                        "\"intermediate_size\": 9216, \"num_hidden_layers\": 26, "
                        "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                        "\"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\", "
                        "\"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-6, "
                        "\"tie_word_embeddings\": true, \"rope_theta\": 1000000.0, "
                        "\"query_pre_attn_scalar\": 256, \"sliding_window\": 4096, "
                        "\"rope_local_base_freq\": 10000.0, \"sliding_window_pattern\": 6}"},
    {.model_type = "phi3", .norms = LLAMA_NORMS, .gated_mlp = true,
     .fused_qkv = true, .fused_gate_up = true, .mlp_up = "gate_up_proj",
     .mlp_down = "down_proj", .default_act = "silu", .sliding_period = 1},
    {.model_type = "olmo2", .norms = OLMO2_NORMS, .gated_mlp = true,
     .qk_norm = HR_QK_NORM_FULL, .mlp_up = "up_proj", .mlp_down = "down_proj",
     .mlp_gate = "gate_proj", .default_act = "silu"},
    {.model_type = "granite", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu"},
    {.model_type = "smollm3", .norms = LLAMA_NORMS, .gated_mlp = true,
     .mlp_up = "up_proj", .mlp_down = "down_proj", .mlp_gate = "gate_proj",
     .default_act = "silu"},
    {.model_type = "starcoder2", .norm = HR_NORM_LAYER, .norms = LLAMA_NORMS,
     .mlp_up = "c_fc", .mlp_down = "c_proj", .default_act = "gelu_pytorch_tanh",
     .sliding_period = 1},
    {.model_type = "glm4", .norms = GLM4_NORMS, .gated_mlp = true,
     .fused_gate_up = true, .rope_interleaved = true, .mlp_up = "gate_up_proj",
     .mlp_down = "down_proj", .default_act = "silu"},
    /* mixture-of-experts: the dense fields name the MLP of the layers that
     * have no experts (mlp_only_layers, decoder_sparse_step) */
    {.model_type = "qwen3_moe", .norms = LLAMA_NORMS, DENSE_MLP,
     .qk_norm = HR_QK_NORM_HEAD, .moe = QWEN_MOE(-1, false)},
    {.model_type = "qwen2_moe", .norms = LLAMA_NORMS, DENSE_MLP,
     .moe = QWEN_MOE(-1, true)},
    {.model_type = "olmoe", .norms = LLAMA_NORMS, DENSE_MLP,
     .qk_norm = HR_QK_NORM_FULL, .moe = QWEN_MOE(-1, false)},
    {.model_type = "mixtral", .norms = LLAMA_NORMS, DENSE_MLP, .sliding_period = 1,
     .moe = {.router = HR_ROUTER_SOFTMAX_TOPK, .block = "block_sparse_moe",
             .router_name = "gate", .e_gate = "w1", .e_up = "w3", .e_down = "w2",
             .norm_topk = 1}},
    {.model_type = "qwen3_next", .norms = LLAMA_NORMS, DENSE_MLP, .norm_offset = 1.0f,
     .qk_norm = HR_QK_NORM_HEAD, .attn_out_gate = true, .linear_deltanet = true,
     .moe = QWEN_MOE(-2, true)},
    /* encoders */
    {.model_type = "bert", .norm = HR_NORM_LAYER, .norms = {.post_attn = "attn_norm", .post_mlp = "mlp_norm"},
     .mlp_up = "up", .mlp_down = "down", .default_act = "gelu", .encoder = true,
     .abs_positions = true, .post_ln = true, .no_rope = true, .aliases = BERT_NAMES},
    {.model_type = "gpt_oss", .norms = LLAMA_NORMS, DENSE_MLP, .attn_sinks = true,
     .moe = {.router = HR_ROUTER_TOPK_SOFTMAX, .block = "mlp", .router_name = "router",
             .layout = HR_EXPERTS_FUSED_T, .norm_topk = 0, .swiglu_clamped = true}},
    {.model_type = "glm4_moe", .norms = LLAMA_NORMS, DENSE_MLP, .qk_norm = HR_QK_NORM_HEAD,
     .moe = {.router = HR_ROUTER_SIGMOID_GROUPED, .block = "mlp", .router_name = "gate",
             .e_gate = "gate_proj", .e_up = "up_proj", .e_down = "down_proj",
             .norm_topk = -2, .shared = HR_SHARED_PLAIN}},
    {.model_type = "granitemoe", .norms = LLAMA_NORMS, DENSE_MLP,
     .moe = {.router = HR_ROUTER_TOPK_SOFTMAX, .block = "block_sparse_moe",
             .router_name = "router.layer", .layout = HR_EXPERTS_GATE_UP,
             .e_gate = "input_linear.weight", .e_down = "output_linear.weight",
             .norm_topk = 0}},
    {.model_type = "granitemoehybrid", .norms = LLAMA_NORMS, DENSE_MLP, .mamba2 = true,
     .nope_default = true,
     .moe = {.router = HR_ROUTER_TOPK_SOFTMAX, .block = "block_sparse_moe",
             .router_name = "router.layer", .layout = HR_EXPERTS_GATE_UP,
             .e_gate = "input_linear.weight", .e_down = "output_linear.weight",
             .norm_topk = 0, .shared = HR_SHARED_GRANITE}},
    /* Gemma-4's text model (Gemma4ForCausalLM): weights multiply the norms
     * as they are (no +1), q/k RMS-normed with weights and V without, q.k
     * unscaled; with enable_moe_block every layer also routes top-k of the
     * experts (softmax, renormalised, times per_expert_scale) beside its
     * dense MLP. Per-layer inputs, KV sharing and other head sizes on the
     * full-attention layers are refused in config.c (gemma4_config) */
    {.model_type = "gemma4_text", .norms = GEMMA4_NORMS, .embed_scale_sqrt = true,
     .gated_mlp = true, .qk_norm = HR_QK_NORM_HEAD, .mlp_up = "up_proj",
     .mlp_down = "down_proj", .mlp_gate = "gate_proj", .default_act = "gelu_pytorch_tanh",
     .sliding_period = 6, .attn_scale = 1.0f, .v_norm = true, .layer_scalar = true,
     .last_layer_full = true, .gemma4_fields = true,
     .moe = {.router = HR_ROUTER_SOFTMAX_TOPK, .block = "", .router_name = "router.proj",
             .layout = HR_EXPERTS_GATE_UP, .e_gate = "experts.gate_up_proj",
             .e_down = "experts.down_proj", .norm_topk = 1, .router_scale = "router.scale",
             .expert_scale = "router.per_expert_scale", .beside_dense = true,
             .enable_field = "enable_moe_block"}},
};

const hr_arch *hr_arch_find(const char *model_type) {
    if (!model_type)
        return NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].model_type, model_type))
            return &archs[i];
    return NULL;
}

const char *hr_arch_list(void) {
    static char list[1024];
    if (!list[0])
        for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
            if (i)
                strcat(list, ", ");
            strcat(list, archs[i].model_type);
        }
    return list;
}
