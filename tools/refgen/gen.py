#!/usr/bin/env python3
"""Reference generator for hearth's dense-architecture parity fixtures.

For every case below it builds a tiny random-weight model with transformers'
own config class and *ForCausalLM class (eager attention, float32, CPU),
re-initialises EVERY parameter from a generator seeded with
zlib.crc32(case name), saves it with save_pretrained (safetensors), reloads it
from disk (so the reference is what a loader of the saved directory gets) and
records greedy generations as ref.json.

Greedy decoding is a manual loop of FULL forward passes over the whole
sequence (no KV cache), argmax of the last position's float32 logits, no EOS
stop.  logprobs = log_softmax in float64 of the float32 logits.

Needs torch + transformers (run it on the accelerator machine; see README.md).
Usage: python3 tools/refgen/gen.py [--out DIR] [--only NAME,NAME...]
"""

import argparse
import copy
import json
import os
import random
import statistics
import sys
import time
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

N_GEN = 16
PROMPT_LENS = (5, 23, 61)
TOPK = 10

# Shared tiny shape.
BASE = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=4096,
    # Several configs default to special-token ids beyond a 512 vocab (phi3 pad 32000,
    # smollm3 pad 128004, ...): an out-of-range padding_idx breaks nn.Embedding.
    pad_token_id=None,
    bos_token_id=1,
    eos_token_id=2,
)

# Gemma-family RMSNorm computes x * (1 + w): neutral value of w is 0.
ZERO_CENTERED_NORM = {"gemma", "gemma2", "gemma3_text", "qwen3_next"}
# Small embeddings (see randomize) beyond the set above: Gemma-4 also scales them by
# sqrt(hidden) and ties lm_head, but its norms multiply by w itself.
SMALL_EMBED = {"gemma4_text"}


def rope(rope_type="default", theta=10000.0, **kw):
    d = {"rope_type": rope_type, "rope_theta": float(theta)}
    d.update(kw)
    return d


def case(name, config_cls, model_cls, quirks, base=None, bf16=False, drop=(), **cfg):
    kw = dict(BASE)
    for k in drop:
        kw.pop(k, None)
    kw.update(cfg)
    return dict(name=name, config_cls=config_cls, model_cls=model_cls, cfg=kw,
                quirks=quirks, base=base or name, bf16=bf16)


LONGROPE_SHORT = [1.0, 1.02, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4]
LONGROPE_LONG = [1.0, 1.25, 1.7, 2.4, 3.3, 4.5, 6.0, 8.0]

