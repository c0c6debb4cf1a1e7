#!/usr/bin/env bash
# Images through the server on a Gemma-3 model made here: the gemma3_text
# fixture's text model, a random SigLIP tower (16x16 images, 4 image
# tokens), the tiny tokenizer with Gemma-3's three image tokens added and a
# chat template that writes <start_of_image> for an image part.
# /v1/models lists "image"; a chat request with a data: URL image answers,
# the same again is served from the prompt cache with the same output;
# bad image bytes, a template that drops the image and image-token text
# without an image are 400s naming the problem.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
m=$tmp/gemma3-vision
mkdir -p "$m"
ln -s "$root/tests/fixtures/models/gemma3_text/model.safetensors" "$m/model.safetensors"
python3 - "$root" "$m" <<'PY'
import json, random, struct, sys
root, m = sys.argv[1], sys.argv[2]
text = json.load(open(f"{root}/tests/fixtures/models/gemma3_text/config.json"))
text["eos_token_id"] = 370
json.dump({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
           "text_config": text, "mm_tokens_per_image": 4, "boi_token_index": 371,
           "eoi_token_index": 372, "image_token_index": 373, "eos_token_id": 370,
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8,
                             "intermediate_size": 16, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "image_size": 16, "patch_size": 4,
                             "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"}},
          open(f"{m}/config.json", "w"))
rng = random.Random(7)
P = "vision_tower.vision_model."
L = P + "encoder.layers.0."
ts = [(P + "embeddings.patch_embedding.weight", [8, 3, 4, 4], 0, .2), (P + "embeddings.patch_embedding.bias", [8], 0, .1),
      (P + "embeddings.position_embedding.weight", [16, 8], 0, .3), (P + "post_layernorm.weight", [8], 1, .2),
      (P + "post_layernorm.bias", [8], 0, .1), ("multi_modal_projector.mm_soft_emb_norm.weight", [8], 0, .2),
      ("multi_modal_projector.mm_input_projection_weight", [8, 64], 0, .4)]
for n in ("layer_norm1", "layer_norm2"):
    ts += [(L + n + ".weight", [8], 1, .2), (L + n + ".bias", [8], 0, .1)]
for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
    ts += [(L + "self_attn." + n + ".weight", [8, 8], 0, .5), (L + "self_attn." + n + ".bias", [8], 0, .1)]
ts += [(L + "mlp.fc1.weight", [16, 8], 0, .5), (L + "mlp.fc1.bias", [16], 0, .1),
       (L + "mlp.fc2.weight", [8, 16], 0, .3), (L + "mlp.fc2.bias", [8], 0, .1)]
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
for i, t in ((371, "<start_of_image>"), (372, "<end_of_image>"), (373, "<image_soft_token>")):
    tok["added_tokens"].append({"id": i, "content": t, "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
json.dump(tok, open(f"{m}/tokenizer.json", "w"))
cfg = json.load(open(f"{root}/tests/fixtures/serve/tokenizer_config.json"))
cfg["chat_template"] = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for p in m.content %}{% if p.type == 'image' %}<start_of_image>"
    "{% elif p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n")
json.dump(cfg, open(f"{m}/tokenizer_config.json", "w"))
# two 16x16 PNGs (different pixels) as data: URLs
import base64, zlib
def png(salt):
    raw = b"".join(b"\0" + bytes((x * 13 + y * 7 + salt) % 256 for x in range(48)) for y in range(16))
    c = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return b"\x89PNG\r\n\x1a\n" + c(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)) + c(b"IDAT", zlib.compress(raw)) + c(b"IEND", b"")
for i, salt in enumerate((0, 90)):
    open(f"{m}/../img{i}.url", "w").write("data:image/png;base64," + base64.b64encode(png(salt)).decode())
