#!/usr/bin/python3
"""The Qwen2-Audio encoder and projector computed with torch ops as
transformers' Qwen2AudioEncoder / Qwen2AudioForConditionalGeneration run
them (not transformers' modules: it is not installed here; torch 1.13 from
Debian, float32), for test_audio until tools/refgen/audio_qwen2.py's real
fixture exists. What it checks in hearth is the arithmetic and the shortcut
hearth takes: transformers runs all 3000 mel frames through the convs and
every layer with the frames past the clip masked as keys (-inf), then keeps
the first ((frames - 1) // 2 + 1 - 2) // 2 + 1 pooled rows; hearth computes
only the clip's frames.

Steps (modeling_qwen2_audio.py, transformers 5.17): gelu(conv1(mel)) (kernel
3, padding 1), gelu(conv2(.)) (kernel 3, stride 2, padding 1), + the
position table; per layer: x + out_proj(attn(self_attn_layer_norm(x))) with
q scaled by head_dim^-0.5 before q.k^T, k_proj without bias, the padding
mask added to the scores; then x + fc2(gelu(fc1(final_layer_norm(x))));
avg_pool1d(2, 2) over time, layer_norm, then multi_modal_projector.linear.

The weights: the random model tests/e2e/lib/qwen2_audio.py makes (16 mels,
width 16, 2 layers), read from its audio.safetensors by hand. The mel
input: the model's 16-mel features of one clip of 0.77 s (hearth's
media/mel.c output is not used: a numpy Whisper log-mel of the clip, as
tools/refgen/audio_mel.py's numpy path).

  /usr/bin/python3 tools/refgen/audio_encoder.py --out tests/fixtures/audio/encoder

Writes config.json and audio.safetensors (the model's), mel.f32 (16 x 3000),
hidden.f32 (tokens x 16), features.f32 (tokens x 64), ref.json.
"""
import argparse, json, os, shutil, struct, sys, tempfile

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "../../tests/e2e/lib"))
import qwen2_audio  # noqa: E402
from audio_mel import mel_filter_bank, np_path  # noqa: E402


def read_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=torch.float32).reshape(v["shape"])
    return out


def encode(W, ac, mel, frames):
    """(last_hidden_state rows, projector rows, tokens) of mel (n_mels, 3000) with `frames` valid"""
    D, H = ac["d_model"], ac["encoder_attention_heads"]
    T = "audio_tower."
    with torch.no_grad():
        f = torch.from_numpy(mel)[None]
        h = torch.nn.functional.gelu(torch.nn.functional.conv1d(f, W[T + "conv1.weight"], W[T + "conv1.bias"], padding=1))
        h = torch.nn.functional.gelu(torch.nn.functional.conv1d(h, W[T + "conv2.weight"], W[T + "conv2.bias"], stride=2, padding=1))
        h = h.permute(0, 2, 1) + W[T + "embed_positions.weight"]
        n = h.shape[1]
        feat_len = (frames - 1) // 2 + 1
        mask = torch.zeros(1, 1, n, n)
        mask[..., feat_len:] = float("-inf")
        hd = D // H
        for l in range(ac["encoder_layers"]):
            P = f"{T}layers.{l}."
            ln = lambda t, k: torch.nn.functional.layer_norm(t, (D,), W[P + k + ".weight"], W[P + k + ".bias"])
            lin = lambda t, k, bias=True: torch.nn.functional.linear(t, W[P + k + ".weight"], W[P + k + ".bias"] if bias else None)
            r = h
            t = ln(h, "self_attn_layer_norm")
            q = (lin(t, "self_attn.q_proj") * hd ** -0.5).view(1, n, H, hd).transpose(1, 2)
            k = lin(t, "self_attn.k_proj", False).view(1, n, H, hd).transpose(1, 2)
            v = lin(t, "self_attn.v_proj").view(1, n, H, hd).transpose(1, 2)
            w = torch.softmax(q @ k.transpose(2, 3) + mask, dim=-1)
            o = (w @ v).transpose(1, 2).reshape(1, n, D)
            h = r + lin(o, "self_attn.out_proj")
            r = h
            t = torch.nn.functional.gelu(lin(ln(h, "final_layer_norm"), "fc1"))
            h = r + lin(t, "fc2")
        h = torch.nn.functional.avg_pool1d(h.permute(0, 2, 1), 2, 2).permute(0, 2, 1)
        h = torch.nn.functional.layer_norm(h, (D,), W[T + "layer_norm.weight"], W[T + "layer_norm.bias"])
        p = torch.nn.functional.linear(h, W["multi_modal_projector.linear.weight"], W["multi_modal_projector.linear.bias"])
    tokens = (feat_len - 2) // 2 + 1
    return h, p, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    root = os.path.join(here, "../..")
    tmp = tempfile.mkdtemp()
    qwen2_audio.model(root, tmp)
    os.makedirs(a.out, exist_ok=True)
    for f in ("config.json", "audio.safetensors"):
        shutil.copy(os.path.join(tmp, f), os.path.join(a.out, f))
    cfg = json.load(open(os.path.join(a.out, "config.json")))
    ac = cfg["audio_config"]
    M = ac["num_mel_bins"]
    W = read_safetensors(os.path.join(a.out, "audio.safetensors"))
    x = np.array([v[0] for v in qwen2_audio.clip(0.77, 16000, 1, 12)], np.float32)
    padded = np.zeros(480000, np.float32)
    padded[:len(x)] = x
    mel = np_path(padded, mel_filter_bank(M))  # (M, 3000)
    frames = -(-len(x) // 160)
    mel.astype("<f4").tofile(os.path.join(a.out, "mel.f32"))
    h, p, tokens = encode(W, ac, mel, frames)
    h[0, :tokens].numpy().astype("<f4").tofile(os.path.join(a.out, "hidden.f32"))
    p[0, :tokens].numpy().astype("<f4").tofile(os.path.join(a.out, "features.f32"))
    json.dump({"torch": torch.__version__, "frames": frames, "tokens": tokens, "d": ac["d_model"], "d_text": p.shape[-1],
               "n_mels": M}, open(os.path.join(a.out, "ref.json"), "w"), indent=1)
    shutil.rmtree(tmp)
    print("frames", frames, "tokens", tokens)


if __name__ == "__main__":
    main()