CASES = [
    case("llama", "LlamaConfig", "LlamaForCausalLM",
         "baseline: RMSNorm, SwiGLU, GQA 4q/2kv, untied lm_head",
         tie_word_embeddings=False, rope_parameters=rope(theta=10000.0)),
    case("llama-tied", "LlamaConfig", "LlamaForCausalLM",
         "tied embeddings (no lm_head.weight in the file)",
         tie_word_embeddings=True, rope_parameters=rope(theta=10000.0)),
    case("mistral", "MistralConfig", "MistralForCausalLM",
         "model_type mistral, sliding_window=None",
         sliding_window=None, tie_word_embeddings=False,
         rope_parameters=rope(theta=10000.0)),
    case("qwen2", "Qwen2Config", "Qwen2ForCausalLM",
         "q/k/v projections have biases (o_proj none)",
         drop=("head_dim",), tie_word_embeddings=False, use_sliding_window=False,
         rope_parameters=rope(theta=1000000.0)),
    case("qwen3", "Qwen3Config", "Qwen3ForCausalLM",
         "per-head q_norm/k_norm RMSNorm before RoPE; tied embeddings",
         tie_word_embeddings=True, use_sliding_window=False,
         rope_parameters=rope(theta=1000000.0)),
    case("gemma", "GemmaConfig", "GemmaForCausalLM",
         "(1+w) RMSNorm, embeddings scaled by sqrt(hidden), GeGLU (gelu tanh), tied",
         hidden_activation="gelu_pytorch_tanh", rope_parameters=rope(theta=10000.0)),
    case("gemma2", "Gemma2Config", "Gemma2ForCausalLM",
         "(1+w) norms incl. post-attn/post-ffw norms, alternating sliding(16)/full layers, "
         "attn softcap 3.0, final logit softcap 2.0, query_pre_attn_scalar 8 (scale 8^-0.5, not head_dim^-0.5)",
         sliding_window=16, attn_logit_softcapping=3.0, final_logit_softcapping=2.0,
         query_pre_attn_scalar=8, rope_parameters=rope(theta=10000.0)),
    case("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM",
         "(1+w) norms incl. q/k norms, layer_types [sliding, sliding, full], sliding_window 16, "
         "local rope theta 10000 vs global 1e6, query_pre_attn_scalar 8",
         sliding_window=16,
         layer_types=["sliding_attention", "sliding_attention", "full_attention"],
         query_pre_attn_scalar=8,
         rope_parameters={"sliding_attention": rope(theta=10000.0),
                          "full_attention": rope(theta=1000000.0)}),
    case("phi3", "Phi3Config", "Phi3ForCausalLM",
         "fused qkv_proj and gate_up_proj",
         drop=("head_dim",), tie_word_embeddings=False,
         original_max_position_embeddings=4096, rope_parameters=rope(theta=10000.0)),
    case("phi3-longrope", "Phi3Config", "Phi3ForCausalLM",
         "longrope: short_factor while seq_len <= 32 (original_max_position_embeddings), long_factor "
         "(for the WHOLE sequence) once seq_len > 32; attention_factor "
         "sqrt(1+ln(128/32)/ln(32)) scales cos/sin; max_position_embeddings 128",
         drop=("head_dim",), tie_word_embeddings=False, max_position_embeddings=128,
         original_max_position_embeddings=32,
         rope_parameters=rope("longrope", theta=10000.0, short_factor=LONGROPE_SHORT,
                              long_factor=LONGROPE_LONG)),
    case("olmo2", "Olmo2Config", "Olmo2ForCausalLM",
         "post-norms (norm applied to attn/MLP output before the residual add), q_norm/k_norm over the "
         "full projection width (before head split)",
         drop=("head_dim",), tie_word_embeddings=False, rope_parameters=rope(theta=500000.0)),
    case("granite", "GraniteConfig", "GraniteForCausalLM",
         "embedding_multiplier 2.5, residual_multiplier 0.6, attention_multiplier 0.2 (replaces "
         "head_dim^-0.5), logits divided by logits_scaling 0.8",
         drop=("head_dim",), tie_word_embeddings=False, embedding_multiplier=2.5,
         residual_multiplier=0.6, attention_multiplier=0.2, logits_scaling=0.8,
         rope_parameters=rope(theta=10000.0)),
    case("smollm3", "SmolLM3Config", "SmolLM3ForCausalLM",
         "no_rope_layers [1, 0, 1]: layer 1 is NoPE; tied",
         drop=("head_dim",), no_rope_layers=[1, 0, 1], tie_word_embeddings=True,
         rope_parameters=rope(theta=2000000.0)),
    case("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM",
         "LayerNorm with bias, biases on every linear, GELU(tanh) c_fc/c_proj MLP (no gate), tied",
         drop=("head_dim",), use_bias=True, hidden_act="gelu_pytorch_tanh", sliding_window=None,
         tie_word_embeddings=True, rope_parameters=rope(theta=10000.0)),
    case("glm4", "Glm4Config", "Glm4ForCausalLM",
         "partial_rotary_factor 0.5 (interleaved rotary on first half of head_dim), fused gate_up_proj, "
         "qkv bias, extra post_self_attn/post_mlp norms",
         tie_word_embeddings=False, attention_bias=True,
         rope_parameters=rope(theta=10000.0, partial_rotary_factor=0.5)),
    case("llama-rope-linear", "LlamaConfig", "LlamaForCausalLM",
         "rope linear factor 4 (inv_freq / 4)",
         tie_word_embeddings=False, rope_parameters=rope("linear", theta=10000.0, factor=4.0)),
    case("llama-rope-dynamic", "LlamaConfig", "LlamaForCausalLM",
         "dynamic NTK factor 4, max_position_embeddings 32: for seq_len L > 32 the whole sequence uses "
         "base*((4*L/32)-3)^(d/(d-2)), L = current total length (full re-forward each step)",
         tie_word_embeddings=False, max_position_embeddings=32,
         rope_parameters=rope("dynamic", theta=10000.0, factor=4.0)),
    case("llama-rope-llama3", "LlamaConfig", "LlamaForCausalLM",
         "llama3 rope: factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 32 "
         "(all three frequency bands present at head_dim 16)",
         tie_word_embeddings=False,
         rope_parameters=rope("llama3", theta=10000.0, factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=32)),
    case("llama-rope-yarn", "LlamaConfig", "LlamaForCausalLM",
         "yarn factor 4, original_max_position_embeddings 32, max_position_embeddings 128, "
         "attention_factor 0.1*ln(4)+1 on cos/sin",
         tie_word_embeddings=False, max_position_embeddings=128,
         rope_parameters=rope("yarn", theta=10000.0, factor=4.0,
                              original_max_position_embeddings=32)),
    # Mixture-of-experts and hybrid families (wave 2).
    case("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
         "8 experts top-2 of softmax, renormalised (norm_topk_prob), moe_intermediate 32, "
         "layer 1 dense (mlp_only_layers [1], intermediate 128), q/k norms",
         tie_word_embeddings=False, use_sliding_window=False, num_experts=8,
         num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
         decoder_sparse_step=1, mlp_only_layers=[1], rope_parameters=rope(theta=1000000.0)),
    case("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
         "8 experts top-2 of softmax, NOT renormalised, shared expert (intermediate 64) scaled by "
         "sigmoid(shared_expert_gate), q/k/v biases",
         drop=("head_dim",), tie_word_embeddings=False, use_sliding_window=False, num_experts=8,
         num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
         norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
         rope_parameters=rope(theta=1000000.0)),
    case("mixtral", "MixtralConfig", "MixtralForCausalLM",
         "4 local experts top-2 of softmax, renormalised over the top-k, expert intermediate 64",
         num_local_experts=4, num_experts_per_tok=2, intermediate_size=64, sliding_window=None,
         tie_word_embeddings=False, rope_parameters=rope(theta=1000000.0)),
    case("olmoe", "OlmoeConfig", "OlmoeForCausalLM",
         "8 experts top-2 of softmax, not renormalised, q/k norms over the full projection width",
         drop=("head_dim",), num_experts=8, num_experts_per_tok=2, intermediate_size=32,
         norm_topk_prob=False, tie_word_embeddings=False, rope_parameters=rope(theta=10000.0)),
    case("gpt_oss", "GptOssConfig", "GptOssForCausalLM",
         "4 experts top-2 (softmax over the top-k router logits, router bias), experts with biases "
         "and the clamped swiglu (alpha 1.702, limit 7), attention sinks, q/k/v/o biases, "
         "layer_types sliding(16)/full/sliding, yarn rope factor 4 over 32",
         num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, sliding_window=16,
         layer_types=["sliding_attention", "full_attention", "sliding_attention"],
         attention_bias=True, tie_word_embeddings=False,
         rope_parameters=rope("yarn", theta=150000.0, factor=4.0, original_max_position_embeddings=32,
                              beta_fast=32.0, beta_slow=1.0, truncate=False)),
    case("qwen3_next", "Qwen3NextConfig", "Qwen3NextForCausalLM",
         "hybrid: layers 0,1 gated DeltaNet (conv 4, 2 key heads x16, 4 value heads x16, gated "
         "RMSNorm), layer 2 gated full attention (q proj doubled into query+gate, q/k norms, "
         "partial rotary 0.25); every layer MoE 8 experts top-2 renormalised + sigmoid-gated shared "
         "expert; (1+w) RMSNorms",
         tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
         shared_expert_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
         norm_topk_prob=True,
         layer_types=["linear_attention", "linear_attention", "full_attention"],
         linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
         linear_value_head_dim=16, linear_conv_kernel_dim=4,
         rope_parameters=rope(theta=10000.0, partial_rotary_factor=0.25)),
    # Wave 3: further MoE families and a Mamba-2 hybrid.
    case("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM",
         "DeepSeek-V3 router: sigmoid scores + e_score_correction_bias (random, a buffer) for the "
         "choice only, 8 routed experts in n_group 2 / topk_group 1, top-2, renormalised, "
         "routed_scaling_factor 2.5, 1 shared expert (moe_intermediate 32); layer 0 dense "
         "(first_k_dense_replace 1, intermediate 128); partial rotary 0.5 NOT interleaved "
         "(gpt-neox rotate_half), q/k/v bias, per-head q/k norms",
         tie_word_embeddings=False, attention_bias=True, use_qk_norm=True,
         moe_intermediate_size=32, num_experts_per_tok=2, n_shared_experts=1, n_routed_experts=8,
         routed_scaling_factor=2.5, n_group=2, topk_group=1, first_k_dense_replace=1,
         norm_topk_prob=True, partial_rotary_factor=0.5,
         rope_parameters=rope(theta=10000.0, partial_rotary_factor=0.5)),
    case("granitemoe", "GraniteMoeConfig", "GraniteMoeForCausalLM",
         "4 experts top-2 (softmax over the top-k router logits), experts as fused input_linear "
         "[E, 2I, H] (silu(first half) * second half) and output_linear [E, H, I], intermediate "
         "32; granite multipliers: embedding 2.5, residual 0.6, attention 0.2 (the scale), "
         "logits / 0.8",
         drop=("head_dim",), tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2,
         intermediate_size=32, embedding_multiplier=2.5, residual_multiplier=0.6,
         attention_multiplier=0.2, logits_scaling=0.8, rope_parameters=rope(theta=10000.0)),
    case("granitemoehybrid", "GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
         "Granite 4.0-H shape: layer_types [mamba, attention, mamba]; Mamba-2 mixer: in_proj -> "
         "gate(128) | xBC(128+2*16) | dt(8 heads), causal depthwise conv1d (4, bias) + silu, "
         "dt=softplus(dt+dt_bias), A=-exp(A_log), 8 heads x head_dim 16, d_state 16, 1 group, D "
         "skip, gated RMSNorm (y*silu(gate)) over the 128 wide output; mamba_chunk_size 16 (the "
         "61-token prompt spans 4 chunks); attention without positions (nope), scale "
         "attention_multiplier; MoE 4 experts top-2 + shared MLP (64); granite multipliers",
         drop=("head_dim",), tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2,
         intermediate_size=32, shared_intermediate_size=64, embedding_multiplier=2.5,
         residual_multiplier=0.6, attention_multiplier=0.2, logits_scaling=0.8,
         position_embedding_type="nope", layer_types=["mamba", "attention", "mamba"],
         mamba_n_heads=8, mamba_n_groups=1, mamba_d_state=16, mamba_d_head=16, mamba_d_conv=4,
         mamba_expand=2, mamba_chunk_size=16, mamba_conv_bias=True, mamba_proj_bias=False,
         rope_parameters=rope(theta=10000.0)),
    # Gemma-4's MoE (issue 31): the text model of Gemma4ForConditionalGeneration as
    # transformers 5.17 builds it alone.  Field names as llama.cpp's converter reads them
    # (num_experts / num_local_experts, top_k_experts, expert_intermediate_size /
    # moe_intermediate_size, enable_moe_block, global_head_dim, num_kv_shared_layers,
    # hidden_size_per_layer_input); aliases given together so that whichever the config
    # class takes is set.  REQUIRE_EXPERTS makes the case fail (listing the config's keys)
    # if the built model has no expert parameters, rather than save a dense model.
    case("gemma4_moe", "Gemma4TextConfig", "Gemma4ForCausalLM",
         "Gemma-4 MoE: sliding/full layers (window 16), 4 experts top-2 (expert width 32) beside "
         "the dense MLP, router scale / per-expert scale, global_head_dim 16, no KV sharing, no "
         "per-layer inputs, tanh GELU, tied embeddings",
         tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
         enable_moe_block=True, num_experts=4, num_local_experts=4, top_k_experts=2,
         num_experts_per_tok=2, expert_intermediate_size=32, moe_intermediate_size=32,
         global_head_dim=16, num_global_key_value_heads=2, num_kv_shared_layers=0,
         hidden_size_per_layer_input=0, sliding_window=16,
         layer_types=["sliding_attention", "sliding_attention", "full_attention"],
         rope_parameters={"full_attention": rope(theta=1000000.0),
                          "sliding_attention": rope(theta=10000.0)}),
]

