"""A random Qwen2-Audio made with the standard library only (no numpy, no
safetensors package: the safetensors file is written by hand), and WAV
clips for the audio tests.

  python3 qwen2_audio.py model ROOT OUT   the model directory OUT: the
      qwen2 fixture's text model (tests/fixtures/models/qwen2, symlinked) as
      text_config, a Whisper-style encoder of 16 mels, width 16, 2 layers,
      2 heads (audio.safetensors: audio_tower.*, multi_modal_projector.*),
      Qwen2-Audio's preprocessor_config.json with feature_size 16, the serve
      fixture's tokenizer with <|AUDIO|> (371), <|audio_bos|> (372) and
      <|audio_eos|> (373) added, and Qwen2-Audio-7B-Instruct's chat template.
  python3 qwen2_audio.py wav OUT SECONDS RATE CHANNELS BITS [float] [SEED]
      a clip: a few sines and noise, PCM integers (BITS 8, 16, 24, 32) or
      IEEE floats (float: BITS 32 or 64).
"""
import json, math, os, random, struct, sys


def safetensors(path, tensors):
    hdr, data = {}, bytearray()
    for name, shape, vals in tensors:
        b = struct.pack(f"<{len(vals)}f", *vals)
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def sinusoids(length, channels):  # Whisper's position table
    inc = math.log(10000) / (channels // 2 - 1)
    inv = [math.exp(-inc * i) for i in range(channels // 2)]
    out = []
    for t in range(length):
        out += [math.sin(t * v) for v in inv] + [math.cos(t * v) for v in inv]
    return out


TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and "
    "message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if 'audio' in content or "
    "'audio_url' in content %}{% set audio_count.value = audio_count.value + 1 %}Audio "
    "{{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def model(root, out):
    os.makedirs(out, exist_ok=True)
    src = os.path.join(root, "tests/fixtures/models/qwen2/model.safetensors")
    dst = os.path.join(out, "model.safetensors")
    if not os.path.exists(dst):
        os.symlink(src, dst)
    text = json.load(open(os.path.join(root, "tests/fixtures/models/qwen2/config.json")))
    M, D, L, F, P, DT = 16, 16, 2, 32, 1500, text["hidden_size"]
    cfg = {"architectures": ["Qwen2AudioForConditionalGeneration"], "model_type": "qwen2_audio",
           "audio_token_index": 371, "ignore_index": -100,
           "audio_config": {"model_type": "qwen2_audio_encoder", "num_mel_bins": M, "d_model": D,
                            "encoder_layers": L, "encoder_attention_heads": 2, "encoder_ffn_dim": F,
                            "max_source_positions": P, "activation_function": "gelu",
                            "scale_embedding": False},
           "text_config": text}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    json.dump({"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": M,
               "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
               "padding_side": "right", "padding_value": 0.0, "processor_class": "Qwen2AudioProcessor",
               "return_attention_mask": True, "sampling_rate": 16000},
              open(os.path.join(out, "preprocessor_config.json"), "w"), indent=1)
    rng = random.Random(36)

    def rand(shape, mean=0.0, std=0.3):
        n = 1
        for s in shape:
            n *= s
        return (shape, [mean + std * rng.uniform(-1, 1) for _ in range(n)])

    ts = [("audio_tower.conv1.weight",) + rand([D, M, 3], 0, 0.3), ("audio_tower.conv1.bias",) + rand([D], 0, 0.1),
          ("audio_tower.conv2.weight",) + rand([D, D, 3], 0, 0.3), ("audio_tower.conv2.bias",) + rand([D], 0, 0.1),
          ("audio_tower.embed_positions.weight", [P, D], sinusoids(P, D)),
          ("audio_tower.layer_norm.weight",) + rand([D], 1, 0.2), ("audio_tower.layer_norm.bias",) + rand([D], 0, 0.1),
          ("multi_modal_projector.linear.weight",) + rand([DT, D], 0, 0.4),
          ("multi_modal_projector.linear.bias",) + rand([DT], 0, 0.1)]
    for l in range(L):
        B = f"audio_tower.layers.{l}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            ts.append((B + "self_attn." + n + ".weight",) + rand([D, D], 0, 0.4))
            if n != "k_proj":
                ts.append((B + "self_attn." + n + ".bias",) + rand([D], 0, 0.1))
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            ts += [(B + n + ".weight",) + rand([D], 1, 0.2), (B + n + ".bias",) + rand([D], 0, 0.1)]
        ts += [(B + "fc1.weight",) + rand([F, D], 0, 0.4), (B + "fc1.bias",) + rand([F], 0, 0.1),
               (B + "fc2.weight",) + rand([D, F], 0, 0.4), (B + "fc2.bias",) + rand([D], 0, 0.1)]
    safetensors(os.path.join(out, "audio.safetensors"), ts)
    tok = json.load(open(os.path.join(root, "tests/fixtures/serve/tokenizer.json")))
    for i, t in ((371, "<|AUDIO|>"), (372, "<|audio_bos|>"), (373, "<|audio_eos|>")):
        tok["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    tc = json.load(open(os.path.join(root, "tests/fixtures/serve/tokenizer_config.json")))
    tc["chat_template"] = TEMPLATE
    json.dump(tc, open(os.path.join(out, "tokenizer_config.json"), "w"))


def clip(seconds, rate, channels, seed=1):
    """frames of channels floats in [-1, 1)"""
    rng = random.Random(seed)
    n = int(round(seconds * rate))
    f = [220.0 * (1 + c) + 37 * seed for c in range(channels)]
    return [[0.6 * math.sin(2 * math.pi * f[c] * i / rate) * math.exp(-i / (rate * 0.7)) +
             0.25 * math.sin(2 * math.pi * 3 * f[c] * i / rate) + 0.05 * rng.uniform(-1, 1)
             for c in range(channels)] for i in range(n)]


def wav_bytes(frames, rate, bits, is_float=False):
    ch = len(frames[0])
    if is_float:
        body = b"".join(struct.pack("<" + ("f" if bits == 32 else "d") * ch, *fr) for fr in frames)
    else:
        out = bytearray()
        top = 1 << (bits - 1)
        for fr in frames:
            for v in fr:
                q = max(-top, min(top - 1, int(math.floor(v * top))))
                if bits == 8:
                    out.append(q + 128)
                else:
                    out += (q & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
        body = bytes(out)
    tag = 3 if is_float else 1
    fmt = struct.pack("<HHIIHH", tag, ch, rate, rate * ch * bits // 8, ch * bits // 8, bits)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" +
            b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


if __name__ == "__main__":
    if sys.argv[1] == "model":
        model(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "wav":
        out, sec, rate, ch, bits = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        is_float = len(sys.argv) > 7 and sys.argv[7] == "float"
        seed = int(sys.argv[8]) if len(sys.argv) > 8 else 1
        open(out, "wb").write(wav_bytes(clip(sec, rate, ch, seed), rate, bits, is_float))
    else:
        sys.exit(__doc__)
