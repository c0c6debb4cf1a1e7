"""A servable model directory around one transformers media fixture, and the
chat request that renders to its ref.json prompt (tests/e2e/media_parity.sh).

    parity_model.py FAMILY FIXTURE_DIR OUT_DIR REQUEST_JSON

FAMILY is gemma3, qwen2_5_vl or qwen2_audio. OUT_DIR gets the fixture's
model files as symlinks, a made-up tokenizer.json (WordPiece over "w0" ..
"wN-1", one word per id, a Whitespace pre-tokenizer, the family's special
and media tokens as added tokens under the texts the server and the real
templates use) and a tokenizer_config.json whose chat template writes the
bos token where the prompt starts with it, then a user message's parts in
order: a text part as is, an image or audio part as the family's real
template writes it (Gemma-3: <start_of_image>; Qwen2.5-VL:
<|vision_start|><|image_pad|><|vision_end|>; Qwen2-Audio:
<|audio_bos|><|AUDIO|><|audio_eos|>). The server expands the placeholder to
the media's tokens (src/api/images.c; Gemma-3's "\\n\\n" around the image
is whitespace to this tokenizer). REQUEST_JSON: the content parts
(text parts "wA wB ..." from ref.json's text ids, images as data: URLs,
clips as base64 WAVs), ref.json's prompt and greedy tokens, and the
`hearth generate` arguments of the same message.
"""
import base64
import json
import os
import sys

FAMILIES = {
    # media begin, run token, end; the texts; what the template writes for a part
    "gemma3": {
        "cfg": ("boi_token_index", "image_token_index", "eoi_token_index"),
        "texts": ("<start_of_image>", "<image_soft_token>", "<end_of_image>"),
        "part": "image", "writes": "<start_of_image>",
    },
    "qwen2_5_vl": {
        "cfg": ("vision_start_token_id", "image_token_id", "vision_end_token_id"),
        "texts": ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>"),
        "part": "image", "writes": "<|vision_start|><|image_pad|><|vision_end|>",
        "more": (("video_token_id", "<|video_pad|>"),),
    },
    "qwen2_audio": {
        "cfg": (None, "audio_token_index", None),  # bos/eos of the run: 372/373 by text
        "texts": ("<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"),
        "part": "audio", "writes": "<|audio_bos|><|AUDIO|><|audio_eos|>",
    },
}


def main():
    family, fx, out, req = sys.argv[1:5]
    f = FAMILIES[family]
    ref = json.load(open(f"{fx}/ref.json"))
    cfg = json.load(open(f"{fx}/model/config.json"))
    text = cfg["text_config"]
    vocab_size = text["vocab_size"]
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(f"{fx}/model"):
        os.symlink(os.path.abspath(f"{fx}/model/{name}"), f"{out}/{name}")

    run = cfg[f["cfg"][1]]
    if family == "qwen2_audio":  # the run's bos/eos follow the audio token in the vocab
        begin, end = run + 1, run + 2
    else:
        begin, end = cfg[f["cfg"][0]], cfg[f["cfg"][2]]
    bos, eos = text["bos_token_id"], text["eos_token_id"]
    special = {bos: "<bos>", eos: "<eos>", begin: f["texts"][0], run: f["texts"][1], end: f["texts"][2]}
    for key, t in f.get("more", ()):
        special[cfg[key]] = t
    vocab = {special.get(i, f"w{i}"): i for i in range(vocab_size)}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in sorted(special.items())]
    json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
               "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
               "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
               "model": {"type": "WordPiece", "unk_token": "w0", "continuing_subword_prefix": "##",
                         "max_input_chars_per_word": 100, "vocab": vocab}},
              open(f"{out}/tokenizer.json", "w"))

    prompt = ref["prompt"]
    starts_bos = prompt[0] == bos
    template = ("{{ bos_token }}" if starts_bos else "") + (
        "{% for m in messages %}{% for p in m.content %}"
        "{% if p.type == 'text' %}{{ p.text }} "
        "{% elif p.type == '" + f["part"] + "' %}" + f["writes"] + " {% endif %}"
        "{% endfor %}{% endfor %}")
    json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "chat_template": template},
              open(f"{out}/tokenizer_config.json", "w"))

    # the prompt cut into text runs and media spans (begin, run x n, end)
    if family == "qwen2_audio":
        media = [(f"{fx}/{c['file']}", c["tokens"]) for c in ref["clips"]]
    else:
        media = [(f"{fx}/{ref['images'][i]['file']}",
                  ref["images"][i].get("tokens", ref.get("mm_tokens"))) for i in ref["prompt_images"]]
    parts, words, k = [], [], 0
    i = 1 if starts_bos else 0
    while i < len(prompt):
        t = prompt[i]
        if t != begin:
            if t in special:
                sys.exit(f"{family}: prompt token {t} at {i} is a special token outside a media span")
            words.append(f"w{t}")
            i += 1
            continue
        j = i + 1
        while j < len(prompt) and prompt[j] == run:
            j += 1
        if j >= len(prompt) or prompt[j] != end or k >= len(media) or j - i - 1 != media[k][1]:
            sys.exit(f"{family}: the media span at {i} is not begin, {media[k][1] if k < len(media) else '?'}"
                     " run tokens, end")
        if words:
            parts.append({"type": "text", "text": " ".join(words)})
            words = []
        data = base64.b64encode(open(media[k][0], "rb").read()).decode()
        if f["part"] == "image":
            parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}})
        else:
            parts.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
        k += 1
        i = j + 1
    if words:
        parts.append({"type": "text", "text": " ".join(words)})
    if k != len(media):
        sys.exit(f"{family}: the prompt places {k} media, ref.json has {len(media)}")
    # the same message for `hearth generate --json` (the media as files), which
    # reports the prompt's ids: media parts stand in, --image/--audio carry them
    flag = "--image" if f["part"] == "image" else "--audio"
    gen = [{"type": "image_url", "image_url": {"url": "-"}} if p["type"] == "image_url"
           else {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
           if p["type"] == "input_audio" else p for p in parts]
    argv = ["--messages", json.dumps([{"role": "user", "content": gen}])]
    for path, _ in media:
        argv += [flag, path]
    json.dump({"family": family, "content": parts, "prompt": prompt, "greedy": ref["greedy"],
               "generate": argv}, open(req, "w"))


if __name__ == "__main__":
    main()