# Cases that must build experts (see gemma4_moe above).
REQUIRE_EXPERTS = {"gemma4_moe"}

# Cases whose reference also records decoding with transformers' own cache (prefill of the
# prompt, then one token per step): for recurrent layers that is the step recurrence, while
# the full forward passes above use the chunked scan.  The log reports how far they differ.
CACHED_CHECK = {"qwen3_next", "granitemoehybrid"}

# bf16 variants: the same model as the base case (same seed, same prompts), every
# parameter rounded to bfloat16, saved as bfloat16; reference computed in float32
# from the rounded weights.
for _b in ("llama", "qwen3", "gemma3_text"):
    _c = copy.deepcopy(next(c for c in CASES if c["name"] == _b))
    _c["name"] = _b + "-bf16"
    _c["bf16"] = True
    _c["quirks"] = "bfloat16 safetensors of case " + _b
    CASES.append(_c)


# Diagnostics only (written to the --log file, not to the fixtures): rebuild the
# case with one quirk switched off, load the same weights, and report how much the
# last-position logits of the 61-token prompt move.  ~0 would mean the fixture does
# not exercise that quirk.
def _set(**kw):
    def f(cfg):
        cfg.update(copy.deepcopy(kw))
    return f


def _rope_set(**kw):
    def f(cfg):
        cfg["rope_parameters"].update(copy.deepcopy(kw))
    return f


