/* GGUF architectures, families, tensor names and types (gguf_names.h). */
#include "model/gguf_names.h"
#include "model/gguf_model.h"

#include <stdio.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const hr__gguf_arch hr__gguf_archs[] = {
    {"llama", "llama", FAM_LLAMA},   {"qwen2", "qwen2", FAM_QWEN},
    {"qwen3", "qwen3", FAM_QWEN},    {"gemma", "gemma", FAM_GEMMA},
    {"gemma2", "gemma2", FAM_GEMMA2}, {"gemma3", "gemma3_text", FAM_GEMMA3},
    /* mixture of experts (gguf_moe.c); mixtral is llama with experts */
    {"qwen3moe", "qwen3_moe", FAM_QWEN}, {"qwen2moe", "qwen2_moe", FAM_QWEN},
    {"olmoe", "olmoe", FAM_QWEN}, {"gpt-oss", "gpt_oss", FAM_GPTOSS}, /* gguf_gptoss.c */
    /* gguf_hybrid.c */
    {"qwen3next", "qwen3_next", FAM_QNEXT}, {"glm4moe", "glm4_moe", FAM_GLM4MOE},
    {"granitemoe", "granitemoe", FAM_GRANITE}, {"granitehybrid", "granitemoehybrid", FAM_GRANITEH},
    {"gemma4", "gemma4_text", FAM_GEMMA4}, /* gguf_gemma4.c */
};
const size_t hr__gguf_n_archs = COUNT(hr__gguf_archs);

int hr__gguf_arch_index(const char *a, size_t len) {
    for (size_t i = 0; i < hr__gguf_n_archs; i++)
        if (strlen(hr__gguf_archs[i].gguf) == len && !memcmp(a, hr__gguf_archs[i].gguf, len))
            return (int)i;
    return -1;
}

/* Which families a LAYER_NAMES row is for (bits of family). Stacked
 * experts are [E, out, in] tensors under switch_mlp (mlx-lm's name);
 * mixtral (GGUF arch llama) keeps its experts under block_sparse_moe, the
 * granite families theirs and their router there too; the other MoE
 * families under mlp. Names that are not the hub's (qwen3next's
 * in_proj_qkv / in_proj_z, the A of ssm_a, granite's stacked and shared
 * experts split) are what the hub's tensors become on the way
 * (gguf_hybrid.c), and what the binder takes from a GGUF. */
#define F(f) (1u << (f))
#define ALL (~0u)
#define LLAMA_NORM (F(FAM_LLAMA) | F(FAM_QWEN) | F(FAM_GEMMA) | F(FAM_GRANITE) | F(FAM_GRANITEH))
#define POST_NORM (F(FAM_GPTOSS) | F(FAM_QNEXT) | F(FAM_GLM4MOE))
#define SANDWICH (F(FAM_GEMMA2) | F(FAM_GEMMA3) | F(FAM_GEMMA4))
#define MOE_MLP (F(FAM_QWEN) | F(FAM_QNEXT) | F(FAM_GLM4MOE))
#define GRANITES (F(FAM_GRANITE) | F(FAM_GRANITEH))
static const struct { const char *gguf, *hf; unsigned fams; } LAYER_NAMES[] = {
    /* gemma4: the experts beside the dense MLP, their norms and router, the
     * layer's output scale */
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight", F(FAM_GEMMA4)},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight", F(FAM_GEMMA4)},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight", F(FAM_GEMMA4)},
    {"layer_output_scale.weight", "layer_scalar", F(FAM_GEMMA4)},
    {"ffn_gate_inp.weight", "router.proj.weight", F(FAM_GEMMA4)},
    {"ffn_gate_inp.scale", "router.scale", F(FAM_GEMMA4)},
    {"ffn_down_exps.scale", "router.per_expert_scale", F(FAM_GEMMA4)},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj", F(FAM_GEMMA4)},
    {"ffn_down_exps.weight", "experts.down_proj", F(FAM_GEMMA4)},
    /* gpt-oss: its own names first (both ways, the first match wins) */
    {"attn_sinks.weight", "self_attn.sinks", F(FAM_GPTOSS)},
    {"ffn_gate_inp.weight", "mlp.router.weight", F(FAM_GPTOSS)},
    {"ffn_gate_inp.bias", "mlp.router.bias", F(FAM_GPTOSS)},
    {"ffn_gate_exps.bias", "mlp.switch_mlp.gate_proj.bias", F(FAM_GPTOSS)},
    {"ffn_up_exps.bias", "mlp.switch_mlp.up_proj.bias", F(FAM_GPTOSS)},
    {"ffn_down_exps.bias", "mlp.switch_mlp.down_proj.bias", F(FAM_GPTOSS)},
    {"attn_norm.weight", "input_layernorm.weight", ALL},
    {"ffn_norm.weight", "post_attention_layernorm.weight", LLAMA_NORM},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", POST_NORM | SANDWICH},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", SANDWICH},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", SANDWICH},
    {"attn_q.weight", "self_attn.q_proj.weight", ALL},
    {"attn_k.weight", "self_attn.k_proj.weight", ALL},
    {"attn_v.weight", "self_attn.v_proj.weight", ALL},
    {"attn_output.weight", "self_attn.o_proj.weight", ALL},
    {"attn_q.bias", "self_attn.q_proj.bias", ALL},
    {"attn_k.bias", "self_attn.k_proj.bias", ALL},
    {"attn_v.bias", "self_attn.v_proj.bias", ALL},
    {"attn_output.bias", "self_attn.o_proj.bias", ALL},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", ALL},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", ALL},
    {"ffn_gate.weight", "mlp.gate_proj.weight", ALL},
    {"ffn_up.weight", "mlp.up_proj.weight", ALL},
    {"ffn_down.weight", "mlp.down_proj.weight", ALL},
    {"ffn_gate_inp.weight", "mlp.gate.weight", MOE_MLP},
    {"ffn_gate_exps.weight", "mlp.switch_mlp.gate_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_up_exps.weight", "mlp.switch_mlp.up_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_down_exps.weight", "mlp.switch_mlp.down_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", F(FAM_LLAMA)},
    {"ffn_gate_exps.weight", "block_sparse_moe.switch_mlp.gate_proj.weight", F(FAM_LLAMA) | GRANITES},
    {"ffn_up_exps.weight", "block_sparse_moe.switch_mlp.up_proj.weight", F(FAM_LLAMA) | GRANITES},
    {"ffn_down_exps.weight", "block_sparse_moe.switch_mlp.down_proj.weight", F(FAM_LLAMA) | GRANITES},
    /* glm4moe: the router's score bias, plain shared experts */
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", F(FAM_GLM4MOE)},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", F(FAM_GLM4MOE)},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", F(FAM_GLM4MOE)},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", F(FAM_GLM4MOE)},
    /* granitemoe, granitehybrid: router, shared_mlp split */
    {"ffn_gate_inp.weight", "block_sparse_moe.router.layer.weight", GRANITES},
    {"ffn_gate_shexp.weight", "shared_mlp.gate_proj.weight", GRANITES},
    {"ffn_up_shexp.weight", "shared_mlp.up_proj.weight", GRANITES},
    {"ffn_down_shexp.weight", "shared_mlp.output_linear.weight", GRANITES},
    /* granitehybrid's Mamba-2 mixers */
    {"ssm_in.weight", "mamba.in_proj.weight", F(FAM_GRANITEH)},
    {"ssm_conv1d.weight", "mamba.conv1d.weight", F(FAM_GRANITEH)},
    {"ssm_conv1d.bias", "mamba.conv1d.bias", F(FAM_GRANITEH)},
    {"ssm_dt.bias", "mamba.dt_bias", F(FAM_GRANITEH)},
    {"ssm_a", "mamba.A", F(FAM_GRANITEH)},
    {"ssm_d", "mamba.D", F(FAM_GRANITEH)},
    {"ssm_norm.weight", "mamba.norm.weight", F(FAM_GRANITEH)},
    {"ssm_out.weight", "mamba.out_proj.weight", F(FAM_GRANITEH)},
    /* qwen3next's gated DeltaNet layers */
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", F(FAM_QNEXT)},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", F(FAM_QNEXT)},
    {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", F(FAM_QNEXT)},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", F(FAM_QNEXT)},
    {"ssm_dt.bias", "linear_attn.dt_bias", F(FAM_QNEXT)},
    {"ssm_a", "linear_attn.A", F(FAM_QNEXT)},
    {"ssm_norm.weight", "linear_attn.norm.weight", F(FAM_QNEXT)},
    {"ssm_out.weight", "linear_attn.out_proj.weight", F(FAM_QNEXT)},
};
static const struct { const char *gguf, *hf; } TOP_NAMES[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"rope_freqs.weight", "rope_freqs.weight"},
};

