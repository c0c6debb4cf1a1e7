#!/usr/bin/env bash
# Qwen2.5-VL images through the server on a model made here: the qwen2
# fixture's text model in the Hub's Qwen2.5-VL layout (text fields at the
# top of config.json, 4.x's rope_scaling of type mrope), a random ViT
# (patch 4, merge 2, windows of 3 x 3 merged patches, a full-attention
# block), the tiny tokenizer with Qwen's three vision tokens added and a
# chat template that writes <|vision_start|><|image_pad|><|vision_end|> for
# an image part. Images of two sizes place 4 and 15 image tokens (their
# smart_resize sizes); the repeat comes from the prompt cache with the same
# output; hearth generate --image answers as the server; a bad count is a
# 400. (Parity with transformers: test_vision and test_engine_vision.)
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
m=$tmp/qwen-vl
mkdir -p "$m"
ln -s "$root/tests/fixtures/models/qwen2/model.safetensors" "$m/model.safetensors"
python3 - "$root" "$m" <<'PY'
import json, random, struct, sys
root, m = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{root}/tests/fixtures/models/qwen2/config.json"))
cfg.pop("rope_parameters")
cfg.update({"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "eos_token_id": 370, "vision_start_token_id": 371, "vision_end_token_id": 372,
            "image_token_id": 373, "video_token_id": 374,
            "vision_config": {"depth": 2, "hidden_size": 16, "hidden_act": "silu", "intermediate_size": 24,
                              "num_heads": 2, "in_channels": 3, "patch_size": 4, "spatial_merge_size": 2,
                              "temporal_patch_size": 2, "window_size": 24, "out_hidden_size": 64,
                              "fullatt_block_indexes": [1]}})