def _gemma3_same_theta(cfg):
    cfg["rope_parameters"]["sliding_attention"]["rope_theta"] = \
        cfg["rope_parameters"]["full_attention"]["rope_theta"]


ABLATIONS = {
    "gemma2": [("no sliding window", _set(sliding_window=4096)),
               ("no attn softcap", _set(attn_logit_softcapping=None)),
               ("no final softcap", _set(final_logit_softcapping=None)),
               ("query_pre_attn_scalar=head_dim", _set(query_pre_attn_scalar=16))],
    "gemma3_text": [("no sliding window", _set(sliding_window=4096)),
                    ("local theta = global theta", _gemma3_same_theta)],
    "phi3-longrope": [("long_factor = short_factor", _rope_set(long_factor=LONGROPE_SHORT)),
                      ("default rope", _set(rope_parameters=rope(theta=10000.0),
                                            original_max_position_embeddings=4096,
                                            max_position_embeddings=4096))],
    "llama-rope-dynamic": [("default rope", _set(rope_parameters=rope(theta=10000.0)))],
    "llama-rope-linear": [("default rope", _set(rope_parameters=rope(theta=10000.0)))],
    "llama-rope-llama3": [("default rope", _set(rope_parameters=rope(theta=10000.0)))],
    "llama-rope-yarn": [("default rope", _set(rope_parameters=rope(theta=10000.0)))],
    "smollm3": [("rope on every layer", _set(no_rope_layers=[1, 1, 1]))],
    "glm4": [("full rotary", _rope_set(partial_rotary_factor=1.0))],
    "glm4_moe": [("n_group 1, topk_group 1", _set(n_group=1, topk_group=1)),
                 ("routed_scaling_factor 1", _set(routed_scaling_factor=1.0))],
    "granitemoehybrid": [("one chunk (mamba_chunk_size 256; ~0 expected)",
                          _set(mamba_chunk_size=256)),
                         ("residual_multiplier 1", _set(residual_multiplier=1.0))],
    "granite": [("embedding_multiplier 1", _set(embedding_multiplier=1.0)),
                ("residual_multiplier 1", _set(residual_multiplier=1.0)),
                ("attention_multiplier 0.25", _set(attention_multiplier=0.25)),
                ("logits_scaling 1", _set(logits_scaling=1.0))],
}


