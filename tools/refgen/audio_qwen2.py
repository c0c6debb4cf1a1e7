#!/usr/bin/env python3
"""Reference for hearth's Qwen2-Audio path: a tiny random-weight
Qwen2AudioForConditionalGeneration (transformers 5.17, eager, float32, CPU),
two short WAV clips, and what transformers computes from them:

  mel_np / mel_pt   WhisperFeatureExtractor's log-mel features of each clip
                    as Qwen2AudioProcessor asks for them (padding
                    "max_length", return_attention_mask=True): mel_pt is what
                    the extractor's __call__ returns on this machine (its
                    torch path, since torch is installed), mel_np what its
                    numpy path (_np_extract_fbank_features) gives on the same
                    padded samples. Stored for the first `stored` frames
                    (the clip's frames and 4 more); every later frame of both
                    is the one value `pad_value` (checked here).
  frames            the attention mask's count (feature_attention_mask.sum())
  audio_hidden      the audio tower's last_hidden_state rows for the clip's
                    tokens (a forward hook on the Qwen2AudioEncoder during
                    the full model's forward), (tokens, d_model)
  audio_features    the projector's rows for them (a hook on the
                    Qwen2AudioMultiModalProjector), (tokens, text hidden)
  greedy            the full model over a prompt with both clips placed as
                    the processor places them (<|audio_bos|>, <|AUDIO|> x
                    ((frames - 1) // 2 + 1 - 2) // 2 + 1, <|audio_eos|>),
                    input_features = mel_pt, then 8 greedy tokens (a full
                    forward each step, no cache), logprobs and top-2 margins.

The clips' samples are decoded from the WAV files as test_wav's reference
decodes them (tools/refgen/audio_wav.py: the stdlib wave module, soundfile's
scaling, channels averaged); the WAVs come from tests/e2e/lib/qwen2_audio.py
(clip 0: 0.40 s mono 16-bit, clip 1: 0.93 s stereo 24-bit, both 16 kHz).

The tiny model: 128 mel bins (the processor's), audio d_model 32, 2 layers,
2 heads, ffn 64, max_source_positions 1500 (a 30 s window); a qwen2 text
model of vocab 512, hidden 64, 2 layers, 4 heads, 2 kv heads. Token ids
audio 371, audio_bos 372, audio_eos 373 (the e2e tokenizer's). Every weight
is re-drawn from torch.Generator().manual_seed(zlib.crc32(name)): matrices
N(0, 0.15^2), biases 0.1 N, norm weights 1 + 0.2 N, embed_tokens 0.3 N,
lm_head 0.2 N; embed_positions Whisper's sinusoids.

Writes DIR/model/ (save_pretrained + the feature extractor's
preprocessor_config.json), DIR/clip0.wav, DIR/clip1.wav, DIR/ref.json and
DIR/*.f32 (raw little-endian float32, shapes in ref.json). About 400 KB.

Usage (GPU machine, from the worktree root):
  python3 tools/refgen/audio_qwen2.py --out tests/fixtures/audio/qwen2_audio
"""
import argparse
import json
import math
import os
import sys
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "../../tests/e2e/lib"))
from audio_wav import decode_ints  # noqa: E402  (tools/refgen/audio_wav.py)
from qwen2_audio import clip, wav_bytes  # noqa: E402  (tests/e2e/lib/qwen2_audio.py)

AUDIO, BOS, EOS = 371, 372, 373
N_MELS, D, LAYERS, HEADS, FFN, POS = 128, 32, 2, 2, 64, 1500
N_GEN = 8
CLIPS = ((0.40, 1, 16, 5), (0.93, 2, 24, 6))  # seconds, channels, bits, seed


def write_f32(path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32), dtype="<f4")
    a.tofile(path)
    return list(a.shape)


def sinusoids(length, channels):
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2, dtype=torch.float64))
    t = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1).float()


