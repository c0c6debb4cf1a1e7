#!/usr/bin/env python3
"""Small GGUF seeds for tests/fuzz/corpus/fuzz_gguf_model: the metadata of
llama.cpp's qwen3next, glm4moe, granitemoe, granitehybrid and gemma4 files
(keys as convert_hf_to_gguf.py writes them) and a few tiny F32 tensors under
their names, so the fuzzer starts inside the readers of those architectures
(src/model/gguf_hybrid.c, src/model/gguf_gemma4.c). Python 3 stdlib only.

Usage: python3 tools/gguf_seeds.py [--out tests/fuzz/corpus/fuzz_gguf_model]
"""
import argparse
import os
import struct

U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = s(key) + struct.pack("<I", typ)
    if typ == U32:
        return out + struct.pack("<I", val)
    if typ == F32:
        return out + struct.pack("<f", val)
    if typ == BOOL:
        return out + struct.pack("<B", 1 if val else 0)
    if typ == STR:
        return out + s(val)
    if typ == ARR:  # of i32
        return out + struct.pack("<IQ", I32, len(val)) + b"".join(struct.pack("<i", v) for v in val)
    raise ValueError(typ)


def gguf(arch, keys, tensors):
    """keys: [(suffix, type, value)] under arch; tensors: [(name, dims (fastest first))]"""
    meta = [kv("general.architecture", STR, arch), kv("general.alignment", U32, 32)]
    meta += [kv(arch + "." + k, t, v) for k, t, v in keys]
    infos, data = b"", b""
    for name, dims in tensors:
        n = 1
        for d in dims:
            n *= d
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", 0, len(data))  # F32, offset
        data += b"".join(struct.pack("<f", ((i * 37) % 11 - 5) / 8.0) for i in range(n))
        data += b"\0" * (-len(data) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + infos
    return head + b"\0" * (-len(head) % 32) + data


COMMON = [("context_length", U32, 256), ("embedding_length", U32, 16), ("block_count", U32, 2),
          ("feed_forward_length", U32, 8), ("attention.head_count", U32, 2),
          ("attention.key_length", U32, 8), ("attention.value_length", U32, 8),
          ("attention.layer_norm_rms_epsilon", F32, 1e-6), ("expert_count", U32, 4),
          ("expert_used_count", U32, 2), ("expert_feed_forward_length", U32, 8)]

SEEDS = {
    "qwen3next": (COMMON + [("attention.head_count_kv", U32, 1), ("rope.dimension_count", U32, 4),
                            ("ssm.conv_kernel", U32, 4), ("ssm.state_size", U32, 8),
                            ("ssm.group_count", U32, 1), ("ssm.time_step_rank", U32, 2),
                            ("ssm.inner_size", U32, 16), ("full_attention_interval", U32, 2),
                            ("expert_shared_feed_forward_length", U32, 8)],
                  [("token_embd.weight", (16, 8)), ("blk.0.attn_qkv.weight", (16, 32)),
                   ("blk.0.attn_gate.weight", (16, 16)), ("blk.0.ssm_a", (2,)),
                   ("blk.0.ssm_conv1d.weight", (4, 32)), ("blk.0.ffn_gate_inp.weight", (16, 4)),
                   ("blk.1.ffn_gate_inp.weight", (16, 4))]),
    "glm4moe": (COMMON + [("attention.head_count_kv", U32, 1), ("rope.dimension_count", U32, 4),
                          ("expert_shared_count", U32, 1), ("leading_dense_block_count", U32, 1),
                          ("expert_gating_func", U32, 2), ("expert_weights_scale", F32, 2.5),
                          ("expert_weights_norm", BOOL, True), ("nextn_predict_layers", U32, 1)],
                [("token_embd.weight", (16, 8)), ("blk.1.ffn_gate_inp.weight", (16, 4)),
                 ("blk.1.exp_probs_b.bias", (4,))]),
    "granitemoe": (COMMON + [("attention.head_count_kv", U32, 1), ("attention.scale", F32, 0.2),
                             ("embedding_scale", F32, 2.5), ("residual_scale", F32, 0.6),
                             ("logit_scale", F32, 0.8)],
                   [("token_embd.weight", (16, 8)), ("blk.0.ffn_gate_exps.weight", (16, 8, 4)),
                    ("blk.0.ffn_gate_inp.weight", (16, 4)), ("blk.1.ffn_gate_inp.weight", (16, 4))]),
    "granitehybrid": (COMMON + [("attention.head_count_kv", ARR, [0, 1]),
                                ("rope.scaling.finetuned", BOOL, False), ("ssm.conv_kernel", U32, 4),
                                ("ssm.state_size", U32, 8), ("ssm.group_count", U32, 1),
                                ("ssm.time_step_rank", U32, 4), ("ssm.inner_size", U32, 32),
                                ("expert_shared_feed_forward_length", U32, 8),
                                ("attention.scale", F32, 0.2)],
                      [("token_embd.weight", (16, 8)), ("blk.0.ssm_a", (1, 4)), ("blk.0.ssm_d", (1, 4)),
                       ("blk.0.ssm_norm.weight", (32, 1)), ("blk.0.ssm_conv1d.weight", (4, 48)),
                       ("blk.0.ffn_gate_inp.weight", (16, 4)), ("blk.1.ffn_gate_inp.weight", (16, 4))]),
    "gemma4": (COMMON + [("attention.head_count_kv", ARR, [1, 1]), ("attention.key_length_swa", U32, 8),
                         ("attention.value_length_swa", U32, 8),
                         ("attention.sliding_window_pattern", ARR, [1, 0]),
                         ("attention.sliding_window", U32, 4), ("rope.freq_base_swa", F32, 1e4),
                         ("attention.shared_kv_layers", U32, 0),
                         ("embedding_length_per_layer_input", U32, 0),
                         ("final_logit_softcapping", F32, 0.0)],
               [("token_embd.weight", (16, 8)), ("blk.0.ffn_gate_inp.weight", (16, 4)),
                ("blk.0.ffn_gate_inp.scale", (16,)), ("blk.0.ffn_gate_up_exps.weight", (16, 16, 4)),
                ("blk.0.ffn_down_exps.scale", (4,)), ("blk.0.layer_output_scale.weight", (1,)),
                ("blk.1.ffn_gate_inp.weight", (16, 4))]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                  "tests", "fuzz", "corpus", "fuzz_gguf_model"))
    out = ap.parse_args().out
    for arch, (keys, tensors) in SEEDS.items():
        p = os.path.join(out, "tiny-%s.gguf" % arch)
        with open(p, "wb") as f:
            f.write(gguf(arch, keys, tensors))
        print(p)


if __name__ == "__main__":
    main()