def ablate(torch, transformers, c, state, prompt, ref_logits, log):
    for label, fn in ABLATIONS.get(c["name"], []):
        try:
            kw = copy.deepcopy(c["cfg"])
            fn(kw)
            cfg = getattr(transformers, c["config_cls"])(**kw)
            m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
            m = m.to(torch.float32).eval()
            missing, unexpected = m.load_state_dict(state, strict=False)
            if unexpected or [k for k in missing if "inv_freq" not in k]:
                raise RuntimeError("state mismatch %s %s" % (missing, unexpected))
            with torch.no_grad():
                lg = m(input_ids=torch.tensor([prompt], dtype=torch.long), use_cache=False).logits[0, -1]
            log.write("   ablation %-34s max|dlogit| last pos = %.4g\n" % (
                label, float((lg - ref_logits).abs().max())))
        except Exception as e:
            log.write("   ablation %-34s ERROR %s: %s\n" % (label, type(e).__name__, e))


def seed_of(s):
    return zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF


def prompts_for(base):
    out = []
    for k, n in enumerate(PROMPT_LENS):
        rng = random.Random(seed_of("%s/prompt/%d" % (base, k)))
        out.append([rng.randrange(3, BASE["vocab_size"]) for _ in range(n)])
    return out


def randomize(torch, model, model_type, seed):
    """Re-init every parameter: matrices N(0, std), biases 0.1*N, norm weights around neutral."""
    g = torch.Generator().manual_seed(seed)
    zero_centered = model_type in ZERO_CENTERED_NORM
    seen = set()
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                v = 0.1 * r
            elif p.dim() == 1:
                # Qwen3-Next's gated RMSNorm in the DeltaNet layers multiplies by w itself.
                centered = zero_centered and "linear_attn.norm" not in name
                v = 0.2 * r if centered else 1.0 + 0.2 * r
            elif name.endswith("A_log"):
                # Mamba-2: A = -exp(A_log) ~ -0.37 and dt ~ softplus(-2) keep exp(dt*A) near
                # 0.95, so the state carries across the 16-token chunks instead of dying out.
                v = -1.0 + 0.2 * r
            elif name.endswith("dt_bias") and "mamba" in name:
                v = -2.0 + 0.2 * r
            elif "embed_tokens" in name:
                # Gemma multiplies embeddings by sqrt(hidden) (=8) and ties lm_head to them:
                # at 0.3 the scaled embedding dominates the residual stream and every
                # prompt degenerates into repeating its last token.  0.07*8 ~ 0.56.
                v = (0.07 if zero_centered or model_type in SMALL_EMBED else 0.3) * r
            elif "lm_head" in name:
                v = 0.2 * r
            else:
                v = 0.15 * r
            p.copy_(v)
            n += p.numel()
        # Persistent buffers that are weights in all but name (the DeepSeek-V3-style router's
        # score correction bias, saved in the checkpoint): random too, or they test nothing.
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g, dtype=torch.float32))
                n += b.numel()
            elif name.endswith("layer_scalar"):  # Gemma-4: multiplies each layer's output
                b.copy_(1.0 + 0.2 * torch.randn(b.shape, generator=g, dtype=torch.float32))
                n += b.numel()
    return n