PY
start_server "$tmp/serve.log" --model "$m" --threads 2 || fail "server did not start"
api=http://127.0.0.1:$SERVER_PORT
curl -sf "$api/v1/models" | python3 -c '
import json, sys
m = json.load(sys.stdin)["data"][0]
assert m["modalities"] == ["text", "image"], m' || fail "/v1/models modalities"
body() { # url, extra text
    printf '{"messages": [{"role": "user", "content": [{"type": "text", "text": "what is %s"}, {"type": "image_url", "image_url": {"url": "%s"}}]}], "max_tokens": 6, "temperature": 0}' "$2" "$1"
}
chat() { curl -s -o "$tmp/out" -w '%{http_code}' "$api/v1/chat/completions" -H 'Content-Type: application/json' -d @"$1"; }
body "$(cat "$tmp/img0.url")" "this" > "$tmp/req0"
code=$(chat "$tmp/req0"); [ "$code" = 200 ] || fail "image request: HTTP $code $(cat "$tmp/out")"
cp "$tmp/out" "$tmp/first"
code=$(chat "$tmp/req0"); [ "$code" = 200 ] || fail "image request again: HTTP $code"
python3 - "$tmp/first" "$tmp/out" <<'PY' || fail "the repeat differs or was not cached"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"], (a, b)
pt = a["usage"]["prompt_tokens"]
assert pt >= 4 + 5, pt  # the image's 4 tokens, boi/eoi, the text
cached = (b["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
assert cached > 0, b["usage"]
print("vision: %d prompt tokens, %d cached on the repeat" % (pt, cached))
PY
curl -sf "$api/stats" | python3 -c '
import json, sys
im = json.load(sys.stdin)["images"]
assert im == {"encoded": 1, "cached": 1}, im' || fail "/stats images: the repeat was not served from the features cache"
body "$(cat "$tmp/img1.url")" "this" > "$tmp/req1"
code=$(chat "$tmp/req1"); [ "$code" = 200 ] || fail "another image: HTTP $code"
body "$(head -c 118 "$tmp/img0.url")" "this" > "$tmp/bad" # cut inside the image data
code=$(chat "$tmp/bad"); [ "$code" = 400 ] || fail "bad image bytes: HTTP $code"
grep -qF "messages.0.content.1: image_url: bad PNG" "$tmp/out" || fail "bad bytes message: $(cat "$tmp/out")"
python3 - "$tmp/img0.url" > "$tmp/nine" <<'PY'
import json, sys
u = open(sys.argv[1]).read()
print(json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": u}}] * 9}]}))
PY
code=$(chat "$tmp/nine"); [ "$code" = 400 ] || fail "nine images: HTTP $code"
grep -qF "messages.0.content.8: at most 8 images a request" "$tmp/out" || fail "nine images: $(cat "$tmp/out")"
printf '{"messages": [{"role": "user", "content": "<image_soft_token> hi"}], "max_tokens": 2}' > "$tmp/stray"
code=$(chat "$tmp/stray"); [ "$code" = 400 ] || fail "image token text without an image: HTTP $code $(cat "$tmp/out")"
printf '{"messages": [{"role": "user", "content": "plain text still works"}], "max_tokens": 2}' > "$tmp/plain"
code=$(chat "$tmp/plain"); [ "$code" = 200 ] || fail "a text request: HTTP $code $(cat "$tmp/out")"
echo "vision: image requests answered, cached, and refused cleanly"

# the same image through /v1/messages (a base64 source) and /v1/responses
# (input_image): the chat route's answer, and each route's error shape
python3 - "$api" "$tmp/img0.url" "$tmp/first" <<'PY' || fail "images on /v1/messages and /v1/responses"
import json, sys, urllib.request, urllib.error
api, url, first = sys.argv[1], open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
want = first["choices"][0]["message"]["content"]
def post(path, body):
    req = urllib.request.Request(api + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
data = url.split(",", 1)[1]
st, o = post("/v1/messages", {"model": "gemma3-vision", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "what is this"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]})
assert st == 200 and o["content"][0]["text"] == want, (st, o, want)
st, o = post("/v1/responses", {"max_output_tokens": 6, "temperature": 0, "input": [{"role": "user", "content": [
    {"type": "input_text", "text": "what is this"}, {"type": "input_image", "image_url": url}]}]})
assert st == 200 and o["output"][0]["content"][0]["text"] == want, (st, o, want)
st, o = post("/v1/messages", {"model": "gemma3-vision", "max_tokens": 6, "messages": [{"role": "user", "content": [
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data[:40]}}]}]})
assert st == 400 and o["type"] == "error" and "bad PNG" in o["error"]["message"], (st, o)
st, o = post("/v1/messages", {"model": "gemma3-vision", "max_tokens": 6, "messages": [{"role": "user", "content": [
    {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})
assert st == 400 and "image sources of type file" in o["error"]["message"], (st, o)
st, o = post("/v1/responses", {"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": url}]}]})
assert st == 400 and "belong in user messages" in o["error"]["message"] and o["error"]["param"] == "input", (st, o)
st, o = post("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]})
assert st == 400 and "input_image" in o["error"]["message"], (st, o)
print("vision: the image through /v1/messages and /v1/responses answers as on the chat route")
PY

# the library (hr_gen_params.images) through hearth generate: the same answer
python3 -c "import base64,sys; sys.stdout.buffer.write(base64.b64decode(open('$tmp/img0.url').read().split(',',1)[1]))" >"$tmp/img0.png"
gen_msgs='[{"role": "user", "content": [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "not read"}}]}]'
"$bin" generate --model "$m" --messages "$gen_msgs" --image "$tmp/img0.png" --max-tokens 6 --temp 0 --json \
    --threads 2 >"$tmp/gen.json" 2>"$tmp/gen.err" || fail "generate --image: $(cat "$tmp/gen.err")"
python3 - "$tmp/gen.json" "$tmp/first" <<'PY' || fail "generate --image answers otherwise than the server"
import json, sys
g, s = (json.load(open(p)) for p in sys.argv[1:])
assert g["text"] == s["choices"][0]["message"]["content"], (g["text"], s)
assert len(g["prompt_tokens"]) == s["usage"]["prompt_tokens"], (g, s["usage"])
PY
"$bin" generate --model "$m" --chat "what is this" --image "$tmp/img0.png" --max-tokens 2 --threads 2 >/dev/null 2>&1 ||
    fail "generate --chat --image"
gen_bad() { # expected error text, then the flags
    local want=$1; shift
    if "$bin" generate --max-tokens 2 --threads 2 "$@" >/dev/null 2>"$tmp/gen.err"; then fail "accepted: $*"; fi
    [ "$(wc -l <"$tmp/gen.err")" = 1 ] && grep -qF -- "$want" "$tmp/gen.err" || fail "$*: $(cat "$tmp/gen.err")"
}
gen_bad "does not accept images" --model "$root/tests/fixtures/models/gemma3_text" --chat hi --image "$tmp/img0.png"
gen_bad "images[0]" --model "$m" --chat hi --image "$tmp/img0.url"
gen_bad "placed 1 image, the messages hold 2" --model "$m" --messages "$gen_msgs" --image "$tmp/img0.png" --image "$tmp/img0.png"
gen_bad "--image goes with --chat or --messages" --model "$m" --prompt hi --image "$tmp/img0.png"
echo "vision: hearth generate --image (the library's images) answers as the server does"