const char *hr__gguf_map_name(const char *from, bool to_hf, hr__gguf_family f, char *buf,
                              size_t n) {
    for (size_t i = 0; i < COUNT(TOP_NAMES); i++)
        if (!strcmp(from, to_hf ? TOP_NAMES[i].gguf : TOP_NAMES[i].hf)) {
            snprintf(buf, n, "%s", to_hf ? TOP_NAMES[i].hf : TOP_NAMES[i].gguf);
            return buf;
        }
    int layer, used = 0;
    if (sscanf(from, to_hf ? "blk.%d.%n" : "model.layers.%d.%n", &layer, &used) != 1 || !used)
        return NULL;
    for (size_t i = 0; i < COUNT(LAYER_NAMES); i++)
        if ((LAYER_NAMES[i].fams & F(f)) &&
            !strcmp(from + used, to_hf ? LAYER_NAMES[i].gguf : LAYER_NAMES[i].hf)) {
            snprintf(buf, n, to_hf ? "model.layers.%d.%s" : "blk.%d.%s", layer,
                     to_hf ? LAYER_NAMES[i].hf : LAYER_NAMES[i].gguf);
            return buf;
        }
    return NULL;
}

const char *hr_gguf_hf_name(const hr_gguf *g, const char *name, char *buf, size_t n) {
    const char *a;
    size_t alen;
    int ai = hr_gguf_key_str(g, "general.architecture", &a, &alen) ? -1
                                                                  : hr__gguf_arch_index(a, alen);
    return hr__gguf_map_name(name, true, ai < 0 ? FAM_LLAMA : hr__gguf_archs[ai].fam, buf, n);
}

static const struct { uint32_t ggml; hr_dtype dt; } TYPES[] = {
    {0, HR_DTYPE_F32}, {1, HR_DTYPE_F16}, {30, HR_DTYPE_BF16}, {8, HR_DTYPE_Q8_0},
    {2, HR_DTYPE_Q4_0}, {3, HR_DTYPE_Q4_1}, {12, HR_DTYPE_Q4_K}, {13, HR_DTYPE_Q5_K},
    {14, HR_DTYPE_Q6_K}, {39, HR_DTYPE_MXFP4},
};

int hr_gguf_dtype(uint32_t t) {
    for (size_t i = 0; i < COUNT(TYPES); i++)
        if (TYPES[i].ggml == t)
            return (int)TYPES[i].dt;
    return -1;
}

uint32_t hr__gguf_ggml_type(hr_dtype t) {
    for (size_t i = 0; i < COUNT(TYPES); i++)
        if (TYPES[i].dt == t)
            return TYPES[i].ggml;
    return 0;
}