def greedy(torch, model, prompt):
    ids = list(prompt)
    gen, steps = [], []
    for _ in range(N_GEN):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
        logits = out.logits[0, -1].to(torch.float32)
        lp = torch.log_softmax(logits.to(torch.float64), dim=-1)
        tv, ti = torch.topk(lp, TOPK)
        l2 = torch.topk(logits, 2).values.to(torch.float64)
        nxt = int(torch.argmax(logits))
        steps.append({
            "top": [[int(i), float(v)] for v, i in zip(tv.tolist(), ti.tolist())],
            "margin": float(l2[0] - l2[1]),
        })
        ids.append(nxt)
        gen.append(nxt)
    return gen, steps


def cached_check(torch, model, prompt, gen, ref_steps):
    """Greedy with transformers' cache: prefill the prompt, then one token per forward.

    Returns (tokens equal to the full-forward greedy, max |dlogprob| over the top entries).
    """
    import inspect
    kw = {}
    cache_cls = None
    mod = inspect.getmodule(type(model))
    for nm in ("HybridMambaAttentionDynamicCache", "Qwen3NextDynamicCache"):
        if hasattr(mod, nm):
            cache_cls = getattr(mod, nm)
    if cache_cls is not None:
        try:
            kw["past_key_values"] = cache_cls(model.config, 1, dtype=torch.float32, device="cpu")
        except TypeError:
            kw["past_key_values"] = cache_cls(config=model.config)
    ids = torch.tensor([prompt], dtype=torch.long)
    out_tokens, worst = [], 0.0
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **kw)
        for k in range(len(gen)):
            lp = torch.log_softmax(out.logits[0, -1].to(torch.float64), dim=-1)
            for i, v in ref_steps[k]["top"]:
                worst = max(worst, abs(float(lp[i]) - v))
            nxt = int(torch.argmax(out.logits[0, -1]))
            out_tokens.append(nxt)
            n = len(prompt) + k
            out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long),
                        past_key_values=out.past_key_values, use_cache=True,
                        cache_position=torch.tensor([n], dtype=torch.long))
    return out_tokens == gen, worst


