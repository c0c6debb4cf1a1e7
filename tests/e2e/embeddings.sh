#!/usr/bin/env bash
# POST /v1/embeddings end to end with the official openai client and raw
# fetch (tests/e2e/embeddings_test.mjs): every input form, float and base64,
# dimensions, usage, batch invariance, the 4xx answers of bad bodies; on a
# causal LM (the llama fixture: last-token pooling, normalised) and, with
# the sentence-transformers fixtures (tools/refgen/embed.py), on a BERT model
# against sentence-transformers' vectors. And `hearth embed`.
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
start_server "$tmp/err" --model "$tmp/tiny-chat" --threads 1 --device cpu
causal=http://127.0.0.1:$SERVER_PORT
bert=
if [ -f "$HEARTH_ROOT/tests/fixtures/embed/bert-mean/ref.json" ]; then
    start_server "$tmp/err2" --model "$HEARTH_ROOT/tests/fixtures/embed/bert-mean" --threads 1 --device cpu
    bert=http://127.0.0.1:$SERVER_PORT
fi
node "$HEARTH_ROOT/tests/e2e/embeddings_test.mjs" "$causal" "$HEARTH_ROOT" "$bert"

# hearth embed: a JSON line per input, the server's vectors
out=$(printf 'Hello world\n\nWhat does abate mean?\n' |
      "$HEARTH_BIN" embed --model "$tmp/tiny-chat" --file - --threads 1 --device cpu --dimensions 8)
python3 - "$out" "$causal" <<'PY'
import json, sys, urllib.request
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [l["index"] for l in lines] == [0, 1], lines
req = urllib.request.Request(sys.argv[2] + "/v1/embeddings", json.dumps(
    {"input": ["Hello world", "What does abate mean?"], "dimensions": 8}).encode())
srv = json.load(urllib.request.urlopen(req))["data"]
for l, s in zip(lines, srv):
    assert len(l["embedding"]) == 8 and max(abs(a - b) for a, b in zip(l["embedding"], s["embedding"])) < 1e-6, (l, s)
print("embed: hearth embed gives the server's vectors")
PY
# a checkpoint saved from the bare base model (Qwen3-Embedding's layout:
# no "model." prefix, no lm_head) embeds as the full one does
mkdir "$tmp/bare" && cp "$tmp/tiny-chat"/*.json "$tmp/bare/"
python3 - "$tmp/tiny-chat/model.safetensors" "$tmp/bare/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = {(k[6:] if k.startswith("model.") else k): v for k, v in json.loads(b[8:8 + n]).items()}
h.pop("lm_head.weight", None)  # its bytes stay, unreferenced
s = json.dumps(h).encode()
s += b" " * ((8 - len(s) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
PY
a=$("$HEARTH_BIN" embed --model "$tmp/tiny-chat" --text "Hello world" --threads 1 --device cpu)
b=$("$HEARTH_BIN" embed --model "$tmp/bare" --text "Hello world" --threads 1 --device cpu)
[ "$a" = "$b" ] || { echo "FAIL: the bare layout embeds differently"; exit 1; }
echo "embed: a checkpoint without the model. prefix gives the same vectors"
if "$HEARTH_BIN" embed --model "$tmp/tiny-chat" --text x --dimensions 9999 --device cpu 2>"$tmp/e"; then
    echo "FAIL: --dimensions 9999 accepted"; exit 1
fi
[ "$(wc -l <"$tmp/e")" = 1 ] || { echo "FAIL: not one line: $(cat "$tmp/e")"; exit 1; }
echo "embed: a bad --dimensions is one line and a non-zero exit"