json.dump(cfg, open(f"{m}/config.json", "w"))
json.dump({"min_pixels": 64, "max_pixels": 4096, "patch_size": 4, "merge_size": 2, "temporal_patch_size": 2,
           "image_processor_type": "Qwen2VLImageProcessor", "resample": 3,
           "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]},
          open(f"{m}/preprocessor_config.json", "w"))
rng = random.Random(11)
ts = [("visual.patch_embed.proj.weight", [16, 3, 2, 4, 4], 0, .15), ("visual.merger.ln_q.weight", [16], 1, .2),
      ("visual.merger.mlp.0.weight", [64, 64], 0, .2), ("visual.merger.mlp.0.bias", [64], 0, .1),
      ("visual.merger.mlp.2.weight", [64, 64], 0, .2), ("visual.merger.mlp.2.bias", [64], 0, .1)]
for l in range(2):
    B = f"visual.blocks.{l}."
    ts += [(B + "norm1.weight", [16], 1, .2), (B + "norm2.weight", [16], 1, .2),
           (B + "attn.qkv.weight", [48, 16], 0, .4), (B + "attn.qkv.bias", [48], 0, .1),
           (B + "attn.proj.weight", [16, 16], 0, .4), (B + "attn.proj.bias", [16], 0, .1)]
    for n, shape in (("gate_proj", [24, 16]), ("up_proj", [24, 16]), ("down_proj", [16, 24])):
        ts += [(B + "mlp." + n + ".weight", shape, 0, .4), (B + "mlp." + n + ".bias", shape[:1], 0, .1)]
hdr, data = {}, b""
for name, shape, mean, std in ts:
    n = 1
    for s in shape:
        n *= s
    vals = struct.pack(f"<{n}f", *[mean + std * rng.uniform(-1, 1) for _ in range(n)])
    hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(vals)]}
    data += vals
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(f"{m}/vision.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
tok = json.load(open(f"{root}/tests/fixtures/serve/tokenizer.json"))
for i, t in ((371, "<|vision_start|>"), (372, "<|vision_end|>"), (373, "<|image_pad|>")):
    tok["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
json.dump(tok, open(f"{m}/tokenizer.json", "w"))
tc = json.load(open(f"{root}/tests/fixtures/serve/tokenizer_config.json"))
tc["chat_template"] = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for p in m.content %}{% if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n")
json.dump(tc, open(f"{m}/tokenizer_config.json", "w"))
import base64, zlib
def png(w, h, salt):
    raw = b"".join(b"\0" + bytes((x * 13 + y * 7 + salt) % 256 for x in range(3 * w)) for y in range(h))
    c = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return b"\x89PNG\r\n\x1a\n" + c(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + c(b"IDAT", zlib.compress(raw)) + c(b"IEND", b"")
for i, (w, h, salt) in enumerate(((16, 16, 0), (40, 23, 90))):
    open(f"{m}/../img{i}.url", "w").write("data:image/png;base64," + base64.b64encode(png(w, h, salt)).decode())
PY
start_server "$tmp/serve.log" --model "$m" --threads 2 || fail "server did not start: $(tail -3 "$tmp/serve.log")"
api=http://127.0.0.1:$SERVER_PORT
curl -sf "$api/v1/models" | python3 -c '
import json, sys
m = json.load(sys.stdin)["data"][0]
assert m["modalities"] == ["text", "image"], m' || fail "/v1/models modalities"
body() { # url, extra text
    printf '{"messages": [{"role": "user", "content": [{"type": "text", "text": "what is %s"}, {"type": "image_url", "image_url": {"url": "%s"}}]}], "max_tokens": 6, "temperature": 0}' "$2" "$1"
}
chat() { curl -s -o "$tmp/out" -w '%{http_code}' "$api/v1/chat/completions" -H 'Content-Type: application/json' -d @"$1"; }
for i in 0 1; do
    body "$(cat "$tmp/img$i.url")" "this" > "$tmp/req$i"
    code=$(chat "$tmp/req$i"); [ "$code" = 200 ] || fail "image $i: HTTP $code $(cat "$tmp/out")"
    cp "$tmp/out" "$tmp/first$i"
done
code=$(chat "$tmp/req1"); [ "$code" = 200 ] || fail "image 1 again: HTTP $code"
python3 - "$tmp/first0" "$tmp/first1" "$tmp/out" <<'PY' || fail "token counts, or the repeat differs or was not cached"
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
pa, pb = a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]
assert pb - pa == 15 - 4, (pa, pb)  # 40x23 -> 40x24: 5 x 3 merged patches; 16x16: 2 x 2
assert b["choices"][0]["message"]["content"] == c["choices"][0]["message"]["content"], (b, c)
cached = (c["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
assert cached > 0, c["usage"]
print("vision_qwen: %d and %d prompt tokens, %d cached on the repeat" % (pa, pb, cached))
PY
printf '{"messages": [{"role": "user", "content": "<|image_pad|> hi"}], "max_tokens": 2}' > "$tmp/stray"
code=$(chat "$tmp/stray"); [ "$code" = 400 ] || fail "image token text without an image: HTTP $code $(cat "$tmp/out")"
printf '{"messages": [{"role": "user", "content": "plain text still works"}], "max_tokens": 2}' > "$tmp/plain"
code=$(chat "$tmp/plain"); [ "$code" = 200 ] || fail "a text request: HTTP $code $(cat "$tmp/out")"
python3 -c "import base64,sys; sys.stdout.buffer.write(base64.b64decode(open('$tmp/img1.url').read().split(',',1)[1]))" >"$tmp/img1.png"
gen_msgs='[{"role": "user", "content": [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "not read"}}]}]'
"$bin" generate --model "$m" --messages "$gen_msgs" --image "$tmp/img1.png" --max-tokens 6 --temp 0 --json \
    --threads 2 >"$tmp/gen.json" 2>"$tmp/gen.err" || fail "generate --image: $(cat "$tmp/gen.err")"
python3 - "$tmp/gen.json" "$tmp/first1" <<'PY' || fail "generate --image answers otherwise than the server"
import json, sys
g, s = (json.load(open(p)) for p in sys.argv[1:])
assert g["text"] == s["choices"][0]["message"]["content"], (g["text"], s)
assert len(g["prompt_tokens"]) == s["usage"]["prompt_tokens"], (g, s["usage"])
PY
if "$bin" generate --model "$m" --messages "$gen_msgs" --image "$tmp/img1.png" --image "$tmp/img1.png" \
    --max-tokens 2 --threads 2 >/dev/null 2>"$tmp/gen.err"; then fail "two images, one placed: accepted"; fi
grep -qF "placed 1 image, the messages hold 2" "$tmp/gen.err" || fail "two images: $(cat "$tmp/gen.err")"
echo "vision_qwen: Qwen2.5-VL image requests answered, cached, refused cleanly; generate --image agrees"