def dir_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def run_case(torch, transformers, c, outdir, log):
    cfg_cls = getattr(transformers, c["config_cls"])
    mdl_cls = getattr(transformers, c["model_cls"])
    seed = seed_of(c["base"])
    torch.manual_seed(seed)
    config = cfg_cls(**copy.deepcopy(c["cfg"]))
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    if type(model) is not mdl_cls:
        raise RuntimeError("built %s, expected %s" % (type(model).__name__, c["model_cls"]))
    model = model.to(torch.float32).eval()
    if c["name"] in REQUIRE_EXPERTS and not any("expert" in n for n, _ in model.named_parameters()):
        raise RuntimeError("no expert parameters built; config keys: %s" %
                           sorted(config.to_dict().keys()))
    nparam = randomize(torch, model, config.model_type, seed)
    if c["bf16"]:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    prompts = prompts_for(c["base"])
    with torch.no_grad():
        check_in = torch.tensor([prompts[2]], dtype=torch.long)
        logits_built = model(input_ids=check_in, use_cache=False).logits[0].clone()
    state_built = {k: v.clone() for k, v in model.state_dict().items()}

    d = os.path.join(outdir, c["name"])
    os.makedirs(d, exist_ok=True)
    to_save = copy.deepcopy(model).to(torch.bfloat16) if c["bf16"] else model
    to_save.save_pretrained(d)  # transformers 5.x: always safetensors

    # Reference = what loading the saved directory gives.  A fresh load per prompt so
    # that stateful rotary embeddings (dynamic NTK caches inv_freq) start clean.
    def load():
        mm = mdl_cls.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
        if mm.config._attn_implementation != "eager":
            raise RuntimeError("reloaded attn_implementation is %r" % mm.config._attn_implementation)
        return mm

    m = load()
    sd = m.state_dict()
    for k, v in state_built.items():
        if k not in sd:
            if "inv_freq" in k or "embed_scale" in k:
                continue
            raise RuntimeError("reloaded model lacks " + k)
        if sd[k].dtype != torch.float32 or not torch.equal(sd[k], v.to(sd[k].dtype)):
            raise RuntimeError("reloaded tensor differs: " + k)
    with torch.no_grad():
        logits_re = m(input_ids=check_in, use_cache=False).logits[0]
    reload_diff = float((logits_re - logits_built).abs().max())

    cases = []
    margins = []
    for p in prompts:
        gen, steps = greedy(torch, load(), p)
        cases.append({"prompt_tokens": p, "greedy_tokens": gen, "steps": steps})
        margins += [s["margin"] for s in steps]
    cached = []
    if c["name"] in CACHED_CHECK:
        for p, cs in zip(prompts, cases):
            try:
                same, worst = cached_check(torch, load(), p, cs["greedy_tokens"], cs["steps"])
                cached.append("tokens %s max|dlogprob| %.3g" % ("equal" if same else "DIFFER", worst))
            except Exception as e:
                cached.append("ERROR %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    ref = {
        "case": c["name"],
        "arch": m.config.model_type,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": "bfloat16" if c["bf16"] else "float32",
        "cases": cases,
    }
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")

    cfg_json = json.load(open(os.path.join(d, "config.json")))
    log.write("== %s (%s, seed %d)\n" % (c["name"], c["model_cls"], seed))
    log.write("   quirks: %s\n" % c["quirks"])
    for k in ("rope_parameters", "layer_types", "sliding_window", "no_rope_layers",
              "partial_rotary_factor", "original_max_position_embeddings", "tie_word_embeddings",
              "dtype", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
              "position_embedding_type", "mamba_chunk_size", "n_group", "topk_group"):
        if k in cfg_json:
            log.write("   config.%s = %s\n" % (k, json.dumps(cfg_json[k])))
    log.write("   files: %s\n" % sorted(os.listdir(d)))
    log.write("   reload max|dlogit| = %.3g\n" % reload_diff)
    for k, line in enumerate(cached):
        log.write("   cached decoding vs full forward, prompt %d: %s\n" % (k, line))
    if not c["bf16"]:
        ablate(torch, transformers, c, state_built, prompts[2], logits_built[-1], log)
    return nparam, margins, dir_size(d), reload_diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="")
    args = ap.parse_args()

    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_default_dtype(torch.float32)

    only = set(x for x in args.only.split(",") if x)
    outdir = os.path.abspath(args.out)
    os.makedirs(outdir, exist_ok=True)
    log = open(args.log, "w") if args.log else open(os.devnull, "w")
    print("transformers %s torch %s -> %s" % (transformers.__version__, torch.__version__, outdir))
    failed = []
    t0 = time.time()
    for c in CASES:
        if only and c["name"] not in only:
            continue
        try:
            nparam, margins, size, rdiff = run_case(torch, transformers, c, outdir, log)
            flag = "" if rdiff == 0.0 else "  RELOAD-DIFF %.2g" % rdiff
            print("%-20s params %7d  median_margin %.4f  min_margin %.2e  %4d KiB%s" % (
                c["name"], nparam, statistics.median(margins), min(margins), size // 1024, flag))
        except Exception as e:  # record and continue with the next case
            msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            failed.append((c["name"], msg))
            print("%-20s FAILED %s" % (c["name"], msg[:300]))
            import traceback
            log.write("== %s FAILED\n%s\n" % (c["name"], traceback.format_exc()))
        log.flush()
    print("done in %.1fs; %d failed" % (time.time() - t0, len(failed)))
    log.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