def reinit(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            n = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "embed_positions" in name:
                p.copy_(sinusoids(*p.shape))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * n)
            elif name.endswith("bias"):
                p.copy_(0.1 * n)
            elif "embed_tokens" in name:
                p.copy_(0.3 * n)
            elif "lm_head" in name:
                p.copy_(0.2 * n)
            else:
                p.copy_(0.15 * n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "model"), exist_ok=True)
    torch.manual_seed(0)
    text = dict(model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1,
                eos_token_id=2, pad_token_id=None)
    audio = dict(model_type="qwen2_audio_encoder", num_mel_bins=N_MELS, d_model=D, encoder_layers=LAYERS,
                 encoder_attention_heads=HEADS, encoder_ffn_dim=FFN, max_source_positions=POS,
                 activation_function="gelu", scale_embedding=False)
    cfg = transformers.Qwen2AudioConfig(audio_config=audio, text_config=text, audio_token_index=AUDIO)
    if hasattr(cfg, "audio_token_id"):
        cfg.audio_token_id = AUDIO
    cls = transformers.Qwen2AudioForConditionalGeneration
    try:
        model = cls._from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    except TypeError:
        model = cls._from_config(cfg, attn_implementation="eager")
    model = model.float().eval()
    reinit(model)
    model.save_pretrained(os.path.join(a.out, "model"), safe_serialization=True)
    fe = transformers.WhisperFeatureExtractor(feature_size=N_MELS, sampling_rate=16000, hop_length=160,
                                              chunk_length=30, n_fft=400, padding_value=0.0,
                                              return_attention_mask=True)
    fe.save_pretrained(os.path.join(a.out, "model"))

    ref = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "feature_extractor_class": type(fe).__name__, "audio_token": AUDIO, "clips": []}
    feats, masks, tokens = [], [], []
    for i, (sec, ch, bits, seed) in enumerate(CLIPS):
        data = wav_bytes(clip(sec, 16000, ch, seed), 16000, bits)
        open(os.path.join(a.out, f"clip{i}.wav"), "wb").write(data)
        samples = np.array(decode_ints(data[44:], bits, ch), dtype=np.float32)
        out = fe(samples, sampling_rate=16000, return_attention_mask=True, padding="max_length",
                 return_tensors="np")
        mel_pt = out["input_features"][0]
        mask = out["attention_mask"][0]
        padded = np.zeros((1, fe.n_samples), np.float32)
        padded[0, :len(samples)] = samples
        mel_np = fe._np_extract_fbank_features(padded, "cpu")[0]
        frames = int(mask.sum())
        stored = frames + 4
        for m in (mel_np, mel_pt):
            tail = m[:, stored:]
            assert (tail == tail.flat[0]).all(), "padding frames differ"
        tok = ((frames - 1) // 2 + 1 - 2) // 2 + 1
        c = {"file": f"clip{i}.wav", "samples": len(samples), "channels": ch, "bits": bits,
             "frames": frames, "tokens": tok, "stored": stored,
             "pad_value_np": float(mel_np[0, -1]), "pad_value_pt": float(mel_pt[0, -1]),
             "mel_np": {"file": f"mel_np{i}.f32", "shape": write_f32(os.path.join(a.out, f"mel_np{i}.f32"),
                                                                  mel_np[:, :stored])},
             "mel_pt": {"file": f"mel_pt{i}.f32", "shape": write_f32(os.path.join(a.out, f"mel_pt{i}.f32"),
                                                                  mel_pt[:, :stored])},
             "np_vs_pt_max_abs": float(np.abs(mel_np - mel_pt).max())}
        ref["clips"].append(c)
        feats.append(torch.from_numpy(mel_pt))
        masks.append(torch.from_numpy(mask.astype(np.int64)))
        tokens.append(tok)

    # the prompt: text, clip 0, text, clip 1, text (as the chat template and processor place them)
    def run(ids):
        return model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                     input_features=torch.stack(feats), feature_attention_mask=torch.stack(masks))

    prompt = [5, 17, 99, BOS] + [AUDIO] * tokens[0] + [EOS, 10, 42, 7, BOS] + [AUDIO] * tokens[1] + [EOS, 13, 200]
    hooked = {}

    def hook(name):
        def f(mod, inp, out):
            t = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
            hooked[name] = t.detach()
        return f

    hs = []
    for name, mod in model.named_modules():
        k = type(mod).__name__
        if k == "Qwen2AudioEncoder" and "enc" not in hooked:
            hs.append(mod.register_forward_hook(hook("enc")))
        if k == "Qwen2AudioMultiModalProjector":
            hs.append(mod.register_forward_hook(hook("proj")))
    greedy, ids = [], list(prompt)
    with torch.no_grad():
        for s in range(N_GEN):
            logits = run(ids).logits[0, -1].double()
            if s == 0:
                for h in hs:
                    h.remove()
            lp = torch.log_softmax(logits, -1)
            top = torch.topk(logits, 2)
            t = int(top.indices[0])
            greedy.append({"token": t, "logprob": float(lp[t]), "margin": float(top.values[0] - top.values[1])})
            ids.append(t)
    for i, c in enumerate(ref["clips"]):
        n = c["tokens"]
        c["audio_hidden"] = {"file": f"hidden{i}.f32",
                             "shape": write_f32(os.path.join(a.out, f"hidden{i}.f32"), hooked["enc"][i, :n].numpy())}
        c["audio_features"] = {"file": f"features{i}.f32",
                               "shape": write_f32(os.path.join(a.out, f"features{i}.f32"), hooked["proj"][i, :n].numpy())}
    ref["prompt"] = prompt
    ref["greedy"] = greedy
    json.dump(ref, open(os.path.join(a.out, "ref.json"), "w"), indent=1)
    print("wrote", a.out, "greedy", [g["token"] for g in greedy])


if __name__ == "__main__":
    main()
